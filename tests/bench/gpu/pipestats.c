/* What the driver made of a compute shader (session 31): the statistics of each executable
 * of a pipeline (VK_KHR_pipeline_executable_properties; NVIDIA's include the registers a lane
 * holds, which bound how many workgroups a compute unit keeps resident), for a SPIR-V file and
 * its specialization constants as geist's vk_forward.c gives them.
 *
 *   cc -O2 -o pipestats tests/bench/gpu/pipestats.c -ldl       (Vulkan headers needed here)
 *   pipestats SHADER.spv [ID=VALUE ...]     VALUE an integer, or a float with a leading f
 *                                           (1=f1e-6); each constant 4 bytes
 *
 * The pipeline layout is geist's: 16 storage buffers (vk_forward.c binds 14) and 128 bytes of
 * push constants. Prints "name: value" lines; exits non-zero where the device or the driver
 * lacks the extension, or the pipeline cannot be made. A measuring tool for the GPU kit, not
 * part of the library. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

#define N_BIND 16
#define MAX_SPEC 32

static PFN_vkGetInstanceProcAddr gipa;

static int fail(const char *what, VkResult r) {
    fprintf(stderr, "pipestats: %s (%d)\n", what, (int)r);
    return 1;
}

static void *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = len > 0 ? malloc((size_t)len) : NULL;
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *n = buf ? (size_t)len : 0;
    return buf;
}

/* n structures of `size` bytes from p, zeroed, each with sType t (Vulkan's first field) */
static void stype_all(void *p, size_t size, uint32_t n, VkStructureType t) {
    memset(p, 0, size * n);
    for (uint32_t i = 0; i < n; i++) memcpy((char *)p + size * i, &t, sizeof t);
}

static void print_stat(const VkPipelineExecutableStatisticKHR *s) {
    printf("  %s: ", s->name);
    switch (s->format) {
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
        printf("%s", s->value.b32 ? "true" : "false");
        break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
        printf("%lld", (long long)s->value.i64);
        break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
        printf("%llu", (unsigned long long)s->value.u64);
        break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR:
        printf("%g", s->value.f64);
        break;
    default:
        printf("?");
        break;
    }
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: pipestats SHADER.spv [ID=VALUE ...]\n");
        return 2;
    }
    uint32_t ids[MAX_SPEC], vals[MAX_SPEC], n_spec = 0;
    for (int i = 2; i < argc && n_spec < MAX_SPEC; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq) return fprintf(stderr, "pipestats: %s is not ID=VALUE\n", argv[i]), 2;
        ids[n_spec] = (uint32_t)strtoul(argv[i], NULL, 10);
        if (eq[1] == 'f') {
            const float f = strtof(eq + 2, NULL);
            memcpy(&vals[n_spec], &f, 4);
        } else {
            vals[n_spec] = (uint32_t)strtoul(eq + 1, NULL, 0);
        }
        n_spec++;
    }
    void *lib = dlopen("libvulkan.so.1", RTLD_NOW);
    if (!lib) return fprintf(stderr, "pipestats: no libvulkan.so.1\n"), 1;
    gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
#define GI(inst, name) PFN_##name name = (PFN_##name)gipa(inst, #name)
    GI(NULL, vkCreateInstance);
    const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                   .apiVersion = VK_API_VERSION_1_2};
    const VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                      .pApplicationInfo = &app};
    VkInstance inst;
    VkResult r = vkCreateInstance(&ici, NULL, &inst);
    if (r) return fail("vkCreateInstance", r);
    GI(inst, vkEnumeratePhysicalDevices);
    GI(inst, vkGetPhysicalDeviceProperties);
    GI(inst, vkGetPhysicalDeviceQueueFamilyProperties);
    GI(inst, vkCreateDevice);
    GI(inst, vkGetDeviceProcAddr);
    VkPhysicalDevice phys[8];
    uint32_t n_phys = 8;
    r = vkEnumeratePhysicalDevices(inst, &n_phys, phys);
    if (r < 0 || n_phys == 0) return fail("no physical device", r);
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(phys[0], &props);
    printf("device: %s\n", props.deviceName);
    VkQueueFamilyProperties qf[16];
    uint32_t n_qf = 16, fam = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys[0], &n_qf, qf);
    while (fam < n_qf && !(qf[fam].queueFlags & VK_QUEUE_COMPUTE_BIT)) fam++;
    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                         .queueFamilyIndex = fam, .queueCount = 1,
                                         .pQueuePriorities = &prio};
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pef = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
        .pipelineExecutableInfo = VK_TRUE};
    const char *ext[] = {VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME};
    const VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &pef,
                                    .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci,
                                    .enabledExtensionCount = 1, .ppEnabledExtensionNames = ext};
    VkDevice dev;
    r = vkCreateDevice(phys[0], &dci, NULL, &dev);
    if (r) return fail("vkCreateDevice with VK_KHR_pipeline_executable_properties", r);
    size_t code_n;
    uint32_t *code = read_file(argv[1], &code_n);
    if (!code || code_n % 4) return fprintf(stderr, "pipestats: cannot read %s\n", argv[1]), 2;
#define GD(name) PFN_##name name = (PFN_##name)vkGetDeviceProcAddr(dev, #name)
    GD(vkCreateShaderModule);
    GD(vkCreateDescriptorSetLayout);
    GD(vkCreatePipelineLayout);
    GD(vkCreateComputePipelines);
    GD(vkGetPipelineExecutablePropertiesKHR);
    GD(vkGetPipelineExecutableStatisticsKHR);
    const VkShaderModuleCreateInfo smi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                          .codeSize = code_n, .pCode = code};
    VkShaderModule sm;
    r = vkCreateShaderModule(dev, &smi, NULL, &sm);
    free(code);
    if (r) return fail("vkCreateShaderModule", r);
    VkDescriptorSetLayoutBinding b[N_BIND];
    for (uint32_t i = 0; i < N_BIND; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    const VkDescriptorSetLayoutCreateInfo dli = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = N_BIND,
        .pBindings = b};
    VkDescriptorSetLayout dsl;
    r = vkCreateDescriptorSetLayout(dev, &dli, NULL, &dsl);
    if (r) return fail("vkCreateDescriptorSetLayout", r);
    const VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = 128};
    const VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                            .setLayoutCount = 1, .pSetLayouts = &dsl,
                                            .pushConstantRangeCount = 1,
                                            .pPushConstantRanges = &pcr};
    VkPipelineLayout pl;
    r = vkCreatePipelineLayout(dev, &pli, NULL, &pl);
    if (r) return fail("vkCreatePipelineLayout", r);
    VkSpecializationMapEntry sme[MAX_SPEC];
    for (uint32_t i = 0; i < n_spec; i++)
        sme[i] = (VkSpecializationMapEntry){ids[i], 4 * i, 4};
    const VkSpecializationInfo spec = {n_spec, sme, 4 * n_spec, vals};
    const VkComputePipelineCreateInfo cpi = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = sm, .pName = "main",
                  .pSpecializationInfo = &spec},
        .layout = pl};
    VkPipeline pipe;
    r = vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cpi, NULL, &pipe);
    if (r) return fail("vkCreateComputePipelines", r);
    const VkPipelineInfoKHR pinfo = {.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR,
                                     .pipeline = pipe};
    VkPipelineExecutablePropertiesKHR ep[8];
    uint32_t n_ep = 8;
    stype_all(ep, sizeof ep[0], n_ep, VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR);
    r = vkGetPipelineExecutablePropertiesKHR(dev, &pinfo, &n_ep, ep);
    if (r < 0) return fail("vkGetPipelineExecutablePropertiesKHR", r);
    for (uint32_t e = 0; e < n_ep; e++) {
        printf("executable %u: %s (subgroup %u)\n", e, ep[e].name, ep[e].subgroupSize);
        const VkPipelineExecutableInfoKHR xi = {
            .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, .pipeline = pipe,
            .executableIndex = e};
        VkPipelineExecutableStatisticKHR st[32];
        uint32_t n_st = 32;
        stype_all(st, sizeof st[0], n_st, VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR);
        r = vkGetPipelineExecutableStatisticsKHR(dev, &xi, &n_st, st);
        if (r < 0) return fail("vkGetPipelineExecutableStatisticsKHR", r);
        for (uint32_t i = 0; i < n_st; i++) print_stat(&st[i]);
    }
    return 0; /* (the process's end frees the rest) */
}
