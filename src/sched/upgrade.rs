//! Pass 3, in node order: a placed node moves to a higher-priority backend that has the same
//! buffer type, supports the op and can use every source's storage ([`Cause::Upgrade`]); an
//! unplaced node goes to the supporting backend that can use the most placed sources, the
//! highest priority on a tie ([`Cause::BestInputs`]). Matches the third pass of stock's
//! `ggml_backend_sched_split_graph` (whether a backend can use a source's storage is
//! [`query::buffer_supported_at`]).

use ggml_sys::ggml_cgraph;

use super::caps::Caps;
use super::inspect;
use super::query::{buffer_supported_at, sources_at};
use super::table::{Cause, GraphIds, Table};

/// Runs pass 3 over `graph`'s nodes (view ops skipped; `ix`: the graph's ids).
///
/// # Safety
/// `graph` must be a live graph of live tensors.
pub unsafe fn upgrade(caps: &dyn Caps, table: &mut Table, graph: &ggml_cgraph, ix: &GraphIds) {
    // SAFETY: `graph` is a live graph of live tensors (this function's contract).
    let nodes = unsafe { inspect::nodes(graph) };
    for &i in &ix.compute {
        let i = i as usize;
        let n = nodes[i];
        // SAFETY: a node of the live graph, non-NULL (`GraphIds::rebuild` checked).
        let node = unsafe { &*n };
        let nid = ix.nodes[i];
        match table.backend_at(nid) {
            None => {
                let mut best: Option<(usize, usize)> = None; // (count, backend)
                for b in 0..caps.n_backends() {
                    // SAFETY: `n` is a live node (see `node`).
                    if !unsafe { caps.supports_op(b, n) } {
                        continue;
                    }
                    let count = sources_at(node, ix, i)
                        .filter(|&(s, sid)| {
                            // SAFETY: `s` is a non-NULL source of the live node (`sources_at`
                            // skips NULL slots), hence a live tensor.
                            let view_src = unsafe { (*s).view_src };
                            (table.backend_at(sid).is_some() || table.backend(view_src).is_some())
                                // SAFETY: `s` and its view source are live (as above).
                                && unsafe { buffer_supported_at(caps, table, s, sid, b) }
                        })
                        .count();
                    if best.is_none_or(|(c, _)| count > c) {
                        best = Some((count, b));
                    }
                }
                if let Some((_, b)) = best {
                    table.set_at(nid, b, Cause::BestInputs);
                }
            }
            Some(cur) => {
                let target = (0..cur).find(|&b| {
                    caps.buft(b) == caps.buft(cur)
                        // SAFETY: `n` is a live node; its non-NULL sources are live tensors.
                        && unsafe { caps.supports_op(b, n) }
                        && sources_at(node, ix, i)
                            // SAFETY: as above.
                            .all(|(s, sid)| unsafe { buffer_supported_at(caps, table, s, sid, b) })
                });
                if let Some(b) = target {
                    table.set_at(nid, b, Cause::Upgrade);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mock::{build, no_tweak, run_cases, Case, Def::*, Mock};
    use crate::sched::table::Cause::*;
    use ggml_sys::*;

    /// 0: a device; 1: an accelerator; 2: the CPU.
    const OPS: &[&[ggml_op]] = &[
        &[GGML_OP_ADD],
        &[GGML_OP_MUL],
        &[GGML_OP_ADD, GGML_OP_MUL, GGML_OP_SCALE],
    ];
    const G: &[crate::sched::mock::Def] = &[
        GraphInput("x"),
        Node("m", GGML_OP_MUL, &["x", "x"]),
        Node("s", GGML_OP_SCALE, &["m"]),
        Node("d", GGML_OP_ADD, &["m", "m"]),
        Node("u", GGML_OP_ADD, &["d", "s"]),
    ];
    const BEFORE: &[(&str, usize, Cause)] = &[
        ("x", 2, Input),
        ("m", 2, UserAssigned),
        ("d", 0, UserAssigned),
    ];

    /// Backend 1 allocates in the CPU's buffer type.
    fn shared_buft(m: &mut Mock) {
        m.own_buft[1] = m.own_buft[2];
        m.backends[1].bufts.insert(0x300);
    }

    #[test]
    fn upgrade_and_best_inputs() {
        let cases = [
            Case {
                name: "a host accelerator with the CPU's buffer type takes the CPU's MUL",
                ops: OPS,
                tweak: shared_buft,
                graph: G,
                before: BEFORE,
                want: &[
                    ("m", Some((1, Upgrade))),
                    // Only the CPU runs SCALE.
                    ("s", Some((2, BestInputs))),
                    // Device 0 can use d (its own buffer) and s (host): 2; the CPU only s.
                    ("u", Some((0, BestInputs))),
                    ("d", Some((0, UserAssigned))),
                ],
            },
            Case {
                name: "another buffer type: no upgrade",
                ops: OPS,
                tweak: no_tweak,
                graph: G,
                before: BEFORE,
                want: &[
                    ("m", Some((2, UserAssigned))),
                    ("s", Some((2, BestInputs))),
                    ("u", Some((0, BestInputs))),
                ],
            },
            Case {
                name: "no placed source: the highest priority that runs it; none runs SQR",
                ops: OPS,
                tweak: no_tweak,
                graph: &[
                    GraphInput("x"),
                    Node("a", GGML_OP_ADD, &["x", "x"]),
                    Node("z", GGML_OP_SQR, &["a"]),
                ],
                before: &[],
                want: &[("a", Some((0, BestInputs))), ("z", None), ("x", None)],
            },
        ];
        // SAFETY: run_cases passes graphs whose tensors its arena owns.
        run_cases(&cases, |c, t, g, ix| unsafe { upgrade(c, t, g, ix) });
    }

    #[test]
    fn buffer_supported_needs_a_placement_or_storage() {
        let b = build(&Case {
            name: "lone",
            ops: OPS,
            tweak: no_tweak,
            graph: &[Node("lone", GGML_OP_ADD, &[])],
            before: &[],
            want: &[],
        });
        let t = Table::default();
        // SAFETY: `lone` is owned by `b.arena`.
        assert!(!unsafe { crate::sched::query::buffer_supported(&b.caps, &t, b.t("lone"), 0) });
    }
}
