//! The backend (stream) of an HRX device: async transfers, graph compute on the device
//! queue, events and synchronize.
//!
//! `graph_compute` walks the split it is given in order. View ops and `GGML_OP_NONE` need
//! no work; every other node must be claimed (else the compute fails with
//! `GGML_STATUS_FAILED` and a message naming the node, its op and shapes). For each claimed
//! node it resolves where the node and its sources live (device memory, host-visible
//! memory, or a host weight materialized by the arena). The claimed nodes of a split are
//! queued as one job, run in order by the device; a source produced by an earlier node of
//! the job is linked to that node, and each node carries its use count from the original
//! graph, so fusions such as `RMS_NORM+MUL` happen exactly where they would on the CPU.
//! When the arena needs room that the current job's weights pin, the job is submitted
//! first and a new one starts (evictions are queued after it, so nothing it reads is
//! overwritten). A runtime that reads its sources after `execute` returns gets copies of
//! the host memory a job reads, taken as the job is built ([`ExecJob::host_copies`]): the
//! host may write it again as soon as `graph_compute` returns.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;

use ggml_sys::*;

use crate::arena::{ArenaError, WeightKey};
use crate::buffer;
use crate::claims::{self, Claim};
use crate::context::Device;
use crate::event::event_of;
use crate::ffi::{guard, non_null};
use crate::ggml::buft_is_host;
use crate::runtime::hash_set;
use crate::runtime::{ExecJob, HostSrc, Loc, NodeJob, SendPtr};

struct Stream {
    dev: &'static Device,
}

/// Creates a backend (stream) on `dev`.
pub fn new_backend(dev: &'static Device) -> ggml_backend_t {
    let guid = Box::leak(Box::new(guid()));
    let ctx = Box::into_raw(Box::new(Stream { dev })) as *mut c_void;
    Box::into_raw(Box::new(ggml_backend {
        guid,
        iface: backend_iface(),
        device: dev.dev(),
        context: ctx,
    }))
}

/// The HRX backend GUID.
pub fn guid() -> ggml_guid {
    *b"HRX-sim-backend\0"
}

/// Whether `backend` is an HRX backend (checked by GUID).
///
/// # Safety
/// `backend` is NULL or a live backend.
pub unsafe fn is_hrx(backend: ggml_backend_t) -> bool {
    // SAFETY: `backend` is not NULL (checked first), so live by the contract of `is_hrx`; a
    // backend's `guid`, checked non-NULL, points to its 16 bytes.
    !backend.is_null() && unsafe { !(*backend).guid.is_null() && *(*backend).guid == guid() }
}

fn backend_iface() -> ggml_backend_i {
    ggml_backend_i {
        get_name: Some(be_get_name),
        free: Some(be_free),
        set_tensor_async: Some(be_set_tensor_async),
        get_tensor_async: Some(be_get_tensor_async),
        set_tensor_2d_async: None,
        get_tensor_2d_async: None,
        cpy_tensor_async: Some(be_cpy_tensor_async),
        synchronize: Some(be_synchronize),
        graph_plan_create: None,
        graph_plan_free: None,
        graph_plan_update: None,
        graph_plan_compute: None,
        graph_compute: Some(be_graph_compute),
        event_record: Some(be_event_record),
        event_wait: Some(be_event_wait),
        graph_optimize: None,
    }
}

/// # Safety
/// `b` is one of this library's backends.
unsafe fn stream<'a>(b: ggml_backend_t) -> &'a Stream {
    // SAFETY: our backends' context is a Stream.
    unsafe { &*(non_null(b, "backend").context as *const Stream) }
}

unsafe extern "C" fn be_get_name(b: ggml_backend_t) -> *const c_char {
    guard("ggml_backend_hrx_get_name", || {
        // SAFETY: ggml passes one of our backends.
        unsafe { stream(b) }.dev.name.as_ptr()
    })
}

unsafe extern "C" fn be_free(b: ggml_backend_t) {
    guard("ggml_backend_hrx_free", || {
        // SAFETY: ggml frees each backend once; all parts came from Box::into_raw/leak.
        unsafe {
            let s = Box::from_raw((*b).context as *mut Stream);
            // free has no error result and ggml's callers expect it to return: the failure
            // of work queued since the last synchronize is logged, not dropped
            if let Err(e) = s.dev.rt.synchronize() {
                crate::log::error(&format!(
                    "HRX: {}: queued work failed (found as the backend was freed): {e}\n",
                    s.dev.name.to_string_lossy()
                ));
            }
            let stats = s.dev.arena.lock().stats();
            let mut r = s.dev.reporter.lock();
            r.finish(&stats);
            r.exit_summary(&stats, s.dev.rt.weight_uploads());
            drop(Box::from_raw((*b).guid));
            drop(Box::from_raw(b));
        }
    })
}

/// The buffer of `t`'s storage: its view source's for a view, else its own.
fn root_buffer(t: &ggml_tensor) -> ggml_backend_buffer_t {
    if t.view_src.is_null() {
        t.buffer
    } else {
        // SAFETY: view_src of a live tensor is live.
        unsafe { (*t.view_src).buffer }
    }
}

unsafe extern "C" fn be_set_tensor_async(
    b: ggml_backend_t,
    t: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    guard("ggml_backend_hrx_set_tensor_async", || {
        // SAFETY: ggml passes our backend, a live tensor and `size` readable bytes.
        let (s, tr) = unsafe { (stream(b), non_null(t, "tensor")) };
        let buf = root_buffer(tr);
        // SAFETY: live buffer.
        if unsafe { buffer::is_device_buffer_of(buf, s.dev) } {
            // checked as the buffer's own set_tensor checks it, before anything is read
            // SAFETY: one of our device buffers.
            let at = unsafe { buffer::device_range(buf, tr, offset, size) };
            // SAFETY: `size` readable bytes; copied now, so the caller may reuse them.
            let bytes = unsafe { std::slice::from_raw_parts(data as *const u8, size) }.to_vec();
            s.dev.rt.upload(at, HostSrc::Owned(bytes));
        } else {
            // not ours: finish queued work, then the buffer's own synchronous path
            sync_or_abort(s.dev);
            // SAFETY: a live buffer's interface.
            unsafe { ((*buf).iface.set_tensor.expect("set_tensor"))(buf, t, data, offset, size) };
        }
    })
}

unsafe extern "C" fn be_get_tensor_async(
    b: ggml_backend_t,
    t: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    guard("ggml_backend_hrx_get_tensor_async", || {
        // SAFETY: ggml passes our backend, a live tensor and `size` writable bytes kept
        // valid until synchronize.
        let (s, tr) = unsafe { (stream(b), non_null(t, "tensor")) };
        let buf = root_buffer(tr);
        // SAFETY: live buffer.
        if unsafe { buffer::is_device_buffer_of(buf, s.dev) } {
            // SAFETY: one of our device buffers.
            let at = unsafe { buffer::device_range(buf, tr, offset, size) };
            s.dev.rt.download(at, SendPtr(data), size);
        } else {
            sync_or_abort(s.dev);
            // SAFETY: a live buffer's interface.
            unsafe { ((*buf).iface.get_tensor.expect("get_tensor"))(buf, t, data, offset, size) };
        }
    })
}

unsafe extern "C" fn be_cpy_tensor_async(
    _src_b: ggml_backend_t,
    dst_b: ggml_backend_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    guard("ggml_backend_hrx_cpy_tensor_async", || {
        // SAFETY: ggml passes live tensors; dst_b is ours (this is its interface).
        unsafe {
            if !is_hrx(dst_b) {
                return false;
            }
            let s = stream(dst_b);
            let d = non_null(dst, "dst");
            if !buffer::is_device_buffer_of(root_buffer(d), s.dev) {
                return false;
            }
            buffer::copy_into_device(s.dev, non_null(src, "src"), d, true)
        }
    })
}

unsafe extern "C" fn be_synchronize(b: ggml_backend_t) {
    guard("ggml_backend_hrx_synchronize", || {
        // SAFETY: ggml passes one of our backends.
        let s = unsafe { stream(b) };
        s.dev.host_writes_queued.store(false, Ordering::Relaxed);
        s.dev.weight_writes_queued.store(false, Ordering::Relaxed);
        sync_or_abort(s.dev);
    })
}

/// Waits for the device's queue. Work that failed there is fatal: the callers have no error
/// result, and would hand on what the failed work left (a download never made, a compute
/// half done) as results; so, as ggml does on a failed assertion, the failure is logged and
/// the process aborts ([`crate::ffi::fatal`]).
fn sync_or_abort(dev: &Device) {
    if let Err(e) = dev.rt.synchronize() {
        crate::ffi::fatal(&format!(
            "HRX: {}: queued work failed: {e}\n",
            dev.name.to_string_lossy()
        ));
    }
}

unsafe extern "C" fn be_event_record(b: ggml_backend_t, ev: ggml_backend_event_t) {
    guard("ggml_backend_hrx_event_record", || {
        // SAFETY: ggml passes our backend and one of our events.
        let (s, e) = unsafe { (stream(b), event_of(ev)) };
        let seq = e.begin_record();
        s.dev.rt.signal(e, seq);
    })
}

unsafe extern "C" fn be_event_wait(b: ggml_backend_t, ev: ggml_backend_event_t) {
    guard("ggml_backend_hrx_event_wait", || {
        // SAFETY: ggml passes our backend and one of our events.
        let (s, e) = unsafe { (stream(b), event_of(ev)) };
        let seq = e.recorded();
        s.dev.rt.wait(e, seq);
    })
}

unsafe extern "C" fn be_graph_compute(b: ggml_backend_t, g: *mut ggml_cgraph) -> ggml_status {
    guard("ggml_backend_hrx_graph_compute", || {
        // SAFETY: ggml passes our backend and a live graph.
        let (s, g) = unsafe { (stream(b), non_null(g, "graph")) };
        match compute(s.dev, g) {
            Ok(()) => GGML_STATUS_SUCCESS,
            Err(e) => {
                crate::log::error(&format!(
                    "HRX: {}: graph_compute failed: {e}\n",
                    s.dev.name.to_string_lossy()
                ));
                GGML_STATUS_FAILED
            }
        }
    })
}

fn is_empty(t: &ggml_tensor) -> bool {
    t.ne.contains(&0)
}

/// Why a node could not be prepared.
enum PrepError {
    /// The arena has no room while the current job pins its weights: submit the job and
    /// retry with an empty pin list.
    NoRoom,
    /// A real failure, with its message.
    Fatal(String),
}

fn compute(dev: &'static Device, g: &ggml_cgraph) -> Result<(), String> {
    let n = g.n_nodes.max(0) as usize;
    let nodes: &[*mut ggml_tensor] = if n == 0 || g.nodes.is_null() {
        &[]
    } else {
        // SAFETY: a graph's node array has n_nodes entries.
        unsafe { std::slice::from_raw_parts(g.nodes, n) }
    };
    let label = |first: usize| {
        format!(
            "{} split starting at node {first}",
            dev.name.to_string_lossy()
        )
    };
    let mut ran: Vec<*const ggml_tensor> = Vec::with_capacity(n);
    let mut b = Building::new(label(0));
    for (i, &np) in nodes.iter().enumerate() {
        // SAFETY: graph nodes are live tensors.
        let node = unsafe { &*np };
        ran.push(np);
        if claims::is_view_op(node.op)
            || is_empty(node)
            || node.flags & GGML_TENSOR_FLAG_COMPUTE as i32 == 0
        {
            continue;
        }
        if let Claim::No(why) = claims::claim(node, &|n| dev.rt.supports(n)) {
            // SAFETY: live tensors.
            let desc = unsafe { crate::ggml::describe(node) };
            let srcs: Vec<String> = node
                .src
                .iter()
                .filter(|p| !p.is_null())
                // SAFETY: live sources.
                .map(|&p| unsafe { crate::ggml::describe(p) })
                .collect();
            // what was queued before the bad node still runs, as ggml expects of a backend
            // that stops at a failing node
            b.flush(dev, label(i));
            return Err(format!(
                "node {i} {desc} is not claimed by {} ({why}); sources: [{}]",
                dev.name.to_string_lossy(),
                srcs.join(", ")
            ));
        }
        // SAFETY: `g` is a live graph (view).
        let uses = unsafe { hash_set::use_count(g, np) };
        let nj = match prepare(dev, node, &mut b) {
            Ok(nj) => nj,
            Err(PrepError::NoRoom) => {
                // make room: run what is queued, then only this node pins its weights
                b.flush(dev, label(i));
                match prepare(dev, node, &mut b) {
                    Ok(nj) => nj,
                    Err(PrepError::NoRoom) => {
                        dev.arena.lock().note_refusal();
                        return Err(format!(
                            "node {i} {}: its host weights together exceed the host-weight budget (GGML_HRX_HOST_WEIGHT_LIMIT_MB)",
                            // SAFETY: live tensor.
                            unsafe { crate::ggml::describe(node) }
                        ));
                    }
                    Err(PrepError::Fatal(e)) => return Err(e),
                }
            }
            Err(PrepError::Fatal(e)) => {
                b.flush(dev, label(i));
                return Err(e);
            }
        };
        let Prepared {
            job: mut nj,
            writes,
            writes_weights,
        } = nj;
        nj.use_count = uses;
        if writes_weights {
            // the arena's copies of what the node writes are stale once the job has run
            // (a graph may write its own weights: SET_ROWS into one, an optimizer step)
            let mut arena = dev.arena.lock();
            for &(at, n) in &writes {
                arena.mark_written(at, n);
            }
            b.weight_writes = true;
        }
        // the job runs in order: a later node reads these bytes in place, not from a copy
        // taken before this node wrote them
        b.host_writes.extend(writes);
        b.in_job.insert(np as usize, b.job.nodes.len());
        b.job.nodes.push(nj);
    }
    b.flush(dev, label(n));
    if dev.reporter.lock().enabled() {
        let stats = dev.arena.lock().stats();
        dev.reporter.lock().on_compute(g, &ran, &stats);
    }
    Ok(())
}

/// The job being built, and what the layer tracks about it until it is submitted.
#[derive(Default)]
struct Building {
    job: ExecJob,
    /// Original node -> index in `job.nodes`.
    in_job: HashMap<usize, usize>,
    /// Host weights the job reads through the arena.
    pinned: Vec<WeightKey>,
    /// Host memory the job's nodes write, `(address, bytes)`.
    host_writes: Vec<(usize, usize)>,
    /// Whether some of `host_writes` lie in host weights.
    weight_writes: bool,
}

impl Building {
    /// An empty job labelled `label`.
    fn new(label: String) -> Building {
        Building {
            job: ExecJob {
                label,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Submits the job built so far (if any) and starts a new one labelled `next`; notes on
    /// the device whether the job writes host memory.
    fn flush(&mut self, dev: &Device, next: String) {
        if !self.host_writes.is_empty() {
            dev.host_writes_queued.store(true, Ordering::Relaxed);
        }
        if self.weight_writes {
            dev.weight_writes_queued.store(true, Ordering::Relaxed);
        }
        let done = std::mem::replace(self, Building::new(next)).job;
        if !done.nodes.is_empty() {
            dev.rt.execute(done);
        }
    }
}

/// A node ready to queue, and the host memory it writes.
struct Prepared {
    job: NodeJob,
    /// `(address, bytes)` of each host location the node writes: the node itself, and the
    /// sources its op updates in place ([`written_sources`]).
    writes: Vec<(usize, usize)>,
    /// Whether one of `writes` lies in a host buffer of usage WEIGHTS (the arena may hold a
    /// copy of those bytes).
    writes_weights: bool,
}

/// Builds the shadow copies of `node` and its sources. A source that is a node of the
/// current job is linked to that node's shadow instead of copied (so the kernels see the
/// producer itself, as in the original graph: what lets the CPU kernels fuse
/// `RMS_NORM+MUL` exactly as they do in a CPU-only run). For a runtime that reads its
/// sources after `execute` returns, a source in host memory is read from the job's copy of
/// it (`b.job`), taken now ([`ExecJob::host_copies`]), unless a node of the job writes those
/// bytes first (`b.host_writes`: the job runs in order, so it reads them in place); a queued
/// job that writes host memory is waited for before the copy. A source the op writes
/// ([`written_sources`]) is located as the node is, in place, and returned among the
/// node's host writes: a kernel's writes into a copy would be lost.
fn prepare(
    dev: &'static Device,
    node: &ggml_tensor,
    b: &mut Building,
) -> Result<Prepared, PrepError> {
    let mut job = NodeJob {
        tensors: vec![*node],
        locs: Vec::new(),
        sizes: Vec::new(),
        srcs: Vec::new(),
        node_srcs: Vec::new(),
        use_count: None,
    };
    let written = written_sources(node.op);
    // the host memory the node writes, known before its sources are located: a host weight
    // it writes is read in place, not through the arena's copy (see `locate`)
    let mut writes = Vec::new();
    let mut writes_weights = false;
    let outputs = node
        .src
        .iter()
        .enumerate()
        .filter(|&(slot, p)| written.contains(&slot) && !p.is_null())
        .map(|(_, &p)| p as *const ggml_tensor);
    for tp in std::iter::once(node as *const ggml_tensor).chain(outputs) {
        // SAFETY: the node and its sources are live tensors.
        if let Some((at, n, weights)) = unsafe { host_output(dev, &*tp) } {
            writes.push((at, n));
            writes_weights |= weights;
        }
    }
    // SAFETY: live tensor.
    job.sizes.push(unsafe { crate::ggml::nbytes(node) });
    job.locs.push(locate(dev, node, true, &[], &mut b.pinned)?);
    for (slot, &sp) in node.src.iter().enumerate() {
        if sp.is_null() {
            continue;
        }
        if let Some(&j) = b.in_job.get(&(sp as usize)) {
            job.node_srcs.push((slot, j));
            continue;
        }
        // SAFETY: live source.
        let s = unsafe { &*sp };
        job.srcs.push((slot, job.tensors.len()));
        job.tensors.push(*s);
        // SAFETY: live tensor.
        let size = unsafe { crate::ggml::nbytes(s) };
        if written.contains(&slot) {
            // the op writes this source: located as an output (its host memory in place,
            // never a copy the writes would be lost in, nor the arena's read-only copy of a
            // weight), and noted as written like the node itself (above)
            job.sizes.push(size);
            job.locs.push(locate(dev, s, true, &[], &mut b.pinned)?);
            continue;
        }
        let written_by_job = [&b.host_writes[..], &writes[..]];
        let mut loc = locate(dev, s, false, &written_by_job, &mut b.pinned)?;
        if let Loc::Host(p) = loc {
            let at = p.0 as usize;
            let written_here = b
                .host_writes
                .iter()
                .any(|&(w, n)| at < w + n && w < at + size);
            if !dev.rt.reads_host_sources_on_execute() && !written_here {
                wait_for_host_writes(dev)?;
                // SAFETY: a host tensor's bytes, `size` of them from its data.
                loc = Loc::Host(SendPtr(unsafe { b.job.copy_host(p.0, size) }));
            }
        }
        job.sizes.push(size);
        job.locs.push(loc);
    }
    Ok(Prepared {
        job,
        writes,
        writes_weights,
    })
}

/// Where `t`, written by a node, lies in host memory: `(address, bytes, whether its buffer
/// holds weights)`; `None` for device memory or a tensor `locate` refuses.
///
/// # Safety
/// `t` is a live tensor.
unsafe fn host_output(dev: &Device, t: &ggml_tensor) -> Option<(usize, usize, bool)> {
    let buf = root_buffer(t);
    // SAFETY: a live tensor's buffer is NULL or live, with a live type.
    let host = !buf.is_null()
        && !t.data.is_null()
        && unsafe { !buffer::is_device_buffer_of(buf, dev) && buft_is_host((*buf).buft) };
    if !host {
        return None;
    }
    // SAFETY: live tensor and buffer.
    let (n, usage) = unsafe { (crate::ggml::nbytes(t), (*buf).usage) };
    Some((
        t.data as usize,
        n,
        usage == GGML_BACKEND_BUFFER_USAGE_WEIGHTS,
    ))
}

/// The source slots an op writes as well as reads: ggml's optimizer steps update their
/// parameters (`src[0]`) and, for AdamW, its moments (`src[2]`, `src[3]`) in place, and
/// return a node that is only a marker. Every other claimed op writes only its node (a
/// view's writes land in its source through the view itself).
pub(crate) fn written_sources(op: ggml_op) -> &'static [usize] {
    match op {
        GGML_OP_OPT_STEP_ADAMW => &[0, 2, 3],
        GGML_OP_OPT_STEP_SGD => &[0],
        _ => &[],
    }
}

/// Waits for the device's queue when a job queued on it writes host memory, so that a copy
/// of host memory taken next sees those writes. Errors: the queued work failed.
fn wait_for_host_writes(dev: &Device) -> Result<(), PrepError> {
    if dev.host_writes_queued.load(Ordering::Relaxed) {
        wait_for_queued_writes(dev)?;
    }
    Ok(())
}

/// Waits for the device's queue, which covers every host write queued on it, weights
/// included: both flags are cleared. Errors: the queued work failed.
fn wait_for_queued_writes(dev: &Device) -> Result<(), PrepError> {
    dev.host_writes_queued.store(false, Ordering::Relaxed);
    dev.weight_writes_queued.store(false, Ordering::Relaxed);
    dev.rt
        .synchronize()
        .map_err(|e| PrepError::Fatal(format!("queued work failed: {e}")))
}

/// Where the bytes of `t` are for the device. `written` are the host ranges `(address,
/// bytes)` the job being built writes, this node's included: a host weight among them is
/// read in place, as other host memory is, not through the arena, whose copy would be
/// uploaded before the job runs (and would not see the writes).
fn locate(
    dev: &'static Device,
    t: &ggml_tensor,
    is_dst: bool,
    written: &[&[(usize, usize)]],
    pinned: &mut Vec<WeightKey>,
) -> Result<Loc, PrepError> {
    let root: &ggml_tensor = if t.view_src.is_null() {
        t
    } else {
        // SAFETY: view_src of a live tensor is live.
        unsafe { &*t.view_src }
    };
    let buf = root_buffer(t);
    // SAFETY: live tensor.
    let desc = || unsafe { crate::ggml::describe(t) };
    let fatal = |m: String| Err(PrepError::Fatal(m));
    if t.data.is_null() {
        return fatal(format!("tensor {} has no data", desc()));
    }
    if buf.is_null() {
        return fatal(format!("tensor {} is in no buffer", desc()));
    }
    // SAFETY: live buffer.
    if unsafe { buffer::is_device_buffer_of(buf, dev) } {
        // SAFETY: live tensor.
        let n = unsafe { crate::ggml::nbytes(t) };
        if !dev.rt.contains(t.data as usize, n) {
            return fatal(format!(
                "tensor {} lies outside the device allocations",
                desc()
            ));
        }
        return Ok(Loc::Device(t.data as usize));
    }
    // SAFETY: live buffer.
    let buft = unsafe { (*buf).buft };
    // SAFETY: live buffer type.
    if !unsafe { buft_is_host(buft) } {
        return fatal(format!(
            "tensor {} is in buffer type {}, which {} cannot access",
            desc(),
            // SAFETY: live buffer type.
            unsafe { crate::ggml::buft_name(buft) },
            dev.name.to_string_lossy()
        ));
    }
    // SAFETY: live buffer.
    let usage = unsafe { (*buf).usage };
    if is_dst || usage != GGML_BACKEND_BUFFER_USAGE_WEIGHTS {
        return Ok(Loc::Host(SendPtr(t.data)));
    }
    // SAFETY: live tensor.
    let size = unsafe { crate::ggml::nbytes(root) };
    let key = WeightKey {
        ptr: root.data as usize,
        size,
    };
    let overlaps = |&(w, n): &(usize, usize)| key.ptr < w + n && w < key.ptr + size;
    if written.iter().any(|ws| ws.iter().any(overlaps)) {
        return Ok(Loc::Host(SendPtr(t.data)));
    }
    // a host weight read by a device op: materialize it through the arena, once a queued
    // job that writes host weights has run (a fresh copy may be uploaded beside the queue)
    if dev.weight_writes_queued.load(Ordering::Relaxed) {
        wait_for_queued_writes(dev)?;
    }
    // SAFETY: live buffer.
    let generation = unsafe { buffer::host_generation(buf, dev) };
    let got = dev.arena.lock().acquire(&*dev.rt, key, generation, pinned);
    match got {
        Ok(addr) => {
            if !pinned.contains(&key) {
                pinned.push(key);
            }
            Ok(Loc::Device(addr + (t.data as usize - root.data as usize)))
        }
        Err(ArenaError::NoRoom { .. }) if !pinned.is_empty() => Err(PrepError::NoRoom),
        Err(e) => fatal(format!(
            "host weight {} refused by the arena: {e}",
            // SAFETY: live tensor.
            unsafe { crate::ggml::describe(root) }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::hash_set::OwnedHashSet;
    use crate::runtime::mock::{Call, ExecSummary, MockLoc, MockRuntime, NodeSummary};
    use crate::testing::{
        alloc_buffer, base, device, f32_tensor, foreign_buffer, free_buffer, graph, named,
    };

    // No test of this crate changes the eager set for ADD or CONCAT (claims' tests flip
    // MUL only), so the process-wide set is the default here: ADD claimed, CONCAT not.

    /// A source-less F32 tensor of 64 elements (256 bytes) named `name` at `data`.
    fn leaf(name: &str, buf: ggml_backend_buffer_t, data: usize) -> ggml_tensor {
        named(f32_tensor(GGML_OP_NONE, 64, buf, data), name)
    }

    /// `op(a, b)`, 64 F32 elements at `data`.
    fn node(
        name: &str,
        op: ggml_op,
        buf: ggml_backend_buffer_t,
        data: usize,
        a: *mut ggml_tensor,
        b: *mut ggml_tensor,
    ) -> ggml_tensor {
        let mut t = named(f32_tensor(op, 64, buf, data), name);
        t.src[0] = a;
        t.src[1] = b;
        t
    }

    fn dev_node(op: ggml_op, locs: Vec<MockLoc>, srcs: Vec<(usize, usize)>) -> NodeSummary {
        NodeSummary {
            op,
            sizes: vec![256; locs.len()],
            locs,
            srcs,
            node_srcs: vec![],
            use_count: None,
        }
    }

    #[test]
    fn a_split_is_queued_as_one_job_with_producers_linked_and_views_skipped() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let b = alloc_buffer(d.buft(), 4096);
        let a = base(b);
        m.take_calls();
        let mut x = leaf("x", b, a);
        let xp: *mut ggml_tensor = &mut x;
        let mut n0 = node("n0", GGML_OP_ADD, b, a + 256, xp, xp);
        let n0p: *mut ggml_tensor = &mut n0;
        let mut n1 = node("n1", GGML_OP_ADD, b, a + 512, n0p, xp);
        let n1p: *mut ggml_tensor = &mut n1;
        // skipped: a view of n1, an empty node, a node not flagged for compute
        let mut v = named(f32_tensor(GGML_OP_VIEW, 64, b, a + 512), "v");
        v.view_src = n1p;
        v.src[0] = n1p;
        let mut empty = node("empty", GGML_OP_ADD, b, a + 768, xp, xp);
        empty.ne[0] = 0;
        let mut idle = node("idle", GGML_OP_ADD, b, a + 768, xp, xp);
        idle.flags = 0;
        let mut nodes = [n0p, n1p, &mut v as *mut _, &mut empty, &mut idle];
        let mut g = graph(&mut nodes);
        // the graph's use counts travel with each node
        let mut set = OwnedHashSet::new(&[(n0p, 1), (n1p, 2)]);
        (g.visited_hash_set, g.use_counts) = set.raw();
        compute(d, &g).unwrap();
        assert_eq!(m.take_calls(), vec![Call::Exec(0)]);
        let mut first = dev_node(
            GGML_OP_ADD,
            vec![
                MockLoc::Device(a + 256),
                MockLoc::Device(a),
                MockLoc::Device(a),
            ],
            vec![(0, 1), (1, 2)],
        );
        first.use_count = Some(1);
        let mut second = dev_node(
            GGML_OP_ADD,
            vec![MockLoc::Device(a + 512), MockLoc::Device(a)],
            vec![(1, 1)],
        );
        second.node_srcs = vec![(0, 0)];
        second.use_count = Some(2);
        assert_eq!(
            m.jobs(),
            vec![ExecSummary {
                label: "HRX0 split starting at node 0".into(),
                nodes: vec![first, second],
            }]
        );
    }

    #[test]
    fn host_sources_are_read_from_copies_taken_when_the_job_is_queued() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let b = alloc_buffer(d.buft(), 4096);
        let a = base(b);
        let host = foreign_buffer(true, GGML_BACKEND_BUFFER_USAGE_COMPUTE);
        let mut pos = vec![1.5f32; 64];
        let mut act = vec![2.5f32; 64];
        let pos_at = pos.as_mut_ptr() as usize;
        let act_at = act.as_mut_ptr() as usize;
        m.take_calls();
        let mut input = leaf("inp_pos", host, pos_at);
        input.flags |= GGML_TENSOR_FLAG_INPUT as i32;
        let ip: *mut ggml_tensor = &mut input;
        // a view of the same bytes reads the same copy
        let mut view = named(f32_tensor(GGML_OP_VIEW, 64, host, pos_at), "pos_view");
        view.view_src = ip;
        view.src[0] = ip;
        let vp: *mut ggml_tensor = &mut view;
        // an activation the CPU computed into its compute buffer
        let mut x = leaf("x", host, act_at);
        let xp: *mut ggml_tensor = &mut x;
        let mut n0 = node("n0", GGML_OP_ADD, b, a, ip, xp);
        let mut n1 = node("n1", GGML_OP_ADD, b, a + 256, vp, ip);
        let mut nodes = [&mut n0 as *mut _, &mut n1];
        let g = graph(&mut nodes);
        compute(d, &g).unwrap();
        // llama.cpp writes the next micro-batch's input, and the CPU its next activations, as
        // soon as the compute returns
        pos.fill(9.0);
        act.fill(9.0);
        assert_eq!(m.take_calls(), vec![Call::Exec(0)], "nothing to wait for");
        let job = &m.jobs()[0];
        let host_at = |l: MockLoc| match l {
            MockLoc::Host(p) => p,
            other => panic!("not in host memory: {other:?}"),
        };
        let (pos_copy, act_copy) = (host_at(job.nodes[0].locs[1]), host_at(job.nodes[0].locs[2]));
        assert!(
            ![pos_at, act_at].contains(&pos_copy) && ![pos_at, act_at].contains(&act_copy),
            "the queued job reads memory the host overwrites"
        );
        assert_ne!(pos_copy, act_copy);
        assert_eq!(
            job.nodes[1].locs[1..],
            [MockLoc::Host(pos_copy), MockLoc::Host(pos_copy)],
            "one copy of the same bytes a job"
        );
        let bytes = |v: f32| -> Vec<u8> { [v; 64].iter().flat_map(|v| v.to_ne_bytes()).collect() };
        let reads = &m.host_reads()[0];
        assert_eq!(reads.len(), 4);
        for (at, got) in reads {
            let want = if *at == pos_copy { 1.5 } else { 2.5 };
            assert_eq!(
                got,
                &bytes(want),
                "a copy holds the bytes as they were when queued"
            );
        }
    }

    #[test]
    fn host_bytes_a_job_writes_are_read_in_place_after_and_waited_for_by_the_next_job() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let b = alloc_buffer(d.buft(), 4096);
        let a = base(b);
        let host = foreign_buffer(true, GGML_BACKEND_BUFFER_USAGE_COMPUTE);
        let mut kv = vec![0.5f32; 64];
        let kv_at = kv.as_mut_ptr() as usize;
        m.take_calls();
        let mut x = leaf("x", b, a);
        let xp: *mut ggml_tensor = &mut x;
        // n0 writes host memory (an in-place op whose storage is a host buffer); n1 reads it
        let mut n0 = node("n0", GGML_OP_ADD, host, kv_at, xp, xp);
        let n0p: *mut ggml_tensor = &mut n0;
        let mut kv_view = named(f32_tensor(GGML_OP_VIEW, 64, host, kv_at), "kv_view");
        kv_view.view_src = n0p;
        kv_view.src[0] = n0p;
        let vp: *mut ggml_tensor = &mut kv_view;
        let mut n1 = node("n1", GGML_OP_ADD, b, a + 256, vp, xp);
        let mut nodes = [n0p, vp, &mut n1 as *mut _];
        let g = graph(&mut nodes);
        compute(d, &g).unwrap();
        let job = &m.jobs()[0];
        assert_eq!(job.nodes[0].locs[0], MockLoc::Host(kv_at));
        // a view of what n0 writes is not linked to n0: read where n0 wrote it
        assert_eq!(job.nodes[1].locs[1], MockLoc::Host(kv_at));
        assert_eq!(m.take_calls(), vec![Call::Exec(0)]);
        // the next job reads those bytes: it waits for the queue before it copies them
        let mut n2 = node("n2", GGML_OP_ADD, b, a + 512, vp, xp);
        let mut nodes = [&mut n2 as *mut _];
        let g = graph(&mut nodes);
        compute(d, &g).unwrap();
        assert_eq!(m.take_calls(), vec![Call::Synchronize, Call::Exec(1)]);
        assert!(matches!(m.jobs()[1].nodes[0].locs[1], MockLoc::Host(p) if p != kv_at));
        // ... and only once: nothing queued since writes host memory
        compute(d, &g).unwrap();
        assert_eq!(m.take_calls(), vec![Call::Exec(2)]);
    }

    #[test]
    fn an_unclaimed_node_fails_the_compute_after_queuing_the_nodes_before_it() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let b = alloc_buffer(d.buft(), 4096);
        let a = base(b);
        m.take_calls();
        let mut x = leaf("x", b, a);
        let xp: *mut ggml_tensor = &mut x;
        let mut n0 = node("n0", GGML_OP_ADD, b, a + 256, xp, xp);
        let mut cat = node("cat", GGML_OP_CONCAT, b, a + 512, xp, std::ptr::null_mut());
        let mut n2 = node("n2", GGML_OP_ADD, b, a + 768, xp, xp);
        let mut nodes = [&mut n0 as *mut _, &mut cat, &mut n2];
        let g = graph(&mut nodes);
        assert_eq!(
            compute(d, &g).unwrap_err(),
            "node 1 'cat' (op CONCAT, f32 [64, 1, 1, 1]) is not claimed by HRX0 (CONCAT is not \
             an eager op); sources: ['x' (op NONE, f32 [64, 1, 1, 1])]"
        );
        assert_eq!(m.take_calls(), vec![Call::Exec(0)]);
        let jobs = m.jobs();
        assert_eq!(jobs[0].nodes.len(), 1);
        assert_eq!(jobs[0].nodes[0].locs[0], MockLoc::Device(a + 256));
        // the runtime's kernels have the last word
        m.set_supports(false);
        let mut one = [&mut n0 as *mut _];
        let err = compute(d, &graph(&mut one)).unwrap_err();
        assert!(
            err.ends_with("(the device kernels do not support this case); sources: ['x' (op NONE, f32 [64, 1, 1, 1]), 'x' (op NONE, f32 [64, 1, 1, 1])]"),
            "{err}"
        );
        assert!(m.take_calls().is_empty());
    }

    #[test]
    fn tensors_the_device_cannot_reach_are_refused_by_name() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let b = alloc_buffer(d.buft(), 1024);
        let a = base(b);
        m.take_calls();
        let mut x = leaf("x", b, a);
        let xp: *mut ggml_tensor = &mut x;
        let run = |t: &mut ggml_tensor| {
            let mut one = [t as *mut _];
            compute(d, &graph(&mut one)).unwrap_err()
        };
        let desc = "(op ADD, f32 [64, 1, 1, 1])";
        let mut stray = node("stray", GGML_OP_ADD, b, a + 4096, xp, xp);
        assert_eq!(
            run(&mut stray),
            format!("tensor 'stray' {desc} lies outside the device allocations")
        );
        let mut nodata = node("nodata", GGML_OP_ADD, b, 0, xp, xp);
        assert_eq!(
            run(&mut nodata),
            format!("tensor 'nodata' {desc} has no data")
        );
        let mut nobuf = node("nobuf", GGML_OP_ADD, std::ptr::null_mut(), a, xp, xp);
        assert_eq!(
            run(&mut nobuf),
            format!("tensor 'nobuf' {desc} is in no buffer")
        );
        let foreign = foreign_buffer(false, GGML_BACKEND_BUFFER_USAGE_ANY);
        let mut far = node("far", GGML_OP_ADD, foreign, 0x1000, xp, xp);
        assert_eq!(
            run(&mut far),
            format!("tensor 'far' {desc} is in buffer type TEST_DEV, which HRX0 cannot access")
        );
        assert!(
            m.take_calls().is_empty(),
            "nothing is queued for a refused node"
        );
    }

    #[test]
    fn host_tensors_are_read_from_a_copy_and_written_in_place_and_host_weights_go_through_the_arena(
    ) {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let b = alloc_buffer(d.buft(), 1024);
        let a = base(b);
        let h = alloc_buffer(d.host_buft(), 256);
        let hp = base(h);
        m.take_calls();
        let weights: Vec<u8> = (0..=255).collect();
        let wb = foreign_buffer(true, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        let mut w = leaf("w", wb, weights.as_ptr() as usize);
        let wp: *mut ggml_tensor = &mut w;
        // a view of the second quarter of the weight
        let mut wv = named(
            f32_tensor(GGML_OP_VIEW, 16, wb, weights.as_ptr() as usize + 64),
            "wv",
        );
        wv.view_src = wp;
        wv.src[0] = wp;
        let mut act = leaf("act", h, hp);
        let actp: *mut ggml_tensor = &mut act;
        let mut n0 = node("n0", GGML_OP_ADD, b, a, wp, actp);
        let mut n1 = node("n1", GGML_OP_ADD, h, hp, &mut wv, actp);
        n1.ne[0] = 16;
        let mut nodes = [&mut n0 as *mut _, &mut n1];
        let g = graph(&mut nodes);
        compute(d, &g).unwrap();
        let w_addr = a + 1024;
        assert_eq!(
            m.take_calls(),
            vec![
                // a fresh copy: allocated and uploaded as a weight, which a runtime may
                // move beside its queue (the prefetch)
                Call::AllocWeight {
                    size: 256,
                    addr: Some(w_addr)
                },
                Call::UploadWeight {
                    dst: w_addr,
                    bytes: weights.clone(),
                },
                Call::Exec(0),
            ]
        );
        let job = &m.jobs()[0];
        // the activation is read from the job's copy of it (taken when the job was queued)
        let MockLoc::Host(act_copy) = job.nodes[0].locs[2] else {
            panic!("{:?}", job.nodes[0].locs)
        };
        assert_ne!(act_copy, hp);
        assert_eq!(
            job.nodes[0].locs,
            vec![
                MockLoc::Device(a),
                MockLoc::Device(w_addr),
                MockLoc::Host(act_copy)
            ]
        );
        // a destination in host memory stays there; the view reads the resident copy
        assert_eq!(
            job.nodes[1].locs,
            vec![
                MockLoc::Host(hp),
                MockLoc::Device(w_addr + 64),
                MockLoc::Host(act_copy)
            ]
        );
        assert_eq!(job.nodes[1].sizes, vec![64, 64, 256]);
        // the second evaluation finds the copy resident; the first wrote host memory (n1),
        // so the activation is copied only once that job ran
        compute(d, &g).unwrap();
        assert_eq!(m.take_calls(), vec![Call::Synchronize, Call::Exec(1)]);
        let s = d.arena.lock().stats();
        // hits: the view in the first evaluation, both uses in the second
        assert_eq!((s.hits, s.misses, s.resident_bytes), (3, 1, 256));
    }

    /// One AdamW step on `x` (ggml's formula: `hp` = alpha, beta1, beta2, eps, wd, beta1h,
    /// beta2h), the reference the mock kernel and the tests below share.
    fn adamw_step(x: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], hp: &[f32]) {
        let [alpha, beta1, beta2, eps, wd, beta1h, beta2h] = hp[..7] else {
            unreachable!()
        };
        for i in 0..x.len() {
            m[i] = m[i] * beta1 + g[i] * (1.0 - beta1);
            v[i] = v[i] * beta2 + g[i] * g[i] * (1.0 - beta2);
            let mh = m[i] * beta1h;
            let vh = (v[i] * beta2h).sqrt() + eps;
            x[i] = x[i] * (1.0 - alpha * wd) - alpha * mh / vh;
        }
    }

    /// One SGD step (`hp` = alpha, wd).
    fn sgd_step(x: &mut [f32], g: &[f32], hp: &[f32]) {
        for i in 0..x.len() {
            x[i] = x[i] * (1.0 - hp[0] * hp[1]) - hp[0] * g[i];
        }
    }

    /// A mock kernel for the optimizer steps on 64 F32 parameters: it updates its sources
    /// where the job located them, as the device's kernels do.
    fn optimizer_kernel() -> crate::runtime::mock::Kernel {
        std::sync::Arc::new(|op, _dst, src| {
            // SAFETY: the job's locations of a 64-element F32 step and its 7 (or 2)
            // hyper-parameters, valid while the job runs (now).
            let f = |k: usize, n: usize| unsafe {
                std::slice::from_raw_parts_mut(src[k] as *mut f32, n)
            };
            match op {
                GGML_OP_OPT_STEP_ADAMW => {
                    adamw_step(f(0, 64), f(1, 64), f(2, 64), f(3, 64), f(4, 7))
                }
                GGML_OP_OPT_STEP_SGD => sgd_step(f(0, 64), f(1, 64), f(2, 2)),
                _ => {}
            }
        })
    }

    #[test]
    fn optimizer_steps_update_sources_in_host_memory() {
        // the optimizer steps are not eager by default; no other test of this crate uses them
        assert!(claims::set_eager(GGML_OP_OPT_STEP_ADAMW, true));
        assert!(claims::set_eager(GGML_OP_OPT_STEP_SGD, true));
        let m = MockRuntime::new(1 << 20);
        m.set_kernel(optimizer_kernel());
        let d = device(&m, 1 << 20);
        let hrx_host = alloc_buffer(d.host_buft(), 4096);
        let cpu = foreign_buffer(true, GGML_BACKEND_BUFFER_USAGE_ANY);
        let x0: Vec<f32> = (0..64).map(|i| (i as f32).sin()).collect();
        let g: Vec<f32> = (0..64).map(|i| (i as f32 * 0.3).cos()).collect();
        let hp = [0.01f32, 0.9, 0.999, 1e-8, 0.0, 1.0, 1.0];
        let (mut rx, mut rm, mut rv) = (x0.clone(), vec![0f32; 64], vec![0f32; 64]);
        for _ in 0..3 {
            adamw_step(&mut rx, &g, &mut rm, &mut rv, &hp);
        }
        let mut sx = x0.clone();
        for _ in 0..3 {
            sgd_step(&mut sx, &g, &hp[..2]);
        }
        // in a CPU buffer (memory of this test) and in an HRX0_HOST buffer
        for (buf, in_hrx) in [(cpu, false), (hrx_host, true)] {
            // x, g, m, v, hp, 256 bytes apart
            let mut mem = vec![0f32; 5 * 64];
            let at = if in_hrx {
                base(hrx_host) as *mut f32
            } else {
                mem.as_mut_ptr()
            };
            // SAFETY: 320 floats of this test's vector or of the 4096-byte host buffer.
            let host = unsafe { std::slice::from_raw_parts_mut(at, 5 * 64) };
            for sgd in [false, true] {
                host.fill(0.0);
                host[..64].copy_from_slice(&x0);
                host[64..128].copy_from_slice(&g);
                host[256..263].copy_from_slice(&hp);
                let t = |k: usize, n: i64| f32_tensor(GGML_OP_NONE, n, buf, at as usize + 256 * k);
                let (mut x, mut gt, mut mt, mut vt, mut h) = (
                    t(0, 64),
                    t(1, 64),
                    t(2, 64),
                    t(3, 64),
                    t(4, if sgd { 2 } else { 7 }),
                );
                let op = if sgd {
                    GGML_OP_OPT_STEP_SGD
                } else {
                    GGML_OP_OPT_STEP_ADAMW
                };
                // as ggml builds it: the node is a view of the parameters
                let mut step = named(f32_tensor(op, 64, buf, at as usize), "step");
                step.view_src = &mut x;
                step.src[0] = &mut x;
                step.src[1] = &mut gt;
                if sgd {
                    step.src[2] = &mut h;
                } else {
                    step.src[2] = &mut mt;
                    step.src[3] = &mut vt;
                    step.src[4] = &mut h;
                }
                let mut nodes = [&mut step as *mut _];
                for _ in 0..3 {
                    compute(d, &graph(&mut nodes)).unwrap();
                }
                let close = |got: &[f32], want: &[f32]| {
                    // the mock runs the reference itself: equal up to rounding
                    got.iter().zip(want).all(|(a, b)| (a - b).abs() <= 1e-6)
                };
                if sgd {
                    assert!(close(&host[..64], &sx), "SGD params (HRX host: {in_hrx})");
                } else {
                    assert!(close(&host[..64], &rx), "AdamW params (HRX host: {in_hrx})");
                    assert!(close(&host[128..192], &rm), "AdamW m (HRX host: {in_hrx})");
                    assert!(close(&host[192..256], &rv), "AdamW v (HRX host: {in_hrx})");
                }
                assert_ne!(host[..64], x0[..], "the parameters moved");
            }
        }
        free_buffer(hrx_host);
    }

    /// A mock kernel for a 64 x 64 F32 weight: `MUL_MAT` (y = W x) and `SET_ROWS` (W[idx] :=
    /// rows, one row, an I64 index).
    fn weight_kernel() -> crate::runtime::mock::Kernel {
        std::sync::Arc::new(|op, dst, src| {
            // SAFETY: the job's locations of the tensors the test below builds (64 x 64 F32
            // weight, 64 F32 vectors, one I64), valid while the job runs (now).
            unsafe {
                let f = |p: *mut u8, n: usize| std::slice::from_raw_parts_mut(p as *mut f32, n);
                match op {
                    GGML_OP_MUL_MAT => {
                        let (w, x, y) = (f(src[0], 64 * 64), f(src[1], 64), f(dst, 64));
                        for (i, yi) in y.iter_mut().enumerate() {
                            *yi = (0..64).map(|k| w[i * 64 + k] * x[k]).sum();
                        }
                    }
                    GGML_OP_SET_ROWS => {
                        let row = *(src[2] as *const i64) as usize;
                        f(dst, 64 * 64)[row * 64..][..64].copy_from_slice(f(src[1], 64));
                    }
                    _ => {}
                }
            }
        })
    }

    #[test]
    fn a_host_weight_the_device_writes_is_not_read_from_a_stale_arena_copy() {
        let m = MockRuntime::new(1 << 20);
        m.set_kernel(weight_kernel());
        let d = device(&m, 1 << 20);
        let b = alloc_buffer(d.buft(), 1024);
        let a = base(b);
        let hrx_host = alloc_buffer(d.host_buft(), 64 * 64 * 4);
        // SAFETY: the stand-in buffer struct is ours to set up, as ggml's
        // `ggml_backend_buffer_set_usage` does.
        unsafe { (*hrx_host).usage = GGML_BACKEND_BUFFER_USAGE_WEIGHTS };
        let cpu = foreign_buffer(true, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        let inputs = foreign_buffer(true, GGML_BACKEND_BUFFER_USAGE_ANY);
        let mut cpu_mem = vec![0f32; 64 * 64];
        for (wb, in_hrx) in [(cpu, false), (hrx_host, true)] {
            let wp = if in_hrx {
                base(hrx_host) as *mut f32
            } else {
                cpu_mem.as_mut_ptr()
            };
            // SAFETY: 4096 floats of the host buffer or of this test's vector.
            let wmem = unsafe { std::slice::from_raw_parts_mut(wp, 64 * 64) };
            for (i, v) in wmem.iter_mut().enumerate() {
                *v = 0.001 * (i % 97) as f32;
            }
            let w0 = wmem.to_vec();
            // x = 1, rows = 5 then 7, idx = 1 then 2: inputs in a host buffer
            let (xs, mut rows, mut idx) = (vec![1f32; 64], vec![5f32; 64], vec![1i64]);
            let mut w = f32_tensor(GGML_OP_NONE, 64 * 64, wb, wp as usize);
            let mut x = f32_tensor(GGML_OP_NONE, 64, inputs, xs.as_ptr() as usize);
            let mut r = f32_tensor(GGML_OP_NONE, 64, inputs, rows.as_ptr() as usize);
            let mut ix = f32_tensor(GGML_OP_NONE, 1, inputs, idx.as_ptr() as usize);
            ix.type_ = GGML_TYPE_I64;
            ix.nb = [8; 4];
            let mut y = node("y", GGML_OP_MUL_MAT, b, a, &mut w, &mut x);
            // as ggml builds it: SET_ROWS is a view of the weight it writes
            let mut sr = named(f32_tensor(GGML_OP_SET_ROWS, 64 * 64, wb, wp as usize), "sr");
            sr.view_src = &mut w;
            sr.src = [std::ptr::null_mut(); GGML_MAX_SRC as usize];
            sr.src[0] = &mut w;
            sr.src[1] = &mut r;
            sr.src[2] = &mut ix;
            let mut ga = [&mut y as *mut _];
            let mut gb = [&mut sr as *mut _];
            let y_now = || {
                let bytes = m.peek(a, 256);
                bytes
                    .chunks(4)
                    .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
                    .collect::<Vec<f32>>()
            };
            let row_sum = |w: &[f32], i: usize| w[i * 64..][..64].iter().sum::<f32>();
            // first use: the arena uploads the weight
            compute(d, &graph(&mut ga)).unwrap();
            assert!((y_now()[1] - row_sum(&w0, 1)).abs() < 1e-3);
            // the device writes row 1 of the weight, in place in host memory ...
            compute(d, &graph(&mut gb)).unwrap();
            assert_eq!(wmem[64..128], [5.0; 64]);
            // ... and the next use reads what it wrote: 64 x 5 (the fingerprint samples no
            // word of row 1, so only the arena's invalidation makes the copy current)
            compute(d, &graph(&mut ga)).unwrap();
            assert_eq!(y_now()[1], 320.0, "weight in HRX0_HOST: {in_hrx}");
            assert!((y_now()[0] - row_sum(&w0, 0)).abs() < 1e-3);
            // the write and the read in one graph: the read sees row 2 written (64 x 7)
            rows.fill(7.0);
            idx[0] = 2;
            let mut both = [&mut sr as *mut _, &mut y];
            compute(d, &graph(&mut both)).unwrap();
            assert_eq!(y_now()[2], 448.0, "weight in HRX0_HOST: {in_hrx}");
            assert_eq!(y_now()[1], 320.0);
            compute(d, &graph(&mut ga)).unwrap();
            assert_eq!((y_now()[1], y_now()[2]), (320.0, 448.0));
        }
        free_buffer(hrx_host);
        free_buffer(b);
    }

    #[test]
    fn arena_pressure_submits_the_job_before_evicting_what_it_reads() {
        let m = MockRuntime::new(1 << 20);
        // room for one 256-byte weight, not two
        let d = device(&m, 384);
        let b = alloc_buffer(d.buft(), 1024);
        let a = base(b);
        m.take_calls();
        let wb = foreign_buffer(true, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        let bytes1 = vec![1u8; 256];
        let bytes2 = vec![2u8; 256];
        let mut w1 = leaf("w1", wb, bytes1.as_ptr() as usize);
        let mut w2 = leaf("w2", wb, bytes2.as_ptr() as usize);
        let mut x = leaf("x", b, a);
        let xp: *mut ggml_tensor = &mut x;
        let mut n0 = node("n0", GGML_OP_ADD, b, a + 256, &mut w1, xp);
        let mut n1 = node("n1", GGML_OP_ADD, b, a + 512, &mut w2, xp);
        let mut nodes = [&mut n0 as *mut _, &mut n1];
        compute(d, &graph(&mut nodes)).unwrap();
        let wa = a + 1024;
        assert_eq!(
            m.take_calls(),
            vec![
                Call::AllocWeight {
                    size: 256,
                    addr: Some(wa)
                },
                Call::UploadWeight {
                    dst: wa,
                    bytes: bytes1.clone(),
                },
                // n1 needs w1's room while the job reads w1: the job goes first ...
                Call::Exec(0),
                // ... then w1 is evicted (queued after it) and w2 takes its place
                Call::FreeWeight(wa),
                Call::AllocWeight {
                    size: 256,
                    addr: Some(wa)
                },
                Call::UploadWeight {
                    dst: wa,
                    bytes: bytes2.clone(),
                },
                Call::Exec(1),
            ]
        );
        let jobs = m.jobs();
        assert_eq!(jobs[0].label, "HRX0 split starting at node 0");
        assert_eq!(jobs[1].label, "HRX0 split starting at node 1");
        assert_eq!((jobs[0].nodes.len(), jobs[1].nodes.len()), (1, 1));
        let s = d.arena.lock().stats();
        // w2's first attempt (refused for room, then retried after the flush) counts as a
        // miss too: three misses for two uploads (today's accounting, kept as it is)
        assert_eq!((s.misses, s.evictions, s.refusals), (3, 1, 0));

        // one node whose two weights exceed the budget together: refused, nothing runs
        let mut both = node("both", GGML_OP_ADD, b, a + 768, &mut w1, &mut w2);
        let mut one = [&mut both as *mut _];
        assert_eq!(
            compute(d, &graph(&mut one)).unwrap_err(),
            "node 0 'both' (op ADD, f32 [64, 1, 1, 1]): its host weights together exceed the \
             host-weight budget (GGML_HRX_HOST_WEIGHT_LIMIT_MB)"
        );
        assert!(!m.take_calls().contains(&Call::Exec(2)));
        assert_eq!(d.arena.lock().stats().refusals, 1);
    }

    #[test]
    fn a_weight_larger_than_the_budget_is_refused_by_name() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 128);
        let b = alloc_buffer(d.buft(), 1024);
        let a = base(b);
        m.take_calls();
        let wb = foreign_buffer(true, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        let bytes = vec![0u8; 256];
        let mut w = leaf("big", wb, bytes.as_ptr() as usize);
        let mut x = leaf("x", b, a);
        let xp: *mut ggml_tensor = &mut x;
        let mut n0 = node("n0", GGML_OP_ADD, b, a + 256, xp, xp);
        let mut n1 = node("n1", GGML_OP_ADD, b, a + 512, &mut w, xp);
        let mut nodes = [&mut n0 as *mut _, &mut n1];
        assert_eq!(
            compute(d, &graph(&mut nodes)).unwrap_err(),
            "host weight 'big' (op NONE, f32 [64, 1, 1, 1]) refused by the arena: needs 256 \
             bytes (0.00 MiB), more than the host-weight budget of 128 bytes (0.00 MiB, \
             GGML_HRX_HOST_WEIGHT_LIMIT_MB)"
        );
        // the node before it still runs; nothing was allocated for the refused weight
        assert_eq!(m.take_calls(), vec![Call::Exec(0)]);
        let s = d.arena.lock().stats();
        assert_eq!((s.refusals, s.resident_bytes), (1, 0));
    }

    #[test]
    fn flush_submits_only_a_non_empty_job_and_starts_the_next() {
        let m = MockRuntime::new(1 << 16);
        let d = device(&m, 1 << 16);
        let mut b = Building::new("first".into());
        b.in_job = HashMap::from([(1usize, 0usize)]);
        b.pinned = vec![WeightKey { ptr: 1, size: 2 }];
        b.flush(d, "second".into());
        assert!(m.calls().is_empty());
        assert_eq!(b.job.label, "second");
        assert!(b.in_job.is_empty() && b.pinned.is_empty());
        b.job.nodes.push(NodeJob {
            tensors: vec![ggml_tensor::default()],
            locs: vec![Loc::Device(7)],
            sizes: vec![4],
            srcs: vec![],
            node_srcs: vec![],
            use_count: Some(3),
        });
        // a job that writes host memory is noted on the device
        b.host_writes.push((0x1000, 4));
        b.flush(d, "third".into());
        assert_eq!(m.take_calls(), vec![Call::Exec(0)]);
        assert_eq!(m.jobs()[0].label, "second");
        assert_eq!(m.jobs()[0].nodes[0].use_count, Some(3));
        assert!(b.job.nodes.is_empty() && b.job.label == "third" && b.host_writes.is_empty());
        assert!(d.host_writes_queued.load(Ordering::Relaxed));
    }

    #[test]
    fn backend_interface_queues_async_work_events_and_compute() {
        let m = MockRuntime::new(1 << 20);
        let d = device(&m, 1 << 20);
        let b = alloc_buffer(d.buft(), 1024);
        let a = base(b);
        let h = alloc_buffer(d.host_buft(), 256);
        let hp = base(h);
        let be = new_backend(d);
        m.take_calls();
        // SAFETY: `be` is a live backend of ours; the tensors and host memory below live
        // until the end of the test and the mock completes every call at once.
        unsafe {
            assert!(is_hrx(be) && !is_hrx(std::ptr::null_mut()));
            let i = (*be).iface;
            let name = std::ffi::CStr::from_ptr(i.get_name.unwrap()(be));
            assert_eq!(name.to_str().unwrap(), "HRX0");
            let mut t = leaf("t", b, a);
            let data: Vec<u8> = (0..32).collect();
            let mut out = vec![0u8; 32];
            // device tensors: queued, not waited for; host bytes copied when queued
            i.set_tensor_async.unwrap()(be, &mut t, data.as_ptr().cast(), 16, 32);
            i.get_tensor_async.unwrap()(be, &t, out.as_mut_ptr().cast(), 16, 32);
            // a tensor in a host buffer: finish queued work, then the buffer's own path
            let mut ht = leaf("ht", h, hp);
            i.set_tensor_async.unwrap()(be, &mut ht, data.as_ptr().cast(), 0, 32);
            assert_eq!(std::slice::from_raw_parts(hp as *const u8, 32), &data[..]);
            assert_eq!(
                m.take_calls(),
                vec![
                    Call::Upload {
                        dst: a + 16,
                        bytes: data.clone(),
                        owned: true
                    },
                    Call::Download {
                        src: a + 16,
                        dst: out.as_ptr() as usize,
                        len: 32
                    },
                    Call::Synchronize,
                    Call::Synchronize,
                ]
            );
            assert_eq!(out, data);

            // cpy_tensor_async into a device tensor: from the device or from host memory
            let mut dst = leaf("dst", b, a + 512);
            assert!(i.cpy_tensor_async.unwrap()(be, be, &t, &mut dst));
            assert!(i.cpy_tensor_async.unwrap()(be, be, &ht, &mut dst));
            // not into host memory, not for another backend
            assert!(!i.cpy_tensor_async.unwrap()(be, be, &t, &mut ht));
            assert!(!i.cpy_tensor_async.unwrap()(
                be,
                std::ptr::null_mut(),
                &t,
                &mut dst
            ));
            let host_bytes = std::slice::from_raw_parts(hp as *const u8, 256).to_vec();
            assert_eq!(
                m.take_calls(),
                vec![
                    Call::Copy {
                        dst: a + 512,
                        src: a,
                        len: 256
                    },
                    Call::Upload {
                        dst: a + 512,
                        bytes: host_bytes,
                        owned: true
                    },
                ]
            );

            // events: a record queues a signal of the next recording, a wait queues a wait
            // for the latest one
            let ev = crate::event::event_new(d.dev());
            let ev_addr = (*ev).context as usize;
            i.event_record.unwrap()(be, ev);
            i.event_wait.unwrap()(be, ev);
            i.event_record.unwrap()(be, ev);
            crate::event::event_synchronize(d.dev(), ev);
            crate::event::event_free(d.dev(), ev);
            assert_eq!(
                m.take_calls(),
                vec![
                    Call::Signal(ev_addr, 1),
                    Call::Wait(ev_addr, 1),
                    Call::Signal(ev_addr, 2)
                ]
            );

            // synchronize waits for the queue (a failure aborts: the test below, in a child)
            i.synchronize.unwrap()(be);
            assert_eq!(m.take_calls(), vec![Call::Synchronize]);

            // graph_compute returns ggml's statuses
            let mut x = leaf("x", b, a);
            let xp: *mut ggml_tensor = &mut x;
            let mut sum = node("sum", GGML_OP_ADD, b, a + 256, xp, xp);
            let mut cat = node("cat", GGML_OP_CONCAT, b, a + 256, xp, xp);
            let mut ok = [&mut sum as *mut _];
            let mut bad = [&mut cat as *mut _];
            let compute = i.graph_compute.unwrap();
            assert_eq!(compute(be, &mut graph(&mut ok)), GGML_STATUS_SUCCESS);
            assert_eq!(compute(be, &mut graph(&mut bad)), GGML_STATUS_FAILED);
            assert_eq!(m.take_calls(), vec![Call::Exec(0)]);

            // free waits for the queue
            i.free.unwrap()(be);
            assert_eq!(m.take_calls(), vec![Call::Synchronize]);
        }
    }

    /// Set in the child process of the test below: run the failing calls.
    const SYNC_CHILD: &str = "HRX_TEST_FAILED_SYNC_CHILD";

    /// The child's part of `failed_queued_work_is_logged_by_free_and_aborts_synchronize`:
    /// does nothing unless run by it; `SYNC_CHILD` says which call waits for the failed
    /// work (`synchronize`, or `set_tensor_async` into a host buffer, which waits for the
    /// queue before its synchronous copy).
    #[test]
    fn failed_queued_work_child() {
        let Some(how) = std::env::var_os(SYNC_CHILD) else {
            return;
        };
        let m = MockRuntime::new(1 << 16);
        let d = device(&m, 1 << 16);
        let h = alloc_buffer(d.host_buft(), 256);
        let mut ht = leaf("ht", h, base(h));
        let data = [0u8; 16];
        // SAFETY: backends of ours, each freed once; a live tensor of 256 bytes in our host
        // buffer; the mock completes every call at once.
        unsafe {
            let be = new_backend(d);
            m.fail_next_sync("upload lost");
            ((*be).iface.free.unwrap())(be);
            eprintln!("child: free returned");
            let be = new_backend(d);
            m.fail_next_sync("compute lost");
            if how == "async" {
                let set = (*be).iface.set_tensor_async.unwrap();
                set(be, &mut ht, data.as_ptr().cast(), 0, 16);
            } else {
                ((*be).iface.synchronize.unwrap())(be);
            }
        }
        eprintln!("child: the call returned");
    }

    #[test]
    fn failed_queued_work_is_logged_by_free_and_aborts_synchronize() {
        for how in ["sync", "async"] {
            failed_queued_work_in_a_child(how);
        }
    }

    fn failed_queued_work_in_a_child(how: &str) {
        use std::os::unix::process::ExitStatusExt;
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "backend::tests::failed_queued_work_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(SYNC_CHILD, how)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // free logs the failure and returns; synchronize logs it and aborts (SIGABRT)
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{err}");
        let at = |s: &str| err.find(s).unwrap_or_else(|| panic!("no '{s}' in: {err}"));
        let freed =
            at("HRX: HRX0: queued work failed (found as the backend was freed): upload lost");
        let returned = at("child: free returned");
        let failed = at("HRX: HRX0: queued work failed: compute lost");
        let aborting = at("HRX: aborting");
        assert!(
            freed < returned && returned < failed && failed < aborting,
            "{err}"
        );
        assert!(!err.contains("child: the call returned"), "{err}");
    }
}
