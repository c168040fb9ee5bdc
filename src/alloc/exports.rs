//! The C functions of `ggml-alloc.h` (and `ggml_op_can_inplace` of `ggml-impl.h`), over
//! [`Gallocr`] and [`super::ctx`]. A `ggml_gallocr_t` is a `Box<Gallocr>` given to C.

use std::os::raw::c_int;

use ggml_sys::{
    ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_t, ggml_cgraph, ggml_context,
    ggml_gallocr, ggml_gallocr_t, ggml_op, ggml_status, ggml_tallocr, ggml_tensor,
};

use super::ctx;
use super::gallocr::Gallocr;
use super::pack::Layout;
use super::walk::op_can_inplace;
use crate::buffer::buffer_ref;
use crate::buffer_type::buft_ref;
use crate::ffi::{export, non_null, non_null_mut};

/// The allocator behind a C handle, aborting naming `func` on NULL.
///
/// # Safety
/// `g` must be NULL or a handle made by [`ggml_gallocr_new_n`] and not freed, not otherwise
/// borrowed for the returned borrow.
unsafe fn gallocr<'a>(g: ggml_gallocr_t, func: &str) -> &'a mut Gallocr {
    // SAFETY: the caller's contract: NULL (aborts) or a live `Gallocr`, cast back from the
    // pointer `ggml_gallocr_new_n` made.
    unsafe { non_null_mut(g.cast::<Gallocr>(), func, "galloc") }
}

/// The buffer-id array of a graph's `n` nodes or leafs, or `None` for NULL.
///
/// # Safety
/// `ids` must be NULL or point to `n` ints.
unsafe fn ids<'a>(ids: *const c_int, n: c_int) -> Option<&'a [i32]> {
    if ids.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    Some(unsafe { std::slice::from_raw_parts(ids, n.max(0) as usize) })
}

export! {
    /// Whether `op` may write its result over a source of the same layout (stock
    /// `ggml_op_can_inplace`).
    ///
    /// # Safety
    /// None: any value is answered.
    pub unsafe fn ggml_op_can_inplace(op: ggml_op) -> bool {
        op_can_inplace(op)
    }
}

export! {
    /// A linear allocator at the first aligned address of `buffer` (stock `ggml_tallocr_new`),
    /// returned by value. Aborts when `buffer` is NULL.
    ///
    /// # Safety
    /// `buffer` must be NULL or live.
    pub unsafe fn ggml_tallocr_new(buffer: ggml_backend_buffer_t) -> ggml_tallocr {
        // SAFETY: the `# Safety` contract (`buffer_ref` aborts on NULL).
        ctx::tallocr_new(unsafe { buffer_ref(buffer, F) }, buffer)
    }
}

export! {
    /// Places `tensor` at the allocator's next aligned offset (stock `ggml_tallocr_alloc`).
    /// Aborts, naming the tensor and the bytes needed and left, when it does not fit.
    ///
    /// # Safety
    /// `talloc` NULL or a live allocator over a live buffer; `tensor` NULL or live.
    pub unsafe fn ggml_tallocr_alloc(talloc: *mut ggml_tallocr, tensor: *mut ggml_tensor) -> ggml_status {
        // SAFETY: the `# Safety` contract (`non_null_mut` aborts on NULL).
        let t = unsafe { non_null_mut(talloc, F, "talloc") };
        crate::ffi::require_non_null(tensor, F, "tensor");
        // SAFETY: as above.
        unsafe { ctx::tallocr_alloc(t, tensor, F) }
    }
}

export! {
    /// A graph allocator for one buffer type (stock `ggml_gallocr_new`).
    ///
    /// # Safety
    /// As [`ggml_gallocr_new_n`] with one buffer type.
    pub unsafe fn ggml_gallocr_new(buft: ggml_backend_buffer_type_t) -> ggml_gallocr_t {
        let mut b = buft;
        // SAFETY: one live (or NULL: aborts) buffer type.
        unsafe { ggml_gallocr_new_n(&mut b, 1) }
    }
}

export! {
    /// A graph allocator with buffer ids `0..n_bufs` of the given buffer types (stock
    /// `ggml_gallocr_new_n`); ids of one buffer type share a compute buffer. The layout is
    /// `GGML_ALLOC_LAYOUT`'s ([`Layout::from_env`]). Free with [`ggml_gallocr_free`].
    ///
    /// # Safety
    /// `bufts` must point to `n_bufs` buffer types that outlive the allocator.
    pub unsafe fn ggml_gallocr_new_n(bufts: *mut ggml_backend_buffer_type_t, n_bufs: c_int) -> ggml_gallocr_t {
        crate::env::warn_unknown_once();
        crate::ffi::require_non_null(bufts, F, "bufts");
        // SAFETY: the `# Safety` contract.
        let list = unsafe { std::slice::from_raw_parts(bufts, n_bufs.max(0) as usize) };
        for &b in list {
            // SAFETY: NULL (aborts) or live, by contract.
            unsafe { buft_ref(b, F) };
        }
        // SAFETY: live buffer types that outlive it.
        let g = unsafe { Gallocr::new(list, Layout::from_env(), F) };
        Box::into_raw(Box::new(g)).cast::<ggml_gallocr>()
    }
}

export! {
    /// Frees a graph allocator and its compute buffers (stock `ggml_gallocr_free`); NULL is
    /// ignored.
    ///
    /// # Safety
    /// `galloc` NULL or made by [`ggml_gallocr_new_n`], not used afterwards.
    pub unsafe fn ggml_gallocr_free(galloc: ggml_gallocr_t) {
        if !galloc.is_null() {
            // SAFETY: the `# Safety` contract: a `Box<Gallocr>` given out once, freed once.
            drop(unsafe { Box::from_raw(galloc.cast::<Gallocr>()) });
        }
    }
}

export! {
    /// [`ggml_gallocr_reserve_n`] with every node and leaf on buffer id 0 (stock
    /// `ggml_gallocr_reserve`).
    ///
    /// # Safety
    /// As [`ggml_gallocr_reserve_n`].
    pub unsafe fn ggml_gallocr_reserve(galloc: ggml_gallocr_t, graph: *mut ggml_cgraph) -> bool {
        // SAFETY: forwarded.
        unsafe { ggml_gallocr_reserve_n(galloc, graph, std::ptr::null(), std::ptr::null()) }
    }
}

export! {
    /// Plans `graph` with each node and leaf on the buffer id the arrays give (0 for NULL) and
    /// grows the compute buffers to the plan (stock `ggml_gallocr_reserve_n`). False, after
    /// logging the buffer type and size, when a backend cannot allocate.
    ///
    /// # Safety
    /// `galloc` a live allocator; `graph` a live graph of live tensors; the arrays NULL or of
    /// the graph's node and leaf counts.
    pub unsafe fn ggml_gallocr_reserve_n(
        galloc: ggml_gallocr_t,
        graph: *mut ggml_cgraph,
        node_buffer_ids: *const c_int,
        leaf_buffer_ids: *const c_int,
    ) -> bool {
        // SAFETY: the `# Safety` contract (each helper aborts on NULL).
        let (g, gr) = unsafe { (gallocr(galloc, F), non_null(graph, F, "graph")) };
        // SAFETY: as above.
        let (n, l) = unsafe { (ids(node_buffer_ids, gr.n_nodes), ids(leaf_buffer_ids, gr.n_leafs)) };
        // SAFETY: as above.
        unsafe { g.reserve(gr, n, l, false) }.is_ok()
    }
}

export! {
    /// Plans `graph` like [`ggml_gallocr_reserve_n`] without allocating, and writes the bytes
    /// each buffer id would get to `sizes[0..n_bufs]` (stock `ggml_gallocr_reserve_n_size`).
    /// Compute buffers that would have to grow are freed, as in stock.
    ///
    /// # Safety
    /// As [`ggml_gallocr_reserve_n`]; `sizes` must have room for one size per buffer id.
    pub unsafe fn ggml_gallocr_reserve_n_size(
        galloc: ggml_gallocr_t,
        graph: *mut ggml_cgraph,
        node_buffer_ids: *const c_int,
        leaf_buffer_ids: *const c_int,
        sizes: *mut usize,
    ) {
        // SAFETY: the `# Safety` contract (each helper aborts on NULL).
        let (g, gr) = unsafe { (gallocr(galloc, F), non_null(graph, F, "graph")) };
        crate::ffi::require_non_null(sizes, F, "sizes");
        // SAFETY: as above.
        let (n, l) = unsafe { (ids(node_buffer_ids, gr.n_nodes), ids(leaf_buffer_ids, gr.n_leafs)) };
        // SAFETY: as above.
        let ok = unsafe { g.reserve(gr, n, l, true) }.is_ok();
        crate::ggml_assert!(F, ok, "GGML_ASSERT(ggml_gallocr_reserve_n_impl(...)) failed");
        for (i, s) in g.planned_sizes().into_iter().enumerate() {
            // SAFETY: `sizes` has one slot per buffer id (the contract).
            unsafe { *sizes.add(i) = s };
        }
    }
}

export! {
    /// Places `graph`'s tensors by the last plan (stock `ggml_gallocr_alloc_graph`); a graph
    /// that no longer fits is planned again with one buffer id, and returns false with several.
    ///
    /// # Safety
    /// `galloc` a live allocator; `graph` a live graph of live tensors.
    pub unsafe fn ggml_gallocr_alloc_graph(galloc: ggml_gallocr_t, graph: *mut ggml_cgraph) -> bool {
        // SAFETY: the `# Safety` contract (each helper aborts on NULL).
        let (g, gr) = unsafe { (gallocr(galloc, F), non_null(graph, F, "graph")) };
        // SAFETY: as above.
        unsafe { g.alloc_graph(gr) }
    }
}

export! {
    /// Bytes of buffer id `buffer_id`'s compute buffer (stock `ggml_gallocr_get_buffer_size`):
    /// 0 when not allocated or when an earlier id shares it. Aborts on an id out of range.
    ///
    /// # Safety
    /// `galloc` a live allocator.
    pub unsafe fn ggml_gallocr_get_buffer_size(galloc: ggml_gallocr_t, buffer_id: c_int) -> usize {
        // SAFETY: the `# Safety` contract (aborts on NULL).
        let g = unsafe { gallocr(galloc, F) };
        crate::ggml_assert!(
            F,
            buffer_id >= 0 && (buffer_id as usize) < g.n_buffers(),
            "GGML_ASSERT(buffer_id >= 0 && buffer_id < galloc->n_buffers) failed"
        );
        g.buffer_size(buffer_id as usize)
    }
}

export! {
    /// Bytes [`ggml_backend_alloc_ctx_tensors_from_buft`] would allocate for `ctx` (stock
    /// `ggml_backend_alloc_ctx_tensors_from_buft_size`).
    ///
    /// # Safety
    /// `ctx` a live no-alloc context; `buft` NULL or live.
    pub unsafe fn ggml_backend_alloc_ctx_tensors_from_buft_size(
        ctx: *mut ggml_context,
        buft: ggml_backend_buffer_type_t,
    ) -> usize {
        // SAFETY: the `# Safety` contract (aborts on NULL).
        let b = unsafe { buft_ref(buft, F) };
        // SAFETY: as above.
        unsafe { ctx::alloc_ctx_tensors(ctx, b, true) }.0
    }
}

export! {
    /// Places every tensor of `ctx` without memory in new buffers of type `buft` (stock
    /// `ggml_backend_alloc_ctx_tensors_from_buft`; a meta buffer type allocates its own way).
    /// Returns the buffer (a multi-buffer when the type's maximum size needs several), owned by
    /// the caller; NULL when nothing needed memory or a backend failed.
    ///
    /// # Safety
    /// `ctx` a live no-alloc context; `buft` NULL or live.
    pub unsafe fn ggml_backend_alloc_ctx_tensors_from_buft(
        ctx: *mut ggml_context,
        buft: ggml_backend_buffer_type_t,
    ) -> ggml_backend_buffer_t {
        // SAFETY: the `# Safety` contract (aborts on NULL).
        let b = unsafe { buft_ref(buft, F) };
        // SAFETY: a live buffer type.
        if unsafe { ggml_sys::ggml_backend_buft_is_meta(buft) } {
            // SAFETY: forwarded.
            return unsafe { ggml_sys::ggml_backend_meta_alloc_ctx_tensors_from_buft(ctx, buft) };
        }
        // SAFETY: as above.
        unsafe { ctx::alloc_ctx_tensors(ctx, b, false) }.1
    }
}

export! {
    /// [`ggml_backend_alloc_ctx_tensors_from_buft`] with the backend's default buffer type
    /// (stock `ggml_backend_alloc_ctx_tensors`).
    ///
    /// # Safety
    /// `ctx` a live no-alloc context; `backend` NULL or live.
    pub unsafe fn ggml_backend_alloc_ctx_tensors(ctx: *mut ggml_context, backend: ggml_backend_t) -> ggml_backend_buffer_t {
        // SAFETY: the `# Safety` contract.
        let buft = unsafe { crate::backend::ggml_backend_get_default_buffer_type(backend) };
        // SAFETY: forwarded.
        unsafe { ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft) }
    }
}
