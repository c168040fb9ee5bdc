//! Ordering a split after another backend's queued writes that it sees without a copy. Not in
//! stock.
//!
//! The scheduler orders splits through their input copies: a split that reads another
//! backend's tensor gets a copy, and the copy waits for the tensor's backend. A backend that
//! can use another's memory directly (`supports_buft` of that memory's buffer type: host
//! buffers, for the CPU and for HRX) gets no copy, and nothing orders it. When the writer
//! is asynchronous (HRX queues a split and writes when its queue runs it), a later split of
//! another backend can read the storage before the write: an HRX node writing a KV cache in
//! host memory (`-nkvo`, placed there by either scheduler, as HRX accepts host buffer types),
//! read by a CPU split whose inputs come from elsewhere, or with pipeline copies, where the
//! CPU split's user-input copies wait for the CPU only. Stock waits there only when the
//! split has no inputs at all and the writer's split came just before.
//!
//! Ours notes, per split of an asynchronous backend (one with a `synchronize`; ggml-cpu has
//! none, its compute returns finished), the view roots its nodes write in memory that another
//! backend accepts ([`DirectWrites::work_out`], once per split graph; replays keep it). When
//! such a split has been queued, its roots are pending for its backend until that backend is
//! waited for. Before a split of another backend copies its inputs, any pending root that the
//! split reads or writes (its nodes, their sources, its inputs) makes the host synchronize the
//! writer first ([`DirectWrites::wait_for_writers`]). The pending roots outlive the graph (a KV cache
//! written in one ubatch is read in the next), and `ggml_backend_sched_synchronize` clears
//! them. A graph without such writes (every ggml-cuda graph: its memory is its own) pays one
//! pass over its nodes when it is split and one check of an empty list per split.
//!
//! Overlap is by view root: two roots are two storages. What this does not see: bytes the
//! allocator gives a later tensor of another root after the queued writer's last use (the
//! readers' backends read those through their own compute buffers), writes outside the
//! scheduler's graphs, and the other direction (a queued split that reads host memory when
//! its queue runs, before a later split of another backend writes it; HRX reads host memory
//! when a split is queued).

use std::cell::RefCell;
use std::collections::HashSet;

use ggml_sys::{ggml_backend_buffer_type_t, ggml_cgraph, ggml_tensor};

use super::caps::Caps;
use super::inspect;
use crate::tensor::meta::op_is_empty;

/// Pending roots per backend above which the host waits for that backend at once, so that a
/// backend whose host writes nobody reads between synchronizes keeps a bounded list.
const PENDING_LIMIT: usize = 4096;

/// The writes a split makes into memory another backend uses without a copy, and which of
/// them may still be queued.
#[derive(Default)]
pub(crate) struct DirectWrites {
    /// Per split of the graph split last: the view roots its nodes write that another
    /// backend may read without a copy (empty for a synchronous backend). `None`: not worked
    /// out since that split.
    per_split: Option<Vec<Vec<*mut ggml_tensor>>>,
    /// Per backend: roots its queued splits wrote, not waited for since (as addresses).
    pending: RefCell<Vec<HashSet<usize>>>,
    /// `(buffer type, backend)` -> whether a backend other than that one accepts the type.
    shared: Vec<(ggml_backend_buffer_type_t, usize, bool)>,
}

impl DirectWrites {
    /// Forgets the per-split roots: the graph is split afresh.
    pub fn invalidate(&mut self) {
        self.per_split = None;
    }

    /// Whether the roots of the graph split last are known.
    pub fn known(&self) -> bool {
        self.per_split.is_some()
    }

    /// Works out, for each split in `splits` (backend, nodes), the view roots its nodes write
    /// in a buffer another backend accepts, for backends with a `synchronize` (`is_async`).
    /// The graph must be allocated: each root's buffer decides.
    ///
    /// # Safety
    /// Every split graph must be live, its nodes and their view roots allocated tensors.
    pub unsafe fn work_out<'a>(
        &mut self,
        caps: &dyn Caps,
        is_async: &dyn Fn(usize) -> bool,
        splits: impl Iterator<Item = (usize, &'a ggml_cgraph)>,
    ) {
        let mut per_split = self.per_split.take().unwrap_or_default();
        per_split.clear();
        for (b, g) in splits {
            let mut roots = Vec::new();
            if is_async(b) {
                // SAFETY: a live split graph (this function's contract).
                for &n in unsafe { inspect::nodes(g) } {
                    // SAFETY: a live node; its view source is live too.
                    let node = unsafe { &*n };
                    if op_is_empty(node.op) {
                        continue;
                    }
                    let root = if node.view_src.is_null() {
                        n
                    } else {
                        node.view_src
                    };
                    // SAFETY: as above.
                    let buf = unsafe { (*root).buffer };
                    if buf.is_null() {
                        continue;
                    }
                    // SAFETY: an allocated tensor's buffer is live.
                    let buft = unsafe { (*buf).buft };
                    // SAFETY: a live buffer's type is live.
                    if unsafe { self.shared_with_another(caps, buft, b) } {
                        roots.push(root);
                    }
                }
            }
            per_split.push(roots);
        }
        self.per_split = Some(per_split);
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
    /// (with `sync`) every other backend with a pending root that a node of the split
    /// writes, one of their sources reads, or an input copy reads, and forgets that
    /// backend's pending roots. Returns, for each wait in order, the backend waited for and
    /// the root that made it wait.
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
            .all(|(a, roots)| a == b || roots.is_empty())
        {
            return waited;
        }
        let root_of = |t: *mut ggml_tensor| {
            // SAFETY: a live tensor (this function's contract).
            let v = unsafe { (*t).view_src };
            if v.is_null() {
                t
            } else {
                v
            }
        };
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
            let r = root_of(t);
            for (a, roots) in pending.iter_mut().enumerate() {
                if a != b && roots.contains(&(r as usize)) {
                    sync(a);
                    roots.clear();
                    waited.push((a, r));
                }
            }
        }
        waited
    }

    /// After split `split` of backend `b` was queued: its roots are pending for `b`. When
    /// `b`'s list grows past [`PENDING_LIMIT`], synchronizes `b` (with `sync`) and forgets it.
    pub fn queued(&self, split: usize, b: usize, sync: &mut dyn FnMut(usize)) {
        let Some(roots) = self.per_split.as_ref().and_then(|p| p.get(split)) else {
            return;
        };
        if roots.is_empty() {
            return;
        }
        let mut pending = self.pending.borrow_mut();
        if pending.len() <= b {
            pending.resize_with(b + 1, HashSet::new);
        }
        let list = &mut pending[b];
        list.extend(roots.iter().map(|&r| r as usize));
        if list.len() > PENDING_LIMIT {
            sync(b);
            list.clear();
        }
    }

    /// Backend `b` was waited for: nothing it queued is pending.
    pub fn synchronized(&self, b: usize) {
        if let Some(list) = self.pending.borrow_mut().get_mut(b) {
            list.clear();
        }
    }

    /// Every backend was waited for.
    pub fn synchronized_all(&self) {
        for list in self.pending.borrow_mut().iter_mut() {
            list.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mock::{graph, Arena, Mock};
    use ggml_sys::{GGML_BACKEND_BUFFER_USAGE_ANY, GGML_OP_ADD};

    /// Backend 0 a device that also accepts the CPU's buffer type (0x200, host), backend 1
    /// the CPU; a KV-like `cache` in a CPU buffer, `w` writing it in place and `g` a node in
    /// the device's own buffer (0x100).
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
        // SAFETY: tensors of the arena; after allocation a view has its root's buffer.
        unsafe {
            (*w).buffer = host;
            (*g).buffer = own;
        }
        Setup {
            arena,
            caps,
            cache,
            w,
            g,
        }
    }

    /// `work_out` over one split per entry of `nodes` (backend, nodes).
    fn worked_out(
        s: &Setup,
        is_async: &dyn Fn(usize) -> bool,
        nodes: &mut [(usize, Vec<*mut ggml_tensor>)],
    ) -> DirectWrites {
        let mut d = DirectWrites::default();
        let graphs: Vec<(usize, ggml_cgraph)> = nodes
            .iter_mut()
            .map(|(b, n)| (*b, graph(n, &mut [])))
            .collect();
        // SAFETY: graphs over the arena's tensors, alive for the call.
        unsafe { d.work_out(&s.caps, is_async, graphs.iter().map(|(b, g)| (*b, g))) };
        d
    }

    #[test]
    fn an_asynchronous_split_notes_the_shared_roots_it_writes() {
        let s = setup();
        let mut nodes = vec![(0, vec![s.w, s.g]), (1, vec![s.g])];
        let d = worked_out(&s, &|b| b == 0, &mut nodes);
        // `w` writes the cache, which the CPU accepts; `g` is in the device's own memory.
        assert_eq!(d.per_split, Some(vec![vec![s.cache], vec![]]));
        // A synchronous backend's writes are done when its compute returns.
        let d = worked_out(&s, &|_| false, &mut nodes);
        assert_eq!(d.per_split, Some(vec![vec![], vec![]]));
        assert!(d.known());
    }

    #[test]
    fn a_reader_of_a_pending_root_waits_once_for_its_writer() {
        let mut s = setup();
        let mut nodes = vec![(0, vec![s.w])];
        let d = worked_out(&s, &|b| b == 0, &mut nodes);
        let view = s
            .arena
            .view_node("kview", ggml_sys::GGML_OP_VIEW, s.cache, &[]);
        let r = s.arena.tensor("r", GGML_OP_ADD, &[view, s.g]);
        let mut reader = [r];
        let rg = graph(&mut reader, &mut []);
        let mut synced = Vec::new();
        let mut sync = |b: usize| synced.push(b);

        // Nothing queued yet: no wait.
        // SAFETY: graphs over the arena's tensors.
        assert!(unsafe { d.wait_for_writers(1, &rg, &[], &mut sync) }.is_empty());
        d.queued(0, 0, &mut sync);
        // The writer's own backend reads it in queue order: no wait.
        // SAFETY: as above.
        assert!(unsafe { d.wait_for_writers(0, &rg, &[], &mut sync) }.is_empty());
        // Another backend reading a view of the cache waits for backend 0, once.
        // SAFETY: as above.
        let waited = unsafe { d.wait_for_writers(1, &rg, &[], &mut sync) };
        assert_eq!(waited, vec![(0, s.cache)]);
        // SAFETY: as above.
        assert!(unsafe { d.wait_for_writers(1, &rg, &[], &mut sync) }.is_empty());
        // A synchronize of the writer clears it too.
        d.queued(0, 0, &mut sync);
        d.synchronized(0);
        // SAFETY: as above.
        assert!(unsafe { d.wait_for_writers(1, &rg, &[], &mut sync) }.is_empty());
        d.queued(0, 0, &mut sync);
        d.synchronized_all();
        // SAFETY: as above.
        assert!(unsafe { d.wait_for_writers(1, &rg, &[], &mut sync) }.is_empty());
        // An input the split copies: the copy reads the root too.
        let mut none: [*mut ggml_tensor; 0] = [];
        let empty = graph(&mut none, &mut []);
        d.queued(0, 0, &mut sync);
        // SAFETY: as above.
        let waited = unsafe { d.wait_for_writers(1, &empty, &[s.w], &mut sync) };
        assert_eq!(waited, vec![(0, s.cache)]);
        assert_eq!(synced, vec![0, 0]);
    }

    #[test]
    fn a_writer_nobody_reads_is_waited_for_past_the_limit() {
        let s = setup();
        let mut d = DirectWrites::default();
        let roots: Vec<*mut ggml_tensor> = (0..=PENDING_LIMIT)
            .map(|i| (s.cache as usize + 8 * i) as *mut ggml_tensor)
            .collect();
        d.per_split = Some(vec![roots]);
        let mut synced = Vec::new();
        d.queued(0, 0, &mut |b| synced.push(b));
        assert_eq!(synced, vec![0]);
        assert!(d.pending.borrow()[0].is_empty());
    }
}
