/* The one assertion of the HRX C tests: on failure, print where and what, and make the
 * enclosing function (main, or a case returning int) return 1. */
#ifndef HRX_CABI_CHECK_H
#define HRX_CABI_CHECK_H

#include <stdio.h>

#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            return 1;                                                             \
        }                                                                         \
    } while (0)

#endif
