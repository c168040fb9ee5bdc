//! The key of an allocation plan: what gallocr's plan for the split graph depends on, so that
//! a plan made for one graph is never applied to a graph of another structure.
//!
//! gallocr keeps one plan (an offset per node and source position) from its last reserve and
//! reuses it while the next graph has the same node and leaf counts and every tensor still
//! fits (`ggml_gallocr_needs_realloc`). It never looks at which tensor reads which, or at the
//! output flags, so a graph of another shape with the same counts gets a plan in which an
//! output shares memory with a later node, or a source with its reader: silently wrong
//! values. Stock has this (after `ggml_backend_sched_reserve` of one graph, computing another
//! of equal counts); ours reserves again when the key changes. The key is positional, not by
//! address: two graphs built alike in different memory (llama.cpp's measure graph and its real
//! graphs) share a key, so the plan is reused exactly where stock reuses it and is right to.

use std::hash::Hasher;
use std::os::raw::c_int;

use ggml_sys::{ggml_cgraph, ggml_tensor};
use rustc_hash::FxHasher;

use super::inspect;
use super::split::Split;
use super::table::{GraphIds, NO_ID};

/// The graph a gallocr plan was made for: its [`plan_key`] and counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub key: u64,
    pub n_nodes: usize,
    pub n_leafs: usize,
}

/// Position (plus one; 0: not in the graph) of each table id in the user's graph, kept between
/// calls for its memory. Indexed by id, so no lookup by address is needed.
#[derive(Default)]
pub struct KeyScratch {
    pos: Vec<u32>,
    /// Ids given a position past the graph's while hashing: sources and view sources that
    /// are not leafs or nodes of the graph (cleared with `pos` at the end of each key).
    outside: Vec<u32>,
}

impl KeyScratch {
    /// Room for as many ids as a [`super::table::Table::with_capacity`] of `graph_size` has
    /// placements for ([`super::table::id_list_capacity`]), its first pages touched now (at
    /// most 1 MiB, as the table's). Grown on first use instead, its fresh pages were 3 of the
    /// page faults of llama.cpp's first `alloc_graph` of a new graph (about 4 µs of 67 on
    /// SmolLM2), whose ids outnumber the measure graphs'. The faults move to
    /// `ggml_backend_sched_new`, where stock touches its own tables.
    pub fn with_capacity(graph_size: usize) -> KeyScratch {
        let n = super::table::id_list_capacity(graph_size);
        let mut pos: Vec<u32> = super::table::room_for(n, "plan-key positions");
        super::table::prefault(&mut pos, 0);
        KeyScratch {
            pos,
            outside: Vec::new(),
        }
    }
}

/// What the plan of an allocation graph depends on, hashed by position (see the module
/// docs). The parts: of the allocation graph `alloc` (what gallocr sees: split inputs and
/// copies, the user's nodes in the backends' order, dependencies) its counts, and per leaf and
/// node its op, flags, type and whether it has storage already (`data`), with the backend of
/// every position (`node_ids`, `leaf_ids`); of the user's graph, whose ids `ix` holds (table
/// ids below `n_ids`), who reads whom: each node's source and view-source positions (a tensor
/// read but not in the graph numbered past the graph's, in the order it is first read); of the
/// splits, their backends, bounds and input positions; the backends' allocation dependencies
/// (`dep_keeps`: each dependency node's position in `alloc` and the table id of a tensor it
/// keeps alive); and the number of pipeline copies.
/// That fixes which tensor reads which in `alloc`, and so which memory gallocr lets them
/// share. Sizes are left out (gallocr checks them itself), and so are layouts, as in stock:
/// a plan made without an in-place reuse stays right for a graph whose layouts would allow
/// one, and a plan made with one is checked by gallocr for the one layout that reuse needs
/// (`Gallocr::fits`).
///
/// # Safety
/// `alloc` must be a live graph of live tensors; `node_ids` and `leaf_ids` hold at least its
/// `n_nodes` and `n_leafs` entries; `ix` holds ids below `n_ids`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn plan_key(
    scratch: &mut KeyScratch,
    alloc: &ggml_cgraph,
    node_ids: &[c_int],
    leaf_ids: &[c_int],
    ix: &GraphIds,
    n_ids: usize,
    splits: &[Split],
    dep_keeps: &[(u32, u32)],
    n_copies: usize,
) -> u64 {
    let mut h = FxHasher::default();
    // SAFETY: `alloc` is live (this function's contract).
    let (leafs, nodes) = unsafe { (inspect::leafs(alloc), inspect::nodes(alloc)) };
    h.write_usize(leafs.len());
    h.write_usize(nodes.len());
    h.write_usize(n_copies);
    // Separate loops, not chained iterators: this runs on every new graph's first call, and
    // a chain checks which half it is in at every step.
    for tensors in [leafs, nodes] {
        for &t in tensors {
            // SAFETY: a leaf or node of the live graph, so a live tensor; only read.
            let t: &ggml_tensor = unsafe { &*t };
            h.write_u64(
                u64::from(t.op)
                    | u64::from(t.type_) << 16
                    | u64::from(t.flags as u32) << 32
                    | u64::from(t.data.is_null()) << 63,
            );
        }
    }
    for ids in [&node_ids[..nodes.len()], &leaf_ids[..leafs.len()]] {
        for &b in ids {
            h.write_i32(b);
        }
    }

    let pos = &mut scratch.pos;
    if pos.len() < n_ids {
        pos.resize(n_ids, 0);
    }
    let n_leafs = ix.leafs.len();
    for (i, &id) in ix.leafs.iter().enumerate() {
        pos[id] = i as u32 + 1;
    }
    for (i, &id) in ix.nodes.iter().enumerate() {
        pos[id] = (n_leafs + i) as u32 + 1;
    }
    // A source or view source outside the graph (a graph built with `ggml_graph_add_node`
    // alone) takes the next position past the graph's where it is first read, so that two
    // such tensors read once each and one read twice differ: one position for all of them
    // let a plan in which the only reader of one takes its memory in place serve a graph in
    // which that memory is still to be read by another node. llama.cpp's graphs have none, so
    // the reads are hashed with the positions as they are, and only a graph that has such a
    // source numbers them and hashes its reads again.
    let outside = &mut scratch.outside;
    outside.clear();
    let mut reads = FxHasher::default();
    if hash_reads(&mut reads, pos, ix, splits, dep_keeps) {
        let first = (n_leafs + ix.nodes.len()) as u32 + 1;
        number_outside(pos, outside, first, ix, splits, dep_keeps);
        reads = FxHasher::default();
        hash_reads(&mut reads, pos, ix, splits, dep_keeps);
    }
    h.write_u64(reads.finish());
    h.write_usize(dep_keeps.len());
    // Leave no position behind for the next graph, whose tensors may take other ids.
    for ids in [&ix.leafs, &ix.nodes] {
        for &id in ids {
            pos[id] = 0;
        }
    }
    for &id in outside.iter() {
        pos[id as usize] = 0;
    }
    h.finish()
}

/// Hashes who reads whom into `h`: each node's view-source and source positions (`pos`, by
/// table id; 0 for none), the splits' backends, bounds and input positions, and the dependency
/// nodes' kept tensors. Returns whether some tensor read had no position (a tensor outside
/// the graph: see [`number_outside`]).
#[inline(always)]
fn hash_reads(
    h: &mut FxHasher,
    pos: &[u32],
    ix: &GraphIds,
    splits: &[Split],
    dep_keeps: &[(u32, u32)],
) -> bool {
    // The smallest position read (an empty slot, NO_ID, counted as the largest): 0 when some
    // tensor read has no position. A running minimum, not a flag set in a branch: the first
    // loop runs over every source of every node on a new graph's first call.
    let mut lowest = u32::MAX;
    let mut at = |id: u32| {
        let (hashed, seen) = if id == NO_ID {
            (0, u32::MAX)
        } else {
            let p = pos[id as usize];
            (p, p)
        };
        lowest = lowest.min(seen);
        hashed
    };
    for (i, srcs) in ix.srcs.iter().enumerate() {
        h.write_u32(at(ix.view_srcs[i]));
        for &s in &srcs[..ix.n_srcs[i] as usize] {
            h.write_u32(at(s));
        }
        h.write_u8(ix.n_srcs[i]);
    }
    for s in splits {
        h.write_usize(s.backend);
        h.write_usize(s.i_start);
        h.write_usize(s.i_end);
        for &id in &s.input_ids {
            h.write_u32(at(id as u32));
        }
        h.write_usize(s.input_ids.len());
    }
    for &(node, id) in dep_keeps {
        h.write_u32(node);
        h.write_u32(at(id));
    }
    lowest == 0
}

/// Gives every tensor that [`hash_reads`] reads but that has no position (not a leaf or node
/// of the graph) the next position from `first` on, in the order `hash_reads` first reads it,
/// noting each in `outside` so that its position is cleared with the graph's. Out of line:
/// llama.cpp's graphs have no such tensor, and the key is computed on every new graph's
/// first call.
#[cold]
#[inline(never)]
fn number_outside(
    pos: &mut [u32],
    outside: &mut Vec<u32>,
    first: u32,
    ix: &GraphIds,
    splits: &[Split],
    dep_keeps: &[(u32, u32)],
) {
    let mut next = first;
    let mut number = |id: u32| {
        if id != NO_ID && pos[id as usize] == 0 {
            pos[id as usize] = next;
            next += 1;
            outside.push(id);
        }
    };
    for (i, srcs) in ix.srcs.iter().enumerate() {
        number(ix.view_srcs[i]);
        for &s in &srcs[..ix.n_srcs[i] as usize] {
            number(s);
        }
    }
    for s in splits {
        for &id in &s.input_ids {
            number(id as u32);
        }
    }
    for &(_, id) in dep_keeps {
        number(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mock::{graph, Arena};
    use crate::sched::table::Table;
    use ggml_sys::*;

    fn key(nodes: &mut [*mut ggml_tensor], leafs: &mut [*mut ggml_tensor]) -> u64 {
        let g = graph(nodes, leafs);
        let mut t = Table::default();
        let mut ix = GraphIds::default();
        // SAFETY: the arena's tensors are live.
        unsafe { ix.rebuild(&mut t, &g) };
        let ids = vec![0; 16];
        // SAFETY: as above; `ix` was taken from `g`.
        unsafe {
            plan_key(
                &mut KeyScratch::default(),
                &g,
                &ids,
                &ids,
                &ix,
                t.len(),
                &[],
                &[],
                1,
            )
        }
    }

    /// Two chains built alike in two arenas share a key; marking a middle node output, or
    /// reading another source, changes it (the plan of one must not serve the other).
    #[test]
    fn structure_not_addresses() {
        let chain = |a: &mut Arena, out_mid: bool, second: bool| {
            let x = a.input("x");
            let y = a.input("y");
            let n0 = a.tensor("n0", GGML_OP_ADD, &[x, x]);
            let n1 = a.tensor("n1", GGML_OP_ADD, &[n0, if second { y } else { x }]);
            let n2 = a.tensor("n2", GGML_OP_ADD, &[n1, x]);
            if out_mid {
                // SAFETY: an arena tensor, live; only its flags change.
                unsafe { (*n0).flags |= GGML_TENSOR_FLAG_OUTPUT as i32 };
            }
            (vec![n0, n1, n2], vec![x, y])
        };
        let (mut a, mut b, mut c, mut d) = (
            Arena::default(),
            Arena::default(),
            Arena::default(),
            Arena::default(),
        );
        let (mut n, mut l) = chain(&mut a, false, false);
        let base = key(&mut n, &mut l);
        let (mut n, mut l) = chain(&mut b, false, false);
        assert_eq!(
            key(&mut n, &mut l),
            base,
            "same structure elsewhere in memory"
        );
        let (mut n, mut l) = chain(&mut c, true, false);
        assert_ne!(key(&mut n, &mut l), base, "an output flag more");
        let (mut n, mut l) = chain(&mut d, false, true);
        assert_ne!(key(&mut n, &mut l), base, "another source");
    }

    /// Sources that are not in the graph (a graph built node by node): two of them read once
    /// each and one read twice must not share a key, while the same shape built again elsewhere
    /// does. One position for every such source gave both the first graph's plan, in which
    /// `n1` takes its only source's memory in place (`tests/plan_reuse.rs`,
    /// `plan_not_reused_when_an_outside_source_gains_a_reader`).
    #[test]
    fn sources_outside_the_graph_keep_their_identity() {
        let outside = |a: &mut Arena, shared: bool| {
            let sa = a.input("sa");
            let sb = if shared { sa } else { a.input("sb") };
            let n1 = a.tensor("n1", GGML_OP_SCALE, &[sa]);
            let n2 = a.tensor("n2", GGML_OP_SCALE, &[sb]);
            let o = a.tensor("o", GGML_OP_ADD, &[n1, n2]);
            (vec![n1, n2, o], Vec::new())
        };
        let (mut a, mut b, mut c) = (Arena::default(), Arena::default(), Arena::default());
        let (mut n, mut l) = outside(&mut a, false);
        let two = key(&mut n, &mut l);
        let (mut n, mut l) = outside(&mut b, true);
        let one = key(&mut n, &mut l);
        assert_ne!(
            two, one,
            "one outside source read twice against two read once"
        );
        let (mut n, mut l) = outside(&mut c, false);
        assert_eq!(
            key(&mut n, &mut l),
            two,
            "the same graph elsewhere in memory"
        );
    }
}
