//! The `GGML_SCHED_*` environment variables, read with the rule of the `envvar` crate (shared
//! with libggml-hrx): a value we do not understand is named in a warning (through ggml's
//! logger) and the safe default is kept.
//! Above all, only a documented "off" value switches a safety rule off: a typo such as
//! `GGML_SCHED_INPLACE_RULE=on` must never disable the in-place storage rule.
//!
//! Stock reads its variables with C's `atoi`, so garbage reads as 0 there. Where 0 is the
//! safe value (the debug levels) the result is the same as stock's, with a warning added.

/// The most pipeline copies `GGML_SCHED_MAX_COPIES` may ask for: each copy duplicates every
/// split input and its events, so a count in the millions ends in an out-of-memory abort.
pub const MAX_COPIES: usize = 64;

/// [`envvar::read`] with ggml-base's logger: the warning goes through ggml's logger as
/// `ggml_backend_sched: NAME='VALUE' what is wrong; using DEFAULT`.
pub fn read<T>(
    name: &str,
    default: T,
    shown: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> T {
    envvar::read(name, default, shown, parse, |m| {
        crate::ffi::log::warn(&format!("ggml_backend_sched: {m}\n"))
    })
}

/// A safety rule's switch (default on): off only for `0`, `off`, `no`, `false`; any other
/// value but the "on" ones is named in a warning and the rule stays on.
pub fn safety_rule(name: &str) -> bool {
    read(name, true, "1 (the rule stays on)", envvar::switch)
}

/// A debug level (default 0, as stock's `atoi` of an unset variable): a whole number from 0
/// to `i32::MAX`; anything else is named in a warning and reads 0.
pub fn debug_level(name: &str) -> i32 {
    read(name, 0, "0", |t| {
        envvar::count(t, 0..=i32::MAX as usize).map(|n| n as i32)
    })
}
