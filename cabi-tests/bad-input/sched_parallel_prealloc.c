/* The crash tests/sched_calls.rs found, in C, to run in both arms: a parallel scheduler
 * (pipeline copies) on the CPU backend computes a graph whose input (ggml_set_input) was
 * allocated in its own buffer before the scheduler saw it, is reset, and computes a new graph
 * over the same input. Round 1 dies of SIGSEGV in ggml_gallocr_alloc_graph, in stock and in
 * ours alike (checked by hand on the pinned build); with parallel off every round prints 20.
 *
 *   U=target/upstream/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml B=target/llama-stock/bin
 *   cc -O1 -g -I$U/include cabi-tests/bad-input/sched_parallel_prealloc.c -o /tmp/p \
 *      -L$B -lggml-base -lggml-cpu
 *   LD_LIBRARY_PATH=$B /tmp/p 1                      # stock, parallel: SIGSEGV in round 1
 *   LD_LIBRARY_PATH=target/ours/lib:$B /tmp/p 1      # ours, parallel: the same
 *   LD_LIBRARY_PATH=target/ours/lib:$B /tmp/p        # serial: 3 rounds, out[5]=20 */
#include <stdio.h>
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
static struct ggml_cgraph * g(struct ggml_context ** pctx, struct ggml_tensor * in) {
    struct ggml_init_params p = { ggml_tensor_overhead() * 16 + ggml_graph_overhead(), NULL, true };
    *pctx = ggml_init(p);
    struct ggml_tensor * out = ggml_scale(*pctx, ggml_add(*pctx, in, in), 2.0f);
    ggml_set_output(out);
    struct ggml_cgraph * gf = ggml_new_graph(*pctx);
    ggml_build_forward_expand(gf, out);
    return gf;
}
int main(int argc, char ** argv) {
    (void) argv;
    int parallel = argc > 1;
    setvbuf(stdout, NULL, _IONBF, 0);
    ggml_backend_t cpu = ggml_backend_cpu_init();
    struct ggml_init_params p = { ggml_tensor_overhead() * 4, NULL, true };
    struct ggml_context * cin = ggml_init(p);
    struct ggml_tensor * in = ggml_new_tensor_2d(cin, GGML_TYPE_F32, 24, 1);
    ggml_set_input(in);
    ggml_backend_buffer_t b = ggml_backend_alloc_ctx_tensors(cin, cpu);
    float v[24]; for (int i = 0; i < 24; i++) v[i] = i;
    ggml_backend_tensor_set(in, v, 0, sizeof v);
    ggml_backend_sched_t s = ggml_backend_sched_new(&cpu, NULL, 1, 1983, parallel, false);
    for (int round = 0; round < 3; round++) {
        struct ggml_context * ctx;
        struct ggml_cgraph * gf = g(&ctx, in);
        int st = ggml_backend_sched_graph_compute(s, gf);
        float o[24]; ggml_backend_tensor_get(ggml_graph_node(gf, -1), o, 0, sizeof o);
        printf("round %d status %d out[5]=%g\n", round, st, o[5]);
        ggml_backend_sched_reset(s);
        ggml_free(ctx);
    }
    ggml_backend_sched_free(s);
    ggml_backend_buffer_free(b);
    return 0;
}
