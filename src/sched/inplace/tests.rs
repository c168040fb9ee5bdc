use super::reuse::Groups;
use super::stop::written_stop_message;
use super::*;
use crate::sched::mock::{build, no_tweak, run_cases, Case, Def::*, Mock};
use ggml_sys::*;
use Cause::*;

/// The reproducer's shape: the device claims FILL but not SET_ROWS.
const REPRO_OPS: &[&[ggml_op]] = &[
    &[GGML_OP_FILL, GGML_OP_ADD],
    &[GGML_OP_FILL, GGML_OP_SET_ROWS, GGML_OP_ADD],
];
const REPRO: &[crate::sched::mock::Def] = &[
    GraphInput("x"),
    GraphInput("idx"),
    Node("fill", GGML_OP_FILL, &["x"]),
    View("set_rows", GGML_OP_SET_ROWS, "fill", &["fill", "x", "idx"]),
    Node("out", GGML_OP_ADD, &["set_rows", "set_rows"]),
];

/// The device cannot use host memory (as HRX device-local compute buffers).
fn device_only(m: &mut Mock) {
    m.backends[0].bufts.remove(&0x200);
}

fn device_only_set_rows(m: &mut Mock) {
    device_only(m);
    m.backends[0].ops.insert(GGML_OP_SET_ROWS);
}

/// Backend 0 can use backend 1's host buffer type (0x200), not the CPU's (0x300).
fn accel_host(m: &mut Mock) {
    m.backends[0].bufts.remove(&0x300);
    m.backends[0].bufts.insert(0x200);
    m.host_bufts.insert(0x200);
}

const REUSE_OPS: &[&[ggml_op]] = &[
    &[GGML_OP_FILL],
    &[GGML_OP_SQR, GGML_OP_FILL],
    &[GGML_OP_SCALE, GGML_OP_SQR, GGML_OP_FILL],
];
const REUSE_BEFORE: &[(&str, usize, Cause)] = &[
    ("x", 2, Input),
    ("p", 2, BestInputs),
    ("r", 1, BestInputs),
    ("w", 0, BestInputs),
];

#[test]
fn colocation_cases() {
    let before_fill = [
        Case {
            name: "produced storage: only the CPU runs FILL and SET_ROWS",
            ops: REPRO_OPS,
            tweak: device_only,
            graph: REPRO,
            before: &[
                ("fill", 0, ExpandDeviceDown),
                ("set_rows", 1, BestInputs),
                ("out", 0, ExpandDeviceDown),
            ],
            want: &[
                ("fill", Some((1, InPlaceColocation))),
                ("set_rows", Some((1, BestInputs))),
                ("out", Some((0, ExpandDeviceDown))),
            ],
        },
        Case {
            name: "produced storage: the device runs both and has priority",
            ops: REPRO_OPS,
            tweak: device_only_set_rows,
            graph: REPRO,
            before: &[("fill", 0, ExpandDeviceDown), ("set_rows", 1, BestInputs)],
            want: &[
                ("fill", Some((0, ExpandDeviceDown))),
                ("set_rows", Some((0, InPlaceColocation))),
                ("out", None),
            ],
        },
        Case {
            name: "host storage the device can use: nothing moves",
            ops: &[&[GGML_OP_SET_ROWS], &[GGML_OP_FILL, GGML_OP_SET_ROWS]],
            tweak: no_tweak,
            graph: &[
                GraphInput("x"),
                Node("fill", GGML_OP_FILL, &["x"]),
                View("set_rows", GGML_OP_SET_ROWS, "fill", &["fill", "x"]),
            ],
            before: &[("fill", 1, BestInputs), ("set_rows", 0, BestInputs)],
            want: &[
                ("fill", Some((1, BestInputs))),
                ("set_rows", Some((0, BestInputs))),
            ],
        },
        Case {
            name: "allocated storage pulls the writer to a backend that can use it",
            ops: &[&[GGML_OP_SET_ROWS], &[GGML_OP_SET_ROWS]],
            tweak: no_tweak,
            graph: &[
                Leaf("cache", Some((0x100, GGML_BACKEND_BUFFER_USAGE_ANY))),
                GraphInput("x"),
                View("set_rows", GGML_OP_SET_ROWS, "cache", &["cache", "x"]),
            ],
            // The CPU cannot use the device buffer.
            before: &[("set_rows", 1, UserAssigned)],
            want: &[("set_rows", Some((0, InPlaceColocation))), ("cache", None)],
        },
    ];
    // SAFETY: run_cases passes graphs whose tensors its arena owns.
    run_cases(&before_fill, |c, t, g, _| unsafe {
        colocate(c, t, g, false, &mut Reuse::new(g, false))
    });

    // ggml-alloc may hand the root r the memory of a source it reads directly (p, a CPU
    // tensor read by the accelerator 1): the writer w, which can use the accelerator's
    // host buffer type but not the CPU's, must then move; when p has another reader
    // later, no reuse happens and nothing moves.
    let after_fill = [
        Case {
            name: "predicted reuse of the CPU's memory moves the writer",
            ops: REUSE_OPS,
            tweak: accel_host,
            graph: &[
                GraphInput("x"),
                Node("p", GGML_OP_SCALE, &["x"]),
                Node("r", GGML_OP_SQR, &["p"]),
                View("w", GGML_OP_FILL, "r", &["r"]),
            ],
            before: REUSE_BEFORE,
            want: &[
                ("w", Some((1, InPlaceColocation))),
                ("r", Some((1, BestInputs))),
            ],
        },
        Case {
            name: "a second reader of p: no reuse, nothing moves",
            ops: REUSE_OPS,
            tweak: accel_host,
            graph: &[
                GraphInput("x"),
                Node("p", GGML_OP_SCALE, &["x"]),
                Node("r", GGML_OP_SQR, &["p"]),
                View("w", GGML_OP_FILL, "r", &["r"]),
                Node("q", GGML_OP_SCALE, &["p"]),
            ],
            before: REUSE_BEFORE,
            want: &[("w", Some((0, BestInputs))), ("r", Some((1, BestInputs)))],
        },
    ];
    // SAFETY: as above.
    run_cases(&after_fill, |c, t, g, _| unsafe {
        colocate(c, t, g, true, &mut Reuse::new(g, false))
    });
}

#[test]
fn inplace_writers() {
    let b = build(&Case {
        name: "writers",
        ops: REPRO_OPS,
        tweak: no_tweak,
        graph: &[
            Leaf("cache", Some((0x100, GGML_BACKEND_BUFFER_USAGE_ANY))),
            GraphInput("x"),
            View("set_rows", GGML_OP_SET_ROWS, "cache", &["cache", "x"]),
            View("view", GGML_OP_VIEW, "cache", &["cache"]),
        ],
        before: &[],
        want: &[],
    });
    // SAFETY: the tensors are owned by `b.arena`.
    let is = |n| is_inplace_writer(unsafe { &*b.t(n) });
    assert!(is("set_rows"));
    assert!(!is("cache"));
    assert!(!is("view"));
}

/// Groups come out in their roots' first-seen order, each with its writers in the order
/// found, over recycled memory too (the lists of a larger earlier split left behind).
#[test]
fn groups_keep_first_seen_and_node_order() {
    let t = |i: usize| i as *mut ggml_tensor;
    let mut groups = Groups::default();
    let expect: &[(usize, &[usize])] = &[(10, &[1, 4, 6]), (20, &[2, 5]), (30, &[3])];
    for round in 0..2 {
        groups.clear();
        if round == 1 {
            // A bigger split before this one: stale entries must not show through.
            for i in 0..50 {
                groups.push(t(100 + i % 7), t(200 + i));
            }
            groups.sort();
            groups.clear();
        }
        for (root, n) in [(10, 1), (20, 2), (30, 3), (10, 4), (20, 5), (10, 6)] {
            groups.push(t(root), t(n));
        }
        groups.sort();
        assert_eq!(groups.len(), 3);
        for (g, &(root, writers)) in expect.iter().enumerate() {
            let (r, w) = groups.group(g);
            assert_eq!(r, t(root), "round {round}, group {g}");
            let want: Vec<_> = writers.iter().map(|&i| t(i)).collect();
            assert_eq!(w, &want[..], "round {round}, group {g}");
        }
    }
    // No writers at all: no groups.
    groups.clear();
    groups.sort();
    assert_eq!(groups.len(), 0);
}

/// Runs the scheduler's passes 1-4 with the rule (place.rs's order) over
/// `case`, then lists every read or write of storage that a node's backend cannot use
/// and that no input copy covers: (node, tensor whose storage it touches).
fn hazards_after_placement(case: &Case) -> Vec<(String, String)> {
    placement_and_hazards(case, |_| {}, true).0
}

/// [`hazards_after_placement`] after `edit` changed the built graph, with the rule on or
/// off (off: stock's placement); also every named tensor's placement.
#[allow(clippy::type_complexity)]
fn placement_and_hazards(
    case: &Case,
    edit: fn(&mut crate::sched::mock::Built),
    rule: bool,
) -> (
    Vec<(String, String)>,
    std::collections::BTreeMap<String, Option<(usize, Cause)>>,
) {
    use crate::sched::table::GraphIds;
    use crate::sched::{assign, expand, fill, upgrade};
    let mut b = build(case);
    edit(&mut b);
    let g = b.graph();
    let caps = &b.caps;
    let mut t = Table::default();
    for &(n, backend, cause) in case.before {
        t.set(b.t(n), backend, cause);
    }
    let mut out = Vec::new();
    // SAFETY: every tensor of the graph is owned by `b.arena`, alive for the test.
    unsafe {
        let ix = GraphIds::new(&mut t, &g);
        let mut reuse = Reuse::new(&g, false);
        assign::assign_current(caps, &mut t, &g, &ix, false, rule);
        expand::expand(caps, &mut t, &g, &ix);
        upgrade::upgrade(caps, &mut t, &g, &ix);
        if rule {
            colocate(caps, &mut t, &g, false, &mut reuse);
        }
        fill::fill(caps, &mut t, &g, &ix);
        if rule {
            colocate(caps, &mut t, &g, true, &mut reuse);
        }
        // Where a tensor's bytes really are: its root's buffer, else its root's backend's.
        let storage = |s: *mut ggml_tensor| {
            let root = if (*s).view_src.is_null() {
                s
            } else {
                (*s).view_src
            };
            if !(*root).buffer.is_null() {
                Some((*(*root).buffer).buft)
            } else {
                t.backend(root).map(|rb| caps.buft(rb))
            }
        };
        for &n in inspect::nodes(&g) {
            let node = &*n;
            if meta::is_view_op(node.op) {
                continue;
            }
            let nb = t.backend(n).expect("placed");
            let name = |x: *mut ggml_tensor| inspect::name(&*x).to_string();
            // Its own storage (an in-place writer writes its root's).
            if let Some(bt) = storage(n) {
                if !caps.supports_buft(nb, bt) {
                    out.push((name(n), name(n)));
                }
            }
            for (j, s) in inspect::sources(node) {
                let sb = t.backend(s);
                let copied = sb != Some(nb) && !buffer_supported(caps, &t, s, nb);
                // ADAMW updates its m and v (sources 2 and 3) in place: a copy of
                // them is a lost write.
                let written = node.op == ggml_sys::GGML_OP_OPT_STEP_ADAMW && (j == 2 || j == 3);
                if copied && !written {
                    continue;
                }
                if let Some(bt) = storage(s) {
                    if !caps.supports_buft(nb, bt) {
                        out.push((name(n), name(s)));
                    }
                }
            }
        }
    }
    let placed = b
        .by_name
        .iter()
        .map(|(&n, &p)| (n.to_string(), t.get(p).map(|p| (p.backend, p.cause))))
        .collect();
    (out, placed)
}

/// OPT_STEP_ADAMW writes its moments m and v (sources 2 and 3) in place, not only its
/// view root (the parameter). Placed by the parameter's buffer alone, the step stays on
/// B0, reads m and v through copies and updates the copies: the moments never change.
/// B1 can use all three and runs the op (`mock::adamw_moments_case`).
#[test]
fn adamw_moments_are_written_where_they_live() {
    let case = crate::sched::mock::adamw_moments_case();
    let h = hazards_after_placement(&case);
    assert!(
        h.is_empty(),
        "storage used by a backend that cannot reach it: {h:?}"
    );
}

/// The second call of the rule (after the fill pass) moves a view root
/// and its writers, but not the pure views of that root that the fill pass has just
/// placed next to the root's old backend. A reader of such a view on that old backend
/// then reads it without a copy: from the moved root's memory, in a buffer it cannot
/// use. Here `scratch` (a leaf without storage) is first placed on D by its reader `y`;
/// `v` = VIEW(scratch) follows it to D, `x` reads `v` on D; `w` (SET_ROWS into
/// `scratch`, which only the CPU runs) makes the rule move `scratch` to the CPU: `x`
/// then reads CPU memory on D, which cannot use it.
#[test]
fn views_follow_a_root_moved_after_fill() {
    let case = Case {
        name: "scratch leaf moved after fill, its view left behind",
        ops: &[
            &[GGML_OP_ADD, GGML_OP_VIEW],
            &[GGML_OP_ADD, GGML_OP_VIEW, GGML_OP_SET_ROWS],
        ],
        tweak: device_only,
        graph: &[
            Leaf("scratch", None),
            GraphInput("x_in"),
            GraphInput("idx"),
            Node("y", GGML_OP_ADD, &["scratch", "scratch"]),
            View("v", GGML_OP_VIEW, "scratch", &["scratch"]),
            Node("x", GGML_OP_ADD, &["v", "v"]),
            View(
                "w",
                GGML_OP_SET_ROWS,
                "scratch",
                &["x_in", "idx", "scratch"],
            ),
        ],
        before: &[("y", 0, UserAssigned), ("x", 0, UserAssigned)],
        want: &[],
    };
    let h = hazards_after_placement(&case);
    assert!(
        h.is_empty(),
        "storage used by a backend that cannot reach it: {h:?}"
    );
}

/// Moments without storage (graph-allocated: the scheduler's gallocr allocates them) get
/// their backend only in the fill pass, from their reader, the step: it then reads them
/// without a copy and writes them where they live. Stock has no hazard here, and the rule
/// must change nothing (its first call, before the fill pass, took the unplaced moments
/// as unreadable from every backend and stopped the process).
#[test]
fn adamw_moments_placed_by_the_fill_pass_need_no_move() {
    let case = Case {
        name: "adamw: moments without storage, placed by their reader",
        ops: &[&[GGML_OP_OPT_STEP_ADAMW], &[GGML_OP_OPT_STEP_ADAMW]],
        tweak: no_tweak,
        graph: &[
            Leaf("param", Some((0x100, GGML_BACKEND_BUFFER_USAGE_WEIGHTS))),
            Leaf("grad", Some((0x100, GGML_BACKEND_BUFFER_USAGE_ANY))),
            Leaf("m", None),
            Leaf("v", None),
            Leaf("hp", Some((0x100, GGML_BACKEND_BUFFER_USAGE_ANY))),
            View(
                "step",
                GGML_OP_OPT_STEP_ADAMW,
                "param",
                &["param", "grad", "m", "v", "hp"],
            ),
        ],
        before: &[],
        want: &[],
    };
    let (h_stock, stock) = placement_and_hazards(&case, |_| {}, false);
    assert!(h_stock.is_empty(), "stock has a hazard: {h_stock:?}");
    let (h, ours) = placement_and_hazards(&case, |_| {}, true);
    assert!(
        h.is_empty(),
        "storage used by a backend that cannot reach it: {h:?}"
    );
    assert_eq!(
        ours, stock,
        "no hazard in stock: the rule must change nothing"
    );
}

/// "The root's pure views go with it" covers views outside the node list (VIEW,
/// RESHAPE, PERMUTE, TRANSPOSE) too: a view made by `ggml_view_tensor` has op NONE and is
/// a leaf of the graph, and the fill pass places it by its view source as a VIEW node.
/// The case of
/// `views_follow_a_root_moved_after_fill` with `v` such a leaf: the rule moves `scratch`
/// to the CPU after the fill pass, `v` stays on D, and `x` on D reads `v` without a copy
/// from CPU memory D cannot use.
#[test]
fn leaf_views_follow_a_root_moved_after_fill() {
    fn v_is_a_leaf(b: &mut crate::sched::mock::Built) {
        let v = b.t("v");
        b.nodes.retain(|&n| n != v);
        b.leafs.push(v);
    }
    let case = Case {
        name: "scratch leaf moved after fill, its op-NONE view left behind",
        ops: &[
            &[GGML_OP_ADD, GGML_OP_VIEW],
            &[GGML_OP_ADD, GGML_OP_VIEW, GGML_OP_SET_ROWS],
        ],
        tweak: device_only,
        graph: &[
            Leaf("scratch", None),
            GraphInput("x_in"),
            GraphInput("idx"),
            Node("y", GGML_OP_ADD, &["scratch", "scratch"]),
            // ggml_view_tensor(scratch): op NONE, no sources, view_src scratch.
            View("v", GGML_OP_NONE, "scratch", &[]),
            Node("x", GGML_OP_ADD, &["v", "v"]),
            View(
                "w",
                GGML_OP_SET_ROWS,
                "scratch",
                &["x_in", "idx", "scratch"],
            ),
        ],
        before: &[("y", 0, UserAssigned), ("x", 0, UserAssigned)],
        want: &[],
    };
    let (h, placed) = placement_and_hazards(&case, v_is_a_leaf, true);
    assert!(
        h.is_empty(),
        "storage used by a backend that cannot reach it: {h:?}; placements {placed:?}"
    );
}

/// A step whose root is computed in this graph (`p` on B0, by the user) and whose
/// moments are in B1's buffer: the rule keeps a produced root's writers on the root's
/// backend unless its buffer type is host memory (B1 could use B0's buffer, but the rule
/// does not take that), so the group needs one backend that runs ADD and the step and
/// reads the moments without a copy. None does: the process stops (a review of
/// 7b2e275 found the first message listing B1 with "yes" in every column). The message
/// must say what each backend lacks, and where the moments are.
#[test]
fn adamw_group_stop_says_what_each_backend_lacks() {
    fn peer(m: &mut Mock) {
        m.backends[1].bufts.insert(0x100);
    }
    let case = Case {
        name: "adamw: computed root on B0, step on B1 by the user",
        ops: &[
            &[GGML_OP_ADD, GGML_OP_OPT_STEP_ADAMW],
            &[GGML_OP_OPT_STEP_ADAMW],
            &[GGML_OP_ADD, GGML_OP_OPT_STEP_ADAMW],
        ],
        tweak: peer,
        graph: &[
            Leaf("a", Some((0x100, GGML_BACKEND_BUFFER_USAGE_WEIGHTS))),
            Leaf("grad", Some((0x200, GGML_BACKEND_BUFFER_USAGE_ANY))),
            Leaf("m", Some((0x200, GGML_BACKEND_BUFFER_USAGE_ANY))),
            Leaf("v", Some((0x200, GGML_BACKEND_BUFFER_USAGE_ANY))),
            Leaf("hp", Some((0x300, GGML_BACKEND_BUFFER_USAGE_ANY))),
            Node("p", GGML_OP_ADD, &["a", "a"]),
            View(
                "step",
                GGML_OP_OPT_STEP_ADAMW,
                "p",
                &["p", "grad", "m", "v", "hp"],
            ),
        ],
        before: &[("p", 0, UserAssigned), ("step", 1, UserAssigned)],
        want: &[],
    };
    let b = build(&case);
    let mut t = Table::default();
    for &(n, backend, cause) in case.before {
        t.set(b.t(n), backend, cause);
    }
    let group = [b.t("p"), b.t("step")];
    // SAFETY: the arena's tensors are live for the test.
    let msg =
        unsafe { written_stop_message(&b.caps, &t, b.t("step"), std::ptr::null_mut(), &group) };
    for want in [
        "in-place node 'step' (op OPT_STEP_ADAMW) writes the storage of 'p' (produced in \
         this graph) and of its sources 'm' (in buffer type buft0x200), 'v' (in buffer type \
         buft0x200)",
        "B0 (runs the root's producer and every writer: yes, reads the written sources \
         without a copy: no, runs the op: yes)",
        "B1 (runs the root's producer and every writer: no, reads the written sources \
         without a copy: yes, runs the op: yes)",
        "B2 (runs the root's producer and every writer: yes, reads the written sources \
         without a copy: no, runs the op: yes)",
    ] {
        assert!(msg.contains(want), "{want:?} not in {msg:?}");
    }
}
