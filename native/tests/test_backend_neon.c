/* cpu_neon against cpu_scalar, bit for bit: every available variant (plain NEON, dotprod, i8mm)
 * and every weight type of the real models (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K, F16, F32), on
 * random blocks at odd sizes (1..41 blocks, F16/F32 rows with tails that are not a multiple of
 * 32), 1, 2, 3, 8, 17 and 35 tokens (token pairs and tiles with tails), rows split over two calls
 * at an odd row (row pairs with tails), with and without the caller's scratch row; vec_dot too.
 * On CPUs other than aarch64 nothing is available and the test says so. Exit status 1 on any
 * failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_neon/backend_neon.h"
#include "util/cpu.h"
#include "util/ggml_types.h"
#include "util/util.h"

static uint32_t rnd(uint64_t *s) { /* xorshift, explicit state */
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)*s;
}

static float rf(uint64_t *s) { return ((float)(rnd(s) >> 8) / 16777216.0f - 0.5f) * 4.0f; }

int main(void) {
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    /* Q5_1 .. BF16: types cpu_neon leaves to cpu_scalar's kernels (they must still agree) */
    const uint32_t types[] = {GT_TYPE_Q4_0, GT_TYPE_Q4_1,   GT_TYPE_Q5_0, GT_TYPE_Q8_0,
                              GT_TYPE_Q4_K, GT_TYPE_Q6_K,   GT_TYPE_F16,  GT_TYPE_F32,
                              GT_TYPE_Q5_1, GT_TYPE_IQ4_NL, GT_TYPE_Q5_K, GT_TYPE_Q3_K,
                              GT_TYPE_Q2_K, GT_TYPE_IQ4_XS, GT_TYPE_BF16};
    /* byte offsets of each block type's f16 scales (d, and the min's scale where it has one) */
    const int f16_at[][2] = {{0, -1}, {0, 2},   {0, -1},  {0, -1}, {0, 2},
                             {208, -1}, {0, -1}, {0, -1}, {0, 2},  {0, -1},
                             {0, 2},  {108, -1}, {80, 82}, {0, -1}, {0, -1}};
    const int n_types = (int)(sizeof types / sizeof types[0]);
    const gt_backend *bs[] = {gt_backend_cpu_neon_plain(), gt_backend_cpu_neon_dotprod(),
                              gt_backend_cpu_neon_i8mm(), gt_backend_cpu_neon()};
    const int nbs = 4;
    printf("cpu features: 0x%x\n", (unsigned)gt_cpu_features());
    for (int i = 0; i < nbs; i++)
        printf("%s: %s\n", bs[i]->name, bs[i]->available() ? "tested" : "not available here");
    int bad = 0, checked = 0;
    for (int ti = 0; ti < n_types; ti++) {
        const gt_type_info *inf = gt_type_get(types[ti]);
        const int fl = inf->block == 1;
        const int64_t blk = fl ? 1 : inf->block;
        const int64_t ns[] = {fl ? 37 : blk, 3 * blk * (fl ? 32 : 1), fl ? 300 : 7 * blk,
                              fl ? 576 : 9 * blk, fl ? 1000 : 18 * blk, fl ? 2600 : 41 * blk};
        const int64_t toks[] = {1, 35, 2, 3, 8, 17};
        for (int ni = 0; ni < 6; ni++) {
            const int64_t n = ns[ni], nout = 37, ntok = toks[ni];
            const size_t rb = fl ? (size_t)n * inf->bytes : (size_t)(n / blk) * inf->bytes;
            uint8_t *w = malloc(rb * (size_t)nout);
            float *x = malloc(sizeof(float) * (size_t)(n * ntok));
            float *y0 = calloc((size_t)(nout * ntok), sizeof(float));
            float *y1 = calloc((size_t)(nout * ntok), sizeof(float));
            float *tmp = malloc(sizeof(float) * (size_t)n);
            if (!w || !x || !y0 || !y1 || !tmp) return 1;
            for (size_t i = 0; i < rb * (size_t)nout; i++) w[i] = (uint8_t)rnd(&seed);
            for (int64_t r = 0; r < nout; r++) {
                uint8_t *row = w + (size_t)r * rb;
                if (types[ti] == GT_TYPE_F32) {
                    for (int64_t i = 0; i < n; i++) {
                        const float v = rf(&seed);
                        memcpy(row + 4 * i, &v, 4);
                    }
                } else if (types[ti] == GT_TYPE_F16 || types[ti] == GT_TYPE_BF16) {
                    for (int64_t i = 0; i < n; i++) {
                        const float v = rf(&seed);
                        uint32_t u;
                        memcpy(&u, &v, 4);
                        const uint16_t h = types[ti] == GT_TYPE_F16 ? gt_f32_to_f16(v)
                                                                    : (uint16_t)(u >> 16);
                        memcpy(row + 2 * i, &h, 2);
                    }
                } else { /* finite, small scales (random bytes there could be inf/NaN) */
                    for (int64_t b = 0; b < n / blk; b++) {
                        uint8_t *p = row + (size_t)b * inf->bytes;
                        const uint16_t h1 = gt_f32_to_f16(rf(&seed) * 0.01f);
                        const uint16_t h2 = gt_f32_to_f16(rf(&seed) * 0.01f);
                        memcpy(p + f16_at[ti][0], &h1, 2);
                        if (f16_at[ti][1] >= 0) memcpy(p + f16_at[ti][1], &h2, 2);
                    }
                }
            }
            for (int64_t i = 0; i < n * ntok; i++) x[i] = rf(&seed) * (i % 5 == 0 ? 10.0f : 1.0f);
            const gt_weight W = {w, types[ti], n, nout, rb};
            gt_backend_cpu_scalar()->matmul(&W, x, ntok, y0, nout, 0, nout, tmp);
            for (int bi = 0; bi < nbs; bi++) {
                if (!bs[bi]->available()) continue;
                for (int use_tmp = 0; use_tmp < 2; use_tmp++) {
                    memset(y1, 0, sizeof(float) * (size_t)(nout * ntok));
                    bs[bi]->matmul(&W, x, ntok, y1, nout, 0, 5, use_tmp ? tmp : NULL);
                    bs[bi]->matmul(&W, x, ntok, y1, nout, 5, nout, use_tmp ? tmp : NULL);
                    checked++;
                    if (memcmp(y0, y1, sizeof(float) * (size_t)(nout * ntok)) != 0) {
                        bad++;
                        printf("FAIL %s type %s n %ld tokens %ld%s\n", bs[bi]->name, inf->name,
                               (long)n, (long)ntok, use_tmp ? " (scratch row)" : "");
                    }
                }
                for (int64_t r = 0; r < nout; r += 7) {
                    const float a = gt_backend_cpu_scalar()->vec_dot(types[ti], w + (size_t)r * rb, x, n);
                    const float b = bs[bi]->vec_dot(types[ti], w + (size_t)r * rb, x, n);
                    checked++;
                    if (memcmp(&a, &b, sizeof a) != 0) {
                        bad++;
                        printf("FAIL %s vec_dot type %s n %ld: %a vs %a\n", bs[bi]->name,
                               inf->name, (long)n, (double)b, (double)a);
                    }
                }
            }
            free(w);
            free(x);
            free(y0);
            free(y1);
            free(tmp);
        }
    }
    printf("%d comparisons, %d failures\n", checked, bad);
    return bad != 0;
}
