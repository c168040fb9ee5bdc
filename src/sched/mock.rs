//! A pure-Rust stand-in for backends, buffers and tensors, for the passes' unit tests.

use super::caps::Caps;
use ggml_sys::{ggml_backend_buffer, ggml_op};
use ggml_sys::{ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_tensor};
use std::collections::HashSet;

/// One mock backend: which ops it runs, which buffer types it can use, which ops it
/// asks to offload.
#[derive(Default)]
pub struct MockBackend {
    /// Name for messages.
    pub name: String,
    /// Ops it supports (GGML_OP_NONE is added always).
    pub ops: HashSet<ggml_op>,
    /// Tensors it refuses although the op is in `ops`.
    pub refuse: HashSet<usize>,
    /// Buffer types (by fake address) it can use.
    pub bufts: HashSet<usize>,
    /// Ops it wants to offload.
    pub offload: HashSet<ggml_op>,
}

/// Backends by priority; buffer type of backend `b` is the fake address `0x100 * (b + 1)`
/// unless `own_buft` says otherwise.
#[derive(Default)]
pub struct Mock {
    /// The backends.
    pub backends: Vec<MockBackend>,
    /// Per backend, the buffer type it allocates in.
    pub own_buft: Vec<usize>,
    /// Buffer types that are host-addressable.
    pub host_bufts: HashSet<usize>,
}

impl Mock {
    /// `n` backends, each with its own buffer type `0x100*(b+1)`, the last (CPU) one
    /// host-addressable; each supports every op in `ops[b]`.
    pub fn new(ops: &[&[ggml_op]]) -> Mock {
        let mut m = Mock::default();
        for (b, o) in ops.iter().enumerate() {
            let buft = 0x100 * (b + 1);
            m.backends.push(MockBackend {
                name: format!("B{b}"),
                ops: o.iter().copied().chain([ggml_sys::GGML_OP_NONE]).collect(),
                bufts: [buft].into_iter().collect(),
                ..Default::default()
            });
            m.own_buft.push(buft);
        }
        let cpu = m.own_buft[ops.len() - 1];
        m.host_bufts.insert(cpu);
        // every backend can read host memory in this mock unless a test removes it
        for b in &mut m.backends {
            b.bufts.insert(cpu);
        }
        m
    }
}

impl Caps for Mock {
    fn n_backends(&self) -> usize {
        self.backends.len()
    }
    fn buft(&self, b: usize) -> ggml_backend_buffer_type_t {
        self.own_buft[b] as ggml_backend_buffer_type_t
    }
    unsafe fn supports_op(&self, b: usize, op: *const ggml_tensor) -> bool {
        // SAFETY: tests pass live boxed tensors.
        let t = unsafe { &*op };
        self.backends[b].ops.contains(&t.op) && !self.backends[b].refuse.contains(&(op as usize))
    }
    unsafe fn supports_buft(&self, b: usize, buft: ggml_backend_buffer_type_t) -> bool {
        self.backends[b].bufts.contains(&(buft as usize))
    }
    unsafe fn offload_op(&self, b: usize, op: *const ggml_tensor) -> bool {
        // SAFETY: as above.
        self.backends[b].offload.contains(&unsafe { &*op }.op)
    }
    unsafe fn buffer_is_host(&self, buf: ggml_backend_buffer_t) -> bool {
        // SAFETY: tests pass live boxed buffers.
        self.host_bufts.contains(&(unsafe { &*buf }.buft as usize))
    }
    unsafe fn buft_is_host(&self, buft: ggml_backend_buffer_type_t) -> bool {
        self.host_bufts.contains(&(buft as usize))
    }
    fn backend_name(&self, b: usize) -> String {
        self.backends[b].name.clone()
    }
    unsafe fn buft_name(&self, buft: ggml_backend_buffer_type_t) -> String {
        format!("buft{:#x}", buft as usize)
    }
}

/// Owns fake tensors and buffers; pointers stay valid while it lives.
// Boxes keep every tensor's address stable while the vectors grow.
#[allow(clippy::vec_box)]
#[derive(Default)]
pub struct Arena {
    tensors: Vec<Box<ggml_tensor>>,
    buffers: Vec<Box<ggml_backend_buffer>>,
}

impl Arena {
    /// A buffer of buffer type `buft` (fake address) with `usage`.
    pub fn buffer(
        &mut self,
        buft: usize,
        usage: ggml_sys::ggml_backend_buffer_usage,
    ) -> *mut ggml_backend_buffer {
        let mut b: Box<ggml_backend_buffer> = Box::default();
        b.buft = buft as ggml_backend_buffer_type_t;
        b.usage = usage;
        let p: *mut ggml_backend_buffer = &mut *b;
        self.buffers.push(b);
        p
    }

    /// A tensor with `op` and `srcs`.
    pub fn tensor(
        &mut self,
        name: &str,
        op: ggml_op,
        srcs: &[*mut ggml_tensor],
    ) -> *mut ggml_tensor {
        let mut t: Box<ggml_tensor> = Box::default();
        t.op = op;
        t.type_ = ggml_sys::GGML_TYPE_F32;
        t.ne = [4, 1, 1, 1];
        t.nb = [4, 16, 16, 16];
        for (i, s) in srcs.iter().enumerate() {
            t.src[i] = *s;
        }
        for (i, c) in name.bytes().take(63).enumerate() {
            t.name[i] = c as std::os::raw::c_char;
        }
        let p: *mut ggml_tensor = &mut *t;
        self.tensors.push(t);
        p
    }

    /// A leaf (op NONE) in `buffer` (may be NULL).
    pub fn leaf(&mut self, name: &str, buffer: *mut ggml_backend_buffer) -> *mut ggml_tensor {
        let t = self.tensor(name, ggml_sys::GGML_OP_NONE, &[]);
        // SAFETY: t was just created and is owned by the arena.
        unsafe { (*t).buffer = buffer };
        t
    }

    /// A graph input leaf (flag INPUT, no storage).
    pub fn input(&mut self, name: &str) -> *mut ggml_tensor {
        let t = self.leaf(name, std::ptr::null_mut());
        // SAFETY: as above.
        unsafe { (*t).flags |= ggml_sys::GGML_TENSOR_FLAG_INPUT as i32 };
        t
    }

    /// A node whose result is a view of `of` (in-place when `op` is not a view op).
    /// `of` must be a tensor of this arena.
    pub fn view_node(
        &mut self,
        name: &str,
        op: ggml_op,
        of: *mut ggml_tensor,
        srcs: &[*mut ggml_tensor],
    ) -> *mut ggml_tensor {
        let t = self.tensor(name, op, srcs);
        // SAFETY: t and of are owned by the arena. Like ggml's views, the new tensor has no
        // buffer of its own until an allocator initialises it.
        unsafe {
            let root = if (*of).view_src.is_null() {
                of
            } else {
                (*of).view_src
            };
            (*t).view_src = root;
        }
        t
    }
}

/// A graph over `nodes` and `leafs` (the vectors must outlive it).
pub fn graph(
    nodes: &mut [*mut ggml_tensor],
    leafs: &mut [*mut ggml_tensor],
) -> ggml_sys::ggml_cgraph {
    ggml_sys::ggml_cgraph {
        size: nodes.len().max(leafs.len()) as i32,
        n_nodes: nodes.len() as i32,
        n_leafs: leafs.len() as i32,
        nodes: nodes.as_mut_ptr(),
        leafs: leafs.as_mut_ptr(),
        ..Default::default()
    }
}

/// One tensor of a [`Case`]'s graph, by name. Sources name tensors listed before.
#[derive(Clone, Copy)]
pub enum Def {
    /// A graph input leaf (flag INPUT, no storage).
    GraphInput(&'static str),
    /// A leaf in a buffer of `(buffer type, usage)`, or without storage for `None`.
    Leaf(
        &'static str,
        Option<(usize, ggml_sys::ggml_backend_buffer_usage)>,
    ),
    /// A node: name, op, sources.
    Node(&'static str, ggml_op, &'static [&'static str]),
    /// A node whose result is a view of the second name (in place unless `op` is a view
    /// op): name, op, view source, sources.
    View(&'static str, ggml_op, &'static str, &'static [&'static str]),
}

/// One row of a pass's test table: backends, graph, placements before the pass, and the
/// expected placement of every named tensor after it (`None`: still unplaced).
pub struct Case {
    /// What the case shows.
    pub name: &'static str,
    /// Per backend (by priority, the CPU last), the ops it runs.
    pub ops: &'static [&'static [ggml_op]],
    /// Changes to the mock's buffer types before the graph is built.
    pub tweak: fn(&mut Mock),
    /// Leafs (GraphInput, Leaf) and nodes (Node, View), each list in order.
    pub graph: &'static [Def],
    /// Placements made before the pass runs.
    pub before: &'static [(&'static str, usize, super::table::Cause)],
    /// After the pass: backend and cause per tensor.
    pub want: &'static [(&'static str, Option<(usize, super::table::Cause)>)],
}

/// A [`Case`]'s mock without changes.
pub fn no_tweak(_: &mut Mock) {}

/// OPT_STEP_ADAMW with its parameter in B0's buffer type (0x100) and its moments `m`, `v` in
/// B1's (0x200): B1 can use B0's buffer type as well (peer access), no device the CPU's
/// (0x300). Only B1 writes all three where they live; the parameter's buffer alone places the
/// step on B0, which would read the moments through copies.
pub fn adamw_moments_case() -> Case {
    fn peers(m: &mut Mock) {
        m.backends[0].bufts.remove(&0x300);
        m.backends[1].bufts.remove(&0x300);
        m.backends[1].bufts.insert(0x100);
    }
    use ggml_sys::*;
    use Def::*;
    Case {
        name: "adamw: parameter in B0's buffer, moments in B1's",
        ops: &[
            &[GGML_OP_OPT_STEP_ADAMW],
            &[GGML_OP_OPT_STEP_ADAMW],
            &[GGML_OP_OPT_STEP_ADAMW],
        ],
        tweak: peers,
        graph: &[
            Leaf("param", Some((0x100, GGML_BACKEND_BUFFER_USAGE_WEIGHTS))),
            Leaf("grad", Some((0x200, GGML_BACKEND_BUFFER_USAGE_ANY))),
            Leaf("m", Some((0x200, GGML_BACKEND_BUFFER_USAGE_ANY))),
            Leaf("v", Some((0x200, GGML_BACKEND_BUFFER_USAGE_ANY))),
            Leaf("hp", Some((0x200, GGML_BACKEND_BUFFER_USAGE_ANY))),
            View(
                "step",
                GGML_OP_OPT_STEP_ADAMW,
                "param",
                &["param", "grad", "m", "v", "hp"],
            ),
        ],
        before: &[],
        want: &[],
    }
}

/// A built [`Case`]: the mock, the tensors and the graph's lists (the graph points into them,
/// so they stay here).
pub struct Built {
    /// The backends.
    pub caps: Mock,
    /// Owns the tensors.
    pub arena: Arena,
    /// The graph's nodes and leafs.
    pub nodes: Vec<*mut ggml_tensor>,
    pub leafs: Vec<*mut ggml_tensor>,
    /// Every tensor by name.
    pub by_name: std::collections::HashMap<&'static str, *mut ggml_tensor>,
}

impl Built {
    /// The tensor named `n` (panics on a name the case does not define).
    pub fn t(&self, n: &str) -> *mut ggml_tensor {
        *self
            .by_name
            .get(n)
            .unwrap_or_else(|| panic!("no tensor {n}"))
    }

    /// The graph over the case's nodes and leafs.
    pub fn graph(&mut self) -> ggml_sys::ggml_cgraph {
        graph(&mut self.nodes, &mut self.leafs)
    }
}

/// Builds the mock and the graph of `case`.
pub fn build(case: &Case) -> Built {
    let mut caps = Mock::new(case.ops);
    (case.tweak)(&mut caps);
    let mut b = Built {
        caps,
        arena: Arena::default(),
        nodes: Vec::new(),
        leafs: Vec::new(),
        by_name: Default::default(),
    };
    for d in case.graph {
        let (n, t, leaf) = match *d {
            Def::GraphInput(n) => (n, b.arena.input(n), true),
            Def::Leaf(n, buffer) => {
                let buf = buffer.map_or(std::ptr::null_mut(), |(buft, usage)| {
                    b.arena.buffer(buft, usage)
                });
                (n, b.arena.leaf(n, buf), true)
            }
            Def::Node(n, op, srcs) => {
                let srcs: Vec<_> = srcs.iter().map(|s| b.t(s)).collect();
                (n, b.arena.tensor(n, op, &srcs), false)
            }
            Def::View(n, op, of, srcs) => {
                let srcs: Vec<_> = srcs.iter().map(|s| b.t(s)).collect();
                let of = b.t(of);
                (n, b.arena.view_node(n, op, of, &srcs), false)
            }
        };
        assert!(b.by_name.insert(n, t).is_none(), "{}: {n} twice", case.name);
        if leaf {
            b.leafs.push(t);
        } else {
            b.nodes.push(t);
        }
    }
    b
}

/// Runs `pass` on every case of `cases` (after the case's placements) and checks every
/// expected placement, naming the case and tensor on a mismatch.
pub fn run_cases(
    cases: &[Case],
    pass: impl Fn(&Mock, &mut super::table::Table, &ggml_sys::ggml_cgraph, &super::table::GraphIds),
) {
    use super::table::{GraphIds, Table};
    for case in cases {
        let mut b = build(case);
        let g = b.graph();
        let mut t = Table::default();
        for &(n, backend, cause) in case.before {
            t.set(b.t(n), backend, cause);
        }
        // SAFETY: every tensor of the graph is owned by `b.arena`, alive until the end of
        // this iteration.
        let ix = unsafe { GraphIds::new(&mut t, &g) };
        pass(&b.caps, &mut t, &g, &ix);
        for &(n, want) in case.want {
            let got = t.get(b.t(n)).map(|p| (p.backend, p.cause));
            assert_eq!(got, want, "case '{}', tensor {n}", case.name);
        }
    }
}
