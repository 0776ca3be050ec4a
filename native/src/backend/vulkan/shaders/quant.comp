#version 450
#extension GL_GOOGLE_include_directive : require
// 8-bit activations as cpu_scalar makes them (act_quant.c, blocks of 32): d = amax / 127 kept as
// f16, q = round(x / d) (half away from zero), clamped to +-127. One invocation per block.
layout(local_size_x = 64) in;
layout(std430, binding = 2) readonly buffer Xb { float X[]; };
layout(std430, binding = 4) writeonly buffer Qb { uint AQ[]; };
layout(std430, binding = 5) writeonly buffer Db { float AD[]; };
layout(push_constant) uniform P { uint n_in, n_blocks; } p; // n_blocks: rows * n_in / 32
#include "f16.glsl"
float round_away(float v) {
    float a = abs(v), f = floor(a);
    if (a - f >= 0.5) f += 1.0;
    return v < 0.0 ? -f : f;
}
void main() {
    uint g = gl_GlobalInvocationID.x;
    if (g >= p.n_blocks) return;
    uint x0 = g * 32u; // rows are n_in wide, n_in a multiple of 32: blocks are consecutive
    float amax = 0.0;
    for (uint i = 0u; i < 32u; i++) amax = max(amax, abs(X[x0 + i]));
    float d = amax / 127.0;
    float id = d != 0.0 ? 1.0 / d : 0.0;
    for (uint w = 0u; w < 8u; w++) {
        uint word = 0u;
        for (uint k = 0u; k < 4u; k++) {
            float r = clamp(round_away(X[x0 + 4u * w + k] * id), -127.0, 127.0);
            word |= (uint(int(r)) & 0xFFu) << (8u * k);
        }
        AQ[g * 8u + w] = word;
    }
    AD[g] = f16_round(d);
}
