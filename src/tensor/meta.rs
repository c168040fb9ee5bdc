//! What a tensor's header says, without touching its data: its size in bytes, its layout,
//! the buffer that holds its storage, and whether its op makes data of its own. Pure functions
//! shared by the layer, graph copy and the scheduler's passes (one definition each).

use ggml_sys::{ggml_backend_buffer_t, ggml_op, ggml_tensor};

/// Whether `op` only reinterprets its source's storage (stock's `ggml_is_view_op`): VIEW,
/// RESHAPE, PERMUTE, TRANSPOSE. The scheduler's passes skip such nodes, and
/// `ggml_backend_compare_graph_backend` does not hand them to its callback.
pub fn is_view_op(op: ggml_op) -> bool {
    use ggml_sys::*;
    matches!(
        op,
        GGML_OP_VIEW | GGML_OP_RESHAPE | GGML_OP_PERMUTE | GGML_OP_TRANSPOSE
    )
}

/// Whether `op` creates no data of its own, a view or a leaf (stock's `ggml_op_is_empty`):
/// [`is_view_op`] and `GGML_OP_NONE`.
pub fn op_is_empty(op: ggml_op) -> bool {
    op == ggml_sys::GGML_OP_NONE || is_view_op(op)
}

/// The sources node `t` writes besides its own bytes (pointers borrowed from `t.src`):
/// `OPT_STEP_ADAMW` (`ggml_opt_step_adamw` sets `src[2]` = m, `src[3]` = v) updates both
/// moments in place, as ggml-cpu's and ggml-cuda's kernels do, while its result is a view of
/// the parameter it updates. Empty for every other op (an in-place op's result is a view of
/// what it writes). NULL slots are skipped.
pub fn written_sources(t: &ggml_tensor) -> impl Iterator<Item = *mut ggml_tensor> + '_ {
    let slots: &[usize] = if t.op == ggml_sys::GGML_OP_OPT_STEP_ADAMW {
        &[2, 3]
    } else {
        &[]
    };
    slots.iter().map(|&i| t.src[i]).filter(|s| !s.is_null())
}

/// Whether `t.src[slot]` is the destination `t` writes and does not read: the tensor `t` is
/// a view of for `GGML_OP_CPY` (slot 1) and `GGML_OP_SET_ROWS` (slot 2, the rows not
/// indexed are left as they are). The sanitizer counts the node's own bytes as the write.
pub fn is_destination_only(t: &ggml_tensor, slot: usize) -> bool {
    match t.op {
        ggml_sys::GGML_OP_CPY => slot == 1,
        ggml_sys::GGML_OP_SET_ROWS => slot == 2,
        _ => false,
    }
}

/// Bytes spanned by `t`'s elements: 0 when a dimension is empty, else from the first byte to
/// the end of the last element (or block, for block types) through the strides. Computes
/// exactly what `ggml_nbytes` computes, with its unsigned wrapping arithmetic, but inline:
/// gallocr asks for alloc sizes per tensor several times a graph, and the two out-of-line
/// type lookups of `ggml_nbytes` were a tenth of a scheduling cycle. The type must be a
/// valid `ggml_type` (ggml's release build does not check it; neither does stock).
#[inline]
pub fn nbytes(t: &ggml_tensor) -> usize {
    let [n0, n1, n2, n3] = t.ne;
    if n0.min(n1).min(n2.min(n3)) <= 0 {
        return 0;
    }
    // SAFETY: returns a pointer into ggml's static type table (it asserts the type is valid).
    let traits = unsafe { &*ggml_sys::ggml_get_type_traits(t.type_) };
    let blck = traits.blck_size as usize;
    // ne >= 1 here, so `ne - 1` cannot wrap; products and sums wrap as C's size_t does.
    let span = |n: i64, stride: usize| (n as usize - 1).wrapping_mul(stride);
    let first = if blck == 1 {
        traits.type_size.wrapping_add(span(n0, t.nb[0]))
    } else {
        (n0 as usize).wrapping_mul(t.nb[0]) / blck
    };
    first
        .wrapping_add(span(n1, t.nb[1]))
        .wrapping_add(span(n2, t.nb[2]))
        .wrapping_add(span(n3, t.nb[3]))
}

/// Whether `a` and `b` have the same type, shape and strides (stock `ggml_are_same_layout`).
pub fn same_layout(a: &ggml_tensor, b: &ggml_tensor) -> bool {
    a.type_ == b.type_ && a.ne == b.ne && a.nb == b.nb
}

/// The buffer that holds `t`'s storage: its view source's buffer for a view, else its own
/// (NULL when not allocated).
///
/// # Safety
/// `t.view_src` must be NULL or point to a live tensor.
pub unsafe fn storage_buffer(t: &ggml_tensor) -> ggml_backend_buffer_t {
    // SAFETY: the caller's contract: NULL or live.
    match unsafe { t.view_src.as_ref() } {
        Some(v) => v.buffer,
        None => t.buffer,
    }
}

/// The tensor whose memory `t` is: the end of its chain of view sources (`t` itself when it
/// is no view). ggml makes a view only of an earlier tensor, so the chain ends.
///
/// # Safety
/// `t` and every view source on its chain must be live tensors.
pub unsafe fn view_root(mut t: *mut ggml_tensor) -> *mut ggml_tensor {
    loop {
        // SAFETY: the caller's contract.
        let v = unsafe { (*t).view_src };
        if v.is_null() {
            return t;
        }
        t = v;
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use ggml_sys::*;
    use proptest::prelude::*;

    proptest! {
        /// `nbytes` equals ggml's `ggml_nbytes` for every type, with empty and negative
        /// dimensions, contiguous and arbitrary strides (wrapping included).
        #[test]
        fn nbytes_is_ggml_nbytes(
            ty in 0u32..ggml_sys::GGML_TYPE_COUNT,
            ne in proptest::array::uniform4(-2i64..70),
            contiguous in any::<bool>(),
            nb in proptest::array::uniform4(any::<u32>()),
        ) {
            // SAFETY: a pure lookup in ggml's type table.
            let traits = unsafe { &*ggml_sys::ggml_get_type_traits(ty) };
            // Removed types have block size 0: ggml never makes tensors of them.
            prop_assume!(traits.blck_size > 0);
            let mut t = ggml_tensor { type_: ty, ne, ..Default::default() };
            if contiguous {
                t.nb[0] = traits.type_size;
                t.nb[1] = t.nb[0] * (ne[0].max(0) as usize / traits.blck_size as usize);
                t.nb[2] = t.nb[1] * ne[1].max(0) as usize;
                t.nb[3] = t.nb[2] * ne[2].max(0) as usize;
            } else {
                t.nb = nb.map(|x| x as usize);
            }
            // SAFETY: `t` is a live tensor of a valid type.
            prop_assert_eq!(nbytes(&t), unsafe { ggml_sys::ggml_nbytes(&t) });
        }
    }

    /// The ops in ascending order for which `f` holds.
    fn ops(f: fn(ggml_op) -> bool) -> Vec<ggml_op> {
        (0..GGML_OP_COUNT).filter(|&op| f(op)).collect()
    }

    /// Sorted, as `ops` lists them.
    fn sorted(mut v: Vec<ggml_op>) -> Vec<ggml_op> {
        v.sort_unstable();
        v
    }

    #[test]
    fn empty_ops() {
        assert_eq!(
            ops(op_is_empty),
            sorted(vec![
                GGML_OP_NONE,
                GGML_OP_VIEW,
                GGML_OP_RESHAPE,
                GGML_OP_PERMUTE,
                GGML_OP_TRANSPOSE
            ])
        );
    }

    #[test]
    fn layouts() {
        let mut a = ggml_tensor {
            ne: [4, 2, 1, 1],
            nb: [4, 16, 32, 32],
            ..Default::default()
        };
        let b = a;
        assert!(same_layout(&a, &b));
        a.nb[1] = 20;
        assert!(!same_layout(&a, &b));
        a.nb[1] = 16;
        a.type_ = ggml_sys::GGML_TYPE_F16;
        assert!(!same_layout(&a, &b));
    }

    #[test]
    fn storage_of_a_view_is_its_sources() {
        let own = 0x10 as ggml_backend_buffer_t;
        let src_buf = 0x20 as ggml_backend_buffer_t;
        let mut src = ggml_tensor {
            buffer: src_buf,
            ..Default::default()
        };
        let plain = ggml_tensor {
            buffer: own,
            ..Default::default()
        };
        let view = ggml_tensor {
            buffer: own,
            view_src: &mut src,
            ..Default::default()
        };
        // SAFETY: `view_src` is NULL or the live local `src`.
        unsafe {
            assert_eq!(storage_buffer(&plain), own);
            assert_eq!(storage_buffer(&view), src_buf);
        }
    }
}
