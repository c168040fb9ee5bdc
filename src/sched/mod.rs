//! The backend scheduler, `ggml_backend_sched_*`: places the nodes of a graph on a list of
//! backends (by priority, the CPU last), cuts the graph into per-backend splits with copies
//! of the inputs each split needs, allocates everything through `ggml_gallocr` and computes
//! the splits in order, with pipeline copies and events when asked.
//!
//! The observable behaviour (placements, splits, split inputs, copy names, compute and copy
//! order, compute buffer sizes, eval-callback protocol) is that of the stock scheduler in the
//! pinned `ggml/src/ggml-backend.cpp`. The design is ours: every pass is a function over a
//! placement table ([`table::Table`]) that records the backend AND the cause of each
//! placement, and nothing has a fixed size (backends, splits, split inputs, graph inputs and
//! tensor headers all grow). See `docs/sched.md`.
//!
//! Environment: `GGML_SCHED_DEBUG` (1: splits and their inputs; 2: also every node with its
//! backend and cause), `GGML_SCHED_DEBUG_REALLOC` (as stock), `GGML_SCHED_MAX_COPIES`
//! (pipeline copies when `parallel`, default 4), `GGML_SCHED_INPLACE_RULE` (only 0, off, no or
//! false turn the in-place co-location rule off; default on; see `crate::env`),
//! `GGML_SCHED_DUMP=DIR` (a JSON placement record per distinct graph; see [`record`]).

pub mod access;
pub mod alloc;
pub mod assign;
pub mod caps;
pub mod compute;
pub mod ctx;
pub mod direct;
pub mod dump;
pub mod expand;
pub mod fill;
pub mod inplace;
pub mod inspect;
#[cfg(test)]
pub(crate) mod mock;
pub mod place;
pub mod plan_key;
pub mod query;
pub mod record;
pub mod replay;
pub mod split;
pub mod table;
pub mod upgrade;

use std::cell::UnsafeCell;
use std::os::raw::{c_int, c_void};
use std::ptr;

use ggml_sys::{
    ggml_backend_buffer_type_t, ggml_backend_event_t, ggml_backend_sched_eval_callback,
    ggml_backend_sched_t, ggml_backend_t, ggml_cgraph, ggml_status, ggml_tensor,
};

use crate::alloc::gallocr::Gallocr;
use crate::alloc::pack::Layout;
use crate::ffi::{c_name, export, fatal, non_null, non_null_mut};
use ctx::CtxPool;
use split::Split;
use table::{Cause, GraphIds, Table};

/// Stock's number of pipeline copies (`GGML_SCHED_MAX_COPIES`), our default.
pub const DEFAULT_COPIES: usize = 4;

/// The scheduler behind the opaque `ggml_backend_sched_t`. Created by
/// [`ggml_backend_sched_new`], freed by [`ggml_backend_sched_free`]; owns its gallocr,
/// events and tensor-header contexts, borrows the backends (the caller keeps them alive).
pub struct Sched {
    pub(crate) backends: Vec<ggml_backend_t>,
    pub(crate) bufts: Vec<ggml_backend_buffer_type_t>,
    /// The backends' devices as the passes ask them ([`caps::Live`]), refilled for each
    /// `Live`; kept so that making one allocates nothing.
    pub(crate) caps_devs: Vec<caps::Dev>,
    pub(crate) galloc: Gallocr,
    pub(crate) table: Table,
    /// The ids of the last split graph's tensors in `table`, reused by the next split.
    pub(crate) graph_ids: GraphIds,
    /// Backend id per node / leaf of `graph`, and the previous split's (kept, never
    /// truncated, so that comparisons see the same stale entries as stock's arrays).
    pub(crate) node_ids: Vec<c_int>,
    pub(crate) leaf_ids: Vec<c_int>,
    pub(crate) prev_node_ids: Vec<c_int>,
    pub(crate) prev_leaf_ids: Vec<c_int>,
    /// The graph given to gallocr: the nodes with the split inputs and their copies.
    pub(crate) graph: UnsafeCell<ggml_cgraph>,
    pub(crate) graph_nodes: Vec<*mut ggml_tensor>,
    pub(crate) graph_leafs: Vec<*mut ggml_tensor>,
    pub(crate) splits: Vec<Split>,
    /// Splits of earlier graphs, reused by the next split (their input lists keep memory).
    pub(crate) spare_splits: Vec<Split>,
    pub(crate) first_split_backend: usize,
    pub(crate) n_copies: usize,
    pub(crate) cur_copy: usize,
    pub(crate) next_copy: usize,
    /// `[backend][copy]`, NULL where a device has no events or without pipeline copies.
    pub(crate) events: Vec<Vec<ggml_backend_event_t>>,
    pub(crate) graph_inputs: Vec<*mut ggml_tensor>,
    pub(crate) pool: CtxPool,
    pub(crate) callback_eval: ggml_backend_sched_eval_callback,
    pub(crate) callback_eval_user_data: *mut c_void,
    pub(crate) op_offload: bool,
    pub(crate) debug: i32,
    pub(crate) debug_realloc: i32,
    pub(crate) debug_graph_size: usize,
    pub(crate) debug_prev_graph_size: usize,
    pub(crate) inplace_rule: bool,
    pub(crate) is_reset: bool,
    pub(crate) is_alloc: bool,
    /// Which graph `is_alloc` is about: its address, node-array address and sizes when it
    /// was allocated (see [`GraphIdentity`]).
    pub(crate) allocated: Option<GraphIdentity>,
    /// The [`plan_key::plan_key`] of the graph gallocr's plan was made for (by a reserve, or an
    /// allocation that reserved), None before the first: a graph of another key is reserved
    /// again before it is allocated.
    pub(crate) plan: Option<plan_key::Plan>,
    pub(crate) key_scratch: plan_key::KeyScratch,
    /// The backends' allocation dependencies in the last split's allocation graph: (position
    /// of the dependency node, table id of a tensor it keeps alive), in order. Part of the
    /// plan key: two graphs that keep other tensors alive need other plans.
    pub(crate) alloc_dep_keeps: Vec<(u32, u32)>,
    /// The in-place pass's maps and lists, kept from split to split for their memory.
    pub(crate) reuse_memory: inplace::ReuseMemory,
    /// The last split's inputs, to replay its placement for an identical graph
    /// ([`replay`]).
    pub(crate) replay: replay::Replay,
    /// The sources the last split replaced by copies, as they were (see
    /// [`Sched::restore_sources`]).
    pub(crate) originals: Vec<(*mut ggml_tensor, u8, *mut ggml_tensor)>,
    /// A reset happened and the table still holds the last split's placement: it is cleared
    /// (and `pending_user` applied) when the next graph is split afresh, or kept when it is
    /// replayed.
    pub(crate) pending_clear: bool,
    /// `ggml_backend_sched_set_tensor_backend` calls since that reset, in order (a later call
    /// for the same tensor replaces its entry).
    pub(crate) pending_user: Vec<(*mut ggml_tensor, usize)>,
    /// Whether work was queued (`graph_compute_async`) and not waited for since
    /// (`synchronize`): then [`ggml_backend_sched_free`] waits for the backends first.
    pub(crate) queued: std::cell::Cell<bool>,
    /// How often the input loop waits for a split's backend (`GGML_SCHED_INPUT_WAITS`).
    pub(crate) input_waits: compute::InputWaits,
    /// Writes of asynchronous backends into memory another backend uses without a copy, and
    /// which of them may still be queued ([`direct`]).
    pub(crate) direct: direct::DirectWrites,
}

impl Sched {
    /// Gives the graph split last its own sources back where the split pass replaced them by
    /// copies. After a reserve the split is only measured, never computed, and stock leaves
    /// the measure graph reading its copies, headers that its next split frees: a caller that
    /// then allocates the same graph object gets freed headers read. Ours gets the sources
    /// the graph was built with (`tests/replay_break.rs` `reserved_graph_allocated_itself`).
    ///
    /// # Safety
    /// The graph split last, and its nodes, must be live.
    pub(crate) unsafe fn restore_sources(&mut self) {
        for &(node, j, src) in &self.originals {
            // SAFETY: a node of the live graph split last (this function's contract); `j` is
            // one of its source slots (< GGML_MAX_SRC), which the split pass wrote.
            unsafe { (*node).src[j as usize] = src };
        }
        self.originals.clear();
    }

    /// Backend `b`, borrowed, for the layer's internal functions.
    pub(crate) fn backend(&self, b: usize) -> &ggml_sys::ggml_backend {
        // SAFETY: `ggml_backend_sched_new` aborts unless every backend is non-NULL (it borrows
        // each through `backend_ref`), and its contract keeps them live for the scheduler's
        // lifetime.
        unsafe { &*self.backends[b] }
    }

    /// The index of `backend` in the list (its priority), if it is one of ours.
    pub(crate) fn backend_index(&self, backend: ggml_backend_t) -> Option<usize> {
        self.backends.iter().position(|&b| b == backend)
    }

    /// The backend index of `backend` or abort (stock asserts the index is valid).
    fn backend_index_or_abort(&self, backend: ggml_backend_t, func: &str) -> usize {
        match self.backend_index(backend) {
            Some(i) => i,
            None => fatal(
                func,
                "GGML_ASSERT(backend_index >= 0 && backend_index < sched->n_backends) failed",
            ),
        }
    }

    /// The event of `backend` for pipeline copy `copy` (NULL when none).
    pub(crate) fn event(&self, backend: usize, copy: usize) -> ggml_backend_event_t {
        self.events
            .get(backend)
            .and_then(|e| e.get(copy))
            .copied()
            .unwrap_or(ptr::null_mut())
    }

    /// The backend a tensor is placed on (NULL when none): stock's
    /// `ggml_backend_sched_get_tensor_backend`.
    pub(crate) fn tensor_backend(&self, t: *const ggml_tensor) -> ggml_backend_t {
        let b = if self.pending_clear {
            // Reset: only what the user assigned since counts.
            self.pending_user
                .iter()
                .find(|(u, _)| std::ptr::eq(*u, t))
                .map(|&(_, b)| b)
        } else {
            self.table.backend(t)
        };
        b.map_or(ptr::null_mut(), |b| self.backends[b])
    }

    /// Forgets placements and copies unless already reset; always clears `is_alloc`. The
    /// table itself is cleared lazily ([`Sched::materialize_reset`]), so that an identical
    /// next graph can replay it.
    pub(crate) fn reset(&mut self) {
        if !self.is_reset {
            self.pending_clear = true;
            self.pending_user.clear();
            self.is_reset = true;
        }
        self.is_alloc = false;
    }

    /// Carries out a pending reset: clears the table and applies the user's assignments made
    /// since. Returns whether there was one (only then may the split be replayed later).
    pub(crate) fn materialize_reset(&mut self) -> bool {
        if !self.pending_clear {
            return false;
        }
        self.table.clear();
        for &(t, b) in &self.pending_user {
            self.table.set(t, b, Cause::UserAssigned);
        }
        self.pending_clear = false;
        true
    }

    /// Waits for every backend; without an allocated graph, the next graph uses copy 0.
    pub(crate) fn synchronize(&mut self) {
        for b in 0..self.backends.len() {
            crate::backend::synchronize(self.backend(b));
        }
        self.direct.synchronized_all();
        self.queued.set(false);
        if !self.is_alloc {
            self.next_copy = 0;
        }
    }

    /// Splits and allocates `graph` with the next pipeline copy.
    ///
    /// # Safety
    /// `graph` must be a live graph of live tensors.
    pub(crate) unsafe fn alloc_graph(&mut self, graph: *mut ggml_cgraph) -> bool {
        if self.is_alloc {
            fatal(
                c_name!(ggml_backend_sched_alloc_graph),
                "GGML_ASSERT(!sched->is_alloc) failed",
            );
        }
        self.cur_copy = self.next_copy;
        self.next_copy = (self.next_copy + 1) % self.n_copies;
        // SAFETY: `graph` is a live graph of live tensors (this function's contract).
        let replayed = self.pending_clear
            && unsafe {
                self.replay
                    .matches(&*graph, &self.pending_user, self.first_split_backend)
            };
        if replayed {
            // SAFETY: as above; the graph equals the one the last split placed.
            unsafe { self.replay_split(graph) };
        } else {
            // SAFETY: as above.
            unsafe { self.split(graph, true) };
        }
        // SAFETY: the graph just split (or replayed) is that live graph.
        if !unsafe { self.alloc_splits(replayed) } {
            return false;
        }
        // A replay keeps the splits, and with them what they write where another backend
        // reads without a copy; unknown when a reserve or `split_graph` split another graph
        // since. Stock's waits (`GGML_SCHED_INPUT_WAITS=input`) never use the list.
        if self.input_waits != compute::InputWaits::PerInput && (!replayed || !self.direct.known())
        {
            // SAFETY: the graph just split and allocated is live (this function's contract).
            unsafe { self.note_direct_writes() };
        }
        self.is_alloc = true;
        // SAFETY: `graph` is live (this function's contract).
        self.allocated = Some(GraphIdentity::of(unsafe { &*graph }));
        true
    }

    /// Whether the allocated graph is `graph`: same address, same node array, same numbers of
    /// nodes and leafs as when it was allocated. A cheap check, not a deep one: a graph whose
    /// nodes were swapped in place keeps its identity.
    ///
    /// # Safety
    /// `graph` must be a live graph.
    pub(crate) unsafe fn is_allocated(&self, graph: *mut ggml_cgraph) -> bool {
        // SAFETY: `graph` is live (this function's contract).
        self.is_alloc && self.allocated == Some(GraphIdentity::of(unsafe { &*graph }))
    }
}

/// What identifies the graph a scheduler allocated, for [`Sched::is_allocated`]: llama.cpp
/// reuses an unchanged graph by computing the same `ggml_cgraph` again, while a caller that
/// computes another graph than the one it allocated would otherwise get the splits of the
/// first one computed and success returned (stock's behaviour).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GraphIdentity {
    graph: usize,
    nodes: usize,
    n_nodes: c_int,
    n_leafs: c_int,
}

impl GraphIdentity {
    fn of(g: &ggml_cgraph) -> GraphIdentity {
        GraphIdentity {
            graph: std::ptr::from_ref(g) as usize,
            nodes: g.nodes as usize,
            n_nodes: g.n_nodes,
            n_leafs: g.n_leafs,
        }
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        for row in &self.events {
            for &e in row {
                if !e.is_null() {
                    // SAFETY: the event was made for this scheduler and is freed once, here.
                    unsafe { crate::event::free(e) };
                }
            }
        }
        // The tensor-header contexts are freed by the pool's own Drop.
    }
}

/// # Safety
/// `p` must be NULL or a scheduler made by [`ggml_backend_sched_new`] and not freed.
unsafe fn sched_ref<'a>(p: ggml_backend_sched_t, func: &str) -> &'a Sched {
    // SAFETY: NULL (which aborts) or the live `Sched` behind a handle that
    // `ggml_backend_sched_new` made, not freed (this function's contract).
    unsafe { non_null(p as *const Sched, func, "sched") }
}

/// # Safety
/// As [`sched_ref`], and no other borrow of the scheduler is live.
unsafe fn sched_mut<'a>(p: ggml_backend_sched_t, func: &str) -> &'a mut Sched {
    // SAFETY: as in `sched_ref`; the borrow is unique (this function's contract).
    unsafe { non_null_mut(p as *mut Sched, func, "sched") }
}

export! {
    /// Creates a scheduler over `n_backends` backends, in priority order, the last of which must
    /// be a CPU device (aborts otherwise, as stock). `bufts` (may be NULL) gives each backend's
    /// compute buffer type, else its default one; each must be supported by its backend (abort).
    /// `graph_size` is a sizing hint (stock's hard limit on graph size; ours grows past it).
    /// With `parallel`, inputs get `GGML_SCHED_MAX_COPIES` pipeline copies (default 4) and each
    /// backend one event per copy. `op_offload` lets a higher-priority backend take ops on host
    /// weights it asks for. Matches stock `ggml_backend_sched_new`. Free with
    /// [`ggml_backend_sched_free`]. Stock's limit of 16 backends does not apply.
    ///
    /// # Safety
    /// `backends` must point to `n_backends` live backends, `bufts` to as many buffer types or
    /// be NULL; the backends must outlive the scheduler.
    pub unsafe fn ggml_backend_sched_new(
        backends: *mut ggml_backend_t,
        bufts: *mut ggml_backend_buffer_type_t,
        n_backends: c_int,
        graph_size: usize,
        parallel: bool,
        op_offload: bool,
    ) -> ggml_backend_sched_t {
        crate::env::warn_unknown_once();
        crate::ggml_assert!(F, n_backends > 0);
        crate::ggml_assert!(
            F,
            n_backends as usize <= table::MAX_BACKENDS,
            "{n_backends} backends: at most {} are supported",
            table::MAX_BACKENDS
        );
        crate::ggml_assert!(F, !backends.is_null());
        // SAFETY: `backends` is non-NULL (asserted above) and points to `n_backends` (> 0)
        // backends (the `# Safety` contract).
        let list = unsafe { std::slice::from_raw_parts(backends, n_backends as usize) }.to_vec();
        let last = list[list.len() - 1];
        // SAFETY: each entry is NULL (aborts) or a live backend (the `# Safety` contract).
        let last_device = unsafe { crate::backend::backend_ref(last, F) }.device;
        // SAFETY: a live backend's device is NULL (aborts) or live for the process.
        let ty = crate::device::dev_type(unsafe { crate::device::dev_ref(last_device, F) });
        crate::ggml_assert!(F, ty == ggml_sys::GGML_BACKEND_DEVICE_TYPE_CPU, "GGML_ASSERT(ggml_backend_dev_type(ggml_backend_get_device(backends[n_backends - 1])) == GGML_BACKEND_DEVICE_TYPE_CPU) failed");

        let n_copies = if parallel {
            crate::env::read("GGML_SCHED_MAX_COPIES", DEFAULT_COPIES, "4", |t| {
                envvar::count(t, 1..=crate::env::MAX_COPIES)
            })
        } else {
            1
        };
        let mut buft_list = Vec::with_capacity(list.len());
        let mut events = Vec::with_capacity(list.len());
        for (b, &backend) in list.iter().enumerate() {
            // SAFETY: each entry is NULL (aborts) or a live backend (the `# Safety` contract).
            let be = unsafe { crate::backend::backend_ref(backend, F) };
            let buft = if bufts.is_null() {
                crate::backend::default_buffer_type(be)
            } else {
                // SAFETY: a non-NULL `bufts` holds `n_backends` entries (the `# Safety`
                // contract) and `b < n_backends`.
                unsafe { *bufts.add(b) }
            };
            crate::ggml_assert!(
                F,
                // SAFETY: `buft` is the backend's own default type or one the caller passed
                // for it, live for the process.
                unsafe { crate::backend::supports_buft(be, buft) },
                "GGML_ASSERT(ggml_backend_supports_buft(backends[b], sched->bufts[b])) failed"
            );
            buft_list.push(buft);
            let mut row = Vec::new();
            if n_copies > 1 {
                for _ in 0..n_copies {
                    // A NULL device makes no event, as `ggml_backend_event_new` says.
                    row.push(
                        // SAFETY: a live backend's device is NULL or live for the process.
                        unsafe { be.device.as_ref() }.map_or(ptr::null_mut(), crate::event::new),
                    );
                }
            }
            events.push(row);
        }
        // SAFETY: `buft_list` holds live buffer types, which outlive the scheduler (the
        // backends' contract); the allocator copies the list.
        let mut galloc = unsafe { Gallocr::new(&buft_list, Layout::from_env(), F) };
        let inplace_rule = crate::env::safety_rule("GGML_SCHED_INPLACE_RULE");
        if inplace_rule {
            // SAFETY: `list` holds live backends and `buft_list` their live buffer types.
            galloc.set_access(unsafe { access::reuse_access(&list, &buft_list) });
        }
        let mut s = Box::new(Sched {
            backends: list,
            bufts: buft_list,
            caps_devs: Vec::new(),
            galloc,
            table: Table::with_capacity(graph_size),
            graph_ids: GraphIds::with_capacity(graph_size),
            node_ids: Vec::new(),
            leaf_ids: Vec::new(),
            prev_node_ids: Vec::new(),
            prev_leaf_ids: Vec::new(),
            graph: UnsafeCell::new(ggml_cgraph::default()),
            graph_nodes: Vec::new(),
            graph_leafs: Vec::new(),
            splits: Vec::new(),
            spare_splits: Vec::new(),
            first_split_backend: 0,
            n_copies,
            cur_copy: 0,
            next_copy: 0,
            events,
            graph_inputs: Vec::new(),
            pool: CtxPool::new(graph_size.saturating_mul(2)),
            callback_eval: None,
            callback_eval_user_data: ptr::null_mut(),
            op_offload,
            debug: crate::env::debug_level("GGML_SCHED_DEBUG"),
            debug_realloc: crate::env::debug_level("GGML_SCHED_DEBUG_REALLOC"),
            debug_graph_size: 0,
            debug_prev_graph_size: 0,
            inplace_rule,
            input_waits: compute::InputWaits::from_env(),
            direct: Default::default(),
            is_reset: false,
            is_alloc: false,
            allocated: None,
            queued: std::cell::Cell::new(false),
            plan: None,
            key_scratch: plan_key::KeyScratch::with_capacity(graph_size),
            alloc_dep_keeps: Vec::new(),
            reuse_memory: inplace::ReuseMemory::default(),
            replay: Default::default(),
            originals: Vec::new(),
            pending_clear: false,
            pending_user: Vec::new(),
        });
        s.reset();
        Box::into_raw(s) as ggml_backend_sched_t
    }
}

export! {
    /// Frees a scheduler: its events, gallocr (and so its compute buffers) and tensor headers.
    /// When work it queued has not been waited for (`graph_compute_async` without a
    /// `synchronize` since), it waits for its backends first (stock frees at once). NULL is
    /// ignored. Matches stock `ggml_backend_sched_free` otherwise.
    ///
    /// # Safety
    /// `sched` must be NULL or from [`ggml_backend_sched_new`], not used afterwards; with work
    /// still queued, its backends must still be alive. A scheduler with nothing queued does not
    /// touch its backends (llama.cpp frees them first).
    pub unsafe fn ggml_backend_sched_free(sched: ggml_backend_sched_t) {
        if !sched.is_null() {
            // SAFETY: a non-NULL `sched` came from `Box::into_raw` in ggml_backend_sched_new
            // and is freed once (the `# Safety` contract).
            let s = unsafe { Box::from_raw(sched as *mut Sched) };
            // Work queued by graph_compute_async and not waited for may still read the
            // compute buffers and split graphs freed below (stock frees them at once, and a
            // device queue then reads freed memory): wait for the backends first. Only then:
            // llama.cpp frees its backends before its scheduler, after a synchronize, so a
            // scheduler with nothing queued must not touch them.
            if s.queued.get() {
                for &b in &s.backends {
                    // SAFETY: the scheduler's backends were checked non-NULL at creation, and
                    // with work still queued on them they are alive (the `# Safety` contract).
                    crate::backend::synchronize(unsafe { crate::backend::backend_ref(b, F) });
                }
            }
            drop(s);
        }
    }
}

export! {
    /// Resets the scheduler for a new graph: forgets placements (including user assignments)
    /// and copies, and marks the graph unallocated. Matches stock `ggml_backend_sched_reset`.
    ///
    /// # Safety
    /// `sched` must be a live scheduler (NULL aborts).
    pub unsafe fn ggml_backend_sched_reset(sched: ggml_backend_sched_t) {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler not borrowed elsewhere (the
        // `# Safety` contract).
        unsafe { sched_mut(sched, F) }.reset()
    }
}

export! {
    /// Writes into `sizes[b]` the compute buffer size backend `b` would need for
    /// `measure_graph`, without allocating. Resets, synchronizes and splits first. Matches stock
    /// `ggml_backend_sched_reserve_size`.
    ///
    /// # Safety
    /// `sched` live; `measure_graph` a live graph; `sizes` room for one `size_t` per backend.
    pub unsafe fn ggml_backend_sched_reserve_size(
        sched: ggml_backend_sched_t,
        measure_graph: *mut ggml_cgraph,
        sizes: *mut usize,
    ) {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler not borrowed elsewhere (the
        // `# Safety` contract).
        let s = unsafe { sched_mut(sched, F) };
        crate::ggml_assert!(F, !measure_graph.is_null());
        crate::ggml_assert!(F, !sizes.is_null());
        s.reset();
        s.synchronize();
        // SAFETY: non-NULL (asserted above) and a live graph of live tensors (the `# Safety`
        // contract).
        unsafe { s.split(measure_graph, false) };
        // SAFETY: the split just made filled `graph`, `node_ids` and `leaf_ids` for the
        // allocator.
        let planned = unsafe { s.reserve_graph(true) };
        crate::ggml_assert!(F, planned, "GGML_ASSERT(ggml_gallocr_reserve_n_impl(...)) failed");
        // SAFETY: the graph just split, live (the `# Safety` contract).
        unsafe { s.restore_sources() };
        for (i, size) in s.galloc.planned_sizes().into_iter().enumerate() {
            // SAFETY: `sizes` (non-NULL) has room for one size per backend (the `# Safety`
            // contract), and the allocator has one buffer id per backend.
            unsafe { *sizes.add(i) = size };
        }
        // gallocr's plan is now this graph's (sizing replans without allocating).
        // SAFETY: the allocation graph the split just built, of live tensors.
        s.plan = Some(unsafe { s.split_plan() });
    }
}

export! {
    /// Splits `measure_graph` and reserves compute buffers large enough for it, then resets.
    /// Returns false when a buffer cannot be allocated. Matches stock `ggml_backend_sched_reserve`.
    ///
    /// # Safety
    /// `sched` live; `measure_graph` a live graph.
    pub unsafe fn ggml_backend_sched_reserve(
        sched: ggml_backend_sched_t,
        measure_graph: *mut ggml_cgraph,
    ) -> bool {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler not borrowed elsewhere (the
        // `# Safety` contract).
        let s = unsafe { sched_mut(sched, F) };
        crate::ggml_assert!(F, !measure_graph.is_null());
        s.synchronize();
        // SAFETY: non-NULL (asserted above) and a live graph of live tensors (the `# Safety`
        // contract).
        unsafe { s.split(measure_graph, false) };
        // SAFETY: the split just made filled `graph`, `node_ids` and `leaf_ids` for the
        // allocator.
        let reserved = unsafe { s.reserve_graph(false) };
        // SAFETY: the graph just split, live (the `# Safety` contract).
        unsafe { s.restore_sources() };
        if !reserved {
            return false;
        }
        // SAFETY: the allocation graph the split just built, of live tensors.
        s.plan = Some(unsafe { s.split_plan() });
        s.reset();
        true
    }
}

export! {
    /// Number of backends. Matches stock `ggml_backend_sched_get_n_backends`.
    ///
    /// # Safety
    /// `sched` must be a live scheduler.
    pub unsafe fn ggml_backend_sched_get_n_backends(sched: ggml_backend_sched_t) -> c_int {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler (the `# Safety` contract).
        unsafe { sched_ref(sched, F) }.backends.len() as c_int
    }
}

export! {
    /// Backend number `i` (0 = highest priority); aborts when out of range. Matches stock
    /// `ggml_backend_sched_get_backend`.
    ///
    /// # Safety
    /// `sched` must be a live scheduler.
    pub unsafe fn ggml_backend_sched_get_backend(
        sched: ggml_backend_sched_t,
        i: c_int,
    ) -> ggml_backend_t {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler (the `# Safety` contract).
        let s = unsafe { sched_ref(sched, F) };
        crate::ggml_assert!(F, i >= 0 && (i as usize) < s.backends.len());
        s.backends[i as usize]
    }
}

export! {
    /// Number of splits of the last split graph (0 before any). Matches stock
    /// `ggml_backend_sched_get_n_splits`.
    ///
    /// # Safety
    /// `sched` must be a live scheduler.
    pub unsafe fn ggml_backend_sched_get_n_splits(sched: ggml_backend_sched_t) -> c_int {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler (the `# Safety` contract).
        unsafe { sched_ref(sched, F) }.splits.len() as c_int
    }
}

export! {
    /// Number of pipeline copies (1 unless created with `parallel`). Matches stock
    /// `ggml_backend_sched_get_n_copies`.
    ///
    /// # Safety
    /// `sched` must be a live scheduler.
    pub unsafe fn ggml_backend_sched_get_n_copies(sched: ggml_backend_sched_t) -> c_int {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler (the `# Safety` contract).
        unsafe { sched_ref(sched, F) }.n_copies as c_int
    }
}

export! {
    /// The compute buffer type of `backend`; aborts when it is not one of the scheduler's.
    /// Matches stock `ggml_backend_sched_get_buffer_type`.
    ///
    /// # Safety
    /// `sched` must be a live scheduler.
    pub unsafe fn ggml_backend_sched_get_buffer_type(
        sched: ggml_backend_sched_t,
        backend: ggml_backend_t,
    ) -> ggml_backend_buffer_type_t {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler (the `# Safety` contract).
        let s = unsafe { sched_ref(sched, F) };
        s.bufts[s.backend_index_or_abort(backend, F)]
    }
}

export! {
    /// The size in bytes of `backend`'s compute buffer (0 before any reservation); aborts when
    /// `backend` is not one of the scheduler's. Matches stock `ggml_backend_sched_get_buffer_size`.
    ///
    /// # Safety
    /// `sched` must be a live scheduler.
    pub unsafe fn ggml_backend_sched_get_buffer_size(
        sched: ggml_backend_sched_t,
        backend: ggml_backend_t,
    ) -> usize {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler (the `# Safety` contract).
        let s = unsafe { sched_ref(sched, F) };
        let i = s.backend_index_or_abort(backend, F);
        s.galloc.buffer_size(i)
    }
}

export! {
    /// Places `node` on `backend` until the next reset (the passes keep it); aborts when
    /// `backend` is not one of the scheduler's. Matches stock
    /// `ggml_backend_sched_set_tensor_backend`.
    ///
    /// # Safety
    /// `sched` must be a live scheduler; `node` a tensor that lives until the next reset.
    pub unsafe fn ggml_backend_sched_set_tensor_backend(
        sched: ggml_backend_sched_t,
        node: *mut ggml_tensor,
        backend: ggml_backend_t,
    ) {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler not borrowed elsewhere (the
        // `# Safety` contract).
        let s = unsafe { sched_mut(sched, F) };
        // Stock hashes a NULL node like any other and goes on; a NULL placement is a caller's
        // mistake that would otherwise surface far away.
        crate::ffi::require_non_null(node, F, "node");
        let i = s.backend_index_or_abort(backend, F);
        if s.pending_clear {
            match s.pending_user.iter_mut().find(|(u, _)| *u == node) {
                Some(entry) => entry.1 = i,
                None => s.pending_user.push((node, i)),
            }
        } else {
            // The table no longer is what the last split left: that split cannot be replayed.
            s.table.set(node, i, Cause::UserAssigned);
            s.replay.invalidate();
        }
        s.is_reset = false;
    }
}

export! {
    /// The backend `node` is placed on, NULL when it has none. Matches stock
    /// `ggml_backend_sched_get_tensor_backend`.
    ///
    /// # Safety
    /// `sched` must be a live scheduler.
    pub unsafe fn ggml_backend_sched_get_tensor_backend(
        sched: ggml_backend_sched_t,
        node: *mut ggml_tensor,
    ) -> ggml_backend_t {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler (the `# Safety` contract).
        unsafe { sched_ref(sched, F) }.tensor_backend(node)
    }
}

export! {
    /// Places every node of `graph` and cuts it into splits with their input copies, without
    /// allocating. Edits `graph`: sources read across backends are replaced by their copies.
    /// Matches stock `ggml_backend_sched_split_graph`.
    ///
    /// # Safety
    /// `sched` live; `graph` a live graph of live tensors.
    pub unsafe fn ggml_backend_sched_split_graph(
        sched: ggml_backend_sched_t,
        graph: *mut ggml_cgraph,
    ) {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler not borrowed elsewhere (the
        // `# Safety` contract).
        let s = unsafe { sched_mut(sched, F) };
        crate::ggml_assert!(F, !graph.is_null());
        // SAFETY: non-NULL (asserted above) and a live graph of live tensors (the `# Safety`
        // contract).
        unsafe { s.split(graph, false) };
    }
}

export! {
    /// Splits `graph` and allocates its tensors in the compute buffers (reserving again when
    /// placements changed buffer types or the graph does not fit). Returns false when allocation
    /// fails; aborts when a graph is already allocated (call reset first). Matches stock
    /// `ggml_backend_sched_alloc_graph`.
    ///
    /// # Safety
    /// `sched` live; `graph` a live graph of live tensors.
    pub unsafe fn ggml_backend_sched_alloc_graph(
        sched: ggml_backend_sched_t,
        graph: *mut ggml_cgraph,
    ) -> bool {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler not borrowed elsewhere (the
        // `# Safety` contract).
        let s = unsafe { sched_mut(sched, F) };
        crate::ggml_assert!(F, !graph.is_null());
        // SAFETY: non-NULL (asserted above) and a live graph of live tensors (the `# Safety`
        // contract).
        unsafe { s.alloc_graph(graph) }
    }
}

export! {
    /// Computes `graph` (allocating it first when needed) and waits for all backends. Matches
    /// stock `ggml_backend_sched_graph_compute`.
    ///
    /// # Safety
    /// As [`ggml_backend_sched_graph_compute_async`].
    pub unsafe fn ggml_backend_sched_graph_compute(
        sched: ggml_backend_sched_t,
        graph: *mut ggml_cgraph,
    ) -> ggml_status {
        // SAFETY: forwards the contract of this export, which is compute_async's.
        let err = unsafe { compute_async(sched, graph, F) };
        // SAFETY: `sched` is NULL (aborts) or a live scheduler not borrowed elsewhere (the
        // `# Safety` contract).
        unsafe { sched_mut(sched, F) }.synchronize();
        err
    }
}

export! {
    /// Computes `graph` split by split without waiting at the end: resets first when a previous
    /// graph was split but not allocated, allocates when not allocated
    /// (`GGML_STATUS_ALLOC_FAILED` on failure), then copies each split's inputs and runs it on
    /// its backend, honouring the eval callback. Matches stock
    /// `ggml_backend_sched_graph_compute_async`.
    ///
    /// # Safety
    /// `sched` live; `graph` a live graph of live tensors (another graph than the one allocated
    /// is allocated first).
    pub unsafe fn ggml_backend_sched_graph_compute_async(
        sched: ggml_backend_sched_t,
        graph: *mut ggml_cgraph,
    ) -> ggml_status {
        // SAFETY: forwards the contract of this export, which is compute_async's.
        unsafe { compute_async(sched, graph, F) }
    }
}

/// The body of the compute entry points. The scheduler is borrowed mutably only to
/// allocate; computing borrows it shared, so the eval callback may query it.
///
/// # Safety
/// `sched` must be NULL or a live scheduler not borrowed elsewhere; `graph` NULL (aborts) or a
/// live graph of live tensors.
unsafe fn compute_async(
    sched: ggml_backend_sched_t,
    graph: *mut ggml_cgraph,
    f: &str,
) -> ggml_status {
    {
        // SAFETY: NULL or live and not borrowed elsewhere (this function's contract); the
        // borrow ends with this block.
        let s = unsafe { sched_mut(sched, f) };
        crate::ggml_assert!(f, !graph.is_null());
        // Another graph than the one allocated (stock computes the allocated one's splits
        // and returns success, leaving `graph` uncomputed): reset and allocate this one.
        // SAFETY: non-NULL (asserted above) and live (this function's contract).
        if s.is_alloc && !unsafe { s.is_allocated(graph) } {
            crate::ffi::log::debug(&format!(
                "{f}: the graph differs from the one allocated; allocating it\n"
            ));
            s.reset();
        }
        if !s.is_reset && !s.is_alloc {
            s.reset();
        }
        if !s.is_alloc {
            crate::ggml_assert!(f, !graph.is_null());
            // SAFETY: non-NULL (asserted above) and a live graph of live tensors (this
            // function's contract).
            if !unsafe { s.alloc_graph(graph) } {
                return ggml_sys::GGML_STATUS_ALLOC_FAILED;
            }
        }
    }
    // SAFETY: as above; the mutable borrow has ended, and this shared one lets the eval
    // callback query the scheduler while it computes.
    let s = unsafe { sched_ref(sched, f) };
    s.queued.set(true);
    // SAFETY: the graph split last is allocated (above, or before this call) and, by this
    // function's contract, still alive.
    unsafe { s.compute_splits() }
}

export! {
    /// Waits for every backend; when no graph is allocated, the next one uses pipeline copy 0.
    /// Matches stock `ggml_backend_sched_synchronize`.
    ///
    /// # Safety
    /// `sched` must be a live scheduler.
    pub unsafe fn ggml_backend_sched_synchronize(sched: ggml_backend_sched_t) {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler not borrowed elsewhere (the
        // `# Safety` contract).
        unsafe { sched_mut(sched, F) }.synchronize()
    }
}

export! {
    /// Sets the eval callback: asked (`ask` true) about each node whether the caller wants its
    /// result; nodes up to a wanted one are computed together, then the callback observes it
    /// (`ask` false) and returning false stops the current split. Matches stock
    /// `ggml_backend_sched_set_eval_callback`.
    ///
    /// # Safety
    /// `sched` must be a live scheduler; `user_data` is passed back as is.
    pub unsafe fn ggml_backend_sched_set_eval_callback(
        sched: ggml_backend_sched_t,
        callback: ggml_backend_sched_eval_callback,
        user_data: *mut c_void,
    ) {
        // SAFETY: `sched` is NULL (aborts) or a live scheduler not borrowed elsewhere (the
        // `# Safety` contract).
        let s = unsafe { sched_mut(sched, F) };
        s.callback_eval = callback;
        s.callback_eval_user_data = user_data;
    }
}
