/* Worker pool (see pool.h).
 *
 * A job's tasks are claimed from one atomic word holding (job id, task count, next task): a
 * compare-and-swap takes task `next` only while next < count, so a claim always belongs to the
 * live job, and the caller never waits for a worker that has not taken a task. That matters after
 * idle time: a sleeping worker may take a long while to run again (on a VM, its vCPU has to be
 * scheduled), and the caller simply does the work itself meanwhile. The caller then waits only
 * for tasks others took (`done` counts finished tasks, each thread adding its count once it finds
 * none left). A generation counter tells sleeping
 * workers a new job is there. */
#include "pool.h"
#include "platform.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ~0.05-0.2 ms of polling before a worker or the waiting caller sleeps (x86 pause: 40-140
 * cycles): a decode step leaves gaps of tens of us between products (attention, norms), and a
 * futex wake-up per product cost ~10 % of SmolLM2 decode with 1024 */
#define SPIN_ITERS 4096

/* the claim word: job id (16 bits) | task count (24) | next task (24) */
#define CLAIM_BITS 24
#define CLAIM_MASK ((1ull << CLAIM_BITS) - 1)
#define MAX_TASKS ((int64_t)CLAIM_MASK)

typedef struct worker {
    struct gt_pool *pool;
    float *scratch;
    pthread_t thread;
} worker;

struct gt_pool {
    int32_t n_workers;
    worker *workers;
    size_t scratch_cap; /* floats in each worker's scratch; grown under run_lock */
    pthread_mutex_t run_lock; /* one job at a time */
    pthread_mutex_t lock;     /* guards sleeping and waking */
    pthread_cond_t wake, done_cv;
    /* the live job: written before the claim word is published (release), read after a claim
     * succeeded (acquire); the caller rewrites them only once every claimed task is done */
    gt_pool_fn fn;
    void *ctx;
    /* each counter on its own cache line: every claim and finish writes one, and the other
     * thread should not lose the job's fields (above) or the other counter each time */
    _Alignas(64) atomic_ullong claim;
    _Alignas(64) atomic_llong done; /* finished tasks of the live job */
    _Alignas(64) atomic_bool waiting; /* the caller sleeps on done_cv */
    unsigned job_id;
    atomic_uint generation;
    atomic_bool stop;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Takes tasks of the live job until none is left, then adds how many it ran to `done` (once:
 * a locked add per task, on a line both cores write, cost ~8 % of a batched decode step).
 * Each claim takes a share of what is left (remaining / (2 x threads), at least one): a claim
 * moves the word's cache line between cores (~0.1-0.3 us on a large Xeon's mesh), and one claim
 * per task cost ~13 % of a batched decode step; the shrinking shares keep the end balanced. */
static void run_tasks(gt_pool *p, float *scratch, bool worker) {
    long long ran = 0;
    unsigned long long count = 0;
    const unsigned long long split = 2 * (unsigned long long)(p->n_workers + 1);
    unsigned long long c = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        const unsigned long long next = c & CLAIM_MASK;
        count = (c >> CLAIM_BITS) & CLAIM_MASK;
        if (next >= count) break;
        const unsigned long long take = (count - next) / split > 1 ? (count - next) / split : 1;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + take, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* c now holds the current word */
        for (unsigned long long t = next; t < next + take; t++) p->fn(p->ctx, (int64_t)t, scratch);
        ran += (long long)take;
        c = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
    if (ran == 0) return;
    const long long d = atomic_fetch_add_explicit(&p->done, ran, memory_order_acq_rel) + ran;
    if (!worker || (unsigned long long)d != count) return;
    /* A worker that finished the job wakes the caller if it sleeps: `waiting` read under the
     * lock, which the caller holds from setting it until it sleeps, so either this thread sees
     * it or the caller sees `done` complete. (A pair of seq_cst accesses, the store of one flag
     * and the load of the other on each side, lost that wake-up under qemu's aarch64 emulation,
     * which does not keep a store before a load to another address in order: both threads
     * slept for good.) */
    pthread_mutex_lock(&p->lock);
    if (atomic_load_explicit(&p->waiting, memory_order_relaxed)) pthread_cond_signal(&p->done_cv);
    pthread_mutex_unlock(&p->lock);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    gt_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&p->generation, memory_order_acquire);
        for (int i = 0; g == seen && i < SPIN_ITERS; i++) {
            cpu_relax();
            g = atomic_load_explicit(&p->generation, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->lock);
            while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen)
                pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        seen = g;
        if (atomic_load(&p->stop)) break;
        run_tasks(p, w->scratch, true);
    }
    return NULL;
}

/* Wakes the workers for a new generation (job or stop). */
static void publish(gt_pool *p) {
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
}

static void stop_workers(gt_pool *p, int32_t started) {
    atomic_store(&p->stop, true);
    publish(p);
    for (int32_t i = 0; i < started; i++) pthread_join(p->workers[i].thread, NULL);
}

gt_pool *gt_pool_create(int32_t n_threads) {
    gt_pool *p = gt_aligned_alloc(_Alignof(gt_pool), sizeof *p); /* cache-line aligned counters */
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->n_workers = n_threads > 1 ? n_threads - 1 : 0;
    atomic_init(&p->claim, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->waiting, false);
    atomic_init(&p->generation, 0);
    atomic_init(&p->stop, false);
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    if (p->n_workers > 0) {
        p->workers = calloc((size_t)p->n_workers, sizeof *p->workers);
        if (!p->workers) {
            gt_pool_free(p);
            return NULL;
        }
    }
    for (int32_t i = 0; i < p->n_workers; i++) {
        p->workers[i].pool = p;
        if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
            stop_workers(p, i);
            p->n_workers = 0; /* joined already */
            gt_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void gt_pool_free(gt_pool *p) {
    if (!p) return;
    if (p->n_workers > 0) stop_workers(p, p->n_workers);
    if (p->workers)
        for (int32_t i = 0; i < p->n_workers; i++) free(p->workers[i].scratch);
    free(p->workers);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done_cv);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
    gt_aligned_free(p);
}

int32_t gt_pool_threads(const gt_pool *p) { return p ? p->n_workers + 1 : 1; }

/* Under run_lock. */
static bool grow_scratch(gt_pool *p, size_t floats) {
    if (floats <= p->scratch_cap) return true;
    for (int32_t i = 0; i < p->n_workers; i++) {
        float *s = realloc(p->workers[i].scratch, floats * sizeof(float));
        if (!s) return false;
        p->workers[i].scratch = s;
    }
    p->scratch_cap = floats;
    return true;
}

void gt_pool_run(gt_pool *p, int64_t n_tasks, size_t scratch_floats, gt_pool_fn fn, void *ctx,
                 float *caller_scratch) {
    if (n_tasks <= 0) return;
    if (!p || p->n_workers == 0 || n_tasks == 1 || n_tasks > MAX_TASKS) {
        for (int64_t i = 0; i < n_tasks; i++) fn(ctx, i, caller_scratch);
        return;
    }
    pthread_mutex_lock(&p->run_lock);
    if (!grow_scratch(p, scratch_floats)) {
        pthread_mutex_unlock(&p->run_lock);
        for (int64_t i = 0; i < n_tasks; i++) fn(ctx, i, caller_scratch);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    p->job_id = (p->job_id + 1) & 0xFFFF;
    atomic_store_explicit(&p->claim,
                          ((unsigned long long)p->job_id << (2 * CLAIM_BITS)) |
                              ((unsigned long long)n_tasks << CLAIM_BITS),
                          memory_order_release);
    publish(p);
    run_tasks(p, caller_scratch, false);
    /* no task is left to take: wait for those the workers took */
    {
        for (int i = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks && i < SPIN_ITERS; i++)
            cpu_relax();
        if (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks) {
            pthread_mutex_lock(&p->lock);
            atomic_store_explicit(&p->waiting, true, memory_order_relaxed);
            while (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks)
                pthread_cond_wait(&p->done_cv, &p->lock);
            atomic_store_explicit(&p->waiting, false, memory_order_relaxed);
            pthread_mutex_unlock(&p->lock);
        }
    }
    pthread_mutex_unlock(&p->run_lock);
}
