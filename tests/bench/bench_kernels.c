/* Throughput of one backend's quantized product (gt_backend.matmul_q) on random weights of a given
 * type and shape, for a given token count, on one thread, weights in cache: the figures behind
 * "GMAC/s per thread" in docs/BENCHMARKS.md.
 *   scons variant=release && gcc -O2 -std=c17 -Inative/src -Inative/include \
 *     tests/bench/bench_kernels.c build/release/libgeist_static.a -lm -pthread -o /tmp/bench_kernels
 *   /tmp/bench_kernels TYPE N_IN N_OUT N_TOK [BACKEND]     e.g. 3 576 1536 8 (Q4_1, cpu_x86) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "util/ggml_types.h"
#include "util/util.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s TYPE N_IN N_OUT N_TOK [BACKEND]\n", argv[0]);
        return 2;
    }
    const uint32_t type = (uint32_t)atoi(argv[1]);
    const int64_t n_in = atoll(argv[2]), n_out = atoll(argv[3]), n_tok = atoll(argv[4]);
    const gt_backend *be = gt_backend_find(argc > 5 ? argv[5] : "cpu_x86");
    const gt_type_info *ti = gt_type_get(type);
    if (!be || !be->available() || !be->matmul_q || !ti || ti->block <= 1 || n_in % ti->block) {
        fprintf(stderr, "unsupported backend, type or size\n");
        return 2;
    }
    const size_t rb = (size_t)(n_in / ti->block) * ti->bytes;
    uint8_t *w = malloc(rb * (size_t)n_out);
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok));
    float *y = malloc(sizeof(float) * (size_t)(n_out * n_tok));
    const size_t ab = be->act_row_bytes(type, n_in);
    void *xq = aligned_alloc(64, (ab * (size_t)n_tok + 63) & ~(size_t)63);
    if (!w || !x || !y || !xq) return 1;
    srand(1);
    for (size_t i = 0; i < rb * (size_t)n_out; i++) w[i] = (uint8_t)rand();
    /* small finite scales where the random bytes put the f16 fields */
    const uint16_t h = gt_f32_to_f16(0.01f);
    for (int64_t r = 0; r < n_out; r++)
        for (int64_t b = 0; b < n_in / ti->block; b++) {
            uint8_t *p = w + (size_t)r * rb + (size_t)b * ti->bytes;
            const int at = type == GT_TYPE_Q6_K   ? 208
                           : type == GT_TYPE_Q3_K ? 108
                           : type == GT_TYPE_Q2_K ? 80
                                                  : 0;
            memcpy(p + at, &h, 2);
            if (type == GT_TYPE_Q4_1 || type == GT_TYPE_Q5_1 || type == GT_TYPE_Q4_K ||
                type == GT_TYPE_Q5_K || type == GT_TYPE_Q2_K)
                memcpy(p + at + 2, &h, 2);
        }
    for (int64_t i = 0; i < n_in * n_tok; i++) x[i] = (float)(rand() % 2001 - 1000) / 1000.0f;
    be->quantize_acts(type, x, n_tok, n_in, xq);
    const gt_weight W = {w, type, n_in, n_out, rb};
    int reps = 0;
    const double t0 = now();
    double t = 0.0;
    do { /* tasks of 64 rows, as the forward pass gives large matrices */
        for (int64_t r0 = 0; r0 < n_out; r0 += 64)
            be->matmul_q(&W, xq, n_tok, y, n_out, r0, r0 + 64 < n_out ? r0 + 64 : n_out);
        reps++;
        t = now() - t0;
    } while (t < 1.0);
    printf("%s type %u n_in %lld n_out %lld tokens %lld: %.1f GMAC/s (1 thread), %.3f ms/call\n",
           be->name, type, (long long)n_in, (long long)n_out, (long long)n_tok,
           (double)n_in * (double)n_out * (double)n_tok * reps / t / 1e9, t / reps * 1e3);
    free(w);
    free(x);
    free(y);
    free(xq);
    return 0;
}
