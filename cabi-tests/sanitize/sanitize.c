// sanitize.c - planted ordering faults for GGML_SCHED_SANITIZE (issue 14).
//
// An asynchronous test device: the fake backend of cabi-tests/common with real memory, whose
// backends queue their graphs on a worker thread per device (each graph starts after a
// delay, so an unordered access really sees the wrong bytes), with events (record and
// wait are queue entries, event_synchronize blocks the host) and synchronize. DEV0 starts
// each graph after 100 ms, DEV1 after 10 ms. Buffer
// set/get/cpy act at once, without waiting for the queue, as a device DMA engine would.
//
//   sanitize CASE FAULT      CASE: copy-without-wait | event-before-work | sched-inputless |
//                                  strided-rows | cpy-over-unordered
//                            FAULT: on | off
//
// copy-without-wait: DEV0 computes y = 3x; the host copies y into DEV1's memory with the
//   blocking ggml_backend_tensor_copy. Fault on: the host skips its wait for DEV0's event.
// event-before-work: DEV0 computes y = 3x, DEV1 computes z = y + y reading DEV0's memory,
//   ordered by an event DEV0 records and DEV1 waits for. Fault on: DEV0 records the event
//   before it queues the work the event should cover.
// sched-inputless: the scheduler over [DEV0, CPU]: DEV0 reads kv (a CPU buffer, which DEV0
//   may use) into kv_read, then a CPU split without inputs overwrites kv. The fault is the
//   scheduler's own, GGML_SCHED_TEST_FAULT=no-wait-before-inputless-split (set by run.sh):
//   it removes the wait for DEV0 before that split.
// strided-rows: DEV0 writes the even rows of x through a strided view (ggml_cpy into
//   ggml_view_2d with a row stride of two rows) while the host writes one row of x with
//   ggml_backend_tensor_set, then waits for DEV0. Fault off: row 1, bytes DEV0 never writes
//   (no report, though they lie between DEV0's rows). Fault on: row 2, one of DEV0's rows.
// cpy-over-unordered: DEV0 computes y = 3x; DEV1 copies s over y (ggml_cpy into a tensor at
//   y's memory), after waiting for an event DEV0 records after its work. Fault on: no wait.
//   A copy's destination is written, not read: one report (write after write), not two.
//
// Prints "case CASE fault FAULT: value V (expected E)"; exits 1 when the fault is off and the
// value is wrong (with the fault on, the value is printed, not checked: it depends on timing).

#define _POSIX_C_SOURCE 200809L
#include "../common/fake_backend.h"
#include "ggml-alloc.h"
#include "ggml-cpu.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N = 256, QMAX = 64 };

// ---------------------------------------------------------------------------------------
// events and the queue

struct event {
    pthread_mutex_t m;
    pthread_cond_t  c;
    uint64_t        recorded; // recordings queued
    uint64_t        done;     // recordings the queue has passed
};

enum job_kind { JOB_GRAPH, JOB_SIGNAL, JOB_WAIT };

struct job {
    enum job_kind         kind;
    struct ggml_tensor ** nodes; // JOB_GRAPH: a copy of the node list
    int                   n_nodes;
    struct event *        ev;
    uint64_t              seq;
};

struct queue {
    pthread_mutex_t m;
    pthread_cond_t  c;
    struct job      jobs[QMAX];
    int             head, tail; // jobs[head..tail) pending
    bool            busy;
    int             delay_ms; // before each graph: DEV0 100, DEV1 10 (DEV0 is the slow one)
    pthread_t       thread;
};

static struct queue queues[FAKE_MAX_DEV];

static void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static float * f32(const struct ggml_tensor * t) {
    return (float *) t->data;
}

// The ops this device runs: SCALE, ADD of contiguous F32 tensors, CPY of F32 rows (either
// side may step over rows); views do nothing.
static void run_node(struct ggml_tensor * n) {
    int64_t k = ggml_nelements(n);
    switch (n->op) {
        case GGML_OP_SCALE: {
            float s;
            memcpy(&s, n->op_params, sizeof(s));
            for (int64_t i = 0; i < k; i++) f32(n)[i] = f32(n->src[0])[i] * s;
            break;
        }
        case GGML_OP_ADD:
            for (int64_t i = 0; i < k; i++) f32(n)[i] = f32(n->src[0])[i] + f32(n->src[1])[i];
            break;
        case GGML_OP_CPY: // F32 rows of ne[0] elements, each side through its own row stride
            for (int64_t r = 0; r < n->ne[1]; r++) {
                memcpy((char *) n->data + r * n->nb[1], (char *) n->src[0]->data + r * n->src[0]->nb[1],
                       (size_t) n->ne[0] * sizeof(float));
            }
            break;
        default:
            break;
    }
}

static void * worker(void * arg) {
    struct queue * q = arg;
    for (;;) {
        pthread_mutex_lock(&q->m);
        while (q->head == q->tail) pthread_cond_wait(&q->c, &q->m);
        struct job j = q->jobs[q->head % QMAX];
        q->busy      = true;
        q->head++;
        pthread_mutex_unlock(&q->m);
        switch (j.kind) {
            case JOB_GRAPH:
                sleep_ms(q->delay_ms);
                for (int i = 0; i < j.n_nodes; i++) run_node(j.nodes[i]);
                free(j.nodes);
                break;
            case JOB_SIGNAL:
                pthread_mutex_lock(&j.ev->m);
                if (j.seq > j.ev->done) j.ev->done = j.seq;
                pthread_cond_broadcast(&j.ev->c);
                pthread_mutex_unlock(&j.ev->m);
                break;
            case JOB_WAIT:
                pthread_mutex_lock(&j.ev->m);
                while (j.ev->done < j.seq) pthread_cond_wait(&j.ev->c, &j.ev->m);
                pthread_mutex_unlock(&j.ev->m);
                break;
        }
        pthread_mutex_lock(&q->m);
        q->busy = false;
        pthread_cond_broadcast(&q->c);
        pthread_mutex_unlock(&q->m);
    }
    return NULL;
}

static struct queue * queue_of(ggml_backend_t b) {
    return &queues[fake_dev_of_backend(b)->index];
}

static void push(struct queue * q, struct job j) {
    pthread_mutex_lock(&q->m);
    if (q->tail - q->head >= QMAX) {
        fprintf(stderr, "sanitize: queue full\n");
        abort();
    }
    q->jobs[q->tail % QMAX] = j;
    q->tail++;
    pthread_cond_broadcast(&q->c);
    pthread_mutex_unlock(&q->m);
}

static enum ggml_status async_graph_compute(ggml_backend_t b, struct ggml_cgraph * g) {
    int                   n     = ggml_graph_n_nodes(g);
    struct ggml_tensor ** nodes = malloc(sizeof(*nodes) * (size_t) (n > 0 ? n : 1));
    for (int i = 0; i < n; i++) nodes[i] = ggml_graph_node(g, i);
    push(queue_of(b), (struct job) { .kind = JOB_GRAPH, .nodes = nodes, .n_nodes = n });
    return GGML_STATUS_SUCCESS;
}

static void async_synchronize(ggml_backend_t b) {
    struct queue * q = queue_of(b);
    pthread_mutex_lock(&q->m);
    while (q->head != q->tail || q->busy) pthread_cond_wait(&q->c, &q->m);
    pthread_mutex_unlock(&q->m);
}

static void async_event_record(ggml_backend_t b, ggml_backend_event_t e) {
    struct event * ev = e->context;
    pthread_mutex_lock(&ev->m);
    uint64_t seq = ++ev->recorded;
    pthread_mutex_unlock(&ev->m);
    push(queue_of(b), (struct job) { .kind = JOB_SIGNAL, .ev = ev, .seq = seq });
}

static void async_event_wait(ggml_backend_t b, ggml_backend_event_t e) {
    struct event * ev = e->context;
    pthread_mutex_lock(&ev->m);
    uint64_t seq = ev->recorded;
    pthread_mutex_unlock(&ev->m);
    push(queue_of(b), (struct job) { .kind = JOB_WAIT, .ev = ev, .seq = seq });
}

static ggml_backend_event_t async_event_new(ggml_backend_dev_t dev) {
    struct ggml_backend_event * e  = calloc(1, sizeof(*e));
    struct event *              ev = calloc(1, sizeof(*ev));
    pthread_mutex_init(&ev->m, NULL);
    pthread_cond_init(&ev->c, NULL);
    e->device  = dev;
    e->context = ev;
    return e;
}

static void async_event_free(ggml_backend_dev_t dev, ggml_backend_event_t e) {
    (void) dev;
    free(e->context);
    free(e);
}

static void async_event_synchronize(ggml_backend_dev_t dev, ggml_backend_event_t e) {
    (void) dev;
    struct event * ev = e->context;
    pthread_mutex_lock(&ev->m);
    while (ev->done < ev->recorded) pthread_cond_wait(&ev->c, &ev->m);
    pthread_mutex_unlock(&ev->m);
}

// ---------------------------------------------------------------------------------------
// devices

static struct fake_reg reg;

static bool dev_ops(const struct fake_dev * d, const struct ggml_tensor * op) {
    (void) d;
    switch (op->op) {
        case GGML_OP_NONE: case GGML_OP_VIEW: case GGML_OP_RESHAPE: case GGML_OP_PERMUTE:
        case GGML_OP_TRANSPOSE: case GGML_OP_SCALE: case GGML_OP_ADD: case GGML_OP_CPY:
            return op->type == GGML_TYPE_F32;
        default:
            return false;
    }
}

// Its own memory, the other device's (peer access) and host memory.
static bool dev_bufts(const struct fake_dev * d, ggml_backend_buffer_type_t buft) {
    (void) d;
    return fake_dev_of_buft(&reg, buft) != NULL || ggml_backend_buft_is_host(buft);
}

static struct fake_dev * add_dev(const char * name) {
    struct fake_dev_desc desc = {
        .name          = name,
        .type          = GGML_BACKEND_DEVICE_TYPE_GPU,
        .alignment     = 64,
        .host          = false,
        .memory        = (size_t) 1 << 30,
        .alloc         = FAKE_ALLOC_HEAP,
        .supports_op   = dev_ops,
        .supports_buft = dev_bufts,
    };
    struct fake_dev * d              = fake_reg_add(&reg, &desc);
    d->backend.iface.graph_compute   = async_graph_compute;
    d->backend.iface.synchronize     = async_synchronize;
    d->backend.iface.event_record    = async_event_record;
    d->backend.iface.event_wait      = async_event_wait;
    d->dev.iface.event_new           = async_event_new;
    d->dev.iface.event_free          = async_event_free;
    d->dev.iface.event_synchronize   = async_event_synchronize;
    struct queue * q                 = &queues[d->index];
    pthread_mutex_init(&q->m, NULL);
    pthread_cond_init(&q->c, NULL);
    q->delay_ms = d->index == 0 ? 100 : 10;
    pthread_create(&q->thread, NULL, worker, q);
    return d;
}

// ---------------------------------------------------------------------------------------
// cases

static struct ggml_context * ctx_new(void) {
    struct ggml_init_params p = { .mem_size = 64 * ggml_tensor_overhead() + ggml_graph_overhead(),
                                  .mem_buffer = NULL, .no_alloc = true };
    return ggml_init(p);
}

static struct ggml_tensor * vec(struct ggml_context * ctx, const char * name) {
    struct ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N);
    ggml_set_name(t, name);
    return t;
}

static void fill(struct ggml_tensor * t, float v) {
    float buf[N];
    for (int i = 0; i < N; i++) buf[i] = v;
    ggml_backend_tensor_set(t, buf, 0, sizeof(buf));
}

static float first(const struct ggml_tensor * t) {
    float v;
    ggml_backend_tensor_get(t, &v, 0, sizeof(v));
    return v;
}

static struct ggml_cgraph * graph_of(struct ggml_context * ctx, struct ggml_tensor * out) {
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, out);
    return g;
}

static float copy_without_wait(struct fake_dev * d0, struct fake_dev * d1, bool fault) {
    ggml_backend_t       b0 = &d0->backend;
    struct ggml_context *c0 = ctx_new(), *c1 = ctx_new();
    struct ggml_tensor * x  = vec(c0, "x");
    struct ggml_tensor * y  = ggml_scale(c0, x, 3.0f);
    ggml_set_name(y, "y");
    struct ggml_tensor * y1 = vec(c1, "y_on_dev1");
    ggml_backend_alloc_ctx_tensors_from_buft(c0, &d0->buft);
    ggml_backend_alloc_ctx_tensors_from_buft(c1, &d1->buft);
    fill(x, 1.0f);
    fill(y, 0.0f);
    ggml_backend_event_t ev = ggml_backend_event_new(&d0->dev);
    ggml_backend_graph_compute_async(b0, graph_of(c0, y));
    ggml_backend_event_record(ev, b0);
    if (!fault) {
        ggml_backend_event_synchronize(ev);
    }
    ggml_backend_tensor_copy(y, y1);
    float v = first(y1);
    ggml_backend_synchronize(b0);
    ggml_backend_event_free(ev);
    return v;
}

static float event_before_work(struct fake_dev * d0, struct fake_dev * d1, bool fault) {
    ggml_backend_t       b0 = &d0->backend, b1 = &d1->backend;
    struct ggml_context *c0 = ctx_new(), *c1 = ctx_new(), *c2 = ctx_new();
    struct ggml_tensor * x  = vec(c0, "x");
    struct ggml_tensor * y  = ggml_scale(c0, x, 3.0f);
    ggml_set_name(y, "y");
    ggml_backend_buffer_t buf0 = ggml_backend_alloc_ctx_tensors_from_buft(c0, &d0->buft);
    // DEV1's graph reads y's memory through a leaf of its own (else it would compute y too).
    struct ggml_tensor * yl = vec(c2, "y_leaf");
    ggml_backend_tensor_alloc(buf0, yl, y->data);
    struct ggml_tensor * z = ggml_add(c1, yl, yl);
    ggml_set_name(z, "z");
    ggml_backend_alloc_ctx_tensors_from_buft(c1, &d1->buft);
    fill(x, 1.0f);
    fill(y, 0.0f);
    ggml_backend_event_t ev = ggml_backend_event_new(&d0->dev);
    if (fault) {
        ggml_backend_event_record(ev, b0); // before the work it should cover
    }
    ggml_backend_graph_compute_async(b0, graph_of(c0, y));
    if (!fault) {
        ggml_backend_event_record(ev, b0);
    }
    ggml_backend_event_wait(b1, ev);
    ggml_backend_graph_compute_async(b1, graph_of(c1, z));
    ggml_backend_synchronize(b1);
    ggml_backend_synchronize(b0);
    ggml_backend_event_free(ev);
    return first(z);
}

static float sched_inputless(struct fake_dev * d0) {
    ggml_backend_t       cpu = ggml_backend_cpu_init();
    struct ggml_context *ck = ctx_new(), *cg = ctx_new();
    struct ggml_tensor * kv     = vec(ck, "kv");
    struct ggml_tensor * kv_new = vec(ck, "kv_new");
    ggml_backend_buffer_t kvbuf = ggml_backend_alloc_ctx_tensors_from_buft(ck, ggml_backend_cpu_buffer_type());
    fill(kv, 1.0f);
    fill(kv_new, 5.0f);
    struct ggml_tensor * rd = ggml_scale(cg, kv, 2.0f);
    ggml_set_name(rd, "kv_read");
    ggml_set_output(rd);
    struct ggml_tensor * wr = ggml_cpy(cg, kv_new, kv);
    ggml_set_name(wr, "kv_write");
    struct ggml_cgraph * g = ggml_new_graph(cg);
    ggml_build_forward_expand(g, rd);
    ggml_build_forward_expand(g, wr);
    ggml_backend_t          backends[2] = { &d0->backend, cpu };
    ggml_backend_sched_t    s = ggml_backend_sched_new(backends, NULL, 2, 64, false, true);
    ggml_backend_sched_set_tensor_backend(s, rd, &d0->backend);
    ggml_backend_sched_set_tensor_backend(s, wr, cpu);
    if (!ggml_backend_sched_alloc_graph(s, g)) {
        fprintf(stderr, "sanitize: alloc_graph failed\n");
        exit(2);
    }
    printf("splits %d\n", ggml_backend_sched_get_n_splits(s));
    ggml_backend_sched_graph_compute(s, g);
    float v = first(rd);
    ggml_backend_sched_free(s);
    ggml_backend_buffer_free(kvbuf);
    ggml_backend_free(cpu);
    return v;
}

enum { ROWS = 8, COLS = 32 };

static float strided_rows(struct fake_dev * d0, bool fault) {
    ggml_backend_t       b0 = &d0->backend;
    struct ggml_context *c0 = ctx_new(), *c1 = ctx_new();
    struct ggml_tensor * x   = ggml_new_tensor_2d(c0, GGML_TYPE_F32, COLS, ROWS);
    struct ggml_tensor * src = ggml_new_tensor_2d(c0, GGML_TYPE_F32, COLS, ROWS / 2);
    ggml_set_name(x, "x");
    ggml_set_name(src, "src");
    ggml_backend_alloc_ctx_tensors_from_buft(c0, &d0->buft);
    struct ggml_tensor * even = ggml_view_2d(c1, x, COLS, ROWS / 2, 2 * x->nb[1], 0);
    ggml_set_name(even, "x_even_rows");
    struct ggml_tensor * w = ggml_cpy(c1, src, even);
    ggml_set_name(w, "write_even");
    float buf[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) buf[i] = 7.0f;
    ggml_backend_tensor_set(src, buf, 0, ggml_nbytes(src));
    for (int i = 0; i < ROWS * COLS; i++) buf[i] = 0.0f;
    ggml_backend_tensor_set(x, buf, 0, ggml_nbytes(x));
    ggml_backend_graph_compute_async(b0, graph_of(c1, w));
    const int row = fault ? 2 : 1;
    float     mine[COLS];
    for (int i = 0; i < COLS; i++) mine[i] = 9.0f;
    ggml_backend_tensor_set(x, mine, (size_t) row * x->nb[1], sizeof(mine));
    ggml_backend_synchronize(b0);
    ggml_backend_tensor_get(x, buf, 0, ggml_nbytes(x));
    for (int r = 0; r < ROWS; r++) {
        float expect = r == row ? 9.0f : (r % 2 == 0 ? 7.0f : 0.0f);
        if (!fault && buf[r * COLS] != expect) {
            return -1.0f; // DEV0 wrote a row it should not have
        }
    }
    return buf[row * COLS];
}

static float cpy_over_unordered(struct fake_dev * d0, struct fake_dev * d1, bool fault) {
    ggml_backend_t       b0 = &d0->backend, b1 = &d1->backend;
    struct ggml_context *c0 = ctx_new(), *c1 = ctx_new(), *c2 = ctx_new();
    struct ggml_tensor * x  = vec(c0, "x");
    struct ggml_tensor * y  = ggml_scale(c0, x, 3.0f);
    ggml_set_name(y, "y");
    ggml_backend_buffer_t buf0 = ggml_backend_alloc_ctx_tensors_from_buft(c0, &d0->buft);
    struct ggml_tensor * s  = vec(c1, "s");
    ggml_backend_alloc_ctx_tensors_from_buft(c1, &d1->buft);
    // DEV1's graph writes y's memory through a leaf of its own (else it would compute y too).
    struct ggml_tensor * yl = vec(c2, "y_leaf");
    ggml_backend_tensor_alloc(buf0, yl, y->data);
    struct ggml_tensor * w = ggml_cpy(c2, s, yl);
    ggml_set_name(w, "y_write");
    fill(x, 1.0f);
    fill(s, 5.0f);
    ggml_backend_event_t ev = ggml_backend_event_new(&d0->dev);
    ggml_backend_graph_compute_async(b0, graph_of(c0, y));
    ggml_backend_event_record(ev, b0);
    if (!fault) {
        ggml_backend_event_wait(b1, ev);
    }
    ggml_backend_graph_compute_async(b1, graph_of(c2, w));
    ggml_backend_synchronize(b1);
    ggml_backend_synchronize(b0);
    ggml_backend_event_free(ev);
    return first(y);
}

int main(int argc, char ** argv) {
    if (argc != 3 || (strcmp(argv[2], "on") && strcmp(argv[2], "off"))) {
        fprintf(stderr, "usage: %s copy-without-wait|event-before-work|sched-inputless|strided-rows|cpy-over-unordered on|off\n", argv[0]);
        return 2;
    }
    const char * c     = argv[1];
    bool         fault = !strcmp(argv[2], "on");
    fake_reg_init(&reg, "SANITIZE");
    struct fake_dev * d0 = add_dev("DEV0");
    struct fake_dev * d1 = add_dev("DEV1");
    float             v, want;
    if (!strcmp(c, "copy-without-wait")) {
        v = copy_without_wait(d0, d1, fault), want = 3.0f;
    } else if (!strcmp(c, "event-before-work")) {
        v = event_before_work(d0, d1, fault), want = 6.0f;
    } else if (!strcmp(c, "sched-inputless")) {
        v = sched_inputless(d0), want = 2.0f;
    } else if (!strcmp(c, "strided-rows")) {
        v = strided_rows(d0, fault), want = 9.0f;
    } else if (!strcmp(c, "cpy-over-unordered")) {
        v = cpy_over_unordered(d0, d1, fault), want = 5.0f;
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    printf("case %s fault %s: value %g (expected %g)\n", c, argv[2], (double) v, (double) want);
    fflush(stdout);
    return (!fault && v != want) ? 1 : 0;
}
