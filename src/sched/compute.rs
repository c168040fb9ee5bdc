//! Running the splits in order: wait as needed, copy each split's inputs to its backend (user
//! inputs at once; other inputs asynchronously where the backend can, and only the used experts
//! of host MoE weights), compute (whole split, or in runs cut at the nodes the eval callback
//! wants), record the split's event. Matches stock's `ggml_backend_sched_compute_splits`, with
//! three differences in the waits before a split's input copies ([`SplitWaits`]): stock waits
//! for the split's backend before every input, ours once per split (and again after a queued
//! copy, without events); where stock, with pipeline copies, makes only the split's queue wait
//! before a queued copy (a wait ggml-cuda's copies between devices escape), ours waits on the
//! host; and a queued copy from host memory is finished before the split's compute, which stock
//! leaves open when it is the split's last input or, with pipeline copies, wherever it is. On
//! ggml-cuda a wait on an idle stream costs 1-2 µs, and a token of a 1B model at full offload
//! copies six inputs into its CUDA split: six of stock's seven waits there are saved (its
//! queued copy falls back to a blocking one, and stock waits again).

use std::ptr;

use ggml_sys::{ggml_backend_t, ggml_status, ggml_tensor};

use super::Sched;
use crate::backend::{self, backend_ref};
use crate::buffer::{self, buffer_ref};
use crate::event;
use crate::ffi::non_null;
use crate::tensor::{self, meta, Access, Rows, Target};

/// The name the aborts of this pass carry (stock's function).
const F: &str = "ggml_backend_sched_compute_splits";

/// How often the input loop waits for a split's backend: `GGML_SCHED_INPUT_WAITS`, read when
/// a scheduler is made (`ggml_backend_sched_new`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputWaits {
    /// Once per split, on the host ([`SplitWaits`]): the default, `split`.
    PerSplit,
    /// Before every input, as stock does: `input`. For measuring what the default saves
    /// within one library, and a way back to stock's exact sequence of backend calls.
    PerInput,
}

impl InputWaits {
    /// The mode `GGML_SCHED_INPUT_WAITS` names (`split`, the default, or `input`); any other
    /// value is named in a warning and the default kept.
    pub fn from_env() -> Self {
        crate::env::read(
            "GGML_SCHED_INPUT_WAITS",
            InputWaits::PerSplit,
            "split",
            |t| match t.trim() {
                "split" => Ok(InputWaits::PerSplit),
                "input" => Ok(InputWaits::PerInput),
                _ => Err(
                    "is not split (one wait per split) or input (one per input, as stock)".into(),
                ),
            },
        )
    }
}

/// Whether the host has waited for the split's backend yet, so that it waits once per split
/// instead of once per input (stock waits before every input).
///
/// Every wait in the input loop guards the same thing: the split's backend must be done
/// with the previous contents of the input copies (the earlier graph computes that read
/// them) before they are overwritten. After the split's first host wait
/// (`ggml_backend_synchronize`, or `ggml_backend_event_synchronize` of the split's event)
/// those computes have finished. From then until the split's compute, the loop queues only
/// copies into *other* input copies of the split (`cpy_tensor_async`; the experts'
/// `set_tensor_async`) and, on the MoE path, a read of the expert ids followed by its own
/// synchronize: none reads an input copy's previous contents, and the input copies of one
/// split never share bytes. A blocking copy is complete when it returns. So a second wait
/// orders nothing new. The wait on the input's own backend before a blocking copy (that
/// backend may still be producing the input) is not covered and stays per input.
///
/// Before a queued copy, ours waits on the host too, where stock (with pipeline copies)
/// only makes the split's queue wait for the event (`ggml_backend_event_wait`): ggml-cuda
/// runs a copy between two of its devices on the *source* device's stream, which that wait
/// does not order, so the copy could overwrite a pipeline copy the split's device is still
/// reading. In llama.cpp's splits the host waits for the same event anyway, at the first
/// user input (the mask, the positions), so this moves the wait earlier rather than adding
/// one.
///
/// A queued copy is the exception: the split's backend may run it later, reading its source
/// then, and the source's own backend may overwrite it first (the next graph's CPU split
/// writes the same compute buffer; ggml-vulkan queues a copy straight from a host buffer).
/// Without events, stock's wait before the next input (`synchronize` of the split's backend)
/// finishes such a copy, so ours waits there too after one ([`SplitWaits::queued`]); and a
/// queued copy from host memory that no later wait of the split finished is finished before
/// the split's compute is queued ([`SplitWaits::queued_from_host`]), which stock leaves open
/// when that copy is the split's last input or, with pipeline copies, wherever it is
/// (`tests/sched_queued_copy.rs`). A copy from a weight buffer is left alone: weights are
/// not written while graphs compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SplitWaits {
    /// Every wait is made, as stock makes them (`GGML_SCHED_INPUT_WAITS=input`).
    pub every: bool,
    /// The host has waited for the split's backend (or its event) in this split.
    pub host: bool,
    /// Without events: a copy was queued on the split's backend since the host last waited
    /// for it, so the next input waits again (stock's `synchronize` there finishes the copy).
    pub queued: bool,
    /// A copy from a host buffer was queued on the split's backend and no `synchronize` of
    /// that backend has finished it yet.
    pub queued_from_host: bool,
}

impl SplitWaits {
    /// Nothing waited for yet, at the start of a split.
    pub fn new(mode: InputWaits) -> Self {
        SplitWaits {
            every: mode == InputWaits::PerInput,
            host: false,
            queued: false,
            queued_from_host: false,
        }
    }

    /// Whether a copy into an input copy needs the host to wait first.
    pub fn host_wait_needed(self) -> bool {
        self.every || !self.host || self.queued
    }

    /// Notes a copy the split's backend accepted to queue (`cpy_tensor_async`), from a host
    /// buffer when `from_host`; `serial`: the scheduler has no events, so its waits are
    /// `synchronize` calls that finish the copy.
    pub fn note_queued(&mut self, from_host: bool, serial: bool) {
        self.queued |= serial;
        self.queued_from_host |= from_host;
    }

    /// Notes a `synchronize` of the split's backend: every copy queued on it has run.
    pub fn note_synchronized(&mut self) {
        self.host = true;
        self.queued = false;
        self.queued_from_host = false;
    }

    /// Whether the split's backend must be synchronized before its compute is queued: a
    /// queued copy from host memory may not have run yet. Not in stock's mode, which keeps
    /// stock's exact sequence of waits.
    pub fn finish_before_compute(self) -> bool {
        !self.every && self.queued_from_host
    }
}

impl Sched {
    /// Waits on `event` when it exists, else on the whole backend `b`, unless `waits` says
    /// the host already has; notes the wait in `waits`.
    ///
    /// # Safety
    /// `event` must be NULL or a live event.
    unsafe fn wait_host_once(
        &self,
        b: usize,
        event: ggml_sys::ggml_backend_event_t,
        waits: &mut SplitWaits,
    ) {
        if waits.host_wait_needed() {
            // SAFETY: this function's contract.
            unsafe { self.wait_host(b, event) };
            if event.is_null() {
                waits.note_synchronized();
            } else {
                waits.host = true;
            }
        }
    }

    /// Synchronizes `be`, one of the scheduler's backends, and notes that nothing it queued
    /// is pending any longer ([`super::direct`]). Every synchronize of a single backend in
    /// this pass goes through here.
    fn synchronize_one(&self, be: &ggml_sys::ggml_backend) {
        backend::synchronize(be);
        let handle = std::ptr::from_ref(be).cast_mut();
        if let Some(b) = self.backend_index(handle) {
            self.direct.synchronized(b);
        }
    }

    /// Waits on `event` when it exists, else on the whole backend `b`.
    ///
    /// # Safety
    /// `event` must be NULL or a live event.
    unsafe fn wait_host(&self, b: usize, event: ggml_sys::ggml_backend_event_t) {
        if event.is_null() {
            self.synchronize_one(self.backend(b));
        } else {
            // SAFETY: non-NULL here, and live (this function's contract).
            event::synchronize(unsafe { &*event });
        }
    }

    /// Copies only the experts of the host MoE weight `input` that the ids of the split's
    /// first node (a MUL_MAT_ID reading the copy) select. `ids_cache` keeps the ids tensor
    /// read last and its expert bitmap, as consecutive splits often share it. Notes in
    /// `waits` a `synchronize` of the split's backend it makes (to read ids it holds).
    ///
    /// # Safety
    /// The split's inputs must be live and allocated, `node` must be the split's first node
    /// (a MUL_MAT_ID whose sources are live, the first its allocated copy of the input), and
    /// `input_backend` NULL or a live backend.
    unsafe fn copy_used_experts(
        &self,
        split: &super::split::Split,
        input_idx: usize,
        node: &ggml_tensor,
        input_backend: ggml_backend_t,
        cache: &mut (*mut ggml_tensor, Vec<i32>, Vec<bool>),
        waits: &mut SplitWaits,
    ) {
        // SAFETY: the split's inputs are live (this function's contract); only read.
        let input = unsafe { &*split.inputs[input_idx] };
        let sb = split.backend;
        let backend = self.backends[sb];
        // SAFETY: a source of the live `node`: NULL or live.
        let cpy = unsafe { non_null(node.src[0], F, "tensor") };
        let n_expert = input.ne[2];
        let expert_size = input.nb[2];
        // SAFETY: NULL or live (this function's contract).
        self.synchronize_one(unsafe { backend_ref(input_backend, F) });

        let mut ids_tensor = node.src[2];
        let mut ids_backend = backend;
        // SAFETY: a MUL_MAT_ID's third source is its ids tensor (`ggml_mul_mat_id` sets it),
        // live as a source of the live `node`.
        if unsafe { ggml_sys::ggml_nelements(ids_tensor) } == 0 {
            return;
        }
        // The ids may themselves be a later input of this split, not copied yet: read the
        // original then.
        let later = split.inputs[input_idx + 1..]
            .iter()
            .zip(&split.input_ids[input_idx + 1..]);
        for (&later, &id) in later {
            if self.table.copy_at(id, sb, self.cur_copy) == Some(ids_tensor) {
                ids_tensor = later;
                ids_backend = self
                    .table
                    .backend_at(id)
                    .map_or(ptr::null_mut(), |b| self.backends[b]);
                break;
            }
        }
        if ids_tensor != cache.0 {
            // SAFETY: `node`'s ids source, or the split input it is a copy of: NULL or live.
            let ids = unsafe { non_null(ids_tensor, F, "tensor") };
            let nbytes = meta::nbytes(ids);
            cache.1.resize(nbytes / 4, 0);
            // SAFETY: one of the scheduler's backends (live for its lifetime), or NULL when
            // the input is unplaced (then this aborts as stock's NULL use would).
            let ids_be = unsafe { backend_ref(ids_backend, F) };
            // SAFETY: MUL_MAT_ID's ids are I32, so `nbytes` is a multiple of 4 and
            // `cache.1` holds exactly `nbytes` writable bytes; it is neither moved nor
            // resized until the synchronize right below ends the read.
            unsafe {
                tensor::access(
                    Target::Queue(ids_be),
                    Access::Read,
                    ids,
                    cache.1.as_mut_ptr().cast(),
                    Rows::one(0, nbytes),
                    F,
                )
            };
            self.synchronize_one(ids_be);
            if ptr::eq(ids_be, self.backend(sb)) {
                // Every copy queued on the split's backend has run too.
                waits.note_synchronized();
            }
            cache.2.clear();
            cache.2.resize(n_expert.max(0) as usize, false);
            // `ids` is `ids_tensor`, already checked non-NULL.
            let it = ids;
            for i1 in 0..it.ne[1] {
                for i0 in 0..it.ne[0] {
                    let k = i1 as usize * it.nb[1] / 4 + i0 as usize * it.nb[0] / 4;
                    let id = cache.1[k];
                    crate::ggml_assert!(F, id >= 0 && (id as i64) < n_expert);
                    cache.2[id as usize] = true;
                }
            }
            cache.0 = ids_tensor;
        }
        let copy = |first: usize, last: usize| {
            let offset = first * expert_size;
            let size = (last - first + 1) * expert_size;
            let padding = expert_size.min(512);
            // A little extra after a run that is not the last expert keeps the padding of the
            // copied experts free of NaNs (some device kernels read it).
            let padding_end = if (last as i64) < n_expert - 1 {
                padding
            } else {
                0
            };
            // SAFETY: `first` <= `last` < `n_expert`, so `offset` lies within the input's
            // `ne[2] * nb[2]` bytes of host data (a host weight buffer, allocated).
            let src = unsafe { input.data.cast::<u8>().add(offset) };
            // SAFETY: the `size + padding_end` bytes from `src` stay within the input's data
            // (the padding only after a run that is not the last expert, and at most one
            // expert); a weight is neither freed nor written while the graph computes.
            unsafe {
                tensor::access(
                    Target::Queue(self.backend(sb)),
                    Access::Write,
                    cpy,
                    src.cast(),
                    Rows::one(offset, size + padding_end),
                    F,
                )
            };
        };
        let used = &cache.2;
        let Some(mut first) = used.iter().position(|&u| u) else {
            return;
        };
        let mut last = first;
        for (id, &u) in used.iter().enumerate().skip(first + 1) {
            if !u {
                continue;
            }
            if id == last + 1 {
                last = id;
                continue;
            }
            copy(first, last);
            first = id;
            last = id;
        }
        copy(first, last);
    }

    /// The backend a split input's copy is ordered after: the input's own placement (stock),
    /// or with the in-place rule on, for a view, the backend of the last node before the
    /// split that wrote its bytes (`split::last_writer`, noted by the split pass): the view
    /// computes nothing where it is placed, and its root's producer may not be the last to
    /// write them (an in-place writer on a queued device, say).
    fn input_backend(&self, split: &super::split::Split, k: usize, id: usize) -> Option<usize> {
        let own = self.table.backend_at(id);
        if !self.inplace_rule {
            return own;
        }
        split.input_writers.get(k).copied().flatten().or(own)
    }

    /// Computes the splits of the allocated graph (stock `ggml_backend_sched_compute_splits`).
    /// Returns the first failing backend status, else `GGML_STATUS_SUCCESS`.
    ///
    /// # Safety
    /// The graph split last must be allocated and alive.
    pub(crate) unsafe fn compute_splits(&self) -> ggml_status {
        let mut cache: (*mut ggml_tensor, Vec<i32>, Vec<bool>) =
            (ptr::null_mut(), Vec::new(), Vec::new());
        let mut prev_backend: Option<usize> = None;
        let cc = self.cur_copy;
        // The copy the inputs are written into: `cc`, unless GGML_SCHED_TEST_FAULT sends them
        // to another pipeline copy (`ab pipeline`'s self-test only).
        let input_copy = crate::sanitize::fault::input_copy(cc, self.n_copies);
        crate::sanitize::sched_graph(true);

        for (si, split) in self.splits.iter().enumerate() {
            crate::sanitize::sched_split(si, split.inputs.len());
            let sb = split.backend;
            let backend = self.backends[sb];
            let be = self.backend(sb);
            let event = self.event(sb, cc);

            // The allocator may have reused memory across splits: let the previous backend
            // finish before a split without inputs starts.
            if let Some(p) = prev_backend {
                // (GGML_SCHED_TEST_FAULT can remove this wait, for the sanitizer's test only.)
                if split.inputs.is_empty()
                    && p != sb
                    && !crate::sanitize::fault::skip_wait_before_inputless_split()
                {
                    // SAFETY: the scheduler's own event (or NULL).
                    unsafe { self.wait_host(p, self.event(p, cc)) };
                }
            }

            // Another backend's queued split may still write what this one reads or writes
            // without a copy ([`super::direct`]); not in stock's mode, which keeps stock's
            // exact sequence of waits.
            let direct = self.input_waits != InputWaits::PerInput;
            if direct {
                // SAFETY: the split's graph cell is only read here and by the compute below;
                // its nodes and inputs are live and allocated (this function's contract).
                let waited = unsafe {
                    self.direct
                        .wait_for_writers(sb, &*split.graph.get(), &split.inputs, &mut |a| {
                            backend::synchronize(self.backend(a))
                        })
                };
                for (a, t) in waited.into_iter().filter(|_| self.debug > 0) {
                    // SAFETY: a live tensor of the split (as above).
                    let name = unsafe { meta::name(&*t) };
                    crate::ffi::log::debug(&format!(
                        "{F}: split {si} on {} waited for {}, whose queued work writes the bytes \
                         of '{name}', which the split reads or writes\n",
                        // SAFETY: a backend's name lives as long as the backend.
                        unsafe { meta::cstr(backend::name(be)) },
                        // SAFETY: as above.
                        unsafe { meta::cstr(backend::name(self.backend(a))) },
                    ));
                }
            }

            let mut waits = SplitWaits::new(self.input_waits);
            for (k, (&input, &id)) in split.inputs.iter().zip(&split.input_ids).enumerate() {
                crate::sanitize::sched_input(Some(k));
                let input_backend = self
                    .input_backend(split, k, id)
                    .map_or(ptr::null_mut(), |b| self.backends[b]);
                let cpy = self
                    .table
                    .copy_at(id, sb, input_copy)
                    .unwrap_or(ptr::null_mut());
                // SAFETY: a split input is live while the graph split last is (this function's
                // contract); only read here and by the copies below.
                let inp = unsafe { &*input };
                if inp.flags & ggml_sys::GGML_TENSOR_FLAG_INPUT as i32 != 0 {
                    // The user may overwrite an input right after: copy it now.
                    // SAFETY: the scheduler's own event for this backend and copy, or NULL.
                    unsafe { self.wait_host_once(sb, event, &mut waits) };
                    // SAFETY: the copy is a header in the scheduler's pool (or NULL, which
                    // aborts), allocated by gallocr with the graph.
                    let dst = unsafe { non_null(cpy, F, "dst") };
                    // SAFETY: both are live and allocated (the graph is, by this contract).
                    unsafe { tensor::copy(inp, dst, F) };
                    crate::sanitize::sched_copied(inp, dst, None);
                    continue;
                }
                // Wait until the split's backend no longer reads the previous contents: on
                // the host, once per split ([`SplitWaits`]); stock's mode makes stock's wait.
                if waits.every {
                    if event.is_null() {
                        self.synchronize_one(be);
                        waits.note_synchronized();
                    } else {
                        // SAFETY: non-NULL here, the scheduler's own event (made at creation,
                        // freed on drop).
                        unsafe { event::wait(be, event) };
                    }
                } else {
                    // SAFETY: the scheduler's own event for this backend and copy, or NULL.
                    unsafe { self.wait_host_once(sb, event, &mut waits) };
                }
                // SAFETY: a split's graph cell is written only by `split` (under `&mut
                // self`); here, under `&self`, it is only read.
                let g = unsafe { &*split.graph.get() };
                let first = if g.n_nodes > 0 {
                    // SAFETY: the split's view holds `n_nodes` > 0 node pointers.
                    unsafe { *g.nodes }
                } else {
                    ptr::null_mut()
                };
                // SAFETY: a live tensor's buffer is NULL (aborts) or live.
                let buf = || unsafe { buffer_ref(inp.buffer, F) };
                // SAFETY: a node of the split, live; NULL stays `None`.
                let first = unsafe { first.as_ref() };
                // A host MoE weight read by the split's first node, a MUL_MAT_ID.
                let moe = first.filter(|f| {
                    buf().usage == ggml_sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS
                        && buffer::is_host(buf())
                        && f.src[0] == cpy
                        && f.op == ggml_sys::GGML_OP_MUL_MAT_ID
                });
                if let Some(first) = moe {
                    // SAFETY: `first` is the split's first node, a MUL_MAT_ID reading `cpy`,
                    // the allocated copy of this live input; `input_backend` is one of the
                    // scheduler's backends or NULL.
                    unsafe {
                        self.copy_used_experts(
                            split,
                            k,
                            first,
                            input_backend,
                            &mut cache,
                            &mut waits,
                        )
                    };
                    if direct {
                        // The uploads are queued on the split's backend.
                        // SAFETY: `cpy` is the allocated copy just written (as above).
                        unsafe { self.direct.queued_copy(si, sb, cpy) };
                    }
                    continue;
                }
                let copied = match be.iface.cpy_tensor_async {
                    // SAFETY: the split backend's own callback, with two of the scheduler's
                    // backends (every input is placed by the passes) and two live, allocated
                    // tensors.
                    Some(f) => unsafe { f(input_backend, backend, input, cpy) },
                    None => false,
                };
                if !copied {
                    // SAFETY: one of the scheduler's backends, or NULL (aborts).
                    self.synchronize_one(unsafe { backend_ref(input_backend, F) });
                    // SAFETY: the scheduler's own event, or NULL.
                    unsafe { self.wait_host_once(sb, event, &mut waits) };
                    // SAFETY: as for the user input copy above.
                    let dst = unsafe { non_null(cpy, F, "dst") };
                    // SAFETY: both live and allocated.
                    unsafe { tensor::copy(inp, dst, F) };
                    crate::sanitize::sched_copied(inp, dst, None);
                } else {
                    // The split's backend may read the source later ([`SplitWaits`]).
                    // A weight is never written while graphs compute: its copy may run late.
                    let b = buf();
                    let from_host = buffer::is_host(b)
                        && b.usage != ggml_sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS;
                    waits.note_queued(from_host, event.is_null());
                    if direct {
                        // The copy may land after later splits of other backends start.
                        // SAFETY: the copy the backend accepted is live and allocated.
                        unsafe { self.direct.queued_copy(si, sb, cpy) };
                    }
                    if crate::sanitize::on() {
                        // SAFETY: the copy the backend accepted is a live, allocated header;
                        // `input_backend` is one of the scheduler's backends (live) or NULL.
                        let (dst, ib) =
                            unsafe { (non_null(cpy, F, "dst"), input_backend.as_ref()) };
                        crate::sanitize::sched_copied(inp, dst, Some((ib, be)));
                    }
                }
            }
            // With an eval callback the split's first run of nodes ends in a synchronize,
            // which finishes the copy before anything else is queued.
            if waits.finish_before_compute() && self.callback_eval.is_none() {
                // A queued copy from host memory has not been seen to run: finish it before
                // anything after this split can overwrite its source.
                self.synchronize_one(be);
            }

            crate::sanitize::sched_nodes_from(0);
            match self.callback_eval {
                None => {
                    // SAFETY: the split's view of the allocated graph, on the backend it was
                    // placed for.
                    let ec = unsafe { backend::graph_compute_async(be, split.graph.get()) };
                    // A backend that failed may have queued part of the split.
                    if direct {
                        // SAFETY: the split's nodes are live (this function's contract).
                        unsafe { self.direct.queued(si, sb) };
                    }
                    if ec != ggml_sys::GGML_STATUS_SUCCESS {
                        return ec;
                    }
                }
                Some(cb) => {
                    let ud = self.callback_eval_user_data;
                    let sg = split.graph.get();
                    // SAFETY: a split's graph cell is written only by `split` (under `&mut
                    // self`); here, under `&self`, it is only read.
                    let sgr = unsafe { &*sg };
                    let n = sgr.n_nodes.max(0) as usize;
                    let nodes = sgr.nodes;
                    let mut j0 = 0usize;
                    while j0 < n {
                        // SAFETY: `j0` < `n_nodes`, within the view's node pointers.
                        let mut t = unsafe { *nodes.add(j0) };
                        // SAFETY: the user's eval callback with a live node of the split and
                        // the user data given with it, as `set_eval_callback` documents.
                        let mut need = unsafe { cb(t, true, ud) };
                        let mut j1 = j0;
                        while !need && j1 + 1 < n {
                            j1 += 1;
                            // SAFETY: `j1` < `n_nodes`, as above.
                            t = unsafe { *nodes.add(j1) };
                            // SAFETY: as the first call.
                            need = unsafe { cb(t, true, ud) };
                        }
                        // SAFETY: `sg` is live and `[j0, j1 + 1)` lies within its nodes.
                        let mut gv =
                            unsafe { ggml_sys::ggml_graph_view(sg, j0 as i32, (j1 + 1) as i32) };
                        crate::sanitize::sched_nodes_from(j0);
                        // SAFETY: a view of the split's allocated nodes, on its backend.
                        let ec = unsafe { backend::graph_compute_async(be, &mut gv) };
                        if ec != ggml_sys::GGML_STATUS_SUCCESS {
                            // A backend that failed may have queued part of the run.
                            if direct {
                                // SAFETY: the split's nodes are live (this function's
                                // contract).
                                unsafe { self.direct.queued(si, sb) };
                            }
                            return ec;
                        }
                        self.synchronize_one(be);
                        // SAFETY: as the first call; `t` has now been computed.
                        if need && !unsafe { cb(t, false, ud) } {
                            break;
                        }
                        j0 = j1 + 1;
                    }
                }
            }

            if !event.is_null() {
                // SAFETY: the scheduler's own event, made for this backend's device.
                unsafe { event::record(event, be) };
            }
            prev_backend = Some(sb);
        }
        crate::sanitize::sched_graph(false);
        ggml_sys::GGML_STATUS_SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_waits_once_per_split() {
        let mut w = SplitWaits::new(InputWaits::PerSplit);
        assert!(w.host_wait_needed());
        w.host = true;
        assert!(!w.host_wait_needed());
    }

    #[test]
    fn a_queued_copy_is_finished_by_the_next_wait() {
        // Serial: the next input waits again, and that synchronize finishes the copy.
        let mut w = SplitWaits::new(InputWaits::PerSplit);
        w.note_synchronized();
        w.note_queued(true, true);
        assert!(w.host_wait_needed());
        assert!(w.finish_before_compute());
        w.note_synchronized();
        assert!(!w.host_wait_needed());
        assert!(!w.finish_before_compute());
        // With events the next input's host wait is on the event, which does not finish
        // the copy: no extra wait there, but a copy from host memory is finished before the
        // compute; one from device memory is left to the backends' ordering, as in stock.
        let mut w = SplitWaits::new(InputWaits::PerSplit);
        w.host = true;
        w.note_queued(true, false);
        assert!(!w.host_wait_needed());
        assert!(w.finish_before_compute());
        let mut w = SplitWaits::new(InputWaits::PerSplit);
        w.host = true;
        w.note_queued(false, false);
        assert!(!w.finish_before_compute());
        // Stock's mode keeps stock's exact waits.
        let mut w = SplitWaits::new(InputWaits::PerInput);
        w.note_queued(true, true);
        assert!(!w.finish_before_compute());
    }

    #[test]
    fn stocks_mode_waits_every_time() {
        let mut w = SplitWaits::new(InputWaits::PerInput);
        w.host = true;
        assert!(w.host_wait_needed());
    }
}
