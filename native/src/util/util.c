#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

float gt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t gt_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) { /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    }
    if (absx >= 0x477ff000u) { /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    }
    if (absx < 0x38800000u) { /* result is subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to 0 */
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffffu) | 0x800000u;
        /* value = m * 2^(e-150); the half subnormal unit is 2^-24, so q = m >> (126 - e) */
        uint32_t sh = 126 - e;
        uint32_t r = m >> sh;
        uint32_t rem = m & ((1u << sh) - 1u);
        uint32_t half = 1u << (sh - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t e = (absx >> 23) - 127 + 15;
    uint32_t m = absx & 0x7fffffu;
    uint32_t r = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

geist_status gt_fail(gt_err *err, geist_status status, const char *fmt, ...) {
    if (err) {
        err->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

geist_status gt_thread_fail(geist_status status, const char *fmt, ...) {
    char msg[GT_ERR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gt_set_thread_error(msg);
    return status;
}

static _Thread_local char g_thread_error[GT_ERR_CAP]; /* per thread: safe by construction */

void gt_set_thread_error(const char *msg) {
    snprintf(g_thread_error, sizeof g_thread_error, "%s", msg ? msg : "");
}

void gt_clear_thread_error(void) { g_thread_error[0] = '\0'; }

size_t gt_copy_message(const char *msg, char *buf, size_t cap) {
    size_t len = strlen(msg);
    if (buf && cap > 0) {
        size_t n = len < cap - 1 ? len : cap - 1;
        memcpy(buf, msg, n);
        buf[n] = '\0';
    }
    return len;
}

const char *gt_thread_error(void) { return g_thread_error; }

void *gt_calloc(size_t n, size_t size) {
    if (n == 0 || size == 0) return calloc(1, 1);
    return calloc(n, size);
}

void *gt_malloc_array(size_t n, size_t size) {
    size_t total;
    if (!gt_mul_size(n, size, &total)) return NULL;
    return malloc(total ? total : 1);
}

void gt_commit_zero(void *p, size_t n) {
    memset(p, 0, n);
    /* Volatile stores, one per page, so the compiler cannot fold malloc + memset into calloc. */
    volatile unsigned char *q = p;
    for (size_t i = 0; i < n; i += 4096) q[i] = 0;
}
