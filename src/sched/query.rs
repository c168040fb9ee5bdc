//! Questions about tensors and graphs that several passes ask: the graph's node and leaf
//! lists as slices, a tensor's sources (with or without their table ids), names for
//! messages, and whether a backend can use a tensor's storage
//! (stock's `ggml_backend_sched_buffer_supported`).

use ggml_sys::{ggml_cgraph, ggml_tensor};

use super::caps::Caps;
use super::table::{GraphIds, Table};
use crate::tensor::meta;

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

/// The non-NULL sources of node `i` with their ids.
pub fn sources_at<'a>(
    node: &'a ggml_tensor,
    ix: &'a GraphIds,
    i: usize,
) -> impl Iterator<Item = (*mut ggml_tensor, usize)> + 'a {
    let n = ix.n_srcs[i] as usize;
    node.src[..n]
        .iter()
        .zip(ix.srcs[i][..n].iter())
        .filter(|(s, _)| !s.is_null())
        .map(|(&s, &id)| (s, id as usize))
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

/// Whether backend `b` can use the storage of `t`: the buffer type of its allocated storage,
/// or else the buffer type of the backend it (or its view source) is placed on. False when
/// neither is known.
///
/// # Safety
/// `t` and its view source must be live tensors.
pub unsafe fn buffer_supported(
    caps: &dyn Caps,
    table: &Table,
    t: *const ggml_tensor,
    b: usize,
) -> bool {
    // SAFETY: `t` and its view source are live tensors (this function's contract).
    unsafe { supported_given(caps, table, &*t, || table.backend(t), b) }
}

/// [`buffer_supported`] for a source whose id is known (skips the pointer lookup: this runs
/// per source per backend in the upgrade pass).
///
/// # Safety
/// As [`buffer_supported`].
#[inline]
pub unsafe fn buffer_supported_at(
    caps: &dyn Caps,
    table: &Table,
    t: *const ggml_tensor,
    id: usize,
    b: usize,
) -> bool {
    // SAFETY: as in `buffer_supported`.
    unsafe { supported_given(caps, table, &*t, || table.backend_at(id), b) }
}

/// The shared rule: the buffer type of `t`'s storage when it is allocated, else that of the
/// backend `t` (or, unplaced, its view source) is placed on, must be usable by backend `b`.
/// `own` looks up `t`'s own placement; it runs only when the storage is not allocated.
///
/// # Safety
/// `t`'s view source, when set, must be a live tensor.
#[inline]
unsafe fn supported_given(
    caps: &dyn Caps,
    table: &Table,
    tr: &ggml_tensor,
    own: impl FnOnce() -> Option<usize>,
    b: usize,
) -> bool {
    // SAFETY: `tr` is a reference; its view source is live (this function's contract).
    let buf = unsafe { meta::storage_buffer(tr) };
    let buft = if !buf.is_null() {
        // SAFETY: a non-NULL storage buffer of a live tensor is a live buffer (ggml frees a
        // buffer only after the tensors in it).
        unsafe { (*buf).buft }
    } else {
        let placed = own().or_else(|| {
            if tr.view_src.is_null() {
                None
            } else {
                table.backend(tr.view_src)
            }
        });
        match placed {
            Some(p) => caps.buft(p),
            None => return false,
        }
    };
    // SAFETY: `buft` is non-NULL here: a live buffer's type or the scheduler's own.
    !buft.is_null() && unsafe { caps.supports_buft(b, buft) }
}
