/* Sessions: creation (KV sized from max_seq_len), the token-level calls, accounting. */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t gt_kv_elem_size(int32_t kv_mode) { return kv_mode == GEIST_KV_F32 ? 4 : 2; }

static geist_status session_fail(geist_session *s, const gt_err *err) {
    pthread_mutex_lock(&s->err_lock);
    s->last_err = *err;
    pthread_mutex_unlock(&s->err_lock);
    gt_set_thread_error(err->msg);
    return err->status;
}

static geist_status arg_fail(geist_status st, const char *msg) {
    gt_set_thread_error(msg);
    return st;
}

void geist_session_options_default(geist_session_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->max_seq_len = 512;
    o->kv_mode = GEIST_KV_F16;
    o->seed = 0;
}

static void free_kv(geist_session *s) {
    if (s->kv) {
        for (int32_t il = 0; il < s->model->cfg.n_layer; il++) {
            free(s->kv[il].k);
            free(s->kv[il].v);
        }
    }
    free(s->kv);
    s->kv = NULL;
}

geist_status geist_session_create(geist_model *model, const geist_session_options *opts,
                                  geist_session **out) {
    gt_err err = {0};
    if (!model || !out) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "model and out must not be NULL");
    geist_session_options o;
    geist_session_options_default(&o);
    if (opts) {
        if (opts->struct_size < sizeof o) {
            gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT,
                    "session options: struct_size %u is too small (expected %zu)",
                    opts->struct_size, sizeof o);
            return gt_model_record_error(model, &err);
        }
        o = *opts;
    }
    const gt_config *c = &model->cfg;
    if (o.max_seq_len < 1 || o.max_seq_len > c->n_ctx_train) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT,
                "max_seq_len %d is out of range: it must be 1..%d (the model's context length)",
                o.max_seq_len, c->n_ctx_train);
        return gt_model_record_error(model, &err);
    }
    if (o.kv_mode != GEIST_KV_F32 && o.kv_mode != GEIST_KV_F16) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "unknown kv_mode %d (supported: 0 = F32, 1 = F16)",
                o.kv_mode);
        return gt_model_record_error(model, &err);
    }
    geist_session *s = calloc(1, sizeof *s);
    if (!s) {
        gt_fail(&err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (session)");
        return gt_model_record_error(model, &err);
    }
    s->model = model;
    s->max_seq_len = o.max_seq_len;
    s->kv_mode = o.kv_mode;
    s->seed = o.seed;
    pthread_mutex_init(&s->err_lock, NULL);
    s->kv = calloc((size_t)c->n_layer, sizeof *s->kv);
    s->logits = malloc((size_t)c->n_vocab * sizeof(float));
    bool ok = s->kv && s->logits;
    const size_t es = gt_kv_elem_size(o.kv_mode);
    const size_t kd = (size_t)c->n_head_kv * (size_t)c->head_dim_k;
    const size_t vd = (size_t)c->n_head_kv * (size_t)c->head_dim_v;
    for (int32_t il = 0; ok && il < c->n_layer; il++) {
        gt_kv_layer *kv = &s->kv[il];
        const bool sliding = model->layers[il].sliding;
        kv->rows = sliding && c->sliding_window < o.max_seq_len ? c->sliding_window : o.max_seq_len;
        kv->ring = sliding;
        /* Committed now (written once), so the game pays the whole cost at creation and never
         * takes page faults mid-conversation; the bytes counted are the bytes resident. */
        kv->k = gt_malloc_array((size_t)kv->rows, kd * es);
        kv->v = gt_malloc_array((size_t)kv->rows, vd * es);
        ok = kv->k && kv->v;
        if (ok) {
            gt_commit_zero(kv->k, (size_t)kv->rows * kd * es);
            gt_commit_zero(kv->v, (size_t)kv->rows * vd * es);
        }
        s->kv_bytes += (uint64_t)kv->rows * (kd + vd) * es;
    }
    if (!ok) {
        free_kv(s);
        free(s->logits);
        pthread_mutex_destroy(&s->err_lock);
        free(s);
        gt_fail(&err, GEIST_ERR_OUT_OF_MEMORY, "out of memory allocating the KV cache");
        return gt_model_record_error(model, &err);
    }
    *out = s;
    return GEIST_OK;
}

void geist_session_free(geist_session *s) {
    if (!s) return;
    free_kv(s);
    free(s->logits);
    pthread_mutex_destroy(&s->err_lock);
    free(s);
}

size_t geist_session_error(geist_session *s, char *buf, size_t cap) {
    if (!s) return 0;
    pthread_mutex_lock(&s->err_lock);
    size_t len = strlen(s->last_err.msg);
    if (buf && cap > 0) {
        size_t n = len < cap - 1 ? len : cap - 1;
        memcpy(buf, s->last_err.msg, n);
        buf[n] = '\0';
    }
    pthread_mutex_unlock(&s->err_lock);
    return len;
}

static geist_status run(geist_session *s, const int32_t *ids, size_t n, float *all_logits) {
    gt_err err = {0};
    if (!s) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session must not be NULL");
    if (n == 0) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "no tokens given");
        return session_fail(s, &err);
    }
    if (!ids) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "ids must not be NULL");
        return session_fail(s, &err);
    }
    const size_t room = (size_t)(s->max_seq_len - s->n_past);
    if (n > room) {
        gt_fail(&err, GEIST_ERR_CAPACITY,
                "%zu tokens do not fit: the session holds %d of its max_seq_len %d (room for %zu)",
                n, s->n_past, s->max_seq_len, room);
        return session_fail(s, &err);
    }
    const int32_t n_vocab = s->model->cfg.n_vocab;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "token id %d at index %zu is outside [0, %d)",
                    ids[i], i, n_vocab);
            return session_fail(s, &err);
        }
    }
    geist_status st = gt_forward(s, ids, (int32_t)n, all_logits, &err);
    if (st) return session_fail(s, &err);
    return GEIST_OK;
}

geist_status geist_session_prefill(geist_session *s, const int32_t *ids, size_t n) {
    return run(s, ids, n, NULL);
}

geist_status geist_session_eval(geist_session *s, const int32_t *ids, size_t n, float *logits) {
    if (s && !logits) {
        gt_err err;
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "logits output must not be NULL");
        return session_fail(s, &err);
    }
    return run(s, ids, n, logits);
}

geist_status geist_session_decode(geist_session *s, int32_t id) { return run(s, &id, 1, NULL); }

geist_status geist_session_logits(geist_session *s, const float **logits) {
    if (!s || !logits) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session and logits must not be NULL");
    if (!s->has_logits) {
        gt_err err;
        gt_fail(&err, GEIST_ERR_STATE, "no logits yet: prefill or decode a token first");
        return session_fail(s, &err);
    }
    *logits = s->logits;
    return GEIST_OK;
}

int32_t geist_session_n_past(const geist_session *s) { return s ? s->n_past : 0; }
int32_t geist_session_max_seq_len(const geist_session *s) { return s ? s->max_seq_len : 0; }

void geist_session_reset(geist_session *s) {
    if (!s) return;
    s->n_past = 0;
    s->has_logits = false;
}

geist_status geist_session_memory(const geist_session *s, geist_memory_report *out) {
    if (!s || !out) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session and out must not be NULL");
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->kv_cache = s->kv_bytes;
    out->scratch = (uint64_t)s->model->cfg.n_vocab * sizeof(float);
    out->other = sizeof *s + (uint64_t)s->model->cfg.n_layer * sizeof(gt_kv_layer);
    return GEIST_OK;
}
