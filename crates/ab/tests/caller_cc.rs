//! A relative `CC` (one with a `/`, `CC=./mycc`) is taken from the folder `ab` was called
//! from, as every relative path the user gives: the harness and its tools run the compiler
//! from the workspace root, where `./mycc` is not.
//!
//! `ab runpath-trap` on a fake llama.cpp build (any file as its libggml-base) compiles with
//! `$CC` first: the stand-in compiler in the caller's folder leaves a mark there and fails.
//! Needs the pinned upstream headers (target/upstream, which building the workspace fetches).

use std::process::Command;

mod common;
use common::root;

#[test]
fn a_relative_cc_is_taken_from_the_callers_folder() {
    let d = root().join("target/tmp/caller-cc");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("fake-build/bin")).unwrap();
    std::fs::write(d.join("fake-build/bin/libggml-base.so.0"), b"any").unwrap();
    let cc = d.join("mycc");
    bundle::write_script(
        &cc,
        "#!/bin/sh\ntouch \"$(dirname \"$0\")/mycc-ran\"\nexit 1\n",
    )
    .unwrap();
    // As the ./ab script runs the harness: from the root, told the caller's folder.
    let out = Command::new(env!("CARGO_BIN_EXE_ab"))
        .current_dir(root())
        .env("AB_CALLER_DIR", &d)
        .env("CC", "./mycc")
        .args(["runpath-trap", "--llama-build", "fake-build"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(d.join("mycc-ran").is_file(), "./mycc was not run: {err}");
}
