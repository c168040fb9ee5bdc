//! Buffer types (`ggml_backend_buft_*`): thin dispatch over a backend's
//! `ggml_backend_buffer_type_i` table, with stock's defaults for the optional callbacks.
//!
//! A buffer type is owned by the backend that defines it (usually a `static`); these functions
//! never free one. A NULL buffer type aborts, as stock's `GGML_ASSERT(buft)` does.

use std::os::raw::c_char;

use ggml_sys::{
    ggml_backend_buffer_t, ggml_backend_buffer_type, ggml_backend_buffer_type_t,
    ggml_backend_dev_t, ggml_tensor,
};

use crate::ffi::{self, c_name, export, handle, non_null};
use crate::iface::required;
use crate::tensor::meta::{nbytes, op_is_empty};

/// Borrows the buffer type behind `buft`, aborting naming `func` when it is NULL.
///
/// # Safety
/// `buft` must be NULL or point to a live buffer type.
pub(crate) unsafe fn buft_ref<'a>(
    buft: ggml_backend_buffer_type_t,
    func: &str,
) -> &'a ggml_backend_buffer_type {
    // SAFETY: forwards the contract of `buft_ref`: `buft` is NULL or a live buffer type.
    unsafe { non_null(buft, func, "buft") }
}

export! {
    /// The buffer type's name (stock `ggml_backend_buft_name`). The string is owned by the buffer
    /// type. Aborts when `buft` is NULL.
    ///
    /// # Safety
    /// `buft` must be NULL or point to a live buffer type.
    pub unsafe fn ggml_backend_buft_name(buft: ggml_backend_buffer_type_t) -> *const c_char {
        // SAFETY: forwards the contract of `ggml_backend_buft_name`: `buft` is NULL or live
        // (`buft_ref` aborts on NULL).
        name(unsafe { buft_ref(buft, F) })
    }
}

/// The body of [`ggml_backend_buft_name`], for the library's own callers.
pub(crate) fn name(buft: &ggml_backend_buffer_type) -> *const c_char {
    const F: &str = c_name!(ggml_backend_buft_name);
    let f = required(buft.iface.get_name, F, "get_name");
    // SAFETY: the backend's own callback with its buffer type, live while borrowed.
    unsafe { f(handle(buft)) }
}

export! {
    /// Allocates a buffer of `size` bytes of this type (stock `ggml_backend_buft_alloc_buffer`).
    /// A zero `size` returns a dummy buffer of size 0 with an empty interface, without asking the
    /// backend; otherwise the backend's `alloc_buffer` decides (NULL when it fails). The caller
    /// owns the result and frees it with `ggml_backend_buffer_free`. Aborts when `buft` is NULL.
    ///
    /// # Safety
    /// `buft` must be NULL or point to a live buffer type.
    pub unsafe fn ggml_backend_buft_alloc_buffer(
        buft: ggml_backend_buffer_type_t,
        size: usize,
    ) -> ggml_backend_buffer_t {
        // SAFETY: forwards the contract of `ggml_backend_buft_alloc_buffer`: `buft` is NULL or live
        // (`buft_ref` aborts on NULL).
        alloc_buffer(unsafe { buft_ref(buft, F) }, size)
    }
}

/// The body of [`ggml_backend_buft_alloc_buffer`], for the library's own callers.
pub(crate) fn alloc_buffer(buft: &ggml_backend_buffer_type, size: usize) -> ggml_backend_buffer_t {
    const F: &str = c_name!(ggml_backend_buft_alloc_buffer);
    if size == 0 {
        // A dummy buffer: an all-NULL interface is valid for a zero-sized buffer.
        return new_buffer(handle(buft), Default::default(), std::ptr::null_mut(), 0);
    }
    let f = required(buft.iface.alloc_buffer, F, "alloc_buffer");
    // SAFETY: the backend's own callback with its buffer type, live while borrowed.
    unsafe { f(handle(buft), size) }
}

export! {
    /// The alignment in bytes of tensor addresses in buffers of this type (stock
    /// `ggml_backend_buft_get_alignment`). Aborts when `buft` is NULL.
    ///
    /// # Safety
    /// `buft` must be NULL or point to a live buffer type.
    pub unsafe fn ggml_backend_buft_get_alignment(buft: ggml_backend_buffer_type_t) -> usize {
        // SAFETY: forwards the contract of `ggml_backend_buft_get_alignment`: `buft` is NULL or
        // live (`buft_ref` aborts on NULL).
        alignment(unsafe { buft_ref(buft, F) })
    }
}

/// The body of [`ggml_backend_buft_get_alignment`], for the library's own callers.
pub(crate) fn alignment(buft: &ggml_backend_buffer_type) -> usize {
    const F: &str = c_name!(ggml_backend_buft_get_alignment);
    let f = required(buft.iface.get_alignment, F, "get_alignment");
    // SAFETY: the backend's own callback with its buffer type, live while borrowed.
    unsafe { f(handle(buft)) }
}

export! {
    /// The largest buffer in bytes this type can allocate (stock `ggml_backend_buft_get_max_size`);
    /// `SIZE_MAX` when the backend does not say. Aborts when `buft` is NULL.
    ///
    /// # Safety
    /// `buft` must be NULL or point to a live buffer type.
    pub unsafe fn ggml_backend_buft_get_max_size(buft: ggml_backend_buffer_type_t) -> usize {
        // SAFETY: forwards the contract of `ggml_backend_buft_get_max_size`: `buft` is NULL or live
        // (`buft_ref` aborts on NULL).
        max_size(unsafe { buft_ref(buft, F) })
    }
}

/// The body of [`ggml_backend_buft_get_max_size`], for the library's own callers.
pub(crate) fn max_size(buft: &ggml_backend_buffer_type) -> usize {
    match buft.iface.get_max_size {
        // SAFETY: the backend's own callback with its buffer type, live while borrowed.
        Some(f) => unsafe { f(handle(buft)) },
        None => usize::MAX,
    }
}

export! {
    /// Whether an allocation larger than `ggml_nbytes` is legitimate for the result of `op`, i.e.
    /// a backend may pad such tensors (stock `ggml_op_alloc_size_may_expand`).
    ///
    /// # Safety
    /// None beyond the C ABI: any `op` value is accepted.
    pub unsafe fn ggml_op_alloc_size_may_expand(op: ggml_sys::ggml_op) -> bool {
        op_alloc_size_may_expand(op)
    }
}

/// The pure rule behind [`ggml_op_alloc_size_may_expand`].
pub fn op_alloc_size_may_expand(op: ggml_sys::ggml_op) -> bool {
    use ggml_sys::*;
    matches!(
        op,
        GGML_OP_FLASH_ATTN_EXT
            | GGML_OP_MUL_MAT
            | GGML_OP_MUL_MAT_ID
            | GGML_OP_CUMSUM
            | GGML_OP_ARGSORT
            | GGML_OP_TOP_K
    )
}

/// Whether a backend's allocation size `size` for a tensor of `nbytes` bytes, type `ty` and op
/// `op` is allowed: never more than `nbytes` unless the op makes no data of its own, the type
/// is quantized (row padding), or [`op_alloc_size_may_expand`] says so.
pub fn alloc_size_allowed(
    size: usize,
    nbytes: usize,
    op: ggml_sys::ggml_op,
    quantized: bool,
) -> bool {
    size <= nbytes || op_is_empty(op) || quantized || op_alloc_size_may_expand(op)
}

/// The abort of [`ggml_backend_buft_get_alloc_size`], out of line (see
/// `ffi::non_null`'s note on keeping hot functions small).
#[cold]
#[inline(never)]
fn alloc_size_too_large(size: usize, nbytes: usize, op: ggml_sys::ggml_op) -> ! {
    const F: &str = c_name!(ggml_backend_buft_get_alloc_size);
    // SAFETY: ggml_op_name returns a static string for every op value.
    let name = unsafe { std::ffi::CStr::from_ptr(ggml_sys::ggml_op_name(op)) };
    ffi::fatal(
        F,
        &format!(
            "buffer type returned alloc size {size} > ggml_nbytes {nbytes} for op {} \
             (not allowed to expand: update ggml_op_alloc_size_may_expand)",
            name.to_string_lossy()
        ),
    )
}

export! {
    /// Bytes to allocate for `tensor` in a buffer of this type (stock
    /// `ggml_backend_buft_get_alloc_size`): the backend's answer, or `ggml_nbytes` when it has no
    /// `get_alloc_size`. Aborts when `buft` is NULL, and when the backend asks for more than
    /// `ggml_nbytes` for an op that may not expand (see [`alloc_size_allowed`]), as stock does.
    ///
    /// # Safety
    /// `buft` must be NULL or point to a live buffer type; `tensor` must point to a live tensor.
    pub unsafe fn ggml_backend_buft_get_alloc_size(
        buft: ggml_backend_buffer_type_t,
        tensor: *const ggml_tensor,
    ) -> usize {
        // SAFETY: forwards the contract of `ggml_backend_buft_get_alloc_size`: `buft` is NULL or
        // live and `tensor` live (`buft_ref` and `non_null` abort on NULL).
        let (b, t) = unsafe { (buft_ref(buft, F), non_null(tensor, F, "tensor")) };
        alloc_size(b, t)
    }
}

/// The body of [`ggml_backend_buft_get_alloc_size`], for the library's own callers.
pub(crate) fn alloc_size(buft: &ggml_backend_buffer_type, tensor: &ggml_tensor) -> usize {
    let nbytes = nbytes(tensor);
    let Some(f) = buft.iface.get_alloc_size else {
        return nbytes;
    };
    // SAFETY: the backend's own callback with its buffer type and a live tensor, both borrowed
    // for the call.
    let size = unsafe { f(handle(buft), tensor) };
    // The type is looked up only when the size exceeds nbytes: gallocr calls this per
    // tensor, several times a graph.
    if size > nbytes {
        // SAFETY: a pure function of the type id.
        let quantized = unsafe { ggml_sys::ggml_is_quantized(tensor.type_) };
        if !alloc_size_allowed(size, nbytes, tensor.op, quantized) {
            alloc_size_too_large(size, nbytes, tensor.op);
        }
    }
    size
}

export! {
    /// Whether buffers of this type live in host memory, readable through `tensor->data` (stock
    /// `ggml_backend_buft_is_host`); `false` when the backend does not say. Aborts when `buft` is
    /// NULL.
    ///
    /// # Safety
    /// `buft` must be NULL or point to a live buffer type.
    pub unsafe fn ggml_backend_buft_is_host(buft: ggml_backend_buffer_type_t) -> bool {
        // SAFETY: forwards the contract of `ggml_backend_buft_is_host`: `buft` is NULL or live
        // (`buft_ref` aborts on NULL).
        is_host(unsafe { buft_ref(buft, F) })
    }
}

/// The body of [`ggml_backend_buft_is_host`], for the library's own callers.
pub(crate) fn is_host(buft: &ggml_backend_buffer_type) -> bool {
    match buft.iface.is_host {
        // SAFETY: the backend's own callback with its buffer type, live while borrowed.
        Some(f) => unsafe { f(handle(buft)) },
        None => false,
    }
}

export! {
    /// The device that owns this buffer type, NULL for the plain CPU types (stock
    /// `ggml_backend_buft_get_device`). Aborts when `buft` is NULL.
    ///
    /// # Safety
    /// `buft` must be NULL or point to a live buffer type.
    pub unsafe fn ggml_backend_buft_get_device(
        buft: ggml_backend_buffer_type_t,
    ) -> ggml_backend_dev_t {
        // SAFETY: forwards the contract of `ggml_backend_buft_get_device`: `buft` is NULL or live
        // (`buft_ref` aborts on NULL).
        unsafe { buft_ref(buft, F) }.device
    }
}

/// A new buffer of type `buft` over `context` with the interface `iface`, owned by the caller
/// until its `free_buffer` (the body of `ggml_backend_buffer_init`, for the library's own
/// buffer types). Here rather than in `buffer.rs` because buffer types make buffers, and
/// `buffer.rs` sits above this module.
pub(crate) fn new_buffer(
    buft: ggml_backend_buffer_type_t,
    iface: ggml_sys::ggml_backend_buffer_i,
    context: *mut std::ffi::c_void,
    size: usize,
) -> ggml_backend_buffer_t {
    Box::into_raw(Box::new(ggml_sys::ggml_backend_buffer {
        iface,
        buft,
        context,
        size,
        usage: ggml_sys::GGML_BACKEND_BUFFER_USAGE_ANY,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggml_sys::*;

    #[test]
    fn expanding_ops_are_exactly_stocks_list() {
        let expanding: Vec<ggml_op> = (0..GGML_OP_COUNT)
            .filter(|&op| op_alloc_size_may_expand(op))
            .collect();
        assert_eq!(
            expanding,
            vec![
                GGML_OP_MUL_MAT,
                GGML_OP_MUL_MAT_ID,
                GGML_OP_CUMSUM,
                GGML_OP_ARGSORT,
                GGML_OP_TOP_K,
                GGML_OP_FLASH_ATTN_EXT
            ]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
        );
    }

    #[test]
    fn alloc_size_rule() {
        // Equal or smaller is always fine.
        assert!(alloc_size_allowed(100, 100, GGML_OP_ADD, false));
        assert!(alloc_size_allowed(50, 100, GGML_OP_ADD, false));
        // Larger: only for empty ops, quantized types or expanding ops.
        assert!(!alloc_size_allowed(101, 100, GGML_OP_ADD, false));
        assert!(alloc_size_allowed(101, 100, GGML_OP_VIEW, false));
        assert!(alloc_size_allowed(101, 100, GGML_OP_NONE, false));
        assert!(alloc_size_allowed(101, 100, GGML_OP_ADD, true));
        assert!(alloc_size_allowed(4096, 100, GGML_OP_MUL_MAT, false));
    }
}
