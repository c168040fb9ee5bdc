//! The in-process scheduler probe (`cabi-tests/sched-bench/sched_probe.c`): built as an
//! LD_PRELOAD library, it times `ggml_backend_sched_alloc_graph`, `ggml_backend_sched_reserve`,
//! `ggml_backend_sched_reset`, `ggml_backend_sched_graph_compute_async` and
//! `ggml_backend_sched_synchronize` inside unchanged llama.cpp processes and appends one JSON
//! line per process to a file.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Path, PathBuf};

/// Calls of one scheduler function in one process.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize)]
pub struct Counter {
    /// Calls made.
    pub calls: i64,
    /// Total wall time inside the function, ns.
    pub ns: i64,
    /// Total graph nodes over the calls.
    pub nodes: i64,
}

impl Counter {
    /// Mean ns per call, 0 when there were no calls.
    pub fn per_call_ns(&self) -> f64 {
        if self.calls > 0 {
            self.ns as f64 / self.calls as f64
        } else {
            0.0
        }
    }
}

/// What the probe wrote for one process.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ProbeStats {
    /// The libggml-base file the calls went to.
    pub lib: String,
    /// `ggml_backend_sched_alloc_graph`.
    pub alloc_graph: Counter,
    /// `ggml_backend_sched_reserve`.
    pub reserve: Counter,
    /// `ggml_backend_sched_reset` (nodes 0); absent from lines of older probes.
    #[serde(default)]
    pub reset: Counter,
    /// `ggml_backend_sched_graph_compute_async`: the host's part of a compute (CPU splits,
    /// blocking input copies, queueing device work); absent from lines of older probes.
    #[serde(default)]
    pub compute: Counter,
    /// `ggml_backend_sched_synchronize` (nodes 0): the wait for the devices; absent from lines
    /// of older probes.
    #[serde(default)]
    pub synchronize: Counter,
}

/// Compiles the probe into `<out>/libsched-probe.so` ([`crate::cbuild::compile`]) against the
/// pinned sources' headers.
pub fn build(ws: &Path, upstream: &Path, out: &Path) -> Result<PathBuf> {
    build_with(ws, &upstream.join("ggml/include"), out)
}

/// Compiles `<root>/cabi-tests/sched-bench/sched_probe.c` (a workspace or a bundle root) into
/// `<out>/libsched-probe.so` against the ggml headers in `include`.
pub fn build_with(root: &Path, include: &Path, out: &Path) -> Result<PathBuf> {
    crate::cbuild::compile(
        &root.join("cabi-tests/sched-bench/sched_probe.c"),
        &out.join("libsched-probe.so"),
        &[include.to_path_buf()],
        &["-fPIC", "-shared"],
        &["-ldl".as_ref()],
    )
}

/// Reads and removes the probe's output file; the last line is the process's.
pub fn take(path: &Path) -> Result<ProbeStats> {
    let text =
        fs::read_to_string(path).with_context(|| format!("probe wrote no {}", path.display()))?;
    let _ = fs::remove_file(path);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .context("probe output is empty")?;
    serde_json::from_str(line).with_context(|| format!("parsing probe line {line}"))
}
