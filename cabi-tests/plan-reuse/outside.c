// outside.c: a graph built node by node (ggml_graph_add_node), whose two sources are not in
// the graph: n1 = 2 sa, n2 = 3 sb, o = n1 + n2. First graph: sa and sb two tensors; second
// graph, on the same scheduler: sa == sb, one tensor read twice. The two share their counts and
// every tensor fits the first plan, in which n1, the only reader of sa, takes sa's memory in
// place; applied to the second graph, n1 overwrites the tensor n2 still has to read. Stock
// reuses that plan (8 wrong values); ours sees another structure (src/sched/plan_key.rs numbers
// each source outside the graph where it is first read) and plans again. Prints each run's
// first value of o and its wrong values; exit 1 when the second graph has any.
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include <stdio.h>
#include <stdlib.h>

static int run(ggml_backend_sched_t sched, int shared) {
    struct ggml_init_params p = { 32 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(p);
    struct ggml_tensor * sa = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8);
    ggml_set_input(sa);
    struct ggml_tensor * sb = sa;
    if (!shared) { sb = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8); ggml_set_input(sb); }
    struct ggml_tensor * n1 = ggml_scale(ctx, sa, 2.0f);
    struct ggml_tensor * n2 = ggml_scale(ctx, sb, 3.0f);
    struct ggml_tensor * o  = ggml_add(ctx, n1, n2);
    ggml_set_output(o);
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    // Five more nodes after o, so that stock's gallocr hash set (sized from the graph's
    // tensors) has room for the two sources outside the graph.
    struct ggml_tensor * nodes[8] = { n1, n2, o };
    for (int i = 3; i < 8; i++) nodes[i] = ggml_scale(ctx, nodes[i - 1], 1.0f);
    ggml_set_output(nodes[7]);
    for (int i = 0; i < 8; i++) {
        nodes[i]->flags |= GGML_TENSOR_FLAG_COMPUTE; // ggml-cpu computes only flagged nodes
        ggml_graph_add_node(g, nodes[i]);
    }
    if (!ggml_backend_sched_alloc_graph(sched, g)) { fprintf(stderr, "alloc failed\n"); exit(2); }
    float a[8], b[8], got[8];
    for (int i = 0; i < 8; i++) { a[i] = 1 + i; b[i] = shared ? a[i] : 100 + i; }
    ggml_backend_tensor_set(sa, a, 0, sizeof a);
    if (!shared) ggml_backend_tensor_set(sb, b, 0, sizeof b);
    if (ggml_backend_sched_graph_compute(sched, g) != GGML_STATUS_SUCCESS) exit(2);
    ggml_backend_tensor_get(o, got, 0, sizeof got);
    int wrong = 0;
    for (int i = 0; i < 8; i++) wrong += got[i] != 2 * a[i] + 3 * b[i];
    printf("shared=%d o[0]=%g want %g, %d wrong\n", shared, got[0], 2 * a[0] + 3 * b[0], wrong);
    ggml_backend_sched_reset(sched);
    ggml_free(ctx);
    return wrong;
}

int main(void) {
    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, 1);
    ggml_backend_sched_t fresh = ggml_backend_sched_new(&cpu, NULL, 1, 64, false, false);
    printf("fresh: "); run(fresh, 1);
    ggml_backend_sched_free(fresh);
    ggml_backend_sched_t s = ggml_backend_sched_new(&cpu, NULL, 1, 64, false, false);
    printf("first: "); run(s, 0);
    printf("second after first: ");
    int wrong = run(s, 1);
    ggml_backend_sched_free(s);
    ggml_backend_free(cpu);
    return wrong ? 1 : 0;
}
