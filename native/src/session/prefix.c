/* Shared prefixes: a frozen session whose KV many sessions read in place (kv.c reads positions
 * below n_prefix from it). Never written after creation, so any number of threads may read it. */
#include "prefix.h"

#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "../util/hash.h"

void gt_prefix_retain(struct geist_prefix *p) { atomic_fetch_add(&p->refs, 1); }

void gt_prefix_release(struct geist_prefix *p) {
    if (atomic_fetch_sub(&p->refs, 1) == 1) {
        /* the frozen session never had a handle, so no runtime request can hold it */
        gt_session_destroy(p->s);
        free(p);
    }
}

geist_status gt_prefix_create(geist_model *model, const int32_t *ids, size_t n, int32_t kv_mode,
                              geist_prefix **out, gt_err *err) {
    if (n == 0 || n > (size_t)model->cfg.n_ctx_train - 1)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "a prefix needs 1..%d tokens (got %zu)",
                       model->cfg.n_ctx_train - 1, n);
    geist_prefix *p = calloc(1, sizeof *p);
    if (!p) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (prefix)");
    geist_status st = gt_session_new(model, (int32_t)n, kv_mode, 0, NULL, &p->s, err);
    if (st) {
        free(p);
        return st;
    }
    st = gt_session_run(p->s, ids, n, NULL, err);
    if (st) {
        gt_session_destroy(p->s);
        free(p);
        return st;
    }
    p->model = model;
    atomic_init(&p->refs, 1);
    uint64_t h = gt_hash64(GT_HASH64_INIT, &model->identity, sizeof model->identity);
    const int64_t head[2] = {kv_mode, (int64_t)n};
    h = gt_hash64(h, head, sizeof head);
    p->identity = gt_hash64(h, ids, n * sizeof(int32_t));
    *out = p;
    return GEIST_OK;
}

void gt_prefix_memory(const geist_prefix *p, geist_memory_report *out) {
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->shared_prefix = p->s->kv_bytes;
    if (p->s->dev_kv) out->device_local = p->model->backend->device->kv_bytes(p->s->dev_kv);
    out->scratch = (uint64_t)p->model->cfg.n_vocab * sizeof(float);
    out->other = sizeof *p + sizeof *p->s + (uint64_t)p->model->cfg.n_layer * sizeof(gt_kv_layer) +
                 (uint64_t)p->s->max_seq_len * sizeof(int32_t);
}
