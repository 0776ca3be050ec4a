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
#include "clock.glsl"
void main() {
    uint k = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x;
    clock_start();
    clock_mark(0xE0u);
    uint src = p.gather != 0u ? IN[p.gather_at + k] : k;
    float scale = rms_scale(src * p.n, p.n, p.eps, lid);
    clock_mark(0xE1u); // the scale
    // 4 values a lane loaded at once, then written (as rms_scale's loads: not a chain of waits)
    for (uint i0 = lid; i0 < p.n; i0 += 256u) {
        float xv[4], wv[4], yv[4];
        for (uint u = 0u; u < 4u; u++) {
            uint i = min(i0 + 64u * u, p.n - 1u);
            xv[u] = X[src * p.n + i];
            wv[u] = NW[p.w_off + i];
            yv[u] = p.acc != 0u ? Y[k * p.n + i] : 0.0;
        }
        for (uint u = 0u; u < 4u; u++) {
            uint i = i0 + 64u * u;
            if (i >= p.n) break;
            precise float v = xv[u] * scale;
            precise float o = v * wv[u];
            if (p.acc != 0u) {
                precise float r = yv[u] + o;
                Y[k * p.n + i] = r;
            } else {
                Y[k * p.n + i] = o;
            }
        }
    }
    clock_mark(0xE4u); // written (lane 0's)
}
