//! The state of one HRX device that every ggml-facing module shares: the runtime, the
//! host-weight arena, the reporter, the names, and the ggml handles (device, buffer types)
//! whose `context` points back here.
//!
//! It sits below `buffer`, `backend` and `device` (which build the ggml interfaces that
//! point at it) so that those modules import it and not one another.

use std::ffi::CString;
use std::sync::OnceLock;

use ggml_sys::{ggml_backend_buffer_type_t, ggml_backend_dev_t};
use parking_lot::Mutex;

use crate::arena::Arena;
use crate::ffi::non_null;
use crate::report::Reporter;
use crate::runtime::Runtime;

/// One HRX device.
pub struct Device {
    /// Index in the registry.
    pub index: usize,
    /// `HRXn`: device name and device-local buffer type name.
    pub name: CString,
    /// `HRXn_HOST`: host buffer type name.
    pub host_buft_name: CString,
    /// Description from the runtime.
    pub description: CString,
    /// The runtime.
    pub rt: Box<dyn Runtime>,
    /// The host-weight arena.
    pub arena: Mutex<Arena>,
    /// The placement reporter.
    pub reporter: Mutex<Reporter>,
    /// Whether a job that writes host memory was queued since the layer last waited for the
    /// queue: a copy of host memory taken before that job ran could be stale
    /// ([`crate::runtime::ExecJob::host_copies`]).
    pub host_writes_queued: std::sync::atomic::AtomicBool,
    /// Whether a job that writes host weights (a host buffer of usage WEIGHTS) was queued
    /// since the layer last waited for the queue: the arena must not upload a copy of a
    /// weight before that job has run (its fresh uploads may start beside the queue).
    pub weight_writes_queued: std::sync::atomic::AtomicBool,
    handles: OnceLock<Handles>,
}

/// The ggml structs of a device (leaked, immutable), stored as addresses.
#[derive(Clone, Copy)]
struct Handles {
    dev: usize,
    buft: usize,
    host_buft: usize,
}

// SAFETY: the raw pointers stored (as usize) point to leaked, immutable ggml structs; all
// mutable state is behind locks or in the thread-safe runtime.
unsafe impl Sync for Device {}
// SAFETY: as above.
unsafe impl Send for Device {}

impl Device {
    /// Device `index` over `rt`, leaked (devices live for the process, as ggml expects of
    /// registered devices). Its ggml handles are attached once with
    /// [`Device::set_handles`] (by `device::create`, which builds them).
    pub fn leak(index: usize, rt: Box<dyn Runtime>, arena_limit: usize) -> &'static Device {
        Box::leak(Box::new(Device {
            index,
            name: CString::new(format!("HRX{index}")).unwrap(),
            host_buft_name: CString::new(format!("HRX{index}_HOST")).unwrap(),
            description: CString::new(rt.describe()).unwrap_or_default(),
            rt,
            arena: Mutex::new(Arena::new(arena_limit)),
            reporter: Mutex::new(Reporter::new(index)),
            host_writes_queued: Default::default(),
            weight_writes_queued: Default::default(),
            handles: OnceLock::new(),
        }))
    }

    /// Attaches the ggml device and the two buffer types; later calls are ignored (the
    /// handles never change once ggml has seen them).
    pub fn set_handles(
        &self,
        dev: ggml_backend_dev_t,
        buft: ggml_backend_buffer_type_t,
        host_buft: ggml_backend_buffer_type_t,
    ) {
        let _ = self.handles.set(Handles {
            dev: dev as usize,
            buft: buft as usize,
            host_buft: host_buft as usize,
        });
    }

    fn handles(&self) -> Handles {
        *self.handles.get().expect("HRX device without ggml handles")
    }

    /// The ggml device.
    pub fn dev(&self) -> ggml_backend_dev_t {
        self.handles().dev as ggml_backend_dev_t
    }

    /// The device-local buffer type `HRXn`.
    pub fn buft(&self) -> ggml_backend_buffer_type_t {
        self.handles().buft as ggml_backend_buffer_type_t
    }

    /// The host buffer type `HRXn_HOST`.
    pub fn host_buft(&self) -> ggml_backend_buffer_type_t {
        self.handles().host_buft as ggml_backend_buffer_type_t
    }

    /// Whether the device can use tensors in `buft`: its own types and any host type.
    ///
    /// # Safety
    /// `buft` is NULL or a live buffer type.
    pub unsafe fn supports_buft(&self, buft: ggml_backend_buffer_type_t) -> bool {
        buft == self.buft()
            || buft == self.host_buft()
            // SAFETY: forwards the contract of `supports_buft`: `buft` is NULL or live.
            || unsafe { crate::ggml::buft_is_host(buft) }
    }
}

/// The device of a `ggml_backend_dev_t` of ours; panics (caught at the boundary) on NULL.
///
/// # Safety
/// `dev` is NULL or one of this library's devices.
pub unsafe fn from_dev(dev: ggml_backend_dev_t) -> &'static Device {
    // SAFETY: `non_null` rejects NULL; our devices' context is the leaked Device.
    unsafe { &*(non_null(dev, "device").context as *const Device) }
}
