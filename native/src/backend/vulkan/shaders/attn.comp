#version 450
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
    uint row0, n_head, n_head_kv, hk, hv, k_at, v_at, f16, s_stride;
    float scale;
} p;
shared float red[64];
float kv_at(uint word0, uint i) {
    if (p.f16 != 0u) return unpackHalf2x16(KV[word0 + (i >> 1)])[i & 1u];
    return uintBitsToFloat(KV[word0 + i]);
}
void main() {
    uint t = p.row0 + gl_WorkGroupID.x / p.n_head, h = gl_WorkGroupID.x % p.n_head;
    uint lid = gl_LocalInvocationID.x;
    uint pos = IN[4u * t + 1u];
    uint n_ctx = pos + 1u;
    uint g = h / (p.n_head / p.n_head_kv);
    uint kd = p.n_head_kv * p.hk, vd = p.n_head_kv * p.hv;
    uint qb = (t * p.n_head + h) * p.hk;
    uint sb = gl_WorkGroupID.x * p.s_stride;
    float mx = -1.0 / 0.0;
    for (uint j = lid; j < n_ctx; j += 64u) {
        uint kb = j * kd + g * p.hk;
        float s = 0.0;
        for (uint i = 0u; i < p.hk; i++) s += Q[qb + i] * kv_at(p.k_at, kb + i);
        s *= p.scale;
        S[sb + j] = s;
        mx = max(mx, s);
    }
    red[lid] = mx;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (lid < k) red[lid] = max(red[lid], red[lid + k]);
        barrier();
    }
    mx = red[0];
    barrier();
    float sum = 0.0;
    for (uint j = lid; j < n_ctx; j += 64u) {
        float e = exp(S[sb + j] - mx);
        S[sb + j] = e;
        sum += e;
    }
    red[lid] = sum;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (lid < k) red[lid] += red[lid + k];
        barrier();
    }
    float inv = 1.0 / red[0];
    memoryBarrierBuffer();
    barrier();
    for (uint i = lid; i < p.hv; i += 64u) {
        float o = 0.0;
        for (uint j = 0u; j < n_ctx; j++) o += (S[sb + j] * inv) * kv_at(p.v_at, j * vd + g * p.hv + i);
        O[(t * p.n_head + h) * p.hv + i] = o;
    }
}
