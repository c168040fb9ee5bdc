//! The planning walk of the graph allocator (stock's `ggml_gallocr_alloc_graph_impl`): one
//! pass over a graph in execution order that gives every tensor the graph allocator owns an
//! address in its buffer type's virtual buffer, frees each one after its last reader, and lets
//! an in-place-able op take over its parent's memory. It only plans: no tensor is changed.
//!
//! Every decision and its order are stock's, because the `stock` layout reproduces stock's
//! offsets byte for byte and the other layouts start from the same lifetimes. Besides the
//! addresses, the walk records each block it hands out as a [`Slot`] with its lifetime in walk
//! steps, for the planners that re-pack them ([`super::pack`]).

use ggml_sys::{ggml_backend_buffer_type_t, ggml_cgraph, ggml_tensor};
use rustc_hash::FxHashMap;

use super::blocks::{align_up, Addr, Blocks};
use crate::buffer_type;
use crate::tensor::meta::same_layout;

const OUTPUT: i32 = ggml_sys::GGML_TENSOR_FLAG_OUTPUT as i32;
const INPUT: i32 = ggml_sys::GGML_TENSOR_FLAG_INPUT as i32;

/// What the walk knows of one tensor (stock's `struct hash_node`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Node {
    /// Readers (as a source) not yet run.
    pub n_children: i32,
    /// Views of it not yet done with.
    pub n_views: i32,
    /// Index into the graph allocator's buffer types.
    pub buffer_id: i32,
    /// Where its memory is.
    pub addr: Addr,
    /// Whether the graph allocator gave it memory that is still its own.
    pub allocated: bool,
    /// The [`Slot`] its memory belongs to, as index + 1 (0: none; several tensors share one
    /// through in-place reuse).
    pub slot: u32,
    /// Buffer ids (bit masks) of the nodes that read this memory, write it or write through a
    /// view of it; counted only with [`Planner::set_access`].
    pub accessors: u64,
}

/// One block handed out by a buffer type's [`Blocks`]: its size after alignment, its
/// allocator, and the walk steps during which it is in use, `[start, end)` (`end` is
/// `u32::MAX` for a block never freed, such as an output's). A block that an in-place op took
/// over lives on in that op's tensor, and so does its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Index of the [`Blocks`] (one per distinct buffer type).
    pub talloc: u32,
    /// Bytes, aligned.
    pub size: usize,
    /// Step at which it was handed out.
    pub start: u32,
    /// Step after its last use.
    pub end: u32,
    /// Where the greedy walk put it.
    pub addr: Addr,
}

/// The walk's state: the buffer types and their allocators, and the per-tensor table.
/// Owned by the graph allocator and reused from plan to plan.
pub struct Planner {
    /// Buffer type of each buffer id.
    pub bufts: Vec<ggml_backend_buffer_type_t>,
    /// Allocator index of each buffer id (buffer ids of the same buffer type share one).
    pub talloc_of: Vec<usize>,
    /// One allocator per distinct buffer type.
    pub blocks: Vec<Blocks>,
    /// Index into `nodes` of each tensor the walk has seen, keyed by its address.
    pub hash: FxHashMap<*mut ggml_tensor, u32>,
    /// The per-tensor table.
    pub nodes: Vec<Node>,
    /// Every block handed out in the last walk, in order.
    pub slots: Vec<Slot>,
    /// Scratch of the walk: the table entry of every node's non-NULL sources, in order.
    edges: Vec<u32>,
    /// Every in-place reuse of the last walk: (tensor, the source whose memory it took). The
    /// reuse holds only while the two keep one layout, which a later graph of the same
    /// structure may not ([`crate::alloc::gallocr`] checks it before reusing the plan).
    pub reuses: Vec<(*mut ggml_tensor, *mut ggml_tensor)>,
    /// Whether the last walk gave some tensor memory twice: a graph ggml's builder never makes
    /// (a node listed twice, or a view listed before its source). The plan keeps the tensor's
    /// last block, whose lifetime is only the second one, so the packing could place another
    /// block over the first; such a plan keeps the walk's own offsets, as stock's would be.
    pub placed_twice: bool,
    /// Which buffers each buffer id's backend can use, as bit masks over buffer ids (bit `x`
    /// of entry `b`: buffer id `b`'s backend can use buffer id `x`'s type), when the
    /// scheduler asks that in-place reuse never move memory away from a backend that uses it
    /// ([`Planner::set_access`]); `None`: stock's reuse.
    access: Option<Vec<u64>>,
    step: u32,
}

/// Borrows a tensor of the graph being planned.
///
/// # Safety
/// `t` must point to a live tensor that nothing mutates while the borrow is used.
#[inline(always)]
unsafe fn tensor<'a>(t: *mut ggml_tensor) -> &'a ggml_tensor {
    // SAFETY: the caller's contract.
    unsafe { &*t }
}

/// Whether `op` may write its result over a source of the same layout (stock
/// `ggml_op_can_inplace`; backends must not use restrict pointers for these).
pub fn op_can_inplace(op: ggml_sys::ggml_op) -> bool {
    use ggml_sys::*;
    matches!(
        op,
        GGML_OP_FILL
            | GGML_OP_SCALE
            | GGML_OP_DIAG_MASK_ZERO
            | GGML_OP_DIAG_MASK_INF
            | GGML_OP_ADD
            | GGML_OP_ADD_ID
            | GGML_OP_ADD1
            | GGML_OP_SUB
            | GGML_OP_MUL
            | GGML_OP_DIV
            | GGML_OP_SQR
            | GGML_OP_SQRT
            | GGML_OP_LOG
            | GGML_OP_UNARY
            | GGML_OP_ROPE
            | GGML_OP_ROPE_BACK
            | GGML_OP_SILU_BACK
            | GGML_OP_RMS_NORM
            | GGML_OP_RMS_NORM_BACK
            | GGML_OP_CLAMP
            | GGML_OP_SOFT_MAX
            | GGML_OP_SOFT_MAX_BACK
    )
}

/// Which entry of the caller's buffer-id arrays gave an id: `node_buffer_ids[i]` or
/// `leaf_buffer_ids[i]` (a graph input read by node `i` is placed with node `i`'s id, as in
/// stock).
#[derive(Clone, Copy, Debug)]
pub enum IdFrom {
    Leaf(usize),
    Node(usize),
}

/// Aborts, naming the array entry and the tensor, for a buffer id past the allocator's
/// `n_bufts` buffer types. Stock indexes its buffer-type array with it unchecked.
#[cold]
#[inline(never)]
fn bad_buffer_id(id: i32, from: IdFrom, n_bufts: usize, t: &ggml_tensor) -> ! {
    let (array, i) = match from {
        IdFrom::Leaf(i) => ("leaf_buffer_ids", i),
        IdFrom::Node(i) => ("node_buffer_ids", i),
    };
    crate::ffi::fatal(
        "ggml_gallocr_reserve_n",
        &format!(
            "{array}[{i}] is {id}, for tensor '{}'; this allocator's buffer ids are 0 to {} \
             (one per buffer type given to ggml_gallocr_new_n)",
            crate::tensor::meta::name(t),
            n_bufts as i64 - 1
        ),
    );
}

impl Planner {
    /// A planner for `bufts` (stock `ggml_gallocr_new_n`): buffer ids of the same buffer type
    /// share one allocator, made with the type's alignment and maximum size.
    ///
    /// # Safety
    /// Every buffer type must be live for the planner's lifetime.
    pub unsafe fn new(bufts: &[ggml_backend_buffer_type_t], func: &str) -> Self {
        let mut talloc_of = Vec::with_capacity(bufts.len());
        let mut blocks = Vec::new();
        for (i, &b) in bufts.iter().enumerate() {
            if let Some(j) = bufts[..i].iter().position(|&o| o == b) {
                talloc_of.push(talloc_of[j]);
                continue;
            }
            // SAFETY: live by the caller's contract (`buft_ref` aborts on NULL).
            let buft = unsafe { buffer_type::buft_ref(b, func) };
            blocks.push(Blocks::new(
                buffer_type::alignment(buft),
                buffer_type::max_size(buft),
            ));
            talloc_of.push(blocks.len() - 1);
        }
        Planner {
            bufts: bufts.to_vec(),
            talloc_of,
            blocks,
            hash: FxHashMap::default(),
            nodes: Vec::new(),
            slots: Vec::new(),
            edges: Vec::new(),
            reuses: Vec::new(),
            placed_twice: false,
            access: None,
            step: 0,
        }
    }

    /// Makes in-place reuse keep memory where every backend that uses it can use it: a tensor
    /// takes over a source's memory in another buffer only when the backend of each node that
    /// reads it, writes it or writes through a view of it can use that buffer's type. Stock's
    /// ggml-alloc lets a node take a parent's memory in another backend's buffer whoever reads
    /// the node later, so a reader on a third backend that cannot use that buffer type reads
    /// memory it cannot reach (`docs/sched.md`, "reads of memory that ggml-alloc moved").
    ///
    /// `access[b]`: bit `x` set when buffer id `b`'s backend can use buffer id `x`'s buffer
    /// type (a node of buffer id `x` itself is not asked about `x`). `None`, or more than 64
    /// buffer ids, turns it off: with more than 64 backends reuse is stock's.
    pub fn set_access(&mut self, access: Option<Vec<u64>>) {
        self.access = access.filter(|a| a.len() == self.bufts.len() && a.len() <= 64);
    }

    /// Bytes `t` needs in a buffer of buffer id `id`'s type.
    #[inline]
    pub fn alloc_size(&self, id: i32, t: &ggml_tensor) -> usize {
        // SAFETY: the planner's buffer types are live (`Planner::new`'s contract); `id` is one
        // of its buffer ids (stock indexes its array the same way, unchecked).
        buffer_type::alloc_size(unsafe { &*self.bufts[id as usize] }, t)
    }

    /// The index of `t`'s table entry, made zeroed on first use (stock
    /// `ggml_gallocr_hash_get`): one lookup, for the callers that touch the entry often.
    #[inline]
    pub fn index(&mut self, t: *mut ggml_tensor) -> usize {
        let nodes = &mut self.nodes;
        *self.hash.entry(t).or_insert_with(|| {
            nodes.push(Node::default());
            (nodes.len() - 1) as u32
        }) as usize
    }

    /// The table entry of `t`, made zeroed on first use.
    #[inline]
    pub fn node(&mut self, t: *mut ggml_tensor) -> &mut Node {
        let i = self.index(t);
        &mut self.nodes[i]
    }

    /// Whether the graph allocator gave `t` memory that is still its own.
    fn is_own(&mut self, t: *mut ggml_tensor) -> bool {
        self.node(t).allocated
    }

    /// Hands out `size` bytes of allocator `talloc` as a new slot; aborts as stock does when
    /// no chunk is left.
    fn take(&mut self, talloc: usize, size: usize) -> (Addr, u32) {
        let blocks = &mut self.blocks[talloc];
        let aligned = align_up(size, blocks.alignment());
        let addr = match blocks.alloc(size) {
            Ok(a) => a,
            Err(e) => {
                crate::ffi::log::error(&format!(
                    "ggml_dyn_tallocr_alloc: not enough space in the buffer to allocate {} bytes, \
                     largest block available {} bytes\n",
                    e.size, e.max_avail
                ));
                crate::ffi::fatal(
                    "ggml_gallocr_alloc_graph",
                    "graph allocation: failed to reserve memory",
                );
            }
        };
        self.slots.push(Slot {
            talloc: talloc as u32,
            size: aligned,
            start: self.step,
            end: u32::MAX,
            addr,
        });
        (addr, self.slots.len() as u32)
    }

    /// Gives the memory of `node` back unless it is an output (stock `ggml_gallocr_free_node`).
    ///
    /// # Safety
    /// `t` must be a live tensor.
    unsafe fn free_node(&mut self, t: *mut ggml_tensor) {
        // SAFETY: the caller's contract.
        let r = unsafe { tensor(t) };
        if r.flags & OUTPUT != 0 {
            return;
        }
        let n = *self.node(t);
        let size = self.alloc_size(n.buffer_id, r);
        let talloc = self.talloc_of[n.buffer_id as usize];
        self.blocks[talloc].free(n.addr, size);
        if let Some(s) = (n.slot as usize).checked_sub(1) {
            self.slots[s].end = self.step;
        }
        self.node(t).allocated = false;
    }

    /// When `node` took over `parent`'s memory and is smaller, gives the tail back (stock
    /// `ggml_gallocr_free_extra_space`).
    ///
    /// # Safety
    /// Both must be live tensors with table entries.
    unsafe fn free_extra_space(&mut self, node: *mut ggml_tensor, parent: *mut ggml_tensor) {
        let (n, p) = (*self.node(node), *self.node(parent));
        // SAFETY: the caller's contract.
        let (rn, rp) = unsafe { (tensor(node), tensor(parent)) };
        let parent_size = self.alloc_size(p.buffer_id, rp);
        let node_size = self.alloc_size(n.buffer_id, rn);
        crate::ggml_assert!(
            "ggml_gallocr_alloc_graph",
            parent_size >= node_size,
            "GGML_ASSERT(parent_size >= node_size) failed"
        );
        let talloc = self.talloc_of[p.buffer_id as usize];
        let align = self.blocks[talloc].alignment();
        let (parent_size, node_size) = (align_up(parent_size, align), align_up(node_size, align));
        if parent_size > node_size {
            let at = Addr {
                chunk: p.addr.chunk,
                offset: p.addr.offset + node_size,
            };
            self.blocks[talloc].free(at, parent_size - node_size);
        }
    }

    /// Gives `t` memory on buffer id `buffer_id`, reusing a parent's when its op can run in
    /// place (stock `ggml_gallocr_allocate_node`). Tensors with memory, views and tensors
    /// already planned are left as they are.
    ///
    /// # Safety
    /// `t`, its sources and their view sources must be live tensors.
    unsafe fn allocate(&mut self, t: *mut ggml_tensor, buffer_id: i32, from: IdFrom) {
        let i = self.index(t);
        // SAFETY: forwarded.
        unsafe { self.allocate_at(i, t, buffer_id, from) }
    }

    /// [`Planner::allocate`] for the tensor of table entry `i`.
    ///
    /// # Safety
    /// As [`Planner::allocate`]; `i` is `t`'s entry.
    unsafe fn allocate_at(&mut self, i: usize, t: *mut ggml_tensor, buffer_id: i32, from: IdFrom) {
        crate::ggml_assert!(
            "ggml_gallocr_alloc_graph",
            buffer_id >= 0,
            "GGML_ASSERT(buffer_id >= 0) failed"
        );
        // SAFETY: the caller's contract.
        let r = unsafe { tensor(t) };
        // Memory of its own already (data, or a buffer), planned already, or a view.
        if !r.data.is_null()
            || !r.buffer.is_null()
            || self.nodes[i].allocated
            || !r.view_src.is_null()
        {
            return;
        }
        // A tensor placed before (and freed since) is placed again only in a graph that
        // lists it twice or a view before its source ([`Planner::placed_twice`]).
        self.placed_twice |= self.nodes[i].slot != 0;
        self.nodes[i].allocated = true;
        if op_can_inplace(r.op) {
            for &parent in r.src.iter().filter(|p| !p.is_null()) {
                // SAFETY: a source of a live tensor is live (the caller's contract).
                if unsafe { self.reuse_parent(t, parent) } {
                    return;
                }
            }
        }
        // Checked here, where the id is used, as stock reads it only here: an id given for a
        // view or a tensor with memory is never read, whatever it is.
        if buffer_id as usize >= self.bufts.len() {
            bad_buffer_id(buffer_id, from, self.bufts.len(), r);
        }
        let size = self.alloc_size(buffer_id, r);
        let (addr, slot) = self.take(self.talloc_of[buffer_id as usize], size);
        let n = &mut self.nodes[i];
        n.buffer_id = buffer_id;
        n.addr = addr;
        n.slot = slot;
    }

    /// Lets `t` take over `parent`'s memory when `parent` is the graph allocator's, not an
    /// output, of `t`'s layout, and `t` is its last reader; a view parent only when it is its
    /// view source's only view, at its start. Returns whether it did.
    ///
    /// # Safety
    /// Both, and `parent`'s view source, must be live tensors.
    unsafe fn reuse_parent(&mut self, t: *mut ggml_tensor, parent: *mut ggml_tensor) -> bool {
        if !self.is_own(parent) {
            return false;
        }
        // SAFETY: the caller's contract.
        let (r, p) = unsafe { (tensor(t), tensor(parent)) };
        // SAFETY: as above; NULL when not a view.
        let view_src = unsafe { p.view_src.as_ref() };
        if p.flags & OUTPUT != 0 || view_src.is_some_and(|v| v.flags & OUTPUT != 0) {
            return false;
        }
        if !same_layout(r, p) {
            return false;
        }
        let ph = *self.node(parent);
        if ph.n_children != 1 || ph.n_views != 0 {
            return false;
        }
        let owner = match view_src {
            Some(v) => {
                let vs = p.view_src;
                let vh = *self.node(vs);
                if !(vh.n_views == 1 && vh.n_children == 0 && v.data == p.data) {
                    return false;
                }
                vs
            }
            None => parent,
        };
        if !self.usable_by_accessors(t, owner) {
            return false;
        }
        if owner != parent {
            self.node(owner).allocated = false;
        }
        let n = self.node(t);
        n.buffer_id = ph.buffer_id;
        n.addr = ph.addr;
        n.slot = ph.slot;
        self.node(parent).allocated = false;
        // SAFETY: both live with table entries (made above).
        unsafe { self.free_extra_space(t, owner) };
        self.reuses.push((t, parent));
        true
    }

    /// Notes `node`'s backend (buffer id `b`) as an accessor of the memory it writes (its own,
    /// or through a view its view root's) and of the memory of each source it reads (a
    /// view's is its view root's). Pure views access nothing themselves.
    ///
    /// # Safety
    /// `node`, its sources and their view sources must be live tensors.
    unsafe fn note_accesses(&mut self, node: *mut ggml_tensor, b: i32) {
        if !(0..64).contains(&b) {
            return;
        }
        let bit = 1u64 << b;
        // SAFETY: the caller's contract.
        let r = unsafe { tensor(node) };
        // A view op makes no access; nor does a NONE node (the scheduler's way to keep its
        // sources alive, or a view tensor). Their readers do, and are counted at the root.
        if crate::tensor::meta::is_view_op(r.op) || r.op == ggml_sys::GGML_OP_NONE {
            return;
        }
        // SAFETY: as above.
        let w = unsafe { crate::tensor::meta::view_root(node) };
        self.node(w).accessors |= bit;
        for &src in r.src.iter().filter(|s| !s.is_null()) {
            // SAFETY: as above.
            let m = unsafe { crate::tensor::meta::view_root(src) };
            self.node(m).accessors |= bit;
        }
    }

    /// Whether `t` may take over the memory of `owner` (the tensor whose memory it is): with
    /// [`Planner::set_access`], the memory stays in `owner`'s buffer, so every backend that
    /// will access `t`'s memory must be able to use that buffer's type.
    fn usable_by_accessors(&mut self, t: *mut ggml_tensor, owner: *mut ggml_tensor) -> bool {
        if self.access.is_none() {
            return true;
        }
        let (x, acc) = (self.node(owner).buffer_id, self.node(t).accessors);
        let access = self.access.as_deref().unwrap_or_default();
        if !(0..64).contains(&x) {
            return true;
        }
        // Every accessor but those of the owner's own buffer id must be able to use it.
        let others = acc & !(1u64 << x);
        access
            .iter()
            .enumerate()
            .all(|(b, m)| others & (1u64 << b) == 0 || m & (1u64 << x) != 0)
    }

    /// Plans `graph` (stock `ggml_gallocr_alloc_graph_impl`): leafs first, then graph inputs,
    /// then every node in order, freeing sources after their last reader. `node_ids` and
    /// `leaf_ids` give each node's and leaf's buffer id (all 0 when `None`).
    ///
    /// # Safety
    /// `graph` must be a live graph whose tensors (and their sources and view sources) are
    /// live; the id slices, when given, must cover its nodes and leafs.
    pub unsafe fn walk(
        &mut self,
        graph: &ggml_cgraph,
        node_ids: Option<&[i32]>,
        leaf_ids: Option<&[i32]>,
    ) {
        self.hash.clear();
        self.nodes.clear();
        self.slots.clear();
        self.reuses.clear();
        self.placed_twice = false;
        self.step = 0;
        for b in &mut self.blocks {
            b.reset();
        }
        let id = |ids: Option<&[i32]>, i: usize| ids.map_or(0, |v| v[i]);
        // SAFETY: the caller's contract: `n_leafs` and `n_nodes` live tensors.
        let (leafs, nodes) = unsafe { graph_tensors(graph) };
        // Every leaf and node gets an entry (sources and view sources are mostly among them):
        // sized once, not grown (and rehashed) entry by entry on a first plan.
        let n = leafs.len() + nodes.len();
        self.hash.reserve(n);
        self.nodes.reserve(n);
        self.slots.reserve(nodes.len());

        for (i, &leaf) in leafs.iter().enumerate() {
            // SAFETY: live (the caller's contract).
            unsafe { self.allocate(leaf, id(leaf_ids, i), IdFrom::Leaf(i)) };
        }
        // Count readers and views; graph inputs get memory first, so nothing overwrites them.
        // Each node's and source's table entry is looked up once here, for the loop below.
        self.edges.clear();
        self.edges.reserve(2 * nodes.len());
        // Who accesses which memory, before any node can take over a source's memory (graph
        // inputs below included).
        if self.access.is_some() {
            for (i, &node) in nodes.iter().enumerate() {
                // SAFETY: live (the caller's contract), with its sources and view sources.
                unsafe { self.note_accesses(node, id(node_ids, i)) };
            }
        }
        for (i, &node) in nodes.iter().enumerate() {
            // SAFETY: live (the caller's contract).
            let r = unsafe { tensor(node) };
            // A NONE node is the scheduler's way to keep its sources alive; it is no view.
            if !r.view_src.is_null() && r.op != ggml_sys::GGML_OP_NONE {
                self.node(r.view_src).n_views += 1;
            }
            if r.flags & INPUT != 0 {
                // SAFETY: live (the caller's contract).
                unsafe { self.allocate(node, id(node_ids, i), IdFrom::Node(i)) };
            }
            for &src in r.src.iter().filter(|s| !s.is_null()) {
                let si = self.index(src);
                self.nodes[si].n_children += 1;
                self.edges.push(si as u32);
                // SAFETY: a source of a live node is live.
                if unsafe { tensor(src) }.flags & INPUT != 0 {
                    // SAFETY: as above.
                    unsafe { self.allocate_at(si, src, id(node_ids, i), IdFrom::Node(i)) };
                }
            }
        }
        let mut edge = 0usize;
        for (i, &node) in nodes.iter().enumerate() {
            self.step += 1;
            let buffer_id = id(node_ids, i);
            // SAFETY: live (the caller's contract).
            let r = unsafe { tensor(node) };
            let first = edge;
            for &src in r.src.iter().filter(|s| !s.is_null()) {
                let si = self.edges[edge] as usize;
                edge += 1;
                // SAFETY: a source of a live node is live.
                unsafe { self.allocate_at(si, src, buffer_id, IdFrom::Node(i)) };
            }
            // SAFETY: live (the caller's contract).
            unsafe { self.allocate(node, buffer_id, IdFrom::Node(i)) };
            self.step += 1;
            for (k, &parent) in r.src.iter().filter(|s| !s.is_null()).enumerate() {
                let pi = self.edges[first + k] as usize;
                // SAFETY: as above.
                unsafe { self.release(pi, parent) };
            }
        }
    }

    /// One reader of `parent` (table entry `pi`) has run: frees it (or, for a view, its view
    /// source) when that was the last use.
    ///
    /// # Safety
    /// `parent` and its view source must be live tensors.
    unsafe fn release(&mut self, pi: usize, parent: *mut ggml_tensor) {
        let p = &mut self.nodes[pi];
        p.n_children -= 1;
        if p.n_children != 0 || p.n_views != 0 {
            return;
        }
        let allocated = p.allocated;
        // SAFETY: the caller's contract.
        let vs = unsafe { tensor(parent) }.view_src;
        if !vs.is_null() {
            let v = self.node(vs);
            v.n_views -= 1;
            if v.n_views == 0 && v.n_children == 0 && v.allocated {
                // SAFETY: the view source is live (the caller's contract).
                unsafe { self.free_node(vs) };
            }
        } else if allocated {
            // SAFETY: the caller's contract.
            unsafe { self.free_node(parent) };
        }
    }
}

/// The leafs and nodes of a graph as slices.
///
/// # Safety
/// `graph` must be live, with `n_leafs` leaf and `n_nodes` node pointers.
pub unsafe fn graph_tensors(graph: &ggml_cgraph) -> (&[*mut ggml_tensor], &[*mut ggml_tensor]) {
    let part = |p: *mut *mut ggml_tensor, n: i32| {
        if p.is_null() || n <= 0 {
            &[][..]
        } else {
            // SAFETY: the caller's contract: `n` pointers at `p`, live as long as the graph.
            unsafe { std::slice::from_raw_parts(p, n as usize) }
        }
    };
    (
        part(graph.leafs, graph.n_leafs),
        part(graph.nodes, graph.n_nodes),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mock::{graph, Arena};
    use ggml_sys::{GGML_OP_ADD, GGML_OP_MUL, GGML_OP_VIEW};

    unsafe extern "C" fn align_32(_: ggml_backend_buffer_type_t) -> usize {
        32
    }

    /// Three distinct buffer types (ids 0, 1, 2), with default sizes (`ggml_nbytes`); the
    /// vector is not grown after, so their addresses hold.
    fn bufts() -> Vec<ggml_sys::ggml_backend_buffer_type> {
        (0..3)
            .map(|_| {
                let mut b = ggml_sys::ggml_backend_buffer_type::default();
                b.iface.get_alignment = Some(align_32);
                b
            })
            .collect()
    }

    /// Plans `nodes` (buffer ids `ids`) over leaf `x` (buffer id 2) with `access`, and
    /// returns the buffer id each node's memory is in.
    fn plan(
        access: Option<Vec<u64>>,
        x: *mut ggml_tensor,
        nodes: &mut [*mut ggml_tensor],
        ids: &[i32],
    ) -> Vec<i32> {
        let types = bufts();
        let list: Vec<ggml_backend_buffer_type_t> =
            types.iter().map(|b| b as *const _ as *mut _).collect();
        // SAFETY: the buffer types live in `types` for the planner's lifetime.
        let mut p = unsafe { Planner::new(&list, "test") };
        p.set_access(access);
        let mut leafs = vec![x];
        let g = graph(nodes, &mut leafs);
        // SAFETY: the arena's tensors are live; the id slices cover the nodes and leafs.
        unsafe { p.walk(&g, Some(ids), Some(&[2])) };
        nodes
            .iter()
            .map(|&n| {
                // A view's memory is its root's.
                // SAFETY: live arena tensors.
                let root = unsafe { (*n).view_src.as_ref() }.map_or(n, |v| v as *const _ as *mut _);
                p.node(root).buffer_id
            })
            .collect()
    }

    /// D0 (id 0) uses D1's buffers but not host memory; D1 (id 1) uses host memory; the
    /// CPU (id 2) only its own.
    fn access() -> Option<Vec<u64>> {
        Some(vec![0b011, 0b110, 0b100])
    }

    #[test]
    fn reuse_keeps_memory_where_every_backend_that_reads_it_can_use_it() {
        let mut a = Arena::default();
        let x = a.input("x");
        // q on the CPU; p on D1 reads it directly and may take its memory (ADD runs in
        // place); r on D0 reads p.
        let q = a.tensor("q", GGML_OP_ADD, &[x, x]);
        let p = a.tensor("p", GGML_OP_ADD, &[q, x]);
        let r = a.tensor("r", GGML_OP_MUL, &[p, p]);
        let ids = [2, 1, 0];
        // Stock's reuse: p's memory is q's, in the CPU's buffer, which D0 cannot use.
        assert_eq!(plan(None, x, &mut [q, p, r], &ids), vec![2, 2, 0]);
        // With the access masks: p gets memory of its own, in D1's buffer.
        assert_eq!(plan(access(), x, &mut [q, p, r], &ids), vec![2, 1, 0]);
        // A reader that can use host memory (D1 for r) lets the reuse stand.
        assert_eq!(plan(access(), x, &mut [q, p, r], &[2, 1, 1]), vec![2, 2, 1]);
    }

    #[test]
    fn a_reader_of_a_view_and_a_writer_through_one_count_for_the_root() {
        let mut a = Arena::default();
        let x = a.input("x");
        let q = a.tensor("q", GGML_OP_ADD, &[x, x]);
        let p = a.tensor("p", GGML_OP_ADD, &[q, x]);
        // r on D0 reads p only through a view of it.
        let v = a.view_node("v", GGML_OP_VIEW, p, &[p]);
        let r = a.tensor("r", GGML_OP_MUL, &[v, v]);
        assert_eq!(
            plan(access(), x, &mut [q, p, v, r], &[2, 1, 1, 0]),
            vec![2, 1, 1, 0]
        );
        // w on D0 writes p's memory through a view, reading only x: counted at p.
        let mut a = Arena::default();
        let x = a.input("x");
        let q = a.tensor("q", GGML_OP_ADD, &[x, x]);
        let p = a.tensor("p", GGML_OP_ADD, &[q, x]);
        let w = a.view_node("w", GGML_OP_ADD, p, &[x, x]);
        assert_eq!(plan(access(), x, &mut [q, p, w], &[2, 1, 0]), vec![2, 1, 1]);
        assert_eq!(plan(None, x, &mut [q, p, w], &[2, 1, 0]), vec![2, 2, 2]);
    }
}
