/* cpu_x86 kernels (see backend_x86.h for the three names).
 *
 * Numbers: activations are first rounded to the 8-bit format of the weight type (act_quant.h,
 * the contract every backend follows; the same gt_round_activations cpu_scalar uses), weights
 * are dequantized with SIMD into exactly cpu_scalar's floats (same operations, one rounding
 * each), and the two are dotted in float with fused multiply-add. So only the summation order
 * differs from cpu_scalar: every (row, token) pair has one vector accumulator (8 or 16 lanes)
 * running over the whole row in order, then a fixed lane tree. That order depends on neither the
 * row/token tiling nor the rows a caller asks for, so decode equals prefill and any split of the
 * rows over threads gives the same logits. (An integer dot on the 8-bit values, as llama.cpp
 * does, would be faster still; not done yet.)
 *
 * Speed: weights are dequantized once per segment of SEG values for a group of RB rows and reused
 * for up to TG tokens (prefill), with a register tile of RB rows x 2 (AVX2) or 4 (AVX-512)
 * tokens, so prefill is bound by the FMA units and decode by reading the weights.
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
#include "util/ggml_types.h"

#define SEG 256 /* values per dequantized segment: one K super-block, eight 32-blocks */
#define SEGP (SEG + 32) /* segment stride in floats, room for zero padding of a tail */
#define RB 4    /* rows per group */
#define TG 32   /* tokens per group */

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))

static bool has_avx2(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

static bool has_avx512(void) {
    return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

/* ---- dequantization (AVX2; shared by both variants) ---------------------------------------- */

T_AVX2 static inline float ld_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 8 int8 (low 8 bytes of v) to floats */
T_AVX2 static inline __m256 i8_to_ps(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

/* dst[0..32) = s * (float)q[i] (+ m when add, - m when sub): q is 32 int8; s_lo scales the first
 * 16 values and s_hi the last 16. Mul and add stay separate, as in cpu_scalar. */
T_AVX2 static inline void put32(__m256i q, float s_lo, float s_hi, float m, int mode, float *dst) {
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m256 a = _mm256_set1_ps(s_lo), b = _mm256_set1_ps(s_hi), mv = _mm256_set1_ps(m);
    __m256 v[4] = {
        _mm256_mul_ps(i8_to_ps(lo), a),
        _mm256_mul_ps(i8_to_ps(_mm_srli_si128(lo, 8)), a),
        _mm256_mul_ps(i8_to_ps(hi), b),
        _mm256_mul_ps(i8_to_ps(_mm_srli_si128(hi, 8)), b),
    };
    for (int i = 0; i < 4; i++) {
        if (mode > 0) v[i] = _mm256_add_ps(v[i], mv);
        else if (mode < 0) v[i] = _mm256_sub_ps(v[i], mv);
        _mm256_storeu_ps(dst + 8 * i, v[i]);
    }
}

/* 16 bytes -> 32 nibbles: low nibbles are values 0..15, high nibbles 16..31 */
T_AVX2 static inline __m256i nibbles32(const uint8_t *qs) {
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

T_AVX2 static void deq_q4_0(const uint8_t *b, float *y) {
    const __m256i q = _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8));
    const float d = ld_f16(b);
    put32(q, d, d, 0.0f, 0, y);
}

T_AVX2 static void deq_q4_1(const uint8_t *b, float *y) {
    const float d = ld_f16(b);
    put32(nibbles32(b + 4), d, d, ld_f16(b + 2), 1, y);
}

T_AVX2 static void deq_q5_0(const uint8_t *b, float *y) {
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    /* byte i of the vector gets bit i of qh as 0x10 */
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                         2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), sel);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits);
    const __m256i hi = _mm256_and_si256(set, _mm256_set1_epi8(0x10));
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(nibbles32(b + 6), hi), _mm256_set1_epi8(16));
    const float d = ld_f16(b);
    put32(q, d, d, 0.0f, 0, y);
}

T_AVX2 static void deq_q8_0(const uint8_t *b, float *y) {
    const float d = ld_f16(b);
    put32(_mm256_loadu_si256((const __m256i *)(b + 2)), d, d, 0.0f, 0, y);
}

T_AVX2 static void deq_q4_k(const uint8_t *b, float *y) {
    const float d = ld_f16(b), dmin = ld_f16(b + 2);
    const uint8_t *s = b + 4;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int g = 0; g < 4; g++) {
        int sc[2], mn[2];
        for (int h = 0; h < 2; h++) {
            const int j = 2 * g + h;
            if (j < 4) {
                sc[h] = s[j] & 63;
                mn[h] = s[j + 4] & 63;
            } else {
                sc[h] = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
                mn[h] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
            }
        }
        const float d1 = d * (float)sc[0], m1 = dmin * (float)mn[0];
        const float d2 = d * (float)sc[1], m2 = dmin * (float)mn[1];
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * g));
        put32(_mm256_and_si256(q, m4), d1, d1, m1, -1, y + 64 * g);
        put32(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), d2, d2, m2, -1, y + 64 * g + 32);
    }
}

T_AVX2 static void deq_q6_k(const uint8_t *b, float *y) {
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = ld_f16(b + 208);
    float ds[16];
    for (int i = 0; i < 16; i++) ds[i] = d * (float)sc[i];
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; h++) {
        const __m256i L0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
        const __m256i L1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
        const __m256i H = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(H, m2), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 2), m2), 4);
        const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 4), m2), 4);
        const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 6), m2), 4);
        const __m256i q1 = _mm256_or_si256(_mm256_and_si256(L0, m4), h0);
        const __m256i q2 = _mm256_or_si256(_mm256_and_si256(L1, m4), h1);
        const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4), h2);
        const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4), h3);
        const float *s = ds + 8 * h;
        float *out = y + 128 * h;
        put32(_mm256_sub_epi8(q1, k32), s[0], s[1], 0.0f, 0, out);
        put32(_mm256_sub_epi8(q2, k32), s[2], s[3], 0.0f, 0, out + 32);
        put32(_mm256_sub_epi8(q3, k32), s[4], s[5], 0.0f, 0, out + 64);
        put32(_mm256_sub_epi8(q4, k32), s[6], s[7], 0.0f, 0, out + 96);
    }
}

typedef void (*deq_fn)(const uint8_t *b, float *y);

static deq_fn block_fn(uint32_t type, int *blk, int *bytes) {
    switch (type) {
    case GT_TYPE_Q4_0: *blk = 32; *bytes = 18; return deq_q4_0;
    case GT_TYPE_Q4_1: *blk = 32; *bytes = 20; return deq_q4_1;
    case GT_TYPE_Q5_0: *blk = 32; *bytes = 22; return deq_q5_0;
    case GT_TYPE_Q8_0: *blk = 32; *bytes = 34; return deq_q8_0;
    case GT_TYPE_Q4_K: *blk = 256; *bytes = 144; return deq_q4_k;
    case GT_TYPE_Q6_K: *blk = 256; *bytes = 210; return deq_q6_k;
    default: return NULL;
    }
}

/* Values [k0, k0 + len) of a row into dst, zero-padded up to a multiple of 32. k0 is a multiple
 * of SEG and len of the block size. Unknown types give zeros (cpu_scalar does the same). */
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
    } else {
        int blk = 0, bytes = 0;
        const deq_fn fn = block_fn(type, &blk, &bytes);
        if (fn != NULL) {
            const uint8_t *p = row + (k0 / blk) * bytes;
            for (; done < len; done += blk, p += bytes) fn(p, dst + done);
        } else {
            /* a type without SIMD code here: cpu_scalar's dequantization (zeros if unknown) */
            const gt_type_info *ti = gt_type_get(type);
            if (ti != NULL && ti->block > 0) {
                gt_scalar_dequantize_row(type, row + (k0 / ti->block) * ti->bytes, dst, len);
                done = len;
            }
        }
    }
    const int pad = (len + 31) & ~31;
    for (int i = done; i < pad; i++) dst[i] = 0.0f;
}

/* ---- dequantization, AVX-512 ---------------------------------------------------------------
 * 4- and 5-bit values through a 16/32-entry float table (vpermps uses only the low index bits):
 * the table entries are computed with cpu_scalar's operations, so the values are the same. */

T_AVX512 static inline __m512 iota16(float first) {
    return _mm512_add_ps(_mm512_set1_ps(first),
                         _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

/* 16 nibble bytes via table: low nibbles to y[0..16), high nibbles to y[16..32) */
T_AVX512 static inline void nib_table(const uint8_t *qs, __m512 tlo, __m512 thi, float *y) {
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
    _mm512_storeu_ps(y, _mm512_permutexvar_ps(idx, tlo));
    _mm512_storeu_ps(y + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), thi));
}

T_AVX512 static void deq512_q4_0(const uint8_t *b, float *y) {
    const __m512 t = _mm512_mul_ps(iota16(-8.0f), _mm512_set1_ps(ld_f16(b)));
    nib_table(b + 2, t, t, y);
}

T_AVX512 static void deq512_q4_1(const uint8_t *b, float *y) {
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(iota16(0.0f), _mm512_set1_ps(ld_f16(b))),
                                   _mm512_set1_ps(ld_f16(b + 2)));
    nib_table(b + 4, t, t, y);
}

T_AVX512 static void deq512_q5_0(const uint8_t *b, float *y) {
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const __m512 d = _mm512_set1_ps(ld_f16(b));
    const __m512 t0 = _mm512_mul_ps(iota16(-16.0f), d), t1 = _mm512_mul_ps(iota16(0.0f), d);
    const __m512i raw = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + 6)));
    const __m512i k16 = _mm512_set1_epi32(16);
    const __m512i lo = _mm512_and_si512(raw, _mm512_set1_epi32(15));
    const __m512i hi = _mm512_srli_epi32(raw, 4);
    const __m512i ilo = _mm512_mask_or_epi32(lo, (__mmask16)(qh & 0xFFFF), lo, k16);
    const __m512i ihi = _mm512_mask_or_epi32(hi, (__mmask16)(qh >> 16), hi, k16);
    _mm512_storeu_ps(y, _mm512_permutex2var_ps(t0, ilo, t1));
    _mm512_storeu_ps(y + 16, _mm512_permutex2var_ps(t0, ihi, t1));
}

T_AVX512 static void deq512_q8_0(const uint8_t *b, float *y) {
    const __m512 d = _mm512_set1_ps(ld_f16(b));
    for (int h = 0; h < 2; h++) {
        const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2 + 16 * h)));
        _mm512_storeu_ps(y + 16 * h, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
    }
}

T_AVX512 static void deq512_q4_k(const uint8_t *b, float *y) {
    const float d = ld_f16(b), dmin = ld_f16(b + 2);
    const uint8_t *s = b + 4;
    const __m512 io = iota16(0.0f);
    for (int g = 0; g < 4; g++) {
        int sc[2], mn[2];
        for (int h = 0; h < 2; h++) {
            const int j = 2 * g + h;
            if (j < 4) {
                sc[h] = s[j] & 63;
                mn[h] = s[j + 4] & 63;
            } else {
                sc[h] = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
                mn[h] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
            }
        }
        const __m512 t1 = _mm512_sub_ps(_mm512_mul_ps(io, _mm512_set1_ps(d * (float)sc[0])),
                                        _mm512_set1_ps(dmin * (float)mn[0]));
        const __m512 t2 = _mm512_sub_ps(_mm512_mul_ps(io, _mm512_set1_ps(d * (float)sc[1])),
                                        _mm512_set1_ps(dmin * (float)mn[1]));
        const uint8_t *q = b + 16 + 32 * g;
        float *out = y + 64 * g;
        for (int h = 0; h < 2; h++) {
            const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + 16 * h)));
            _mm512_storeu_ps(out + 16 * h, _mm512_permutexvar_ps(idx, t1));
            _mm512_storeu_ps(out + 32 + 16 * h, _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), t2));
        }
    }
}

static deq_fn block_fn512(uint32_t type) {
    switch (type) {
    case GT_TYPE_Q4_0: return deq512_q4_0;
    case GT_TYPE_Q4_1: return deq512_q4_1;
    case GT_TYPE_Q5_0: return deq512_q5_0;
    case GT_TYPE_Q8_0: return deq512_q8_0;
    case GT_TYPE_Q4_K: return deq512_q4_k;
    default: return NULL;
    }
}

/* deq_seg with the AVX-512 block kernels where there is one */
T_AVX512 static void deq_seg512(uint32_t type, const uint8_t *row, int64_t k0, int len, float *dst) {
    int blk = 0, bytes = 0;
    const deq_fn fn = block_fn512(type);
    if (fn == NULL || block_fn(type, &blk, &bytes) == NULL) {
        deq_seg(type, row, k0, len, dst);
        return;
    }
    const uint8_t *p = row + (k0 / blk) * bytes;
    for (int done = 0; done < len; done += blk, p += bytes) fn(p, dst + done);
    const int pad = (len + 31) & ~31;
    for (int i = len; i < pad; i++) dst[i] = 0.0f;
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

/* ---- activation rounding: act_quant.c's gt_round_activations, vectorized, same results ------ */

T_AVX2 static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
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

T_AVX2 static void round_q8_32_simd(const float *x, float *y) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 32; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), absmask));
    const float amax = hmax8(m);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float dh = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256 vid = _mm256_set1_ps(id), vdh = _mm256_set1_ps(dh);
    for (int i = 0; i < 32; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(round_away(_mm256_mul_ps(_mm256_loadu_ps(x + i), vid)), vdh));
}

T_AVX2 static void round_q8_256_simd(const float *x, float *y) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 256; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), absmask));
    const float amax = hmax8(m);
    if (amax == 0.0f) {
        memset(y, 0, 256 * sizeof(float));
        return;
    }
    float maxv = 0.0f; /* the first value of largest magnitude, with its sign */
    for (int i = 0; i < 256; i++) {
        if (__builtin_fabsf(x[i]) == amax) {
            maxv = x[i];
            break;
        }
    }
    const float iscale = -127.0f / maxv;
    const float d = 1.0f / iscale;
    const __m256 vi = _mm256_set1_ps(iscale), vd = _mm256_set1_ps(d), top = _mm256_set1_ps(127.0f);
    for (int i = 0; i < 256; i += 8) {
        __m256 q = _mm256_round_ps(_mm256_mul_ps(vi, _mm256_loadu_ps(x + i)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm256_min_ps(q, top);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(q, vd));
    }
}

/* Finite activations: the same values as gt_round_activations (NaN inputs may differ). */
T_AVX2 static void round_acts(gt_act_format f, const float *x, float *y, int64_t n) {
    if (f == GT_ACTF_Q8_32) {
        for (int64_t b = 0; b + 32 <= n; b += 32) round_q8_32_simd(x + b, y + b);
    } else if (f == GT_ACTF_Q8_256) {
        for (int64_t b = 0; b + 256 <= n; b += 256) round_q8_256_simd(x + b, y + b);
    } else {
        gt_round_activations(f, x, y, n);
    }
}

typedef void (*tile_fn)(const float *w, int nr, const float *x, int64_t ldx, int nt, int len,
                        double *acc);

/* round_act: first round the activations as act_quant.h says for the weight type (matmul; the
 * contract every backend follows), else dot the float x as given (vec_dot). */
static void matmul_with(tile_fn tile, int vl, bool round_act, const gt_weight *w, const float *x,
                        int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    enum { XCAP = 16384 }; /* floats of rounded activations on the stack, as cpu_scalar */
    _Alignas(64) float wbuf[RB * SEGP];
    double acc[RB * TG];
    const int64_t n_in = w->n_in;
    const gt_act_format f = round_act ? gt_act_format_for(w->type) : GT_ACTF_F32;
    float xstack[XCAP];
    float *xr = xstack, *heap = NULL;
    int64_t tg = TG;
    if (f != GT_ACTF_F32) {
        tg = XCAP / n_in < TG ? XCAP / n_in : TG;
        if (tg == 0) { /* a row wider than the stack buffer: one token at a time, heap */
            tg = 1;
            xr = heap = malloc((size_t)n_in * sizeof(float));
            if (!heap) return; /* as cpu_scalar: cannot happen in practice, y untouched */
        }
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += tg) {
        const int nt = (int)(n_tok - t0 < tg ? n_tok - t0 : tg);
        const float *xs = x + t0 * n_in;
        if (f != GT_ACTF_F32) {
            round_acts(f, xs, xr, nt * n_in);
            xs = xr;
        }
        for (int64_t rg = r0; rg < r1; rg += RB) {
            const int nr = (int)(r1 - rg < RB ? r1 - rg : RB);
            for (int i = 0; i < RB * TG; i++) acc[i] = 0.0;
            for (int64_t k0 = 0; k0 < n_in; k0 += SEG) {
                const int len = (int)(n_in - k0 < SEG ? n_in - k0 : SEG);
                for (int r = 0; r < nr; r++)
                    (vl == 16 ? deq_seg512 : deq_seg)(w->type,
                                                      w->data + (size_t)(rg + r) * w->row_bytes,
                                                      k0, len, wbuf + r * SEGP);
                tile(wbuf, nr, xs + k0, n_in, nt, len, acc);
            }
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < nr; r++)
                    y[(t0 + t) * ldy + rg + r] = (float)acc[r * TG + t];
        }
    }
    free(heap);
}

static void mm_avx2(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                    int64_t r0, int64_t r1, float *tmp) {
    (void)tmp;
    matmul_with(tile_exact, 8, true, w, x, n_tok, y, ldy, r0, r1);
}

static void mm_avx512(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                      int64_t r0, int64_t r1, float *tmp) {
    (void)tmp;
    matmul_with(tile_exact, 16, true, w, x, n_tok, y, ldy, r0, r1);
}

static void mm_auto(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                    int64_t r0, int64_t r1, float *tmp) {
    if (has_avx512()) mm_avx512(w, x, n_tok, y, ldy, r0, r1, tmp);
    else mm_avx2(w, x, n_tok, y, ldy, r0, r1, tmp);
}

/* vec_dot: the one-row, one-token matmul on float x as given (no activation rounding, like
 * cpu_scalar's vec_dot); for F32/F16 weights bit-identical to what matmul writes. */
static float dot_with(tile_fn tile, int vl, uint32_t type, const void *row, const float *x,
                      int64_t n) {
    if (n <= 0) return 0.0f;
    gt_weight w = {.data = row, .type = type, .n_in = n, .n_out = 1, .row_bytes = 0};
    float y = 0.0f;
    matmul_with(tile, vl, false, &w, x, 1, &y, 1, 0, 1);
    return y;
}

static float dot_avx2(uint32_t type, const void *row, const float *x, int64_t n) {
    return dot_with(tile_exact, 8, type, row, x, n);
}

static float dot_avx512(uint32_t type, const void *row, const float *x, int64_t n) {
    return dot_with(tile_exact, 16, type, row, x, n);
}

static float dot_auto(uint32_t type, const void *row, const float *x, int64_t n) {
    return has_avx512() ? dot_avx512(type, row, x, n) : dot_avx2(type, row, x, n);
}

/* Embedding rows: the same floats as cpu_scalar's dequantization. */
static void x86_get_row(const gt_weight *w, int64_t r, float *dst) {
    _Alignas(64) float buf[SEGP];
    const uint8_t *row = w->data + (size_t)r * w->row_bytes;
    for (int64_t k0 = 0; k0 < w->n_in; k0 += SEG) {
        const int len = (int)(w->n_in - k0 < SEG ? w->n_in - k0 : SEG);
        deq_seg(w->type, row, k0, len, buf);
        memcpy(dst + k0, buf, (size_t)len * sizeof(float));
    }
}

static const gt_backend k_auto = {"cpu_x86", has_avx2, mm_auto, x86_get_row, dot_auto};
static const gt_backend k_avx2 = {"cpu_x86_avx2", has_avx2, mm_avx2, x86_get_row, dot_avx2};
static const gt_backend k_avx512 = {"cpu_x86_avx512", has_avx512, mm_avx512, x86_get_row,
                                    dot_avx512};

#else /* not x86-64: present but never available; the entries are cpu_scalar's so nothing breaks */

static bool never(void) { return false; }

static void scalar_mm(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                      int64_t r0, int64_t r1, float *tmp) {
    gt_scalar_matmul_rows(w->type, w->data, w->row_bytes, w->n_in, r0, r1, x, n_tok, y, ldy, tmp);
}

static void scalar_row(const gt_weight *w, int64_t r, float *dst) {
    gt_scalar_dequantize_row(w->type, w->data + (size_t)r * w->row_bytes, dst, w->n_in);
}

static const gt_backend k_auto = {"cpu_x86", never, scalar_mm, scalar_row, gt_scalar_vec_dot};
static const gt_backend k_avx2 = {"cpu_x86_avx2", never, scalar_mm, scalar_row, gt_scalar_vec_dot};
static const gt_backend k_avx512 = {"cpu_x86_avx512", never, scalar_mm, scalar_row,
                                    gt_scalar_vec_dot};

#endif

const gt_backend *gt_backend_cpu_x86(void) { return &k_auto; }
const gt_backend *gt_backend_cpu_x86_avx2(void) { return &k_avx2; }
const gt_backend *gt_backend_cpu_x86_avx512(void) { return &k_avx512; }
