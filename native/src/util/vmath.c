#include "vmath.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define GELU_K2 1.5957691216057308f /* 2 sqrt(2/pi) */

#if defined(__x86_64__) || defined(__i386__)
#include "vexp_x86.h"

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

static bool has_avx2_fma(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
static bool has_avx2_fma(void) { return false; }
static void gated_avx2(float *g, const float *u, int64_t n, bool gelu) {
    (void)g, (void)u, (void)n, (void)gelu;
}
#endif

static void gated_scalar(float *g, const float *u, int64_t n, bool gelu) {
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        const float z = gelu ? GELU_K2 * (x + 0.044715f * x * x * x) : x;
        g[i] = x / (1.0f + expf(-z)) * u[i];
    }
}

void gt_silu_mul(float *g, const float *u, int64_t n) {
    if (has_avx2_fma()) gated_avx2(g, u, n, false);
    else gated_scalar(g, u, n, false);
}

void gt_gelu_tanh_mul(float *g, const float *u, int64_t n) {
    if (has_avx2_fma()) gated_avx2(g, u, n, true);
    else gated_scalar(g, u, n, true);
}
