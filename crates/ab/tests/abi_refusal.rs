//! The harness refuses a libggml-base of another ggml before it runs anything: a fake library
//! that reports version 9.9.9 (and another tensor size) is named with both identities, and
//! the program is never started.
//!
//! Needs the stock build at `target/llama-stock` (fails without it: `./ab build-stock`).

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::root;

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

/// A build whose programs take a symbol from the build's own libggml-base that the arm's file
/// lacks (as a CUDA build's programs took C++ runtime symbols on the H200): the harness names
/// the program and the symbol before it runs anything, and the program then stops at load
/// time in that arm.
#[test]
fn programs_importing_what_the_arm_lacks_are_named() {
    let root = root();
    let dir = root.join("target/tmp/abi-imports");
    let _ = std::fs::remove_dir_all(&dir);
    let bin = dir.join("build/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let identity = "#include <stddef.h>\n\
        const char * ggml_version(void) { return \"1.0.0\"; }\n\
        const char * ggml_commit(void) { return \"same\"; }\n\
        size_t ggml_tensor_overhead(void) { return 400; }\n\
        size_t ggml_graph_overhead(void) { return 80; }\n";
    let lib = |name: &str, extra: &str| {
        let src = dir.join(format!("{name}.c"));
        std::fs::write(&src, format!("{identity}{extra}")).unwrap();
        let out = dir.join(name);
        assert!(Command::new("cc")
            .args(["-shared", "-fPIC", "-Wl,-soname,libggml-base.so.0", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap()
            .success());
        out
    };
    let own = lib("own.so", "int runtime_extra(void) { return 7; }\n");
    let arm = lib("arm.so", "");
    std::fs::copy(&own, bin.join("libggml-base.so.0")).unwrap();
    std::os::unix::fs::symlink("libggml-base.so.0", bin.join("libggml-base.so")).unwrap();
    let prog_src = dir.join("prog.c");
    std::fs::write(
        &prog_src,
        "int runtime_extra(void);\nint main(void) { return runtime_extra() == 7 ? 0 : 1; }\n",
    )
    .unwrap();
    assert!(Command::new("cc")
        .arg("-o")
        .arg(bin.join("needs-extra"))
        .arg(&prog_src)
        .arg(format!("-L{}", bin.display()))
        .args(["-lggml-base", "-Wl,-rpath,$ORIGIN"])
        .status()
        .unwrap()
        .success());

    let out = Command::new(env!("CARGO_BIN_EXE_ab"))
        .current_dir(&root)
        .args(["exec", "--arm", "abi-imports", "--lib"])
        .arg(&arm)
        .arg("--llama-build")
        .arg(dir.join("build"))
        .args(["--", "needs-extra"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: arm abi-imports: needs-extra: runtime_extra: the build's programs take these from its own libggml-base"),
        "{err}"
    );
    // and so it does stop at load time (the loader's 127), as the warning said
    assert_eq!(out.status.code(), Some(127), "{err}");
}
