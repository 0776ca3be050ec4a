// Marks inside a kernel, for the in-kernel clock build only (`scons gpu_clock=1`: glslc -DGT_CLOCK,
// the C side GEIST_VK_CLOCK; vk_clock.c's gt_vk_clock_*): where a workgroup's time goes between a
// kernel's steps, which the per-dispatch timestamps of `geist bench --profile` cannot say. At its
// clock_start() lane 0 of each workgroup takes a block of 64 words of the records buffer (binding
// 13, device-local: word 0 counts the blocks taken, block b at 64 (b + 1)), with its one atomic
// before the start's clock read; each mark then writes a record into the block, without atomics:
// the mark's id (9 bits) and the workgroup, the SM's cycles and the device clock's ticks
// (VK_KHR_shader_clock: subgroup and device scope) since the start, and the SM's cycles since the
// previous mark (the step's own cost, whatever marks other paths skip); the block's word 0 says
// how many marks it reached (records: the first 15). In every other build the marks are nothing (and the kernels declare no
// clock capability or binding 13).
#ifndef GEIST_CLOCK_GLSL
#define GEIST_CLOCK_GLSL
#ifdef GT_CLOCK
#extension GL_ARB_shader_clock : require
#extension GL_EXT_shader_realtime_clock : require
layout(std430, binding = 13) buffer Clkb { uint CLK[]; };
uvec2 clk_c0, clk_r0;
uint clk_prev, clk_at, clk_n; // clk_at: the block's first word (0: none)
void clock_start() {
    clk_at = 0u;
    clk_n = 0u;
    if (gl_LocalInvocationIndex == 0u) {
        uint b = atomicAdd(CLK[0], 1u);
        if (b < uint(CLK.length()) / 64u - 1u) clk_at = 64u + 64u * b;
    }
    clk_c0 = clock2x32ARB();
    clk_r0 = clockRealtime2x32EXT();
    clk_prev = clk_c0.x;
}
void clock_mark(uint id) {
    if (gl_LocalInvocationIndex != 0u || clk_at == 0u) return;
    uvec2 c = clock2x32ARB(), r = clockRealtime2x32EXT();
    if (clk_n < 15u) { // the block's room; later marks only counted (the host reports them lost)
        uint at = clk_at + 1u + 4u * clk_n;
        CLK[at] = id | (min(gl_WorkGroupID.x, 0x7FFFFFu) << 9);
        CLK[at + 1u] = c.x - clk_c0.x;
        CLK[at + 2u] = r.x - clk_r0.x;
        CLK[at + 3u] = c.x - clk_prev;
    }
    clk_prev = c.x;
    clk_n++;
    CLK[clk_at] = clk_n;
}
#else
void clock_start() {}
void clock_mark(uint id) {}
#endif
#endif
