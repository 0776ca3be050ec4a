#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// GEIST_DEVICE_FAST's products of many rows of Q8_0 weights (vk_forward.c's rec_outfast: a tied
// output's logits, 49,152 rows of SmolLM2's, 262,144 of Gemma 3's), for the at most TOK rows of
// x of a fast pass. Such a product is bound by reading its weights once (178 MB a Gemma 3 token),
// where the 8-bit path (quant.comp, then matvec.comp's 32,768 short workgroups) left the memory
// idle between its workgroups' chains (~1 TB/s on the H100) and mvfast.comp's short workgroups
// were slower still (session 23). Here fewer, longer workgroups stream the rows:
// - a subgroup takes two rows at a time (one where TOK > 1), a lane a block of 32 values of
//   each (its 34 bytes in 9 words, every load at once), the same blocks of every row (up to
//   XB blocks a lane, the constant 1: the row's blocks over the subgroup's lanes);
// - x's values of the lane's blocks are made 16-bit integers once, in the lane's registers (XS:
//   every block of TOK rows once a workgroup, in shared memory), a block's largest magnitude to
//   32,767, kept as their high (signed) and low (unsigned) bytes, so a block's sum is 8 + 8
//   integer dot products of 4 bytes (GT_IDOT: one instruction each where the device has them
//   accelerated, the _idot build; else idot.glsl's shifts and multiplies), 256 sdot(w, hi) +
//   sudot(w, lo): within ~1e-5 of the float sum, where 8-bit activations are ~1 % off (a fast
//   pass's products are held to the float reference: FAST_RTOL);
// - a row's blocks' sums are one subgroup sum.
// A pass of several rows (a row a session) computes each row as a pass of that row alone does.
// Not cpu_scalar's bits (x's rounding, the device's order): the fast products' tolerance. Rows of
// an even count of blocks (a row starts at a word, its odd blocks' codes are word-aligned, its
// even blocks' scale is at a word: no load reads past a row) whose blocks fit XB a lane.
// Subgroups whole, of one size (vk_forward.c's outfast_blocks: the fast attention's lanes).
// Not kept (session 33): for several rows of x, a subgroup's 2 or 4 rows at a time, each token's
// words read from shared memory once for all of them (Gemma 3's 8-row output 305 -> 345 us).
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint TOK = 1u; // x's rows at most (the pipeline's; p.n_tok of them)
layout(constant_id = 1) const uint XB = 1u;  // a lane's blocks of a row at most
// XS (TOK > 1): x's 16-bit rows in shared memory, NB blocks a row (the constant 2), not in
// registers (TOK rows of them left too few lanes resident: session 30)
layout(constant_id = 2) const uint NB = 0u;
const bool XS = NB > 0u;
const uint RPI = TOK == 1u ? 2u : 1u;          // a subgroup's rows at a time
layout(std430, binding = 0) readonly buffer Wb { uint W[]; };
layout(std430, binding = 2) readonly buffer Xb { vec4 X4[]; };
layout(std430, binding = 3) writeonly buffer Yb { float Y[]; };
// y[t * ldy + y_off + r] = dot(W[r], x[t]) for r < n_out, t < n_tok (x's rows n_in apart)
layout(push_constant) uniform P { uint w_off, n_in, row_bytes, n_out, n_tok, ldy, y_off; } p;
#include "idot.glsl"

const uint XR = XS ? 1u : TOK * XB; // blocks in registers
uint xh[XR * 8u], xl[XR * 8u]; // x's 16-bit values' high and low bytes, [row][block][word]
float xd[XR];                  // and their blocks' scales
shared uint xsh[XS ? TOK * 16u * NB : 1u]; // XS: [row][word (8 high, 8 low)][block]
shared float xsd[XS ? TOK * NB : 1u];

uint packed(uvec4 u) { // the low bytes of 4 values as a word
    u &= 255u;
    return u.x | (u.y << 8) | (u.z << 16) | (u.w << 24);
}

// x's block b of row t (its n_in values from X4's vec4 at), as 16-bit integers: q = round(x *
// 32767 / the block's largest magnitude), its high byte (signed) and low byte, into h, l; its
// scale returned
float quant16(uint at, bool real, out uint h[8], out uint l[8]) {
    vec4 v[8];
    float m = 0.0;
    for (uint k = 0u; k < 8u; k++) {
        v[k] = real ? X4[at + k] : vec4(0.0);
        vec4 a = abs(v[k]);
        m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
    }
    for (uint k = 0u; k < 8u; k++) { // (v / m first: 32,767 / m overflows for a tiny m)
        ivec4 q = ivec4(roundEven(m > 0.0 ? v[k] / m * 32767.0 : vec4(0.0)));
        h[k] = packed(uvec4(q >> 8));
        l[k] = packed(uvec4(q));
    }
    return m / 32767.0;
}

void main() {
    uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize, nb = p.n_in >> 5;
    uint nwg = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
    uint wgi = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint first = wgi * gl_NumSubgroups + gl_SubgroupID, stride = nwg * gl_NumSubgroups;
    if (XS) { // every (row, block) of x once a workgroup, then shared
        for (uint i = gl_LocalInvocationID.x; i < TOK * nb; i += gl_WorkGroupSize.x) {
            uint t = i / nb, b = i - t * nb, h[8], l[8];
            bool real = t < p.n_tok; // (past n_tok no address is made: x holds n_tok rows)
            float d = quant16(real ? (t * p.n_in + 32u * b) >> 2 : 0u, real, h, l);
            for (uint k = 0u; k < 8u; k++) {
                xsh[(t * 16u + k) * NB + b] = h[k];
                xsh[(t * 16u + 8u + k) * NB + b] = l[k];
            }
            xsd[t * NB + b] = d;
        }
        barrier();
    } else { // the lane's blocks of each row, in registers
        for (uint t = 0u; t < TOK; t++) {
            for (uint j = 0u; j < XB; j++) {
                uint b = lane + sgs * j, h[8], l[8];
                bool real = t < p.n_tok && b < nb;
                uint e = t * XB + j;
                xd[e] = quant16(real ? (t * p.n_in + 32u * b) >> 2 : 0u, real, h, l);
                for (uint k = 0u; k < 8u; k++) {
                    xh[e * 8u + k] = h[k];
                    xl[e * 8u + k] = l[k];
                }
            }
        }
    }
    // the rows: a subgroup's r (and r + stride: clamped into the product, its loads made and its
    // sums dropped past n_out)
    for (uint r = first; r < p.n_out; r += RPI * stride) {
        uint w[RPI * XB * 9u];
        for (uint h = 0u; h < RPI; h++) {
            uint row = min(r + h * stride, p.n_out - 1u);
            for (uint j = 0u; j < XB; j++) {
                uint b = min(lane + sgs * j, nb - 1u);
                uint at = (p.w_off + row * p.row_bytes + 34u * b) >> 2;
                for (uint i = 0u; i < 9u; i++) w[(h * XB + j) * 9u + i] = W[at + i];
            }
        }
        float acc[RPI * TOK];
        for (uint i = 0u; i < RPI * TOK; i++) acc[i] = 0.0;
        for (uint h = 0u; h < RPI; h++) {
            for (uint j = 0u; j < XB; j++) {
                uint b = lane + sgs * j, o = (h * XB + j) * 9u, bs = min(b, nb - 1u);
                // odd blocks: the scale in word 0's upper half, the codes in words 1-8; even
                // blocks: the scale in word 0's lower half, the codes two bytes on
                bool odd = (b & 1u) != 0u;
                float dw = unpackHalf2x16(odd ? w[o] >> 16 : w[o] & 0xFFFFu).x;
                uint c[8];
                for (uint k = 0u; k < 8u; k++)
                    c[k] = odd ? w[o + k + 1u] : (w[o + k] >> 16) | (w[o + k + 1u] << 16);
                for (uint t = 0u; t < TOK; t++) {
                    uint e = (t * XB + j) * 8u;
                    int hi = 0, lo = 0;
                    for (uint k = 0u; k < 8u; k++) {
                        hi += dot4ss(c[k], XS ? xsh[(t * 16u + k) * NB + bs] : xh[e + k]);
                        lo += dot4su(c[k], XS ? xsh[(t * 16u + 8u + k) * NB + bs] : xl[e + k]);
                    }
                    float d = XS ? xsd[t * NB + bs] : xd[t * XB + j];
                    if (b < nb) acc[h * TOK + t] += float(256 * hi + lo) * (dw * d);
                }
            }
        }
        for (uint h = 0u; h < RPI; h++) {
            uint row = r + h * stride;
            for (uint t = 0u; t < TOK; t++) {
                float y = subgroupAdd(acc[h * TOK + t]);
                if (lane == 0u && row < p.n_out && t < p.n_tok)
                    Y[t * p.ldy + p.y_off + row] = y;
            }
        }
    }
}
