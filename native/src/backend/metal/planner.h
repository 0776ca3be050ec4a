/* The Metal backend's buffer planner: portable C (built and unit-tested on every platform,
 * native/tests/test_metal_planner.c), used by the Objective-C host layer (metal.m, Darwin only).
 *
 * Metal wraps caller memory without a copy through newBufferWithBytesNoCopy, which takes a
 * page-aligned pointer and a length that is a multiple of the page size (16 KiB on Apple silicon,
 * 4 KiB on Intel Macs) and no longer than the device's maxBufferLength. The planner turns the
 * model's weight span and tensor table into those views:
 *   - one view, [align_down(base), align_up(base + span)), when that fits in maxBufferLength
 *     (L = maxBufferLength rounded down to the page);
 *   - otherwise overlapping views of L bytes at a stride S = L - O, where the overlap
 *     O = align_up(largest tensor, page): every byte range no longer than the largest tensor then
 *     lies wholly in one view (the view k = floor((lo - start) / S) holds [lo, lo + size));
 *   - when even that cannot work (the largest tensor is within a page of L, so S < one page):
 *     views grown tensor by tensor in offset order, each as long as the tensors it takes fit;
 *   - copies, counted, for what cannot be wrapped: every tensor when the caller's bytes are
 *     writable and the caller did not allow aliasing them, and a tensor whose page-aligned range
 *     exceeds L although its bytes do not (packed into copy buffers of at most maxBufferLength).
 * A tensor larger than maxBufferLength cannot be bound at all: a clear error naming its index.
 * Every input is checked (page a power of two, ranges that overflow, tensors outside the span);
 * bad input fails with GEIST_ERR_INVALID_ARGUMENT and leaves *out empty. */
#ifndef GEIST_METAL_PLANNER_H
#define GEIST_METAL_PLANNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

/* The most views one plan may hold (a 4.64 GiB span with a 1 GiB maxBufferLength takes 13). */
#define GT_MTL_MAX_VIEWS 4096
/* Byte alignment of a tensor inside a copy buffer (covers every Metal buffer-offset rule). */
#define GT_MTL_COPY_ALIGN 256

/* One tensor of the table: its bytes [offset, offset + size) of the span. */
typedef struct gt_mtl_tensor {
    uint64_t offset;
    uint64_t size;
} gt_mtl_tensor;

typedef struct gt_mtl_plan_in {
    uint64_t base;       /* the span's address ((uintptr_t) of its first byte) */
    uint64_t span;       /* its length in bytes */
    uint64_t page;       /* the VM page size: a power of two (16384, 4096) */
    uint64_t max_buffer; /* MTLDevice.maxBufferLength */
    bool writable;       /* the caller's bytes are writable (load_from_memory of a mutable buffer) */
    bool allow_alias;    /* the caller allowed geist to wrap writable bytes in place */
    const gt_mtl_tensor *tensors;
    size_t n_tensors;
} gt_mtl_plan_in;

/* A NoCopy view: `length` bytes (a multiple of the page, <= maxBufferLength) at `addr` (aligned to
 * the page). Views ascend by addr; they may overlap. */
typedef struct gt_mtl_view {
    uint64_t addr;
    uint64_t length;
} gt_mtl_view;

typedef enum gt_mtl_where {
    GT_MTL_IN_VIEW = 0, /* index: a view; offset: from the view's addr */
    GT_MTL_IN_COPY = 1, /* index: a copy buffer; offset: inside it (GT_MTL_COPY_ALIGN-aligned) */
    GT_MTL_EMPTY = 2,   /* a zero-sized tensor of an empty span: nothing to bind */
} gt_mtl_where;

typedef struct gt_mtl_place {
    gt_mtl_where where;
    int32_t index;
    uint64_t offset;
} gt_mtl_place;

typedef enum gt_mtl_mode {
    GT_MTL_NONE = 0,    /* no views (empty span, or everything copied) */
    GT_MTL_SINGLE = 1,  /* one view over the whole span */
    GT_MTL_STRIDED = 2, /* overlapping views of L bytes at stride L - overlap */
    GT_MTL_GREEDY = 3,  /* views grown tensor by tensor */
} gt_mtl_mode;

typedef struct gt_mtl_plan {
    gt_mtl_mode mode;
    int32_t n_views;
    gt_mtl_view *views;
    int32_t n_copies;
    uint64_t *copy_len;  /* n_copies: each copy buffer's length (<= maxBufferLength) */
    gt_mtl_place *place; /* n_tensors: where each tensor is bound */
    uint64_t stride;     /* GT_MTL_STRIDED: view k starts at views[0].addr + k * stride */
    uint64_t overlap;    /* GT_MTL_STRIDED: bytes shared by neighbouring views */
    /* the memory report */
    uint64_t wrapped;        /* caller bytes under the views (their union: pages used in place) */
    uint64_t view_bytes;     /* sum of the views' lengths (address space, overlaps counted twice) */
    uint64_t copied;         /* bytes of the copy buffers: what geist owns for the weights */
    uint64_t copied_tensors; /* how many tensors were copied */
    int64_t bad_tensor;      /* on a tensor's error: its index, else -1 */
} gt_mtl_plan;

/* Plans the views. On failure *out is empty (nothing to free) and err says why. */
geist_status gt_mtl_plan_make(const gt_mtl_plan_in *in, gt_mtl_plan *out, gt_err *err);
void gt_mtl_plan_free(gt_mtl_plan *p);

/* The plan for a parsed model's weights (metal.m's call): the span is the GGUF bytes
 * [g->base, g->base + g->size), each tensor its bytes at data_offset + offset. On a tensor's
 * error the message names the tensor. */
struct gguf_file;
geist_status gt_mtl_plan_gguf(const struct gguf_file *g, uint64_t page, uint64_t max_buffer,
                              bool writable, bool allow_alias, gt_mtl_plan *out, gt_err *err);

/* A session's KV in one Metal buffer, in session/kv.c's row format for the modes the device
 * kernels read (F32, F16 values; INT8: per KV head an f32 scale then head_dim int8 codes, the
 * vulkan backend's): per layer the K rows of max_seq positions, then the V rows. */
typedef struct gt_mtl_kv_layout {
    uint32_t mode;        /* GEIST_KV_F32, GEIST_KV_F16 or GEIST_KV_INT8 (kvstore/attn's mode) */
    uint64_t k_row;       /* bytes per position of K */
    uint64_t v_row;       /* bytes per position of V */
    uint64_t k_bytes;     /* a layer's K part */
    uint64_t layer_bytes; /* a layer: K then V */
    uint64_t total;       /* n_layer layers */
} gt_mtl_kv_layout;

/* Fails with GEIST_ERR_UNSUPPORTED naming the supported modes for another mode (INT8 also needs
 * head dims that are multiples of 4, as on vulkan), or when the KV would exceed maxBufferLength;
 * GEIST_ERR_INVALID_ARGUMENT for counts <= 0 or sizes that overflow. */
geist_status gt_mtl_kv_plan(int32_t kv_mode, int32_t max_seq, int32_t n_layer, uint64_t n_head_kv,
                            uint64_t head_dim_k, uint64_t head_dim_v, uint64_t max_buffer,
                            gt_mtl_kv_layout *out, gt_err *err);

#endif
