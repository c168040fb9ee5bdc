//! Relative paths given to `ab` are taken from the folder the user called it from: run
//! directly (a bundle's `ab`) that is the current directory; through the `./ab` script,
//! which runs the harness from the workspace root, it comes in `AB_CALLER_DIR`.
//!
//! Needs no llama.cpp build: each run stops at the first check that names the resolved
//! path (a missing build, library or program), before the probe is built or anything runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::root;

/// A fresh folder under target/tmp, outside which the relative paths below do not exist:
/// `fake-build/bin/` (an empty llama.cpp build folder) and `lib.so` (any file).
fn caller_folder(name: &str) -> PathBuf {
    let d = root().join("target/tmp/caller-paths").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("fake-build/bin")).unwrap();
    std::fs::write(d.join("lib.so"), b"not a library").unwrap();
    d
}

/// `ab exec` with `args` (before `--`) and `program`, from `cwd`, with `AB_CALLER_DIR` set
/// to `caller` or removed.
fn exec(cwd: &Path, caller: Option<&Path>, args: &[&str], program: &str) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ab"));
    cmd.current_dir(cwd)
        .arg("exec")
        .args(["--arm", "caller-paths"])
        .args(args)
        .args(["--", program]);
    match caller {
        Some(c) => cmd.env("AB_CALLER_DIR", c),
        None => cmd.env_remove("AB_CALLER_DIR"),
    };
    cmd.output().unwrap()
}

/// Runs the three checks of `ab exec` in turn from `cwd` (with `caller` as `AB_CALLER_DIR`)
/// and asserts that each names its path under `expected`.
fn each_path_from(cwd: &Path, caller: Option<&Path>, expected: &Path) {
    let named = |out: &Output, what: &str, path: &Path| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(
            err.contains(&path.display().to_string()),
            "{what}: not taken from {}: {err}",
            expected.display()
        );
    };
    let out = exec(
        cwd,
        caller,
        &["--llama-build", "no-build", "--lib", "lib.so"],
        "prog",
    );
    named(&out, "--llama-build", &expected.join("no-build"));
    let out = exec(
        cwd,
        caller,
        &["--llama-build", "fake-build", "--lib", "no-lib.so"],
        "prog",
    );
    named(&out, "--lib", &expected.join("no-lib.so"));
    let out = exec(
        cwd,
        caller,
        &["--llama-build", "fake-build", "--lib", "lib.so"],
        "./no-prog",
    );
    named(&out, "the program", &expected.join("./no-prog"));
}

#[test]
fn run_directly_paths_are_taken_from_the_current_directory() {
    let d = caller_folder("direct");
    each_path_from(&d, None, &d);
}

/// As the `./ab` script runs it: from the root, told the caller's folder.
#[test]
fn run_from_the_root_paths_are_taken_from_ab_caller_dir() {
    let d = caller_folder("script");
    each_path_from(&root(), Some(&d), &d);
    // Only an absolute folder is taken: a relative one is no folder the script would set.
    let out = exec(
        &d,
        Some(Path::new("elsewhere")),
        &["--llama-build", "no-build", "--lib", "lib.so"],
        "prog",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&d.join("no-build").display().to_string()),
        "{err}"
    );
}

/// An absolute path is used as it is, wherever `ab` runs and whatever folder it is told.
#[test]
fn absolute_paths_are_kept() {
    let d = caller_folder("absolute");
    let build = d.join("no-build");
    let out = exec(
        &root(),
        Some(Path::new("/nonexistent-caller")),
        &["--llama-build", build.to_str().unwrap(), "--lib", "lib.so"],
        "prog",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("llama.cpp build {} not found", build.display())),
        "{err}"
    );
}

/// `ab exec` runs its program in the caller's folder: when that folder is gone (removed after
/// `./ab` read it), the error says so, not that the program, which is there, was not found.
#[test]
fn a_caller_folder_that_is_gone_is_named() {
    let d = caller_folder("gone");
    std::fs::write(d.join("fake-build/bin/prog"), b"").unwrap();
    let gone = d.join("removed");
    let out = exec(
        &root(),
        Some(&gone),
        &[
            "--llama-build",
            d.join("fake-build").to_str().unwrap(),
            "--lib",
            d.join("lib.so").to_str().unwrap(),
        ],
        "prog",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "the folder ab was called from, {}, is no longer there",
            gone.display()
        )),
        "{err}"
    );
}
