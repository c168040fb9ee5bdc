//! When a plan made for one graph may place another: a graph of the same plan key and counts
//! that fits the plan size for size must still be refused where the plan would be wrong for it.
//! Each case first runs the second graph on a fresh scheduler (the oracle), then after the
//! first graph's plan. Found by a review (2026-12-06); stock's gallocr reuses a plan on counts
//! and sizes alone, so it has the first and third case too (the third ends in its range check
//! of `ggml_backend_tensor_alloc`, which our allocator leaves to its fit check).
//!
//! - an in-place reuse whose source no longer has the node's layout (a broadcast source);
//! - an allocation dependency (`add_alloc_dep`) that keeps another tensor alive;
//! - a leaf that no node reads and that grew;
//! - and one that holds: a transposed view, whose source's memory no node reuses.
//!
//! The backend here computes like ggml-cpu on one thread: element by element, in order,
//! through each tensor's strides, straight from the sources into the destination (no
//! temporary copy), so a destination that overlaps a source it has not finished reading
//! gives wrong values, as it would on a real backend.

use std::ptr::null_mut;
use std::sync::Mutex;

use ggml_base::sched::*;
use ggml_base::tensor::*;
use ggml_sys as sys;
use ggml_sys::{ggml_backend_t, ggml_cgraph, ggml_tensor};

#[path = "common/tensors.rs"]
mod tensors;
use tensors::ctx_of;
#[path = "common/devices.rs"]
mod devices;
use devices::*;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads element (i0, i1, i2, i3) of an F32 tensor through its strides.
unsafe fn at(t: *const ggml_tensor, i: [i64; 4]) -> *mut f32 {
    // SAFETY: the caller's contract: an allocated host tensor and indices within its shape.
    unsafe {
        let t = &*t;
        let off = i[0] as usize * t.nb[0]
            + i[1] as usize * t.nb[1]
            + i[2] as usize * t.nb[2]
            + i[3] as usize * t.nb[3];
        t.data.cast::<u8>().add(off).cast()
    }
}

/// Computes ADD, MUL, SCALE and CPY of F32 tensors in place order, through strides, with
/// src1 broadcast as ggml does.
unsafe extern "C" fn strided_compute(_: ggml_backend_t, g: *mut ggml_cgraph) -> sys::ggml_status {
    // SAFETY: a live graph of allocated host tensors.
    unsafe {
        let g = &*g;
        for n in 0..g.n_nodes as usize {
            let t = *g.nodes.add(n);
            let op = (*t).op;
            match op {
                sys::GGML_OP_NONE
                | sys::GGML_OP_VIEW
                | sys::GGML_OP_RESHAPE
                | sys::GGML_OP_PERMUTE
                | sys::GGML_OP_TRANSPOSE => continue,
                sys::GGML_OP_ADD | sys::GGML_OP_MUL | sys::GGML_OP_SCALE | sys::GGML_OP_CPY => {}
                _ => return sys::GGML_STATUS_FAILED,
            }
            let ne = (*t).ne;
            let a = (*t).src[0];
            let b = (*t).src[1];
            for i3 in 0..ne[3] {
                for i2 in 0..ne[2] {
                    for i1 in 0..ne[1] {
                        for i0 in 0..ne[0] {
                            let i = [i0, i1, i2, i3];
                            let out = at(t, i);
                            let x = *at(a, i);
                            let v = match op {
                                sys::GGML_OP_ADD | sys::GGML_OP_MUL => {
                                    let bn = (*b).ne;
                                    let j = [i0 % bn[0], i1 % bn[1], i2 % bn[2], i3 % bn[3]];
                                    let y = *at(b, j);
                                    if op == sys::GGML_OP_ADD {
                                        x + y
                                    } else {
                                        x * y
                                    }
                                }
                                sys::GGML_OP_SCALE => {
                                    let s = f32::from_bits((*t).op_params[0] as u32);
                                    let bias = f32::from_bits((*t).op_params[1] as u32);
                                    x * s + bias
                                }
                                _ => x,
                            };
                            *out = v;
                        }
                    }
                }
            }
        }
    }
    sys::GGML_STATUS_SUCCESS
}

fn cpu_backend() -> ggml_backend_t {
    new_backend(
        &raw mut DEV_CPU,
        sys::ggml_backend_i {
            get_name: Some(backend_name),
            free: Some(backend_free),
            synchronize: Some(backend_sync),
            graph_compute: Some(strided_compute),
            ..Default::default()
        },
    )
}

fn input_2d(ctx: *mut sys::ggml_context, n0: i64, n1: i64) -> *mut ggml_tensor {
    // SAFETY: a live no_alloc context.
    unsafe {
        let t = sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_F32, n0, n1);
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

fn set(t: *mut ggml_tensor, v: &[f32]) {
    // SAFETY: an allocated F32 tensor of v.len() elements.
    unsafe {
        assert_eq!(sys::ggml_nelements(t) as usize, v.len());
        assert!(!(*t).data.is_null());
        ggml_backend_tensor_set(t, v.as_ptr().cast(), 0, v.len() * 4);
    }
}

fn get(t: *mut ggml_tensor) -> Vec<f32> {
    // SAFETY: an allocated contiguous F32 tensor.
    unsafe {
        let n = sys::ggml_nelements(t) as usize;
        let mut v = vec![0f32; n];
        ggml_backend_tensor_get(t, v.as_mut_ptr().cast(), 0, n * 4);
        v
    }
}

/// The check every case makes: the second graph on a fresh scheduler (the oracle), then the
/// first and the second graph on one scheduler over `backend`, whose second allocation meets
/// the first graph's plan. `run(sched, arg)` builds, allocates and computes one graph and
/// returns each output's values beside the expected ones; `what` names the three runs in
/// failure messages. Frees `backend`.
fn second_after_first<A: Copy>(
    backend: ggml_backend_t,
    run: impl Fn(sys::ggml_backend_sched_t, A) -> Vec<(Vec<f32>, Vec<f32>)>,
    first: A,
    second: A,
    what: [&str; 3],
) {
    let mut be = [backend];
    // SAFETY: one live CPU-type backend, freed once at the end.
    unsafe {
        let fresh = ggml_backend_sched_new(be.as_mut_ptr(), null_mut(), 1, 64, false, false);
        for (got, want) in run(fresh, second) {
            assert_eq!(got, want, "{}", what[0]);
        }
        ggml_backend_sched_free(fresh);

        let sched = ggml_backend_sched_new(be.as_mut_ptr(), null_mut(), 1, 64, false, false);
        for (got, want) in run(sched, first) {
            assert_eq!(got, want, "{}", what[1]);
        }
        for (got, want) in run(sched, second) {
            assert_eq!(got, want, "{}", what[2]);
        }
        ggml_backend_sched_free(sched);
        backend_free(be[0]);
    }
}

// ---- 1. the plan key leaves strides out ------------------------------------------------------

/// `x = a + b` (4x4), `p = permute(x, axes)`, `out = p + c`. With the identity permutation `p`
/// has `out`'s layout and gallocr lets `out` take `x`'s memory (ADD runs in place). With the
/// transposition the layouts differ and it must not: `out[i, j]` is written at `x[i, j]`'s
/// place while `x[j, i]` is still to be read.
struct PermGraph {
    ctx: *mut sys::ggml_context,
    g: *mut ggml_cgraph,
    a: *mut ggml_tensor,
    b: *mut ggml_tensor,
    c: *mut ggml_tensor,
    out: *mut ggml_tensor,
}
impl PermGraph {
    fn new(transposed: bool) -> PermGraph {
        let ctx = ctx_of(16);
        // SAFETY: a live context.
        unsafe {
            let a = input_2d(ctx, 4, 4);
            let b = input_2d(ctx, 4, 4);
            let c = input_2d(ctx, 4, 4);
            let x = sys::ggml_add(ctx, a, b);
            let p = if transposed {
                sys::ggml_permute(ctx, x, 1, 0, 2, 3)
            } else {
                sys::ggml_permute(ctx, x, 0, 1, 2, 3)
            };
            let out = sys::ggml_add(ctx, p, c);
            let g = finish(ctx, &[out]);
            PermGraph {
                ctx,
                g,
                a,
                b,
                c,
                out,
            }
        }
    }
    /// Sets the inputs and returns the expected output.
    fn inputs(&self, transposed: bool) -> Vec<f32> {
        let av: Vec<f32> = (0..16).map(|k| k as f32).collect();
        let bv: Vec<f32> = (0..16).map(|k| 100.0 * k as f32).collect();
        let cv: Vec<f32> = (0..16).map(|k| 0.5 + k as f32 / 8.0).collect();
        set(self.a, &av);
        set(self.b, &bv);
        set(self.c, &cv);
        let mut want = vec![0f32; 16];
        for i1 in 0..4 {
            for i0 in 0..4 {
                // p[i0, i1] = x[i1, i0] when transposed.
                let src = if transposed { i0 * 4 + i1 } else { i1 * 4 + i0 };
                want[i1 * 4 + i0] = av[src] + bv[src] + cv[i1 * 4 + i0];
            }
        }
        want
    }
}
impl Drop for PermGraph {
    fn drop(&mut self) {
        // SAFETY: made in new().
        unsafe { sys::ggml_free(self.ctx) };
    }
}

fn run_perm(sched: sys::ggml_backend_sched_t, transposed: bool) -> (Vec<f32>, Vec<f32>) {
    let g = PermGraph::new(transposed);
    // SAFETY: live scheduler and graph.
    unsafe {
        assert!(ggml_backend_sched_alloc_graph(sched, g.g));
        let want = g.inputs(transposed);
        assert_eq!(
            ggml_backend_sched_graph_compute(sched, g.g),
            sys::GGML_STATUS_SUCCESS
        );
        let got = get(g.out);
        ggml_backend_sched_reset(sched);
        (got, want)
    }
}

/// A fresh scheduler gets the transposed graph right (the oracle); one that planned the
/// identity-permutation graph before must too, though the plan key (op, type, flags, storage,
/// who reads whom) is the same for both graphs.
#[test]
fn plan_with_inplace_reuse_not_applied_to_transposed_view() {
    let _l = serial();
    second_after_first(
        cpu_backend(),
        |sched, transposed| vec![run_perm(sched, transposed)],
        false,
        true,
        [
            "a fresh scheduler, transposed graph",
            "identity permutation",
            "transposed graph after the identity graph's plan (same plan key)",
        ],
    );
}

/// `b = scale(in_b, 1)`, `out = a + b`, `y = 3 a` (so `a` has two readers and only `b` can give
/// `out` its memory). With `in_b` 4x4, `b` has `out`'s layout and `out` runs in place over
/// `b`; with `in_b` 4x1 (broadcast over the rows) it must not: row 1 of `out` reads `b`'s row
/// 0 after row 0 of `out` has overwritten it. The two graphs have the same plan key (sizes and
/// layouts are not in it) and the second fits the first's plan size for size.
struct BcastGraph {
    ctx: *mut sys::ggml_context,
    g: *mut ggml_cgraph,
    a: *mut ggml_tensor,
    in_b: *mut ggml_tensor,
    out: *mut ggml_tensor,
    y: *mut ggml_tensor,
    rows_b: i64,
}
impl BcastGraph {
    fn new(rows_b: i64) -> BcastGraph {
        let ctx = ctx_of(16);
        // SAFETY: a live context.
        unsafe {
            let a = input_2d(ctx, 4, 4);
            let in_b = input_2d(ctx, 4, rows_b);
            let b = sys::ggml_scale(ctx, in_b, 1.0);
            let out = sys::ggml_add(ctx, a, b);
            let y = sys::ggml_scale(ctx, a, 3.0);
            let g = finish(ctx, &[out, y]);
            BcastGraph {
                ctx,
                g,
                a,
                in_b,
                out,
                y,
                rows_b,
            }
        }
    }
    /// Sets the inputs; returns the expected `out` and `y`.
    fn inputs(&self) -> (Vec<f32>, Vec<f32>) {
        let av: Vec<f32> = (0..16).map(|k| k as f32).collect();
        let n_b = 4 * self.rows_b as usize;
        let bv: Vec<f32> = (0..n_b).map(|k| 1000.0 * (k + 1) as f32).collect();
        set(self.a, &av);
        set(self.in_b, &bv);
        let out = (0..16).map(|k| av[k] + bv[k % n_b]).collect();
        let y = av.iter().map(|v| v * 3.0).collect();
        (out, y)
    }
}
impl Drop for BcastGraph {
    fn drop(&mut self) {
        // SAFETY: made in new().
        unsafe { sys::ggml_free(self.ctx) };
    }
}

fn run_bcast(sched: sys::ggml_backend_sched_t, rows_b: i64) -> [(Vec<f32>, Vec<f32>); 2] {
    let g = BcastGraph::new(rows_b);
    // SAFETY: live scheduler and graph.
    unsafe {
        assert!(ggml_backend_sched_alloc_graph(sched, g.g));
        let (want_out, want_y) = g.inputs();
        assert_eq!(
            ggml_backend_sched_graph_compute(sched, g.g),
            sys::GGML_STATUS_SUCCESS
        );
        let got = [(get(g.out), want_out), (get(g.y), want_y)];
        ggml_backend_sched_reset(sched);
        got
    }
}

#[test]
fn plan_with_inplace_reuse_not_applied_to_broadcast_source() {
    let _l = serial();
    second_after_first(
        cpu_backend(),
        |sched, rows_b| run_bcast(sched, rows_b).to_vec(),
        4,
        1,
        [
            "a fresh scheduler, broadcast graph",
            "b of out's shape (out in place over b)",
            "broadcast b after the plan of the same-shape graph (same plan key)",
        ],
    );
}

// ---- 2. the plan key leaves out which tensor a backend's allocation dependency keeps ---------

/// A backend whose last node `N` (an ADD) also reads, as a fused kernel would, node number
/// `N.op_params[0]` of its split, and says so through `graph_optimize`'s `add_alloc_dep` (keep
/// that tensor allocated until `N` has run). Computes as [`strided_compute`], then adds the
/// hidden source into `N`.
unsafe extern "C" fn dep_optimize(
    _: ggml_backend_t,
    g: *mut ggml_cgraph,
    params: *mut sys::ggml_backend_graph_optimize_params,
) {
    // SAFETY: a live split graph and the scheduler's params.
    unsafe {
        let g = &*g;
        let last = *g.nodes.add(g.n_nodes as usize - 1);
        let k = (*last).op_params[0] as usize;
        let hidden = *g.nodes.add(k);
        let p = &*params;
        (p.add_alloc_dep.unwrap())(p.user_data, hidden, last);
    }
}

unsafe extern "C" fn dep_compute(be: ggml_backend_t, g: *mut ggml_cgraph) -> sys::ggml_status {
    // SAFETY: a live graph of allocated host tensors.
    unsafe {
        let st = strided_compute(be, g);
        if st != sys::GGML_STATUS_SUCCESS {
            return st;
        }
        let g = &*g;
        let last = *g.nodes.add(g.n_nodes as usize - 1);
        let hidden = *g.nodes.add((*last).op_params[0] as usize);
        let n = sys::ggml_nelements(last) as usize;
        let out = (*last).data.cast::<f32>();
        let h = (*hidden).data.cast::<f32>();
        for i in 0..n {
            *out.add(i) += *h.add(i);
        }
    }
    sys::GGML_STATUS_SUCCESS
}

fn dep_backend() -> ggml_backend_t {
    new_backend(
        &raw mut DEV_CPU,
        sys::ggml_backend_i {
            get_name: Some(backend_name),
            free: Some(backend_free),
            synchronize: Some(backend_sync),
            graph_compute: Some(dep_compute),
            graph_optimize: Some(dep_optimize),
            ..Default::default()
        },
    )
}

/// `a` (input, output too so it is never freed), `t0 = a`, `t1 = 2a`, `m = t0 + t1` (in place
/// over `t0`), `q = m / 2` (`m` has two readers, so `q` takes fresh memory: `t1`'s, freed
/// after `m`, unless `t1` is kept), `N = q + m (+ hidden)`. `hidden` is node `k` of the split:
/// 2 (`m`, alive anyway) or 1 (`t1`, which the dependency keeps alive).
fn run_dep(sched: sys::ggml_backend_sched_t, k: i32) -> (Vec<f32>, Vec<f32>) {
    let ctx = ctx_of(16);
    // SAFETY: a live context and scheduler.
    unsafe {
        let a = input_2d(ctx, 16, 1);
        sys::ggml_set_output(a);
        let t0 = sys::ggml_scale(ctx, a, 1.0);
        let t1 = sys::ggml_scale(ctx, a, 2.0);
        let m = sys::ggml_add(ctx, t0, t1);
        let q = sys::ggml_scale(ctx, m, 0.5);
        let n = sys::ggml_add(ctx, q, m);
        (*n).op_params[0] = k;
        let g = finish(ctx, &[n]);
        assert_eq!((*g).n_nodes, 5);
        assert_eq!(*(*g).nodes.add(1), t1);
        assert_eq!(*(*g).nodes.add(2), m);
        assert!(ggml_backend_sched_alloc_graph(sched, g));
        let av: Vec<f32> = (0..16).map(|i| i as f32 + 1.0).collect();
        set(a, &av);
        assert_eq!(
            ggml_backend_sched_graph_compute(sched, g),
            sys::GGML_STATUS_SUCCESS
        );
        let got = get(n);
        let want = av
            .iter()
            .map(|&x| {
                let m = 3.0 * x;
                let hidden = if k == 2 { m } else { 2.0 * x };
                m * 0.5 + m + hidden
            })
            .collect();
        ggml_backend_sched_reset(sched);
        sys::ggml_free(ctx);
        (got, want)
    }
}

#[test]
fn plan_not_reused_when_alloc_dep_keeps_another_tensor() {
    let _l = serial();
    second_after_first(
        dep_backend(),
        |sched, k| vec![run_dep(sched, k)],
        2,
        1,
        [
            "a fresh scheduler keeps t1 for N",
            "N also reads m",
            "N also reads t1, after the plan of the graph where it read m (same plan key)",
        ],
    );
}

// ---- 3. a leaf no node reads is not checked against the plan ----------------------------------

/// `z = 2x` (output) and `y`, an input leaf that is itself an output (`ggml_build_forward_expand`
/// of a tensor without op): no node reads `y`, so gallocr's fit check (nodes and their
/// sources) never looks at it. The second graph's `y` is 4 times the first's, same plan key.
fn run_leaf(sched: sys::ggml_backend_sched_t, ny: i64) -> [(Vec<f32>, Vec<f32>); 2] {
    let ctx = ctx_of(16);
    // SAFETY: a live context and scheduler.
    unsafe {
        let x = input_2d(ctx, 4, 1);
        let y = input_2d(ctx, ny, 1);
        let z = sys::ggml_scale(ctx, x, 2.0);
        let g = finish(ctx, &[z, y]);
        assert_eq!(((*g).n_nodes, (*g).n_leafs), (1, 2));
        assert!(ggml_backend_sched_alloc_graph(sched, g));
        // Checked before anything is written: a tensor placed past its buffer's end would be
        // a heap overflow here, not a failed assertion.
        let range = |t: *mut ggml_tensor| {
            let d = (*t).data as usize;
            (d, d + sys::ggml_nbytes(t))
        };
        let buf = (*y).buffer;
        let base = ggml_base::buffer::ggml_backend_buffer_get_base(buf) as usize;
        let end = base + ggml_base::buffer::ggml_backend_buffer_get_size(buf);
        let (y0, y1) = range(y);
        assert!(
            y0 >= base && y1 <= end,
            "y [{y0:#x}, {y1:#x}) lies outside its buffer [{base:#x}, {end:#x})"
        );
        for (name, t) in [("x", x), ("z", z)] {
            let (t0, t1) = range(t);
            assert!(
                t1 <= y0 || y1 <= t0,
                "y [{y0:#x}, {y1:#x}) overlaps {name} [{t0:#x}, {t1:#x})"
            );
        }
        let xv = vec![1.0, 2.0, 3.0, 4.0];
        let yv: Vec<f32> = (0..ny).map(|i| -(i as f32) - 1.0).collect();
        set(x, &xv);
        set(y, &yv);
        assert_eq!(
            ggml_backend_sched_graph_compute(sched, g),
            sys::GGML_STATUS_SUCCESS
        );
        let got = [(get(z), xv.iter().map(|v| v * 2.0).collect()), (get(y), yv)];
        ggml_backend_sched_reset(sched);
        sys::ggml_free(ctx);
        got
    }
}

#[test]
fn plan_not_reused_when_an_unread_leaf_grows() {
    let _l = serial();
    second_after_first(
        cpu_backend(),
        |sched, ny| run_leaf(sched, ny).to_vec(),
        4,
        16,
        [
            "a fresh scheduler",
            "y of 4",
            "y of 16 after the plan for y of 4 (same plan key)",
        ],
    );
}

// ---- review 2026-12-07: sources outside the graph all hash to position 0 ---------------------

/// A graph built by hand (`ggml_graph_add_node`, no leafs): `n1 = 2 s_a`, `n2 = 3 s_b`,
/// `o = n1 + n2`, where `s_a` and `s_b` are input tensors that are not in the graph (the
/// allocator gives them memory as sources). With `shared`, `s_a` and `s_b` are one tensor `s`
/// (two readers). The plan key maps every source outside the graph to position 0, so both
/// graphs have one key; the first graph's plan lets `n1` take `s_a`'s memory in place (its
/// only reader), which in the second graph is `s`, still to be read by `n2`.
fn run_outside(sched: sys::ggml_backend_sched_t, shared: bool) -> (Vec<f32>, Vec<f32>) {
    let ctx = ctx_of(16);
    // SAFETY: a live context and scheduler.
    unsafe {
        let sa = input_2d(ctx, 8, 1);
        let sb = if shared { sa } else { input_2d(ctx, 8, 1) };
        let n1 = sys::ggml_scale(ctx, sa, 2.0);
        let n2 = sys::ggml_scale(ctx, sb, 3.0);
        let o = sys::ggml_add(ctx, n1, n2);
        sys::ggml_set_output(o);
        let g = sys::ggml_new_graph(ctx);
        sys::ggml_graph_add_node(g, n1);
        sys::ggml_graph_add_node(g, n2);
        sys::ggml_graph_add_node(g, o);
        assert!(ggml_backend_sched_alloc_graph(sched, g));
        let av: Vec<f32> = (0..8).map(|k| 1.0 + k as f32).collect();
        let bv: Vec<f32> = (0..8).map(|k| 100.0 + k as f32).collect();
        set(sa, &av);
        if !shared {
            set(sb, &bv);
        }
        let bv = if shared { av.clone() } else { bv };
        assert_eq!(
            ggml_backend_sched_graph_compute(sched, g),
            sys::GGML_STATUS_SUCCESS
        );
        let want = av.iter().zip(&bv).map(|(a, b)| 2.0 * a + 3.0 * b).collect();
        let got = get(o);
        ggml_backend_sched_reset(sched);
        sys::ggml_free(ctx);
        (got, want)
    }
}

#[test]
fn plan_not_reused_when_an_outside_source_gains_a_reader() {
    let _l = serial();
    second_after_first(
        cpu_backend(),
        |sched, shared| vec![run_outside(sched, shared)],
        false,
        true,
        [
            "a fresh scheduler, one outside source read twice",
            "two outside sources, one reader each",
            "one outside source read twice, after the plan of two (same plan key)",
        ],
    );
}
