/* C ABI test of the backend layer of libggml-base.so.0, run against either arm (stock or
 * ours) with the stock CPU backend. Checks what it can itself (exit 1 on a failed check) and
 * prints a transcript of observable facts (names, sizes, offsets, values, statuses; never raw
 * addresses) that run.sh compares between the two arms. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-backend-impl.h" /* multi-buffer, ggml_op_alloc_size_may_expand */

#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

static struct ggml_context * meta_ctx(void) {
    struct ggml_init_params ip = { 256 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(ip);
    CHECK(ctx != NULL);
    return ctx;
}

static void fill(struct ggml_tensor * t, float scale) {
    int64_t n = ggml_nelements(t);
    float * v = malloc((size_t) n * sizeof(float));
    CHECK(v != NULL);
    for (int64_t i = 0; i < n; i++) {
        v[i] = scale * (float) ((i * 7) % 13) - 3.0f;
    }
    ggml_backend_tensor_set(t, v, 0, ggml_nbytes(t));
    free(v);
}

struct seen {
    int calls;
    int indices[64];
    double max_diff;
};

static bool compare_cb(int i, struct ggml_tensor * t1, struct ggml_tensor * t2, void * ud) {
    struct seen * s = ud;
    CHECK(s->calls < 64);
    s->indices[s->calls++] = i;
    CHECK(t1->type == GGML_TYPE_F32 && t2->type == GGML_TYPE_F32);
    int64_t n = ggml_nelements(t1);
    float * a = malloc((size_t) n * sizeof(float));
    float * b = malloc((size_t) n * sizeof(float));
    CHECK(a != NULL && b != NULL);
    ggml_backend_tensor_get(t1, a, 0, ggml_nbytes(t1));
    ggml_backend_tensor_get(t2, b, 0, ggml_nbytes(t2));
    for (int64_t k = 0; k < n; k++) {
        double d = (double) a[k] - (double) b[k];
        if (d < 0) {
            d = -d;
        }
        if (d > s->max_diff) {
            s->max_diff = d;
        }
    }
    free(a);
    free(b);
    return true;
}

static void buffers(void) {
    ggml_backend_buffer_type_t cpu = ggml_backend_cpu_buffer_type();
    printf("buft %s align %zu max %zu host %d device_null %d\n", ggml_backend_buft_name(cpu),
           ggml_backend_buft_get_alignment(cpu), ggml_backend_buft_get_max_size(cpu),
           ggml_backend_buft_is_host(cpu), ggml_backend_buft_get_device(cpu) == NULL);

    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(cpu, 1000);
    CHECK(buf != NULL);
    printf("buffer %s size %zu usage %d base_mod32 %zu multi %d\n", ggml_backend_buffer_name(buf),
           ggml_backend_buffer_get_size(buf), (int) ggml_backend_buffer_get_usage(buf),
           (size_t) ((uintptr_t) ggml_backend_buffer_get_base(buf) % 32),
           ggml_backend_buffer_is_multi_buffer(buf));
    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    ggml_backend_buffer_clear(buf, 0x11);
    printf("usage %d first_byte %d\n", (int) ggml_backend_buffer_get_usage(buf),
           ((unsigned char *) ggml_backend_buffer_get_base(buf))[999]);

    ggml_backend_buffer_t zero = ggml_backend_buft_alloc_buffer(cpu, 0);
    printf("zero size %zu base_null %d name %s\n", ggml_backend_buffer_get_size(zero),
           ggml_backend_buffer_get_base(zero) == NULL, ggml_backend_buffer_name(zero));
    ggml_backend_buffer_free(zero);

    ggml_backend_buffer_t parts[2] = { buf, ggml_backend_buft_alloc_buffer(cpu, 24) };
    ggml_backend_buffer_t multi = ggml_backend_multi_buffer_alloc_buffer(parts, 2);
    ggml_backend_buffer_set_usage(multi, GGML_BACKEND_BUFFER_USAGE_COMPUTE);
    printf("multi %d size %zu part_usage %d %d\n", ggml_backend_buffer_is_multi_buffer(multi),
           ggml_backend_buffer_get_size(multi), (int) ggml_backend_buffer_get_usage(parts[0]),
           (int) ggml_backend_buffer_get_usage(parts[1]));
    ggml_backend_buffer_free(multi);

    static _Alignas(64) unsigned char mem[256];
    ggml_backend_buffer_t mapped = ggml_backend_cpu_buffer_from_ptr(mem, sizeof(mem));
    ggml_backend_buffer_clear(mapped, 3);
    printf("mapped %s size %zu base_is_ptr %d byte %d\n", ggml_backend_buffer_name(mapped),
           ggml_backend_buffer_get_size(mapped), ggml_backend_buffer_get_base(mapped) == (void *) mem,
           mem[255]);
    ggml_backend_buffer_free(mapped);
    printf("op_may_expand mul_mat %d add %d\n", ggml_op_alloc_size_may_expand(GGML_OP_MUL_MAT),
           ggml_op_alloc_size_may_expand(GGML_OP_ADD));
}

static void tensors(void) {
    struct ggml_context * ctx = meta_ctx();
    struct ggml_tensor * t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3);
    struct ggml_tensor * u = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
    CHECK(buf != NULL);
    printf("alloc size %zu t_off %zu u_off %zu\n", ggml_backend_buffer_get_size(buf),
           (size_t) ((char *) t->data - (char *) ggml_backend_buffer_get_base(buf)),
           (size_t) ((char *) u->data - (char *) ggml_backend_buffer_get_base(buf)));
    float v[12];
    for (int i = 0; i < 12; i++) {
        v[i] = (float) i;
    }
    ggml_backend_tensor_set(t, v, 0, sizeof(v));
    float col[3] = { -1, -2, -3 };
    ggml_backend_tensor_set_2d(t, col, 8, 4, 3, 16, 4);
    ggml_backend_tensor_memset(t, 0, 0, 4);
    ggml_backend_tensor_copy(t, u);
    float w[12];
    ggml_backend_tensor_get(u, w, 0, sizeof(w));
    printf("values");
    for (int i = 0; i < 12; i++) {
        printf(" %g", (double) w[i]);
    }
    printf("\n");

    struct ggml_tensor * view = ggml_view_1d(ctx, t, 4, 16);
    enum ggml_status st = ggml_backend_view_init(view);
    float r[4];
    ggml_backend_tensor_get(view, r, 0, sizeof(r));
    printf("view status %d off %zu row1 %g %g %g %g\n", (int) st, (size_t) ((char *) view->data - (char *) t->data),
           (double) r[0], (double) r[1], (double) r[2], (double) r[3]);

    struct ggml_tensor * x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8);
    ggml_backend_buffer_t buf2 = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 64);
    st = ggml_backend_tensor_alloc(buf2, x, (char *) ggml_backend_buffer_get_base(buf2) + 32);
    printf("tensor_alloc status %d same_buffer %d\n", (int) st, x->buffer == buf2);
    ggml_backend_buffer_free(buf2);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

static void devices_and_compare(void) {
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    CHECK(dev != NULL);
    struct ggml_backend_dev_props props;
    memset(&props, 0xff, sizeof(props));
    ggml_backend_dev_get_props(dev, &props);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    printf("dev %s type %d reg %s count %zu same_dev %d host_buft_null %d proc_null %d\n",
           ggml_backend_dev_name(dev), (int) ggml_backend_dev_type(dev), ggml_backend_reg_name(reg),
           ggml_backend_reg_dev_count(reg), ggml_backend_reg_dev_get(reg, 0) == dev,
           ggml_backend_dev_host_buffer_type(dev) == NULL,
           ggml_backend_reg_get_proc_address(reg, "no_such_function") == NULL);
    printf("props name %s type %d async %d host_buffer %d from_ptr %d events %d\n", props.name, (int) props.type,
           props.caps.async, props.caps.host_buffer, props.caps.buffer_from_host_ptr, props.caps.events);

    ggml_backend_t b1 = ggml_backend_dev_init(dev, NULL);
    ggml_backend_t b2 = ggml_backend_cpu_init();
    CHECK(b1 != NULL && b2 != NULL);
    printf("backend %s align %zu max %zu guid_nonnull %d device_same %d event %d\n", ggml_backend_name(b1),
           ggml_backend_get_alignment(b1), ggml_backend_get_max_size(b1), ggml_backend_guid(b1) != NULL,
           ggml_backend_get_device(b1) == dev, ggml_backend_event_new(dev) == NULL);
    printf("null backend name %s\n", ggml_backend_name(NULL));

    struct ggml_context * ctx = meta_ctx();
    struct ggml_tensor * a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 32, 8);
    struct ggml_tensor * w = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 32, 16);
    struct ggml_tensor * m = ggml_mul_mat(ctx, w, a);             /* 16 x 8 */
    struct ggml_tensor * s = ggml_soft_max(ctx, m);
    struct ggml_tensor * tr = ggml_transpose(ctx, s);             /* view op */
    struct ggml_tensor * c = ggml_cont(ctx, tr);
    struct ggml_tensor * r = ggml_add(ctx, ggml_scale(ctx, c, 0.5f), ggml_sqr(ctx, c));
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, r);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, b1);
    CHECK(buf != NULL);
    fill(a, 0.25f);
    fill(w, 0.125f);
    printf("graph nodes %d supports %d offload %d\n", ggml_graph_n_nodes(g), ggml_backend_supports_op(b1, m),
           ggml_backend_offload_op(b1, m));

    struct seen all = { 0 };
    bool ok = ggml_backend_compare_graph_backend(b1, b2, g, compare_cb, &all, NULL, 0);
    printf("compare ok %d calls %d indices", ok, all.calls);
    for (int i = 0; i < all.calls; i++) {
        printf(" %d", all.indices[i]);
    }
    printf(" max_diff %g\n", all.max_diff);

    struct seen some = { 0 };
    const struct ggml_tensor * want[1] = { s };
    ok = ggml_backend_compare_graph_backend(b1, b2, g, compare_cb, &some, want, 1);
    printf("compare test_nodes ok %d calls %d index %d max_diff %g\n", ok, some.calls, some.indices[0], some.max_diff);

    struct ggml_backend_graph_copy copy = ggml_backend_graph_copy(b2, g);
    CHECK(copy.buffer != NULL);
    printf("copy nodes %d buffer %s\n", ggml_graph_n_nodes(copy.graph), ggml_backend_buffer_name(copy.buffer));
    ggml_backend_graph_copy_free(copy);

    /* ggml_cast makes a node that is its own src[1]: the copy must terminate, and its back
     * edge is what stock makes of it */
    struct ggml_context * ctx2 = meta_ctx();
    struct ggml_tensor * x = ggml_new_tensor_1d(ctx2, GGML_TYPE_F32, 64);
    struct ggml_tensor * xc = ggml_cast(ctx2, x, GGML_TYPE_F32);
    struct ggml_tensor * y = ggml_add(ctx2, xc, x);
    struct ggml_cgraph * g2 = ggml_new_graph(ctx2);
    ggml_build_forward_expand(g2, y);
    ggml_backend_buffer_t buf2 = ggml_backend_alloc_ctx_tensors(ctx2, b1);
    CHECK(buf2 != NULL);
    fill(x, 0.5f);
    copy = ggml_backend_graph_copy(b2, g2);
    CHECK(copy.buffer != NULL);
    struct ggml_tensor * xc2 = ggml_graph_node(copy.graph, 0);
    printf("cast copy nodes %d op %s src0_is_copy %d src1_null %d src1_self %d\n", ggml_graph_n_nodes(copy.graph),
           ggml_op_name(xc2->op), xc2->src[0] != x && xc2->src[0] != NULL, xc2->src[1] == NULL, xc2->src[1] == xc2);
    ggml_backend_graph_copy_free(copy);
    struct seen cast = { 0 };
    ok = ggml_backend_compare_graph_backend(b1, b2, g2, compare_cb, &cast, NULL, 0);
    printf("cast compare ok %d calls %d max_diff %g\n", ok, cast.calls, cast.max_diff);
    ggml_backend_buffer_free(buf2);
    ggml_free(ctx2);

    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    ggml_backend_free(b1);
    ggml_backend_free(b2);
}

int main(void) {
    buffers();
    tensors();
    devices_and_compare();
    printf("done\n");
    return 0;
}
