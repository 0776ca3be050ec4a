/* The KV cache's two operations, whatever the session's KV mode: write one position's K and V,
 * and attend one query over the positions it may see. The forward pass uses only these, so KV
 * formats (F32, F16, and the quantized modes) live here alone. */
#ifndef GEIST_KV_H
#define GEIST_KV_H

#include <stdbool.h>

#include "session.h"

/* Per-call scratch for attention (one row of scores per max_seq_len, dequantized rows). */
typedef struct gt_attn_scratch {
    float *scores;
    float *row_k, *row_v;
} gt_attn_scratch;

bool gt_attn_scratch_init(gt_attn_scratch *a, const gt_config *c, int32_t max_ctx);
void gt_attn_scratch_free(gt_attn_scratch *a);

/* Stores K (n_head_kv * head_dim_k floats) and V (n_head_kv * head_dim_v floats) of position pos
 * in layer `layer` (ring slot pos % rows for sliding-window layers). */
void gt_kv_write(geist_session *s, int32_t layer, int32_t pos, const float *k, const float *v);

/* out (n_head * head_dim_v) = softmax(q K^T * scale) V over the positions position `pos` sees in
 * this layer (all of 0..pos, or the last `window` of them on sliding-window layers). The K/V of
 * pos itself must already be written. */
void gt_kv_attend(const geist_session *s, int32_t layer, const float *q, int32_t pos, float *out,
                  gt_attn_scratch *a);

#endif
