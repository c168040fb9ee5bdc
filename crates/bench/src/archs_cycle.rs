//! Real model graphs with 2 and 3 backends, steady cycle: `cabi-tests/sched-bench/archs_cycle.c`
//! runs every model `test-llama-archs -o` writes (random weights, one file per architecture
//! and dense/MoE variant) on `HRX0` (scheduler backends HRX0 + CPU) and on `HRX0/HRX1` (layers
//! split across two HRX devices: three backends), decoding single tokens with llama.cpp's graph
//! reuse off, so every token goes through `ggml_backend_sched_reset` and
//! `ggml_backend_sched_alloc_graph`; the preloaded probe times those calls. Their sum is the
//! cycle compared here (llama.cpp resets the scheduler itself before building a graph, so stock's
//! clearing of its hash tables happens in the reset call, not in alloc_graph).

use crate::arms::Arm;
use crate::buffers::{Ratios, Sized};
use crate::probe;
use crate::sched::tail;
use crate::stats::{paired_ratios, Summary};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Tokens decoded per model inside the timed window, and untimed before it.
pub const TOKENS: u32 = 16;
const WARMUP: u32 = 2;

/// One model's line from `archs-cycle`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ModelRun {
    /// File name, e.g. `llama-dense.gguf`.
    pub model: String,
    pub ok: bool,
    #[serde(default)]
    pub error: Option<String>,
    /// Scheduler backends (devices + CPU) at the last call.
    #[serde(default)]
    pub backends: i64,
    /// Graph nodes and splits at the last call.
    #[serde(default)]
    pub nodes: i64,
    #[serde(default)]
    pub splits: i64,
    /// Hash of the backend of every node of the last graph (`sched_probe.h`).
    #[serde(default)]
    pub placement_hash: u64,
    /// Each backend's compute buffer after the last graph, bytes (first 4 backends).
    #[serde(default)]
    pub buffer_bytes: [i64; 4],
    /// alloc_graph calls in the timed window (one per token) and their total time, ns.
    #[serde(default)]
    pub calls: i64,
    #[serde(default)]
    pub ns: i64,
    /// ggml_backend_sched_reset calls in the timed window and their total time, ns.
    #[serde(default)]
    pub reset_calls: i64,
    #[serde(default)]
    pub reset_ns: i64,
}

impl ModelRow {
    /// Its compute buffers summed over the backends, both arms, named by the model file
    /// without `.gguf` (for [`crate::buffers::Ratios`]).
    pub fn sized(&self) -> Sized {
        Sized {
            name: self.model.trim_end_matches(".gguf").to_string(),
            bytes: [self.buffers[0].iter().sum(), self.buffers[1].iter().sum()],
        }
    }
}

impl ModelRun {
    /// reset + alloc_graph, ns per token.
    fn cycle_ns(&self) -> f64 {
        (self.ns + self.reset_ns) as f64 / self.calls.max(1) as f64
    }

    /// alloc_graph alone, ns per token.
    fn alloc_ns(&self) -> f64 {
        self.ns as f64 / self.calls.max(1) as f64
    }
}

/// One device configuration, every round's processes per arm.
#[derive(Debug, Clone, Serialize)]
pub struct CycleConfig {
    /// `-dev`-style device list, e.g. `HRX0/HRX1`.
    pub devices: String,
    /// `[A, B]`: one entry per round in which both arms' processes finished, each the
    /// models of one process.
    pub runs: [Vec<Vec<ModelRun>>; 2],
    /// Rounds left out because a process failed (crashed, timed out, mapped another
    /// library), with what happened.
    pub errors: Vec<String>,
}

/// Per model: medians over rounds, both arms, ns per token.
#[derive(Debug, Clone, Serialize)]
pub struct ModelRow {
    pub model: String,
    pub backends: i64,
    pub nodes: i64,
    /// Splits `[A, B]` (they differ only where the in-place rule moved a node).
    pub splits: [i64; 2],
    /// Every process of both arms gave the same nodes, backends, splits and placement hash.
    pub same_placement: bool,
    /// Compute buffer bytes per backend, `[A, B]`, from each arm's last process.
    pub buffers: [[i64; 4]; 2],
    /// reset + alloc_graph.
    pub cycle_ns: [f64; 2],
    /// alloc_graph alone.
    pub alloc_ns: [f64; 2],
}

/// Compiles `archs-cycle` into `<out>/archs-cycle` ([`crate::cbuild::compile`]), linked to the
/// stock `libllama`, `libggml` and `libggml-base` in `stock_dir`.
pub fn build(ws: &Path, upstream: &Path, stock_dir: &Path, out: &Path) -> Result<PathBuf> {
    crate::cbuild::compile(
        &ws.join("cabi-tests/sched-bench/archs_cycle.c"),
        &out.join("archs-cycle"),
        &[upstream.join("ggml/include"), upstream.join("include")],
        &[],
        &[
            "-L".as_ref(),
            stock_dir.as_os_str(),
            "-lllama".as_ref(),
            "-lggml".as_ref(),
            "-lggml-base".as_ref(),
            "-ldl".as_ref(),
        ],
    )
}

/// Writes the models into a fresh `dir` with the stock `test-llama-archs -o` (`-a filter`
/// when given); returns them sorted by name.
pub fn write_models(
    test_llama_archs: &Path,
    stock_dir: &Path,
    dir: &Path,
    filter: Option<&str>,
) -> Result<Vec<PathBuf>> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir)?;
    let mut cmd = Command::new(test_llama_archs);
    cmd.env("LD_LIBRARY_PATH", stock_dir).arg("-o").arg(dir);
    if let Some(f) = filter {
        cmd.args(["-a", f]);
    }
    let output = cmd
        .output()
        .with_context(|| format!("starting {}", test_llama_archs.display()))?;
    if !output.status.success() {
        bail!(
            "test-llama-archs -o failed ({}): {}",
            output.status,
            tail(&String::from_utf8_lossy(&output.stderr), 800)
        );
    }
    let mut models: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    models.sort();
    if models.is_empty() {
        bail!("test-llama-archs -o wrote no models into {}", dir.display());
    }
    Ok(models)
}

/// Everything one `archs-cycle` process needs besides the arm.
pub struct Setup<'a> {
    pub program: &'a Path,
    pub stock_dir: &'a Path,
    pub probe_lib: &'a Path,
    pub probe_out: &'a Path,
    pub hrx: &'a Path,
    pub models: &'a [PathBuf],
}

/// Runs `archs-cycle --devices devices` over all models for `arm`; checks that the scheduler
/// calls went to the arm's file.
pub fn run(setup: &Setup, arm: &Arm, devices: &str) -> Result<Vec<ModelRun>> {
    let _ = fs::remove_file(setup.probe_out);
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=10", "900"]).arg(setup.program);
    cmd.env("LD_LIBRARY_PATH", arm.ld_library_path(setup.stock_dir))
        .env("LD_PRELOAD", setup.probe_lib)
        .env("SCHED_PROBE_OUT", setup.probe_out)
        .env("SCHED_PROBE_HASH", "1")
        .env("GGML_BACKEND_PATH", setup.hrx)
        .env("GGML_HRX_DEVICES", "2")
        .args(["--devices", devices])
        .args(["--tokens", &TOKENS.to_string()])
        .args(["--warmup", &WARMUP.to_string()])
        .args(setup.models);
    let output = cmd
        .output()
        .with_context(|| format!("starting {}", setup.program.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let models: Vec<ModelRun> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).with_context(|| format!("parsing {l}")))
        .collect::<Result<_>>()?;
    if !output.status.success() {
        // The models are run in order and each line is flushed: the first one without a
        // line is the one the process died on.
        let at = setup
            .models
            .get(models.len())
            .and_then(|p| p.file_name())
            .map_or("after the last model".into(), |n| {
                n.to_string_lossy().into_owned()
            });
        bail!(
            "archs-cycle --devices {devices} arm {} ({}) at {at}: {}",
            arm.key,
            output.status,
            tail(&String::from_utf8_lossy(&output.stderr), 400)
        );
    }
    let probe = probe::take(setup.probe_out)?;
    arm.check_mapped(&probe.lib, "archs-cycle scheduler calls")?;
    Ok(models)
}

impl CycleConfig {
    /// Models that ran in every process of both arms, with their per-arm medians.
    pub fn rows(&self) -> Vec<ModelRow> {
        let mut per_model: BTreeMap<&str, [Vec<&ModelRun>; 2]> = BTreeMap::new();
        for (k, runs) in self.runs.iter().enumerate() {
            for run in runs {
                for m in run {
                    per_model.entry(&m.model).or_default()[k].push(m);
                }
            }
        }
        let rounds = [self.runs[0].len(), self.runs[1].len()];
        per_model
            .into_iter()
            .filter(|(_, arms)| {
                (0..2).all(|k| arms[k].len() == rounds[k] && arms[k].iter().all(|m| m.ok))
            })
            .filter_map(|(name, arms)| {
                let med = |k: usize, f: fn(&ModelRun) -> f64| {
                    let v: Vec<f64> = arms[k].iter().map(|m| f(m)).collect();
                    Summary::of(&v).map(|s| s.median)
                };
                let last = |k: usize| arms[k].last().copied();
                let first = arms[0].first()?;
                let same_placement = arms.iter().flatten().all(|m| {
                    (m.nodes, m.backends, m.splits, m.placement_hash)
                        == (
                            first.nodes,
                            first.backends,
                            first.splits,
                            first.placement_hash,
                        )
                });
                Some(ModelRow {
                    model: name.to_string(),
                    backends: last(0)?.backends,
                    nodes: last(0)?.nodes,
                    splits: [last(0)?.splits, last(1)?.splits],
                    same_placement,
                    buffers: [last(0)?.buffer_bytes, last(1)?.buffer_bytes],
                    cycle_ns: [med(0, ModelRun::cycle_ns)?, med(1, ModelRun::cycle_ns)?],
                    alloc_ns: [med(0, ModelRun::alloc_ns)?, med(1, ModelRun::alloc_ns)?],
                })
            })
            .collect()
    }

    /// Models that failed or are missing in some process, with the first error seen.
    pub fn failed(&self) -> Vec<(String, String)> {
        let mut out: BTreeMap<String, String> = BTreeMap::new();
        let all: std::collections::BTreeSet<&str> = self
            .runs
            .iter()
            .flatten()
            .flatten()
            .map(|m| m.model.as_str())
            .collect();
        for runs in &self.runs {
            for run in runs {
                for m in run.iter().filter(|m| !m.ok) {
                    out.entry(m.model.clone())
                        .or_insert_with(|| m.error.clone().unwrap_or_default());
                }
                for &name in &all {
                    if !run.iter().any(|m| m.model == name) {
                        out.entry(name.to_string())
                            .or_insert_with(|| "missing from a process's output".to_string());
                    }
                }
            }
        }
        out.into_iter().collect()
    }

    /// Models whose last graph was not placed the same in every process: per arm, how many
    /// processes gave each variant (variants numbered by first appearance, A's processes first).
    pub fn placement_variants(&self) -> Vec<(String, [Vec<usize>; 2])> {
        type Key = (i64, i64, i64, u64);
        let mut per_model: BTreeMap<&str, (Vec<Key>, [Vec<usize>; 2])> = BTreeMap::new();
        for (k, runs) in self.runs.iter().enumerate() {
            for m in runs.iter().flatten().filter(|m| m.ok) {
                let key = (m.nodes, m.backends, m.splits, m.placement_hash);
                let (seen, counts) = per_model.entry(&m.model).or_default();
                let v = match seen.iter().position(|s| *s == key) {
                    Some(v) => v,
                    None => {
                        seen.push(key);
                        seen.len() - 1
                    }
                };
                for c in counts.iter_mut() {
                    c.resize(seen.len(), 0);
                }
                counts[k][v] += 1;
            }
        }
        per_model
            .into_iter()
            .filter(|(_, (seen, _))| seen.len() > 1)
            .map(|(name, (_, counts))| (name.to_string(), counts))
            .collect()
    }

    /// Per arm, per round: the sum over the models of `rows` of the cycle's ns per token.
    pub fn round_totals(&self, rows: &[ModelRow]) -> [Vec<f64>; 2] {
        let keep: std::collections::BTreeSet<&str> =
            rows.iter().map(|r| r.model.as_str()).collect();
        let totals = |k: usize| -> Vec<f64> {
            self.runs[k]
                .iter()
                .map(|run| {
                    run.iter()
                        .filter(|m| keep.contains(m.model.as_str()))
                        .map(ModelRun::cycle_ns)
                        .sum()
                })
                .collect()
        };
        [totals(0), totals(1)]
    }

    /// Per round, B's total over A's ([`CycleConfig::round_totals`]).
    pub fn paired_total_ratios(&self, rows: &[ModelRow]) -> Vec<f64> {
        let [a, b] = self.round_totals(rows);
        paired_ratios(&a, &b)
    }
}

/// The report's section for 5, markdown.
pub fn markdown(
    configs: &[CycleConfig],
    rounds: u32,
    n_models: usize,
    error: Option<&str>,
    goal: f64,
) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n### Real graphs, steady cycle: test-llama-archs models on 2 and 3 backends (probe: reset + alloc_graph per token)\n"
    );
    if let Some(e) = error {
        let _ = writeln!(s, "- {}", e.replace('\n', " "));
        return s;
    }
    let _ = writeln!(
        s,
        "Every model `test-llama-archs -o` writes ({n_models} files: random weights, every \
         architecture, dense and MoE), all layers offloaded; on `HRX0` the scheduler has HRX0 + CPU, \
         on `HRX0/HRX1` the layers are split across two HRX devices (3 backends). Per model, \
         {TOKENS} single-token decodes with graph reuse off (`LLAMA_GRAPH_REUSE_DISABLE=1`), so \
         each token is one `sched_reset` + `sched_alloc_graph` of a new graph; timed by the probe. \
         {rounds} rounds asked, one process per arm per configuration per round (A B, then B A); \
         the table says how many finished in both arms. After each decode the program waits for \
         the devices (`llama_synchronize`), outside the timed calls. Per model: \
         the median over rounds of µs per token (reset + alloc_graph). Per arm: the sum over the \
         models of µs per token, each round; the goal is judged on the paired per-round ratio of \
         those sums.\n"
    );
    let _ = writeln!(
        s,
        "| devices | backends | models (both arms) | nodes min–max | same placement of every node, every round | compute buffers Σ B/A (models over 1.00) | rounds | A: Σ µs/token, median [min–max] over rounds | B: the same | B/A of medians | alloc_graph alone B/A | paired per round B/A [IQR] | per-model B/A median [min–max] | models at ≤ {goal} | goal B/A ≤ {goal} |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for c in configs {
        let rows = c.rows();
        if rows.is_empty() {
            let _ = writeln!(
                s,
                "| {} | – | 0 | | | | {} | | | | | | | | – |",
                c.devices,
                c.runs[0].len()
            );
            continue;
        }
        let [ta, tb] = c.round_totals(&rows);
        let (Some(a), Some(b)) = (Summary::of(&ta), Summary::of(&tb)) else {
            continue;
        };
        let alloc_sum = |k: usize| rows.iter().map(|r| r.alloc_ns[k]).sum::<f64>();
        let alloc_ratio = alloc_sum(1) / alloc_sum(0);
        let backends: std::collections::BTreeSet<i64> = rows.iter().map(|r| r.backends).collect();
        let nodes_min = rows.iter().map(|r| r.nodes).min().unwrap_or(0);
        let nodes_max = rows.iter().map(|r| r.nodes).max().unwrap_or(0);
        let same_placement = rows.iter().filter(|r| r.same_placement).count();
        let sized: Vec<Sized> = rows.iter().map(ModelRow::sized).collect();
        let buffers = Ratios::of(&sized).map_or("–".into(), |b| {
            format!("{:.3} ({})", b.total_ratio(), b.over.len())
        });
        let per_model: Vec<f64> = rows.iter().map(|r| r.cycle_ns[1] / r.cycle_ns[0]).collect();
        let pm = Summary::of(&per_model);
        let paired = Summary::of(&c.paired_total_ratios(&rows));
        let at_goal = per_model.iter().filter(|&&r| r <= goal).count();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}–{} | {}/{} | {} | {} | {:.1} [{:.1}–{:.1}] | {:.1} [{:.1}–{:.1}] | {:.3} | {:.3} | {} | {} | {}/{} | {} |",
            c.devices,
            backends
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            rows.len(),
            nodes_min,
            nodes_max,
            same_placement,
            rows.len(),
            buffers,
            c.runs[0].len(),
            a.median / 1e3,
            a.min / 1e3,
            a.max / 1e3,
            b.median / 1e3,
            b.min / 1e3,
            b.max / 1e3,
            b.median / a.median,
            alloc_ratio,
            paired.map_or("–".into(), |p| format!(
                "{:.3} [{:.3}–{:.3}]",
                p.median, p.p25, p.p75
            )),
            pm.map_or("–".into(), |p| format!(
                "{:.3} [{:.3}–{:.3}]",
                p.median, p.min, p.max
            )),
            at_goal,
            rows.len(),
            if paired.is_some_and(|p| p.median <= goal) {
                "met"
            } else {
                "**not met**"
            }
        );
    }
    for c in configs {
        let mut rows = c.rows();
        rows.sort_by_key(|r| std::cmp::Reverse(r.nodes));
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            s,
            "\nLargest graphs on `{}`, µs per token, reset + alloc_graph (median over rounds):\n",
            c.devices
        );
        let _ = writeln!(s, "| model | nodes | splits A/B | A µs | B µs | B/A |");
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for r in rows.iter().take(5) {
            let _ = writeln!(
                s,
                "| {} | {} | {}/{} | {:.1} | {:.1} | {:.3} |",
                r.model.trim_end_matches(".gguf"),
                r.nodes,
                r.splits[0],
                r.splits[1],
                r.cycle_ns[0] / 1e3,
                r.cycle_ns[1] / 1e3,
                r.cycle_ns[1] / r.cycle_ns[0]
            );
        }
    }
    for c in configs {
        let varied = c.placement_variants();
        if !varied.is_empty() {
            let _ = writeln!(
                s,
                "\n- `{}`: placed differently between processes (processes per variant of the \
                 last graph, A; B): {}",
                c.devices,
                varied
                    .iter()
                    .map(|(m, [a, b])| format!("{m} ({a:?}; {b:?})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for e in &c.errors {
            let _ = writeln!(s, "\n- `{}`: left out, {}", c.devices, e.replace('\n', " "));
        }
        let failed = c.failed();
        if !failed.is_empty() {
            let _ = writeln!(
                s,
                "\n- `{}`: {} models did not run in every process and are left out: {}",
                c.devices,
                failed.len(),
                failed
                    .iter()
                    .map(|(m, e)| format!("{m} ({e})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 tokens; the resets took a quarter of `ns`, on top of it.
    fn ok(model: &str, ns: i64, splits: i64) -> ModelRun {
        ModelRun {
            model: model.into(),
            ok: true,
            error: None,
            backends: 3,
            nodes: 100,
            splits,
            placement_hash: 7,
            buffer_bytes: [1024, 2048, 0, 0],
            calls: 4,
            ns,
            reset_calls: 4,
            reset_ns: ns / 4,
        }
    }

    fn failed(model: &str, error: &str) -> ModelRun {
        ModelRun {
            ok: false,
            error: Some(error.into()),
            calls: 0,
            ns: 0,
            reset_calls: 0,
            reset_ns: 0,
            ..ok(model, 0, 0)
        }
    }

    fn hashed(m: ModelRun, placement_hash: u64) -> ModelRun {
        ModelRun {
            placement_hash,
            ..m
        }
    }

    #[test]
    fn rows_keep_models_that_ran_everywhere_with_per_arm_medians() {
        let c = CycleConfig {
            devices: "HRX0/HRX1".into(),
            runs: [
                vec![
                    vec![ok("a", 400, 5), ok("b", 800, 2), ok("c", 100, 1)],
                    vec![ok("a", 800, 5), ok("b", 800, 2), ok("c", 100, 1)],
                    vec![ok("a", 1200, 5), ok("b", 800, 2), ok("c", 100, 1)],
                ],
                vec![
                    vec![
                        ok("a", 200, 5),
                        failed("b", "llama_decode returned 1"),
                        ok("c", 50, 1),
                    ],
                    vec![ok("a", 400, 5), ok("b", 400, 2), ok("c", 50, 1)],
                    // "c" is missing from this process (it died there, say).
                    vec![hashed(ok("a", 4000, 5), 8), ok("b", 400, 2)],
                ],
            ],
            errors: Vec::new(),
        };
        let rows = c.rows();
        // "b" failed in one of B's processes and "c" is missing from one: both left out,
        // and listed with why.
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].model, "a");
        // Medians over rounds of ns per token (4 each): alloc_graph A {100, 200, 300},
        // B {50, 100, 1000}; with the resets 1.25 times that.
        assert_eq!(rows[0].alloc_ns, [200.0, 100.0]);
        assert_eq!(rows[0].cycle_ns, [250.0, 125.0]);
        assert_eq!(rows[0].splits, [5, 5]);
        assert_eq!(rows[0].buffers, [[1024, 2048, 0, 0]; 2]);
        assert_eq!(
            rows[0].sized(),
            Sized {
                name: "a".into(),
                bytes: [3072, 3072]
            }
        );
        // One of B's processes placed "a" differently (another hash).
        assert!(!rows[0].same_placement);
        assert_eq!(
            c.placement_variants(),
            vec![("a".to_string(), [vec![3, 0], vec![2, 1]])]
        );
        assert_eq!(
            c.failed(),
            vec![
                ("b".to_string(), "llama_decode returned 1".to_string()),
                (
                    "c".to_string(),
                    "missing from a process's output".to_string()
                )
            ]
        );
        // Per round, over the kept models only (cycle ns per token, summed): 250/500,
        // 500/1000, 5000/1500.
        let [ta, tb] = c.round_totals(&rows);
        assert_eq!(ta, vec![125.0, 250.0, 375.0]);
        assert_eq!(tb, vec![62.5, 125.0, 1250.0]);
        let r = c.paired_total_ratios(&rows);
        assert_eq!(r.len(), 3);
        assert!((r[0] - 0.5).abs() < 1e-12 && (r[1] - 0.5).abs() < 1e-12);
        assert!((r[2] - 1250.0 / 375.0).abs() < 1e-12);
    }

    #[test]
    fn markdown_reports_goal_on_the_paired_median_and_names_failures() {
        let c = CycleConfig {
            devices: "HRX0".into(),
            runs: [
                vec![vec![ok("m", 1000, 3), failed("x", "not a decoder-only model")]; 3],
                vec![vec![ok("m", 400, 3), failed("x", "not a decoder-only model")]; 3],
            ],
            errors: vec!["round 4: archs-cycle --devices HRX0 arm B (signal 11) at y.gguf".into()],
        };
        let md = markdown(&[c], 4, 2, None, 0.5);
        assert!(
            md.contains(
                "| HRX0 | 3 | 1 | 100–100 | 1/1 | 1.000 (0) | 3 | 0.3 [0.3–0.3] | 0.1 [0.1–0.1] | 0.400 | 0.400 |"
            ),
            "{md}"
        );
        assert!(md.contains("| 1/1 | met |"), "{md}");
        assert!(
            md.contains("1 models did not run in every process and are left out: x (not a decoder-only model)"),
            "{md}"
        );
        assert!(
            md.contains("- `HRX0`: left out, round 4: archs-cycle --devices HRX0 arm B (signal 11) at y.gguf"),
            "{md}"
        );
        let none = markdown(&[], 3, 0, Some("not run: needs the HRX library"), 0.5);
        assert!(none.contains("- not run: needs the HRX library"));
    }
}
