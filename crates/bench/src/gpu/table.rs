//! `bench gpu`'s report: one row per measure, paired by round, and its markdown table.
//!
//! Units: tokens/s for the tools' speeds, µs for the probe's time per call; ratios are B/A.
//! A row's sample is one value per process (llama-bench: the mean over its `-r`
//! repetitions), and only rounds in which both arms measured it count, so that A's and B's
//! values stay paired by round.

use super::parse::{BatchedRow, BenchTest};
use super::run::ArmRound;
use crate::arms::{Arm, Machine};
use crate::probe::{Counter, ProbeStats};
use crate::report::{GOAL_OVERHEAD, GOAL_TOKENS};
use crate::stats::{
    below_one_lines, p_suffix, paired_ratios, ratio_text, signed_rank_p, BelowOne, Summary,
};
use serde::Serialize;
use std::fmt::Write as _;

/// One probe row of the GPU table: the function, how to read its counter from a process's
/// probe figures, its goal, and whether only the process without graph reuse reports it.
type ProbeRow = (
    &'static str,
    fn(&ProbeStats) -> &Counter,
    Option<Goal>,
    bool,
);

/// What a row is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Goal {
    /// A speed: the paired B/A median must be at least this.
    AtLeast(f64),
    /// A time: the paired B/A median must be at most this.
    AtMost(f64),
}

/// One measure over the rounds.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// What was measured, as the table prints it.
    pub measure: String,
    /// `t/s` or `µs/call`.
    pub unit: String,
    /// The goal, when the measure has one.
    pub goal: Option<Goal>,
    /// Per round where both arms measured it: `[A, B]`, in the unit.
    pub values: [Vec<f64>; 2],
    /// Summaries of `values`; `None` for no sample.
    pub summary: [Option<Summary>; 2],
    /// Per-round B/A; `None` for no round.
    pub paired: Option<Summary>,
    /// Two-sided p of the signed-rank test that the per-round B/A are centred on 1 (the arms
    /// the same): small when B is below (or above) A in round after round, not only in its
    /// median. `None` when every round's B/A is 1 or there is none.
    pub p_same: Option<f64>,
}

impl Row {
    fn new(measure: String, unit: &str, goal: Option<Goal>, values: [Vec<f64>; 2]) -> Row {
        let ratios = paired_ratios(&values[0], &values[1]);
        Row {
            measure,
            unit: unit.into(),
            goal,
            summary: [Summary::of(&values[0]), Summary::of(&values[1])],
            paired: Summary::of(&ratios),
            p_same: signed_rank_p(&ratios),
            values,
        }
    }

    /// median(B) / median(A).
    pub fn ratio(&self) -> Option<f64> {
        match &self.summary {
            [Some(a), Some(b)] if a.median > 0.0 => Some(b.median / a.median),
            _ => None,
        }
    }

    /// Whether the paired median meets the goal; `None` without a goal or a paired figure.
    pub fn met(&self) -> Option<bool> {
        let p = self.paired?.median;
        Some(match self.goal? {
            Goal::AtLeast(g) => p >= g,
            Goal::AtMost(g) => p <= g,
        })
    }
}

/// `[A, B]` of `f` over one round, when both arms have it.
fn pair(r: &[ArmRound; 2], f: &impl Fn(&ArmRound) -> Option<f64>) -> Option<[f64; 2]> {
    Some([f(&r[0])?, f(&r[1])?])
}

/// A row from `f` over every round.
fn row(
    rounds: &[[ArmRound; 2]],
    measure: String,
    unit: &str,
    goal: Option<Goal>,
    f: impl Fn(&ArmRound) -> Option<f64>,
) -> Row {
    let mut values = [vec![], vec![]];
    for [a, b] in rounds.iter().filter_map(|r| pair(r, &f)) {
        values[0].push(a);
        values[1].push(b);
    }
    Row::new(measure, unit, goal, values)
}

/// The mean tokens/s of llama-bench test `test` at `-ngl ngl` in `tests`.
fn bench_ts(tests: &[BenchTest], test: &str, ngl: i64) -> Option<f64> {
    let t = tests.iter().find(|t| t.test == test && t.ngl == ngl)?;
    (!t.samples_ts.is_empty()).then(|| t.samples_ts.iter().sum::<f64>() / t.samples_ts.len() as f64)
}

fn batched(rows: &[BatchedRow], pl: u32) -> Option<&BatchedRow> {
    rows.iter().find(|r| r.pl == pl)
}

/// µs per call of a probe counter, `None` without calls.
fn per_call_us(c: &Counter) -> Option<f64> {
    (c.calls > 0).then(|| c.per_call_ns() / 1000.0)
}

/// Every row, in table order: llama-bench at full and partial offload, with graph reuse off,
/// llama-batched-bench per `-npl`, then the scheduler's time per call.
pub fn rows(rounds: &[[ArmRound; 2]], partial: u32, npl: &[u32]) -> Vec<Row> {
    let tok = Some(Goal::AtLeast(GOAL_TOKENS));
    let time = Some(Goal::AtMost(GOAL_OVERHEAD));
    let p = i64::from(partial);
    let mut out = Vec::new();
    for (test, ngl) in [("pp512", 99), ("tg128", 99), ("pp512", p), ("tg128", p)] {
        out.push(row(
            rounds,
            format!("llama-bench {test}, -ngl {ngl}"),
            "t/s",
            tok,
            |r| bench_ts(&r.bench.as_ref()?.value, test, ngl),
        ));
    }
    out.push(row(
        rounds,
        "llama-bench tg128, -ngl 99, LLAMA_GRAPH_REUSE_DISABLE=1".into(),
        "t/s",
        tok,
        |r| bench_ts(&r.no_reuse.as_ref()?.value, "tg128", 99),
    ));
    for &pl in npl {
        out.push(row(
            rounds,
            format!("llama-batched-bench -npl {pl}: S_TG (generation)"),
            "t/s",
            tok,
            |r| Some(batched(&r.batched.as_ref()?.value, pl)?.s_tg),
        ));
        out.push(row(
            rounds,
            format!("llama-batched-bench -npl {pl}: S (total)"),
            "t/s",
            tok,
            |r| Some(batched(&r.batched.as_ref()?.value, pl)?.s),
        ));
    }
    let probe_of = |r: &ArmRound, which: usize| -> Option<ProbeStats> {
        match which {
            0 => r.no_reuse.as_ref()?.probe.clone(),
            1 => r.bench.as_ref()?.probe.clone(),
            _ => r.batched.as_ref()?.probe.clone(),
        }
    };
    let npl_list = npl.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    for (which, what) in [
        (
            0,
            "tg128 -ngl 99, graph reuse off (one call per token)".to_string(),
        ),
        (
            1,
            format!("the pp512 + tg128 process, -ngl 99 and {partial}, graph reuse on"),
        ),
        (
            2,
            format!("the llama-batched-bench process, -npl {npl_list}, graph reuse on"),
        ),
    ] {
        // Calls per process, for the label: the per-call figure means little without them.
        let calls = |k: usize, f: fn(&ProbeStats) -> &Counter| {
            let c: Vec<f64> = rounds
                .iter()
                .filter_map(|r| probe_of(&r[k], which).map(|p| f(&p).calls as f64))
                .collect();
            Summary::of(&c).map_or("–".to_string(), |s| format!("{:.0}", s.median))
        };
        // (function, its counter, goal, host and wait rows). The compute and synchronize
        // rows, one call each a token without graph reuse, say where a token's time goes: the
        // host's part (CPU splits, blocking copies, queueing) or the wait for the device. The
        // batched process gets them too (its calls mix prompt and generation, the same mix in
        // both arms): it is where the arms' generation rates differ most at full offload.
        let counters: [ProbeRow; 4] = [
            (
                "ggml_backend_sched_alloc_graph",
                |p| &p.alloc_graph,
                time,
                false,
            ),
            ("ggml_backend_sched_reset", |p| &p.reset, None, false),
            (
                "ggml_backend_sched_graph_compute_async (host part)",
                |p| &p.compute,
                None,
                true,
            ),
            (
                "ggml_backend_sched_synchronize (the wait)",
                |p| &p.synchronize,
                None,
                true,
            ),
        ];
        for (function, counter, goal, host_and_wait) in counters {
            if host_and_wait && which == 1 {
                continue;
            }
            out.push(row(
                rounds,
                format!(
                    "{function}, {what}; calls/process A {} B {}",
                    calls(0, counter),
                    calls(1, counter)
                ),
                "µs/call",
                goal,
                |r| per_call_us(counter(&probe_of(r, which)?)),
            ));
        }
    }
    // A probe-less run has no scheduler figures: no rows for them rather than empty ones.
    out.retain(|r| r.unit != "µs/call" || r.summary[0].is_some() || r.summary[1].is_some());
    out
}

/// Whether any row has a value from both arms in at least one round: `false` when every
/// round of every measure had a failed process (a run that measured nothing).
pub fn any_paired(rows: &[Row]) -> bool {
    rows.iter().any(|r| r.paired.is_some())
}

/// The whole `bench gpu` report, as written to `report.json`.
#[derive(Debug, Clone, Serialize)]
pub struct GpuReport {
    /// The command line.
    pub command: String,
    /// `bundle` or `workspace`.
    pub layout: String,
    /// The bundle or workspace root.
    pub root: String,
    /// Start, UTC, ISO 8601.
    pub started_utc: String,
    /// End, UTC, ISO 8601.
    pub finished_utc: String,
    /// Wall time, s.
    pub wall_seconds: f64,
    /// The host.
    pub machine: Machine,
    /// `nvidia-smi`'s name, driver and memory per GPU; `None` without nvidia-smi.
    pub gpu: Option<String>,
    /// 1-minute load average at the start.
    pub loadavg_start: f64,
    /// And at the end.
    pub loadavg_end: f64,
    /// The llama.cpp build whose tools ran.
    pub llama_build: String,
    /// The model file.
    pub model: String,
    /// Its size, bytes.
    pub model_bytes: u64,
    /// The arms, `[A, B]`.
    pub arms: [Arm; 2],
    /// The scheduler probe preloaded, if any.
    pub sched_probe: Option<String>,
    /// `libab_probe.so`, if preloaded.
    pub ab_probe: Option<String>,
    /// `--rounds`.
    pub rounds_asked: u32,
    /// llama-bench `-r`.
    pub reps: u32,
    /// The partial offload's `-ngl`.
    pub partial_ngl: u32,
    /// llama-batched-bench `-npl`.
    pub npl: Vec<u32>,
    /// `--devices`, when given: the devices every tool split the model over.
    pub devices: Option<String>,
    /// `-t`, when given.
    pub threads: Option<u32>,
    /// The table's rows.
    pub rows: Vec<Row>,
    /// Every failed process, one line each.
    pub errors: Vec<String>,
    /// Every round's raw figures, `[A, B]` (probe times in ns).
    pub rounds: Vec<[ArmRound; 2]>,
}

/// The lines under the table that sort the rows below their goal. For a tokens/s row (goal:
/// B/A at least 1.00) the signed-rank p tests the goal itself, so such a row is either below
/// round after round (p < [`crate::stats::P_DIFFERS`]: ours is slower) or within the run's spread (the
/// rounds fall on both sides of 1). A time row's goal (at most 0.50) is far from 1, which is
/// what p tests, so those rows are listed with their ratio only. Empty when every goal is met.
fn goals_summary(rows: &[Row]) -> String {
    let with_goal = rows.iter().filter(|r| r.met().is_some()).count();
    let missed: Vec<&Row> = rows.iter().filter(|r| r.met() == Some(false)).collect();
    if missed.is_empty() {
        return String::new();
    }
    let at_one = |r: &Row| matches!(r.goal, Some(Goal::AtLeast(g)) if g == 1.0);
    let below: Vec<BelowOne> = missed
        .iter()
        .filter(|r| at_one(r))
        .map(|r| BelowOne {
            name: r.measure.clone(),
            paired: r.paired.map_or(f64::NAN, |p| p.median),
            p: r.p_same,
        })
        .collect();
    let other: Vec<String> = missed
        .iter()
        .filter(|r| !at_one(r))
        .map(|r| {
            ratio_text(
                &r.measure,
                r.paired.map_or(f64::NAN, |p| p.median),
                r.p_same,
            )
        })
        .collect();
    let mut s = format!(
        "\nGoals: {} of {with_goal} met. Not met:\n\n{}",
        with_goal - missed.len(),
        below_one_lines(&below)
    );
    if !other.is_empty() {
        let _ = writeln!(s, "- other goals: {}", other.join("; "));
    }
    s
}

fn num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn median_cell(s: &Option<Summary>) -> String {
    s.map_or("–".into(), |s| num(s.median))
}

impl GpuReport {
    /// The report as markdown: the run's facts, the table (docs-ready), the errors.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let [a, b] = &self.arms;
        let _ = writeln!(
            s,
            "## GPU bench: libggml-base arm B ({}) against arm A ({})\n",
            b.label, a.label
        );
        let _ = writeln!(
            s,
            "- Command: `{}` (from a {} at `{}`)",
            self.command, self.layout, self.root
        );
        let _ = writeln!(
            s,
            "- Machine: {}, {} cores, {:.1} GiB, {}; GPU: {}",
            self.machine.cpu,
            self.machine.cores,
            self.machine.mem_gib,
            self.machine.kernel,
            self.gpu.as_deref().unwrap_or("none found (no nvidia-smi)")
        );
        let _ = writeln!(
            s,
            "- Run: {} to {} ({:.0} s); load average {:.2} at start, {:.2} at end",
            self.started_utc,
            self.finished_utc,
            self.wall_seconds,
            self.loadavg_start,
            self.loadavg_end
        );
        let _ = writeln!(s, "- llama.cpp build: `{}`", self.llama_build);
        let _ = writeln!(
            s,
            "- Model: `{}` ({:.1} MiB)",
            self.model,
            self.model_bytes as f64 / (1u64 << 20) as f64
        );
        for arm in &self.arms {
            let _ = writeln!(
                s,
                "- Arm {} ({}): `{}` sha256 `{}`",
                arm.key,
                arm.label,
                arm.source.display(),
                arm.sha256
            );
        }
        let _ = writeln!(
            s,
            "- Rounds: {} of {} asked with both arms (A B, then B A); llama-bench -r {}; \
             partial offload -ngl {}; threads {}",
            self.rounds.len(),
            self.rounds_asked,
            self.reps,
            self.partial_ngl,
            self.threads
                .map_or("default".to_string(), |t| t.to_string())
        );
        if let Some(d) = &self.devices {
            let _ = writeln!(
                s,
                "- Devices: every tool split over {d} (`-dev`, equal `-ts`){}",
                if d.split(',').any(|x| x == "RPC0") {
                    "; RPC0 is a ggml-rpc-server of the same arm on 127.0.0.1, started for each \
                     arm's processes and proven like them"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(
            s,
            "- Proof: every process's loader log (`LD_DEBUG=libs`){}{} names the arm's file\n",
            if self.sched_probe.is_some() {
                ", the scheduler probe"
            } else {
                ""
            },
            if self.ab_probe.is_some() {
                " and libab_probe.so (path and sha256)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            s,
            "| measure | unit | A median | B median | B/A of medians | paired B/A median [IQR] | goal (paired) |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for r in &self.rows {
            let goal = match (r.goal, r.met()) {
                (None, _) => "".to_string(),
                (Some(g), met) => format!(
                    "{} {}",
                    match g {
                        Goal::AtLeast(v) => format!("≥ {v:.2}"),
                        Goal::AtMost(v) => format!("≤ {v:.2}"),
                    },
                    match met {
                        Some(true) => "met",
                        Some(false) => "**not met**",
                        None => "–",
                    }
                ),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.measure,
                r.unit,
                median_cell(&r.summary[0]),
                median_cell(&r.summary[1]),
                r.ratio().map_or("–".into(), |x| format!("{x:.3}")),
                r.paired.map_or("–".into(), |p| format!(
                    "{:.3} [{:.3}–{:.3}] (n={}{})",
                    p.median,
                    p.p25,
                    p.p75,
                    p.n,
                    p_suffix(r.p_same)
                )),
                goal
            );
        }
        s.push_str(&goals_summary(&self.rows));
        if !self.errors.is_empty() {
            let _ = writeln!(
                s,
                "\nFailed processes (their rounds are left out of the rows they feed):\n"
            );
            for e in &self.errors {
                let _ = writeln!(s, "- {}", e.replace('\n', " "));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::super::run::Proc;
    use super::*;

    fn test(test: &str, ngl: i64, ts: &[f64]) -> BenchTest {
        BenchTest {
            test: test.into(),
            ngl,
            samples_ts: ts.to_vec(),
            avg_ts: ts.iter().sum::<f64>() / ts.len() as f64,
        }
    }

    fn probe(calls: i64, ns: i64) -> ProbeStats {
        ProbeStats {
            lib: "/x/libggml-base.so.0".into(),
            alloc_graph: Counter {
                calls,
                ns,
                nodes: 0,
            },
            reserve: Counter::default(),
            reset: Counter {
                calls,
                ns: ns / 10,
                nodes: 0,
            },
            compute: Counter {
                calls,
                ns: ns * 4,
                nodes: 0,
            },
            synchronize: Counter {
                calls,
                ns: ns * 8,
                nodes: 0,
            },
        }
    }

    fn arm_round(tg: f64, alloc_ns: i64, fail_batched: bool) -> ArmRound {
        ArmRound {
            bench: Some(Proc {
                value: vec![
                    test("pp512", 99, &[1000.0, 1100.0]),
                    test("tg128", 99, &[tg, tg]),
                    test("pp512", 8, &[500.0]),
                    test("tg128", 8, &[50.0]),
                ],
                probe: Some(probe(4, 400_000)),
                wall_s: 1.0,
            }),
            no_reuse: Some(Proc {
                value: vec![test("tg128", 99, &[tg * 0.9])],
                probe: Some(probe(100, alloc_ns * 100)),
                wall_s: 1.0,
            }),
            batched: (!fail_batched).then(|| Proc {
                value: vec![BatchedRow {
                    pp: 128,
                    tg: 128,
                    pl: 1,
                    n_kv: 256,
                    t_pp: 0.1,
                    s_pp: 1280.0,
                    t_tg: 1.0,
                    s_tg: tg,
                    t: 1.1,
                    s: 232.7,
                }],
                // Its own call count, so that its rows are told from the others'.
                probe: Some(probe(300, alloc_ns * 300)),
                wall_s: 1.0,
            }),
            errors: vec![],
        }
    }

    #[test]
    fn rows_pair_by_round_and_judge_the_paired_median() {
        let rounds = vec![
            [
                arm_round(100.0, 50_000, false),
                arm_round(110.0, 20_000, false),
            ],
            [
                arm_round(200.0, 60_000, false),
                arm_round(180.0, 40_000, true),
            ],
            [
                arm_round(100.0, 50_000, false),
                arm_round(105.0, 25_000, false),
            ],
        ];
        let rows = rows(&rounds, 8, &[1]);
        let tg = rows
            .iter()
            .find(|r| r.measure == "llama-bench tg128, -ngl 99")
            .unwrap();
        assert_eq!(
            tg.values,
            [vec![100.0, 200.0, 100.0], vec![110.0, 180.0, 105.0]]
        );
        let p = tg.paired.unwrap();
        assert_eq!((p.n, p.median), (3, 1.05));
        assert_eq!(tg.ratio(), Some(110.0 / 100.0));
        assert_eq!(tg.met(), Some(true));
        // B's batched-bench failed in round 2: that round is out for both arms.
        let s_tg = rows
            .iter()
            .find(|r| r.measure.starts_with("llama-batched-bench -npl 1: S_TG"))
            .unwrap();
        assert_eq!(s_tg.values, [vec![100.0, 100.0], vec![110.0, 105.0]]);
        let alloc = rows
            .iter()
            .find(|r| {
                r.measure
                    .starts_with("ggml_backend_sched_alloc_graph, tg128")
            })
            .unwrap();
        assert_eq!(
            alloc.values,
            [vec![50.0, 60.0, 50.0], vec![20.0, 40.0, 25.0]]
        );
        assert_eq!(alloc.paired.unwrap().median, 0.5);
        assert_eq!(alloc.met(), Some(true), "0.5 is at most 0.5");
        assert!(
            alloc.measure.ends_with("calls/process A 100 B 100"),
            "{}",
            alloc.measure
        );
        // The host part and the wait, per token: 4 and 8 times alloc_graph's ns in `probe`,
        // no goal.
        let compute = rows
            .iter()
            .find(|r| {
                r.measure
                    .starts_with("ggml_backend_sched_graph_compute_async")
            })
            .unwrap();
        assert_eq!(compute.values[0], [200.0, 240.0, 200.0]);
        assert_eq!(compute.met(), None);
        let wait = rows
            .iter()
            .find(|r| r.measure.starts_with("ggml_backend_sched_synchronize"))
            .unwrap();
        assert_eq!(wait.values[1], [160.0, 320.0, 200.0]);
        // The batched process's host part and wait (B's batched run of round 2 failed:
        // that round is out).
        let batched_host = rows
            .iter()
            .find(|r| {
                r.measure.starts_with(
                    "ggml_backend_sched_graph_compute_async (host part), the llama-batched-bench \
                     process, -npl 1",
                )
            })
            .unwrap();
        assert!(
            batched_host.measure.ends_with("calls/process A 300 B 300"),
            "{}",
            batched_host.measure
        );
        assert_eq!(batched_host.values, [vec![200.0, 200.0], vec![80.0, 100.0]]);
        // 5 llama-bench rows, 2 batched, 10 probe rows (alloc_graph and reset for each of the
        // three processes; compute and wait for the one without graph reuse and the batched
        // one).
        assert_eq!(rows.len(), 17);
    }

    #[test]
    fn without_the_probe_there_are_no_scheduler_rows() {
        let mut a = arm_round(100.0, 1, false);
        a.no_reuse.as_mut().unwrap().probe = None;
        a.bench.as_mut().unwrap().probe = None;
        a.batched.as_mut().unwrap().probe = None;
        let rows = rows(&[[a.clone(), a]], 8, &[1]);
        assert!(rows.iter().all(|r| r.unit == "t/s"));
        assert_eq!(rows.len(), 7);
    }

    #[test]
    fn goals_summary_tells_slower_rows_from_the_spread() {
        let tok = Some(Goal::AtLeast(GOAL_TOKENS));
        let a = vec![100.0; 10];
        // B below A in all 10 rounds: p = 2/1024
        let slower: Vec<f64> = (0..10).map(|i| 95.0 + f64::from(i) * 0.1).collect();
        // rounds on both sides of 1, median below
        let spread = vec![
            90.0, 105.0, 97.0, 103.0, 98.0, 99.0, 102.0, 96.0, 101.0, 97.5,
        ];
        let rows = vec![
            Row::new("pp".into(), "t/s", tok, [a.clone(), slower]),
            Row::new("tg".into(), "t/s", tok, [a.clone(), spread]),
            Row::new("met".into(), "t/s", tok, [a.clone(), vec![101.0; 10]]),
            Row::new(
                "alloc".into(),
                "µs/call",
                Some(Goal::AtMost(GOAL_OVERHEAD)),
                [a.clone(), vec![90.0; 10]],
            ),
            Row::new("reset".into(), "µs/call", None, [a.clone(), a]),
        ];
        let s = goals_summary(&rows);
        assert!(s.contains("Goals: 1 of 4 met. Not met:"), "{s}");
        assert!(
            s.contains("- below 1.00 round after round (p < 0.05): pp (0.955, p=0.002)\n"),
            "{s}"
        );
        assert!(
            s.contains(
                "- below 1.00 within this run's spread (p ≥ 0.05, rounds on both sides of 1): \
                 tg (0.985, p=0.432)\n"
            ),
            "{s}"
        );
        // every ratio 0.9: p is 2/1024, but the goal is 0.50, not 1: listed with no verdict on p
        assert!(s.contains("- other goals: alloc (0.900, p=0.002)\n"), "{s}");
        // every goal met: nothing under the table
        assert_eq!(goals_summary(&rows[2..3]), "");
    }

    #[test]
    fn the_table_prints_medians_ratios_and_verdicts() {
        let rounds = vec![
            [
                arm_round(100.0, 50_000, false),
                arm_round(110.0, 20_000, false),
            ],
            [
                arm_round(200.0, 60_000, false),
                arm_round(180.0, 40_000, false),
            ],
        ];
        let arm = |key: &'static str, label: &str| Arm {
            key,
            label: label.into(),
            source: format!("/src/{key}.so").into(),
            dir: "/d".into(),
            file: "/d/libggml-base.so.0".into(),
            sha256: "ab".repeat(32),
        };
        let rep = GpuReport {
            command: "bench gpu --model m.gguf".into(),
            layout: "bundle".into(),
            root: "/b".into(),
            started_utc: "s".into(),
            finished_utc: "f".into(),
            wall_seconds: 1.0,
            machine: Machine {
                cpu: "cpu".into(),
                cores: 16,
                kernel: "Linux".into(),
                mem_gib: 128.0,
            },
            gpu: Some("NVIDIA H200".into()),
            loadavg_start: 0.0,
            loadavg_end: 0.0,
            llama_build: "/llama/build".into(),
            model: "/m.gguf".into(),
            model_bytes: 1 << 20,
            arms: [arm("A", "stock"), arm("B", "ours")],
            sched_probe: Some("/p.so".into()),
            ab_probe: None,
            rounds_asked: 3,
            reps: 5,
            partial_ngl: 8,
            npl: vec![1],
            devices: Some("RPC0,CUDA0".into()),
            threads: None,
            rows: rows(&rounds, 8, &[1]),
            errors: vec!["round 3 arm B: llama-bench failed\nexit 1".into()],
            rounds,
        };
        let md = rep.markdown();
        // tg128: medians 150 and 145, paired 1.10 and 0.90 -> 1.00; one round each way, the
        // signed-rank p is 1.
        assert!(
            md.contains(
                "| llama-bench tg128, -ngl 99 | t/s | 150.0 | 145.0 | 0.967 | \
                 1.000 [0.950–1.050] (n=2, p=1.000) | ≥ 1.00 met |"
            ),
            "{md}"
        );
        // alloc_graph: 50, 60 µs against 20, 40: paired 0.4 and 0.667, both below 1: of the 4
        // sign assignments, 1 is as far on each side, p = 0.5.
        assert!(md.contains("| µs/call | 55.00 | 30.00 | 0.545 | 0.533 [0.467–0.600] (n=2, p=0.500) | ≤ 0.50 **not met** |"), "{md}");
        assert!(md.contains("- Rounds: 2 of 3 asked"), "{md}");
        assert!(
            md.contains("- Devices: every tool split over RPC0,CUDA0 (`-dev`, equal `-ts`); RPC0"),
            "{md}"
        );
        assert!(
            md.contains("- round 3 arm B: llama-bench failed exit 1"),
            "{md}"
        );
        assert!(md.contains("GPU: NVIDIA H200"), "{md}");
        // the summary under the table names the missed goal
        assert!(md.contains("\nGoals: 7 of 10 met. Not met:\n\n- other goals: ggml_backend_sched_alloc_graph, tg128 -ngl 99"), "{md}");
        assert!(!md.contains("- below 1.00"), "{md}");
    }
}
