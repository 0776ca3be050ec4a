/* The weights on the device. Tensors are grouped, in file order, into storage buffers no larger
 * than maxStorageBufferRange (a tensor never straddles two). Where the device imports host
 * pointers (VK_EXT_external_memory_host) the model's span is imported in place (aligned-down
 * range, no copy); where that is refused (RADV: file-backed or read-only pages) or off, each
 * buffer gets device memory filled through one bounded staging buffer (<= 64 MiB). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vk.h"
#include "../../model/model.h"

#define STAGING_MAX ((uint64_t)64 << 20)

static uint64_t align_down(uint64_t v, uint64_t a) { return a ? v / a * a : v; }
static uint64_t align_up(uint64_t v, uint64_t a) { return a ? (v + a - 1) / a * a : v; }

static int cmp_off(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* chunks of [lo, hi) span offsets, each <= max bytes (after aligning its start down by align); a
 * tensor larger than that (a 262k-row embedding table on lavapipe's 128 MiB) in chunks of whole
 * rows, which the forward pass reads as parts (vk_forward.c's wref_parts) */
static geist_status plan_chunks(const gguf_file *g, uint64_t max, uint64_t align,
                                gt_vk_chunk **out, int32_t *n_out, gt_err *err) {
    const size_t n = (size_t)g->n_tensors;
    size_t cap = n ? n : 1;
    for (size_t i = 0; i < n; i++) /* room for the pieces of large tensors */
        if (g->tensors[i].nbytes + align > max) cap += (size_t)(g->tensors[i].nbytes / (max / 2)) + 1;
    const gguf_tensor **t = malloc((n ? n : 1) * sizeof *t);
    gt_vk_chunk *ch = calloc(cap, sizeof *ch);
    if (!t || !ch) {
        free(t);
        free(ch);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (vulkan weight plan)");
    }
    for (size_t i = 0; i < n; i++) t[i] = &g->tensors[i];
    qsort(t, n, sizeof *t, cmp_off);
    int32_t k = -1;
    uint64_t start = 0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t lo = g->data_offset + t[i]->offset, hi = lo + t[i]->nbytes;
        const uint64_t n_rows = t[i]->ne[0] ? t[i]->nelements / t[i]->ne[0] : 0;
        const uint64_t row = n_rows ? t[i]->nbytes / n_rows : 0;
        if (hi - align_down(lo, align) > max && row > 0 && row * n_rows == t[i]->nbytes &&
            row + 2 * align <= max / 2) {
            /* whole rows per chunk, each chunk its own (its start aligned down) */
            const uint64_t per = (max - align) / row;
            for (uint64_t r0 = 0; r0 < n_rows; r0 += per) {
                const uint64_t a = lo + r0 * row;
                const uint64_t b = r0 + per < n_rows ? a + per * row : hi;
                k++;
                start = align_down(a, align);
                ch[k].src_off = start;
                ch[k].size = b - start;
            }
            start = UINT64_MAX; /* the next tensor opens a chunk */
            continue;
        }
        if (hi - align_down(lo, align) > max) {
            const geist_status st = gt_fail(err, GEIST_ERR_UNSUPPORTED,
                    "vulkan: tensor '%.*s' (%llu bytes) exceeds the device's largest storage "
                    "buffer (%llu bytes)", (int)t[i]->name.len, t[i]->name.ptr,
                    (unsigned long long)t[i]->nbytes, (unsigned long long)max);
            free(t);
            free(ch);
            return st;
        }
        if (k < 0 || start == UINT64_MAX || hi - start > max) {
            k++;
            start = align_down(lo, align);
            ch[k].src_off = start;
        }
        ch[k].size = hi - start;
    }
    free(t);
    *out = ch;
    *n_out = k + 1;
    return GEIST_OK;
}

void gt_vk_model_free(gt_vk_model *vm) {
    if (!vm) return;
    gt_vk_ctx *c = vm->ctx;
    gt_vk_fwd_free(vm);
    for (int32_t i = 0; i < vm->n_chunks; i++) {
        if (vm->chunks[i].buf) c->f.DestroyBuffer(c->dev, vm->chunks[i].buf, NULL);
        if (vm->chunks[i].mem) c->f.FreeMemory(c->dev, vm->chunks[i].mem, NULL);
    }
    if (vm->imp) c->f.FreeMemory(c->dev, vm->imp, NULL);
    atomic_fetch_sub(&c->used, vm->memory.device_local);
    free(vm->chunks);
    free(vm);
}

static VkResult make_buffer(gt_vk_ctx *c, uint64_t size, VkBufferUsageFlags usage, bool external,
                            VkBuffer *out) {
    const VkExternalMemoryBufferCreateInfo ext = {
        .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
        .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT};
    const VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                    .pNext = external ? &ext : NULL, .size = size,
                                    .usage = usage, .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    return c->f.CreateBuffer(c->dev, &bci, NULL, out);
}

/* Imports [base + lo, base + hi) aligned to the device's import alignment; false: refused (the
 * caller falls back to copies), nothing kept. */
static bool try_import(gt_vk_ctx *c, gt_vk_model *vm, const uint8_t *base, uint64_t size) {
    const uint64_t a = c->probe.import_align ? c->probe.import_align : 4096;
    const uintptr_t p0 = (uintptr_t)align_down((uint64_t)(uintptr_t)base, a);
    const uintptr_t p1 = (uintptr_t)align_up((uint64_t)(uintptr_t)(base + size), a);
    const uint64_t bytes = (uint64_t)(p1 - p0);
    if (bytes > c->probe.max_alloc) return false;
    VkMemoryHostPointerPropertiesEXT hp = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
    if (c->f.GetMemoryHostPointerPropertiesEXT(
            c->dev, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, (void *)p0, &hp) !=
            VK_SUCCESS ||
        hp.memoryTypeBits == 0)
        return false;
    const int32_t type = gt_vk_memory_type(c, hp.memoryTypeBits, 0);
    if (type < 0) return false;
    const VkImportMemoryHostPointerInfoEXT imp = {
        .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
        .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
        .pHostPointer = (void *)p0};
    const VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                      .pNext = &imp, .allocationSize = bytes,
                                      .memoryTypeIndex = (uint32_t)type};
    if (c->f.AllocateMemory(c->dev, &mai, NULL, &vm->imp) != VK_SUCCESS) {
        vm->imp = VK_NULL_HANDLE;
        return false;
    }
    const uint64_t shift = (uint64_t)((uintptr_t)base - p0); /* span offset 0 within the import */
    bool ok = true;
    for (int32_t i = 0; ok && i < vm->n_chunks; i++) {
        gt_vk_chunk *ch = &vm->chunks[i];
        /* the buffer starts at the binding alignment at or below the chunk (256 covers it) */
        const uint64_t at = align_down(ch->src_off + shift, 256);
        ch->shift = ch->src_off + shift - at;
        ok = make_buffer(c, ch->size + ch->shift, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, true,
                         &ch->buf) == VK_SUCCESS;
        if (!ok) {
            ch->buf = VK_NULL_HANDLE;
            break;
        }
        VkMemoryRequirements rq;
        c->f.GetBufferMemoryRequirements(c->dev, ch->buf, &rq);
        ok = (rq.memoryTypeBits & (1u << type)) && (rq.alignment == 0 || at % rq.alignment == 0) &&
             at + rq.size <= bytes &&
             c->f.BindBufferMemory(c->dev, ch->buf, vm->imp, at) == VK_SUCCESS;
    }
    if (!ok) {
        for (int32_t i = 0; i < vm->n_chunks; i++)
            if (vm->chunks[i].buf) {
                c->f.DestroyBuffer(c->dev, vm->chunks[i].buf, NULL);
                vm->chunks[i].buf = VK_NULL_HANDLE;
            }
        c->f.FreeMemory(c->dev, vm->imp, NULL);
        vm->imp = VK_NULL_HANDLE;
        return false;
    }
    vm->imported = true;
    vm->memory.imported = bytes;
    return true;
}

/* Runs one copy from the staging buffer into dst and waits. */
static VkResult submit_copy(gt_vk_ctx *c, VkCommandBuffer cb, VkFence fence, VkBuffer src,
                            VkBuffer dst, uint64_t dst_off, uint64_t n) {
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkResult r = c->f.ResetCommandBuffer(cb, 0);
    if (r == VK_SUCCESS) r = c->f.BeginCommandBuffer(cb, &bi);
    if (r != VK_SUCCESS) return r;
    const VkBufferCopy region = {.srcOffset = 0, .dstOffset = dst_off, .size = n};
    c->f.CmdCopyBuffer(cb, src, dst, 1, &region);
    if ((r = c->f.EndCommandBuffer(cb)) != VK_SUCCESS) return r;
    return gt_vk_submit_wait(c, cb, fence);
}

static geist_status upload(gt_vk_ctx *c, gt_vk_model *vm, const uint8_t *base, gt_err *err) {
    uint64_t need = 0, biggest = 0;
    for (int32_t i = 0; i < vm->n_chunks; i++) {
        need += vm->chunks[i].size;
        if (vm->chunks[i].size > biggest) biggest = vm->chunks[i].size;
    }
    uint64_t cap = c->memory_limit ? c->memory_limit : c->probe.device_local;
    const uint64_t used = atomic_load(&c->used);
    if (need + used > cap)
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY,
                       "vulkan: the weights need %.1f MiB of device memory; %s has %.1f MiB left "
                       "(%s %.1f MiB)", need / 1048576.0, c->probe.name,
                       (cap > used ? cap - used : 0) / 1048576.0,
                       c->memory_limit ? "the engine's device_memory_limit is" : "its heaps hold",
                       cap / 1048576.0);
    VkBuffer stage = VK_NULL_HANDLE;
    VkDeviceMemory stage_mem = VK_NULL_HANDLE;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    void *mapped = NULL;
    const uint64_t stage_size = biggest < STAGING_MAX ? biggest : STAGING_MAX;
    geist_status st = GEIST_OK;
    VkResult r = make_buffer(c, stage_size, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, false, &stage);
    if (r != VK_SUCCESS) {
        stage = VK_NULL_HANDLE;
        st = gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: cannot create a staging buffer (%d)", (int)r);
        goto done;
    }
    VkMemoryRequirements rq;
    c->f.GetBufferMemoryRequirements(c->dev, stage, &rq);
    int32_t ht = gt_vk_memory_type(c, rq.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                           VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .allocationSize = rq.size, .memoryTypeIndex = (uint32_t)ht};
    if (ht < 0 || c->f.AllocateMemory(c->dev, &mai, NULL, &stage_mem) != VK_SUCCESS) {
        stage_mem = VK_NULL_HANDLE;
        st = gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: cannot allocate %.1f MiB of staging memory",
                     rq.size / 1048576.0);
        goto done;
    }
    if (c->f.BindBufferMemory(c->dev, stage, stage_mem, 0) != VK_SUCCESS ||
        c->f.MapMemory(c->dev, stage_mem, 0, VK_WHOLE_SIZE, 0, &mapped) != VK_SUCCESS) {
        mapped = NULL;
        st = gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: cannot map the staging buffer");
        goto done;
    }
    const VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                             .commandPool = c->pool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                             .commandBufferCount = 1};
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (c->f.AllocateCommandBuffers(c->dev, &cai, &cb) != VK_SUCCESS ||
        c->f.CreateFence(c->dev, &fci, NULL, &fence) != VK_SUCCESS) {
        st = gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: cannot create a command buffer");
        goto done;
    }
    for (int32_t i = 0; i < vm->n_chunks && !st; i++) {
        gt_vk_chunk *ch = &vm->chunks[i];
        r = make_buffer(c, ch->size, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                        false, &ch->buf);
        if (r != VK_SUCCESS) {
            ch->buf = VK_NULL_HANDLE;
            st = gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: cannot create a weight buffer (%d)", (int)r);
            break;
        }
        c->f.GetBufferMemoryRequirements(c->dev, ch->buf, &rq);
        int32_t dt = gt_vk_memory_type(c, rq.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
        if (dt < 0) dt = gt_vk_memory_type(c, rq.memoryTypeBits, 0);
        mai.allocationSize = rq.size;
        mai.memoryTypeIndex = (uint32_t)dt;
        if ((r = c->f.AllocateMemory(c->dev, &mai, NULL, &ch->mem)) != VK_SUCCESS) {
            ch->mem = VK_NULL_HANDLE;
            st = gt_fail(err, GEIST_ERR_OUT_OF_MEMORY,
                         "vulkan: out of device memory for the weights (%.1f MiB more; %d)",
                         rq.size / 1048576.0, (int)r);
            break;
        }
        vm->memory.device_local += rq.size;
        atomic_fetch_add(&c->used, rq.size);
        if (c->f.BindBufferMemory(c->dev, ch->buf, ch->mem, 0) != VK_SUCCESS) {
            st = gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot bind a weight buffer");
            break;
        }
        for (uint64_t done = 0; done < ch->size && !st; done += stage_size) {
            const uint64_t nb = ch->size - done < stage_size ? ch->size - done : stage_size;
            memcpy(mapped, base + ch->src_off + done, (size_t)nb);
            if ((r = submit_copy(c, cb, fence, stage, ch->buf, done, nb)) != VK_SUCCESS)
                st = gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: a weight upload failed (%d)", (int)r);
        }
    }
done:
    if (fence) c->f.DestroyFence(c->dev, fence, NULL);
    (void)cb; /* freed with the pool */
    if (mapped) c->f.UnmapMemory(c->dev, stage_mem);
    if (stage) c->f.DestroyBuffer(c->dev, stage, NULL);
    if (stage_mem) c->f.FreeMemory(c->dev, stage_mem, NULL);
    return st;
}

geist_status gt_vk_model_init(gt_vk_ctx *c, geist_model *m, bool load_file, gt_vk_model **out,
                              bool *drop_span, gt_err *err) {
    *drop_span = false;
    gt_vk_model *vm = calloc(1, sizeof *vm);
    if (!vm) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (vulkan model)");
    vm->ctx = c;
    vm->model = m;
    const gguf_file *g = &m->gguf;
    uint64_t max = c->probe.max_buffer;
    if (max > ((uint64_t)1 << 31)) max = (uint64_t)1 << 31;
    /* buffer offsets: 256 covers every device's minStorageBufferOffsetAlignment and binding */
    geist_status st = plan_chunks(g, max - 256, 256, &vm->chunks, &vm->n_chunks, err);
    if (st) {
        free(vm);
        return st;
    }
    vm->memory.host_owned = sizeof *vm + (uint64_t)vm->n_chunks * sizeof *vm->chunks;
    /* A file's pages are imported only on unified memory: a discrete GPU would read them over the
     * bus at every step, and the upload lets the pages go (seen on the NVIDIA H200, driver 580:
     * the driver refused the file mapping's import, and device allocations of the upload after
     * that refused attempt failed for fixtures above ~8 MB). */
    const bool may_import = c->allow_import && (!load_file || c->probe.unified_memory);
    if (!(may_import && try_import(c, vm, g->base, g->size))) {
        st = upload(c, vm, g->base, err);
        if (st) {
            gt_vk_model_free(vm);
            return st;
        }
        *drop_span = load_file; /* the file's tensor pages are not read again */
    }
    if ((st = gt_vk_fwd_init(vm, err))) {
        *drop_span = false;
        gt_vk_model_free(vm);
        return st;
    }
    *out = vm;
    return GEIST_OK;
}
