#version 450
// y[k] = x[src(k)] / rms(x[src(k)]) * w, one workgroup per output row. gather != 0: src(k) is
// the k-th row asking for logits (IN's list), else src(k) = k.
layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 2) readonly buffer Xb { float X[]; };
layout(std430, binding = 3) writeonly buffer Yb { float Y[]; };
layout(std430, binding = 7) readonly buffer Nb { float NW[]; };
layout(push_constant) uniform P { uint n, w_off, gather, gather_at; float eps; } p;
shared float red[64];
void main() {
    uint k = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x;
    uint src = p.gather != 0u ? IN[p.gather_at + k] : k;
    float s = 0.0;
    for (uint i = lid; i < p.n; i += 64u) {
        float v = X[src * p.n + i];
        s += v * v;
    }
    red[lid] = s;
    barrier();
    for (uint h = 32u; h > 0u; h >>= 1) {
        if (lid < h) red[lid] += red[lid + h];
        barrier();
    }
    float scale = 1.0 / sqrt(red[0] / float(p.n) + p.eps);
    for (uint i = lid; i < p.n; i += 64u) Y[k * p.n + i] = X[src * p.n + i] * scale * NW[p.w_off + i];
}
