//! Which C compiler builds `ggml-quants.c`, read by the build script to decide one flag. A
//! module of its own so that `tests/build_scripts.rs` tests it.
//!
//! GCC 12 and older peel (fully unroll) the fixed 16- and 32-step inner loops of the
//! dequantizers (`dequantize_row_q4_0` and its kin) before their vectorizer runs, and then
//! leave them scalar; GCC 13 vectorizes them. The dequantizers are what the CPU `GET_ROWS` of a
//! quantized token embedding calls (through `ggml_get_type_traits`), on the host's critical
//! path before every prompt batch reaches a GPU. `--param=max-completely-peel-times=1` lets
//! GCC 12 vectorize them as GCC 13 does. It changes no value: the loops it affects are
//! element-wise, and no flag that would let a float reduction be reordered is added
//! (`tests/quants.rs` checks every type against the stock build bit for bit). The build
//! script gives it only on x86-64, where this was measured and checked; on other targets
//! (aarch64 has FMA in its baseline, so contractions come into play) the flags stay stock's.

/// The flag `ggml-quants.c` gets from a GCC older than 13.
pub const PEEL_FLAG: &str = "--param=max-completely-peel-times=1";

/// Whether a compiler that printed `dumpversion` for `-dumpversion` (GCC prints the major
/// version, or `major.minor.patch` for old releases) peels those loops before vectorizing:
/// GCC older than 13. An unreadable version answers `false` (the flags stay stock's).
pub fn gcc_peels_before_vectorizing(dumpversion: &str) -> bool {
    dumpversion
        .trim()
        .split('.')
        .next()
        .and_then(|major| major.parse::<u32>().ok())
        .is_some_and(|major| major < 13)
}
