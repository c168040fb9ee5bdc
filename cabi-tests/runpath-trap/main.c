/* The RUNPATH trap: a program built with a DT_RPATH (or DT_RUNPATH) pointing at one
 * libggml-base directory. `ab runpath-trap` runs it through the swap naming another file:
 * with DT_RPATH the loader silently keeps the RPATH copy, and the harness's proof must
 * report the run as failed, naming both paths; with DT_RUNPATH the swap wins. */
#include <stdio.h>

#include "ggml.h"

int main(void) {
    size_t overhead = ggml_tensor_overhead();
    printf("ggml_tensor_overhead() = %zu\n", overhead);
    return overhead > 0 ? 0 : 1;
}
