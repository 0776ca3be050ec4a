/* The native Vulkan tests' host-visible storage buffers (test_vk_actq.c, test_vk_argmax.c,
 * test_metal_step_vk.c): made mapped and zeroed, at least 16 bytes; and one built-in kernel run
 * on such buffers (vk_kernel: its pipeline, descriptor set and command buffer). */
#ifndef GEIST_TESTS_VK_HBUF_H
#define GEIST_TESTS_VK_HBUF_H
#include <string.h>

#include "backend/vulkan/vk.h"
#include "backend/vulkan/vk_spv.h"

typedef struct hbuf {
    VkBuffer b;
    VkDeviceMemory mem;
    void *map;
} hbuf;

/* 0 on success; on a failure what was made is left for hbuf_free */
static inline int hbuf_make(gt_vk_ctx *c, uint64_t size, hbuf *o) {
    memset(o, 0, sizeof *o);
    const VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                    .size = size < 16 ? 16 : size,
                                    .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                    .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    if (c->f.CreateBuffer(c->dev, &bci, NULL, &o->b) != VK_SUCCESS) return 1;
    VkMemoryRequirements rq;
    c->f.GetBufferMemoryRequirements(c->dev, o->b, &rq);
    const int32_t t = gt_vk_memory_type(c, rq.memoryTypeBits,
                                        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                            VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    const VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                      .allocationSize = rq.size, .memoryTypeIndex = (uint32_t)t};
    if (t < 0 || c->f.AllocateMemory(c->dev, &mai, NULL, &o->mem) != VK_SUCCESS) return 1;
    if (c->f.BindBufferMemory(c->dev, o->b, o->mem, 0) != VK_SUCCESS) return 1;
    if (c->f.MapMemory(c->dev, o->mem, 0, VK_WHOLE_SIZE, 0, &o->map) != VK_SUCCESS) return 1;
    memset(o->map, 0, (size_t)bci.size);
    return 0;
}

static inline void hbuf_free(gt_vk_ctx *c, hbuf *o) {
    if (o->map) c->f.UnmapMemory(c->dev, o->mem);
    if (o->b) c->f.DestroyBuffer(c->dev, o->b, NULL);
    if (o->mem) c->f.FreeMemory(c->dev, o->mem, NULL);
}

/* The built-in kernel `name` (gt_vk_shaders) as a pipeline of layout pl, its specialization
 * constants spec's (NULL: their defaults); 0 on success */
static inline int vk_pipeline_make(gt_vk_ctx *c, const char *name, VkPipelineLayout pl,
                                   const VkSpecializationInfo *spec, VkPipeline *out) {
    const gt_vk_spv *s = NULL;
    for (int i = 0; i < gt_vk_n_shaders && !s; i++)
        if (strcmp(gt_vk_shaders[i].name, name) == 0) s = &gt_vk_shaders[i];
    if (!s) return 1;
    const VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                           .codeSize = s->size, .pCode = s->code};
    VkShaderModule mod;
    if (c->f.CreateShaderModule(c->dev, &smci, NULL, &mod) != VK_SUCCESS) return 1;
    const VkComputePipelineCreateInfo cpci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = mod, .pName = "main",
                  .pSpecializationInfo = spec},
        .layout = pl};
    const VkResult vr = c->f.CreateComputePipelines(c->dev, VK_NULL_HANDLE, 1, &cpci, NULL, out);
    c->f.DestroyShaderModule(c->dev, mod, NULL);
    return vr != VK_SUCCESS;
}

/* One built-in kernel (gt_vk_shaders' `name`) with n storage buffers at bindings slot[i],
 * pc_bytes of push constants and the specialization constants spec (NULL: the defaults). */
typedef struct vk_kernel {
    gt_vk_ctx *c;
    VkDescriptorSetLayout dsl;
    VkPipelineLayout pl;
    VkPipeline pipe;
    VkDescriptorPool dpool;
    VkDescriptorSet set;
    VkCommandBuffer cb;
    VkFence fence;
} vk_kernel;

#define VK_KERNEL_MAX_BIND 8

/* 0 on success; on a failure what was made is left for vk_kernel_free */
static inline int vk_kernel_make(gt_vk_ctx *c, const char *name, int n, const uint32_t *slot,
                                 const VkBuffer *bufs, uint32_t pc_bytes,
                                 const VkSpecializationInfo *spec, vk_kernel *k) {
    memset(k, 0, sizeof *k);
    k->c = c;
    if (n > VK_KERNEL_MAX_BIND) return 1;
    VkDescriptorSetLayoutBinding lb[VK_KERNEL_MAX_BIND];
    for (int i = 0; i < n; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){.binding = slot[i],
                                               .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                               .descriptorCount = 1,
                                               .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    const VkDescriptorSetLayoutCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = (uint32_t)n,
        .pBindings = lb};
    if (c->f.CreateDescriptorSetLayout(c->dev, &dci, NULL, &k->dsl) != VK_SUCCESS) return 1;
    const VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, pc_bytes};
    const VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                             .setLayoutCount = 1, .pSetLayouts = &k->dsl,
                                             .pushConstantRangeCount = 1,
                                             .pPushConstantRanges = &pcr};
    if (c->f.CreatePipelineLayout(c->dev, &plci, NULL, &k->pl) != VK_SUCCESS ||
        vk_pipeline_make(c, name, k->pl, spec, &k->pipe))
        return 1;
    const VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, (uint32_t)n};
    const VkDescriptorPoolCreateInfo dpci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                             .maxSets = 1, .poolSizeCount = 1, .pPoolSizes = &ps};
    if (c->f.CreateDescriptorPool(c->dev, &dpci, NULL, &k->dpool) != VK_SUCCESS) return 1;
    const VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                            .descriptorPool = k->dpool, .descriptorSetCount = 1,
                                            .pSetLayouts = &k->dsl};
    if (c->f.AllocateDescriptorSets(c->dev, &ai, &k->set) != VK_SUCCESS) return 1;
    VkDescriptorBufferInfo dbi[VK_KERNEL_MAX_BIND];
    VkWriteDescriptorSet wr[VK_KERNEL_MAX_BIND];
    for (int i = 0; i < n; i++) {
        dbi[i] = (VkDescriptorBufferInfo){bufs[i], 0, VK_WHOLE_SIZE};
        wr[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                       .dstSet = k->set, .dstBinding = slot[i],
                                       .descriptorCount = 1,
                                       .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                       .pBufferInfo = &dbi[i]};
    }
    c->f.UpdateDescriptorSets(c->dev, (uint32_t)n, wr, 0, NULL);
    const VkCommandBufferAllocateInfo cai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = c->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (c->f.AllocateCommandBuffers(c->dev, &cai, &k->cb) != VK_SUCCESS) return 1;
    return c->f.CreateFence(c->dev, &fci, NULL, &k->fence) != VK_SUCCESS;
}

static inline void vk_kernel_barrier(const vk_kernel *k, VkAccessFlags dst, VkPipelineStageFlags to) {
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT, .dstAccessMask = dst};
    k->c->f.CmdPipelineBarrier(k->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, to, 0, 1, &mb, 0, NULL,
                               0, NULL);
}

/* n dispatches in one submission, dispatch i with push constants pcs[i] (pc_bytes each) and
 * groups[i] workgroups (x), a barrier after each (the last one's to the host); waits. 0 on
 * success. */
static inline int vk_kernel_run(vk_kernel *k, int n, const void *const *pcs, uint32_t pc_bytes,
                                const uint32_t *groups) {
    gt_vk_ctx *c = k->c;
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (c->f.ResetCommandBuffer(k->cb, 0) != VK_SUCCESS ||
        c->f.BeginCommandBuffer(k->cb, &bi) != VK_SUCCESS)
        return 1;
    c->f.CmdBindPipeline(k->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipe);
    c->f.CmdBindDescriptorSets(k->cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pl, 0, 1, &k->set, 0, NULL);
    for (int i = 0; i < n; i++) {
        c->f.CmdPushConstants(k->cb, k->pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, pc_bytes, pcs[i]);
        c->f.CmdDispatch(k->cb, groups[i], 1, 1);
        if (i + 1 < n)
            vk_kernel_barrier(k, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                              VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT);
    }
    vk_kernel_barrier(k, VK_ACCESS_HOST_READ_BIT, VK_PIPELINE_STAGE_HOST_BIT);
    if (c->f.EndCommandBuffer(k->cb) != VK_SUCCESS) return 1;
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                             .pCommandBuffers = &k->cb};
    return c->f.ResetFences(c->dev, 1, &k->fence) != VK_SUCCESS ||
           c->f.QueueSubmit(c->queue, 1, &si, k->fence) != VK_SUCCESS ||
           c->f.WaitForFences(c->dev, 1, &k->fence, VK_TRUE, UINT64_MAX) != VK_SUCCESS;
}

static inline void vk_kernel_free(vk_kernel *k) {
    gt_vk_ctx *c = k->c;
    if (!c) return;
    if (k->fence) c->f.DestroyFence(c->dev, k->fence, NULL);
    if (k->cb) c->f.FreeCommandBuffers(c->dev, c->pool, 1, &k->cb);
    if (k->dpool) c->f.DestroyDescriptorPool(c->dev, k->dpool, NULL);
    if (k->pipe) c->f.DestroyPipeline(c->dev, k->pipe, NULL);
    if (k->pl) c->f.DestroyPipelineLayout(c->dev, k->pl, NULL);
    if (k->dsl) c->f.DestroyDescriptorSetLayout(c->dev, k->dsl, NULL);
}
#endif
