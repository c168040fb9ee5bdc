//! Backend instances (`ggml_backend_*`): dispatch over a backend's `ggml_backend_i` table and
//! its device. A backend is created by its device (`ggml_backend_dev_init`) and owned by the
//! caller until [`ggml_backend_free`]. A NULL backend aborts wherever stock asserts on it;
//! [`ggml_backend_name`], [`ggml_backend_guid`] and [`ggml_backend_free`] accept NULL as stock
//! does.
#![deny(unsafe_op_in_unsafe_fn)]

use std::os::raw::c_char;

use ggml_sys::{
    ggml_backend, ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_dev_t,
    ggml_backend_graph_plan_t, ggml_backend_t, ggml_cgraph, ggml_guid_t, ggml_status, ggml_tensor,
};

use crate::buffer_type::{
    ggml_backend_buft_alloc_buffer, ggml_backend_buft_get_alignment, ggml_backend_buft_get_max_size,
};
use crate::device::{
    ggml_backend_dev_buffer_type, ggml_backend_dev_offload_op, ggml_backend_dev_supports_buft,
    ggml_backend_dev_supports_op,
};
use crate::ffi::{export, non_null};
use crate::iface::required;

/// Borrows the backend behind `backend`, aborting naming `func` when it is NULL.
///
/// # Safety
/// `backend` must be NULL or point to a live backend.
pub(crate) unsafe fn backend_ref<'a>(backend: ggml_backend_t, func: &str) -> &'a ggml_backend {
    // SAFETY: forwarded from the caller.
    unsafe { non_null(backend, func, "backend") }
}

export! {
    /// The backend's 16-byte identity, owned by the backend (stock `ggml_backend_guid`); NULL for a
    /// NULL backend.
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_guid(backend: ggml_backend_t) -> ggml_guid_t {
        // SAFETY: caller contract.
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
        // SAFETY: caller contract.
        match unsafe { backend.as_ref() } {
            None => c"NULL".as_ptr(),
            // SAFETY: the backend's callback with itself.
            Some(b) => unsafe { required(b.iface.get_name, F, "get_name")(backend) },
        }
    }
}

export! {
    /// Frees the backend through its own `free` (stock `ggml_backend_free`); NULL is a no-op.
    ///
    /// # Safety
    /// `backend` must be NULL or a live backend, not used afterwards.
    pub unsafe fn ggml_backend_free(backend: ggml_backend_t) {
        // SAFETY: caller contract.
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
        // SAFETY: caller contract; a live backend's device is live.
        unsafe { ggml_backend_dev_buffer_type(backend_ref(backend, F).device) }
    }
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
        // SAFETY: caller contract.
        unsafe {
            ggml_backend_buft_alloc_buffer(ggml_backend_get_default_buffer_type(backend), size)
        }
    }
}

export! {
    /// Alignment of the backend's default buffer type (stock `ggml_backend_get_alignment`).
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_get_alignment(backend: ggml_backend_t) -> usize {
        // SAFETY: caller contract.
        unsafe { ggml_backend_buft_get_alignment(ggml_backend_get_default_buffer_type(backend)) }
    }
}

export! {
    /// Max buffer size of the backend's default buffer type (stock `ggml_backend_get_max_size`).
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_get_max_size(backend: ggml_backend_t) -> usize {
        // SAFETY: caller contract.
        unsafe { ggml_backend_buft_get_max_size(ggml_backend_get_default_buffer_type(backend)) }
    }
}

export! {
    /// Waits until everything queued on the backend is done (stock `ggml_backend_synchronize`);
    /// nothing for a backend without `synchronize`. Aborts on NULL.
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_synchronize(backend: ggml_backend_t) {
        // SAFETY: caller contract.
        if let Some(f) = unsafe { backend_ref(backend, F) }.iface.synchronize {
            // SAFETY: the backend's callback with itself.
            unsafe { f(backend) }
        }
    }
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
        // SAFETY: caller contract.
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
        // SAFETY: caller contract.
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
        // SAFETY: caller contract.
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
        // SAFETY: caller contract.
        unsafe {
            let status = ggml_backend_graph_compute_async(backend, cgraph);
            ggml_backend_synchronize(backend);
            status
        }
    }
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
        // SAFETY: caller contract.
        let b = unsafe { backend_ref(backend, F) };
        // SAFETY: the backend's callback.
        unsafe { required(b.iface.graph_compute, F, "graph_compute")(backend, cgraph) }
    }
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
        // SAFETY: caller contract.
        unsafe { ggml_backend_dev_supports_op(backend_ref(backend, F).device, op) }
    }
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
        // SAFETY: caller contract.
        unsafe { ggml_backend_dev_supports_buft(backend_ref(backend, F).device, buft) }
    }
}

export! {
    /// Whether the backend's device wants `op` offloaded to it although its weights live in host
    /// memory (stock `ggml_backend_offload_op`).
    ///
    /// # Safety
    /// `backend` NULL or live; `op` a live tensor.
    pub unsafe fn ggml_backend_offload_op(backend: ggml_backend_t, op: *const ggml_tensor) -> bool {
        // SAFETY: caller contract.
        unsafe { ggml_backend_dev_offload_op(backend_ref(backend, F).device, op) }
    }
}

export! {
    /// The backend's device (stock `ggml_backend_get_device`). Aborts on NULL.
    ///
    /// # Safety
    /// `backend` must be NULL or point to a live backend.
    pub unsafe fn ggml_backend_get_device(backend: ggml_backend_t) -> ggml_backend_dev_t {
        // SAFETY: caller contract.
        unsafe { backend_ref(backend, F) }.device
    }
}
