//! Small helpers over ggml tensors and contexts for the layer's tests (`tests/layer.rs`,
//! `tests/layer_dispatch.rs`, `tests/plan_reuse.rs`, each includes this file; not every one
//! uses every helper).
#![allow(dead_code)]

use std::ffi::CStr;
use std::os::raw::c_char;
use std::ptr::null_mut;

use ggml_base::tensor::{ggml_backend_tensor_get, ggml_backend_tensor_set};
use ggml_sys as sys;
use ggml_sys::ggml_tensor;

/// A C string the layer or ggml returned, as a `String`; panics on NULL.
pub fn cstr(p: *const c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: NUL-terminated strings owned by the library, a buffer type or a backend.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A ggml context for the metadata of `n` tensors and a graph (no_alloc); the caller frees it.
pub fn ctx_of(n: usize) -> *mut sys::ggml_context {
    // SAFETY: plain context creation.
    let ctx = unsafe {
        sys::ggml_init(sys::ggml_init_params {
            mem_size: n * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead(),
            mem_buffer: null_mut(),
            no_alloc: true,
        })
    };
    assert!(!ctx.is_null());
    ctx
}

/// Every float of an allocated F32 tensor, read through the layer.
pub fn f32s(t: *const ggml_tensor) -> Vec<f32> {
    // SAFETY: live, allocated tensor.
    unsafe {
        let n = sys::ggml_nbytes(t);
        let mut v = vec![0f32; n / 4];
        ggml_backend_tensor_get(t, v.as_mut_ptr().cast(), 0, n);
        v
    }
}

/// Writes `v` at the start of an allocated F32 tensor through the layer.
pub fn set_f32s(t: *mut ggml_tensor, v: &[f32]) {
    // SAFETY: live, allocated tensor of at least v.len() floats.
    unsafe { ggml_backend_tensor_set(t, v.as_ptr().cast(), 0, std::mem::size_of_val(v)) }
}
