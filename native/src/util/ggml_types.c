#include "ggml_types.h"

#include <stddef.h>

static const gt_type_info k_types[GT_TYPE_COUNT] = {
    [GT_TYPE_F32] = {"F32", 1, 4, true},
    [GT_TYPE_F16] = {"F16", 1, 2, true},
    [GT_TYPE_Q4_0] = {"Q4_0", 32, 18, true},
    [GT_TYPE_Q4_1] = {"Q4_1", 32, 20, true},
    [GT_TYPE_Q5_0] = {"Q5_0", 32, 22, true},
    [GT_TYPE_Q5_1] = {"Q5_1", 32, 24, true},
    [GT_TYPE_Q8_0] = {"Q8_0", 32, 34, true},
    [GT_TYPE_Q8_1] = {"Q8_1", 32, 36, false},
    [GT_TYPE_Q2_K] = {"Q2_K", 256, 84, true},
    [GT_TYPE_Q3_K] = {"Q3_K", 256, 110, true},
    [GT_TYPE_Q4_K] = {"Q4_K", 256, 144, true},
    [GT_TYPE_Q5_K] = {"Q5_K", 256, 176, true},
    [GT_TYPE_Q6_K] = {"Q6_K", 256, 210, true},
    [GT_TYPE_Q8_K] = {"Q8_K", 256, 292, false},
    [GT_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66, false},
    [GT_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74, false},
    [GT_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98, false},
    [GT_TYPE_IQ1_S] = {"IQ1_S", 256, 50, false},
    [GT_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18, true},
    [GT_TYPE_IQ3_S] = {"IQ3_S", 256, 110, false},
    [GT_TYPE_IQ2_S] = {"IQ2_S", 256, 82, false},
    [GT_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136, true},
    [GT_TYPE_I8] = {"I8", 1, 1, false},
    [GT_TYPE_I16] = {"I16", 1, 2, false},
    [GT_TYPE_I32] = {"I32", 1, 4, false},
    [GT_TYPE_I64] = {"I64", 1, 8, false},
    [GT_TYPE_F64] = {"F64", 1, 8, false},
    [GT_TYPE_IQ1_M] = {"IQ1_M", 256, 56, false},
    [GT_TYPE_BF16] = {"BF16", 1, 2, true},
    [GT_TYPE_TQ1_0] = {"TQ1_0", 256, 54, false},
    [GT_TYPE_TQ2_0] = {"TQ2_0", 256, 66, false},
    [GT_TYPE_MXFP4] = {"MXFP4", 32, 17, false},
};

const gt_type_info *gt_type_get(uint32_t type) {
    if (type >= GT_TYPE_COUNT || k_types[type].name == NULL) return NULL;
    return &k_types[type];
}
