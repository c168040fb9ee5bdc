//! Random call sequences over the scheduler's public API (`ggml_backend_sched_*`), with
//! random small F32 graphs (chains of ADD, MUL, SCALE and CPY, some steps reading earlier
//! nodes) built in no_alloc contexts. Each sequence mixes new (graph_size 1..2048, parallel
//! or not, one or two backends), reserve, alloc_graph, graph_compute, reset,
//! set_tensor_backend, get_tensor_backend, get_n_splits and free; after every compute each
//! output is compared with the value computed on the host, and the placement queries are
//! checked against what the calls so far promise (a user placement holds until the next reset,
//! every node has a backend after a split, none after a reset).
//!
//! The backends are written here, as in `tests/layer.rs`: ggml-cpu comes from the stock
//! build and links against the stock libggml-base, so it cannot share this process with the
//! crate's rlib. "TESTA" (a GPU-type device) and "TESTCPU" (the CPU-type device the scheduler
//! requires last), each with its own buffer type of host memory, compute the four ops by
//! hand, in f32, the way the host
//! reference does, so outputs must be exactly equal: any difference is the scheduler's
//! (a wrong buffer, a missing or stale input copy, an output overwritten by reuse).
//!
//! Only sequences the API allows are generated (ours aborts on misuse, and an abort would end
//! the test binary): an allocated graph is reset before it is allocated again, and a graph the
//! scheduler has split is built afresh before it is split again, because a split rewrites the
//! graph's sources to the scheduler's own input copies, which a reset or free releases (stock
//! does the same). Such rebuilds are counted, not hidden: they happen after each reset,
//! reserve, free and new.
//!
//! Budget: sequences run for `SCHED_CALLS_SECONDS` (default 20; about 64 sequences take
//! 0.1 s on 2 cores), or exactly `PROPTEST_CASES` of them when that is set.
//! `SCHED_CALLS_TRACE=1` prints each case and call to stderr before it runs, for a crash
//! (which proptest cannot catch or shrink) to be read off the last lines.

use std::os::raw::c_int;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

use ggml_base::cpu_buffer::*;
use ggml_base::sched::*;
use ggml_base::tensor::*;
use ggml_sys as sys;
use ggml_sys::{ggml_backend_t, ggml_cgraph, ggml_tensor};
use proptest::prelude::*;

// ---- two test devices (tests/common/devices.rs) and their backends --------------------

#[path = "common/devices.rs"]
mod devices;
use devices::*;

/// Graph computes per backend (0: TESTA, 1: TESTCPU), to check that work really ran.
static COMPUTES: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

fn floats<'a>(t: &ggml_tensor) -> &'a mut [f32] {
    // SAFETY: a live, allocated, contiguous f32 host tensor (checked by the caller).
    unsafe { std::slice::from_raw_parts_mut(t.data.cast::<f32>(), sys::ggml_nelements(t) as usize) }
}

/// Computes F32 ADD, MUL (same shapes), SCALE (x * s + b) and same-type CPY on host memory;
/// any other op fails the compute, so a node the scheduler should not have sent shows.
unsafe extern "C" fn backend_compute(b: ggml_backend_t, g: *mut ggml_cgraph) -> sys::ggml_status {
    // SAFETY: a live graph of allocated host tensors.
    unsafe {
        let which = usize::from((*b).device != &raw mut DEV_A);
        COMPUTES[which].fetch_add(1, Ordering::SeqCst);
        let g = &*g;
        for i in 0..g.n_nodes as usize {
            let n = &**g.nodes.add(i);
            if n.op == sys::GGML_OP_NONE || sys::ggml_is_empty(n) {
                continue;
            }
            assert!(n.type_ == sys::GGML_TYPE_F32 && sys::ggml_is_contiguous(n));
            assert!(!n.data.is_null(), "node {} has no memory", i);
            let out = floats(n);
            let a = floats(&*n.src[0]);
            match n.op {
                sys::GGML_OP_ADD | sys::GGML_OP_MUL => {
                    let c = floats(&*n.src[1]);
                    for k in 0..out.len() {
                        out[k] = if n.op == sys::GGML_OP_ADD {
                            a[k] + c[k]
                        } else {
                            a[k] * c[k]
                        };
                    }
                }
                sys::GGML_OP_SCALE => {
                    let s = f32::from_bits(n.op_params[0] as u32);
                    let bias = f32::from_bits(n.op_params[1] as u32);
                    for k in 0..out.len() {
                        out[k] = a[k] * s + bias;
                    }
                }
                sys::GGML_OP_CPY => out.copy_from_slice(a),
                _ => return sys::GGML_STATUS_FAILED,
            }
        }
    }
    sys::GGML_STATUS_SUCCESS
}

fn backend(dev: *mut sys::ggml_backend_device) -> ggml_backend_t {
    new_backend(
        dev,
        sys::ggml_backend_i {
            get_name: Some(backend_name),
            free: Some(backend_free),
            synchronize: Some(backend_sync),
            graph_compute: Some(backend_compute),
            ..Default::default()
        },
    )
}

// ---- random graphs ----------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Step {
    /// cur = cur + input j (mod inputs)
    AddInput(usize),
    /// cur = cur * input j
    MulInput(usize),
    /// cur = cur + node k (mod the nodes so far): a second reader of an earlier node
    AddNode(usize),
    /// cur = cur * s
    Scale(f32),
    /// cur = copy of cur into a fresh tensor (the result is a view of that tensor)
    Cpy,
}

#[derive(Clone, Debug)]
struct GraphSpec {
    ne: (i64, i64),
    n_inputs: usize,
    steps: Vec<Step>,
    /// steps whose node is marked output besides the last (mod the step count)
    outputs: Vec<usize>,
    seed: u32,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..4usize).prop_map(Step::AddInput),
        (0..4usize).prop_map(Step::MulInput),
        (0..16usize).prop_map(Step::AddNode),
        (-8i32..=8).prop_map(|q| Step::Scale(q as f32 * 0.25)),
        Just(Step::Cpy),
    ]
}

fn graph_spec() -> impl Strategy<Value = GraphSpec> {
    (
        (1i64..=40, 1i64..=6),
        1usize..=3,
        prop::collection::vec(step(), 1..=12),
        prop::collection::vec(0usize..12, 0..=3),
        any::<u32>(),
    )
        .prop_map(|(ne, n_inputs, steps, outputs, seed)| GraphSpec {
            ne,
            n_inputs,
            steps,
            outputs,
            seed,
        })
}

/// Input j's values: small multiples of 1/8 in [-2, 2], so that no chain of 12 steps leaves
/// the range where f32 is exact enough to compare with ==.
fn input_values(spec: &GraphSpec, j: usize) -> Vec<f32> {
    let n = (spec.ne.0 * spec.ne.1) as usize;
    let mut x = spec.seed.wrapping_add(j as u32 * 7919) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            ((x % 33) as f32 - 16.0) / 8.0
        })
        .collect()
}

/// Every step's value on the host, in the order and precision the backends use.
fn host_values(spec: &GraphSpec) -> Vec<Vec<f32>> {
    let inputs: Vec<Vec<f32>> = (0..spec.n_inputs).map(|j| input_values(spec, j)).collect();
    let mut cur = inputs[0].clone();
    let mut nodes: Vec<Vec<f32>> = Vec::new();
    for s in &spec.steps {
        cur = match *s {
            Step::AddInput(j) => cur
                .iter()
                .zip(&inputs[j % spec.n_inputs])
                .map(|(a, b)| a + b)
                .collect(),
            Step::MulInput(j) => cur
                .iter()
                .zip(&inputs[j % spec.n_inputs])
                .map(|(a, b)| a * b)
                .collect(),
            Step::AddNode(k) if !nodes.is_empty() => cur
                .iter()
                .zip(&nodes[k % nodes.len()])
                .map(|(a, b)| a + b)
                .collect(),
            Step::AddNode(_) => cur.iter().map(|a| a + a).collect(),
            Step::Scale(f) => cur.iter().map(|a| a * f + 0.0).collect(),
            Step::Cpy => cur.clone(),
        };
        nodes.push(cur.clone());
    }
    nodes
}

/// A built graph: its contexts, its inputs, its step nodes, and which of them are outputs.
struct Built {
    /// the inputs' context, with a buffer when the inputs are allocated before the scheduler
    /// sees them (else they are leaves of the graph context the scheduler allocates)
    in_ctx: *mut sys::ggml_context,
    in_buf: sys::ggml_backend_buffer_t,
    ctx: *mut sys::ggml_context,
    graph: *mut ggml_cgraph,
    inputs: Vec<*mut ggml_tensor>,
    nodes: Vec<*mut ggml_tensor>,
    outputs: Vec<usize>,
}

/// Bytes of a context of `n_tensors` headers and one graph.
fn ctx_bytes(n_tensors: usize) -> usize {
    // SAFETY: pure size queries.
    unsafe { n_tensors * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead() }
}

/// A no_alloc context of `n_tensors` headers and one graph, in `mem` (at least
/// [`ctx_bytes`] bytes, which outlive it) or, for NULL, in memory of its own.
fn no_alloc_ctx_in(n_tensors: usize, mem: *mut u8) -> *mut sys::ggml_context {
    // SAFETY: plain context creation over NULL or caller-provided memory of the right size.
    let ctx = unsafe {
        sys::ggml_init(sys::ggml_init_params {
            mem_size: ctx_bytes(n_tensors),
            mem_buffer: mem.cast(),
            no_alloc: true,
        })
    };
    assert!(!ctx.is_null());
    ctx
}

fn no_alloc_ctx(n_tensors: usize) -> *mut sys::ggml_context {
    no_alloc_ctx_in(n_tensors, null_mut())
}

/// Tensor headers per graph context.
const GRAPH_TENSORS: usize = 64;

/// Builds `spec`'s graph; in `arena` when given (as llama.cpp rebuilds its graphs in the same
/// memory, so that an identical graph has the same addresses and the scheduler may replay its
/// placement), else in memory of its own.
fn build_in(spec: &GraphSpec, preallocated: bool, arena: *mut u8) -> Built {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = no_alloc_ctx_in(GRAPH_TENSORS, arena);
        let in_ctx = if preallocated { no_alloc_ctx(8) } else { ctx };
        let inputs: Vec<_> = (0..spec.n_inputs)
            .map(|_| {
                let t = sys::ggml_new_tensor_2d(in_ctx, sys::GGML_TYPE_F32, spec.ne.0, spec.ne.1);
                sys::ggml_set_input(t);
                t
            })
            .collect();
        let in_buf = if preallocated {
            let b = sys::ggml_backend_alloc_ctx_tensors_from_buft(
                in_ctx,
                ggml_backend_cpu_buffer_type(),
            );
            assert!(!b.is_null());
            for (j, &t) in inputs.iter().enumerate() {
                let v = input_values(spec, j);
                ggml_backend_tensor_set(t, v.as_ptr().cast(), 0, v.len() * 4);
            }
            b
        } else {
            null_mut()
        };
        let mut cur = inputs[0];
        let mut nodes = Vec::new();
        for s in &spec.steps {
            cur = match *s {
                Step::AddInput(j) => sys::ggml_add(ctx, cur, inputs[j % spec.n_inputs]),
                Step::MulInput(j) => sys::ggml_mul(ctx, cur, inputs[j % spec.n_inputs]),
                Step::AddNode(k) if !nodes.is_empty() => {
                    sys::ggml_add(ctx, cur, nodes[k % nodes.len()])
                }
                Step::AddNode(_) => sys::ggml_add(ctx, cur, cur),
                Step::Scale(f) => sys::ggml_scale(ctx, cur, f),
                Step::Cpy => {
                    let dst =
                        sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_F32, spec.ne.0, spec.ne.1);
                    sys::ggml_cpy(ctx, cur, dst)
                }
            };
            nodes.push(cur);
        }
        let mut outputs: Vec<usize> = spec.outputs.iter().map(|&o| o % nodes.len()).collect();
        outputs.push(nodes.len() - 1);
        outputs.sort_unstable();
        outputs.dedup();
        for &o in &outputs {
            sys::ggml_set_output(nodes[o]);
        }
        let graph = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(graph, cur);
        for &o in &outputs {
            sys::ggml_build_forward_expand(graph, nodes[o]);
        }
        Built {
            in_ctx,
            in_buf,
            ctx,
            graph,
            inputs,
            nodes,
            outputs,
        }
    }
}

fn build(spec: &GraphSpec, preallocated: bool) -> Built {
    build_in(spec, preallocated, null_mut())
}

impl Built {
    /// Frees the contexts and the input buffer now (the graph's memory may then be reused);
    /// the drop that follows does nothing.
    fn release(&mut self) {
        // SAFETY: made in build(); the scheduler no longer refers to these tensors.
        unsafe {
            if !self.in_buf.is_null() {
                ggml_base::buffer::ggml_backend_buffer_free(self.in_buf);
                sys::ggml_free(self.in_ctx);
                self.in_buf = null_mut();
            }
            if !self.ctx.is_null() {
                sys::ggml_free(self.ctx);
                self.ctx = null_mut();
            }
        }
    }
}

impl Drop for Built {
    fn drop(&mut self) {
        self.release();
    }
}

// ---- the call sequences ------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Call {
    New {
        graph_size: usize,
        parallel: bool,
        two_backends: bool,
        op_offload: bool,
    },
    Free,
    Reserve,
    AllocGraph,
    Compute,
    Reset,
    /// node (mod the step count; CPY views are skipped) onto backend b (mod the count)
    SetBackend(usize, usize),
    GetBackend(usize),
    GetNSplits,
    /// switch to graph g (mod the case's graphs): the current one is reset away first
    UseGraph(usize),
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        1 => (1usize..=2048, any::<bool>(), any::<bool>(), any::<bool>())
            .prop_map(|(graph_size, parallel, two_backends, op_offload)| Call::New { graph_size, parallel, two_backends, op_offload }),
        1 => Just(Call::Free),
        2 => Just(Call::Reserve),
        3 => Just(Call::AllocGraph),
        4 => Just(Call::Compute),
        2 => Just(Call::Reset),
        3 => (0usize..12, 0usize..2).prop_map(|(n, b)| Call::SetBackend(n, b)),
        2 => (0usize..12).prop_map(Call::GetBackend),
        1 => Just(Call::GetNSplits),
        1 => (0usize..3).prop_map(Call::UseGraph),
    ]
}

/// The scheduler with what the calls so far promise about it.
struct Live {
    sched: sys::ggml_backend_sched_t,
    backends: Vec<ggml_backend_t>,
    /// a graph is allocated (alloc_graph or compute since the last reset)
    allocated: bool,
    /// the current graph was split since it was built (its sources may point at copies)
    split: bool,
    /// user placements since the last reset: (node index, backend index)
    placed: Vec<(usize, usize)>,
}

struct Run {
    specs: Vec<GraphSpec>,
    preallocated: bool,
    cur: usize,
    /// One context memory per graph spec: a rebuilt graph lands at the same addresses.
    arenas: Vec<Vec<u8>>,
    built: Built,
    live: Option<Live>,
    computes: usize,
}

impl Run {
    /// Builds the current spec's graph again: in its arena, after freeing the graph built last
    /// (whose memory that may be); without arenas in new memory, the old graph freed after.
    fn rebuild(&mut self) {
        let n_arenas = self.arenas.len().max(1);
        match self.arenas.get_mut(self.cur % n_arenas) {
            Some(a) => {
                let arena = a.as_mut_ptr();
                self.built.release();
                self.built = build_in(&self.specs[self.cur], self.preallocated, arena);
            }
            None => self.built = build(&self.specs[self.cur], self.preallocated),
        }
    }

    /// After a reset, reserve, new or free: a split graph is built again before its next split.
    fn fresh_graph_if_split(&mut self) {
        let split = self.live.as_ref().is_none_or(|l| l.split);
        if split {
            self.rebuild();
            if let Some(l) = self.live.as_mut() {
                l.split = false;
            }
        }
    }

    fn forget(&mut self) {
        if let Some(l) = self.live.as_mut() {
            l.allocated = false;
            l.placed.clear();
        }
    }

    fn set_inputs(&self) {
        if self.preallocated {
            return; // written once when built
        }
        for (j, &t) in self.built.inputs.iter().enumerate() {
            // SAFETY: a live tensor. An input no step reads is not in the graph, so the
            // scheduler gave it no memory: nothing to write.
            if unsafe { (*t).buffer.is_null() } {
                continue;
            }
            let v = input_values(&self.specs[self.cur], j);
            // SAFETY: an allocated input of v.len() floats.
            unsafe { ggml_backend_tensor_set(t, v.as_ptr().cast(), 0, v.len() * 4) };
        }
    }

    /// Outputs against the host, and every node placed on one of the scheduler's backends
    /// (the user's placement where there is one).
    fn check_after_split(&self, computed: bool) -> Result<(), TestCaseError> {
        let l = self.live.as_ref().unwrap();
        for (i, &n) in self.built.nodes.iter().enumerate() {
            // SAFETY: live scheduler and tensor.
            let b = unsafe { ggml_backend_sched_get_tensor_backend(l.sched, n) };
            prop_assert!(
                l.backends.contains(&b),
                "node {} has backend {:?} after a split",
                i,
                b
            );
            if let Some(&(_, want)) = l.placed.iter().rev().find(|p| p.0 == i) {
                prop_assert_eq!(b, l.backends[want], "node {} left its user placement", i);
            }
        }
        // SAFETY: live scheduler.
        let splits = unsafe { ggml_backend_sched_get_n_splits(l.sched) };
        prop_assert!(
            splits >= 1 && splits as usize <= self.built.nodes.len(),
            "{} splits",
            splits
        );
        if l.backends.len() == 1 {
            prop_assert_eq!(splits, 1);
        }
        if computed {
            let want = host_values(&self.specs[self.cur]);
            for &o in &self.built.outputs {
                let t = self.built.nodes[o];
                let mut got = vec![0f32; want[o].len()];
                // SAFETY: an allocated output of got.len() floats.
                unsafe { ggml_backend_tensor_get(t, got.as_mut_ptr().cast(), 0, got.len() * 4) };
                prop_assert_eq!(&got, &want[o], "output of step {}", o);
            }
        }
        Ok(())
    }

    fn step(&mut self, c: &Call) -> Result<(), TestCaseError> {
        if std::env::var_os("SCHED_CALLS_TRACE").is_some() {
            eprintln!("call {c:?}");
        }
        match *c {
            Call::New {
                graph_size,
                parallel,
                two_backends,
                op_offload,
            } => {
                self.free();
                let mut backends = Vec::new();
                if two_backends {
                    backends.push(backend(&raw mut DEV_A));
                }
                backends.push(backend(&raw mut DEV_CPU));
                // SAFETY: live backends; NULL bufts (their default ones).
                let sched = unsafe {
                    ggml_backend_sched_new(
                        backends.as_mut_ptr(),
                        null_mut(),
                        backends.len() as c_int,
                        graph_size,
                        parallel,
                        op_offload,
                    )
                };
                prop_assert!(!sched.is_null());
                // SAFETY: live scheduler.
                unsafe {
                    prop_assert_eq!(
                        ggml_backend_sched_get_n_backends(sched),
                        backends.len() as c_int
                    );
                    prop_assert_eq!(ggml_backend_sched_get_n_splits(sched), 0);
                    // pipeline copies only when parallel (GGML_SCHED_MAX_COPIES unset: 4)
                    prop_assert_eq!(
                        ggml_backend_sched_get_n_copies(sched),
                        if parallel { 4 } else { 1 }
                    );
                }
                // free() above built the graph afresh when an old scheduler had split it
                self.live = Some(Live {
                    sched,
                    backends,
                    allocated: false,
                    split: false,
                    placed: Vec::new(),
                });
            }
            Call::Free => self.free(),
            _ if self.live.is_none() => {} // no scheduler: nothing to call
            Call::Reserve => {
                let l = self.live.as_mut().unwrap();
                // SAFETY: live scheduler and graph.
                let ok = unsafe { ggml_backend_sched_reserve(l.sched, self.built.graph) };
                prop_assert!(ok, "reserve failed");
                l.split = true;
                self.forget(); // reserve ends in a reset
                self.fresh_graph_if_split();
            }
            Call::AllocGraph => {
                if self.live.as_ref().unwrap().allocated {
                    self.step(&Call::Reset)?; // the API asks for a reset between allocations
                }
                let l = self.live.as_mut().unwrap();
                // SAFETY: live scheduler and graph.
                let ok = unsafe { ggml_backend_sched_alloc_graph(l.sched, self.built.graph) };
                prop_assert!(ok, "alloc_graph failed");
                l.allocated = true;
                l.split = true;
                self.check_after_split(false)?;
            }
            Call::Compute => {
                // Inputs the scheduler allocates are written between allocation and compute,
                // as a caller must; preallocated ones let compute allocate by itself.
                if !self.preallocated && !self.live.as_ref().unwrap().allocated {
                    self.step(&Call::AllocGraph)?;
                }
                if !self.live.as_ref().unwrap().allocated {
                    // compute on a graph not allocated resets first when anything was placed
                    // since the last reset (stock's is_reset flag, which set_tensor_backend
                    // clears): user placements hold only through an explicit alloc_graph
                    self.live.as_mut().unwrap().placed.clear();
                }
                self.set_inputs();
                let l = self.live.as_mut().unwrap();
                // SAFETY: live scheduler and graph.
                let st = unsafe { ggml_backend_sched_graph_compute(l.sched, self.built.graph) };
                prop_assert_eq!(st, sys::GGML_STATUS_SUCCESS);
                l.allocated = true;
                l.split = true;
                self.computes += 1;
                self.check_after_split(true)?;
            }
            Call::Reset => {
                let l = self.live.as_mut().unwrap();
                // SAFETY: live scheduler.
                unsafe { ggml_backend_sched_reset(l.sched) };
                self.forget();
                self.fresh_graph_if_split();
                let l = self.live.as_ref().unwrap();
                for (i, &n) in self.built.nodes.iter().enumerate() {
                    // SAFETY: live scheduler and tensor.
                    let b = unsafe { ggml_backend_sched_get_tensor_backend(l.sched, n) };
                    prop_assert!(b.is_null(), "node {} still placed after a reset", i);
                }
            }
            Call::SetBackend(n, b) => {
                let i = n % self.built.nodes.len();
                let t = self.built.nodes[i];
                // SAFETY: a live tensor. A CPY result is a view of its destination; a view
                // lives where its source does, so it is not the caller's to place.
                if unsafe { !(*t).view_src.is_null() } {
                    return Ok(());
                }
                let l = self.live.as_mut().unwrap();
                let bi = b % l.backends.len();
                // SAFETY: live scheduler, tensor and backend of the scheduler.
                unsafe { ggml_backend_sched_set_tensor_backend(l.sched, t, l.backends[bi]) };
                l.placed.push((i, bi));
                // SAFETY: as above.
                let got = unsafe { ggml_backend_sched_get_tensor_backend(l.sched, t) };
                prop_assert_eq!(got, l.backends[bi]);
            }
            Call::GetBackend(n) => {
                let i = n % self.built.nodes.len();
                let l = self.live.as_ref().unwrap();
                // SAFETY: live scheduler and tensor.
                let b =
                    unsafe { ggml_backend_sched_get_tensor_backend(l.sched, self.built.nodes[i]) };
                prop_assert!(b.is_null() || l.backends.contains(&b));
                if let Some(&(_, want)) = l.placed.iter().rev().find(|p| p.0 == i) {
                    prop_assert_eq!(b, l.backends[want]);
                }
            }
            Call::GetNSplits => {
                let l = self.live.as_ref().unwrap();
                // SAFETY: live scheduler.
                let s = unsafe { ggml_backend_sched_get_n_splits(l.sched) };
                prop_assert!(s >= 0, "{} splits", s);
                // A reset keeps the count of the last graph split (stock's does too), which
                // may be another, larger graph: the bound holds for the current graph only
                // once it has been split.
                if l.split {
                    prop_assert!(
                        s as usize <= self.built.nodes.len().max(1),
                        "{} splits of a graph of {} nodes",
                        s,
                        self.built.nodes.len()
                    );
                }
            }
            Call::UseGraph(g) => {
                self.step(&Call::Reset)?;
                self.cur = g % self.specs.len();
                self.rebuild();
                self.live.as_mut().unwrap().split = false;
            }
        }
        Ok(())
    }

    fn free(&mut self) {
        if let Some(l) = self.live.take() {
            // SAFETY: a live scheduler, then its backends (which outlive it).
            unsafe {
                ggml_backend_sched_free(l.sched);
                for b in l.backends {
                    ggml_base::backend::ggml_backend_free(b);
                }
            }
            // its copies are gone: a graph it split is built again
            self.rebuild();
        }
    }
}

/// How much of the fuzz one run does: `PROPTEST_CASES=N` runs exactly N sequences (to repeat
/// a count), otherwise sequences run in rounds of 64 until `SCHED_CALLS_SECONDS` (default 20)
/// have passed, each round from a new seed; `SCHED_CALLS_SEED=S` runs the one round of seed S
/// (a failure names its seed).
enum Budget {
    Cases(u32),
    Seconds(u64),
}

fn budget() -> Budget {
    let var = |name| std::env::var(name).ok().and_then(|v| v.parse().ok());
    match var("PROPTEST_CASES") {
        Some(n) => Budget::Cases(n as u32),
        None => Budget::Seconds(var("SCHED_CALLS_SECONDS").unwrap_or(20)),
    }
}

/// One sequence: a scheduler first, the calls, then a compute whose values are checked.
fn one_sequence(
    specs: Vec<GraphSpec>,
    preallocated: bool,
    first: (usize, bool, bool, bool),
    calls: Vec<Call>,
) -> Result<(), TestCaseError> {
    if std::env::var_os("SCHED_CALLS_TRACE").is_some() {
        eprintln!("case preallocated={preallocated} first={first:?} specs={specs:?}");
    }
    // One arena per spec, or (in half of the cases) one shared by all: then graphs of other
    // structures are built at the same addresses, and must not replay each other.
    let n_arenas = if specs[0].seed & 1 == 0 {
        1
    } else {
        specs.len()
    };
    let mut arenas: Vec<Vec<u8>> = (0..n_arenas)
        .map(|_| vec![0u8; ctx_bytes(GRAPH_TENSORS)])
        .collect();
    let built = build_in(&specs[0], preallocated, arenas[0].as_mut_ptr());
    let mut run = Run {
        specs,
        preallocated,
        cur: 0,
        arenas,
        built,
        live: None,
        computes: 0,
    };
    let before = COMPUTES[0].load(Ordering::SeqCst) + COMPUTES[1].load(Ordering::SeqCst);
    // every sequence starts with a scheduler, and ends with a compute, so each case
    // checks values at least once
    run.step(&Call::New {
        graph_size: first.0,
        parallel: first.1,
        two_backends: first.2,
        op_offload: first.3,
    })?;
    for c in &calls {
        run.step(c)?;
    }
    if run.live.is_none() {
        run.step(&Call::New {
            graph_size: 64,
            parallel: false,
            two_backends: true,
            op_offload: false,
        })?;
    }
    run.step(&Call::Compute)?;
    let after = COMPUTES[0].load(Ordering::SeqCst) + COMPUTES[1].load(Ordering::SeqCst);
    prop_assert!(after - before >= run.computes, "a compute ran no backend");
    run.free();
    Ok(())
}

#[test]
fn random_sched_call_sequences() {
    use proptest::test_runner::{Config, RngSeed, TestRunner};
    let fixed_seed: Option<u64> = std::env::var("SCHED_CALLS_SEED")
        .ok()
        .and_then(|v| v.parse().ok());
    let strategy = (
        prop::collection::vec(graph_spec(), 1..=3),
        any::<bool>(),
        (1usize..=2048, any::<bool>(), any::<bool>(), any::<bool>()),
        prop::collection::vec(call(), 1..=24),
    );
    let (round, deadline) = match budget() {
        Budget::Cases(n) => (n, None),
        Budget::Seconds(s) => (64, Some(std::time::Duration::from_secs(s))),
    };
    let start = std::time::Instant::now();
    let mut sequences = 0u64;
    loop {
        // A runner counts its successes up to `cases` once; each round takes a new one, with
        // a newly generated seed. A failure prints its shrunk sequence, which is what repeats it.
        let seed = fixed_seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                ^ sequences
        });
        let mut runner = TestRunner::new(Config {
            cases: round,
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(seed),
            ..Config::default()
        });
        let result = runner.run(&strategy, |(specs, pre, first, calls)| {
            one_sequence(specs, pre, first, calls)
        });
        if let Err(e) = result {
            panic!(
                "after {sequences} passing sequences, in the round of seed {seed} \
                 (SCHED_CALLS_SEED={seed} PROPTEST_CASES={round} repeats it): {e}"
            );
        }
        if fixed_seed.is_some() {
            sequences += u64::from(round);
            break;
        }
        sequences += u64::from(round);
        match deadline {
            Some(d) if start.elapsed() < d => continue,
            _ => break,
        }
    }
    let replays = ggml_base::sched::replay::replays_total();
    let with_copies = ggml_base::sched::replay::replays_with_copies_total();
    let record_misses = ggml_base::sched::replay::serial_record_misses_total();
    eprintln!(
        "sched_calls: {sequences} random call sequences passed in {:.1} s, {replays} \
         allocations by replaying the last placement ({with_copies} with pipeline copies), \
         {record_misses} serial ones without the allocator's record",
        start.elapsed().as_secs_f64()
    );
    assert!(sequences >= u64::from(round));
    // Graphs are rebuilt in the same memory, so some allocations must have been replays:
    // their values were checked like every other's. Half of the schedulers are parallel (4
    // pipeline copies), and their replays rotate the copies: some must have happened too.
    assert!(replays > 0, "no allocation replayed a placement");
    // The allocator records a placement only for a graph whose split was snapshot (a graph
    // placed once needs no record). Every replay of a serial scheduler follows such a split
    // with no plan in between, so it must find its record (a parallel scheduler's replay
    // with a copy not placed since that split makes the copy's record first). Counted over
    // every test of this binary, all of which keep to this.
    assert_eq!(
        record_misses, 0,
        "serial replays placed afresh: the allocator had not recorded their graph"
    );
    assert!(
        with_copies > 0,
        "no allocation of a parallel scheduler replayed a placement"
    );
}

/// The first crash this file found, kept as a fixed case: a parallel scheduler over TESTA and
/// TESTCPU computes a graph whose inputs are preallocated in CPU memory, is reset, and then
/// allocates a freshly built graph of the same shape.
///
/// Stock dies here of SIGSEGV in ggml_gallocr_alloc_graph (it gives the pre-allocated input
/// pipeline copies; `parallel sched, pre-allocated input` in cabi-tests/bad-input/run.sh shows
/// both arms); ours leaves such inputs alone (src/sched/split.rs, pass 6). With
/// SCHED_CALLS_SERIAL=1 the same calls run on a serial scheduler; with SCHED_CALLS_KEEP_OLD=1
/// the first graph stays alive while the second is allocated.
#[test]
fn parallel_reset_then_alloc_of_a_new_graph() {
    let spec = GraphSpec {
        ne: (36, 5),
        n_inputs: 1,
        steps: vec![
            Step::Cpy,
            Step::AddInput(2),
            Step::AddInput(2),
            Step::AddInput(1),
        ],
        outputs: vec![0, 6, 6],
        seed: 801302380,
    };
    let built = build(&spec, true);
    let mut run = Run {
        specs: vec![spec],
        preallocated: true,
        cur: 0,
        // new memory for every graph, as when the crash was found
        arenas: Vec::new(),
        built,
        live: None,
        computes: 0,
    };
    let keep = std::env::var_os("SCHED_CALLS_KEEP_OLD").is_some();
    let par = std::env::var_os("SCHED_CALLS_SERIAL").is_none();
    run.step(&Call::New {
        graph_size: 88,
        parallel: par,
        two_backends: true,
        op_offload: true,
    })
    .unwrap();
    run.step(&Call::Compute).unwrap();
    if keep {
        // the old graph stays alive: only the scheduler's own state is exercised
        let l = run.live.as_mut().unwrap();
        // SAFETY: a live scheduler.
        unsafe { ggml_backend_sched_reset(l.sched) };
        let old = std::mem::replace(&mut run.built, build(&run.specs[0], true));
        l.allocated = false;
        l.split = false;
        run.step(&Call::AllocGraph).unwrap();
        drop(old);
    } else {
        run.step(&Call::AllocGraph).unwrap();
    }
    run.step(&Call::Compute).unwrap();
    run.free();
}

/// A wrong value the timed fuzz found (seed 1796125944976110339, shrunk): a parallel
/// scheduler over TESTA and TESTCPU, graphs switched and nodes placed by the caller between
/// resets; the last compute of `x + x` gives 4 where 2 is right.
#[test]
fn parallel_user_placed_after_switching_graphs() {
    let g = |steps: Vec<Step>| GraphSpec {
        ne: (1, 1),
        n_inputs: 1,
        steps,
        outputs: vec![],
        seed: 0,
    };
    let specs = vec![
        g(vec![Step::AddInput(0); 8]),
        g(vec![Step::AddInput(0)]),
        g(vec![Step::AddInput(0)]),
    ];
    use Call::*;
    let calls = vec![
        Compute,
        AllocGraph,
        Free,
        UseGraph(0),
        New {
            graph_size: 1785,
            parallel: true,
            two_backends: true,
            op_offload: true,
        },
        Compute,
        Reset,
        Reset,
        UseGraph(2),
        Compute,
        UseGraph(0),
        SetBackend(2, 1),
        SetBackend(7, 1),
        SetBackend(1, 0),
        GetNSplits,
        Reserve,
        SetBackend(10, 1),
        UseGraph(2),
        SetBackend(9, 1),
        GetNSplits,
    ];
    one_sequence(specs, false, (1, false, false, false), calls).unwrap();
}

/// Found by the timed fuzz (seed 1796126008319203842, shrunk).
#[test]
fn reserve_then_compute_another_graph_with_an_output_mid_chain() {
    let specs = vec![
        GraphSpec {
            ne: (20, 5),
            n_inputs: 2,
            steps: vec![
                Step::AddInput(0),
                Step::AddInput(0),
                Step::AddInput(1),
                Step::AddInput(0),
            ],
            outputs: vec![],
            seed: 0,
        },
        GraphSpec {
            ne: (1, 1),
            n_inputs: 1,
            steps: vec![
                Step::AddInput(0),
                Step::AddInput(0),
                Step::AddInput(0),
                Step::Cpy,
            ],
            outputs: vec![0],
            seed: 4694,
        },
    ];
    let calls = vec![Call::Reserve, Call::UseGraph(1)];
    one_sequence(specs, false, (1, false, false, false), calls).unwrap();
}
