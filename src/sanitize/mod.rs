//! `GGML_SCHED_SANITIZE`: a happens-before sanitizer for the accesses the backend layer and
//! the scheduler make or order (issue 14). Not in stock.
//!
//! Actors are the host and each backend; each has a vector clock ([`model`]). Queueing work
//! on a backend orders it after everything the host did before; `ggml_backend_synchronize`
//! joins the backend's clock into the host's; `ggml_backend_event_record` snapshots the
//! backend's clock, `ggml_backend_event_wait` and `ggml_backend_event_synchronize` join the
//! snapshot. Accesses: a graph computed on a backend (a scheduler split or a direct
//! `ggml_backend_graph_compute`) reads the bytes of every source of its non-view nodes and
//! writes each node's bytes (and the moments `OPT_STEP_ADAMW` updates besides); a copy reads
//! its source and writes its destination on the queue that performs it (the host for
//! blocking copies; for `cpy_tensor_async` the destination's queue, ordered after the source
//! backend's queued work, as that callback promises);
//! `ggml_backend_tensor_set/get/memset` are host accesses, their `_async` forms accesses of the
//! backend's queue. Shadow state is kept per buffer as byte intervals (last writer, readers
//! since); weight buffers (usage WEIGHTS) are left out. Each read after an unordered write,
//! write after an unordered read and write after an unordered write is reported, naming both
//! accesses and what should have ordered them; so is a split input copy read after its source
//! tensor was written again in the same graph (a stale copy).
//!
//! Levels: unset or `0`/`off`/`no`/`false`: off (one predictable branch per hook); `1` (or
//! `on`/`yes`/`true`): abort at the first report through `ggml_abort`; `2`: log every report
//! (ggml's logger, error level) and go on. Any other value is named in a warning and the
//! sanitizer runs at level 2: a check that was asked for is never silently off, and a typo
//! never aborts a run. At exit, a line on stderr gives the accesses checked and the reports.
//!
//! What it cannot see: host writes and reads through `tensor->data` that bypass the backend
//! API (llama.cpp fills many host-buffer graph inputs that way), work a backend does that is
//! not a graph, copy or data call of this layer, and orderings a device makes internally
//! beyond the documented ones (it trusts `cpy_tensor_async` to order after the source
//! backend, as CUDA's and HRX's do).

pub mod fault;
pub mod hooks;
pub mod model;

use std::sync::atomic::{AtomicU8, Ordering};

use ggml_sys::{ggml_backend, ggml_backend_event, ggml_backend_event_t, ggml_cgraph, ggml_tensor};

pub use model::Kind;

const OFF: u8 = 0;
const UNREAD: u8 = 255;

/// The level, read from the environment on the first hook (`UNREAD` until then).
static LEVEL: AtomicU8 = AtomicU8::new(UNREAD);

/// The variable's values: off, abort at the first report (1), log every report (2).
fn parse(text: &str) -> Result<u8, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "0" | "off" | "no" | "false" => Ok(0),
        "1" | "on" | "yes" | "true" => Ok(1),
        "2" => Ok(2),
        _ => Err(
            "is not a sanitizer level (0 off, 1 abort at the first report, 2 log every \
                  report and go on)"
                .into(),
        ),
    }
}

/// Prints the exit line: how many accesses were checked and reports made.
extern "C" fn at_exit() {
    // No unwinding out of an atexit handler: the line is best effort.
    let _ = std::panic::catch_unwind(|| {
        if let Some((checked, reports)) = hooks::totals() {
            eprintln!(
                "{}: {checked} accesses checked, {reports} reports",
                hooks::NAME
            );
        }
    });
}

/// Reads the level when the library is loaded, before any exported function runs and before
/// the application installs a log callback: a refused value is then named on stderr even in a
/// program (llama.cpp's tools) that silences ggml's logger while it first loads a model.
/// ELF only; elsewhere, and in unit tests, the first hook reads it.
#[cfg(all(not(test), target_os = "linux"))]
#[used]
#[link_section = ".init_array"]
static READ_LEVEL_AT_LOAD: extern "C" fn() = {
    extern "C" fn read() {
        init();
    }
    read
};

#[cold]
#[inline(never)]
fn init() -> bool {
    // The test-only fault switch is read here too, so that a garbage value is named in every
    // process, not only in one that reaches a split without inputs.
    fault::fault();
    // Unset is off; set, a value `parse` refuses is named in a warning and reads 2.
    let l = if std::env::var_os("GGML_SCHED_SANITIZE").is_none() {
        OFF
    } else {
        crate::env::read(
            "GGML_SCHED_SANITIZE",
            2,
            "2 (log every report and go on)",
            parse,
        )
    };
    if LEVEL
        .compare_exchange(UNREAD, l, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
        && l != OFF
    {
        // SAFETY: registers a plain extern "C" function with no arguments, as atexit takes;
        // the library stays mapped until exit (libggml-base is a link-time dependency).
        unsafe { libc::atexit(at_exit) };
        crate::ffi::log::info(&format!(
            "{}: on, level {l} ({})\n",
            hooks::NAME,
            if l == 1 {
                "abort at the first report"
            } else {
                "log every report"
            }
        ));
    }
    LEVEL.load(Ordering::Relaxed) != OFF
}

/// Whether the sanitizer is on: after the first call, one load and one predictable branch.
#[inline(always)]
pub fn on() -> bool {
    let l = LEVEL.load(Ordering::Relaxed);
    l != OFF && (l != UNREAD || init())
}

/// The level (0, 1 or 2) once read.
pub fn level() -> u8 {
    LEVEL.load(Ordering::Relaxed)
}

/// `ggml_backend_synchronize(b)` returned.
#[inline(always)]
pub fn synchronize(b: &ggml_backend) {
    if on() {
        hooks::synchronize(b)
    }
}

/// `ggml_backend_event_record(e, b)`.
#[inline(always)]
pub fn event_record(e: ggml_backend_event_t, b: &ggml_backend) {
    if on() {
        hooks::event_record(e, b)
    }
}

/// `ggml_backend_event_wait(b, e)`.
#[inline(always)]
pub fn event_wait(b: &ggml_backend, e: ggml_backend_event_t) {
    if on() {
        hooks::event_wait(b, e)
    }
}

/// `ggml_backend_event_synchronize(e)` returned.
#[inline(always)]
pub fn event_synchronize(e: &ggml_backend_event) {
    if on() {
        hooks::event_synchronize(e)
    }
}

/// Buffer `buf` is being freed.
#[inline(always)]
pub fn buffer_free(buf: *const ggml_sys::ggml_backend_buffer) {
    if on() {
        hooks::buffer_free(buf as usize)
    }
}

/// A data access of `size` bytes at `offset` of `t`, by `queue`'s queue or the host.
#[inline(always)]
pub fn data(
    queue: Option<&ggml_backend>,
    kind: Kind,
    t: &ggml_tensor,
    offset: usize,
    size: usize,
    func: &str,
) {
    if on() {
        hooks::data(queue, kind, t, offset, size, func)
    }
}

/// A blocking copy of all of `src` into `dst` by the host.
#[inline(always)]
pub fn host_copy(src: &ggml_tensor, dst: &ggml_tensor, func: &str) {
    if on() {
        hooks::host_copy(src, dst, func)
    }
}

/// A copy accepted by `dst_b`'s `cpy_tensor_async`.
#[inline(always)]
pub fn queued_copy(
    src_b: Option<&ggml_backend>,
    dst_b: &ggml_backend,
    src: &ggml_tensor,
    dst: &ggml_tensor,
    func: &str,
) {
    if on() {
        hooks::queued_copy(src_b, dst_b, src, dst, func)
    }
}

/// A graph queued on `b`.
///
/// # Safety
/// `g` must be NULL or a live graph of live tensors.
#[inline(always)]
pub unsafe fn graph_compute(b: &ggml_backend, g: *const ggml_cgraph) {
    if on() {
        // SAFETY: the caller's contract.
        unsafe { hooks::graph_compute(b, g) }
    }
}

/// The scheduler begins (true) or ends (false) computing a graph's splits.
#[inline(always)]
pub fn sched_graph(begin: bool) {
    if on() {
        hooks::sched_graph(begin)
    }
}

/// The scheduler starts split `split` with `n_inputs` inputs.
#[inline(always)]
pub fn sched_split(split: usize, n_inputs: usize) {
    if on() {
        hooks::sched_split(split, n_inputs)
    }
}

/// The scheduler copies input `k` of the current split next (`None`: copies done).
#[inline(always)]
pub fn sched_input(k: Option<usize>) {
    if on() {
        hooks::sched_input(k)
    }
}

/// The current split's nodes from `base` on are computed next.
#[inline(always)]
pub fn sched_nodes_from(base: usize) {
    if on() {
        hooks::sched_nodes_from(base)
    }
}

/// The scheduler copied `input` into `cpy` (`queued`: by `cpy_tensor_async` of the second
/// backend, from the first).
#[inline(always)]
pub fn sched_copied(
    input: &ggml_tensor,
    cpy: &ggml_tensor,
    queued: Option<(Option<&ggml_backend>, &ggml_backend)>,
) {
    if on() {
        hooks::sched_copied(input, cpy, queued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_garbage_is_refused() {
        for (t, l) in [
            ("0", 0),
            ("off", 0),
            ("1", 1),
            (" on ", 1),
            ("2", 2),
            ("TRUE", 1),
        ] {
            assert_eq!(parse(t), Ok(l), "{t:?}");
        }
        for bad in ["", "3", "log", "abort", "-1"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
