//! The placement table: one [`Placement`] per tensor the scheduler has seen, indexed by a
//! dense id that a hash map gives each tensor address, plus the per-backend copies made for
//! split inputs.
//!
//! The table lives from one [`Table::clear`] (the scheduler's reset) to the next, across
//! graph splits, exactly as stock's hash set of backend ids does: assignments made by the user
//! or by a previous split survive until the reset.

use rustc_hash::FxHashMap;

use ggml_sys::ggml_tensor;

use crate::ffi::c_name;
use crate::tensor::meta;

/// Why a tensor was placed on its backend. Every placement records one; `GGML_SCHED_DEBUG=2`
/// prints it next to each node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// Set through `ggml_backend_sched_set_tensor_backend`.
    UserAssigned,
    /// The tensor's own storage is allocated; the highest-priority backend able to use that
    /// buffer type and run the op.
    PreAllocated,
    /// The storage of the tensor's view source is allocated (a view of pre-allocated data).
    PreAllocatedView,
    /// A graph input (`GGML_TENSOR_FLAG_INPUT`) without storage: the last (CPU) backend.
    Input,
    /// The op reads a weight: the backend that holds that weight.
    Weight,
    /// The op reads a host weight, and a higher-priority backend asked to run it (`offload_op`).
    Offload,
    /// Pass 2, first sweep: expansion of a non-CPU backend down the graph.
    ExpandDeviceDown,
    /// Pass 2, second sweep: expansion of a non-CPU backend up the graph.
    ExpandDeviceUp,
    /// Pass 2, third sweep: expansion of any backend down the graph.
    ExpandDown,
    /// Pass 2, fourth sweep: expansion of any backend up the graph.
    ExpandUp,
    /// Pass 3: moved to a higher-priority backend with the same buffer type.
    Upgrade,
    /// Pass 3: an unassigned node, put on the supporting backend that can use most inputs.
    BestInputs,
    /// Pass 4: a view, on the backend of its view source.
    ViewSource,
    /// Pass 4: a source without a backend, on the backend of the node that reads it.
    FromDestination,
    /// Pass 4: still unassigned; the first backend that supports the op.
    FirstSupported,
    /// The in-place rule (issue 5): a writer and the storage it writes, on one backend.
    InPlaceColocation,
}

impl Cause {
    /// A short label (at most 8 characters) for the schedule dump.
    pub fn label(self) -> &'static str {
        match self {
            Cause::UserAssigned => "user",
            Cause::PreAllocated => "prealloc",
            Cause::PreAllocatedView => "pre-view",
            Cause::Input => "input",
            Cause::Weight => "weight",
            Cause::Offload => "offload",
            Cause::ExpandDeviceDown => "expd-dn",
            Cause::ExpandDeviceUp => "expd-up",
            Cause::ExpandDown => "exp-dn",
            Cause::ExpandUp => "exp-up",
            Cause::Upgrade => "upgrade",
            Cause::BestInputs => "best-in",
            Cause::ViewSource => "view-src",
            Cause::FromDestination => "from-dst",
            Cause::FirstSupported => "first-ok",
            Cause::InPlaceColocation => "inplace",
        }
    }
}

/// Where one tensor runs (or lives) and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Index of the backend in the scheduler's list (0 = highest priority).
    pub backend: usize,
    /// Why it is there.
    pub cause: Cause,
}

/// A [`Placement`] as the table stores it: 4 bytes instead of 16, so that the placements
/// of a graph's tensors, read in every pass, share 4 times fewer cache lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    backend: u16,
    cause: Cause,
}

impl Slot {
    /// `backend` fits: the scheduler refuses more than [`MAX_BACKENDS`] backends.
    #[inline]
    fn new(backend: usize, cause: Cause) -> Slot {
        debug_assert!(backend < MAX_BACKENDS);
        Slot {
            backend: backend as u16,
            cause,
        }
    }

    #[inline]
    fn placement(self) -> Placement {
        Placement {
            backend: self.backend as usize,
            cause: self.cause,
        }
    }
}

/// The most backends a scheduler may have (the table stores backend indices in 16 bits;
/// stock allows 16 backends).
pub const MAX_BACKENDS: usize = u16::MAX as usize + 1;

/// Placements and split-input copies, keyed by tensor address.
///
/// Placements and copies live from one [`Table::clear`] (the scheduler's reset) to the
/// next. The address -> id map outlives them: llama.cpp rebuilds each graph in the same
/// memory, so the next graph's tensors mostly have the addresses (and hence the ids) of the
/// last one, and [`GraphIds::rebuild`] can skip the lookups. An id is only ever a slot for
/// whatever tensor has that address now; forgetting placements makes every slot empty.
#[derive(Default)]
pub struct Table {
    /// Tensor address -> dense id. Lookups dominate the scheduler's time, hence a map made
    /// for exactly this key.
    ids: PtrIndex,
    slots: Vec<Option<Slot>>,
    /// `(tensor id, backend)` -> where its copies (one per pipeline copy) start in
    /// `copy_store`, how many there are, and the node position at whose split they were
    /// last filled (`u32::MAX`: not known). One flat store, so that making copies
    /// allocates nothing once the store has grown.
    copies: FxHashMap<(usize, usize), (u32, u32, u32)>,
    copy_store: Vec<*mut ggml_tensor>,
    /// Bumped whenever the address -> id map is forgotten, so that ids remembered elsewhere
    /// ([`GraphIds`]) are known stale.
    epoch: u64,
    /// The most tensors (nodes + leafs) of one graph given ids since the map was last
    /// forgotten: bounds the map's growth when addresses keep changing.
    graph_tensors: usize,
}

/// An open-addressing map from non-NULL addresses to dense ids: linear probing over a
/// power-of-two array, multiplicative hashing of the address without its always-zero low
/// bits. Grows at half load; never shrinks (cleared per scheduler reset).
#[derive(Default)]
pub(crate) struct PtrIndex {
    /// `(key, value)`; key 0 marks an empty slot (NULL is never a key). One array, so a hit
    /// touches one cache line.
    slots: Vec<(usize, u32)>,
    len: usize,
    /// log2 of the capacity.
    bits: u32,
}

impl PtrIndex {
    /// A map with room for `entries` keys before it grows, its memory touched now.
    fn with_capacity(entries: usize) -> PtrIndex {
        let Some(capacity) = entries
            .max(1)
            .checked_mul(2)
            .and_then(usize::checked_next_power_of_two)
        else {
            cannot_reserve("id-map slots", entries, None)
        };
        let bits = capacity.trailing_zeros().max(10);
        let mut slots = zeroed_slots(1 << bits);
        prefault(&mut slots, (0, 0));
        PtrIndex {
            slots,
            len: 0,
            bits,
        }
    }

    #[inline]
    fn slot(&self, key: usize) -> usize {
        (key >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (usize::BITS - self.bits)
    }

    #[inline]
    fn get(&self, key: usize) -> Option<usize> {
        if self.len == 0 || key == 0 {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.slot(key);
        loop {
            let (k, v) = self.slots[i];
            if k == key {
                return Some(v as usize);
            }
            if k == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        self.bits = (self.bits + 1).max(10);
        self.slots = vec![(0, 0); 1 << self.bits];
        self.len = 0;
        for (k, v) in old {
            if k != 0 {
                self.get_or_insert(k, || v as usize);
            }
        }
    }

    /// The value of `key` (non-zero), inserting `next()` when absent; one probe sequence.
    #[inline]
    pub(crate) fn get_or_insert(&mut self, key: usize, next: impl FnOnce() -> usize) -> usize {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.slot(key);
        loop {
            let (k, v) = self.slots[i];
            if k == key {
                return v as usize;
            }
            if k == 0 {
                let v = next();
                self.slots[i] = (key, v as u32);
                self.len += 1;
                return v;
            }
            i = (i + 1) & mask;
        }
    }

    fn clear(&mut self) {
        if self.len > 0 {
            self.slots.fill((0, 0));
            self.len = 0;
        }
    }
}

/// The most bytes of one array that [`prefault`] touches. Real graphs use the first entries
/// of each array (a few thousand nodes), while `graph_size` may be a million or more
/// (llama.cpp sizes it from the model's tensor count): touching all of it made a scheduler
/// with `graph_size` 1,000,000 hold 203 MiB where stock's holds 25 MiB. The rest is reserved
/// address space that the OS maps when a graph that large really comes.
const PREFAULT_MAX_BYTES: usize = 1 << 20;

/// Writes one element per page of the first [`PREFAULT_MAX_BYTES`] of `v` (its spare
/// capacity included), so that those pages are mapped now rather than on first use. Fresh
/// pages cost a fault each (about a microsecond on a virtual machine), and a split that grew
/// the id map into fresh memory took twice stock's time (`llama-bench`'s first
/// `alloc_graph`); stock touches its hash set at creation too (its reset's memset).
pub(crate) fn prefault<T: Copy>(v: &mut Vec<T>, fill: T) {
    if std::mem::size_of::<T>() == 0 {
        return; // no memory behind it (and a capacity of usize::MAX)
    }
    let per_page = (4096 / std::mem::size_of::<T>()).max(1);
    let base = v.as_mut_ptr();
    let touched = v
        .capacity()
        .min(PREFAULT_MAX_BYTES / std::mem::size_of::<T>());
    for i in (0..touched).step_by(per_page) {
        // SAFETY: `i` is within the allocation, and `T: Copy` has no drop: overwriting a
        // live element with `fill` or writing spare capacity is sound. Volatile, so
        // that the writes are neither folded into a zeroing allocation nor dropped as dead.
        unsafe { std::ptr::write_volatile(base.add(i), fill) };
    }
}

/// The abort of a reservation the process cannot make: through `ggml_abort` (so the
/// application's abort callback hears of it, as it does of stock's failed allocations), not
/// Rust's own out-of-memory abort.
#[cold]
#[inline(never)]
fn cannot_reserve(what: &str, n: usize, bytes: Option<usize>) -> ! {
    let size = bytes.map_or("more than the address space".to_string(), |b| {
        format!("{b} bytes")
    });
    crate::ffi::fatal(
        c_name!(sched::ggml_backend_sched_new),
        &format!("cannot reserve room for {n} {what} ({size}): graph_size is too large"),
    )
}

/// An empty vector with room for `n` elements, or a named abort ([`cannot_reserve`]).
pub(crate) fn room_for<T>(n: usize, what: &str) -> Vec<T> {
    let mut v = Vec::new();
    if v.try_reserve_exact(n).is_err() {
        cannot_reserve(what, n, n.checked_mul(std::mem::size_of::<T>()));
    }
    v
}

/// `n` empty [`PtrIndex`] slots, zeroed by the allocator (whose pages the OS maps on first
/// touch, as `vec!` of zeros does), or a named abort ([`cannot_reserve`]).
fn zeroed_slots(n: usize) -> Vec<(usize, u32)> {
    let Ok(layout) = std::alloc::Layout::array::<(usize, u32)>(n) else {
        cannot_reserve("id-map slots", n, None)
    };
    if layout.size() == 0 {
        return Vec::new();
    }
    // SAFETY: the layout has a non-zero size (checked above).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut (usize, u32);
    if ptr.is_null() {
        cannot_reserve("id-map slots", n, Some(layout.size()));
    }
    // SAFETY: `ptr` is a fresh allocation made with the global allocator for exactly
    // `Layout::array::<(usize, u32)>(n)`, and all-zero bytes are a valid `(usize, u32)`, so
    // all `n` elements are initialized.
    unsafe { Vec::from_raw_parts(ptr, n, n) }
}

/// "No tensor" in [`GraphIds::srcs`].
pub const NO_ID: u32 = u32::MAX;

/// Source slots per node.
const MAX_SRC: usize = ggml_sys::GGML_MAX_SRC as usize;

/// The dense ids of one graph's tensors, looked up once per split so that the passes index
/// the table directly: per node, per leaf, and per node per source slot ([`NO_ID`] where
/// the slot is empty).
///
/// Kept by the scheduler from graph to graph: a node at the same position with the same
/// address and the same sources as in the last graph keeps its ids without a lookup (the
/// table's ids outlive resets), which is the common case of a rebuilt llama.cpp graph.
#[derive(Default)]
pub struct GraphIds {
    /// Id of `graph.nodes[i]`.
    pub nodes: Vec<usize>,
    /// Id of `graph.leafs[i]`.
    pub leafs: Vec<usize>,
    /// Ids of `graph.nodes[i].src[j]`, as they were when the ids were taken.
    pub srcs: Vec<[u32; MAX_SRC]>,
    /// Per node, one past its last non-NULL source slot: the passes scan no further.
    pub n_srcs: Vec<u8>,
    /// Id of `graph.nodes[i].view_src`, [`NO_ID`] when the node is not a view.
    pub view_srcs: Vec<u32>,
    /// Positions of the nodes that are not view ops (the nodes the passes place), in order.
    pub compute: Vec<u32>,
    /// The addresses the ids above were taken for: per node, the node, its sources and its
    /// view source.
    seen_nodes: Vec<SeenNode>,
    seen_leafs: Vec<*mut ggml_tensor>,
    /// The table epoch the ids belong to.
    epoch: u64,
}

/// A node's address, its sources' and its view source's, as [`GraphIds`] last took ids for.
type SeenNode = (
    *mut ggml_tensor,
    [*mut ggml_tensor; MAX_SRC],
    *mut ggml_tensor,
);

/// The abort for a NULL entry in a graph's node or leaf list (stock would crash on it).
#[cold]
#[inline(never)]
fn null_in_graph(what: &str, i: usize) -> ! {
    crate::ffi::fatal(
        c_name!(sched::ggml_backend_sched_split_graph),
        &format!("graph {what} {i} is NULL"),
    )
}

impl GraphIds {
    /// Room for graphs of up to `graph_size` nodes and leafs before anything grows, the
    /// memory touched now (see [`prefault`]).
    pub fn with_capacity(graph_size: usize) -> GraphIds {
        fn room<T: Copy>(n: usize, fill: T) -> Vec<T> {
            let mut v = room_for(n, "graph ids");
            prefault(&mut v, fill);
            v
        }
        let null = std::ptr::null_mut();
        GraphIds {
            nodes: room(graph_size, 0),
            leafs: room(graph_size, 0),
            srcs: room(graph_size, [NO_ID; MAX_SRC]),
            n_srcs: room(graph_size, 0),
            view_srcs: room(graph_size, NO_ID),
            compute: room(graph_size, 0),
            seen_nodes: room(graph_size, (null, [null; MAX_SRC], null)),
            seen_leafs: room(graph_size, null),
            epoch: 0,
        }
    }

    /// Gives every node, leaf and source of `graph` an id in `table`.
    ///
    /// # Safety
    /// `graph` must be a live graph of live tensors.
    pub unsafe fn new(table: &mut Table, graph: &ggml_sys::ggml_cgraph) -> GraphIds {
        let mut ids = GraphIds::default();
        // SAFETY: `graph` is a live graph of live tensors, as this function's caller
        // guarantees; `rebuild` asks no more.
        unsafe { ids.rebuild(table, graph) };
        ids
    }

    /// Takes the ids of `graph`'s nodes, leafs and sources, reusing those of the last graph
    /// where addresses are unchanged.
    ///
    /// # Safety
    /// `graph` must be a live graph of live tensors.
    pub unsafe fn rebuild(&mut self, table: &mut Table, graph: &ggml_sys::ggml_cgraph) {
        // SAFETY: `graph` is live with `n_nodes` node and `n_leafs` leaf pointers (this
        // function's caller guarantees it), and nothing here resizes the graph while the
        // slices are used.
        let nodes = unsafe { super::inspect::nodes(graph) };
        // SAFETY: as for `nodes`.
        let leafs = unsafe { super::inspect::leafs(graph) };
        table.graph_tensors = table.graph_tensors.max(nodes.len() + leafs.len());
        if self.epoch != table.epoch {
            self.seen_nodes.clear();
            self.seen_leafs.clear();
            self.epoch = table.epoch;
        }

        self.leafs.resize(leafs.len(), 0);
        self.seen_leafs.resize(leafs.len(), std::ptr::null_mut());
        for (i, &l) in leafs.iter().enumerate() {
            if l.is_null() {
                null_in_graph("leaf", i);
            }
            if self.seen_leafs[i] != l {
                self.leafs[i] = table.id(l);
                self.seen_leafs[i] = l;
            }
        }

        let n = nodes.len();
        self.nodes.resize(n, 0);
        self.srcs.resize(n, [NO_ID; MAX_SRC]);
        self.n_srcs.resize(n, 0);
        self.view_srcs.resize(n, NO_ID);
        let null = std::ptr::null_mut();
        self.seen_nodes.resize(n, (null, [null; MAX_SRC], null));
        self.compute.clear();
        for (i, &node) in nodes.iter().enumerate() {
            if node.is_null() {
                null_in_graph("node", i);
            }
            // SAFETY: non-NULL (checked above; `null_in_graph` does not return) and a node
            // of the live graph, hence a live tensor by this function's contract; only read,
            // and only for these three fields.
            let t = unsafe { &*node };
            if !meta::is_view_op(t.op) {
                self.compute.push(i as u32);
            }
            let src = t.src;
            let view_src = t.view_src;
            let seen = &mut self.seen_nodes[i];
            if seen.0 == node && seen.1 == src && seen.2 == view_src {
                continue;
            }
            *seen = (node, src, view_src);
            self.nodes[i] = table.id(node);
            self.view_srcs[i] = if view_src.is_null() {
                NO_ID
            } else {
                table.id(view_src) as u32
            };
            let mut row = [NO_ID; MAX_SRC];
            let mut count = 0;
            for (j, &s) in src.iter().enumerate() {
                if !s.is_null() {
                    row[j] = table.id(s) as u32;
                    count = j + 1;
                }
            }
            self.srcs[i] = row;
            self.n_srcs[i] = count as u8;
        }
    }
}

/// How many addresses the table keeps ids for across resets, when the largest graph had
/// `graph_tensors` nodes and leafs: two graphs' worth (llama.cpp builds its measure graphs
/// and its real graphs in two different buffers) and some slack.
fn kept_ids(graph_tensors: usize) -> usize {
    graph_tensors.saturating_mul(2).saturating_add(4096)
}

/// Entries of the per-id lists (the placements here, the plan key's positions) made at
/// `ggml_backend_sched_new` for a `graph_size` hint: as many ids as the table keeps for graphs
/// of that many tensors ([`kept_ids`]). llama.cpp's measure graph and its real graph, each
/// below `graph_size`, together hold more than `graph_size + 1024` (SmolLM2: a hint of 2,176,
/// 1,335 tensors a graph, more than 3,200 ids by the second `alloc_graph` of
/// `llama-batched-bench`), and growing these lists there copied them into fresh pages: 8 of
/// the 9 page faults of that call. 4 bytes an entry: 33 KiB each for that hint. An estimate:
/// the hint bounds a graph's nodes, not its nodes and leafs, so a graph near the hint with
/// many leafs still grows these lists (time, not correctness).
pub(crate) fn id_list_capacity(graph_size: usize) -> usize {
    kept_ids(graph_size)
}

impl Table {
    /// A table with room for [`id_list_capacity`] placements and `graph_size + 1024` ids in
    /// its map before anything grows, its memory touched now (stock sizes and touches its hash
    /// set from the same `graph_size` at `ggml_backend_sched_new`). The map takes two 16-byte
    /// slots or more per id, so it is not sized for every id the table keeps: more grows the
    /// map, once (for SmolLM2's hint of 2,176: past 4,096 ids).
    pub fn with_capacity(graph_size: usize) -> Table {
        let Some(entries) = graph_size.checked_add(1024) else {
            cannot_reserve("placements", graph_size, None)
        };
        let mut slots = room_for(id_list_capacity(graph_size), "placements");
        prefault(&mut slots, None);
        Table {
            ids: PtrIndex::with_capacity(entries),
            slots,
            ..Default::default()
        }
    }

    /// The placement of the tensor with id `id`.
    #[inline]
    pub fn at(&self, id: usize) -> Option<Placement> {
        self.slots[id].map(Slot::placement)
    }

    /// The backend of the tensor with id `id`.
    #[inline]
    pub fn backend_at(&self, id: usize) -> Option<usize> {
        self.slots[id].map(|p| p.backend as usize)
    }

    /// Places the tensor with id `id`.
    #[inline]
    pub fn set_at(&mut self, id: usize, backend: usize, cause: Cause) {
        self.slots[id] = Some(Slot::new(backend, cause));
    }

    /// The node position of the split that last filled the copies of the tensor with id
    /// `id` for `backend` (the split pass notes it, [`Table::set_copy_fill`]); `Some(u32::MAX)`
    /// when not known, `None` when there are no such copies.
    pub fn copy_fill(&self, id: usize, backend: usize) -> Option<u32> {
        self.copies.get(&(id, backend)).map(|e| e.2)
    }

    /// Notes that the copies of the tensor with id `id` for `backend` are filled at the
    /// start of the split at node position `pos` (nothing when there are none).
    pub fn set_copy_fill(&mut self, id: usize, backend: usize, pos: usize) {
        if let Some(e) = self.copies.get_mut(&(id, backend)) {
            e.2 = u32::try_from(pos).unwrap_or(u32::MAX);
        }
    }

    /// Copy number `copy` of the tensor with id `id` for `backend`.
    pub fn copy_at(&self, id: usize, backend: usize, copy: usize) -> Option<*mut ggml_tensor> {
        let &(start, len, _) = self.copies.get(&(id, backend))?;
        (copy < len as usize).then(|| self.copy_store[start as usize + copy])
    }

    /// Every copy of the tensor with id `id` for `backend`, copy 0 first.
    pub fn copies_at(&self, id: usize, backend: usize) -> Option<&[*mut ggml_tensor]> {
        let &(start, len, _) = self.copies.get(&(id, backend))?;
        Some(&self.copy_store[start as usize..(start + len) as usize])
    }

    /// [`Table::copies_at`], to be rewritten in place (a replay lays the graph inputs' copies
    /// out around another pipeline copy).
    pub fn copies_at_mut(&mut self, id: usize, backend: usize) -> Option<&mut [*mut ggml_tensor]> {
        let &(start, len, _) = self.copies.get(&(id, backend))?;
        Some(&mut self.copy_store[start as usize..(start + len) as usize])
    }

    /// Forgets every placement and copy (stock's reset of its hash set). Ids are kept (see
    /// the type's documentation) unless the map holds more than [`kept_ids`] addresses,
    /// which happens when graphs keep landing at new addresses.
    pub fn clear(&mut self) {
        self.slots.fill(None);
        self.copies.clear();
        self.copy_store.clear();
        if self.ids.len > kept_ids(self.graph_tensors) {
            self.forget_ids();
        }
    }

    /// Forgets every placement, copy and id.
    pub fn forget_ids(&mut self) {
        self.ids.clear();
        self.slots.clear();
        self.copies.clear();
        self.copy_store.clear();
        self.graph_tensors = 0;
        self.epoch += 1;
    }

    /// The dense id of `t`, giving it one when it has none. Panics on NULL (a caller bug).
    #[inline]
    pub fn id(&mut self, t: *const ggml_tensor) -> usize {
        assert!(!t.is_null(), "the placement table has no entry for NULL");
        let next = self.slots.len();
        let id = self.ids.get_or_insert(t as usize, || next);
        if id == next {
            self.slots.push(None);
        }
        id
    }

    /// The placement of `t`, if it has one. NULL has none.
    #[inline]
    pub fn get(&self, t: *const ggml_tensor) -> Option<Placement> {
        self.ids
            .get(t as usize)
            .and_then(|id| self.slots[id])
            .map(Slot::placement)
    }

    /// The backend of `t`, if it has one.
    pub fn backend(&self, t: *const ggml_tensor) -> Option<usize> {
        self.get(t).map(|p| p.backend)
    }

    /// The backend of `t` as stock's `int` (-1 when none).
    pub fn backend_i32(&self, t: *const ggml_tensor) -> i32 {
        self.backend(t).map_or(-1, |b| b as i32)
    }

    /// Places `t` on `backend` for `cause`, replacing any placement it had.
    pub fn set(&mut self, t: *const ggml_tensor, backend: usize, cause: Cause) {
        let id = self.id(t);
        self.slots[id] = Some(Slot::new(backend, cause));
    }

    /// Places `t` when `p` is `Some`; leaves it untouched otherwise.
    pub fn set_opt(&mut self, t: *const ggml_tensor, p: Option<(usize, Cause)>) {
        if let Some((b, c)) = p {
            self.set(t, b, c);
        }
    }

    /// The copy number `copy` of `t` made for `backend`, if any.
    pub fn copy(
        &self,
        t: *const ggml_tensor,
        backend: usize,
        copy: usize,
    ) -> Option<*mut ggml_tensor> {
        let id = self.ids.get(t as usize)?;
        self.copy_at(id, backend, copy)
    }

    /// Whether copies of `t` exist for `backend`.
    pub fn has_copies(&self, t: *const ggml_tensor, backend: usize) -> bool {
        self.copy(t, backend, 0).is_some()
    }

    /// Records the copies of `t` for `backend` (one per pipeline copy).
    pub fn set_copies(
        &mut self,
        t: *const ggml_tensor,
        backend: usize,
        copies: impl IntoIterator<Item = *mut ggml_tensor>,
    ) {
        let id = self.id(t);
        self.set_copies_at(id, backend, copies);
    }

    /// [`Table::set_copies`] for the tensor with id `id`.
    pub fn set_copies_at(
        &mut self,
        id: usize,
        backend: usize,
        copies: impl IntoIterator<Item = *mut ggml_tensor>,
    ) {
        let start = self.copy_store.len();
        self.copy_store.extend(copies);
        let len = self.copy_store.len() - start;
        self.copies
            .insert((id, backend), (start as u32, len as u32, u32::MAX));
    }

    /// Number of tensors the table knows (placed or not).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the table knows no tensor.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_are_stored_in_four_bytes_and_keep_wide_backend_indices() {
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 4);
        let a = 0x1000 as *const ggml_tensor;
        let mut t = Table::default();
        t.set(a, MAX_BACKENDS - 1, Cause::BestInputs);
        assert_eq!(
            t.get(a),
            Some(Placement {
                backend: 65535,
                cause: Cause::BestInputs
            })
        );
        let id = t.id(a);
        t.set_at(id, 300, Cause::Weight);
        assert_eq!(t.backend_at(id), Some(300));
        assert_eq!(t.backend_i32(a), 300);
    }

    #[test]
    fn set_get_clear() {
        let a = 0x1000 as *const ggml_tensor;
        let b = 0x2000 as *const ggml_tensor;
        let mut t = Table::default();
        assert_eq!(t.backend(a), None);
        assert_eq!(t.backend_i32(std::ptr::null()), -1);
        t.set(a, 2, Cause::Weight);
        assert_eq!(
            t.get(a),
            Some(Placement {
                backend: 2,
                cause: Cause::Weight
            })
        );
        assert_eq!(t.id(a), 0);
        assert_eq!(t.id(b), 1);
        assert_eq!(t.backend(b), None);
        t.set(a, 0, Cause::Upgrade);
        assert_eq!(t.backend_i32(a), 0);
        t.set_copies(a, 1, vec![0x3000 as *mut _, 0x4000 as *mut _]);
        assert_eq!(t.copy(a, 1, 1), Some(0x4000 as *mut _));
        assert_eq!(t.copy(a, 0, 0), None);
        assert!(t.has_copies(a, 1));
        // Where the copies were last filled: unknown until the split pass notes it, per
        // backend; nothing for a backend without copies.
        let ida = t.id(a);
        assert_eq!(t.copy_fill(ida, 1), Some(u32::MAX));
        t.set_copy_fill(ida, 1, 7);
        t.set_copy_fill(ida, 0, 3);
        assert_eq!(t.copy_fill(ida, 1), Some(7));
        assert_eq!(t.copy_fill(ida, 0), None);
        assert_eq!(t.len(), 2);
        t.clear();
        // Placements and copies are gone; the ids stay (the next graph reuses them).
        assert_eq!(t.backend(a), None);
        assert_eq!(t.backend(b), None);
        assert_eq!(t.copy(a, 1, 0), None);
        assert_eq!(t.copy_fill(ida, 1), None);
        assert_eq!(t.id(b), 1);
        t.forget_ids();
        assert!(t.is_empty());
        assert_eq!(t.id(b), 0);
    }

    #[test]
    fn index_grows_and_clears() {
        let mut t = Table::default();
        let ptrs: Vec<*const ggml_tensor> = (1..5000usize)
            .map(|i| (i * 336) as *const ggml_tensor)
            .collect();
        for (i, &p) in ptrs.iter().enumerate() {
            t.set(p, i % 3, Cause::Weight);
        }
        for (i, &p) in ptrs.iter().enumerate() {
            assert_eq!(t.backend(p), Some(i % 3));
            assert_eq!(t.id(p), i);
        }
        assert_eq!(t.backend(std::ptr::null()), None);
        assert_eq!(t.backend(0xdead_0000usize as *const ggml_tensor), None);
        // As if one graph held them all, so that the ids are kept.
        t.graph_tensors = ptrs.len();
        t.clear();
        assert!(ptrs.iter().all(|&p| t.backend(p).is_none()));
        t.set(ptrs[10], 1, Cause::Input);
        assert_eq!(t.id(ptrs[10]), 10);
        assert_eq!(t.backend(ptrs[10]), Some(1));
        assert_eq!(t.backend(ptrs[11]), None);
    }

    #[test]
    fn ids_are_forgotten_when_addresses_keep_changing() {
        // A graph of 10 tensors, then graphs at ever new addresses: the map is bounded by
        // 2x the largest graph plus 4096 addresses.
        let mut t = Table {
            graph_tensors: 10,
            ..Default::default()
        };
        let mut forgotten = 0;
        for round in 0..200usize {
            let epoch = t.epoch;
            for i in 0..100usize {
                t.set(
                    ((round * 100 + i + 1) * 64) as *const ggml_tensor,
                    0,
                    Cause::Weight,
                );
            }
            t.clear();
            if t.epoch != epoch {
                forgotten += 1;
                assert!(t.is_empty());
            }
            assert!(t.ids.len <= kept_ids(10));
        }
        assert_eq!(forgotten, 4, "20,000 addresses, forgotten past 4,116");
    }

    /// Builds a graph of `n` ADD nodes over two leafs with fake addresses; `nodes[i]` reads
    /// `leafs[0]` and the node before it. Boxes keep addresses stable while `store` grows.
    #[allow(clippy::vec_box)]
    fn chain(
        store: &mut Vec<Box<ggml_tensor>>,
        n: usize,
    ) -> (Vec<*mut ggml_tensor>, Vec<*mut ggml_tensor>) {
        let mk = |store: &mut Vec<Box<ggml_tensor>>| {
            store.push(Box::default());
            &mut **store.last_mut().unwrap() as *mut ggml_tensor
        };
        let leafs = vec![mk(store), mk(store)];
        let mut nodes: Vec<*mut ggml_tensor> = Vec::new();
        for i in 0..n {
            let t = mk(store);
            // SAFETY: t was just made and is owned by `store`.
            unsafe {
                (*t).src[0] = leafs[0];
                (*t).src[1] = if i == 0 { leafs[1] } else { nodes[i - 1] };
            }
            nodes.push(t);
        }
        (nodes, leafs)
    }

    #[test]
    fn graph_ids_follow_changes() {
        let mut store = Vec::new();
        let (mut nodes, mut leafs) = chain(&mut store, 5);
        let g = crate::sched::mock::graph(&mut nodes, &mut leafs);
        let mut t = Table::default();
        let mut ix = GraphIds::default();
        let expect = |t: &mut Table, ix: &GraphIds, nodes: &[*mut ggml_tensor]| {
            for (i, &n) in nodes.iter().enumerate() {
                assert_eq!(ix.nodes[i], t.id(n));
                // SAFETY: the nodes live in `store`.
                let src = unsafe { (*n).src };
                let last = src.iter().rposition(|s| !s.is_null()).map_or(0, |j| j + 1);
                assert_eq!(ix.n_srcs[i] as usize, last);
                for (j, &s) in src.iter().enumerate() {
                    let want = if s.is_null() { NO_ID } else { t.id(s) as u32 };
                    assert_eq!(ix.srcs[i][j], want, "node {i} slot {j}");
                }
            }
        };
        // SAFETY: the graph's tensors live in `store`, and `nodes`, `leafs` (which `g`
        // points into) outlive every use of `g`; likewise for each `rebuild` below.
        unsafe { ix.rebuild(&mut t, &g) };
        expect(&mut t, &ix, &nodes);
        let first = ix.nodes.clone();
        // Same graph after a reset: same ids.
        t.clear();
        // SAFETY: as above.
        unsafe { ix.rebuild(&mut t, &g) };
        assert_eq!(ix.nodes, first);
        expect(&mut t, &ix, &nodes);
        // A source changes (as the split pass does when it reads a copy): new ids for it.
        let other: *mut ggml_tensor = &mut *store[0];
        // SAFETY: `nodes[3]` is a box in `store`, alive, and no reference to it is held.
        unsafe { (*nodes[3]).src[1] = other };
        // SAFETY: as the line above.
        unsafe { (*nodes[3]).src[4] = nodes[0] };
        // SAFETY: as the first `rebuild`.
        unsafe { ix.rebuild(&mut t, &g) };
        expect(&mut t, &ix, &nodes);
        // A node moves: the graph's order is followed.
        nodes.swap(1, 2);
        // SAFETY: as the first `rebuild` (the swap moves pointers inside `nodes`, whose
        // buffer `g` still points at).
        unsafe { ix.rebuild(&mut t, &g) };
        expect(&mut t, &ix, &nodes);
        // The ids are forgotten: all taken again.
        t.forget_ids();
        // SAFETY: as the first `rebuild`.
        unsafe { ix.rebuild(&mut t, &g) };
        expect(&mut t, &ix, &nodes);
        assert_eq!(t.len(), 7);
    }

    /// One graph of a [`memo_matches_fresh_lookups`] round: per node, a tensor of the pool,
    /// whether it is a view op, its sources (pool indices, `None` for an empty slot) and its
    /// view source.
    type Round = (
        Vec<(usize, bool, Vec<Option<usize>>, Option<usize>)>,
        Vec<usize>,
        u8,
    );

    fn round() -> impl proptest::strategy::Strategy<Value = Round> {
        use proptest::prelude::*;
        let node = (
            0usize..24,
            any::<bool>(),
            proptest::collection::vec(proptest::option::of(0usize..32), 0..MAX_SRC),
            proptest::option::of(0usize..32),
        );
        (
            proptest::collection::vec(node, 0..20),
            proptest::collection::vec(24usize..32, 0..6),
            0u8..4,
        )
    }

    proptest::proptest! {
        /// Over random sequences of graphs drawn from one pool of tensors (so addresses
        /// recur, move between positions, change sources and view-ness, graphs grow and
        /// shrink), with resets and forgotten ids in between, every id, source id, view
        /// source id, source count and view list that `rebuild` gives equals a fresh lookup
        /// in the table.
        #[test]
        fn memo_matches_fresh_lookups(rounds in proptest::collection::vec(round(), 1..12)) {
            #[allow(clippy::vec_box)] // boxes keep the pool's addresses stable
            let mut pool: Vec<Box<ggml_tensor>> = (0..32).map(|_| Box::default()).collect();
            let ptrs: Vec<*mut ggml_tensor> = pool.iter_mut().map(|b| &mut **b as *mut _).collect();
            let mut t = Table::default();
            let mut ix = GraphIds::default();
            for (spec, leaf_idx, between) in rounds {
                match between {
                    0 => t.clear(),
                    1 => t.forget_ids(),
                    _ => {}
                }
                // A graph's nodes are distinct tensors: keep the first use of each.
                let mut seen = std::collections::HashSet::new();
                let mut nodes = Vec::new();
                for (n, view, srcs, view_src) in &spec {
                    if !seen.insert(*n) {
                        continue;
                    }
                    let p = ptrs[*n];
                    // SAFETY: `p` points into `pool`, alive for the whole test.
                    unsafe {
                        (*p).op = if *view { ggml_sys::GGML_OP_VIEW } else { ggml_sys::GGML_OP_ADD };
                        (*p).src = [std::ptr::null_mut(); MAX_SRC];
                        (*p).view_src = view_src.map_or(std::ptr::null_mut(), |v| ptrs[v]);
                        for (j, s) in srcs.iter().enumerate() {
                            if let Some(s) = s {
                                (*p).src[j] = ptrs[*s];
                            }
                        }
                    }
                    nodes.push(p);
                }
                let mut leafs: Vec<*mut ggml_tensor> = leaf_idx.iter().map(|&l| ptrs[l]).collect();
                let g = crate::sched::mock::graph(&mut nodes, &mut leafs);
                // SAFETY: every tensor of the graph lives in `pool`.
                unsafe { ix.rebuild(&mut t, &g) };
                for (i, &n) in nodes.iter().enumerate() {
                    proptest::prop_assert_eq!(ix.nodes[i], t.id(n));
                    // SAFETY: as above.
                    let src = unsafe { (*n).src };
                    let last = src.iter().rposition(|s| !s.is_null()).map_or(0, |j| j + 1);
                    proptest::prop_assert_eq!(ix.n_srcs[i] as usize, last);
                    for (j, &sp) in src.iter().enumerate() {
                        let want = if sp.is_null() { NO_ID } else { t.id(sp) as u32 };
                        proptest::prop_assert_eq!(ix.srcs[i][j], want);
                    }
                    // SAFETY: as above.
                    let v = unsafe { (*n).view_src };
                    let want = if v.is_null() { NO_ID } else { t.id(v) as u32 };
                    proptest::prop_assert_eq!(ix.view_srcs[i], want);
                }
                for (i, &l) in leafs.iter().enumerate() {
                    proptest::prop_assert_eq!(ix.leafs[i], t.id(l));
                }
                let compute: Vec<u32> = (0..nodes.len() as u32)
                    // SAFETY: as above.
                    .filter(|&i| unsafe { (*nodes[i as usize]).op } != ggml_sys::GGML_OP_VIEW)
                    .collect();
                proptest::prop_assert_eq!(&ix.compute, &compute);
            }
        }
    }
}
