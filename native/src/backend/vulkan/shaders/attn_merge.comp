#version 450
#extension GL_GOOGLE_include_directive : require
// The split attention's second half as a dispatch of its own (the Metal plan's table; the
// vulkan backend merges in attn_part.comp's last chunk): one workgroup per (row, query head)
// merges the chunks attn_part.comp wrote for it (binding 5, slot (t n_head + h) sp_stride + c;
// attn_merge.glsl); the row's chunks are those its positions fill (ceil(n_ctx / ch), attn.comp's
// n_ctx).
layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 3) writeonly buffer Ob { float O[]; };
layout(std430, binding = 5) readonly buffer PTb { float PT[]; };
layout(push_constant) uniform P { uint row0, n_head, hv, window, ch, sp_stride; } p;
#include "vexp.glsl"
shared float wsh[64];
uint out_at;
#define MERGE_PT(i) PT[i]
#define MERGE_OUT(i, v) O[out_at + (i)] = (v)
#include "attn_merge.glsl"
void main() {
    uint t = p.row0 + gl_WorkGroupID.x / p.n_head, h = gl_WorkGroupID.x % p.n_head;
    uint lid = gl_LocalInvocationID.x;
    uint pos = IN[4u * t + 1u];
    uint first = p.window > 0u && pos + 1u > p.window ? pos + 1u - p.window : 0u;
    uint n_ctx = pos - first + 1u;
    out_at = (t * p.n_head + h) * p.hv;
    attn_merge((t * p.n_head + h) * p.sp_stride, min((n_ctx + p.ch - 1u) / p.ch, MAX_SPLIT), p.hv, lid);
}
