/* The Vulkan kernels translated to Metal Shading Language by SPIRV-Cross at build time
 * (SConstruct, flags in spirv_cross.flags): build/<variant>/gen/mtl_msl.c, Darwin builds only.
 * Each kernel's entry point is `main0`; descriptor set 0 is an argument buffer at [[buffer(0)]]
 * (members [[id(binding)]] as in the GLSL), the push constants are at [[buffer(1)]]. */
#ifndef GEIST_MTL_MSL_H
#define GEIST_MTL_MSL_H

typedef struct gt_mtl_msl {
    const char *name;   /* the kernel's name (its .comp file without the suffix) */
    const char *source; /* MSL 2.3 source */
} gt_mtl_msl;

extern const gt_mtl_msl gt_mtl_shaders[];
extern const int gt_mtl_n_shaders;

#endif
