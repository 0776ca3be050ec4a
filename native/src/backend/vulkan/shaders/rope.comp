#version 450
// Rotary embedding of q (binding 2) and k (binding 3) in place; the cos/sin of each row's angles
// come from the host (IN, computed as the CPU does, in double). One invocation per rotated pair.
layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Inb { uint IN[]; };
layout(std430, binding = 2) buffer Qb { float Q[]; };
layout(std430, binding = 3) buffer Kb { float K[]; };
layout(push_constant) uniform P {
    uint n_rows, n_head, n_head_kv, head_dim, n_rot, neox, rope_at;
} p;
void main() {
    uint half_rot = p.n_rot / 2u;
    uint per_row = (p.n_head + p.n_head_kv) * half_rot;
    uint g = gl_GlobalInvocationID.x;
    if (g >= p.n_rows * per_row) return;
    uint t = g / per_row, rem = g % per_row;
    uint h = rem / half_rot, i = rem % half_rot;
    float c = uintBitsToFloat(IN[p.rope_at + t * p.n_rot + i]);
    float s = uintBitsToFloat(IN[p.rope_at + t * p.n_rot + half_rot + i]);
    uint a = p.neox != 0u ? i : 2u * i;
    uint b = p.neox != 0u ? i + half_rot : 2u * i + 1u;
    if (h < p.n_head) {
        uint base = (t * p.n_head + h) * p.head_dim;
        float x0 = Q[base + a], x1 = Q[base + b];
        precise float ya = x0 * c - x1 * s, yb = x0 * s + x1 * c; // no fused multiply-adds
        Q[base + a] = ya;
        Q[base + b] = yb;
    } else {
        uint base = (t * p.n_head_kv + (h - p.n_head)) * p.head_dim;
        float x0 = K[base + a], x1 = K[base + b];
        precise float ya = x0 * c - x1 * s, yb = x0 * s + x1 * c;
        K[base + a] = ya;
        K[base + b] = yb;
    }
}
