#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// The fast attention (GEIST_DEVICE_FAST: vk_forward.c's rec_attn in a fast pass): one session's
// decode row attends in the device's own order with its own arithmetic, not cpu_scalar's bits
// (attn_body.glsl keeps those; the logits stay within tests/core/test_vulkan_forward.py's
// FAST_RTOL). Why: at decode the exact attention's workgroup is a chain of dependent steps
// (tiles loaded into shared memory, barriers, the scores, a tree for the maximum, the
// exponentials, ordered sums, the V tiles, float-float norms), 40 % of a fast token on the H100
// (docs/VULKAN.md). Here a subgroup takes U positions at a time with every load of the round
// issued at once, a score is one subgroup sum, and the softmax is online (a running maximum and
// sum per subgroup, flash-decoding's), so the chain has no barrier between the prologue and the
// merge of the workgroup's subgroups.
//
// The same bindings and push constants as attn_part.comp built with ATTN_FRESH (attn_body.glsl):
// one workgroup per (query head, chunk c of ch positions of those the row sees); the row's own
// QK norm (fresh bit 1), rotary (bit 2, bit 4 NEOX pairs) and K/V store (by chunk 0 of each KV
// head's first query head) inside; the row's own position's K and V from the products' scratch
// (no workgroup waits for the store). One chunk writes its heads to O; several write their
// partials [m, l, o[0..hv)] (o unnormalized) to binding 5, and the last to finish merges them
// (its count at binding 4, set back to 0); with qout, the writer also makes O's 8-bit rows
// (bindings 11 and 12), as attn_body.glsl's quant_out does. F32 and F16 caches (the prefix's
// too: vk_forward.c checks), heads of at most 256 values.
//
// A lane holds value pairs (2i, 2i + 1) of a head for i = its subgroup lane + sz k (sz the
// subgroup's size), k < MAXP: MAXP is the head's pairs over that size (a specialization
// constant, so the pairs stay in registers), and every subgroup must run all its lanes: the
// pipeline requires full subgroups of vk.h's attn_lanes where the device has the size control
// (32 lanes where its range allows), else the device runs one size only (vk_device.c).
layout(local_size_x = 128) in;
layout(constant_id = 0) const uint MAXP = 4u;
#define U 4u        // positions a subgroup takes a round
#define NSG_MAX 16u // subgroups a workgroup at most (subgroups of at least 8 lanes)
layout(std430, binding = 0) readonly buffer PKVb { uint PKV[]; };
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 2) readonly buffer Qb { float Q[]; };
layout(std430, binding = 3) writeonly buffer Ob { float O[]; };
layout(std430, binding = 4) coherent buffer Cb { uint CNT[]; };
layout(std430, binding = 5) coherent buffer Sb { float S[]; };
layout(std430, binding = 6) readonly buffer KVb { uint KV[]; };
layout(std430, binding = 7) readonly buffer Nb { float NW[]; };
layout(std430, binding = 8) readonly buffer Kcb { float KC[]; };
layout(std430, binding = 9) readonly buffer Vcb { float VC[]; };
layout(std430, binding = 10) writeonly buffer KVWb { uint KVW[]; }; // binding 6's buffer
layout(std430, binding = 11) writeonly buffer AQb { uint AQ[]; };    // qout: O's 8-bit rows
layout(std430, binding = 12) writeonly buffer ADb { float AD[]; };   // and their block scales
layout(push_constant) uniform P {
    uint row0, n_head, n_head_kv, hk, hv, k_at, v_at, mode, s_stride;
    float scale;
    uint window, n_prefix, rows, stage_pos0, stage_row0, sk_at, sv_at, pmode, pk_at, pv_at, prows;
    uint n_split, ch, sp_stride;
    uint fresh, q_norm, k_norm;
    float eps;
    uint n_rot, rope_at, qout;
} p;
#include "f16.glsl"
#include "exact.glsl"
#include "clock.glsl"
#define AF_MARK(pt) clock_mark(0x110u + (pt))

shared float qs[256];   // the row's query head: normed, rotated
shared float kcur[256]; // its K head as the cache holds it (normed, rotated, rounded)
shared float red[2u * NSG_MAX];
shared float msh[NSG_MAX], lsh[NSG_MAX];
shared float osh[NSG_MAX * 256u]; // the subgroups' unnormalized outputs
shared uint last;

uint f_pos, f_vb, g; // the row's position, its V head's first float in the scratch, the KV head

// where position q lives (loc: the prefix's cache, the stage, the own cache or ring) and its
// words (word), as the exact kernels find them
#include "attn_kv.glsl"
#include "attn_store.glsl"
float round_kv(float x) { return p.mode == 1u ? f16_round(x) : x; }
// The positions' K and V pairs a lane holds, a round of U positions at a time: every load of the
// round issued before any use. Why this shape: with a branch around each load (the prefix's cache
// or the session's, F16 or F32, the row's own position from the scratch) the H100 ran a round's
// loads one after another, ~0.9 us a position a chunk (session 26's --attn-chunk sweep: the
// attention 65 us a layer in chunks of 64 positions, 38 in chunks of 32; 11 in this shape). So a
// round whose positions lie in one segment (the prefix's cache or the session's own) takes one of
// four copies of load_pos (pre and f16 constants where it is inlined, so attn_kv.glsl's word()
// is one buffer's load), a round across the boundary (one a chunk at most) the general one; lanes
// past the head's pairs load its last pair (finite: their q pairs are 0, their outputs
// unwritten), positions past the chunk load its last (their scores masked), and the row's own
// position, whose K and V the store may be writing now, is taken from the scratch by a select
// after the loads. The rounds' positions stay those of a session without a prefix: the same
// order, the same bits.
vec2 qr[MAXP], o[MAXP];      // the lane's query pairs (scaled) and unnormalized output pairs
vec2 kown[MAXP], vown[MAXP]; // the row's own K and V pairs, as the store writes them
float m, l;                  // the subgroup's running maximum and sum
vec2 kk[U * MAXP], vv[U * MAXP];
void load_pos(bool pre, bool f16, uint q, uint u) { // position q's pairs into kk, vv's slot u
    uint sl = gl_SubgroupInvocationID, sz = gl_SubgroupSize;
    uint npk = p.hk / 2u, npv = p.hv / 2u;
    uint slot = pre ? q % p.prows : (q - p.n_prefix) % p.rows;
    uint kb = (pre ? p.pk_at : p.k_at) + (slot * p.n_head_kv + g) * (f16 ? npk : p.hk);
    uint vb = (pre ? p.pv_at : p.v_at) + (slot * p.n_head_kv + g) * (f16 ? npv : p.hv);
    for (uint k = 0u; k < MAXP; k++) {
        uint ik = min(sl + sz * k, npk - 1u), iv = min(sl + sz * k, npv - 1u);
        kk[u * MAXP + k] = f16 ? unpackHalf2x16(word(pre, kb + ik))
                               : vec2(uintBitsToFloat(word(pre, kb + 2u * ik)),
                                      uintBitsToFloat(word(pre, kb + 2u * ik + 1u)));
        vv[u * MAXP + k] = f16 ? unpackHalf2x16(word(pre, vb + iv))
                               : vec2(uintBitsToFloat(word(pre, vb + 2u * iv)),
                                      uintBitsToFloat(word(pre, vb + 2u * iv + 1u)));
    }
}
void load_round(bool pre, bool f16, uint q0, uint qe) { // positions q0.. of one segment
    for (uint u = 0u; u < U; u++) load_pos(pre, f16, min(q0 + u, qe - 1u), u);
}
void load_any(uint q0, uint qe) { // the round at q0 of a chunk ending at qe
    uint ql = min(q0 + U, qe) - 1u;
    if (ql < p.n_prefix) {
        if (p.pmode == 1u) load_round(true, true, q0, qe);
        else load_round(true, false, q0, qe);
    } else if (q0 >= p.n_prefix) {
        if (p.mode == 1u) load_round(false, true, q0, qe);
        else load_round(false, false, q0, qe);
    } else {
        for (uint u = 0u; u < U; u++) {
            uint q = min(q0 + u, qe - 1u);
            bool pre = q < p.n_prefix;
            load_pos(pre, (pre ? p.pmode : p.mode) == 1u, q, u);
        }
    }
    for (uint u = 0u; u < U; u++) {
        bool own = min(q0 + u, qe - 1u) == f_pos;
        for (uint k = 0u; k < MAXP; k++) {
            kk[u * MAXP + k] = own ? kown[k] : kk[u * MAXP + k];
            vv[u * MAXP + k] = own ? vown[k] : vv[u * MAXP + k];
        }
    }
}

// qout (a pass of several sessions' rows, whose O product reads 8-bit rows: vk_forward.c's
// qout_of): the head's output values, kept in qs (read by no lane once the lanes took their
// query pairs), quantized as attn_body.glsl's quant_out does, its shared floats over osh (free
// once the outputs are made)
uint q_w0, q_b0;
float act_x(uint i) { return qs[i]; }
void aq_put(uint w, uint word) { AQ[q_w0 + w] = word; }
void ad_put(uint b, float d) { AD[q_b0 + b] = d; }
#define ACTQ_SH(i) osh[i]
#include "actq.glsl"
void quant_out(uint rh, uint lid) { // row-head rh's values in qs: every lane (barriers)
    barrier(); // qs holds the whole head; every lane's reads of osh done
    q_w0 = rh * (p.hv / 4u);
    q_b0 = rh * (p.hv / (p.qout == 2u ? 256u : 32u));
    actq_round(0u, 0u, p.hv / 4u, lid, p.qout == 2u);
}

void main() {
    clock_start();
    AF_MARK(0u);
    uint c = gl_WorkGroupID.x % p.n_split, h = gl_WorkGroupID.x / p.n_split;
    uint t = p.row0, lid = gl_LocalInvocationID.x;
    f_pos = IN[4u * t + 1u];
    uint first = p.window > 0u && f_pos + 1u > p.window ? f_pos + 1u - p.window : 0u;
    uint n_ctx = f_pos - first + 1u;
    uint ch = p.ch == 0u ? n_ctx : p.ch; // 0: one chunk of every position (no split)
    if (c * ch >= n_ctx) return;         // the whole workgroup: fewer chunks than dispatched
    uint rnc = (n_ctx + ch - 1u) / ch;   // the row's chunks
    uint c0 = first + c * ch, cn = min(ch, n_ctx - c * ch);
    uint grp = p.n_head / p.n_head_kv;
    g = h / grp;
    f_vb = (t * p.n_head_kv + g) * p.hv;
    uint sl = gl_SubgroupInvocationID, sz = gl_SubgroupSize, sg = gl_SubgroupID, nsg = gl_NumSubgroups;

    // The prologue: the row's q and k heads (values lid, lid + 128), RMS-normed, into qs and
    // kcur, then rotated a pair a lane; k rounded as the cache holds it.
    bool normed = (p.fresh & 1u) != 0u, roped = (p.fresh & 2u) != 0u, neox = (p.fresh & 4u) != 0u;
    uint qb = (t * p.n_head + h) * p.hk, kb = (t * p.n_head_kv + g) * p.hk;
    uint i0 = lid, i1 = lid + 128u;
    float q0 = i0 < p.hk ? Q[qb + i0] : 0.0, q1 = i1 < p.hk ? Q[qb + i1] : 0.0;
    float k0 = i0 < p.hk ? KC[kb + i0] : 0.0, k1 = i1 < p.hk ? KC[kb + i1] : 0.0;
    if (normed) {
        float sq = subgroupAdd(q0 * q0 + q1 * q1), sk = subgroupAdd(k0 * k0 + k1 * k1);
        if (sl == 0u) {
            red[sg] = sq;
            red[NSG_MAX + sg] = sk;
        }
        barrier();
        float tq = 0.0, tk = 0.0;
        for (uint s = 0u; s < nsg; s++) {
            tq += red[s];
            tk += red[NSG_MAX + s];
        }
        float qsc = inversesqrt(tq / float(p.hk) + p.eps), ksc = inversesqrt(tk / float(p.hk) + p.eps);
        uint j0 = min(i0, p.hk - 1u), j1 = min(i1, p.hk - 1u);
        q0 *= qsc * NW[p.q_norm + j0];
        q1 *= qsc * NW[p.q_norm + j1];
        k0 *= ksc * NW[p.k_norm + j0];
        k1 *= ksc * NW[p.k_norm + j1];
    }
    uint nr = roped ? p.n_rot : 0u; // values below nr are rounded after their rotation
    if (i0 < p.hk) {
        qs[i0] = q0;
        kcur[i0] = i0 < nr ? k0 : round_kv(k0);
    }
    if (i1 < p.hk) {
        qs[i1] = q1;
        kcur[i1] = i1 < nr ? k1 : round_kv(k1);
    }
    barrier();
    if (roped) {
        uint hr = p.n_rot / 2u, j = lid;
        if (j < hr) {
            uint a = neox ? j : 2u * j, b = neox ? j + hr : 2u * j + 1u;
            float cs = uintBitsToFloat(IN[p.rope_at + t * p.n_rot + j]);
            float sn = uintBitsToFloat(IN[p.rope_at + t * p.n_rot + hr + j]);
            float x0 = qs[a], x1 = qs[b], y0 = kcur[a], y1 = kcur[b];
            qs[a] = x0 * cs - x1 * sn;
            qs[b] = x0 * sn + x1 * cs;
            kcur[a] = round_kv(y0 * cs - y1 * sn);
            kcur[b] = round_kv(y0 * sn + y1 * cs);
        }
        barrier();
    }
    // the row's K and V at its slot, by chunk 0 of the KV head's first query head (no
    // workgroup of this dispatch reads them back)
    if (h % grp == 0u && c == 0u) store_row_kv(g, lid, 128u);
    AF_MARK(1u);

    // Each subgroup: U positions a round (its rounds nsg U apart), a running maximum m, sum l
    // and unnormalized output pairs o.
    uint npk = p.hk / 2u, npv = p.hv / 2u;
    for (uint k = 0u; k < MAXP; k++) {
        uint i = sl + sz * k, ik = min(i, npk - 1u), iv = min(i, npv - 1u);
        qr[k] = i < npk ? vec2(qs[2u * i], qs[2u * i + 1u]) * p.scale : vec2(0.0);
        o[k] = vec2(0.0);
        kown[k] = vec2(kcur[2u * ik], kcur[2u * ik + 1u]);
        vown[k] = vec2(round_kv(VC[f_vb + 2u * iv]), round_kv(VC[f_vb + 2u * iv + 1u]));
    }
    m = -1.0 / 0.0;
    l = 0.0;
    uint ce = c0 + cn;
    for (uint r0 = c0 + sg * U; r0 < ce; r0 += nsg * U) {
        load_any(r0, ce);
        float s[U];
        float mn = m;
        for (uint u = 0u; u < U; u++) {
            float d = 0.0;
            for (uint k = 0u; k < MAXP; k++) d += dot(qr[k], kk[u * MAXP + k]);
            d = subgroupAdd(d);
            s[u] = r0 + u < ce ? d : -1.0 / 0.0;
            mn = max(mn, s[u]);
        }
        float f = exp(m - mn);
        l *= f;
        for (uint k = 0u; k < MAXP; k++) o[k] *= f;
        for (uint u = 0u; u < U; u++) {
            float e = exp(s[u] - mn);
            l += e;
            for (uint k = 0u; k < MAXP; k++) o[k] += e * vv[u * MAXP + k];
        }
        m = mn;
    }

    AF_MARK(2u);
    // the workgroup's subgroups merged: M its maximum, L its sum, its outputs rescaled to M
    if (sl == 0u) {
        msh[sg] = m;
        lsh[sg] = l;
    }
    for (uint k = 0u; k < MAXP; k++) {
        uint i = sl + sz * k;
        if (i < npv) {
            osh[sg * 256u + 2u * i] = o[k].x;
            osh[sg * 256u + 2u * i + 1u] = o[k].y;
        }
    }
    barrier();
    float M = -1.0 / 0.0, L = 0.0;
    for (uint s = 0u; s < nsg; s++) M = max(M, msh[s]);
    for (uint s = 0u; s < nsg; s++) L += lsh[s] * exp(msh[s] - M);
    uint rh = t * p.n_head + h;
    uint slot = (rh * p.sp_stride + c) * (p.hv + 2u);
    for (uint i = lid; i < p.hv; i += 128u) {
        float acc = 0.0;
        for (uint s = 0u; s < nsg; s++) acc += osh[s * 256u + i] * exp(msh[s] - M);
        if (rnc == 1u) {
            O[rh * p.hv + i] = acc / L;
            if (p.qout != 0u) qs[i] = acc / L;
        } else S[slot + 2u + i] = acc;
    }
    if (rnc == 1u) {
        if (p.qout != 0u) quant_out(rh, lid);
        AF_MARK(3u);
        return;
    }

    // Several chunks: this one's partials counted, the last to finish merges them all.
    if (lid == 0u) {
        S[slot] = M;
        S[slot + 1u] = L;
    }
    memoryBarrierBuffer();
    barrier();
    if (lid == 0u) last = atomicAdd(CNT[rh], 1u) == rnc - 1u ? 1u : 0u;
    barrier();
    AF_MARK(4u);
    if (last == 0u) return; // the whole workgroup
    memoryBarrierBuffer();
    // the chunks' maxima and sums read a chunk a lane (at most MAX_SPLIT, 64), their weights
    // exp(M_c - M) into shared memory; then each value's chunks 4 at a time, every load at once
    uint base = rh * p.sp_stride * (p.hv + 2u), st = p.hv + 2u;
    float mc = lid < rnc ? S[base + lid * st] : -1.0 / 0.0;
    float lc = lid < rnc ? S[base + lid * st + 1u] : 0.0;
    if (lid < 64u) kcur[lid] = mc;
    barrier();
    float MM = -1.0 / 0.0;
    for (uint cc = 0u; cc < rnc; cc++) MM = max(MM, kcur[cc]);
    barrier(); // (every lane has read the maxima)
    float wc = lid < rnc ? exp(mc - MM) : 0.0;
    if (lid < 64u) {
        kcur[lid] = wc;
        kcur[64u + lid] = lc * wc;
    }
    barrier();
    float LL = 0.0;
    for (uint cc = 0u; cc < rnc; cc++) LL += kcur[64u + cc];
    for (uint i = lid; i < p.hv; i += 128u) {
        float acc = 0.0;
        for (uint c4 = 0u; c4 < rnc; c4 += 4u) {
            float v[4];
            for (uint u = 0u; u < 4u; u++) v[u] = S[base + min(c4 + u, rnc - 1u) * st + 2u + i];
            for (uint u = 0u; u < 4u; u++) acc += c4 + u < rnc ? v[u] * kcur[c4 + u] : 0.0;
        }
        O[rh * p.hv + i] = acc / LL;
        if (p.qout != 0u) qs[i] = acc / LL;
    }
    if (lid == 0u) CNT[rh] = 0u; // for the next layer's and step's chunks
    if (p.qout != 0u) quant_out(rh, lid);
    AF_MARK(5u);
}
