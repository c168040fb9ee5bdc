//! The C boundary: every `extern "C"` function of the library runs its body through
//! [`boundary`], so no Rust panic ever unwinds into C, and messages reach ggml's logger.
//!
//! Choice (matches stock): where stock ggml aborts (`GGML_ABORT`, `GGML_ASSERT`), we abort
//! too, after logging the message; a panic inside our code is treated the same way, since the
//! caller's state can no longer be trusted. Functions that stock lets fail softly return their
//! [`FailValue`] instead and say so in their doc comment.

pub mod log;

use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The value an exported function returns when it fails without aborting:
/// NULL for pointers, `false`, `0`, [`ggml_sys::GGML_STATUS_FAILED`].
pub trait FailValue {
    /// The "failed" value of this return type.
    fn fail_value() -> Self;
}

impl FailValue for () {
    fn fail_value() -> Self {}
}
impl FailValue for bool {
    fn fail_value() -> Self {
        false
    }
}
impl FailValue for usize {
    fn fail_value() -> Self {
        0
    }
}
impl FailValue for i32 {
    fn fail_value() -> Self {
        0
    }
}
impl FailValue for i64 {
    fn fail_value() -> Self {
        0
    }
}
impl FailValue for u32 {
    fn fail_value() -> Self {
        0
    }
}
impl<T> FailValue for *mut T {
    fn fail_value() -> Self {
        std::ptr::null_mut()
    }
}
impl<T> FailValue for *const T {
    fn fail_value() -> Self {
        std::ptr::null()
    }
}

/// Runs `body` for the exported function `name`. A panic is reported through [`fatal`]
/// with the function's name and the panic message, then the process aborts (as stock's
/// `GGML_ABORT` would). Never unwinds.
pub fn boundary<R>(name: &'static str, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            fatal(name, &msg)
        }
    }
}

/// Aborts the process with `"{name}: {msg}"`, through the exported `ggml_abort` that stock's
/// `GGML_ABORT` uses: the message goes to the abort callback set with
/// `ggml_set_abort_callback` if there is one, otherwise to stderr with a backtrace, then
/// `abort()`. Written straight to stderr rather than through the log callback, because
/// llama.cpp's logger queues messages on a worker thread that an abort would never flush.
#[track_caller]
pub fn fatal(name: &str, msg: &str) -> ! {
    let caller = std::panic::Location::caller();
    let file = CString::new(caller.file()).unwrap_or_default();
    let text = CString::new(format!("{name}: {msg}").replace('\0', " ")).unwrap_or_default();
    let line = i32::try_from(caller.line()).unwrap_or(0);
    // SAFETY: all three strings are valid NUL-terminated C strings that outlive the call, and
    // the format "%s" consumes exactly the one vararg passed. ggml_abort never returns.
    unsafe { ggml_sys::ggml_abort(file.as_ptr(), line, c"%s".as_ptr(), text.as_ptr()) };
    // ggml_abort ends in abort(); this is never reached but keeps the `!` type honest.
    std::process::abort()
}

/// Aborts with a message naming `name` unless `cond` holds; stock's `GGML_ASSERT`.
#[macro_export]
macro_rules! ggml_assert {
    ($name:expr, $cond:expr) => {
        if !$cond {
            $crate::ffi::fatal($name, concat!("GGML_ASSERT(", stringify!($cond), ") failed"));
        }
    };
    ($name:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            $crate::ffi::fatal($name, &format!($($fmt)+));
        }
    };
}

/// Returns `p` as a shared reference, or aborts naming the function and the argument when it
/// is NULL. For pointers that stock dereferences unconditionally (so NULL would crash there).
///
/// # Safety
/// `p` must be NULL or point to a live `T` for the duration of the returned borrow.
pub unsafe fn non_null<'a, T>(p: *const T, func: &str, arg: &str) -> &'a T {
    match p.as_ref() {
        Some(r) => r,
        None => fatal(func, &format!("argument `{arg}` is NULL")),
    }
}

/// Mutable form of [`non_null`].
///
/// # Safety
/// `p` must be NULL or point to a live `T` not otherwise borrowed for the returned borrow.
pub unsafe fn non_null_mut<'a, T>(p: *mut T, func: &str, arg: &str) -> &'a mut T {
    match p.as_mut() {
        Some(r) => r,
        None => fatal(func, &format!("argument `{arg}` is NULL")),
    }
}
