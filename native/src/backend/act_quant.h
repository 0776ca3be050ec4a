/* Activation formats: what a matrix kernel does to the float activations before the dot product.
 *
 * Like llama.cpp (whose outputs are our outside oracle), every backend rounds activations to 8
 * bits before multiplying them with a quantized weight: 32-value blocks with an f16 scale for the
 * 32-blocks types (Q4_0, Q4_1, Q5_0, Q8_0), 256-value blocks with an f32 scale for the K-quants
 * (Q4_K, Q6_K). Float weights (F32, F16) see float activations. SIMD backends do the dot in
 * integers; cpu_scalar rounds the activations to those exact values and dots in float, so all
 * backends compute the same function up to summation order. geist.reference mirrors this. */
#ifndef GEIST_ACT_QUANT_H
#define GEIST_ACT_QUANT_H

#include <stdint.h>

typedef enum gt_act_format {
    GT_ACTF_F32 = 0,    /* float activations */
    GT_ACTF_Q8_32 = 1,  /* blocks of 32: d = f16(amax / 127), q = round(x / d) */
    GT_ACTF_Q8_256 = 2  /* blocks of 256: d = max / -127 (signed max), q = min(127, rint(x / d)) */
} gt_act_format;

gt_act_format gt_act_format_for(uint32_t weight_type);

/* y = the values the 8-bit activations represent (x may equal y). n is a multiple of the block. */
void gt_round_activations(gt_act_format f, const float *x, float *y, int64_t n);

#endif
