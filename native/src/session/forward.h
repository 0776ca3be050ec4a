/* The batched forward pass: rows (one token each) from several sessions of one model go through
 * the layers together, so every weight matrix is streamed once per step for all of them;
 * attention runs per row over its own session's KV cache (session/kv.h). */
#ifndef GEIST_FORWARD_H
#define GEIST_FORWARD_H

#include "session.h"

typedef struct gt_batch_row {
    geist_session *s;
    int32_t id;     /* token id, checked by the caller */
    int32_t pos;    /* its position; a session's rows are contiguous, pos = n_past, n_past+1.. */
    float *logits;  /* NULL, or n_vocab floats for the logits after this row */
    int32_t *argmax; /* NULL, or the greedy id after this row (only on a device whose
                      * gt_device_ops.argmax is set: backend.h's gt_dev_row.argmax) */
} gt_batch_row;

/* Scratch for the batched pass, grown on demand and reused across steps (one per caller). */
typedef struct gt_fwd_scratch gt_fwd_scratch;
gt_fwd_scratch *gt_fwd_scratch_create(void);
void gt_fwd_scratch_free(gt_fwd_scratch *sc);
/* Bytes the scratch holds now. */
uint64_t gt_fwd_scratch_bytes(const gt_fwd_scratch *sc);

/* Runs n rows (all sessions of model m; the caller checked ids and capacity). Afterwards each
 * session's n_past has grown by its rows; a session whose last row has logits == s->logits has
 * has_logits set, any other has it cleared (its logits were an earlier position's). Row results
 * do not depend on which other rows share the batch. */
geist_status gt_forward_batch(const geist_model *m, const gt_batch_row *rows, int32_t n,
                              gt_fwd_scratch *sc, gt_err *err);

#endif
