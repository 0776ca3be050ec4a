#version 450
// Whether this device's fma() rounds once (vk_forward.c's probe_fused_fma, at a model's first
// session): for each of the n pairs (x, y) at v[2i], v[2i + 1] it writes fma(x, y, -(x * y))
// over x: the product's exact rounding error where fma is fused; 0 or another value where the
// driver multiplies and adds. exact.glsl's FMA_EXACT follows the host's check of every result.
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Vb { float v[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= p.n) return;
    float x = v[2u * i], y = v[2u * i + 1u];
    precise float q = x * y;
    precise float e = fma(x, y, -q);
    v[2u * i] = e;
}
