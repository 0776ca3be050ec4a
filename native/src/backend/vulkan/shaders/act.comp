#version 450
#extension GL_GOOGLE_include_directive : require
// gate = silu(gate) * up, elementwise over n values, as vmath.c's gated_plain: x / (1 + e^-x) * u
// with e^x by gt_vexp1's steps (util/vexp_x86.h), so the bits agree with cpu_scalar's.
layout(local_size_x = 64) in;
layout(std430, binding = 2) readonly buffer Ub { float U[]; };
layout(std430, binding = 3) buffer Gb { float G[]; };
layout(push_constant) uniform P { uint n; } p;
#include "vexp.glsl"
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= p.n) return;
    float x = G[i];
    precise float den = 1.0 + vexp1(0.0 - x);
    precise float y = fdiv_rn(x, den) * U[i];
    G[i] = y;
}
