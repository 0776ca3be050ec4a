/* The vulkan backend: a device (backend.h gt_device_ops). Its host-side kernels (norm vectors at
 * load, geist_vec_dot) are cpu_scalar's. */
#include <stdlib.h>

#include "vk.h"
#include "../cpu_scalar/quants.h"

static bool vk_available(void) { return true; } /* the loader and device are probed per engine */

static void vk_matmul(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                      int64_t r0, int64_t r1, float *tmp) {
    gt_scalar_matmul_rows(w->type, w->data, w->row_bytes, w->n_in, r0, r1, x, n_tok, y, ldy, tmp);
}

static void vk_get_row(const gt_weight *w, int64_t r, float *dst) {
    gt_scalar_dequantize_row(w->type, w->data + (size_t)r * w->row_bytes, dst, w->n_in);
}

static geist_status vk_engine_init(const gt_dev_options *o, void **ctx, gt_err *err) {
    gt_vk_ctx *c = NULL;
    geist_status st = gt_vk_ctx_create(o, &c, err);
    if (!st) *ctx = c;
    return st;
}

static void vk_engine_free(void *ctx) { gt_vk_ctx_free(ctx); }

static void vk_probe(const void *ctx, gt_dev_probe *out) { *out = ((const gt_vk_ctx *)ctx)->probe; }

static geist_status vk_model_init(void *ctx, struct geist_model *m, bool load_file, void **dm,
                                  bool *drop_span, gt_err *err) {
    gt_vk_model *vm = NULL;
    geist_status st = gt_vk_model_init(ctx, m, load_file, &vm, drop_span, err);
    if (!st) *dm = vm;
    return st;
}

static void vk_model_free(void *dm) { gt_vk_model_free(dm); }

static void vk_memory(const void *dm, gt_dev_memory *out) { *out = ((const gt_vk_model *)dm)->memory; }

static geist_status vk_kv_alloc(void *dm, const gt_dev_kv_desc *d, gt_dev_kv **out, gt_err *err) {
    return gt_vk_kv_alloc(dm, d, out, err);
}

static void vk_kv_free(gt_dev_kv *kv) { gt_vk_kv_free(kv); }

static geist_status vk_kv_read(gt_dev_kv *kv, int32_t layer, int32_t row0, int32_t n, void *k,
                               void *v, gt_err *err) {
    return gt_vk_kv_io(kv, layer, row0, n, k, v, false, err);
}

static geist_status vk_kv_write(gt_dev_kv *kv, int32_t layer, int32_t row0, int32_t n,
                                const void *k, const void *v, gt_err *err) {
    return gt_vk_kv_io(kv, layer, row0, n, (void *)k, (void *)v, true, err);
}

static uint64_t vk_kv_bytes(const gt_dev_kv *kv) { return gt_vk_kv_bytes(kv); }
static float *vk_kv_logits(gt_dev_kv *kv) { return gt_vk_kv_logits(kv); }

static geist_status vk_forward(void *dm, const gt_dev_row *rows, int32_t n, gt_err *err) {
    return gt_vk_forward(dm, rows, n, err);
}

static void vk_stats(void *dm, gt_dev_stats *out) { gt_vk_stats(dm, out); }

static const gt_device_ops k_vk_device = {
    .engine_init = vk_engine_init, .engine_free = vk_engine_free, .probe = vk_probe,
    .model_init = vk_model_init, .model_free = vk_model_free, .memory = vk_memory,
    .kv_alloc = vk_kv_alloc, .kv_free = vk_kv_free, .kv_read = vk_kv_read,
    .kv_write = vk_kv_write, .kv_bytes = vk_kv_bytes, .kv_logits = vk_kv_logits,
    .forward = vk_forward, .stats = vk_stats, .step_rows = GT_VK_PASS_ROWS, .argmax = true,
};

static const gt_backend k_vulkan = {
    .name = "vulkan",
    .available = vk_available,
    .matmul = vk_matmul,
    .get_row = vk_get_row,
    .vec_dot = gt_scalar_vec_dot,
    .device = &k_vk_device,
};

const gt_backend *gt_backend_vulkan(void) { return &k_vulkan; }
