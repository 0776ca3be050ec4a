#version 450
#extension GL_GOOGLE_include_directive : require
// The fast products (GEIST_DEVICE_FAST: vk_forward.c's rec_mvfast): y = W x for a step of one row
// (one session's decode) on float activations, the quantized weights
// unpacked to floats on the fly and summed in the device's own order with its own arithmetic.
// Not cpu_scalar's bits (that one makes 8-bit activations and exact integer block sums; matvec.comp
// keeps them): the logits stay within a tolerance (tests/core/test_vulkan_forward.py's FAST_RTOL).
// Why: at decode a product's workgroups are latency-bound chains, and the 8-bit rows made in
// every workgroup (a load, a maximum across lanes, correctly rounded divisions, an f16 rounding,
// round after round) and the float-float norm before them were a third of a decode token on the
// H100 (docs/VULKAN.md). Here a workgroup's chain is: the norm's sum of squares (when fused), one
// pass over the row with every lane's loads independent, one sum across the row's 32 lanes.
// Two output rows a workgroup of 64 lanes, 32 lanes a row, a lane taking units of 8 values (two
// runs of 4 consecutive ones) of the row. The same push constants and `accumulate` bits as
// matvec.comp's in-product steps: 1 y += (else y =); 8 rotate output pairs (2i, 2i + 1) of heads
// (bits 8-19 the head dim, 20-31 n_rot, cos/sin at binding 5 from word 5); 16 x is the
// residual stream, RMS-normalized here with the norm vector at float type >> 8 of binding 4;
// 32 gate and up in one product (slot 0 gate row i from w_off, slot 1 up row i from y_off,
// y[i] = act(gate) * up; 64 GELU, else SiLU). PEND (a specialization constant, vk_forward.c's
// P_MVFAST_PEND; 0 in P_MVFAST, which then runs as before): bit 16's residual is x + norm(o) *
// post, a post-norm deferred (rec_residual's defer), o its product at binding 6, post the
// vector at float post_at of binding 4; made here before the norm as normfast.comp would have
// (o's scale, then x + (o * scale) * post) into shared memory (PEND floats, at least n_in) and
// written to binding 7 by workgroup 0 where post_write (the first product taking it). On the H100 (session 23) the same code with a
// loop over up to 8 rows of several sessions was slower than matvec.comp's batched path; so were
// x staged in shared memory, the units 4 at a time, and a whole block of 32 (or 64 values of a
// super-block) a lane with all its loads at once (docs/VULKAN.md "Fast products").
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint PEND = 0u;
layout(constant_id = 1) const float NORM_EPS = 1e-5;
layout(std430, binding = 0) readonly buffer Wb { uint W[]; };
layout(std430, binding = 2) readonly buffer Xb { float X[]; };
layout(std430, binding = 3) buffer Yb { float Y[]; };
layout(std430, binding = 4) readonly buffer Nb { float NW[]; };
layout(std430, binding = 5) readonly buffer Ib { float IN[]; };
layout(std430, binding = 6) readonly buffer Ob { float PO[]; }; // the deferred post-norm's product
layout(std430, binding = 7) writeonly buffer Rb { float XR[]; }; // the residual with it added
layout(push_constant) uniform P {
    uint w_off, type, n_in, row_bytes, n_out, n_tok, ldy, accumulate, y_off, post_at, post_write;
} p;
#include "common.glsl"
shared float part[64]; // the lanes' sums
shared float ys[2];    // bits 3 and 5: the two rows' outputs
shared float xsh[PEND + 1u]; // PEND: the residual with the deferred post-norm's product added

uint wtype, nw0;
bool normed;
float nscale;

// activation i (PEND: the residual with the deferred post-norm's product, staged)
float xr(uint i) { return PEND > 0u ? xsh[i] : X[i]; }
// 4 consecutive activations from value i (i % 4 == 0), normalized when bit 4
vec4 xs(uint i) {
    vec4 v = vec4(xr(i), xr(i + 1u), xr(i + 2u), xr(i + 3u));
    if (normed) v *= nscale * vec4(NW[nw0 + i], NW[nw0 + i + 1u], NW[nw0 + i + 2u], NW[nw0 + i + 3u]);
    return v;
}
vec4 nib_lo(uint q) { return vec4(q & 15u, (q >> 8) & 15u, (q >> 16) & 15u, (q >> 24) & 15u); }
vec4 nib_hi(uint q) { return vec4((q >> 4) & 15u, (q >> 12) & 15u, (q >> 20) & 15u, q >> 28); }
vec4 sbytes(uint q) { return vec4(sext8(q & 255u), sext8((q >> 8) & 255u), sext8((q >> 16) & 255u), sext8(q >> 24)); }
vec4 ubytes(uint q) { return vec4(q & 255u, (q >> 8) & 255u, (q >> 16) & 255u, q >> 24); }
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
        ivec2 s0 = q4k_scale_min(bb + 4u, 2u * g), s1 = q4k_scale_min(bb + 4u, 2u * g + 1u);
        float d = w_f16(bb), dm = w_f16(bb + 2u);
        uint q = w_word(bb + 16u + 32u * g + 4u * j);
        k.w0 = (d * float(s0.x)) * nib_lo(q) - dm * float(s0.y);
        k.w1 = (d * float(s1.x)) * nib_hi(q) - dm * float(s1.y);
        k.a0 = 256u * (u >> 5) + 64u * g + 4u * j;
        k.a1 = k.a0 + 32u;
        return k;
    }
    if (wtype == T_Q6_K) { // 32 units a super-block: values 8v .. 8v + 7, one sub-block of 16
        uint bb = row + 210u * (u >> 5), l = 8u * (u & 31u);
        float ds = w_f16(bb + 208u) * float(sext8(w_byte(bb + 192u + (l >> 4))));
        k.w0 = ds * (ubytes(q6k_word(bb, l)) - 32.0);
        k.w1 = ds * (ubytes(q6k_word(bb, l + 4u)) - 32.0);
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
        uint h0 = qh >> (4u * j), h1 = qh >> (16u + 4u * j);
        vec4 e0 = vec4(h0 & 1u, (h0 >> 1) & 1u, (h0 >> 2) & 1u, (h0 >> 3) & 1u) * 16.0;
        vec4 e1 = vec4(h1 & 1u, (h1 >> 1) & 1u, (h1 >> 2) & 1u, (h1 >> 3) & 1u) * 16.0;
        k.w0 = d * (nib_lo(q) + e0 - 16.0);
        k.w1 = d * (nib_hi(q) + e1 - 16.0);
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

void main() {
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x, lid = gl_LocalInvocationID.x;
    uint slot = lid >> 5, lane = lid & 31u;
    bool gated = (p.accumulate & 32u) != 0u, roped = (p.accumulate & 8u) != 0u;
    normed = (p.accumulate & 16u) != 0u;
    wtype = p.type & 255u;
    nw0 = p.type >> 8;
    uint n_rows = gated ? p.n_out >> 1 : p.n_out;
    uint r = gated ? wg : 2u * wg + slot; // the output value (gated: gate slot 0, up slot 1)
    bool valid = r < n_rows;
    uint row = (gated && slot == 1u ? p.y_off : p.w_off) + (valid ? r : 0u) * p.row_bytes;
    if (PEND > 0u) { // the deferred post-norm: o's scale as normfast.comp's, then the residual
        float s = 0.0;
        for (uint i = lid; i < p.n_in; i += 64u) s += PO[i] * PO[i];
        part[lid] = s;
        barrier();
        s = 0.0;
        for (uint l = 0u; l < 64u; l++) s += part[l];
        float ps = inversesqrt(s / float(p.n_in) + NORM_EPS);
        bool put = p.post_write != 0u && wg == 0u;
        for (uint i = lid; i < p.n_in; i += 64u) {
            float v = X[i] + PO[i] * ps * NW[p.post_at + i];
            xsh[i] = v;
            if (put) XR[i] = v;
        }
        barrier(); // (every lane has read the partials; the residual staged)
    }
    if (normed) { // the row's scale 1 / sqrt(mean(x^2) + eps), over the whole workgroup
        float s = 0.0;
        for (uint i = lid; i < p.n_in; i += 64u) s += xr(i) * xr(i);
        part[lid] = s;
        barrier();
        s = 0.0;
        for (uint l = 0u; l < 64u; l++) s += part[l];
        nscale = inversesqrt(s / float(p.n_in) + NORM_EPS);
        barrier(); // (every lane has read the partials)
    }
    float acc = 0.0;
    if (valid)
        for (uint u = lane; u < (p.n_in >> 3); u += 32u) {
            Unit k = unit_w(row, u);
            acc += dot(k.w0, xs(k.a0)) + dot(k.w1, xs(k.a1));
        }
    part[lid] = acc;
    barrier();
    float y = 0.0;
    if (lane == 0u) { // lane 0 of each row: the sum of its 32 lanes
        for (uint l = 0u; l < 32u; l++) y += part[32u * slot + l];
        ys[slot] = y;
    }
    if (!gated && !roped) {
        if (lane == 0u && valid) Y[p.y_off + r] = (p.accumulate & 1u) != 0u ? Y[p.y_off + r] + y : y;
        return;
    }
    barrier();
    if (lane != 0u || !valid) return;
    if (gated) { // slot 0: act(gate) * up, act.comp's arithmetic in the driver's float steps
        if (slot == 0u) {
            float x = ys[0], z = x;
            if ((p.accumulate & 64u) != 0u) z = 1.5957691216057308 * (x + 0.044715 * x * x * x);
            Y[r] = x / (1.0 + exp(-z)) * ys[1];
        }
        return;
    }
    // roped: rows 2i (slot 0) and 2i + 1 (slot 1) are a pair of one head (hd even)
    uint hd = (p.accumulate >> 8) & 0xFFFu, nrot = p.accumulate >> 20, j = r % hd;
    if (j < nrot) {
        uint at = 5u * p.n_tok + (j >> 1);
        float c = IN[at], sn = IN[at + nrot / 2u];
        y = slot == 0u ? ys[0] * c - ys[1] * sn : ys[0] * sn + ys[1] * c;
    }
    Y[p.y_off + r] = y;
}
