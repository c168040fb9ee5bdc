//! `GGML_HRX_REPORT=1`: placement report, printed through ggml's logger once per distinct
//! placement of a graph.
//!
//! The scheduler hands each device split to `graph_compute` as a view of the user's graph,
//! and the view carries that graph's hash set: every node of the whole graph, including
//! those other backends run. The reporter collects the nodes HRX ran during one evaluation
//! (an evaluation ends when a split arrives from another graph or repeats a node already
//! run) and, when it ends, counts the graph's compute nodes that did not run on HRX, by op.
//! A placement (node count, splits, off-device ops) is printed the first time it is seen.
//! Without a hash set (a graph built by hand) the split itself is the graph.

use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};

use ggml_sys::{ggml_cgraph, ggml_tensor};

use crate::arena::ggml_hrx_arena_stats;
use crate::claims;
use crate::ops::op_name;
use crate::runtime::hash_set;
use crate::runtime::WeightUploads;

struct Evaluation {
    keys: usize,
    /// compute nodes of the whole graph: (tensor, op)
    nodes: Vec<(usize, u32)>,
    total_nodes: usize,
    ran: HashSet<usize>,
    splits: usize,
}

/// Per-device report state.
pub struct Reporter {
    device: usize,
    enabled: bool,
    seen: HashSet<u64>,
    current: Option<Evaluation>,
}

impl Reporter {
    /// A reporter for device `device`, enabled by `GGML_HRX_REPORT` (a switch: `1`, `on`,
    /// ...; see [`crate::env::switch`]).
    pub fn new(device: usize) -> Reporter {
        let enabled = crate::env::read("GGML_HRX_REPORT", false, "0 (off)", crate::env::switch);
        Reporter {
            device,
            enabled,
            seen: HashSet::new(),
            current: None,
        }
    }

    /// Whether reporting is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Records one split computed on the device: `ran` are the nodes it ran (or skipped as
    /// views).
    pub fn on_compute(
        &mut self,
        g: &ggml_cgraph,
        ran: &[*const ggml_tensor],
        stats: &ggml_hrx_arena_stats,
    ) {
        if !self.enabled {
            return;
        }
        let keys = g.visited_hash_set.keys as usize;
        let new_eval = match &self.current {
            None => true,
            Some(e) => {
                keys == 0 || e.keys != keys || ran.iter().any(|p| e.ran.contains(&(*p as usize)))
            }
        };
        if new_eval {
            self.finish(stats);
            let all: Vec<*mut ggml_tensor> = if keys == 0 {
                ran.iter().map(|p| *p as *mut _).collect()
            } else {
                // SAFETY: the view's hash set belongs to the live user graph.
                unsafe { hash_set::all_tensors(&g.visited_hash_set) }
            };
            let mut nodes = Vec::new();
            let mut total = 0;
            for p in all {
                // SAFETY: graph tensors are live during the evaluation.
                let t = unsafe { &*p };
                if t.op == ggml_sys::GGML_OP_NONE {
                    continue;
                }
                total += 1;
                if !claims::is_view_op(t.op) && t.ne.iter().all(|&n| n != 0) {
                    nodes.push((p as usize, t.op));
                }
            }
            self.current = Some(Evaluation {
                keys,
                nodes,
                total_nodes: total,
                ran: HashSet::new(),
                splits: 0,
            });
        }
        let e = self.current.as_mut().unwrap();
        e.ran.extend(ran.iter().map(|p| *p as usize));
        e.splits += 1;
    }

    /// When the device's backend is freed (the end of a run): the host-weight arena's totals
    /// and, when the runtime uploads weights beside its queue (`GGML_HRX_PREFETCH`), how
    /// many uploads went there and how many of them overlapped earlier work. A placement
    /// is printed once, with the totals of that moment; these are the run's.
    pub fn exit_summary(&self, stats: &ggml_hrx_arena_stats, uploads: Option<WeightUploads>) {
        if !self.enabled {
            return;
        }
        crate::log::info(&summary_line(self.device, stats, uploads));
    }

    /// Ends the current evaluation and prints its placement if not seen before.
    pub fn finish(&mut self, stats: &ggml_hrx_arena_stats) {
        let Some(e) = self.current.take() else { return };
        let mut off: BTreeMap<&'static str, usize> = BTreeMap::new();
        let mut on = 0;
        for (p, op) in &e.nodes {
            if e.ran.contains(p) {
                on += 1;
            } else {
                *off.entry(op_name(*op)).or_default() += 1;
            }
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (e.total_nodes, e.nodes.len(), e.splits, &off).hash(&mut h);
        if !self.seen.insert(h.finish()) {
            return;
        }
        let n_off: usize = off.values().sum();
        let by_op: Vec<String> = off.iter().map(|(k, v)| format!("{k} x {v}")).collect();
        crate::log::info(&format!(
            "HRX{d} report: graph of {} nodes ({} compute): {on} on HRX{d} in {} split(s), {n_off} off HRX{d}{}{}; arena: hits {}, misses {}, refills {}, evictions {}, refusals {}, resident {:.2} MiB of {:.2} MiB\n",
            e.total_nodes,
            e.nodes.len(),
            e.splits,
            if by_op.is_empty() { "" } else { ": " },
            by_op.join(", "),
            stats.hits,
            stats.misses,
            stats.refills,
            stats.evictions,
            stats.refusals,
            stats.resident_bytes as f64 / 1048576.0,
            stats.limit_bytes as f64 / 1048576.0,
            d = self.device
        ));
    }
}

/// The line [`Reporter::exit_summary`] prints.
fn summary_line(device: usize, s: &ggml_hrx_arena_stats, uploads: Option<WeightUploads>) -> String {
    let mib = |b: u64| b as f64 / 1048576.0;
    let prefetch = match uploads {
        None => String::new(),
        Some(u) => format!(
            "; prefetch: {} weight uploads ({:.2} MiB) beside the queue, {} of them ({:.2} MiB) started while earlier work ran",
            u.uploads,
            mib(u.bytes),
            u.behind_work,
            mib(u.behind_work_bytes)
        ),
    };
    format!(
        "HRX{device} at exit: arena hits {}, misses {}, refills {}, evictions {}, refusals {}, resident {:.2} MiB of {:.2} MiB{prefetch}\n",
        s.hits,
        s.misses,
        s.refills,
        s.evictions,
        s.refusals,
        mib(s.resident_bytes),
        mib(s.limit_bytes)
    )
}

#[cfg(test)]
mod summary_tests {
    use super::*;

    #[test]
    fn the_exit_summary_names_the_overlap() {
        let s = ggml_hrx_arena_stats {
            hits: 5,
            misses: 3,
            refills: 1,
            evictions: 2,
            refusals: 0,
            resident_bytes: 3 << 20,
            limit_bytes: 4 << 20,
        };
        assert_eq!(
            summary_line(0, &s, None),
            "HRX0 at exit: arena hits 5, misses 3, refills 1, evictions 2, refusals 0, resident 3.00 MiB of 4.00 MiB\n"
        );
        let u = WeightUploads {
            uploads: 3,
            bytes: 3 << 20,
            behind_work: 2,
            behind_work_bytes: 1 << 21,
        };
        assert_eq!(
            summary_line(1, &s, Some(u)),
            "HRX1 at exit: arena hits 5, misses 3, refills 1, evictions 2, refusals 0, resident 3.00 MiB of 4.00 MiB; \
             prefetch: 3 weight uploads (3.00 MiB) beside the queue, 2 of them (2.00 MiB) started while earlier work ran\n"
        );
    }
}
