//! How often the scheduler waits for a split's backend while it copies the split's inputs
//! (`src/sched/compute.rs`, `SplitWaits`): once per split, on the host, by default; before
//! every input with `GGML_SCHED_INPUT_WAITS=input`, as stock does. Both modes must compute the
//! same values; the waits are counted on the test backends' own callbacks.
//!
//! The graph: three user inputs `x`, `y`, `z` (allocated by the scheduler on TESTCPU), then
//! `w = x + x` on TESTCPU, `v = w + y` and `out = v + z` on TESTA (user placements). TESTA's
//! split then copies `w` (a node of another split: the queued path, which falls back to a
//! blocking copy as TESTA has no `cpy_tensor_async`), then `y` and `z` (user inputs: blocking
//! copies at once). Stock's waits for TESTA in that split, serial scheduler (no events):
//! `w` 2 (before the queued copy, and again before the fallback), `y` 1, `z` 1.
//!
//! One test function, as the mode is read from the environment when a scheduler is made.

use std::os::raw::c_int;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

use ggml_base::sched::*;
use ggml_base::tensor::*;
use ggml_sys as sys;
use ggml_sys::{ggml_backend_t, ggml_cgraph, ggml_tensor};

#[path = "common/devices.rs"]
mod devices;
use devices::*;

/// Per device (0: TESTA, 1: TESTCPU): `synchronize` calls.
static SYNCS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
/// TESTA's events: `event_synchronize` (host waits) and `event_wait` (queue waits) calls.
static EVENT_SYNCS: AtomicUsize = AtomicUsize::new(0);
static EVENT_WAITS: AtomicUsize = AtomicUsize::new(0);

fn which(b: ggml_backend_t) -> usize {
    // SAFETY: a backend made by `backend()` below, live.
    usize::from(unsafe { (*b).device } != &raw mut DEV_A)
}

unsafe extern "C" fn counting_sync(b: ggml_backend_t) {
    SYNCS[which(b)].fetch_add(1, Ordering::SeqCst);
}

unsafe extern "C" fn event_new(dev: sys::ggml_backend_dev_t) -> sys::ggml_backend_event_t {
    Box::into_raw(Box::new(sys::ggml_backend_event {
        device: dev,
        context: null_mut(),
    }))
}

unsafe extern "C" fn event_free(_: sys::ggml_backend_dev_t, e: sys::ggml_backend_event_t) {
    // SAFETY: made by Box in `event_new`.
    drop(unsafe { Box::from_raw(e) });
}

unsafe extern "C" fn event_synchronize(_: sys::ggml_backend_dev_t, _: sys::ggml_backend_event_t) {
    EVENT_SYNCS.fetch_add(1, Ordering::SeqCst);
}

unsafe extern "C" fn event_record(_: ggml_backend_t, _: sys::ggml_backend_event_t) {}

unsafe extern "C" fn event_wait(_: ggml_backend_t, _: sys::ggml_backend_event_t) {
    EVENT_WAITS.fetch_add(1, Ordering::SeqCst);
}

/// Computes F32 ADD of same-shape, contiguous host tensors; anything else fails.
unsafe extern "C" fn add_compute(_: ggml_backend_t, g: *mut ggml_cgraph) -> sys::ggml_status {
    // SAFETY: a live graph of allocated, contiguous F32 host tensors (the test's own).
    match unsafe { adds(g) } {
        Some(adds) => {
            for add in &adds {
                // SAFETY: as above.
                unsafe { run_add(add) };
            }
            sys::GGML_STATUS_SUCCESS
        }
        None => sys::GGML_STATUS_FAILED,
    }
}

fn backend(dev: *mut sys::ggml_backend_device) -> ggml_backend_t {
    new_backend(
        dev,
        sys::ggml_backend_i {
            get_name: Some(backend_name),
            free: Some(backend_free),
            synchronize: Some(counting_sync),
            graph_compute: Some(add_compute),
            event_record: Some(event_record),
            event_wait: Some(event_wait),
            ..Default::default()
        },
    )
}

/// The waits one `graph_compute_async` made (between the counters' reads).
#[derive(Debug, PartialEq, Eq)]
struct Waits {
    /// `synchronize` of TESTA and of TESTCPU.
    sync_a: usize,
    sync_cpu: usize,
    /// TESTA's `event_synchronize` and `event_wait`.
    event_sync: usize,
    event_wait: usize,
}

fn counters() -> [usize; 4] {
    [
        SYNCS[0].load(Ordering::SeqCst),
        SYNCS[1].load(Ordering::SeqCst),
        EVENT_SYNCS.load(Ordering::SeqCst),
        EVENT_WAITS.load(Ordering::SeqCst),
    ]
}

const N: i64 = 8;

/// The graph of the module doc in a new no_alloc context: the context, the graph and
/// `[x, y, z, w, v, out]`.
fn build() -> (
    *mut sys::ggml_context,
    *mut ggml_cgraph,
    [*mut ggml_tensor; 6],
) {
    // SAFETY: the exported API with valid arguments; the tensors live in the new context.
    unsafe {
        let ctx = sys::ggml_init(sys::ggml_init_params {
            mem_size: 16 * sys::ggml_tensor_overhead() + sys::ggml_graph_overhead(),
            mem_buffer: null_mut(),
            no_alloc: true,
        });
        assert!(!ctx.is_null());
        let input = || {
            let t = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, N);
            sys::ggml_set_input(t);
            t
        };
        let (x, y, z) = (input(), input(), input());
        let w = sys::ggml_add(ctx, x, x);
        let v = sys::ggml_add(ctx, w, y);
        let out = sys::ggml_add(ctx, v, z);
        sys::ggml_set_output(out);
        let graph = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(graph, out);
        (ctx, graph, [x, y, z, w, v, out])
    }
}

/// Builds the graph, computes it twice on a new scheduler (`parallel`: with pipeline copies
/// and TESTA's events), checks `out = 2x + y + z` each time and returns the waits of the
/// second compute, after a `synchronize` (as llama.cpp reads its outputs between tokens).
fn run(mode: &str, parallel: bool) -> Waits {
    std::env::set_var("GGML_SCHED_INPUT_WAITS", mode);
    // SAFETY: the exported API with valid arguments throughout; each token's tensors live in
    // its own context, freed after the scheduler's reset of the next token or its free.
    unsafe {
        let mut backends = [backend(&raw mut DEV_A), backend(&raw mut DEV_CPU)];
        let sched = ggml_backend_sched_new(
            backends.as_mut_ptr(),
            null_mut(),
            backends.len() as c_int,
            64,
            parallel,
            false,
        );
        assert!(!sched.is_null());
        let mut waits = None;
        let mut ctxs = Vec::new();
        for token in 0..2 {
            // Built afresh for each token, as llama.cpp does: a split rewrites the graph's
            // sources to the scheduler's input copies.
            let (ctx, graph, [x, y, z, w, v, out]) = build();
            ctxs.push(ctx);
            ggml_backend_sched_reset(sched);
            ggml_backend_sched_set_tensor_backend(sched, w, backends[1]);
            ggml_backend_sched_set_tensor_backend(sched, v, backends[0]);
            ggml_backend_sched_set_tensor_backend(sched, out, backends[0]);
            assert!(ggml_backend_sched_alloc_graph(sched, graph));
            assert_eq!(ggml_backend_sched_get_n_splits(sched), 2, "{mode}");
            let set = |t: *mut ggml_tensor, base: f32| {
                let v: Vec<f32> = (0..N).map(|k| base + k as f32 + token as f32).collect();
                ggml_backend_tensor_set(t, v.as_ptr().cast(), 0, v.len() * 4);
            };
            set(x, 1.0);
            set(y, 100.0);
            set(z, 10_000.0);
            let before = counters();
            let st = ggml_backend_sched_graph_compute_async(sched, graph);
            let after = counters();
            assert_eq!(st, sys::GGML_STATUS_SUCCESS);
            ggml_backend_sched_synchronize(sched);
            let mut got = vec![0f32; N as usize];
            ggml_backend_tensor_get(out, got.as_mut_ptr().cast(), 0, got.len() * 4);
            for (k, &g) in got.iter().enumerate() {
                let t = (k + token) as f32;
                let want = 2.0 * (1.0 + t) + (100.0 + t) + (10_000.0 + t);
                assert_eq!(
                    g, want,
                    "{mode}, parallel {parallel}, token {token}, element {k}"
                );
            }
            waits = Some(Waits {
                sync_a: after[0] - before[0],
                sync_cpu: after[1] - before[1],
                event_sync: after[2] - before[2],
                event_wait: after[3] - before[3],
            });
        }
        ggml_backend_sched_free(sched);
        for b in backends {
            backend_free(b);
        }
        for ctx in ctxs {
            sys::ggml_free(ctx);
        }
        std::env::remove_var("GGML_SCHED_INPUT_WAITS");
        waits.unwrap()
    }
}

#[test]
fn one_host_wait_per_split() {
    // Serial: no events, every wait is a `synchronize`. Stock waits for TESTA four times in its
    // split (module doc); ours once. TESTCPU is waited for once (before `w`'s blocking copy,
    // as it may still be computing `w`) in both modes.
    let stock = run("input", false);
    let ours_serial = run("split", false);
    assert_eq!(
        stock,
        Waits {
            sync_a: 4,
            sync_cpu: 1,
            event_sync: 0,
            event_wait: 0
        }
    );
    assert_eq!(
        ours_serial,
        Waits {
            sync_a: 1,
            sync_cpu: 1,
            event_sync: 0,
            event_wait: 0
        }
    );

    // Parallel, TESTA with events (pipeline copies, and TESTA's events made by the device
    // below): stock makes a queue wait (`event_wait`) before the queued copy of `w`, and a
    // host wait (`event_synchronize`) before each blocking copy (`w`'s fallback, `y`, `z`).
    // Ours makes one host wait, before the queued copy: a queue wait on TESTA would not order
    // a copy that a backend runs on the source's queue (ggml-cuda between its devices).
    // SAFETY: this test binary's own copy of the device, changed before any scheduler that
    // would read it is made here; DEV_CPU keeps no events.
    unsafe {
        let dev = &raw mut DEV_A;
        (*dev).iface.event_new = Some(event_new);
        (*dev).iface.event_free = Some(event_free);
        (*dev).iface.event_synchronize = Some(event_synchronize);
    }
    let stock = run("input", true);
    let ours = run("split", true);
    assert_eq!(
        stock,
        Waits {
            sync_a: 0,
            sync_cpu: 1,
            event_sync: 3,
            event_wait: 1
        }
    );
    assert_eq!(
        ours,
        Waits {
            sync_a: 0,
            sync_cpu: 1,
            event_sync: 1,
            event_wait: 0
        }
    );

    // A value that is neither mode is named in a warning and reads `split`.
    assert_eq!(run("per-input", false), ours_serial);
}
