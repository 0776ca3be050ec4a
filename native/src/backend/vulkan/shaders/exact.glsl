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
// 2^k for -126 <= k <= 127, exactly
float pow2i(int k) { return uintBitsToFloat(uint(k + 127) << 23); }
// a / b correctly rounded for normal operands and a normal quotient: both scaled into [1, 2) by
// powers of two (exact; unscaled, a huge b overflowed two_prod's split into NaN: Gemma 3's GELU
// divides by 1 + e^88), two residual steps (Markstein) on the driver's reciprocal, the residuals
// exact, the quotient scaled back (exact). Zeros, infinities, NaNs and subnormals: the driver's.
float fdiv_rn(float a, float b) {
    int ea = int((floatBitsToUint(a) >> 23) & 255u), eb = int((floatBitsToUint(b) >> 23) & 255u);
    if (ea == 0 || eb == 0 || ea == 255 || eb == 255) {
        precise float d = a / b;
        return d;
    }
    precise float sa = a * pow2i(127 - ea);
    precise float sb = b * pow2i(127 - eb);
    precise float r = 1.0 / sb;
    precise float q = sa * r;
    for (int i = 0; i < 2; i++) {
        float e = fma_rn(-q, sb, sa);
        q = fma_rn(e, r, q);
    }
    int k = ea - eb; // q in (0.5, 2): q 2^k, in two steps where 2^k is not a normal float
    if (k > 127) {
        q = q * pow2i(127);
        k -= 127;
    } else if (k < -126) {
        q = q * pow2i(-126);
        k += 126;
    }
    precise float res = q * pow2i(k < -126 ? -126 : k);
    return res;
}
#endif
