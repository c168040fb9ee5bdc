//! The names of ggml's ops, in one table for the whole crate: generated at build time from
//! the pinned `ggml.h` (see `build.rs`), so the eager-op spec can be parsed and messages
//! written without calling into libggml-base (unit tests run without it).

use ggml_sys::ggml_op;

include!(concat!(env!("OUT_DIR"), "/op_names.rs"));

/// The name of `op` as ggml spells it (`"MUL_MAT"`), `"?"` when out of range.
pub fn op_name(op: ggml_op) -> &'static str {
    OP_NAMES.get(op as usize).copied().unwrap_or("?")
}

/// The op called `name` (case-insensitive).
pub fn op_by_name(name: &str) -> Option<ggml_op> {
    OP_NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(name))
        .map(|i| i as ggml_op)
}

/// Whether `op` is a value of `enum ggml_op` other than `GGML_OP_NONE` (what the C API's
/// eager-op functions accept).
pub fn is_valid_op(op: i64) -> bool {
    op > 0 && (op as u64) < OP_NAMES.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggml_sys::{GGML_OP_COUNT, GGML_OP_FILL, GGML_OP_MUL_MAT, GGML_OP_SET_ROWS};

    #[test]
    fn op_names_match_bindgen() {
        assert_eq!(op_by_name("mul_mat"), Some(GGML_OP_MUL_MAT));
        assert_eq!(op_by_name("SET_ROWS"), Some(GGML_OP_SET_ROWS));
        assert_eq!(op_name(GGML_OP_FILL), "FILL");
        assert_eq!(op_name(GGML_OP_COUNT), "?");
        assert_eq!(OP_NAMES.len(), GGML_OP_COUNT as usize);
        assert!(!is_valid_op(0) && is_valid_op(1));
        assert!(!is_valid_op(OP_NAMES.len() as i64) && !is_valid_op(-1));
    }
}
