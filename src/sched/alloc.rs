//! After the passes ([`Sched::place`]): building the graph that gallocr allocates (each split's
//! input sources and copies first, the split's nodes, the backends' allocation dependencies,
//! and with pipeline copies every copy as a leaf), and allocating it. Matches the second
//! half of stock's `ggml_backend_sched_split_graph` and `ggml_backend_sched_alloc_splits`.

use std::collections::HashMap;
use std::os::raw::{c_int, c_void};

use ggml_sys::{ggml_backend_buffer_type_t, ggml_cgraph, ggml_tensor};

use super::inspect;
use super::plan_key::Plan;
use super::split;
use super::Sched;
use crate::ffi::c_name;

/// Tensors a backend asked to keep allocated until a node (the key) has run.
type AllocDeps = HashMap<*mut ggml_tensor, Vec<*mut ggml_tensor>>;

/// The `add_alloc_dep` callback given to backends' `graph_optimize`.
unsafe extern "C" fn add_alloc_dep(
    user_data: *mut c_void,
    tensor: *mut ggml_tensor,
    until: *mut ggml_tensor,
) {
    crate::ffi::boundary("ggml_backend_sched add_alloc_dep", || {
        // SAFETY: user_data is the AllocDeps that split() passes with this callback, alive
        // for the duration of the graph_optimize call.
        let deps = unsafe { &mut *(user_data as *mut AllocDeps) };
        let keep = deps.entry(until).or_default();
        if !keep.contains(&tensor) {
            keep.push(tensor);
        }
    })
}

/// Writes `v` at `i`, growing `ids` with zeros (stock's arrays start zeroed).
fn put(ids: &mut Vec<c_int>, i: usize, v: c_int) {
    if ids.len() <= i {
        ids.resize(i + 1, 0);
    }
    ids[i] = v;
}

impl Sched {
    /// The buffer type of a backend id as stored in the id arrays (NULL for -1).
    fn buft_of(&self, id: c_int) -> ggml_backend_buffer_type_t {
        if id >= 0 && (id as usize) < self.bufts.len() {
            self.bufts[id as usize]
        } else {
            std::ptr::null_mut()
        }
    }

    /// Places, splits and builds the allocation graph for `graph` (stock
    /// `ggml_backend_sched_split_graph`); with `snapshot`, keeps what a replay of it needs
    /// ([`super::replay`]).
    ///
    /// # Safety
    /// `graph` must be a live graph of live tensors.
    pub(crate) unsafe fn split(&mut self, graph: *mut ggml_cgraph, snapshot: bool) {
        // A replay needs a split that started from a reset table, and one that neither logs
        // nor records its graph. Only `alloc_graph` asks for the snapshot (its cost is a copy
        // of every header): graphs split for a reserve or by `split_graph` alone are rarely
        // allocated next.
        let reset = self.materialize_reset();
        self.direct.invalidate();
        // With pipeline copies, what depends on the current copy is noted as well, so that a
        // replay with another one lays it out again.
        let replayable = snapshot && reset && self.debug == 0 && super::record::dir().is_none();
        // SAFETY: `graph` is a live graph of live tensors (this function's contract).
        unsafe {
            self.replay.take(
                &*graph,
                &self.pending_user,
                self.first_split_backend,
                self.n_copies,
                replayable,
            )
        };
        // Only a graph seen before is snapshot (see `Replay::take`).
        let replayable = self.replay.snapshot();
        let note_copies = replayable && self.n_copies > 1;
        self.is_reset = false;
        self.pool.reset();
        // SAFETY: ggml's uid counter is a plain atomic increment, callable at any time.
        let uid = unsafe { ggml_sys::ggml_graph_next_uid() };
        // SAFETY: `graph` is a live graph (this function's contract) and no reference to it
        // is held yet.
        unsafe { (*graph).uid = uid };
        // SAFETY: as above; from here on the graph struct is only read (backends'
        // `graph_optimize` reorders the node array it points at, not the struct).
        let g = unsafe { &*graph };
        // SAFETY: `g` is a live graph of live tensors (this function's contract).
        unsafe { self.place(g) };

        std::mem::swap(&mut self.node_ids, &mut self.prev_node_ids);
        std::mem::swap(&mut self.leaf_ids, &mut self.prev_leaf_ids);

        // Let each backend reorder its split and name tensors to keep alive longer.
        let mut deps: AllocDeps = HashMap::new();
        let mut params = ggml_sys::ggml_backend_graph_optimize_params {
            add_alloc_dep: Some(add_alloc_dep),
            user_data: &mut deps as *mut AllocDeps as *mut c_void,
        };
        for s in &self.splits {
            // SAFETY: `graph` is live and the split pass cut `[i_start, i_end)` out of its
            // `n_nodes` nodes, so the view's bounds are in range.
            let view =
                unsafe { ggml_sys::ggml_graph_view(graph, s.i_start as c_int, s.i_end as c_int) };
            // SAFETY: `&mut self` excludes every other access to the split's graph cell.
            unsafe { *s.graph.get() = view };
            if let Some(opt) = self.backend(s.backend).iface.graph_optimize {
                // SAFETY: the backend's own callback, given the backend (live for the
                // scheduler's lifetime, see `Sched::backend`), a view of live nodes, and
                // `params` whose `user_data` is `deps`, which outlives the call and is what
                // `add_alloc_dep` expects.
                unsafe { opt(self.backends[s.backend], s.graph.get(), &mut params) };
            }
        }
        if replayable {
            // SAFETY: `g` is the live graph given to `take` above.
            unsafe { self.replay.note_order(g) };
        }
        let max_src = ggml_sys::GGML_MAX_SRC as usize;
        let n_dep_nodes: usize = deps.values().map(|v| v.len().div_ceil(max_src)).sum();
        let total_inputs =
            self.graph_inputs.len() + self.splits.iter().map(|s| s.inputs.len()).sum::<usize>();
        let graph_size = (g.n_nodes.max(g.n_leafs).max(0) as usize)
            + total_inputs * 2 * self.n_copies
            + n_dep_nodes;
        self.debug_prev_graph_size = self.debug_graph_size;
        self.debug_graph_size = graph_size;

        self.graph_nodes.clear();
        self.graph_leafs.clear();
        // `graph_size` bounds both arrays and both id lists. The id lists are swapped with
        // the last split's at every split, so the one filled now is often the empty one of a
        // new scheduler: grown by pushes it was reallocated and copied a dozen times.
        for ids in [&mut self.node_ids, &mut self.leaf_ids] {
            ids.reserve(graph_size.saturating_sub(ids.len()));
        }
        self.graph_nodes.reserve(graph_size);
        self.graph_leafs.reserve(graph_size);
        // SAFETY: `g` is live and its node count does not change while this runs (the
        // backends' `graph_optimize` above only reorders nodes in place).
        let nodes = unsafe { inspect::nodes(g) };
        let mut n_dep_added = 0usize;
        self.alloc_dep_keeps.clear();
        for s in &self.splits {
            for (&input, &id) in s.inputs.iter().zip(&s.input_ids) {
                let copies = self.table.copies_at(id, s.backend).unwrap_or(&[]);
                let cpy = copies.get(self.cur_copy).copied().unwrap_or(input);
                if note_copies {
                    // The copy's position: after the dependency view pushed below.
                    self.replay
                        .note_node_copies(self.graph_nodes.len() + 1, copies);
                }
                // Keeps the source alive until the copy is made.
                // SAFETY: a split input is a non-NULL source of a node of the live graph, so
                // a live tensor, and so is its view source.
                let dep = unsafe { split::view_of(&mut self.pool, input) };
                // SAFETY: `dep` is a tensor header just made in the pool's context (ggml
                // aborts rather than return NULL), referenced from nowhere else yet.
                unsafe { (*dep).src[0] = input };
                put(
                    &mut self.node_ids,
                    self.graph_nodes.len(),
                    self.table.backend_at(id).map_or(-1, |b| b as c_int),
                );
                self.graph_nodes.push(dep);
                // Makes the copy allocated at the start of the split.
                put(
                    &mut self.node_ids,
                    self.graph_nodes.len(),
                    s.backend as c_int,
                );
                self.graph_nodes.push(cpy);
            }
            // A backend's graph_optimize may have reordered the split's nodes in place:
            // then the ids taken by position no longer match and the lookup is by address.
            let reordered = self.backend(s.backend).iface.graph_optimize.is_some();
            let ids = &self.graph_ids.nodes[s.i_start..s.i_end];
            for (&node, &id) in nodes[s.i_start..s.i_end].iter().zip(ids) {
                let backend = if reordered {
                    self.table.backend_i32(node)
                } else {
                    self.table.backend_at(id).map_or(-1, |b| b as c_int)
                };
                put(&mut self.node_ids, self.graph_nodes.len(), backend);
                self.graph_nodes.push(node);
                if deps.is_empty() {
                    continue;
                }
                if let Some(keep) = deps.get(&node) {
                    for chunk in keep.chunks(max_src) {
                        // SAFETY: a backend named `chunk[0]` through `add_alloc_dep` while
                        // optimizing its split, so it is a live tensor of the graph (the
                        // count check below stops on any other); so is its view source.
                        let dep = unsafe { split::view_of(&mut self.pool, chunk[0]) };
                        let at = self.graph_nodes.len() as u32;
                        for (k, &t) in chunk.iter().enumerate() {
                            // SAFETY: `dep` is a header just made in the pool's context,
                            // referenced from nowhere else; `k` < GGML_MAX_SRC (chunk size).
                            unsafe { (*dep).src[k] = t };
                            self.alloc_dep_keeps.push((at, self.table.id(t) as u32));
                        }
                        put(
                            &mut self.node_ids,
                            self.graph_nodes.len(),
                            s.backend as c_int,
                        );
                        self.graph_nodes.push(dep);
                        n_dep_added += 1;
                    }
                }
            }
        }
        crate::ggml_assert!(
            c_name!(sched::ggml_backend_sched_split_graph),
            n_dep_added == n_dep_nodes,
            "GGML_ASSERT(n_dep_nodes_added == n_dep_nodes) failed: a backend added an allocation dependency on a tensor that is not a node of its split"
        );

        if self.n_copies > 1 {
            for &input in &self.graph_inputs {
                let b = self.table.backend(input).unwrap_or(0);
                if note_copies {
                    let id = self.table.id(input);
                    let copies = self.table.copies_at(id, b).unwrap_or(&[]);
                    self.replay
                        .note_graph_input(input, id, b, copies, self.cur_copy);
                }
                for c in 0..self.n_copies {
                    put(&mut self.leaf_ids, self.graph_leafs.len(), b as c_int);
                    self.graph_leafs
                        .push(self.table.copy(input, b, c).unwrap_or(input));
                }
            }
            for s in &self.splits {
                for (&input, &id) in s.inputs.iter().zip(&s.input_ids) {
                    for c in 0..self.n_copies {
                        put(
                            &mut self.leaf_ids,
                            self.graph_leafs.len(),
                            s.backend as c_int,
                        );
                        self.graph_leafs
                            .push(self.table.copy_at(id, s.backend, c).unwrap_or(input));
                    }
                }
            }
        }
        // SAFETY: `g` is live with `n_leafs` leaf pointers (this function's contract).
        let leafs = unsafe { inspect::leafs(g) };
        for (&leaf, &id) in leafs.iter().zip(&self.graph_ids.leafs) {
            put(
                &mut self.leaf_ids,
                self.graph_leafs.len(),
                self.table.backend_at(id).map_or(-1, |b| b as c_int),
            );
            self.graph_leafs.push(leaf);
        }

        let gc = self.graph.get_mut();
        gc.size = gc.size.max(graph_size as c_int);
        gc.n_nodes = self.graph_nodes.len() as c_int;
        gc.n_leafs = self.graph_leafs.len() as c_int;
        gc.nodes = self.graph_nodes.as_mut_ptr();
        gc.leafs = self.graph_leafs.as_mut_ptr();

        for s in &self.splits {
            // SAFETY: as for the uid above.
            let uid = unsafe { ggml_sys::ggml_graph_next_uid() };
            // SAFETY: `&mut self` excludes every other access to the split's graph cell.
            unsafe { (*s.graph.get()).uid = uid };
        }
        if replayable {
            // SAFETY: the ids the passes just took from `g`, the graph given to `take`.
            unsafe { self.replay.commit(&self.graph_ids) };
        }
    }

    /// Places `graph` as the last split placed it, without running the passes: the caller has
    /// checked that it is that graph ([`super::replay`]). Keeps the table, the splits, their
    /// copies and the allocation graph; gives `graph` the node order the backends chose, the
    /// splits their views of it, fresh uids, and the copies back their unallocated state, as
    /// new headers would have.
    ///
    /// # Safety
    /// `graph` must be a live graph of live tensors, equal to the last split's by
    /// [`super::replay::Replay::matches`].
    pub(crate) unsafe fn replay_split(&mut self, graph: *mut ggml_cgraph) {
        // The table is the last split's: a clear, the same assignments, the same passes.
        self.pending_clear = false;
        self.is_reset = false;
        // SAFETY: ggml's uid counter is a plain atomic increment, callable at any time.
        let uid = unsafe { ggml_sys::ggml_graph_next_uid() };
        // SAFETY: `graph` is live (this function's contract), no reference to it held.
        unsafe { (*graph).uid = uid };
        if let Some(order) = self.replay.optimized() {
            // SAFETY: the graph has `n_nodes` node slots (live, the contract) and `order` is a
            // permutation of the same nodes (`matches` compared them), so as many.
            unsafe { std::ptr::copy_nonoverlapping(order.as_ptr(), (*graph).nodes, order.len()) };
        }
        for s in &self.splits {
            // SAFETY: the split's bounds are within the graph's nodes (the same graph as the
            // one split); `&mut self` excludes other access to the split's graph cell.
            unsafe {
                *s.graph.get() =
                    ggml_sys::ggml_graph_view(graph, s.i_start as c_int, s.i_end as c_int);
                (*s.graph.get()).uid = ggml_sys::ggml_graph_next_uid();
            }
        }
        self.pool.forget_storage();
        let cur_copy = self.cur_copy;
        // SAFETY: the graph's tensors are the snapshot's, live (this function's contract).
        unsafe { self.replay.apply_rewrites(cur_copy) };
        if self.n_copies > 1 {
            // SAFETY: the scheduler's own lists (see `Sched::backend`).
            let live =
                unsafe { super::caps::Live::new(&self.backends, &self.bufts, &mut self.caps_devs) };
            let live: &dyn super::caps::Caps = &live;
            let pool = &mut self.pool;
            let make_copy = |leaf, backend, c| {
                let name = live.backend_name(backend).into_bytes();
                // SAFETY: `leaf` is a live leaf of the graph (see `relay_copies`); the copy
                // is made in the pool, whose contexts live until its next reset.
                let t = unsafe { split::dup_named(pool, leaf, &name, c) };
                // SAFETY: the header just made, referenced from nowhere else; only its flags
                // change, as pass 6 sets them.
                unsafe {
                    ggml_sys::ggml_set_input(t);
                    ggml_sys::ggml_set_output(t);
                }
                t
            };
            // SAFETY: the graph is the snapshot's and live (this function's contract); the
            // table and the allocation graph's arrays are as the snapshot's split or the
            // replays since left them (only a split or a replay writes them).
            unsafe {
                self.replay.relay_copies(
                    cur_copy,
                    &mut self.table,
                    &mut self.graph_nodes,
                    &mut self.graph_leafs,
                    make_copy,
                )
            };
        }
        // As a split of this graph would leave them (the same size again).
        self.debug_prev_graph_size = self.debug_graph_size;
        super::replay::count_replay(self.n_copies > 1);
    }

    /// Allocates the split graph, reserving again first when a node or leaf moved to a
    /// backend of another buffer type or the allocation does not fit (stock
    /// `ggml_backend_sched_alloc_splits`). False when reserving or allocating fails.
    ///
    /// # Safety
    /// The graph last given to [`Sched::split`], and its tensors, must still be live.
    pub(crate) unsafe fn alloc_splits(&mut self, replayed: bool) -> bool {
        let n_nodes = self.graph.get_mut().n_nodes as usize;
        let n_leafs = self.graph.get_mut().n_leafs as usize;
        let gc = self.graph.get();
        // The allocator records a placement per pipeline copy: a replay with copy c places
        // the allocation graph the last placement with copy c of this snapshot placed.
        let slot = self.cur_copy;
        if replayed {
            // The allocation graph is the one the allocator placed last for this copy,
            // unchanged: place it the same way again.
            // SAFETY: `gc` is that graph (a fresh split drops every other copy's record, see
            // below), its tensors live (this function's contract) and, the copies' storage
            // forgotten, as they were before that placement.
            if unsafe { self.galloc.alloc_again(slot) } {
                return true;
            }
            if self.n_copies == 1 {
                super::replay::count_serial_record_miss();
            }
        }
        let (this, changed, stale) = if replayed {
            // The allocation graph is the one the current plan was checked for, unchanged.
            (self.plan, false, false)
        } else {
            // SAFETY: the allocation graph `split` built, of live tensors (this function's
            // contract).
            let key = unsafe { self.split_plan_key() };
            let prev = |v: &Vec<c_int>, i: usize| v.get(i).copied().unwrap_or(0);
            let moved = |cur: &Vec<c_int>, old: &Vec<c_int>, n: usize| {
                (0..n).any(|i| {
                    cur[i] != prev(old, i) && self.buft_of(cur[i]) != self.buft_of(prev(old, i))
                })
            };
            let changed = moved(&self.node_ids, &self.prev_node_ids, n_nodes)
                || moved(&self.leaf_ids, &self.prev_leaf_ids, n_leafs);
            // A plan made for a graph of another structure but the same counts, which gallocr
            // would reuse (stock does, see `plan_key`), is made again first, quietly. Count
            // changes are left to gallocr and the path below, as in stock
            // (GGML_SCHED_DEBUG_REALLOC included).
            let this = Plan {
                key,
                n_nodes,
                n_leafs,
            };
            let stale = !changed
                && self.plan.is_some_and(|p| {
                    p != this && p.n_nodes == this.n_nodes && p.n_leafs == this.n_leafs
                });
            (Some(this), changed, stale)
        };
        // SAFETY: as for `alloc_graph` below.
        if stale && !unsafe { self.reserve_split() } {
            return false;
        }

        // Only a graph a replay may place again needs the allocator's record of what it did:
        // one whose split was snapshot and committed (or is being replayed).
        let record = self.replay.replayable();
        // A fresh split drops the other copies' records (they placed other graphs); a replay
        // keeps them (they placed this snapshot with other copies).
        // SAFETY: `gc` is the allocation graph `split` built, whose node and leaf arrays are
        // `graph_nodes` and `graph_leafs` (unchanged since) and whose tensors are live by this
        // function's contract.
        if changed || !unsafe { self.galloc.alloc_graph_in(&*gc, slot, replayed, record) } {
            if self.debug_realloc > 0 {
                let unexpected = !changed && self.debug_prev_graph_size == self.debug_graph_size;
                if unexpected || self.debug_realloc > 1 {
                    crate::ffi::fatal(
                        "ggml_backend_sched_alloc_splits",
                        &format!(
                            "unexpected graph reallocation (graph size = {}, nodes = {}, leafs = {}), debug_realloc = {}",
                            self.debug_graph_size, n_nodes, n_leafs, self.debug_realloc
                        ),
                    );
                }
            }
            // SAFETY: as for `alloc_graph` above.
            if !unsafe { self.reserve_split() } {
                return false;
            }
            // SAFETY: as for the first `alloc_graph_in` (the reserve dropped every record).
            if !unsafe { self.galloc.alloc_graph_in(&*gc, slot, replayed, record) } {
                crate::ffi::log::error(
                    "ggml_backend_sched_alloc_splits: failed to allocate graph\n",
                );
                return false;
            }
        }
        self.plan = this;
        self.replay.planned = true;
        true
    }

    /// Makes gallocr plan the allocation graph again, after waiting for every backend (inputs
    /// may move; the copy index is left alone). False, with stock's error line, when the
    /// buffers cannot be had.
    ///
    /// # Safety
    /// As [`Sched::alloc_splits`].
    unsafe fn reserve_split(&mut self) -> bool {
        for b in 0..self.backends.len() {
            crate::backend::synchronize(self.backend(b));
        }
        self.direct.synchronized_all();
        // SAFETY: this function's contract.
        let reserved = unsafe { self.reserve_graph(false) };
        if !reserved {
            crate::ffi::log::error(
                "ggml_backend_sched_alloc_splits: failed to reserve graph buffers\n",
            );
        }
        reserved
    }

    /// Plans the allocation graph the last split built and, unless `no_alloc`, grows the
    /// compute buffers to the plan (stock `ggml_gallocr_reserve_n`, or `_size` with
    /// `no_alloc`). False when a backend cannot allocate a buffer.
    ///
    /// # Safety
    /// As [`Sched::alloc_splits`].
    pub(crate) unsafe fn reserve_graph(&mut self, no_alloc: bool) -> bool {
        let g = self.graph.get_mut();
        let (n, l) = (g.n_nodes.max(0) as usize, g.n_leafs.max(0) as usize);
        // `put` grew `node_ids` and `leaf_ids` to at least the graph's counts.
        let (nodes, leafs) = (&self.node_ids[..n], &self.leaf_ids[..l]);
        // SAFETY: the allocation graph `split` built, of live tensors (this function's
        // contract), with one buffer id per node and leaf.
        unsafe { self.galloc.reserve(g, Some(nodes), Some(leafs), no_alloc) }.is_ok()
    }

    /// The plan gallocr holds after a reserve of the allocation graph the last split built.
    ///
    /// # Safety
    /// As [`Sched::split_plan_key`].
    pub(crate) unsafe fn split_plan(&mut self) -> Plan {
        let (n_nodes, n_leafs) = {
            let g = self.graph.get_mut();
            (g.n_nodes as usize, g.n_leafs as usize)
        };
        // SAFETY: this function's contract.
        let key = unsafe { self.split_plan_key() };
        Plan {
            key,
            n_nodes,
            n_leafs,
        }
    }

    /// The [`plan_key::plan_key`] of the allocation graph the last split built.
    ///
    /// # Safety
    /// The graph last given to [`Sched::split`], and its tensors, must still be live.
    pub(crate) unsafe fn split_plan_key(&mut self) -> u64 {
        // SAFETY: `graph` points at `graph_nodes` and `graph_leafs`, whose tensors are live
        // (this function's contract); `put` grew the id arrays to the graph's counts.
        unsafe {
            super::plan_key::plan_key(
                &mut self.key_scratch,
                &*self.graph.get(),
                &self.node_ids,
                &self.leaf_ids,
                &self.graph_ids,
                self.table.len(),
                &self.splits,
                &self.alloc_dep_keeps,
                self.n_copies,
            )
        }
    }

    /// Works out, for each split, the tensors it writes where another backend reads without
    /// a copy ([`super::direct`]).
    ///
    /// # Safety
    /// The graph split last must be allocated and live.
    pub(crate) unsafe fn note_direct_writes(&mut self) {
        // SAFETY: the scheduler's own lists (see `Sched::backend`).
        let live =
            unsafe { super::caps::Live::new(&self.backends, &self.bufts, &mut self.caps_devs) };
        let backends = &self.backends;
        // A backend without `synchronize` (ggml-cpu) has finished a split when its compute
        // returns.
        // SAFETY: the scheduler's backends are live for its lifetime (`Sched::backend`).
        let is_async = |b: usize| unsafe { (*backends[b]).iface.synchronize.is_some() };
        let table = &self.table;
        let splits = self.splits.iter().map(|s| {
            // Every pipeline copy of each input (`work_out` reads them only for an
            // asynchronous backend).
            let copies = s
                .input_ids
                .iter()
                .flat_map(move |&id| table.copies_at(id, s.backend).unwrap_or(&[]))
                .copied()
                .filter(|c| !c.is_null());
            // SAFETY: a split's graph cell is written only by `split` and `replay_split`, not
            // while this runs; the graph is allocated and live (this function's contract).
            (s.backend, unsafe { &*s.graph.get() }, copies)
        });
        // SAFETY: as above; the copies are allocated with the graph.
        unsafe { self.direct.work_out(&live, &is_async, splits) };
    }
}
