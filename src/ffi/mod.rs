//! The C boundary: every exported function of the library is written through [`export!`],
//! which runs its body through [`boundary`] (the interface callbacks that the library hands to
//! ggml, such as the CPU buffer's, call [`boundary`] themselves), so no Rust panic ever unwinds
//! into C, and messages reach ggml's logger.
//!
//! Choice (matches stock): where stock ggml aborts (`GGML_ABORT`, `GGML_ASSERT`), we abort
//! too, after logging the message; a panic inside our code is treated the same way, since the
//! caller's state can no longer be trusted. Functions that stock lets fail softly return
//! stock's "failed" value instead (NULL, `false`, `GGML_STATUS_*`) and say so in their doc
//! comment. ggml-base's soft-failure integer (a size or a count) is 0, as stock's is, while
//! `enum ggml_status` keeps its own negative codes.

pub mod log;

use std::ffi::CString;

/// Defines one exported C function from a Rust function written inside it:
///
/// ```ignore
/// export! {
///     /// Docs, including `# Safety`, as on any item.
///     pub unsafe fn ggml_backend_name(backend: ggml_backend_t) -> *const c_char {
///         /* body: `F` is "ggml_backend_name" */
///     }
/// }
/// ```
///
/// The macro makes it `#[no_mangle] pub unsafe extern "C"`, runs the body through
/// [`boundary`], and binds the C name, taken from the function itself, to a constant `F: &str`
/// visible in the body: the name the body gives [`non_null`], [`fatal`],
/// [`crate::iface::required`] and [`crate::ggml_assert!`], so that their messages name the
/// exported function and no export spells its own name (an internal function that raises
/// messages for an export names it with [`c_name!`]). The body is the closure's, so a `return`
/// in it returns from the exported function.
///
/// The body is not an unsafe context: the workspace denies `unsafe_op_in_unsafe_fn`, and a
/// closure inside an `unsafe fn` is no more unsafe than the function's own body. So each unsafe
/// operation in a body is an `unsafe {}` block of its own, with a `// SAFETY:` comment directly
/// above it that names what the function's `# Safety` contract (or a check in the body)
/// guarantees. The body's tokens keep their source spans through the macro, so clippy's
/// `undocumented_unsafe_blocks` checks those comments as anywhere else; the macro adds no
/// unsafe block of its own.
macro_rules! export {
    (
        $(#[$attr:meta])*
        pub unsafe fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block
    ) => {
        $(#[$attr])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            // Not every body raises a message; those that do not leave `F` unused.
            #[allow(dead_code)]
            const F: &str = stringify!($name);
            $crate::ffi::boundary(F, || $body)
        }
    };
}
pub(crate) use export;

/// The C name of an exported function, for an internal function's messages: `c_name!(f)` for
/// one of this module, `c_name!(module::f)` for one of another module of the crate. Expands to
/// `stringify!(f)` after a `use` of the function, so a name that is not (or no longer) an item
/// of the crate fails to build instead of leaving a stale message.
macro_rules! c_name {
    ($f:ident) => {{
        #[allow(unused_imports)]
        use self::$f as _;
        stringify!($f)
    }};
    ($m:ident :: $f:ident) => {{
        #[allow(unused_imports)]
        use $crate::$m::$f as _;
        stringify!($f)
    }};
}
pub(crate) use c_name;

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
    // SAFETY: forwards the contract of `non_null`: `p` is NULL or a live `T` for `'a`, and
    // `as_ref` handles NULL.
    match unsafe { p.as_ref() } {
        Some(r) => r,
        None => null_argument(func, arg),
    }
}

/// Aborts naming the function and the argument when `p` is NULL; for pointers that the
/// library passes on without reading them itself (to a backend's callback, say), where stock
/// passes NULL on and the callee crashes.
#[inline]
#[track_caller]
pub fn require_non_null<T>(p: *const T, func: &str, arg: &str) {
    if p.is_null() {
        null_argument(func, arg)
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

/// The C handle of an ABI object that the library holds as a checked reference, to hand back
/// to the object's own callbacks (the internal functions behind the exports take references;
/// ggml's callbacks take mutable pointers). Sound because the callbacks reached this way
/// (`supports_op`, `get_alignment`, `set_tensor` ...) read the struct's `iface` and `context`
/// and change only what `context` points to, never the struct itself; a callback that frees the
/// struct (`free`, `free_buffer`) is called with the caller's own pointer instead.
#[inline(always)]
pub fn handle<T>(r: &T) -> *mut T {
    std::ptr::from_ref(r).cast_mut()
}

/// Mutable form of [`non_null`].
///
/// # Safety
/// `p` must be NULL or point to a live `T` not otherwise borrowed for the returned borrow.
#[inline]
pub unsafe fn non_null_mut<'a, T>(p: *mut T, func: &str, arg: &str) -> &'a mut T {
    // SAFETY: forwards the contract of `non_null_mut`: `p` is NULL or a live `T` not otherwise
    // borrowed for `'a`, and `as_mut` handles NULL.
    match unsafe { p.as_mut() } {
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
