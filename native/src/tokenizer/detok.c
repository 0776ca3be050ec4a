/* Streaming detokenizer (detok.h). */
#include "detok.h"

#include <stdlib.h>
#include <string.h>

#include "../model/model.h"
#include "tokenizer.h"

struct gt_detok {
    const geist_model *model;
    const gt_tokenizer *tok;
    uint32_t flags;
    bool first;       /* next push is the sequence's first token (leading-space rule) */
    uint8_t held[4];  /* bytes of an incomplete character */
    size_t n_held;
    uint8_t *scratch; /* held bytes + one piece */
    size_t scratch_cap;
};

geist_status gt_detok_create(const geist_model *m, uint32_t flags, gt_detok **out, gt_err *err) {
    const gt_tokenizer *t = gt_model_tokenizer(m);
    if (!t) return gt_fail(err, GEIST_ERR_STATE, "detokenizer_create: model has no tokenizer");
    if (flags & ~(uint32_t)GEIST_DETOKENIZE_RENDER_SPECIAL)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "detokenizer_create: unknown flags 0x%x",
                       flags);
    gt_detok *d = calloc(1, sizeof *d);
    size_t cap = gt_tokenizer_max_piece(t) + 4;
    uint8_t *scratch = malloc(cap);
    if (!d || !scratch) {
        free(d);
        free(scratch);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (detokenizer)");
    }
    d->model = m;
    d->tok = t;
    d->flags = flags;
    d->first = true;
    d->scratch = scratch;
    d->scratch_cap = cap;
    *out = d;
    return GEIST_OK;
}

void gt_detok_free(gt_detok *d) {
    if (!d) return;
    free(d->scratch);
    free(d);
}

const geist_model *gt_detok_model(const gt_detok *d) { return d->model; }

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

geist_status gt_detok_push(gt_detok *d, int32_t id, char *buf, size_t cap, size_t *len,
                           gt_err *err) {
    if (id < 0 || id >= gt_tokenizer_n_vocab(d->tok))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "detokenizer_push: token id %d outside the vocabulary [0, %d)", id,
                       gt_tokenizer_n_vocab(d->tok));
    bool special = d->flags & GEIST_DETOKENIZE_RENDER_SPECIAL;
    bool strip = d->first && gt_tokenizer_strips_leading_space(d->tok);
    memcpy(d->scratch, d->held, d->n_held);
    size_t n = d->n_held + gt_tokenizer_piece(d->tok, id, special, strip, d->scratch + d->n_held,
                                              d->scratch_cap - d->n_held);
    size_t tail;
    size_t out = utf8_stream(d->scratch, n, NULL, 0, &tail);
    *len = out;
    if (out > cap)
        return gt_fail(err, GEIST_ERR_BUFFER_TOO_SMALL,
                       "detokenizer_push: %zu bytes do not fit in a buffer of %zu", out, cap);
    utf8_stream(d->scratch, n, (uint8_t *)buf, cap, &tail);
    d->n_held = n - tail;
    memcpy(d->held, d->scratch + tail, d->n_held);
    d->first = false;
    return GEIST_OK;
}

geist_status gt_detok_flush(gt_detok *d, char *buf, size_t cap, size_t *len, gt_err *err) {
    /* held bytes are one incomplete (so far valid) sequence: one U+FFFD */
    size_t out = d->n_held ? sizeof k_replacement : 0;
    *len = out;
    if (out > cap)
        return gt_fail(err, GEIST_ERR_BUFFER_TOO_SMALL,
                       "detokenizer_flush: %zu bytes do not fit in a buffer of %zu", out, cap);
    if (out) memcpy(buf, k_replacement, out);
    d->n_held = 0;
    d->first = true;
    return GEIST_OK;
}
