//! Running one arm of the reproducer in a child process and reading what it printed.

use anyhow::{Context, Result};
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// How a child process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Exited with this code.
    Exit(i32),
    /// Killed by this signal (number, name such as `SIGSEGV`).
    Signal(i32, String),
    /// Still running at the deadline; killed by us.
    Timeout,
}

impl End {
    /// `exit N`, `SIGSEGV`, or `timeout`.
    pub fn describe(&self) -> String {
        match self {
            End::Exit(c) => format!("exit {c}"),
            End::Signal(_, name) => name.clone(),
            End::Timeout => "timeout".to_owned(),
        }
    }
}

/// The name of a signal number (`SIGSEGV`), or `SIG<n>` for one not listed.
pub fn signal_name(sig: i32) -> String {
    let known = [
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGPIPE, "SIGPIPE"),
    ];
    known
        .iter()
        .find(|(n, _)| *n == sig)
        .map(|(_, s)| (*s).to_owned())
        .unwrap_or_else(|| format!("SIG{sig}"))
}

/// One finished child run.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The child's pid.
    pub pid: u32,
    /// How it ended.
    pub end: End,
    /// Everything it wrote to stdout (lossy UTF-8).
    pub stdout: String,
    /// Everything it wrote to stderr (lossy UTF-8).
    pub stderr: String,
    /// Where stdout and stderr were kept.
    pub logs: (PathBuf, PathBuf),
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Runs `cmd` with stdout and stderr sent to `<log_stem>.out` / `<log_stem>.err`, killing it
/// after `timeout`. Errors only when the process cannot be started or its logs not read.
pub fn run_logged(mut cmd: Command, log_stem: &Path, timeout: Duration) -> Result<Finished> {
    let out_path = log_stem.with_extension("out");
    let err_path = log_stem.with_extension("err");
    let out =
        fs::File::create(&out_path).with_context(|| format!("creating {}", out_path.display()))?;
    let err =
        fs::File::create(&err_path).with_context(|| format!("creating {}", err_path.display()))?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    let start = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let pid = child.id();
    let end = loop {
        if let Some(st) = child.try_wait()? {
            break match (st.code(), st.signal()) {
                (Some(c), _) => End::Exit(c),
                (None, Some(s)) => End::Signal(s, signal_name(s)),
                (None, None) => End::Exit(-1),
            };
        }
        if start.elapsed() > timeout {
            // Our own child, by its pid.
            let _ = child.kill();
            let _ = child.wait();
            break End::Timeout;
        }
        sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| -> Result<String> {
        Ok(String::from_utf8_lossy(
            &fs::read(p).with_context(|| format!("reading {}", p.display()))?,
        )
        .into_owned())
    };
    Ok(Finished {
        pid,
        end,
        stdout: read(&out_path)?,
        stderr: read(&err_path)?,
        logs: (out_path, err_path),
        seconds: start.elapsed().as_secs_f64(),
    })
}
