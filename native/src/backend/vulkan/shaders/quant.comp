#version 450
#extension GL_GOOGLE_include_directive : require
// 8-bit activations as cpu_scalar makes them (act_quant.c). fmt 0, blocks of 32 (Q4_0, Q4_1,
// Q5_0, Q8_0 weights): d = amax / 127 kept as f16, q = round(x / d) (half away from zero),
// clamped to +-127. fmt 1, blocks of 256 (Q4_K, Q6_K): iscale = -127 / (the value of largest
// magnitude), d = 1 / iscale kept as float, q = round-half-even(iscale * x) clamped to
// [-128, 127]. One invocation per block.
layout(local_size_x = 64) in;
layout(std430, binding = 2) readonly buffer Xb { float X[]; };
layout(std430, binding = 4) writeonly buffer Qb { uint AQ[]; };
layout(std430, binding = 5) writeonly buffer Db { float AD[]; };
layout(push_constant) uniform P { uint n_in, n_blocks, fmt; } p; // n_blocks: rows * n_in / block
#include "f16.glsl"
#include "exact.glsl"
float round_away(float v) {
    float a = abs(v), f = floor(a);
    if (a - f >= 0.5) f += 1.0;
    return v < 0.0 ? -f : f;
}
void main() {
    uint g = gl_GlobalInvocationID.x;
    if (g >= p.n_blocks) return;
    if (p.fmt != 0u) {
        uint x0 = g * 256u;
        float amax = 0.0, maxv = 0.0;
        for (uint i = 0u; i < 256u; i++) {
            float a = abs(X[x0 + i]);
            if (a > amax) {
                amax = a;
                maxv = X[x0 + i];
            }
        }
        float iscale = amax != 0.0 ? fdiv_rn(-127.0, maxv) : 0.0;
        for (uint w = 0u; w < 64u; w++) {
            uint word = 0u;
            for (uint k = 0u; k < 4u; k++) {
                precise float v = iscale * X[x0 + 4u * w + k];
                float r = clamp(roundEven(v), -128.0, 127.0);
                word |= (uint(int(r)) & 0xFFu) << (8u * k);
            }
            AQ[g * 64u + w] = word;
        }
        AD[g] = amax != 0.0 ? fdiv_rn(1.0, iscale) : 0.0;
        return;
    }
    uint x0 = g * 32u; // rows are n_in wide, n_in a multiple of 32: blocks are consecutive
    float amax = 0.0;
    for (uint i = 0u; i < 32u; i++) amax = max(amax, abs(X[x0 + i]));
    float d = fdiv_rn(amax, 127.0);
    float id = d != 0.0 ? fdiv_rn(1.0, d) : 0.0;
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
