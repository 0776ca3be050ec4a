/* Read bandwidth of this machine, for the decode bound in docs/BENCHMARKS.md: THREADS threads
 * stream over a buffer of MIB MiB (each its own contiguous share), repeatedly, as a decode step
 * streams the weights; prints the median of 9 passes. Use the model's size for MIB to see what a
 * decode step can get (the L3 of a large server part may hold much of it), and 1024 for DRAM.
 *   gcc -O2 -mavx2 -pthread tests/bench/membw.c -o /tmp/membw && /tmp/membw 2 96 */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct job {
    const char *p;
    size_t n;
    long long sink;
} job;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *reader(void *arg) {
    job *j = arg;
    const __m256i *v = (const __m256i *)(const void *)j->p;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 4 <= j->n / 32; i += 4) {
        a = _mm256_add_epi64(a, _mm256_load_si256(v + i));
        b = _mm256_add_epi64(b, _mm256_load_si256(v + i + 1));
        c = _mm256_add_epi64(c, _mm256_load_si256(v + i + 2));
        d = _mm256_add_epi64(d, _mm256_load_si256(v + i + 3));
    }
    long long o[4];
    _mm256_storeu_si256((__m256i *)(void *)o, _mm256_add_epi64(_mm256_add_epi64(a, b),
                                                                _mm256_add_epi64(c, d)));
    j->sink = o[0] + o[1] + o[2] + o[3];
    return NULL;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const int nth = argc > 1 ? atoi(argv[1]) : 2;
    const size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    if (nth < 1 || nth > 64 || mib < 1) return 2;
    const size_t n = mib << 20;
    char *buf = aligned_alloc(64, n);
    if (!buf) return 1;
    memset(buf, 1, n);
    double gbs[9];
    long long sink = 0;
    for (int r = 0; r < 9; r++) {
        pthread_t th[64];
        job jobs[64];
        const double t0 = now();
        for (int i = 0; i < nth; i++) {
            jobs[i] = (job){buf + (n / (size_t)nth) * (size_t)i, n / (size_t)nth, 0};
            pthread_create(&th[i], NULL, reader, &jobs[i]);
        }
        for (int i = 0; i < nth; i++) {
            pthread_join(th[i], NULL);
            sink += jobs[i].sink;
        }
        gbs[r] = (double)n / (now() - t0) / 1e9;
    }
    qsort(gbs, 9, sizeof gbs[0], cmp);
    printf("threads %d buffer %zu MiB: read %.2f GB/s (median of 9; min %.2f max %.2f)%s\n", nth,
           mib, gbs[4], gbs[0], gbs[8], sink == 42 ? " " : "");
    free(buf);
    return 0;
}
