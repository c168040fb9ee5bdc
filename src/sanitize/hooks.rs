//! The sanitizer's slow paths: what each hook of the backend layer and the scheduler means in
//! the model ([`super::model`]), with the names the reports need (tensors, buffer types,
//! actors, the split and node or input index). Reached only when the sanitizer is on; one
//! lock for the whole state, taken once per hook (once per graph for a compute).

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::os::raw::c_char;
use std::sync::Arc;

use ggml_sys::{
    ggml_backend, ggml_backend_buffer, ggml_backend_event, ggml_backend_event_t, ggml_cgraph,
    ggml_tensor,
};

use super::model::{Actor, Conflict, Hazard, Kind, Model, HOST};
use crate::tensor::meta;

/// The name reports carry.
pub const NAME: &str = "ggml_backend_sched_sanitize";

/// What the scheduler is doing on this thread, for the words of a report.
#[derive(Clone, Copy)]
struct Ctx {
    /// The split being run, if the scheduler is running one.
    split: Option<usize>,
    n_inputs: usize,
    /// The input being copied, before the split computes.
    input: Option<usize>,
    /// Index of the split's first node in the graph being computed (eval-callback runs).
    node_base: usize,
}

const NO_CTX: Ctx = Ctx {
    split: None,
    n_inputs: 0,
    input: None,
    node_base: 0,
};

thread_local! {
    static CTX: Cell<Ctx> = const { Cell::new(NO_CTX) };
}

/// A split input copy made in the current graph: what it copied and when.
struct CopyRec {
    split: usize,
    input: usize,
    src_name: String,
    buf: usize,
    lo: usize,
    hi: usize,
    root: usize,
    /// The last access sequence number of the copy itself.
    seq: u64,
}

/// A buffer as the reports name it, and the device whose queue its blocking accesses wait
/// for (HRX's host buffer types, see [`State::host_buffer_waits`]).
struct BufInfo {
    base: usize,
    buft: String,
    waits_for: Option<usize>,
}

#[derive(Default)]
struct State {
    model: Model,
    actors: HashMap<usize, Actor>,
    names: Vec<String>,
    /// The device of each actor (0 for the host).
    devices: Vec<usize>,
    /// Whether each actor's backend has no `synchronize`: it finishes its work before the
    /// call that queued it returns (the CPU backend), so the host is ordered after it.
    blocking: Vec<bool>,
    bufs: HashMap<usize, BufInfo>,
    copies: HashMap<usize, CopyRec>,
    reports: u64,
}

static STATE: parking_lot::Mutex<Option<State>> = parking_lot::const_mutex(None);

/// Accesses checked and reports made so far, for the exit line.
pub fn totals() -> Option<(u64, u64)> {
    let g = STATE.try_lock()?;
    g.as_ref().map(|s| (s.model.checked, s.reports))
}

/// Text of a C string (NULL reads as "?").
fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return "?".into();
    }
    // SAFETY: non-NULL C strings handed out by ggml objects (names), NUL-terminated.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn tname(t: &ggml_tensor) -> String {
    cstr(t.name.as_ptr())
}

fn op_name(t: &ggml_tensor) -> String {
    // SAFETY: a live tensor; ggml_op_desc returns a static string.
    cstr(unsafe { ggml_sys::ggml_op_desc(t) })
}

/// Where the bytes of a tensor are: its storage buffer (NULL, or a weight buffer: none),
/// and `[lo, hi)` as addresses, and its storage root.
struct Place {
    buf: *mut ggml_backend_buffer,
    lo: usize,
    hi: usize,
    root: usize,
}

fn place(t: &ggml_tensor) -> Option<Place> {
    if t.data.is_null() {
        return None;
    }
    // SAFETY: a live tensor's view source is NULL or live.
    let buf = unsafe { meta::storage_buffer(t) };
    // SAFETY: a live tensor's buffer is NULL or live.
    let b = unsafe { buf.as_ref() }?;
    if b.usage == ggml_sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS {
        return None;
    }
    let lo = t.data as usize;
    let root = if t.view_src.is_null() {
        std::ptr::from_ref(t) as usize
    } else {
        t.view_src as usize
    };
    Some(Place {
        buf,
        lo,
        hi: lo.wrapping_add(meta::nbytes(t)),
        root,
    })
}

/// Most runs one access of a strided tensor is checked as; a tensor of more (a transposed
/// view, one run per element) is checked as the whole span of its bytes, which may report
/// a conflict in bytes between its elements that it never touches.
const MAX_RUNS: usize = 4096;

/// The bytes `t`'s elements occupy, as runs `[lo, hi)` relative to `t.data`, sorted and
/// merged: one run `[0, nbytes)` for a contiguous tensor, one per row for a view that steps
/// over rows (`ggml_view_2d` with a row stride larger than the row), one per element when
/// the first dimension is strided. A strided view counted as its whole span would report
/// writes to the rows between its own (another view's, say) as conflicts. More than
/// [`MAX_RUNS`] runs, or a block type strided in its first dimension, give the span.
fn byte_runs(t: &ggml_tensor) -> Vec<(usize, usize)> {
    let span = vec![(0, meta::nbytes(t))];
    if t.ne.iter().any(|&n| n <= 0) {
        return Vec::new();
    }
    // SAFETY: ggml's static type table; the tensor's type is valid (as for `meta::nbytes`).
    let traits = unsafe { &*ggml_sys::ggml_get_type_traits(t.type_) };
    let (blck, size) = (traits.blck_size.max(1) as usize, traits.type_size);
    let mut ne = t.ne.map(|n| n as usize);
    // The innermost run: a whole row when the first dimension is contiguous, else one element.
    let (mut run, inner) = if t.nb[0] == size {
        ((ne[0] / blck).wrapping_mul(size), 1)
    } else if blck == 1 {
        (size, ne[0])
    } else {
        return span;
    };
    // Outer dimensions that continue the run (a contiguous tensor's, all of them) are taken
    // into it, so that only the dimensions that step over bytes are walked.
    if inner == 1 {
        for (n, &nb) in ne.iter_mut().zip(&t.nb).skip(1) {
            if *n == 1 {
                continue;
            }
            if nb != run {
                break;
            }
            run = run.wrapping_mul(*n);
            *n = 1;
        }
    }
    let count = [inner, ne[1], ne[2], ne[3]]
        .iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n));
    if count.is_none_or(|c| c > MAX_RUNS) {
        return span;
    }
    let mut runs = Vec::with_capacity(count.unwrap_or(0));
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                for i0 in 0..inner {
                    let lo = i0
                        .wrapping_mul(t.nb[0])
                        .wrapping_add(i1.wrapping_mul(t.nb[1]))
                        .wrapping_add(i2.wrapping_mul(t.nb[2]))
                        .wrapping_add(i3.wrapping_mul(t.nb[3]));
                    runs.push((lo, lo.wrapping_add(run)));
                }
            }
        }
    }
    runs.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(runs.len());
    for (lo, hi) in runs {
        match merged.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
}

/// The words that name a queued copy's accesses in their text ([`queued_copy`]); a report
/// whose earlier access has them says what would have ordered the copy.
const QUEUED_COPY: &str = "(cpy_tensor_async)";

/// Whether blocking accesses through a buffer of the buffer type named `buft` wait for its
/// device's queue first: HRX's host buffer types do (`HRXn_HOST`, docs/hrx.md). Others are
/// not taken to: ggml-cuda's and ggml-vulkan's host buffers are plain memory that a queued
/// copy may still read, and taking every device's host buffer for one that waits hid such a
/// race (`cabi-tests/sched-waits`).
fn host_buffer_waits_for_queue(buft: &str) -> bool {
    buft.strip_prefix("HRX")
        .and_then(|r| r.strip_suffix("_HOST"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
}

impl State {
    fn actor(&mut self, b: &ggml_backend) -> Actor {
        let key = std::ptr::from_ref(b) as usize;
        if self.names.is_empty() {
            self.names.push("the host".into());
            self.devices.push(0);
            self.blocking.push(true);
        }
        // A backend freed and another made at the same address (of another device) is a new
        // actor: its name, device and kind of queue are its own.
        if let Some(&a) = self.actors.get(&key) {
            if self.devices[a] == b.device as usize {
                return a;
            }
        }
        let a = self.names.len();
        let name = match b.iface.get_name {
            // SAFETY: the backend's own callback with itself; it returns a static string.
            Some(f) => cstr(unsafe { f(crate::ffi::handle(b)) }),
            None => "?".into(),
        };
        let n = self.names.iter().filter(|x| x.starts_with(&name)).count();
        self.names.push(if n == 0 {
            name
        } else {
            format!("{name}#{}", n + 1)
        });
        self.actors.insert(key, a);
        self.devices.push(b.device as usize);
        self.blocking.push(b.iface.synchronize.is_none());
        a
    }

    /// After work queued on `a`: a backend without `synchronize` has finished it already.
    fn queued(&mut self, a: Actor) {
        if a != HOST && self.blocking[a] {
            self.model.synchronize(a);
        }
    }

    /// A blocking host access through the buffer that holds `t`: when that buffer is HRX's
    /// host buffer type of a device other than the CPU (`HRXn_HOST`), the device's buffer
    /// waits for its queue before the memcpy (docs/hrx.md), so the access is ordered after the
    /// queued work of every backend of that device, as a synchronize would order it.
    fn host_buffer_waits(&mut self, t: &ggml_tensor) {
        let Some(p) = place(t) else { return };
        let Some(dev) = self.buf_info(p.buf).waits_for else {
            return;
        };
        for a in 1..self.devices.len() {
            if self.devices[a] == dev {
                self.model.synchronize(a);
            }
        }
    }

    fn name(&self, a: Actor) -> &str {
        self.names.get(a).map_or("?", |s| s.as_str())
    }

    fn buf_info(&mut self, buf: *mut ggml_backend_buffer) -> &BufInfo {
        self.bufs.entry(buf as usize).or_insert_with(|| {
            // SAFETY: a live buffer (a live tensor's storage buffer).
            let b = unsafe { &*buf };
            let base = match b.iface.get_base {
                // SAFETY: the buffer's own callback with itself.
                Some(f) if b.size > 0 => (unsafe { f(buf) }) as usize,
                _ => 0,
            };
            // SAFETY: a live buffer's type is live for the process.
            let buft = match unsafe { b.buft.as_ref() }.and_then(|t| t.iface.get_name) {
                // SAFETY: the buffer type's own callback; a static string.
                Some(f) => cstr(unsafe { f(b.buft) }),
                None => "?".into(),
            };
            // SAFETY: as above; a buffer type's device is NULL or live for the process.
            let waits_for = unsafe { b.buft.as_ref() }
                .filter(|_| host_buffer_waits_for_queue(&buft))
                .filter(|t| t.iface.is_host.is_some_and(|f| unsafe { f(b.buft) }))
                .map(|t| t.device)
                .filter(|d| !d.is_null())
                // SAFETY: a live device; its own callback.
                .filter(|&d| unsafe { (*d).iface.get_type.map(|f| f(d)) }
                    != Some(ggml_sys::GGML_BACKEND_DEVICE_TYPE_CPU))
                .map(|d| d as usize);
            BufInfo {
                base,
                buft,
                waits_for,
            }
        })
    }

    /// Checks one access and formats its reports.
    fn check(
        &mut self,
        a: Actor,
        kind: Kind,
        t: &ggml_tensor,
        range: Option<(usize, usize)>,
        what: &str,
        out: &mut Vec<String>,
    ) {
        let Some(p) = place(t) else { return };
        let runs: Vec<(usize, usize)> = match range {
            Some((o, s)) => vec![(p.lo.wrapping_add(o), p.lo.wrapping_add(o).wrapping_add(s))],
            None => byte_runs(t)
                .into_iter()
                .map(|(lo, hi)| (p.lo.wrapping_add(lo), p.lo.wrapping_add(hi)))
                .collect(),
        };
        let lo = runs.first().map_or(p.lo, |r| r.0);
        let hi = runs.last().map_or(p.lo, |r| r.1);
        let verb = match kind {
            Kind::Read => "read",
            Kind::Write => "write",
        };
        // SAFETY: a live tensor's view source is NULL or live.
        let text: Arc<str> = match unsafe { t.view_src.as_ref() } {
            // A strided view's bytes are not all of its span: the report's range is the span.
            Some(v) if runs.len() > 1 => format!(
                "{verb} of '{}' (a view of '{}', {} runs of bytes) by {what}",
                tname(t),
                tname(v),
                runs.len()
            ),
            Some(v) => format!(
                "{verb} of '{}' (a view of '{}') by {what}",
                tname(t),
                tname(v)
            ),
            None => format!("{verb} of '{}' by {what}", tname(t)),
        }
        .into();
        let conflicts =
            self.model
                .access_runs(a, kind, p.buf as usize, &runs, text.clone(), p.root);
        for c in conflicts {
            let r = self.report(a, &text, lo, hi, p.buf, &c);
            out.push(r);
        }
    }

    fn report(
        &mut self,
        a: Actor,
        text: &str,
        lo: usize,
        hi: usize,
        buf: *mut ggml_backend_buffer,
        c: &Conflict,
    ) -> String {
        self.reports += 1;
        let info = self.buf_info(buf);
        let (base, buft) = (info.base, info.buft.clone());
        let rel = |x: usize| x.wrapping_sub(base);
        let e = &c.earlier;
        let me = self.name(a).to_string();
        let them = self.name(e.actor).to_string();
        let ctx = CTX.with(Cell::get);
        let should = if a == HOST {
            format!(
                "ggml_backend_synchronize({them}), or ggml_backend_event_synchronize of an event \
                 recorded on {them} after the earlier access, before this one"
            )
        } else if e.actor == HOST {
            format!("a host wait on {me} (ggml_backend_synchronize) before the host access")
        } else if e.what.contains(QUEUED_COPY) && c.hazard == Hazard::WriteAfterRead {
            format!(
                "the queued copy run before its source is written again: \
                 ggml_backend_synchronize({them}) after the copy was queued (the scheduler's \
                 wait after a queued copy from host memory) and before this was queued on {me}"
            )
        } else if ctx.split.is_some() && ctx.input.is_none() && ctx.n_inputs == 0 {
            format!(
                "the scheduler's wait before a split without inputs: ggml_backend_event_synchronize \
                 of {them}'s event (or ggml_backend_synchronize({them})) before split {} is queued \
                 on {me}",
                ctx.split.unwrap_or(0)
            )
        } else {
            format!(
                "ggml_backend_event_record(event, {them}) after the earlier access and \
                 ggml_backend_event_wait({me}, event) before this one, or a host wait on {them} \
                 before this was queued"
            )
        };
        format!(
            "{NAME}: {}: buffer type {buft}, bytes [{}, {}) of buffer {:#x}\n  \
             now:     {text} on {me}, bytes [{}, {})\n  \
             earlier: {} on {them}, bytes [{}, {})\n  \
             ordered by nothing; expected: {should}\n",
            c.hazard.words(),
            rel(c.lo),
            rel(c.hi),
            buf as usize,
            rel(lo),
            rel(hi),
            e.what,
            rel(e.lo),
            rel(e.hi),
        )
    }
}

/// Runs `f` on the state (made on first use) and then emits the reports it collected, after
/// the lock is released: at level 1 the first aborts through ggml's abort.
fn with(f: impl FnOnce(&mut State, &mut Vec<String>)) {
    let mut out = Vec::new();
    {
        let mut g = STATE.lock();
        f(g.get_or_insert_with(State::default), &mut out);
    }
    out.into_iter().for_each(emit);
}

/// One report: at level 1 the abort through ggml's abort, else ggml's logger.
#[cfg(not(test))]
fn emit(r: String) {
    if super::level() == 1 {
        // `fatal` writes "NAME: message"; the report already starts with the name.
        let text = r.strip_prefix(NAME).and_then(|t| t.strip_prefix(": "));
        crate::ffi::fatal(NAME, text.unwrap_or(&r).trim_end());
    }
    crate::ffi::log::error(&r);
}

#[cfg(test)]
thread_local! {
    static SEEN: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Unit tests collect the reports instead.
#[cfg(test)]
fn emit(r: String) {
    SEEN.with(|s| s.borrow_mut().push(r));
}

/// Words for an access the scheduler makes or orders, from this thread's context.
fn by(func: &str) -> String {
    let ctx = CTX.with(Cell::get);
    match (ctx.split, ctx.input) {
        (Some(s), Some(k)) => format!("{func} for input {k} of split {s}"),
        (Some(s), None) => format!("{func} in split {s}"),
        _ => func.to_string(),
    }
}

pub fn synchronize(b: &ggml_backend) {
    with(|s, _| {
        let a = s.actor(b);
        s.model.synchronize(a);
    })
}

pub fn event_record(e: ggml_backend_event_t, b: &ggml_backend) {
    with(|s, _| {
        let a = s.actor(b);
        s.model.record(e as usize, a);
    })
}

pub fn event_wait(b: &ggml_backend, e: ggml_backend_event_t) {
    with(|s, _| {
        let a = s.actor(b);
        s.model.wait(a, e as usize);
    })
}

pub fn event_synchronize(e: &ggml_backend_event) {
    with(|s, _| s.model.event_synchronize(std::ptr::from_ref(e) as usize))
}

pub fn buffer_free(buf: usize) {
    with(|s, _| {
        s.model.forget_buffer(buf);
        s.bufs.remove(&buf);
    })
}

/// One data access of the `ggml_backend_tensor_*` family (`queue`: the backend whose queue
/// makes it, else the host), `size` bytes at `offset` of `t`.
pub fn data(
    queue: Option<&ggml_backend>,
    kind: Kind,
    t: &ggml_tensor,
    offset: usize,
    size: usize,
    func: &str,
) {
    with(|s, out| {
        let a = match queue {
            Some(b) => {
                let a = s.actor(b);
                s.model.submit(a);
                a
            }
            None => {
                s.host_buffer_waits(t);
                HOST
            }
        };
        s.check(a, kind, t, Some((offset, size)), &by(func), out);
        s.queued(a);
    })
}

/// A blocking copy made by the host: reads all of `src`, writes all of `dst`.
pub fn host_copy(src: &ggml_tensor, dst: &ggml_tensor, func: &str) {
    with(|s, out| {
        let w = by(func);
        s.check(
            HOST,
            Kind::Read,
            src,
            None,
            &format!("{w} into '{}'", tname(dst)),
            out,
        );
        s.check(
            HOST,
            Kind::Write,
            dst,
            None,
            &format!("{w} from '{}'", tname(src)),
            out,
        );
    })
}

/// A copy queued on `dst_b` by its `cpy_tensor_async`, ordered (by that callback's contract)
/// after the work queued on `src_b` so far.
pub fn queued_copy(
    src_b: Option<&ggml_backend>,
    dst_b: &ggml_backend,
    src: &ggml_tensor,
    dst: &ggml_tensor,
    func: &str,
) {
    with(|s, out| {
        let a = s.actor(dst_b);
        s.model.submit(a);
        if let Some(sb) = src_b {
            let p = s.actor(sb);
            s.model.queue_after(a, p);
        }
        let w = by(func);
        let into = format!("{w} {QUEUED_COPY} into '{}'", tname(dst));
        s.check(a, Kind::Read, src, None, &into, out);
        let from = format!("{w} {QUEUED_COPY} from '{}'", tname(src));
        s.check(a, Kind::Write, dst, None, &from, out);
        s.queued(a);
    })
}

/// A graph queued on `b`: every non-view node reads its sources and writes its own bytes.
/// Inside a scheduler split, a source that is a split input copy of this graph must not have
/// been written since the copy (the stale-copy check).
///
/// # Safety
/// `g` must be a live graph of live tensors.
pub unsafe fn graph_compute(b: &ggml_backend, g: *const ggml_cgraph) {
    // SAFETY: the caller's contract.
    let Some(g) = (unsafe { g.as_ref() }) else {
        return;
    };
    let ctx = CTX.with(Cell::get);
    let n = g.n_nodes.max(0) as usize;
    with(|s, out| {
        let a = s.actor(b);
        s.model.submit(a);
        let me = s.name(a).to_string();
        for i in 0..n {
            // SAFETY: `i` < `n_nodes`; the graph's nodes are live (the caller's contract).
            let Some(node) = (unsafe { (*g.nodes.add(i)).as_ref() }) else {
                continue;
            };
            if meta::op_is_empty(node.op) {
                continue;
            }
            let at = match ctx.split {
                Some(sp) => format!("split {sp}"),
                None => "a graph".to_string(),
            };
            let who = format!(
                "node {} '{}' ({}) of {at}",
                ctx.node_base + i,
                tname(node),
                op_name(node)
            );
            for (j, &src) in node.src.iter().enumerate() {
                if node.src[..j].contains(&src) {
                    continue; // one read per source tensor (`x + x` reads x once)
                }
                if meta::is_destination_only(node, j) {
                    continue; // written (the node's own bytes, below), never read
                }
                // SAFETY: a live node's sources are NULL or live.
                let Some(src) = (unsafe { src.as_ref() }) else {
                    continue;
                };
                s.check(a, Kind::Read, src, None, &who, out);
                if ctx.split.is_some() {
                    s.stale(src, &who, &me, out);
                }
            }
            s.check(a, Kind::Write, node, None, &who, out);
            for w in meta::written_sources(node) {
                // SAFETY: a live node's sources are live.
                s.check(a, Kind::Write, unsafe { &*w }, None, &who, out);
            }
        }
        s.queued(a);
    })
}

impl State {
    /// The stale-copy check of a source read by a split.
    fn stale(&mut self, src: &ggml_tensor, who: &str, me: &str, out: &mut Vec<String>) {
        let key = std::ptr::from_ref(src) as usize;
        let Some(c) = self.copies.get(&key) else {
            return;
        };
        let Some(w) = self
            .model
            .shadow(c.buf)
            .and_then(|sh| sh.last_write_of_root(c.lo, c.hi, c.root))
            .filter(|w| w.seq > c.seq)
            .cloned()
        else {
            return;
        };
        let (split, input, src_name, buf, lo, hi) =
            (c.split, c.input, c.src_name.clone(), c.buf, c.lo, c.hi);
        self.reports += 1;
        let info = self.buf_info(buf as *mut ggml_backend_buffer);
        let (base, buft) = (info.base, info.buft.clone());
        let them = self.name(w.actor).to_string();
        out.push(format!(
            "{NAME}: stale split input copy: {who} on {me} reads '{}', the copy of '{src_name}' \
             made for input {input} of split {split}, but '{src_name}' (buffer type {buft}, bytes \
             [{}, {})) was written again after that copy: {} on {them}, bytes [{}, {}); expected: \
             a new copy (the reading split should list '{src_name}' as an input)\n",
            tname(src),
            lo.wrapping_sub(base),
            hi.wrapping_sub(base),
            w.what,
            w.lo.wrapping_sub(base),
            w.hi.wrapping_sub(base),
        ));
    }
}

/// The scheduler starts computing a graph (`Some(())`) or has finished (`None`): the copies of
/// the previous graph are forgotten and the context cleared.
pub fn sched_graph(begin: bool) {
    CTX.with(|c| c.set(NO_CTX));
    if begin {
        with(|s, _| s.copies.clear());
    }
}

/// The scheduler starts split `split`, which has `n_inputs` inputs.
pub fn sched_split(split: usize, n_inputs: usize) {
    CTX.with(|c| {
        c.set(Ctx {
            split: Some(split),
            n_inputs,
            input: None,
            node_base: 0,
        })
    });
}

/// The scheduler copies input `k` of the current split (`None`: the copies are done).
pub fn sched_input(k: Option<usize>) {
    CTX.with(|c| {
        let mut x = c.get();
        x.input = k;
        c.set(x)
    });
}

/// The split's nodes from `base` on are computed next (the eval callback cuts runs).
pub fn sched_nodes_from(base: usize) {
    CTX.with(|c| {
        let mut x = c.get();
        x.node_base = base;
        x.input = None;
        c.set(x)
    });
}

/// The scheduler copied `input` into `cpy` for the current split's current input; `queued`:
/// by the split backend's `cpy_tensor_async` (from `input_backend`), which no other hook saw.
pub fn sched_copied(
    input: &ggml_tensor,
    cpy: &ggml_tensor,
    queued: Option<(Option<&ggml_backend>, &ggml_backend)>,
) {
    if let Some((src_b, dst_b)) = queued {
        queued_copy(
            src_b,
            dst_b,
            input,
            cpy,
            "ggml_backend_sched_compute_splits",
        );
    }
    let ctx = CTX.with(Cell::get);
    let (Some(split), Some(k)) = (ctx.split, ctx.input) else {
        return;
    };
    let Some(p) = place(input) else { return };
    with(|s, _| {
        let seq = s.model.next_seq() - 1;
        s.copies.insert(
            std::ptr::from_ref(cpy) as usize,
            CopyRec {
                split,
                input: k,
                src_name: tname(input),
                buf: p.buf as usize,
                lo: p.lo,
                hi: p.hi,
                root: p.root,
                seq,
            },
        );
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    // SAFETY (for the zeroed structs below): ggml's ABI structs are plain C data for which
    // all-zero bytes are valid (NULL pointers, `None` callbacks, zero sizes and enums).
    fn zeroed<T>() -> Box<T> {
        // SAFETY: see above; only used for the bindgen structs of ggml.
        Box::new(unsafe { std::mem::zeroed() })
    }

    fn tensor(name: &str, buf: &mut ggml_sys::ggml_backend_buffer, at: usize) -> Box<ggml_tensor> {
        let mut t: Box<ggml_tensor> = zeroed();
        t.type_ = ggml_sys::GGML_TYPE_F32;
        t.ne = [16, 1, 1, 1];
        t.nb = [4, 64, 64, 64];
        t.buffer = buf;
        t.data = at as *mut std::ffi::c_void;
        for (d, s) in t.name.iter_mut().zip(name.bytes()) {
            *d = s as c_char;
        }
        t
    }

    fn graph(nodes: &mut [*mut ggml_tensor]) -> ggml_cgraph {
        // SAFETY: as `zeroed`.
        let mut g: ggml_cgraph = unsafe { std::mem::zeroed() };
        g.n_nodes = nodes.len() as i32;
        g.nodes = nodes.as_mut_ptr();
        g
    }

    /// An F32 tensor header of shape `ne` and strides `nb` (bytes), for [`byte_runs`].
    fn shaped(ne: [i64; 4], nb: [usize; 4]) -> Box<ggml_tensor> {
        let mut t: Box<ggml_tensor> = zeroed();
        t.type_ = ggml_sys::GGML_TYPE_F32;
        t.ne = ne;
        t.nb = nb;
        t
    }

    #[test]
    fn a_strided_view_is_checked_as_its_rows_only() {
        // Contiguous 32 x 8: one run, however many rows.
        assert_eq!(
            byte_runs(&shaped([32, 8, 1, 1], [4, 128, 1024, 1024])),
            vec![(0, 1024)]
        );
        // Every other row of it (ggml_view_2d with a stride of two rows): four rows of 128 B.
        assert_eq!(
            byte_runs(&shaped([32, 4, 1, 1], [4, 256, 1024, 1024])),
            vec![(0, 128), (256, 384), (512, 640), (768, 896)]
        );
        // Rows contiguous within each of 2 planes that are 1 KiB apart: one run a plane.
        assert_eq!(
            byte_runs(&shaped([32, 2, 2, 1], [4, 128, 1024, 2048])),
            vec![(0, 256), (1024, 1280)]
        );
        // Transposed 2 x 3 (element stride 12 B, rows 4 B apart): every element, merged where
        // they touch (here they all do), so the same bytes as the contiguous span.
        assert_eq!(
            byte_runs(&shaped([2, 3, 1, 1], [12, 4, 24, 24])),
            vec![(0, 24)]
        );
        // An empty dimension touches nothing.
        assert!(byte_runs(&shaped([32, 0, 1, 1], [4, 128, 0, 0])).is_empty());
        // More runs than the cap: the span (an over-approximation, documented).
        let many = shaped([1, 5000, 1, 1], [4, 8, 40000, 40000]);
        assert_eq!(byte_runs(&many), vec![(0, meta::nbytes(&many))]);
    }

    #[test]
    fn only_hrx_host_buffers_wait_for_their_queue() {
        assert!(host_buffer_waits_for_queue("HRX0_HOST"));
        assert!(host_buffer_waits_for_queue("HRX12_HOST"));
        for name in [
            "CUDA_Host",
            "Vulkan_Host",
            "HRX0",
            "HRX_HOST",
            "HRXa_HOST",
            "CPU",
            "TA",
        ] {
            assert!(!host_buffer_waits_for_queue(name), "{name}");
        }
    }

    /// The scheduler's context and a stale copy, through the hooks (the real report text):
    /// split 0 copies `x` (host copy), split 1 writes `x` in place on DEV, split 2 reads the
    /// copy again without a new one.
    #[test]
    fn a_copy_read_after_its_source_was_written_again_is_reported_stale() {
        let mut host_buf: Box<ggml_sys::ggml_backend_buffer> = zeroed();
        host_buf.size = 4096;
        let mut dev_buf: Box<ggml_sys::ggml_backend_buffer> = zeroed();
        dev_buf.size = 4096;
        let x = tensor("x", &mut host_buf, 0x10000);
        let cpy = tensor("DEV#x#0", &mut dev_buf, 0x20000);
        let mut w = tensor("x_upd", &mut host_buf, 0x10000);
        w.op = ggml_sys::GGML_OP_SCALE;
        w.view_src = ptr::from_ref(&*x).cast_mut();
        let mut r = tensor("y", &mut dev_buf, 0x20400);
        r.op = ggml_sys::GGML_OP_ADD;
        r.src[0] = ptr::from_ref(&*cpy).cast_mut();
        let dev: Box<ggml_backend> = zeroed();

        sched_graph(true);
        sched_split(0, 1);
        sched_input(Some(0));
        host_copy(&x, &cpy, "ggml_backend_sched_compute_splits");
        sched_copied(&x, &cpy, None);
        sched_split(1, 0);
        sched_nodes_from(0);
        let mut n1 = [ptr::from_ref(&*w).cast_mut()];
        let g1 = graph(&mut n1);
        // SAFETY: a graph of live tensors (above).
        unsafe { graph_compute(&dev, &g1) };
        sched_split(2, 0);
        sched_nodes_from(0);
        let mut n2 = [ptr::from_ref(&*r).cast_mut()];
        let g2 = graph(&mut n2);
        // SAFETY: as above.
        unsafe { graph_compute(&dev, &g2) };
        sched_graph(false);

        let seen = SEEN.with(|s| s.take());
        let stale: Vec<&String> = seen.iter().filter(|r| r.contains("stale")).collect();
        assert_eq!(stale.len(), 1, "{seen:#?}");
        assert_eq!(
            stale[0].as_str(),
            "ggml_backend_sched_sanitize: stale split input copy: node 0 'y' (ADD) of split 2 \
             on ? reads 'DEV#x#0', the copy of 'x' made for input 0 of split 0, but 'x' (buffer \
             type ?, bytes [65536, 65600)) was written again after that copy: write of 'x_upd' \
             (a view of 'x') by node 0 'x_upd' (SCALE) of split 1 on ?, bytes [65536, 65600); \
             expected: a new copy (the reading split should list 'x' as an input)\n"
        );
        // The in-place write on DEV after the host's copy read of `x` is ordered (DEV joined
        // the host when it was queued), so nothing else is reported.
        assert_eq!(seen.len(), 1, "{seen:#?}");
        buffer_free(ptr::from_ref(&*host_buf) as usize);
        buffer_free(ptr::from_ref(&*dev_buf) as usize);
    }
}
