#version 450
#extension GL_GOOGLE_include_directive : require
// The greedy token of each logits row on the device, so that 4 bytes a row cross the bus instead
// of the vocabulary's logits (Gemma 3: 1 MB a row): the sampler's greedy rule (sampler.h), the
// first id of the largest logit, NaN never (nor -inf), +inf as FLT_MAX; -1 when no id is left.
// Stage 0: a workgroup per (row, part of `chunk` ids) keeps its lanes' best, each lane walking
// its ids in increasing order (a strictly larger value replaces: the lowest id of a tie stays),
// then the lanes' best by the same rule (a tie: the lower id) into PART[row][part]. Stage 1: a
// workgroup per row, the same over its parts into IDS[row]. Values are compared as integer keys
// in the floats' order (-0 made +0, so they tie as the CPU's compare has them): no float compare,
// which a driver may do with denormals flushed or NaN's semantics relaxed, so the CPU's id for
// the same logits exactly.
layout(local_size_x = 128) in;
layout(std430, binding = 2) readonly buffer Lb { uint L[]; };   // logits rows, n_vocab floats each
layout(std430, binding = 3) buffer Pb { uint PART[]; };         // per (row, part): key, id
layout(std430, binding = 4) writeonly buffer Ib { int IDS[]; }; // per row: the id, or -1
layout(push_constant) uniform P { uint n_vocab, parts, chunk, stage; } p;

shared uint sv[128];
shared uint si[128];

const uint NONE = 0xFFFFFFFFu;

// a candidate beats another: larger, or equal with the lower id (NONE: never a candidate's id)
bool better(uint v, uint i, uint bv, uint bi) { return v > bv || (v == bv && i < bi); }

void reduce_and_keep(uint lid, uint bv, uint bi) {
    sv[lid] = bv;
    si[lid] = bi;
    barrier();
    for (uint s = 64u; s > 0u; s >>= 1) {
        if (lid < s && si[lid + s] != NONE &&
            (si[lid] == NONE || better(sv[lid + s], si[lid + s], sv[lid], si[lid]))) {
            sv[lid] = sv[lid + s];
            si[lid] = si[lid + s];
        }
        barrier();
    }
}

#include "clock.glsl"
void main() {
    const uint lid = gl_LocalInvocationID.x;
    clock_start();
    clock_mark(0xF0u);
    const uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint bv = 0u;
    uint bi = NONE;
    if (p.stage == 0u) {
        const uint row = wg / p.parts, part = wg % p.parts;
        const uint lo = part * p.chunk, hi = min(lo + p.chunk, p.n_vocab);
        const uint base = row * p.n_vocab;
        for (uint i = lo + lid; i < hi; i += 128u) {
            uint b = L[base + i];
            if ((b & 0x7FFFFFFFu) > 0x7F800000u || b == 0xFF800000u) continue; // NaN, -inf
            if (b == 0x7F800000u) b = 0x7F7FFFFFu;                               // +inf: FLT_MAX
            if (b == 0x80000000u) b = 0u;                                        // -0: +0
            const uint v = (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;       // the order's key
            if (bi == NONE || v > bv) {
                bv = v;
                bi = i;
            }
        }
        reduce_and_keep(lid, bv, bi);
        if (lid == 0u) {
            PART[2u * wg] = sv[0];
            PART[2u * wg + 1u] = si[0];
        }
        clock_mark(0xF4u); // a part's best
    } else {
        const uint row = wg;
        for (uint k = lid; k < p.parts; k += 128u) {
            const uint at = 2u * (row * p.parts + k);
            const uint i = PART[at + 1u];
            const uint v = PART[at];
            if (i != NONE && (bi == NONE || better(v, i, bv, bi))) {
                bv = v;
                bi = i;
            }
        }
        reduce_and_keep(lid, bv, bi);
        if (lid == 0u) IDS[row] = int(si[0]);
        clock_mark(0xF5u); // the row's id
    }
}
