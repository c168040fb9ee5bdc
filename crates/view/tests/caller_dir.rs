//! `view` takes relative paths from the folder it was called from: as `ab view` starts it
//! (from the workspace root or a bundle's folder, with the user's folder in `AB_CALLER_DIR`),
//! and run directly (its current directory).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh folder `name` under target/tmp holding `dumps/rule1.json` (a fixture record), and
/// a fresh empty folder `elsewhere` beside it.
fn folders(name: &str) -> (PathBuf, PathBuf) {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/tmp/view-caller-dir")
        .join(name);
    let _ = std::fs::remove_dir_all(&base);
    let (caller, elsewhere) = (base.join("caller"), base.join("elsewhere"));
    std::fs::create_dir_all(caller.join("dumps")).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/repro-rule1.json"),
        caller.join("dumps/rule1.json"),
    )
    .unwrap();
    (caller, elsewhere)
}

fn view(cwd: &Path, caller: Option<&Path>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_view"));
    cmd.current_dir(cwd)
        .args(["dumps/rule1.json", "--out", "pages/rule1.html"]);
    match caller {
        Some(c) => cmd.env("AB_CALLER_DIR", c),
        None => cmd.env_remove("AB_CALLER_DIR"),
    };
    cmd.output().unwrap()
}

#[test]
fn started_elsewhere_it_reads_and_writes_in_the_callers_folder() {
    let (caller, elsewhere) = folders("told");
    let out = view(&elsewhere, Some(&caller));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(caller.join("pages/rule1.html").is_file(), "{err}");
    assert!(!elsewhere.join("pages").exists());
}

#[test]
fn run_directly_it_takes_its_current_directory() {
    let (caller, _) = folders("direct");
    let out = view(&caller, None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(caller.join("pages/rule1.html").is_file(), "{err}");
}

/// Without `--out` the page goes to `target/view/` of the folder `view` runs in (the root or
/// the bundle's folder for `ab view`), not the caller's, so the line that names it names it
/// absolute: a path relative to a folder the user is not in would send them looking in theirs.
#[test]
fn the_default_page_is_named_by_its_full_path() {
    let (caller, elsewhere) = folders("default-out");
    let out = Command::new(env!("CARGO_BIN_EXE_view"))
        .current_dir(&elsewhere)
        .env("AB_CALLER_DIR", &caller)
        .arg("dumps/rule1.json")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let page = elsewhere
        .canonicalize()
        .unwrap()
        .join("target/view/rule1.html");
    assert!(page.is_file(), "{err}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("[view] wrote {} (", page.display())),
        "{said}"
    );
}
