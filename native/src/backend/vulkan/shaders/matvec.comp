#version 450
#extension GL_GOOGLE_include_directive : require
// y[t * ldy + y_off + r] (+)= dot(W[r], x[t]) for t < n_tok, one workgroup per output row r (y_off:
// the first row of a weight split over several buffers, vk_forward.c's parts). Up to 8
// tokens share one pass over the row (decode batches of several sessions); more tokens loop.
// F32/F16 weights take float activations (binding 2); Q8_0/Q4_0/Q4_1/Q5_0 the 8-bit activations
// of quant.comp in blocks of 32, Q4_K/Q6_K in blocks of 256 (bindings 4, 5), in exact integer
// block sums, as cpu_scalar's matmul_q.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Wb { uint W[]; };
layout(std430, binding = 2) readonly buffer Xb { float X[]; };
layout(std430, binding = 3) buffer Yb { float Y[]; };
layout(std430, binding = 4) readonly buffer Qb { uint AQ[]; };
layout(std430, binding = 5) readonly buffer Db { float AD[]; };
layout(push_constant) uniform P {
    uint w_off, type, n_in, row_bytes, n_out, n_tok, ldy, accumulate, y_off;
} p;
#include "common.glsl"
#define NT 8u
shared float red[NT][64];

int aq(uint t, uint i) { // activation i of token t
    uint wd = AQ[t * (p.n_in >> 2) + (i >> 2)];
    return int(wd << (24u - 8u * (i & 3u))) >> 24;
}

void main() {
    // rows beyond 65535 workgroups continue in y (a large vocabulary)
    uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x, lid = gl_LocalInvocationID.x;
    if (r >= p.n_out) return; // the whole workgroup: before any barrier
    uint row = p.w_off + r * p.row_bytes;
    uint nb = p.n_in >> 5;
    for (uint t0 = 0u; t0 < p.n_tok; t0 += NT) {
        uint nt = min(NT, p.n_tok - t0);
        float acc[NT];
        for (uint k = 0u; k < NT; k++) acc[k] = 0.0;
        if (p.type == T_F32 || p.type == T_F16) {
            for (uint i = lid; i < p.n_in; i += 64u) {
                float w = p.type == T_F32 ? w_f32(row + 4u * i) : w_f16(row + 2u * i);
                for (uint k = 0u; k < nt; k++) acc[k] += w * X[(t0 + k) * p.n_in + i];
            }
        } else if (lid < 8u && (p.type == T_Q4_K || p.type == T_Q6_K)) {
            // super-blocks of 256 against fmt-1 activations (quant.comp), as quants.c dot_q_k:
            // integer A (and B) per block, then (d * dx) * A [- (dmin * dx) * B] into lane b % 8
            uint nbk = p.n_in >> 8;
            for (uint b = lid; b < nbk; b += 8u) {
                if (p.type == T_Q4_K) {
                    uint bb = row + 144u * b;
                    float d = w_f16(bb), dmin = w_f16(bb + 2u);
                    for (uint k = 0u; k < nt; k++) {
                        uint t = t0 + k;
                        int A = 0, B = 0;
                        for (uint j = 0u; j < 8u; j++) {
                            ivec2 sm = q4k_scale_min(bb + 4u, j);
                            uint g = bb + 16u + 32u * (j >> 1);
                            int sq = 0, sa = 0;
                            for (uint l = 0u; l < 32u; l++) {
                                uint q = w_byte(g + l);
                                q = (j & 1u) != 0u ? (q >> 4) : (q & 15u);
                                int a = aq(t, 256u * b + 32u * j + l);
                                sq += int(q) * a;
                                sa += a;
                            }
                            A += sm.x * sq;
                            B += sm.y * sa;
                        }
                        float dx = AD[t * nbk + b];
                        precise float dd = d * dx;
                        precise float dm = dmin * dx;
                        precise float p1 = dd * float(A);
                        precise float p2 = dm * float(B);
                        precise float pr = p1 - p2;
                        precise float sum = acc[k] + pr;
                        acc[k] = sum;
                    }
                } else {
                    uint bb = row + 210u * b;
                    float d = w_f16(bb + 208u);
                    for (uint k = 0u; k < nt; k++) {
                        uint t = t0 + k;
                        int A = 0;
                        for (uint g = 0u; g < 16u; g++) {
                            int sq = 0, sa = 0;
                            for (uint l = 16u * g; l < 16u * g + 16u; l++) {
                                int a = aq(t, 256u * b + l);
                                sq += q6k_value(bb, l) * a;
                                sa += a;
                            }
                            A += sext8(w_byte(bb + 192u + g)) * (sq - 32 * sa);
                        }
                        float dx = AD[t * nbk + b];
                        precise float dd = d * dx;
                        precise float pr = dd * float(A);
                        precise float sum = acc[k] + pr;
                        acc[k] = sum;
                    }
                }
            }
        } else if (lid < 8u) {
            // cpu_scalar's canonical order (quants.c dot_q_32): block b adds into lane b % 8 in
            // increasing b, the 8 lanes summed as gt_lane_tree8; each block's float is
            // (d_w * d_x) * isum [+ (m_w * d_x) * sum_x], without fused multiply-adds
            for (uint b = lid; b < nb; b += 8u) {
                int wq[32];
                float d, m = 0.0;
                if (p.type == T_Q8_0) {
                    uint bb = row + 34u * b;
                    d = w_f16(bb);
                    for (uint j = 0u; j < 32u; j++) wq[j] = sext8(w_byte(bb + 2u + j));
                } else if (p.type == T_Q5_0) {
                    // n - 16 per value: the integer sum is quants.c's sum(n * q) - 16 * sx
                    uint bb = row + 22u * b;
                    d = w_f16(bb);
                    uint qh = w_byte(bb + 2u) | (w_byte(bb + 3u) << 8) | (w_byte(bb + 4u) << 16) |
                              (w_byte(bb + 5u) << 24);
                    for (uint j = 0u; j < 16u; j++) {
                        uint q = w_byte(bb + 6u + j);
                        wq[j] = int((q & 15u) | (((qh >> j) & 1u) << 4)) - 16;
                        wq[j + 16u] = int((q >> 4) | (((qh >> (j + 16u)) & 1u) << 4)) - 16;
                    }
                } else {
                    uint hdr = p.type == T_Q4_0 ? 2u : 4u;
                    uint bb = row + (p.type == T_Q4_0 ? 18u : 20u) * b;
                    d = w_f16(bb);
                    if (p.type == T_Q4_1) m = w_f16(bb + 2u);
                    int off = p.type == T_Q4_0 ? 8 : 0;
                    for (uint j = 0u; j < 16u; j++) {
                        uint q = w_byte(bb + hdr + j);
                        wq[j] = int(q & 15u) - off;
                        wq[j + 16u] = int(q >> 4) - off;
                    }
                }
                for (uint k = 0u; k < nt; k++) {
                    uint t = t0 + k;
                    int isum = 0, asum = 0;
                    for (uint j = 0u; j < 32u; j++) {
                        int a = aq(t, 32u * b + j);
                        isum += wq[j] * a;
                        asum += a;
                    }
                    float dx = AD[t * nb + b];
                    precise float dd = d * dx;
                    precise float pr = dd * float(isum);
                    if (p.type == T_Q4_1) {
                        precise float md = m * dx;
                        precise float p2 = md * float(asum);
                        pr = pr + p2;
                    }
                    precise float s = acc[k] + pr;
                    acc[k] = s;
                }
            }
        }
        if (p.type != T_F32 && p.type != T_F16) {
            for (uint k = 0u; k < NT; k++) red[k][lid] = acc[k];
            barrier();
            if (lid < nt) {
                uint o = (t0 + lid) * p.ldy + p.y_off + r;
                precise float s01 = red[lid][0] + red[lid][1];
                precise float s23 = red[lid][2] + red[lid][3];
                precise float s45 = red[lid][4] + red[lid][5];
                precise float s67 = red[lid][6] + red[lid][7];
                precise float s03 = s01 + s23;
                precise float s47 = s45 + s67;
                precise float y = s03 + s47;
                if (p.accumulate != 0u) y = Y[o] + y;
                Y[o] = y;
            }
            barrier();
            continue;
        }
        for (uint k = 0u; k < NT; k++) red[k][lid] = acc[k];
        barrier();
        for (uint s = 32u; s > 0u; s >>= 1) {
            if (lid < s)
                for (uint k = 0u; k < NT; k++) red[k][lid] += red[k][lid + s];
            barrier();
        }
        if (lid < nt) {
            uint o = (t0 + lid) * p.ldy + p.y_off + r;
            Y[o] = p.accumulate != 0u ? Y[o] + red[lid][0] : red[lid][0];
        }
        barrier();
    }
}
