// structure-count: an LD_PRELOAD library that counts, inside an unchanged llama.cpp process,
// how many of the graphs given to ggml_backend_sched_alloc_graph have the structure of a graph
// the scheduler was given before (by reserve or alloc_graph): the same leafs and nodes, position
// for position, with the same op, type, flags, buffer, storage address, view offset and op
// parameters, and sources and view sources that are the same positions (or the same tensor
// outside the graph), whatever their shapes (`ne`, `nb`) and wherever the graph was built.
// Such a graph could be placed by a replay by structure (docs/alloc.md, "How far a first call
// can go"); this measures how often one would apply. Nothing is changed: each call is
// forwarded to the next definition (the arm's libggml-base) after the graph is recorded.
//
// At exit, when STRUCTURE_COUNT_OUT names a file, it appends one line: the alloc_graph calls,
// and how many were, against the last STRUCT_KEEP graphs: equal in full (shapes included) to
// one, equal in structure to one but not in full, equal in structure only when op parameters
// are left out, or none of these; and how many of the full and structural matches were built
// in the memory of the graph they match. Built against ggml's public headers only:
//
//   cc -O2 -fPIC -shared -I<llama.cpp>/ggml/include -o libstructure-count.so
//      cabi-tests/sched-bench/structure_count.c -ldl
//   LD_PRELOAD=$PWD/libstructure-count.so STRUCTURE_COUNT_OUT=counts.jsonl llama-bench ...
//
// The graph's leaf array has no public accessor, so leafs are taken as the sources and view
// sources of nodes that are not nodes themselves, in first-use order (the same rule for
// every graph, so positions compare).

#define _GNU_SOURCE
#include "ggml-backend.h"
#include "ggml.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STRUCT_KEEP 16

// One tensor of a recorded graph. Positions: nodes first, then leafs; -1 for NULL, -2 for a
// tensor outside the graph (then `outside` holds its address, compared as is).
struct rec_tensor {
    int32_t  op, type, flags, n_src;
    int32_t  src[GGML_MAX_SRC];
    int32_t  view_src;
    void *   outside[GGML_MAX_SRC + 1];
    void *   buffer;
    void *   data;  // only for a tensor with a buffer (storage of its own or a view's)
    size_t   view_offs;
    int32_t  op_params[GGML_MAX_OP_PARAMS / sizeof(int32_t)];
    int64_t  ne[GGML_MAX_DIMS];
    size_t   nb[GGML_MAX_DIMS];
    void *   self;  // the tensor's address, for the same-memory count
};

struct rec_graph {
    int                 n_leafs, n_nodes;
    struct rec_tensor * t;  // n_leafs + n_nodes
};

static struct rec_graph g_kept[STRUCT_KEEP];
static int              g_next;  // ring position of the next graph to keep
static long long        g_calls, g_full, g_structure, g_no_params, g_none, g_full_same_mem, g_structure_same_mem;

// Open-addressing map from a tensor's address to its position in the graph being recorded.
static void ** g_keys;
static int *   g_vals;
static size_t  g_cap;

static size_t slot_of(void * p) {
    uintptr_t h = (uintptr_t) p;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ULL;
    return (size_t) (h >> 7) & (g_cap - 1);
}

static void map_reset(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 1) {
        cap *= 2;
    }
    if (cap > g_cap) {
        free(g_keys);
        free(g_vals);
        g_keys = calloc(cap, sizeof(void *));
        g_vals = calloc(cap, sizeof(int));
        g_cap  = cap;
        if (!g_keys || !g_vals) {
            fprintf(stderr, "structure-count: out of memory\n");
            abort();
        }
    } else {
        memset(g_keys, 0, g_cap * sizeof(void *));
    }
}

static void map_put(void * p, int v) {
    size_t i = slot_of(p);
    while (g_keys[i] && g_keys[i] != p) {
        i = (i + 1) & (g_cap - 1);
    }
    g_keys[i] = p;
    g_vals[i] = v;
}

static int map_get(void * p) {
    if (!p) {
        return -1;
    }
    size_t i = slot_of(p);
    while (g_keys[i]) {
        if (g_keys[i] == p) {
            return g_vals[i];
        }
        i = (i + 1) & (g_cap - 1);
    }
    return -2;
}

// Records `g` into `r`: nodes, then leafs (see the top of the file).
static void record(struct ggml_cgraph * g, struct rec_graph * r) {
    const int n_nodes = ggml_graph_n_nodes(g);
    map_reset((size_t) n_nodes * (GGML_MAX_SRC + 2));
    for (int i = 0; i < n_nodes; i++) {
        map_put(ggml_graph_node(g, i), i);
    }
    // Leafs: positions n_nodes, n_nodes + 1, ... in first-use order.
    struct ggml_tensor ** leafs   = NULL;
    int                   n_leafs = 0, cap_leafs = 0;
    for (int i = 0; i < n_nodes; i++) {
        struct ggml_tensor * n = ggml_graph_node(g, i);
        for (int j = 0; j <= GGML_MAX_SRC; j++) {
            struct ggml_tensor * s = j < GGML_MAX_SRC ? n->src[j] : n->view_src;
            if (s && map_get(s) == -2) {
                if (n_leafs == cap_leafs) {
                    cap_leafs = cap_leafs ? 2 * cap_leafs : 256;
                    leafs     = realloc(leafs, (size_t) cap_leafs * sizeof(*leafs));
                    if (!leafs) {
                        abort();
                    }
                }
                leafs[n_leafs] = s;
                map_put(s, n_nodes + n_leafs);
                n_leafs++;
            }
        }
    }
    free(r->t);
    r->n_nodes = n_nodes;
    r->n_leafs = n_leafs;
    r->t       = calloc((size_t) (n_nodes + n_leafs), sizeof(struct rec_tensor));
    if (!r->t) {
        abort();
    }
    for (int k = 0; k < n_nodes + n_leafs; k++) {
        struct ggml_tensor * t = k < n_nodes ? ggml_graph_node(g, k) : leafs[k - n_nodes];
        struct rec_tensor *  o = &r->t[k];
        o->self                = t;
        o->op                  = t->op;
        o->type                = t->type;
        o->flags               = t->flags;
        o->buffer              = t->buffer;
        o->data                = t->buffer ? t->data : NULL;
        o->view_offs           = t->view_offs;
        memcpy(o->op_params, t->op_params, sizeof(o->op_params));
        memcpy(o->ne, t->ne, sizeof(o->ne));
        memcpy(o->nb, t->nb, sizeof(o->nb));
        // Leafs' sources are not followed (they are the graph's inputs and weights).
        for (int j = 0; j <= GGML_MAX_SRC; j++) {
            struct ggml_tensor * s = j < GGML_MAX_SRC ? t->src[j] : t->view_src;
            int32_t              p = k < n_nodes ? map_get(s) : (s ? -2 : -1);
            if (j < GGML_MAX_SRC) {
                o->src[j] = p;
            } else {
                o->view_src = p;
            }
            o->outside[j] = p == -2 ? (void *) s : NULL;
        }
    }
    free(leafs);
}

// 0: differ in structure; 1: equal in structure with op parameters left out; 2: equal in
// structure; 3: equal in full.
static int compare(const struct rec_graph * a, const struct rec_graph * b) {
    if (a->n_nodes != b->n_nodes || a->n_leafs != b->n_leafs || !a->t || !b->t) {
        return 0;
    }
    int best = 3;
    for (int k = 0; k < a->n_nodes + a->n_leafs; k++) {
        const struct rec_tensor * x = &a->t[k];
        const struct rec_tensor * y = &b->t[k];
        if (x->op != y->op || x->type != y->type || x->flags != y->flags || x->buffer != y->buffer ||
            x->data != y->data || x->view_offs != y->view_offs || x->view_src != y->view_src ||
            memcmp(x->src, y->src, sizeof(x->src)) || memcmp(x->outside, y->outside, sizeof(x->outside))) {
            return 0;
        }
        if (memcmp(x->op_params, y->op_params, sizeof(x->op_params))) {
            best = 1;
        } else if (best == 3 && (memcmp(x->ne, y->ne, sizeof(x->ne)) || memcmp(x->nb, y->nb, sizeof(x->nb)))) {
            best = 2;
        }
    }
    return best;
}

static bool same_memory(const struct rec_graph * a, const struct rec_graph * b) {
    for (int k = 0; k < a->n_nodes; k++) {
        if (a->t[k].self != b->t[k].self) {
            return false;
        }
    }
    return true;
}

// Records `g`, classifies it against the kept graphs when `count`, and keeps it.
static void see(struct ggml_cgraph * g, bool count) {
    struct rec_graph cur = { 0 };
    record(g, &cur);
    if (count) {
        int best = 0, best_at = -1;
        for (int i = 0; i < STRUCT_KEEP; i++) {
            int c = compare(&cur, &g_kept[i]);
            if (c > best || (c == best && c > 0 && best_at >= 0 && same_memory(&cur, &g_kept[i]))) {
                best    = c;
                best_at = i;
            }
        }
        g_calls++;
        const bool mem = best_at >= 0 && same_memory(&cur, &g_kept[best_at]);
        switch (best) {
            case 3: g_full++; g_full_same_mem += mem; break;
            case 2: g_structure++; g_structure_same_mem += mem; break;
            case 1: g_no_params++; break;
            default: g_none++; break;
        }
    }
    free(g_kept[g_next].t);
    g_kept[g_next] = cur;
    g_next         = (g_next + 1) % STRUCT_KEEP;
}

typedef bool (*sched_graph_fn)(ggml_backend_sched_t, struct ggml_cgraph *);

static sched_graph_fn next_fn(const char * name) {
    union {
        void *         obj;
        sched_graph_fn fn;
    } u = { dlsym(RTLD_NEXT, name) };
    if (!u.obj) {
        fprintf(stderr, "structure-count: %s not found after the probe\n", name);
        abort();
    }
    return u.fn;
}

static __thread int g_depth;  // > 0: the library calling itself (stock's reserve), not counted

bool ggml_backend_sched_alloc_graph(ggml_backend_sched_t sched, struct ggml_cgraph * graph) {
    static sched_graph_fn fn;
    if (!fn) {
        fn = next_fn("ggml_backend_sched_alloc_graph");
    }
    if (g_depth == 0) {
        see(graph, true);
    }
    g_depth++;
    const bool ok = fn(sched, graph);
    g_depth--;
    return ok;
}

bool ggml_backend_sched_reserve(ggml_backend_sched_t sched, struct ggml_cgraph * graph) {
    static sched_graph_fn fn;
    if (!fn) {
        fn = next_fn("ggml_backend_sched_reserve");
    }
    if (g_depth == 0) {
        see(graph, false);
    }
    g_depth++;
    const bool ok = fn(sched, graph);
    g_depth--;
    return ok;
}

__attribute__((destructor)) static void structure_report(void) {
    const char * path = getenv("STRUCTURE_COUNT_OUT");
    if (!path || g_calls == 0) {
        return;
    }
    FILE * f = fopen(path, "a");
    if (!f) {
        return;
    }
    fprintf(f,
            "{\"alloc_graph\":%lld,\"equal\":%lld,\"equal_same_memory\":%lld,\"structure\":%lld,"
            "\"structure_same_memory\":%lld,\"structure_but_op_params\":%lld,\"none\":%lld}\n",
            g_calls, g_full, g_full_same_mem, g_structure, g_structure_same_mem, g_no_params, g_none);
    fclose(f);
}
