//! Adversarial cases for the placement replay (`src/sched/replay.rs`) and the graph
//! allocator: each case rebuilds a graph in the same memory (as llama.cpp does) and changes
//! one thing the scheduler's passes read, then compares the long-lived scheduler's placement
//! (every tensor's backend, the split count) and computed outputs with those of a fresh
//! scheduler given the same graph (the oracle: a fresh scheduler can only place afresh).
//!
//! The backends are the two host-memory test devices of `tests/sched_calls.rs` (TESTA, a
//! GPU-type device with a buffer type of its own, and TESTCPU), with TESTA offloading every
//! op it is asked about, an optional `graph_optimize` that reverses independent nodes, and
//! a switch that makes TESTA's buffer allocations fail.
//!
//! Two cases (`weights_usage_flip`, `weights_buffer_type_changes_at_same_address`) failed
//! when written, on cf4fe73: the replay compared tensor headers only, but the passes also read
//! the weights' buffer (its usage and its buffer type), which can change without any header
//! changing. The replay now records and compares both for every buffer the headers name.
//!
//! The allocator cases run random graphs (views, in-place ops, copies, several readers)
//! through `ggml_gallocr_alloc_graph` with `GGML_ALLOC_LAYOUT=stock` and `packed`, and compare
//! the outputs bit for bit with the graph computed in memory of its own (no reuse), and the
//! buffer sizes (packed never larger). `ALLOC_CASES` sets the number of graphs (default 3000).

use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use ggml_base::buffer::*;
use ggml_base::cpu_buffer::*;
use ggml_base::multi_buffer::*;
use ggml_base::sched::*;
use ggml_base::tensor::*;
use ggml_sys as sys;
use ggml_sys::{ggml_backend_t, ggml_cgraph, ggml_tensor};

static SERIAL: Mutex<()> = Mutex::new(());
static REVERSE_OPT: AtomicBool = AtomicBool::new(false);
static OPT_CALLS: AtomicUsize = AtomicUsize::new(0);

// The two test devices of `tests/common/devices.rs`, TESTA offloading every op it is asked
// about (set in `serial`).
#[path = "common/devices.rs"]
mod devices;
use devices::*;

fn floats<'a>(t: *const ggml_tensor) -> &'a mut [f32] {
    // SAFETY: a live, allocated, contiguous f32 host tensor.
    unsafe {
        assert!(!(*t).data.is_null(), "tensor without memory");
        std::slice::from_raw_parts_mut((*t).data.cast::<f32>(), sys::ggml_nelements(t) as usize)
    }
}
unsafe extern "C" fn backend_compute(_: ggml_backend_t, g: *mut ggml_cgraph) -> sys::ggml_status {
    // SAFETY: a live graph of allocated host tensors.
    unsafe {
        let g = &*g;
        for i in 0..g.n_nodes as usize {
            let n = *g.nodes.add(i);
            let op = (*n).op;
            if op == sys::GGML_OP_NONE
                || op == sys::GGML_OP_VIEW
                || op == sys::GGML_OP_RESHAPE
                || sys::ggml_is_empty(n)
            {
                continue;
            }
            assert!(sys::ggml_is_contiguous(n));
            // Read the sources first: an in-place node's output is its source's memory.
            let a: Vec<f32> = floats((*n).src[0]).to_vec();
            let out = floats(n);
            match op {
                sys::GGML_OP_ADD | sys::GGML_OP_MUL => {
                    let c: Vec<f32> = floats((*n).src[1]).to_vec();
                    for k in 0..out.len() {
                        out[k] = if op == sys::GGML_OP_ADD {
                            a[k] + c[k]
                        } else {
                            a[k] * c[k]
                        };
                    }
                }
                sys::GGML_OP_SCALE => {
                    let s = f32::from_bits((*n).op_params[0] as u32);
                    let bias = f32::from_bits((*n).op_params[1] as u32);
                    for k in 0..out.len() {
                        out[k] = a[k] * s + bias;
                    }
                }
                sys::GGML_OP_CPY => out.copy_from_slice(&a),
                _ => return sys::GGML_STATUS_FAILED,
            }
        }
    }
    sys::GGML_STATUS_SUCCESS
}
/// Reverses the node order of the split when no node reads another node of it (a valid
/// reordering), as a backend's graph_optimize may.
unsafe extern "C" fn backend_optimize(
    _: ggml_backend_t,
    g: *mut ggml_cgraph,
    _: *mut sys::ggml_backend_graph_optimize_params,
) {
    OPT_CALLS.fetch_add(1, Ordering::SeqCst);
    if !REVERSE_OPT.load(Ordering::SeqCst) {
        return;
    }
    // SAFETY: a live graph view whose node array the backend may reorder.
    unsafe {
        let g = &mut *g;
        let nodes = std::slice::from_raw_parts_mut(g.nodes, g.n_nodes as usize);
        let independent = nodes
            .iter()
            .all(|&n| (*n).src.iter().all(|&s| s.is_null() || !nodes.contains(&s)));
        if independent {
            nodes.reverse();
        }
    }
}
fn backend(dev: *mut sys::ggml_backend_device) -> ggml_backend_t {
    new_backend(
        dev,
        sys::ggml_backend_i {
            get_name: Some(backend_name),
            free: Some(backend_free),
            synchronize: Some(backend_sync),
            graph_compute: Some(backend_compute),
            graph_optimize: Some(backend_optimize),
            ..Default::default()
        },
    )
}

// ---- harness -------------------------------------------------------------------------------

struct Env {
    backends: [ggml_backend_t; 2],
    op_offload: bool,
    parallel: bool,
}
impl Env {
    fn new(op_offload: bool) -> Env {
        Env {
            backends: [backend(&raw mut DEV_A), backend(&raw mut DEV_CPU)],
            op_offload,
            parallel: false,
        }
    }
    fn sched(&self) -> sys::ggml_backend_sched_t {
        let mut b = self.backends;
        // SAFETY: two live backends, the CPU-type one last.
        let s = unsafe {
            ggml_backend_sched_new(
                b.as_mut_ptr(),
                null_mut(),
                2,
                256,
                self.parallel,
                self.op_offload,
            )
        };
        assert!(!s.is_null());
        s
    }
    fn index(&self, b: ggml_backend_t) -> i32 {
        self.backends
            .iter()
            .position(|&x| x == b)
            .map_or(-1, |i| i as i32)
    }
}

const CTX_TENSORS: usize = 64;

/// A graph built into `arena` by `f`, which returns the graph and the tensors to watch
/// (placement) and the outputs to read.
struct G {
    ctx: *mut sys::ggml_context,
    graph: *mut ggml_cgraph,
    watch: Vec<*mut ggml_tensor>,
    outs: Vec<*mut ggml_tensor>,
}
impl Drop for G {
    fn drop(&mut self) {
        // SAFETY: made by `build`.
        unsafe { sys::ggml_free(self.ctx) };
    }
}
/// One step of [`drive`]: a change to make first, and the user placements (watched tensor,
/// backend) to make after the reset.
type Step<'a> = (&'a dyn Fn(), Vec<(usize, usize)>);

type Builder<'a> = dyn Fn(
        *mut sys::ggml_context,
    ) -> (
        *mut ggml_cgraph,
        Vec<*mut ggml_tensor>,
        Vec<*mut ggml_tensor>,
    ) + 'a;

fn build(arena: &mut Vec<u8>, f: &Builder) -> G {
    // SAFETY: sizes from ggml; the arena outlives the context (the caller keeps it).
    unsafe {
        let size = CTX_TENSORS * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead();
        if arena.len() < size {
            arena.resize(size, 0);
        }
        let ctx = sys::ggml_init(sys::ggml_init_params {
            mem_size: size,
            mem_buffer: arena.as_mut_ptr().cast(),
            no_alloc: true,
        });
        assert!(!ctx.is_null());
        let (graph, watch, outs) = f(ctx);
        G {
            ctx,
            graph,
            watch,
            outs,
        }
    }
}

/// What one allocation and compute gave: each watched tensor's backend, the split count, the
/// outputs' values.
#[derive(Debug, PartialEq, Clone)]
struct Seen {
    placement: Vec<i32>,
    n_splits: i32,
    outs: Vec<Vec<f32>>,
}

/// Inputs get values from their names' position: a graph's input tensors are those flagged
/// input that have no memory, set after allocation.
fn set_inputs(g: &G) {
    // SAFETY: a live, allocated graph.
    unsafe {
        for i in 0..(*g.graph).n_leafs as usize {
            let t = *(*g.graph).leafs.add(i);
            if (*t).flags & sys::GGML_TENSOR_FLAG_INPUT as i32 != 0 && !(*t).data.is_null() {
                let n = sys::ggml_nelements(t) as usize;
                let v: Vec<f32> = (0..n)
                    .map(|k| (k as f32 + 1.0 + i as f32 * 0.5) / 4.0)
                    .collect();
                ggml_backend_tensor_set(t, v.as_ptr().cast(), 0, n * 4);
            }
        }
    }
}

/// Allocates (unless `compute_only`), computes and reads `g` on `sched`.
fn run(env: &Env, sched: sys::ggml_backend_sched_t, g: &G, compute_only: bool) -> Option<Seen> {
    // SAFETY: live scheduler and graph.
    unsafe {
        if !compute_only {
            if !ggml_backend_sched_alloc_graph(sched, g.graph) {
                return None;
            }
            set_inputs(g);
        } else {
            // graph_compute allocates itself; the inputs are then set by a second compute.
            let st = ggml_backend_sched_graph_compute(sched, g.graph);
            assert_eq!(st, sys::GGML_STATUS_SUCCESS);
            set_inputs(g);
        }
        let placement = g
            .watch
            .iter()
            .map(|&t| env.index(ggml_backend_sched_get_tensor_backend(sched, t)))
            .collect();
        let n_splits = ggml_backend_sched_get_n_splits(sched);
        let st = ggml_backend_sched_graph_compute(sched, g.graph);
        assert_eq!(st, sys::GGML_STATUS_SUCCESS);
        let outs = g
            .outs
            .iter()
            .map(|&t| {
                let n = sys::ggml_nelements(t) as usize;
                let mut v = vec![0f32; n];
                ggml_backend_tensor_get(t, v.as_mut_ptr().cast(), 0, n * 4);
                v
            })
            .collect();
        Some(Seen {
            placement,
            n_splits,
            outs,
        })
    }
}

/// The oracle: a fresh scheduler given a fresh build of the same graph (in its own memory).
fn oracle(env: &Env, f: &Builder, user: &[(usize, usize)]) -> Seen {
    let mut arena = Vec::new();
    let g = build(&mut arena, f);
    let s = env.sched();
    // SAFETY: live scheduler and tensors.
    unsafe {
        for &(w, b) in user {
            ggml_backend_sched_set_tensor_backend(s, g.watch[w], env.backends[b]);
        }
    }
    let seen = run(env, s, &g, false).expect("oracle allocation");
    // SAFETY: made above.
    unsafe { ggml_backend_sched_free(s) };
    drop(g);
    seen
}

fn replays() -> u64 {
    ggml_base::sched::replay::replays_total()
}

fn snapshots() -> u64 {
    ggml_base::sched::replay::snapshots_total()
}

/// Lock, reset global switches.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    FAIL_A_ALLOC.store(false, Ordering::SeqCst);
    OFFLOAD_A.store(true, Ordering::SeqCst);
    REVERSE_OPT.store(false, Ordering::SeqCst);
    g
}

/// A pre-allocated F32 tensor of `n` elements in its own CPU buffer, values 1..n / 8.
struct Weights {
    ctx: *mut sys::ggml_context,
    buf: sys::ggml_backend_buffer_t,
    w: Vec<*mut ggml_tensor>,
}
impl Weights {
    fn new(n: i64, count: usize) -> Weights {
        // SAFETY: exported API with valid arguments.
        unsafe {
            let ctx = sys::ggml_init(sys::ggml_init_params {
                mem_size: 16 * sys::ggml_tensor_overhead(),
                mem_buffer: null_mut(),
                no_alloc: true,
            });
            let w: Vec<_> = (0..count)
                .map(|_| sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, n))
                .collect();
            let buf =
                sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
            assert!(!buf.is_null());
            for (j, &t) in w.iter().enumerate() {
                let v: Vec<f32> = (0..n).map(|k| (k + 1 + j as i64) as f32 / 8.0).collect();
                ggml_backend_tensor_set(t, v.as_ptr().cast(), 0, n as usize * 4);
            }
            Weights { ctx, buf, w }
        }
    }
}
impl Drop for Weights {
    fn drop(&mut self) {
        // SAFETY: made in new().
        unsafe {
            ggml_backend_buffer_free(self.buf);
            sys::ggml_free(self.ctx);
        }
    }
}

fn input(ctx: *mut sys::ggml_context, n: i64) -> *mut ggml_tensor {
    // SAFETY: a live no_alloc context.
    unsafe {
        let t = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, n);
        sys::ggml_set_input(t);
        t
    }
}
fn finish(ctx: *mut sys::ggml_context, outs: &[*mut ggml_tensor]) -> *mut ggml_cgraph {
    // SAFETY: a live context and its tensors.
    unsafe {
        let g = sys::ggml_new_graph(ctx);
        for &o in outs {
            sys::ggml_set_output(o);
            sys::ggml_build_forward_expand(g, o);
        }
        g
    }
}

/// Runs `steps` on one long-lived scheduler, each step: `before` (a change to the world),
/// reset, rebuild in the same arena, `user` placements, alloc + compute; compared with the
/// oracle. Returns the replays each step made.
fn drive(env: &Env, f: &Builder, steps: &[Step<'_>], label: &str) -> Vec<u64> {
    drive_counting(env, f, steps, label)
        .into_iter()
        .map(|(replayed, _)| replayed)
        .collect()
}

/// [`drive`], returning per step the replays and the snapshots (copies of every header for a
/// later replay) it made.
fn drive_counting(env: &Env, f: &Builder, steps: &[Step<'_>], label: &str) -> Vec<(u64, u64)> {
    let sched = env.sched();
    let mut arena = Vec::new();
    let mut out = Vec::new();
    // The first step twice: the first split also sets the scheduler state a replay compares
    // (the previous first-split backend), so only from the second on can a step replay.
    let steps: Vec<_> = std::iter::once(&steps[0]).chain(steps).collect();
    for (i, (before, user)) in steps.into_iter().enumerate() {
        before();
        let want = oracle(env, f, user);
        // SAFETY: live scheduler; the previous graph is reset away before its memory is reused.
        unsafe { ggml_backend_sched_reset(sched) };
        let g = build(&mut arena, f);
        for &(w, b) in user {
            // SAFETY: live scheduler and tensor.
            unsafe { ggml_backend_sched_set_tensor_backend(sched, g.watch[w], env.backends[b]) };
        }
        let (r0, s0) = (replays(), snapshots());
        let got = run(env, sched, &g, false).expect("allocation");
        let r = replays() - r0;
        out.push((r, snapshots() - s0));
        eprintln!(
            "{label} step {i}: replayed {r}, got {:?} want {:?}",
            got.placement, want.placement
        );
        assert_eq!(got, want, "{label} step {i} (replayed: {r})");
        // SAFETY: as above.
        unsafe { ggml_backend_sched_reset(sched) };
        drop(g);
    }
    // SAFETY: made above.
    unsafe { ggml_backend_sched_free(sched) };
    out
}

fn noop() {}

#[test]
fn sanity_identical_graph_replays() {
    let _l = serial();
    let env = Env::new(true);
    let f = |ctx: *mut sys::ggml_context| {
        // SAFETY: a live context.
        unsafe {
            let x = input(ctx, 8);
            let y = sys::ggml_scale(ctx, x, 2.0);
            let z = sys::ggml_add(ctx, y, x);
            (finish(ctx, &[z]), vec![x, y, z], vec![z])
        }
    };
    let r = drive(
        &env,
        &f,
        &[
            (&noop, vec![]),
            (&noop, vec![]),
            (&noop, vec![]),
            (&noop, vec![]),
        ],
        "sanity",
    );
    // Snapshot at the third split (`SNAPSHOT_AT`), replayed from the fourth on.
    assert_eq!(
        r,
        vec![0, 0, 0, 1, 1],
        "the identical rebuilt graph is replayed"
    );
}

/// llama.cpp builds every graph of a context in the same memory, so graphs of different token
/// counts have the same node and leaf arrays: each is a new graph, not a sighting of the last
/// one. A shape is snapshot at its second split in a row (the arrays' third or later) and
/// replayed from its third; the old count took a snapshot (a copy of every header) of every
/// graph from the third on, and none of them replayed.
#[test]
fn new_shapes_in_the_same_memory_are_not_snapshot() {
    let _l = serial();
    let env = Env::new(true);
    let n = std::cell::Cell::new(8i64);
    let f = |ctx: *mut sys::ggml_context| {
        // SAFETY: a live context.
        unsafe {
            let x = input(ctx, n.get());
            let y = sys::ggml_scale(ctx, x, 2.0);
            let z = sys::ggml_add(ctx, y, x);
            (finish(ctx, &[z]), vec![x, y, z], vec![z])
        }
    };
    // `drive` runs the first step twice: sizes 8, 8, 16, 24, 32, 40, 40, 40, 40.
    let sizes = [8i64, 16, 24, 32, 40, 40, 40, 40];
    let n = &n;
    let set: Vec<Box<dyn Fn() + '_>> = sizes
        .iter()
        .map(|&size| Box::new(move || n.set(size)) as Box<dyn Fn() + '_>)
        .collect();
    let steps: Vec<Step<'_>> = set.iter().map(|s| (s.as_ref(), vec![])).collect();
    let (replayed, snapshots): (Vec<u64>, Vec<u64>) = drive_counting(&env, &f, &steps, "shapes")
        .into_iter()
        .unzip();
    assert_eq!(
        snapshots,
        vec![0, 0, 0, 0, 0, 0, 1, 0, 0],
        "a snapshot only of the shape seen twice in a row (sizes {sizes:?})"
    );
    assert_eq!(
        replayed,
        vec![0, 0, 0, 0, 0, 0, 0, 1, 1],
        "replays after that snapshot (sizes {sizes:?})"
    );
}

/// The weights buffer's usage is read by pass 1 (ops on weights in host memory of the last
/// backend are offloaded) but is not in any tensor header.
#[test]
fn weights_usage_flip() {
    let _l = serial();
    let env = Env::new(true);
    let w = Weights::new(8, 1);
    let wt = w.w[0];
    let buf = w.buf;
    let f = move |ctx: *mut sys::ggml_context| {
        // SAFETY: a live context.
        unsafe {
            let x = input(ctx, 8);
            let y = sys::ggml_mul(ctx, x, wt);
            let z = sys::ggml_scale(ctx, y, 2.0);
            (finish(ctx, &[z]), vec![y, z], vec![z])
        }
    };
    // SAFETY: a live buffer.
    let any = || unsafe { ggml_backend_buffer_set_usage(buf, sys::GGML_BACKEND_BUFFER_USAGE_ANY) };
    // SAFETY: a live buffer.
    let wts =
        || unsafe { ggml_backend_buffer_set_usage(buf, sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS) };
    drive(
        &env,
        &f,
        &[(&any, vec![]), (&wts, vec![]), (&any, vec![])],
        "usage",
    );
}

/// A weights buffer replaced by one of another buffer type at the same addresses (weights
/// reloaded, the allocator handing back the freed memory): simulated by changing the buffer's
/// type in place, as the test buffer type itself does.
#[test]
fn weights_buffer_type_changes_at_same_address() {
    let _l = serial();
    let env = Env::new(false);
    let w = Weights::new(8, 1);
    let wt = w.w[0];
    let buf = w.buf;
    let f = move |ctx: *mut sys::ggml_context| {
        // SAFETY: a live context.
        unsafe {
            let x = input(ctx, 8);
            let y = sys::ggml_mul(ctx, x, wt);
            let z = sys::ggml_scale(ctx, y, 2.0);
            (finish(ctx, &[z]), vec![wt, y, z], vec![z])
        }
    };
    // SAFETY: a live buffer; both types are host memory of the CPU buffer's interface.
    let to_cpu = || unsafe { (*buf).buft = ggml_backend_cpu_buffer_type() };
    // SAFETY: as above.
    let to_a = || unsafe { (*buf).buft = &raw mut BUFT_A };
    drive(
        &env,
        &f,
        &[(&to_cpu, vec![]), (&to_a, vec![]), (&to_cpu, vec![])],
        "buft",
    );
}

/// The same, for real: the weights buffer is freed and one of TESTA's type allocated; when
/// the allocator gives back the same buffer struct and memory, the headers are equal.
#[test]
fn weights_reloaded_real_free() {
    let _l = serial();
    let env = Env::new(false);
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = sys::ggml_init(sys::ggml_init_params {
            mem_size: 4 * sys::ggml_tensor_overhead(),
            mem_buffer: null_mut(),
            no_alloc: true,
        });
        let wt = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 8);
        let b1 = sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
        let v: Vec<f32> = (0..8).map(|k| k as f32).collect();
        ggml_backend_tensor_set(wt, v.as_ptr().cast(), 0, 32);
        let f = move |ctx: *mut sys::ggml_context| {
            let x = input(ctx, 8);
            let y = sys::ggml_mul(ctx, x, wt);
            (finish(ctx, &[y]), vec![wt, y], vec![y])
        };
        let sched = env.sched();
        let mut arena = Vec::new();
        let g = build(&mut arena, &f);
        let first = run(&env, sched, &g, false).unwrap();
        ggml_backend_sched_reset(sched);
        drop(g);
        let (old_buf, old_data) = (b1, (*wt).data);
        ggml_backend_buffer_free(b1);
        (*wt).buffer = null_mut();
        (*wt).data = null_mut();
        let b2 = sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, &raw mut BUFT_A);
        ggml_backend_tensor_set(wt, v.as_ptr().cast(), 0, 32);
        let same = b2 == old_buf && (*wt).data == old_data;
        eprintln!(
            "reload: same buffer address {} same data {}",
            b2 == old_buf,
            (*wt).data == old_data
        );
        let want = oracle(&env, &f, &[]);
        let g = build(&mut arena, &f);
        let r0 = replays();
        let got = run(&env, sched, &g, false).unwrap();
        eprintln!(
            "reload: first {:?} got {:?} want {:?} replayed {}",
            first.placement,
            got.placement,
            want.placement,
            replays() - r0
        );
        ggml_backend_sched_reset(sched);
        drop(g);
        ggml_backend_sched_free(sched);
        ggml_backend_buffer_free(b2);
        sys::ggml_free(ctx);
        if same {
            assert_eq!(got, want, "weights reloaded at the same address");
        }
    }
}

/// The same node memory with other op parameters, other sources.
#[test]
fn op_params_and_src_wiring() {
    let _l = serial();
    let env = Env::new(false);
    let s = std::cell::Cell::new(2.0f32);
    let swap = std::cell::Cell::new(false);
    let f = |ctx: *mut sys::ggml_context| {
        // SAFETY: a live context.
        unsafe {
            let x0 = input(ctx, 8);
            let x1 = input(ctx, 8);
            let (a, b) = if swap.get() { (x1, x0) } else { (x0, x1) };
            let y = sys::ggml_scale(ctx, a, s.get());
            let z = sys::ggml_add(ctx, y, b);
            (finish(ctx, &[z]), vec![y, z], vec![z])
        }
    };
    let s3 = || s.set(3.0);
    let sw = || swap.set(true);
    let r = drive(
        &env,
        &f,
        &[
            (&noop, vec![]),
            (&s3, vec![]),
            (&noop, vec![]),
            (&sw, vec![]),
            (&noop, vec![]),
            (&noop, vec![]),
            (&noop, vec![]),
        ],
        "params",
    );
    // A new scale keeps the leaf and node arrays (their third split: snapshot), so the step
    // after it replays. Swapped sources reorder the graph's leafs: a graph not seen before,
    // snapshot only at its third split and replayed from its fourth.
    assert_eq!(r, vec![0, 0, 0, 1, 0, 0, 0, 1]);
}

/// User placements: none, one, the same again, twice for the same node, two in either order.
#[test]
fn user_placement_patterns() {
    let _l = serial();
    let env = Env::new(false);
    let f = |ctx: *mut sys::ggml_context| {
        // SAFETY: a live context.
        unsafe {
            let x = input(ctx, 8);
            let y = sys::ggml_scale(ctx, x, 2.0);
            let z = sys::ggml_add(ctx, y, x);
            let o = sys::ggml_scale(ctx, z, 0.5);
            (finish(ctx, &[o]), vec![y, z, o], vec![o])
        }
    };
    let (a, c) = (0usize, 1usize);
    let r = drive(
        &env,
        &f,
        &[
            (&noop, vec![]),
            (&noop, vec![(0, a)]),
            (&noop, vec![(0, a)]),
            (&noop, vec![(0, c), (0, a)]),
            (&noop, vec![(0, a), (1, c)]),
            (&noop, vec![(1, c), (0, a)]),
            (&noop, vec![(0, c)]),
            (&noop, vec![(0, c), (2, a)]),
            (&noop, vec![(0, c), (2, a)]),
            (&noop, vec![]),
        ],
        "user",
    );
    eprintln!("user replays {r:?}");
}

/// Placement queries after a reset (before and after user placements), and a placement made
/// before the reset (which the reset drops), and one made after the allocation.
#[test]
fn queries_after_reset_and_stale_user() {
    let _l = serial();
    let env = Env::new(false);
    let f = |ctx: *mut sys::ggml_context| {
        // SAFETY: a live context.
        unsafe {
            let x = input(ctx, 8);
            let y = sys::ggml_scale(ctx, x, 2.0);
            let z = sys::ggml_add(ctx, y, x);
            (finish(ctx, &[z]), vec![y, z], vec![z])
        }
    };
    let sched = env.sched();
    let mut arena = Vec::new();
    // SAFETY: exported API with live arguments throughout.
    unsafe {
        let g = build(&mut arena, &f);
        ggml_backend_sched_set_tensor_backend(sched, g.watch[0], env.backends[0]);
        let first = run(&env, sched, &g, false).unwrap();
        ggml_backend_sched_reset(sched);
        for &t in &g.watch {
            assert!(
                ggml_backend_sched_get_tensor_backend(sched, t).is_null(),
                "after reset"
            );
        }
        drop(g);
        let g = build(&mut arena, &f);
        // placed before a second reset: dropped by it
        ggml_backend_sched_set_tensor_backend(sched, g.watch[0], env.backends[0]);
        assert_eq!(
            env.index(ggml_backend_sched_get_tensor_backend(sched, g.watch[0])),
            0
        );
        ggml_backend_sched_reset(sched);
        assert!(ggml_backend_sched_get_tensor_backend(sched, g.watch[0]).is_null());
        let r0 = replays();
        let got = run(&env, sched, &g, false).unwrap();
        let want = oracle(&env, &f, &[]);
        eprintln!(
            "stale user: first {:?} got {:?} want {:?} replayed {}",
            first.placement,
            got.placement,
            want.placement,
            replays() - r0
        );
        assert_eq!(got, want);
        // placed after the allocation: the table changes, the next identical graph must not
        // replay the placement before it... but the reset drops it anyway.
        ggml_backend_sched_set_tensor_backend(sched, g.watch[1], env.backends[0]);
        ggml_backend_sched_reset(sched);
        drop(g);
        let g = build(&mut arena, &f);
        let got = run(&env, sched, &g, false).unwrap();
        assert_eq!(got, want, "after a post-alloc placement and reset");
        ggml_backend_sched_reset(sched);
        drop(g);
        ggml_backend_sched_free(sched);
    }
}

// ---- the graph allocator ------------------------------------------------------------------

/// A node that runs in place over a view parent with an offset (`z = add(view(x, off), b)`)
/// while a graph input that another node reads later lives at the buffer's start. Stock's
/// gallocr gives such a node the view's own table address (never set: offset 0), not its
/// view source's; with either layout, `z` must not overwrite `in0` before `y2` reads it.
#[test]
fn inplace_over_offset_view_parent() {
    let _l = serial();
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = sys::ggml_init(sys::ggml_init_params {
            mem_size: 32 * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead(),
            mem_buffer: null_mut(),
            no_alloc: true,
        });
        let in0 = input(ctx, 8);
        let in1 = input(ctx, 4);
        let x = sys::ggml_scale(ctx, in0, 2.0);
        let v = sys::ggml_view_1d(ctx, x, 4, 16);
        let z = sys::ggml_add(ctx, v, in1);
        let o1 = sys::ggml_scale(ctx, z, 1.0);
        let y2 = sys::ggml_scale(ctx, in0, 3.0);
        let g = finish(ctx, &[o1, y2]);
        let galloc = ggml_base::alloc::exports::ggml_gallocr_new(ggml_backend_cpu_buffer_type());
        assert!(ggml_base::alloc::exports::ggml_gallocr_alloc_graph(
            galloc, g
        ));
        let a: Vec<f32> = (0..8).map(|k| k as f32 + 1.0).collect();
        let b: Vec<f32> = (0..4).map(|k| 100.0 + k as f32).collect();
        ggml_backend_tensor_set(in0, a.as_ptr().cast(), 0, 32);
        ggml_backend_tensor_set(in1, b.as_ptr().cast(), 0, 16);
        let base = (*in0).data as usize;
        for (name, t) in [
            ("in0", in0),
            ("in1", in1),
            ("x", x),
            ("v", v),
            ("z", z),
            ("o1", o1),
            ("y2", y2),
        ] {
            eprintln!(
                "{name}: data +{}",
                (*t).data as usize as isize - base as isize
            );
        }
        let be = backend(&raw mut DEV_CPU);
        assert_eq!(backend_compute(be, g), sys::GGML_STATUS_SUCCESS);
        let mut got1 = [0f32; 4];
        let mut got2 = [0f32; 8];
        ggml_backend_tensor_get(o1, got1.as_mut_ptr().cast(), 0, 16);
        ggml_backend_tensor_get(y2, got2.as_mut_ptr().cast(), 0, 32);
        let want1: Vec<f32> = (0..4).map(|k| a[4 + k] * 2.0 + b[k]).collect();
        let want2: Vec<f32> = a.iter().map(|v| v * 3.0).collect();
        eprintln!("o1 {got1:?} want {want1:?}\ny2 {got2:?} want {want2:?}");
        backend_free(be);
        ggml_base::alloc::exports::ggml_gallocr_free(galloc);
        sys::ggml_free(ctx);
        assert_eq!(got1.to_vec(), want1);
        assert_eq!(got2.to_vec(), want2);
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One random graph over 1-D F32 tensors of `w` and `w/2` elements: ADD, MUL, SCALE, CPY,
/// half views at offset 0 or w/2, in-place ADD/SCALE (the ggml_*_inplace forms), several
/// readers of one tensor, random outputs. Built in `ctx` (allocating or not). Returns the
/// graph, its inputs and its outputs.
fn random_graph(
    ctx: *mut sys::ggml_context,
    seed: u64,
) -> (
    *mut ggml_cgraph,
    Vec<*mut ggml_tensor>,
    Vec<*mut ggml_tensor>,
) {
    let mut r = Rng(seed * 2654435761 + 1);
    let w = 2 * (1 + r.below(40)) as i64;
    // SAFETY: a live context throughout.
    unsafe {
        let n_in = 1 + r.below(3);
        let inputs: Vec<_> = (0..n_in).map(|_| input(ctx, w)).collect();
        let mut full: Vec<*mut ggml_tensor> = inputs.clone();
        let mut half: Vec<*mut ggml_tensor> = Vec::new();
        let mut all = Vec::new();
        let n_ops = 2 + if r.below(2) == 0 {
            r.below(24)
        } else {
            r.below(300)
        };
        for _ in 0..n_ops {
            let use_half = !half.is_empty() && r.below(3) == 0;
            let pool = if use_half { &half } else { &full };
            let a = pool[r.below(pool.len())];
            let b = pool[r.below(pool.len())];
            let t = match r.below(8) {
                0 => sys::ggml_add(ctx, a, b),
                1 => sys::ggml_mul(ctx, a, b),
                2 => sys::ggml_scale(ctx, a, 0.5 + r.below(4) as f32 * 0.25),
                3 if !use_half => {
                    let off = if r.below(2) == 0 {
                        0
                    } else {
                        (w / 2) as usize * 4
                    };
                    sys::ggml_view_1d(ctx, a, w / 2, off)
                }
                4 => {
                    let d =
                        sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, sys::ggml_nelements(a));
                    sys::ggml_cpy(ctx, a, d)
                }
                5 if !inputs.contains(&a) => sys::ggml_add_inplace(ctx, a, b),
                6 if !inputs.contains(&a) => sys::ggml_scale_inplace(ctx, a, 1.5),
                _ => sys::ggml_add(ctx, b, a),
            };
            if sys::ggml_nelements(t) == w {
                full.push(t);
            } else {
                half.push(t);
            }
            all.push(t);
        }
        let mut outs = vec![*all.last().unwrap()];
        for _ in 0..r.below(3) {
            outs.push(all[r.below(all.len())]);
        }
        outs.sort();
        outs.dedup();
        let g = sys::ggml_new_graph(ctx);
        for &o in &outs {
            sys::ggml_set_output(o);
        }
        for &o in &outs {
            sys::ggml_build_forward_expand(g, o);
        }
        (g, inputs, outs)
    }
}

fn fill_inputs(inputs: &[*mut ggml_tensor], seed: u64) {
    for (j, &t) in inputs.iter().enumerate() {
        // SAFETY: allocated host tensors.
        unsafe {
            if (*t).data.is_null() {
                continue; // an input no node reads is not in the graph
            }
            let n = sys::ggml_nelements(t) as usize;
            let v: Vec<f32> = (0..n)
                .map(|k| ((k * 7 + j * 13 + seed as usize) % 17) as f32 / 8.0 - 1.0)
                .collect();
            if (*t).buffer.is_null() {
                std::ptr::copy_nonoverlapping(v.as_ptr(), (*t).data.cast::<f32>(), n);
            } else {
                ggml_backend_tensor_set(t, v.as_ptr().cast(), 0, n * 4);
            }
        }
    }
}

fn read_outs(outs: &[*mut ggml_tensor]) -> Vec<Vec<u32>> {
    outs.iter()
        .map(|&t| floats(t).iter().map(|f| f.to_bits()).collect())
        .collect()
}

/// Outputs of a random graph in memory of its own (no reuse), then with gallocr under
/// `layout`, with the compute buffer's size.
fn alloc_case(
    seed: u64,
    layout: &str,
    delay: Option<&str>,
    be: ggml_backend_t,
) -> (Vec<Vec<u32>>, Vec<Vec<u32>>, usize) {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let mem = 700 * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead() + (1 << 20);
        let rctx = sys::ggml_init(sys::ggml_init_params {
            mem_size: mem,
            mem_buffer: null_mut(),
            no_alloc: false,
        });
        let (g, ins, outs) = random_graph(rctx, seed);
        fill_inputs(&ins, seed);
        assert_eq!(backend_compute(be, g), sys::GGML_STATUS_SUCCESS);
        let want = read_outs(&outs);
        sys::ggml_free(rctx);

        std::env::set_var("GGML_ALLOC_LAYOUT", layout);
        if let Some(d) = delay {
            std::env::set_var("GGML_ALLOC_REUSE_DELAY", d);
        }
        let ctx = sys::ggml_init(sys::ggml_init_params {
            mem_size: mem,
            mem_buffer: null_mut(),
            no_alloc: true,
        });
        let (g, ins, outs) = random_graph(ctx, seed);
        let galloc = ggml_base::alloc::exports::ggml_gallocr_new(ggml_backend_cpu_buffer_type());
        std::env::remove_var("GGML_ALLOC_LAYOUT");
        std::env::remove_var("GGML_ALLOC_REUSE_DELAY");
        assert!(ggml_base::alloc::exports::ggml_gallocr_alloc_graph(
            galloc, g
        ));
        fill_inputs(&ins, seed);
        assert_eq!(backend_compute(be, g), sys::GGML_STATUS_SUCCESS);
        let got = read_outs(&outs);
        let size = ggml_base::alloc::exports::ggml_gallocr_get_buffer_size(galloc, 0);
        ggml_base::alloc::exports::ggml_gallocr_free(galloc);
        sys::ggml_free(ctx);
        (want, got, size)
    }
}

#[test]
fn gallocr_random_graphs_packed_and_stock() {
    let _l = serial();
    let be = backend(&raw mut DEV_CPU);
    let n: u64 = std::env::var("ALLOC_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    // The default reuse delay, and none (where the packing shrinks more graphs, so the
    // outputs are checked over more packed layouts).
    let (mut smaller, mut smaller_no_delay, mut bad) = (0, 0, Vec::new());
    for seed in 0..n {
        let (want, got_s, size_s) = alloc_case(seed, "stock", None, be);
        for (delay, count) in [(None, &mut smaller), (Some("0"), &mut smaller_no_delay)] {
            let (want2, got_p, size_p) = alloc_case(seed, "packed", delay, be);
            assert_eq!(want, want2);
            if got_p != want {
                bad.push((seed, "packed", delay));
            }
            assert!(
                size_p <= size_s,
                "seed {seed}: packed {size_p} > stock {size_s} (delay {delay:?})"
            );
            *count += usize::from(size_p < size_s);
        }
        if got_s != want {
            bad.push((seed, "stock", None));
        }
    }
    // SAFETY: made above.
    unsafe { backend_free(be) };
    eprintln!(
        "alloc: {n} graphs, packed smaller in {smaller} (no reuse delay: {smaller_no_delay}), \
         wrong outputs: {bad:?}"
    );
    assert!(bad.is_empty(), "wrong outputs: {bad:?}");
    // The packed layout must actually be used: 3 of the first 3,000 graphs with the default
    // reuse delay (4 nodes), 50 with none.
    assert!(
        n < 500 || (smaller > 0 && smaller_no_delay > smaller),
        "the packing made too few buffers smaller: {smaller}, {smaller_no_delay} with no delay"
    );
}

/// A node listed twice (a graph built with `ggml_graph_add_node`, never by ggml's builder) gets
/// memory twice in the walk; the plan keeps its second block, alive only in its second life,
/// so a packed layout could put another block over the first life (a review's differential
/// of 2026-12-07 found such overlaps). Such a plan keeps the walk's offsets: the packed
/// buffer is then the stock layout's, byte for byte, on a graph whose packing is smaller
/// without the duplicate.
#[test]
fn gallocr_node_listed_twice_keeps_the_walks_offsets() {
    let _l = serial();
    let size_of = |seed: u64, layout: &str, twice: bool| -> usize {
        // SAFETY: exported API with valid arguments throughout.
        unsafe {
            let mem = 700 * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead();
            let ctx = sys::ggml_init(sys::ggml_init_params {
                mem_size: mem,
                mem_buffer: null_mut(),
                no_alloc: true,
            });
            let (g, _, _) = random_graph(ctx, seed);
            if twice {
                // The first node that owns its memory and is freed after its last reader: not
                // an output, read by a later node, and the source of no view (which would
                // keep it alive).
                let n = (*g).n_nodes as usize;
                let nodes: Vec<*mut ggml_tensor> = (0..n).map(|i| *(*g).nodes.add(i)).collect();
                let read = |t: *mut ggml_tensor| nodes.iter().any(|&r| (*r).src.contains(&t));
                let again = *nodes
                    .iter()
                    .find(|&&t| {
                        (*t).view_src.is_null()
                            && (*t).flags & sys::GGML_TENSOR_FLAG_OUTPUT as i32 == 0
                            && (*t).op != sys::GGML_OP_NONE
                            && read(t)
                            && !nodes.iter().any(|&r| (*r).view_src == t)
                    })
                    .expect("a node with memory of its own");
                sys::ggml_graph_add_node(g, again);
            }
            std::env::set_var("GGML_ALLOC_LAYOUT", layout);
            std::env::set_var("GGML_ALLOC_REUSE_DELAY", "0");
            let galloc =
                ggml_base::alloc::exports::ggml_gallocr_new(ggml_backend_cpu_buffer_type());
            std::env::remove_var("GGML_ALLOC_LAYOUT");
            std::env::remove_var("GGML_ALLOC_REUSE_DELAY");
            assert!(ggml_base::alloc::exports::ggml_gallocr_alloc_graph(
                galloc, g
            ));
            let size = ggml_base::alloc::exports::ggml_gallocr_get_buffer_size(galloc, 0);
            ggml_base::alloc::exports::ggml_gallocr_free(galloc);
            sys::ggml_free(ctx);
            size
        }
    };
    let (mut checked, mut packed_smaller) = (0, 0);
    for seed in 0..2000 {
        if size_of(seed, "packed", false) >= size_of(seed, "stock", false) {
            continue;
        }
        checked += 1;
        let (packed, stock) = (size_of(seed, "packed", true), size_of(seed, "stock", true));
        assert_eq!(
            packed,
            stock,
            "seed {seed}: a node listed twice, packed against stock (plain {} {})",
            size_of(seed, "packed", false),
            size_of(seed, "stock", false)
        );
        packed_smaller += usize::from(packed < stock);
    }
    assert!(checked >= 5, "only {checked} graphs packed smaller");
    assert_eq!(packed_smaller, 0);
}

// ---- more replay cases ----------------------------------------------------------------------

fn chain(
    ctx: *mut sys::ggml_context,
) -> (
    *mut ggml_cgraph,
    Vec<*mut ggml_tensor>,
    Vec<*mut ggml_tensor>,
) {
    // SAFETY: a live context.
    unsafe {
        let x = input(ctx, 16);
        let x1 = input(ctx, 16);
        let y = sys::ggml_scale(ctx, x, 2.0);
        let z = sys::ggml_add(ctx, y, x1);
        let v = sys::ggml_view_1d(ctx, z, 8, 32);
        let c = sys::ggml_scale(ctx, v, 3.0);
        let zi = sys::ggml_add_inplace(ctx, z, x);
        let o = sys::ggml_mul(ctx, zi, x1);
        (finish(ctx, &[c, o]), vec![y, z, c, zi, o], vec![c, o])
    }
}

/// reserve, reserve_size and split_graph (of this graph or another) between two allocations
/// of an identical graph.
#[test]
fn reserve_and_split_graph_between() {
    let _l = serial();
    let env = Env::new(false);
    let f = |ctx| chain(ctx);
    let want = oracle(&env, &f, &[(1, 0)]);
    let sched = env.sched();
    let arena = std::cell::RefCell::new(Vec::new());
    let other = std::cell::RefCell::new(Vec::new());
    // SAFETY: exported API with live arguments throughout.
    unsafe {
        let step = |what: &str, between: &dyn Fn()| {
            ggml_backend_sched_reset(sched);
            between();
            ggml_backend_sched_reset(sched);
            let g = build(&mut arena.borrow_mut(), &f);
            ggml_backend_sched_set_tensor_backend(sched, g.watch[1], env.backends[0]);
            let r0 = replays();
            let got = run(&env, sched, &g, false).unwrap();
            eprintln!("{what}: replayed {}", replays() - r0);
            assert_eq!(got, want, "{what}");
            ggml_backend_sched_reset(sched);
        };
        let nothing = || {};
        step("first", &nothing);
        step("warm", &nothing);
        step("again", &nothing);
        let same_arena_reserve = || {
            let g = build(&mut arena.borrow_mut(), &f);
            assert!(ggml_backend_sched_reserve(sched, g.graph));
        };
        step("after reserve of the same graph", &same_arena_reserve);
        step("again after reserve", &nothing);
        let other_reserve = || {
            let g = build(&mut other.borrow_mut(), &|ctx| {
                let x = input(ctx, 1024);
                let y = sys::ggml_scale(ctx, x, 2.0);
                ggml_backend_sched_set_tensor_backend(sched, y, env.backends[1]);
                (finish(ctx, &[y]), vec![y], vec![y])
            });
            assert!(ggml_backend_sched_reserve(sched, g.graph));
        };
        step("after reserve of another graph", &other_reserve);
        step("again", &nothing);
        let size = || {
            let g = build(&mut other.borrow_mut(), &|ctx| {
                let x = input(ctx, 4096);
                let y = sys::ggml_scale(ctx, x, 2.0);
                (finish(ctx, &[y]), vec![y], vec![y])
            });
            let mut sizes = [0usize; 2];
            ggml_backend_sched_reserve_size(sched, g.graph, sizes.as_mut_ptr());
        };
        step("after reserve_size of another graph", &size);
        step("again", &nothing);
        let split = || {
            let g = build(&mut arena.borrow_mut(), &f);
            ggml_backend_sched_split_graph(sched, g.graph);
        };
        step("after split_graph of the same graph", &split);
        step("again", &nothing);
        let split_other = || {
            let g = build(&mut other.borrow_mut(), &|ctx| {
                let x = input(ctx, 16);
                let y = sys::ggml_scale(ctx, x, 2.0);
                ggml_backend_sched_set_tensor_backend(sched, y, env.backends[0]);
                let z = sys::ggml_scale(ctx, y, 2.0);
                ggml_backend_sched_set_tensor_backend(sched, z, env.backends[1]);
                (finish(ctx, &[z]), vec![y], vec![y])
            });
            ggml_backend_sched_split_graph(sched, g.graph);
        };
        step("after split_graph of another graph", &split_other);
        step("again", &nothing);
        // A failed allocation in between: TESTA's buffers cannot be had.
        let failing = || {
            let g = build(&mut other.borrow_mut(), &|ctx| {
                let x = input(ctx, 1 << 16);
                let y = sys::ggml_scale(ctx, x, 2.0);
                ggml_backend_sched_set_tensor_backend(sched, y, env.backends[0]);
                (finish(ctx, &[y]), vec![y], vec![y])
            });
            FAIL_A_ALLOC.store(true, Ordering::SeqCst);
            assert!(
                !ggml_backend_sched_alloc_graph(sched, g.graph),
                "TESTA cannot allocate"
            );
            FAIL_A_ALLOC.store(false, Ordering::SeqCst);
        };
        step("after a failed allocation of another graph", &failing);
        step("again", &nothing);
        ggml_backend_sched_free(sched);
    }
}

/// The identical graph whose own allocation failed last time, then succeeds.
#[test]
fn identical_graph_after_failed_allocation() {
    let _l = serial();
    let env = Env::new(false);
    let f = |ctx| chain(ctx);
    let want = oracle(&env, &f, &[(1, 0)]);
    let sched = env.sched();
    let mut arena = Vec::new();
    // SAFETY: exported API with live arguments throughout.
    unsafe {
        for (i, fail) in [true, false, false, true, false, false, true, true, false]
            .into_iter()
            .enumerate()
        {
            ggml_backend_sched_reset(sched);
            let g = build(&mut arena, &f);
            ggml_backend_sched_set_tensor_backend(sched, g.watch[1], env.backends[0]);
            if fail {
                // Force a new, larger buffer to be needed: a fresh scheduler would need to
                // allocate; the failing one must report the failure, and a replay must not
                // pretend an allocation.
                FAIL_A_ALLOC.store(true, Ordering::SeqCst);
            }
            let r0 = replays();
            let got = run(&env, sched, &g, false);
            FAIL_A_ALLOC.store(false, Ordering::SeqCst);
            eprintln!(
                "failed-alloc step {i} (fail {fail}): ok {} replayed {}",
                got.is_some(),
                replays() - r0
            );
            match got {
                Some(got) => assert_eq!(got, want, "step {i}"),
                // Only the very first allocation needs a new TESTA buffer.
                None => assert_eq!(i, 0, "step {i}: the buffers exist, nothing to allocate"),
            }
            ggml_backend_sched_reset(sched);
        }
        ggml_backend_sched_free(sched);
    }
}

/// graph_optimize reversing independent nodes, with in-place ops and views, replayed.
#[test]
fn graph_optimize_reorder_replayed() {
    let _l = serial();
    REVERSE_OPT.store(true, Ordering::SeqCst);
    let env = Env::new(false);
    let f = |ctx: *mut sys::ggml_context| {
        let (_, ys) = scaled_inputs(ctx);
        (finish(ctx, &ys), ys.clone(), ys)
    };
    let r = drive(
        &env,
        &f,
        &[
            (&noop, vec![]),
            (&noop, vec![]),
            (&noop, vec![(0, 0)]),
            (&noop, vec![(0, 0)]),
        ],
        "opt",
    );
    let g = |ctx| chain(ctx);
    let r2 = drive(
        &env,
        &g,
        &[(&noop, vec![]), (&noop, vec![]), (&noop, vec![])],
        "opt-chain",
    );
    eprintln!(
        "optimize replays {r:?} {r2:?}, optimize calls {}",
        OPT_CALLS.load(Ordering::SeqCst)
    );
}

/// graph_compute without alloc_graph (it allocates, replaying), and the eval callback.
#[test]
fn compute_without_alloc_and_eval_callback() {
    let _l = serial();
    let env = Env::new(false);
    let f = |ctx| chain(ctx);
    let want = oracle(&env, &f, &[]);
    static SEEN: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn cb(t: *mut ggml_tensor, ask: bool, _: *mut std::ffi::c_void) -> bool {
        if !ask {
            // SAFETY: the scheduler passes a computed tensor.
            assert!(!unsafe { (*t).data }.is_null());
            SEEN.fetch_add(1, Ordering::SeqCst);
        }
        true
    }
    let sched = env.sched();
    let mut arena = Vec::new();
    // SAFETY: exported API with live arguments throughout.
    unsafe {
        let mut counts = Vec::new();
        for i in 0..5 {
            ggml_backend_sched_reset(sched);
            if i == 3 {
                ggml_backend_sched_set_eval_callback(sched, Some(cb), null_mut());
            }
            // No user placement here: graph_compute on a scheduler that is neither reset nor
            // allocated resets first (stock too), which would drop it.
            let g = build(&mut arena, &f);
            let r0 = replays();
            SEEN.store(0, Ordering::SeqCst);
            let got = run(&env, sched, &g, true).unwrap();
            counts.push(SEEN.load(Ordering::SeqCst));
            eprintln!(
                "compute-only step {i}: replayed {} callback saw {:?}",
                replays() - r0,
                counts
            );
            assert_eq!(got, want, "step {i}");
        }
        assert_eq!(
            counts[3], counts[4],
            "the callback sees as many nodes after a replay"
        );
        assert!(counts[3] > 0);
        ggml_backend_sched_reset(sched);
        ggml_backend_sched_free(sched);
    }
}

/// A graph built by hand whose node reads tensors that are not in the graph (pre-allocated),
/// whose buffer's usage then changes: no replay may hide it.
#[test]
fn sources_outside_the_graph() {
    let _l = serial();
    let env = Env::new(true);
    let w = Weights::new(8, 2);
    let (a, b) = (w.w[0], w.w[1]);
    let buf = w.buf;
    let f = move |ctx: *mut sys::ggml_context| {
        // SAFETY: a live context.
        unsafe {
            let y = sys::ggml_mul(ctx, a, b);
            sys::ggml_set_output(y);
            let g = sys::ggml_new_graph(ctx);
            sys::ggml_graph_add_node(g, y);
            (g, vec![y], vec![y])
        }
    };
    // SAFETY: a live buffer.
    let any = || unsafe { ggml_backend_buffer_set_usage(buf, sys::GGML_BACKEND_BUFFER_USAGE_ANY) };
    // SAFETY: a live buffer.
    let wts =
        || unsafe { ggml_backend_buffer_set_usage(buf, sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS) };
    let r = drive(
        &env,
        &f,
        &[(&any, vec![]), (&any, vec![]), (&wts, vec![])],
        "outside",
    );
    assert_eq!(
        r.iter().sum::<u64>(),
        0,
        "never replayed: its sources are not in the graph"
    );
}

/// Four graph inputs of 8 elements and each one scaled (input i by 1 + i): `(inputs, scaled)`.
fn scaled_inputs(ctx: *mut sys::ggml_context) -> (Vec<*mut ggml_tensor>, Vec<*mut ggml_tensor>) {
    let xs: Vec<_> = (0..4).map(|_| input(ctx, 8)).collect();
    let ys = xs
        .iter()
        .enumerate()
        // SAFETY: a live context (the caller's) and its own tensors.
        .map(|(i, &x)| unsafe { sys::ggml_scale(ctx, x, 1.0 + i as f32) })
        .collect();
    (xs, ys)
}

/// Four inputs, each scaled, summed in pairs (an add and a mul) and then together: with the
/// user placements the tests give, cross-backend copies in both directions. Watched: the four
/// scaled inputs, the two pair results, the sum; outputs: the sum and the first scaled input.
fn four_scaled_inputs(
    ctx: *mut sys::ggml_context,
) -> (
    *mut ggml_cgraph,
    Vec<*mut ggml_tensor>,
    Vec<*mut ggml_tensor>,
) {
    // SAFETY: a live context (the caller's).
    unsafe {
        let (_, ys) = scaled_inputs(ctx);
        let s01 = sys::ggml_add(ctx, ys[0], ys[1]);
        let s23 = sys::ggml_mul(ctx, ys[2], ys[3]);
        let s = sys::ggml_add(ctx, s01, s23);
        let mut w = ys.clone();
        w.extend([s01, s23, s]);
        (finish(ctx, &[s, ys[0]]), w, vec![s, ys[0]])
    }
}

/// Cross-backend copies with graph_optimize reordering, replayed several times; and the same
/// on a parallel scheduler (pipeline copies, replayed too).
#[test]
fn copies_with_reorder_and_parallel() {
    let _l = serial();
    REVERSE_OPT.store(true, Ordering::SeqCst);
    let f = four_scaled_inputs;
    let user = vec![(0, 0), (1, 0), (4, 1), (6, 0)];
    let steps: Vec<Step<'_>> = (0..6).map(|_| (&noop as &dyn Fn(), user.clone())).collect();
    let env = Env::new(false);
    let r = drive(&env, &f, &steps, "copies");
    // 7 splits of one graph: snapshot at the third, replays from the fourth.
    assert_eq!(r, vec![0, 0, 0, 1, 1, 1, 1], "replayed {r:?}");
    let mut env = Env::new(false);
    env.parallel = true;
    let r = drive(&env, &f, &steps, "parallel");
    // With pipeline copies the replay lays the copies out around the current copy; every step
    // from the fourth on replays.
    assert_eq!(r, vec![0, 0, 0, 1, 1, 1, 1], "pipeline copies: {r:?}");
}

/// Everything an allocation left in a graph, position by position: for every leaf, node and
/// node source (after the split's rewrites, so the pipeline copy read), its name, flags,
/// buffer type and offset in its buffer; then the split count. Two graphs built alike give
/// equal fingerprints exactly when the scheduler placed, split, copied and allocated them
/// alike, whatever their addresses.
fn fingerprint(env: &Env, sched: sys::ggml_backend_sched_t, g: &G) -> Vec<String> {
    let describe = |t: *mut ggml_tensor| -> String {
        // SAFETY: a live tensor of the allocated graph, or one of the scheduler's copies.
        unsafe {
            let name = std::ffi::CStr::from_ptr((*t).name.as_ptr()).to_string_lossy();
            let (buft, offs) = if (*t).buffer.is_null() {
                ("-".to_string(), 0isize)
            } else {
                let buft = std::ffi::CStr::from_ptr(ggml_backend_buffer_name((*t).buffer))
                    .to_string_lossy()
                    .into_owned();
                let base = ggml_backend_buffer_get_base((*t).buffer);
                (buft, (*t).data.cast::<u8>().offset_from(base.cast::<u8>()))
            };
            let b = env.index(ggml_backend_sched_get_tensor_backend(sched, t));
            format!("{name} flags={} on={b} {buft}+{offs}", (*t).flags)
        }
    };
    let mut out = Vec::new();
    // SAFETY: a live, allocated graph.
    unsafe {
        let gr = &*g.graph;
        for i in 0..gr.n_leafs as usize {
            out.push(format!("leaf {i}: {}", describe(*gr.leafs.add(i))));
        }
        for i in 0..gr.n_nodes as usize {
            let n = *gr.nodes.add(i);
            out.push(format!("node {i}: {}", describe(n)));
            for (j, &src) in (*n).src.iter().enumerate() {
                if !src.is_null() {
                    out.push(format!("  src {j}: {}", describe(src)));
                }
            }
        }
        out.push(format!("splits {}", ggml_backend_sched_get_n_splits(sched)));
    }
    out
}

/// The graph of the pipeline-copy lockstep tests, built in `ctx`: sums and products of the
/// scaled inputs; returns the graph, the tensors watched and the outputs.
fn parallel_graph(
    ctx: *mut sys::ggml_context,
) -> (
    *mut ggml_cgraph,
    Vec<*mut ggml_tensor>,
    Vec<*mut ggml_tensor>,
) {
    // SAFETY: a live context (the caller's).
    unsafe {
        let (xs, ys) = scaled_inputs(ctx);
        let s01 = sys::ggml_add(ctx, ys[0], ys[1]);
        let s23 = sys::ggml_mul(ctx, ys[2], xs[3]);
        let s = sys::ggml_add(ctx, s01, s23);
        let t = sys::ggml_mul(ctx, s, xs[0]);
        let mut w = ys.clone();
        w.extend([s01, s23, s, t]);
        (finish(ctx, &[t, ys[0], s23]), w, vec![t, ys[0], s23])
    }
}

/// Pipeline copies, replayed against placed afresh, in lockstep: two parallel schedulers
/// (4 copies) get the same graph step after step, one rebuilt in the same memory (it
/// replays from the fourth step on, the copies rotating), the other built each time in new
/// memory (it can never replay). Each step compares every tensor's placement, name, flags,
/// buffer and offset, the sources' copies, the split count and the outputs; the 8 replayed
/// steps of 11 turn the copies round twice. With and without a `graph_optimize` that reorders the splits.
#[test]
fn parallel_replays_equal_fresh_splits() {
    let _l = serial();
    let f = parallel_graph;
    for reverse in [false, true] {
        REVERSE_OPT.store(reverse, Ordering::SeqCst);
        let mut env = Env::new(false);
        env.parallel = true;
        let user = [(0, 0), (1, 0), (4, 1), (6, 0), (7, 1)];
        let (a, b) = (env.sched(), env.sched());
        let mut arena = Vec::new();
        // B's arenas all stay alive, so that its graphs never land at an earlier address.
        let mut b_arenas: Vec<Vec<u8>> = Vec::new();
        let mut replayed = 0;
        for step in 0..11 {
            let (ga, gb) = (build(&mut arena, &f), {
                b_arenas.push(Vec::new());
                build(b_arenas.last_mut().unwrap(), &f)
            });
            for (s, g) in [(a, &ga), (b, &gb)] {
                for &(w, be) in &user {
                    // SAFETY: live scheduler and tensor.
                    unsafe {
                        ggml_backend_sched_set_tensor_backend(s, g.watch[w], env.backends[be])
                    };
                }
            }
            let (r0, c0) = (
                replays(),
                ggml_base::sched::replay::replays_with_copies_total(),
            );
            let got = run(&env, a, &ga, false).expect("allocation");
            let fa = fingerprint(&env, a, &ga);
            let r = replays() - r0;
            assert_eq!(
                ggml_base::sched::replay::replays_with_copies_total() - c0,
                r,
                "a replay of a parallel scheduler counted without copies"
            );
            let r1 = replays();
            let want = run(&env, b, &gb, false).expect("allocation");
            let fb = fingerprint(&env, b, &gb);
            assert_eq!(replays(), r1, "the scheduler of new memory replayed");
            replayed += r;
            assert_eq!(fa, fb, "reverse={reverse} step {step} (replayed: {r})");
            assert_eq!(got, want, "reverse={reverse} step {step} (replayed: {r})");
            // SAFETY: live schedulers; their graphs are reset away before the memory is reused.
            unsafe {
                ggml_backend_sched_reset(a);
                ggml_backend_sched_reset(b);
            }
        }
        eprintln!("parallel lockstep reverse={reverse}: {replayed} of 11 steps replayed");
        assert!(replayed >= 8, "replayed {replayed} of 11 steps");
        // SAFETY: made above.
        unsafe {
            ggml_backend_sched_free(a);
            ggml_backend_sched_free(b);
        }
    }
}

/// A measure graph reserved and then allocated itself, the same object, not rebuilt (stock
/// leaves the reserved graph's sources pointing at the split's copies, which its next split
/// frees: the graph then reads freed headers). Ours gives the graph its own sources back after
/// a reserve, so the allocation that follows is the one a fresh graph gets, with copies,
/// pipeline copies and a reordering `graph_optimize`.
#[test]
fn reserved_graph_allocated_itself() {
    let _l = serial();
    REVERSE_OPT.store(true, Ordering::SeqCst);
    let f = four_scaled_inputs;
    let user = [(0, 0), (1, 0), (4, 1), (6, 0)];
    for parallel in [false, true] {
        for size_only in [false, true] {
            let mut env = Env::new(false);
            env.parallel = parallel;
            let want = oracle(&env, &f, &user);
            let sched = env.sched();
            let mut arena = Vec::new();
            let g = build(&mut arena, &f);
            // SAFETY: live scheduler, graph and tensors throughout.
            unsafe {
                let place = || {
                    for &(w, b) in &user {
                        ggml_backend_sched_set_tensor_backend(sched, g.watch[w], env.backends[b]);
                    }
                };
                place();
                let sources: Vec<_> = (0..sys::ggml_graph_n_nodes(g.graph))
                    .map(|i| (*sys::ggml_graph_node(g.graph, i)).src)
                    .collect();
                if size_only {
                    let mut sizes = [0usize; 2];
                    ggml_backend_sched_reserve_size(sched, g.graph, sizes.as_mut_ptr());
                } else {
                    assert!(ggml_backend_sched_reserve(sched, g.graph));
                }
                let mut after: Vec<_> = (0..sys::ggml_graph_n_nodes(g.graph))
                    .map(|i| (*sys::ggml_graph_node(g.graph, i)).src)
                    .collect();
                // `graph_optimize` may have reordered the nodes; the sources are per node.
                let mut before = sources.clone();
                before.sort_unstable();
                after.sort_unstable();
                assert_eq!(
                    after, before,
                    "parallel {parallel}, size only {size_only}: sources"
                );
                ggml_backend_sched_reset(sched);
                place();
                let got = run(&env, sched, &g, false).expect("allocation");
                assert_eq!(got, want, "parallel {parallel}, size only {size_only}");
                ggml_backend_sched_free(sched);
            }
        }
    }
    REVERSE_OPT.store(false, Ordering::SeqCst);
}

// ---- pipeline copies met out of turn ----------------------------------------------------------

/// Pipeline copies with an irregular current copy: `ggml_backend_sched_synchronize` after a
/// reset sends the next graph back to copy 0, so the replays meet the copies out of turn.
/// Lockstep against a scheduler given new memory each time, as above.
#[test]
fn parallel_replays_with_irregular_copies() {
    let _l = serial();
    let f = parallel_graph;
    let syncs = [
        false, false, false, false, true, false, true, true, false, false, false, true, false,
        false, false, false, false, true, false, true,
    ];
    for reverse in [false, true] {
        REVERSE_OPT.store(reverse, Ordering::SeqCst);
        let mut env = Env::new(false);
        env.parallel = true;
        let user = [(0, 0), (1, 0), (4, 1), (6, 0), (7, 1)];
        let (a, b) = (env.sched(), env.sched());
        let mut arena = Vec::new();
        let mut b_arenas: Vec<Vec<u8>> = Vec::new();
        let mut replayed = 0;
        for (step, &sync) in syncs.iter().enumerate() {
            if sync {
                // SAFETY: live schedulers, reset (nothing allocated).
                unsafe {
                    ggml_backend_sched_synchronize(a);
                    ggml_backend_sched_synchronize(b);
                }
            }
            let (ga, gb) = (build(&mut arena, &f), {
                b_arenas.push(Vec::new());
                build(b_arenas.last_mut().unwrap(), &f)
            });
            for (s, g) in [(a, &ga), (b, &gb)] {
                for &(w, be) in &user {
                    // SAFETY: live scheduler and tensor.
                    unsafe {
                        ggml_backend_sched_set_tensor_backend(s, g.watch[w], env.backends[be])
                    };
                }
            }
            let r0 = replays();
            let got = run(&env, a, &ga, false).expect("allocation");
            let fa = fingerprint(&env, a, &ga);
            let r = replays() - r0;
            let want = run(&env, b, &gb, false).expect("allocation");
            let fb = fingerprint(&env, b, &gb);
            replayed += r;
            assert_eq!(fa, fb, "reverse={reverse} step {step} (replayed: {r})");
            assert_eq!(got, want, "reverse={reverse} step {step} (replayed: {r})");
            // SAFETY: live schedulers.
            unsafe {
                ggml_backend_sched_reset(a);
                ggml_backend_sched_reset(b);
            }
        }
        eprintln!("irregular copies reverse={reverse}: {replayed} replayed");
        assert!(replayed >= 10);
        // SAFETY: made above.
        unsafe {
            ggml_backend_sched_free(a);
            ggml_backend_sched_free(b);
        }
    }
}
