//! Copying a computed graph to another backend (`ggml_backend_graph_copy`,
//! `ggml_backend_graph_copy_free`) and running one graph on two backends node by node
//! (`ggml_backend_compare_graph_backend`), which `test-backend-ops` is built on.
//!
//! A copy duplicates every tensor reachable from the graph's nodes through `src` and
//! `view_src`, keeping type, shape, strides, op, op params, flags and name. Tensors that own
//! storage are placed in one new buffer of the target backend and get the source's data;
//! views are re-created over their copied view source. The copy's contexts and buffer belong
//! to the returned `ggml_backend_graph_copy` and are released by
//! [`ggml_backend_graph_copy_free`].

use std::collections::{HashMap, HashSet};
use std::os::raw::c_void;

use ggml_sys::{
    ggml_backend_eval_callback, ggml_backend_graph_copy as GraphCopy, ggml_backend_t, ggml_cgraph,
    ggml_context, ggml_init_params, ggml_tensor, GGML_STATUS_SUCCESS,
};

use crate::backend::{self, backend_ref};
use crate::buffer;
use crate::ffi::{self, export, non_null};
use crate::tensor;
use crate::tensor::meta::is_view_op;

/// The state of one graph copy: originals mapped to their duplicates, and which originals
/// already had their duplicate's data or view set up.
struct Copier {
    copies: HashMap<*mut ggml_tensor, *mut ggml_tensor>,
    initialised: HashSet<*mut ggml_tensor>,
    /// Context of the duplicates that own storage (allocated in the copy's buffer).
    ctx_allocated: *mut ggml_context,
    /// Context of the duplicated views.
    ctx_unallocated: *mut ggml_context,
    /// The exported function its aborts name.
    func: &'static str,
}

impl Copier {
    /// Returns the duplicate of `src`, making it (and, first, those of its view source and
    /// sources) when it does not exist yet. Aborts when `src` has no data.
    ///
    /// # Safety
    /// `src` and everything reachable from it are live tensors; the contexts are live and
    /// have room for every duplicate.
    unsafe fn dup(&mut self, src: *mut ggml_tensor) -> *mut ggml_tensor {
        // SAFETY: forwards the contract of `Copier::dup`: `src` is a live tensor (`non_null` aborts
        // should it be NULL).
        let s = unsafe { non_null(src, self.func, "src") };
        if s.data.is_null() {
            ffi::fatal(self.func, "graph must be allocated (a tensor has no data)");
        }
        if let Some(&d) = self.copies.get(&src) {
            return d;
        }
        let ctx = if s.view_src.is_null() {
            self.ctx_allocated
        } else {
            self.ctx_unallocated
        };
        // SAFETY: live context with room (sized by the caller); `s` is live.
        let dst = unsafe { ggml_sys::ggml_dup_tensor(ctx, s) };
        if dst.is_null() {
            ffi::fatal(self.func, "ggml_dup_tensor failed");
        }
        // Registered before the recursion, as "in progress" (NULL): graphs may reference a node
        // from its own sources (`ggml_cast` sets `src[1]` to its result), and such a back edge
        // must not recurse forever. As in stock, the copy's back edge is NULL (stock reads its
        // copy table before the entry is written); the entry is completed below.
        self.copies.insert(src, std::ptr::null_mut());
        // SAFETY: `dst` was just made; no reference to it is held across the recursive calls
        // below (they only read the map), so each write goes through the raw pointer.
        unsafe {
            (*dst).nb = s.nb;
            if !s.view_src.is_null() {
                let v = self.dup(s.view_src);
                (*dst).view_src = v;
                (*dst).view_offs = s.view_offs;
            }
            (*dst).op = s.op;
            (*dst).flags = s.flags;
            (*dst).op_params = s.op_params;
            ggml_sys::ggml_set_name(dst, s.name.as_ptr());
            for (i, &sub) in s.src.iter().enumerate() {
                if !sub.is_null() {
                    let c = self.dup(sub);
                    (*dst).src[i] = c;
                }
            }
        }
        self.copies.insert(src, dst);
        dst
    }

    /// Gives the duplicate of `src` its content: a view is initialised over its (initialised)
    /// view source's copy, a tensor with storage gets `src`'s data. Then the same for its
    /// sources. Once per tensor.
    ///
    /// # Safety
    /// [`Copier::dup`] ran on `src`; the duplicates with storage are allocated.
    unsafe fn init(&mut self, src: *mut ggml_tensor) {
        if !self.initialised.insert(src) {
            return;
        }
        let dst = self.copies[&src];
        // SAFETY: `src` is live (the contract of `init`: `Copier::dup` ran on it, whose contract
        // makes it live) and `dst` is the duplicate `dup` made of it in one of the copier's live
        // contexts; `d` is last used before `view_init` borrows `dst` mutably below.
        let (s, d) = unsafe { (&*src, &*dst) };
        if !d.view_src.is_null() {
            // SAFETY: the view source was duplicated along with `src`.
            unsafe { self.init(s.view_src) };
            // SAFETY: a view just made by `dup`, not otherwise borrowed, whose source is
            // initialised.
            let status = unsafe { tensor::view_init(&mut *dst, self.func) };
            if status != GGML_STATUS_SUCCESS {
                ffi::fatal(
                    self.func,
                    &format!("ggml_backend_view_init failed with status {status}"),
                );
            }
        } else {
            // SAFETY: both live and allocated, same layout by construction.
            unsafe { tensor::copy(s, d, self.func) };
        }
        for &sub in s.src.iter().filter(|p| !p.is_null()) {
            // SAFETY: sources were duplicated along with `src`.
            unsafe { self.init(sub) };
        }
    }
}

/// The nodes of a graph as a slice.
///
/// # Safety
/// `g` is a live graph.
unsafe fn nodes<'a>(g: &ggml_cgraph) -> &'a [*mut ggml_tensor] {
    let n = usize::try_from(g.n_nodes).unwrap_or(0);
    if n == 0 {
        return &[];
    }
    // SAFETY: a live graph has `n_nodes` valid entries at `nodes`.
    unsafe { std::slice::from_raw_parts(g.nodes, n) }
}

/// Computes `g` on `backend` and waits, aborting naming `func` when `backend` is NULL.
///
/// # Safety
/// `backend` NULL or live; `g` a live graph whose tensors it can use.
unsafe fn compute(backend: ggml_backend_t, g: *mut ggml_cgraph, func: &str) {
    // SAFETY: the caller's contract.
    unsafe { backend::graph_compute(backend_ref(backend, func), g) };
}

const FAILED_COPY: GraphCopy = GraphCopy {
    buffer: std::ptr::null_mut(),
    ctx_allocated: std::ptr::null_mut(),
    ctx_unallocated: std::ptr::null_mut(),
    graph: std::ptr::null_mut(),
};

export! {
    /// Copies `graph` (allocated, computed or not) to `backend` (stock `ggml_backend_graph_copy`):
    /// every tensor reachable from its nodes is duplicated with the same layout, the ones with
    /// storage are allocated in one buffer of the backend's default type and filled with the
    /// source data, and a new graph lists the copies of the nodes in order. On failure (context or
    /// buffer allocation) it logs an error and returns all-NULL fields. The caller owns the result
    /// and frees it with [`ggml_backend_graph_copy_free`]. Aborts when `graph` is NULL or a tensor
    /// of it has no data.
    ///
    /// # Safety
    /// `backend` a live backend; `graph` NULL or a live, allocated graph.
    pub unsafe fn ggml_backend_graph_copy(
        backend: ggml_backend_t,
        graph: *mut ggml_cgraph,
    ) -> GraphCopy {
        // SAFETY: forwards the contract of `ggml_backend_graph_copy` to `copy`: `backend` live,
        // `graph` NULL (`non_null` aborts) or a live, allocated graph.
        unsafe { copy(backend, non_null(graph, F, "graph"), F) }
    }
}

/// The body of [`ggml_backend_graph_copy`], whose name (or that of the entry point using it)
/// `func` its messages carry.
///
/// # Safety
/// `backend` a live backend; `g` a live, allocated graph.
unsafe fn copy(backend: ggml_backend_t, g: &ggml_cgraph, func: &'static str) -> GraphCopy {
    // SAFETY: pure size computations of ggml.
    let mem_size = unsafe {
        let n_tensors = ggml_sys::ggml_hash_size(g.visited_hash_set.size);
        ggml_sys::ggml_tensor_overhead() * n_tensors
            + ggml_sys::ggml_graph_overhead_custom(g.size as usize, false)
    };
    let params = ggml_init_params {
        mem_size,
        mem_buffer: std::ptr::null_mut(),
        no_alloc: true,
    };
    // SAFETY: plain context creation.
    let (ctx_allocated, ctx_unallocated) =
        unsafe { (ggml_sys::ggml_init(params), ggml_sys::ggml_init(params)) };
    let release = || {
        // SAFETY: ggml_free accepts NULL and contexts made above.
        unsafe {
            ggml_sys::ggml_free(ctx_allocated);
            ggml_sys::ggml_free(ctx_unallocated);
        }
    };
    if ctx_allocated.is_null() || ctx_unallocated.is_null() {
        ffi::log::error(&format!(
            "{func}: failed to allocate context for graph copy\n"
        ));
        release();
        return FAILED_COPY;
    }
    let mut copier = Copier {
        copies: HashMap::new(),
        initialised: HashSet::new(),
        ctx_allocated,
        ctx_unallocated,
        func,
    };
    // SAFETY: live graph.
    let originals = unsafe { nodes(g) };
    for &node in originals {
        // SAFETY: nodes of a live graph and everything they reach are live.
        unsafe { copier.dup(node) };
    }
    // SAFETY: live context and backend.
    let buffer = unsafe { ggml_sys::ggml_backend_alloc_ctx_tensors(ctx_allocated, backend) };
    if buffer.is_null() {
        ffi::log::error(&format!(
            "{func}: failed to allocate buffer for graph copy\n"
        ));
        release();
        return FAILED_COPY;
    }
    for &node in originals {
        // SAFETY: every node was duplicated; storage is allocated.
        unsafe { copier.init(node) };
    }
    // SAFETY: live context sized for a graph of `g.size` nodes.
    let copy = unsafe { ggml_sys::ggml_new_graph_custom(ctx_allocated, g.size as usize, false) };
    // SAFETY: the new graph has room for `g.size >= n_nodes` nodes.
    unsafe {
        let c = &mut *copy;
        for (i, node) in originals.iter().enumerate() {
            *c.nodes.add(i) = copier.copies[node];
        }
        c.n_nodes = g.n_nodes;
    }
    GraphCopy {
        buffer,
        ctx_allocated,
        ctx_unallocated,
        graph: copy,
    }
}

export! {
    /// Frees a graph copy: its buffer and both contexts (stock `ggml_backend_graph_copy_free`).
    /// All-NULL fields (a failed copy) are fine.
    ///
    /// # Safety
    /// `copy` came from [`ggml_backend_graph_copy`] and is not used afterwards.
    pub unsafe fn ggml_backend_graph_copy_free(copy: GraphCopy) {
        // SAFETY: forwards the contract of `ggml_backend_graph_copy_free` unchanged to `free`:
        // `copy` came from `ggml_backend_graph_copy` and is not used afterwards.
        unsafe { free(copy) }
    }
}

/// The body of [`ggml_backend_graph_copy_free`].
///
/// # Safety
/// `copy` came from [`copy`] and is not used afterwards.
unsafe fn free(copy: GraphCopy) {
    // SAFETY: the copy owns its buffer and contexts; all three accept NULL.
    unsafe {
        buffer::free(copy.buffer);
        ggml_sys::ggml_free(copy.ctx_allocated);
        ggml_sys::ggml_free(copy.ctx_unallocated);
    }
}

export! {
    /// Runs `graph` on `backend1` and a copy of it on `backend2`, handing pairs of corresponding
    /// nodes to `callback(index, node1, node2, user_data)` (stock
    /// `ggml_backend_compare_graph_backend`). Returns false only when the copy fails.
    ///
    /// - `num_test_nodes == 0`: node by node, each a one-node graph view computed on both
    ///   backends; view ops (VIEW, RESHAPE, PERMUTE, TRANSPOSE) are computed but not compared; a
    ///   callback returning false stops the walk.
    /// - otherwise: both whole graphs are computed once and the callback sees every node that is
    ///   one of `test_nodes` (its return value is ignored); aborts when `test_nodes` is NULL or
    ///   none of them is a node of `graph`.
    ///
    /// Aborts when `callback` is NULL and would be called.
    ///
    /// # Safety
    /// Live backends; `graph` a live, allocated graph usable by `backend1`; `test_nodes` NULL or
    /// `num_test_nodes` tensor pointers.
    pub unsafe fn ggml_backend_compare_graph_backend(
        backend1: ggml_backend_t,
        backend2: ggml_backend_t,
        graph: *mut ggml_cgraph,
        callback: ggml_backend_eval_callback,
        user_data: *mut c_void,
        test_nodes: *const *const ggml_tensor,
        num_test_nodes: usize,
    ) -> bool {
        // SAFETY: forwards the contract of `ggml_backend_compare_graph_backend` to `copy`:
        // `backend2` live, `graph` NULL (`non_null` aborts) or a live, allocated graph.
        let copy = unsafe { self::copy(backend2, non_null(graph, F, "graph"), F) };
        if copy.buffer.is_null() {
            return false;
        }
        // SAFETY: `graph` is live (the copy succeeded), the copy's graph too.
        let (g1, g2) = unsafe { (&mut *graph, &mut *copy.graph) };
        // SAFETY: live graphs.
        let (n1, n2) = unsafe { (nodes(g1), nodes(g2)) };
        let cb = || match callback {
            Some(f) => f,
            None => ffi::fatal(F, "callback is NULL"),
        };
        if num_test_nodes != 0 {
            if test_nodes.is_null() {
                ffi::fatal(
                    F,
                    "GGML_ASSERT(test_nodes) failed: num_test_nodes != 0 but test_nodes is NULL",
                );
            }
            // SAFETY: `test_nodes` is not NULL (checked above) and points to `num_test_nodes`
            // tensor pointers (the `# Safety` contract).
            let wanted = unsafe { std::slice::from_raw_parts(test_nodes, num_test_nodes) };
            // SAFETY: live backends and graphs.
            unsafe {
                compute(backend1, g1, F);
                compute(backend2, g2, F);
            }
            let mut verified = false;
            for (i, (&t1, &t2)) in n1.iter().zip(n2).enumerate() {
                for &w in wanted {
                    if std::ptr::eq(t1.cast_const(), w) {
                        // SAFETY: the caller's callback with live tensors.
                        unsafe { cb()(i as i32, t1, t2, user_data) };
                        verified = true;
                    }
                }
            }
            if !verified {
                ffi::fatal(
                    F,
                    "GGML_ASSERT(verified) failed: none of test_nodes is a node of the graph",
                );
            }
        } else {
            for (i, (&t1, &t2)) in n1.iter().zip(n2).enumerate() {
                let i = i as i32;
                // SAFETY: views of live graphs, one node each; computed on their backends.
                unsafe {
                    let mut v1 = ggml_sys::ggml_graph_view(g1, i, i + 1);
                    let mut v2 = ggml_sys::ggml_graph_view(g2, i, i + 1);
                    compute(backend1, &mut v1, F);
                    compute(backend2, &mut v2, F);
                }
                // SAFETY: a live node.
                if is_view_op(unsafe { (*t1).op }) {
                    continue;
                }
                // SAFETY: the caller's callback with live tensors.
                if !unsafe { cb()(i, t1, t2, user_data) } {
                    break;
                }
            }
        }
        // SAFETY: made above, not used afterwards.
        unsafe { free(copy) };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_ops() {
        use ggml_sys::*;
        let views: Vec<ggml_op> = (0..GGML_OP_COUNT).filter(|&op| is_view_op(op)).collect();
        assert_eq!(
            views,
            vec![
                GGML_OP_RESHAPE,
                GGML_OP_VIEW,
                GGML_OP_PERMUTE,
                GGML_OP_TRANSPOSE
            ]
        );
    }
}
