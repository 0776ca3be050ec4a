/* cpu_scalar: the reference backend. Plain C, no intrinsics; every other backend is checked
 * against it. Products with quantized weights quantize the activations to 8 bits first
 * (act_quant.h) and use the canonical integer block dots of quants.c (gt_scalar_dot_q). */
#include <stdlib.h>

#include "../act_quant.h"
#include "../backend.h"
#include "quants.h"

static bool scalar_available(void) { return true; }

/* GEIST_ACTIVATIONS_F32: the product with the float activations as they are. */
static void exact_matmul(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                         int64_t r0, int64_t r1, float *tmp) {
    gt_scalar_matmul_rows(w->type, w->data, w->row_bytes, w->n_in, r0, r1, x, n_tok, y, ldy, tmp);
}

static size_t scalar_act_row_bytes(uint32_t type, int64_t n_in) {
    return gt_act_q_row_bytes(gt_act_format_for(type), n_in);
}

static void scalar_quantize_acts(uint32_t type, const float *x, int64_t n_tok, int64_t n_in,
                                 void *xq) {
    const gt_act_format f = gt_act_format_for(type);
    const size_t rb = gt_act_q_row_bytes(f, n_in);
    for (int64_t t = 0; t < n_tok; t++)
        gt_quantize_act_row(f, x + t * n_in, n_in, (uint8_t *)xq + (size_t)t * rb);
}

static void scalar_matmul_q(const gt_weight *w, const void *xq, int64_t n_tok, float *y,
                            int64_t ldy, int64_t r0, int64_t r1) {
    gt_scalar_matmul_q(w->type, w->data, w->row_bytes, w->n_in, r0, r1, xq,
                       scalar_act_row_bytes(w->type, w->n_in), n_tok, y, ldy);
}

static const gt_backend k_scalar;

static void scalar_matmul(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                          int64_t r0, int64_t r1, float *tmp) {
    if (gt_act_format_for(w->type) == GT_ACTF_F32) {
        gt_scalar_matmul_rows(w->type, w->data, w->row_bytes, w->n_in, r0, r1, x, n_tok, y, ldy,
                              tmp);
        return;
    }
    /* out of memory: y stays untouched (cannot happen in practice) */
    (void)gt_backend_matmul_via_q(&k_scalar, w, x, n_tok, y, ldy, r0, r1);
}

static void scalar_get_row(const gt_weight *w, int64_t r, float *dst) {
    gt_scalar_dequantize_row(w->type, w->data + (size_t)r * w->row_bytes, dst, w->n_in);
}

static const gt_backend k_scalar = {
    .name = "cpu_scalar",
    .available = scalar_available,
    .matmul = scalar_matmul,
    .get_row = scalar_get_row,
    .vec_dot = gt_scalar_vec_dot,
    .act_row_bytes = scalar_act_row_bytes,
    .quantize_acts = scalar_quantize_acts,
    .matmul_q = scalar_matmul_q,
};

const gt_backend *gt_backend_cpu_scalar(void) { return &k_scalar; }

static const gt_backend k_scalar_exact = {
    .name = "cpu_scalar",
    .available = scalar_available,
    .matmul = exact_matmul,
    .get_row = scalar_get_row,
    .vec_dot = gt_scalar_vec_dot,
};

const gt_backend *gt_backend_cpu_scalar_exact(void) { return &k_scalar_exact; }
