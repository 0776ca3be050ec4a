/* The running CPU's SIMD features, probed once (x86-64: CPUID, and XGETBV for the operating
 * system's saving of the AVX and AVX-512 registers; aarch64: getauxval(AT_HWCAP, AT_HWCAP2) on
 * Linux and Android, sysctlbyname on macOS); every feature test in the library goes through here.
 * Thread-safe: the first callers may probe concurrently, all store the same value (an atomic).
 *
 * gt_simd is the widest SIMD a caller permits: a backend's `simd` (backend/backend.h) tells the
 * CPU-side steps of the forward pass (attention, activations) which kernels they may run; each
 * still checks the CPU's features here. */
#ifndef GEIST_CPU_H
#define GEIST_CPU_H

#include <stdint.h>

enum {
    GT_CPU_AVX2 = 1u << 0,
    GT_CPU_FMA = 1u << 1,
    GT_CPU_F16C = 1u << 2,
    GT_CPU_AVX512F = 1u << 3,
    GT_CPU_AVX512BW = 1u << 4,
    GT_CPU_AVX512VL = 1u << 5,
    GT_CPU_AVX512VNNI = 1u << 6,
    GT_CPU_NEON = 1u << 8,     /* aarch64 Advanced SIMD */
    GT_CPU_DOTPROD = 1u << 9,  /* Armv8.2 SDOT/UDOT (vdotq_s32) */
    GT_CPU_I8MM = 1u << 10,    /* Armv8.6 int8 matrix multiply (vmmlaq_s32) */
};

/* A bitmask of GT_CPU_*: only what both the CPU and the operating system support. 0 on CPUs
 * other than x86-64 and aarch64. */
uint32_t gt_cpu_features(void);

/* true when the CPU has every feature of mask */
static inline int gt_cpu_has(uint32_t mask) { return (gt_cpu_features() & mask) == mask; }

typedef enum gt_simd {
    GT_SIMD_NONE = 0, /* plain C loops only (cpu_scalar, the reference) */
    GT_SIMD_AVX2,     /* AVX2 / FMA / F16C kernels where the CPU has them */
    GT_SIMD_AVX512,   /* AVX-512 kernels too, where the CPU has them */
} gt_simd;

#endif
