//! Test support (test builds only): builders for the ggml structs the layer's tests hand
//! to it: devices over a [`MockRuntime`], buffers, tensors. (The stand-in for libggml-base
//! is in `ggml`.)

use std::ffi::c_void;

use ggml_sys::*;

use crate::context::Device;
use crate::runtime::mock::MockRuntime;

/// A device over `rt` (a clone of the test's mock), with its ggml structs, leaked like a
/// registered device.
pub fn device(rt: &MockRuntime, arena_limit: usize) -> &'static Device {
    crate::device::create(0, Box::new(rt.clone()), std::ptr::null_mut(), arena_limit)
}

/// Allocates a buffer of `size` bytes through buffer type `buft`'s own interface.
pub fn alloc_buffer(buft: ggml_backend_buffer_type_t, size: usize) -> ggml_backend_buffer_t {
    // SAFETY: `buft` is one of our live buffer types; its alloc_buffer is ours.
    unsafe { ((*buft).iface.alloc_buffer.unwrap())(buft, size) }
}

/// Frees a buffer made by [`alloc_buffer`]: its own `free_buffer`, then the struct the
/// stand-in `buffer_init` allocated.
pub fn free_buffer(b: ggml_backend_buffer_t) {
    // SAFETY: `b` came from `fake_buffer_init` and is freed once.
    unsafe {
        if let Some(f) = (*b).iface.free_buffer {
            f(b);
        }
        drop(Box::from_raw(b));
    }
}

/// The buffer's base address (its `get_base`).
pub fn base(b: ggml_backend_buffer_t) -> usize {
    // SAFETY: a live buffer of ours.
    unsafe { ((*b).iface.get_base.unwrap())(b) as usize }
}

/// A contiguous F32 tensor of `ne` elements (`[ne, 1, 1, 1]`) with op `op`, flagged as a
/// compute node, at `data` in `buffer`.
pub fn f32_tensor(op: ggml_op, ne: i64, buffer: ggml_backend_buffer_t, data: usize) -> ggml_tensor {
    let mut t = ggml_tensor {
        op,
        type_: GGML_TYPE_F32,
        ne: [ne, 1, 1, 1],
        buffer,
        data: data as *mut c_void,
        flags: GGML_TENSOR_FLAG_COMPUTE as i32,
        ..Default::default()
    };
    t.nb = [4, 4 * ne as usize, 4 * ne as usize, 4 * ne as usize];
    t
}

/// A buffer not of HRX (a foreign buffer type, named `TEST_HOST` with `is_host` true or
/// `TEST_DEV` with false), as the CPU backend's buffers look to the layer: only the buffer
/// type's `is_host` and name are asked.
pub fn foreign_buffer(host: bool, usage: ggml_backend_buffer_usage) -> ggml_backend_buffer_t {
    unsafe extern "C" fn yes(_: ggml_backend_buffer_type_t) -> bool {
        true
    }
    unsafe extern "C" fn no(_: ggml_backend_buffer_type_t) -> bool {
        false
    }
    unsafe extern "C" fn host_name(_: ggml_backend_buffer_type_t) -> *const std::ffi::c_char {
        c"TEST_HOST".as_ptr()
    }
    unsafe extern "C" fn dev_name(_: ggml_backend_buffer_type_t) -> *const std::ffi::c_char {
        c"TEST_DEV".as_ptr()
    }
    let buft = Box::leak(Box::new(ggml_backend_buffer_type {
        iface: ggml_backend_buffer_type_i {
            get_name: Some(if host { host_name } else { dev_name }),
            is_host: Some(if host { yes } else { no }),
            ..Default::default()
        },
        device: std::ptr::null_mut(),
        context: std::ptr::null_mut(),
    }));
    Box::leak(Box::new(ggml_backend_buffer {
        buft,
        usage,
        ..Default::default()
    }))
}

/// `t` with its name set to `name` (as `ggml_set_name` does; messages quote it).
pub fn named(mut t: ggml_tensor, name: &str) -> ggml_tensor {
    assert!(name.len() < t.name.len());
    for (d, s) in t.name.iter_mut().zip(name.bytes()) {
        *d = s as std::ffi::c_char;
    }
    t.name[name.len()] = 0;
    t
}

/// A graph over `nodes` with no hash set (as a backend sees a graph built by hand).
pub fn graph(nodes: &mut [*mut ggml_tensor]) -> ggml_cgraph {
    ggml_cgraph {
        size: nodes.len() as i32,
        n_nodes: nodes.len() as i32,
        nodes: nodes.as_mut_ptr(),
        ..Default::default()
    }
}

/// Runs `f`, returning what it returned and the messages it logged on this thread (through
/// the stand-in libggml-base's logger), in order.
pub fn capture_log<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    use crate::ggml::fake::CAPTURED;
    CAPTURED.with(|c| *c.borrow_mut() = Some(Vec::new()));
    let r = f();
    let got = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (r, got)
}
