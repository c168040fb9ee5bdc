/* Differential edge cases of the backend layer (buffers, buffer types, multi-buffers, tensor
 * access with views and strides, blocking and queued copies, ctx allocation over a small max
 * size, graph copy and compare, events) over a logging C test device, run in both arms by
 * run.sh: every callback the layer makes is printed with its arguments (offsets relative to
 * the buffer, never addresses), so the two transcripts must be identical. Seeded random cases
 * (alloc, access, graph) extend the fixed ones. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-backend-impl.h"

#define P(...) do { printf(__VA_ARGS__); fflush(stdout); } while (0)

/* ---------- logging fake device ---------- */
struct lbuft_ctx { const char * name; size_t align, max, pad; bool host, has2d, hascpy, hasmemset, hasinit; int nalloc; };
struct lbuf_ctx { int id; void * mem; size_t size; struct lbuft_ctx * bt; };
static bool same_layout(const struct ggml_tensor * a, const struct ggml_tensor * b) {
    if (a->type != b->type) return false;
    for (int i = 0; i < GGML_MAX_DIMS; i++) if (a->ne[i] != b->ne[i] || a->nb[i] != b->nb[i]) return false;
    return true;
}
static const char * tn(const struct ggml_tensor * t) { return t->name[0] ? t->name : "?"; }
static size_t toff(ggml_backend_buffer_t b, const struct ggml_tensor * t) {
    struct lbuf_ctx * c = b->context; return (size_t)((char *)t->data - (char *)c->mem);
}
static void lb_free(ggml_backend_buffer_t b) { struct lbuf_ctx * c = b->context; P("  FREE %s#%d\n", c->bt->name, c->id); free(c->mem); free(c); }
static void * lb_base(ggml_backend_buffer_t b) { struct lbuf_ctx * c = b->context; return c->mem; }
static enum ggml_status lb_init(ggml_backend_buffer_t b, struct ggml_tensor * t) {
    struct lbuf_ctx * c = b->context; P("  INIT %s#%d %s off %zu view %d\n", c->bt->name, c->id, tn(t), toff(b, t), t->view_src != NULL); return GGML_STATUS_SUCCESS; }
static void lb_memset(ggml_backend_buffer_t b, struct ggml_tensor * t, uint8_t v, size_t o, size_t s) {
    struct lbuf_ctx * c = b->context; P("  MEMSET %s#%d %s %zu %zu\n", c->bt->name, c->id, tn(t), o, s); memset((char *)t->data + o, v, s); }
static void lb_set(ggml_backend_buffer_t b, struct ggml_tensor * t, const void * d, size_t o, size_t s) {
    struct lbuf_ctx * c = b->context; P("  SET %s#%d %s %zu %zu\n", c->bt->name, c->id, tn(t), o, s); memcpy((char *)t->data + o, d, s); }
static void lb_get(ggml_backend_buffer_t b, const struct ggml_tensor * t, void * d, size_t o, size_t s) {
    struct lbuf_ctx * c = b->context; P("  GET %s#%d %s %zu %zu\n", c->bt->name, c->id, tn(t), o, s); memcpy(d, (char *)t->data + o, s); }
static void lb_set2d(ggml_backend_buffer_t b, struct ggml_tensor * t, const void * d, size_t o, size_t s, size_t n, size_t st, size_t sd) {
    struct lbuf_ctx * c = b->context; P("  SET2D %s#%d %s %zu %zu n%zu %zu %zu\n", c->bt->name, c->id, tn(t), o, s, n, st, sd);
    for (size_t i = 0; i < n; i++) memcpy((char *)t->data + o + i*st, (const char *)d + i*sd, s); }
static void lb_get2d(ggml_backend_buffer_t b, const struct ggml_tensor * t, void * d, size_t o, size_t s, size_t n, size_t st, size_t sd) {
    struct lbuf_ctx * c = b->context; P("  GET2D %s#%d %s %zu %zu n%zu %zu %zu\n", c->bt->name, c->id, tn(t), o, s, n, st, sd);
    for (size_t i = 0; i < n; i++) memcpy((char *)d + i*sd, (const char *)t->data + o + i*st, s); }
static bool lb_cpy(ggml_backend_buffer_t b, const struct ggml_tensor * src, struct ggml_tensor * dst) {
    struct lbuf_ctx * c = b->context; P("  CPY %s#%d %s <- %s\n", c->bt->name, c->id, tn(dst), tn(src));
    if (src->buffer && src->buffer->buft->iface.get_name == b->buft->iface.get_name) { memcpy(dst->data, src->data, ggml_nbytes(src)); return true; }
    return false; }
static void lb_clear(ggml_backend_buffer_t b, uint8_t v) { struct lbuf_ctx * c = b->context; P("  CLEAR %s#%d %d size %zu\n", c->bt->name, c->id, v, b->size); memset(c->mem, v, c->size); }
static void lb_reset(ggml_backend_buffer_t b) { struct lbuf_ctx * c = b->context; P("  RESET %s#%d\n", c->bt->name, c->id); }

static const char * lbt_name(ggml_backend_buffer_type_t bt) { return ((struct lbuft_ctx *)bt->context)->name; }
static ggml_backend_buffer_t lbt_alloc(ggml_backend_buffer_type_t bt, size_t size) {
    struct lbuft_ctx * btc = bt->context;
    struct lbuf_ctx * c = calloc(1, sizeof *c);
    c->id = btc->nalloc++; c->bt = btc; c->size = size; c->mem = aligned_alloc(256, (size + 255) / 256 * 256); memset(c->mem, 0xAB, size);
    P("  ALLOC %s#%d %zu\n", btc->name, c->id, size);
    struct ggml_backend_buffer_i i = { lb_free, lb_base, btc->hasinit ? lb_init : NULL, btc->hasmemset ? lb_memset : NULL, lb_set, lb_get,
        btc->has2d ? lb_set2d : NULL, btc->has2d ? lb_get2d : NULL, btc->hascpy ? lb_cpy : NULL, lb_clear, lb_reset };
    return ggml_backend_buffer_init(bt, i, c, size);
}
static size_t lbt_align(ggml_backend_buffer_type_t bt) { return ((struct lbuft_ctx *)bt->context)->align; }
static size_t lbt_max(ggml_backend_buffer_type_t bt) { return ((struct lbuft_ctx *)bt->context)->max; }
static size_t lbt_asize(ggml_backend_buffer_type_t bt, const struct ggml_tensor * t) { return ggml_nbytes(t) + (ggml_is_quantized(t->type) ? ((struct lbuft_ctx *)bt->context)->pad : 0); }
static bool lbt_host(ggml_backend_buffer_type_t bt) { return ((struct lbuft_ctx *)bt->context)->host; }

static struct lbuft_ctx LBT_C = { "L", 64, 1000, 32, false, true, true, true, true, 0 };
static struct ggml_backend_buffer_type LBT = { { lbt_name, lbt_alloc, lbt_align, lbt_max, lbt_asize, lbt_host }, NULL, &LBT_C };
static struct lbuft_ctx LBT2_C = { "M", 32, SIZE_MAX, 0, false, false, false, true, false, 0 };
static struct ggml_backend_buffer_type LBT2 = { { lbt_name, lbt_alloc, lbt_align, NULL, NULL, NULL }, NULL, &LBT2_C };
static struct lbuft_ctx LBTH_C = { "H", 32, SIZE_MAX, 0, true, false, false, true, false, 0 };
static struct ggml_backend_buffer_type LBTH = { { lbt_name, lbt_alloc, lbt_align, NULL, NULL, lbt_host }, NULL, &LBTH_C };

/* backend with async ops */
static int be_async = 1;
static const char * be_name(ggml_backend_t b) { (void)b; return "LB"; }
static void be_free(ggml_backend_t b) { (void)b; P("  BE_FREE\n"); }
static void be_set_async(ggml_backend_t b, struct ggml_tensor * t, const void * d, size_t o, size_t s) { (void)b; P("  ASET %s %zu %zu\n", tn(t), o, s); memcpy((char *)t->data + o, d, s); }
static void be_get_async(ggml_backend_t b, const struct ggml_tensor * t, void * d, size_t o, size_t s) { (void)b; P("  AGET %s %zu %zu\n", tn(t), o, s); memcpy(d, (char *)t->data + o, s); }
static void be_set2d_async(ggml_backend_t b, struct ggml_tensor * t, const void * d, size_t o, size_t s, size_t n, size_t st, size_t sd) { (void)b; P("  ASET2D %s %zu %zu n%zu %zu %zu\n", tn(t), o, s, n, st, sd);
    for (size_t i = 0; i < n; i++) memcpy((char *)t->data + o + i*st, (const char *)d + i*sd, s); }
static void be_get2d_async(ggml_backend_t b, const struct ggml_tensor * t, void * d, size_t o, size_t s, size_t n, size_t st, size_t sd) { (void)b; P("  AGET2D %s %zu %zu n%zu %zu %zu\n", tn(t), o, s, n, st, sd);
    for (size_t i = 0; i < n; i++) memcpy((char *)d + i*sd, (const char *)t->data + o + i*st, s); }
static bool be_cpy_async(ggml_backend_t bs, ggml_backend_t bd, const struct ggml_tensor * s, struct ggml_tensor * d) { P("  ACPY %s <- %s src_be %s accept %d\n", tn(d), tn(s), bs ? ggml_backend_name(bs) : "NULL", be_async); (void)bd;
    if (be_async) { memcpy(d->data, s->data, ggml_nbytes(s)); return true; } return false; }
static void be_sync(ggml_backend_t b) { (void)b; P("  SYNC\n"); }
static enum ggml_status be_compute(ggml_backend_t b, struct ggml_cgraph * g) { (void)b; P("  COMPUTE %d nodes\n", ggml_graph_n_nodes(g)); return GGML_STATUS_SUCCESS; }
static void be_ev_record(ggml_backend_t b, ggml_backend_event_t e) { (void)b; P("  EV_RECORD %p\n", e->context); }
static void be_ev_wait(ggml_backend_t b, ggml_backend_event_t e) { (void)b; P("  EV_WAIT %p\n", e->context); }

static const char * dv_name(ggml_backend_dev_t d) { (void)d; return "LDEV"; }
static void dv_mem(ggml_backend_dev_t d, size_t * f, size_t * t) { (void)d; *f = 1; *t = 2; }
static enum ggml_backend_dev_type dv_type(ggml_backend_dev_t d) { (void)d; return GGML_BACKEND_DEVICE_TYPE_GPU; }
static void dv_props(ggml_backend_dev_t d, struct ggml_backend_dev_props * p) { (void)d; p->name = "LDEV"; }
static ggml_backend_buffer_type_t dv_buft(ggml_backend_dev_t d) { (void)d; return &LBT; }
static bool dv_sop(ggml_backend_dev_t d, const struct ggml_tensor * t) { (void)d; (void)t; return true; }
static bool dv_sbuft(ggml_backend_dev_t d, ggml_backend_buffer_type_t b) { (void)d; return b == &LBT; }
static ggml_backend_event_t dv_ev_new(ggml_backend_dev_t d) { static int k; struct ggml_backend_event * e = calloc(1, sizeof *e); e->device = d; e->context = (void *)(intptr_t)(++k); P("  EV_NEW\n"); return e; }
static void dv_ev_free(ggml_backend_dev_t d, ggml_backend_event_t e) { (void)d; P("  EV_FREE %p\n", e->context); free(e); }
static void dv_ev_sync(ggml_backend_dev_t d, ggml_backend_event_t e) { (void)d; P("  EV_SYNC %p\n", e->context); }
static struct ggml_backend_device LDEV = { { dv_name, dv_name, dv_mem, dv_type, dv_props, NULL, dv_buft, NULL, NULL, dv_sop, dv_sbuft, NULL, dv_ev_new, dv_ev_free, dv_ev_sync }, NULL, NULL };
static ggml_guid LGUID = {1,2,3};
static struct ggml_backend LBE = { &LGUID, { be_name, be_free, be_set_async, be_get_async, be_set2d_async, be_get2d_async, be_cpy_async, be_sync, NULL, NULL, NULL, NULL, be_compute, be_ev_record, be_ev_wait, NULL }, &LDEV, NULL };
/* a backend without async */
static struct ggml_backend LBE0 = { &LGUID, { be_name, be_free, NULL, NULL, NULL, NULL, NULL, be_sync, NULL, NULL, NULL, NULL, be_compute, NULL, NULL, NULL }, &LDEV, NULL };

static struct ggml_context * mctx(void) {
    struct ggml_init_params ip = { 512 * ggml_tensor_overhead() + 4 * ggml_graph_overhead(), NULL, true };
    return ggml_init(ip);
}
static void dumpf(const char * what, const float * v, int n) { P("%s", what); for (int i = 0; i < n; i++) P(" %g", (double)v[i]); P("\n"); }
static void dumpt(const char * what, struct ggml_tensor * t) {
    size_t n = ggml_nbytes(t); unsigned char * b = malloc(n + 1); ggml_backend_tensor_get(t, b, 0, n);
    P("%s [%zu]", what, n); for (size_t i = 0; i < n; i++) P(" %02x", b[i]); P("\n"); free(b);
}


static void t_buffers(void) {
    P("== buffers\n");
    ggml_backend_buffer_t z = ggml_backend_buft_alloc_buffer(&LBT, 0);
    P("zero: size %zu base %d host %d align %zu max %zu name %s multi %d usage %d\n", ggml_backend_buffer_get_size(z), ggml_backend_buffer_get_base(z) == NULL,
      ggml_backend_buffer_is_host(z), ggml_backend_buffer_get_alignment(z), ggml_backend_buffer_get_max_size(z), ggml_backend_buffer_name(z), ggml_backend_buffer_is_multi_buffer(z), ggml_backend_buffer_get_usage(z));
    ggml_backend_buffer_clear(z, 1);
    ggml_backend_buffer_reset(z);
    ggml_backend_buffer_set_usage(z, GGML_BACKEND_BUFFER_USAGE_COMPUTE);
    P("zero usage %d\n", ggml_backend_buffer_get_usage(z));
    ggml_backend_buffer_free(z);
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(&LBT, 100);
    ggml_backend_buffer_clear(b, 7);
    ggml_backend_buffer_reset(b);
    struct ggml_context * ctx = mctx();
    struct ggml_tensor * q = ggml_new_tensor_1d(ctx, GGML_TYPE_Q4_0, 64);
    struct ggml_tensor * f = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5);
    P("alloc_size q %zu f %zu; buft M q %zu; cpu q %zu\n", ggml_backend_buffer_get_alloc_size(b, q), ggml_backend_buffer_get_alloc_size(b, f), ggml_backend_buft_get_alloc_size(&LBT2, q), ggml_backend_buft_get_alloc_size(ggml_backend_cpu_buffer_type(), q));
    P("M: max %zu host %d dev_null %d\n", ggml_backend_buft_get_max_size(&LBT2), ggml_backend_buft_is_host(&LBT2), ggml_backend_buft_get_device(&LBT2) == NULL);
    ggml_backend_buffer_free(b);
    /* cpu from_ptr zero and cpu alloc 1 */
    static _Alignas(64) unsigned char mem[64];
    ggml_backend_buffer_t m0 = ggml_backend_cpu_buffer_from_ptr(mem, 0);
    P("from_ptr 0: base_null %d size %zu name %s host %d\n", ggml_backend_buffer_get_base(m0) == NULL, ggml_backend_buffer_get_size(m0), ggml_backend_buffer_name(m0), ggml_backend_buffer_is_host(m0));
    ggml_backend_buffer_clear(m0, 9);
    ggml_backend_buffer_free(m0);
    ggml_backend_buffer_t m1 = ggml_backend_cpu_buffer_from_ptr(mem + 32, 32);
    ggml_backend_buffer_clear(m1, 9);
    P("from_ptr+32: base_ok %d mem31 %d mem32 %d mem63 %d type_same_as_cpu %d\n", ggml_backend_buffer_get_base(m1) == mem + 32, mem[31], mem[32], mem[63], ggml_backend_buffer_get_type(m1) == ggml_backend_cpu_buffer_type());
    ggml_backend_buffer_free(m1);
    ggml_backend_buffer_t c1 = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 1);
    P("cpu 1: size %zu base_mod64 %zu usage %d\n", ggml_backend_buffer_get_size(c1), (size_t)((uintptr_t)ggml_backend_buffer_get_base(c1) % 64), ggml_backend_buffer_get_usage(c1));
    ggml_backend_buffer_free(c1);
    ggml_free(ctx);
}

static void t_set_get(void) {
    P("== set/get on L (non-host, 2d, memset)\n");
    struct ggml_context * ctx = mctx();
    struct ggml_tensor * a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 4, 3); ggml_set_name(a, "a");
    struct ggml_tensor * v = ggml_view_2d(ctx, a, 2, 3, a->nb[1], 4); ggml_set_name(v, "v");  /* non-contiguous */
    struct ggml_tensor * vv = ggml_view_1d(ctx, v, 2, 4); ggml_set_name(vv, "vv");
    struct ggml_tensor * tr = ggml_transpose(ctx, a); ggml_set_name(tr, "tr");
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, &LBT);
    P("buf size %zu multi %d\n", ggml_backend_buffer_get_size(buf), ggml_backend_buffer_is_multi_buffer(buf));
    float x[12]; for (int i = 0; i < 12; i++) x[i] = (float)i;
    ggml_backend_tensor_set(a, x, 0, 48);
    ggml_backend_tensor_set(a, x, 48, 0);
    ggml_backend_tensor_set(a, x, 1000, 0);
    ggml_backend_tensor_set(v, x, 0, 4);
    P("v nbytes %zu vv nbytes %zu tr nbytes %zu\n", ggml_nbytes(v), ggml_nbytes(vv), ggml_nbytes(tr));
    float y[12] = {0};
    ggml_backend_tensor_get(v, y, 0, ggml_nbytes(v)); dumpf("v:", y, 10);
    ggml_backend_tensor_get(vv, y, 0, 8); dumpf("vv:", y, 2);
    ggml_backend_tensor_get(tr, y, 0, ggml_nbytes(tr)); dumpf("tr:", y, 12);
    float r[3] = {-1, -2, -3};
    ggml_backend_tensor_set_2d(a, r, 12, 4, 3, 16, 4);
    ggml_backend_tensor_set_2d(a, r, 0, 4, 1, 16, 4);
    ggml_backend_tensor_set_2d(a, r, 0, 4, 0, 16, 4);
    ggml_backend_tensor_set_2d(a, r, 1000, 0, 3, 16, 4);
    ggml_backend_tensor_set_2d(v, r, 4, 4, 3, 16, 4);
    ggml_backend_tensor_get_2d(a, y, 8, 8, 3, 16, 8); dumpf("get2d:", y, 6);
    ggml_backend_tensor_get_2d(a, y, 0, 4, 1, 0, 0); dumpf("get2d1:", y, 1);
    ggml_backend_tensor_memset(a, 0x3f, 4, 4);
    ggml_backend_tensor_memset(vv, 0x40, 0, 4);
    ggml_backend_tensor_memset(a, 0x3f, 4000, 0);
    dumpt("a", a);
    P("-- async on LBE\n");
    ggml_backend_tensor_set_async(&LBE, a, x, 0, 8);
    ggml_backend_tensor_set_async(&LBE, a, x, 48, 0);
    ggml_backend_tensor_get_async(&LBE, v, y, 4, 4);
    ggml_backend_tensor_set_2d_async(&LBE, a, x, 0, 4, 3, 16, 4);
    ggml_backend_tensor_set_2d_async(&LBE, a, x, 0, 4, 1, 16, 4);
    ggml_backend_tensor_set_2d_async(&LBE, a, x, 0, 0, 3, 16, 4);
    ggml_backend_tensor_get_2d_async(&LBE, a, y, 0, 4, 3, 16, 4);
    ggml_backend_tensor_get_2d_async(&LBE, a, y, 0, 4, 0, 16, 4);
    P("-- async on LBE0 (no async)\n");
    ggml_backend_tensor_set_async(&LBE0, a, x, 0, 8);
    ggml_backend_tensor_set_async(&LBE0, a, x, 48, 0);
    ggml_backend_tensor_get_async(&LBE0, v, y, 4, 4);
    ggml_backend_tensor_set_2d_async(&LBE0, a, x, 0, 4, 3, 16, 4);
    ggml_backend_tensor_get_2d_async(&LBE0, a, y, 0, 4, 2, 16, 4);
    ggml_backend_tensor_get_2d_async(&LBE0, a, y, 0, 0, 2, 16, 4);
    dumpt("a", a);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

static void t_copy(void) {
    P("== tensor_copy across buffer kinds\n");
    struct ggml_context * cl = mctx(), * cm = mctx(), * cc = mctx(), * ch = mctx();
    struct ggml_tensor * l = ggml_new_tensor_1d(cl, GGML_TYPE_F32, 8); ggml_set_name(l, "l");
    struct ggml_tensor * l2 = ggml_new_tensor_1d(cl, GGML_TYPE_F32, 8); ggml_set_name(l2, "l2");
    struct ggml_tensor * lv = ggml_view_1d(cl, l, 4, 8); ggml_set_name(lv, "lv");
    struct ggml_tensor * m = ggml_new_tensor_1d(cm, GGML_TYPE_F32, 8); ggml_set_name(m, "m");
    struct ggml_tensor * mv = ggml_view_1d(cm, m, 4, 0); ggml_set_name(mv, "mv");
    struct ggml_tensor * c = ggml_new_tensor_1d(cc, GGML_TYPE_F32, 8); ggml_set_name(c, "c");
    struct ggml_tensor * cv = ggml_view_1d(cc, c, 4, 16); ggml_set_name(cv, "cv");
    struct ggml_tensor * h = ggml_new_tensor_1d(ch, GGML_TYPE_F32, 8); ggml_set_name(h, "h");
    ggml_backend_buffer_t bl = ggml_backend_alloc_ctx_tensors_from_buft(cl, &LBT);
    ggml_backend_buffer_t bm = ggml_backend_alloc_ctx_tensors_from_buft(cm, &LBT2);
    ggml_backend_buffer_t bc = ggml_backend_alloc_ctx_tensors_from_buft(cc, ggml_backend_cpu_buffer_type());
    ggml_backend_buffer_t bh = ggml_backend_alloc_ctx_tensors_from_buft(ch, &LBTH);
    float x[8]; for (int i = 0; i < 8; i++) x[i] = (float)(i + 1);
    ggml_backend_tensor_set(c, x, 0, 32);
    P("-- c->l\n"); ggml_backend_tensor_copy(c, l);
    P("-- l->l2\n"); ggml_backend_tensor_copy(l, l2);
    P("-- l->m\n"); ggml_backend_tensor_copy(l, m);
    P("-- m->h\n"); ggml_backend_tensor_copy(m, h);
    P("-- lv->mv\n"); ggml_backend_tensor_copy(lv, mv);
    P("-- mv->cv\n"); ggml_backend_tensor_copy(mv, cv);
    P("-- h->l\n"); ggml_backend_tensor_copy(h, l);
    P("-- self\n"); ggml_backend_tensor_copy(l, l);
    P("-- buffer_copy_tensor l->l2 %d\n", ggml_backend_buffer_copy_tensor(l, l2));
    P("-- buffer_copy_tensor c->m %d\n", ggml_backend_buffer_copy_tensor(c, m));
    P("-- buffer_copy_tensor l->c %d\n", ggml_backend_buffer_copy_tensor(l, c));
    P("-- buffer_copy_tensor l->cv %d\n", ggml_backend_buffer_copy_tensor(lv, cv));
    dumpt("c", c); dumpt("m", m); dumpt("h", h);
    P("-- async copy accept\n"); be_async = 1; ggml_backend_tensor_copy_async(&LBE0, &LBE, c, l);
    P("-- async copy decline\n"); be_async = 0; ggml_backend_tensor_copy_async(&LBE0, &LBE, m, l);
    P("-- async copy no cpy_async\n"); ggml_backend_tensor_copy_async(&LBE, &LBE0, l, m);
    P("-- async copy self\n"); ggml_backend_tensor_copy_async(NULL, NULL, l, l);
    be_async = 1;
    ggml_backend_buffer_free(bl); ggml_backend_buffer_free(bm); ggml_backend_buffer_free(bc); ggml_backend_buffer_free(bh);
    ggml_free(cl); ggml_free(cm); ggml_free(cc); ggml_free(ch);
}

static void t_multi(void) {
    P("== multi buffers through alloc_ctx_tensors (L max 1000, align 64, q pad 32)\n");
    struct ggml_context * ctx = mctx();
    struct ggml_tensor * t[8];
    for (int i = 0; i < 8; i++) {
        t[i] = ggml_new_tensor_1d(ctx, i % 3 == 2 ? GGML_TYPE_Q8_0 : GGML_TYPE_F32, i == 3 ? 300 : 64 * (i + 1));
        char n[8]; snprintf(n, sizeof n, "t%d", i); ggml_set_name(t[i], n);
        if (i == 4) { struct ggml_tensor * vw = ggml_view_1d(ctx, t[1], 8, 16); ggml_set_name(vw, "view_t1"); }
        if (i == 5) { struct ggml_tensor * e = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 0); ggml_set_name(e, "empty"); }
    }
    P("size needed %zu\n", ggml_backend_alloc_ctx_tensors_from_buft_size(ctx, &LBT));
    ggml_backend_buffer_t b = ggml_backend_alloc_ctx_tensors_from_buft(ctx, &LBT);
    P("multi %d size %zu base_null %d name %s usage %d\n", ggml_backend_buffer_is_multi_buffer(b), ggml_backend_buffer_get_size(b), ggml_backend_buffer_get_base(b) == NULL, ggml_backend_buffer_name(b), ggml_backend_buffer_get_usage(b));
    for (int i = 0; i < 8; i++) P("t%d buffer %s#%d off %zu\n", i, ggml_backend_buffer_name(t[i]->buffer), ((struct lbuf_ctx *)t[i]->buffer->context)->id, toff(t[i]->buffer, t[i]));
    ggml_backend_buffer_set_usage(b, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    for (int i = 0; i < 8; i++) P("t%d usage %d\n", i, ggml_backend_buffer_get_usage(t[i]->buffer));
    ggml_backend_buffer_clear(b, 0);
    ggml_backend_buffer_reset(b);
    P("multi alloc_size t0 %zu align %zu max %zu host %d\n", ggml_backend_buffer_get_alloc_size(b, t[2]), ggml_backend_buffer_get_alignment(b), ggml_backend_buffer_get_max_size(b), ggml_backend_buffer_is_host(b));
    ggml_backend_buffer_free(b);
    ggml_free(ctx);
    P("== nested multi\n");
    ggml_backend_buffer_t p[2] = { ggml_backend_buft_alloc_buffer(&LBT2, 10), ggml_backend_buft_alloc_buffer(&LBT2, 20) };
    ggml_backend_buffer_t m1 = ggml_backend_multi_buffer_alloc_buffer(p, 2);
    ggml_backend_buffer_t p2[2] = { m1, ggml_backend_buft_alloc_buffer(&LBT, 30) };
    ggml_backend_buffer_t m2 = ggml_backend_multi_buffer_alloc_buffer(p2, 2);
    ggml_backend_buffer_set_usage(m2, GGML_BACKEND_BUFFER_USAGE_COMPUTE);
    P("nested size %zu name %s usage parts %d %d %d\n", ggml_backend_buffer_get_size(m2), ggml_backend_buffer_name(m2), ggml_backend_buffer_get_usage(p[0]), ggml_backend_buffer_get_usage(p[1]), ggml_backend_buffer_get_usage(m1));
    ggml_backend_multi_buffer_set_usage(m1, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    P("m1 usage %d part %d\n", ggml_backend_buffer_get_usage(m1), ggml_backend_buffer_get_usage(p[0]));
    ggml_backend_buffer_clear(m2, 5);
    ggml_backend_buffer_free(m2);
    P("== multi with zero-size part\n");
    ggml_backend_buffer_t p3[2] = { ggml_backend_buft_alloc_buffer(&LBT, 0), ggml_backend_buft_alloc_buffer(&LBT2, 20) };
    ggml_backend_buffer_t m3 = ggml_backend_multi_buffer_alloc_buffer(p3, 2);
    ggml_backend_buffer_clear(m3, 1);
    P("m3 size %zu name %s\n", ggml_backend_buffer_get_size(m3), ggml_backend_buffer_name(m3));
    ggml_backend_buffer_free(m3);
}

static void t_alloc_view(void) {
    P("== tensor_alloc / view_init / init_tensor\n");
    struct ggml_context * ctx = mctx();
    struct ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 16); ggml_set_name(a, "a");
    struct ggml_tensor * q = ggml_new_tensor_1d(ctx, GGML_TYPE_Q4_0, 32); ggml_set_name(q, "q");
    struct ggml_tensor * v = ggml_view_1d(ctx, a, 4, 8); ggml_set_name(v, "v");
    struct ggml_tensor * vv = ggml_view_1d(ctx, v, 2, 4); ggml_set_name(vv, "vv");
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(&LBT, 128);
    char * base = ggml_backend_buffer_get_base(b);
    P("alloc a at 64 -> %d\n", ggml_backend_tensor_alloc(b, a, base + 64));
    P("alloc q at 128-18-32 -> %d\n", ggml_backend_tensor_alloc(b, q, base + 128 - 18 - 32));
    int st = ggml_backend_view_init(v);
    P("view_init v -> %d off %zu\n", st, toff(b, v));
    st = ggml_backend_view_init(vv);
    P("view_init vv -> %d off %zu buf_same %d\n", st, toff(b, vv), vv->buffer == b);
    P("init_tensor -> %d\n", ggml_backend_buffer_init_tensor(b, a));
    ggml_backend_buffer_free(b);
    ggml_free(ctx);
}

static void t_graph_copy(void) {
    P("== graph_copy to LBE (non-host L)\n");
    ggml_backend_t cpu = ggml_backend_cpu_init();
    struct ggml_context * ctx = mctx();
    struct ggml_tensor * a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 8, 4); ggml_set_name(a, "a");
    struct ggml_tensor * b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 8, 4); ggml_set_name(b, "b");
    ggml_set_input(a); ggml_set_param(b);
    struct ggml_tensor * av = ggml_view_2d(ctx, a, 4, 4, a->nb[1], 16); ggml_set_name(av, "av");
    struct ggml_tensor * s = ggml_add(ctx, a, b); ggml_set_name(s, "s");
    struct ggml_tensor * sv = ggml_view_1d(ctx, s, 8, 32); ggml_set_name(sv, "sv");
    struct ggml_tensor * c = ggml_cont(ctx, av); ggml_set_name(c, "c");
    struct ggml_tensor * m = ggml_mul(ctx, sv, sv); ggml_set_name(m, "m");
    struct ggml_tensor * r = ggml_reshape_2d(ctx, c, 8, 2); ggml_set_name(r, "r");
    struct ggml_tensor * acc = ggml_add_inplace(ctx, s, b); ggml_set_name(acc, "acc");
    struct ggml_tensor * out = ggml_add(ctx, ggml_sum(ctx, m), ggml_sum(ctx, r)); ggml_set_name(out, "out");
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, out);
    ggml_build_forward_expand(g, acc);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, cpu);
    float x[32]; for (int i = 0; i < 32; i++) x[i] = (float)i * 0.5f;
    ggml_backend_tensor_set(a, x, 0, sizeof x);
    ggml_backend_tensor_set(b, x, 0, sizeof x);
    ggml_backend_graph_compute(cpu, g);
    struct ggml_backend_graph_copy gc = ggml_backend_graph_copy(&LBE, g);
    P("copy nodes %d\n", ggml_graph_n_nodes(gc.graph));
    for (int i = 0; i < ggml_graph_n_nodes(gc.graph); i++) {
        struct ggml_tensor * n = ggml_graph_node(gc.graph, i), * o = ggml_graph_node(g, i);
        P(" node %d %s op %s flags %d view %d vs %s offs %zu off %zu srcs", i, n->name, ggml_op_name(n->op), n->flags, n->view_src != NULL, n->view_src ? n->view_src->name : "-", n->view_offs, toff(n->buffer, n));
        for (int k = 0; k < GGML_MAX_SRC; k++) if (n->src[k]) P(" %s", n->src[k]->name);
        P(" same_layout %d params_eq %d\n", same_layout(n, o), memcmp(n->op_params, o->op_params, sizeof n->op_params) == 0);
    }
    P("graph size %zu\n", (size_t) ggml_graph_size(gc.graph));
    /* contents of the copied out */
    struct ggml_tensor * co = ggml_graph_node(gc.graph, ggml_graph_n_nodes(gc.graph) - 1);
    dumpt("last", co);
    ggml_backend_graph_copy_free(gc);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    ggml_backend_free(cpu);
}

static int cb_n;
static bool cb(int i, struct ggml_tensor * t1, struct ggml_tensor * t2, void * ud) {
    (void)ud; P("  CB %d %s %s %s\n", i, t1->name, t2->name, ggml_op_name(t1->op)); return ++cb_n < 4;
}
static void t_compare(void) {
    P("== compare_graph_backend cpu vs LBE\n");
    ggml_backend_t cpu = ggml_backend_cpu_init();
    struct ggml_context * ctx = mctx();
    struct ggml_tensor * a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 8, 4); ggml_set_name(a, "a");
    struct ggml_tensor * t = ggml_transpose(ctx, a); ggml_set_name(t, "t");
    struct ggml_tensor * c = ggml_cont(ctx, t); ggml_set_name(c, "c");
    struct ggml_tensor * s = ggml_scale(ctx, c, 2.0f); ggml_set_name(s, "s");
    struct ggml_tensor * p = ggml_permute(ctx, s, 1, 0, 2, 3); ggml_set_name(p, "p");
    struct ggml_tensor * s2 = ggml_sqr(ctx, ggml_cont(ctx, p)); ggml_set_name(s2, "s2");
    struct ggml_tensor * s3 = ggml_sqr(ctx, s2); ggml_set_name(s3, "s3");
    struct ggml_tensor * s4 = ggml_sqr(ctx, s3); ggml_set_name(s4, "s4");
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, s4);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, cpu);
    ggml_backend_buffer_clear(buf, 0);
    P("n_nodes %d\n", ggml_graph_n_nodes(g));
    cb_n = 0;
    P("ret %d\n", ggml_backend_compare_graph_backend(cpu, &LBE, g, cb, NULL, NULL, 0));
    cb_n = -100;
    const struct ggml_tensor * want[3] = { s2, a, s2 };
    P("ret %d\n", ggml_backend_compare_graph_backend(cpu, &LBE, g, cb, NULL, want, 3));
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    ggml_backend_free(cpu);
}

static void t_events(void) {
    P("== events / device\n");
    ggml_backend_event_t e = ggml_backend_event_new(&LDEV);
    ggml_backend_event_record(e, &LBE);
    ggml_backend_event_wait(&LBE, e);
    ggml_backend_event_synchronize(e);
    ggml_backend_event_free(e);
    ggml_backend_event_free(NULL);
    P("ev null dev %d\n", ggml_backend_event_new(NULL) == NULL);
    size_t f = 0, t = 0; ggml_backend_dev_memory(&LDEV, &f, &t);
    struct ggml_backend_dev_props pr; memset(&pr, 0x5a, sizeof pr);
    ggml_backend_dev_get_props(&LDEV, &pr);
    P("mem %zu %zu props name %s desc_null %d type %d memfree %zu caps %d %d %d %d\n", f, t, pr.name, pr.description == NULL, pr.type, pr.memory_free, pr.caps.async, pr.caps.host_buffer, pr.caps.buffer_from_host_ptr, pr.caps.events);
    P("host buft null %d offload %d\n", ggml_backend_dev_host_buffer_type(&LDEV) == NULL, ggml_backend_dev_offload_op(&LDEV, NULL));
    P("be name %s guid %d align %zu max %zu dflt %s supports_buft %d %d\n", ggml_backend_name(&LBE), ggml_backend_guid(&LBE) == &LGUID, ggml_backend_get_alignment(&LBE), ggml_backend_get_max_size(&LBE),
      ggml_backend_buft_name(ggml_backend_get_default_buffer_type(&LBE)), ggml_backend_supports_buft(&LBE, &LBT), ggml_backend_supports_buft(&LBE, NULL));
    ggml_backend_buffer_t bb = ggml_backend_alloc_buffer(&LBE, 0);
    P("alloc_buffer 0: %s size %zu\n", ggml_backend_buffer_name(bb), ggml_backend_buffer_get_size(bb));
    ggml_backend_buffer_free(bb);
    bb = ggml_backend_alloc_buffer(&LBE, 10);
    ggml_backend_buffer_free(bb);
    ggml_backend_synchronize(&LBE);
    ggml_backend_free(&LBE);
    ggml_backend_free(NULL);
    P("guid null %d\n", ggml_backend_guid(NULL) == NULL);
    P("cpu buft dev null %d\n", ggml_backend_buft_get_device(ggml_backend_cpu_buffer_type()) == NULL);
    ggml_backend_t cpu = ggml_backend_cpu_init();
    P("cpu dev %s\n", ggml_backend_dev_name(ggml_backend_get_device(cpu)));
    ggml_backend_free(cpu);
}

static void empty_graph(void) {
    P("== empty graph copy\n");
    struct ggml_context * ctx = mctx();
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    struct ggml_backend_graph_copy gc = ggml_backend_graph_copy(&LBE, g);
    P("null %d %d\n", gc.buffer == NULL, gc.graph == NULL);
    P("compare %d\n", ggml_backend_compare_graph_backend(&LBE, &LBE, g, NULL, NULL, NULL, 0));
    ggml_free(ctx);
}
static void preallocated_ctx(void) {
    P("== alloc_ctx with pre-allocated tensors and views of them\n");
    struct ggml_context * c0 = mctx();
    struct ggml_tensor * w = ggml_new_tensor_1d(c0, GGML_TYPE_F32, 32); ggml_set_name(w, "w");
    ggml_backend_buffer_t b0 = ggml_backend_alloc_ctx_tensors_from_buft(c0, &LBT2);
    struct ggml_context * ctx = mctx();
    struct ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 16); ggml_set_name(a, "a");
    struct ggml_tensor * vw = ggml_view_1d(ctx, w, 4, 8); ggml_set_name(vw, "vw");
    struct ggml_tensor * pre = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8); ggml_set_name(pre, "pre");
    ggml_backend_tensor_alloc(b0, pre, (char *)ggml_backend_buffer_get_base(b0) + 0);
    struct ggml_tensor * vp = ggml_view_1d(ctx, pre, 2, 4); ggml_set_name(vp, "vp");
    struct ggml_tensor * va = ggml_view_1d(ctx, a, 2, 4); ggml_set_name(va, "va");
    P("size %zu\n", ggml_backend_alloc_ctx_tensors_from_buft_size(ctx, &LBT));
    ggml_backend_buffer_t b = ggml_backend_alloc_ctx_tensors_from_buft(ctx, &LBT);
    for (struct ggml_tensor * t = ggml_get_first_tensor(ctx); t; t = ggml_get_next_tensor(ctx, t))
        P(" %s buf %s\n", t->name, t->buffer ? ggml_backend_buffer_name(t->buffer) : "-");
    ggml_backend_buffer_free(b);
    P("== ctx with only pre-allocated\n");
    struct ggml_context * c2 = mctx();
    struct ggml_tensor * vw2 = ggml_view_1d(c2, w, 4, 8); ggml_set_name(vw2, "vw2");
    b = ggml_backend_alloc_ctx_tensors_from_buft(c2, &LBT);
    P("null %d vw2 buf %s size %zu\n", b == NULL, vw2->buffer ? ggml_backend_buffer_name(vw2->buffer) : "-", ggml_backend_alloc_ctx_tensors_from_buft_size(c2, &LBT));
    ggml_backend_buffer_free(b0);
    ggml_free(ctx); ggml_free(c0); ggml_free(c2);
}
static void tallocr(void) {
    P("== tallocr\n");
    static _Alignas(64) unsigned char mem[256];
    ggml_backend_buffer_t mb = ggml_backend_cpu_buffer_from_ptr(mem + 32, 200);
    struct ggml_tallocr ta = ggml_tallocr_new(mb);
    P("off %zu align %zu\n", ta.offset, ta.alignment);
    struct ggml_context * ctx = mctx();
    for (int i = 0; i < 4; i++) { struct ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5 + i);
        int st = ggml_tallocr_alloc(&ta, t);
        P("alloc %d -> %d off %zu data_off %zu\n", i, st, ta.offset, (size_t)((unsigned char *)t->data - mem)); }
    ggml_backend_buffer_free(mb);
    ggml_free(ctx);
}
static unsigned long long rs;
static unsigned rnd(void) { rs = rs * 6364136223846793005ULL + 1442695040888963407ULL; return (unsigned)(rs >> 33); }
static unsigned rr(unsigned n) { return n ? rnd() % n : 0; }
static const enum ggml_type types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0, GGML_TYPE_I32, GGML_TYPE_Q4_K };

static void fuzz_alloc(int seed) {
    rs = seed * 7919ULL + 1;
    size_t aligns[] = { 1, 16, 32, 64, 256 };
    LBT_C.align = aligns[rr(5)]; LBT_C.max = 64 + rr(4000); LBT_C.pad = rr(3) * 32; LBT_C.nalloc = 0;
    P("=== alloc seed %d align %zu max %zu pad %zu\n", seed, LBT_C.align, LBT_C.max, LBT_C.pad);
    struct ggml_context * c0 = mctx();
    struct ggml_tensor * pre0 = ggml_new_tensor_1d(c0, GGML_TYPE_F32, 64); ggml_set_name(pre0, "pre0");
    ggml_backend_buffer_t b0 = ggml_backend_alloc_ctx_tensors_from_buft(c0, &LBT2);
    struct ggml_context * ctx = mctx();
    int n = 1 + rr(20); struct ggml_tensor * ts[64]; int nt = 0;
    for (int i = 0; i < n; i++) {
        int k = rr(10); struct ggml_tensor * t;
        if (k < 6 || nt == 0) {
            enum ggml_type ty = types[rr(6)];
            int64_t bs = ggml_blck_size(ty);
            t = ggml_new_tensor_2d(ctx, ty, bs * rr(40), 1 + rr(5));
        } else if (k < 8) {
            struct ggml_tensor * s = ts[rr(nt)];
            t = ggml_view_1d(ctx, s, 0, 0);
        } else if (k < 9) {
            t = ggml_view_1d(ctx, pre0, rr(16), 4 * rr(16));
        } else {
            t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, rr(8));
            ggml_backend_tensor_alloc(b0, t, ggml_backend_buffer_get_base(b0));
        }
        char nm[16]; snprintf(nm, sizeof nm, "x%d", i); ggml_set_name(t, nm);
        ts[nt++] = t;
    }
    size_t need = ggml_backend_alloc_ctx_tensors_from_buft_size(ctx, &LBT);
    ggml_backend_buffer_t b = ggml_backend_alloc_ctx_tensors_from_buft(ctx, &LBT);
    P("need %zu got %d size %zu multi %d\n", need, b != NULL, b ? ggml_backend_buffer_get_size(b) : 0, b ? ggml_backend_buffer_is_multi_buffer(b) : 0);
    for (int i = 0; i < nt; i++) {
        struct ggml_tensor * t = ts[i];
        P(" %s %s buf %s#%d off %zu\n", t->name, ggml_type_name(t->type), t->buffer ? ggml_backend_buffer_name(t->buffer) : "-", t->buffer && t->buffer->context ? ((struct lbuf_ctx *)t->buffer->context)->id : -1, t->buffer ? toff(t->buffer, t) : 0);
    }
    if (b) { ggml_backend_buffer_set_usage(b, GGML_BACKEND_BUFFER_USAGE_WEIGHTS); ggml_backend_buffer_clear(b, 1); ggml_backend_buffer_free(b); }
    ggml_backend_buffer_free(b0);
    ggml_free(ctx); ggml_free(c0);
}

static void fuzz_access(int seed) {
    rs = seed * 104729ULL + 3;
    LBT_C.align = 64; LBT_C.max = SIZE_MAX; LBT_C.pad = 0; LBT_C.nalloc = 0; LBT_C.has2d = rr(2);
    P("=== access seed %d 2d %d\n", seed, LBT_C.has2d);
    struct ggml_context * ctx = mctx();
    struct ggml_tensor * a = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1 + rr(8), 1 + rr(6), 1 + rr(3)); ggml_set_name(a, "a");
    struct ggml_tensor * c = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1 + rr(8), 1 + rr(6), 1 + rr(3)); ggml_set_name(c, "c");
    ggml_backend_buffer_t b = ggml_backend_alloc_ctx_tensors_from_buft(ctx, rr(2) ? &LBT : ggml_backend_cpu_buffer_type());
    ggml_backend_buffer_clear(b, 0);
    struct ggml_tensor * vs[8]; int nv = 0;
    vs[nv++] = a;
    vs[nv++] = ggml_transpose(ctx, a);
    vs[nv++] = ggml_permute(ctx, a, 2, 0, 1, 3);
    if (a->ne[0] > 1) vs[nv++] = ggml_view_2d(ctx, a, a->ne[0] - 1, a->ne[1], a->nb[1], 4);
    { struct ggml_tensor * prev = vs[nv - 1]; vs[nv++] = ggml_view_1d(ctx, prev, 1, 0); }
    for (int i = 1; i < nv; i++) { char nm[8]; snprintf(nm, sizeof nm, "v%d", i); ggml_set_name(vs[i], nm); ggml_backend_view_init(vs[i]); }
    unsigned char buf[4096], out[4096];
    for (int i = 0; i < 4096; i++) buf[i] = (unsigned char)rnd();
    for (int it = 0; it < 12; it++) {
        struct ggml_tensor * t = vs[rr(nv)];
        size_t nb = ggml_nbytes(t);
        size_t off = rr(nb + 1), sz = rr(nb - off + 1);
        int op = rr(6);
        memset(out, 0xee, sizeof out);
        if (op == 0) { P("set %s %zu %zu\n", t->name, off, sz); ggml_backend_tensor_set(t, buf, off, sz); }
        else if (op == 1) { P("get %s %zu %zu\n", t->name, off, sz); ggml_backend_tensor_get(t, out, off, sz); }
        else if (op == 2) { P("memset %s %zu %zu\n", t->name, off, sz); ggml_backend_tensor_memset(t, (uint8_t)rnd(), off, sz); }
        else {
            size_t n = 1 + rr(4), st = rr(nb / n + 1), rsz = rr(st + 1);
            if (n > 1 && off + (n - 1) * st + rsz > nb) { n = 1; }
            if (off + rsz > nb) rsz = nb - off;
            size_t sd = rsz + rr(8);
            if (op == 3) { P("set2d %s %zu %zu %zu %zu %zu\n", t->name, off, rsz, n, st, sd); ggml_backend_tensor_set_2d(t, buf, off, rsz, n, st, sd); }
            else if (op == 4) { P("get2d %s %zu %zu %zu %zu %zu\n", t->name, off, rsz, n, st, sd); ggml_backend_tensor_get_2d(t, out, off, rsz, n, st, sd); }
            else { P("async set2d %s %zu %zu %zu %zu %zu\n", t->name, off, rsz, n, st, sd); ggml_backend_tensor_set_2d_async(rr(2) ? &LBE : &LBE0, t, buf, off, rsz, n, st, sd); }
        }
        unsigned h = 0; for (int i = 0; i < 4096; i++) h = h * 31 + out[i];
        P(" out hash %08x\n", h);
    }
    (void) c;
    {
        struct ggml_tensor * c2 = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, a->ne[0], a->ne[1], a->ne[2]);
        ggml_backend_buffer_t b2 = ggml_backend_alloc_ctx_tensors_from_buft(ctx, rr(2) ? &LBT2 : &LBTH);
        ggml_set_name(c2, "c2");
        ggml_backend_tensor_copy(a, c2);
        dumpt("c2", c2);
        ggml_backend_buffer_free(b2);
    }
    dumpt("a", a);
    ggml_backend_buffer_free(b);
    ggml_free(ctx);
}

static int ncb;
static bool gcb(int i, struct ggml_tensor * t1, struct ggml_tensor * t2, void * ud) {
    (void)ud; size_t n = ggml_nbytes(t1); unsigned char * a = malloc(n + 1), * b = malloc(n + 1);
    ggml_backend_tensor_get(t1, a, 0, n); ggml_backend_tensor_get(t2, b, 0, n);
    P("  CB %d %s %s eq %d\n", i, t1->name, ggml_op_name(t1->op), memcmp(a, b, n) == 0); free(a); free(b); return ++ncb < 1000;
}
static void one(int seed, ggml_backend_t cpu, ggml_backend_t cpu2) {
    rs = seed * 2654435761ULL + 7;
    P("=== graph seed %d\n", seed);
    struct ggml_context * ctx = mctx();
    struct ggml_tensor * pool[64]; int np = 0;
    int nl = 1 + rr(3);
    for (int i = 0; i < nl; i++) { pool[np] = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 8, 4); char n[8]; snprintf(n, sizeof n, "L%d", i); ggml_set_name(pool[np], n); np++; }
    struct ggml_tensor * last = pool[0];
    int nops = 2 + rr(10);
    for (int i = 0; i < nops; i++) {
        struct ggml_tensor * a = pool[rr(np)], * b = pool[rr(np)], * t = NULL;
        int k = rr(9);
        bool same = ggml_are_same_shape(a, b) && ggml_is_contiguous(a) && ggml_is_contiguous(b);
        switch (k) {
            case 0: t = same ? ggml_add(ctx, a, b) : ggml_sqr(ctx, ggml_cont(ctx, a)); break;
            case 1: t = ggml_is_contiguous(a) ? ggml_scale(ctx, a, 0.5f) : ggml_cont(ctx, a); break;
            case 2: t = ggml_transpose(ctx, a); break;
            case 3: t = ggml_is_contiguous(a) ? ggml_reshape_1d(ctx, a, ggml_nelements(a)) : ggml_cont(ctx, a); break;
            case 4: t = ggml_nbytes(a) >= 20 && ggml_is_contiguous(a) ? ggml_view_1d(ctx, a, 4, 4) : ggml_cont(ctx, a); break;
            case 5: t = same ? ggml_add_inplace(ctx, a, b) : ggml_cont(ctx, a); break;
            case 6: t = ggml_are_same_shape(a, b) ? ggml_cpy(ctx, a, b) : ggml_cont(ctx, a); break;
            case 7: t = ggml_is_contiguous(a) ? ggml_scale_inplace(ctx, a, 2.0f) : ggml_cont(ctx, a); break;
            default: t = ggml_cont(ctx, ggml_permute(ctx, a, 1, 0, 2, 3)); break;
        }
        char n[8]; snprintf(n, sizeof n, "N%d", i); ggml_set_name(t, n);
        pool[np++] = t; last = t;
    }
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    for (int i = nl; i < np; i++) if (rr(3) == 0) ggml_build_forward_expand(g, pool[i]);
    ggml_build_forward_expand(g, last);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, cpu);
    for (int i = 0; i < nl; i++) { float x[32]; for (int k = 0; k < 32; k++) x[k] = (float)(rr(100)) / 8.0f; ggml_backend_tensor_set(pool[i], x, 0, sizeof x); }
    P("nodes %d\n", ggml_graph_n_nodes(g));
    struct ggml_backend_graph_copy gc = ggml_backend_graph_copy(&LBE, g);
    for (int i = 0; i < ggml_graph_n_nodes(gc.graph); i++) {
        struct ggml_tensor * nd = ggml_graph_node(gc.graph, i);
        P(" %s %s vs %s offs %zu off %zu", nd->name, ggml_op_name(nd->op), nd->view_src ? nd->view_src->name : "-", nd->view_offs, toff(nd->buffer, nd));
        for (int s = 0; s < GGML_MAX_SRC; s++) if (nd->src[s]) P(" s%d=%s", s, nd->src[s]->name);
        P("\n");
    }
    ggml_backend_graph_copy_free(gc);
    ncb = 0;
    P("compare %d\n", ggml_backend_compare_graph_backend(cpu, cpu2, g, gcb, NULL, NULL, 0));
    const struct ggml_tensor * want[2] = { last, pool[nl + rr(np - nl)] };
    P("compare tn %d\n", ggml_backend_compare_graph_backend(cpu, cpu2, g, gcb, NULL, want, 2));
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

/* Warnings and errors, without the function name before the first ": " (ours names the entry
 * point a message comes through, compare_graph_backend for its graph copy, where stock names
 * ggml_backend_graph_copy). */
static void logcb_main(enum ggml_log_level l, const char * text, void * ud) {
    (void)ud;
    if (l >= GGML_LOG_LEVEL_WARN) {
        const char * m = strstr(text, ": ");
        printf("  LOG%d %s", (int)l, m ? m + 2 : text);
    }
}
int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    ggml_log_set(logcb_main, NULL);
    t_buffers();
    t_set_get();
    t_copy();
    t_multi();
    t_alloc_view();
    t_graph_copy();
    t_compare();
    t_events();
    empty_graph();
    preallocated_ctx();
    tallocr();
    for (int s = 0; s < 200; s++) { fuzz_alloc(s); fuzz_access(s); }
    ggml_backend_t cpu = ggml_backend_cpu_init(), cpu2 = ggml_backend_cpu_init();
    for (int s = 0; s < 100; s++) one(s, cpu, cpu2);
    ggml_backend_free(cpu); ggml_backend_free(cpu2);
    P("done\n");
    return 0;
}
