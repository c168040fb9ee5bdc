//! `nm -P` output, read by the build script to list the defined globals of the upstream
//! archives (the export list). A module of its own so that `tests/build_scripts.rs` tests it.

/// Parses `nm -P` lines (`NAME TYPE [VALUE [SIZE]]`; archive member headers end with `:`),
/// keeping the names whose type letter marks a defined global: text `T`, data `D`, bss `B`,
/// read-only `R`, small `G`/`S`, weak `W`/`V`, GNU unique `u`, indirect function `i`.
/// Undefined (`U`), local (lower-case other than `u`/`i`) and weak undefined (`w`/`v`)
/// names are left out. Names keep their C++ mangling.
pub fn parse_nm_posix(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let name = it.next()?;
            let ty = it.next()?;
            let global = matches!(
                ty,
                "T" | "D" | "B" | "R" | "W" | "V" | "u" | "i" | "G" | "S"
            );
            (global && !name.ends_with(':')).then(|| name.to_string())
        })
        .collect()
}
