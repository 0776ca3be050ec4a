#version 450
#extension GL_GOOGLE_include_directive : require
// 8-bit activations as cpu_scalar makes them (act_quant.c; the arithmetic in actq.glsl): fmt 0,
// blocks of 32 (Q4_0, Q4_1, Q5_0, Q8_0 weights), fmt 1, blocks of 256 (Q4_K, Q6_K). One
// workgroup per 64 words (256 values): 8 blocks of fmt 0, one of fmt 1; beyond 65535 workgroups
// they continue in y.
layout(local_size_x = 64) in;
layout(std430, binding = 2) readonly buffer Xb { float X[]; };
layout(std430, binding = 4) writeonly buffer Qb { uint AQ[]; };
layout(std430, binding = 5) writeonly buffer Db { float AD[]; };
layout(push_constant) uniform P { uint n_in, n_blocks, fmt; } p; // n_blocks: rows * n_in / block
#include "f16.glsl"
#include "exact.glsl"
float act_x(uint i) { return X[i]; }
void aq_put(uint w, uint word) { AQ[w] = word; }
void ad_put(uint b, float d) { AD[b] = d; }
#include "actq.glsl"
void main() {
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    // rows are n_in wide, n_in a multiple of the block: blocks, and their words, are consecutive
    uint nw = p.n_blocks * (p.fmt != 0u ? 64u : 8u);
    if (64u * wg >= nw) return; // the whole workgroup: before any barrier
    actq_round(0u, 64u * wg, nw, gl_LocalInvocationID.x, p.fmt != 0u);
}
