/* cpu_scalar dequantize and dot kernels.
 *
 * Block layouts are the GGML formats (facts of the file format). Every multi-byte field is read
 * byte by byte as little-endian, so blocks may sit at any address (GGUF only aligns the tensor,
 * and blocks of 18/20/22/24/34/84/110/136/176/210 bytes are unaligned inside it) and the host's byte order does not
 * matter. The arithmetic is plain float with one operation per statement: this file is built with
 * -std=c17 (no FP contraction in GCC) and separate statements keep clang from fusing multiply-add,
 * so the results equal the gguf Python package's numpy dequantization bit for bit. */
#include "backend/cpu_scalar/quants.h"

#include <string.h>

#include "backend/act_quant.h"
#include "util/ggml_types.h"
#include "util/util.h"

#define QK 32   /* elements per block of the 32-wide formats */
#define QK_K 256 /* elements per super-block of the K formats */
#define RUN 32   /* dot products sum runs of this many values in float */

static inline uint16_t rd_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static inline uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline float rd_f16(const uint8_t *p) { return gt_f16_to_f32(rd_u16(p)); }

/* BF16: the top 16 bits of an f32 */
static inline float rd_bf16(const uint8_t *p) {
    const uint32_t u = (uint32_t)rd_u16(p) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- one block each ------------------------------------------------------------------------ */

/* Q4_0: f16 d, 16 bytes; low nibbles are elements 0..15, high nibbles 16..31; (q - 8) * d. */
static void deq_q4_0(const uint8_t *b, float *y) {
    const float d = rd_f16(b);
    const uint8_t *qs = b + 2;
    for (int i = 0; i < QK / 2; i++) {
        y[i] = d * (float)((int)(qs[i] & 0x0F) - 8);
        y[i + QK / 2] = d * (float)((int)(qs[i] >> 4) - 8);
    }
}

/* Q4_1: f16 d, f16 m, 16 bytes of nibbles as Q4_0; q * d + m. */
static void deq_q4_1(const uint8_t *b, float *y) {
    const float d = rd_f16(b);
    const float m = rd_f16(b + 2);
    const uint8_t *qs = b + 4;
    for (int i = 0; i < QK / 2; i++) {
        const float lo = d * (float)(qs[i] & 0x0F);
        const float hi = d * (float)(qs[i] >> 4);
        y[i] = lo + m;
        y[i + QK / 2] = hi + m;
    }
}

/* Q5_0: f16 d, u32 qh (bit i = 5th bit of element i), 16 nibble bytes as Q4_0; (q - 16) * d. */
static void deq_q5_0(const uint8_t *b, float *y) {
    const float d = rd_f16(b);
    const uint32_t qh = rd_u32(b + 2);
    const uint8_t *qs = b + 6;
    for (int i = 0; i < QK / 2; i++) {
        const int lo = (int)((qs[i] & 0x0F) | (((qh >> i) & 1u) << 4));
        const int hi = (int)((qs[i] >> 4) | (((qh >> (i + QK / 2)) & 1u) << 4));
        y[i] = d * (float)(lo - 16);
        y[i + QK / 2] = d * (float)(hi - 16);
    }
}

/* Q8_0: f16 d, 32 int8; q * d. */
static void deq_q8_0(const uint8_t *b, float *y) {
    const float d = rd_f16(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int i = 0; i < QK; i++) y[i] = d * (float)qs[i];
}

/* Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32, 128 bytes of
 * nibbles. Bytes 0..3 hold scales 0..3 (low 6 bits) and the top 2 bits of scales 4..7; bytes 4..7
 * the same for mins; bytes 8..11 the low 4 bits of scale 4+j (low nibble) and min 4+j (high). */
static void q4k_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Each 32-byte group of nibbles holds two sub-blocks: low nibbles first, then high nibbles.
 * Value = (d * scale) * q - (dmin * min). */
static void deq_q4_k(const uint8_t *b, float *y) {
    const float d = rd_f16(b);
    const float dmin = rd_f16(b + 2);
    const uint8_t *scales = b + 4;
    const uint8_t *qs = b + 16;
    for (int g = 0; g < 4; g++) {
        int sc1, mn1, sc2, mn2;
        q4k_scale_min(scales, 2 * g, &sc1, &mn1);
        q4k_scale_min(scales, 2 * g + 1, &sc2, &mn2);
        const float d1 = d * (float)sc1;
        const float m1 = dmin * (float)mn1;
        const float d2 = d * (float)sc2;
        const float m2 = dmin * (float)mn2;
        const uint8_t *q = qs + 32 * g;
        float *out = y + 64 * g;
        for (int l = 0; l < 32; l++) {
            const float lo = d1 * (float)(q[l] & 0x0F);
            const float hi = d2 * (float)(q[l] >> 4);
            out[l] = lo - m1;
            out[l + 32] = hi - m2;
        }
    }
}

/* Q6_K: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8 scales (one per 16 values),
 * f16 d. Each half of 128 values uses 64 ql bytes and 32 qh bytes: for l in 0..31 the four values
 * l, l+32, l+64, l+96 take the low nibble of ql[l], the low nibble of ql[l+32], the high nibble of
 * ql[l], the high nibble of ql[l+32], with qh[l] bits 0-1, 2-3, 4-5, 6-7 on top. (q - 32) * d * s. */
static void deq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b;
    const uint8_t *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = rd_f16(b + 208);
    float ds[16];
    for (int i = 0; i < 16; i++) ds[i] = d * (float)sc[i];
    for (int h = 0; h < 2; h++) {
        const uint8_t *L = ql + 64 * h;
        const uint8_t *H = qh + 32 * h;
        float *out = y + 128 * h;
        const float *s = ds + 8 * h;
        for (int l = 0; l < 32; l++) {
            const int q1 = (int)((L[l] & 0x0F) | ((H[l] & 0x03) << 4)) - 32;
            const int q2 = (int)((L[l + 32] & 0x0F) | (((H[l] >> 2) & 0x03) << 4)) - 32;
            const int q3 = (int)((L[l] >> 4) | (((H[l] >> 4) & 0x03) << 4)) - 32;
            const int q4 = (int)((L[l + 32] >> 4) | (((H[l] >> 6) & 0x03) << 4)) - 32;
            /* value index v uses scale v / 16 of this half */
            out[l] = s[l / 16] * (float)q1;
            out[l + 32] = s[2 + l / 16] * (float)q2;
            out[l + 64] = s[4 + l / 16] * (float)q3;
            out[l + 96] = s[6 + l / 16] * (float)q4;
        }
    }
}

/* Q5_1: f16 d, f16 m, u32 qh, 16 nibble bytes (as Q5_0, without the offset); q * d + m. */
static void deq_q5_1(const uint8_t *b, float *y) {
    const float d = rd_f16(b);
    const float m = rd_f16(b + 2);
    const uint32_t qh = rd_u32(b + 4);
    const uint8_t *qs = b + 8;
    for (int i = 0; i < QK / 2; i++) {
        const int lo = (int)((qs[i] & 0x0F) | (((qh >> i) & 1u) << 4));
        const int hi = (int)((qs[i] >> 4) | (((qh >> (i + QK / 2)) & 1u) << 4));
        const float a = d * (float)lo;
        const float c = d * (float)hi;
        y[i] = a + m;
        y[i + QK / 2] = c + m;
    }
}

/* The 16 non-linear levels of IQ4_NL and IQ4_XS (a fact of the format). */
static const int8_t k_iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

/* IQ4_NL: f16 d, 16 nibble bytes (low nibbles values 0..15, high 16..31); d * level[nibble]. */
static void deq_iq4_nl(const uint8_t *b, float *y) {
    const float d = rd_f16(b);
    const uint8_t *qs = b + 2;
    for (int i = 0; i < QK / 2; i++) {
        y[i] = d * (float)k_iq4_levels[qs[i] & 0x0F];
        y[i + QK / 2] = d * (float)k_iq4_levels[qs[i] >> 4];
    }
}

/* Q5_K: f16 d, f16 dmin, 12 bytes of scales and mins (as Q4_K), 32 bytes qh, 128 bytes of
 * nibbles (as Q4_K). Bit j of qh[l] is the 5th bit of value l of sub-block j. */
static void deq_q5_k(const uint8_t *b, float *y) {
    const float d = rd_f16(b);
    const float dmin = rd_f16(b + 2);
    const uint8_t *scales = b + 4;
    const uint8_t *qh = b + 16;
    const uint8_t *qs = b + 48;
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        q4k_scale_min(scales, j, &sc, &mn);
        const float dj = d * (float)sc;
        const float mj = dmin * (float)mn;
        const uint8_t *q = qs + 32 * (j / 2);
        for (int l = 0; l < 32; l++) {
            const int lo = (j & 1) ? (q[l] >> 4) : (q[l] & 0x0F);
            const int v = lo | (((qh[l] >> j) & 1) << 4);
            const float a = dj * (float)v;
            y[32 * j + l] = a - mj;
        }
    }
}

/* Q3_K's 16 scales (6 bits, stored + 32): bytes 0..7 hold the low 4 bits of scales 0..7 (low
 * nibbles) and 8..15 (high nibbles); bits 2k'..2k'+1 of byte 8 + k % 4 (k' = k / 4) the top two. */
static int q3k_scale(const uint8_t *s, int k) {
    const int lo = (k < 8 ? s[k] : s[k - 8] >> 4) & 0x0F;
    const int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* Q3_K: 32 bytes hmask, 64 bytes of 2-bit values, 12 bytes of scales, f16 d. Value v = 128h +
 * 32j + l (h < 2, j < 4, l < 32): bits 2j..2j+1 of qs[32h + l], minus 4 unless bit 4h + j of
 * hmask[l] is set; scale (v / 16). d * scale * value. */
static void deq_q3_k(const uint8_t *b, float *y) {
    const uint8_t *hm = b;
    const uint8_t *qs = b + 32;
    const float d = rd_f16(b + 108);
    for (int k = 0; k < 16; k++) {
        const float dl = d * (float)q3k_scale(b + 96, k);
        for (int i = 0; i < 16; i++) {
            const int v = 16 * k + i, h = v / 128, j = (v / 32) % 4, l = v % 32;
            const int q = ((qs[32 * h + l] >> (2 * j)) & 3) - (((hm[l] >> (4 * h + j)) & 1) ? 0 : 4);
            y[v] = dl * (float)q;
        }
    }
}

/* Q2_K: 16 bytes of scales (low nibble) and mins (high nibble), one per 16 values, 64 bytes of
 * 2-bit values (as Q3_K's), f16 d, f16 dmin. (d * scale) * q - (dmin * min). */
static void deq_q2_k(const uint8_t *b, float *y) {
    const uint8_t *sc = b;
    const uint8_t *qs = b + 16;
    const float d = rd_f16(b + 80);
    const float dmin = rd_f16(b + 82);
    for (int k = 0; k < 16; k++) {
        const float dl = d * (float)(sc[k] & 0x0F);
        const float ml = dmin * (float)(sc[k] >> 4);
        for (int i = 0; i < 16; i++) {
            const int v = 16 * k + i, h = v / 128, j = (v / 32) % 4, l = v % 32;
            const int q = (qs[32 * h + l] >> (2 * j)) & 3;
            const float a = dl * (float)q;
            y[v] = a - ml;
        }
    }
}

/* IQ4_XS's 6-bit scale of sub-block j (stored + 32): low 4 bits from nibble j % 2 of byte j / 2
 * of scales_l, top 2 bits from bits 2j..2j+1 of the u16 scales_h. */
static int iq4xs_scale(const uint8_t *b, int j) {
    const int sh = rd_u16(b + 2);
    const int lo = (b[4 + j / 2] >> (4 * (j % 2))) & 0x0F;
    return (lo | (((sh >> (2 * j)) & 3) << 4)) - 32;
}

/* IQ4_XS: f16 d, u16 scales_h, 4 bytes scales_l, 128 nibble bytes: sub-block j of 32 values uses
 * bytes 16j..16j+15 as IQ4_NL does; (d * scale_j) * level[nibble]. */
static void deq_iq4_xs(const uint8_t *b, float *y) {
    const float d = rd_f16(b);
    for (int j = 0; j < 8; j++) {
        const float dl = d * (float)iq4xs_scale(b, j);
        const uint8_t *qs = b + 8 + 16 * j;
        for (int i = 0; i < 16; i++) {
            y[32 * j + i] = dl * (float)k_iq4_levels[qs[i] & 0x0F];
            y[32 * j + i + 16] = dl * (float)k_iq4_levels[qs[i] >> 4];
        }
    }
}

typedef void (*deq_block_fn)(const uint8_t *b, float *y);

/* Block kernel, elements and bytes per block of a quantized type; NULL for F32/F16/unknown. */
static deq_block_fn block_kernel(uint32_t type, int *blk, int *bytes) {
    switch (type) {
    case GT_TYPE_Q4_0: *blk = QK; *bytes = 18; return deq_q4_0;
    case GT_TYPE_Q4_1: *blk = QK; *bytes = 20; return deq_q4_1;
    case GT_TYPE_Q5_0: *blk = QK; *bytes = 22; return deq_q5_0;
    case GT_TYPE_Q8_0: *blk = QK; *bytes = 34; return deq_q8_0;
    case GT_TYPE_Q4_K: *blk = QK_K; *bytes = 144; return deq_q4_k;
    case GT_TYPE_Q6_K: *blk = QK_K; *bytes = 210; return deq_q6_k;
    case GT_TYPE_Q5_1: *blk = QK; *bytes = 24; return deq_q5_1;
    case GT_TYPE_IQ4_NL: *blk = QK; *bytes = 18; return deq_iq4_nl;
    case GT_TYPE_Q5_K: *blk = QK_K; *bytes = 176; return deq_q5_k;
    case GT_TYPE_Q3_K: *blk = QK_K; *bytes = 110; return deq_q3_k;
    case GT_TYPE_Q2_K: *blk = QK_K; *bytes = 84; return deq_q2_k;
    case GT_TYPE_IQ4_XS: *blk = QK_K; *bytes = 136; return deq_iq4_xs;
    default: return NULL;
    }
}

/* ---- rows ---------------------------------------------------------------------------------- */

void gt_scalar_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    if (n <= 0) return;
    const uint8_t *s = (const uint8_t *)src;
    if (type == GT_TYPE_F32) {
        memcpy(dst, s, (size_t)n * sizeof(float));
        return;
    }
    if (type == GT_TYPE_F16) {
        for (int64_t i = 0; i < n; i++) dst[i] = rd_f16(s + 2 * i);
        return;
    }
    if (type == GT_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) dst[i] = rd_bf16(s + 2 * i);
        return;
    }
    int blk = 0, bytes = 0;
    deq_block_fn fn = block_kernel(type, &blk, &bytes);
    if (fn == NULL) {
        memset(dst, 0, (size_t)n * sizeof(float));
        return;
    }
    const int64_t nb = n / blk;
    for (int64_t i = 0; i < nb; i++) fn(s + i * bytes, dst + i * blk);
}

/* Sum of a[i] * b[i] for len <= RUN values: 8 float lanes combined in a fixed tree, so the result
 * does not depend on how the compiler schedules it. */
static float dot_run(const float *a, const float *b, int len) {
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= len; i += 8) {
        for (int k = 0; k < 8; k++) {
            const float p = a[i + k] * b[i + k];
            lane[k] += p;
        }
    }
    for (int k = 0; i < len; i++, k++) {
        const float p = a[i] * b[i];
        lane[k] += p;
    }
    return gt_lane_tree8(lane);
}

float gt_scalar_dot_f32(const float *a, const float *b, int64_t n) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; i += RUN) {
        const int len = (int)(n - i < RUN ? n - i : RUN);
        acc += (double)dot_run(a + i, b + i, len);
    }
    return (float)acc;
}

float gt_scalar_vec_dot(uint32_t type, const void *row, const float *x, int64_t n) {
    if (n <= 0) return 0.0f;
    const uint8_t *s = (const uint8_t *)row;
    if (type == GT_TYPE_F32) {
        /* the row may be unaligned: copy runs into an aligned buffer */
        float buf[RUN];
        double acc = 0.0;
        for (int64_t i = 0; i < n; i += RUN) {
            const int len = (int)(n - i < RUN ? n - i : RUN);
            memcpy(buf, s + 4 * i, (size_t)len * sizeof(float));
            acc += (double)dot_run(buf, x + i, len);
        }
        return (float)acc;
    }
    if (type == GT_TYPE_F16 || type == GT_TYPE_BF16) {
        float buf[RUN];
        double acc = 0.0;
        for (int64_t i = 0; i < n; i += RUN) {
            const int len = (int)(n - i < RUN ? n - i : RUN);
            for (int k = 0; k < len; k++)
                buf[k] = type == GT_TYPE_F16 ? rd_f16(s + 2 * (i + k)) : rd_bf16(s + 2 * (i + k));
            acc += (double)dot_run(buf, x + i, len);
        }
        return (float)acc;
    }
    int blk = 0, bytes = 0;
    deq_block_fn fn = block_kernel(type, &blk, &bytes);
    if (fn == NULL) return 0.0f;
    float buf[QK_K];
    double acc = 0.0;
    const int64_t nb = n / blk;
    for (int64_t i = 0; i < nb; i++) {
        fn(s + i * bytes, buf);
        const float *xb = x + i * blk;
        /* same runs of 32 from the row start as gt_scalar_dot_f32 (block sizes are multiples) */
        for (int r = 0; r < blk; r += RUN) acc += (double)dot_run(buf + r, xb + r, RUN);
    }
    return (float)acc;
}

void gt_scalar_matmul_rows(uint32_t type, const void *w, size_t row_bytes, int64_t n_in, int64_t r0,
                           int64_t r1, const float *x, int64_t n_tok, float *y, int64_t ldy,
                           float *tmp) {
    const uint8_t *base = (const uint8_t *)w;
    for (int64_t r = r0; r < r1; r++) {
        gt_scalar_dequantize_row(type, base + (size_t)r * row_bytes, tmp, n_in);
        for (int64_t t = 0; t < n_tok; t++) {
            y[t * ldy + r] = gt_scalar_dot_f32(tmp, x + t * n_in, n_in);
        }
    }
}

/* ---- products with quantized activations: the canonical arithmetic ------------------------
 * Every backend computes exactly this (bit for bit). Per weight block b of a row:
 *   32-blocks (x: Q8_32 block with scale dx, sum sx; weight scale dw, Q4_1 min mw):
 *     Q4_0  isum = sum(n * q) - 8 * sx          p = (dw * dx) * (float)isum
 *     Q5_0  isum = sum(n * q) - 16 * sx         p = (dw * dx) * (float)isum
 *     Q8_0  isum = sum(w * q)                   p = (dw * dx) * (float)isum
 *     Q4_1  isum = sum(n * q)                   p = (dw * dx) * (float)isum + (mw * dx) * (float)sx
 *     Q5_1  as Q4_1 with the 5-bit values
 *     IQ4_NL isum = sum(level[n] * q)           p = (dw * dx) * (float)isum
 *   super-blocks of 256 (x: Q8_256 with scale dx and sums s16[g] of each 16 values):
 *     Q4_K  A = sum_j sc_j * sum_{sub j}(n * q)  B = sum_j mn_j * (s16[2j] + s16[2j+1])
 *           p = (d * dx) * (float)A - (dmin * dx) * (float)B
 *     Q6_K  A = sum_g sc_g * (sum_{16 g}(n * q) - 32 * s16[g])      p = (d * dx) * (float)A
 *     Q5_K  as Q4_K with the 5-bit values
 *     Q3_K  A = sum_g sc_g * (sum_{16 g}(n * q) - 4 * s16[g])       p = (d * dx) * (float)A
 *           (n = the 2-bit value + 4 * the hmask bit, 0..7; sc_g the signed scale, -32..31)
 *     Q2_K  A = sum_g sc_g * sum_{16 g}(n * q)   B = sum_g mn_g * s16[g]
 *           p = (d * dx) * (float)A - (dmin * dx) * (float)B
 *     IQ4_XS A = sum_j sc_j * sum_{sub j}(level[n] * q)              p = (d * dx) * (float)A
 * (n: the unsigned stored value, q: the int8 activation; integer sums are exact in int32.)
 * Then lane[b % 8] += p with eight float lanes from +0, and the row's value is
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). One operation per statement, no fusing. */

/* sum of nibble values times q over one 32-block: low nibbles are values 0..15, high 16..31 */
static int32_t nib_dot(const uint8_t *qs, const int8_t *q) {
    int32_t s = 0;
    for (int i = 0; i < 16; i++) {
        s += (int32_t)(qs[i] & 0x0F) * q[i];
        s += (int32_t)(qs[i] >> 4) * q[i + 16];
    }
    return s;
}

static float dot_q_32(uint32_t type, const uint8_t *w, const uint8_t *xq, int64_t n) {
    const int8_t *q = (const int8_t *)xq;
    const float *dx = gt_act_q_scales(xq, n);
    const int32_t *sx = gt_act_q_sums(xq, n, 32);
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t nb = n / QK;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *qb = q + QK * b;
        float p;
        if (type == GT_TYPE_Q4_0) {
            const uint8_t *blk = w + 18 * b;
            const int32_t isum = nib_dot(blk + 2, qb) - 8 * sx[b];
            const float dd = rd_f16(blk) * dx[b];
            p = dd * (float)isum;
        } else if (type == GT_TYPE_Q4_1) {
            const uint8_t *blk = w + 20 * b;
            const int32_t isum = nib_dot(blk + 4, qb);
            const float dd = rd_f16(blk) * dx[b];
            const float md = rd_f16(blk + 2) * dx[b];
            const float p1 = dd * (float)isum;
            const float p2 = md * (float)sx[b];
            p = p1 + p2;
        } else if (type == GT_TYPE_Q5_0) {
            const uint8_t *blk = w + 22 * b;
            const uint32_t qh = rd_u32(blk + 2);
            const uint8_t *qs = blk + 6;
            int32_t s = 0;
            for (int i = 0; i < 16; i++) {
                const int lo = (int)((qs[i] & 0x0F) | (((qh >> i) & 1u) << 4));
                const int hi = (int)((qs[i] >> 4) | (((qh >> (i + 16)) & 1u) << 4));
                s += lo * qb[i];
                s += hi * qb[i + 16];
            }
            const int32_t isum = s - 16 * sx[b];
            const float dd = rd_f16(blk) * dx[b];
            p = dd * (float)isum;
        } else if (type == GT_TYPE_Q5_1) {
            const uint8_t *blk = w + 24 * b;
            const uint32_t qh = rd_u32(blk + 4);
            const uint8_t *qs = blk + 8;
            int32_t isum = 0;
            for (int i = 0; i < 16; i++) {
                const int lo = (int)((qs[i] & 0x0F) | (((qh >> i) & 1u) << 4));
                const int hi = (int)((qs[i] >> 4) | (((qh >> (i + 16)) & 1u) << 4));
                isum += lo * qb[i];
                isum += hi * qb[i + 16];
            }
            const float dd = rd_f16(blk) * dx[b];
            const float md = rd_f16(blk + 2) * dx[b];
            const float p1 = dd * (float)isum;
            const float p2 = md * (float)sx[b];
            p = p1 + p2;
        } else if (type == GT_TYPE_IQ4_NL) {
            const uint8_t *blk = w + 18 * b;
            const uint8_t *qs = blk + 2;
            int32_t isum = 0;
            for (int i = 0; i < 16; i++) {
                isum += (int32_t)k_iq4_levels[qs[i] & 0x0F] * qb[i];
                isum += (int32_t)k_iq4_levels[qs[i] >> 4] * qb[i + 16];
            }
            const float dd = rd_f16(blk) * dx[b];
            p = dd * (float)isum;
        } else { /* Q8_0 */
            const uint8_t *blk = w + 34 * b;
            const int8_t *wq = (const int8_t *)(blk + 2);
            int32_t isum = 0;
            for (int i = 0; i < QK; i++) isum += (int32_t)wq[i] * qb[i];
            const float dd = rd_f16(blk) * dx[b];
            p = dd * (float)isum;
        }
        lane[b & 7] += p;
    }
    return gt_lane_tree8(lane);
}

static float dot_q_k(uint32_t type, const uint8_t *w, const uint8_t *xq, int64_t n) {
    const int8_t *q = (const int8_t *)xq;
    const float *dx = gt_act_q_scales(xq, n);
    const int32_t *s16 = gt_act_q_sums(xq, n, 256);
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t nb = n / QK_K;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *qb = q + QK_K * b;
        const int32_t *sb = s16 + 16 * b;
        float p;
        if (type == GT_TYPE_Q4_K) {
            const uint8_t *blk = w + 144 * b;
            const uint8_t *qs = blk + 16;
            int32_t A = 0, B = 0;
            for (int j = 0; j < 8; j++) {
                int sc, mn;
                q4k_scale_min(blk + 4, j, &sc, &mn);
                /* sub-block j: group j / 2, low nibbles for even j, high for odd */
                const uint8_t *g = qs + 32 * (j / 2);
                const int8_t *qj = qb + 32 * j;
                int32_t s = 0;
                for (int l = 0; l < 32; l++) s += (int32_t)((j & 1) ? (g[l] >> 4) : (g[l] & 0x0F)) * qj[l];
                A += sc * s;
                B += mn * (sb[2 * j] + sb[2 * j + 1]);
            }
            const float dd = rd_f16(blk) * dx[b];
            const float dm = rd_f16(blk + 2) * dx[b];
            const float p1 = dd * (float)A;
            const float p2 = dm * (float)B;
            p = p1 - p2;
        } else if (type == GT_TYPE_Q5_K) {
            const uint8_t *blk = w + 176 * b;
            const uint8_t *qh = blk + 16;
            const uint8_t *qs = blk + 48;
            int32_t A = 0, B = 0;
            for (int j = 0; j < 8; j++) {
                int sc, mn;
                q4k_scale_min(blk + 4, j, &sc, &mn);
                const uint8_t *g = qs + 32 * (j / 2);
                const int8_t *qj = qb + 32 * j;
                int32_t s = 0;
                for (int l = 0; l < 32; l++) {
                    const int lo = (j & 1) ? (g[l] >> 4) : (g[l] & 0x0F);
                    s += (int32_t)(lo | (((qh[l] >> j) & 1) << 4)) * qj[l];
                }
                A += sc * s;
                B += mn * (sb[2 * j] + sb[2 * j + 1]);
            }
            const float dd = rd_f16(blk) * dx[b];
            const float dm = rd_f16(blk + 2) * dx[b];
            const float p1 = dd * (float)A;
            const float p2 = dm * (float)B;
            p = p1 - p2;
        } else if (type == GT_TYPE_Q3_K || type == GT_TYPE_Q2_K) {
            const int q3 = type == GT_TYPE_Q3_K;
            const uint8_t *blk = w + (q3 ? 110 : 84) * b;
            const uint8_t *qs = blk + (q3 ? 32 : 16);
            int32_t A = 0, B = 0;
            for (int k = 0; k < 16; k++) {
                int32_t s = 0;
                for (int i = 0; i < 16; i++) {
                    const int v = 16 * k + i, h = v / 128, j = (v / 32) % 4, l = v % 32;
                    int nv = (qs[32 * h + l] >> (2 * j)) & 3;
                    if (q3) nv += 4 * ((blk[l] >> (4 * h + j)) & 1);
                    s += (int32_t)nv * qb[v];
                }
                if (q3) {
                    A += q3k_scale(blk + 96, k) * (s - 4 * sb[k]);
                } else {
                    A += (int32_t)(blk[k] & 0x0F) * s;
                    B += (int32_t)(blk[k] >> 4) * sb[k];
                }
            }
            if (q3) {
                const float dd = rd_f16(blk + 108) * dx[b];
                p = dd * (float)A;
            } else {
                const float dd = rd_f16(blk + 80) * dx[b];
                const float dm = rd_f16(blk + 82) * dx[b];
                const float p1 = dd * (float)A;
                const float p2 = dm * (float)B;
                p = p1 - p2;
            }
        } else if (type == GT_TYPE_IQ4_XS) {
            const uint8_t *blk = w + 136 * b;
            int32_t A = 0;
            for (int j = 0; j < 8; j++) {
                const uint8_t *qs = blk + 8 + 16 * j;
                const int8_t *qj = qb + 32 * j;
                int32_t s = 0;
                for (int i = 0; i < 16; i++) {
                    s += (int32_t)k_iq4_levels[qs[i] & 0x0F] * qj[i];
                    s += (int32_t)k_iq4_levels[qs[i] >> 4] * qj[i + 16];
                }
                A += iq4xs_scale(blk, j) * s;
            }
            const float dd = rd_f16(blk) * dx[b];
            p = dd * (float)A;
        } else { /* Q6_K */
            const uint8_t *blk = w + 210 * b;
            const int8_t *sc = (const int8_t *)(blk + 192);
            int32_t v[256];
            for (int h = 0; h < 2; h++) {
                const uint8_t *L = blk + 64 * h;
                const uint8_t *H = blk + 128 + 32 * h;
                int32_t *o = v + 128 * h;
                for (int l = 0; l < 32; l++) {
                    o[l] = (int32_t)((L[l] & 0x0F) | ((H[l] & 0x03) << 4));
                    o[l + 32] = (int32_t)((L[l + 32] & 0x0F) | (((H[l] >> 2) & 0x03) << 4));
                    o[l + 64] = (int32_t)((L[l] >> 4) | (((H[l] >> 4) & 0x03) << 4));
                    o[l + 96] = (int32_t)((L[l + 32] >> 4) | (((H[l] >> 6) & 0x03) << 4));
                }
            }
            int32_t A = 0;
            for (int g = 0; g < 16; g++) {
                int32_t s = 0;
                for (int i = 16 * g; i < 16 * g + 16; i++) s += v[i] * qb[i];
                A += (int32_t)sc[g] * (s - 32 * sb[g]);
            }
            const float dd = rd_f16(blk + 208) * dx[b];
            p = dd * (float)A;
        }
        lane[b & 7] += p;
    }
    return gt_lane_tree8(lane);
}

float gt_scalar_dot_q(uint32_t type, const void *row, const void *xq, int64_t n) {
    const uint8_t *w = (const uint8_t *)row;
    switch (type) {
    case GT_TYPE_Q4_0: case GT_TYPE_Q4_1: case GT_TYPE_Q5_0: case GT_TYPE_Q5_1:
    case GT_TYPE_Q8_0: case GT_TYPE_IQ4_NL:
        return dot_q_32(type, w, (const uint8_t *)xq, n);
    case GT_TYPE_Q2_K: case GT_TYPE_Q3_K: case GT_TYPE_Q4_K: case GT_TYPE_Q5_K:
    case GT_TYPE_Q6_K: case GT_TYPE_IQ4_XS:
        return dot_q_k(type, w, (const uint8_t *)xq, n);
    default:
        return 0.0f;
    }
}

void gt_scalar_matmul_q(uint32_t type, const void *w, size_t row_bytes, int64_t n_in, int64_t r0,
                        int64_t r1, const void *xq, size_t xq_stride, int64_t n_tok, float *y,
                        int64_t ldy) {
    const uint8_t *base = (const uint8_t *)w;
    const uint8_t *xb = (const uint8_t *)xq;
    for (int64_t r = r0; r < r1; r++) {
        for (int64_t t = 0; t < n_tok; t++) {
            y[t * ldy + r] = gt_scalar_dot_q(type, base + (size_t)r * row_bytes,
                                             xb + (size_t)t * xq_stride, n_in);
        }
    }
}
