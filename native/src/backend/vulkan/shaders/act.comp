#version 450
// gate = silu(gate) * up, elementwise over n values
layout(local_size_x = 64) in;
layout(std430, binding = 2) readonly buffer Ub { float U[]; };
layout(std430, binding = 3) buffer Gb { float G[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= p.n) return;
    float x = G[i];
    G[i] = x / (1.0 + exp(-x)) * U[i];
}
