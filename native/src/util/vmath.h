/* Elementwise math of the forward pass, vectorized where the CPU allows. The choice depends on
 * the CPU only, never on the backend, so every backend computes these the same way and backends
 * keep agreeing bit for bit (tests/core/test_cpu_x86.py). */
#ifndef GEIST_VMATH_H
#define GEIST_VMATH_H

#include <stdint.h>

/* Gated feed-forward activations, in place: g[i] = act(g[i]) * u[i], with
 * silu(x) = x / (1 + e^-x) and the tanh form of GELU, x / (1 + e^(-2 sqrt(2/pi) (x + 0.044715 x^3))). */
void gt_silu_mul(float *g, const float *u, int64_t n);
void gt_gelu_tanh_mul(float *g, const float *u, int64_t n);

#endif
