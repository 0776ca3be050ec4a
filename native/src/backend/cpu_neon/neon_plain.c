/* cpu_neon's integer products, plain copy (neon_kernels.inc): baseline aarch64 NEON. */
#include "neon_common.h"

#if defined(__aarch64__)
#define KN(name) gt_neon_plain_##name
#define KDOT 0
#define KMM 0
#include "neon_kernels.inc"
#endif
