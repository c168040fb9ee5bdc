//! Real model graphs: the stock `test-llama-archs` (random-weight models of every
//! architecture, run on the CPU) with one arm swapped in and the scheduler probe preloaded.

use crate::arms::Arm;
use crate::probe::{self, ProbeStats};
use crate::sched::tail;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// One test-llama-archs process.
#[derive(Debug, Clone, Serialize)]
pub struct ArchsRun {
    /// Wall time of the whole process, seconds.
    pub wall_s: f64,
    /// Exit status 0.
    pub passed: bool,
    /// The test's "Summary:" line when its (asynchronous) log printed it before exit.
    pub summary: Option<String>,
    /// Scheduler time the probe saw.
    pub probe: ProbeStats,
}

/// Runs `test-llama-archs [-a filter]` once for `arm`; a failing test is reported, not an error
/// (the probe figures still count), but a missing probe line or a wrong library is.
pub fn run(
    bin: &Path,
    stock_lib_dir: &Path,
    probe_lib: &Path,
    probe_out: &Path,
    arm: &Arm,
    filter: Option<&str>,
) -> Result<ArchsRun> {
    let _ = std::fs::remove_file(probe_out);
    // Bounded: a hung process (a deadlock in the arm under test) must not hang the bench.
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=10", "1200"]).arg(bin);
    cmd.env("LD_LIBRARY_PATH", arm.ld_library_path(stock_lib_dir))
        .env("LD_PRELOAD", probe_lib)
        .env("SCHED_PROBE_OUT", probe_out);
    if let Some(f) = filter {
        cmd.args(["-a", f]);
    }
    let t0 = Instant::now();
    let output = cmd
        .output()
        .with_context(|| format!("starting {}", bin.display()))?;
    let wall_s = t0.elapsed().as_secs_f64();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = text
        .lines()
        .find(|l| l.starts_with("Summary:"))
        .map(str::to_string);
    let probe = match probe::take(probe_out) {
        Ok(p) => p,
        Err(e) => bail!(
            "test-llama-archs arm {} ({}): {e:#}: {}",
            arm.key,
            output.status,
            tail(&text, 800)
        ),
    };
    arm.check_mapped(&probe.lib, "test-llama-archs scheduler calls")?;
    Ok(ArchsRun {
        wall_s,
        passed: output.status.success(),
        summary,
        probe,
    })
}
