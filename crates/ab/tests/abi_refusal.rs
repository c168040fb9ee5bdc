//! The harness refuses a libggml-base of another ggml before it runs anything: a fake library
//! that reports version 9.9.9 (and another tensor size) is named with both identities, and
//! the program is never started.
//!
//! Needs the stock build at `target/llama-stock` (fails without it: `./ab build-stock`).

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::root;

/// The stock build (`./ab build-stock`), which these tests need.
fn stock_build(root: &Path) -> PathBuf {
    let build = root.join("target/llama-stock");
    assert!(
        build.join("bin/libggml-base.so.0").exists(),
        "needs the stock build: ./ab build-stock"
    );
    build
}

/// Compiles the C file `src` into the shared library `out`, with `extra` after the source
/// (libraries to link).
fn cc_shared(out: &Path, src: &Path, extra: &[&std::ffi::OsStr]) {
    let ok = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(out)
        .arg(src)
        .args(extra)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cc failed on {}", src.display());
}

/// An executable shell script `dir/prog.sh` running `body`.
fn shell_program(dir: &Path, body: &str) -> PathBuf {
    let prog = dir.join("prog.sh");
    bundle::write_script(&prog, &format!("#!/bin/sh\n{body}\n")).unwrap();
    prog
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
    bundle::write_script(&prog, &format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
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

/// The identity check loads the arm's library in a child: one whose constructor never
/// returns is refused once the check's limit (`AB_TIMEOUT_S` here, 60 s at most) has
/// passed, naming the file, and the program never starts.
#[test]
fn a_library_that_hangs_when_loaded_is_refused_in_time() {
    let root = root();
    let build = stock_build(&root);
    let dir = root.join("target/tmp/abi-hang");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("hang.c");
    std::fs::write(
        &src,
        "#include <unistd.h>\n\
         __attribute__((constructor)) static void stay(void) { for (;;) pause(); }\n",
    )
    .unwrap();
    let lib = dir.join("libggml-base.so.0");
    cc_shared(&lib, &src, &[]);
    let marker = dir.join("ran");
    let prog = shell_program(&dir, &format!("touch {}", marker.display()));
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_ab"))
        .current_dir(&root)
        // The limit also bounds the identity read of the build's own library, which comes
        // first: 3 s could run out on a loaded machine while other tests compile.
        .env("AB_TIMEOUT_S", "10")
        .args(["exec", "--arm", "abi-hang", "--lib"])
        .arg(&lib)
        .arg("--llama-build")
        .arg(&build)
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    let took = started.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("loading it took over 10 s") && err.contains(&lib.display().to_string()),
        "{err}"
    );
    assert!(took < 60.0, "took {took:.1} s");
    assert!(!marker.exists(), "the program ran");
}

/// The identity check finds an arm's own dependencies where the runs find them: on the
/// user's `LD_LIBRARY_PATH`, after the build's folder (an arm built by another toolchain
/// may need its runtime from there).
#[test]
fn the_identity_check_sees_the_users_library_path() {
    let root = root();
    let build = stock_build(&root);
    let dir = root.join("target/tmp/abi-user-path");
    let _ = std::fs::remove_dir_all(&dir);
    let deps = dir.join("deps");
    std::fs::create_dir_all(&deps).unwrap();
    // The build's own identity, which the arm reports, so that only loading can fail.
    let out = Command::new(env!("CARGO_BIN_EXE_ab"))
        .arg("abi-of")
        .arg(build.join("bin/libggml-base.so.0"))
        .env("LD_LIBRARY_PATH", build.join("bin"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let id: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let dep_src = dir.join("dep.c");
    std::fs::write(&dep_src, "int dep_value(void) { return 7; }\n").unwrap();
    cc_shared(&deps.join("libabdep.so"), &dep_src, &[]);
    let src = dir.join("arm.c");
    std::fs::write(
        &src,
        format!(
            "#include <stddef.h>\n\
             int dep_value(void);\n\
             const char * ggml_version(void) {{ return \"{}\"; }}\n\
             const char * ggml_commit(void) {{ return dep_value() == 7 ? \"{}\" : \"?\"; }}\n\
             size_t ggml_tensor_overhead(void) {{ return {}; }}\n\
             size_t ggml_graph_overhead(void) {{ return {}; }}\n",
            id["version"].as_str().unwrap(),
            id["commit"].as_str().unwrap(),
            id["tensor_overhead"],
            id["graph_overhead"]
        ),
    )
    .unwrap();
    let lib = dir.join("libggml-base.so.0");
    cc_shared(
        &lib,
        &src,
        &["-L".as_ref(), deps.as_os_str(), "-labdep".as_ref()],
    );
    let prog = shell_program(&dir, "exit 0");
    let run = |user_path: Option<&Path>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ab"));
        cmd.current_dir(&root)
            .args(["exec", "--arm", "abi-user-path", "--lib"])
            .arg(&lib)
            .arg("--llama-build")
            .arg(&build)
            .arg("--")
            .arg(&prog);
        match user_path {
            Some(p) => cmd.env("LD_LIBRARY_PATH", p),
            None => cmd.env_remove("LD_LIBRARY_PATH"),
        };
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Without the folder the arm cannot load, and the check says so.
    let err = run(None);
    assert!(err.contains("libabdep.so"), "{err}");
    // With it the check reads the arm's identity (the program then runs; a shell script maps
    // no libggml-base, which the proof reports, but the check passed).
    let err = run(Some(&deps));
    assert!(
        !err.contains("cannot load") && err.contains("arm abi-user-path: ggml "),
        "{err}"
    );
}
