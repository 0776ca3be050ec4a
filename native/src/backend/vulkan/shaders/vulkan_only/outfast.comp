#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
// GEIST_DEVICE_FAST's products of many rows of Q8_0 weights (vk_forward.c's rec_outfast: a tied
// output's logits, 49,152 rows of SmolLM2's, 262,144 of Gemma 3's), for the at most TOK rows of
// x of a fast pass. Such a product is bound by reading its weights once (178 MB a Gemma 3 token),
// where the 8-bit path (quant.comp, then matvec.comp's 32,768 short workgroups) left the memory
// idle between its workgroups' chains (~1 TB/s on the H100) and mvfast.comp's short workgroups
// were slower still (session 23). Here fewer, longer workgroups stream the rows:
// - a row's blocks are spread over a cluster of CL lanes of a subgroup (a power of two: the
//   host's outfast_blocks chooses it so that few lanes idle, at most OUT_XB_MAX blocks a lane),
//   a subgroup taking its lanes / CL rows at a time; a lane takes the same blocks of every row
//   (blocks k, k + CL, ...: its 34 bytes in 9 words each, every load at once);
// - x's blocks are made 16-bit integers once a workgroup, in shared memory, a block's largest
//   magnitude to 32,767, kept as their high (signed) and low (unsigned) bytes, so a block's sum
//   is 8 + 8 integer dot products of 4 bytes (GT_IDOT: one instruction each where the device has
//   them accelerated, the _idot build; else idot.glsl's shifts and multiplies), 256 sdot(w, hi)
//   + sudot(w, lo): within ~1e-5 of the float sum, where 8-bit activations are ~1 % off (a fast
//   pass's products are held to the float reference: FAST_RTOL);
// - a row's sum: the lane's blocks in order, then the cluster's lanes pairwise (shuffles).
// A pass of several rows of x (a row a session) computes each row as a pass of that row alone
// does: the same lanes, blocks and order. Not cpu_scalar's bits (x's rounding, the device's
// order): the fast products' tolerance. Rows of an even count of blocks (a row starts at a word,
// its odd blocks' codes are word-aligned, its even blocks' scale is at a word: no load reads past
// a row). Subgroups whole, of one size (vk_forward.c's outfast_blocks: the fast attention's
// lanes), with shuffles.
// Session 34: clusters replaced a subgroup a row (Gemma 3's 640 values: 20 of 32 lanes busy),
// whose several rows of x also took a subgroup sum each (8 a row) and 16 shared loads of a word
// a block, not 4 of 4 words. Not kept (session 33): for several rows of x, a subgroup's 2 or 4
// rows at a time, each token's words read from shared memory once for all of them.
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint TOK = 1u; // x's rows at most (the pipeline's; p.n_tok of them)
layout(constant_id = 1) const uint XB = 1u;  // a lane's blocks of a row at most (NB over CL)
layout(constant_id = 2) const uint NB = 1u;  // x's blocks a row
layout(constant_id = 3) const uint CL = 1u;  // a row's lanes (a power of two, the subgroup's or fewer)
layout(std430, binding = 0) readonly buffer Wb { uint W[]; };
layout(std430, binding = 2) readonly buffer Xb { vec4 X4[]; };
layout(std430, binding = 3) writeonly buffer Yb { float Y[]; };
// y[t * ldy + y_off + r] = dot(W[r], x[t]) for r < n_out, t < n_tok (x's rows n_in apart)
layout(push_constant) uniform P { uint w_off, n_in, row_bytes, n_out, n_tok, ldy, y_off; } p;
#include "idot.glsl"

// x's 16-bit values, [row][q][block]: q 0 and 1 the high bytes' words 0-3 and 4-7, 2 and 3 the
// low bytes' (a block's 4 words of a q next to its neighbours': the 128-bit loads of a
// cluster's consecutive blocks fall in distinct banks); and their blocks' scales, [row][block]
shared uvec4 xs[TOK * 4u * NB];
shared float xsd[TOK * NB];

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
    uint lane = gl_SubgroupInvocationID, nb = p.n_in >> 5;
    for (uint i = gl_LocalInvocationID.x; i < TOK * nb; i += gl_WorkGroupSize.x) {
        uint t = i / nb, b = i - t * nb, h[8], l[8];
        bool real = t < p.n_tok; // (past n_tok no address is made: x holds n_tok rows)
        float d = quant16(real ? (t * p.n_in + 32u * b) >> 2 : 0u, real, h, l);
        uint at = t * 4u * NB + b;
        xs[at] = uvec4(h[0], h[1], h[2], h[3]);
        xs[at + NB] = uvec4(h[4], h[5], h[6], h[7]);
        xs[at + 2u * NB] = uvec4(l[0], l[1], l[2], l[3]);
        xs[at + 3u * NB] = uvec4(l[4], l[5], l[6], l[7]);
        xsd[t * NB + b] = d;
    }
    barrier();
    uint rps = gl_SubgroupSize / CL, slot = lane / CL, k0 = lane % CL;
    uint nwg = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
    uint wgi = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint stride = nwg * gl_NumSubgroups * rps;
    // the subgroup's rows r0.. (its lanes' rows past n_out clamped into the product: their loads
    // made, their sums dropped)
    for (uint r0 = (wgi * gl_NumSubgroups + gl_SubgroupID) * rps; r0 < p.n_out; r0 += stride) {
        uint row = min(r0 + slot, p.n_out - 1u);
        uint w[XB * 9u];
        for (uint j = 0u; j < XB; j++) {
            uint b = min(k0 + CL * j, nb - 1u);
            uint at = (p.w_off + row * p.row_bytes + 34u * b) >> 2;
            for (uint i = 0u; i < 9u; i++) w[j * 9u + i] = W[at + i];
        }
        float acc[TOK];
        for (uint t = 0u; t < TOK; t++) acc[t] = 0.0;
        for (uint j = 0u; j < XB; j++) {
            uint b = k0 + CL * j, bs = min(b, nb - 1u), o = j * 9u;
            // odd blocks: the scale in word 0's upper half, the codes in words 1-8; even blocks:
            // the scale in word 0's lower half, the codes two bytes on
            bool odd = (bs & 1u) != 0u;
            float dw = unpackHalf2x16(odd ? w[o] >> 16 : w[o] & 0xFFFFu).x;
            uint c[8];
            for (uint k = 0u; k < 8u; k++)
                c[k] = odd ? w[o + k + 1u] : (w[o + k] >> 16) | (w[o + k + 1u] << 16);
            for (uint t = 0u; t < TOK; t++) {
                uint at = t * 4u * NB + bs;
                uvec4 h0 = xs[at], h1 = xs[at + NB], l0 = xs[at + 2u * NB], l1 = xs[at + 3u * NB];
                int hi = dot4ss(c[0], h0.x) + dot4ss(c[1], h0.y) + dot4ss(c[2], h0.z) +
                         dot4ss(c[3], h0.w) + dot4ss(c[4], h1.x) + dot4ss(c[5], h1.y) +
                         dot4ss(c[6], h1.z) + dot4ss(c[7], h1.w);
                int lo = dot4su(c[0], l0.x) + dot4su(c[1], l0.y) + dot4su(c[2], l0.z) +
                         dot4su(c[3], l0.w) + dot4su(c[4], l1.x) + dot4su(c[5], l1.y) +
                         dot4su(c[6], l1.z) + dot4su(c[7], l1.w);
                if (b < nb) acc[t] += float(256 * hi + lo) * (dw * xsd[t * NB + bs]);
            }
        }
        for (uint t = 0u; t < TOK; t++) {
            float y = acc[t];
            for (uint m = 1u; m < CL; m <<= 1u) y += subgroupShuffleXor(y, m);
            if (k0 == 0u && r0 + slot < p.n_out && t < p.n_tok)
                Y[t * p.ldy + p.y_off + r0 + slot] = y;
        }
    }
}
