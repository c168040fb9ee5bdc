/*
 * logits_nmse: per-token logits of a model on given devices against a CPU-only run, with an
 * NMSE bound (issue 13).
 *
 * Greedy text is a poor check of a device whose kernels round differently from the CPU's:
 * one argmax that flips near a tie parts the texts for good, although every logit agreed
 * closely. This program compares the logits themselves. It runs the same token sequence
 * twice, once with the model on the devices named by --dev (every layer) and once on
 * the CPU alone (an empty device list), and computes for every position
 *
 *     NMSE = sum over the vocabulary of (x - ref)^2 / sum of ref^2
 *
 * where ref are the CPU's logits and x the device run's.
 *
 * Both runs see exactly the same tokens (teacher forcing: nothing depends on either run's
 * argmax): the prompt's P tokens as one batch with logits at every position (the prompt
 * path, where matrix products are GEMMs), then N tokens one at a time (the decode path,
 * matrix-vector products), taken from the prompt's tokens in a cycle (without a leading BOS).
 * The default prompt is long enough (more than 32 tokens) for the batch to take the paths
 * backends use for large batches.
 *
 * The runs are sequential, one model loaded at a time, so a small machine holds one copy.
 * Backends are loaded with ggml_backend_load_all(), so GGML_BACKEND_PATH adds one (HRX0).
 *
 * Exit status: 0 when every position's NMSE is at most the bound, 1 when one is not (or is
 * not a number), 2 on a usage, load or decode error (the message says what was wrong).
 *
 * --ref-model FILE runs the reference from another file of the same model: the quantized
 * model dequantized to F32 (`llama-quantize --allow-requantize MODEL OUT F32`), say. The CPU
 * multiplies quantized weights by activations quantized to 8 bits (Q8_0, Q8_1, Q8_K), a
 * device that dequantizes the weights and multiplies by F32 activations does not, so the two
 * runs of one quantized file take different numeric paths and their logits part by about
 * 1e-3 in NMSE with no fault on either side. The same weights dequantized exactly to F32 give
 * the CPU the device's path: weight values the same, activations unrounded.
 *
 * --perturb-token POS is for testing this program: the device run is fed another token
 * (the next id) at position POS, so its logits there must differ from the reference's and the
 * check must fail. It is left out of the usage text, as it makes any run fail.
 */
#define _POSIX_C_SOURCE 200809L

#include "ggml-backend.h"
#include "llama.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ~45 tokens of plain prose with most tokenizers: above the batch size of 32 at which ggml
 * backends switch to their large-batch kernels and llama.cpp offloads host ops. */
static const char *const DEFAULT_PROMPT =
    "The history of the printing press begins in the fifteenth century, when movable metal "
    "type made it possible to copy books far faster than scribes could, and within fifty "
    "years presses were at work in more than two hundred towns.";

/* The most devices --dev may name; more than any machine this runs on has. */
#define MAX_DEVICES 16

struct options {
    const char *model;
    const char *ref_model; /* the reference's file; NULL: model */
    const char *devices; /* comma-separated device names */
    const char *prompt;
    int n_decode;
    double bound;
    bool flash_attn;
    bool no_repack;
    int threads;
    bool verbose;
    long perturb_pos; /* -1: none */
};

/* What one run produced: (n_prompt + n_decode) rows of n_vocab logits. */
struct run_result {
    float *logits;
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: logits_nmse -m MODEL --dev NAME[,NAME...] [--ref-model FILE] [-p TEXT]\n"
            "                   [-n N] [--bound B] [--fa] [-t THREADS] [--no-repack] [-v]\n"
            "  -m MODEL       a GGUF model\n"
            "  --ref-model FILE  the CPU reference runs this file instead of MODEL: the same\n"
            "                 model in other weight types (MODEL dequantized to F32, say);\n"
            "                 its vocabulary must be MODEL's\n"
            "  --dev NAMES    the devices of the compared run (every layer), e.g. HRX0;\n"
            "                 the reference runs on the CPU alone\n"
            "  -p TEXT        the prompt (default: a fixed sentence of about 45 tokens)\n"
            "  -n N           tokens decoded one at a time after the prompt (default 16)\n"
            "  --bound B      the largest NMSE that passes, per position (default 1e-4)\n"
            "  --fa           flash attention on in both runs (default: off in both)\n"
            "  -t THREADS     CPU threads of both runs (default: llama.cpp's)\n"
            "  --no-repack    plain weight layout on the CPU (no repacked buffer types)\n"
            "  -v             llama.cpp's and ggml's log messages below warnings too\n"
            "exit status: 0 every position within the bound, 1 not, 2 usage or load error\n");
}

/* Prints "logits_nmse: MESSAGE" and returns 2, the exit status of usage and load errors. */
static int fail_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("logits_nmse: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

/* A whole decimal number in [lo, hi], or false. */
static bool parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        return false;
    }
    *out = v;
    return true;
}

/* A finite number greater than 0, or false. */
static bool parse_positive(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v <= 0) {
        return false;
    }
    *out = v;
    return true;
}

/* Returns 0 when the arguments are good, else the exit status (2) after a message. */
static int parse_args(int argc, char **argv, struct options *o) {
    *o = (struct options){
        .prompt = DEFAULT_PROMPT, .n_decode = 16, .bound = 1e-4, .threads = 0, .perturb_pos = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* the options that take a value */
        bool takes = !strcmp(a, "-m") || !strcmp(a, "--dev") || !strcmp(a, "-p") ||
                     !strcmp(a, "-n") || !strcmp(a, "--bound") || !strcmp(a, "-t") ||
                     !strcmp(a, "--perturb-token") || !strcmp(a, "--ref-model");
        if (takes && i + 1 >= argc) {
            usage(stderr);
            return fail_usage("%s needs a value", a);
        }
        long v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "-m")) {
            o->model = argv[++i];
        } else if (!strcmp(a, "--ref-model")) {
            o->ref_model = argv[++i];
        } else if (!strcmp(a, "--dev")) {
            o->devices = argv[++i];
        } else if (!strcmp(a, "-p")) {
            o->prompt = argv[++i];
        } else if (!strcmp(a, "-n")) {
            if (!parse_long(argv[++i], 0, 4096, &v)) {
                return fail_usage("-n '%s' is not a whole number from 0 to 4096", argv[i]);
            }
            o->n_decode = (int)v;
        } else if (!strcmp(a, "--bound")) {
            if (!parse_positive(argv[++i], &o->bound)) {
                return fail_usage("--bound '%s' is not a finite number above 0", argv[i]);
            }
        } else if (!strcmp(a, "-t")) {
            if (!parse_long(argv[++i], 1, 1024, &v)) {
                return fail_usage("-t '%s' is not a whole number from 1 to 1024", argv[i]);
            }
            o->threads = (int)v;
        } else if (!strcmp(a, "--perturb-token")) {
            if (!parse_long(argv[++i], 0, 1L << 30, &v)) {
                return fail_usage("--perturb-token '%s' is not a position (a whole number from 0)",
                                  argv[i]);
            }
            o->perturb_pos = v;
        } else if (!strcmp(a, "--fa")) {
            o->flash_attn = true;
        } else if (!strcmp(a, "--no-repack")) {
            o->no_repack = true;
        } else if (!strcmp(a, "-v")) {
            o->verbose = true;
        } else {
            usage(stderr);
            return fail_usage("unknown argument '%s'", a);
        }
    }
    if (!o->model) {
        usage(stderr);
        return fail_usage("no model: -m MODEL is required");
    }
    if (!o->devices || !*o->devices) {
        usage(stderr);
        return fail_usage("no device: --dev NAME is required (the reference is the CPU)");
    }
    return 0;
}

/* The level of the message a GGML_LOG_LEVEL_CONT piece continues. */
static enum ggml_log_level last_level = GGML_LOG_LEVEL_INFO;

/* llama.cpp's and ggml's messages: warnings and errors always, the rest with -v, all on
 * stderr so stdout holds only the comparison. */
static void log_cb(enum ggml_log_level level, const char *text, void *user_data) {
    bool verbose = *(const bool *)user_data;
    if (level != GGML_LOG_LEVEL_CONT) {
        last_level = level;
    }
    if (verbose || last_level >= GGML_LOG_LEVEL_WARN) {
        fputs(text, stderr);
    }
}

/* Fills devs (NULL-terminated) from a comma-separated list of names; returns 0 or 2. */
static int resolve_devices(const char *names, ggml_backend_dev_t *devs) {
    char buf[512];
    if (strlen(names) >= sizeof buf) {
        return fail_usage("--dev: the list of names is too long");
    }
    strcpy(buf, names);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_DEVICES) {
            return fail_usage("--dev: more than %d devices", MAX_DEVICES);
        }
        ggml_backend_dev_t d = ggml_backend_dev_by_name(tok);
        if (!d) {
            fprintf(stderr, "logits_nmse: --dev: no device named '%s'; the devices are:", tok);
            for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
                fprintf(stderr, " %s", ggml_backend_dev_name(ggml_backend_dev_get(i)));
            }
            fprintf(stderr, " (a backend library is added with GGML_BACKEND_PATH)\n");
            return 2;
        }
        /* the reference is the CPU: a CPU device compared with it proves nothing */
        if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_CPU) {
            return fail_usage("--dev: '%s' is a CPU device, the reference itself; name the "
                              "devices to compare with it",
                              tok);
        }
        for (int k = 0; k < n; k++) {
            if (devs[k] == d) {
                return fail_usage("--dev: '%s' is named twice", tok);
            }
        }
        devs[n++] = d;
    }
    if (n == 0) {
        return fail_usage("--dev '%s' names no device", names);
    }
    devs[n] = NULL;
    return 0;
}

/* The file the CPU reference runs: --ref-model, else -m. */
static const char *ref_path(const struct options *o) {
    return o->ref_model ? o->ref_model : o->model;
}

/* Loads the model on devs, or the reference (--ref-model, else the model) on the CPU alone
 * when devs is NULL. */
static struct llama_model *load_model(const struct options *o, ggml_backend_dev_t *devs) {
    static ggml_backend_dev_t none[1] = {NULL};
    struct llama_model_params mp = llama_model_default_params();
    /* an empty list, not NULL: NULL would mean every device there is, HRX0 included */
    mp.devices = devs ? devs : none;
    /* every layer, whatever the model's depth (llama.cpp caps it at the layer count) */
    mp.n_gpu_layers = devs ? 1000000 : 0;
    mp.use_extra_bufts = !o->no_repack;
    return llama_model_load_from_file(devs ? o->model : ref_path(o), mp);
}

/*
 * Decodes tokens[0..n_prompt) as one batch and then tokens[n_prompt..n_total) one at a
 * time, and copies every position's logits into out (n_total rows of n_vocab). When
 * perturb_pos is a position, that token is replaced by the next id. Returns 0 or 2.
 */
static int run(const struct options *o, struct llama_model *model, const char *what,
               const llama_token *tokens, int n_prompt, int n_total, long perturb_pos,
               float *out) {
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_total;
    /* the whole prompt in one physical batch: one GEMM per weight */
    cp.n_batch = (uint32_t)n_prompt;
    cp.n_ubatch = (uint32_t)n_prompt;
    cp.n_seq_max = 1;
    if (o->threads > 0) {
        cp.n_threads = o->threads;
        cp.n_threads_batch = o->threads;
    }
    cp.flash_attn_type =
        o->flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        return fail_usage("%s run: llama_init_from_model failed (see the messages above)", what);
    }
    int rc = 0;
    struct llama_batch batch = llama_batch_init(n_prompt, 0, 1);
    for (int i = 0; i < n_total && rc == 0; i++) {
        /* the prompt at i == 0 as one batch, then one token per decode */
        const int n = i == 0 ? n_prompt : 1;
        batch.n_tokens = n;
        for (int j = 0; j < n; j++) {
            llama_token t = tokens[i + j];
            if (perturb_pos == i + j) {
                t = (t + 1) % n_vocab;
            }
            batch.token[j] = t;
            batch.pos[j] = i + j;
            batch.n_seq_id[j] = 1;
            batch.seq_id[j][0] = 0;
            batch.logits[j] = 1;
        }
        int d = llama_decode(ctx, batch);
        if (d != 0) {
            rc = fail_usage("%s run: llama_decode returned %d at position %d", what, d, i);
            break;
        }
        for (int j = 0; j < n; j++) {
            const float *l = llama_get_logits_ith(ctx, j);
            if (!l) {
                rc = fail_usage("%s run: no logits at position %d", what, i + j);
                break;
            }
            memcpy(out + (size_t)(i + j) * (size_t)n_vocab, l, sizeof(float) * (size_t)n_vocab);
        }
        i += n - 1;
    }
    llama_batch_free(batch);
    llama_free(ctx);
    return rc;
}

/* Whether vocab splits text into exactly the n tokens of want. */
static bool same_tokens(const struct llama_vocab *vocab, const char *text, const llama_token *want,
                        int n) {
    llama_token *got = malloc(sizeof(llama_token) * (size_t)(n + 1));
    if (!got) {
        return false;
    }
    /* room for one more than want: a longer split comes back as a count above n */
    int m = llama_tokenize(vocab, text, (int)strlen(text), got, n + 1, true, false);
    bool same = m == n && memcmp(got, want, sizeof(llama_token) * (size_t)n) == 0;
    free(got);
    return same;
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) {
        if (v[i] > v[best]) {
            best = i;
        }
    }
    return best;
}

/* sum((x - ref)^2) / sum(ref^2) in double; NaN when x or ref has a non-finite value, so
 * that such a position fails. */
static double nmse(const float *x, const float *ref, int n) {
    double err = 0, norm = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(ref[i])) {
            return NAN;
        }
        double d = (double)x[i] - (double)ref[i];
        err += d * d;
        norm += (double)ref[i] * (double)ref[i];
    }
    if (norm == 0) {
        /* a reference of zeros is no reference: fail the position */
        return NAN;
    }
    return err / norm;
}

int main(int argc, char **argv) {
    struct options o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0) {
        return rc;
    }
    llama_log_set(log_cb, &o.verbose);
    /* before llama_backend_init, which loads backends only when none is registered: with
     * the CPU built in, GGML_BACKEND_PATH would otherwise never be read */
    ggml_backend_load_all();
    llama_backend_init();

    ggml_backend_dev_t devs[MAX_DEVICES + 1];
    if ((rc = resolve_devices(o.devices, devs)) != 0) {
        return rc;
    }

    /* every exit after this point goes through `done`, which frees what was made */
    struct llama_model *ref_model = NULL, *dev_model = NULL;
    llama_token *prompt = NULL, *tokens = NULL;
    float *ref = NULL, *dev = NULL;
    bool pass = false;

    /* the reference first: its vocabulary gives the tokens both runs are fed */
    ref_model = load_model(&o, NULL);
    if (!ref_model) {
        rc = fail_usage("cannot load the model '%s' (see the messages above)", ref_path(&o));
        goto done;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(ref_model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const int text_len = (int)strlen(o.prompt);
    /* a guess; llama_tokenize says how many it needs when that is too few */
    int cap = text_len + 8;
    prompt = malloc(sizeof(llama_token) * (size_t)cap);
    int n_prompt = prompt ? llama_tokenize(vocab, o.prompt, text_len, prompt, cap, true, false) : 0;
    if (n_prompt < 0) {
        cap = -n_prompt;
        free(prompt);
        prompt = malloc(sizeof(llama_token) * (size_t)cap);
        n_prompt = prompt ? llama_tokenize(vocab, o.prompt, text_len, prompt, cap, true, false) : 0;
    }
    if (n_prompt <= 0) {
        rc = fail_usage("the prompt gives no tokens (llama_tokenize: %d)", n_prompt);
        goto done;
    }
    /* one batch of n_prompt and a context of every position: keep within what the model
     * was trained for (and memory, which grows with the square of the batch) */
    const int n_ctx_train = llama_model_n_ctx_train(ref_model);
    if ((long)n_prompt + o.n_decode > n_ctx_train) {
        rc = fail_usage("the prompt (%d tokens) and -n %d make %ld positions, more than the "
                        "model's training context of %d",
                        n_prompt, o.n_decode, (long)n_prompt + o.n_decode, n_ctx_train);
        goto done;
    }
    /* the decode tokens: the prompt's again, in a cycle, without a leading BOS (a BOS in
     * mid-text would be an odd input, though a valid one) */
    const int skip =
        n_prompt > 1 && llama_vocab_get_add_bos(vocab) && prompt[0] == llama_vocab_bos(vocab);
    const int n_total = n_prompt + o.n_decode;
    tokens = malloc(sizeof(llama_token) * (size_t)n_total);
    const size_t n_logits = (size_t)n_total * (size_t)n_vocab;
    ref = malloc(sizeof(float) * n_logits);
    dev = malloc(sizeof(float) * n_logits);
    if (!tokens || !ref || !dev) {
        rc = fail_usage("out of memory for %d positions of %d logits", n_total, n_vocab);
        goto done;
    }
    memcpy(tokens, prompt, sizeof(llama_token) * (size_t)n_prompt);
    for (int k = 0; k < o.n_decode; k++) {
        tokens[n_prompt + k] = prompt[skip + k % (n_prompt - skip)];
    }
    if (o.perturb_pos >= n_total) {
        rc = fail_usage("--perturb-token %ld is past the last position (%d)", o.perturb_pos,
                        n_total - 1);
        goto done;
    }

    printf("model %s; devices %s against the CPU alone%s%s; prompt %d tokens, %d decoded one at "
           "a time; vocabulary %d; flash attention %s\n",
           o.model, o.devices, o.ref_model ? " running " : "", o.ref_model ? o.ref_model : "",
           n_prompt, o.n_decode, n_vocab, o.flash_attn ? "on" : "off");
    if (o.perturb_pos >= 0) {
        printf("perturbed: the %s run is fed token %d instead of %d at position %ld\n", o.devices,
               (tokens[o.perturb_pos] + 1) % n_vocab, tokens[o.perturb_pos], o.perturb_pos);
    }
    fflush(stdout);

    rc = run(&o, ref_model, "CPU", tokens, n_prompt, n_total, -1, ref);
    llama_model_free(ref_model);
    ref_model = NULL;
    if (rc != 0) {
        goto done;
    }
    dev_model = load_model(&o, devs);
    if (!dev_model) {
        rc = fail_usage("cannot load the model '%s' on %s (see the messages above)", o.model,
                        o.devices);
        goto done;
    }
    if (llama_vocab_n_tokens(llama_model_get_vocab(dev_model)) != n_vocab) {
        rc = fail_usage("the vocabularies differ: %d tokens in '%s', %d in '%s'",
                        llama_vocab_n_tokens(llama_model_get_vocab(dev_model)), o.model, n_vocab,
                        ref_path(&o));
        goto done;
    }
    /* another file must also split the prompt into the same tokens: the token ids fed to
     * both runs were taken from the reference's vocabulary */
    if (o.ref_model && !same_tokens(llama_model_get_vocab(dev_model), o.prompt, prompt, n_prompt)) {
        rc = fail_usage("'%s' and '%s' split the prompt into different tokens: not the same "
                        "vocabulary",
                        o.model, o.ref_model);
        goto done;
    }
    rc = run(&o, dev_model, o.devices, tokens, n_prompt, n_total, o.perturb_pos, dev);
    llama_model_free(dev_model);
    dev_model = NULL;
    if (rc != 0) {
        goto done;
    }

    double max = -1, sum = 0;
    int max_at = 0, same_argmax = 0;
    pass = true;
    for (int i = 0; i < n_total; i++) {
        const float *x = dev + (size_t)i * (size_t)n_vocab;
        const float *r = ref + (size_t)i * (size_t)n_vocab;
        double e = nmse(x, r, n_vocab);
        /* NaN compares false both ways: written so that it fails */
        bool ok = e <= o.bound;
        pass = pass && ok;
        /* the first NaN stays the maximum */
        if (!isnan(max) && (isnan(e) || e > max)) {
            max = e;
            max_at = i;
        }
        sum += e;
        same_argmax += argmax(x, n_vocab) == argmax(r, n_vocab);
        printf("position %3d %-6s token %6d  nmse %.3e  argmax %s %d, CPU %d%s\n", i,
               i < n_prompt ? "prompt" : "decode", tokens[i], e, o.devices, argmax(x, n_vocab),
               argmax(r, n_vocab), ok ? "" : "  OVER THE BOUND");
    }
    printf("argmax: the same in both runs at %d of %d positions\n", same_argmax, n_total);
    printf("logits NMSE: positions %d, max %.3e at position %d, mean %.3e; bound %.1e: %s\n",
           n_total, max, max_at, sum / n_total, o.bound, pass ? "PASS" : "FAIL");
    rc = pass ? 0 : 1;
done:
    if (ref_model) {
        llama_model_free(ref_model);
    }
    if (dev_model) {
        llama_model_free(dev_model);
    }
    free(prompt);
    free(tokens);
    free(ref);
    free(dev);
    llama_backend_free();
    return rc;
}
