/* The Vulkan backend's private header: the loader's entry points (opened at run time, so the
 * library loads where there is no Vulkan), the engine's device context and the device model.
 * Vulkan headers are needed at build time only (VK_NO_PROTOTYPES: nothing links libvulkan). */
#ifndef GEIST_VK_H
#define GEIST_VK_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <pthread.h>
#include <stdatomic.h>

#include "../backend.h"

/* Every Vulkan function the backend calls, resolved from the loader per engine (no globals). */
typedef struct gt_vk_fns {
    void *lib; /* dlopen handle of the loader */
    PFN_vkGetInstanceProcAddr GetInstanceProcAddr;
    PFN_vkCreateInstance CreateInstance;
    PFN_vkEnumerateInstanceVersion EnumerateInstanceVersion;
    PFN_vkDestroyInstance DestroyInstance;
    PFN_vkEnumeratePhysicalDevices EnumeratePhysicalDevices;
    PFN_vkGetPhysicalDeviceProperties GetPhysicalDeviceProperties;
    PFN_vkGetPhysicalDeviceProperties2 GetPhysicalDeviceProperties2;
    PFN_vkGetPhysicalDeviceFeatures2 GetPhysicalDeviceFeatures2;
    PFN_vkGetPhysicalDeviceMemoryProperties GetPhysicalDeviceMemoryProperties;
    PFN_vkGetPhysicalDeviceQueueFamilyProperties GetPhysicalDeviceQueueFamilyProperties;
    PFN_vkEnumerateDeviceExtensionProperties EnumerateDeviceExtensionProperties;
    PFN_vkGetDeviceProcAddr GetDeviceProcAddr;
    PFN_vkCreateDevice CreateDevice;
    PFN_vkDestroyDevice DestroyDevice;
    PFN_vkGetDeviceQueue GetDeviceQueue;
    PFN_vkCreateBuffer CreateBuffer;
    PFN_vkDestroyBuffer DestroyBuffer;
    PFN_vkGetBufferMemoryRequirements GetBufferMemoryRequirements;
    PFN_vkAllocateMemory AllocateMemory;
    PFN_vkFreeMemory FreeMemory;
    PFN_vkBindBufferMemory BindBufferMemory;
    PFN_vkMapMemory MapMemory;
    PFN_vkUnmapMemory UnmapMemory;
    PFN_vkCreateCommandPool CreateCommandPool;
    PFN_vkDestroyCommandPool DestroyCommandPool;
    PFN_vkAllocateCommandBuffers AllocateCommandBuffers;
    PFN_vkBeginCommandBuffer BeginCommandBuffer;
    PFN_vkEndCommandBuffer EndCommandBuffer;
    PFN_vkResetCommandBuffer ResetCommandBuffer;
    PFN_vkCmdCopyBuffer CmdCopyBuffer;
    PFN_vkQueueSubmit QueueSubmit;
    PFN_vkCreateFence CreateFence;
    PFN_vkDestroyFence DestroyFence;
    PFN_vkWaitForFences WaitForFences;
    PFN_vkGetFenceStatus GetFenceStatus;
    PFN_vkResetFences ResetFences;
    PFN_vkGetMemoryHostPointerPropertiesEXT GetMemoryHostPointerPropertiesEXT;
    /* the forward pass (vk_forward.c) */
    PFN_vkCreateShaderModule CreateShaderModule;
    PFN_vkDestroyShaderModule DestroyShaderModule;
    PFN_vkCreateDescriptorSetLayout CreateDescriptorSetLayout;
    PFN_vkDestroyDescriptorSetLayout DestroyDescriptorSetLayout;
    PFN_vkCreatePipelineLayout CreatePipelineLayout;
    PFN_vkDestroyPipelineLayout DestroyPipelineLayout;
    PFN_vkCreateComputePipelines CreateComputePipelines;
    PFN_vkDestroyPipeline DestroyPipeline;
    PFN_vkCreateDescriptorPool CreateDescriptorPool;
    PFN_vkDestroyDescriptorPool DestroyDescriptorPool;
    PFN_vkResetDescriptorPool ResetDescriptorPool;
    PFN_vkAllocateDescriptorSets AllocateDescriptorSets;
    PFN_vkUpdateDescriptorSets UpdateDescriptorSets;
    PFN_vkCmdBindPipeline CmdBindPipeline;
    PFN_vkCmdBindDescriptorSets CmdBindDescriptorSets;
    PFN_vkCmdPushConstants CmdPushConstants;
    PFN_vkCmdDispatch CmdDispatch;
    PFN_vkCmdPipelineBarrier CmdPipelineBarrier;
    PFN_vkCmdFillBuffer CmdFillBuffer;
    PFN_vkFreeCommandBuffers FreeCommandBuffers;
    PFN_vkCreateQueryPool CreateQueryPool;
    PFN_vkDestroyQueryPool DestroyQueryPool;
    PFN_vkCmdResetQueryPool CmdResetQueryPool;
    PFN_vkCmdWriteTimestamp CmdWriteTimestamp;
    PFN_vkGetQueryPoolResults GetQueryPoolResults;
} gt_vk_fns;

/* Opens the loader: `path` when given, else the system's names (libvulkan.so.1, vulkan-1.dll,
 * libvulkan.1.dylib / libMoltenVK.dylib) and resolves the global entry points. */
geist_status gt_vk_load(gt_vk_fns *f, const char *path, gt_err *err);
/* Instance-level entry points (after vkCreateInstance). */
geist_status gt_vk_load_instance(gt_vk_fns *f, VkInstance inst, gt_err *err);
/* Device-level entry points (after vkCreateDevice). */
geist_status gt_vk_load_device(gt_vk_fns *f, VkDevice dev, bool host_import, gt_err *err);
void gt_vk_unload(gt_vk_fns *f);

/* What device choice sees of each device (a pure function of these, unit-tested). */
typedef struct gt_vk_cand {
    char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
    VkPhysicalDeviceType type;
    uint64_t device_local; /* bytes of its device-local heaps */
    bool usable;           /* Vulkan 1.2, a compute queue and GT_VK_SHARED_NEED */
} gt_vk_cand;

/* The device `want` names (NULL/"auto", an index, or a name substring) among n candidates:
 * its index, or -1 with err saying why (listing the devices). */
int32_t gt_vk_choose(const gt_vk_cand *c, int32_t n, const char *want, gt_err *err);

typedef struct gt_vk_ctx {
    gt_vk_fns f;
    VkInstance inst;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t queue_family;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem;
    gt_dev_probe probe;
    VkCommandPool pool;
    uint64_t memory_limit; /* the engine's cap on device bytes (0: the heaps' size) */
    _Atomic uint64_t used; /* device bytes allocated by this engine's models and sessions */
    bool allow_import;     /* the engine allows host-pointer import */
    int32_t attn_chunk;    /* the split attention's positions per chunk (vk_forward.c); 0: never
                              (device_attn_chunk resolved: vk_device.c) */
    bool profile;          /* a timestamp after every dispatch (GEIST_DEVICE_PROFILE) */
    bool int_dot;          /* the *_idot kernels (integer dot products: vk_device.c's choice) */
    bool attn_per_head;    /* GEIST_DEVICE_ATTN_PER_HEAD: the attention's *_grp kernels unused */
    bool fast;             /* GEIST_DEVICE_FAST: decode-size products take mvfast.comp, decode
                              rows' attention attnfast.comp */
    uint32_t subgroup_min; /* the fewest lanes a compute kernel's subgroup may run where they
                              have subgroup sums (basic and arithmetic operations); 0: none */
    uint32_t attn_lanes;   /* the subgroup size attnfast.comp runs in, every subgroup in full
                              (8 to 128; 0: the device cannot promise that: vk_device.c) */
    bool attn_lanes_required; /* its pipeline requires that size in full subgroups (the size
                                 control), else the device runs only that size */
    bool sg_shuffle;       /* subgroup shuffles in compute kernels (outfast.comp's clusters) */
    uint32_t compute_units; /* the device's SMs or CUs where its driver says (VK_NV_shader_sm_builtins,
                               VK_AMD_shader_core_properties); 0: unknown */
    pthread_mutex_t queue_lock; /* the queue and command pool: one submitter at a time */
} gt_vk_ctx;

geist_status gt_vk_ctx_create(const gt_dev_options *o, gt_vk_ctx **out, gt_err *err);
void gt_vk_ctx_free(gt_vk_ctx *c);

/* cb submitted alone on the context's queue (under queue_lock) with `fence` (reset first), and
 * waited for: the first failing call's result, else VK_SUCCESS. */
VkResult gt_vk_submit_wait(gt_vk_ctx *c, VkCommandBuffer cb, VkFence fence);
/* Its two halves, for a host that works while the device runs: cb submitted as above, then the
 * wait for its fence, expected to signal at end_ns (CLOCK_MONOTONIC; 0: unknown, the driver's
 * wait alone). With an expected end the driver's wait sleeps through most of it and the fence is
 * polled for the rest, so that the host learns of the end within microseconds, not a sleeping
 * thread's wake-up later (a decode step of a small model on a GPU is about a millisecond: the
 * wake-up was 8-15 % of it). */
VkResult gt_vk_submit(gt_vk_ctx *c, VkCommandBuffer cb, VkFence fence);
VkResult gt_vk_wait_until(gt_vk_ctx *c, VkFence fence, uint64_t end_ns);

/* A memory type index with all of `want` among the bits of `types`, or -1. */
int32_t gt_vk_memory_type(const gt_vk_ctx *c, uint32_t types, VkMemoryPropertyFlags want);

/* One storage buffer of the weights: a range of tensors, below maxStorageBufferRange. */
typedef struct gt_vk_chunk {
    VkBuffer buf;
    VkDeviceMemory mem; /* owned by this chunk (upload), or VK_NULL_HANDLE (import: in `imp`) */
    uint64_t src_off;   /* offset of the chunk's first byte in the model's span */
    uint64_t size;
    uint64_t shift;     /* bytes of the buffer before src_off (import: binding alignment) */
} gt_vk_chunk;

typedef struct gt_vk_model {
    gt_vk_ctx *ctx;
    int32_t n_chunks;
    gt_vk_chunk *chunks;
    VkDeviceMemory imp;   /* the imported host range (import), else VK_NULL_HANDLE */
    uint64_t imp_base;    /* its start, as an offset in the span (may be negative: aligned down) */
    gt_dev_memory memory;
    bool imported;
    struct geist_model *model;
    struct gt_vk_fwd *fwd; /* the forward pass's state (vk_forward.c), NULL: not runnable */
    char refuse[256];      /* why sessions are refused ("" when they run) */
} gt_vk_model;

geist_status gt_vk_model_init(gt_vk_ctx *c, struct geist_model *m, bool load_file,
                              gt_vk_model **out, bool *drop_span, gt_err *err);
void gt_vk_model_free(gt_vk_model *vm);

/* ---- built-in kernels (vk_kernel.c) ---- */
struct gt_vk_spv;
/* The built-in kernel `name` (gt_vk_shaders: its file name without .comp), or NULL. */
const struct gt_vk_spv *gt_vk_spv_find(const char *name);
/* s's pipeline of layout pl, its specialization constants spec's (NULL: their defaults), in
 * full subgroups of `lanes` (the size control: c->attn_lanes_required; 0: the device's way);
 * *out VK_NULL_HANDLE unless VK_SUCCESS (s NULL: VK_ERROR_INITIALIZATION_FAILED). */
VkResult gt_vk_pipeline_make(gt_vk_ctx *c, const struct gt_vk_spv *s, VkPipelineLayout pl,
                             const VkSpecializationInfo *spec, uint32_t lanes, VkPipeline *out);

/* One built-in kernel run on its own (a device probe at setup, the native kernel tests): its n
 * storage buffers at bindings slot[i], pc_bytes of push constants, its own command pool. */
#define GT_VK_KERNEL_MAX_BIND 8
typedef struct gt_vk_kernel {
    gt_vk_ctx *c;
    VkDescriptorSetLayout dsl;
    VkPipelineLayout pl;
    VkPipeline pipe;
    VkDescriptorPool dpool;
    VkDescriptorSet set;
    VkCommandPool cpool;
    VkCommandBuffer cb;
    VkFence fence;
    uint32_t pc_bytes; /* its push constants' range */
} gt_vk_kernel;
/* On a failure what was made is freed (k stays safe to free again). */
geist_status gt_vk_kernel_make(gt_vk_ctx *c, const char *name, int n, const uint32_t *slot,
                               const VkBuffer *bufs, uint32_t pc_bytes,
                               const VkSpecializationInfo *spec, gt_vk_kernel *k, gt_err *err);
/* n dispatches in one submission, dispatch i with push constants pcs[i] (the kernel's pc_bytes
 * each) and groups[i] workgroups (x), a barrier after each (the last one's to the host); waits. */
geist_status gt_vk_kernel_run(gt_vk_kernel *k, int n, const void *const *pcs,
                              const uint32_t *groups, gt_err *err);
void gt_vk_kernel_free(gt_vk_kernel *k);

#ifdef GEIST_VK_CLOCK
/* ---- the in-kernel clock build (vk_clock.c, shaders/clock.glsl; scons gpu_clock=1) ---- */
#include <stdio.h>
typedef struct gt_vk_clock {
    VkBuffer dev, host; /* dev: bound at 13 in every set (word 0 the blocks taken); host: its copy */
    VkDeviceMemory dmem, hmem;
    uint32_t *map; /* host's */
    uint32_t words;
    /* per mark id: records, and sums of its time since the workgroup's start (cycles, device
     * clock ticks) and since the workgroup's previous mark (cycles); decode passes counted,
     * other passes skipped, workgroups past the buffer not marked, marks past a block's 15 */
    uint64_t passes, skipped, dropped, lost, n[512], cyc[512], ticks[512], step[512];
} gt_vk_clock;
geist_status gt_vk_clock_init(gt_vk_ctx *c, gt_vk_clock *k, gt_err *err); /* no-op once made */
void gt_vk_clock_begin(gt_vk_ctx *c, const gt_vk_clock *k, VkCommandBuffer cb); /* a pass's start */
void gt_vk_clock_end(gt_vk_ctx *c, const gt_vk_clock *k, VkCommandBuffer cb);   /* and its end */
void gt_vk_clock_collect(gt_vk_clock *k, bool decode); /* after a pass's fence; decode: a row a
                                                        * session (the others are not counted) */
void gt_vk_clock_report(const gt_vk_clock *k, FILE *out);
void gt_vk_clock_free(gt_vk_ctx *c, gt_vk_clock *k);
#endif

/* ---- the forward pass (vk_forward.c) ---- */
/* At model init, while the span is readable: decides whether the device runs this model (else
 * vm->refuse says why) and uploads the norm vectors. Fails only on device errors. */
geist_status gt_vk_fwd_init(gt_vk_model *vm, gt_err *err);
void gt_vk_fwd_free(gt_vk_model *vm);
geist_status gt_vk_kv_alloc(gt_vk_model *vm, const gt_dev_kv_desc *d, gt_dev_kv **out, gt_err *err);
void gt_vk_kv_free(gt_dev_kv *kv);
geist_status gt_vk_kv_io(gt_dev_kv *kv, int32_t layer, int32_t row0, int32_t n, void *k, void *v,
                         bool write, gt_err *err);
uint64_t gt_vk_kv_bytes(const gt_dev_kv *kv);
/* the session's logits in host memory the device writes (gt_device_ops.kv_logits), or NULL */
float *gt_vk_kv_logits(gt_dev_kv *kv);
/* One step, in passes of up to GT_VK_PASS_ROWS rows (vk_forward.c's pass_take). */
#define GT_VK_PASS_ROWS 512
/* The shared memory a workgroup of geist's kernels takes at most (the attention's builds: its
 * scores, K/V tiles, query heads; tests/core/test_vk_kernels.py reads every built kernel's): a
 * device offering less is not used. Vulkan's minimum is 16 KiB; GPUs offer 32 KiB (phones) to
 * 48 KiB and more. */
#define GT_VK_SHARED_NEED 32768u
geist_status gt_vk_forward(gt_vk_model *vm, const gt_dev_row *rows, int32_t n, gt_err *err);
/* The forward pass's counters since the model's load (zeros before the first session). */
void gt_vk_stats(gt_vk_model *vm, gt_dev_stats *out);

#endif
