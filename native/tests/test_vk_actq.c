/* quant.comp (shaders/actq.glsl: the 8-bit activation blocks matvec.comp also makes in shared
 * memory) against act_quant.c's gt_quantize_act_row, bit for bit, on inputs chosen for the
 * cases the lanes' reduction must get right: the block of 256's value of largest magnitude the
 * first in index order when +m and -m tie (in one lane, in one group of 8 lanes, across groups),
 * all-zero and -0 blocks, products landing on .5 (round half away / to even), a partial last
 * workgroup of blocks of 32, and random values of wide range.
 *
 * Run by tests/core/test_vulkan.py (which pins lavapipe): test_vk_actq run. Without arguments
 * (the suite's plain run of every test binary) it says so and exits 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef GEIST_HAVE_VULKAN
#include "backend/act_quant.h"
#include "backend/vulkan/vk.h"
#include "backend/vulkan/vk_spv.h"
#include "vk_hbuf.h"

#define NB256 40 /* blocks of 256 */
#define N (256 * NB256)
#define NB32 (8 * NB256 - 3) /* blocks of 32: the last workgroup has 5 of its 8 */

static int fail(const char *what) {
    printf("test_vk_actq: FAILED: %s\n", what);
    return 1;
}

static uint32_t rng = 12345u;
static float frand(void) { /* in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

/* random blocks of 256 (each 8 of 32) with the cases above in blocks 1..23 */
static void fill(float *x) {
    for (int i = 0; i < N; i++) x[i] = frand() * ldexpf(1.0f, (int)(frand() * 20.0f));
    float *b;
    b = x + 256 * 1; /* zeros, some negative */
    for (int i = 0; i < 256; i++) b[i] = (i & 1) ? -0.0f : 0.0f;
    static const int tie[][2] = {{0, 1}, {4, 7}, {3, 30}, {200, 5}, {17, 255}, {64, 128}, {250, 2}};
    for (int k = 0; k < (int)(sizeof tie / sizeof tie[0]); k++) { /* +m and -m, largest */
        b = x + 256 * (2 + 2 * k);
        for (int i = 0; i < 256; i++) b[i] = frand();
        b[tie[k][0]] = 3.5f, b[tie[k][1]] = -3.5f;
        b = x + 256 * (3 + 2 * k); /* the other sign first */
        for (int i = 0; i < 256; i++) b[i] = frand();
        b[tie[k][0]] = -3.5f, b[tie[k][1]] = 3.5f;
    }
    b = x + 256 * 20; /* amax 127: d = 1 (both formats), halves */
    for (int i = 0; i < 256; i++) b[i] = (float)(i % 64 - 32) + 0.5f;
    for (int j = 0; j < 8; j++) b[32 * j] = 127.0f;
    b = x + 256 * 21; /* equal magnitudes throughout, signs alternating */
    for (int i = 0; i < 256; i++) b[i] = (i % 3) ? 0.75f : -0.75f;
    b = x + 256 * 22; /* tiny values: f16 scale underflow for blocks of 32 */
    for (int i = 0; i < 256; i++) b[i] = frand() * 1e-9f;
    b = x + 256 * 23; /* one nonzero value in the block, last of the block of 256 */
    memset(b, 0, 256 * sizeof *b);
    b[255] = -1e-3f;
}

/* quant.comp over x's first n_blocks blocks of fmt into aq / ad, as vk_forward.c dispatches it */
static int run_quant(gt_vk_ctx *c, VkPipeline pipe, VkPipelineLayout pl, VkDescriptorSet set,
                     VkCommandBuffer cb, VkFence fence, uint32_t fmt, uint32_t n_blocks) {
    const uint32_t pc[3] = {256, n_blocks, fmt};
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (c->f.ResetCommandBuffer(cb, 0) != VK_SUCCESS ||
        c->f.BeginCommandBuffer(cb, &bi) != VK_SUCCESS)
        return 1;
    c->f.CmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    c->f.CmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &set, 0, NULL);
    c->f.CmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof pc, pc);
    c->f.CmdDispatch(cb, fmt ? n_blocks : (n_blocks + 7) / 8, 1, 1);
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                                .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    c->f.CmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                            0, 1, &mb, 0, NULL, 0, NULL);
    if (c->f.EndCommandBuffer(cb) != VK_SUCCESS) return 1;
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                             .pCommandBuffers = &cb};
    return c->f.ResetFences(c->dev, 1, &fence) != VK_SUCCESS ||
           c->f.QueueSubmit(c->queue, 1, &si, fence) != VK_SUCCESS ||
           c->f.WaitForFences(c->dev, 1, &fence, VK_TRUE, UINT64_MAX) != VK_SUCCESS;
}

/* the device's bytes and scales against the CPU's row; the first difference, or 0 */
static int compare(const float *x, const hbuf *aq, const hbuf *ad, int fmt, int64_t n) {
    const gt_act_format f = fmt ? GT_ACTF_Q8_256 : GT_ACTF_Q8_32;
    const int64_t blk = fmt ? 256 : 32;
    uint8_t *row = malloc(gt_act_q_row_bytes(f, n));
    if (!row) return fail("memory");
    gt_quantize_act_row(f, x, n, row);
    const int8_t *q = (const int8_t *)aq->map;
    const float *ds = gt_act_q_scales(row, n), *dd = (const float *)ad->map;
    int rc = 0;
    for (int64_t i = 0; i < n && !rc; i++)
        if ((int8_t)row[i] != q[i]) {
            printf("test_vk_actq: fmt %d value %lld (block %lld): q %d, the CPU's %d\n", fmt,
                   (long long)i, (long long)(i / blk), q[i], (int8_t)row[i]);
            rc = 1;
        }
    for (int64_t b = 0; b < n / blk && !rc; b++)
        if (memcmp(&ds[b], &dd[b], 4) != 0) {
            printf("test_vk_actq: fmt %d block %lld: d %a, the CPU's %a\n", fmt, (long long)b,
                   (double)dd[b], (double)ds[b]);
            rc = 1;
        }
    free(row);
    return rc;
}

static int run(void) {
    gt_err err = {0};
    const gt_dev_options vo = {0};
    gt_vk_ctx *c = NULL;
    if (gt_vk_ctx_create(&vo, &c, &err) != GEIST_OK) return fail(err.msg);
    const gt_vk_spv *s = NULL;
    for (int i = 0; i < gt_vk_n_shaders && !s; i++)
        if (strcmp(gt_vk_shaders[i].name, "quant") == 0) s = &gt_vk_shaders[i];
    if (!s) return fail("no quant shader");
    hbuf xb, aq, ad;
    if (hbuf_make(c, N * 4, &xb) || hbuf_make(c, N, &aq) || hbuf_make(c, N / 32 * 4, &ad))
        return fail("buffers");
    fill((float *)xb.map);
    const uint32_t slot[3] = {2, 4, 5};
    const VkBuffer bufs[3] = {xb.b, aq.b, ad.b};
    VkDescriptorSetLayoutBinding lb[3];
    for (int i = 0; i < 3; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){.binding = slot[i],
                                               .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                               .descriptorCount = 1,
                                               .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    const VkDescriptorSetLayoutCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = 3,
        .pBindings = lb};
    const VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 12};
    VkDescriptorSetLayout dsl;
    VkPipelineLayout pl;
    VkShaderModule mod;
    VkPipeline pipe;
    VkDescriptorPool dpool;
    VkDescriptorSet set;
    VkCommandBuffer cb;
    VkFence fence;
    if (c->f.CreateDescriptorSetLayout(c->dev, &dci, NULL, &dsl) != VK_SUCCESS) return fail("dsl");
    const VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                             .setLayoutCount = 1, .pSetLayouts = &dsl,
                                             .pushConstantRangeCount = 1,
                                             .pPushConstantRanges = &pcr};
    if (c->f.CreatePipelineLayout(c->dev, &plci, NULL, &pl) != VK_SUCCESS) return fail("layout");
    const VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                           .codeSize = s->size, .pCode = s->code};
    if (c->f.CreateShaderModule(c->dev, &smci, NULL, &mod) != VK_SUCCESS) return fail("module");
    const VkComputePipelineCreateInfo cpci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = mod, .pName = "main"},
        .layout = pl};
    if (c->f.CreateComputePipelines(c->dev, VK_NULL_HANDLE, 1, &cpci, NULL, &pipe) != VK_SUCCESS)
        return fail("pipeline");
    c->f.DestroyShaderModule(c->dev, mod, NULL);
    const VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 3};
    const VkDescriptorPoolCreateInfo dpci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                             .maxSets = 1, .poolSizeCount = 1, .pPoolSizes = &ps};
    if (c->f.CreateDescriptorPool(c->dev, &dpci, NULL, &dpool) != VK_SUCCESS) return fail("pool");
    const VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                            .descriptorPool = dpool, .descriptorSetCount = 1,
                                            .pSetLayouts = &dsl};
    if (c->f.AllocateDescriptorSets(c->dev, &ai, &set) != VK_SUCCESS) return fail("set");
    VkDescriptorBufferInfo dbi[3];
    VkWriteDescriptorSet wr[3];
    for (int i = 0; i < 3; i++) {
        dbi[i] = (VkDescriptorBufferInfo){bufs[i], 0, VK_WHOLE_SIZE};
        wr[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                       .dstSet = set, .dstBinding = slot[i], .descriptorCount = 1,
                                       .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                       .pBufferInfo = &dbi[i]};
    }
    c->f.UpdateDescriptorSets(c->dev, 3, wr, 0, NULL);
    const VkCommandBufferAllocateInfo cai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = c->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (c->f.AllocateCommandBuffers(c->dev, &cai, &cb) != VK_SUCCESS ||
        c->f.CreateFence(c->dev, &fci, NULL, &fence) != VK_SUCCESS)
        return fail("command buffer");
    int rc = 0;
    for (uint32_t fmt = 0; fmt < 2 && !rc; fmt++) {
        memset(aq.map, 0x5A, N); /* what the device does not write stays visibly wrong */
        memset(ad.map, 0x5A, N / 32 * 4);
        const uint32_t nb = fmt ? NB256 : NB32;
        if (run_quant(c, pipe, pl, set, cb, fence, fmt, nb)) rc = fail("submit");
        else
            rc = compare((const float *)xb.map, &aq, &ad, (int)fmt,
                         (int64_t)nb * (fmt ? 256 : 32));
        if (!rc) printf("test_vk_actq: fmt %u, %u blocks: the CPU's bits\n", fmt, nb);
    }
    c->f.DestroyFence(c->dev, fence, NULL);
    c->f.FreeCommandBuffers(c->dev, c->pool, 1, &cb);
    c->f.DestroyDescriptorPool(c->dev, dpool, NULL);
    c->f.DestroyPipeline(c->dev, pipe, NULL);
    c->f.DestroyPipelineLayout(c->dev, pl, NULL);
    c->f.DestroyDescriptorSetLayout(c->dev, dsl, NULL);
    hbuf_free(c, &xb);
    hbuf_free(c, &aq);
    hbuf_free(c, &ad);
    gt_vk_ctx_free(c);
    if (!rc) printf("test_vk_actq: ok\n");
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "run") != 0) {
        printf("test_vk_actq: skipped (run by tests/core/test_vulkan.py, which pins lavapipe)\n");
        return 0;
    }
    return run();
}
#else
int main(void) {
    printf("test_vk_actq: skipped (built without Vulkan)\n");
    return 0;
}
#endif
