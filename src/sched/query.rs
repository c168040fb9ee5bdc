//! Questions several passes ask of the placement table and the backends: a node's sources
//! with their table ids, and whether a backend can use a tensor's storage (stock's
//! `ggml_backend_sched_buffer_supported`). Plain reading of graphs and tensors is in
//! [`super::inspect`].

use ggml_sys::ggml_tensor;

use super::caps::Caps;
use super::table::{GraphIds, Table};
use crate::tensor::meta;

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
