//! Running the splits in order: wait as needed, copy each split's inputs to its backend
//! (user inputs at once; other inputs asynchronously where the backend can, and only the
//! used experts of host MoE weights), compute (whole split, or in runs cut at the nodes the
//! eval callback wants), record the split's event. Matches stock's
//! `ggml_backend_sched_compute_splits`.

// Not yet converted to the workspace's unsafe discipline (code-health issue, point 6); remove this line when the file is.
#![allow(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

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

impl Sched {
    /// Waits on `event` when it exists, else on the whole backend `b`.
    unsafe fn wait_host(&self, b: usize, event: ggml_sys::ggml_backend_event_t) {
        if event.is_null() {
            backend::synchronize(self.backend(b));
        } else {
            event::synchronize(&*event);
        }
    }

    /// Copies only the experts of the host MoE weight `input` that the ids of the split's
    /// first node (a MUL_MAT_ID reading the copy) select. `ids_cache` keeps the ids tensor
    /// read last and its expert bitmap, as consecutive splits often share it.
    unsafe fn copy_used_experts(
        &self,
        split: &super::split::Split,
        input_idx: usize,
        node: &ggml_tensor,
        input_backend: ggml_backend_t,
        cache: &mut (*mut ggml_tensor, Vec<i32>, Vec<bool>),
    ) {
        let input = &*split.inputs[input_idx];
        let sb = split.backend;
        let backend = self.backends[sb];
        let cpy = non_null(node.src[0], F, "tensor");
        let n_expert = input.ne[2];
        let expert_size = input.nb[2];
        backend::synchronize(backend_ref(input_backend, F));

        let mut ids_tensor = node.src[2];
        let mut ids_backend = backend;
        if ggml_sys::ggml_nelements(ids_tensor) == 0 {
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
            let ids = non_null(ids_tensor, F, "tensor");
            let nbytes = meta::nbytes(ids);
            cache.1.resize(nbytes / 4, 0);
            let ids_be = backend_ref(ids_backend, F);
            tensor::access(
                Target::Queue(ids_be),
                Access::Read,
                ids,
                cache.1.as_mut_ptr().cast(),
                Rows::one(0, nbytes),
                F,
            );
            backend::synchronize(ids_be);
            cache.2.clear();
            cache.2.resize(n_expert.max(0) as usize, false);
            let it = &*ids_tensor;
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
            tensor::access(
                Target::Queue(self.backend(sb)),
                Access::Write,
                cpy,
                input.data.cast::<u8>().add(offset).cast(),
                Rows::one(offset, size + padding_end),
                F,
            );
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

        for split in &self.splits {
            let sb = split.backend;
            let backend = self.backends[sb];
            let be = self.backend(sb);
            let event = self.event(sb, cc);

            // The allocator may have reused memory across splits: let the previous backend
            // finish before a split without inputs starts.
            if let Some(p) = prev_backend {
                if split.inputs.is_empty() && p != sb {
                    self.wait_host(p, self.event(p, cc));
                }
            }

            for (k, (&input, &id)) in split.inputs.iter().zip(&split.input_ids).enumerate() {
                let input_backend = self
                    .table
                    .backend_at(id)
                    .map_or(ptr::null_mut(), |b| self.backends[b]);
                let cpy = self.table.copy_at(id, sb, cc).unwrap_or(ptr::null_mut());
                if (*input).flags & ggml_sys::GGML_TENSOR_FLAG_INPUT as i32 != 0 {
                    // The user may overwrite an input right after: copy it now.
                    self.wait_host(sb, event);
                    tensor::copy(&*input, non_null(cpy, F, "dst"), F);
                    continue;
                }
                // Wait until the split's backend no longer reads the previous contents.
                if event.is_null() {
                    backend::synchronize(be);
                } else {
                    event::wait(be, event);
                }
                let g = &*split.graph.get();
                let first = if g.n_nodes > 0 {
                    *g.nodes
                } else {
                    ptr::null_mut()
                };
                let buf = || buffer_ref((*input).buffer, F);
                let moe = !first.is_null()
                    && buf().usage == ggml_sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS
                    && buffer::is_host(buf())
                    && (*first).src[0] == cpy
                    && (*first).op == ggml_sys::GGML_OP_MUL_MAT_ID;
                if moe {
                    self.copy_used_experts(split, k, &*first, input_backend, &mut cache);
                    continue;
                }
                let copied = match be.iface.cpy_tensor_async {
                    Some(f) => f(input_backend, backend, input, cpy),
                    None => false,
                };
                if !copied {
                    backend::synchronize(backend_ref(input_backend, F));
                    self.wait_host(sb, event);
                    tensor::copy(&*input, non_null(cpy, F, "dst"), F);
                }
            }

            match self.callback_eval {
                None => {
                    let ec = backend::graph_compute_async(be, split.graph.get());
                    if ec != ggml_sys::GGML_STATUS_SUCCESS {
                        return ec;
                    }
                }
                Some(cb) => {
                    let ud = self.callback_eval_user_data;
                    let sg = split.graph.get();
                    let n = (*sg).n_nodes.max(0) as usize;
                    let nodes = (*sg).nodes;
                    let mut j0 = 0usize;
                    while j0 < n {
                        let mut t = *nodes.add(j0);
                        let mut need = cb(t, true, ud);
                        let mut j1 = j0;
                        while !need && j1 + 1 < n {
                            j1 += 1;
                            t = *nodes.add(j1);
                            need = cb(t, true, ud);
                        }
                        let mut gv = ggml_sys::ggml_graph_view(sg, j0 as i32, (j1 + 1) as i32);
                        let ec = backend::graph_compute_async(be, &mut gv);
                        if ec != ggml_sys::GGML_STATUS_SUCCESS {
                            return ec;
                        }
                        backend::synchronize(be);
                        if need && !cb(t, false, ud) {
                            break;
                        }
                        j0 = j1 + 1;
                    }
                }
            }

            if !event.is_null() {
                event::record(event, be);
            }
            prev_backend = Some(sb);
        }
        ggml_sys::GGML_STATUS_SUCCESS
    }
}
