/* The vulkan backend's device choice (gt_vk_choose), a pure function of what the devices report:
 * "auto" takes the first discrete GPU, else the first integrated one, else a virtual one, else a
 * CPU implementation (lavapipe), skipping unusable devices; an index or a name substring picks
 * that device; a bad index or name fails naming the devices. Builds without Vulkan: skipped. */
#include <stdio.h>
#include <string.h>

#ifdef GEIST_HAVE_VULKAN
#include "backend/vulkan/vk.h"

#include "check.h"

static gt_vk_cand cand(const char *name, VkPhysicalDeviceType t, bool usable) {
    gt_vk_cand c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", name);
    c.type = t;
    c.usable = usable;
    return c;
}

int main(void) {
    gt_err err = {0};
    const gt_vk_cand four[] = {
        cand("llvmpipe (LLVM 15)", VK_PHYSICAL_DEVICE_TYPE_CPU, true),
        cand("AMD Radeon (RADV VANGOGH)", VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, true),
        cand("Old GPU", VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, false),
        cand("NVIDIA H200", VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, true),
    };
    CHECK(gt_vk_choose(four, 4, NULL, &err) == 3);
    CHECK(gt_vk_choose(four, 4, "auto", &err) == 3);
    CHECK(gt_vk_choose(four, 3, "auto", &err) == 1); /* the unusable discrete one is skipped */
    CHECK(gt_vk_choose(four, 1, "", &err) == 0);     /* lavapipe alone */
    CHECK(gt_vk_choose(four, 4, "0", &err) == 0);
    CHECK(gt_vk_choose(four, 4, "RADV", &err) == 1);
    CHECK(gt_vk_choose(four, 4, "9", &err) == -1 && err.status == GEIST_ERR_INVALID_ARGUMENT &&
          strstr(err.msg, "no device with index 9") && strstr(err.msg, "3: NVIDIA H200"));
    CHECK(gt_vk_choose(four, 4, "Intel", &err) == -1 && strstr(err.msg, "'Intel'"));
    CHECK(gt_vk_choose(four, 4, "2", &err) == -1 && err.status == GEIST_ERR_UNSUPPORTED);
    CHECK(gt_vk_choose(four, 0, NULL, &err) == -1 && strstr(err.msg, "found no device"));
    const gt_vk_cand none[] = {cand("Old GPU", VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, false)};
    CHECK(gt_vk_choose(none, 1, NULL, &err) == -1 && strstr(err.msg, "no usable device"));
    printf("test_vk_choose: %s\n", fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
#else
int main(void) {
    printf("test_vk_choose: skipped (built without Vulkan headers)\n");
    return 0;
}
#endif
