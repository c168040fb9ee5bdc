//! The record of one split graph: what [`collect`] reads from the graph, the placement
//! table and the splits, as the serde types that are written (field by field as
//! `docs/sched-dump.md` documents them).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use ggml_sys::{ggml_cgraph, ggml_tensor};
use serde::Serialize;

use super::moves::Moves;
use crate::sched::caps::Caps;
use crate::sched::inplace::is_inplace_writer;
use crate::sched::inspect::{self, cstr};
use crate::sched::split::Split;
use crate::sched::table::Table;
use crate::tensor::meta;

/// The scheduler's settings that shaped the placement.
#[derive(Serialize, Clone, Copy, Debug)]
pub struct Settings {
    /// `GGML_SCHED_INPLACE_RULE` as read (false: placed as stock places).
    pub inplace_rule: bool,
    /// Pipeline copies per graph input (1 without `parallel`).
    pub n_copies: usize,
    /// The pipeline copy this graph used.
    pub cur_copy: usize,
    /// `op_offload` of `ggml_backend_sched_new`.
    pub op_offload: bool,
}

/// One record: the file's whole contents.
#[derive(Serialize, Debug)]
pub struct Record {
    /// Always [`super::FORMAT`].
    pub format: &'static str,
    /// [`super::VERSION`].
    pub version: u32,
    /// This record's number among the process's records (from 0).
    pub seq: usize,
    /// The process that wrote it.
    pub process: Process,
    /// The scheduler's settings.
    pub settings: Settings,
    /// Sizes and hashes of the graph.
    pub graph: GraphInfo,
    /// The scheduler's backends, by priority (the last is the CPU).
    pub backends: Vec<BackendRec>,
    /// The splits in compute order.
    pub splits: Vec<SplitRec>,
    /// The graph's nodes, in graph order.
    pub nodes: Vec<TensorRec>,
    /// The graph's leafs, in graph order.
    pub leafs: Vec<TensorRec>,
    /// Graph inputs that got one copy per pipeline copy (pass 6), by reference.
    pub graph_inputs: Vec<TRef>,
}

/// The writing process.
#[derive(Serialize, Debug)]
pub struct Process {
    /// Its id.
    pub pid: u32,
    /// Its executable's path ("" when unknown).
    pub exe: String,
}

/// Sizes and identity of the graph.
#[derive(Serialize, Debug)]
pub struct GraphInfo {
    /// Number of nodes.
    pub n_nodes: usize,
    /// Number of leafs.
    pub n_leafs: usize,
    /// 16 hex digits over every node's and leaf's name, op, type, shape and sources: equal
    /// for the same graph placed differently (how `./ab view --a --b` pairs records).
    pub structure_hash: String,
    /// 16 hex digits over every placement, cause and split boundary.
    pub placement_hash: String,
}

/// One backend.
#[derive(Serialize, Debug)]
pub struct BackendRec {
    /// Its priority (0 highest).
    pub index: usize,
    /// `ggml_backend_name`.
    pub name: String,
    /// The buffer type its compute tensors are allocated in.
    pub buffer_type: String,
    /// Whether it is the last backend, the CPU.
    pub cpu: bool,
}

/// A reference to a tensor of the record.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct TRef {
    /// `node`, `leaf`, or `other` (a tensor in neither list).
    pub kind: &'static str,
    /// Its position in `nodes` or `leafs` (absent for `other`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// Its name.
    pub name: String,
}

/// One split input: a tensor of another backend that the split reads through a copy.
#[derive(Serialize, Debug)]
pub struct InputRec {
    /// The tensor copied (the original, not the copy).
    pub tensor: TRef,
    /// The backend it is placed on (absent when unplaced).
    pub from_backend: Option<usize>,
    /// Bytes copied per compute (`ggml_nbytes` of the tensor).
    pub bytes: usize,
}

/// One split.
#[derive(Serialize, Debug)]
pub struct SplitRec {
    /// Position in compute order.
    pub index: usize,
    /// Backend index.
    pub backend: usize,
    /// First node (position in `nodes`).
    pub first_node: usize,
    /// One past the last node.
    pub end_node: usize,
    /// Nodes in the range that compute something (not NONE or a view op).
    pub n_ops: usize,
    /// Its input copies, in first-use order.
    pub inputs: Vec<InputRec>,
    /// Sum of the inputs' bytes.
    pub bytes_in: usize,
}

/// A source of a node.
#[derive(Serialize, Debug)]
pub struct SrcRec {
    /// Source slot (0 to GGML_MAX_SRC-1).
    pub slot: usize,
    /// The source (the original tensor where the node reads a split-input copy).
    pub tensor: TRef,
    /// Whether the node reads it through a split-input copy.
    pub via_copy: bool,
}

/// The storage an in-place writer writes.
#[derive(Serialize, Debug)]
pub struct InplaceRec {
    /// The view root (the tensor that owns the storage).
    pub root: TRef,
    /// The root's backend (absent when unplaced).
    pub root_backend: Option<usize>,
    /// Whether the writer runs on the root's backend.
    pub same_backend: bool,
    /// Whether the writer's backend can use the storage it writes: it runs on the root's
    /// backend, or the storage's buffer type is host memory that backend supports (which
    /// the in-place rule leaves as it is). `false` is the defect of issue 5.
    pub usable: bool,
}

/// A move by the in-place rule.
#[derive(Serialize, Debug)]
pub struct MoveRec {
    /// The backend before the rule (absent: none yet).
    pub from: Option<usize>,
    /// The backend after it.
    pub to: usize,
    /// `before-fill` or `after-fill`: which of the rule's two calls moved it last.
    pub call: &'static str,
}

/// One node or leaf.
#[derive(Serialize, Debug)]
pub struct TensorRec {
    /// Position in its list.
    pub index: usize,
    /// Name.
    pub name: String,
    /// `ggml_op_desc` (unary and GLU ops by their own name).
    pub op: String,
    /// `ggml_type_name`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `ne[0..4]`.
    pub shape: [i64; 4],
    /// `ggml_nbytes`.
    pub bytes: usize,
    /// Backend index (absent when unplaced).
    pub backend: Option<usize>,
    /// The cause's label (see `docs/sched-dump.md`; absent when unplaced).
    pub cause: Option<&'static str>,
    /// The buffer type its storage is (or will be) in.
    pub buffer_type: Option<String>,
    /// `allocated` (own buffer), `view-allocated` (a view of allocated storage), `compute`
    /// (allocated by the scheduler in its backend's compute buffer), `view-compute` (a view
    /// of such storage) or `none`.
    pub storage: &'static str,
    /// The split it runs in (nodes only).
    pub split: Option<usize>,
    /// A view op (VIEW, RESHAPE, PERMUTE, TRANSPOSE) or NONE: computes nothing.
    pub is_view: bool,
    /// The view source, when it has one.
    pub view_src: Option<TRef>,
    /// For an in-place writer: the storage it writes.
    pub inplace: Option<InplaceRec>,
    /// The in-place rule's move of it, if any.
    #[serde(rename = "move")]
    pub moved: Option<MoveRec>,
    /// Sources (nodes only).
    pub srcs: Vec<SrcRec>,
    /// Set flags: `input`, `output`, `param`, `loss`, `compute`.
    pub flags: Vec<&'static str>,
}

/// Everything a record is built from.
pub struct Input<'a> {
    /// The backends' answers.
    pub caps: &'a dyn Caps,
    /// The placements.
    pub table: &'a Table,
    /// The graph just split.
    pub graph: &'a ggml_cgraph,
    /// Its splits.
    pub splits: &'a [Split],
    /// The graph inputs of pass 6.
    pub graph_inputs: &'a [*mut ggml_tensor],
    /// The in-place rule's moves.
    pub moves: &'a Moves,
    /// The settings.
    pub settings: Settings,
}

fn flags(t: &ggml_tensor) -> Vec<&'static str> {
    use ggml_sys::*;
    [
        (GGML_TENSOR_FLAG_INPUT, "input"),
        (GGML_TENSOR_FLAG_OUTPUT, "output"),
        (GGML_TENSOR_FLAG_PARAM, "param"),
        (GGML_TENSOR_FLAG_LOSS, "loss"),
        (GGML_TENSOR_FLAG_COMPUTE, "compute"),
    ]
    .into_iter()
    .filter(|&(f, _)| t.flags & f as i32 != 0)
    .map(|(_, n)| n)
    .collect()
}

/// Each split-input copy, to the tensor it copies.
fn copies(inp: &Input) -> rustc_hash::FxHashMap<*mut ggml_tensor, *mut ggml_tensor> {
    let mut copy_of = rustc_hash::FxHashMap::default();
    for s in inp.splits {
        for (&t, &id) in s.inputs.iter().zip(&s.input_ids) {
            for c in 0..inp.settings.n_copies.max(1) {
                if let Some(cp) = inp.table.copy_at(id, s.backend, c) {
                    copy_of.insert(cp, t);
                }
            }
        }
    }
    copy_of
}

/// Builds the record of `inp.graph`.
///
/// # Safety
/// The graph must be live, of live tensors, just split into `inp.splits` (whose inputs and
/// the table's copies are live), and `graph_inputs` live tensors.
pub unsafe fn collect(inp: &Input) -> Record {
    let (caps, table) = (inp.caps, inp.table);
    // SAFETY: the graph is live and not resized while this runs (this function's contract).
    let (nodes, leafs) = unsafe { (inspect::nodes(inp.graph), inspect::leafs(inp.graph)) };
    let mut refs: HashMap<*mut ggml_tensor, (&'static str, usize)> = HashMap::new();
    for (i, &l) in leafs.iter().enumerate() {
        refs.insert(l, ("leaf", i));
    }
    for (i, &n) in nodes.iter().enumerate() {
        refs.insert(n, ("node", i));
    }
    let copy_of = copies(inp);
    let tref = |t: *mut ggml_tensor| -> TRef {
        // SAFETY: called with tensors of the graph, its sources and view sources, all live.
        let name = inspect::name(unsafe { &*t });
        match refs.get(&t) {
            Some(&(kind, i)) => TRef {
                kind,
                index: Some(i),
                name,
            },
            None => TRef {
                kind: "other",
                index: None,
                name,
            },
        }
    };
    let mut split_of = vec![None; nodes.len()];
    for (k, s) in inp.splits.iter().enumerate() {
        for slot in split_of.iter_mut().take(s.i_end).skip(s.i_start) {
            *slot = Some(k);
        }
    }
    // SAFETY: the buffer types of live buffers and the backends' compute buffer types.
    let buft_name = |b| unsafe { caps.buft_name(b) };
    let tensor = |t: *mut ggml_tensor, index: usize, is_node: bool| -> TensorRec {
        // SAFETY: a tensor of the live graph (this function's contract); only read.
        let r = unsafe { &*t };
        let p = table.get(t);
        let owner = if r.view_src.is_null() { t } else { r.view_src };
        let view = !r.view_src.is_null();
        // SAFETY: `owner` is `t` or its view source, live; a non-NULL buffer of a live
        // tensor is live.
        let buf = unsafe { (*owner).buffer };
        // The buffer type of the storage: its buffer's, else its backend's compute buffer's.
        let allocated = !buf.is_null();
        let storage_bt = if allocated {
            // SAFETY: as above.
            Some(unsafe { (*buf).buft })
        } else {
            table.backend(owner).map(|b| caps.buft(b))
        };
        let storage = match (storage_bt, allocated, view) {
            (None, _, _) => "none",
            (Some(_), true, true) => "view-allocated",
            (Some(_), true, false) => "allocated",
            (Some(_), false, true) => "view-compute",
            (Some(_), false, false) => "compute",
        };
        let buffer_type = storage_bt.map(buft_name);
        let inplace = is_inplace_writer(r).then(|| {
            let rb = table.backend(r.view_src);
            let same_backend = rb.is_some() && rb == p.map(|p| p.backend);
            // Allocated storage is usable from any backend that can use its buffer type (the
            // rule moves a writer only when its backend cannot); storage produced in the
            // graph from the root's backend, or from one that can use that backend's buffer
            // type when it is host memory.
            let usable = same_backend
                || match (p, storage_bt) {
                    // SAFETY: a live buffer's type or a backend's compute buffer type.
                    (Some(p), Some(bt)) => unsafe {
                        (allocated || caps.buft_is_host(bt)) && caps.supports_buft(p.backend, bt)
                    },
                    _ => false,
                };
            InplaceRec {
                root: tref(r.view_src),
                root_backend: rb,
                same_backend,
                usable,
            }
        });
        let moved = if is_node {
            inp.moves
                .moves
                .get(index)
                .copied()
                .flatten()
                .map(|m| MoveRec {
                    from: m.from,
                    to: m.to,
                    call: if m.call == 0 {
                        "before-fill"
                    } else {
                        "after-fill"
                    },
                })
        } else {
            None
        };
        let srcs = if is_node {
            inspect::sources(r)
                .map(|(slot, s)| match copy_of.get(&s) {
                    Some(&orig) => SrcRec {
                        slot,
                        tensor: tref(orig),
                        via_copy: true,
                    },
                    None => SrcRec {
                        slot,
                        tensor: tref(s),
                        via_copy: false,
                    },
                })
                .collect()
        } else {
            Vec::new()
        };
        TensorRec {
            index,
            name: inspect::name(r),
            // SAFETY: `t` is live; `ggml_op_desc` returns a static NUL-terminated name.
            op: unsafe { cstr(ggml_sys::ggml_op_desc(t)) },
            // SAFETY: a live tensor's type; `ggml_type_name` returns a static name.
            type_: unsafe { cstr(ggml_sys::ggml_type_name(r.type_)) },
            shape: r.ne,
            bytes: meta::nbytes(r),
            backend: p.map(|p| p.backend),
            cause: p.map(|p| p.cause.label()),
            buffer_type,
            storage,
            split: if is_node { split_of[index] } else { None },
            is_view: r.op == ggml_sys::GGML_OP_NONE || meta::is_view_op(r.op),
            view_src: view.then(|| tref(r.view_src)),
            inplace,
            moved,
            srcs,
            flags: flags(r),
        }
    };
    let node_recs: Vec<TensorRec> = nodes
        .iter()
        .enumerate()
        .map(|(i, &n)| tensor(n, i, true))
        .collect();
    let leaf_recs: Vec<TensorRec> = leafs
        .iter()
        .enumerate()
        .map(|(i, &l)| tensor(l, i, false))
        .collect();
    let splits: Vec<SplitRec> = inp
        .splits
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let inputs: Vec<InputRec> = s
                .inputs
                .iter()
                .map(|&t| InputRec {
                    tensor: tref(t),
                    from_backend: table.backend(t),
                    // SAFETY: a split input is a live source of a graph node.
                    bytes: meta::nbytes(unsafe { &*t }),
                })
                .collect();
            SplitRec {
                index: k,
                backend: s.backend,
                first_node: s.i_start,
                end_node: s.i_end,
                n_ops: node_recs[s.i_start..s.i_end.min(node_recs.len())]
                    .iter()
                    .filter(|n| !n.is_view)
                    .count(),
                bytes_in: inputs.iter().map(|i| i.bytes).sum(),
                inputs,
            }
        })
        .collect();
    let backends = (0..caps.n_backends())
        .map(|b| BackendRec {
            index: b,
            name: caps.backend_name(b),
            buffer_type: buft_name(caps.buft(b)),
            cpu: b + 1 == caps.n_backends(),
        })
        .collect();
    // SAFETY: this function's contract is `hashes`'s.
    let (sh, ph) = unsafe { hashes(inp) };
    Record {
        format: super::FORMAT,
        version: super::VERSION,
        seq: 0,
        process: Process {
            pid: std::process::id(),
            exe: std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        },
        settings: inp.settings,
        graph: GraphInfo {
            n_nodes: nodes.len(),
            n_leafs: leafs.len(),
            structure_hash: format!("{sh:016x}"),
            placement_hash: format!("{ph:016x}"),
        },
        backends,
        splits,
        graph_inputs: inp.graph_inputs.iter().map(|&t| tref(t)).collect(),
        nodes: node_recs,
        leafs: leaf_recs,
    }
}

/// The structure and placement hashes of `inp.graph`, read from the graph and the table
/// directly (the scheduler computes them on every split while records are written, to
/// decide whether the split is new, so they build no strings). FxHash (rustc-hash) has no random seed, so
/// the values are the same in every process and run. The structure covers every node's and
/// leaf's name, op, type and shape and every node's sources by name and op (a split-input
/// copy by the tensor it copies); the placement every backend and cause and the splits.
///
/// # Safety
/// As [`collect`].
pub unsafe fn hashes(inp: &Input) -> (u64, u64) {
    use rustc_hash::FxHasher;
    let (mut s, mut p) = (FxHasher::default(), FxHasher::default());
    // SAFETY: the graph is live and not resized while this runs (this function's contract).
    let (nodes, leafs) = unsafe { (inspect::nodes(inp.graph), inspect::leafs(inp.graph)) };
    let tensor = |t: &ggml_tensor, h: &mut FxHasher| {
        // SAFETY: ggml keeps a tensor's name NUL-terminated within its 64 bytes.
        let name = unsafe { std::ffi::CStr::from_ptr(t.name.as_ptr()) };
        (name.to_bytes(), t.op, t.type_, t.ne).hash(h);
    };
    let copy_of = copies(inp);
    for (i, &n) in nodes.iter().enumerate() {
        // SAFETY: a node of the live graph (this function's contract); only read.
        let r = unsafe { &*n };
        tensor(r, &mut s);
        for (j, src) in inspect::sources(r) {
            j.hash(&mut s);
            let orig = copy_of.get(&src).copied().unwrap_or(src);
            // SAFETY: a source of a live node, or the tensor a split input copies, is live.
            let o = unsafe { &*orig };
            // SAFETY: ggml keeps a tensor's name NUL-terminated within its 64 bytes.
            (
                unsafe { std::ffi::CStr::from_ptr(o.name.as_ptr()) }.to_bytes(),
                o.op,
            )
                .hash(&mut s);
        }
        (i, inp.table.get(n).map(|x| (x.backend, x.cause))).hash(&mut p);
    }
    for &l in leafs {
        // SAFETY: a leaf of the live graph; only read.
        tensor(unsafe { &*l }, &mut s);
        inp.table.get(l).map(|x| (x.backend, x.cause)).hash(&mut p);
    }
    for sp in inp.splits {
        (sp.backend, sp.i_start, sp.i_end, sp.inputs.len()).hash(&mut p);
    }
    (s.finish(), p.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::ctx::CtxPool;
    use crate::sched::mock::{build, Case, Def::*, Mock};
    use crate::sched::split::{self, SplitCtx};
    use crate::sched::table::GraphIds;
    use crate::sched::{assign, expand, fill, inplace, record};
    use ggml_sys::*;

    /// The in-place reproducer's shape (issue 5): a device weight pulls `h` and the mask
    /// `fill` to the device, which runs FILL and ADD but not SET_ROWS and cannot use host
    /// memory; `set_rows` writes into `fill`'s storage.
    const OPS: &[&[ggml_op]] = &[
        &[GGML_OP_FILL, GGML_OP_ADD],
        &[GGML_OP_FILL, GGML_OP_SET_ROWS, GGML_OP_ADD],
    ];
    const GRAPH: &[crate::sched::mock::Def] = &[
        GraphInput("x"),
        GraphInput("idx"),
        Leaf("w", Some((0x100, GGML_BACKEND_BUFFER_USAGE_WEIGHTS))),
        Node("h", GGML_OP_ADD, &["w", "x"]),
        Node("fill", GGML_OP_FILL, &["h"]),
        View("set_rows", GGML_OP_SET_ROWS, "fill", &["fill", "x", "idx"]),
        Node("out", GGML_OP_ADD, &["set_rows", "h"]),
    ];
    fn device_only(m: &mut Mock) {
        m.backends[0].bufts.remove(&0x200);
    }

    /// The record of the reproducer's graph run through every pass, as JSON.
    fn record_of(rule: bool) -> serde_json::Value {
        serde_json::to_value(record_struct(rule)).unwrap()
    }

    /// The record of the reproducer's graph run through every pass.
    fn record_struct(rule: bool) -> Record {
        // SAFETY: `with_input` gives the input of a graph just split, all live.
        with_input(rule, |i| unsafe { collect(i) })
    }

    /// Runs the reproducer's graph through every pass and gives `f` the record's input.
    fn with_input<R>(rule: bool, f: impl FnOnce(&Input) -> R) -> R {
        let case = Case {
            name: "repro",
            ops: OPS,
            tweak: device_only,
            graph: GRAPH,
            before: &[],
            want: &[],
        };
        with_case(&case, rule, f)
    }

    /// Runs `case`'s graph through every pass and gives `f` the record's input.
    fn with_case<R>(case: &Case, rule: bool, f: impl FnOnce(&Input) -> R) -> R {
        let mut b = build(case);
        let g = b.graph();
        let caps = &b.caps;
        let mut t = Table::default();
        let mut pool = CtxPool::new(16);
        let mut moves = record::Moves::default();
        let mut reuse = inplace::Reuse::new(&g, false);
        let mut splits = Vec::new();
        // SAFETY: every tensor of the graph is owned by `b.arena`, alive for the test; the
        // copies live in `pool`. The passes run in the scheduler's order (see place.rs).
        unsafe {
            let ix = GraphIds::new(&mut t, &g);
            assign::assign_current(caps, &mut t, &g, &ix, false, rule);
            expand::expand(caps, &mut t, &g, &ix);
            crate::sched::upgrade::upgrade(caps, &mut t, &g, &ix);
            if rule {
                let before = record::moves::snapshot(&t, &ix);
                inplace::colocate(caps, &mut t, &g, false, &mut reuse);
                moves.note(&before, &t, &ix, 0);
            }
            fill::fill(caps, &mut t, &g, &ix);
            if rule {
                let before = record::moves::snapshot(&t, &ix);
                inplace::colocate(caps, &mut t, &g, true, &mut reuse);
                moves.note(&before, &t, &ix, 1);
            }
            let mut sc = SplitCtx {
                caps,
                pool: &mut pool,
                n_copies: 1,
                cur_copy: 0,
                rewrites: &mut Vec::new(),
                originals: &mut Vec::new(),
                view_roots: rule,
            };
            split::split_graph(&mut sc, &mut t, &g, &ix, 0, &mut splits, &mut Vec::new());
            let gi = split::graph_inputs(&mut sc, &mut t, &g);
            f(&Input {
                caps,
                table: &t,
                graph: &g,
                splits: &splits,
                graph_inputs: &gi,
                moves: &moves,
                settings: Settings {
                    inplace_rule: rule,
                    n_copies: 1,
                    cur_copy: 0,
                    op_offload: false,
                },
            })
        }
    }

    /// The tensor named `name` in list `list` of `rec`.
    fn find<'a>(rec: &'a serde_json::Value, list: &str, name: &str) -> &'a serde_json::Value {
        rec[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {list}"))
    }

    /// Every documented field is present with the values the passes gave (docs/sched-dump.md).
    #[test]
    fn documented_fields_with_real_values() {
        let on = record_of(true);
        assert_eq!(on["format"], "ggml-sched-dump");
        assert_eq!(on["version"], 1);
        assert_eq!(on["settings"]["inplace_rule"], true);
        assert_eq!(on["settings"]["n_copies"], 1);
        assert_eq!(on["graph"]["n_nodes"], 4);
        assert_eq!(on["graph"]["n_leafs"], 3);
        assert_eq!(on["graph"]["structure_hash"].as_str().unwrap().len(), 16);
        let names: Vec<_> = on["backends"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["name"].as_str().unwrap(),
                    b["buffer_type"].as_str().unwrap(),
                    b["cpu"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [("B0", "buft0x100", false), ("B1", "buft0x200", true)]
        );
        // The rule moved the mask to the CPU, where its writer runs, before the fill pass.
        let fill = find(&on, "nodes", "fill");
        assert_eq!(fill["index"], 1);
        assert_eq!(fill["op"], "FILL");
        assert_eq!(fill["type"], "f32");
        assert_eq!(fill["shape"], serde_json::json!([4, 1, 1, 1]));
        assert_eq!(fill["bytes"], 16);
        assert_eq!(fill["backend"], 1);
        assert_eq!(fill["cause"], "inplace");
        assert_eq!(fill["buffer_type"], "buft0x200");
        assert_eq!(fill["storage"], "compute");
        assert_eq!(fill["split"], 1);
        assert_eq!(fill["is_view"], false);
        assert_eq!(
            fill["move"],
            serde_json::json!({"from": 0, "to": 1, "call": "before-fill"})
        );
        assert_eq!(
            fill["srcs"],
            serde_json::json!([
                {"slot": 0, "tensor": {"kind": "node", "index": 0, "name": "h"}, "via_copy": true}
            ])
        );
        let w = find(&on, "nodes", "set_rows");
        assert_eq!(w["backend"], 1);
        assert_eq!(w["cause"], "best-in");
        assert_eq!(w["storage"], "view-compute");
        assert_eq!(w["move"], serde_json::Value::Null);
        assert_eq!(w["view_src"]["name"], "fill");
        assert_eq!(
            w["inplace"],
            serde_json::json!({
                "root": {"kind": "node", "index": 1, "name": "fill"}, "root_backend": 1, "same_backend": true,
                "usable": true
            })
        );
        let x = find(&on, "leafs", "x");
        assert_eq!(
            (x["backend"].clone(), x["cause"].clone()),
            (1.into(), "input".into())
        );
        assert_eq!(x["flags"], serde_json::json!(["input"]));
        let wt = find(&on, "leafs", "w");
        assert_eq!(wt["storage"], "allocated");
        assert_eq!(wt["cause"], "prealloc");
        // Splits: device, CPU (fill + set_rows, reading h), device; 16-byte copies.
        let splits: Vec<_> = on["splits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let ins: Vec<_> = s["inputs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| {
                        (
                            i["tensor"]["name"].as_str().unwrap().to_string(),
                            i["from_backend"].as_u64().unwrap(),
                            i["bytes"].as_u64().unwrap(),
                        )
                    })
                    .collect();
                (
                    s["backend"].as_u64().unwrap(),
                    s["first_node"].as_u64().unwrap(),
                    s["end_node"].as_u64().unwrap(),
                    s["n_ops"].as_u64().unwrap(),
                    s["bytes_in"].as_u64().unwrap(),
                    ins,
                )
            })
            .collect();
        assert_eq!(
            splits,
            [
                (0, 0, 1, 1, 16, vec![("x".to_string(), 1, 16)]),
                (1, 1, 3, 2, 16, vec![("h".to_string(), 0, 16)]),
                (0, 3, 4, 1, 16, vec![("set_rows".to_string(), 1, 16)]),
            ]
        );

        // Rule off (stock's placement): the writer runs on the CPU, its storage on the
        // device; nothing moved; the same graph by its structure hash.
        let off = record_of(false);
        assert_eq!(off["settings"]["inplace_rule"], false);
        assert_eq!(
            off["graph"]["structure_hash"],
            on["graph"]["structure_hash"]
        );
        assert_ne!(
            off["graph"]["placement_hash"],
            on["graph"]["placement_hash"]
        );
        let fill = find(&off, "nodes", "fill");
        assert_eq!(
            (fill["backend"].clone(), fill["cause"].clone()),
            (0.into(), "expd-dn".into())
        );
        assert_eq!(fill["move"], serde_json::Value::Null);
        let w = find(&off, "nodes", "set_rows");
        assert_eq!(w["backend"], 1);
        assert_eq!(w["buffer_type"], "buft0x100");
        assert_eq!(w["inplace"]["root_backend"], 0);
        assert_eq!(w["inplace"]["same_backend"], false);
        assert_eq!(w["inplace"]["usable"], false);
    }

    /// A writer on the device writing storage the CPU produced in its host compute buffer,
    /// which the device can use: apart from the root's backend, but no defect (the rule
    /// leaves it so), and the record says so with `usable`, for the page not to flag it.
    #[test]
    fn a_writer_of_usable_host_storage_is_usable() {
        fn no_tweak(_: &mut Mock) {}
        let case = Case {
            name: "host storage the device can use",
            ops: &[&[GGML_OP_SET_ROWS], &[GGML_OP_FILL, GGML_OP_SET_ROWS]],
            tweak: no_tweak,
            graph: &[
                GraphInput("x"),
                GraphInput("idx"),
                Leaf("w", Some((0x100, GGML_BACKEND_BUFFER_USAGE_WEIGHTS))),
                Node("fill", GGML_OP_FILL, &["x"]),
                View("set_rows", GGML_OP_SET_ROWS, "fill", &["fill", "w", "idx"]),
            ],
            before: &[],
            want: &[],
        };
        for rule in [false, true] {
            // SAFETY: `with_case` gives the input of a graph just split, all live.
            let rec =
                serde_json::to_value(with_case(&case, rule, |i| unsafe { collect(i) })).unwrap();
            let fill = find(&rec, "nodes", "fill");
            let w = find(&rec, "nodes", "set_rows");
            assert_eq!(
                (fill["backend"].clone(), w["backend"].clone()),
                (1.into(), 0.into())
            );
            assert_eq!(w["inplace"]["same_backend"], false, "rule {rule}");
            assert_eq!(w["inplace"]["usable"], true, "rule {rule}");
        }
    }

    /// A record goes to `sched-PID-SEQ.json` once per distinct (structure, placement).
    #[test]
    fn written_once_per_distinct_graph() {
        let d = std::env::temp_dir().join(format!("sched-dump-write-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let files = || {
            let mut v: Vec<_> = std::fs::read_dir(&d)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        // SAFETY: `with_input` gives the input of a graph just split, all live.
        let write = |rule| with_input(rule, |i| unsafe { record::write(&d, i) });
        write(true);
        write(true);
        assert_eq!(
            files().len(),
            1,
            "the same graph and placement again: no second file"
        );
        write(false);
        let f = files();
        assert_eq!(f.len(), 2);
        let pid = std::process::id();
        assert!(
            f.iter()
                .all(|n| n.starts_with(&format!("sched-{pid}-")) && n.ends_with(".json")),
            "{f:?}"
        );
        let back: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join(&f[1])).unwrap()).unwrap();
        assert_eq!(back["settings"]["inplace_rule"], false);
        assert_eq!(back["nodes"].as_array().unwrap().len(), 4);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The rule moves OPT_STEP_ADAMW to the backend that reads its moments without a copy
    /// and can use the parameter's (allocated) buffer type (`mock::adamw_moments_case`: B1,
    /// off the parameter's backend B0). That placement writes everything where it lives, and
    /// the record must say so (`usable`): for allocated storage any backend that can use its
    /// buffer type, as the rule and sched-diff judge it (it counted only the root's backend
    /// or host memory).
    #[test]
    fn a_step_moved_to_its_moments_is_usable() {
        let case = crate::sched::mock::adamw_moments_case();
        // SAFETY: `with_case` gives the input of a graph just split, all live.
        let rec = serde_json::to_value(with_case(&case, true, |i| unsafe { collect(i) })).unwrap();
        let step = find(&rec, "nodes", "step");
        assert_eq!(step["backend"], 1, "the rule moved the step to its moments");
        assert_eq!(step["cause"], "inplace");
        assert_eq!(step["inplace"]["usable"], true, "{}", step["inplace"]);
    }
}
