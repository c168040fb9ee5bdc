/* The GGML_HRX_* variables with values HRX must refuse: run once per case by run.sh, with the
 * case's variable set. It creates the registry (which reads the environment), then prints, one
 * per line, every message HRX logged (prefixed "log: ") and what the registry made of the
 * environment: the device count, device 0's arena budget in bytes and its address range.
 * run.sh checks those lines against the case's expectation, so a refused value is proven both
 * named in a warning and replaced by its default. Exit 0 when the registry exists. */
#include <stdio.h>
#include <string.h>

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-hrx.h"

static void on_log(enum ggml_log_level level, const char * text, void * user) {
    (void) level;
    (void) user;
    printf("log: %s", text);
    if (text[0] != '\0' && text[strlen(text) - 1] != '\n') {
        printf("\n");
    }
}

int main(void) {
    ggml_log_set(on_log, NULL);
    ggml_backend_reg_t reg = ggml_backend_hrx_reg();
    if (reg == NULL) {
        printf("no registry\n");
        return 1;
    }
    size_t n = ggml_backend_reg_dev_count(reg);
    printf("devices: %zu\n", n);
    if (n > 0) {
        struct ggml_hrx_arena_stats st;
        if (ggml_backend_hrx_arena_stats_get(0, &st) == GGML_HRX_OK) {
            printf("arena limit bytes: %zu\n", st.limit_bytes);
        }
        size_t base = 0;
        size_t size = 0;
        if (ggml_backend_hrx_device_address_range(0, &base, &size) == GGML_HRX_OK) {
            printf("address range: %s, %zu MiB\n", base != 0 ? "non-NULL" : "NULL", size >> 20);
        }
    }
    return 0;
}
