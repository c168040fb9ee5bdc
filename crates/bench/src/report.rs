//! The report: the structs `report.json` is written from (its contract: the field names and
//! units below are what readers of that file rely on), the rounds that fill them
//! ([`rounds`]) and the markdown they render to ([`markdown`]).
//!
//! Units, unless a field says otherwise: times are nanoseconds (the markdown prints µs or ms),
//! sizes are bytes, ratios are B / A (below 1 means arm B is faster or smaller). Pairs written
//! `[A, B]` are indexed by arm, 0 = A, 1 = B. A `null` (`None`) figure was not measured: the
//! run failed, was skipped, or had no sample to summarize.

mod markdown;
mod rounds;

#[cfg(test)]
mod fixture;

pub use rounds::{round_order, run_e2e, run_sched};

use crate::archs::ArchsRun;
use crate::arms::{Arm, Machine};
use crate::e2e;
use crate::probe::ProbeStats;
use crate::sched::{Callgrind, Config, Heap};
use crate::stats::Summary;
use serde::Serialize;

/// Goal: scheduler overhead of B at most this fraction of A's.
pub const GOAL_OVERHEAD: f64 = 0.5;
/// Goal: end-to-end tokens/s of B at least this multiple of A's.
pub const GOAL_TOKENS: f64 = 1.0;

/// Both arms' compute buffer size for one backend.
#[derive(Debug, Clone, Serialize)]
pub struct BufferRow {
    /// Backend name as the C program's devices call it (`FAKE0`, `FAKE1`, `FCPU`).
    pub backend: String,
    /// Arm A's `ggml_backend_sched_get_buffer_size`, bytes.
    pub a: u64,
    /// Arm B's, bytes; 0 when B reported no buffer for this backend.
    pub b: u64,
}

/// Everything measured for one graph configuration.
#[derive(Debug, Clone, Serialize)]
pub struct SchedRow {
    /// The graph and backend count.
    pub config: Config,
    /// Set when a run failed: no later round ran this configuration, and callgrind skipped
    /// it; the other fields then hold what was measured before (0 and empty when nothing was).
    pub error: Option<String>,
    /// Graph nodes, from arm A's first run (0 when A never ran).
    pub nodes: u32,
    /// Graph leafs, from arm A's first run (0 when A never ran).
    pub leafs: u32,
    /// Splits the scheduler made, `[A, B]`, from each arm's first run (0 when it never ran).
    pub splits: [u32; 2],
    /// Per-process medians of the cycle time, ns, in round order: `[A, B]`.
    pub cycle_runs: [Vec<f64>; 2],
    /// Summary over processes of `cycle_runs`, ns; `None` for an arm with no run.
    pub cycle: [Option<Summary>; 2],
    /// Per-round B/A of the cycle medians (a ratio); `None` when no round had both arms.
    pub cycle_paired: Option<Summary>,
    /// Per-process medians of reset + split_graph alone, ns, in round order: `[A, B]`.
    pub split_runs: [Vec<f64>; 2],
    /// Summary over processes of `split_runs`, ns; `None` for an arm with no run.
    pub split: [Option<Summary>; 2],
    /// Per-process medians of `ggml_backend_sched_reserve`, ns, `[A, B]`.
    pub reserve_runs: [Vec<f64>; 2],
    /// Summary over processes of `reserve_runs`, ns; `None` for an arm with no run.
    pub reserve: [Option<Summary>; 2],
    /// Per-process medians of a new scheduler's first `alloc_graph` after its reserve, ns,
    /// `[A, B]`.
    pub first_alloc_runs: [Vec<f64>; 2],
    /// Summary over processes of `first_alloc_runs`, ns; `None` for an arm with no run.
    pub first_alloc: [Option<Summary>; 2],
    /// Compute buffer sizes per backend (A's backends, in A's order); empty unless both arms
    /// ran.
    pub buffers: Vec<BufferRow>,
    /// Heap traffic of each arm's first run, bytes and allocation counts; `None` for an arm
    /// with no run.
    pub heap: [Option<Heap>; 2],
    /// Instruction counts of the cycle, `[A, B]`; `None` when callgrind was off (`--no-callgrind`),
    /// the configuration failed, or that callgrind run failed.
    pub callgrind: [Option<Callgrind>; 2],
    /// Instruction counts of `reserve`, `[A, B]`; `None` as for `callgrind`.
    pub callgrind_reserve: [Option<Callgrind>; 2],
}

impl SchedRow {
    /// A row for `config` with nothing measured yet: no error, zero counts, no runs.
    pub fn empty(config: Config) -> SchedRow {
        SchedRow {
            config,
            error: None,
            nodes: 0,
            leafs: 0,
            splits: [0, 0],
            cycle_runs: [vec![], vec![]],
            cycle: [None, None],
            cycle_paired: None,
            split_runs: [vec![], vec![]],
            split: [None, None],
            reserve_runs: [vec![], vec![]],
            reserve: [None, None],
            first_alloc_runs: [vec![], vec![]],
            first_alloc: [None, None],
            buffers: vec![],
            heap: [None, None],
            callgrind: [None, None],
            callgrind_reserve: [None, None],
        }
    }

    /// median(B) / median(A) of the cycle time.
    pub fn ratio(&self) -> Option<f64> {
        median_ratio(&self.cycle)
    }

    /// median(B) / median(A) of split_graph alone.
    fn split_ratio(&self) -> Option<f64> {
        median_ratio(&self.split)
    }

    /// median(B) / median(A) of `reserve`.
    fn reserve_ratio(&self) -> Option<f64> {
        median_ratio(&self.reserve)
    }

    /// median(B) / median(A) of a new scheduler's first `alloc_graph`.
    fn first_alloc_ratio(&self) -> Option<f64> {
        median_ratio(&self.first_alloc)
    }

    /// B/A of the cycle's instruction counts.
    fn ir_ratio(&self) -> Option<f64> {
        ir_ratio(&self.callgrind)
    }
}

/// median(B) / median(A), when both arms have a summary and A's median is not 0.
fn median_ratio(s: &[Option<Summary>; 2]) -> Option<f64> {
    match s {
        [Some(a), Some(b)] if a.median > 0.0 => Some(b.median / a.median),
        _ => None,
    }
}

/// B/A of the instruction counts, when both arms have one.
fn ir_ratio(c: &[Option<Callgrind>; 2]) -> Option<f64> {
    match c {
        [Some(a), Some(b)] if a.ir_per_cycle > 0 => {
            Some(b.ir_per_cycle as f64 / a.ir_per_cycle as f64)
        }
        _ => None,
    }
}

/// One end-to-end test on one device.
#[derive(Debug, Clone, Serialize)]
pub struct E2eRow {
    /// The llama-bench device (`CPU`, `HRX0`).
    pub device: String,
    /// The llama-bench test (`pp512`, `tg128`).
    pub test: String,
    /// Every repetition's tokens/s, `[A, B]`.
    pub samples: [Vec<f64>; 2],
    /// Summary of `samples`, tokens/s; `None` for an arm with no sample.
    pub ts: [Option<Summary>; 2],
    /// Per-round B/A of each process's mean tokens/s (a ratio); `None` when no round had
    /// both arms.
    pub paired: Option<Summary>,
    /// Two-sided p of the signed-rank test that those per-round B/A are centred on 1
    /// ([`crate::stats::signed_rank_p`]); `None` when there is none other than 1.
    pub paired_p: Option<f64>,
}

impl E2eRow {
    /// median(B) / median(A) tokens/s.
    pub fn ratio(&self) -> Option<f64> {
        median_ratio(&self.ts)
    }
}

/// The scheduler time the probe saw inside llama-bench on one device, per process, `[A, B]`.
#[derive(Debug, Clone, Serialize)]
pub struct E2eProbe {
    /// The llama-bench device.
    pub device: String,
    /// True for the processes of [`crate::e2e::Workload::ReuseOff`] (a graph built and
    /// allocated every token), false for the default workload's.
    pub reuse_off: bool,
    /// One entry per llama-bench process, in round order (times in ns, see [`ProbeStats`]).
    pub runs: [Vec<ProbeStats>; 2],
}

/// The whole report, as written to `report.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The command line that produced the report.
    pub command: String,
    /// Start, UTC, ISO 8601.
    pub started_utc: String,
    /// End, UTC, ISO 8601.
    pub finished_utc: String,
    /// Wall time of the whole run, seconds.
    pub wall_seconds: f64,
    /// The machine the figures come from.
    pub machine: Machine,
    /// 1-minute load average at the start (a noise indicator on a shared machine).
    pub loadavg_start: f64,
    /// 1-minute load average at the end.
    pub loadavg_end: f64,
    /// The arms, `[A, B]`.
    pub arms: [Arm; 2],
    /// Scheduler rounds asked (`--rounds`): one process per arm per configuration per round.
    pub rounds: u32,
    /// Timed iterations per scheduler process (`--iters`).
    pub iters: u32,
    /// llama-bench rounds asked (`--e2e-rounds`); the time budget may stop them earlier.
    pub e2e_rounds: u32,
    /// llama-bench repetitions per process (`-r`).
    pub e2e_reps: u32,
    /// 1-3: one row per graph configuration, in the order they ran.
    pub sched: Vec<SchedRow>,
    /// test-llama-archs rounds asked (`--archs-rounds`).
    pub archs_rounds: u32,
    /// The architecture filter given to test-llama-archs (`-a`); `None` runs them all.
    pub archs_filter: Option<String>,
    /// 4: test-llama-archs processes, `[A, B]`.
    pub archs: [Vec<ArchsRun>; 2],
    /// Why the test-llama-archs rounds stopped early; `None` when every round ran.
    pub archs_error: Option<String>,
    /// The HRX library used by both arms (path, sha256), when it exists and `--no-hrx` is off.
    pub hrx: Option<(String, String)>,
    /// 5: rounds asked (`--cycle-rounds`).
    pub cycle_rounds: u32,
    /// 5: model files `test-llama-archs -o` wrote (0 when 5 did not run).
    pub cycle_models: usize,
    /// 5: the runs per device configuration.
    pub cycle: Vec<crate::archs_cycle::CycleConfig>,
    /// 5: why it did not run (or stopped); `None` when it ran.
    pub cycle_error: Option<String>,
    /// 6: one row per device and llama-bench test.
    pub e2e: Vec<E2eRow>,
    /// 6: the probe's figures per device that ran.
    pub e2e_probe: Vec<E2eProbe>,
    /// 6: one line per device that could not be measured, with why.
    pub e2e_errors: Vec<String>,
    /// The devices llama-bench ran on (with the HRX library's path).
    pub e2e_devices: Vec<e2e::Device>,
}

#[cfg(test)]
mod tests {
    use super::fixture;

    /// The whole document, as rendered before the renderer was split into one function per
    /// section: the split must not change a byte.
    #[test]
    fn full_report_matches_snapshot() {
        fixture::assert_snapshot("full", &fixture::report().markdown());
    }

    #[test]
    fn ratios_are_b_over_a_of_the_medians_and_none_without_both_arms() {
        let r = fixture::report();
        // smollm2-2: medians 41234 (A) and 15321 (B) ns.
        assert_eq!(r.sched[0].ratio(), Some(15_321.0 / 41_234.0));
        assert_eq!(r.sched[1].ir_ratio(), None, "B's callgrind failed");
        assert_eq!(r.sched[2].ratio(), None, "the failed configuration");
        assert_eq!(r.e2e[3].ratio(), None, "B never ran on HRX0");
        // tg128 with graph reuse off: medians 76.2 (A) and 79.7 (B) t/s.
        let reuse_off = r.e2e[2].ratio().unwrap();
        assert!((reuse_off - 79.7 / 76.2).abs() < 1e-12, "{reuse_off}");
        let tg = r.e2e[1].ratio().unwrap();
        assert!((tg - 82.1 / 80.25).abs() < 1e-12, "{tg}");
    }
}
