//! Reading ggml graphs and tensors, for every pass and for the table: a graph's node and
//! leaf lists as slices, a tensor's sources, and names for messages. Depends on nothing else
//! of the scheduler, so the modules above it (the table, the capabilities, the passes) may
//! all use it.

use ggml_sys::{ggml_cgraph, ggml_tensor};

// A C string and a tensor's name as Rust strings live with the other header readers.
pub use crate::tensor::meta::{cstr, name};

/// The non-NULL sources of `t`, in slot order, with their slot index.
pub fn sources(t: &ggml_tensor) -> impl Iterator<Item = (usize, *mut ggml_tensor)> + '_ {
    t.src
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, s)| !s.is_null())
}

/// The nodes of a graph as a slice (empty for an empty graph).
///
/// # Safety
/// `g` must be a live graph whose `nodes` holds `n_nodes` pointers, not resized for `'a`.
pub unsafe fn nodes<'a>(g: &ggml_cgraph) -> &'a [*mut ggml_tensor] {
    if g.nodes.is_null() || g.n_nodes <= 0 {
        &[]
    } else {
        // SAFETY: `nodes` is non-NULL and `n_nodes` > 0 here; that it holds that many
        // pointers, unchanged for `'a`, is this function's contract.
        unsafe { std::slice::from_raw_parts(g.nodes, g.n_nodes as usize) }
    }
}

/// The leafs of a graph as a slice (empty for an empty graph).
///
/// # Safety
/// As [`nodes`], for `leafs` and `n_leafs`.
pub unsafe fn leafs<'a>(g: &ggml_cgraph) -> &'a [*mut ggml_tensor] {
    if g.leafs.is_null() || g.n_leafs <= 0 {
        &[]
    } else {
        // SAFETY: as in `nodes`, for `leafs` and `n_leafs`.
        unsafe { std::slice::from_raw_parts(g.leafs, g.n_leafs as usize) }
    }
}
