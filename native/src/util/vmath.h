/* Elementwise math of the forward pass: plain C loops, or vectorized where the caller permits
 * (simd: the engine's backend's, backend/backend.h) and the CPU allows. Both forms compute the
 * same operations in the same order, so they give identical bits and the backends keep agreeing
 * bit for bit (tests/core/test_cpu_x86.py, native/tests/test_vmath.c). */
#ifndef GEIST_VMATH_H
#define GEIST_VMATH_H

#include <stdint.h>

#include "cpu.h"

/* Gated feed-forward activations, in place: g[i] = act(g[i]) * u[i], with
 * silu(x) = x / (1 + e^-x) and the tanh form of GELU, x / (1 + e^(-2 sqrt(2/pi) (x + 0.044715 x^3))),
 * e^x by util/vexp_x86.h's polynomial. */
void gt_silu_mul(float *g, const float *u, int64_t n, gt_simd simd);
void gt_gelu_tanh_mul(float *g, const float *u, int64_t n, gt_simd simd);

#endif
