//! Which nodes the CUDA kernels can run: the runtime's half of a claim (the layer above
//! asks [`crate::runtime::Runtime::supports`] last, after its own eager-op and type rules).
//! Pure host logic over the node's header, tested without a GPU.

use ggml_sys::*;

use super::kargs::{ty_code, FA_THREADS, GLU_OPS, UNARY_OPS};

const FLOATS: &[ggml_type] = &[GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16];
const QUANT_WEIGHTS: &[ggml_type] = &[
    GGML_TYPE_Q4_0,
    GGML_TYPE_Q4_1,
    GGML_TYPE_Q8_0,
    GGML_TYPE_Q4_K,
    GGML_TYPE_Q6_K,
];
/// Quantized types the kernels can write (CPY into them, SET_ROWS into them).
const QUANT_STORES: &[ggml_type] = &[GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0];

fn src(node: &ggml_tensor, i: usize) -> Option<&ggml_tensor> {
    let p = node.src[i];
    // SAFETY: a node's non-null sources are live tensors while the node is.
    (!p.is_null()).then(|| unsafe { &*p })
}

fn is_float(t: &ggml_tensor) -> bool {
    FLOATS.contains(&t.type_)
}

fn elem_size(t: ggml_type) -> Option<usize> {
    Some(match t {
        GGML_TYPE_F32 | GGML_TYPE_I32 => 4,
        GGML_TYPE_F16 | GGML_TYPE_BF16 => 2,
        GGML_TYPE_I64 => 8,
        _ => return None,
    })
}

/// Bytes of one quantized block and elements in it.
pub fn block_of(t: ggml_type) -> Option<(usize, i64)> {
    Some(match t {
        GGML_TYPE_Q4_0 => (18, 32),
        GGML_TYPE_Q4_1 => (20, 32),
        GGML_TYPE_Q8_0 => (34, 32),
        GGML_TYPE_Q4_K => (144, 256),
        GGML_TYPE_Q6_K => (210, 256),
        _ => return None,
    })
}

/// Whether rows of `t` are packed: element (or block) 0 and 1 of a row are neighbours.
fn rows_packed(t: &ggml_tensor) -> bool {
    match (elem_size(t.type_), block_of(t.type_)) {
        (Some(es), _) => t.nb[0] == es,
        (None, Some((bytes, blck))) => t.nb[0] == bytes && t.ne[0] % blck == 0,
        _ => false,
    }
}

fn contiguous(t: &ggml_tensor) -> bool {
    let Some(es) = elem_size(t.type_).or_else(|| block_of(t.type_).map(|b| b.0)) else {
        return false;
    };
    let blck = block_of(t.type_).map_or(1, |b| b.1);
    let mut next = es;
    for d in 0..4 {
        if t.ne[d] != 1 && t.nb[d] != next {
            return false;
        }
        next = if d == 0 {
            es * (t.ne[0] / blck) as usize
        } else {
            next * t.ne[d] as usize
        };
    }
    true
}

fn op_i32(t: &ggml_tensor, i: usize) -> i32 {
    t.op_params[i]
}

/// Why the kernels cannot run `node`, or `Ok` when they can.
pub fn check(node: &ggml_tensor) -> Result<(), String> {
    if node.ne.iter().any(|&n| n <= 0) {
        return Ok(()); // empty: nothing runs
    }
    let s0 = src(node, 0);
    let s1 = src(node, 1);
    let need = |ok: bool, why: &str| if ok { Ok(()) } else { Err(why.to_string()) };
    match node.op {
        GGML_OP_ADD | GGML_OP_SUB | GGML_OP_MUL | GGML_OP_DIV => {
            let (a, b) = (s0.ok_or("no src0")?, s1.ok_or("no src1")?);
            need(
                is_float(a) && is_float(b) && is_float(node),
                "types other than F32/F16/BF16",
            )?;
            need(
                (0..4).all(|d| b.ne[d] > 0 && a.ne[d] % b.ne[d] == 0 && a.ne[d] == node.ne[d]),
                "src1 does not broadcast over src0",
            )
        }
        GGML_OP_SCALE => need(
            s0.is_some_and(|a| a.type_ == GGML_TYPE_F32) && node.type_ == GGML_TYPE_F32,
            "SCALE other than F32",
        ),
        GGML_OP_FILL => need(is_float(node), "FILL of a non-float type"),
        GGML_OP_UNARY => {
            let a = s0.ok_or("no src0")?;
            let op = op_i32(node, 0) as ggml_unary_op;
            need(UNARY_OPS.contains(&op), "unary op without a kernel")?;
            need(
                is_float(a) && a.type_ == node.type_,
                "unary types other than F32/F16/BF16 in and out alike",
            )
        }
        GGML_OP_GLU => {
            let a = s0.ok_or("no src0")?;
            let op = op_i32(node, 0) as ggml_glu_op;
            need(GLU_OPS.contains(&op), "GLU op without a kernel")?;
            need(
                is_float(a) && s1.is_none_or(is_float) && is_float(node),
                "GLU types other than F32/F16/BF16",
            )
        }
        GGML_OP_RMS_NORM | GGML_OP_NORM => need(
            s0.is_some_and(|a| a.type_ == GGML_TYPE_F32) && node.type_ == GGML_TYPE_F32,
            "norms other than F32",
        ),
        GGML_OP_SOFT_MAX => {
            let a = s0.ok_or("no src0")?;
            need(
                a.type_ == GGML_TYPE_F32 && node.type_ == GGML_TYPE_F32,
                "SOFT_MAX other than F32",
            )?;
            if let Some(m) = s1 {
                need(
                    matches!(m.type_, GGML_TYPE_F32 | GGML_TYPE_F16)
                        && m.ne[0] == a.ne[0]
                        && m.ne[1] >= a.ne[1]
                        && a.ne[2] % m.ne[2] == 0
                        && a.ne[3] % m.ne[3] == 0,
                    "SOFT_MAX mask of another type or shape",
                )?;
            }
            need(
                src(node, 2).is_none_or(|s| s.type_ == GGML_TYPE_F32),
                "SOFT_MAX sinks other than F32",
            )
        }
        GGML_OP_ROPE => {
            let a = s0.ok_or("no src0")?;
            let mode = op_i32(node, 2);
            need(
                mode == GGML_ROPE_TYPE_NORMAL as i32 || mode == GGML_ROPE_TYPE_NEOX as i32,
                "ROPE modes other than normal and neox",
            )?;
            need(
                matches!(a.type_, GGML_TYPE_F32 | GGML_TYPE_F16) && a.type_ == node.type_,
                "ROPE types other than F32/F16",
            )?;
            need(
                s1.is_some_and(|p| p.type_ == GGML_TYPE_I32),
                "ROPE positions not I32",
            )?;
            need(
                src(node, 2).is_none_or(|f| f.type_ == GGML_TYPE_F32),
                "ROPE frequency factors not F32",
            )
        }
        GGML_OP_GET_ROWS => {
            let a = s0.ok_or("no src0")?;
            let i = s1.ok_or("no src1")?;
            need(
                (is_float(a) || QUANT_WEIGHTS.contains(&a.type_)) && rows_packed(a),
                "GET_ROWS from this type or layout",
            )?;
            need(
                matches!(i.type_, GGML_TYPE_I32 | GGML_TYPE_I64),
                "GET_ROWS indices not I32/I64",
            )?;
            need(is_float(node), "GET_ROWS into a non-float type")
        }
        GGML_OP_CPY | GGML_OP_DUP | GGML_OP_CONT => {
            let a = s0.ok_or("no src0")?;
            let d = if node.op == GGML_OP_CPY {
                s1.unwrap_or(node)
            } else {
                node
            };
            if QUANT_STORES.contains(&d.type_) {
                return need(
                    a.type_ == GGML_TYPE_F32 && contiguous(d) && d.ne[0] % 32 == 0,
                    "copy into a quantized tensor other than contiguous from F32",
                );
            }
            need(
                (is_float(a) && is_float(d))
                    || (a.type_ == d.type_ && elem_size(a.type_).is_some()),
                "copy between these types",
            )
        }
        GGML_OP_SET_ROWS => {
            let a = s0.ok_or("no src0")?;
            let i = s1.ok_or("no src1")?;
            need(
                matches!(i.type_, GGML_TYPE_I32 | GGML_TYPE_I64),
                "SET_ROWS indices not I32/I64",
            )?;
            need(is_float(a), "SET_ROWS from a non-float type")?;
            if QUANT_STORES.contains(&node.type_) {
                return need(
                    a.ne[0] % 32 == 0 && rows_packed(node),
                    "SET_ROWS into quantized rows that are not whole blocks",
                );
            }
            need(is_float(node), "SET_ROWS into this type")
        }
        GGML_OP_MUL_MAT => {
            let a = s0.ok_or("no src0")?;
            let b = s1.ok_or("no src1")?;
            need(
                (is_float(a) || QUANT_WEIGHTS.contains(&a.type_)) && rows_packed(a),
                "MUL_MAT weights of this type or layout",
            )?;
            need(is_float(b), "MUL_MAT src1 not F32/F16/BF16")?;
            need(node.type_ == GGML_TYPE_F32, "MUL_MAT result not F32")?;
            need(
                b.ne[2] % a.ne[2] == 0 && b.ne[3] % a.ne[3] == 0,
                "MUL_MAT batch that does not broadcast",
            )?;
            need(
                node.ne[2] * node.ne[3] <= 65535,
                "MUL_MAT with more than 65535 matrices",
            )
        }
        GGML_OP_FLASH_ATTN_EXT => {
            let q = s0.ok_or("no src0")?;
            let k = s1.ok_or("no src1")?;
            let v = src(node, 2).ok_or("no src2")?;
            need(
                q.type_ == GGML_TYPE_F32 && node.type_ == GGML_TYPE_F32,
                "FLASH_ATTN_EXT query or result not F32",
            )?;
            need(
                is_float(k) && is_float(v),
                "FLASH_ATTN_EXT K or V not F32/F16/BF16",
            )?;
            let most = i64::from(FA_THREADS);
            need(
                q.ne[0] == k.ne[0],
                "FLASH_ATTN_EXT query and K of other head sizes",
            )?;
            need(
                q.ne[0] <= most && v.ne[0] <= most,
                "FLASH_ATTN_EXT head size above 256",
            )?;
            need(
                k.ne[1] == v.ne[1]
                    && (2..4).all(|i| {
                        k.ne[i] > 0
                            && v.ne[i] > 0
                            && q.ne[i] % k.ne[i] == 0
                            && q.ne[i] % v.ne[i] == 0
                    }),
                "FLASH_ATTN_EXT K/V that do not broadcast over the query",
            )?;
            need(
                q.ne[2] <= 65535 && q.ne[3] <= 65535,
                "FLASH_ATTN_EXT with more than 65535 heads or sequences",
            )?;
            if let Some(m) = src(node, 3) {
                need(
                    matches!(m.type_, GGML_TYPE_F32 | GGML_TYPE_F16)
                        && m.ne[0] >= k.ne[1]
                        && m.ne[1] >= q.ne[1]
                        && q.ne[2] % m.ne[2] == 0
                        && q.ne[3] % m.ne[3] == 0,
                    "FLASH_ATTN_EXT mask of another type or shape",
                )?;
            }
            need(
                src(node, 4).is_none_or(|s| s.type_ == GGML_TYPE_F32 && s.ne[0] >= q.ne[2]),
                "FLASH_ATTN_EXT sinks other than F32, one per head",
            )
        }
        _ => Err("op without a CUDA kernel".into()),
    }
    .and_then(|()| {
        // every tensor the kernels touch must have a type they can read
        std::iter::once(node)
            .chain((0..GGML_MAX_SRC as usize).filter_map(|i| src(node, i)))
            .all(|t| ty_code(t.type_).is_some())
            .then_some(())
            .ok_or_else(|| "a tensor of a type the kernels cannot read".to_string())
    })
}

/// Whether the kernels can run `node` (see [`check`]).
pub fn supports(node: &ggml_tensor) -> bool {
    check(node).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn tensor(ty: ggml_type, ne: [i64; 4]) -> ggml_tensor {
        // SAFETY: ggml_tensor is plain data; all-zero is a valid (empty) value.
        let mut t: ggml_tensor = unsafe { std::mem::zeroed() };
        t.type_ = ty;
        t.ne = ne;
        let (es, blck) = match (block_of(ty), ty) {
            (Some((b, n)), _) => (b, n),
            (None, GGML_TYPE_Q5_0) => (22, 32),
            (None, _) => (elem_size(ty).unwrap(), 1),
        };
        t.nb[0] = es;
        t.nb[1] = es * (ne[0] / blck) as usize;
        t.nb[2] = t.nb[1] * ne[1] as usize;
        t.nb[3] = t.nb[2] * ne[2] as usize;
        t
    }

    fn node(
        op: ggml_op,
        ty: ggml_type,
        ne: [i64; 4],
        srcs: &mut [&mut ggml_tensor],
    ) -> ggml_tensor {
        let mut n = tensor(ty, ne);
        n.op = op;
        for (i, s) in srcs.iter_mut().enumerate() {
            n.src[i] = *s as *mut ggml_tensor;
        }
        n
    }

    #[test]
    fn mul_mat_takes_the_weight_types_of_llama_models() {
        for ty in [
            GGML_TYPE_F32,
            GGML_TYPE_F16,
            GGML_TYPE_BF16,
            GGML_TYPE_Q4_0,
            GGML_TYPE_Q4_1,
            GGML_TYPE_Q8_0,
            GGML_TYPE_Q4_K,
            GGML_TYPE_Q6_K,
        ] {
            let mut w = tensor(ty, [256, 64, 1, 1]);
            let mut x = tensor(GGML_TYPE_F32, [256, 7, 1, 1]);
            let n = node(
                GGML_OP_MUL_MAT,
                GGML_TYPE_F32,
                [64, 7, 1, 1],
                &mut [&mut w, &mut x],
            );
            assert_eq!(check(&n), Ok(()), "{ty}");
        }
        let mut w = tensor(GGML_TYPE_Q5_0, [256, 64, 1, 1]);
        let mut x = tensor(GGML_TYPE_F32, [256, 7, 1, 1]);
        let n = node(
            GGML_OP_MUL_MAT,
            GGML_TYPE_F32,
            [64, 7, 1, 1],
            &mut [&mut w, &mut x],
        );
        assert!(check(&n).is_err());
        // a transposed weight (rows not packed) goes back to the CPU
        let mut w = tensor(GGML_TYPE_F32, [64, 256, 1, 1]);
        w.nb.swap(0, 1);
        w.ne.swap(0, 1);
        let n = node(
            GGML_OP_MUL_MAT,
            GGML_TYPE_F32,
            [64, 7, 1, 1],
            &mut [&mut w, &mut x],
        );
        assert_eq!(
            check(&n).unwrap_err(),
            "MUL_MAT weights of this type or layout"
        );
    }

    /// A llama-shaped attention: 32 query heads over 8 K/V heads of 64, 7 queries, 640 keys
    /// in an F16 cache, an F16 mask padded to 64 rows; dst (64, heads, queries, 1).
    fn flash_attn(
        q: &mut ggml_tensor,
        k: &mut ggml_tensor,
        v: &mut ggml_tensor,
        m: &mut ggml_tensor,
    ) -> ggml_tensor {
        node(
            GGML_OP_FLASH_ATTN_EXT,
            GGML_TYPE_F32,
            [v.ne[0], q.ne[2], q.ne[1], q.ne[3]],
            &mut [q, k, v, m],
        )
    }

    #[test]
    fn flash_attn_takes_llama_shapes_and_refuses_the_rest_by_name() {
        let mut q = tensor(GGML_TYPE_F32, [64, 7, 32, 1]);
        let mut k = tensor(GGML_TYPE_F16, [64, 640, 8, 1]);
        let mut v = tensor(GGML_TYPE_F16, [64, 640, 8, 1]);
        let mut m = tensor(GGML_TYPE_F16, [640, 64, 1, 1]);
        let n = flash_attn(&mut q, &mut k, &mut v, &mut m);
        assert_eq!(check(&n), Ok(()));
        // K/V heads that do not divide the query's
        let mut k5 = tensor(GGML_TYPE_F16, [64, 640, 5, 1]);
        let n = flash_attn(&mut q, &mut k5, &mut v, &mut m);
        assert_eq!(
            check(&n).unwrap_err(),
            "FLASH_ATTN_EXT K/V that do not broadcast over the query"
        );
        // K rows of another length than the query's
        let mut k32 = tensor(GGML_TYPE_F16, [32, 640, 8, 1]);
        let n = flash_attn(&mut q, &mut k32, &mut v, &mut m);
        assert_eq!(
            check(&n).unwrap_err(),
            "FLASH_ATTN_EXT query and K of other head sizes"
        );
        // head size beyond one thread per element
        let mut q512 = tensor(GGML_TYPE_F32, [512, 7, 32, 1]);
        let mut k512 = tensor(GGML_TYPE_F16, [512, 640, 8, 1]);
        let n = flash_attn(&mut q512, &mut k512, &mut v, &mut m);
        assert_eq!(check(&n).unwrap_err(), "FLASH_ATTN_EXT head size above 256");
        // a quantized cache
        let mut kq = tensor(GGML_TYPE_Q8_0, [64, 640, 8, 1]);
        let n = flash_attn(&mut q, &mut kq, &mut v, &mut m);
        assert_eq!(
            check(&n).unwrap_err(),
            "FLASH_ATTN_EXT K or V not F32/F16/BF16"
        );
        // a mask shorter than the keys
        let mut short = tensor(GGML_TYPE_F16, [512, 64, 1, 1]);
        let n = flash_attn(&mut q, &mut k, &mut v, &mut short);
        assert_eq!(
            check(&n).unwrap_err(),
            "FLASH_ATTN_EXT mask of another type or shape"
        );
        // sinks: F32, one per head
        let mut sinks = tensor(GGML_TYPE_F32, [32, 1, 1, 1]);
        let mut n = flash_attn(&mut q, &mut k, &mut v, &mut m);
        n.src[4] = &mut sinks;
        assert_eq!(check(&n), Ok(()));
        let mut few = tensor(GGML_TYPE_F32, [8, 1, 1, 1]);
        n.src[4] = &mut few;
        assert_eq!(
            check(&n).unwrap_err(),
            "FLASH_ATTN_EXT sinks other than F32, one per head"
        );
    }

    #[test]
    fn rope_modes_and_unary_ops_are_limited_to_the_kernels() {
        let mut a = tensor(GGML_TYPE_F32, [64, 4, 3, 1]);
        let mut p = tensor(GGML_TYPE_I32, [3, 1, 1, 1]);
        let mut n = node(
            GGML_OP_ROPE,
            GGML_TYPE_F32,
            [64, 4, 3, 1],
            &mut [&mut a, &mut p],
        );
        n.op_params[2] = GGML_ROPE_TYPE_NEOX as i32;
        assert_eq!(check(&n), Ok(()));
        n.op_params[2] = GGML_ROPE_TYPE_MROPE as i32;
        assert!(check(&n).is_err());
        let mut u = node(GGML_OP_UNARY, GGML_TYPE_F32, [64, 4, 3, 1], &mut [&mut a]);
        u.op_params[0] = GGML_UNARY_OP_SILU as i32;
        assert_eq!(check(&u), Ok(()));
        u.op_params[0] = GGML_UNARY_OP_XIELU as i32;
        assert!(check(&u).is_err());
    }

    #[test]
    fn copies_into_quantized_tensors_need_whole_contiguous_blocks() {
        let mut a = tensor(GGML_TYPE_F32, [64, 4, 1, 1]);
        let mut d = tensor(GGML_TYPE_Q8_0, [64, 4, 1, 1]);
        let n = node(
            GGML_OP_CPY,
            GGML_TYPE_Q8_0,
            [64, 4, 1, 1],
            &mut [&mut a, &mut d],
        );
        assert_eq!(check(&n), Ok(()));
        let mut a = tensor(GGML_TYPE_F16, [64, 4, 1, 1]);
        let n = node(
            GGML_OP_CPY,
            GGML_TYPE_Q8_0,
            [64, 4, 1, 1],
            &mut [&mut a, &mut d],
        );
        assert!(check(&n).is_err());
        let mut i = tensor(GGML_TYPE_I32, [64, 4, 1, 1]);
        let mut f = tensor(GGML_TYPE_F32, [64, 4, 1, 1]);
        let n = node(
            GGML_OP_CPY,
            GGML_TYPE_F32,
            [64, 4, 1, 1],
            &mut [&mut i, &mut f],
        );
        assert_eq!(check(&n).unwrap_err(), "copy between these types");
    }

    #[test]
    fn unknown_ops_are_refused() {
        let mut a = tensor(GGML_TYPE_F32, [64, 4, 1, 1]);
        let n = node(
            GGML_OP_SSM_SCAN,
            GGML_TYPE_F32,
            [64, 4, 1, 1],
            &mut [&mut a],
        );
        assert_eq!(check(&n).unwrap_err(), "op without a CUDA kernel");
        assert!(contiguous(&a));
        assert!(contiguous(&tensor(GGML_TYPE_Q4_K, [512, 2, 1, 1])));
    }
}
