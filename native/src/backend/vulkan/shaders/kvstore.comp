#version 450
#extension GL_GOOGLE_include_directive : require
// K and V rows of one session's rows [row0, row0 + n) into its cache at their positions: F32 words,
// or F16 pairs. One invocation per pair of values.
layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 2) readonly buffer Kb { float K[]; };
layout(std430, binding = 3) readonly buffer Vb { float V[]; };
layout(std430, binding = 6) buffer KVb { uint KV[]; };
layout(push_constant) uniform P { uint row0, n, kd, vd, k_at, v_at, f16; } p; // *_at: KV words
#include "f16.glsl"
void main() {
    uint per = (p.kd + p.vd) / 2u;
    uint g = gl_GlobalInvocationID.x;
    if (g >= p.n * per) return;
    uint t = p.row0 + g / per, j = g % per;
    uint pos = IN[4u * t + 1u];
    bool isk = j < p.kd / 2u;
    uint e = isk ? 2u * j : 2u * (j - p.kd / 2u);
    uint w = isk ? p.kd : p.vd;
    vec2 v = isk ? vec2(K[t * p.kd + e], K[t * p.kd + e + 1u]) : vec2(V[t * p.vd + e], V[t * p.vd + e + 1u]);
    uint at = isk ? p.k_at : p.v_at;
    if (p.f16 != 0u) {
        KV[at + (pos * w + e) / 2u] = pack_f16x2(v);
    } else {
        KV[at + pos * w + e] = floatBitsToUint(v.x);
        KV[at + pos * w + e + 1u] = floatBitsToUint(v.y);
    }
}
