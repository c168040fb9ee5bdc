//! Allocating every tensor of a context in buffers of one type (stock's
//! `ggml_backend_alloc_ctx_tensors*` and the linear `ggml_tallocr` behind them): how llama.cpp
//! places weights and caches, and test-backend-ops its inputs.

use ggml_sys::{
    ggml_backend_buffer, ggml_backend_buffer_t, ggml_backend_buffer_type, ggml_context,
    ggml_status, ggml_tallocr, ggml_tensor, GGML_STATUS_SUCCESS,
};

use super::blocks::align_up;
use crate::tensor::meta::{cstr, name};
use crate::{buffer, buffer_type, ffi, multi_buffer, tensor};

/// A linear allocator over `buffer` (stock `ggml_tallocr_new`): the first aligned address of
/// the buffer, and its alignment (a power of two).
pub fn tallocr_new(buffer: &ggml_backend_buffer, handle: ggml_backend_buffer_t) -> ggml_tallocr {
    let base = buffer::base(buffer);
    let alignment = buffer::alignment(buffer);
    ggml_tallocr {
        buffer: handle,
        base,
        alignment,
        offset: align_up(base as usize, alignment) - base as usize,
    }
}

/// Places `t` at the allocator's offset and moves it by the tensor's aligned size (stock
/// `ggml_tallocr_alloc`); aborts naming the tensor when the buffer has no room.
///
/// # Safety
/// `talloc.buffer` must be live and `t` a live tensor without memory.
pub unsafe fn tallocr_alloc(
    talloc: &mut ggml_tallocr,
    t: *mut ggml_tensor,
    func: &str,
) -> ggml_status {
    // SAFETY: the caller's contract (`buffer_ref` aborts on NULL).
    let b = unsafe { buffer::buffer_ref(talloc.buffer, func) };
    // SAFETY: the caller's contract.
    let size = align_up(buffer::alloc_size(b, unsafe { &*t }), talloc.alignment);
    if talloc.offset + size > b.size {
        // SAFETY: the caller's contract.
        let name = name(unsafe { &*t });
        ffi::log::error(&format!(
            "{func}: not enough space in the buffer to allocate {name} (needed {size}, available {})\n",
            b.size - talloc.offset
        ));
        ffi::fatal(func, "not enough space in the buffer");
    }
    let addr = buffer::base(b)
        .cast::<u8>()
        .wrapping_add(talloc.offset)
        .cast();
    talloc.offset += size;
    // SAFETY: a live buffer and tensor (the caller's contract), and an address inside it.
    unsafe { tensor::ggml_backend_tensor_alloc(talloc.buffer, t, addr) }
}

/// The context's tensors in order.
///
/// # Safety
/// `ctx` must be a live context.
unsafe fn tensors(ctx: *mut ggml_context) -> Vec<*mut ggml_tensor> {
    let mut out = Vec::new();
    // SAFETY: a live context (the caller's contract).
    let mut t = unsafe { ggml_sys::ggml_get_first_tensor(ctx) };
    while !t.is_null() {
        out.push(t);
        // SAFETY: `t` is a tensor of the live context.
        t = unsafe { ggml_sys::ggml_get_next_tensor(ctx, t) };
    }
    out
}

/// Allocates one buffer of `size` bytes for `range` and places them in it: tensors without
/// memory linearly, views once their source is placed (stock's `alloc_tensor_range`). Frees
/// what it made and returns `None` when a backend fails.
///
/// # Safety
/// Live tensors of a live context; a live buffer type.
unsafe fn alloc_range(
    range: &[*mut ggml_tensor],
    buft: &ggml_backend_buffer_type,
    size: usize,
) -> Option<ggml_backend_buffer_t> {
    const F: &str = "alloc_tensor_range";
    let buffer = buffer_type::alloc_buffer(buft, size);
    if buffer.is_null() {
        ffi::log::error(&format!(
            "{F}: failed to allocate {} buffer of size {size}\n",
            // SAFETY: a buffer type's name, NUL-terminated and owned by it.
            unsafe { cstr(buffer_type::name(buft)) }
        ));
        return None;
    }
    // SAFETY: a buffer just made, live.
    let mut talloc = tallocr_new(unsafe { &*buffer }, buffer);
    for &t in range {
        // SAFETY: a live tensor of the context, not otherwise borrowed here.
        let r = unsafe { &mut *t };
        let status = if r.data.is_null() && r.view_src.is_null() {
            // SAFETY: live buffer and tensor without memory.
            unsafe { tallocr_alloc(&mut talloc, t, "ggml_tallocr_alloc") }
        } else if !r.view_src.is_null() && r.buffer.is_null() {
            // SAFETY: a view (of a tensor placed earlier in the range, or pre-allocated).
            unsafe { tensor::view_init(r, F) }
        } else {
            GGML_STATUS_SUCCESS
        };
        if status != GGML_STATUS_SUCCESS {
            ffi::log::error(&format!("{F}: failed to initialize tensor {}\n", name(r)));
            // SAFETY: made above, referenced from nowhere else.
            unsafe { buffer::free(buffer) };
            return None;
        }
    }
    Some(buffer)
}

/// Places every tensor of `ctx` that has no memory in buffers of type `buft`, as few as the
/// type's maximum size allows (stock `ggml_backend_alloc_ctx_tensors_from_buft_impl`). Returns
/// the bytes needed and, unless `no_alloc`, the buffer (a multi-buffer when several were
/// needed; NULL when nothing needed memory or a backend failed, after freeing what was made).
///
/// # Safety
/// `ctx` must be a live no-alloc context; `buft` a live buffer type.
pub unsafe fn alloc_ctx_tensors(
    ctx: *mut ggml_context,
    buft: &ggml_backend_buffer_type,
    no_alloc: bool,
) -> (usize, ggml_backend_buffer_t) {
    const F: &str = "ggml_backend_alloc_ctx_tensors_from_buft";
    // SAFETY: a live context (the caller's contract).
    let no_alloc_ctx = unsafe { ggml_sys::ggml_get_no_alloc(ctx) };
    crate::ggml_assert!(
        F,
        no_alloc_ctx,
        "GGML_ASSERT(ggml_get_no_alloc(ctx) == true) failed"
    );
    let alignment = buffer_type::alignment(buft);
    let max_size = buffer_type::max_size(buft);
    // SAFETY: as above.
    let all = unsafe { tensors(ctx) };
    let mut buffers: Vec<ggml_backend_buffer_t> = Vec::new();
    let mut total = 0usize;
    let mut first = 0usize;
    let mut cur = 0usize;
    let flush = |range: &[*mut ggml_tensor], size: usize, buffers: &mut Vec<_>| -> bool {
        if no_alloc {
            return true;
        }
        // SAFETY: live tensors of the live context, a live buffer type.
        match unsafe { alloc_range(range, buft, size) } {
            Some(b) => {
                buffers.push(b);
                true
            }
            None => {
                for &b in buffers.iter() {
                    // SAFETY: buffers made above, freed once.
                    unsafe { buffer::free(b) };
                }
                false
            }
        }
    };
    for (i, &t) in all.iter().enumerate() {
        // SAFETY: a live tensor of the context.
        let r = unsafe { &*t };
        let this = if r.data.is_null() && r.view_src.is_null() {
            align_up(buffer_type::alloc_size(buft, r), alignment)
        } else {
            0
        };
        if cur > 0 && cur + this > max_size {
            if !flush(&all[first..i], cur, &mut buffers) {
                return (total, std::ptr::null_mut());
            }
            first = i;
            total += cur;
            cur = this;
        } else {
            cur += this;
        }
    }
    if cur > 0 {
        total += cur;
        if !flush(&all[first..], cur, &mut buffers) {
            return (total, std::ptr::null_mut());
        }
    }
    let buffer = match buffers.len() {
        0 => std::ptr::null_mut(),
        1 => buffers[0],
        // SAFETY: live buffers made above, handed over to the multi-buffer.
        _ => unsafe {
            multi_buffer::ggml_backend_multi_buffer_alloc_buffer(
                buffers.as_mut_ptr(),
                buffers.len(),
            )
        },
    };
    (total, buffer)
}
