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

/// Every `GGML_SCHED_*` and `GGML_ALLOC_*` variable this library reads (stock reads the first
/// two; `GGML_SCHED_MAX_COPIES` is a build setting in stock, read at run time here).
pub const KNOWN: &[&str] = &[
    "GGML_SCHED_DEBUG",
    "GGML_SCHED_DEBUG_REALLOC",
    "GGML_SCHED_MAX_COPIES",
    "GGML_SCHED_INPLACE_RULE",
    "GGML_SCHED_DUMP",
    "GGML_SCHED_SANITIZE",
    "GGML_SCHED_TEST_FAULT",
    "GGML_SCHED_INPUT_WAITS",
    "GGML_ALLOC_LAYOUT",
    "GGML_ALLOC_REUSE_DELAY",
];

/// The names among `names` that have one of this library's prefixes (`GGML_SCHED_`,
/// `GGML_ALLOC_`) but are none of [`KNOWN`], each with the known name it is closest to when
/// that is a likely typo (Jaro-Winkler similarity at least 0.9).
pub fn unknown<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Vec<(String, Option<&'static str>)> {
    names
        .into_iter()
        .filter(|n| {
            (n.starts_with("GGML_SCHED_") || n.starts_with("GGML_ALLOC_")) && !KNOWN.contains(n)
        })
        .map(|n| {
            let closest = KNOWN
                .iter()
                .map(|&k| (strsim::jaro_winkler(n, k), k))
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .filter(|&(score, _)| score >= 0.9)
                .map(|(_, k)| k);
            (n.to_string(), closest)
        })
        .collect()
}

/// Warnings about the process's environment that are decided once (a misspelt variable, a
/// refused `GGML_SCHED_DUMP`), each with the logger it was last logged through.
type Sticky = parking_lot::Mutex<Vec<(String, (usize, usize))>>;

fn sticky() -> &'static Sticky {
    static STICKY: std::sync::OnceLock<Sticky> = std::sync::OnceLock::new();
    STICKY.get_or_init(Default::default)
}

/// Logs `text` at warning level now, and again whenever [`resay_sticky`] finds another logger
/// in effect than the last one it went through. A warning decided once per process must still
/// reach its user: llama.cpp's memory fit (`-fit on`, its default) makes its first contexts
/// with a logger that turns warnings into debug lines, and the warning would be spent there.
pub fn warn_sticky(text: &str) {
    let id = crate::ffi::log::logger_id();
    sticky().lock().push((text.to_string(), id));
    crate::ffi::log::warn(text);
}

/// Logs again every [`warn_sticky`] warning last logged through another logger than the one
/// in effect now. Called where a scheduler or allocator is made.
pub fn resay_sticky() {
    let id = crate::ffi::log::logger_id();
    let mut list = sticky().lock();
    for (text, last) in list.iter_mut().filter(|(_, last)| *last != id) {
        *last = id;
        crate::ffi::log::warn(text);
    }
}

/// [`read`] for a variable read once per process: its warning is a [`warn_sticky`] one.
pub fn read_once<T>(
    name: &str,
    default: T,
    shown: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> T {
    envvar::read(name, default, shown, parse, |m| {
        warn_sticky(&format!("ggml_backend_sched: {m}\n"))
    })
}

/// Warns, through ggml's logger, of every variable of the environment that [`unknown`] finds:
/// a misspelt switch such as `GGML_SCHED_INPLACE_RUEL=0` would otherwise do nothing, silently,
/// while its user believes the rule off. The environment is read once per process; each
/// warning is said once per logger ([`warn_sticky`]).
pub fn warn_unknown_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let mut first = false;
    ONCE.call_once(|| {
        first = true;
        let names: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .collect();
        for (name, closest) in unknown(names.iter().map(String::as_str)) {
            let hint = closest.map_or(String::new(), |k| format!(" (did you mean {k}?)"));
            warn_sticky(&format!(
                "ggml_backend_sched: {name} is set but is not a variable this library reads{hint}; \
                 it has no effect\n"
            ));
        }
    });
    if !first {
        resay_sticky();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelt_variables_are_found_with_the_name_they_are_closest_to() {
        let found = unknown([
            "GGML_SCHED_INPLACE_RUEL",
            "GGML_ALLOC_LAYOUTS",
            "GGML_SCHED_INPLACE_RULE",
            "GGML_SCHED_SOMETHING_ELSE_ENTIRELY",
            "GGML_CUDA_GRAPHS",
            "PATH",
        ]);
        assert_eq!(
            found,
            vec![
                (
                    "GGML_SCHED_INPLACE_RUEL".into(),
                    Some("GGML_SCHED_INPLACE_RULE")
                ),
                ("GGML_ALLOC_LAYOUTS".into(), Some("GGML_ALLOC_LAYOUT")),
                ("GGML_SCHED_SOMETHING_ELSE_ENTIRELY".into(), None),
            ]
        );
        assert!(unknown(KNOWN.iter().copied()).is_empty());
    }
}
