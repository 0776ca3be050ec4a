#version 450
#extension GL_GOOGLE_include_directive : require
// Causal attention of one session's rows [row0, row0 + n) over its cache: one workgroup per
// (row, query head): scores over positions 0..pos into S (scratch), softmax (scaled; max; exp;
// sum), then the weighted sum of V rows. GQA: query head h reads KV head h / (n_head / n_head_kv).
layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 2) readonly buffer Qb { float Q[]; };
layout(std430, binding = 3) writeonly buffer Ob { float O[]; };
layout(std430, binding = 5) coherent buffer Sb { float S[]; };
layout(std430, binding = 6) readonly buffer KVb { uint KV[]; };
layout(push_constant) uniform P {
    uint row0, n_head, n_head_kv, hk, hv, k_at, v_at, mode, s_stride;
    float scale;
} p;
shared float red[64];
#include "vexp.glsl"
float kv_at(uint word0, uint i) {
    if (p.mode == 1u) return unpackHalf2x16(KV[word0 + (i >> 1)])[i & 1u];
    return uintBitsToFloat(KV[word0 + i]);
}
// session/kv.c's arithmetic on the plain path: q.k in 8 lanes reduced as reduce8, then the tail;
// INT8 caches (mode 2): per row and KV head an f32 scale and int8 codes, q.k summed in channel
// order then scaled, as kv.c. F16 caches: softmax_f16_plain (e^x by gt_vexp1, the sum in 8
// lanes by position); F32 and INT8: e^x by
// exp and the same lanes (kv.c sums in double there: rounding apart); out += w * v in position
// order; no fused multiply-adds anywhere.
void main() {
    uint t = p.row0 + gl_WorkGroupID.x / p.n_head, h = gl_WorkGroupID.x % p.n_head;
    uint lid = gl_LocalInvocationID.x;
    uint pos = IN[4u * t + 1u];
    uint n_ctx = pos + 1u;
    uint g = h / (p.n_head / p.n_head_kv);
    uint kd = p.n_head_kv * p.hk, vd = p.n_head_kv * p.hv;
    uint qb = (t * p.n_head + h) * p.hk;
    uint sb = (p.row0 * p.n_head + gl_WorkGroupID.x) * p.s_stride; // the row's own scores: sessions
    // of one step may run at once (vk_forward.c puts no barrier between their dispatches)
    float mx = -1.0 / 0.0;
    uint n8 = p.hk / 8u * 8u;
    uint kw8 = p.n_head_kv * (1u + p.hk / 4u), vw8 = p.n_head_kv * (1u + p.hv / 4u);
    for (uint j = lid; j < n_ctx; j += 64u) {
        if (p.mode == 2u) { // INT8: one sum in channel order, times the row's scale (kv.c)
            uint r0 = p.k_at + j * kw8 + g * (1u + p.hk / 4u);
            precise float acc = 0.0;
            for (uint i = 0u; i < p.hk; i++) {
                int cd = int(KV[r0 + 1u + (i >> 2)] << (24u - 8u * (i & 3u))) >> 24;
                precise float pr = Q[qb + i] * float(cd);
                acc = acc + pr;
            }
            precise float dt = acc * uintBitsToFloat(KV[r0]);
            precise float sc8 = dt * p.scale;
            S[sb + j] = sc8;
            mx = max(mx, sc8);
            continue;
        }
        uint kb = p.k_at;
        uint ro = j * kd + g * p.hk;
        float l[8];
        for (uint k = 0u; k < 8u; k++) l[k] = 0.0;
        for (uint i = 0u; i < n8; i += 8u)
            for (uint k = 0u; k < 8u; k++) {
                precise float pr = Q[qb + i + k] * kv_at(kb, ro + i + k);
                precise float sm = l[k] + pr;
                l[k] = sm;
            }
        precise float t0 = l[0] + l[4], t1 = l[1] + l[5], t2 = l[2] + l[6], t3 = l[3] + l[7];
        precise float s = (t0 + t2) + (t1 + t3);
        for (uint i = n8; i < p.hk; i++) {
            precise float pr = Q[qb + i] * kv_at(kb, ro + i);
            s = s + pr;
        }
        precise float sc = s * p.scale;
        S[sb + j] = sc;
        mx = max(mx, sc);
    }
    red[lid] = mx;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (lid < k) red[lid] = max(red[lid], red[lid + k]);
        barrier();
    }
    mx = red[0];
    memoryBarrierBuffer();
    barrier();
    if (lid < 8u) { // lane lid: positions lid, lid + 8, ... in order
        precise float sum = 0.0;
        for (uint j = lid; j < n_ctx; j += 8u) {
            precise float x = S[sb + j] - mx;
            float e = p.mode == 1u ? vexp1(x) : exp(x);
            S[sb + j] = e;
            sum = sum + e;
        }
        red[lid] = sum;
    }
    memoryBarrierBuffer();
    barrier();
    precise float tot = ((red[0] + red[1]) + (red[2] + red[3])) + ((red[4] + red[5]) + (red[6] + red[7]));
    float inv = fdiv_rn(1.0, tot);
    for (uint i = lid; i < p.hv; i += 64u) {
        precise float o = 0.0;
        if (p.mode == 2u) {
            for (uint j = 0u; j < n_ctx; j++) {
                uint r0 = p.v_at + j * vw8 + g * (1u + p.hv / 4u);
                precise float w = S[sb + j] * inv;
                precise float ws = w * uintBitsToFloat(KV[r0]);
                int cd = int(KV[r0 + 1u + (i >> 2)] << (24u - 8u * (i & 3u))) >> 24;
                precise float pr = ws * float(cd);
                o = o + pr;
            }
            O[(t * p.n_head + h) * p.hv + i] = o;
            continue;
        }
        for (uint j = 0u; j < n_ctx; j++) {
            precise float w = S[sb + j] * inv;
            precise float pr = w * kv_at(p.v_at, j * vd + g * p.hv + i);
            o = o + pr;
        }
        O[(t * p.n_head + h) * p.hv + i] = o;
    }
}
