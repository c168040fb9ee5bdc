//! The few libggml-base and libggml-cpu functions HRX calls, resolved at run time with
//! `dlsym(RTLD_DEFAULT, ...)` from the process's global scope (where the executable's
//! libggml-base and libggml-cpu already are). The cdylib therefore has no link-time
//! dependency on either library and works under the stock libggml-base or ours.
//! Each table is resolved once; a missing symbol makes the table absent (`None`).

use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

use ggml_sys::{
    ggml_backend_buffer_i, ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_reg_t,
    ggml_backend_t, ggml_log_callback, ggml_tensor, ggml_type,
};

/// Functions from libggml-base.
pub struct Base {
    /// `ggml_log_get`
    pub log_get: unsafe extern "C" fn(*mut ggml_log_callback, *mut *mut c_void),
    /// `ggml_backend_buffer_init`
    pub buffer_init: unsafe extern "C" fn(
        ggml_backend_buffer_type_t,
        ggml_backend_buffer_i,
        *mut c_void,
        usize,
    ) -> ggml_backend_buffer_t,
    /// `ggml_nbytes`
    pub nbytes: unsafe extern "C" fn(*const ggml_tensor) -> usize,
    /// `ggml_op_desc`
    pub op_desc: unsafe extern "C" fn(*const ggml_tensor) -> *const c_char,
    /// `ggml_type_name`
    pub type_name: unsafe extern "C" fn(ggml_type) -> *const c_char,
}

/// Functions from libggml-cpu, used by the simulated runtime to run claimed nodes.
pub struct Cpu {
    /// `ggml_backend_cpu_init`
    pub init: unsafe extern "C" fn() -> ggml_backend_t,
    /// `ggml_backend_cpu_set_n_threads`
    pub set_n_threads: unsafe extern "C" fn(ggml_backend_t, i32),
    /// `ggml_backend_cpu_reg`
    pub reg: unsafe extern "C" fn() -> ggml_backend_reg_t,
}

fn sym(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no other precondition.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

macro_rules! resolve {
    ($name:literal, $ty:ty) => {{
        let p = sym($name);
        if p.is_null() {
            return None;
        }
        // SAFETY: the symbol is the upstream function of that name and `$ty` is its C
        // signature (checked against ggml.h / ggml-cpu.h by review).
        unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
    }};
}

type LogGetFn = unsafe extern "C" fn(*mut ggml_log_callback, *mut *mut c_void);
type BufferInitFn = unsafe extern "C" fn(
    ggml_backend_buffer_type_t,
    ggml_backend_buffer_i,
    *mut c_void,
    usize,
) -> ggml_backend_buffer_t;
type NbytesFn = unsafe extern "C" fn(*const ggml_tensor) -> usize;
type OpDescFn = unsafe extern "C" fn(*const ggml_tensor) -> *const c_char;
type TypeNameFn = unsafe extern "C" fn(ggml_type) -> *const c_char;
type CpuInitFn = unsafe extern "C" fn() -> ggml_backend_t;
type SetThreadsFn = unsafe extern "C" fn(ggml_backend_t, i32);
type CpuRegFn = unsafe extern "C" fn() -> ggml_backend_reg_t;

/// The libggml-base table, or `None` when libggml-base is not in the process.
pub fn base() -> Option<&'static Base> {
    static BASE: OnceLock<Option<Base>> = OnceLock::new();
    BASE.get_or_init(|| {
        Some(Base {
            log_get: resolve!(c"ggml_log_get", LogGetFn),
            buffer_init: resolve!(c"ggml_backend_buffer_init", BufferInitFn),
            nbytes: resolve!(c"ggml_nbytes", NbytesFn),
            op_desc: resolve!(c"ggml_op_desc", OpDescFn),
            type_name: resolve!(c"ggml_type_name", TypeNameFn),
        })
    })
    .as_ref()
}

/// The libggml-cpu table, or `None` when libggml-cpu is not in the process.
pub fn cpu() -> Option<&'static Cpu> {
    static CPU: OnceLock<Option<Cpu>> = OnceLock::new();
    CPU.get_or_init(|| {
        Some(Cpu {
            init: resolve!(c"ggml_backend_cpu_init", CpuInitFn),
            set_n_threads: resolve!(c"ggml_backend_cpu_set_n_threads", SetThreadsFn),
            reg: resolve!(c"ggml_backend_cpu_reg", CpuRegFn),
        })
    })
    .as_ref()
}

/// The libggml-base table; panics (caught at the boundary) when absent.
pub fn need_base() -> &'static Base {
    base().expect("libggml-base is not loaded in this process")
}

/// `ggml_nbytes(t)`.
///
/// # Safety
/// `t` points to a live tensor.
pub unsafe fn nbytes(t: *const ggml_tensor) -> usize {
    // SAFETY: forwarded.
    unsafe { (need_base().nbytes)(t) }
}

/// A one-line description of a tensor for messages: name, op, type and shape.
///
/// # Safety
/// `t` points to a live tensor.
pub unsafe fn describe(t: *const ggml_tensor) -> String {
    // SAFETY: forwarded; name is a NUL-terminated array inside the tensor.
    let tr = unsafe { &*t };
    let name = unsafe { CStr::from_ptr(tr.name.as_ptr()) }.to_string_lossy();
    let (op, ty) = match base() {
        // SAFETY: both return static strings.
        Some(b) => unsafe {
            (
                CStr::from_ptr((b.op_desc)(t))
                    .to_string_lossy()
                    .into_owned(),
                CStr::from_ptr((b.type_name)(tr.type_))
                    .to_string_lossy()
                    .into_owned(),
            )
        },
        None => (
            crate::claims::op_name(tr.op).to_string(),
            format!("type {}", tr.type_),
        ),
    };
    format!(
        "'{}' (op {}, {} [{}, {}, {}, {}])",
        name, op, ty, tr.ne[0], tr.ne[1], tr.ne[2], tr.ne[3]
    )
}

/// The tensor's name as a Rust string.
pub fn tensor_name(t: &ggml_tensor) -> String {
    // SAFETY: `name` is a NUL-terminated fixed array inside the tensor.
    unsafe { CStr::from_ptr(t.name.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}
