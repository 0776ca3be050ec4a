/* The KV cache's two operations, whatever the session's KV mode: write one position's K and V,
 * and attend one query over the positions it may see. The forward pass uses only these, so KV
 * formats (F32, F16, INT8, INT4, KIVI-2bit) live here alone. Storage helpers for sessions,
 * snapshots and shared prefixes follow. */
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
 * in layer `layer` (ring slot pos % rows for sliding-window layers). Positions are absolute
 * (a session on a shared prefix starts at n_prefix). */
void gt_kv_write(geist_session *s, int32_t layer, int32_t pos, const float *k, const float *v);

/* out (n_head * head_dim_v) = softmax(q K^T * scale) V over the positions position `pos` sees in
 * this layer (all of 0..pos, or the last `window` of them on sliding-window layers), reading the
 * shared prefix's rows for positions below n_prefix. The K/V of pos itself must already be
 * written. */
void gt_kv_attend(const geist_session *s, int32_t layer, const float *q, int32_t pos, float *out,
                  gt_attn_scratch *a);

/* Whether n consecutive new positions of this layer may all be written before any of them
 * attends, with the same results as writing and attending one at a time: true unless a ring slot
 * would be reused within them or a KIVI block would close (which requantizes rows). */
bool gt_kv_rows_independent(const geist_session *s, int32_t layer, int32_t n);

/* ---- storage ------------------------------------------------------------------------------ */

/* 1 for a known mode (GEIST_KV_F32 .. GEIST_KV_KIVI2). */
bool gt_kv_mode_valid(int32_t mode);
const char *gt_kv_mode_name(int32_t mode);
void gt_kv_geom_init(gt_kv_geom *g, const gt_config *c, int32_t mode);

/* Rows a layer keeps for `cap` own positions, and whether they form a ring. */
int32_t gt_kv_layer_rows(const gt_kv_geom *g, bool sliding, int32_t window, int32_t cap,
                         bool *ring);
/* Resident bytes of a layer with `rows` rows (KIVI: blocks, per-token V records, residual). */
uint64_t gt_kv_layer_bytes(const gt_kv_geom *g, int32_t rows);
/* Allocates and commits (zeroes) the layer; false on overflow or out of memory (nothing held). */
bool gt_kv_layer_alloc(gt_kv_layer *kv, const gt_kv_geom *g, int32_t rows, bool ring);
void gt_kv_layer_free(gt_kv_layer *kv);
/* Copies all of src's bytes into dst (same geometry and rows). */
void gt_kv_layer_copy(gt_kv_layer *dst, const gt_kv_layer *src, const gt_kv_geom *g);

/* KIVI: storage positions below this are in quantized blocks (n = positions written). */
static inline int32_t gt_kivi_boundary(int32_t n) { return n / GT_KIVI_GROUP * GT_KIVI_GROUP; }

/* KIVI truncation: the block holding storage positions [n / G * G, n) is turned back into the
 * F16 residual (dequantized: lossy), so writing can continue at n. Needs n < the old boundary. */
void gt_kivi_unquantize(const gt_kv_layer *kv, const gt_kv_geom *g, const gt_config *c,
                        int32_t n);

#endif
