//! Pass 1: placement from what already exists. Matches the first pass of stock's
//! `ggml_backend_sched_split_graph` and its helper `ggml_backend_sched_backend_id_from_cur`:
//! allocated storage decides, then graph inputs go to the CPU, then ops that read a weight
//! follow the weight (or a higher-priority backend that asks to offload the op).

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::caps::Caps;
use super::inspect;
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
    // SAFETY: `t`'s view source is NULL or live (this function's contract).
    let buffer = unsafe { meta::storage_buffer(t) };
    if buffer.is_null() {
        return None;
    }
    // SAFETY: non-NULL here, and a live tensor's (or its live view source's) buffer is a
    // live buffer.
    let buft = unsafe { (*buffer).buft };
    // SAFETY: `buft` is a live buffer's type, and `op` is live (this function's contract).
    (0..caps.n_backends())
        .find(|&b| unsafe { caps.supports_buft(b, buft) && caps.supports_op(b, op) })
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
    // SAFETY: `tp` is a live graph tensor (this function's contract); only read here.
    let t = unsafe { &*tp };
    // SAFETY: `t`, its view source and the op (`t` itself) are live (as above).
    if let Some(b) = unsafe { backend_from_buffer(caps, t, tp) } {
        return Some((b, Cause::PreAllocated));
    }
    // SAFETY: the view source is NULL or live (this function's contract).
    if let Some(v) = unsafe { t.view_src.as_ref() } {
        // SAFETY: `v` is live; ggml does not chain views (a view's `view_src` is the root,
        // whose own `view_src` is NULL), so its view source is too; `tp` is live.
        if let Some(b) = unsafe { backend_from_buffer(caps, v, tp) } {
            return Some((b, Cause::PreAllocatedView));
        }
    }
    // SAFETY: as for `backend_from_buffer` above.
    let buffer = unsafe { meta::storage_buffer(t) };
    if !buffer.is_null() {
        // SAFETY: `tp` and its sources are live (this function's contract); `buffer` is
        // its storage's live buffer.
        unsafe { stop_unusable_storage(caps, tp, buffer, named_stop) };
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
        // SAFETY: a non-NULL source of a live graph tensor is live (this function's
        // contract).
        let s = unsafe { &*sp };
        // SAFETY: a live tensor's non-NULL buffer is a live buffer (`&&` skips NULL).
        let weights = !s.buffer.is_null()
            && unsafe { (*s.buffer).usage } == ggml_sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS;
        if !weights {
            continue;
        }
        // The first weight decides, even when no backend can run the op next to it.
        // SAFETY: `s`, its view source and `tp` are live (this function's contract).
        let wb = unsafe { backend_from_buffer(caps, s, tp) };
        // SAFETY: `s.buffer` is non-NULL (checked above) and live.
        if op_offload && wb == Some(caps.cpu()) && unsafe { caps.buffer_is_host(s.buffer) } {
            // SAFETY: `tp` is live (this function's contract).
            let offload = (0..caps.cpu())
                .find(|&b| unsafe { caps.supports_op(b, tp) && caps.offload_op(b, tp) });
            if let Some(b) = offload {
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
    // SAFETY: `tp` is live (this function's contract); only read here.
    let t = unsafe { &*tp };
    // SAFETY: `buffer` is live (this function's contract).
    let buft = unsafe { (*buffer).buft };
    if named_stop && super::inplace::is_inplace_writer(t) {
        // The in-place rule's stop: name the buffer type and every backend.
        // SAFETY: `tp` is live and an in-place writer (checked just above), so its view
        // source is set and live; `buft` is a live buffer's type.
        unsafe { super::inplace::stop(caps, tp, buft, &[tp]) };
    }
    // SAFETY: a live buffer's type is live.
    let buft_name = unsafe { caps.buft_name(buft) };
    // SAFETY: `ggml_op_name` maps any op code to a static NUL-terminated name.
    let op_name = unsafe { inspect::cstr(ggml_sys::ggml_op_name(t.op)) };
    crate::ffi::fatal(
        c_name!(sched::ggml_backend_sched_split_graph),
        &format!(
            "pre-allocated tensor ({}) in a buffer ({}) that cannot run the operation ({})",
            inspect::name(t),
            buft_name,
            op_name,
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
    // SAFETY: `graph` is live with `n_leafs` leafs and `n_nodes` nodes and is not resized
    // during the pass (this function's contract).
    let leafs = unsafe { inspect::leafs(graph) };
    // SAFETY: as for `leafs`.
    let nodes = unsafe { inspect::nodes(graph) };
    let leafs = leafs
        .iter()
        .zip(&ix.leafs)
        .map(|(&t, &id)| (t, id, max_src));
    let nodes = nodes.iter().zip(&ix.nodes).zip(&ix.n_srcs);
    for (t, id, n_srcs) in leafs.chain(nodes.map(|((&t, &id), &n)| (t, id, n as usize))) {
        if table.backend_at(id).is_none() {
            // SAFETY: `t` is a node or leaf of the live graph, non-NULL (`GraphIds::rebuild`
            // stopped on NULL), with live sources and view source (this function's contract).
            let current = unsafe { from_current(caps, t, n_srcs, op_offload, named_stop) };
            if let Some((b, c)) = current {
                table.set_at(id, b, c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mock::{no_tweak, run_cases, Case, Def::*, Mock};
    use ggml_sys::*;
    use Cause::*;

    /// Backend 0 (a device) runs MUL_MAT and ADD; backend 1 (the CPU) also ROPE.
    const OPS: &[&[ggml_op]] = &[
        &[GGML_OP_MUL_MAT, GGML_OP_ADD],
        &[GGML_OP_MUL_MAT, GGML_OP_ADD, GGML_OP_ROPE],
    ];
    /// Weights in the device's (0x100) and the CPU's (0x200) buffer types.
    const G: &[crate::sched::mock::Def] = &[
        Leaf("w0", Some((0x100, GGML_BACKEND_BUFFER_USAGE_WEIGHTS))),
        Leaf("w1", Some((0x200, GGML_BACKEND_BUFFER_USAGE_WEIGHTS))),
        GraphInput("x"),
        Node("m0", GGML_OP_MUL_MAT, &["w0", "x"]),
        Node("m1", GGML_OP_MUL_MAT, &["w1", "m0"]),
        Node("r", GGML_OP_ROPE, &["m1", "w0"]),
    ];

    fn no_host(m: &mut Mock) {
        m.backends[0].bufts.remove(&0x200);
    }

    fn no_host_offload(m: &mut Mock) {
        no_host(m);
        m.backends[0].offload.insert(GGML_OP_MUL_MAT);
    }

    #[test]
    fn weights_inputs_offload() {
        let with_offload = [
            Case {
                name: "the device reads host memory: both weights are its",
                ops: OPS,
                tweak: no_tweak,
                graph: G,
                before: &[],
                want: &[
                    ("w0", Some((0, PreAllocated))),
                    ("w1", Some((0, PreAllocated))),
                    ("x", Some((1, Input))),
                    ("m0", Some((0, Weight))),
                    ("m1", Some((0, Weight))),
                    // The rope frequencies never decide.
                    ("r", None),
                ],
            },
            Case {
                name: "the device cannot read host memory: w1 and its reader on the CPU",
                ops: OPS,
                tweak: no_host,
                graph: G,
                before: &[],
                want: &[
                    ("w0", Some((0, PreAllocated))),
                    ("w1", Some((1, PreAllocated))),
                    ("m0", Some((0, Weight))),
                    ("m1", Some((1, Weight))),
                ],
            },
            Case {
                name: "the device asks to offload MUL_MAT on a host weight",
                ops: OPS,
                tweak: no_host_offload,
                graph: G,
                before: &[],
                want: &[("w1", Some((1, PreAllocated))), ("m1", Some((0, Offload)))],
            },
            Case {
                name: "a user assignment is kept",
                ops: OPS,
                tweak: no_tweak,
                graph: G,
                before: &[("m0", 1, UserAssigned)],
                want: &[("m0", Some((1, UserAssigned))), ("m1", Some((0, Weight)))],
            },
        ];
        // SAFETY: run_cases passes graphs whose tensors its arena owns.
        run_cases(&with_offload, |c, t, g, ix| unsafe {
            assign_current(c, t, g, ix, true, true)
        });
        let without_offload = [Case {
            name: "op_offload off: the asking device does not get it",
            ops: OPS,
            tweak: no_host_offload,
            graph: G,
            before: &[],
            want: &[("m1", Some((1, Weight)))],
        }];
        // SAFETY: as above.
        run_cases(&without_offload, |c, t, g, ix| unsafe {
            assign_current(c, t, g, ix, false, true)
        });
    }
}
