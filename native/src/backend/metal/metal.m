/* The metal backend's Objective-C host layer (Darwin only; SConstruct compiles it with the core's
 * -Wall -Wextra -Werror and -fobjc-arc).
 *
 * STATUS: NEVER COMPILED OR RUN IN THIS REPOSITORY. It was written on Linux, where no Metal SDK
 * exists; the first compiler to see it is the macos-14 runner of .github/workflows/macos.yml.
 * Everything in it that can be portable C is portable C and tested on Linux: the buffer planner
 * and the KV layout (planner.c, native/tests/test_metal_planner.c) and the kernels' MSL
 * (SPIRV-Cross at build time, tests/core/test_msl.py).
 *
 * What it does (the device interface of backend.h, mirroring backend/vulkan):
 *   engine: the Metal device ("auto": the system default; an index or a name substring among
 *     MTLCopyAllDevices), a command queue, one compute pipeline per translated kernel
 *     (gen/mtl_msl.c, entry point main0, MSL 2.3);
 *   model: the weights wrapped in place by newBufferWithBytesNoCopy over the planner's views; what
 *     the planner copies (writable bytes without permission to alias: GEIST_DEVICE_NO_IMPORT), and
 *     everything when Metal refuses a NoCopy view, goes into shared-storage buffers, counted;
 *   sessions: the KV in one shared-storage buffer per session (planner.h's layout), read and
 *     written in place by kv_read / kv_write;
 *   memory: imported = the caller's bytes under the views, device_local = copies + KV.
 * NOT here yet: the forward pass. forward() refuses with GEIST_ERR_UNSUPPORTED; the command
 * encoding of the vulkan backend's step (vk_forward.c) is still to be mirrored. */
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../backend.h"
#include "../cpu_scalar/quants.h"
#include "../../model/model.h"
#include "mtl_msl.h"
#include "planner.h"

/* Objective-C objects are kept as retained CF references (CFBridgingRetain) so the C structs
 * below stay plain C; obj() borrows one. */
static id obj(const void *ref) { return (__bridge id)ref; }
static void drop(const void **ref) {
    if (*ref) (void)CFBridgingRelease(*ref);
    *ref = NULL;
}

typedef struct gt_mtl_ctx {
    const void *device;     /* id<MTLDevice> */
    const void *queue;      /* id<MTLCommandQueue> */
    const void **pipelines; /* gt_mtl_n_shaders id<MTLComputePipelineState> */
    gt_dev_probe probe;
    uint64_t page;
    uint64_t memory_limit;
    _Atomic uint64_t used; /* device bytes of this engine's models and sessions */
    bool allow_alias;
} gt_mtl_ctx;

typedef struct gt_mtl_model {
    gt_mtl_ctx *ctx;
    struct geist_model *model;
    gt_mtl_plan plan;
    const void **bufs; /* plan.n_views NoCopy views, then plan.n_copies copies: id<MTLBuffer> */
    uint64_t reserved; /* device bytes counted against the engine's budget (the copies) */
    gt_dev_memory memory;
    pthread_mutex_t lock; /* kv_read / kv_write against a step (once there is one) */
} gt_mtl_model;

struct gt_dev_kv {
    gt_mtl_model *mm;
    const void *buf; /* id<MTLBuffer>, shared storage */
    gt_mtl_kv_layout lay;
    int32_t max_seq, n_layer;
    uint64_t kd, vd;
};

static bool mtl_available(void) { return true; } /* the device is probed per engine */

static void mtl_matmul(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                       int64_t r0, int64_t r1, float *tmp) {
    gt_scalar_matmul_rows(w->type, w->data, w->row_bytes, w->n_in, r0, r1, x, n_tok, y, ldy, tmp);
}

static void mtl_get_row(const gt_weight *w, int64_t r, float *dst) {
    gt_scalar_dequantize_row(w->type, w->data + (size_t)r * w->row_bytes, dst, w->n_in);
}

/* ---- engine ---------------------------------------------------------------------------------- */

static void ctx_free(gt_mtl_ctx *c) {
    if (!c) return;
    if (c->pipelines)
        for (int i = 0; i < gt_mtl_n_shaders; i++) drop(&c->pipelines[i]);
    free(c->pipelines);
    drop(&c->queue);
    drop(&c->device);
    free(c);
}

static id<MTLDevice> pick_device(const char *want, gt_err *err) {
    if (want == NULL || want[0] == '\0' || strcmp(want, "auto") == 0) {
        id<MTLDevice> d = MTLCreateSystemDefaultDevice();
        if (d == nil) gt_fail(err, GEIST_ERR_UNSUPPORTED, "metal: this Mac has no Metal device");
        return d;
    }
    NSArray<id<MTLDevice>> *all = MTLCopyAllDevices();
    char *end = NULL;
    const long idx = strtol(want, &end, 10);
    if (end != want && *end == '\0') {
        if (idx >= 0 && (NSUInteger)idx < all.count) return all[(NSUInteger)idx];
        gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "metal: no device with index %ld (%lu found)",
                idx, (unsigned long)all.count);
        return nil;
    }
    for (id<MTLDevice> d in all)
        if (strstr(d.name.UTF8String, want) != NULL) return d;
    gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "metal: no device named like '%s'", want);
    return nil;
}

static geist_status mtl_engine_init(const gt_dev_options *o, void **out, gt_err *err) {
    @autoreleasepool {
        gt_mtl_ctx *c = calloc(1, sizeof *c);
        if (!c) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (metal engine)");
        c->pipelines = calloc((size_t)(gt_mtl_n_shaders > 0 ? gt_mtl_n_shaders : 1),
                              sizeof *c->pipelines);
        if (!c->pipelines) {
            ctx_free(c);
            return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (metal engine)");
        }
        id<MTLDevice> dev = pick_device(o->device, err);
        if (dev == nil) {
            ctx_free(c);
            return err ? err->status : GEIST_ERR_UNSUPPORTED;
        }
        c->device = CFBridgingRetain(dev);
        id<MTLCommandQueue> q = [dev newCommandQueue];
        if (q == nil) {
            ctx_free(c);
            return gt_fail(err, GEIST_ERR_UNSUPPORTED, "metal: cannot create a command queue");
        }
        c->queue = CFBridgingRetain(q);
        MTLCompileOptions *copts = [MTLCompileOptions new];
        copts.languageVersion = MTLLanguageVersion2_3;
        for (int i = 0; i < gt_mtl_n_shaders; i++) {
            NSError *e = nil;
            NSString *src = [NSString stringWithUTF8String:gt_mtl_shaders[i].source];
            id<MTLLibrary> lib = [dev newLibraryWithSource:src options:copts error:&e];
            id<MTLFunction> fn = lib ? [lib newFunctionWithName:@"main0"] : nil;
            id<MTLComputePipelineState> ps =
                fn ? [dev newComputePipelineStateWithFunction:fn error:&e] : nil;
            if (ps == nil) {
                const geist_status st = gt_fail(
                    err, GEIST_ERR_INTERNAL, "metal: kernel '%s' does not build on %s: %s",
                    gt_mtl_shaders[i].name, dev.name.UTF8String,
                    e ? e.localizedDescription.UTF8String : "no entry point main0");
                ctx_free(c);
                return st;
            }
            c->pipelines[i] = CFBridgingRetain(ps);
        }
        const long page = sysconf(_SC_PAGESIZE);
        c->page = page > 0 ? (uint64_t)page : 16384;
        snprintf(c->probe.name, sizeof c->probe.name, "%s", dev.name.UTF8String);
        c->probe.index = -1;
        c->probe.unified_memory = dev.hasUnifiedMemory;
        c->probe.host_import = true; /* newBufferWithBytesNoCopy */
        c->probe.import_align = c->page;
        c->probe.max_buffer = (uint64_t)dev.maxBufferLength;
        c->probe.max_alloc = (uint64_t)dev.maxBufferLength;
        c->probe.device_local = dev.recommendedMaxWorkingSetSize;
        c->memory_limit = o->memory_limit;
        c->allow_alias = !o->no_import;
        *out = c;
        return GEIST_OK;
    }
}

static void mtl_engine_free(void *ctx) { ctx_free(ctx); }

static void mtl_probe(const void *ctx, gt_dev_probe *out) { *out = ((const gt_mtl_ctx *)ctx)->probe; }

/* Device bytes against the engine's budget (device_memory_limit, else the working set). */
static geist_status reserve(gt_mtl_ctx *c, uint64_t bytes, const char *what, gt_err *err) {
    const uint64_t cap = c->memory_limit ? c->memory_limit : c->probe.device_local;
    const uint64_t used = atomic_fetch_add(&c->used, bytes);
    if (bytes > cap || used > cap - bytes) {
        atomic_fetch_sub(&c->used, bytes);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY,
                       "metal: %s need %.1f MiB; %s has %.1f MiB left (%s %.1f MiB)", what,
                       bytes / 1048576.0, c->probe.name, (cap > used ? cap - used : 0) / 1048576.0,
                       c->memory_limit ? "the engine's device_memory_limit is"
                                       : "its recommended working set is",
                       cap / 1048576.0);
    }
    return GEIST_OK;
}

/* ---- model ----------------------------------------------------------------------------------- */

static void release_buffers(gt_mtl_model *mm) {
    if (mm->bufs)
        for (int32_t i = 0; i < mm->plan.n_views + mm->plan.n_copies; i++) drop(&mm->bufs[i]);
    free(mm->bufs);
    mm->bufs = NULL;
    atomic_fetch_sub(&mm->ctx->used, mm->reserved);
    mm->reserved = 0;
    gt_mtl_plan_free(&mm->plan);
}

static void model_free(gt_mtl_model *mm) {
    if (!mm) return;
    release_buffers(mm);
    pthread_mutex_destroy(&mm->lock);
    free(mm);
}

static geist_status plan_weights(gt_mtl_model *mm, bool writable, bool allow_alias, gt_err *err) {
    return gt_mtl_plan_gguf(&mm->model->gguf, mm->ctx->page, mm->ctx->probe.max_buffer, writable,
                            allow_alias, &mm->plan, err);
}

/* The planner's buffers; *refused when Metal would not wrap a view (the caller then copies). */
static geist_status make_buffers(gt_mtl_model *mm, bool *refused, gt_err *err) {
    gt_mtl_ctx *c = mm->ctx;
    id<MTLDevice> dev = obj(c->device);
    const gt_mtl_plan *p = &mm->plan;
    *refused = false;
    mm->bufs = calloc((size_t)(p->n_views + p->n_copies) + 1, sizeof *mm->bufs);
    if (!mm->bufs) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (metal buffers)");
    for (int32_t k = 0; k < p->n_views; k++) {
        id<MTLBuffer> b = [dev newBufferWithBytesNoCopy:(void *)(uintptr_t)p->views[k].addr
                                                 length:(NSUInteger)p->views[k].length
                                                options:MTLResourceStorageModeShared
                                            deallocator:nil];
        if (b == nil) {
            *refused = true;
            return GEIST_OK;
        }
        mm->bufs[k] = CFBridgingRetain(b);
    }
    if (p->copied) {
        geist_status st = reserve(c, p->copied, "the weights' copies", err);
        if (st) return st;
        mm->reserved = p->copied;
    }
    const gguf_file *g = &mm->model->gguf;
    for (int32_t k = 0; k < p->n_copies; k++) {
        id<MTLBuffer> b = [dev newBufferWithLength:(NSUInteger)p->copy_len[k]
                                           options:MTLResourceStorageModeShared];
        if (b == nil)
            return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY,
                           "metal: cannot allocate a %.1f MiB buffer for the weights",
                           p->copy_len[k] / 1048576.0);
        mm->bufs[p->n_views + k] = CFBridgingRetain(b);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gt_mtl_place *q = &p->place[i];
        if (q->where != GT_MTL_IN_COPY || g->tensors[i].nbytes == 0) continue;
        id<MTLBuffer> b = obj(mm->bufs[p->n_views + q->index]);
        memcpy((uint8_t *)b.contents + q->offset, g->tensors[i].data, (size_t)g->tensors[i].nbytes);
    }
    return GEIST_OK;
}

static geist_status mtl_model_init(void *ctx, struct geist_model *m, bool load_file, void **dm,
                                   bool *drop_span, gt_err *err) {
    @autoreleasepool {
        *drop_span = false;
        gt_mtl_ctx *c = ctx;
        gt_mtl_model *mm = calloc(1, sizeof *mm);
        if (!mm) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (metal model)");
        mm->ctx = c;
        mm->model = m;
        pthread_mutex_init(&mm->lock, NULL);
        /* load_file: our own read-only mapping; load_from_memory: the caller's bytes (writable,
         * for all we know), which geist.h's contract keeps unchanged until the model is freed:
         * the permission to alias them. GEIST_DEVICE_NO_IMPORT withdraws it for both: copies. */
        geist_status st = plan_weights(mm, !load_file || !c->allow_alias, c->allow_alias, err);
        bool refused = false;
        if (!st) st = make_buffers(mm, &refused, err);
        if (!st && refused) { /* Metal would not wrap these pages: copy everything, say so */
            release_buffers(mm);
            st = plan_weights(mm, true, false, err);
            if (!st) st = make_buffers(mm, &refused, err);
        }
        if (st) {
            model_free(mm);
            return st;
        }
        mm->memory.imported = mm->plan.wrapped;
        mm->memory.device_local = mm->plan.copied;
        mm->memory.host_owned =
            sizeof *mm + (uint64_t)(mm->plan.n_views + mm->plan.n_copies) *
                             (sizeof(gt_mtl_view) + sizeof(uint64_t) + sizeof(void *)) +
            (uint64_t)m->gguf.n_tensors * sizeof(gt_mtl_place);
        *drop_span = load_file && mm->plan.n_views == 0; /* all copied: the file's pages go */
        *dm = mm;
        return GEIST_OK;
    }
}

static void mtl_model_free(void *dm) { model_free(dm); }

static void mtl_memory(const void *dm, gt_dev_memory *out) { *out = ((const gt_mtl_model *)dm)->memory; }

/* ---- KV -------------------------------------------------------------------------------------- */

static geist_status mtl_kv_alloc(void *dm, const gt_dev_kv_desc *d, gt_dev_kv **out, gt_err *err) {
    @autoreleasepool {
        gt_mtl_model *mm = dm;
        for (int32_t il = 0; il < d->n_layer; il++)
            if (d->rows[il] != d->max_seq_len)
                return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                               "metal: sessions on a shared prefix are not supported on the "
                               "device yet (create the session without the prefix)");
        const gt_config *cfg = &mm->model->cfg;
        gt_mtl_kv_layout lay;
        const uint64_t kd = (uint64_t)cfg->n_head_kv * (uint64_t)cfg->head_dim_k;
        const uint64_t vd = (uint64_t)cfg->n_head_kv * (uint64_t)cfg->head_dim_v;
        geist_status st = gt_mtl_kv_plan(d->kv_mode, d->max_seq_len, d->n_layer, kd, vd,
                                         mm->ctx->probe.max_buffer, &lay, err);
        if (st) return st;
        if ((st = reserve(mm->ctx, lay.total, "the session's KV", err))) return st;
        gt_dev_kv *kv = calloc(1, sizeof *kv);
        id<MTLBuffer> b = kv ? [obj(mm->ctx->device) newBufferWithLength:(NSUInteger)lay.total
                                                                  options:MTLResourceStorageModeShared]
                             : nil;
        if (b == nil) {
            free(kv);
            atomic_fetch_sub(&mm->ctx->used, lay.total);
            return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "metal: cannot allocate the KV (%.1f MiB)",
                           lay.total / 1048576.0);
        }
        kv->mm = mm;
        kv->buf = CFBridgingRetain(b);
        kv->lay = lay;
        kv->max_seq = d->max_seq_len;
        kv->n_layer = d->n_layer;
        kv->kd = kd;
        kv->vd = vd;
        *out = kv;
        return GEIST_OK;
    }
}

static void mtl_kv_free(gt_dev_kv *kv) {
    if (!kv) return;
    atomic_fetch_sub(&kv->mm->ctx->used, kv->lay.total);
    drop(&kv->buf);
    free(kv);
}

static geist_status kv_io(gt_dev_kv *kv, int32_t layer, int32_t row0, int32_t n, void *k, void *v,
                          bool write, gt_err *err) {
    if (layer < 0 || layer >= kv->n_layer || row0 < 0 || n < 0 || row0 > kv->max_seq - n)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "metal: KV rows out of range");
    id<MTLBuffer> b = obj(kv->buf);
    uint8_t *base = (uint8_t *)b.contents + (size_t)layer * kv->lay.layer_bytes;
    uint8_t *dk = base + (size_t)row0 * kv->kd * kv->lay.elem;
    uint8_t *dv = base + kv->lay.k_bytes + (size_t)row0 * kv->vd * kv->lay.elem;
    const size_t nk = (size_t)n * kv->kd * kv->lay.elem, nv = (size_t)n * kv->vd * kv->lay.elem;
    pthread_mutex_lock(&kv->mm->lock);
    if (write) {
        memcpy(dk, k, nk);
        memcpy(dv, v, nv);
    } else {
        memcpy(k, dk, nk);
        memcpy(v, dv, nv);
    }
    pthread_mutex_unlock(&kv->mm->lock);
    return GEIST_OK;
}

static geist_status mtl_kv_read(gt_dev_kv *kv, int32_t layer, int32_t row0, int32_t n, void *k,
                                void *v, gt_err *err) {
    return kv_io(kv, layer, row0, n, k, v, false, err);
}

static geist_status mtl_kv_write(gt_dev_kv *kv, int32_t layer, int32_t row0, int32_t n,
                                 const void *k, const void *v, gt_err *err) {
    return kv_io(kv, layer, row0, n, (void *)k, (void *)v, true, err);
}

static uint64_t mtl_kv_bytes(const gt_dev_kv *kv) { return kv ? kv->lay.total : 0; }

static geist_status mtl_forward(void *dm, const gt_dev_row *rows, int32_t n, gt_err *err) {
    (void)dm;
    (void)rows;
    (void)n;
    return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                   "metal: the device forward pass is not written yet (the weights' buffers, the "
                   "KV and the kernels' pipelines are); use a CPU backend");
}

static const gt_device_ops k_mtl_device = {
    .engine_init = mtl_engine_init, .engine_free = mtl_engine_free, .probe = mtl_probe,
    .model_init = mtl_model_init, .model_free = mtl_model_free, .memory = mtl_memory,
    .kv_alloc = mtl_kv_alloc, .kv_free = mtl_kv_free, .kv_read = mtl_kv_read,
    .kv_write = mtl_kv_write, .kv_bytes = mtl_kv_bytes, .forward = mtl_forward,
};

static const gt_backend k_metal = {
    .name = "metal",
    .available = mtl_available,
    .matmul = mtl_matmul,
    .get_row = mtl_get_row,
    .vec_dot = gt_scalar_vec_dot,
    .device = &k_mtl_device,
};

const gt_backend *gt_backend_metal(void) { return &k_metal; }
