// The RMSNorm scale 1 / sqrt(mean(x^2) + eps) of a row, shared by rmsnorm.comp and matvec.comp
// (bit 4): over a workgroup of 64 lanes (lane lid of 64), the row's n floats at X[x0]; every lane
// gets the scale. Float-float (hi, lo) arithmetic: the sum of squares and the scale carried to
// ~44 bits, so the float scale is the correctly rounded one, as session/forward.c's rmsnorm
// (double) gets it. Products split exactly (exact.glsl): no trust in the driver's fma(). Needs
// exact.glsl; rms_scale X[] (rms_finish: the lanes' own sums, attn_body.glsl's QK norm).
#ifndef GEIST_RMSSCALE_GLSL
#define GEIST_RMSSCALE_GLSL
shared vec2 nred[64];
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
// the scale from each lane's float-float sum of its squares (values lid, lid + 64, ... in order)
float rms_finish(vec2 s, uint n, float eps, uint lid) {
    nred[lid] = s;
    barrier();
    for (uint h = 32u; h > 0u; h >>= 1) {
        if (lid < h) nred[lid] = ff_add(nred[lid], nred[lid + h]);
        barrier();
    }
    // m = ss / n + eps; y = 1 / sqrt(m) by one Newton step in float-float from the float guess
    vec2 ss = nred[0];
    barrier(); // every lane has read it: the next row may reuse nred
    float fn = float(n);
    precise float q0 = ss.x / fn;
    vec2 r = ff_add(ss, ff_mul(vec2(-q0, 0.0), vec2(fn, 0.0))); // ss - q0 * n
    precise float q1 = (r.x + r.y) / fn;
    vec2 m = ff_add(two_sum(q0, q1), vec2(eps, 0.0));
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
    return scale;
}
#ifndef RMS_FINISH_ONLY
// the lane's values loaded 8 at once, then summed in order (a load and its use in one loop step
// waited the memory's latency every step: a decode step's norms are one workgroup's chain)
float rms_scale(uint x0, uint n, float eps, uint lid) {
    vec2 s = vec2(0.0);
    for (uint i0 = lid; i0 < n; i0 += 512u) {
        float v[8];
        for (uint u = 0u; u < 8u; u++) v[u] = X[x0 + min(i0 + 64u * u, n - 1u)];
        for (uint u = 0u; u < 8u; u++)
            if (i0 + 64u * u < n) s = ff_add(s, ff_sq(v[u]));
    }
    return rms_finish(s, n, eps, lid);
}
#endif
#endif
