// Exactly rounded float steps that do not trust the driver's fma() or division.
// GLSL lets a driver compute fma(a, b, c) unfused and a / b as a * (1 / b): Mesa's llvmpipe (the
// CI's lavapipe) does both on this project's x86 machines (fma(x, y, -x * y) came back 0), so
// cpu_scalar's fused steps (gt_vexp1) and its divisions (the 8-bit activation scale, the SiLU,
// the softmax's 1 / sum) moved by an ulp, enough to move 8-bit activation steps on real models
// (SmolLM2 logits ~5e-2 apart). Products are split exactly (Veltkamp/Dekker) with plain
// multiplies and adds, every step `precise` (no contraction, no reassociation), so the results
// are the same on every IEEE-754 device.
#ifndef GEIST_EXACT_GLSL
#define GEIST_EXACT_GLSL
// a * b = p + e exactly (|a|, |b| well inside the float range)
vec2 two_prod(float a, float b) {
    precise float p = a * b;
    precise float ta = 4097.0 * a;
    precise float ah = ta - (ta - a);
    precise float al = a - ah;
    precise float tb = 4097.0 * b;
    precise float bh = tb - (tb - b);
    precise float bl = b - bh;
    precise float e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    return vec2(p, e);
}
// a + b = s + e exactly
vec2 two_sum(float a, float b) {
    precise float s = a + b;
    precise float bb = s - a;
    precise float e = (a - (s - bb)) + (b - bb);
    return vec2(s, e);
}
// fma(a, b, c) rounded once (but for a double rounding of the two tails: far rarer than 1 in 2^24)
float fma_rn(float a, float b, float c) {
    vec2 p = two_prod(a, b);
    vec2 s = two_sum(p.x, c);
    precise float t = s.y + p.y;
    precise float r = s.x + t;
    return r;
}
// a / b correctly rounded for normal operands: two residual steps (Markstein) on the driver's
// reciprocal, the residuals exact
float fdiv_rn(float a, float b) {
    precise float r = 1.0 / b;
    precise float q = a * r;
    for (int i = 0; i < 2; i++) {
        float e = fma_rn(-q, b, a);
        q = fma_rn(e, r, q);
    }
    return q;
}
#endif
