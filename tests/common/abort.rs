//! Abort paths, each in a child process: the test binary runs itself again with one test
//! selected and an environment variable naming the case, so that an abort (stock's
//! `GGML_ASSERT`, ours' `ggml_abort`) ends the child, not the test run.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

/// SIGABRT's number on Linux.
pub const SIGABRT: i32 = 6;

/// Runs test `test` of this binary in a child process with `var=case` set, and returns how
/// it ended.
pub fn run_case(test: &str, var: &str, case: &str) -> Output {
    Command::new(std::env::current_exe().expect("current_exe"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(var, case)
        .output()
        .expect("run the test binary again")
}

/// [`run_case`], asserting that the child died of SIGABRT; returns its stderr.
pub fn expect_sigabrt(test: &str, var: &str, case: &str) -> String {
    let out = run_case(test, var, case);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.signal(),
        Some(SIGABRT),
        "{case}: {:?}\n{stderr}",
        out.status
    );
    stderr
}
