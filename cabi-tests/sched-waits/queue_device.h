// queue_device.h: the test devices of cabi-tests/sched-waits, for queued_copy.c,
// direct_write.c and view_input.c (each includes it once; everything is static).
//
// Device TA (GPU type, its own buffer type in host memory) has a backend whose work waits in
// a queue until synchronize (or an event's synchronize), like a GPU that has not reached it:
//   - cpy_tensor_async accepts a source in a host buffer, into a buffer type TA accepts
//     (supports_buft: the caller may add the CPU's), and reads it when the queue runs the copy
//     (as ggml-vulkan's copyBuffer from a pinned host buffer does),
//   - graph_compute (ADD; and OPT_STEP_ADAMW's write of its first moment, as m = grad: read
//     and written when the queue runs it), set_tensor_async and get_tensor_async are queued
//     too.
// Device TCPU (CPU type, CPU buffer type) computes at once and, like ggml-cpu, has no
// synchronize. Device TB (GPU type, for view_input.c) computes at once too, in a buffer type
// of its own that no device shares. init_devices() puts the interfaces in place, with TA's
// events when PIPELINE is set; other supports_buft answers are the caller's to put in TA's
// interface.

#ifndef SCHED_WAITS_QUEUE_DEVICE_H
#define SCHED_WAITS_QUEUE_DEVICE_H

#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXQ 256

enum op_kind { OP_COPY, OP_ADD };
struct op {
    enum op_kind kind;
    void *       dst;
    const void * a;
    const void * b;
    size_t       n; // bytes for COPY, floats for ADD
};
static struct op q[MAXQ];
static int       nq;
static int       n_sync_a, n_cpy_async;

static void push(struct op o) {
    if (nq >= MAXQ) { fprintf(stderr, "queue full\n"); exit(2); }
    // (the queue only grows; `done` marks what has run)
    q[nq++] = o;
}
static int done; // ops [0, done) have run
static void run_to(int upto) {
    for (int i = done; i < upto; i++) {
        struct op * o = &q[i];
        if (o->kind == OP_COPY) {
            memcpy(o->dst, o->a, o->n);
        } else {
            for (size_t k = 0; k < o->n; k++) {
                ((float *) o->dst)[k] = ((const float *) o->a)[k] + ((const float *) o->b)[k];
            }
        }
    }
    if (upto > done) done = upto;
}
static void drain(void) { run_to(nq); }

static struct ggml_backend_device dev_a, dev_cpu, dev_b;

static const char * dev_name(ggml_backend_dev_t d) { return d == &dev_a ? "TA" : d == &dev_b ? "TB" : "TCPU"; }
static const char * be_name(ggml_backend_t b) { return dev_name(b->device); }
static void         be_free(ggml_backend_t b) { free(b); }
static void         dev_memory(ggml_backend_dev_t d, size_t * f, size_t * t) { (void) d; *f = *t = 1u << 30; }
static enum ggml_backend_dev_type dev_type(ggml_backend_dev_t d) {
    return d == &dev_cpu ? GGML_BACKEND_DEVICE_TYPE_CPU : GGML_BACKEND_DEVICE_TYPE_GPU;
}
static void dev_props(ggml_backend_dev_t d, struct ggml_backend_dev_props * p) {
    p->name = p->description = dev_name(d);
    p->memory_free = p->memory_total = 1u << 30;
    p->type = dev_type(d);
}

// TA's buffer type: CPU buffers relabelled (host memory, but not the CPU buffer type).
static struct ggml_backend_buffer_type buft_a;
static const char * buft_a_name(ggml_backend_buffer_type_t b) { (void) b; return "TA"; }
static ggml_backend_buffer_t buft_a_alloc(ggml_backend_buffer_type_t bt, size_t size) {
    (void) bt;
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), size);
    if (b) b->buft = &buft_a;
    return b;
}
static size_t buft_a_align(ggml_backend_buffer_type_t b) { (void) b; return 32; }
static bool   buft_a_is_host(ggml_backend_buffer_type_t b) { (void) b; return true; }
static struct ggml_backend_buffer_type buft_a = {
    { buft_a_name, buft_a_alloc, buft_a_align, NULL, NULL, buft_a_is_host }, &dev_a, NULL };

// TB's buffer type: CPU buffers relabelled, not host-addressable (no other device may use it,
// and TB uses no other): a device that reads everything of another's through a copy.
static struct ggml_backend_buffer_type buft_b;
static const char * buft_b_name(ggml_backend_buffer_type_t b) { (void) b; return "TB"; }
static ggml_backend_buffer_t buft_b_alloc(ggml_backend_buffer_type_t bt, size_t size) {
    (void) bt;
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), size);
    if (b) b->buft = &buft_b;
    return b;
}
static bool   buft_b_is_host(ggml_backend_buffer_type_t b) { (void) b; return false; }
static struct ggml_backend_buffer_type buft_b = {
    { buft_b_name, buft_b_alloc, buft_a_align, NULL, NULL, buft_b_is_host }, &dev_b, NULL };

static ggml_backend_buffer_type_t dev_buft(ggml_backend_dev_t d) {
    return d == &dev_a ? &buft_a : d == &dev_b ? &buft_b : ggml_backend_cpu_buffer_type();
}
static bool dev_supports_op(ggml_backend_dev_t d, const struct ggml_tensor * t) { (void) d; (void) t; return true; }
static bool dev_supports_buft(ggml_backend_dev_t d, ggml_backend_buffer_type_t b) { return b == dev_buft(d); }

static const struct ggml_backend_device_i dev_iface = {
    .get_name = dev_name, .get_description = dev_name, .get_memory = dev_memory,
    .get_type = dev_type, .get_props = dev_props, .get_buffer_type = dev_buft,
    .supports_op = dev_supports_op, .supports_buft = dev_supports_buft,
};

// Whether an op computes nothing (its result is a view of its source's bytes).
static int is_view_op(enum ggml_op op) {
    return op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE || op == GGML_OP_TRANSPOSE;
}

// TCPU (and TB): synchronous ADD.
static enum ggml_status cpu_compute(ggml_backend_t b, struct ggml_cgraph * g) {
    (void) b;
    for (int i = 0; i < ggml_graph_n_nodes(g); i++) {
        struct ggml_tensor * n = ggml_graph_node(g, i);
        if (n->op == GGML_OP_NONE || is_view_op(n->op)) continue;
        if (n->op != GGML_OP_ADD) return GGML_STATUS_FAILED;
        for (int64_t k = 0; k < ggml_nelements(n); k++) {
            ((float *) n->data)[k] = ((float *) n->src[0]->data)[k] + ((float *) n->src[1]->data)[k];
        }
    }
    return GGML_STATUS_SUCCESS;
}

// TA: everything queued until synchronize.
static enum ggml_status a_compute(ggml_backend_t b, struct ggml_cgraph * g) {
    (void) b;
    for (int i = 0; i < ggml_graph_n_nodes(g); i++) {
        struct ggml_tensor * n = ggml_graph_node(g, i);
        if (n->op == GGML_OP_NONE || is_view_op(n->op)) continue;
        if (n->op == GGML_OP_OPT_STEP_ADAMW) {
            // only its write of the first moment, modelled as m = grad (src[2] = src[1])
            push((struct op){ OP_COPY, n->src[2]->data, n->src[1]->data, NULL, ggml_nbytes(n->src[2]) });
            continue;
        }
        if (n->op != GGML_OP_ADD) return GGML_STATUS_FAILED;
        push((struct op){ OP_ADD, n->data, n->src[0]->data, n->src[1]->data, (size_t) ggml_nelements(n) });
    }
    return GGML_STATUS_SUCCESS;
}
static void a_sync(ggml_backend_t b) { (void) b; n_sync_a++; drain(); }
static void a_set_async(ggml_backend_t b, struct ggml_tensor * t, const void * data, size_t off, size_t size) {
    (void) b; push((struct op){ OP_COPY, (char *) t->data + off, data, NULL, size });
}
static void a_get_async(ggml_backend_t b, const struct ggml_tensor * t, void * data, size_t off, size_t size) {
    (void) b; push((struct op){ OP_COPY, data, (const char *) t->data + off, NULL, size });
}
static bool a_cpy_async(ggml_backend_t src_b, ggml_backend_t dst_b, const struct ggml_tensor * src, struct ggml_tensor * dst) {
    (void) src_b;
    if (!ggml_backend_buffer_is_host(src->buffer) || !ggml_backend_supports_buft(dst_b, dst->buffer->buft)) return false;
    n_cpy_async++;
    push((struct op){ OP_COPY, dst->data, src->data, NULL, ggml_nbytes(src) });
    return true;
}

struct ev { int seq; };
static int n_ev_sync, n_ev_wait;
static ggml_backend_event_t ev_new(ggml_backend_dev_t d) {
    ggml_backend_event_t e = calloc(1, sizeof(*e));
    e->device = d;
    e->context = calloc(1, sizeof(struct ev));
    return e;
}
static void ev_free(ggml_backend_dev_t d, ggml_backend_event_t e) { (void) d; free(e->context); free(e); }
static void ev_sync(ggml_backend_dev_t d, ggml_backend_event_t e) { (void) d; n_ev_sync++; run_to(((struct ev *) e->context)->seq); }
static void ev_record(ggml_backend_t b, ggml_backend_event_t e) { (void) b; ((struct ev *) e->context)->seq = nq; }
static void ev_wait(ggml_backend_t b, ggml_backend_event_t e) { (void) b; (void) e; n_ev_wait++; /* in-order queue: nothing to do */ }

static ggml_backend_t new_backend(ggml_backend_dev_t d) {
    ggml_backend_t b = calloc(1, sizeof(*b));
    b->device = d;
    b->iface.get_name = be_name;
    b->iface.free = be_free;
    if (d == &dev_a) {
        b->iface.graph_compute = a_compute;
        b->iface.synchronize = a_sync;
        b->iface.set_tensor_async = a_set_async;
        b->iface.get_tensor_async = a_get_async;
        b->iface.cpy_tensor_async = a_cpy_async;
        b->iface.event_record = ev_record;
        b->iface.event_wait = ev_wait;
    } else {
        b->iface.graph_compute = cpu_compute;
    }
    return b;
}

// Puts the devices' interfaces in place and, when PIPELINE is set in the environment, gives
// TA its events. Returns whether PIPELINE is set (make the scheduler parallel then).
static int init_devices(void) {
    dev_a.iface = dev_iface;
    dev_cpu.iface = dev_iface;
    dev_b.iface = dev_iface;
    int parallel = getenv("PIPELINE") != NULL;
    if (parallel) {
        dev_a.iface.event_new = ev_new;
        dev_a.iface.event_free = ev_free;
        dev_a.iface.event_synchronize = ev_sync;
    }
    return parallel;
}

#endif
