//! `ab bundle --out DIR` removes DIR whole before it writes the bundle there. With `--out`
//! taken from the caller's folder, `--out .` (or a folder of the user's own files) must be
//! refused, before anything is built, and left as it was.

use std::process::Command;

mod common;
use common::root;

#[test]
fn a_folder_of_the_users_files_is_not_removed() {
    let d = root().join("target/tmp/bundle-out/caller");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("mine")).unwrap();
    std::fs::write(d.join("notes.txt"), b"precious").unwrap();
    std::fs::write(d.join("mine/draft.txt"), b"mine").unwrap();
    for out in [".", "mine"] {
        let run = Command::new(env!("CARGO_BIN_EXE_ab"))
            .current_dir(&d)
            .env_remove("AB_CALLER_DIR")
            .args(["bundle", "--out", out])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "--out {out}: {err}");
        assert!(err.contains("holds no bundle"), "--out {out}: {err}");
        assert!(
            !err.contains("cargo build"),
            "--out {out}: built first: {err}"
        );
        assert_eq!(std::fs::read(d.join("notes.txt")).unwrap(), b"precious");
        assert_eq!(std::fs::read(d.join("mine/draft.txt")).unwrap(), b"mine");
    }
}
