#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// The split attention of a session's few rows (decode), first half: one workgroup per (row, query
// head, chunk c) takes the chunk's positions first + c ch .. first + c ch + ch - 1 (those the row
// sees, attn.comp's first..pos), computes their scores as attn.comp does (attn_kv.glsl), the
// chunk's max m, e^(s - m) (attn.comp's choice: gt_vexp1's steps when every segment the row reads
// is F16, else exp), their sum l (8 lanes by position, as attn.comp) and, per value channel, the
// unnormalized sum of e V in position order (vsum below); it writes [m, l, o[0..hv)] to
// the chunk's slot of the partials (binding 5: slot (t n_head + h) sp_stride + c, hv + 2 floats
// each). attn_merge.comp combines the chunks. Chunks past the row's positions write nothing.
// Sums in another order than cpu_scalar's (docs/VULKAN.md "Exactness"); no fused multiply-adds.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer PKVb { uint PKV[]; };
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 2) readonly buffer Qb { float Q[]; };
layout(std430, binding = 5) writeonly buffer PTb { float PT[]; };
layout(std430, binding = 6) readonly buffer KVb { uint KV[]; };
layout(push_constant) uniform P {
    uint row0, n_head, n_head_kv, hk, hv, k_at, v_at, mode, s_stride;
    float scale;
    uint window, n_prefix, rows, stage_pos0, stage_row0, sk_at, sv_at, pmode, pk_at, pv_at, prows;
    uint n_split, ch, sp_stride; // chunks per (row, head) dispatched, positions per chunk, slots per (row, head)
} p;
shared float red[64];
#define SH_MAX 4096u // the chunk's scores (the host keeps ch <= SH_MAX)
shared float ssh[SH_MAX];
#include "vexp.glsl"
float attn_e(uint j) { return ssh[j]; } // vsum's weights (times 1: unnormalized)
#include "attn_kv.glsl"
// Channel i of sum_j (attn_e(j) * inv) * V[q0 + j] over j < n in position order (kv.c's out +=
// w * v; INT8: (w * scale) * code), with attn_e(j) the includer's weight of position q0 + j. The
// products of VB positions are made first, then added in order: the same operations in the
// same order as one position at a time (so the same bits), with VB loads in flight instead of
// one (the loop is latency-bound: a workgroup per row and head waits on every load). Both loops
// unrolled (GL_EXT_control_flow_attributes, which the includer enables): pr stays in registers
// and the loads can issue together.
#define VB 32u
float vsum(uint q0, uint n, uint i, uint g, float inv) {
    precise float o = 0.0;
    for (uint j0 = 0u; j0 < n; j0 += VB) {
        float pr[VB];
        [[unroll]] for (uint k = 0u; k < VB; k++) {
            pr[k] = 0.0;
            if (j0 + k < n) {
                Loc l = loc(q0 + j0 + k);
                precise float w = attn_e(j0 + k) * inv;
                if (l.mode == 2u) {
                    uint r0 = l.v + l.slot * (p.n_head_kv * (1u + p.hv / 4u)) + g * (1u + p.hv / 4u);
                    precise float ws = w * uintBitsToFloat(word(l.pre, r0));
                    precise float x = ws * float(code8(l.pre, r0, i));
                    pr[k] = x;
                } else {
                    precise float x = w * elem(l.pre, l.mode, l.v, l.slot * p.n_head_kv * p.hv + g * p.hv + i);
                    pr[k] = x;
                }
            }
        }
        [[unroll]] for (uint k = 0u; k < VB; k++)
            if (j0 + k < n) o = o + pr[k];
    }
    return o;
}
void main() {
    uint c = gl_WorkGroupID.x % p.n_split, rh = gl_WorkGroupID.x / p.n_split;
    uint t = p.row0 + rh / p.n_head, h = rh % p.n_head;
    uint lid = gl_LocalInvocationID.x;
    uint pos = IN[4u * t + 1u];
    uint first = p.window > 0u && pos + 1u > p.window ? pos + 1u - p.window : 0u;
    uint n_ctx = pos - first + 1u;
    uint j0 = c * p.ch;
    if (j0 >= n_ctx) return; // the whole workgroup: a row with fewer chunks than the dispatch's
    uint len = min(p.ch, n_ctx - j0);
    uint q0 = first + j0;
    uint g = h / (p.n_head / p.n_head_kv);
    uint qb = (t * p.n_head + h) * p.hk;
    float mx = -1.0 / 0.0;
    for (uint j = lid; j < len; j += 64u) {
        precise float sc = score(loc(q0 + j), g, qb) * p.scale;
        ssh[j] = sc;
        mx = max(mx, sc);
    }
    red[lid] = mx;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (lid < k) red[lid] = max(red[lid], red[lid + k]);
        barrier();
    }
    mx = red[0];
    barrier();
    bool f16 = p.mode == 1u && (first >= p.n_prefix || p.pmode == 1u);
    for (uint j = lid; j < len; j += 64u) {
        precise float x = ssh[j] - mx;
        float e = f16 ? vexp1(x) : exp(x);
        ssh[j] = e;
    }
    barrier();
    if (lid < 8u) {
        precise float sum = 0.0;
        for (uint j = lid; j < len; j += 8u) {
            float e = ssh[j];
            sum = sum + e;
        }
        red[lid] = sum;
    }
    barrier();
    precise float tot = ((red[0] + red[1]) + (red[2] + red[3])) + ((red[4] + red[5]) + (red[6] + red[7]));
    uint slot = ((t * p.n_head + h) * p.sp_stride + c) * (p.hv + 2u);
    if (lid == 0u) {
        PT[slot] = mx;
        PT[slot + 1u] = tot;
    }
    for (uint i = lid; i < p.hv; i += 64u) PT[slot + 2u + i] = vsum(q0, len, i, g, 1.0);
}
