//! The kernels' argument ABI, host side: the `Ten` struct every kernel takes, and the type
//! and op codes of `kernels.cu` (mirrored here; `codes_match_the_kernel_source` compares).

use ggml_sys::*;

/// A tensor as a kernel sees it (`struct Ten` in `kernels.cu`): device pointer, ggml's
/// extents (`ne`, elements) and strides (`nb`, bytes), and a type code (`TY_*`). 80 bytes,
/// passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Ten {
    /// Device address of element (0, 0, 0, 0).
    pub data: u64,
    /// Elements per dimension.
    pub ne: [i64; 4],
    /// Bytes between neighbours per dimension.
    pub nb: [i64; 4],
    /// One of the `TY_*` codes.
    pub ty: i32,
    /// Padding to 8 bytes (the C struct's size).
    pub pad: i32,
}

impl Ten {
    /// The kernel view of `t`, its bytes at device address `data`; `None` for a type the
    /// kernels do not know.
    pub fn of(t: &ggml_tensor, data: u64) -> Option<Ten> {
        Some(Ten {
            data,
            ne: t.ne,
            nb: t.nb.map(|b| b as i64),
            ty: ty_code(t.type_)?,
            pad: 0,
        })
    }

    /// Elements in the tensor.
    pub fn nelements(&self) -> i64 {
        self.ne.iter().product()
    }

    /// A contiguous F32 tensor of extents `ne` at `data`.
    pub fn contiguous_f32(data: u64, ne: [i64; 4]) -> Ten {
        let nb = [4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2]];
        Ten {
            data,
            ne,
            nb,
            ty: TY_F32,
            pad: 0,
        }
    }
}

/// Kernel type codes (`HRX_TY_*`).
pub(crate) const TY_F32: i32 = 0;
/// F16.
pub(crate) const TY_F16: i32 = 1;
/// BF16.
pub(crate) const TY_BF16: i32 = 2;
/// I32.
pub(crate) const TY_I32: i32 = 3;
/// I64.
pub(crate) const TY_I64: i32 = 4;
/// Q4_0 (blocks of 32, 18 bytes).
pub(crate) const TY_Q4_0: i32 = 5;
/// Q4_1 (blocks of 32, 20 bytes).
pub(crate) const TY_Q4_1: i32 = 6;
/// Q8_0 (blocks of 32, 34 bytes).
pub(crate) const TY_Q8_0: i32 = 7;
/// Q4_K (super-blocks of 256, 144 bytes).
pub(crate) const TY_Q4_K: i32 = 8;
/// Q6_K (super-blocks of 256, 210 bytes).
pub(crate) const TY_Q6_K: i32 = 9;

/// The kernel code of a ggml type; `None` for types the kernels cannot read.
pub fn ty_code(t: ggml_type) -> Option<i32> {
    Some(match t {
        GGML_TYPE_F32 => TY_F32,
        GGML_TYPE_F16 => TY_F16,
        GGML_TYPE_BF16 => TY_BF16,
        GGML_TYPE_I32 => TY_I32,
        GGML_TYPE_I64 => TY_I64,
        GGML_TYPE_Q4_0 => TY_Q4_0,
        GGML_TYPE_Q4_1 => TY_Q4_1,
        GGML_TYPE_Q8_0 => TY_Q8_0,
        GGML_TYPE_Q4_K => TY_Q4_K,
        GGML_TYPE_Q6_K => TY_Q6_K,
        _ => return None,
    })
}

/// Binary op codes (`HRX_BIN_*`).
pub(crate) const BIN_ADD: i32 = 0;
/// SUB.
pub(crate) const BIN_SUB: i32 = 1;
/// MUL.
pub(crate) const BIN_MUL: i32 = 2;
/// DIV.
pub(crate) const BIN_DIV: i32 = 3;

/// `hrx_unary`'s code for SCALE (`x * s + b`); every other code is ggml_unary_op's value.
pub(crate) const UN_SCALE: i32 = 100;

/// The unary ops `hrx_unary` computes, by ggml_unary_op (their codes are the enum values).
pub(crate) const UNARY_OPS: &[ggml_unary_op] = &[
    GGML_UNARY_OP_ABS,
    GGML_UNARY_OP_SGN,
    GGML_UNARY_OP_NEG,
    GGML_UNARY_OP_STEP,
    GGML_UNARY_OP_TANH,
    GGML_UNARY_OP_ELU,
    GGML_UNARY_OP_RELU,
    GGML_UNARY_OP_SIGMOID,
    GGML_UNARY_OP_GELU,
    GGML_UNARY_OP_GELU_QUICK,
    GGML_UNARY_OP_SILU,
    GGML_UNARY_OP_HARDSWISH,
    GGML_UNARY_OP_HARDSIGMOID,
    GGML_UNARY_OP_EXP,
    GGML_UNARY_OP_GELU_ERF,
    GGML_UNARY_OP_FLOOR,
    GGML_UNARY_OP_CEIL,
    GGML_UNARY_OP_ROUND,
    GGML_UNARY_OP_TRUNC,
];

/// The GLU ops `hrx_glu` computes, by ggml_glu_op (codes are the enum values).
pub(crate) const GLU_OPS: &[ggml_glu_op] = &[
    GGML_GLU_OP_REGLU,
    GGML_GLU_OP_GEGLU,
    GGML_GLU_OP_SWIGLU,
    GGML_GLU_OP_GEGLU_ERF,
    GGML_GLU_OP_GEGLU_QUICK,
];

/// `bad` flag values (`HRX_BAD_*`): an out-of-range GET_ROWS / SET_ROWS index.
pub(crate) const BAD_GET_ROWS: i32 = 1;
/// SET_ROWS.
pub(crate) const BAD_SET_ROWS: i32 = 2;

/// What a nonzero `bad` flag means, for the error message.
pub(crate) fn bad_flag_text(v: i32) -> String {
    match v {
        BAD_GET_ROWS => "a GET_ROWS row index out of range (those rows read as zeros)".into(),
        BAD_SET_ROWS => "a SET_ROWS row index out of range (those rows were not written)".into(),
        v => format!("kernel error flag {v}"),
    }
}

/// Warps (one output each) per block of `hrx_mul_mat_vec` (`HRX_MMV_WARPS`).
pub(crate) const MMV_WARPS: u32 = 8;

/// Threads per block of `hrx_flash_attn` (`HRX_FA_THREADS`): the largest head size of K and
/// of V it takes (one thread per key of a chunk, then one per output element).
pub(crate) const FA_THREADS: u32 = 256;

/// Bytes of each warp's staging buffer in `hrx_mul_mat_vec` (`HRX_MMV_STAGE`, static
/// shared memory).
pub(crate) const MMV_STAGE: usize = 1680;

/// Elements of a row each thread of a row kernel holds in registers (`HRX_ROW_CACHE`).
pub(crate) const ROW_CACHE: i64 = 8;

/// Bytes of dynamic shared memory `hrx_mul_mat_vec` may use for its F32 copy of a column of
/// src1 (the default per-block limit, 48 KiB).
pub(crate) const MMV_SHARED_MAX: usize = 48 << 10;

/// The same for `hrx_mul_mat_vec_q`: 48 KiB less the warps' staging buffers (13,440 bytes,
/// static), which leaves room for columns of up to 8,656 elements (an 8,192-wide FFN).
pub(crate) const MMV_Q_SHARED_MAX: usize = MMV_SHARED_MAX - MMV_WARPS as usize * MMV_STAGE;

#[cfg(test)]
mod tests {
    use super::*;

    fn defines() -> Vec<(String, i64)> {
        super::super::KERNEL_SOURCE
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next()? == "#define").then_some(())?;
                let name = w.next()?;
                let v: i64 = w.next()?.parse().ok()?;
                name.starts_with("HRX_").then(|| (name.to_string(), v))
            })
            .collect()
    }

    fn define(name: &str) -> i64 {
        defines()
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("kernels.cu has no #define {name}"))
            .1
    }

    #[test]
    fn codes_match_the_kernel_source() {
        for (name, v) in [
            ("HRX_TY_F32", TY_F32),
            ("HRX_TY_F16", TY_F16),
            ("HRX_TY_BF16", TY_BF16),
            ("HRX_TY_I32", TY_I32),
            ("HRX_TY_I64", TY_I64),
            ("HRX_TY_Q4_0", TY_Q4_0),
            ("HRX_TY_Q4_1", TY_Q4_1),
            ("HRX_TY_Q8_0", TY_Q8_0),
            ("HRX_TY_Q4_K", TY_Q4_K),
            ("HRX_TY_Q6_K", TY_Q6_K),
            ("HRX_BIN_ADD", BIN_ADD),
            ("HRX_BIN_SUB", BIN_SUB),
            ("HRX_BIN_MUL", BIN_MUL),
            ("HRX_BIN_DIV", BIN_DIV),
            ("HRX_UN_SCALE", UN_SCALE),
            ("HRX_MMV_WARPS", MMV_WARPS as i32),
            ("HRX_MMV_STAGE", MMV_STAGE as i32),
            ("HRX_ROW_CACHE", ROW_CACHE as i32),
            ("HRX_FA_THREADS", FA_THREADS as i32),
            ("HRX_BAD_GET_ROWS", BAD_GET_ROWS),
            ("HRX_BAD_SET_ROWS", BAD_SET_ROWS),
        ] {
            assert_eq!(define(name), v as i64, "{name}");
        }
        // every unary / glu op we claim has a case whose code is ggml's enum value
        let un: Vec<(String, i64)> = defines()
            .into_iter()
            .filter(|(n, _)| n.starts_with("HRX_UN_") && n != "HRX_UN_SCALE")
            .collect();
        assert_eq!(un.len(), UNARY_OPS.len());
        for &op in UNARY_OPS {
            assert!(un.iter().any(|(_, v)| *v == op as i64), "unary op {op}");
        }
        assert_eq!(define("HRX_UN_SILU"), GGML_UNARY_OP_SILU as i64);
        assert_eq!(define("HRX_UN_GELU_ERF"), GGML_UNARY_OP_GELU_ERF as i64);
        assert_eq!(define("HRX_UN_TRUNC"), GGML_UNARY_OP_TRUNC as i64);
        let glu: Vec<(String, i64)> = defines()
            .into_iter()
            .filter(|(n, _)| n.starts_with("HRX_GLU_"))
            .collect();
        assert_eq!(glu.len(), GLU_OPS.len());
        assert_eq!(define("HRX_GLU_SWIGLU"), GGML_GLU_OP_SWIGLU as i64);
        assert_eq!(
            define("HRX_GLU_GEGLU_QUICK"),
            GGML_GLU_OP_GEGLU_QUICK as i64
        );
    }

    #[test]
    fn ten_has_the_c_layout() {
        assert_eq!(std::mem::size_of::<Ten>(), 80);
        assert_eq!(std::mem::align_of::<Ten>(), 8);
    }

    #[test]
    fn ggml_types_map_to_kernel_codes() {
        assert_eq!(ty_code(GGML_TYPE_Q6_K), Some(TY_Q6_K));
        assert_eq!(ty_code(GGML_TYPE_Q5_0), None);
        let t = Ten::contiguous_f32(64, [3, 2, 1, 1]);
        assert_eq!(t.nb, [4, 12, 24, 24]);
        assert_eq!(t.nelements(), 6);
    }
}
