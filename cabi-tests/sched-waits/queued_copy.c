// queued_copy.c: does the scheduler finish a queued input copy before the copy's source may
// be overwritten? (src/sched/compute.rs, SplitWaits; docs/sched.md, "One wait per split";
// tests/sched_queued_copy.rs is the same check inside the Rust test suite, on our library
// only; this program runs against any libggml-base, stock's included: run.sh.)
//
// The devices, TA (its work queued until synchronize) and TCPU, are queue_device.h's.
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

#include "queue_device.h"

#define N 8

static bool cb_eval(struct ggml_tensor * t, bool ask, void * ud) { (void) t; (void) ud; return ask ? false : true; }

int main(int argc, char ** argv) {
    (void) argv;
    int n_tokens = argc > 1 ? atoi(argv[1]) : 3;
    int parallel = init_devices();
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
