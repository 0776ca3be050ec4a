#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef MV_SG
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
// The fast products (GEIST_DEVICE_FAST: vk_forward.c's rec_mvfast): y = W x for a step of one row
// (one session's decode) on float activations, the quantized weights unpacked to floats on the
// fly and summed in the device's own order with its own arithmetic. Not cpu_scalar's bits (that
// one makes 8-bit activations and exact integer block sums; matvec.comp keeps them): the logits
// stay within a tolerance (tests/core/test_vulkan_forward.py's FAST_RTOL). Why: at decode a
// product's workgroups are latency-bound chains (docs/VULKAN.md "Fast products").
// ROWS output rows a workgroup (the specialization constant 4: its lanes, 32 a row; vk_forward.c's
// MVF_ROWS, 8), a lane taking units of 8 values (two runs of 4 consecutive ones) of its row, two
// units a round. A workgroup's chain (session 28, measured with the in-kernel clock):
// - its rows' weights touched first, a word of each 32-byte sector, so that they come from memory
//   while the norm runs;
// - a normed product (bit 16) stages its x once, normalized, in shared memory (XN, the constant
//   3: d_model): a lane's runs of 4 values loaded at once, two subgroup sums (MV_SG, the _sg
//   build; else a sum over shared memory); more rows a workgroup read it fewer times (Gemma 3's
//   2,048 gate/up workgroups of 2 rows read their residual 3 times each), in the units' order
//   (qpos), so that a subgroup's 32 lanes read 32 consecutive runs of 4 (the natural order had
//   the blocks-of-32 types' lanes 4 and 0 on the same banks);
// - the units' weights unpacked for the type the pipeline was made for (TYPE, the constant 2:
//   no branch on the type between one unit's loads and the next's; 255: p.type's);
// - a row's 32 lanes summed in one subgroup sum where subgroups are 32 lanes.
// The same push constants and `accumulate` bits as matvec.comp's in-product steps: 1 y += (else
// y =); 8 rotate output pairs (2i, 2i + 1) of heads (bits 8-19 the head dim, 20-31 n_rot, cos/sin
// at binding 5 from word 5); 16 x is the residual stream, RMS-normalized here with the norm
// vector at float type >> 8 of binding 4; 32 gate and up in one product (an even slot's gate row
// i from w_off, the odd slot after it up row i from y_off, y[i] = act(gate) * up; 64 GELU, else
// SiLU). PEND (the constant 0, vk_forward.c's P_MVFAST_PEND; 0 in P_MVFAST): bit 16's residual is
// x + norm(o) * post, a post-norm deferred (rec_residual's defer), o its product at binding 6,
// post the vector at float post_at of binding 4, made before the norm as normfast.comp would
// have (o's scale, then x + (o * scale) * post) and written to binding 7 by workgroup 0 where
// post_write (the first product taking it). Tried and not kept (docs/VULKAN.md): loops over up to
// 8 rows of several sessions (session 23), a whole block of 32 a lane, a block's rows staged with
// each lane holding all of its rows' values in registers (sessions 28-29: too many registers),
// the units' rounds unrolled with every load at once (session 33: more registers, slower).
layout(local_size_x = 64, local_size_x_id = 4) in;
const uint LANES = gl_WorkGroupSize.x, ROWS = LANES / 32u;
layout(constant_id = 0) const uint PEND = 0u;
layout(constant_id = 1) const float NORM_EPS = 1e-5;
layout(constant_id = 2) const uint TYPE = 255u; // the weights' type where the pipeline is made for one
// XN: the rows a normalized x is staged for (d_model, at most vk_forward.c's PEND_MAX; 0: none,
// a normed product then normalizes each value it reads); PEND needs it
layout(constant_id = 3) const uint XN = 0u;
const uint NV4 = XN > 0u ? (XN + 4u * LANES - 1u) / (4u * LANES) : 1u; // a lane's runs of 4 values of a staged row
// SPREAD (the constant 5): the workgroups span n_tok pass rows (a row a session, vk_forward.c's
// FAST_ROWS), each one row's outputs; 0: a pass of one row (n_tok not read: no division at the
// head of the chain, which cost one row's passes about 1 % on the H100, session 29)
layout(constant_id = 5) const uint SPREAD = 1u;
// TT (the constant 6): a block of the pass's rows a workgroup takes (1: one; 2 or 4: SPREAD's
// blocks, vk_forward.c's mvt_block), each unit's weights unpacked once for all of them. A block
// copies its x (and PEND's o) into shared memory in rounds of CQ loads a lane; a normed product
// then normalizes each row with the lanes, values and order of a workgroup of that row alone (the
// same bits in the source: a session's logits do not depend on the block it decodes in); O's and
// down's blocks (vk_forward.c's MVT_RAW, XN their longest rows that stage) use their x as it is
layout(constant_id = 6) const uint TT = 1u;
// a lane's runs of 4 values of a block's copy (at least 1: no array of length 0 where XN is 0)
const uint NQ = XN > 0u ? (TT * XN / 4u + LANES - 1u) / LANES : 1u;
// CQ: the runs of 4 a lane loads at once in copy_block (fewer registers than all of its NQ)
const uint CQ = 2u;
layout(std430, binding = 0) readonly buffer Wb { uint W[]; };
layout(std430, binding = 2) readonly buffer Xb { float X[]; };
layout(std430, binding = 3) buffer Yb { float Y[]; };
layout(std430, binding = 4) readonly buffer Nb { float NW[]; };
layout(std430, binding = 5) readonly buffer Ib { float IN[]; };
layout(std430, binding = 6) readonly buffer Ob { float PO[]; }; // the deferred post-norm's product
layout(std430, binding = 7) writeonly buffer Rb { float XR[]; }; // the residual with it added
layout(push_constant) uniform P {
    uint w_off, type, n_in, row_bytes, n_out, n_tok, ldy, accumulate, y_off, post_at, post_write;
    uint groups; // TT > 1: the groups of outputs a workgroup takes one after another (mvt_groups)
} p;
#include "common.glsl"
#include "clock.glsl"
#define MF_MARK(pt) clock_mark(0x100u + (pt))
shared float part[256]; // the lanes' sums (LANES at most 256)
shared float ys[8u * TT]; // bits 3 and 5: the rows' outputs (a slot's TT)
// XN: a normed product's x, normalized (PEND: with the post-norm's product added first), a
// block's rows XQ runs of 4 apart, each row's runs in the units' order (qpos): run h (0, 1) of
// unit u at h NU + u, so that a subgroup's lanes, a unit each, read consecutive runs
const uint XQ = XN / 4u;
shared vec4 xsh[XQ * TT + 1u];
shared vec4 osh[PEND > 0u && TT > 1u ? XQ * TT : 1u]; // a block's o (PEND), as xsh

uint wtype, nw0, xo, nu; // xo: the block's first row's first value of x (and of o, the residual)
uint nr; // the block's rows in the pass (rows past them repeat its last, never written)
bool normed, staged; // staged: normed, its x staged in xsh (XN >= n_in)
float nscale[TT];

vec4 x4(uint i) { return vec4(X[i], X[i + 1u], X[i + 2u], X[i + 3u]); }
vec4 nw4(uint i) { return vec4(NW[i], NW[i + 1u], NW[i + 2u], NW[i + 3u]); }
// where a row's run q (values 4q .. 4q + 3) is staged: run h of unit u (unit_w's a0 and a1) at
// h nu + u; the inverse of unit_w's layouts (Q8_0, Q6_K: 8 consecutive values a unit; blocks of
// 32: runs j and j + 4 of a block; Q4_K: runs j and j + 8 of a group of 64)
uint qpos(uint q) {
    uint u, h;
    if (wtype == T_Q4_K) {
        u = 32u * (q >> 6) + 8u * ((q >> 4) & 3u) + (q & 7u);
        h = (q >> 3) & 1u;
    } else if (wtype == T_Q8_0 || wtype == T_Q6_K) {
        u = q >> 1;
        h = q & 1u;
    } else {
        u = 4u * (q >> 3) + (q & 3u);
        h = (q >> 2) & 1u;
    }
    return h * nu + u;
}
// 4 consecutive activations of the block's row ti: run h of unit u, from value a (a % 4 == 0),
// normalized when bit 4 (staged where XN)
vec4 xs(uint ti, uint u, uint h, uint a) {
    // staged: a block's rows past nr hold stale shared memory, whose outputs are never written
    // out; unclamped, the loads take offsets known at compile time (Gemma 3's 8-session pass
    // 1.48 -> 1.37 ms of GPU on an H100, session 38)
    if (staged) return xsh[ti * XQ + h * nu + u];
    ti = min(ti, nr - 1u);
    vec4 v = x4(xo + ti * p.n_in + a);
    if (normed) v *= nscale[ti] * nw4(nw0 + a);
    return v;
}
// Small integers made floats without a conversion instruction: NVIDIA's recent GPUs convert at
// an eighth of their FMA rate, and a unit's values took one or two conversions each (session
// 37). v (< 2^23) set into the mantissa of 2^23 is the float 2^23 + v exactly, so mag4(v, o) is
// v - o exactly (o a small integer): the values a conversion gave, bit for bit (mag: one value).
vec4 mag4(uvec4 v, float o) { return uintBitsToFloat(v | 0x4B000000u) - (8388608.0 + o); }
float mag(uint v, float o) { return mag4(uvec4(v), o).x; }
uvec4 bytes4(uint q) { return uvec4(q, q >> 8, q >> 16, q >> 24) & 255u; }
vec4 nib_lo(uint q) { return mag4(bytes4(q & 0x0F0F0F0Fu), 0.0); }
vec4 nib_hi(uint q) { return mag4(bytes4((q >> 4) & 0x0F0F0F0Fu), 0.0); }
vec4 sbytes(uint q) { return mag4(bytes4(q ^ 0x80808080u), 128.0); } // (a byte ^ 128: it + 128)
// the 4 bytes of the weights from even byte b as a word (blocks of 32 sit at even offsets)
uint w4(uint b) {
    uint i = b >> 2;
    return (b & 2u) == 0u ? W[i] : (W[i] >> 16) | (W[i + 1u] << 16);
}

// unit u of a row (8 of its values): the weights as two runs of 4, at values a0 and a1
struct Unit { vec4 w0, w1; uint a0, a1; };
Unit unit_w(uint row, uint u) {
    Unit k;
    if (wtype == T_Q4_K) { // 32 units a super-block: group g's qs word j, low and high nibbles
        uint bb = row + 144u * (u >> 5), v = u & 31u, g = v >> 3, j = v & 7u;
        uvec2 s0 = uvec2(q4k_scale_min(bb + 4u, 2u * g));
        uvec2 s1 = uvec2(q4k_scale_min(bb + 4u, 2u * g + 1u));
        float d = w_f16(bb), dm = w_f16(bb + 2u);
        uint q = w_word(bb + 16u + 32u * g + 4u * j);
        k.w0 = (d * mag(s0.x, 0.0)) * nib_lo(q) - dm * mag(s0.y, 0.0);
        k.w1 = (d * mag(s1.x, 0.0)) * nib_hi(q) - dm * mag(s1.y, 0.0);
        k.a0 = 256u * (u >> 5) + 64u * g + 4u * j;
        k.a1 = k.a0 + 32u;
        return k;
    }
    if (wtype == T_Q6_K) { // 32 units a super-block: values 8v .. 8v + 7, one sub-block of 16
        uint bb = row + 210u * (u >> 5), l = 8u * (u & 31u);
        float ds = w_f16(bb + 208u) * mag(w_byte(bb + 192u + (l >> 4)) ^ 128u, 128.0);
        k.w0 = ds * mag4(bytes4(q6k_word(bb, l)), 32.0);
        k.w1 = ds * mag4(bytes4(q6k_word(bb, l + 4u)), 32.0);
        k.a0 = 256u * (u >> 5) + l;
        k.a1 = k.a0 + 4u;
        return k;
    }
    uint b = u >> 2, j = u & 3u; // blocks of 32: 4 units a block
    if (wtype == T_Q8_0) { // values 8j .. 8j + 7
        uint bb = row + 34u * b;
        float d = w_f16(bb);
        k.w0 = d * sbytes(w4(bb + 2u + 8u * j));
        k.w1 = d * sbytes(w4(bb + 6u + 8u * j));
        k.a0 = 32u * b + 8u * j;
        k.a1 = k.a0 + 4u;
        return k;
    }
    // Q4_0, Q4_1, Q5_0: qs word j, values 4j .. 4j + 3 (low nibbles) and 16 + 4j .. (high)
    k.a0 = 32u * b + 4u * j;
    k.a1 = k.a0 + 16u;
    if (wtype == T_Q5_0) {
        uint bb = row + 22u * b;
        float d = w_f16(bb);
        uint qh = w4(bb + 2u), q = w4(bb + 6u + 4u * j);
        // the 5-bit codes as bytes: the fifth bits (qh's 4j.. and 16 + 4j..) to bit 4 of each
        uint c0 = (q & 0x0F0F0F0Fu) | spread4(qh >> (4u * j));
        uint c1 = ((q >> 4) & 0x0F0F0F0Fu) | spread4(qh >> (16u + 4u * j));
        k.w0 = d * mag4(bytes4(c0), 16.0);
        k.w1 = d * mag4(bytes4(c1), 16.0);
        return k;
    }
    bool q41 = wtype == T_Q4_1;
    uint bb = row + (q41 ? 20u : 18u) * b;
    float d = w_f16(bb), m = q41 ? w_f16(bb + 2u) : -8.0 * d;
    uint q = w4(bb + (q41 ? 4u : 2u) + 4u * j);
    k.w0 = d * nib_lo(q) + m;
    k.w1 = d * nib_hi(q) + m;
    return k;
}

// a sum over the workgroup's 64 lanes: subgroup sums, then the subgroups' partials (a barrier)
float wg_sum(float v) {
#ifdef MV_SG
    v = subgroupAdd(v);
    if (subgroupElect()) part[gl_SubgroupID] = v;
    barrier();
    float t = 0.0;
    for (uint s = 0u; s < gl_NumSubgroups; s++) t += part[s];
#else
    part[gl_LocalInvocationID.x] = v;
    barrier();
    float t = 0.0;
    for (uint l = 0u; l < LANES; l++) t += part[l];
#endif
    barrier(); // (every lane has read the partials)
    return t;
}
#ifdef MV_SG
// wg_sum of each of a block's rows (TT > 1: the _sg build only), one barrier for all, each row's
// sum in wg_sum's order
void wg_sums(inout float v[TT]) {
    for (uint i = 0u; i < TT; i++) v[i] = subgroupAdd(v[i]);
    if (subgroupElect())
        for (uint i = 0u; i < TT; i++) part[gl_SubgroupID * TT + i] = v[i];
    barrier();
    for (uint i = 0u; i < TT; i++) {
        float t = 0.0;
        for (uint s = 0u; s < gl_NumSubgroups; s++) t += part[s * TT + i];
        v[i] = t;
    }
    barrier(); // (every lane has read the partials)
}
#endif
// this lane's part of the sum of squares of x's n floats (rows too long to stage): 16 values a
// round, every load of the round issued before any use
float sumsq(uint o, uint n) {
    float s = 0.0;
    for (uint i = 4u * gl_LocalInvocationID.x; i < n; i += 16u * LANES) {
        vec4 v[4];
        for (uint k = 0u; k < 4u; k++) v[k] = x4(o + min(i + 4u * LANES * k, n - 4u));
        for (uint k = 0u; k < 4u; k++) s += i + 4u * LANES * k < n ? dot(v[k], v[k]) : 0.0;
    }
    return s;
}

// A block's x (and PEND's o) copied to shared memory (TT > 1, staged), every lane's loads at
// once: run q of 4 values is row q / (n_in / 4)'s, at qpos in its row of xsh
void copy_block() {
    uint n4 = p.n_in >> 2, lid = gl_LocalInvocationID.x;
    for (uint k0 = 0u; k0 < NQ; k0 += CQ) { // rounds of CQ runs a lane, each round's loads at once
        if (LANES * k0 >= nr * n4) break; // (XN past n_in: O's x in down's staging, MVT_RAW)
        vec4 xa[CQ], oa[CQ];
        for (uint k = 0u; k < CQ; k++) {
            uint q = min(lid + LANES * (k0 + k), nr * n4 - 1u);
            xa[k] = x4(xo + 4u * q);
            if (PEND > 0u) oa[k] = vec4(PO[xo + 4u * q], PO[xo + 4u * q + 1u],
                                        PO[xo + 4u * q + 2u], PO[xo + 4u * q + 3u]);
        }
        for (uint k = 0u; k < CQ; k++) {
            uint q = lid + LANES * (k0 + k), b = (q / n4) * XQ + qpos(q % n4);
            if (q >= nr * n4) break;
            xsh[b] = xa[k];
            if (PEND > 0u) osh[b] = oa[k];
        }
    }
    barrier(); // (the block copied)
}

// A block's rows normalized in place (TT > 1, staged, after copy_block): each row as the
// single-row path below computes it, lane for lane, value for value
void norm_block(uint wg) {
#ifdef MV_SG
    uint lid = gl_LocalInvocationID.x;
    vec4 nv[NV4], pv[NV4];
    for (uint k = 0u; k < NV4; k++) {
        uint j = min(4u * (lid + LANES * k), p.n_in - 4u);
        nv[k] = nw4(nw0 + j);
        if (PEND > 0u) pv[k] = nw4(p.post_at + j);
    }
    float s[TT];
    if (PEND > 0u) {
        for (uint i = 0u; i < TT; i++) {
            s[i] = 0.0;
            for (uint k = 0u; k < NV4; k++) {
                uint j = 4u * (lid + LANES * k), b = i * XQ + qpos(j >> 2);
                if (i < nr && j < p.n_in) {
                    vec4 o = osh[b];
                    s[i] += dot(o, o);
                }
            }
        }
        wg_sums(s);
        bool put = p.post_write != 0u && wg == 0u;
        for (uint i = 0u; i < TT; i++) {
            float ps = inversesqrt(s[i] / float(p.n_in) + NORM_EPS);
            for (uint k = 0u; k < NV4; k++) {
                uint j = 4u * (lid + LANES * k), b = i * XQ + qpos(j >> 2), g = xo + i * p.n_in + j;
                if (i >= nr || j >= p.n_in) continue;
                vec4 o = osh[b], v = xsh[b];
                v += o * ps * pv[k];
                xsh[b] = v;
                if (put) XR[g] = v.x, XR[g + 1u] = v.y, XR[g + 2u] = v.z, XR[g + 3u] = v.w;
            }
        }
        MF_MARK(1u);
    }
    for (uint i = 0u; i < TT; i++) {
        s[i] = 0.0;
        for (uint k = 0u; k < NV4; k++) {
            uint j = 4u * (lid + LANES * k);
            if (i < nr && j < p.n_in) {
                vec4 v = xsh[i * XQ + qpos(j >> 2)];
                s[i] += dot(v, v);
            }
        }
    }
    wg_sums(s);
    for (uint i = 0u; i < TT; i++) {
        float sc = inversesqrt(s[i] / float(p.n_in) + NORM_EPS);
        for (uint k = 0u; k < NV4; k++) {
            uint j = 4u * (lid + LANES * k), b = i * XQ + qpos(j >> 2);
            if (i >= nr || j >= p.n_in) continue;
            xsh[b] *= sc * nv[k];
        }
    }
    barrier(); // (x staged)
#endif
}

// the output value a slot computes in output group og (gated: gate rows on even slots, their up
// rows on the odd ones after), and the byte offset of its weights' row (row 0's past the outputs)
uint out_val(uint og, uint slot, bool gated) {
    return gated ? (ROWS / 2u) * og + (slot >> 1) : ROWS * og + slot;
}
uint out_row(uint og, uint slot, bool gated, uint n_rows) {
    uint r = out_val(og, slot, gated);
    return (gated && (slot & 1u) == 1u ? p.y_off : p.w_off) + (r < n_rows ? r : 0u) * p.row_bytes;
}

void main() {
    clock_start();
    MF_MARK(0u);
    // a pass of n_tok rows (a row a session) in blocks of TT: each workgroup one block's outputs,
    // the blocks of the same outputs next to each other (the same weights read at about the same
    // time: from the caches after the first)
    uint wgi = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x, lid = gl_LocalInvocationID.x;
    uint nt = SPREAD != 0u ? max(p.n_tok, 1u) : 1u, nb = SPREAD != 0u ? (nt + TT - 1u) / TT : 1u;
    uint tb = SPREAD != 0u ? wgi % nb : 0u, wg = SPREAD != 0u ? wgi / nb : wgi;
    uint t0 = tb * TT; // the block's first pass row
    nr = min(TT, nt - t0);
    xo = t0 * p.n_in;
    uint slot = lid >> 5, lane = lid & 31u;
    bool gated = (p.accumulate & 32u) != 0u, roped = (p.accumulate & 8u) != 0u;
    normed = (p.accumulate & 16u) != 0u;
    staged = TT > 1u || (normed && XN >= p.n_in); // (blocks: normed products, x staged)
    wtype = TYPE != 255u ? TYPE : p.type & 255u;
    nw0 = p.type >> 8;
    nu = p.n_in >> 3;
    uint n_rows = gated ? p.n_out >> 1 : p.n_out;
    // a block's workgroup takes RG groups of outputs one after another, its block copied and
    // normalized once for all of them
    uint RG = TT > 1u ? p.groups : 1u;
    // The rows' weights touched first, a word of each 32-byte sector (every load at once), so
    // that the norm's chain below runs while they come from memory and the products' loads find
    // them in the caches; the words are used only in a test that never holds (kept so).
    uint pf = 0u;
    for (uint g = 0u; g < RG; g++) {
        uint row = out_row(wg * RG + g, slot, gated, n_rows);
        uint ns = (p.row_bytes + 31u) >> 5, w0 = row >> 2;
        for (uint s = lane; s < ns; s += 64u) pf ^= W[w0 + 8u * s] ^ W[w0 + 8u * min(s + 32u, ns - 1u)];
    }
    if (staged && TT > 1u) {
        copy_block();
        MF_MARK(6u);
        if (normed) norm_block(wg); // (else x as it is: O's and down's blocks, MVT_RAW)
        MF_MARK(2u);
    } else if (staged) {
        // x staged normalized: a lane's runs of 4 values (4 (lid + LANES k)), every load at once;
        // PEND: x + norm(o) * post first, o's scale as normfast.comp's
        vec4 xv[NV4], nv[NV4], ov[NV4], pv[NV4];
        for (uint k = 0u; k < NV4; k++) {
            uint j = min(4u * (lid + LANES * k), p.n_in - 4u);
            xv[k] = x4(xo + j);
            nv[k] = nw4(nw0 + j);
            if (PEND > 0u) {
                ov[k] = vec4(PO[xo + j], PO[xo + j + 1u], PO[xo + j + 2u], PO[xo + j + 3u]);
                pv[k] = nw4(p.post_at + j);
            }
        }
        if (PEND > 0u) {
            float s = 0.0;
            for (uint k = 0u; k < NV4; k++) s += 4u * (lid + LANES * k) < p.n_in ? dot(ov[k], ov[k]) : 0.0;
            float ps = inversesqrt(wg_sum(s) / float(p.n_in) + NORM_EPS);
            bool put = p.post_write != 0u && wg == 0u;
            for (uint k = 0u; k < NV4; k++) {
                uint i = 4u * (lid + LANES * k);
                xv[k] += ov[k] * ps * pv[k];
                if (put && i < p.n_in) {
                    XR[xo + i] = xv[k].x;
                    XR[xo + i + 1u] = xv[k].y;
                    XR[xo + i + 2u] = xv[k].z;
                    XR[xo + i + 3u] = xv[k].w;
                }
            }
            MF_MARK(1u);
        }
        float s = 0.0;
        for (uint k = 0u; k < NV4; k++) s += 4u * (lid + LANES * k) < p.n_in ? dot(xv[k], xv[k]) : 0.0;
        nscale[0] = inversesqrt(wg_sum(s) / float(p.n_in) + NORM_EPS);
        for (uint k = 0u; k < NV4; k++) {
            uint i = 4u * (lid + LANES * k);
            if (i < p.n_in) xsh[qpos(i >> 2)] = xv[k] * (nscale[0] * nv[k]);
        }
        barrier(); // (x staged)
        MF_MARK(2u);
    } else if (normed) { // each row's scale 1 / sqrt(mean(x^2) + eps), over the whole workgroup
        for (uint i = 0u; i < TT; i++) {
            float ss = wg_sum(sumsq(xo + min(i, nr - 1u) * p.n_in, p.n_in));
            nscale[i] = inversesqrt(ss / float(p.n_in) + NORM_EPS);
        }
        MF_MARK(2u);
    }
    for (uint g = 0u; g < RG; g++) { // (RG > 1: the previous group's sums and outputs read)
        if (g > 0u) barrier();
        uint r = out_val(wg * RG + g, slot, gated), row = out_row(wg * RG + g, slot, gated, n_rows);
        bool valid = r < n_rows;
        // two units a round, the second's loads beside the first's (its index kept in the row)
        float acc[TT];
        for (uint i = 0u; i < TT; i++) acc[i] = 0.0;
        for (uint u = lane; u < nu; u += 64u) {
            uint u2 = min(u + 32u, nu - 1u);
            Unit k0 = unit_w(row, u), k1 = unit_w(row, u2);
            for (uint i = 0u; i < TT; i++) {
                float a0 = dot(k0.w0, xs(i, u, 0u, k0.a0)) + dot(k0.w1, xs(i, u, 1u, k0.a1));
                float a1 = dot(k1.w0, xs(i, u2, 0u, k1.a0)) + dot(k1.w1, xs(i, u2, 1u, k1.a1));
                acc[i] += u + 32u < nu ? a0 + a1 : a0;
            }
        }
        if (pf == 0x9E3779B9u && p.accumulate == 0xFFFFFFFFu) acc[0] = 0.0; // never (see pf)
        MF_MARK(3u);
        float y[TT];
#ifdef MV_SG
        if (gl_SubgroupSize == 32u) { // a row's 32 lanes are one subgroup
            for (uint i = 0u; i < TT; i++) y[i] = subgroupAdd(acc[i]);
        } else
#endif
        {
            for (uint i = 0u; i < TT; i++) {
                part[lid] = acc[i];
                barrier();
                y[i] = 0.0;
                for (uint l = 0u; l < 32u; l++) y[i] += part[32u * slot + l];
                if (i + 1u < TT) barrier(); // (before the next row's sums)
            }
        }
        MF_MARK(4u);
        if (!gated && !roped) {
            for (uint i = 0u; i < TT; i++) {
                uint yi = p.y_off + (t0 + i) * p.ldy + r;
                if (lane == 0u && valid && i < nr)
                    Y[yi] = (p.accumulate & 1u) != 0u ? Y[yi] + y[i] : y[i];
            }
            MF_MARK(5u);
            continue;
        }
        if (lane == 0u)
            for (uint i = 0u; i < TT; i++) ys[slot * TT + i] = y[i];
        barrier();
        if (lane != 0u || !valid) continue;
        uint s0 = slot & ~1u; // the pair's first slot
        if (gated) { // the even slot: act(gate) * up, act.comp's arithmetic in the driver's float steps
            if (slot == s0) {
                for (uint i = 0u; i < nr; i++) {
                    float x = ys[s0 * TT + i], z = x;
                    if ((p.accumulate & 64u) != 0u) z = 1.5957691216057308 * (x + 0.044715 * x * x * x);
                    Y[(t0 + i) * p.ldy + r] = x / (1.0 + exp(-z)) * ys[(s0 + 1u) * TT + i];
                }
            }
            MF_MARK(5u);
            continue;
        }
        // roped: rows 2i (an even slot) and 2i + 1 (the odd one after) are a pair of one head (hd even)
        uint hd = (p.accumulate >> 8) & 0xFFFu, nrot = p.accumulate >> 20, j = r % hd;
        for (uint i = 0u; i < nr; i++) {
            float v = ys[slot * TT + i];
            if (j < nrot) {
                uint at = 5u * p.n_tok + (t0 + i) * nrot + (j >> 1); // the pass row's cos/sin
                float c = IN[at], sn = IN[at + nrot / 2u];
                float a = ys[s0 * TT + i], b = ys[(s0 + 1u) * TT + i];
                v = slot == s0 ? a * c - b * sn : a * sn + b * c;
            }
            Y[p.y_off + (t0 + i) * p.ldy + r] = v;
        }
        MF_MARK(5u);
    }
}
