#version 450
#extension GL_GOOGLE_include_directive : require
// gate = act(gate) * up, elementwise over n values, as vmath.c's gated_plain: x / (1 + e^-z) * u
// with z = x (SiLU) or, gelu != 0, z = 2 sqrt(2/pi) (x + 0.044715 x^3) (the tanh form of GELU,
// in the CPU's order), e^x by gt_vexp1's steps (util/vexp_x86.h), the division correctly
// rounded: the bits agree with cpu_scalar's. pair != 0: U holds rows [gate | up] of 2 pair
// values (gate and up made by one product, vk_forward.c's fused FFN) and value i of the result,
// row i / pair, goes to G[i] (G not read).
layout(local_size_x = 64) in;
layout(std430, binding = 2) readonly buffer Ub { float U[]; };
layout(std430, binding = 3) buffer Gb { float G[]; };
layout(push_constant) uniform P { uint n, gelu, pair; } p;
#include "vexp.glsl"
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= p.n) return;
    float x, u;
    if (p.pair != 0u) {
        uint o = i + (i / p.pair) * p.pair; // row i / pair's gate, then its up pair values on
        x = U[o];
        u = U[o + p.pair];
    } else {
        x = G[i];
        u = U[i];
    }
    precise float z = x;
    if (p.gelu != 0u) {
        precise float c = 0.044715 * x * x * x;
        precise float xc = x + c;
        z = 1.5957691216057308 * xc;
    }
    precise float den = 1.0 + vexp1(0.0 - z);
    precise float y = fdiv_rn(x, den) * u;
    G[i] = y;
}
