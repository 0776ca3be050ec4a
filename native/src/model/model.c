/* The model object: loading body, lifetime (reference counts) and error slot (model.h). */
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "../util/hash.h"
#include "../util/platform.h"
#include "../util/pool.h"

const gguf_file *gt_model_gguf(const geist_model *m) { return &m->gguf; }
const struct gt_tokenizer *gt_model_tokenizer(const geist_model *m) { return m->tokenizer; }

geist_status gt_model_record_error(const geist_model *m, const gt_err *err) {
    geist_model *mm = (geist_model *)m; /* the error slot is the one mutable part, locked */
    pthread_mutex_lock(&mm->err_lock);
    mm->last_err = *err;
    pthread_mutex_unlock(&mm->err_lock);
    gt_set_thread_error(err->msg);
    return err->status;
}

void gt_engine_release(geist_engine *e) {
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1) return;
    gt_pool_free(e->pool);
    if (e->dev_ctx && e->backend->device) e->backend->device->engine_free(e->dev_ctx);
    free(e);
}

static void model_destroy(geist_model *m) {
    if (!m) return;
    if (m->dev && m->backend->device) m->backend->device->model_free(m->dev);
    if (m->grammar_cache_free) m->grammar_cache_free(m->grammar_cache);
    if (m->tokenizer_free) m->tokenizer_free(m->tokenizer);
    gt_arch_free(m);
    gt_gguf_free(&m->gguf);
    if (m->map) gt_unmap_file(m->map, m->map_size);
    pthread_mutex_destroy(&m->err_lock);
    geist_engine *e = m->engine;
    free(m);
    gt_engine_release(e);
}

void gt_model_retain(geist_model *m) { atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed); }

void gt_model_release(geist_model *m) {
    if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1) model_destroy(m);
}

geist_status gt_model_create(geist_engine *engine, const void *data, size_t size, void *map,
                             geist_model **out, gt_err *err) {
    geist_model *m = calloc(1, sizeof *m);
    if (!m) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (model)");
    pthread_mutex_init(&m->err_lock, NULL);
    atomic_init(&m->refs, 1);
    m->engine = engine;
    atomic_fetch_add_explicit(&engine->refs, 1, memory_order_relaxed); /* model_destroy drops it */
    m->backend = engine->backend;
    m->map = map;
    m->map_size = map ? size : 0;
    geist_status st = gt_gguf_parse(data, size, &m->gguf, err);
    if (!st) m->identity = gt_hash64(GT_HASH64_INIT, data, (size_t)m->gguf.data_offset);
    if (!st) st = gt_arch_load(m, err);
    if (st) {
        m->map = NULL; /* the caller unmaps on failure */
        model_destroy(m);
        return st;
    }
    *out = m;
    return GEIST_OK;
}
