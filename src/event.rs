//! Events (`ggml_backend_event_*`): synchronisation points that a backend records into its
//! queue and that other backends or the host wait for. An event belongs to the device that made
//! it and is freed through that device.
#![deny(unsafe_op_in_unsafe_fn)]

use ggml_sys::{ggml_backend_dev_t, ggml_backend_event_t, ggml_backend_t};

use crate::backend::backend_ref;
use crate::ffi::{export, non_null};
use crate::iface::required;

export! {
    /// Makes an event of `device` (stock `ggml_backend_event_new`); NULL when the device is NULL or
    /// has no events. The caller frees it with [`ggml_backend_event_free`].
    ///
    /// # Safety
    /// `device` must be NULL or point to a live device.
    pub unsafe fn ggml_backend_event_new(device: ggml_backend_dev_t) -> ggml_backend_event_t {
        // SAFETY: caller contract.
        match unsafe { device.as_ref() }.and_then(|d| d.iface.event_new) {
            // SAFETY: the device's callback with itself.
            Some(f) => unsafe { f(device) },
            None => std::ptr::null_mut(),
        }
    }
}

export! {
    /// Frees an event through its device's `event_free` (stock `ggml_backend_event_free`); NULL is
    /// a no-op.
    ///
    /// # Safety
    /// `event` must be NULL or a live event, not used afterwards.
    pub unsafe fn ggml_backend_event_free(event: ggml_backend_event_t) {
        // SAFETY: caller contract.
        let Some(e) = (unsafe { event.as_ref() }) else {
            return;
        };
        // SAFETY: an event's device outlives it.
        let dev = unsafe { non_null(e.device, F, "event->device") };
        // SAFETY: the device's callback with its own event.
        unsafe { required(dev.iface.event_free, F, "event_free")(e.device, event) }
    }
}

export! {
    /// Records `event` in `backend`'s queue (stock `ggml_backend_event_record`). Aborts when the
    /// backend is NULL or has no `event_record`.
    ///
    /// # Safety
    /// `backend` NULL or live; `event` a live event usable by that backend.
    pub unsafe fn ggml_backend_event_record(event: ggml_backend_event_t, backend: ggml_backend_t) {
        // SAFETY: caller contract.
        let b = unsafe { backend_ref(backend, F) };
        // SAFETY: the backend's callback.
        unsafe { required(b.iface.event_record, F, "event_record")(backend, event) }
    }
}

export! {
    /// Blocks the host until `event` has happened (stock `ggml_backend_event_synchronize`). Aborts
    /// when the event is NULL or its device has no `event_synchronize`.
    ///
    /// # Safety
    /// `event` must be NULL or a live event.
    pub unsafe fn ggml_backend_event_synchronize(event: ggml_backend_event_t) {
        // SAFETY: caller contract.
        let e = unsafe { non_null(event, F, "event") };
        // SAFETY: an event's device outlives it.
        let dev = unsafe { non_null(e.device, F, "event->device") };
        // SAFETY: the device's callback with its own event.
        unsafe { required(dev.iface.event_synchronize, F, "event_synchronize")(e.device, event) }
    }
}

export! {
    /// Makes `backend`'s queue wait for `event` (stock `ggml_backend_event_wait`). Aborts when the
    /// backend is NULL or has no `event_wait`.
    ///
    /// # Safety
    /// `backend` NULL or live; `event` a live event.
    pub unsafe fn ggml_backend_event_wait(backend: ggml_backend_t, event: ggml_backend_event_t) {
        // SAFETY: caller contract.
        let b = unsafe { backend_ref(backend, F) };
        // SAFETY: the backend's callback.
        unsafe { required(b.iface.event_wait, F, "event_wait")(backend, event) }
    }
}
