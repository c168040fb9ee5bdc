// sched_diff.c - scheduler differential test driver (see docs/sched-diff.md).
//
// For every seed of a range this program defines 2 to 4 test backends through the
// ggml-backend-impl.h interfaces, builds a random graph, hands it to the public
// ggml_backend_sched_* API of whatever libggml-base.so.0 the dynamic loader picked, and
// prints what the scheduler decided as deterministic text (never a pointer). Running the
// same seeds against two libraries and diffing the text is the differential test; the
// Rust runner `sched-diff` does that.
//
// Usage: sched_diff START COUNT
// Environment: SCHED_DIFF_PERTURB=K perturbs every seed divisible by K (self-test of the
// detector: an unprinted user backend assignment the normal run does not make);
// SCHED_DIFF_MAPS=1 first prints `MAPPED <path>` for each mapped file named *ggml*, then
// `SYMBOL <name> <path>` for each scheduler and allocator function the run depends on: the
// file that provides it as the loader resolves it (dlsym(RTLD_DEFAULT) + dladdr), which
// an LD_PRELOAD'ed library would win;
// SCHED_DIFF_CRASH_SEED=S raises SIGSEGV inside seed S (self-test of crash isolation);
// SCHED_DIFF_ONLY=S1,S2,... runs only the listed seeds of the range (the runner's rerun of
// arm B with the in-place rule off, for the seeds that need it; each seed's output does not
// depend on which seeds ran before it).
//
// Output grammar (one record per line, fields separated by single spaces):
//   SEED <s> BEGIN                      start of a seed's block
//   CONFIG ...                          seed-level choices (backends, parallel, offload,
//                                       reserve first, rounds, the second round's graph)
//   DEV <i> <name> ...                  one test device and its capabilities
//   ALLOCBUF <buft> <size> buf=<buft>#<k>   a test buffer type allocated a buffer, its
//                                       k-th in this seed (from 0, freed ones counted)
//   RESERVE ok|fail                     ggml_backend_sched_reserve on graph variant 0
//   ROUND <k>                           k-th allocation+compute on the same scheduler
//   GRAPH variant=<v> ops=<n> inplace=<0|1>   a graph is being built
//   PRE <name> <type> <ne> <buft> <usage>   a pre-allocated tensor (weight or cache)
//   USER <node> <backend>               ggml_backend_sched_set_tensor_backend call
//   ALLOC ok|fail                       result of ggml_backend_sched_alloc_graph
//   LEAF <i> <name> <backend> <buft>    graph leaves in first-use order
//   NODE <i> <name> <op> <backend> s<j>=<src>@<backend>[-><current src name>] ...
//   DATA <name> <buft>#<k>|<buft>#?|- <offset>|- [pre] [view=<view_src>]
//                                       where a tensor's data lives after allocation: after
//                                       each LEAF and NODE line, that tensor, then (once
//                                       each) the split-input copies the node now reads.
//                                       Buffer as in ALLOCBUF (#? a buffer no test buffer
//                                       type allocated: ggml's zero-size dummy), offset =
//                                       data - ggml_backend_buffer_get_base(buffer) in bytes
//                                       (a view's lies in its view source's buffer), `- -`
//                                       without data; pre: a buffer whose usage is not
//                                       COMPUTE (pre-allocated weight or cache)
//   INPLACE <i> <name> <op> node=<b> root=<name> root_backend=<b> root_buft=<t>
//           root_alloc=pre|sched|reused|none usable=yes|no|unknown rule=ok|violated|unknown
//   READ <i> <name> node=<b> src=<name> root=<name> root_backend=<b> root_buft=<t>
//           usable=yes|no rule=ok|violated    a node's read of memory its backend cannot use,
//                                       by where it is (usable) or by the scheduler's
//                                       placement of the root (rule); only failing reads
//   VIEWCOPY <i> <name> node=<b> src=<view> view_backend=<b> root=<name> root_backend=<b>
//           root_buft=<t>               a node reads a split-input copy of a view whose root
//                                       its backend could use (stale when the reader's split
//                                       computes the root, needless otherwise)
//   REREAD <i> <name> copy=<copy> src=<source> writer=<name>   a node reads a split-input
//                                       copy that an earlier node read first, and an
//                                       in-place writer of the source's root ran in
//                                       between: stale unless the COMPUTE trace fills the
//                                       copy again between the writer and the reader
//   SPLITS <n> COPIES <n>
//   BUFSIZE <backend> <bytes>
//   ASK <name> / SEE <name>             eval callback calls, in order
//   RUN <backend> <n>: <names>          a test backend's graph_compute call
//   SET|GET|CPY|MEMSET|CLEAR ...        tensor data traffic through test buffers
//   STATUS <n>                          result of ggml_backend_sched_graph_compute
//   SEED <s> END
//   ABORT <message>                     ggml_abort was called (the process then dies)
//
// The INPLACE marker: one line per node that writes into storage it does not own (its
// result is a view, view_src != NULL, and its op is not a pure view op). usable=no means
// the backend that runs the node cannot use the buffer type its view root actually lives
// in (the write would go through a pointer the backend cannot use). rule=violated means
// the scheduler's placement breaks the in-place co-location rule of our scheduler
// (docs/sched-diff.md), judged with the buffer type the scheduler gave the root's backend:
// a writer that cannot use it, or a writer of graph-produced storage on another backend
// than the producer's unless that buffer type is host-addressable and usable by it.
// root_alloc tells where the root's memory came from: pre-allocated (pre), the
// scheduler's buffer for the root's backend (sched), or ggml-alloc's in-place reuse of a
// parent's memory in another backend's buffer (reused) - the one case where usable and
// rule can disagree.

// dladdr and RTLD_DEFAULT (glibc)
#define _GNU_SOURCE

#include "ggml-alloc.h"
#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml.h"

#include "fake_backend.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEV 4
#define GRAPH_SIZE 1024
#define MAX_T 512
#define MAX_PRE 128

// ---------------------------------------------------------------------------------------
// deterministic random numbers (splitmix64)

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t * r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int rng_int(rng_t * r, int lo, int hi) {
    return lo + (int) (rng_next(r) % (uint64_t) (hi - lo + 1));
}

static bool rng_pct(rng_t * r, int pct) {
    return (int) (rng_next(r) % 100) < pct;
}

// ---------------------------------------------------------------------------------------
// test devices

enum sup_mode { SUP_NO, SUP_YES, SUP_EVEN0, SUP_SMALL };

struct tdev {
    int           index;
    bool          is_cpu;
    char          name[16];
    char          buft_name[24];
    unsigned char sup[GGML_OP_COUNT];
    bool          offload[GGML_OP_COUNT];
    bool          has_offload;
    int           offload_min_rows;
    bool          host_bufts; // may use other devices' host-addressable buffer types
    unsigned      peer_mask;  // may use these devices' device-local buffer types
    bool          buft_host;
    size_t        align;
    bool          reorder; // its graph_optimize reorders the nodes of its splits

    struct fake_dev * fd; // its buffer type, device and backend (cabi-tests/common)
};

static struct tdev     g_devs[MAX_DEV];
static int             g_ndev;
static struct fake_reg g_reg;

static bool is_view_op(enum ggml_op op) {
    return op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE || op == GGML_OP_TRANSPOSE;
}

static struct tdev * dev_of_buft(ggml_backend_buffer_type_t buft) {
    struct fake_dev * f = fake_dev_of_buft(&g_reg, buft);
    return f ? (struct tdev *) f->desc.user : NULL;
}

static const struct tdev * tdev_of_backend(ggml_backend_t backend) {
    return (const struct tdev *) fake_dev_of_backend(backend)->desc.user;
}

static bool tdev_supports_op_impl(const struct tdev * d, const struct ggml_tensor * op) {
    if (d->is_cpu) {
        return true;
    }
    switch (d->sup[op->op]) {
        case SUP_YES:
            return true;
        case SUP_EVEN0:
            return op->ne[0] % 2 == 0;
        case SUP_SMALL:
            return ggml_nelements(op) <= 64;
        default:
            return false;
    }
}

static bool tdev_supports_buft_impl(const struct tdev * d, ggml_backend_buffer_type_t buft) {
    if (buft == &d->fd->buft) {
        return true;
    }
    const struct tdev * o = dev_of_buft(buft);
    if (o == NULL) {
        return false;
    }
    if (o->buft_host && (d->is_cpu || d->host_bufts)) {
        return true;
    }
    return (d->peer_mask & (1u << o->index)) != 0;
}

// buffers: plain host memory; every data transfer is logged (FAKE_ALLOC_HEAP, log)

static const char * buf_name(ggml_backend_buffer_t buffer) {
    return buffer ? ggml_backend_buft_name(buffer->buft) : "-";
}

// backends: compute nothing, log what they are asked to run (log)

// Some devices reorder their splits in graph_optimize, as Vulkan and Metal do: in place,
// pairwise, adjacent nodes where the second does not read the first swap places. The
// scheduler must then find each node's backend by the node, not by its old position.
static void tbe_graph_optimize(const struct fake_dev * dev, struct ggml_cgraph * cgraph) {
    (void) dev;
    struct ggml_tensor ** nodes = ggml_graph_nodes(cgraph);
    int                   n     = ggml_graph_n_nodes(cgraph);
    for (int i = 0; i + 1 < n; i += 2) {
        struct ggml_tensor * a     = nodes[i];
        struct ggml_tensor * b     = nodes[i + 1];
        bool                 reads = b->view_src == a;
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            reads = reads || b->src[j] == a;
        }
        if (!reads) {
            nodes[i]     = b;
            nodes[i + 1] = a;
        }
    }
}

// devices: the fake device's callbacks, answered from the drawn capabilities

static bool tdev_supports_op(const struct fake_dev * dev, const struct ggml_tensor * op) {
    return tdev_supports_op_impl((const struct tdev *) dev->desc.user, op);
}

static bool tdev_supports_buft(const struct fake_dev * dev, ggml_backend_buffer_type_t buft) {
    return tdev_supports_buft_impl((const struct tdev *) dev->desc.user, buft);
}

static bool tdev_offload_op(const struct fake_dev * dev, const struct ggml_tensor * op) {
    const struct tdev * d = (const struct tdev *) dev->desc.user;
    return d->offload[op->op] && op->ne[1] >= d->offload_min_rows;
}

// ops the generator can emit; devices draw their support from this list
static const enum ggml_op k_gen_ops[] = {
    GGML_OP_ADD,      GGML_OP_SUB,     GGML_OP_MUL,      GGML_OP_DIV,      GGML_OP_MUL_MAT, GGML_OP_GET_ROWS,
    GGML_OP_RMS_NORM, GGML_OP_NORM,    GGML_OP_SOFT_MAX, GGML_OP_SCALE,    GGML_OP_CPY,     GGML_OP_CONT,
    GGML_OP_SET_ROWS, GGML_OP_FILL,    GGML_OP_ACC,      GGML_OP_SET,      GGML_OP_CONCAT,  GGML_OP_GLU,
    GGML_OP_UNARY,    GGML_OP_DUP,     GGML_OP_MUL_MAT_ID,
};

static void setup_devices(rng_t * r, int n) {
    static const size_t aligns[] = { 16, 32, 64, 128, 256 };

    memset(g_devs, 0, sizeof(g_devs));
    g_ndev = n;
    fake_reg_init(&g_reg, "SCHED_DIFF");

    for (int i = 0; i < n; i++) {
        struct tdev * d = &g_devs[i];
        d->index        = i;
        d->is_cpu       = (i == n - 1);
        if (d->is_cpu) {
            snprintf(d->name, sizeof(d->name), "TCPU");
        } else {
            snprintf(d->name, sizeof(d->name), "T%d", i);
        }
        snprintf(d->buft_name, sizeof(d->buft_name), "%s_BUF", d->name);

        d->sup[GGML_OP_NONE]      = SUP_YES;
        d->sup[GGML_OP_VIEW]      = SUP_YES;
        d->sup[GGML_OP_RESHAPE]   = SUP_YES;
        d->sup[GGML_OP_PERMUTE]   = SUP_YES;
        d->sup[GGML_OP_TRANSPOSE] = SUP_YES;
        if (!d->is_cpu) {
            for (size_t k = 0; k < sizeof(k_gen_ops) / sizeof(k_gen_ops[0]); k++) {
                int p = rng_int(r, 0, 99);
                d->sup[k_gen_ops[k]] = p < 55 ? SUP_YES : p < 70 ? SUP_EVEN0 : p < 80 ? SUP_SMALL : SUP_NO;
            }
            d->buft_host   = rng_pct(r, 25);
            d->host_bufts  = rng_pct(r, 50);
            d->has_offload = rng_pct(r, 40);
            if (d->has_offload) {
                for (size_t k = 0; k < sizeof(k_gen_ops) / sizeof(k_gen_ops[0]); k++) {
                    bool mm                  = k_gen_ops[k] == GGML_OP_MUL_MAT || k_gen_ops[k] == GGML_OP_MUL_MAT_ID;
                    d->offload[k_gen_ops[k]] = rng_pct(r, mm ? 80 : 15);
                }
                d->offload_min_rows = rng_int(r, 1, 6);
            }
            for (int o = 0; o < n - 1; o++) {
                if (o != i && rng_pct(r, 15)) {
                    d->peer_mask |= 1u << o;
                }
            }
        } else {
            d->buft_host = true;
        }
        d->align = aligns[rng_int(r, 0, 4)];
        // Read from the generator's state without drawing, so that every other choice of a
        // seed stays what it was before reordering devices existed.
        d->reorder = !d->is_cpu && (r->s >> 17) % 3 == 0;

        struct fake_dev_desc desc = {
            .name           = d->name,
            .buft_name      = d->buft_name,
            .description    = d->is_cpu ? "sched-diff CPU-like test device" : "sched-diff test device",
            .type           = d->is_cpu ? GGML_BACKEND_DEVICE_TYPE_CPU : GGML_BACKEND_DEVICE_TYPE_GPU,
            .alignment      = d->align,
            .host           = d->buft_host,
            .memory         = (size_t) 1 << 30,
            .alloc          = FAKE_ALLOC_HEAP,
            .log            = true,
            .supports_op    = tdev_supports_op,
            .supports_buft  = tdev_supports_buft,
            .offload_op     = d->has_offload ? tdev_offload_op : NULL,
            .graph_optimize = d->reorder ? tbe_graph_optimize : NULL,
            .user           = d,
        };
        desc.guid[0] = 0x5d;
        desc.guid[1] = (uint8_t) i;
        d->fd        = fake_reg_add(&g_reg, &desc);
    }
}

static void print_devices(void) {
    for (int i = 0; i < g_ndev; i++) {
        const struct tdev * d = &g_devs[i];
        printf("DEV %d %s buft=%s host=%d align=%zu host_bufts=%d peers=%u offload=%d/%d reorder=%d sup=", i,
               d->name, d->buft_name, d->buft_host, d->align, d->host_bufts, d->peer_mask, d->has_offload,
               d->offload_min_rows, d->reorder);
        for (size_t k = 0; k < sizeof(k_gen_ops) / sizeof(k_gen_ops[0]); k++) {
            printf("%c", d->is_cpu ? 'Y' : "NYES"[d->sup[k_gen_ops[k]]]);
        }
        printf("\n");
    }
}

// ---------------------------------------------------------------------------------------
// random graph generator

struct gen {
    rng_t                 r;
    struct ggml_context * ctx;
    int                   counter;

    struct ggml_tensor * vals[MAX_T]; // F32 values usable as operands
    int                  nvals;

    struct ggml_tensor * made[MAX_T]; // op results in creation order
    bool                 used[MAX_T];
    int                  nmade;

    struct ggml_tensor * weights[MAX_PRE];
    int                  nweights;

    struct ggml_context * pre_ctx[MAX_PRE];
    ggml_backend_buffer_t pre_buf[MAX_PRE];
    int                   npre;

    bool inplace; // in-place writers into graph-produced storage allowed in this seed

    struct ggml_tensor * ids[MAX_T]; // MUL_MAT_ID expert lists, filled after allocation
    int                  ids_experts[MAX_T];
    int                  nids;

    struct ggml_tensor * user_node[2]; // user backend assignments, part of the graph
    int                  user_dev[2];
    int                  nuser;
};

static void mark_used(struct gen * g, const struct ggml_tensor * t) {
    for (int i = 0; i < g->nmade; i++) {
        if (g->made[i] == t) {
            g->used[i] = true;
        }
    }
}

static void add_val(struct gen * g, struct ggml_tensor * t) {
    if (g->nvals < MAX_T && t->type == GGML_TYPE_F32) {
        g->vals[g->nvals++] = t;
    }
}

// records an op result: names it, marks its sources used, makes it an operand candidate
static struct ggml_tensor * made(struct gen * g, struct ggml_tensor * t, bool as_val) {
    ggml_format_name(t, "t%d", g->counter++);
    for (int j = 0; j < GGML_MAX_SRC; j++) {
        if (t->src[j]) {
            mark_used(g, t->src[j]);
        }
    }
    if (g->nmade < MAX_T) {
        g->made[g->nmade]   = t;
        g->used[g->nmade++] = false;
    }
    if (as_val) {
        add_val(g, t);
    }
    return t;
}

static struct ggml_tensor * pick_val(struct gen * g) {
    if (g->nvals == 0) {
        return NULL;
    }
    if (rng_pct(&g->r, 70)) {
        int back = rng_int(&g->r, 0, g->nvals - 1 < 5 ? g->nvals - 1 : 5);
        return g->vals[g->nvals - 1 - back];
    }
    return g->vals[rng_int(&g->r, 0, g->nvals - 1)];
}

static int64_t pick_ne0(rng_t * r) {
    static const int64_t v[] = { 2, 4, 6, 8, 16 };
    return v[rng_int(r, 0, 4)];
}

// a tensor in a graph leaf (allocated by the scheduler)
static struct ggml_tensor * new_leaf(struct gen * g, enum ggml_type type, const int64_t ne[4], bool input) {
    struct ggml_tensor * t = ggml_new_tensor(g->ctx, type, 4, ne);
    ggml_format_name(t, "%c%d", input ? 'i' : 'l', g->counter++);
    if (input) {
        ggml_set_input(t);
    }
    return t;
}

static const char * usage_name(enum ggml_backend_buffer_usage u) {
    return u == GGML_BACKEND_BUFFER_USAGE_WEIGHTS ? "weights" : u == GGML_BACKEND_BUFFER_USAGE_COMPUTE ? "compute" : "any";
}

// a tensor pre-allocated in its own buffer of device `dev`'s buffer type
static struct ggml_tensor * new_pre(struct gen * g, enum ggml_type type, const int64_t ne[4], int dev,
                                    enum ggml_backend_buffer_usage usage) {
    if (g->npre >= MAX_PRE) {
        return NULL;
    }
    struct ggml_init_params p   = { ggml_tensor_overhead() * 2, NULL, true };
    struct ggml_context *   ctx = ggml_init(p);
    struct ggml_tensor *    t   = ggml_new_tensor(ctx, type, 4, ne);
    ggml_format_name(t, "%c%d", usage == GGML_BACKEND_BUFFER_USAGE_WEIGHTS ? 'w' : 'c', g->counter++);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, &g_devs[dev].fd->buft);
    if (buf == NULL) {
        printf("PREFAIL %s\n", t->name);
        ggml_free(ctx);
        return NULL;
    }
    ggml_backend_buffer_set_usage(buf, usage);
    g->pre_ctx[g->npre]   = ctx;
    g->pre_buf[g->npre++] = buf;
    printf("PRE %s %s [%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "] %s %s\n", t->name, ggml_type_name(type),
           ne[0], ne[1], ne[2], ne[3], g_devs[dev].buft_name, usage_name(usage));
    if (usage == GGML_BACKEND_BUFFER_USAGE_WEIGHTS && g->nweights < MAX_PRE) {
        g->weights[g->nweights++] = t;
    }
    return t;
}

// a device whose buffer type some backend can both use and run `op` on (always exists:
// the CPU-like device can use its own buffer type and runs every op)
static int writable_dev(struct gen * g, enum ggml_op op) {
    int cand[MAX_DEV];
    int nc = 0;
    for (int d = 0; d < g_ndev; d++) {
        bool ok = false;
        for (int b = 0; b < g_ndev && !ok; b++) {
            ok = tdev_supports_buft_impl(&g_devs[b], &g_devs[d].fd->buft) &&
                 (g_devs[b].is_cpu || g_devs[b].sup[op] == SUP_YES);
        }
        if (ok) {
            cand[nc++] = d;
        }
    }
    return cand[rng_int(&g->r, 0, nc - 1)];
}

// in-place writers only target storage the scheduler allocates; pre-allocated caches are
// written by CPY and SET_ROWS only, into a buffer type some backend can write
// in seeds without in-place mode nothing writes into storage produced in the graph
static bool may_write(const struct gen * g, const struct ggml_tensor * t) {
    const struct ggml_tensor * root = t->view_src ? t->view_src : t;
    return g->inplace && root->buffer == NULL;
}

static struct ggml_tensor * find_val(struct gen * g, const struct ggml_tensor * like, int free_dim, bool contig) {
    int start = rng_int(&g->r, 0, g->nvals > 0 ? g->nvals - 1 : 0);
    for (int k = 0; k < g->nvals; k++) {
        struct ggml_tensor * c = g->vals[(start + k) % g->nvals];
        bool                 ok = true;
        for (int d = 0; d < 4 && ok; d++) {
            ok = d == free_dim || c->ne[d] == like->ne[d];
        }
        if (ok && (!contig || ggml_is_contiguous(c))) {
            return c;
        }
    }
    return NULL;
}

static struct ggml_tensor * gen_weight(struct gen * g, int64_t ne0, int64_t ne1) {
    for (int k = 0; k < g->nweights; k++) {
        struct ggml_tensor * w = g->weights[k];
        if (w->ne[0] == ne0 && (ne1 == 0 || w->ne[1] == ne1) && w->ne[2] == 1 && rng_pct(&g->r, 40)) {
            return w;
        }
    }
    int64_t ne[4] = { ne0, ne1 ? ne1 : pick_ne0(&g->r), 1, 1 };
    // one draw per statement: argument evaluation order is unspecified in C
    enum ggml_type type = rng_pct(&g->r, 30) ? GGML_TYPE_F16 : GGML_TYPE_F32;
    int            dev  = rng_int(&g->r, 0, g_ndev - 1);
    return new_pre(g, type, ne, dev, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
}

static struct ggml_tensor * op_unary(struct gen * g, struct ggml_tensor * a) {
    bool inplace = may_write(g, a) && rng_pct(&g->r, 25);
    switch (rng_int(&g->r, 0, 5)) {
        case 0:
            // SCALE wants dense rows-of-rows: unit element stride, planes packed
            if (a->nb[0] != ggml_type_size(a->type) || a->nb[2] != a->nb[1] * (size_t) a->ne[1] ||
                a->nb[3] != a->nb[2] * (size_t) a->ne[2]) {
                return NULL;
            }
            return inplace ? ggml_scale_inplace(g->ctx, a, 0.5f) : ggml_scale(g->ctx, a, 0.5f);
        case 1:
            return inplace ? ggml_rms_norm_inplace(g->ctx, a, 1e-5f) : ggml_rms_norm(g->ctx, a, 1e-5f);
        case 2:
            return inplace ? ggml_norm_inplace(g->ctx, a, 1e-5f) : ggml_norm(g->ctx, a, 1e-5f);
        case 3:
            if (!ggml_is_contiguous_rows(a)) {
                return NULL;
            }
            return inplace ? ggml_silu_inplace(g->ctx, a) : ggml_silu(g->ctx, a);
        case 4:
            if (!ggml_is_contiguous_rows(a)) {
                return NULL;
            }
            return inplace ? ggml_gelu_inplace(g->ctx, a) : ggml_gelu(g->ctx, a);
        default:
            if (!ggml_is_contiguous(a)) {
                return NULL;
            }
            return inplace ? ggml_soft_max_inplace(g->ctx, a) : ggml_soft_max(g->ctx, a);
    }
}

static struct ggml_tensor * op_binary(struct gen * g, struct ggml_tensor * a) {
    struct ggml_tensor * b = NULL;
    int                  p = rng_int(&g->r, 0, 99);
    if (p < 50) {
        b = find_val(g, a, -1, false);
    } else if (p < 80) {
        b = gen_weight(g, a->ne[0], 1);
        if (b && b->ne[1] != 1) {
            b = NULL;
        }
    }
    if (b == NULL) {
        int64_t ne[4] = { a->ne[0], a->ne[1], a->ne[2], a->ne[3] };
        b             = new_leaf(g, GGML_TYPE_F32, ne, true);
    }
    bool inplace = may_write(g, a) && rng_pct(&g->r, 20);
    switch (rng_int(&g->r, 0, 3)) {
        case 0:
            return inplace ? ggml_add_inplace(g->ctx, a, b) : ggml_add(g->ctx, a, b);
        case 1:
            return inplace ? ggml_mul_inplace(g->ctx, a, b) : ggml_mul(g->ctx, a, b);
        case 2:
            return inplace ? ggml_sub_inplace(g->ctx, a, b) : ggml_sub(g->ctx, a, b);
        default:
            return inplace ? ggml_div_inplace(g->ctx, a, b) : ggml_div(g->ctx, a, b);
    }
}

static struct ggml_tensor * op_mul_mat(struct gen * g, struct ggml_tensor * b) {
    struct ggml_tensor * a = NULL;
    if (rng_pct(&g->r, 30)) {
        int start = rng_int(&g->r, 0, g->nvals - 1);
        for (int k = 0; k < g->nvals && a == NULL; k++) {
            struct ggml_tensor * c = g->vals[(start + k) % g->nvals];
            if (c->ne[0] == b->ne[0] && b->ne[2] % c->ne[2] == 0 && b->ne[3] % c->ne[3] == 0 && !ggml_is_transposed(c)) {
                a = c;
            }
        }
    }
    if (a == NULL) {
        a = gen_weight(g, b->ne[0], 0);
    }
    if (a == NULL || a->ne[0] != b->ne[0] || b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0 ||
        ggml_is_transposed(a)) {
        return NULL;
    }
    return ggml_mul_mat(g->ctx, a, b);
}

// an index input (GET_ROWS, SET_ROWS) of n entries
static struct ggml_tensor * new_index(struct gen * g, int64_t n, enum ggml_type type) {
    int64_t ne[4] = { n, 1, 1, 1 };
    return new_leaf(g, type, ne, true);
}

static struct ggml_tensor * op_get_rows(struct gen * g) {
    struct ggml_tensor * a = NULL;
    if (rng_pct(&g->r, 35)) {
        struct ggml_tensor * c = pick_val(g);
        if (c && c->ne[2] == 1 && c->ne[3] == 1) {
            a = c;
        }
    }
    if (a == NULL) {
        int64_t ne[4] = { pick_ne0(&g->r), 0, 1, 1 };
        ne[1]         = rng_int(&g->r, 4, 32);
        enum ggml_type type = rng_pct(&g->r, 30) ? GGML_TYPE_F16 : GGML_TYPE_F32;
        int            dev  = rng_int(&g->r, 0, g_ndev - 1);
        a                   = new_pre(g, type, ne, dev, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        if (a == NULL) {
            return NULL;
        }
    }
    struct ggml_tensor * idx = new_index(g, rng_int(&g->r, 1, 8), GGML_TYPE_I32);
    return ggml_get_rows(g->ctx, a, idx);
}

static struct ggml_tensor * op_concat(struct gen * g, struct ggml_tensor * a) {
    int                  dim = rng_int(&g->r, 0, 2);
    struct ggml_tensor * b   = find_val(g, a, dim, false);
    if (b == NULL || rng_pct(&g->r, 30)) {
        int64_t ne[4] = { a->ne[0], a->ne[1], a->ne[2], a->ne[3] };
        ne[dim]       = rng_int(&g->r, 1, 4);
        b             = new_leaf(g, GGML_TYPE_F32, ne, true);
    }
    return ggml_concat(g->ctx, a, b, dim);
}

static struct ggml_tensor * op_glu(struct gen * g, struct ggml_tensor * a) {
    if (!ggml_is_contiguous_1(a)) {
        return NULL;
    }
    if (a->ne[0] % 2 == 0 && rng_pct(&g->r, 50)) {
        return rng_pct(&g->r, 50) ? ggml_swiglu(g->ctx, a) : ggml_geglu(g->ctx, a);
    }
    struct ggml_tensor * b = find_val(g, a, -1, false);
    if (b == NULL || !ggml_is_contiguous_1(b)) {
        return NULL;
    }
    return rng_pct(&g->r, 50) ? ggml_swiglu_split(g->ctx, a, b) : ggml_geglu_split(g->ctx, a, b);
}

static struct ggml_tensor * op_reshape(struct gen * g, struct ggml_tensor * a) {
    if (!ggml_is_contiguous(a)) {
        return NULL;
    }
    int64_t n = ggml_nelements(a);
    int64_t divs[64];
    int     nd = 0;
    for (int64_t d = 1; d <= n && nd < 64; d++) {
        if (n % d == 0) {
            divs[nd++] = d;
        }
    }
    int64_t ne0 = divs[rng_int(&g->r, 0, nd - 1)];
    int64_t rest = n / ne0;
    if (rng_pct(&g->r, 50)) {
        return ggml_reshape_2d(g->ctx, a, ne0, rest);
    }
    int64_t ne1 = 1;
    for (int64_t d = 1; d <= rest; d++) {
        if (rest % d == 0 && rng_pct(&g->r, 40)) {
            ne1 = d;
        }
    }
    return ggml_reshape_3d(g->ctx, a, ne0, ne1, rest / ne1);
}

static struct ggml_tensor * op_view(struct gen * g, struct ggml_tensor * a) {
    if (a->ne[2] == 1 && a->ne[3] == 1 && a->ne[1] > 1) {
        int64_t r0 = rng_int(&g->r, 0, (int) a->ne[1] - 1);
        int64_t k  = rng_int(&g->r, 1, (int) (a->ne[1] - r0));
        return ggml_view_2d(g->ctx, a, a->ne[0], k, a->nb[1], (size_t) r0 * a->nb[1]);
    }
    if (ggml_is_contiguous(a)) {
        int64_t n = rng_int(&g->r, 1, (int) ggml_nelements(a));
        return ggml_view_1d(g->ctx, a, n, 0);
    }
    return NULL;
}

static struct ggml_tensor * op_permute(struct gen * g, struct ggml_tensor * a) {
    struct ggml_tensor * t = rng_pct(&g->r, 50) ? ggml_transpose(g->ctx, a) : ggml_permute(g->ctx, a, 0, 2, 1, 3);
    if (rng_pct(&g->r, 50)) {
        made(g, t, false);
        return ggml_cont(g->ctx, t);
    }
    return t;
}

static struct ggml_tensor * op_cpy(struct gen * g, struct ggml_tensor * a) {
    int64_t              n   = ggml_nelements(a);
    enum ggml_type       ty  = rng_pct(&g->r, 40) ? GGML_TYPE_F16 : GGML_TYPE_F32;
    struct ggml_tensor * dst = NULL;
    if (rng_pct(&g->r, 60)) {
        int64_t              slots = rng_int(&g->r, 1, 3);
        int64_t              ne[4] = { n * slots, 1, 1, 1 };
        struct ggml_tensor * cache = new_pre(g, ty, ne, writable_dev(g, GGML_OP_CPY), GGML_BACKEND_BUFFER_USAGE_ANY);
        if (cache == NULL) {
            return NULL;
        }
        int64_t slot = rng_int(&g->r, 0, (int) slots - 1);
        dst          = made(g, ggml_view_1d(g->ctx, cache, n, (size_t) (slot * n) * ggml_type_size(ty)), false);
    } else if (rng_pct(&g->r, 50)) {
        int64_t ne[4] = { n, 1, 1, 1 };
        dst           = new_leaf(g, ty, ne, false);
    } else {
        struct ggml_tensor * c = find_val(g, a, -1, true);
        if (c == NULL || c == a || !may_write(g, c)) {
            return NULL;
        }
        dst = c;
    }
    return ggml_cpy(g->ctx, a, dst);
}

static struct ggml_tensor * op_set_rows(struct gen * g, struct ggml_tensor * b) {
    if (!ggml_is_contiguous_rows(b)) {
        return NULL;
    }
    int64_t              rows  = b->ne[1] + rng_int(&g->r, 0, 4);
    int64_t              ne[4] = { b->ne[0], rows, b->ne[2], b->ne[3] };
    enum ggml_type       ty    = rng_pct(&g->r, 30) ? GGML_TYPE_F16 : GGML_TYPE_F32;
    struct ggml_tensor * dst   = NULL;
    int                  p     = g->inplace ? rng_int(&g->r, 0, 99) : 0;
    if (p < 40) {
        dst = new_pre(g, ty, ne, writable_dev(g, GGML_OP_SET_ROWS), GGML_BACKEND_BUFFER_USAGE_ANY);
        if (dst == NULL) {
            return NULL;
        }
    } else {
        // storage produced in this graph: the defect class (issue 5)
        struct ggml_tensor * base = new_leaf(g, GGML_TYPE_F32, ne, false);
        if (p < 75) {
            dst = made(g, ggml_fill(g->ctx, base, 0.0f), true);
        } else if (p < 90) {
            dst = made(g, ggml_fill_inplace(g->ctx, base, 0.0f), true);
        } else {
            dst = base;
        }
    }
    struct ggml_tensor * idx = new_index(g, b->ne[1], rng_pct(&g->r, 50) ? GGML_TYPE_I64 : GGML_TYPE_I32);
    return ggml_set_rows(g->ctx, dst, b, idx);
}

static struct ggml_tensor * op_fill(struct gen * g, struct ggml_tensor * a) {
    if (!ggml_is_contiguous(a)) {
        return NULL;
    }
    if (may_write(g, a) && rng_pct(&g->r, 40)) {
        return ggml_fill_inplace(g->ctx, a, 1.0f);
    }
    return ggml_fill(g->ctx, a, 1.0f);
}

static struct ggml_tensor * op_acc_set(struct gen * g, struct ggml_tensor * a) {
    if (!ggml_is_contiguous(a)) {
        return NULL;
    }
    struct ggml_tensor * b     = NULL;
    int                  start = rng_int(&g->r, 0, g->nvals - 1);
    for (int k = 0; k < g->nvals && b == NULL; k++) {
        struct ggml_tensor * c  = g->vals[(start + k) % g->nvals];
        bool                 ok = c != a;
        for (int d = 0; d < 4 && ok; d++) {
            ok = c->ne[d] <= a->ne[d];
        }
        if (ok && rng_pct(&g->r, 50)) {
            b = c;
        }
    }
    if (b == NULL) {
        int64_t ne[4] = { rng_int(&g->r, 1, (int) a->ne[0]), 0, 1, 1 };
        ne[1]         = rng_int(&g->r, 1, (int) a->ne[1]);
        b             = new_leaf(g, GGML_TYPE_F32, ne, true);
    }
    size_t offset = 0;
    if (b->ne[2] == 1 && b->ne[3] == 1 && a->ne[1] > b->ne[1]) {
        offset = (size_t) rng_int(&g->r, 0, (int) (a->ne[1] - b->ne[1])) * a->nb[1];
    }
    bool inplace = may_write(g, a) && rng_pct(&g->r, 50);
    if (rng_pct(&g->r, 50)) {
        return inplace ? ggml_acc_inplace(g->ctx, a, b, a->nb[1], a->nb[2], a->nb[3], offset) :
                         ggml_acc(g->ctx, a, b, a->nb[1], a->nb[2], a->nb[3], offset);
    }
    return inplace ? ggml_set_inplace(g->ctx, a, b, a->nb[1], a->nb[2], a->nb[3], offset) :
                     ggml_set(g->ctx, a, b, a->nb[1], a->nb[2], a->nb[3], offset);
}

// MoE: `a` [K, b1, T] picks n_used = b1*m of E expert matrices per token; the experts
// often live in host memory, which exercises the scheduler's partial expert upload
static struct ggml_tensor * op_mul_mat_id(struct gen * g, struct ggml_tensor * a) {
    if (a->ne[3] != 1 || g->nids >= MAX_T) {
        return NULL;
    }
    int64_t n_used  = a->ne[1] * rng_int(&g->r, 1, 2);
    int     experts = rng_int(&g->r, 2, 8);
    int64_t ne[4]   = { a->ne[0], pick_ne0(&g->r), experts, 1 };
    int     dev     = rng_pct(&g->r, 50) ? g_ndev - 1 : rng_int(&g->r, 0, g_ndev - 1);
    enum ggml_type       type = rng_pct(&g->r, 30) ? GGML_TYPE_F16 : GGML_TYPE_F32;
    struct ggml_tensor * as   = new_pre(g, type, ne, dev, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    if (as == NULL) {
        return NULL;
    }
    int64_t              ine[4] = { n_used, a->ne[2], 1, 1 };
    struct ggml_tensor * ids    = new_leaf(g, GGML_TYPE_I32, ine, true);
    g->ids[g->nids]             = ids;
    g->ids_experts[g->nids++]   = experts;
    return ggml_mul_mat_id(g->ctx, as, a, ids);
}

// writes valid expert lists into the allocated ids inputs (the scheduler reads them)
static void fill_ids(struct gen * g, uint64_t seed, int variant) {
    rng_t r = { seed * 31 + (uint64_t) variant * 7 + 0x1d5 };
    for (int k = 0; k < g->nids; k++) {
        struct ggml_tensor * ids = g->ids[k];
        if (ids->buffer == NULL) {
            continue;
        }
        int64_t   n = ggml_nelements(ids);
        int32_t * v = (int32_t *) malloc((size_t) n * sizeof(int32_t));
        if (v == NULL) {
            continue;
        }
        for (int64_t i = 0; i < n; i++) {
            v[i] = rng_int(&r, 0, g->ids_experts[k] - 1);
        }
        ggml_backend_tensor_set(ids, v, 0, ggml_nbytes(ids));
        free(v);
    }
}

static struct ggml_tensor * op_soft_max_mask(struct gen * g, struct ggml_tensor * a) {
    if (!ggml_is_contiguous(a)) {
        return NULL;
    }
    int64_t              ne[4] = { a->ne[0], a->ne[1] + rng_int(&g->r, 0, 2), 1, 1 };
    struct ggml_tensor * mask  = new_leaf(g, rng_pct(&g->r, 50) ? GGML_TYPE_F16 : GGML_TYPE_F32, ne, true);
    return ggml_soft_max_ext(g->ctx, a, mask, 0.125f, 0.0f);
}

// one random op; returns false when the drawn op did not fit the drawn operand
static bool gen_op(struct gen * g) {
    static const int weights[] = {
        14, // binary
        12, // mul_mat
        12, // unary
        5,  // get_rows
        6,  // reshape
        6,  // view
        5,  // permute/transpose
        4,  // cont
        6,  // cpy
        7,  // set_rows
        4,  // fill
        6,  // acc/set
        4,  // concat
        5,  // glu
        4,  // soft_max with mask
        4,  // mul_mat_id
    };
    int total = 0;
    for (size_t k = 0; k < sizeof(weights) / sizeof(weights[0]); k++) {
        total += weights[k];
    }
    int pick = rng_int(&g->r, 0, total - 1);
    int kind = 0;
    while (pick >= weights[kind]) {
        pick -= weights[kind++];
    }

    struct ggml_tensor * a      = pick_val(g);
    struct ggml_tensor * t      = NULL;
    bool                 as_val = true;
    switch (kind) {
        case 0: t = op_binary(g, a); break;
        case 1: t = op_mul_mat(g, a); break;
        case 2: t = op_unary(g, a); break;
        case 3: t = op_get_rows(g); break;
        case 4: t = op_reshape(g, a); break;
        case 5: t = op_view(g, a); break;
        case 6: t = op_permute(g, a); break;
        case 7: t = ggml_cont(g->ctx, a); break;
        case 8:
            t      = op_cpy(g, a);
            as_val = rng_pct(&g->r, 30);
            break;
        case 9:
            t      = op_set_rows(g, a);
            as_val = rng_pct(&g->r, 50);
            break;
        case 10: t = op_fill(g, a); break;
        case 11: t = op_acc_set(g, a); break;
        case 12: t = op_concat(g, a); break;
        case 13: t = op_glu(g, a); break;
        case 14: t = op_soft_max_mask(g, a); break;
        default: t = op_mul_mat_id(g, a); break;
    }
    if (t == NULL) {
        return false;
    }
    made(g, t, as_val);
    return true;
}

// ---------------------------------------------------------------------------------------
// scheduler driving and printing

static const char * backend_name_or_dash(ggml_backend_t b) {
    return b ? ggml_backend_name(b) : "-";
}

// prints where `t`'s data lives, as `DATA <name> <buffer> <offset> [pre] [view=<src>]`:
// the buffer as `<buft>#<k>` (its ALLOCBUF line; `<buft>#?` for a buffer no test buffer
// type allocated, ggml's zero-size dummy), the offset as bytes from the buffer's base (a
// view's inside its view source's buffer), `- -` when the tensor has no data. `pre` marks a
// buffer the scheduler did not allocate (usage other than COMPUTE: a weight or a cache).
static void print_data(const struct ggml_tensor * t) {
    printf("DATA %s", t->name);
    if (t->buffer == NULL || t->data == NULL) {
        printf(" - -");
    } else {
        int          k    = fake_buffer_serial(&g_reg, t->buffer);
        const char * base = (const char *) ggml_backend_buffer_get_base(t->buffer);
        if (k >= 0) {
            printf(" %s#%d", buf_name(t->buffer), k);
        } else {
            printf(" %s#?", buf_name(t->buffer));
        }
        if (base != NULL) {
            printf(" %td", (const char *) t->data - base);
        } else {
            printf(" -");
        }
        if (ggml_backend_buffer_get_usage(t->buffer) != GGML_BACKEND_BUFFER_USAGE_COMPUTE) {
            printf(" pre");
        }
    }
    if (t->view_src != NULL) {
        printf(" view=%s", t->view_src->name);
    }
    printf("\n");
}

static bool eval_cb(struct ggml_tensor * t, bool ask, void * user_data) {
    (void) user_data;
    printf("  %s %s\n", ask ? "ASK" : "SEE", t->name);
    if (!ask) {
        return true;
    }
    // want every node whose name's number is divisible by 3
    const char * s = t->name;
    while (*s && (*s < '0' || *s > '9')) {
        s++;
    }
    return atoi(s) % 3 == 0;
}

static void on_abort(const char * message) {
    printf("ABORT %s\n", message);
    fflush(stdout);
}

static void on_log(enum ggml_log_level level, const char * text, void * user_data) {
    (void) user_data;
    if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

// builds graph `variant` of `seed`: the same (seed, variant) always gives the same graph,
// pre-allocated tensors included (they are created anew in fresh buffers)
static struct gen * build_graph(uint64_t seed, int variant, struct ggml_cgraph ** out) {
    struct gen * g = (struct gen *) calloc(1, sizeof(struct gen));
    if (g == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    g->r.s      = (seed * 0x2545F4914F6CDD1Dull + 1) ^ ((uint64_t) variant * 0x9E3779B97F4A7C15ull);
    int n_ops   = rng_int(&g->r, 4, 48);
    g->inplace  = rng_pct(&g->r, 50);
    printf("GRAPH variant=%d ops=%d inplace=%d\n", variant, n_ops, g->inplace);

    struct ggml_init_params p = { ggml_tensor_overhead() * (MAX_T + 64) + ggml_graph_overhead_custom(GRAPH_SIZE, false),
                                  NULL, true };
    g->ctx                    = ggml_init(p);

    // first values: an activation input and maybe an embedding lookup
    {
        int64_t ne[4] = { pick_ne0(&g->r), 0, 0, 1 };
        ne[1]         = rng_int(&g->r, 1, 8);
        ne[2]         = rng_pct(&g->r, 20) ? 2 : 1;
        add_val(g, new_leaf(g, GGML_TYPE_F32, ne, true));
        if (rng_pct(&g->r, 50)) {
            struct ggml_tensor * t = op_get_rows(g);
            if (t) {
                made(g, t, true);
            }
        }
    }
    for (int i = 0, tries = 0; i < n_ops && tries < n_ops * 4; tries++) {
        if (gen_op(g)) {
            i++;
        }
    }

    // outputs: the last result and a few random ones (never views)
    for (int i = 0; i < g->nmade; i++) {
        struct ggml_tensor * t = g->made[i];
        if (t->view_src == NULL && (i == g->nmade - 1 || rng_pct(&g->r, 15))) {
            ggml_set_output(t);
        }
    }
    struct ggml_cgraph * gf = ggml_new_graph_custom(g->ctx, GRAPH_SIZE, false);
    for (int i = 0; i < g->nmade; i++) {
        if (!g->used[i]) {
            ggml_build_forward_expand(gf, g->made[i]);
        }
    }

    // user assignments (like llama.cpp's per-graph calls): a node that is not
    // pre-allocated, onto a backend that supports its op; applied wherever the graph is
    int n_nodes = ggml_graph_n_nodes(gf);
    int n_user  = rng_pct(&g->r, 20) ? rng_int(&g->r, 1, 2) : 0;
    for (int u = 0; u < n_user && n_nodes > 0; u++) {
        struct ggml_tensor * node = ggml_graph_node(gf, rng_int(&g->r, 0, n_nodes - 1));
        int                  b    = rng_int(&g->r, 0, g_ndev - 1);
        if (node->buffer || (node->view_src && node->view_src->buffer) || !tdev_supports_op_impl(&g_devs[b], node)) {
            continue;
        }
        g->user_node[g->nuser] = node;
        g->user_dev[g->nuser++] = b;
        printf("USER %s %s\n", node->name, g_devs[b].name);
    }

    *out = gf;
    return g;
}

static void apply_user(struct gen * g, ggml_backend_sched_t sched) {
    for (int u = 0; u < g->nuser; u++) {
        ggml_backend_sched_set_tensor_backend(sched, g->user_node[u], &g_devs[g->user_dev[u]].fd->backend);
    }
}

static void free_graph(struct gen * g) {
    for (int i = 0; i < g->npre; i++) {
        ggml_backend_buffer_free(g->pre_buf[i]);
        ggml_free(g->pre_ctx[i]);
    }
    ggml_free(g->ctx);
    free(g);
}

static void print_sched_sizes(ggml_backend_sched_t sched, ggml_backend_t * backends, int n_backends) {
    printf("SPLITS %d COPIES %d\n", ggml_backend_sched_get_n_splits(sched), ggml_backend_sched_get_n_copies(sched));
    for (int b = 0; b < n_backends; b++) {
        printf("BUFSIZE %s %zu\n", g_devs[b].name, ggml_backend_sched_get_buffer_size(sched, backends[b]));
    }
}

// one allocation and compute of graph `variant` on `sched`, everything observable printed
static void run_round(ggml_backend_sched_t sched, ggml_backend_t * backends, int n_backends, uint64_t seed,
                      int variant, bool perturb) {
    struct ggml_cgraph * gf;
    struct gen *         g       = build_graph(seed, variant, &gf);
    int                  n_nodes = ggml_graph_n_nodes(gf);

    apply_user(g, sched);

    // self-test perturbation: one silent user assignment drawn from a separate stream, so
    // that everything printed differs only where the scheduler's decisions change
    if (perturb && n_nodes > 0) {
        rng_t                pr   = { seed ^ 0xA5A5A5A5ull };
        struct ggml_tensor * node = ggml_graph_node(gf, rng_int(&pr, 0, n_nodes - 1));
        int                  b    = rng_int(&pr, 0, n_backends - 1);
        if (!node->buffer && !(node->view_src && node->view_src->buffer) && tdev_supports_op_impl(&g_devs[b], node)) {
            ggml_backend_sched_set_tensor_backend(sched, node, backends[b]);
        }
    }

    // remember the original sources: the scheduler replaces inputs of splits by copies
    struct ggml_tensor ** orig = (struct ggml_tensor **) calloc((size_t) (n_nodes ? n_nodes : 1) * GGML_MAX_SRC,
                                                               sizeof(struct ggml_tensor *));
    // and the node order (a test device's graph_optimize may reorder its split's nodes)
    struct ggml_tensor ** orig_nodes =
        (struct ggml_tensor **) calloc((size_t) (n_nodes ? n_nodes : 1), sizeof(struct ggml_tensor *));
    for (int i = 0; i < n_nodes; i++) {
        memcpy(&orig[i * GGML_MAX_SRC], ggml_graph_node(gf, i)->src, sizeof(struct ggml_tensor *) * GGML_MAX_SRC);
        orig_nodes[i] = ggml_graph_node(gf, i);
    }

    bool ok = ggml_backend_sched_alloc_graph(sched, gf);
    printf("ALLOC %s\n", ok ? "ok" : "fail");

    // leaves in first-use order
    {
        struct ggml_tensor * seen[MAX_T * 2];
        int                  nseen = 0;
        for (int i = 0; i < n_nodes; i++) {
            for (int j = 0; j < GGML_MAX_SRC; j++) {
                struct ggml_tensor * s = orig[i * GGML_MAX_SRC + j];
                if (s == NULL || s->op != GGML_OP_NONE) {
                    continue;
                }
                bool dup = false;
                for (int k = 0; k < nseen && !dup; k++) {
                    dup = seen[k] == s;
                }
                if (dup || nseen >= MAX_T * 2) {
                    continue;
                }
                seen[nseen++] = s;
                printf("LEAF %d %s %s %s\n", nseen - 1, s->name,
                       backend_name_or_dash(ggml_backend_sched_get_tensor_backend(sched, s)), buf_name(s->buffer));
                print_data(s);
            }
        }
    }

    struct ggml_tensor * copies[MAX_T * 2];
    int                  ncopies = 0;
    for (int i = 0; i < n_nodes; i++) {
        struct ggml_tensor * node = ggml_graph_node(gf, i);
        printf("NODE %d %s %s %s", i, node->name, ggml_op_desc(node),
               backend_name_or_dash(ggml_backend_sched_get_tensor_backend(sched, node)));
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            struct ggml_tensor * s = orig[i * GGML_MAX_SRC + j];
            if (s == NULL) {
                continue;
            }
            printf(" s%d=%s@%s", j, s->name, backend_name_or_dash(ggml_backend_sched_get_tensor_backend(sched, s)));
            if (node->src[j] != s) {
                printf("->%s", node->src[j] ? node->src[j]->name : "NULL");
            }
        }
        printf(" buf=%s\n", buf_name(node->buffer));
        print_data(node);
        // the split-input copies that replaced its sources, each once (where the first
        // reader's line is); a copy is allocated like any other tensor
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            struct ggml_tensor * c = node->src[j];
            if (c == NULL || c == orig[i * GGML_MAX_SRC + j]) {
                continue;
            }
            bool dup = false;
            for (int k = 0; k < ncopies && !dup; k++) {
                dup = copies[k] == c;
            }
            if (!dup && ncopies < MAX_T * 2) {
                copies[ncopies++] = c;
                print_data(c);
            }
        }
    }

    for (int i = 0; i < n_nodes; i++) {
        struct ggml_tensor * node = ggml_graph_node(gf, i);
        if (node->view_src == NULL || is_view_op(node->op)) {
            continue;
        }
        struct ggml_tensor * root   = node->view_src;
        ggml_backend_t       nb     = ggml_backend_sched_get_tensor_backend(sched, node);
        ggml_backend_t       rb     = ggml_backend_sched_get_tensor_backend(sched, root);
        const char *         usable = "unknown";
        const char *         rule   = "unknown";
        const char *         alloc  = "none";
        if (nb != NULL && root->buffer != NULL) {
            bool can = tdev_supports_buft_impl(tdev_of_backend(nb), root->buffer->buft);
            bool pre = ggml_backend_buffer_get_usage(root->buffer) != GGML_BACKEND_BUFFER_USAGE_COMPUTE;
            // ggml-alloc may place a node over a parent's memory in another backend's buffer
            bool reused = !pre && rb != NULL && root->buffer->buft != ggml_backend_sched_get_buffer_type(sched, rb);
            alloc       = pre ? "pre" : reused ? "reused" : "sched";
            usable      = can ? "yes" : "no";
            // the co-location rule, judged on the scheduler's own buffer types: pre-allocated
            // storage needs a writer that can use its buffer type; storage produced in the
            // graph needs the writer on the producer's backend, unless the producer's buffer
            // type is host-addressable and the writer can use it
            ggml_backend_buffer_type_t sbuft =
                pre ? root->buffer->buft : rb ? ggml_backend_sched_get_buffer_type(sched, rb) : NULL;
            if (sbuft != NULL) {
                bool scan = tdev_supports_buft_impl(tdev_of_backend(nb), sbuft);
                bool ok   = pre ? scan : (nb == rb || (scan && ggml_backend_buft_is_host(sbuft)));
                rule      = ok ? "ok" : "violated";
            }
        }
        printf("INPLACE %d %s %s node=%s root=%s root_backend=%s root_buft=%s root_alloc=%s usable=%s rule=%s\n", i,
               node->name, ggml_op_desc(node), backend_name_or_dash(nb), root->name, backend_name_or_dash(rb),
               buf_name(root->buffer), alloc, usable, rule);
    }

    // Reads of memory a backend cannot use: every source each computing node reads (a
    // view's bytes are its view root's), judged twice as INPLACE lines judge writes: by
    // where the allocator put the root's memory (usable), and by the scheduler's own
    // placement (rule: the root's pre-allocated buffer type, else the compute buffer type
    // of the root's backend, must be the reader's or usable by it). A line only for a read
    // that fails either. ggml-alloc may place a node over a source's memory in another
    // backend's buffer (usable=no), and a view placed apart from its root is judged by
    // stock by the view's placement (rule=violated).
    for (int i = 0; i < n_nodes; i++) {
        struct ggml_tensor * node = ggml_graph_node(gf, i);
        ggml_backend_t       nb   = ggml_backend_sched_get_tensor_backend(sched, node);
        if (nb == NULL || is_view_op(node->op) || node->op == GGML_OP_NONE) {
            continue;
        }
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            struct ggml_tensor * s = node->src[j];
            if (s == NULL) {
                continue;
            }
            // A split-input copy of a view whose root the reader's backend could use, by the
            // scheduler's placement of the root (as READ's rule judges): stock judges a view
            // by its own placement, and a view placed apart from its root gets a copy, made
            // at the start of the reader's split, so stale when that split computes the
            // root, and needless otherwise.
            int k = 0;
            while (k < n_nodes && orig_nodes[k] != node) {
                k++;
            }
            struct ggml_tensor * o = k < n_nodes ? orig[k * GGML_MAX_SRC + j] : NULL;
            if (o != NULL && o != s && o->view_src != NULL) {
                struct ggml_tensor * oroot = o->view_src;
                while (oroot->view_src != NULL) {
                    oroot = oroot->view_src;
                }
                ggml_backend_t             orb  = ggml_backend_sched_get_tensor_backend(sched, oroot);
                bool                       opre = oroot->buffer != NULL &&
                            ggml_backend_buffer_get_usage(oroot->buffer) != GGML_BACKEND_BUFFER_USAGE_COMPUTE;
                ggml_backend_buffer_type_t obuft =
                    opre ? oroot->buffer->buft : orb ? ggml_backend_sched_get_buffer_type(sched, orb) : NULL;
                if (obuft != NULL && (nb == orb || obuft == ggml_backend_sched_get_buffer_type(sched, nb) ||
                                      tdev_supports_buft_impl(tdev_of_backend(nb), obuft))) {
                    printf("VIEWCOPY %d %s node=%s src=%s view_backend=%s root=%s root_backend=%s root_buft=%s\n", i,
                           node->name, backend_name_or_dash(nb), o->name,
                           backend_name_or_dash(ggml_backend_sched_get_tensor_backend(sched, o)), oroot->name,
                           backend_name_or_dash(orb), ggml_backend_buft_name(obuft));
                }
            }
            struct ggml_tensor * root = s;
            while (root->view_src != NULL) {
                root = root->view_src;
            }
            if (root->buffer == NULL) {
                continue;
            }
            ggml_backend_t rb  = ggml_backend_sched_get_tensor_backend(sched, root);
            bool           pre = ggml_backend_buffer_get_usage(root->buffer) != GGML_BACKEND_BUFFER_USAGE_COMPUTE;
            bool can = tdev_supports_buft_impl(tdev_of_backend(nb), root->buffer->buft);
            ggml_backend_buffer_type_t sbuft =
                pre ? root->buffer->buft : rb ? ggml_backend_sched_get_buffer_type(sched, rb) : NULL;
            bool ok = sbuft == NULL || nb == rb || sbuft == ggml_backend_sched_get_buffer_type(sched, nb) ||
                      tdev_supports_buft_impl(tdev_of_backend(nb), sbuft);
            if (!can || !ok) {
                printf("READ %d %s node=%s src=%s root=%s root_backend=%s root_buft=%s usable=%s rule=%s\n", i,
                       node->name, backend_name_or_dash(nb), s->name, root->name, backend_name_or_dash(rb),
                       buf_name(root->buffer), can ? "yes" : "no", ok ? "ok" : "violated");
            }
        }
    }

    // Copies read again: a node that reads a split-input copy which an earlier node read
    // first, with an in-place writer of the copied source's root between the two. The copy
    // is filled at the start of a split; unless the later reader's split fills it again, that
    // reader sees the bytes from before the write. The runner judges each line by the
    // COMPUTE trace (a CPY into the copy between the writer's RUN and the reader's).
    for (int i2 = 0; i2 < n_nodes; i2++) {
        struct ggml_tensor * node = ggml_graph_node(gf, i2);
        int                  k    = 0;
        while (k < n_nodes && orig_nodes[k] != node) {
            k++;
        }
        for (int j = 0; j < GGML_MAX_SRC && k < n_nodes; j++) {
            struct ggml_tensor * o = orig[k * GGML_MAX_SRC + j];
            struct ggml_tensor * c = node->src[j];
            if (o == NULL || c == NULL || c == o) {
                continue;
            }
            int i1 = -1;
            for (int i = 0; i < i2 && i1 < 0; i++) {
                for (int jj = 0; jj < GGML_MAX_SRC; jj++) {
                    if (ggml_graph_node(gf, i)->src[jj] == c) {
                        i1 = i;
                        break;
                    }
                }
            }
            if (i1 < 0) {
                continue;
            }
            struct ggml_tensor * root = o;
            while (root->view_src != NULL) {
                root = root->view_src;
            }
            for (int i = i2 - 1; i > i1; i--) {
                struct ggml_tensor * w = ggml_graph_node(gf, i);
                if (w->view_src == NULL || w->op == GGML_OP_NONE || is_view_op(w->op)) {
                    continue;
                }
                struct ggml_tensor * wr = w->view_src;
                while (wr->view_src != NULL) {
                    wr = wr->view_src;
                }
                if (wr == root) {
                    printf("REREAD %d %s copy=%s src=%s writer=%s\n", i2, node->name, c->name, o->name, w->name);
                    break;
                }
            }
        }
    }

    print_sched_sizes(sched, backends, n_backends);

    if (ok) {
        fill_ids(g, seed, variant);
        printf("COMPUTE\n");
        enum ggml_status st = ggml_backend_sched_graph_compute(sched, gf);
        printf("STATUS %d\n", (int) st);
    }

    free(orig);
    free(orig_nodes);
    free_graph(g);
}

static void run_seed(uint64_t seed, uint64_t perturb, const char * crash_seed) {
    rng_t r = { seed * 0x2545F4914F6CDD1Dull + 1 };

    printf("SEED %" PRIu64 " BEGIN\n", seed);
    fflush(stdout);

    int  n_backends = rng_int(&r, 2, 4);
    bool parallel   = rng_pct(&r, 30);
    bool op_offload = rng_pct(&r, 80);
    bool use_cb     = rng_pct(&r, 50);
    bool reserve    = rng_pct(&r, 25);
    int  rounds     = rng_pct(&r, 40) ? 2 : 1;
    int  variant2   = rng_pct(&r, 50) ? 0 : 1;
    // SCHED_DIFF_ROUNDS=N: N rounds of the same graph, rebuilt after each reset (drawn after
    // the seed's other choices, so every seed keeps its devices and graph). Rebuilt graphs
    // often land in the memory of the last one, where a scheduler may replay its placement;
    // with pipeline copies (parallel) the rounds turn the current copy round.
    const char * env_rounds = getenv("SCHED_DIFF_ROUNDS");
    if (env_rounds != NULL && atoi(env_rounds) > 0) {
        rounds   = atoi(env_rounds);
        variant2 = 0;
    }
    setup_devices(&r, n_backends);
    printf("CONFIG backends=%d parallel=%d op_offload=%d eval_cb=%d reserve=%d rounds=%d variant2=%d\n", n_backends,
           parallel, op_offload, use_cb, reserve, rounds, variant2);
    print_devices();
    if (crash_seed != NULL && strtoull(crash_seed, NULL, 10) == seed) {
        fflush(stdout);
        raise(SIGSEGV); // self-test of the runner's crash isolation
    }

    ggml_backend_t backends[MAX_DEV];
    for (int i = 0; i < n_backends; i++) {
        backends[i] = &g_devs[i].fd->backend;
    }
    ggml_backend_sched_t sched = ggml_backend_sched_new(backends, NULL, n_backends, GRAPH_SIZE, parallel, op_offload);
    if (use_cb) {
        ggml_backend_sched_set_eval_callback(sched, eval_cb, NULL);
    }

    // like llama.cpp: reserve with a measure graph first, then allocate real graphs
    if (reserve) {
        struct ggml_cgraph * gm;
        struct gen *         g = build_graph(seed, 0, &gm);
        apply_user(g, sched);
        bool ok = ggml_backend_sched_reserve(sched, gm);
        printf("RESERVE %s\n", ok ? "ok" : "fail");
        print_sched_sizes(sched, backends, n_backends);
        free_graph(g);
    }

    for (int round = 0; round < rounds; round++) {
        printf("ROUND %d\n", round);
        if (round > 0) {
            ggml_backend_sched_reset(sched);
        }
        bool pert = perturb != 0 && seed % perturb == 0 && round == 0;
        run_round(sched, backends, n_backends, seed, round == 0 ? 0 : variant2, pert);
    }

    ggml_backend_sched_free(sched);

    printf("SEED %" PRIu64 " END\n", seed);
    fflush(stdout);
}

// prints `MAPPED <path>` once for every file of this process's mappings whose name holds
// "ggml": the proof of which library the loader picked
static void print_mapped_libs(void) {
    FILE * f = fopen("/proc/self/maps", "r");
    if (f == NULL) {
        printf("MAPPED ?\n");
        return;
    }
    char line[4096];
    char seen[16][1024];
    int  nseen = 0;
    while (fgets(line, sizeof(line), f)) {
        char * path = strchr(line, '/');
        if (path == NULL || strstr(path, "ggml") == NULL) {
            continue;
        }
        path[strcspn(path, "\n")] = 0;
        bool dup = false;
        for (int i = 0; i < nseen && !dup; i++) {
            dup = strcmp(seen[i], path) == 0;
        }
        if (!dup && nseen < 16) {
            snprintf(seen[nseen++], sizeof(seen[0]), "%s", path);
            printf("MAPPED %s\n", path);
        }
    }
    fclose(f);
}

// prints `SYMBOL <name> <path>` for each function of the library under test that this run
// calls (directly or through the scheduler): the file the loader resolves it to in the
// global scope, as the driver's own calls resolve it. `?` when it is not found.
static void print_symbol_providers(void) {
    static const char * const names[] = {
        "ggml_backend_sched_new",
        "ggml_backend_sched_free",
        "ggml_backend_sched_reserve",
        "ggml_backend_sched_reset",
        "ggml_backend_sched_alloc_graph",
        "ggml_backend_sched_graph_compute",
        "ggml_backend_sched_get_n_splits",
        "ggml_backend_sched_get_n_copies",
        "ggml_backend_sched_get_buffer_size",
        "ggml_backend_sched_get_buffer_type",
        "ggml_backend_sched_set_tensor_backend",
        "ggml_backend_sched_get_tensor_backend",
        "ggml_backend_sched_set_eval_callback",
        "ggml_gallocr_new",
        "ggml_gallocr_reserve_n",
        "ggml_gallocr_alloc_graph",
        "ggml_backend_alloc_ctx_tensors_from_buft",
        "ggml_backend_tensor_alloc",
        "ggml_backend_buffer_init",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *  addr = dlsym(RTLD_DEFAULT, names[i]);
        Dl_info info;
        if (addr != NULL && dladdr(addr, &info) != 0 && info.dli_fname != NULL) {
            printf("SYMBOL %s %s\n", names[i], info.dli_fname);
        } else {
            printf("SYMBOL %s ?\n", names[i]);
        }
    }
}

// whether `seed` is one of the comma-separated decimal numbers of `list`
static bool seed_listed(const char * list, uint64_t seed) {
    const char * p = list;
    while (*p) {
        char *   end = NULL;
        uint64_t v   = strtoull(p, &end, 10);
        if (end == p) {
            return false;
        }
        if (v == seed) {
            return true;
        }
        p = *end == ',' ? end + 1 : end;
    }
    return false;
}

int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s START COUNT\n", argv[0]);
        return 2;
    }
    uint64_t     start   = strtoull(argv[1], NULL, 10);
    uint64_t     count   = strtoull(argv[2], NULL, 10);
    const char * pe      = getenv("SCHED_DIFF_PERTURB");
    uint64_t     perturb = pe ? strtoull(pe, NULL, 10) : 0;

    if (getenv("SCHED_DIFF_MAPS")) {
        print_mapped_libs();
        print_symbol_providers();
    }
    ggml_log_set(on_log, NULL);
    ggml_set_abort_callback(on_abort);

    const char * only = getenv("SCHED_DIFF_ONLY");
    for (uint64_t s = start; s < start + count; s++) {
        if (only != NULL && !seed_listed(only, s)) {
            continue;
        }
        run_seed(s, perturb, getenv("SCHED_DIFF_CRASH_SEED"));
    }
    return 0;
}
