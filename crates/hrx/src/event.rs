//! ggml's events (`ggml_backend_event`) over the runtime's [`Event`]: the device interface's
//! `event_new` / `event_free` / `event_synchronize`, and [`event_of`] for the backend's
//! `event_record` / `event_wait` (which queue a signal or a wait on the runtime).
//!
//! The event's `context` is an `Arc<Event>` turned into a raw pointer, so a recording still
//! queued on a device keeps the event alive after ggml frees it.

use std::ffi::c_void;
use std::sync::Arc;

use ggml_sys::{ggml_backend_dev_t, ggml_backend_event, ggml_backend_event_t};

use crate::ffi::{guard, non_null};
use crate::runtime::Event;

/// The event behind a `ggml_backend_event_t` of ours, as a new reference; panics (caught at
/// the boundary) on NULL.
///
/// # Safety
/// `ev` is NULL or one of this library's live events.
pub unsafe fn event_of(ev: ggml_backend_event_t) -> Arc<Event> {
    // SAFETY: `non_null` rejects NULL; the context of our events is `Arc::into_raw` of an
    // `Arc<Event>` that lives until `event_free`.
    let p = unsafe { non_null(ev, "event") }.context as *const Event;
    // SAFETY: `p` came from `Arc::into_raw` and that reference is still held; adding one
    // for the caller keeps the count balanced when the returned Arc drops.
    unsafe {
        Arc::increment_strong_count(p);
        Arc::from_raw(p)
    }
}

/// `event_new` of the device interface: a new event that counts as completed.
pub extern "C" fn event_new(dev: ggml_backend_dev_t) -> ggml_backend_event_t {
    guard("ggml_backend_hrx_device_event_new", || {
        let ev = Arc::into_raw(Event::new()) as *mut c_void;
        Box::into_raw(Box::new(ggml_backend_event {
            device: dev,
            context: ev,
        }))
    })
}

/// `event_free` of the device interface; NULL is ignored.
///
/// # Safety
/// `ev` is NULL or an event from [`event_new`], freed once.
pub unsafe extern "C" fn event_free(_dev: ggml_backend_dev_t, ev: ggml_backend_event_t) {
    guard("ggml_backend_hrx_device_event_free", || {
        if ev.is_null() {
            return;
        }
        // SAFETY: created by event_new (Box + Arc::into_raw); ggml frees each event once.
        unsafe {
            let b = Box::from_raw(ev);
            drop(Arc::from_raw(b.context as *const Event));
        }
    })
}

/// `event_synchronize` of the device interface: blocks until the latest recording is
/// complete. NULL aborts after a logged message (no error result to return).
///
/// # Safety
/// `ev` is NULL or one of this library's live events.
pub unsafe extern "C" fn event_synchronize(dev: ggml_backend_dev_t, ev: ggml_backend_event_t) {
    guard("ggml_backend_hrx_device_event_synchronize", || {
        // SAFETY: NULL or one of our events, per the contract.
        let e = unsafe { event_of(ev) };
        // the event's own device recorded it: its runtime knows whether it can complete
        // SAFETY: ggml passes the device the event was made for, one of ours.
        let d = unsafe { crate::context::from_dev(dev) };
        d.rt.wait_host(&e, e.recorded());
    })
}
