/* Model-level bad input through the public API, meant for the ASan+UBSan build with leak
 * detection: a real GGUF (argv[1]) is loaded, then copies with a renamed required key, an
 * unknown architecture, a bad tensor type, a shape mismatch and truncations at 20 cut points must
 * each fail with a clear message, leak nothing, and leave later loads working.
 * Usage: test_model_load MODEL.gguf   (without an argument it prints a note and passes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geist.h"

static int failures;

#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            failures++;                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                  \
            fprintf(stderr, "\n");                         \
        }                                                  \
    } while (0)

static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* Replaces the first occurrence of n bytes `from` in buf with `to`. */
static int patch_n(unsigned char *buf, size_t size, const char *from, const char *to, size_t n) {
    for (size_t i = 0; i + n <= size; i++) {
        if (memcmp(buf + i, from, n) == 0) {
            memcpy(buf + i, to, n);
            return 1;
        }
    }
    return 0;
}

static int patch(unsigned char *buf, size_t size, const char *from, const char *to) {
    return patch_n(buf, size, from, to, strlen(from));
}

/* Loads a private exact-size copy (so ASan sees any over-read); expects failure with status and
 * a message containing `word`. */
static void expect_fail(geist_engine *e, const unsigned char *data, size_t size,
                        geist_status want, const char *word, const char *what) {
    unsigned char *copy = malloc(size ? size : 1);
    memcpy(copy, data, size);
    geist_model *m = NULL;
    geist_status st = geist_model_load_memory(e, copy, size, NULL, &m);
    char msg[512];
    geist_last_error(msg, sizeof msg);
    CHECK(st == want, "%s: status %s, expected %s (%s)", what, geist_status_name(st),
          geist_status_name(want), msg);
    CHECK(m == NULL, "%s: model handle written on failure", what);
    CHECK(word == NULL || strstr(msg, word) != NULL, "%s: message '%s' lacks '%s'", what, msg,
          word);
    if (m) geist_model_free(m);
    free(copy);
}

static void expect_loads(geist_engine *e, const unsigned char *data, size_t size) {
    geist_model *m = NULL;
    geist_status st = geist_model_load_memory(e, data, size, NULL, &m);
    CHECK(st == GEIST_OK, "valid model failed to load");
    if (st) return;
    geist_session *s = NULL;
    geist_session_options o;
    geist_session_options_default(&o);
    o.max_seq_len = 8;
    CHECK(geist_session_create(m, &o, &s) == GEIST_OK, "session");
    int32_t ids[3] = {1, 2, 3};
    CHECK(geist_session_prefill(s, ids, 3) == GEIST_OK, "prefill");
    int32_t big[9] = {0};
    CHECK(geist_session_prefill(s, big, 9) == GEIST_ERR_CAPACITY, "cap");
    geist_session_free(s);
    geist_model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("test_model_load: no model given (pass a .gguf path); nothing to do\n");
        return 0;
    }
    size_t size = 0;
    unsigned char *orig = read_file(argv[1], &size);
    if (!orig) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 1;
    }
    geist_engine_options eo;
    geist_engine_options_default(&eo);
    eo.backend = "cpu_scalar";
    eo.n_threads = 1;
    geist_engine *e = NULL;
    if (geist_engine_create(&eo, &e) != GEIST_OK) return 1;

    expect_loads(e, orig, size);
    unsigned char *buf = malloc(size);

    memcpy(buf, orig, size);
    CHECK(patch(buf, size, ".block_count", ".block_cXunt"), "patch key");
    expect_fail(e, buf, size, GEIST_ERR_BAD_FORMAT, "block_count", "missing key");

    memcpy(buf, orig, size);
    /* the value of general.architecture: key, u32 type, u64 length, then the bytes: make its
     * first letter an 'x' ("xlama", "xemma3") */
    {
        const char *key = "general.architecture";
        unsigned char *hit = NULL;
        for (size_t i = 0; i + strlen(key) + 13 <= size && !hit; i++)
            if (memcmp(buf + i, key, strlen(key)) == 0) hit = buf + i + strlen(key) + 12;
        CHECK(hit != NULL, "find arch");
        if (hit) *hit = 'x';
    }
    expect_fail(e, buf, size, GEIST_ERR_UNSUPPORTED, "unknown architecture 'x", "unknown architecture");

    memcpy(buf, orig, size);
    CHECK(patch(buf, size, "blk.0.attn_q.weight", "blk.0.attn_Q.weight"), "patch tensor");
    expect_fail(e, buf, size, GEIST_ERR_BAD_FORMAT, "attn_q", "missing tensor");

    memcpy(buf, orig, size);
    CHECK(patch(buf, size, "GGUF", "GGUX"), "patch magic");
    expect_fail(e, buf, size, GEIST_ERR_BAD_FORMAT, NULL, "magic");

    /* truncations: 20 cut points spread over the header, metadata, tensor table and data */
    for (int i = 1; i <= 20; i++) {
        size_t cut = (size_t)((double)size * (double)i / 21.0);
        if (i <= 10) cut = (size_t)(i * 180000 / 10); /* half of them inside the header */
        char what[64];
        snprintf(what, sizeof what, "truncated at %zu", cut);
        expect_fail(e, orig, cut, GEIST_ERR_BAD_FORMAT, NULL, what);
    }
    expect_fail(e, orig, 0, GEIST_ERR_BAD_FORMAT, NULL, "empty");

    expect_loads(e, orig, size); /* nothing global broke */
    free(buf);
    free(orig);
    geist_engine_free(e);
    if (failures) {
        fprintf(stderr, "test_model_load: %d failures\n", failures);
        return 1;
    }
    printf("test_model_load: all checks passed\n");
    return 0;
}
