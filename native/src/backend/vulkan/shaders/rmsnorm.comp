#version 450
#extension GL_GOOGLE_include_directive : require
// y[k] = x[src(k)] / rms(x[src(k)]) * w, one workgroup per output row of n values (rows of
// d_model, or one head's q / k for the QK norm, in place). gather != 0: src(k) is the k-th row
// asking for logits (IN's list), else src(k) = k. acc != 0: y[k] += that instead (the residual
// of a post-norm: session/forward.c's add_residual rounds the normed row, then adds it).
layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 2) readonly buffer Xb { float X[]; };
layout(std430, binding = 3) buffer Yb { float Y[]; };
layout(std430, binding = 7) readonly buffer Nb { float NW[]; };
layout(push_constant) uniform P { uint n, w_off, gather, gather_at; float eps; uint acc; } p;
#include "exact.glsl"
#include "rmsscale.glsl"
void main() {
    uint k = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x;
    uint src = p.gather != 0u ? IN[p.gather_at + k] : k;
    float scale = rms_scale(src * p.n, p.n, p.eps, lid);
    for (uint i = lid; i < p.n; i += 64u) {
        precise float v = X[src * p.n + i] * scale;
        precise float o = v * NW[p.w_off + i];
        if (p.acc != 0u) {
            precise float r = Y[k * p.n + i] + o;
            Y[k * p.n + i] = r;
        } else {
            Y[k * p.n + i] = o;
        }
    }
}
