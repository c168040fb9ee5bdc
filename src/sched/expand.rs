//! Pass 2: spread placements to neighbouring unplaced nodes, in stock's four sweeps: non-CPU
//! backends down then up (the CPU breaks the run), then any backend down then up. A node
//! joins the run only when the run's backend supports its op; view ops are skipped.
//! Matches the expansion part of stock's `ggml_backend_sched_split_graph`.

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::caps::Caps;
use super::inspect;
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
                    // SAFETY: the nodes of `order` are live tensors (this function's contract).
                    if unsafe { caps.supports_op(b, n) } {
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
    // SAFETY: `graph` is a live graph (this function's contract).
    let nodes = unsafe { inspect::nodes(graph) };
    let pairs = || {
        ix.compute
            .iter()
            .map(|&i| (nodes[i as usize], ix.nodes[i as usize]))
    };
    // SAFETY: (all four sweeps) `pairs` yields nodes of the live `graph`, whose tensors are
    // live (this function's contract).
    unsafe { sweep(caps, table, pairs(), true, Cause::ExpandDeviceDown) };
    // SAFETY: as above.
    unsafe { sweep(caps, table, pairs().rev(), true, Cause::ExpandDeviceUp) };
    // SAFETY: as above.
    unsafe { sweep(caps, table, pairs(), false, Cause::ExpandDown) };
    // SAFETY: as above.
    unsafe { sweep(caps, table, pairs().rev(), false, Cause::ExpandUp) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mock::{no_tweak, run_cases, Case, Def::*};
    use ggml_sys::*;
    use Cause::*;

    /// Device 0 runs ADD and MUL, not SCALE; the CPU (1) runs all three.
    const OPS: &[&[ggml_op]] = &[
        &[GGML_OP_ADD, GGML_OP_MUL],
        &[GGML_OP_ADD, GGML_OP_MUL, GGML_OP_SCALE],
    ];
    const G: &[crate::sched::mock::Def] = &[
        GraphInput("x"),
        Node("p", GGML_OP_ADD, &["x", "x"]),
        Node("n0", GGML_OP_ADD, &["x", "x"]),
        Node("n1", GGML_OP_MUL, &["n0", "n0"]),
        View("v", GGML_OP_RESHAPE, "n1", &["n1"]),
        Node("n2", GGML_OP_SCALE, &["v"]),
        Node("n3", GGML_OP_ADD, &["n2", "n2"]),
        Node("n4", GGML_OP_ADD, &["n3", "n3"]),
    ];

    #[test]
    fn four_sweeps() {
        let cases = [
            Case {
                name: "device and CPU seeds",
                ops: OPS,
                tweak: no_tweak,
                graph: G,
                before: &[("n0", 0, UserAssigned), ("n3", 1, UserAssigned)],
                want: &[
                    ("n1", Some((0, ExpandDeviceDown))),
                    ("p", Some((0, ExpandDeviceUp))),
                    // View ops are skipped.
                    ("v", None),
                    // The device runs out at SCALE in both device sweeps and in the third;
                    // the fourth carries the CPU up from n3.
                    ("n2", Some((1, ExpandUp))),
                    ("n4", Some((1, ExpandDown))),
                    ("n0", Some((0, UserAssigned))),
                ],
            },
            Case {
                name: "a CPU seed spreads only in the last two sweeps",
                ops: OPS,
                tweak: no_tweak,
                graph: G,
                before: &[("n3", 1, UserAssigned)],
                want: &[
                    ("n4", Some((1, ExpandDown))),
                    ("n2", Some((1, ExpandUp))),
                    ("n1", Some((1, ExpandUp))),
                    ("n0", Some((1, ExpandUp))),
                    ("p", Some((1, ExpandUp))),
                    ("v", None),
                ],
            },
            Case {
                name: "nothing placed, nothing spreads",
                ops: OPS,
                tweak: no_tweak,
                graph: G,
                before: &[],
                want: &[("p", None), ("n0", None), ("n2", None), ("n4", None)],
            },
        ];
        // SAFETY: run_cases passes graphs whose tensors its arena owns.
        run_cases(&cases, |c, t, g, ix| unsafe { expand(c, t, g, ix) });
    }
}
