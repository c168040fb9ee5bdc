/* Misuse of the backend layer and the scheduler, one case per child process, run against
 * whichever libggml-base is first on LD_LIBRARY_PATH (the harness runs it in both arms).
 *
 *   bad_input [--hrx]          run every case, print one line per case:
 *                              "case NAME: exit N | signal NAME; message: yes|no"
 *                              (--hrx: also the cases that need libggml-hrx's device)
 *   bad_input --case NAME      run one case in this process (what each child does)
 *
 * "message: yes" means the child's stderr named what was wrong (the case's expected words) in
 * a message that reached the abort callback set with ggml_set_abort_callback, as a named
 * abort through ggml_abort does. The program only reports; which outcome is
 * right for which arm is decided by the caller (crates/repro's bad-input check), so that a
 * case where stock crashes and ours aborts by name is checked in both arms. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-hrx.h"

static ggml_backend_t cpu_backend(void) {
    ggml_backend_t b = ggml_backend_cpu_init();
    if (b == NULL) {
        fprintf(stderr, "no CPU backend\n");
        exit(90);
    }
    return b;
}

/* A small graph: out = a + b on F32 vectors of n elements, in a no_alloc context. */
struct small_graph {
    struct ggml_context * ctx;
    struct ggml_cgraph *  gf;
    struct ggml_tensor *  a;
    struct ggml_tensor *  b;
    struct ggml_tensor *  out;
};

static struct small_graph small_graph(int64_t n) {
    struct ggml_init_params p = { ggml_tensor_overhead() * 16 + ggml_graph_overhead(), NULL, true };
    struct small_graph g;
    g.ctx = ggml_init(p);
    g.a   = ggml_new_tensor_1d(g.ctx, GGML_TYPE_F32, n);
    g.b   = ggml_new_tensor_1d(g.ctx, GGML_TYPE_F32, n);
    ggml_set_input(g.a);
    ggml_set_input(g.b);
    g.out = ggml_add(g.ctx, g.a, g.b);
    ggml_set_output(g.out);
    g.gf = ggml_new_graph(g.ctx);
    ggml_build_forward_expand(g.gf, g.out);
    return g;
}

static void case_graph_compute_null(void) {
    ggml_backend_graph_compute(cpu_backend(), NULL);
}

static void case_supports_op_null(void) {
    (void) ggml_backend_supports_op(cpu_backend(), NULL);
}

static void case_reg_proc_address_null(void) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(ggml_backend_get_device(cpu_backend()));
    (void) ggml_backend_reg_get_proc_address(reg, NULL);
}

static void case_dev_memory_null(void) {
    ggml_backend_dev_memory(ggml_backend_get_device(cpu_backend()), NULL, NULL);
}

/* A node buffer id past the allocator's buffer types, for a node the allocator places (SUM_ROWS
 * cannot run in place, so the node gets memory of its own with that id): stock indexes its
 * array with it and reads whatever lies there (exit 0, GGML_ASSERT(buft) or a crash when that
 * memory is NULL or unmapped); ours aborts naming the entry. An id that is never read (a
 * view's, an allocated tensor's, an in-place node's) is no error in either
 * (tests/layer_dispatch.rs, gallocr_ids_read_only_for_tensors_it_places). */
static void case_gallocr_reserve_n_bad_id(void) {
    ggml_backend_buffer_type_t buft = ggml_backend_get_default_buffer_type(cpu_backend());
    ggml_gallocr_t galloc = ggml_gallocr_new_n(&buft, 1);
    struct ggml_init_params gp = { ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(gp);
    struct ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 16);
    ggml_set_input(a);
    struct ggml_tensor * out = ggml_sum_rows(ctx, a);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    const int node_ids[1] = { 5 };
    const int leaf_ids[1] = { 0 };
    (void) ggml_gallocr_reserve_n(galloc, gf, node_ids, leaf_ids);
}

static void case_sched_new_size_max(void) {
    ggml_backend_t cpu = cpu_backend();
    ggml_backend_sched_t s = ggml_backend_sched_new(&cpu, NULL, 1, SIZE_MAX, false, true);
    printf("sched_new(SIZE_MAX) returned %p\n", (void *) s);
}

/* Resident memory in KiB (the second field of /proc/self/statm, in pages). */
static long rss_kib(void) {
    FILE * f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (f == NULL || fscanf(f, "%ld %ld", &size, &resident) != 2) {
        exit(93);
    }
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* llama.cpp sizes graph_size from the model's tensor count; a scheduler made for a million
 * slots must not hold more memory than stock's (25 MiB measured): exit 0 at most 32 MiB. */
static void case_sched_new_million(void) {
    ggml_backend_t cpu = cpu_backend();
    long before = rss_kib();
    ggml_backend_sched_t s = ggml_backend_sched_new(&cpu, NULL, 1, 1000000, false, true);
    long grown = rss_kib() - before;
    printf("sched_new(1000000): resident memory grew by %ld MiB\n", grown / 1024);
    ggml_backend_sched_free(s);
    exit(grown <= 32 * 1024 ? 0 : 1);
}

/* alloc_graph(A), then graph_compute(B): B must be computed (exit 0 when B's output holds
 * a + b, 1 when it does not; stock computes A's splits and reports success). */
static void case_compute_other_graph(void) {
    ggml_backend_t cpu = cpu_backend();
    ggml_backend_sched_t s = ggml_backend_sched_new(&cpu, NULL, 1, 64, false, true);
    struct small_graph a = small_graph(8);
    struct small_graph b = small_graph(8);
    if (!ggml_backend_sched_alloc_graph(s, a.gf)) {
        exit(91);
    }
    float x[8], y[8], out[8];
    for (int i = 0; i < 8; i++) {
        x[i] = (float) i;
        y[i] = 100.0f;
    }
    enum ggml_status st = ggml_backend_sched_graph_compute(s, b.gf);
    if (b.a->buffer == NULL || b.out->buffer == NULL) {
        printf("graph_compute(B) returned %d and left B unallocated\n", (int) st);
        exit(1);
    }
    ggml_backend_tensor_set(b.a, x, 0, sizeof(x));
    ggml_backend_tensor_set(b.b, y, 0, sizeof(y));
    st = ggml_backend_sched_graph_compute(s, b.gf);
    ggml_backend_tensor_get(b.out, out, 0, sizeof(out));
    for (int i = 0; i < 8; i++) {
        if (out[i] != x[i] + y[i]) {
            printf("graph_compute(B) returned %d, out[%d] = %g, not %g\n", (int) st, i, out[i], x[i] + y[i]);
            exit(1);
        }
    }
    printf("graph_compute(B) computed B\n");
}

/* A parallel scheduler (pipeline copies) computing, round after round, a new graph over one
 * graph input the application allocated in its own buffer before the scheduler saw it (the
 * crash tests/sched_calls.rs found). Stock gives that input pipeline copies, although its
 * storage cannot rotate, and dies of SIGSEGV in ggml_gallocr_alloc_graph in round 1; ours
 * leaves such an input alone (split.rs, pass 6). Exit 0 when all 3 rounds compute
 * (in + in) * 2, 1 when a round is wrong. */
static void case_parallel_preallocated_input(void) {
    ggml_backend_t cpu = cpu_backend();
    struct ggml_init_params p = { ggml_tensor_overhead() * 4, NULL, true };
    struct ggml_context * cin = ggml_init(p);
    struct ggml_tensor * in = ggml_new_tensor_1d(cin, GGML_TYPE_F32, 24);
    ggml_set_input(in);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(cin, cpu);
    float v[24];
    for (int i = 0; i < 24; i++) {
        v[i] = (float) i;
    }
    ggml_backend_tensor_set(in, v, 0, sizeof(v));
    ggml_backend_sched_t s = ggml_backend_sched_new(&cpu, NULL, 1, 64, true, false);
    for (int round = 0; round < 3; round++) {
        struct ggml_init_params gp = { ggml_tensor_overhead() * 16 + ggml_graph_overhead(), NULL, true };
        struct ggml_context * ctx = ggml_init(gp);
        struct ggml_tensor * out = ggml_scale(ctx, ggml_add(ctx, in, in), 2.0f);
        ggml_set_output(out);
        struct ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, out);
        enum ggml_status st = ggml_backend_sched_graph_compute(s, gf);
        float o[24];
        ggml_backend_tensor_get(out, o, 0, sizeof(o));
        for (int i = 0; i < 24; i++) {
            if (st != GGML_STATUS_SUCCESS || o[i] != 4.0f * (float) i) {
                printf("round %d: status %d, out[%d] = %g, not %g\n", round, (int) st, i, o[i], 4.0f * (float) i);
                exit(1);
            }
        }
        ggml_backend_sched_reset(s);
        ggml_free(ctx);
    }
    ggml_backend_sched_free(s);
    ggml_backend_buffer_free(buf);
    printf("3 rounds computed\n");
}

/* reserve(A), then compute(B), where B has A's node and leaf counts but another structure:
 * B's first node is an output that A's plan lets a later node overwrite. gallocr reuses a
 * plan while counts match and sizes fit, so stock computes B with A's plan and B's output
 * reads 4x where 2x is right (exit 1); ours plans B again (exit 0). */
static void case_reserve_other_structure(void) {
    ggml_backend_t cpu = cpu_backend();
    ggml_backend_sched_t s = ggml_backend_sched_new(&cpu, NULL, 1, 64, false, false);
    struct ggml_init_params p = { ggml_tensor_overhead() * 16 + ggml_graph_overhead(), NULL, true };
    /* A: 2 input leafs, 4 nodes, no output but the last */
    struct ggml_context * ca = ggml_init(p);
    struct ggml_tensor * x = ggml_new_tensor_1d(ca, GGML_TYPE_F32, 100);
    struct ggml_tensor * y = ggml_new_tensor_1d(ca, GGML_TYPE_F32, 100);
    ggml_set_input(x);
    ggml_set_input(y);
    struct ggml_tensor * a = ggml_add(ca, ggml_add(ca, ggml_add(ca, ggml_add(ca, x, x), x), y), x);
    ggml_set_output(a);
    struct ggml_cgraph * ga = ggml_new_graph(ca);
    ggml_build_forward_expand(ga, a);
    if (!ggml_backend_sched_reserve(s, ga)) {
        exit(91);
    }
    /* B: leafs u and dst, nodes n0 = u + u (output), n1 = n0 + u, n2 = n1 + u, cpy(n2, dst) */
    struct ggml_context * cb = ggml_init(p);
    struct ggml_tensor * u = ggml_new_tensor_1d(cb, GGML_TYPE_F32, 1);
    ggml_set_input(u);
    struct ggml_tensor * n0 = ggml_add(cb, u, u);
    ggml_set_output(n0);
    struct ggml_tensor * n2 = ggml_add(cb, ggml_add(cb, n0, u), u);
    struct ggml_tensor * out = ggml_cpy(cb, n2, ggml_new_tensor_1d(cb, GGML_TYPE_F32, 1));
    ggml_set_output(out);
    struct ggml_cgraph * gb = ggml_new_graph(cb);
    ggml_build_forward_expand(gb, out);
    if (ggml_graph_n_nodes(gb) != ggml_graph_n_nodes(ga)) {
        fprintf(stderr, "B has %d nodes, A %d\n", ggml_graph_n_nodes(gb), ggml_graph_n_nodes(ga));
        exit(92);
    }
    if (!ggml_backend_sched_alloc_graph(s, gb)) {
        exit(91);
    }
    float one = 1.0f, v0 = 0.0f, vout = 0.0f;
    ggml_backend_tensor_set(u, &one, 0, sizeof(one));
    ggml_backend_sched_graph_compute(s, gb);
    ggml_backend_tensor_get(n0, &v0, 0, sizeof(v0));
    ggml_backend_tensor_get(out, &vout, 0, sizeof(vout));
    printf("B: n0 = %g (2 is right), out = %g (4 is right)\n", v0, vout);
    exit(v0 == 2.0f && vout == 4.0f ? 0 : 1);
}

static void case_sched_set_tensor_backend_null(void) {
    ggml_backend_t cpu = cpu_backend();
    ggml_backend_sched_t s = ggml_backend_sched_new(&cpu, NULL, 1, 64, false, true);
    ggml_backend_sched_set_tensor_backend(s, NULL, cpu);
}

/* Compute queued on HRX0, then the scheduler and the backend freed before it ran (the
 * application frees its graph after both, as it may: the graph is its own). */
static void case_free_while_busy(void) {
    ggml_backend_reg_t reg = ggml_backend_hrx_reg();
    ggml_backend_t hrx = ggml_backend_dev_init(ggml_backend_reg_dev_get(reg, 0), NULL);
    ggml_backend_t cpu = cpu_backend();
    ggml_backend_t list[2] = { hrx, cpu };
    ggml_backend_sched_t s = ggml_backend_sched_new(list, NULL, 2, 64, false, true);
    struct small_graph g = small_graph(1 << 22);
    if (!ggml_backend_sched_alloc_graph(s, g.gf)) {
        fprintf(stderr, "alloc_graph failed\n");
        exit(91);
    }
    ggml_backend_sched_graph_compute_async(s, g.gf);
    ggml_backend_sched_free(s);
    ggml_backend_free(hrx);
    ggml_backend_free(cpu);
    ggml_free(g.ctx);
    printf("freed while busy: no crash\n");
}

struct bad_case {
    const char * name;
    void (*run)(void);
    const char * words; /* what a named abort must say */
    bool         hrx;
};

static const struct bad_case k_cases[] = {
    { "graph_compute(cpu, NULL)",               case_graph_compute_null,            "`cgraph` is NULL",         false },
    { "supports_op(cpu, NULL)",                 case_supports_op_null,              "`op` is NULL",             false },
    { "reg_get_proc_address(reg, NULL)",        case_reg_proc_address_null,         "`name` is NULL",           false },
    { "dev_memory(dev, NULL, NULL)",            case_dev_memory_null,               "`free` is NULL",           false },
    { "sched_set_tensor_backend(s, NULL, cpu)", case_sched_set_tensor_backend_null, "`node` is NULL",           false },
    { "gallocr_reserve_n(node buffer id 5 of 1)", case_gallocr_reserve_n_bad_id,   "node_buffer_ids[0] is 5",  false },
    { "sched_new(graph_size SIZE_MAX)",         case_sched_new_size_max,            "graph_size is too large",  false },
    { "sched_new(graph_size 1000000) memory",   case_sched_new_million,             "",                         false },
    { "alloc_graph(A), graph_compute(B)",        case_compute_other_graph,           "",                         false },
    { "parallel sched, pre-allocated input",    case_parallel_preallocated_input,   "",                         false },
    { "reserve(A), compute(B), same counts",      case_reserve_other_structure,       "",                         false },
    { "free while busy (HRX0)",                 case_free_while_busy,               "",                         true  },
};
#define N_CASES (sizeof(k_cases) / sizeof(k_cases[0]))

static int run_child(const struct bad_case * c, const char * self) {
    int fd[2];
    if (pipe(fd) != 0) {
        return -1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], STDERR_FILENO);
        close(fd[0]);
        execl(self, self, "--case", c->name, (char *) NULL);
        _exit(92);
    }
    close(fd[1]);
    char   err[8192];
    size_t len = 0;
    ssize_t r;
    while ((r = read(fd[0], err + len, sizeof(err) - 1 - len)) > 0) {
        len += (size_t) r;
        if (len == sizeof(err) - 1) {
            char sink[512];
            while (read(fd[0], sink, sizeof(sink)) > 0) {}
            break;
        }
    }
    err[len] = '\0';
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    /* Named: the expected words, in a message that reached the application's abort callback
     * (so it went through ggml_abort, as stock's GGML_ASSERT does). */
    const bool named = c->words[0] != '\0' && strstr(err, c->words) != NULL && strstr(err, "abort callback:") != NULL;
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        printf("case %s: signal %s; message: %s\n", c->name, sig == SIGABRT ? "SIGABRT" : sig == SIGSEGV ? "SIGSEGV" : "other",
               named ? "yes" : "no");
    } else {
        printf("case %s: exit %d; message: %s\n", c->name, WEXITSTATUS(status), named ? "yes" : "no");
    }
    return 0;
}

static void on_abort(const char * message) {
    fprintf(stderr, "abort callback: %s\n", message);
}

int main(int argc, char ** argv) {
    if (argc == 3 && strcmp(argv[1], "--case") == 0) {
        setenv("GGML_NO_BACKTRACE", "1", 1);
        ggml_set_abort_callback(on_abort);
        for (size_t i = 0; i < N_CASES; i++) {
            if (strcmp(k_cases[i].name, argv[2]) == 0) {
                k_cases[i].run();
                return 0;
            }
        }
        fprintf(stderr, "unknown case %s\n", argv[2]);
        return 2;
    }
    const bool with_hrx = argc == 2 && strcmp(argv[1], "--hrx") == 0;
    for (size_t i = 0; i < N_CASES; i++) {
        if (k_cases[i].hrx && !with_hrx) {
            continue;
        }
        run_child(&k_cases[i], "/proc/self/exe");
    }
    return 0;
}
