//! A split must not read storage that another backend's queued split has still to write,
//! when it reads it without a copy (`src/sched/direct/`). TESTA's work waits in a queue
//! until `synchronize` (`tests/common/queue.rs`), and here TESTA also accepts the CPU buffer
//! type, as HRX accepts host buffer types: it computes into host memory directly, and writes
//! when its queue runs. TESTCPU computes at once and, like ggml-cpu, has no `synchronize`.
//!
//! The graph, as llama.cpp's with its KV cache in host memory (`-nkvo`) on such a device:
//! `cache` is a pre-allocated tensor in a CPU buffer; `x` a user input on TESTA;
//! `w = cache += x` (in place) on TESTA; then `r = cache + x` on TESTCPU, which reads `cache`
//! directly and `x` through a copy (a user input: the copy waits only for TESTCPU). With the
//! write ordered first, `r = 2x`; read before it, `r = x`. Each token sets `cache` to 0 and
//! `x`, computes, and synchronizes (as llama.cpp does before it reads logits).
//!
//! The "reuse" graph (a review's case): TESTA writes in place into a tensor TESTCPU computed,
//! in TESTCPU's compute buffer, and the allocator gives those bytes to a later TESTCPU node:
//! `c = x + x` on TESTCPU, `w = c += x` and `v = w + w` on TESTA (`v = 6x`), then
//! [`NY`] nodes `y = z + z` on TESTCPU (`y = 2z`, `z` a user input on TESTA, copied in).
//!
//! One test function, as the wait mode is read from the environment when a scheduler is made.

use std::os::raw::c_int;
use std::ptr::null_mut;
use std::sync::atomic::Ordering;

use ggml_base::alloc::exports::ggml_backend_alloc_ctx_tensors_from_buft;
use ggml_base::buffer::ggml_backend_buffer_free;
use ggml_base::cpu_buffer::ggml_backend_cpu_buffer_type;
use ggml_base::sched::*;
use ggml_sys as sys;

#[path = "common/devices.rs"]
mod devices;
use devices::*;
#[path = "common/queue.rs"]
mod queue;
use queue::*;
#[path = "common/tensors.rs"]
mod tensors;
use tensors::{ctx_of, f32s, set_f32s};

const N: usize = 8;
const TOKENS: usize = 3;
/// The reuse graph's later TESTCPU nodes.
const NY: usize = 12;

/// TESTA accepts its own buffer type and the CPU's (host memory it computes in directly).
unsafe extern "C" fn a_supports_host(
    d: sys::ggml_backend_dev_t,
    buft: sys::ggml_backend_buffer_type_t,
) -> bool {
    // SAFETY: the device's own callback; the CPU buffer type is static.
    buft == unsafe { dev_buft(d) } || buft == unsafe { ggml_backend_cpu_buffer_type() }
}

/// TESTCPU without `synchronize`, as ggml-cpu: its compute returns finished.
fn backend_cpu_synchronous() -> sys::ggml_backend_t {
    let b = backend_cpu();
    // SAFETY: a backend just made by `backend_cpu`, owned here.
    unsafe { (*b).iface.synchronize = None };
    b
}

/// What one run saw: wrong values of the outputs over all tokens, and TESTA's `synchronize` calls
/// inside each token's `graph_compute_async`.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    wrong: usize,
    syncs_a: Vec<usize>,
}

/// Runs [`TOKENS`] tokens of one of the module doc's graphs (`reuse`: the reuse graph) on a
/// new scheduler (`parallel`: with pipeline copies and TESTA's events) with wait mode `mode`.
fn run(mode: &str, reuse: bool, parallel: bool) -> Seen {
    std::env::set_var("GGML_SCHED_INPUT_WAITS", mode);
    *QUEUE.lock().unwrap() = (Vec::new(), 0);
    let mut backends = [backend_a(), backend_cpu_synchronous()];
    // SAFETY: the exported API with valid arguments; the backends outlive the scheduler.
    let sched = unsafe {
        ggml_backend_sched_new(
            backends.as_mut_ptr(),
            null_mut(),
            backends.len() as c_int,
            256,
            parallel,
            false,
        )
    };
    assert!(!sched.is_null());
    let seen = if reuse {
        run_reuse(sched, &backends)
    } else {
        run_cache(sched, &backends)
    };
    // SAFETY: the scheduler and backends made above, each freed once.
    unsafe {
        ggml_backend_sched_free(sched);
        for b in backends {
            backend_free(b);
        }
    }
    std::env::remove_var("GGML_SCHED_INPUT_WAITS");
    seen
}

/// Computes one token of `graph` and synchronizes; returns TESTA's `synchronize` calls
/// inside the compute.
fn compute_token(sched: sys::ggml_backend_sched_t, graph: *mut sys::ggml_cgraph) -> usize {
    let before = SYNCS_A.load(Ordering::SeqCst);
    // SAFETY: a live scheduler and the graph it allocated.
    unsafe {
        let st = ggml_backend_sched_graph_compute_async(sched, graph);
        assert_eq!(st, sys::GGML_STATUS_SUCCESS);
        let syncs = SYNCS_A.load(Ordering::SeqCst) - before;
        ggml_backend_sched_synchronize(sched);
        syncs
    }
}

/// The cache graph on `sched` over `backends` (TESTA, TESTCPU).
fn run_cache(sched: sys::ggml_backend_sched_t, backends: &[sys::ggml_backend_t; 2]) -> Seen {
    // SAFETY: the exported API with valid arguments throughout; the tensors live in their
    // contexts, freed at the end.
    unsafe {
        let cache_ctx = ctx_of(1);
        let cache = sys::ggml_new_tensor_1d(cache_ctx, sys::GGML_TYPE_F32, N as i64);
        let cache_buf =
            ggml_backend_alloc_ctx_tensors_from_buft(cache_ctx, ggml_backend_cpu_buffer_type());
        assert!(!cache_buf.is_null());

        let ctx = ctx_of(16);
        let x = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, N as i64);
        sys::ggml_set_input(x);
        let w = sys::ggml_add_inplace(ctx, cache, x);
        let r = sys::ggml_add(ctx, cache, x);
        sys::ggml_set_output(r);
        let graph = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(graph, w);
        sys::ggml_build_forward_expand(graph, r);
        ggml_backend_sched_reset(sched);
        ggml_backend_sched_set_tensor_backend(sched, x, backends[0]);
        ggml_backend_sched_set_tensor_backend(sched, w, backends[0]);
        ggml_backend_sched_set_tensor_backend(sched, r, backends[1]);
        assert!(ggml_backend_sched_alloc_graph(sched, graph));
        assert_eq!(ggml_backend_sched_get_n_splits(sched), 2);
        assert_eq!(
            ggml_backend_sched_get_tensor_backend(sched, w),
            backends[0],
            "TESTA writes the cache in host memory"
        );

        let mut wrong = 0;
        let mut syncs_a = Vec::new();
        for t in 0..TOKENS {
            let xs: Vec<f32> = (0..N).map(|k| 1.0 + k as f32 + 1000.0 * t as f32).collect();
            set_f32s(cache, &[0.0; N]);
            set_f32s(x, &xs);
            syncs_a.push(compute_token(sched, graph));
            let got = f32s(r);
            wrong += got
                .iter()
                .zip(&xs)
                .filter(|(g, x)| **g != 2.0 * **x)
                .count();
            assert_eq!(f32s(cache), xs, "the cache holds x once TESTA has run");
        }
        sys::ggml_free(ctx);
        ggml_backend_buffer_free(cache_buf);
        sys::ggml_free(cache_ctx);
        Seen { wrong, syncs_a }
    }
}

/// The reuse graph on `sched` over `backends` (TESTA, TESTCPU).
fn run_reuse(sched: sys::ggml_backend_sched_t, backends: &[sys::ggml_backend_t; 2]) -> Seen {
    // SAFETY: the exported API with valid arguments throughout; the tensors live in `ctx`,
    // freed at the end.
    unsafe {
        let ctx = ctx_of(64);
        let x = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, N as i64);
        let z = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, N as i64);
        sys::ggml_set_input(x);
        sys::ggml_set_input(z);
        let c = sys::ggml_add(ctx, x, x);
        let w = sys::ggml_add_inplace(ctx, c, x);
        let v = sys::ggml_add(ctx, w, w);
        sys::ggml_set_output(v);
        let graph = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(graph, v);
        let ys: Vec<_> = (0..NY)
            .map(|_| {
                let y = sys::ggml_add(ctx, z, z);
                sys::ggml_set_output(y);
                sys::ggml_build_forward_expand(graph, y);
                y
            })
            .collect();
        ggml_backend_sched_reset(sched);
        for (t, b) in [(x, 1), (c, 1), (z, 0), (w, 0), (v, 0)] {
            ggml_backend_sched_set_tensor_backend(sched, t, backends[b]);
        }
        for &y in &ys {
            ggml_backend_sched_set_tensor_backend(sched, y, backends[1]);
        }
        assert!(ggml_backend_sched_alloc_graph(sched, graph));
        assert!(
            ys.iter().any(|&y| (*y).data == (*c).data),
            "a later TESTCPU node at c's bytes: the case arises"
        );

        let mut wrong = 0;
        let mut syncs_a = Vec::new();
        for t in 0..TOKENS {
            let xs: Vec<f32> = (0..N).map(|k| 1.0 + k as f32 + 1000.0 * t as f32).collect();
            let zs: Vec<f32> = (0..N)
                .map(|k| 100.0 + k as f32 + 1000.0 * t as f32)
                .collect();
            set_f32s(x, &xs);
            set_f32s(z, &zs);
            syncs_a.push(compute_token(sched, graph));
            for &y in &ys {
                wrong += f32s(y)
                    .iter()
                    .zip(&zs)
                    .filter(|(g, z)| **g != 2.0 * **z)
                    .count();
            }
            wrong += f32s(v)
                .iter()
                .zip(&xs)
                .filter(|(g, x)| **g != 6.0 * **x)
                .count();
        }
        sys::ggml_free(ctx);
        Seen { wrong, syncs_a }
    }
}

#[test]
fn a_split_reads_host_storage_after_the_queued_write() {
    // SAFETY: this test binary's own copy of the device, changed while no scheduler is alive.
    unsafe {
        let dev = &raw mut DEV_A;
        (*dev).iface.supports_buft = Some(a_supports_host);
    }

    // Stock's waits (`input`, ours in stock's sequence of waits): the CPU split's one wait
    // is for TESTCPU, before the copy of `x`, and nothing waits for TESTA: every value of
    // every token is read before TESTA's write (stock and ours differ here on purpose).
    let stock = run("input", false, false);
    assert_eq!(
        stock,
        Seen {
            wrong: TOKENS * N,
            syncs_a: vec![0; TOKENS]
        },
        "stock's gap, as measured"
    );
    // Ours synchronizes TESTA once, before the CPU split.
    let ours = run("split", false, false);
    assert_eq!(
        ours,
        Seen {
            wrong: 0,
            syncs_a: vec![1; TOKENS]
        }
    );
    // The reuse graph: in stock's waits TESTCPU writes a `y` over `c` before TESTA's queued
    // `c += x` lands on it, so one `y` and `v` are wrong every token; ours waits for TESTA
    // before the TESTCPU split that writes those bytes.
    let stock = run("input", true, false);
    assert_eq!(stock.wrong, TOKENS * 2 * N, "stock's gap, reuse");
    assert_eq!(stock.syncs_a, vec![0; TOKENS]);
    let ours = run("split", true, false);
    assert_eq!(
        ours,
        Seen {
            wrong: 0,
            syncs_a: vec![1; TOKENS]
        },
        "ours, reuse"
    );

    // With pipeline copies and TESTA's events: the same.
    // SAFETY: as above; TESTCPU keeps no events.
    unsafe {
        let dev = &raw mut DEV_A;
        (*dev).iface.event_new = Some(event_new);
        (*dev).iface.event_free = Some(event_free);
        (*dev).iface.event_synchronize = Some(event_synchronize);
    }
    for reuse in [false, true] {
        let stock = run("input", reuse, true);
        let gap = if reuse { TOKENS * 2 * N } else { TOKENS * N };
        assert_eq!(
            stock.wrong, gap,
            "stock's gap, pipeline copies, reuse {reuse}"
        );
        let ours = run("split", reuse, true);
        assert_eq!(
            ours,
            Seen {
                wrong: 0,
                syncs_a: vec![1; TOKENS]
            },
            "ours, pipeline copies, reuse {reuse}"
        );
    }
}
