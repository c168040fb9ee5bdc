//! The panic boundary and the small helpers every `extern "C"` entry point uses.
//!
//! Every exported function and every function pointer handed to ggml runs its body through
//! [`guard`]: a panic is caught before it can unwind into C, logged through ggml's logger
//! with the function name, and then turned into the return type's failed value
//! ([`Failed`]). Functions with no error channel (`()` return: `set_tensor`, `free`, ...)
//! abort the process after logging, as stock ggml aborts on a failed `GGML_ASSERT`: going on
//! after a half-done transfer would hand wrong data to the caller.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::log;

/// The value a C entry point returns when its body panicked.
pub trait Failed {
    /// The failed value; for `()` this logs and aborts instead.
    fn failed() -> Self;
}

impl Failed for () {
    fn failed() -> Self {
        log::error("HRX: aborting: a function without an error result failed\n");
        std::process::abort()
    }
}

impl Failed for bool {
    fn failed() -> Self {
        false
    }
}

impl Failed for usize {
    fn failed() -> Self {
        0
    }
}

/// `enum ggml_status` and plain `int` results: `GGML_STATUS_FAILED` (-1). Entry points whose
/// `int` means something else (`ggml_backend_score`) use [`guard_or`] with their own value.
///
/// Why not 0, as ggml-base's soft failures are: ggml-base's integers are sizes and counts,
/// where 0 is "nothing", while HRX's `int` results are `enum ggml_status` values returned
/// through the backend interface (graph_compute and the like), where 0 is
/// `GGML_STATUS_SUCCESS` and would report a failed compute as a success. (`usize` results
/// fail as 0 in both crates.)
impl Failed for i32 {
    fn failed() -> Self {
        ggml_sys::GGML_STATUS_FAILED
    }
}

impl Failed for u32 {
    fn failed() -> Self {
        u32::MAX
    }
}

impl<T> Failed for *mut T {
    fn failed() -> Self {
        std::ptr::null_mut()
    }
}

impl<T> Failed for *const T {
    fn failed() -> Self {
        std::ptr::null()
    }
}

/// Whether a panic raised at `file` comes from this crate's own code (cargo names a
/// workspace member's files relative to the workspace root). Such a panic is caught by
/// [`guard`], which reports it through ggml's logger.
fn raised_by_hrx(file: &str) -> bool {
    file.starts_with("crates/hrx/src/")
}

/// Installs, once, a panic hook that keeps the panics [`guard`] catches out of stderr: the
/// default hook would print each one (with a backtrace under `RUST_BACKTRACE`) before the
/// guard logs it through ggml's logger, where llama.cpp's log settings apply. Panics raised
/// elsewhere go to the hook that was installed before (the application's, or our
/// libggml-base's, which aborts through `ggml_abort` for its own). Called at load time.
#[cfg_attr(test, allow(dead_code))]
pub fn install_quiet_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| match info.location() {
            Some(l) if raised_by_hrx(l.file()) => {}
            _ => previous(info),
        }));
    });
}

/// Logs `msg` (which ends with a newline), then fails as a function without an error result
/// does ([`Failed`] for `()`: logged, then the process aborts). For a failure that is not a
/// panic of ours, such as queued device work reported failed, where going on would hand the
/// caller wrong data.
pub fn fatal(msg: &str) -> ! {
    log::error(msg);
    <() as Failed>::failed();
    unreachable!("Failed::failed for () aborts")
}

/// Runs `body`, turning a panic into a logged [`Failed::failed`] value. `name` is the C
/// function name used in the message.
pub fn guard<T: Failed>(name: &str, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            report_panic(name, &*payload);
            T::failed()
        }
    }
}

/// Like [`guard`] with an explicit failed value.
pub fn guard_or<T>(name: &str, failed: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            report_panic(name, &*payload);
            failed
        }
    }
}

fn report_panic(name: &str, payload: &(dyn std::any::Any + Send)) {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    log::error(&format!("HRX: {name}: internal error: {msg}\n"));
}

/// Returns `Some(&T)` for a non-NULL pointer.
///
/// # Safety
/// `p` is NULL or points to a live `T` for the returned lifetime.
pub unsafe fn opt_ref<'a, T>(p: *const T) -> Option<&'a T> {
    // SAFETY: the caller guarantees `p` is NULL or valid.
    unsafe { p.as_ref() }
}

/// Returns the reference behind a pointer ggml guarantees non-NULL, panicking (caught by
/// the boundary) with the argument's name when it is NULL.
///
/// # Safety
/// `p` is NULL or points to a live `T` for the returned lifetime.
pub unsafe fn non_null<'a, T>(p: *const T, what: &str) -> &'a T {
    // SAFETY: forwards the contract of `non_null`: `p` is NULL or a live `T` for `'a`.
    match unsafe { opt_ref(p) } {
        Some(r) => r,
        None => panic!("NULL {what}"),
    }
}

/// Reads a NUL-terminated C string into an owned `String` (lossy); NULL gives `None`.
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
pub unsafe fn c_str(p: *const std::os::raw::c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL (checked above) and NUL-terminated by the contract of `c_str`.
    let s = unsafe { std::ffi::CStr::from_ptr(p) };
    Some(s.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_turns_panics_into_failed_values() {
        assert!(!guard("t", || -> bool { panic!("boom") }));
        assert!(guard("t", || -> *mut u8 { panic!("boom") }).is_null());
        assert_eq!(guard("t", || -> i32 { panic!("boom") }), -1);
        assert_eq!(guard_or("t", 7, || -> i32 { panic!("boom") }), 7);
        assert_eq!(guard("t", || 5usize), 5);
    }

    #[test]
    fn own_panics_are_told_from_others() {
        assert!(raised_by_hrx(std::panic::Location::caller().file()));
        assert!(raised_by_hrx("crates/hrx/src/runtime/sim/mod.rs"));
        assert!(!raised_by_hrx("src/sched/table.rs"));
        assert!(!raised_by_hrx("/rustc/abc/library/core/src/option.rs"));
    }
}
