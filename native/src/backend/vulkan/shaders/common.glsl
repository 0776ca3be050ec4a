// Shared helpers of the geist compute shaders (GLSL 450, Vulkan 1.2; no 64-bit types, no
// atomics, no subgroup ops, so SPIRV-Cross translates them to MSL as they are).
// Weights are read as 32-bit words of the model's storage buffer: GGML blocks of 18/20/34 bytes
// sit at any even byte offset, so fields are pulled out of words by shifts.

#define T_F32 0u
#define T_F16 1u
#define T_Q4_0 2u
#define T_Q4_1 3u
#define T_Q5_0 6u
#define T_Q8_0 8u
#define T_Q4_K 12u
#define T_Q6_K 14u

uint w_byte(uint b) { return (W[b >> 2] >> ((b & 3u) * 8u)) & 0xFFu; }
// f16 fields always sit at even byte offsets
float w_f16(uint b) { return unpackHalf2x16((W[b >> 2] >> ((b & 2u) * 8u)) & 0xFFFFu).x; }
float w_f32(uint b) { return uintBitsToFloat(W[b >> 2]); }
int sext8(uint v) { return int(v << 24) >> 24; }

// Q4_K: 6-bit scale and min of sub-block j from the 12 scale bytes at byte s (quants.c)
ivec2 q4k_scale_min(uint s, uint j) {
    if (j < 4u) return ivec2(int(w_byte(s + j) & 63u), int(w_byte(s + j + 4u) & 63u));
    return ivec2(int((w_byte(s + j + 4u) & 15u) | ((w_byte(s + j - 4u) >> 6) << 4)),
                 int((w_byte(s + j + 4u) >> 4) | ((w_byte(s + j) >> 6) << 4)));
}
// Q6_K: the unsigned 6-bit value l (0..255) of the block at byte bb (quants.c's layout)
int q6k_value(uint bb, uint l) {
    uint h = l >> 7, v = l & 127u, k = v >> 5, m = v & 31u;
    uint lq = w_byte(bb + 64u * h + m + ((k & 1u) != 0u ? 32u : 0u));
    lq = k < 2u ? (lq & 15u) : (lq >> 4);
    uint hq = (w_byte(bb + 128u + 32u * h + m) >> (2u * k)) & 3u;
    return int(lq | (hq << 4));
}
// the 4 bytes at byte g of W (any alignment) as a word
uint w_word(uint g) {
    uint sh = (g & 3u) * 8u;
    if (sh == 0u) return W[g >> 2];
    return (W[g >> 2] >> sh) | (W[(g >> 2) + 1u] << (32u - sh));
}
// bits 0..3 of x to bit 4 of bytes 0..3 (Q5_0's fifth bits): one multiply copies the 4 bits 4,
// 11, 18 and 25 places up (the copies do not overlap: no carries), the mask keeps bit k of copy k
uint spread4(uint x) { return ((x & 15u) * 0x02040810u) & 0x10101010u; }
// per byte of q (each < 2 off; off 8, 16 or 32), the signed byte q - off: q ^ off is
// (q - off) mod 2 off, and its top bit copied into the bits above makes the two's complement
// (the product adds 256 - 2 off per set bit, without carries between bytes)
uint sub_bytes(uint q, uint off) {
    uint o = off * 0x01010101u, x = q ^ o;
    return x | ((x & o) * (256u / off - 2u));
}
// Q6_K: the values l .. l + 3 (l % 4 == 0: one sub-block, consecutive bytes) as q6k_value makes
// them, byte k of the word value l + k
uint q6k_word(uint bb, uint l) {
    uint h = l >> 7, v = l & 127u, k = v >> 5, m = v & 31u;
    uint lq = w_word(bb + 64u * h + m + ((k & 1u) != 0u ? 32u : 0u));
    lq = (k < 2u ? lq : lq >> 4) & 0x0F0F0F0Fu;
    uint hq = (w_word(bb + 128u + 32u * h + m) >> (2u * k)) & 0x03030303u;
    return lq | (hq << 4);
}
// element i of the weight row starting at byte `row`
float w_elem(uint type, uint row, uint i) {
    if (type == T_F32) return w_f32(row + 4u * i);
    if (type == T_F16) return w_f16(row + 2u * i);
    uint b = i >> 5, j = i & 31u;
    if (type == T_Q8_0) {
        uint bb = row + 34u * b;
        return w_f16(bb) * float(sext8(w_byte(bb + 2u + j)));
    }
    if (type == T_Q4_0) {
        uint bb = row + 18u * b;
        uint q = w_byte(bb + 2u + (j & 15u));
        q = j < 16u ? (q & 15u) : (q >> 4);
        return w_f16(bb) * float(int(q) - 8);
    }
    if (type == T_Q5_0) {
        uint bb = row + 22u * b;
        uint q = w_byte(bb + 6u + (j & 15u));
        q = j < 16u ? (q & 15u) : (q >> 4);
        uint qh = w_byte(bb + 2u + (j >> 3)) >> (j & 7u);
        return w_f16(bb) * float(int(q | ((qh & 1u) << 4)) - 16);
    }
    if (type == T_Q4_K) {
        uint bb = row + 144u * (i >> 8), l = i & 255u;
        uint g = l >> 6, sj = 2u * g + ((l >> 5) & 1u);
        ivec2 sm = q4k_scale_min(bb + 4u, sj);
        uint q = w_byte(bb + 16u + 32u * g + (l & 31u));
        q = (l & 32u) == 0u ? (q & 15u) : (q >> 4);
        precise float d1 = w_f16(bb) * float(sm.x);
        precise float m1 = w_f16(bb + 2u) * float(sm.y);
        precise float v = d1 * float(q);
        precise float o = v - m1;
        return o;
    }
    if (type == T_Q6_K) {
        uint bb = row + 210u * (i >> 8), l = i & 255u;
        int q = q6k_value(bb, l);
        precise float ds = w_f16(bb + 208u) * float(sext8(w_byte(bb + 192u + (l >> 4))));
        precise float v = ds * float(q - 32);
        return v;
    }
    // Q4_1: q * d + m
    uint bb = row + 20u * b;
    uint q = w_byte(bb + 4u + (j & 15u));
    q = j < 16u ? (q & 15u) : (q >> 4);
    precise float v = w_f16(bb) * float(q) + w_f16(bb + 2u); // no contraction, as the CPU
    return v;
}
