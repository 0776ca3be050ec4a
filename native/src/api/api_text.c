/* The text calls of geist.h: tokenize, token pieces, detokenize (whole and streaming), special
 * tokens. All read the model's immutable tokenizer; scratch memory belongs to the call (or to the
 * caller's detokenizer), so any number of threads may use one model at once. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/model.h"
#include "../tokenizer/tokenizer.h"

static geist_status text_fail(const geist_model *m, geist_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

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
    gt_ids out = {NULL, 0, 0};
    gt_err err;
    st = gt_tokenizer_encode(t, text, len, flags, &out, &err);
    if (st) {
        gt_ids_free(&out);
        return gt_model_record_error(model, &err);
    }
    *n_ids = out.n;
    if (out.n > cap) {
        gt_ids_free(&out);
        return text_fail(model, GEIST_ERR_BUFFER_TOO_SMALL,
                         "tokenize: %zu ids do not fit in a buffer of %zu", *n_ids, cap);
    }
    if (out.n) memcpy(ids, out.v, out.n * sizeof(int32_t));
    gt_ids_free(&out);
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
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        at += gt_tokenizer_piece(t, ids[i], special, strip && i == 0, (uint8_t *)buf + at,
                                 cap - at);
    if (at < cap) buf[at] = '\0';
    return GEIST_OK;
}

/* ------------------------------------------------------------------------------------------- */
/* Streaming detokenizer: the bytes of each piece go through a UTF-8 decoder that emits complete
 * characters, holds an incomplete tail (at most 3 bytes) for the next push, and replaces each
 * maximal invalid subsequence with U+FFFD (the WHATWG / Unicode "best practice" rule, which is
 * what Python's bytes.decode(errors="replace") does). So the pieces are always valid UTF-8, and
 * for a valid sequence they concatenate (with flush) to geist_detokenize()'s bytes. */

struct geist_detokenizer {
    const geist_model *model;
    const gt_tokenizer *tok;
    uint32_t flags;
    bool first;       /* next push is the sequence's first token (leading-space rule) */
    uint8_t held[4];  /* bytes of an incomplete character */
    size_t n_held;
    uint8_t *scratch; /* held bytes + one piece */
    size_t scratch_cap;
};

geist_status geist_detokenizer_create(const geist_model *model, uint32_t flags,
                                      geist_detokenizer **out) {
    const gt_tokenizer *t;
    geist_status st = need_tokenizer(model, "detokenizer_create", &t);
    if (st) return st;
    if (!out)
        return text_fail(model, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_create: out is NULL");
    if (flags & ~(uint32_t)GEIST_DETOKENIZE_RENDER_SPECIAL)
        return text_fail(model, GEIST_ERR_INVALID_ARGUMENT,
                         "detokenizer_create: unknown flags 0x%x", flags);
    geist_detokenizer *d = calloc(1, sizeof *d);
    size_t cap = gt_tokenizer_max_piece(t) + 4;
    uint8_t *scratch = malloc(cap);
    if (!d || !scratch) {
        free(d);
        free(scratch);
        return text_fail(model, GEIST_ERR_OUT_OF_MEMORY, "out of memory (detokenizer)");
    }
    d->model = model;
    d->tok = t;
    d->flags = flags;
    d->first = true;
    d->scratch = scratch;
    d->scratch_cap = cap;
    *out = d;
    return GEIST_OK;
}

void geist_detokenizer_free(geist_detokenizer *d) {
    if (!d) return;
    free(d->scratch);
    free(d);
}

static const uint8_t k_replacement[3] = {0xEF, 0xBF, 0xBD};

static void emit(uint8_t *dst, size_t cap, size_t *n, const uint8_t *p, size_t k) {
    for (size_t i = 0; i < k; i++) {
        if (*n < cap) dst[*n] = p[i];
        (*n)++;
    }
}

/* Decodes in[0..n): writes complete characters / U+FFFD to dst (counting past cap), and returns
 * in *tail the start of an incomplete final sequence (n if none). */
static size_t utf8_stream(const uint8_t *in, size_t n, uint8_t *dst, size_t cap, size_t *tail) {
    size_t out = 0, i = 0, seq = 0, need = 0, seen = 0;
    uint8_t lower = 0x80, upper = 0xBF;
    while (i < n) {
        uint8_t b = in[i];
        if (need == 0) {
            if (b < 0x80) {
                emit(dst, cap, &out, &b, 1);
            } else if (b >= 0xC2 && b <= 0xDF) {
                need = 1;
            } else if (b >= 0xE0 && b <= 0xEF) {
                need = 2;
                if (b == 0xE0) lower = 0xA0;
                if (b == 0xED) upper = 0x9F;
            } else if (b >= 0xF0 && b <= 0xF4) {
                need = 3;
                if (b == 0xF0) lower = 0x90;
                if (b == 0xF4) upper = 0x8F;
            } else {
                emit(dst, cap, &out, k_replacement, 3);
            }
            if (need) {
                seq = i;
                seen = 0;
            }
            i++;
            continue;
        }
        if (b < lower || b > upper) {
            /* the sequence so far is one maximal invalid subpart; b starts afresh */
            emit(dst, cap, &out, k_replacement, 3);
            need = 0;
            lower = 0x80;
            upper = 0xBF;
            continue;
        }
        lower = 0x80;
        upper = 0xBF;
        i++;
        if (++seen == need) {
            emit(dst, cap, &out, in + seq, i - seq);
            need = 0;
        }
    }
    *tail = need ? seq : n;
    return out;
}

geist_status geist_detokenizer_push(geist_detokenizer *d, int32_t id, char *buf, size_t cap,
                                    size_t *len) {
    if (!d) return text_fail(NULL, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_push: d is NULL");
    if (!len)
        return text_fail(d->model, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_push: len is NULL");
    if (!buf && cap > 0)
        return text_fail(d->model, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_push: buf is NULL");
    geist_status st = check_id(d->model, d->tok, id, "detokenizer_push");
    if (st) return st;
    bool special = d->flags & GEIST_DETOKENIZE_RENDER_SPECIAL;
    bool strip = d->first && gt_tokenizer_strips_leading_space(d->tok);
    memcpy(d->scratch, d->held, d->n_held);
    size_t n = d->n_held + gt_tokenizer_piece(d->tok, id, special, strip, d->scratch + d->n_held,
                                              d->scratch_cap - d->n_held);
    size_t tail;
    size_t out = utf8_stream(d->scratch, n, NULL, 0, &tail);
    *len = out;
    if (out > cap)
        return text_fail(d->model, GEIST_ERR_BUFFER_TOO_SMALL,
                         "detokenizer_push: %zu bytes do not fit in a buffer of %zu", out, cap);
    utf8_stream(d->scratch, n, (uint8_t *)buf, cap, &tail);
    d->n_held = n - tail;
    memcpy(d->held, d->scratch + tail, d->n_held);
    d->first = false;
    return GEIST_OK;
}

geist_status geist_detokenizer_flush(geist_detokenizer *d, char *buf, size_t cap, size_t *len) {
    if (!d) return text_fail(NULL, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_flush: d is NULL");
    if (!len)
        return text_fail(d->model, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_flush: len is NULL");
    if (!buf && cap > 0)
        return text_fail(d->model, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_flush: buf is NULL");
    /* held bytes are one incomplete (so far valid) sequence: one U+FFFD */
    size_t out = d->n_held ? sizeof k_replacement : 0;
    *len = out;
    if (out > cap)
        return text_fail(d->model, GEIST_ERR_BUFFER_TOO_SMALL,
                         "detokenizer_flush: %zu bytes do not fit in a buffer of %zu", out, cap);
    if (out) memcpy(buf, k_replacement, out);
    d->n_held = 0;
    d->first = true;
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
    if (!model) return 0;
    const gt_tokenizer *t = gt_model_tokenizer(model);
    return gt_tokenizer_is_eog(t, id) ? 1 : 0;
}
