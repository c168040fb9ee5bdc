//! The `GGML_SCHED_*` environment variables, read with one rule: a value we do not
//! understand is named in a warning (through ggml's logger) and the safe default is kept.
//! Above all, only a documented "off" value switches a safety rule off: a typo such as
//! `GGML_SCHED_INPLACE_RULE=on` must never disable the in-place storage rule.
//!
//! Stock reads its variables with C's `atoi`, so garbage reads as 0 there. Where 0 is the
//! safe value (the debug levels) the result is the same as stock's, with a warning added.

/// The most pipeline copies `GGML_SCHED_MAX_COPIES` may ask for: each copy duplicates every
/// split input and its events, so a count in the millions ends in an out-of-memory abort.
pub const MAX_COPIES: usize = 64;

/// Why a value was refused, in words that follow the variable's name and value.
pub type Refusal = String;

/// An on/off switch: `1`, `on`, `yes`, `true` or `0`, `off`, `no`, `false` (any case,
/// surrounding blanks allowed). Anything else, the empty string included, is refused.
pub fn parse_switch(text: &str) -> Result<bool, Refusal> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Ok(true),
        "0" | "off" | "no" | "false" => Ok(false),
        _ => Err("is not a switch (1, on, yes, true or 0, off, no, false)".into()),
    }
}

/// A whole number in `lo..=hi` (decimal, surrounding blanks allowed).
pub fn parse_count(text: &str, lo: usize, hi: usize) -> Result<usize, Refusal> {
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("is not a whole number from {lo} to {hi}"))?;
    if (lo..=hi).contains(&n) {
        Ok(n)
    } else {
        Err(format!("is out of range: {lo} to {hi} allowed"))
    }
}

/// Reads `name` with `parse`: `default` when unset; when set and refused, a warning naming
/// the variable, its value, what is wrong and `shown` (how the default is written), then
/// `default`.
pub fn read<T>(
    name: &str,
    default: T,
    shown: &str,
    parse: impl FnOnce(&str) -> Result<T, Refusal>,
) -> T {
    let Some(raw) = std::env::var_os(name) else {
        return default;
    };
    let text = raw.to_string_lossy();
    match parse(&text) {
        Ok(v) => v,
        Err(why) => {
            crate::ffi::log::warn(&format!(
                "ggml_backend_sched: {name}='{text}' {why}; using {shown}\n"
            ));
            default
        }
    }
}

/// A safety rule's switch (default on): off only for `0`, `off`, `no`, `false`; any other
/// value but the "on" ones is named in a warning and the rule stays on.
pub fn safety_rule(name: &str) -> bool {
    read(name, true, "1 (the rule stays on)", parse_switch)
}

/// A debug level (default 0, as stock's `atoi` of an unset variable): a whole number from 0
/// to `i32::MAX`; anything else is named in a warning and reads 0.
pub fn debug_level(name: &str) -> i32 {
    read(name, 0, "0", |t| {
        parse_count(t, 0, i32::MAX as usize).map(|n| n as i32)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_take_only_documented_values() {
        for on in ["1", "on", "ON", " yes ", "True"] {
            assert_eq!(parse_switch(on), Ok(true), "{on:?}");
        }
        for off in ["0", "off", "No", "FALSE", " 0 "] {
            assert_eq!(parse_switch(off), Ok(false), "{off:?}");
        }
        // The cases of the bad-input issue: each of these used to switch the rule off.
        for bad in ["", "enable", "2", "-1", "of", "0x1", "nope"] {
            assert_eq!(
                parse_switch(bad),
                Err("is not a switch (1, on, yes, true or 0, off, no, false)".to_string()),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn counts_are_whole_and_in_range() {
        assert_eq!(parse_count("4", 1, MAX_COPIES), Ok(4));
        assert_eq!(parse_count(" 1 ", 1, MAX_COPIES), Ok(1));
        assert_eq!(
            parse_count("4000000000", 1, MAX_COPIES),
            Err("is out of range: 1 to 64 allowed".to_string())
        );
        assert_eq!(
            parse_count("0", 1, MAX_COPIES),
            Err("is out of range: 1 to 64 allowed".to_string())
        );
        assert_eq!(
            parse_count("2abc", 0, 9),
            Err("is not a whole number from 0 to 9".to_string())
        );
        assert_eq!(
            parse_count("-3", 0, 9),
            Err("is not a whole number from 0 to 9".to_string())
        );
    }
}
