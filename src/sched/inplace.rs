//! The in-place rule (issue 5; not in stock): a node whose result is a view of storage it
//! writes (an "in-place writer": it has a `view_src` and its op is not a pure view op, e.g.
//! SET_ROWS, SET, CPY into a view, ACC, the `*_inplace` ops, in-place FILL) runs on a backend
//! that can use that storage. Runs after the upgrade pass and before sources are filled in.
//!
//! - Allocated storage: the writer stays if its backend can use the storage's buffer type,
//!   else it moves to the highest-priority backend that can use it and runs its op; with
//!   none, the scheduler stops with a message naming the node, op, buffer type and backends.
//! - Storage produced in this graph (the view root has no buffer yet): the root and all its
//!   writers go to one backend that runs every one of their ops (a user's assignment first,
//!   else the highest priority), unless the root's backend allocates in a host-addressable
//!   buffer type that every writer's backend can use (then nothing moves). With none, stop.
//!
//! Every move is recorded with [`Cause::InPlaceColocation`]. Off with
//! `GGML_SCHED_INPLACE_RULE=0`.

use rustc_hash::FxHashMap as HashMap;

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::caps::Caps;
use super::inspect;
use super::query::buffer_supported;
use super::table::{Cause, PtrIndex, Table};
use crate::ffi::c_name;
use crate::tensor::meta;

/// Whether `t` writes into storage it does not own: it is a view (`view_src` set) made by an
/// op that computes something (not NONE, not VIEW/RESHAPE/PERMUTE/TRANSPOSE).
pub fn is_inplace_writer(t: &ggml_tensor) -> bool {
    !t.view_src.is_null() && t.op != ggml_sys::GGML_OP_NONE && !meta::is_view_op(t.op)
}

/// The sources an in-place writer also writes in place, besides its view root:
/// OPT_STEP_ADAMW updates its first and second moments (sources 2 and 3) as well as the
/// parameter it is a view of (upstream `ggml_opt_step_adamw`). Empty for every other op.
pub fn written_sources(t: &ggml_tensor) -> &[*mut ggml_tensor] {
    if t.op == ggml_sys::GGML_OP_OPT_STEP_ADAMW {
        &t.src[2..4]
    } else {
        &[]
    }
}

/// Whether backend `b` writes every source `w` writes in place ([`written_sources`]) where
/// it lives: it reads each without a copy (the split pass's own test: the source on `b`, or
/// in a buffer type `b` can use). A copy would take the update and lose it. A source with
/// no storage and no placement yet counts as written where it lives: the fill pass gives it
/// its reader's backend, and the rule's call after that pass checks it placed.
///
/// # Safety
/// `w` must be a live tensor with live sources.
unsafe fn writes_sources_directly(
    caps: &dyn Caps,
    table: &Table,
    w: &ggml_tensor,
    b: usize,
) -> bool {
    written_sources(w)
        .iter()
        .filter(|s| !s.is_null())
        .all(|&s| {
            // SAFETY: a non-NULL source of a live tensor is live, with its view source (this
            // function's contract).
            let (sr, storage) = unsafe { (&*s, meta::storage_buffer(&*s)) };
            let placed = table.backend(s).or_else(|| table.backend(sr.view_src));
            placed == Some(b)
                || (placed.is_none() && storage.is_null())
                // SAFETY: as above.
                || unsafe { buffer_supported(caps, table, s, b) }
        })
}

/// Where a tensor's bytes are, for a message: its buffer's type when allocated, else the
/// backend it (or its view source) is placed on, else "not placed yet".
///
/// # Safety
/// `t` and its view source must be live.
unsafe fn whereabouts(caps: &dyn Caps, table: &Table, t: *mut ggml_tensor) -> String {
    // SAFETY: the caller's contract.
    let (tr, buf) = unsafe { (&*t, meta::storage_buffer(&*t)) };
    if !buf.is_null() {
        // SAFETY: a live tensor's storage buffer is live, and so is its type.
        return format!("in buffer type {}", unsafe { caps.buft_name((*buf).buft) });
    }
    match table.backend(t).or_else(|| table.backend(tr.view_src)) {
        Some(b) => format!("in {}'s compute buffer", caps.backend_name(b)),
        None => "not placed yet".to_string(),
    }
}

/// The message of [`stop_written`]: the writer, its root and the sources it writes in place
/// with where each is, then per backend whether it can hold the root where it is (uses the
/// allocated root's buffer type, or, for a root produced in this graph, runs every op of
/// the `group`: the root's producer and its writers, which must share one backend), reads
/// the written sources without a copy, and runs the writer's op.
///
/// # Safety
/// `w` must be a live in-place writer with live sources; `root_buft` NULL or live; the
/// `group`'s tensors live.
unsafe fn written_stop_message(
    caps: &dyn Caps,
    table: &Table,
    w: *mut ggml_tensor,
    root_buft: ggml_sys::ggml_backend_buffer_type_t,
    group: &[*mut ggml_tensor],
) -> String {
    // SAFETY: `w` is live (this function's contract); only read.
    let wr = unsafe { &*w };
    // SAFETY: as above; `ggml_op_desc` returns a static NUL-terminated name.
    let op = unsafe { inspect::cstr(ggml_sys::ggml_op_desc(w)) };
    let written: Vec<String> = written_sources(wr)
        .iter()
        .filter(|s| !s.is_null())
        .map(|&s| {
            // SAFETY: non-NULL sources of a live tensor are live, with their view sources.
            let (name, place) = unsafe { (inspect::name(&*s), whereabouts(caps, table, s)) };
            format!("'{name}' ({place})")
        })
        .collect();
    let root_column = if root_buft.is_null() {
        "runs the root's producer and every writer"
    } else {
        "uses the root's buffer type"
    };
    let report = (0..caps.n_backends())
        .map(|b| {
            let root = if root_buft.is_null() {
                // SAFETY: the group's tensors are live (this function's contract).
                group.iter().all(|&m| unsafe { caps.supports_op(b, m) })
            } else {
                // SAFETY: `root_buft` is live (this function's contract).
                unsafe { caps.supports_buft(b, root_buft) }
            };
            // SAFETY: `w` and its sources are live (as above).
            let sources = unsafe { writes_sources_directly(caps, table, wr, b) };
            // SAFETY: `w` is live.
            let runs = unsafe { caps.supports_op(b, w) };
            let yn = |x: bool| if x { "yes" } else { "no" };
            format!(
                "{} ({root_column}: {}, reads the written sources without a copy: {}, runs the \
                 op: {})",
                caps.backend_name(b),
                yn(root),
                yn(sources),
                yn(runs)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    // SAFETY: an in-place writer's view source is set and live.
    let root = unsafe { &*wr.view_src };
    let root_where = if root_buft.is_null() {
        "produced in this graph".to_string()
    } else {
        // SAFETY: non-NULL here, and live (this function's contract).
        format!("in buffer type {}", unsafe { caps.buft_name(root_buft) })
    };
    format!(
        "in-place node '{}' (op {}) writes the storage of '{}' ({}) and of its sources {}; no \
         backend can hold all of them where they are and run the op, and a copy of a written \
         source would take its update; backends: {}",
        inspect::name(wr),
        op,
        inspect::name(root),
        root_where,
        written.join(", "),
        report
    )
}

/// Stops the process with [`written_stop_message`]: no backend can write the storage of
/// `w`'s view root (allocated in `root_buft`, or produced in this graph when NULL, with the
/// rest of its `group`) and the sources `w` writes in place, and run its op.
///
/// # Safety
/// As [`written_stop_message`].
#[cold]
unsafe fn stop_written(
    caps: &dyn Caps,
    table: &Table,
    w: *mut ggml_tensor,
    root_buft: ggml_sys::ggml_backend_buffer_type_t,
    group: &[*mut ggml_tensor],
) -> ! {
    // SAFETY: the caller's contract, forwarded.
    let msg = unsafe { written_stop_message(caps, table, w, root_buft, group) };
    crate::ffi::fatal(c_name!(sched::ggml_backend_sched_split_graph), &msg)
}

/// One line per backend for the stop message: name, whether it can use `buft`, whether it
/// runs `op`.
///
/// # Safety
/// `buft` and `ops` must be live.
unsafe fn backends_report(
    caps: &dyn Caps,
    buft: ggml_sys::ggml_backend_buffer_type_t,
    ops: &[*mut ggml_tensor],
) -> String {
    (0..caps.n_backends())
        .map(|b| {
            // SAFETY: `buft` is non-NULL here and live (this function's contract).
            let uses = !buft.is_null() && unsafe { caps.supports_buft(b, buft) };
            // SAFETY: the ops are live (this function's contract).
            let runs = ops.iter().all(|&o| unsafe { caps.supports_op(b, o) });
            format!(
                "{} (uses buffer: {}, runs op: {})",
                caps.backend_name(b),
                if uses { "yes" } else { "no" },
                if runs { "yes" } else { "no" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Stops the process: no backend can both use the storage and run the writer.
///
/// # Safety
/// `w` must be a live in-place writer (so its view source is set and live), `buft` NULL or
/// live, `ops` live.
pub(crate) unsafe fn stop(
    caps: &dyn Caps,
    w: *mut ggml_tensor,
    buft: ggml_sys::ggml_backend_buffer_type_t,
    ops: &[*mut ggml_tensor],
) -> ! {
    let what = if buft.is_null() {
        "is produced in this graph, and no backend runs both its producer and its writers"
            .to_string()
    } else {
        format!(
            "is in buffer type {}, and no backend can both use that buffer type and run the op",
            // SAFETY: non-NULL here, and live (this function's contract).
            unsafe { caps.buft_name(buft) }
        )
    };
    // SAFETY: `w` is live (this function's contract); only read.
    let wr = unsafe { &*w };
    // SAFETY: `w` is live; `ggml_op_desc` returns a static NUL-terminated name.
    let op = unsafe { inspect::cstr(ggml_sys::ggml_op_desc(w)) };
    // SAFETY: an in-place writer's view source is set and live (this function's contract).
    let root = unsafe { &*wr.view_src };
    // SAFETY: `buft` and `ops` as this function's contract says.
    let report = unsafe { backends_report(caps, buft, ops) };
    crate::ffi::fatal(
        c_name!(sched::ggml_backend_sched_split_graph),
        &format!(
            "in-place node '{}' (op {}) writes the storage of '{}', which {}; backends: {}",
            inspect::name(wr),
            op,
            inspect::name(root),
            what,
            report
        ),
    )
}

/// For each node that ggml-alloc may give the memory of one of its sources (an
/// "inplace-able" op, a source of the same layout that is gallocr's own, not an output, and
/// whose last reader it is, with no live view), that source. A structural replay of
/// `ggml_gallocr_alloc_graph`'s counting over the user's graph, before input copies exist:
/// a prediction, used only to judge where produced storage will really live.
///
/// # Safety
/// `graph` must be a live graph of live tensors.
unsafe fn reuse_candidates(
    caps: &dyn Caps,
    table: &Table,
    graph: &ggml_cgraph,
    pipeline: bool,
) -> HashMap<*mut ggml_tensor, *mut ggml_tensor> {
    // SAFETY: `graph` is live and not resized during the pass (this function's contract).
    let nodes = unsafe { inspect::nodes(graph) };
    // (children, live views) per tensor, as ggml-alloc counts them.
    let mut ix = PtrIndex::default();
    let mut counts: Vec<(i32, i32)> = Vec::with_capacity(nodes.len() * 2);
    let mut slot = |t: *mut ggml_tensor, counts: &mut Vec<(i32, i32)>| {
        ix.get_or_insert(t as usize, || {
            counts.push((0, 0));
            counts.len() - 1
        })
    };
    // A source that a node's backend cannot use is read through a copy: in the allocation
    // graph it then has one reader per backend (the copy's dependency node, made once per
    // backend), not one per node. `reads` lists, per node, the sources it holds directly and
    // whether this node is where such a copy dependency is counted.
    let mut copied: rustc_hash::FxHashSet<(usize, usize)> = Default::default();
    let reads = |n: *mut ggml_tensor, copied: &mut rustc_hash::FxHashSet<(usize, usize)>| {
        // SAFETY: called only with nodes of the live graph (non-NULL: `GraphIds::rebuild`
        // stopped on NULL), live tensors.
        let node = unsafe { &*n };
        let nb = table.backend(n);
        let mut out: [(*mut ggml_tensor, bool, bool); ggml_sys::GGML_MAX_SRC as usize] =
            [(std::ptr::null_mut(), false, false); ggml_sys::GGML_MAX_SRC as usize];
        for (j, s) in inspect::sources(node) {
            let direct = match nb {
                Some(b) => {
                    // SAFETY: a non-NULL source of a live node, live with its view source.
                    table.backend(s) == Some(b) || unsafe { buffer_supported(caps, table, s, b) }
                }
                None => true,
            };
            // (source, read directly, counts as a reader)
            let counts_here = direct || copied.insert((s as usize, nb.unwrap_or(usize::MAX)));
            out[j] = (s, direct, counts_here);
        }
        out
    };
    for &n in nodes {
        // SAFETY: a node of the live graph, non-NULL (as in `reads`).
        let node = unsafe { &*n };
        if !node.view_src.is_null() && node.op != ggml_sys::GGML_OP_NONE {
            let i = slot(node.view_src, &mut counts);
            counts[i].1 += 1;
        }
        for (s, _, counted) in reads(n, &mut copied) {
            if counted {
                let i = slot(s, &mut counts);
                counts[i].0 += 1;
            }
        }
    }
    copied.clear();
    let output = ggml_sys::GGML_TENSOR_FLAG_OUTPUT as i32;
    // With pipeline copies, the scheduler flags every graph input as an output too.
    let input = ggml_sys::GGML_TENSOR_FLAG_INPUT as i32;
    let mut cand = HashMap::default();
    for &n in nodes {
        // SAFETY: a node of the live graph, non-NULL (as in `reads`).
        let t = unsafe { &*n };
        let held = reads(n, &mut copied);
        if t.view_src.is_null() && t.buffer.is_null() && caps.op_can_inplace(t.op) {
            for &(p, direct, _) in &held {
                if p.is_null() || !direct {
                    // Through a copy: the copy's memory is in this backend's buffer anyway.
                    continue;
                }
                // SAFETY: a non-NULL source of a live node, so live.
                let pr = unsafe { &*p };
                // SAFETY: a live tensor's view source is NULL or live.
                let own = unsafe { meta::storage_buffer(pr) }.is_null();
                // SAFETY: as above: `as_ref` gives `None` for NULL, else a live tensor.
                let view_src = unsafe { pr.view_src.as_ref() };
                let is_output = pr.flags & output != 0
                    || (pipeline && pr.flags & input != 0)
                    || view_src.is_some_and(|v| v.flags & output != 0);
                let same_layout = meta::same_layout(pr, t);
                if !own || is_output || !same_layout {
                    continue;
                }
                let pi = slot(p, &mut counts);
                if counts[pi] == (1, 0) {
                    if pr.view_src.is_null() {
                        cand.insert(n, p);
                        break;
                    }
                    let vs = pr.view_src;
                    let vi = slot(vs, &mut counts);
                    if counts[vi] == (0, 1) && pr.view_offs == 0 {
                        cand.insert(n, vs);
                        break;
                    }
                }
            }
        }
        for (p, _, counted) in held {
            if !counted {
                continue;
            }
            let i = slot(p, &mut counts);
            counts[i].0 -= 1;
            if counts[i] == (0, 0) {
                // SAFETY: counted entries are non-NULL sources of a live node, so live.
                let vs = unsafe { (*p).view_src };
                if !vs.is_null() {
                    let v = slot(vs, &mut counts);
                    counts[v].1 -= 1;
                }
            }
        }
    }
    cand
}

/// The memory of [`Reuse`] and of [`colocate`]'s groups, kept by the scheduler from one split
/// to the next: emptied, never shrunk. Made afresh for every split, these maps and lists were
/// most of a split's heap traffic (about 300 allocations a split on the benchmark's deepseek
/// graph: a list per in-place group, and the memos' growth), paid by every cycle of a graph
/// that is not replayed.
#[derive(Default)]
pub struct ReuseMemory {
    memo: HashMap<*mut ggml_tensor, Option<ggml_sys::ggml_backend_buffer_type_t>>,
    masks: HashMap<*mut ggml_tensor, u64>,
    groups: Groups,
}

/// In-place writers grouped by view root, the groups in their roots' first-seen order and
/// each group's writers in node order: one flat list, each group a range of it.
#[derive(Default)]
struct Groups {
    /// Group index of each view root.
    index: HashMap<*mut ggml_tensor, u32>,
    /// Per group: its root, and (after [`Groups::sort`]) where its writers start in `writers`.
    roots: Vec<(*mut ggml_tensor, u32)>,
    /// (group, writer) in node order, as found.
    found: Vec<(u32, *mut ggml_tensor)>,
    /// The writers, group after group.
    writers: Vec<*mut ggml_tensor>,
}

impl Groups {
    fn clear(&mut self) {
        self.index.clear();
        self.roots.clear();
        self.found.clear();
        self.writers.clear();
    }

    /// Adds writer `n` of view root `root`.
    fn push(&mut self, root: *mut ggml_tensor, n: *mut ggml_tensor) {
        let roots = &mut self.roots;
        let g = *self.index.entry(root).or_insert_with(|| {
            roots.push((root, 0));
            roots.len() as u32 - 1
        });
        self.found.push((g, n));
    }

    /// Lays the writers out group after group, each in the order found (a counting sort:
    /// stable, and without allocation once the lists have grown).
    fn sort(&mut self) {
        // Count per group, then turn the counts into each group's end.
        for r in &mut self.roots {
            r.1 = 0;
        }
        for &(g, _) in &self.found {
            self.roots[g as usize].1 += 1;
        }
        let mut end = 0u32;
        for r in &mut self.roots {
            end += r.1;
            r.1 = end;
        }
        // Fill each range from its end backwards, so that every `r.1` ends at its start.
        self.writers.clear();
        self.writers.resize(self.found.len(), std::ptr::null_mut());
        for &(g, n) in self.found.iter().rev() {
            let at = &mut self.roots[g as usize].1;
            *at -= 1;
            self.writers[*at as usize] = n;
        }
    }

    /// The number of groups.
    fn len(&self) -> usize {
        self.roots.len()
    }

    /// Group `g`'s root and writers (after [`Groups::sort`]).
    fn group(&self, g: usize) -> (*mut ggml_tensor, &[*mut ggml_tensor]) {
        let (root, start) = self.roots[g];
        let end = self
            .roots
            .get(g + 1)
            .map_or(self.writers.len(), |r| r.1 as usize);
        (root, &self.writers[start as usize..end])
    }
}

/// The reuse prediction of one graph, computed on first need and shared by both calls of
/// [`colocate`] for that graph.
pub struct Reuse<'g> {
    graph: &'g ggml_cgraph,
    pipeline: bool,
    map: Option<HashMap<*mut ggml_tensor, *mut ggml_tensor>>,
    /// Memo of [`memory_buft`] under the current placements (cleared after every move).
    memo: HashMap<*mut ggml_tensor, Option<ggml_sys::ggml_backend_buffer_type_t>>,
    /// Memo of [`possible_backends`] (cleared with `memo`).
    masks: HashMap<*mut ggml_tensor, u64>,
    /// [`colocate`]'s groups, kept here only for their memory.
    groups: Groups,
}

impl<'g> Reuse<'g> {
    /// A prediction for `graph`; `pipeline`: the scheduler has more than one pipeline copy
    /// (graph inputs are then flagged as outputs).
    pub fn new(graph: &'g ggml_cgraph, pipeline: bool) -> Reuse<'g> {
        Reuse::recycled(graph, pipeline, ReuseMemory::default())
    }

    /// [`Reuse::new`] in the memory an earlier prediction gave back ([`Reuse::recycle`]).
    pub fn recycled(graph: &'g ggml_cgraph, pipeline: bool, mem: ReuseMemory) -> Reuse<'g> {
        let ReuseMemory {
            mut memo,
            mut masks,
            mut groups,
        } = mem;
        memo.clear();
        masks.clear();
        groups.clear();
        Reuse {
            graph,
            pipeline,
            map: None,
            memo,
            masks,
            groups,
        }
    }

    /// Ends the prediction and gives its memory back, for the next split's.
    pub fn recycle(self) -> ReuseMemory {
        ReuseMemory {
            memo: self.memo,
            masks: self.masks,
            groups: self.groups,
        }
    }

    /// The source whose memory `t` may take over, if any.
    ///
    /// # Safety
    /// The graph and `t` must be live.
    unsafe fn source_of(
        &mut self,
        caps: &dyn Caps,
        table: &Table,
        t: *mut ggml_tensor,
    ) -> Option<*mut ggml_tensor> {
        // SAFETY: `t` is live (this function's contract).
        if !caps.op_can_inplace(unsafe { (*t).op }) {
            return None;
        }
        let (graph, pipeline) = (self.graph, self.pipeline);
        self.map
            // SAFETY: the graph is live with live tensors (this function's contract).
            .get_or_insert_with(|| unsafe { reuse_candidates(caps, table, graph, pipeline) })
            .get(&t)
            .copied()
    }
}

/// Whether ggml-alloc could give `t` (on backend `tb`) the memory of its source `p`, by
/// everything but the use counts: `p` is gallocr's own (no storage yet), not an output,
/// of the same layout, and read directly (same backend, or a buffer type `tb` can use).
///
/// # Safety
/// The tensors must be live.
unsafe fn may_take(
    caps: &dyn Caps,
    table: &Table,
    t: &ggml_tensor,
    tb: usize,
    p: *mut ggml_tensor,
    pipeline: bool,
) -> bool {
    // SAFETY: `p` is live (this function's contract); only read.
    let pr = unsafe { &*p };
    let output = ggml_sys::GGML_TENSOR_FLAG_OUTPUT as i32;
    let input = ggml_sys::GGML_TENSOR_FLAG_INPUT as i32;
    // SAFETY: a live tensor's view source is NULL or live (this function's contract).
    let own = || unsafe { meta::storage_buffer(pr) }.is_null();
    // SAFETY: as above: `as_ref` gives `None` for NULL, else a live tensor.
    let view_src = || unsafe { pr.view_src.as_ref() };
    // SAFETY: `p` and its view source are live (as above).
    let usable = || unsafe { buffer_supported(caps, table, p, tb) };
    own()
        && pr.flags & output == 0
        && !(pipeline && pr.flags & input != 0)
        && view_src().is_none_or(|v| v.flags & output == 0)
        && pr.type_ == t.type_
        && pr.ne == t.ne
        && pr.nb == t.nb
        && (table.backend(p) == Some(tb) || usable())
}

/// A cheap upper bound of where the memory of `t` can end up: the set (bit per backend
/// index, at most 64 backends) of backends whose compute buffer may hold it, following
/// every source ggml-alloc could hand it ([`may_take`]), without the use counts that decide
/// which one it really takes. Allocated storage contributes nothing (it is never reused).
///
/// # Safety
/// `t` and its sources must be live.
unsafe fn possible_backends(
    caps: &dyn Caps,
    table: &Table,
    reuse: &mut Reuse,
    t: *mut ggml_tensor,
    depth: usize,
) -> u64 {
    if let Some(&m) = reuse.masks.get(&t) {
        return m;
    }
    // SAFETY: `t` is live (this function's contract); only read.
    let tr = unsafe { &*t };
    let m = if !tr.view_src.is_null() {
        if depth < 256 {
            // SAFETY: a live tensor's non-NULL view source is live, and so are its sources
            // (sources of a graph tensor are graph tensors).
            unsafe { possible_backends(caps, table, reuse, tr.view_src, depth + 1) }
        } else {
            u64::MAX
        }
    } else if !tr.buffer.is_null() {
        0
    } else {
        match table.backend(t) {
            None => 0,
            Some(tb) => {
                let mut m = 1u64 << tb;
                if caps.op_can_inplace(tr.op) {
                    for (_, p) in inspect::sources(tr) {
                        // SAFETY: `p` is a non-NULL source of the live `t`, live with its
                        // view source (this function's contract).
                        if unsafe { may_take(caps, table, tr, tb, p, reuse.pipeline) } {
                            m |= if depth < 256 {
                                // SAFETY: as above; `p`'s sources are live graph tensors.
                                unsafe { possible_backends(caps, table, reuse, p, depth + 1) }
                            } else {
                                u64::MAX
                            };
                        }
                    }
                }
                m
            }
        }
    };
    reuse.masks.insert(t, m);
    m
}

/// The buffer type the memory of `t` will most likely be in: its own buffer's when
/// allocated, else (following ggml-alloc's reuse of a source read directly, see
/// [`reuse_candidates`]) the compute buffer type of the backend whose allocation it ends up
/// with. `None` when `t` has no placement.
///
/// # Safety
/// `t` must be a live tensor whose sources are live.
unsafe fn memory_buft(
    caps: &dyn Caps,
    table: &Table,
    cand: &mut Reuse,
    t: *mut ggml_tensor,
    depth: usize,
) -> Option<ggml_sys::ggml_backend_buffer_type_t> {
    if let Some(&m) = cand.memo.get(&t) {
        return m;
    }
    // SAFETY: the same contract.
    let m = unsafe { memory_buft_uncached(caps, table, cand, t, depth) };
    cand.memo.insert(t, m);
    m
}

/// [`memory_buft`] without the memo.
///
/// # Safety
/// As [`memory_buft`].
unsafe fn memory_buft_uncached(
    caps: &dyn Caps,
    table: &Table,
    cand: &mut Reuse,
    t: *mut ggml_tensor,
    depth: usize,
) -> Option<ggml_sys::ggml_backend_buffer_type_t> {
    // SAFETY: `t` is live (this function's contract); only read.
    let tr = unsafe { &*t };
    if !tr.view_src.is_null() && depth < 256 {
        // SAFETY: a live tensor's non-NULL view source is live, its sources too.
        return unsafe { memory_buft(caps, table, cand, tr.view_src, depth + 1) };
    }
    if !tr.buffer.is_null() {
        // SAFETY: a live tensor's non-NULL buffer is live.
        return Some(unsafe { (*tr.buffer).buft });
    }
    let tb = table.backend(t)?;
    // SAFETY: `t` is live, and so is the graph the prediction is for (this function's
    // contract: `t`'s sources, the graph's tensors, are live).
    if let Some(p) = unsafe { cand.source_of(caps, table, t) } {
        // A source read through a copy gives up nothing: the copy lives in tb's buffer.
        // SAFETY: `p` is a source of the live `t`: live, with its view source.
        let direct =
            table.backend(p) == Some(tb) || unsafe { buffer_supported(caps, table, p, tb) };
        if direct && depth < 256 {
            // SAFETY: as above; `p`'s sources are live graph tensors.
            if let Some(b) = unsafe { memory_buft(caps, table, cand, p, depth + 1) } {
                return Some(b);
            }
        }
    }
    Some(caps.buft(tb))
}

/// Whether every writer of the group can write the root's storage where it is placed now:
/// on the root's backend, or able to use that backend's host-addressable buffer type; and
/// in any case able to use the buffer type the memory will most likely be in. Unplaced
/// writers follow the root in the fill pass.
///
/// # Safety
/// The tensors must be live.
unsafe fn group_ok(
    caps: &dyn Caps,
    table: &Table,
    cand: &mut Reuse,
    root: *mut ggml_tensor,
    writers: &[*mut ggml_tensor],
) -> bool {
    let Some(r) = table.backend(root) else {
        // Only unplaced writers are fine next to an unplaced root.
        return writers.iter().all(|&w| table.backend(w).is_none());
    };
    // Where the scheduler means the storage to be (the root's backend's buffer type)...
    let sched_buft = caps.buft(r);
    // SAFETY: a backend's own compute buffer type, live for the scheduler's lifetime.
    let host = unsafe { caps.buft_is_host(sched_buft) };
    // SAFETY: as above.
    let placed_ok = |wb: usize| wb == r || (host && unsafe { caps.supports_buft(wb, sched_buft) });
    // The writers' backends, those placed (looked up again at each use: no list to allocate).
    let placed = || writers.iter().filter_map(|&w| table.backend(w));
    if !placed().all(placed_ok) {
        return false;
    }
    let sources_ok = writers.iter().all(|&w| {
        table.backend(w).is_none_or(|wb| {
            // SAFETY: the writers and their sources are live (this function's contract).
            unsafe { writes_sources_directly(caps, table, &*w, wb) }
        })
    });
    if !sources_ok {
        return false;
    }
    // ...and where ggml-alloc will most likely put it must both be usable. First the cheap
    // bound: when every backend the memory could come from is usable, no need to replay
    // ggml-alloc's counts.
    let n = caps.n_backends();
    // SAFETY: `root` is live (this function's contract).
    if n <= 64 && unsafe { (*root).buffer }.is_null() {
        // SAFETY: `root` and its sources are live (this function's contract).
        let mask = unsafe { possible_backends(caps, table, cand, root, 0) };
        if mask != u64::MAX
            && (0..n).filter(|&b| mask & (1u64 << b) != 0).all(|b| {
                // SAFETY: a backend's own compute buffer type, live.
                placed().all(|wb| unsafe { caps.supports_buft(wb, caps.buft(b)) })
            })
        {
            return true;
        }
    }
    // SAFETY: `root` and its sources are live (this function's contract).
    match unsafe { memory_buft(caps, table, cand, root, 0) } {
        Some(b) if b == sched_buft => true,
        // SAFETY: `b` is a live buffer's type or a backend's compute buffer type.
        Some(b) => placed().all(|wb| unsafe { caps.supports_buft(wb, b) }),
        None => false,
    }
}

/// Applies the rule to every in-place writer of `graph`. Called twice: before the fill
/// pass (`after_fill` false), where groups whose root has no placement yet are left for
/// later, and after it (`after_fill` true), which settles those and re-checks the rest.
/// `reuse` is the graph's memory-reuse prediction, shared by both calls.
///
/// # Safety
/// `graph` must be a live graph of live tensors.
pub unsafe fn colocate(
    caps: &dyn Caps,
    table: &mut Table,
    graph: &ggml_cgraph,
    after_fill: bool,
    reuse: &mut Reuse,
) {
    // Writers of storage produced in this graph, grouped by view root in first-seen order
    // (in the prediction's recycled memory, taken out while `reuse` is lent to `group_ok`).
    let mut groups = std::mem::take(&mut reuse.groups);
    groups.clear();

    // SAFETY: `graph` is live and not resized during the pass (this function's contract).
    let nodes = unsafe { inspect::nodes(graph) };
    for &n in nodes {
        // SAFETY: a node of the live graph, non-NULL (`GraphIds::rebuild` stopped on NULL),
        // so live; only read.
        let node = unsafe { &*n };
        if !is_inplace_writer(node) {
            continue;
        }
        let root = node.view_src;
        // SAFETY: an in-place writer's view source is set, and live as the node's.
        let buf = unsafe { (*root).buffer };
        if !buf.is_null() {
            // SAFETY: a live tensor's non-NULL buffer is live.
            let buft = unsafe { (*buf).buft };
            let Some(cur) = table.backend(n) else {
                continue;
            };
            // SAFETY: `buft` is a live buffer's type; `node` and its sources are live.
            let writes_here = |b: usize| unsafe {
                caps.supports_buft(b, buft) && writes_sources_directly(caps, table, node, b)
            };
            if writes_here(cur) {
                continue;
            }
            // SAFETY: `n` is a live node.
            let to = (0..caps.n_backends())
                .find(|&b| writes_here(b) && unsafe { caps.supports_op(b, n) });
            match to {
                Some(b) => table.set(n, b, Cause::InPlaceColocation),
                // SAFETY: `n` is a live in-place writer, `buft` live.
                None if written_sources(node).is_empty() => unsafe { stop(caps, n, buft, &[n]) },
                // SAFETY: as above, with live sources.
                None => unsafe { stop_written(caps, table, n, buft, &[n]) },
            }
        } else {
            groups.push(root, n);
        }
    }
    groups.sort();

    for g in 0..groups.len() {
        let (root, writers) = groups.group(g);
        // A root without a place yet (a leaf without storage) gets one from its readers in
        // the fill pass; decide after it.
        if table.backend(root).is_none() && !after_fill {
            continue;
        }
        // SAFETY: the root and writers are live graph tensors, with live sources.
        if unsafe { group_ok(caps, table, reuse, root, writers) } {
            continue;
        }
        let members: Vec<*mut ggml_tensor> = std::iter::once(root)
            .chain(writers.iter().copied())
            .collect();
        // SAFETY: the members are live (as above).
        let runs_all = |b: usize| members.iter().all(|&m| unsafe { caps.supports_op(b, m) });
        let user = members
            .iter()
            .filter_map(|&m| table.get(m))
            .find(|p| p.cause == Cause::UserAssigned && runs_all(p.backend))
            .map(|p| p.backend);
        // Candidates: a user's choice, then by priority; the first under which the group is
        // sound wins, else the first that runs everything.
        let order: Vec<usize> = user
            .into_iter()
            .chain((0..caps.n_backends()).filter(|&b| runs_all(b)))
            .collect();
        let Some(&fallback) = order.first() else {
            // SAFETY: `writers[0]` is a live in-place writer (a group has at least one, as it
            // is made by its first); the members are live.
            unsafe { stop(caps, writers[0], std::ptr::null_mut(), &members) }
        };
        let before: Vec<_> = members.iter().map(|&m| table.get(m)).collect();
        let mut chosen = fallback;
        for &b in &order {
            for &m in &members {
                table.set(m, b, Cause::InPlaceColocation);
                // The prediction of a member depends on its own placement and its sources'
                // (never on later nodes), so forgetting the members is enough here.
                reuse.memo.remove(&m);
                reuse.masks.remove(&m);
            }
            // SAFETY: as the first `group_ok` above.
            if unsafe { group_ok(caps, table, reuse, root, writers) } {
                chosen = b;
                break;
            }
        }
        // Later nodes whose memory may come from a moved member: forget all predictions.
        reuse.memo.clear();
        reuse.masks.clear();
        // The fallback, when no candidate made the group sound, still keeps the sources a
        // writer updates in place (OPT_STEP_ADAMW's moments) out of copies, or stops.
        for &w in writers {
            // SAFETY: a live in-place writer with live sources (as above).
            if !unsafe { writes_sources_directly(caps, table, &*w, chosen) } {
                // SAFETY: as above; the root is produced in this graph (no buffer type), and
                // the members are live.
                unsafe { stop_written(caps, table, w, std::ptr::null_mut(), &members) };
            }
        }
        // Members already on the chosen backend keep their original cause.
        for (&m, old) in members.iter().zip(before) {
            match old {
                Some(p) if p.backend == chosen => table.set(m, p.backend, p.cause),
                _ => table.set(m, chosen, Cause::InPlaceColocation),
            }
        }
        // The root's pure views (VIEW, RESHAPE, PERMUTE, TRANSPOSE nodes, op-NONE leafs) go
        // with it: they have no bytes of their own, and a reader judges where a view's bytes are by the view's
        // placement (on its own backend it takes them as readable, with no copy). Left where
        // the fill pass or an earlier pass put them, next to the root's old place, a reader
        // there would read the moved root's memory in a buffer it may not use.
        // SAFETY: `graph` is live (this function's contract).
        let leafs = unsafe { inspect::leafs(graph) };
        for &n in nodes.iter().chain(leafs) {
            // SAFETY: a node or leaf of the live graph, non-NULL, so live; only read.
            let t = unsafe { &*n };
            // A view made by `ggml_view_tensor` has op NONE and is a leaf of the graph.
            let pure_view = meta::is_view_op(t.op) || t.op == ggml_sys::GGML_OP_NONE;
            if t.view_src == root && pure_view && table.backend(n).is_some_and(|b| b != chosen) {
                table.set(n, chosen, Cause::InPlaceColocation);
            }
        }
    }
    reuse.groups = groups;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mock::{build, no_tweak, run_cases, Case, Def::*, Mock};
    use ggml_sys::*;
    use Cause::*;

    /// The reproducer's shape: the device claims FILL but not SET_ROWS.
    const REPRO_OPS: &[&[ggml_op]] = &[
        &[GGML_OP_FILL, GGML_OP_ADD],
        &[GGML_OP_FILL, GGML_OP_SET_ROWS, GGML_OP_ADD],
    ];
    const REPRO: &[crate::sched::mock::Def] = &[
        GraphInput("x"),
        GraphInput("idx"),
        Node("fill", GGML_OP_FILL, &["x"]),
        View("set_rows", GGML_OP_SET_ROWS, "fill", &["fill", "x", "idx"]),
        Node("out", GGML_OP_ADD, &["set_rows", "set_rows"]),
    ];

    /// The device cannot use host memory (as HRX device-local compute buffers).
    fn device_only(m: &mut Mock) {
        m.backends[0].bufts.remove(&0x200);
    }

    fn device_only_set_rows(m: &mut Mock) {
        device_only(m);
        m.backends[0].ops.insert(GGML_OP_SET_ROWS);
    }

    /// Backend 0 can use backend 1's host buffer type (0x200), not the CPU's (0x300).
    fn accel_host(m: &mut Mock) {
        m.backends[0].bufts.remove(&0x300);
        m.backends[0].bufts.insert(0x200);
        m.host_bufts.insert(0x200);
    }

    const REUSE_OPS: &[&[ggml_op]] = &[
        &[GGML_OP_FILL],
        &[GGML_OP_SQR, GGML_OP_FILL],
        &[GGML_OP_SCALE, GGML_OP_SQR, GGML_OP_FILL],
    ];
    const REUSE_BEFORE: &[(&str, usize, Cause)] = &[
        ("x", 2, Input),
        ("p", 2, BestInputs),
        ("r", 1, BestInputs),
        ("w", 0, BestInputs),
    ];

    #[test]
    fn colocation_cases() {
        let before_fill = [
            Case {
                name: "produced storage: only the CPU runs FILL and SET_ROWS",
                ops: REPRO_OPS,
                tweak: device_only,
                graph: REPRO,
                before: &[
                    ("fill", 0, ExpandDeviceDown),
                    ("set_rows", 1, BestInputs),
                    ("out", 0, ExpandDeviceDown),
                ],
                want: &[
                    ("fill", Some((1, InPlaceColocation))),
                    ("set_rows", Some((1, BestInputs))),
                    ("out", Some((0, ExpandDeviceDown))),
                ],
            },
            Case {
                name: "produced storage: the device runs both and has priority",
                ops: REPRO_OPS,
                tweak: device_only_set_rows,
                graph: REPRO,
                before: &[("fill", 0, ExpandDeviceDown), ("set_rows", 1, BestInputs)],
                want: &[
                    ("fill", Some((0, ExpandDeviceDown))),
                    ("set_rows", Some((0, InPlaceColocation))),
                    ("out", None),
                ],
            },
            Case {
                name: "host storage the device can use: nothing moves",
                ops: &[&[GGML_OP_SET_ROWS], &[GGML_OP_FILL, GGML_OP_SET_ROWS]],
                tweak: no_tweak,
                graph: &[
                    GraphInput("x"),
                    Node("fill", GGML_OP_FILL, &["x"]),
                    View("set_rows", GGML_OP_SET_ROWS, "fill", &["fill", "x"]),
                ],
                before: &[("fill", 1, BestInputs), ("set_rows", 0, BestInputs)],
                want: &[
                    ("fill", Some((1, BestInputs))),
                    ("set_rows", Some((0, BestInputs))),
                ],
            },
            Case {
                name: "allocated storage pulls the writer to a backend that can use it",
                ops: &[&[GGML_OP_SET_ROWS], &[GGML_OP_SET_ROWS]],
                tweak: no_tweak,
                graph: &[
                    Leaf("cache", Some((0x100, GGML_BACKEND_BUFFER_USAGE_ANY))),
                    GraphInput("x"),
                    View("set_rows", GGML_OP_SET_ROWS, "cache", &["cache", "x"]),
                ],
                // The CPU cannot use the device buffer.
                before: &[("set_rows", 1, UserAssigned)],
                want: &[("set_rows", Some((0, InPlaceColocation))), ("cache", None)],
            },
        ];
        // SAFETY: run_cases passes graphs whose tensors its arena owns.
        run_cases(&before_fill, |c, t, g, _| unsafe {
            colocate(c, t, g, false, &mut Reuse::new(g, false))
        });

        // ggml-alloc may hand the root r the memory of a source it reads directly (p, a CPU
        // tensor read by the accelerator 1): the writer w, which can use the accelerator's
        // host buffer type but not the CPU's, must then move; when p has another reader
        // later, no reuse happens and nothing moves.
        let after_fill = [
            Case {
                name: "predicted reuse of the CPU's memory moves the writer",
                ops: REUSE_OPS,
                tweak: accel_host,
                graph: &[
                    GraphInput("x"),
                    Node("p", GGML_OP_SCALE, &["x"]),
                    Node("r", GGML_OP_SQR, &["p"]),
                    View("w", GGML_OP_FILL, "r", &["r"]),
                ],
                before: REUSE_BEFORE,
                want: &[
                    ("w", Some((1, InPlaceColocation))),
                    ("r", Some((1, BestInputs))),
                ],
            },
            Case {
                name: "a second reader of p: no reuse, nothing moves",
                ops: REUSE_OPS,
                tweak: accel_host,
                graph: &[
                    GraphInput("x"),
                    Node("p", GGML_OP_SCALE, &["x"]),
                    Node("r", GGML_OP_SQR, &["p"]),
                    View("w", GGML_OP_FILL, "r", &["r"]),
                    Node("q", GGML_OP_SCALE, &["p"]),
                ],
                before: REUSE_BEFORE,
                want: &[("w", Some((0, BestInputs))), ("r", Some((1, BestInputs)))],
            },
        ];
        // SAFETY: as above.
        run_cases(&after_fill, |c, t, g, _| unsafe {
            colocate(c, t, g, true, &mut Reuse::new(g, false))
        });
    }

    #[test]
    fn inplace_writers() {
        let b = build(&Case {
            name: "writers",
            ops: REPRO_OPS,
            tweak: no_tweak,
            graph: &[
                Leaf("cache", Some((0x100, GGML_BACKEND_BUFFER_USAGE_ANY))),
                GraphInput("x"),
                View("set_rows", GGML_OP_SET_ROWS, "cache", &["cache", "x"]),
                View("view", GGML_OP_VIEW, "cache", &["cache"]),
            ],
            before: &[],
            want: &[],
        });
        // SAFETY: the tensors are owned by `b.arena`.
        let is = |n| is_inplace_writer(unsafe { &*b.t(n) });
        assert!(is("set_rows"));
        assert!(!is("cache"));
        assert!(!is("view"));
    }

    /// Groups come out in their roots' first-seen order, each with its writers in the order
    /// found, over recycled memory too (the lists of a larger earlier split left behind).
    #[test]
    fn groups_keep_first_seen_and_node_order() {
        let t = |i: usize| i as *mut ggml_tensor;
        let mut groups = Groups::default();
        let expect: &[(usize, &[usize])] = &[(10, &[1, 4, 6]), (20, &[2, 5]), (30, &[3])];
        for round in 0..2 {
            groups.clear();
            if round == 1 {
                // A bigger split before this one: stale entries must not show through.
                for i in 0..50 {
                    groups.push(t(100 + i % 7), t(200 + i));
                }
                groups.sort();
                groups.clear();
            }
            for (root, n) in [(10, 1), (20, 2), (30, 3), (10, 4), (20, 5), (10, 6)] {
                groups.push(t(root), t(n));
            }
            groups.sort();
            assert_eq!(groups.len(), 3);
            for (g, &(root, writers)) in expect.iter().enumerate() {
                let (r, w) = groups.group(g);
                assert_eq!(r, t(root), "round {round}, group {g}");
                let want: Vec<_> = writers.iter().map(|&i| t(i)).collect();
                assert_eq!(w, &want[..], "round {round}, group {g}");
            }
        }
        // No writers at all: no groups.
        groups.clear();
        groups.sort();
        assert_eq!(groups.len(), 0);
    }

    /// Runs the scheduler's passes 1-4 with the rule (place.rs's order) over
    /// `case`, then lists every read or write of storage that a node's backend cannot use
    /// and that no input copy covers: (node, tensor whose storage it touches).
    fn hazards_after_placement(case: &Case) -> Vec<(String, String)> {
        placement_and_hazards(case, |_| {}, true).0
    }

    /// [`hazards_after_placement`] after `edit` changed the built graph, with the rule on or
    /// off (off: stock's placement); also every named tensor's placement.
    #[allow(clippy::type_complexity)]
    fn placement_and_hazards(
        case: &Case,
        edit: fn(&mut crate::sched::mock::Built),
        rule: bool,
    ) -> (
        Vec<(String, String)>,
        std::collections::BTreeMap<String, Option<(usize, Cause)>>,
    ) {
        use crate::sched::table::GraphIds;
        use crate::sched::{assign, expand, fill, upgrade};
        let mut b = build(case);
        edit(&mut b);
        let g = b.graph();
        let caps = &b.caps;
        let mut t = Table::default();
        for &(n, backend, cause) in case.before {
            t.set(b.t(n), backend, cause);
        }
        let mut out = Vec::new();
        // SAFETY: every tensor of the graph is owned by `b.arena`, alive for the test.
        unsafe {
            let ix = GraphIds::new(&mut t, &g);
            let mut reuse = Reuse::new(&g, false);
            assign::assign_current(caps, &mut t, &g, &ix, false, rule);
            expand::expand(caps, &mut t, &g, &ix);
            upgrade::upgrade(caps, &mut t, &g, &ix);
            if rule {
                colocate(caps, &mut t, &g, false, &mut reuse);
            }
            fill::fill(caps, &mut t, &g, &ix);
            if rule {
                colocate(caps, &mut t, &g, true, &mut reuse);
            }
            // Where a tensor's bytes really are: its root's buffer, else its root's backend's.
            let storage = |s: *mut ggml_tensor| {
                let root = if (*s).view_src.is_null() {
                    s
                } else {
                    (*s).view_src
                };
                if !(*root).buffer.is_null() {
                    Some((*(*root).buffer).buft)
                } else {
                    t.backend(root).map(|rb| caps.buft(rb))
                }
            };
            for &n in inspect::nodes(&g) {
                let node = &*n;
                if meta::is_view_op(node.op) {
                    continue;
                }
                let nb = t.backend(n).expect("placed");
                let name = |x: *mut ggml_tensor| inspect::name(&*x).to_string();
                // Its own storage (an in-place writer writes its root's).
                if let Some(bt) = storage(n) {
                    if !caps.supports_buft(nb, bt) {
                        out.push((name(n), name(n)));
                    }
                }
                for (j, s) in inspect::sources(node) {
                    let sb = t.backend(s);
                    let copied = sb != Some(nb) && !buffer_supported(caps, &t, s, nb);
                    // ADAMW updates its m and v (sources 2 and 3) in place: a copy of
                    // them is a lost write.
                    let written = node.op == ggml_sys::GGML_OP_OPT_STEP_ADAMW && (j == 2 || j == 3);
                    if copied && !written {
                        continue;
                    }
                    if let Some(bt) = storage(s) {
                        if !caps.supports_buft(nb, bt) {
                            out.push((name(n), name(s)));
                        }
                    }
                }
            }
        }
        let placed = b
            .by_name
            .iter()
            .map(|(&n, &p)| (n.to_string(), t.get(p).map(|p| (p.backend, p.cause))))
            .collect();
        (out, placed)
    }

    /// OPT_STEP_ADAMW writes its moments m and v (sources 2 and 3) in place, not only its
    /// view root (the parameter). Placed by the parameter's buffer alone, the step stays on
    /// B0, reads m and v through copies and updates the copies: the moments never change.
    /// B1 can use all three and runs the op (`mock::adamw_moments_case`).
    #[test]
    fn adamw_moments_are_written_where_they_live() {
        let case = crate::sched::mock::adamw_moments_case();
        let h = hazards_after_placement(&case);
        assert!(
            h.is_empty(),
            "storage used by a backend that cannot reach it: {h:?}"
        );
    }

    /// The second call of the rule (after the fill pass) moves a view root
    /// and its writers, but not the pure views of that root that the fill pass has just
    /// placed next to the root's old backend. A reader of such a view on that old backend
    /// then reads it without a copy: from the moved root's memory, in a buffer it cannot
    /// use. Here `scratch` (a leaf without storage) is first placed on D by its reader `y`;
    /// `v` = VIEW(scratch) follows it to D, `x` reads `v` on D; `w` (SET_ROWS into
    /// `scratch`, which only the CPU runs) makes the rule move `scratch` to the CPU: `x`
    /// then reads CPU memory on D, which cannot use it.
    #[test]
    fn views_follow_a_root_moved_after_fill() {
        let case = Case {
            name: "scratch leaf moved after fill, its view left behind",
            ops: &[
                &[GGML_OP_ADD, GGML_OP_VIEW],
                &[GGML_OP_ADD, GGML_OP_VIEW, GGML_OP_SET_ROWS],
            ],
            tweak: device_only,
            graph: &[
                Leaf("scratch", None),
                GraphInput("x_in"),
                GraphInput("idx"),
                Node("y", GGML_OP_ADD, &["scratch", "scratch"]),
                View("v", GGML_OP_VIEW, "scratch", &["scratch"]),
                Node("x", GGML_OP_ADD, &["v", "v"]),
                View(
                    "w",
                    GGML_OP_SET_ROWS,
                    "scratch",
                    &["x_in", "idx", "scratch"],
                ),
            ],
            before: &[("y", 0, UserAssigned), ("x", 0, UserAssigned)],
            want: &[],
        };
        let h = hazards_after_placement(&case);
        assert!(
            h.is_empty(),
            "storage used by a backend that cannot reach it: {h:?}"
        );
    }

    /// Moments without storage (graph-allocated: the scheduler's gallocr allocates them) get
    /// their backend only in the fill pass, from their reader, the step: it then reads them
    /// without a copy and writes them where they live. Stock has no hazard here, and the rule
    /// must change nothing (its first call, before the fill pass, took the unplaced moments
    /// as unreadable from every backend and stopped the process).
    #[test]
    fn adamw_moments_placed_by_the_fill_pass_need_no_move() {
        let case = Case {
            name: "adamw: moments without storage, placed by their reader",
            ops: &[&[GGML_OP_OPT_STEP_ADAMW], &[GGML_OP_OPT_STEP_ADAMW]],
            tweak: no_tweak,
            graph: &[
                Leaf("param", Some((0x100, GGML_BACKEND_BUFFER_USAGE_WEIGHTS))),
                Leaf("grad", Some((0x100, GGML_BACKEND_BUFFER_USAGE_ANY))),
                Leaf("m", None),
                Leaf("v", None),
                Leaf("hp", Some((0x100, GGML_BACKEND_BUFFER_USAGE_ANY))),
                View(
                    "step",
                    GGML_OP_OPT_STEP_ADAMW,
                    "param",
                    &["param", "grad", "m", "v", "hp"],
                ),
            ],
            before: &[],
            want: &[],
        };
        let (h_stock, stock) = placement_and_hazards(&case, |_| {}, false);
        assert!(h_stock.is_empty(), "stock has a hazard: {h_stock:?}");
        let (h, ours) = placement_and_hazards(&case, |_| {}, true);
        assert!(
            h.is_empty(),
            "storage used by a backend that cannot reach it: {h:?}"
        );
        assert_eq!(
            ours, stock,
            "no hazard in stock: the rule must change nothing"
        );
    }

    /// "The root's pure views go with it" covers views outside the node list (VIEW,
    /// RESHAPE, PERMUTE, TRANSPOSE) too: a view made by `ggml_view_tensor` has op NONE and is
    /// a leaf of the graph, and the fill pass places it by its view source as a VIEW node.
    /// The case of
    /// `views_follow_a_root_moved_after_fill` with `v` such a leaf: the rule moves `scratch`
    /// to the CPU after the fill pass, `v` stays on D, and `x` on D reads `v` without a copy
    /// from CPU memory D cannot use.
    #[test]
    fn leaf_views_follow_a_root_moved_after_fill() {
        fn v_is_a_leaf(b: &mut crate::sched::mock::Built) {
            let v = b.t("v");
            b.nodes.retain(|&n| n != v);
            b.leafs.push(v);
        }
        let case = Case {
            name: "scratch leaf moved after fill, its op-NONE view left behind",
            ops: &[
                &[GGML_OP_ADD, GGML_OP_VIEW],
                &[GGML_OP_ADD, GGML_OP_VIEW, GGML_OP_SET_ROWS],
            ],
            tweak: device_only,
            graph: &[
                Leaf("scratch", None),
                GraphInput("x_in"),
                GraphInput("idx"),
                Node("y", GGML_OP_ADD, &["scratch", "scratch"]),
                // ggml_view_tensor(scratch): op NONE, no sources, view_src scratch.
                View("v", GGML_OP_NONE, "scratch", &[]),
                Node("x", GGML_OP_ADD, &["v", "v"]),
                View(
                    "w",
                    GGML_OP_SET_ROWS,
                    "scratch",
                    &["x_in", "idx", "scratch"],
                ),
            ],
            before: &[("y", 0, UserAssigned), ("x", 0, UserAssigned)],
            want: &[],
        };
        let (h, placed) = placement_and_hazards(&case, v_is_a_leaf, true);
        assert!(
            h.is_empty(),
            "storage used by a backend that cannot reach it: {h:?}; placements {placed:?}"
        );
    }

    /// A step whose root is computed in this graph (`p` on B0, by the user) and whose
    /// moments are in B1's buffer: the rule keeps a produced root's writers on the root's
    /// backend unless its buffer type is host memory (B1 could use B0's buffer, but the rule
    /// does not take that), so the group needs one backend that runs ADD and the step and
    /// reads the moments without a copy. None does: the process stops (a review of
    /// 7b2e275 found the first message listing B1 with "yes" in every column). The message
    /// must say what each backend lacks, and where the moments are.
    #[test]
    fn adamw_group_stop_says_what_each_backend_lacks() {
        fn peer(m: &mut Mock) {
            m.backends[1].bufts.insert(0x100);
        }
        let case = Case {
            name: "adamw: computed root on B0, step on B1 by the user",
            ops: &[
                &[GGML_OP_ADD, GGML_OP_OPT_STEP_ADAMW],
                &[GGML_OP_OPT_STEP_ADAMW],
                &[GGML_OP_ADD, GGML_OP_OPT_STEP_ADAMW],
            ],
            tweak: peer,
            graph: &[
                Leaf("a", Some((0x100, GGML_BACKEND_BUFFER_USAGE_WEIGHTS))),
                Leaf("grad", Some((0x200, GGML_BACKEND_BUFFER_USAGE_ANY))),
                Leaf("m", Some((0x200, GGML_BACKEND_BUFFER_USAGE_ANY))),
                Leaf("v", Some((0x200, GGML_BACKEND_BUFFER_USAGE_ANY))),
                Leaf("hp", Some((0x300, GGML_BACKEND_BUFFER_USAGE_ANY))),
                Node("p", GGML_OP_ADD, &["a", "a"]),
                View(
                    "step",
                    GGML_OP_OPT_STEP_ADAMW,
                    "p",
                    &["p", "grad", "m", "v", "hp"],
                ),
            ],
            before: &[("p", 0, UserAssigned), ("step", 1, UserAssigned)],
            want: &[],
        };
        let b = build(&case);
        let mut t = Table::default();
        for &(n, backend, cause) in case.before {
            t.set(b.t(n), backend, cause);
        }
        let group = [b.t("p"), b.t("step")];
        // SAFETY: the arena's tensors are live for the test.
        let msg =
            unsafe { written_stop_message(&b.caps, &t, b.t("step"), std::ptr::null_mut(), &group) };
        for want in [
            "in-place node 'step' (op OPT_STEP_ADAMW) writes the storage of 'p' (produced in \
             this graph) and of its sources 'm' (in buffer type buft0x200), 'v' (in buffer type \
             buft0x200)",
            "B0 (runs the root's producer and every writer: yes, reads the written sources \
             without a copy: no, runs the op: yes)",
            "B1 (runs the root's producer and every writer: no, reads the written sources \
             without a copy: yes, runs the op: yes)",
            "B2 (runs the root's producer and every writer: yes, reads the written sources \
             without a copy: no, runs the op: yes)",
        ] {
            assert!(msg.contains(want), "{want:?} not in {msg:?}");
        }
    }
}
