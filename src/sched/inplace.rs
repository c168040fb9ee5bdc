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

use std::collections::HashMap;

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::caps::{self, Caps};
use super::table::{Cause, Table};
use super::upgrade::buffer_supported;

/// Whether `t` writes into storage it does not own: it is a view (`view_src` set) made by an
/// op that computes something (not NONE, not VIEW/RESHAPE/PERMUTE/TRANSPOSE).
pub fn is_inplace_writer(t: &ggml_tensor) -> bool {
    !t.view_src.is_null() && t.op != ggml_sys::GGML_OP_NONE && !caps::is_view_op(t.op)
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
            let uses = !buft.is_null() && caps.supports_buft(b, buft);
            let runs = ops.iter().all(|&o| caps.supports_op(b, o));
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
/// `w` must be a live tensor.
unsafe fn stop(
    caps: &dyn Caps,
    w: *mut ggml_tensor,
    buft: ggml_sys::ggml_backend_buffer_type_t,
    ops: &[*mut ggml_tensor],
) -> ! {
    let buft_name = if buft.is_null() {
        "(not allocated)".to_string()
    } else {
        caps.buft_name(buft)
    };
    crate::ffi::fatal(
        "ggml_backend_sched_split_graph",
        &format!(
            "in-place node '{}' (op {}) writes storage of '{}' in buffer type {}, and no backend can both use that buffer type and run the op; backends: {}",
            caps::name(&*w),
            caps::cstr(ggml_sys::ggml_op_desc(w)),
            caps::name(&*(*w).view_src),
            buft_name,
            backends_report(caps, buft, ops)
        ),
    )
}

/// Collects the buffer types that the storage of `t` (not allocated yet) may end up in: the
/// compute buffer type of its backend, and, because ggml-alloc lets a node of an
/// "inplace-able" op take over the memory of a source with the same layout that it reads
/// directly, whatever that source's storage may end up in, recursively.
///
/// # Safety
/// `t` must be a live tensor whose sources are live.
unsafe fn storage_bufts(
    caps: &dyn Caps,
    table: &Table,
    t: *mut ggml_tensor,
    out: &mut Vec<ggml_sys::ggml_backend_buffer_type_t>,
    depth: usize,
) {
    let tr = &*t;
    if depth > 64 {
        return;
    }
    if !tr.view_src.is_null() {
        return storage_bufts(caps, table, tr.view_src, out, depth + 1);
    }
    if !tr.buffer.is_null() {
        out.push((*tr.buffer).buft);
        return;
    }
    let Some(tb) = table.backend(t) else { return };
    let own = caps.buft(tb);
    if !out.contains(&own) {
        out.push(own);
    }
    if !caps.op_can_inplace(tr.op) {
        return;
    }
    let output = ggml_sys::GGML_TENSOR_FLAG_OUTPUT as i32;
    for (_, s) in caps::sources(tr) {
        let sr = &*s;
        let same_layout = sr.type_ == tr.type_ && sr.ne == tr.ne && sr.nb == tr.nb;
        let external = !caps::storage_buffer(sr).is_null();
        let is_output = sr.flags & output != 0
            || (!sr.view_src.is_null() && (*sr.view_src).flags & output != 0);
        // A source read through a copy gives up nothing: the copy lives in `own`.
        let direct = table.backend(s) == Some(tb) || buffer_supported(caps, table, s, tb);
        if same_layout && !external && !is_output && direct {
            storage_bufts(caps, table, s, out, depth + 1);
        }
    }
}

/// Applies the rule to every in-place writer of `graph`. Called twice: before the fill
/// pass (`after_fill` false), where groups whose root has no placement yet are left for
/// later, and after it (`after_fill` true), which settles those and re-checks the rest.
///
/// # Safety
/// `graph` must be a live graph of live tensors.
pub unsafe fn colocate(caps: &dyn Caps, table: &mut Table, graph: &ggml_cgraph, after_fill: bool) {
    // Writers of storage produced in this graph, grouped by view root in first-seen order.
    let mut groups: Vec<(*mut ggml_tensor, Vec<*mut ggml_tensor>)> = Vec::new();
    let mut group_of: HashMap<*mut ggml_tensor, usize> = HashMap::new();

    for &n in caps::nodes(graph) {
        let node = &*n;
        if !is_inplace_writer(node) {
            continue;
        }
        let root = node.view_src;
        let buf = (*root).buffer;
        if !buf.is_null() {
            let buft = (*buf).buft;
            let Some(cur) = table.backend(n) else {
                continue;
            };
            if caps.supports_buft(cur, buft) {
                continue;
            }
            match (0..caps.n_backends())
                .find(|&b| caps.supports_buft(b, buft) && caps.supports_op(b, n))
            {
                Some(b) => table.set(n, b, Cause::InPlaceColocation),
                None => stop(caps, n, buft, &[n]),
            }
        } else {
            let g = *group_of.entry(root).or_insert_with(|| {
                groups.push((root, Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push(n);
        }
    }

    for (root, writers) in groups {
        // A root without a place yet (a leaf without storage) gets one from its readers in
        // the fill pass; decide after it.
        let rb = table.backend(root);
        if rb.is_none() && !after_fill {
            continue;
        }
        let mut bufts = Vec::new();
        storage_bufts(caps, table, root, &mut bufts, 0);
        let writer_ok = |w: *mut ggml_tensor| match (table.backend(w), rb) {
            // An unplaced writer follows its view root in the fill pass.
            (None, _) => true,
            (Some(wb), Some(r)) => {
                wb == r
                    || bufts
                        .iter()
                        .all(|&b| caps.buft_is_host(b) && caps.supports_buft(wb, b))
            }
            (Some(_), None) => false,
        };
        if writers.iter().all(|&w| writer_ok(w)) {
            continue;
        }
        let members: Vec<*mut ggml_tensor> = std::iter::once(root)
            .chain(writers.iter().copied())
            .collect();
        let runs_all = |b: usize| members.iter().all(|&m| caps.supports_op(b, m));
        let user = members
            .iter()
            .filter_map(|&m| table.get(m))
            .find(|p| p.cause == Cause::UserAssigned && runs_all(p.backend))
            .map(|p| p.backend);
        let target = user.or_else(|| (0..caps.n_backends()).find(|&b| runs_all(b)));
        let Some(t) = target else {
            stop(caps, writers[0], std::ptr::null_mut(), &members)
        };
        for &m in &members {
            if table.backend(m) != Some(t) {
                table.set(m, t, Cause::InPlaceColocation);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::caps::mock::{graph, Arena, Mock};
    use ggml_sys::*;

    /// The reproducer's shape: the device claims FILL but not SET_ROWS.
    #[test]
    fn produced_storage_moves_to_one_backend() {
        let mut caps = Mock::new(&[
            &[GGML_OP_FILL, GGML_OP_ADD],
            &[GGML_OP_FILL, GGML_OP_SET_ROWS, GGML_OP_ADD],
        ]);
        // The device cannot use host memory (as HRX device-local compute buffers).
        caps.backends[0].bufts.remove(&0x200);
        let mut a = Arena::default();
        let x = a.input("x");
        let idx = a.input("idx");
        let f = a.tensor("fill", GGML_OP_FILL, &[x]);
        let sr = a.view_node("set_rows", GGML_OP_SET_ROWS, f, &[f, x, idx]);
        let out = a.tensor("out", GGML_OP_ADD, &[sr, sr]);
        let mut nodes = vec![f, sr, out];
        let mut leafs = vec![x, idx];
        let g = graph(&mut nodes, &mut leafs);
        let mut t = Table::default();
        t.set(f, 0, Cause::ExpandDeviceDown);
        t.set(sr, 1, Cause::BestInputs);
        t.set(out, 0, Cause::ExpandDeviceDown);
        // SAFETY: tensors live in the arena.
        unsafe { colocate(&caps, &mut t, &g, false) };
        let got = |n| t.get(n).map(|p| (p.backend, p.cause));
        // Only the CPU runs both FILL and SET_ROWS.
        assert_eq!(got(f), Some((1, Cause::InPlaceColocation)));
        assert_eq!(got(sr), Some((1, Cause::BestInputs)));
        assert_eq!(got(out), Some((0, Cause::ExpandDeviceDown)));

        // When the device runs SET_ROWS too, the higher-priority device takes both.
        caps.backends[0].ops.insert(GGML_OP_SET_ROWS);
        let mut t = Table::default();
        t.set(f, 0, Cause::ExpandDeviceDown);
        t.set(sr, 1, Cause::BestInputs);
        // SAFETY: as above.
        unsafe { colocate(&caps, &mut t, &g, false) };
        assert_eq!(got2(&t, f), Some((0, Cause::ExpandDeviceDown)));
        assert_eq!(got2(&t, sr), Some((0, Cause::InPlaceColocation)));
    }

    fn got2(t: &Table, n: *mut ggml_tensor) -> Option<(usize, Cause)> {
        t.get(n).map(|p| (p.backend, p.cause))
    }

    #[test]
    fn host_storage_needs_nothing() {
        // The device can use the CPU's host buffer type: a CPU FILL written by the device is fine.
        let caps = Mock::new(&[&[GGML_OP_SET_ROWS], &[GGML_OP_FILL, GGML_OP_SET_ROWS]]);
        let mut a = Arena::default();
        let x = a.input("x");
        let f = a.tensor("fill", GGML_OP_FILL, &[x]);
        let sr = a.view_node("set_rows", GGML_OP_SET_ROWS, f, &[f, x]);
        let mut nodes = vec![f, sr];
        let mut leafs = vec![x];
        let g = graph(&mut nodes, &mut leafs);
        let mut t = Table::default();
        t.set(f, 1, Cause::BestInputs);
        t.set(sr, 0, Cause::BestInputs);
        // SAFETY: tensors live in the arena.
        unsafe { colocate(&caps, &mut t, &g, false) };
        assert_eq!(got2(&t, f), Some((1, Cause::BestInputs)));
        assert_eq!(got2(&t, sr), Some((0, Cause::BestInputs)));
    }

    #[test]
    fn allocated_storage_pulls_the_writer() {
        let caps = Mock::new(&[&[GGML_OP_SET_ROWS], &[GGML_OP_SET_ROWS]]);
        let mut a = Arena::default();
        let dev = a.buffer(0x100, GGML_BACKEND_BUFFER_USAGE_ANY);
        let cache = a.leaf("cache", dev);
        let x = a.input("x");
        let sr = a.view_node("set_rows", GGML_OP_SET_ROWS, cache, &[cache, x]);
        let mut nodes = vec![sr];
        let mut leafs = vec![cache, x];
        let g = graph(&mut nodes, &mut leafs);
        let mut t = Table::default();
        t.set(sr, 1, Cause::UserAssigned); // the CPU cannot use the device buffer
                                           // SAFETY: tensors live in the arena.
        unsafe { colocate(&caps, &mut t, &g, false) };
        assert_eq!(got2(&t, sr), Some((0, Cause::InPlaceColocation)));
        assert!(is_inplace_writer(unsafe { &*sr }));
        assert!(!is_inplace_writer(unsafe { &*cache }));
    }
}
