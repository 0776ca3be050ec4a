// e^x by util/vexp_x86.h gt_vexp1's steps (Taylor to r^7 after n ln2 is taken off), each fused
// step an fma (exact.glsl's, rounded once whatever the driver's fma() does), so the bits agree
// with the CPU's plain paths.
#include "exact.glsl"
float vexp1(float x) {
    x = x > -87.0 ? x : -87.0;
    x = x < 88.0 ? x : 88.0;
    precise float n = roundEven(x * 1.44269504088896341);
    precise float r = fma_rn(-n, 0.693145751953125, x);
    r = fma_rn(-n, 1.42860682030941723e-06, r);
    precise float q = 1.0 / 5040.0;
    q = fma_rn(q, r, 1.0 / 720.0);
    q = fma_rn(q, r, 1.0 / 120.0);
    q = fma_rn(q, r, 1.0 / 24.0);
    q = fma_rn(q, r, 1.0 / 6.0);
    q = fma_rn(q, r, 0.5);
    q = fma_rn(q, r, 1.0);
    q = fma_rn(q, r, 1.0);
    precise float e = q * uintBitsToFloat(uint(int(n) + 127) << 23);
    return e;
}
