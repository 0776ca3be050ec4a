/* Cost of one worker-pool job (gt_pool_run) with trivial tasks on 2 threads: the hand-off price
 * behind docs/BENCHMARKS.md's batched-step analysis.
 *   scons variant=release && gcc -O2 -std=c17 -Inative/src -Inative/include \
 *     tests/bench/bench_pool.c build/release/libgeist_static.a -lm -pthread -o /tmp/bench_pool */
#include <stdio.h>
#include <time.h>

#include "util/pool.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void task(void *ctx, int64_t i, float *scratch) {
    (void)scratch;
    volatile int *x = ctx;
    x[i & 7]++;
}

int main(void) {
    gt_pool *p = gt_pool_create(2);
    if (!p) return 1;
    float scratch[16];
    volatile int x[8] = {0};
    for (int n = 2; n <= 128; n *= 4) {
        long reps = 0;
        const double t0 = now();
        while (now() - t0 < 1.0) {
            for (int i = 0; i < 1000; i++) gt_pool_run(p, n, 0, task, (void *)x, scratch);
            reps += 1000;
        }
        printf("%3d tasks: %.2f us per job\n", n, (now() - t0) / (double)reps * 1e6);
    }
    gt_pool_free(p);
    return 0;
}
