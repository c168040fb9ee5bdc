//! Generates the raw bindings from the pinned upstream headers. The upstream tree is fetched
//! and verified through the `pins` crate when the cache does not hold it yet.

use std::env;
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest.join("../..").canonicalize().unwrap();
    println!("cargo:rerun-if-changed=wrapper.h");
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("pins.toml").display()
    );
    println!("cargo:rerun-if-env-changed=GGML_AB_CACHE");
    let cache = env::var_os("GGML_AB_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    let pins = pins::Pins::load(&workspace).unwrap_or_else(|e| panic!("{e}"));
    let upstream = pins.ensure_upstream(&cache).unwrap_or_else(|e| {
        panic!("the pinned upstream tree is missing and could not be fetched: {e}\nhint: run `./ab fetch` (needs python3 with pip)")
    });
    let ggml = upstream.join("ggml");
    // Downstream build scripts (the root crate, HRX) find the tree through DEP_GGML_HEADERS_ROOT.
    println!("cargo:root={}", upstream.display());

    let bindings = bindgen::Builder::default()
        .header(manifest.join("wrapper.h").to_string_lossy())
        .clang_arg(format!("-I{}", ggml.join("include").display()))
        .clang_arg(format!("-I{}", ggml.join("src").display()))
        .allowlist_function("ggml_.*|gguf_.*")
        .allowlist_type("ggml_.*|gguf_.*")
        .allowlist_var("GGML_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen failed on the pinned ggml headers");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings.write_to_file(&out).expect("writing bindings.rs");
}
