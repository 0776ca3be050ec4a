// The body of attn.comp and (ATTN_PART defined) attn_part.comp.
//
// attn.comp: causal attention of one session's rows [row0, row0 + n) over its cache: one
// workgroup per (row, query head): scores over the positions the row sees into S (scratch), softmax (scaled;
// max; exp; sum), then the weighted sum of V rows. GQA: query head h reads KV head h / (n_head /
// n_head_kv). The positions a row at `pos` sees: first..pos, first = pos + 1 - window on a
// sliding-window layer (window > 0), else 0. Where position q lives (session/kv.c's segments):
// below n_prefix in the shared prefix's cache (binding 0, its own mode, slot q % prows); from
// stage_pos0 on in the session's stage (this pass's rows, K/V written there before a ring layer
// attends: the ring's slots may still hold positions earlier rows see), slot stage_row0 +
// q - stage_pos0; else in the session's cache, slot (q - n_prefix) % rows (a ring on sliding
// layers; rows >= every position elsewhere).
//
// attn_part.comp, the split attention of a session's few rows (decode), first half: one workgroup
// per (row, query head, chunk c) takes the chunk's positions first + c ch .. first + c ch + ch - 1
// of those the row sees and runs the same steps on them alone (the same tiles, scores, softmax
// steps and sums, so the same bits as before the two shared this body), unnormalized: it writes
// the chunk's max m, its sum l and, per value channel, the sum of e^(s - m) V in position order,
// [m, l, o[0..hv)], to the chunk's slot of the partials (binding 5: slot (t n_head + h)
// sp_stride + c, hv + 2 floats each); attn_merge.comp combines the chunks. Chunks past the row's
// positions write nothing. Sums in another order than cpu_scalar's (docs/VULKAN.md "Exactness");
// no fused multiply-adds.
//
// ATTN_FRESH defined (attn_fresh, attn_part_fresh: vulkan_only builds), for passes of one row a
// session (decode), F32 or F16 caches and heads of at most 256: the row's own K and V come from
// the products' scratch (bindings 8, 9), not from its cache: bit 0 of `fresh` normalizes the
// row's q and k heads (the QK norm, rmsnorm.comp's steps, norm vectors at q_norm / k_norm of
// binding 7), bit 1 rotates them (rope.comp's; bit 2 NEOX pairs; the pass inputs' cos/sin at
// rope_at), the cache's rounding then applied (F16), and the first chunk of a KV head's first
// query head stores the row's K and V in the cache as kvstore.comp does (no other workgroup of
// the dispatch reads that slot: the others take the same values from the scratch). The same
// values and bits as the norm, rope and kvstore dispatches before it, without their three
// barriers. With qout (1: blocks of 32, 2: of 256; heads of whole blocks), the row's output
// heads also go straight into the 8-bit rows O's product takes (quant.comp's words and scales of
// these floats, actq.glsl's arithmetic: the same bits), each head by the workgroup that makes it
// (the merging one when split): quant.comp's dispatch and barrier before O are gone.
//
// ATTN_GROUP defined (the *_grp builds: vulkan only): a workgroup takes GSZ query heads of one KV
// head (a specialization constant, vk_forward.c's attn_group: 2 to 4, dividing the heads a KV head
// serves), h0 .. h0 + GSZ - 1, and loads each K and V tile once for all of them (one head a
// workgroup loaded every tile once per query head: the prefill's attention was bound by those
// loads). Each head's scores, maxima, exponentials, sums and weighted V sums are the one-head
// steps in the same order, so the same bits. Their scores share the shared memory's 2,048 floats
// (SH_TOTAL / GSZ positions a head; longer rows keep theirs in S, vk_forward.c's scores
// buffer); the query heads lie interleaved in qs (value i of head k at i GSZ + k: the lanes of
// different heads read different banks).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer PKVb { uint PKV[]; };
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 2) readonly buffer Qb { float Q[]; };
layout(std430, binding = 3) writeonly buffer Ob { float O[]; };
// attn.comp: the rows' scores when they do not fit ssh; attn_part.comp: the chunks' partials
layout(std430, binding = 5) coherent buffer Sb { float S[]; };
#ifdef ATTN_PART
// per (row, query head) the chunks done so far this step (the last one merges and sets it back
// to 0; vk_forward.c zeroes it at each pass's start)
layout(std430, binding = 4) coherent buffer Cb { uint CNT[]; };
#endif
layout(std430, binding = 6) readonly buffer KVb { uint KV[]; };
#ifdef ATTN_FRESH
layout(std430, binding = 7) readonly buffer Nb { float NW[]; };
layout(std430, binding = 8) readonly buffer Kcb { float KC[]; };
layout(std430, binding = 9) readonly buffer Vcb { float VC[]; };
layout(std430, binding = 10) writeonly buffer KVWb { uint KVW[]; }; // binding 6's buffer
layout(std430, binding = 11) writeonly buffer AQb { uint AQ[]; };    // qout: the 8-bit rows
layout(std430, binding = 12) writeonly buffer ADb { float AD[]; };   // and their block scales
#endif
layout(push_constant) uniform P {
    uint row0, n_head, n_head_kv, hk, hv, k_at, v_at, mode, s_stride;
    float scale;
    uint window, n_prefix, rows, stage_pos0, stage_row0, sk_at, sv_at, pmode, pk_at, pv_at, prows;
#if defined(ATTN_PART) || defined(ATTN_FRESH)
    uint n_split, ch, sp_stride; // chunks per (row, head) dispatched, positions per chunk, slots per (row, head)
#endif
#ifdef ATTN_FRESH
    uint fresh, q_norm, k_norm;
    float eps;
    uint n_rot, rope_at, qout;
#endif
} p;
#ifdef ATTN_GROUP
layout(constant_id = 0) const uint GSZ = 1u; // query heads a workgroup
#define GMAX 4u                               // GSZ at most
#define SH_TOTAL 2048u
#define VT_FLOATS 4112u // 16 positions of a head of 256 (the 32 KiB below with 4 query heads)
#else
#define GSZ 1u
#define GMAX 1u
#define SH_TOTAL 3072u
#define VT_FLOATS 4160u
#endif
shared float red[64];
// The row's scores / weights in shared memory when they fit (SHP positions a head), else in S:
// the same values either way; the output loop's weights then come without a global load each. A
// chunk of the split always fits (vk_forward.c's SPLIT_SH, GROUP_SH: SH_TOTAL).
const uint SHP = SH_TOTAL / GSZ;
shared float ssh[SH_TOTAL];
// Tiles of K or V rows (VT_FLOATS values: 64 positions of a head of 64, 63 of its K rows in the
// grouped builds, 16 of 256), loaded by
// the whole workgroup at once, a tile's positions in one segment (prefix, own cache, stage: one
// buffer, one mode), its INT8 rows' scales in tsc; K rows hk + 1 floats apart (lane jj reads row
// jj: an odd stride keeps the lanes on different banks), V rows hv apart (lane i reads value i);
// the query rows in qs (QI). Heads up to 256 values (a lane's 4 V accumulators). Within the 32
// KiB of shared memory every device offers (lavapipe's limit).
#define QS_MAX 256u
shared float vt[VT_FLOATS];
shared float tsc[64];
shared float tw[GMAX * 64u]; // a V tile's softmax weights, 64 a head (and the heads' maxima)
shared float qs[GMAX * QS_MAX];
uint QI(uint k, uint i) { return i * GSZ + k; } // value i of the workgroup's head k in qs
#ifdef ATTN_PART
#define use_sh true // a chunk fits
#define sbase 0u
#else
bool use_sh;
uint sbase; // head k's scores at sbase + k s_stride of S
#endif
float sget(uint k, uint j) { return use_sh ? ssh[k * SHP + j] : S[sbase + k * p.s_stride + j]; }
void sset(uint k, uint j, float v) {
    if (use_sh) ssh[k * SHP + j] = v;
    else S[sbase + k * p.s_stride + j] = v;
}
#include "vexp.glsl"
#include "attn_kv.glsl"
#include "clock.glsl"
// the clock build's marks (clock.glsl): 0x10 attn, 0x20 attn_part, 0x30 attn_fresh, 0x40
// attn_part_fresh, each + 0x40 grouped
#ifdef ATTN_PART
#define AK_PART 1u
#else
#define AK_PART 0u
#endif
#ifdef ATTN_FRESH
#define AK_FRESH 2u
#else
#define AK_FRESH 0u
#endif
#ifdef ATTN_GROUP
#define AK_GRP 4u
#else
#define AK_GRP 0u
#endif
#define AT_MARK(pt) clock_mark(0x10u * (1u + AK_PART + AK_FRESH + AK_GRP) + (pt))
#ifdef ATTN_FRESH
#define RMS_FINISH_ONLY
#include "rmsscale.glsl"
#include "f16.glsl"
uint f_pos; // the row's position
uint f_vb;  // its V head's first float in the scratch
// its K head as the cache holds it (normed, rotated, rounded), written by fresh_prologue
shared float kcur[QS_MAX];
float round_kv(float x) { return p.mode == 1u ? f16_round(x) : x; }
// The row's q heads (the workgroup's GSZ from qb on) into qs normed and rotated, its k head into
// kcur normed, rotated and rounded (every lane calls it; qs holds Q's values): rmsnorm.comp's and
// rope.comp's arithmetic, the values each lane needs loaded at once (a head of at most 256: 4 a
// lane, 2 pairs a lane).
void fresh_prologue(uint t, uint g, uint qb, uint lid) {
    f_pos = IN[4u * t + 1u];
    f_vb = (t * p.n_head_kv + g) * p.hv;
    uint kb = (t * p.n_head_kv + g) * p.hk;
    bool normed = (p.fresh & 1u) != 0u, roped = (p.fresh & 2u) != 0u, neox = (p.fresh & 4u) != 0u;
    uint hr = p.n_rot / 2u;
    float kv[4], qw[4], kw[4], cs[2], sn[2];
    for (uint k = 0u; k < 4u; k++) {
        uint i = min(lid + 64u * k, p.hk - 1u);
        kv[k] = KC[kb + i];
        qw[k] = normed ? NW[p.q_norm + i] : 1.0;
        kw[k] = normed ? NW[p.k_norm + i] : 1.0;
    }
    for (uint k = 0u; k < 2u; k++) {
        uint j = min(lid + 64u * k, max(hr, 1u) - 1u);
        cs[k] = roped ? uintBitsToFloat(IN[p.rope_at + t * p.n_rot + j]) : 0.0;
        sn[k] = roped ? uintBitsToFloat(IN[p.rope_at + t * p.n_rot + hr + j]) : 0.0;
    }
    float ksc = 1.0;
    if (normed) { // rms_scale's sums: each lane its values in order
        vec2 sk = vec2(0.0);
        for (uint k = 0u; k < 4u; k++)
            if (lid + 64u * k < p.hk) sk = ff_add(sk, ff_sq(kv[k]));
        ksc = rms_finish(sk, p.hk, p.eps, lid);
    }
    for (uint hh = 0u; hh < GSZ; hh++) {
        float qv[4];
        for (uint k = 0u; k < 4u; k++) qv[k] = Q[qb + hh * p.hk + min(lid + 64u * k, p.hk - 1u)];
        float qsc = 1.0;
        if (normed) {
            vec2 sq = vec2(0.0);
            for (uint k = 0u; k < 4u; k++)
                if (lid + 64u * k < p.hk) sq = ff_add(sq, ff_sq(qv[k]));
            qsc = rms_finish(sq, p.hk, p.eps, lid);
        }
        for (uint k = 0u; k < 4u; k++) {
            uint i = lid + 64u * k;
            if (i >= p.hk) break;
            float q = qv[k];
            if (normed) { // rmsnorm.comp's (x * scale) * w
                precise float v = q * qsc;
                precise float o = v * qw[k];
                q = o;
            }
            qs[QI(hh, i)] = q;
        }
    }
    for (uint k = 0u; k < 4u; k++) {
        uint i = lid + 64u * k;
        if (i >= p.hk) break;
        float x = kv[k];
        if (normed) {
            precise float vk = x * ksc;
            precise float ok = vk * kw[k];
            x = ok;
        }
        kcur[i] = roped && i < p.n_rot ? x : round_kv(x); // the rotated ones: rounded below
    }
    if (roped) {
        barrier(); // qs, kcur written by every lane
        for (uint k = 0u; k < 2u; k++) { // a pair a lane, read then written by it alone
            uint j = lid + 64u * k;
            if (j >= hr) break;
            uint a = neox ? j : 2u * j, b = neox ? j + hr : 2u * j + 1u;
            float c = cs[k], s = sn[k];
            for (uint hh = 0u; hh < GSZ; hh++) {
                float x0 = qs[QI(hh, a)], x1 = qs[QI(hh, b)];
                precise float ya = x0 * c - x1 * s, yb = x0 * s + x1 * c; // rope.comp's
                qs[QI(hh, a)] = ya;
                qs[QI(hh, b)] = yb;
            }
            float k0 = kcur[a], k1 = kcur[b];
            precise float ka = k0 * c - k1 * s, kb2 = k0 * s + k1 * c;
            kcur[a] = round_kv(ka);
            kcur[b] = round_kv(kb2);
        }
    }
    barrier(); // qs and kcur complete
}
#include "attn_store.glsl"
// the row's own value i (K or V) as the cache holds it
float cur_val(bool v, uint i) { return v ? round_kv(VC[f_vb + i]) : kcur[i]; }
// qout: the head's output values, kept in qs (the query's, read by no lane after the scores)
// and quantized from there into the words and scales of head h of row t
uint q_w0, q_b0, q_hh; // q_hh: the workgroup's head the values are of
float act_x(uint i) { return qs[QI(q_hh, i)]; }
void aq_put(uint w, uint word) { AQ[q_w0 + w] = word; }
void ad_put(uint b, float d) { AD[q_b0 + b] = d; }
// its rounds' shared floats over the scores (read by no lane once the heads' sums are made:
// the kernel stays within 32 KiB)
#define ACTQ_SH(i) ssh[i]
#include "actq.glsl"
#define QOUT(k, i, v) qs[QI(k, i)] = (v)
void quant_out(uint t, uint h, uint k, uint lid) { // head h, the workgroup's k: every lane (barriers)
    barrier(); // qs holds the whole head
    q_hh = k;
    uint rh = t * p.n_head + h;
    q_w0 = rh * (p.hv / 4u);
    q_b0 = rh * (p.hv / (p.qout == 2u ? 256u : 32u));
    actq_round(0u, 0u, p.hv / 4u, lid, p.qout == 2u);
}
#else
#define QOUT(k, i, v)
#endif
#ifdef ATTN_PART
shared uint last; // this workgroup holds the row's last chunk
#define wsh red
uint out_at;
#define MERGE_PT(i) S[i]
uint merge_k; // the workgroup's head being merged
#define MERGE_OUT(i, v) { O[out_at + (i)] = (v); QOUT(merge_k, i, v); }
#include "attn_merge.glsl"
#endif
// the end of the segment position q lies in (the prefix, the own cache, the stage), at most qmax
uint seg_end(uint q, uint qmax) {
    if (q < p.n_prefix) return min(qmax, p.n_prefix);
    if (q < p.stage_pos0) return min(qmax, p.stage_pos0);
    return qmax;
}
// word e of a tile as (its position jj, its word w): a shift where wph is a power of two (sh <
// 32: F32 / F16 rows of heads of 2^k), else a division (INT8 rows' scale word): two divisions a
// word were a large share of a tile's load
uvec2 word_at(uint e, uint wph, uint sh) {
    uint jj = sh < 32u ? e >> sh : e / wph;
    return uvec2(jj, e - jj * wph);
}
void put_word(uint e, uint x, uint mode, uint wph, uint sh, uint rs) {
    uvec2 jw = word_at(e, wph, sh);
    uint jj = jw.x, w = jw.y;
    if (mode == 1u) {
        vec2 h2 = unpackHalf2x16(x);
        vt[jj * rs + 2u * w] = h2.x;
        vt[jj * rs + 2u * w + 1u] = h2.y;
    } else if (mode == 0u) {
        vt[jj * rs + w] = uintBitsToFloat(x);
    } else if (w == 0u) {
        tsc[jj] = uintBitsToFloat(x);
    } else {
        for (uint k = 0u; k < 4u; k++) vt[jj * rs + 4u * (w - 1u) + k] = float(int(x << (24u - 8u * k)) >> 24);
    }
}
// LB words a lane loaded before any is stored (a lane issues in order: a load and its use in one
// loop step would wait the memory's latency every step); on the H200 LB = 16 beat 8 (a tile's
// words in fewer rounds) and 32 (the lane's arrays no longer in registers: 60 % slower)
#define LB 16u
// Positions q0 .. q0 + nt - 1 (one segment) of KV head g: their K (v false) or V rows of hd
// values into vt[jj * rs + i] by put_word; the segment's slots run on from q0's, wrapping at its
// ring (loc()'s modulus; the stage's never wraps): no division a word.
void load_tile(uint q0, uint nt, bool v, uint hd, uint rs, uint g, uint lid) {
    Loc l0 = loc(q0);
    uint mode = l0.mode;
    uint wph = mode == 2u ? 1u + hd / 4u : (mode == 1u ? hd / 2u : hd);
    uint sh = (wph & (wph - 1u)) == 0u ? uint(findMSB(wph)) : 32u; // word_at's
    uint rw = p.n_head_kv * wph, base = (v ? l0.v : l0.k) + g * wph;
    uint ring = l0.pre ? p.prows : (q0 >= p.stage_pos0 ? 0xFFFFFFFFu : p.rows);
    uint n = nt * wph;
#ifdef ATTN_FRESH
    uint cj = f_pos - q0; // the row's own position in the tile, if there (the last: < nt)
    bool own = !l0.pre && f_pos >= q0 && cj < nt;
#endif
    for (uint e0 = lid; e0 < n; e0 += 64u * LB) {
        uint xs[LB];
        uint at[LB];
        uint curm = 0u; // bit u: word u is the row's own position's (ATTN_FRESH)
        for (uint u = 0u; u < LB; u++) {
            uint e = min(e0 + 64u * u, n - 1u), jj = word_at(e, wph, sh).x;
            uint s = l0.slot + jj;
            s = s >= ring ? s - ring : s;
            at[u] = base + s * rw + (e - jj * wph);
#ifdef ATTN_FRESH
            if (own && jj == cj && e0 + 64u * u < n) curm |= 1u << u;
#endif
        }
        if (l0.pre)
            for (uint u = 0u; u < LB; u++) xs[u] = PKV[at[u]];
        else
            for (uint u = 0u; u < LB; u++) xs[u] = (curm >> u & 1u) != 0u ? 0u : KV[at[u]];
        for (uint u = 0u; u < LB; u++) {
            uint e = e0 + 64u * u;
#ifdef ATTN_FRESH
            if ((curm >> u & 1u) != 0u) { // the row's own position: its values from the scratch
                uint w = e - cj * wph;
                if (mode == 1u) {
                    vt[cj * rs + 2u * w] = cur_val(v, 2u * w);
                    vt[cj * rs + 2u * w + 1u] = cur_val(v, 2u * w + 1u);
                } else {
                    vt[cj * rs + w] = cur_val(v, w);
                }
                continue;
            }
#endif
            if (e < n) put_word(e, xs[u], mode, wph, sh, rs);
        }
    }
}
// the workgroup's query head k . the tile's row jj as score() sums it (kv.c's order)
float score_tile(uint jj, uint k, uint mode) {
    uint o = jj * (p.hk + 1u);
    if (mode == 2u) {
        precise float acc = 0.0;
        for (uint i = 0u; i < p.hk; i++) {
            precise float pr = qs[QI(k, i)] * vt[o + i];
            acc = acc + pr;
        }
        precise float dt = acc * tsc[jj];
        return dt;
    }
    uint n8 = p.hk / 8u * 8u;
    // score()'s 8 lanes a[k] as 8 named sums (registers, not a local array)
    precise float a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0, a4 = 0.0, a5 = 0.0, a6 = 0.0, a7 = 0.0;
    for (uint i = 0u; i < n8; i += 8u) {
        uint c = o + i;
        precise float p0 = qs[QI(k, i)] * vt[c], p1 = qs[QI(k, i + 1u)] * vt[c + 1u];
        precise float p2 = qs[QI(k, i + 2u)] * vt[c + 2u], p3 = qs[QI(k, i + 3u)] * vt[c + 3u];
        precise float p4 = qs[QI(k, i + 4u)] * vt[c + 4u], p5 = qs[QI(k, i + 5u)] * vt[c + 5u];
        precise float p6 = qs[QI(k, i + 6u)] * vt[c + 6u], p7 = qs[QI(k, i + 7u)] * vt[c + 7u];
        a0 = a0 + p0;
        a1 = a1 + p1;
        a2 = a2 + p2;
        a3 = a3 + p3;
        a4 = a4 + p4;
        a5 = a5 + p5;
        a6 = a6 + p6;
        a7 = a7 + p7;
    }
    precise float t0 = a0 + a4, t1 = a1 + a5, t2 = a2 + a6, t3 = a3 + a7;
    precise float s = (t0 + t2) + (t1 + t3);
    for (uint i = n8; i < p.hk; i++) {
        precise float pr = qs[QI(k, i)] * vt[o + i];
        s = s + pr;
    }
    return s;
}
void main() {
    uint ngrp = p.n_head / GSZ; // workgroups a row (and chunk)
#ifdef ATTN_PART
    // chunk c of (row, head group) rg: the positions first + c ch .. of those the row sees
    uint c = gl_WorkGroupID.x % p.n_split, rg = gl_WorkGroupID.x / p.n_split;
#else
    // the longest rows first: a session's later rows see more positions, and launched last
    // they were the tail of a long step (the dispatch's count is its workgroups: vk_forward.c
    // keeps rows x heads below MAX_GROUPS_X)
    uint c = 0u, rg = gl_NumWorkGroups.x - 1u - gl_WorkGroupID.x;
#endif
    uint t = p.row0 + rg / ngrp, h0 = (rg % ngrp) * GSZ; // heads h0 .. h0 + GSZ - 1
    uint lid = gl_LocalInvocationID.x;
    clock_start();
    AT_MARK(0u);
    uint pos = IN[4u * t + 1u];
    uint first = p.window > 0u && pos + 1u > p.window ? pos + 1u - p.window : 0u;
    uint n_ctx = pos - first + 1u;
    // kv.c: softmax_f16_plain when every segment the row reads is F16
    bool f16 = p.mode == 1u && (first >= p.n_prefix || p.pmode == 1u);
#ifdef ATTN_PART
    if (c * p.ch >= n_ctx) return; // the whole workgroup: a row with fewer chunks than the dispatch's
    uint rnc = min((n_ctx + p.ch - 1u) / p.ch, MAX_SPLIT); // the row's chunks
    first += c * p.ch; // from here on the chunk's positions stand for the row's
    n_ctx = min(p.ch, n_ctx - c * p.ch);
#else
    // the row's own scores: sessions of one step may run at once (vk_forward.c puts no barrier
    // between their dispatches)
    use_sh = n_ctx <= SHP;
    sbase = (t * p.n_head + h0) * p.s_stride;
#endif
    uint g = h0 / (p.n_head / p.n_head_kv);
    uint qb = (t * p.n_head + h0) * p.hk; // head k's q at qb + k hk
    // heads that fit the tiles take them (K, then V); wider ones read each value in the chain
    bool tiled = p.hk <= QS_MAX && p.hk + 1u <= VT_FLOATS && p.hv <= VT_FLOATS && p.hv <= 256u;
    float mx[GMAX];
    for (uint k = 0u; k < GMAX; k++) mx[k] = -1.0 / 0.0;
    if (tiled) {
        for (uint k = 0u; k < GSZ; k++)
            for (uint i = lid; i < p.hk; i += 64u) qs[QI(k, i)] = Q[qb + k * p.hk + i];
#ifdef ATTN_FRESH
        fresh_prologue(t, g, qb, lid);
        if (h0 % (p.n_head / p.n_head_kv) == 0u && c == 0u) store_row_kv(g, lid, 64u);
#endif
        AT_MARK(1u); // the query heads (fresh: normed, rotated; the row's K/V stored)
        uint ntk = min(VT_FLOATS / (p.hk + 1u), 64u);
        for (uint j0 = 0u; j0 < n_ctx;) {
            uint nt = min(ntk, seg_end(first + j0, first + n_ctx) - (first + j0));
            uint mode = loc(first + j0).mode;
            barrier(); // qs written; the last tile's reads done
            load_tile(first + j0, nt, false, p.hk, p.hk + 1u, g, lid);
            barrier();
            // (head k, position jj) pairs on the lanes: every lane busy on heads of 256 (16
            // positions a tile) once GSZ is 4
            for (uint u = lid; u < GSZ * nt; u += 64u) {
                uint k = GSZ == 1u ? 0u : u / nt, jj = u - k * nt;
                precise float sc = score_tile(jj, k, mode) * p.scale;
                sset(k, j0 + jj, sc);
                for (uint kk = 0u; kk < GMAX; kk++) // a constant index: mx stays in registers
                    if (kk == k) mx[kk] = max(mx[kk], sc);
            }
            j0 += nt;
        }
    } else {
        for (uint k = 0u; k < GSZ; k++)
            for (uint j = lid; j < n_ctx; j += 64u) {
                precise float sc = score(loc(first + j), g, qb + k * p.hk) * p.scale;
                sset(k, j, sc);
                mx[k] = max(mx[k], sc);
            }
    }
    AT_MARK(2u); // the scores (lane 0's)
    // each head's maximum over the lanes (tw: no V tile's weights yet)
    for (uint k = 0u; k < GSZ; k++) tw[k * 64u + lid] = mx[k];
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (lid < s)
            for (uint k = 0u; k < GSZ; k++) tw[k * 64u + lid] = max(tw[k * 64u + lid], tw[k * 64u + lid + s]);
        barrier();
    }
    for (uint k = 0u; k < GSZ; k++) mx[k] = tw[k * 64u];
    if (!use_sh) memoryBarrierBuffer(); // S's scores seen by every lane (ssh: the barrier's)
    barrier();
    AT_MARK(3u); // the maxima
    // every lane's exponentials (in ssh or S: two loops, as the sums below), then 8 lanes' sums
    for (uint k = 0u; k < GSZ; k++) {
        if (use_sh) {
            for (uint j = lid; j < n_ctx; j += 64u) {
                precise float x = ssh[k * SHP + j] - mx[k];
                ssh[k * SHP + j] = f16 ? vexp1(x) : exp(x);
            }
        } else {
            for (uint j = lid; j < n_ctx; j += 64u) {
                precise float x = S[sbase + k * p.s_stride + j] - mx[k];
                S[sbase + k * p.s_stride + j] = f16 ? vexp1(x) : exp(x);
            }
        }
    }
    if (!use_sh) memoryBarrierBuffer();
    barrier();
    AT_MARK(4u); // the exponentials
    if (lid < 8u * GSZ) { // head lid / 8, its lane lid % 8: positions first + l, first + l + 8, ... in order
        // (two loops, not sget's choice in the loop: the driver may load S beside ssh on every
        // step, a global load in the chain)
        uint k = lid >> 3, l = lid & 7u;
        precise float sum = 0.0;
        if (use_sh) {
            for (uint j = l; j < n_ctx; j += 8u) {
                float e = ssh[k * SHP + j];
                sum = sum + e;
            }
        } else {
            for (uint j = l; j < n_ctx; j += 8u) {
                float e = S[sbase + k * p.s_stride + j];
                sum = sum + e;
            }
        }
        red[lid] = sum;
    }
    barrier();
    float inv[GMAX];
    for (uint k = 0u; k < GSZ; k++) {
        uint r = 8u * k;
        precise float tot = ((red[r] + red[r + 1u]) + (red[r + 2u] + red[r + 3u])) +
                            ((red[r + 4u] + red[r + 5u]) + (red[r + 6u] + red[r + 7u]));
#ifdef ATTN_PART
        inv[k] = 1.0; // the chunk's sums unnormalized (attn_merge.comp divides)
        if (lid == 0u) {
            uint slot = ((t * p.n_head + h0 + k) * p.sp_stride + c) * (p.hv + 2u);
            S[slot] = mx[k];
            S[slot + 1u] = tot;
        }
#else
        inv[k] = fdiv_rn(1.0, tot);
#endif
    }
#ifdef ATTN_PART
    AT_MARK(5u); // the sums
#define OUT(k, i, v) S[((t * p.n_head + h0 + (k)) * p.sp_stride + c) * (p.hv + 2u) + 2u + (i)] = (v)
#else
    AT_MARK(5u);
#define OUT(k, i, v) { O[(t * p.n_head + h0 + (k)) * p.hv + (i)] = (v); QOUT(k, i, v); }
#endif
    if (tiled) {
        // the sum of w V over tiles: each lane adds its values' products in position order, the
        // same products and sums as the loop below, so the same bits
        uint ntv = min(VT_FLOATS / p.hv, 64u);
        // values lid + 64 m of each head in 4 accumulators (registers: heads up to 256)
        precise float o[GMAX][4];
        for (uint k = 0u; k < GMAX; k++)
            for (uint m = 0u; m < 4u; m++) o[k][m] = 0.0;
        uint i0 = min(lid, p.hv - 1u), i1 = min(lid + 64u, p.hv - 1u);
        uint i2 = min(lid + 128u, p.hv - 1u), i3 = min(lid + 192u, p.hv - 1u);
        for (uint j0 = 0u; j0 < n_ctx;) {
            uint nt = min(ntv, seg_end(first + j0, first + n_ctx) - (first + j0));
            bool m2 = loc(first + j0).mode == 2u;
            barrier(); // the last tile's reads are done
            load_tile(first + j0, nt, true, p.hv, p.hv, g, lid);
            // the tile's weights, each once (no global load in the chain below)
            for (uint u = lid; u < GSZ * nt; u += 64u) {
                uint k = GSZ == 1u ? 0u : u / nt, jj = u - k * nt;
                float iv = inv[0];
                for (uint kk = 1u; kk < GMAX; kk++)
                    if (kk == k) iv = inv[kk];
                precise float w = sget(k, j0 + jj) * iv;
                tw[k * 64u + jj] = w;
            }
            barrier();
            if (m2) { // INT8: (w * scale) * code, as the plain loop (tsc: written by the tile's load)
                for (uint u = lid; u < GSZ * nt; u += 64u) {
                    uint k = GSZ == 1u ? 0u : u / nt, jj = u - k * nt;
                    precise float ws = tw[k * 64u + jj] * tsc[jj];
                    tw[k * 64u + jj] = ws;
                }
                barrier();
            }
            if (p.hv <= 64u) {
                for (uint jj = 0u; jj < nt; jj++) {
                    float v0 = vt[jj * p.hv + i0];
                    for (uint k = 0u; k < GSZ; k++) {
                        precise float pr = tw[k * 64u + jj] * v0;
                        o[k][0] = o[k][0] + pr;
                    }
                }
            } else {
                for (uint jj = 0u; jj < nt; jj++) {
                    uint r = jj * p.hv;
                    float v0 = vt[r + i0], v1 = vt[r + i1], v2 = vt[r + i2], v3 = vt[r + i3];
                    for (uint k = 0u; k < GSZ; k++) {
                        float w = tw[k * 64u + jj];
                        precise float pr0 = w * v0, pr1 = w * v1, pr2 = w * v2, pr3 = w * v3;
                        o[k][0] = o[k][0] + pr0;
                        o[k][1] = o[k][1] + pr1;
                        o[k][2] = o[k][2] + pr2;
                        o[k][3] = o[k][3] + pr3;
                    }
                }
            }
            j0 += nt;
        }
        AT_MARK(6u); // the V tiles' sums
        for (uint k = 0u; k < GSZ; k++) {
            if (lid < p.hv) OUT(k, lid, o[k][0]);
            if (lid + 64u < p.hv) OUT(k, lid + 64u, o[k][1]);
            if (lid + 128u < p.hv) OUT(k, lid + 128u, o[k][2]);
            if (lid + 192u < p.hv) OUT(k, lid + 192u, o[k][3]);
        }
    } else for (uint k = 0u; k < GSZ; k++) for (uint i = lid; i < p.hv; i += 64u) {
        // heads wider than a tile: each load in the chain
        precise float o = 0.0;
        for (uint j = 0u; j < n_ctx; j++) {
            Loc l = loc(first + j);
            precise float w = sget(k, j) * inv[k];
            if (l.mode == 2u) {
                uint r0 = l.v + l.slot * (p.n_head_kv * (1u + p.hv / 4u)) + g * (1u + p.hv / 4u);
                precise float ws = w * uintBitsToFloat(word(l.pre, r0));
                precise float pr = ws * float(code8(l.pre, r0, i));
                o = o + pr;
            } else {
                precise float pr = w * elem(l.pre, l.mode, l.v, l.slot * p.n_head_kv * p.hv + g * p.hv + i);
                o = o + pr;
            }
        }
        OUT(k, i, o);
    }
    AT_MARK(7u); // the outputs written
#if defined(ATTN_FRESH) && !defined(ATTN_PART)
    if (p.qout != 0u) {
        for (uint k = 0u; k < GSZ; k++) quant_out(t, h0 + k, k, lid);
        AT_MARK(10u); // O's 8-bit rows
    }
#endif
#ifdef ATTN_PART
    // The row's last chunk to finish merges them all (attn_merge.glsl: attn_merge.comp's
    // steps), so the merge takes no dispatch and barrier of its own: each chunk's partials made
    // visible to the device before it is counted, read after the count says all are there.
    memoryBarrierBuffer();
    barrier();
    if (lid == 0u) last = atomicAdd(CNT[t * p.n_head + h0], 1u) == rnc - 1u ? 1u : 0u;
    barrier();
    AT_MARK(last == 0u ? 8u : 9u); // counted: 8 done, 9 the merging one
    if (last == 0u) return; // the whole workgroup
    memoryBarrierBuffer();
    for (uint k = 0u; k < GSZ; k++) {
        if (k > 0u) barrier(); // the last head's reads of wsh done
        out_at = (t * p.n_head + h0 + k) * p.hv;
        merge_k = k;
        attn_merge((t * p.n_head + h0 + k) * p.sp_stride, rnc, p.hv, lid);
#ifdef ATTN_FRESH
        if (p.qout != 0u) quant_out(t, h0 + k, k, lid);
#endif
    }
    if (lid == 0u) CNT[t * p.n_head + h0] = 0u; // for the next layer's and step's chunks
    AT_MARK(11u); // merged (and O's 8-bit rows)
#endif
}
