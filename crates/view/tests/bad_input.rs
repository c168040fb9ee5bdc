//! Inputs `view` must refuse with a `[view] error:` line naming the file and what is wrong,
//! exit status 1: no panic (exit 101 and a backtrace), no waiting forever.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A fresh folder `name` under target/tmp.
fn folder(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/tmp/view-bad-input")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `view ARGS`, killed after 60 s (then `None`).
fn view(args: &[&Path]) -> Option<Output> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_view"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(child.wait_with_output().unwrap())
}

/// A record whose second split says it is split 7 (of 2): the overview indexed its per-split
/// counts by that and panicked.
#[test]
fn a_split_index_out_of_range_is_an_error_not_a_panic() {
    let d = folder("split-index");
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/repro-rule1.json"),
    )
    .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["splits"][1]["index"] = 7.into();
    let rec = d.join("sched-1-000.json");
    std::fs::write(&rec, v.to_string()).unwrap();
    let out = view(&[&d, Path::new("--out"), &d.join("page.html")]).expect("view hung");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "[view] error: {}: splits[1].index is 7, expected 1 (its position)",
            rec.display()
        )
    );
    assert!(!d.join("page.html").exists());
}

/// A FIFO named like a record, given itself or in a directory: refused by path at once.
#[test]
fn a_fifo_is_refused_at_once() {
    let d = folder("fifo");
    let fifo = d.join("sched-x.json");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("no mkfifo here: nothing to check");
        return;
    }
    for arg in [&fifo, &d] {
        let out = view(&[arg, Path::new("--out"), &d.join("page.html")])
            .expect("view waited on the FIFO for 60 s");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(
            err.trim_end(),
            format!(
                "[view] error: {}: not a regular file (a FIFO), not read",
                fifo.display()
            )
        );
    }
}
