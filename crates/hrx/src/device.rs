//! Devices `HRX0`, `HRX1`, ...: the `ggml_backend_device` interface, its buffer types and
//! events. Each device owns a runtime, an arena and a reporter; all live for the process.

use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;
use std::sync::OnceLock;

use ggml_sys::*;
use parking_lot::Mutex;

use crate::arena::Arena;
use crate::buffer;
use crate::claims;
use crate::ffi::{guard, non_null};
use crate::report::Reporter;
use crate::runtime::{Event, Runtime};

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
    buft: OnceLock<usize>,
    host_buft: OnceLock<usize>,
    dev: OnceLock<usize>,
}

// SAFETY: the raw pointers stored (as usize) point to leaked, immutable ggml structs; all
// mutable state is behind locks or in the thread-safe runtime.
unsafe impl Sync for Device {}
// SAFETY: as above.
unsafe impl Send for Device {}

impl Device {
    /// Creates device `index` over `rt` and its ggml structs (leaked: devices live for the
    /// process, as ggml expects of registered devices).
    pub fn create(
        index: usize,
        rt: Box<dyn Runtime>,
        reg: ggml_backend_reg_t,
        arena_limit: usize,
    ) -> &'static Device {
        let d: &'static Device = Box::leak(Box::new(Device {
            index,
            name: CString::new(format!("HRX{index}")).unwrap(),
            host_buft_name: CString::new(format!("HRX{index}_HOST")).unwrap(),
            description: CString::new(rt.describe()).unwrap_or_default(),
            rt,
            arena: Mutex::new(Arena::new(arena_limit)),
            reporter: Mutex::new(Reporter::new(index)),
            buft: OnceLock::new(),
            host_buft: OnceLock::new(),
            dev: OnceLock::new(),
        }));
        let ctx = d as *const Device as *mut c_void;
        let dev = Box::leak(Box::new(ggml_backend_device {
            iface: device_iface(),
            reg,
            context: ctx,
        }));
        let buft = Box::leak(Box::new(ggml_backend_buffer_type {
            iface: buffer::device_buft_iface(),
            device: dev,
            context: ctx,
        }));
        let host = Box::leak(Box::new(ggml_backend_buffer_type {
            iface: buffer::host_buft_iface(),
            device: dev,
            context: ctx,
        }));
        let _ = d.dev.set(dev as *mut _ as usize);
        let _ = d.buft.set(buft as *mut _ as usize);
        let _ = d.host_buft.set(host as *mut _ as usize);
        d
    }

    /// The ggml device.
    pub fn dev(&self) -> ggml_backend_dev_t {
        *self.dev.get().unwrap() as ggml_backend_dev_t
    }

    /// The device-local buffer type `HRXn`.
    pub fn buft(&self) -> ggml_backend_buffer_type_t {
        *self.buft.get().unwrap() as ggml_backend_buffer_type_t
    }

    /// The host buffer type `HRXn_HOST`.
    pub fn host_buft(&self) -> ggml_backend_buffer_type_t {
        *self.host_buft.get().unwrap() as ggml_backend_buffer_type_t
    }

    /// Whether the device can use tensors in `buft`: its own types and any host type.
    ///
    /// # Safety
    /// `buft` is NULL or a live buffer type.
    pub unsafe fn supports_buft(&self, buft: ggml_backend_buffer_type_t) -> bool {
        // SAFETY: forwarded.
        buft == self.buft() || buft == self.host_buft() || unsafe { buffer::buft_is_host(buft) }
    }
}

/// The device of a `ggml_backend_dev_t` of ours.
///
/// # Safety
/// `dev` is one of this library's devices.
pub unsafe fn from_dev(dev: ggml_backend_dev_t) -> &'static Device {
    // SAFETY: our devices' context is the leaked Device.
    unsafe { &*(non_null(dev, "device").context as *const Device) }
}

/// Whether ggml's CPU kernels handle `node` (the simulator runs them); false when
/// libggml-cpu is not in the process.
pub fn cpu_kernels_support(node: &ggml_tensor) -> bool {
    static CPU_DEV: OnceLock<usize> = OnceLock::new();
    let dev = *CPU_DEV.get_or_init(|| match crate::ggml::cpu() {
        Some(c) => {
            // SAFETY: plain call; the CPU registry is static in libggml-cpu (NULL only if
            // that library is broken, checked below).
            let reg = unsafe { (c.reg)() };
            if reg.is_null() {
                return 0;
            }
            // SAFETY: `reg` is non-NULL and points to libggml-cpu's static registry; its
            // first device is static too.
            unsafe {
                match (*reg).iface.get_device {
                    Some(f) => f(reg, 0) as usize,
                    None => 0,
                }
            }
        }
        None => 0,
    });
    if dev == 0 {
        return false;
    }
    let dev = dev as ggml_backend_dev_t;
    // SAFETY: a live device and a live node.
    unsafe { (*dev).iface.supports_op.is_some_and(|f| f(dev, node)) }
}

fn device_iface() -> ggml_backend_device_i {
    ggml_backend_device_i {
        get_name: Some(dev_get_name),
        get_description: Some(dev_get_description),
        get_memory: Some(dev_get_memory),
        get_type: Some(dev_get_type),
        get_props: Some(dev_get_props),
        init_backend: Some(dev_init_backend),
        get_buffer_type: Some(dev_get_buffer_type),
        get_host_buffer_type: Some(dev_get_host_buffer_type),
        buffer_from_host_ptr: None,
        supports_op: Some(dev_supports_op),
        supports_buft: Some(dev_supports_buft),
        offload_op: Some(dev_offload_op),
        event_new: Some(dev_event_new),
        event_free: Some(dev_event_free),
        event_synchronize: Some(dev_event_synchronize),
    }
}

unsafe extern "C" fn dev_get_name(dev: ggml_backend_dev_t) -> *const c_char {
    // SAFETY: ggml passes one of our devices.
    guard("ggml_backend_hrx_device_get_name", || {
        unsafe { from_dev(dev) }.name.as_ptr()
    })
}

unsafe extern "C" fn dev_get_description(dev: ggml_backend_dev_t) -> *const c_char {
    // SAFETY: ggml passes one of our devices.
    guard("ggml_backend_hrx_device_get_description", || {
        unsafe { from_dev(dev) }.description.as_ptr()
    })
}

unsafe extern "C" fn dev_get_memory(dev: ggml_backend_dev_t, free: *mut usize, total: *mut usize) {
    guard("ggml_backend_hrx_device_get_memory", || {
        // SAFETY: ggml passes one of our devices and two writable out-parameters.
        let d = unsafe { from_dev(dev) };
        let cap = d.rt.capacity();
        let used = d.rt.used();
        // SAFETY: as above.
        unsafe {
            if !free.is_null() {
                *free = cap.saturating_sub(used);
            }
            if !total.is_null() {
                *total = cap;
            }
        }
    })
}

unsafe extern "C" fn dev_get_type(_dev: ggml_backend_dev_t) -> ggml_backend_dev_type {
    GGML_BACKEND_DEVICE_TYPE_GPU
}

unsafe extern "C" fn dev_get_props(dev: ggml_backend_dev_t, props: *mut ggml_backend_dev_props) {
    guard("ggml_backend_hrx_device_get_props", || {
        // SAFETY: ggml passes one of our devices and a writable props struct.
        let d = unsafe { from_dev(dev) };
        let mut free = 0;
        let mut total = 0;
        // SAFETY: locals as out-parameters.
        unsafe { dev_get_memory(dev, &mut free, &mut total) };
        let p = ggml_backend_dev_props {
            name: d.name.as_ptr(),
            description: d.description.as_ptr(),
            memory_free: free,
            memory_total: total,
            type_: GGML_BACKEND_DEVICE_TYPE_GPU,
            device_id: std::ptr::null(),
            caps: ggml_backend_dev_caps {
                async_: true,
                host_buffer: true,
                buffer_from_host_ptr: false,
                events: true,
                mmap_support: false,
            },
        };
        // SAFETY: writable per ggml's contract.
        unsafe { *props = p };
    })
}

unsafe extern "C" fn dev_init_backend(
    dev: ggml_backend_dev_t,
    _params: *const c_char,
) -> ggml_backend_t {
    // SAFETY: ggml passes one of our devices.
    guard("ggml_backend_hrx_device_init_backend", || {
        crate::backend::new_backend(unsafe { from_dev(dev) })
    })
}

unsafe extern "C" fn dev_get_buffer_type(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t {
    // SAFETY: ggml passes one of our devices.
    guard("ggml_backend_hrx_device_get_buffer_type", || {
        unsafe { from_dev(dev) }.buft()
    })
}

unsafe extern "C" fn dev_get_host_buffer_type(
    dev: ggml_backend_dev_t,
) -> ggml_backend_buffer_type_t {
    // SAFETY: ggml passes one of our devices.
    guard("ggml_backend_hrx_device_get_host_buffer_type", || {
        unsafe { from_dev(dev) }.host_buft()
    })
}

unsafe extern "C" fn dev_supports_op(_dev: ggml_backend_dev_t, op: *const ggml_tensor) -> bool {
    guard("ggml_backend_hrx_device_supports_op", || {
        // SAFETY: ggml passes a live tensor.
        let node = unsafe { non_null(op, "op") };
        claims::claim(node, &cpu_kernels_support).accepted()
    })
}

unsafe extern "C" fn dev_supports_buft(
    dev: ggml_backend_dev_t,
    buft: ggml_backend_buffer_type_t,
) -> bool {
    // SAFETY: ggml passes one of our devices and a live buffer type.
    guard("ggml_backend_hrx_device_supports_buft", || unsafe {
        from_dev(dev).supports_buft(buft)
    })
}

unsafe extern "C" fn dev_offload_op(_dev: ggml_backend_dev_t, op: *const ggml_tensor) -> bool {
    guard("ggml_backend_hrx_device_offload_op", || {
        // SAFETY: ggml passes a live tensor.
        claims::offload(unsafe { non_null(op, "op") }, &cpu_kernels_support)
    })
}

unsafe extern "C" fn dev_event_new(dev: ggml_backend_dev_t) -> ggml_backend_event_t {
    guard("ggml_backend_hrx_device_event_new", || {
        let ev = Arc::into_raw(Event::new()) as *mut c_void;
        Box::into_raw(Box::new(ggml_backend_event {
            device: dev,
            context: ev,
        }))
    })
}

/// The event behind a `ggml_backend_event_t` of ours.
///
/// # Safety
/// `ev` is one of this library's events.
pub unsafe fn event_of(ev: ggml_backend_event_t) -> Arc<Event> {
    // SAFETY: the context is an Arc<Event> raw pointer; we add a reference for the caller.
    unsafe {
        let p = non_null(ev, "event").context as *const Event;
        Arc::increment_strong_count(p);
        Arc::from_raw(p)
    }
}

unsafe extern "C" fn dev_event_free(_dev: ggml_backend_dev_t, ev: ggml_backend_event_t) {
    guard("ggml_backend_hrx_device_event_free", || {
        if ev.is_null() {
            return;
        }
        // SAFETY: created by dev_event_new; ggml frees each event once.
        unsafe {
            let b = Box::from_raw(ev);
            drop(Arc::from_raw(b.context as *const Event));
        }
    })
}

unsafe extern "C" fn dev_event_synchronize(_dev: ggml_backend_dev_t, ev: ggml_backend_event_t) {
    guard("ggml_backend_hrx_device_event_synchronize", || {
        // SAFETY: one of our events.
        let e = unsafe { event_of(ev) };
        e.wait_for(e.recorded());
    })
}
