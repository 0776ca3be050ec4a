/* cpu_scalar: the reference backend. Plain C, no intrinsics; every other backend is checked
 * against it. Activations are rounded to the 8-bit format of the weight type first
 * (act_quant.h), as every backend does, then dotted in float. */
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

static void scalar_matmul(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                          int64_t r0, int64_t r1, float *tmp) {
    const gt_act_format f = gt_act_format_for(w->type);
    if (f == GT_ACTF_F32) {
        gt_scalar_matmul_rows(w->type, w->data, w->row_bytes, w->n_in, r0, r1, x, n_tok, y, ldy,
                              tmp);
        return;
    }
    /* Round one token at a time into a stack block so no allocation is needed: the rounded
     * row must live beside tmp, so process tokens in groups that fit a fixed buffer. */
    enum { GROUP_FLOATS = 16384 };
    float xr[GROUP_FLOATS];
    const int64_t per = w->n_in <= GROUP_FLOATS ? GROUP_FLOATS / w->n_in : 0;
    if (per == 0) { /* a row wider than the buffer: one token at a time from the heap */
        float *row = malloc((size_t)w->n_in * sizeof(float));
        if (!row) return; /* cannot happen in practice; leaves y untouched */
        for (int64_t t = 0; t < n_tok; t++) {
            gt_round_activations(f, x + t * w->n_in, row, w->n_in);
            gt_scalar_matmul_rows(w->type, w->data, w->row_bytes, w->n_in, r0, r1, row, 1,
                                  y + t * ldy, ldy, tmp);
        }
        free(row);
        return;
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += per) {
        const int64_t nt = n_tok - t0 < per ? n_tok - t0 : per;
        gt_round_activations(f, x + t0 * w->n_in, xr, nt * w->n_in);
        gt_scalar_matmul_rows(w->type, w->data, w->row_bytes, w->n_in, r0, r1, xr, nt,
                              y + t0 * ldy, ldy, tmp);
    }
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
