//! The runner end to end against the real libraries, when they are built
//! (`target/llama-stock/bin/libggml-base.so.0`, stock; `target/ours/lib/libggml-base.so.0`,
//! ours); without them each test says so on stderr and checks nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Stock's and our library, when both exist.
fn libs() -> Option<(PathBuf, PathBuf)> {
    let stock = root().join("target/llama-stock/bin/libggml-base.so.0");
    let ours = root().join("target/ours/lib/libggml-base.so.0");
    if stock.exists() && ours.exists() {
        Some((stock, ours))
    } else {
        eprintln!(
            "skipped: {} or {} is not built",
            stock.display(),
            ours.display()
        );
        None
    }
}

fn sched_diff(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sched-diff"));
    cmd.args(args).env_remove("LD_PRELOAD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// Seeds where stock has an in-place hazard and the self-test's perturbation changes ours:
/// they were excused as "explained by the in-place rule" while the self-test said FAIL and
/// the summary "1 passed, 0 failed". Now the perturbation is caught, and the summary, the
/// verdict and the exit status agree.
#[test]
fn the_self_test_catches_perturbations_in_seeds_where_stock_has_a_hazard() {
    let Some((stock, ours)) = libs() else { return };
    for seed in ["49", "98", "168"] {
        let args = [
            "--self-test",
            "--a",
            stock.to_str().unwrap(),
            "--b",
            ours.to_str().unwrap(),
            "--start",
            seed,
            "--seeds",
            "1",
        ];
        let out = sched_diff(&args, &[]);
        let t = text(&out);
        assert!(
            t.contains("explained by the in-place rule: 0 "),
            "seed {seed}: {t}"
        );
        assert!(t.contains("  unexplained: 1\n"), "seed {seed}: {t}");
        assert!(
            t.contains("self-test: caught 1 of 1 planted"),
            "seed {seed}: {t}"
        );
        assert!(
            t.ends_with("PASS\n1 passed, 0 failed\n"),
            "seed {seed}: {t}"
        );
        assert_eq!(out.status.code(), Some(0), "seed {seed}: {t}");
    }
}

/// Seeds 1..5 hold no multiple of 7: nothing was planted, the self-test proved nothing and
/// fails, and its last line says so.
#[test]
fn a_self_test_without_a_planted_change_fails_and_says_so() {
    let Some((stock, _)) = libs() else { return };
    let args = [
        "--self-test",
        "--a",
        stock.to_str().unwrap(),
        "--start",
        "1",
        "--seeds",
        "5",
    ];
    let out = sched_diff(&args, &[]);
    let t = text(&out);
    assert!(
        t.ends_with("5 passed, 0 failed; FAIL: self-test: no perturbation changed B's output\n"),
        "{t}"
    );
    assert_eq!(out.status.code(), Some(1), "{t}");
}

/// A copy of stock under another file name and SONAME, so that the loader maps it beside the
/// arm's library when preloaded (the review's false pass: arm B ran stock's functions while
/// the mapped `libggml-base` was ours).
fn renamed_stock_copy(stock: &Path) -> PathBuf {
    let bytes = std::fs::read(stock).unwrap();
    let from = b"libggml-base.so.0\0";
    let to = b"libggml-bXse.so.0\0";
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("stock's SONAME string");
    let mut copy = bytes.clone();
    copy[at..at + to.len()].copy_from_slice(to);
    let dir = std::env::temp_dir().join(format!("sched-diff-preload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("stock-copy.so");
    std::fs::write(&path, copy).unwrap();
    path
}

/// The caller's LD_PRELOAD does not reach the arms, and the runner says so once; the driver's
/// probe would have named the preloaded file as the provider of the scheduler's functions.
#[test]
fn an_ld_preload_does_not_reach_the_arms() {
    let Some((stock, ours)) = libs() else { return };
    let copy = renamed_stock_copy(&stock);
    let args = [
        "--a",
        stock.to_str().unwrap(),
        "--b",
        ours.to_str().unwrap(),
        "--seeds",
        "20",
        "--b-inplace",
        "ignore",
    ];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sched-diff"));
    cmd.args(args)
        .env("LD_PRELOAD", &copy)
        .env("GGML_SCHED_INPLACE_RULE", "0");
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let note = format!(
        "sched-diff: LD_PRELOAD={} is not passed to the arms",
        copy.display()
    );
    assert_eq!(err.matches(&note).count(), 1, "{err}");
    let t = text(&out);
    assert_eq!(
        t.matches("scheduler and allocator functions resolve to it")
            .count(),
        2,
        "{t}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).ends_with("20 passed, 0 failed\n"),
        "{t}"
    );
    assert_eq!(out.status.code(), Some(0), "{t}");

    // the driver itself, with the preload and ours on its library path: the probe names the
    // preloaded file, which the runner's check refuses
    let dir = copy.parent().unwrap().join("arm");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("libggml-base.so.0");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&ours, &link).unwrap();
    let driver = root().join("target/sched-diff/sched_diff");
    let out = Command::new(driver)
        .args(["0", "0"])
        .env("LD_PRELOAD", &copy)
        .env("LD_LIBRARY_PATH", &dir)
        .env("SCHED_DIFF_MAPS", "1")
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(
        t.contains(&format!(
            "SYMBOL ggml_backend_sched_new {}\n",
            copy.display()
        )),
        "{t}"
    );
    let _ = std::fs::remove_dir_all(copy.parent().unwrap());
}

/// A file that is not a shared library: one line on stderr, exit status 2, nothing compiled.
#[test]
fn a_text_file_as_a_library_is_one_line() {
    let dir = std::env::temp_dir().join(format!("sched-diff-notlib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("libggml-base.so.0");
    std::fs::write(&file, "not a library\n").unwrap();
    let out = sched_diff(&["--a", file.to_str().unwrap(), "--seeds", "1"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err,
        format!(
            "sched-diff: error: arm A: {} is not an ELF file (a shared library libggml-base.so.0 is expected)\n",
            file.display()
        )
    );
    assert!(out.stdout.is_empty());
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reader that went away (`sched-diff ... | head`) ends the runner by SIGPIPE at its next
/// line, as a command-line tool ends; it panicked ("Broken pipe", exit 101). Needs no built
/// library: the line is the refusal of a file that is not one.
#[test]
fn a_closed_output_ends_the_runner_by_sigpipe() {
    use std::os::unix::io::FromRawFd;
    use std::os::unix::process::ExitStatusExt;
    let mut fds = [0i32; 2];
    // Close-on-exec: a process that another test thread starts between pipe2 and the drop
    // below would otherwise inherit the read end and keep it open, so the write would not
    // fail (CI saw exit 2 in place of SIGPIPE).
    // SAFETY: `fds` has room for the two descriptors pipe2(2) writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just made by pipe2(2) and are owned here alone.
    let (reader, writer) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    drop(reader);
    let status = Command::new(env!("CARGO_BIN_EXE_sched-diff"))
        .args(["--a", "/etc/passwd", "--b", "/etc/passwd"])
        .stdout(std::process::Stdio::from(writer.try_clone().unwrap()))
        .stderr(std::process::Stdio::from(writer))
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}");
}
