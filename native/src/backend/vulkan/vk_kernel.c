/* Built-in kernels by name, and one kernel run on its own: a probe of the device at setup
 * (vk_forward.c's fma probe) and the native kernel tests (native/tests/test_vk_*.c) use the same
 * code. Its own command pool and fence, so it needs no other state of the context; the queue is
 * taken under the context's queue_lock. */
#include <string.h>

#include "vk.h"
#include "vk_spv.h"

const gt_vk_spv *gt_vk_spv_find(const char *name) {
    for (int i = 0; i < gt_vk_n_shaders; i++)
        if (strcmp(gt_vk_shaders[i].name, name) == 0) return &gt_vk_shaders[i];
    return NULL;
}

VkResult gt_vk_pipeline_make(gt_vk_ctx *c, const gt_vk_spv *s, VkPipelineLayout pl,
                             const VkSpecializationInfo *spec, uint32_t lanes, VkPipeline *out) {
    *out = VK_NULL_HANDLE;
    if (!s) return VK_ERROR_INITIALIZATION_FAILED;
    const VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                           .codeSize = s->size, .pCode = s->code};
    VkShaderModule mod;
    VkResult vr = c->f.CreateShaderModule(c->dev, &smci, NULL, &mod);
    if (vr != VK_SUCCESS) return vr;
    const VkPipelineShaderStageRequiredSubgroupSizeCreateInfo req = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
        .requiredSubgroupSize = lanes};
    const VkComputePipelineCreateInfo cpci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .pNext = lanes ? &req : NULL,
                  .flags = lanes ? VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT : 0,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = mod, .pName = "main",
                  .pSpecializationInfo = spec},
        .layout = pl};
    vr = c->f.CreateComputePipelines(c->dev, VK_NULL_HANDLE, 1, &cpci, NULL, out);
    c->f.DestroyShaderModule(c->dev, mod, NULL);
    if (vr != VK_SUCCESS) *out = VK_NULL_HANDLE; /* a failed create leaves it undefined */
    return vr;
}

geist_status gt_vk_kernel_make(gt_vk_ctx *c, const char *name, int n, const uint32_t *slot,
                               const VkBuffer *bufs, uint32_t pc_bytes,
                               const VkSpecializationInfo *spec, gt_vk_kernel *k, gt_err *err) {
    memset(k, 0, sizeof *k);
    k->c = c;
    k->pc_bytes = pc_bytes;
    if (n < 1 || n > GT_VK_KERNEL_MAX_BIND || pc_bytes > 128 || pc_bytes % 4)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "vulkan: kernel %s: %d bindings, %u bytes of "
                       "push constants (at most %d, and 128 in words)", name, n, (unsigned)pc_bytes,
                       GT_VK_KERNEL_MAX_BIND);
    const gt_vk_spv *s = gt_vk_spv_find(name);
    if (!s) return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: shader %s is not built in", name);
    VkDescriptorSetLayoutBinding lb[GT_VK_KERNEL_MAX_BIND];
    for (int i = 0; i < n; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){.binding = slot[i],
                                               .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                               .descriptorCount = 1,
                                               .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    const VkDescriptorSetLayoutCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = (uint32_t)n,
        .pBindings = lb};
    const VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, pc_bytes};
    const VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, (uint32_t)n};
    const VkDescriptorPoolCreateInfo dpci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                             .maxSets = 1, .poolSizeCount = 1, .pPoolSizes = &ps};
    const VkCommandPoolCreateInfo cpci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                          .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                          .queueFamilyIndex = c->queue_family};
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    /* each handle is kept only when its create succeeded (a failed one's is undefined) */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout pl;
    VkDescriptorPool dpool;
    VkCommandPool cpool;
    VkFence fence;
    const char *what = "a descriptor set layout";
    if (c->f.CreateDescriptorSetLayout(c->dev, &dci, NULL, &dsl) != VK_SUCCESS) goto fail;
    k->dsl = dsl;
    const VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                             .setLayoutCount = 1, .pSetLayouts = &k->dsl,
                                             .pushConstantRangeCount = pc_bytes ? 1u : 0u,
                                             .pPushConstantRanges = &pcr};
    what = "a pipeline layout";
    if (c->f.CreatePipelineLayout(c->dev, &plci, NULL, &pl) != VK_SUCCESS) goto fail;
    k->pl = pl;
    what = "the pipeline";
    if (gt_vk_pipeline_make(c, s, k->pl, spec, 0, &k->pipe) != VK_SUCCESS) goto fail;
    what = "a descriptor pool";
    if (c->f.CreateDescriptorPool(c->dev, &dpci, NULL, &dpool) != VK_SUCCESS) goto fail;
    k->dpool = dpool;
    const VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                            .descriptorPool = k->dpool, .descriptorSetCount = 1,
                                            .pSetLayouts = &k->dsl};
    what = "a descriptor set";
    if (c->f.AllocateDescriptorSets(c->dev, &ai, &k->set) != VK_SUCCESS) goto fail;
    VkDescriptorBufferInfo dbi[GT_VK_KERNEL_MAX_BIND];
    VkWriteDescriptorSet wr[GT_VK_KERNEL_MAX_BIND];
    for (int i = 0; i < n; i++) {
        dbi[i] = (VkDescriptorBufferInfo){bufs[i], 0, VK_WHOLE_SIZE};
        wr[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                       .dstSet = k->set, .dstBinding = slot[i],
                                       .descriptorCount = 1,
                                       .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                       .pBufferInfo = &dbi[i]};
    }
    c->f.UpdateDescriptorSets(c->dev, (uint32_t)n, wr, 0, NULL);
    what = "a command pool";
    if (c->f.CreateCommandPool(c->dev, &cpci, NULL, &cpool) != VK_SUCCESS) goto fail;
    k->cpool = cpool;
    const VkCommandBufferAllocateInfo cai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = k->cpool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    what = "a command buffer"; /* freed with its pool */
    if (c->f.AllocateCommandBuffers(c->dev, &cai, &k->cb) != VK_SUCCESS) goto fail;
    what = "a fence";
    if (c->f.CreateFence(c->dev, &fci, NULL, &fence) != VK_SUCCESS) goto fail;
    k->fence = fence;
    return GEIST_OK;
fail:
    gt_vk_kernel_free(k);
    return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: kernel %s: cannot create %s", name, what);
}

static void barrier_after(const gt_vk_kernel *k, VkAccessFlags dst, VkPipelineStageFlags to) {
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT, .dstAccessMask = dst};
    k->c->f.CmdPipelineBarrier(k->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, to, 0, 1, &mb, 0, NULL,
                               0, NULL);
}

geist_status gt_vk_kernel_run(gt_vk_kernel *k, int n, const void *const *pcs,
                              const uint32_t *groups, gt_err *err) {
    const uint32_t pc_bytes = k->pc_bytes;
    gt_vk_ctx *c = k->c;
    if (!c || !k->fence)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "vulkan: the kernel was not made");
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (c->f.ResetCommandBuffer(k->cb, 0) != VK_SUCCESS ||
        c->f.BeginCommandBuffer(k->cb, &bi) != VK_SUCCESS)
        return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot record a kernel's commands");
    c->f.CmdBindPipeline(k->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipe);
    c->f.CmdBindDescriptorSets(k->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pl, 0, 1, &k->set, 0, NULL);
    for (int i = 0; i < n; i++) {
        if (pc_bytes)
            c->f.CmdPushConstants(k->cb, k->pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, pc_bytes, pcs[i]);
        c->f.CmdDispatch(k->cb, groups[i], 1, 1);
        if (i + 1 < n)
            barrier_after(k, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                          VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT);
    }
    barrier_after(k, VK_ACCESS_HOST_READ_BIT, VK_PIPELINE_STAGE_HOST_BIT);
    if (c->f.EndCommandBuffer(k->cb) != VK_SUCCESS)
        return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot record a kernel's commands");
    const VkResult vr = gt_vk_submit_wait(c, k->cb, k->fence);
    if (vr != VK_SUCCESS)
        return gt_fail(err, vr == VK_ERROR_DEVICE_LOST ? GEIST_ERR_INTERNAL : GEIST_ERR_OUT_OF_MEMORY,
                       "vulkan: kernel run failed on the device (%d)", (int)vr);
    return GEIST_OK;
}

void gt_vk_kernel_free(gt_vk_kernel *k) {
    gt_vk_ctx *c = k->c;
    if (!c) return;
    if (k->fence) c->f.DestroyFence(c->dev, k->fence, NULL);
    if (k->cpool) c->f.DestroyCommandPool(c->dev, k->cpool, NULL);
    if (k->dpool) c->f.DestroyDescriptorPool(c->dev, k->dpool, NULL);
    if (k->pipe) c->f.DestroyPipeline(c->dev, k->pipe, NULL);
    if (k->pl) c->f.DestroyPipelineLayout(c->dev, k->pl, NULL);
    if (k->dsl) c->f.DestroyDescriptorSetLayout(c->dev, k->dsl, NULL);
    memset(k, 0, sizeof *k);
}
