//! Events (`ggml_backend_event_*`): synchronisation points that a backend records into its
//! queue and that other backends or the host wait for. An event belongs to the device that made
//! it and is freed through that device.

use ggml_sys::{
    ggml_backend, ggml_backend_dev_t, ggml_backend_device, ggml_backend_event,
    ggml_backend_event_t, ggml_backend_t,
};

use crate::backend::backend_ref;
use crate::ffi::{c_name, export, handle, non_null};
use crate::iface::required;

export! {
    /// Makes an event of `device` (stock `ggml_backend_event_new`); NULL when the device is NULL or
    /// has no events. The caller frees it with [`ggml_backend_event_free`].
    ///
    /// # Safety
    /// `device` must be NULL or point to a live device.
    pub unsafe fn ggml_backend_event_new(device: ggml_backend_dev_t) -> ggml_backend_event_t {
        // SAFETY: `device` is NULL or live (the `# Safety` contract), and `as_ref` handles NULL.
        unsafe { device.as_ref() }.map_or(std::ptr::null_mut(), new)
    }
}

/// The body of [`ggml_backend_event_new`] for a device, for the library's own callers.
pub(crate) fn new(device: &ggml_backend_device) -> ggml_backend_event_t {
    match device.iface.event_new {
        // SAFETY: the device's own callback with itself, live while borrowed.
        Some(f) => unsafe { f(handle(device)) },
        None => std::ptr::null_mut(),
    }
}

export! {
    /// Frees an event through its device's `event_free` (stock `ggml_backend_event_free`); NULL is
    /// a no-op.
    ///
    /// # Safety
    /// `event` must be NULL or a live event, not used afterwards.
    pub unsafe fn ggml_backend_event_free(event: ggml_backend_event_t) {
        // SAFETY: forwards the contract of `ggml_backend_event_free` unchanged to `free`: `event`
        // is NULL or a live event, not used afterwards.
        unsafe { free(event) }
    }
}

/// The body of [`ggml_backend_event_free`], for the library's own callers. It takes the C
/// pointer, not a borrow: the device's callback frees the event.
///
/// # Safety
/// `event` must be NULL or a live event, not used afterwards.
pub(crate) unsafe fn free(event: ggml_backend_event_t) {
    const F: &str = c_name!(ggml_backend_event_free);
    // SAFETY: `event` is NULL or live (the `# Safety` contract), and `as_ref` handles NULL. The
    // borrow ends here, before the callback frees the event.
    let Some(device) = (unsafe { event.as_ref() }).map(|e| e.device) else {
        return;
    };
    // SAFETY: an event's device outlives it.
    let dev = unsafe { non_null(device, F, "event->device") };
    let f = required(dev.iface.event_free, F, "event_free");
    // SAFETY: the device's own callback with its own event, freed once.
    unsafe { f(device, event) }
}

export! {
    /// Records `event` in `backend`'s queue (stock `ggml_backend_event_record`). Aborts when the
    /// backend is NULL or has no `event_record`.
    ///
    /// # Safety
    /// `backend` NULL or live; `event` a live event usable by that backend.
    pub unsafe fn ggml_backend_event_record(event: ggml_backend_event_t, backend: ggml_backend_t) {
        // SAFETY: the backend is NULL (abort) or live and `event` a live event it can use (`#
        // Safety`).
        unsafe { record(event, backend_ref(backend, F)) }
    }
}

/// The body of [`ggml_backend_event_record`], for the library's own callers.
///
/// # Safety
/// `event` must be a live event usable by `backend`.
pub(crate) unsafe fn record(event: ggml_backend_event_t, backend: &ggml_backend) {
    const F: &str = c_name!(ggml_backend_event_record);
    let f = required(backend.iface.event_record, F, "event_record");
    crate::sanitize::event_record(event, backend);
    // SAFETY: the backend's own callback with itself and an event it can use.
    unsafe { f(handle(backend), event) }
}

export! {
    /// Blocks the host until `event` has happened (stock `ggml_backend_event_synchronize`). Aborts
    /// when the event is NULL or its device has no `event_synchronize`.
    ///
    /// # Safety
    /// `event` must be NULL or a live event.
    pub unsafe fn ggml_backend_event_synchronize(event: ggml_backend_event_t) {
        // SAFETY: forwards the contract of `ggml_backend_event_synchronize`: `event` is NULL or
        // live (`non_null` aborts on NULL).
        synchronize(unsafe { non_null(event, F, "event") })
    }
}

/// The body of [`ggml_backend_event_synchronize`], for the library's own callers.
pub(crate) fn synchronize(event: &ggml_backend_event) {
    const F: &str = c_name!(ggml_backend_event_synchronize);
    // SAFETY: an event's device is NULL or live and outlives it.
    let dev = unsafe { non_null(event.device, F, "event->device") };
    let f = required(dev.iface.event_synchronize, F, "event_synchronize");
    // SAFETY: the device's own callback with its own event, live while borrowed.
    unsafe { f(event.device, handle(event)) };
    crate::sanitize::event_synchronize(event);
}

export! {
    /// Makes `backend`'s queue wait for `event` (stock `ggml_backend_event_wait`). Aborts when the
    /// backend is NULL or has no `event_wait`.
    ///
    /// # Safety
    /// `backend` NULL or live; `event` a live event.
    pub unsafe fn ggml_backend_event_wait(backend: ggml_backend_t, event: ggml_backend_event_t) {
        // SAFETY: the backend is NULL (abort) or live and `event` a live event (`# Safety`).
        unsafe { wait(backend_ref(backend, F), event) }
    }
}

/// The body of [`ggml_backend_event_wait`], for the library's own callers.
///
/// # Safety
/// `event` must be a live event.
pub(crate) unsafe fn wait(backend: &ggml_backend, event: ggml_backend_event_t) {
    const F: &str = c_name!(ggml_backend_event_wait);
    let f = required(backend.iface.event_wait, F, "event_wait");
    crate::sanitize::event_wait(backend, event);
    // SAFETY: the backend's own callback with itself and a live event.
    unsafe { f(handle(backend), event) }
}
