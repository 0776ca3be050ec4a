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
// A tile of V rows for the weighted sum (VT_FLOATS values: 32 positions of 64, 8 of 256), the
// INT8 rows' scales and which rows are INT8; heads up to 64 NACC values (a lane's accumulators).
#define VT_FLOATS 2048u
#define NACC 8u
shared float vt[VT_FLOATS];
shared float vsc[64];
shared uint vq8[64];
bool use_sh;
uint sbase;
float sget(uint j) { return use_sh ? ssh[j] : S[sbase + j]; }
void sset(uint j, float v) {
    if (use_sh) ssh[j] = v;
    else S[sbase + j] = v;
}
#include "vexp.glsl"
#include "attn_kv.glsl"
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
    float mx = -1.0 / 0.0;
    for (uint j = lid; j < n_ctx; j += 64u) {
        precise float sc = score(loc(first + j), g, qb) * p.scale;
        sset(j, sc);
        mx = max(mx, sc);
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
    for (uint j = lid; j < n_ctx; j += 64u) { // every lane's exponentials, then 8 lanes' sums
        precise float x = sget(j) - mx;
        float e = f16 ? vexp1(x) : exp(x);
        sset(j, e);
    }
    memoryBarrierBuffer();
    barrier();
    if (lid < 8u) { // lane lid: positions first + lid, first + lid + 8, ... in order
        precise float sum = 0.0;
        for (uint j = lid; j < n_ctx; j += 8u) {
            float e = sget(j);
            sum = sum + e;
        }
        red[lid] = sum;
    }
    memoryBarrierBuffer();
    barrier();
    precise float tot = ((red[0] + red[1]) + (red[2] + red[3])) + ((red[4] + red[5]) + (red[6] + red[7]));
    float inv = fdiv_rn(1.0, tot);
    if (p.hv <= VT_FLOATS && p.hv <= 64u * NACC) {
        // The sum of w V over tiles of positions: the tile's V rows loaded into shared memory by
        // all 64 lanes at once (many loads in flight), then each lane adds its values' products
        // in position order as below: the same products and sums in the same order, so the same
        // bits, without a global load's latency on every step of each lane's chain.
        uint ntile = min(VT_FLOATS / p.hv, 64u);
        float acc[NACC];
        for (uint k = 0u; k < NACC; k++) acc[k] = 0.0;
        for (uint j0 = 0u; j0 < n_ctx; j0 += ntile) {
            uint nt = min(ntile, n_ctx - j0);
            barrier(); // the last tile's reads are done
            for (uint e = lid; e < nt * p.hv; e += 64u) {
                uint jj = e / p.hv, i = e - jj * p.hv;
                Loc l = loc(first + j0 + jj);
                if (i == 0u) vq8[jj] = l.mode == 2u ? 1u : 0u; // the prefix's mode may differ
                if (l.mode == 2u) { // INT8: the code, and the row's scale once
                    uint r0 = l.v + l.slot * (p.n_head_kv * (1u + p.hv / 4u)) + g * (1u + p.hv / 4u);
                    vt[e] = float(code8(l.pre, r0, i));
                    if (i == 0u) vsc[jj] = uintBitsToFloat(word(l.pre, r0));
                } else {
                    vt[e] = elem(l.pre, l.mode, l.v, l.slot * p.n_head_kv * p.hv + g * p.hv + i);
                }
            }
            barrier();
            for (uint jj = 0u; jj < nt; jj++) {
                bool m2 = vq8[jj] != 0u;
                precise float w = sget(j0 + jj) * inv;
                for (uint k = 0u; k < NACC; k++) {
                    uint i = lid + 64u * k;
                    if (i >= p.hv) break;
                    if (m2) {
                        precise float ws = w * vsc[jj];
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
