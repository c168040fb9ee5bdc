// compute_diff.c - differential driver for the scheduler's compute side: a test device DEV
// (GPU type, its own buffer type in heap memory that the CPU cannot use, so every crossing
// is a split input) that really computes (through a private ggml-cpu backend), optionally
// with events and cpy_tensor_async, beside the real ggml-cpu. Prints the eval callback's
// calls (ASK/SEE with the node's backend), DEV's backend calls, the splits and the outputs'
// values, for diffing the stock library against ours.
//
// Usage: compute_diff SEED [SEED_END]
// Knobs (environment): CD_PARALLEL=0|1, CD_EVENTS=0|1, CD_ASYNC=0|1 (cpy_tensor_async),
// CD_CB=0|1|2|3 (0 none, 1 want some nodes, 2 also stop at some, 3 want none),
// CD_FLOW=0..3 (0 alloc+compute, 1 compute without alloc, 2 compute_async+synchronize,
// 3 reserve then alloc), CD_ROUNDS=N, CD_HOST=0|1 (DEV's buffers are host, CPU may use them)
#define _GNU_SOURCE
#include "ggml-alloc.h"
#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "ggml-impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int env_int(const char * k, int d) {
    const char * v = getenv(k);
    return v ? atoi(v) : d;
}

static uint64_t rng_s;
static uint32_t rnd(void) {
    rng_s = rng_s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t) (rng_s >> 33);
}

static int           g_events, g_async, g_host;
static uint32_t      g_unsup; // bitmask over k_ops: ops DEV does not run
static ggml_backend_t g_priv_cpu;

// ---- DEV buffer type: heap memory ----
static struct ggml_backend_device       dev_d;
static struct ggml_backend_buffer_type  buft_d;
static struct ggml_backend              be_d;

static void   buf_free(ggml_backend_buffer_t b) { free(b->context); }
static void * buf_base(ggml_backend_buffer_t b) { return b->context; }
static void   buf_memset(ggml_backend_buffer_t b, struct ggml_tensor * t, uint8_t v, size_t o, size_t s) {
    (void) b;
    memset((char *) t->data + o, v, s);
}
static void buf_set(ggml_backend_buffer_t b, struct ggml_tensor * t, const void * d, size_t o, size_t s) {
    (void) b;
    printf("    SET %s %zu\n", t->name, s);
    memcpy((char *) t->data + o, d, s);
}
static void buf_get(ggml_backend_buffer_t b, const struct ggml_tensor * t, void * d, size_t o, size_t s) {
    (void) b;
    printf("    GET %s %zu\n", t->name, s);
    memcpy(d, (const char *) t->data + o, s);
}
static bool buf_cpy(ggml_backend_buffer_t b, const struct ggml_tensor * src, struct ggml_tensor * dst) {
    (void) b;
    if (src->buffer && src->buffer->buft == &buft_d) {
        printf("    CPY %s -> %s\n", src->name, dst->name);
        memcpy(dst->data, src->data, ggml_nbytes(src));
        return true;
    }
    return false;
}
static void buf_clear(ggml_backend_buffer_t b, uint8_t v) { memset(b->context, v, b->size); }
static const struct ggml_backend_buffer_i buf_i = {
    .free_buffer = buf_free, .get_base = buf_base, .memset_tensor = buf_memset, .set_tensor = buf_set,
    .get_tensor = buf_get, .cpy_tensor = buf_cpy, .clear = buf_clear,
};
static const char * buft_name(ggml_backend_buffer_type_t bt) { (void) bt; return "DEV"; }
static ggml_backend_buffer_t buft_alloc(ggml_backend_buffer_type_t bt, size_t size) {
    size_t n = (size + 63) / 64 * 64;
    void * p = aligned_alloc(64, n ? n : 64);
    memset(p, 0x7f, n ? n : 64); // garbage that is visible when read before written
    return ggml_backend_buffer_init(bt, buf_i, p, size);
}
static size_t buft_align(ggml_backend_buffer_type_t bt) { (void) bt; return 64; }
static bool   buft_is_host(ggml_backend_buffer_type_t bt) { (void) bt; return g_host; }

// ---- DEV backend ----
static const char * be_name(ggml_backend_t b) { (void) b; return "DEV"; }
static void         be_free(ggml_backend_t b) { (void) b; }
static enum ggml_status be_compute(ggml_backend_t b, struct ggml_cgraph * g) {
    (void) b;
    int n = ggml_graph_n_nodes(g);
    printf("    RUN DEV %d:", n);
    for (int i = 0; i < n; i++) {
        printf(" %s", ggml_graph_node(g, i)->name);
    }
    printf("\n");
    return ggml_backend_graph_compute(g_priv_cpu, g);
}
static void be_sync(ggml_backend_t b) { (void) b; printf("    SYNC DEV\n"); }
static bool be_cpy_async(ggml_backend_t bs, ggml_backend_t bd, const struct ggml_tensor * src, struct ggml_tensor * dst) {
    (void) bs; (void) bd;
    if (!src->buffer || !ggml_backend_buffer_is_host(src->buffer) || dst->buffer->buft != &buft_d) {
        printf("    CPYA-DECLINE %s -> %s\n", src->name, dst->name);
        return false;
    }
    printf("    CPYA %s -> %s\n", src->name, dst->name);
    memcpy(dst->data, src->data, ggml_nbytes(src));
    return true;
}
static void be_set_async(ggml_backend_t b, struct ggml_tensor * t, const void * d, size_t o, size_t s) {
    (void) b;
    printf("    SETA %s %zu %zu\n", t->name, o, s);
    memcpy((char *) t->data + o, d, s);
}
static void be_get_async(ggml_backend_t b, const struct ggml_tensor * t, void * d, size_t o, size_t s) {
    (void) b;
    printf("    GETA %s %zu %zu\n", t->name, o, s);
    memcpy(d, (const char *) t->data + o, s);
}
static int ev_serial;
static ggml_backend_event_t ev_new(ggml_backend_dev_t d) {
    ggml_backend_event_t e = calloc(1, sizeof(*e));
    e->device = d;
    e->context = (void *) (intptr_t) (++ev_serial);
    return e;
}
static void ev_free(ggml_backend_dev_t d, ggml_backend_event_t e) { (void) d; free(e); }
static void ev_sync(ggml_backend_dev_t d, ggml_backend_event_t e) { (void) d; printf("    EVSYNC %d\n", (int) (intptr_t) e->context); }
static void ev_record(ggml_backend_t b, ggml_backend_event_t e) { (void) b; printf("    EVREC %d\n", (int) (intptr_t) e->context); }
static void ev_wait(ggml_backend_t b, ggml_backend_event_t e) { (void) b; printf("    EVWAIT %d\n", (int) (intptr_t) e->context); }

// ---- DEV device ----
static const enum ggml_op k_ops[] = { GGML_OP_ADD, GGML_OP_MUL, GGML_OP_SUB, GGML_OP_SCALE, GGML_OP_SQR,
                                      GGML_OP_MUL_MAT, GGML_OP_CONT, GGML_OP_UNARY, GGML_OP_CPY, GGML_OP_GET_ROWS };
#define N_OPS ((int) (sizeof(k_ops) / sizeof(k_ops[0])))
static const char * dev_name(ggml_backend_dev_t d) { (void) d; return "DEV"; }
static void dev_mem(ggml_backend_dev_t d, size_t * f, size_t * t) { (void) d; *f = *t = 1u << 30; }
static enum ggml_backend_dev_type dev_type(ggml_backend_dev_t d) { (void) d; return GGML_BACKEND_DEVICE_TYPE_GPU; }
static void dev_props(ggml_backend_dev_t d, struct ggml_backend_dev_props * p) {
    memset(p, 0, sizeof(*p));
    p->name = p->description = dev_name(d);
    p->memory_free = p->memory_total = 1u << 30;
    p->type = GGML_BACKEND_DEVICE_TYPE_GPU;
}
static ggml_backend_buffer_type_t dev_buft(ggml_backend_dev_t d) { (void) d; return &buft_d; }
static bool dev_supports_op(ggml_backend_dev_t d, const struct ggml_tensor * t) {
    (void) d;
    for (int i = 0; i < N_OPS; i++) {
        if (k_ops[i] == t->op) {
            return !(g_unsup >> i & 1);
        }
    }
    return true; // NONE and view ops
}
static bool dev_supports_buft(ggml_backend_dev_t d, ggml_backend_buffer_type_t b) {
    (void) d;
    return b == &buft_d;
}
static bool dev_offload_op(ggml_backend_dev_t d, const struct ggml_tensor * t) {
    (void) d;
    return t->op == GGML_OP_MUL_MAT || t->op == GGML_OP_MUL_MAT_ID;
}

static void init_dev(void) {
    buft_d.iface = (struct ggml_backend_buffer_type_i){ buft_name, buft_alloc, buft_align, NULL, NULL, buft_is_host };
    buft_d.device = &dev_d;
    dev_d.iface = (struct ggml_backend_device_i){
        .get_name = dev_name, .get_description = dev_name, .get_memory = dev_mem, .get_type = dev_type,
        .get_props = dev_props, .get_buffer_type = dev_buft, .supports_op = dev_supports_op,
        .supports_buft = dev_supports_buft, .offload_op = dev_offload_op,
    };
    if (g_events) {
        dev_d.iface.event_new = ev_new;
        dev_d.iface.event_free = ev_free;
        dev_d.iface.event_synchronize = ev_sync;
    }
    static ggml_guid guid = { 1 };
    be_d.guid = &guid;
    be_d.device = &dev_d;
    be_d.iface = (struct ggml_backend_i){
        .get_name = be_name, .free = be_free, .graph_compute = be_compute, .synchronize = be_sync,
        .set_tensor_async = be_set_async, .get_tensor_async = be_get_async,
    };
    if (g_async) {
        be_d.iface.cpy_tensor_async = be_cpy_async;
    }
    if (g_events) {
        be_d.iface.event_record = ev_record;
        be_d.iface.event_wait = ev_wait;
    }
}

// ---- graph ----
#define MAXN 64
struct graph {
    struct ggml_context * ctx;
    struct ggml_cgraph *  gf;
    struct ggml_tensor *  in[3];
    struct ggml_tensor *  idx;
    struct ggml_tensor *  eids, *eb;
    struct ggml_tensor *  out[3];
    int                   n_out;
};

static struct ggml_tensor * w_dev, *w_cpu; // weights [8,8], pre-allocated
static struct ggml_tensor * w_moe;         // [8,8,5] experts, in the CPU weight buffer
static ggml_backend_buffer_t wbuf_dev, wbuf_cpu;
static ggml_backend_sched_t g_sched;

static const char * bname(ggml_backend_t b) { return b ? ggml_backend_name(b) : "-"; }

static int  cb_mode;
static int  cb_seen;
static int  cb_magic = 4242;
static bool eval_cb(struct ggml_tensor * t, bool ask, void * ud) {
    if (ud != &cb_magic) {
        printf("    BAD USER DATA\n");
    }
    printf("    %s %s @%s\n", ask ? "ASK" : "SEE", t->name, bname(ggml_backend_sched_get_tensor_backend(g_sched, t)));
    uint32_t h = 0;
    for (const char * s = t->name; *s; s++) {
        h = h * 31 + (uint8_t) *s;
    }
    h ^= (uint32_t) rng_s;
    if (ask) {
        if (cb_mode == 3) {
            return false;
        }
        return h % 3 == 0;
    }
    if (ask == false && t->op != GGML_OP_NONE && t->data) {
        float v;
        ggml_backend_tensor_get(t, &v, 0, sizeof(v));
        printf("    SEEVAL %s %.9g\n", t->name, v);
    }
    cb_seen++;
    if (cb_mode == 2 && (h / 3) % 4 == 0) {
        printf("    STOP\n");
        return false;
    }
    return true;
}

static struct ggml_tensor * pick(struct ggml_tensor ** pool, int n) {
    return pool[rnd() % n];
}

// A random graph; rows: the second dimension of its activations (alternating shapes).
static void build(struct graph * g, uint64_t seed, int rows, bool pre_inputs, ggml_backend_buffer_t * inbuf) {
    uint64_t saved = rng_s;
    rng_s = seed;
    struct ggml_init_params ip = { 1 << 20, NULL, true };
    g->ctx = ggml_init(ip);
    g->gf = ggml_new_graph_custom(g->ctx, 256, false);
    struct ggml_tensor * pool[MAXN];
    int n = 0;
    for (int i = 0; i < 3; i++) {
        g->in[i] = ggml_new_tensor_2d(g->ctx, GGML_TYPE_F32, 8, rows);
        ggml_format_name(g->in[i], "in%d", i);
        ggml_set_input(g->in[i]);
        pool[n++] = g->in[i];
    }
    g->idx = ggml_new_tensor_1d(g->ctx, GGML_TYPE_I32, rows);
    ggml_set_name(g->idx, "idx");
    ggml_set_input(g->idx);
    g->eids = NULL;
    if (getenv("CD_MOE")) {
        g->eids = ggml_new_tensor_2d(g->ctx, GGML_TYPE_I32, 2, rows);
        ggml_set_name(g->eids, "eids");
        ggml_set_input(g->eids);
        g->eb = ggml_new_tensor_3d(g->ctx, GGML_TYPE_F32, 8, 2, rows);
        ggml_set_name(g->eb, "eb");
        ggml_set_input(g->eb);
    }
    if (pre_inputs) {
        *inbuf = ggml_backend_alloc_ctx_tensors_from_buft(g->ctx, ggml_backend_cpu_buffer_type());
    }
    int n_ops = 6 + rnd() % 14;
    int k = 0;
    if (g->eids) {
        struct ggml_tensor * t = ggml_mul_mat_id(g->ctx, w_moe, g->eb, g->eids);
        ggml_set_name(t, "moe");
        t = ggml_cont(g->ctx, ggml_view_2d(g->ctx, t, 8, rows, t->nb[2], 0));
        ggml_set_name(t, "moe_c");
        pool[n++] = t;
        if (rnd() % 2) {
            t = ggml_mul_mat_id(g->ctx, w_moe, g->eb, g->eids);
            ggml_set_name(t, "moe2");
            t = ggml_cont(g->ctx, ggml_view_2d(g->ctx, t, 8, rows, t->nb[2], 0));
            pool[n++] = t;
        }
    }
    for (int i = 0; i < n_ops; i++) {
        struct ggml_tensor * a = pick(pool, n), *b = pick(pool, n), *t = NULL;
        switch (rnd() % 12) {
            case 0: t = ggml_add(g->ctx, a, b); break;
            case 1: t = ggml_mul(g->ctx, a, b); break;
            case 2: t = ggml_sub(g->ctx, a, b); break;
            case 3: t = ggml_scale(g->ctx, a, 0.5f); break;
            case 4: t = ggml_sqr(g->ctx, a); break;
            case 5: t = ggml_mul_mat(g->ctx, rnd() % 2 ? w_dev : w_cpu, a); break;
            case 6: t = ggml_cont(g->ctx, ggml_transpose(g->ctx, a)); t = ggml_cont(g->ctx, ggml_transpose(g->ctx, t)); break;
            case 7: t = ggml_tanh(g->ctx, a); break;
            case 8: {
                struct ggml_tensor * v = ggml_view_2d(g->ctx, a, 8, rows / 2, a->nb[1], 0);
                t = ggml_add(g->ctx, ggml_cont(g->ctx, v), ggml_view_2d(g->ctx, b, 8, rows / 2, b->nb[1], b->nb[1] * (rows - rows / 2)));
                t = ggml_concat(g->ctx, t, t, 1);
                if (t->ne[1] != rows) {
                    t = ggml_add(g->ctx, a, b);
                }
                break;
            }
            case 9: t = ggml_reshape_2d(g->ctx, ggml_cont(g->ctx, a), rows, 8); t = ggml_reshape_2d(g->ctx, ggml_scale(g->ctx, t, 2.0f), 8, rows); break;
            case 10: t = ggml_get_rows(g->ctx, rnd() % 2 ? w_dev : w_cpu, g->idx) ; t = ggml_add(g->ctx, t, a); break;
            default: t = ggml_add(g->ctx, ggml_sqr(g->ctx, a), b); break;
        }
        ggml_format_name(t, "n%d", k++);
        if (n < MAXN) {
            pool[n++] = t;
        }
    }
    g->n_out = 0;
    for (int i = 0; i < 2; i++) {
        struct ggml_tensor * o = pool[n - 1 - i];
        if (o->flags & GGML_TENSOR_FLAG_INPUT) {
            continue;
        }
        ggml_set_output(o);
        ggml_build_forward_expand(g->gf, o);
        g->out[g->n_out++] = o;
    }
    // name unnamed nodes (views, the inner ops) so that logs are stable
    for (int i = 0; i < ggml_graph_n_nodes(g->gf); i++) {
        struct ggml_tensor * t = ggml_graph_node(g->gf, i);
        if (t->name[0] == 0) {
            ggml_format_name(t, "x%d", i);
        }
    }
    rng_s = saved;
}

static void set_inputs(struct graph * g, int rows) {
    for (int i = 0; i < 3; i++) {
        float buf[8 * 16];
        for (int j = 0; j < 8 * rows; j++) {
            buf[j] = (float) ((j * 7 + i * 3) % 11) / 11.0f - 0.3f;
        }
        if (g->in[i]->buffer) {
            ggml_backend_tensor_set(g->in[i], buf, 0, ggml_nbytes(g->in[i]));
        }
    }
    if (g->eids && g->eids->buffer) {
        int32_t e[32];
        for (int j = 0; j < 2 * rows; j++) {
            e[j] = (j % 2) ? 4 : (j / 2) % 3 == 0 ? 0 : 2; // experts 0, 2, 4 used; 1, 3 not
        }
        ggml_backend_tensor_set(g->eids, e, 0, ggml_nbytes(g->eids));
    }
    if (g->eids && g->eb->buffer) {
        float b[8 * 2 * 16];
        for (int j = 0; j < 16 * rows; j++) {
            b[j] = (float) ((j * 5) % 13) / 13.0f - 0.5f;
        }
        ggml_backend_tensor_set(g->eb, b, 0, ggml_nbytes(g->eb));
    }
    int32_t ids[16];
    for (int j = 0; j < rows; j++) {
        ids[j] = (j * 3 + rows) % 8;
    }
    if (g->idx->buffer) {
        ggml_backend_tensor_set(g->idx, ids, 0, ggml_nbytes(g->idx));
    }
}

static void print_outputs(struct graph * g) {
    for (int i = 0; i < g->n_out; i++) {
        struct ggml_tensor * o = g->out[i];
        float buf[8 * 16];
        ggml_backend_tensor_get(o, buf, 0, ggml_nbytes(o));
        double s = 0;
        for (int64_t j = 0; j < ggml_nelements(o); j++) {
            s += buf[j] * (1 + j % 5);
        }
        printf("  OUT %s %.9g %.9g\n", o->name, s, buf[0]);
    }
}

static int g_user;
// Random user assignments: nodes (views included) and leafs, on a backend that runs them.
static void apply_user(struct graph * g, ggml_backend_t * backends) {
    if (!g_user) {
        return;
    }
    uint64_t saved = rng_s;
    rng_s ^= 0x5555;
    int nn = ggml_graph_n_nodes(g->gf), nl = g->gf->n_leafs;
    int k = 1 + rnd() % 3;
    for (int u = 0; u < k; u++) {
        struct ggml_tensor * t;
        if (rnd() % 2) {
            t = ggml_graph_node(g->gf, rnd() % nn);
        } else {
            t = g->gf->leafs[rnd() % nl];
        }
        if (t->buffer || t->view_src) {
            continue;
        }
        int b = rnd() % 2;
        if (b == 0 && !dev_supports_op(&dev_d, t)) {
            continue;
        }
        printf("  USER %s %s\n", t->name, b ? "CPU" : "DEV");
        ggml_backend_sched_set_tensor_backend(g_sched, t, backends[b]);
        printf("  USERGET %s %s\n", t->name, bname(ggml_backend_sched_get_tensor_backend(g_sched, t)));
    }
    rng_s = saved;
}

int main(int argc, char ** argv) {
    int s0 = argc > 1 ? atoi(argv[1]) : 0;
    int s1 = argc > 2 ? atoi(argv[2]) : s0 + 1;
    int parallel = env_int("CD_PARALLEL", 0);
    g_events = env_int("CD_EVENTS", 0);
    g_async = env_int("CD_ASYNC", 0);
    g_host = env_int("CD_HOST", 0);
    cb_mode = env_int("CD_CB", 0);
    int flow = env_int("CD_FLOW", 0);
    int rounds = env_int("CD_ROUNDS", 3);
    g_user = env_int("CD_USER", 0);
    setvbuf(stdout, NULL, _IOLBF, 0);
    init_dev();
    g_priv_cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(g_priv_cpu, 1);
    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, 1);

    for (int seed = s0; seed < s1; seed++) {
        rng_s = (uint64_t) seed * 0x9E3779B97F4A7C15ULL + 1;
        g_unsup = rnd() & rnd() & ((1u << N_OPS) - 1);
        printf("SEED %d unsup=%x\n", seed, g_unsup);
        // weights
        struct ggml_init_params wp = { 1 << 16, NULL, true };
        struct ggml_context * wctx_d = ggml_init(wp), *wctx_c = ggml_init(wp);
        w_dev = ggml_new_tensor_2d(wctx_d, GGML_TYPE_F32, 8, 8);
        ggml_set_name(w_dev, "w_dev");
        w_cpu = ggml_new_tensor_2d(wctx_c, GGML_TYPE_F32, 8, 8);
        ggml_set_name(w_cpu, "w_cpu");
        w_moe = ggml_new_tensor_3d(wctx_c, GGML_TYPE_F32, 8, 8, 5);
        ggml_set_name(w_moe, "w_moe");
        wbuf_dev = ggml_backend_alloc_ctx_tensors_from_buft(wctx_d, &buft_d);
        wbuf_cpu = ggml_backend_alloc_ctx_tensors_from_buft(wctx_c, ggml_backend_cpu_buffer_type());
        ggml_backend_buffer_set_usage(wbuf_dev, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        ggml_backend_buffer_set_usage(wbuf_cpu, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        float wv[64];
        for (int i = 0; i < 64; i++) {
            wv[i] = (float) ((i * 5) % 9) / 9.0f - 0.4f;
        }
        ggml_backend_tensor_set(w_dev, wv, 0, sizeof(wv));
        ggml_backend_tensor_set(w_cpu, wv, 0, sizeof(wv));
        for (int e = 0; e < 5; e++) {
            for (int i = 0; i < 64; i++) {
                wv[i] = (float) ((i * 5 + e * 7) % 9) / 9.0f - 0.4f;
            }
            ggml_backend_tensor_set(w_moe, wv, e * sizeof(wv), sizeof(wv));
        }

        ggml_backend_t backends[2] = { &be_d, cpu };
        g_sched = ggml_backend_sched_new(backends, NULL, 2, 2048, parallel, env_int("CD_OFFLOAD", 1));
        if (cb_mode) {
            ggml_backend_sched_set_eval_callback(g_sched, eval_cb, &cb_magic);
        }
        uint64_t gseed = rng_s;
        if (flow == 4) {
            struct graph m;
            build(&m, gseed, 6, false, NULL);
            size_t sz[2] = { 0, 0 };
            ggml_backend_sched_reserve_size(g_sched, m.gf, sz);
            printf("  RESERVE_SIZE %zu %zu splits=%d\n", sz[0], sz[1], ggml_backend_sched_get_n_splits(g_sched));
            ggml_free(m.ctx);
            build(&m, gseed, 4, false, NULL);
            ggml_backend_sched_split_graph(g_sched, m.gf);
            printf("  SPLIT_ONLY splits=%d\n", ggml_backend_sched_get_n_splits(g_sched));
            ggml_free(m.ctx);
        }
        if (flow == 3) {
            struct graph m;
            build(&m, gseed, 4, false, NULL);
            printf("  RESERVE %d splits=%d\n", ggml_backend_sched_reserve(g_sched, m.gf), ggml_backend_sched_get_n_splits(g_sched));
            printf("  BUFSIZE %zu %zu\n", ggml_backend_sched_get_buffer_size(g_sched, &be_d), ggml_backend_sched_get_buffer_size(g_sched, cpu));
            ggml_free(m.ctx);
        }
        for (int r = 0; r < rounds; r++) {
            int rows = (r % 2 && !getenv("CD_SAME")) ? 6 : 4;
            struct graph g;
            ggml_backend_buffer_t inbuf = NULL;
            bool pre = flow == 1;
            build(&g, gseed, rows, pre, &inbuf);
            printf(" ROUND %d rows=%d nodes=%d\n", r, rows, ggml_graph_n_nodes(g.gf));
            enum ggml_status st;
            if (flow == 1) {
                set_inputs(&g, rows);
                ggml_backend_sched_reset(g_sched);
                apply_user(&g, backends);
                st = ggml_backend_sched_graph_compute(g_sched, g.gf);
            } else {
                ggml_backend_sched_reset(g_sched);
                apply_user(&g, backends);
                bool ok = ggml_backend_sched_alloc_graph(g_sched, g.gf);
                printf("  ALLOC %d splits=%d copies=%d\n", ok, ggml_backend_sched_get_n_splits(g_sched), ggml_backend_sched_get_n_copies(g_sched));
                set_inputs(&g, rows);
                if (flow == 5) {
                    st = ggml_backend_sched_graph_compute_async(g_sched, g.gf);
                    printf("  ASYNC1 %d\n", st);
                    st = ggml_backend_sched_graph_compute_async(g_sched, g.gf);
                    ggml_backend_sched_synchronize(g_sched);
                } else if (flow == 2) {
                    st = ggml_backend_sched_graph_compute_async(g_sched, g.gf);
                    ggml_backend_sched_synchronize(g_sched);
                } else {
                    st = ggml_backend_sched_graph_compute(g_sched, g.gf);
                }
            }
            printf("  STATUS %d splits=%d\n", st, ggml_backend_sched_get_n_splits(g_sched));
            for (int i = 0; i < ggml_graph_n_nodes(g.gf); i++) {
                struct ggml_tensor * t = ggml_graph_node(g.gf, i);
                printf("  NODE %s %s @%s", t->name, ggml_op_desc(t), bname(ggml_backend_sched_get_tensor_backend(g_sched, t)));
                for (int j = 0; j < GGML_MAX_SRC; j++) {
                    if (t->src[j]) {
                        printf(" %s", t->src[j]->name);
                    }
                }
                printf("\n");
            }
            for (int i = 0; i < g.gf->n_leafs; i++) {
                struct ggml_tensor * t = g.gf->leafs[i];
                printf("  LEAF %s @%s\n", t->name, bname(ggml_backend_sched_get_tensor_backend(g_sched, t)));
            }
            print_outputs(&g);
            printf("  BUFSIZE %zu %zu\n", ggml_backend_sched_get_buffer_size(g_sched, &be_d), ggml_backend_sched_get_buffer_size(g_sched, cpu));
            ggml_free(g.ctx);
            if (inbuf) {
                ggml_backend_buffer_free(inbuf);
            }
        }
        ggml_backend_sched_free(g_sched);
        ggml_backend_buffer_free(wbuf_dev);
        ggml_backend_buffer_free(wbuf_cpu);
        ggml_free(wctx_d);
        ggml_free(wctx_c);
    }
    return 0;
}
