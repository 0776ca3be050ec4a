#version 450
#extension GL_GOOGLE_include_directive : require
// 8-bit activations as cpu_scalar makes them (act_quant.c; the arithmetic in actq.glsl): fmt 0,
// blocks of 32 (Q4_0, Q4_1, Q5_0, Q8_0 weights), fmt 1, blocks of 256 (Q4_K, Q6_K). One
// workgroup per 64 words (256 values): 8 blocks of fmt 0, one of fmt 1; beyond 65535 workgroups
// they continue in y.
//
// QUANT_FUSED defined (quant_fused, a vulkan_only build): the values quantized are computed here
// instead of read, not written as floats first (one dispatch and barrier fewer before a
// product): mode 1, x's rows RMS-normalized as rmsnorm.comp does (rmsscale.glsl's scale of each
// row a workgroup's 256 values touch: rows of at least 256 values, so at most 2; the norm vector
// at norm_at of binding 7); mode 2, the gated activation act(gate) * up as act.comp computes it
// (gate X, up binding 3; gelu: GELU's tanh form, else SiLU).
layout(local_size_x = 64) in;
layout(std430, binding = 2) readonly buffer Xb { float X[]; };
layout(std430, binding = 4) writeonly buffer Qb { uint AQ[]; };
layout(std430, binding = 5) writeonly buffer Db { float AD[]; };
#ifdef QUANT_FUSED
layout(std430, binding = 3) readonly buffer Ub { float U[]; };
layout(std430, binding = 7) readonly buffer Nb { float NW[]; };
layout(push_constant) uniform P { uint n_in, n_blocks, fmt, mode, norm_at; float eps; uint gelu; } p;
#else
layout(push_constant) uniform P { uint n_in, n_blocks, fmt; } p; // n_blocks: rows * n_in / block
#endif
#include "f16.glsl"
#include "exact.glsl"
#ifdef QUANT_FUSED
#include "vexp.glsl"
#include "rmsscale.glsl"
uint r0, r1;    // mode 1: the rows the workgroup's values lie in
float sc0, sc1; // and their scales
float act_x(uint i) {
    if (p.mode == 1u) { // rmsnorm.comp's (x * scale) * w
        uint row = i >= r1 * p.n_in ? r1 : r0;
        precise float v = X[i] * (row == r1 ? sc1 : sc0);
        precise float o = v * NW[p.norm_at + (i - row * p.n_in)];
        return o;
    }
    float x = X[i], u = U[i]; // act.comp's arithmetic
    precise float z = x;
    if (p.gelu != 0u) {
        precise float c = 0.044715 * x * x * x;
        precise float xc = x + c;
        z = 1.5957691216057308 * xc;
    }
    precise float den = 1.0 + vexp1(0.0 - z);
    precise float y = fdiv_rn(x, den) * u;
    return y;
}
#else
float act_x(uint i) { return X[i]; }
#endif
void aq_put(uint w, uint word) { AQ[w] = word; }
void ad_put(uint b, float d) { AD[b] = d; }
#include "actq.glsl"
#include "clock.glsl"
#ifdef QUANT_FUSED
#define QK_MARK(pt) clock_mark(0xD0u + (pt))
#else
#define QK_MARK(pt) clock_mark(0xC0u + (pt))
#endif
void main() {
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    // rows are n_in wide, n_in a multiple of the block: blocks, and their words, are consecutive
    uint nw = p.n_blocks * (p.fmt != 0u ? 64u : 8u);
    if (64u * wg >= nw) return; // the whole workgroup: before any barrier
    clock_start();
    QK_MARK(0u);
#ifdef QUANT_FUSED
    if (p.mode == 1u) {
        uint first = 256u * wg, last = min(first + 255u, 4u * nw - 1u);
        r0 = first / p.n_in;
        r1 = last / p.n_in;
        sc0 = rms_scale(r0 * p.n_in, p.n_in, p.eps, gl_LocalInvocationID.x);
        sc1 = r1 != r0 ? rms_scale(r1 * p.n_in, p.n_in, p.eps, gl_LocalInvocationID.x) : sc0;
        QK_MARK(1u); // the norm's scales (lane 0's)
    }
#endif
    actq_round(0u, 64u * wg, nw, gl_LocalInvocationID.x, p.fmt != 0u);
    QK_MARK(4u);
}
