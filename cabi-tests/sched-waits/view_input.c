// view_input.c: split inputs that are views (a break helper's two cases, 2026-12-08). A view
// computes nothing: its bytes are its view root's, written by the root's producer or by an
// in-place writer of it. Two graphs, N tokens of 8 values each; prints "OK|FAIL: K wrong
// values".
//
//   order  TA (queued until synchronize, may use the CPU's buffer type), TB (its own buffer
//          type only), TCPU. c = x + x on TCPU, w = add_inplace(c, x) on TA (writes c's
//          bytes, queued), r = w + w on TB, which reads w through a copy. The copy must wait
//          for TA, the backend that wrote the bytes, not for c's (TCPU). Expected r = 6x.
//   apart  TB, TCPU. r = x + x on TB; v, a view of all of r, assigned to TCPU; s = v + v on
//          TB. Judged by its own placement, v is copied for s at the start of the split that
//          computes r (stale: the copy runs before r is written); judged by its root's, s
//          reads it where it is. Expected s = 4x.
//   viewof as order, but TB reads v, a view of w assigned to TA: v's view_src is c (ggml
//          points every view at its root), so only the graph tells that TA wrote the bytes
//          last. Expected r = 6x.
//   prealloc  K, pre-allocated in TA's buffer type and zeroed, is assigned to TCPU (which
//          cannot use that buffer type; the scheduler keeps the assignment);
//          w = add_inplace(K, x) on TA (queued), v a view of K, s = v + w on TB. K
//          accumulates x token by token; expected s = 2K.
//
//   reread TB, TCPU. c = x + x on TCPU; v, a view of c; s1 = v + v on TB, which reads v
//          through a copy; w = add_inplace(c, x) on TCPU; s = s1 + v on TB. The copy is made
//          once per backend, in the first split that needs it: the second TB split must fill
//          it anew, after w. Expected s = 7x.
//
//   view_input N order|apart|viewof|prealloc|reread   (PIPELINE=1: a parallel scheduler,
//                                                      TA with events)

#include "queue_device.h"

#define N 8

static bool a_uses_host(ggml_backend_dev_t d, ggml_backend_buffer_type_t b) {
    return b == dev_buft(d) || b == ggml_backend_cpu_buffer_type();
}

static struct ggml_tensor * named(struct ggml_tensor * t, const char * name) {
    ggml_set_name(t, name);
    return t;
}

int main(int argc, char ** argv) {
    const char * graph = argc == 3 ? argv[2] : "";
    bool         order = strcmp(graph, "order") == 0, apart = strcmp(graph, "apart") == 0;
    bool         viewof = strcmp(graph, "viewof") == 0, prealloc = strcmp(graph, "prealloc") == 0;
    bool         reread = strcmp(graph, "reread") == 0;
    if (!order && !apart && !viewof && !prealloc && !reread) {
        fprintf(stderr, "usage: view_input N order|apart|viewof|prealloc|reread\n");
        return 2;
    }
    int n_tokens = atoi(argv[1]);
    int  parallel = init_devices();
    dev_a.iface.supports_buft = a_uses_host;

    ggml_backend_t ta = new_backend(&dev_a), tb = new_backend(&dev_b), tcpu = new_backend(&dev_cpu);
    ggml_backend_t list_order[3] = { ta, tb, tcpu };
    ggml_backend_t list_apart[2] = { tb, tcpu };
    ggml_backend_sched_t sched =
        apart || reread ? ggml_backend_sched_new(list_apart, NULL, 2, 64, parallel, false)
              : ggml_backend_sched_new(list_order, NULL, 3, 64, parallel, false);

    struct ggml_init_params ip  = { 32 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context *   ctx = ggml_init(ip);
    struct ggml_tensor *    x   = named(ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N), "x");
    ggml_set_input(x);
    struct ggml_tensor * out;
    struct ggml_tensor * first[2] = { NULL, NULL }; // expanded into the graph before out
    float                factor = 0.0f; // out = factor * x, or with prealloc 2 * K
    // prealloc: K in a context and buffer of its own, zeroed
    struct ggml_context * kctx = ggml_init(ip);
    struct ggml_tensor *  K    = named(ggml_new_tensor_1d(kctx, GGML_TYPE_F32, N), "K");
    ggml_backend_buffer_t kbuf = ggml_backend_alloc_ctx_tensors_from_buft(kctx, &buft_a);
    float                 k_sum[N] = { 0 };
    ggml_backend_tensor_set(K, k_sum, 0, sizeof k_sum);
    ggml_backend_sched_reset(sched);
    if (order || viewof) {
        struct ggml_tensor * c = named(ggml_add(ctx, x, x), "c");
        struct ggml_tensor * w = named(ggml_add_inplace(ctx, c, x), "w");
        struct ggml_tensor * v = viewof ? named(ggml_view_1d(ctx, w, N, 0), "v") : w;
        out                    = named(ggml_add(ctx, v, v), "r");
        factor                 = 6.0f;
        ggml_backend_sched_set_tensor_backend(sched, x, tcpu);
        ggml_backend_sched_set_tensor_backend(sched, c, tcpu);
        ggml_backend_sched_set_tensor_backend(sched, w, ta);
        if (viewof) {
            ggml_backend_sched_set_tensor_backend(sched, v, ta);
        }
        ggml_backend_sched_set_tensor_backend(sched, out, tb);
    } else if (reread) {
        struct ggml_tensor * c  = named(ggml_add(ctx, x, x), "c");
        struct ggml_tensor * v  = named(ggml_view_1d(ctx, c, N, 0), "v");
        struct ggml_tensor * s1 = named(ggml_add(ctx, v, v), "s1");
        struct ggml_tensor * w  = named(ggml_add_inplace(ctx, c, x), "w");
        out                     = named(ggml_add(ctx, s1, v), "s");
        factor                  = 7.0f;
        ggml_backend_sched_set_tensor_backend(sched, x, tcpu);
        ggml_backend_sched_set_tensor_backend(sched, c, tcpu);
        ggml_backend_sched_set_tensor_backend(sched, s1, tb);
        ggml_backend_sched_set_tensor_backend(sched, w, tcpu);
        ggml_backend_sched_set_tensor_backend(sched, out, tb);
        // w is no source of s: the graph takes s1, then w, then s
        first[0] = s1;
        first[1] = w;
    } else if (prealloc) {
        ggml_backend_sched_set_tensor_backend(sched, x, tcpu);
        ggml_backend_sched_set_tensor_backend(sched, K, tcpu);
        struct ggml_tensor * w = named(ggml_add_inplace(ctx, K, x), "w");
        struct ggml_tensor * v = named(ggml_view_1d(ctx, K, N, 0), "v");
        out                    = named(ggml_add(ctx, v, w), "s");
        ggml_backend_sched_set_tensor_backend(sched, w, ta);
        ggml_backend_sched_set_tensor_backend(sched, out, tb);
    } else {
        struct ggml_tensor * r = named(ggml_add(ctx, x, x), "r");
        struct ggml_tensor * v = named(ggml_view_1d(ctx, r, N, 0), "v");
        out                    = named(ggml_add(ctx, v, v), "s");
        factor                 = 4.0f;
        ggml_backend_sched_set_tensor_backend(sched, x, tb);
        ggml_backend_sched_set_tensor_backend(sched, r, tb);
        ggml_backend_sched_set_tensor_backend(sched, v, tcpu);
        ggml_backend_sched_set_tensor_backend(sched, out, tb);
    }
    ggml_set_output(out);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    for (int i = 0; i < 2; i++) {
        if (first[i] != NULL) {
            ggml_build_forward_expand(gf, first[i]);
        }
    }
    ggml_build_forward_expand(gf, out);
    if (!ggml_backend_sched_alloc_graph(sched, gf)) {
        fprintf(stderr, "alloc_graph failed\n");
        return 2;
    }
    printf("splits %d; %s reads %s\n", ggml_backend_sched_get_n_splits(sched), out->name, out->src[0]->name);

    int bad = 0;
    for (int t = 0; t < n_tokens; t++) {
        float xs[N], got[N];
        for (int k = 0; k < N; k++) {
            xs[k] = 1.0f + (float) k + 1000.0f * (float) t;
        }
        ggml_backend_tensor_set(x, xs, 0, sizeof xs);
        if (ggml_backend_sched_graph_compute_async(sched, gf) != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "compute failed\n");
            return 2;
        }
        ggml_backend_sched_synchronize(sched);
        ggml_backend_tensor_get(out, got, 0, sizeof got);
        for (int k = 0; k < N; k++) {
            k_sum[k] += xs[k];
            float want = prealloc ? 2.0f * k_sum[k] : factor * xs[k];
            if (got[k] != want) {
                if (bad < 2) {
                    printf("token %d value %d: %g, expected %g\n", t, k, got[k], want);
                }
                bad++;
            }
        }
    }
    printf("%s: %d wrong values\n", bad ? "FAIL" : "OK", bad);
    ggml_backend_sched_free(sched);
    ggml_backend_buffer_free(kbuf);
    ggml_free(kctx);
    ggml_free(ctx);
    return 0;
}
