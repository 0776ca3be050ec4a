/* Shared helpers of the libFuzzer targets (test code, never linked into the library).
 *
 * Model files are named on the fuzzer's command line with flags libFuzzer itself ignores
 * (they start with "--"): --model=PATH, --model2=PATH. Without a flag, a file named
 * <flag>.gguf next to the fuzzer binary is used (scripts/fuzz.sh links them there). */
#ifndef GEIST_FUZZ_COMMON_H
#define GEIST_FUZZ_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "geist.h"

/* The value of --name=VALUE on the command line, else <dir of the binary>/<name>.gguf. */
__attribute__((unused)) static const char *fz_path(int *argc, char ***argv, const char *name) {
    static char buf[4][4096];
    static int used;
    char flag[64];
    snprintf(flag, sizeof flag, "--%s=", name);
    for (int i = 1; i < *argc; i++)
        if (strncmp((*argv)[i], flag, strlen(flag)) == 0) return (*argv)[i] + strlen(flag);
    char *out = buf[used++ & 3];
    ssize_t n = readlink("/proc/self/exe", out, 4000);
    if (n <= 0) return NULL;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash) return NULL;
    snprintf(slash + 1, 4096 - (size_t)(slash + 1 - out), "%s.gguf", name);
    return out;
}

__attribute__((unused)) static void fz_die(const char *what) {
    char msg[512];
    geist_last_error(msg, sizeof msg);
    fprintf(stderr, "fuzz setup failed: %s: %s\n", what, msg);
    exit(2);
}

__attribute__((unused)) static geist_engine *fz_engine(void) {
    geist_engine_options eo;
    geist_engine_options_default(&eo);
    eo.backend = "cpu_scalar";
    eo.n_threads = 1;
    geist_engine *e = NULL;
    if (geist_engine_create(&eo, &e)) fz_die("geist_engine_create");
    return e;
}

__attribute__((unused)) static geist_model *fz_load(geist_engine *e, const char *path, const char *what) {
    geist_model *m = NULL;
    if (!path) fz_die(what);
    if (geist_model_load_file(e, path, NULL, &m)) {
        fprintf(stderr, "(loading %s from %s; pass --%s=PATH)\n", what, path, what);
        fz_die("geist_model_load_file");
    }
    return m;
}

/* Aborts (a finding) when cond is false. */
#define FZ_CHECK(cond)                                                                         \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "FUZZ CHECK FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* A cursor over the input bytes. */
typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in;

__attribute__((unused)) static uint8_t fz_u8(fz_in *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}
__attribute__((unused)) static uint32_t fz_u32(fz_in *in) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)fz_u8(in) << (8 * i);
    return v;
}
__attribute__((unused)) static float fz_f32(fz_in *in) {
    uint32_t b = fz_u32(in);
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

#endif
