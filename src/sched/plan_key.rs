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

use ggml_sys::{ggml_cgraph, ggml_tensor};
use rustc_hash::{FxHashMap, FxHasher};

use super::inspect;

/// Position of each tensor of the allocation graph, kept between calls for its memory.
#[derive(Default)]
pub struct KeyScratch {
    pos: FxHashMap<usize, u64>,
}

/// The graph a gallocr plan was made for: its [`plan_key`] and counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub key: u64,
    pub n_nodes: usize,
    pub n_leafs: usize,
}

/// What [`plan_key`] hashes of a tensor that is not a node or leaf of the graph.
const OUTSIDE: u64 = u64::MAX;

/// The key of `g`, the allocation graph the scheduler gives gallocr, with `node_ids` and
/// `leaf_ids` its backend per node and leaf: the counts; per leaf and node its op, flags,
/// type, whether it has storage of its own already (`data`) and whether it is a view, the
/// position of its view source and of each source (leafs first, then nodes), and whether it
/// has the layout of each source (gallocr lets a node reuse its source's memory in place only
/// then); and the backends. Sizes are left out: gallocr checks them itself.
///
/// # Safety
/// `g` must be a live graph of live tensors; `node_ids` and `leaf_ids` hold at least
/// `n_nodes` and `n_leafs` entries.
pub unsafe fn plan_key(
    scratch: &mut KeyScratch,
    g: &ggml_cgraph,
    node_ids: &[std::os::raw::c_int],
    leaf_ids: &[std::os::raw::c_int],
) -> u64 {
    // SAFETY: `g` is live (this function's contract).
    let (leafs, nodes) = unsafe { (inspect::leafs(g), inspect::nodes(g)) };
    let pos = &mut scratch.pos;
    pos.clear();
    for (i, &t) in leafs.iter().chain(nodes).enumerate() {
        pos.entry(t as usize).or_insert(i as u64);
    }
    let at = |t: *mut ggml_tensor| {
        if t.is_null() {
            OUTSIDE - 1
        } else {
            pos.get(&(t as usize)).copied().unwrap_or(OUTSIDE)
        }
    };
    let mut h = FxHasher::default();
    h.write_usize(leafs.len());
    h.write_usize(nodes.len());
    for (i, &t) in leafs.iter().chain(nodes).enumerate() {
        // SAFETY: a leaf or node of the live graph, so a live tensor; only read.
        let t = unsafe { &*t };
        h.write_u32(t.op);
        h.write_i32(t.flags);
        h.write_u32(t.type_);
        h.write_u8(u8::from(t.data.is_null()));
        h.write_u64(at(t.view_src));
        for &s in &t.src {
            h.write_u64(at(s));
            if !s.is_null() {
                // SAFETY: a non-NULL source of a live tensor is live.
                h.write_u8(u8::from(crate::tensor::meta::same_layout(t, unsafe {
                    &*s
                })));
            }
        }
        let backend = if i < leafs.len() {
            leaf_ids.get(i)
        } else {
            node_ids.get(i - leafs.len())
        };
        h.write_i32(backend.copied().unwrap_or(-1));
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mock::{graph, Arena};
    use ggml_sys::*;

    fn key(nodes: &mut [*mut ggml_tensor], leafs: &mut [*mut ggml_tensor]) -> u64 {
        let g = graph(nodes, leafs);
        let ids = vec![0; 16];
        // SAFETY: the arena's tensors are live.
        unsafe { plan_key(&mut KeyScratch::default(), &g, &ids, &ids) }
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
}
