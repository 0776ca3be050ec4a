#include "cpu.h"

#include <stdatomic.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

#define PROBED (1u << 31) /* set in the cache once probed */

/* CPUID bits (Intel SDM vol. 2A, CPUID): leaf 1 ecx, leaf 7 ebx / ecx */
#define L1C_FMA (1u << 12)
#define L1C_OSXSAVE (1u << 27)
#define L1C_AVX (1u << 28)
#define L1C_F16C (1u << 29)
#define L7B_AVX2 (1u << 5)
#define L7B_AVX512F (1u << 16)
#define L7B_AVX512BW (1u << 30)
#define L7B_AVX512VL (1u << 31)
#define L7C_AVX512VNNI (1u << 11)
/* XCR0: SSE and AVX state (bits 1, 2); AVX-512 opmask, upper ZMM0-15, ZMM16-31 (bits 5-7) */
#define XCR0_AVX 0x06u
#define XCR0_AVX512 0xe0u

static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static uint32_t probe(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (!(c & L1C_OSXSAVE) || !(c & L1C_AVX)) return 0;
    const uint64_t x = xcr0();
    if ((x & XCR0_AVX) != XCR0_AVX) return 0; /* the OS does not save the YMM registers */
    const unsigned c1 = c;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) b = c = 0;
    uint32_t f = 0;
    if (b & L7B_AVX2) f |= GT_CPU_AVX2;
    if (c1 & L1C_FMA) f |= GT_CPU_FMA;
    if (c1 & L1C_F16C) f |= GT_CPU_F16C;
    if ((x & XCR0_AVX512) == XCR0_AVX512) {
        if (b & L7B_AVX512F) f |= GT_CPU_AVX512F;
        if (b & L7B_AVX512BW) f |= GT_CPU_AVX512BW;
        if (b & L7B_AVX512VL) f |= GT_CPU_AVX512VL;
        if (c & L7C_AVX512VNNI) f |= GT_CPU_AVX512VNNI;
    }
    return f;
}

static _Atomic uint32_t g_features; /* 0: not probed yet; else PROBED | features */

uint32_t gt_cpu_features(void) {
    uint32_t f = atomic_load_explicit(&g_features, memory_order_relaxed);
    if (!(f & PROBED)) { /* concurrent first callers all store the same value */
        f = PROBED | probe();
        atomic_store_explicit(&g_features, f, memory_order_relaxed);
    }
    return f & ~PROBED;
}

#elif defined(__aarch64__)

#define PROBED (1u << 31)

#if defined(__APPLE__)
#include <sys/sysctl.h>

static int sysctl_flag(const char *name) {
    int v = 0;
    size_t len = sizeof v;
    return sysctlbyname(name, &v, &len, NULL, 0) == 0 && v != 0;
}

static uint32_t probe(void) {
    uint32_t f = GT_CPU_NEON; /* every Apple arm64 CPU */
    if (sysctl_flag("hw.optional.arm.FEAT_DotProd")) f |= GT_CPU_DOTPROD;
    if (sysctl_flag("hw.optional.arm.FEAT_I8MM")) f |= GT_CPU_I8MM;
    return f;
}

#elif defined(__linux__) /* Linux and Android */
#include <sys/auxv.h>

/* the kernel's hwcap bits (arch/arm64/include/uapi/asm/hwcap.h) */
#define HWCAP_ASIMD_BIT (1ul << 1)
#define HWCAP_ASIMDDP_BIT (1ul << 20)
#define HWCAP2_I8MM_BIT (1ul << 13)

static uint32_t probe(void) {
    const unsigned long h = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
    uint32_t f = 0;
    if (h & HWCAP_ASIMD_BIT) f |= GT_CPU_NEON;
    if ((f & GT_CPU_NEON) && (h & HWCAP_ASIMDDP_BIT)) f |= GT_CPU_DOTPROD;
    if ((f & GT_CPU_DOTPROD) && (h2 & HWCAP2_I8MM_BIT)) f |= GT_CPU_I8MM;
    return f;
}

#else /* other systems: the architecture's baseline */

static uint32_t probe(void) { return GT_CPU_NEON; }

#endif

static _Atomic uint32_t g_features;

uint32_t gt_cpu_features(void) {
    uint32_t f = atomic_load_explicit(&g_features, memory_order_relaxed);
    if (!(f & PROBED)) {
        f = PROBED | probe();
        atomic_store_explicit(&g_features, f, memory_order_relaxed);
    }
    return f & ~PROBED;
}

#else

uint32_t gt_cpu_features(void) { return 0; }

#endif
