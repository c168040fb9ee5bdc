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
use std::sync::atomic::Ordering;

use ggml_base::sched::*;
use ggml_base::tensor::*;
use ggml_sys as sys;
use ggml_sys::ggml_tensor;

#[path = "common/devices.rs"]
mod devices;
use devices::*;
#[path = "common/queue.rs"]
mod queue;
use queue::*;

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
        // SAFETY: no scheduler is alive, and this test binary's one test runs alone; TESTCPU
        // keeps no events.
        unsafe { events_on_a(true) };
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
