//! Drives the rounds and turns the measurements into the report (markdown and JSON).

use crate::archs::ArchsRun;
use crate::arms::{Arm, Machine};
use crate::e2e;
use crate::probe::ProbeStats;
use crate::sched::{self, BufferSize, Callgrind, Config, Heap};
use crate::stats::{paired_ratios, Summary};
use crate::{progress, Options};
use anyhow::{bail, Result};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// The arms' order in round `round`: A B in even rounds, B A in odd ones.
pub fn round_order(round: u32) -> [usize; 2] {
    let first = (round % 2) as usize;
    [first, 1 - first]
}

/// Goal: scheduler overhead of B at most this fraction of A's.
pub const GOAL_OVERHEAD: f64 = 0.5;
/// Goal: end-to-end tokens/s of B at least this multiple of A's.
pub const GOAL_TOKENS: f64 = 1.0;

/// Both arms' compute buffer size for one backend.
#[derive(Debug, Clone, Serialize)]
pub struct BufferRow {
    pub backend: String,
    pub a: u64,
    pub b: u64,
}

/// Everything measured for one graph configuration.
#[derive(Debug, Clone, Serialize)]
pub struct SchedRow {
    pub config: Config,
    /// Set when a run failed; the other fields then hold what was measured before.
    pub error: Option<String>,
    pub nodes: u32,
    pub leafs: u32,
    pub splits: [u32; 2],
    /// Per-process medians of the cycle time, ns, in round order: `[A, B]`.
    pub cycle_runs: [Vec<f64>; 2],
    pub cycle: [Option<Summary>; 2],
    /// Per-round B/A of the cycle medians.
    pub cycle_paired: Option<Summary>,
    pub split_runs: [Vec<f64>; 2],
    pub split: [Option<Summary>; 2],
    /// Per-process medians of `ggml_backend_sched_reserve`, ns, `[A, B]`.
    pub reserve_runs: [Vec<f64>; 2],
    pub reserve: [Option<Summary>; 2],
    pub buffers: Vec<BufferRow>,
    pub heap: [Option<Heap>; 2],
    /// Instruction counts of the cycle, `[A, B]`.
    pub callgrind: [Option<Callgrind>; 2],
    /// Instruction counts of `reserve`, `[A, B]`.
    pub callgrind_reserve: [Option<Callgrind>; 2],
}

impl SchedRow {
    /// median(B) / median(A) of the cycle time.
    pub fn ratio(&self) -> Option<f64> {
        match &self.cycle {
            [Some(a), Some(b)] if a.median > 0.0 => Some(b.median / a.median),
            _ => None,
        }
    }

    fn split_ratio(&self) -> Option<f64> {
        match &self.split {
            [Some(a), Some(b)] if a.median > 0.0 => Some(b.median / a.median),
            _ => None,
        }
    }

    fn reserve_ratio(&self) -> Option<f64> {
        match &self.reserve {
            [Some(a), Some(b)] if a.median > 0.0 => Some(b.median / a.median),
            _ => None,
        }
    }

    fn ir_ratio(&self) -> Option<f64> {
        ir_ratio(&self.callgrind)
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
    pub device: String,
    pub test: String,
    /// Every repetition's tokens/s, `[A, B]`.
    pub samples: [Vec<f64>; 2],
    pub ts: [Option<Summary>; 2],
    /// Per-round B/A of each process's mean tokens/s.
    pub paired: Option<Summary>,
}

impl E2eRow {
    /// median(B) / median(A) tokens/s.
    pub fn ratio(&self) -> Option<f64> {
        match &self.ts {
            [Some(a), Some(b)] if a.median > 0.0 => Some(b.median / a.median),
            _ => None,
        }
    }
}

/// The scheduler time the probe saw inside llama-bench on one device, per process, `[A, B]`.
#[derive(Debug, Clone, Serialize)]
pub struct E2eProbe {
    pub device: String,
    pub runs: [Vec<ProbeStats>; 2],
}

/// The whole report, as written to `report.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub command: String,
    pub started_utc: String,
    pub finished_utc: String,
    pub wall_seconds: f64,
    pub machine: Machine,
    pub loadavg_start: f64,
    pub loadavg_end: f64,
    pub arms: [Arm; 2],
    pub rounds: u32,
    pub iters: u32,
    pub e2e_rounds: u32,
    pub e2e_reps: u32,
    pub sched: Vec<SchedRow>,
    pub archs_rounds: u32,
    pub archs_filter: Option<String>,
    /// test-llama-archs processes, `[A, B]`.
    pub archs: [Vec<ArchsRun>; 2],
    pub archs_error: Option<String>,
    /// The HRX library used by both arms (path, sha256), when it exists.
    pub hrx: Option<(String, String)>,
    /// 5: rounds, model files and the runs per device configuration.
    pub cycle_rounds: u32,
    pub cycle_models: usize,
    pub cycle: Vec<crate::archs_cycle::CycleConfig>,
    pub cycle_error: Option<String>,
    pub e2e: Vec<E2eRow>,
    pub e2e_probe: Vec<E2eProbe>,
    pub e2e_errors: Vec<String>,
    /// The devices llama-bench ran on (with the HRX library's path).
    pub e2e_devices: Vec<e2e::Device>,
}

/// Runs every configuration for `opts.rounds` rounds, A then B each round, then callgrind
/// once per arm. A failing configuration records its error and the others go on.
pub fn run_sched(
    program: &Path,
    arms: [&Arm; 2],
    stock_dir: &Path,
    configs: &[Config],
    opts: &Options,
    callgrind_dir: &Path,
) -> Vec<SchedRow> {
    let mut rows: Vec<SchedRow> = configs
        .iter()
        .map(|c| SchedRow {
            config: c.clone(),
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
            buffers: vec![],
            heap: [None, None],
            callgrind: [None, None],
            callgrind_reserve: [None, None],
        })
        .collect();
    let mut first: Vec<[Option<sched::Run>; 2]> = vec![[None, None]; configs.len()];
    for round in 0..opts.rounds {
        progress(&format!("scheduler round {}/{}", round + 1, opts.rounds));
        for (ci, cfg) in configs.iter().enumerate() {
            if rows[ci].error.is_some() {
                continue;
            }
            // A B in even rounds, B A in odd ones: whatever runs first in a pair (the load
            // another process leaves behind, say) is shared by both arms.
            for k in round_order(round) {
                let arm = arms[k];
                match sched::run(program, arm, stock_dir, cfg, opts.iters, 10) {
                    Ok(run) => {
                        rows[ci].cycle_runs[k].push(run.ns.cycle.median as f64);
                        rows[ci].split_runs[k].push(run.ns.split_graph.median as f64);
                        rows[ci].reserve_runs[k].push(run.ns.reserve.median as f64);
                        if first[ci][k].is_none() {
                            first[ci][k] = Some(run);
                        }
                    }
                    Err(e) => {
                        progress(&format!("{}: {e:#}", cfg.name()));
                        rows[ci].error = Some(format!("{e:#}"));
                        break;
                    }
                }
            }
        }
    }
    for (ci, row) in rows.iter_mut().enumerate() {
        let [fa, fb] = &first[ci];
        if let Some(a) = fa {
            row.nodes = a.nodes;
            row.leafs = a.leafs;
        }
        row.splits = [
            fa.as_ref().map_or(0, |r| r.splits),
            fb.as_ref().map_or(0, |r| r.splits),
        ];
        row.heap = [fa.as_ref().map(|r| r.heap), fb.as_ref().map(|r| r.heap)];
        if let (Some(a), Some(b)) = (fa, fb) {
            row.buffers = merge_buffers(&a.buffer_sizes, &b.buffer_sizes);
        }
        for k in 0..2 {
            row.cycle[k] = Summary::of(&row.cycle_runs[k]);
            row.split[k] = Summary::of(&row.split_runs[k]);
            row.reserve[k] = Summary::of(&row.reserve_runs[k]);
        }
        row.cycle_paired = Summary::of(&paired_ratios(&row.cycle_runs[0], &row.cycle_runs[1]));
    }
    if !opts.no_callgrind {
        for row in rows.iter_mut() {
            if row.error.is_some() {
                continue;
            }
            for (k, arm) in arms.iter().enumerate() {
                progress(&format!("callgrind {} arm {}", row.config.name(), arm.key));
                for section in [sched::Section::Cycle, sched::Section::Reserve] {
                    let iters = if section == sched::Section::Cycle {
                        5
                    } else {
                        2
                    };
                    match sched::callgrind(
                        program,
                        arm,
                        stock_dir,
                        &row.config,
                        iters,
                        section,
                        callgrind_dir,
                    ) {
                        Ok(c) if section == sched::Section::Cycle => row.callgrind[k] = Some(c),
                        Ok(c) => row.callgrind_reserve[k] = Some(c),
                        Err(e) => progress(&format!("callgrind {}: {e:#}", row.config.name())),
                    }
                }
            }
        }
    }
    rows
}

fn merge_buffers(a: &[BufferSize], b: &[BufferSize]) -> Vec<BufferRow> {
    a.iter()
        .map(|x| BufferRow {
            backend: x.backend.clone(),
            a: x.bytes,
            b: b.iter()
                .find(|y| y.backend == x.backend)
                .map_or(0, |y| y.bytes),
        })
        .collect()
}

/// Runs llama-bench up to `rounds` times per arm on `dev`, A then B each round; no round
/// starts after `deadline` (the first always runs). Returns the rows per test and the probe's
/// figures per process, `[A, B]` (their length is the number of rounds done).
pub fn run_e2e(
    setup: &e2e::Setup,
    arms: [&Arm; 2],
    dev: &e2e::Device,
    rounds: u32,
    deadline: std::time::Instant,
) -> Result<(Vec<E2eRow>, [Vec<ProbeStats>; 2])> {
    let mut rows: Vec<E2eRow> = Vec::new();
    let mut probes: [Vec<ProbeStats>; 2] = [vec![], vec![]];
    // Per test: per arm, the mean tokens/s of each process (for paired ratios).
    let mut means: Vec<[Vec<f64>; 2]> = Vec::new();
    for round in 0..rounds {
        if round > 0 && std::time::Instant::now() > deadline {
            progress(&format!(
                "llama-bench {}: time budget spent after {round} rounds",
                dev.name
            ));
            break;
        }
        progress(&format!(
            "llama-bench {} round {}/{}",
            dev.name,
            round + 1,
            rounds
        ));
        for k in round_order(round) {
            let arm = arms[k];
            let run = e2e::run(setup, arm, dev)?;
            probes[k].push(run.probe);
            for t in run.tests {
                let i = match rows.iter().position(|r| r.test == t.test) {
                    Some(i) => i,
                    None => {
                        rows.push(E2eRow {
                            device: dev.name.clone(),
                            test: t.test.clone(),
                            samples: [vec![], vec![]],
                            ts: [None, None],
                            paired: None,
                        });
                        means.push([vec![], vec![]]);
                        rows.len() - 1
                    }
                };
                if t.samples_ts.is_empty() {
                    bail!("llama-bench reported no samples for {}", t.test);
                }
                let mean = t.samples_ts.iter().sum::<f64>() / t.samples_ts.len() as f64;
                means[i][k].push(mean);
                rows[i].samples[k].extend(t.samples_ts);
            }
        }
    }
    for (row, m) in rows.iter_mut().zip(&means) {
        row.ts = [Summary::of(&row.samples[0]), Summary::of(&row.samples[1])];
        row.paired = Summary::of(&paired_ratios(&m[0], &m[1]));
    }
    Ok((rows, probes))
}

/// Median over processes of `f`, `None` when there are none.
fn median_of<T>(runs: &[T], f: impl Fn(&T) -> f64) -> Option<Summary> {
    Summary::of(&runs.iter().map(f).collect::<Vec<_>>())
}

fn ratio_of(a: &Option<Summary>, b: &Option<Summary>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a.median > 0.0 => Some(b.median / a.median),
        _ => None,
    }
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1000.0)
}

fn spread_us(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!("{} [{}–{}]", us(s.median), us(s.min), us(s.max)),
        None => "–".into(),
    }
}

fn ratio_cell(r: Option<f64>) -> String {
    r.map_or("–".into(), |r| format!("{r:.3}"))
}

fn paired_cell(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!("{:.3} [{:.3}–{:.3}]", s.median, s.p25, s.p75),
        None => "–".into(),
    }
}

fn goal_cell(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "**not met**",
        None => "–",
    }
}

fn mib(bytes: i64) -> String {
    if bytes.abs() >= 1 << 20 {
        format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

impl Report {
    /// The report as markdown: machine and command, then one table per measurement, the
    /// goals beside the figures.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let [a, b] = &self.arms;
        let _ = writeln!(
            s,
            "## Benchmark: libggml-base arm B ({}) against arm A ({})\n",
            b.label, a.label
        );
        let _ = writeln!(s, "- Command: `{}`", self.command);
        let _ = writeln!(
            s,
            "- Machine: {}, {} cores, {:.1} GiB, {}",
            self.machine.cpu, self.machine.cores, self.machine.mem_gib, self.machine.kernel
        );
        let _ = writeln!(
            s,
            "- Run: {} to {} ({:.0} s); load average {:.2} at start, {:.2} at end (shared machine)",
            self.started_utc,
            self.finished_utc,
            self.wall_seconds,
            self.loadavg_start,
            self.loadavg_end
        );
        for arm in &self.arms {
            let _ = writeln!(
                s,
                "- Arm {} ({}): `{}` sha256 `{}`",
                arm.key,
                arm.label,
                arm.source.display(),
                &arm.sha256
            );
        }
        if let Some((path, sha)) = &self.hrx {
            let _ = writeln!(
                s,
                "- HRX device library (both arms, real graphs and HRX0 rows): `{path}` sha256 `{sha}`"
            );
        }
        if a.sha256 == b.sha256 {
            let _ = writeln!(
                s,
                "- Note: both arms are the same file (a noise baseline: ratios should be 1.00)."
            );
        }

        let _ = writeln!(
            s,
            "\n### Scheduler overhead (per graph: reset + split_graph + alloc_graph + dispatch to no-op backends)\n"
        );
        let _ = writeln!(
            s,
            "{} rounds, one process per arm per round (A B, then B A), {} timed iterations per process; \
             each cell is the median over processes of the per-process median, [min–max] over processes, µs.\n",
            self.rounds, self.iters
        );
        let _ = writeln!(
            s,
            "| graph | backends | nodes | splits A/B | A µs | B µs | B/A | paired B/A [IQR] | split_graph only B/A | goal: paired B/A ≤ {GOAL_OVERHEAD} |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
        for r in &self.sched {
            if let Some(e) = &r.error {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | – | – | – | failed: {} | | | |",
                    r.config.graph,
                    r.config.backends,
                    r.nodes,
                    e.replace('|', "/").replace('\n', " ")
                );
                continue;
            }
            let _ = writeln!(
                s,
                "| {} | {} | {} | {}/{} | {} | {} | {} | {} | {} | {} |",
                r.config.graph,
                r.config.backends,
                r.nodes,
                r.splits[0],
                r.splits[1],
                spread_us(&r.cycle[0]),
                spread_us(&r.cycle[1]),
                ratio_cell(r.ratio()),
                paired_cell(&r.cycle_paired),
                ratio_cell(r.split_ratio()),
                // Judged on the paired ratio, as every other goal here: A and B back to back
                // see the same load, the two medians may not.
                goal_cell(r.cycle_paired.map(|p| p.median <= GOAL_OVERHEAD))
            );
        }

        let _ = writeln!(
            s,
            "\n`ggml_backend_sched_reserve` on a fresh graph (llama.cpp calls it when it sizes the compute buffers), µs:\n"
        );
        let _ = writeln!(s, "| graph | backends | A µs | B µs | B/A |");
        let _ = writeln!(s, "|---|---|---|---|---|");
        for r in self.sched.iter().filter(|r| r.error.is_none()) {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                r.config.graph,
                r.config.backends,
                spread_us(&r.reserve[0]),
                spread_us(&r.reserve[1]),
                ratio_cell(r.reserve_ratio())
            );
        }

        let _ = writeln!(
            s,
            "\n### Instructions per iteration (callgrind, timed section only)\n"
        );
        let _ = writeln!(
            s,
            "| graph | backends | cycle A Ir | cycle B Ir | cycle B/A | goal B/A ≤ {GOAL_OVERHEAD} | reserve A Ir | reserve B Ir | reserve B/A |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
        for r in &self.sched {
            let ir = |c: &[Option<Callgrind>; 2], k: usize| {
                c[k].as_ref()
                    .map_or("–".into(), |c| c.ir_per_cycle.to_string())
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.config.graph,
                r.config.backends,
                ir(&r.callgrind, 0),
                ir(&r.callgrind, 1),
                ratio_cell(r.ir_ratio()),
                goal_cell(r.ir_ratio().map(|x| x <= GOAL_OVERHEAD)),
                ir(&r.callgrind_reserve, 0),
                ir(&r.callgrind_reserve, 1),
                ratio_cell(ir_ratio(&r.callgrind_reserve))
            );
        }

        let _ = writeln!(
            s,
            "\n### Compute buffers per backend (`ggml_backend_sched_get_buffer_size`)\n"
        );
        let _ = writeln!(
            s,
            "| graph | backends | backend | A bytes | B bytes | goal B ≤ A |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for r in &self.sched {
            for buf in &r.buffers {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} |",
                    r.config.graph,
                    r.config.backends,
                    buf.backend,
                    buf.a,
                    buf.b,
                    goal_cell(Some(buf.b <= buf.a))
                );
            }
        }

        let _ = writeln!(
            s,
            "\n### Scheduler heap use (malloc family interposed in the C program)\n"
        );
        let _ = writeln!(
            s,
            "sched_new: bytes (allocations); first alloc_graph (reserves the buffers): bytes, \
             allocations, peak live; steady cycle (reset + alloc_graph + compute): allocations, bytes, peak live.\n"
        );
        let _ = writeln!(s, "| graph | backends | arm | sched_new | first alloc: bytes / allocs / peak | per cycle: allocs / bytes / peak |");
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for r in &self.sched {
            for (k, arm) in self.arms.iter().enumerate() {
                if let Some(h) = &r.heap[k] {
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} ({}) | {} / {} / {} | {} / {} / {} |",
                        r.config.graph,
                        r.config.backends,
                        arm.key,
                        mib(h.sched_new.bytes),
                        h.sched_new.allocs,
                        mib(h.first_alloc.bytes),
                        h.first_alloc.allocs,
                        mib(h.first_alloc.peak),
                        h.cycle.allocs,
                        mib(h.cycle.bytes),
                        mib(h.cycle.peak)
                    );
                }
            }
        }

        let _ = writeln!(
            s,
            "\n### Real graphs: scheduler time inside test-llama-archs (probe: alloc_graph and reserve calls)\n"
        );
        let _ = writeln!(
            s,
            "{} rounds, one process per arm per round (A B, then B A){}; median [min–max] over processes of the \
             total time the process spent inside each function, ms.\n",
            self.archs_rounds,
            self.archs_filter
                .as_ref()
                .map_or(String::new(), |f| format!(", architectures matching `{f}`"))
        );
        let _ = writeln!(s, "| arm | processes | passed | alloc_graph calls | alloc_graph ms | reserve calls | reserve ms | process s |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        let ms = |x: Option<Summary>| {
            x.map_or("–".into(), |v| {
                format!(
                    "{:.2} [{:.2}–{:.2}]",
                    v.median / 1e6,
                    v.min / 1e6,
                    v.max / 1e6
                )
            })
        };
        let mut archs_cells: Vec<[Option<Summary>; 2]> = Vec::new();
        for (k, arm) in self.arms.iter().enumerate() {
            let runs = &self.archs[k];
            let alloc = median_of(runs, |r| r.probe.alloc_graph.ns as f64);
            let reserve = median_of(runs, |r| r.probe.reserve.ns as f64);
            let wall = median_of(runs, |r| r.wall_s);
            archs_cells.push([alloc, reserve]);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                arm.key,
                runs.len(),
                runs.iter().filter(|r| r.passed).count(),
                runs.first().map_or(0, |r| r.probe.alloc_graph.calls),
                ms(alloc),
                runs.first().map_or(0, |r| r.probe.reserve.calls),
                ms(reserve),
                wall.map_or("–".into(), |w| format!("{:.1}", w.median))
            );
        }
        let _ = writeln!(
            s,
            "| B/A | | | | {} | | {} | |",
            ratio_cell(ratio_of(&archs_cells[0][0], &archs_cells[1][0])),
            ratio_cell(ratio_of(&archs_cells[0][1], &archs_cells[1][1]))
        );
        if let Some(e) = &self.archs_error {
            let _ = writeln!(s, "\n- stopped: {}", e.replace('\n', " "));
        }
        s.push_str(&crate::archs_cycle::markdown(
            &self.cycle,
            self.cycle_rounds,
            self.cycle_models,
            self.cycle_error.as_deref(),
            GOAL_OVERHEAD,
        ));

        let _ = writeln!(
            s,
            "\n### End to end (llama-bench, SmolLM2-135M Q4_1, -t 2)\n"
        );
        let done: Vec<String> = self
            .e2e_probe
            .iter()
            .map(|p| format!("{} {}", p.device, p.runs[0].len()))
            .collect();
        let _ = writeln!(
            s,
            "Rounds done (of {} asked, within the time budget): {}; one process per arm per round (A B, then B A), \
             -r {} each; tokens/s median [min–max] over all repetitions. Load from other processes only \
             slows a run down, so on a shared machine read the paired ratio (A and B back to back) and the \
             ratio of the best runs; the goal is judged on the paired median.\n",
            self.e2e_rounds,
            done.join(", "),
            self.e2e_reps
        );
        let _ = writeln!(
            s,
            "| device | test | A t/s | B t/s | B/A of medians | B/A of bests | paired B/A [IQR] | goal: paired B/A ≥ {GOAL_TOKENS:.2} |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        for r in &self.e2e {
            let ts = |x: &Option<Summary>| {
                x.map_or("–".into(), |v| {
                    format!("{:.1} [{:.1}–{:.1}]", v.median, v.min, v.max)
                })
            };
            let best = match &r.ts {
                [Some(a), Some(b)] if a.max > 0.0 => Some(b.max / a.max),
                _ => None,
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r.device,
                r.test,
                ts(&r.ts[0]),
                ts(&r.ts[1]),
                ratio_cell(r.ratio()),
                ratio_cell(best),
                paired_cell(&r.paired),
                goal_cell(r.paired.map(|p| p.median >= GOAL_TOKENS))
            );
        }
        if !self.e2e_probe.is_empty() {
            let _ = writeln!(
                s,
                "\nScheduler time inside those llama-bench processes (probe), median [min–max] over processes, µs per call:\n"
            );
            let _ = writeln!(s, "| device | arm | alloc_graph calls | alloc_graph µs/call | reserve calls | reserve µs/call |");
            let _ = writeln!(s, "|---|---|---|---|---|---|");
            for p in &self.e2e_probe {
                let mut cells: Vec<[Option<Summary>; 2]> = Vec::new();
                for (k, arm) in self.arms.iter().enumerate() {
                    let runs = &p.runs[k];
                    let alloc = median_of(runs, |r| r.alloc_graph.per_call_ns());
                    let reserve = median_of(runs, |r| r.reserve.per_call_ns());
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} | {} | {} |",
                        p.device,
                        arm.key,
                        runs.first().map_or(0, |r| r.alloc_graph.calls),
                        spread_us(&alloc),
                        runs.first().map_or(0, |r| r.reserve.calls),
                        spread_us(&reserve)
                    );
                    cells.push([alloc, reserve]);
                }
                let _ = writeln!(
                    s,
                    "| {} | B/A | | {} | | {} |",
                    p.device,
                    ratio_cell(ratio_of(&cells[0][0], &cells[1][0])),
                    ratio_cell(ratio_of(&cells[0][1], &cells[1][1]))
                );
            }
        }
        for d in &self.e2e_devices {
            if let Some(p) = &d.backend_path {
                let _ = writeln!(
                    s,
                    "\n- {}: `GGML_BACKEND_PATH={}`, `-dev {}`",
                    d.name,
                    p.display(),
                    d.name
                );
            }
        }
        for e in &self.e2e_errors {
            let _ = writeln!(s, "\n- not measured: {}", e.replace('\n', " "));
        }

        let _ = writeln!(s, "\n### Noise\n");
        for r in &self.sched {
            if let [Some(x), Some(y)] = &r.cycle {
                let _ = writeln!(
                    s,
                    "- {}: half-IQR/median A {:.1}%, B {:.1}%",
                    r.config.name(),
                    100.0 * x.rel_iqr(),
                    100.0 * y.rel_iqr()
                );
            }
        }
        for r in &self.e2e {
            if let [Some(x), Some(y)] = &r.ts {
                let _ = writeln!(
                    s,
                    "- {} {}: half-IQR/median A {:.1}%, B {:.1}%",
                    r.device,
                    r.test,
                    100.0 * x.rel_iqr(),
                    100.0 * y.rel_iqr()
                );
            }
        }

        if let Some(r) = self
            .sched
            .iter()
            .filter(|r| r.callgrind[1].is_some())
            .max_by_key(|r| r.nodes * r.config.backends)
        {
            let sections = [("cycle", &r.callgrind), ("reserve", &r.callgrind_reserve)];
            for ((what, cg), (k, arm)) in sections
                .iter()
                .flat_map(|sec| self.arms.iter().enumerate().map(move |a| (*sec, a)))
            {
                if let Some(c) = &cg[k] {
                    let _ = writeln!(
                        s,
                        "\n### Where the instructions go: {} {what}, arm {} (callgrind, totals over {} iterations, `{}`)\n\nSelf cost:\n\n```",
                        r.config.name(),
                        arm.key,
                        c.iters,
                        c.out_file.display()
                    );
                    for l in &c.top {
                        let _ = writeln!(s, "{l}");
                    }
                    let _ = writeln!(s, "```");
                    if k == 1 {
                        let _ = writeln!(s, "\nInclusive cost:\n\n```");
                        for l in &c.top_inclusive {
                            let _ = writeln!(s, "{l}");
                        }
                        let _ = writeln!(s, "```");
                    }
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod fixture;

#[cfg(test)]
mod tests {
    use super::{fixture, round_order};

    /// The whole document, as rendered before the renderer was split into one function per
    /// section: the split must not change a byte.
    #[test]
    fn full_report_matches_snapshot() {
        fixture::assert_snapshot("full", &fixture::report().markdown());
    }

    #[test]
    fn arms_alternate_a_b_then_b_a() {
        assert_eq!(round_order(0), [0, 1]);
        assert_eq!(round_order(1), [1, 0]);
        assert_eq!(round_order(2), [0, 1]);
        assert_eq!(round_order(19), [1, 0]);
    }
}
