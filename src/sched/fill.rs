//! Pass 4, in node order (view ops included): an unplaced view follows its view source; each
//! unplaced source follows its own view source if it is a view, else the node that reads it;
//! a node still unplaced goes to the first backend that supports it. Every node must be
//! placed after this pass (stock asserts it; so do we). Matches the fourth pass of stock's
//! `ggml_backend_sched_split_graph`.

use ggml_sys::ggml_cgraph;

use super::caps::{self, Caps};
use super::table::{Cause, GraphIds, Table};
use super::upgrade::sources_at;
use crate::ffi::c_name;

/// Runs pass 4 over `graph`'s nodes (`ix`: the graph's ids). Aborts when a node has no
/// backend that supports it.
///
/// # Safety
/// `graph` must be a live graph of live tensors.
pub unsafe fn fill(caps: &dyn Caps, table: &mut Table, graph: &ggml_cgraph, ix: &GraphIds) {
    for (i, &n) in caps::nodes(graph).iter().enumerate() {
        let node = &*n;
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
            let from = if !(*s).view_src.is_null() {
                table.backend((*s).view_src).map(|b| (b, Cause::ViewSource))
            } else {
                table.backend_at(nid).map(|b| (b, Cause::FromDestination))
            };
            if let Some((b, c)) = from {
                table.set_at(sid, b, c);
            }
        }
        if table.backend_at(nid).is_none() {
            if let Some(b) = (0..caps.n_backends()).find(|&b| caps.supports_op(b, n)) {
                table.set_at(nid, b, Cause::FirstSupported);
            }
        }
        if table.backend_at(nid).is_none() {
            crate::ffi::fatal(
                c_name!(sched::ggml_backend_sched_split_graph),
                &format!(
                    "GGML_ASSERT(*cur_backend_id != -1) failed: node {} ({}) has no backend that supports it",
                    caps::name(node),
                    caps::cstr(ggml_sys::ggml_op_desc(n)),
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::caps::mock::{graph, Arena, Mock};
    use ggml_sys::*;

    #[test]
    fn sources_from_destination_and_views() {
        let caps = Mock::new(&[&[GGML_OP_ADD], &[GGML_OP_ADD, GGML_OP_SCALE, GGML_OP_MUL]]);
        let mut a = Arena::default();
        let c = a.leaf("c", std::ptr::null_mut()); // a constant without storage
        let x = a.input("x");
        let n0 = a.tensor("n0", GGML_OP_ADD, &[x, c]);
        let v = a.view_node("v", GGML_OP_VIEW, n0, &[n0]);
        let n1 = a.tensor("n1", GGML_OP_SCALE, &[v]);
        let n2 = a.tensor("n2", GGML_OP_MUL, &[n1, n1]);
        let mut nodes = vec![n0, v, n1, n2];
        let mut leafs = vec![x, c];
        let g = graph(&mut nodes, &mut leafs);
        let mut t = Table::default();
        t.set(x, 1, Cause::Input);
        t.set(n0, 0, Cause::UserAssigned);
        // SAFETY: tensors live in the arena.
        unsafe {
            let ix = GraphIds::new(&mut t, &g);
            fill(&caps, &mut t, &g, &ix)
        };
        let got = |n| t.get(n).map(|p| (p.backend, p.cause));
        assert_eq!(got(c), Some((0, Cause::FromDestination)));
        assert_eq!(got(v), Some((0, Cause::ViewSource)));
        // n1 is unplaced: its source v is placed; n1 itself gets the first backend running SCALE.
        assert_eq!(got(n1), Some((1, Cause::FirstSupported)));
        assert_eq!(got(n2), Some((1, Cause::FirstSupported)));
    }
}
