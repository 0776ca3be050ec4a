#version 450
#extension GL_GOOGLE_include_directive : require
// x[t] = row token(t) of the embedding table (dequantized), times embed_scale; the table's rows
// [row_lo, row_hi) from this buffer (a table split over several buffers: one dispatch a part)
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Wb { uint W[]; };
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 3) writeonly buffer Xb { float X[]; };
layout(push_constant) uniform P { uint w_off, type, n_in, row_bytes; float scale; uint row_lo, row_hi; } p;
#include "common.glsl"
void main() {
    uint t = gl_WorkGroupID.x, id = IN[4u * t];
    if (id < p.row_lo || id >= p.row_hi) return;
    uint row = p.w_off + (id - p.row_lo) * p.row_bytes;
    for (uint i = gl_LocalInvocationID.x; i < p.n_in; i += 64u)
        X[t * p.n_in + i] = w_elem(p.type, row, i) * p.scale;
}
