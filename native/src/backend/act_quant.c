#include "act_quant.h"

#include <math.h>

#include "../util/ggml_types.h"
#include "../util/util.h"

gt_act_format gt_act_format_for(uint32_t weight_type) {
    switch (weight_type) {
    case GT_TYPE_Q4_0: case GT_TYPE_Q4_1: case GT_TYPE_Q5_0: case GT_TYPE_Q5_1:
    case GT_TYPE_Q8_0: case GT_TYPE_IQ4_NL:
        return GT_ACTF_Q8_32;
    case GT_TYPE_Q2_K: case GT_TYPE_Q3_K: case GT_TYPE_Q4_K: case GT_TYPE_Q5_K:
    case GT_TYPE_Q6_K: case GT_TYPE_IQ4_XS:
        return GT_ACTF_Q8_256;
    default:
        return GT_ACTF_F32;
    }
}

static void round_q8_32(const float *x, float *y) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float dh = gt_f16_to_f32(gt_f32_to_f16(d)); /* the scale is stored as f16 */
    for (int i = 0; i < 32; i++) y[i] = roundf(x[i] * id) * dh;
}

static void round_q8_256(const float *x, float *y) {
    float amax = 0.0f, maxv = 0.0f;
    for (int i = 0; i < 256; i++) {
        const float a = fabsf(x[i]);
        if (a > amax) {
            amax = a;
            maxv = x[i];
        }
    }
    if (amax == 0.0f) {
        for (int i = 0; i < 256; i++) y[i] = 0.0f;
        return;
    }
    const float iscale = -127.0f / maxv;
    const float d = 1.0f / iscale;
    for (int i = 0; i < 256; i++) {
        float q = nearbyintf(iscale * x[i]); /* round half to even */
        if (q > 127.0f) q = 127.0f;
        y[i] = q * d;
    }
}

void gt_round_activations(gt_act_format f, const float *x, float *y, int64_t n) {
    if (f == GT_ACTF_Q8_32) {
        for (int64_t b = 0; b + 32 <= n; b += 32) round_q8_32(x + b, y + b);
    } else if (f == GT_ACTF_Q8_256) {
        for (int64_t b = 0; b + 256 <= n; b += 256) round_q8_256(x + b, y + b);
    } else if (x != y) {
        for (int64_t i = 0; i < n; i++) y[i] = x[i];
    }
}

size_t gt_act_q_row_bytes(gt_act_format f, int64_t n) {
    if (n <= 0) return 0;
    size_t b;
    if (f == GT_ACTF_Q8_32) b = (size_t)n + 4 * (size_t)(n / 32) + 4 * (size_t)(n / 32);
    else if (f == GT_ACTF_Q8_256) b = (size_t)n + 4 * (size_t)(n / 256) + 4 * (size_t)(n / 16);
    else return 0;
    return (b + 63) & ~(size_t)63;
}

/* The same roundings as round_q8_32 / round_q8_256 above, kept as int8 and scale. */
void gt_quantize_act_row(gt_act_format f, const float *x, int64_t n, uint8_t *dst) {
    int8_t *q = (int8_t *)dst;
    float *ds = (float *)(void *)(dst + n);
    if (f == GT_ACTF_Q8_32) {
        int32_t *sums = (int32_t *)(void *)(dst + n + 4 * (n / 32));
        for (int64_t b = 0; b < n / 32; b++) {
            const float *xb = x + 32 * b;
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
            const float d = amax / 127.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            int32_t s = 0;
            for (int i = 0; i < 32; i++) {
                /* |x * id| <= 127 up to rounding; the clamp only guards tiny scales and NaN */
                const float r = fminf(fmaxf(roundf(xb[i] * id), -127.0f), 127.0f);
                const int v = (int)r;
                q[32 * b + i] = (int8_t)v;
                s += v;
            }
            ds[b] = gt_f16_to_f32(gt_f32_to_f16(d));
            sums[b] = s;
        }
    } else if (f == GT_ACTF_Q8_256) {
        int32_t *sums = (int32_t *)(void *)(dst + n + 4 * (n / 256));
        for (int64_t b = 0; b < n / 256; b++) {
            const float *xb = x + 256 * b;
            float amax = 0.0f, maxv = 0.0f;
            for (int i = 0; i < 256; i++) {
                const float a = fabsf(xb[i]);
                if (a > amax) {
                    amax = a;
                    maxv = xb[i];
                }
            }
            if (amax == 0.0f) {
                for (int i = 0; i < 256; i++) q[256 * b + i] = 0;
                for (int g = 0; g < 16; g++) sums[16 * b + g] = 0;
                ds[b] = 0.0f;
                continue;
            }
            const float iscale = -127.0f / maxv;
            ds[b] = 1.0f / iscale;
            for (int g = 0; g < 16; g++) {
                int32_t s = 0;
                for (int i = 16 * g; i < 16 * g + 16; i++) {
                    float v = nearbyintf(iscale * xb[i]);
                    v = fminf(fmaxf(v, -128.0f), 127.0f); /* min 127 as above; NaN guard */
                    q[256 * b + i] = (int8_t)v;
                    s += (int32_t)v;
                }
                sums[16 * b + g] = s;
            }
        }
    }
}
