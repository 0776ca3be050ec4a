/* Small shared helpers: overflow-checked arithmetic, half floats, error recording. */
#ifndef GEIST_UTIL_H
#define GEIST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "geist.h"

/* printf-style format checking: mingw-w64 builds use its C99 printf (__USE_MINGW_ANSI_STDIO,
 * SConstruct), whose formats are GNU's (%zu, %lld), not the Microsoft CRT's. */
#if defined(__MINGW32__) && !defined(__clang__)
#define GT_PRINTF(fmt, args) __attribute__((format(gnu_printf, fmt, args)))
#else
#define GT_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#endif

/* Overflow-checked arithmetic: return false on overflow (result unspecified then). */
static inline bool gt_add_u64(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_add_overflow(a, b, r); }
static inline bool gt_mul_u64(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_mul_overflow(a, b, r); }
static inline bool gt_add_size(size_t a, size_t b, size_t *r) { return !__builtin_add_overflow(a, b, r); }
static inline bool gt_mul_size(size_t a, size_t b, size_t *r) { return !__builtin_mul_overflow(a, b, r); }

/* IEEE half <-> float, exact (no rounding issues for f16 -> f32; round-to-nearest-even back). */
float gt_f16_to_f32(uint16_t h);
uint16_t gt_f32_to_f16(float f);

/* An error buffer: a short message with a status. Fill it, then hand it to the API layer. */
#define GT_ERR_CAP 512
typedef struct gt_err {
    geist_status status;
    char msg[GT_ERR_CAP];
} gt_err;

/* Records status + printf-style message into err (if err != NULL) and returns status. */
geist_status gt_fail(gt_err *err, geist_status status, const char *fmt, ...)
    GT_PRINTF(3, 4);

/* Formats a message as this thread's last error and returns status (for calls that have no
 * handle to record the error on). */
geist_status gt_thread_fail(geist_status status, const char *fmt, ...)
    GT_PRINTF(2, 3);

/* Copies msg into buf (NUL-terminated, truncated to cap); returns strlen(msg). The shape of
 * every geist_*_error() call. */
size_t gt_copy_message(const char *msg, char *buf, size_t cap);

/* Thread-local "last error of this thread" (see geist_last_error). */
void gt_set_thread_error(const char *msg);
void gt_clear_thread_error(void);
/* This thread's last error message (geist_last_error copies it out). */
const char *gt_thread_error(void);

/* Allocation helpers that count into a byte counter (NULL allowed). Return NULL on overflow. */
void *gt_calloc(size_t n, size_t size);
void *gt_malloc_array(size_t n, size_t size);

/* Zeroes n bytes so the pages are resident now (a plain malloc+memset may be folded into a lazy
 * calloc by the compiler). */
void gt_commit_zero(void *p, size_t n);

#endif
