/*
 * inplace_prop: the numeric property test of the in-place storage rule (issue 5, item 6).
 *
 * For each seed in [start, start+count): choose at random (deterministically per seed) which
 * eager ops the HRX device withdraws (the rest of its default set stays claimed), build a random
 * F32 graph of FILL / in-place FILL, SET_ROWS into produced or input storage, ADD / MUL / SCALE
 * and their in-place forms, CPY into a view, ACC / SET (in place), GET_ROWS, SOFT_MAX, RMS_NORM,
 * views / reshapes / permutes + CONT; compute it through the scheduler over [device, CPU] and
 * compare every output with the same graph computed by the CPU alone (NMSE <= 1e-6). After
 * ggml_backend_sched_alloc_graph the placement property is checked: every node whose result is a
 * view of storage it writes runs on the backend of its view root, unless the root's buffer is
 * host memory and the writer's backend supports its buffer type.
 *
 * Output: one "seed S FAIL ..." line per failing seed (more detail lines may follow, prefixed
 * "  "), and a final "N passed, M failed" line. Exit status 0 when every seed passed.
 */
#define _POSIX_C_SOURCE 200809L

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_POOL 64
#define MAX_INPUTS 128
#define MAX_OUTPUTS 64
#define GRAPH_SIZE 1024

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int rnd(uint64_t *s, int n) { return (int)(splitmix64(s) % (uint64_t)n); }

static float rndf(uint64_t *s) { return (float)((double)(splitmix64(s) >> 11) / 9007199254740992.0) * 2.0f - 1.0f; }

/* ---- the HRX eager-op API, looked up in the library ggml_backend_load_all loaded ---- */

typedef int (*hrx_apply_fn)(const char *);
typedef int (*hrx_remove_fn)(int);

static hrx_apply_fn hrx_apply;
static hrx_remove_fn hrx_remove;

static void *lookup(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (p == NULL) {
        printf("HRX library has no %s\n", name);
        exit(2);
    }
    return p;
}

static void hrx_api_init(void) {
    const char *path = getenv("GGML_BACKEND_PATH");
    if (path == NULL) {
        printf("GGML_BACKEND_PATH is not set: cannot reach the HRX eager-op API\n");
        exit(2);
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) {
        printf("HRX library %s is not loaded: %s\n", path, dlerror());
        exit(2);
    }
    void *a = lookup(h, "ggml_backend_hrx_eager_ops_apply");
    void *r = lookup(h, "ggml_backend_hrx_eager_ops_remove");
    memcpy(&hrx_apply, &a, sizeof(a));
    memcpy(&hrx_remove, &r, sizeof(r));
}

/* The ops a seed may withdraw from the device's default eager set. */
static const enum ggml_op withdrawable[] = {
    GGML_OP_FILL, GGML_OP_SET_ROWS, GGML_OP_ADD,      GGML_OP_MUL,      GGML_OP_SCALE, GGML_OP_CPY,
    GGML_OP_DUP,  GGML_OP_GET_ROWS, GGML_OP_SOFT_MAX, GGML_OP_RMS_NORM, GGML_OP_CONT,
};
#define N_WITHDRAWABLE ((int)(sizeof(withdrawable) / sizeof(withdrawable[0])))

/* Sets the eager set for `seed`; writes the withdrawn ops' names into `desc`. */
static void choose_claims(uint64_t seed, char *desc, size_t cap) {
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + 0xC1A1Full;
    if (hrx_apply("DEFAULT") != 0) {
        printf("HRX: eager_ops_apply(DEFAULT) failed\n");
        exit(2);
    }
    desc[0] = '\0';
    size_t len = 0;
    for (int i = 0; i < N_WITHDRAWABLE; i++) {
        if (rnd(&s, 2) == 0) {
            if (hrx_remove((int)withdrawable[i]) != 0) {
                printf("HRX: eager_ops_remove(%s) failed\n", ggml_op_name(withdrawable[i]));
                exit(2);
            }
            int n = snprintf(desc + len, cap - len, "%s%s", len ? "," : "", ggml_op_name(withdrawable[i]));
            if (n > 0 && (size_t)n < cap - len) {
                len += (size_t)n;
            }
        }
    }
    if (len == 0) {
        snprintf(desc, cap, "none");
    }
}

/* ---- the random graph ---- */

struct input {
    struct ggml_tensor *t;
    int kind; /* 0: F32 data, 1: I64 distinct rows < bound, 2: I32 rows < bound */
    int64_t bound;
};

struct pgraph {
    struct ggml_cgraph *gf;
    int n_inputs;
    struct input inputs[MAX_INPUTS];
    int n_outputs;
    struct ggml_tensor *outputs[MAX_OUTPUTS];
};

struct builder {
    struct ggml_context *ctx;
    struct pgraph *g;
    uint64_t rng;
    int64_t ne0, ne1;
    int n_pool;
    struct ggml_tensor *pool[MAX_POOL];
    bool produced[MAX_POOL]; /* false: an input tensor */
};

static struct ggml_tensor *add_input(struct builder *b, struct ggml_tensor *t, int kind, int64_t bound) {
    ggml_set_input(t);
    struct input *in = &b->g->inputs[b->g->n_inputs++];
    in->t = t;
    in->kind = kind;
    in->bound = bound;
    return t;
}

static struct ggml_tensor *new_f32_input(struct builder *b, int64_t ne0, int64_t ne1) {
    struct ggml_tensor *t = ggml_new_tensor_2d(b->ctx, GGML_TYPE_F32, ne0, ne1);
    return add_input(b, t, 0, 0);
}

/* Expanding after each node keeps the graph's order the order of creation, so that a reader
 * of storage always runs before a later in-place writer of it, in both runs. */
static void push(struct builder *b, struct ggml_tensor *t) {
    ggml_build_forward_expand(b->g->gf, t);
    if (b->n_pool < MAX_POOL) {
        b->pool[b->n_pool] = t;
        b->produced[b->n_pool] = true;
        b->n_pool++;
    } else {
        int i = rnd(&b->rng, b->n_pool);
        b->pool[i] = t;
        b->produced[i] = true;
    }
}

/* An in-place writer replaces the tensor it wrote in the pool (its old value is gone). */
static void replace(struct builder *b, int i, struct ggml_tensor *t) {
    ggml_build_forward_expand(b->g->gf, t);
    b->pool[i] = t;
    b->produced[i] = true;
}

static int pick(struct builder *b) { return rnd(&b->rng, b->n_pool); }

/* A pool index whose storage an in-place op may write: produced, or an input when `inputs_ok`. */
static int pick_dst(struct builder *b, bool inputs_ok) {
    for (int tries = 0; tries < 8; tries++) {
        int i = pick(b);
        if (b->produced[i] || inputs_ok) {
            return i;
        }
    }
    return -1;
}

static void build_step(struct builder *b) {
    struct ggml_context *ctx = b->ctx;
    const int64_t ne0 = b->ne0, ne1 = b->ne1;
    static const float consts[4] = {0.0f, 1.0f, -2.0f, 0.5f};
    int choice = rnd(&b->rng, 19);
    bool in_ok = rnd(&b->rng, 3) == 0;
    switch (choice) {
    case 0: { /* FILL of a fresh tensor */
        struct ggml_tensor *t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ne0, ne1);
        push(b, ggml_fill(ctx, t, consts[rnd(&b->rng, 4)]));
        break;
    }
    case 1: { /* in-place FILL */
        int i = pick_dst(b, in_ok);
        if (i >= 0) {
            replace(b, i, ggml_fill_inplace(ctx, b->pool[i], consts[rnd(&b->rng, 4)]));
        }
        break;
    }
    case 2:
    case 3: { /* SET_ROWS into produced or input storage */
        int i = pick_dst(b, in_ok);
        if (i < 0) {
            break;
        }
        int64_t k = 1 + rnd(&b->rng, (int)ne1);
        struct ggml_tensor *src = rnd(&b->rng, 2) ? new_f32_input(b, ne0, k) : NULL;
        if (src == NULL) {
            int j = pick(b);
            src = ggml_cont(ctx, ggml_view_2d(ctx, b->pool[j], ne0, k, b->pool[j]->nb[1], 0));
        }
        struct ggml_tensor *idx = add_input(b, ggml_new_tensor_1d(ctx, GGML_TYPE_I64, k), 1, ne1);
        replace(b, i, ggml_set_rows(ctx, b->pool[i], src, idx));
        break;
    }
    case 4:
    case 5: { /* ADD / MUL */
        struct ggml_tensor *x = b->pool[pick(b)], *y = b->pool[pick(b)];
        push(b, choice == 4 ? ggml_add(ctx, x, y) : ggml_mul(ctx, x, y));
        break;
    }
    case 6:
    case 7: { /* ADD / MUL in place */
        int i = pick_dst(b, in_ok);
        if (i >= 0) {
            struct ggml_tensor *y = b->pool[pick(b)];
            replace(b, i,
                    choice == 6 ? ggml_add_inplace(ctx, b->pool[i], y) : ggml_mul_inplace(ctx, b->pool[i], y));
        }
        break;
    }
    case 8: /* SCALE */
        push(b, ggml_scale(ctx, b->pool[pick(b)], 0.5f + (float)rnd(&b->rng, 4) * 0.25f));
        break;
    case 9: { /* SCALE in place */
        int i = pick_dst(b, in_ok);
        if (i >= 0) {
            replace(b, i, ggml_scale_inplace(ctx, b->pool[i], -0.75f));
        }
        break;
    }
    case 10: { /* CPY of some rows of one tensor into a view of another's storage */
        int i = pick_dst(b, in_ok);
        if (i < 0) {
            break;
        }
        struct ggml_tensor *x = b->pool[pick(b)], *d = b->pool[i];
        int64_t r = 1 + rnd(&b->rng, (int)ne1);
        int64_t off_s = rnd(&b->rng, (int)(ne1 - r + 1));
        struct ggml_tensor *xr = x->view_src ? x->view_src : x, *dr = d->view_src ? d->view_src : d;
        if (xr == dr) {
            off_s = 0; /* no overlapping copy within one storage */
        }
        struct ggml_tensor *sv = ggml_view_2d(ctx, x, ne0, r, x->nb[1], (size_t)off_s * x->nb[1]);
        struct ggml_tensor *dv = ggml_view_2d(ctx, d, ne0, r, d->nb[1], 0);
        struct ggml_tensor *c = ggml_cpy(ctx, sv, dv);
        ggml_build_forward_expand(b->g->gf, c);
        /* the storage now holds the copy: later readers see all of it through a view of the
         * copy's result (the copy wrote rows [0, r)), so they depend on the copy */
        replace(b, i, ggml_view_2d(ctx, c, ne0, ne1, d->nb[1], 0));
        break;
    }
    case 11:
    case 12: { /* ACC / SET in place of a block of rows */
        int i = pick_dst(b, in_ok);
        if (i < 0) {
            break;
        }
        struct ggml_tensor *d = b->pool[i];
        int64_t r = 1 + rnd(&b->rng, (int)ne1);
        int64_t off = rnd(&b->rng, (int)(ne1 - r + 1));
        int j = pick(b);
        struct ggml_tensor *src = ggml_cont(ctx, ggml_view_2d(ctx, b->pool[j], ne0, r, b->pool[j]->nb[1], 0));
        struct ggml_tensor *t =
            choice == 11 ? ggml_acc_inplace(ctx, d, src, d->nb[1], d->nb[2], d->nb[3], (size_t)off * d->nb[1])
                         : ggml_set_2d_inplace(ctx, d, src, d->nb[1], (size_t)off * d->nb[1]);
        replace(b, i, t);
        break;
    }
    case 13: { /* GET_ROWS */
        struct ggml_tensor *idx = add_input(b, ggml_new_tensor_1d(ctx, GGML_TYPE_I32, ne1), 2, ne1);
        push(b, ggml_get_rows(ctx, b->pool[pick(b)], idx));
        break;
    }
    case 14:
        push(b, ggml_soft_max(ctx, b->pool[pick(b)]));
        break;
    case 15:
        push(b, ggml_rms_norm(ctx, b->pool[pick(b)], 1e-5f));
        break;
    case 16: { /* transpose + CONT, and back */
        struct ggml_tensor *t = ggml_cont(ctx, ggml_transpose(ctx, b->pool[pick(b)]));
        push(b, ggml_cont(ctx, ggml_transpose(ctx, t)));
        break;
    }
    case 17: { /* reshape 3d + permute + CONT + reshape back */
        struct ggml_tensor *x = ggml_reshape_3d(ctx, ggml_cont(ctx, b->pool[pick(b)]), ne0, 1, ne1);
        struct ggml_tensor *p = ggml_cont(ctx, ggml_permute(ctx, x, 0, 2, 1, 3));
        push(b, ggml_reshape_2d(ctx, p, ne0, ne1));
        break;
    }
    default: { /* a fresh input */
        int i = b->n_pool < MAX_POOL ? b->n_pool++ : pick(b);
        b->pool[i] = new_f32_input(b, ne0, ne1);
        b->produced[i] = false;
        break;
    }
    }
}

static void build(struct ggml_context *ctx, uint64_t seed, struct pgraph *g) {
    struct builder b;
    memset(&b, 0, sizeof(b));
    memset(g, 0, sizeof(*g));
    b.ctx = ctx;
    b.g = g;
    b.rng = seed * 0x9E3779B97F4A7C15ull + 0x5EEDull;
    b.ne0 = 1 + rnd(&b.rng, 16);
    b.ne1 = 1 + rnd(&b.rng, 8);
    g->gf = ggml_new_graph_custom(ctx, GRAPH_SIZE, false);
    int n_in = 1 + rnd(&b.rng, 3);
    for (int i = 0; i < n_in; i++) {
        b.pool[b.n_pool] = new_f32_input(&b, b.ne0, b.ne1);
        b.produced[b.n_pool] = false;
        b.n_pool++;
    }
    int steps = 4 + rnd(&b.rng, 20);
    for (int s = 0; s < steps && g->n_inputs < MAX_INPUTS - 4; s++) {
        build_step(&b);
    }
    /* every produced tensor left in the pool is an output (a fresh SOFT_MAX when none) */
    for (int i = 0; i < b.n_pool && g->n_outputs < MAX_OUTPUTS; i++) {
        if (b.produced[i]) {
            bool dup = false;
            for (int j = 0; j < g->n_outputs; j++) {
                dup = dup || g->outputs[j] == b.pool[i];
            }
            if (!dup) {
                ggml_set_output(b.pool[i]);
                g->outputs[g->n_outputs++] = b.pool[i];
            }
        }
    }
    if (g->n_outputs == 0) {
        struct ggml_tensor *t = ggml_soft_max(ctx, b.pool[0]);
        ggml_set_output(t);
        ggml_build_forward_expand(g->gf, t);
        g->outputs[g->n_outputs++] = t;
    }
}

/* The bytes of input `i` for `seed`. */
static void input_data(uint64_t seed, int i, const struct input *in, void *dst) {
    uint64_t s = seed * 0xD1B54A32D192ED03ull + (uint64_t)i * 0x9E37ull + 1;
    int64_t n = ggml_nelements(in->t);
    if (in->kind == 0) {
        for (int64_t k = 0; k < n; k++) {
            ((float *)dst)[k] = rndf(&s);
        }
    } else if (in->kind == 1) {
        /* n distinct rows in [0, bound) */
        int64_t perm[64];
        for (int64_t k = 0; k < in->bound; k++) {
            perm[k] = k;
        }
        for (int64_t k = 0; k < n; k++) {
            int64_t j = k + (int64_t)(splitmix64(&s) % (uint64_t)(in->bound - k));
            int64_t t = perm[k];
            perm[k] = perm[j];
            perm[j] = t;
            ((int64_t *)dst)[k] = perm[k];
        }
    } else {
        for (int64_t k = 0; k < n; k++) {
            ((int32_t *)dst)[k] = (int32_t)(splitmix64(&s) % (uint64_t)in->bound);
        }
    }
}

static bool is_view_op(enum ggml_op op) {
    return op == GGML_OP_NONE || op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE ||
           op == GGML_OP_TRANSPOSE;
}

static double nmse(const float *got, const float *want, int64_t n) {
    double err = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)want[i];
        if (isnan(got[i]) != isnan(want[i])) {
            return INFINITY;
        }
        if (!isnan(d)) {
            err += d * d;
            ref += (double)want[i] * (double)want[i];
        }
    }
    if (ref == 0.0) {
        return err == 0.0 ? 0.0 : INFINITY;
    }
    return err / ref;
}

static const char *bname(ggml_backend_t b) { return b ? ggml_backend_name(b) : "none"; }

/* One seed; true when it passed. */
static bool run_seed(ggml_backend_sched_t sched, uint64_t seed) {
    char claims[256];
    choose_claims(seed, claims, sizeof(claims));

    /* the reference: CPU alone, no scheduler */
    struct ggml_init_params rp = {64 * 1024 * 1024, NULL, false};
    struct ggml_context *rctx = ggml_init(rp);
    static struct pgraph rg, sg;
    build(rctx, seed, &rg);
    for (int i = 0; i < rg.n_inputs; i++) {
        input_data(seed, i, &rg.inputs[i], rg.inputs[i].t->data);
    }
    if (ggml_graph_compute_with_ctx(rctx, rg.gf, 1) != GGML_STATUS_SUCCESS) {
        printf("seed %llu FAIL reference compute failed\n", (unsigned long long)seed);
        ggml_free(rctx);
        return false;
    }

    struct ggml_init_params sp = {(GRAPH_SIZE + 64) * ggml_tensor_overhead() + ggml_graph_overhead_custom(GRAPH_SIZE, false),
                                  NULL, true};
    struct ggml_context *sctx = ggml_init(sp);
    build(sctx, seed, &sg);
    bool ok = true;
    ggml_backend_sched_reset(sched);
    if (!ggml_backend_sched_alloc_graph(sched, sg.gf)) {
        printf("seed %llu FAIL alloc_graph returned false (withdrawn: %s)\n", (unsigned long long)seed, claims);
        ggml_free(sctx);
        ggml_free(rctx);
        return false;
    }
    /* the placement property */
    int n_inplace = 0;
    for (int i = 0; i < ggml_graph_n_nodes(sg.gf); i++) {
        struct ggml_tensor *node = ggml_graph_node(sg.gf, i);
        if (node->view_src == NULL || is_view_op(node->op)) {
            continue;
        }
        n_inplace++;
        struct ggml_tensor *root = node->view_src;
        ggml_backend_t wb = ggml_backend_sched_get_tensor_backend(sched, node);
        ggml_backend_t rb = ggml_backend_sched_get_tensor_backend(sched, root);
        if (wb != NULL && wb == rb) {
            continue;
        }
        ggml_backend_buffer_t buf = root->buffer ? root->buffer : node->buffer;
        if (wb != NULL && buf != NULL && ggml_backend_buffer_is_host(buf) &&
            ggml_backend_supports_buft(wb, ggml_backend_buffer_get_type(buf))) {
            continue;
        }
        if (ok) {
            printf("seed %llu FAIL placement (withdrawn: %s)\n", (unsigned long long)seed, claims);
        }
        ok = false;
        printf("  placement: node %d %s (%s) on %s, view root %s (%s) on %s, buffer %s%s\n", i, node->name,
               ggml_op_name(node->op), bname(wb), root->name, ggml_op_name(root->op), bname(rb),
               buf ? ggml_backend_buft_name(ggml_backend_buffer_get_type(buf)) : "none",
               buf && ggml_backend_buffer_is_host(buf) ? " (host)" : "");
    }
    for (int i = 0; i < sg.n_inputs; i++) {
        struct ggml_tensor *t = sg.inputs[i].t;
        if (t->buffer == NULL) {
            continue; /* not in the graph */
        }
        size_t nb = ggml_nbytes(t);
        void *tmp = malloc(nb);
        input_data(seed, i, &sg.inputs[i], tmp);
        ggml_backend_tensor_set(t, tmp, 0, nb);
        free(tmp);
    }
    enum ggml_status st = ggml_backend_sched_graph_compute(sched, sg.gf);
    if (st != GGML_STATUS_SUCCESS) {
        if (ok) {
            printf("seed %llu FAIL compute status %d (withdrawn: %s)\n", (unsigned long long)seed, (int)st, claims);
        }
        ok = false;
    } else {
        for (int o = 0; o < sg.n_outputs; o++) {
            struct ggml_tensor *t = sg.outputs[o];
            int64_t n = ggml_nelements(t);
            float *got = malloc((size_t)n * sizeof(float));
            ggml_backend_tensor_get(t, got, 0, (size_t)n * sizeof(float));
            double e = nmse(got, (const float *)rg.outputs[o]->data, n);
            if (!(e <= 1e-6)) {
                if (ok) {
                    printf("seed %llu FAIL numeric (withdrawn: %s)\n", (unsigned long long)seed, claims);
                }
                ok = false;
                printf("  output %d %s (%s) on %s: nmse=%g\n", o, t->name, ggml_op_name(t->op),
                       bname(ggml_backend_sched_get_tensor_backend(sched, t)), e);
            }
            free(got);
        }
    }
    if (ok && getenv("PROP_VERBOSE") != NULL) {
        printf("seed %llu ok nodes=%d inplace=%d splits=%d outputs=%d withdrawn=%s\n", (unsigned long long)seed,
               ggml_graph_n_nodes(sg.gf), n_inplace, ggml_backend_sched_get_n_splits(sched), sg.n_outputs, claims);
    }
    ggml_backend_sched_reset(sched);
    ggml_free(sctx);
    ggml_free(rctx);
    return ok;
}

int main(int argc, char **argv) {
    const char *dev_name = "HRX0";
    unsigned long long start = 0, count = 100;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dev") == 0 && i + 1 < argc) {
            dev_name = argv[++i];
        } else if (strcmp(argv[i], "--start") == 0 && i + 1 < argc) {
            start = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            count = strtoull(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: inplace_prop [--dev NAME] [--start S] [--count N]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    ggml_backend_load_all();
    hrx_api_init();
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(dev_name);
    if (dev == NULL) {
        printf("device %s not found\n", dev_name);
        return 2;
    }
    ggml_backend_t cpu = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
    ggml_backend_t backend = ggml_backend_dev_init(dev, NULL);
    if (cpu == NULL || backend == NULL) {
        printf("could not initialize the backends\n");
        return 2;
    }
    ggml_backend_cpu_set_n_threads(cpu, 1);
    ggml_backend_t backends[2] = {backend, cpu};
    ggml_backend_sched_t sched = ggml_backend_sched_new(backends, NULL, 2, GRAPH_SIZE, false, true);
    printf("scheduler backends: %s %s\n", ggml_backend_name(backend), ggml_backend_name(cpu));
    unsigned long long passed = 0, failed = 0;
    for (unsigned long long s = start; s < start + count; s++) {
        if (run_seed(sched, s)) {
            passed++;
        } else {
            failed++;
        }
    }
    printf("%llu passed, %llu failed\n", passed, failed);
    ggml_backend_sched_free(sched);
    ggml_backend_free(backend);
    ggml_backend_free(cpu);
    return failed == 0 ? 0 : 1;
}
