//! A queued input copy must run before its source is overwritten (`src/sched/compute.rs`,
//! `SplitWaits`). TESTA here is a device whose work waits in a queue until `synchronize` (or
//! an event's `synchronize`), like a GPU that has not got to it yet, and whose
//! `cpy_tensor_async` accepts a source in host memory and reads it only when the queue runs
//! the copy, as ggml-vulkan's does from a pinned host buffer. TESTCPU computes at once.
//!
//! The graph: user inputs `x`, `y`, `z` (on TESTCPU), `w = x + x` on TESTCPU, then on TESTA
//! `v = w + y`, `out = v + z`. TESTA's split copies `w` (queued: TESTA reads it later from
//! TESTCPU's compute buffer), then `y` and `z` (user inputs, copied at once). Three tokens on
//! one graph, as llama.cpp decodes when it reuses its graph: set the inputs, compute, queue a
//! read of `out`, no `synchronize` until the end; the next token's TESTCPU split rewrites `w`.
//! With stock's waits (one `synchronize` of TESTA before each input) the copy of `w` runs at
//! `y`'s wait. The "last" graph (`v = w + w`, `out = v + v`) has `w` as the split's only input:
//! no later wait runs the copy, and stock's waits give token 0 the `w` of token 1.
//!
//! One test function, as the wait mode is read from the environment when a scheduler is made.

use std::os::raw::c_int;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use ggml_base::buffer::*;
use ggml_base::sched::*;
use ggml_base::tensor::*;
use ggml_sys as sys;
use ggml_sys::{ggml_backend_t, ggml_cgraph, ggml_tensor};

#[path = "common/devices.rs"]
mod devices;
use devices::*;

/// One piece of TESTA's queued work: copy `n` bytes, or add `n` floats.
#[derive(Clone, Copy)]
enum Op {
    Copy {
        dst: usize,
        src: usize,
        n: usize,
    },
    Add {
        dst: usize,
        a: usize,
        b: usize,
        n: usize,
    },
}

/// TESTA's queue: every op queued so far, and how many of them have run.
static QUEUE: Mutex<(Vec<Op>, usize)> = Mutex::new((Vec::new(), 0));
/// TESTA's `synchronize` calls.
static SYNCS_A: AtomicUsize = AtomicUsize::new(0);
/// Copies TESTA accepted to queue.
static QUEUED_COPIES: AtomicUsize = AtomicUsize::new(0);

fn push(op: Op) {
    QUEUE.lock().unwrap().0.push(op);
}

/// Runs TESTA's queued ops up to (not including) position `upto`.
fn run_to(upto: usize) {
    let mut q = QUEUE.lock().unwrap();
    let (ops, done) = &mut *q;
    for op in &ops[*done..upto.max(*done)] {
        // SAFETY: addresses of live, allocated host tensors and of the test's result rows,
        // all alive until the test's final `synchronize` runs the queue.
        unsafe {
            match *op {
                Op::Copy { dst, src, n } => {
                    std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, n)
                }
                Op::Add { dst, a, b, n } => {
                    let (a, b) = (a as *const f32, b as *const f32);
                    for k in 0..n {
                        *(dst as *mut f32).add(k) = *a.add(k) + *b.add(k);
                    }
                }
            }
        }
    }
    *done = (*done).max(upto);
}

fn queue_len() -> usize {
    QUEUE.lock().unwrap().0.len()
}

unsafe extern "C" fn a_sync(_: ggml_backend_t) {
    SYNCS_A.fetch_add(1, Ordering::SeqCst);
    run_to(queue_len());
}

unsafe extern "C" fn a_compute(_: ggml_backend_t, g: *mut ggml_cgraph) -> sys::ggml_status {
    // SAFETY: a live graph of allocated, contiguous F32 host tensors (the test's own).
    let Some(adds) = (unsafe { adds(g) }) else {
        return sys::GGML_STATUS_FAILED;
    };
    for add in adds {
        push(Op::Add {
            dst: add.dst as usize,
            a: add.a as usize,
            b: add.b as usize,
            n: add.n,
        });
    }
    sys::GGML_STATUS_SUCCESS
}

/// TESTCPU computes at once, whatever TESTA still has queued.
unsafe extern "C" fn cpu_compute(_: ggml_backend_t, g: *mut ggml_cgraph) -> sys::ggml_status {
    // SAFETY: a live graph of allocated, contiguous F32 host tensors (the test's own).
    let Some(adds) = (unsafe { adds(g) }) else {
        return sys::GGML_STATUS_FAILED;
    };
    for add in &adds {
        // SAFETY: as above.
        unsafe { run_add(add) };
    }
    sys::GGML_STATUS_SUCCESS
}

unsafe extern "C" fn a_get_async(
    _: ggml_backend_t,
    t: *const ggml_tensor,
    data: *mut std::ffi::c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: an allocated tensor of the test (its data is host memory).
    let src = unsafe { (*t).data } as usize + offset;
    push(Op::Copy {
        dst: data as usize,
        src,
        n: size,
    });
}

/// Accepts a copy into TESTA's buffer type from any host buffer, and queues it.
unsafe extern "C" fn a_cpy_async(
    _: ggml_backend_t,
    _: ggml_backend_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    // SAFETY: live, allocated tensors (the scheduler's split input and its copy).
    unsafe {
        if !ggml_backend_buffer_is_host((*src).buffer) || (*(*dst).buffer).buft != &raw mut BUFT_A {
            return false;
        }
        QUEUED_COPIES.fetch_add(1, Ordering::SeqCst);
        push(Op::Copy {
            dst: (*dst).data as usize,
            src: (*src).data as usize,
            n: sys::ggml_nbytes(src),
        });
    }
    true
}

/// TESTA's events: the queue position at their last record.
unsafe extern "C" fn event_new(dev: sys::ggml_backend_dev_t) -> sys::ggml_backend_event_t {
    Box::into_raw(Box::new(sys::ggml_backend_event {
        device: dev,
        context: Box::into_raw(Box::new(0usize)).cast(),
    }))
}

unsafe extern "C" fn event_free(_: sys::ggml_backend_dev_t, e: sys::ggml_backend_event_t) {
    // SAFETY: made by Box in `event_new`, with a boxed position as context.
    unsafe {
        drop(Box::from_raw((*e).context.cast::<usize>()));
        drop(Box::from_raw(e));
    }
}

unsafe extern "C" fn event_synchronize(_: sys::ggml_backend_dev_t, e: sys::ggml_backend_event_t) {
    // SAFETY: an event made by `event_new`.
    run_to(unsafe { *(*e).context.cast::<usize>() });
}

unsafe extern "C" fn event_record(_: ggml_backend_t, e: sys::ggml_backend_event_t) {
    // SAFETY: an event made by `event_new`.
    unsafe { *(*e).context.cast::<usize>() = queue_len() };
}

/// TESTA's queue runs in order: a queue wait orders nothing more.
unsafe extern "C" fn event_wait(_: ggml_backend_t, _: sys::ggml_backend_event_t) {}

fn backend_a() -> ggml_backend_t {
    new_backend(
        &raw mut DEV_A,
        sys::ggml_backend_i {
            get_name: Some(backend_name),
            free: Some(backend_free),
            synchronize: Some(a_sync),
            graph_compute: Some(a_compute),
            get_tensor_async: Some(a_get_async),
            cpy_tensor_async: Some(a_cpy_async),
            event_record: Some(event_record),
            event_wait: Some(event_wait),
            ..Default::default()
        },
    )
}

fn backend_cpu() -> ggml_backend_t {
    new_backend(
        &raw mut DEV_CPU,
        sys::ggml_backend_i {
            get_name: Some(backend_name),
            free: Some(backend_free),
            synchronize: Some(backend_sync),
            graph_compute: Some(cpu_compute),
            ..Default::default()
        },
    )
}

const N: i64 = 8;
const TOKENS: usize = 3;

/// What one run saw: wrong values of `out` over all tokens, and TESTA's `synchronize` calls
/// inside each token's `graph_compute_async`.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    wrong: usize,
    syncs_a: Vec<usize>,
}

/// Runs [`TOKENS`] tokens of the module doc's graph (`last`: the "last" graph) on a new
/// scheduler (`parallel`: with pipeline copies and TESTA's events) with wait mode `mode`.
fn run(mode: &str, last: bool, parallel: bool) -> Seen {
    std::env::set_var("GGML_SCHED_INPUT_WAITS", mode);
    *QUEUE.lock().unwrap() = (Vec::new(), 0);
    // SAFETY: the exported API with valid arguments throughout; the tensors live in `ctx`,
    // freed after the scheduler; the result rows outlive the final synchronize.
    unsafe {
        let mut backends = [backend_a(), backend_cpu()];
        let sched = ggml_backend_sched_new(
            backends.as_mut_ptr(),
            null_mut(),
            backends.len() as c_int,
            64,
            parallel,
            false,
        );
        assert!(!sched.is_null());
        let ctx = sys::ggml_init(sys::ggml_init_params {
            mem_size: 16 * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead(),
            mem_buffer: null_mut(),
            no_alloc: true,
        });
        let input = || {
            let t = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, N);
            sys::ggml_set_input(t);
            t
        };
        let (x, y, z) = (input(), input(), input());
        let w = sys::ggml_add(ctx, x, x);
        let (v, out) = if last {
            let v = sys::ggml_add(ctx, w, w);
            (v, sys::ggml_add(ctx, v, v))
        } else {
            let v = sys::ggml_add(ctx, w, y);
            (v, sys::ggml_add(ctx, v, z))
        };
        sys::ggml_set_output(out);
        let graph = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(graph, out);
        ggml_backend_sched_reset(sched);
        ggml_backend_sched_set_tensor_backend(sched, w, backends[1]);
        ggml_backend_sched_set_tensor_backend(sched, v, backends[0]);
        ggml_backend_sched_set_tensor_backend(sched, out, backends[0]);
        assert!(ggml_backend_sched_alloc_graph(sched, graph));
        assert_eq!(ggml_backend_sched_get_n_splits(sched), 2);

        let mut results = [[0f32; N as usize]; TOKENS];
        let mut syncs_a = Vec::new();
        for (t, row) in results.iter_mut().enumerate() {
            let set = |tensor: *mut ggml_tensor, f: &dyn Fn(usize) -> f32| {
                let v: Vec<f32> = (0..N as usize).map(f).collect();
                ggml_backend_tensor_set(tensor, v.as_ptr().cast(), 0, v.len() * 4);
            };
            set(x, &|k| 1.0 + k as f32 + 1000.0 * t as f32);
            if !last {
                set(y, &|_| 100.0 + 10.0 * t as f32);
                set(z, &|_| 10_000.0 + 100_000.0 * t as f32);
            }
            let before = SYNCS_A.load(Ordering::SeqCst);
            let st = ggml_backend_sched_graph_compute_async(sched, graph);
            assert_eq!(st, sys::GGML_STATUS_SUCCESS);
            syncs_a.push(SYNCS_A.load(Ordering::SeqCst) - before);
            ggml_backend_tensor_get_async(
                backends[0],
                out,
                row.as_mut_ptr().cast(),
                0,
                N as usize * 4,
            );
        }
        ggml_backend_sched_synchronize(sched);
        // Whatever a mode left queued has run now.
        run_to(queue_len());
        let mut wrong = 0;
        for (t, row) in results.iter().enumerate() {
            for (k, &got) in row.iter().enumerate() {
                let x = 1.0 + k as f32 + 1000.0 * t as f32;
                let want = if last {
                    8.0 * x
                } else {
                    2.0 * x + 100.0 + 10.0 * t as f32 + 10_000.0 + 100_000.0 * t as f32
                };
                wrong += usize::from(got != want);
            }
        }
        ggml_backend_sched_free(sched);
        for b in backends {
            backend_free(b);
        }
        sys::ggml_free(ctx);
        std::env::remove_var("GGML_SCHED_INPUT_WAITS");
        Seen { wrong, syncs_a }
    }
}

#[test]
fn a_queued_copy_runs_before_its_source_is_overwritten() {
    // Serial (no events), `w` then the user inputs: stock's waits (`input`) finish the copy
    // of `w` at `y`'s wait, three waits a token; ours two (before `w`, and before `y` as the
    // copy was queued; not before `z`). Which of ours runs the copy, the wait before `y` or
    // the finish before the compute, this graph cannot tell, as both come before the next
    // token: the unit test `a_queued_copy_is_finished_by_the_next_wait` in compute.rs checks
    // the wait after a queued copy on its own.
    let stock = run("input", false, false);
    assert_eq!(
        stock,
        Seen {
            wrong: 0,
            syncs_a: vec![3; TOKENS]
        }
    );
    let ours = run("split", false, false);
    assert_eq!(
        ours,
        Seen {
            wrong: 0,
            syncs_a: vec![2; TOKENS]
        }
    );
    assert!(
        QUEUED_COPIES.load(Ordering::SeqCst) >= 2 * TOKENS,
        "the copies were queued"
    );

    // `w` the split's only input: stock's one wait comes before the copy, nothing finishes
    // it, and the next token's TESTCPU split overwrites `w` first: every token but the last
    // reads the next token's `w` (stock and ours differ here on purpose). Ours finishes a
    // queued copy from host memory before queuing the split's compute.
    let stock = run("input", true, false);
    assert_eq!(
        stock.wrong,
        (TOKENS - 1) * N as usize,
        "stock's gap, as measured"
    );
    assert_eq!(stock.syncs_a, vec![1; TOKENS]);
    let ours = run("split", true, false);
    assert_eq!(
        ours,
        Seen {
            wrong: 0,
            syncs_a: vec![2; TOKENS]
        }
    );

    // With pipeline copies and TESTA's events the waits are on events, which do not finish
    // a copy queued after their record: stock gets every token but the last wrong in both
    // graphs, with no `synchronize` of TESTA at all; ours finishes the copy from host memory
    // with one, before the compute.
    for last in [false, true] {
        // SAFETY: this test binary's own copy of the device, changed while no scheduler is
        // alive; TESTCPU keeps no events.
        unsafe {
            let dev = &raw mut DEV_A;
            (*dev).iface.event_new = Some(event_new);
            (*dev).iface.event_free = Some(event_free);
            (*dev).iface.event_synchronize = Some(event_synchronize);
        }
        let stock = run("input", last, true);
        assert_eq!(
            stock,
            Seen {
                wrong: (TOKENS - 1) * N as usize,
                syncs_a: vec![0; TOKENS]
            },
            "stock, pipeline, last {last}"
        );
        let ours = run("split", last, true);
        assert_eq!(
            ours,
            Seen {
                wrong: 0,
                syncs_a: vec![1; TOKENS]
            },
            "ours, pipeline, last {last}"
        );
    }
}
