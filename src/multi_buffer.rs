//! Multi-buffers: one buffer that owns several others (stock's "multi buffer"), used by
//! `ggml-alloc` when a context's tensors do not fit one allocation of a buffer type. Its size is
//! the sum of its parts; clearing, freeing and usage changes are passed on to every part; it has
//! no base address of its own. `ggml_backend_buffer_set_usage` lives here too: it is the one
//! buffer function that must know multi-buffers, and `buffer.rs` sits below this module.

use ggml_sys::{
    ggml_backend_buffer, ggml_backend_buffer_i, ggml_backend_buffer_t, ggml_backend_buffer_usage,
};

use crate::buffer::{self, buffer_ref};
use crate::ffi::{self, boundary, c_name, export, non_null, non_null_mut};

/// The `context` of a multi-buffer: the buffers it owns, each checked non-NULL when the
/// multi-buffer was made.
struct MultiBuffer {
    parts: Vec<ggml_backend_buffer_t>,
}

/// Borrows the parts of the multi-buffer `buffer`.
///
/// # Safety
/// `buffer` must be a multi-buffer (its context a `MultiBuffer`).
unsafe fn parts(buffer: &ggml_backend_buffer) -> &[ggml_backend_buffer_t] {
    // SAFETY: forwards the contract of `parts`: `buffer` is a multi-buffer, so its context is the
    // `MultiBuffer` boxed by `ggml_backend_multi_buffer_alloc_buffer`, live while the buffer is.
    unsafe { &(*(buffer.context as *const MultiBuffer)).parts }
}

/// `free_buffer` of a multi-buffer: frees every part, then the context. Its address is what
/// identifies a multi-buffer ([`ggml_backend_buffer_is_multi_buffer`]).
unsafe extern "C" fn multi_buffer_free(buffer: ggml_backend_buffer_t) {
    boundary("ggml_backend_multi_buffer_free_buffer", || {
        // SAFETY: called by ggml_backend_buffer_free on a live multi-buffer.
        let ctx = unsafe { buffer_ref(buffer, "ggml_backend_multi_buffer_free_buffer") }.context;
        // SAFETY: the context was made by Box in ggml_backend_multi_buffer_alloc_buffer and is
        // released exactly once, here.
        let ctx = unsafe { Box::from_raw(ctx as *mut MultiBuffer) };
        for &part in &ctx.parts {
            // SAFETY: the multi-buffer owns its parts and frees each once, here.
            unsafe { buffer::free(part) };
        }
    })
}

/// `clear` of a multi-buffer: clears every part.
unsafe extern "C" fn multi_buffer_clear(buffer: ggml_backend_buffer_t, value: u8) {
    boundary("ggml_backend_multi_buffer_clear", || {
        // SAFETY: called through the interface of a live multi-buffer.
        let b = unsafe { buffer_ref(buffer, "ggml_backend_multi_buffer_clear") };
        // SAFETY: the interface is a multi-buffer's.
        for &part in unsafe { parts(b) } {
            // SAFETY: non-NULL (checked at creation) and live while the multi-buffer owns it.
            buffer::clear(unsafe { &*part }, value);
        }
    })
}

export! {
    /// Makes one buffer owning the `n_buffers` buffers at `buffers` (stock
    /// `ggml_backend_multi_buffer_alloc_buffer`): type of the first, size the sum of all. The
    /// parts are owned by the result from now on (freed with it); the array itself stays the
    /// caller's. Aborts when `n_buffers` is 0 or `buffers` is NULL.
    ///
    /// # Safety
    /// `buffers` must point to `n_buffers` live buffers.
    pub unsafe fn ggml_backend_multi_buffer_alloc_buffer(
        buffers: *mut ggml_backend_buffer_t,
        n_buffers: usize,
    ) -> ggml_backend_buffer_t {
        if n_buffers == 0 {
            ffi::fatal(
                F,
                "a multi-buffer needs at least one buffer (n_buffers == 0)",
            );
        }
        // SAFETY: `buffers` is not NULL (`non_null` aborts) and points to `n_buffers` live
        // buffers (the `# Safety` contract), so the slice covers initialised pointers only.
        let list =
            unsafe { std::slice::from_raw_parts(non_null(buffers, F, "buffers"), n_buffers) };
        let parts = list.to_vec();
        let mut total = 0usize;
        for &p in &parts {
            // SAFETY: `buffers` points to `n_buffers` live buffers (the `# Safety` contract), so
            // every part is live (`buffer_ref` would abort on NULL).
            total += unsafe { buffer_ref(p, F) }.size;
        }
        // SAFETY: the first part is live.
        let buft = unsafe { buffer_ref(parts[0], F) }.buft;
        let iface = ggml_backend_buffer_i {
            free_buffer: Some(multi_buffer_free),
            clear: Some(multi_buffer_clear),
            ..Default::default()
        };
        let ctx = Box::into_raw(Box::new(MultiBuffer { parts }));
        // The interface above accepts exactly this context.
        crate::buffer_type::new_buffer(buft, iface, ctx.cast(), total)
    }
}

export! {
    /// Whether `buffer` is a multi-buffer (stock `ggml_backend_buffer_is_multi_buffer`). Aborts on
    /// NULL.
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_buffer_is_multi_buffer(buffer: ggml_backend_buffer_t) -> bool {
        // SAFETY: forwards the contract of `ggml_backend_buffer_is_multi_buffer`: `buffer` is NULL
        // or live (`buffer_ref` aborts on NULL).
        is_multi_buffer(unsafe { buffer_ref(buffer, F) })
    }
}

/// The body of [`ggml_backend_buffer_is_multi_buffer`], for the library's own callers.
pub(crate) fn is_multi_buffer(buffer: &ggml_backend_buffer) -> bool {
    // Identity by address: `multi_buffer_free` is a single non-generic function of this
    // library, so every multi-buffer carries the same pointer and no other buffer does.
    let ours = multi_buffer_free as unsafe extern "C" fn(ggml_backend_buffer_t) as usize;
    buffer.iface.free_buffer.map(|f| f as usize) == Some(ours)
}

export! {
    /// Sets `usage` on every part of the multi-buffer `buffer` (stock
    /// `ggml_backend_multi_buffer_set_usage`). Aborts when `buffer` is NULL or not a
    /// multi-buffer.
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_multi_buffer_set_usage(
        buffer: ggml_backend_buffer_t,
        usage: ggml_backend_buffer_usage,
    ) {
        // SAFETY: forwards the contract of `ggml_backend_multi_buffer_set_usage`: `buffer` is NULL
        // or live (`buffer_ref` aborts on NULL).
        set_parts_usage(unsafe { buffer_ref(buffer, F) }, usage)
    }
}

/// The body of [`ggml_backend_multi_buffer_set_usage`], for the library's own callers.
pub(crate) fn set_parts_usage(buffer: &ggml_backend_buffer, usage: ggml_backend_buffer_usage) {
    const F: &str = c_name!(ggml_backend_multi_buffer_set_usage);
    if !is_multi_buffer(buffer) {
        ffi::fatal(F, "the buffer is not a multi-buffer");
    }
    // SAFETY: checked to be a multi-buffer.
    for &part in unsafe { parts(buffer) } {
        // SAFETY: non-NULL (checked at creation), live while the multi-buffer owns it, and no
        // other borrow of a part is held.
        set_usage(unsafe { &mut *part }, usage);
    }
}

export! {
    /// Records how the buffer is used (weights, compute, any) and passes the usage on to the
    /// parts of a multi-buffer or a meta buffer (stock `ggml_backend_buffer_set_usage`). Aborts on
    /// NULL.
    ///
    /// # Safety
    /// `buffer` must be NULL or point to a live buffer.
    pub unsafe fn ggml_backend_buffer_set_usage(
        buffer: ggml_backend_buffer_t,
        usage: ggml_backend_buffer_usage,
    ) {
        // SAFETY: `buffer` is NULL or live (the `# Safety` contract; `non_null_mut` aborts on
        // NULL), and the library holds no other borrow of it during the call.
        set_usage(unsafe { non_null_mut(buffer, F, "buffer") }, usage)
    }
}

/// The body of [`ggml_backend_buffer_set_usage`], for the library's own callers.
pub(crate) fn set_usage(buffer: &mut ggml_backend_buffer, usage: ggml_backend_buffer_usage) {
    buffer.usage = usage;
    if is_multi_buffer(buffer) {
        set_parts_usage(buffer, usage);
        return;
    }
    let ptr = std::ptr::from_mut(buffer);
    // SAFETY: a live buffer; the meta check only compares its interface, and a meta buffer's
    // usage is passed on by ggml's own code.
    unsafe {
        if ggml_sys::ggml_backend_buffer_is_meta(ptr) {
            ggml_sys::ggml_backend_meta_buffer_set_usage(ptr, usage);
        }
    }
}
