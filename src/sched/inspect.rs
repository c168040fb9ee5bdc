//! Reading ggml graphs and tensors, for every pass and for the table: a graph's node and
//! leaf lists as slices, a tensor's sources, and names for messages. Depends on nothing else
//! of the scheduler, so the modules above it (the table, the capabilities, the passes) may
//! all use it.

use ggml_sys::{ggml_cgraph, ggml_tensor};

/// A C string as an owned Rust string ("" for NULL).
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string live for the call.
pub unsafe fn cstr(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-NULL here, and NUL-terminated and live by this function's contract.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// A tensor's name (lossy UTF-8).
pub fn name(t: &ggml_tensor) -> String {
    // SAFETY: ggml keeps `name` NUL-terminated (its setters truncate to 63 bytes).
    unsafe { cstr(t.name.as_ptr()) }
}

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
