/* Sessions: creation (KV sized from max_seq_len), the token-level calls, accounting. */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "prefix.h"

size_t gt_kv_elem_size(int32_t kv_mode) { return kv_mode == GEIST_KV_F32 ? 4 : 2; }

geist_status gt_session_fail(geist_session *s, const gt_err *err) {
    pthread_mutex_lock(&s->err_lock);
    s->last_err = *err;
    pthread_mutex_unlock(&s->err_lock);
    gt_set_thread_error(err->msg);
    return err->status;
}

static void free_kv(geist_session *s) {
    if (s->kv) {
        for (int32_t il = 0; il < s->model->cfg.n_layer; il++) gt_kv_layer_free(&s->kv[il]);
    }
    free(s->kv);
    s->kv = NULL;
}

void gt_session_destroy(geist_session *s) {
    if (!s->logits_on_kv) free(s->logits);
    if (s->dev_kv) s->model->backend->device->kv_free(s->dev_kv);
    free_kv(s);
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
    gt_dev_kv *dev_kv = NULL;
    if (model->backend->device) { /* the device holds the KV (backend.h) */
        gt_kv_geom geom;
        gt_kv_geom_init(&geom, c, kv_mode);
        int32_t *rows = calloc((size_t)c->n_layer, sizeof *rows);
        if (!rows) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (session)");
        for (int32_t il = 0; il < c->n_layer; il++) {
            bool ring = false;
            rows[il] = gt_kv_layer_rows(&geom, model->layers[il].sliding, c->sliding_window,
                                        max_seq_len - n_prefix, &ring);
        }
        const gt_dev_kv_desc d = {kv_mode, max_seq_len, c->n_layer, rows, n_prefix};
        geist_status st = model->backend->device->kv_alloc(model->dev, &d, &dev_kv, err);
        free(rows);
        if (st) return st;
    }
    geist_session *s = calloc(1, sizeof *s);
    if (!s) {
        if (dev_kv) model->backend->device->kv_free(dev_kv);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (session)");
    }
    s->dev_kv = dev_kv;
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
    /* a device's host memory that its passes write the logits into, where it has it: the
     * host then copies nothing a step (a GPU's 1 MB of Gemma 3's logits: ~0.1 ms a token) */
    const gt_device_ops *dev = model->backend->device;
    s->logits = dev_kv && dev->kv_logits ? dev->kv_logits(dev_kv) : NULL;
    s->logits_on_kv = s->logits != NULL;
    if (!s->logits) s->logits = malloc((size_t)c->n_vocab * sizeof(float));
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
        gt_session_destroy(s);
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

void gt_session_note_tokens(geist_session *s, const int32_t *ids, int32_t n) {
    const int32_t at = s->n_past - s->n_prefix;
    if (n > 0 && at >= 0 && at + n <= s->max_seq_len - s->n_prefix)
        memcpy(s->ids + at, ids, (size_t)n * sizeof(int32_t));
}

geist_status gt_session_run(geist_session *s, const int32_t *ids, size_t n, float *all_logits,
                            gt_err *err) {
    if (n == 0) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "no tokens given");
    if (!ids) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "ids must not be NULL");
    const size_t room = (size_t)(s->max_seq_len - s->n_past);
    if (n > room)
        return gt_fail(err, GEIST_ERR_CAPACITY,
                       "%zu tokens do not fit: the session holds %d of its max_seq_len %d (room "
                       "for %zu)", n, s->n_past, s->max_seq_len, room);
    const int32_t n_vocab = s->model->cfg.n_vocab;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                           "token id %d at index %zu is outside [0, %d)", ids[i], i, n_vocab);
    }
    gt_session_note_tokens(s, ids, (int32_t)n);
    return gt_forward(s, ids, (int32_t)n, all_logits, err);
}

void gt_session_reset(geist_session *s) {
    s->n_past = s->n_prefix;
    s->n_floor = 0;
    s->has_logits = s->prefix != NULL;
    s->logits_on_device = false;
    if (s->prefix)
        memcpy(s->logits, s->prefix->s->logits, (size_t)s->model->cfg.n_vocab * sizeof(float));
}

geist_status gt_session_bring_logits(geist_session *s, gt_err *err) {
    if (s->has_logits || !s->logits_on_device || s->n_past <= s->n_prefix) return GEIST_OK;
    const int32_t last = s->n_past - 1, tok = s->ids[last - s->n_prefix];
    geist_status st = gt_session_truncate(s, last, err);
    if (st == GEIST_OK) st = gt_forward(s, &tok, 1, NULL, err);
    if (st != GEIST_OK && s->n_past == last) { /* as it was: the row's KV is still held */
        s->n_past = last + 1;
        s->has_logits = false;
        s->logits_on_device = true;
    }
    return st;
}

void gt_session_copy_tokens(const geist_session *s, int32_t *ids) {
    if (s->n_prefix) memcpy(ids, s->prefix->s->ids, (size_t)s->n_prefix * sizeof(int32_t));
    if (s->n_past > s->n_prefix)
        memcpy(ids + s->n_prefix, s->ids, (size_t)(s->n_past - s->n_prefix) * sizeof(int32_t));
}

void gt_session_memory(const geist_session *s, geist_memory_report *out) {
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->kv_cache = s->kv_bytes;
    out->scratch = (uint64_t)s->model->cfg.n_vocab * sizeof(float);
    out->other = sizeof *s + (uint64_t)s->model->cfg.n_layer * sizeof(gt_kv_layer) +
                 (uint64_t)(s->max_seq_len - s->n_prefix) * sizeof(int32_t);
    out->shared_prefix = s->prefix ? s->prefix->s->kv_bytes : 0;
    /* a device session's KV on the device (its host layers above are the image buffer of
     * snapshots and fork); a shared prefix's device KV is the prefix's */
    if (s->dev_kv) out->device_local = s->model->backend->device->kv_bytes(s->dev_kv);
}
