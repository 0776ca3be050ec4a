/* Integer block-dot kernels: every available cpu_x86 variant (AVX2, AVX-512 VNNI) against
 * cpu_scalar's canonical arithmetic, bit for bit, on random blocks at odd sizes (row tails of
 * 1..7 blocks, 37 rows, 1, 2, 8 and 35 tokens so token tiles have tails), with the rows split over two
 * calls (as the pool splits them); cpu_scalar against the float64 dot of the dequantized row and
 * the rounded activations; the vectorized activation quantization against the scalar bytes, ties
 * included. Prints what ran; exit status 1 on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/act_quant.h"
#include "backend/backend.h"
#include "backend/cpu_scalar/quants.h"
#include "backend/cpu_x86/backend_x86.h"
#include "util/ggml_types.h"
#include "util/util.h"

/* xorshift; the state is passed explicitly */
static uint32_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)*s;
}

static float rf(uint64_t *s) { return ((float)(rnd(s) >> 8) / 16777216.0f - 0.5f) * 4.0f; }

int main(void) {
    uint64_t seed = 88172645463325252ull;
    const uint32_t types[] = {GT_TYPE_Q4_0, GT_TYPE_Q4_1, GT_TYPE_Q5_0, GT_TYPE_Q5_1,
                              GT_TYPE_Q8_0, GT_TYPE_IQ4_NL, GT_TYPE_Q4_K, GT_TYPE_Q5_K,
                              GT_TYPE_Q6_K, GT_TYPE_Q3_K, GT_TYPE_Q2_K, GT_TYPE_IQ4_XS};
    /* byte offsets of each type's f16 scales (d, and the min's scale where it has one) */
    const int f16_at[][2] = {{0, -1}, {0, 2},  {0, -1},  {0, 2},   {0, -1},  {0, -1},
                             {0, 2},  {0, 2},  {208, -1}, {108, -1}, {80, 82}, {0, -1}};
    const int n_types = (int)(sizeof types / sizeof types[0]);
    const gt_backend *bs[] = {gt_backend_cpu_x86_avx2(), gt_backend_cpu_x86_avx512(),
                              gt_backend_cpu_x86()};
    int bad = 0, checked = 0;
    for (int i = 0; i < 3; i++)
        printf("%s: %s\n", bs[i]->name, bs[i]->available() ? "tested" : "not available here");
    for (int ti = 0; ti < n_types; ti++) {
        const gt_type_info *inf = gt_type_get(types[ti]);
        const int64_t blk = inf->block;
        /* 41 blocks: more than one slice of the 16-row kernels (q_rows16.inc) */
        const int64_t ns[] = {blk, 3 * blk, 7 * blk, 9 * blk, 13 * blk, 18 * blk, 41 * blk};
        for (int ni = 0; ni < 7; ni++) {
            const int64_t n = ns[ni], nout = 37;
            const int64_t ntok = ni % 4 == 0 ? 1 : ni % 4 == 1 ? 35 : ni % 4 == 2 ? 8 : 2;
            const size_t rb = (size_t)(n / blk) * inf->bytes;
            uint8_t *w = malloc(rb * (size_t)nout);
            float *x = malloc(sizeof(float) * (size_t)(n * ntok));
            float *y0 = calloc((size_t)(nout * ntok), sizeof(float));
            float *y1 = calloc((size_t)(nout * ntok), sizeof(float));
            float *xr = malloc(sizeof(float) * (size_t)n), *wr = malloc(sizeof(float) * (size_t)n);
            if (!w || !x || !y0 || !y1 || !xr || !wr) return 1;
            for (size_t i = 0; i < rb * (size_t)nout; i++) w[i] = (uint8_t)rnd(&seed);
            /* finite, small scales (random bytes there could be inf/NaN) */
            for (int64_t r = 0; r < nout; r++)
                for (int64_t b = 0; b < n / blk; b++) {
                    uint8_t *p = w + (size_t)r * rb + (size_t)b * inf->bytes;
                    const uint16_t h1 = gt_f32_to_f16(rf(&seed) * 0.01f);
                    const uint16_t h2 = gt_f32_to_f16(rf(&seed) * 0.01f);
                    memcpy(p + f16_at[ti][0], &h1, 2);
                    if (f16_at[ti][1] >= 0) memcpy(p + f16_at[ti][1], &h2, 2);
                }
            for (int64_t i = 0; i < n * ntok; i++) x[i] = rf(&seed) * (i % 5 == 0 ? 10.0f : 1.0f);
            const gt_weight W = {w, types[ti], n, nout, rb};
            gt_backend_cpu_scalar()->matmul(&W, x, ntok, y0, nout, 0, nout, NULL);
            for (int bi = 0; bi < 3; bi++) {
                if (!bs[bi]->available()) continue;
                memset(y1, 0, sizeof(float) * (size_t)(nout * ntok));
                bs[bi]->matmul(&W, x, ntok, y1, nout, 0, 5, NULL);
                bs[bi]->matmul(&W, x, ntok, y1, nout, 5, nout, NULL);
                checked++;
                if (memcmp(y0, y1, sizeof(float) * (size_t)(nout * ntok)) != 0) {
                    bad++;
                    printf("FAIL %s type %u n %ld tokens %ld\n", bs[bi]->name, types[ti], (long)n,
                           (long)ntok);
                }
            }
            /* the canonical arithmetic is the dot of the rounded values, up to float rounding */
            for (int64_t t = 0; t < ntok; t++) {
                gt_round_activations(gt_act_format_for(types[ti]), x + t * n, xr, n);
                for (int64_t r = 0; r < nout; r++) {
                    gt_scalar_dequantize_row(types[ti], w + (size_t)r * rb, wr, n);
                    double ref = 0.0, mag = 0.0;
                    for (int64_t i = 0; i < n; i++) {
                        ref += (double)wr[i] * (double)xr[i];
                        mag += fabs((double)wr[i] * (double)xr[i]);
                    }
                    if (fabs((double)y0[t * nout + r] - ref) > 1e-5 * mag + 1e-30) {
                        bad++;
                        printf("FAIL scalar vs float64 type %u n %ld: %g vs %g\n", types[ti],
                               (long)n, (double)y0[t * nout + r], ref);
                    }
                }
            }
            free(w);
            free(x);
            free(y0);
            free(y1);
            free(xr);
            free(wr);
        }
    }
    /* activation bytes, with exact ties (k + 0.5) and an all-zero super-block */
    for (int f = 1; f <= 2; f++) {
        enum { N = 512 };
        float x[N];
        _Alignas(64) uint8_t a[4096], b[4096];
        const uint32_t ty = f == 1 ? GT_TYPE_Q4_0 : GT_TYPE_Q6_K;
        const size_t rb = gt_act_q_row_bytes((gt_act_format)f, N);
        for (int rep = 0; rep < 200; rep++) {
            for (int i = 0; i < N; i++)
                x[i] = (rep & 1) ? (float)((int)(rnd(&seed) % 255) - 127) * 0.5f
                                 : rf(&seed) * (float)(rep + 1);
            if (rep & 1) {
                x[0] = 127.0f;
                x[256] = -127.0f;
            }
            if (rep == 4)
                for (int i = 0; i < 256; i++) x[i] = 0.0f;
            memset(a, 0, rb);
            gt_quantize_act_row((gt_act_format)f, x, N, a);
            for (int bi = 0; bi < 3; bi++) {
                if (!bs[bi]->available()) continue;
                memset(b, 0, rb);
                bs[bi]->quantize_acts(ty, x, 1, N, b);
                checked++;
                if (memcmp(a, b, rb) != 0) {
                    bad++;
                    printf("FAIL %s activation bytes format %d rep %d\n", bs[bi]->name, f, rep);
                }
            }
        }
    }
    printf("%d comparisons, %d failures\n", checked, bad);
    return bad != 0;
}
