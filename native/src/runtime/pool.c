/* Worker pool (see pool.h). Tasks are claimed from an atomic counter; a generation number tells
 * workers a new job is there; `active` counts workers not yet done with the current job. */
#include "runtime/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

/* ~0.05-0.2 ms of polling before a worker or the waiting caller sleeps (x86 pause: 40-140
 * cycles): a decode step leaves gaps of tens of us between products (attention, norms), and a
 * futex wake-up per product cost ~10 % of SmolLM2 decode with 1024 */
#define SPIN_ITERS 4096

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
    pthread_cond_t wake, done;
    /* the current job: written before `generation` is bumped (release), read after it (acquire) */
    gt_pool_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_llong next;
    atomic_uint generation;
    atomic_int active;
    atomic_bool stop;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void run_tasks(gt_pool *p, float *scratch) {
    for (;;) {
        const long long i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->n_tasks) break;
        p->fn(p->ctx, (int64_t)i, scratch);
    }
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
        run_tasks(p, w->scratch);
        if (atomic_fetch_sub_explicit(&p->active, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
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
    atomic_store(&p->active, started);
    publish(p);
    for (int32_t i = 0; i < started; i++) pthread_join(p->workers[i].thread, NULL);
}

gt_pool *gt_pool_create(int32_t n_threads) {
    gt_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_workers = n_threads > 1 ? n_threads - 1 : 0;
    atomic_init(&p->next, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->active, 0);
    atomic_init(&p->stop, false);
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
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
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
    free(p);
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
    if (!p || p->n_workers == 0 || n_tasks == 1) {
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
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->active, p->n_workers, memory_order_relaxed);
    publish(p);
    run_tasks(p, caller_scratch);
    for (int i = 0; atomic_load_explicit(&p->active, memory_order_acquire) != 0 && i < SPIN_ITERS; i++)
        cpu_relax();
    if (atomic_load_explicit(&p->active, memory_order_acquire) != 0) {
        pthread_mutex_lock(&p->lock);
        while (atomic_load_explicit(&p->active, memory_order_acquire) != 0)
            pthread_cond_wait(&p->done, &p->lock);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&p->run_lock);
}
