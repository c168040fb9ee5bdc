//! Backend instances (`ggml_backend_*`): dispatch over a backend's `ggml_backend_i` table and
//! its device. A backend is created by its device (`ggml_backend_dev_init`) and owned by the
//! caller until [`ggml_backend_free`]. A NULL backend aborts wherever stock asserts on it;
//! [`ggml_backend_name`], [`ggml_backend_guid`] and [`ggml_backend_free`] accept NULL as stock
//! does. The internal functions behind the exports that ask the backend's device (or its
//! default buffer type) abort on a NULL one naming the device (or buffer type) function that
//! needs it, the function that stock's call chain reaches.

use std::os::raw::c_char;

use ggml_sys::{
    ggml_backend, ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_dev_t,
    ggml_backend_graph_plan_t, ggml_backend_t, ggml_cgraph, ggml_guid_t, ggml_status, ggml_tensor,
};

use crate::buffer_type::{self, buft_ref};
use crate::device::{self, dev_ref};
use crate::ffi::{c_name, export, handle, non_null};
use crate::iface::required;

/// Borrows the backend behind `backend`, aborting naming `func` when it is NULL.
///
/// # Safety
/// `backend` must be NULL or point to a live backend.
pub(crate) unsafe fn backend_ref<'a>(backend: ggml_backend_t, func: &str) -> &'a ggml_backend {
    // SAFETY: forwards the contract of `backend_ref`: `backend` is NULL or a live backend.
    unsafe { non_null(backend, func, "backend") }
}

export! {
    /// The backend's 16-byte identity, owned by the backend (stock `ggml_backend_guid`); NULL for a
    /// NULL backend.
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_guid(backend: ggml_backend_t) -> ggml_guid_t {
        // SAFETY: `backend` is NULL or live (the `# Safety` contract), and `as_ref` handles NULL.
        unsafe { backend.as_ref() }.map_or(std::ptr::null_mut(), |b| b.guid)
    }
}

export! {
    /// The backend's name, owned by the backend (stock `ggml_backend_name`); the static string
    /// `"NULL"` for a NULL backend.
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_name(backend: ggml_backend_t) -> *const c_char {
        // SAFETY: `backend` is NULL or live (the `# Safety` contract), and `as_ref` handles NULL.
        match unsafe { backend.as_ref() } {
            None => c"NULL".as_ptr(),
            Some(b) => name(b),
        }
    }
}

/// The body of [`ggml_backend_name`] for a backend that is not NULL, for the library's own
/// callers.
pub(crate) fn name(backend: &ggml_backend) -> *const c_char {
    const F: &str = c_name!(ggml_backend_name);
    let f = required(backend.iface.get_name, F, "get_name");
    // SAFETY: the backend's own callback with itself, live while borrowed.
    unsafe { f(handle(backend)) }
}

export! {
    /// Frees the backend through its own `free` (stock `ggml_backend_free`); NULL is a no-op.
    ///
    /// # Safety
    /// `backend` must be NULL or a live backend, not used afterwards.
    pub unsafe fn ggml_backend_free(backend: ggml_backend_t) {
        // SAFETY: `backend` is NULL or live (the `# Safety` contract), and `as_ref` handles NULL;
        // the borrow is not used once `free` has run.
        if let Some(b) = unsafe { backend.as_ref() } {
            // SAFETY: the backend's callback, once.
            unsafe { required(b.iface.free, F, "free")(backend) }
        }
    }
}

export! {
    /// The default buffer type of the backend's device (stock
    /// `ggml_backend_get_default_buffer_type`). Aborts on NULL.
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_get_default_buffer_type(
        backend: ggml_backend_t,
    ) -> ggml_backend_buffer_type_t {
        // SAFETY: forwards the contract of `ggml_backend_get_default_buffer_type`: `backend` is
        // NULL or live (`backend_ref` aborts on NULL).
        default_buffer_type(unsafe { backend_ref(backend, F) })
    }
}

/// The body of [`ggml_backend_get_default_buffer_type`], for the library's own callers. Aborts
/// when the backend has no device, naming `ggml_backend_dev_buffer_type` as stock's call chain
/// does.
pub(crate) fn default_buffer_type(backend: &ggml_backend) -> ggml_backend_buffer_type_t {
    const F: &str = c_name!(device::ggml_backend_dev_buffer_type);
    // SAFETY: a live backend's device is NULL or live for the process.
    device::buffer_type(unsafe { dev_ref(backend.device, F) })
}

/// The default buffer type of `backend`, borrowed, for the functions that ask it about
/// alignment, size or allocation; aborts naming `func` when the device gives NULL.
fn default_buft<'a>(backend: &ggml_backend, func: &str) -> &'a ggml_sys::ggml_backend_buffer_type {
    // SAFETY: a device's buffer type is NULL or a live object of its backend library.
    unsafe { buft_ref(default_buffer_type(backend), func) }
}

export! {
    /// Allocates `size` bytes of the backend's default buffer type (stock
    /// `ggml_backend_alloc_buffer`); the caller owns the result (NULL on failure).
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_alloc_buffer(
        backend: ggml_backend_t,
        size: usize,
    ) -> ggml_backend_buffer_t {
        // SAFETY: forwards the contract of `ggml_backend_alloc_buffer`: `backend` is NULL or live
        // (`backend_ref` aborts on NULL).
        let b = unsafe { backend_ref(backend, F) };
        buffer_type::alloc_buffer(
            default_buft(b, c_name!(buffer_type::ggml_backend_buft_alloc_buffer)),
            size,
        )
    }
}

export! {
    /// Alignment of the backend's default buffer type (stock `ggml_backend_get_alignment`).
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_get_alignment(backend: ggml_backend_t) -> usize {
        // SAFETY: forwards the contract of `ggml_backend_get_alignment`: `backend` is NULL or live
        // (`backend_ref` aborts on NULL).
        alignment(unsafe { backend_ref(backend, F) })
    }
}

/// The body of [`ggml_backend_get_alignment`], for the library's own callers.
pub(crate) fn alignment(backend: &ggml_backend) -> usize {
    const F: &str = c_name!(buffer_type::ggml_backend_buft_get_alignment);
    buffer_type::alignment(default_buft(backend, F))
}

export! {
    /// Max buffer size of the backend's default buffer type (stock `ggml_backend_get_max_size`).
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_get_max_size(backend: ggml_backend_t) -> usize {
        // SAFETY: forwards the contract of `ggml_backend_get_max_size`: `backend` is NULL or live
        // (`backend_ref` aborts on NULL).
        max_size(unsafe { backend_ref(backend, F) })
    }
}

/// The body of [`ggml_backend_get_max_size`], for the library's own callers.
pub(crate) fn max_size(backend: &ggml_backend) -> usize {
    const F: &str = c_name!(buffer_type::ggml_backend_buft_get_max_size);
    buffer_type::max_size(default_buft(backend, F))
}

export! {
    /// Waits until everything queued on the backend is done (stock `ggml_backend_synchronize`);
    /// nothing for a backend without `synchronize`. Aborts on NULL.
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_synchronize(backend: ggml_backend_t) {
        // SAFETY: forwards the contract of `ggml_backend_synchronize`: `backend` is NULL or live
        // (`backend_ref` aborts on NULL).
        synchronize(unsafe { backend_ref(backend, F) })
    }
}

/// The body of [`ggml_backend_synchronize`], for the library's own callers.
pub(crate) fn synchronize(backend: &ggml_backend) {
    if let Some(f) = backend.iface.synchronize {
        // SAFETY: the backend's own callback with itself, live while borrowed.
        unsafe { f(handle(backend)) }
    }
    crate::sanitize::synchronize(backend);
}

export! {
    /// Makes a reusable plan for computing `cgraph` (stock `ggml_backend_graph_plan_create`); the
    /// caller frees it with [`ggml_backend_graph_plan_free`]. Aborts on NULL or when the backend
    /// has no plans.
    ///
    /// # Safety
    /// `backend` NULL or live; `cgraph` a live graph.
    pub unsafe fn ggml_backend_graph_plan_create(
        backend: ggml_backend_t,
        cgraph: *mut ggml_cgraph,
    ) -> ggml_backend_graph_plan_t {
        // SAFETY: forwards the contract of `ggml_backend_graph_plan_create`: `backend` is NULL or
        // live (`backend_ref` aborts on NULL).
        let b = unsafe { backend_ref(backend, F) };
        // SAFETY: the backend's callback.
        unsafe { required(b.iface.graph_plan_create, F, "graph_plan_create")(backend, cgraph) }
    }
}

export! {
    /// Frees a plan of this backend (stock `ggml_backend_graph_plan_free`). Aborts on NULL or when
    /// the backend has no plans.
    ///
    /// # Safety
    /// `backend` NULL or live; `plan` made by this backend, not used afterwards.
    pub unsafe fn ggml_backend_graph_plan_free(
        backend: ggml_backend_t,
        plan: ggml_backend_graph_plan_t,
    ) {
        // SAFETY: forwards the contract of `ggml_backend_graph_plan_free`: `backend` is NULL or
        // live (`backend_ref` aborts on NULL).
        let b = unsafe { backend_ref(backend, F) };
        // SAFETY: the backend's callback.
        unsafe { required(b.iface.graph_plan_free, F, "graph_plan_free")(backend, plan) }
    }
}

export! {
    /// Computes a plan of this backend (stock `ggml_backend_graph_plan_compute`). Aborts on NULL or
    /// when the backend has no plans.
    ///
    /// # Safety
    /// `backend` NULL or live; `plan` a live plan of this backend.
    pub unsafe fn ggml_backend_graph_plan_compute(
        backend: ggml_backend_t,
        plan: ggml_backend_graph_plan_t,
    ) -> ggml_status {
        // SAFETY: forwards the contract of `ggml_backend_graph_plan_compute`: `backend` is NULL or
        // live (`backend_ref` aborts on NULL).
        let b = unsafe { backend_ref(backend, F) };
        // SAFETY: the backend's callback.
        unsafe { required(b.iface.graph_plan_compute, F, "graph_plan_compute")(backend, plan) }
    }
}

export! {
    /// Computes `cgraph` and waits for it (stock `ggml_backend_graph_compute`): the status of
    /// [`ggml_backend_graph_compute_async`], after a synchronize.
    ///
    /// # Safety
    /// `backend` NULL or live; `cgraph` a live graph whose tensors the backend can use.
    pub unsafe fn ggml_backend_graph_compute(
        backend: ggml_backend_t,
        cgraph: *mut ggml_cgraph,
    ) -> ggml_status {
        // A NULL graph would reach the backend's callback, which reads it (stock: SIGSEGV).
        crate::ffi::require_non_null(cgraph, F, "cgraph");
        // SAFETY: the backend is NULL (abort) or live and `cgraph` a graph it can use (`# Safety`).
        unsafe { graph_compute(backend_ref(backend, F), cgraph) }
    }
}

/// The body of [`ggml_backend_graph_compute`], for the library's own callers.
///
/// # Safety
/// `cgraph` must be a live graph whose tensors the backend can use.
pub(crate) unsafe fn graph_compute(
    backend: &ggml_backend,
    cgraph: *mut ggml_cgraph,
) -> ggml_status {
    // SAFETY: the caller's contract.
    let status = unsafe { graph_compute_async(backend, cgraph) };
    synchronize(backend);
    status
}

export! {
    /// Queues the computation of `cgraph` (stock `ggml_backend_graph_compute_async`). Aborts on
    /// NULL.
    ///
    /// # Safety
    /// `backend` NULL or live; `cgraph` a live graph whose tensors the backend can use.
    pub unsafe fn ggml_backend_graph_compute_async(
        backend: ggml_backend_t,
        cgraph: *mut ggml_cgraph,
    ) -> ggml_status {
        crate::ffi::require_non_null(cgraph, F, "cgraph");
        // SAFETY: the backend is NULL (abort) or live and `cgraph` a graph it can use (`# Safety`).
        unsafe { graph_compute_async(backend_ref(backend, F), cgraph) }
    }
}

/// The body of [`ggml_backend_graph_compute_async`], for the library's own callers.
///
/// # Safety
/// `cgraph` must be a live graph whose tensors the backend can use.
pub(crate) unsafe fn graph_compute_async(
    backend: &ggml_backend,
    cgraph: *mut ggml_cgraph,
) -> ggml_status {
    const F: &str = c_name!(ggml_backend_graph_compute_async);
    let f = required(backend.iface.graph_compute, F, "graph_compute");
    // SAFETY: `cgraph` is a live graph of live tensors (the callback's own requirement).
    unsafe { crate::sanitize::graph_compute(backend, cgraph) };
    // SAFETY: the backend's own callback with itself and a graph it can use.
    unsafe { f(handle(backend), cgraph) }
}

export! {
    /// Whether the backend's device can compute `op` (stock `ggml_backend_supports_op`).
    ///
    /// # Safety
    /// `backend` NULL or live; `op` a live tensor.
    pub unsafe fn ggml_backend_supports_op(
        backend: ggml_backend_t,
        op: *const ggml_tensor,
    ) -> bool {
        // A NULL op would reach the device's callback, which reads it (stock: SIGSEGV).
        crate::ffi::require_non_null(op, F, "op");
        // SAFETY: the backend is NULL (abort) or live and `op` a live tensor (`# Safety`).
        unsafe { supports_op(backend_ref(backend, F), op) }
    }
}

/// The body of [`ggml_backend_supports_op`], for the library's own callers (the scheduler asks
/// it for every node and backend).
///
/// # Safety
/// `op` must point to a live tensor.
pub(crate) unsafe fn supports_op(backend: &ggml_backend, op: *const ggml_tensor) -> bool {
    const F: &str = c_name!(device::ggml_backend_dev_supports_op);
    // SAFETY: a live backend's device is NULL or live for the process; `op` is live.
    unsafe { device::supports_op(dev_ref(backend.device, F), op) }
}

export! {
    /// Whether the backend's device can use buffers of `buft` (stock `ggml_backend_supports_buft`).
    ///
    /// # Safety
    /// `backend` NULL or live; `buft` a live buffer type.
    pub unsafe fn ggml_backend_supports_buft(
        backend: ggml_backend_t,
        buft: ggml_backend_buffer_type_t,
    ) -> bool {
        // SAFETY: the backend is NULL (abort) or live and `buft` a live buffer type (`# Safety`).
        unsafe { supports_buft(backend_ref(backend, F), buft) }
    }
}

/// The body of [`ggml_backend_supports_buft`], for the library's own callers.
///
/// # Safety
/// `buft` must point to a live buffer type.
pub(crate) unsafe fn supports_buft(
    backend: &ggml_backend,
    buft: ggml_backend_buffer_type_t,
) -> bool {
    const F: &str = c_name!(device::ggml_backend_dev_supports_buft);
    // SAFETY: a live backend's device is NULL or live for the process; `buft` is live.
    unsafe { device::supports_buft(dev_ref(backend.device, F), buft) }
}

export! {
    /// Whether the backend's device wants `op` offloaded to it although its weights live in host
    /// memory (stock `ggml_backend_offload_op`).
    ///
    /// # Safety
    /// `backend` NULL or live; `op` a live tensor.
    pub unsafe fn ggml_backend_offload_op(backend: ggml_backend_t, op: *const ggml_tensor) -> bool {
        // SAFETY: the backend is NULL (abort) or live and `op` a live tensor (`# Safety`).
        unsafe { offload_op(backend_ref(backend, F), op) }
    }
}

/// The body of [`ggml_backend_offload_op`], for the library's own callers.
///
/// # Safety
/// `op` must point to a live tensor.
pub(crate) unsafe fn offload_op(backend: &ggml_backend, op: *const ggml_tensor) -> bool {
    const F: &str = c_name!(device::ggml_backend_dev_offload_op);
    // SAFETY: a live backend's device is NULL or live for the process; `op` is live.
    unsafe { device::offload_op(dev_ref(backend.device, F), op) }
}

export! {
    /// The backend's device (stock `ggml_backend_get_device`). Aborts on NULL.
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_get_device(backend: ggml_backend_t) -> ggml_backend_dev_t {
        // SAFETY: forwards the contract of `ggml_backend_get_device`: `backend` is NULL or live
        // (`backend_ref` aborts on NULL).
        unsafe { backend_ref(backend, F) }.device
    }
}
