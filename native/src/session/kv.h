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
/* The same scratch carved from a caller's buffer of gt_attn_scratch_floats floats. */
size_t gt_attn_scratch_floats(const gt_config *c, int32_t max_ctx);
void gt_attn_scratch_view(gt_attn_scratch *a, const gt_config *c, int32_t max_ctx, float *buf);
void gt_attn_scratch_free(gt_attn_scratch *a);

/* Stores K (n_head_kv * head_dim_k floats) and V (n_head_kv * head_dim_v floats) of position pos
 * in layer `layer` (ring slot pos % rows for sliding-window layers). Positions are absolute
 * (a session on a shared prefix starts at n_prefix). */
void gt_kv_write(geist_session *s, int32_t layer, int32_t pos, const float *k, const float *v);

/* The K/V rows of one pass over several new positions of a session, set aside in the session's
 * row format while those positions attend. On a sliding-window ring, writing them into the ring
 * first could overwrite rows that earlier positions of the same pass still see; staged, every
 * position reads older rows from the ring and the pass's rows from here, and the rows go into the
 * ring (gt_kv_write) once all have attended. Row i (position pos0 + i) at k + i * krow and
 * v + i * vrow (gt_kv_stage_row_bytes gives krow + vrow). */
typedef struct gt_kv_stage {
    uint8_t *k, *v;
    int32_t pos0, n;
} gt_kv_stage;

/* out (n_head * head_dim_v) = softmax(q K^T * scale) V, for the query heads [h0, h1) (the rest
 * of out is untouched: head ranges may run as separate tasks), over the positions position `pos` sees in
 * this layer (all of 0..pos, or the last `window` of them on sliding-window layers), reading the
 * shared prefix's rows for positions below n_prefix and, with a stage (else NULL), the staged rows
 * for positions from stage->pos0. The K/V of pos itself must already be written (or staged).
 * Results are the same, bit for bit, as with every row written in order. */
void gt_kv_attend(const geist_session *s, int32_t layer, const float *q, int32_t pos, float *out,
                  gt_attn_scratch *a, const gt_kv_stage *stage, int32_t h0, int32_t h1);

/* How n consecutive new positions of this layer can attend apart from each other (in parallel).
 * GT_KV_DIRECT: write all their rows, then attend (no ring slot is reused among them);
 * GT_KV_STAGED: stage their rows (a ring); GT_KV_IN_ORDER: write and attend one at a time
 * (KIVI, whose block quantization changes rows that later positions read). One row: direct. */
typedef enum gt_kv_batching { GT_KV_IN_ORDER = 0, GT_KV_DIRECT = 1, GT_KV_STAGED = 2 } gt_kv_batching;
gt_kv_batching gt_kv_batching_for(const geist_session *s, int32_t layer, int32_t n);

/* krow + vrow of the session's mode (KIVI: 0, it never stages); at most
 * n_head_kv * (head_dim_k + head_dim_v) * 4. */
size_t gt_kv_stage_row_bytes(const geist_session *s);
/* Stores row i (position stage->pos0 + i) of the stage: the bytes gt_kv_write would store. */
void gt_kv_stage_write(const geist_session *s, const gt_kv_stage *stage, int32_t i, const float *k,
                       const float *v);
/* Copies staged row i into the layer's cache (its ring slot), once every row has attended. */
void gt_kv_stage_commit(geist_session *s, int32_t layer, const gt_kv_stage *stage, int32_t i);

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
