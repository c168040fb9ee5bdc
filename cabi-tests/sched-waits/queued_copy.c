// queued_copy.c: does the scheduler finish a queued input copy before the copy's source may
// be overwritten? (src/sched/compute.rs, SplitWaits; docs/sched.md, "One wait per split";
// tests/sched_queued_copy.rs is the same check inside the Rust test suite, on our library
// only; this program runs against any libggml-base, stock's included: run.sh.)
//
// Device TA (GPU type, its own buffer type in host memory) has a backend whose work waits in
// a queue until synchronize (or an event's synchronize), like a GPU that has not reached it:
//   - cpy_tensor_async accepts a source in a host buffer and reads it when the queue runs the
//     copy (as ggml-vulkan's copyBuffer from a pinned host buffer does),
//   - graph_compute and get_tensor_async are queued too.
// Device TCPU (CPU type, CPU buffer type) computes at once.
//
// Graph: user inputs x, y, z (on TCPU), w = x + x on TCPU, v = w + y and out = v + z on TA.
// TA's split inputs: w (queued copy), then y, z (user inputs, blocking copies). With argument
// "last": v = w + w, out = v + v, so w is the split's only (last) input.
//
// Per token, as llama.cpp decodes when it reuses its graph without pipeline parallelism: set
// the inputs, graph_compute_async, queue a get_tensor_async of `out` on TA, no synchronize
// between tokens. After the last token, synchronize and check each token's result.
// PIPELINE=1: a scheduler with pipeline copies, TA with events. CB=1: an eval callback.
//
// Usage: queued_copy [TOKENS [last]]; prints the TA synchronize calls of each token's compute
// and "OK: 0 wrong values" or "FAIL: N wrong values" (exit 0 or 1).

#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 8
#define MAXQ 256

enum op_kind { OP_COPY, OP_ADD };
struct op {
    enum op_kind kind;
    void *       dst;
    const void * a;
    const void * b;
    size_t       n; // bytes for COPY, floats for ADD
};
static struct op q[MAXQ];
static int       nq;
static int       n_sync_a, n_cpy_async;

static void push(struct op o) {
    if (nq >= MAXQ) { fprintf(stderr, "queue full\n"); exit(2); }
    // (the queue only grows; `done` marks what has run)
    q[nq++] = o;
}
static int done; // ops [0, done) have run
static void run_to(int upto) {
    for (int i = done; i < upto; i++) {
        struct op * o = &q[i];
        if (o->kind == OP_COPY) {
            memcpy(o->dst, o->a, o->n);
        } else {
            for (size_t k = 0; k < o->n; k++) {
                ((float *) o->dst)[k] = ((const float *) o->a)[k] + ((const float *) o->b)[k];
            }
        }
    }
    if (upto > done) done = upto;
}
static void drain(void) { run_to(nq); }

static struct ggml_backend_device dev_a, dev_cpu;

static const char * dev_name(ggml_backend_dev_t d) { return d == &dev_a ? "TA" : "TCPU"; }
static const char * be_name(ggml_backend_t b) { return dev_name(b->device); }
static void         be_free(ggml_backend_t b) { free(b); }
static void         dev_memory(ggml_backend_dev_t d, size_t * f, size_t * t) { (void) d; *f = *t = 1u << 30; }
static enum ggml_backend_dev_type dev_type(ggml_backend_dev_t d) {
    return d == &dev_a ? GGML_BACKEND_DEVICE_TYPE_GPU : GGML_BACKEND_DEVICE_TYPE_CPU;
}
static void dev_props(ggml_backend_dev_t d, struct ggml_backend_dev_props * p) {
    p->name = p->description = dev_name(d);
    p->memory_free = p->memory_total = 1u << 30;
    p->type = dev_type(d);
}

// TA's buffer type: CPU buffers relabelled (host memory, but not the CPU buffer type).
static struct ggml_backend_buffer_type buft_a;
static const char * buft_a_name(ggml_backend_buffer_type_t b) { (void) b; return "TA"; }
static ggml_backend_buffer_t buft_a_alloc(ggml_backend_buffer_type_t bt, size_t size) {
    (void) bt;
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), size);
    if (b) b->buft = &buft_a;
    return b;
}
static size_t buft_a_align(ggml_backend_buffer_type_t b) { (void) b; return 32; }
static bool   buft_a_is_host(ggml_backend_buffer_type_t b) { (void) b; return true; }
static struct ggml_backend_buffer_type buft_a = {
    { buft_a_name, buft_a_alloc, buft_a_align, NULL, NULL, buft_a_is_host }, &dev_a, NULL };

static ggml_backend_buffer_type_t dev_buft(ggml_backend_dev_t d) {
    return d == &dev_a ? &buft_a : ggml_backend_cpu_buffer_type();
}
static bool dev_supports_op(ggml_backend_dev_t d, const struct ggml_tensor * t) { (void) d; (void) t; return true; }
static bool dev_supports_buft(ggml_backend_dev_t d, ggml_backend_buffer_type_t b) { return b == dev_buft(d); }

static const struct ggml_backend_device_i dev_iface = {
    .get_name = dev_name, .get_description = dev_name, .get_memory = dev_memory,
    .get_type = dev_type, .get_props = dev_props, .get_buffer_type = dev_buft,
    .supports_op = dev_supports_op, .supports_buft = dev_supports_buft,
};

// TCPU: synchronous ADD.
static enum ggml_status cpu_compute(ggml_backend_t b, struct ggml_cgraph * g) {
    (void) b;
    for (int i = 0; i < ggml_graph_n_nodes(g); i++) {
        struct ggml_tensor * n = ggml_graph_node(g, i);
        if (n->op == GGML_OP_NONE) continue;
        if (n->op != GGML_OP_ADD) return GGML_STATUS_FAILED;
        for (int64_t k = 0; k < ggml_nelements(n); k++) {
            ((float *) n->data)[k] = ((float *) n->src[0]->data)[k] + ((float *) n->src[1]->data)[k];
        }
    }
    return GGML_STATUS_SUCCESS;
}

// TA: everything queued until synchronize.
static enum ggml_status a_compute(ggml_backend_t b, struct ggml_cgraph * g) {
    (void) b;
    for (int i = 0; i < ggml_graph_n_nodes(g); i++) {
        struct ggml_tensor * n = ggml_graph_node(g, i);
        if (n->op == GGML_OP_NONE) continue;
        if (n->op != GGML_OP_ADD) return GGML_STATUS_FAILED;
        push((struct op){ OP_ADD, n->data, n->src[0]->data, n->src[1]->data, (size_t) ggml_nelements(n) });
    }
    return GGML_STATUS_SUCCESS;
}
static void a_sync(ggml_backend_t b) { (void) b; n_sync_a++; drain(); }
static void a_set_async(ggml_backend_t b, struct ggml_tensor * t, const void * data, size_t off, size_t size) {
    (void) b; push((struct op){ OP_COPY, (char *) t->data + off, data, NULL, size });
}
static void a_get_async(ggml_backend_t b, const struct ggml_tensor * t, void * data, size_t off, size_t size) {
    (void) b; push((struct op){ OP_COPY, data, (const char *) t->data + off, NULL, size });
}
static bool a_cpy_async(ggml_backend_t src_b, ggml_backend_t dst_b, const struct ggml_tensor * src, struct ggml_tensor * dst) {
    (void) src_b; (void) dst_b;
    if (!ggml_backend_buffer_is_host(src->buffer) || dst->buffer->buft != &buft_a) return false;
    n_cpy_async++;
    push((struct op){ OP_COPY, dst->data, src->data, NULL, ggml_nbytes(src) });
    return true;
}

struct ev { int seq; };
static int n_ev_sync, n_ev_wait;
static ggml_backend_event_t ev_new(ggml_backend_dev_t d) {
    ggml_backend_event_t e = calloc(1, sizeof(*e));
    e->device = d;
    e->context = calloc(1, sizeof(struct ev));
    return e;
}
static void ev_free(ggml_backend_dev_t d, ggml_backend_event_t e) { (void) d; free(e->context); free(e); }
static void ev_sync(ggml_backend_dev_t d, ggml_backend_event_t e) { (void) d; n_ev_sync++; run_to(((struct ev *) e->context)->seq); }
static void ev_record(ggml_backend_t b, ggml_backend_event_t e) { (void) b; ((struct ev *) e->context)->seq = nq; }
static void ev_wait(ggml_backend_t b, ggml_backend_event_t e) { (void) b; (void) e; n_ev_wait++; /* in-order queue: nothing to do */ }

static ggml_backend_t new_backend(ggml_backend_dev_t d) {
    ggml_backend_t b = calloc(1, sizeof(*b));
    b->device = d;
    b->iface.get_name = be_name;
    b->iface.free = be_free;
    if (d == &dev_a) {
        b->iface.graph_compute = a_compute;
        b->iface.synchronize = a_sync;
        b->iface.set_tensor_async = a_set_async;
        b->iface.get_tensor_async = a_get_async;
        b->iface.cpy_tensor_async = a_cpy_async;
        b->iface.event_record = ev_record;
        b->iface.event_wait = ev_wait;
    } else {
        b->iface.graph_compute = cpu_compute;
    }
    return b;
}

static bool cb_eval(struct ggml_tensor * t, bool ask, void * ud) { (void) t; (void) ud; return ask ? false : true; }

int main(int argc, char ** argv) {
    (void) argv;
    int n_tokens = argc > 1 ? atoi(argv[1]) : 3;
    dev_a.iface = dev_iface;
    dev_cpu.iface = dev_iface;
    int parallel = getenv("PIPELINE") != NULL;
    if (parallel) {
        dev_a.iface.event_new = ev_new;
        dev_a.iface.event_free = ev_free;
        dev_a.iface.event_synchronize = ev_sync;
    }
    ggml_backend_t backends[2] = { new_backend(&dev_a), new_backend(&dev_cpu) };
    ggml_backend_sched_t sched = ggml_backend_sched_new(backends, NULL, 2, 64, parallel, false);

    struct ggml_init_params ip = { 16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N); ggml_set_input(x);
    struct ggml_tensor * y = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N); ggml_set_input(y);
    struct ggml_tensor * z = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N); ggml_set_input(z);
    struct ggml_tensor * w = ggml_add(ctx, x, x);
    // "last": the queued copy is the split's only (last) input: v = w + w, out = v + v,
    // out = 8x; y and z are set but not in the graph.
    int last = argc > 2 && strcmp(argv[2], "last") == 0;
    struct ggml_tensor * v = last ? ggml_add(ctx, w, w) : ggml_add(ctx, w, y);
    struct ggml_tensor * out = last ? ggml_add(ctx, v, v) : ggml_add(ctx, v, z);
    ggml_set_output(out);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);

    ggml_backend_sched_reset(sched);
    ggml_backend_sched_set_tensor_backend(sched, w, backends[1]);
    ggml_backend_sched_set_tensor_backend(sched, v, backends[0]);
    ggml_backend_sched_set_tensor_backend(sched, out, backends[0]);
    if (!ggml_backend_sched_alloc_graph(sched, gf)) { fprintf(stderr, "alloc failed\n"); return 2; }
    if (getenv("CB")) ggml_backend_sched_set_eval_callback(sched, cb_eval, NULL);
    printf("splits %d\n", ggml_backend_sched_get_n_splits(sched));

    float results[16][N];
    for (int t = 0; t < n_tokens; t++) {
        float xs[N], ys[N], zs[N];
        for (int k = 0; k < N; k++) {
            xs[k] = 1.0f + k + 1000.0f * t;
            ys[k] = 100.0f + 10.0f * t;
            zs[k] = 10000.0f + 100000.0f * t;
        }
        ggml_backend_tensor_set(x, xs, 0, sizeof xs);
        if (!last) {
            ggml_backend_tensor_set(y, ys, 0, sizeof ys);
            ggml_backend_tensor_set(z, zs, 0, sizeof zs);
        }
        int s0 = n_sync_a;
        enum ggml_status st = ggml_backend_sched_graph_compute_async(sched, gf);
        if (st != GGML_STATUS_SUCCESS) { fprintf(stderr, "compute failed\n"); return 2; }
        printf("token %d: TA synchronize calls in compute %d, queued copies so far %d, ops still queued %d\n",
               t, n_sync_a - s0, n_cpy_async, nq - done);
        // as llama.cpp extracts logits: queued on the output's backend, no synchronize
        ggml_backend_tensor_get_async(backends[0], out, results[t], 0, sizeof results[t]);
    }
    ggml_backend_sched_synchronize(sched);

    int bad = 0;
    for (int t = 0; t < n_tokens; t++) {
        for (int k = 0; k < N; k++) {
            float want = last ? 8.0f * (1.0f + k + 1000.0f * t) : 2.0f * (1.0f + k + 1000.0f * t) + 100.0f + 10.0f * t + 10000.0f + 100000.0f * t;
            if (results[t][k] != want) {
                if (bad < 2) printf("token %d element %d: got %g want %g\n", t, k, results[t][k], want);
                bad++;
            }
        }
    }
    printf("%s: %d wrong values\n", bad ? "FAIL" : "OK", bad);
    ggml_backend_sched_free(sched);
    ggml_free(ctx);
    return bad ? 1 : 0;
}
