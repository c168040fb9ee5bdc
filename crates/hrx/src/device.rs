//! Devices `HRX0`, `HRX1`, ...: the `ggml_backend_device` interface. [`create`] builds a
//! device's ggml structs (device, buffer types `HRXn` and `HRXn_HOST`) around its shared
//! state ([`Device`], in `context`); the buffer types' interfaces come from `buffer`, the
//! backend from `backend`, the events from `event`.

use std::ffi::{c_char, c_void};

use ggml_sys::*;

use crate::backend;
use crate::buffer;
use crate::claims;
use crate::context::{from_dev, Device};
use crate::event;
use crate::ffi::{guard, non_null};
use crate::runtime::Runtime;

/// Creates device `index` over `rt` in registry `reg`, with a host-weight budget of
/// `arena_limit` bytes. The device and its ggml structs are leaked: devices live for the
/// process, as ggml expects of registered devices.
pub fn create(
    index: usize,
    rt: Box<dyn Runtime>,
    reg: ggml_backend_reg_t,
    arena_limit: usize,
) -> &'static Device {
    let d = Device::leak(index, rt, arena_limit);
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
    d.set_handles(dev, buft, host);
    d
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
        event_new: Some(event::event_new),
        event_free: Some(event::event_free),
        event_synchronize: Some(event::event_synchronize),
    }
}

unsafe extern "C" fn dev_get_name(dev: ggml_backend_dev_t) -> *const c_char {
    guard("ggml_backend_hrx_device_get_name", || {
        // SAFETY: ggml passes one of our devices.
        unsafe { from_dev(dev) }.name.as_ptr()
    })
}

unsafe extern "C" fn dev_get_description(dev: ggml_backend_dev_t) -> *const c_char {
    guard("ggml_backend_hrx_device_get_description", || {
        // SAFETY: ggml passes one of our devices.
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
    guard("ggml_backend_hrx_device_init_backend", || {
        // SAFETY: ggml passes one of our devices.
        let d = unsafe { from_dev(dev) };
        backend::new_backend(d)
    })
}

unsafe extern "C" fn dev_get_buffer_type(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t {
    guard("ggml_backend_hrx_device_get_buffer_type", || {
        // SAFETY: ggml passes one of our devices.
        unsafe { from_dev(dev) }.buft()
    })
}

unsafe extern "C" fn dev_get_host_buffer_type(
    dev: ggml_backend_dev_t,
) -> ggml_backend_buffer_type_t {
    guard("ggml_backend_hrx_device_get_host_buffer_type", || {
        // SAFETY: ggml passes one of our devices.
        unsafe { from_dev(dev) }.host_buft()
    })
}

unsafe extern "C" fn dev_supports_op(dev: ggml_backend_dev_t, op: *const ggml_tensor) -> bool {
    guard("ggml_backend_hrx_device_supports_op", || {
        // SAFETY: ggml passes one of our devices and a live tensor.
        let (d, node) = unsafe { (from_dev(dev), non_null(op, "op")) };
        claims::claim(node, &|n| d.rt.supports(n)).accepted()
    })
}

unsafe extern "C" fn dev_supports_buft(
    dev: ggml_backend_dev_t,
    buft: ggml_backend_buffer_type_t,
) -> bool {
    guard("ggml_backend_hrx_device_supports_buft", || {
        // SAFETY: ggml passes one of our devices and a live buffer type.
        unsafe { from_dev(dev).supports_buft(buft) }
    })
}

unsafe extern "C" fn dev_offload_op(dev: ggml_backend_dev_t, op: *const ggml_tensor) -> bool {
    guard("ggml_backend_hrx_device_offload_op", || {
        // SAFETY: ggml passes one of our devices and a live tensor.
        let (d, node) = unsafe { (from_dev(dev), non_null(op, "op")) };
        claims::offload(node, &|n| d.rt.supports(n))
    })
}
