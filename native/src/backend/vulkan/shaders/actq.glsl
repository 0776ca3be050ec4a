// 8-bit activations as cpu_scalar makes them (act_quant.c), shared by quant.comp (into the
// activation scratch) and matvec.comp (into shared memory): a round of 64 words (256 values) on
// the workgroup's 64 lanes, lane l quantizing word w0 + l, its 4 values' act_x computed once and
// kept; the block's max by a reduction in shared memory. The includer defines act_x(i) (float
// activation i of the rows, row after row), aq_put(word index, word) and ad_put(block index,
// scale); f16.glsl and exact.glsl come first.
// fmt 0, blocks of 32 (Q4_0, Q4_1, Q5_0, Q8_0 weights), 8 lanes a block, 8 blocks a round:
// d = amax / 127 kept as f16, q = round(x / d) (half away from zero), clamped to +-127. fmt 1,
// blocks of 256 (Q4_K, Q6_K), the round's 64 lanes one block: iscale = -127 / (the value of
// largest magnitude, the first in index order on ties: +-x give opposite signs), d = 1 / iscale
// kept as float, q = round-half-even(iscale * x) clamped to [-128, 127]. The expressions per value
// are act_quant.c's, so the bits are; max() of non-negative finite floats is exact in any order.
#ifndef GEIST_ACTQ_GLSL
#define GEIST_ACTQ_GLSL
// A round's 208 shared floats, ACTQ_SH(i): the includer may define it over shared memory of its
// own that is free while it quantizes (attn_body.glsl: its scores), else they are declared here.
// At 0: the lanes' partial maxima [parity][lane] (fmt 0: by round parity, one barrier a round);
// at 128: fmt 1's values they are of; at 192 and 200: the same for each 8 lanes.
#ifndef ACTQ_SH
shared float aq_sh[208];
#define ACTQ_SH(i) aq_sh[i]
#endif
#define AQ_A(par, l) ACTQ_SH((par) * 64u + (l))
#define AQ_V(l) ACTQ_SH(128u + (l))
#define AQ_GA(g) ACTQ_SH(192u + (g))
#define AQ_GV(g) ACTQ_SH(200u + (g))
float round_away(float v) {
    float a = abs(v), f = floor(a);
    if (a - f >= 0.5) f += 1.0;
    return v < 0.0 ? -f : f;
}
// one round: words w0 + lane of the nw words from activation x0 (words w0.. of whole blocks; w0 a
// multiple of 64), each word's block its index / 8 (fmt 0) or / 64 (fmt 1). Every lane of the
// workgroup calls it together (barriers); lanes past nw only take part, and so do lanes past 64
// of a wider workgroup (attnfast.comp's 128: they write no shared float, read lane & 63's).
void actq_round(uint x0, uint w0, uint nw, uint lane_id, bool k256) {
    uint lane = lane_id & 63u, w = w0 + lane;
    bool own = lane_id < 64u, live = own && w < nw;
    float x[4];
    for (uint k = 0u; k < 4u; k++) x[k] = 0.0;
    if (live)
        for (uint k = 0u; k < 4u; k++) x[k] = act_x(x0 + 4u * w + k);
    uint word = 0u;
    if (!k256) {
        uint par = (w0 >> 6) & 1u, g0 = lane & ~7u;
        float m = 0.0;
        for (uint k = 0u; k < 4u; k++) m = max(m, abs(x[k]));
        if (own) AQ_A(par, lane) = m;
        barrier(); // the next round writes the other half: no barrier after the reads
        float amax = 0.0;
        for (uint j = 0u; j < 8u; j++) amax = max(amax, AQ_A(par, g0 + j));
        float d = fdiv_rn(amax, 127.0);
        float id = d != 0.0 ? fdiv_rn(1.0, d) : 0.0;
        for (uint k = 0u; k < 4u; k++) {
            float r = clamp(round_away(x[k] * id), -127.0, 127.0);
            word |= (uint(int(r)) & 0xFFu) << (8u * k);
        }
        if (live) {
            aq_put(w, word);
            if (lane == g0) ad_put(w >> 3, f16_round(d));
        }
        return;
    }
    // (magnitude, value) folded in index order, a later one taken only when strictly larger
    float a = 0.0, v = 0.0;
    for (uint k = 0u; k < 4u; k++) {
        float ak = abs(x[k]);
        if (ak > a) {
            a = ak;
            v = x[k];
        }
    }
    if (own) {
        AQ_A(0u, lane) = a;
        AQ_V(lane) = v;
    }
    barrier();
    if (own && (lane & 7u) == 0u) {
        for (uint j = 1u; j < 8u; j++) {
            float aj = AQ_A(0u, lane + j);
            if (aj > a) {
                a = aj;
                v = AQ_V(lane + j);
            }
        }
        AQ_GA(lane >> 3) = a;
        AQ_GV(lane >> 3) = v;
    }
    barrier(); // the next round writes these floats after every lane's reads here
    float amax = 0.0, maxv = 0.0;
    for (uint j = 0u; j < 8u; j++) {
        float aj = AQ_GA(j);
        if (aj > amax) {
            amax = aj;
            maxv = AQ_GV(j);
        }
    }
    float iscale = amax != 0.0 ? fdiv_rn(-127.0, maxv) : 0.0;
    for (uint k = 0u; k < 4u; k++) {
        precise float q = iscale * x[k];
        float r = clamp(roundEven(q), -128.0, 127.0);
        word |= (uint(int(r)) & 0xFFu) << (8u * k);
    }
    if (live) {
        aq_put(w, word);
        if (lane == 0u) ad_put(w >> 6, amax != 0.0 ? fdiv_rn(1.0, iscale) : 0.0);
    }
}
#endif
