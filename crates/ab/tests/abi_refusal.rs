//! The harness refuses a libggml-base of another ggml before it runs anything: a fake library
//! that reports version 9.9.9 (and another tensor size) is named with both identities, and
//! the program is never started.
//!
//! Needs the stock build at `target/llama-stock` (fails without it: `./ab build-stock`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Compiles a shared library exporting the four functions the harness reads, reporting
/// ggml `version` with a tensor overhead of `tensor_overhead` bytes.
fn fake_lib(dir: &Path, version: &str, tensor_overhead: usize) -> PathBuf {
    let src = dir.join("fake.c");
    std::fs::write(
        &src,
        format!(
            "#include <stddef.h>\n\
             const char * ggml_version(void) {{ return \"{version}\"; }}\n\
             const char * ggml_commit(void) {{ return \"fork\"; }}\n\
             size_t ggml_tensor_overhead(void) {{ return {tensor_overhead}; }}\n\
             size_t ggml_graph_overhead(void) {{ return 80; }}\n"
        ),
    )
    .unwrap();
    let out = dir.join("libggml-base.so.0");
    let st = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "cc failed");
    out
}

#[test]
fn another_ggml_is_refused_before_anything_runs() {
    let root = root();
    let build = root.join("target/llama-stock");
    assert!(
        build.join("bin/libggml-base.so.0").exists(),
        "needs the stock build: ./ab build-stock"
    );
    let dir = root.join("target/tmp/abi-refusal");
    std::fs::create_dir_all(&dir).unwrap();
    let fake = fake_lib(&dir, "9.9.9", 400);

    // What the child reports of the fake library.
    let out = Command::new(env!("CARGO_BIN_EXE_ab"))
        .arg("abi-of")
        .arg(&fake)
        .output()
        .unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        line.trim(),
        r#"{"version":"9.9.9","commit":"fork","tensor_overhead":400,"graph_overhead":80}"#
    );

    // The swap is refused: exit 1, both identities named, the program not started (a marker
    // file the "program" would write stays absent).
    let marker = dir.join("ran");
    let _ = std::fs::remove_file(&marker);
    let prog = dir.join("prog.sh");
    std::fs::write(&prog, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    Command::new("chmod").arg("+x").arg(&prog).status().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ab"))
        .current_dir(&root)
        .args(["exec", "--arm", "abi-refusal", "--lib"])
        .arg(&fake)
        .arg("--llama-build")
        .arg(&build)
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("arm abi-refusal is ggml 9.9.9 (commit fork, tensor overhead 400 B"),
        "{err}"
    );
    assert!(err.contains("but the llama.cpp build's own"), "{err}");
    assert!(err.contains("refusing"), "{err}");
    assert!(!marker.exists(), "the program ran");

    // The build's own library passes the same check.
    let out = Command::new(env!("CARGO_BIN_EXE_ab"))
        .current_dir(&root)
        .args(["exec", "--arm", "abi-same", "--lib"])
        .arg(build.join("bin/libggml-base.so.0"))
        .arg("--llama-build")
        .arg(&build)
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("arm abi-same: ggml 0.25.3"), "{err}");
    assert!(marker.exists(), "the program did not run: {err}");
}
