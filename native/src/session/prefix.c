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
        geist_session_free(p->s);
        free(p);
    }
}

geist_status geist_prefix_create(geist_model *model, const int32_t *ids, size_t n,
                                 int32_t kv_mode, geist_prefix **out) {
    gt_err err = {0};
    if (!model || !out || !ids) {
        gt_set_thread_error("model, ids and out must not be NULL");
        return GEIST_ERR_INVALID_ARGUMENT;
    }
    if (n == 0 || n > (size_t)model->cfg.n_ctx_train - 1) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "a prefix needs 1..%d tokens (got %zu)",
                model->cfg.n_ctx_train - 1, n);
        return gt_model_record_error(model, &err);
    }
    geist_prefix *p = calloc(1, sizeof *p);
    if (!p) {
        gt_fail(&err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (prefix)");
        return gt_model_record_error(model, &err);
    }
    geist_status st = gt_session_new(model, (int32_t)n, kv_mode, 0, NULL, &p->s, &err);
    if (st) {
        free(p);
        return gt_model_record_error(model, &err);
    }
    st = geist_session_prefill(p->s, ids, n);
    if (st) {
        gt_fail(&err, st, "%s", p->s->last_err.msg);
        geist_session_free(p->s);
        free(p);
        return gt_model_record_error(model, &err);
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

void geist_prefix_free(geist_prefix *p) {
    if (p) gt_prefix_release(p);
}

int32_t geist_prefix_n_tokens(const geist_prefix *p) { return p ? p->s->n_past : 0; }

geist_status geist_prefix_memory(const geist_prefix *p, geist_memory_report *out) {
    if (!p || !out) {
        gt_set_thread_error("prefix and out must not be NULL");
        return GEIST_ERR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->shared_prefix = p->s->kv_bytes;
    out->scratch = (uint64_t)p->model->cfg.n_vocab * sizeof(float);
    out->other = sizeof *p + sizeof *p->s + (uint64_t)p->model->cfg.n_layer * sizeof(gt_kv_layer) +
                 (uint64_t)p->s->max_seq_len * sizeof(int32_t);
    return GEIST_OK;
}
