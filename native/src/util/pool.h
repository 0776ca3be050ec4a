/* A worker pool for the forward pass: n_threads - 1 pthreads plus the calling thread.
 *
 * Idle workers sleep on a condition variable; after a job they spin briefly (up to ~0.2 ms)
 * before sleeping, because a forward pass issues its matmuls back to back and a
 * condition-variable wake-up per matmul would cost more than the short ones take. The caller
 * works too and never waits for a worker that has not taken a task yet, so a worker that is slow
 * to wake (after idle time) costs parallelism, not latency.
 *
 * Concurrency: gt_pool_run may be called from several threads at once (sessions of one engine
 * on different threads). One job runs at a time: a mutex serializes gt_pool_run calls, so a
 * second caller waits for the first one's matmul, then gets all the workers. The pool is the
 * engine's; it outlives every model and session of that engine. */
#ifndef GEIST_POOL_H
#define GEIST_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct gt_pool gt_pool;

/* Runs task `task` of a job. scratch: scratch_floats floats private to this thread for the call
 * (the caller's own buffer on the calling thread). */
typedef void (*gt_pool_fn)(void *ctx, int64_t task, float *scratch);

/* NULL when out of memory or threads cannot be started. n_threads <= 1: no workers. */
gt_pool *gt_pool_create(int32_t n_threads);
void gt_pool_free(gt_pool *p);
/* Threads that take part in a job, the caller included (>= 1). */
int32_t gt_pool_threads(const gt_pool *p);

/* Runs fn(ctx, i, scratch) for every i in [0, n_tasks) and returns when all are done. Which
 * thread runs which task varies, so tasks must not depend on it. The calling thread works too,
 * with caller_scratch (at least scratch_floats floats). If the workers' scratch cannot be grown,
 * the caller runs every task itself. p may be NULL (the caller runs everything). */
void gt_pool_run(gt_pool *p, int64_t n_tasks, size_t scratch_floats, gt_pool_fn fn, void *ctx,
                 float *caller_scratch);

#endif
