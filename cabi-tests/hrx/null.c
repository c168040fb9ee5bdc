/* NULL (and out-of-range) arguments of libggml-hrx.so, wherever a C caller can pass them:
 *  1. the public ggml_backend_hrx_* API: the documented result codes, out-parameters left
 *     untouched ("written only on success");
 *  2. ggml's public API, where ggml hands the NULL on to the HRX device or backend: the
 *     failed value (false / NULL / GGML_STATUS_FAILED) and a message naming the function
 *     and the NULL argument through ggml's logger;
 *  3. entry points without an error result (void): a logged, named abort, checked in a
 *     child process (its stderr and its signal).
 *
 * Not reachable from C: a NULL CPU registry, which the simulator's kernel-support check
 * (runtime/sim/cpu.rs, formerly cpu_kernels_support in device.rs) now tests before reading
 * its interface (it used to read first): ggml_backend_cpu_reg() returns a static registry
 * and only a broken libggml-cpu could return NULL. Nor NULL device / backend / event
 * handles themselves: ggml's wrappers GGML_ASSERT them before calling into the backend
 * (HRX's own NULL checks there are covered by the crate's unit tests).
 * Exit 0 on success. */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-backend-impl.h"
#include "ggml-hrx.h"

#include "check.h"

/* Messages logged through ggml's logger since the last clear_log(). */
static char g_log[16384];
static size_t g_log_len;

static void capture(enum ggml_log_level level, const char * text, void * user_data) {
    (void) level;
    (void) user_data;
    size_t n = strlen(text);
    if (g_log_len + n >= sizeof(g_log)) {
        n = sizeof(g_log) - 1 - g_log_len;
    }
    memcpy(g_log + g_log_len, text, n);
    g_log_len += n;
    g_log[g_log_len] = '\0';
}

static void clear_log(void) {
    g_log_len = 0;
    g_log[0] = '\0';
}

static int logged(const char * what) {
    if (strstr(g_log, what) != NULL) {
        return 1;
    }
    fprintf(stderr, "expected in the log: %s\nlog was: %s\n", what, g_log);
    return 0;
}

/* In a child: the logger writes straight to this pipe (the child dies before it could
 * flush anything buffered). */
static int g_pipe_fd = -1;

static void to_pipe(enum ggml_log_level level, const char * text, void * user_data) {
    (void) level;
    (void) user_data;
    size_t n = strlen(text);
    while (n > 0) {
        ssize_t w = write(g_pipe_fd, text, n);
        if (w <= 0) {
            return;
        }
        text += w;
        n -= (size_t) w;
    }
}

enum death { EVENT_RECORD, EVENT_WAIT };

/* Runs `what` with a NULL event in a child and checks that it aborted (SIGABRT) after
 * logging `expect`. Returns 0 on success. */
static int dies_by_name(ggml_backend_t be, enum death what, const char * expect) {
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        close(fds[0]);
        g_pipe_fd = fds[1];
        ggml_log_set(to_pipe, NULL);
        if (what == EVENT_RECORD) {
            ggml_backend_event_record(NULL, be);
        } else {
            ggml_backend_event_wait(be, NULL);
        }
        _exit(0); /* reached only if the call returned */
    }
    close(fds[1]);
    char out[4096];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof(out) - 1 && (r = read(fds[0], out + len, sizeof(out) - 1 - len)) > 0) {
        len += (size_t) r;
    }
    out[len] = '\0';
    close(fds[0]);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
        perror("waitpid");
        return 1;
    }
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT)) {
        fprintf(stderr, "child was not aborted (status %d); it logged: %s\n", status, out);
        return 1;
    }
    if (strstr(out, expect) == NULL || strstr(out, "HRX: aborting") == NULL) {
        fprintf(stderr, "child's log lacks '%s' / 'HRX: aborting': %s\n", expect, out);
        return 1;
    }
    return 0;
}

int main(void) {
    ggml_backend_reg_t reg = ggml_backend_hrx_reg();
    CHECK(reg != NULL);
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
    CHECK(dev != NULL);
    ggml_log_set(capture, NULL);

    /* 1. the public HRX API */
    size_t base = 7, size = 9;
    CHECK(ggml_backend_hrx_device_address_range(0, NULL, &size) == GGML_HRX_ERR_NULL_ARGUMENT);
    CHECK(ggml_backend_hrx_device_address_range(0, &base, NULL) == GGML_HRX_ERR_NULL_ARGUMENT);
    CHECK(ggml_backend_hrx_device_address_range(0, NULL, NULL) == GGML_HRX_ERR_NULL_ARGUMENT);
    CHECK(ggml_backend_hrx_device_address_range(SIZE_MAX, &base, &size) == GGML_HRX_ERR_INVALID_DEVICE);
    CHECK(base == 7 && size == 9); /* written only on success */
    CHECK(ggml_backend_hrx_device_address_range(0, &base, &size) == GGML_HRX_OK);
    CHECK(base != 7 && size > 0);

    struct ggml_hrx_arena_stats st;
    memset(&st, 0xab, sizeof(st));
    CHECK(ggml_backend_hrx_arena_stats_get(0, NULL) == GGML_HRX_ERR_NULL_ARGUMENT);
    CHECK(ggml_backend_hrx_arena_stats_get(SIZE_MAX, NULL) == GGML_HRX_ERR_NULL_ARGUMENT);
    CHECK(ggml_backend_hrx_arena_stats_get(SIZE_MAX, &st) == GGML_HRX_ERR_INVALID_DEVICE);
    CHECK(st.hits == 0xababababababababull); /* untouched */

    CHECK(ggml_backend_hrx_eager_ops_apply(NULL) == GGML_HRX_ERR_NULL_ARGUMENT);
    CHECK(ggml_backend_hrx_eager_ops_add(-1) == GGML_HRX_ERR_INVALID_OP);
    CHECK(ggml_backend_hrx_eager_ops_remove(GGML_OP_COUNT) == GGML_HRX_ERR_INVALID_OP);
    CHECK(!ggml_backend_hrx_eager_ops_contains(-1));
    CHECK(!ggml_backend_hrx_eager_ops_contains(GGML_OP_NONE));
    CHECK(ggml_backend_hrx_eager_ops_contains(GGML_OP_ADD)); /* the set was not disturbed */

    /* 2. NULLs a base passes on to the device: failed values, named in the log. Stock's
     * libggml-base passes them on; ours stops them first with a named abort (tested in
     * cabi-tests/bad-input), so they are handed to HRX's interface tables directly here, and
     * the result is the same under either base. */
    CHECK(reg->iface.get_proc_address(reg, NULL) == NULL);
    CHECK(ggml_backend_reg_get_proc_address(reg, "ggml_backend_hrx_no_such_function") == NULL);
    CHECK(ggml_backend_reg_get_proc_address(reg, "ggml_backend_hrx_eager_ops_add") != NULL);
    CHECK(ggml_backend_reg_dev_get(reg, ggml_backend_reg_dev_count(reg)) == NULL);

    clear_log();
    CHECK(!dev->iface.supports_op(dev, NULL));
    CHECK(logged("HRX: ggml_backend_hrx_device_supports_op: internal error: NULL op"));
    clear_log();
    CHECK(!dev->iface.offload_op(dev, NULL));
    CHECK(logged("HRX: ggml_backend_hrx_device_offload_op: internal error: NULL op"));
    /* a NULL buffer type is simply not supported: nothing to log */
    clear_log();
    CHECK(!dev->iface.supports_buft(dev, NULL));
    CHECK(g_log_len == 0);
    /* get_memory writes only the out-parameters it is given */
    size_t total = 0;
    dev->iface.get_memory(dev, NULL, NULL);
    dev->iface.get_memory(dev, NULL, &total);
    CHECK(total == size);

    ggml_backend_t be = ggml_backend_dev_init(dev, NULL);
    CHECK(be != NULL);
    clear_log();
    CHECK(be->iface.graph_compute(be, NULL) == GGML_STATUS_FAILED);
    CHECK(logged("HRX: ggml_backend_hrx_graph_compute: internal error: NULL graph"));
    ggml_backend_event_free(NULL); /* ggml's own NULL check; must not reach HRX */

    /* 3. no error result: a named abort */
    CHECK(dies_by_name(be, EVENT_RECORD, "HRX: ggml_backend_hrx_event_record: internal error: NULL event") == 0);
    CHECK(dies_by_name(be, EVENT_WAIT, "HRX: ggml_backend_hrx_event_wait: internal error: NULL event") == 0);

    ggml_backend_free(be);
    ggml_log_set(NULL, NULL);
    printf("hrx null: ok\n");
    return 0;
}
