//! The rule's stop: the message that names an in-place writer no backend can run where its
//! storage is, with where each tensor is and what each backend lacks.

use ggml_sys::ggml_tensor;

use super::super::caps::Caps;
use super::super::inspect;
use super::super::table::Table;
use crate::ffi::c_name;
use crate::tensor::meta;

use super::{writes_sources_directly, written_sources};

/// Where a tensor's bytes are, for a message: its buffer's type when allocated, else the
/// backend it (or its view source) is placed on, else "not placed yet".
///
/// # Safety
/// `t` and its view source must be live.
unsafe fn whereabouts(caps: &dyn Caps, table: &Table, t: *mut ggml_tensor) -> String {
    // SAFETY: the caller's contract.
    let (tr, buf) = unsafe { (&*t, meta::storage_buffer(&*t)) };
    if !buf.is_null() {
        // SAFETY: a live tensor's storage buffer is live, and so is its type.
        return format!("in buffer type {}", unsafe { caps.buft_name((*buf).buft) });
    }
    match table.backend(t).or_else(|| table.backend(tr.view_src)) {
        Some(b) => format!("in {}'s compute buffer", caps.backend_name(b)),
        None => "not placed yet".to_string(),
    }
}

/// The message of [`stop_written`]: the writer, its root and the sources it writes in place
/// with where each is, then per backend whether it can hold the root where it is (uses the
/// allocated root's buffer type, or, for a root produced in this graph, runs every op of
/// the `group`: the root's producer and its writers, which must share one backend), reads
/// the written sources without a copy, and runs the writer's op.
///
/// # Safety
/// `w` must be a live in-place writer with live sources; `root_buft` NULL or live; the
/// `group`'s tensors live.
pub(super) unsafe fn written_stop_message(
    caps: &dyn Caps,
    table: &Table,
    w: *mut ggml_tensor,
    root_buft: ggml_sys::ggml_backend_buffer_type_t,
    group: &[*mut ggml_tensor],
) -> String {
    // SAFETY: `w` is live (this function's contract); only read.
    let wr = unsafe { &*w };
    // SAFETY: as above; `ggml_op_desc` returns a static NUL-terminated name.
    let op = unsafe { inspect::cstr(ggml_sys::ggml_op_desc(w)) };
    let written: Vec<String> = written_sources(wr)
        .iter()
        .filter(|s| !s.is_null())
        .map(|&s| {
            // SAFETY: non-NULL sources of a live tensor are live, with their view sources.
            let (name, place) = unsafe { (inspect::name(&*s), whereabouts(caps, table, s)) };
            format!("'{name}' ({place})")
        })
        .collect();
    let root_column = if root_buft.is_null() {
        "runs the root's producer and every writer"
    } else {
        "uses the root's buffer type"
    };
    let report = (0..caps.n_backends())
        .map(|b| {
            let root = if root_buft.is_null() {
                // SAFETY: the group's tensors are live (this function's contract).
                group.iter().all(|&m| unsafe { caps.supports_op(b, m) })
            } else {
                // SAFETY: `root_buft` is live (this function's contract).
                unsafe { caps.supports_buft(b, root_buft) }
            };
            // SAFETY: `w` and its sources are live (as above).
            let sources = unsafe { writes_sources_directly(caps, table, wr, b) };
            // SAFETY: `w` is live.
            let runs = unsafe { caps.supports_op(b, w) };
            let yn = |x: bool| if x { "yes" } else { "no" };
            format!(
                "{} ({root_column}: {}, reads the written sources without a copy: {}, runs the \
                 op: {})",
                caps.backend_name(b),
                yn(root),
                yn(sources),
                yn(runs)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    // SAFETY: an in-place writer's view source is set and live.
    let root = unsafe { &*wr.view_src };
    let root_where = if root_buft.is_null() {
        "produced in this graph".to_string()
    } else {
        // SAFETY: non-NULL here, and live (this function's contract).
        format!("in buffer type {}", unsafe { caps.buft_name(root_buft) })
    };
    format!(
        "in-place node '{}' (op {}) writes the storage of '{}' ({}) and of its sources {}; no \
         backend can hold all of them where they are and run the op, and a copy of a written \
         source would take its update; backends: {}",
        inspect::name(wr),
        op,
        inspect::name(root),
        root_where,
        written.join(", "),
        report
    )
}

/// Stops the process with [`written_stop_message`]: no backend can write the storage of
/// `w`'s view root (allocated in `root_buft`, or produced in this graph when NULL, with the
/// rest of its `group`) and the sources `w` writes in place, and run its op.
///
/// # Safety
/// As [`written_stop_message`].
#[cold]
pub(super) unsafe fn stop_written(
    caps: &dyn Caps,
    table: &Table,
    w: *mut ggml_tensor,
    root_buft: ggml_sys::ggml_backend_buffer_type_t,
    group: &[*mut ggml_tensor],
) -> ! {
    // SAFETY: the caller's contract, forwarded.
    let msg = unsafe { written_stop_message(caps, table, w, root_buft, group) };
    crate::ffi::fatal(c_name!(sched::ggml_backend_sched_split_graph), &msg)
}

/// One line per backend for the stop message: name, whether it can use `buft`, whether it
/// runs `op`.
///
/// # Safety
/// `buft` and `ops` must be live.
unsafe fn backends_report(
    caps: &dyn Caps,
    buft: ggml_sys::ggml_backend_buffer_type_t,
    ops: &[*mut ggml_tensor],
) -> String {
    (0..caps.n_backends())
        .map(|b| {
            // SAFETY: `buft` is non-NULL here and live (this function's contract).
            let uses = !buft.is_null() && unsafe { caps.supports_buft(b, buft) };
            // SAFETY: the ops are live (this function's contract).
            let runs = ops.iter().all(|&o| unsafe { caps.supports_op(b, o) });
            format!(
                "{} (uses buffer: {}, runs op: {})",
                caps.backend_name(b),
                if uses { "yes" } else { "no" },
                if runs { "yes" } else { "no" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Stops the process: no backend can both use the storage and run the writer.
///
/// # Safety
/// `w` must be a live in-place writer (so its view source is set and live), `buft` NULL or
/// live, `ops` live.
pub(crate) unsafe fn stop(
    caps: &dyn Caps,
    w: *mut ggml_tensor,
    buft: ggml_sys::ggml_backend_buffer_type_t,
    ops: &[*mut ggml_tensor],
) -> ! {
    let what = if buft.is_null() {
        "is produced in this graph, and no backend runs both its producer and its writers"
            .to_string()
    } else {
        format!(
            "is in buffer type {}, and no backend can both use that buffer type and run the op",
            // SAFETY: non-NULL here, and live (this function's contract).
            unsafe { caps.buft_name(buft) }
        )
    };
    // SAFETY: `w` is live (this function's contract); only read.
    let wr = unsafe { &*w };
    // SAFETY: `w` is live; `ggml_op_desc` returns a static NUL-terminated name.
    let op = unsafe { inspect::cstr(ggml_sys::ggml_op_desc(w)) };
    // SAFETY: an in-place writer's view source is set and live (this function's contract).
    let root = unsafe { &*wr.view_src };
    // SAFETY: `buft` and `ops` as this function's contract says.
    let report = unsafe { backends_report(caps, buft, ops) };
    crate::ffi::fatal(
        c_name!(sched::ggml_backend_sched_split_graph),
        &format!(
            "in-place node '{}' (op {}) writes the storage of '{}', which {}; backends: {}",
            inspect::name(wr),
            op,
            inspect::name(root),
            what,
            report
        ),
    )
}
