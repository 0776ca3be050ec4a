#version 450
#extension GL_GOOGLE_include_directive : require
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
#define SH_MAX 4096u
shared float ssh[SH_MAX];
// Tiles of K or V rows (VT_FLOATS values: 32 positions of a head of 64, 8 of 256), loaded by
// the whole workgroup at once (many loads in flight, none in a lane's chain of sums); a tile's
// positions lie in one segment (prefix, own cache, stage: one buffer, one mode), its INT8 rows'
// scales in tsc; the query row in qs. Heads up to 64 NACC values (a lane's V accumulators).
#define VT_FLOATS 2048u
#define NACC 8u
#define QS_MAX 1024u
shared float vt[VT_FLOATS];
shared float tsc[64];
shared float tw[64]; // a V tile's softmax weights
shared float qs[QS_MAX];
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
// Positions q0 .. q0 + nt - 1 (one segment) of KV head g: their K (v false) or V rows of hd
// values into vt[jj * hd + i] as floats (INT8: the codes, each row's scale into tsc[jj]): the
// values elem() and code8() read, in the layouts session/kv.c writes.
void load_tile(uint q0, uint nt, bool v, uint hd, uint g, uint lid) {
    Loc l0 = loc(q0);
    uint mode = l0.mode, base = v ? l0.v : l0.k;
    uint wph = mode == 2u ? 1u + hd / 4u : (mode == 1u ? hd / 2u : hd); // a head's words a row
    uint rw = p.n_head_kv * wph;
    uint n = nt * wph;
    for (uint e = lid; e < n; e += 64u) {
        uint jj = e / wph, w = e - jj * wph;
        uint at = base + loc(q0 + jj).slot * rw + g * wph + w;
        uint x = l0.pre ? PKV[at] : KV[at];
        if (mode == 1u) {
            vec2 h2 = unpackHalf2x16(x);
            vt[jj * hd + 2u * w] = h2.x;
            vt[jj * hd + 2u * w + 1u] = h2.y;
        } else if (mode == 0u) {
            vt[jj * hd + w] = uintBitsToFloat(x);
        } else if (w == 0u) {
            tsc[jj] = uintBitsToFloat(x);
        } else {
            for (uint k = 0u; k < 4u; k++) vt[jj * hd + 4u * (w - 1u) + k] = float(int(x << (24u - 8u * k)) >> 24);
        }
    }
}
// q.k of the tile's row jj as score() sums it (kv.c's order)
float score_tile(uint jj, uint mode) {
    uint o = jj * p.hk;
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
    float a[8];
    for (uint k = 0u; k < 8u; k++) a[k] = 0.0;
    for (uint i = 0u; i < n8; i += 8u)
        for (uint k = 0u; k < 8u; k++) {
            precise float pr = qs[i + k] * vt[o + i + k];
            precise float sm = a[k] + pr;
            a[k] = sm;
        }
    precise float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
    precise float s = (t0 + t2) + (t1 + t3);
    for (uint i = n8; i < p.hk; i++) {
        precise float pr = qs[i] * vt[o + i];
        s = s + pr;
    }
    return s;
}
void main() {
    uint t = p.row0 + gl_WorkGroupID.x / p.n_head, h = gl_WorkGroupID.x % p.n_head;
    uint lid = gl_LocalInvocationID.x;
    uint pos = IN[4u * t + 1u];
    uint first = p.window > 0u && pos + 1u > p.window ? pos + 1u - p.window : 0u;
    uint n_ctx = pos - first + 1u;
    uint g = h / (p.n_head / p.n_head_kv);
    uint qb = (t * p.n_head + h) * p.hk;
    uint sb = (p.row0 * p.n_head + gl_WorkGroupID.x) * p.s_stride; // the row's own scores: sessions
    // of one step may run at once (vk_forward.c puts no barrier between their dispatches)
    use_sh = n_ctx <= SH_MAX;
    sbase = sb;
    // heads that fit the tiles take them (K, then V); wider ones read each value in the chain
    bool tiled = p.hk <= QS_MAX && p.hk <= VT_FLOATS && p.hv <= VT_FLOATS && p.hv <= 64u * NACC;
    float mx = -1.0 / 0.0;
    if (tiled) {
        for (uint i = lid; i < p.hk; i += 64u) qs[i] = Q[qb + i];
        uint ntk = min(VT_FLOATS / p.hk, 64u);
        for (uint j0 = 0u; j0 < n_ctx;) {
            uint nt = min(ntk, seg_end(first + j0, first + n_ctx) - (first + j0));
            barrier(); // qs written; the last tile's reads done
            load_tile(first + j0, nt, false, p.hk, g, lid);
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
    memoryBarrierBuffer();
    barrier();
    precise float tot = ((red[0] + red[1]) + (red[2] + red[3])) + ((red[4] + red[5]) + (red[6] + red[7]));
    float inv = fdiv_rn(1.0, tot);
    if (tiled) {
        // the sum of w V over tiles: each lane adds its values' products in position order, the
        // same products and sums as the loop below, so the same bits
        uint ntv = min(VT_FLOATS / p.hv, 64u);
        float acc[NACC];
        for (uint k = 0u; k < NACC; k++) acc[k] = 0.0;
        for (uint j0 = 0u; j0 < n_ctx;) {
            uint nt = min(ntv, seg_end(first + j0, first + n_ctx) - (first + j0));
            bool m2 = loc(first + j0).mode == 2u;
            barrier(); // the last tile's reads are done
            load_tile(first + j0, nt, true, p.hv, g, lid);
            if (lid < nt) { // the tile's weights, each once (no global load in the chain below)
                precise float w = sget(j0 + lid) * inv;
                tw[lid] = w;
            }
            barrier();
            for (uint jj = 0u; jj < nt; jj++) {
                float w = tw[jj];
                for (uint k = 0u; k < NACC; k++) {
                    uint i = lid + 64u * k;
                    if (i >= p.hv) break;
                    if (m2) {
                        precise float ws = w * tsc[jj];
                        precise float pr = ws * vt[jj * p.hv + i];
                        precise float o = acc[k] + pr;
                        acc[k] = o;
                    } else {
                        precise float pr = w * vt[jj * p.hv + i];
                        precise float o = acc[k] + pr;
                        acc[k] = o;
                    }
                }
            }
            j0 += nt;
        }
        for (uint k = 0u; k < NACC; k++) {
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
