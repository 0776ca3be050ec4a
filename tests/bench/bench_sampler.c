/* One draw of the sampler (sample/sampler.c) over a vocabulary's logits, with plain loops and with
 * AVX2, for greedy, the default chain (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05),
 * top-p without top-k, and without min-p either: the per-token host price that
 * docs/BENCHMARKS.md's sampling section gives.
 * Logits: normal-ish values from a fixed seed (the order of a real row: no rising run).
 *   scons variant=release && gcc -O2 -std=c17 -Inative/src -Inative/include \
 *     tests/bench/bench_sampler.c build/release/libgeist_static.a -lm -pthread -o /tmp/bench_sampler
 *   /tmp/bench_sampler [n_vocab ...]     (default: 49152 262144, SmolLM2's and Gemma 3's) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sample/sampler.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* the median of 201 draws, ms */
static double time_draws(geist_sampler *s, const float *l) {
    enum { N = 201 };
    double t[N];
    gt_err err = {0};
    int32_t id = 0;
    for (int r = 0; r < N; r++) {
        const double t0 = now_ms();
        (void)gt_sampler_sample(s, l, &id, &err);
        t[r] = now_ms() - t0;
    }
    for (int i = 1; i < N; i++) /* insertion sort: 201 values */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            const double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return t[N / 2];
}

int main(int argc, char **argv) {
    const int32_t defaults[2] = {49152, 262144};
    const int n_sizes = argc > 1 ? argc - 1 : 2;
    for (int a = 0; a < n_sizes; a++) {
        const int32_t n = argc > 1 ? atoi(argv[a + 1]) : defaults[a];
        if (n <= 0) return 1;
        float *l = malloc((size_t)n * sizeof *l);
        if (!l) return 1;
        uint32_t x = 1;
        for (int32_t i = 0; i < n; i++) { /* the sum of 4 uniforms: a bell around 0, sd ~1.7 */
            float v = -2.0f;
            for (int k = 0; k < 4; k++) {
                x = x * 1664525u + 1013904223u;
                v += (float)(x >> 8) * 0x1.0p-24f;
            }
            l[i] = v * 3.0f;
        }
        struct {
            const char *name;
            float temperature, top_p;
            int32_t top_k;
            float min_p;
        } chains[4] = {{"greedy", 0.0f, 0.95f, 40, 0.05f}, {"default", 0.8f, 0.95f, 40, 0.05f},
                       {"top_p 0.95, top_k 0", 0.8f, 0.95f, 0, 0.05f},
                       {"... and min_p 0", 0.8f, 0.95f, 0, 0.0f}};
        for (int c = 0; c < 4; c++) {
            geist_sampler_options o;
            gt_sampler_options_default(&o);
            o.temperature = chains[c].temperature;
            o.top_p = chains[c].top_p;
            o.top_k = chains[c].top_k;
            o.min_p = chains[c].min_p;
            geist_sampler *s = NULL;
            gt_err err = {0};
            if (gt_sampler_create(n, &o, &s, &err) != GEIST_OK) return 1;
            gt_sampler_set_simd(s, GT_SIMD_NONE);
            const double plain = time_draws(s, l);
            gt_sampler_set_simd(s, GT_SIMD_AVX2);
            const double simd = time_draws(s, l);
            printf("n_vocab %7d  %-20s plain %.3f ms  avx2 %.3f ms\n", n, chains[c].name, plain,
                   simd);
            gt_sampler_free(s);
        }
        free(l);
    }
    return 0;
}
