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
layout(push_constant) uniform P {
    uint row0, n_head, n_head_kv, hk, hv, k_at, v_at, mode, s_stride;
    float scale;
    uint window, n_prefix, rows, stage_pos0, stage_row0, sk_at, sv_at, pmode, pk_at, pv_at, prows;
#ifdef ATTN_PART
    uint n_split, ch, sp_stride; // chunks per (row, head) dispatched, positions per chunk, slots per (row, head)
#endif
} p;
shared float red[64];
// The row's scores / weights in shared memory when they fit (SH_MAX positions), else in S: the
// same values either way; the output loop's weights then come without a global load each. A
// chunk of the split always fits (vk_forward.c's SPLIT_SH).
#define SH_MAX 3072u
shared float ssh[SH_MAX];
// Tiles of K or V rows (VT_FLOATS values: 64 positions of a head of 64, 16 of 256), loaded by
// the whole workgroup at once, a tile's positions in one segment (prefix, own cache, stage: one
// buffer, one mode), its INT8 rows' scales in tsc; K rows hk + 1 floats apart (lane jj reads row
// jj: an odd stride keeps the lanes on different banks), V rows hv apart (lane i reads value i);
// the query row in qs. Heads up to 256 values (a lane's 4 V accumulators). Within the 32 KiB of
// shared memory every device offers (lavapipe's limit).
#define VT_FLOATS 4160u
#define QS_MAX 256u
shared float vt[VT_FLOATS];
shared float tsc[64];
shared float tw[64]; // a V tile's softmax weights
shared float qs[QS_MAX];
#ifdef ATTN_PART
#define use_sh true // a chunk fits
#define sbase 0u
#else
bool use_sh;
uint sbase;
#endif
float sget(uint j) { return use_sh ? ssh[j] : S[sbase + j]; }
void sset(uint j, float v) {
    if (use_sh) ssh[j] = v;
    else S[sbase + j] = v;
}
#include "vexp.glsl"
#include "attn_kv.glsl"
#ifdef ATTN_PART
shared uint last; // this workgroup holds the row's last chunk
#define wsh red
uint out_at;
#define MERGE_PT(i) S[i]
#define MERGE_OUT(i, v) O[out_at + (i)] = (v)
#include "attn_merge.glsl"
#endif
// the end of the segment position q lies in (the prefix, the own cache, the stage), at most qmax
uint seg_end(uint q, uint qmax) {
    if (q < p.n_prefix) return min(qmax, p.n_prefix);
    if (q < p.stage_pos0) return min(qmax, p.stage_pos0);
    return qmax;
}
void put_word(uint e, uint x, uint mode, uint wph, uint hd, uint rs) {
    uint jj = e / wph, w = e - jj * wph;
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
    uint rw = p.n_head_kv * wph, base = (v ? l0.v : l0.k) + g * wph;
    uint ring = l0.pre ? p.prows : (q0 >= p.stage_pos0 ? 0xFFFFFFFFu : p.rows);
    uint n = nt * wph;
    for (uint e0 = lid; e0 < n; e0 += 64u * LB) {
        uint xs[LB];
        uint at[LB];
        for (uint u = 0u; u < LB; u++) {
            uint e = min(e0 + 64u * u, n - 1u), jj = e / wph;
            uint s = l0.slot + jj;
            s = s >= ring ? s - ring : s;
            at[u] = base + s * rw + (e - jj * wph);
        }
        if (l0.pre)
            for (uint u = 0u; u < LB; u++) xs[u] = PKV[at[u]];
        else
            for (uint u = 0u; u < LB; u++) xs[u] = KV[at[u]];
        for (uint u = 0u; u < LB; u++) {
            uint e = e0 + 64u * u;
            if (e < n) put_word(e, xs[u], mode, wph, hd, rs);
        }
    }
}
// q.k of the tile's row jj as score() sums it (kv.c's order)
float score_tile(uint jj, uint mode) {
    uint o = jj * (p.hk + 1u);
    if (mode == 2u) {
        precise float acc = 0.0;
        for (uint i = 0u; i < p.hk; i++) {
            precise float pr = qs[i] * vt[o + i];
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
        precise float p0 = qs[i] * vt[c], p1 = qs[i + 1u] * vt[c + 1u];
        precise float p2 = qs[i + 2u] * vt[c + 2u], p3 = qs[i + 3u] * vt[c + 3u];
        precise float p4 = qs[i + 4u] * vt[c + 4u], p5 = qs[i + 5u] * vt[c + 5u];
        precise float p6 = qs[i + 6u] * vt[c + 6u], p7 = qs[i + 7u] * vt[c + 7u];
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
        precise float pr = qs[i] * vt[o + i];
        s = s + pr;
    }
    return s;
}
void main() {
#ifdef ATTN_PART
    // chunk c of (row, head) rh: the positions first + c ch .. of those the row sees
    uint c = gl_WorkGroupID.x % p.n_split, rh = gl_WorkGroupID.x / p.n_split;
#else
    uint c = 0u, rh = gl_WorkGroupID.x;
#endif
    uint t = p.row0 + rh / p.n_head, h = rh % p.n_head;
    uint lid = gl_LocalInvocationID.x;
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
    uint sb = (p.row0 * p.n_head + rh) * p.s_stride; // the row's own scores: sessions of one step
    // may run at once (vk_forward.c puts no barrier between their dispatches)
    use_sh = n_ctx <= SH_MAX;
    sbase = sb;
#endif
    uint g = h / (p.n_head / p.n_head_kv);
    uint qb = (t * p.n_head + h) * p.hk;
    // heads that fit the tiles take them (K, then V); wider ones read each value in the chain
    bool tiled = p.hk <= QS_MAX && p.hk + 1u <= VT_FLOATS && p.hv <= VT_FLOATS && p.hv <= 256u;
    float mx = -1.0 / 0.0;
    if (tiled) {
        for (uint i = lid; i < p.hk; i += 64u) qs[i] = Q[qb + i];
        uint ntk = min(VT_FLOATS / (p.hk + 1u), 64u);
        for (uint j0 = 0u; j0 < n_ctx;) {
            uint nt = min(ntk, seg_end(first + j0, first + n_ctx) - (first + j0));
            barrier(); // qs written; the last tile's reads done
            load_tile(first + j0, nt, false, p.hk, p.hk + 1u, g, lid);
            barrier();
            if (lid < nt) {
                precise float sc = score_tile(lid, loc(first + j0).mode) * p.scale;
                sset(j0 + lid, sc);
                mx = max(mx, sc);
            }
            j0 += nt;
        }
    } else {
        for (uint j = lid; j < n_ctx; j += 64u) {
            precise float sc = score(loc(first + j), g, qb) * p.scale;
            sset(j, sc);
            mx = max(mx, sc);
        }
    }
    red[lid] = mx;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (lid < k) red[lid] = max(red[lid], red[lid + k]);
        barrier();
    }
    mx = red[0];
    if (!use_sh) memoryBarrierBuffer(); // S's scores seen by every lane (ssh: the barrier's)
    barrier();
    // every lane's exponentials (in ssh or S: two loops, as the sums below), then 8 lanes' sums
    if (use_sh) {
        for (uint j = lid; j < n_ctx; j += 64u) {
            precise float x = ssh[j] - mx;
            ssh[j] = f16 ? vexp1(x) : exp(x);
        }
    } else {
        for (uint j = lid; j < n_ctx; j += 64u) {
            precise float x = S[sbase + j] - mx;
            S[sbase + j] = f16 ? vexp1(x) : exp(x);
        }
    }
    if (!use_sh) memoryBarrierBuffer();
    barrier();
    if (lid < 8u) { // lane lid: positions first + lid, first + lid + 8, ... in order
        // (two loops, not sget's choice in the loop: the driver may load S beside ssh on every
        // step, a global load in the chain)
        precise float sum = 0.0;
        if (use_sh) {
            for (uint j = lid; j < n_ctx; j += 8u) {
                float e = ssh[j];
                sum = sum + e;
            }
        } else {
            for (uint j = lid; j < n_ctx; j += 8u) {
                float e = S[sbase + j];
                sum = sum + e;
            }
        }
        red[lid] = sum;
    }
    barrier();
    precise float tot = ((red[0] + red[1]) + (red[2] + red[3])) + ((red[4] + red[5]) + (red[6] + red[7]));
#ifdef ATTN_PART
    float inv = 1.0; // the chunk's sums unnormalized (attn_merge.comp divides)
    uint slot = ((t * p.n_head + h) * p.sp_stride + c) * (p.hv + 2u);
    if (lid == 0u) {
        S[slot] = mx;
        S[slot + 1u] = tot;
    }
#define OUT(i, v) S[slot + 2u + (i)] = (v)
#else
    float inv = fdiv_rn(1.0, tot);
#define OUT(i, v) O[(t * p.n_head + h) * p.hv + (i)] = (v)
#endif
    if (tiled) {
        // the sum of w V over tiles: each lane adds its values' products in position order, the
        // same products and sums as the loop below, so the same bits
        uint ntv = min(VT_FLOATS / p.hv, 64u);
        // values lid + 64 k of the head in 4 named accumulators (registers: heads up to 256)
        precise float o0 = 0.0, o1 = 0.0, o2 = 0.0, o3 = 0.0;
        uint i0 = min(lid, p.hv - 1u), i1 = min(lid + 64u, p.hv - 1u);
        uint i2 = min(lid + 128u, p.hv - 1u), i3 = min(lid + 192u, p.hv - 1u);
        for (uint j0 = 0u; j0 < n_ctx;) {
            uint nt = min(ntv, seg_end(first + j0, first + n_ctx) - (first + j0));
            bool m2 = loc(first + j0).mode == 2u;
            barrier(); // the last tile's reads are done
            load_tile(first + j0, nt, true, p.hv, p.hv, g, lid);
            if (lid < nt) { // the tile's weights, each once (no global load in the chain below)
                precise float w = sget(j0 + lid) * inv;
                tw[lid] = w;
            }
            barrier();
            if (m2) { // INT8: (w * scale) * code, as the plain loop (tsc: written by the tile's load)
                if (lid < nt) {
                    precise float ws = tw[lid] * tsc[lid];
                    tw[lid] = ws;
                }
                barrier();
            }
            if (p.hv <= 64u) {
                for (uint jj = 0u; jj < nt; jj++) {
                    precise float pr = tw[jj] * vt[jj * p.hv + i0];
                    o0 = o0 + pr;
                }
            } else {
                for (uint jj = 0u; jj < nt; jj++) {
                    float w = tw[jj];
                    uint r = jj * p.hv;
                    precise float pr0 = w * vt[r + i0], pr1 = w * vt[r + i1];
                    precise float pr2 = w * vt[r + i2], pr3 = w * vt[r + i3];
                    o0 = o0 + pr0;
                    o1 = o1 + pr1;
                    o2 = o2 + pr2;
                    o3 = o3 + pr3;
                }
            }
            j0 += nt;
        }
        if (lid < p.hv) OUT(lid, o0);
        if (lid + 64u < p.hv) OUT(lid + 64u, o1);
        if (lid + 128u < p.hv) OUT(lid + 128u, o2);
        if (lid + 192u < p.hv) OUT(lid + 192u, o3);
    } else for (uint i = lid; i < p.hv; i += 64u) { // heads wider than a tile: each load in the chain
        precise float o = 0.0;
        for (uint j = 0u; j < n_ctx; j++) {
            Loc l = loc(first + j);
            precise float w = sget(j) * inv;
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
        OUT(i, o);
    }
#ifdef ATTN_PART
    // The row's last chunk to finish merges them all (attn_merge.glsl: attn_merge.comp's
    // steps), so the merge takes no dispatch and barrier of its own: each chunk's partials made
    // visible to the device before it is counted, read after the count says all are there.
    memoryBarrierBuffer();
    barrier();
    if (lid == 0u) last = atomicAdd(CNT[t * p.n_head + h], 1u) == rnc - 1u ? 1u : 0u;
    barrier();
    if (last == 0u) return; // the whole workgroup
    memoryBarrierBuffer();
    out_at = (t * p.n_head + h) * p.hv;
    attn_merge((t * p.n_head + h) * p.sp_stride, rnc, p.hv, lid);
    if (lid == 0u) CNT[t * p.n_head + h] = 0u; // for the next layer's and step's chunks
#endif
}
