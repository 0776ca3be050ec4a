// Marks inside a kernel, for the in-kernel clock build only (`scons gpu_clock=1`: glslc -DGT_CLOCK,
// the C side GEIST_VK_CLOCK; vk_forward.c's clock_*): where a workgroup's time goes between a
// kernel's steps, which the per-dispatch timestamps of `geist bench --profile` cannot say. Lane 0
// of each workgroup appends a record (4 words after the count in word 0) at every mark: the
// mark's id and the workgroup, the SM's cycles and the device's clock (VK_KHR_shader_clock:
// subgroup and device scope) since the workgroup's clock_start(), and the SM's cycles since its
// previous mark (the step's own cost, whatever marks other paths skip). In every other build
// the marks are nothing (and the kernels declare no clock capability or binding 13).
#ifndef GEIST_CLOCK_GLSL
#define GEIST_CLOCK_GLSL
#ifdef GT_CLOCK
#extension GL_ARB_shader_clock : require
#extension GL_EXT_shader_realtime_clock : require
layout(std430, binding = 13) coherent buffer Clkb { uint CLK[]; };
uvec2 clk_c0, clk_r0;
uint clk_prev;
void clock_start() {
    clk_c0 = clock2x32ARB();
    clk_r0 = clockRealtime2x32EXT();
    clk_prev = clk_c0.x;
}
void clock_mark(uint id) {
    if (gl_LocalInvocationIndex != 0u) return;
    uvec2 c = clock2x32ARB(), r = clockRealtime2x32EXT();
    uint at = 4u + atomicAdd(CLK[0], 4u);
    if (at + 4u > uint(CLK.length())) return;
    CLK[at] = id | (min(gl_WorkGroupID.x, 0xFFFFFFu) << 8);
    CLK[at + 1u] = c.x - clk_c0.x;
    CLK[at + 2u] = r.x - clk_r0.x;
    CLK[at + 3u] = c.x - clk_prev;
    clk_prev = c.x;
}
#else
void clock_start() {}
void clock_mark(uint id) {}
#endif
#endif
