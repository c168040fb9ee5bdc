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
//! - the scheduler state the passes read: the backend of the previous first split.
//!
//! The backends' answers (`supports_op`, `supports_buft`, `offload_op`) are taken to depend
//! only on the tensor, as stock's scheduler takes them (it asks them again each time but
//! keeps no record of earlier answers either). A graph that differs anywhere is placed
//! afresh. Nothing is replayed with `GGML_SCHED_DEBUG` or `GGML_SCHED_DUMP` set (each split
//! logs or records its graph).
//!
//! Pipeline copies (a parallel scheduler, `n_copies > 1`): the current copy rotates with every
//! graph, and only three things of a split depend on it; the passes before (placement, the
//! splits, which sources get copies, the copies themselves, all `n_copies` of them with their
//! names) do not. The snapshot keeps, for each, every copy's variant, and a replay lays out
//! the current copy's: (1) the sources the split pass replaced, by that copy's tensor
//! ([`Replay::apply_rewrites`]); (2) the split inputs' entries in the allocation graph's node
//! array; (3) the graph inputs of pass 6, whose slot `cur_copy` is the leaf itself and every
//! other slot a copy named for its slot, in the table and in the allocation graph's leaf
//! array, the leaf flagged output again as pass 6 flags it ([`Replay::relay_copies`]). A
//! slot's copy that the snapshot's own split did not make (the leaf held that slot) is made
//! on first use, as pass 6 would make it. The allocator keeps one recorded placement per copy
//! (`Gallocr::alloc_again` with the copy as slot). The plan key, and with it the decision to
//! plan again, depends on the allocation graph only through per-position op, type, flags and
//! storage, which are the same for every copy as long as each graph input leaf looks like its
//! copies (op NONE, flags exactly input and output after pass 6): [`Replay::commit`] refuses
//! other graphs.

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

/// Replays in this process by schedulers with pipeline copies (counted in [`replays_total`]
/// too).
static REPLAYS_WITH_COPIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Placements replayed in this process so far by schedulers with pipeline copies.
pub fn replays_with_copies_total() -> u64 {
    REPLAYS_WITH_COPIES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts one replay, by a scheduler with pipeline copies when `with_copies`.
pub(crate) fn count_replay(with_copies: bool) {
    REPLAYS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if with_copies {
        REPLAYS_WITH_COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Replays by schedulers without pipeline copies that found no record of the allocator's to
/// repeat (and so placed the graph with every check again).
static SERIAL_RECORD_MISSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many replays of schedulers without pipeline copies found no allocator record, in this
/// process so far. Always 0 while the allocator records every graph whose snapshot was
/// committed: such a scheduler's replay follows that graph's own allocation with no plan in
/// between (tests check it; a miss costs time, not correctness).
pub fn serial_record_misses_total() -> u64 {
    SERIAL_RECORD_MISSES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts one replay of a scheduler without pipeline copies that found no record.
pub(crate) fn count_serial_record_miss() {
    SERIAL_RECORD_MISSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Snapshots taken in this process, by every scheduler (each a copy of every header of a
/// graph: tests check that a graph that cannot replay is not copied).
static SNAPSHOTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Snapshots taken in this process so far, by every scheduler ([`Replay::take`]).
pub fn snapshots_total() -> u64 {
    SNAPSHOTS.load(std::sync::atomic::Ordering::Relaxed)
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

/// The sighting of a graph (its leaf and node arrays given to that many splits in a row, with
/// the same shapes from the second on) at which its headers are copied for a replay. The second
/// sighting is too early: llama.cpp builds a graph's first real instance in the memory its
/// reserve graph used, or allocates a new shape once or twice, and a graph split only twice
/// never replays, so its copy (about 400 KiB of fresh memory for a 1,000-node graph) was the
/// largest extra cost of those first `alloc_graph` calls. A graph rebuilt every token pays one
/// more full split instead, once per shape.
const SNAPSHOT_AT: u32 = 3;

/// The shapes of `nodes` (every `ne`), hashed: what tells two graphs built in the same memory
/// apart when only their token counts differ. llama.cpp builds every graph of a context in the
/// same tensor memory, so a prompt graph of 256 tokens has the node and leaf arrays of the
/// 64-token prompt before it; counted as sightings of one graph, the third such graph was
/// snapshot (llama-batched-bench, `-npl 1,4,8`: 103 page faults and 310-390 µs in the fourth
/// `alloc_graph`, then a copy of every header in each later one) and never replayed. Only a
/// gate for the snapshot: a replay still needs every header equal.
///
/// # Safety
/// Every entry of `nodes` must be a live tensor.
unsafe fn shape_key(nodes: &[*mut ggml_tensor]) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    for &t in nodes {
        // SAFETY: live (the caller's contract).
        for &n in unsafe { &(*t).ne } {
            h.write_i64(n);
        }
    }
    h.finish()
}

/// What the last split was given, and whether it may be replayed.
#[derive(Default)]
pub struct Replay {
    /// Whether the snapshot below is complete and replayable.
    valid: bool,
    /// Whether the last split took a snapshot (its graph had been split twice before, the
    /// last time with the same shapes).
    snapshot: bool,
    /// How many splits in a row, the last one included, were given `leafs` and `nodes`, with
    /// the shapes `shapes` from the second of them on.
    sightings: u32,
    /// The [`shape_key`] of the last split's nodes, when it was taken (from a graph's second
    /// sighting on).
    shapes: Option<u64>,
    /// The leaf and node arrays of the last split's graph (kept with or without a snapshot).
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
    /// Pipeline copies of the scheduler (1 without pipeline parallelism).
    n_copies: usize,
    /// With pipeline copies, the split inputs' copies in the allocation graph's node array
    /// (the only per-copy entries there): (position, copy), `n_copies` entries per split
    /// input, copy 0 first.
    node_copies: Vec<(u32, *mut ggml_tensor)>,
    /// With pipeline copies, the graph inputs pass 6 gave copies: (leaf, table id, backend),
    /// in the order of the scheduler's `graph_inputs`.
    inputs: Vec<(*mut ggml_tensor, usize, usize)>,
    /// `n_copies` tensors per entry of `inputs`, copy 0 first: the copy made for each slot,
    /// NULL where none was made yet (the slot where the split found the current copy holds
    /// the leaf itself; a replay with another current copy makes that slot's copy).
    input_copies: Vec<*mut ggml_tensor>,
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

    /// Notes what a split of `g` is given, before its passes run: always its leaf and node
    /// arrays, and, when `replayable` and those arrays are the previous split's (the same
    /// tensors in the same order: a graph rebuilt in the same memory), a snapshot of every
    /// header, which becomes replayable only through [`Replay::commit`].
    ///
    /// A graph seen for the first time is not snapshot: llama.cpp allocates most graphs once
    /// (it reuses its own graph while it can, and reserves in other memory), and the copy of
    /// every header, hundreds of kilobytes of fresh memory, was the largest part of such a
    /// first `alloc_graph`. Nor is one seen twice ([`SNAPSHOT_AT`]): a graph rebuilt each
    /// token is snapshot at its third split and replayed from its fourth. Nor is a graph whose
    /// shapes differ from the last split's ([`shape_key`]), though its arrays are the same.
    ///
    /// # Safety
    /// `g` must be a live graph of live tensors.
    pub unsafe fn take(
        &mut self,
        g: &ggml_cgraph,
        user: &[(*mut ggml_tensor, usize)],
        first_in: usize,
        n_copies: usize,
        replayable: bool,
    ) {
        self.valid = false;
        self.planned = false;
        self.optimized = None;
        self.n_copies = n_copies;
        self.node_copies.clear();
        self.inputs.clear();
        self.input_copies.clear();
        self.headers.clear();
        self.buffers.clear();
        // SAFETY: `g` is live (this function's contract).
        let (leafs, nodes) = unsafe { (inspect::leafs(g), inspect::nodes(g)) };
        let seen = leafs == self.leafs.as_slice() && nodes == self.nodes.as_slice();
        if seen {
            // The same arrays: the same graph only if its shapes are those of the last split
            // (a first sighting takes no key, so the second always starts the count anew).
            // SAFETY: nodes of the live graph.
            let shapes = unsafe { shape_key(nodes) };
            if self.shapes == Some(shapes) {
                self.sightings = self.sightings.saturating_add(1);
            } else {
                self.shapes = Some(shapes);
                self.sightings = 2;
            }
        } else {
            self.sightings = 1;
            self.shapes = None;
            self.leafs.clear();
            self.leafs.extend_from_slice(leafs);
            self.nodes.clear();
            self.nodes.extend_from_slice(nodes);
        }
        self.snapshot = replayable && self.sightings >= SNAPSHOT_AT;
        if !self.snapshot {
            return;
        }
        SNAPSHOTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.headers.reserve(HEADER * (leafs.len() + nodes.len()));
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

    /// Whether the snapshot is complete and may be replayed ([`Replay::commit`] accepted it,
    /// and nothing invalidated it since): only then can the graph it holds be placed again.
    pub fn replayable(&self) -> bool {
        self.valid
    }

    /// Whether the last [`Replay::take`] took a snapshot (the split notes what depends on
    /// the pipeline copy only then).
    pub fn snapshot(&self) -> bool {
        self.snapshot
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

    /// Notes, with pipeline copies, the split input at position `pos` of the allocation
    /// graph's node array and its copies (one per pipeline copy, copy 0 first).
    pub fn note_node_copies(&mut self, pos: usize, copies: &[*mut ggml_tensor]) {
        self.node_copies
            .extend(copies.iter().map(|&c| (pos as u32, c)));
    }

    /// Notes, with pipeline copies, a graph input `leaf` (table id `id`) and the copies pass 6
    /// gave it on `backend` (one per pipeline copy, copy 0 first; `cur_copy`'s is the leaf).
    pub fn note_graph_input(
        &mut self,
        leaf: *mut ggml_tensor,
        id: usize,
        backend: usize,
        copies: &[*mut ggml_tensor],
        cur_copy: usize,
    ) {
        self.inputs.push((leaf, id, backend));
        self.input_copies
            .extend(copies.iter().enumerate().map(|(c, &t)| {
                if c == cur_copy {
                    std::ptr::null_mut()
                } else {
                    t
                }
            }));
    }

    /// Makes the snapshot replayable, unless a source or view source of a node is not itself
    /// a node or leaf of the graph (its header would go unchecked) or a leaf is a view.
    ///
    /// # Safety
    /// `ix` must hold the ids of the graph given to [`Replay::take`], taken by the split.
    pub unsafe fn commit(&mut self, ix: &GraphIds) {
        if !self.snapshot {
            return;
        }
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
            // A tensor twice in the graph (ggml's graph builder never does this) would have
            // its pipeline copies laid out twice: not replayed.
            if std::mem::replace(&mut self.member[id], true) {
                return;
            }
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
        // The per-copy notes hold one entry per pipeline copy for each thing they note.
        let n = self.n_copies.max(1);
        if self.input_copies.len() != self.inputs.len() * n
            || !self.node_copies.len().is_multiple_of(n)
            || !self.rewrites.len().is_multiple_of(n)
        {
            return;
        }
        // With pipeline copies, a replay with another current copy swaps a graph input leaf
        // with one of its copies in the allocation graph. The allocator's plan, and the plan
        // key that decides whether to make it again, read per position the op, type, flags and
        // whether the tensor has storage; they stay the same only when the leaf looks like its
        // copies there: an op of NONE and exactly the input and output flags (pass 6 set
        // them), as llama.cpp's inputs have. Other graphs are not replayed.
        let io = (ggml_sys::GGML_TENSOR_FLAG_INPUT | ggml_sys::GGML_TENSOR_FLAG_OUTPUT) as i32;
        for &(leaf, _, _) in &self.inputs {
            // SAFETY: a leaf of the live graph just split.
            let (op, flags) = unsafe { ((*leaf).op, (*leaf).flags) };
            if op != ggml_sys::GGML_OP_NONE || flags != io {
                return;
            }
        }
        self.valid = true;
    }

    /// Replaces the sources of a replayed graph's nodes by the copies the split gave the
    /// original's, those of pipeline copy `cur_copy` (positions in the graph's own node order,
    /// before `graph_optimize`).
    ///
    /// # Safety
    /// The graph's nodes must be the snapshot's (checked by [`Replay::matches`]), live, and
    /// not borrowed elsewhere.
    pub unsafe fn apply_rewrites(&self, cur_copy: usize) {
        for set in self.rewrites.chunks_exact(self.n_copies.max(1)) {
            let (i, j, copy) = set[cur_copy];
            let node = self.nodes[i as usize];
            // SAFETY: a node of the graph (the caller's contract); `j` < GGML_MAX_SRC.
            unsafe { (*node).src[j as usize] = copy };
        }
    }

    /// With pipeline copies, lays out again what depends on the current copy, for a replay
    /// with `cur_copy`: the split inputs' entries of the allocation graph's node array
    /// (`alloc_nodes`, that copy's), and every graph input's copies, in the table and in the
    /// allocation graph's leaf array (`alloc_leafs`, which starts with them, `n_copies` per
    /// input): the leaf itself at slot `cur_copy`, a copy elsewhere, flagged input and output
    /// as pass 6 leaves them. A slot's copy missing (the split's own current copy) is made by
    /// `make_copy(leaf, backend, slot)`, as pass 6 would make it.
    ///
    /// # Safety
    /// The graph must be the snapshot's (checked by [`Replay::matches`]) and live; `table`,
    /// `alloc_nodes` and `alloc_leafs` as the split of the snapshot left them, or as an
    /// earlier call of this function left them.
    pub unsafe fn relay_copies(
        &mut self,
        cur_copy: usize,
        table: &mut super::table::Table,
        alloc_nodes: &mut [*mut ggml_tensor],
        alloc_leafs: &mut [*mut ggml_tensor],
        mut make_copy: impl FnMut(*mut ggml_tensor, usize, usize) -> *mut ggml_tensor,
    ) {
        let n = self.n_copies;
        if n <= 1 {
            return;
        }
        for set in self.node_copies.chunks_exact(n) {
            let (pos, copy) = set[cur_copy];
            alloc_nodes[pos as usize] = copy;
        }
        for (k, &(leaf, id, backend)) in self.inputs.iter().enumerate() {
            let copies = &mut self.input_copies[k * n..(k + 1) * n];
            // SAFETY: a leaf of the live graph (the caller's contract); its header equals the
            // snapshot's, where it had the input flag, so this only adds the output flag, as
            // pass 6 does.
            unsafe {
                ggml_sys::ggml_set_input(leaf);
                ggml_sys::ggml_set_output(leaf);
            }
            let Some(slots) = table.copies_at_mut(id, backend) else {
                continue;
            };
            for (c, slot) in slots.iter_mut().enumerate() {
                *slot = if c == cur_copy {
                    leaf
                } else {
                    if copies[c].is_null() {
                        copies[c] = make_copy(leaf, backend, c);
                    }
                    copies[c]
                };
                alloc_leafs[k * n + c] = *slot;
            }
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
