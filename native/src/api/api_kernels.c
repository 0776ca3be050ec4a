/* Tensor type utilities of the C ABI: geist_dequantize and geist_vec_dot (tests and tools). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_scalar/quants.h"
#include "geist.h"
#include "util/ggml_types.h"
#include "util/util.h"

/* Records the message for geist_last_error() and returns status. */
/* Checks type, element count and byte size of one row of n values; sets *info. */
static geist_status check_row(const char *fn, int32_t type, const void *data, size_t size, size_t n,
                              const gt_type_info **info) {
    const gt_type_info *ti = type >= 0 ? gt_type_get((uint32_t)type) : NULL;
    if (ti == NULL) return gt_thread_fail(GEIST_ERR_UNSUPPORTED, "%s: unknown tensor type id %d", fn, (int)type);
    if (!ti->supported) {
        return gt_thread_fail(GEIST_ERR_UNSUPPORTED, "%s: tensor type %s (%d) is not supported", fn, ti->name,
                    (int)type);
    }
    if (n % ti->block != 0) {
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "%s: n = %zu is not a multiple of the %s block size %u",
                    fn, n, ti->name, ti->block);
    }
    /* the kernels index with int64_t */
    if ((uint64_t)n > (uint64_t)INT64_MAX) {
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "%s: n = %zu is too large", fn, n);
    }
    size_t need;
    if (!gt_mul_size(n / ti->block, ti->bytes, &need)) {
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "%s: n = %zu values of %s overflow size_t bytes", fn,
                    n, ti->name);
    }
    if (size < need) {
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "%s: %zu values of %s need %zu bytes, got %zu", fn,
                    n, ti->name, need, size);
    }
    if (n > 0 && data == NULL) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "%s: data is NULL", fn);
    *info = ti;
    return GEIST_OK;
}

geist_status geist_dequantize(int32_t type, const void *src, size_t src_size, float *dst, size_t n) {
    const gt_type_info *ti = NULL;
    geist_status st = check_row("geist_dequantize", type, src, src_size, n, &ti);
    if (st != GEIST_OK) return st;
    if (n > 0 && dst == NULL) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "geist_dequantize: dst is NULL");
    gt_scalar_dequantize_row((uint32_t)type, src, dst, (int64_t)n);
    return GEIST_OK;
}

geist_status geist_vec_dot(const char *backend, int32_t type, const void *row, size_t row_size,
                           const float *x, size_t n, float *out) {
    /* NULL: cpu_scalar; also the forced variants "cpu_x86_avx2" / "cpu_x86_avx512" */
    const gt_backend *be = backend == NULL ? gt_backend_cpu_scalar() : gt_backend_find(backend);
    if (be == NULL || !be->available()) {
        return gt_thread_fail(GEIST_ERR_UNSUPPORTED, "geist_vec_dot: backend \"%.64s\" is not available",
                    backend);
    }
    const gt_type_info *ti = NULL;
    geist_status st = check_row("geist_vec_dot", type, row, row_size, n, &ti);
    if (st != GEIST_OK) return st;
    if (n > 0 && x == NULL) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "geist_vec_dot: x is NULL");
    if (out == NULL) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "geist_vec_dot: out is NULL");
    *out = be->vec_dot((uint32_t)type, row, x, (int64_t)n);
    return GEIST_OK;
}
