// 8-bit activations as cpu_scalar makes them (act_quant.c), one block at a time, shared by
// quant.comp (into the activation scratch) and matvec.comp (into shared memory). The includer
// defines act_x(i) (float activation i of the rows, row after row), aq_put(word index, word)
// and ad_put(block index, scale); f16.glsl and exact.glsl come first.
// fmt 0, blocks of 32 (Q4_0, Q4_1, Q5_0, Q8_0 weights): d = amax / 127 kept as f16,
// q = round(x / d) (half away from zero), clamped to +-127. fmt 1, blocks of 256 (Q4_K, Q6_K):
// iscale = -127 / (the value of largest magnitude), d = 1 / iscale kept as float,
// q = round-half-even(iscale * x) clamped to [-128, 127].
#ifndef GEIST_ACTQ_GLSL
#define GEIST_ACTQ_GLSL
float round_away(float v) {
    float a = abs(v), f = floor(a);
    if (a - f >= 0.5) f += 1.0;
    return v < 0.0 ? -f : f;
}
// the block of 32 values from activation x0: 8 words from word index wi, its scale at block index bi
void actq32(uint x0, uint wi, uint bi) {
    float amax = 0.0;
    for (uint i = 0u; i < 32u; i++) amax = max(amax, abs(act_x(x0 + i)));
    float d = fdiv_rn(amax, 127.0);
    float id = d != 0.0 ? fdiv_rn(1.0, d) : 0.0;
    for (uint w = 0u; w < 8u; w++) {
        uint word = 0u;
        for (uint k = 0u; k < 4u; k++) {
            float r = clamp(round_away(act_x(x0 + 4u * w + k) * id), -127.0, 127.0);
            word |= (uint(int(r)) & 0xFFu) << (8u * k);
        }
        aq_put(wi + w, word);
    }
    ad_put(bi, f16_round(d));
}
// the block of 256 values from activation x0: 64 words from wi, its scale at bi
void actq256(uint x0, uint wi, uint bi) {
    float amax = 0.0, maxv = 0.0;
    for (uint i = 0u; i < 256u; i++) {
        float v = act_x(x0 + i), a = abs(v);
        if (a > amax) {
            amax = a;
            maxv = v;
        }
    }
    float iscale = amax != 0.0 ? fdiv_rn(-127.0, maxv) : 0.0;
    for (uint w = 0u; w < 64u; w++) {
        uint word = 0u;
        for (uint k = 0u; k < 4u; k++) {
            precise float v = iscale * act_x(x0 + 4u * w + k);
            float r = clamp(roundEven(v), -128.0, 127.0);
            word |= (uint(int(r)) & 0xFFu) << (8u * k);
        }
        aq_put(wi + w, word);
    }
    ad_put(bi, amax != 0.0 ? fdiv_rn(1.0, iscale) : 0.0);
}
#endif
