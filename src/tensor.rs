//! Tensor data through the backend layer: writes, reads and fills (`ggml_backend_tensor_set`,
//! `_get`, `_memset`, their strided `_2d` and queued `_async` forms), copies between tensors of
//! any two buffers (`ggml_backend_tensor_copy`, `_copy_async`), and placing a tensor in a
//! buffer (`ggml_backend_tensor_alloc`, `ggml_backend_view_init`).
//!
//! Data always goes through the interface of the buffer that holds the tensor's storage (its
//! view source's buffer for a view), never through `tensor->data` directly, so device buffers
//! whose addresses the host cannot use work. Offsets and sizes are in bytes; a range outside
//! `ggml_nbytes(tensor)` aborts, as stock's `GGML_ASSERT`s do (ours also catch overflow).
#![deny(unsafe_op_in_unsafe_fn)]

use std::os::raw::c_void;

use ggml_sys::{ggml_backend_buffer_t, ggml_backend_t, ggml_status, ggml_tensor};

use crate::backend::{backend_ref, ggml_backend_synchronize};
use crate::buffer::{
    ggml_backend_buffer_copy_tensor, ggml_backend_buffer_get_alloc_size,
    ggml_backend_buffer_get_base, ggml_backend_buffer_get_size, ggml_backend_buffer_init_tensor,
    ggml_backend_buffer_is_host,
};
use crate::ffi::{self, export, non_null, non_null_mut};
use crate::iface::required;

/// Whether `op` creates no data of its own (a view or a leaf): stock's `ggml_op_is_empty`.
pub fn op_is_empty(op: ggml_sys::ggml_op) -> bool {
    use ggml_sys::*;
    matches!(
        op,
        GGML_OP_NONE | GGML_OP_RESHAPE | GGML_OP_TRANSPOSE | GGML_OP_VIEW | GGML_OP_PERMUTE
    )
}

/// Bytes spanned by `t`'s elements: 0 when a dimension is empty, else from the first byte to
/// the end of the last element (or block, for block types) through the strides. Computes
/// exactly what `ggml_nbytes` computes, with its unsigned wrapping arithmetic, but inline:
/// gallocr asks for alloc sizes per tensor several times a graph, and the two out-of-line
/// type lookups of `ggml_nbytes` were a tenth of a scheduling cycle. The type must be a
/// valid `ggml_type` (ggml's release build does not check it; neither does stock).
#[inline]
pub fn nbytes(t: &ggml_tensor) -> usize {
    let [n0, n1, n2, n3] = t.ne;
    if n0.min(n1).min(n2.min(n3)) <= 0 {
        return 0;
    }
    // SAFETY: returns a pointer into ggml's static type table (it asserts the type is valid).
    let traits = unsafe { &*ggml_sys::ggml_get_type_traits(t.type_) };
    let blck = traits.blck_size as usize;
    // ne >= 1 here, so `ne - 1` cannot wrap; products and sums wrap as C's size_t does.
    let span = |n: i64, stride: usize| (n as usize - 1).wrapping_mul(stride);
    let first = if blck == 1 {
        traits.type_size.wrapping_add(span(n0, t.nb[0]))
    } else {
        (n0 as usize).wrapping_mul(t.nb[0]) / blck
    };
    first
        .wrapping_add(span(n1, t.nb[1]))
        .wrapping_add(span(n2, t.nb[2]))
        .wrapping_add(span(n3, t.nb[3]))
}

/// Whether `a` and `b` have the same type, shape and strides (stock `ggml_are_same_layout`).
pub fn same_layout(a: &ggml_tensor, b: &ggml_tensor) -> bool {
    a.type_ == b.type_ && a.ne == b.ne && a.nb == b.nb
}

/// The buffer that holds `t`'s storage: its view source's buffer for a view, else its own.
///
/// # Safety
/// `t.view_src` must be NULL or point to a live tensor.
pub unsafe fn storage_buffer(t: &ggml_tensor) -> ggml_backend_buffer_t {
    if t.view_src.is_null() {
        t.buffer
    } else {
        // SAFETY: caller contract.
        unsafe { (*t.view_src).buffer }
    }
}

/// Borrows a tensor's storage buffer, aborting with stock's "tensor buffer not set" when NULL.
///
/// # Safety
/// `buf` must be NULL or point to a live buffer.
unsafe fn storage_ref<'a>(
    buf: ggml_backend_buffer_t,
    func: &str,
) -> &'a ggml_sys::ggml_backend_buffer {
    if buf.is_null() {
        ffi::fatal(func, "tensor buffer not set");
    }
    // SAFETY: non-NULL; live by the caller's contract.
    unsafe { &*buf }
}

/// Whether `[offset, offset + size)` lies in a tensor of `nbytes` bytes (false on overflow).
pub fn range_in_tensor(offset: usize, size: usize, nbytes: usize) -> bool {
    offset.checked_add(size).is_some_and(|end| end <= nbytes)
}

/// Whether `n_copies` (at least 1) rows of `size` bytes, `stride` bytes apart from `offset`,
/// lie in a tensor of `nbytes` bytes (false on overflow).
pub fn rows_in_tensor(
    offset: usize,
    size: usize,
    n_copies: usize,
    stride: usize,
    nbytes: usize,
) -> bool {
    n_copies
        .checked_sub(1)
        .and_then(|n| n.checked_mul(stride))
        .and_then(|s| s.checked_add(offset))
        .is_some_and(|start_last| range_in_tensor(start_last, size, nbytes))
}

/// What a data access checks before it reaches the buffer, and how stock words the failure.
#[derive(Clone, Copy)]
enum Access {
    Write,
    Read,
}

impl Access {
    fn oob(self) -> &'static str {
        match self {
            Access::Write => "tensor write out of bounds",
            Access::Read => "tensor read out of bounds",
        }
    }
}

/// The storage buffer of `tensor` (pointer and borrow) for a data access of `size` bytes at
/// `offset`. Returns `None` when `size` is 0 (nothing to do); aborts naming `func` when the tensor is
/// NULL, has no buffer or no data, or the range leaves the tensor.
///
/// # Safety
/// `tensor` must be NULL or point to a live tensor.
unsafe fn checked_access<'a>(
    tensor: *const ggml_tensor,
    offset: usize,
    size: usize,
    access: Access,
    func: &str,
) -> Option<(ggml_backend_buffer_t, &'a ggml_sys::ggml_backend_buffer)> {
    // SAFETY: caller contract.
    let t = unsafe { non_null(tensor, func, "tensor") };
    // SAFETY: `t` is live, so is its view source.
    let buf = unsafe { storage_buffer(t) };
    if buf.is_null() {
        ffi::fatal(func, "tensor buffer not set");
    }
    if size == 0 {
        return None;
    }
    if t.data.is_null() {
        ffi::fatal(func, "tensor not allocated");
    }
    let nbytes = nbytes(t);
    if !range_in_tensor(offset, size, nbytes) {
        ffi::fatal(
            func,
            &format!(
                "{}: offset {offset} + size {size} > ggml_nbytes {nbytes}",
                access.oob()
            ),
        );
    }
    // SAFETY: a tensor's buffer is live while the tensor is.
    Some((buf, unsafe { &*buf }))
}

export! {
    /// Writes `size` bytes from host memory `data` into `tensor` at byte `offset`, through its
    /// buffer's `set_tensor` (stock `ggml_backend_tensor_set`). Blocking. A zero `size` does
    /// nothing (the tensor still needs a buffer). Aborts on a NULL tensor, a tensor without buffer
    /// or data, or a range outside the tensor.
    ///
    /// # Safety
    /// `tensor` must be NULL or a live tensor; `data` must be readable for `size` bytes.
    pub unsafe fn ggml_backend_tensor_set(
        tensor: *mut ggml_tensor,
        data: *const c_void,
        offset: usize,
        size: usize,
    ) {
        // SAFETY: caller contract.
        if let Some((buf_ptr, buf)) =
            unsafe { checked_access(tensor, offset, size, Access::Write, F) }
        {
            let set = required(buf.iface.set_tensor, F, "set_tensor");
            // SAFETY: checked range; the backend's callback with its own buffer.
            unsafe { set(buf_ptr, tensor, data, offset, size) }
        }
    }
}

export! {
    /// Reads `size` bytes of `tensor` at byte `offset` into host memory `data`, through its
    /// buffer's `get_tensor` (stock `ggml_backend_tensor_get`). Blocking. Same checks as
    /// [`ggml_backend_tensor_set`].
    ///
    /// # Safety
    /// `tensor` must be NULL or a live tensor; `data` must be writable for `size` bytes.
    pub unsafe fn ggml_backend_tensor_get(
        tensor: *const ggml_tensor,
        data: *mut c_void,
        offset: usize,
        size: usize,
    ) {
        // SAFETY: caller contract.
        if let Some((buf_ptr, buf)) =
            unsafe { checked_access(tensor, offset, size, Access::Read, F) }
        {
            let get = required(buf.iface.get_tensor, F, "get_tensor");
            // SAFETY: checked range; the backend's callback with its own buffer.
            unsafe { get(buf_ptr, tensor, data, offset, size) }
        }
    }
}

export! {
    /// Writes `n_copies` rows of `size` bytes: row `i` from `data + i*stride_data` to tensor byte
    /// `offset + i*stride_tensor` (stock `ggml_backend_tensor_set_2d`). Uses the buffer's
    /// `set_tensor_2d` when it has one and `n_copies > 1`, otherwise one
    /// [`ggml_backend_tensor_set`] per row. Aborts like [`ggml_backend_tensor_set`].
    ///
    /// # Safety
    /// `tensor` must be NULL or a live tensor; `data` must be readable for every row.
    pub unsafe fn ggml_backend_tensor_set_2d(
        tensor: *mut ggml_tensor,
        data: *const c_void,
        offset: usize,
        size: usize,
        n_copies: usize,
        stride_tensor: usize,
        stride_data: usize,
    ) {
        // SAFETY: caller contract.
        let t = unsafe { non_null(tensor, F, "tensor") };
        // SAFETY: `t` is live.
        let buf = unsafe { storage_buffer(t) };
        // SAFETY: a tensor's buffer is live while the tensor is.
        let b = unsafe { storage_ref(buf, F) };
        let Some(set_2d) = b.iface.set_tensor_2d.filter(|_| n_copies > 1) else {
            for i in 0..n_copies {
                // SAFETY: caller contract: row `i` of `data` is readable.
                unsafe {
                    ggml_backend_tensor_set(
                        tensor,
                        data.cast::<u8>().wrapping_add(i * stride_data).cast(),
                        offset + i * stride_tensor,
                        size,
                    )
                };
            }
            return;
        };
        if size == 0 {
            return;
        }
        check_rows(t, offset, size, n_copies, stride_tensor, Access::Write, F);
        // SAFETY: checked rows; the backend's callback with its own buffer.
        unsafe {
            set_2d(
                buf,
                tensor,
                data,
                offset,
                size,
                n_copies,
                stride_tensor,
                stride_data,
            )
        }
    }
}

export! {
    /// Reads `n_copies` rows of `size` bytes: tensor byte `offset + i*stride_tensor` to
    /// `data + i*stride_data` (stock `ggml_backend_tensor_get_2d`). Same dispatch and checks as
    /// [`ggml_backend_tensor_set_2d`].
    ///
    /// # Safety
    /// `tensor` must be NULL or a live tensor; `data` must be writable for every row.
    pub unsafe fn ggml_backend_tensor_get_2d(
        tensor: *const ggml_tensor,
        data: *mut c_void,
        offset: usize,
        size: usize,
        n_copies: usize,
        stride_tensor: usize,
        stride_data: usize,
    ) {
        // SAFETY: caller contract.
        let t = unsafe { non_null(tensor, F, "tensor") };
        // SAFETY: `t` is live.
        let buf = unsafe { storage_buffer(t) };
        // SAFETY: a tensor's buffer is live while the tensor is.
        let b = unsafe { storage_ref(buf, F) };
        let Some(get_2d) = b.iface.get_tensor_2d.filter(|_| n_copies > 1) else {
            for i in 0..n_copies {
                // SAFETY: caller contract: row `i` of `data` is writable.
                unsafe {
                    ggml_backend_tensor_get(
                        tensor,
                        data.cast::<u8>().wrapping_add(i * stride_data).cast(),
                        offset + i * stride_tensor,
                        size,
                    )
                };
            }
            return;
        };
        if size == 0 {
            return;
        }
        check_rows(t, offset, size, n_copies, stride_tensor, Access::Read, F);
        // SAFETY: checked rows; the backend's callback with its own buffer.
        unsafe {
            get_2d(
                buf,
                tensor,
                data,
                offset,
                size,
                n_copies,
                stride_tensor,
                stride_data,
            )
        }
    }
}

/// Aborts naming `func` unless `t` has data and the rows lie inside it.
fn check_rows(
    t: &ggml_tensor,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride: usize,
    access: Access,
    func: &str,
) {
    if t.data.is_null() {
        ffi::fatal(func, "tensor not allocated");
    }
    let nbytes = nbytes(t);
    if !rows_in_tensor(offset, size, n_copies, stride, nbytes) {
        ffi::fatal(
            func,
            &format!(
                "{}: offset {offset} + ({n_copies}-1)*stride {stride} + size {size} > ggml_nbytes {nbytes}",
                access.oob()
            ),
        );
    }
}

export! {
    /// Fills `size` bytes of `tensor` at byte `offset` with `value` through its buffer's
    /// `memset_tensor` (stock `ggml_backend_tensor_memset`). A zero `size` does nothing, not even
    /// the buffer check. Aborts on a NULL tensor, a missing buffer or data, a range outside the
    /// tensor, or a buffer without `memset_tensor`.
    ///
    /// # Safety
    /// `tensor` must be NULL or a live tensor.
    pub unsafe fn ggml_backend_tensor_memset(
        tensor: *mut ggml_tensor,
        value: u8,
        offset: usize,
        size: usize,
    ) {
        // SAFETY: caller contract.
        let t = unsafe { non_null(tensor, F, "tensor") };
        if size == 0 {
            return;
        }
        // SAFETY: caller contract.
        if let Some((buf_ptr, buf)) = unsafe { checked_access(t, offset, size, Access::Write, F) } {
            let Some(memset) = buf.iface.memset_tensor else {
                ffi::fatal(F, "memset not implemented by backend buffer");
            };
            // SAFETY: checked range; the backend's callback with its own buffer.
            unsafe { memset(buf_ptr, tensor, value, offset, size) }
        }
    }
}

export! {
    /// Queues a write of `size` bytes from `data` into `tensor` at `offset` on `backend` (stock
    /// `ggml_backend_tensor_set_async`): through the backend's `set_tensor_async`, or, when it has
    /// none, a synchronize followed by a blocking [`ggml_backend_tensor_set`]. `data` must stay
    /// valid until the backend is synchronized. Aborts on NULL backend or tensor, a tensor without
    /// data, or a range outside it.
    ///
    /// # Safety
    /// `backend` and `tensor` must be NULL or live; `data` readable for `size` bytes.
    pub unsafe fn ggml_backend_tensor_set_async(
        backend: ggml_backend_t,
        tensor: *mut ggml_tensor,
        data: *const c_void,
        offset: usize,
        size: usize,
    ) {
        // SAFETY: caller contract.
        let be = unsafe { backend_ref(backend, F) };
        // SAFETY: caller contract.
        let t = unsafe { non_null(tensor, F, "tensor") };
        check_async(t, offset, size, Access::Write, F);
        match be.iface.set_tensor_async {
            // SAFETY: the backend's callback; range checked.
            Some(f) => unsafe { f(backend, tensor, data, offset, size) },
            None => {
                // SAFETY: live backend and tensor.
                unsafe {
                    ggml_backend_synchronize(backend);
                    ggml_backend_tensor_set(tensor, data, offset, size);
                }
            }
        }
    }
}

export! {
    /// Queues a read of `size` bytes of `tensor` at `offset` into `data` on `backend` (stock
    /// `ggml_backend_tensor_get_async`); the data is there after the backend is synchronized.
    /// Fallback and checks as [`ggml_backend_tensor_set_async`].
    ///
    /// # Safety
    /// `backend` and `tensor` must be NULL or live; `data` writable for `size` bytes until the
    /// backend is synchronized.
    pub unsafe fn ggml_backend_tensor_get_async(
        backend: ggml_backend_t,
        tensor: *const ggml_tensor,
        data: *mut c_void,
        offset: usize,
        size: usize,
    ) {
        // SAFETY: caller contract.
        let be = unsafe { backend_ref(backend, F) };
        // SAFETY: caller contract.
        let t = unsafe { non_null(tensor, F, "tensor") };
        check_async(t, offset, size, Access::Read, F);
        match be.iface.get_tensor_async {
            // SAFETY: the backend's callback; range checked.
            Some(f) => unsafe { f(backend, tensor, data, offset, size) },
            None => {
                // SAFETY: live backend and tensor.
                unsafe {
                    ggml_backend_synchronize(backend);
                    ggml_backend_tensor_get(tensor, data, offset, size);
                }
            }
        }
    }
}

/// The checks of the single-range async accessors: data present and range inside (even when
/// `size` is 0, as stock checks before dispatching).
fn check_async(t: &ggml_tensor, offset: usize, size: usize, access: Access, func: &str) {
    if t.data.is_null() {
        ffi::fatal(func, "tensor not allocated");
    }
    let nbytes = nbytes(t);
    if !range_in_tensor(offset, size, nbytes) {
        ffi::fatal(
            func,
            &format!(
                "{}: offset {offset} + size {size} > ggml_nbytes {nbytes}",
                access.oob()
            ),
        );
    }
}

export! {
    /// Queued form of [`ggml_backend_tensor_set_2d`] on `backend` (stock
    /// `ggml_backend_tensor_set_2d_async`): the backend's `set_tensor_2d_async` when it has one and
    /// `n_copies > 1`, else one [`ggml_backend_tensor_set_async`] per row.
    ///
    /// # Safety
    /// `backend` and `tensor` must be NULL or live; every row of `data` readable until the backend
    /// is synchronized.
    pub unsafe fn ggml_backend_tensor_set_2d_async(
        backend: ggml_backend_t,
        tensor: *mut ggml_tensor,
        data: *const c_void,
        offset: usize,
        size: usize,
        n_copies: usize,
        stride_tensor: usize,
        stride_data: usize,
    ) {
        // SAFETY: caller contract.
        let be = unsafe { backend_ref(backend, F) };
        // SAFETY: caller contract.
        let t = unsafe { non_null(tensor, F, "tensor") };
        if t.data.is_null() {
            ffi::fatal(F, "tensor not allocated");
        }
        let Some(f) = be.iface.set_tensor_2d_async.filter(|_| n_copies > 1) else {
            for i in 0..n_copies {
                // SAFETY: caller contract: row `i` of `data` is readable.
                unsafe {
                    ggml_backend_tensor_set_async(
                        backend,
                        tensor,
                        data.cast::<u8>().wrapping_add(i * stride_data).cast(),
                        offset + i * stride_tensor,
                        size,
                    )
                };
            }
            return;
        };
        if size == 0 {
            return;
        }
        check_rows(t, offset, size, n_copies, stride_tensor, Access::Write, F);
        // SAFETY: checked rows; the backend's callback.
        unsafe {
            f(
                backend,
                tensor,
                data,
                offset,
                size,
                n_copies,
                stride_tensor,
                stride_data,
            )
        }
    }
}

export! {
    /// Queued form of [`ggml_backend_tensor_get_2d`] on `backend` (stock
    /// `ggml_backend_tensor_get_2d_async`); dispatch as [`ggml_backend_tensor_set_2d_async`].
    ///
    /// # Safety
    /// `backend` and `tensor` must be NULL or live; every row of `data` writable until the backend
    /// is synchronized.
    pub unsafe fn ggml_backend_tensor_get_2d_async(
        backend: ggml_backend_t,
        tensor: *const ggml_tensor,
        data: *mut c_void,
        offset: usize,
        size: usize,
        n_copies: usize,
        stride_tensor: usize,
        stride_data: usize,
    ) {
        // SAFETY: caller contract.
        let be = unsafe { backend_ref(backend, F) };
        // SAFETY: caller contract.
        let t = unsafe { non_null(tensor, F, "tensor") };
        if t.data.is_null() {
            ffi::fatal(F, "tensor not allocated");
        }
        let Some(f) = be.iface.get_tensor_2d_async.filter(|_| n_copies > 1) else {
            for i in 0..n_copies {
                // SAFETY: caller contract: row `i` of `data` is writable.
                unsafe {
                    ggml_backend_tensor_get_async(
                        backend,
                        tensor,
                        data.cast::<u8>().wrapping_add(i * stride_data).cast(),
                        offset + i * stride_tensor,
                        size,
                    )
                };
            }
            return;
        };
        if size == 0 {
            return;
        }
        check_rows(t, offset, size, n_copies, stride_tensor, Access::Read, F);
        // SAFETY: checked rows; the backend's callback.
        unsafe {
            f(
                backend,
                tensor,
                data,
                offset,
                size,
                n_copies,
                stride_tensor,
                stride_data,
            )
        }
    }
}

export! {
    /// Copies all of `src` into `dst` (stock `ggml_backend_tensor_copy`), blocking: a write from
    /// `src`'s memory when `src`'s buffer is host memory, else a read into `dst`'s memory when
    /// `dst`'s is, else the destination buffer's `cpy_tensor`, else a round trip through a
    /// temporary host allocation. Nothing when `src == dst`. Aborts when the layouts (type,
    /// shape, strides) differ.
    ///
    /// # Safety
    /// `src` and `dst` must be NULL or live, allocated tensors.
    pub unsafe fn ggml_backend_tensor_copy(src: *const ggml_tensor, dst: *mut ggml_tensor) {
        // SAFETY: caller contract.
        let (s, d) = unsafe { (non_null(src, F, "src"), non_null(dst, F, "dst")) };
        if !same_layout(s, d) {
            ffi::fatal(F, "cannot copy tensors with different layouts");
        }
        if std::ptr::eq(src, dst) {
            return;
        }
        // SAFETY: live tensors and their buffers.
        unsafe { copy_blocking(src, dst) }
    }
}

/// The body of [`ggml_backend_tensor_copy`] after its checks.
///
/// # Safety
/// `src` and `dst` are live, allocated tensors of the same layout.
unsafe fn copy_blocking(src: *const ggml_tensor, dst: *mut ggml_tensor) {
    // SAFETY: caller contract.
    let (s, d) = unsafe { (&*src, &*dst) };
    let nbytes = nbytes(s);
    // SAFETY: buffers of live tensors are live (NULL aborts inside).
    unsafe {
        if ggml_backend_buffer_is_host(s.buffer) {
            ggml_backend_tensor_set(dst, s.data, 0, nbytes);
        } else if ggml_backend_buffer_is_host(d.buffer) {
            ggml_backend_tensor_get(src, d.data, 0, nbytes);
        } else if !ggml_backend_buffer_copy_tensor(src, dst) {
            let mut tmp = vec![0u8; nbytes];
            ggml_backend_tensor_get(src, tmp.as_mut_ptr().cast(), 0, nbytes);
            ggml_backend_tensor_set(dst, tmp.as_ptr().cast(), 0, nbytes);
        }
    }
}

export! {
    /// Queues a copy of `src` (on `backend_src`) into `dst` (on `backend_dst`), stock
    /// `ggml_backend_tensor_copy_async`: the destination backend's `cpy_tensor_async` when it has
    /// one and accepts; otherwise both backends are synchronized and the copy is done blocking
    /// with [`ggml_backend_tensor_copy`]. Nothing when `src == dst`. Aborts when the layouts
    /// differ or `backend_dst` is NULL (and `backend_src` is NULL on the fallback path).
    ///
    /// # Safety
    /// Backends NULL or live; `src`, `dst` NULL or live, allocated tensors.
    pub unsafe fn ggml_backend_tensor_copy_async(
        backend_src: ggml_backend_t,
        backend_dst: ggml_backend_t,
        src: *const ggml_tensor,
        dst: *mut ggml_tensor,
    ) {
        // SAFETY: caller contract.
        let (s, d) = unsafe { (non_null(src, F, "src"), non_null(dst, F, "dst")) };
        if !same_layout(s, d) {
            ffi::fatal(F, "cannot copy tensors with different layouts");
        }
        if std::ptr::eq(src, dst) {
            return;
        }
        // SAFETY: caller contract.
        let bd = unsafe { non_null(backend_dst, F, "backend_dst") };
        if let Some(f) = bd.iface.cpy_tensor_async {
            // SAFETY: the destination backend's callback with live tensors.
            if unsafe { f(backend_src, backend_dst, src, dst) } {
                return;
            }
        }
        // SAFETY: live backends and tensors.
        unsafe {
            ggml_backend_synchronize(backend_src);
            ggml_backend_synchronize(backend_dst);
            ggml_backend_tensor_copy(src, dst);
        }
    }
}

export! {
    /// Places `tensor` at address `addr` of `buffer` and lets the backend initialise it (stock
    /// `ggml_backend_tensor_alloc`). Aborts when the tensor already has a buffer or data, is a
    /// view, or `addr .. addr + alloc_size` leaves the buffer (unchecked for meta buffers).
    ///
    /// # Safety
    /// `buffer` NULL or live; `tensor` NULL or a live tensor.
    pub unsafe fn ggml_backend_tensor_alloc(
        buffer: ggml_backend_buffer_t,
        tensor: *mut ggml_tensor,
        addr: *mut c_void,
    ) -> ggml_status {
        // SAFETY: caller contract.
        let t = unsafe { non_null_mut(tensor, F, "tensor") };
        ggml_sys_assert(t.buffer.is_null(), F, "tensor->buffer == NULL");
        ggml_sys_assert(t.data.is_null(), F, "tensor->data == NULL");
        ggml_sys_assert(t.view_src.is_null(), F, "tensor->view_src == NULL");
        // SAFETY: caller contract (NULL aborts inside).
        let base = unsafe { ggml_backend_buffer_get_base(buffer) } as usize;
        let a = addr as usize;
        if a < base {
            ffi::fatal(F, &format!("addr {a:#x} < buffer base {base:#x}"));
        }
        // SAFETY: live buffer; the meta check only compares its interface.
        if !unsafe { ggml_sys::ggml_backend_buffer_is_meta(buffer) } {
            // SAFETY: live buffer and tensor.
            let (need, size) = unsafe {
                (
                    ggml_backend_buffer_get_alloc_size(buffer, tensor),
                    ggml_backend_buffer_get_size(buffer),
                )
            };
            if !range_in_tensor(a - base, need, size) {
                ffi::fatal(
                    F,
                    &format!(
                        "tensor does not fit its buffer: offset {} + alloc size {need} > buffer size {size}",
                        a - base
                    ),
                );
            }
        }
        t.buffer = buffer;
        t.data = addr;
        // SAFETY: live buffer and tensor.
        unsafe { ggml_backend_buffer_init_tensor(buffer, tensor) }
    }
}

export! {
    /// Gives the view `tensor` its view source's buffer and the address `view_src->data +
    /// view_offs`, then lets the backend initialise it (stock `ggml_backend_view_init`). Aborts when
    /// the tensor already has a buffer, is not a view, or its source is not allocated.
    ///
    /// # Safety
    /// `tensor` NULL or a live tensor whose `view_src` is live.
    pub unsafe fn ggml_backend_view_init(tensor: *mut ggml_tensor) -> ggml_status {
        // SAFETY: caller contract.
        let t = unsafe { non_null_mut(tensor, F, "tensor") };
        ggml_sys_assert(t.buffer.is_null(), F, "tensor->buffer == NULL");
        ggml_sys_assert(!t.view_src.is_null(), F, "tensor->view_src != NULL");
        // SAFETY: checked non-NULL; live by contract.
        let v = unsafe { &*t.view_src };
        ggml_sys_assert(!v.buffer.is_null(), F, "tensor->view_src->buffer != NULL");
        ggml_sys_assert(!v.data.is_null(), F, "tensor->view_src->data != NULL");
        t.buffer = v.buffer;
        t.data = v.data.cast::<u8>().wrapping_add(t.view_offs).cast();
        // SAFETY: live buffer and tensor.
        unsafe { ggml_backend_buffer_init_tensor(t.buffer, tensor) }
    }
}

/// Aborts with stock's `GGML_ASSERT(cond) failed` wording unless `ok`.
fn ggml_sys_assert(ok: bool, func: &str, cond: &str) {
    if !ok {
        ffi::fatal(func, &format!("GGML_ASSERT({cond}) failed"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// `nbytes` equals ggml's `ggml_nbytes` for every type, with empty and negative
        /// dimensions, contiguous and arbitrary strides (wrapping included).
        #[test]
        fn nbytes_is_ggml_nbytes(
            ty in 0u32..ggml_sys::GGML_TYPE_COUNT,
            ne in proptest::array::uniform4(-2i64..70),
            contiguous in any::<bool>(),
            nb in proptest::array::uniform4(any::<u32>()),
        ) {
            // SAFETY: a pure lookup in ggml's type table.
            let traits = unsafe { &*ggml_sys::ggml_get_type_traits(ty) };
            // Removed types have block size 0: ggml never makes tensors of them.
            prop_assume!(traits.blck_size > 0);
            let mut t = ggml_tensor { type_: ty, ne, ..Default::default() };
            if contiguous {
                t.nb[0] = traits.type_size;
                t.nb[1] = t.nb[0] * (ne[0].max(0) as usize / traits.blck_size as usize);
                t.nb[2] = t.nb[1] * ne[1].max(0) as usize;
                t.nb[3] = t.nb[2] * ne[2].max(0) as usize;
            } else {
                t.nb = nb.map(|x| x as usize);
            }
            // SAFETY: `t` is a live tensor of a valid type.
            prop_assert_eq!(nbytes(&t), unsafe { ggml_sys::ggml_nbytes(&t) });
        }
    }

    #[test]
    fn ranges() {
        assert!(range_in_tensor(0, 16, 16));
        assert!(range_in_tensor(8, 8, 16));
        assert!(!range_in_tensor(8, 9, 16));
        assert!(range_in_tensor(16, 0, 16));
        assert!(!range_in_tensor(usize::MAX, 2, 16));
    }

    #[test]
    fn rows() {
        // 4 rows of 8 bytes, 16 apart: last row ends at 3*16 + 8 = 56.
        assert!(rows_in_tensor(0, 8, 4, 16, 56));
        assert!(!rows_in_tensor(0, 8, 4, 16, 55));
        assert!(rows_in_tensor(4, 8, 4, 16, 60));
        assert!(!rows_in_tensor(0, 8, 0, 16, 56));
        assert!(!rows_in_tensor(0, 8, usize::MAX, 16, 56));
    }

    #[test]
    fn empty_ops() {
        use ggml_sys::*;
        let empty: Vec<ggml_op> = (0..GGML_OP_COUNT).filter(|&op| op_is_empty(op)).collect();
        assert_eq!(
            empty,
            vec![
                GGML_OP_NONE,
                GGML_OP_VIEW,
                GGML_OP_RESHAPE,
                GGML_OP_PERMUTE,
                GGML_OP_TRANSPOSE
            ]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
        );
    }

    #[test]
    fn layouts() {
        let mut a = ggml_tensor {
            ne: [4, 2, 1, 1],
            nb: [4, 16, 32, 32],
            ..Default::default()
        };
        let b = a;
        assert!(same_layout(&a, &b));
        a.nb[1] = 20;
        assert!(!same_layout(&a, &b));
        a.nb[1] = 16;
        a.type_ = ggml_sys::GGML_TYPE_F16;
        assert!(!same_layout(&a, &b));
    }
}
