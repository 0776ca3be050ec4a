/* cpu_scalar dequantize and dot kernels: the reference every other backend is held to.
 *
 * Supported types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K, IQ4_XS (the `supported` entries of
 * util/ggml_types.h). Callers check the type and sizes; these kernels do not (hot path). For a
 * type they do not know they write zeros / return 0 rather than read past anything. */
#ifndef GEIST_CPU_SCALAR_QUANTS_H
#define GEIST_CPU_SCALAR_QUANTS_H

#include <stddef.h>
#include <stdint.h>

/* n is a multiple of the type's block size (see util/ggml_types.h). src holds n/block blocks. */
void gt_scalar_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Dot product of a row of n values of `type` with float x. Each run of 32 values is summed in
 * float (8 lanes, fixed order) and the runs are summed in double, so the result is close to the
 * float64 dot of the dequantized row. Bit-identical to what gt_scalar_matmul_rows() writes for the
 * same row and vector, so decode and prefill agree exactly. */
float gt_scalar_vec_dot(uint32_t type, const void *row, const float *x, int64_t n);

/* For rows [r0, r1) of a weight matrix W (rows of n_in values, row stride row_bytes), for each of
 * n_tok token activations X (n_tok x n_in, row-major floats), writes
 * Y[t * ldy + r] = dot(W[r], X[t]). Each W row is dequantized once into `tmp` (n_in floats,
 * caller provided) and reused for all tokens. */
void gt_scalar_matmul_rows(uint32_t type, const void *w, size_t row_bytes, int64_t n_in, int64_t r0,
                           int64_t r1, const float *x, int64_t n_tok, float *y, int64_t ldy,
                           float *tmp);

/* Dot of two float vectors with the same accumulation as gt_scalar_vec_dot (32-value runs in
 * float, runs summed in double). Exposed so attention and other float ops can share it. */
float gt_scalar_dot_f32(const float *a, const float *b, int64_t n);

/* The product of a quantized row (the 32-block and K types, IQ4_NL, IQ4_XS) with an activation row
 * quantized by gt_quantize_act_row in the format gt_act_format_for(type): the canonical
 * arithmetic every backend reproduces bit for bit (definition in quants.c). 0 for other types. */
float gt_scalar_dot_q(uint32_t type, const void *row, const void *xq, int64_t n);

/* Y[t * ldy + r] = gt_scalar_dot_q(W[r], XQ[t]) for r in [r0, r1), t < n_tok; XQ rows at
 * xq_stride bytes (gt_act_q_row_bytes). */
void gt_scalar_matmul_q(uint32_t type, const void *w, size_t row_bytes, int64_t n_in, int64_t r0,
                        int64_t r1, const void *xq, size_t xq_stride, int64_t n_tok, float *y,
                        int64_t ldy);

/* The canonical final sum of the eight per-block float lanes of a quantized row product: every
 * backend ends with exactly this tree so results are bit-identical (see quants.c). */
static inline float gt_lane_tree8(const float *l) {
    const float s01 = l[0] + l[1];
    const float s23 = l[2] + l[3];
    const float s45 = l[4] + l[5];
    const float s67 = l[6] + l[7];
    const float s03 = s01 + s23;
    const float s47 = s45 + s67;
    return s03 + s47;
}

#endif
