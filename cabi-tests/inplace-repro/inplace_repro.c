/*
 * inplace_repro: the model-free reproducer of the "in-place writer off its storage's backend"
 * defect (issue 5, items 4 and 5).
 *
 * Mode "repro" (default): for each of 32 deterministic cases, build
 *     mask_fill = FILL(-inf) of an F32 tensor [1, n_blk, nc*n_stream, 1]
 *     mask_set  = SET_ROWS(mask_fill, zeros [1, k, nc*n_stream, 1], rows [k, nc*n_stream])
 *     out       = SOFT_MAX(reshape(mask_set, [n_blk, nc*n_stream]))
 * compute it through the scheduler over [device, CPU] and compare with the same graph computed
 * by the CPU alone (ggml_graph_compute_with_ctx, no scheduler involved).
 *
 * Mode "place": the same cases, allocated and placed but not computed; prints the placement
 * lines only (the price: splits and nodes off the device).
 *
 * Mode "chain": the same cases with a second in-place writer of the same storage that the device
 * runs, SCALE_INPLACE(x2), between FILL and SET_ROWS: a scheduler that co-locates each writer
 * with the storage one at a time can pull the storage back and forth between the writers.
 *
 * Mode "stop": the storage written in place is pre-allocated in a buffer of the device, and the
 * writer (SET_ROWS) is an op the device does not run, so no backend that can use the buffer can
 * run the writer. A correct scheduler stops with a message; a wrong one writes through an
 * address the CPU cannot use. Variant "natural" lets the scheduler place the writer; variant
 * "assigned" assigns it to the CPU first (ggml_backend_sched_set_tensor_backend).
 *
 * Output is line oriented and parsed by the `repro` runner (crates/repro); see README.md.
 */
#define _POSIX_C_SOURCE 200809L

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CASES 32

/* One case of the reproducer, derived from its number only. */
struct repro_case {
    int id;
    int64_t n_blk;    /* rows of the mask (ne1), 8..256 */
    int64_t k;        /* rows set to zero per column, 1..n_blk */
    int64_t nc;       /* columns per stream */
    int64_t n_stream; /* 1 or 2 */
    enum ggml_type idx_type;
};

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static struct repro_case case_from_id(int id) {
    static const int64_t n_blk_table[8] = {8, 13, 32, 61, 100, 128, 199, 256};
    uint64_t rng = 0x5EED0000ull + (uint64_t)id;
    struct repro_case c;
    c.id = id;
    c.n_stream = 1 + (id & 1);
    c.idx_type = ((id >> 1) & 1) ? GGML_TYPE_I64 : GGML_TYPE_I32;
    c.n_blk = n_blk_table[(id / 4) % 8];
    switch (id % 8) {
    case 2:
        c.k = 1;
        break;
    case 5:
        c.k = c.n_blk;
        break;
    default:
        c.k = 1 + (int64_t)(splitmix64(&rng) % (uint64_t)c.n_blk);
        break;
    }
    c.nc = 1 + (int64_t)(splitmix64(&rng) % 7);
    return c;
}

/* k distinct row indices in [0, n_blk) for each of the nc*n_stream columns, column-major as the
 * index tensor [k, nc*n_stream] stores them. */
static int64_t *case_rows(const struct repro_case *c) {
    const int64_t ncols = c->nc * c->n_stream;
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)(c->k * ncols));
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)c->n_blk);
    if (rows == NULL || perm == NULL) {
        fprintf(stderr, "inplace_repro: out of memory\n");
        exit(2);
    }
    uint64_t rng = 0xF111ull * 1000003ull + (uint64_t)c->id;
    for (int64_t col = 0; col < ncols; col++) {
        for (int64_t i = 0; i < c->n_blk; i++) {
            perm[i] = i;
        }
        for (int64_t i = 0; i < c->k; i++) {
            int64_t j = i + (int64_t)(splitmix64(&rng) % (uint64_t)(c->n_blk - i));
            int64_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
            rows[col * c->k + i] = perm[i];
        }
    }
    free(perm);
    return rows;
}

static void fill_index_bytes(const struct repro_case *c, const int64_t *rows, void *dst) {
    const int64_t n = c->k * c->nc * c->n_stream;
    for (int64_t i = 0; i < n; i++) {
        if (c->idx_type == GGML_TYPE_I64) {
            ((int64_t *)dst)[i] = rows[i];
        } else {
            ((int32_t *)dst)[i] = (int32_t)rows[i];
        }
    }
}

/* The tensors of one built graph. */
struct repro_graph {
    struct ggml_cgraph *gf;
    struct ggml_tensor *fill;  /* NULL in stop mode (storage is pre-allocated) */
    struct ggml_tensor *scale; /* the first in-place writer in chain mode, else NULL */
    struct ggml_tensor *set;   /* the in-place writer */
    struct ggml_tensor *zeros; /* input */
    struct ggml_tensor *rows;  /* input */
    struct ggml_tensor *out;   /* output */
};

/* Builds FILL(-inf) -> SET_ROWS(zeros) -> SOFT_MAX; when `storage` is not NULL it is the
 * destination of SET_ROWS and no FILL is built. With `chain`, a second in-place writer of the
 * same storage, SCALE_INPLACE(x2) (which the device runs), comes between FILL and SET_ROWS. */
static struct repro_graph build_graph(struct ggml_context *ctx, const struct repro_case *c,
                                      struct ggml_tensor *storage, bool chain) {
    struct repro_graph g;
    const int64_t ncols = c->nc * c->n_stream;
    struct ggml_tensor *dst = storage;
    g.fill = NULL;
    g.scale = NULL;
    if (dst == NULL) {
        struct ggml_tensor *base = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, c->n_blk, ncols, 1);
        ggml_set_name(base, "mask_src");
        g.fill = ggml_fill(ctx, base, -INFINITY);
        ggml_set_name(g.fill, "mask_fill");
        dst = g.fill;
        if (chain) {
            g.scale = ggml_scale_inplace(ctx, g.fill, 2.0f);
            ggml_set_name(g.scale, "mask_scaled");
            dst = g.scale;
        }
    }
    g.zeros = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, c->k, ncols, 1);
    ggml_set_name(g.zeros, "zeros");
    ggml_set_input(g.zeros);
    g.rows = ggml_new_tensor_2d(ctx, c->idx_type, c->k, ncols);
    ggml_set_name(g.rows, "rows");
    ggml_set_input(g.rows);
    g.set = ggml_set_rows(ctx, dst, g.zeros, g.rows);
    ggml_set_name(g.set, storage ? "store_write" : "mask_set");
    struct ggml_tensor *flat = ggml_reshape_2d(ctx, g.set, c->n_blk, ncols);
    g.out = ggml_soft_max(ctx, flat);
    ggml_set_name(g.out, "out");
    ggml_set_output(g.out);
    g.gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(g.gf, g.out);
    return g;
}

/* The same graph on the CPU alone, no scheduler: the expected result. */
static float *reference(const struct repro_case *c, const int64_t *rows, bool chain) {
    const int64_t ncols = c->nc * c->n_stream;
    const size_t n_out = (size_t)(c->n_blk * ncols);
    struct ggml_init_params ip = {
        /* .mem_size   = */ 16 * ggml_tensor_overhead() + ggml_graph_overhead() +
            (size_t)(c->n_blk * ncols) * sizeof(float) * 4 + (size_t)(c->k * ncols) * 16 + 4096,
        /* .mem_buffer = */ NULL,
        /* .no_alloc   = */ false,
    };
    struct ggml_context *ctx = ggml_init(ip);
    struct repro_graph g = build_graph(ctx, c, NULL, chain);
    memset(g.zeros->data, 0, ggml_nbytes(g.zeros));
    fill_index_bytes(c, rows, g.rows->data);
    if (ggml_graph_compute_with_ctx(ctx, g.gf, 1) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "inplace_repro: CPU reference compute failed\n");
        exit(2);
    }
    float *res = malloc(n_out * sizeof(float));
    memcpy(res, g.out->data, n_out * sizeof(float));
    ggml_free(ctx);
    return res;
}

static void print_mapped_base(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL) {
        printf("mapped libggml-base: unknown\n");
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    bool found = false;
    while (!found && getline(&line, &cap, f) > 0) {
        char *path = strchr(line, '/');
        if (path != NULL && strstr(path, "libggml-base") != NULL) {
            path[strcspn(path, "\n")] = '\0';
            printf("mapped libggml-base: %s\n", path);
            found = true;
        }
    }
    if (!found) {
        printf("mapped libggml-base: unknown\n");
    }
    free(line);
    fclose(f);
}

static const char *backend_of(ggml_backend_sched_t sched, struct ggml_tensor *t) {
    ggml_backend_t b = ggml_backend_sched_get_tensor_backend(sched, t);
    return b ? ggml_backend_name(b) : "none";
}

/* Prints the placement line: splits, the backends of FILL and SET_ROWS, and the nodes (not
 * counting pure views) placed off the device. */
static void print_placement(ggml_backend_sched_t sched, ggml_backend_t dev, const struct repro_case *c,
                            const struct repro_graph *g) {
    int n_nodes = 0;
    int off = 0;
    for (int i = 0; i < ggml_graph_n_nodes(g->gf); i++) {
        struct ggml_tensor *node = ggml_graph_node(g->gf, i);
        enum ggml_op op = node->op;
        if (op == GGML_OP_NONE || op == GGML_OP_RESHAPE || op == GGML_OP_VIEW || op == GGML_OP_PERMUTE ||
            op == GGML_OP_TRANSPOSE) {
            continue;
        }
        n_nodes++;
        if (ggml_backend_sched_get_tensor_backend(sched, node) != dev) {
            off++;
        }
    }
    printf("placement case=%d n_blk=%lld k=%lld nc=%lld n_stream=%lld idx=%s splits=%d fill=%s set_rows=%s "
           "out=%s scale=%s nodes=%d off_device=%d\n",
           c->id, (long long)c->n_blk, (long long)c->k, (long long)c->nc, (long long)c->n_stream,
           ggml_type_name(c->idx_type), ggml_backend_sched_get_n_splits(sched),
           g->fill ? backend_of(sched, g->fill) : "none", backend_of(sched, g->set), backend_of(sched, g->out),
           g->scale ? backend_of(sched, g->scale) : "none", n_nodes, off);
    fflush(stdout);
}

static size_t graph_ctx_size(void) { return 64 * ggml_tensor_overhead() + ggml_graph_overhead(); }

/* Runs cases [first, first+count). With `compute` false only the placement is printed (the
 * price of a scheduler that cannot compute the graph without faulting). `chain` adds the second
 * in-place writer (see build_graph). */
static int run_repro(ggml_backend_sched_t sched, ggml_backend_t dev, int first, int count, bool compute,
                     bool chain) {
    int passed = 0;
    int failed = 0;
    for (int id = first; id < first + count; id++) {
        struct repro_case c = case_from_id(id);
        int64_t *rows = case_rows(&c);
        float *want = reference(&c, rows, chain);

        struct ggml_init_params ip = {graph_ctx_size(), NULL, true};
        struct ggml_context *ctx = ggml_init(ip);
        struct repro_graph g = build_graph(ctx, &c, NULL, chain);
        ggml_backend_sched_reset(sched);
        if (!ggml_backend_sched_alloc_graph(sched, g.gf)) {
            printf("case %d MISMATCH alloc_failed\n", id);
            failed++;
            ggml_free(ctx);
            free(want);
            free(rows);
            continue;
        }
        print_placement(sched, dev, &c, &g);
        if (!compute) {
            ggml_free(ctx);
            free(want);
            free(rows);
            continue;
        }

        void *zeros = calloc(1, ggml_nbytes(g.zeros));
        void *idx = malloc(ggml_nbytes(g.rows));
        fill_index_bytes(&c, rows, idx);
        ggml_backend_tensor_set(g.zeros, zeros, 0, ggml_nbytes(g.zeros));
        ggml_backend_tensor_set(g.rows, idx, 0, ggml_nbytes(g.rows));
        enum ggml_status st = ggml_backend_sched_graph_compute(sched, g.gf);

        const size_t n_out = (size_t)ggml_nelements(g.out);
        float *got = malloc(n_out * sizeof(float));
        ggml_backend_tensor_get(g.out, got, 0, n_out * sizeof(float));
        double max_err = 0.0;
        for (size_t i = 0; i < n_out; i++) {
            double e = fabs((double)got[i] - (double)want[i]);
            if (isnan(e)) {
                e = INFINITY;
            }
            if (e > max_err) {
                max_err = e;
            }
        }
        if (st == GGML_STATUS_SUCCESS && max_err <= 1e-6) {
            printf("case %d ok\n", id);
            passed++;
        } else {
            printf("case %d MISMATCH max_err=%g status=%d\n", id, max_err, (int)st);
            failed++;
        }
        fflush(stdout);
        free(got);
        free(idx);
        free(zeros);
        ggml_free(ctx);
        free(want);
        free(rows);
    }
    ggml_backend_sched_reset(sched);
    if (!compute) {
        printf("placed %d cases\n", count);
        return 0;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}

static int run_stop(ggml_backend_sched_t sched, ggml_backend_t dev, ggml_backend_t cpu, bool assigned) {
    struct repro_case c = case_from_id(4);
    int64_t *rows = case_rows(&c);
    const int64_t ncols = c.nc * c.n_stream;

    /* the storage: pre-allocated in a buffer of the device, filled with -inf */
    struct ggml_init_params sp = {4 * ggml_tensor_overhead(), NULL, true};
    struct ggml_context *sctx = ggml_init(sp);
    struct ggml_tensor *store = ggml_new_tensor_4d(sctx, GGML_TYPE_F32, 1, c.n_blk, ncols, 1);
    ggml_set_name(store, "kv_store");
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(sctx, dev);
    if (buf == NULL) {
        printf("stop: could not allocate the storage on %s\n", ggml_backend_name(dev));
        return 2;
    }
    const size_t n = (size_t)ggml_nelements(store);
    float *ninf = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        ninf[i] = -INFINITY;
    }
    ggml_backend_tensor_set(store, ninf, 0, n * sizeof(float));
    free(ninf);

    struct ggml_init_params ip = {graph_ctx_size(), NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    struct repro_graph g = build_graph(ctx, &c, store, false);
    printf("stop: storage %s in buffer type %s of backend %s; writer %s (%s); variant %s\n", store->name,
           ggml_backend_buft_name(ggml_backend_buffer_get_type(buf)), ggml_backend_name(dev), g.set->name,
           ggml_op_name(g.set->op), assigned ? "assigned" : "natural");
    printf("stop: device supports writer: %s; CPU supports buffer type: %s\n",
           ggml_backend_supports_op(dev, g.set) ? "yes" : "no",
           ggml_backend_supports_buft(cpu, ggml_backend_buffer_get_type(buf)) ? "yes" : "no");
    fflush(stdout);

    ggml_backend_sched_reset(sched);
    if (assigned) {
        ggml_backend_sched_set_tensor_backend(sched, g.set, cpu);
    }
    if (!ggml_backend_sched_alloc_graph(sched, g.gf)) {
        printf("stop: alloc_graph returned false\n");
        return 3;
    }
    printf("stop: scheduled writer on %s, splits=%d\n", backend_of(sched, g.set),
           ggml_backend_sched_get_n_splits(sched));
    fflush(stdout);
    void *zeros = calloc(1, ggml_nbytes(g.zeros));
    void *idx = malloc(ggml_nbytes(g.rows));
    fill_index_bytes(&c, rows, idx);
    ggml_backend_tensor_set(g.zeros, zeros, 0, ggml_nbytes(g.zeros));
    ggml_backend_tensor_set(g.rows, idx, 0, ggml_nbytes(g.rows));
    enum ggml_status st = ggml_backend_sched_graph_compute(sched, g.gf);
    printf("stop: compute returned status %d without stopping\n", (int)st);
    free(idx);
    free(zeros);
    free(rows);
    ggml_backend_sched_reset(sched);
    ggml_free(ctx);
    ggml_backend_buffer_free(buf);
    ggml_free(sctx);
    return 4;
}

static void usage(void) {
    fprintf(stderr, "usage: inplace_repro [--dev NAME] [--mode repro|place|chain|stop|stop-assigned] [--first N] "
                    "[--count N]\n");
}

int main(int argc, char **argv) {
    const char *dev_name = "HRX0";
    const char *mode = "repro";
    int first = 0;
    int count = N_CASES;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dev") == 0 && i + 1 < argc) {
            dev_name = argv[++i];
        } else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
            mode = argv[++i];
        } else if (strcmp(argv[i], "--first") == 0 && i + 1 < argc) {
            first = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            count = atoi(argv[++i]);
        } else {
            usage();
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    print_mapped_base();

    ggml_backend_load_all();
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(dev_name);
    if (dev == NULL) {
        printf("device %s not found; devices:", dev_name);
        for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
            printf(" %s", ggml_backend_dev_name(ggml_backend_dev_get(i)));
        }
        printf("\n");
        return 2;
    }
    ggml_backend_t cpu = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
    if (cpu == NULL) {
        printf("no CPU backend\n");
        return 2;
    }
    ggml_backend_cpu_set_n_threads(cpu, 1);
    bool dev_is_cpu = ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU;
    ggml_backend_t backend = dev_is_cpu ? cpu : ggml_backend_dev_init(dev, NULL);
    if (backend == NULL) {
        printf("could not initialize device %s\n", dev_name);
        return 2;
    }
    ggml_backend_t backends[2] = {backend, cpu};
    int n_backends = dev_is_cpu ? 1 : 2;
    ggml_backend_sched_t sched = ggml_backend_sched_new(backends, NULL, n_backends, 2048, false, true);
    printf("scheduler backends:");
    for (int i = 0; i < n_backends; i++) {
        printf(" %s", ggml_backend_name(backends[i]));
    }
    printf("\n");

    int rc;
    if (strcmp(mode, "repro") == 0) {
        rc = run_repro(sched, backend, first, count, true, false);
    } else if (strcmp(mode, "place") == 0) {
        rc = run_repro(sched, backend, first, count, false, false);
    } else if (strcmp(mode, "chain") == 0) {
        rc = run_repro(sched, backend, first, count, true, true);
    } else if (strcmp(mode, "stop") == 0 || strcmp(mode, "stop-assigned") == 0) {
        if (dev_is_cpu) {
            printf("stop mode needs a device other than the CPU\n");
            rc = 2;
        } else {
            rc = run_stop(sched, backend, cpu, strcmp(mode, "stop-assigned") == 0);
        }
    } else {
        usage();
        rc = 2;
    }
    ggml_backend_sched_free(sched);
    if (!dev_is_cpu) {
        ggml_backend_free(backend);
    }
    ggml_backend_free(cpu);
    return rc;
}
