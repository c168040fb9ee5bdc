//! Pass 5: cut the node list into splits, one backend each, and give every split a copy of
//! each source that its backend cannot use where it is; pass 6: with pipeline copies, give
//! every graph input one copy per pipeline copy. Matches passes 5 and 6 of stock's
//! `ggml_backend_sched_split_graph`.

use std::cell::UnsafeCell;

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::caps::Caps;
use super::ctx::CtxPool;
use super::inspect;
use super::query::{buffer_supported, buffer_supported_at, sources_at};
use super::table::{GraphIds, Table};
use crate::ffi::c_name;
use crate::tensor::meta;

/// A run of consecutive nodes `[i_start, i_end)` of the user's graph computed by one backend.
pub struct Split {
    /// Backend index.
    pub backend: usize,
    /// First node (index in the user's graph).
    pub i_start: usize,
    /// One past the last node.
    pub i_end: usize,
    /// Tensors of other backends that this split reads through a copy, in first-use order.
    pub inputs: Vec<*mut ggml_tensor>,
    /// The table ids of `inputs`, in the same order: the passes after splitting look inputs
    /// up by id, not by address.
    pub input_ids: Vec<usize>,
    /// For each of `inputs`, with the in-place rule on and the input a view: the backend of
    /// the last node before the split that wrote the input's bytes ([`last_writer`]), which
    /// its copy is ordered after; `None` otherwise (ordered after the input's own placement,
    /// as stock orders every input).
    pub input_writers: Vec<Option<usize>>,
    /// The view of the user's graph over `[i_start, i_end)` given to the backend (set after
    /// splitting). In a cell because backends receive it as `*mut` from shared borrows.
    pub graph: UnsafeCell<ggml_cgraph>,
}

impl Split {
    fn new(backend: usize, i_start: usize) -> Split {
        Split {
            backend,
            i_start,
            i_end: i_start,
            inputs: Vec::new(),
            input_ids: Vec::new(),
            input_writers: Vec::new(),
            graph: UnsafeCell::new(ggml_cgraph::default()),
        }
    }
}

/// What a split pass needs besides the table.
pub struct SplitCtx<'a> {
    /// Backends' answers.
    pub caps: &'a dyn Caps,
    /// Where copies' headers are made.
    pub pool: &'a mut CtxPool,
    /// Pipeline copies per input (1 without pipeline parallelism).
    pub n_copies: usize,
    /// The copy the current graph uses.
    pub cur_copy: usize,
    /// Every source the split pass replaced by a copy: (node position, source slot, copy),
    /// `n_copies` entries per replaced source (pipeline copy 0 first), for a replay of this
    /// split with any current copy ([`super::replay`]).
    pub rewrites: &'a mut Vec<(u32, u8, *mut ggml_tensor)>,
    /// Every source the split pass replaced by a copy, as it was: (node, source slot, the
    /// source), so that a graph split only to be measured can be given its sources back
    /// ([`super::Sched::restore_sources`]).
    pub originals: &'a mut Vec<(*mut ggml_tensor, u8, *mut ggml_tensor)>,
    /// Whether a view source is judged by where its bytes are, its view root's storage or
    /// placement, instead of its own placement (on with the in-place rule; stock judges a
    /// view by its own placement, see [`view_root_usable`]).
    pub view_roots: bool,
}

/// A new tensor with `src`'s type, shape and strides (stock's `ggml_dup_tensor_layout`),
/// named `"{backend}#{src name}#{copy}"` cut to 63 bytes as stock's `ggml_format_name`
/// does, in the pool. The name is written in place: one copy is made per split input, and
/// going through `format!` and a `CString` cost an allocation or three each.
///
/// # Safety
/// `src` must be a live tensor.
pub(crate) unsafe fn dup_named(
    pool: &mut CtxPool,
    src: *mut ggml_tensor,
    backend_name: &[u8],
    copy: usize,
) -> *mut ggml_tensor {
    let ctx = pool.ctx(1);
    // SAFETY: `ctx` is a live context with room for one more header (`CtxPool::ctx`), and
    // `src` is live (this function's contract).
    let t = unsafe { ggml_sys::ggml_dup_tensor(ctx, src) };
    // SAFETY: `src` is live (this function's contract); only read.
    let s = unsafe { &*src };
    // SAFETY: `t` is the header just made (ggml aborts rather than return NULL), distinct
    // from `src` and referenced from nowhere else.
    let t_ref = unsafe { &mut *t };
    t_ref.nb = s.nb;
    // SAFETY: ggml keeps a tensor's `name` NUL-terminated within its 64 bytes (its setters
    // truncate), and `s` outlives the borrow.
    let src_name = unsafe { std::ffi::CStr::from_ptr(s.name.as_ptr()) }.to_bytes();
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut c = copy;
    loop {
        at -= 1;
        digits[at] = b'0' + (c % 10) as u8;
        c /= 10;
        if c == 0 {
            break;
        }
    }
    set_name(t_ref, &[backend_name, b"#", src_name, b"#", &digits[at..]]);
    t
}

/// A view of all of `src` in the pool: what `ggml_view_tensor` makes (same type, shape and
/// strides, the view source resolved to the root with its offset, the data address when the
/// root has one, the name `"{src name} (view)"` cut to 63 bytes), without formatting the
/// name through `vsnprintf` (4 % of a scheduling cycle: the allocation graph has one such
/// view per split input). `src` must be a valid tensor, as for `ggml_view_tensor`.
///
/// # Safety
/// `src` and its view source must be live tensors.
pub(crate) unsafe fn view_of(pool: &mut CtxPool, src: *mut ggml_tensor) -> *mut ggml_tensor {
    // SAFETY: `src` is live (this function's contract); only read.
    let s = unsafe { &*src };
    let ctx = pool.ctx(1);
    // SAFETY: `ctx` is a live context with room for one more header (`CtxPool::ctx`);
    // `ne` holds GGML_MAX_DIMS sizes.
    let t = unsafe {
        ggml_sys::ggml_new_tensor(ctx, s.type_, ggml_sys::GGML_MAX_DIMS as i32, s.ne.as_ptr())
    };
    let (root, offs) = if s.view_src.is_null() {
        (src, 0)
    } else {
        (s.view_src, s.view_offs)
    };
    // SAFETY: `t` is the header just made (ggml aborts rather than return NULL), distinct
    // from `src` and its root and referenced from nowhere else.
    let v = unsafe { &mut *t };
    v.view_src = root;
    v.view_offs = offs;
    // SAFETY: `root` is `src` or its view source, both live (this function's contract).
    let root_data = unsafe { (*root).data };
    v.data = if root_data.is_null() {
        std::ptr::null_mut()
    } else {
        // SAFETY: `offs` is `src`'s offset in its root, which ggml checked to lie within
        // the root's storage when it made the view (`ggml_view_impl`'s bound assert).
        unsafe { root_data.cast::<u8>().add(offs) }.cast()
    };
    v.nb = s.nb;
    // SAFETY: ggml keeps a tensor's `name` NUL-terminated within its 64 bytes.
    let name = unsafe { std::ffi::CStr::from_ptr(s.name.as_ptr()) }.to_bytes();
    set_name(v, &[name, b" (view)"]);
    t
}

/// Writes the concatenation of `parts` as `t`'s name, cut to 63 bytes and NUL-terminated,
/// as `snprintf` into the 64-byte field would.
fn set_name(t: &mut ggml_tensor, parts: &[&[u8]]) {
    let name = &mut t.name;
    let room = name.len() - 1;
    let mut n = 0;
    for &byte in parts.iter().flat_map(|p| p.iter()) {
        if n == room {
            break;
        }
        name[n] = byte as std::os::raw::c_char;
        n += 1;
    }
    name[n] = 0;
}

/// Every backend's name, as bytes for [`dup_named`].
fn backend_names(caps: &dyn Caps) -> Vec<Vec<u8>> {
    (0..caps.n_backends())
        .map(|b| caps.backend_name(b).into_bytes())
        .collect()
}

/// Whether backend `b` can use the memory of view `s`'s root (the end of its view-source
/// chain), where a view's bytes are: the root's buffer when it has storage, else the compute
/// buffer type of the backend the root is placed on. `None` for a tensor that is no view,
/// and for a root with no storage and no place (nothing to judge it by): the caller then
/// judges the tensor by its own placement, as stock judges every source. A view placed
/// apart from its root (a user's assignment of the view, say) computes nothing where it is
/// placed, so judged by that placement a reader beside its root was given a copy, made at
/// its split's start before the root was computed (stale), and a reader beside the view
/// none, of memory it cannot use.
///
/// # Safety
/// `s` and its view sources must be live tensors.
unsafe fn view_root_usable(
    caps: &dyn Caps,
    table: &Table,
    s: *mut ggml_tensor,
    b: usize,
) -> Option<bool> {
    // SAFETY: the caller's contract.
    let root = unsafe { meta::view_root(s) };
    if root == s {
        return None;
    }
    // SAFETY: as above.
    if unsafe { (*root).buffer.is_null() } {
        // Judged by its placement: none settles nothing, and the reader's own backend uses
        // its own buffer type (`ggml_backend_sched_new` checked it). Most views read in a
        // graph (a reshape or permute of a node beside its reader) end here, one lookup each,
        // without asking the shared rule, which looks the placement up again.
        match table.backend(root) {
            None => return None,
            Some(rb) if rb == b => return Some(true),
            Some(_) => {}
        }
    }
    // SAFETY: `root` is live and no view.
    Some(unsafe { buffer_supported(caps, table, root, b) })
}

/// Lists `s` (table id `sid`) as an input of `split`, with the backend its copy is ordered
/// after when `view_roots` ([`last_writer`]).
///
/// # Safety
/// As [`last_writer`].
#[allow(clippy::too_many_arguments)]
unsafe fn push_input(
    split: &mut Split,
    view_roots: bool,
    table: &Table,
    ix: &GraphIds,
    nodes: &[*mut ggml_tensor],
    s: *mut ggml_tensor,
    sid: usize,
) {
    let writer = if view_roots {
        // SAFETY: the caller's contract.
        unsafe { last_writer(table, ix, nodes, s, split.i_start) }
    } else {
        None
    };
    split.inputs.push(s);
    split.input_ids.push(sid);
    split.input_writers.push(writer);
}

/// The view roots that some node of `nodes` writes in place.
///
/// # Safety
/// `nodes` must be live tensors with live view sources.
unsafe fn roots_written_in_place(
    nodes: &[*mut ggml_tensor],
) -> rustc_hash::FxHashSet<*mut ggml_tensor> {
    nodes
        .iter()
        // SAFETY: the caller's contract.
        .filter_map(|&n| unsafe { root_written_in_place(n) })
        .collect()
}

/// The view root whose bytes node `n` writes in place, when `n` is an in-place writer. The
/// one definition of a write the copy checks of this pass count ([`roots_written_in_place`],
/// [`written_between`], [`last_writer`]).
///
/// # Safety
/// `n` and its view sources must be live.
unsafe fn root_written_in_place(n: *mut ggml_tensor) -> Option<*mut ggml_tensor> {
    // SAFETY: the caller's contract; only read.
    let writes = super::inplace::is_inplace_writer(unsafe { &*n });
    // SAFETY: as above.
    writes.then(|| unsafe { meta::view_root(n) })
}

/// Whether a node in `nodes[from..to)` wrote the bytes of `s` in place: an in-place writer
/// whose view root is `s`'s. A source's copy is made once per backend, in the first split
/// that needs it (stock's design), and later splits of that backend read the same copy: when
/// its source was written in place in between, they read the bytes from before the write.
/// Stock and ours with the rule off do (a break helper's case, 2026-12-08); with the rule the
/// later split lists the source again, so its copy is filled anew. Scans the nodes between;
/// only a copy read again by a later split of its backend pays it.
///
/// # Safety
/// `s` and its view source must be live; `nodes` the live graph's.
unsafe fn written_between(
    nodes: &[*mut ggml_tensor],
    s: *mut ggml_tensor,
    from: usize,
    to: usize,
) -> bool {
    // SAFETY: the caller's contract.
    let root = unsafe { meta::view_root(s) };
    nodes[from.min(nodes.len())..to.min(nodes.len())]
        .iter()
        // SAFETY: nodes of the live graph, with live view sources.
        .any(|&n| unsafe { root_written_in_place(n) } == Some(root))
}

/// For a view `s` read through a copy by a split starting at node `i_start`: the backend of
/// the last node before it that wrote `s`'s bytes, its view root's producer or an in-place
/// writer of that root (a view's `view_src` is its root, so the chain of views names no
/// writer in between; the writers are found in the graph). `None` for a tensor that is no
/// view, and for a root no node of the graph wrote before the split (a weight, a cache
/// written by an earlier graph, an input the user set): the copy is then ordered after the
/// view's own placement, as stock orders it. Scans back from the split's start, so it costs
/// a view input up to one pass over the nodes before it, and a tensor that is no view
/// nothing.
///
/// # Safety
/// `s` and its view source must be live; `nodes` the live graph's, `ix` its ids.
unsafe fn last_writer(
    table: &Table,
    ix: &GraphIds,
    nodes: &[*mut ggml_tensor],
    s: *mut ggml_tensor,
    i_start: usize,
) -> Option<usize> {
    // SAFETY: the caller's contract.
    let root = unsafe { meta::view_root(s) };
    if root == s {
        return None;
    }
    nodes[..i_start.min(nodes.len())]
        .iter()
        .zip(&ix.nodes)
        .rev()
        // SAFETY: nodes of the live graph, with live view sources.
        .find(|&(&n, _)| n == root || unsafe { root_written_in_place(n) } == Some(root))
        .and_then(|(_, &id)| table.backend_at(id))
}

/// Whether backend `b` reads source `s` without a copy, as the split pass judges it: with
/// `view_roots` (the in-place rule), a view by its root's memory ([`view_root_usable`]);
/// otherwise, and for a view whose root gives nothing to judge by, by `own_placement`, the
/// source's own placement on `b` or in a buffer type `b` can use (stock's test). The in-place
/// rule's prediction of ggml-alloc asks the same, so that it counts the copies the split
/// pass will make.
///
/// # Safety
/// `s` and its view sources must be live tensors.
pub(super) unsafe fn reads_directly(
    caps: &dyn Caps,
    table: &Table,
    s: *mut ggml_tensor,
    b: usize,
    view_roots: bool,
    own_placement: impl FnOnce() -> bool,
) -> bool {
    // SAFETY: the caller's contract.
    let by_root = if view_roots && unsafe { !(*s).view_src.is_null() } {
        // SAFETY: as above.
        unsafe { view_root_usable(caps, table, s, b) }
    } else {
        None
    };
    by_root.unwrap_or_else(own_placement)
}

/// Pass 5 over `graph`: replaces the contents of `splits` with the graph's splits. Sources
/// that need a copy are replaced in the nodes by the copy for `cur_copy` (as stock does,
/// this edits the user's graph). `first_fallback` is the backend of the first split when
/// every node is a view op (stock keeps its previous first split's backend then).
/// `spare` holds splits of earlier graphs to be reused (their input lists keep their
/// memory); the old contents of `splits` go there first.
///
/// # Safety
/// `graph` must be a live graph of live tensors, every node placed.
pub unsafe fn split_graph(
    sc: &mut SplitCtx,
    table: &mut Table,
    graph: &ggml_cgraph,
    ix: &GraphIds,
    first_fallback: usize,
    splits: &mut Vec<Split>,
    spare: &mut Vec<Split>,
) {
    let caps = sc.caps;
    let names = backend_names(caps);
    spare.append(splits);
    let mut new_split = |backend: usize, i_start: usize| match spare.pop() {
        Some(mut s) => {
            s.backend = backend;
            s.i_start = i_start;
            s.i_end = i_start;
            s.inputs.clear();
            s.input_ids.clear();
            s.input_writers.clear();
            *s.graph.get_mut() = ggml_cgraph::default();
            s
        }
        None => Split::new(backend, i_start),
    };
    // SAFETY: `graph` is live and not resized during the pass (this function's contract).
    let nodes = unsafe { inspect::nodes(graph) };
    // With the rule, the table notes where each copy made in this pass was last filled (the
    // start of its split), so that a later split reading it after its source was written in
    // place lists the source again and fills it anew ([`written_between`]). The view roots
    // some node writes in place, found on the first copy read by a later split (most of
    // those are of inputs and weights, which nothing writes: no scan for them after it).
    let mut written_roots: Option<rustc_hash::FxHashSet<*mut ggml_tensor>> = None;
    let first = ix
        .compute
        .first()
        .and_then(|&i| table.backend_at(ix.nodes[i as usize]))
        .unwrap_or(first_fallback);
    splits.push(new_split(first, 0));
    let mut cur = first;
    for &i in &ix.compute {
        let i = i as usize;
        // SAFETY: a node of the live graph, non-NULL (`GraphIds::rebuild` stopped on NULL),
        // so a live tensor; this is the only reference to it while it is used: a graph is
        // acyclic, so none of its sources (read below) is the node itself.
        let node = unsafe { &mut *nodes[i] };
        let Some(nb) = table.backend_at(ix.nodes[i]) else {
            crate::ffi::fatal(
                c_name!(sched::ggml_backend_sched_split_graph),
                "GGML_ASSERT(node_backend_id != -1) failed: all nodes should be assigned by now",
            );
        };
        let mut need_new = false;
        if nb == cur && !splits.last().is_none_or(|s| s.inputs.is_empty()) {
            // A weight of another, incompatible backend: a new split lets the copies of the
            // previous weights be reused.
            need_new = sources_at(node, ix, i).any(|(s, sid)| {
                // SAFETY: `sources_at` yields only non-NULL sources, and a source of a live
                // node is live (this function's contract).
                let sr = unsafe { &*s };
                // SAFETY: a live tensor's non-NULL buffer is live (`&&` skips NULL).
                let weights = !sr.buffer.is_null()
                    && unsafe { (*sr.buffer).usage } == ggml_sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS;
                // SAFETY: `s` and its view source are live (as above).
                weights
                    && table.backend_at(sid) != Some(cur)
                    && !unsafe { buffer_supported_at(caps, table, s, sid, cur) }
            });
        }
        if nb != cur || need_new {
            if let Some(last) = splits.last_mut() {
                last.i_end = i;
            }
            splits.push(new_split(nb, i));
            cur = nb;
        }
        for j in 0..ix.n_srcs[i] as usize {
            let s = node.src[j];
            if s.is_null() {
                continue;
            }
            let sid = ix.srcs[i][j] as usize;
            let Some(sb) = table.backend_at(sid) else {
                crate::ffi::fatal(
                    c_name!(sched::ggml_backend_sched_split_graph),
                    "GGML_ASSERT(src_backend_id != -1) failed: all inputs should be assigned by now",
                );
            };
            // SAFETY: `s` is a non-NULL source of a live node, so live, as is its view source
            // (this function's contract).
            let direct = unsafe {
                reads_directly(caps, table, s, cur, sc.view_roots, || {
                    // SAFETY: as above.
                    sb == cur || buffer_supported_at(caps, table, s, sid, cur)
                })
            };
            if direct {
                continue;
            }
            let fill = table.copy_fill(sid, cur);
            if fill.is_none() {
                let (pool, n_copies) = (&mut *sc.pool, sc.n_copies);
                table.set_copies_at(
                    sid,
                    cur,
                    (0..n_copies).map(|c| {
                        // SAFETY: `s` is live (see `buffer_supported_at` above).
                        let t = unsafe { dup_named(pool, s, &names[cur], c) };
                        if n_copies > 1 {
                            // SAFETY: `t` is the live header just made; only its flags change.
                            unsafe { ggml_sys::ggml_set_input(t) };
                            // SAFETY: as above.
                            unsafe { ggml_sys::ggml_set_output(t) };
                        }
                        t
                    }),
                );
                if let Some(last) = splits.last_mut() {
                    // SAFETY: `s` is live with its view sources; `nodes` are the live
                    // graph's, placed.
                    unsafe { push_input(last, sc.view_roots, table, ix, nodes, s, sid) };
                    if sc.view_roots {
                        table.set_copy_fill(sid, cur, last.i_start);
                    }
                }
            } else if let (Some(since), Some(last), true) = (fill, splits.last_mut(), sc.view_roots)
            {
                // Not known (u32::MAX: made by an earlier split pass) reads as never later.
                let since = since as usize;
                if since < last.i_start {
                    let written = written_roots.get_or_insert_with(|| {
                        // SAFETY: `nodes` are the live graph's, with live view sources.
                        unsafe { roots_written_in_place(nodes) }
                    });
                    // SAFETY: `s` is live with its view sources (as above).
                    let root = unsafe { meta::view_root(s) };
                    if written.contains(&root)
                        // SAFETY: as above; `nodes` are the live graph's.
                        && unsafe { written_between(nodes, s, since, last.i_start) }
                    {
                        // Filled before its source was written again: fill it anew here.
                        // SAFETY: as above.
                        unsafe { push_input(last, sc.view_roots, table, ix, nodes, s, sid) };
                        table.set_copy_fill(sid, cur, last.i_start);
                    }
                }
            }
            let copy = match table.copies_at(sid, cur) {
                Some(copies) => {
                    // Every pipeline copy's, so that a replay with another current copy
                    // can pick its own.
                    let at = (i as u32, j as u8);
                    sc.rewrites.extend(copies.iter().map(|&c| (at.0, at.1, c)));
                    copies.get(sc.cur_copy).copied().unwrap_or(s)
                }
                None => s,
            };
            if copy != s {
                sc.originals.push((nodes[i], j as u8, s));
            }
            node.src[j] = copy;
        }
    }
    if let Some(last) = splits.last_mut() {
        last.i_end = nodes.len();
    }
}

/// Pass 6 (only with more than one pipeline copy): every graph input leaf gets one tensor per
/// copy on its own backend, the current copy being the leaf itself, all flagged input and
/// output so the allocator never reuses them. Returns the graph inputs in leaf order.
///
/// Differs from stock on purpose: an input leaf whose storage the caller already gave it
/// (pre-allocated `data`, or a `view_src`) gets no copies. The copies rotate storage by
/// letting the allocator place the leaf itself at copy `cur_copy`'s slot; storage the
/// allocator does not own cannot rotate, and stock, which copies it anyway, hands the
/// allocator a slot recorded as "not allocated" that holds a fresh copy one round later:
/// SIGSEGV in `ggml_gallocr_alloc_graph` (case `parallel sched, pre-allocated input` of
/// cabi-tests/bad-input/run.sh).
///
/// # Safety
/// `graph` must be a live graph of live tensors, every input leaf placed.
pub unsafe fn graph_inputs(
    sc: &mut SplitCtx,
    table: &mut Table,
    graph: &ggml_cgraph,
) -> Vec<*mut ggml_tensor> {
    let mut inputs = Vec::new();
    if sc.n_copies <= 1 {
        return inputs;
    }
    // SAFETY: `graph` is live and not resized during the pass (this function's contract).
    let leafs = unsafe { inspect::leafs(graph) };
    for &leaf in leafs {
        // SAFETY: a leaf of the live graph, non-NULL (`GraphIds::rebuild` stopped on NULL),
        // so a live tensor.
        if unsafe { (*leaf).flags } & ggml_sys::GGML_TENSOR_FLAG_INPUT as i32 == 0 {
            continue;
        }
        // SAFETY: as above.
        let (data, view_src) = unsafe { ((*leaf).data, (*leaf).view_src) };
        if !data.is_null() || !view_src.is_null() {
            continue;
        }
        let Some(lb) = table.backend(leaf) else {
            crate::ffi::fatal(
                c_name!(sched::ggml_backend_sched_split_graph),
                "GGML_ASSERT(leaf_backend_id != -1) failed: all leafs should be assigned by now",
            );
        };
        if !table.has_copies(leaf, lb) {
            let bname = sc.caps.backend_name(lb).into_bytes();
            let (pool, cur_copy) = (&mut *sc.pool, sc.cur_copy);
            let id = table.id(leaf);
            table.set_copies_at(
                id,
                lb,
                (0..sc.n_copies).map(|c| {
                    let t = if c == cur_copy {
                        leaf
                    } else {
                        // SAFETY: `leaf` is live (above).
                        unsafe { dup_named(pool, leaf, &bname, c) }
                    };
                    // SAFETY: `t` is the live leaf or the live header just made, with no
                    // reference held to it; only its flags change.
                    unsafe { ggml_sys::ggml_set_input(t) };
                    // SAFETY: as above.
                    unsafe { ggml_sys::ggml_set_output(t) };
                    t
                }),
            );
        }
        inputs.push(leaf);
    }
    inputs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mock::{build, graph, no_tweak, Arena, Case, Def::*, Mock};
    use crate::sched::table::Cause;
    use ggml_sys::*;

    fn name_of(t: *mut ggml_tensor) -> String {
        // SAFETY: tensors of the test are live.
        inspect::name(unsafe { &*t })
    }

    #[test]
    fn copy_names_are_cut_like_snprintf() {
        let mut a = Arena::default();
        let long = "n".repeat(63);
        let src = a.tensor(&long, GGML_OP_ADD, &[]);
        let short = a.tensor("w", GGML_OP_ADD, &[]);
        let mut pool = CtxPool::new(4);
        // SAFETY: the tensors live in the arena, the copies in the pool.
        unsafe {
            // snprintf(name, 64, "%s#%s#%d", ...): at most 63 bytes and a NUL.
            let c = dup_named(&mut pool, src, b"HRX0", 12);
            let want = format!("HRX0#{long}#12");
            assert_eq!(name_of(c), want[..63]);
            assert_eq!(name_of(dup_named(&mut pool, short, b"CPU", 0)), "CPU#w#0");
            assert_eq!(
                name_of(dup_named(&mut pool, short, b"CPU", 1234567)),
                "CPU#w#1234567"
            );
            assert_eq!((*c).ne, (*src).ne);
            assert_eq!((*c).nb, (*src).nb);
        }
        pool.reset();
    }

    #[test]
    fn view_of_is_ggml_view_tensor() {
        let mut pool = CtxPool::new(16);
        // SAFETY: the tensors live in the pool's context until the reset at the end.
        unsafe {
            let ctx = pool.ctx(4);
            let ne = [6i64, 5, 4, 3];
            let base = ggml_new_tensor(ctx, GGML_TYPE_F32, 4, ne.as_ptr());
            (*base).data = 0x10_0000 as *mut std::os::raw::c_void; // an address, never read
            let long = std::ffi::CString::new("b".repeat(60)).unwrap();
            ggml_set_name(base, long.as_ptr());
            let perm = ggml_permute(ctx, base, 1, 0, 2, 3);
            let part = ggml_view_2d(ctx, base, 3, 2, (*base).nb[1], 8);
            let unalloc = ggml_new_tensor(ctx, GGML_TYPE_F16, 4, ne.as_ptr());
            for src in [base, perm, part, unalloc] {
                let want = &*ggml_view_tensor(ctx, src);
                let got = &*view_of(&mut pool, src);
                assert_eq!(got.type_, want.type_);
                assert_eq!(got.ne, want.ne);
                assert_eq!(got.nb, want.nb);
                assert_eq!(got.op, want.op);
                assert_eq!(got.flags, want.flags);
                assert_eq!(got.view_src, want.view_src);
                assert_eq!(got.view_offs, want.view_offs);
                assert_eq!(got.data, want.data);
                assert_eq!(got.src, want.src);
                assert!(got.buffer.is_null() && want.buffer.is_null());
                assert_eq!(inspect::name(got), inspect::name(want));
            }
        }
        pool.reset();
    }

    /// A view placed apart from its root (a user's assignment of the view) is read where its
    /// bytes are, the root's memory. With the in-place rule on: a reader beside the view
    /// that cannot use the root's buffer type gets a copy, one that can needs none, and a
    /// reader beside the root reads the view directly. Stock (and the rule off) judges the
    /// view by its own placement: no copy for the reader beside the view, and a copy for the
    /// reader beside the root, made at the start of the split that computes the root, so
    /// stale (a break helper's case, `cabi-tests/sched-waits`' view_apart).
    #[test]
    fn a_view_placed_apart_from_its_root_is_read_where_its_bytes_are() {
        // (rule, root's backend, view's backend, the reader B0 can use the CPU's memory,
        // whether B0 reads a copy); backend 2 is the CPU.
        for (view_roots, root_on, view_on, reader_uses_cpu, copy) in [
            (true, 2, 0, false, true),
            (false, 2, 0, false, false),
            (true, 2, 0, true, false),
            (true, 0, 2, false, false),
            (false, 0, 2, false, true),
        ] {
            let mut caps = Mock::new(&[&[GGML_OP_ADD], &[GGML_OP_ADD], &[GGML_OP_ADD]]);
            if !reader_uses_cpu {
                // B0 cannot use the CPU's host buffer type.
                caps.backends[0].bufts.remove(&0x300);
            }
            let mut a = Arena::default();
            let x = a.input("x");
            let r = a.tensor("r", GGML_OP_ADD, &[x, x]);
            let v = a.view_node("v", ggml_sys::GGML_OP_VIEW, r, &[r]);
            let n = a.tensor("n", GGML_OP_ADD, &[v, v]);
            let mut nodes = vec![r, v, n];
            let mut leafs = vec![x];
            let g = graph(&mut nodes, &mut leafs);
            let mut t = Table::default();
            t.set(x, 2, Cause::Input);
            t.set(r, root_on, Cause::UserAssigned);
            t.set(v, view_on, Cause::UserAssigned);
            t.set(n, 0, Cause::UserAssigned);
            let mut pool = CtxPool::new(4);
            let splits = split_once(&caps, &mut t, &g, &mut pool, view_roots);
            // SAFETY: as above.
            let read = unsafe { (*n).src[0] };
            let case = format!(
                "view_roots {view_roots}, root on {root_on}, view on {view_on}, \
                 reader uses the CPU's memory {reader_uses_cpu}"
            );
            // The split inputs besides x (read by r through a copy when r is on B0).
            let inputs: Vec<_> = splits
                .iter()
                .flat_map(|s| s.inputs.clone())
                .filter(|&i| i != x)
                .collect();
            if copy {
                assert_eq!(name_of(read), "B0#v#0", "{case}");
                assert_eq!(inputs, vec![v], "{case}");
            } else {
                assert_eq!(read, v, "{case}");
                assert!(inputs.is_empty(), "{case}");
            }
            pool.reset();
        }
    }

    /// The backend a view input's copy is ordered after: the last node before the split that
    /// wrote the view's root (its producer, or an in-place writer of it, found in the graph
    /// because a view names only its root); none for a tensor that is no view or a root no
    /// node wrote (a leaf), whose copy follows its own placement.
    #[test]
    fn a_view_inputs_copy_follows_the_last_writer_of_its_root() {
        let mut a = Arena::default();
        let x = a.input("x");
        let k = a.leaf("k", std::ptr::null_mut());
        let c = a.tensor("c", GGML_OP_ADD, &[x, x]);
        let w = a.view_node("w", GGML_OP_ADD, c, &[c, x]);
        let v = a.view_node("v", ggml_sys::GGML_OP_VIEW, w, &[w]);
        let kv = a.view_node("kv", ggml_sys::GGML_OP_VIEW, k, &[k]);
        let r = a.tensor("r", GGML_OP_ADD, &[v, kv]);
        let mut nodes = vec![c, w, v, kv, r];
        let mut leafs = vec![x, k];
        let g = graph(&mut nodes, &mut leafs);
        let mut t = Table::default();
        for (n, b) in [(x, 2), (k, 2), (c, 2), (w, 0), (v, 2), (kv, 2), (r, 1)] {
            t.set(n, b, Cause::UserAssigned);
        }
        // SAFETY: tensors live in the arena.
        let ix = unsafe { GraphIds::new(&mut t, &g) };
        // SAFETY: as above.
        let nodes = unsafe { inspect::nodes(&g) };
        // SAFETY: as above.
        let writer = |s, i_start| unsafe { last_writer(&t, &ix, nodes, s, i_start) };
        // v's root is c, written last by w (on backend 0) before r's split at node 4.
        assert_eq!(writer(v, 4), Some(0));
        // Before w, the last writer is c's producer (backend 2).
        assert_eq!(writer(v, 1), Some(2));
        // A view of a leaf no node writes, and a tensor that is no view: no writer.
        assert_eq!(writer(kv, 4), None);
        assert_eq!(writer(c, 4), None);
    }

    /// A source's copy is made once per backend; a later split of that backend that reads
    /// it after an in-place write of the source lists it again, so that its copy is filled
    /// anew (with the in-place rule; stock, and the rule off, read the first fill).
    #[test]
    fn a_copy_read_again_after_its_source_was_written_is_filled_anew() {
        for view_roots in [true, false] {
            let mut caps = Mock::new(&[&[GGML_OP_ADD], &[GGML_OP_ADD]]);
            caps.backends[0].bufts.remove(&0x200); // B0 cannot use the CPU's memory
            let mut a = Arena::default();
            let x = a.input("x");
            let c = a.tensor("c", GGML_OP_ADD, &[x, x]);
            let n1 = a.tensor("n1", GGML_OP_ADD, &[c, c]);
            let w = a.view_node("w", GGML_OP_ADD, c, &[c, x]);
            let n2 = a.tensor("n2", GGML_OP_ADD, &[n1, c]);
            let mut nodes = vec![c, n1, w, n2];
            let mut leafs = vec![x];
            let g = graph(&mut nodes, &mut leafs);
            let mut t = Table::default();
            for (n, b) in [(x, 1), (c, 1), (n1, 0), (w, 1), (n2, 0)] {
                t.set(n, b, Cause::UserAssigned);
            }
            let mut pool = CtxPool::new(4);
            let splits = split_once(&caps, &mut t, &g, &mut pool, view_roots);
            let shape: Vec<_> = splits
                .iter()
                .map(|s| (s.backend, s.i_start, s.inputs.clone()))
                .collect();
            let second = if view_roots { vec![c] } else { vec![] };
            assert_eq!(
                shape,
                vec![
                    (1, 0, vec![]),
                    (0, 1, vec![c]),
                    (1, 2, vec![]),
                    (0, 3, second)
                ],
                "view_roots {view_roots}"
            );
            pool.reset();
        }
    }

    /// Runs the split pass over `g` with `t`'s placements and no pipeline copies: the splits.
    /// The copies' headers live in `pool`.
    fn split_once(
        caps: &Mock,
        t: &mut Table,
        g: &ggml_cgraph,
        pool: &mut CtxPool,
        view_roots: bool,
    ) -> Vec<Split> {
        let mut sc = SplitCtx {
            caps,
            pool,
            n_copies: 1,
            cur_copy: 0,
            rewrites: &mut Vec::new(),
            originals: &mut Vec::new(),
            view_roots,
        };
        // SAFETY: the caller's tensors live in its arena; the copies in the pool.
        let ix = unsafe { GraphIds::new(t, g) };
        let mut splits = Vec::new();
        // SAFETY: as above; the caller placed every node.
        unsafe { split_graph(&mut sc, t, g, &ix, 0, &mut splits, &mut Vec::new()) };
        splits
    }

    #[test]
    fn splits_inputs_and_copies() {
        let mut caps = Mock::new(&[&[GGML_OP_ADD], &[GGML_OP_ADD, GGML_OP_MUL]]);
        caps.backends[0].bufts.remove(&0x200); // the device cannot read host memory
        let mut a = Arena::default();
        let x = a.input("x");
        let n0 = a.tensor("n0", GGML_OP_ADD, &[x, x]);
        let n1 = a.tensor("n1", GGML_OP_MUL, &[n0, n0]);
        let n2 = a.tensor("n2", GGML_OP_ADD, &[n0, n1]);
        let mut nodes = vec![n0, n1, n2];
        let mut leafs = vec![x];
        let g = graph(&mut nodes, &mut leafs);
        let mut t = Table::default();
        t.set(x, 1, Cause::Input);
        t.set(n0, 0, Cause::UserAssigned);
        t.set(n1, 1, Cause::UserAssigned);
        t.set(n2, 0, Cause::UserAssigned);
        let mut pool = CtxPool::new(4);
        let mut sc = SplitCtx {
            caps: &caps,
            pool: &mut pool,
            n_copies: 2,
            cur_copy: 1,
            rewrites: &mut Vec::new(),
            originals: &mut Vec::new(),
            view_roots: false,
        };
        // SAFETY: tensors live in the arena; the copies in the pool.
        let ix = unsafe { GraphIds::new(&mut t, &g) };
        let mut splits = Vec::new();
        // SAFETY: as above; every node is placed.
        unsafe { split_graph(&mut sc, &mut t, &g, &ix, 0, &mut splits, &mut Vec::new()) };
        let shape: Vec<_> = splits
            .iter()
            .map(|s| {
                (
                    s.backend,
                    s.i_start,
                    s.i_end,
                    s.inputs.iter().map(|&i| name_of(i)).collect::<Vec<_>>(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (0, 0, 1, vec!["x".to_string()]),
                (1, 1, 2, vec!["n0".to_string()]),
                (0, 2, 3, vec!["n1".to_string()]),
            ]
        );
        // The nodes now read the copies for copy 1; n2 reads n0 directly (same backend).
        // SAFETY: as above.
        unsafe {
            assert_eq!(name_of((*n0).src[0]), "B0#x#1");
            assert_eq!((*n0).src[0], (*n0).src[1]);
            assert_eq!(name_of((*n1).src[0]), "B1#n0#1");
            assert_eq!((*n2).src[0], n0);
            assert_eq!(name_of((*n2).src[1]), "B0#n1#1");
            let c0 = t.copy(x, 0, 0).unwrap();
            assert_eq!(name_of(c0), "B0#x#0");
            assert_eq!(
                (*c0).flags & (GGML_TENSOR_FLAG_INPUT | GGML_TENSOR_FLAG_OUTPUT) as i32,
                3
            );
            assert_eq!((*c0).ne, (*x).ne);
        }
        // Pass 6: the graph input gets one tensor per copy on its own backend; the current
        // copy is the input itself.
        let mut sc = SplitCtx {
            caps: &caps,
            pool: &mut pool,
            n_copies: 2,
            cur_copy: 1,
            rewrites: &mut Vec::new(),
            originals: &mut Vec::new(),
            view_roots: false,
        };
        // SAFETY: as above.
        let inputs = unsafe { graph_inputs(&mut sc, &mut t, &g) };
        assert_eq!(inputs, vec![x]);
        assert_eq!(t.copy(x, 1, 1), Some(x));
        assert_eq!(name_of(t.copy(x, 1, 0).unwrap()), "B1#x#0");
        pool.reset();
    }

    /// Pass 6 leaves alone the input leafs whose storage the caller gave (pre-allocated data,
    /// or a view), and copies the others; stock copies both (and then crashes in the allocator
    /// one round later: `parallel sched, pre-allocated input` in cabi-tests/bad-input/run.sh).
    #[test]
    fn graph_inputs_skip_caller_storage() {
        let caps = Mock::new(&[&[GGML_OP_ADD]]);
        let mut a = Arena::default();
        let x = a.input("x");
        let pre = a.input("pre");
        let viewed = a.input("viewed");
        let mut storage = [0u8; 64];
        // SAFETY: tensors of the arena are live; only their storage fields change.
        unsafe {
            (*pre).data = storage.as_mut_ptr().cast();
            (*viewed).view_src = x;
        }
        let n0 = a.tensor("n0", GGML_OP_ADD, &[x, pre]);
        let n1 = a.tensor("n1", GGML_OP_ADD, &[n0, viewed]);
        let mut nodes = vec![n0, n1];
        let mut leafs = vec![x, pre, viewed];
        let g = graph(&mut nodes, &mut leafs);
        let mut t = Table::default();
        for l in [x, pre, viewed] {
            t.set(l, 0, Cause::Input);
        }
        let mut pool = CtxPool::new(4);
        let mut sc = SplitCtx {
            caps: &caps,
            pool: &mut pool,
            n_copies: 3,
            cur_copy: 2,
            rewrites: &mut Vec::new(),
            originals: &mut Vec::new(),
            view_roots: false,
        };
        // SAFETY: tensors live in the arena; the copies in the pool.
        let inputs = unsafe { graph_inputs(&mut sc, &mut t, &g) };
        assert_eq!(inputs, vec![x]);
        assert_eq!(t.copy(x, 0, 2), Some(x));
        assert_eq!(name_of(t.copy(x, 0, 0).unwrap()), "B0#x#0");
        assert!(!t.has_copies(pre, 0));
        assert!(!t.has_copies(viewed, 0));
        pool.reset();
    }

    /// Pass 5 over three placements of one graph: the splits (backend, first node, end,
    /// input names) each gives.
    #[test]
    fn split_shapes() {
        const OPS: &[&[ggml_op]] = &[&[GGML_OP_ADD], &[GGML_OP_ADD, GGML_OP_MUL]];
        const G: &[crate::sched::mock::Def] = &[
            GraphInput("x"),
            Node("n0", GGML_OP_ADD, &["x", "x"]),
            Node("n1", GGML_OP_MUL, &["n0", "n0"]),
            Node("n2", GGML_OP_ADD, &["n0", "n1"]),
        ];
        fn device_only(m: &mut Mock) {
            m.backends[0].bufts.remove(&0x200);
        }
        type Want = &'static [(usize, usize, usize, &'static [&'static str])];
        let cases: [(Case, Want); 3] = [
            (
                Case {
                    name: "device, CPU, device; the device cannot read host memory",
                    ops: OPS,
                    tweak: device_only,
                    graph: G,
                    before: &[
                        ("x", 1, Cause::Input),
                        ("n0", 0, Cause::UserAssigned),
                        ("n1", 1, Cause::UserAssigned),
                        ("n2", 0, Cause::UserAssigned),
                    ],
                    want: &[],
                },
                &[(0, 0, 1, &["x"]), (1, 1, 2, &["n0"]), (0, 2, 3, &["n1"])],
            ),
            (
                Case {
                    name: "all on the CPU: one split, no copies",
                    ops: OPS,
                    tweak: device_only,
                    graph: G,
                    before: &[
                        ("x", 1, Cause::Input),
                        ("n0", 1, Cause::UserAssigned),
                        ("n1", 1, Cause::UserAssigned),
                        ("n2", 1, Cause::UserAssigned),
                    ],
                    want: &[],
                },
                &[(1, 0, 3, &[])],
            ),
            (
                Case {
                    name: "all on a device that reads host memory: one split, no copies",
                    ops: OPS,
                    tweak: no_tweak,
                    graph: G,
                    before: &[
                        ("x", 1, Cause::Input),
                        ("n0", 0, Cause::UserAssigned),
                        ("n1", 0, Cause::UserAssigned),
                        ("n2", 0, Cause::UserAssigned),
                    ],
                    want: &[],
                },
                &[(0, 0, 3, &[])],
            ),
        ];
        for (case, want) in &cases {
            let mut b = build(case);
            let g = b.graph();
            let mut t = Table::default();
            for &(n, backend, cause) in case.before {
                t.set(b.t(n), backend, cause);
            }
            let mut pool = CtxPool::new(4);
            // The graph's tensors are owned by `b.arena`, every node is placed; the copies
            // live in `pool` until its reset below.
            let splits = split_once(&b.caps, &mut t, &g, &mut pool, false);
            let got: Vec<_> = splits
                .iter()
                .map(|s| {
                    let names: Vec<String> = s.inputs.iter().map(|&i| name_of(i)).collect();
                    (s.backend, s.i_start, s.i_end, names)
                })
                .collect();
            let want: Vec<_> = want
                .iter()
                .map(|&(b, s, e, n)| (b, s, e, n.iter().map(|x| x.to_string()).collect()))
                .collect();
            assert_eq!(got, want, "case '{}'", case.name);
            pool.reset();
        }
    }
}
