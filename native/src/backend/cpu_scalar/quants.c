/* cpu_scalar dequantize and dot kernels.
 *
 * Block layouts are the GGML formats (facts of the file format). Every multi-byte field is read
 * byte by byte as little-endian, so blocks may sit at any address (GGUF only aligns the tensor,
 * and blocks of 18/20/22/34/210 bytes are unaligned inside it) and the host's byte order does not
 * matter. The arithmetic is plain float with one operation per statement: this file is built with
 * -std=c17 (no FP contraction in GCC) and separate statements keep clang from fusing multiply-add,
 * so the results equal the gguf Python package's numpy dequantization bit for bit. */
#include "backend/cpu_scalar/quants.h"

#include <string.h>

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
    const float s01 = lane[0] + lane[1];
    const float s23 = lane[2] + lane[3];
    const float s45 = lane[4] + lane[5];
    const float s67 = lane[6] + lane[7];
    const float s03 = s01 + s23;
    const float s47 = s45 + s67;
    return s03 + s47;
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
    if (type == GT_TYPE_F16) {
        float buf[RUN];
        double acc = 0.0;
        for (int64_t i = 0; i < n; i += RUN) {
            const int len = (int)(n - i < RUN ? n - i : RUN);
            for (int k = 0; k < len; k++) buf[k] = rd_f16(s + 2 * (i + k));
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
