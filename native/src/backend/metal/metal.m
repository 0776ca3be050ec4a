/* The metal backend's Objective-C host layer (Darwin only; SConstruct compiles it with the core's
 * -Wall -Wextra -Werror and -fobjc-arc).
 *
 * STATUS: NEVER COMPILED OR RUN IN THIS REPOSITORY. It was written on Linux, where no Metal SDK
 * exists; the first compiler to see it is the macos-14 runner of .github/workflows/macos.yml.
 * Here it is only parsed by clang against stand-in declarations (tests/repo/test_metal_objc.py).
 * Everything in it that can be portable C is portable C and tested on Linux: the buffer planner
 * and the KV layout (planner.c, native/tests/test_metal_planner.c), the forward pass's dispatch
 * plan and refusals (step.c, native/tests/test_metal_step.c; its binding table checked against
 * the translated kernels by tests/core/test_msl.py; the plan run with the same SPIR-V kernels on
 * lavapipe against cpu_scalar by tests/core/test_metal_step_vk.py) and the kernels' MSL (SPIRV-Cross at build
 * time, tests/core/test_msl.py).
 *
 * What it does (the device interface of backend.h, mirroring backend/vulkan):
 *   engine: the Metal device ("auto": the system default; an index or a name substring among
 *     MTLCopyAllDevices), a command queue, one compute pipeline per translated kernel
 *     (gen/mtl_msl.c, entry point main0, MSL 2.3);
 *   model: the weights wrapped in place by newBufferWithBytesNoCopy over the planner's views; what
 *     the planner copies (writable bytes without permission to alias: GEIST_DEVICE_NO_IMPORT), and
 *     everything when Metal refuses a NoCopy view, goes into shared-storage buffers, counted;
 *     models the vulkan backend refuses (step.c's gt_mtl_check_model: not llama, QK norm,
 *     post-norms, GELU, an embedding scale, logit soft-capping, attention biases, sliding
 *     windows, weight types other than F32/F16/Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q6_K) load, and their
 *     sessions are refused with the same reasons;
 *   sessions: the KV (F32, F16 or INT8 in session/kv.c's rows) in one shared-storage buffer per
 *     session (planner.h's layout), read and written in place by kv_read / kv_write;
 *   forward: vulkan's step (vk_forward.c): passes of up to 64 rows of one or more sessions, each
 *     one MTLCommandBuffer with one serial compute encoder; per dispatch of step.c's plan the
 *     kernel's pipeline, its argument buffer (descriptor set 0 at [[buffer(0)]], encoded by an
 *     MTLArgumentEncoder made from the kernel's function, members [[id(binding)]]), the push
 *     constants by setBytes at [[buffer(1)]], threadgroups of the GLSL local_size; the logits of
 *     the rows that want them read back from a shared buffer after waitUntilCompleted;
 *   memory: imported = the caller's bytes under the views, device_local = copies + norms +
 *     scratch + argument buffers (the sessions' KV is each session's own).
 * NOT here: sessions on a shared prefix (refused, as on vulkan). */
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
#include "step.h"

/* Objective-C objects are kept as retained CF references (CFBridgingRetain) so the C structs
 * below stay plain C; obj() borrows one. */
static id obj(const void *ref) { return (__bridge id)ref; }
static void drop(const void **ref) {
    if (*ref) (void)CFBridgingRelease(*ref);
    *ref = NULL;
}

typedef struct gt_mtl_ctx {
    const void *device;     /* id<MTLDevice> */
    const void *queue;      /* id<MTLCommandQueue> (thread-safe: each step makes its own buffer) */
    const void **pipelines; /* gt_mtl_n_shaders id<MTLComputePipelineState> */
    const void **functions; /* gt_mtl_n_shaders id<MTLFunction> (their argument encoders) */
    int32_t kidx[GT_MTL_K_COUNT]; /* step.h's kernel -> index in gt_mtl_shaders */
    gt_dev_probe probe;
    uint64_t page;
    uint64_t memory_limit;
    _Atomic uint64_t used; /* device bytes of this engine's models and sessions */
    bool allow_alias;
} gt_mtl_ctx;

/* The forward pass's state (made at model init when the model runs on the device). */
typedef struct gt_mtl_fwd {
    gt_mtl_wref tok, out;
    gt_mtl_wref *lw;                    /* n_layer * GT_MTL_W_PER_LAYER */
    const void *scratch[GT_MTL_S_COUNT]; /* id<MTLBuffer>, shared storage (NORMS: at model init) */
    uint64_t scratch_bytes[GT_MTL_S_COUNT];
    int32_t cap_rows, cap_ctx;
    const void *encoders[GT_MTL_K_COUNT]; /* id<MTLArgumentEncoder> (at the first session) */
    uint64_t arg_slot;                  /* bytes per dispatch in the argument buffer */
    const void *args;                   /* id<MTLBuffer>: one argument buffer per dispatch */
    uint64_t args_bytes;
    gt_mtl_dispatch *ds;                /* max_ds dispatches of one pass */
    size_t max_ds;
} gt_mtl_fwd;

typedef struct gt_mtl_model {
    gt_mtl_ctx *ctx;
    struct geist_model *model;
    gt_mtl_plan plan;
    const void **bufs; /* plan.n_views NoCopy views, then plan.n_copies copies: id<MTLBuffer> */
    uint64_t reserved; /* device bytes counted against the engine's budget (copies, scratch) */
    gt_dev_memory memory;
    pthread_mutex_t lock; /* one step (or kv_read / kv_write) of this model at a time */
    gt_mtl_fwd *fwd;      /* NULL: the device does not run this model (refuse says why) */
    char refuse[256];
} gt_mtl_model;

struct gt_dev_kv {
    gt_mtl_model *mm;
    const void *buf; /* id<MTLBuffer>, shared storage */
    gt_mtl_kv_layout lay;
    int32_t max_seq, n_layer;
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
    if (c->functions)
        for (int i = 0; i < gt_mtl_n_shaders; i++) drop(&c->functions[i]);
    free(c->pipelines);
    free(c->functions);
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
        c->functions = calloc((size_t)(gt_mtl_n_shaders > 0 ? gt_mtl_n_shaders : 1),
                              sizeof *c->functions);
        if (!c->pipelines || !c->functions) {
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
        /* no fast math: the kernels follow the CPU's plain arithmetic (vk_forward.c's header), which
         * fast math would let the compiler reorder and approximate. fastMathEnabled is deprecated
         * from macOS 15 in favour of mathMode (absent from older SDKs) but still honoured. */
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
        copts.fastMathEnabled = NO;
#pragma clang diagnostic pop
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
            c->functions[i] = CFBridgingRetain(fn);
        }
        /* the kernels the forward pass dispatches, each at least as wide as its local_size */
        for (int k = 0; k < GT_MTL_K_COUNT; k++) {
            c->kidx[k] = -1;
            for (int i = 0; i < gt_mtl_n_shaders; i++)
                if (strcmp(gt_mtl_shaders[i].name, gt_mtl_kernels[k].name) == 0) c->kidx[k] = i;
            id<MTLComputePipelineState> ps =
                c->kidx[k] >= 0 ? obj(c->pipelines[c->kidx[k]]) : nil;
            if (ps == nil || ps.maxTotalThreadsPerThreadgroup < gt_mtl_kernels[k].local_size) {
                const geist_status st = gt_fail(
                    err, GEIST_ERR_INTERNAL,
                    ps == nil ? "metal: kernel '%s' is not built in"
                              : "metal: kernel '%s' cannot run %u threads per threadgroup here",
                    gt_mtl_kernels[k].name, gt_mtl_kernels[k].local_size);
                ctx_free(c);
                return st;
            }
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

/* ---- the forward pass's buffers ------------------------------------------------------------ */

/* A shared-storage buffer of the model's own (scratch, norms, arguments), counted. */
static geist_status new_shared(gt_mtl_model *mm, uint64_t bytes, const char *what,
                               const void **out, gt_err *err) {
    if (bytes < 16) bytes = 16;
    geist_status st = reserve(mm->ctx, bytes, what, err);
    if (st) return st;
    id<MTLBuffer> b = [obj(mm->ctx->device) newBufferWithLength:(NSUInteger)bytes
                                                         options:MTLResourceStorageModeShared];
    if (b == nil) {
        atomic_fetch_sub(&mm->ctx->used, bytes);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "metal: cannot allocate %s (%.1f MiB)", what,
                       bytes / 1048576.0);
    }
    *out = CFBridgingRetain(b);
    mm->reserved += bytes;
    mm->memory.device_local += bytes;
    return GEIST_OK;
}

static void drop_shared(gt_mtl_model *mm, const void **ref, uint64_t bytes) {
    if (!*ref) return;
    drop(ref);
    if (bytes < 16) bytes = 16;
    atomic_fetch_sub(&mm->ctx->used, bytes);
    mm->reserved -= bytes;
    mm->memory.device_local -= bytes;
}

static void drop_scratch(gt_mtl_model *mm) {
    gt_mtl_fwd *fw = mm->fwd;
    for (int i = 0; i < GT_MTL_S_COUNT; i++)
        if (i != GT_MTL_S_NORMS) drop_shared(mm, &fw->scratch[i], fw->scratch_bytes[i]);
    fw->cap_rows = fw->cap_ctx = 0;
}

static void fwd_free(gt_mtl_model *mm) {
    gt_mtl_fwd *fw = mm->fwd;
    if (!fw) return;
    drop_scratch(mm);
    drop_shared(mm, &fw->scratch[GT_MTL_S_NORMS], fw->scratch_bytes[GT_MTL_S_NORMS]);
    drop_shared(mm, &fw->args, fw->args_bytes);
    for (int k = 0; k < GT_MTL_K_COUNT; k++) drop(&fw->encoders[k]);
    free(fw->lw);
    free(fw->ds);
    free(fw);
    mm->fwd = NULL;
}

/* At model init, while the span is readable: decides whether the device runs the model (else
 * mm->refuse says why; sessions are then refused), finds every weight's buffer and offset and
 * copies the norm vectors (F32 floats, as vulkan) into their buffer. */
static geist_status fwd_init(gt_mtl_model *mm, gt_err *err) {
    const geist_model *m = mm->model;
    const gt_config *c = &m->cfg;
    gt_mtl_check_model(m, mm->refuse, sizeof mm->refuse);
    if (mm->refuse[0]) return GEIST_OK;
    gt_mtl_fwd *fw = calloc(1, sizeof *fw);
    if (fw) {
        fw->lw = calloc((size_t)c->n_layer * GT_MTL_W_PER_LAYER, sizeof *fw->lw);
        fw->max_ds = gt_mtl_step_max_dispatches(c->n_layer, GT_MTL_MAX_ROWS);
        fw->ds = calloc(fw->max_ds, sizeof *fw->ds);
    }
    if (!fw || !fw->lw || !fw->ds) {
        if (fw) {
            free(fw->lw);
            free(fw->ds);
            free(fw);
        }
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (metal forward)");
    }
    mm->fwd = fw;
    const gguf_file *g = &m->gguf;
    bool ok = gt_mtl_wref_of(g, &mm->plan, &m->tok_embd, &fw->tok) &&
              gt_mtl_wref_of(g, &mm->plan, &m->output, &fw->out);
    for (int32_t il = 0; ok && il < c->n_layer; il++) {
        const gt_layer *L = &m->layers[il];
        const gt_weight *ws[GT_MTL_W_PER_LAYER] = {&L->wq, &L->wk, &L->wv, &L->wo,
                                                   &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; ok && i < GT_MTL_W_PER_LAYER; i++)
            ok = gt_mtl_wref_of(g, &mm->plan, ws[i], &fw->lw[il * GT_MTL_W_PER_LAYER + i]);
    }
    if (!ok) {
        fwd_free(mm);
        return gt_fail(err, GEIST_ERR_INTERNAL, "metal: a weight lies outside the Metal buffers");
    }
    uint64_t sb[GT_MTL_S_COUNT];
    gt_mtl_scratch_bytes(c, 1, 1, sb);
    fw->scratch_bytes[GT_MTL_S_NORMS] = sb[GT_MTL_S_NORMS];
    geist_status st = new_shared(mm, sb[GT_MTL_S_NORMS], "the norm weights",
                                 &fw->scratch[GT_MTL_S_NORMS], err);
    if (st) {
        fwd_free(mm);
        return st;
    }
    id<MTLBuffer> norms = obj(fw->scratch[GT_MTL_S_NORMS]);
    float *nw = (float *)norms.contents;
    const size_t d = (size_t)c->d_model;
    for (int32_t il = 0; il < c->n_layer; il++) {
        memcpy(nw + (2 * (size_t)il) * d, m->layers[il].attn_norm.data, d * sizeof(float));
        memcpy(nw + (2 * (size_t)il + 1) * d, m->layers[il].ffn_norm.data, d * sizeof(float));
    }
    memcpy(nw + 2 * (size_t)c->n_layer * d, m->output_norm.data, d * sizeof(float));
    mm->memory.host_owned += sizeof *fw + fw->max_ds * sizeof *fw->ds +
                             (uint64_t)c->n_layer * GT_MTL_W_PER_LAYER * sizeof *fw->lw;
    return GEIST_OK;
}

/* The argument encoders (one per kernel: set 0's layout as its MSL declares it) and the slot
 * each dispatch's argument buffer takes: at the first session, under mm->lock. */
static geist_status make_encoders(gt_mtl_model *mm, gt_err *err) {
    gt_mtl_fwd *fw = mm->fwd;
    if (fw->arg_slot) return GEIST_OK;
    uint64_t len = 0, align = 16;
    for (int k = 0; k < GT_MTL_K_COUNT; k++) {
        id<MTLFunction> fn = obj(mm->ctx->functions[mm->ctx->kidx[k]]);
        id<MTLArgumentEncoder> ae = [fn newArgumentEncoderWithBufferIndex:0];
        if (ae == nil)
            return gt_fail(err, GEIST_ERR_INTERNAL,
                           "metal: no argument encoder for kernel '%s' (buffer 0)",
                           gt_mtl_kernels[k].name);
        drop(&fw->encoders[k]); /* a retry after a failure */
        fw->encoders[k] = CFBridgingRetain(ae);
        if (ae.encodedLength > len) len = ae.encodedLength;
        if (ae.alignment > align) align = ae.alignment;
    }
    /* a multiple of the strictest alignment, and of 256 (setBuffer:offset: on the encoder) */
    if (align < GT_MTL_BIND_ALIGN) align = GT_MTL_BIND_ALIGN;
    fw->arg_slot = (len + align - 1) / align * align;
    return GEIST_OK;
}

/* scratch for `rows` rows attending over up to `ctx` positions, and the argument buffer */
static geist_status grow_scratch(gt_mtl_model *mm, int32_t rows, int32_t ctx, gt_err *err) {
    gt_mtl_fwd *fw = mm->fwd;
    if (!fw->args) {
        fw->args_bytes = fw->arg_slot * fw->max_ds;
        geist_status st = new_shared(mm, fw->args_bytes, "the argument buffers", &fw->args, err);
        if (st) return st;
    }
    if (rows <= fw->cap_rows && ctx <= fw->cap_ctx) return GEIST_OK;
    if (rows < fw->cap_rows) rows = fw->cap_rows;
    if (ctx < fw->cap_ctx) ctx = fw->cap_ctx;
    drop_scratch(mm);
    uint64_t sb[GT_MTL_S_COUNT];
    gt_mtl_scratch_bytes(&mm->model->cfg, rows, ctx, sb);
    for (int i = 0; i < GT_MTL_S_COUNT; i++) {
        if (i == GT_MTL_S_NORMS) continue;
        fw->scratch_bytes[i] = sb[i];
        geist_status st = new_shared(mm, sb[i], "the forward pass's scratch", &fw->scratch[i], err);
        if (st) {
            drop_scratch(mm);
            return st;
        }
    }
    fw->cap_rows = rows;
    fw->cap_ctx = ctx;
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
    fwd_free(mm);
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
        if ((st = fwd_init(mm, err))) { /* the span is still readable here */
            model_free(mm);
            return st;
        }
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
        if (!mm->fwd) return gt_fail(err, GEIST_ERR_UNSUPPORTED, "%s", mm->refuse);
        const gt_config *cfg = &mm->model->cfg;
        if (d->kv_mode != GEIST_KV_F32 && d->kv_mode != GEIST_KV_F16 &&
            (d->kv_mode != GEIST_KV_INT8 || cfg->head_dim_k % 4 || cfg->head_dim_v % 4))
            return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                           "metal: KV mode %d is not supported on the device (supported: 0 = "
                           "F32, 1 = F16, 2 = INT8)", (int)d->kv_mode);
        for (int32_t il = 0; il < d->n_layer; il++)
            if (d->rows[il] != d->max_seq_len)
                return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                               "metal: sessions on a shared prefix are not supported on the "
                               "device yet (create the session without the prefix, or use a CPU "
                               "backend)");
        gt_mtl_kv_layout lay;
        geist_status st = gt_mtl_kv_plan(d->kv_mode, d->max_seq_len, d->n_layer,
                                         (uint64_t)cfg->n_head_kv, (uint64_t)cfg->head_dim_k,
                                         (uint64_t)cfg->head_dim_v, mm->ctx->probe.max_buffer,
                                         &lay, err);
        if (st) return st;
        if (lay.layer_bytes / 4 > UINT32_MAX)
            return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                           "metal: a KV layer of %.1f MiB (max_seq_len %d) is more than the "
                           "kernels address; use a smaller max_seq_len",
                           lay.layer_bytes / 1048576.0, (int)d->max_seq_len);
        pthread_mutex_lock(&mm->lock);
        st = make_encoders(mm, err);
        pthread_mutex_unlock(&mm->lock);
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
    uint8_t *dk = base + (size_t)row0 * kv->lay.k_row;
    uint8_t *dv = base + kv->lay.k_bytes + (size_t)row0 * kv->lay.v_row;
    const size_t nk = (size_t)n * kv->lay.k_row, nv = (size_t)n * kv->lay.v_row;
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

/* ---- the forward pass ------------------------------------------------------------------------ */

/* The Metal buffer behind one of the plan's bindings. */
static id<MTLBuffer> bound(const gt_mtl_model *mm, const gt_mtl_bind *b, gt_dev_kv *const *kvs) {
    switch (b->kind) {
    case GT_MTL_BUF_SCRATCH: return obj(mm->fwd->scratch[b->index]);
    case GT_MTL_BUF_WEIGHT: return obj(mm->bufs[b->index]);
    case GT_MTL_BUF_KV: return obj(kvs[b->index]->buf);
    default: return nil;
    }
}

/* one pass over rows [0, n) (n <= GT_MTL_MAX_ROWS): one command buffer, one serial compute
 * encoder, the plan's dispatches in order, then the logits of the rows that want them */
static geist_status run_pass(gt_mtl_model *mm, const gt_dev_row *rows, int32_t n, gt_err *err) {
    gt_mtl_fwd *fw = mm->fwd;
    const geist_model *m = mm->model;
    const gt_config *cf = &m->cfg;
    int32_t max_ctx = 1, n_groups = 0;
    gt_mtl_group groups[GT_MTL_MAX_ROWS];
    gt_dev_kv *kvs[GT_MTL_MAX_ROWS];
    gt_mtl_row prow[GT_MTL_MAX_ROWS];
    for (int32_t t = 0; t < n; t++) {
        if (rows[t].prefix || rows[t].n_prefix)
            return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                           "metal: sessions on a shared prefix are not supported on the device yet");
        gt_dev_kv *kv = rows[t].kv;
        if (kv->mm != mm || rows[t].pos < 0 || rows[t].pos >= kv->max_seq)
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "metal: a row's KV does not fit");
        if (rows[t].pos + 1 > max_ctx) max_ctx = rows[t].pos + 1;
        if (t == 0 || kv != rows[t - 1].kv) {
            kvs[n_groups] = kv;
            groups[n_groups++] = (gt_mtl_group){t, 0, kv->lay.mode, kv->lay.layer_bytes,
                                                kv->lay.k_bytes};
        }
        groups[n_groups - 1].n++;
        prow[t] = (gt_mtl_row){rows[t].token, rows[t].pos, rows[t].logits != NULL};
    }
    geist_status st = grow_scratch(mm, GT_MTL_MAX_ROWS, max_ctx, err);
    if (st) return st;
    uint32_t gather_at = 0, rope_at = 0;
    id<MTLBuffer> inputs = obj(fw->scratch[GT_MTL_S_IN]);
    uint32_t *in = (uint32_t *)inputs.contents;
    const int32_t n_lg = gt_mtl_step_inputs(cf, m->inv_freq_global, prow, n, in, &gather_at,
                                            &rope_at);
    const gt_mtl_step_in plan_in = {cf, &fw->tok, &fw->out, fw->lw, groups, n_groups, n, n_lg,
                                gather_at, rope_at, fw->cap_ctx};
    const size_t nd = gt_mtl_step_plan(&plan_in, fw->ds, fw->max_ds, err);
    if (nd == 0) return err ? err->status : GEIST_ERR_INTERNAL;
    @autoreleasepool {
        gt_mtl_ctx *c = mm->ctx;
        id<MTLBuffer> args = obj(fw->args);
        id<MTLCommandBuffer> cb = [obj(c->queue) commandBuffer];
        id<MTLComputeCommandEncoder> enc =
            cb ? [cb computeCommandEncoderWithDispatchType:MTLDispatchTypeSerial] : nil;
        if (enc == nil)
            return gt_fail(err, GEIST_ERR_INTERNAL, "metal: cannot begin a command buffer");
        /* every buffer the argument buffers point at, made resident and its use declared once
         * for the encoder (Metal requires it of resources reached through argument buffers):
         * the weights read-only, the scratch and the rows' KV read and written */
        for (int32_t b = 0; b < mm->plan.n_views + mm->plan.n_copies; b++)
            [enc useResource:obj(mm->bufs[b]) usage:MTLResourceUsageRead];
        for (int b = 0; b < GT_MTL_S_COUNT; b++)
            [enc useResource:obj(fw->scratch[b])
                       usage:MTLResourceUsageRead | MTLResourceUsageWrite];
        for (int32_t g = 0; g < n_groups; g++)
            [enc useResource:obj(kvs[g]->buf) usage:MTLResourceUsageRead | MTLResourceUsageWrite];
        for (size_t i = 0; i < nd; i++) {
            const gt_mtl_dispatch *d = &fw->ds[i];
            const gt_mtl_kernel_info *ki = &gt_mtl_kernels[d->kernel];
            const NSUInteger at = (NSUInteger)(i * fw->arg_slot);
            /* descriptor set 0: this dispatch's own argument buffer (a slot of `args`, written
             * by the kernel's encoder), its members [[id(binding)]] the bindings the kernel's
             * MSL declares: exactly the plan's (tests/core/test_msl.py) */
            id<MTLArgumentEncoder> ae = obj(fw->encoders[d->kernel]);
            [ae setArgumentBuffer:args offset:at];
            for (uint32_t b = 0; b < GT_MTL_N_BIND; b++)
                if (d->bind[b].kind != GT_MTL_BUF_NONE)
                    [ae setBuffer:bound(mm, &d->bind[b], kvs)
                           offset:(NSUInteger)d->bind[b].offset
                          atIndex:b];
            [enc setComputePipelineState:obj(c->pipelines[c->kidx[d->kernel]])];
            [enc setBuffer:args offset:at atIndex:0];
            [enc setBytes:d->pc length:d->pc_bytes atIndex:1]; /* the push constants */
            [enc dispatchThreadgroups:MTLSizeMake(d->groups_x, d->groups_y, 1)
                threadsPerThreadgroup:MTLSizeMake(ki->local_size, 1, 1)];
            /* a serial encoder runs the dispatches in order; the barrier makes each one's buffer
             * writes visible to the next, as vulkan's pipeline barrier after every dispatch */
            [enc memoryBarrierWithScope:MTLBarrierScopeBuffers];
        }
        [enc endEncoding];
        [cb commit];
        [cb waitUntilCompleted];
        if (cb.status != MTLCommandBufferStatusCompleted)
            return gt_fail(err, GEIST_ERR_INTERNAL, "metal: the step failed on %s: %s",
                           c->probe.name,
                           cb.error ? cb.error.localizedDescription.UTF8String : "no reason given");
    }
    const size_t nv = (size_t)cf->n_vocab;
    id<MTLBuffer> logits = obj(fw->scratch[GT_MTL_S_LG]);
    const float *lg = (const float *)logits.contents;
    for (int32_t t = 0, k = 0; t < n; t++)
        if (rows[t].logits) memcpy(rows[t].logits, lg + (size_t)k++ * nv, nv * sizeof(float));
    return GEIST_OK;
}

static geist_status mtl_forward(void *dm, const gt_dev_row *rows, int32_t n, gt_err *err) {
    gt_mtl_model *mm = dm;
    if (!mm->fwd) return gt_fail(err, GEIST_ERR_UNSUPPORTED, "%s", mm->refuse);
    pthread_mutex_lock(&mm->lock);
    geist_status st = make_encoders(mm, err);
    for (int32_t done = 0; done < n && !st; done += GT_MTL_MAX_ROWS)
        st = run_pass(mm, rows + done, n - done < GT_MTL_MAX_ROWS ? n - done : GT_MTL_MAX_ROWS,
                      err);
    pthread_mutex_unlock(&mm->lock);
    return st;
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
