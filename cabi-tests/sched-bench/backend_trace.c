// backend-trace: an LD_PRELOAD library that records, inside an unchanged llama.cpp process,
// every call the scheduler makes into the backends during each llama_decode, with start and end
// times: graph_compute, synchronize, the async tensor copies and transfers, events, and the
// buffers' blocking set_tensor / get_tensor / cpy_tensor. Two arms (stock libggml-base and
// ours) traced this way show where one spends time the other does not: a call that lasts
// longer (the devices' work or a transfer), a call the other does not make, or a gap between
// calls (the library's own host code).
//
// Why not interpose the public ggml_backend_* functions: stock's libggml-base calls them
// through its dynamic symbol table, a Rust library calls its own code directly, so an
// LD_PRELOAD of those would see one arm's calls and not the other's. The function tables of
// the backends, devices and buffers are what both arms must call through, so this library
// patches those: at ggml_backend_sched_new (which libllama calls through the symbol table in
// both arms) it swaps the entries of each backend's `iface`, of its device's event
// functions, and of the buffer types the scheduler allocates from, so that every buffer made
// afterwards (the compute buffers) has its transfer functions swapped too. Each wrapper looks
// up the original entry by the object's pointer, calls it, and appends one record.
//
// llama_decode and llama_process (called by the program through the symbol table) mark the
// tokens: a record for the whole call, with its batch size (-1 when unknown); a token's
// cycle runs to the next decode, so llama_synchronize after it is in. At exit, when
// BACKEND_TRACE_OUT names a file, it writes one line per record: `decode N_TOKENS START
// LENGTH` opens a decode, then `KIND BACKEND T0 T1 ARG` for each call of its cycle (times in
// nanoseconds from the decode's start; ARG: bytes, nodes or 0). A process that never decodes
// (ggml-rpc-server, whose backends are patched at ggml_backend_dev_init) writes its records in
// absolute times instead, which the reader places against a client's decodes. cabi-tests/sched-bench/backend_trace.py sums the steady decodes and sets two
// arms side by side. Built against ggml's internal header ggml-backend-impl.h: a diagnostic
// for the pinned upstream, not an ABI promise.

#define _GNU_SOURCE
#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml-impl.h"
#include "llama.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum trace_kind {
    K_DECODE,
    K_GRAPH_COMPUTE,
    K_SYNCHRONIZE,
    K_SET_ASYNC,
    K_GET_ASYNC,
    K_CPY_ASYNC,
    K_EVENT_RECORD,
    K_EVENT_WAIT,
    K_EVENT_SYNC,
    K_BUF_SET,
    K_BUF_GET,
    K_BUF_CPY,
    K_SCHED_COMPUTE,
    K_SCHED_SYNC,
    K_LLAMA_SYNC,
    K_COUNT
};

static const char * const kind_name[K_COUNT] = {
    "decode",      "graph_compute", "synchronize", "set_async",   "get_async",
    "cpy_async",   "event_record",  "event_wait",  "event_sync",  "buf_set",
    "buf_get",     "buf_cpy",       "sched_compute_async", "sched_synchronize", "llama_synchronize",
};

struct trace_record {
    long long t0, t1;
    long long arg;
    int kind;
    int who; // backend slot, or -1 when the object maps to none
};

#define TRACE_MAX (1 << 20)
static struct trace_record g_records[TRACE_MAX];
static atomic_int g_n_records;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long) ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void add_record(int kind, int who, long long t0, long long t1, long long arg) {
    int i = atomic_fetch_add(&g_n_records, 1);
    if (i < TRACE_MAX) {
        g_records[i] = (struct trace_record){ t0, t1, arg, kind, who };
    }
}

// The backends seen, their original tables and their devices' (one slot each; a device
// shared by two backends keeps the first backend's slot).
#define MAX_SLOTS 16
static ggml_backend_t g_backends[MAX_SLOTS];
static struct ggml_backend_i g_backend_orig[MAX_SLOTS];
static char g_backend_name[MAX_SLOTS][64];
static int g_n_backends;

static ggml_backend_dev_t g_devs[MAX_SLOTS];
static struct ggml_backend_device_i g_dev_orig[MAX_SLOTS];
static int g_dev_slot[MAX_SLOTS];
static int g_n_devs;

static ggml_backend_buffer_type_t g_bufts[MAX_SLOTS];
static struct ggml_backend_buffer_type_i g_buft_orig[MAX_SLOTS];
static int g_buft_slot[MAX_SLOTS];
static int g_n_bufts;

// Buffers made by a patched buffer type share its functions, so the originals are kept per
// buffer type, found from buffer->buft.
static struct ggml_backend_buffer_i g_buffer_orig[MAX_SLOTS];
static int g_buffer_orig_set[MAX_SLOTS];

static int backend_slot(ggml_backend_t b) {
    for (int i = 0; i < g_n_backends; i++) {
        if (g_backends[i] == b) {
            return i;
        }
    }
    return -1;
}

static int dev_index(ggml_backend_dev_t d) {
    for (int i = 0; i < g_n_devs; i++) {
        if (g_devs[i] == d) {
            return i;
        }
    }
    return -1;
}

static int buft_index(ggml_backend_buffer_type_t t) {
    for (int i = 0; i < g_n_bufts; i++) {
        if (g_bufts[i] == t) {
            return i;
        }
    }
    return -1;
}

__attribute__((noreturn)) static void die_unknown(const char * what) {
    fprintf(stderr, "backend-trace: %s called on an object it did not patch\n", what);
    abort();
}

static const struct ggml_backend_i * orig_of(ggml_backend_t b) {
    int slot = backend_slot(b);
    if (slot < 0) {
        die_unknown("a backend function");
    }
    return &g_backend_orig[slot];
}

// ---- backend wrappers

static void w_set_tensor_async(ggml_backend_t b, struct ggml_tensor * t, const void * data, size_t off, size_t size) {
    long long t0 = now_ns();
    orig_of(b)->set_tensor_async(b, t, data, off, size);
    add_record(K_SET_ASYNC, backend_slot(b), t0, now_ns(), (long long) size);
}

static void w_get_tensor_async(ggml_backend_t b, const struct ggml_tensor * t, void * data, size_t off, size_t size) {
    long long t0 = now_ns();
    orig_of(b)->get_tensor_async(b, t, data, off, size);
    add_record(K_GET_ASYNC, backend_slot(b), t0, now_ns(), (long long) size);
}

static bool w_cpy_tensor_async(ggml_backend_t src_b, ggml_backend_t dst_b, const struct ggml_tensor * src,
                               struct ggml_tensor * dst) {
    long long t0 = now_ns();
    bool ok = orig_of(dst_b)->cpy_tensor_async(src_b, dst_b, src, dst);
    // a refused copy (the scheduler then copies through the host) is recorded with arg -1
    add_record(K_CPY_ASYNC, backend_slot(dst_b), t0, now_ns(), ok ? (long long) ggml_nbytes(src) : -1);
    return ok;
}

static void w_synchronize(ggml_backend_t b) {
    long long t0 = now_ns();
    orig_of(b)->synchronize(b);
    add_record(K_SYNCHRONIZE, backend_slot(b), t0, now_ns(), 0);
}

static void maybe_dump_graph(ggml_backend_t b, const struct ggml_cgraph * g);

static enum ggml_status w_graph_compute(ggml_backend_t b, struct ggml_cgraph * g) {
    maybe_dump_graph(b, g);
    long long t0 = now_ns();
    enum ggml_status s = orig_of(b)->graph_compute(b, g);
    add_record(K_GRAPH_COMPUTE, backend_slot(b), t0, now_ns(), ggml_graph_n_nodes(g));
    return s;
}

static void w_event_record(ggml_backend_t b, ggml_backend_event_t e) {
    long long t0 = now_ns();
    orig_of(b)->event_record(b, e);
    add_record(K_EVENT_RECORD, backend_slot(b), t0, now_ns(), 0);
}

static void w_event_wait(ggml_backend_t b, ggml_backend_event_t e) {
    long long t0 = now_ns();
    orig_of(b)->event_wait(b, e);
    add_record(K_EVENT_WAIT, backend_slot(b), t0, now_ns(), 0);
}

// ---- device wrapper

static void w_event_synchronize(ggml_backend_dev_t d, ggml_backend_event_t e) {
    int i = dev_index(d);
    if (i < 0) {
        die_unknown("event_synchronize");
    }
    long long t0 = now_ns();
    g_dev_orig[i].event_synchronize(d, e);
    add_record(K_EVENT_SYNC, g_dev_slot[i], t0, now_ns(), 0);
}

// ---- buffer wrappers

static const struct ggml_backend_buffer_i * buffer_orig(ggml_backend_buffer_t buf) {
    int i = buft_index(buf->buft);
    if (i < 0 || !g_buffer_orig_set[i]) {
        die_unknown("a buffer function");
    }
    return &g_buffer_orig[i];
}

static int buffer_slot(ggml_backend_buffer_t buf) {
    int i = buft_index(buf->buft);
    return i < 0 ? -1 : g_buft_slot[i];
}

static void w_buf_set_tensor(ggml_backend_buffer_t buf, struct ggml_tensor * t, const void * data, size_t off, size_t size) {
    long long t0 = now_ns();
    buffer_orig(buf)->set_tensor(buf, t, data, off, size);
    add_record(K_BUF_SET, buffer_slot(buf), t0, now_ns(), (long long) size);
}

static void w_buf_get_tensor(ggml_backend_buffer_t buf, const struct ggml_tensor * t, void * data, size_t off, size_t size) {
    long long t0 = now_ns();
    buffer_orig(buf)->get_tensor(buf, t, data, off, size);
    add_record(K_BUF_GET, buffer_slot(buf), t0, now_ns(), (long long) size);
}

static bool w_buf_cpy_tensor(ggml_backend_buffer_t buf, const struct ggml_tensor * src, struct ggml_tensor * dst) {
    long long t0 = now_ns();
    bool ok = buffer_orig(buf)->cpy_tensor(buf, src, dst);
    add_record(K_BUF_CPY, buffer_slot(buf), t0, now_ns(), ok ? (long long) ggml_nbytes(src) : -1);
    return ok;
}

static ggml_backend_buffer_t w_alloc_buffer(ggml_backend_buffer_type_t t, size_t size) {
    int i = buft_index(t);
    if (i < 0) {
        die_unknown("alloc_buffer");
    }
    ggml_backend_buffer_t buf = g_buft_orig[i].alloc_buffer(t, size);
    if (buf != NULL && buf->buft == t) {
        if (!g_buffer_orig_set[i]) {
            g_buffer_orig[i] = buf->iface;
            g_buffer_orig_set[i] = 1;
        }
        if (buf->iface.set_tensor) {
            buf->iface.set_tensor = w_buf_set_tensor;
        }
        if (buf->iface.get_tensor) {
            buf->iface.get_tensor = w_buf_get_tensor;
        }
        if (buf->iface.cpy_tensor) {
            buf->iface.cpy_tensor = w_buf_cpy_tensor;
        }
    }
    return buf;
}

// ---- patching

static void patch_buft(ggml_backend_buffer_type_t t, int slot) {
    if (t == NULL || buft_index(t) >= 0 || g_n_bufts == MAX_SLOTS) {
        return;
    }
    g_bufts[g_n_bufts] = t;
    g_buft_orig[g_n_bufts] = t->iface;
    g_buft_slot[g_n_bufts] = slot;
    g_n_bufts++;
    t->iface.alloc_buffer = w_alloc_buffer;
}

static void patch_backend(ggml_backend_t b, ggml_backend_buffer_type_t buft) {
    if (b == NULL) {
        return;
    }
    int slot = backend_slot(b);
    // a backend freed and another made at the same address is patched again
    if (slot < 0 || b->iface.graph_compute != w_graph_compute) {
        if (slot < 0) {
            if (g_n_backends == MAX_SLOTS) {
                return;
            }
            slot = g_n_backends++;
        }
        g_backends[slot] = b;
        g_backend_orig[slot] = b->iface;
        snprintf(g_backend_name[slot], sizeof(g_backend_name[slot]), "%s", b->iface.get_name(b));
        struct ggml_backend_i * f = &b->iface;
        if (f->set_tensor_async) f->set_tensor_async = w_set_tensor_async;
        if (f->get_tensor_async) f->get_tensor_async = w_get_tensor_async;
        if (f->cpy_tensor_async) f->cpy_tensor_async = w_cpy_tensor_async;
        if (f->synchronize) f->synchronize = w_synchronize;
        f->graph_compute = w_graph_compute;
        if (f->event_record) f->event_record = w_event_record;
        if (f->event_wait) f->event_wait = w_event_wait;

        ggml_backend_dev_t d = b->device;
        if (d != NULL && dev_index(d) < 0 && g_n_devs < MAX_SLOTS) {
            g_devs[g_n_devs] = d;
            g_dev_orig[g_n_devs] = d->iface;
            g_dev_slot[g_n_devs] = slot;
            g_n_devs++;
            if (d->iface.event_synchronize) {
                d->iface.event_synchronize = w_event_synchronize;
            }
        }
    }
    patch_buft(buft != NULL ? buft : ggml_backend_get_default_buffer_type(b), slot);
}

ggml_backend_sched_t ggml_backend_sched_new(ggml_backend_t * backends, ggml_backend_buffer_type_t * bufts, int n_backends,
                                            size_t graph_size, bool parallel, bool op_offload) {
    static ggml_backend_sched_t (*next)(ggml_backend_t *, ggml_backend_buffer_type_t *, int, size_t, bool, bool);
    if (next == NULL) {
        next = dlsym(RTLD_NEXT, "ggml_backend_sched_new");
    }
    for (int i = 0; i < n_backends; i++) {
        patch_backend(backends[i], bufts != NULL ? bufts[i] : NULL);
    }
    return next(backends, bufts, n_backends, graph_size, parallel, op_offload);
}

// ---- markers

static void record_outer(int kind, long long t0, long long arg) {
    add_record(kind, -1, t0, now_ns(), arg);
}

int32_t llama_decode(struct llama_context * ctx, struct llama_batch batch) {
    static int32_t (*next)(struct llama_context *, struct llama_batch);
    if (next == NULL) {
        next = dlsym(RTLD_NEXT, "llama_decode");
    }
    long long t0 = now_ns();
    int32_t r = next(ctx, batch);
    record_outer(K_DECODE, t0, batch.n_tokens);
    return r;
}

// The pinned tree's tools (llama-bench, llama-completion) decode through llama_process; its
// batch's token count is not public, so the record carries -1 (the reader keys such a decode
// by the node count of its first graph).
int32_t llama_process(struct llama_context * ctx, enum llama_process_type type, struct llama_batch_ext * batch) {
    static int32_t (*next)(struct llama_context *, enum llama_process_type, struct llama_batch_ext *);
    if (next == NULL) {
        next = dlsym(RTLD_NEXT, "llama_process");
    }
    long long t0 = now_ns();
    int32_t r = next(ctx, type, batch);
    record_outer(K_DECODE, t0, -1);
    return r;
}

enum ggml_status ggml_backend_sched_graph_compute_async(ggml_backend_sched_t sched, struct ggml_cgraph * graph) {
    static enum ggml_status (*next)(ggml_backend_sched_t, struct ggml_cgraph *);
    if (next == NULL) {
        next = dlsym(RTLD_NEXT, "ggml_backend_sched_graph_compute_async");
    }
    long long t0 = now_ns();
    enum ggml_status s = next(sched, graph);
    record_outer(K_SCHED_COMPUTE, t0, ggml_graph_n_nodes(graph));
    return s;
}

void ggml_backend_sched_synchronize(ggml_backend_sched_t sched) {
    static void (*next)(ggml_backend_sched_t);
    if (next == NULL) {
        next = dlsym(RTLD_NEXT, "ggml_backend_sched_synchronize");
    }
    long long t0 = now_ns();
    next(sched);
    record_outer(K_SCHED_SYNC, t0, 0);
}

void llama_synchronize(struct llama_context * ctx) {
    static void (*next)(struct llama_context *);
    if (next == NULL) {
        next = dlsym(RTLD_NEXT, "llama_synchronize");
    }
    long long t0 = now_ns();
    next(ctx);
    record_outer(K_LLAMA_SYNC, t0, 0);
}

// A process without a scheduler (ggml-rpc-server) makes its backends here, through the
// symbol table: they are patched as the scheduler's are, with their devices' buffer types.
ggml_backend_t ggml_backend_dev_init(ggml_backend_dev_t device, const char * params) {
    static ggml_backend_t (*next)(ggml_backend_dev_t, const char *);
    if (next == NULL) {
        next = dlsym(RTLD_NEXT, "ggml_backend_dev_init");
    }
    ggml_backend_t b = next(device, params);
    patch_backend(b, NULL);
    return b;
}

// ---- output

static int by_start(const void * a, const void * b) {
    const struct trace_record * x = a, * y = b;
    return (x->t0 > y->t0) - (x->t0 < y->t0);
}

static void write_trace(void);

// A server is stopped with SIGTERM, which skips the destructors. A signal handler may not
// write files (it could interrupt a malloc), so SIGTERM is blocked in every thread (threads
// inherit the mask of the one that made them, and this runs before the program's code) and
// one thread of ours waits for it with sigwait, writes the trace and ends the process.
static void * wait_for_term(void * arg) {
    sigset_t * set = arg;
    int sig = 0;
    if (sigwait(set, &sig) == 0) {
        write_trace();
        _exit(128 + sig);
    }
    return NULL;
}

__attribute__((constructor)) static void catch_term(void) {
    const char * path = getenv("BACKEND_TRACE_OUT");
    if (path == NULL || *path == '\0') {
        return;
    }
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_t t;
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) == 0 && pthread_create(&t, NULL, wait_for_term, &set) == 0) {
        pthread_detach(t);
    }
}

__attribute__((destructor)) static void write_trace(void) {
    static int written;
    if (written++) {
        return;
    }
    const char * path = getenv("BACKEND_TRACE_OUT");
    if (path == NULL || *path == '\0') {
        return;
    }
    FILE * f = fopen(path, "a");
    if (f == NULL) {
        fprintf(stderr, "backend-trace: cannot open %s\n", path);
        return;
    }
    int n = atomic_load(&g_n_records);
    if (n > TRACE_MAX) {
        fprintf(stderr, "backend-trace: %d records, the first %d kept\n", n, TRACE_MAX);
        n = TRACE_MAX;
    }
    qsort(g_records, (size_t) n, sizeof(g_records[0]), by_start);
    fprintf(f, "process %d backends", (int) getpid());
    for (int i = 0; i < g_n_backends; i++) {
        fprintf(f, " %d=%s", i, g_backend_name[i]);
    }
    fprintf(f, "\n");
    // Each decode (`decode N_TOKENS ABS_START LENGTH`), then the records that start inside its
    // cycle (from its start to the next decode's, so the program's own synchronize after
    // the decode is in), relative to its start: sorted by start, a decode comes before every
    // call made inside it. A process without decodes (a server) writes every record as
    // `at KIND BACKEND T0 T1 ARG` in absolute times (CLOCK_MONOTONIC, shared by the
    // processes of one machine), for a reader to place against a client's decodes.
    int n_decodes = 0;
    for (int i = 0; i < n; i++) {
        const struct trace_record * d = &g_records[i];
        if (d->kind != K_DECODE) {
            continue;
        }
        n_decodes++;
        int next = i + 1;
        while (next < n && g_records[next].kind != K_DECODE) {
            next++;
        }
        fprintf(f, "decode %lld %lld %lld\n", d->arg, d->t0, d->t1 - d->t0);
        for (int j = i + 1; j < next; j++) {
            const struct trace_record * r = &g_records[j];
            fprintf(f, "%s %d %lld %lld %lld\n", kind_name[r->kind], r->who, r->t0 - d->t0, r->t1 - d->t0, r->arg);
        }
    }
    if (n_decodes == 0) {
        for (int i = 0; i < n; i++) {
            const struct trace_record * r = &g_records[i];
            fprintf(f, "at %s %d %lld %lld %lld\n", kind_name[r->kind], r->who, r->t0, r->t1, r->arg);
        }
    }
    fclose(f);
}

// ---- graphs (BACKEND_TRACE_GRAPHS=FILE): each distinct graph a backend is asked to compute
// through ggml_backend_graph_compute (as ggml-rpc-server does for the graphs a client sends),
// written once, after a line naming its node count and backend: per node its op, flags, use
// count, shape and sources (as node indexes, or `x=OP@PLACE` for tensors from outside the
// graph), and its data offset in its buffer. Two clients' graphs, received by the same
// server, can then be compared line by line: what a backend may fuse depends on exactly these.

static int node_index(const struct ggml_cgraph * g, const struct ggml_tensor * t) {
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i] == t) {
            return i;
        }
    }
    return -1;
}

// A small number for each buffer a graph's tensors live in, in order of first sight (-1 past
// the 1024th, which no llama.cpp graph comes near).
static int buffer_number(const void ** seen, int * n_seen, const void * buffer) {
    for (int i = 0; i < *n_seen; i++) {
        if (seen[i] == buffer) {
            return i;
        }
    }
    if (*n_seen == 1024) {
        return -1;
    }
    seen[*n_seen] = buffer;
    return (*n_seen)++;
}

// `BUFFER:OFFSET+BYTES` of a tensor's data, or `-` without.
static void print_place(FILE * f, const void ** seen, int * n_seen, const struct ggml_tensor * t) {
    if (t->buffer == NULL || t->data == NULL) {
        fprintf(f, "-");
        return;
    }
    long long off = (long long) ((const char *) t->data - (const char *) ggml_backend_buffer_get_base(t->buffer));
    // the bytes the buffer type allots it (ggml-cuda's fusion check compares these, which
    // exceed ggml_nbytes for some quantized rows and attention with a quantized cache)
    fprintf(f, "%d:%lld+%zu", buffer_number(seen, n_seen, t->buffer), off,
            ggml_backend_buffer_get_alloc_size(t->buffer, t));
}

static void dump_graph(FILE * f, ggml_backend_t b, const struct ggml_cgraph * g) {
    const void * seen[1024];
    int n_seen = 0;
    fprintf(f, "graph %d nodes on %s\n", g->n_nodes, ggml_backend_name(b));
    for (int i = 0; i < g->n_nodes; i++) {
        const struct ggml_tensor * t = g->nodes[i];
        size_t h = ggml_hash_find(&g->visited_hash_set, t);
        int uses = (h != GGML_HASHSET_FULL && ggml_bitset_get(g->visited_hash_set.used, h)) ? g->use_counts[h] : -1;
        fprintf(f, "%d %s flags %d uses %d ne %lld,%lld,%lld,%lld view %d at ", i, ggml_op_desc(t), t->flags, uses,
                (long long) t->ne[0], (long long) t->ne[1], (long long) t->ne[2], (long long) t->ne[3],
                t->view_src != NULL ? node_index(g, t->view_src) : -2);
        print_place(f, seen, &n_seen, t);
        fprintf(f, " src");
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            if (t->src[j] != NULL) {
                int k = node_index(g, t->src[j]);
                if (k >= 0) {
                    fprintf(f, " %d", k);
                } else {
                    // its op too: ggml-cuda's fusion check skips sources of op NONE
                    fprintf(f, " x=%s@", ggml_op_desc(t->src[j]));
                    print_place(f, seen, &n_seen, t->src[j]);
                }
            }
        }
        fprintf(f, "\n");
    }
}

// A graph's identity for the dump: its node count and a hash of every node's address, data
// address, shape and sources (a server rebuilds each graph in the same memory, so the first
// node's address alone would not tell a changed graph, and llama.cpp builds graphs of other
// batch sizes there too).
static unsigned long long graph_hash(const struct ggml_cgraph * g) {
    unsigned long long h = 1469598103934665603ULL ^ (unsigned long long) g->n_nodes;
    for (int i = 0; i < g->n_nodes; i++) {
        const struct ggml_tensor * t = g->nodes[i];
        unsigned long long v[6 + GGML_MAX_SRC] = { (unsigned long long) (uintptr_t) t, (unsigned long long) (uintptr_t) t->data };
        for (int j = 0; j < 4; j++) {
            v[2 + j] = (unsigned long long) t->ne[j];
        }
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            v[6 + j] = (unsigned long long) (uintptr_t) t->src[j];
        }
        for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
            h = (h ^ v[k]) * 1099511628211ULL;
        }
    }
    return h;
}

// Writes `g` to BACKEND_TRACE_GRAPHS unless a graph with the same hash was written (the
// first 4096 distinct graphs are remembered): once per distinct graph in a steady loop.
static void maybe_dump_graph(ggml_backend_t b, const struct ggml_cgraph * g) {
    static unsigned long long seen[4096];
    static int n_seen;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    const char * path = getenv("BACKEND_TRACE_GRAPHS");
    if (path == NULL || *path == '\0' || g->n_nodes == 0) {
        return;
    }
    unsigned long long h = graph_hash(g);
    pthread_mutex_lock(&lock);
    int known = 0;
    for (int i = 0; i < n_seen && !known; i++) {
        known = seen[i] == h;
    }
    if (!known) {
        if (n_seen < 4096) {
            seen[n_seen++] = h;
        }
        FILE * f = fopen(path, "a");
        if (f != NULL) {
            dump_graph(f, b, g);
            fclose(f);
        }
    }
    pthread_mutex_unlock(&lock);
}

enum ggml_status ggml_backend_graph_compute(ggml_backend_t backend, struct ggml_cgraph * cgraph) {
    static enum ggml_status (*next)(ggml_backend_t, struct ggml_cgraph *);
    if (next == NULL) {
        next = dlsym(RTLD_NEXT, "ggml_backend_graph_compute");
    }
    maybe_dump_graph(backend, cgraph);
    return next(backend, cgraph);
}
