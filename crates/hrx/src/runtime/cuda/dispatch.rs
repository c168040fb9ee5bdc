//! From a node to the device work that computes it: which kernels, with which grids and
//! arguments, and which cuBLAS calls. Host logic only: the work goes to a [`Target`], which
//! the CUDA runtime implements over its stream and the tests implement as a recorder.

use ggml_sys::*;

use super::kargs::*;

/// One kernel argument, by value. Equality is bit for bit (an `F32` of -0.0 differs from
/// 0.0, a NaN equals itself), as a graph replay needs: equal arguments are the same bytes.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// A tensor (`struct Ten`).
    Ten(Ten),
    /// `int`.
    I32(i32),
    /// `long long`.
    I64(i64),
    /// `unsigned int`.
    U32(u32),
    /// `float`.
    F32(f32),
    /// A device pointer (`int *`).
    Ptr(u64),
}

impl PartialEq for Arg {
    fn eq(&self, other: &Arg) -> bool {
        match (self, other) {
            (Arg::Ten(a), Arg::Ten(b)) => a == b,
            (Arg::I32(a), Arg::I32(b)) => a == b,
            (Arg::I64(a), Arg::I64(b)) => a == b,
            (Arg::U32(a), Arg::U32(b)) => a == b,
            (Arg::F32(a), Arg::F32(b)) => a.to_bits() == b.to_bits(),
            (Arg::Ptr(a), Arg::Ptr(b)) => a == b,
            _ => false,
        }
    }
}

/// A kernel launch.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The kernel's name in `kernels.cu` (`extern "C"`).
    pub kernel: &'static str,
    /// Blocks per dimension.
    pub grid: [u32; 3],
    /// Threads per block per dimension.
    pub block: [u32; 3],
    /// Bytes of dynamic shared memory.
    pub shared: u32,
    /// The arguments, in the kernel's order.
    pub args: Vec<Arg>,
}

/// One strided-batched single-precision GEMM, column-major as cuBLAS sees it:
/// `C[m x n] = A^T[m x k] * B[k x n]` for `batch` matrices, where A is stored k x m (ggml's
/// src0 rows), B k x n (src1 rows), C m x n (dst rows). Leading dimensions and strides are in
/// elements; addresses are device addresses of the first matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemm {
    /// Rows of C (ggml: ne01).
    pub m: i32,
    /// Columns of C (ggml: ne11).
    pub n: i32,
    /// The reduced extent (ggml: ne00).
    pub k: i32,
    /// A, its leading dimension and batch stride.
    pub a: (u64, i32, i64),
    /// B, its leading dimension and batch stride.
    pub b: (u64, i32, i64),
    /// C, its leading dimension and batch stride.
    pub c: (u64, i32, i64),
    /// Matrices in the batch.
    pub batch: i32,
}

/// Where device work goes, in order.
pub trait Target {
    /// Device memory for temporaries of the current node, 256-aligned; valid until the next
    /// node starts.
    fn scratch(&mut self, bytes: usize) -> Result<u64, String>;
    /// Queues a kernel launch.
    fn launch(&mut self, l: Launch) -> Result<(), String>;
    /// Queues a GEMM.
    fn gemm(&mut self, g: Gemm) -> Result<(), String>;
    /// The device address of the `int` flag kernels set when an index is out of range
    /// (`HRX_BAD_*`; the runtime reads and clears it at synchronize).
    fn bad_flag(&mut self) -> Result<u64, String>;
    /// Blocks per column of the matrix-vector kernels at most; [`MMV_MAX_BLOCKS`] unless the
    /// device was told otherwise (`GGML_HRX_MMV_BLOCKS`).
    fn mmv_max_blocks(&self) -> u64 {
        MMV_MAX_BLOCKS
    }
}

/// Threads per block of the element-wise and row kernels.
const THREADS: u32 = 256;
/// Elements of a row the row kernels hold in registers: [`ROW_CACHE`] a thread, [`THREADS`]
/// threads.
pub(crate) const ROW_CACHE_MAX: i64 = ROW_CACHE * THREADS as i64;
/// Columns up to which MUL_MAT runs as matrix-vector products (one warp per output).
pub(crate) const MMV_MAX_COLS: i64 = 8;
/// Blocks per column of the matrix-vector kernel at most: its warps take rows grid-stride,
/// so a large matrix (an output projection of 128k rows) converts the column into shared
/// memory 1,024 times rather than once per 8 rows. 1,024 blocks of 8 warps still fill an
/// H200 (132 multiprocessors; `hrx_mul_mat_vec_q` keeps 4 blocks resident on each, its
/// launch bounds capping it at 64 registers).
pub(crate) const MMV_MAX_BLOCKS: u64 = 1024;

fn f32_param(t: &ggml_tensor, i: usize) -> f32 {
    f32::from_bits(t.op_params[i] as u32)
}

fn elementwise(kernel: &'static str, n: i64, args: Vec<Arg>) -> Launch {
    let blocks = (n.max(1) as u64).div_ceil(THREADS as u64).min(1 << 20) as u32;
    Launch {
        kernel,
        grid: [blocks, 1, 1],
        block: [THREADS, 1, 1],
        shared: 0,
        args,
    }
}

fn rows(kernel: &'static str, a: &Ten, args: Vec<Arg>) -> Result<Launch, String> {
    let n = a.ne[1] * a.ne[2] * a.ne[3];
    let grid = u32::try_from(n).map_err(|_| format!("{n} rows are too many for {kernel}"))?;
    Ok(Launch {
        kernel,
        grid: [grid, 1, 1],
        block: [THREADS, 1, 1],
        shared: 0,
        args,
    })
}

/// ALiBi's slope bases for `n_head` heads and `max_bias`, as ggml's soft_max and
/// flash_attn_ext compute them: `(m0, m1, n_head_log2)`, where head `h` gets
/// `m0^(h+1)` below `n_head_log2` and `m1^(2(h - n_head_log2) + 1)` from it on.
fn alibi(n_head: i64, max_bias: f32) -> (f32, f32, u32) {
    let n_head_log2 = 1u32 << (n_head.max(1) as u32).ilog2();
    let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    (m0, m1, n_head_log2)
}

fn ten_or_none(t: Option<Ten>) -> (Ten, i32) {
    match t {
        Some(t) => (t, 1),
        None => (Ten::default(), 0),
    }
}

/// Start and end of YaRN's correction range, as `ggml_rope_yarn_corr_dims` computes them.
pub fn rope_corr_dims(
    n_dims: i32,
    n_ctx_orig: i32,
    base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    let dim = |n_rot: f32| {
        n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let start = dim(beta_fast).floor();
    let end = dim(beta_slow).ceil();
    [start.max(0.0), end.min((n_dims - 1) as f32)]
}

/// Queues the work of `node` (its header; `d` is its kernel view) with sources `src`
/// (kernel views, by source slot) on `t`. The caller checked [`super::support::check`].
pub fn node(
    node: &ggml_tensor,
    d: Ten,
    src: &[Option<Ten>],
    t: &mut dyn Target,
) -> Result<(), String> {
    let s = |i: usize| src.get(i).copied().flatten();
    let s0 = || s(0).ok_or_else(|| "source 0 missing".to_string());
    let s1 = || s(1).ok_or_else(|| "source 1 missing".to_string());
    let n = d.nelements();
    match node.op {
        GGML_OP_ADD | GGML_OP_SUB | GGML_OP_MUL | GGML_OP_DIV => {
            let op = match node.op {
                GGML_OP_ADD => BIN_ADD,
                GGML_OP_SUB => BIN_SUB,
                GGML_OP_MUL => BIN_MUL,
                _ => BIN_DIV,
            };
            t.launch(elementwise(
                "hrx_binary",
                n,
                vec![
                    Arg::Ten(d),
                    Arg::Ten(s0()?),
                    Arg::Ten(s1()?),
                    Arg::I32(op),
                    Arg::I64(n),
                ],
            ))
        }
        GGML_OP_SCALE | GGML_OP_UNARY => {
            let (op, p0, p1) = if node.op == GGML_OP_SCALE {
                (UN_SCALE, f32_param(node, 0), f32_param(node, 1))
            } else {
                (node.op_params[0], 0.0, 0.0)
            };
            t.launch(elementwise(
                "hrx_unary",
                n,
                vec![
                    Arg::Ten(d),
                    Arg::Ten(s0()?),
                    Arg::I32(op),
                    Arg::F32(p0),
                    Arg::F32(p1),
                    Arg::I64(n),
                ],
            ))
        }
        GGML_OP_FILL => t.launch(elementwise(
            "hrx_fill",
            n,
            vec![Arg::Ten(d), Arg::F32(f32_param(node, 0)), Arg::I64(n)],
        )),
        GGML_OP_GLU => {
            let (b, has_b) = ten_or_none(s(1));
            t.launch(elementwise(
                "hrx_glu",
                n,
                vec![
                    Arg::Ten(d),
                    Arg::Ten(s0()?),
                    Arg::Ten(b),
                    Arg::I32(has_b),
                    Arg::I32(node.op_params[0]),
                    Arg::I32(node.op_params[1]),
                    Arg::I64(n),
                ],
            ))
        }
        GGML_OP_RMS_NORM | GGML_OP_NORM => {
            let a = s0()?;
            let rms = i32::from(node.op == GGML_OP_RMS_NORM);
            t.launch(rows(
                "hrx_norm",
                &a,
                vec![
                    Arg::Ten(d),
                    Arg::Ten(a),
                    Arg::F32(f32_param(node, 0)),
                    Arg::I32(rms),
                    Arg::Ten(Ten::default()),
                    Arg::I32(0),
                ],
            )?)
        }
        GGML_OP_SOFT_MAX => {
            let a = s0()?;
            let (m, has_m) = ten_or_none(s(1));
            let (sk, has_sk) = ten_or_none(s(2));
            let scale = f32_param(node, 0);
            let max_bias = f32_param(node, 1);
            let (m0, m1, n_head_log2) = alibi(a.ne[2], max_bias);
            t.launch(rows(
                "hrx_soft_max",
                &a,
                vec![
                    Arg::Ten(d),
                    Arg::Ten(a),
                    Arg::Ten(m),
                    Arg::Ten(sk),
                    Arg::I32(has_m),
                    Arg::I32(has_sk),
                    Arg::F32(scale),
                    Arg::F32(max_bias),
                    Arg::F32(m0),
                    Arg::F32(m1),
                    Arg::U32(n_head_log2),
                ],
            )?)
        }
        GGML_OP_FLASH_ATTN_EXT => {
            let (q, k, v) = (s0()?, s1()?, s(2).ok_or("source 2 missing")?);
            let (m, has_m) = ten_or_none(s(3));
            let (sk, has_sk) = ten_or_none(s(4));
            let (scale, max_bias, softcap) =
                (f32_param(node, 0), f32_param(node, 1), f32_param(node, 2));
            let (m0, m1, n_head_log2) = alibi(q.ne[2], max_bias);
            let dim = |n: i64, what: &str| {
                u32::try_from(n).map_err(|_| format!("FLASH_ATTN_EXT: {n} {what} are too many"))
            };
            t.launch(Launch {
                kernel: "hrx_flash_attn",
                grid: [
                    dim(q.ne[1], "queries")?,
                    dim(q.ne[2], "heads")?,
                    dim(q.ne[3], "sequences")?,
                ],
                block: [FA_THREADS, 1, 1],
                shared: 0,
                args: vec![
                    Arg::Ten(d),
                    Arg::Ten(q),
                    Arg::Ten(k),
                    Arg::Ten(v),
                    Arg::Ten(m),
                    Arg::Ten(sk),
                    Arg::I32(has_m),
                    Arg::I32(has_sk),
                    // ggml divides the scale by the soft cap and multiplies the cap back
                    // after the tanh
                    Arg::F32(if softcap != 0.0 {
                        scale / softcap
                    } else {
                        scale
                    }),
                    Arg::F32(softcap),
                    Arg::F32(max_bias),
                    Arg::F32(m0),
                    Arg::F32(m1),
                    Arg::U32(n_head_log2),
                ],
            })
        }
        GGML_OP_ROPE => {
            let a = s0()?;
            let p = &node.op_params;
            let n_dims = p[1];
            let neox = i32::from(p[2] == GGML_ROPE_TYPE_NEOX as i32);
            let n_ctx_orig = p[4];
            let freq_base = f32_param(node, 5);
            let corr = rope_corr_dims(
                n_dims,
                n_ctx_orig,
                freq_base,
                f32_param(node, 9),
                f32_param(node, 10),
            );
            let theta_scale = freq_base.powf(-2.0 / n_dims as f32);
            let (ff, has_ff) = ten_or_none(s(2));
            let pairs = a.nelements() / 2;
            t.launch(elementwise(
                "hrx_rope",
                pairs,
                vec![
                    Arg::Ten(d),
                    Arg::Ten(a),
                    Arg::Ten(s1()?),
                    Arg::Ten(ff),
                    Arg::I32(has_ff),
                    Arg::I32(n_dims),
                    Arg::I32(neox),
                    Arg::I32(p[15]),
                    Arg::F32(f32_param(node, 6)),
                    Arg::F32(f32_param(node, 7)),
                    Arg::F32(f32_param(node, 8)),
                    Arg::F32(corr[0]),
                    Arg::F32(corr[1]),
                    Arg::F32(theta_scale),
                    Arg::I64(pairs),
                ],
            ))
        }
        GGML_OP_GET_ROWS => {
            let bad = t.bad_flag()?;
            t.launch(elementwise(
                "hrx_get_rows",
                n,
                vec![
                    Arg::Ten(d),
                    Arg::Ten(s0()?),
                    Arg::Ten(s1()?),
                    Arg::I64(n),
                    Arg::Ptr(bad),
                ],
            ))
        }
        GGML_OP_CPY | GGML_OP_DUP | GGML_OP_CONT => {
            let a = s0()?;
            if is_quant(d.ty) {
                let blocks = a.nelements() / 32;
                t.launch(elementwise(
                    "hrx_cpy_q",
                    blocks,
                    vec![Arg::Ten(d), Arg::Ten(a), Arg::I64(blocks)],
                ))
            } else {
                let n = a.nelements();
                t.launch(elementwise(
                    "hrx_cpy",
                    n,
                    vec![Arg::Ten(d), Arg::Ten(a), Arg::I64(n)],
                ))
            }
        }
        GGML_OP_SET_ROWS => {
            let a = s0()?;
            let (kernel, n) = if is_quant(d.ty) {
                ("hrx_set_rows_q", a.nelements() / 32)
            } else {
                ("hrx_set_rows", a.nelements())
            };
            let bad = t.bad_flag()?;
            t.launch(elementwise(
                kernel,
                n,
                vec![
                    Arg::Ten(d),
                    Arg::Ten(a),
                    Arg::Ten(s1()?),
                    Arg::I64(n),
                    Arg::Ptr(bad),
                ],
            ))
        }
        GGML_OP_MUL_MAT => mul_mat(d, s0()?, s1()?, t),
        op => Err(format!("op {op} has no CUDA kernel")),
    }
}

/// Whether node `i` of `job` and the next one may run as one RMS_NORM+MUL kernel, as far
/// as the graph tells: node `i` is an RMS_NORM used once (by the next node) and not a graph
/// output (whose bytes someone reads), and the next node is a MUL reading it as source 0
/// only. [`fuses_norm_mul`] then checks types and shapes.
pub fn norm_mul_pair(job: &crate::runtime::ExecJob, i: usize) -> bool {
    let (Some(n), Some(m)) = (job.nodes.get(i), job.nodes.get(i + 1)) else {
        return false;
    };
    let norm = &n.tensors[0];
    norm.op == GGML_OP_RMS_NORM
        && n.use_count == Some(1)
        && norm.flags & GGML_TENSOR_FLAG_OUTPUT as i32 == 0
        && m.tensors[0].op == GGML_OP_MUL
        && m.node_srcs.contains(&(0, i))
        && !m.node_srcs.contains(&(1, i))
}

/// Bytes of shared memory the matrix-vector kernels take for a column of `k` elements: F32
/// with one padding float per 32 (see `XS` in kernels.cu).
fn padded_col_bytes(k: i64) -> usize {
    (k as usize + k as usize / 32 + 1) * 4
}

/// Blocks per column of the matrix-vector kernels for `rows` rows: one per
/// [`MMV_WARPS`] rows, at most the device's cap ([`Target::mmv_max_blocks`]).
fn mmv_grid_x(rows: i64, t: &dyn Target) -> Result<u32, String> {
    let blocks = (rows as u64)
        .div_ceil(MMV_WARPS as u64)
        .min(t.mmv_max_blocks().max(1));
    u32::try_from(blocks).map_err(|_| "too many rows".to_string())
}

/// Whether nodes `i`, `i + 1` and `i + 2` of `job` may run as one kernel
/// (`hrx_mul_mat_vec_q_glu`), as far as the graph tells: two MUL_MATs, each used once (by
/// the third node) and not a graph output, the second not reading the first, and a GLU
/// reading one as source 0 and the other as source 1: llama.cpp's feed-forward (the up and
/// gate projections, in either order, then SWIGLU of the two). [`fuses_mmv_glu`] then checks
/// types and shapes.
pub fn mmv_glu_triple(job: &crate::runtime::ExecJob, i: usize) -> bool {
    let (Some(a), Some(b), Some(g)) =
        (job.nodes.get(i), job.nodes.get(i + 1), job.nodes.get(i + 2))
    else {
        return false;
    };
    let used_once = |n: &crate::runtime::NodeJob| {
        n.tensors[0].op == GGML_OP_MUL_MAT
            && n.use_count == Some(1)
            && n.tensors[0].flags & GGML_TENSOR_FLAG_OUTPUT as i32 == 0
    };
    let reads =
        |n: &crate::runtime::NodeJob, slot: usize, j: usize| n.node_srcs.contains(&(slot, j));
    used_once(a)
        && used_once(b)
        && !b.node_srcs.iter().any(|&(_, j)| j == i)
        && g.tensors[0].op == GGML_OP_GLU
        && ((reads(g, 0, i) && reads(g, 1, i + 1)) || (reads(g, 0, i + 1) && reads(g, 1, i)))
}

/// Whether a GLU (`glu`) of two one-column products, weights `w0` (source 0's) and `w1`
/// (source 1's) times columns `c0` and `c1`, runs as one `hrx_mul_mat_vec_q_glu`: the same
/// column (one tensor, F32), weights of one quantized type and shape whose rows
/// `hrx_mul_mat_vec_q` streams, the column fitting its shared memory, and the GLU's result
/// packed F32 of one column.
pub fn fuses_mmv_glu(glu: &ggml_tensor, w0: &Ten, w1: &Ten, c0: &Ten, c1: &Ten) -> bool {
    let k = w0.ne[0];
    glu.op == GGML_OP_GLU
        && glu.type_ == GGML_TYPE_F32
        && glu.nb[0] == 4
        && glu.ne == [w0.ne[1], 1, 1, 1]
        && c0 == c1
        && c0.ty == TY_F32
        && c0.ne == [k, 1, 1, 1]
        && w0.ty == w1.ty
        && w0.ne == w1.ne
        && w0.ne[2] == 1
        && w0.ne[3] == 1
        && staged_rows(w0)
        && staged_rows(w1)
        && padded_col_bytes(k) <= MMV_Q_SHARED_MAX
}

/// Queues the GLU `glu` of the products of weights `w0` and `w1` with column `c` into `d`,
/// as one kernel; see [`fuses_mmv_glu`].
pub fn mmv_glu(
    glu: &ggml_tensor,
    d: Ten,
    w0: Ten,
    w1: Ten,
    c: Ten,
    t: &mut dyn Target,
) -> Result<(), String> {
    t.launch(Launch {
        kernel: "hrx_mul_mat_vec_q_glu",
        grid: [mmv_grid_x(w0.ne[1], t)?, 1, 1],
        block: [32 * MMV_WARPS, 1, 1],
        shared: padded_col_bytes(w0.ne[0]) as u32,
        args: vec![
            Arg::Ten(d),
            Arg::Ten(w0),
            Arg::Ten(w1),
            Arg::Ten(c),
            Arg::I32(glu.op_params[0]),
            Arg::I32(glu.op_params[1]),
        ],
    })
}

/// Whether node `i` of `job` is an ADD whose sum the next node, an RMS_NORM, reads as its
/// source 0, so that the two may run as one `hrx_add_norm` (the sum is still written: the
/// residual stream reads it again). [`fuses_add_norm`] then checks types and shapes; the MUL
/// after the norm fuses too when [`norm_mul_pair`] holds for `i + 1`.
pub fn add_norm_pair(job: &crate::runtime::ExecJob, i: usize) -> bool {
    let (Some(a), Some(n)) = (job.nodes.get(i), job.nodes.get(i + 1)) else {
        return false;
    };
    a.tensors[0].op == GGML_OP_ADD
        && n.tensors[0].op == GGML_OP_RMS_NORM
        && n.node_srcs.contains(&(0, i))
}

/// Whether `add` (of `x` and `y`) and `norm` (an RMS_NORM of the sum) run as one
/// `hrx_add_norm`: everything F32 of one shape, rows packed (4-byte element stride), and a
/// row short enough for the kernel to hold in registers ([`ROW_CACHE_MAX`] elements).
pub fn fuses_add_norm(add: &ggml_tensor, norm: &ggml_tensor, x: &Ten, y: &Ten) -> bool {
    add.op == GGML_OP_ADD
        && norm.op == GGML_OP_RMS_NORM
        && add.type_ == GGML_TYPE_F32
        && norm.type_ == GGML_TYPE_F32
        && x.ty == TY_F32
        && y.ty == TY_F32
        && x.ne == add.ne
        && y.ne == add.ne
        && norm.ne == add.ne
        && [x.nb[0], y.nb[0], add.nb[0] as i64, norm.nb[0] as i64] == [4; 4]
        && add.ne[0] <= ROW_CACHE_MAX
}

/// Queues ADD of `x` and `y` into `s` and RMS_NORM of the sum (the header `norm`) into `d`,
/// times `m` when given (the fused MUL's multiplier; `d` is then the MUL's result); see
/// [`fuses_add_norm`].
pub fn add_norm(
    norm: &ggml_tensor,
    s: Ten,
    x: Ten,
    y: Ten,
    d: Ten,
    m: Option<Ten>,
    t: &mut dyn Target,
) -> Result<(), String> {
    let (m, has_m) = ten_or_none(m);
    t.launch(rows(
        "hrx_add_norm",
        &x,
        vec![
            Arg::Ten(s),
            Arg::Ten(x),
            Arg::Ten(y),
            Arg::Ten(d),
            Arg::F32(f32_param(norm, 0)),
            Arg::Ten(m),
            Arg::I32(has_m),
        ],
    )?)
}

/// Whether `norm` (an RMS_NORM used once) and `mul` (a MUL whose source 0 is `norm`'s
/// result) run as one fused kernel: all F32, and the multiplier broadcasts over the norm.
pub fn fuses_norm_mul(norm: &ggml_tensor, mul: &ggml_tensor, m: &Ten) -> bool {
    norm.op == GGML_OP_RMS_NORM
        && mul.op == GGML_OP_MUL
        && norm.type_ == GGML_TYPE_F32
        && mul.type_ == GGML_TYPE_F32
        && m.ty == TY_F32
        && mul.ne == norm.ne
        && (0..4).all(|i| m.ne[i] > 0 && norm.ne[i] % m.ne[i] == 0)
}

/// Queues RMS_NORM of `a` (the header `norm`) times `m`, into `d` (the MUL's result); see
/// [`fuses_norm_mul`].
pub fn norm_mul(
    norm: &ggml_tensor,
    d: Ten,
    a: Ten,
    m: Ten,
    t: &mut dyn Target,
) -> Result<(), String> {
    t.launch(rows(
        "hrx_norm",
        &a,
        vec![
            Arg::Ten(d),
            Arg::Ten(a),
            Arg::F32(f32_param(norm, 0)),
            Arg::I32(1),
            Arg::Ten(m),
            Arg::I32(1),
        ],
    )?)
}

fn is_quant(ty: i32) -> bool {
    matches!(ty, TY_Q4_0 | TY_Q4_1 | TY_Q8_0 | TY_Q4_K | TY_Q6_K)
}

/// Weights per block and bytes per block of a quantized type (`is_quant`).
fn quant_block(ty: i32) -> Option<(i64, i64)> {
    match ty {
        TY_Q4_0 => Some((32, 18)),
        TY_Q4_1 => Some((32, 20)),
        TY_Q8_0 => Some((32, 34)),
        TY_Q4_K => Some((256, 144)),
        TY_Q6_K => Some((256, 210)),
        _ => None,
    }
}

/// Whether `hrx_mul_mat_vec_q` can stream the rows of weights `a` with 16-byte loads:
/// a quantized type, every row starting 16-byte aligned (the data pointer and the row,
/// matrix and batch strides multiples of 16) and holding whole blocks that end on a 16-byte
/// boundary. Quantized blocks are 18, 20, 34, 144 or 210 bytes, so without these 2-byte
/// loads are all the alignment promises.
pub(crate) fn staged_rows(a: &Ten) -> bool {
    let Some((qk, bs)) = quant_block(a.ty) else {
        return false;
    };
    a.data.is_multiple_of(16)
        && a.nb[1..].iter().all(|&b| b % 16 == 0)
        && a.ne[0] % qk == 0
        && (a.ne[0] / qk * bs) % 16 == 0
        && a.nb[0] == bs
}

/// The device bytes `t` spans, `[start, end)`: from its first element to the end of its
/// last, for its strides (`ggml_nbytes`); nothing when an extent is 0.
pub fn span(t: &Ten) -> (u64, u64) {
    if t.ne.iter().any(|&n| n <= 0) {
        return (t.data, t.data);
    }
    let (per, unit) = quant_block(t.ty).unwrap_or(match t.ty {
        TY_F16 | TY_BF16 => (1, 2),
        TY_I64 => (1, 8),
        _ => (1, 4),
    });
    let last = (t.ne[0] / per - 1) * t.nb[0] + (1..4).map(|i| (t.ne[i] - 1) * t.nb[i]).sum::<i64>();
    (t.data, t.data + (last + unit) as u64)
}

/// Whether the bytes of `a` and `b` overlap.
pub fn overlaps(a: &Ten, b: &Ten) -> bool {
    let ((a0, a1), (b0, b1)) = (span(a), span(b));
    a0 < b1 && b0 < a1
}

/// Whether a fused kernel may write `out` while reading `inp`: their bytes apart, or the very
/// same tensor (each element then read before the same thread writes it). The allocator may
/// give a fused chain's last result the memory of an input that only the chain's first node
/// reads (a freed block reused), which the separate kernels never meet, as the first node
/// has read it before the later one runs; ggml-cuda checks the same before its fusions.
pub fn apart_or_same(out: &Ten, inp: &Ten) -> bool {
    out == inp || !overlaps(out, inp)
}

/// Leading dimension and batch strides (elements) when `x` can go to cuBLAS as it is: F32,
/// rows packed, strides whole elements, leading dimension at least a row.
fn f32_layout(x: &Ten) -> Option<(i32, i64, i64)> {
    let whole = x.nb.iter().all(|&b| b % 4 == 0);
    if x.ty != TY_F32 || x.nb[0] != 4 || !whole || x.nb[1] / 4 < x.ne[0] {
        return None;
    }
    Some((i32::try_from(x.nb[1] / 4).ok()?, x.nb[2] / 4, x.nb[3] / 4))
}

/// `x` as F32 for cuBLAS: itself, or a contiguous copy in scratch memory. Returns the
/// address, leading dimension and batch strides in elements.
fn as_f32(x: &Ten, t: &mut dyn Target) -> Result<(u64, i32, i64, i64), String> {
    if let Some((ld, s2, s3)) = f32_layout(x) {
        return Ok((x.data, ld, s2, s3));
    }
    let n = x.nelements();
    let buf = t.scratch(n as usize * 4)?;
    let c = Ten::contiguous_f32(buf, x.ne);
    t.launch(elementwise(
        "hrx_to_f32",
        n,
        vec![Arg::Ten(c), Arg::Ten(*x), Arg::I64(n)],
    ))?;
    let ld = i32::try_from(x.ne[0]).map_err(|_| "row too long for cuBLAS".to_string())?;
    Ok((buf, ld, x.ne[0] * x.ne[1], x.ne[0] * x.ne[1] * x.ne[2]))
}

/// MUL_MAT: `d[i01, i11, i12, i13] = sum_k a[k, i01, i12 / r2, i13 / r3] * b[k, i11, i12, i13]`.
/// Up to [`MMV_MAX_COLS`] columns: one warp per output, weights read in place (quantized
/// included). Otherwise both operands as F32 and cuBLAS, one strided batch per i13 (and per
/// i02 when src0 is broadcast, with a zero A stride).
fn mul_mat(d: Ten, a: Ten, b: Ten, t: &mut dyn Target) -> Result<(), String> {
    let (m, k, n) = (a.ne[1], a.ne[0], b.ne[1]);
    let r2 = b.ne[2] / a.ne[2];
    let r3 = b.ne[3] / a.ne[3];
    if n <= MMV_MAX_COLS {
        let grid_x = mmv_grid_x(m, t)?;
        let col_bytes = padded_col_bytes(k);
        let shared = col_bytes <= MMV_SHARED_MAX;
        let grid = [grid_x, n as u32, (b.ne[2] * b.ne[3]) as u32];
        let mut args = vec![
            Arg::Ten(d),
            Arg::Ten(a),
            Arg::Ten(b),
            Arg::I64(r2),
            Arg::I64(r3),
        ];
        // the staged kernel always has the column in shared memory and takes no flag
        let (kernel, shared_bytes) = if col_bytes <= MMV_Q_SHARED_MAX && staged_rows(&a) {
            ("hrx_mul_mat_vec_q", col_bytes as u32)
        } else {
            args.push(Arg::I32(i32::from(shared)));
            ("hrx_mul_mat_vec", if shared { col_bytes as u32 } else { 0 })
        };
        return t.launch(Launch {
            kernel,
            grid,
            block: [32 * MMV_WARPS, 1, 1],
            shared: shared_bytes,
            args,
        });
    }
    let (ap, lda, sa2, sa3) = as_f32(&a, t)?;
    let (bp, ldb, sb2, sb3) = as_f32(&b, t)?;
    let (ldc, sc2, sc3) = f32_layout(&d).ok_or("MUL_MAT result is not packed F32")?;
    let to_i32 = |v: i64, what: &str| {
        i32::try_from(v).map_err(|_| format!("{what} {v} too large for cuBLAS"))
    };
    let (mi, ni, ki) = (
        to_i32(m, "rows")?,
        to_i32(n, "columns")?,
        to_i32(k, "depth")?,
    );
    let at = |base: u64, elems: i64| base + 4 * elems as u64;
    for i13 in 0..b.ne[3] {
        let i03 = i13 / r3;
        if r2 == 1 {
            t.gemm(Gemm {
                m: mi,
                n: ni,
                k: ki,
                a: (at(ap, i03 * sa3), lda, sa2),
                b: (at(bp, i13 * sb3), ldb, sb2),
                c: (at(d.data, i13 * sc3), ldc, sc2),
                batch: to_i32(b.ne[2], "batch")?,
            })?;
            continue;
        }
        for i02 in 0..a.ne[2] {
            let i12 = i02 * r2;
            t.gemm(Gemm {
                m: mi,
                n: ni,
                k: ki,
                a: (at(ap, i02 * sa2 + i03 * sa3), lda, 0),
                b: (at(bp, i12 * sb2 + i13 * sb3), ldb, sb2),
                c: (at(d.data, i12 * sc2 + i13 * sc3), ldc, sc2),
                batch: to_i32(r2, "batch")?,
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Recorder {
        launches: Vec<Launch>,
        gemms: Vec<Gemm>,
        scratch: Vec<usize>,
    }

    impl Target for Recorder {
        fn scratch(&mut self, bytes: usize) -> Result<u64, String> {
            self.scratch.push(bytes);
            Ok(0x1_0000_0000 * self.scratch.len() as u64)
        }
        fn launch(&mut self, l: Launch) -> Result<(), String> {
            self.launches.push(l);
            Ok(())
        }
        fn gemm(&mut self, g: Gemm) -> Result<(), String> {
            self.gemms.push(g);
            Ok(())
        }
        fn bad_flag(&mut self) -> Result<u64, String> {
            Ok(0xbad0)
        }
    }

    fn ten(ty: i32, data: u64, ne: [i64; 4], es: i64) -> Ten {
        Ten {
            data,
            ne,
            nb: [
                es,
                es * ne[0],
                es * ne[0] * ne[1],
                es * ne[0] * ne[1] * ne[2],
            ],
            ty,
            pad: 0,
        }
    }

    /// A packed quantized tensor as ggml lays it out: nb[0] is a block's bytes.
    fn qten(ty: i32, data: u64, ne: [i64; 4]) -> Ten {
        let (qk, bs) = quant_block(ty).unwrap();
        let row = ne[0] / qk * bs;
        Ten {
            data,
            ne,
            nb: [bs, row, row * ne[1], row * ne[1] * ne[2]],
            ty,
            pad: 0,
        }
    }

    fn mm_node() -> ggml_tensor {
        // SAFETY: plain data, zero is valid.
        let mut n: ggml_tensor = unsafe { std::mem::zeroed() };
        n.op = GGML_OP_MUL_MAT;
        n
    }

    /// The one launch of a one-token MUL_MAT with weights `a` (an F32 column, an F32 result).
    fn mat_vec(a: Ten) -> Launch {
        let b = ten(TY_F32, 0x2000, [a.ne[0], 1, 1, 1], 4);
        let d = ten(TY_F32, 0x3000, [a.ne[1], 1, 1, 1], 4);
        let mut r = Recorder::default();
        node(&mm_node(), d, &[Some(a), Some(b)], &mut r).unwrap();
        assert_eq!(r.launches.len(), 1);
        assert!(r.gemms.is_empty() && r.scratch.is_empty());
        r.launches.remove(0)
    }

    #[test]
    fn one_token_goes_to_the_matrix_vector_kernel_with_weights_in_place() {
        let l = mat_vec(qten(TY_Q4_0, 0x1000, [2048, 8192, 1, 1]));
        // rows of 1,152 bytes from a 16-byte aligned start: streamed with 16-byte loads
        assert_eq!(l.kernel, "hrx_mul_mat_vec_q");
        assert_eq!(l.grid, [1024, 1, 1]);
        assert_eq!(l.block, [256, 1, 1]);
        // the column (2048 floats) goes to shared memory
        assert_eq!(l.shared, (2048 + 64 + 1) * 4);
        assert_eq!(l.args.len(), 5);
    }

    /// A target whose device caps the matrix-vector grid at `cap` blocks
    /// (`GGML_HRX_MMV_BLOCKS`).
    struct Capped(Recorder, u64);

    impl Target for Capped {
        fn scratch(&mut self, bytes: usize) -> Result<u64, String> {
            self.0.scratch(bytes)
        }
        fn launch(&mut self, l: Launch) -> Result<(), String> {
            self.0.launch(l)
        }
        fn gemm(&mut self, g: Gemm) -> Result<(), String> {
            self.0.gemm(g)
        }
        fn bad_flag(&mut self) -> Result<u64, String> {
            self.0.bad_flag()
        }
        fn mmv_max_blocks(&self) -> u64 {
            self.1
        }
    }

    #[test]
    fn the_device_caps_the_matrix_vector_grid() {
        let a = qten(TY_Q4_0, 0x1000, [2048, 8192, 1, 1]);
        let b = ten(TY_F32, 0x2000, [2048, 1, 1, 1], 4);
        let d = ten(TY_F32, 0x3000, [8192, 1, 1, 1], 4);
        // 8192 rows, 8 a block: 1024 blocks by default, the device's cap below that, and
        // never fewer than one block however it is set
        for (cap, blocks) in [(528, 528), (2048, 1024), (0, 1)] {
            let mut t = Capped(Recorder::default(), cap);
            node(&mm_node(), d, &[Some(a), Some(b)], &mut t).unwrap();
            assert_eq!(t.0.launches[0].grid, [blocks, 1, 1], "cap {cap}");
        }
    }

    #[test]
    fn fused_results_may_not_land_on_the_inputs_they_read() {
        // a 2048-float column at 0x10000 spans 8 KiB
        let col = ten(TY_F32, 0x10000, [2048, 1, 1, 1], 4);
        assert_eq!(span(&col), (0x10000, 0x12000));
        // a strided view: the last of 4 rows of 8 floats, 64 bytes apart, ends 3 * 64 + 32 in
        let rows = Ten {
            nb: [4, 64, 256, 256],
            ..ten(TY_F32, 0x100, [8, 4, 1, 1], 4)
        };
        assert_eq!(span(&rows), (0x100, 0x100 + 3 * 64 + 32));
        // quantized: 2 rows of 64 Q4_0 weights, 2 blocks of 18 bytes each
        assert_eq!(span(&qten(TY_Q4_0, 0, [64, 2, 1, 1])), (0, 72));
        // a result of 8192 floats placed where a freed input was, or just after it
        let on_it = ten(TY_F32, 0x11000, [8192, 1, 1, 1], 4);
        let after = ten(TY_F32, 0x12000, [8192, 1, 1, 1], 4);
        assert!(overlaps(&on_it, &col));
        assert!(!overlaps(&after, &col));
        // in place is allowed only as the very same tensor
        assert!(apart_or_same(&col, &col));
        assert!(apart_or_same(&after, &col));
        assert!(!apart_or_same(
            &Ten {
                data: 0x10004,
                ..col
            },
            &col
        ));
        // nothing overlaps an empty tensor
        assert!(!overlaps(&ten(TY_F32, 0x10000, [0, 1, 1, 1], 4), &col));
    }

    #[test]
    fn rows_that_are_not_16_byte_aligned_take_the_in_place_kernel() {
        let aligned = qten(TY_Q4_0, 0x1000, [2048, 64, 1, 1]);
        assert!(staged_rows(&aligned));
        for a in [
            // a view 2 bytes into the weights
            Ten {
                data: 0x1002,
                ..aligned
            },
            // a view of every other row: a 2,304-byte stride is fine, 1,170 is not
            Ten {
                nb: [18, 1170, 1170 * 64, 1170 * 64],
                ..aligned
            },
            // 96 weights: three 18-byte blocks, 54 bytes a row
            qten(TY_Q4_0, 0x1000, [96, 64, 1, 1]),
            // F16 is read in place with its own 16-byte loads
            ten(TY_F16, 0x1000, [2048, 64, 1, 1], 2),
        ] {
            assert!(!staged_rows(&a), "{a:?}");
            let l = mat_vec(a);
            assert_eq!(l.kernel, "hrx_mul_mat_vec");
            assert_eq!(l.args[5], Arg::I32(1));
        }
        // every staged type: Q4_1 rows of 2048 are 1,280 bytes, Q8_0 2,176, Q4_K 1,152,
        // Q6_K 1,680
        for ty in [TY_Q4_1, TY_Q8_0, TY_Q4_K, TY_Q6_K] {
            assert!(
                staged_rows(&qten(ty, 0x1000, [2048, 64, 1, 1])),
                "type {ty}"
            );
        }
        // Q8_0 of 32 weights (34 bytes) is not
        assert!(!staged_rows(&qten(TY_Q8_0, 0x1000, [32, 64, 1, 1])));
    }

    #[test]
    fn a_tall_matrix_caps_the_grid_and_its_warps_take_rows_grid_stride() {
        // an output projection: 128,256 rows of Q6_K, one token
        let l = mat_vec(qten(TY_Q6_K, 0x1000, [2048, 128256, 1, 1]));
        assert_eq!(l.kernel, "hrx_mul_mat_vec_q");
        assert_eq!(l.grid, [1024, 1, 1]);
        // an FFN down projection's 8,192-wide column still fits beside the staging buffers
        let l = mat_vec(qten(TY_Q4_0, 0x1000, [8192, 2048, 1, 1]));
        assert_eq!(l.grid, [256, 1, 1]);
        assert_eq!(l.shared, (8192 + 256 + 1) * 4);
        assert!(l.shared as usize + 8 * 1680 <= 48 << 10);
        assert_eq!(l.kernel, "hrx_mul_mat_vec_q");
        // an 8,960-wide column (Qwen2.5-1.5B's FFN) does not fit beside the staging buffers:
        // the kernel without them, still with the column in shared memory
        let l = mat_vec(qten(TY_Q4_0, 0x1000, [8960, 1536, 1, 1]));
        assert_eq!(l.kernel, "hrx_mul_mat_vec");
        assert_eq!(l.args[5], Arg::I32(1));
    }

    #[test]
    fn a_long_column_is_read_from_global_memory() {
        let a = ten(TY_F16, 0x1000, [16384, 64, 1, 1], 2);
        let b = ten(TY_F32, 0x2000, [16384, 1, 1, 1], 4);
        let d = ten(TY_F32, 0x3000, [64, 1, 1, 1], 4);
        let mut r = Recorder::default();
        node(&mm_node(), d, &[Some(a), Some(b)], &mut r).unwrap();
        assert_eq!(r.launches[0].shared, 0);
        assert_eq!(r.launches[0].args[5], Arg::I32(0));
    }

    #[test]
    fn a_batch_dequantizes_the_weights_and_calls_cublas_once() {
        let a = ten(TY_Q4_0, 0x1000, [2048, 8192, 1, 1], 18);
        let b = ten(TY_F32, 0x2000, [2048, 512, 1, 1], 4);
        let d = ten(TY_F32, 0x3000, [8192, 512, 1, 1], 4);
        let mut r = Recorder::default();
        node(&mm_node(), d, &[Some(a), Some(b)], &mut r).unwrap();
        assert_eq!(r.scratch, vec![2048 * 8192 * 4]);
        assert_eq!(r.launches[0].kernel, "hrx_to_f32");
        assert_eq!(
            r.gemms,
            vec![Gemm {
                m: 8192,
                n: 512,
                k: 2048,
                a: (0x1_0000_0000, 2048, 2048 * 8192),
                b: (0x2000, 2048, 2048 * 512),
                c: (0x3000, 8192, 8192 * 512),
                batch: 1,
            }]
        );
    }

    #[test]
    fn grouped_query_attention_broadcasts_src0_with_a_zero_stride() {
        // K: [128 head dim, 64 kv, 8 kv heads] F16 view; Q: [128, 16 tokens, 32 heads] F32
        let a = ten(TY_F16, 0x1000, [128, 64, 8, 1], 2);
        let b = ten(TY_F32, 0x2000, [128, 16, 32, 1], 4);
        let d = ten(TY_F32, 0x3000, [64, 16, 32, 1], 4);
        let mut r = Recorder::default();
        node(&mm_node(), d, &[Some(a), Some(b)], &mut r).unwrap();
        assert_eq!(r.gemms.len(), 8);
        let g = r.gemms[3];
        assert_eq!(g.batch, 4);
        assert_eq!(g.a, (0x1_0000_0000 + 4 * 3 * 128 * 64, 128, 0));
        assert_eq!(g.b, (0x2000 + 4 * 12 * 128 * 16, 128, 128 * 16));
        assert_eq!(g.c, (0x3000 + 4 * 12 * 64 * 16, 64, 64 * 16));
    }

    fn job_node(
        op: ggml_op,
        uses: Option<i32>,
        node_srcs: Vec<(usize, usize)>,
    ) -> crate::runtime::NodeJob {
        // SAFETY: plain data, zero is valid.
        let mut t: ggml_tensor = unsafe { std::mem::zeroed() };
        t.op = op;
        crate::runtime::NodeJob {
            tensors: vec![t],
            locs: vec![crate::runtime::Loc::Device(0)],
            sizes: vec![0],
            srcs: Vec::new(),
            node_srcs,
            use_count: uses,
        }
    }

    #[test]
    fn rms_norm_fuses_only_into_its_one_consumer_reading_it_as_source_0() {
        let job =
            |norm: crate::runtime::NodeJob, mul: crate::runtime::NodeJob| crate::runtime::ExecJob {
                nodes: vec![norm, mul],
                label: "test".into(),
                ..Default::default()
            };
        let norm = || job_node(GGML_OP_RMS_NORM, Some(1), vec![]);
        let mul = |srcs| job_node(GGML_OP_MUL, Some(1), srcs);
        assert!(norm_mul_pair(&job(norm(), mul(vec![(0, 0)])), 0));
        // used twice: its own bytes are needed
        assert!(!norm_mul_pair(
            &job(
                job_node(GGML_OP_RMS_NORM, Some(2), vec![]),
                mul(vec![(0, 0)])
            ),
            0
        ));
        // use counts unknown
        assert!(!norm_mul_pair(
            &job(job_node(GGML_OP_RMS_NORM, None, vec![]), mul(vec![(0, 0)])),
            0
        ));
        // a graph output
        let mut out = norm();
        out.tensors[0].flags |= GGML_TENSOR_FLAG_OUTPUT as i32;
        assert!(!norm_mul_pair(&job(out, mul(vec![(0, 0)])), 0));
        // the MUL reads it as source 1, or as both sources
        assert!(!norm_mul_pair(&job(norm(), mul(vec![(1, 0)])), 0));
        assert!(!norm_mul_pair(&job(norm(), mul(vec![(0, 0), (1, 0)])), 0));
        // not a MUL, or nothing after it
        assert!(!norm_mul_pair(
            &job(norm(), job_node(GGML_OP_ADD, Some(1), vec![(0, 0)])),
            0
        ));
        assert!(!norm_mul_pair(&job(norm(), mul(vec![(0, 0)])), 1));
        // shapes and types: the multiplier must broadcast over the norm
        let mut n = norm().tensors[0];
        n.type_ = GGML_TYPE_F32;
        n.ne = [2048, 4, 1, 1];
        let mut m = n;
        m.op = GGML_OP_MUL;
        let w = ten(TY_F32, 0, [2048, 1, 1, 1], 4);
        assert!(fuses_norm_mul(&n, &m, &w));
        // ggml_can_repeat: 1024 repeats into 2048, 1536 does not
        assert!(fuses_norm_mul(&n, &m, &ten(TY_F32, 0, [1024, 1, 1, 1], 4)));
        assert!(!fuses_norm_mul(&n, &m, &ten(TY_F32, 0, [1536, 1, 1, 1], 4)));
        assert!(!fuses_norm_mul(&n, &m, &ten(TY_F16, 0, [2048, 1, 1, 1], 2)));
    }

    #[test]
    fn an_add_fuses_into_the_rms_norm_that_reads_it() {
        let job = |nodes: Vec<crate::runtime::NodeJob>| crate::runtime::ExecJob {
            nodes,
            label: "test".into(),
            ..Default::default()
        };
        // the residual stream's sum is used again later: two uses are fine, it is written
        let add = || job_node(GGML_OP_ADD, Some(2), vec![]);
        let norm = |srcs| job_node(GGML_OP_RMS_NORM, Some(1), srcs);
        assert!(add_norm_pair(&job(vec![add(), norm(vec![(0, 0)])]), 0));
        // not reading the sum, not an RMS_NORM, or nothing after it
        assert!(!add_norm_pair(&job(vec![add(), norm(vec![])]), 0));
        let plain = job_node(GGML_OP_NORM, Some(1), vec![(0, 0)]);
        assert!(!add_norm_pair(&job(vec![add(), plain]), 0));
        assert!(!add_norm_pair(&job(vec![add()]), 0));
        assert!(!add_norm_pair(
            &job(vec![
                job_node(GGML_OP_SUB, Some(1), vec![]),
                norm(vec![(0, 0)])
            ]),
            0
        ));

        // types and shapes: one 2048-wide F32 row
        let mut a = add().tensors[0];
        a.type_ = GGML_TYPE_F32;
        a.ne = [2048, 1, 1, 1];
        a.nb = [4, 4 * 2048, 4 * 2048, 4 * 2048];
        let mut n = a;
        n.op = GGML_OP_RMS_NORM;
        let x = ten(TY_F32, 0x1000, [2048, 1, 1, 1], 4);
        let y = ten(TY_F32, 0x9000, [2048, 1, 1, 1], 4);
        assert!(fuses_add_norm(&a, &n, &x, &y));
        // a broadcast source, an F16 one, a strided row, a row longer than the registers hold
        assert!(!fuses_add_norm(
            &a,
            &n,
            &x,
            &ten(TY_F32, 0x9000, [1, 1, 1, 1], 4)
        ));
        assert!(!fuses_add_norm(
            &a,
            &n,
            &x,
            &ten(TY_F16, 0x9000, [2048, 1, 1, 1], 2)
        ));
        assert!(!fuses_add_norm(
            &a,
            &n,
            &x,
            &Ten {
                nb: [8, 8 * 2048, 8 * 2048, 8 * 2048],
                ..y
            }
        ));
        let wide = |t: &ggml_tensor| {
            let mut w = *t;
            w.ne = [4096, 1, 1, 1];
            w
        };
        let (xw, yw) = (
            ten(TY_F32, 0x1000, [4096, 1, 1, 1], 4),
            ten(TY_F32, 0x9000, [4096, 1, 1, 1], 4),
        );
        assert!(!fuses_add_norm(&wide(&a), &wide(&n), &xw, &yw));

        // the launch: a block per row; the multiplier, when fused, passed with its flag
        n.op_params[0] = 1e-5f32.to_bits() as i32;
        let mut r = Recorder::default();
        let m = ten(TY_F32, 0x5000, [2048, 1, 1, 1], 4);
        add_norm(&n, x, x, y, y, Some(m), &mut r).unwrap();
        add_norm(&n, x, x, y, y, None, &mut r).unwrap();
        let (with, without) = (&r.launches[0], &r.launches[1]);
        assert_eq!((with.kernel, with.grid), ("hrx_add_norm", [1, 1, 1]));
        assert_eq!(with.args[4], Arg::F32(1e-5));
        assert_eq!((&with.args[5], &with.args[6]), (&Arg::Ten(m), &Arg::I32(1)));
        assert_eq!(without.args[6], Arg::I32(0));
    }

    #[test]
    fn two_products_and_their_glu_fuse_only_when_the_glu_is_their_one_use() {
        let job = |nodes: Vec<crate::runtime::NodeJob>| crate::runtime::ExecJob {
            nodes,
            label: "test".into(),
            ..Default::default()
        };
        let mm = |uses| job_node(GGML_OP_MUL_MAT, uses, vec![]);
        let glu = |srcs| job_node(GGML_OP_GLU, Some(1), srcs);
        // llama.cpp's feed-forward: up (0), gate (1), SWIGLU(gate, up)
        assert!(mmv_glu_triple(
            &job(vec![mm(Some(1)), mm(Some(1)), glu(vec![(0, 1), (1, 0)])]),
            0
        ));
        // the other order of the products
        assert!(mmv_glu_triple(
            &job(vec![mm(Some(1)), mm(Some(1)), glu(vec![(0, 0), (1, 1)])]),
            0
        ));
        // a node before them: the triple starts at 1, not 0
        let three = |first| {
            job(vec![
                first,
                mm(Some(1)),
                mm(Some(1)),
                glu(vec![(0, 1), (1, 2)]),
            ])
        };
        assert!(mmv_glu_triple(
            &three(job_node(GGML_OP_RMS_NORM, Some(2), vec![])),
            1
        ));
        assert!(!mmv_glu_triple(
            &three(job_node(GGML_OP_RMS_NORM, Some(2), vec![])),
            0
        ));
        // a product used twice, or uses unknown: its own bytes may be needed
        for uses in [Some(2), None] {
            assert!(!mmv_glu_triple(
                &job(vec![mm(uses), mm(Some(1)), glu(vec![(0, 1), (1, 0)])]),
                0
            ));
            assert!(!mmv_glu_triple(
                &job(vec![mm(Some(1)), mm(uses), glu(vec![(0, 1), (1, 0)])]),
                0
            ));
        }
        // a product that is a graph output
        let mut out = mm(Some(1));
        out.tensors[0].flags |= GGML_TENSOR_FLAG_OUTPUT as i32;
        assert!(!mmv_glu_triple(
            &job(vec![out, mm(Some(1)), glu(vec![(0, 1), (1, 0)])]),
            0
        ));
        // the second product reads the first
        let chained = job_node(GGML_OP_MUL_MAT, Some(1), vec![(1, 0)]);
        assert!(!mmv_glu_triple(
            &job(vec![mm(Some(1)), chained, glu(vec![(0, 1), (1, 0)])]),
            0
        ));
        // the GLU reads only one of them (its fused form), or is not a GLU
        assert!(!mmv_glu_triple(
            &job(vec![mm(Some(1)), mm(Some(1)), glu(vec![(0, 1)])]),
            0
        ));
        let add = job_node(GGML_OP_ADD, Some(1), vec![(0, 1), (1, 0)]);
        assert!(!mmv_glu_triple(
            &job(vec![mm(Some(1)), mm(Some(1)), add]),
            0
        ));
        // too few nodes
        assert!(!mmv_glu_triple(&job(vec![mm(Some(1)), mm(Some(1))]), 0));

        // types and shapes: 8192 rows of 2048 Q4_0 weights, one F32 column, F32 result
        let w0 = qten(TY_Q4_0, 0x1000, [2048, 8192, 1, 1]);
        let w1 = qten(TY_Q4_0, 0x100_0000, [2048, 8192, 1, 1]);
        let c = ten(TY_F32, 0x2000, [2048, 1, 1, 1], 4);
        let mut g = glu(vec![]).tensors[0];
        g.type_ = GGML_TYPE_F32;
        g.ne = [8192, 1, 1, 1];
        g.nb = [4, 4 * 8192, 4 * 8192, 4 * 8192];
        assert!(fuses_mmv_glu(&g, &w0, &w1, &c, &c));
        // two columns that are not the same tensor
        assert!(!fuses_mmv_glu(&g, &w0, &w1, &c, &Ten { data: 0x9000, ..c }));
        // weights of two types, or rows the staged kernel cannot stream
        assert!(!fuses_mmv_glu(
            &g,
            &w0,
            &qten(TY_Q8_0, 0x100_0000, [2048, 8192, 1, 1]),
            &c,
            &c
        ));
        assert!(!fuses_mmv_glu(&g, &Ten { data: 0x1002, ..w0 }, &w1, &c, &c));
        // F16 weights keep the three kernels
        let h = ten(TY_F16, 0x1000, [2048, 8192, 1, 1], 2);
        assert!(!fuses_mmv_glu(&g, &h, &h, &c, &c));
        // a result of two columns, or not F32
        let mut two = g;
        two.ne = [8192, 2, 1, 1];
        assert!(!fuses_mmv_glu(&two, &w0, &w1, &c, &c));
        let mut half = g;
        half.type_ = GGML_TYPE_F16;
        assert!(!fuses_mmv_glu(&half, &w0, &w1, &c, &c));

        // the launch: the matrix-vector grid, the column in shared memory, the GLU's op
        // and its swapped flag passed on
        g.op_params[0] = GGML_GLU_OP_SWIGLU as i32;
        g.op_params[1] = 1;
        let d = ten(TY_F32, 0x3000, [8192, 1, 1, 1], 4);
        let mut r = Recorder::default();
        mmv_glu(&g, d, w0, w1, c, &mut r).unwrap();
        let l = &r.launches[0];
        assert_eq!(l.kernel, "hrx_mul_mat_vec_q_glu");
        assert_eq!(
            (l.grid, l.block, l.shared),
            ([1024, 1, 1], [256, 1, 1], (2048 + 64 + 1) * 4)
        );
        assert_eq!(l.args[4], Arg::I32(GGML_GLU_OP_SWIGLU as i32));
        assert_eq!(l.args[5], Arg::I32(1));
    }

    /// Every `extern "C"` kernel of kernels.cu with its parameter kinds, parsed from the text.
    fn signatures() -> Vec<(String, Vec<&'static str>)> {
        let src = super::super::KERNEL_SOURCE;
        let mut out = Vec::new();
        let mut rest = src;
        while let Some(i) = rest.find("extern \"C\" __global__ void ") {
            let mut after = &rest[i + "extern \"C\" __global__ void ".len()..];
            if let Some(b) = after.strip_prefix("__launch_bounds__(") {
                after = &b[b.find(')').unwrap() + 1..];
            }
            let open = after.find('(').unwrap();
            let close = after.find(')').unwrap();
            let name = after[..open].trim().to_string();
            let kinds = after[open + 1..close]
                .split(',')
                .map(|p| match p.split_whitespace().next().unwrap() {
                    _ if p.contains('*') => "Ptr",
                    "Ten" => "Ten",
                    "int" => "I32",
                    "i64" => "I64",
                    "float" => "F32",
                    "u32" => "U32",
                    other => panic!("kernel {name}: parameter type {other} has no Arg"),
                })
                .collect();
            out.push((name, kinds));
            rest = &after[close..];
        }
        out
    }

    fn kind(a: &Arg) -> &'static str {
        match a {
            Arg::Ten(_) => "Ten",
            Arg::I32(_) => "I32",
            Arg::I64(_) => "I64",
            Arg::U32(_) => "U32",
            Arg::F32(_) => "F32",
            Arg::Ptr(_) => "Ptr",
        }
    }

    /// What a GPU cannot be asked here: that every launch the dispatcher builds passes its
    /// kernel exactly the parameters the kernel declares, in order (a mismatch would read
    /// garbage on the device), for one node of every op, and that the runtime loads every
    /// kernel the source defines.
    #[test]
    fn every_launch_matches_its_kernels_signature() {
        let sigs = signatures();
        let mut names: Vec<&str> = sigs.iter().map(|(n, _)| n.as_str()).collect();
        names.sort();
        let mut loaded = super::super::gpu::KERNELS.to_vec();
        loaded.sort();
        assert_eq!(names, loaded, "kernels.cu against gpu::KERNELS");

        let f32t = |ne: [i64; 4]| ten(TY_F32, 0x1000, ne, 4);
        let node_of = |op: ggml_op, params: &[(usize, i32)]| {
            // SAFETY: plain data, zero is valid.
            let mut n: ggml_tensor = unsafe { std::mem::zeroed() };
            n.op = op;
            for &(i, v) in params {
                n.op_params[i] = v;
            }
            n
        };
        let x = f32t([64, 4, 2, 1]);
        let idx = ten(TY_I32, 0x2000, [4, 2, 1, 1], 4);
        let q = ten(TY_Q8_0, 0x3000, [64, 8, 2, 1], 34);
        let cases: Vec<(ggml_tensor, Ten, Vec<Option<Ten>>)> = vec![
            (
                node_of(GGML_OP_ADD, &[]),
                x,
                vec![Some(x), Some(f32t([64, 1, 1, 1]))],
            ),
            (
                node_of(GGML_OP_UNARY, &[(0, GGML_UNARY_OP_SILU as i32)]),
                x,
                vec![Some(x)],
            ),
            (
                node_of(GGML_OP_SCALE, &[(0, 2f32.to_bits() as i32)]),
                x,
                vec![Some(x)],
            ),
            (node_of(GGML_OP_FILL, &[]), x, vec![]),
            (
                node_of(GGML_OP_GLU, &[(0, GGML_GLU_OP_SWIGLU as i32)]),
                x,
                vec![Some(f32t([128, 4, 2, 1]))],
            ),
            (
                node_of(GGML_OP_GLU, &[(0, GGML_GLU_OP_GEGLU as i32), (1, 1)]),
                x,
                vec![Some(x), Some(x)],
            ),
            (node_of(GGML_OP_RMS_NORM, &[]), x, vec![Some(x)]),
            (node_of(GGML_OP_NORM, &[]), x, vec![Some(x)]),
            (
                node_of(GGML_OP_SOFT_MAX, &[]),
                x,
                vec![Some(x), Some(f32t([64, 4, 1, 1]))],
            ),
            (
                node_of(GGML_OP_ROPE, &[(1, 64), (2, 2), (4, 4096)]),
                x,
                vec![Some(x), Some(idx)],
            ),
            (
                node_of(GGML_OP_FLASH_ATTN_EXT, &[]),
                f32t([64, 4, 2, 1]),
                vec![
                    Some(f32t([64, 2, 4, 1])),
                    Some(ten(TY_F16, 0x5000, [64, 32, 2, 1], 2)),
                    Some(ten(TY_F16, 0x6000, [64, 32, 2, 1], 2)),
                    Some(ten(TY_F16, 0x7000, [32, 64, 1, 1], 2)),
                ],
            ),
            (node_of(GGML_OP_GET_ROWS, &[]), x, vec![Some(q), Some(idx)]),
            (node_of(GGML_OP_CPY, &[]), x, vec![Some(x), Some(x)]),
            (
                node_of(GGML_OP_CPY, &[]),
                q,
                vec![Some(f32t([64, 8, 2, 1])), Some(q)],
            ),
            (
                node_of(GGML_OP_SET_ROWS, &[]),
                f32t([64, 16, 2, 1]),
                vec![Some(x), Some(idx)],
            ),
            (node_of(GGML_OP_SET_ROWS, &[]), q, vec![Some(x), Some(idx)]),
            (
                node_of(GGML_OP_MUL_MAT, &[]),
                f32t([8, 1, 2, 1]),
                vec![Some(q), Some(f32t([64, 1, 2, 1]))],
            ),
            (
                node_of(GGML_OP_MUL_MAT, &[]),
                f32t([8, 1, 2, 1]),
                vec![
                    Some(qten(TY_Q4_0, 0x4000, [256, 8, 2, 1])),
                    Some(f32t([256, 1, 2, 1])),
                ],
            ),
            (
                node_of(GGML_OP_MUL_MAT, &[]),
                f32t([8, 64, 2, 1]),
                vec![Some(q), Some(f32t([64, 64, 2, 1]))],
            ),
        ];
        let mut r = Recorder::default();
        for (n, d, srcs) in &cases {
            node(n, *d, srcs, &mut r).unwrap_or_else(|e| panic!("op {}: {e}", n.op));
        }
        // and the fused ADD+RMS_NORM
        add_norm(&node_of(GGML_OP_RMS_NORM, &[]), x, x, x, x, None, &mut r).unwrap();
        // and the fused products with their GLU
        let mut glu = node_of(GGML_OP_GLU, &[(0, GGML_GLU_OP_SWIGLU as i32)]);
        glu.type_ = GGML_TYPE_F32;
        let w = qten(TY_Q4_0, 0x4000, [256, 8, 1, 1]);
        mmv_glu(&glu, f32t([8, 1, 1, 1]), w, w, f32t([256, 1, 1, 1]), &mut r).unwrap();
        // and the fused RMS_NORM+MUL
        norm_mul(
            &node_of(GGML_OP_RMS_NORM, &[]),
            x,
            x,
            f32t([64, 1, 1, 1]),
            &mut r,
        )
        .unwrap();
        let mut used: Vec<&str> = Vec::new();
        for l in &r.launches {
            let (_, want) = sigs
                .iter()
                .find(|(n, _)| n == l.kernel)
                .unwrap_or_else(|| panic!("{} is not a kernel of kernels.cu", l.kernel));
            let got: Vec<&str> = l.args.iter().map(kind).collect();
            assert_eq!(&got, want, "arguments of {}", l.kernel);
            assert!(
                l.grid.iter().all(|&g| g >= 1) && l.block[0] >= 32,
                "{}: {:?} {:?}",
                l.kernel,
                l.grid,
                l.block
            );
            used.push(l.kernel);
        }
        used.sort();
        used.dedup();
        assert_eq!(used, names, "every kernel launched by some case");
        assert_eq!(r.gemms.len(), 1);
    }

    #[test]
    fn rope_and_soft_max_parameters_follow_ggml() {
        // 128 ln(8192 / (32 * 2 pi)) / (2 ln 500000) = 18.08 -> floor 18;
        // 128 ln(8192 / (1 * 2 pi)) / (2 ln 500000) = 34.98 -> ceil 35
        let c = rope_corr_dims(128, 8192, 500000.0, 32.0, 1.0);
        assert_eq!(c, [18.0, 35.0]);
        // clamped to [0, n_dims - 1]
        assert_eq!(
            rope_corr_dims(8, 8192, 10000.0, 10000.0, 0.0001),
            [0.0, 7.0]
        );
        // SAFETY: plain data.
        let mut sm: ggml_tensor = unsafe { std::mem::zeroed() };
        sm.op = GGML_OP_SOFT_MAX;
        sm.op_params[0] = 0.125f32.to_bits() as i32;
        sm.op_params[1] = 8.0f32.to_bits() as i32;
        let a = ten(TY_F32, 0x1000, [64, 16, 12, 1], 4);
        let mut r = Recorder::default();
        node(&sm, a, &[Some(a)], &mut r).unwrap();
        let l = &r.launches[0];
        assert_eq!(l.grid, [16 * 12, 1, 1]);
        // 12 heads: n_head_log2 8, m0 = 2^-(8/8), m1 = 2^-(4/8)
        assert_eq!(l.args[8], Arg::F32(0.5));
        assert_eq!(l.args[9], Arg::F32(2f32.powf(-0.5)));
        assert_eq!(l.args[10], Arg::U32(8));
        assert_eq!(l.args[4], Arg::I32(0));
    }

    #[test]
    fn flash_attn_grid_and_parameters_follow_ggml() {
        // SAFETY: plain data.
        let mut fa: ggml_tensor = unsafe { std::mem::zeroed() };
        fa.op = GGML_OP_FLASH_ATTN_EXT;
        fa.op_params[0] = 0.125f32.to_bits() as i32; // scale
        fa.op_params[1] = 8.0f32.to_bits() as i32; // max_bias
        fa.op_params[2] = 50.0f32.to_bits() as i32; // logit soft cap
        let q = ten(TY_F32, 0x1000, [128, 7, 12, 3], 4);
        let k = ten(TY_F16, 0x2000, [128, 640, 4, 3], 2);
        let v = ten(TY_F16, 0x3000, [128, 640, 4, 3], 2);
        let d = ten(TY_F32, 0x4000, [128, 12, 7, 3], 4);
        let mut r = Recorder::default();
        node(&fa, d, &[Some(q), Some(k), Some(v)], &mut r).unwrap();
        let l = &r.launches[0];
        // one block per query, head and sequence
        assert_eq!(l.grid, [7, 12, 3]);
        assert_eq!(l.block, [FA_THREADS, 1, 1]);
        // no mask, no sinks
        assert_eq!((l.args[6], l.args[7]), (Arg::I32(0), Arg::I32(0)));
        // the scale divided by the cap, the cap itself, ALiBi's bases for 12 heads
        assert_eq!(l.args[8], Arg::F32(0.125 / 50.0));
        assert_eq!(l.args[9], Arg::F32(50.0));
        assert_eq!(l.args[10], Arg::F32(8.0));
        assert_eq!(l.args[11], Arg::F32(0.5));
        assert_eq!(l.args[12], Arg::F32(2f32.powf(-0.5)));
        assert_eq!(l.args[13], Arg::U32(8));
        // without a cap the scale goes as it is
        fa.op_params[2] = 0;
        let mut r = Recorder::default();
        node(&fa, d, &[Some(q), Some(k), Some(v)], &mut r).unwrap();
        assert_eq!(r.launches[0].args[8], Arg::F32(0.125));
        assert_eq!(r.launches[0].args[9], Arg::F32(0.0));
    }
}
