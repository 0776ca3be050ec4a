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
// Where the device's fma() rounds once (vk_forward.c's probe_fused_fma found so on every test
// pair: NVIDIA's FFMA), the backend sets FMA_EXACT and the steps below take it: the same values
// (an exact product error, a once-rounded fma), ~2 operations where the emulation takes ~20.
layout(constant_id = 14) const bool FMA_EXACT = false;
// a * b = p + e exactly (|a|, |b| well inside the float range)
vec2 two_prod(float a, float b) {
    precise float p = a * b;
    if (FMA_EXACT) {
        precise float e = fma(a, b, -p);
        return vec2(p, e);
    }
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
    if (FMA_EXACT) {
        precise float r = fma(a, b, c);
        return r;
    }
    vec2 p = two_prod(a, b);
    vec2 s = two_sum(p.x, c);
    precise float t = s.y + p.y;
    precise float r = s.x + t;
    return r;
}
// 2^k for -126 <= k <= 127, exactly
float pow2i(int k) { return uintBitsToFloat(uint(k + 127) << 23); }
// a / b correctly rounded for normal operands: a guess at the quotient of the two mantissas (the
// driver's reciprocal: Vulkan allows it 2.5 units in the last place off) moved to the nearest by
// its exact integer residual.
// ma / mb (the mantissas with their hidden bits, in [2^23, 2^24)) is M 2^-(23 + s) with M in
// [2^23, 2^24], s = 1 where ma < mb; for a guess m a few units from M the residual
// ma 2^(23 + s) - m mb is a few mb < 2^27, so the low 32 bits of uint arithmetic (which wraps)
// are it. A tie (the residual exactly +-mb / 2, ma 2^(24 + s) = (2m +- 1) mb) cannot happen:
// 2m +- 1, odd and at least 2^24 - 1, would divide ma < 2^24 (only ma = 2^24 - 1 with mb = 2^23,
// and then no integer m does). About 20 dependent integer and float steps where two
// Markstein steps on emulated fused multiply-adds took ~70. A quotient past the normal range is
// m 2^-23 scaled by 2^k in two steps (exact but for the last rounding). Zeros, infinities, NaNs
// and subnormal operands: the driver's.
// For tests only (native/tests/test_vk_actq.c): a division whose guesses are exact (lavapipe's)
// never runs the corrections, so a test pipeline sets bit 0 (the guess pushed up to 3 units off)
// or bit 1 (the estimate of those units off by one, for the last step, unless the quotient lies
// near a half-unit, where that step alone could not make up for it). The backend's pipelines
// leave it 0, which the driver folds away.
layout(constant_id = 15) const uint FDIV_GUESS_OFF = 0u;
float fdiv_rn(float a, float b) {
    uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    int ea = int((ua >> 23) & 255u), eb = int((ub >> 23) & 255u);
    if (ea == 0 || eb == 0 || ea == 255 || eb == 255) {
        precise float d = a / b;
        return d;
    }
    uint ma = (ua & 0x7fffffu) | 0x800000u, mb = (ub & 0x7fffffu) | 0x800000u;
    uint s = ma < mb ? 1u : 0u;
    float rb = 1.0 / float(mb); // one reciprocal for the guess and its correction's estimate
    float q0 = float(ma) * rb;    // in (1/2, 2), a few units off
    uint m = uint(q0 * float(1u << (23u + s)) + 0.5);
    if ((FDIV_GUESS_OFF & 1u) != 0u) m = uint(int(m) + int((ma ^ mb) % 7u) - 3);
    int r = int((ma << (23u + s)) - m * mb);
    int k = int(round(float(r) * rb)); // the units m is off, give or take one
    if ((FDIV_GUESS_OFF & 2u) != 0u && abs(float(r) * rb - float(k)) < 0.4)
        k += int(((ma >> 3) ^ mb) % 3u) - 1;
    m = uint(int(m) + k);
    r -= k * int(mb);
    if (2 * r > int(mb)) m++;
    else if (2 * r < -int(mb)) m--;
    uint sign = (ua ^ ub) & 0x80000000u;
    int eq = ea - eb + 127 - int(s); // the quotient's biased exponent: a / b = m 2^(eq - 150)
    if (eq >= 1 && eq <= 254) return uintBitsToFloat(sign | ((uint(eq - 1) << 23) + m));
    float q = uintBitsToFloat(sign | ((126u << 23) + m)); // m 2^-23, in [1, 2]
    int e = eq - 127;
    if (e > 127) {
        q = q * pow2i(127);
        e -= 127;
    } else if (e < -126) {
        q = q * pow2i(-126);
        e += 126;
    }
    precise float res = q * pow2i(e < -126 ? -126 : e);
    return res;
}
#endif
