//! The graph allocator (stock's `struct ggml_gallocr`): plans a graph with [`Planner::walk`],
//! lays the plan out ([`super::pack`]), keeps one virtual buffer (up to 16 backend buffers)
//! per buffer type, and places a graph's tensors at the planned addresses, as long as the
//! graph still fits the plan.
//!
//! The C functions over it are in [`super::exports`]; the scheduler calls the methods here
//! directly.

use ggml_sys::{ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_cgraph, ggml_tensor};

use super::pack::{self, Layout};
use super::walk::{graph_tensors, Planner};
use crate::tensor::meta::{cstr, same_layout};
use crate::{buffer, buffer_type, ffi, multi_buffer, tensor};

/// Where the plan put one tensor (stock's `struct tensor_alloc`): buffer id -1 for a tensor
/// the graph allocator does not place (it had memory, or is a view). 24 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Buffer id, or -1.
    pub buffer_id: i32,
    /// Chunk of that buffer id's virtual buffer (see [`super::blocks::Addr`]).
    pub chunk: u32,
    /// Bytes from the chunk's base.
    pub offset: usize,
    /// Bytes the tensor needed when planned (0 when not placed): a later graph's tensor at
    /// this position fits when it needs no more.
    pub size_max: usize,
}

impl Placed {
    const NONE: Placed = Placed {
        buffer_id: -1,
        chunk: u32::MAX,
        offset: usize::MAX,
        size_max: 0,
    };
}

/// Where the plan of one node lies in [`Gallocr`]'s flat list (stock's `struct node_alloc`
/// without its empty trailing source slots, which were most of its 11 entries): the node's
/// own place at `first`, then one per source slot up to the last that was non-NULL when
/// planned (`Placed::NONE` for a NULL slot among them), so slot `j < n_srcs` is at
/// `first + 1 + j` and is read in step with the sources.
#[derive(Clone, Copy, Debug)]
struct NodePlan {
    first: u32,
    n_srcs: u8,
}

impl NodePlan {
    /// The node's own place and its sources' (slots `0..n_srcs`) in the flat list.
    #[inline]
    fn places(self, placed: &[Placed]) -> (&Placed, &[Placed]) {
        let first = self.first as usize;
        (
            &placed[first],
            &placed[first + 1..first + 1 + self.n_srcs as usize],
        )
    }
}

/// A graph allocator. Made by [`Gallocr::new`] (C: `ggml_gallocr_new_n`), which borrows the
/// buffer types for its lifetime; owns its compute buffers and frees them when dropped.
pub struct Gallocr {
    planner: Planner,
    /// One virtual buffer per allocator (shared by the buffer ids of one buffer type, as
    /// stock's buffers array holds the same pointer twice): its chunks, or `None` when not
    /// allocated.
    buffers: Vec<Option<Vec<Chunk>>>,
    /// Per node of the planned graph, where its places are in `placed`.
    nodes: Vec<NodePlan>,
    /// The places of every node and its sources, node by node (see [`NodePlan`]).
    placed: Vec<Placed>,
    leafs: Vec<Placed>,
    /// The plan's in-place reuses by position: (node, source slot) where the node took that
    /// source's memory. Each held because the two had one layout when planned; a graph where
    /// one of them no longer does is planned again (see [`Gallocr::fits`]).
    inplace: Vec<(u32, u8)>,
    layout: Layout,
    /// Nodes the packed layout waits before it reuses freed bytes (`GGML_ALLOC_REUSE_DELAY`).
    reuse_delay: u32,
    /// The layout's working memory, kept from plan to plan.
    scratch: pack::Scratch,
    /// What the last [`Gallocr::alloc_graph_in`] of each slot did to the graph's tensors, in
    /// order, for [`Gallocr::alloc_again`], and whether it is still valid (until the next
    /// plan, or until an allocation in another slot that drops the others). One slot per
    /// pipeline copy: a scheduler with pipeline copies places a different allocation graph
    /// for each copy (the copies and the graph inputs rotate), all under one plan.
    actions: Vec<(bool, Vec<Action>)>,
}

/// One backend buffer of a virtual buffer, with its base address, asked once when the buffer
/// is made (a buffer's base does not move while it lives; stock asks for it per tensor).
#[derive(Clone, Copy, Debug)]
struct Chunk {
    buffer: ggml_backend_buffer_t,
    base: *mut u8,
}

/// One tensor placed by [`Gallocr::alloc_graph`].
#[derive(Clone, Copy, Debug)]
enum Action {
    /// Given memory at `addr` of chunk `buffer`.
    Place(
        *mut ggml_tensor,
        ggml_backend_buffer_t,
        *mut std::os::raw::c_void,
    ),
    /// A view given its source's memory.
    View(*mut ggml_tensor),
}

/// Why [`Gallocr::reserve`] failed: a backend could not allocate a compute buffer.
#[derive(Debug)]
pub struct AllocFailed;

impl Gallocr {
    /// A graph allocator for `bufts`, one buffer id each (stock `ggml_gallocr_new_n`), laying
    /// plans out as `layout` says, with the reuse delay `GGML_ALLOC_REUSE_DELAY` names now.
    ///
    /// # Safety
    /// Every buffer type must be live for the allocator's lifetime.
    pub unsafe fn new(bufts: &[ggml_backend_buffer_type_t], layout: Layout, func: &str) -> Self {
        // SAFETY: forwarded: live buffer types.
        let planner = unsafe { Planner::new(bufts, func) };
        Gallocr {
            buffers: vec![None; planner.blocks.len()],
            planner,
            nodes: Vec::new(),
            placed: Vec::new(),
            leafs: Vec::new(),
            inplace: Vec::new(),
            layout,
            reuse_delay: pack::reuse_delay_from_env(),
            scratch: pack::Scratch::default(),
            actions: Vec::new(),
        }
    }

    /// Keeps in-place reuse from moving memory away from a backend that uses it
    /// ([`crate::alloc::walk::Planner::set_access`]): `access[b]` has bit `x` set when buffer
    /// id `b`'s backend can use buffer id `x`'s type. Drops every recorded placement, as the
    /// next plan may differ.
    pub fn set_access(&mut self, access: Option<Vec<u64>>) {
        self.drop_actions();
        self.planner.set_access(access);
    }

    /// Buffer ids.
    pub fn n_buffers(&self) -> usize {
        self.planner.bufts.len()
    }

    /// Plans `graph` and makes every compute buffer at least as large as the plan needs
    /// (stock `ggml_gallocr_reserve_n`), or with `no_alloc` only plans, freeing buffers that
    /// would have to grow (stock's `reserve_n_size` path). Fails, after logging the buffer type
    /// and size, when a backend cannot allocate.
    ///
    /// # Safety
    /// As [`Planner::walk`].
    pub unsafe fn reserve(
        &mut self,
        graph: &ggml_cgraph,
        node_ids: Option<&[i32]>,
        leaf_ids: Option<&[i32]>,
        no_alloc: bool,
    ) -> Result<(), AllocFailed> {
        // A new plan (and maybe new buffers): no recorded placement holds any more.
        self.drop_actions();
        // SAFETY: forwarded.
        unsafe { self.planner.walk(graph, node_ids, leaf_ids) };
        pack::lay_out(
            &mut self.planner,
            self.layout,
            self.reuse_delay,
            &mut self.scratch,
        );
        // SAFETY: forwarded.
        unsafe { self.record_plan(graph) };
        self.grow_buffers(no_alloc)
    }

    /// Bytes each buffer id's virtual buffer needs for the last plan (stock's `sizes` of
    /// `ggml_gallocr_reserve_n_size`); shared buffer types count once per buffer id.
    pub fn planned_sizes(&self) -> Vec<usize> {
        (0..self.n_buffers())
            .map(|i| {
                let b = &self.planner.blocks[self.planner.talloc_of[i]];
                (0..b.n_chunks()).map(|c| b.max_size(c)).sum()
            })
            .collect()
    }

    /// Copies the walk's table into the per-position plan that [`Gallocr::alloc_graph`] uses.
    ///
    /// # Safety
    /// As [`Planner::walk`].
    unsafe fn record_plan(&mut self, graph: &ggml_cgraph) {
        // SAFETY: forwarded.
        let (leafs, nodes) = unsafe { graph_tensors(graph) };
        let place = |p: &mut Planner, t: *mut ggml_tensor| -> Placed {
            // SAFETY: a tensor of the live graph, or a source of one.
            let r = unsafe { &*t };
            if !r.view_src.is_null() || !r.data.is_null() {
                return Placed::NONE;
            }
            let n = *p.node(t);
            Placed {
                buffer_id: n.buffer_id,
                chunk: n.addr.chunk,
                offset: n.addr.offset,
                size_max: p.alloc_size(n.buffer_id, r),
            }
        };
        // Sized once: pushing node by node into a list a few hundred kilobytes long reallocated
        // and copied it a dozen times, into fresh pages each time.
        self.nodes.clear();
        self.nodes.reserve(nodes.len());
        self.placed.clear();
        self.placed.reserve(nodes.len() * 4);
        for &node in nodes {
            // SAFETY: live (forwarded contract).
            let r = unsafe { &*node };
            let first = self.placed.len() as u32;
            self.placed.push(place(&mut self.planner, node));
            let n_srcs = r
                .src
                .iter()
                .rposition(|s| !s.is_null())
                .map_or(0, |j| j + 1);
            for &s in &r.src[..n_srcs] {
                self.placed.push(if s.is_null() {
                    Placed::NONE
                } else {
                    place(&mut self.planner, s)
                });
            }
            self.nodes.push(NodePlan {
                first,
                n_srcs: n_srcs as u8,
            });
        }
        self.leafs.clear();
        self.leafs.reserve(leafs.len());
        for &leaf in leafs {
            let placed = place(&mut self.planner, leaf);
            self.leafs.push(placed);
        }
        self.inplace.clear();
        if !self.planner.reuses.is_empty() {
            let reused: rustc_hash::FxHashMap<_, _> = self.planner.reuses.iter().copied().collect();
            for (i, &node) in nodes.iter().enumerate() {
                if let Some(&parent) = reused.get(&node) {
                    // SAFETY: live (forwarded contract).
                    let src = unsafe { (*node).src };
                    if let Some(j) = src.iter().position(|&s| s == parent) {
                        self.inplace.push((i as u32, j as u8));
                    }
                }
            }
        }
    }

    /// Reallocates each virtual buffer whose chunks are too small for the plan (or that does
    /// not exist yet: even an empty plan needs one, for views); with `no_alloc` frees it.
    fn grow_buffers(&mut self, no_alloc: bool) -> Result<(), AllocFailed> {
        for (a, blocks) in self.planner.blocks.iter().enumerate() {
            let buf = &mut self.buffers[a];
            let mut realloc = buf.is_none();
            for c in 0..blocks.n_chunks() {
                let have = buf.as_ref().and_then(|b| b.get(c)).map_or(0, |b| {
                    // SAFETY: a chunk this allocator made and has not freed.
                    unsafe { (*b.buffer).size }
                });
                if blocks.max_size(c) > have {
                    realloc = true;
                }
            }
            if !realloc {
                continue;
            }
            free_chunks(buf.take());
            if no_alloc {
                continue;
            }
            let buft_ptr = self.planner.bufts[self
                .planner
                .talloc_of
                .iter()
                .position(|&t| t == a)
                .unwrap_or(0)];
            // SAFETY: the allocator's buffer types are live (`new`'s contract).
            let buft = unsafe { &*buft_ptr };
            let mut chunks = Vec::with_capacity(blocks.n_chunks());
            for c in 0..blocks.n_chunks() {
                let b = buffer_type::alloc_buffer(buft, blocks.max_size(c));
                if b.is_null() {
                    free_chunks(Some(chunks));
                    let total: usize = (0..blocks.n_chunks()).map(|c| blocks.max_size(c)).sum();
                    ffi::log::error(&format!(
                        "ggml_gallocr_reserve_n_impl: failed to allocate {} buffer of size {total}\n",
                        // SAFETY: a buffer type's name, NUL-terminated and owned by it.
                        unsafe { cstr(buffer_type::name(buft)) }
                    ));
                    return Err(AllocFailed);
                }
                // SAFETY: a buffer just made, owned here and referenced from nowhere else.
                let made = unsafe { &mut *b };
                multi_buffer::set_usage(made, ggml_sys::GGML_BACKEND_BUFFER_USAGE_COMPUTE);
                chunks.push(Chunk {
                    buffer: b,
                    base: buffer::base(made).cast(),
                });
            }
            *buf = Some(chunks);
        }
        Ok(())
    }

    /// Whether `graph` still fits the plan (stock's `ggml_gallocr_needs_realloc`, negated, and
    /// two checks more): the same node and leaf counts, every node, source and leaf the plan
    /// placed needing no more than it did, and every in-place reuse of the plan between a node
    /// and a source of one layout still. Stock checks no leaf, so a leaf no node reads that
    /// grew (an output of op NONE) is placed past its room, and no reuse, so a node whose
    /// source now broadcasts writes over rows it has still to read.
    ///
    /// # Safety
    /// `graph` must be live, with live tensors.
    unsafe fn fits(&mut self, graph: &ggml_cgraph) -> bool {
        // After a plan without allocation (`reserve_n_size`) there is nothing to place into.
        if self.buffers.iter().any(Option::is_none) {
            return false;
        }
        if self.nodes.len() != graph.n_nodes.max(0) as usize
            || self.leafs.len() != graph.n_leafs.max(0) as usize
        {
            return false;
        }
        // SAFETY: forwarded.
        let (leafs, nodes) = unsafe { graph_tensors(graph) };
        let ok = |p: &Planner, t: *mut ggml_tensor, placed: &Placed| {
            // SAFETY: a leaf or node of the live graph, or a source of a node.
            let r = unsafe { &*t };
            if !r.data.is_null() || !r.view_src.is_null() {
                return true;
            }
            if placed.buffer_id < 0 {
                // It had memory when planned and has none now.
                return false;
            }
            placed.size_max >= p.alloc_size(placed.buffer_id, r)
        };
        for (&leaf, placed) in leafs.iter().zip(&self.leafs) {
            if !ok(&self.planner, leaf, placed) {
                return false;
            }
        }
        for &(i, j) in &self.inplace {
            // SAFETY: a node of the live graph (the counts matched the plan's) and a source.
            let r = unsafe { &*nodes[i as usize] };
            let parent = r.src[j as usize];
            // SAFETY: a non-NULL source of a live node.
            if parent.is_null() || !same_layout(r, unsafe { &*parent }) {
                return false;
            }
        }
        for (&plan, &node) in self.nodes.iter().zip(nodes) {
            let (dst, srcs) = plan.places(&self.placed);
            if !ok(&self.planner, node, dst) {
                return false;
            }
            // SAFETY: live.
            let r = unsafe { &*node };
            for (j, &s) in r.src.iter().enumerate() {
                // Slots past the planned ones read as not placed.
                let placed = srcs.get(j).unwrap_or(&Placed::NONE);
                if !s.is_null() && !ok(&self.planner, s, placed) {
                    return false;
                }
            }
        }
        true
    }

    /// Places `graph`'s tensors by the plan (stock `ggml_gallocr_alloc_graph`). A graph that no
    /// longer fits is planned again when there is a single buffer id; with several, returns
    /// false (the caller must reserve with the buffer ids). Nothing is recorded for
    /// [`Gallocr::alloc_again`] (only the scheduler's replay repeats a placement), and every
    /// slot's record is dropped.
    ///
    /// # Safety
    /// `graph` must be live, with live tensors, sources and view sources.
    pub unsafe fn alloc_graph(&mut self, graph: &ggml_cgraph) -> bool {
        // SAFETY: forwarded.
        unsafe { self.alloc_graph_in(graph, 0, false, false) }
    }

    /// [`Gallocr::alloc_graph`], recording what it does in slot `slot` when `record` (the
    /// caller may place this graph again by [`Gallocr::alloc_again`]); the other slots'
    /// records are kept when `keep_others` (the caller vouches that the graphs they recorded
    /// may be placed again), dropped otherwise. A new plan drops them all. Without `record`
    /// the slot's record is dropped and nothing is written: a graph placed once (most of
    /// llama.cpp's, which reuses its own graph) costs no list of one entry per tensor, whose
    /// fresh memory was most of the page faults of a first `alloc_graph`.
    ///
    /// # Safety
    /// As [`Gallocr::alloc_graph`].
    pub unsafe fn alloc_graph_in(
        &mut self,
        graph: &ggml_cgraph,
        slot: usize,
        keep_others: bool,
        record: bool,
    ) -> bool {
        // SAFETY: forwarded.
        if !unsafe { self.fits(graph) } {
            if self.n_buffers() != 1 {
                return false;
            }
            // SAFETY: forwarded.
            if unsafe { self.reserve(graph, None, None, false) }.is_err() {
                return false;
            }
        }
        self.reset_buffers();
        if !keep_others {
            self.drop_actions();
        }
        if self.actions.len() <= slot {
            self.actions.resize_with(slot + 1, Default::default);
        }
        let mut actions = std::mem::take(&mut self.actions[slot].1);
        self.actions[slot].0 = false;
        actions.clear();
        // SAFETY: forwarded.
        let (leafs, nodes) = unsafe { graph_tensors(graph) };
        let mut record = record.then_some(&mut actions);
        if let Some(a) = record.as_deref_mut() {
            // About one action per leaf and node (sources are mostly among them): sized once.
            a.reserve(leafs.len() + nodes.len());
        }
        for (&leaf, placed) in leafs.iter().zip(&self.leafs) {
            // SAFETY: live tensors of the graph.
            unsafe { self.init_tensor(leaf, placed, record.as_deref_mut()) };
        }
        for (&node, &plan) in nodes.iter().zip(&self.nodes) {
            let (dst, srcs) = plan.places(&self.placed);
            // SAFETY: live.
            let r = unsafe { &*node };
            for (j, &s) in r.src.iter().enumerate() {
                if !s.is_null() {
                    let placed = srcs.get(j).unwrap_or(&Placed::NONE);
                    // SAFETY: a source of a live node.
                    unsafe { self.init_tensor(s, placed, record.as_deref_mut()) };
                }
            }
            // SAFETY: live.
            unsafe { self.init_tensor(node, dst, record.as_deref_mut()) };
        }
        let recorded = record.is_some();
        self.actions[slot] = (recorded, actions);
        true
    }

    /// Marks every slot's record invalid (their memory is kept for the next records).
    fn drop_actions(&mut self) {
        for a in &mut self.actions {
            a.0 = false;
        }
    }

    /// Lets the backends of every compute buffer drop per-tensor state (stock resets each
    /// buffer id's buffer, so a shared one twice).
    fn reset_buffers(&self) {
        for i in 0..self.n_buffers() {
            if let Some(chunks) = &self.buffers[self.planner.talloc_of[i]] {
                for c in chunks {
                    // SAFETY: a chunk this allocator made and has not freed.
                    unsafe { buffer::ggml_backend_buffer_reset(c.buffer) };
                }
            }
        }
    }

    /// Places a graph equal to the one the last [`Gallocr::alloc_graph_in`] of slot `slot`
    /// placed by repeating what it did, without checking sizes again: false (nothing done)
    /// when the slot has no valid record (none since the last plan, or dropped since). The
    /// scheduler's replay uses this ([`crate::sched::replay`]): equal headers need the same
    /// memory, and the plan did not change since it fitted.
    ///
    /// # Safety
    /// The graph must equal, tensor for tensor and header for header, the one that call
    /// placed (as it was before that call), and be live.
    pub unsafe fn alloc_again(&mut self, slot: usize) -> bool {
        let Some((true, actions)) = self.actions.get(slot) else {
            return false;
        };
        self.reset_buffers();
        for &a in actions {
            match a {
                Action::Place(t, b, addr) => {
                    // SAFETY: the tensor is live and without memory, as it was when this
                    // action was recorded (the contract); `b` a live chunk of this allocator
                    // (actions are dropped with every new plan) with room at `addr`.
                    unsafe { place(b, t, addr) };
                }
                Action::View(t) => {
                    // SAFETY: a live view without a buffer whose source now has memory, as
                    // when recorded (the contract).
                    unsafe { tensor::view_init(&mut *t, "ggml_gallocr_alloc_graph") };
                }
            }
        }
        true
    }

    /// Gives one tensor its planned memory, or inits a view over its source's (stock
    /// `ggml_gallocr_init_tensor`), noting what it did in `actions` when given. Tensors with
    /// memory, and views of tensors that ggml-backend did not allocate, are left alone.
    ///
    /// # Safety
    /// `t` and its view source must be live.
    #[inline(always)]
    unsafe fn init_tensor(
        &self,
        t: *mut ggml_tensor,
        placed: &Placed,
        actions: Option<&mut Vec<Action>>,
    ) {
        // Most calls are for a tensor that has its memory already (a source met again, a
        // weight, a view made before): those are answered here, inline, and only the rest
        // pays a call (a tensor is met about three times a graph, as a node and as sources).
        // SAFETY: the caller's contract; only read.
        let (view_src, buffer, data) = unsafe { ((*t).view_src, (*t).buffer, (*t).data) };
        if !view_src.is_null() {
            // SAFETY: a view source of a live tensor is live (the caller's contract).
            if buffer.is_null() && !unsafe { (*view_src).buffer }.is_null() {
                // SAFETY: forwarded; a view without a buffer of an allocated source.
                unsafe { Self::init_view(t, actions) };
            }
        } else if data.is_null() {
            // SAFETY: forwarded; a tensor without memory and without view source.
            unsafe { self.place_planned(t, placed, actions) };
        }
    }

    /// [`Gallocr::init_tensor`] for a view without a buffer whose source has one: inits it
    /// over its source's memory. Out of line, as `place_planned`: most calls have nothing to do.
    ///
    /// # Safety
    /// `t` must be a live view without a buffer, of a live source that has one.
    #[inline(never)]
    unsafe fn init_view(t: *mut ggml_tensor, actions: Option<&mut Vec<Action>>) {
        // SAFETY: this function's contract; no other borrow of `t` is held.
        unsafe { tensor::view_init(&mut *t, "ggml_gallocr_alloc_graph") };
        if let Some(a) = actions {
            a.push(Action::View(t));
        }
    }

    /// [`Gallocr::init_tensor`] for a tensor without memory and without view source: gives
    /// it the memory the plan placed it at.
    ///
    /// # Safety
    /// `t` must be live, without memory and without view source.
    #[inline(never)]
    unsafe fn place_planned(
        &self,
        t: *mut ggml_tensor,
        placed: &Placed,
        actions: Option<&mut Vec<Action>>,
    ) {
        // SAFETY: this function's contract; no other borrow of it is held.
        let r = unsafe { &mut *t };
        if placed.buffer_id < 0 {
            ffi::fatal(
                "ggml_gallocr_alloc_graph",
                "a leaf that had memory when the graph was planned has none now; reserve again",
            );
        }
        let chunks = self.buffers[self.planner.talloc_of[placed.buffer_id as usize]]
            .as_ref()
            .unwrap_or_else(|| {
                ffi::fatal(
                    "ggml_gallocr_alloc_graph",
                    "the compute buffer is not allocated",
                )
            });
        let chunk = chunks[placed.chunk as usize];
        let addr = chunk.base.wrapping_add(placed.offset).cast();
        if !r.buffer.is_null() {
            ffi::fatal(
                "ggml_gallocr_alloc_graph",
                "GGML_ASSERT(tensor->buffer == NULL) failed",
            );
        }
        // The range check of `ggml_backend_tensor_alloc` is left out: `fits` found the tensor
        // needing no more than `size_max`, the plan's room for it at this offset of this chunk.
        debug_assert!(
            // SAFETY: a live chunk of this allocator.
            placed.offset + buffer::alloc_size(unsafe { &*chunk.buffer }, r)
                // SAFETY: as above.
                <= unsafe { (*chunk.buffer).size }
        );
        // SAFETY: a live chunk, and a live tensor without memory that no borrow here holds
        // past this point; the plan keeps it inside the chunk.
        unsafe { place(chunk.buffer, t, addr) };
        if let Some(a) = actions {
            a.push(Action::Place(t, chunk.buffer, addr));
        }
    }

    /// Bytes of buffer id `id`'s compute buffer: 0 when not allocated, and for a buffer id
    /// whose buffer type an earlier id has (stock `ggml_gallocr_get_buffer_size`).
    pub fn buffer_size(&self, id: usize) -> usize {
        let a = self.planner.talloc_of[id];
        let Some(chunks) = &self.buffers[a] else {
            return 0;
        };
        if self.planner.talloc_of[..id].contains(&a) {
            return 0;
        }
        chunks
            .iter()
            // SAFETY: chunks this allocator made and has not freed.
            .map(|c| unsafe { (*c.buffer).size })
            .sum()
    }
}

impl Drop for Gallocr {
    fn drop(&mut self) {
        for b in self.buffers.drain(..) {
            free_chunks(b);
        }
    }
}

/// Gives `t` the memory at `addr` of `b` and lets `b`'s backend initialise it (the body of
/// `ggml_backend_tensor_alloc` once its checks are known to hold).
///
/// # Safety
/// `b` must be a live buffer with room for `t` at `addr`; `t` a live tensor without buffer,
/// data or view source, not borrowed elsewhere.
unsafe fn place(b: ggml_backend_buffer_t, t: *mut ggml_tensor, addr: *mut std::os::raw::c_void) {
    // SAFETY: the caller's contract.
    unsafe {
        (*t).buffer = b;
        (*t).data = addr;
        buffer::init_tensor(&*b, t);
    }
}

/// Frees the chunks of a virtual buffer.
fn free_chunks(chunks: Option<Vec<Chunk>>) {
    for c in chunks.into_iter().flatten() {
        // SAFETY: a chunk made by `buffer_type::alloc_buffer` for this allocator, freed once.
        unsafe { buffer::free(c.buffer) };
    }
}
