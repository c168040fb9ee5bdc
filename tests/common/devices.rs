//! The two test devices the scheduler tests share (`tests/sched_calls.rs`,
//! `tests/replay_break.rs`, each includes this file): "TESTA", a GPU-type device with a
//! buffer type of its own (host memory, so tests can read it), and "TESTCPU", the CPU-type
//! device the scheduler requires last, with the CPU buffer type. Each computes in its own
//! buffer type only, so what one backend reads from the other's memory is copied by the
//! scheduler. The backends (compute) are each test's own.
//!
//! Switches, off by default: [`FAIL_A_ALLOC`] makes TESTA's buffer allocations fail,
//! [`OFFLOAD_A`] makes TESTA ask for every op (`offload_op`).

#![allow(dead_code)]

use std::os::raw::c_char;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};

use ggml_base::buffer_type::*;
use ggml_base::cpu_buffer::*;
use ggml_sys as sys;
use ggml_sys::ggml_tensor;

/// TESTA's buffer allocations fail while set.
pub static FAIL_A_ALLOC: AtomicBool = AtomicBool::new(false);
/// TESTA's `offload_op` says yes while set.
pub static OFFLOAD_A: AtomicBool = AtomicBool::new(false);

pub unsafe extern "C" fn dev_name(d: sys::ggml_backend_dev_t) -> *const c_char {
    if d == &raw mut DEV_A {
        c"TESTA".as_ptr()
    } else {
        c"TESTCPU".as_ptr()
    }
}
/// The backend interface's `get_name`: the name of the backend's device.
pub unsafe extern "C" fn backend_name(b: sys::ggml_backend_t) -> *const c_char {
    // SAFETY: a backend made by a test's `backend()`, whose device is one of these.
    unsafe { dev_name((*b).device) }
}

/// The backend interface's `synchronize`: the test backends compute synchronously.
pub unsafe extern "C" fn backend_sync(_: sys::ggml_backend_t) {}

/// A backend of `dev` with the test's own interface (`get_name`, `free` and the others it
/// sets; [`backend_name`] and [`backend_free`] fit any test); freed by `iface.free`.
pub fn new_backend(
    dev: *mut sys::ggml_backend_device,
    iface: sys::ggml_backend_i,
) -> sys::ggml_backend_t {
    Box::into_raw(Box::new(sys::ggml_backend {
        guid: null_mut(),
        iface,
        device: dev,
        context: null_mut(),
    }))
}

/// The backend interface's `free`.
pub unsafe extern "C" fn backend_free(b: sys::ggml_backend_t) {
    // SAFETY: made by Box in a test's `backend()`.
    drop(unsafe { Box::from_raw(b) });
}

pub unsafe extern "C" fn dev_memory(
    _: sys::ggml_backend_dev_t,
    free: *mut usize,
    total: *mut usize,
) {
    // SAFETY: the layer passes writable pointers.
    unsafe {
        *free = 1 << 30;
        *total = 1 << 30;
    }
}
pub unsafe extern "C" fn dev_type(d: sys::ggml_backend_dev_t) -> sys::ggml_backend_dev_type {
    if d == &raw mut DEV_A {
        sys::GGML_BACKEND_DEVICE_TYPE_GPU
    } else {
        sys::GGML_BACKEND_DEVICE_TYPE_CPU
    }
}
pub unsafe extern "C" fn dev_props(
    d: sys::ggml_backend_dev_t,
    p: *mut sys::ggml_backend_dev_props,
) {
    // SAFETY: the layer passes a writable, zeroed props struct.
    unsafe {
        (*p).name = dev_name(d);
        (*p).description = dev_name(d);
        (*p).memory_free = 1 << 30;
        (*p).memory_total = 1 << 30;
        (*p).type_ = dev_type(d);
    }
}
// TESTA's memory: host memory (so the backends and the checks can read it), but a buffer
// type of its own, as a GPU's would be. With one buffer type for both backends the scheduler
// moves nodes, user-placed ones included, to the higher-priority backend (stock's pass 3
// does the same), and no input would ever be copied between them.
pub unsafe extern "C" fn buft_a_name(_: sys::ggml_backend_buffer_type_t) -> *const c_char {
    c"TESTA".as_ptr()
}
pub unsafe extern "C" fn buft_a_alloc(
    _: sys::ggml_backend_buffer_type_t,
    size: usize,
) -> sys::ggml_backend_buffer_t {
    if FAIL_A_ALLOC.load(Ordering::SeqCst) {
        return null_mut();
    }
    // SAFETY: a CPU buffer, then marked as TESTA's; its own free callback releases it.
    unsafe {
        let b = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), size);
        if !b.is_null() {
            (*b).buft = &raw mut BUFT_A;
        }
        b
    }
}
pub unsafe extern "C" fn buft_a_alignment(_: sys::ggml_backend_buffer_type_t) -> usize {
    32
}
pub unsafe extern "C" fn buft_a_is_host(_: sys::ggml_backend_buffer_type_t) -> bool {
    true
}
pub static mut BUFT_A: sys::ggml_backend_buffer_type = sys::ggml_backend_buffer_type {
    iface: sys::ggml_backend_buffer_type_i {
        get_name: Some(buft_a_name),
        alloc_buffer: Some(buft_a_alloc),
        get_alignment: Some(buft_a_alignment),
        get_max_size: None,
        get_alloc_size: None,
        is_host: Some(buft_a_is_host),
    },
    device: &raw mut DEV_A,
    context: null_mut(),
};

pub unsafe extern "C" fn dev_buft(d: sys::ggml_backend_dev_t) -> sys::ggml_backend_buffer_type_t {
    if d == &raw mut DEV_A {
        &raw mut BUFT_A
    } else {
        // SAFETY: static buffer type.
        unsafe { ggml_backend_cpu_buffer_type() }
    }
}
pub unsafe extern "C" fn dev_supports_op(
    _: sys::ggml_backend_dev_t,
    _: *const ggml_tensor,
) -> bool {
    true
}
/// Each device computes in its own buffer type only, so what one backend reads from the
/// other's memory is copied by the scheduler.
pub unsafe extern "C" fn dev_supports_buft(
    d: sys::ggml_backend_dev_t,
    buft: sys::ggml_backend_buffer_type_t,
) -> bool {
    // SAFETY: the device's own callback.
    buft == unsafe { dev_buft(d) }
}

/// TESTA asks for every op it is asked about when [`OFFLOAD_A`] is set (the scheduler asks
/// only with `op_offload`).
pub unsafe extern "C" fn dev_offload_op(d: sys::ggml_backend_dev_t, _: *const ggml_tensor) -> bool {
    d == &raw mut DEV_A && OFFLOAD_A.load(Ordering::SeqCst)
}

/// One F32 ADD of a graph: destination, the two sources, elements.
pub struct Add {
    pub dst: *mut f32,
    pub a: *const f32,
    pub b: *const f32,
    pub n: usize,
}

/// The ADD nodes of `g` in order, for test backends that compute only ADDs of same-shape,
/// contiguous F32 host tensors; `None` when a node other than a view (op NONE, VIEW, RESHAPE,
/// PERMUTE, TRANSPOSE: nothing to compute) is not an ADD (such a backend's compute fails then).
///
/// # Safety
/// `g` must be a live graph whose ADD nodes and sources are allocated F32 host tensors.
pub unsafe fn adds(g: *mut sys::ggml_cgraph) -> Option<Vec<Add>> {
    // SAFETY: the caller's contract.
    let g = unsafe { &*g };
    let mut out = Vec::new();
    for i in 0..g.n_nodes.max(0) as usize {
        // SAFETY: `i` < `n_nodes`; the nodes and their sources are live (the contract).
        let n = unsafe { &**g.nodes.add(i) };
        if matches!(
            n.op,
            sys::GGML_OP_NONE
                | sys::GGML_OP_VIEW
                | sys::GGML_OP_RESHAPE
                | sys::GGML_OP_PERMUTE
                | sys::GGML_OP_TRANSPOSE
        ) {
            continue;
        }
        if n.op != sys::GGML_OP_ADD {
            return None;
        }
        // SAFETY: as above.
        let (a, b) = unsafe { ((*n.src[0]).data, (*n.src[1]).data) };
        out.push(Add {
            dst: n.data.cast(),
            a: a.cast(),
            b: b.cast(),
            // SAFETY: a live tensor.
            n: unsafe { sys::ggml_nelements(n) } as usize,
        });
    }
    Some(out)
}

/// Computes `add` now.
///
/// # Safety
/// `add`'s pointers must address `n` floats each, the destination writable.
pub unsafe fn run_add(add: &Add) {
    for k in 0..add.n {
        // SAFETY: the caller's contract.
        unsafe { *add.dst.add(k) = *add.a.add(k) + *add.b.add(k) };
    }
}

pub const fn device_iface() -> sys::ggml_backend_device_i {
    sys::ggml_backend_device_i {
        get_name: Some(dev_name),
        get_description: Some(dev_name),
        get_memory: Some(dev_memory),
        get_type: Some(dev_type),
        get_props: Some(dev_props),
        init_backend: None,
        get_buffer_type: Some(dev_buft),
        get_host_buffer_type: None,
        buffer_from_host_ptr: None,
        supports_op: Some(dev_supports_op),
        supports_buft: Some(dev_supports_buft),
        offload_op: Some(dev_offload_op),
        event_new: None,
        event_free: None,
        event_synchronize: None,
    }
}

pub static mut DEV_A: sys::ggml_backend_device = sys::ggml_backend_device {
    iface: device_iface(),
    reg: null_mut(),
    context: null_mut(),
};
pub static mut DEV_CPU: sys::ggml_backend_device = sys::ggml_backend_device {
    iface: device_iface(),
    reg: null_mut(),
    context: null_mut(),
};
