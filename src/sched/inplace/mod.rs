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

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::caps::Caps;
use super::inspect;
use super::query::buffer_supported;
use super::table::{Cause, Table};
use crate::tensor::meta;

mod reuse;
mod stop;
#[cfg(test)]
mod tests;

use reuse::{memory_buft, possible_backends};
pub use reuse::{Reuse, ReuseMemory};
pub(crate) use stop::stop;
use stop::stop_written;

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
