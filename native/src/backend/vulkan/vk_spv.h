/* The compute shaders as SPIR-V, compiled from shaders/<name>.comp by glslc at build time and embedded
 * by SCons (build/<variant>/gen/vk_spv.c; nothing binary is committed). */
#ifndef GEIST_VK_SPV_H
#define GEIST_VK_SPV_H

#include <stddef.h>
#include <stdint.h>

typedef struct gt_vk_spv {
    const char *name; /* the shader's file name without .comp */
    const uint32_t *code;
    size_t size; /* bytes */
} gt_vk_spv;

extern const gt_vk_spv gt_vk_shaders[];
extern const int gt_vk_n_shaders;

#endif
