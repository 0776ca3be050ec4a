/* Tests of the vectorized elementwise math (util/vmath.c, util/vexp_x86.h) against float64:
 * e^x over the range attention and the activations use, and the gated activations at lengths
 * with and without a tail, including extreme inputs. Prints one line per failure; returns 0 when
 * all pass. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/vmath.h"

#if defined(__x86_64__) || defined(__i386__)
#include "util/vexp_x86.h"
#endif

static int g_failures;
static int g_checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                 \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)

/* relative error, with values below 1e-30 compared absolutely */
static double rel_err(double got, double want) {
    const double d = fabs(got - want);
    return fabs(want) > 1e-30 ? d / fabs(want) : d;
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2,fma"))) static void exp8_at(const float *x, float *y) {
    _mm256_storeu_ps(y, gt_vexp8(_mm256_loadu_ps(x)));
}
static void test_vexp(void) {
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!avx2) {
        printf("skip: no AVX2+FMA\n");
        return;
    }
    double worst = 0.0;
    float at = 0.0f;
    for (float x0 = -87.0f; x0 < 88.0f; x0 += 0.0137f) {
        float x[16], y8[16];
        for (int i = 0; i < 16; i++) x[i] = x0 + 1e-4f * (float)i;
        exp8_at(x, y8);
        exp8_at(x + 8, y8 + 8);
        for (int i = 0; i < 16; i++) {
            const double e = rel_err(y8[i], exp((double)x[i]));
            if (e > worst) worst = e, at = x[i];
        }
    }
    CHECK(worst < 2e-7, "max relative error %.3g at %g", worst, (double)at);
    /* the clamps: -inf gives (almost) 0, +inf and huge values a finite float, NaN-free */
    float x[8] = {-INFINITY, -1e30f, -200.0f, -87.5f, 89.0f, 1e30f, INFINITY, 0.0f}, y[8];
    exp8_at(x, y);
    for (int i = 0; i < 4; i++) CHECK(y[i] >= 0.0f && y[i] < 1e-37f, "e^%g = %g", (double)x[i], (double)y[i]);
    for (int i = 4; i < 7; i++) CHECK(isfinite(y[i]) && y[i] > 1e38f, "e^%g = %g", (double)x[i], (double)y[i]);
    CHECK(y[7] == 1.0f, "e^0 = %g", (double)y[7]);
}
#else
static void test_vexp(void) {}
#endif

static double silu64(double x) { return x / (1.0 + exp(-x)); }
static double gelu64(double x) {
    return x / (1.0 + exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)));
}

static void test_gated(int gelu) {
    const int lengths[] = {1, 7, 8, 9, 16, 33, 1536};
    uint64_t st = 0x9E3779B97F4A7C15u;
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        const int n = lengths[li];
        float *g = malloc((size_t)n * sizeof(float)), *u = malloc((size_t)n * sizeof(float));
        double *want = malloc((size_t)n * sizeof(double));
        for (int i = 0; i < n; i++) {
            st = st * 6364136223846793005u + 1442695040888963407u;
            const double r = (double)(st >> 11) * 0x1.0p-53; /* [0, 1) */
            g[i] = (float)(24.0 * r - 12.0);                 /* activations span [-12, 12) */
            u[i] = (float)(2.0 * ((double)(st >> 20 & 0xFFFF) / 65536.0) - 1.0);
            if (i % 11 == 5) g[i] = i % 2 ? 150.0f : -150.0f; /* past the clamps */
            want[i] = (gelu ? gelu64(g[i]) : silu64(g[i])) * u[i];
        }
        if (gelu) gt_gelu_tanh_mul(g, u, n);
        else gt_silu_mul(g, u, n);
        double worst = 0.0;
        for (int i = 0; i < n; i++) {
            /* float rounding: a few ulp for silu (seen 1.4e-7); GELU's exponent argument z is
             * itself rounded, which e^z magnifies by |z| (up to ~30 where the result is not
             * negligible; seen 9e-7); results below 1e-6 are compared absolutely */
            const double e = fabs(g[i] - want[i]) / (fabs(want[i]) + 1e-6);
            if (e > worst) worst = e;
        }
        CHECK(worst < (gelu ? 2e-6 : 5e-7), "%s, n = %d: max relative error %.3g", gelu ? "gelu" : "silu", n, worst);
        free(g), free(u), free(want);
    }
}

int main(void) {
    test_vexp();
    test_gated(0);
    test_gated(1);
    printf("test_vmath: %d checks, %d failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
