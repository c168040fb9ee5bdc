// sched-probe: an LD_PRELOAD library that times the scheduler inside an unchanged llama.cpp
// process (llama-bench, test-llama-archs). It defines ggml_backend_sched_alloc_graph and
// ggml_backend_sched_reserve, which the process's calls into libggml-base resolve to first;
// each forwards to the next definition (the arm's libggml-base) and adds up the time spent.
//
// It also times ggml_backend_sched_reset: llama.cpp resets the scheduler itself before it builds
// a graph, so the reset's cost (stock clears its hash tables there) is outside alloc_graph.
// And ggml_backend_sched_graph_compute_async (the host's part of a compute: CPU splits, the
// blocking input copies, queueing the device's work) and ggml_backend_sched_synchronize (the
// wait for the devices), whose sum is about the whole decode: where a difference between two
// arms lies, host or device.
//
// Only the application's own calls are counted: a call made while one of these functions is
// already running on the thread is forwarded untimed. Stock's libggml-base calls itself
// through its dynamic symbol table (its reserve calls synchronize and reset, its
// graph_compute calls graph_compute_async and synchronize, its sched_new ends in a reset,
// which is why sched_new is wrapped too), so this probe saw those inner calls in stock's
// arm and never in ours, whose Rust code calls itself directly. Counted, they added a
// near-empty synchronize per reserve to stock's arm only: 3 of 392 calls in a
// llama-batched-bench process, which made stock's mean wait per call 0.8 % shorter than
// ours with the same device time (bench.md, 2026-12-06).
//
// At exit it appends one JSON line to the file named by SCHED_PROBE_OUT (nothing when unset):
// the library the calls went to, and per function the calls, total nanoseconds and total
// graph nodes (0 for reset). For graph_compute_async and synchronize it also lists each
// call's nanoseconds (the first PROBE_MAX_EACH calls), so that a reader can set a process's
// first computes (warm-up, CUDA graph capture) apart from its steady ones: a mean over all
// calls says nothing about the steady ones when one warm-up call costs tens of milliseconds.
// For alloc_graph it lists each call's nanoseconds and minor page faults (on the calling
// thread, read just before and after the timed span, so that neither the getrusage calls'
// time nor the probe's own first writes to its arrays count): with graph reuse on,
// llama.cpp makes a few calls, each the first of its graph, and which of them is slow, and
// whether fresh memory made it so, is what tells two arms' first calls apart.
//
// llama.cpp calls alloc_graph itself before each compute, so its calls are all seen.
//
// sched_probe_read() hands the counters to a program that wants them mid-run (archs_cycle.c),
// with the node, backend and split counts of the last alloc_graph call and, when
// SCHED_PROBE_HASH is set, a hash of the placement of every node of that graph (taken after
// the call returns, outside the timed span). The layout is sched_probe.h.

#define _GNU_SOURCE
#include "ggml-backend.h"
#include "ggml.h"
#include "sched_probe.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

struct probe_counter {
    long long calls;
    long long ns;
    long long nodes;
};

static struct probe_counter g_alloc, g_reserve, g_reset, g_compute, g_sync;

// How many of the probed functions this thread is inside: a call at depth > 0 is the
// library calling itself, forwarded untimed and uncounted.
static __thread int g_depth;

// Each call's nanoseconds, for compute, synchronize and alloc_graph, and alloc_graph's page
// faults (bounded: a long run keeps its first).
#define PROBE_MAX_EACH 8192
static long long g_compute_each[PROBE_MAX_EACH], g_sync_each[PROBE_MAX_EACH], g_alloc_each[PROBE_MAX_EACH];
// Each alloc_graph call's minor page faults (first touches of fresh memory), on its thread.
static long long g_alloc_faults_each[PROBE_MAX_EACH];

static long long thread_minor_faults(void) {
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) == 0 ? (long long) ru.ru_minflt : 0;
}

static void keep_each(long long * each, long long calls_before, long long ns) {
    if (calls_before < PROBE_MAX_EACH) {
        each[calls_before] = ns;
    }
}

// ,"NAME":[n0,n1,...] for the first min(calls, PROBE_MAX_EACH) calls.
static void print_each(FILE * f, const char * name, const long long * each, long long calls) {
    const long long n = calls < PROBE_MAX_EACH ? calls : PROBE_MAX_EACH;
    fprintf(f, ",\"%s\":[", name);
    for (long long i = 0; i < n; i++) {
        fprintf(f, i ? ",%lld" : "%lld", each[i]);
    }
    fputc(']', f);
}
static struct probe_snapshot g_last;
static int                   g_hash = -1;  // SCHED_PROBE_HASH set: 1; unset: 0; not read yet: -1

void sched_probe_read(struct probe_snapshot * out, unsigned long size);

// `size` is the caller's sizeof(struct probe_snapshot): a caller built against another layout
// is refused instead of written past.
void sched_probe_read(struct probe_snapshot * out, unsigned long size) {
    if (size != sizeof(struct probe_snapshot)) {
        fprintf(stderr, "sched-probe: sched_probe_read called with a %lu-byte snapshot, expected %lu\n", size,
                (unsigned long) sizeof(struct probe_snapshot));
        abort();
    }
    *out             = g_last;
    out->calls       = g_alloc.calls;
    out->ns          = g_alloc.ns;
    out->reset_calls = g_reset.calls;
    out->reset_ns    = g_reset.ns;
}

// The placement of every node after an alloc_graph, hashed (outside the timed span).
static unsigned long long placement_hash(ggml_backend_sched_t sched, struct ggml_cgraph * graph) {
    unsigned long long h          = 1469598103934665603ULL;
    const int          n_backends = ggml_backend_sched_get_n_backends(sched);
    for (int i = 0; i < ggml_graph_n_nodes(graph); i++) {
        ggml_backend_t b   = ggml_backend_sched_get_tensor_backend(sched, ggml_graph_node(graph, i));
        int            idx = -1;
        for (int k = 0; k < n_backends; k++) {
            if (ggml_backend_sched_get_backend(sched, k) == b) {
                idx = k;
                break;
            }
        }
        h = (h ^ (unsigned long long) (idx + 1)) * 1099511628211ULL;
    }
    return h;
}

// The next definition of `name` (the arm's libggml-base), as an object pointer; aborts when
// there is none. Callers turn it into their function type through a union (ISO C has no cast
// between object and function pointers).
static void * next_sym(const char * name) {
    void * obj = dlsym(RTLD_NEXT, name);
    if (!obj) {
        fprintf(stderr, "sched-probe: %s not found after the probe\n", name);
        abort();
    }
    return obj;
}

typedef bool (*sched_graph_fn)(ggml_backend_sched_t, struct ggml_cgraph *);

static sched_graph_fn next_fn(const char * name) {
    union {
        void *         obj;
        sched_graph_fn fn;
    } u = { next_sym(name) };
    return u.fn;
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long) ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// `each`: where to keep this call's nanoseconds, `faults_each` its thread's minor page faults
// (NULL: kept only in the sum / not counted). The faults are read around the forwarded call
// alone: the probe's own first writes to its arrays are not the library's.
static bool timed(struct probe_counter * c, long long * each, long long * faults_each, sched_graph_fn fn,
                  ggml_backend_sched_t sched, struct ggml_cgraph * graph) {
    const long long faults0 = faults_each ? thread_minor_faults() : 0;
    const long long t0      = now_ns();
    g_depth++;
    const bool ok = fn(sched, graph);
    g_depth--;
    const long long dt = now_ns() - t0;
    if (faults_each) {
        keep_each(faults_each, c->calls, thread_minor_faults() - faults0);
    }
    if (each) {
        keep_each(each, c->calls, dt);
    }
    c->ns += dt;
    c->calls++;
    c->nodes += ggml_graph_n_nodes(graph);
    return ok;
}

bool ggml_backend_sched_alloc_graph(ggml_backend_sched_t sched, struct ggml_cgraph * graph) {
    static sched_graph_fn fn;
    if (!fn) {
        fn = next_fn("ggml_backend_sched_alloc_graph");
    }
    if (g_depth > 0) {
        return fn(sched, graph);
    }
    const bool ok        = timed(&g_alloc, g_alloc_each, g_alloc_faults_each, fn, sched, graph);
    g_last.last_nodes    = ggml_graph_n_nodes(graph);
    g_last.last_backends = ggml_backend_sched_get_n_backends(sched);
    g_last.last_splits   = ggml_backend_sched_get_n_splits(sched);
    if (g_hash < 0) {
        g_hash = getenv("SCHED_PROBE_HASH") != NULL;
    }
    g_last.last_placement_hash = g_hash && ok ? placement_hash(sched, graph) : 0;
    for (int k = 0; k < 4; k++) {
        g_last.last_buffer_bytes[k] =
            g_hash && ok && k < g_last.last_backends ?
                (long long) ggml_backend_sched_get_buffer_size(sched, ggml_backend_sched_get_backend(sched, k)) :
                0;
    }
    return ok;
}

typedef void (*sched_reset_fn)(ggml_backend_sched_t);

// Not timed: only marks its inner calls (stock's ends in a reset through the symbol table).
typedef ggml_backend_sched_t (*sched_new_fn)(ggml_backend_t *, ggml_backend_buffer_type_t *, int, size_t, bool, bool);

ggml_backend_sched_t ggml_backend_sched_new(ggml_backend_t * backends, ggml_backend_buffer_type_t * bufts,
                                            int n_backends, size_t graph_size, bool parallel, bool op_offload) {
    static sched_new_fn fn;
    if (!fn) {
        union {
            void *       obj;
            sched_new_fn fn;
        } u = { next_sym("ggml_backend_sched_new") };
        fn = u.fn;
    }
    g_depth++;
    ggml_backend_sched_t sched = fn(backends, bufts, n_backends, graph_size, parallel, op_offload);
    g_depth--;
    return sched;
}

void ggml_backend_sched_reset(ggml_backend_sched_t sched) {
    static sched_reset_fn fn;
    if (!fn) {
        union {
            void *         obj;
            sched_reset_fn fn;
        } u = { next_sym("ggml_backend_sched_reset") };
        fn = u.fn;
    }
    if (g_depth > 0) {
        fn(sched);
        return;
    }
    const long long t0 = now_ns();
    g_depth++;
    fn(sched);
    g_depth--;
    g_reset.ns += now_ns() - t0;
    g_reset.calls++;
}

bool ggml_backend_sched_reserve(ggml_backend_sched_t sched, struct ggml_cgraph * graph) {
    static sched_graph_fn fn;
    if (!fn) {
        fn = next_fn("ggml_backend_sched_reserve");
    }
    if (g_depth > 0) {
        return fn(sched, graph);
    }
    return timed(&g_reserve, NULL, NULL, fn, sched, graph);
}

typedef enum ggml_status (*sched_compute_fn)(ggml_backend_sched_t, struct ggml_cgraph *);

enum ggml_status ggml_backend_sched_graph_compute_async(ggml_backend_sched_t sched, struct ggml_cgraph * graph) {
    static sched_compute_fn fn;
    if (!fn) {
        union {
            void *           obj;
            sched_compute_fn fn;
        } u = { next_sym("ggml_backend_sched_graph_compute_async") };
        fn = u.fn;
    }
    if (g_depth > 0) {
        return fn(sched, graph);
    }
    const long long t0 = now_ns();
    g_depth++;
    const enum ggml_status st = fn(sched, graph);
    g_depth--;
    const long long dt = now_ns() - t0;
    keep_each(g_compute_each, g_compute.calls, dt);
    g_compute.ns += dt;
    g_compute.calls++;
    g_compute.nodes += ggml_graph_n_nodes(graph);
    return st;
}

void ggml_backend_sched_synchronize(ggml_backend_sched_t sched) {
    static sched_reset_fn fn;
    if (!fn) {
        union {
            void *         obj;
            sched_reset_fn fn;
        } u = { next_sym("ggml_backend_sched_synchronize") };
        fn = u.fn;
    }
    if (g_depth > 0) {
        fn(sched);
        return;
    }
    const long long t0 = now_ns();
    g_depth++;
    fn(sched);
    g_depth--;
    const long long dt = now_ns() - t0;
    keep_each(g_sync_each, g_sync.calls, dt);
    g_sync.ns += dt;
    g_sync.calls++;
}

__attribute__((destructor)) static void probe_report(void) {
    const char * path = getenv("SCHED_PROBE_OUT");
    if (!path) {
        return;
    }
    // Not a ggml process (a wrapper such as `timeout` inherits LD_PRELOAD too): no line.
    Dl_info info = { 0 };
    char    lib[4096];
    void *  next = dlsym(RTLD_NEXT, "ggml_backend_sched_alloc_graph");
    if (!next || !dladdr(next, &info) || !info.dli_fname) {
        return;
    }
    if (!realpath(info.dli_fname, lib)) {
        snprintf(lib, sizeof(lib), "%s", info.dli_fname);
    }
    FILE * f = fopen(path, "a");
    if (!f) {
        return;
    }
    fprintf(f,
            "{\"lib\":\"%s\",\"alloc_graph\":{\"calls\":%lld,\"ns\":%lld,\"nodes\":%lld},"
            "\"reserve\":{\"calls\":%lld,\"ns\":%lld,\"nodes\":%lld},"
            "\"reset\":{\"calls\":%lld,\"ns\":%lld,\"nodes\":0},"
            "\"compute\":{\"calls\":%lld,\"ns\":%lld,\"nodes\":%lld},"
            "\"synchronize\":{\"calls\":%lld,\"ns\":%lld,\"nodes\":0}",
            lib, g_alloc.calls, g_alloc.ns, g_alloc.nodes, g_reserve.calls, g_reserve.ns, g_reserve.nodes, g_reset.calls,
            g_reset.ns, g_compute.calls, g_compute.ns, g_compute.nodes, g_sync.calls, g_sync.ns);
    print_each(f, "alloc_graph_each_ns", g_alloc_each, g_alloc.calls);
    print_each(f, "alloc_graph_each_faults", g_alloc_faults_each, g_alloc.calls);
    print_each(f, "compute_each_ns", g_compute_each, g_compute.calls);
    print_each(f, "synchronize_each_ns", g_sync_each, g_sync.calls);
    fputs("}\n", f);
    fclose(f);
}
