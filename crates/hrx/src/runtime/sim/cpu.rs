//! The libggml-cpu functions the simulator calls: its "device kernels" are ggml's CPU
//! kernels. Resolved once at run time (see [`crate::runtime::dl`]); absent (`None`) when
//! libggml-cpu is not in the process.

use std::sync::OnceLock;

use ggml_sys::{ggml_backend_dev_t, ggml_backend_reg_t, ggml_backend_t, ggml_tensor};

use crate::runtime::dl::symbol;

/// Functions from libggml-cpu.
pub struct Cpu {
    /// `ggml_backend_cpu_init`
    pub init: unsafe extern "C" fn() -> ggml_backend_t,
    /// `ggml_backend_cpu_set_n_threads`
    pub set_n_threads: unsafe extern "C" fn(ggml_backend_t, i32),
    /// `ggml_backend_cpu_reg`
    pub reg: unsafe extern "C" fn() -> ggml_backend_reg_t,
}

/// The libggml-cpu table, or `None` when libggml-cpu is not in the process.
pub fn cpu() -> Option<&'static Cpu> {
    static CPU: OnceLock<Option<Cpu>> = OnceLock::new();
    CPU.get_or_init(|| {
        // SAFETY: each type is the C signature of that function in ggml-cpu.h (checked
        // by review against the pinned header).
        unsafe {
            Some(Cpu {
                init: symbol(c"ggml_backend_cpu_init")?,
                set_n_threads: symbol(c"ggml_backend_cpu_set_n_threads")?,
                reg: symbol(c"ggml_backend_cpu_reg")?,
            })
        }
    })
    .as_ref()
}

/// libggml-cpu's first device (the CPU), or NULL when the library is absent or its
/// registry has no device.
fn cpu_device() -> ggml_backend_dev_t {
    static CPU_DEV: OnceLock<usize> = OnceLock::new();
    let dev = *CPU_DEV.get_or_init(|| {
        let Some(c) = cpu() else { return 0 };
        // SAFETY: plain call; the CPU registry is static in libggml-cpu.
        let reg = unsafe { (c.reg)() };
        // a NULL registry (a broken libggml-cpu) must be caught before its interface is read
        if reg.is_null() {
            return 0;
        }
        // SAFETY: `reg` is non-NULL and points to libggml-cpu's static registry.
        let get_device = unsafe { (*reg).iface.get_device };
        match get_device {
            // SAFETY: a live registry and index 0; the device it returns is static.
            Some(f) => unsafe { f(reg, 0) as usize },
            None => 0,
        }
    });
    dev as ggml_backend_dev_t
}

/// Whether ggml's CPU kernels handle `node`; false when libggml-cpu is not in the process.
pub fn supports(node: &ggml_tensor) -> bool {
    let dev = cpu_device();
    if dev.is_null() {
        return false;
    }
    // SAFETY: `dev` is libggml-cpu's live, static CPU device.
    let supports_op = unsafe { (*dev).iface.supports_op };
    // SAFETY: a live device and a live node.
    supports_op.is_some_and(|f| unsafe { f(dev, node) })
}
