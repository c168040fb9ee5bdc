//! A split must not read storage that another backend's queued split has still to write,
//! when it reads it without a copy (`src/sched/direct.rs`). TESTA's work waits in a queue
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

/// TESTA accepts its own buffer type and the CPU's (host memory it computes in directly).
unsafe extern "C" fn a_supports_host(
    d: sys::ggml_backend_dev_t,
    buft: sys::ggml_backend_buffer_type_t,
) -> bool {
    // SAFETY: the device's own callback; the CPU buffer type is static.
    buft == unsafe { dev_buft(d) } || buft == unsafe { ggml_backend_cpu_buffer_type() }
}

/// TESTCPU without `synchronize`, as ggml-cpu: its compute returns finished.
fn backend_cpu_sync() -> sys::ggml_backend_t {
    let b = backend_cpu();
    // SAFETY: a backend just made by `backend_cpu`, owned here.
    unsafe { (*b).iface.synchronize = None };
    b
}

/// What one run saw: wrong values of `r` over all tokens, and TESTA's `synchronize` calls
/// inside each token's `graph_compute_async`.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    wrong: usize,
    syncs_a: Vec<usize>,
}

/// Runs [`TOKENS`] tokens of the module doc's graph on a new scheduler (`parallel`: with
/// pipeline copies and TESTA's events) with wait mode `mode`.
fn run(mode: &str, parallel: bool) -> Seen {
    std::env::set_var("GGML_SCHED_INPUT_WAITS", mode);
    *QUEUE.lock().unwrap() = (Vec::new(), 0);
    // SAFETY: the exported API with valid arguments throughout; the tensors live in their
    // contexts, freed after the scheduler.
    unsafe {
        let mut backends = [backend_a(), backend_cpu_sync()];
        let sched = ggml_backend_sched_new(
            backends.as_mut_ptr(),
            null_mut(),
            backends.len() as c_int,
            64,
            parallel,
            false,
        );
        assert!(!sched.is_null());
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
            let before = SYNCS_A.load(Ordering::SeqCst);
            let st = ggml_backend_sched_graph_compute_async(sched, graph);
            assert_eq!(st, sys::GGML_STATUS_SUCCESS);
            syncs_a.push(SYNCS_A.load(Ordering::SeqCst) - before);
            ggml_backend_sched_synchronize(sched);
            let got = f32s(r);
            wrong += got
                .iter()
                .zip(&xs)
                .filter(|(g, x)| **g != 2.0 * **x)
                .count();
            assert_eq!(f32s(cache), xs, "the cache holds x once TESTA has run");
        }
        ggml_backend_sched_free(sched);
        for b in backends {
            backend_free(b);
        }
        sys::ggml_free(ctx);
        ggml_backend_buffer_free(cache_buf);
        sys::ggml_free(cache_ctx);
        std::env::remove_var("GGML_SCHED_INPUT_WAITS");
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
    let stock = run("input", false);
    assert_eq!(
        stock,
        Seen {
            wrong: TOKENS * N,
            syncs_a: vec![0; TOKENS]
        },
        "stock's gap, as measured"
    );
    // Ours synchronizes TESTA once, before the CPU split.
    let ours = run("split", false);
    assert_eq!(
        ours,
        Seen {
            wrong: 0,
            syncs_a: vec![1; TOKENS]
        }
    );

    // With pipeline copies and TESTA's events: the same.
    // SAFETY: as above; TESTCPU keeps no events.
    unsafe {
        let dev = &raw mut DEV_A;
        (*dev).iface.event_new = Some(event_new);
        (*dev).iface.event_free = Some(event_free);
        (*dev).iface.event_synchronize = Some(event_synchronize);
    }
    let stock = run("input", true);
    assert_eq!(stock.wrong, TOKENS * N, "stock's gap, pipeline copies");
    let ours = run("split", true);
    assert_eq!(
        ours,
        Seen {
            wrong: 0,
            syncs_a: vec![1; TOKENS]
        },
        "ours, pipeline copies"
    );
}
