/* LD_PRELOAD helper for gguf.sh: at process exit, drain llama.cpp's asynchronous logger.
 *
 * llama.cpp's tools log through common_log, a queue written to stderr by a worker thread; the
 * logger is deliberately never destroyed, so a program that fails fast (a bad magic number is
 * found in well under 50 ms) exits before the worker has written the error, and whether the
 * message reaches stderr is a race (seen here: 1 run in 5). gguf.sh checks that stderr names
 * the problem, so it needs every message: this library's destructor runs at exit, after
 * main returns, and asks the logger to stop (common_log_pause), which writes what is queued
 * and joins the worker. It changes nothing else, and it is preloaded in both arms alike.
 * The two functions are found at run time by their C++ names, so a program without
 * libllama-common is left alone. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

__attribute__((destructor)) static void drain_llama_log(void) {
    void * (*log_main)(void) = (void * (*)(void)) dlsym(RTLD_DEFAULT, "_Z15common_log_mainv");
    void (*log_pause)(void *) = (void (*)(void *)) dlsym(RTLD_DEFAULT, "_Z16common_log_pauseP10common_log");
    if (log_main != NULL && log_pause != NULL) {
        log_pause(log_main());
    }
}
