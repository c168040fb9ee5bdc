//! Building the C driver and running it against one library (an "arm"), with crash
//! isolation: a process that dies inside a seed is recorded for that seed and a new
//! process resumes at the next seed.

use crate::outcome::{parse_blocks, Crash, SeedRun};
use anyhow::{bail, Context, Result};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use wait_timeout::ChildExt;

/// The file name the dynamic loader looks for (the DT_NEEDED entry of the driver).
pub const SONAME: &str = "libggml-base.so.0";

/// The compiled C driver.
pub struct Program {
    /// Path of the executable (`target/sched-diff/sched_diff`).
    pub exe: PathBuf,
}

/// One side of the comparison: a library file and the directory that presents it to the
/// loader under [`SONAME`].
#[derive(Debug, Clone)]
pub struct Arm {
    /// `A`, `B`, or `B (rule off)` ([`Arm::with_rule_off`]).
    pub label: &'static str,
    /// The library file as given on the command line, canonicalized.
    pub lib: PathBuf,
    /// A directory holding only a symlink `libggml-base.so.0` -> `lib`; it becomes the
    /// process's whole `LD_LIBRARY_PATH`.
    pub dir: PathBuf,
    /// Extra environment for this arm's processes (the self-test's perturbation).
    pub env: Vec<(String, String)>,
}

impl Arm {
    /// Prepares `<work>/arm-<label>/libggml-base.so.0` -> `lib` (`work` is private to this
    /// process). Errors when `lib` does not exist.
    pub fn new(label: &'static str, lib: &Path, work: &Path) -> Result<Arm> {
        let lib = lib
            .canonicalize()
            .with_context(|| format!("library for arm {label}: {}", lib.display()))?;
        let dir = work.join(format!("arm-{}", label.to_ascii_lowercase()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let link = dir.join(SONAME);
        if link.symlink_metadata().is_ok() {
            std::fs::remove_file(&link).with_context(|| format!("removing {}", link.display()))?;
        }
        std::os::unix::fs::symlink(&lib, &link)
            .with_context(|| format!("linking {} -> {}", link.display(), lib.display()))?;
        Ok(Arm {
            label,
            lib,
            dir,
            env: Vec::new(),
        })
    }

    /// The same library and environment with our in-place storage rule turned off
    /// (`GGML_SCHED_INPLACE_RULE=0`): the parity mode, in which our scheduler must decide
    /// exactly as stock. A stock library ignores the variable.
    pub fn with_rule_off(&self) -> Arm {
        let mut arm = self.clone();
        arm.label = "B (rule off)";
        arm.env.retain(|(k, _)| k != "GGML_SCHED_INPLACE_RULE");
        arm.env.push(("GGML_SCHED_INPLACE_RULE".into(), "0".into()));
        arm
    }

    fn command(&self, exe: &Path) -> Command {
        let mut cmd = Command::new(exe);
        cmd.env("LD_LIBRARY_PATH", &self.dir)
            .env("GGML_NO_BACKTRACE", "1")
            .env_remove("SCHED_DIFF_PERTURB")
            .env_remove("GGML_SCHED_DEBUG");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }
}

/// Compiles `src` with the flags the brief fixes (C11, `-Wall -Wextra -Wpedantic -Werror`)
/// against the pinned headers, together with the shared fake backend
/// (`cabi-tests/common/fake_backend.c`, found beside `src`'s directory), linked against
/// `link_dir/libggml-base.so.0`, into `work/sched_diff`. The compiler is `$CC` or `cc`.
pub fn compile(src: &Path, ggml_dir: &Path, link_dir: &Path, work: &Path) -> Result<Program> {
    let common = src
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."))
        .join("common");
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let exe = work.join("sched_diff");
    let tmp = work.join(format!("sched_diff.tmp{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(&cc)
        .args([
            "-std=c11",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
        ])
        .arg(format!("-I{}", ggml_dir.join("include").display()))
        .arg(format!("-I{}", ggml_dir.join("src").display()))
        .arg(format!("-I{}", common.display()))
        .arg(src)
        .arg(common.join("fake_backend.c"))
        .arg("-o")
        .arg(&tmp)
        .arg(format!("-L{}", link_dir.display()))
        .arg(format!("-l:{SONAME}"))
        .output()
        .with_context(|| format!("running {cc}"))?;
    if !out.status.success() {
        bail!(
            "compiling {} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::rename(&tmp, &exe).with_context(|| format!("renaming to {}", exe.display()))?;
    Ok(Program { exe })
}

/// Asks the driver (`SCHED_DIFF_MAPS=1`, no seeds) which ggml library files its process
/// mapped, as read from its own `/proc/self/maps`.
pub fn mapped_libs(prog: &Program, arm: &Arm) -> Result<Vec<PathBuf>> {
    let out = arm
        .command(&prog.exe)
        .args(["0", "0"])
        .env("SCHED_DIFF_MAPS", "1")
        .output()
        .context("running the driver for its maps")?;
    if !out.status.success() {
        bail!(
            "driver failed under arm {}: {}",
            arm.label,
            failure_text(out.status, &out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("MAPPED "))
        .map(PathBuf::from)
        .collect())
}

struct ProcessResult {
    stdout: String,
    stderr: String,
    /// `None` when the process exited with status 0.
    failure: Option<String>,
}

fn describe_signal(sig: i32) -> String {
    let name = match sig {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        _ => "",
    };
    if name.is_empty() {
        format!("signal {sig}")
    } else {
        format!("signal {sig} ({name})")
    }
}

fn run_once(
    prog: &Program,
    arm: &Arm,
    start: u64,
    count: u64,
    timeout: Duration,
) -> Result<ProcessResult> {
    let mut child = arm
        .command(&prog.exe)
        .arg(start.to_string())
        .arg(count.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", prog.exe.display()))?;
    let mut so = child.stdout.take().context("no stdout pipe")?;
    let mut se = child.stderr.take().context("no stderr pipe")?;
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let failure = match child
        .wait_timeout(timeout)
        .context("waiting for the driver")?
    {
        Some(status) => {
            use std::os::unix::process::ExitStatusExt;
            if status.success() {
                None
            } else if let Some(sig) = status.signal() {
                Some(describe_signal(sig))
            } else {
                Some(format!("exit code {}", status.code().unwrap_or(-1)))
            }
        }
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Some(format!("timeout after {} s", timeout.as_secs()))
        }
    };
    let stdout = String::from_utf8_lossy(&out_reader.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
    Ok(ProcessResult {
        stdout,
        stderr,
        failure,
    })
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs seeds `start .. start+count` under `arm` and returns one [`SeedRun`] per seed, in
/// order. A process that dies inside a seed marks that seed crashed; the next process
/// starts at the following seed. `timeout` bounds each process.
pub fn run_range(
    prog: &Program,
    arm: &Arm,
    start: u64,
    count: u64,
    timeout: Duration,
) -> Result<Vec<SeedRun>> {
    let end = start + count;
    let mut next = start;
    let mut runs = Vec::with_capacity(count as usize);
    while next < end {
        let res = run_once(prog, arm, next, end - next, timeout)?;
        let blocks = parse_blocks(&res.stdout)
            .with_context(|| format!("arm {}: output of seeds from {next}", arm.label))?;
        let mut crashed_in_block = false;
        for b in blocks {
            if b.seed != next {
                bail!(
                    "arm {}: expected seed {next}, the driver printed seed {}",
                    arm.label,
                    b.seed
                );
            }
            let crash = if b.complete {
                None
            } else {
                crashed_in_block = true;
                Some(Crash {
                    how: res
                        .failure
                        .clone()
                        .unwrap_or_else(|| "stopped without END".to_string()),
                    abort: b.abort,
                    stderr_tail: tail(&res.stderr, 8),
                })
            };
            runs.push(SeedRun {
                seed: b.seed,
                lines: b.lines,
                crash,
            });
            next += 1;
        }
        if next < end && !crashed_in_block {
            // died (or stopped) between seeds: charge the next seed so the loop advances
            runs.push(SeedRun {
                seed: next,
                lines: Vec::new(),
                crash: Some(Crash {
                    how: res
                        .failure
                        .clone()
                        .unwrap_or_else(|| "exited before the seed began".to_string()),
                    abort: None,
                    stderr_tail: tail(&res.stderr, 8),
                }),
            });
            next += 1;
        }
    }
    Ok(runs)
}

/// How a driver process failed: its exit status or signal (a library the loader maps but
/// cannot run, a truncated file say, dies by a signal and prints nothing), then what it
/// printed on stderr, if anything.
fn failure_text(status: std::process::ExitStatus, stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.is_empty() {
        format!("{status}, nothing on stderr")
    } else {
        format!("{status}: {text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver killed by a signal before it printed anything is not reported as an empty
    /// reason ("driver failed under arm B: ").
    #[test]
    fn a_silent_failure_names_its_status() {
        let out = Command::new("sh")
            .args(["-c", "kill -BUS $$"])
            .output()
            .unwrap();
        let t = failure_text(out.status, &out.stderr);
        assert!(t.contains("SIGBUS"), "{t}");
        assert!(t.ends_with("nothing on stderr"), "{t}");
        let out = Command::new("sh")
            .args(["-c", "echo 'file too short' >&2; exit 127"])
            .output()
            .unwrap();
        assert_eq!(
            failure_text(out.status, &out.stderr),
            "exit status: 127: file too short"
        );
    }
}
