//! The few libggml-base functions the ggml-facing layer calls, resolved at run time with
//! `dlsym(RTLD_DEFAULT, ...)` (see [`crate::runtime::dl`]) from the process's global scope
//! (where the executable's libggml-base already is). The cdylib therefore has no link-time
//! dependency on it and works under the stock libggml-base or ours. The table is resolved
//! once; a missing symbol makes it absent (`None`). (libggml-cpu is the simulator's
//! business: [`crate::runtime::sim::cpu`].)
//!
//! Unit tests run without libggml-base: there the table is a stand-in (`fake`, test builds
//! only) so the layer's code paths can run against a mock runtime.

use std::ffi::{c_char, c_void, CStr};
#[cfg(not(test))]
use std::sync::OnceLock;

use ggml_sys::{
    ggml_backend_buffer_i, ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_log_callback,
    ggml_tensor, ggml_type,
};

use crate::ops::op_name;

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

/// The libggml-base table, or `None` when libggml-base is not in the process.
#[cfg(not(test))]
pub fn base() -> Option<&'static Base> {
    use crate::runtime::dl::symbol;
    static BASE: OnceLock<Option<Base>> = OnceLock::new();
    BASE.get_or_init(|| {
        // SAFETY: each field's type is the C signature of that function in ggml.h /
        // ggml-backend-impl.h (checked by review against the pinned headers).
        unsafe {
            Some(Base {
                log_get: symbol(c"ggml_log_get")?,
                buffer_init: symbol(c"ggml_backend_buffer_init")?,
                nbytes: symbol(c"ggml_nbytes")?,
                op_desc: symbol(c"ggml_op_desc")?,
                type_name: symbol(c"ggml_type_name")?,
            })
        }
    })
    .as_ref()
}

/// Unit tests: the stand-in table.
#[cfg(test)]
pub fn base() -> Option<&'static Base> {
    Some(fake::base())
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
    // SAFETY: forwards the contract of `nbytes`: `t` points to a live tensor, all that
    // `ggml_nbytes` reads.
    unsafe { (need_base().nbytes)(t) }
}

/// A one-line description of a tensor for messages: name, op, type and shape.
///
/// # Safety
/// `t` points to a live tensor.
pub unsafe fn describe(t: *const ggml_tensor) -> String {
    // SAFETY: forwards the contract of `describe`: `t` points to a live tensor.
    let tr = unsafe { &*t };
    // SAFETY: `name` is a NUL-terminated array inside the live tensor.
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
        None => (op_name(tr.op).to_string(), format!("type {}", tr.type_)),
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

/// `ggml_backend_buft_is_host` without calling libggml-base.
///
/// # Safety
/// `buft` is NULL or a live buffer type.
pub unsafe fn buft_is_host(buft: ggml_backend_buffer_type_t) -> bool {
    // SAFETY: `buft` is not NULL (checked first), so live by the contract of `buft_is_host`;
    // its `is_host` callback takes the buffer type itself.
    !buft.is_null() && unsafe { (*buft).iface.is_host.is_some_and(|f| f(buft)) }
}

/// The name a buffer type gives itself (its `get_name`), or `?` when it has none.
///
/// # Safety
/// `buft` is a live buffer type.
pub unsafe fn buft_name(buft: ggml_backend_buffer_type_t) -> String {
    // SAFETY: a live buffer type; its get_name returns NULL or a NUL-terminated string that
    // lives as long as the type.
    unsafe {
        match (*buft).iface.get_name.map(|f| f(buft)) {
            Some(p) if !p.is_null() => std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned(),
            _ => "?".to_string(),
        }
    }
}

/// The stand-in libggml-base of unit tests.
#[cfg(test)]
pub(crate) mod fake {
    use std::ffi::{c_char, c_void, CString};
    use std::sync::OnceLock;

    use ggml_sys::*;

    use super::Base;
    use crate::ops::OP_NAMES;

    /// The stand-in libggml-base table.
    pub fn base() -> &'static Base {
        static BASE: Base = Base {
            log_get: fake_log_get,
            buffer_init: fake_buffer_init,
            nbytes: fake_nbytes,
            op_desc: fake_op_desc,
            type_name: fake_type_name,
        };
        &BASE
    }

    std::thread_local! {
        /// The messages logged on this thread while a test captures them
        /// ([`crate::testing::capture_log`]); `None`: not capturing.
        pub static CAPTURED: std::cell::RefCell<Option<Vec<String>>> =
            const { std::cell::RefCell::new(None) };
    }

    /// The callback installed while the calling thread captures messages; else none, and
    /// messages go to stderr (where the test harness captures them).
    unsafe extern "C" fn fake_log_get(cb: *mut ggml_log_callback, ud: *mut *mut c_void) {
        let capturing = CAPTURED.with(|c| c.borrow().is_some());
        // SAFETY: the caller passes two writable out-parameters.
        unsafe {
            *cb = if capturing { Some(capture) } else { None };
            *ud = std::ptr::null_mut();
        }
    }

    unsafe extern "C" fn capture(_level: ggml_log_level, text: *const c_char, _: *mut c_void) {
        // SAFETY: the logger passes a NUL-terminated string.
        let t = unsafe { std::ffi::CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned();
        CAPTURED.with(|c| {
            if let Some(v) = c.borrow_mut().as_mut() {
                v.push(t);
            }
        });
    }

    /// As ggml does: a heap `ggml_backend_buffer` holding the interface, type and context.
    /// Tests free it with `testing::free_buffer`.
    unsafe extern "C" fn fake_buffer_init(
        buft: ggml_backend_buffer_type_t,
        iface: ggml_backend_buffer_i,
        context: *mut c_void,
        size: usize,
    ) -> ggml_backend_buffer_t {
        Box::into_raw(Box::new(ggml_backend_buffer {
            iface,
            buft,
            context,
            size,
            usage: GGML_BACKEND_BUFFER_USAGE_ANY,
        }))
    }

    /// Bytes a tensor spans, for the element types the tests use (one element per block):
    /// the last element's offset plus its size, from `ne` and the strides `nb`.
    unsafe extern "C" fn fake_nbytes(t: *const ggml_tensor) -> usize {
        // SAFETY: the layer passes live tensors.
        let t = unsafe { &*t };
        let elem = elem_size(t.type_);
        if t.ne.iter().any(|&n| n <= 0) {
            return 0;
        }
        (0..4).fold(elem, |acc, i| acc + (t.ne[i] as usize - 1) * t.nb[i])
    }

    fn elem_size(ty: ggml_type) -> usize {
        match ty {
            GGML_TYPE_F32 | GGML_TYPE_I32 => 4,
            GGML_TYPE_F16 | GGML_TYPE_BF16 | GGML_TYPE_I16 => 2,
            GGML_TYPE_I8 => 1,
            GGML_TYPE_I64 | GGML_TYPE_F64 => 8,
            _ => panic!("the test stand-in of ggml_nbytes has no size for type {ty}"),
        }
    }

    unsafe extern "C" fn fake_op_desc(t: *const ggml_tensor) -> *const c_char {
        static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
        let names =
            NAMES.get_or_init(|| OP_NAMES.iter().map(|n| CString::new(*n).unwrap()).collect());
        // SAFETY: the layer passes live tensors.
        let op = unsafe { (*t).op } as usize;
        names.get(op).map_or(c"?".as_ptr(), |n| n.as_ptr())
    }

    unsafe extern "C" fn fake_type_name(ty: ggml_type) -> *const c_char {
        match ty {
            GGML_TYPE_F32 => c"f32".as_ptr(),
            GGML_TYPE_F16 => c"f16".as_ptr(),
            GGML_TYPE_I32 => c"i32".as_ptr(),
            _ => c"other".as_ptr(),
        }
    }
}
