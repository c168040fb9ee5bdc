/* C API test of libggml-hrx.so: registry, device, buffer types, transfers through the
 * device, eager-op declaration and withdrawal, arena statistics. Exit 0 on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-hrx.h"

#include "check.h"

int main(void) {
    ggml_backend_reg_t reg = ggml_backend_hrx_reg();
    CHECK(reg != NULL);
    CHECK(strcmp(ggml_backend_reg_name(reg), "HRX") == 0);
    CHECK(ggml_backend_reg_dev_count(reg) >= 1);
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
    CHECK(strcmp(ggml_backend_dev_name(dev), "HRX0") == 0);
    CHECK(ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_GPU);

    ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
    ggml_backend_buffer_type_t host = ggml_backend_dev_host_buffer_type(dev);
    CHECK(strcmp(ggml_backend_buft_name(buft), "HRX0") == 0);
    CHECK(strcmp(ggml_backend_buft_name(host), "HRX0_HOST") == 0);
    CHECK(!ggml_backend_buft_is_host(buft));
    CHECK(ggml_backend_buft_is_host(host));
    CHECK(ggml_backend_buft_get_alignment(buft) == GGML_HRX_ALIGNMENT);
    CHECK(ggml_backend_dev_supports_buft(dev, buft));
    CHECK(ggml_backend_dev_supports_buft(dev, host));
    CHECK(ggml_backend_dev_supports_buft(dev, ggml_backend_cpu_buffer_type()));

    size_t free0, total;
    ggml_backend_dev_memory(dev, &free0, &total);
    CHECK(total > 0 && free0 <= total);

    /* a tensor in device memory: fake address inside the reserved range */
    struct ggml_init_params ip = { 16 * ggml_tensor_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1000);
    struct ggml_tensor * b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1000);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft);
    CHECK(buf != NULL);
    size_t base = 0, size = 0;
    CHECK(ggml_backend_hrx_device_address_range(0, &base, &size) == GGML_HRX_OK);
    CHECK((size_t) a->data >= base && (size_t) a->data + ggml_nbytes(a) <= base + size);
    size_t free1;
    ggml_backend_dev_memory(dev, &free1, &total);
    CHECK(free1 < free0); /* free memory tracks allocations */

    float in[1000], out[1000];
    for (int i = 0; i < 1000; i++) in[i] = (float) i * 0.5f;
    ggml_backend_tensor_set(a, in, 0, sizeof(in));
    ggml_backend_tensor_copy(a, b); /* device to device */
    memset(out, 0, sizeof(out));
    ggml_backend_tensor_get(b, out, 0, sizeof(out));
    CHECK(memcmp(in, out, sizeof(in)) == 0);
    ggml_backend_tensor_memset(b, 0, 4 * sizeof(float), 8 * sizeof(float));
    ggml_backend_tensor_get(b, out, 0, sizeof(out));
    CHECK(out[3] == 1.5f && out[4] == 0.0f && out[11] == 0.0f && out[12] == 6.0f);

    /* compute ADD on the device through a backend */
    ggml_backend_t be = ggml_backend_dev_init(dev, NULL);
    CHECK(be != NULL);
    struct ggml_init_params gp = { 64 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context * gctx = ggml_init(gp);
    struct ggml_tensor * sum = ggml_add(gctx, a, a);
    struct ggml_cgraph * g = ggml_new_graph(gctx);
    ggml_build_forward_expand(g, sum);
    ggml_backend_buffer_t gbuf = ggml_backend_alloc_ctx_tensors_from_buft(gctx, buft);
    CHECK(gbuf != NULL);
    CHECK(ggml_backend_graph_compute(be, g) == GGML_STATUS_SUCCESS);
    ggml_backend_tensor_get(sum, out, 0, sizeof(out));
    CHECK(out[10] == 10.0f && out[999] == 999.0f);

    /* withdrawing ADD makes the same node unclaimed and the compute fail by name */
    CHECK(ggml_backend_hrx_eager_ops_contains(GGML_OP_ADD));
    CHECK(ggml_backend_dev_supports_op(dev, sum));
    CHECK(ggml_backend_hrx_eager_ops_remove(GGML_OP_ADD) == GGML_HRX_OK);
    CHECK(!ggml_backend_hrx_eager_ops_contains(GGML_OP_ADD));
    CHECK(!ggml_backend_dev_supports_op(dev, sum));
    CHECK(ggml_backend_graph_compute(be, g) == GGML_STATUS_FAILED);
    CHECK(ggml_backend_hrx_eager_ops_apply("+ADD,-FILL") == GGML_HRX_OK);
    CHECK(ggml_backend_dev_supports_op(dev, sum));
    CHECK(!ggml_backend_hrx_eager_ops_contains(GGML_OP_FILL));
    CHECK(ggml_backend_hrx_eager_ops_apply("+NOT_AN_OP") == GGML_HRX_ERR_PARSE);
    CHECK(ggml_backend_hrx_eager_ops_add(GGML_OP_FILL) == GGML_HRX_OK);
    CHECK(ggml_backend_hrx_eager_ops_add(GGML_OP_NONE) == GGML_HRX_ERR_INVALID_OP);
    CHECK(ggml_backend_hrx_eager_ops_add(GGML_OP_COUNT) == GGML_HRX_ERR_INVALID_OP);
    CHECK(ggml_backend_hrx_eager_ops_apply(NULL) == GGML_HRX_ERR_NULL_ARGUMENT);

    struct ggml_hrx_arena_stats st;
    CHECK(ggml_backend_hrx_arena_stats_get(0, &st) == GGML_HRX_OK);
    CHECK(st.limit_bytes > 0 && st.resident_bytes == 0);
    CHECK(ggml_backend_hrx_arena_stats_get(99, &st) == GGML_HRX_ERR_INVALID_DEVICE);
    CHECK(ggml_backend_hrx_arena_stats_get(0, NULL) == GGML_HRX_ERR_NULL_ARGUMENT);

    ggml_backend_buffer_free(gbuf);
    ggml_backend_buffer_free(buf);
    ggml_backend_free(be);
    ggml_free(gctx);
    ggml_free(ctx);
    ggml_backend_dev_memory(dev, &free1, &total);
    CHECK(free1 == free0);
    printf("hrx api: ok\n");
    return 0;
}
