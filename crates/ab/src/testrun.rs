//! `ab test`: runs the steps of [`crate::test_steps::STEPS`] in order, each printed with its
//! name, result and time, then a table and the final line `N passed, M failed`.

use crate::machine;
use crate::paths::Paths;
use crate::proc::{self, RunOpts, Stream, Watcher};
use crate::test_steps::{Run, STEPS};
use crate::{fmt_secs, say};
use anyhow::{Context, Result};
use std::process::Command;
use std::time::{Duration, Instant};

/// What a step's output says beyond its exit status: the sums of cargo test's
/// `test result: ok. N passed; M failed; ...` lines, and whether anything it ran wrote on a
/// full disk.
#[derive(Default)]
struct StepWatch {
    passed: u64,
    failed: u64,
    suites: u64,
    disk_full: bool,
}

/// The texts of `ENOSPC` and `EDQUOT` (`strerror`, as Rust, Python, C tools and the shell
/// print them).
const DISK_FULL: [&str; 2] = ["No space left on device", "Disk quota exceeded"];

/// Parses one `test result:` line into (passed, failed).
pub fn cargo_result(line: &str) -> Option<(u64, u64)> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let mut passed = None;
    let mut failed = None;
    for part in rest.split(';') {
        let words: Vec<&str> = part.split_whitespace().collect();
        let n = |w: &[&str]| w.iter().rev().nth(1).and_then(|x| x.parse::<u64>().ok());
        match words.last() {
            Some(&"passed") => passed = n(&words),
            Some(&"failed") => failed = n(&words),
            _ => {}
        }
    }
    Some((passed?, failed?))
}

impl Watcher for StepWatch {
    fn line(&mut self, _s: Stream, line: &str) {
        if let Some((p, f)) = cargo_result(line) {
            self.passed += p;
            self.failed += f;
            self.suites += 1;
        }
        self.disk_full |= DISK_FULL.iter().any(|text| line.contains(text));
    }
}

/// How one step went.
struct Outcome {
    name: &'static str,
    ok: bool,
    detail: String,
    seconds: f64,
}

/// Runs the test suite; returns the exit code (0 when every step passed).
pub fn run(paths: &Paths) -> Result<u8> {
    let me = std::env::current_exe().context("finding the ab binary")?;
    let started = Instant::now();
    let mut results = Vec::new();
    let machine = machine::this_machine();
    say(&format!("machine: {machine}"));
    for (i, step) in STEPS.iter().enumerate() {
        say(&format!(
            "==> step {}/{}: {} ({} elapsed)",
            i + 1,
            STEPS.len(),
            step.name,
            fmt_secs(started.elapsed().as_secs_f64())
        ));
        say(&format!("    {}", step.compares.describe()));
        let mut counts = StepWatch::default();
        let mut cmd = match step.run {
            Run::Ab(args) => {
                let mut c = Command::new(&me);
                c.args(args);
                c
            }
            Run::CargoTest => {
                let mut c = Command::new("cargo");
                // Every test binary runs even after one fails: cargo's default stops at the
                // first failing binary, and the counts then hide the hundreds never run.
                c.args(["test", "--workspace", "--release", "--no-fail-fast"]);
                c
            }
            Run::Cargo(args) => {
                let mut c = Command::new("cargo");
                c.args(args);
                c
            }
            Run::Script(path, args) => {
                let mut c = Command::new("bash");
                c.arg(paths.root.join(path)).args(args);
                c
            }
        };
        cmd.current_dir(&paths.root);
        // The suite checks HRX on the simulator: its comparisons hold on the CPU kernels'
        // numeric path. On a machine with a GPU the default `auto` would take the CUDA
        // runtime; the GPU checks are `gpu/run.sh hrxcheck`, outside the suite.
        cmd.env("GGML_HRX_RUNTIME", "sim");
        let f = proc::run(
            &mut cmd,
            &RunOpts {
                label: step.name,
                timeout: Duration::from_secs(3 * 3600),
                echo: true,
                progress_every: 60,
            },
            &mut counts,
        );
        let (ok, mut detail, seconds) = match f {
            Err(e) => (false, format!("could not start: {e:#}"), 0.0),
            Ok(f) => {
                let stderr = String::from_utf8_lossy(&f.stderr);
                let mut detail = f.ended();
                if matches!(step.run, Run::CargoTest) {
                    detail = format!(
                        "{}; {} tests passed, {} failed in {} test binaries",
                        detail, counts.passed, counts.failed, counts.suites
                    );
                }
                if stderr.contains("unknown subcommand") {
                    detail.push_str("; subcommand not implemented yet");
                }
                // A full disk fails whatever wrote at that moment, far from the cause.
                if !f.success() && counts.disk_full {
                    detail.push_str("; the disk was full (it said \"No space left on device\" or \"Disk quota exceeded\")");
                }
                (f.success(), detail, f.seconds)
            }
        };
        if step.compares.depends_on_cpu() {
            detail.push_str("; values compared on this CPU");
        }
        say(&format!(
            "<== {}: {} ({}; {})",
            step.name,
            if ok { "PASS" } else { "FAIL" },
            detail,
            fmt_secs(seconds)
        ));
        results.push(Outcome {
            name: step.name,
            ok,
            detail,
            seconds,
        });
    }
    print!(
        "{}",
        summary(&results, &machine, started.elapsed().as_secs_f64())
    );
    let failed = results.iter().filter(|r| !r.ok).count();
    Ok(if failed == 0 { 0 } else { 1 })
}

/// The closing summary: a blank line, one line per step, the machine, the total time and
/// the last line `N passed, M failed` (CI reads that one).
fn summary(results: &[Outcome], machine: &str, total_seconds: f64) -> String {
    use std::fmt::Write;
    let width = results.iter().map(|r| r.name.len()).max().unwrap_or(4);
    let mut out = String::from("\n");
    // Writing into a String cannot fail.
    let _ = writeln!(out, "{:<width$}  result  time        detail", "step");
    for r in results {
        let _ = writeln!(
            out,
            "{:<width$}  {:<6}  {:<10}  {}",
            r.name,
            if r.ok { "PASS" } else { "FAIL" },
            fmt_secs(r.seconds),
            r.detail
        );
    }
    let passed = results.iter().filter(|r| r.ok).count();
    let failed = results.len() - passed;
    let _ = writeln!(out, "machine: {machine}");
    let _ = writeln!(out, "total time {}", fmt_secs(total_seconds));
    let _ = writeln!(out, "{passed} passed, {failed} failed");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_result_lines() {
        assert_eq!(
            cargo_result("test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s"),
            Some((12, 0))
        );
        assert_eq!(
            cargo_result(
                "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out"
            ),
            Some((3, 2))
        );
        assert_eq!(cargo_result("running 3 tests"), None);
    }

    #[test]
    fn a_full_disk_is_seen_in_any_line_of_a_step() {
        let mut watch = StepWatch::default();
        watch.line(
            Stream::Stdout,
            "test result: ok. 2 passed; 0 failed; 0 ignored",
        );
        assert!(!watch.disk_full);
        watch.line(
            Stream::Stderr,
            "error: failed to write to `target/x.rmeta`: No space left on device (os error 28)",
        );
        watch.line(
            Stream::Stdout,
            "test result: ok. 1 passed; 1 failed; 0 ignored",
        );
        assert!(watch.disk_full);
        assert_eq!((watch.passed, watch.failed, watch.suites), (3, 1, 2));
        let mut quota = StepWatch::default();
        quota.line(Stream::Stdout, "cp: error writing 'x': Disk quota exceeded");
        assert!(quota.disk_full);
    }

    #[test]
    fn the_summary_renders_exactly() {
        let step = |name, ok, detail: &str, seconds| Outcome {
            name,
            ok,
            detail: detail.into(),
            seconds,
        };
        let results = [
            step("fetch pins", true, "exit 0", 1.4),
            step(
                "cargo test --workspace --release",
                true,
                "exit 0; 412 tests passed, 0 failed in 31 test binaries",
                421.7,
            ),
            step("scheduler differential", false, "exit 1", 12.0),
            step(
                "upstream suites, stock vs ours",
                true,
                "exit 0; values compared on this CPU",
                2287.5,
            ),
        ];
        let machine =
            "AMD EPYC 7B13 64-Core Processor, 2 cores, CPU features: SSE3 SSSE3 AVX AVX2 F16C FMA";
        let expected = "
step                              result  time        detail
fetch pins                        PASS    1.4 s       exit 0
cargo test --workspace --release  PASS    7 min 02 s  exit 0; 412 tests passed, 0 failed in 31 test binaries
scheduler differential            FAIL    12.0 s      exit 1
upstream suites, stock vs ours    PASS    38 min 08 s  exit 0; values compared on this CPU
machine: AMD EPYC 7B13 64-Core Processor, 2 cores, CPU features: SSE3 SSSE3 AVX AVX2 F16C FMA
total time 45 min 23 s
3 passed, 1 failed
";
        assert_eq!(summary(&results, machine, 2723.0), expected);
    }
}
