/* cpu_x86 kernels (see backend_x86.h for the three names).
 *
 * Quantized weights: the activation row is quantized once per product (act_quant.h; the same
 * int8 rows cpu_scalar makes) and each weight block is dotted with it in integers: AVX2
 * vpmaddubsw/vpmaddwd, or AVX-512 VNNI vpdpbusd/vpdpwssd (q_kernels.inc, included once per
 * variant): one row per register for a single token, several rows per register for two or more
 * (q_rows16.inc: 16 rows with VNNI; q_rows8.inc: 8 rows with AVX2). The block sums are exact and the float combination follows cpu_scalar's canonical
 * order (cpu_scalar/quants.c), so the results are bit-identical to cpu_scalar's, for any split of
 * the rows over threads and any tiling of the tokens.
 *
 * Float weights (F32, F16) see float activations: dequantized segments dotted in cpu_scalar's
 * order (runs of 32, lane tree, runs summed in double); vec_dot uses the same path for all types.
 *
 * Each function carries its own target attribute, so the file builds with the default flags and
 * the library still runs on any x86-64 (available() checks CPUID first). */
#include "backend/cpu_x86/backend_x86.h"

#include "backend/cpu_scalar/quants.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "backend/act_quant.h"
#include "util/cpu.h"
#include "util/ggml_types.h"

#define SEG 256 /* values per dequantized segment of the float path */
#define SEGP (SEG + 32) /* segment stride in floats, room for zero padding of a tail */
#define RB 4    /* rows per group */
#define TG 32   /* tokens per group (float path) */
#define TT 32   /* tokens per tile (integer path) */
#define PF_AHEAD 4096 /* software prefetch distance in bytes for streamed weights */

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

static bool has_avx2(void) { return gt_cpu_has(GT_CPU_AVX2 | GT_CPU_FMA | GT_CPU_F16C); }

static bool has_avx512(void) {
    return has_avx2() && gt_cpu_has(GT_CPU_AVX512F | GT_CPU_AVX512BW | GT_CPU_AVX512VL |
                                     GT_CPU_AVX512VNNI);
}

/* ---- float path: F32/F16 weights, and vec_dot ---------------------------------------------- */

T_AVX2 static inline float ld_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Values [k0, k0 + len) of a row into dst, zero-padded up to a multiple of 32. k0 is a multiple
 * of SEG and len of the block size. Quantized types: cpu_scalar's dequantization (zeros if
 * unknown, as cpu_scalar). */
T_AVX2 static void deq_seg(uint32_t type, const uint8_t *row, int64_t k0, int len, float *dst) {
    int done = 0;
    if (type == GT_TYPE_F32) {
        memcpy(dst, row + 4 * k0, (size_t)len * sizeof(float));
        done = len;
    } else if (type == GT_TYPE_F16) {
        const uint8_t *p = row + 2 * k0;
        for (; done + 8 <= len; done += 8)
            _mm256_storeu_ps(dst + done,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * done))));
        for (; done < len; done++) dst[done] = ld_f16(p + 2 * done);
    } else if (type == GT_TYPE_BF16) { /* the top halves of f32s: exact */
        const uint8_t *p = row + 2 * k0;
        for (; done + 8 <= len; done += 8) {
            const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 2 * done)));
            _mm256_storeu_ps(dst + done, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
        }
        if (done < len) gt_scalar_dequantize_row(type, p + 2 * done, dst + done, len - done);
        done = len;
    } else {
        const gt_type_info *ti = gt_type_get(type);
        if (ti != NULL && ti->block > 0) {
            gt_scalar_dequantize_row(type, row + (k0 / ti->block) * ti->bytes, dst, len);
            done = len;
        }
    }
    const int pad = (len + 31) & ~31;
    for (int i = done; i < pad; i++) dst[i] = 0.0f;
}

/* ---- dot tiles ----------------------------------------------------------------------------- */
/* cpu_scalar's dot, reproduced exactly: runs of 32 values from the row start; in a run, lane k of
 * 8 gets products k, k+8, k+16, k+24 (multiply, then add: no fused multiply-add); the lanes are
 * summed as ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) and the run sums are added in double, in
 * order. _mm256_hadd_ps forms exactly those pair sums, for eight accumulators at once.
 * acc[r * TG + t]: the double sum of row r, token t. w: nr rows at stride SEGP, zero-padded to a
 * multiple of 32. x: token 0's values at this segment; token t at x + t * ldx. */

/* one run (32 values) of one pair, exactly as cpu_scalar; xs may be a zero-padded copy */
T_AVX2 static inline float run_one(const float *w, const float *xs) {
    __m256 v = _mm256_mul_ps(_mm256_load_ps(w), _mm256_loadu_ps(xs));
    for (int i = 8; i < 32; i += 8)
        v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_load_ps(w + i), _mm256_loadu_ps(xs + i)));
    float l[8];
    _mm256_storeu_ps(l, v);
    const float s01 = l[0] + l[1], s23 = l[2] + l[3], s45 = l[4] + l[5], s67 = l[6] + l[7];
    const float s03 = s01 + s23, s47 = s45 + s67;
    return s03 + s47;
}

T_AVX2 static void tile_exact(const float *w, int nr, const float *x, int64_t ldx, int nt, int len,
                              double *acc) {
    const int full = len & ~31, tail = len & 31;
    int t = 0;
    if (nr == RB) {
        for (; t + 2 <= nt; t += 2) {
            const float *x0 = x + t * ldx, *x1 = x0 + ldx;
            for (int i = 0; i < full; i += 32) {
                __m256 v[8];
                const __m256 a0 = _mm256_loadu_ps(x0 + i), a1 = _mm256_loadu_ps(x1 + i);
                for (int r = 0; r < RB; r++) {
                    const __m256 wr = _mm256_load_ps(w + r * SEGP + i);
                    v[2 * r] = _mm256_mul_ps(wr, a0);
                    v[2 * r + 1] = _mm256_mul_ps(wr, a1);
                }
                for (int k = 8; k < 32; k += 8) {
                    const __m256 b0 = _mm256_loadu_ps(x0 + i + k), b1 = _mm256_loadu_ps(x1 + i + k);
                    for (int r = 0; r < RB; r++) {
                        const __m256 wr = _mm256_load_ps(w + r * SEGP + i + k);
                        v[2 * r] = _mm256_add_ps(v[2 * r], _mm256_mul_ps(wr, b0));
                        v[2 * r + 1] = _mm256_add_ps(v[2 * r + 1], _mm256_mul_ps(wr, b1));
                    }
                }
                const __m256 g0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
                const __m256 g1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
                /* low half: s03 of pairs 0..3, high half: s47 */
                float tot[8];
                _mm_storeu_ps(tot, _mm_add_ps(_mm256_castps256_ps128(g0), _mm256_extractf128_ps(g0, 1)));
                _mm_storeu_ps(tot + 4, _mm_add_ps(_mm256_castps256_ps128(g1), _mm256_extractf128_ps(g1, 1)));
                for (int r = 0; r < RB; r++) {
                    acc[r * TG + t] += (double)tot[2 * r];
                    acc[r * TG + t + 1] += (double)tot[2 * r + 1];
                }
            }
        }
    }
    for (int u = 0; u < nt; u++) {
        const float *xt = x + u * ldx;
        const int from = u < t ? full : 0; /* pairs of the tile have their full runs */
        for (int r = 0; r < nr; r++) {
            const float *wr = w + r * SEGP;
            for (int i = from; i < full; i += 32) acc[r * TG + u] += (double)run_one(wr + i, xt + i);
            if (tail) {
                float xs[32] = {0};
                memcpy(xs, xt + full, (size_t)tail * sizeof(float));
                acc[r * TG + u] += (double)run_one(wr + full, xs);
            }
        }
    }
}

/* Y for float activations as given (F32/F16 weights; vec_dot for every type). */
static void matmul_float(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                         int64_t r0, int64_t r1) {
    _Alignas(64) float wbuf[RB * SEGP];
    double acc[RB * TG];
    const int64_t n_in = w->n_in;
    for (int64_t t0 = 0; t0 < n_tok; t0 += TG) {
        const int nt = (int)(n_tok - t0 < TG ? n_tok - t0 : TG);
        const float *xs = x + t0 * n_in;
        for (int64_t rg = r0; rg < r1; rg += RB) {
            const int nr = (int)(r1 - rg < RB ? r1 - rg : RB);
            for (int i = 0; i < RB * TG; i++) acc[i] = 0.0;
            for (int64_t k0 = 0; k0 < n_in; k0 += SEG) {
                const int len = (int)(n_in - k0 < SEG ? n_in - k0 : SEG);
                for (int r = 0; r < nr; r++)
                    deq_seg(w->type, w->data + (size_t)(rg + r) * w->row_bytes, k0, len,
                            wbuf + r * SEGP);
                tile_exact(wbuf, nr, xs + k0, n_in, nt, len, acc);
            }
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < nr; r++)
                    y[(t0 + t) * ldy + rg + r] = (float)acc[r * TG + t];
        }
    }
}

/* ---- integer path --------------------------------------------------------------------------- */

/* bytes of one block of a quantized type (constant-folded where the kernels pass a constant) */
static inline int q_block_bytes(uint32_t type) {
    switch (type) {
    case GT_TYPE_Q4_0: return 18;
    case GT_TYPE_Q4_1: return 20;
    case GT_TYPE_Q5_0: return 22;
    case GT_TYPE_Q5_1: return 24;
    case GT_TYPE_Q8_0: return 34;
    case GT_TYPE_IQ4_NL: return 18;
    case GT_TYPE_Q2_K: return 84;
    case GT_TYPE_Q3_K: return 110;
    case GT_TYPE_IQ4_XS: return 136;
    case GT_TYPE_Q4_K: return 144;
    case GT_TYPE_Q5_K: return 176;
    default: return 210; /* Q6_K */
    }
}

#define KT T_AVX2
#define KN(name) avx2_##name
#define KVNNI 0
#include "q_kernels.inc"
#undef KT
#undef KN
#undef KVNNI

#define KT T_VNNI
#define KN(name) vnni_##name
#define KVNNI 1
#include "q_kernels.inc"
#undef KT
#undef KN
#undef KVNNI

static size_t x86_act_row_bytes(uint32_t type, int64_t n_in) {
    return gt_act_q_row_bytes(gt_act_format_for(type), n_in);
}

/* ---- activation quantization: gt_quantize_act_row's bytes, vectorized (finite inputs) ------- */

T_AVX2 static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

T_AVX2 static inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* roundf (halves away from zero): trunc, then one step out where the cut-off part is >= 0.5 */
T_AVX2 static inline __m256 round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(sign, v));
    const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

/* 4 x 8 int32 in [-128, 127] -> 32 int8 in order */
T_AVX2 static inline void pack32(const __m256i *v, int8_t *dst) {
    const __m256i ab = _mm256_packs_epi32(v[0], v[1]), cd = _mm256_packs_epi32(v[2], v[3]);
    const __m256i p = _mm256_packs_epi16(ab, cd);
    _mm256_storeu_si256((__m256i *)(void *)dst,
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

T_AVX2 static void quant_row_32(const float *x, int64_t n, uint8_t *dst) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    int8_t *q = (int8_t *)dst;
    float *ds = (float *)(void *)(dst + n);
    int32_t *sums = (int32_t *)(void *)(dst + n + 4 * (n / 32));
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < 32; i += 8)
            m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xb + i), absmask));
        const float d = hmax8(m) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i v[4];
        for (int i = 0; i < 4; i++) {
            const __m256 r = round_away(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * i), vid));
            v[i] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
        }
        pack32(v, q + 32 * b);
        sums[b] = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(v[0], v[1]),
                                            _mm256_add_epi32(v[2], v[3])));
        ds[b] = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
}

T_AVX2 static void quant_row_256(const float *x, int64_t n, uint8_t *dst) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
    int8_t *q = (int8_t *)dst;
    float *ds = (float *)(void *)(dst + n);
    int32_t *sums = (int32_t *)(void *)(dst + n + 4 * (n / 256));
    for (int64_t b = 0; b < n / 256; b++) {
        const float *xb = x + 256 * b;
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < 256; i += 8)
            m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xb + i), absmask));
        const float amax = hmax8(m);
        if (amax == 0.0f) {
            memset(q + 256 * b, 0, 256);
            memset(sums + 16 * b, 0, 16 * sizeof(int32_t));
            ds[b] = 0.0f;
            continue;
        }
        float maxv = 0.0f; /* the first value of largest magnitude, with its sign */
        for (int i = 0; i < 256; i++) {
            if (__builtin_fabsf(xb[i]) == amax) {
                maxv = xb[i];
                break;
            }
        }
        const float iscale = -127.0f / maxv;
        ds[b] = 1.0f / iscale;
        const __m256 vi = _mm256_set1_ps(iscale);
        for (int c = 0; c < 8; c++) {
            __m256i v[4];
            for (int i = 0; i < 4; i++) {
                const __m256 r = _mm256_round_ps(_mm256_mul_ps(vi, _mm256_loadu_ps(xb + 32 * c + 8 * i)),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                v[i] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
            }
            pack32(v, q + 256 * b + 32 * c);
            sums[16 * b + 2 * c] = hsum_i32(_mm256_add_epi32(v[0], v[1]));
            sums[16 * b + 2 * c + 1] = hsum_i32(_mm256_add_epi32(v[2], v[3]));
        }
    }
}

static void x86_quantize_acts(uint32_t type, const float *x, int64_t n_tok, int64_t n_in,
                              void *xq) {
    const gt_act_format f = gt_act_format_for(type);
    const size_t rb = gt_act_q_row_bytes(f, n_in);
    for (int64_t t = 0; t < n_tok; t++) {
        uint8_t *dst = (uint8_t *)xq + (size_t)t * rb;
        if (f == GT_ACTF_Q8_32) quant_row_32(x + t * n_in, n_in, dst);
        else if (f == GT_ACTF_Q8_256) quant_row_256(x + t * n_in, n_in, dst);
    }
}

static void mmq_auto(const gt_weight *w, const void *xq, int64_t n_tok, float *y, int64_t ldy,
                     int64_t r0, int64_t r1) {
    if (has_avx512()) vnni_matmul_q(w, xq, n_tok, y, ldy, r0, r1);
    else avx2_matmul_q(w, xq, n_tok, y, ldy, r0, r1);
}

static const gt_backend k_auto, k_avx2, k_avx512;

static void mm_with(const gt_backend *be, const gt_weight *w, const float *x, int64_t n_tok,
                    float *y, int64_t ldy, int64_t r0, int64_t r1) {
    if (gt_act_format_for(w->type) == GT_ACTF_F32) matmul_float(w, x, n_tok, y, ldy, r0, r1);
    else (void)gt_backend_matmul_via_q(be, w, x, n_tok, y, ldy, r0, r1); /* OOM: y untouched */
}

static void mm_auto(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                    int64_t r0, int64_t r1, float *tmp) {
    (void)tmp;
    mm_with(&k_auto, w, x, n_tok, y, ldy, r0, r1);
}

static void mm_avx2(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                    int64_t r0, int64_t r1, float *tmp) {
    (void)tmp;
    mm_with(&k_avx2, w, x, n_tok, y, ldy, r0, r1);
}

static void mm_avx512(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                      int64_t r0, int64_t r1, float *tmp) {
    (void)tmp;
    mm_with(&k_avx512, w, x, n_tok, y, ldy, r0, r1);
}

/* vec_dot: the one-row, one-token product on float x as given (no activation quantization, like
 * cpu_scalar's vec_dot). */
static float x86_vec_dot(uint32_t type, const void *row, const float *x, int64_t n) {
    if (n <= 0) return 0.0f;
    gt_weight w = {.data = row, .type = type, .n_in = n, .n_out = 1, .row_bytes = 0};
    float y = 0.0f;
    matmul_float(&w, x, 1, &y, 1, 0, 1);
    return y;
}

/* Embedding rows: cpu_scalar's dequantization. */
static void x86_get_row(const gt_weight *w, int64_t r, float *dst) {
    gt_scalar_dequantize_row(w->type, w->data + (size_t)r * w->row_bytes, dst, w->n_in);
}

static const gt_backend k_auto = {
    .name = "cpu_x86", .available = has_avx2, .matmul = mm_auto, .get_row = x86_get_row,
    .vec_dot = x86_vec_dot, .act_row_bytes = x86_act_row_bytes,
    .quantize_acts = x86_quantize_acts, .matmul_q = mmq_auto, .simd = GT_SIMD_AVX2};
static const gt_backend k_avx2 = {
    .name = "cpu_x86_avx2", .available = has_avx2, .matmul = mm_avx2, .get_row = x86_get_row,
    .vec_dot = x86_vec_dot, .act_row_bytes = x86_act_row_bytes,
    .quantize_acts = x86_quantize_acts, .matmul_q = avx2_matmul_q, .simd = GT_SIMD_AVX2};
static const gt_backend k_avx512 = {
    .name = "cpu_x86_avx512", .available = has_avx512, .matmul = mm_avx512,
    .get_row = x86_get_row, .vec_dot = x86_vec_dot, .act_row_bytes = x86_act_row_bytes,
    .quantize_acts = x86_quantize_acts, .matmul_q = vnni_matmul_q, .simd = GT_SIMD_AVX512};

#else /* not x86-64: present but never available; the entries are cpu_scalar's so nothing breaks */

static bool never(void) { return false; }

static void scalar_mm(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                      int64_t r0, int64_t r1, float *tmp) {
    gt_scalar_matmul_rows(w->type, w->data, w->row_bytes, w->n_in, r0, r1, x, n_tok, y, ldy, tmp);
}

static void scalar_row(const gt_weight *w, int64_t r, float *dst) {
    gt_scalar_dequantize_row(w->type, w->data + (size_t)r * w->row_bytes, dst, w->n_in);
}

static const gt_backend k_auto = {.name = "cpu_x86", .available = never, .matmul = scalar_mm,
                                  .get_row = scalar_row, .vec_dot = gt_scalar_vec_dot};
static const gt_backend k_avx2 = {.name = "cpu_x86_avx2", .available = never, .matmul = scalar_mm,
                                  .get_row = scalar_row, .vec_dot = gt_scalar_vec_dot};
static const gt_backend k_avx512 = {.name = "cpu_x86_avx512", .available = never,
                                    .matmul = scalar_mm, .get_row = scalar_row,
                                    .vec_dot = gt_scalar_vec_dot};

#endif

const gt_backend *gt_backend_cpu_x86(void) { return &k_auto; }
const gt_backend *gt_backend_cpu_x86_avx2(void) { return &k_avx2; }
const gt_backend *gt_backend_cpu_x86_avx512(void) { return &k_avx512; }
