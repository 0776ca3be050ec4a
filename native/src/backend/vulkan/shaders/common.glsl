// Shared helpers of the geist compute shaders (GLSL 450, Vulkan 1.2; no 64-bit types, no
// atomics, no subgroup ops, so SPIRV-Cross translates them to MSL as they are).
// Weights are read as 32-bit words of the model's storage buffer: GGML blocks of 18/20/34 bytes
// sit at any even byte offset, so fields are pulled out of words by shifts.

#define T_F32 0u
#define T_F16 1u
#define T_Q4_0 2u
#define T_Q4_1 3u
#define T_Q8_0 8u

uint w_byte(uint b) { return (W[b >> 2] >> ((b & 3u) * 8u)) & 0xFFu; }
// f16 fields always sit at even byte offsets
float w_f16(uint b) { return unpackHalf2x16((W[b >> 2] >> ((b & 2u) * 8u)) & 0xFFFFu).x; }
float w_f32(uint b) { return uintBitsToFloat(W[b >> 2]); }
int sext8(uint v) { return int(v << 24) >> 24; }

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
    // Q4_1: q * d + m
    uint bb = row + 20u * b;
    uint q = w_byte(bb + 4u + (j & 15u));
    q = j < 16u ? (q & 15u) : (q >> 4);
    return w_f16(bb) * float(q) + w_f16(bb + 2u);
}
