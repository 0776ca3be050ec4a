/* cpu_scalar: the reference backend. Plain C, no intrinsics; every other backend is checked
 * against it. */
#include "../backend.h"
#include "quants.h"

static bool scalar_available(void) { return true; }

static void scalar_matmul(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                          int64_t r0, int64_t r1, float *tmp) {
    gt_scalar_matmul_rows(w->type, w->data, w->row_bytes, w->n_in, r0, r1, x, n_tok, y, ldy, tmp);
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
