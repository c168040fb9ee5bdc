//! Pass 1: placement from what already exists. Matches the first pass of stock's
//! `ggml_backend_sched_split_graph` and its helper `ggml_backend_sched_backend_id_from_cur`:
//! allocated storage decides, then graph inputs go to the CPU, then ops that read a weight
//! follow the weight (or a higher-priority backend that asks to offload the op).

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::caps::{self, Caps};
use super::table::{Cause, GraphIds, Table};
use crate::ffi::c_name;
use crate::tensor::meta;

/// The highest-priority backend that can use the buffer holding `t`'s storage and runs `op`
/// (stock's `ggml_backend_sched_backend_from_buffer`); `None` when `t` has no storage or no
/// backend qualifies.
///
/// # Safety
/// `t`, its view source and `op` must be live tensors.
pub unsafe fn backend_from_buffer(
    caps: &dyn Caps,
    t: &ggml_tensor,
    op: *const ggml_tensor,
) -> Option<usize> {
    let buffer = meta::storage_buffer(t);
    if buffer.is_null() {
        return None;
    }
    let buft = (*buffer).buft;
    (0..caps.n_backends()).find(|&b| caps.supports_buft(b, buft) && caps.supports_op(b, op))
}

/// The backend a tensor gets from its current state, with the cause; `None` when nothing
/// decides yet. Aborts, as stock does, when the tensor's storage is allocated in a buffer
/// that no backend able to run its op can use; with `named_stop` (the in-place rule on)
/// and an in-place writer, the message is the rule's, naming buffer type and backends.
/// `n_srcs`: one past the tensor's last non-NULL source slot (the scan stops there).
///
/// # Safety
/// `tp` must be a live graph tensor whose sources and view source are live.
#[inline]
pub unsafe fn from_current(
    caps: &dyn Caps,
    tp: *mut ggml_tensor,
    n_srcs: usize,
    op_offload: bool,
    named_stop: bool,
) -> Option<(usize, Cause)> {
    let t = &*tp;
    if let Some(b) = backend_from_buffer(caps, t, tp) {
        return Some((b, Cause::PreAllocated));
    }
    if let Some(v) = t.view_src.as_ref() {
        if let Some(b) = backend_from_buffer(caps, v, tp) {
            return Some((b, Cause::PreAllocatedView));
        }
    }
    let buffer = meta::storage_buffer(t);
    if !buffer.is_null() {
        stop_unusable_storage(caps, tp, buffer, named_stop);
    }
    if t.flags & ggml_sys::GGML_TENSOR_FLAG_INPUT as i32 != 0 {
        return Some((caps.cpu(), Cause::Input));
    }
    // The rope frequencies and the attention sinks are too small to decide by.
    if t.op == ggml_sys::GGML_OP_ROPE || t.op == ggml_sys::GGML_OP_FLASH_ATTN_EXT {
        return None;
    }
    for &sp in &t.src[..n_srcs.min(t.src.len())] {
        if sp.is_null() {
            continue;
        }
        let s = &*sp;
        if s.buffer.is_null() || (*s.buffer).usage != ggml_sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS {
            continue;
        }
        // The first weight decides, even when no backend can run the op next to it.
        let wb = backend_from_buffer(caps, s, tp);
        if op_offload && wb == Some(caps.cpu()) && caps.buffer_is_host(s.buffer) {
            if let Some(b) =
                (0..caps.cpu()).find(|&b| caps.supports_op(b, tp) && caps.offload_op(b, tp))
            {
                return Some((b, Cause::Offload));
            }
        }
        return wb.map(|b| (b, Cause::Weight));
    }
    None
}

/// The stop of [`from_current`]: `tp`'s storage is allocated in `buffer`, which no backend
/// able to run its op can use. Kept out of line: it never returns and formats messages.
///
/// # Safety
/// As [`from_current`]; `buffer` is `tp`'s (or its view source's) live buffer.
#[cold]
#[inline(never)]
unsafe fn stop_unusable_storage(
    caps: &dyn Caps,
    tp: *mut ggml_tensor,
    buffer: ggml_sys::ggml_backend_buffer_t,
    named_stop: bool,
) -> ! {
    let t = &*tp;
    if named_stop && super::inplace::is_inplace_writer(t) {
        // The in-place rule's stop: name the buffer type and every backend.
        super::inplace::stop(caps, tp, (*buffer).buft, &[tp]);
    }
    crate::ffi::fatal(
        c_name!(sched::ggml_backend_sched_split_graph),
        &format!(
            "pre-allocated tensor ({}) in a buffer ({}) that cannot run the operation ({})",
            caps::name(t),
            caps.buft_name((*buffer).buft),
            caps::cstr(ggml_sys::ggml_op_name(t.op)),
        ),
    );
}

/// Pass 1 over a graph: leafs then nodes, each one not placed yet (user assignments and
/// earlier placements are kept) gets [`from_current`].
///
/// # Safety
/// `graph` must be a live graph of live tensors.
pub unsafe fn assign_current(
    caps: &dyn Caps,
    table: &mut Table,
    graph: &ggml_cgraph,
    ix: &GraphIds,
    op_offload: bool,
    named_stop: bool,
) {
    // Leafs: every source slot is scanned (leafs have none in practice).
    let max_src = ggml_sys::GGML_MAX_SRC as usize;
    let leafs = caps::leafs(graph)
        .iter()
        .zip(&ix.leafs)
        .map(|(&t, &id)| (t, id, max_src));
    let nodes = caps::nodes(graph).iter().zip(&ix.nodes).zip(&ix.n_srcs);
    for (t, id, n_srcs) in leafs.chain(nodes.map(|((&t, &id), &n)| (t, id, n as usize))) {
        if table.backend_at(id).is_none() {
            if let Some((b, c)) = from_current(caps, t, n_srcs, op_offload, named_stop) {
                table.set_at(id, b, c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::caps::mock::{graph, Arena, Mock};
    use ggml_sys::*;

    #[test]
    fn weights_inputs_offload() {
        // backend 0 (device) runs MUL_MAT and ADD; backend 1 is the CPU.
        let mut caps = Mock::new(&[
            &[GGML_OP_MUL_MAT, GGML_OP_ADD],
            &[GGML_OP_MUL_MAT, GGML_OP_ADD, GGML_OP_ROPE],
        ]);
        let mut a = Arena::default();
        let dev_w = a.buffer(0x100, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        let cpu_w = a.buffer(0x200, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        let w0 = a.leaf("w0", dev_w);
        let w1 = a.leaf("w1", cpu_w);
        let x = a.input("x");
        let m0 = a.tensor("m0", GGML_OP_MUL_MAT, &[w0, x]);
        let m1 = a.tensor("m1", GGML_OP_MUL_MAT, &[w1, m0]);
        let r = a.tensor("r", GGML_OP_ROPE, &[m1, w0]);
        let mut nodes = vec![m0, m1, r];
        let mut leafs = vec![w0, w1, x];
        let g = graph(&mut nodes, &mut leafs);
        let mut t = Table::default();
        // SAFETY: all tensors live in the arena.
        unsafe {
            let ix = GraphIds::new(&mut t, &g);
            assign_current(&caps, &mut t, &g, &ix, true, true)
        };
        // w0 can be used by backend 0 (it is its buffer type), w1 (host) by backend 0 as well.
        assert_eq!(
            t.get(w0).map(|p| (p.backend, p.cause)),
            Some((0, Cause::PreAllocated))
        );
        assert_eq!(
            t.get(w1).map(|p| (p.backend, p.cause)),
            Some((0, Cause::PreAllocated))
        );
        assert_eq!(
            t.get(x).map(|p| (p.backend, p.cause)),
            Some((1, Cause::Input))
        );
        assert_eq!(
            t.get(m0).map(|p| (p.backend, p.cause)),
            Some((0, Cause::Weight))
        );
        assert_eq!(
            t.get(m1).map(|p| (p.backend, p.cause)),
            Some((0, Cause::Weight))
        );
        assert_eq!(t.backend(r), None, "ROPE never follows its weight");

        // Now the device cannot read host memory: w1 lives on the CPU, and m1 is offloaded
        // only when the device asks for it.
        caps.backends[0].bufts.remove(&0x200);
        let mut t = Table::default();
        // SAFETY: as above.
        unsafe {
            let ix = GraphIds::new(&mut t, &g);
            assign_current(&caps, &mut t, &g, &ix, true, true)
        };
        assert_eq!(
            t.get(w1).map(|p| (p.backend, p.cause)),
            Some((1, Cause::PreAllocated))
        );
        assert_eq!(
            t.get(m1).map(|p| (p.backend, p.cause)),
            Some((1, Cause::Weight))
        );
        caps.backends[0].offload.insert(GGML_OP_MUL_MAT);
        let mut t = Table::default();
        // SAFETY: as above.
        unsafe {
            let ix = GraphIds::new(&mut t, &g);
            assign_current(&caps, &mut t, &g, &ix, true, true)
        };
        assert_eq!(
            t.get(m1).map(|p| (p.backend, p.cause)),
            Some((0, Cause::Offload))
        );
        let mut t = Table::default();
        // SAFETY: as above.
        unsafe {
            let ix = GraphIds::new(&mut t, &g);
            assign_current(&caps, &mut t, &g, &ix, false, true)
        };
        assert_eq!(
            t.get(m1).map(|p| (p.backend, p.cause)),
            Some((1, Cause::Weight))
        );

        // A user assignment is kept.
        let mut t = Table::default();
        t.set(m0, 1, Cause::UserAssigned);
        // SAFETY: as above.
        unsafe {
            let ix = GraphIds::new(&mut t, &g);
            assign_current(&caps, &mut t, &g, &ix, true, true)
        };
        assert_eq!(
            t.get(m0).map(|p| (p.backend, p.cause)),
            Some((1, Cause::UserAssigned))
        );
    }
}
