#version 450
#extension GL_GOOGLE_include_directive : require
// The split attention's second half: one workgroup per (row, query head) merges the chunks
// attn_part.comp wrote for it (binding 5: [m, l, o[0..hv)] per chunk, slot (t n_head + h)
// sp_stride + c): with M the largest chunk max and w_c = e^(m_c - M) (gt_vexp1's steps, every
// chunk's max rescaled to M), out = (sum_c w_c o_c) / (sum_c w_c l_c), the chunks in order; the
// row's chunks are those its positions fill (ceil(n_ctx / ch), attn.comp's n_ctx).
layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 3) writeonly buffer Ob { float O[]; };
layout(std430, binding = 5) readonly buffer PTb { float PT[]; };
layout(push_constant) uniform P { uint row0, n_head, hv, window, ch, sp_stride; } p;
#define MAX_SPLIT 64u // chunks per (row, head) at most (vk_forward.c's)
shared float wsh[MAX_SPLIT];
#include "vexp.glsl"
void main() {
    uint t = p.row0 + gl_WorkGroupID.x / p.n_head, h = gl_WorkGroupID.x % p.n_head;
    uint lid = gl_LocalInvocationID.x;
    uint pos = IN[4u * t + 1u];
    uint first = p.window > 0u && pos + 1u > p.window ? pos + 1u - p.window : 0u;
    uint n_ctx = pos - first + 1u;
    uint nc = min((n_ctx + p.ch - 1u) / p.ch, MAX_SPLIT);
    uint base = (t * p.n_head + h) * p.sp_stride;
    uint st = p.hv + 2u;
    float mx = -1.0 / 0.0;
    for (uint c = 0u; c < nc; c++) mx = max(mx, PT[(base + c) * st]);
    if (lid < nc) {
        precise float x = PT[(base + lid) * st] - mx;
        wsh[lid] = vexp1(x);
    }
    barrier();
    precise float tot = 0.0;
    for (uint c = 0u; c < nc; c++) {
        precise float wl = wsh[c] * PT[(base + c) * st + 1u];
        tot = tot + wl;
    }
    float inv = fdiv_rn(1.0, tot);
    for (uint i = lid; i < p.hv; i += 64u) {
        precise float o = 0.0;
        for (uint c = 0u; c < nc; c++) {
            precise float wo = wsh[c] * PT[(base + c) * st + 2u + i];
            o = o + wo;
        }
        precise float r = o * inv;
        O[(t * p.n_head + h) * p.hv + i] = r;
    }
}
