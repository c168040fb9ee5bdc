//! Replaying the last placement: when the graph given to `ggml_backend_sched_alloc_graph` is,
//! tensor header for tensor header, the graph the last split placed, the passes are skipped
//! and their results (the placement table, the splits, their copies and the allocation graph)
//! are used again.
//!
//! llama.cpp builds a new graph for every ubatch whenever it cannot reuse its own (always with
//! `LLAMA_GRAPH_REUSE_DISABLE=1`, and for every graph it has not seen), in the same context
//! memory: the same tensors at the same addresses with the same headers. The passes are pure
//! functions of what is compared here, so running them again would give the same result:
//!
//! - every leaf's and node's header, byte for byte (type, buffer, shape, strides, op, op
//!   parameters, flags, sources, view source and offset, data, name, extra), and the order of
//!   the node and leaf arrays; every source and view source must itself be a node or leaf, so
//!   its header is compared too (a graph where one is not is never replayed);
//! - the buffer type and usage of every buffer those headers name (a header holds only the
//!   buffer's address; pass 1 places weights by their buffer's usage and type);
//! - the user's `ggml_backend_sched_set_tensor_backend` calls since the reset, in order;
//! - the scheduler state the passes read: the backend of the previous first split (the
//!   pipeline copy is always 0, as nothing with pipeline copies is replayed).
//!
//! The backends' answers (`supports_op`, `supports_buft`, `offload_op`) are taken to depend
//! only on the tensor, as stock's scheduler takes them (it asks them again each time but
//! keeps no record of earlier answers either). A graph that differs anywhere is placed
//! afresh. Nothing is replayed with `GGML_SCHED_DEBUG` or `GGML_SCHED_DUMP` set (each split
//! logs or records its graph), nor with pipeline copies (a parallel scheduler with more than
//! one copy): there the split also flags the graph's input leafs and arranges their copies
//! around the current copy, which changes with every graph.

use ggml_sys::{
    ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_buffer_usage, ggml_cgraph,
    ggml_tensor,
};

use super::inspect;
use super::table::GraphIds;

/// Replays in this process, all schedulers together (for tests: a test that rebuilds its
/// graphs in the same memory checks that replays happened).
static REPLAYS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Placements replayed in this process so far, by every scheduler.
pub fn replays_total() -> u64 {
    REPLAYS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts one replay.
pub(crate) fn count_replay() {
    REPLAYS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Bytes of a tensor header.
const HEADER: usize = std::mem::size_of::<ggml_tensor>();

/// The header of `t` as bytes.
///
/// # Safety
/// `t` must be a live tensor.
unsafe fn header<'a>(t: *const ggml_tensor) -> &'a [u8] {
    // SAFETY: a live tensor is `HEADER` readable bytes (the caller's contract); the gap after
    // `type` reads as whatever is there, which can only make two equal headers look different.
    unsafe { std::slice::from_raw_parts(t.cast::<u8>(), HEADER) }
}

/// What the last split was given, and whether it may be replayed.
#[derive(Default)]
pub struct Replay {
    /// Whether the snapshot below is complete and replayable.
    valid: bool,
    leafs: Vec<*mut ggml_tensor>,
    nodes: Vec<*mut ggml_tensor>,
    /// The headers of `leafs` then `nodes`, [`HEADER`] bytes each.
    headers: Vec<u8>,
    /// The user's assignments since the reset, (tensor, backend), in call order.
    user: Vec<(*mut ggml_tensor, usize)>,
    /// Every buffer a leaf or node header names, with what the passes read through it: its
    /// buffer type and usage (pass 1 places a weight by its buffer's usage and type). A
    /// header holds only the pointer.
    buffers: Vec<(
        ggml_backend_buffer_t,
        ggml_backend_buffer_type_t,
        ggml_backend_buffer_usage,
    )>,
    /// The scheduler's previous first-split backend, as the split saw it.
    first_in: usize,
    /// The node order the backends' `graph_optimize` left, when it differs from the graph's.
    optimized: Option<Vec<*mut ggml_tensor>>,
    /// The sources the split replaced by copies (the only header fields of the graph's
    /// tensors it writes): node position, source slot, copy. Filled by the split pass.
    pub rewrites: Vec<(u32, u8, *mut ggml_tensor)>,
    /// Scratch: whether each table id is a node or leaf of the graph.
    member: Vec<bool>,
    /// Whether this split's allocation graph was allocated (set by `alloc_splits` on success):
    /// only then do the allocator's plan and last placement belong to it.
    pub planned: bool,
}

impl Replay {
    /// Forgets the snapshot.
    pub fn invalidate(&mut self) {
        self.valid = false;
    }

    /// Records what a split of `g` is given, before its passes run; the snapshot becomes
    /// replayable only through [`Replay::commit`].
    ///
    /// # Safety
    /// `g` must be a live graph of live tensors.
    pub unsafe fn take(
        &mut self,
        g: &ggml_cgraph,
        user: &[(*mut ggml_tensor, usize)],
        first_in: usize,
    ) {
        self.valid = false;
        self.planned = false;
        self.optimized = None;
        // SAFETY: `g` is live (this function's contract).
        let (leafs, nodes) = unsafe { (inspect::leafs(g), inspect::nodes(g)) };
        self.leafs.clear();
        self.leafs.extend_from_slice(leafs);
        self.nodes.clear();
        self.nodes.extend_from_slice(nodes);
        self.headers.clear();
        self.buffers.clear();
        for &t in leafs.iter().chain(nodes) {
            // SAFETY: a leaf or node of the live graph.
            self.headers.extend_from_slice(unsafe { header(t) });
            // SAFETY: as above.
            let b = unsafe { (*t).buffer };
            if !b.is_null() && !self.buffers.iter().any(|e| e.0 == b) {
                // SAFETY: a live tensor's non-NULL buffer is live.
                let (buft, usage) = unsafe { ((*b).buft, (*b).usage) };
                self.buffers.push((b, buft, usage));
            }
        }
        self.user.clear();
        self.user.extend_from_slice(user);
        self.first_in = first_in;
    }

    /// Notes the node order after the backends' `graph_optimize` (the graph's own array).
    ///
    /// # Safety
    /// `g` must be the live graph given to [`Replay::take`].
    pub unsafe fn note_order(&mut self, g: &ggml_cgraph) {
        // SAFETY: the caller's contract.
        let nodes = unsafe { inspect::nodes(g) };
        if nodes != self.nodes.as_slice() {
            self.optimized = Some(nodes.to_vec());
        }
    }

    /// Makes the snapshot replayable, unless a source or view source of a node is not itself
    /// a node or leaf of the graph (its header would go unchecked) or a leaf is a view.
    ///
    /// # Safety
    /// `ix` must hold the ids of the graph given to [`Replay::take`], taken by the split.
    pub unsafe fn commit(&mut self, ix: &GraphIds) {
        let n_ids = ix
            .nodes
            .iter()
            .chain(&ix.leafs)
            .copied()
            .max()
            .map_or(0, |m| m + 1);
        self.member.clear();
        self.member.resize(n_ids, false);
        for &id in ix.nodes.iter().chain(&ix.leafs) {
            self.member[id] = true;
        }
        let is_member = |id: u32| (id as usize) < n_ids && self.member[id as usize];
        for (i, srcs) in ix.srcs.iter().enumerate() {
            let n = ix.n_srcs[i] as usize;
            let view = ix.view_srcs[i];
            if srcs[..n]
                .iter()
                .any(|&s| s != super::table::NO_ID && !is_member(s))
                || (view != super::table::NO_ID && !is_member(view))
            {
                return;
            }
        }
        for &l in &self.leafs {
            // SAFETY: a leaf of the live graph just split.
            if !unsafe { (*l).view_src }.is_null() {
                return;
            }
        }
        self.valid = true;
    }

    /// Replaces the sources of a replayed graph's nodes by the copies the split gave the
    /// original's (positions in the graph's own node order, before `graph_optimize`).
    ///
    /// # Safety
    /// The graph's nodes must be the snapshot's (checked by [`Replay::matches`]), live, and
    /// not borrowed elsewhere.
    pub unsafe fn apply_rewrites(&self) {
        for &(i, j, copy) in &self.rewrites {
            let node = self.nodes[i as usize];
            // SAFETY: a node of the graph (the caller's contract); `j` < GGML_MAX_SRC.
            unsafe { (*node).src[j as usize] = copy };
        }
    }

    /// Whether `g` may be placed by replaying the snapshot.
    ///
    /// # Safety
    /// `g` must be a live graph of live tensors.
    pub unsafe fn matches(
        &self,
        g: &ggml_cgraph,
        user: &[(*mut ggml_tensor, usize)],
        first_in: usize,
    ) -> bool {
        if !self.valid || !self.planned || first_in != self.first_in {
            return false;
        }
        // SAFETY: `g` is live (this function's contract).
        let (leafs, nodes) = unsafe { (inspect::leafs(g), inspect::nodes(g)) };
        if leafs != self.leafs.as_slice() || nodes != self.nodes.as_slice() || user != self.user {
            return false;
        }
        let same_headers = leafs
            .iter()
            .chain(nodes)
            .zip(self.headers.chunks_exact(HEADER))
            // SAFETY: leafs and nodes of the live graph.
            .all(|(&t, old)| unsafe { header(t) } == old);
        // With equal headers, the graph names exactly the recorded buffers, so they are live.
        same_headers
            && self.buffers.iter().all(|&(b, buft, usage)| {
                // SAFETY: a buffer a tensor of the live graph names (see above).
                let (now_buft, now_usage) = unsafe { ((*b).buft, (*b).usage) };
                now_buft == buft && now_usage == usage
            })
    }

    /// The node order to give the graph when replaying, if `graph_optimize` changed it.
    pub fn optimized(&self) -> Option<&[*mut ggml_tensor]> {
        self.optimized.as_deref()
    }
}
