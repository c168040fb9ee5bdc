//! Driving the measurement rounds: every configuration (or llama-bench test) runs once per arm
//! per round, the arms' order alternating, and the per-process figures are collected into the
//! report's rows.

use super::{BufferRow, E2eRow, SchedRow};
use crate::arms::Arm;
use crate::e2e::{self, Workload};
use crate::probe::ProbeStats;
use crate::sched::{self, BufferSize, Config};
use crate::stats::{paired_ratios, signed_rank_p, Summary};
use crate::{progress, Options};
use anyhow::{bail, Result};
use std::path::Path;

/// The arms' order in round `round`: A B in even rounds, B A in odd ones.
pub fn round_order(round: u32) -> [usize; 2] {
    let first = (round % 2) as usize;
    [first, 1 - first]
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
    let mut rows: Vec<SchedRow> = configs.iter().map(|c| SchedRow::empty(c.clone())).collect();
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
                        if let Some(first) = run.ns.first_alloc_graph {
                            rows[ci].first_alloc_runs[k].push(first.median as f64);
                        }
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
            row.first_alloc[k] = Summary::of(&row.first_alloc_runs[k]);
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

/// The probe's figures of one workload's processes, `[A, B]`, in round order.
pub type ArmProbes = [Vec<ProbeStats>; 2];

/// Runs llama-bench up to `rounds` times per arm on `dev`, each of [`Workload::ALL`] in
/// turn, A then B in even rounds and B then A in odd ones; no round starts after `deadline`
/// (the first always runs). Returns the rows per test and, per workload in the order of
/// [`Workload::ALL`], the probe's figures per process, `[A, B]` (their length is the number
/// of rounds done).
pub fn run_e2e(
    setup: &e2e::Setup,
    arms: [&Arm; 2],
    dev: &e2e::Device,
    rounds: u32,
    deadline: std::time::Instant,
) -> Result<(Vec<E2eRow>, Vec<ArmProbes>)> {
    let mut rows: Vec<E2eRow> = Vec::new();
    let mut probes: Vec<ArmProbes> = Workload::ALL.iter().map(|_| [vec![], vec![]]).collect();
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
        for (w, &workload) in Workload::ALL.iter().enumerate() {
            for k in round_order(round) {
                let arm = arms[k];
                let run = e2e::run(setup, arm, dev, workload)?;
                probes[w][k].push(run.probe);
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
                                paired_p: None,
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
    }
    for (row, m) in rows.iter_mut().zip(&means) {
        row.ts = [Summary::of(&row.samples[0]), Summary::of(&row.samples[1])];
        let ratios = paired_ratios(&m[0], &m[1]);
        row.paired = Summary::of(&ratios);
        row.paired_p = signed_rank_p(&ratios);
    }
    Ok((rows, probes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arms_alternate_a_b_then_b_a() {
        assert_eq!(round_order(0), [0, 1]);
        assert_eq!(round_order(1), [1, 0]);
        assert_eq!(round_order(2), [0, 1]);
        assert_eq!(round_order(19), [1, 0]);
    }

    #[test]
    fn buffers_pair_by_backend_and_missing_b_reads_zero() {
        let size = |backend: &str, bytes| BufferSize {
            backend: backend.into(),
            bytes,
        };
        let rows = merge_buffers(
            &[size("FAKE0", 4096), size("FCPU", 512)],
            &[size("FCPU", 256)],
        );
        let got: Vec<(&str, u64, u64)> = rows
            .iter()
            .map(|r| (r.backend.as_str(), r.a, r.b))
            .collect();
        assert_eq!(got, [("FAKE0", 4096, 0), ("FCPU", 512, 256)]);
    }
}
