// sched-bench: times the ggml backend scheduler (ggml_backend_sched_*) on large graphs.
//
// The program defines its fake devices with cabi-tests/common/fake_backend.h (the
// ggml-backend-impl.h interfaces): a device, a backend and a buffer type per device, the last
// device typed CPU (the scheduler requires that). The buffer types hand out address space
// reserved with mmap (no heap, never touched), tensor data accesses are no-ops, and
// graph_compute returns at once: every cycle spent is the scheduler's (and ggml-alloc's, which
// it drives).
//
// It is linked against a libggml-base.so.0 at build time; which one it runs with is chosen by
// LD_LIBRARY_PATH at run time. It prints one JSON object on stdout naming the library file it
// actually mapped, the per-iteration times, the compute buffer sizes per backend and the heap
// traffic of the scheduler (counted by interposing malloc and friends in this executable).
//
// Usage: sched-bench --graph smollm2|deepseek [--backends 2|3] [--iters N] [--warmup N]
//                    [--tokens N] [--layers N] [--callgrind | --callgrind-reserve | --callgrind-first]
//
// --callgrind turns callgrind instrumentation on only around the timed cycles (phase B),
// --callgrind-reserve only around the timed reserves (phase C), --callgrind-first only around
// the first alloc_graph of each new scheduler (phase D); run the program under
// `valgrind --tool=callgrind --instr-atstart=no` for the total Ir of that section alone.

#define _GNU_SOURCE
#include "ggml-alloc.h"
#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml.h"
// ggml-impl.h: for struct ggml_cgraph (n_leafs); its static helpers are unused here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "ggml-impl.h"
#pragma GCC diagnostic pop
#include "fake_backend.h"

#include <dlfcn.h>
#include <malloc.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define HAVE_CALLGRIND 1
#endif
#endif
#ifndef HAVE_CALLGRIND
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#define CALLGRIND_ZERO_STATS
#endif

// ---------------------------------------------------------------------------------------------
// Heap accounting: this executable's malloc family wraps glibc's, so every allocation made by
// any library in the process (libggml-base's C, C++ operator new, Rust's global allocator)
// passes here. Counting is on only inside the measured windows; the program is single-threaded.

extern void * __libc_malloc(size_t size);
extern void * __libc_calloc(size_t n, size_t size);
extern void * __libc_realloc(void * ptr, size_t size);
extern void   __libc_free(void * ptr);
extern void * __libc_memalign(size_t alignment, size_t size);

struct heap_stats {
    long long allocs;      // number of allocations (malloc, calloc, realloc to a new block, memalign)
    long long frees;       // number of frees
    long long bytes;       // usable bytes allocated
    long long live;        // allocated minus freed since the window opened
    long long peak;        // highest `live` seen in the window
};

static int               g_counting;
static struct heap_stats g_heap;

static void heap_open(void) {
    memset(&g_heap, 0, sizeof(g_heap));
    g_counting = 1;
}

static struct heap_stats heap_close(void) {
    g_counting = 0;
    return g_heap;
}

static void note_alloc(void * p) {
    if (g_counting && p) {
        long long s = (long long) malloc_usable_size(p);
        g_heap.allocs++;
        g_heap.bytes += s;
        g_heap.live += s;
        if (g_heap.live > g_heap.peak) {
            g_heap.peak = g_heap.live;
        }
    }
}

static void note_free(void * p) {
    if (g_counting && p) {
        g_heap.frees++;
        g_heap.live -= (long long) malloc_usable_size(p);
    }
}

void * malloc(size_t size) {
    void * p = __libc_malloc(size);
    note_alloc(p);
    return p;
}

void * calloc(size_t n, size_t size) {
    void * p = __libc_calloc(n, size);
    note_alloc(p);
    return p;
}

void * realloc(void * ptr, size_t size) {
    note_free(ptr);
    void * p = __libc_realloc(ptr, size);
    note_alloc(p);
    return p;
}

void free(void * ptr) {
    note_free(ptr);
    __libc_free(ptr);
}

void * memalign(size_t alignment, size_t size) {
    void * p = __libc_memalign(alignment, size);
    note_alloc(p);
    return p;
}

void * aligned_alloc(size_t alignment, size_t size) {
    return memalign(alignment, size);
}

int posix_memalign(void ** out, size_t alignment, size_t size) {
    void * p = memalign(alignment, size);
    if (!p) {
        return 12; // ENOMEM
    }
    *out = p;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Fake devices (cabi-tests/common/fake_backend.h): buffers are address space only, tensor
// data accesses are no-ops, graph_compute only counts the nodes it was given.

#define MAX_DEV 3

static struct fake_reg g_reg;
// Per device, the ops it refuses (everything else is supported).
static bool            g_unsupported[MAX_DEV][GGML_OP_COUNT];
static long long       g_computed_nodes;

static bool dv_supports_op(const struct fake_dev * d, const struct ggml_tensor * op) {
    return !g_unsupported[d->index][op->op];
}

// Like the GPU backends: offload ops with a weight in host memory when the batch is large.
static bool dv_offload_op(const struct fake_dev * d, const struct ggml_tensor * op) {
    (void) d;
    const int64_t batch = op->op == GGML_OP_MUL_MAT_ID ? op->ne[2] : op->ne[1];
    return batch >= 32 && op->op != GGML_OP_GET_ROWS;
}

static void be_count_nodes(const struct fake_dev * d, struct ggml_cgraph * cgraph) {
    (void) d;
    g_computed_nodes += ggml_graph_n_nodes(cgraph);
}

// Devices: FAKE0 (GPU, no ARGSORT), [FAKE1 (GPU, no ARGSORT, no ROPE)], FCPU (CPU, everything).
static void make_devices(int n) {
    static const char * names[] = { "FAKE0", "FAKE1" };
    fake_reg_init(&g_reg, "FAKE");
    // The buffers' records come from glibc directly: the heap figures are the scheduler's.
    g_reg.record_calloc = __libc_calloc;
    g_reg.record_free   = __libc_free;
    for (int i = 0; i < n; i++) {
        const bool cpu = i == n - 1;
        if (!cpu) {
            g_unsupported[i][GGML_OP_ARGSORT] = true;
            if (i == 1) {
                g_unsupported[i][GGML_OP_ROPE] = true;
            }
        }
        struct fake_dev_desc desc = {
            .name        = cpu ? "FCPU" : names[i],
            .type        = cpu ? GGML_BACKEND_DEVICE_TYPE_CPU : GGML_BACKEND_DEVICE_TYPE_GPU,
            .alignment   = cpu ? 64 : 256,
            .host        = cpu,
            .alloc       = FAKE_ALLOC_RESERVE,
            .supports_op = dv_supports_op,
            .offload_op  = dv_offload_op,
            .on_compute  = be_count_nodes,
        };
        desc.guid[0] = (uint8_t) (0xf0 + i);
        fake_reg_add(&g_reg, &desc);
    }
}

// ---------------------------------------------------------------------------------------------
// Graph builders. Weights live in per-device contexts allocated once in buffers of the fake
// device types (usage WEIGHTS, like a loaded model); KV caches likewise (usage ANY). The graph
// itself is rebuilt before every iteration in a fresh no_alloc context, as llama.cpp does.

struct wctx {
    struct ggml_context * ctx[MAX_DEV];
    struct ggml_context * kv[MAX_DEV];
};

static struct ggml_context * new_meta_ctx(size_t n_tensors) {
    struct ggml_init_params p = { n_tensors * ggml_tensor_overhead(), NULL, true };
    return ggml_init(p);
}

static struct ggml_tensor * w2(struct ggml_context * c, enum ggml_type t, int64_t a, int64_t b, const char * name, int il) {
    struct ggml_tensor * x = ggml_new_tensor_2d(c, t, a, b);
    ggml_format_name(x, "blk.%d.%s", il, name);
    return x;
}

static struct ggml_tensor * w1(struct ggml_context * c, int64_t a, const char * name, int il) {
    struct ggml_tensor * x = ggml_new_tensor_1d(c, GGML_TYPE_F32, a);
    ggml_format_name(x, "blk.%d.%s", il, name);
    return x;
}

static int dev_of_layer(int il, int n_layer) {
    return g_reg.n_devs == 2 ? 0 : (il < n_layer / 2 ? 0 : 1);
}

static void alloc_weights(struct wctx * w) {
    for (int d = 0; d < g_reg.n_devs; d++) {
        if (w->ctx[d] && ggml_get_first_tensor(w->ctx[d])) {
            ggml_backend_buffer_t b = ggml_backend_alloc_ctx_tensors_from_buft(w->ctx[d], &g_reg.devs[d].buft);
            ggml_backend_buffer_set_usage(b, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        }
        if (w->kv[d] && ggml_get_first_tensor(w->kv[d])) {
            ggml_backend_alloc_ctx_tensors_from_buft(w->kv[d], &g_reg.devs[d].buft);
        }
    }
}

// --- (a) SmolLM2-135M shaped llama graph --------------------------------------------------

struct llama_layer {
    struct ggml_tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *ffn_gate, *ffn_up, *ffn_down, *k, *v;
};

struct llama_model {
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    struct ggml_tensor * tok_embd;
    struct ggml_tensor * output_norm;
    struct ggml_tensor * output;
    struct llama_layer * layers;
};

static void llama_make(struct llama_model * m, struct wctx * w, int n_layer) {
    m->n_layer = n_layer; m->n_embd = 576; m->n_head = 9; m->n_head_kv = 3; m->head_dim = 64;
    m->n_ff = 1536; m->n_vocab = 49152; m->n_ctx = 4096;
    m->layers = __libc_calloc((size_t) n_layer, sizeof(*m->layers));
    for (int d = 0; d < g_reg.n_devs; d++) {
        w->ctx[d] = new_meta_ctx(16 * (size_t) n_layer + 8);
        w->kv[d]  = new_meta_ctx(4 * (size_t) n_layer + 8);
    }
    const int cpu = g_reg.n_devs - 1;
    const int last = dev_of_layer(n_layer - 1, n_layer);
    const int64_t E = m->n_embd, KV = (int64_t) m->n_head_kv * m->head_dim;
    m->tok_embd = ggml_new_tensor_2d(w->ctx[cpu], GGML_TYPE_Q4_1, E, m->n_vocab);
    ggml_set_name(m->tok_embd, "token_embd.weight");
    m->output_norm = ggml_new_tensor_1d(w->ctx[last], GGML_TYPE_F32, E);
    ggml_set_name(m->output_norm, "output_norm.weight");
    m->output = ggml_new_tensor_2d(w->ctx[last], GGML_TYPE_Q4_1, E, m->n_vocab);
    ggml_set_name(m->output, "output.weight");
    for (int il = 0; il < n_layer; il++) {
        struct ggml_context * c = w->ctx[dev_of_layer(il, n_layer)];
        struct llama_layer * L = &m->layers[il];
        L->attn_norm = w1(c, E, "attn_norm", il);
        L->wq = w2(c, GGML_TYPE_Q4_1, E, E, "attn_q", il);
        L->wk = w2(c, GGML_TYPE_Q4_1, E, KV, "attn_k", il);
        L->wv = w2(c, GGML_TYPE_Q4_1, E, KV, "attn_v", il);
        L->wo = w2(c, GGML_TYPE_Q4_1, E, E, "attn_output", il);
        L->ffn_norm = w1(c, E, "ffn_norm", il);
        L->ffn_gate = w2(c, GGML_TYPE_Q4_1, E, m->n_ff, "ffn_gate", il);
        L->ffn_up   = w2(c, GGML_TYPE_Q4_1, E, m->n_ff, "ffn_up", il);
        L->ffn_down = w2(c, GGML_TYPE_Q4_1, m->n_ff, E, "ffn_down", il);
        struct ggml_context * kc = w->kv[dev_of_layer(il, n_layer)];
        L->k = ggml_new_tensor_2d(kc, GGML_TYPE_F16, KV, m->n_ctx);
        ggml_format_name(L->k, "cache_k_l%d", il);
        L->v = ggml_new_tensor_2d(kc, GGML_TYPE_F16, KV, m->n_ctx);
        ggml_format_name(L->v, "cache_v_l%d", il);
    }
    alloc_weights(w);
}

static struct ggml_tensor * input(struct ggml_tensor * t, const char * name) {
    ggml_set_name(t, name);
    ggml_set_input(t);
    return t;
}

static void llama_build(struct ggml_context * c, struct ggml_cgraph * gf, const struct llama_model * m, int T) {
    const int n_kv = T; // a prompt batch at the start of the cache (llama-bench pp)
    const int64_t E = m->n_embd, D = m->head_dim, H = m->n_head, HKV = m->n_head_kv, KV = HKV * D;
    struct ggml_tensor * tokens = input(ggml_new_tensor_1d(c, GGML_TYPE_I32, T), "inp_tokens");
    struct ggml_tensor * pos    = input(ggml_new_tensor_1d(c, GGML_TYPE_I32, T), "inp_pos");
    struct ggml_tensor * mask   = input(ggml_new_tensor_2d(c, GGML_TYPE_F16, n_kv, T), "kq_mask");
    struct ggml_tensor * k_idx  = input(ggml_new_tensor_1d(c, GGML_TYPE_I64, T), "k_idxs");
    struct ggml_tensor * v_idx  = input(ggml_new_tensor_1d(c, GGML_TYPE_I64, T), "v_idxs");
    struct ggml_tensor * out_ids = input(ggml_new_tensor_1d(c, GGML_TYPE_I32, 1), "inp_out_ids");

    struct ggml_tensor * inpL = ggml_get_rows(c, m->tok_embd, tokens);
    ggml_set_name(inpL, "inp_embd");
    const float scale = 1.0f / sqrtf((float) D);
    for (int il = 0; il < m->n_layer; il++) {
        const struct llama_layer * L = &m->layers[il];
        struct ggml_tensor * inpSA = inpL;
        struct ggml_tensor * cur = ggml_mul(c, ggml_rms_norm(c, inpL, 1e-5f), L->attn_norm);
        ggml_format_name(cur, "attn_norm-%d", il);
        struct ggml_tensor * q = ggml_reshape_3d(c, ggml_mul_mat(c, L->wq, cur), D, H, T);
        struct ggml_tensor * k = ggml_reshape_3d(c, ggml_mul_mat(c, L->wk, cur), D, HKV, T);
        struct ggml_tensor * v = ggml_reshape_3d(c, ggml_mul_mat(c, L->wv, cur), D, HKV, T);
        q = ggml_rope_ext(c, q, pos, NULL, (int) D, 0, 8192, 100000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
        k = ggml_rope_ext(c, k, pos, NULL, (int) D, 0, 8192, 100000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
        ggml_format_name(q, "Qcur-%d", il);
        ggml_format_name(k, "Kcur-%d", il);
        ggml_build_forward_expand(gf, ggml_set_rows(c, L->k, ggml_reshape_2d(c, k, KV, T), k_idx));
        ggml_build_forward_expand(gf, ggml_set_rows(c, L->v, ggml_reshape_2d(c, v, KV, T), v_idx));
        struct ggml_tensor * qp = ggml_permute(c, q, 0, 2, 1, 3);
        struct ggml_tensor * kc = ggml_permute(c, ggml_view_3d(c, L->k, D, HKV, n_kv, ggml_row_size(L->k->type, D),
                                                               ggml_row_size(L->k->type, KV), 0), 0, 2, 1, 3);
        struct ggml_tensor * vc = ggml_permute(c, ggml_view_3d(c, L->v, D, HKV, n_kv, ggml_row_size(L->v->type, D),
                                                               ggml_row_size(L->v->type, KV), 0), 0, 2, 1, 3);
        cur = ggml_flash_attn_ext(c, qp, kc, vc, mask, scale, 0.0f, 0.0f);
        cur = ggml_reshape_2d(c, cur, E, T);
        cur = ggml_mul_mat(c, L->wo, cur);
        if (il == m->n_layer - 1) {
            cur   = ggml_get_rows(c, cur, out_ids);
            inpSA = ggml_get_rows(c, inpSA, out_ids);
        }
        struct ggml_tensor * ffn_inp = ggml_add(c, cur, inpSA);
        cur = ggml_mul(c, ggml_rms_norm(c, ffn_inp, 1e-5f), L->ffn_norm);
        struct ggml_tensor * g = ggml_mul_mat(c, L->ffn_gate, cur);
        struct ggml_tensor * u = ggml_mul_mat(c, L->ffn_up, cur);
        cur = ggml_mul_mat(c, L->ffn_down, ggml_swiglu_split(c, g, u));
        inpL = ggml_add(c, cur, ffn_inp);
        ggml_format_name(inpL, "l_out-%d", il);
    }
    struct ggml_tensor * cur = ggml_mul(c, ggml_rms_norm(c, inpL, 1e-5f), m->output_norm);
    cur = ggml_mul_mat(c, m->output, cur);
    ggml_set_name(cur, "result_output");
    ggml_set_output(cur);
    ggml_build_forward_expand(gf, cur);
}

// --- (b) DeepSeek-style layer stack: MLA attention, sparse-attention mask, MoE -------------

struct ds_layer {
    struct ggml_tensor *attn_norm, *wq, *wkv_a, *kv_a_norm, *wkv_b, *wo, *idx_q, *idx_k;
    struct ggml_tensor *ffn_norm, *gate_inp, *exp_bias, *up_exps, *gate_exps, *down_exps, *up_sh, *gate_sh, *down_sh;
    struct ggml_tensor *ffn_gate, *ffn_up, *ffn_down; // dense layers
    struct ggml_tensor *k, *v;
};

struct ds_model {
    int n_layer, n_dense, n_embd, n_head, nope, rope, vdim, kv_lora, n_expert, n_used, n_ff_exp, n_ff, n_idx, topk;
    int n_vocab, n_ctx;
    struct ggml_tensor *tok_embd, *output_norm, *output;
    struct ds_layer * layers;
};

static void ds_make(struct ds_model * m, struct wctx * w, int n_layer) {
    m->n_layer = n_layer; m->n_dense = 1; m->n_embd = 1024; m->n_head = 16; m->nope = 64; m->rope = 32;
    m->vdim = 64; m->kv_lora = 256; m->n_expert = 64; m->n_used = 8; m->n_ff_exp = 512; m->n_ff = 2816;
    m->n_idx = 64; m->topk = 32; m->n_vocab = 32000; m->n_ctx = 2048;
    m->layers = __libc_calloc((size_t) n_layer, sizeof(*m->layers));
    for (int d = 0; d < g_reg.n_devs; d++) {
        w->ctx[d] = new_meta_ctx(24 * (size_t) n_layer + 8);
        w->kv[d]  = new_meta_ctx(4 * (size_t) n_layer + 8);
    }
    const int cpu = g_reg.n_devs - 1;
    const int last = dev_of_layer(n_layer - 1, n_layer);
    const int64_t E = m->n_embd, H = m->n_head, QK = m->nope + m->rope;
    const enum ggml_type Q = GGML_TYPE_Q4_K;
    m->tok_embd = ggml_new_tensor_2d(w->ctx[cpu], Q, E, m->n_vocab);
    ggml_set_name(m->tok_embd, "token_embd.weight");
    m->output_norm = ggml_new_tensor_1d(w->ctx[last], GGML_TYPE_F32, E);
    ggml_set_name(m->output_norm, "output_norm.weight");
    m->output = ggml_new_tensor_2d(w->ctx[last], Q, E, m->n_vocab);
    ggml_set_name(m->output, "output.weight");
    for (int il = 0; il < n_layer; il++) {
        const int d = dev_of_layer(il, n_layer);
        struct ggml_context * c = w->ctx[d];
        struct ds_layer * L = &m->layers[il];
        L->attn_norm = w1(c, E, "attn_norm", il);
        L->wq        = w2(c, Q, E, H * QK, "attn_q", il);
        L->wkv_a     = w2(c, Q, E, m->kv_lora + m->rope, "attn_kv_a_mqa", il);
        L->kv_a_norm = w1(c, m->kv_lora, "attn_kv_a_norm", il);
        L->wkv_b     = w2(c, GGML_TYPE_Q8_0, m->kv_lora, H * (m->nope + m->vdim), "attn_kv_b", il);
        L->wo        = w2(c, Q, H * m->vdim, E, "attn_output", il);
        L->idx_q     = w2(c, GGML_TYPE_Q8_0, E, m->n_idx, "indexer_q", il);
        L->idx_k     = w2(c, GGML_TYPE_Q8_0, E, m->n_idx, "indexer_k", il);
        L->ffn_norm  = w1(c, E, "ffn_norm", il);
        if (il < m->n_dense) {
            L->ffn_gate = w2(c, Q, E, m->n_ff, "ffn_gate", il);
            L->ffn_up   = w2(c, Q, E, m->n_ff, "ffn_up", il);
            L->ffn_down = w2(c, Q, m->n_ff, E, "ffn_down", il);
        } else {
            L->gate_inp = w2(c, GGML_TYPE_F32, E, m->n_expert, "ffn_gate_inp", il);
            L->exp_bias = w1(c, m->n_expert, "exp_probs_b", il);
            L->up_exps   = ggml_new_tensor_3d(c, Q, E, m->n_ff_exp, m->n_expert);
            L->gate_exps = ggml_new_tensor_3d(c, Q, E, m->n_ff_exp, m->n_expert);
            L->down_exps = ggml_new_tensor_3d(c, Q, m->n_ff_exp, E, m->n_expert);
            ggml_format_name(L->up_exps, "blk.%d.ffn_up_exps", il);
            ggml_format_name(L->gate_exps, "blk.%d.ffn_gate_exps", il);
            ggml_format_name(L->down_exps, "blk.%d.ffn_down_exps", il);
            L->gate_sh = w2(c, Q, E, 2 * m->n_ff_exp, "ffn_gate_shexp", il);
            L->up_sh   = w2(c, Q, E, 2 * m->n_ff_exp, "ffn_up_shexp", il);
            L->down_sh = w2(c, Q, 2 * m->n_ff_exp, E, "ffn_down_shexp", il);
        }
        struct ggml_context * kc = w->kv[d];
        L->k = ggml_new_tensor_2d(kc, GGML_TYPE_F16, H * QK, m->n_ctx);
        ggml_format_name(L->k, "cache_k_l%d", il);
        L->v = ggml_new_tensor_2d(kc, GGML_TYPE_F16, H * m->vdim, m->n_ctx);
        ggml_format_name(L->v, "cache_v_l%d", il);
    }
    alloc_weights(w);
}

static void ds_build(struct ggml_context * c, struct ggml_cgraph * gf, const struct ds_model * m, int T) {
    const int n_kv = T;
    const int64_t E = m->n_embd, H = m->n_head, NOPE = m->nope, ROPE = m->rope, QK = NOPE + ROPE, DV = m->vdim;
    const int64_t LORA = m->kv_lora, NE = m->n_expert, NU = m->n_used, K = m->topk < n_kv ? m->topk : n_kv;
    struct ggml_tensor * tokens = input(ggml_new_tensor_1d(c, GGML_TYPE_I32, T), "inp_tokens");
    struct ggml_tensor * pos    = input(ggml_new_tensor_1d(c, GGML_TYPE_I32, T), "inp_pos");
    struct ggml_tensor * mask   = input(ggml_new_tensor_2d(c, GGML_TYPE_F32, n_kv, T), "kq_mask");
    struct ggml_tensor * k_idx  = input(ggml_new_tensor_1d(c, GGML_TYPE_I64, T), "k_idxs");
    struct ggml_tensor * v_idx  = input(ggml_new_tensor_1d(c, GGML_TYPE_I64, T), "v_idxs");
    struct ggml_tensor * out_ids = input(ggml_new_tensor_1d(c, GGML_TYPE_I32, 1), "inp_out_ids");

    struct ggml_tensor * inpL = ggml_get_rows(c, m->tok_embd, tokens);
    const float kq_scale = 1.0f / sqrtf((float) QK);
    for (int il = 0; il < m->n_layer; il++) {
        const struct ds_layer * L = &m->layers[il];
        struct ggml_tensor * inpSA = inpL;
        struct ggml_tensor * cur = ggml_mul(c, ggml_rms_norm(c, inpL, 1e-6f), L->attn_norm);
        ggml_format_name(cur, "attn_norm-%d", il);

        // MLA projections
        struct ggml_tensor * q = ggml_mul_mat(c, L->wq, cur); // [H*QK, T]
        struct ggml_tensor * q_nope = ggml_view_3d(c, q, NOPE, H, T, ggml_row_size(q->type, QK), ggml_row_size(q->type, H * QK), 0);
        struct ggml_tensor * q_pe = ggml_view_3d(c, q, ROPE, H, T, ggml_row_size(q->type, QK), ggml_row_size(q->type, H * QK),
                                                 ggml_row_size(q->type, NOPE));
        struct ggml_tensor * kv_pe = ggml_mul_mat(c, L->wkv_a, cur); // [LORA+ROPE, T]
        struct ggml_tensor * kv_cmp = ggml_view_2d(c, kv_pe, LORA, T, kv_pe->nb[1], 0);
        struct ggml_tensor * k_pe = ggml_view_3d(c, kv_pe, ROPE, 1, T, kv_pe->nb[1], kv_pe->nb[1], ggml_row_size(kv_pe->type, LORA));
        kv_cmp = ggml_mul(c, ggml_rms_norm(c, ggml_cont(c, kv_cmp), 1e-6f), L->kv_a_norm);
        struct ggml_tensor * kv = ggml_mul_mat(c, L->wkv_b, kv_cmp); // [H*(NOPE+DV), T]
        struct ggml_tensor * k_nope = ggml_view_3d(c, kv, NOPE, H, T, ggml_row_size(kv->type, NOPE + DV),
                                                   ggml_row_size(kv->type, H * (NOPE + DV)), 0);
        struct ggml_tensor * v_st = ggml_view_3d(c, kv, DV, H, T, ggml_row_size(kv->type, NOPE + DV),
                                                 ggml_row_size(kv->type, H * (NOPE + DV)), ggml_row_size(kv->type, NOPE));
        v_st = ggml_cont(c, v_st);
        q_pe = ggml_rope_ext(c, q_pe, pos, NULL, (int) ROPE, 0, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
        k_pe = ggml_rope_ext(c, k_pe, pos, NULL, (int) ROPE, 0, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
        struct ggml_tensor * q_st = ggml_concat(c, q_nope, q_pe, 0);                           // [QK, H, T]
        struct ggml_tensor * k_st = ggml_concat(c, k_nope, ggml_repeat(c, k_pe, q_pe), 0);     // [QK, H, T]
        ggml_format_name(k_st, "k_states-%d", il);

        // KV cache writes (in place into the cache)
        ggml_build_forward_expand(gf, ggml_set_rows(c, L->k, ggml_reshape_2d(c, k_st, H * QK, T), k_idx));
        ggml_build_forward_expand(gf, ggml_set_rows(c, L->v, ggml_reshape_2d(c, v_st, H * DV, T), v_idx));

        // Sparse-attention indexer: scores, top-k, and a mask written in place: fill with -inf,
        // then set_rows writes zeros at the selected positions.
        struct ggml_tensor * iq = ggml_mul_mat(c, L->idx_q, cur);              // [n_idx, T]
        struct ggml_tensor * ik = ggml_mul_mat(c, L->idx_k, cur);              // [n_idx, T]
        struct ggml_tensor * scores = ggml_mul_mat(c, ik, iq);                 // [n_kv, T]
        struct ggml_tensor * sel = ggml_top_k(c, scores, (int) K);             // [K, T] i32
        struct ggml_tensor * sparse = ggml_fill(c, scores, -INFINITY);         // [n_kv, T]
        struct ggml_tensor * zeros = ggml_fill(c, ggml_view_2d(c, scores, 1, K * T, sizeof(float), 0), 0.0f);
        struct ggml_tensor * written = ggml_set_rows(c, ggml_reshape_2d(c, sparse, 1, (int64_t) n_kv * T), zeros,
                                                     ggml_reshape_1d(c, sel, K * T));
        ggml_format_name(written, "sparse_mask-%d", il);
        struct ggml_tensor * smask = ggml_reshape_2d(c, written, n_kv, T);

        // attention (soft_max path)
        struct ggml_tensor * qp = ggml_permute(c, q_st, 0, 2, 1, 3);            // [QK, T, H]
        struct ggml_tensor * kc = ggml_permute(c, ggml_view_3d(c, L->k, QK, H, n_kv, ggml_row_size(L->k->type, QK),
                                                               ggml_row_size(L->k->type, H * QK), 0), 0, 2, 1, 3);
        struct ggml_tensor * kq = ggml_mul_mat(c, kc, qp);                       // [n_kv, T, H]
        kq = ggml_add(c, kq, smask);
        kq = ggml_soft_max_ext(c, kq, mask, kq_scale, 0.0f);
        struct ggml_tensor * vc = ggml_view_3d(c, L->v, DV, H, n_kv, ggml_row_size(L->v->type, DV),
                                               ggml_row_size(L->v->type, H * DV), 0);
        vc = ggml_cont(c, ggml_permute(c, vc, 1, 2, 0, 3));                      // [n_kv, DV, H]
        struct ggml_tensor * kqv = ggml_mul_mat(c, vc, kq);                      // [DV, T, H]
        cur = ggml_cont_2d(c, ggml_permute(c, kqv, 0, 2, 1, 3), DV * H, T);
        cur = ggml_mul_mat(c, L->wo, cur);
        if (il == m->n_layer - 1) {
            cur   = ggml_get_rows(c, cur, out_ids);
            inpSA = ggml_get_rows(c, inpSA, out_ids);
        }
        struct ggml_tensor * ffn_inp = ggml_add(c, cur, inpSA);
        const int64_t Tn = ffn_inp->ne[1];
        cur = ggml_mul(c, ggml_rms_norm(c, ffn_inp, 1e-6f), L->ffn_norm);
        if (il < m->n_dense) {
            struct ggml_tensor * g = ggml_mul_mat(c, L->ffn_gate, cur);
            struct ggml_tensor * u = ggml_mul_mat(c, L->ffn_up, cur);
            cur = ggml_mul_mat(c, L->ffn_down, ggml_swiglu_split(c, g, u));
        } else {
            // router: sigmoid scores + bias, top-k experts, normalized weights
            struct ggml_tensor * logits = ggml_mul_mat(c, L->gate_inp, cur);     // [NE, Tn]
            struct ggml_tensor * probs = ggml_sigmoid(c, logits);
            struct ggml_tensor * sel_probs = ggml_add(c, probs, L->exp_bias);
            struct ggml_tensor * experts = ggml_argsort_top_k(c, sel_probs, (int) NU); // [NU, Tn]
            ggml_format_name(experts, "ffn_moe_topk-%d", il);
            struct ggml_tensor * wts = ggml_get_rows(c, ggml_reshape_3d(c, probs, 1, NE, Tn), experts); // [1, NU, Tn]
            struct ggml_tensor * w2d = ggml_reshape_2d(c, wts, NU, Tn);
            w2d = ggml_div(c, w2d, ggml_sum_rows(c, w2d));
            w2d = ggml_scale(c, w2d, 2.5f);
            wts = ggml_reshape_3d(c, w2d, 1, NU, Tn);
            struct ggml_tensor * x3 = ggml_reshape_3d(c, cur, E, 1, Tn);
            struct ggml_tensor * up = ggml_mul_mat_id(c, L->up_exps, x3, experts);     // [FF, NU, Tn]
            struct ggml_tensor * gate = ggml_mul_mat_id(c, L->gate_exps, x3, experts);
            struct ggml_tensor * par = ggml_swiglu_split(c, gate, up);
            struct ggml_tensor * ex = ggml_mul_mat_id(c, L->down_exps, par, experts);   // [E, NU, Tn]
            ex = ggml_mul(c, ex, wts);
            struct ggml_tensor * moe = ggml_view_2d(c, ex, E, Tn, ex->nb[2], 0);
            for (int64_t i = 1; i < NU; i++) {
                moe = ggml_add(c, moe, ggml_view_2d(c, ex, E, Tn, ex->nb[2], (size_t) i * ex->nb[1]));
            }
            // shared expert
            struct ggml_tensor * gs = ggml_mul_mat(c, L->gate_sh, cur);
            struct ggml_tensor * us = ggml_mul_mat(c, L->up_sh, cur);
            struct ggml_tensor * sh = ggml_mul_mat(c, L->down_sh, ggml_swiglu_split(c, gs, us));
            cur = ggml_add(c, moe, sh);
        }
        inpL = ggml_add(c, cur, ffn_inp);
        ggml_format_name(inpL, "l_out-%d", il);
    }
    struct ggml_tensor * cur = ggml_mul(c, ggml_rms_norm(c, inpL, 1e-6f), m->output_norm);
    cur = ggml_mul_mat(c, m->output, cur);
    ggml_set_name(cur, "result_output");
    ggml_set_output(cur);
    ggml_build_forward_expand(gf, cur);
}

// ---------------------------------------------------------------------------------------------
// Driver.

enum graph_kind { G_SMOLLM2, G_DEEPSEEK };

struct bench {
    enum graph_kind     kind;
    int                 tokens;
    struct llama_model  llama;
    struct ds_model     ds;
    void *              mem;
    size_t              mem_size;
    size_t              graph_size;
    struct ggml_context * ctx;
};

static struct ggml_cgraph * rebuild(struct bench * b) {
    if (b->ctx) {
        ggml_free(b->ctx);
    }
    struct ggml_init_params p = { b->mem_size, b->mem, true };
    b->ctx = ggml_init(p);
    struct ggml_cgraph * gf = ggml_new_graph_custom(b->ctx, b->graph_size, false);
    if (b->kind == G_SMOLLM2) {
        llama_build(b->ctx, gf, &b->llama, b->tokens);
    } else {
        ds_build(b->ctx, gf, &b->ds, b->tokens);
    }
    return gf;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_ll(const void * a, const void * b) {
    const long long x = *(const long long *) a, y = *(const long long *) b;
    return (x > y) - (x < y);
}

struct summary {
    long long median, min, max, p25, p75;
};

static struct summary summarize(long long * v, int n) {
    qsort(v, (size_t) n, sizeof(v[0]), cmp_ll);
    struct summary s = { v[n / 2], v[0], v[n - 1], v[n / 4], v[(3 * n) / 4] };
    if (n % 2 == 0) {
        s.median = (v[n / 2 - 1] + v[n / 2]) / 2;
    }
    return s;
}

static void print_summary(const char * key, struct summary s) {
    printf("\"%s\":{\"median\":%lld,\"min\":%lld,\"max\":%lld,\"p25\":%lld,\"p75\":%lld}", key, s.median, s.min, s.max, s.p25,
           s.p75);
}

static void print_heap(const char * key, struct heap_stats h) {
    printf("\"%s\":{\"allocs\":%lld,\"frees\":%lld,\"bytes\":%lld,\"peak\":%lld,\"net\":%lld}", key, h.allocs, h.frees, h.bytes,
           h.peak, h.live);
}

static void usage(void) {
    fprintf(stderr, "usage: sched-bench --graph smollm2|deepseek [--backends 2|3] [--iters N] [--warmup N] "
                    "[--tokens N] [--layers N] [--parallel] [--callgrind | --callgrind-reserve | --callgrind-first]\n");
    exit(2);
}

int main(int argc, char ** argv) {
    struct bench b;
    memset(&b, 0, sizeof(b));
    int n_backends = 2, iters = 50, warmup = 5, layers = -1, callgrind = 0, callgrind_reserve = 0, callgrind_first = 0,
        parallel = 0;
    const char * graph = NULL;
    for (int i = 1; i < argc; i++) {
        const char * a = argv[i];
        const char * v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--callgrind")) { callgrind = 1; continue; }
        if (!strcmp(a, "--callgrind-reserve")) { callgrind_reserve = 1; continue; }
        if (!strcmp(a, "--callgrind-first")) { callgrind_first = 1; continue; }
        // a parallel scheduler (pipeline copies), as llama.cpp makes with several devices
        if (!strcmp(a, "--parallel")) { parallel = 1; continue; }
        if (!v) usage();
        if (!strcmp(a, "--graph")) graph = v;
        else if (!strcmp(a, "--backends")) n_backends = atoi(v);
        else if (!strcmp(a, "--iters")) iters = atoi(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else if (!strcmp(a, "--tokens")) b.tokens = atoi(v);
        else if (!strcmp(a, "--layers")) layers = atoi(v);
        else usage();
        i++;
    }
    if (!graph || n_backends < 2 || n_backends > MAX_DEV || iters < 1 || warmup < 1) usage();

    Dl_info info;
    memset(&info, 0, sizeof(info));
    dladdr(dlsym(RTLD_DEFAULT, "ggml_backend_sched_new"), &info);
    char libpath[4096] = "?";
    if (info.dli_fname && !realpath(info.dli_fname, libpath)) {
        snprintf(libpath, sizeof(libpath), "%s", info.dli_fname);
    }

    make_devices(n_backends);
    struct wctx w;
    memset(&w, 0, sizeof(w));
    if (!strcmp(graph, "smollm2")) {
        b.kind = G_SMOLLM2;
        b.tokens = b.tokens ? b.tokens : 512;
        llama_make(&b.llama, &w, layers > 0 ? layers : 30);
    } else if (!strcmp(graph, "deepseek")) {
        b.kind = G_DEEPSEEK;
        b.tokens = b.tokens ? b.tokens : 64;
        ds_make(&b.ds, &w, layers > 0 ? layers : 68);
    } else {
        usage();
    }

    // Size the graph: build once with a generous limit, then fix graph_size like llama.cpp does
    // (a multiple of 1024 above nodes + leafs).
    b.graph_size = 65536;
    b.mem_size   = b.graph_size * ggml_tensor_overhead() + ggml_graph_overhead_custom(b.graph_size, false);
    b.mem        = __libc_malloc(b.mem_size);
    struct ggml_cgraph * gf = rebuild(&b);
    const int n_nodes = ggml_graph_n_nodes(gf);
    const int n_leafs = gf->n_leafs;
    b.graph_size = (size_t) ((n_nodes + n_leafs) / 1024 + 2) * 1024;

    ggml_backend_t backends[MAX_DEV];
    for (int i = 0; i < n_backends; i++) {
        backends[i] = &g_reg.devs[i].backend;
    }

    // Setup: sched_new and the first allocation (which reserves the compute buffers).
    heap_open();
    ggml_backend_sched_t sched = ggml_backend_sched_new(backends, NULL, n_backends, b.graph_size, parallel != 0, true);
    struct heap_stats h_new = heap_close();
    gf = rebuild(&b);
    heap_open();
    if (!ggml_backend_sched_alloc_graph(sched, gf)) {
        fprintf(stderr, "sched-bench: first alloc_graph failed\n");
        return 1;
    }
    struct heap_stats h_first = heap_close();
    if (ggml_backend_sched_graph_compute(sched, gf) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "sched-bench: graph_compute failed\n");
        return 1;
    }
    for (int i = 0; i < warmup; i++) {
        gf = rebuild(&b);
        ggml_backend_sched_reset(sched);
        ggml_backend_sched_alloc_graph(sched, gf);
        ggml_backend_sched_graph_compute(sched, gf);
    }
    const int n_splits = ggml_backend_sched_get_n_splits(sched);
    const int n_copies = ggml_backend_sched_get_n_copies(sched);
    size_t buf_size[MAX_DEV];
    for (int i = 0; i < n_backends; i++) {
        buf_size[i] = ggml_backend_sched_get_buffer_size(sched, backends[i]);
    }

    long long * t_split = __libc_calloc((size_t) iters, sizeof(long long));
    long long * t_total = __libc_calloc((size_t) iters, sizeof(long long));
    long long * t_alloc = __libc_calloc((size_t) iters, sizeof(long long));
    long long * t_comp  = __libc_calloc((size_t) iters, sizeof(long long));
    long long * t_res   = __libc_calloc((size_t) iters, sizeof(long long));
    struct heap_stats h_split = { 0, 0, 0, 0, 0 }, h_cycle = { 0, 0, 0, 0, 0 };

    // Phase A: reset + split_graph alone.
    for (int i = 0; i < iters; i++) {
        gf = rebuild(&b);
        heap_open();
        const int64_t t0 = now_ns();
        ggml_backend_sched_reset(sched);
        ggml_backend_sched_split_graph(sched, gf);
        const int64_t t1 = now_ns();
        struct heap_stats h = heap_close();
        t_split[i] = t1 - t0;
        if (h.peak > h_split.peak || i == 0) {
            h_split = h;
        }
    }
    // Phase B: the full cycle llama.cpp runs per ubatch: reset, alloc_graph (split + alloc),
    // graph_compute (dispatch to the no-op backends).
    g_computed_nodes = 0;
    long long ir_iters = 0;
    for (int i = 0; i < iters; i++) {
        gf = rebuild(&b);
        if (callgrind) {
            CALLGRIND_START_INSTRUMENTATION;
        }
        heap_open();
        const int64_t t0 = now_ns();
        ggml_backend_sched_reset(sched);
        const bool ok = ggml_backend_sched_alloc_graph(sched, gf);
        const int64_t t1 = now_ns();
        const enum ggml_status st = ggml_backend_sched_graph_compute(sched, gf);
        const int64_t t2 = now_ns();
        struct heap_stats h = heap_close();
        if (callgrind) {
            CALLGRIND_STOP_INSTRUMENTATION;
            ir_iters++;
        }
        if (!ok || st != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "sched-bench: iteration %d failed (alloc %d, status %d)\n", i, ok, (int) st);
            return 1;
        }
        t_alloc[i] = t1 - t0;
        t_comp[i]  = t2 - t1;
        t_total[i] = t2 - t0;
        if (h.peak > h_cycle.peak || i == 0) {
            h_cycle = h;
        }
    }

    // Phase C: ggml_backend_sched_reserve on a fresh graph (what llama.cpp does when it sizes
    // the compute buffers at context creation); the buffers already fit, so none grows.
    struct heap_stats h_res = { 0, 0, 0, 0, 0 };
    for (int i = 0; i < iters; i++) {
        gf = rebuild(&b);
        if (callgrind_reserve) {
            CALLGRIND_START_INSTRUMENTATION;
        }
        heap_open();
        const int64_t t0 = now_ns();
        const bool ok = ggml_backend_sched_reserve(sched, gf);
        const int64_t t1 = now_ns();
        struct heap_stats h = heap_close();
        if (callgrind_reserve) {
            CALLGRIND_STOP_INSTRUMENTATION;
            ir_iters++;
        }
        if (!ok) {
            fprintf(stderr, "sched-bench: reserve %d failed\n", i);
            return 1;
        }
        t_res[i] = t1 - t0;
        if (h.peak > h_res.peak || i == 0) {
            h_res = h;
        }
    }

    // Phase D: a context's first graph, as llama.cpp makes one per context: a new scheduler,
    // reserve on the worst-case graph, reset, then alloc_graph of a graph of the same shape
    // (timed alone). Each iteration frees its scheduler.
    long long * t_first = __libc_calloc((size_t) iters, sizeof(long long));
    for (int i = 0; i < iters; i++) {
        ggml_backend_sched_t s2 =
            ggml_backend_sched_new(backends, NULL, n_backends, b.graph_size, parallel != 0, true);
        gf = rebuild(&b);
        if (!ggml_backend_sched_reserve(s2, gf)) {
            fprintf(stderr, "sched-bench: reserve of a new scheduler failed\n");
            return 1;
        }
        gf = rebuild(&b);
        ggml_backend_sched_reset(s2);
        if (callgrind_first) {
            CALLGRIND_START_INSTRUMENTATION;
        }
        const int64_t t0 = now_ns();
        const bool    ok = ggml_backend_sched_alloc_graph(s2, gf);
        const int64_t t1 = now_ns();
        if (callgrind_first) {
            CALLGRIND_STOP_INSTRUMENTATION;
            ir_iters++;
        }
        if (!ok) {
            fprintf(stderr, "sched-bench: first alloc_graph of a new scheduler failed\n");
            return 1;
        }
        t_first[i] = t1 - t0;
        ggml_backend_sched_free(s2);
    }

    printf("{\"lib\":\"%s\",\"graph\":\"%s\",\"backends\":%d,\"tokens\":%d,\"nodes\":%d,\"leafs\":%d,\"graph_size\":%zu,"
           "\"splits\":%d,\"copies\":%d,\"iters\":%d,\"warmup\":%d,\"callgrind_iters\":%lld,\"computed_nodes_per_iter\":%lld,",
           libpath, graph, n_backends, b.tokens, n_nodes, n_leafs, b.graph_size, n_splits, n_copies, iters, warmup, ir_iters,
           g_computed_nodes / iters);
    printf("\"buffer_sizes\":[");
    for (int i = 0; i < n_backends; i++) {
        printf("%s{\"backend\":\"%s\",\"bytes\":%zu}", i ? "," : "", g_reg.devs[i].desc.name, buf_size[i]);
    }
    printf("],\"ns\":{");
    print_summary("cycle", summarize(t_total, iters));
    printf(",");
    print_summary("alloc_graph", summarize(t_alloc, iters));
    printf(",");
    print_summary("compute", summarize(t_comp, iters));
    printf(",");
    print_summary("split_graph", summarize(t_split, iters));
    printf(",");
    print_summary("reserve", summarize(t_res, iters));
    printf(",");
    print_summary("first_alloc_graph", summarize(t_first, iters));
    printf("},\"heap\":{");
    print_heap("sched_new", h_new);
    printf(",");
    print_heap("first_alloc", h_first);
    printf(",");
    print_heap("split_graph", h_split);
    printf(",");
    print_heap("cycle", h_cycle);
    printf(",");
    print_heap("reserve", h_res);
    printf("}}\n");

    ggml_backend_sched_free(sched);
    ggml_free(b.ctx);
    return 0;
}
