#version 450
#extension GL_GOOGLE_include_directive : require
// Y[t * ldy + y_off + r] (+)= dot(W[r], x[t]) for quantized W (Q8_0, Q4_0, Q4_1, Q5_0 against
// quant.comp's 8-bit activations in blocks of 32; Q4_K, Q6_K in blocks of 256), for steps of many
// tokens (prefill): one workgroup per tile of TM output rows x TN tokens, so each weight block is
// read once per TN tokens instead of once per 8 (matvec.comp). The same push constants and
// bindings as matvec.comp (its bits of `accumulate` other than bit 0 are not taken here).
// K runs in chunks of 256 values (8 blocks of 32, or one super-block of 256): the tile's weights
// as signed bytes with their scales, and the tile's 8-bit activations with their scales and
// per-32 byte sums, are staged in shared memory; then each invocation, owning MR rows x MT
// tokens, makes the integer block sums and the float products of its outputs.
// Exactness: the same bits as matvec.comp and cpu_scalar's matmul_q. Every output keeps 8 lane
// partial sums: block b (super-block b) adds into lane b % 8 in increasing b, each block's float
// made as matvec.comp makes it ((d_w * d_x) * isum [+ (m_w * d_x) * sum_x], Q4_K's
// (d dx) A - (dmin dx) B, Q6_K's (d dx) A; integer sums, whose order does not matter, in
// between), and the 8 lanes are summed as gt_lane_tree8 at the end; no fused multiply-adds.
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer Wb { uint W[]; };
layout(std430, binding = 3) buffer Yb { float Y[]; };
layout(std430, binding = 4) readonly buffer Qb { uint AQ[]; };
layout(std430, binding = 5) readonly buffer Db { float AD[]; };
layout(push_constant) uniform P {
    uint w_off, type, n_in, row_bytes, n_out, n_tok, ldy, accumulate, y_off;
} p;
#include "common.glsl"
#include "idot.glsl"
// The tile (specialization constants): each invocation owns MR rows x MT tokens, so a
// workgroup TM = 8 MR rows x TN = 16 MT tokens; 4 x 2 (32 x 32) by default, 2 x 1 (16 x 16)
// for short steps (vk_forward.c: more workgroups, no idle token slots). The sums per output
// are the same either way.
layout(constant_id = 0) const uint MR = 4u;
layout(constant_id = 1) const uint MT = 2u;
#define TM (8u * MR)
#define TN (16u * MT)
#define STR 65u // words per staged row (64 + 1: no two of a warp's rows in one bank)
// shared arrays sized for the largest tile (32 x 32), whatever the constants
shared uint WS[32 * STR]; // the chunk's weights: signed bytes, packed as the activations are
shared uint XS[32 * STR]; // the chunk's 8-bit activations
shared float WD[32][8];   // per block: d (Q4_K, Q6_K: [0] d; Q4_K: [1] dmin)
shared float WM[32][8];   // Q4_1: per block m
shared int WSC[32][16];   // Q4_K: per 32 the 6-bit scale; Q6_K: per 16 the 8-bit scale
shared int WMN[32][8];    // Q4_K: per 32 the 6-bit min
shared float XD[32][8];   // per block the activation scale (256: [0])
shared int XSUM[32][8];   // per 32 the sum of the activation bytes

// stages unit j (values 32 j .. 32 j + 31 of chunk c) of tile row rr (weight row at byte `row`)
void stage_w(uint rr, uint j, uint c, uint row, bool ok, uint wtype) {
    uint s = rr * STR + 8u * j;
    if (!ok) {
        for (uint w = 0u; w < 8u; w++) WS[s + w] = 0u;
        return;
    }
    if (wtype == T_Q4_K) {
        uint bb = row + 144u * c;
        if (j == 0u) {
            WD[rr][0] = w_f16(bb);
            WD[rr][1] = w_f16(bb + 2u);
        }
        ivec2 sm = q4k_scale_min(bb + 4u, j);
        WSC[rr][j] = sm.x;
        WMN[rr][j] = sm.y;
        uint g = bb + 16u + 32u * (j >> 1), sh = (j & 1u) * 4u;
        for (uint w = 0u; w < 8u; w++) WS[s + w] = (w_word(g + 4u * w) >> sh) & 0x0F0F0F0Fu;
    } else if (wtype == T_Q6_K) {
        uint bb = row + 210u * c;
        if (j == 0u) WD[rr][0] = w_f16(bb + 208u);
        WSC[rr][2u * j] = sext8(w_byte(bb + 192u + 2u * j));
        WSC[rr][2u * j + 1u] = sext8(w_byte(bb + 193u + 2u * j));
        for (uint w = 0u; w < 8u; w++) { // q - 32: the integer sum is matvec's sq - 32 sa
            WS[s + w] = sub_bytes(q6k_word(bb, 32u * j + 4u * w), 32u);
        }
    } else if (wtype == T_Q8_0) {
        uint bb = row + 34u * (8u * c + j);
        WD[rr][j] = w_f16(bb);
        for (uint w = 0u; w < 8u; w++) WS[s + w] = w_word(bb + 2u + 4u * w);
    } else { // Q4_0 (q - 8), Q4_1 (q, and m), Q5_0 (q | h << 4) - 16
        uint bsz = wtype == T_Q4_0 ? 18u : (wtype == T_Q4_1 ? 20u : 22u);
        uint hdr = wtype == T_Q4_0 ? 2u : (wtype == T_Q4_1 ? 4u : 6u);
        uint bb = row + bsz * (8u * c + j);
        WD[rr][j] = w_f16(bb);
        if (wtype == T_Q4_1) WM[rr][j] = w_f16(bb + 2u);
        uint qh = wtype == T_Q5_0 ? w_word(bb + 2u) : 0u;
        uint q[4];
        for (uint w = 0u; w < 4u; w++) q[w] = w_word(bb + hdr + 4u * w);
        for (uint w = 0u; w < 8u; w++) { // values 4 w ..: low nibbles of bytes 4 w .., then high
            uint qw = w < 4u ? q[w] & 0x0F0F0F0Fu : (q[w - 4u] >> 4) & 0x0F0F0F0Fu;
            if (wtype == T_Q5_0) qw = sub_bytes(qw | spread4(qh >> (4u * w)), 16u);
            else if (wtype == T_Q4_0) qw = sub_bytes(qw, 8u);
            WS[s + w] = qw;
        }
    }
}

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint nrt = (p.n_out + TM - 1u) / TM, ntt = (p.n_tok + TN - 1u) / TN;
    if (wg >= nrt * ntt) return; // the whole workgroup: before any barrier
    uint r0 = (wg % nrt) * TM, t0 = (wg / nrt) * TN;
    uint wtype = p.type;
    bool kq = wtype == T_Q4_K || wtype == T_Q6_K;
    uint nb = p.n_in >> 5, nbk = p.n_in >> 8;
    uint nchunk = kq ? nbk : (nb + 7u) / 8u;
    uint xw = p.n_in >> 2; // words of a token's 8-bit row
    uint ty = lid >> 4, tx = lid & 15u; // rows ty + 8 i (i < MR), tokens tx + 16 k (k < MT)
    float acc[64]; // [(MT i + k) * 8 + lane]
    for (uint e = 0u; e < 64u; e++) acc[e] = 0.0;
    for (uint c = 0u; c < nchunk; c++) {
        // stage: TM x 8 units of 32 weights and TN x 8 of 32 activations
        for (uint u = lid; u < TM * 8u; u += 128u) {
            uint rr = u >> 3, j = u & 7u, r = r0 + rr;
            bool ok = r < p.n_out && (kq || 8u * c + j < nb);
            stage_w(rr, j, c, p.w_off + (ok ? r : 0u) * p.row_bytes, ok, wtype);
        }
        for (uint u = lid; u < TN * 8u; u += 128u) {
            uint tt = u >> 3, j = u & 7u, t = t0 + tt, s = tt * STR + 8u * j;
            bool ok = t < p.n_tok && (kq || 8u * c + j < nb);
            int sum = 0;
            for (uint w = 0u; w < 8u; w++) {
                uint a = ok ? AQ[t * xw + 64u * c + 8u * j + w] : 0u;
                XS[s + w] = a;
                sum += bsum4(a);
            }
            XSUM[tt][j] = sum;
            if (!kq) XD[tt][j] = ok ? AD[t * nb + 8u * c + j] : 0.0;
            else if (j == 0u) XD[tt][0] = ok ? AD[t * nbk + c] : 0.0;
        }
        barrier();
        if (!kq) {
            for (uint j = 0u; j < 8u; j++) {
                if (8u * c + j >= nb) break; // the last chunk's missing blocks (uniform)
                int isum[8];
                for (uint e = 0u; e < 8u; e++) isum[e] = 0;
                for (uint w = 0u; w < 8u; w++) {
                    uint a[2];
                    for (uint k = 0u; k < MT; k++) a[k] = XS[(tx + 16u * k) * STR + 8u * j + w];
                    for (uint i = 0u; i < MR; i++) {
                        uint q = WS[(ty + 8u * i) * STR + 8u * j + w];
                        for (uint k = 0u; k < MT; k++) isum[MT * i + k] += dot4ss(a[k], q);
                    }
                }
                for (uint i = 0u; i < MR; i++)
                    for (uint k = 0u; k < MT; k++) {
                        uint rr = ty + 8u * i, tt = tx + 16u * k;
                        float dx = XD[tt][j];
                        precise float dd = WD[rr][j] * dx;
                        precise float pr = dd * float(isum[MT * i + k]);
                        if (wtype == T_Q4_1) {
                            precise float md = WM[rr][j] * dx;
                            precise float p2 = md * float(XSUM[tt][j]);
                            pr = pr + p2;
                        }
                        uint e = (MT * i + k) * 8u + j;
                        precise float s = acc[e] + pr;
                        acc[e] = s;
                    }
            }
        } else {
            // the super-block's integer sums of the outputs (A; Q4_K's mins B), sub-block by
            // sub-block, each load of a word serving MT (weights) or MR (activations) outputs
            int A[8], B[8];
            for (uint e = 0u; e < 8u; e++) A[e] = B[e] = 0;
            for (uint j = 0u; j < 8u; j++) {
                int sq0[8], sq1[8]; // the two halves of 16 (Q6_K's groups 2 j, 2 j + 1)
                for (uint e = 0u; e < 8u; e++) sq0[e] = sq1[e] = 0;
                for (uint w = 0u; w < 4u; w++) {
                    uint x = 8u * j + w;
                    uint a[2], b[2];
                    for (uint k = 0u; k < MT; k++) {
                        a[k] = XS[(tx + 16u * k) * STR + x];
                        b[k] = XS[(tx + 16u * k) * STR + x + 4u];
                    }
                    for (uint i = 0u; i < MR; i++) {
                        uint q = WS[(ty + 8u * i) * STR + x], q4 = WS[(ty + 8u * i) * STR + x + 4u];
                        for (uint k = 0u; k < MT; k++) {
                            sq0[MT * i + k] += dot4ss(a[k], q);
                            sq1[MT * i + k] += dot4ss(b[k], q4);
                        }
                    }
                }
                for (uint i = 0u; i < MR; i++)
                    for (uint k = 0u; k < MT; k++) {
                        uint rr = ty + 8u * i, tt = tx + 16u * k, e = MT * i + k;
                        if (wtype == T_Q4_K) {
                            A[e] += WSC[rr][j] * (sq0[e] + sq1[e]);
                            B[e] += WMN[rr][j] * XSUM[tt][j];
                        } else {
                            A[e] += WSC[rr][2u * j] * sq0[e] + WSC[rr][2u * j + 1u] * sq1[e];
                        }
                    }
            }
            uint lane = c & 7u;
            for (uint i = 0u; i < MR; i++)
                for (uint k = 0u; k < MT; k++) {
                    uint rr = ty + 8u * i, tt = tx + 16u * k;
                    float dx = XD[tt][0];
                    precise float dd = WD[rr][0] * dx;
                    precise float pr = dd * float(A[MT * i + k]);
                    if (wtype == T_Q4_K) {
                        precise float dm = WD[rr][1] * dx;
                        precise float p2 = dm * float(B[MT * i + k]);
                        pr = pr - p2;
                    }
                    for (uint l = 0u; l < 8u; l++) {
                        uint e = (MT * i + k) * 8u + l;
                        precise float s = acc[e] + pr;
                        acc[e] = l == lane ? s : acc[e];
                    }
                }
        }
        barrier();
    }
    for (uint i = 0u; i < MR; i++)
        for (uint k = 0u; k < MT; k++) {
            uint r = r0 + ty + 8u * i, t = t0 + tx + 16u * k, e = (MT * i + k) * 8u;
            if (r >= p.n_out || t >= p.n_tok) continue;
            precise float s01 = acc[e] + acc[e + 1u];
            precise float s23 = acc[e + 2u] + acc[e + 3u];
            precise float s45 = acc[e + 4u] + acc[e + 5u];
            precise float s67 = acc[e + 6u] + acc[e + 7u];
            precise float s03 = s01 + s23;
            precise float s47 = s45 + s67;
            precise float y = s03 + s47;
            uint o = t * p.ldy + p.y_off + r;
            if ((p.accumulate & 1u) != 0u) y = Y[o] + y;
            Y[o] = y;
        }
}
