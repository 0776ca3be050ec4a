/* The session, prefix and snapshot calls of geist.h: argument checks and error recording over
 * session/ (session.c, prefix.c, snapshot.c). */
#include <string.h>

#include "../runtime/runtime.h"
#include "../session/prefix.h"
#include "../session/session.h"

static geist_status arg_fail(geist_status st, const char *msg) {
    gt_set_thread_error(msg);
    return st;
}

/* Records a failed internal call's error on the session (and as this thread's). */
static geist_status on_session(geist_session *s, geist_status st, const gt_err *err) {
    return st ? gt_session_fail(s, err) : GEIST_OK;
}

void geist_session_options_default(geist_session_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->max_seq_len = 512;
    o->kv_mode = GEIST_KV_F16;
    o->seed = 0;
}

static bool read_options(const geist_session_options *opts, geist_session_options *o,
                         gt_err *err) {
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
    return true;
}

geist_status geist_session_create(geist_model *model, const geist_session_options *opts,
                                  geist_session **out) {
    gt_err err = {0};
    if (!model || !out) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "model and out must not be NULL");
    geist_session_options o;
    if (!read_options(opts, &o, &err)) return gt_model_record_error(model, &err);
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
    if (!read_options(opts, &o, &err)) return gt_model_record_error(model, &err);
    if (gt_session_new(model, o.max_seq_len, o.kv_mode, o.seed, prefix, out, &err))
        return gt_model_record_error(model, &err);
    return GEIST_OK;
}

void geist_session_free(geist_session *s) {
    if (!s) return;
    gt_runtime_session_freed(s->model->engine->runtime, s); /* ends its async request first */
    gt_session_destroy(s);
}

size_t geist_session_error(geist_session *s, char *buf, size_t cap) {
    if (!s) return 0;
    pthread_mutex_lock(&s->err_lock);
    size_t len = gt_copy_message(s->last_err.msg, buf, cap);
    pthread_mutex_unlock(&s->err_lock);
    return len;
}

static geist_status run(geist_session *s, const int32_t *ids, size_t n, float *all_logits) {
    gt_err err = {0};
    if (!s) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session must not be NULL");
    return on_session(s, gt_session_run(s, ids, n, all_logits, &err), &err);
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
    gt_err err = {0};
    if (gt_session_bring_logits(s, &err) != GEIST_OK) return gt_session_fail(s, &err);
    if (!s->has_logits) {
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
    if (s) gt_session_reset(s);
}

geist_status geist_session_tokens(const geist_session *s, int32_t *ids, size_t cap, size_t *n) {
    if (!s || !n || (!ids && cap > 0))
        return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session and n must not be NULL");
    *n = (size_t)s->n_past;
    if (cap < (size_t)s->n_past)
        return arg_fail(GEIST_ERR_BUFFER_TOO_SMALL, "buffer too small for the session's tokens");
    gt_session_copy_tokens(s, ids);
    return GEIST_OK;
}

geist_status geist_session_memory(const geist_session *s, geist_memory_report *out) {
    if (!s || !out) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session and out must not be NULL");
    gt_session_memory(s, out);
    return GEIST_OK;
}

/* ------------------------------------------------------------------------------------------- */
/* Snapshots, fork, truncate */

geist_status geist_session_snapshot(geist_session *s, void *buf, size_t cap, size_t *needed) {
    gt_err err = {0};
    if (!s || !needed || (!buf && cap > 0))
        return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session and needed must not be NULL");
    return on_session(s, gt_session_snapshot(s, buf, cap, needed, &err), &err);
}

geist_status geist_session_restore(geist_session *s, const void *image, size_t size) {
    gt_err err = {0};
    if (!s || (!image && size > 0))
        return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session and image must not be NULL");
    return on_session(s, gt_session_restore(s, image, size, &err), &err);
}

geist_status geist_session_fork(geist_session *s, geist_session **out) {
    gt_err err = {0};
    if (!s || !out) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session and out must not be NULL");
    return on_session(s, gt_session_fork(s, out, &err), &err);
}

geist_status geist_session_truncate(geist_session *s, int32_t n) {
    gt_err err = {0};
    if (!s) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "session must not be NULL");
    return on_session(s, gt_session_truncate(s, n, &err), &err);
}

/* ------------------------------------------------------------------------------------------- */
/* Shared prefixes */

geist_status geist_prefix_create(geist_model *model, const int32_t *ids, size_t n,
                                 int32_t kv_mode, geist_prefix **out) {
    gt_err err = {0};
    if (!model || !out || !ids)
        return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "model, ids and out must not be NULL");
    if (gt_prefix_create(model, ids, n, kv_mode, out, &err))
        return gt_model_record_error(model, &err);
    return GEIST_OK;
}

void geist_prefix_free(geist_prefix *p) {
    if (p) gt_prefix_release(p);
}

int32_t geist_prefix_n_tokens(const geist_prefix *p) { return p ? p->s->n_past : 0; }

geist_status geist_prefix_memory(const geist_prefix *p, geist_memory_report *out) {
    if (!p || !out) return arg_fail(GEIST_ERR_INVALID_ARGUMENT, "prefix and out must not be NULL");
    gt_prefix_memory(p, out);
    return GEIST_OK;
}
