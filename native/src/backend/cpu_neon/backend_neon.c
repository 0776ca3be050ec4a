/* cpu_neon (see backend_neon.h for the four names).
 *
 * Quantized weights: activations quantized once per product by cpu_scalar's own code (the same
 * int8 rows), integer block dots in NEON (neon_kernels.inc), the canonical float combination of
 * cpu_scalar/quants.c: bit-identical to cpu_scalar. Float weights (F32, F16) and vec_dot:
 * cpu_scalar's order (runs of 32 values, lane k of 8 takes products k, k+8, k+16, k+24, multiply
 * then add, the lane tree by pairwise adds, the runs summed in double) with two float32x4 lanes.
 * Attention, norms and activations run the plain path (simd = GT_SIMD_NONE), as for cpu_scalar. */
#include "backend/cpu_neon/backend_neon.h"

#include "backend/cpu_scalar/quants.h"

#if defined(__aarch64__)

#include <stdlib.h>

#include "neon_common.h"
#include "util/cpu.h"

#define SEG 256 /* values per dequantized segment of the float path */

static bool has_neon(void) { return gt_cpu_has(GT_CPU_NEON); }
static bool has_dotprod(void) { return gt_cpu_has(GT_CPU_NEON | GT_CPU_DOTPROD); }
static bool has_i8mm(void) { return gt_cpu_has(GT_CPU_NEON | GT_CPU_DOTPROD | GT_CPU_I8MM); }

/* ---- float path ------------------------------------------------------------------------------ */

/* cpu_scalar's dot_run for a full run of 32 */
static inline float run32(const float *a, const float *b) {
    float32x4_t l0 = vdupq_n_f32(0.0f), l1 = vdupq_n_f32(0.0f);
    for (int i = 0; i < 32; i += 8) {
        l0 = vaddq_f32(l0, vmulq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
        l1 = vaddq_f32(l1, vmulq_f32(vld1q_f32(a + i + 4), vld1q_f32(b + i + 4)));
    }
    const float32x4_t p = vpaddq_f32(l0, l1); /* l0+l1, l2+l3, l4+l5, l6+l7 */
    const float32x4_t q = vpaddq_f32(p, p);   /* s03, s47, s03, s47 */
    return vgetq_lane_f32(q, 0) + vgetq_lane_f32(q, 1);
}

/* the sum over runs of 32 of a . b (n values), each run in float, runs in double; a tail run is
 * zero-padded (adding +0 to a lane leaves it as cpu_scalar's shorter loop does) */
static double dot_runs(const float *a, const float *b, int64_t n, double acc) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) acc += (double)run32(a + i, b + i);
    if (i < n) {
        float ta[32] = {0}, tb[32] = {0};
        memcpy(ta, a + i, (size_t)(n - i) * sizeof(float));
        memcpy(tb, b + i, (size_t)(n - i) * sizeof(float));
        acc += (double)run32(ta, tb);
    }
    return acc;
}

/* values [k0, k0 + len) of a row as floats (cpu_scalar's dequantization) */
static void deq_seg(uint32_t type, const uint8_t *row, int64_t k0, int64_t len, float *dst) {
    if (type == GT_TYPE_F32) {
        memcpy(dst, row + 4 * k0, (size_t)len * sizeof(float));
    } else if (type == GT_TYPE_F16) {
        const uint8_t *p = row + 2 * k0;
        int64_t i = 0;
        for (; i + 8 <= len; i += 8) { /* f16 -> f32 is exact either way */
            const float16x8_t h = vreinterpretq_f16_u8(vld1q_u8(p + 2 * i));
            vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
            vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
        }
        for (; i < len; i++) dst[i] = nq_f16(p + 2 * i);
    } else {
        const gt_type_info *ti = gt_type_get(type);
        if (ti != NULL && ti->block > 0)
            gt_scalar_dequantize_row(type, row + (k0 / ti->block) * ti->bytes, dst, len);
        else
            memset(dst, 0, (size_t)len * sizeof(float));
    }
}

static float row_dot(uint32_t type, const uint8_t *row, const float *x, int64_t n) {
    float buf[SEG];
    double acc = 0.0;
    for (int64_t k0 = 0; k0 < n; k0 += SEG) { /* SEG is a multiple of 32: the runs line up */
        const int64_t len = n - k0 < SEG ? n - k0 : SEG;
        deq_seg(type, row, k0, len, buf);
        acc = dot_runs(buf, x + k0, len, acc);
    }
    return (float)acc;
}

static void matmul_float(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                         int64_t r0, int64_t r1, float *tmp) {
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = w->data + (size_t)r * w->row_bytes;
        if (tmp != NULL) { /* the row once, for every token */
            deq_seg(w->type, row, 0, w->n_in, tmp);
            for (int64_t t = 0; t < n_tok; t++)
                y[t * ldy + r] = (float)dot_runs(tmp, x + t * w->n_in, w->n_in, 0.0);
        } else {
            for (int64_t t = 0; t < n_tok; t++)
                y[t * ldy + r] = row_dot(w->type, row, x + t * w->n_in, w->n_in);
        }
    }
}

static float neon_vec_dot(uint32_t type, const void *row, const float *x, int64_t n) {
    return n > 0 ? row_dot(type, (const uint8_t *)row, x, n) : 0.0f;
}

/* ---- integer path ---------------------------------------------------------------------------- */

static size_t neon_act_row_bytes(uint32_t type, int64_t n_in) {
    return gt_act_q_row_bytes(gt_act_format_for(type), n_in);
}

static void neon_quantize_acts(uint32_t type, const float *x, int64_t n_tok, int64_t n_in,
                               void *xq) {
    const gt_act_format f = gt_act_format_for(type);
    const size_t rb = gt_act_q_row_bytes(f, n_in);
    for (int64_t t = 0; t < n_tok; t++)
        gt_quantize_act_row(f, x + t * n_in, n_in, (uint8_t *)xq + (size_t)t * rb);
}

static void mmq_auto(const gt_weight *w, const void *xq, int64_t n_tok, float *y, int64_t ldy,
                     int64_t r0, int64_t r1) {
    if (has_i8mm()) gt_neon_i8mm_matmul_q(w, xq, n_tok, y, ldy, r0, r1);
    else if (has_dotprod()) gt_neon_dotprod_matmul_q(w, xq, n_tok, y, ldy, r0, r1);
    else gt_neon_plain_matmul_q(w, xq, n_tok, y, ldy, r0, r1);
}

static const gt_backend k_auto, k_plain, k_dot, k_mm;

static void mm_with(const gt_backend *be, const gt_weight *w, const float *x, int64_t n_tok,
                    float *y, int64_t ldy, int64_t r0, int64_t r1, float *tmp) {
    if (gt_act_format_for(w->type) == GT_ACTF_F32) matmul_float(w, x, n_tok, y, ldy, r0, r1, tmp);
    else (void)gt_backend_matmul_via_q(be, w, x, n_tok, y, ldy, r0, r1); /* OOM: y untouched */
}

#define MM_ENTRY(fn, be)                                                                          \
    static void fn(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,      \
                   int64_t r0, int64_t r1, float *tmp) {                                          \
        mm_with(&be, w, x, n_tok, y, ldy, r0, r1, tmp);                                           \
    }
MM_ENTRY(mm_auto, k_auto)
MM_ENTRY(mm_plain, k_plain)
MM_ENTRY(mm_dot, k_dot)
MM_ENTRY(mm_mm, k_mm)

static void neon_get_row(const gt_weight *w, int64_t r, float *dst) {
    gt_scalar_dequantize_row(w->type, w->data + (size_t)r * w->row_bytes, dst, w->n_in);
}

#define NEON_BACKEND(var, nm, avail, mm, mmq)                                                     \
    static const gt_backend var = {.name = nm, .available = avail, .matmul = mm,                  \
                                   .get_row = neon_get_row, .vec_dot = neon_vec_dot,              \
                                   .act_row_bytes = neon_act_row_bytes,                           \
                                   .quantize_acts = neon_quantize_acts, .matmul_q = mmq,          \
                                   .simd = GT_SIMD_NONE};
NEON_BACKEND(k_auto, "cpu_neon", has_neon, mm_auto, mmq_auto)
NEON_BACKEND(k_plain, "cpu_neon_plain", has_neon, mm_plain, gt_neon_plain_matmul_q)
NEON_BACKEND(k_dot, "cpu_neon_dotprod", has_dotprod, mm_dot, gt_neon_dotprod_matmul_q)
NEON_BACKEND(k_mm, "cpu_neon_i8mm", has_i8mm, mm_mm, gt_neon_i8mm_matmul_q)

#else /* not aarch64: present but never available; the entries are cpu_scalar's */

static bool never(void) { return false; }

static void scalar_mm(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                      int64_t r0, int64_t r1, float *tmp) {
    gt_scalar_matmul_rows(w->type, w->data, w->row_bytes, w->n_in, r0, r1, x, n_tok, y, ldy, tmp);
}

static void scalar_row(const gt_weight *w, int64_t r, float *dst) {
    gt_scalar_dequantize_row(w->type, w->data + (size_t)r * w->row_bytes, dst, w->n_in);
}

#define NEON_STUB(var, nm)                                                                        \
    static const gt_backend var = {.name = nm, .available = never, .matmul = scalar_mm,           \
                                   .get_row = scalar_row, .vec_dot = gt_scalar_vec_dot};
NEON_STUB(k_auto, "cpu_neon")
NEON_STUB(k_plain, "cpu_neon_plain")
NEON_STUB(k_dot, "cpu_neon_dotprod")
NEON_STUB(k_mm, "cpu_neon_i8mm")

#endif

const gt_backend *gt_backend_cpu_neon(void) { return &k_auto; }
const gt_backend *gt_backend_cpu_neon_plain(void) { return &k_plain; }
const gt_backend *gt_backend_cpu_neon_dotprod(void) { return &k_dot; }
const gt_backend *gt_backend_cpu_neon_i8mm(void) { return &k_mm; }
