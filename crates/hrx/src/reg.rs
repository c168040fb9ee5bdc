//! The devices of the registry `HRX` (`HRX0`, `HRX1`, ...), created once per process from
//! the environment. The registry's ggml interface and the exported entry points that reach
//! it are in the crate root (`lib.rs`), which holds the one [`Registry`].
//!
//! Environment (read once, when the registry is first asked for; a value outside what is
//! listed here is named in a warning and the default kept, see [`crate::env`]):
//! - `GGML_HRX_RUNTIME` (default `auto`): what backs the devices. `cuda`: CUDA GPUs
//!   ([`crate::runtime::cuda`]; no device when none is usable, with a warning saying why);
//!   `sim`: the simulator; `auto`: CUDA when a CUDA device is present, else the simulator.
//! - `GGML_HRX_PROFILE` (default off, a switch): CUDA runtime only, time every launch issued
//!   on its own and every graph replay as a whole, and print where the time went at exit
//!   ([`crate::runtime::cuda`]).
//! - `GGML_HRX_CUDA_GRAPHS` (default on, a switch): CUDA runtime only, replay a split's
//!   launch list as a CUDA graph when it is issued again unchanged
//!   ([`crate::runtime::cuda`]'s `graphs` module).
//! - `GGML_HRX_CUDA_FUSE` (default on, a switch): CUDA runtime only, also run a one-token
//!   feed-forward's up and gate products with their GLU as one kernel, and a residual ADD
//!   with the RMS_NORM (and MUL) after it as one; `0` issues them op by op (docs/hrx-cuda.md
//!   has the H200 run that checked both).
//! - `GGML_HRX_MMV_BLOCKS` (default 1024): CUDA runtime only, blocks per column of the
//!   matrix-vector kernels (MUL_MAT of up to 8 columns) at most, 1 to 65535; a knob for
//!   measuring on a given card (docs/hrx-cuda.md), the rows beyond it taken grid-stride.
//! - `GGML_HRX_DEVICES` (default 1): number of devices, 0 to [`env::MAX_DEVICES`]; with
//!   CUDA at most the number of CUDA devices (device n is CUDA device n).
//! - `GGML_HRX_SIM_MEMORY_MB` (default 8192): memory of each simulated device, in MiB, 1 to
//!   [`env::MAX_SIM_MEMORY_MB`] (address space only; pages cost memory when touched).
//! - `GGML_HRX_FAKE_PTR_BASE` (default unset): requested start of device 0's address range,
//!   non-zero and page-aligned (see [`crate::runtime::address`]).
//! - `GGML_HRX_HOST_WEIGHT_LIMIT_MB` (default 1024): the host-weight arena budget per
//!   device, in MiB, at least 0 (fractions allowed, e.g. `0.5`).
//! - `GGML_HRX_SIM_THREADS` (default: available cores): host threads that run a node, 1 to
//!   [`env::MAX_SIM_THREADS`].

use ggml_sys::ggml_backend_reg_t;

use crate::context::Device;
use crate::env::{self, RuntimeChoice};
use crate::runtime::cuda::{self, CudaDevice};
use crate::runtime::sim::SimDevice;
use crate::runtime::Runtime;

/// The registry's devices.
pub struct Registry {
    reg: usize,
    /// The devices, in index order.
    pub devices: Vec<&'static Device>,
}

fn log_queue_error(text: &str) {
    crate::log::error(text)
}

fn log_runtime_note(text: &str) {
    crate::log::info(text)
}

impl Registry {
    /// Creates the devices the environment asks for, as devices of the ggml registry `reg`
    /// (leaked, like `reg`: both live for the process).
    pub fn from_env(reg: ggml_backend_reg_t) -> Registry {
        let n = env::read("GGML_HRX_DEVICES", 1, "1", |v| {
            env::count(v, 0..=env::MAX_DEVICES)
        });
        let mem_mb = env::read("GGML_HRX_SIM_MEMORY_MB", 8192.0, "8192", |v| {
            env::mib(v, 1.0..=env::MAX_SIM_MEMORY_MB)
        });
        let mem = ((mem_mb * 1048576.0) as usize).div_ceil(65536) * 65536;
        let limit_mb = env::read("GGML_HRX_HOST_WEIGHT_LIMIT_MB", 1024.0, "1024", |v| {
            env::mib(v, 0.0..=f64::MAX)
        });
        let limit = (limit_mb * 1048576.0) as usize;
        let base = env::read(
            "GGML_HRX_FAKE_PTR_BASE",
            None,
            "a kernel-chosen range",
            |v| env::address(v).map(Some),
        );
        let threads = env::read("GGML_HRX_SIM_THREADS", None, "the available cores", |v| {
            env::count(v, 1..=env::MAX_SIM_THREADS).map(Some)
        });
        let choice = env::read(
            "GGML_HRX_RUNTIME",
            RuntimeChoice::Auto,
            "auto",
            env::runtime_choice,
        );
        // read whatever the runtime, so that a bad value is named even where it has no use
        let profile = env::read("GGML_HRX_PROFILE", false, "0 (off)", env::switch);
        let graphs = env::read("GGML_HRX_CUDA_GRAPHS", true, "1 (on)", env::switch);
        let prefetch = env::read("GGML_HRX_PREFETCH", false, "0 (off)", env::switch);
        let fuse = env::read("GGML_HRX_CUDA_FUSE", true, "1 (on)", env::switch);
        let mmv_max_blocks = env::read("GGML_HRX_MMV_BLOCKS", 0, "1024", |v| {
            env::count(v, 1..=65535).map(|n| n as u64)
        });
        let mut devices = Vec::new();
        if choice != RuntimeChoice::Sim {
            let opts = cuda::Options {
                profile,
                graphs,
                prefetch,
                weight_keep: limit,
                mmv_max_blocks,
                fuse,
            };
            match cuda_devices(n, base, limit, opts, reg) {
                Ok(d) => {
                    return Registry {
                        reg: reg as usize,
                        devices: d,
                    }
                }
                Err(why) if choice == RuntimeChoice::Cuda => {
                    crate::log::warn(&format!(
                        "HRX: GGML_HRX_RUNTIME=cuda: {why}; no HRX device\n"
                    ));
                    return Registry {
                        reg: reg as usize,
                        devices,
                    };
                }
                Err(_) => {} // auto: the simulator
            }
        }
        for i in 0..n {
            let hint = base.and_then(|b| b.checked_add(i.checked_mul(mem)?));
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

/// `n` HRX devices on CUDA devices 0..n, or why there are none (no driver, no device, the
/// first device failing to open). Fewer CUDA devices than asked: a warning, and as many as
/// there are.
fn cuda_devices(
    n: usize,
    base: Option<usize>,
    limit: usize,
    opts: cuda::Options,
    reg: ggml_backend_reg_t,
) -> Result<Vec<&'static Device>, String> {
    let opened = cuda::loader::preload_toolkit();
    let have = cuda::loader::device_count()?;
    if have == 0 {
        return Err("no CUDA device".into());
    }
    if let Err(why) = cuda::loader::toolkit_present() {
        // a GPU without the libraries to run kernels on it: say so even under `auto`
        crate::log::warn(&format!("HRX: {have} CUDA device(s) but {why}\n"));
        return Err(why);
    }
    if n > have {
        crate::log::warn(&format!(
            "HRX: GGML_HRX_DEVICES={n} but {have} CUDA device(s); using {have}\n"
        ));
    }
    if !opened.is_empty() {
        crate::log::info(&format!(
            "HRX: CUDA libraries opened from {}\n",
            opened.join(", ")
        ));
    }
    let mut devices = Vec::new();
    let mut next_base = base;
    for i in 0..n.min(have) {
        match CudaDevice::new(i, i, next_base, opts, log_queue_error, log_runtime_note) {
            Ok(d) => {
                next_base = next_base.and_then(|b| b.checked_add(d.capacity()));
                devices.push(crate::device::create(
                    devices.len(),
                    Box::new(d),
                    reg,
                    limit,
                ));
            }
            Err(e) if devices.is_empty() => return Err(format!("CUDA device {i}: {e}")),
            Err(e) => crate::log::warn(&format!("HRX: CUDA device {i}: {e}; skipped\n")),
        }
    }
    Ok(devices)
}
