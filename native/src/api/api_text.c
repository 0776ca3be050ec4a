/* The text calls of geist.h: tokenize, token pieces, detokenize (whole and streaming), special
 * tokens. All read the model's immutable tokenizer; scratch memory belongs to the call (or to the
 * caller's detokenizer), so any number of threads may use one model at once. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/model.h"
#include "../tokenizer/detok.h"
#include "../tokenizer/tokenizer.h"

static geist_status text_fail(const geist_model *m, geist_status st, const char *fmt, ...)
    GT_PRINTF(3, 4);

static geist_status text_fail(const geist_model *m, geist_status st, const char *fmt, ...) {
    gt_err err;
    err.status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err.msg, sizeof err.msg, fmt, ap);
    va_end(ap);
    if (m) return gt_model_record_error(m, &err);
    gt_set_thread_error(err.msg);
    return st;
}

/* The model's tokenizer, or a recorded error. */
static geist_status need_tokenizer(const geist_model *m, const char *what,
                                   const gt_tokenizer **out) {
    if (!m) return text_fail(NULL, GEIST_ERR_INVALID_ARGUMENT, "%s: model is NULL", what);
    const gt_tokenizer *t = gt_model_tokenizer(m);
    if (!t) return text_fail(m, GEIST_ERR_STATE, "%s: model has no tokenizer", what);
    *out = t;
    return GEIST_OK;
}

static geist_status check_id(const geist_model *m, const gt_tokenizer *t, int32_t id,
                             const char *what) {
    if (id < 0 || id >= gt_tokenizer_n_vocab(t))
        return text_fail(m, GEIST_ERR_INVALID_ARGUMENT,
                         "%s: token id %d outside the vocabulary [0, %d)", what, id,
                         gt_tokenizer_n_vocab(t));
    return GEIST_OK;
}

geist_status geist_tokenize(const geist_model *model, const char *text, size_t len,
                            uint32_t flags, int32_t *ids, size_t cap, size_t *n_ids) {
    const gt_tokenizer *t;
    geist_status st = need_tokenizer(model, "tokenize", &t);
    if (st) return st;
    if (!n_ids) return text_fail(model, GEIST_ERR_INVALID_ARGUMENT, "tokenize: n_ids is NULL");
    if (!text && len > 0)
        return text_fail(model, GEIST_ERR_INVALID_ARGUMENT, "tokenize: text is NULL");
    if (!ids && cap > 0)
        return text_fail(model, GEIST_ERR_INVALID_ARGUMENT, "tokenize: ids is NULL");
    if (flags & ~(uint32_t)(GEIST_TOKENIZE_ADD_SPECIAL | GEIST_TOKENIZE_PARSE_SPECIAL))
        return text_fail(model, GEIST_ERR_INVALID_ARGUMENT, "tokenize: unknown flags 0x%x",
                         flags);
    int32_t *v = NULL;
    size_t n = 0;
    gt_err err;
    if ((st = gt_tokenize_alloc(model, text, len, flags, &v, &n, &err)))
        return gt_model_record_error(model, &err);
    *n_ids = n;
    if (n > cap) {
        free(v);
        return text_fail(model, GEIST_ERR_BUFFER_TOO_SMALL,
                         "tokenize: %zu ids do not fit in a buffer of %zu", *n_ids, cap);
    }
    if (n) memcpy(ids, v, n * sizeof(int32_t));
    free(v);
    return GEIST_OK;
}

geist_status geist_token_piece(const geist_model *model, int32_t id, uint32_t flags, char *buf,
                               size_t cap, size_t *len) {
    const gt_tokenizer *t;
    geist_status st = need_tokenizer(model, "token_piece", &t);
    if (st) return st;
    if (!len) return text_fail(model, GEIST_ERR_INVALID_ARGUMENT, "token_piece: len is NULL");
    if (!buf && cap > 0)
        return text_fail(model, GEIST_ERR_INVALID_ARGUMENT, "token_piece: buf is NULL");
    if ((st = check_id(model, t, id, "token_piece"))) return st;
    bool special = flags & GEIST_DETOKENIZE_RENDER_SPECIAL;
    size_t n = gt_tokenizer_piece(t, id, special, false, NULL, 0);
    *len = n;
    if (n > cap)
        return text_fail(model, GEIST_ERR_BUFFER_TOO_SMALL,
                         "token_piece: %zu bytes do not fit in a buffer of %zu", n, cap);
    gt_tokenizer_piece(t, id, special, false, (uint8_t *)buf, cap);
    return GEIST_OK;
}

/* The pieces joined (llama.cpp's detokenize with remove_special=false), with SentencePiece's
 * leading-space rule: when the metadata's add_space_prefix is true, one leading space of the
 * FIRST token's piece is dropped, whatever that token is (a BOS in front keeps the space). Both
 * real models have add_space_prefix false. clean_up_tokenization_spaces is never applied (see
 * tokenizer.h), so the result is lossless and equals the streaming detokenizer's. */
geist_status geist_detokenize(const geist_model *model, const int32_t *ids, size_t n,
                              uint32_t flags, char *buf, size_t cap, size_t *len) {
    const gt_tokenizer *t;
    geist_status st = need_tokenizer(model, "detokenize", &t);
    if (st) return st;
    if (!len) return text_fail(model, GEIST_ERR_INVALID_ARGUMENT, "detokenize: len is NULL");
    if (!ids && n > 0)
        return text_fail(model, GEIST_ERR_INVALID_ARGUMENT, "detokenize: ids is NULL");
    if (!buf && cap > 0)
        return text_fail(model, GEIST_ERR_INVALID_ARGUMENT, "detokenize: buf is NULL");
    bool special = flags & GEIST_DETOKENIZE_RENDER_SPECIAL;
    bool strip = gt_tokenizer_strips_leading_space(t);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if ((st = check_id(model, t, ids[i], "detokenize"))) return st;
        total += gt_tokenizer_piece(t, ids[i], special, strip && i == 0, NULL, 0);
    }
    *len = total;
    if (total > cap)
        return text_fail(model, GEIST_ERR_BUFFER_TOO_SMALL,
                         "detokenize: %zu bytes do not fit in a buffer of %zu", total, cap);
    if (!buf) return GEIST_OK; /* cap 0 and nothing to write (no NULL + 0 below) */
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        at += gt_tokenizer_piece(t, ids[i], special, strip && i == 0, (uint8_t *)buf + at,
                                 cap - at);
    if (at < cap) buf[at] = '\0';
    return GEIST_OK;
}

/* ------------------------------------------------------------------------------------------- */
/* Streaming detokenizer (tokenizer/detok.h). A geist_detokenizer is a gt_detok: the handle is
 * only ever converted back, never dereferenced as a geist_detokenizer. */

geist_status geist_detokenizer_create(const geist_model *model, uint32_t flags,
                                      geist_detokenizer **out) {
    const gt_tokenizer *t;
    geist_status st = need_tokenizer(model, "detokenizer_create", &t);
    if (st) return st;
    if (!out)
        return text_fail(model, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_create: out is NULL");
    gt_detok *d = NULL;
    gt_err err;
    if ((st = gt_detok_create(model, flags, &d, &err))) return gt_model_record_error(model, &err);
    *out = (geist_detokenizer *)d;
    return GEIST_OK;
}

void geist_detokenizer_free(geist_detokenizer *d) { gt_detok_free((gt_detok *)d); }

geist_status geist_detokenizer_push(geist_detokenizer *dh, int32_t id, char *buf, size_t cap,
                                    size_t *len) {
    gt_detok *d = (gt_detok *)dh;
    if (!d) return text_fail(NULL, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_push: d is NULL");
    const geist_model *m = gt_detok_model(d);
    if (!len) return text_fail(m, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_push: len is NULL");
    if (!buf && cap > 0)
        return text_fail(m, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_push: buf is NULL");
    gt_err err;
    if (gt_detok_push(d, id, buf, cap, len, &err)) return gt_model_record_error(m, &err);
    return GEIST_OK;
}

geist_status geist_detokenizer_flush(geist_detokenizer *dh, char *buf, size_t cap, size_t *len) {
    gt_detok *d = (gt_detok *)dh;
    if (!d) return text_fail(NULL, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_flush: d is NULL");
    const geist_model *m = gt_detok_model(d);
    if (!len) return text_fail(m, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_flush: len is NULL");
    if (!buf && cap > 0)
        return text_fail(m, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_flush: buf is NULL");
    gt_err err;
    if (gt_detok_flush(d, buf, cap, len, &err)) return gt_model_record_error(m, &err);
    return GEIST_OK;
}

geist_status geist_model_special_tokens(const geist_model *model, geist_special_tokens *out) {
    const gt_tokenizer *t;
    geist_status st = need_tokenizer(model, "special_tokens", &t);
    if (st) return st;
    if (!out) return text_fail(model, GEIST_ERR_INVALID_ARGUMENT, "special_tokens: out is NULL");
    gt_special_ids s;
    gt_tokenizer_special(t, &s);
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->bos = s.bos;
    out->eos = s.eos;
    out->eot = s.eot;
    out->unk = s.unk;
    out->pad = s.pad;
    out->add_bos = s.add_bos ? 1 : 0;
    out->add_eos = s.add_eos ? 1 : 0;
    return GEIST_OK;
}

int32_t geist_token_is_end(const geist_model *model, int32_t id) {
    return gt_token_is_end(model, id) ? 1 : 0;
}
