/* Activation formats: what a matrix kernel does to the float activations before the dot product.
 *
 * Like llama.cpp (whose outputs are our outside oracle), every backend rounds activations to 8
 * bits before multiplying them with a quantized weight: 32-value blocks with an f16 scale for the
 * 32-blocks types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL), 256-value blocks with an f32 scale for
 * the K-quants and IQ4_XS (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS). Float weights (F32, F16, BF16)
 * see float activations. geist.reference mirrors this.
 *
 * Every backend computes the product with quantized weights the same way, bit for bit: the
 * activation row is quantized once per matmul call into the int8 row below, each weight block
 * (or K sub-block) is dotted with it as an exact int32 sum, and the per-block floats are combined
 * in one canonical order (cpu_scalar/quants.c, gt_scalar_matmul_q, defines it). */
#ifndef GEIST_ACT_QUANT_H
#define GEIST_ACT_QUANT_H

#include <stddef.h>
#include <stdint.h>

typedef enum gt_act_format {
    GT_ACTF_F32 = 0,    /* float activations */
    GT_ACTF_Q8_32 = 1,  /* blocks of 32: d = f16(amax / 127), q = round(x / d) */
    GT_ACTF_Q8_256 = 2  /* blocks of 256: d = max / -127 (signed max), q = min(127, rint(x / d)) */
} gt_act_format;

gt_act_format gt_act_format_for(uint32_t weight_type);

/* y = the values the 8-bit activations represent (x may equal y). n is a multiple of the block. */
void gt_round_activations(gt_act_format f, const float *x, float *y, int64_t n);

/* A quantized activation row of n values (n a multiple of the block), 64-byte aligned stride:
 *   int8 q[n]            the rounded values
 *   float d[n / B]       scale of each block (Q8_32: the f16 scale as float; Q8_256: f32)
 *   int32 s[n / 16]      Q8_256: sum of q over each 16 values (K-quant sub-block offsets)
 *   int32 s[n / 32]      Q8_32: sum of q over each block (Q4_0/Q5_0 offsets, Q4_1/Q5_1 mins)
 * q[i] * d[i / B] is exactly the value gt_round_activations gives. */
size_t gt_act_q_row_bytes(gt_act_format f, int64_t n);
void gt_quantize_act_row(gt_act_format f, const float *x, int64_t n, uint8_t *dst);

static inline const float *gt_act_q_scales(const uint8_t *row, int64_t n) {
    return (const float *)(const void *)(row + n);
}
static inline const int32_t *gt_act_q_sums(const uint8_t *row, int64_t n, int64_t block) {
    return (const int32_t *)(const void *)(row + n + 4 * (n / block));
}

#endif
