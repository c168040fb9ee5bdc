//! Pass 4, in node order (view ops included): an unplaced view follows its view source; each
//! unplaced source follows its own view source if it is a view, else the node that reads it;
//! a node still unplaced goes to the first backend that supports it. Every node must be
//! placed after this pass (stock asserts it; so do we). Matches the fourth pass of stock's
//! `ggml_backend_sched_split_graph`.

use ggml_sys::ggml_cgraph;

use super::caps::Caps;
use super::inspect;
use super::query::sources_at;
use super::table::{Cause, GraphIds, Table};
use crate::ffi::c_name;

/// Runs pass 4 over `graph`'s nodes (`ix`: the graph's ids). Aborts when a node has no
/// backend that supports it.
///
/// # Safety
/// `graph` must be a live graph of live tensors.
pub unsafe fn fill(caps: &dyn Caps, table: &mut Table, graph: &ggml_cgraph, ix: &GraphIds) {
    // SAFETY: `graph` is a live graph of live tensors (this function's contract).
    let nodes = unsafe { inspect::nodes(graph) };
    for (i, &n) in nodes.iter().enumerate() {
        // SAFETY: a node of the live graph: a live tensor, not NULL (`GraphIds::rebuild`
        // stops on a NULL node before any pass runs).
        let node = unsafe { &*n };
        let nid = ix.nodes[i];
        if !node.view_src.is_null() && table.backend_at(nid).is_none() {
            if let Some(b) = table.backend_at(ix.view_srcs[i] as usize) {
                table.set_at(nid, b, Cause::ViewSource);
            }
        }
        for (s, sid) in sources_at(node, ix, i) {
            if table.backend_at(sid).is_some() {
                continue;
            }
            // SAFETY: `s` is a non-NULL source of a live node (`sources_at` skips NULL),
            // hence a live tensor.
            let view_src = unsafe { (*s).view_src };
            let from = if !view_src.is_null() {
                table.backend(view_src).map(|b| (b, Cause::ViewSource))
            } else {
                table.backend_at(nid).map(|b| (b, Cause::FromDestination))
            };
            if let Some((b, c)) = from {
                table.set_at(sid, b, c);
            }
        }
        if table.backend_at(nid).is_none() {
            // SAFETY: `n` is a live node (see `node` above).
            let first = (0..caps.n_backends()).find(|&b| unsafe { caps.supports_op(b, n) });
            if let Some(b) = first {
                table.set_at(nid, b, Cause::FirstSupported);
            }
        }
        if table.backend_at(nid).is_none() {
            crate::ffi::fatal(
                c_name!(sched::ggml_backend_sched_split_graph),
                &format!(
                    "GGML_ASSERT(*cur_backend_id != -1) failed: node {} ({}) has no backend that supports it",
                    inspect::name(node),
                    // SAFETY: `n` is live; ggml_op_desc returns a static string.
                    unsafe { inspect::cstr(ggml_sys::ggml_op_desc(n)) },
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mock::{no_tweak, run_cases, Case, Def::*};
    use ggml_sys::*;
    use Cause::*;

    /// Device 0 runs ADD; the CPU (1) ADD, SCALE and MUL.
    const OPS: &[&[ggml_op]] = &[&[GGML_OP_ADD], &[GGML_OP_ADD, GGML_OP_SCALE, GGML_OP_MUL]];
    /// `c`: a constant without storage.
    const G: &[crate::sched::mock::Def] = &[
        GraphInput("x"),
        Leaf("c", None),
        Node("n0", GGML_OP_ADD, &["x", "c"]),
        View("v", GGML_OP_VIEW, "n0", &["n0"]),
        Node("n1", GGML_OP_SCALE, &["v"]),
        Node("n2", GGML_OP_MUL, &["n1", "n1"]),
    ];

    #[test]
    fn sources_from_destination_and_views() {
        let cases = [
            Case {
                name: "n0 on the device",
                ops: OPS,
                tweak: no_tweak,
                graph: G,
                before: &[("x", 1, Input), ("n0", 0, UserAssigned)],
                want: &[
                    ("x", Some((1, Input))),
                    ("c", Some((0, FromDestination))),
                    ("v", Some((0, ViewSource))),
                    // Only the CPU runs SCALE and MUL.
                    ("n1", Some((1, FirstSupported))),
                    ("n2", Some((1, FirstSupported))),
                ],
            },
            Case {
                name: "n0 on the CPU",
                ops: OPS,
                tweak: no_tweak,
                graph: G,
                before: &[("x", 1, Input), ("n0", 1, UserAssigned)],
                want: &[
                    ("c", Some((1, FromDestination))),
                    ("v", Some((1, ViewSource))),
                    ("n1", Some((1, FirstSupported))),
                    ("n0", Some((1, UserAssigned))),
                ],
            },
            Case {
                name: "nothing placed: sources of a node unplaced at its turn stay unplaced",
                ops: OPS,
                tweak: no_tweak,
                graph: G,
                before: &[],
                want: &[
                    ("x", None),
                    ("c", None),
                    ("n0", Some((0, FirstSupported))),
                    ("v", Some((0, ViewSource))),
                    ("n1", Some((1, FirstSupported))),
                    ("n2", Some((1, FirstSupported))),
                ],
            },
        ];
        // SAFETY: run_cases passes graphs whose tensors its arena owns.
        run_cases(&cases, |c, t, g, ix| unsafe { fill(c, t, g, ix) });
    }
}
