#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// y[t * ldy + y_off + r] (+)= dot(W[r], x[t]) for t < n_tok, one workgroup per output row r (y_off:
// the first row of a weight split over several buffers, vk_forward.c's parts). Up to 8
// tokens share one pass over the row (decode batches of several sessions); more tokens loop.
// F32/F16 weights take float activations (binding 2); Q8_0/Q4_0/Q4_1/Q5_0 the 8-bit activations
// of quant.comp in blocks of 32, Q4_K/Q6_K in blocks of 256 (bindings 4, 5), in exact integer
// block sums, as cpu_scalar's matmul_q.
// ROWS8 (a specialization constant; 0 by default, as metal/step.c dispatches it): 0, one workgroup
// per output row, 8 of its lanes busy on quantized weights; 1 (quantized weights only, the vulkan
// backend's choice for them), 8 rows per workgroup, 8 lanes each: the same lanes' sums in the
// same order, so the same bits, with every lane busy and an eighth of the workgroups; 2 (blocks
// of 32 only, the vulkan backend's choice for steps of at most 8 rows), 2 rows per workgroup, 32
// lanes each, a block a lane and round, the 8 lanes' sums then made from the blocks' floats in
// the same order: the same bits with a lane's weight loads at once, not a chain of them. With
// ROWS8, bit 1 of `accumulate` (never set by metal/step.c) says: make x's 8-bit rows here, in
// shared memory, instead of reading quant.comp's (each workgroup repeats the few blocks, all 64
// lanes on them, a word of 4 values each: actq.glsl, the same arithmetic), saving a dispatch and
// a barrier; the host sets it for steps of at most 8 rows whose rows fit (n_in <= 1536 for 8;
// n_in <= 12288 for one). Bit 3
// (with bit 1): rotate the output pairs (2i, 2i + 1) of each head as rope.comp does (adjacent
// rows: one workgroup holds both), bits 8-19 the head dim, 20-31 n_rot, the cos/sin at binding 5
// (the pass's inputs, then bound there instead of the unused scales) from word 5 n_tok, as
// vk_forward.c writes them; saving rope.comp's dispatch and barrier. Bit 4 (with bit 1): x's
// rows are the residual stream, normalized here as rmsnorm.comp does (rmsscale.glsl: the same
// lanes, the same float-float sums) with the norm vector at float type >> 8 of the norm weights
// bound at 4 (unused scratch then), saving rmsnorm.comp's dispatch and barrier; the type is then
// type & 255.
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint ROWS8 = 0u;
layout(constant_id = 1) const float NORM_EPS = 1e-5; // bit 4: the model's RMSNorm epsilon
layout(std430, binding = 0) readonly buffer Wb { uint W[]; };
layout(std430, binding = 2) readonly buffer Xb { float X[]; };
layout(std430, binding = 3) buffer Yb { float Y[]; };
layout(std430, binding = 4) readonly buffer Qb { uint AQ[]; };
layout(std430, binding = 5) readonly buffer Db { float AD[]; };
layout(push_constant) uniform P {
    uint w_off, type, n_in, row_bytes, n_out, n_tok, ldy, accumulate, y_off;
} p;
#include "common.glsl"
#include "f16.glsl"
#include "exact.glsl"
#define NT 8u
#define SQ_WORDS 3072u
#define AR 8u // rounds of 8-bit rows whose values a lane loads at once
shared float red[NT][64];
shared float ys[64];
shared float pb[2][NT][32]; // ROWS8 2: a round's block floats [row][token][block] // bit 3: the rows' sums [slot][token], for the rotation
shared float nscale[NT]; // bit 4: the chunk's rows' RMSNorm scales
#include "rmsscale.glsl"
shared uint SQ[SQ_WORDS];      // this chunk's 8-bit rows (bit 1 of accumulate)
shared float SD[SQ_WORDS / 8u]; // and their block scales
bool selfq, normed;
uint wtype, nw0; // the weight type; bit 4: the norm vector's first float
uint chunk0; // the chunk's first token
float act_x(uint i) { // float activation i (token i / n_in)
    if (!normed) return X[i];
    uint t = i / p.n_in; // as rmsnorm.comp: (x * scale) * w
    precise float v = X[i] * nscale[t - chunk0];
    precise float o = v * uintBitsToFloat(AQ[nw0 + (i - t * p.n_in)]);
    return o;
}
void aq_put(uint w, uint word) { SQ[w] = word; }
void ad_put(uint b, float d) { SD[b] = d; }
#include "actq.glsl"

uint aqw(uint t, uint w) { // word w of token t's 8-bit row
    return selfq ? SQ[(t - chunk0) * (p.n_in >> 2) + w] : AQ[t * (p.n_in >> 2) + w];
}
float adv(uint t, uint b, uint nblk) { // block b's scale of token t's row
    return selfq ? SD[(t - chunk0) * nblk + b] : AD[t * nblk + b];
}

// the sum of the four signed bytes of w
int bsum4(uint w) {
    return (int(w << 24) >> 24) + (int(w << 16) >> 24) + (int(w << 8) >> 24) + (int(w) >> 24);
}
// the dot product of four signed bytes of a with four small signed ints (w0..w3)
int dot4(uint a, int w0, int w1, int w2, int w3) {
    return (int(a << 24) >> 24) * w0 + (int(a << 16) >> 24) * w1 + (int(a << 8) >> 24) * w2 +
           (int(a) >> 24) * w3;
}

// block b of row (bytes from w_off) of a blocks-of-32 type: its 32 integer codes (n - 16 for
// Q5_0, n - 8 for Q4_0), its scale d and (Q4_1) min m
void block_w(uint row, uint b, out int wq[32], out float d, out float m) {
    m = 0.0;
    if (wtype == T_Q8_0) {
        uint bb = row + 34u * b;
        d = w_f16(bb);
        // the 32 codes as 8 words (blocks sit at even offsets: 0 or 16 bits in)
        uint wi = (bb + 2u) >> 2, sh = ((bb + 2u) & 3u) * 8u;
        for (uint w = 0u; w < 8u; w++) {
            uint word = sh == 0u ? W[wi + w] : (W[wi + w] >> 16) | (W[wi + w + 1u] << 16);
            for (uint k = 0u; k < 4u; k++) wq[4u * w + k] = sext8((word >> (8u * k)) & 0xFFu);
        }
    } else if (wtype == T_Q5_0) {
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
        uint hdr = wtype == T_Q4_0 ? 2u : 4u;
        uint bb = row + (wtype == T_Q4_0 ? 18u : 20u) * b;
        d = w_f16(bb);
        if (wtype == T_Q4_1) m = w_f16(bb + 2u);
        int off = wtype == T_Q4_0 ? 8 : 0;
        if (((bb + hdr) & 3u) == 0u) { // the 16 bytes as 4 aligned words
            for (uint w = 0u; w < 4u; w++) {
                uint q = W[(bb + hdr) / 4u + w];
                for (uint k = 0u; k < 4u; k++) {
                    uint v = q >> (8u * k);
                    wq[4u * w + k] = int(v & 15u) - off;
                    wq[4u * w + k + 16u] = int((v >> 4) & 15u) - off;
                }
            }
        } else {
            for (uint j = 0u; j < 16u; j++) {
                uint q = w_byte(bb + hdr + j);
                wq[j] = int(q & 15u) - off;
                wq[j + 16u] = int(q >> 4) - off;
            }
        }
    }
}
// block b's float for token t, cpu_scalar's (quants.c dot_q_32): (d_w * d_x) * isum
// [+ (m_w * d_x) * sum_x], without fused multiply-adds
float block_pr(int wq[32], float d, float m, uint t, uint b, uint nb) {
    int isum = 0, asum = 0; // integers: any order gives the same sums
    for (uint w = 0u; w < 8u; w++) {
        uint a = aqw(t, 8u * b + w);
        isum += dot4(a, wq[4u * w], wq[4u * w + 1u], wq[4u * w + 2u], wq[4u * w + 3u]);
        asum += bsum4(a);
    }
    float dx = adv(t, b, nb);
    precise float dd = d * dx;
    precise float pr = dd * float(isum);
    if (wtype == T_Q4_1) {
        precise float md = m * dx;
        precise float p2 = md * float(asum);
        pr = pr + p2;
    }
    return pr;
}

void main() {
    // rows beyond 65535 workgroups continue in y (a large vocabulary)
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x, lid = gl_LocalInvocationID.x;
    // ROWS8 1: 8 rows of 8 lanes; 2: 2 rows of 32 lanes
    uint slot = ROWS8 == 1u ? lid >> 3 : (ROWS8 == 2u ? lid >> 5 : 0u); // which of the workgroup's rows
    uint lane = ROWS8 == 1u ? lid & 7u : (ROWS8 == 2u ? lid & 31u : lid); // which lane of that row
    uint r = ROWS8 == 1u ? 8u * wg + slot : (ROWS8 == 2u ? 2u * wg + slot : wg);
    if (ROWS8 == 0u && r >= p.n_out) return; // the whole workgroup: before any barrier
    bool valid = r < p.n_out; // ROWS8: the last workgroup's spare rows take the barriers only
    uint row = p.w_off + (valid ? r : 0u) * p.row_bytes;
    uint nb = p.n_in >> 5;
    selfq = ROWS8 != 0u && (p.accumulate & 2u) != 0u;
    normed = selfq && (p.accumulate & 16u) != 0u;
    wtype = ROWS8 != 0u ? p.type & 255u : p.type;
    nw0 = p.type >> 8;
    bool roped = selfq && (p.accumulate & 8u) != 0u;
    bool kq = wtype == T_Q4_K || wtype == T_Q6_K;
    for (uint t0 = 0u; t0 < p.n_tok; t0 += NT) {
        uint nt = min(NT, p.n_tok - t0);
        chunk0 = t0;
        if (normed) // the chunk's rows' scales, each over the whole workgroup
            for (uint k = 0u; k < nt; k++) {
                float sc = rms_scale((t0 + k) * p.n_in, p.n_in, NORM_EPS, lid);
                if (lid == 0u) nscale[k] = sc;
            }
        if (selfq) { // the chunk's rows, quantized by the whole workgroup, 64 words a round
            if (normed) barrier();
            uint nw = nt * (p.n_in >> 2); // the words' order is aqw's, their blocks' adv's
            // AR rounds' values loaded at once, then their rounds: one wait for the loads
            for (uint w0 = 0u; w0 < nw; w0 += 64u * AR) {
                float xr[AR][4];
                [[unroll]] for (uint r = 0u; r < AR; r++)
                    if (w0 + 64u * r < nw) actq_load(t0 * p.n_in, w0 + 64u * r, nw, lid, xr[r]);
                [[unroll]] for (uint r = 0u; r < AR; r++)
                    if (w0 + 64u * r < nw) actq_round_x(w0 + 64u * r, nw, lid, kq, xr[r]);
            }
            barrier();
        }
        float acc[NT];
        for (uint k = 0u; k < NT; k++) acc[k] = 0.0;
        if (ROWS8 == 2u) {
            // blocks of 32 only: a round's block b0 + l of a row on its lane l, its floats for
            // the chunk's tokens into pb; then lane (k, j) (for both rows) adds the round's blocks
            // b = j (mod 8) in increasing b into its accumulator: cpu_scalar's lanes, order and
            // sums, as the 8-lane path, but a block a lane (its loads at once, not in a chain)
            uint ck = lid >> 3, cj = lid & 7u;
            precise float ca0 = 0.0, ca1 = 0.0;
            for (uint b0 = 0u; b0 < nb; b0 += 32u) {
                uint b = b0 + lane;
                if (valid && b < nb) {
                    int wq[32];
                    float d, m;
                    block_w(row, b, wq, d, m);
                    [[unroll]] for (uint k = 0u; k < NT; k++) {
                        if (k >= nt) break;
                        pb[slot][k][lane] = block_pr(wq, d, m, t0 + k, b, nb);
                    }
                }
                barrier();
                if (ck < nt)
                    for (uint bl = cj; bl < 32u && b0 + bl < nb; bl += 8u) {
                        ca0 = ca0 + pb[0][ck][bl];
                        ca1 = ca1 + pb[1][ck][bl];
                    }
                barrier();
            }
            red[ck][cj] = ca0;
            red[ck][8u + cj] = ca1;
        } else if (ROWS8 == 0u && (wtype == T_F32 || wtype == T_F16)) {
            for (uint i = lid; i < p.n_in; i += 64u) {
                float w = wtype == T_F32 ? w_f32(row + 4u * i) : w_f16(row + 2u * i);
                [[unroll]] for (uint k = 0u; k < NT; k++)
                    if (k < nt) acc[k] += w * X[(t0 + k) * p.n_in + i];
            }
        } else if (valid && lane < 8u && (wtype == T_Q4_K || wtype == T_Q6_K)) {
            // super-blocks of 256 against fmt-1 activations (quant.comp), as quants.c dot_q_k:
            // integer A (and B) per block, then (d * dx) * A [- (dmin * dx) * B] into lane b % 8
            uint nbk = p.n_in >> 8;
            for (uint b = lane; b < nbk; b += 8u) {
                if (wtype == T_Q4_K) {
                    uint bb = row + 144u * b;
                    float d = w_f16(bb), dmin = w_f16(bb + 2u);
                    [[unroll]] for (uint k = 0u; k < NT; k++) { // k < nt: acc[k] in registers
                        if (k >= nt) break;
                        uint t = t0 + k;
                        int A = 0, B = 0;
                        for (uint j = 0u; j < 8u; j++) {
                            ivec2 sm = q4k_scale_min(bb + 4u, j);
                            uint g = bb + 16u + 32u * (j >> 1);
                            int sq = 0, sa = 0; // integers: any order gives the same sums
                            uint sh = (j & 1u) * 4u;
                            for (uint w = 0u; w < 8u; w++) {
                                uint qw = (g & 3u) == 0u ? W[(g >> 2) + w]
                                                         : w_byte(g + 4u * w) | (w_byte(g + 4u * w + 1u) << 8) |
                                                               (w_byte(g + 4u * w + 2u) << 16) | (w_byte(g + 4u * w + 3u) << 24);
                                qw = (qw >> sh) & 0x0F0F0F0Fu;
                                uint a = aqw(t, 64u * b + 8u * j + w);
                                sq += dot4(a, int(qw & 255u), int((qw >> 8) & 255u), int((qw >> 16) & 255u),
                                           int(qw >> 24));
                                sa += bsum4(a);
                            }
                            A += sm.x * sq;
                            B += sm.y * sa;
                        }
                        float dx = adv(t, b, nbk);
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
                    [[unroll]] for (uint k = 0u; k < NT; k++) { // k < nt: acc[k] in registers
                        if (k >= nt) break;
                        uint t = t0 + k;
                        int A = 0;
                        for (uint g = 0u; g < 16u; g++) {
                            int sq = 0, sa = 0;
                            for (uint w = 0u; w < 4u; w++) {
                                uint l = 16u * g + 4u * w, a = aqw(t, 64u * b + 4u * g + w);
                                sq += dot4(a, q6k_value(bb, l), q6k_value(bb, l + 1u),
                                           q6k_value(bb, l + 2u), q6k_value(bb, l + 3u));
                                sa += bsum4(a);
                            }
                            A += sext8(w_byte(bb + 192u + g)) * (sq - 32 * sa);
                        }
                        float dx = adv(t, b, nbk);
                        precise float dd = d * dx;
                        precise float pr = dd * float(A);
                        precise float sum = acc[k] + pr;
                        acc[k] = sum;
                    }
                }
            }
        } else if (valid && lane < 8u) {
            // cpu_scalar's canonical order (quants.c dot_q_32): block b adds into lane b % 8 in
            // increasing b, the 8 lanes summed as gt_lane_tree8; each block's float is
            // (d_w * d_x) * isum [+ (m_w * d_x) * sum_x], without fused multiply-adds
            for (uint b = lane; b < nb; b += 8u) {
                int wq[32];
                float d, m;
                block_w(row, b, wq, d, m);
                [[unroll]] for (uint k = 0u; k < NT; k++) { // k < nt: acc[k] in registers
                    if (k >= nt) break;
                    precise float s = acc[k] + block_pr(wq, d, m, t0 + k, b, nb);
                    acc[k] = s;
                }
            }
        }
        if (wtype != T_F32 && wtype != T_F16) {
            if (ROWS8 != 2u) // (ROWS8 2 wrote its rows' 8 lanes there)
                for (uint k = 0u; k < NT; k++) red[k][lid] = acc[k];
            barrier();
            if (valid && lane < nt) { // lane k of the row: token t0 + k from the row's 8 lanes
                uint o = (t0 + lane) * p.ldy + p.y_off + r, l0 = 8u * slot;
                precise float s01 = red[lane][l0] + red[lane][l0 + 1u];
                precise float s23 = red[lane][l0 + 2u] + red[lane][l0 + 3u];
                precise float s45 = red[lane][l0 + 4u] + red[lane][l0 + 5u];
                precise float s67 = red[lane][l0 + 6u] + red[lane][l0 + 7u];
                precise float s03 = s01 + s23;
                precise float s47 = s45 + s67;
                precise float y = s03 + s47;
                if ((p.accumulate & 1u) != 0u) y = Y[o] + y;
                if (roped) ys[lid] = y;
                else Y[o] = y;
            }
            if (roped) {
                barrier();
                uint hd = (p.accumulate >> 8) & 0xFFFu, nrot = p.accumulate >> 20;
                uint j = r % hd;
                if (valid && lane < nt) {
                    uint o = (t0 + lane) * p.ldy + p.y_off + r;
                    if (j < nrot) {
                        uint at = 5u * p.n_tok + (t0 + lane) * nrot + (j >> 1);
                        float c = AD[at], sn = AD[at + nrot / 2u];
                        uint rs = ROWS8 == 2u ? 32u : 8u; // ys[lid]: lanes of a row rs apart
                        float x0 = ys[rs * (slot & ~1u) + lane], x1 = ys[rs * (slot | 1u) + lane];
                        precise float ya = x0 * c - x1 * sn, yb = x0 * sn + x1 * c; // as rope.comp
                        Y[o] = (j & 1u) == 0u ? ya : yb;
                    } else {
                        Y[o] = ys[lid];
                    }
                }
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
            Y[o] = (p.accumulate & 1u) != 0u ? Y[o] + red[lid][0] : red[lid][0];
        }
        barrier();
    }
}
