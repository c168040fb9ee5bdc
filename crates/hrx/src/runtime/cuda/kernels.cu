// HRX device kernels, compiled at run time (NVRTC; the text avoids CUDA-only headers and
// uses the HRX_* portability macros below so that hiprtc can compile it as well).
//
// Every kernel takes its tensors as `Ten` values: a device pointer, ggml's four extents
// (ne, elements) and four strides (nb, bytes), and a type code (HRX_TY_*). Element
// (i0, i1, i2, i3) of a tensor lives at d + i0*nb[0] + i1*nb[1] + i2*nb[2] + i3*nb[3], as
// in ggml, so views, permutations and broadcasts need no copies. The constants below are
// mirrored in `kargs.rs`; a unit test compares the two.

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef signed char i8;

#define HRX_TY_F32 0
#define HRX_TY_F16 1
#define HRX_TY_BF16 2
#define HRX_TY_I32 3
#define HRX_TY_I64 4
#define HRX_TY_Q4_0 5
#define HRX_TY_Q4_1 6
#define HRX_TY_Q8_0 7
#define HRX_TY_Q4_K 8
#define HRX_TY_Q6_K 9

#define HRX_BIN_ADD 0
#define HRX_BIN_SUB 1
#define HRX_BIN_MUL 2
#define HRX_BIN_DIV 3

// unary codes are ggml_unary_op's values; SCALE is ours
#define HRX_UN_ABS 0
#define HRX_UN_SGN 1
#define HRX_UN_NEG 2
#define HRX_UN_STEP 3
#define HRX_UN_TANH 4
#define HRX_UN_ELU 5
#define HRX_UN_RELU 6
#define HRX_UN_SIGMOID 7
#define HRX_UN_GELU 8
#define HRX_UN_GELU_QUICK 9
#define HRX_UN_SILU 10
#define HRX_UN_HARDSWISH 11
#define HRX_UN_HARDSIGMOID 12
#define HRX_UN_EXP 13
#define HRX_UN_GELU_ERF 16
#define HRX_UN_FLOOR 18
#define HRX_UN_CEIL 19
#define HRX_UN_ROUND 20
#define HRX_UN_TRUNC 21
#define HRX_UN_SCALE 100

// glu codes are ggml_glu_op's values
#define HRX_GLU_REGLU 0
#define HRX_GLU_GEGLU 1
#define HRX_GLU_SWIGLU 2
#define HRX_GLU_GEGLU_ERF 4
#define HRX_GLU_GEGLU_QUICK 5

// what a kernel writes to its `bad` flag (host-mapped memory the runtime reads after a
// synchronization) when an index is out of range; ggml's CPU code asserts instead
#define HRX_BAD_GET_ROWS 1
#define HRX_BAD_SET_ROWS 2

// rows of up to this many columns go through the matrix-vector kernel
#define HRX_MMV_WARPS 8
// bytes of the per-warp staging buffer of the matrix-vector kernel: the largest chunk of
// quantized blocks it streams through shared memory (8 Q6_K blocks, 105 16-byte words)
#define HRX_MMV_STAGE 1680

#if defined(__HIPCC_RTC__)
#define HRX_SHFL_XOR(v, m) __shfl_xor((v), (m))
#define HRX_WARP 64
// a wavefront's lanes run in lockstep; the barrier orders its shared-memory accesses
#define HRX_SYNCWARP() __builtin_amdgcn_wave_barrier()
#else
#define HRX_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define HRX_WARP 32
#define HRX_SYNCWARP() __syncwarp()
#endif

#define HRX_INF __int_as_float(0x7f800000)

struct Ten {
    char *d;
    i64 ne[4];
    i64 nb[4];
    int ty;
    int pad;
};

// ---- scalar conversions (bit exact, round to nearest even, as ggml's reference code) ----

#if !defined(__HIPCC_RTC__) && !defined(HRX_SOFT_HALF)
// the hardware conversions (exact, and round to nearest even): one instruction each
#define HRX_HW_HALF 1
#endif

__device__ __forceinline__ float h2f(u16 h) {
#if defined(HRX_HW_HALF)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    u32 s = (u32)(h >> 15) << 31;
    u32 e = (h >> 10) & 0x1f;
    u32 m = h & 0x3ff;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f); // m * 2^-24, exact
        return s ? -v : v;
    }
    if (e == 31) {
        return __uint_as_float(s | 0x7f800000u | (m << 13));
    }
    return __uint_as_float(s | ((e + 112) << 23) | (m << 13));
#endif
}

__device__ __forceinline__ u16 f2h(float f) {
#if defined(HRX_HW_HALF)
    u16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
#else
    u32 x = __float_as_uint(f);
    u32 sign = (x >> 16) & 0x8000u;
    u32 ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        return (u16)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    }
    if (ax >= 0x477ff000u) {
        return (u16)(sign | 0x7c00u);
    }
    if (ax < 0x38800000u) {
        // below the smallest normal half: scale to units of 2^-24 (exact) and round
        u32 r = (u32)rintf(__uint_as_float(ax) * 16777216.0f);
        return (u16)(sign | r);
    }
    u32 h = (((ax >> 23) - 112) << 10) | ((ax >> 13) & 0x3ffu);
    u32 rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) {
        h += 1;
    }
    return (u16)(sign | h);
#endif
}

__device__ __forceinline__ float bf2f(u16 b) { return __uint_as_float((u32)b << 16); }

__device__ __forceinline__ u16 f2bf(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (u16)((u >> 16) | 64u);
    }
    return (u16)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

__device__ __forceinline__ u16 rd16(const char *p) { return *(const u16 *)p; }

__device__ __forceinline__ float ldf(const char *p, int ty) {
    switch (ty) {
    case HRX_TY_F32: return *(const float *)p;
    case HRX_TY_F16: return h2f(rd16(p));
    case HRX_TY_BF16: return bf2f(rd16(p));
    case HRX_TY_I32: return (float)*(const int *)p;
    case HRX_TY_I64: return (float)*(const i64 *)p;
    default: return 0.0f;
    }
}

__device__ __forceinline__ void stf(char *p, int ty, float v) {
    switch (ty) {
    case HRX_TY_F32: *(float *)p = v; break;
    case HRX_TY_F16: *(u16 *)p = f2h(v); break;
    case HRX_TY_BF16: *(u16 *)p = f2bf(v); break;
    case HRX_TY_I32: *(int *)p = (int)v; break;
    default: break;
    }
}

__device__ __forceinline__ int elem_size(int ty) {
    switch (ty) {
    case HRX_TY_F32: case HRX_TY_I32: return 4;
    case HRX_TY_F16: case HRX_TY_BF16: return 2;
    case HRX_TY_I64: return 8;
    default: return 0;
    }
}

__device__ __forceinline__ i64 ldi(const char *p, int ty) {
    return ty == HRX_TY_I64 ? *(const i64 *)p : (i64)*(const int *)p;
}

// ---- quantized blocks: element e of a row that starts at `row` ----

__device__ __forceinline__ void scale_min_k4(int j, const u8 *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

__device__ __forceinline__ float deq(const char *row, int ty, i64 e) {
    switch (ty) {
    case HRX_TY_Q4_0: {
        const char *b = row + (e >> 5) * 18;
        int j = (int)(e & 31);
        const u8 *qs = (const u8 *)(b + 2);
        int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        return (float)(q - 8) * h2f(rd16(b));
    }
    case HRX_TY_Q4_1: {
        const char *b = row + (e >> 5) * 20;
        int j = (int)(e & 31);
        const u8 *qs = (const u8 *)(b + 4);
        int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        return (float)q * h2f(rd16(b)) + h2f(rd16(b + 2));
    }
    case HRX_TY_Q8_0: {
        const char *b = row + (e >> 5) * 34;
        return (float)((const i8 *)(b + 2))[e & 31] * h2f(rd16(b));
    }
    case HRX_TY_Q4_K: {
        const char *b = row + (e >> 8) * 144;
        int r = (int)(e & 255);
        int j = r >> 6, w = r & 63;
        const u8 *scales = (const u8 *)(b + 4);
        const u8 *qs = (const u8 *)(b + 16) + 32 * j;
        int is = 2 * j + (w >= 32 ? 1 : 0);
        int q = w < 32 ? (qs[w] & 0xF) : (qs[w - 32] >> 4);
        int sc, m;
        scale_min_k4(is, scales, &sc, &m);
        return h2f(rd16(b)) * (float)sc * (float)q - h2f(rd16(b + 2)) * (float)m;
    }
    case HRX_TY_Q6_K: {
        const char *b = row + (e >> 8) * 210;
        int r = (int)(e & 255);
        int h = r >> 7, k = (r & 127) >> 5, l = r & 31;
        const u8 *ql = (const u8 *)b + 64 * h;
        const u8 *qh = (const u8 *)(b + 128) + 32 * h;
        const i8 *sc = (const i8 *)(b + 192) + 8 * h;
        int qlv = ql[l + (k & 1) * 32];
        int lo = k < 2 ? (qlv & 0xF) : (qlv >> 4);
        int hi = (qh[l] >> (2 * k)) & 3;
        int q = (lo | (hi << 4)) - 32;
        return h2f(rd16(b + 208)) * (float)sc[(l >> 4) + 2 * k] * (float)q;
    }
    default:
        return ldf(row + e * elem_size(ty), ty);
    }
}

// ---- indexing ----

__device__ __forceinline__ void unravel(i64 i, const i64 *ne, i64 *c) {
    c[0] = i % ne[0];
    i /= ne[0];
    c[1] = i % ne[1];
    i /= ne[1];
    c[2] = i % ne[2];
    c[3] = i / ne[2];
}

__device__ __forceinline__ char *at(const Ten &t, i64 c0, i64 c1, i64 c2, i64 c3) {
    return t.d + c0 * t.nb[0] + c1 * t.nb[1] + c2 * t.nb[2] + c3 * t.nb[3];
}

__device__ __forceinline__ i64 gtid() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ i64 gstride() { return (i64)gridDim.x * blockDim.x; }

__device__ __forceinline__ float warp_sum(float v) {
    for (int m = HRX_WARP / 2; m > 0; m >>= 1) v += HRX_SHFL_XOR(v, m);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int m = HRX_WARP / 2; m > 0; m >>= 1) v = fmaxf(v, HRX_SHFL_XOR(v, m));
    return v;
}

// block-wide sum; every thread gets the result. `sh` holds one float per warp.
__device__ float block_sum(float v, float *sh) {
    int lane = threadIdx.x % HRX_WARP, w = threadIdx.x / HRX_WARP;
    int nw = (blockDim.x + HRX_WARP - 1) / HRX_WARP;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}

__device__ float block_max(float v, float *sh) {
    int lane = threadIdx.x % HRX_WARP, w = threadIdx.x / HRX_WARP;
    int nw = (blockDim.x + HRX_WARP - 1) / HRX_WARP;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -HRX_INF;
    return warp_max(v);
}

// ---- element-wise ----

__device__ __forceinline__ float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * x * (1.0f + 0.044715f * x * x)));
}
__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }
__device__ __forceinline__ float gelu_quick(float x) { return x * (1.0f / (1.0f + expf(-1.702f * x))); }
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__device__ float unary(int op, float x, float p0, float p1) {
    switch (op) {
    case HRX_UN_ABS: return fabsf(x);
    case HRX_UN_SGN: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
    case HRX_UN_NEG: return -x;
    case HRX_UN_STEP: return x > 0.0f ? 1.0f : 0.0f;
    case HRX_UN_TANH: return tanhf(x);
    case HRX_UN_ELU: return x > 0.0f ? x : expm1f(x);
    case HRX_UN_RELU: return x > 0.0f ? x : 0.0f;
    case HRX_UN_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case HRX_UN_GELU: return gelu_tanh(x);
    case HRX_UN_GELU_QUICK: return gelu_quick(x);
    case HRX_UN_SILU: return silu(x);
    case HRX_UN_HARDSWISH: return x * fminf(1.0f, fmaxf(0.0f, (x + 3.0f) / 6.0f));
    case HRX_UN_HARDSIGMOID: return fminf(1.0f, fmaxf(0.0f, (x + 3.0f) / 6.0f));
    case HRX_UN_EXP: return expf(x);
    case HRX_UN_GELU_ERF: return gelu_erf(x);
    case HRX_UN_FLOOR: return floorf(x);
    case HRX_UN_CEIL: return ceilf(x);
    case HRX_UN_ROUND: return roundf(x);
    case HRX_UN_TRUNC: return truncf(x);
    case HRX_UN_SCALE: return x * p0 + p1;
    default: return x;
    }
}

extern "C" __global__ void hrx_unary(Ten d, Ten a, int op, float p0, float p1, i64 n) {
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        unravel(i, d.ne, c);
        float x = ldf(at(a, c[0], c[1], c[2], c[3]), a.ty);
        stf(at(d, c[0], c[1], c[2], c[3]), d.ty, unary(op, x, p0, p1));
    }
}

extern "C" __global__ void hrx_fill(Ten d, float v, i64 n) {
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        unravel(i, d.ne, c);
        stf(at(d, c[0], c[1], c[2], c[3]), d.ty, v);
    }
}

// dst = a (op) b, b broadcast over a's shape (ggml_can_repeat)
extern "C" __global__ void hrx_binary(Ten d, Ten a, Ten b, int op, i64 n) {
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        unravel(i, d.ne, c);
        float x = ldf(at(a, c[0], c[1], c[2], c[3]), a.ty);
        float y = ldf(at(b, c[0] % b.ne[0], c[1] % b.ne[1], c[2] % b.ne[2], c[3] % b.ne[3]), b.ty);
        float r;
        switch (op) {
        case HRX_BIN_ADD: r = x + y; break;
        case HRX_BIN_SUB: r = x - y; break;
        case HRX_BIN_MUL: r = x * y; break;
        default: r = x / y; break;
        }
        stf(at(d, c[0], c[1], c[2], c[3]), d.ty, r);
    }
}

// gated linear units: dst = act(x) * g. With `has_b` x comes from a and g from b (or the
// other way round when swapped); without, a's row holds x in its first half, g in its second.
// The activation of a GLU op (HRX_GLU_*), applied to the half that is not the gate.
__device__ __forceinline__ float glu_act(int op, float x) {
    switch (op) {
    case HRX_GLU_REGLU: return x > 0.0f ? x : 0.0f;
    case HRX_GLU_GEGLU: return gelu_tanh(x);
    case HRX_GLU_SWIGLU: return silu(x);
    case HRX_GLU_GEGLU_ERF: return gelu_erf(x);
    default: return gelu_quick(x);
    }
}

extern "C" __global__ void hrx_glu(Ten d, Ten a, Ten b, int has_b, int op, int swapped, i64 n) {
    i64 nc = d.ne[0];
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        unravel(i, d.ne, c);
        float x, g;
        if (has_b) {
            float va = ldf(at(a, c[0], c[1], c[2], c[3]), a.ty);
            float vb = ldf(at(b, c[0], c[1], c[2], c[3]), b.ty);
            x = swapped ? vb : va;
            g = swapped ? va : vb;
        } else {
            x = ldf(at(a, c[0] + (swapped ? nc : 0), c[1], c[2], c[3]), a.ty);
            g = ldf(at(a, c[0] + (swapped ? 0 : nc), c[1], c[2], c[3]), a.ty);
        }
        stf(at(d, c[0], c[1], c[2], c[3]), d.ty, glu_act(op, x) * g);
    }
}

// element-for-element copy between tensors of equal element count, in each one's own
// logical order (ggml_cpy/ggml_dup/ggml_cont); equal types copy bits.
extern "C" __global__ void hrx_cpy(Ten d, Ten a, i64 n) {
    int same = a.ty == d.ty;
    int es = elem_size(a.ty);
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 ca[4], cd[4];
        unravel(i, a.ne, ca);
        unravel(i, d.ne, cd);
        const char *s = at(a, ca[0], ca[1], ca[2], ca[3]);
        char *t = at(d, cd[0], cd[1], cd[2], cd[3]);
        if (same) {
            for (int k = 0; k < es; k++) t[k] = s[k];
        } else {
            stf(t, d.ty, ldf(s, a.ty));
        }
    }
}

// one block of 32 values into a Q8_0 / Q4_0 / Q4_1 block at `out`
__device__ void quantize_block(const float *x, char *out, int ty) {
    if (ty == HRX_TY_Q8_0) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        float dd = amax / 127.0f;
        float id = dd != 0.0f ? 1.0f / dd : 0.0f;
        *(u16 *)out = f2h(dd);
        for (int j = 0; j < 32; j++) ((i8 *)(out + 2))[j] = (i8)roundf(x[j] * id);
    } else if (ty == HRX_TY_Q4_0) {
        float amax = 0.0f, mx = 0.0f;
        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                mx = x[j];
            }
        }
        float dd = mx / -8.0f;
        float id = dd != 0.0f ? 1.0f / dd : 0.0f;
        *(u16 *)out = f2h(dd);
        for (int j = 0; j < 16; j++) {
            int q0 = min(15, (int)(i8)(x[j] * id + 8.5f));
            int q1 = min(15, (int)(i8)(x[j + 16] * id + 8.5f));
            ((u8 *)(out + 2))[j] = (u8)(q0 | (q1 << 4));
        }
    } else {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < 32; j++) {
            mn = fminf(mn, x[j]);
            mx = fmaxf(mx, x[j]);
        }
        float dd = (mx - mn) / 15.0f;
        float id = dd != 0.0f ? 1.0f / dd : 0.0f;
        *(u16 *)out = f2h(dd);
        *(u16 *)(out + 2) = f2h(mn);
        for (int j = 0; j < 16; j++) {
            int q0 = min(15, (int)(i8)((x[j] - mn) * id + 0.5f));
            int q1 = min(15, (int)(i8)((x[j + 16] - mn) * id + 0.5f));
            ((u8 *)(out + 4))[j] = (u8)(q0 | (q1 << 4));
        }
    }
}

__device__ __forceinline__ int block_bytes(int ty) {
    return ty == HRX_TY_Q8_0 ? 34 : (ty == HRX_TY_Q4_0 ? 18 : 20);
}

// copy into a quantized tensor: block k of d (rows of d.ne[0] elements, d contiguous in
// its rows) takes elements 32k .. 32k+31 of a in a's logical order
extern "C" __global__ void hrx_cpy_q(Ten d, Ten a, i64 nblocks) {
    i64 bpr = d.ne[0] / 32;
    for (i64 k = gtid(); k < nblocks; k += gstride()) {
        float x[32];
        for (int j = 0; j < 32; j++) {
            i64 c[4];
            unravel(k * 32 + j, a.ne, c);
            x[j] = ldf(at(a, c[0], c[1], c[2], c[3]), a.ty);
        }
        // row (i1, i2, i3) of d, block k % bpr within it
        i64 r = k / bpr, i1 = r % d.ne[1], i2 = (r / d.ne[1]) % d.ne[2], i3 = r / (d.ne[1] * d.ne[2]);
        char *out = d.d + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3] + (k % bpr) * block_bytes(d.ty);
        quantize_block(x, out, d.ty);
    }
}

// rows of a (indexed by idx) into d: d[:, idx[i01, i02 % ne11, i03 % ne12], i02, i03] = a[:, i01, i02, i03]
extern "C" __global__ void hrx_set_rows(Ten d, Ten a, Ten idx, i64 n, int *bad) {
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        unravel(i, a.ne, c);
        i64 r = ldi(at(idx, c[1], c[2] % idx.ne[1], c[3] % idx.ne[2], 0), idx.ty);
        if (r < 0 || r >= d.ne[1]) { // out of range: written nowhere, and reported
            *bad = HRX_BAD_SET_ROWS;
            continue;
        }
        stf(at(d, c[0], r, c[2], c[3]), d.ty, ldf(at(a, c[0], c[1], c[2], c[3]), a.ty));
    }
}

// the same into a quantized d, a block of 32 columns per thread
extern "C" __global__ void hrx_set_rows_q(Ten d, Ten a, Ten idx, i64 nblocks, int *bad) {
    i64 bpr = a.ne[0] / 32;
    for (i64 k = gtid(); k < nblocks; k += gstride()) {
        i64 rr = k / bpr, b = k % bpr;
        i64 i1 = rr % a.ne[1], i2 = (rr / a.ne[1]) % a.ne[2], i3 = rr / (a.ne[1] * a.ne[2]);
        i64 r = ldi(at(idx, i1, i2 % idx.ne[1], i3 % idx.ne[2], 0), idx.ty);
        if (r < 0 || r >= d.ne[1]) {
            *bad = HRX_BAD_SET_ROWS;
            continue;
        }
        float x[32];
        for (int j = 0; j < 32; j++) x[j] = ldf(at(a, b * 32 + j, i1, i2, i3), a.ty);
        char *out = d.d + r * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3] + b * block_bytes(d.ty);
        quantize_block(x, out, d.ty);
    }
}

// d[i0, i10, i11, i12] = a[i0, idx[i10, i11, i12], i11, i12] (a may be quantized)
extern "C" __global__ void hrx_get_rows(Ten d, Ten a, Ten idx, i64 n, int *bad) {
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        unravel(i, d.ne, c);
        i64 r = ldi(at(idx, c[1], c[2], c[3], 0), idx.ty);
        if (r < 0 || r >= a.ne[1]) { // out of range: zeros, not another allocation's bytes
            *bad = HRX_BAD_GET_ROWS;
            stf(at(d, c[0], c[1], c[2], c[3]), d.ty, 0.0f);
            continue;
        }
        const char *row = a.d + r * a.nb[1] + c[2] * a.nb[2] + c[3] * a.nb[3];
        stf(at(d, c[0], c[1], c[2], c[3]), d.ty, deq(row, a.ty, c[0]));
    }
}

// any tensor (quantized included) into a contiguous F32 tensor of the same shape
extern "C" __global__ void hrx_to_f32(Ten d, Ten a, i64 n) {
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        unravel(i, a.ne, c);
        const char *row = a.d + c[1] * a.nb[1] + c[2] * a.nb[2] + c[3] * a.nb[3];
        ((float *)d.d)[i] = deq(row, a.ty, c[0]);
    }
}

// ---- rows: one block per row of a ----

__device__ __forceinline__ void row_coords(const Ten &t, i64 r, i64 *c) {
    c[1] = r % t.ne[1];
    c[2] = (r / t.ne[1]) % t.ne[2];
    c[3] = r / (t.ne[1] * t.ne[2]);
}

// RMS_NORM (rms != 0): x / sqrt(mean(x^2) + eps); NORM: (x - mean) / sqrt(var + eps).
// With has_m the result is multiplied by m (broadcast over it): a fused RMS_NORM+MUL.
// Elements a thread keeps in registers between the passes of a row kernel (hrx_norm): a
// packed F32 row of up to HRX_ROW_CACHE * blockDim.x elements is read once, every load in
// flight before the first is used. A loop that loads an element and uses it before loading
// the next waits one memory round trip per element (8 for a 2048-wide row over 256 threads),
// and read the row three times: one 2048-wide norm took 11 us on the H200, 3 to 4 times an
// element-wise kernel.
#define HRX_ROW_CACHE 8

// The norm of a row held in registers, `v` (thread-strided: element threadIdx.x + k *
// blockDim.x, 0 past n) times `w` when `has_m`, written to the packed F32 row `t`: (x - mean)
// * rsqrt(var + eps) (* m), mean 0 and var the mean square for RMS_NORM; the same arithmetic,
// in the same order, as hrx_norm's general path.
__device__ __forceinline__ void norm_row_finish(float *t, const float (&v)[HRX_ROW_CACHE],
                                                const float (&w)[HRX_ROW_CACHE], i64 n, float eps, int rms,
                                                bool has_m, float *sh) {
    float mean = 0.0f;
    if (!rms) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < HRX_ROW_CACHE; k++) acc += v[k];
        mean = block_sum(acc, sh) / (float)n;
    }
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < HRX_ROW_CACHE; k++) {
        i64 i = threadIdx.x + (i64)k * blockDim.x;
        float x = v[k] - mean;
        if (i < n) acc += x * x;
    }
    float scale = rsqrtf(block_sum(acc, sh) / (float)n + eps);
#pragma unroll
    for (int k = 0; k < HRX_ROW_CACHE; k++) {
        i64 i = threadIdx.x + (i64)k * blockDim.x;
        float x = (v[k] - mean) * scale;
        if (has_m) x *= w[k];
        if (i < n) t[i] = x;
    }
}

// The multiplier of a fused RMS_NORM+MUL for the thread's elements of a row of n (1 without
// one), from the packed F32 row `mr` of mn elements broadcast over it.
__device__ __forceinline__ void norm_row_weights(float (&w)[HRX_ROW_CACHE], const float *mr, i64 mn, i64 n) {
#pragma unroll
    for (int k = 0; k < HRX_ROW_CACHE; k++) {
        i64 i = threadIdx.x + (i64)k * blockDim.x;
        w[k] = mr && i < n ? mr[mn == n ? i : i % mn] : 1.0f;
    }
}

// The norm of one packed F32 row `s` of n <= HRX_ROW_CACHE * blockDim.x elements (times the
// row `mr` when there is one) into `t`.
__device__ void norm_row_cached(float *t, const float *s, i64 n, float eps, int rms, const float *mr,
                                i64 mn, float *sh) {
    float v[HRX_ROW_CACHE], w[HRX_ROW_CACHE];
#pragma unroll
    for (int k = 0; k < HRX_ROW_CACHE; k++) {
        i64 i = threadIdx.x + (i64)k * blockDim.x;
        v[k] = i < n ? s[i] : 0.0f;
    }
    norm_row_weights(w, mr, mn, n);
    norm_row_finish(t, v, w, n, eps, rms, mr != 0, sh);
}

// ADD then RMS_NORM of the sum (then MUL by `m` when has_m), one block per row: s = x + y is
// written (the residual stream reads it again) and normalized from registers, so the sum is
// read back from neither memory nor a second launch. x, y, s, d: packed F32 rows of the
// same shape, n <= HRX_ROW_CACHE * blockDim.x; m as hrx_norm's. Bit for bit hrx_binary's sum
// and hrx_norm's result.
extern "C" __global__ void hrx_add_norm(Ten s, Ten x, Ten y, Ten d, float eps, Ten m, int has_m) {
    __shared__ float sh[32];
    i64 c[4];
    row_coords(x, blockIdx.x, c);
    const float *xr = (const float *)at(x, 0, c[1], c[2], c[3]);
    const float *yr = (const float *)at(y, 0, c[1], c[2], c[3]);
    const float *mr = has_m ? (const float *)at(m, 0, c[1] % m.ne[1], c[2] % m.ne[2], c[3] % m.ne[3]) : 0;
    i64 n = x.ne[0];
    float a[HRX_ROW_CACHE], b[HRX_ROW_CACHE], v[HRX_ROW_CACHE], w[HRX_ROW_CACHE];
#pragma unroll
    for (int k = 0; k < HRX_ROW_CACHE; k++) {
        i64 i = threadIdx.x + (i64)k * blockDim.x;
        a[k] = i < n ? xr[i] : 0.0f;
        b[k] = i < n ? yr[i] : 0.0f;
    }
    norm_row_weights(w, mr, has_m ? m.ne[0] : 1, n);
    float *sr = (float *)at(s, 0, c[1], c[2], c[3]);
#pragma unroll
    for (int k = 0; k < HRX_ROW_CACHE; k++) {
        i64 i = threadIdx.x + (i64)k * blockDim.x;
        v[k] = a[k] + b[k];
        if (i < n) sr[i] = v[k];
    }
    norm_row_finish((float *)at(d, 0, c[1], c[2], c[3]), v, w, n, eps, 1, has_m != 0, sh);
}

extern "C" __global__ void hrx_norm(Ten d, Ten a, float eps, int rms, Ten m, int has_m) {
    __shared__ float sh[32];
    i64 c[4];
    row_coords(a, blockIdx.x, c);
    const char *s = at(a, 0, c[1], c[2], c[3]);
    char *t = at(d, 0, c[1], c[2], c[3]);
    i64 n = a.ne[0];
    const char *mr = has_m ? at(m, 0, c[1] % m.ne[1], c[2] % m.ne[2], c[3] % m.ne[3]) : 0;
    bool packed_f32 = a.ty == HRX_TY_F32 && a.nb[0] == 4 && d.ty == HRX_TY_F32 && d.nb[0] == 4 &&
                      (!has_m || (m.ty == HRX_TY_F32 && m.nb[0] == 4));
    if (packed_f32 && n <= (i64)HRX_ROW_CACHE * blockDim.x) {
        norm_row_cached((float *)t, (const float *)s, n, eps, rms, (const float *)mr, has_m ? m.ne[0] : 1, sh);
        return;
    }
    float mean = 0.0f;
    if (!rms) {
        float acc = 0.0f;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) acc += ldf(s + i * a.nb[0], a.ty);
        mean = block_sum(acc, sh) / (float)n;
    }
    float acc = 0.0f;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        float v = ldf(s + i * a.nb[0], a.ty) - mean;
        acc += v * v;
    }
    float scale = rsqrtf(block_sum(acc, sh) / (float)n + eps);
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        float v = (ldf(s + i * a.nb[0], a.ty) - mean) * scale;
        if (has_m) v *= ldf(mr + (i % m.ne[0]) * m.nb[0], m.ty);
        stf(t + i * d.nb[0], d.ty, v);
    }
}

// soft_max(a * scale + slope * mask) along rows, with optional per-head sinks
extern "C" __global__ void hrx_soft_max(Ten d, Ten a, Ten m, Ten sk, int has_m, int has_sk, float scale,
                                        float max_bias, float m0, float m1, u32 n_head_log2) {
    __shared__ float sh[32];
    i64 c[4];
    row_coords(a, blockIdx.x, c);
    const char *s = at(a, 0, c[1], c[2], c[3]);
    char *t = at(d, 0, c[1], c[2], c[3]);
    const char *mp = has_m ? at(m, 0, c[1], c[2] % m.ne[2], c[3] % m.ne[3]) : 0;
    u32 h = (u32)c[2];
    float slope = 1.0f;
    if (max_bias > 0.0f) {
        slope = h < n_head_log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n_head_log2) + 1));
    }
    i64 n = a.ne[0];
    float mx = -HRX_INF;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        float v = ldf(s + i * a.nb[0], a.ty) * scale;
        if (has_m) v += slope * ldf(mp + i * m.nb[0], m.ty);
        mx = fmaxf(mx, v);
    }
    mx = block_max(mx, sh);
    float sink = 0.0f;
    if (has_sk) {
        sink = ldf(sk.d + c[2] * sk.nb[0], sk.ty);
        mx = fmaxf(mx, sink);
    }
    float sum = 0.0f;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        float v = ldf(s + i * a.nb[0], a.ty) * scale;
        if (has_m) v += slope * ldf(mp + i * m.nb[0], m.ty);
        float e = expf(v - mx);
        sum += e;
        stf(t + i * d.nb[0], d.ty, e);
    }
    sum = block_sum(sum, sh);
    if (has_sk) sum += expf(sink - mx);
    float inv = 1.0f / sum;
    __syncthreads();
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        char *p = t + i * d.nb[0];
        stf(p, d.ty, ldf(p, d.ty) * inv);
    }
}

// FLASH_ATTN_EXT: softmax(q.K^T * scale, soft-capped, + slope * mask, with a per-head sink)
// times V, for one query row of one head and sequence per block (grid: queries, heads,
// sequences; HRX_FA_THREADS threads, at least the head sizes of K and V, as the host checks).
// The keys go in chunks of blockDim.x: each thread scores one key of the chunk (its whole
// dot product with the query, held in shared memory), then each thread adds one output
// dimension over the chunk's keys; a running maximum and sum rescale what earlier chunks
// added (the online softmax), so any number of keys fits in fixed shared memory. A key whose
// mask is -inf is skipped, as ggml's CPU code does. `scale` is already divided by the soft
// cap when there is one. The result is ggml's: dst (e, head, query, sequence).
#define HRX_FA_THREADS 256
extern "C" __global__ void __launch_bounds__(HRX_FA_THREADS) hrx_flash_attn(
    Ten d, Ten q, Ten k, Ten v, Ten m, Ten sk, int has_m, int has_sk, float scale, float softcap,
    float max_bias, float m0, float m1, u32 n_head_log2) {
    __shared__ float qs[HRX_FA_THREADS];
    __shared__ float ps[HRX_FA_THREADS];
    __shared__ float red[32];
    const i64 iq1 = blockIdx.x, iq2 = blockIdx.y, iq3 = blockIdx.z;
    const i64 ik2 = iq2 / (q.ne[2] / k.ne[2]), ik3 = iq3 / (q.ne[3] / k.ne[3]);
    const i64 iv2 = iq2 / (q.ne[2] / v.ne[2]), iv3 = iq3 / (q.ne[3] / v.ne[3]);
    const i64 dk = q.ne[0], dv = v.ne[0], n_kv = k.ne[1];
    const int t = threadIdx.x, nt = blockDim.x;
    if (t < dk) qs[t] = ldf(at(q, t, iq1, iq2, iq3), q.ty);
    float slope = 1.0f;
    if (max_bias > 0.0f) {
        u32 h = (u32)iq2;
        slope = h < n_head_log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n_head_log2) + 1));
    }
    const char *mrow = has_m ? at(m, 0, iq1, iq2 % m.ne[2], iq3 % m.ne[3]) : 0;
    float mx = -HRX_INF, sum = 0.0f, acc = 0.0f;
    __syncthreads();
    for (i64 c0 = 0; c0 < n_kv; c0 += nt) {
        const i64 ic = c0 + t;
        float s = -HRX_INF;
        if (ic < n_kv) {
            const float mv = has_m ? slope * ldf(mrow + ic * m.nb[0], m.ty) : 0.0f;
            if (mv != -HRX_INF) {
                const char *kr = at(k, 0, ic, ik2, ik3);
                float dot = 0.0f;
                if (k.ty == HRX_TY_F16) {
                    // the usual cache type, its loads unrolled so that several are in flight
#pragma unroll 8
                    for (i64 j = 0; j < dk; j++) dot += qs[j] * h2f(rd16(kr + j * k.nb[0]));
                } else {
                    for (i64 j = 0; j < dk; j++) dot += qs[j] * ldf(kr + j * k.nb[0], k.ty);
                }
                dot *= scale;
                if (softcap != 0.0f) dot = softcap * tanhf(dot);
                s = dot + mv;
            }
        }
        const float nmx = fmaxf(mx, block_max(s, red));
        const float p = s == -HRX_INF ? 0.0f : expf(s - nmx);
        const float csum = block_sum(p, red);
        ps[t] = p;
        __syncthreads();
        // what the earlier chunks added, rescaled to the new maximum (nothing yet: 0)
        const float r = mx == -HRX_INF ? 0.0f : expf(mx - nmx);
        sum = sum * r + csum;
        if (t < dv) {
            float a = acc * r;
            const i64 nc = n_kv - c0 < nt ? n_kv - c0 : nt;
            // eight keys at a time, their loads issued before the sums; a key of weight 0
            // (masked, or its exponential underflowed) is not read: a masked key's V row may
            // hold anything, as ggml skips it
            i64 j = 0;
            for (; j + 8 <= nc; j += 8) {
                float vv[8];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    vv[u] = ps[j + u] != 0.0f ? ldf(at(v, t, c0 + j + u, iv2, iv3), v.ty) : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < 8; u++) a += ps[j + u] * vv[u];
            }
            for (; j < nc; j++) {
                const float pj = ps[j];
                if (pj != 0.0f) a += pj * ldf(at(v, t, c0 + j, iv2, iv3), v.ty);
            }
            acc = a;
        }
        mx = nmx;
        __syncthreads(); // ps is written again by the next chunk
    }
    if (has_sk) {
        const float sv = ldf(sk.d + iq2 * sk.nb[0], sk.ty);
        const float nmx = fmaxf(mx, sv);
        const float r = mx == -HRX_INF ? 0.0f : expf(mx - nmx);
        acc *= r;
        sum = sum * r + expf(sv - nmx);
    }
    if (t < dv) stf(at(d, t, iq2, iq1, iq3), d.ty, sum == 0.0f ? 0.0f : acc / sum);
}

// ---- rope (normal and neox), one thread per pair slot of a row ----

__device__ __forceinline__ float yarn_ramp(float low, float high, int i0) {
    float y = ((float)(i0 / 2) - low) / fmaxf(0.001f, high - low);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

extern "C" __global__ void hrx_rope(Ten d, Ten a, Ten pos, Ten ff, int has_ff, int n_dims, int neox, int n_offs,
                                    float freq_scale, float ext_factor, float attn_factor, float corr0, float corr1,
                                    float theta_scale, i64 n) {
    i64 half = a.ne[0] / 2;
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 sl = i % half, r = i / half;
        i64 c[4];
        row_coords(a, r, c);
        const char *s = at(a, 0, c[1], c[2], c[3]);
        char *t = at(d, 0, c[1], c[2], c[3]);
        i64 i0 = 2 * sl;
        if (i0 < n_offs || i0 >= n_offs + n_dims) {
            stf(t + i0 * d.nb[0], d.ty, ldf(s + i0 * a.nb[0], a.ty));
            stf(t + (i0 + 1) * d.nb[0], d.ty, ldf(s + (i0 + 1) * a.nb[0], a.ty));
            continue;
        }
        int p = (int)(sl - n_offs / 2);
        // theta advanced by repeated multiplication, as the CPU kernels build their cache
        float theta = (float)*(const int *)(pos.d + c[2] * pos.nb[0]);
        for (int k = 0; k < p; k++) theta *= theta_scale;
        if (has_ff) theta /= ldf(ff.d + p * ff.nb[0], ff.ty);
        float interp = freq_scale * theta;
        float th = interp;
        float msc = attn_factor;
        if (ext_factor != 0.0f) {
            float mix = yarn_ramp(corr0, corr1, 2 * p) * ext_factor;
            th = interp * (1.0f - mix) + theta * mix;
            msc *= 1.0f + 0.1f * logf(1.0f / freq_scale);
        }
        float cs = cosf(th) * msc, sn = sinf(th) * msc;
        i64 ia = neox ? n_offs + p : n_offs + 2 * p;
        i64 ib = neox ? ia + n_dims / 2 : ia + 1;
        float x0 = ldf(s + ia * a.nb[0], a.ty), x1 = ldf(s + ib * a.nb[0], a.ty);
        stf(t + ia * d.nb[0], d.ty, x0 * cs - x1 * sn);
        stf(t + ib * d.nb[0], d.ty, x0 * sn + x1 * cs);
    }
}

// ---- matrix-vector product: d[i01, i11, i12, i13] = dot(a row (i01, i12/r2, i13/r3), b column) ----
// one warp per output row, HRX_MMV_WARPS rows per block; grid (ceil(ne01 / HRX_MMV_WARPS), ne11,
// ne12 * ne13). The block first converts its column of b to F32 in shared memory when
// `shared_b` is set (the host sets it when the column fits), one padding float after every
// 32 (XS below): lanes that read the same offset of different 32-element blocks then hit
// different shared-memory banks instead of all the same one.

#define XS(x, e) ((x)[(e) + ((e) >> 5)])

// The block's column of b (k elements, type ty, nb0 bytes apart) into shared memory as F32
// (XS layout). A packed F32 column goes HRX_ROW_CACHE elements a thread at a time, all loaded
// before any is stored: one load and store after the other waits a memory round trip per
// element (8 for a 2048-element column over 256 threads, 32 for 8192) before the block can
// start on its rows.
__device__ __forceinline__ void column_to_shared(float *xs, const char *col, i64 k, i64 nb0, int ty) {
    if (ty == HRX_TY_F32 && nb0 == 4) {
        const float *c = (const float *)col;
        for (i64 j0 = 0; j0 < k; j0 += (i64)HRX_ROW_CACHE * blockDim.x) {
            float r[HRX_ROW_CACHE];
#pragma unroll
            for (int t = 0; t < HRX_ROW_CACHE; t++) {
                i64 j = j0 + (i64)t * blockDim.x + threadIdx.x;
                r[t] = j < k ? c[j] : 0.0f;
            }
#pragma unroll
            for (int t = 0; t < HRX_ROW_CACHE; t++) {
                i64 j = j0 + (i64)t * blockDim.x + threadIdx.x;
                if (j < k) XS(xs, j) = r[t];
            }
        }
        return;
    }
    for (i64 j = threadIdx.x; j < k; j += blockDim.x) XS(xs, j) = ldf(col + j * nb0, ty);
}

// Q4_0: four lanes per block, each taking four bytes of its 16 (two 16-bit loads: blocks are
// 18 bytes, so only 2-byte alignment holds), that is weights 4s..4s+3 and 16+4s..16+4s+3;
// a warp covers 8 consecutive blocks (144 bytes) per step.
__device__ __forceinline__ float dot_q4_0(const char *row, const float *x, i64 k, int lane) {
    float acc = 0.0f;
    int sub = lane & 3;
    i64 nb = k / 32;
#pragma unroll 2
    for (i64 g = lane >> 2; g < nb; g += HRX_WARP / 4) {
        const char *b = row + g * 18;
        u32 q = (u32)rd16(b + 2 + 4 * sub) | ((u32)rd16(b + 4 + 4 * sub) << 16);
        const float *xv = x + g * 33 + 4 * sub; // XS(x, g * 32 + 4 * sub)
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int byte = (q >> (8 * j)) & 0xFF;
            s += (float)((byte & 0xF) - 8) * xv[j] + (float)((byte >> 4) - 8) * xv[j + 16];
        }
        acc += s * h2f(rd16(b));
    }
    return acc;
}

// Q8_0: four lanes per block, eight weights each (four 16-bit loads).
__device__ __forceinline__ float dot_q8_0(const char *row, const float *x, i64 k, int lane) {
    float acc = 0.0f;
    int sub = lane & 3;
    for (i64 g = lane >> 2; g < k / 32; g += HRX_WARP / 4) {
        const char *b = row + g * 34;
        const char *qs = b + 2 + 8 * sub;
        const float *xv = x + g * 33 + 8 * sub;
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            u32 v = rd16(qs + 2 * j);
            s += (float)(i8)(v & 0xFF) * xv[2 * j] + (float)(i8)(v >> 8) * xv[2 * j + 1];
        }
        acc += s * h2f(rd16(b));
    }
    return acc;
}

// F16: eight halves per lane and step (one 16-byte load) when the row is 16-byte aligned,
// else one.
__device__ __forceinline__ float dot_f16(const char *row, const float *x, i64 k, int lane) {
    float acc = 0.0f;
    if ((((u64)row) & 15) == 0 && (k & 7) == 0) {
        const uint4 *r8 = (const uint4 *)row;
#pragma unroll 4
        for (i64 j = lane; j < k / 8; j += HRX_WARP) {
            uint4 v = r8[j];
            i64 e = 8 * j;
            const float *xv = x + e + (e >> 5); // eight in one 32-block: no padding inside
            acc += h2f((u16)(v.x & 0xffff)) * xv[0] + h2f((u16)(v.x >> 16)) * xv[1];
            acc += h2f((u16)(v.y & 0xffff)) * xv[2] + h2f((u16)(v.y >> 16)) * xv[3];
            acc += h2f((u16)(v.z & 0xffff)) * xv[4] + h2f((u16)(v.z >> 16)) * xv[5];
            acc += h2f((u16)(v.w & 0xffff)) * xv[6] + h2f((u16)(v.w >> 16)) * xv[7];
        }
    } else {
        for (i64 j = lane; j < k; j += HRX_WARP) acc += h2f(rd16(row + 2 * j)) * XS(x, j);
    }
    return acc;
}

// Q4_1: as Q4_0, four lanes per block; the 20-byte blocks keep the nibbles 4-byte aligned
// in the 16-byte aligned staging buffer, so each lane reads its four bytes at once.
__device__ __forceinline__ float dot_q4_1(const char *row, const float *x, i64 k, int lane) {
    float acc = 0.0f;
    int sub = lane & 3;
    i64 nb = k / 32;
#pragma unroll 2
    for (i64 g = lane >> 2; g < nb; g += HRX_WARP / 4) {
        const char *b = row + g * 20;
        u32 q = *(const u32 *)(b + 4 + 4 * sub);
        const float *xv = x + g * 33 + 4 * sub;
        float s = 0.0f, sx = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int byte = (q >> (8 * j)) & 0xFF;
            s += (float)(byte & 0xF) * xv[j] + (float)(byte >> 4) * xv[j + 16];
            sx += xv[j] + xv[j + 16];
        }
        acc += s * h2f(rd16(b)) + sx * h2f(rd16(b + 2));
    }
    return acc;
}

// Q4_K: 256 weights a block; lane l takes weights l, l + W, ... (W the warp width), so
// the warp reads consecutive bytes of the nibbles and of the column.
__device__ __forceinline__ float dot_q4_k(const char *row, const float *x, i64 k, int lane) {
    float acc = 0.0f;
    for (i64 g = 0; g < k / 256; g++) {
        const char *b = row + g * 144;
        const u8 *scales = (const u8 *)(b + 4);
        const u8 *qs = (const u8 *)(b + 16);
        float dd = h2f(rd16(b)), dm = h2f(rd16(b + 2));
        const float *xb = x + g * 264; // XS(x, g * 256)
#pragma unroll
        for (int t = 0; t < 256 / HRX_WARP; t++) {
            int r = t * HRX_WARP + lane;
            int j = r >> 6, w = r & 63;
            int q = w < 32 ? (qs[32 * j + w] & 0xF) : (qs[32 * j + w - 32] >> 4);
            int sc, m;
            scale_min_k4(2 * j + (w >> 5), scales, &sc, &m);
            acc += (dd * (float)sc * (float)q - dm * (float)m) * XS(xb, r);
        }
    }
    return acc;
}

// Q6_K: 256 weights a block, the same lane mapping as Q4_K.
__device__ __forceinline__ float dot_q6_k(const char *row, const float *x, i64 k, int lane) {
    float acc = 0.0f;
    for (i64 g = 0; g < k / 256; g++) {
        const u8 *b = (const u8 *)row + g * 210;
        const i8 *sc = (const i8 *)(b + 192);
        float dd = h2f(rd16((const char *)b + 208));
        const float *xb = x + g * 264;
        float s = 0.0f;
#pragma unroll
        for (int t = 0; t < 256 / HRX_WARP; t++) {
            int r = t * HRX_WARP + lane;
            int h = r >> 7, kk = (r & 127) >> 5, l = r & 31;
            int qlv = b[64 * h + l + (kk & 1) * 32];
            int lo = kk < 2 ? (qlv & 0xF) : (qlv >> 4);
            int hi = (b[128 + 32 * h + l] >> (2 * kk)) & 3;
            s += (float)sc[8 * h + (l >> 4) + 2 * kk] * (float)((lo | (hi << 4)) - 32) * XS(xb, r);
        }
        acc += dd * s;
    }
    return acc;
}

// The quantized types the staged path streams, by type code: weights per block, bytes per
// block, and blocks per chunk (a chunk is a multiple of 16 bytes and at most HRX_MMV_STAGE).
template <int TY> struct Staged;
template <> struct Staged<HRX_TY_Q4_0> { enum { QK = 32, BS = 18, PER = 64 }; };   // 1152 bytes
template <> struct Staged<HRX_TY_Q4_1> { enum { QK = 32, BS = 20, PER = 64 }; };   // 1280
template <> struct Staged<HRX_TY_Q8_0> { enum { QK = 32, BS = 34, PER = 32 }; };   // 1088
template <> struct Staged<HRX_TY_Q4_K> { enum { QK = 256, BS = 144, PER = 8 }; };  // 1152
template <> struct Staged<HRX_TY_Q6_K> { enum { QK = 256, BS = 210, PER = 8 }; };  // 1680

template <int TY>
__device__ __forceinline__ float dot_chunk(const char *cb, const float *x, i64 k, int lane) {
    switch (TY) {
    case HRX_TY_Q4_0: return dot_q4_0(cb, x, k, lane);
    case HRX_TY_Q4_1: return dot_q4_1(cb, x, k, lane);
    case HRX_TY_Q8_0: return dot_q8_0(cb, x, k, lane);
    case HRX_TY_Q4_K: return dot_q4_k(cb, x, k, lane);
    default: return dot_q6_k(cb, x, k, lane);
    }
}

// One row of quantized weights against the shared column: the warp streams the row through
// its staging buffer in chunks of whole blocks, with 16-byte coalesced loads (the blocks
// themselves are only 2-byte aligned), the next chunk's loads in flight while the current
// one is decoded. `row` and the row's length in bytes are multiples of 16.
template <int TY>
__device__ float dot_staged(const char *row, const float *xs, i64 k, uint4 *buf, int lane) {
    typedef Staged<TY> S;
    const int words_per_chunk = S::PER * S::BS / 16;
    const int loads = (words_per_chunk + HRX_WARP - 1) / HRX_WARP;
    i64 nb = k / S::QK;
    i64 chunks = (nb + S::PER - 1) / S::PER;
    const uint4 *src = (const uint4 *)row;
    uint4 r[loads];
    i64 words = (nb < S::PER ? nb : S::PER) * S::BS / 16;
#pragma unroll
    for (int t = 0; t < loads; t++) {
        int j = t * HRX_WARP + lane;
        if (j < words) r[t] = src[j];
    }
    float acc = 0.0f;
    for (i64 c = 0; c < chunks; c++) {
        i64 blocks = nb - c * S::PER < S::PER ? nb - c * S::PER : S::PER;
        HRX_SYNCWARP(); // every lane is done decoding the last chunk
#pragma unroll
        for (int t = 0; t < loads; t++) {
            int j = t * HRX_WARP + lane;
            if (j < words) buf[j] = r[t];
        }
        HRX_SYNCWARP();
        if (c + 1 < chunks) {
            i64 next = nb - (c + 1) * S::PER < S::PER ? nb - (c + 1) * S::PER : S::PER;
            words = next * S::BS / 16;
            const uint4 *s = src + (c + 1) * words_per_chunk;
#pragma unroll
            for (int t = 0; t < loads; t++) {
                int j = t * HRX_WARP + lane;
                if (j < words) r[t] = s[j];
            }
        }
        // XS(xs, c * PER * QK): the chunk's first weight, every 32 followed by a pad
        acc += dot_chunk<TY>((const char *)buf, xs + c * S::PER * S::QK / 32 * 33,
                             blocks * S::QK, lane);
    }
    return acc;
}

// Asks for the 128-byte line at `p` to be brought into L2, holding no register for it.
__device__ __forceinline__ void prefetch_l2(const void *p) {
#if defined(__HIPCC_RTC__)
    (void)p;
#else
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

// Asks for row i01 of `a` (`bytes` long) to be brought into L2, a 128-byte line a lane.
__device__ __forceinline__ void prefetch_row(Ten a, i64 i01, i64 i12, i64 i13, i64 bytes, int lane) {
    if (i01 >= a.ne[1]) return;
    const char *row = at(a, 0, i01, i12, i13);
    for (i64 off = (i64)lane * 128; off < bytes; off += (i64)HRX_WARP * 128) prefetch_l2(row + off);
}

// The block converts the column into shared memory, then each warp takes its rows. The warp's
// first row is asked into L2 before the conversion, and each next row before the current one
// is read, so that a row's loads wait on L2 rather than on memory: in a matrix of 2048 rows
// each warp has only the one row, and the two waits would otherwise come one after the other;
// in an output projection of 128k rows a warp goes through 16 of them, one after the other.
template <int TY>
__device__ void mmv_q_rows(Ten d, Ten a, Ten b, i64 r2, i64 r3, i64 i11, i64 i12, i64 i13,
                           const char *col, float *xs, uint4 *buf, int lane, int w) {
    typedef Staged<TY> S;
    const i64 bytes = a.ne[0] / S::QK * S::BS, stride = (i64)gridDim.x * HRX_MMV_WARPS;
    i64 first = (i64)blockIdx.x * HRX_MMV_WARPS + w;
    prefetch_row(a, first, i12 / r2, i13 / r3, bytes, lane);
    column_to_shared(xs, col, a.ne[0], b.nb[0], b.ty);
    __syncthreads();
    for (i64 i01 = first; i01 < a.ne[1]; i01 += stride) {
        prefetch_row(a, i01 + stride, i12 / r2, i13 / r3, bytes, lane);
        const char *row = at(a, 0, i01, i12 / r2, i13 / r3);
        float acc = warp_sum(dot_staged<TY>(row, xs, a.ne[0], buf, lane));
        if (lane == 0) stf(at(d, i01, i11, i12, i13), d.ty, acc);
    }
}

// Rows are taken grid-stride (the host caps the grid), so that a block that converted the
// column once uses it for many rows.
extern "C" __global__ void hrx_mul_mat_vec(Ten d, Ten a, Ten b, i64 r2, i64 r3, int shared_b) {
    extern __shared__ float xs[];
    int lane = threadIdx.x % HRX_WARP, w = threadIdx.x / HRX_WARP;
    i64 i11 = blockIdx.y;
    i64 i12 = blockIdx.z % b.ne[2], i13 = blockIdx.z / b.ne[2];
    const char *col = at(b, 0, i11, i12, i13);
    i64 k = a.ne[0];
    if (shared_b) {
        column_to_shared(xs, col, k, b.nb[0], b.ty);
        __syncthreads();
    }
    for (i64 i01 = (i64)blockIdx.x * HRX_MMV_WARPS + w; i01 < a.ne[1];
         i01 += (i64)gridDim.x * HRX_MMV_WARPS) {
        const char *row = at(a, 0, i01, i12 / r2, i13 / r3);
        float acc = 0.0f;
        if (shared_b && a.ty == HRX_TY_Q4_0) {
            acc = dot_q4_0(row, xs, k, lane);
        } else if (shared_b && a.ty == HRX_TY_Q8_0) {
            acc = dot_q8_0(row, xs, k, lane);
        } else if (shared_b && a.ty == HRX_TY_F16) {
            acc = dot_f16(row, xs, k, lane);
        } else if (a.ty == HRX_TY_F32 || a.ty == HRX_TY_F16 || a.ty == HRX_TY_BF16) {
            int es = elem_size(a.ty);
            for (i64 j = lane; j < k; j += HRX_WARP) {
                float x = shared_b ? XS(xs, j) : ldf(col + j * b.nb[0], b.ty);
                acc += ldf(row + j * es, a.ty) * x;
            }
        } else {
            // lanes take 32-element groups (one Q4_1 block, or an eighth of a K block)
            for (i64 g = lane; g < k / 32; g += HRX_WARP) {
                for (int j = 0; j < 32; j++) {
                    i64 e = g * 32 + j;
                    float x = shared_b ? XS(xs, e) : ldf(col + e * b.nb[0], b.ty);
                    acc += deq(row, a.ty, e) * x;
                }
            }
        }
        acc = warp_sum(acc);
        if (lane == 0) stf(at(d, i01, i11, i12, i13), d.ty, acc);
    }
}

// The matrix-vector product for quantized weights whose rows are 16-byte aligned (the host
// checks the data pointer, the strides and the row length; `dispatch::staged_rows`): each
// warp streams its rows through its staging buffer (`dot_staged`); the column is always in
// shared memory. The same grid as hrx_mul_mat_vec.
extern "C" __global__ void __launch_bounds__(HRX_MMV_WARPS * HRX_WARP, 4) hrx_mul_mat_vec_q(Ten d, Ten a, Ten b, i64 r2, i64 r3) {
    extern __shared__ float xs[];
    __shared__ uint4 stage[HRX_MMV_WARPS][HRX_MMV_STAGE / 16];
    int lane = threadIdx.x % HRX_WARP, w = threadIdx.x / HRX_WARP;
    i64 i11 = blockIdx.y;
    i64 i12 = blockIdx.z % b.ne[2], i13 = blockIdx.z / b.ne[2];
    const char *col = at(b, 0, i11, i12, i13);
    switch (a.ty) {
    case HRX_TY_Q4_0: mmv_q_rows<HRX_TY_Q4_0>(d, a, b, r2, r3, i11, i12, i13, col, xs, stage[w], lane, w); break;
    case HRX_TY_Q4_1: mmv_q_rows<HRX_TY_Q4_1>(d, a, b, r2, r3, i11, i12, i13, col, xs, stage[w], lane, w); break;
    case HRX_TY_Q8_0: mmv_q_rows<HRX_TY_Q8_0>(d, a, b, r2, r3, i11, i12, i13, col, xs, stage[w], lane, w); break;
    case HRX_TY_Q4_K: mmv_q_rows<HRX_TY_Q4_K>(d, a, b, r2, r3, i11, i12, i13, col, xs, stage[w], lane, w); break;
    case HRX_TY_Q6_K: mmv_q_rows<HRX_TY_Q6_K>(d, a, b, r2, r3, i11, i12, i13, col, xs, stage[w], lane, w); break;
    }
}

// Two matrix-vector products over the same column and a GLU of their results, as one kernel:
// d[r] = act(x) * g with (x, g) = (dot(w0 row r, b), dot(w1 row r, b)), swapped when
// `swapped` (a GLU's source 0 is w0's product, source 1 w1's). llama.cpp's feed-forward
// (up, gate, SWIGLU) then reads the column and converts it once, in one launch instead of
// three, and writes neither product. Each dot product is dot_staged's, rounded to F32, and the
// activation hrx_glu's: the same arithmetic, in the same order, as the three kernels.
// w0 and w1: the same quantized type and shape, rows as hrx_mul_mat_vec_q takes them; b one
// column; d packed F32 of w0's rows. The grid as hrx_mul_mat_vec_q's, with one column.
template <int TY>
__device__ void mmv_q_glu_rows(Ten d, Ten w0, Ten w1, Ten b, int op, int swapped, float *xs, uint4 *buf,
                               int lane, int w) {
    typedef Staged<TY> S;
    const i64 bytes = w0.ne[0] / S::QK * S::BS, stride = (i64)gridDim.x * HRX_MMV_WARPS;
    i64 first = (i64)blockIdx.x * HRX_MMV_WARPS + w;
    prefetch_row(w0, first, 0, 0, bytes, lane);
    prefetch_row(w1, first, 0, 0, bytes, lane);
    column_to_shared(xs, b.d, w0.ne[0], b.nb[0], b.ty);
    __syncthreads();
    for (i64 i01 = first; i01 < w0.ne[1]; i01 += stride) {
        prefetch_row(w0, i01 + stride, 0, 0, bytes, lane);
        prefetch_row(w1, i01 + stride, 0, 0, bytes, lane);
        float v0 = warp_sum(dot_staged<TY>(at(w0, 0, i01, 0, 0), xs, w0.ne[0], buf, lane));
        float v1 = warp_sum(dot_staged<TY>(at(w1, 0, i01, 0, 0), xs, w1.ne[0], buf, lane));
        if (lane == 0) {
            float x = swapped ? v1 : v0, g = swapped ? v0 : v1;
            ((float *)d.d)[i01] = glu_act(op, x) * g;
        }
    }
}

extern "C" __global__ void __launch_bounds__(HRX_MMV_WARPS * HRX_WARP, 4)
    hrx_mul_mat_vec_q_glu(Ten d, Ten w0, Ten w1, Ten b, int op, int swapped) {
    extern __shared__ float xs[];
    __shared__ uint4 stage[HRX_MMV_WARPS][HRX_MMV_STAGE / 16];
    int lane = threadIdx.x % HRX_WARP, w = threadIdx.x / HRX_WARP;
    switch (w0.ty) {
    case HRX_TY_Q4_0: mmv_q_glu_rows<HRX_TY_Q4_0>(d, w0, w1, b, op, swapped, xs, stage[w], lane, w); break;
    case HRX_TY_Q4_1: mmv_q_glu_rows<HRX_TY_Q4_1>(d, w0, w1, b, op, swapped, xs, stage[w], lane, w); break;
    case HRX_TY_Q8_0: mmv_q_glu_rows<HRX_TY_Q8_0>(d, w0, w1, b, op, swapped, xs, stage[w], lane, w); break;
    case HRX_TY_Q4_K: mmv_q_glu_rows<HRX_TY_Q4_K>(d, w0, w1, b, op, swapped, xs, stage[w], lane, w); break;
    case HRX_TY_Q6_K: mmv_q_glu_rows<HRX_TY_Q6_K>(d, w0, w1, b, op, swapped, xs, stage[w], lane, w); break;
    }
}
