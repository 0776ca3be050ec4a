#include "vmath.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "cpu.h"
#include "vexp_x86.h"

#define GELU_K2 1.5957691216057308f /* 2 sqrt(2/pi) */

#if defined(__x86_64__) || defined(__i386__)
#define VM_AVX2 __attribute__((target("avx2,fma")))

/* x / (1 + e^-(x (gelu ? k2 (1 + 0.044715 x^2) : 1))) * u, 8 at a time */
static inline __attribute__((always_inline)) VM_AVX2 __m256 gated8(__m256 x, __m256 u, bool gelu) {
    __m256 z = x;
    if (gelu) /* k2 * (x + 0.044715 x^3), in the scalar form's order */
        z = _mm256_mul_ps(_mm256_set1_ps(GELU_K2),
                          _mm256_add_ps(x, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), x), x), x)));
    const __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), gt_vexp8(_mm256_sub_ps(_mm256_setzero_ps(), z)));
    return _mm256_mul_ps(_mm256_div_ps(x, den), u);
}

static VM_AVX2 void gated_avx2(float *g, const float *u, int64_t n, bool gelu) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, gated8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i), gelu));
    if (i < n) { /* the tail through the same arithmetic */
        float tg[8] = {0}, tu[8] = {0};
        memcpy(tg, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(tu, u + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(tg, gated8(_mm256_loadu_ps(tg), _mm256_loadu_ps(tu), gelu));
        memcpy(g + i, tg, (size_t)(n - i) * sizeof(float));
    }
}
#define VM_HAVE_X86 1
#endif

/* gated8's arithmetic one value at a time, in plain C (gt_vexp1 is gt_vexp8's twin): the same
 * bits */
static void gated_plain(float *g, const float *u, int64_t n, bool gelu) {
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        const float z = gelu ? GELU_K2 * (x + 0.044715f * x * x * x) : x;
        g[i] = x / (1.0f + gt_vexp1(0.0f - z)) * u[i];
    }
}

static void gated(float *g, const float *u, int64_t n, bool gelu, gt_simd simd) {
#ifdef VM_HAVE_X86
    if (simd >= GT_SIMD_AVX2 && gt_cpu_has(GT_CPU_AVX2 | GT_CPU_FMA)) {
        gated_avx2(g, u, n, gelu);
        return;
    }
#endif
    (void)simd;
    gated_plain(g, u, n, gelu);
}

void gt_silu_mul(float *g, const float *u, int64_t n, gt_simd simd) { gated(g, u, n, false, simd); }

void gt_gelu_tanh_mul(float *g, const float *u, int64_t n, gt_simd simd) { gated(g, u, n, true, simd); }
