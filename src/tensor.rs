//! Tensor data through the backend layer: writes, reads and fills (`ggml_backend_tensor_set`,
//! `_get`, `_memset`, their strided `_2d` and queued `_async` forms), copies between tensors of
//! any two buffers (`ggml_backend_tensor_copy`, `_copy_async`), and placing a tensor in a
//! buffer (`ggml_backend_tensor_alloc`, `ggml_backend_view_init`).
//!
//! Data always goes through the interface of the buffer that holds the tensor's storage (its
//! view source's buffer for a view), never through `tensor->data` directly, so device buffers
//! whose addresses the host cannot use work. Offsets and sizes are in bytes; a range outside
//! `ggml_nbytes(tensor)` aborts, as stock's `GGML_ASSERT`s do (ours also catch overflow).
//!
//! The eight set/get entry points are one function, [`access`], over the direction
//! ([`Access`]), the target ([`Target`]: the buffer's blocking callbacks or a backend's queue)
//! and the rows moved ([`Rows`]: one range, or `n_copies` strided rows), with one range check.

pub mod meta;

use std::os::raw::c_void;

use ggml_sys::{
    ggml_backend, ggml_backend_buffer, ggml_backend_buffer_t, ggml_backend_t, ggml_status,
    ggml_tensor,
};

use crate::backend::{self, backend_ref};
use crate::buffer::{self, buffer_ref};
use crate::ffi::{self, export, handle, non_null, non_null_mut};
use crate::iface::required;
use meta::{nbytes, same_layout, storage_buffer};

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

/// Which way a data access moves bytes.
#[derive(Clone, Copy)]
pub(crate) enum Access {
    /// From host memory into the tensor (`set`).
    Write,
    /// From the tensor into host memory (`get`).
    Read,
}

impl Access {
    /// The sanitizer's word for it.
    fn kind(self) -> crate::sanitize::Kind {
        match self {
            Access::Write => crate::sanitize::Kind::Write,
            Access::Read => crate::sanitize::Kind::Read,
        }
    }

    /// Stock's words for a range that leaves the tensor.
    fn oob(self) -> &'static str {
        match self {
            Access::Write => "tensor write out of bounds",
            Access::Read => "tensor read out of bounds",
        }
    }
}

/// Where a data access goes.
#[derive(Clone, Copy)]
pub(crate) enum Target<'a> {
    /// The blocking callbacks of the buffer that holds the tensor's storage.
    Buffer,
    /// The queue of a backend (the `_async` forms): its own callbacks, or, when it has none for
    /// one range, a synchronize followed by the buffer's.
    Queue(&'a ggml_backend),
}

/// The bytes an access moves: `n_copies` rows of `size` bytes, row `i` at byte
/// `offset + i * stride_tensor` of the tensor and at `data + i * stride_data` in host memory.
/// The plain forms move one row.
#[derive(Clone, Copy)]
pub(crate) struct Rows {
    /// Byte offset of the first row in the tensor.
    pub offset: usize,
    /// Bytes per row.
    pub size: usize,
    /// Number of rows.
    pub n_copies: usize,
    /// Bytes from one row to the next in the tensor.
    pub stride_tensor: usize,
    /// Bytes from one row to the next in host memory.
    pub stride_data: usize,
}

impl Rows {
    /// One range of `size` bytes at `offset`.
    pub(crate) fn one(offset: usize, size: usize) -> Rows {
        Rows {
            offset,
            size,
            n_copies: 1,
            stride_tensor: 0,
            stride_data: 0,
        }
    }

    /// `n_copies` rows, as the `_2d` entry points take them.
    pub(crate) fn strided(
        offset: usize,
        size: usize,
        n_copies: usize,
        stride_tensor: usize,
        stride_data: usize,
    ) -> Rows {
        Rows {
            offset,
            size,
            n_copies,
            stride_tensor,
            stride_data,
        }
    }

    /// Row `i` alone, and its host address from `data`. The sums wrap as C's `size_t` does;
    /// the range check of the row then catches an offset that wrapped.
    fn row(&self, i: usize, data: *mut c_void) -> (Rows, *mut c_void) {
        let offset = self.offset.wrapping_add(i.wrapping_mul(self.stride_tensor));
        let at = data
            .cast::<u8>()
            .wrapping_add(i.wrapping_mul(self.stride_data));
        (Rows::one(offset, self.size), at.cast())
    }
}

/// A one-range data callback of a buffer (`H` = `ggml_backend_buffer_t`) or a backend
/// (`H` = `ggml_backend_t`), in the direction it was picked for.
enum RangeFn<H> {
    Set(unsafe extern "C" fn(H, *mut ggml_tensor, *const c_void, usize, usize)),
    Get(unsafe extern "C" fn(H, *const ggml_tensor, *mut c_void, usize, usize)),
}

/// The strided (`_2d`) form of [`RangeFn`].
enum RowsFn<H> {
    Set(
        unsafe extern "C" fn(H, *mut ggml_tensor, *const c_void, usize, usize, usize, usize, usize),
    ),
    Get(
        unsafe extern "C" fn(H, *const ggml_tensor, *mut c_void, usize, usize, usize, usize, usize),
    ),
}

impl<H> RangeFn<H> {
    /// Calls the callback for `rows` (one range) of `t` with host memory `data`.
    ///
    /// # Safety
    /// `h` is the callback's own buffer or backend; the range lies in `t`, which is allocated;
    /// `data` is valid for it in the callback's direction.
    unsafe fn call(self, h: H, t: &ggml_tensor, data: *mut c_void, rows: Rows) {
        // SAFETY: the caller's contract; a callback writes the tensor's data, not its header,
        // so the shared borrow of `t` stays valid.
        unsafe {
            match self {
                RangeFn::Set(f) => f(h, handle(t), data, rows.offset, rows.size),
                RangeFn::Get(f) => f(h, t, data, rows.offset, rows.size),
            }
        }
    }
}

impl<H> RowsFn<H> {
    /// Calls the callback for all of `rows` of `t` with host memory `data`.
    ///
    /// # Safety
    /// As [`RangeFn::call`], for every row.
    unsafe fn call(self, h: H, t: &ggml_tensor, data: *mut c_void, r: Rows) {
        let (o, s, n, st, sd) = (r.offset, r.size, r.n_copies, r.stride_tensor, r.stride_data);
        // SAFETY: as in `RangeFn::call`.
        unsafe {
            match self {
                RowsFn::Set(f) => f(h, handle(t), data, o, s, n, st, sd),
                RowsFn::Get(f) => f(h, t, data, o, s, n, st, sd),
            }
        }
    }
}

/// The buffer that holds `t`'s storage, aborting naming `func` with stock's "tensor buffer
/// not set" when there is none.
fn storage<'a>(t: &ggml_tensor, func: &str) -> &'a ggml_backend_buffer {
    // SAFETY: a live tensor's view source is live.
    let buf = unsafe { storage_buffer(t) };
    if buf.is_null() {
        ffi::fatal(func, "tensor buffer not set");
    }
    // SAFETY: non-NULL, and a tensor's buffer is live while the tensor is.
    unsafe { &*buf }
}

/// The one range check of every data access: aborts naming `func` unless `t` has data and
/// all of `rows` lie inside `ggml_nbytes(t)`. The message is stock's, with the numbers.
fn check_range(t: &ggml_tensor, rows: Rows, access: Access, func: &str) {
    if t.data.is_null() {
        ffi::fatal(func, "tensor not allocated");
    }
    let Rows {
        offset,
        size,
        n_copies,
        stride_tensor: stride,
        ..
    } = rows;
    let nbytes = nbytes(t);
    if rows_in_tensor(offset, size, n_copies, stride, nbytes) {
        return;
    }
    let oob = access.oob();
    let msg = if n_copies == 1 {
        format!("{oob}: offset {offset} + size {size} > ggml_nbytes {nbytes}")
    } else {
        format!(
            "{oob}: offset {offset} + ({n_copies}-1)*stride {stride} + size {size} > ggml_nbytes {nbytes}"
        )
    };
    ffi::fatal(func, &msg)
}

/// Moves `rows` between `t` and host memory `data`, in the direction `access`, through
/// `target`: the body of the eight `ggml_backend_tensor_{set,get}{,_2d}{,_async}` functions,
/// whose name `func` its aborts carry. Several rows go through the target's strided callback
/// when it has one, else row by row through the one-range path ([`access_range`]).
///
/// Checks, as stock: a buffer target needs the tensor's buffer and a queue the tensor's data
/// (before anything else); a strided call with `size` 0 does nothing; every range must lie in
/// the tensor.
///
/// # Safety
/// `data` must be valid for every row in the direction of `access` (for a queue, until the
/// backend is synchronized).
pub(crate) unsafe fn access(
    target: Target<'_>,
    access: Access,
    t: &ggml_tensor,
    data: *mut c_void,
    rows: Rows,
    func: &str,
) {
    let took = match target {
        Target::Buffer => {
            let b = storage(t, func);
            let f = match access {
                Access::Write => b.iface.set_tensor_2d.map(RowsFn::Set),
                Access::Read => b.iface.get_tensor_2d.map(RowsFn::Get),
            };
            // SAFETY: the buffer's own callback; `data` by the caller's contract.
            unsafe { strided(f, handle(b), None, access, t, data, rows, func) }
        }
        Target::Queue(be) => {
            if t.data.is_null() {
                ffi::fatal(func, "tensor not allocated");
            }
            let f = match access {
                Access::Write => be.iface.set_tensor_2d_async.map(RowsFn::Set),
                Access::Read => be.iface.get_tensor_2d_async.map(RowsFn::Get),
            };
            // SAFETY: the backend's own callback; `data` by the caller's contract.
            unsafe { strided(f, handle(be), Some(be), access, t, data, rows, func) }
        }
    };
    if took {
        return;
    }
    for i in 0..rows.n_copies {
        let (row, at) = rows.row(i, data);
        // SAFETY: row `i` of `data` is valid by the caller's contract.
        unsafe { access_range(target, access, t, at, row, func) };
    }
}

/// The strided path of [`access`]: when there are several rows and the target has a strided
/// callback `f` (of handle `h`), checks the rows and hands them all to it (nothing for a zero
/// `size`), and returns true; otherwise returns false, and the rows go one by one.
///
/// # Safety
/// `h` is `f`'s own buffer or backend; `data` as for [`access`].
#[allow(clippy::too_many_arguments)]
unsafe fn strided<H>(
    f: Option<RowsFn<H>>,
    h: H,
    queue: Option<&ggml_backend>,
    access: Access,
    t: &ggml_tensor,
    data: *mut c_void,
    rows: Rows,
    func: &str,
) -> bool {
    let Some(f) = f.filter(|_| rows.n_copies > 1) else {
        return false;
    };
    if rows.size != 0 {
        check_range(t, rows, access, func);
        for i in 0..rows.n_copies {
            let (row, _) = rows.row(i, data);
            crate::sanitize::data(queue, access.kind(), t, row.offset, row.size, func);
        }
        // SAFETY: the caller's contract; the rows lie in `t`, which has data.
        unsafe { f.call(h, t, data, rows) };
    }
    true
}

/// [`access`] for the entry points, which hold the tensor as a C pointer: borrows it, aborting
/// naming `func` when it is NULL. Host memory is one pointer type for both directions; a
/// write only reads through it (the `set` entry points cast their `const` data).
///
/// # Safety
/// `tensor` must be NULL or live; `data` as for [`access`].
unsafe fn access_c(
    target: Target<'_>,
    access: Access,
    tensor: *const ggml_tensor,
    data: *mut c_void,
    rows: Rows,
    func: &str,
) {
    // SAFETY: the caller's contract.
    unsafe {
        self::access(
            target,
            access,
            non_null(tensor, func, "tensor"),
            data,
            rows,
            func,
        )
    }
}

/// [`access_c`] on `backend`'s queue, for the `_async` entry points: borrows the backend,
/// aborting naming `func` when it is NULL.
///
/// # Safety
/// `backend` and `tensor` must be NULL or live; `data` valid for `rows` in this direction
/// until the backend is synchronized.
unsafe fn queued(
    backend: ggml_backend_t,
    access: Access,
    tensor: *const ggml_tensor,
    data: *mut c_void,
    rows: Rows,
    func: &str,
) {
    // SAFETY: the caller's contract: `backend` is NULL (`backend_ref` aborts) or live.
    let be = unsafe { backend_ref(backend, func) };
    // SAFETY: the caller's contract, for the tensor and the data.
    unsafe { access_c(Target::Queue(be), access, tensor, data, rows, func) }
}

/// One range of [`access`]. A buffer target does nothing for a zero size (after checking the
/// buffer); a queue checks the range even then, and without a callback of its own
/// synchronizes and goes through the buffer.
///
/// # Safety
/// As [`access`], for the one range `row`.
unsafe fn access_range(
    target: Target<'_>,
    access: Access,
    t: &ggml_tensor,
    data: *mut c_void,
    row: Rows,
    func: &str,
) {
    match target {
        Target::Buffer => {
            let b = storage(t, func);
            if row.size == 0 {
                return;
            }
            check_range(t, row, access, func);
            let f = match access {
                Access::Write => RangeFn::Set(required(b.iface.set_tensor, func, "set_tensor")),
                Access::Read => RangeFn::Get(required(b.iface.get_tensor, func, "get_tensor")),
            };
            crate::sanitize::data(None, access.kind(), t, row.offset, row.size, func);
            // SAFETY: the buffer's own callback; range checked; `data` by contract.
            unsafe { f.call(handle(b), t, data, row) }
        }
        Target::Queue(be) => {
            check_range(t, row, access, func);
            let f = match access {
                Access::Write => be.iface.set_tensor_async.map(RangeFn::Set),
                Access::Read => be.iface.get_tensor_async.map(RangeFn::Get),
            };
            match f {
                Some(f) => {
                    crate::sanitize::data(Some(be), access.kind(), t, row.offset, row.size, func);
                    // SAFETY: the backend's own callback; range checked; `data` by contract.
                    unsafe { f.call(handle(be), t, data, row) }
                }
                None => {
                    backend::synchronize(be);
                    // SAFETY: as above, now blocking.
                    unsafe { access_range(Target::Buffer, access, t, data, row, func) }
                }
            }
        }
    }
}

/// The template of the four strided exports (`*_2d`, `*_2d_async`): it appends stock's common
/// parameter tail `offset, size, n_copies, stride_tensor, stride_data` (bytes, bytes, rows,
/// bytes, bytes) to the leading parameters given, and hands the body those rows as `$rows`, so
/// the four C signatures are written once and cannot drift apart.
macro_rules! export_2d {
    (
        $(#[$attr:meta])*
        pub unsafe fn $name:ident($($head:ident: $head_ty:ty),* $(,)?) |$rows:ident| $body:block
    ) => {
        export! {
            $(#[$attr])*
            pub unsafe fn $name(
                $($head: $head_ty,)*
                offset: usize,
                size: usize,
                n_copies: usize,
                stride_tensor: usize,
                stride_data: usize,
            ) {
                let $rows = Rows::strided(offset, size, n_copies, stride_tensor, stride_data);
                $body
            }
        }
    };
}

export! {
    /// Writes `size` bytes from host memory `data` into `tensor` at byte `offset`, through its
    /// buffer's `set_tensor` (stock `ggml_backend_tensor_set`). Blocking. A zero `size` does
    /// nothing (the tensor still needs a buffer). Aborts on a NULL tensor, a tensor without
    /// buffer or data, or a range outside the tensor.
    ///
    /// # Safety
    /// `tensor` must be NULL or a live tensor; `data` must be readable for `size` bytes.
    pub unsafe fn ggml_backend_tensor_set(
        tensor: *mut ggml_tensor,
        data: *const c_void,
        offset: usize,
        size: usize,
    ) {
        let rows = Rows::one(offset, size);
        // SAFETY: this export's `# Safety` contract, as the callee requires it.
        unsafe { access_c(Target::Buffer, Access::Write, tensor, data.cast_mut(), rows, F) }
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
        let rows = Rows::one(offset, size);
        // SAFETY: this export's `# Safety` contract, as the callee requires it.
        unsafe { access_c(Target::Buffer, Access::Read, tensor, data, rows, F) }
    }
}

export_2d! {
    /// Writes `n_copies` rows of `size` bytes: row `i` from `data + i*stride_data` to tensor byte
    /// `offset + i*stride_tensor` (stock `ggml_backend_tensor_set_2d`). Uses the buffer's
    /// `set_tensor_2d` when it has one and `n_copies > 1`, otherwise `set_tensor` once per row.
    /// Aborts like [`ggml_backend_tensor_set`].
    ///
    /// # Safety
    /// `tensor` must be NULL or a live tensor; `data` must be readable for every row.
    pub unsafe fn ggml_backend_tensor_set_2d(
        tensor: *mut ggml_tensor,
        data: *const c_void,
    ) |rows| {
        // SAFETY: this export's `# Safety` contract, as the callee requires it.
        unsafe { access_c(Target::Buffer, Access::Write, tensor, data.cast_mut(), rows, F) }
    }
}

export_2d! {
    /// Reads `n_copies` rows of `size` bytes: tensor byte `offset + i*stride_tensor` to
    /// `data + i*stride_data` (stock `ggml_backend_tensor_get_2d`). Same dispatch and checks as
    /// [`ggml_backend_tensor_set_2d`].
    ///
    /// # Safety
    /// `tensor` must be NULL or a live tensor; `data` must be writable for every row.
    pub unsafe fn ggml_backend_tensor_get_2d(
        tensor: *const ggml_tensor,
        data: *mut c_void,
    ) |rows| {
        // SAFETY: this export's `# Safety` contract, as the callee requires it.
        unsafe { access_c(Target::Buffer, Access::Read, tensor, data, rows, F) }
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
        // SAFETY: forwards the contract of `ggml_backend_tensor_memset`: `tensor` is NULL or live
        // (`non_null` aborts on NULL).
        let t = unsafe { non_null(tensor, F, "tensor") };
        if size == 0 {
            return;
        }
        let b = storage(t, F);
        check_range(t, Rows::one(offset, size), Access::Write, F);
        let Some(memset) = b.iface.memset_tensor else {
            ffi::fatal(F, "memset not implemented by backend buffer");
        };
        crate::sanitize::data(None, crate::sanitize::Kind::Write, t, offset, size, F);
        // SAFETY: the buffer's own callback; range checked. It writes the tensor's data only.
        unsafe { memset(handle(b), tensor, value, offset, size) }
    }
}

export! {
    /// Queues a write of `size` bytes from `data` into `tensor` at `offset` on `backend` (stock
    /// `ggml_backend_tensor_set_async`): through the backend's `set_tensor_async`, or, when it has
    /// none, a synchronize followed by a blocking write through the buffer. `data` must stay
    /// valid until the backend is synchronized. Aborts on NULL backend or tensor, a tensor
    /// without data, or a range outside it.
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
        let rows = Rows::one(offset, size);
        // SAFETY: this export's `# Safety` contract, as the callee requires it.
        unsafe { queued(backend, Access::Write, tensor, data.cast_mut(), rows, F) }
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
        let rows = Rows::one(offset, size);
        // SAFETY: this export's `# Safety` contract, as the callee requires it.
        unsafe { queued(backend, Access::Read, tensor, data, rows, F) }
    }
}

export_2d! {
    /// Queued form of [`ggml_backend_tensor_set_2d`] on `backend` (stock
    /// `ggml_backend_tensor_set_2d_async`): the backend's `set_tensor_2d_async` when it has one
    /// and `n_copies > 1`, else one queued write per row, as [`ggml_backend_tensor_set_async`].
    ///
    /// # Safety
    /// `backend` and `tensor` must be NULL or live; every row of `data` readable until the
    /// backend is synchronized.
    pub unsafe fn ggml_backend_tensor_set_2d_async(
        backend: ggml_backend_t,
        tensor: *mut ggml_tensor,
        data: *const c_void,
    ) |rows| {
        // SAFETY: this export's `# Safety` contract, as the callee requires it.
        unsafe { queued(backend, Access::Write, tensor, data.cast_mut(), rows, F) }
    }
}

export_2d! {
    /// Queued form of [`ggml_backend_tensor_get_2d`] on `backend` (stock
    /// `ggml_backend_tensor_get_2d_async`); dispatch as [`ggml_backend_tensor_set_2d_async`].
    ///
    /// # Safety
    /// `backend` and `tensor` must be NULL or live; every row of `data` writable until the
    /// backend is synchronized.
    pub unsafe fn ggml_backend_tensor_get_2d_async(
        backend: ggml_backend_t,
        tensor: *const ggml_tensor,
        data: *mut c_void,
    ) |rows| {
        // SAFETY: this export's `# Safety` contract, as the callee requires it.
        unsafe { queued(backend, Access::Read, tensor, data, rows, F) }
    }
}

/// The checks of both copies: aborts naming `func` when the layouts differ; false when `src`
/// and `dst` are the same tensor (nothing to copy).
fn must_copy(src: &ggml_tensor, dst: &ggml_tensor, func: &str) -> bool {
    if !same_layout(src, dst) {
        ffi::fatal(func, "cannot copy tensors with different layouts");
    }
    !std::ptr::eq(src, dst)
}

/// Copies all of `src` into `dst`, blocking: the body of [`ggml_backend_tensor_copy`], whose
/// name `func` its aborts carry, for the library's own callers (the scheduler copies split
/// inputs through it).
///
/// # Safety
/// `src` and `dst` are live, allocated tensors.
pub(crate) unsafe fn copy(src: &ggml_tensor, dst: &ggml_tensor, func: &str) {
    if must_copy(src, dst, func) {
        // SAFETY: the caller's contract.
        unsafe { copy_blocking(src, dst, func) }
    }
}

/// The copy of [`copy`] after its checks: a write from `src`'s memory when its buffer is
/// host memory, else a read into `dst`'s memory when its buffer is, else the destination
/// buffer's `cpy_tensor`, else a round trip through a temporary host allocation.
///
/// # Safety
/// `src` and `dst` are live, allocated tensors of the same layout.
unsafe fn copy_blocking(src: &ggml_tensor, dst: &ggml_tensor, func: &str) {
    crate::sanitize::host_copy(src, dst, func);
    let n = nbytes(src);
    let all = Rows::one(0, n);
    // SAFETY: a live tensor's buffer is NULL (abort) or live; host buffers' data is host memory
    // of `n` bytes (same layout), and `tmp` has `n` bytes.
    unsafe {
        if buffer::is_host(buffer_ref(src.buffer, func)) {
            access(Target::Buffer, Access::Write, dst, src.data, all, func);
        } else if buffer::is_host(buffer_ref(dst.buffer, func)) {
            access(Target::Buffer, Access::Read, src, dst.data, all, func);
        } else if !buffer::copy_tensor(src, dst, func) {
            let mut tmp = vec![0u8; n];
            access(
                Target::Buffer,
                Access::Read,
                src,
                tmp.as_mut_ptr().cast(),
                all,
                func,
            );
            access(
                Target::Buffer,
                Access::Write,
                dst,
                tmp.as_mut_ptr().cast(),
                all,
                func,
            );
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
        // SAFETY: forwards the contract of `ggml_backend_tensor_copy` to `copy`: `src` and `dst`
        // are NULL (`non_null` aborts) or live, allocated tensors.
        unsafe { copy(non_null(src, F, "src"), non_null(dst, F, "dst"), F) }
    }
}

export! {
    /// Queues a copy of `src` (on `backend_src`) into `dst` (on `backend_dst`), stock
    /// `ggml_backend_tensor_copy_async`: the destination backend's `cpy_tensor_async` when it has
    /// one and accepts; otherwise both backends are synchronized and the copy is done blocking
    /// as [`ggml_backend_tensor_copy`] does. Nothing when `src == dst`. Aborts when the layouts
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
        // SAFETY: forwards the contract of `ggml_backend_tensor_copy_async`: `src` and `dst` are
        // NULL or live (`non_null` aborts on NULL).
        let (s, d) = unsafe { (non_null(src, F, "src"), non_null(dst, F, "dst")) };
        if !must_copy(s, d, F) {
            return;
        }
        // SAFETY: forwards the contract of `ggml_backend_tensor_copy_async`: `backend_dst` is NULL
        // or live (`non_null` aborts on NULL).
        let bd = unsafe { non_null(backend_dst, F, "backend_dst") };
        if let Some(f) = bd.iface.cpy_tensor_async {
            // SAFETY: the destination backend's callback with live tensors.
            if unsafe { f(backend_src, backend_dst, src, dst) } {
                // SAFETY: `backend_src` is NULL or live (the `# Safety` contract).
                let sb = unsafe { backend_src.as_ref() };
                crate::sanitize::queued_copy(sb, bd, s, d, F);
                return;
            }
        }
        // SAFETY: forwards the contract of `ggml_backend_tensor_copy_async`: `backend_src` is NULL
        // or live (`backend_ref` aborts on NULL).
        backend::synchronize(unsafe { backend_ref(backend_src, F) });
        backend::synchronize(bd);
        // SAFETY: live, allocated tensors of the same layout (checked above).
        unsafe { copy_blocking(s, d, F) }
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
        // SAFETY: `tensor` is NULL or live (the `# Safety` contract; `non_null_mut` aborts on NULL),
        // and the library holds no other borrow of it while `t` is used.
        let t = unsafe { non_null_mut(tensor, F, "tensor") };
        ggml_sys_assert(t.buffer.is_null(), F, "tensor->buffer == NULL");
        ggml_sys_assert(t.data.is_null(), F, "tensor->data == NULL");
        ggml_sys_assert(t.view_src.is_null(), F, "tensor->view_src == NULL");
        // SAFETY: forwards the contract of `ggml_backend_tensor_alloc`: `buffer` is NULL or live
        // (`buffer_ref` aborts on NULL).
        let b = unsafe { buffer_ref(buffer, F) };
        let base = buffer::base(b) as usize;
        let a = addr as usize;
        if a < base {
            ffi::fatal(F, &format!("addr {a:#x} < buffer base {base:#x}"));
        }
        // SAFETY: live buffer; the meta check only compares its interface.
        if !unsafe { ggml_sys::ggml_backend_buffer_is_meta(buffer) } {
            let (need, size) = (buffer::alloc_size(b, t), b.size);
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
        // SAFETY: live buffer and a tensor now placed in it; `t` is not used past this point.
        unsafe { buffer::init_tensor(b, tensor) }
    }
}

export! {
    /// Gives the view `tensor` its view source's buffer and the address
    /// `view_src->data + view_offs`, then lets the backend initialise it (stock
    /// `ggml_backend_view_init`). Aborts when the tensor already has a buffer, is not a view, or
    /// its source is not allocated.
    ///
    /// # Safety
    /// `tensor` NULL or a live tensor whose `view_src` is live.
    pub unsafe fn ggml_backend_view_init(tensor: *mut ggml_tensor) -> ggml_status {
        // SAFETY: forwards the contract of `ggml_backend_view_init` to `view_init`: `tensor` is
        // NULL (`non_null_mut` aborts) or live, and its `view_src` live; no borrow of it is held
        // during the call: callers pass a raw pointer.
        unsafe { view_init(non_null_mut(tensor, F, "tensor"), F) }
    }
}

/// The body of [`ggml_backend_view_init`], whose name (or that of the entry point using it)
/// `func` its aborts carry.
///
/// # Safety
/// `t.view_src` must be NULL or a live tensor.
pub(crate) unsafe fn view_init(t: &mut ggml_tensor, func: &str) -> ggml_status {
    ggml_sys_assert(t.buffer.is_null(), func, "tensor->buffer == NULL");
    ggml_sys_assert(!t.view_src.is_null(), func, "tensor->view_src != NULL");
    // SAFETY: checked non-NULL; live by contract.
    let v = unsafe { &*t.view_src };
    ggml_sys_assert(
        !v.buffer.is_null(),
        func,
        "tensor->view_src->buffer != NULL",
    );
    ggml_sys_assert(!v.data.is_null(), func, "tensor->view_src->data != NULL");
    t.buffer = v.buffer;
    t.data = v.data.cast::<u8>().wrapping_add(t.view_offs).cast();
    // SAFETY: the view source's buffer, checked non-NULL, is live while the source is.
    let b = unsafe { &*v.buffer };
    // SAFETY: a tensor now placed in `b`, passed through its exclusive borrow.
    unsafe { buffer::init_tensor(b, std::ptr::from_mut(t)) }
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
    fn one_row_is_one_range() {
        // The single-range check is the row check with one row, for every offset and size.
        for (offset, size, nbytes) in [(0, 16, 16), (8, 9, 16), (usize::MAX, 2, 16), (16, 0, 16)] {
            assert_eq!(
                rows_in_tensor(offset, size, 1, 0, nbytes),
                range_in_tensor(offset, size, nbytes)
            );
        }
    }

    #[test]
    fn row_addresses() {
        let rows = Rows {
            offset: 4,
            size: 8,
            n_copies: 3,
            stride_tensor: 16,
            stride_data: 32,
        };
        let base = 0x1000 as *mut c_void;
        let (r, at) = rows.row(2, base);
        assert_eq!((r.offset, r.size, r.n_copies), (36, 8, 1));
        assert_eq!(at as usize, 0x1000 + 64);
    }
}
