//! The `./ab` script's caller folder (`AB_CALLER_DIR`): it is the folder relative paths are
//! taken from, so the script refuses a value it cannot stand behind rather than let the
//! harness fall back to the workspace root, where it runs, without a word.
//!
//! The script is run with a `cargo` first on `PATH` that only says it was called: each case
//! must stop before the script builds or runs anything.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::root;

/// A fresh folder under target/tmp with `bin/cargo` and `bin/apt-get`, stand-ins that fail
/// saying so (the script installs missing packages with apt-get when run as root: a test
/// must not).
fn scratch(name: &str) -> PathBuf {
    let d = root().join("target/tmp/ab-script").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("bin")).unwrap();
    for tool in ["cargo", "apt-get"] {
        let f = d.join("bin").join(tool);
        bundle::write_script(
            &f,
            &format!("#!/bin/sh\necho 'stand-in {tool} called' >&2\nexit 97\n"),
        )
        .unwrap();
    }
    d
}

/// `bash -c SCRIPT` from `cwd`, with the stand-in cargo first on PATH and `AB_CALLER_DIR`
/// set to `caller` or removed; `$AB` in the script is the `./ab` script.
fn bash(cwd: &Path, caller: Option<&str>, script: &str) -> Output {
    let path = format!(
        "{}:{}",
        cwd.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.current_dir(cwd)
        .args(["-c", script])
        .env("AB", root().join("ab"))
        .env("PATH", path);
    match caller {
        Some(c) => cmd.env("AB_CALLER_DIR", c),
        None => cmd.env_remove("AB_CALLER_DIR"),
    };
    cmd.output().unwrap()
}

fn refused(out: &Output, says: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(says), "{err}");
    assert!(!err.contains("stand-in"), "went on: {err}");
}

#[test]
fn a_relative_ab_caller_dir_is_refused() {
    let d = scratch("relative");
    let out = bash(&d, Some("sub"), r#"exec "$AB" store"#);
    refused(&out, "AB_CALLER_DIR must be an absolute path");
    assert!(String::from_utf8_lossy(&out.stderr).contains("'sub'"));
}

#[test]
fn a_current_folder_that_was_removed_is_refused() {
    let d = scratch("removed");
    let out = bash(
        &d,
        None,
        r#"mkdir gone && cd gone && rmdir ../gone && exec "$AB" store"#,
    );
    refused(&out, "the current folder cannot be read");
}

/// The cases that work go on to cargo (here the stand-in): an absolute value, kept as it is,
/// and none, where the current folder is taken.
#[test]
fn an_absolute_or_unset_ab_caller_dir_goes_on() {
    let d = scratch("goes-on");
    for caller in [Some("/some/folder"), None] {
        let out = bash(&d, caller, r#"exec "$AB" store"#);
        let err = String::from_utf8_lossy(&out.stderr);
        // The stand-in ran, unless the machine lacks a package the script checks for first.
        assert!(
            err.contains("stand-in cargo called")
                || err.contains("missing system packages")
                || err.contains("stand-in apt-get called"),
            "{caller:?}: {err}"
        );
    }
}
