/* The worker pool (util/pool.c) under many short jobs: every task of every job runs exactly once,
 * and no job is left waiting. Jobs of 1-8 tasks, some of them long (~0.3 ms of work: the caller
 * runs out of its spin and sleeps until a worker finishes); then 100,000 jobs of 2 tasks, one of
 * them 0-3,000 dependent float steps, so that the caller's going to sleep and the worker's
 * finishing meet: under qemu's aarch64 emulation the pool's earlier wake-up (a pair of seq_cst
 * accesses) lost the wake-up there and both threads slept for good, within 1-160 k such jobs
 * (the platform suites run this test under qemu and wine too). Threads: 2 and 4. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/pool.h"

#include "check.h"

#define MAX_JOB_TASKS 8

typedef struct job {
    atomic_int runs[MAX_JOB_TASKS];
    int32_t slow;  /* the task that works, or -1 */
    int32_t iters; /* its dependent float steps */
    volatile float sink;
} job;

static void task(void *ctx, int64_t t, float *scratch) {
    job *j = ctx;
    (void)scratch;
    atomic_fetch_add_explicit(&j->runs[t], 1, memory_order_relaxed);
    if (t == j->slow) {
        float x = 1.0f;
        for (int32_t i = 0; i < j->iters; i++) x = x * 0.999999f + 1e-7f;
        j->sink = x;
    }
}

/* n_jobs jobs: `racing`, 2 tasks with 0-2,999 steps in one; else 1-8 tasks, one in 16 jobs
 * with a task of 200,000 steps */
static void run_jobs(int32_t threads, int32_t n_jobs, bool racing) {
    gt_pool *p = gt_pool_create(threads);
    CHECK(p != NULL);
    if (!p) return;
    CHECK(gt_pool_threads(p) == threads);
    uint32_t rng = 12345u;
    int32_t bad = 0;
    for (int32_t k = 0; k < n_jobs; k++) {
        rng = rng * 1664525u + 1013904223u;
        job j;
        memset(&j, 0, sizeof j);
        const int64_t n = racing ? 2 : 1 + (int64_t)((rng >> 8) % MAX_JOB_TASKS);
        if (racing) {
            j.slow = (int32_t)((rng >> 4) & 1u);
            j.iters = (int32_t)((rng >> 8) % 3000u);
        } else {
            j.slow = (rng >> 20) % 16 == 0 ? (int32_t)((rng >> 4) % (uint32_t)n) : -1;
            j.iters = 200000;
        }
        float scratch[4];
        gt_pool_run(p, n, 4, task, &j, scratch);
        for (int64_t t = 0; t < MAX_JOB_TASKS; t++)
            bad += atomic_load(&j.runs[t]) != (t < n ? 1 : 0);
    }
    CHECK(bad == 0);
    gt_pool_free(p);
}

int main(void) {
    run_jobs(2, 4000, false);
    run_jobs(4, 2000, false);
    run_jobs(2, 100000, true);
    run_jobs(1, 10, false); /* no workers: the caller runs every task */
    if (fails) return 1;
    printf("test_pool: all checks passed\n");
    return 0;
}
