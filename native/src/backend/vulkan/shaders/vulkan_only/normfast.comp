#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// GEIST_DEVICE_FAST's standalone RMSNorm (vk_forward.c's rec_norm in a fast pass: Gemma 3's
// post-norms, a norm no product takes inside): rmsnorm.comp's push constants, bindings and
// results up to the float order, y[k] = x[src(k)] / rms(x[src(k)]) * w (acc: y[k] += that),
// with a plain float sum of squares, a subgroup sum and one barrier, where rmsnorm.comp keeps
// cpu_scalar's bits with float-float sums, a tree across the lanes and a correctly rounded
// division (a chain of dependent steps, which a decode step's time is made of on a GPU).
// Subgroups of at least 8 lanes (vk_forward.c), whole or not: 16 at most a workgroup.
layout(local_size_x = 128) in;
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 2) readonly buffer Xb { float X[]; };
layout(std430, binding = 3) buffer Yb { float Y[]; };
layout(std430, binding = 7) readonly buffer Nb { float NW[]; };
layout(push_constant) uniform P { uint n, w_off, gather, gather_at; float eps; uint acc; } p;
#define NV 8u // values a lane keeps in registers (rows of up to 1,024; longer ones read again)
shared float red[16];
void put(uint i, float o) {
    if (p.acc != 0u) Y[i] += o;
    else Y[i] = o;
}
void main() {
    uint k = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x;
    uint src = p.gather != 0u ? IN[p.gather_at + k] : k;
    uint xb = src * p.n;
    float xv[NV];
    float ss = 0.0;
    for (uint u = 0u; u < NV; u++) { // every load at once
        uint i = lid + 128u * u;
        xv[u] = i < p.n ? X[xb + i] : 0.0;
    }
    for (uint u = 0u; u < NV; u++) ss += xv[u] * xv[u];
    for (uint i = lid + 128u * NV; i < p.n; i += 128u) ss += X[xb + i] * X[xb + i];
    ss = subgroupAdd(ss);
    if (subgroupElect()) red[gl_SubgroupID] = ss;
    barrier();
    float tot = 0.0;
    for (uint s = 0u; s < gl_NumSubgroups; s++) tot += red[s];
    float scale = inversesqrt(tot / float(p.n) + p.eps);
    for (uint u = 0u; u < NV; u++) {
        uint i = lid + 128u * u;
        if (i < p.n) put(k * p.n + i, xv[u] * scale * NW[p.w_off + i]);
    }
    for (uint i = lid + 128u * NV; i < p.n; i += 128u) put(k * p.n + i, X[xb + i] * scale * NW[p.w_off + i]);
}
