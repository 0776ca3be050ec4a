/* The native Vulkan tests' host-visible storage buffers (test_vk_actq.c, test_vk_argmax.c,
 * test_metal_step_vk.c): made mapped and zeroed, at least 16 bytes. A kernel runs on them through
 * the backend's own gt_vk_kernel (vk_kernel.c), as its device probes do. */
#ifndef GEIST_TESTS_VK_HBUF_H
#define GEIST_TESTS_VK_HBUF_H
#include <string.h>

#include "backend/vulkan/vk.h"

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

#endif
