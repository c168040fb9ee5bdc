// plan_reuse.c: may the graph allocator's plan for one graph place another graph of the same
// structure and counts whose tensors all fit it? Two cases where it must not (tests/plan_reuse.rs
// is the same check inside the Rust test suite, our library only; this program runs against
// any libggml-base, stock's included: run.sh).
//
// The backend is the real ggml-cpu with one thread, which computes a row after the other.
//
//   bcast  b = scale(in_b, 1), out = a + b, y = 3a (`a` has two readers, so only `b` can give
//          `out` its memory). First graph: in_b 4x4, so `b` has `out`'s layout and the plan
//          lets `out` run in place over `b`. Second graph: in_b 4x1, broadcast over the rows;
//          every tensor is no bigger than planned. Over the first plan, row 1 of `out` reads
//          `b` after row 0 of `out` has overwritten it.
//   leaf   z = 2x, plus a leaf y that is an input and an output and that no node reads. First
//          graph: y of 4 floats; second: y of 16. A fit check of nodes and their sources
//          never looks at y: it is placed at its planned offset with room for 4.
//
// Each case runs the second graph on a fresh scheduler first (the oracle), then the first and
// the second graph on one scheduler. Prints, for the second graph after the first:
// "OK: 0 wrong values", "FAIL: N wrong values", or "MISPLACED: <why>" (the leaf case checks
// where y lies before anything is written, so a misplaced y is not a heap overflow).
//
// Usage: plan_reuse bcast|leaf   (exit 0 for OK, 1 for FAIL or MISPLACED, 2 for a setup error)

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ggml_backend_t cpu;

static struct ggml_context * new_ctx(void) {
    struct ggml_init_params p = {
        .mem_size   = 32 * ggml_tensor_overhead() + ggml_graph_overhead(),
        .mem_buffer = NULL,
        .no_alloc   = true,
    };
    struct ggml_context * ctx = ggml_init(p);
    if (!ctx) { fprintf(stderr, "ggml_init failed\n"); exit(2); }
    return ctx;
}

static struct ggml_tensor * input(struct ggml_context * ctx, int64_t n0, int64_t n1) {
    struct ggml_tensor * t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n0, n1);
    ggml_set_input(t);
    return t;
}

static int count_wrong(struct ggml_tensor * t, const float * want, int n) {
    float got[64];
    if (n > 64 || ggml_nelements(t) != n) { fprintf(stderr, "bad size\n"); exit(2); }
    ggml_backend_tensor_get(t, got, 0, (size_t) n * sizeof(float));
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += got[i] != want[i];
    return wrong;
}

static void compute(ggml_backend_sched_t sched, struct ggml_cgraph * g) {
    if (ggml_backend_sched_graph_compute(sched, g) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "compute failed\n");
        exit(2);
    }
}

// bcast: one graph with in_b of `rows_b` rows; returns its wrong values.
static int run_bcast(ggml_backend_sched_t sched, int rows_b) {
    struct ggml_context * ctx  = new_ctx();
    struct ggml_tensor *  a    = input(ctx, 4, 4);
    struct ggml_tensor *  in_b = input(ctx, 4, rows_b);
    struct ggml_tensor *  b    = ggml_scale(ctx, in_b, 1.0f);
    struct ggml_tensor *  out  = ggml_add(ctx, a, b);
    struct ggml_tensor *  y    = ggml_scale(ctx, a, 3.0f);
    ggml_set_output(out);
    ggml_set_output(y);
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, out);
    ggml_build_forward_expand(g, y);
    if (!ggml_backend_sched_alloc_graph(sched, g)) { fprintf(stderr, "alloc failed\n"); exit(2); }
    float av[16], bv[16], want_out[16], want_y[16];
    int   n_b = 4 * rows_b;
    for (int k = 0; k < 16; k++) av[k] = (float) k;
    for (int k = 0; k < n_b; k++) bv[k] = 1000.0f * (float) (k + 1);
    for (int k = 0; k < 16; k++) {
        want_out[k] = av[k] + bv[k % n_b];
        want_y[k]   = 3.0f * av[k];
    }
    ggml_backend_tensor_set(a, av, 0, sizeof av);
    ggml_backend_tensor_set(in_b, bv, 0, (size_t) n_b * sizeof(float));
    compute(sched, g);
    int wrong = count_wrong(out, want_out, 16) + count_wrong(y, want_y, 16);
    ggml_backend_sched_reset(sched);
    ggml_free(ctx);
    return wrong;
}

// leaf: one graph with y of `ny` floats; returns its wrong values, or -1 when y is misplaced
// (outside its buffer, or over x or z).
static int run_leaf(ggml_backend_sched_t sched, int ny) {
    struct ggml_context * ctx = new_ctx();
    struct ggml_tensor *  x   = input(ctx, 4, 1);
    struct ggml_tensor *  y   = input(ctx, ny, 1);
    struct ggml_tensor *  z   = ggml_scale(ctx, x, 2.0f);
    ggml_set_output(z);
    ggml_set_output(y);
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, z);
    ggml_build_forward_expand(g, y);
    if (!ggml_backend_sched_alloc_graph(sched, g)) { fprintf(stderr, "alloc failed\n"); exit(2); }
    uintptr_t base = (uintptr_t) ggml_backend_buffer_get_base(y->buffer);
    uintptr_t end  = base + ggml_backend_buffer_get_size(y->buffer);
    uintptr_t y0 = (uintptr_t) y->data, y1 = y0 + ggml_nbytes(y);
    if (y0 < base || y1 > end) {
        printf("MISPLACED: y [%#lx, %#lx) outside its buffer [%#lx, %#lx)\n", (unsigned long) y0,
               (unsigned long) y1, (unsigned long) base, (unsigned long) end);
        return -1;
    }
    struct ggml_tensor * others[2] = { x, z };
    for (int i = 0; i < 2; i++) {
        uintptr_t t0 = (uintptr_t) others[i]->data, t1 = t0 + ggml_nbytes(others[i]);
        if (!(t1 <= y0 || y1 <= t0)) {
            printf("MISPLACED: y [%#lx, %#lx) overlaps %s\n", (unsigned long) y0, (unsigned long) y1,
                   i == 0 ? "x" : "z");
            return -1;
        }
    }
    float xv[4] = { 1, 2, 3, 4 }, yv[16], want_z[4];
    for (int i = 0; i < ny; i++) yv[i] = -(float) i - 1.0f;
    for (int i = 0; i < 4; i++) want_z[i] = 2.0f * xv[i];
    ggml_backend_tensor_set(x, xv, 0, sizeof xv);
    ggml_backend_tensor_set(y, yv, 0, (size_t) ny * sizeof(float));
    compute(sched, g);
    int wrong = count_wrong(z, want_z, 4) + count_wrong(y, yv, ny);
    ggml_backend_sched_reset(sched);
    ggml_free(ctx);
    return wrong;
}

static ggml_backend_sched_t new_sched(void) {
    ggml_backend_t backends[1] = { cpu };
    return ggml_backend_sched_new(backends, NULL, 1, 64, false, true);
}

int main(int argc, char ** argv) {
    if (argc != 2 || (strcmp(argv[1], "bcast") && strcmp(argv[1], "leaf"))) {
        fprintf(stderr, "usage: plan_reuse bcast|leaf\n");
        return 2;
    }
    int bcast = !strcmp(argv[1], "bcast");
    cpu = ggml_backend_cpu_init();
    if (!cpu) { fprintf(stderr, "no CPU backend\n"); return 2; }
    ggml_backend_cpu_set_n_threads(cpu, 1);
    int (*run)(ggml_backend_sched_t, int) = bcast ? run_bcast : run_leaf;
    int first = 4, second = bcast ? 1 : 16; // y of 4 then 16; in_b of 4 rows then 1

    ggml_backend_sched_t fresh = new_sched();
    int oracle = run(fresh, second);
    ggml_backend_sched_free(fresh);
    if (oracle != 0) { fprintf(stderr, "the second graph is wrong on a fresh scheduler: %d\n", oracle); return 2; }

    ggml_backend_sched_t sched = new_sched();
    if (run(sched, first) != 0) { fprintf(stderr, "the first graph is wrong\n"); return 2; }
    int wrong = run(sched, second);
    ggml_backend_sched_free(sched);
    ggml_backend_free(cpu);
    if (wrong < 0) return 1;
    printf("%s: %d wrong values\n", wrong ? "FAIL" : "OK", wrong);
    return wrong ? 1 : 0;
}
