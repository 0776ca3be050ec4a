/* cpu_neon's integer products, dotprod copy (neon_kernels.inc). SConstruct builds this file with
 * -march for dotprod; backend_neon.c calls it only where the CPU probe (util/cpu.c) found it. */
#include "neon_common.h"

#if defined(__aarch64__)
#define KN(name) gt_neon_dotprod_##name
#define KDOT 1
#define KMM 0
#include "neon_kernels.inc"
#endif
