/* Shared by the cpu_neon kernel files (neon_plain.c, neon_dotprod.c, neon_i8mm.c, each built for
 * its own ISA level, SConstruct) and backend_neon.c: block unpacking and the canonical float
 * combination of cpu_scalar/quants.c. aarch64 only. */
#ifndef GEIST_CPU_NEON_COMMON_H
#define GEIST_CPU_NEON_COMMON_H

#include <stdint.h>
#include <string.h>

#include "backend/act_quant.h"
#include "backend/backend.h"
#include "backend/cpu_scalar/quants.h"
#include "util/ggml_types.h"
#include "util/util.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#define NQ_CH 2048 /* values of a row unpacked at a time (a multiple of 256) */
#define NQ_TT 16   /* tokens per tile */

/* matmul_q of each variant (backend.h's signature) */
void gt_neon_plain_matmul_q(const gt_weight *w, const void *xq, int64_t n_tok, float *y,
                            int64_t ldy, int64_t r0, int64_t r1);
void gt_neon_dotprod_matmul_q(const gt_weight *w, const void *xq, int64_t n_tok, float *y,
                              int64_t ldy, int64_t r0, int64_t r1);
void gt_neon_i8mm_matmul_q(const gt_weight *w, const void *xq, int64_t n_tok, float *y,
                           int64_t ldy, int64_t r0, int64_t r1);

static inline float nq_f16(const uint8_t *p) { return gt_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

static inline int nq_kquant(uint32_t type) { return type == GT_TYPE_Q4_K || type == GT_TYPE_Q6_K; }

/* the types these kernels unpack; the others (Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K, IQ4_XS) take
 * cpu_scalar's canonical product, which is bit-identical by definition */
static inline int nq_has(uint32_t type) {
    return type == GT_TYPE_Q4_0 || type == GT_TYPE_Q4_1 || type == GT_TYPE_Q5_0 ||
           type == GT_TYPE_Q8_0 || nq_kquant(type);
}

static inline int nq_block_bytes(uint32_t type) {
    switch (type) {
    case GT_TYPE_Q4_0: return 18;
    case GT_TYPE_Q4_1: return 20;
    case GT_TYPE_Q5_0: return 22;
    case GT_TYPE_Q8_0: return 34;
    case GT_TYPE_Q4_K: return 144;
    default: return 210; /* Q6_K */
    }
}

/* Q4_K's 6-bit scale and min of sub-block j (the layout of cpu_scalar/quants.c) */
static inline void nq_q4k_sm(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* The stored values of nb blocks (starting at blk) as int8, in element order: nibbles 0..15,
 * Q5_0 0..31, Q8_0 as stored, Q4_K 0..15, Q6_K 0..63 (offsets are applied through the
 * activation sums, as cpu_scalar does). */
static inline void nq_unpack(uint32_t type, const uint8_t *blk, int nb, int8_t *v) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int bytes = nq_block_bytes(type);
    for (int b = 0; b < nb; b++, blk += bytes) {
        switch (type) {
        case GT_TYPE_Q4_0: case GT_TYPE_Q4_1: {
            const uint8x16_t q = vld1q_u8(blk + (type == GT_TYPE_Q4_0 ? 2 : 4));
            vst1q_s8(v, vreinterpretq_s8_u8(vandq_u8(q, m4)));
            vst1q_s8(v + 16, vreinterpretq_s8_u8(vshrq_n_u8(q, 4)));
            v += 32;
            break;
        }
        case GT_TYPE_Q5_0: {
            static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
            const uint8x16_t sel = vld1q_u8(bit), b5 = vdupq_n_u8(0x10);
            const uint8_t *h = blk + 2; /* qh, little-endian: bit i = element i */
            const uint8x16_t hl = vcombine_u8(vdup_n_u8(h[0]), vdup_n_u8(h[1]));
            const uint8x16_t hh = vcombine_u8(vdup_n_u8(h[2]), vdup_n_u8(h[3]));
            const uint8x16_t q = vld1q_u8(blk + 6);
            const uint8x16_t lo = vorrq_u8(vandq_u8(q, m4), vandq_u8(vtstq_u8(hl, sel), b5));
            const uint8x16_t hi = vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(vtstq_u8(hh, sel), b5));
            vst1q_s8(v, vreinterpretq_s8_u8(lo));
            vst1q_s8(v + 16, vreinterpretq_s8_u8(hi));
            v += 32;
            break;
        }
        case GT_TYPE_Q8_0:
            memcpy(v, blk + 2, 32);
            v += 32;
            break;
        case GT_TYPE_Q4_K:
            for (int g = 0; g < 4; g++) {
                const uint8_t *q = blk + 16 + 32 * g;
                for (int k = 0; k < 32; k += 16) {
                    const uint8x16_t x = vld1q_u8(q + k);
                    vst1q_s8(v + 64 * g + k, vreinterpretq_s8_u8(vandq_u8(x, m4)));
                    vst1q_s8(v + 64 * g + 32 + k, vreinterpretq_s8_u8(vshrq_n_u8(x, 4)));
                }
            }
            v += 256;
            break;
        default: { /* Q6_K */
            const uint8x16_t m2 = vdupq_n_u8(0x03);
            for (int h = 0; h < 2; h++) {
                for (int l = 0; l < 32; l += 16) {
                    const uint8x16_t L0 = vld1q_u8(blk + 64 * h + l);
                    const uint8x16_t L1 = vld1q_u8(blk + 64 * h + 32 + l);
                    const uint8x16_t H = vld1q_u8(blk + 128 + 32 * h + l);
                    int8_t *o = v + 128 * h + l;
                    vst1q_s8(o, vreinterpretq_s8_u8(vorrq_u8(vandq_u8(L0, m4),
                                                             vshlq_n_u8(vandq_u8(H, m2), 4))));
                    vst1q_s8(o + 32, vreinterpretq_s8_u8(vorrq_u8(
                                         vandq_u8(L1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(H, 2), m2), 4))));
                    vst1q_s8(o + 64, vreinterpretq_s8_u8(vorrq_u8(
                                         vshrq_n_u8(L0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(H, 4), m2), 4))));
                    vst1q_s8(o + 96, vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(L1, 4),
                                                                  vshlq_n_u8(vshrq_n_u8(H, 6), 4))));
                }
            }
            v += 256;
            break;
        }
        }
    }
}

/* One block's float term p of the canonical arithmetic (cpu_scalar/quants.c), from the exact
 * sums over each 16 values of stored value times activation (gs: 2 for a 32-block, 16 for a
 * super-block). xq: the activation row of n values; b: the block's index in the row. */
static inline float nq_block_p(uint32_t type, const uint8_t *blk, const int32_t *gs,
                               const uint8_t *xq, int64_t n, int64_t b) {
    const float dx = gt_act_q_scales(xq, n)[b];
    if (!nq_kquant(type)) {
        const int32_t sx = gt_act_q_sums(xq, n, 32)[b];
        const int32_t dot = gs[0] + gs[1];
        const float dd = nq_f16(blk) * dx;
        if (type == GT_TYPE_Q4_1) {
            const float md = nq_f16(blk + 2) * dx;
            const float p1 = dd * (float)dot;
            const float p2 = md * (float)sx;
            return p1 + p2;
        }
        const int32_t isum = type == GT_TYPE_Q4_0 ? dot - 8 * sx
                           : type == GT_TYPE_Q5_0 ? dot - 16 * sx : dot;
        return dd * (float)isum;
    }
    const int32_t *sb = gt_act_q_sums(xq, n, 256) + 16 * b;
    if (type == GT_TYPE_Q4_K) {
        int32_t A = 0, B = 0;
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            nq_q4k_sm(blk + 4, j, &sc, &mn);
            A += sc * (gs[2 * j] + gs[2 * j + 1]);
            B += mn * (sb[2 * j] + sb[2 * j + 1]);
        }
        const float dd = nq_f16(blk) * dx;
        const float dm = nq_f16(blk + 2) * dx;
        const float p1 = dd * (float)A;
        const float p2 = dm * (float)B;
        return p1 - p2;
    }
    const int8_t *sc = (const int8_t *)(blk + 192); /* Q6_K */
    int32_t A = 0;
    for (int g = 0; g < 16; g++) A += (int32_t)sc[g] * (gs[g] - 32 * sb[g]);
    const float dd = nq_f16(blk + 208) * dx;
    return dd * (float)A;
}

#endif /* __aarch64__ */
#endif
