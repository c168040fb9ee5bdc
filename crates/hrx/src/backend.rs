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
//! overwritten).

use std::collections::HashMap;
use std::ffi::{c_char, c_void};

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
    // SAFETY: forwarded; guid points to 16 bytes.
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
    // SAFETY: ggml passes one of our backends.
    guard("ggml_backend_hrx_get_name", || {
        unsafe { stream(b) }.dev.name.as_ptr()
    })
}

unsafe extern "C" fn be_free(b: ggml_backend_t) {
    guard("ggml_backend_hrx_free", || {
        // SAFETY: ggml frees each backend once; all parts came from Box::into_raw/leak.
        unsafe {
            let s = Box::from_raw((*b).context as *mut Stream);
            let _ = s.dev.rt.synchronize();
            s.dev.reporter.lock().finish(&s.dev.arena.lock().stats());
            drop(Box::from_raw((*b).guid));
            drop(Box::from_raw(b));
        }
    })
}

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
            // SAFETY: `size` readable bytes; copied now, so the caller may reuse them.
            let bytes = unsafe { std::slice::from_raw_parts(data as *const u8, size) }.to_vec();
            s.dev
                .rt
                .upload(tr.data as usize + offset, HostSrc::Owned(bytes));
        } else {
            // not ours: finish queued work, then the buffer's own synchronous path
            let _ = s.dev.rt.synchronize();
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
            s.dev
                .rt
                .download(tr.data as usize + offset, SendPtr(data), size);
        } else {
            let _ = s.dev.rt.synchronize();
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
        if let Err(e) = s.dev.rt.synchronize() {
            crate::log::error(&format!(
                "HRX: {}: queued work failed: {e}\n",
                s.dev.name.to_string_lossy()
            ));
        }
    })
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
    let mut job = ExecJob {
        nodes: Vec::new(),
        label: label(0),
    };
    // original node -> index in job.nodes
    let mut in_job: HashMap<usize, usize> = HashMap::new();
    // host weights the current job reads through the arena
    let mut pinned: Vec<WeightKey> = Vec::new();
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
            flush(dev, &mut job, &mut in_job, &mut pinned, label(i));
            return Err(format!(
                "node {i} {desc} is not claimed by {} ({why}); sources: [{}]",
                dev.name.to_string_lossy(),
                srcs.join(", ")
            ));
        }
        // SAFETY: `g` is a live graph (view).
        let uses = unsafe { hash_set::use_count(g, np) };
        let nj = match prepare(dev, node, &in_job, &mut pinned) {
            Ok(nj) => nj,
            Err(PrepError::NoRoom) => {
                // make room: run what is queued, then only this node pins its weights
                flush(dev, &mut job, &mut in_job, &mut pinned, label(i));
                match prepare(dev, node, &in_job, &mut pinned) {
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
                flush(dev, &mut job, &mut in_job, &mut pinned, label(i));
                return Err(e);
            }
        };
        let mut nj = nj;
        nj.use_count = uses;
        in_job.insert(np as usize, job.nodes.len());
        job.nodes.push(nj);
    }
    flush(dev, &mut job, &mut in_job, &mut pinned, label(n));
    if dev.reporter.lock().enabled() {
        let stats = dev.arena.lock().stats();
        dev.reporter.lock().on_compute(g, &ran, &stats);
    }
    Ok(())
}

/// Submits the job built so far (if any) and starts a new one labelled `next`.
fn flush(
    dev: &Device,
    job: &mut ExecJob,
    in_job: &mut HashMap<usize, usize>,
    pinned: &mut Vec<WeightKey>,
    next: String,
) {
    let done = std::mem::replace(
        job,
        ExecJob {
            nodes: Vec::new(),
            label: next,
        },
    );
    in_job.clear();
    pinned.clear();
    if !done.nodes.is_empty() {
        dev.rt.execute(done);
    }
}

/// Builds the shadow copies of `node` and its sources. A source that is a node of the
/// current job is linked to that node's shadow instead of copied (so the kernels see the
/// producer itself, as in the original graph: what lets the CPU kernels fuse
/// `RMS_NORM+MUL` exactly as they do in a CPU-only run).
fn prepare(
    dev: &'static Device,
    node: &ggml_tensor,
    in_job: &HashMap<usize, usize>,
    pinned: &mut Vec<WeightKey>,
) -> Result<NodeJob, PrepError> {
    let mut job = NodeJob {
        tensors: vec![*node],
        locs: Vec::new(),
        sizes: Vec::new(),
        srcs: Vec::new(),
        node_srcs: Vec::new(),
        use_count: None,
    };
    // SAFETY: live tensor.
    job.sizes.push(unsafe { crate::ggml::nbytes(node) });
    job.locs.push(locate(dev, node, true, pinned)?);
    for (slot, &sp) in node.src.iter().enumerate() {
        if sp.is_null() {
            continue;
        }
        if let Some(&j) = in_job.get(&(sp as usize)) {
            job.node_srcs.push((slot, j));
            continue;
        }
        // SAFETY: live source.
        let s = unsafe { &*sp };
        job.srcs.push((slot, job.tensors.len()));
        job.tensors.push(*s);
        // SAFETY: live tensor.
        job.sizes.push(unsafe { crate::ggml::nbytes(s) });
        job.locs.push(locate(dev, s, false, pinned)?);
    }
    Ok(job)
}

/// Where the bytes of `t` are for the device.
fn locate(
    dev: &'static Device,
    t: &ggml_tensor,
    is_dst: bool,
    pinned: &mut Vec<WeightKey>,
) -> Result<Loc, PrepError> {
    let root: &ggml_tensor = if t.view_src.is_null() {
        t
    } else {
        // SAFETY: view_src of a live tensor is live.
        unsafe { &*t.view_src }
    };
    let buf = if t.buffer.is_null() {
        root.buffer
    } else {
        t.buffer
    };
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
            "tensor {} is in a buffer type {} cannot access",
            desc(),
            dev.name.to_string_lossy()
        ));
    }
    // SAFETY: live buffer.
    let usage = unsafe { (*buf).usage };
    if is_dst || usage != GGML_BACKEND_BUFFER_USAGE_WEIGHTS {
        return Ok(Loc::Host(SendPtr(t.data)));
    }
    // a host weight read by a device op: materialize it through the arena
    // SAFETY: live tensor.
    let size = unsafe { crate::ggml::nbytes(root) };
    let key = WeightKey {
        ptr: root.data as usize,
        size,
    };
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
        // SAFETY: live tensor.
        Err(e) => fatal(format!(
            "host weight {} refused by the arena: {e}",
            unsafe { crate::ggml::describe(root) }
        )),
    }
}
