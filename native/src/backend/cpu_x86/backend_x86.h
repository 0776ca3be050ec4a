/* cpu_x86: AVX2/FMA/F16C kernels, with AVX-512 variants picked at run time by CPUID.
 *
 * Three entries share the kernels:
 *   "cpu_x86"        the AVX-512 VNNI variant where the CPU has AVX-512 F/BW/VL/VNNI, else
 *                    the AVX2 one;
 *   "cpu_x86_avx2"   always the AVX2 variant, attention included (tests: checks it on AVX-512
 *                    machines too);
 *   "cpu_x86_avx512" always the AVX-512 VNNI variant; not available() without AVX-512
 *                    F/BW/VL/VNNI.
 * The last two are findable by name (gt_backend_find) but not listed by gt_backend_names().
 * On a non-x86-64 build all three exist and report available() == false. */
#ifndef GEIST_CPU_X86_BACKEND_H
#define GEIST_CPU_X86_BACKEND_H

#include "backend/backend.h"

const gt_backend *gt_backend_cpu_x86(void);
const gt_backend *gt_backend_cpu_x86_avx2(void);
const gt_backend *gt_backend_cpu_x86_avx512(void);

#endif
