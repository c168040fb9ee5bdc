//! TESTA as a device whose work waits in a queue until `synchronize` (or an event's
//! `synchronize`), like a GPU that has not got to it yet, and TESTCPU, which computes at once
//! (the devices are `tests/common/devices.rs`'s, which the including test also includes).
//! TESTA's `cpy_tensor_async` accepts a source in host memory (into memory TESTA computes in)
//! and reads it only when the queue runs the copy, as ggml-vulkan's does from a pinned host
//! buffer; its graph compute queues each ADD, reading and writing when the queue runs it, and
//! fails while [`FAIL_A_COMPUTE`] is set. Shared by
//! `tests/sched_queued_copy.rs` and `tests/sched_direct_writes.rs`; each test binary has its
//! own queue.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use ggml_base::backend::ggml_backend_supports_buft;
use ggml_base::buffer::*;
use ggml_sys as sys;
use ggml_sys::{ggml_backend_t, ggml_cgraph, ggml_tensor};

use super::devices::*;

/// One piece of TESTA's queued work: copy `n` bytes, or add `n` floats.
#[derive(Clone, Copy)]
pub enum Op {
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
pub static QUEUE: Mutex<(Vec<Op>, usize)> = Mutex::new((Vec::new(), 0));
/// TESTA's `synchronize` calls.
pub static SYNCS_A: AtomicUsize = AtomicUsize::new(0);
/// Copies TESTA accepted to queue.
pub static QUEUED_COPIES: AtomicUsize = AtomicUsize::new(0);
/// TESTA's compute queues its ADDs and then reports failure while set.
pub static FAIL_A_COMPUTE: AtomicBool = AtomicBool::new(false);

/// Queues `op` on TESTA; it runs at TESTA's next `synchronize` (or an event's).
pub fn push(op: Op) {
    QUEUE.lock().unwrap().0.push(op);
}

/// Runs TESTA's queued ops up to (not including) position `upto`.
pub fn run_to(upto: usize) {
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

/// How many ops have been queued on TESTA so far (run or not).
pub fn queue_len() -> usize {
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
    if FAIL_A_COMPUTE.load(Ordering::SeqCst) {
        return sys::GGML_STATUS_FAILED;
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

/// Accepts a copy from any host buffer into a buffer type TESTA computes in, and queues it.
unsafe extern "C" fn a_cpy_async(
    _: ggml_backend_t,
    a: ggml_backend_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    // SAFETY: live, allocated tensors (the scheduler's split input and its copy); `a` is the
    // TESTA backend this callback belongs to.
    unsafe {
        if !ggml_backend_buffer_is_host((*src).buffer)
            || !ggml_backend_supports_buft(a, (*(*dst).buffer).buft)
        {
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

/// Gives TESTA's device the events below (`on`), or none (the scheduler then makes none, and
/// pipeline copies wait with `synchronize`).
///
/// # Safety
/// No scheduler may be alive, nor another thread using the devices.
pub unsafe fn events_on_a(on: bool) {
    let dev = &raw mut DEV_A;
    // SAFETY: this test binary's own copy of the device, not in use (the caller's contract).
    let iface = unsafe { &mut (*dev).iface };
    iface.event_new = if on { Some(event_new) } else { None };
    iface.event_free = if on { Some(event_free) } else { None };
    iface.event_synchronize = if on { Some(event_synchronize) } else { None };
}

/// TESTA's events: the queue position at their last record.
pub unsafe extern "C" fn event_new(dev: sys::ggml_backend_dev_t) -> sys::ggml_backend_event_t {
    Box::into_raw(Box::new(sys::ggml_backend_event {
        device: dev,
        context: Box::into_raw(Box::new(0usize)).cast(),
    }))
}

pub unsafe extern "C" fn event_free(_: sys::ggml_backend_dev_t, e: sys::ggml_backend_event_t) {
    // SAFETY: made by Box in `event_new`, with a boxed position as context.
    unsafe {
        drop(Box::from_raw((*e).context.cast::<usize>()));
        drop(Box::from_raw(e));
    }
}

pub unsafe extern "C" fn event_synchronize(
    _: sys::ggml_backend_dev_t,
    e: sys::ggml_backend_event_t,
) {
    // SAFETY: an event made by `event_new`.
    run_to(unsafe { *(*e).context.cast::<usize>() });
}

unsafe extern "C" fn event_record(_: ggml_backend_t, e: sys::ggml_backend_event_t) {
    // SAFETY: an event made by `event_new`.
    unsafe { *(*e).context.cast::<usize>() = queue_len() };
}

/// TESTA's queue runs in order: a queue wait orders nothing more.
unsafe extern "C" fn event_wait(_: ggml_backend_t, _: sys::ggml_backend_event_t) {}

/// A TESTA backend whose compute, `get_tensor_async` and `cpy_tensor_async` queue their
/// work; freed by its `free` ([`backend_free`]).
pub fn backend_a() -> ggml_backend_t {
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

/// A TESTCPU backend that computes at once (its `synchronize` does nothing); freed by its
/// `free` ([`backend_free`]).
pub fn backend_cpu() -> ggml_backend_t {
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
