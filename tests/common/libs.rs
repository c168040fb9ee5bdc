//! Where the two libraries a comparison test opens are (`tests/symbols.rs`,
//! `tests/quants.rs`, each includes this file).

use std::path::{Path, PathBuf};

/// The stock `libggml-base.so.0` of the pinned build (`./ab build-stock`).
pub fn stock_lib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/llama-stock/bin/libggml-base.so.0")
}

/// Our library as built for this test run: cargo compiles the lib target's cdylib next to
/// the test executable, in `target/<profile>/deps/`.
pub fn our_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .expect("target/<profile>/deps/<test>")
        .join("libggml_base.so")
}
