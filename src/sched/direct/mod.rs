//! Ordering a split after another backend's queued writes to memory it uses without a copy.
//! Not in stock.
//!
//! The scheduler orders splits through their input copies: a split that reads another
//! backend's tensor gets a copy, and the copy waits for the tensor's backend. A backend that
//! can use another's memory directly (`supports_buft` of that memory's buffer type: host
//! buffers, for the CPU and for HRX) gets no copy, and nothing orders it. When the writer
//! is asynchronous (HRX queues a split and writes when its queue runs it), a later split of
//! another backend can touch those bytes before the write lands:
//!
//! - an HRX node writing a KV cache in host memory (`-nkvo`; either scheduler places the
//!   write there, as HRX accepts host buffer types), read by a CPU split whose inputs come
//!   from elsewhere, or with pipeline copies, where the CPU split's user-input copies wait
//!   for the CPU only;
//! - an in-place node on HRX writing a tensor the CPU computed, in the CPU's compute buffer:
//!   the allocator gives those bytes to a later CPU node after their last use, and the CPU
//!   writes it before the queued write lands on top (a review's case, 2026-12-06).
//!
//! Stock waits only before a split with no inputs at all, for the backend just before it.
//!
//! Ours notes, per split of an asynchronous backend (one with a `synchronize`; ggml-cpu has
//! none, its compute returns finished), the tensors its nodes write in memory another backend
//! accepts (the nodes, and the moments `OPT_STEP_ADAMW` updates): [`DirectWrites::work_out`],
//! each time a graph is split and allocated (a replay keeps the list, as it keeps the
//! placement). After such a split is queued, the bytes of those tensors, read from their
//! headers then, are pending for its backend until the scheduler waits for that backend.
//! Before a split of another backend copies its inputs, any pending byte that the split reads
//! or writes (its nodes, their sources, the tensors its input copies read) makes the host
//! synchronize the writer first ([`DirectWrites::wait_for_writers`]). Pending bytes outlive
//! the graph (a KV cache written in one ubatch is read in the next); every synchronize the
//! scheduler makes of the writer clears them. A graph without such writes (every graph of
//! ggml-cuda on a discrete GPU, which writes only its own device buffers) pays one pass over
//! its nodes when it is split and one check of an empty list per split.
//!
//! Not ordered, in either scheduler: the other direction, a queued split that reads host
//! memory when its queue runs, and a later split of another backend that writes those bytes
//! first (HRX, on either runtime, has read a job's host memory when `graph_compute` returns);
//! and writes outside the scheduler's graphs.

mod ranges;

use std::cell::RefCell;

use ggml_sys::{ggml_backend_buffer_type_t, ggml_cgraph, ggml_tensor};

use super::caps::Caps;
use super::inspect;
use crate::tensor::meta::{nbytes, op_is_empty, storage_buffer, written_sources};
use ranges::Ranges;

/// The bytes `t` spans in its buffer, `[data, data + nbytes)` as addresses; empty when it
/// has no storage.
///
/// # Safety
/// `t` must be a live tensor.
unsafe fn span(t: *mut ggml_tensor) -> (usize, usize) {
    // SAFETY: live (this function's contract).
    let t = unsafe { &*t };
    let start = t.data as usize;
    if start == 0 {
        return (0, 0);
    }
    (start, start.saturating_add(nbytes(t)))
}

/// What one split of an asynchronous backend writes in memory another backend accepts.
#[derive(Default, Debug, PartialEq)]
struct SplitWrites {
    /// The tensors its nodes write: the nodes, and what `OPT_STEP_ADAMW` updates besides.
    nodes: Vec<*mut ggml_tensor>,
    /// Its input copies there (every pipeline copy's): the backend may queue the copy
    /// (`cpy_tensor_async`, the used experts' uploads), which then lands after the split's
    /// compute is queued. Only a copy the backend accepted to queue becomes pending
    /// ([`DirectWrites::queued_copy`]).
    copies: Vec<*mut ggml_tensor>,
}

/// The writes a split makes into memory another backend uses without a copy, and which of
/// them may still be queued.
#[derive(Default)]
pub(crate) struct DirectWrites {
    /// Per split of the graph split last: what it writes in memory another backend accepts
    /// (nothing for a synchronous backend). `None`: not worked out since that split.
    per_split: Option<Vec<SplitWrites>>,
    /// Per backend: the bytes its queued splits write, not waited for since.
    pending: RefCell<Vec<Ranges>>,
    /// `(buffer type, backend)` -> whether a backend other than that one accepts the type.
    shared: Vec<(ggml_backend_buffer_type_t, usize, bool)>,
}

impl DirectWrites {
    /// Forgets the per-split writers: the graph is split afresh.
    pub fn invalidate(&mut self) {
        self.per_split = None;
    }

    /// Whether the writers of the graph split last are known.
    pub fn known(&self) -> bool {
        self.per_split.is_some()
    }

    /// Works out, for each split in `splits` (backend index, split graph, its input copies:
    /// every pipeline copy of every input), the tensors its nodes write in a buffer another
    /// backend accepts (each node, and the sources an op writes besides, [`written_sources`])
    /// and its input copies there, for backends with a `synchronize` (`is_async`). The graph
    /// must be allocated: each tensor's buffer decides.
    ///
    /// # Safety
    /// Every split graph must be live, its nodes and the copies allocated tensors.
    pub unsafe fn work_out<'a, C: IntoIterator<Item = *mut ggml_tensor>>(
        &mut self,
        caps: &dyn Caps,
        is_async: &dyn Fn(usize) -> bool,
        splits: impl Iterator<Item = (usize, &'a ggml_cgraph, C)>,
    ) {
        let mut per_split = self.per_split.take().unwrap_or_default();
        per_split.clear();
        for (b, g, copies) in splits {
            let mut writes = SplitWrites::default();
            if is_async(b) {
                // SAFETY: a live split graph (this function's contract).
                for &n in unsafe { inspect::nodes(g) } {
                    // SAFETY: a live node of the split.
                    let node = unsafe { &*n };
                    if op_is_empty(node.op) {
                        continue;
                    }
                    for t in std::iter::once(n).chain(written_sources(node)) {
                        // SAFETY: a live node or source; its view source, if any, is live
                        // too (`storage_buffer`'s contract).
                        let buf = unsafe { storage_buffer(&*t) };
                        if buf.is_null() {
                            continue;
                        }
                        // SAFETY: an allocated tensor's buffer is live.
                        let buft = unsafe { (*buf).buft };
                        // SAFETY: a live buffer's type is live.
                        if unsafe { self.shared_with_another(caps, buft, b) } {
                            writes.nodes.push(t);
                        }
                    }
                }
                for c in copies {
                    // SAFETY: an allocated input copy (this function's contract).
                    if unsafe { self.in_shared_memory(caps, c, b) } {
                        writes.copies.push(c);
                    }
                }
            }
            per_split.push(writes);
        }
        self.per_split = Some(per_split);
    }

    /// Whether `t` is allocated in a buffer whose type a backend other than `b` accepts.
    ///
    /// # Safety
    /// `t` must be live, its view source too.
    unsafe fn in_shared_memory(&mut self, caps: &dyn Caps, t: *mut ggml_tensor, b: usize) -> bool {
        // SAFETY: live (this function's contract).
        let buf = unsafe { storage_buffer(&*t) };
        // SAFETY: an allocated tensor's buffer is live, and so is its type (`&&` skips NULL).
        !buf.is_null() && unsafe { self.shared_with_another(caps, (*buf).buft, b) }
    }

    /// Whether a backend other than `b` accepts buffers of `buft` (so reads them without a
    /// copy); answers are kept per scheduler.
    ///
    /// # Safety
    /// `buft` must be live.
    unsafe fn shared_with_another(
        &mut self,
        caps: &dyn Caps,
        buft: ggml_backend_buffer_type_t,
        b: usize,
    ) -> bool {
        if let Some(&(_, _, s)) = self.shared.iter().find(|e| e.0 == buft && e.1 == b) {
            return s;
        }
        // SAFETY: live (this function's contract).
        let s = (0..caps.n_backends()).any(|c| c != b && unsafe { caps.supports_buft(c, buft) });
        self.shared.push((buft, b, s));
        s
    }

    /// Before split `graph` of backend `b` copies its `inputs` and is computed: synchronizes
    /// (with `sync`) every other backend with pending bytes that a node of the split writes,
    /// one of their sources reads, or an input copy reads, and forgets that backend's pending
    /// bytes. Returns, for each wait in order, the backend waited for and the tensor whose
    /// bytes made it wait.
    ///
    /// # Safety
    /// `graph` must be a live split graph of live tensors, `inputs` live tensors.
    pub unsafe fn wait_for_writers(
        &self,
        b: usize,
        graph: &ggml_cgraph,
        inputs: &[*mut ggml_tensor],
        sync: &mut dyn FnMut(usize),
    ) -> Vec<(usize, *mut ggml_tensor)> {
        let mut waited = Vec::new();
        let mut pending = self.pending.borrow_mut();
        if pending
            .iter()
            .enumerate()
            .all(|(a, bytes)| a == b || bytes.is_empty())
        {
            return waited;
        }
        // The split's inputs are read by their copies; its nodes write themselves and read
        // their sources (inputs' copies among them, which no other backend writes).
        // SAFETY: a live split graph (this function's contract).
        let nodes = unsafe { inspect::nodes(graph) };
        let touched = inputs.iter().copied().chain(nodes.iter().flat_map(|&n| {
            // SAFETY: a live node.
            let node = unsafe { &*n };
            std::iter::once(n).chain(inspect::sources(node).map(|(_, s)| s))
        }));
        for t in touched {
            // SAFETY: a live tensor of the split (this function's contract).
            let (start, end) = unsafe { span(t) };
            for (a, bytes) in pending.iter_mut().enumerate() {
                if a != b && bytes.overlaps(start, end) {
                    sync(a);
                    bytes.clear();
                    waited.push((a, t));
                }
            }
        }
        waited
    }

    /// After split `split` of backend `b` was queued: the bytes of the tensors it writes
    /// (listed by [`DirectWrites::work_out`]) are pending for `b`.
    ///
    /// # Safety
    /// The tensors listed for the split (its nodes and the sources they write) must be live:
    /// the graph split last, still allocated.
    pub unsafe fn queued(&self, split: usize, b: usize) {
        let Some(writes) = self.per_split.as_ref().and_then(|p| p.get(split)) else {
            return;
        };
        if writes.nodes.is_empty() {
            return;
        }
        // SAFETY: the split's written tensors are live (this function's contract).
        unsafe { self.pend(b, &writes.nodes) };
    }

    /// After backend `b` accepted to queue a write of split `split`'s input copy `copy`
    /// (`cpy_tensor_async`, or the used experts' uploads): its bytes are pending for `b` when
    /// another backend accepts that memory (the copy is among the split's listed by
    /// [`DirectWrites::work_out`]). A copy the host made is done and not listed here.
    ///
    /// # Safety
    /// `copy` must be live and allocated: a copy of the graph split last.
    pub unsafe fn queued_copy(&self, split: usize, b: usize, copy: *mut ggml_tensor) {
        let Some(writes) = self.per_split.as_ref().and_then(|p| p.get(split)) else {
            return;
        };
        if writes.copies.contains(&copy) {
            // SAFETY: live (this function's contract).
            unsafe { self.pend(b, &[copy]) };
        }
    }

    /// Marks the bytes of `tensors` pending for backend `b`.
    ///
    /// # Safety
    /// Every tensor must be live.
    unsafe fn pend(&self, b: usize, tensors: &[*mut ggml_tensor]) {
        let mut pending = self.pending.borrow_mut();
        if pending.len() <= b {
            pending.resize_with(b + 1, Ranges::default);
        }
        for &t in tensors {
            // SAFETY: live (this function's contract).
            let (start, end) = unsafe { span(t) };
            pending[b].insert(start, end);
        }
    }

    /// Backend `b` was waited for: nothing it queued is pending.
    pub fn synchronized(&self, b: usize) {
        if let Some(bytes) = self.pending.borrow_mut().get_mut(b) {
            bytes.clear();
        }
    }

    /// Every backend was waited for.
    pub fn synchronized_all(&self) {
        for bytes in self.pending.borrow_mut().iter_mut() {
            bytes.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mock::{graph, Arena, Mock};
    use ggml_sys::{GGML_BACKEND_BUFFER_USAGE_ANY, GGML_OP_ADD};

    /// Backend 0 a device that also accepts the CPU's buffer type (0x200, host), backend 1
    /// the CPU; a KV-like `cache` in a CPU buffer at 0x1000 (16 bytes), `w` writing it in
    /// place and `g` a node in the device's own buffer (0x100).
    struct Setup {
        arena: Arena,
        caps: Mock,
        cache: *mut ggml_tensor,
        w: *mut ggml_tensor,
        g: *mut ggml_tensor,
    }

    fn setup() -> Setup {
        let mut caps = Mock::new(&[&[GGML_OP_ADD], &[GGML_OP_ADD]]);
        caps.backends[0].bufts.insert(0x200);
        let mut arena = Arena::default();
        let host = arena.buffer(0x200, GGML_BACKEND_BUFFER_USAGE_ANY);
        let own = arena.buffer(0x100, GGML_BACKEND_BUFFER_USAGE_ANY);
        let cache = arena.leaf("cache", host);
        let w = arena.view_node("w", GGML_OP_ADD, cache, &[cache]);
        let g = arena.tensor("g", GGML_OP_ADD, &[w]);
        // SAFETY: tensors of the arena, given the storage an allocator would: a view has
        // its view source's buffer and bytes.
        unsafe {
            (*cache).data = 0x1000 as *mut _;
            (*w).buffer = host;
            (*w).data = 0x1000 as *mut _;
            (*g).buffer = own;
            (*g).data = 0x9000 as *mut _;
        }
        Setup {
            arena,
            caps,
            cache,
            w,
            g,
        }
    }

    /// `work_out` over one split per entry of `nodes` (backend, nodes), without input copies.
    fn worked_out(
        s: &Setup,
        is_async: &dyn Fn(usize) -> bool,
        nodes: &mut [(usize, Vec<*mut ggml_tensor>)],
    ) -> DirectWrites {
        let mut with_copies: Vec<_> = nodes
            .iter_mut()
            .map(|(b, n)| (*b, std::mem::take(n), vec![]))
            .collect();
        worked_out_with_copies(s, is_async, &mut with_copies)
    }

    /// `work_out` over one split per entry (backend, nodes, input copies).
    fn worked_out_with_copies(
        s: &Setup,
        is_async: &dyn Fn(usize) -> bool,
        splits: &mut [(usize, Vec<*mut ggml_tensor>, Vec<*mut ggml_tensor>)],
    ) -> DirectWrites {
        let mut d = DirectWrites::default();
        let graphs: Vec<(usize, ggml_cgraph, &[*mut ggml_tensor])> = splits
            .iter_mut()
            .map(|(b, n, c)| (*b, graph(n, &mut []), c.as_slice()))
            .collect();
        // SAFETY: graphs over the arena's tensors, alive for the call.
        unsafe {
            d.work_out(
                &s.caps,
                is_async,
                graphs.iter().map(|(b, g, c)| (*b, g, c.iter().copied())),
            )
        };
        d
    }

    /// The nodes listed per split.
    fn listed(d: &DirectWrites) -> Option<Vec<Vec<*mut ggml_tensor>>> {
        d.per_split
            .as_ref()
            .map(|p| p.iter().map(|w| w.nodes.clone()).collect())
    }

    #[test]
    fn an_asynchronous_split_notes_its_writers_into_shared_memory() {
        let s = setup();
        let mut nodes = vec![(0, vec![s.w, s.g]), (1, vec![s.g])];
        let d = worked_out(&s, &|b| b == 0, &mut nodes);
        // `w` writes the cache, which the CPU accepts; `g` is in the device's own memory.
        assert_eq!(listed(&d), Some(vec![vec![s.w], vec![]]));
        // A synchronous backend's writes are done when its compute returns.
        let d = worked_out(&s, &|_| false, &mut nodes);
        assert_eq!(listed(&d), Some(vec![vec![], vec![]]));
        assert!(d.known());
    }

    #[test]
    fn an_optimizer_step_notes_the_moment_it_writes_besides_its_result() {
        let mut s = setup();
        // OPT_STEP_ADAMW's result is a view of its parameter (in the device's own memory
        // here), and it writes its moments too: `m` in the CPU's buffer, `v` in the device's.
        let host = s.arena.buffer(0x200, GGML_BACKEND_BUFFER_USAGE_ANY);
        let own = s.arena.buffer(0x100, GGML_BACKEND_BUFFER_USAGE_ANY);
        let (param, grad) = (s.arena.leaf("param", own), s.arena.leaf("grad", own));
        let (m, v) = (s.arena.leaf("m", host), s.arena.leaf("v", own));
        let step = s.arena.view_node(
            "step",
            ggml_sys::GGML_OP_OPT_STEP_ADAMW,
            param,
            &[param, grad, m, v],
        );
        let mut nodes = vec![(0, vec![step])];
        let d = worked_out(&s, &|b| b == 0, &mut nodes);
        assert_eq!(listed(&d), Some(vec![vec![m]]));
    }

    #[test]
    fn a_split_touching_pending_bytes_waits_once_for_their_writer() {
        let mut s = setup();
        let mut nodes = vec![(0, vec![s.w])];
        let d = worked_out(&s, &|b| b == 0, &mut nodes);
        // A view of the cache's last 8 bytes, read by a CPU node.
        let view = s
            .arena
            .view_node("kview", ggml_sys::GGML_OP_VIEW, s.cache, &[]);
        let r = s.arena.tensor("r", GGML_OP_ADD, &[view, s.g]);
        // Another tensor the allocator put at the cache's bytes, written by a CPU node.
        let reuse = s.arena.tensor("reuse", GGML_OP_ADD, &[s.g]);
        // SAFETY: tensors of the arena.
        unsafe {
            (*view).data = 0x1008 as *mut _;
            (*view).ne = [2, 1, 1, 1];
            (*r).data = 0x5000 as *mut _;
            (*reuse).data = 0x0ffc as *mut _;
        }
        let (mut reader, mut writer) = ([r], [reuse]);
        let (rg, wg) = (graph(&mut reader, &mut []), graph(&mut writer, &mut []));
        let mut none: [*mut ggml_tensor; 0] = [];
        let empty = graph(&mut none, &mut []);
        let mut synced = Vec::new();
        let mut sync = |b: usize| synced.push(b);

        // Nothing queued yet: no wait.
        // SAFETY: graphs over the arena's tensors, which stay live (every call below).
        unsafe {
            assert!(d.wait_for_writers(1, &rg, &[], &mut sync).is_empty());
            d.queued(0, 0);
            // The writer's own backend touches them in queue order: no wait.
            assert!(d.wait_for_writers(0, &rg, &[], &mut sync).is_empty());
            // Another backend reading a view of the cache waits for backend 0, once.
            let waited = d.wait_for_writers(1, &rg, &[], &mut sync);
            assert_eq!(waited, vec![(0, view)]);
            assert!(d.wait_for_writers(1, &rg, &[], &mut sync).is_empty());
            // A node writing other bytes that overlap the cache's waits too.
            d.queued(0, 0);
            let waited = d.wait_for_writers(1, &wg, &[], &mut sync);
            assert_eq!(waited, vec![(0, reuse)]);
            // An input the split copies: the copy reads those bytes.
            d.queued(0, 0);
            let waited = d.wait_for_writers(1, &empty, &[s.w], &mut sync);
            assert_eq!(waited, vec![(0, s.w)]);
            // A synchronize of the writer, or of every backend, clears them.
            d.queued(0, 0);
            d.synchronized(0);
            assert!(d.wait_for_writers(1, &rg, &[], &mut sync).is_empty());
            d.queued(0, 0);
            d.synchronized_all();
            assert!(d.wait_for_writers(1, &rg, &[], &mut sync).is_empty());
        }
        assert_eq!(synced, vec![0, 0, 0]);
    }
    #[test]
    fn a_queued_input_copy_in_shared_memory_is_pending_until_its_backend_is_waited_for() {
        let mut s = setup();
        let host = s.arena.buffer(0x200, GGML_BACKEND_BUFFER_USAGE_ANY);
        let own = s.arena.buffer(0x100, GGML_BACKEND_BUFFER_USAGE_ANY);
        // The device's split copies two inputs: one copy in memory the CPU accepts (the
        // device computes in the CPU's buffer type), one in its own.
        let shared = s.arena.leaf("dev#u#0", host);
        let private = s.arena.leaf("dev#v#0", own);
        let r = s.arena.tensor("r", GGML_OP_ADD, &[s.g]);
        // SAFETY: tensors of the arena, given the storage an allocator would.
        unsafe {
            (*shared).data = 0x3000 as *mut _;
            (*private).data = 0xa000 as *mut _;
            (*r).data = 0x3004 as *mut _;
        }
        let mut splits = vec![(0, vec![s.g], vec![shared, private]), (1, vec![r], vec![])];
        let d = worked_out_with_copies(&s, &|b| b == 0, &mut splits);
        let copies: Vec<_> = d
            .per_split
            .as_ref()
            .unwrap()
            .iter()
            .map(|w| w.copies.clone())
            .collect();
        assert_eq!(copies, vec![vec![shared], vec![]]);
        // A synchronous backend's copies are made when it returns: none listed.
        let d_sync = worked_out_with_copies(&s, &|_| false, &mut splits);
        assert!(d_sync
            .per_split
            .unwrap()
            .iter()
            .all(|w| w.copies.is_empty()));

        // A CPU node written over the shared copy's bytes (the allocator gave them on).
        let mut reader = [r];
        let rg = graph(&mut reader, &mut []);
        let mut synced = Vec::new();
        let mut sync = |b: usize| synced.push(b);
        // SAFETY: graphs over the arena's tensors, which stay live (every call below).
        unsafe {
            // The split's compute alone (its nodes write the device's own memory): no wait.
            d.queued(0, 0);
            assert!(d.wait_for_writers(1, &rg, &[], &mut sync).is_empty());
            // The copy queued: the CPU split writing those bytes waits for the device.
            d.queued_copy(0, 0, shared);
            assert_eq!(d.wait_for_writers(1, &rg, &[], &mut sync), vec![(0, r)]);
            // A copy in the device's own memory, or one not of that split, adds nothing.
            d.queued_copy(0, 0, private);
            d.queued_copy(1, 0, shared);
            assert!(d.wait_for_writers(1, &rg, &[], &mut sync).is_empty());
        }
        assert_eq!(synced, vec![0]);
    }
}
