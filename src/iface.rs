//! Access to the C interface tables (`ggml_backend_*_i`) that backends fill in.
//!
//! Stock ggml calls a mandatory callback without checking it, so a backend that leaves one
//! NULL crashes there with SIGSEGV. We abort instead, through [`crate::ffi::fatal`], with a
//! message naming the exported function and the missing callback.

/// Returns the callback `f`, or aborts naming `func` (the exported function that needed it)
/// and `what` (the interface field) when the backend left it NULL.
pub fn required<F>(f: Option<F>, func: &str, what: &str) -> F {
    match f {
        Some(f) => f,
        None => crate::ffi::fatal(func, &format!("the backend does not implement `{what}`")),
    }
}
