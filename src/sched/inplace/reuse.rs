//! The rule's prediction of ggml-alloc: which source's memory a node may take over, and so
//! in which buffer type produced storage will really live.

use rustc_hash::FxHashMap as HashMap;

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::super::caps::Caps;
use super::super::inspect;
use super::super::query::buffer_supported;
use super::super::table::{PtrIndex, Table};
use crate::tensor::meta;

/// For each node that ggml-alloc may give the memory of one of its sources (an
/// "inplace-able" op, a source of the same layout that is gallocr's own (no view, no memory
/// yet), not an output, and whose last reader it is, with no live view), that source. A
/// source read through a copy counts as the copy, in the node's own buffer: taken over, it
/// ends the search with no candidate. A structural replay of `ggml_gallocr_alloc_graph`'s
/// counting over the user's graph, before input copies exist: a prediction, used only to
/// judge where produced storage will really live.
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
                // SAFETY: a non-NULL source of a live node, live with its view sources. The
                // rule is on (this runs only for it), so a view is judged by its root.
                Some(b) => unsafe {
                    super::super::split::reads_directly(caps, table, s, b, true, || {
                        // SAFETY: as above.
                        table.backend(s) == Some(b) || buffer_supported(caps, table, s, b)
                    })
                },
                None => true,
            };
            // (source, read directly, counts as a reader)
            let counts_here = direct || copied.insert((s as usize, nb.unwrap_or(usize::MAX)));
            out[j] = (s, direct, counts_here);
        }
        out
    };
    // Readers of each copy, by (source, backend): the split pass makes one copy of a source
    // per backend, and every node of that backend that cannot use the source reads it.
    let mut copy_readers: HashMap<(usize, usize), i32> = HashMap::default();
    for &n in nodes {
        // SAFETY: a node of the live graph, non-NULL (as in `reads`).
        let node = unsafe { &*n };
        if !node.view_src.is_null() && node.op != ggml_sys::GGML_OP_NONE {
            let i = slot(node.view_src, &mut counts);
            counts[i].1 += 1;
        }
        let nb = table.backend(n).unwrap_or(usize::MAX);
        for (s, direct, counted) in reads(n, &mut copied) {
            if counted {
                let i = slot(s, &mut counts);
                counts[i].0 += 1;
            }
            if !s.is_null() && !direct {
                *copy_readers.entry((s as usize, nb)).or_default() += 1;
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
        let nb = table.backend(n).unwrap_or(usize::MAX);
        if t.view_src.is_null() && t.buffer.is_null() && caps.op_can_inplace(t.op) {
            for &(p, direct, _) in &held {
                if p.is_null() {
                    continue;
                }
                // SAFETY: a non-NULL source of a live node, so live.
                let pr = unsafe { &*p };
                if !direct {
                    // Through a copy, which is in this backend's buffer. ggml-alloc takes it
                    // over, and looks no further, when this node is its last reader and the
                    // layouts match (a copy has its source's; with pipeline copies each is
                    // flagged an output, and never taken over).
                    let last = copy_readers.get(&(p as usize, nb)) == Some(&1);
                    if last && !pipeline && meta::same_layout(pr, t) {
                        break;
                    }
                    continue;
                }
                // ggml-alloc takes over only memory it placed for a tensor of its own, and a
                // view has none (`ggml_gallocr_is_own`: a view is never allocated).
                if !pr.view_src.is_null() {
                    continue;
                }
                // Memory ggml-alloc places: none yet, neither a buffer nor data.
                let own = pr.buffer.is_null() && pr.data.is_null();
                let is_output = pr.flags & output != 0 || (pipeline && pr.flags & input != 0);
                let same_layout = meta::same_layout(pr, t);
                if !own || is_output || !same_layout {
                    continue;
                }
                let pi = slot(p, &mut counts);
                if counts[pi] == (1, 0) {
                    cand.insert(n, p);
                    break;
                }
            }
        }
        for (p, direct, counted) in held {
            if !p.is_null() && !direct {
                if let Some(r) = copy_readers.get_mut(&(p as usize, nb)) {
                    *r -= 1;
                }
            }
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
pub(super) struct Groups {
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
    /// Empties the groups, keeping their memory.
    pub(super) fn clear(&mut self) {
        self.index.clear();
        self.roots.clear();
        self.found.clear();
        self.writers.clear();
    }

    /// Adds writer `n` of view root `root`.
    pub(super) fn push(&mut self, root: *mut ggml_tensor, n: *mut ggml_tensor) {
        let roots = &mut self.roots;
        let g = *self.index.entry(root).or_insert_with(|| {
            roots.push((root, 0));
            roots.len() as u32 - 1
        });
        self.found.push((g, n));
    }

    /// Lays the writers out group after group, each in the order found (a counting sort:
    /// stable, and without allocation once the lists have grown).
    pub(super) fn sort(&mut self) {
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
    pub(super) fn len(&self) -> usize {
        self.roots.len()
    }

    /// Group `g`'s root and writers (after [`Groups::sort`]).
    pub(super) fn group(&self, g: usize) -> (*mut ggml_tensor, &[*mut ggml_tensor]) {
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
    pub(super) memo: HashMap<*mut ggml_tensor, Option<ggml_sys::ggml_backend_buffer_type_t>>,
    /// Memo of [`possible_backends`] (cleared with `memo`).
    pub(super) masks: HashMap<*mut ggml_tensor, u64>,
    /// [`colocate`](super::colocate)'s groups, kept here only for their memory.
    pub(super) groups: Groups,
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
pub(super) unsafe fn possible_backends(
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
pub(super) unsafe fn memory_buft(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mock::{graph, Arena, Mock};
    use crate::sched::table::Cause;
    use ggml_sys::GGML_OP_ADD;

    /// The prediction for `nodes` (every one placed as given) over backends B0, which cannot
    /// use the CPU's memory, and the CPU: node name to the source whose memory it takes.
    fn predict(
        nodes: &mut [*mut ggml_tensor],
        leafs: &mut [*mut ggml_tensor],
        placed: &[(*mut ggml_tensor, usize)],
    ) -> Vec<(String, String)> {
        let mut caps = Mock::new(&[&[GGML_OP_ADD], &[GGML_OP_ADD]]);
        caps.backends[0].bufts.remove(&0x200);
        let g = graph(nodes, leafs);
        let mut t = Table::default();
        for &(x, b) in placed {
            t.set(x, b, Cause::UserAssigned);
        }
        // SAFETY: every tensor is the arena's, alive for the test.
        let cand = unsafe { reuse_candidates(&caps, &t, &g, false) };
        // SAFETY: as above.
        let name = |x: *mut ggml_tensor| unsafe { inspect::name(&*x) }.to_string();
        let mut out: Vec<_> = cand.into_iter().map(|(n, p)| (name(n), name(p))).collect();
        out.sort();
        out
    }

    /// A node on B0 reading a CPU tensor through a copy: ggml-alloc takes over the copy (in
    /// B0's buffer) when the node is its last reader, and looks at no later source; while
    /// another B0 node still reads the copy, it goes on to the next source.
    #[test]
    fn a_copy_read_last_is_taken_over_and_ends_the_search() {
        for later_reader in [false, true] {
            let mut a = Arena::default();
            let x = a.input("x");
            let cpu_node = a.tensor("a", GGML_OP_ADD, &[x, x]);
            let c = a.tensor("c", GGML_OP_ADD, &[x, x]);
            let t = a.tensor("t", GGML_OP_ADD, &[cpu_node, c]);
            let u = a.tensor("u", GGML_OP_ADD, &[cpu_node, t]);
            let mut nodes = vec![cpu_node, c, t];
            let mut placed = vec![(x, 1), (cpu_node, 1), (c, 0), (t, 0)];
            if later_reader {
                nodes.push(u);
                placed.push((u, 0));
            }
            let got = predict(&mut nodes, &mut [x], &placed);
            let t_takes: Vec<_> = got.iter().filter(|(n, _)| n == "t").collect();
            if later_reader {
                // The copy has a reader after t: t takes c's memory (B0's own).
                assert_eq!(t_takes, [&("t".to_string(), "c".to_string())]);
            } else {
                // t takes the copy: no candidate (the memory is B0's), and not c's.
                assert!(t_takes.is_empty(), "{got:?}");
            }
        }
    }

    /// A view is never ggml-alloc's own allocation, so a node never takes over a view's
    /// memory (nor, through it, its root's): the search goes on to the next source.
    #[test]
    fn a_view_source_is_never_taken_over() {
        let mut a = Arena::default();
        let x = a.input("x");
        let r = a.tensor("r", GGML_OP_ADD, &[x, x]);
        let v = a.view_node("v", ggml_sys::GGML_OP_VIEW, r, &[r]);
        let y = a.tensor("y", GGML_OP_ADD, &[x, x]);
        let t = a.tensor("t", GGML_OP_ADD, &[v, y]);
        let placed = [(x, 1), (r, 1), (v, 1), (y, 1), (t, 1)];
        let got = predict(&mut [r, v, y, t], &mut [x], &placed);
        assert!(got.contains(&("t".to_string(), "y".to_string())), "{got:?}");
        assert!(!got.iter().any(|(_, p)| p == "r" || p == "v"), "{got:?}");
    }
}
