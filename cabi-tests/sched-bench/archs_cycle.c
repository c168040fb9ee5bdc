// archs-cycle: the scheduler's steady cycle on real model graphs, with the scheduler probe
// (sched_probe.c) preloaded.
//
// For each model file (written by `test-llama-archs -o DIR`: random weights, every
// architecture) it loads the model onto the named devices (all layers offloaded; with two
// devices the layers are split between them, so the scheduler has three backends with the CPU),
// decodes a prompt, then decodes single tokens with llama.cpp's graph reuse switched off
// (LLAMA_GRAPH_REUSE_DISABLE=1, set by this program), so that every token builds a new graph and
// goes through ggml_backend_sched_reset + ggml_backend_sched_alloc_graph, as a token does whenever
// its graph changed. After each decode it waits for the devices (llama_synchronize, as reading
// the logits to sample would), so that the next token's scheduler calls do not share the CPU
// with the device threads still computing the last one. The probe's counters are read around
// the timed tokens; every timed token must have made exactly one reset and one alloc_graph.
//
// Output: one JSON line per model on stdout:
//   {"model":NAME,"ok":true,"backends":N,"nodes":N,"splits":N,"placement_hash":N,
//    "buffer_bytes":[N,N,N,N],"calls":N,"ns":N,"reset_calls":N,"reset_ns":N}
// (calls and ns: ggml_backend_sched_alloc_graph; reset_*: ggml_backend_sched_reset, which
// llama.cpp calls before building each graph; placement_hash: of the last graph, see
// sched_probe.h, with SCHED_PROBE_HASH set; buffer_bytes: each backend's compute buffer after
// it, likewise.)
//   {"model":NAME,"ok":false,"error":TEXT}
// A model this program cannot run (an encoder-only architecture, say) is reported, not fatal.
//
// usage: archs-cycle --devices HRX0[/HRX1] [--tokens 16] [--warmup 2] MODEL.gguf...
// (options first; prompt + warm-up + tokens must fit the 256-token context.)

#define _GNU_SOURCE
#include "ggml-backend.h"
#include "llama.h"
#include "sched_probe.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Tokens of the prompt decoded first, and the context: prompt + warm-up + timed tokens must fit.
#define PROMPT 32
#define N_CTX  256

static sched_probe_read_fn find_probe(void) {
    union {
        void *              obj;
        sched_probe_read_fn fn;
    } u;
    u.obj = dlsym(RTLD_DEFAULT, "sched_probe_read");
    return u.fn;
}

static void quiet_log(enum ggml_log_level level, const char * text, void * user_data) {
    (void) user_data;
    if (level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

// Prints `s` as a JSON string body (quotes and backslashes escaped, control characters dropped).
static void json_str(const char * s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') {
            putchar('\\');
        }
        if ((unsigned char) *s >= 0x20) {
            putchar(*s);
        }
    }
}

static void report_error(const char * model, const char * what) {
    fputs("{\"model\":\"", stdout);
    json_str(model);
    fputs("\",\"ok\":false,\"error\":\"", stdout);
    json_str(what);
    fputs("\"}\n", stdout);
    fflush(stdout);
}

static const char * base_name(const char * path) {
    const char * slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

// Decodes `n` tokens starting at position `pos`, one batch of n; 0 on success.
static int decode(struct llama_context * ctx, int n_vocab, int pos, int n) {
    llama_token    tokens[64];
    llama_pos      positions[64];
    int8_t         logits[64];
    llama_seq_id   seq0    = 0;
    llama_seq_id * seqs[64];
    int32_t        n_seq[64];
    if (n > 64) {
        return -1;
    }
    for (int i = 0; i < n; i++) {
        tokens[i]    = (llama_token) ((pos + i) * 7 % n_vocab);
        positions[i] = pos + i;
        n_seq[i]     = 1;
        seqs[i]      = &seq0;
        logits[i]    = i == n - 1;
    }
    struct llama_batch batch = {
        .n_tokens = n,
        .token    = tokens,
        .embd     = NULL,
        .pos      = positions,
        .n_seq_id = n_seq,
        .seq_id   = seqs,
        .logits   = logits,
    };
    const int rc = llama_decode(ctx, batch);
    llama_synchronize(ctx);
    return rc;
}

static void run_model(const char * path, ggml_backend_dev_t * devs, int n_tokens, int n_warmup,
                      sched_probe_read_fn probe_read) {
    const char * name = base_name(path);

    // Equal shares for the devices: by default llama.cpp splits the layers by each device's
    // free memory, which moves with the previous model's frees and would give a process now
    // and then another split of the same model (and so another graph) than the rest.
    const size_t max_devs = llama_max_devices();
    float *      shares   = calloc(max_devs, sizeof(float));
    if (!shares) {
        report_error(name, "out of memory");
        return;
    }
    for (size_t i = 0; i < max_devs && devs[i]; i++) {
        shares[i] = 1.0f;
    }
    struct llama_model_params mp = llama_model_default_params();
    mp.devices                   = devs;
    mp.n_gpu_layers              = 999;
    mp.split_mode                = LLAMA_SPLIT_MODE_LAYER;
    mp.tensor_split              = shares;
    struct llama_model * model   = llama_model_load_from_file(path, mp);
    free(shares);
    if (!model) {
        report_error(name, "model did not load");
        return;
    }
    if (!llama_model_has_decoder(model) || llama_model_has_encoder(model)) {
        report_error(name, "not a decoder-only model");
        llama_model_free(model);
        return;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx                       = N_CTX;
    cp.n_batch                     = 64;
    cp.n_ubatch                    = 64;
    cp.n_threads                   = 1;
    cp.n_threads_batch             = 1;
    struct llama_context * ctx     = llama_init_from_model(model, cp);
    if (!ctx) {
        report_error(name, "context was not created");
        llama_model_free(model);
        return;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int prompt  = PROMPT;
    int       pos     = 0;
    int       rc      = decode(ctx, n_vocab, pos, prompt);
    pos += prompt;
    for (int i = 0; rc == 0 && i < n_warmup; i++) {
        rc = decode(ctx, n_vocab, pos++, 1);
    }
    struct probe_snapshot before, after;
    probe_read(&before, sizeof(before));
    for (int i = 0; rc == 0 && i < n_tokens; i++) {
        rc = decode(ctx, n_vocab, pos++, 1);
    }
    probe_read(&after, sizeof(after));
    if (rc != 0) {
        char what[64];
        snprintf(what, sizeof(what), "llama_decode returned %d", rc);
        report_error(name, what);
    } else if (after.calls - before.calls != n_tokens || after.reset_calls - before.reset_calls != n_tokens) {
        // Every token must have gone through the scheduler once, or the figure means nothing.
        char what[128];
        snprintf(what, sizeof(what), "%lld alloc_graph and %lld reset calls for %d tokens", after.calls - before.calls,
                 after.reset_calls - before.reset_calls, n_tokens);
        report_error(name, what);
    } else {
        fputs("{\"model\":\"", stdout);
        json_str(name);
        printf("\",\"ok\":true,\"backends\":%lld,\"nodes\":%lld,\"splits\":%lld,\"placement_hash\":%llu,"
               "\"buffer_bytes\":[%lld,%lld,%lld,%lld],"
               "\"calls\":%lld,\"ns\":%lld,\"reset_calls\":%lld,\"reset_ns\":%lld}\n",
               after.last_backends, after.last_nodes, after.last_splits, after.last_placement_hash,
               after.last_buffer_bytes[0], after.last_buffer_bytes[1], after.last_buffer_bytes[2],
               after.last_buffer_bytes[3], after.calls - before.calls, after.ns - before.ns,
               after.reset_calls - before.reset_calls, after.reset_ns - before.reset_ns);
        fflush(stdout);
    }
    llama_free(ctx);
    llama_model_free(model);
}

int main(int argc, char ** argv) {
    const char * devices  = NULL;
    int          n_tokens = 16;
    int          n_warmup = 2;
    int          first    = argc;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc) {
            devices = argv[++i];
        } else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
            n_tokens = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) {
            n_warmup = atoi(argv[++i]);
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "archs-cycle: unknown option %s\n", argv[i]);
            return 2;
        } else {
            first = i;
            break;
        }
    }
    for (int i = first; i < argc; i++) {
        if (argv[i][0] == '-') {
            fprintf(stderr, "archs-cycle: option %s after the first model: options go first\n", argv[i]);
            return 2;
        }
    }
    if (!devices || first == argc || n_tokens < 1 || n_warmup < 0 || PROMPT + n_warmup + n_tokens > N_CTX) {
        fprintf(stderr,
                "usage: archs-cycle --devices DEV[/DEV...] [--tokens N] [--warmup N] MODEL.gguf...\n"
                "       (%d prompt tokens + warm-up + tokens must fit the %d-token context)\n",
                PROMPT, N_CTX);
        return 2;
    }
    sched_probe_read_fn probe_read = find_probe();
    if (!probe_read) {
        fprintf(stderr, "archs-cycle: sched_probe_read not found: preload libsched-probe.so\n");
        return 2;
    }
    // Every token must build its graph and call the scheduler.
    setenv("LLAMA_GRAPH_REUSE_DISABLE", "1", 1);
    llama_log_set(quiet_log, NULL);
    ggml_backend_load_all();
    llama_backend_init();

    ggml_backend_dev_t devs[8];
    int                n_devs = 0;
    char               list[256];
    snprintf(list, sizeof(list), "%s", devices);
    for (char * save = NULL, *tok = strtok_r(list, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        ggml_backend_dev_t dev = ggml_backend_dev_by_name(tok);
        if (!dev || n_devs == 7) {
            fprintf(stderr, "archs-cycle: no device %s (or too many devices)\n", tok);
            return 2;
        }
        for (int k = 0; k < n_devs; k++) {
            if (devs[k] == dev) {
                fprintf(stderr, "archs-cycle: device %s given twice\n", tok);
                return 2;
            }
        }
        devs[n_devs++] = dev;
    }
    if (n_devs == 0) {
        fprintf(stderr, "archs-cycle: --devices %s names no device\n", devices);
        return 2;
    }
    devs[n_devs] = NULL;

    for (int i = first; i < argc; i++) {
        run_model(argv[i], devs, n_tokens, n_warmup, probe_read);
    }
    return 0;
}
