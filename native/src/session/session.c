/* Sessions: creation (KV sized from max_seq_len), the token-level calls, accounting. */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "prefix.h"
#include "../runtime/runtime.h"

size_t gt_kv_elem_size(int32_t kv_mode) { return kv_mode == GEIST_KV_F32 ? 4 : 2; }

geist_status gt_session_fail(geist_session *s, const gt_err *err) {
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
        for (int32_t il = 0; il < s->model->cfg.n_layer; il++) gt_kv_layer_free(&s->kv[il]);
    }
    free(s->kv);
    s->kv = NULL;
}

static void session_destroy(geist_session *s) {
    free_kv(s);
    free(s->logits);
    free(s->ids);
    pthread_mutex_destroy(&s->err_lock);
    if (s->prefix) gt_prefix_release(s->prefix);
    geist_model *m = s->model;
    free(s);
    gt_model_release(m); /* last: the prefix's session may hold the model too */
}

geist_status gt_session_new(geist_model *model, int32_t max_seq_len, int32_t kv_mode,
                            uint64_t seed, struct geist_prefix *prefix, geist_session **out,
                            gt_err *err) {
    const gt_config *c = &model->cfg;
    const int32_t n_prefix = prefix ? prefix->s->n_past : 0;
    if (max_seq_len < 1 || max_seq_len > c->n_ctx_train)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "max_seq_len %d is out of range: it must be 1..%d (the model's context "
                       "length)", max_seq_len, c->n_ctx_train);
    if (max_seq_len <= n_prefix)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "max_seq_len %d leaves no room after the shared prefix of %d tokens",
                       max_seq_len, n_prefix);
    if (!gt_kv_mode_valid(kv_mode))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "unknown kv_mode %d (supported: 0 = F32, 1 = F16, 2 = INT8, 3 = INT4, "
                       "4 = KIVI2)", kv_mode);
    geist_session *s = calloc(1, sizeof *s);
    if (!s) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (session)");
    s->model = model;
    gt_model_retain(model);
    s->max_seq_len = max_seq_len;
    s->kv_mode = kv_mode;
    s->seed = seed;
    s->n_prefix = n_prefix;
    s->n_past = n_prefix;
    pthread_mutex_init(&s->err_lock, NULL);
    gt_kv_geom_init(&s->geom, c, kv_mode);
    const int32_t own = max_seq_len - n_prefix;
    s->kv = calloc((size_t)c->n_layer, sizeof *s->kv);
    s->logits = malloc((size_t)c->n_vocab * sizeof(float));
    s->ids = malloc((size_t)own * sizeof(int32_t));
    bool ok = s->kv && s->logits && s->ids;
    for (int32_t il = 0; ok && il < c->n_layer; il++) {
        bool ring = false;
        const int32_t rows =
            gt_kv_layer_rows(&s->geom, model->layers[il].sliding, c->sliding_window, own, &ring);
        ok = gt_kv_layer_alloc(&s->kv[il], &s->geom, rows, ring);
        s->kv_bytes += gt_kv_layer_bytes(&s->geom, rows);
    }
    if (!ok) {
        session_destroy(s);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory allocating the KV cache");
    }
    /* resident now like the KV: the counted bytes are the bytes the game pays at creation */
    gt_commit_zero(s->logits, (size_t)c->n_vocab * sizeof(float));
    gt_commit_zero(s->ids, (size_t)own * sizeof(int32_t));
    if (prefix) {
        gt_prefix_retain(prefix);
        s->prefix = prefix;
        memcpy(s->logits, prefix->s->logits, (size_t)c->n_vocab * sizeof(float));
        s->has_logits = true;
    }
    *out = s;
    return GEIST_OK;
}

static bool read_options(geist_model *model, const geist_session_options *opts,
                         geist_session_options *o, gt_err *err) {
    geist_session_options_default(o);
    if (opts) {
        if (opts->struct_size < sizeof *o) {
            gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                    "session options: struct_size %u is too small (expected %zu)",
                    opts->struct_size, sizeof *o);
            return false;
        }
        *o = *opts;
    }
    (void)model;
    return true;
}

geist_status geist_session_create(geist_model *model, const geist_session_options *opts,
                                  geist_session **out) {
    gt_err err = {0};
    if (!model || !out) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "model and out must not be NULL");
    geist_session_options o;
    if (!read_options(model, opts, &o, &err)) return gt_model_record_error(model, &err);
    if (gt_session_new(model, o.max_seq_len, o.kv_mode, o.seed, NULL, out, &err))
        return gt_model_record_error(model, &err);
    return GEIST_OK;
}

geist_status geist_session_create_with_prefix(geist_model *model, geist_prefix *prefix,
                                              const geist_session_options *opts,
                                              geist_session **out) {
    gt_err err = {0};
    if (!model || !prefix || !out)
        return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "model, prefix and out must not be NULL");
    if (prefix->model != model) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "the prefix belongs to another model");
        return gt_model_record_error(model, &err);
    }
    geist_session_options o;
    if (!read_options(model, opts, &o, &err)) return gt_model_record_error(model, &err);
    if (gt_session_new(model, o.max_seq_len, o.kv_mode, o.seed, prefix, out, &err))
        return gt_model_record_error(model, &err);
    return GEIST_OK;
}

void geist_session_free(geist_session *s) {
    if (!s) return;
    gt_runtime_session_freed(s->model->engine->runtime, s); /* ends its async request first */
    session_destroy(s);
}

size_t geist_session_error(geist_session *s, char *buf, size_t cap) {
    if (!s) return 0;
    pthread_mutex_lock(&s->err_lock);
    size_t len = gt_copy_message(s->last_err.msg, buf, cap);
    pthread_mutex_unlock(&s->err_lock);
    return len;
}

void gt_session_note_tokens(geist_session *s, const int32_t *ids, int32_t n) {
    const int32_t at = s->n_past - s->n_prefix;
    if (n > 0 && at >= 0 && at + n <= s->max_seq_len - s->n_prefix)
        memcpy(s->ids + at, ids, (size_t)n * sizeof(int32_t));
}

static geist_status run(geist_session *s, const int32_t *ids, size_t n, float *all_logits) {
    gt_err err = {0};
    if (!s) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session must not be NULL");
    if (n == 0) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "no tokens given");
        return gt_session_fail(s, &err);
    }
    if (!ids) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "ids must not be NULL");
        return gt_session_fail(s, &err);
    }
    const size_t room = (size_t)(s->max_seq_len - s->n_past);
    if (n > room) {
        gt_fail(&err, GEIST_ERR_CAPACITY,
                "%zu tokens do not fit: the session holds %d of its max_seq_len %d (room for %zu)",
                n, s->n_past, s->max_seq_len, room);
        return gt_session_fail(s, &err);
    }
    const int32_t n_vocab = s->model->cfg.n_vocab;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "token id %d at index %zu is outside [0, %d)",
                    ids[i], i, n_vocab);
            return gt_session_fail(s, &err);
        }
    }
    gt_session_note_tokens(s, ids, (int32_t)n);
    geist_status st = gt_forward(s, ids, (int32_t)n, all_logits, &err);
    if (st) return gt_session_fail(s, &err);
    return GEIST_OK;
}

geist_status geist_session_prefill(geist_session *s, const int32_t *ids, size_t n) {
    return run(s, ids, n, NULL);
}

geist_status geist_session_eval(geist_session *s, const int32_t *ids, size_t n, float *logits) {
    if (s && !logits) {
        gt_err err;
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "logits output must not be NULL");
        return gt_session_fail(s, &err);
    }
    return run(s, ids, n, logits);
}

geist_status geist_session_decode(geist_session *s, int32_t id) { return run(s, &id, 1, NULL); }

geist_status geist_session_logits(geist_session *s, const float **logits) {
    if (!s || !logits) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session and logits must not be NULL");
    if (!s->has_logits) {
        gt_err err;
        gt_fail(&err, GEIST_ERR_STATE, "no logits yet: prefill or decode a token first");
        return gt_session_fail(s, &err);
    }
    *logits = s->logits;
    return GEIST_OK;
}

int32_t geist_session_n_past(const geist_session *s) { return s ? s->n_past : 0; }
int32_t geist_session_max_seq_len(const geist_session *s) { return s ? s->max_seq_len : 0; }
int32_t geist_session_kv_mode(const geist_session *s) { return s ? s->kv_mode : -1; }

void geist_session_reset(geist_session *s) {
    if (!s) return;
    s->n_past = s->n_prefix;
    s->n_floor = 0;
    s->has_logits = s->prefix != NULL;
    if (s->prefix)
        memcpy(s->logits, s->prefix->s->logits, (size_t)s->model->cfg.n_vocab * sizeof(float));
}

geist_status geist_session_tokens(const geist_session *s, int32_t *ids, size_t cap, size_t *n) {
    if (!s || !n || (!ids && cap > 0))
        return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session and n must not be NULL");
    *n = (size_t)s->n_past;
    if (cap < (size_t)s->n_past)
        return arg_fail(GEIST_ERR_BUFFER_TOO_SMALL, "buffer too small for the session's tokens");
    if (s->n_prefix) memcpy(ids, s->prefix->s->ids, (size_t)s->n_prefix * sizeof(int32_t));
    if (s->n_past > s->n_prefix)
        memcpy(ids + s->n_prefix, s->ids, (size_t)(s->n_past - s->n_prefix) * sizeof(int32_t));
    return GEIST_OK;
}

geist_status geist_session_memory(const geist_session *s, geist_memory_report *out) {
    if (!s || !out) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session and out must not be NULL");
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->kv_cache = s->kv_bytes;
    out->scratch = (uint64_t)s->model->cfg.n_vocab * sizeof(float);
    out->other = sizeof *s + (uint64_t)s->model->cfg.n_layer * sizeof(gt_kv_layer) +
                 (uint64_t)(s->max_seq_len - s->n_prefix) * sizeof(int32_t);
    out->shared_prefix = s->prefix ? s->prefix->s->kv_bytes : 0;
    return GEIST_OK;
}
