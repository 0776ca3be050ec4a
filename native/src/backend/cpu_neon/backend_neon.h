/* cpu_neon: Arm NEON kernels (aarch64), bit-identical to cpu_scalar.
 *
 * Entries (gt_backend_find):
 *   "cpu_neon"          the best variant the CPU has: i8mm, else dotprod, else plain NEON;
 *   "cpu_neon_plain"    always plain NEON (vmull/vmlal: every aarch64 CPU);
 *   "cpu_neon_dotprod"  always SDOT (vdotq_s32, Armv8.2 dotprod); not available() without it;
 *   "cpu_neon_i8mm"     SMMLA (vmmlaq_s32, 2 rows x 2 tokens) where a product has two or more
 *                       tokens, SDOT otherwise; not available() without dotprod and i8mm.
 * The last three are findable by name (tests compare them) but not listed. On other
 * architectures all four exist and report available() == false. */
#ifndef GEIST_CPU_NEON_BACKEND_H
#define GEIST_CPU_NEON_BACKEND_H

#include "backend/backend.h"

const gt_backend *gt_backend_cpu_neon(void);
const gt_backend *gt_backend_cpu_neon_plain(void);
const gt_backend *gt_backend_cpu_neon_dotprod(void);
const gt_backend *gt_backend_cpu_neon_i8mm(void);

#endif
