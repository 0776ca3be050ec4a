/* The in-kernel clock build's collector (`scons gpu_clock=1`: GEIST_VK_CLOCK here, GT_CLOCK in
 * the shaders; shaders/clock.glsl). A measurement build only: every kernel that marks its steps
 * writes records into a device-local buffer (binding 13 of every descriptor set), copied into
 * host-cached memory at the pass's end; after each decode pass (a row a session) the host folds
 * them into per-mark counts and sums, and the model's teardown prints the table to stderr (geist
 * bench's output carries it). In the product's builds this file is empty. */
#include "vk.h"

#ifdef GEIST_VK_CLOCK
#include <stdio.h>
#include <string.h>

/* 32 MiB: 131,071 workgroups' blocks of 64 words a pass (a Gemma 3 decode pass on a GPU takes
 * ~67,000: 32,768 of them the output product); a pass's further workgroups, its last ones, are not
 * marked (counted) */
#define CLOCK_WORDS (8u * 1048576u)

/* a buffer of `bytes` with all of `want` (else all of `fallback`), bound; mapped if `map` */
static geist_status clock_buffer(gt_vk_ctx *c, VkBufferUsageFlags usage, VkMemoryPropertyFlags want,
                                 VkMemoryPropertyFlags fallback, VkBuffer *buf, VkDeviceMemory *mem,
                                 void **map, gt_err *err) {
    const VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                    .size = (VkDeviceSize)CLOCK_WORDS * 4, .usage = usage,
                                    .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkBuffer b;
    if (c->f.CreateBuffer(c->dev, &bci, NULL, &b) != VK_SUCCESS)
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: the clock's buffers");
    *buf = b;
    VkMemoryRequirements rq;
    c->f.GetBufferMemoryRequirements(c->dev, b, &rq);
    int32_t t = gt_vk_memory_type(c, rq.memoryTypeBits, want);
    if (t < 0) t = gt_vk_memory_type(c, rq.memoryTypeBits, fallback);
    const VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                      .allocationSize = rq.size, .memoryTypeIndex = (uint32_t)t};
    VkDeviceMemory m;
    if (t < 0 || c->f.AllocateMemory(c->dev, &mai, NULL, &m) != VK_SUCCESS)
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: the clock's buffers' memory");
    *mem = m;
    if (c->f.BindBufferMemory(c->dev, b, m, 0) != VK_SUCCESS ||
        (map && c->f.MapMemory(c->dev, m, 0, VK_WHOLE_SIZE, 0, map) != VK_SUCCESS))
        return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot bind or map the clock's buffers");
    return GEIST_OK;
}

geist_status gt_vk_clock_init(gt_vk_ctx *c, gt_vk_clock *k, gt_err *err) {
    if (k->dev) return GEIST_OK; /* made by an earlier, failed pipeline setup */
    memset(k, 0, sizeof *k);
    const VkMemoryPropertyFlags hv =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    void *map = NULL;
    /* the kernels write device-local memory (no bus in a mark); a copy after the pass brings
     * the records into host-cached memory */
    geist_status st = clock_buffer(c, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                   VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                   VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, &k->dev, &k->dmem, NULL, err);
    if (!st)
        st = clock_buffer(c, VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                          hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, hv, &k->host, &k->hmem, &map, err);
    if (st) {
        gt_vk_clock_free(c, k);
        return st;
    }
    k->map = map;
    k->words = CLOCK_WORDS;
    return GEIST_OK;
}

void gt_vk_clock_free(gt_vk_ctx *c, gt_vk_clock *k) {
    if (k->map) c->f.UnmapMemory(c->dev, k->hmem);
    if (k->host) c->f.DestroyBuffer(c->dev, k->host, NULL);
    if (k->hmem) c->f.FreeMemory(c->dev, k->hmem, NULL);
    if (k->dev) c->f.DestroyBuffer(c->dev, k->dev, NULL);
    if (k->dmem) c->f.FreeMemory(c->dev, k->dmem, NULL);
    memset(k, 0, sizeof *k);
}

static void clock_barrier(gt_vk_ctx *c, VkCommandBuffer cb, VkAccessFlags src, VkAccessFlags dst,
                          VkPipelineStageFlags from, VkPipelineStageFlags to) {
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = src,
                                .dstAccessMask = dst};
    c->f.CmdPipelineBarrier(cb, from, to, 0, 1, &mb, 0, NULL, 0, NULL);
}

void gt_vk_clock_begin(gt_vk_ctx *c, const gt_vk_clock *k, VkCommandBuffer cb) {
    c->f.CmdFillBuffer(cb, k->dev, 0, 4, 0); /* no block taken yet */
    clock_barrier(c, cb, VK_ACCESS_TRANSFER_WRITE_BIT,
                  VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                  VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT);
}

void gt_vk_clock_end(gt_vk_ctx *c, const gt_vk_clock *k, VkCommandBuffer cb) {
    clock_barrier(c, cb, VK_ACCESS_SHADER_WRITE_BIT, VK_ACCESS_TRANSFER_READ_BIT,
                  VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT);
    const VkBufferCopy all = {0, 0, (VkDeviceSize)k->words * 4};
    c->f.CmdCopyBuffer(cb, k->dev, k->host, 1, &all);
    clock_barrier(c, cb, VK_ACCESS_TRANSFER_WRITE_BIT, VK_ACCESS_HOST_READ_BIT,
                  VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT);
}

void gt_vk_clock_collect(gt_vk_clock *k, bool decode) {
    if (!k->map) return;
    if (!decode) { /* a prompt's pass: the table is of decode steps */
        k->skipped++;
        return;
    }
    const uint32_t taken = k->map[0], cap = k->words / 64 - 1;
    const uint32_t nb = taken < cap ? taken : cap;
    k->dropped += taken - nb;
    k->passes++;
    for (uint32_t b = 0; b < nb; b++) {
        const uint32_t *blk = k->map + 64 + 64 * (size_t)b;
        const uint32_t nr = blk[0] < 15 ? blk[0] : 15;
        k->lost += blk[0] - nr;
        for (uint32_t r = 0; r < nr; r++) {
            const uint32_t *rec = blk + 1 + 4 * r, id = rec[0] & 511u;
            k->n[id]++;
            k->cyc[id] += rec[1];
            k->ticks[id] += rec[2];
            k->step[id] += rec[3];
        }
    }
}

/* mark names by the kernel's family (id >> 4) and the mark (id & 15), clock.glsl's includers;
 * families 16-17 the Vulkan-only kernels */
static const char *family(uint32_t f) {
    static const char *const names[] = {
        "?", "attn", "attn_part", "attn_fresh", "attn_part_fresh", "attn_grp", "attn_part_grp",
        "attn_fresh_grp", "attn_part_fresh_grp", "matvec", "matvec rows8=1", "matvec rows8=2",
        "quant", "quant_fused", "rmsnorm", "argmax", "mvfast", "attnfast"};
    return f < sizeof names / sizeof names[0] ? names[f] : "?";
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
    static const char *const mf[16] = {"start", "residual staged", "norm scale", "lane sums",
                                       "row sums", "written", "block copied", "", "", "", "", "",
                                       "", "", "", ""};
    static const char *const af[16] = {"start", "prologue", "rounds", "outputs (one chunk)",
                                       "partials counted", "merged", "", "", "", "", "", "", "",
                                       "", "", ""};
    if (f == 16) return mf[m & 15u];
    if (f == 17) return af[m & 15u];
    if (f >= 1 && f <= 8) return attn[m & 15u];
    if (f >= 9 && f <= 11) return mv[m & 15u];
    if (f == 14) return rn[m & 15u];
    if (f == 15) return am[m & 15u];
    return qk[m & 15u];
}

void gt_vk_clock_report(const gt_vk_clock *k, FILE *out) {
    if (!k->passes) return;
    fprintf(out, "geist clock: %llu decode passes (%llu others not counted), %llu "
            "workgroups not marked, %llu marks past a block's 15 lost; a mark's mean time since "
            "its workgroup's start (SM cycles; the device clock's ticks: ns on NVIDIA) and since "
            "its previous mark (cycles)\n",
            (unsigned long long)k->passes, (unsigned long long)k->skipped,
            (unsigned long long)k->dropped, (unsigned long long)k->lost);
    for (uint32_t id = 0; id < 512; id++) {
        if (!k->n[id]) continue;
        const double n = (double)k->n[id];
        fprintf(out, "geist clock: 0x%02x %-20s %-24s n %10llu  cycles %10.1f  ticks %10.1f  "
                "step %10.1f\n", id, family(id >> 4), mark(id >> 4, id & 15u),
                (unsigned long long)k->n[id], (double)k->cyc[id] / n, (double)k->ticks[id] / n,
                (double)k->step[id] / n);
    }
}
#else
typedef int gt_vk_clock_unused; /* a translation unit must declare something */
#endif
