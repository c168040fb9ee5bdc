// archs-cycle: the scheduler's steady cycle on real model graphs, with the scheduler probe
// (sched_probe.c) preloaded.
//
// For each model file (written by `test-llama-archs -o DIR`: random weights, every
// architecture) it loads the model onto the named devices (all layers offloaded; with two
// devices the layers are split between them, so the scheduler has three backends with the CPU),
// decodes a prompt, then decodes single tokens with llama.cpp's graph reuse switched off
// (LLAMA_GRAPH_REUSE_DISABLE=1, set by this program), so that every token builds a new graph and
// goes through ggml_backend_sched_reset + ggml_backend_sched_alloc_graph, as a token does whenever
// its graph changed. The probe's counters are read around the timed tokens.
//
// Output: one JSON line per model on stdout:
//   {"model":NAME,"ok":true,"backends":N,"nodes":N,"splits":N,"calls":N,"ns":N,
//    "reset_calls":N,"reset_ns":N}
// (calls and ns: ggml_backend_sched_alloc_graph; reset_*: ggml_backend_sched_reset, which
// llama.cpp calls before building each graph.)
//   {"model":NAME,"ok":false,"error":TEXT}
// A model this program cannot run (an encoder-only architecture, say) is reported, not fatal.
//
// usage: archs-cycle --devices HRX0[/HRX1] [--tokens 16] [--warmup 2] MODEL.gguf...

#define _GNU_SOURCE
#include "ggml-backend.h"
#include "llama.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Filled by the probe's sched_probe_read: alloc_graph calls and ns, reset calls and ns, nodes of
// the last graph, backends and splits of the last scheduler seen.
struct probe_snapshot {
    long long calls;
    long long ns;
    long long reset_calls;
    long long reset_ns;
    long long last_nodes;
    long long last_backends;
    long long last_splits;
};

typedef void (*probe_read_fn)(struct probe_snapshot *);

static probe_read_fn find_probe(void) {
    union {
        void *        obj;
        probe_read_fn fn;
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
    return llama_decode(ctx, batch);
}

static void run_model(const char * path, ggml_backend_dev_t * devs, int n_tokens, int n_warmup, probe_read_fn probe_read) {
    const char * name = base_name(path);

    struct llama_model_params mp = llama_model_default_params();
    mp.devices                   = devs;
    mp.n_gpu_layers              = 999;
    mp.split_mode                = LLAMA_SPLIT_MODE_LAYER;
    struct llama_model * model   = llama_model_load_from_file(path, mp);
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
    cp.n_ctx                       = 256;
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
    const int prompt  = 32;
    int       pos     = 0;
    int       rc      = decode(ctx, n_vocab, pos, prompt);
    pos += prompt;
    for (int i = 0; rc == 0 && i < n_warmup; i++) {
        rc = decode(ctx, n_vocab, pos++, 1);
    }
    struct probe_snapshot before, after;
    probe_read(&before);
    for (int i = 0; rc == 0 && i < n_tokens; i++) {
        rc = decode(ctx, n_vocab, pos++, 1);
    }
    probe_read(&after);
    if (rc != 0) {
        char what[64];
        snprintf(what, sizeof(what), "llama_decode returned %d", rc);
        report_error(name, what);
    } else if (after.calls - before.calls != n_tokens) {
        // Every token must have gone through the scheduler, or the figure means nothing.
        char what[96];
        snprintf(what, sizeof(what), "%lld alloc_graph calls for %d tokens", after.calls - before.calls, n_tokens);
        report_error(name, what);
    } else {
        fputs("{\"model\":\"", stdout);
        json_str(name);
        printf("\",\"ok\":true,\"backends\":%lld,\"nodes\":%lld,\"splits\":%lld,\"calls\":%lld,\"ns\":%lld,"
               "\"reset_calls\":%lld,\"reset_ns\":%lld}\n",
               after.last_backends, after.last_nodes, after.last_splits, after.calls - before.calls,
               after.ns - before.ns, after.reset_calls - before.reset_calls, after.reset_ns - before.reset_ns);
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
    if (!devices || first == argc || n_tokens < 1 || n_warmup < 0) {
        fprintf(stderr, "usage: archs-cycle --devices DEV[/DEV...] [--tokens N] [--warmup N] MODEL.gguf...\n");
        return 2;
    }
    probe_read_fn probe_read = find_probe();
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
        devs[n_devs++] = dev;
    }
    devs[n_devs] = NULL;

    for (int i = first; i < argc; i++) {
        run_model(argv[i], devs, n_tokens, n_warmup, probe_read);
    }
    return 0;
}
