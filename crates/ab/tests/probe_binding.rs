//! A user `LD_PRELOAD` of a library with another file name that defines ggml's symbols
//! (`ggml_init`, `ggml_backend_sched_graph_compute`) takes them over while the arm's
//! libggml-base is still mapped: the probe's binding lines name the shim, and `ab exec`'s
//! proof fails naming the symbol, the shim and its sha256. Without the shim the same run's
//! proof holds, with binding lines naming the arm's copy.
//!
//! Needs the stock build at `target/llama-stock`, the probe at
//! `target/release/libab_probe.so` (`cargo build --release -p ab-probe`) and `cc` (fails
//! without them).

use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::root;

fn exec(root: &Path, preload: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ab"));
    cmd.current_dir(root)
        .args(["exec", "--arm", "probe-binding", "--lib"])
        .arg(root.join("target/llama-stock/bin/libggml-base.so.0"))
        .args(["--", "llama-simple", "--help"]);
    match preload {
        Some(p) => cmd.env("LD_PRELOAD", p),
        None => cmd.env_remove("LD_PRELOAD"),
    };
    cmd.output().unwrap()
}

fn bindings(root: &Path) -> Vec<serde_json::Value> {
    let f = root.join("target/ab/runs/probe-binding/llama-simple.probe.jsonl");
    std::fs::read_to_string(&f)
        .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["event"] == "binding")
        .collect()
}

#[test]
fn a_preloaded_shim_that_takes_over_ggml_fails_the_proof() {
    let root = root();
    assert!(
        root.join("target/llama-stock/bin/llama-simple").is_file(),
        "needs the stock build: ./ab build-stock"
    );
    assert!(
        root.join("target/release/libab_probe.so").is_file(),
        "needs the probe: cargo build --release -p ab-probe"
    );
    let dir = root.join("target/tmp/probe-binding");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("shim.c");
    std::fs::write(
        &src,
        "void *ggml_init(void *p) { (void)p; return 0; }\n\
         int ggml_backend_sched_graph_compute(void *s, void *g) { (void)s; (void)g; return 0; }\n",
    )
    .unwrap();
    let shim = dir.join("libtrace.so");
    let cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-Wl,-soname,libtracexyz.so.0", "-o"])
        .arg(&shim)
        .arg(&src)
        .status()
        .unwrap();
    assert!(cc.success(), "cc failed");
    let shim_sha = filehash_of(&shim);

    // The control: the arm's library provides the symbols, the proof holds.
    let out = exec(&root, None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(3), "control run: {err}");
    assert!(err.contains("proof OK"), "control run: {err}");
    let b = bindings(&root);
    let symbols: Vec<&str> = b.iter().map(|v| v["symbol"].as_str().unwrap()).collect();
    assert_eq!(symbols, ["ggml_init", "ggml_backend_sched_graph_compute"]);
    for v in &b {
        assert!(
            v["path"]
                .as_str()
                .unwrap()
                .ends_with("/arms/probe-binding/lib/libggml-base.so.0"),
            "{v}"
        );
    }

    // The shim preloaded: both symbols bound to it, the proof fails naming it.
    let out = exec(&root, Some(&shim));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "shim run: {err}");
    assert!(err.contains("PROOF FAILED"), "{err}");
    let shim_path = shim.canonicalize().unwrap().display().to_string();
    for sym in ["ggml_init", "ggml_backend_sched_graph_compute"] {
        let want = format!("bound {sym} to {shim_path} (sha256 {shim_sha})");
        assert!(err.contains(&want), "lacks {want}: {err}");
    }
    let b = bindings(&root);
    assert_eq!(b.len(), 2);
    for v in &b {
        assert_eq!(v["path"], shim_path.as_str(), "{v}");
        assert_eq!(v["sha256"], shim_sha.as_str(), "{v}");
    }
}

/// sha256 of a file, as hex, with `sha256sum`.
fn filehash_of(p: &Path) -> String {
    let out = Command::new("sha256sum").arg(p).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}
