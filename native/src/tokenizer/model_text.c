/* Model-level tokenize and end-token calls (tokenizer.h): the model's tokenizer, errors through
 * gt_err only. */
#include <stdlib.h>

#include "../model/model.h"
#include "tokenizer.h"

geist_status gt_tokenize_alloc(const geist_model *m, const char *text, size_t len, uint32_t flags,
                               int32_t **ids, size_t *n, gt_err *err) {
    *ids = NULL;
    *n = 0;
    const gt_tokenizer *t = gt_model_tokenizer(m);
    if (!t) return gt_fail(err, GEIST_ERR_STATE, "tokenize: model has no tokenizer");
    if (!text && len > 0) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "tokenize: text is NULL");
    if (flags & ~(uint32_t)(GEIST_TOKENIZE_ADD_SPECIAL | GEIST_TOKENIZE_PARSE_SPECIAL))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "tokenize: unknown flags 0x%x", flags);
    gt_ids out = {NULL, 0, 0};
    geist_status st = gt_tokenizer_encode(t, text, len, flags, &out, err);
    if (st) {
        gt_ids_free(&out);
        return st;
    }
    if (!out.v) { /* nothing was appended: callers may still expect an array to free */
        out.v = malloc(sizeof(int32_t));
        if (!out.v) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "tokenize: out of memory");
    }
    *ids = out.v;
    *n = out.n;
    return GEIST_OK;
}

bool gt_token_is_end(const geist_model *m, int32_t id) {
    return m && gt_tokenizer_is_eog(gt_model_tokenizer(m), id);
}
