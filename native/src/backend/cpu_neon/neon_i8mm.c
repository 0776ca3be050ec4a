/* cpu_neon's integer products, i8mm copy (neon_kernels.inc). SConstruct builds this file with
 * -march for i8mm; backend_neon.c calls it only where the CPU probe (util/cpu.c) found it. */
#include "neon_common.h"

#if defined(__aarch64__)
#define KN(name) gt_neon_i8mm_##name
#define KDOT 1
#define KMM 1
#include "neon_kernels.inc"
#endif
