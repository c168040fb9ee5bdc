//! ggml's version as its CMake build states it, read by the build script to check the
//! pinned tree against `pins.toml`. A module of its own so that `tests/build_scripts.rs`
//! tests it.

/// `MAJOR.MINOR.PATCH` from the `set(GGML_VERSION_MAJOR 0)`, `..._MINOR` and `..._PATCH`
/// lines of ggml's `CMakeLists.txt` (`text`). Errors name the part that is missing or not a
/// number.
pub fn ggml_version(text: &str) -> Result<String, String> {
    let part = |name: &str| -> Result<u32, String> {
        let key = format!("GGML_VERSION_{name}");
        let value = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("set("))
            .filter_map(|l| l.strip_suffix(')'))
            .find_map(|l| {
                let mut words = l.split_whitespace();
                (words.next() == Some(key.as_str())).then(|| words.next().unwrap_or(""))
            })
            .ok_or_else(|| format!("no `set({key} N)` line"))?;
        value
            .trim_matches('"')
            .parse()
            .map_err(|_| format!("{key} is {value:?}, not a number"))
    };
    Ok(format!(
        "{}.{}.{}",
        part("MAJOR")?,
        part("MINOR")?,
        part("PATCH")?
    ))
}
