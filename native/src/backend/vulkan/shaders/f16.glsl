// f32 -> f16 bits, round to nearest even, as util.c's gt_f32_to_f16 (packHalf2x16's rounding is
// the implementation's: llvmpipe truncates), and back to f32 exactly.
uint f32_to_f16(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u);
    if (absx >= 0x477ff000u) return sign | 0x7c00u;
    if (absx < 0x38800000u) {
        if (absx < 0x33000000u) return sign;
        uint e = absx >> 23;
        uint m = (absx & 0x7fffffu) | 0x800000u;
        uint sh = 126u - e;
        uint r = m >> sh;
        uint rem = m & ((1u << sh) - 1u);
        uint hf = 1u << (sh - 1u);
        if (rem > hf || (rem == hf && (r & 1u) != 0u)) r++;
        return sign | r;
    }
    uint e = (absx >> 23) - 127u + 15u;
    uint m = absx & 0x7fffffu;
    uint r = (e << 10) | (m >> 13);
    uint rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u) != 0u)) r++;
    return sign | r;
}
float f16_round(float f) { return unpackHalf2x16(f32_to_f16(f)).x; }
uint pack_f16x2(vec2 v) { return f32_to_f16(v.x) | (f32_to_f16(v.y) << 16); }
