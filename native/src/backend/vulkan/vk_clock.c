/* The in-kernel clock build's collector (`scons gpu_clock=1`: GEIST_VK_CLOCK here, GT_CLOCK in
 * the shaders; shaders/clock.glsl). A measurement build only: every kernel that marks its steps
 * appends records to one host-readable buffer (binding 13 of every descriptor set); after each
 * pass the host folds them into per-mark counts and sums, and the model's teardown prints the
 * table to stderr (geist bench's output carries it). In the product's builds this file is empty. */
#include "vk.h"

#ifdef GEIST_VK_CLOCK
#include <stdio.h>
#include <string.h>

#define CLOCK_WORDS (4u * 1048576u) /* 16 MiB: ~1M records a pass; more are dropped (counted) */

geist_status gt_vk_clock_init(gt_vk_ctx *c, gt_vk_clock *k, gt_err *err) {
    memset(k, 0, sizeof *k);
    const VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                    .size = (VkDeviceSize)CLOCK_WORDS * 4,
                                    .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                             VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                    .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkBuffer b;
    if (c->f.CreateBuffer(c->dev, &bci, NULL, &b) != VK_SUCCESS)
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: the clock buffer");
    k->buf = b;
    VkMemoryRequirements rq;
    c->f.GetBufferMemoryRequirements(c->dev, k->buf, &rq);
    const VkMemoryPropertyFlags hv =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int32_t t = gt_vk_memory_type(c, rq.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (t < 0) t = gt_vk_memory_type(c, rq.memoryTypeBits, hv);
    const VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                      .allocationSize = rq.size, .memoryTypeIndex = (uint32_t)t};
    VkDeviceMemory m;
    void *map = NULL;
    if (t < 0 || c->f.AllocateMemory(c->dev, &mai, NULL, &m) != VK_SUCCESS) {
        gt_vk_clock_free(c, k);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: the clock buffer's memory");
    }
    k->mem = m;
    if (c->f.BindBufferMemory(c->dev, k->buf, k->mem, 0) != VK_SUCCESS ||
        c->f.MapMemory(c->dev, k->mem, 0, VK_WHOLE_SIZE, 0, &map) != VK_SUCCESS) {
        gt_vk_clock_free(c, k);
        return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot map the clock buffer");
    }
    k->map = map;
    k->words = CLOCK_WORDS;
    return GEIST_OK;
}

void gt_vk_clock_free(gt_vk_ctx *c, gt_vk_clock *k) {
    if (k->map) c->f.UnmapMemory(c->dev, k->mem);
    if (k->buf) c->f.DestroyBuffer(c->dev, k->buf, NULL);
    if (k->mem) c->f.FreeMemory(c->dev, k->mem, NULL);
    memset(k, 0, sizeof *k);
}

void gt_vk_clock_collect(gt_vk_clock *k) {
    if (!k->map) return;
    const uint32_t used = k->map[0], n = used < k->words - 4 ? used : k->words - 4;
    k->dropped += (used - n) / 4;
    k->passes++;
    for (uint32_t i = 4; i + 4 <= n + 4; i += 4) {
        const uint32_t id = k->map[i] & 255u;
        k->n[id]++;
        k->cyc[id] += k->map[i + 1];
        k->ns[id] += k->map[i + 2];
        k->step[id] += k->map[i + 3];
    }
}

/* mark names by the kernel's family (id >> 4) and the mark (id & 15), clock.glsl's includers */
static const char *family(uint32_t f) {
    static const char *const names[] = {
        "?", "attn", "attn_part", "attn_fresh", "attn_part_fresh", "attn_grp", "attn_part_grp",
        "attn_fresh_grp", "attn_part_fresh_grp", "matvec", "matvec rows8=1", "matvec rows8=2",
        "quant", "quant_fused", "rmsnorm", "argmax"};
    return names[f & 15u];
}
static const char *mark(uint32_t f, uint32_t m) {
    static const char *const attn[16] = {
        "start", "query heads ready", "scores", "maxima", "exponentials", "sums",
        "V tiles' sums", "outputs written", "chunk counted (done)", "chunk counted (merges)",
        "O's 8-bit rows", "merged", "", "", "", ""};
    static const char *const mv[16] = {"start", "norm scales", "8-bit rows", "block sums",
                                       "outputs written", "", "", "", "", "", "", "", "", "", "", ""};
    static const char *const qk[16] = {"start", "norm scales", "", "", "8-bit rows written", "",
                                       "", "", "", "", "", "", "", "", "", ""};
    static const char *const rn[16] = {"start", "the scale", "", "", "written", "", "", "", "",
                                       "", "", "", "", "", "", ""};
    static const char *const am[16] = {"start", "", "", "", "a part's best", "the row's id", "",
                                       "", "", "", "", "", "", "", "", ""};
    if (f >= 1 && f <= 8) return attn[m & 15u];
    if (f >= 9 && f <= 11) return mv[m & 15u];
    if (f == 14) return rn[m & 15u];
    if (f == 15) return am[m & 15u];
    return qk[m & 15u];
}

void gt_vk_clock_report(const gt_vk_clock *k, FILE *out) {
    if (!k->passes) return;
    fprintf(out, "geist clock: %llu passes, %llu records dropped; a mark's mean time since its "
            "workgroup's start (SM cycles; device clock ns) and since its previous mark (cycles)\n",
            (unsigned long long)k->passes, (unsigned long long)k->dropped);
    for (uint32_t id = 0; id < 256; id++) {
        if (!k->n[id]) continue;
        const double n = (double)k->n[id];
        fprintf(out, "geist clock: 0x%02x %-20s %-24s n %10llu  cycles %10.1f  ns %10.1f  "
                "step %10.1f\n", id, family(id >> 4), mark(id >> 4, id & 15u),
                (unsigned long long)k->n[id], (double)k->cyc[id] / n, (double)k->ns[id] / n,
                (double)k->step[id] / n);
    }
}
#else
typedef int gt_vk_clock_unused; /* a translation unit must declare something */
#endif
