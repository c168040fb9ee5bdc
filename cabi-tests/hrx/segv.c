/* The property the scheduler fix relies on: a host write through an HRX device address is
 * killed by SIGSEGV, every time. A child process writes (and, separately, reads) through
 * the fake address of a tensor in an HRX0 buffer; the parent checks the signal.
 * Exit 0 when both children died of SIGSEGV. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-hrx.h"

static int run_child(volatile float * p, int write) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return -1;
    }
    if (pid == 0) {
        if (write) {
            p[0] = 42.0f;
        } else {
            float v = p[0];
            printf("read %f: no fault\n", (double) v);
        }
        _exit(0); /* reached only if the access did not fault */
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
        perror("waitpid");
        return -1;
    }
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) {
        return 0;
    }
    fprintf(stderr, "child (%s) was not killed by SIGSEGV (status %d)\n", write ? "write" : "read", status);
    return 1;
}

int main(void) {
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(ggml_backend_hrx_reg(), 0);
    struct ggml_init_params ip = { 4 * ggml_tensor_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4096);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_dev_buffer_type(dev));
    if (buf == NULL || t->data == NULL) {
        fprintf(stderr, "allocation failed\n");
        return 1;
    }
    /* the device holds the data: the API path works ... */
    float v = 3.0f, back = 0.0f;
    ggml_backend_tensor_set(t, &v, 0, sizeof(v));
    ggml_backend_tensor_get(t, &back, 0, sizeof(back));
    if (back != 3.0f) {
        fprintf(stderr, "round trip failed\n");
        return 1;
    }
    /* ... and the host path faults, at the start and in the middle of the tensor */
    int bad = 0;
    bad |= run_child((volatile float *) t->data, 1);
    bad |= run_child((volatile float *) t->data + 1000, 1);
    bad |= run_child((volatile float *) t->data, 0);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    if (bad) {
        return 1;
    }
    printf("hrx segv: host write and read through a device address died of SIGSEGV\n");
    return 0;
}
