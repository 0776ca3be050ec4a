#version 450
#extension GL_GOOGLE_include_directive : require
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
// of 32 only, the vulkan backend's choice on GPUs for products of few rows in steps of at most 8
// rows: vk_forward.c's dispatch_mv8), 2 rows per workgroup, 32 lanes each, a block a lane and
// round, the 8 lanes' sums then made from the blocks' floats in the same order: the same bits
// with a lane's weight loads at once, not a chain of them. With
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
// type & 255. Bit 5 (with bit 1, ROWS8 1; bit 6: GELU, else SiLU): the gated FFN's
// activation in the product: W is gate (n_out / 2 rows from byte w_off) and up (as many from
// byte y_off, the same buffer: GGUF files put other tensors between them), a workgroup's slots
// 0-3 4 gate rows and 4-7 the same 4 up rows, y[t * ldy + i] = act(gate_i) * up_i as act.comp
// (saving its dispatch and barrier). Bit 7 (ROWS8 1, without bit 5): a workgroup a token, the
// dispatch's workgroups n_tok times the row groups (token wg / groups): more workgroups for
// products of few rows in batched steps (vk_forward.c's dispatch_mv8), each token's sums as
// before, the same bits.
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
#include "idot.glsl"
#include "f16.glsl"
#include "exact.glsl"
#include "vexp.glsl"
#define NT 8u
#define SQ_WORDS 3072u
shared float red[NT][64];
shared float ys[64]; // bits 3 and 5: the rows' sums [slot][token], for the rotation or activation
shared float pb[2][NT][32]; // ROWS8 2: a round's block floats [row][token][block]
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
#include "clock.glsl"
#define MV_MARK(pt) clock_mark(0x90u + 16u * ROWS8 + (pt))

uint aqw(uint t, uint w) { // word w of token t's 8-bit row
    return selfq ? SQ[(t - chunk0) * (p.n_in >> 2) + w] : AQ[t * (p.n_in >> 2) + w];
}
float adv(uint t, uint b, uint nblk) { // block b's scale of token t's row
    return selfq ? SD[(t - chunk0) * nblk + b] : AD[t * nblk + b];
}

// the 4 bytes of the weights from even byte b (blocks of 32 sit at even offsets) as a word
uint w4(uint b) {
    uint i = b >> 2;
    return (b & 2u) == 0u ? W[i] : (W[i] >> 16) | (W[i + 1u] << 16);
}
// A block of 32 as 8 words of 4 codes, word w against the 8-bit activations' word w (values 4w..
// 4w + 3): Q8_0's signed, the others' unsigned, the value code - off (8 Q4_0, 16 Q5_0; quants.c
// sums n q and subtracts off sum(q): the same integers); d its scale, m (Q4_1) its min. Named
// words, not an array: a GPU keeps arrays indexed in loops in per-lane local memory.
struct Blk { uint c0, c1, c2, c3, c4, c5, c6, c7; float d, m; };
Blk block_w(uint row, uint b) {
    Blk k;
    k.m = 0.0;
    if (wtype == T_Q8_0) {
        uint bb = row + 34u * b;
        k.d = w_f16(bb);
        k.c0 = w4(bb + 2u), k.c1 = w4(bb + 6u), k.c2 = w4(bb + 10u), k.c3 = w4(bb + 14u);
        k.c4 = w4(bb + 18u), k.c5 = w4(bb + 22u), k.c6 = w4(bb + 26u), k.c7 = w4(bb + 30u);
        return k;
    }
    uint bb, q0, q1, q2, q3;
    if (wtype == T_Q5_0) {
        bb = row + 22u * b;
        q0 = w4(bb + 6u), q1 = w4(bb + 10u), q2 = w4(bb + 14u), q3 = w4(bb + 18u);
    } else {
        uint hdr = wtype == T_Q4_0 ? 2u : 4u;
        bb = row + (wtype == T_Q4_0 ? 18u : 20u) * b;
        q0 = w4(bb + hdr), q1 = w4(bb + hdr + 4u), q2 = w4(bb + hdr + 8u), q3 = w4(bb + hdr + 12u);
        if (wtype == T_Q4_1) k.m = w_f16(bb + 2u);
    }
    k.d = w_f16(bb);
    // byte j of the 16: value j (low nibble), value j + 16 (high nibble)
    k.c0 = q0 & 0x0F0F0F0Fu, k.c1 = q1 & 0x0F0F0F0Fu, k.c2 = q2 & 0x0F0F0F0Fu, k.c3 = q3 & 0x0F0F0F0Fu;
    k.c4 = (q0 >> 4) & 0x0F0F0F0Fu, k.c5 = (q1 >> 4) & 0x0F0F0F0Fu;
    k.c6 = (q2 >> 4) & 0x0F0F0F0Fu, k.c7 = (q3 >> 4) & 0x0F0F0F0Fu;
    if (wtype == T_Q5_0) { // bit j of qh: value j's fifth bit
        uint qh = w4(bb + 2u);
        k.c0 |= spread4(qh), k.c1 |= spread4(qh >> 4), k.c2 |= spread4(qh >> 8), k.c3 |= spread4(qh >> 12);
        k.c4 |= spread4(qh >> 16), k.c5 |= spread4(qh >> 20), k.c6 |= spread4(qh >> 24), k.c7 |= spread4(qh >> 28);
    }
    return k;
}
// block b's float for token t, cpu_scalar's (quants.c dot_q_32): (d_w * d_x) * isum
// [+ (m_w * d_x) * sum_x], without fused multiply-adds
float block_pr(Blk k, uint t, uint b, uint nb) {
    uint w0 = 8u * b;
    uint a0 = aqw(t, w0), a1 = aqw(t, w0 + 1u), a2 = aqw(t, w0 + 2u), a3 = aqw(t, w0 + 3u);
    uint a4 = aqw(t, w0 + 4u), a5 = aqw(t, w0 + 5u), a6 = aqw(t, w0 + 6u), a7 = aqw(t, w0 + 7u);
    int asum = bsum4(a0) + bsum4(a1) + bsum4(a2) + bsum4(a3) + bsum4(a4) + bsum4(a5) + bsum4(a6) +
               bsum4(a7); // integers: any order gives the same sums
    int isum;
    if (wtype == T_Q8_0) {
        isum = dot4ss(a0, k.c0) + dot4ss(a1, k.c1) + dot4ss(a2, k.c2) + dot4ss(a3, k.c3) +
               dot4ss(a4, k.c4) + dot4ss(a5, k.c5) + dot4ss(a6, k.c6) + dot4ss(a7, k.c7);
    } else {
        isum = dot4su(a0, k.c0) + dot4su(a1, k.c1) + dot4su(a2, k.c2) + dot4su(a3, k.c3) +
               dot4su(a4, k.c4) + dot4su(a5, k.c5) + dot4su(a6, k.c6) + dot4su(a7, k.c7);
        isum -= (wtype == T_Q4_0 ? 8 : (wtype == T_Q5_0 ? 16 : 0)) * asum;
    }
    float dx = adv(t, b, nb);
    precise float dd = k.d * dx;
    precise float pr = dd * float(isum);
    if (wtype == T_Q4_1) {
        precise float md = k.m * dx;
        precise float p2 = md * float(asum);
        pr = pr + p2;
    }
    return pr;
}

void main() {
    // rows beyond 65535 workgroups continue in y (a large vocabulary)
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x, lid = gl_LocalInvocationID.x;
    uint tb = 0u, te = p.n_tok; // the workgroup's tokens
    if (ROWS8 == 1u && (p.accumulate & 128u) != 0u) { // bit 7: token wg / groups alone
        uint groups = (p.n_out + 7u) / 8u;
        tb = wg / groups;
        te = tb + 1u;
        wg -= tb * groups;
    }
    clock_start();
    MV_MARK(0u);
    // ROWS8 1: 8 rows of 8 lanes; 2: 2 rows of 32 lanes
    uint slot = ROWS8 == 1u ? lid >> 3 : (ROWS8 == 2u ? lid >> 5 : 0u); // which of the workgroup's rows
    uint lane = ROWS8 == 1u ? lid & 7u : (ROWS8 == 2u ? lid & 31u : lid); // which lane of that row
    uint r = ROWS8 == 1u ? 8u * wg + slot : (ROWS8 == 2u ? 2u * wg + slot : wg);
    // bit 5 (ROWS8 1, with bit 1): W is gate and up (n_out / 2 rows each, from w_off and y_off),
    // slots 0-3 gate rows 4 wg + s, slots 4-7 the up rows of the same 4; y is act(gate) * up
    // (act.comp's pair mode)
    bool gated = ROWS8 == 1u && (p.accumulate & 34u) == 34u;
    uint gi = 4u * wg + (slot & 3u); // gated: the output value
    if (gated) r = (slot < 4u ? 0u : p.n_out >> 1) + gi;
    if (ROWS8 == 0u && r >= p.n_out) return; // the whole workgroup: before any barrier
    // ROWS8: the last workgroup's spare rows take the barriers only
    bool valid = gated ? gi < (p.n_out >> 1) : r < p.n_out;
    uint row = gated ? (slot < 4u ? p.w_off : p.y_off) + (valid ? gi : 0u) * p.row_bytes
                     : p.w_off + (valid ? r : 0u) * p.row_bytes;
    uint nb = p.n_in >> 5;
    selfq = ROWS8 != 0u && (p.accumulate & 2u) != 0u;
    normed = selfq && (p.accumulate & 16u) != 0u;
    wtype = ROWS8 != 0u ? p.type & 255u : p.type;
    nw0 = p.type >> 8;
    bool roped = selfq && (p.accumulate & 8u) != 0u;
    bool kq = wtype == T_Q4_K || wtype == T_Q6_K;
    for (uint t0 = tb; t0 < te; t0 += NT) {
        uint nt = min(NT, te - t0);
        chunk0 = t0;
        if (normed) // the chunk's rows' scales, each over the whole workgroup
            for (uint k = 0u; k < nt; k++) {
                float sc = rms_scale((t0 + k) * p.n_in, p.n_in, NORM_EPS, lid);
                if (lid == 0u) nscale[k] = sc;
            }
        if (normed) MV_MARK(1u); // the norm's scales (lane 0's)
        if (selfq) { // the chunk's rows, quantized by the whole workgroup, 64 words a round
            if (normed) barrier();
            uint nw = nt * (p.n_in >> 2); // the words' order is aqw's, their blocks' adv's
            for (uint w0 = 0u; w0 < nw; w0 += 64u) actq_round(t0 * p.n_in, w0, nw, lid, kq);
            barrier();
            MV_MARK(2u); // the 8-bit rows in shared memory
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
                    Blk kb = block_w(row, b);
                    for (uint k = 0u; k < nt; k++) {
                        pb[slot][k][lane] = block_pr(kb, t0 + k, b, nb);
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
                for (uint k = 0u; k < nt; k++) acc[k] += w * X[(t0 + k) * p.n_in + i];
            }
        } else if (valid && lane < 8u && (wtype == T_Q4_K || wtype == T_Q6_K)) {
            // super-blocks of 256 against fmt-1 activations (quant.comp), as quants.c dot_q_k:
            // integer A (and B) per block, then (d * dx) * A [- (dmin * dx) * B] into lane b % 8
            uint nbk = p.n_in >> 8;
            for (uint b = lane; b < nbk; b += 8u) {
                if (wtype == T_Q4_K) {
                    uint bb = row + 144u * b;
                    float d = w_f16(bb), dmin = w_f16(bb + 2u);
                    for (uint k = 0u; k < nt; k++) {
                        uint t = t0 + k;
                        int A = 0, B = 0;
                        for (uint j = 0u; j < 8u; j++) {
                            ivec2 sm = q4k_scale_min(bb + 4u, j);
                            uint g = bb + 16u + 32u * (j >> 1);
                            int sq = 0, sa = 0; // integers: any order gives the same sums
                            uint sh = (j & 1u) * 4u;
                            for (uint w = 0u; w < 8u; w++) {
                                uint qw = (w_word(g + 4u * w) >> sh) & 0x0F0F0F0Fu;
                                uint a = aqw(t, 64u * b + 8u * j + w);
                                sq += dot4su(a, qw);
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
                    for (uint k = 0u; k < nt; k++) {
                        uint t = t0 + k;
                        int A = 0;
                        for (uint g = 0u; g < 16u; g++) {
                            int sq = 0, sa = 0;
                            for (uint w = 0u; w < 4u; w++) {
                                uint l = 16u * g + 4u * w, a = aqw(t, 64u * b + 4u * g + w);
                                sq += dot4su(a, q6k_word(bb, l));
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
            // (d_w * d_x) * isum [+ (m_w * d_x) * sum_x], without fused multiply-adds. A block's
            // weights are read once for the chunk's tokens; a token's sum is a named value (not
            // acc[k], an array a GPU keeps in local memory when indexed in a loop)
            precise float s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0, s5 = 0.0, s6 = 0.0,
                          s7 = 0.0;
            for (uint b = lane; b < nb; b += 8u) {
                Blk kb = block_w(row, b);
                s0 = s0 + block_pr(kb, t0, b, nb);
                if (nt > 1u) s1 = s1 + block_pr(kb, t0 + 1u, b, nb);
                if (nt > 2u) s2 = s2 + block_pr(kb, t0 + 2u, b, nb);
                if (nt > 3u) s3 = s3 + block_pr(kb, t0 + 3u, b, nb);
                if (nt > 4u) s4 = s4 + block_pr(kb, t0 + 4u, b, nb);
                if (nt > 5u) s5 = s5 + block_pr(kb, t0 + 5u, b, nb);
                if (nt > 6u) s6 = s6 + block_pr(kb, t0 + 6u, b, nb);
                if (nt > 7u) s7 = s7 + block_pr(kb, t0 + 7u, b, nb);
            }
            acc[0] = s0, acc[1] = s1, acc[2] = s2, acc[3] = s3;
            acc[4] = s4, acc[5] = s5, acc[6] = s6, acc[7] = s7;
        }
        MV_MARK(3u); // lane 0's block sums
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
                if (roped || gated) ys[lid] = y;
                else Y[o] = y;
            }
            if (gated) {
                barrier();
                if (valid && slot < 4u && lane < nt) { // act.comp's arithmetic, the same bits
                    float x = ys[lid], u = ys[lid + 32u];
                    precise float z = x;
                    if ((p.accumulate & 64u) != 0u) { // GELU, its tanh form
                        precise float c = 0.044715 * x * x * x;
                        precise float xc = x + c;
                        z = 1.5957691216057308 * xc;
                    }
                    precise float den = 1.0 + vexp1(0.0 - z);
                    precise float g = fdiv_rn(x, den) * u;
                    Y[(t0 + lane) * p.ldy + gi] = g;
                }
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
            MV_MARK(4u); // the outputs written
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
        MV_MARK(4u);
    }
}
