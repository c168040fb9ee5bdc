//! A split must not touch storage that another backend's queued work has still to write,
//! when it reads or writes it without a copy (`src/sched/direct/`). TESTA's work waits in a
//! queue until `synchronize` (`tests/common/queue.rs`), and here TESTA also accepts the CPU
//! buffer type, as HRX accepts host buffer types: it computes into host memory directly, and
//! writes when its queue runs. TESTCPU computes at once and, like ggml-cpu, has no
//! `synchronize`. Each graph runs [`TOKENS`] tokens, checked on its values and on TESTA's
//! `synchronize` calls inside each token's compute; where a test runs stock's waits too
//! (`GGML_SCHED_INPUT_WAITS=input`), they show the race its graph sets up.
//!
//! The cache graph, as llama.cpp's with its KV cache in host memory (`-nkvo`) on such a device:
//! `cache` is a pre-allocated tensor in a CPU buffer; `x` a user input on TESTA;
//! `w = cache += x` (in place) on TESTA; then `r = cache + x` on TESTCPU, which reads `cache`
//! directly and `x` through a copy (a user input: the copy waits only for TESTCPU). With the
//! write ordered first, `r = 2x`; read before it, `r = x`. Each token sets `cache` to 0 and
//! `x`, computes, and synchronizes (as llama.cpp does before it reads logits). The graph is
//! built once ([`Build`]), or rebuilt every token in the same memory (the scheduler replays
//! the placement, which must keep the wait), with a reserve or another graph's split in
//! between; also with an eval callback and with a compute of TESTA that fails.
//!
//! The views graph: `cache` of `2N` floats; TESTA adds `x` in place into a view of its second
//! half, and TESTCPU adds `x2` (TESTA's, copied) to a view of a view of `cache`, two floats
//! inside the written half (it must wait) or inside the first (it must not).
//!
//! The "reuse" graph (a review's case): TESTA writes in place into a tensor TESTCPU computed,
//! in TESTCPU's compute buffer, and the allocator gives those bytes to a later TESTCPU node:
//! `c = x + x` on TESTCPU, `w = c += x` and `v = w + w` on TESTA (`v = 6x`), then
//! [`NY`] nodes `y = z + z` on TESTCPU (`y = 2z`, `z` a user input on TESTA, copied in).
//!
//! The queued-copy graph (a third review's case): both backends compute in the CPU buffer
//! type, so the allocator gives them one buffer. TESTA computes `a = u + u` from `u`, a weight
//! in a mapped host buffer ("CPU_Mapped") that TESTA does not accept: its split copies `u` into
//! the shared buffer with `cpy_tensor_async`, queued (a weight's copy may run late). The
//! allocator then gives the copy's bytes to one of six TESTCPU nodes `y = z + z` (`z` in
//! TESTA's memory, copied in), which TESTCPU writes at once: TESTA's copy must not land on it
//! afterwards.
//!
//! The tests hold [`SERIAL`]: they share TESTA's queue, the devices' interfaces, and the wait
//! mode, read from the environment when a scheduler is made.

use std::os::raw::{c_char, c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use ggml_base::alloc::exports::ggml_backend_alloc_ctx_tensors_from_buft;
use ggml_base::buffer::ggml_backend_buffer_free;
use ggml_base::cpu_buffer::{ggml_backend_cpu_buffer_from_ptr, ggml_backend_cpu_buffer_type};
use ggml_base::multi_buffer::ggml_backend_buffer_set_usage;
use ggml_base::sched::replay::replays_total;
use ggml_base::sched::*;
use ggml_base::tensor::ggml_backend_tensor_alloc;
use ggml_sys as sys;
use ggml_sys::{ggml_backend_t, ggml_tensor};

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
/// The rebuilt cache graph's tokens: a graph rebuilt in the same memory is replayed from its
/// fourth split on (`src/sched/replay.rs`), so tokens 3 and 4 replay, and after a split of
/// another graph before token [`BETWEEN_AT`] token 8 replays again.
const REBUILT_TOKENS: usize = 9;
/// The token before which a reserve or another graph's split comes ([`Build`]).
const BETWEEN_AT: usize = 5;

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds [`SERIAL`], with the devices as this file's tests start: TESTA accepts host memory
/// ([`a_supports_host`]), and nothing else differs from `device_iface`.
fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: this test binary's own copies of the devices, changed while no scheduler is
    // alive (the other tests wait for the lock).
    unsafe {
        let (a, cpu) = (&raw mut DEV_A, &raw mut DEV_CPU);
        (*cpu).iface = device_iface();
        (*a).iface = device_iface();
        (*a).iface.supports_buft = Some(a_supports_host);
    }
    guard
}

/// TESTA accepts its own buffer type and the CPU's (host memory it computes in directly).
unsafe extern "C" fn a_supports_host(
    d: sys::ggml_backend_dev_t,
    buft: sys::ggml_backend_buffer_type_t,
) -> bool {
    // SAFETY: the device's own callback; the CPU buffer type is static.
    buft == unsafe { dev_buft(d) } || buft == unsafe { ggml_backend_cpu_buffer_type() }
}

/// TESTCPU without `synchronize`, as ggml-cpu: its compute returns finished.
fn backend_cpu_synchronous() -> ggml_backend_t {
    let b = backend_cpu();
    // SAFETY: a backend just made by `backend_cpu`, owned here.
    unsafe { (*b).iface.synchronize = None };
    b
}

/// What one run saw: wrong values of the outputs over all tokens, and TESTA's `synchronize`
/// calls inside each token's `graph_compute_async`.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    wrong: usize,
    syncs_a: Vec<usize>,
}

/// The values token `t` sets in a tensor of `n` floats: `first + k + 1000 t`.
fn values(n: usize, first: f32, t: usize) -> Vec<f32> {
    (0..n)
        .map(|k| first + k as f32 + 1000.0 * t as f32)
        .collect()
}

/// How many of `got` differ from `want`.
fn count_wrong(got: &[f32], want: impl IntoIterator<Item = f32>) -> usize {
    let want: Vec<f32> = want.into_iter().collect();
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).filter(|(g, w)| **g != *w).count()
}

/// Runs `graph` on a new scheduler over a new TESTA and TESTCPU with wait mode `mode`
/// (`parallel`: with pipeline copies and TESTA's events), computing in `bufts` (`None`: each
/// device's own buffer type).
fn run(
    mode: &str,
    parallel: bool,
    mut bufts: Option<[sys::ggml_backend_buffer_type_t; 2]>,
    graph: impl FnOnce(sys::ggml_backend_sched_t, &[ggml_backend_t; 2]) -> Seen,
) -> Seen {
    std::env::set_var("GGML_SCHED_INPUT_WAITS", mode);
    *QUEUE.lock().unwrap() = (Vec::new(), 0);
    // SAFETY: no scheduler is alive, and the caller holds `SERIAL`; TESTCPU keeps no events.
    unsafe { events_on_a(parallel) };
    let mut backends = [backend_a(), backend_cpu_synchronous()];
    // SAFETY: the exported API with valid arguments; the backends outlive the scheduler.
    let sched = unsafe {
        ggml_backend_sched_new(
            backends.as_mut_ptr(),
            bufts.as_mut().map_or(null_mut(), |b| b.as_mut_ptr()),
            backends.len() as c_int,
            256,
            parallel,
            false,
        )
    };
    assert!(!sched.is_null());
    let seen = graph(sched, &backends);
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

/// Resets `sched` and places each tensor on its backend, `backends[i]`.
fn place(
    sched: sys::ggml_backend_sched_t,
    backends: &[ggml_backend_t; 2],
    placed: &[(*mut ggml_tensor, usize)],
) {
    // SAFETY: a live scheduler, its backends and the caller's live tensors.
    unsafe {
        ggml_backend_sched_reset(sched);
        for &(t, i) in placed {
            ggml_backend_sched_set_tensor_backend(sched, t, backends[i]);
        }
    }
}

/// Computes one token of `graph` and synchronizes; returns TESTA's `synchronize` calls
/// inside the compute, which fails while [`FAIL_A_COMPUTE`] is set and succeeds otherwise.
fn compute_token(sched: sys::ggml_backend_sched_t, graph: *mut sys::ggml_cgraph) -> usize {
    let before = SYNCS_A.load(Ordering::SeqCst);
    // SAFETY: a live scheduler and the graph it allocated.
    unsafe {
        let st = ggml_backend_sched_graph_compute_async(sched, graph);
        let fails = FAIL_A_COMPUTE.load(Ordering::SeqCst);
        assert_eq!(st == sys::GGML_STATUS_SUCCESS, !fails, "status {st}");
        let syncs = SYNCS_A.load(Ordering::SeqCst) - before;
        ggml_backend_sched_synchronize(sched);
        syncs
    }
}

/// How the cache graph's tokens get their graph.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Build {
    /// Built, split and allocated once (llama.cpp when it reuses its graph).
    Once,
    /// Rebuilt in the same memory, split and allocated every token (llama.cpp otherwise).
    Rebuilt,
    /// As `Rebuilt`, with `ggml_backend_sched_reserve` of the graph of token [`BETWEEN_AT`]
    /// before it is placed again and allocated.
    RebuiltReserve,
    /// As `Rebuilt`, with `ggml_backend_sched_split_graph` of another graph (TESTCPU's only)
    /// before the graph of token [`BETWEEN_AT`] is placed again and allocated.
    RebuiltSplitOther,
}

/// The cache graph on `sched` over `backends` (TESTA, TESTCPU), built as `build` says, for
/// [`TOKENS`] tokens ([`REBUILT_TOKENS`] rebuilt); TESTA's compute fails at token `fail_at`
/// (its `r` is not checked).
fn run_cache(
    sched: sys::ggml_backend_sched_t,
    backends: &[ggml_backend_t; 2],
    build: Build,
    fail_at: Option<usize>,
) -> Seen {
    // SAFETY: the exported API with valid arguments throughout; the tensors live in their
    // contexts, each freed once its graph is done with (the last one at the end).
    unsafe {
        let cache_ctx = ctx_of(1);
        let cache = sys::ggml_new_tensor_1d(cache_ctx, sys::GGML_TYPE_F32, N as i64);
        let cache_buf =
            ggml_backend_alloc_ctx_tensors_from_buft(cache_ctx, ggml_backend_cpu_buffer_type());
        assert!(!cache_buf.is_null());
        // Every token's graph in the same memory, as llama.cpp builds its graphs.
        let mut arena = vec![0u8; 16 * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead()];
        let mut ctx: *mut sys::ggml_context = null_mut();
        let (mut graph, mut x, mut r) = (null_mut(), null_mut(), null_mut());
        let other_ctx = ctx_of(8);

        let mut wrong = 0;
        let mut syncs_a = Vec::new();
        let tokens = if build == Build::Once {
            TOKENS
        } else {
            REBUILT_TOKENS
        };
        for t in 0..tokens {
            if t == 0 || build != Build::Once {
                if !ctx.is_null() {
                    sys::ggml_free(ctx);
                }
                ctx = sys::ggml_init(sys::ggml_init_params {
                    mem_size: arena.len(),
                    mem_buffer: arena.as_mut_ptr().cast(),
                    no_alloc: true,
                });
                x = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, N as i64);
                sys::ggml_set_input(x);
                let w = sys::ggml_add_inplace(ctx, cache, x);
                r = sys::ggml_add(ctx, cache, x);
                sys::ggml_set_output(r);
                graph = sys::ggml_new_graph(ctx);
                sys::ggml_build_forward_expand(graph, w);
                sys::ggml_build_forward_expand(graph, r);
                let placed = [(x, 0), (w, 0), (r, 1)];
                place(sched, backends, &placed);
                match build {
                    Build::RebuiltReserve if t == BETWEEN_AT => {
                        assert!(ggml_backend_sched_reserve(sched, graph));
                        place(sched, backends, &placed);
                    }
                    Build::RebuiltSplitOther if t == BETWEEN_AT => {
                        let o = sys::ggml_new_tensor_1d(other_ctx, sys::GGML_TYPE_F32, 3);
                        sys::ggml_set_input(o);
                        let other = sys::ggml_new_graph(other_ctx);
                        sys::ggml_build_forward_expand(other, sys::ggml_add(other_ctx, o, o));
                        ggml_backend_sched_split_graph(sched, other);
                        place(sched, backends, &placed);
                    }
                    _ => {}
                }
                assert!(ggml_backend_sched_alloc_graph(sched, graph));
                assert_eq!(ggml_backend_sched_get_n_splits(sched), 2);
                assert_eq!(
                    ggml_backend_sched_get_tensor_backend(sched, w),
                    backends[0],
                    "TESTA writes the cache in host memory"
                );
            }
            let xs = values(N, 1.0, t);
            set_f32s(cache, &[0.0; N]);
            set_f32s(x, &xs);
            FAIL_A_COMPUTE.store(fail_at == Some(t), Ordering::SeqCst);
            syncs_a.push(compute_token(sched, graph));
            FAIL_A_COMPUTE.store(false, Ordering::SeqCst);
            if fail_at != Some(t) {
                wrong += count_wrong(&f32s(r), xs.iter().map(|x| 2.0 * x));
            }
            assert_eq!(f32s(cache), xs, "the cache holds x once TESTA has run");
        }
        sys::ggml_free(ctx);
        sys::ggml_free(other_ctx);
        ggml_backend_buffer_free(cache_buf);
        sys::ggml_free(cache_ctx);
        Seen { wrong, syncs_a }
    }
}

/// The views graph on `sched` over `backends` (TESTA, TESTCPU); `near`: TESTCPU reads inside
/// the half TESTA writes.
fn run_views(sched: sys::ggml_backend_sched_t, backends: &[ggml_backend_t; 2], near: bool) -> Seen {
    // SAFETY: the exported API with valid arguments throughout; the tensors live in their
    // contexts, freed at the end.
    unsafe {
        let cache_ctx = ctx_of(1);
        let cache = sys::ggml_new_tensor_1d(cache_ctx, sys::GGML_TYPE_F32, 2 * N as i64);
        let cache_buf =
            ggml_backend_alloc_ctx_tensors_from_buft(cache_ctx, ggml_backend_cpu_buffer_type());
        assert!(!cache_buf.is_null());
        let ctx = ctx_of(16);
        let x = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, N as i64);
        let x2 = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 2);
        sys::ggml_set_input(x);
        sys::ggml_set_input(x2);
        let second = sys::ggml_view_1d(ctx, cache, N as i64, N * 4);
        let w = sys::ggml_add_inplace(ctx, second, x);
        let half = if near {
            second
        } else {
            sys::ggml_view_1d(ctx, cache, N as i64, 0)
        };
        // Elements 3 and 4 of that half.
        let two = sys::ggml_view_1d(ctx, half, 2, 3 * 4);
        assert_eq!(
            (*two).view_src,
            cache,
            "ggml makes a view of a view one of `cache`"
        );
        let r = sys::ggml_add(ctx, two, x2);
        sys::ggml_set_output(r);
        let graph = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(graph, w);
        sys::ggml_build_forward_expand(graph, r);
        place(sched, backends, &[(x, 0), (x2, 0), (w, 0), (r, 1)]);
        assert!(ggml_backend_sched_alloc_graph(sched, graph));

        let first = values(N, 100.0, 0);
        let x2s = [0.5, 0.25];
        let mut wrong = 0;
        let mut syncs_a = Vec::new();
        for t in 0..TOKENS {
            let xs = values(N, 1.0, t);
            set_f32s(cache, &[&first[..], &[0.0; N]].concat());
            set_f32s(x, &xs);
            set_f32s(x2, &x2s);
            syncs_a.push(compute_token(sched, graph));
            let read = if near { &xs } else { &first };
            wrong += count_wrong(&f32s(r), [read[3] + x2s[0], read[4] + x2s[1]]);
        }
        sys::ggml_free(ctx);
        ggml_backend_buffer_free(cache_buf);
        sys::ggml_free(cache_ctx);
        Seen { wrong, syncs_a }
    }
}

/// The reuse graph on `sched` over `backends` (TESTA, TESTCPU).
fn run_reuse(sched: sys::ggml_backend_sched_t, backends: &[ggml_backend_t; 2]) -> Seen {
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
        let mut placed = vec![(x, 1), (c, 1), (z, 0), (w, 0), (v, 0)];
        placed.extend(ys.iter().map(|&y| (y, 1)));
        place(sched, backends, &placed);
        assert!(ggml_backend_sched_alloc_graph(sched, graph));
        assert!(
            ys.iter().any(|&y| (*y).data == (*c).data),
            "a later TESTCPU node at c's bytes: the case arises"
        );

        let mut wrong = 0;
        let mut syncs_a = Vec::new();
        for t in 0..TOKENS {
            let xs = values(N, 1.0, t);
            let zs = values(N, 100.0, t);
            set_f32s(x, &xs);
            set_f32s(z, &zs);
            syncs_a.push(compute_token(sched, graph));
            for &y in &ys {
                wrong += count_wrong(&f32s(y), zs.iter().map(|z| 2.0 * z));
            }
            wrong += count_wrong(&f32s(v), xs.iter().map(|x| 6.0 * x));
        }
        sys::ggml_free(ctx);
        Seen { wrong, syncs_a }
    }
}

/// TESTCPU accepts every buffer type but TESTA's own (the CPU's and a mapped model file's).
unsafe extern "C" fn cpu_supports_all_but_a(
    _: sys::ggml_backend_dev_t,
    buft: sys::ggml_backend_buffer_type_t,
) -> bool {
    buft != &raw mut BUFT_A
}

/// TESTA does not compute the nodes named "y", as a device lacks an op: they stay on TESTCPU
/// (with one buffer type for both, the scheduler would move them to TESTA).
unsafe extern "C" fn a_refuses_y(d: sys::ggml_backend_dev_t, t: *const ggml_tensor) -> bool {
    // SAFETY: the scheduler asks about live tensors.
    d != &raw mut DEV_A || unsafe { (*t).name[0] } != b'y' as c_char
}

/// The queued-copy graph on `sched` over `backends` (TESTA, TESTCPU), both computing in the
/// CPU buffer type; TESTCPU accepts [`cpu_supports_all_but_a`], TESTA [`a_refuses_y`].
fn run_queued_copy(sched: sys::ggml_backend_sched_t, backends: &[ggml_backend_t; 2]) -> Seen {
    const NU: usize = 16;
    const NZ: usize = 4;
    /// The mapped file's memory: `ggml_backend_cpu_buffer_from_ptr` wants it 32-byte aligned.
    #[repr(C, align(32))]
    struct Mapped([f32; NU]);
    let mut mapped = Box::new(Mapped([0.0; NU]));
    let copies_before = QUEUED_COPIES.load(Ordering::SeqCst);
    // SAFETY: the exported API with valid arguments throughout; `u` lives in `mapped`, freed
    // after its buffer; the other tensors live in their contexts, freed at the end.
    let seen = unsafe {
        let leaves = ctx_of(2);
        let u = sys::ggml_new_tensor_1d(leaves, sys::GGML_TYPE_F32, NU as i64);
        let z = sys::ggml_new_tensor_1d(leaves, sys::GGML_TYPE_F32, NZ as i64);
        sys::ggml_set_input(z);
        let mapped_at = mapped.0.as_mut_ptr().cast::<c_void>();
        let u_buf = ggml_backend_cpu_buffer_from_ptr(mapped_at, size_of::<Mapped>());
        ggml_backend_buffer_set_usage(u_buf, sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        assert_eq!(
            ggml_backend_tensor_alloc(u_buf, u, mapped_at),
            sys::GGML_STATUS_SUCCESS
        );
        // The leaf not allocated yet, `z`, in TESTA's memory.
        let z_buf = ggml_backend_alloc_ctx_tensors_from_buft(leaves, &raw mut BUFT_A);
        assert!(!z_buf.is_null());

        let ctx = ctx_of(16);
        let a = sys::ggml_add(ctx, u, u);
        sys::ggml_set_output(a);
        let graph = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(graph, a);
        let ys: Vec<_> = (0..6)
            .map(|_| {
                let y = sys::ggml_add(ctx, z, z);
                sys::ggml_set_name(y, c"y".as_ptr());
                sys::ggml_set_output(y);
                sys::ggml_build_forward_expand(graph, y);
                y
            })
            .collect();
        let mut placed = vec![(a, 0)];
        placed.extend(ys.iter().map(|&y| (y, 1)));
        place(sched, backends, &placed);
        assert!(ggml_backend_sched_alloc_graph(sched, graph));
        assert_eq!(ggml_backend_sched_get_n_splits(sched), 2);
        // The split pass gave `a` TESTA's copy of `u` as its sources.
        let copy = (*a).src[0];
        assert_ne!(copy, u, "TESTA reads u through a copy");
        let copy_at = (*copy).data as usize..(*copy).data as usize + sys::ggml_nbytes(copy);
        assert!(
            ys.iter().any(|&y| copy_at.contains(&((*y).data as usize))),
            "a later TESTCPU node at the bytes of TESTA's copy of u: the case arises"
        );

        let mut wrong = 0;
        let mut syncs_a = Vec::new();
        for t in 0..TOKENS {
            let us = values(NU, 1.0, t);
            let zs = values(NZ, 500.0, t);
            set_f32s(u, &us);
            set_f32s(z, &zs);
            syncs_a.push(compute_token(sched, graph));
            wrong += count_wrong(&f32s(a), us.iter().map(|u| 2.0 * u));
            for &y in &ys {
                wrong += count_wrong(&f32s(y), zs.iter().map(|z| 2.0 * z));
            }
        }
        sys::ggml_free(ctx);
        ggml_backend_buffer_free(z_buf);
        ggml_backend_buffer_free(u_buf);
        sys::ggml_free(leaves);
        Seen { wrong, syncs_a }
    };
    let copies = QUEUED_COPIES.load(Ordering::SeqCst) - copies_before;
    assert_eq!(copies, TOKENS, "TESTA queued its copy of u every token");
    seen
}

#[test]
fn a_split_reads_host_storage_after_the_queued_write() {
    let _serial = serial();
    let cache = |s, b: &_| run_cache(s, b, Build::Once, None);
    let ours = |seen: Seen, what: &str| {
        assert_eq!(
            seen,
            Seen {
                wrong: 0,
                syncs_a: vec![1; TOKENS]
            },
            "{what}"
        )
    };

    // Stock's waits (`input`, ours in stock's sequence of waits): the CPU split's one wait
    // is for TESTCPU, before the copy of `x`, and nothing waits for TESTA: every value of
    // every token is read before TESTA's write (stock and ours differ here on purpose).
    let stock = run("input", false, None, cache);
    assert_eq!(
        stock,
        Seen {
            wrong: TOKENS * N,
            syncs_a: vec![0; TOKENS]
        },
        "stock's gap, as measured"
    );
    // Ours synchronizes TESTA once, before the CPU split.
    ours(run("split", false, None, cache), "ours");
    // The reuse graph: in stock's waits TESTCPU writes a `y` over `c` before TESTA's queued
    // `c += x` lands on it, so one `y` and `v` are wrong every token; ours waits for TESTA
    // before the TESTCPU split that writes those bytes.
    let stock = run("input", false, None, run_reuse);
    assert_eq!(stock.wrong, TOKENS * 2 * N, "stock's gap, reuse");
    assert_eq!(stock.syncs_a, vec![0; TOKENS]);
    ours(run("split", false, None, run_reuse), "ours, reuse");

    // With pipeline copies and TESTA's events: the same.
    let stock = run("input", true, None, cache);
    assert_eq!(stock.wrong, TOKENS * N, "stock's gap, pipeline copies");
    ours(run("split", true, None, cache), "ours, pipeline copies");
    let stock = run("input", true, None, run_reuse);
    assert_eq!(
        stock.wrong,
        TOKENS * 2 * N,
        "stock's gap, pipeline copies, reuse"
    );
    ours(
        run("split", true, None, run_reuse),
        "ours, pipeline copies, reuse",
    );
}

/// A view of a view is one of the viewed tensor: TESTCPU waits for TESTA when the two floats
/// it reads lie in the half TESTA writes, and only then.
#[test]
fn views_of_views_wait_only_when_the_bytes_overlap() {
    let _serial = serial();
    for parallel in [false, true] {
        for (near, syncs) in [(true, 1), (false, 0)] {
            assert_eq!(
                run("split", parallel, None, |s, b| run_views(s, b, near)),
                Seen {
                    wrong: 0,
                    syncs_a: vec![syncs; TOKENS]
                },
                "near {near}, pipeline copies {parallel}"
            );
        }
    }
}

/// A replay keeps the list of writers, with the placement: a graph rebuilt every token in
/// the same memory waits as the first did, also when a reserve or another graph's split comes
/// between two tokens.
#[test]
fn rebuilt_graphs_replayed_keep_their_waits() {
    let _serial = serial();
    for parallel in [false, true] {
        // Replayed: tokens 3 to 8; with the reserve, not token 5 (and, as measured, not token
        // 6 either with pipeline copies); with the other graph's split, which starts the
        // count again, tokens 3, 4 and 8.
        let reserved = if parallel { 4 } else { 5 };
        for (build, replayed) in [
            (Build::Rebuilt, 6),
            (Build::RebuiltReserve, reserved),
            (Build::RebuiltSplitOther, 3),
        ] {
            let before = replays_total();
            let seen = run("split", parallel, None, |s, b| run_cache(s, b, build, None));
            let what = format!("{build:?}, pipeline copies {parallel}");
            assert_eq!(
                replays_total() - before,
                replayed,
                "tokens replayed, {what}"
            );
            assert_eq!(
                seen,
                Seen {
                    wrong: 0,
                    syncs_a: vec![1; REBUILT_TOKENS]
                },
                "{what}"
            );
        }
    }
}

/// Eval-callback calls, all tests together.
static CALLBACKS: AtomicUsize = AtomicUsize::new(0);

/// Wants every node.
unsafe extern "C" fn every_node(_: *mut ggml_tensor, _: bool, _: *mut c_void) -> bool {
    CALLBACKS.fetch_add(1, Ordering::SeqCst);
    true
}

/// The eval callback's synchronize after TESTA's node clears what TESTA wrote, so no other
/// wait comes; a compute of TESTA that fails (token 1, which then computes nothing else and
/// waits for nothing) leaves the waits of the tokens after it as they were.
#[test]
fn eval_callback_and_a_failing_compute() {
    let _serial = serial();
    for callback in [false, true] {
        let before = CALLBACKS.load(Ordering::SeqCst);
        let seen = run("split", false, None, |s, b| {
            if callback {
                // SAFETY: a live scheduler; the callback keeps no data.
                unsafe { ggml_backend_sched_set_eval_callback(s, Some(every_node), null_mut()) };
            }
            run_cache(s, b, Build::Once, Some(1))
        });
        assert_eq!(
            seen,
            Seen {
                wrong: 0,
                syncs_a: vec![1, 0, 1]
            },
            "callback {callback}"
        );
        // Asked about and shown `w`, then `r`, each token; the failed one only asked about `w`.
        let calls = CALLBACKS.load(Ordering::SeqCst) - before;
        assert_eq!(
            calls,
            if callback { 4 + 1 + 4 } else { 0 },
            "callback calls"
        );
    }
}

/// A split's input copy that its backend queued in memory another backend computes in is
/// pending like the split's own writes: TESTCPU, which writes a node at the copy's bytes once
/// TESTA's split is queued, waits for TESTA first.
#[test]
fn a_queued_input_copy_in_shared_memory_lands_before_another_backend_writes_there() {
    let _serial = serial();
    // SAFETY: this test binary's own copies of the devices, changed while no scheduler is
    // alive (`serial` sets them back for the next test).
    unsafe {
        let (a, cpu) = (&raw mut DEV_A, &raw mut DEV_CPU);
        (*cpu).iface.supports_buft = Some(cpu_supports_all_but_a);
        (*a).iface.supports_op = Some(a_refuses_y);
    }
    // SAFETY: a static buffer type.
    let cpu = unsafe { ggml_backend_cpu_buffer_type() };
    // Stock's waits: TESTA's split synchronizes TESTA before it queues the copy of `u`, the
    // TESTCPU split waits for TESTCPU only, before its copy of `z`, and TESTA's copy lands on
    // a `y` (4 floats) every token (stock and ours differ here on purpose).
    let stock = run("input", false, Some([cpu, cpu]), run_queued_copy);
    assert_eq!(
        stock,
        Seen {
            wrong: TOKENS * 4,
            syncs_a: vec![1; TOKENS]
        },
        "stock's gap, as measured"
    );
    // Ours synchronizes TESTA before its split's copies too, and once more before the TESTCPU
    // split, which writes at the bytes of TESTA's queued copy.
    let ours = run("split", false, Some([cpu, cpu]), run_queued_copy);
    assert_eq!(
        ours,
        Seen {
            wrong: 0,
            syncs_a: vec![2; TOKENS]
        }
    );
}
