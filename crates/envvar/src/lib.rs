//! The one rule both of our libraries (`libggml-base`, `libggml-hrx`) read their `GGML_*`
//! environment variables by: a value we do not understand is named in a warning and the
//! default is kept; it is never silently mapped to something else (garbage to "off", a
//! negative budget to "not a number", `inf` devices to an endless loop). Only a documented
//! "off" value switches a safety rule off.
//!
//! No dependencies and no logging of its own: each library passes its logger, so messages
//! reach ggml's log callback with that library's prefix.

use std::ops::RangeInclusive;

/// Reads `name` with `parse`: `default` when the variable is unset; when it is set and
/// `parse` refuses it (or it is not UTF-8), `warn` gets one line naming the variable, its
/// value, what is wrong and `shown` (how the default is written), without a prefix or a
/// newline, and the result is `default`.
pub fn read<T>(
    name: &str,
    default: T,
    shown: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
    warn: impl FnOnce(&str),
) -> T {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => default,
        Err(std::env::VarError::NotUnicode(v)) => {
            warn(&format!("{name}={v:?} is not UTF-8 text; using {shown}"));
            default
        }
        Ok(v) => parse(&v).unwrap_or_else(|why| {
            warn(&format!("{name}='{v}' {why}; using {shown}"));
            default
        }),
    }
}

/// An on/off switch: `1`, `on`, `yes`, `true` or `0`, `off`, `no`, `false` (any case,
/// surrounding blanks allowed). Anything else, the empty string included, is refused.
pub fn switch(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Ok(true),
        "0" | "off" | "no" | "false" => Ok(false),
        _ => Err("is not a switch (1, on, yes, true or 0, off, no, false)".into()),
    }
}

/// A whole number in `range` (decimal, surrounding blanks allowed).
pub fn count(text: &str, range: RangeInclusive<usize>) -> Result<usize, String> {
    let (lo, hi) = (range.start(), range.end());
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("is not a whole number from {lo} to {hi}"))?;
    if range.contains(&n) {
        Ok(n)
    } else {
        Err(format!("is out of range: {lo} to {hi} allowed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_take_only_documented_values() {
        for on in ["1", "on", "ON", " yes ", "True"] {
            assert_eq!(switch(on), Ok(true), "{on:?}");
        }
        for off in ["0", "off", "No", "FALSE", " 0 "] {
            assert_eq!(switch(off), Ok(false), "{off:?}");
        }
        // The cases of the bad-input issue: each of these used to switch the rule off.
        for bad in ["", "enable", "2", "-1", "of", "0x1", "nope"] {
            assert_eq!(
                switch(bad),
                Err("is not a switch (1, on, yes, true or 0, off, no, false)".to_string()),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn counts_are_whole_and_in_range() {
        assert_eq!(count("4", 1..=64), Ok(4));
        assert_eq!(count(" 1 ", 1..=64), Ok(1));
        assert_eq!(
            count("4000000000", 1..=64),
            Err("is out of range: 1 to 64 allowed".to_string())
        );
        assert_eq!(
            count("0", 1..=64),
            Err("is out of range: 1 to 64 allowed".to_string())
        );
        for bad in ["2abc", "-3", "inf", "1e9", "2.5"] {
            assert_eq!(
                count(bad, 0..=9),
                Err("is not a whole number from 0 to 9".to_string()),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn read_names_the_refused_value_and_keeps_the_default() {
        // Unique names: tests run in parallel threads of one process.
        std::env::set_var("ENVVAR_TEST_BAD", "maybe");
        let mut said = String::new();
        let v = read("ENVVAR_TEST_BAD", true, "1 (on)", switch, |m| {
            said = m.into()
        });
        assert!(v);
        assert_eq!(
            said,
            "ENVVAR_TEST_BAD='maybe' is not a switch (1, on, yes, true or 0, off, no, false); \
             using 1 (on)"
        );
        std::env::set_var("ENVVAR_TEST_GOOD", "off");
        let v = read("ENVVAR_TEST_GOOD", true, "1", switch, |_| {
            panic!("no warning")
        });
        assert!(!v);
        let v = read(
            "ENVVAR_TEST_UNSET",
            7,
            "7",
            |t| count(t, 0..=9),
            |_| panic!("unset"),
        );
        assert_eq!(v, 7);
    }
}
