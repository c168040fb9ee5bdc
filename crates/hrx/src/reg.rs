//! The registry `HRX`: devices `HRX0`, `HRX1`, ... created once per process.
//!
//! Environment (read once, when the registry is first asked for):
//! - `GGML_HRX_DEVICES` (default 1): number of devices.
//! - `GGML_HRX_SIM_MEMORY_MB` (default 8192): memory of each simulated device, in MiB
//!   (address space only; pages cost memory when touched).
//! - `GGML_HRX_FAKE_PTR_BASE` (default unset): requested start of device 0's address range
//!   (see [`crate::address`]).
//! - `GGML_HRX_HOST_WEIGHT_LIMIT_MB` (default 1024): the host-weight arena budget per
//!   device, in MiB (fractions allowed, e.g. `0.5`).
//! - `GGML_HRX_SIM_THREADS` (default: available cores): host threads that run a node.

use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

use ggml_sys::*;

use crate::device::Device;
use crate::ffi::guard;
use crate::runtime::sim::SimDevice;
use crate::runtime::Runtime;

/// The registry and its devices.
pub struct Registry {
    reg: usize,
    /// The devices, in index order.
    pub devices: Vec<&'static Device>,
}

fn env_f64(name: &str, default: f64) -> f64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|x| *x >= 0.0)
            .unwrap_or_else(|| {
                crate::log::warn(&format!(
                    "HRX: {name}='{v}' is not a number; using {default}\n"
                ));
                default
            }),
        Err(_) => default,
    }
}

/// The process's registry, created on first use.
pub fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        let reg: &'static mut ggml_backend_reg = Box::leak(Box::new(ggml_backend_reg {
            api_version: GGML_BACKEND_API_VERSION as i32,
            iface: ggml_backend_reg_i {
                get_name: Some(reg_get_name),
                get_device_count: Some(reg_get_device_count),
                get_device: Some(reg_get_device),
                get_proc_address: Some(reg_get_proc_address),
            },
            context: std::ptr::null_mut(),
        }));
        let n = env_f64("GGML_HRX_DEVICES", 1.0) as usize;
        let mem = (env_f64("GGML_HRX_SIM_MEMORY_MB", 8192.0) * 1048576.0) as usize;
        let mem = mem.div_ceil(65536) * 65536;
        let limit = (env_f64("GGML_HRX_HOST_WEIGHT_LIMIT_MB", 1024.0) * 1048576.0) as usize;
        let base = std::env::var("GGML_HRX_FAKE_PTR_BASE").ok().and_then(|v| {
            let p = crate::address::parse_addr(&v);
            if p.is_none() {
                crate::log::warn(&format!(
                    "HRX: GGML_HRX_FAKE_PTR_BASE='{v}' is not an address; ignored\n"
                ));
            }
            p
        });
        let threads = std::env::var("GGML_HRX_SIM_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok());
        let mut devices = Vec::new();
        for i in 0..n {
            let hint = base.map(|b| b + i * mem);
            match SimDevice::new(i, mem, hint) {
                Some(sim) => {
                    if let Some(t) = threads {
                        sim.set_threads(t);
                    }
                    devices.push(Device::create(devices.len(), Box::new(sim), reg, limit));
                }
                None => crate::log::warn(&format!(
                    "HRX: cannot reserve {} MiB for device {i}; skipped\n",
                    mem >> 20
                )),
            }
        }
        Registry {
            reg: reg as *mut _ as usize,
            devices,
        }
    })
}

impl Registry {
    /// The ggml registry.
    pub fn reg(&self) -> ggml_backend_reg_t {
        self.reg as ggml_backend_reg_t
    }
}

unsafe extern "C" fn reg_get_name(_reg: ggml_backend_reg_t) -> *const c_char {
    c"HRX".as_ptr()
}

unsafe extern "C" fn reg_get_device_count(_reg: ggml_backend_reg_t) -> usize {
    guard("ggml_backend_hrx_reg_get_device_count", || {
        registry().devices.len()
    })
}

unsafe extern "C" fn reg_get_device(_reg: ggml_backend_reg_t, index: usize) -> ggml_backend_dev_t {
    guard("ggml_backend_hrx_reg_get_device", || {
        match registry().devices.get(index) {
            Some(d) => d.dev(),
            None => std::ptr::null_mut(),
        }
    })
}

unsafe extern "C" fn set_n_threads(backend: ggml_backend_t, n: i32) {
    guard("ggml_backend_hrx_set_n_threads", || {
        // SAFETY: ggml passes a live backend; only ours are changed.
        unsafe {
            if crate::backend::is_hrx(backend) {
                crate::device::from_dev((*backend).device)
                    .rt
                    .set_threads(n.max(1) as usize);
            }
        }
    })
}

unsafe extern "C" fn reg_get_proc_address(
    _reg: ggml_backend_reg_t,
    name: *const c_char,
) -> *mut c_void {
    guard("ggml_backend_hrx_reg_get_proc_address", || {
        if name.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: ggml passes a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(name) }.to_bytes();
        match name {
            b"ggml_backend_set_n_threads" => set_n_threads as *mut c_void,
            b"ggml_backend_hrx_eager_ops_add" => {
                crate::ggml_backend_hrx_eager_ops_add as *mut c_void
            }
            b"ggml_backend_hrx_eager_ops_remove" => {
                crate::ggml_backend_hrx_eager_ops_remove as *mut c_void
            }
            b"ggml_backend_hrx_eager_ops_apply" => {
                crate::ggml_backend_hrx_eager_ops_apply as *mut c_void
            }
            b"ggml_backend_hrx_arena_stats_get" => {
                crate::ggml_backend_hrx_arena_stats_get as *mut c_void
            }
            _ => std::ptr::null_mut(),
        }
    })
}
