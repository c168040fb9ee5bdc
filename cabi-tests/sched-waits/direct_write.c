// direct_write.c: does the scheduler order a split after another backend's queued split that
// writes storage the first reads without a copy? (src/sched/direct/; docs/sched.md,
// "Writes another backend reads without a copy"; tests/sched_direct_writes.rs is the same
// check of the cache, reuse and copy graphs inside the Rust test suite; this program runs
// against any libggml-base: run.sh.)
//
// The devices are queue_device.h's, with TA accepting the CPU buffer type too (as HRX accepts
// host buffer types): TA computes into host memory directly and writes when its queue runs.
//
// Graph, as llama.cpp's with its KV cache in host memory (-nkvo) on such a device: `cache` is
// a pre-allocated tensor in a CPU buffer, x a user input on TA, w = cache += x (in place) on
// TA, then r = cache + x on TCPU, which reads `cache` directly and x through a copy (a user
// input, whose copy waits for TCPU only). Written first, r = 2x; read first, r = x.
//
// With argument "reuse" (a review's case): TA writes in place into a tensor the CPU computed,
// in the CPU's compute buffer, and the allocator gives those bytes to a later CPU node, which
// the CPU writes before TA's queue runs: x, z user inputs (x on TCPU, z on TA), c = x + x on
// TCPU, w = c += x (in place) and v = w + w on TA (v = 6x), then NY nodes y = z + z on TCPU
// (y = 2z; z is copied in as a user input, so nothing waits for TA), one of them at c's bytes.
//
// With argument "adamw" (a second review's case): TA runs OPT_STEP_ADAMW on a parameter whose
// moments m, v lie in a CPU buffer; the op's result is a view of the parameter, but it writes
// m too (TA models that write as m = grad). Then r = m + x on TCPU (x a user input on TA,
// copied in): r = grad + x once the write has landed.
//
// With argument "copy" (a third review's case): a queued input copy in memory another backend
// writes. Both backends compute in the CPU buffer type (the scheduler's bufts), so the
// allocator gives them one compute buffer. TA computes a = u + u from u, a weight in a mapped
// host buffer ("CPU_Mapped") that TA does not accept: its split copies u into the shared
// buffer with cpy_tensor_async, queued (a weight's copy may run late). The allocator then gives
// the copy's bytes to one of six TCPU nodes y = z + z (z a user input in TA's memory, copied
// in), which TCPU writes at once: TA's copy must not land on it afterwards (a = 2u, y = 2z).
//
// Per token: set the inputs (and cache or m to 0), graph_compute_async, synchronize (as llama.cpp
// does before it reads logits), read the outputs. PIPELINE=1: a scheduler with pipeline
// copies, TA with events (not for the copy graph: every input copy is then a leaf of the whole
// graph, no node gets its bytes, and the program says so and exits 2).
//
// Usage: direct_write [TOKENS [cache|reuse|adamw|copy]] (cache by default); prints the TA
// synchronize calls of each token's compute and "OK: 0 wrong values" or "FAIL: N wrong values"
// (exit 0 or 1).

#include "queue_device.h"

#define N 8
#define NY 12

static bool a_supports_host(ggml_backend_dev_t d, ggml_backend_buffer_type_t b) {
    return b == dev_buft(d) || b == ggml_backend_cpu_buffer_type();
}

// Places x and the writer on TA and the reader on TCPU, then allocates the graph; `what`
// names the writer in the line printed.
static void place_and_alloc(ggml_backend_t * backends, ggml_backend_sched_t sched, struct ggml_cgraph * gf,
                            struct ggml_tensor * x, struct ggml_tensor * writer, struct ggml_tensor * reader,
                            const char * what) {
    ggml_backend_sched_reset(sched);
    ggml_backend_sched_set_tensor_backend(sched, x, backends[0]);
    ggml_backend_sched_set_tensor_backend(sched, writer, backends[0]);
    ggml_backend_sched_set_tensor_backend(sched, reader, backends[1]);
    if (!ggml_backend_sched_alloc_graph(sched, gf)) { fprintf(stderr, "alloc failed\n"); exit(2); }
    printf("splits %d, %s on %s\n", ggml_backend_sched_get_n_splits(sched), what,
           ggml_backend_name(ggml_backend_sched_get_tensor_backend(sched, writer)));
}

// One token: compute, print TA's synchronize calls inside the compute, synchronize.
static void compute_token(ggml_backend_sched_t sched, struct ggml_cgraph * gf, int t) {
    int s0 = n_sync_a;
    if (ggml_backend_sched_graph_compute_async(sched, gf) != GGML_STATUS_SUCCESS) { fprintf(stderr, "compute failed\n"); exit(2); }
    printf("token %d: TA synchronize calls in compute %d\n", t, n_sync_a - s0);
    ggml_backend_sched_synchronize(sched);
}

// The graph of the file's header: TA writes the pre-allocated cache, the CPU reads it.
static int run_cache(ggml_backend_t * backends, ggml_backend_sched_t sched, int n_tokens) {
    struct ggml_init_params cp = { ggml_tensor_overhead(), NULL, true };
    struct ggml_context * cache_ctx = ggml_init(cp);
    struct ggml_tensor * cache = ggml_new_tensor_1d(cache_ctx, GGML_TYPE_F32, N);
    ggml_backend_buffer_t cache_buf = ggml_backend_alloc_ctx_tensors_from_buft(cache_ctx, ggml_backend_cpu_buffer_type());
    if (!cache_buf) { fprintf(stderr, "cache allocation failed\n"); exit(2); }

    struct ggml_init_params ip = { 16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N); ggml_set_input(x);
    struct ggml_tensor * w = ggml_add_inplace(ctx, cache, x);
    struct ggml_tensor * r = ggml_add(ctx, cache, x);
    ggml_set_output(r);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, w);
    ggml_build_forward_expand(gf, r);

    place_and_alloc(backends, sched, gf, x, w, r, "the in-place write");

    int bad = 0;
    for (int t = 0; t < n_tokens; t++) {
        float xs[N], zeros[N] = { 0 }, rs[N];
        for (int k = 0; k < N; k++) xs[k] = 1.0f + k + 1000.0f * t;
        ggml_backend_tensor_set(cache, zeros, 0, sizeof zeros);
        ggml_backend_tensor_set(x, xs, 0, sizeof xs);
        compute_token(sched, gf, t);
        ggml_backend_tensor_get(r, rs, 0, sizeof rs);
        for (int k = 0; k < N; k++) {
            if (rs[k] != 2.0f * xs[k]) {
                if (bad < 2) printf("token %d element %d: got %g want %g\n", t, k, rs[k], 2.0f * xs[k]);
                bad++;
            }
        }
    }
    ggml_free(ctx);
    ggml_backend_buffer_free(cache_buf);
    ggml_free(cache_ctx);
    return bad;
}

// The "reuse" graph of the file's header: TA writes in place into bytes the CPU reuses.
static int run_reuse(ggml_backend_t * backends, ggml_backend_sched_t sched, int n_tokens) {
    struct ggml_init_params ip = { 64 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N); ggml_set_input(x);
    struct ggml_tensor * z = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N); ggml_set_input(z);
    struct ggml_tensor * c = ggml_add(ctx, x, x);
    struct ggml_tensor * w = ggml_add_inplace(ctx, c, x);
    struct ggml_tensor * v = ggml_add(ctx, w, w);
    ggml_set_output(v);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, v);
    struct ggml_tensor * y[NY];
    for (int i = 0; i < NY; i++) {
        y[i] = ggml_add(ctx, z, z);
        ggml_set_output(y[i]);
        ggml_build_forward_expand(gf, y[i]);
    }
    ggml_backend_sched_reset(sched);
    ggml_backend_sched_set_tensor_backend(sched, x, backends[1]);
    ggml_backend_sched_set_tensor_backend(sched, c, backends[1]);
    ggml_backend_sched_set_tensor_backend(sched, z, backends[0]);
    ggml_backend_sched_set_tensor_backend(sched, w, backends[0]);
    ggml_backend_sched_set_tensor_backend(sched, v, backends[0]);
    for (int i = 0; i < NY; i++) ggml_backend_sched_set_tensor_backend(sched, y[i], backends[1]);
    if (!ggml_backend_sched_alloc_graph(sched, gf)) { fprintf(stderr, "alloc failed\n"); exit(2); }
    int at_c = 0;
    for (int i = 0; i < NY; i++) at_c += y[i]->data == c->data;
    printf("splits %d, y nodes at c's bytes: %d\n", ggml_backend_sched_get_n_splits(sched), at_c);
    if (at_c == 0) { fprintf(stderr, "no y node at c's bytes: the case does not arise\n"); exit(2); }

    int bad = 0;
    for (int t = 0; t < n_tokens; t++) {
        float xs[N], zs[N], out[N];
        for (int k = 0; k < N; k++) { xs[k] = 1.0f + k + 1000.0f * t; zs[k] = 100.0f + k + 1000.0f * t; }
        ggml_backend_tensor_set(x, xs, 0, sizeof xs);
        ggml_backend_tensor_set(z, zs, 0, sizeof zs);
        compute_token(sched, gf, t);
        for (int i = 0; i < NY; i++) {
            ggml_backend_tensor_get(y[i], out, 0, sizeof out);
            for (int k = 0; k < N; k++) bad += out[k] != 2.0f * zs[k];
        }
        ggml_backend_tensor_get(v, out, 0, sizeof out);
        for (int k = 0; k < N; k++) bad += out[k] != 6.0f * xs[k];
    }
    ggml_free(ctx);
    return bad;
}

// The "adamw" graph of the file's header: TA's optimizer step writes a moment the CPU reads.
static int run_adamw(ggml_backend_t * backends, ggml_backend_sched_t sched, int n_tokens) {
    struct ggml_init_params sp = { 8 * ggml_tensor_overhead(), NULL, true };
    struct ggml_context * sctx = ggml_init(sp);
    struct ggml_tensor * a = ggml_new_tensor_1d(sctx, GGML_TYPE_F32, N); ggml_set_param(a);
    struct ggml_tensor * grad = ggml_new_tensor_1d(sctx, GGML_TYPE_F32, N);
    struct ggml_tensor * m = ggml_new_tensor_1d(sctx, GGML_TYPE_F32, N);
    struct ggml_tensor * v = ggml_new_tensor_1d(sctx, GGML_TYPE_F32, N);
    struct ggml_tensor * hp = ggml_new_tensor_1d(sctx, GGML_TYPE_F32, 7);
    ggml_backend_buffer_t sbuf = ggml_backend_alloc_ctx_tensors_from_buft(sctx, ggml_backend_cpu_buffer_type());
    if (!sbuf) { fprintf(stderr, "state allocation failed\n"); exit(2); }

    struct ggml_init_params ip = { 32 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N); ggml_set_input(x);
    struct ggml_tensor * step = ggml_opt_step_adamw(ctx, a, grad, m, v, hp);
    struct ggml_tensor * r = ggml_add(ctx, m, x);
    ggml_set_output(r);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, step);
    ggml_build_forward_expand(gf, r);
    place_and_alloc(backends, sched, gf, x, step, r, "the step");

    int bad = 0;
    for (int t = 0; t < n_tokens; t++) {
        float xs[N], gs[N], zeros[N] = { 0 }, hps[7] = { 0 }, out[N];
        for (int k = 0; k < N; k++) { xs[k] = 1.0f + k + 1000.0f * t; gs[k] = 100.0f + k; }
        ggml_backend_tensor_set(m, zeros, 0, sizeof zeros);
        ggml_backend_tensor_set(grad, gs, 0, sizeof gs);
        ggml_backend_tensor_set(hp, hps, 0, sizeof hps);
        ggml_backend_tensor_set(x, xs, 0, sizeof xs);
        compute_token(sched, gf, t);
        ggml_backend_tensor_get(r, out, 0, sizeof out);
        for (int k = 0; k < N; k++) bad += out[k] != gs[k] + xs[k];
    }
    ggml_free(ctx);
    ggml_backend_buffer_free(sbuf);
    ggml_free(sctx);
    return bad;
}

// TCPU accepts every buffer type but TA's own (the CPU's and a mapped model file's).
static bool cpu_supports_all_but_a(ggml_backend_dev_t d, ggml_backend_buffer_type_t b) {
    (void) d;
    return b != &buft_a;
}

// TA does not compute the nodes named "y", as a device lacks an op: they stay on TCPU (with one
// buffer type for both, the scheduler would move them to TA).
static bool a_refuses_y(ggml_backend_dev_t d, const struct ggml_tensor * t) {
    return d != &dev_a || t->name[0] != 'y';
}

// The "copy" graph of the file's header: TA's queued copy of a weight into the shared compute
// buffer, at bytes a later TCPU node gets. The devices' interfaces and the scheduler's bufts
// are main's (cpu_supports_all_but_a, a_refuses_y).
static int run_copy(ggml_backend_t * backends, ggml_backend_sched_t sched, int n_tokens) {
    enum { NU = 16, NZ = 4 };
    // the mapped file's memory: ggml_backend_cpu_buffer_from_ptr wants it 32-byte aligned
    static _Alignas(32) float mapped[NU];
    struct ggml_init_params lp = { 2 * ggml_tensor_overhead(), NULL, true };
    struct ggml_context * leaves = ggml_init(lp);
    struct ggml_tensor * u = ggml_new_tensor_1d(leaves, GGML_TYPE_F32, NU);
    struct ggml_tensor * z = ggml_new_tensor_1d(leaves, GGML_TYPE_F32, NZ); ggml_set_input(z);
    ggml_backend_buffer_t u_buf = ggml_backend_cpu_buffer_from_ptr(mapped, sizeof mapped);
    ggml_backend_buffer_set_usage(u_buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    if (ggml_backend_tensor_alloc(u_buf, u, mapped) != GGML_STATUS_SUCCESS) { fprintf(stderr, "u allocation failed\n"); exit(2); }
    // the leaf not allocated yet, z, in TA's memory
    ggml_backend_buffer_t z_buf = ggml_backend_alloc_ctx_tensors_from_buft(leaves, &buft_a);
    if (!z_buf) { fprintf(stderr, "z allocation failed\n"); exit(2); }

    struct ggml_init_params ip = { 16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * a = ggml_add(ctx, u, u);
    ggml_set_output(a);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, a);
    struct ggml_tensor * y[6];
    for (int i = 0; i < 6; i++) {
        y[i] = ggml_add(ctx, z, z);
        ggml_set_name(y[i], "y");
        ggml_set_output(y[i]);
        ggml_build_forward_expand(gf, y[i]);
    }
    ggml_backend_sched_reset(sched);
    ggml_backend_sched_set_tensor_backend(sched, a, backends[0]);
    for (int i = 0; i < 6; i++) ggml_backend_sched_set_tensor_backend(sched, y[i], backends[1]);
    if (!ggml_backend_sched_alloc_graph(sched, gf)) { fprintf(stderr, "alloc failed\n"); exit(2); }
    // the split pass gave a TA's copy of u as its sources
    const struct ggml_tensor * copy = a->src[0];
    if (copy == u) { fprintf(stderr, "TA reads u without a copy: the case does not arise\n"); exit(2); }
    const char * lo = copy->data, * hi = lo + ggml_nbytes(copy);
    int at_copy = 0;
    for (int i = 0; i < 6; i++) at_copy += (const char *) y[i]->data >= lo && (const char *) y[i]->data < hi;
    printf("splits %d, y nodes at the bytes of TA's copy of u: %d\n", ggml_backend_sched_get_n_splits(sched), at_copy);
    if (at_copy == 0) { fprintf(stderr, "no y node at the copy's bytes: the case does not arise\n"); exit(2); }

    int bad = 0, copies0 = n_cpy_async;
    for (int t = 0; t < n_tokens; t++) {
        float us[NU], zs[NZ], out[NU];
        for (int k = 0; k < NU; k++) us[k] = 1.0f + k + 1000.0f * t;
        for (int k = 0; k < NZ; k++) zs[k] = 500.0f + k + 1000.0f * t;
        ggml_backend_tensor_set(u, us, 0, sizeof us);
        ggml_backend_tensor_set(z, zs, 0, sizeof zs);
        compute_token(sched, gf, t);
        ggml_backend_tensor_get(a, out, 0, sizeof us);
        for (int k = 0; k < NU; k++) bad += out[k] != 2.0f * us[k];
        for (int i = 0; i < 6; i++) {
            ggml_backend_tensor_get(y[i], out, 0, sizeof zs);
            for (int k = 0; k < NZ; k++) bad += out[k] != 2.0f * zs[k];
        }
    }
    // the race needs TA to have queued its copy of u (not copied it synchronously) every token
    if (n_cpy_async - copies0 != n_tokens) { fprintf(stderr, "TA queued %d copies of u in %d tokens\n", n_cpy_async - copies0, n_tokens); exit(2); }
    ggml_free(ctx);
    ggml_backend_buffer_free(z_buf);
    ggml_backend_buffer_free(u_buf);
    ggml_free(leaves);
    return bad;
}

int main(int argc, char ** argv) {
    int n_tokens = argc > 1 ? atoi(argv[1]) : 3;
    const char * graph = argc > 2 ? argv[2] : "cache";
    int parallel = init_devices();
    dev_a.iface.supports_buft = a_supports_host;
    // the copy graph: both backends compute in the CPU buffer type, one buffer between them
    bool copy = strcmp(graph, "copy") == 0;
    ggml_backend_buffer_type_t cpu_bufts[2] = { ggml_backend_cpu_buffer_type(), ggml_backend_cpu_buffer_type() };
    if (copy) {
        dev_cpu.iface.supports_buft = cpu_supports_all_but_a;
        dev_a.iface.supports_op = a_refuses_y;
    }
    ggml_backend_t backends[2] = { new_backend(&dev_a), new_backend(&dev_cpu) };
    ggml_backend_sched_t sched = ggml_backend_sched_new(backends, copy ? cpu_bufts : NULL, 2, 256, parallel, false);
    int bad = strcmp(graph, "reuse") == 0   ? run_reuse(backends, sched, n_tokens)
            : strcmp(graph, "adamw") == 0 ? run_adamw(backends, sched, n_tokens)
            : copy                        ? run_copy(backends, sched, n_tokens)
                                          : run_cache(backends, sched, n_tokens);
    printf("%s: %d wrong values\n", bad ? "FAIL" : "OK", bad);
    ggml_backend_sched_free(sched);
    return bad ? 1 : 0;
}
