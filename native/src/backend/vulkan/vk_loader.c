/* The Vulkan loader, opened at run time: the library (and the Godot addon) loads and runs on the
 * CPU where no Vulkan is installed; asking for the vulkan backend there is a clear error. */
#include <dlfcn.h>
#include <string.h>

#include "vk.h"

static const char *const k_names[] = {
#if defined(_WIN32)
    "vulkan-1.dll",
#elif defined(__APPLE__)
    "libvulkan.1.dylib", "libvulkan.dylib", "libMoltenVK.dylib",
#else
    "libvulkan.so.1", "libvulkan.so",
#endif
};

geist_status gt_vk_load(gt_vk_fns *f, const char *path, gt_err *err) {
    memset(f, 0, sizeof *f);
    const char *tried = path;
    if (path) {
        f->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    } else {
        for (size_t i = 0; i < sizeof k_names / sizeof k_names[0] && !f->lib; i++) {
            tried = k_names[i];
            f->lib = dlopen(k_names[i], RTLD_NOW | RTLD_LOCAL);
        }
    }
    if (!f->lib)
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "vulkan: no Vulkan loader on this machine (cannot open %s); install one "
                       "(Debian: libvulkan1 and a driver such as mesa-vulkan-drivers) or use a "
                       "CPU backend", tried);
    f->GetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)dlsym(f->lib, "vkGetInstanceProcAddr");
    if (!f->GetInstanceProcAddr) {
        gt_vk_unload(f);
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "vulkan: %s has no vkGetInstanceProcAddr (not a Vulkan loader)", tried);
    }
#define G(n) f->n = (PFN_vk##n)f->GetInstanceProcAddr(NULL, "vk" #n)
    G(CreateInstance);
    G(EnumerateInstanceVersion);
#undef G
    if (!f->CreateInstance) {
        gt_vk_unload(f);
        return gt_fail(err, GEIST_ERR_UNSUPPORTED, "vulkan: the loader has no vkCreateInstance");
    }
    return GEIST_OK;
}

geist_status gt_vk_load_instance(gt_vk_fns *f, VkInstance inst, gt_err *err) {
#define I(n)                                                                                      \
    if (!(f->n = (PFN_vk##n)f->GetInstanceProcAddr(inst, "vk" #n)))                                \
        return gt_fail(err, GEIST_ERR_UNSUPPORTED, "vulkan: the loader lacks vk" #n);
    I(DestroyInstance) I(EnumeratePhysicalDevices) I(GetPhysicalDeviceProperties)
    I(GetPhysicalDeviceProperties2) I(GetPhysicalDeviceFeatures2) I(GetPhysicalDeviceMemoryProperties)
    I(GetPhysicalDeviceQueueFamilyProperties) I(EnumerateDeviceExtensionProperties)
    I(GetDeviceProcAddr) I(CreateDevice)
#undef I
    return GEIST_OK;
}

geist_status gt_vk_load_device(gt_vk_fns *f, VkDevice dev, bool host_import, gt_err *err) {
#define D(n)                                                                                      \
    if (!(f->n = (PFN_vk##n)f->GetDeviceProcAddr(dev, "vk" #n)))                                   \
        return gt_fail(err, GEIST_ERR_UNSUPPORTED, "vulkan: the device lacks vk" #n);
    D(DestroyDevice) D(GetDeviceQueue) D(CreateBuffer) D(DestroyBuffer)
    D(GetBufferMemoryRequirements) D(AllocateMemory) D(FreeMemory) D(BindBufferMemory)
    D(MapMemory) D(UnmapMemory) D(CreateCommandPool) D(DestroyCommandPool)
    D(AllocateCommandBuffers) D(BeginCommandBuffer) D(EndCommandBuffer) D(ResetCommandBuffer)
    D(CmdCopyBuffer) D(QueueSubmit) D(CreateFence) D(DestroyFence) D(WaitForFences)
    D(GetFenceStatus)
    D(ResetFences)
    D(CreateShaderModule) D(DestroyShaderModule) D(CreateDescriptorSetLayout)
    D(DestroyDescriptorSetLayout) D(CreatePipelineLayout) D(DestroyPipelineLayout)
    D(CreateComputePipelines) D(DestroyPipeline) D(CreateDescriptorPool) D(DestroyDescriptorPool)
    D(ResetDescriptorPool) D(AllocateDescriptorSets) D(UpdateDescriptorSets) D(CmdBindPipeline)
    D(CmdBindDescriptorSets) D(CmdPushConstants) D(CmdDispatch) D(CmdPipelineBarrier)
    D(CmdFillBuffer)
    D(FreeCommandBuffers) D(CreateQueryPool) D(DestroyQueryPool) D(CmdResetQueryPool)
    D(CmdWriteTimestamp) D(GetQueryPoolResults)
    if (host_import) D(GetMemoryHostPointerPropertiesEXT)
#undef D
    return GEIST_OK;
}

void gt_vk_unload(gt_vk_fns *f) {
    if (f->lib) dlclose(f->lib);
    memset(f, 0, sizeof *f);
}
