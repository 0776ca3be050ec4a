/* The backend interface: every compute kernel the forward pass needs, behind one vtable, so that
 * cpu_x86, cpu_neon, vulkan and metal plug in beside cpu_scalar (the reference). Ops marked
 * optional may be NULL; the rest are required. Elementwise steps (norms, rotary, activations:
 * session/forward.c, util/vmath.c) and attention (session/kv.c) are not backend ops: the CPU runs
 * them for every backend, with the SIMD that the backend's `simd` permits (and the CPU has,
 * util/cpu.h), in the same arithmetic either way (one exception below), so CPU backends agree:
 *   cpu_scalar (and its exact variant): GT_SIMD_NONE, plain C loops only: attention through
 *     kv.c's portable vector helpers and plain softmaxes, activations through vmath.c's
 *     gated_plain (e^x by gt_vexp1, util/vexp_x86.h), KV rows converted to F16 one by one.
 *   cpu_x86_avx2: GT_SIMD_AVX2: the AVX2/F16C/FMA attention and activations.
 *   cpu_x86 (the default on x86): GT_SIMD_AVX2 for these steps on every CPU (its products use
 *     AVX-512 VNNI where present: integer sums, the same bits), so it matches cpu_scalar bit for
 *     bit everywhere.
 *   cpu_x86_avx512 (asked for by name): GT_SIMD_AVX512: as cpu_x86, and F16 attention by the
 *     AVX-512 kernels where the CPU has AVX-512F and the head dims are multiples of 16. Those
 *     kernels accumulate by fused multiply-adds (their own order, not the canonical one), so
 *     there the logits differ from cpu_scalar's by rounding, which quantized activations can
 *     turn into parting greedy ids (tests/core/test_cpu_x86.py says what is checked there).
 * A backend that sets no `simd` (0) gets the plain loops. The sampler of a runtime request follows
 * the same permission (runtime/runtime.c); a standalone geist_sampler uses the CPU's best. */
#ifndef GEIST_BACKEND_H
#define GEIST_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/cpu.h"

/* A weight matrix as a view into the model's span: n_out rows of n_in values of `type`. */
typedef struct gt_weight {
    const uint8_t *data; /* NULL: absent (optional tensors) */
    uint32_t type;
    int64_t n_in;
    int64_t n_out;
    size_t row_bytes;
} gt_weight;

typedef struct gt_backend {
    const char *name;
    /* Is this backend usable on the running machine? (CPU features, a device.) */
    bool (*available)(void);
    /* Y[t * ldy + r] = dot(W[r], X[t]) for r in [r0, r1), t in [0, n_tok). X is n_tok rows of
     * w->n_in floats. tmp: w->n_in floats of scratch owned by the caller. */
    void (*matmul)(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                   int64_t r0, int64_t r1, float *tmp);
    /* Dequantizes row r of w into dst (w->n_in floats): embedding lookups. */
    void (*get_row)(const gt_weight *w, int64_t r, float *dst);
    float (*vec_dot)(uint32_t type, const void *row, const float *x, int64_t n);
    /* Optional (NULL: matmul only). Quantized activations, prepared once per product and shared
     * by all the row tasks (act_quant.h). act_row_bytes: bytes per token row for a weight of
     * `type` and n_in inputs, 0 when the type takes float activations (then use matmul).
     * quantize_acts: n_tok rows of x into xq (n_tok * act_row_bytes bytes, 64-byte aligned).
     * matmul_q: as matmul, from those rows; the same numbers as matmul. */
    size_t (*act_row_bytes)(uint32_t type, int64_t n_in);
    void (*quantize_acts)(uint32_t type, const float *x, int64_t n_tok, int64_t n_in, void *xq);
    void (*matmul_q)(const gt_weight *w, const void *xq, int64_t n_tok, float *y, int64_t ldy,
                     int64_t r0, int64_t r1);
    /* The widest SIMD the CPU-side steps may use for this backend (see the top); 0 = plain C. */
    gt_simd simd;
} gt_backend;

/* matmul for backends with matmul_q: quantizes x (a heap buffer) and calls matmul_q; returns
 * false, y untouched, when the type takes float activations or memory is short. */
bool gt_backend_matmul_via_q(const gt_backend *be, const gt_weight *w, const float *x,
                             int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1);

const gt_backend *gt_backend_cpu_scalar(void);
/* cpu_scalar with exact float activations (GEIST_ACTIVATIONS_F32); see act_quant.h. */
const gt_backend *gt_backend_cpu_scalar_exact(void);
/* NULL if no backend of that name is compiled in. "auto" picks the best available. */
const gt_backend *gt_backend_find(const char *name);
/* Comma-separated names of the compiled-in backends. */
const char *gt_backend_names(void);

#endif
