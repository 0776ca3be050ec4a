#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Causal attention of one session's rows [row0, row0 + n) over its cache: one workgroup per
// (row, query head): scores over the positions the row sees into S (scratch), softmax (scaled;
// max; exp; sum), then the weighted sum of V rows. GQA: query head h reads KV head h / (n_head /
// n_head_kv). The positions a row at `pos` sees: first..pos, first = pos + 1 - window on a
// sliding-window layer (window > 0), else 0. Where position q lives (session/kv.c's segments):
// below n_prefix in the shared prefix's cache (binding 0, its own mode, slot q % prows); from
// stage_pos0 on in the session's stage (this pass's rows, K/V written there before a ring layer
// attends: the ring's slots may still hold positions earlier rows see), slot stage_row0 +
// q - stage_pos0; else in the session's cache, slot (q - n_prefix) % rows (a ring on sliding
// layers; rows >= every position elsewhere).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer PKVb { uint PKV[]; };
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 2) readonly buffer Qb { float Q[]; };
layout(std430, binding = 3) writeonly buffer Ob { float O[]; };
layout(std430, binding = 5) coherent buffer Sb { float S[]; };
layout(std430, binding = 6) readonly buffer KVb { uint KV[]; };
layout(push_constant) uniform P {
    uint row0, n_head, n_head_kv, hk, hv, k_at, v_at, mode, s_stride;
    float scale;
    uint window, n_prefix, rows, stage_pos0, stage_row0, sk_at, sv_at, pmode, pk_at, pv_at, prows;
} p;
shared float red[64];
// The row's scores / weights in shared memory when they fit (SH_MAX positions), else in S: the
// same values either way; the output loop's weights then come without a global load each.
// Tiles of K or V rows (VT_FLOATS values: 64 positions of a head of 64, 16 of 256): a tile is
// at most LB words a lane, fetched by the whole workgroup into registers while the tile before
// it is in use (so a tile's loads wait the memory's latency once, beside the sums), then put
// into shared memory; a tile's positions lie in one segment (prefix, own cache, stage: one
// buffer, one mode), its INT8 rows' scales in tsc; K rows hk + 8 floats apart (8 lanes on each
// of 4 rows read 32 banks), V rows hv apart (lane i reads value i); the query row in qs. Heads
// up to 64 NACC values (a lane's V accumulators). Shared memory stays within the 32 KiB every
// device offers (lavapipe's limit).
#define SH_MAX 2560u
shared float ssh[SH_MAX];
#define VT_FLOATS 4608u
#define KPAD 8u
#define NACC 8u
#define QS_MAX 256u
#define LB 32u
shared float vt[VT_FLOATS];
shared float tsc[64];
shared float tw[64]; // a V tile's softmax weights
shared float qs[QS_MAX];
shared float ska[64 * 8]; // a K tile's 8 partial sums a position (score's a[k])
bool use_sh;
uint sbase;
float sget(uint j) { return use_sh ? ssh[j] : S[sbase + j]; }
void sset(uint j, float v) {
    if (use_sh) ssh[j] = v;
    else S[sbase + j] = v;
}
#include "vexp.glsl"
#include "attn_kv.glsl"
// the end of the segment position q lies in (the prefix, the own cache, the stage), at most qmax
uint seg_end(uint q, uint qmax) {
    if (q < p.n_prefix) return min(qmax, p.n_prefix);
    if (q < p.stage_pos0) return min(qmax, p.stage_pos0);
    return qmax;
}
uint head_words(uint mode, uint hd) { return mode == 2u ? 1u + hd / 4u : (mode == 1u ? hd / 2u : hd); }
// the positions of the tile that starts at q (< qmax): as many as fit vt (rows rs floats apart),
// 64 and LB words a lane, inside q's segment
uint tile_len(uint q, uint qmax, uint hd, uint rs) {
    uint cap = min(min(VT_FLOATS / rs, 64u), 64u * LB / head_words(loc(q).mode, hd));
    return min(cap, seg_end(q, qmax) - q);
}
// The words of positions q0 .. q0 + nt - 1 (one segment) of KV head g, K (v false) or V rows of
// hd values, lane lid's (word e = lid + 64 u of the tile, u < LB; past the tile's end in its
// last 64: the tile's last word again): the loads only, none waited for here.
void fetch_tile(uint q0, uint nt, bool v, uint hd, uint g, uint lid, out uint xs[LB]) {
    Loc l0 = loc(q0);
    uint wph = head_words(l0.mode, hd);
    uint rw = p.n_head_kv * wph, base = (v ? l0.v : l0.k) + g * wph;
    // the segment's slots run on from q0's, wrapping at its ring (loc()'s modulus; the stage's
    // never wraps): no division a word
    uint ring = l0.pre ? p.prows : (q0 >= p.stage_pos0 ? 0xFFFFFFFFu : p.rows);
    uint n = nt * wph;
    uint at[LB];
    [[unroll]] for (uint u = 0u; u < LB; u++) {
        if (64u * u >= n) break; // (the same for every lane: a short tile loads no more)
        uint e = min(lid + 64u * u, n - 1u), jj = e / wph;
        uint s = l0.slot + jj;
        s = s >= ring ? s - ring : s;
        at[u] = base + s * rw + (e - jj * wph);
    }
    if (l0.pre) {
        [[unroll]] for (uint u = 0u; u < LB; u++) {
            if (64u * u >= n) break;
            xs[u] = PKV[at[u]];
        }
    } else {
        [[unroll]] for (uint u = 0u; u < LB; u++) {
            if (64u * u >= n) break;
            xs[u] = KV[at[u]];
        }
    }
}
// the fetched words into vt[jj * rs + i] as floats (INT8: the codes, each row's scale into
// tsc[jj]): the values elem() and code8() read, in the layouts session/kv.c writes
void put_tile(uint q0, uint nt, uint hd, uint rs, uint lid, uint xs[LB]) {
    uint mode = loc(q0).mode, wph = head_words(mode, hd), n = nt * wph;
    [[unroll]] for (uint u = 0u; u < LB; u++) {
        uint e = lid + 64u * u;
        if (e >= n) break;
        uint x = xs[u], jj = e / wph, w = e - jj * wph;
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
}
// an INT8 V tile row's weight times its scale (the product the plain loop forms first)
float w_scaled(uint jj) {
    precise float ws = tw[jj] * tsc[jj];
    return ws;
}
// q.k of the INT8 tile's row jj as score() sums it (one sum in channel order, then the scale)
float score_tile(uint jj) {
    uint o = jj * (p.hk + KPAD);
    precise float acc = 0.0;
    for (uint i = 0u; i < p.hk; i++) {
        precise float pr = qs[i] * vt[o + i];
        acc = acc + pr;
    }
    precise float dt = acc * tsc[jj];
    return dt;
}
void main() {
    uint t = p.row0 + gl_WorkGroupID.x / p.n_head, h = gl_WorkGroupID.x % p.n_head;
    uint lid = gl_LocalInvocationID.x;
    uint pos = IN[4u * t + 1u];
    uint first = p.window > 0u && pos + 1u > p.window ? pos + 1u - p.window : 0u;
    uint n_ctx = pos - first + 1u;
    uint last = first + n_ctx;
    uint g = h / (p.n_head / p.n_head_kv);
    uint qb = (t * p.n_head + h) * p.hk;
    uint sb = (p.row0 * p.n_head + gl_WorkGroupID.x) * p.s_stride; // the row's own scores: sessions
    // of one step may run at once (vk_forward.c puts no barrier between their dispatches)
    use_sh = n_ctx <= SH_MAX;
    sbase = sb;
    // heads that fit the tiles take them (K, then V); wider ones read each value in the chain
    bool tiled = p.hk <= QS_MAX && p.hk + KPAD <= VT_FLOATS && p.hv <= VT_FLOATS && p.hv <= 64u * NACC;
    float mx = -1.0 / 0.0;
    uint xs[LB];
    if (tiled) {
        for (uint i = lid; i < p.hk; i += 64u) qs[i] = Q[qb + i];
        uint q = first, nt = tile_len(q, last, p.hk, p.hk + KPAD);
        fetch_tile(q, nt, false, p.hk, g, lid, xs);
        while (q < last) {
            barrier(); // qs written; the last tile's reads done
            put_tile(q, nt, p.hk, p.hk + KPAD, lid, xs);
            barrier();
            uint q1 = q + nt, nt1 = q1 < last ? tile_len(q1, last, p.hk, p.hk + KPAD) : 0u;
            if (nt1 > 0u) fetch_tile(q1, nt1, false, p.hk, g, lid, xs); // in flight beside the sums
            if (loc(q).mode != 2u) {
                // lane (j, k) sums score()'s a[k] of the tile's position j (then j + 8, ...):
                // the same products added in the same order, 8 lanes a position, not one
                uint k = lid & 7u, n8 = p.hk / 8u * 8u;
                for (uint j = lid >> 3; j < nt; j += 8u) {
                    uint o = j * (p.hk + KPAD);
                    precise float a = 0.0;
                    for (uint i = k; i < n8; i += 8u) {
                        precise float pr = qs[i] * vt[o + i];
                        a = a + pr;
                    }
                    ska[8u * j + k] = a;
                }
                barrier();
                if (lid < nt) {
                    uint o = lid * (p.hk + KPAD), a0 = 8u * lid;
                    precise float t0 = ska[a0] + ska[a0 + 4u], t1 = ska[a0 + 1u] + ska[a0 + 5u];
                    precise float t2 = ska[a0 + 2u] + ska[a0 + 6u], t3 = ska[a0 + 3u] + ska[a0 + 7u];
                    precise float sm = (t0 + t2) + (t1 + t3);
                    for (uint i = n8; i < p.hk; i++) {
                        precise float pr = qs[i] * vt[o + i];
                        sm = sm + pr;
                    }
                    precise float sc = sm * p.scale;
                    sset(q - first + lid, sc);
                    mx = max(mx, sc);
                }
            } else if (lid < nt) {
                precise float sc = score_tile(lid) * p.scale;
                sset(q - first + lid, sc);
                mx = max(mx, sc);
            }
            q = q1;
            nt = nt1;
        }
        // the first V tile in flight beside the softmax
        fetch_tile(first, tile_len(first, last, p.hv, p.hv), true, p.hv, g, lid, xs);
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
    memoryBarrierBuffer();
    barrier();
    // kv.c: softmax_f16_plain when every segment the row reads is F16
    bool f16 = p.mode == 1u && (first >= p.n_prefix || p.pmode == 1u);
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
    memoryBarrierBuffer();
    barrier();
    if (lid < 8u) { // lane lid: positions first + lid, first + lid + 8, ... in order
        // (two loops, not sget's choice in the loop: the driver may load S beside ssh on every
        // step, a global load in the chain; 8 loads at once ahead of their 8 sums)
        precise float sum = 0.0;
        if (use_sh) {
            uint j = lid;
            for (; j + 56u < n_ctx; j += 64u) {
                float e[8];
                [[unroll]] for (uint k = 0u; k < 8u; k++) e[k] = ssh[j + 8u * k];
                [[unroll]] for (uint k = 0u; k < 8u; k++) sum = sum + e[k];
            }
            for (; j < n_ctx; j += 8u) {
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
    memoryBarrierBuffer();
    barrier();
    precise float tot = ((red[0] + red[1]) + (red[2] + red[3])) + ((red[4] + red[5]) + (red[6] + red[7]));
    float inv = fdiv_rn(1.0, tot);
    if (tiled) {
        // the sum of w V over tiles: each lane adds its values' products in position order, the
        // same products and sums as the loop below, so the same bits
        float acc[NACC];
        [[unroll]] for (uint k = 0u; k < NACC; k++) acc[k] = 0.0;
        uint q = first, nt = tile_len(q, last, p.hv, p.hv);
        while (q < last) {
            bool m2 = loc(q).mode == 2u;
            barrier(); // the last tile's reads are done
            put_tile(q, nt, p.hv, p.hv, lid, xs);
            if (lid < nt) { // the tile's weights, each once (no global load in the chain below)
                precise float w = sget(q - first + lid) * inv;
                tw[lid] = w;
            }
            barrier();
            uint q1 = q + nt, nt1 = q1 < last ? tile_len(q1, last, p.hv, p.hv) : 0u;
            if (nt1 > 0u) fetch_tile(q1, nt1, true, p.hv, g, lid, xs); // in flight beside the sums
            [[unroll]] for (uint k = 0u; k < NACC; k++) {
                uint i = lid + 64u * k;
                if (i >= p.hv) break;
                precise float o = acc[k];
                // 8 positions' operands loaded ahead of their 8 sums
                uint jj = 0u;
                for (; jj + 8u <= nt; jj += 8u) {
                    float wv[8], vv[8];
                    [[unroll]] for (uint u = 0u; u < 8u; u++) {
                        wv[u] = m2 ? w_scaled(jj + u) : tw[jj + u];
                        vv[u] = vt[(jj + u) * p.hv + i];
                    }
                    [[unroll]] for (uint u = 0u; u < 8u; u++) {
                        precise float pr = wv[u] * vv[u];
                        o = o + pr;
                    }
                }
                for (; jj < nt; jj++) {
                    precise float pr = (m2 ? w_scaled(jj) : tw[jj]) * vt[jj * p.hv + i];
                    o = o + pr;
                }
                acc[k] = o;
            }
            q = q1;
            nt = nt1;
        }
        [[unroll]] for (uint k = 0u; k < NACC; k++) {
            uint i = lid + 64u * k;
            if (i < p.hv) O[(t * p.n_head + h) * p.hv + i] = acc[k];
        }
        return;
    }
    for (uint i = lid; i < p.hv; i += 64u) { // heads wider than a tile: each load in the chain
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
        O[(t * p.n_head + h) * p.hv + i] = o;
    }
}
