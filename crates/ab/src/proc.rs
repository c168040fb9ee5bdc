//! Running child processes: output captured line by line (and shown live when asked), a
//! wall-clock limit, progress lines while it runs, and the way it ended (exit code or signal
//! by name). A child killed by a signal is a result, never an error of the harness.

use anyhow::{Context, Result};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Sees each output line as it arrives and says how far the child has got.
pub trait Watcher {
    /// Called for every line (without its newline, lossy UTF-8).
    fn line(&mut self, _stream: Stream, _line: &str) {}
    /// A short "how far" text for the periodic progress line, if any.
    fn status(&self) -> Option<String> {
        None
    }
}

/// A watcher that does nothing.
pub struct Quiet;
impl Watcher for Quiet {}

/// How a child ended, and what it wrote.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The exit code when it exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended it, by name (`SIGSEGV`), when one did.
    pub signal: Option<String>,
    /// True when the harness killed it for running past its limit.
    pub timed_out: bool,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Wall-clock seconds from spawn to exit.
    pub seconds: f64,
}

impl Finished {
    /// True for exit code 0 and no signal.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && self.signal.is_none()
    }

    /// "exit 0", "SIGSEGV", "timeout (SIGKILL after 600 s)".
    pub fn ended(&self) -> String {
        if self.timed_out {
            return format!("timeout (killed after {:.0} s)", self.seconds);
        }
        match (&self.signal, self.exit_code) {
            (Some(s), _) => s.clone(),
            (None, Some(c)) => format!("exit {c}"),
            (None, None) => "unknown end".to_string(),
        }
    }

    /// The exit status a shell would report: the code, or 128 + signal number.
    pub fn shell_code(&self) -> i32 {
        if let Some(c) = self.exit_code {
            return c;
        }
        self.signal
            .as_deref()
            .and_then(|s| s.parse::<nix::sys::signal::Signal>().ok())
            .map(|s| 128 + s as i32)
            .unwrap_or(1)
    }
}

/// Options for [`run`].
pub struct RunOpts<'a> {
    /// Label used in progress lines.
    pub label: &'a str,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Copy the child's lines to our stdout/stderr as they come.
    pub echo: bool,
    /// Seconds between progress lines (0: none).
    pub progress_every: u64,
}

/// The signal name of a signal number (`11` gives `SIGSEGV`).
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

/// The process group of the child now running, so an interrupt of the harness takes it down.
static CHILD_PGID: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_interrupt(sig: libc::c_int) {
    let pgid = CHILD_PGID.load(Ordering::SeqCst);
    // SIGTERM first, so a nested harness (a step of `ab test`) can take its own children
    // down, then SIGKILL after 300 ms.
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: 300_000_000,
    };
    // SAFETY: kill, nanosleep and _exit are async-signal-safe; a stale pgid only makes kill
    // fail.
    unsafe {
        if pgid > 0 {
            libc::kill(-pgid, libc::SIGTERM);
            libc::nanosleep(&pause, std::ptr::null_mut());
            libc::kill(-pgid, libc::SIGKILL);
        }
        libc::_exit(128 + sig);
    }
}

/// Installs the SIGINT/SIGTERM handler that kills the running child's process group.
pub fn install_interrupt_handler() {
    let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: installing a handler that only calls async-signal-safe functions.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// Runs `cmd` to the end (or its time limit) with stdout and stderr captured. The child gets
/// its own process group, so a time-out kills it with all its children, and it ends with
/// the harness ([`bundle::die_with_parent`]; this call waits for it, so its thread outlives it),
/// and so does every process of its group ([`bundle::GroupGuard`]).
///
/// Errors only when the child cannot be started; every way it can end is in [`Finished`].
pub fn run(cmd: &mut Command, opts: &RunOpts, watcher: &mut dyn Watcher) -> Result<Finished> {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    bundle::die_with_parent(cmd);
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    let pid = child.id() as i32;
    CHILD_PGID.store(pid, Ordering::SeqCst);
    // What the child starts (ctest's tests, a script's programs) goes with the harness too.
    let _guard = match bundle::GroupGuard::start(pid) {
        Ok(g) => Some(g),
        Err(e) => {
            crate::say(&format!(
                "warning: no guard for {:?}'s process group ({e}): what it starts would outlive \
                 a killed harness",
                cmd.get_program()
            ));
            None
        }
    };
    let (tx, rx) = mpsc::channel::<(Stream, Vec<u8>)>();
    let mut readers = Vec::new();
    for (stream, pipe) in [
        (
            Stream::Stdout,
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
        (
            Stream::Stderr,
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
    ] {
        let Some(pipe) = pipe else { continue };
        let tx = tx.clone();
        readers.push(std::thread::spawn(move || {
            let mut r = BufReader::new(pipe);
            loop {
                let mut buf = Vec::new();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send((stream, buf)).is_err() {
                            break;
                        }
                    }
                }
            }
        }));
    }
    drop(tx);
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut status = None;
    let mut timed_out = false;
    let mut last_progress = Instant::now();
    let mut exited_at: Option<Instant> = None;
    let mut pipes_open = true;
    loop {
        if pipes_open {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok((stream, bytes)) => {
                    let text = String::from_utf8_lossy(&bytes);
                    let line = text.trim_end_matches(['\n', '\r']);
                    watcher.line(stream, line);
                    if opts.echo {
                        match stream {
                            Stream::Stdout => println!("{line}"),
                            Stream::Stderr => eprintln!("{line}"),
                        }
                    }
                    match stream {
                        Stream::Stdout => out.extend_from_slice(&bytes),
                        Stream::Stderr => err.extend_from_slice(&bytes),
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => pipes_open = false,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
        if status.is_none() {
            if let Some(s) = child.try_wait().context("waiting for the child")? {
                status = Some(s);
                exited_at = Some(Instant::now());
            } else if started.elapsed() > opts.timeout && !timed_out {
                timed_out = true;
                // SAFETY: signalling the child's own process group.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
        } else if !pipes_open {
            break;
        } else if exited_at.is_some_and(|t| t.elapsed() > Duration::from_secs(5)) {
            // A grandchild still holds the pipes open; stop waiting for it.
            // SAFETY: signalling the (exited) child's process group, stragglers only.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            break;
        }
        if opts.progress_every > 0 && last_progress.elapsed().as_secs() >= opts.progress_every {
            last_progress = Instant::now();
            let how_far = watcher.status().unwrap_or_else(|| "running".into());
            crate::say(&format!(
                "  {}: {} ({})",
                opts.label,
                how_far,
                crate::fmt_secs(started.elapsed().as_secs_f64())
            ));
        }
    }
    CHILD_PGID.store(0, Ordering::SeqCst);
    let seconds = started.elapsed().as_secs_f64();
    let status = match status {
        Some(s) => s,
        None => child.wait().context("waiting for the child")?,
    };
    // Drain whatever the readers still hold.
    while let Ok((stream, bytes)) = rx.try_recv() {
        match stream {
            Stream::Stdout => out.extend_from_slice(&bytes),
            Stream::Stderr => err.extend_from_slice(&bytes),
        }
    }
    Ok(Finished {
        exit_code: status.code(),
        signal: status.signal().map(signal_name),
        timed_out,
        stdout: out,
        stderr: err,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> RunOpts<'static> {
        RunOpts {
            label: "t",
            timeout: Duration::from_secs(20),
            echo: false,
            progress_every: 0,
        }
    }

    #[test]
    fn exit_code_and_output() {
        let f = run(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            &opts(),
            &mut Quiet,
        )
        .unwrap();
        assert_eq!(f.exit_code, Some(3));
        assert_eq!(f.signal, None);
        assert_eq!(f.stdout, b"out\n");
        assert_eq!(f.stderr, b"err\n");
        assert_eq!(f.ended(), "exit 3");
    }

    #[test]
    fn a_segfault_is_a_result() {
        let f = run(
            Command::new("sh").args(["-c", "kill -SEGV $$"]),
            &opts(),
            &mut Quiet,
        )
        .unwrap();
        assert_eq!(f.exit_code, None);
        assert_eq!(f.signal.as_deref(), Some("SIGSEGV"));
        assert_eq!(f.shell_code(), 139);
        assert!(!f.success());
    }

    #[test]
    fn time_limit_kills() {
        let mut o = opts();
        o.timeout = Duration::from_millis(300);
        let f = run(Command::new("sleep").arg("30"), &o, &mut Quiet).unwrap();
        assert!(f.timed_out);
        assert_eq!(f.signal.as_deref(), Some("SIGKILL"));
        assert!(f.seconds < 10.0);
    }
}
