/* The Metal forward pass's dispatch plan: portable C (built and unit-tested on every platform,
 * native/tests/test_metal_step.c), encoded by the Objective-C host layer (metal.m, Darwin only).
 *
 * It mirrors the vulkan backend's step (backend/vulkan/vk_forward.c, llama architecture) with the
 * same kernels (their MSL translations, mtl_msl.h), in the same order, with the same push
 * constants and workgroup counts, so that what metal.m does per dispatch is only: pick the
 * pipeline, encode the argument buffer (descriptor set 0, members [[id(binding)]]) with the
 * buffers of `bind`, setBytes the push constants at [[buffer(1)]] and dispatch groups_x x
 * groups_y threadgroups of the kernel's local size. Differences from vulkan, all in binding:
 *   - a weight is bound at its own offset inside its Metal buffer (a NoCopy view, or a copy),
 *     rounded down to GT_MTL_BIND_ALIGN, and the push constant w_off carries the remainder (views
 *     may exceed 4 GiB; a 32-bit w_off could not address them);
 *   - a session's KV is bound at the layer's offset (k_at = 0, v_at = the K part in words), so
 *     only one layer need be addressable in 32-bit words;
 *   - a kernel's argument buffer holds only the bindings its MSL declares (SPIRV-Cross drops the
 *     unused ones; vulkan binds a placeholder to every binding instead).
 * Also here: the model checks behind the refusals (the vulkan backend's, word for word but
 * "metal:"), the host inputs of a pass (tokens, positions, the logits gather, rotary cos/sin
 * computed as the CPU does) and the scratch sizes. */
#ifndef GEIST_METAL_STEP_H
#define GEIST_METAL_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../model/model.h"
#include "planner.h"

#define GT_MTL_MAX_ROWS 64      /* rows per pass (a command buffer): bounds the scratch */
#define GT_MTL_N_BIND 8         /* bindings 0..7 of descriptor set 0 */
#define GT_MTL_MAX_GROUPS_X 65535u /* as vulkan: matvec reads row = x + y * numgroups.x */
#define GT_MTL_BIND_ALIGN 256u  /* offsets given to setBuffer:offset:atIndex: */
#define GT_MTL_PC_WORDS 24      /* the largest push-constant block (attn_part): 96 bytes */

typedef enum gt_mtl_kernel {
    GT_MTL_K_EMBED, GT_MTL_K_QUANT, GT_MTL_K_MATVEC, GT_MTL_K_RMSNORM,
    GT_MTL_K_ROPE, GT_MTL_K_KVSTORE, GT_MTL_K_ATTN, GT_MTL_K_ACT,
    /* vulkan's, translated and checked (test_msl.py) but not in this plan: the split attention
     * (vk_forward.c's device_attn_chunk), the prefill product (the plan keeps matvec), the
     * greedy id on the device (metal's device ops leave `argmax` unset: logits come back) and
     * vulkan's fma probe (exact.glsl's FMA_EXACT stays at its default here: emulated) */
    GT_MTL_K_ATTN_PART, GT_MTL_K_ATTN_MERGE, GT_MTL_K_MATMUL, GT_MTL_K_ARGMAX, GT_MTL_K_FMAPROBE,
    GT_MTL_K_COUNT
} gt_mtl_kernel;

/* What a kernel's GLSL declares (and so its MSL): the bindings it uses, its push constants'
 * size, its local_size_x (the threadgroup width; y = z = 1). tests/core/test_msl.py checks this
 * table against every translated kernel. */
typedef struct gt_mtl_kernel_info {
    const char *name; /* the .comp file's stem: gt_mtl_shaders[].name */
    uint32_t bindings; /* bit b: binding b is a member [[id(b)]] of the argument buffer */
    uint32_t pc_bytes;
    uint32_t local_size;
} gt_mtl_kernel_info;

extern const gt_mtl_kernel_info gt_mtl_kernels[GT_MTL_K_COUNT];

/* The per-model scratch buffers of a pass (shared storage), as vulkan's. */
typedef enum gt_mtl_scratch {
    GT_MTL_S_X, GT_MTL_S_XN, GT_MTL_S_Q, GT_MTL_S_K, GT_MTL_S_V, GT_MTL_S_ATT, GT_MTL_S_GATE,
    GT_MTL_S_UP, GT_MTL_S_AQ, GT_MTL_S_AD, GT_MTL_S_SC, GT_MTL_S_IN, GT_MTL_S_LG, GT_MTL_S_NORMS,
    GT_MTL_S_COUNT
} gt_mtl_scratch;

typedef enum gt_mtl_buf_kind {
    GT_MTL_BUF_NONE = 0,    /* unbound (the kernel does not declare the binding) */
    GT_MTL_BUF_SCRATCH = 1, /* index: a gt_mtl_scratch */
    GT_MTL_BUF_WEIGHT = 2,  /* index: the model's buffers (plan views, then plan copies) */
    GT_MTL_BUF_KV = 3,      /* index: the pass's row group (its session's KV buffer) */
} gt_mtl_buf_kind;

typedef struct gt_mtl_bind {
    uint32_t kind;   /* gt_mtl_buf_kind */
    uint32_t index;
    uint64_t offset; /* bytes into the buffer, a multiple of GT_MTL_BIND_ALIGN */
} gt_mtl_bind;

typedef struct gt_mtl_dispatch {
    uint32_t kernel; /* gt_mtl_kernel */
    gt_mtl_bind bind[GT_MTL_N_BIND];
    uint32_t pc[GT_MTL_PC_WORDS]; /* the push constants (floats by their bits), pc_bytes long */
    uint32_t pc_bytes;
    uint32_t groups_x, groups_y; /* threadgroups; each gt_mtl_kernels[kernel].local_size wide */
} gt_mtl_dispatch;

/* A weight matrix where metal.m bound its tensor. */
typedef struct gt_mtl_wref {
    uint32_t buf;    /* the model's buffer index (plan views, then copies) */
    uint64_t offset; /* the tensor's first byte in that buffer */
    uint32_t type, n_in, n_out, row_bytes;
} gt_mtl_wref;

enum { GT_MTL_W_Q, GT_MTL_W_K, GT_MTL_W_V, GT_MTL_W_O, GT_MTL_W_GATE, GT_MTL_W_UP, GT_MTL_W_DOWN,
       GT_MTL_W_PER_LAYER };

/* "" when the device forward pass runs the model, else why not (the vulkan backend's refusals:
 * llama only, no QK norm / post-norms / GELU / embedding scale, no logit soft-capping, no
 * attention biases, no sliding-window layers, the head geometry, weights
 * F32/F16/Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q6_K only; and a tensor past 4 GiB). */
void gt_mtl_check_model(const struct geist_model *m, char *buf, size_t cap);

/* Where the plan put weight w (a view of one of g's tensors): false when w is none of them. */
bool gt_mtl_wref_of(const struct gguf_file *g, const gt_mtl_plan *p, const gt_weight *w,
                    gt_mtl_wref *out);

/* The scratch buffers' sizes in bytes for `rows` rows attending over up to `ctx` positions
 * (GT_MTL_S_NORMS: (2 n_layer + 1) d_model floats). */
void gt_mtl_scratch_bytes(const gt_config *c, int32_t rows, int32_t ctx,
                          uint64_t out[GT_MTL_S_COUNT]);

/* One row of a pass, as the plan sees it. */
typedef struct gt_mtl_row {
    int32_t token, pos;
    bool logits; /* this row's logits are read back */
} gt_mtl_row;

/* A run of consecutive rows of one session: its KV's layout. */
typedef struct gt_mtl_group {
    int32_t r0, n;
    uint32_t mode;        /* gt_mtl_kv_layout's: GEIST_KV_F32, GEIST_KV_F16 or GEIST_KV_INT8 */
    uint64_t layer_bytes; /* gt_mtl_kv_layout's */
    uint64_t k_bytes;
} gt_mtl_group;

/* The pass's host inputs, in the `in` scratch buffer's words: per row token, pos, 0, 0; then the
 * indices of the rows wanting logits (at gather_at); then per row n_rot floats, the cos then the
 * sin of its rotary angles (at rope_at), computed as session/forward.c does. Returns the number
 * of rows wanting logits. */
int32_t gt_mtl_step_inputs(const gt_config *c, const float *inv_freq, const gt_mtl_row *rows,
                           int32_t n, uint32_t *in, uint32_t *gather_at, uint32_t *rope_at);

/* The most dispatches a pass of n_groups groups records (the size of `out` below). */
size_t gt_mtl_step_max_dispatches(int32_t n_layer, int32_t n_groups);

typedef struct gt_mtl_step_in {
    const gt_config *cfg;
    const gt_mtl_wref *tok, *out; /* token_embd, output */
    const gt_mtl_wref *lw;        /* n_layer * GT_MTL_W_PER_LAYER */
    const gt_mtl_group *groups;
    int32_t n_groups;
    int32_t n_rows;   /* 1..GT_MTL_MAX_ROWS */
    int32_t n_logits; /* rows wanting logits */
    uint32_t gather_at, rope_at; /* from gt_mtl_step_inputs */
    int32_t cap_ctx;  /* the attention scores' row stride (the scratch's ctx) */
} gt_mtl_step_in;

/* The dispatches of one pass, in order, into out (cap entries); returns how many, or 0 when cap
 * is too small or an offset does not fit the kernels' 32-bit words (err says which). */
size_t gt_mtl_step_plan(const gt_mtl_step_in *in, gt_mtl_dispatch *out, size_t cap, gt_err *err);

#endif
