/* GGML tensor types: ids as in the GGUF format, block geometry, and which ones geist computes
 * with. Facts of the format (block sizes, byte sizes); no code from elsewhere. */
#ifndef GEIST_GGML_TYPES_H
#define GEIST_GGML_TYPES_H

#include <stdbool.h>
#include <stdint.h>

enum gt_type {
    GT_TYPE_F32 = 0, GT_TYPE_F16 = 1, GT_TYPE_Q4_0 = 2, GT_TYPE_Q4_1 = 3,
    GT_TYPE_Q5_0 = 6, GT_TYPE_Q5_1 = 7, GT_TYPE_Q8_0 = 8, GT_TYPE_Q8_1 = 9,
    GT_TYPE_Q2_K = 10, GT_TYPE_Q3_K = 11, GT_TYPE_Q4_K = 12, GT_TYPE_Q5_K = 13,
    GT_TYPE_Q6_K = 14, GT_TYPE_Q8_K = 15, GT_TYPE_IQ2_XXS = 16, GT_TYPE_IQ2_XS = 17,
    GT_TYPE_IQ3_XXS = 18, GT_TYPE_IQ1_S = 19, GT_TYPE_IQ4_NL = 20, GT_TYPE_IQ3_S = 21,
    GT_TYPE_IQ2_S = 22, GT_TYPE_IQ4_XS = 23, GT_TYPE_I8 = 24, GT_TYPE_I16 = 25,
    GT_TYPE_I32 = 26, GT_TYPE_I64 = 27, GT_TYPE_F64 = 28, GT_TYPE_IQ1_M = 29,
    GT_TYPE_BF16 = 30, GT_TYPE_TQ1_0 = 34, GT_TYPE_TQ2_0 = 35, GT_TYPE_MXFP4 = 39,
    GT_TYPE_COUNT = 40
};

typedef struct gt_type_info {
    const char *name; /* NULL: not a known type id */
    uint32_t block;   /* elements per block */
    uint32_t bytes;   /* bytes per block */
    bool supported;   /* geist has kernels for it */
} gt_type_info;

/* NULL if the id is unknown. */
const gt_type_info *gt_type_get(uint32_t type);

#endif
