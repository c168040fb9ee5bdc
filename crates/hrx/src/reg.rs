//! The devices of the registry `HRX` (`HRX0`, `HRX1`, ...), created once per process from
//! the environment. The registry's ggml interface and the exported entry points that reach
//! it are in the crate root (`lib.rs`), which holds the one [`Registry`].
//!
//! Environment (read once, when the registry is first asked for):
//! - `GGML_HRX_DEVICES` (default 1): number of devices.
//! - `GGML_HRX_SIM_MEMORY_MB` (default 8192): memory of each simulated device, in MiB
//!   (address space only; pages cost memory when touched).
//! - `GGML_HRX_FAKE_PTR_BASE` (default unset): requested start of device 0's address range
//!   (see [`crate::runtime::sim::address`]).
//! - `GGML_HRX_HOST_WEIGHT_LIMIT_MB` (default 1024): the host-weight arena budget per
//!   device, in MiB (fractions allowed, e.g. `0.5`).
//! - `GGML_HRX_SIM_THREADS` (default: available cores): host threads that run a node.

use ggml_sys::ggml_backend_reg_t;

use crate::context::Device;
use crate::runtime::sim::SimDevice;
use crate::runtime::Runtime;

/// The registry's devices.
pub struct Registry {
    reg: usize,
    /// The devices, in index order.
    pub devices: Vec<&'static Device>,
}

/// Parses `GGML_HRX_FAKE_PTR_BASE`-style numbers: `0x` hex or decimal.
pub fn parse_addr(s: &str) -> Option<usize> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => usize::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn log_queue_error(text: &str) {
    crate::log::error(text)
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

impl Registry {
    /// Creates the devices the environment asks for, as devices of the ggml registry `reg`
    /// (leaked, like `reg`: both live for the process).
    pub fn from_env(reg: ggml_backend_reg_t) -> Registry {
        let n = env_f64("GGML_HRX_DEVICES", 1.0) as usize;
        let mem = (env_f64("GGML_HRX_SIM_MEMORY_MB", 8192.0) * 1048576.0) as usize;
        let mem = mem.div_ceil(65536) * 65536;
        let limit = (env_f64("GGML_HRX_HOST_WEIGHT_LIMIT_MB", 1024.0) * 1048576.0) as usize;
        let base = std::env::var("GGML_HRX_FAKE_PTR_BASE").ok().and_then(|v| {
            let p = parse_addr(&v);
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
            match SimDevice::new(i, mem, hint, log_queue_error) {
                Some(sim) => {
                    if let Some(h) = hint.filter(|&h| h != sim.address_base()) {
                        crate::log::warn(&format!(
                            "HRX: GGML_HRX_FAKE_PTR_BASE {h:#x} is not available; using a kernel-chosen range\n"
                        ));
                    }
                    if let Some(t) = threads {
                        sim.set_threads(t);
                    }
                    devices.push(crate::device::create(
                        devices.len(),
                        Box::new(sim),
                        reg,
                        limit,
                    ));
                }
                None => crate::log::warn(&format!(
                    "HRX: cannot reserve {} MiB for device {i}; skipped\n",
                    mem >> 20
                )),
            }
        }
        Registry {
            reg: reg as usize,
            devices,
        }
    }

    /// The ggml registry.
    pub fn reg(&self) -> ggml_backend_reg_t {
        self.reg as ggml_backend_reg_t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_as_hex_or_decimal() {
        assert_eq!(parse_addr("0x1000"), Some(4096));
        assert_eq!(parse_addr(" 0X10 "), Some(16));
        assert_eq!(parse_addr("4096"), Some(4096));
        assert_eq!(parse_addr("zz"), None);
    }
}
