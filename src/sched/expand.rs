//! Pass 2: spread placements to neighbouring unplaced nodes, in stock's four sweeps: non-CPU
//! backends down then up (the CPU breaks the run), then any backend down then up. A node
//! joins the run only when the run's backend supports its op; view ops are skipped.
//! Matches the expansion part of stock's `ggml_backend_sched_split_graph`.

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::caps::{self, Caps};
use super::table::{Cause, GraphIds, Table};

/// One sweep over `order` (the non-view nodes with their ids, in sweep order). With
/// `skip_cpu`, a CPU node ends the current run instead of starting one.
///
/// # Safety
/// The nodes must be live tensors.
unsafe fn sweep(
    caps: &dyn Caps,
    table: &mut Table,
    order: impl Iterator<Item = (*mut ggml_tensor, usize)>,
    skip_cpu: bool,
    cause: Cause,
) {
    let cpu = caps.cpu();
    let mut run: Option<usize> = None;
    for (n, id) in order {
        match table.backend_at(id) {
            Some(b) => run = if skip_cpu && b == cpu { None } else { Some(b) },
            None => {
                if let Some(b) = run {
                    if caps.supports_op(b, n) {
                        table.set_at(id, b, cause);
                    }
                }
            }
        }
    }
}

/// Runs the four sweeps over `graph`'s nodes (`ix`: their ids).
///
/// # Safety
/// `graph` must be a live graph of live tensors.
pub unsafe fn expand(caps: &dyn Caps, table: &mut Table, graph: &ggml_cgraph, ix: &GraphIds) {
    let nodes = caps::nodes(graph);
    let pairs = || {
        ix.compute
            .iter()
            .map(|&i| (nodes[i as usize], ix.nodes[i as usize]))
    };
    sweep(caps, table, pairs(), true, Cause::ExpandDeviceDown);
    sweep(caps, table, pairs().rev(), true, Cause::ExpandDeviceUp);
    sweep(caps, table, pairs(), false, Cause::ExpandDown);
    sweep(caps, table, pairs().rev(), false, Cause::ExpandUp);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::caps::mock::{graph, Arena, Mock};
    use ggml_sys::*;

    #[test]
    fn four_sweeps() {
        // device 0 supports ADD and MUL, not SCALE; CPU 1 supports everything used.
        let caps = Mock::new(&[
            &[GGML_OP_ADD, GGML_OP_MUL],
            &[GGML_OP_ADD, GGML_OP_MUL, GGML_OP_SCALE],
        ]);
        let mut a = Arena::default();
        let x = a.input("x");
        let n0 = a.tensor("n0", GGML_OP_ADD, &[x, x]); // placed on device by hand
        let n1 = a.tensor("n1", GGML_OP_MUL, &[n0, n0]); // device down
        let v = a.view_node("v", GGML_OP_RESHAPE, n1, &[n1]); // skipped
        let n2 = a.tensor("n2", GGML_OP_SCALE, &[v]); // device unsupported: left for later sweeps
        let n3 = a.tensor("n3", GGML_OP_ADD, &[n2, n2]); // placed on CPU by hand
        let n4 = a.tensor("n4", GGML_OP_ADD, &[n3, n3]); // all down from CPU
        let p = a.tensor("p", GGML_OP_ADD, &[x, x]); // before n0: device up
        let mut nodes = vec![p, n0, n1, v, n2, n3, n4];
        let mut leafs = vec![x];
        let g = graph(&mut nodes, &mut leafs);
        let mut t = Table::default();
        t.set(n0, 0, Cause::UserAssigned);
        t.set(n3, 1, Cause::UserAssigned);
        // SAFETY: tensors live in the arena.
        unsafe {
            let ix = GraphIds::new(&mut t, &g);
            expand(&caps, &mut t, &g, &ix)
        };
        let got = |n| t.get(n).map(|p| (p.backend, p.cause));
        assert_eq!(got(n1), Some((0, Cause::ExpandDeviceDown)));
        assert_eq!(got(p), Some((0, Cause::ExpandDeviceUp)));
        assert_eq!(got(v), None);
        // n2: device run reaches it but SCALE is unsupported; the all-backend down sweep
        // carries device 0 (from n1) too, still unsupported; the up sweep carries CPU from n3.
        assert_eq!(got(n2), Some((1, Cause::ExpandUp)));
        assert_eq!(got(n4), Some((1, Cause::ExpandDown)));
    }
}
