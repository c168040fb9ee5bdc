//! Messages to the user through ggml's logger: `ggml_log_get` (exported by libggml-base)
//! gives the installed callback, which llama.cpp's own logging replaces. Without
//! libggml-base in the process, or with no callback installed, messages go to stderr.

use std::ffi::CString;

use ggml_sys::{
    ggml_log_level, GGML_LOG_LEVEL_DEBUG, GGML_LOG_LEVEL_ERROR, GGML_LOG_LEVEL_INFO,
    GGML_LOG_LEVEL_WARN,
};

use crate::ggml;

/// Logs `text` at `level` (a `ggml_log_level`). `text` should end with a newline.
pub fn log(level: ggml_log_level, text: &str) {
    let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
    if let Some(api) = ggml::base() {
        let mut cb: ggml_sys::ggml_log_callback = None;
        let mut ud: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: ggml_log_get writes the current callback and user data to the two
        // out-parameters, which point to live locals.
        unsafe { (api.log_get)(&mut cb, &mut ud) };
        if let Some(cb) = cb {
            // SAFETY: the callback takes a level, a NUL-terminated string and its user data.
            unsafe { cb(level, c.as_ptr(), ud) };
            return;
        }
    }
    eprint!("{text}");
}

/// Logs at error level.
pub fn error(text: &str) {
    log(GGML_LOG_LEVEL_ERROR, text)
}

/// Logs at warning level.
pub fn warn(text: &str) {
    log(GGML_LOG_LEVEL_WARN, text)
}

/// Logs at info level.
pub fn info(text: &str) {
    log(GGML_LOG_LEVEL_INFO, text)
}

/// Logs at debug level.
pub fn debug(text: &str) {
    log(GGML_LOG_LEVEL_DEBUG, text)
}
