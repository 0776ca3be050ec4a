/* Streaming detokenizer: the bytes of each piece go through a UTF-8 decoder that emits complete
 * characters, holds an incomplete tail (at most 3 bytes) for the next push, and replaces each
 * maximal invalid subsequence with U+FFFD (the WHATWG / Unicode "best practice" rule, which is
 * what Python's bytes.decode(errors="replace") does). So the pieces are always valid UTF-8, and
 * for a valid sequence they concatenate (with flush) to geist_detokenize()'s bytes.
 *
 * Internal: errors go to gt_err only (never the model's error slot or the thread's last error),
 * so the runtime's scheduler thread may use one; api/api_text.c wraps it as geist_detokenizer. */
#ifndef GEIST_DETOK_H
#define GEIST_DETOK_H

#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"

typedef struct gt_detok gt_detok;

/* flags: GEIST_DETOKENIZE_*. Errors: GEIST_ERR_STATE (no tokenizer), GEIST_ERR_INVALID_ARGUMENT
 * (unknown flags), GEIST_ERR_OUT_OF_MEMORY. */
geist_status gt_detok_create(const geist_model *m, uint32_t flags, gt_detok **out, gt_err *err);
void gt_detok_free(gt_detok *d);
/* The model the detokenizer reads (for the API's error recording). */
const geist_model *gt_detok_model(const gt_detok *d);

/* As geist_detokenizer_push / _flush: *len is the full length; GEIST_ERR_BUFFER_TOO_SMALL (state
 * unchanged) when it exceeds cap; buf may be NULL when cap is 0. push also fails with
 * GEIST_ERR_INVALID_ARGUMENT for an id outside the vocabulary. */
geist_status gt_detok_push(gt_detok *d, int32_t id, char *buf, size_t cap, size_t *len,
                           gt_err *err);
geist_status gt_detok_flush(gt_detok *d, char *buf, size_t cap, size_t *len, gt_err *err);

#endif
