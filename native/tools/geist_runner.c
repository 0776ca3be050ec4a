/* geist_runner: a Python-free check of a whole model on any platform (qemu, wine, a device).
 *
 *   geist_runner [-b BACKEND] [-n TOKENS] [-t THREADS] [-e EXPECTED] MODEL PROMPTS
 *
 * For each line of PROMPTS ("\n" written as a backslash and n), tokenizes it (special tokens
 * added as the model's metadata says), prefills a fresh session (F16 KV), then takes TOKENS
 * greedy steps (argmax, lowest id on ties). Prints one line per prompt: the greedy ids, then
 * "#" and an FNV-1a 64 hash of the bytes of every logits row it looked at, so two runs agree
 * exactly when their logits are bit-identical. With -e, compares its lines with EXPECTED (the
 * output of an earlier run, e.g. cpu_scalar on x86-64) and exits 1 on any difference.
 * Only geist.h is used. Exit status: 0 ok, 1 mismatch, 2 usage or a failed call. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geist.h"

#define LINE_CAP 8192
#define OUT_CAP 65536

static int fail(const char *what, geist_status st) {
    char msg[512];
    geist_last_error(msg, sizeof msg);
    fprintf(stderr, "geist_runner: %s: %s: %s\n", what, geist_status_name(st), msg);
    return 2;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* "\n" (two characters) -> newline; strips the line end */
static size_t unescape(char *s) {
    size_t o = 0;
    for (size_t i = 0; s[i] != '\0' && s[i] != '\n' && s[i] != '\r'; i++) {
        if (s[i] == '\\' && s[i + 1] == 'n') {
            s[o++] = '\n';
            i++;
        } else {
            s[o++] = s[i];
        }
    }
    s[o] = '\0';
    return o;
}

static int run_prompt(geist_model *m, const char *text, size_t len, int n_tokens, char *out,
                      size_t cap) {
    const int32_t n_vocab = geist_model_n_vocab(m);
    size_t n_ids = 0;
    const size_t id_cap = len + 16;
    int32_t *ids = malloc(id_cap * sizeof *ids);
    if (!ids) return fail("out of memory", GEIST_ERR_OUT_OF_MEMORY);
    geist_status st = geist_tokenize(m, text, len, GEIST_TOKENIZE_ADD_SPECIAL, ids, id_cap, &n_ids);
    if (st) {
        free(ids);
        return fail("tokenize", st);
    }
    geist_session_options so;
    geist_session_options_default(&so);
    so.max_seq_len = (int32_t)n_ids + n_tokens + 1;
    so.kv_mode = GEIST_KV_F16;
    geist_session *s = NULL;
    st = geist_session_create(m, &so, &s);
    if (!st) st = geist_session_prefill(s, ids, n_ids);
    free(ids);
    if (st) {
        geist_session_free(s);
        return fail("prefill", st);
    }
    uint64_t h = 0xcbf29ce484222325ull;
    size_t used = 0;
    out[0] = '\0';
    for (int k = 0; k < n_tokens; k++) {
        const float *lg = NULL;
        st = geist_session_logits(s, &lg);
        if (st) break;
        h = fnv1a(h, lg, (size_t)n_vocab * sizeof *lg);
        int32_t best = 0;
        for (int32_t v = 1; v < n_vocab; v++)
            if (lg[v] > lg[best]) best = v;
        used += (size_t)snprintf(out + used, cap - used, "%s%d", k ? " " : "", (int)best);
        if (used >= cap) break;
        st = geist_session_decode(s, best);
        if (st) break;
    }
    geist_session_free(s);
    if (st) return fail("decode", st);
    if (used < cap) snprintf(out + used, cap - used, " #%016llx", (unsigned long long)h);
    return 0;
}

int main(int argc, char **argv) {
    const char *backend = NULL, *expected = NULL;
    int n_tokens = 32, n_threads = 1, i = 1;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (strcmp(argv[i], "-b") == 0) backend = argv[i + 1];
        else if (strcmp(argv[i], "-n") == 0) n_tokens = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-t") == 0) n_threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-e") == 0) expected = argv[i + 1];
        else break;
    }
    if (argc - i != 2 || n_tokens < 1 || n_threads < 1) {
        fprintf(stderr, "usage: geist_runner [-b BACKEND] [-n TOKENS] [-t THREADS] [-e EXPECTED] "
                        "MODEL PROMPTS\n");
        return 2;
    }
    geist_engine_options eo;
    geist_engine_options_default(&eo);
    eo.backend = backend;
    eo.n_threads = n_threads;
    geist_engine *e = NULL;
    geist_status st = geist_engine_create(&eo, &e);
    if (st) return fail("engine", st);
    fprintf(stderr, "geist_runner: backend %s\n", geist_engine_backend_name(e));
    geist_model *m = NULL;
    st = geist_model_load_file(e, argv[i], NULL, &m);
    if (st) {
        geist_engine_free(e);
        return fail(argv[i], st);
    }
    FILE *pf = fopen(argv[i + 1], "rb");
    FILE *ef = expected ? fopen(expected, "rb") : NULL;
    int rc = 0;
    if (!pf || (expected && !ef)) {
        fprintf(stderr, "geist_runner: cannot open %s\n", !pf ? argv[i + 1] : expected);
        rc = 2;
    }
    static char line[LINE_CAP], out[OUT_CAP], want[OUT_CAP];
    for (int n = 0; rc != 2 && fgets(line, sizeof line, pf); n++) {
        const size_t len = unescape(line);
        if (len == 0) continue;
        const int r = run_prompt(m, line, len, n_tokens, out, sizeof out);
        if (r) {
            rc = r;
            break;
        }
        printf("%s\n", out);
        fflush(stdout);
        if (ef) {
            if (!fgets(want, sizeof want, ef)) want[0] = '\0';
            want[strcspn(want, "\r\n")] = '\0';
            if (strcmp(want, out) != 0) {
                fprintf(stderr, "geist_runner: prompt %d differs\n  want %s\n  got  %s\n", n, want,
                        out);
                rc = 1;
            }
        }
    }
    if (pf) fclose(pf);
    if (ef) fclose(ef);
    geist_model_free(m);
    geist_engine_free(e);
    if (rc == 0 && expected) fprintf(stderr, "geist_runner: all prompts match %s\n", expected);
    return rc;
}
