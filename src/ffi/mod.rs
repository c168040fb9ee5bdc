//! The C boundary: every `extern "C"` function of the library runs its body through
//! [`boundary`], so no Rust panic ever unwinds into C, and messages reach ggml's logger.
//!
//! Choice (matches stock): where stock ggml aborts (`GGML_ABORT`, `GGML_ASSERT`), we abort
//! too, after logging the message; a panic inside our code is treated the same way, since the
//! caller's state can no longer be trusted. Functions that stock lets fail softly return their
//! [`FailValue`] instead and say so in their doc comment.

pub mod log;

use std::ffi::CString;

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

/// Installs [`on_panic`] when the library is loaded, before any exported function runs: a
/// constructor in `.init_array`, so that [`boundary`] itself costs nothing.
/// Not in the crate's own unit tests, whose failing assertions are panics raised in `src/`.
/// ELF only (`.init_array`); elsewhere a panic still aborts at the `extern "C"` frame,
/// through Rust's own message rather than `ggml_abort`.
#[cfg(all(not(test), target_os = "linux"))]
#[used]
#[link_section = ".init_array"]
static INSTALL_PANIC_HOOK: extern "C" fn() = {
    extern "C" fn install() {
        install_hook();
    }
    install
};

/// Runs `body` for the exported function `name` (kept for the call sites' documentation and
/// for [`fatal`] messages they raise themselves). A panic inside reaches [`on_panic`], which
/// reports it through [`fatal`] with the panic message and the place it was raised, then
/// aborts (as stock's `GGML_ABORT` would); it never unwinds into C.
///
/// Why a hook and not a `catch_unwind` per call: gallocr calls the layer once per tensor,
/// several times over, and a `catch_unwind` frame per call cost 11 % of a scheduling cycle
/// (callgrind, `docs/bench.md`); a thread-local "current function" cost more still (a
/// `__tls_get_addr` call per access in a shared library). The hook, installed at load time,
/// costs nothing until a panic. Should a panic ever get past it, the language aborts it at the `extern "C"` frame.
#[inline(always)]
pub fn boundary<R>(_name: &'static str, body: impl FnOnce() -> R) -> R {
    body()
}

/// Whether a panic raised at `file` comes from this library's own code: cargo names the
/// files of the root package relative to it (`src/...`), while tests (`tests/...`), other
/// workspace crates (`crates/...`) and std (`/rustc/...`) differ. A build that remaps
/// source paths changes this; its panics still abort, through Rust's own message at the
/// `extern "C"` frame instead of `ggml_abort`.
#[cfg_attr(any(test, not(target_os = "linux")), allow(dead_code))]
fn raised_by_library(file: &str) -> bool {
    file.starts_with("src/")
}

#[cfg_attr(any(test, not(target_os = "linux")), allow(dead_code))]
fn install_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // Panics of a Rust caller of the rlib (a test, say) keep the usual handling: they
        // may be caught.
        match info.location() {
            Some(l) if raised_by_library(l.file()) => on_panic(info),
            _ => previous(info),
        }
    }));
}

/// A panic in the library's code: abort through [`fatal`] with the message and the place.
#[cfg_attr(any(test, not(target_os = "linux")), allow(dead_code))]
fn on_panic(info: &std::panic::PanicHookInfo<'_>) -> ! {
    let payload = info.payload();
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    let at = info
        .location()
        .map(|l| format!("{}:{}", l.file(), l.line()))
        .unwrap_or_default();
    fatal("ggml-base (Rust)", &format!("panic at {at}: {msg}"))
}

/// Aborts the process with `"{name}: {msg}"`, through the exported `ggml_abort` that stock's
/// `GGML_ABORT` uses: the message goes to the abort callback set with
/// `ggml_set_abort_callback` if there is one, otherwise to stderr with a backtrace, then
/// `abort()`. Written straight to stderr rather than through the log callback, because
/// llama.cpp's logger queues messages on a worker thread that an abort would never flush.
#[cold]
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
#[inline]
pub unsafe fn non_null<'a, T>(p: *const T, func: &str, arg: &str) -> &'a T {
    match p.as_ref() {
        Some(r) => r,
        None => null_argument(func, arg),
    }
}

/// The abort of [`non_null`]: out of line, so that the checks stay small in the hot
/// functions that make them (a formatting path inlined into each one cost them a large
/// stack frame on every call).
#[cold]
#[inline(never)]
#[track_caller]
fn null_argument(func: &str, arg: &str) -> ! {
    fatal(func, &format!("argument `{arg}` is NULL"))
}

/// Mutable form of [`non_null`].
///
/// # Safety
/// `p` must be NULL or point to a live `T` not otherwise borrowed for the returned borrow.
#[inline]
pub unsafe fn non_null_mut<'a, T>(p: *mut T, func: &str, arg: &str) -> &'a mut T {
    match p.as_mut() {
        Some(r) => r,
        None => null_argument(func, arg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_panics_are_told_from_callers() {
        // This very file, as cargo names it for the root package.
        assert!(raised_by_library(std::panic::Location::caller().file()));
        assert!(raised_by_library("src/sched/table.rs"));
        assert!(!raised_by_library("tests/layer.rs"));
        assert!(!raised_by_library("crates/hrx/src/ffi.rs"));
        assert!(!raised_by_library("/rustc/abc/library/core/src/option.rs"));
    }
}
