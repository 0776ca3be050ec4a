/* e^x shared by attention's softmax on F16 caches (session/kv.c) and the gated activations
 * (util/vmath.c): one polynomial to check (native/tests/test_vmath.c), in two forms with the same
 * operations in the same order, so they give identical bits: gt_vexp8 on 8 floats (AVX2 + FMA,
 * x86 only) for the SIMD kernels, gt_vexp1 in plain C (gt_fmaf for each fused step) for the plain
 * paths (cpu_scalar, the reference).
 *
 * x = n ln2 + r with |r| <= ln2 / 2; e^r by its Taylor series to r^7 (truncation < 6e-9
 * relative, under a float's rounding; measured within 8e-8 relative of exp over the range), then
 * times 2^n. x is clamped to [GT_VEXP_LO, GT_VEXP_HI] first, so -inf gives ~0 (not NaN) and
 * +inf a large finite value; the clamps keep 2^n a normal float. */
#ifndef GEIST_VEXP_X86_H
#define GEIST_VEXP_X86_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define GT_VEXP_LO (-87.0f) /* e^-87 = 1.6e-38, still normal */
#define GT_VEXP_HI 88.0f    /* n <= 127 */

#define GT_LN2_HI 0.693145751953125f          /* ln 2 in 16 bits: n * GT_LN2_HI is exact */
#define GT_LN2_LO 1.42860682030941723e-06f    /* the rest of ln 2 */
#define GT_LOG2E 1.44269504088896341f

/* fmaf with one rounding. mingw-w64's fmaf (Windows builds) is not correctly rounded, so there it
 * is computed here: a * b is exact in double (24 + 24 bits), the sum's rounding error comes from
 * TwoSum, and a double that lies exactly halfway between two floats is moved towards the exact
 * sum before the final rounding (no double rounding). Exact for results in float's normal range,
 * which is all gt_vexp1 produces. Elsewhere the C library's (or the CPU's) fmaf. */
#if defined(_WIN32)
static inline float gt_fmaf(float a, float b, float c) {
    const double p = (double)a * (double)b;
    double s = p + (double)c;
    const double bv = s - p;
    const double err = (p - (s - bv)) + ((double)c - bv);
    uint64_t u;
    memcpy(&u, &s, sizeof u);
    if ((u & 0x1FFFFFFFu) == 0x10000000u && err != 0.0) { /* a tie only in double's view */
        u = (err > 0.0) == (s > 0.0) ? u + 1 : u - 1;
        memcpy(&s, &u, sizeof s);
    }
    return (float)s;
}
#else
#define gt_fmaf fmaf
#endif

/* gt_vexp8's steps one lane at a time: max/min as vmaxps/vminps (the second operand on NaN),
 * the rounding to nearest even, each fused multiply-add by fmaf (one rounding, as vfmadd) */
static inline float gt_vexp1(float x) {
    x = x > GT_VEXP_LO ? x : GT_VEXP_LO;
    x = x < GT_VEXP_HI ? x : GT_VEXP_HI;
    const float n = nearbyintf(x * GT_LOG2E);
    float r = gt_fmaf(-n, GT_LN2_HI, x);
    r = gt_fmaf(-n, GT_LN2_LO, r);
    float p = 1.0f / 5040.0f;
    p = gt_fmaf(p, r, 1.0f / 720.0f);
    p = gt_fmaf(p, r, 1.0f / 120.0f);
    p = gt_fmaf(p, r, 1.0f / 24.0f);
    p = gt_fmaf(p, r, 1.0f / 6.0f);
    p = gt_fmaf(p, r, 0.5f);
    p = gt_fmaf(p, r, 1.0f);
    p = gt_fmaf(p, r, 1.0f);
    const uint32_t eb = (uint32_t)((int32_t)n + 127) << 23;
    float e;
    memcpy(&e, &eb, sizeof e);
    return p * e;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

static inline __attribute__((always_inline, target("avx2,fma"))) __m256 gt_vexp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(GT_VEXP_LO)), _mm256_set1_ps(GT_VEXP_HI));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(GT_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(GT_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(GT_LN2_LO), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

#endif
