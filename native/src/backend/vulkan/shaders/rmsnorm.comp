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
shared vec2 red[64];
// Float-float (hi, lo) arithmetic: the sum of squares and the scale carried to ~44 bits, so the
// float scale is the correctly rounded one, as session/forward.c's rmsnorm (double) gets it.
// Products split exactly (exact.glsl): no trust in the driver's fma().
vec2 ff_add(vec2 a, vec2 b) {
    vec2 s = two_sum(a.x, b.x);
    precise float lo = s.y + a.y + b.y;
    return two_sum(s.x, lo);
}
vec2 ff_mul(vec2 a, vec2 b) {
    vec2 p = two_prod(a.x, b.x);
    precise float lo = p.y + (a.x * b.y + a.y * b.x);
    return two_sum(p.x, lo);
}
vec2 ff_sq(float x) { return two_prod(x, x); }
void main() {
    uint k = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x;
    uint src = p.gather != 0u ? IN[p.gather_at + k] : k;
    vec2 s = vec2(0.0);
    for (uint i = lid; i < p.n; i += 64u) s = ff_add(s, ff_sq(X[src * p.n + i]));
    red[lid] = s;
    barrier();
    for (uint h = 32u; h > 0u; h >>= 1) {
        if (lid < h) red[lid] = ff_add(red[lid], red[lid + h]);
        barrier();
    }
    // m = ss / n + eps; y = 1 / sqrt(m) by one Newton step in float-float from the float guess
    vec2 ss = red[0];
    float fn = float(p.n);
    precise float q0 = ss.x / fn;
    vec2 r = ff_add(ss, ff_mul(vec2(-q0, 0.0), vec2(fn, 0.0))); // ss - q0 * n
    precise float q1 = (r.x + r.y) / fn;
    vec2 m = ff_add(two_sum(q0, q1), vec2(p.eps, 0.0));
    float y0 = 1.0 / sqrt(m.x);
    vec2 y = vec2(y0, 0.0);
    for (int it = 0; it < 2; it++) {
        // y += y * (1 - m y^2) / 2
        vec2 t = ff_mul(m, ff_mul(y, y));
        vec2 e = ff_add(vec2(1.0, 0.0), vec2(-t.x, -t.y));
        vec2 c = ff_mul(y, e);
        y = ff_add(y, vec2(0.5 * c.x, 0.5 * c.y));
    }
    precise float scale = y.x + y.y;
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
