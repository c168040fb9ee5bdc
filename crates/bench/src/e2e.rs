//! End to end: the stock `llama-bench` with one arm's `libggml-base.so.0` swapped in.

use crate::arms::Arm;
use crate::probe::{self, ProbeStats};
use crate::sched::tail;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How to run llama-bench: model, repetitions per process, and an optional extra device.
#[derive(Debug, Clone)]
pub struct Setup {
    /// `target/llama-stock/bin/llama-bench`.
    pub llama_bench: PathBuf,
    /// The stock build's library directory (second on `LD_LIBRARY_PATH`).
    pub stock_lib_dir: PathBuf,
    /// The GGUF model.
    pub model: PathBuf,
    /// Threads (`-t`).
    pub threads: u32,
    /// Repetitions inside one process (`-r`).
    pub reps: u32,
    /// The scheduler probe, preloaded into every run.
    pub probe: PathBuf,
    /// Where the probe writes (one file, read and removed after each run).
    pub probe_out: PathBuf,
}

/// A device to run on: the CPU (no extra flags) or HRX (`GGML_BACKEND_PATH` + `-dev HRX0`).
#[derive(Debug, Clone, Serialize)]
pub struct Device {
    /// `CPU` or `HRX0`.
    pub name: String,
    /// The backend library to load through `GGML_BACKEND_PATH`, if any.
    pub backend_path: Option<PathBuf>,
}

/// Which llama-bench process a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// `-p 512 -n 128` with llama.cpp's defaults: it reuses a token's graph, so the
    /// scheduler plans a graph once per shape and the tokens measure the backends.
    Default,
    /// `-p 0 -n 128` with `LLAMA_GRAPH_REUSE_DISABLE=1`: every token's graph is built anew
    /// and goes through `ggml_backend_sched_reset` and `_alloc_graph`, as it does where
    /// llama.cpp cannot reuse a graph; its test is reported as [`REUSE_OFF_TEST`].
    ReuseOff,
}

/// The test name of [`Workload::ReuseOff`]'s tg128.
pub const REUSE_OFF_TEST: &str = "tg128, graph reuse off";

impl Workload {
    /// Both, in the order a round runs them.
    pub const ALL: [Workload; 2] = [Workload::Default, Workload::ReuseOff];
}

/// One llama-bench test result: `pp512` or `tg128`, with each repetition's tokens/s.
#[derive(Debug, Clone, Serialize)]
pub struct TestResult {
    pub test: String,
    pub samples_ts: Vec<f64>,
}

/// One llama-bench process: its tests and the scheduler time the probe saw.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRun {
    pub tests: Vec<TestResult>,
    pub probe: ProbeStats,
}

/// Runs llama-bench once for `arm` on `dev` (`workload`: pp512 + tg128, or tg128 with graph
/// reuse off) and checks from the dynamic loader's own log (`LD_DEBUG=libs`, "calling init:"
/// lines) that the arm's file, and the HRX library when one is used, were the ones mapped
/// (and, from the probe, that the scheduler calls went to the arm's file).
pub fn run(setup: &Setup, arm: &Arm, dev: &Device, workload: Workload) -> Result<BenchRun> {
    let _ = std::fs::remove_file(&setup.probe_out);
    let mut cmd = command(
        setup,
        &arm.ld_library_path(&setup.stock_lib_dir),
        dev,
        workload,
    );
    let output = cmd
        .output()
        .with_context(|| format!("starting {}", setup.llama_bench.display()))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        let useful = without_ld_debug(&stderr);
        bail!(
            "llama-bench ({}, arm {}) failed ({}): {}",
            dev.name,
            arm.key,
            output.status,
            tail(&useful, 1500)
        );
    }
    let inits = mapped_libs(&stderr);
    let base = inits
        .iter()
        .find(|p| p.ends_with("/libggml-base.so.0"))
        .with_context(|| {
            format!(
                "llama-bench arm {}: libggml-base.so.0 not in the loader log",
                arm.key
            )
        })?;
    arm.check_mapped(base, "llama-bench")?;
    if let Some(p) = &dev.backend_path {
        let want = p.canonicalize()?;
        if !inits.iter().any(|m| {
            Path::new(m)
                .canonicalize()
                .map(|c| c == want)
                .unwrap_or(false)
        }) {
            bail!(
                "llama-bench arm {}: {} was not mapped",
                arm.key,
                want.display()
            );
        }
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let parsed = crate::llama_bench::llama_bench_json(&stdout)?;
    // The reuse-off process asks for tg128 alone, and its result is renamed: a second test
    // would land in the same row and unpair the rounds.
    if workload == Workload::ReuseOff && parsed.len() != 1 {
        bail!(
            "llama-bench ({}, arm {}, graph reuse off) reported {} tests; -p 0 -n 128 asks for one",
            dev.name,
            arm.key,
            parsed.len()
        );
    }
    let probe = probe::take(&setup.probe_out)?;
    arm.check_mapped(&probe.lib, "llama-bench scheduler calls")?;
    let tests = parsed
        .into_iter()
        .map(|r| TestResult {
            test: match workload {
                Workload::Default => r.test,
                Workload::ReuseOff => REUSE_OFF_TEST.to_string(),
            },
            samples_ts: r.samples_ts,
        })
        .collect();
    Ok(BenchRun { tests, probe })
}

/// The llama-bench process of one arm (`ld_library_path`: the arm's folder first) on `dev`
/// for `workload`, under `timeout`, with the loader's log and the probe on.
fn command(setup: &Setup, ld_library_path: &str, dev: &Device, workload: Workload) -> Command {
    // Bounded: a hung process (a deadlock in the arm under test) must not hang the bench.
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=10", "900"]).arg(&setup.llama_bench);
    cmd.env("LD_LIBRARY_PATH", ld_library_path)
        .env("LD_DEBUG", "libs")
        .env("LD_PRELOAD", &setup.probe)
        .env("SCHED_PROBE_OUT", &setup.probe_out)
        .arg("-m")
        .arg(&setup.model);
    // The caller's own setting would turn graph reuse off in the default workload too.
    cmd.env_remove("LLAMA_GRAPH_REUSE_DISABLE");
    match workload {
        Workload::Default => cmd.args(["-p", "512", "-n", "128"]),
        Workload::ReuseOff => cmd
            .env("LLAMA_GRAPH_REUSE_DISABLE", "1")
            .args(["-p", "0", "-n", "128"]),
    };
    cmd.args(["-t", &setup.threads.to_string()]).args([
        "-r",
        &setup.reps.to_string(),
        "-o",
        "json",
    ]);
    if let Some(p) = &dev.backend_path {
        cmd.env("GGML_BACKEND_PATH", p).args(["-dev", &dev.name]);
    }
    cmd
}

/// A process's stderr without the loader's `LD_DEBUG` lines: what it said itself.
pub(crate) fn without_ld_debug(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !is_ld_debug(l))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn is_ld_debug(line: &str) -> bool {
    // LD_DEBUG lines look like "     12345:\tcalling init: /path".
    let t = line.trim_start();
    let digits = t.chars().take_while(|c| c.is_ascii_digit()).count();
    digits > 0 && t[digits..].starts_with(':')
}

/// Paths from the loader's "calling init:" lines: every shared object the process ran.
pub(crate) fn mapped_libs(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| is_ld_debug(l))
        .filter_map(|l| {
            l.split_once("calling init:")
                .map(|(_, p)| p.trim().to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> Setup {
        Setup {
            llama_bench: "/b/llama-bench".into(),
            stock_lib_dir: "/b".into(),
            model: "/m.gguf".into(),
            threads: 2,
            reps: 3,
            probe: "/p.so".into(),
            probe_out: "/p.jsonl".into(),
        }
    }

    fn env_of(cmd: &Command, key: &str) -> Option<Option<String>> {
        cmd.get_envs()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()))
    }

    fn args_of(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_default_workload_keeps_graph_reuse_on_whatever_the_caller_set() {
        let cpu = Device {
            name: "CPU".into(),
            backend_path: None,
        };
        let cmd = command(&setup(), "/arm:/b", &cpu, Workload::Default);
        // Removed, not inherited: a caller's LLAMA_GRAPH_REUSE_DISABLE=1 does not reach it.
        assert_eq!(env_of(&cmd, "LLAMA_GRAPH_REUSE_DISABLE"), Some(None));
        assert_eq!(
            env_of(&cmd, "LD_LIBRARY_PATH"),
            Some(Some("/arm:/b".into()))
        );
        assert_eq!(
            args_of(&cmd).join(" "),
            "--kill-after=10 900 /b/llama-bench -m /m.gguf -p 512 -n 128 -t 2 -r 3 -o json"
        );
    }

    #[test]
    fn the_reuse_off_workload_is_tg128_alone_with_reuse_disabled() {
        let hrx = Device {
            name: "HRX0".into(),
            backend_path: Some("/l/libggml-hrx.so".into()),
        };
        let cmd = command(&setup(), "/arm:/b", &hrx, Workload::ReuseOff);
        assert_eq!(
            env_of(&cmd, "LLAMA_GRAPH_REUSE_DISABLE"),
            Some(Some("1".into()))
        );
        assert_eq!(
            env_of(&cmd, "GGML_BACKEND_PATH"),
            Some(Some("/l/libggml-hrx.so".into()))
        );
        assert_eq!(
            args_of(&cmd).join(" "),
            "--kill-after=10 900 /b/llama-bench -m /m.gguf -p 0 -n 128 -t 2 -r 3 -o json -dev HRX0"
        );
    }

    #[test]
    fn loader_log_lines_are_recognized() {
        let log = "     15784:\tcalling init: /tmp/a/libggml-base.so.0\nmain: loading model\n  12:\tfind library=x\n";
        assert_eq!(
            mapped_libs(log),
            vec!["/tmp/a/libggml-base.so.0".to_string()]
        );
        assert!(!is_ld_debug("main: loading model"));
        assert!(is_ld_debug("  12:\tfind library=x"));
    }
}
