//! Regenerates `include/ggml-hrx.h` with cbindgen and fails on any difference from the
//! committed file. `HRX_BLESS=1` rewrites the committed file instead.

use std::path::PathBuf;

#[test]
fn committed_header_matches_cbindgen() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let header = crate_dir.join("../../include/ggml-hrx.h");
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen failed");
    let mut out = Vec::new();
    bindings.write(&mut out);
    let generated = String::from_utf8(out).unwrap();
    if std::env::var_os("HRX_BLESS").is_some() {
        std::fs::write(&header, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&header).unwrap_or_default();
    assert!(
        committed == generated,
        "include/ggml-hrx.h is stale; regenerate with HRX_BLESS=1 cargo test -p hrx --test header"
    );
    for f in [
        "ggml_backend_hrx_reg",
        "ggml_backend_hrx_eager_ops_add",
        "ggml_backend_hrx_eager_ops_remove",
        "ggml_backend_hrx_eager_ops_apply",
        "ggml_backend_hrx_arena_stats_get",
    ] {
        assert!(generated.contains(f), "{f} missing from the header");
    }
}
