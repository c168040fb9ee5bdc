//! `ab bundle` writes a folder that runs without cargo: from it, with a PATH that has no
//! cargo, `ab exec` swaps the bundled libggml-base into the stock build's llama-simple and
//! proves the mapping, and `ab abi-of` reads the bundled library.
//!
//! Needs the stock build at `target/llama-stock` and the pinned model in `target/models`
//! (fails without them: `./ab build-stock`, `./ab fetch`).

use std::process::Command;

mod common;
use common::root;

#[test]
fn a_bundle_runs_without_cargo() {
    let root = root();
    let build = root.join("target/llama-stock");
    let model = std::fs::read_dir(root.join("target/models"))
        .expect("needs the pinned model: ./ab fetch")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "gguf"))
        .expect("a .gguf in target/models");
    let out = root.join("target/tmp/bundle-test/ab-bundle");
    let made = Command::new(env!("CARGO_BIN_EXE_ab"))
        .current_dir(&root)
        .args(["bundle", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&made.stderr);
    assert!(made.status.success(), "ab bundle failed: {err}");
    for f in [
        "ab",
        "bench",
        "view",
        "ab-bundle.json",
        "pins.toml",
        "lib/libggml-base.so.0",
        "lib/libab_probe.so",
    ] {
        assert!(out.join(f).is_file(), "the bundle lacks {f}");
    }
    assert!(out.with_extension("tar.gz").is_file());
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("ab-bundle.json")).unwrap()).unwrap();
    let listed: Vec<&str> = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(listed.contains(&"lib/libggml-base.so.0") && listed.contains(&"ab"));

    // From the bundle, somewhere else, without cargo.
    let elsewhere = std::env::temp_dir();
    let no_cargo = "/usr/local/bin:/usr/bin:/bin";
    let run = Command::new(out.join("ab"))
        .current_dir(&elsewhere)
        .env("PATH", no_cargo)
        .args(["exec", "--arm", "bundle-test", "--lib"])
        .arg(out.join("lib/libggml-base.so.0"))
        .arg("--llama-build")
        .arg(&build)
        .args(["--", "llama-simple", "-m"])
        .arg(&model)
        .args(["-n", "4", "The capital of France is"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "ab exec from the bundle failed: {err}"
    );
    assert!(err.contains("proof OK"), "{err}");
    let copy = out.join("target/ab/arms/bundle-test/lib/libggml-base.so.0");
    assert!(
        err.contains(&copy.display().to_string()),
        "not the bundle's arm folder: {err}"
    );

    // A bundle names no build of its own.
    let run = Command::new(out.join("ab"))
        .current_dir(&elsewhere)
        .env("PATH", no_cargo)
        .args(["ab", "--only", "ctest"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("--llama-build DIR"), "{err}");

    // Nor a model: a generation work without --model is refused before the arms are set up
    // (no arm line, nothing built or copied).
    let run = Command::new(out.join("ab"))
        .current_dir(&elsewhere)
        .env("PATH", no_cargo)
        .args(["ab", "--only", "simple", "--llama-build"])
        .arg(&build)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("name the generation model: --model"), "{err}");
    assert!(
        !err.contains("[ab] arm "),
        "the arms were set up first: {err}"
    );
}
