/* The engine's Vulkan device: instance, device choice, a compute queue, the features the shaders
 * use, and host-pointer import where the device offers it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vk.h"

#define MAX_DEVICES 16

static int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
    }
}

static void list_devices(const gt_vk_cand *c, int32_t n, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    for (int32_t i = 0; i < n && len < cap; i++) {
        int w = snprintf(out + len, cap - len, "%s%d: %s%s", i ? ", " : "", (int)i, c[i].name,
                         c[i].usable ? "" : " (unusable: no Vulkan 1.2 compute with 32 KiB of "
                                            "shared memory)");
        if (w < 0) break;
        len += (size_t)w;
    }
    if (n == 0) snprintf(out, cap, "none");
}

int32_t gt_vk_choose(const gt_vk_cand *c, int32_t n, const char *want, gt_err *err) {
    char names[512];
    list_devices(c, n, names, sizeof names);
    if (n <= 0) {
        gt_fail(err, GEIST_ERR_UNSUPPORTED,
                "vulkan: the Vulkan loader found no device (no driver installed?)");
        return -1;
    }
    if (want == NULL || want[0] == '\0' || strcmp(want, "auto") == 0) {
        int32_t best = -1;
        for (int32_t i = 0; i < n; i++) {
            if (!c[i].usable) continue;
            if (best < 0 || type_rank(c[i].type) < type_rank(c[best].type)) best = i;
        }
        if (best < 0)
            gt_fail(err, GEIST_ERR_UNSUPPORTED, "vulkan: no usable device (devices: %s)", names);
        return best;
    }
    bool digits = true;
    for (const char *p = want; *p; p++) digits = digits && *p >= '0' && *p <= '9';
    int32_t pick = -1;
    if (digits && strlen(want) < 6) {
        pick = (int32_t)atoi(want);
        if (pick >= n) {
            gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                    "vulkan: no device with index %s (devices: %s)", want, names);
            return -1;
        }
    } else {
        for (int32_t i = 0; i < n && pick < 0; i++)
            if (strstr(c[i].name, want)) pick = i;
        if (pick < 0) {
            gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                    "vulkan: no device name contains '%.64s' (devices: %s)", want, names);
            return -1;
        }
    }
    if (!c[pick].usable) {
        gt_fail(err, GEIST_ERR_UNSUPPORTED, "vulkan: device %d (%s) is not usable: it lacks "
                "Vulkan 1.2, a compute queue or 32 KiB of shared memory a workgroup", (int)pick,
                c[pick].name);
        return -1;
    }
    return pick;
}

int32_t gt_vk_memory_type(const gt_vk_ctx *c, uint32_t types, VkMemoryPropertyFlags want) {
    for (uint32_t i = 0; i < c->mem.memoryTypeCount; i++)
        if ((types & (1u << i)) && (c->mem.memoryTypes[i].propertyFlags & want) == want)
            return (int32_t)i;
    return -1;
}

static bool has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(e[i].extensionName, name) == 0) return true;
    return false;
}

static int32_t compute_family(const gt_vk_fns *f, VkPhysicalDevice p) {
    VkQueueFamilyProperties q[16];
    uint32_t nq = 16;
    f->GetPhysicalDeviceQueueFamilyProperties(p, &nq, q);
    for (uint32_t i = 0; i < nq; i++) /* a compute family, preferring one without graphics */
        if ((q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
            return (int32_t)i;
    for (uint32_t i = 0; i < nq; i++)
        if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return (int32_t)i;
    return -1;
}

static uint64_t device_local_bytes(const VkPhysicalDeviceMemoryProperties *m) {
    uint64_t b = 0;
    for (uint32_t h = 0; h < m->memoryHeapCount; h++)
        if (m->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) b += m->memoryHeaps[h].size;
    return b;
}

/* NVIDIA's driver (580, H200) loads and unloads only ~30 times in one process: the Vulkan loader
 * unloads the drivers with the last instance, and a plain loop of instance create/destroy then
 * finds no driver at its 31st vkCreateInstance (VK_ERROR_INCOMPATIBLE_DRIVER), with or without
 * the loader library kept open; with one instance kept alive, 60 iterations passed (2026-12-01).
 * So the first engine that gets a device makes one bare instance that lives as long as the
 * process, keeping the loader and its drivers loaded. This is the backend's only global state:
 * written once, under its mutex, and never freed (the memory stays reachable). */
static pthread_mutex_t g_anchor_lock = PTHREAD_MUTEX_INITIALIZER;
static VkInstance g_anchor = VK_NULL_HANDLE;

static void keep_drivers_loaded(const char *loader) {
    pthread_mutex_lock(&g_anchor_lock);
    if (g_anchor == VK_NULL_HANDLE) {
        gt_vk_fns f;
        gt_err e;
        memset(&e, 0, sizeof e);
        if (gt_vk_load(&f, loader, &e) == GEIST_OK) {
            const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                           .pApplicationName = "geist (driver anchor)",
                                           .apiVersion = VK_API_VERSION_1_2};
            const VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                              .pApplicationInfo = &app};
            if (f.CreateInstance(&ici, NULL, &g_anchor) != VK_SUCCESS) {
                g_anchor = VK_NULL_HANDLE;
                gt_vk_unload(&f); /* no anchor: engines still work, as before */
            } /* else the loader stays open with it */
        }
    }
    pthread_mutex_unlock(&g_anchor_lock);
}

void gt_vk_ctx_free(gt_vk_ctx *c) {
    if (!c) return;
    if (c->pool) c->f.DestroyCommandPool(c->dev, c->pool, NULL);
    pthread_mutex_destroy(&c->queue_lock);
    if (c->dev) c->f.DestroyDevice(c->dev, NULL);
    if (c->inst) c->f.DestroyInstance(c->inst, NULL);
    gt_vk_unload(&c->f);
    free(c);
}

/* the features of an extension's struct `feat` (its sType set), as the device reports them */
static void ext_features(const gt_vk_ctx *c, void *feat) {
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = feat};
    c->f.GetPhysicalDeviceFeatures2(c->phys, &f2);
}

geist_status gt_vk_ctx_create(const gt_dev_options *o, gt_vk_ctx **out, gt_err *err) {
    gt_vk_ctx *c = calloc(1, sizeof *c);
    if (!c) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (vulkan context)");
    pthread_mutex_init(&c->queue_lock, NULL);
    geist_status st = gt_vk_load(&c->f, o->loader, err);
    if (st) {
        free(c);
        return st;
    }
    uint32_t api = VK_API_VERSION_1_0;
    if (c->f.EnumerateInstanceVersion) c->f.EnumerateInstanceVersion(&api);
    if (api < VK_API_VERSION_1_2) {
        gt_vk_ctx_free(c);
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "vulkan: the loader offers Vulkan %u.%u; geist needs 1.2",
                       VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api));
    }
    const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                   .pApplicationName = "geist", .pEngineName = "geist",
                                   .apiVersion = VK_API_VERSION_1_2};
    const VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                      .pApplicationInfo = &app};
    VkResult r = c->f.CreateInstance(&ici, NULL, &c->inst);
    if (r != VK_SUCCESS) {
        c->inst = VK_NULL_HANDLE;
        gt_vk_ctx_free(c);
        if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
            return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                           "vulkan: the loader found no Vulkan 1.2 driver on this machine (no "
                           "device; install one such as mesa-vulkan-drivers, or use a CPU backend)");
        return gt_fail(err, GEIST_ERR_UNSUPPORTED, "vulkan: vkCreateInstance failed (%d)", (int)r);
    }
    if ((st = gt_vk_load_instance(&c->f, c->inst, err))) {
        gt_vk_ctx_free(c);
        return st;
    }
    keep_drivers_loaded(o->loader);
    VkPhysicalDevice phys[MAX_DEVICES];
    uint32_t n = MAX_DEVICES;
    r = c->f.EnumeratePhysicalDevices(c->inst, &n, phys);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) n = 0;
    gt_vk_cand cand[MAX_DEVICES];
    for (uint32_t i = 0; i < n; i++) {
        VkPhysicalDeviceProperties p;
        VkPhysicalDeviceMemoryProperties m;
        c->f.GetPhysicalDeviceProperties(phys[i], &p);
        c->f.GetPhysicalDeviceMemoryProperties(phys[i], &m);
        snprintf(cand[i].name, sizeof cand[i].name, "%s", p.deviceName);
        cand[i].type = p.deviceType;
        cand[i].device_local = device_local_bytes(&m);
        cand[i].usable = p.apiVersion >= VK_API_VERSION_1_2 && compute_family(&c->f, phys[i]) >= 0 &&
                         p.limits.maxComputeSharedMemorySize >= GT_VK_SHARED_NEED;
    }
    const int32_t pick = gt_vk_choose(cand, (int32_t)n, o->device, err);
    if (pick < 0) {
        gt_vk_ctx_free(c);
        return err->status;
    }
    c->phys = phys[pick];
    c->f.GetPhysicalDeviceProperties(c->phys, &c->props);
    c->f.GetPhysicalDeviceMemoryProperties(c->phys, &c->mem);
    c->queue_family = (uint32_t)compute_family(&c->f, c->phys);

    VkExtensionProperties ext[256];
    uint32_t n_ext = 256;
    r = c->f.EnumerateDeviceExtensionProperties(c->phys, NULL, &n_ext, ext);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) n_ext = 0;
    const bool import = !o->no_import && has_ext(ext, n_ext, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    /* integer dot products (the *_idot kernels, idot.glsl): by default where the device says
     * they are accelerated for packed signed and mixed-signedness bytes; GEIST_DEVICE_INT_DOT
     * wherever it has them at all (the same bits either way), GEIST_DEVICE_NO_INT_DOT never */
    const bool idot_ext = has_ext(ext, n_ext, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR idot_feat = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
    if (idot_ext) ext_features(c, &idot_feat);
    const bool idot_have = idot_ext && idot_feat.shaderIntegerDotProduct;
    VkPhysicalDeviceShaderIntegerDotProductPropertiesKHR idot_props = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES_KHR};
    VkPhysicalDeviceExternalMemoryHostPropertiesEXT hostp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT,
        .pNext = idot_have ? &idot_props : NULL};
    /* subgroups (GEIST_DEVICE_FAST's attnfast.comp and normfast.comp: sums across a subgroup):
     * gl_SubgroupSize is subgroupSize in these SPIR-V 1.5 kernels, but a subgroup may run fewer
     * lanes (Intel's drivers report 32 and may run 8 or 16): the size control's range, where
     * the device has it (Vulkan 1.3 or VK_EXT_subgroup_size_control), says how few */
    VkPhysicalDeviceSubgroupSizeControlProperties sgc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES,
        .pNext = import ? (void *)&hostp : idot_have ? (void *)&idot_props : NULL};
    const bool sgc_have = c->props.apiVersion >= VK_API_VERSION_1_3 ||
                          has_ext(ext, n_ext, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    VkPhysicalDeviceSubgroupProperties sgp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
        .pNext = sgc_have ? (void *)&sgc : sgc.pNext};
    /* the device's compute units where its driver says (NVIDIA's SMs, AMD's CUs): how many
     * workgroups fill it (vk_forward.c's spread products); else 0, unknown */
    const bool nv_sm = has_ext(ext, n_ext, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME);
    const bool amd_core = has_ext(ext, n_ext, VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME);
    VkPhysicalDeviceShaderCorePropertiesAMD amdp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD, .pNext = &sgp};
    VkPhysicalDeviceShaderSMBuiltinsPropertiesNV nvp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV,
        .pNext = amd_core ? (void *)&amdp : (void *)&sgp};
    VkPhysicalDeviceProperties2 p2 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
        .pNext = nv_sm ? (void *)&nvp : amd_core ? (void *)&amdp : (void *)&sgp};
    c->f.GetPhysicalDeviceProperties2(c->phys, &p2);
    c->compute_units = nv_sm ? nvp.shaderSMCount
                       : amd_core ? amdp.shaderEngineCount * amdp.shaderArraysPerEngineCount *
                                        amdp.computeUnitsPerShaderArray
                                  : 0;
    const VkSubgroupFeatureFlags sg_ops = VK_SUBGROUP_FEATURE_BASIC_BIT |
                                          VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    const bool sg_sums = (sgp.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                         (sgp.supportedOperations & sg_ops) == sg_ops;
    c->subgroup_min = !sg_sums ? 0
                      : sgc_have && sgc.minSubgroupSize > 0 && sgc.minSubgroupSize < sgp.subgroupSize
                          ? sgc.minSubgroupSize
                          : sgp.subgroupSize;
    /* attnfast.comp's lanes (a lane's value pairs follow the subgroup size, so every subgroup
     * must run all its lanes): where the device lets a pipeline require a size in full
     * subgroups (VK_EXT_subgroup_size_control's features, for compute), 32 lanes inside its
     * range (AMD's 32-64 and Intel's 8-32 included); else the one size of a device whose range
     * is one size; 8 lanes at least, 128 at most (the kernel's workgroup), else none. The
     * extension is switched on only for the fast mode: other engines' devices stay as before */
    const bool sgc_ext = has_ext(ext, n_ext, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    VkPhysicalDeviceSubgroupSizeControlFeatures sgc_feat = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    if (sgc_ext) ext_features(c, &sgc_feat);
    uint32_t want = sgc.minSubgroupSize > 32 ? sgc.minSubgroupSize : 32;
    if (want > sgc.maxSubgroupSize) want = sgc.maxSubgroupSize;
    const bool sg_require = o->fast && sg_sums && sgc_ext && sgc_feat.subgroupSizeControl &&
                            sgc_feat.computeFullSubgroups &&
                            (sgc.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                            want >= 8 && want <= 128 &&
                            (uint64_t)sgc.maxComputeWorkgroupSubgroups * want >= 128;
    const bool sg_fixed = sg_sums && sgc_have && sgc.minSubgroupSize == sgc.maxSubgroupSize &&
                          sgc.minSubgroupSize == sgp.subgroupSize && sgp.subgroupSize >= 8 &&
                          sgp.subgroupSize <= 128;
    c->attn_lanes = sg_require ? want : sg_fixed ? sgp.subgroupSize : 0;
    c->attn_lanes_required = sg_require;
    c->sg_shuffle = sg_sums && (sgp.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    if (o->int_dot > 0 && !idot_have) {
        gt_fail(err, GEIST_ERR_UNSUPPORTED, "vulkan: GEIST_DEVICE_INT_DOT asked for integer dot "
                "products, which %s does not offer (VK_KHR_shader_integer_dot_product)",
                c->props.deviceName);
        gt_vk_ctx_free(c);
        return GEIST_ERR_UNSUPPORTED;
    }
    const bool idot_fast = idot_props.integerDotProduct4x8BitPackedSignedAccelerated &&
                           idot_props.integerDotProduct4x8BitPackedMixedSignednessAccelerated;
    c->int_dot = idot_have && (o->int_dot > 0 || (o->int_dot == 0 && idot_fast));

    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                         .queueFamilyIndex = c->queue_family, .queueCount = 1,
                                         .pQueuePriorities = &prio};
    const char *exts[4];
    uint32_t n_on = 0;
    if (import) exts[n_on++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
    if (c->int_dot) exts[n_on++] = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
    VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR idot_on = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR,
        .shaderIntegerDotProduct = VK_TRUE};
    void *chain = c->int_dot ? &idot_on : NULL;
    /* the extension (not Vulkan 1.3's core: the instance asks for 1.2) for attn_lanes */
    VkPhysicalDeviceSubgroupSizeControlFeatures sgc_on = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES, .pNext = chain,
        .subgroupSizeControl = VK_TRUE, .computeFullSubgroups = VK_TRUE};
    if (c->attn_lanes_required) {
        exts[n_on++] = VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME;
        chain = &sgc_on;
    }
#ifdef GEIST_VK_CLOCK
    /* the in-kernel clock build (scons gpu_clock=1, vk_clock.c): every marked kernel reads the
     * SM's and the device's clocks */
    VkPhysicalDeviceShaderClockFeaturesKHR clock_have = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR};
    if (has_ext(ext, n_ext, VK_KHR_SHADER_CLOCK_EXTENSION_NAME)) ext_features(c, &clock_have);
    if (!clock_have.shaderSubgroupClock || !clock_have.shaderDeviceClock) {
        gt_fail(err, GEIST_ERR_UNSUPPORTED, "vulkan: this is the in-kernel clock build, and %s "
                "has no VK_KHR_shader_clock with subgroup and device clocks", c->props.deviceName);
        gt_vk_ctx_free(c);
        return GEIST_ERR_UNSUPPORTED;
    }
    exts[n_on++] = VK_KHR_SHADER_CLOCK_EXTENSION_NAME;
    VkPhysicalDeviceShaderClockFeaturesKHR clock_on = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR, .pNext = chain,
        .shaderSubgroupClock = VK_TRUE, .shaderDeviceClock = VK_TRUE};
    chain = &clock_on;
#endif
    const VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                                    .pNext = chain,
                                    .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci,
                                    .enabledExtensionCount = n_on, .ppEnabledExtensionNames = exts};
    r = c->f.CreateDevice(c->phys, &dci, NULL, &c->dev);
    if (r != VK_SUCCESS) {
        c->dev = VK_NULL_HANDLE;
        gt_fail(err, GEIST_ERR_UNSUPPORTED, "vulkan: vkCreateDevice failed on %s (%d)",
                c->props.deviceName, (int)r);
        gt_vk_ctx_free(c);
        return GEIST_ERR_UNSUPPORTED;
    }
    if ((st = gt_vk_load_device(&c->f, c->dev, import, err))) {
        gt_vk_ctx_free(c);
        return st;
    }
    c->f.GetDeviceQueue(c->dev, c->queue_family, 0, &c->queue);
    const VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                         .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                         .queueFamilyIndex = c->queue_family};
    if (c->f.CreateCommandPool(c->dev, &pci, NULL, &c->pool) != VK_SUCCESS) {
        c->pool = VK_NULL_HANDLE;
        gt_vk_ctx_free(c);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: cannot create a command pool");
    }
    gt_dev_probe *pr = &c->probe;
    snprintf(pr->name, sizeof pr->name, "%.127s", c->props.deviceName);
    pr->index = pick;
    pr->host_import = import;
    pr->import_align = import ? hostp.minImportedHostPointerAlignment : 0;
    pr->max_buffer = c->props.limits.maxStorageBufferRange;
    pr->max_alloc = 1u << 30; /* Vulkan 1.1 maxMemoryAllocationSize is at least 1 GiB */
    pr->device_local = device_local_bytes(&c->mem);
    pr->unified_memory = c->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ||
                         c->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    c->memory_limit = o->memory_limit;
    c->allow_import = import;
    /* device_attn_chunk 0: split on GPUs (the exact order keeps one workgroup per head busy
     * along the whole context), cpu_scalar's order on a CPU device, where it costs nothing */
    c->attn_chunk = o->attn_chunk > 0 ? o->attn_chunk
                    : o->attn_chunk == 0 && c->props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU
                        ? GEIST_DEVICE_ATTN_CHUNK_GPU
                        : 0;
    c->profile = o->profile;
    c->attn_per_head = o->attn_per_head;
    c->fast = o->fast;
    *out = c;
    return GEIST_OK;
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The host's part of a wait for a known command buffer: it sleeps in the driver's wait until
 * WAKE_EARLY_NS before the expected end (a sleeping thread wakes tens of microseconds late:
 * timer slack, the scheduler), then polls the fence at most POLL_MAX_NS (past that, something
 * else holds the GPU: the driver's wait again). A step of unknown length only sleeps. */
#define WAKE_EARLY_NS 150000u
#define POLL_MAX_NS 500000u

VkResult gt_vk_submit(gt_vk_ctx *c, VkCommandBuffer cb, VkFence fence) {
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                             .pCommandBuffers = &cb};
    VkResult r = c->f.ResetFences(c->dev, 1, &fence);
    if (r != VK_SUCCESS) return r;
    pthread_mutex_lock(&c->queue_lock);
    r = c->f.QueueSubmit(c->queue, 1, &si, fence);
    pthread_mutex_unlock(&c->queue_lock);
    return r;
}

VkResult gt_vk_wait_until(gt_vk_ctx *c, VkFence fence, uint64_t end_ns) {
    VkResult r;
    /* on a CPU device (lavapipe) the step runs on the host's cores: polling would take one */
    if (end_ns > 0 && c->props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU) {
        const uint64_t now = mono_ns();
        if (end_ns > now + 2 * WAKE_EARLY_NS) {
            r = c->f.WaitForFences(c->dev, 1, &fence, VK_TRUE, end_ns - now - WAKE_EARLY_NS);
            if (r != VK_TIMEOUT) return r;
        }
        const uint64_t until = mono_ns() + POLL_MAX_NS;
        do {
            r = c->f.GetFenceStatus(c->dev, fence);
            if (r != VK_NOT_READY) return r;
        } while (mono_ns() < until);
    }
    return c->f.WaitForFences(c->dev, 1, &fence, VK_TRUE, UINT64_MAX);
}

VkResult gt_vk_submit_wait(gt_vk_ctx *c, VkCommandBuffer cb, VkFence fence) {
    const VkResult r = gt_vk_submit(c, cb, fence);
    return r != VK_SUCCESS ? r : gt_vk_wait_until(c, fence, 0);
}
