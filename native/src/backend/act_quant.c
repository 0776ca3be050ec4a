#include "act_quant.h"

#include <math.h>

#include "../util/ggml_types.h"
#include "../util/util.h"

gt_act_format gt_act_format_for(uint32_t weight_type) {
    switch (weight_type) {
    case GT_TYPE_Q4_0: case GT_TYPE_Q4_1: case GT_TYPE_Q5_0: case GT_TYPE_Q8_0:
        return GT_ACTF_Q8_32;
    case GT_TYPE_Q4_K: case GT_TYPE_Q6_K:
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
