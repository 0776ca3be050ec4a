/* Tests of the elementwise math (util/vmath.c, util/vexp_x86.h) against float64: e^x over the
 * range attention and the activations use, and the gated activations at lengths with and without
 * a tail, including extreme inputs; the plain forms (gt_vexp1, GT_SIMD_NONE: cpu_scalar's) and the
 * AVX2 ones give identical bits; util/cpu.h's probe agrees with the compiler's. Prints one line
 * per failure; returns 0 when all pass. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "util/cpu.h"
#include "util/vexp_x86.h"
#include "util/vmath.h"

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
#define HAVE_VEXP8 1
#else
#define HAVE_VEXP8 0
static void exp8_at(const float *x, float *y) { (void)x, (void)y; }
#endif

static int bits_equal(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* e^x by gt_vexp1 (plain C) and, where the CPU has AVX2 + FMA, gt_vexp8: accuracy, clamps, and
 * the same bits from both */
static void test_vexp(void) {
    const int avx2 = HAVE_VEXP8 && gt_cpu_has(GT_CPU_AVX2 | GT_CPU_FMA);
    if (!avx2) printf("skip: no AVX2+FMA (gt_vexp1 alone)\n");
    double worst = 0.0;
    float at = 0.0f;
    int differ = 0;
    for (float x0 = -87.0f; x0 < 88.0f; x0 += 0.0137f) {
        float x[16], y1[16], y8[16];
        for (int i = 0; i < 16; i++) x[i] = x0 + 1e-4f * (float)i, y1[i] = gt_vexp1(x[i]);
        if (avx2) {
            exp8_at(x, y8);
            exp8_at(x + 8, y8 + 8);
            for (int i = 0; i < 16; i++) differ += !bits_equal(y1[i], y8[i]);
        }
        for (int i = 0; i < 16; i++) {
            const double e = rel_err(y1[i], exp((double)x[i]));
            if (e > worst) worst = e, at = x[i];
        }
    }
    CHECK(worst < 2e-7, "max relative error %.3g at %g", worst, (double)at);
    CHECK(differ == 0, "gt_vexp1 and gt_vexp8 differ at %d values", differ);
    /* the clamps: -inf and NaN give (almost) 0, +inf and huge values a finite float, NaN-free */
    float x[16] = {-INFINITY, -1e30f, -200.0f, -87.5f, 89.0f, 1e30f, INFINITY, 0.0f,
                   -0.0f, NAN, -NAN, 1e-30f, -1e-30f, 0.5f, -0.34657359f, 0.34657359f};
    float y[16], y8[16];
    for (int i = 0; i < 16; i++) y[i] = gt_vexp1(x[i]);
    for (int i = 0; i < 4; i++) CHECK(y[i] >= 0.0f && y[i] < 1e-37f, "e^%g = %g", (double)x[i], (double)y[i]);
    for (int i = 4; i < 7; i++) CHECK(isfinite(y[i]) && y[i] > 1e38f, "e^%g = %g", (double)x[i], (double)y[i]);
    CHECK(y[7] == 1.0f && y[8] == 1.0f, "e^0 = %g, e^-0 = %g", (double)y[7], (double)y[8]);
    CHECK(y[9] < 1e-37f && y[10] < 1e-37f, "e^NaN = %g, %g", (double)y[9], (double)y[10]);
    if (avx2) {
        exp8_at(x, y8);
        exp8_at(x + 8, y8 + 8);
        for (int i = 0; i < 16; i++)
            CHECK(bits_equal(y[i], y8[i]), "e^%g: plain %a, AVX2 %a", (double)x[i], (double)y[i], (double)y8[i]);
    }
}

/* util/cpu.h against the compiler's own probe (GCC's knows every name used here) */
static void test_cpu_features(void) {
#if (defined(__x86_64__) || defined(__i386__)) && !defined(__clang__)
    const struct { uint32_t bit; int has; const char *name; } f[] = {
        {GT_CPU_AVX2, __builtin_cpu_supports("avx2"), "avx2"},
        {GT_CPU_FMA, __builtin_cpu_supports("fma"), "fma"},
        {GT_CPU_F16C, __builtin_cpu_supports("f16c"), "f16c"},
        {GT_CPU_AVX512F, __builtin_cpu_supports("avx512f"), "avx512f"},
        {GT_CPU_AVX512BW, __builtin_cpu_supports("avx512bw"), "avx512bw"},
        {GT_CPU_AVX512VL, __builtin_cpu_supports("avx512vl"), "avx512vl"},
        {GT_CPU_AVX512VNNI, __builtin_cpu_supports("avx512vnni"), "avx512vnni"},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        CHECK(!gt_cpu_has(f[i].bit) == !f[i].has, "%s: util/cpu %d, compiler %d", f[i].name,
              gt_cpu_has(f[i].bit), f[i].has);
    printf("cpu features: 0x%x\n", gt_cpu_features());
#elif defined(__x86_64__) || defined(__i386__)
    /* clang's __builtin_cpu_supports does not know every name above: only the probe's
     * consistency (AVX-512 needs AVX2) */
    CHECK(!gt_cpu_has(GT_CPU_AVX512F) || gt_cpu_has(GT_CPU_AVX2), "features 0x%x",
          gt_cpu_features());
    printf("cpu features: 0x%x\n", gt_cpu_features());
#elif defined(__aarch64__)
    /* aarch64: NEON always; dotprod and i8mm as the CPU says (test_backend_neon tests them) */
    CHECK(gt_cpu_has(GT_CPU_NEON), "features 0x%x: no NEON on aarch64", gt_cpu_features());
    CHECK((gt_cpu_features() & 0xFFu) == 0, "features 0x%x: x86 bits on aarch64", gt_cpu_features());
    CHECK(!gt_cpu_has(GT_CPU_I8MM) || gt_cpu_has(GT_CPU_DOTPROD), "features 0x%x: i8mm alone",
          gt_cpu_features());
    printf("cpu features: 0x%x\n", gt_cpu_features());
#else
    CHECK(gt_cpu_features() == 0, "features 0x%x off x86 and aarch64", gt_cpu_features());
#endif
}

static double silu64(double x) { return x / (1.0 + exp(-x)); }
static double gelu64(double x) {
    return x / (1.0 + exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)));
}

/* simd: GT_SIMD_NONE, the plain loops (cpu_scalar's), or GT_SIMD_AVX2; each is also compared
 * with the other, bit for bit */
static void test_gated(int gelu, gt_simd simd) {
    const int lengths[] = {1, 7, 8, 9, 16, 33, 1536};
    uint64_t st = 0x9E3779B97F4A7C15u;
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        const int n = lengths[li];
        float *g = malloc((size_t)n * sizeof(float)), *u = malloc((size_t)n * sizeof(float));
        double *want = malloc((size_t)n * sizeof(double));
        float *other = malloc((size_t)n * sizeof(float));
        for (int i = 0; i < n; i++) {
            st = st * 6364136223846793005u + 1442695040888963407u;
            const double r = (double)(st >> 11) * 0x1.0p-53; /* [0, 1) */
            g[i] = (float)(24.0 * r - 12.0);                 /* activations span [-12, 12) */
            u[i] = (float)(2.0 * ((double)(st >> 20 & 0xFFFF) / 65536.0) - 1.0);
            if (i % 11 == 5) g[i] = i % 2 ? 150.0f : -150.0f; /* past the clamps */
            want[i] = (gelu ? gelu64(g[i]) : silu64(g[i])) * u[i];
        }
        memcpy(other, g, (size_t)n * sizeof(float));
        const gt_simd alt = simd == GT_SIMD_NONE ? GT_SIMD_AVX2 : GT_SIMD_NONE;
        if (gelu) gt_gelu_tanh_mul(g, u, n, simd), gt_gelu_tanh_mul(other, u, n, alt);
        else gt_silu_mul(g, u, n, simd), gt_silu_mul(other, u, n, alt);
        int differ = 0;
        for (int i = 0; i < n; i++) differ += !bits_equal(g[i], other[i]);
        CHECK(differ == 0, "%s, n = %d: plain and AVX2 differ at %d values", gelu ? "gelu" : "silu", n, differ);
        double worst = 0.0;
        for (int i = 0; i < n; i++) {
            /* float rounding: a few ulp for silu (seen 1.4e-7); GELU's exponent argument z is
             * itself rounded, which e^z magnifies by |z| (up to ~30 where the result is not
             * negligible; seen 9e-7); results below 1e-6 are compared absolutely */
            const double e = fabs(g[i] - want[i]) / (fabs(want[i]) + 1e-6);
            if (e > worst) worst = e;
        }
        CHECK(worst < (gelu ? 2e-6 : 5e-7), "%s (simd %d), n = %d: max relative error %.3g", gelu ? "gelu" : "silu", (int)simd, n, worst);
        free(g), free(u), free(want), free(other);
    }
}

int main(void) {
    test_cpu_features();
    test_vexp();
    for (int gelu = 0; gelu < 2; gelu++) {
        test_gated(gelu, GT_SIMD_NONE);
        test_gated(gelu, GT_SIMD_AVX2);
    }
    printf("test_vmath: %d checks, %d failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
