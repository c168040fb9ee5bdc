//! Buffers (`ggml_backend_buffer_*`): one allocation of a buffer type, described by the C
//! struct `ggml_backend_buffer` that backends read and write directly.
//!
//! Ownership: [`ggml_backend_buffer_init`] allocates the struct on the Rust heap and returns
//! it to the caller; [`ggml_backend_buffer_free`] calls the backend's `free_buffer` (which
//! releases the backend's `context`) and then frees the struct. A NULL buffer aborts in every
//! function that stock guards with `GGML_ASSERT(buffer)`.

use std::os::raw::{c_char, c_void};

use ggml_sys::{
    ggml_backend_buffer, ggml_backend_buffer_i, ggml_backend_buffer_t, ggml_backend_buffer_type_t,
    ggml_backend_buffer_usage, ggml_status, ggml_tensor, GGML_STATUS_SUCCESS,
};

use crate::buffer_type::{self, buft_ref};
use crate::ffi::{self, c_name, export, handle, non_null};
use crate::iface::required;

/// Borrows the buffer behind `buffer`, aborting naming `func` when it is NULL.
///
/// # Safety
/// `buffer` must be NULL or point to a live buffer.
pub(crate) unsafe fn buffer_ref<'a>(
    buffer: ggml_backend_buffer_t,
    func: &str,
) -> &'a ggml_backend_buffer {
    // SAFETY: forwards the contract of `buffer_ref`: `buffer` is NULL or a live buffer.
    unsafe { non_null(buffer, func, "buffer") }
}

/// The type of `buffer`, borrowed; aborts naming `func` (the buffer type function that needs
/// it) when it is NULL, as the call through that function did.
fn buft_of<'a>(buffer: &ggml_backend_buffer, func: &str) -> &'a ggml_sys::ggml_backend_buffer_type {
    // SAFETY: a buffer's type is NULL or a live object of its backend library, which outlives
    // every buffer of it.
    unsafe { buft_ref(buffer.buft, func) }
}

export! {
    /// Creates a buffer of type `buft` over the backend's `context`, `size` bytes, usage "any"
    /// (stock `ggml_backend_buffer_init`). Backends call this from their `alloc_buffer`. The
    /// caller owns the result; free it with [`ggml_backend_buffer_free`], which hands `context`
    /// back to `iface.free_buffer`.
    ///
    /// # Safety
    /// `iface`'s callbacks must accept the returned buffer and `context`.
    pub unsafe fn ggml_backend_buffer_init(
        buft: ggml_backend_buffer_type_t,
        iface: ggml_backend_buffer_i,
        context: *mut c_void,
        size: usize,
    ) -> ggml_backend_buffer_t {
        buffer_type::new_buffer(buft, iface, context, size)
    }
}

export! {
    /// The name of the buffer's type (stock `ggml_backend_buffer_name`). Aborts on NULL.
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_buffer_name(buffer: ggml_backend_buffer_t) -> *const c_char {
        // SAFETY: forwards the contract of `ggml_backend_buffer_name`: `buffer` is NULL or live
        // (`buffer_ref` aborts on NULL).
        let b = unsafe { buffer_ref(buffer, F) };
        buffer_type::name(buft_of(b, c_name!(buffer_type::ggml_backend_buft_name)))
    }
}

export! {
    /// Frees `buffer`: the backend's `free_buffer` first (when it has one), then the struct
    /// itself (stock `ggml_backend_buffer_free`). NULL is a no-op.
    ///
    /// # Safety
    /// `buffer` must be NULL or a live buffer made by [`ggml_backend_buffer_init`], not used
    /// afterwards.
    pub unsafe fn ggml_backend_buffer_free(buffer: ggml_backend_buffer_t) {
        // SAFETY: forwards the contract of `ggml_backend_buffer_free` to `free`, whose own it is:
        // `buffer` is NULL or a live buffer made by `ggml_backend_buffer_init`, not used afterwards.
        unsafe { free(buffer) }
    }
}

/// The body of [`ggml_backend_buffer_free`], for the library's own callers. It takes the C
/// pointer, not a borrow: the struct is freed.
///
/// # Safety
/// `buffer` must be NULL or a live buffer made by [`new`], not used afterwards.
pub(crate) unsafe fn free(buffer: ggml_backend_buffer_t) {
    if buffer.is_null() {
        return;
    }
    crate::sanitize::buffer_free(buffer);
    // SAFETY: non-NULL and live by the caller's contract.
    if let Some(f) = unsafe { (*buffer).iface.free_buffer } {
        // SAFETY: the backend's callback, called once with its own buffer.
        unsafe { f(buffer) };
    }
    // SAFETY: the struct was allocated by Box in `new` and is not used again.
    drop(unsafe { Box::from_raw(buffer) });
}

export! {
    /// The buffer's size in bytes (stock `ggml_backend_buffer_get_size`). Aborts on NULL.
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_buffer_get_size(buffer: ggml_backend_buffer_t) -> usize {
        // SAFETY: forwards the contract of `ggml_backend_buffer_get_size`: `buffer` is NULL or live
        // (`buffer_ref` aborts on NULL).
        unsafe { buffer_ref(buffer, F) }.size
    }
}

export! {
    /// The buffer's base address (stock `ggml_backend_buffer_get_base`): NULL for a zero-sized
    /// buffer (unless it is a meta buffer) and for one without `get_base` (a multi-buffer);
    /// otherwise the backend's answer, which must not be NULL (abort). Aborts on a NULL buffer.
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_buffer_get_base(buffer: ggml_backend_buffer_t) -> *mut c_void {
        // SAFETY: forwards the contract of `ggml_backend_buffer_get_base`: `buffer` is NULL or live
        // (`buffer_ref` aborts on NULL).
        base(unsafe { buffer_ref(buffer, F) })
    }
}

/// The body of [`ggml_backend_buffer_get_base`], for the library's own callers.
pub(crate) fn base(buffer: &ggml_backend_buffer) -> *mut c_void {
    const F: &str = c_name!(ggml_backend_buffer_get_base);
    // SAFETY: `buffer` is live; the meta check only compares its interface.
    if buffer.size == 0 && !unsafe { ggml_sys::ggml_backend_buffer_is_meta(handle(buffer)) } {
        return std::ptr::null_mut();
    }
    let Some(get_base) = buffer.iface.get_base else {
        return std::ptr::null_mut();
    };
    // SAFETY: the backend's own callback with its buffer, live while borrowed.
    let base = unsafe { get_base(handle(buffer)) };
    if base.is_null() {
        ffi::fatal(F, "backend buffer base cannot be NULL");
    }
    base
}

export! {
    /// Lets the buffer's backend initialise `tensor` once it has an address in `buffer` (stock
    /// `ggml_backend_buffer_init_tensor`); success when the backend needs nothing. Aborts on a
    /// NULL buffer.
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer; `tensor` must point to a live tensor.
    pub unsafe fn ggml_backend_buffer_init_tensor(
        buffer: ggml_backend_buffer_t,
        tensor: *mut ggml_tensor,
    ) -> ggml_status {
        // SAFETY: the buffer is NULL (abort) or live and `tensor` a live tensor placed in it (`#
        // Safety`).
        unsafe { init_tensor(buffer_ref(buffer, F), tensor) }
    }
}

/// The body of [`ggml_backend_buffer_init_tensor`], for the library's own callers.
///
/// # Safety
/// `tensor` must point to a live tensor placed in `buffer`, not borrowed elsewhere (the backend
/// may write it).
pub(crate) unsafe fn init_tensor(
    buffer: &ggml_backend_buffer,
    tensor: *mut ggml_tensor,
) -> ggml_status {
    match buffer.iface.init_tensor {
        // SAFETY: the backend's own callback with its buffer and a tensor placed in it.
        Some(f) => unsafe { f(handle(buffer), tensor) },
        None => GGML_STATUS_SUCCESS,
    }
}

export! {
    /// Sets every byte of the buffer to `value` (stock `ggml_backend_buffer_clear`); nothing for a
    /// zero-sized buffer. Aborts on NULL.
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_buffer_clear(buffer: ggml_backend_buffer_t, value: u8) {
        // SAFETY: forwards the contract of `ggml_backend_buffer_clear`: `buffer` is NULL or live
        // (`buffer_ref` aborts on NULL).
        clear(unsafe { buffer_ref(buffer, F) }, value)
    }
}

/// The body of [`ggml_backend_buffer_clear`], for the library's own callers.
pub(crate) fn clear(buffer: &ggml_backend_buffer, value: u8) {
    const F: &str = c_name!(ggml_backend_buffer_clear);
    if buffer.size == 0 {
        return;
    }
    let f = required(buffer.iface.clear, F, "clear");
    // SAFETY: the backend's own callback with its buffer; it writes the memory behind
    // `context`, not the struct.
    unsafe { f(handle(buffer), value) }
}

export! {
    /// The alignment of the buffer's type (stock `ggml_backend_buffer_get_alignment`).
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_buffer_get_alignment(buffer: ggml_backend_buffer_t) -> usize {
        // SAFETY: forwards the contract of `ggml_backend_buffer_get_alignment`: `buffer` is NULL or
        // live (`buffer_ref` aborts on NULL).
        alignment(unsafe { buffer_ref(buffer, F) })
    }
}

/// The body of [`ggml_backend_buffer_get_alignment`], for the library's own callers.
pub(crate) fn alignment(buffer: &ggml_backend_buffer) -> usize {
    const F: &str = c_name!(buffer_type::ggml_backend_buft_get_alignment);
    buffer_type::alignment(buft_of(buffer, F))
}

export! {
    /// The max size of the buffer's type (stock `ggml_backend_buffer_get_max_size`).
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_buffer_get_max_size(buffer: ggml_backend_buffer_t) -> usize {
        // SAFETY: forwards the contract of `ggml_backend_buffer_get_max_size`: `buffer` is NULL or
        // live (`buffer_ref` aborts on NULL).
        let b = unsafe { buffer_ref(buffer, F) };
        buffer_type::max_size(buft_of(
            b,
            c_name!(buffer_type::ggml_backend_buft_get_max_size),
        ))
    }
}

export! {
    /// Bytes `tensor` needs in the buffer's type (stock `ggml_backend_buffer_get_alloc_size`).
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer; `tensor` must point to a live tensor.
    pub unsafe fn ggml_backend_buffer_get_alloc_size(
        buffer: ggml_backend_buffer_t,
        tensor: *const ggml_tensor,
    ) -> usize {
        // SAFETY: forwards the contract of `ggml_backend_buffer_get_alloc_size`: `buffer` is NULL
        // or live (`buffer_ref` aborts on NULL).
        let b = unsafe { buffer_ref(buffer, F) };
        // SAFETY: forwards the contract of `ggml_backend_buffer_get_alloc_size`: `tensor` points to
        // a live tensor (and `non_null` aborts should it be NULL).
        let t = unsafe {
            non_null(
                tensor,
                c_name!(buffer_type::ggml_backend_buft_get_alloc_size),
                "tensor",
            )
        };
        alloc_size(b, t)
    }
}

/// The body of [`ggml_backend_buffer_get_alloc_size`], for the library's own callers.
pub(crate) fn alloc_size(buffer: &ggml_backend_buffer, tensor: &ggml_tensor) -> usize {
    const F: &str = c_name!(buffer_type::ggml_backend_buft_get_alloc_size);
    buffer_type::alloc_size(buft_of(buffer, F), tensor)
}

export! {
    /// Whether the buffer's type is host memory (stock `ggml_backend_buffer_is_host`).
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_buffer_is_host(buffer: ggml_backend_buffer_t) -> bool {
        // SAFETY: forwards the contract of `ggml_backend_buffer_is_host`: `buffer` is NULL or live
        // (`buffer_ref` aborts on NULL).
        is_host(unsafe { buffer_ref(buffer, F) })
    }
}

/// The body of [`ggml_backend_buffer_is_host`], for the library's own callers (the scheduler
/// asks it for every input of a split).
pub(crate) fn is_host(buffer: &ggml_backend_buffer) -> bool {
    const F: &str = c_name!(buffer_type::ggml_backend_buft_is_host);
    buffer_type::is_host(buft_of(buffer, F))
}

export! {
    /// The buffer's usage (stock `ggml_backend_buffer_get_usage`). Aborts on NULL.
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_buffer_get_usage(
        buffer: ggml_backend_buffer_t,
    ) -> ggml_backend_buffer_usage {
        // SAFETY: forwards the contract of `ggml_backend_buffer_get_usage`: `buffer` is NULL or
        // live (`buffer_ref` aborts on NULL).
        unsafe { buffer_ref(buffer, F) }.usage
    }
}

export! {
    /// The buffer's type (stock `ggml_backend_buffer_get_type`). Aborts on NULL.
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_buffer_get_type(
        buffer: ggml_backend_buffer_t,
    ) -> ggml_backend_buffer_type_t {
        // SAFETY: forwards the contract of `ggml_backend_buffer_get_type`: `buffer` is NULL or live
        // (`buffer_ref` aborts on NULL).
        unsafe { buffer_ref(buffer, F) }.buft
    }
}

export! {
    /// Lets the backend drop per-tensor state of the buffer (stock `ggml_backend_buffer_reset`);
    /// nothing when it has no `reset`. Aborts on NULL.
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_buffer_reset(buffer: ggml_backend_buffer_t) {
        // SAFETY: forwards the contract of `ggml_backend_buffer_reset`: `buffer` is NULL or live
        // (`buffer_ref` aborts on NULL).
        if let Some(f) = unsafe { buffer_ref(buffer, F) }.iface.reset {
            // SAFETY: the backend's callback, called with its own buffer.
            unsafe { f(buffer) }
        }
    }
}

export! {
    /// Copies `src` into `dst` through the `cpy_tensor` of the buffer that holds `dst`'s storage
    /// (its view source's buffer for a view), stock `ggml_backend_buffer_copy_tensor`. Returns
    /// false when that buffer has no `cpy_tensor` or the backend declines, so the caller falls
    /// back to a copy through host memory. Aborts when `src`, `dst` or `dst`'s buffer is NULL.
    ///
    /// # Safety
    /// `src` and `dst` must be NULL or point to live tensors.
    pub unsafe fn ggml_backend_buffer_copy_tensor(
        src: *const ggml_tensor,
        dst: *mut ggml_tensor,
    ) -> bool {
        // SAFETY: `dst` is NULL (abort) or live and `src` is live (`# Safety`).
        unsafe { copy_tensor(src, non_null(dst, F, "dst"), F) }
    }
}

/// The body of [`ggml_backend_buffer_copy_tensor`], whose name `func` its aborts carry, for
/// the library's own callers.
///
/// # Safety
/// `src` must point to a live tensor (it goes to the backend as is, unchecked as in stock).
pub(crate) unsafe fn copy_tensor(src: *const ggml_tensor, dst: &ggml_tensor, func: &str) -> bool {
    // SAFETY: `dst` is live, so is its view source when set.
    let dst_buf = unsafe { crate::tensor::meta::storage_buffer(dst) };
    // SAFETY: a tensor's buffer is live while the tensor is.
    let b = unsafe { non_null(dst_buf, func, "dst->buffer") };
    match b.iface.cpy_tensor {
        // SAFETY: the buffer's own callback with live tensors; it writes `dst`'s data, not its
        // header.
        Some(f) => unsafe { f(handle(b), src, handle(dst)) },
        None => false,
    }
}
