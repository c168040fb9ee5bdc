//! Messages through ggml's log callback (`ggml_log_get`), so llama.cpp's logging sees them.
//! Stock uses the internal `ggml_log_internal`; the exported route is the same callback.

use std::ffi::CString;

/// The logger in effect (callback and user data), as `ggml_log_get` reports it.
fn current() -> (ggml_sys::ggml_log_callback, *mut std::ffi::c_void) {
    let mut cb: ggml_sys::ggml_log_callback = None;
    let mut ud: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: ggml_log_get writes the current callback and user data into the two out
    // pointers, which are valid locals.
    unsafe { ggml_sys::ggml_log_get(&mut cb, &mut ud) };
    (cb, ud)
}

/// Which logger is in effect, as two addresses (the callback's and its user data's): equal
/// values are the same logger. For messages logged once per logger ([`crate::env::warn_sticky`]).
pub fn logger_id() -> (usize, usize) {
    let (cb, ud) = current();
    (cb.map_or(0, |f| f as usize), ud as usize)
}

fn emit(level: ggml_sys::ggml_log_level, text: &str) {
    let (cb, ud) = current();
    let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
    match cb {
        // SAFETY: the callback was installed by the host for exactly this use; `c` outlives
        // the call.
        Some(f) => unsafe { f(level, c.as_ptr(), ud) },
        None => eprint!("{text}"),
    }
}

/// Logs at error level. `text` should end with a newline, as ggml's messages do.
pub fn error(text: &str) {
    emit(ggml_sys::GGML_LOG_LEVEL_ERROR, text)
}

/// Logs at warning level.
pub fn warn(text: &str) {
    emit(ggml_sys::GGML_LOG_LEVEL_WARN, text)
}

/// Logs at info level.
pub fn info(text: &str) {
    emit(ggml_sys::GGML_LOG_LEVEL_INFO, text)
}

/// Logs at debug level.
pub fn debug(text: &str) {
    emit(ggml_sys::GGML_LOG_LEVEL_DEBUG, text)
}
