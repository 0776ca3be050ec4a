/* The device forward pass (llama, gemma3, qwen3, phi3): every layer of a batched step on the GPU, in one
 * command buffer per pass of up to PASS_ROWS rows (pass_take below; larger steps run as
 * consecutive passes, a session's earlier rows first), with no host round trip between layers.
 * The host fills one small buffer per pass (tokens, positions, which rows want logits, the
 * rotary cos/sin computed as the CPU does) and reads back only the logits of the rows that asked
 * for them.
 *
 * Products: matvec.comp, 8 output rows per workgroup (quantized weights; one for F32/F16), up to
 * 8 tokens per pass over a row; steps of more than 8 rows take matmul.comp for quantized weights
 * (tiles of 32 rows x 32 tokens, the same sums in the same order).
 * Quantized weights (Q8_0, Q4_0, Q4_1, Q5_0 in blocks of 32; Q4_K, Q6_K in blocks of 256) take
 * 8-bit activations made on the device as cpu_scalar makes them (quant.comp; act_quant.h),
 * dotted in exact integer block sums; F32/F16 weights take float activations. The norms, rotary,
 * attention and the gated SiLU/GELU follow the CPU's plain arithmetic (shaders' comments), so
 * quantized models mostly agree with cpu_scalar bit for bit.
 * The layers run one recipe (session/forward.c's, from gt_config's flags): per layer its norm
 * vectors (QK norm and post-norms where the model has them), its rotary table (the local base on
 * sliding-window layers), its window and KV rows (layer_recipe below).
 * KV: F32, F16 or INT8 per session in session/kv.c's row format and layout: per layer the rows
 * the session's descriptor gives (a ring of the window on sliding layers; positions after a
 * shared prefix), so kv_read/kv_write move host images as they are. A session on a shared
 * prefix reads the prefix's KV (the frozen prefix session's, computed once on the device) for
 * the positions below n_prefix. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vk.h"
#include "vk_spv.h"
#include "../../model/model.h"
#include "../../util/ggml_types.h"

/* Rows per pass. A prompt's 512 tokens go in one pass (64-row passes paid every dispatch's and
 * barrier's latency 8 times, on too few workgroups to fill a GPU); what is sized per row beyond
 * the activations stays at NARROW_ROWS: the logits of at most LOGIT_ROWS rows a pass, and the
 * split attention's partials, the scores past SPLIT_SH positions and a ring's stage, which serve
 * only rows among the pass's first NARROW_ROWS (pass_take keeps the rows that need them there).
 * The scratch holds NARROW_ROWS rows until a step of more rows comes, then PASS_ROWS. */
#define PASS_ROWS GT_VK_PASS_ROWS
#define NARROW_ROWS 64
#define WAIT_ROWS 16 /* passes of at most this many rows wait as the last of as many took */
#define AHEAD_ROWS 16 /* rows a pass makes the next positions' rotary angles for */
#define LOGIT_ROWS 64 /* rows a pass gives logits or greedy ids of (gt_dev_row's output) */
#ifdef GEIST_VK_CLOCK
#define N_BIND 14 /* the clock build: binding 13 its records (shaders/clock.glsl) */
#else
#define N_BIND 13   /* storage buffer bindings of the one descriptor set layout */
#endif
#define MAX_GROUPS_X 65535u

/* argmax.comp's parts of a row: 4,096 ids each (Gemma 3's 262,144: 64 workgroups a row), at most
 * 128 (its stage 1 merges them with one lane each); *chunk: ids a part */
static uint32_t argmax_parts(uint32_t n_vocab, uint32_t *chunk) {
    uint32_t ch = 4096u;
    if ((n_vocab + ch - 1) / ch > 128u) ch = (n_vocab + 127u) / 128u;
    if (chunk) *chunk = ch;
    return (n_vocab + ch - 1) / ch;
}
/* matmul.comp's tile (its TM, TN), its shared memory in bytes (its shared arrays' sizes) and the
 * steps that take it: more rows than matvec.comp serves in one pass over a weight row */
#define MM_TM 32u
#define MM_TN 32u
#define MM_SHARED 23808u
#define MM_MIN_TOK 8u
#define MM16_MAX_TOK 16u
#define MM16_T 16u /* P_MATMUL16's rows and tokens per tile */

/* P_MATVEC8: matvec.comp with ROWS8 = 1 (8 rows per workgroup), for quantized weights;
 * P_MATVEC2: ROWS8 = 2 (2 rows of 32 lanes, a block a lane), for blocks of 32 in steps of at
 * most 8 rows (dispatch_mv8);
 * P_ATTN_PART: the split attention of decode rows (split_of below);
 * P_ATTN_FRESH, P_ATTN_PART_FRESH: attn.comp and attn_part.comp built with ATTN_FRESH, for passes
 * of one row a session (run_pass's fresh_pass): the row's QK norm, rotary and KV store inside;
 * P_QUANT_FUSED: quant.comp built with QUANT_FUSED (rec_quant_fused);
 * P_MATMUL: matmul.comp, tiles of rows x tokens for quantized weights in longer steps (32 x 32);
 * P_MATMUL16: its tiles of 16 x 16 (MR 2, MT 1), for steps of at most MM16_MAX_TOK tokens (a
 * reply's player line): more workgroups on the few rows of a small model, none of their token
 * slots idle;
 * P_ATTN_G .. P_ATTN_PART_FRESH_G: the four attention kernels built with ATTN_GROUP, a
 * workgroup per fw->attn_group query heads of a KV head (rec_attn);
 * P_ARGMAX: argmax.comp, the greedy id of rows that want only that (rec_argmax);
 * P_MVFAST: vulkan_only/mvfast.comp, GEIST_DEVICE_FAST's products of passes of one row
 * (rec_mvfast), made only with that flag;
 * P_ATTN_FAST: vulkan_only/attnfast.comp, that flag's attention of decode rows (rec_attn),
 * made where fast_attn_maxp says the device and the model take it;
 * P_NORM_FAST: vulkan_only/normfast.comp, that flag's standalone norms of passes of one row
 * (rec_norm), made where the device has attnfast.comp's subgroups;
 * P_MVFAST_PEND: mvfast.comp with PEND, products taking a deferred post-norm (rec_residual's
 * defer), made with that flag for models of post-norms and rows of at most PEND_MAX values;
 * P_OUTFAST, P_OUTFAST8: vulkan_only/outfast.comp (TOK 1, FAST_ROWS), that flag's Q8_0 products
 * of more than SELFQ_MAX_ROWS rows (a tied output's logits: rec_outfast), made where the device
 * promises the fast attention's full subgroups and the output's rows fit it (outfast_blocks) */
/* modes 0-3: one row, a row a workgroup, blocks of 2 and 4 (blocks of 8 left out, session 33:
 * mvt_block) */
#define MVT_MODES 4
/* the typed fast products' variants (P_MVT below) */
enum { MVT_PLAIN, MVT_PEND, MVT_RAW, MVT_VARIANTS };
enum { P_EMBED, P_QUANT, P_MATVEC, P_RMSNORM, P_ROPE, P_KVSTORE, P_ATTN, P_ACT, P_MATVEC8,
       P_ATTN_PART, P_MATMUL, P_MATVEC2, P_MATMUL16, P_ATTN_FRESH, P_ATTN_PART_FRESH,
       P_QUANT_FUSED, P_ATTN_G, P_ATTN_PART_G, P_ATTN_FRESH_G, P_ATTN_PART_FRESH_G, P_ARGMAX,
       P_MVFAST, P_ATTN_FAST, P_NORM_FAST, P_MVFAST_PEND, P_OUTFAST, P_OUTFAST8, P_MVT,
       P_COUNT = P_MVT + MVT_VARIANTS * MVT_MODES * 6 };
/* P_MVT + MVT_VARIANTS (MVT_MODES i + m) + v: P_MVFAST (v 0), P_MVFAST_PEND (v 1: PEND) or P_MVFAST
 * for blocks of x not normed (v 2: MVT_RAW, O and down, their x staged as it is: XN fw->xn_raw)
 * made for the weights of type k_mvt_types[i] alone (mvfast.comp's specialization constant TYPE:
 * its unpacking without a branch on the type, so that the compiler can overlap one unit's loads
 * with the next's), for the types the model's layers have, and for the rows of mode m: 0 a pass of
 * one row, 1 passes of several (mvfast.comp's SPREAD) a row a workgroup, 2.. blocks of 2^(m - 1)
 * rows a workgroup (its TT: mvt_block; MVT_RAW only these); P_MVFAST itself (SPREAD) serves
 * any other */
static const uint32_t k_mvt_types[6] = {GT_TYPE_Q4_0, GT_TYPE_Q4_1, GT_TYPE_Q5_0, GT_TYPE_Q8_0,
                                         GT_TYPE_Q4_K, GT_TYPE_Q6_K};
static const char *const k_pipe_names[P_MVT] = {
    "embed", "quant", "matvec", "rmsnorm", "rope", "kvstore", "attn", "act", "matvec",
    "attn_part", "matmul", "matvec", "matmul", "attn_fresh", "attn_part_fresh", "quant_fused",
    "attn_grp", "attn_part_grp", "attn_fresh_grp", "attn_part_fresh_grp", "argmax", "mvfast",
    "attnfast", "normfast", "mvfast", "outfast", "outfast"};
/* the kind of pipeline p: a typed fast product's is its generic one's (P_MVFAST or
 * P_MVFAST_PEND), which also gives its shader and the bindings it writes */
static int pipe_kind(int p) {
    return p < P_MVT ? p : (p - P_MVT) % MVT_VARIANTS == MVT_PEND ? P_MVFAST_PEND : P_MVFAST;
}
/* a typed fast product's pipeline: weights of type k_mvt_types[t], variant v (MVT_*), rows of
 * mode m */
static int pipe_mvt(int t, int v, int m) { return P_MVT + MVT_VARIANTS * (MVT_MODES * t + m) + v; }
static int mvt_type(int p) { return (p - P_MVT) / (MVT_VARIANTS * MVT_MODES); }
static int mvt_mode(int p) { return (p - P_MVT) / MVT_VARIANTS % MVT_MODES; }
static int mvt_var(int p) { return (p - P_MVT) % MVT_VARIANTS; }
/* mvfast.comp's shared memory in bytes for a block of tt rows: its floats part and ys, its
 * runs of 4 xsh and osh (the driver's count on the H100: 21,648 bytes for Gemma 3's blocks of
 * 4 with o, session 31) */
#define MVT_SHARED 24576u /* the most a block's pipeline takes (make_pipelines makes no more) */
static uint32_t mvt_shared(uint32_t xn, uint32_t tt, bool pend) {
    return 4u * (256u + 8u * tt) + 16u * (xn / 4u * tt + 1u + (pend && tt > 1 ? xn / 4u * tt : 1u));
}
/* The grouped attention's shared scores (attn_body.glsl's SH_TOTAL under ATTN_GROUP): a
 * dispatch takes the grouped kernels when its rows' positions (a split one's chunk) fit
 * GROUP_SH / attn_group a head, else one workgroup a head (SPLIT_SH) */
#define GROUP_SH 2048u
/* mvfast.comp's rows a workgroup (32 lanes a row; its specialization constant 4: the lanes): a
 * normed product stages its x once a workgroup. Session 28 on the H200, GPU ms a decode token
 * (Gemma 3 / SmolLM2): 2 rows 1.024 / 1.040, 4 rows 0.986 / 1.016, 8 rows 0.974 / 1.000 */
#define MVF_ROWS 8u
/* GEIST_DEVICE_FAST's products for passes of at most this many rows, a row a session (several
 * sessions decoding together: run_pass's fast_attn): mvfast.comp's workgroups times the rows,
 * each one row's outputs, every row's as a pass of that row alone computes them (session 29) */
#define FAST_ROWS 8u
/* P_MVFAST_PEND's staged residual: rows of at most this many values (16 KiB of shared memory) */
#define PEND_MAX 4096u
#define GROUP_MAX 4u /* attn_body.glsl's GMAX */

/* The split attention (attn_part.comp), when attn_chunk > 0 (vk_device.c's choice on GPUs, or
 * the engine's; else every row runs attn.comp, cpu_scalar's order): a session's rows of a pass,
 * when at most SPLIT_ROWS (decode, and a reply's player line: attn.comp's 16 rows x heads
 * workgroups walked 144 positions in 26 us a layer on the H200, a GPU's few percent), attend in
 * chunks of attn_chunk positions, one workgroup per (row, head, chunk), the last of a row's
 * chunks to finish merging them (attn_merge.glsl; the counts in fw->cnt, zeroed at each pass's
 * start); at most MAX_SPLIT chunks (past that the chunk grows by whole attn_chunks), SPLIT_SH
 * positions a chunk (attn_body.glsl's shared scores). Rows whose positions fill one chunk run
 * attn.comp. */
#define SPLIT_ROWS 16u
#define MAX_SPLIT 64u /* attn_merge.glsl's MAX_SPLIT */
#define SPLIT_SH 3072u /* attn_body.glsl's SH_TOTAL (one head a workgroup) */

typedef struct vbuf {
    VkBuffer buf;
    VkDeviceMemory mem;
    void *map; /* host-visible memory, mapped; else NULL */
    uint64_t size;
} vbuf;

/* A weight matrix on the device: its buffer and byte offset there; or a part of one split over
 * several buffers (vk_model.c's chunks of whole rows): rows [row0, row0 + n_out) of ldy. */
typedef struct wref {
    VkBuffer buf;
    uint32_t off, type, n_in, n_out, row_bytes;
    uint32_t row0, ldy;
} wref;

#define MAX_PARTS 16 /* parts of the embedding table / output (a 1 GiB table on lavapipe: 9) */

enum { W_Q, W_K, W_V, W_O, W_GATE, W_UP, W_DOWN, W_PER_LAYER };

/* One command of a pass as the host plans it (run_pass appends, record() turns the list into a
 * command buffer). A pass whose list equals the last one's (the usual decode step: what varies
 * per step lives in the `in` buffer) resubmits the command buffer as it was recorded. Zeroed
 * before being filled, so lists compare with memcmp. */
enum { CMD_DISPATCH, CMD_COPY_LOGITS };
typedef struct cmd {
    uint32_t kind, pipe, barrier, pcs; /* barrier: a memory barrier before this command */
    uint32_t role;                     /* geist_device_role: what it is for (profiling) */
    uint32_t gx, gy;
    VkBuffer bind[N_BIND]; /* VK_NULL_HANDLE: unused (a placeholder is bound) */
    uint32_t pc[32];       /* push constants (128 bytes, the layout's range) */
} cmd;

/* a descriptor set for one set of bindings: made once, reused by every pass that binds them */
typedef struct dset {
    VkBuffer b[N_BIND];
    VkDescriptorSet set;
} dset;
#define DS_CAP 1024u

#define NO_NORM UINT32_MAX

/* One layer's recipe: where its norm vectors lie in the norms buffer (floats; NO_NORM: the
 * model has none), which rotary table it takes, its attention window (0: all positions). */
typedef struct layer_recipe {
    uint32_t attn_norm, ffn_norm, q_norm, k_norm, post_attn, post_ffn;
    uint32_t rope_table; /* 0: global (inv_freq_global), 1: local (sliding layers) */
    uint32_t window;
} layer_recipe;

typedef struct gt_vk_fwd {
    pthread_mutex_t lock; /* one step (or KV copy) of this model at a time */
    bool pipelines;       /* created (at the first session) */
    bool mm;              /* matmul.comp fits the device's limits (shared memory) */
    uint32_t attn_group;  /* query heads a grouped attention workgroup takes (group_of); 1: none */
    uint32_t wins[2], n_wins; /* the layers' attention windows, each once (0: all positions) */
    /* decode's blocks-of-32 products on 32 lanes a row (P_MATVEC2): a GPU's lanes hide their
     * loads' latency so, but a CPU device (lavapipe) runs every lane, and the 4x workgroups
     * repeating the in-product 8-bit rows cost it ~6x: it keeps 8 lanes a row */
    bool wide;
    uint32_t spread_below; /* dispatch_mv8's MV_SPREAD: the device's compute units where a GPU
                              says (0: never) */
    bool fma; /* the device's fma() rounds once (probe_fused_fma): exact.glsl's FMA_EXACT */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout pl;
    VkPipeline pipe[P_COUNT];
    VkDescriptorPool dpool;
    uint32_t dpool_sets;
    VkCommandPool cpool;
    VkCommandBuffer cb;
    VkFence fence;
    float *norms_host; /* per layer its norm vectors (layer_recipe), then output_norm */
    size_t n_norm;
    uint32_t out_norm; /* output_norm's offset */
    layer_recipe *lr;  /* n_layer */
    vbuf norms;        /* the same on the device (at the first session) */
    wref tok[MAX_PARTS], out[MAX_PARTS];
    int32_t n_tok, n_out;
    uint32_t out_xb; /* outfast.comp's blocks a lane (its XB) for the output's rows; 0: not taken */
    uint32_t out_cl; /* and its lanes a row (CL) */
    wref *lw; /* n_layer * W_PER_LAYER */
    uint32_t xn_raw; /* MVT_RAW's XN: the longest row of O's or down's x that stages (0: none) */
    int32_t cap_rows, cap_ctx;
    vbuf x, xn, q, k, v, att, o, gate, up, aq, ad, sc, in, lg, lgh; /* lgh: logits' readback */
    vbuf x2; /* the residual stream's second buffer (rec's res: deferred post-norms) */
    vbuf amx, idh; /* argmax.comp's parts' best, and the rows' greedy ids (host-readable) */
    vbuf ap; /* the split attention's partials: NARROW_ROWS x n_head x cap_split chunks */
    vbuf cnt;           /* and per (row, head) its chunks done (attn_part.comp: the last merges) */
    uint32_t cap_split; /* chunks per (row, head) ap holds (0: no split) */
    uint64_t scratch_bytes;
    dset *ds; /* the cached sets (n_ds of ds_cap), found by ds_hash (ds_hcap slots: index + 1) */
    uint32_t n_ds, ds_cap;
    uint32_t ds_used; /* sets taken from dpool since its reset: the cached, and those dropped when
                       * a buffer they bind was freed (left in the pool until it fills) */
    uint32_t *ds_hash, ds_hcap;
    cmd *plan, *last; /* this pass's commands, and those the command buffer holds (n_last) */
    uint32_t plan_cap, n_last;
    bool cb_valid;    /* cb holds `last`, resubmittable */
    /* run_pass's plan keys (plan_key): this pass's (key_n words from key), and the recorded
     * plan's (key_len words from key + key_cap / 2; 0: it has none); last_direct: its rows whose
     * logits go straight into their session's */
    uint64_t *key, last_direct;
    uint32_t key_n, key_len, key_cap;
    VkQueryPool qp;   /* 2 timestamps around a pass, where the queue has them; profiling: one
                       * before the pass and one after every command (qp_cap of them) */
    uint32_t qp_cap;
    uint64_t *ts;     /* profiling: the timestamps read back (qp_cap) */
    double ts_ns;     /* nanoseconds per timestamp tick */
    uint64_t ts_mask; /* the valid bits */
    uint64_t wait_ns[WAIT_ROWS]; /* the last pass of n rows: its GPU time by timestamps (else
                                  * its submit to its end), the next one's expected time
                                  * (gt_vk_wait_until) */
    /* the rotary angles of the positions after a decode pass's (rope_ahead: made while the
     * device runs it), AHEAD_ROWS of them, each its two tables' n_rot floats, at ahead_pos (-1:
     * none) */
    float *ahead;
    int32_t ahead_pos[AHEAD_ROWS];
    /* the recorded plan's dispatches and barriers (the stats of a pass that reuses it) */
    uint32_t last_dispatches, last_barriers;
    gt_dev_stats stats; /* since the model's load (backend.h) */
#ifdef GEIST_VK_CLOCK
    gt_vk_clock clk;
#endif
} gt_vk_fwd;

struct gt_dev_kv {
    gt_vk_model *vm;
    vbuf b;
    int32_t mode, max_seq, n_layer;
    int32_t n_prefix;         /* the shared prefix's positions before the own ones (0: none) */
    uint32_t kd, vd;          /* values per position */
    uint32_t krow, vrow;      /* bytes per position (session/kv.c's row format) */
    int32_t *rows;            /* per layer: rows held (storage position q in slot q % rows) */
    uint64_t *at;             /* per layer: its first word (K rows, then V rows) */
    int32_t ring_rows;        /* the fewest rows of a layer (a ring's: rows past it stage) */
    uint64_t stage_at;        /* words of the stage (NARROW_ROWS K rows, then V rows), when a
                               * layer is a ring; else 0 */
    vbuf lgo; /* the session's logits (n_vocab floats, host-visible: gt_vk_kv_logits), where
               * made: a pass copies a row's logits there, and the host reads them in place */
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- buffers ------------------------------------------------------------------------------ */

static void vbuf_free(gt_vk_ctx *c, vbuf *b, uint64_t *acct) {
    if (b->map) c->f.UnmapMemory(c->dev, b->mem);
    if (b->buf) c->f.DestroyBuffer(c->dev, b->buf, NULL);
    if (b->mem) {
        c->f.FreeMemory(c->dev, b->mem, NULL);
        atomic_fetch_sub(&c->used, b->size);
        if (acct) *acct -= b->size;
    }
    memset(b, 0, sizeof *b);
}

/* Where a buffer lives. VB_DEVICE: device-local, mapped when the device's local memory is
 * host-visible too (unified memory, ReBAR). VB_UPLOAD: host-visible, written by the host and read
 * by the device (inputs, norms): device-local when it can be (ReBAR: write-combined writes are
 * fast). VB_READBACK: host-visible and host-cached where the device offers it (the logits'
 * landing place): the host reads it, and reads of ReBAR or uncached memory cross the bus word by
 * word (milliseconds for a vocabulary's logits on a discrete GPU). */
enum { VB_DEVICE, VB_UPLOAD, VB_READBACK };

/* a memory type with all of `want` and none of `avoid`, or -1 */
static int32_t memory_type_not(const gt_vk_ctx *c, uint32_t types, VkMemoryPropertyFlags want,
                               VkMemoryPropertyFlags avoid) {
    for (uint32_t i = 0; i < c->mem.memoryTypeCount; i++) {
        const VkMemoryPropertyFlags f = c->mem.memoryTypes[i].propertyFlags;
        if ((types & (1u << i)) && (f & want) == want && !(f & avoid)) return (int32_t)i;
    }
    return -1;
}

static geist_status vbuf_make(gt_vk_ctx *c, uint64_t size, int kind, vbuf *b, uint64_t *acct,
                              const char *what, gt_err *err) {
    const bool host = kind != VB_DEVICE;
    memset(b, 0, sizeof *b);
    if (size < 16) size = 16;
    const uint64_t cap = c->memory_limit ? c->memory_limit : c->probe.device_local;
    const uint64_t used = atomic_load(&c->used);
    if (size + used > cap)
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY,
                       "vulkan: %s needs %.1f MiB of device memory; %s has %.1f MiB left", what,
                       size / 1048576.0, c->probe.name, (cap > used ? cap - used : 0) / 1048576.0);
    const VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                                    .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                             VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                             VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                    .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    if (c->f.CreateBuffer(c->dev, &bci, NULL, &b->buf) != VK_SUCCESS) {
        b->buf = VK_NULL_HANDLE;
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: cannot create a buffer for %s", what);
    }
    VkMemoryRequirements rq;
    c->f.GetBufferMemoryRequirements(c->dev, b->buf, &rq);
    const VkMemoryPropertyFlags hv =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int32_t t = -1;
    if (kind == VB_READBACK) {
        t = memory_type_not(c, rq.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
                                  VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
        if (t < 0) t = gt_vk_memory_type(c, rq.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    }
    if (t < 0) t = gt_vk_memory_type(c, rq.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | hv);
    if (t < 0) t = gt_vk_memory_type(c, rq.memoryTypeBits, host ? hv : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (t < 0) t = gt_vk_memory_type(c, rq.memoryTypeBits, host ? hv : 0);
    const VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                      .allocationSize = rq.size, .memoryTypeIndex = (uint32_t)t};
    if (t < 0 || c->f.AllocateMemory(c->dev, &mai, NULL, &b->mem) != VK_SUCCESS) {
        b->mem = VK_NULL_HANDLE;
        vbuf_free(c, b, NULL);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY,
                       "vulkan: out of device memory for %s (%.1f MiB)", what, rq.size / 1048576.0);
    }
    b->size = rq.size;
    atomic_fetch_add(&c->used, b->size);
    if (acct) *acct += b->size;
    if (c->f.BindBufferMemory(c->dev, b->buf, b->mem, 0) != VK_SUCCESS) {
        vbuf_free(c, b, acct);
        return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot bind the buffer for %s", what);
    }
    if ((c->mem.memoryTypes[t].propertyFlags & hv) == hv &&
        c->f.MapMemory(c->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map) != VK_SUCCESS)
        b->map = NULL;
    if (host && !b->map) {
        vbuf_free(c, b, acct);
        return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot map the buffer for %s", what);
    }
    return GEIST_OK;
}

/* ---- what the device runs ----------------------------------------------------------------- */

static const char *type_name(uint32_t t) {
    const gt_type_info *ti = gt_type_get(t);
    return ti ? ti->name : "another type";
}

static bool type_ok(uint32_t t) {
    return t == GT_TYPE_F32 || t == GT_TYPE_F16 || t == GT_TYPE_Q8_0 || t == GT_TYPE_Q4_0 ||
           t == GT_TYPE_Q4_1 || t == GT_TYPE_Q5_0 || t == GT_TYPE_Q4_K || t == GT_TYPE_Q6_K;
}

/* "" when the device forward pass runs the model, else why not (into buf) */
static void check_model(const geist_model *m, char *buf, size_t cap) {
    const gt_config *c = &m->cfg;
    buf[0] = '\0';
    if (c->arch != GT_ARCH_LLAMA && c->arch != GT_ARCH_GEMMA3 && c->arch != GT_ARCH_QWEN3 &&
        c->arch != GT_ARCH_PHI3) {
        snprintf(buf, cap, "vulkan: the device forward pass runs the llama, gemma3, qwen3 and "
                 "phi3 architectures only; this model is %s (use a CPU backend)", c->arch_name);
        return;
    }
    if (c->attn_softcap > 0.0f || c->final_softcap > 0.0f) {
        snprintf(buf, cap, "vulkan: logit soft-capping is not on the device yet (use a CPU "
                 "backend)");
        return;
    }
    for (int32_t il = 0; il < c->n_layer; il++) {
        const gt_layer *L = &m->layers[il];
        if (L->bq.data || L->bk.data || L->bv.data || L->bo.data) {
            snprintf(buf, cap, "vulkan: attention biases (blk.%d) are not on the device yet (use "
                     "a CPU backend)", (int)il);
            return;
        }
    }
    for (int32_t il = 0; il < c->n_layer; il++)
        if (m->layers[il].sliding && c->sliding_window < 1) {
            snprintf(buf, cap, "vulkan: a sliding-window layer without a window (use a CPU "
                     "backend)");
            return;
        }
    if (c->n_rot % 2 || c->n_rot > c->head_dim_k || (c->n_head_kv * c->head_dim_k) % 2 ||
        (c->n_head_kv * c->head_dim_v) % 2 || c->n_head % c->n_head_kv) {
        snprintf(buf, cap, "vulkan: this model's head geometry is not supported on the device");
        return;
    }
    static const char *const roles[W_PER_LAYER] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                                   "ffn_gate", "ffn_up", "ffn_down"};
    const gt_weight *tw[2] = {&m->tok_embd, &m->output};
    static const char *const tnames[2] = {"token_embd", "output"};
    for (int i = 0; i < 2; i++)
        if (!type_ok(tw[i]->type)) {
            snprintf(buf, cap, "vulkan: tensor %s is %s; the device forward pass supports F32, "
                     "F16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K and Q6_K weights (use a CPU backend)", tnames[i],
                     type_name(tw[i]->type));
            return;
        }
    for (int32_t il = 0; il < c->n_layer; il++) {
        const gt_layer *L = &m->layers[il];
        const gt_weight *ws[W_PER_LAYER] = {&L->wq, &L->wk, &L->wv, &L->wo,
                                            &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < W_PER_LAYER; i++)
            if (!type_ok(ws[i]->type) || ws[i]->data == NULL) {
                snprintf(buf, cap, "vulkan: tensor blk.%d.%s is %s; the device forward pass "
                         "supports F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K and Q6_K weights (use a "
                         "CPU backend)",
                         (int)il, roles[i], type_name(ws[i]->type));
                return;
            }
    }
}

/* w as parts of whole rows, each inside one device buffer (at most max, else false) */
static bool wref_parts(const gt_vk_model *vm, const gt_weight *w, wref *out, int32_t max,
                       int32_t *n) {
    const uint64_t base = (uint64_t)(w->data - vm->model->gguf.base), rb = w->row_bytes;
    *n = 0;
    for (int64_t r = 0; r < w->n_out;) {
        const uint64_t off = base + (uint64_t)r * rb;
        int32_t best = -1;
        uint64_t best_rows = 0;
        for (int32_t i = 0; i < vm->n_chunks; i++) { /* the chunk holding most rows from r */
            const gt_vk_chunk *ch = &vm->chunks[i];
            if (off < ch->src_off || off >= ch->src_off + ch->size) continue;
            const uint64_t fit = (ch->src_off + ch->size - off) / (rb ? rb : 1);
            if (fit > best_rows) {
                best = i;
                best_rows = fit;
            }
        }
        if (best < 0 || best_rows == 0 || *n == max) return false;
        const gt_vk_chunk *ch = &vm->chunks[best];
        const uint64_t at = off - ch->src_off + ch->shift;
        const int64_t nr = (int64_t)best_rows < w->n_out - r ? (int64_t)best_rows : w->n_out - r;
        if (at > UINT32_MAX) return false;
        out[(*n)++] = (wref){ch->buf, (uint32_t)at, w->type, (uint32_t)w->n_in, (uint32_t)nr,
                             (uint32_t)w->row_bytes, (uint32_t)r, (uint32_t)w->n_out};
        r += nr;
    }
    return *n > 0;
}

static bool wref_of(const gt_vk_model *vm, const gt_weight *w, wref *out) {
    int32_t n;
    return wref_parts(vm, w, out, 1, &n);
}

void gt_vk_fwd_free(gt_vk_model *vm) {
    gt_vk_fwd *fw = vm->fwd;
    if (!fw) return;
    gt_vk_ctx *c = vm->ctx;
    vbuf *bufs[] = {&fw->norms, &fw->x, &fw->x2, &fw->xn, &fw->q, &fw->k, &fw->v, &fw->att, &fw->o,
                    &fw->gate, &fw->up, &fw->aq, &fw->ad, &fw->sc, &fw->in, &fw->lg, &fw->lgh,
                    &fw->ap, &fw->cnt, &fw->amx, &fw->idh};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        vbuf_free(c, bufs[i], &vm->memory.device_local);
#ifdef GEIST_VK_CLOCK
    gt_vk_clock_report(&fw->clk, stderr);
    gt_vk_clock_free(c, &fw->clk);
#endif
    for (int i = 0; i < P_COUNT; i++)
        if (fw->pipe[i]) c->f.DestroyPipeline(c->dev, fw->pipe[i], NULL);
    if (fw->pl) c->f.DestroyPipelineLayout(c->dev, fw->pl, NULL);
    if (fw->dsl) c->f.DestroyDescriptorSetLayout(c->dev, fw->dsl, NULL);
    if (fw->dpool) c->f.DestroyDescriptorPool(c->dev, fw->dpool, NULL);
    if (fw->qp) c->f.DestroyQueryPool(c->dev, fw->qp, NULL);
    free(fw->ts);
    free(fw->ahead);
    if (fw->fence) c->f.DestroyFence(c->dev, fw->fence, NULL);
    if (fw->cpool) c->f.DestroyCommandPool(c->dev, fw->cpool, NULL);
    pthread_mutex_destroy(&fw->lock);
    free(fw->norms_host);
    free(fw->lw);
    free(fw->ds);
    free(fw->ds_hash);
    free(fw->plan);
    free(fw->last);
    free(fw->key);
    free(fw->lr);
    free(fw);
    vm->fwd = NULL;
}

geist_status gt_vk_fwd_init(gt_vk_model *vm, gt_err *err) {
    const geist_model *m = vm->model;
    const gt_config *c = &m->cfg;
    check_model(m, vm->refuse, sizeof vm->refuse);
    if (vm->refuse[0]) return GEIST_OK;
    gt_vk_fwd *fw = calloc(1, sizeof *fw);
    if (fw) fw->lw = calloc((size_t)c->n_layer * W_PER_LAYER, sizeof *fw->lw);
    if (fw) fw->lr = calloc((size_t)c->n_layer, sizeof *fw->lr);
    if (!fw || !fw->lw || !fw->lr) {
        if (fw) free(fw->lw);
        free(fw);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (vulkan forward)");
    }
    pthread_mutex_init(&fw->lock, NULL);
    vm->fwd = fw;
    bool ok = wref_parts(vm, &m->tok_embd, fw->tok, MAX_PARTS, &fw->n_tok) &&
              wref_parts(vm, &m->output, fw->out, MAX_PARTS, &fw->n_out);
    for (int32_t il = 0; ok && il < c->n_layer; il++) {
        const gt_layer *L = &m->layers[il];
        const gt_weight *ws[W_PER_LAYER] = {&L->wq, &L->wk, &L->wv, &L->wo,
                                            &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; ok && i < W_PER_LAYER; i++)
            ok = wref_of(vm, ws[i], &fw->lw[il * W_PER_LAYER + i]);
    }
    if (!ok) { /* a layer matrix split over buffers (larger than one), or more parts */
        gt_vk_fwd_free(vm);
        return gt_fail(err, GEIST_ERR_UNSUPPORTED, "vulkan: a weight matrix does not fit the "
                       "device's storage buffers (%llu bytes each; the embedding table and the "
                       "output may span %d)", (unsigned long long)vm->ctx->probe.max_buffer,
                       MAX_PARTS);
    }
    /* the layers' recipes and norm vectors, the latter while the span is readable (a file's
     * pages may be dropped after); on the device with the first session */
    const size_t d = (size_t)c->d_model, hk = (size_t)c->head_dim_k;
    const size_t per_layer = 2 * d + (c->qk_norm ? 2 * hk : 0) + (c->post_norms ? 2 * d : 0);
    fw->n_norm = (size_t)c->n_layer * per_layer + d;
    float *nw = fw->norms_host = malloc(fw->n_norm * sizeof(float));
    if (!nw) {
        gt_vk_fwd_free(vm);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (vulkan norm weights)");
    }
    size_t at = 0;
#define NORM(vec, n) (memcpy(nw + at, (vec).data, (n) * sizeof(float)), at += (n), (uint32_t)(at - (n)))
    for (int32_t il = 0; il < c->n_layer; il++) {
        const gt_layer *L = &m->layers[il];
        layer_recipe *R = &fw->lr[il];
        R->attn_norm = NORM(L->attn_norm, d);
        R->ffn_norm = NORM(L->ffn_norm, d);
        R->q_norm = c->qk_norm ? NORM(L->q_norm, hk) : NO_NORM;
        R->k_norm = c->qk_norm ? NORM(L->k_norm, hk) : NO_NORM;
        R->post_attn = c->post_norms ? NORM(L->post_attn_norm, d) : NO_NORM;
        R->post_ffn = c->post_norms ? NORM(L->post_ffn_norm, d) : NO_NORM;
        R->rope_table = L->sliding ? 1u : 0u;
        R->window = L->sliding ? (uint32_t)c->sliding_window : 0u;
        if (fw->n_wins == 0 || (fw->n_wins == 1 && fw->wins[0] != R->window))
            fw->wins[fw->n_wins++] = R->window; /* (0 or the sliding window: two at most) */
    }
    fw->out_norm = NORM(m->output_norm, d);
#undef NORM
    vm->memory.host_owned += sizeof *fw + fw->n_norm * sizeof(float) +
                             (uint64_t)c->n_layer * (W_PER_LAYER * sizeof *fw->lw + sizeof *fw->lr);
    return GEIST_OK;
}

/* the descriptor pool and set cache for `cap` sets (the sets made before are dropped) */
static geist_status make_dpool(gt_vk_model *vm, uint32_t cap, gt_err *err) {
    gt_vk_fwd *fw = vm->fwd;
    gt_vk_ctx *c = vm->ctx;
    if (fw->dpool) c->f.DestroyDescriptorPool(c->dev, fw->dpool, NULL);
    fw->dpool = VK_NULL_HANDLE;
    fw->n_ds = fw->ds_cap = fw->ds_used = 0;
    const VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, cap * N_BIND};
    const VkDescriptorPoolCreateInfo dpci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                             .maxSets = cap, .poolSizeCount = 1,
                                             .pPoolSizes = &ps};
    if (c->f.CreateDescriptorPool(c->dev, &dpci, NULL, &fw->dpool) != VK_SUCCESS) {
        fw->dpool = VK_NULL_HANDLE;
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: cannot create a descriptor pool");
    }
    dset *ds = realloc(fw->ds, cap * sizeof *ds);
    if (ds) fw->ds = ds;
    uint32_t hcap = 16;
    while (hcap < 2 * cap) hcap *= 2;
    uint32_t *h = ds ? calloc(hcap, sizeof *h) : NULL;
    if (!h) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (vulkan descriptors)");
    free(fw->ds_hash);
    fw->ds_hash = h;
    fw->ds_hcap = hcap;
    fw->ds_cap = cap;
    return GEIST_OK;
}

/* the hash slot of a set of bindings (FNV-1a over the handles), probed linearly */
static uint32_t ds_slot(const gt_vk_fwd *fw, const VkBuffer bind[N_BIND]) {
    const unsigned char *b = (const unsigned char *)bind;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < N_BIND * sizeof(VkBuffer); i++) h = (h ^ b[i]) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32)) & (fw->ds_hcap - 1);
}

static void ds_index(gt_vk_fwd *fw, uint32_t i) {
    uint32_t k = ds_slot(fw, fw->ds[i].b);
    while (fw->ds_hash[k]) k = (k + 1) & (fw->ds_hcap - 1);
    fw->ds_hash[k] = i + 1;
}

/* outfast.comp's blocks of 32 a lane (its XB) for the output's rows, and its lanes a row (CL,
 * into *cl), where a fast engine's device promises full subgroups of one size (c->attn_lanes, as
 * the fast attention: the kernel spreads a row's blocks over a cluster of a subgroup's lanes,
 * which must all run) with shuffles, and every part of the output is Q8_0 in rows of an even
 * count of blocks at word offsets (the kernel's loads stay within a row), at most OUT_XB_MAX
 * blocks a lane; else 0 (the 8-bit path: quant.comp and matvec.comp). The cluster: the fewest
 * lanes' slots for a row's blocks (idle lanes the fewest), the most lanes of those (the fewest
 * blocks a lane): Gemma 3's 20 blocks a row 8 lanes of 3 (SmolLM2's 18 too), 16 blocks 16 of 1
 * on a GPU's subgroups of 32 */
#define OUT_XB_MAX 4u
/* P_OUTFAST8's x: FAST_ROWS rows of at most this many blocks in shared memory (34 KiB) */
#define OUT_XS_BLOCKS 64u
static uint32_t outfast_blocks(const gt_vk_ctx *c, const gt_vk_fwd *fw, uint32_t *cl) {
    *cl = 0;
    if (!c->fast || c->attn_lanes < 8 || !c->sg_shuffle || fw->n_out < 1) return 0;
    for (int32_t i = 0; i < fw->n_out; i++) {
        const wref *w = &fw->out[i];
        if (w->type != GT_TYPE_Q8_0 || w->n_in % 64 || w->off % 4) return 0;
    }
    const uint32_t nb = fw->out[0].n_in / 32;
    uint32_t xb = 0;
    for (uint32_t l = 1; l <= c->attn_lanes && c->attn_lanes % l == 0; l *= 2) {
        const uint32_t k = (nb + l - 1) / l;
        if (k <= OUT_XB_MAX && (!xb || l * k <= *cl * xb)) {
            xb = k;
            *cl = l;
        }
    }
    return xb;
}

/* attnfast.comp's MAXP (the value pairs of a head a lane holds: the head's pairs over the
 * subgroup size) where GEIST_DEVICE_FAST's attention can run: full subgroups of a size the
 * device promises (c->attn_lanes: 8 lanes or more, so its shared memory's 16 subgroups' heads
 * hold them), heads of at most 256 values in pairs (fresh_pass's heads); else 0 */
static uint32_t fast_attn_maxp(const gt_vk_ctx *c, const gt_config *cf) {
    const uint32_t hd = (uint32_t)(cf->head_dim_k > cf->head_dim_v ? cf->head_dim_k : cf->head_dim_v);
    if (!c->fast || c->attn_lanes < 8 || hd > 256 || cf->head_dim_k % 2 || cf->head_dim_v % 2)
        return 0;
    return (hd / 2 + c->attn_lanes - 1) / c->attn_lanes;
}

/* The query heads a grouped attention workgroup takes (attn_body.glsl's GSZ): the most of 4, 3
 * or 2 that divides the query heads each KV head serves, where the heads fit its tiles (at most
 * 256 values: qs holds 4 of them); 1 (one workgroup per query head) otherwise or with
 * GEIST_DEVICE_ATTN_PER_HEAD. */
static uint32_t group_of(const gt_config *cf, const gt_vk_ctx *c) {
    if (c->attn_per_head || cf->n_head_kv < 1 || cf->n_head % cf->n_head_kv ||
        cf->head_dim_k > 256 || cf->head_dim_v > 256)
        return 1;
    const uint32_t per_kv = (uint32_t)(cf->n_head / cf->n_head_kv);
    for (uint32_t gsz = GROUP_MAX; gsz > 1; gsz--)
        if (per_kv % gsz == 0) return gsz;
    return 1;
}

/* Whether the device's fma() rounds once, for exact.glsl's FMA_EXACT: fmaprobe.comp's
 * fma(x, y, -(x * y)) over pairs of random signs, mantissas and exponents against the host's
 * fmaf (the product's exact rounding error), every one equal. GLSL lets a driver multiply and
 * add instead (llvmpipe does: 0 came back), so anything else, or any failure here, says no and
 * the shaders keep their exact emulation. */
static bool probe_fused_fma(gt_vk_model *vm) {
    enum { N = 256 };
    gt_vk_ctx *c = vm->ctx;
    vbuf b;
    gt_err e = {0};
    if (vbuf_make(c, 2 * N * sizeof(float), VB_READBACK, &b, NULL, "the fma probe", &e))
        return false;
    float *v = b.map, x[N], y[N];
    uint32_t r = 0x9E3779B9u;
    for (int i = 0; i < 2 * N; i++) {
        r = r * 1664525u + 1013904223u;
        const float m = 1.0f + (float)(r >> 9) * 0x1.0p-23f; /* every mantissa bit random */
        v[i] = ldexpf((r >> 31) ? -m : m, (int)((r >> 1) % 17u) - 8);
    }
    for (int i = 0; i < N; i++) x[i] = v[2 * i], y[i] = v[2 * i + 1];
    const uint32_t slot = 0, n = N, groups = N / 64;
    const void *pcs[1] = {&n};
    gt_vk_kernel k;
    bool fused = gt_vk_kernel_make(c, "fmaprobe", 1, &slot, &b.buf, sizeof n, NULL, &k, &e) ==
                     GEIST_OK &&
                 gt_vk_kernel_run(&k, 1, pcs, &groups, &e) == GEIST_OK;
    for (int i = 0; i < N && fused; i++) {
        const float p = x[i] * y[i], want = fmaf(x[i], y[i], -p);
        fused = memcmp(&v[2 * i], &want, sizeof want) == 0;
    }
    gt_vk_kernel_free(&k);
    vbuf_free(c, &b, NULL);
    return fused;
}

/* pipelines, command pool, fence: at the first session */
static geist_status make_pipelines(gt_vk_model *vm, gt_err *err) {
    gt_vk_fwd *fw = vm->fwd;
    gt_vk_ctx *c = vm->ctx;
    if (fw->pipelines) return GEIST_OK;
    if (!fw->norms.buf) {
        geist_status st = vbuf_make(c, fw->n_norm * sizeof(float), VB_UPLOAD, &fw->norms,
                                    &vm->memory.device_local, "the norm weights", err);
        if (st) return st;
        memcpy(fw->norms.map, fw->norms_host, fw->n_norm * sizeof(float));
    }
    const VkPhysicalDeviceLimits *dl = &c->props.limits;
    if (dl->maxPerStageDescriptorStorageBuffers < N_BIND ||
        dl->maxDescriptorSetStorageBuffers < N_BIND)
        return gt_fail(err, GEIST_ERR_UNSUPPORTED, "vulkan: %s binds at most %u storage buffers "
                       "a shader stage; geist's kernels take %u", c->props.deviceName,
                       (unsigned)dl->maxPerStageDescriptorStorageBuffers, (unsigned)N_BIND);
    VkDescriptorSetLayoutBinding b[N_BIND];
    for (uint32_t i = 0; i < N_BIND; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    const VkDescriptorSetLayoutCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = N_BIND,
        .pBindings = b};
    const VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0,
                                     .size = 128};
    if (c->f.CreateDescriptorSetLayout(c->dev, &dci, NULL, &fw->dsl) != VK_SUCCESS) {
        fw->dsl = VK_NULL_HANDLE;
        return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot create a descriptor set layout");
    }
    const VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                             .setLayoutCount = 1, .pSetLayouts = &fw->dsl,
                                             .pushConstantRangeCount = 1,
                                             .pPushConstantRanges = &pcr};
    if (c->f.CreatePipelineLayout(c->dev, &plci, NULL, &fw->pl) != VK_SUCCESS) {
        fw->pl = VK_NULL_HANDLE;
        return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot create a pipeline layout");
    }
    /* matmul.comp only where the device has its shared memory (MM_SHARED) and 128 lanes */
    const VkPhysicalDeviceLimits *lim = &c->props.limits;
    fw->mm = lim->maxComputeSharedMemorySize >= MM_SHARED && lim->maxComputeWorkGroupInvocations >= 128;
    fw->wide = c->props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU;
    fw->spread_below = fw->wide ? c->compute_units : 0;
    fw->attn_group = group_of(&vm->model->cfg, c);
    fw->fma = probe_fused_fma(vm);
    fw->stats.fused_fma = fw->fma;
#ifdef GEIST_VK_CLOCK
    geist_status cst = gt_vk_clock_init(c, &fw->clk, err);
    if (cst) return cst;
#endif
    const uint32_t maxp = fast_attn_maxp(c, &vm->model->cfg);
    fw->out_xb = outfast_blocks(c, fw, &fw->out_cl);
    bool post_norms = false; /* a layer with a post-norm (Gemma 3): P_MVFAST_PEND's models */
    for (int32_t il = 0; il < vm->model->cfg.n_layer; il++)
        post_norms |= fw->lr[il].post_attn != NO_NORM || fw->lr[il].post_ffn != NO_NORM;
    bool has_type[6] = {false}; /* the layers' weight types among k_mvt_types */
    for (int32_t i = 0; i < vm->model->cfg.n_layer * W_PER_LAYER; i++)
        for (int t = 0; t < 6; t++) has_type[t] |= fw->lw[i].type == k_mvt_types[t];
    /* MVT_RAW's rows: the longest of O's and down's x that stage (runs of 4 in units of 8:
     * qpos); a longer one keeps a row a workgroup (mvt_block) */
    fw->xn_raw = 0;
    for (int32_t il = 0; il < vm->model->cfg.n_layer; il++)
        for (int k = 0; k < 2; k++) {
            const uint32_t n_in = fw->lw[il * W_PER_LAYER + (k ? W_DOWN : W_O)].n_in;
            if (n_in > fw->xn_raw && n_in <= PEND_MAX && n_in % 8 == 0) fw->xn_raw = n_in;
        }
    for (int p = 0; p < P_COUNT; p++) {
        /* a GPU groups only a prompt's rows (rec_attn): never split (at most SPLIT_ROWS rows)
         * nor fresh (one row a session), so of the grouped kernels only P_ATTN_G is made there */
        const bool grouped = p >= P_ATTN_G && p <= P_ATTN_PART_FRESH_G;
        const int kind = pipe_kind(p);
        if (p >= P_MVT && (!fw->pipe[kind] || !has_type[mvt_type(p)]))
            continue; /* made after the generic one of its kind, for the types present */
        /* blocks of x not normed: blocks only, where O's and down's rows stage */
        const bool raw = p >= P_MVT && mvt_var(p) == MVT_RAW;
        if (raw && (mvt_mode(p) < 2 || fw->xn_raw == 0)) continue;
        /* blocks of rows: with subgroup sums (mvfast.comp's norm of a block), x staged */
        const uint32_t tt = p >= P_MVT && mvt_mode(p) > 1 ? 1u << (mvt_mode(p) - 1) : 1u;
        const uint32_t dm = (uint32_t)vm->model->cfg.d_model, xn = raw ? fw->xn_raw : dm;
        const uint32_t tt_shared = mvt_shared(xn, tt, kind == P_MVFAST_PEND);
        if (tt > 1 && (c->subgroup_min < 8 || xn > PEND_MAX || xn % 8 || tt_shared > MVT_SHARED ||
                       tt_shared > lim->maxComputeSharedMemorySize))
            continue;
        if (((p == P_MATMUL || p == P_MATMUL16) && !fw->mm) || (p == P_MVFAST && !c->fast) ||
            (p == P_MVFAST_PEND &&
             (!c->fast || !post_norms || (uint32_t)vm->model->cfg.d_model > PEND_MAX ||
              vm->model->cfg.d_model % 8)) || /* (its x staged: XN below) */
            (p == P_ATTN_FAST && maxp == 0) ||
            (p == P_NORM_FAST && (!c->fast || c->subgroup_min < 8)) ||
            ((p == P_OUTFAST || p == P_OUTFAST8) && fw->out_xb == 0) ||
            (p == P_OUTFAST8 && fw->out[0].n_in > 32 * OUT_XS_BLOCKS) ||
            ((p == P_OUTFAST || p == P_OUTFAST8) &&
             (p == P_OUTFAST8 ? FAST_ROWS : 1u) * 17 * 4 * (fw->out[0].n_in / 32) >
                 lim->maxComputeSharedMemorySize) ||
            (grouped && (fw->attn_group < 2 || (fw->wide && p != P_ATTN_G))))
            continue; /* left VK_NULL_HANDLE: never dispatched */
        /* the kernel, or its integer-dot-product build where the device takes those */
        char want[32];
        const bool mvf = kind == P_MVFAST || kind == P_MVFAST_PEND;
        /* mvfast.comp's subgroup sums where the device has them (its _sg build) */
        snprintf(want, sizeof want, "%s%s", k_pipe_names[kind],
                 mvf ? (c->subgroup_min >= 8 ? "_sg" : "") : c->int_dot ? "_idot" : "");
        const gt_vk_spv *s = gt_vk_spv_find(want);
        if (!s && tt > 1) continue; /* a block's norm takes the _sg build's subgroup sums */
        if (!s) s = gt_vk_spv_find(k_pipe_names[kind]);
        if (!s) return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: shader %s is not built in", k_pipe_names[kind]);
        /* specialization constants: every kernel's FMA_EXACT (exact.glsl; an id a kernel does
         * not declare is ignored); matvec.comp's ROWS8 (1 or 2) and NORM_EPS (the model's
         * RMSNorm epsilon), matmul.comp's MR and MT (16-row tiles), the grouped attention's GSZ */
        struct { uint32_t c0, c1; VkBool32 fma; uint32_t c2, c3, c4, c5, c6; } sv = {
            0u, 0u, fw->fma ? VK_TRUE : VK_FALSE, 255u, 0u, 32u * MVF_ROWS, 1u /* SPREAD */, tt};
        const VkSpecializationMapEntry sme[8] = {{14, 8, 4}, {0, 0, 4}, {1, 4, 4}, {2, 12, 4},
                                                 {3, 16, 4}, {4, 20, 4}, {5, 24, 4}, {6, 28, 4}};
        uint32_t n_sme = 1;
        if (p == P_MATVEC8 || p == P_MATVEC2 || mvf) {
            /* mvfast.comp's constant 0 is PEND (its staged residual's floats), not ROWS8; its 2
             * the weights' type (255: any), its 3 XN (a normed product's x staged: d_model) */
            sv.c0 = p == P_MATVEC2 ? 2u
                    : kind == P_MVFAST_PEND ? (uint32_t)vm->model->cfg.d_model
                    : mvf ? 0u
                          : 1u;
            memcpy(&sv.c1, &vm->model->cfg.eps, 4);
            if (p >= P_MVT) sv.c2 = k_mvt_types[mvt_type(p)];
            if (p >= P_MVT && mvt_mode(p) == 0) sv.c5 = 0u; /* passes of one row */
            if (xn <= PEND_MAX && xn % 8 == 0) sv.c3 = xn; /* (runs of 4 in units of 8) */
            n_sme = mvf ? 8 : 3;
        } else if (p == P_MATMUL16) {
            sv.c0 = 2u, sv.c1 = 1u, n_sme = 3;
        } else if (grouped) {
            sv.c0 = fw->attn_group, n_sme = 2;
        } else if (p == P_ATTN_FAST) {
            sv.c0 = maxp, n_sme = 2;
        } else if (p == P_OUTFAST || p == P_OUTFAST8) { /* its TOK, XB, NB and CL */
            sv.c0 = p == P_OUTFAST ? 1u : FAST_ROWS, sv.c1 = fw->out_xb;
            sv.c2 = fw->out[0].n_in / 32, sv.c3 = fw->out_cl;
            n_sme = 5;
        }
        const VkSpecializationInfo spec = {n_sme, sme, sizeof sv, &sv};
        /* attnfast.comp and outfast.comp in full subgroups of attn_lanes, where it takes asking */
        const bool full = p == P_ATTN_FAST || p == P_OUTFAST || p == P_OUTFAST8;
        const uint32_t lanes = full && c->attn_lanes_required ? c->attn_lanes : 0;
        const VkResult r = gt_vk_pipeline_make(c, s, fw->pl, &spec, lanes, &fw->pipe[p]);
        /* the fast mode's attention and norms are optional: where a driver cannot build them
         * (a required subgroup size its compiler refuses, say) the exact ones run (pipe stays
         * VK_NULL_HANDLE, which run_pass and rec_norm check; geist bench says which ran); so is
         * P_MVFAST_PEND (rec_residual then runs each post-norm as its own dispatch) */
        if (r != VK_SUCCESS && (p == P_ATTN_FAST || p == P_NORM_FAST || kind == P_MVFAST_PEND ||
                                p == P_OUTFAST || p == P_OUTFAST8 || p >= P_MVT))
            continue;
        if (r != VK_SUCCESS)
            return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot build pipeline %s (%d)",
                           s->name, (int)r);
    }
    const VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                         .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                         .queueFamilyIndex = c->queue_family};
    if (c->f.CreateCommandPool(c->dev, &pci, NULL, &fw->cpool) != VK_SUCCESS) {
        fw->cpool = VK_NULL_HANDLE;
        return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot create a command pool");
    }
    const VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                             .commandPool = fw->cpool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                             .commandBufferCount = 1};
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (c->f.AllocateCommandBuffers(c->dev, &cai, &fw->cb) != VK_SUCCESS)
        return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot allocate a command buffer");
    if (c->f.CreateFence(c->dev, &fci, NULL, &fw->fence) != VK_SUCCESS) {
        fw->fence = VK_NULL_HANDLE;
        return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: cannot create a fence");
    }
    geist_status st = make_dpool(vm, DS_CAP, err);
    if (st) return st;
    /* timestamps around each pass, where the queue family keeps them (GPU time in the stats) */
    VkQueueFamilyProperties q[16];
    uint32_t nq = 16;
    c->f.GetPhysicalDeviceQueueFamilyProperties(c->phys, &nq, q);
    const uint32_t bits = c->queue_family < nq ? q[c->queue_family].timestampValidBits : 0;
    if (bits > 0 && c->props.limits.timestampPeriod > 0.0f) {
        const VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                           .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = 2};
        if (c->f.CreateQueryPool(c->dev, &qci, NULL, &fw->qp) != VK_SUCCESS) fw->qp = VK_NULL_HANDLE;
        fw->qp_cap = fw->qp ? 2 : 0;
        fw->ts_ns = c->props.limits.timestampPeriod;
        fw->ts_mask = bits >= 64 ? UINT64_MAX : (1ull << bits) - 1;
    }
    fw->pipelines = true;
    return GEIST_OK;
}

/* Drops the recorded pass and every cached descriptor set: before a buffer they bind is freed
 * (scratch growth, a session's KV), since a later buffer may get the same handle. Under the lock;
 * no pass is in flight then (each waits for its fence). */
static void forget_recordings(gt_vk_model *vm) {
    gt_vk_fwd *fw = vm->fwd;
    fw->cb_valid = false;
    fw->n_last = 0;
    if (fw->ds_used) vm->ctx->f.ResetDescriptorPool(vm->ctx->dev, fw->dpool, 0);
    fw->n_ds = fw->ds_used = 0;
    if (fw->ds_hash) memset(fw->ds_hash, 0, fw->ds_hcap * sizeof *fw->ds_hash);
}

/* Drops the recorded pass and the cached sets that bind buf, before buf is freed (a session's
 * KV): the others stay (a reply's new session then makes only the sets of its own KV), the
 * dropped ones stay allocated, unused, until the pool fills (run_pass resets it). Under the
 * lock, no pass in flight. */
static void forget_buffer(gt_vk_model *vm, VkBuffer buf) {
    gt_vk_fwd *fw = vm->fwd;
    fw->cb_valid = false;
    fw->n_last = 0;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < fw->n_ds; i++) {
        bool binds = false;
        for (uint32_t j = 0; j < N_BIND; j++) binds = binds || fw->ds[i].b[j] == buf;
        if (!binds) fw->ds[kept++] = fw->ds[i];
    }
    if (kept == fw->n_ds) return;
    fw->n_ds = kept;
    memset(fw->ds_hash, 0, fw->ds_hcap * sizeof *fw->ds_hash);
    for (uint32_t i = 0; i < kept; i++) ds_index(fw, i);
}

/* How a session's rows of a pass attend over n_ctx positions at most (its last row's, within
 * the layer's window): in chunks of ch positions (the engine's attn_chunk times the least k that
 * keeps them at most MAX_SPLIT), n of them; n = 1 (attn.comp, cpu_scalar's order) when the
 * engine never splits, the rows are more than SPLIT_ROWS, they fill one chunk, a chunk would
 * exceed SPLIT_SH or the partials hold fewer chunks (cap). */
typedef struct split {
    uint32_t ch, n;
} split;

/* n_ctx positions in chunks of base positions, grown by whole bases to keep at most MAX_SPLIT */
static split chunks_of(uint64_t base, uint32_t n_ctx) {
    const uint64_t ch = base * ((n_ctx + base * MAX_SPLIT - 1) / (base * MAX_SPLIT));
    return (split){(uint32_t)ch, (uint32_t)((n_ctx + ch - 1) / ch)};
}

static split split_of(const gt_vk_ctx *c, uint32_t n_rows, uint32_t n_ctx, uint32_t cap) {
    const split one = {n_ctx, 1};
    if (c->attn_chunk <= 0 || n_rows > SPLIT_ROWS || n_ctx <= (uint32_t)c->attn_chunk) return one;
    const split s = chunks_of((uint64_t)c->attn_chunk, n_ctx);
    return s.ch > SPLIT_SH || s.n > cap ? one : s;
}

/* attnfast.comp's chunks of a row over n_ctx positions: the engine's attn_chunk positions each
 * (32 on a GPU: a workgroup's subgroups take them U at a time, its online softmax holding no
 * scores), grown as split_of's to keep at most MAX_SPLIT; ch 0: one chunk of them all (an engine
 * that never splits, or partials that hold fewer chunks). On the H100 (session 26) chunks of
 * 64 (twice attn_chunk, the rule of sessions 24-25) cost 22-29 % of a token with the kernel's
 * earlier loads, and 3-4 % against 32 with today's; chunks of 16 were even with 32. */
static split fast_split_of(const gt_vk_ctx *c, uint32_t n_ctx, uint32_t cap) {
    const split one = {0, 1};
    if (c->attn_chunk <= 0 || n_ctx <= (uint32_t)c->attn_chunk) return one;
    const split s = chunks_of((uint64_t)c->attn_chunk, n_ctx);
    return s.n > cap ? one : s;
}

/* scratch for `rows` rows attending over up to `ctx` positions */
static geist_status grow_scratch(gt_vk_model *vm, int32_t rows, int32_t ctx, gt_err *err) {
    gt_vk_fwd *fw = vm->fwd;
    if (rows <= fw->cap_rows && ctx <= fw->cap_ctx) return GEIST_OK;
    if (rows < fw->cap_rows) rows = fw->cap_rows;
    /* the attention scores grow with the context: by doubling (at least 256 positions), not a
     * position at a time (each growth reallocates the scratch and drops the recordings) */
    const int32_t asked = ctx;
    if (ctx > fw->cap_ctx && ctx < 2 * fw->cap_ctx) ctx = 2 * fw->cap_ctx;
    if (asked <= (int32_t)SPLIT_SH && ctx > (int32_t)SPLIT_SH) ctx = (int32_t)SPLIT_SH; /* sc: 16 B */
    if (ctx < 256) ctx = 256;
    if (ctx < fw->cap_ctx) ctx = fw->cap_ctx;
    gt_vk_ctx *c = vm->ctx;
    const gt_config *cf = &vm->model->cfg;
    uint64_t *acct = &vm->memory.device_local;
    vbuf *bufs[] = {&fw->x, &fw->x2, &fw->xn, &fw->q, &fw->k, &fw->v, &fw->att, &fw->o, &fw->gate,
                    &fw->up, &fw->aq, &fw->ad, &fw->sc, &fw->in, &fw->lg, &fw->lgh, &fw->ap,
                    &fw->cnt, &fw->amx, &fw->idh};
    forget_recordings(vm); /* they bind the buffers remade here */
    fw->cap_rows = fw->cap_ctx = 0;
    fw->cap_split = 0;
    /* the partials' chunks per (row, head): every split of ctx positions or fewer (split_of's
     * n <= ctx / attn_chunk rounded up, <= MAX_SPLIT) */
    uint32_t n_split = 0;
    if (c->attn_chunk > 0 && ctx > c->attn_chunk) {
        n_split = (uint32_t)((ctx + c->attn_chunk - 1) / c->attn_chunk);
        if (n_split > MAX_SPLIT) n_split = MAX_SPLIT;
    }
    /* R: the activations' rows; NR: the rows of what serves only the first NARROW_ROWS rows
     * of a pass, or its LOGIT_ROWS rows wanting logits (pass_take) */
    const uint64_t R = (uint64_t)rows, NR = NARROW_ROWS, LR = LOGIT_ROWS, F = sizeof(float);
    const uint64_t d = (uint64_t)cf->d_model, nff = (uint64_t)cf->n_ff;
    const uint64_t qd = (uint64_t)cf->n_head * (uint64_t)cf->head_dim_k;
    const uint64_t kd = (uint64_t)cf->n_head_kv * (uint64_t)cf->head_dim_k;
    const uint64_t vd = (uint64_t)cf->n_head_kv * (uint64_t)cf->head_dim_v;
    const uint64_t od = (uint64_t)cf->n_head * (uint64_t)cf->head_dim_v;
    uint64_t wide = d > nff ? d : nff;
    if (od > wide) wide = od;
    const struct { vbuf *b; uint64_t bytes; int kind; } want[] = {
        {&fw->x, R * d * F, VB_DEVICE},     {&fw->xn, R * d * F, VB_DEVICE},
        /* the residual's second buffer: FAST_ROWS rows (a post-norm is deferred only in fast
         * passes), where P_MVFAST_PEND was made (the pipelines come before the scratch) */
        {&fw->x2, fw->pipe[P_MVFAST_PEND] ? FAST_ROWS * d * F : 16, VB_DEVICE},
        {&fw->q, R * qd * F, VB_DEVICE},    {&fw->k, R * kd * F, VB_DEVICE},
        {&fw->v, R * vd * F, VB_DEVICE},    {&fw->att, R * od * F, VB_DEVICE},
        {&fw->o, R * d * F, VB_DEVICE},
        {&fw->gate, 2 * R * nff * F, VB_DEVICE}, /* [gate | up] rows when one product makes both */
        {&fw->up, R * nff * F, VB_DEVICE},
        {&fw->aq, R * wide, VB_DEVICE},     {&fw->ad, R * (wide / 32 + 1) * F, VB_DEVICE},
        /* the scores of rows over more positions than attn.comp's shared memory holds */
        {&fw->sc, ctx > (int32_t)SPLIT_SH ? NR * (uint64_t)cf->n_head * (uint64_t)ctx * F : 16, VB_DEVICE},
        {&fw->in, (R * 5 + 2 * R * (uint64_t)cf->n_rot) * 4, VB_UPLOAD}, /* two rotary tables */
        {&fw->lg, LR * (uint64_t)cf->n_vocab * F, VB_DEVICE},
        {&fw->lgh, LR * (uint64_t)cf->n_vocab * F, VB_READBACK},
        {&fw->ap, n_split > 1 ? NR * (uint64_t)cf->n_head * n_split *
                                    ((uint64_t)cf->head_dim_v + 2) * F : 16, VB_DEVICE},
        {&fw->cnt, NR * (uint64_t)cf->n_head * 4, VB_DEVICE},
        {&fw->amx, LR * argmax_parts((uint32_t)cf->n_vocab, NULL) * 2 * 4, VB_DEVICE},
        {&fw->idh, LR * 4, VB_READBACK},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        /* a buffer whose size stays is kept (the logits' rows when only the activations' rows
         * grow: Gemma 3's are 134 MB, remade in the middle of the first long prompt) */
        const uint64_t bytes = want[i].bytes < 16 ? 16 : want[i].bytes; /* vbuf_make's least */
        if (want[i].b->buf && bytes <= want[i].b->size) continue;
        vbuf_free(c, want[i].b, acct);
        geist_status st = vbuf_make(c, want[i].bytes, want[i].kind, want[i].b, acct,
                                    "the forward pass's scratch", err);
        if (st) {
            for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; j++) vbuf_free(c, bufs[j], acct);
            return st;
        }
    }
    fw->cap_rows = rows;
    fw->cap_ctx = ctx;
    fw->cap_split = n_split > 1 ? n_split : 0;
    return GEIST_OK;
}

/* ---- KV ------------------------------------------------------------------------------------ */

geist_status gt_vk_kv_alloc(gt_vk_model *vm, const gt_dev_kv_desc *d, gt_dev_kv **out, gt_err *err) {
    if (!vm->fwd) return gt_fail(err, GEIST_ERR_UNSUPPORTED, "%s", vm->refuse);
    const gt_config *cf = &vm->model->cfg;
    if (d->kv_mode != GEIST_KV_F32 && d->kv_mode != GEIST_KV_F16 &&
        (d->kv_mode != GEIST_KV_INT8 || cf->head_dim_k % 4 || cf->head_dim_v % 4))
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "vulkan: KV mode %d is not supported on the device (supported: 0 = F32, "
                       "1 = F16, 2 = INT8)", (int)d->kv_mode);
    if (d->n_layer != cf->n_layer || d->n_prefix < 0 || d->n_prefix >= d->max_seq_len)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "vulkan: a KV descriptor of %d layers "
                       "after %d prefix positions", (int)d->n_layer, (int)d->n_prefix);
    for (int32_t il = 0; il < d->n_layer; il++)
        if (d->rows[il] < 1 || d->rows[il] > d->max_seq_len - d->n_prefix)
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "vulkan: layer %d of a KV descriptor "
                           "holds %d rows", (int)il, (int)d->rows[il]);
    const gt_config *c = &vm->model->cfg;
    /* the pipelines, and the scratch for the session's positions (up to attn.comp's shared
     * scores; longer contexts grow it by doubling when they come): at its creation, not in
     * its first prefill (a growth frees the scratch and drops every recording and set) */
    pthread_mutex_lock(&vm->fwd->lock);
    geist_status st = make_pipelines(vm, err);
    if (!st) st = grow_scratch(vm, NARROW_ROWS, d->max_seq_len < (int32_t)SPLIT_SH ? d->max_seq_len
                                                                              : (int32_t)SPLIT_SH, err);
    pthread_mutex_unlock(&vm->fwd->lock);
    if (st) return st;
    gt_dev_kv *kv = calloc(1, sizeof *kv);
    if (kv) kv->rows = calloc((size_t)d->n_layer, sizeof *kv->rows);
    if (kv) kv->at = calloc((size_t)d->n_layer, sizeof *kv->at);
    if (!kv || !kv->rows || !kv->at) {
        if (kv) free(kv->rows);
        free(kv);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (vulkan KV)");
    }
    kv->vm = vm;
    kv->mode = d->kv_mode;
    kv->max_seq = d->max_seq_len;
    kv->n_prefix = d->n_prefix;
    kv->n_layer = d->n_layer;
    kv->kd = (uint32_t)(c->n_head_kv * c->head_dim_k);
    kv->vd = (uint32_t)(c->n_head_kv * c->head_dim_v);
    const uint32_t per = d->kv_mode == GEIST_KV_F16 ? 2 : 4;
    if (d->kv_mode == GEIST_KV_INT8) { /* per KV head: f32 scale + head_dim codes */
        kv->krow = (uint32_t)c->n_head_kv * (4u + (uint32_t)c->head_dim_k);
        kv->vrow = (uint32_t)c->n_head_kv * (4u + (uint32_t)c->head_dim_v);
    } else {
        kv->krow = kv->kd * per;
        kv->vrow = kv->vd * per;
    }
    /* per layer its rows (session/kv.c's layout: a ring on sliding layers), then the stage of
     * one pass's rows when some layer is a ring (GT_KV_STAGED's rows, attn.comp) */
    uint64_t words = 0;
    bool ring = false;
    for (int32_t il = 0; il < d->n_layer; il++) {
        kv->rows[il] = d->rows[il];
        kv->at[il] = words;
        words += (uint64_t)d->rows[il] * (kv->krow + kv->vrow) / 4;
        ring = ring || d->rows[il] < d->max_seq_len - d->n_prefix;
        if (il == 0 || d->rows[il] < kv->ring_rows) kv->ring_rows = d->rows[il];
    }
    if (ring) {
        kv->stage_at = words;
        words += (uint64_t)NARROW_ROWS * (kv->krow + kv->vrow) / 4;
    }
    const uint64_t bytes = words * 4;
    if (bytes > vm->ctx->probe.max_buffer || words > UINT32_MAX) {
        free(kv->rows);
        free(kv->at);
        free(kv);
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "vulkan: a KV cache of %.1f MiB (max_seq_len %d) exceeds the device's "
                       "largest storage buffer (%.1f MiB); use a smaller max_seq_len",
                       bytes / 1048576.0, (int)d->max_seq_len,
                       vm->ctx->probe.max_buffer / 1048576.0);
    }
    st = vbuf_make(vm->ctx, bytes, VB_DEVICE, &kv->b, NULL, "the session's KV cache", err);
    if (st) {
        free(kv->rows);
        free(kv->at);
        free(kv);
        return st;
    }
    /* the session's logits in host-cached memory the device writes, where the device has it
     * mapped: else (none, or no room) the session keeps its own and a pass's logits are
     * copied there on the host as before */
    gt_err lerr = {0};
    if (vbuf_make(vm->ctx, (uint64_t)c->n_vocab * sizeof(float), VB_READBACK, &kv->lgo, NULL,
                  "the session's logits", &lerr) == GEIST_OK && !kv->lgo.map)
        vbuf_free(vm->ctx, &kv->lgo, NULL);
    *out = kv;
    return GEIST_OK;
}

float *gt_vk_kv_logits(gt_dev_kv *kv) { return kv ? kv->lgo.map : NULL; }

void gt_vk_kv_free(gt_dev_kv *kv) {
    if (!kv) return;
    pthread_mutex_lock(&kv->vm->fwd->lock);
    if (kv->b.buf) forget_buffer(kv->vm, kv->b.buf);
    if (kv->lgo.buf) forget_buffer(kv->vm, kv->lgo.buf);
    vbuf_free(kv->vm->ctx, &kv->b, NULL);
    vbuf_free(kv->vm->ctx, &kv->lgo, NULL);
    pthread_mutex_unlock(&kv->vm->fwd->lock);
    free(kv->rows);
    free(kv->at);
    free(kv);
}

uint64_t gt_vk_kv_bytes(const gt_dev_kv *kv) { return kv ? kv->b.size : 0; }

geist_status gt_vk_kv_io(gt_dev_kv *kv, int32_t layer, int32_t row0, int32_t n, void *k, void *v,
                         bool write, gt_err *err) {
    if (layer < 0 || layer >= kv->n_layer || row0 < 0 || n < 0 || row0 + n > kv->rows[layer])
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "vulkan: KV rows out of range");
    if (!kv->b.map)
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "vulkan: this device's KV memory is not host-visible: snapshots, restore "
                       "and fork of device sessions are not supported on it yet");
    uint8_t *base = (uint8_t *)kv->b.map + (size_t)kv->at[layer] * 4;
    uint8_t *dk = base + (size_t)row0 * kv->krow;
    uint8_t *dv = base + (size_t)kv->rows[layer] * kv->krow + (size_t)row0 * kv->vrow;
    pthread_mutex_lock(&kv->vm->fwd->lock); /* no step writes while we copy */
    if (write) {
        memcpy(dk, k, (size_t)n * kv->krow);
        memcpy(dv, v, (size_t)n * kv->vrow);
    } else {
        memcpy(k, dk, (size_t)n * kv->krow);
        memcpy(v, dv, (size_t)n * kv->vrow);
    }
    pthread_mutex_unlock(&kv->vm->fwd->lock);
    return GEIST_OK;
}

/* ---- recording ----------------------------------------------------------------------------- */

typedef struct rec {
    gt_vk_ctx *c;
    gt_vk_fwd *fw;
    uint32_t n; /* commands planned (fw->plan) */
    bool failed;
    VkBuffer aq_src; /* whose 8-bit rows the activation scratch holds (format aq_fmt) */
    int aq_fmt;
    /* hazards since the last barrier: buffers written, buffers read (placeholders excluded) */
    VkBuffer wr[2 * N_BIND * 4], rd[8 * N_BIND * 4];
    uint32_t n_wr, n_rd;
    bool force;    /* a barrier before the next dispatch (after one of unknown writes) */
    bool disjoint; /* the dispatches write disjoint ranges of what they share (per session) */
    bool mm;       /* fw->mm: longer steps' quantized products take matmul.comp */
    bool wide;     /* fw->wide: decode's blocks-of-32 products take P_MATVEC2 */
    uint32_t spread_below; /* fw->spread_below */
    bool fast;     /* the pass's quantized products take P_MVFAST (rec_mvfast) */
    uint32_t n_rows; /* the pass's rows (a fast pass's: one, or a row a session) */
    bool fast_attn; /* its rows attend in P_ATTN_FAST (run_pass's fast_attn, rec_attn) */
    uint32_t role; /* geist_device_role of the dispatches planned now */
    /* the groups of outputs of the products planned now side by side (Q, K and V: no barrier
     * between them), for mvt_block's fill; 0: each product's own */
    uint32_t fill_groups;
    /* the residual stream's buffer (fw->x, or fw->x2 after a deferred post-norm was taken) and
     * a post-norm deferred (rec_residual's defer): its vector's offset in fw->norms (else
     * NO_NORM), the product it normalizes in fw->o; pend_write: the next product taking it
     * writes x + that into the other buffer (the first of Q, K, V) */
    VkBuffer res;
    uint32_t pend;
    bool pend_write;
} rec;

/* The bindings each kernel writes (the others it only reads): a barrier goes before a dispatch
 * only when it reads or writes what an earlier dispatch since the last barrier wrote, or writes
 * what one read (independent products such as Q, K and V share no barrier). 0: unknown, a
 * barrier before and after. */
#define WB(i) (1u << (i))
static const uint32_t k_writes[P_COUNT] = {
    [P_EMBED] = WB(3), [P_QUANT] = WB(4) | WB(5), [P_MATVEC] = WB(3), [P_RMSNORM] = WB(3),
    [P_ROPE] = WB(2) | WB(3), [P_KVSTORE] = WB(6), [P_ATTN] = WB(3) | WB(5), [P_ACT] = WB(3),
    [P_MATVEC8] = WB(3), [P_ATTN_PART] = WB(3) | WB(4) | WB(5),
    [P_MATMUL] = WB(3), [P_MATVEC2] = WB(3), [P_MATMUL16] = WB(3),
    [P_ATTN_FRESH] = WB(3) | WB(5) | WB(10) | WB(11) | WB(12),
    [P_ATTN_PART_FRESH] = WB(3) | WB(4) | WB(5) | WB(10) | WB(11) | WB(12),
    [P_QUANT_FUSED] = WB(4) | WB(5), [P_ATTN_G] = WB(3) | WB(5),
    [P_ATTN_PART_G] = WB(3) | WB(4) | WB(5),
    [P_ATTN_FRESH_G] = WB(3) | WB(5) | WB(10) | WB(11) | WB(12),
    [P_ATTN_PART_FRESH_G] = WB(3) | WB(4) | WB(5) | WB(10) | WB(11) | WB(12),
    [P_ARGMAX] = WB(3) | WB(4), [P_MVFAST] = WB(3), [P_MVFAST_PEND] = WB(3) | WB(7),
    [P_ATTN_FAST] = WB(3) | WB(4) | WB(5) | WB(10) | WB(11) | WB(12),
    [P_NORM_FAST] = WB(3), [P_OUTFAST] = WB(3), [P_OUTFAST8] = WB(3)};

static bool among(const VkBuffer *set, uint32_t n, VkBuffer b) {
    for (uint32_t i = 0; i < n; i++)
        if (set[i] == b) return true;
    return false;
}

static cmd *plan_next(rec *r) {
    gt_vk_fwd *fw = r->fw;
    if (r->failed) return NULL;
    if (r->n == fw->plan_cap) {
        const uint32_t cap = fw->plan_cap ? 2 * fw->plan_cap : 512;
        cmd *p = realloc(fw->plan, cap * sizeof *p);
        if (!p) {
            r->failed = true;
            return NULL;
        }
        fw->plan = p;
        fw->plan_cap = cap;
    }
    cmd *e = &fw->plan[r->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static void dispatch(rec *r, int pipe, const VkBuffer bind[N_BIND], const void *pc, uint32_t pcs,
                     uint32_t groups) {
    if (r->failed || groups == 0) return;
    const int kind = pipe_kind(pipe);
    if (kind != P_MATVEC && kind != P_MATVEC8 && kind != P_MATVEC2 && kind != P_MATMUL &&
        kind != P_MATMUL16 && kind != P_QUANT && kind != P_QUANT_FUSED && kind != P_MVFAST &&
        kind != P_MVFAST_PEND && kind != P_OUTFAST && kind != P_OUTFAST8)
        r->aq_src = VK_NULL_HANDLE; /* may rewrite it */
    const uint32_t wmask = k_writes[kind] ? k_writes[kind] : 0xFFu;
    bool hazard = k_writes[kind] == 0 || r->force;
    for (uint32_t i = 0; i < N_BIND && !hazard; i++) {
        if (!bind[i]) continue;
        const bool written = among(r->wr, r->n_wr, bind[i]);
        hazard = (written && !(r->disjoint && (wmask & WB(i)))) ||
                 ((wmask & WB(i)) && among(r->rd, r->n_rd, bind[i]));
    }
    if (hazard || r->n_wr + N_BIND > sizeof r->wr / sizeof r->wr[0] ||
        r->n_rd + N_BIND > sizeof r->rd / sizeof r->rd[0])
        r->n_wr = r->n_rd = 0;
    cmd *e = plan_next(r);
    if (!e) return;
    e->kind = CMD_DISPATCH;
    e->pipe = (uint32_t)pipe;
    e->role = r->role;
    e->barrier = r->n > 1 && r->n_wr + r->n_rd == 0; /* the first needs none (host writes: submit) */
    e->pcs = pcs;
    memcpy(e->bind, bind, sizeof e->bind);
    memcpy(e->pc, pc, pcs);
    e->gx = groups < MAX_GROUPS_X ? groups : MAX_GROUPS_X;
    e->gy = (groups + e->gx - 1) / e->gx;
    for (uint32_t i = 0; i < N_BIND; i++) {
        if (!bind[i]) continue;
        if (wmask & WB(i)) r->wr[r->n_wr++] = bind[i];
        else r->rd[r->n_rd++] = bind[i];
    }
    r->force = k_writes[kind] == 0;
}

/* the descriptor set for these bindings (unused ones get a placeholder): cached */
static VkDescriptorSet dset_for(gt_vk_ctx *c, gt_vk_fwd *fw, const VkBuffer bind[N_BIND]) {
    for (uint32_t k = ds_slot(fw, bind); fw->ds_hash[k]; k = (k + 1) & (fw->ds_hcap - 1)) {
        const dset *d = &fw->ds[fw->ds_hash[k] - 1];
        if (memcmp(d->b, bind, sizeof d->b) == 0) return d->set;
    }
    if (fw->ds_used == fw->ds_cap) return VK_NULL_HANDLE;
    const VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                            .descriptorPool = fw->dpool, .descriptorSetCount = 1,
                                            .pSetLayouts = &fw->dsl};
    VkDescriptorSet set;
    if (c->f.AllocateDescriptorSets(c->dev, &ai, &set) != VK_SUCCESS) return VK_NULL_HANDLE;
    VkDescriptorBufferInfo bi[N_BIND];
    VkWriteDescriptorSet wr[N_BIND];
    for (uint32_t i = 0; i < N_BIND; i++) {
        bi[i] = (VkDescriptorBufferInfo){bind[i] ? bind[i] : fw->x.buf, 0, VK_WHOLE_SIZE};
#ifdef GEIST_VK_CLOCK
        if (i == 13) bi[i].buffer = fw->clk.dev;
#endif
        wr[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                       .dstSet = set, .dstBinding = i, .descriptorCount = 1,
                                       .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                       .pBufferInfo = &bi[i]};
    }
    c->f.UpdateDescriptorSets(c->dev, N_BIND, wr, 0, NULL);
    memcpy(fw->ds[fw->n_ds].b, bind, sizeof fw->ds[fw->n_ds].b);
    fw->ds[fw->n_ds].set = set;
    ds_index(fw, fw->n_ds++);
    fw->ds_used++;
    return set;
}

static void barrier(gt_vk_ctx *c, VkCommandBuffer cb, VkAccessFlags src, VkAccessFlags dst,
                    VkPipelineStageFlags from, VkPipelineStageFlags to) {
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = src,
                                .dstAccessMask = dst};
    c->f.CmdPipelineBarrier(cb, from, to, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* Profiling: a query pool of at least n timestamps (and room to read them), where the queue
 * keeps timestamps (fw->qp made); false when it cannot be made (the pass is then timed as a
 * whole). No pass is in flight (under the lock, each waits for its fence). */
static bool ensure_queries(gt_vk_ctx *c, gt_vk_fwd *fw, uint32_t n) {
    if (!fw->qp || fw->qp_cap >= n) return fw->qp != VK_NULL_HANDLE;
    const uint32_t cap = 2 * n;
    uint64_t *ts = realloc(fw->ts, cap * sizeof *ts);
    if (!ts) return false;
    fw->ts = ts;
    const VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                       .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = cap};
    VkQueryPool qp;
    if (c->f.CreateQueryPool(c->dev, &qci, NULL, &qp) != VK_SUCCESS) return false;
    c->f.DestroyQueryPool(c->dev, fw->qp, NULL);
    fw->qp = qp;
    fw->qp_cap = cap;
    return true;
}

/* the command buffer from the plan (n commands); false on a failure */
static bool record(gt_vk_ctx *c, gt_vk_fwd *fw, uint32_t n) {
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    if (c->f.ResetCommandBuffer(fw->cb, 0) != VK_SUCCESS || c->f.BeginCommandBuffer(fw->cb, &bi) != VK_SUCCESS)
        return false;
    VkCommandBuffer cb = fw->cb;
    const VkPipelineStageFlags CS = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
    const bool prof = c->profile && fw->qp_cap >= n + 1; /* ensure_queries made them */
    if (fw->qp) {
        c->f.CmdResetQueryPool(cb, fw->qp, 0, prof ? n + 1 : 2);
        c->f.CmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, fw->qp, 0);
    }
    /* the split attention's chunk counts start at 0 (its last chunk of a row sets them back) */
    bool split = false;
    for (uint32_t i = 0; i < n && !split; i++)
        split = fw->plan[i].kind == CMD_DISPATCH &&
                (fw->plan[i].pipe == P_ATTN_PART || fw->plan[i].pipe == P_ATTN_PART_FRESH ||
                 fw->plan[i].pipe == P_ATTN_PART_G || fw->plan[i].pipe == P_ATTN_PART_FRESH_G ||
                 fw->plan[i].pipe == P_ATTN_FAST);
    if (split) {
        c->f.CmdFillBuffer(cb, fw->cnt.buf, 0, VK_WHOLE_SIZE, 0);
        barrier(c, cb, VK_ACCESS_TRANSFER_WRITE_BIT,
                VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                VK_PIPELINE_STAGE_TRANSFER_BIT, CS);
    }
#ifdef GEIST_VK_CLOCK
    gt_vk_clock_begin(c, &fw->clk, cb);
#endif
    int last_pipe = -1;
    for (uint32_t i = 0; i < n; i++) {
        const cmd *e = &fw->plan[i];
        if (e->barrier) {
            barrier(c, cb, VK_ACCESS_SHADER_WRITE_BIT,
                    VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT, CS, CS);
        }
        if (e->kind == CMD_COPY_LOGITS) { /* pc: a row's bytes, the mask of rows to copy into
                                           * lgh; then pc[3] rows pc[4 + j] into bind[j] */
            VkBufferCopy bc[LOGIT_ROWS];
            uint32_t nb = 0;
            const uint64_t mask = e->pc[1] | (uint64_t)e->pc[2] << 32;
            for (uint32_t k = 0; k < LOGIT_ROWS; k++) {
                if (!(mask >> k & 1u)) continue;
                const VkDeviceSize at = (VkDeviceSize)k * e->pc[0];
                if (nb && bc[nb - 1].srcOffset + bc[nb - 1].size == at) bc[nb - 1].size += e->pc[0];
                else bc[nb++] = (VkBufferCopy){at, at, e->pc[0]};
            }
            if (nb || e->pc[3])
                barrier(c, cb, VK_ACCESS_SHADER_WRITE_BIT, VK_ACCESS_TRANSFER_READ_BIT, CS,
                        VK_PIPELINE_STAGE_TRANSFER_BIT);
            if (nb) c->f.CmdCopyBuffer(cb, fw->lg.buf, fw->lgh.buf, nb, bc);
            for (uint32_t j = 0; j < e->pc[3]; j++) { /* a session's own logits (kv->lgo) */
                const VkBufferCopy one = {(VkDeviceSize)e->pc[4 + j] * e->pc[0], 0, e->pc[0]};
                c->f.CmdCopyBuffer(cb, fw->lg.buf, e->bind[j], 1, &one);
            }
            /* the copies, and argmax.comp's ids written straight into host memory */
            barrier(c, cb, VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                    VK_ACCESS_HOST_READ_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT | CS,
                    VK_PIPELINE_STAGE_HOST_BIT);
            if (prof) c->f.CmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, fw->qp, i + 1);
            continue;
        }
        const VkDescriptorSet set = dset_for(c, fw, e->bind);
        if (!set) return false;
        if ((int)e->pipe != last_pipe)
            c->f.CmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, fw->pipe[e->pipe]);
        last_pipe = (int)e->pipe;
        c->f.CmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, fw->pl, 0, 1, &set, 0, NULL);
        c->f.CmdPushConstants(cb, fw->pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, e->pcs, e->pc);
        c->f.CmdDispatch(cb, e->gx, e->gy, 1);
        if (prof) c->f.CmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, fw->qp, i + 1);
    }
    if (fw->qp && !prof) c->f.CmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, fw->qp, 1);
#ifdef GEIST_VK_CLOCK
    gt_vk_clock_end(c, &fw->clk, cb);
#endif
    return c->f.EndCommandBuffer(cb) == VK_SUCCESS;
}

/* the 8-bit activation format a weight type's product takes (act_quant.h): 0 blocks of 32,
 * 1 blocks of 256, -1 float activations */
static int act_fmt(uint32_t t) {
    if (t == GT_TYPE_F32 || t == GT_TYPE_F16) return -1;
    return t == GT_TYPE_Q4_K || t == GT_TYPE_Q6_K ? 1 : 0;
}

/* quant.comp: a workgroup per 64 words of 8-bit rows, 8 blocks of 32 or one of 256 */
static void rec_quant(rec *r, VkBuffer src, uint32_t n_in, uint32_t n_tok, int fmt) {
    const uint32_t pc[3] = {n_in, n_tok * n_in / (fmt ? 256 : 32), (uint32_t)fmt};
    const VkBuffer b[N_BIND] = {0, 0, src, 0, r->fw->aq.buf, r->fw->ad.buf, 0, 0};
    dispatch(r, P_QUANT, b, pc, sizeof pc, fmt ? pc[1] : (pc[1] + 7) / 8);
    r->aq_src = src;
    r->aq_fmt = fmt;
}

/* The 8-bit rows (format fmt) of n_tok rows of n_in values made by quant_fused from what their
 * floats would be, those floats not written (a dispatch and a barrier fewer): mode 1, x's RMSNorm
 * (the norm vector at norm_at), mode 2, act(gate x) * up u (act.comp's; gelu). The scratch then
 * holds the 8-bit rows of `as` (the floats' buffer), for products that read only those:
 * fused_fmt's. */
enum { QF_NORM = 1, QF_ACT = 2 };
static void rec_quant_fused(rec *r, VkBuffer x, VkBuffer u, VkBuffer as, uint32_t n_in,
                            uint32_t n_tok, int fmt, uint32_t mode, uint32_t norm_at, float eps,
                            uint32_t gelu) {
    struct { uint32_t n_in, n_blocks, fmt, mode, norm_at; float eps; uint32_t gelu; } pc = {
        n_in, n_tok * n_in / (fmt ? 256 : 32), (uint32_t)fmt, mode, norm_at, eps, gelu};
    const VkBuffer b[N_BIND] = {0, 0, x, mode == QF_ACT ? u : 0, r->fw->aq.buf, r->fw->ad.buf, 0,
                                mode == QF_NORM ? r->fw->norms.buf : 0};
    dispatch(r, P_QUANT_FUSED, b, &pc, sizeof pc, fmt ? pc.n_blocks : (pc.n_blocks + 7) / 8);
    r->aq_src = as;
    r->aq_fmt = fmt;
}

/* The activation format every one of these products (NULL: none) takes, when they all take the
 * same and rows of n_in values fit quant_fused (at least 256, whole blocks); else -1. A fast
 * pass's products read floats (mvfast.comp), which quant_fused does not write: -1 there. */
static int fused_fmt(const rec *r, uint32_t n_in, const wref *a, const wref *b, const wref *c) {
    const int f = act_fmt(a->type);
    if (r->fast || f < 0 || n_in < 256 || n_in % (f ? 256u : 32u) || (b && act_fmt(b->type) != f) ||
        (c && act_fmt(c->type) != f))
        return -1;
    return f;
}

/* y (ldy = n_out) (+)= W x for n_tok rows; x's 8-bit rows are made first when a quantized W
 * needs a format the scratch does not hold for x yet */
/* Whether a product makes x's 8-bit rows itself (matvec.comp's bit 1): every workgroup repeats
 * them (and the norm before), so only for steps of one row (one session's decode: its rows fit
 * the shared memory's SQ_WORDS words); longer steps quantize once (quant.comp) for all. On the
 * H200, 8 sessions' steps of 8 rows decoded 1.58x (SmolLM2) and 1.31x (Gemma 3) faster so than
 * with the rows made in every workgroup (the norm, the quantization and the fused steps then
 * take dispatches of their own). */
#define SELFQ_MAX_TOK 1u
static bool selfq_fits(uint32_t n_in, uint32_t n_tok) {
    return n_tok <= SELFQ_MAX_TOK && (uint64_t)n_tok * n_in / 4 <= 3072;
}

/* A quantized product's matvec.comp: blocks of 32 in steps of at most 8 rows on 32 lanes a row
 * (a block a lane: its loads at once) where fw->wide, for products of few rows (Q, K, V, O,
 * down: on the H200 10-20 % faster each), else 8 lanes a row (gate/up's 3072 rows and the
 * logits' 49152 took 1.9x and 2.6x as long on 32 lanes: every workgroup repeats the in-product
 * 8-bit rows, 4x the workgroups); the same bits */
#define WIDE_MAX_ROWS 2048u
/* matvec.comp's in-product steps (bits of its `accumulate`); MV_SPREAD: a workgroup a token */
enum { MV_ACC = 1, MV_SELFQ = 2, MV_ROPE = 8, MV_NORM = 16, MV_GATED = 32, MV_GELU = 64,
       MV_SPREAD = 128 };
/* On 8 rows a workgroup, a batched step's product of few rows (Gemma 3's O and down: 80
 * workgroups of 8 rows, each running its 8 tokens one after another) leaves most of a large GPU
 * idle: where its workgroups are fewer than the device's compute units (spread_below), a
 * workgroup a token (MV_SPREAD), each reading its rows again (from the cache: few rows). On the
 * H100 (132 SMs) Gemma 3's 8-session pass took 2.42 ms so against 3.42 (session 27); products
 * of many rows (the logits) read their weights once, as before. */
static void dispatch_mv8(rec *r, const wref *w, const VkBuffer b[N_BIND], const uint32_t pc[9],
                         uint32_t n_tok) {
    const uint32_t groups = (w->n_out + 7) / 8;
    if (r->wide && act_fmt(w->type) == 0 && n_tok <= 8 && w->n_out <= WIDE_MAX_ROWS) {
        dispatch(r, P_MATVEC2, b, pc, 9 * sizeof pc[0], (w->n_out + 1) / 2);
    } else if (n_tok > 1 && n_tok <= 8 && groups < r->spread_below) {
        uint32_t ps[9];
        memcpy(ps, pc, sizeof ps);
        ps[7] |= MV_SPREAD;
        dispatch(r, P_MATVEC8, b, ps, sizeof ps, n_tok * groups);
    } else {
        dispatch(r, P_MATVEC8, b, pc, 9 * sizeof pc[0], groups);
    }
}

/* Past this many output rows a product's workgroups would repeat x's 8-bit rows more often than
 * one quant.comp dispatch costs (the logits: 6,144 workgroups of SmolLM2's, 32,768 of Gemma 3's) */
#define SELFQ_MAX_ROWS 16384u

/* GEIST_DEVICE_FAST: a quantized product of a fast pass (r->fast) on float activations
 * (mvfast.comp: MVF_ROWS output rows a workgroup; MV_GATED: half as many gate rows and their up
 * rows; its pipeline made for the weights' type where there is one, P_MVT's), with
 * matvec.comp's in-product steps (bits): MV_ACC, MV_NORM (norm_at), MV_ROPE (hd, n_rot),
 * MV_GATED / MV_GELU (the up rows at up_off). Not cpu_scalar's bits: docs/VULKAN.md "Fast
 * products". Products of more than SELFQ_MAX_ROWS rows (a large vocabulary's output) take
 * outfast.comp where it fits (rec_outfast), else the 8-bit path, quant.comp once and
 * matvec.comp's 8 rows a workgroup: Gemma 3's 262,144 took 276 us on the H100 in mvfast.comp
 * against 159 us so (session 23). A prompt's rows keep the 8-bit path too; a
 * pass of a row a session (at most FAST_ROWS) takes mvfast.comp's workgroups once a row (its
 * SPREAD pipelines), each reading the weights again (from the caches: a workgroup's chain is
 * latency-bound, not its loads), where a loop over 8 rows a workgroup was 7-12 % (session 23)
 * and its weights unpacked once for all rows 17-23 % (session 28) slower than the batched 8-bit
 * products, and a gated product's 8 rows a workgroup 30 % slower (Gemma 3, session 29, each
 * lane holding all 8 rows of x in registers); a product now takes blocks of the pass's rows a
 * workgroup where they fill the device (mvt_block: x staged in shared memory by all the
 * workgroup's lanes; normed products since session 31, O and down since session 35).
 * mvfast.comp reads x's floats: where the scratch holds x's 8-bit rows (aq_src), which may be
 * all that was made of it, the 8-bit path reads those (fast passes make floats: fused_fmt takes
 * no quant_fused there). */
static VkBuffer res_other(const rec *r) {
    return r->res == r->fw->x.buf ? r->fw->x2.buf : r->fw->x.buf;
}
static bool fast_fits(const rec *r, const wref *w, VkBuffer x, uint32_t n_tok) {
    return r->fast && n_tok == r->n_rows && act_fmt(w->type) >= 0 &&
           w->n_out <= SELFQ_MAX_ROWS && r->aq_src != x;
}
/* Whether a decode-size product of x can take its in-product steps (norm, rotary, activation):
 * in mvfast.comp, or in matvec.comp with x's 8-bit rows made in shared memory (selfq_fits) */
static bool fused_fits(const rec *r, const wref *w, VkBuffer x, uint32_t n_tok) {
    return fast_fits(r, w, x, n_tok) || selfq_fits(w->n_in, n_tok);
}
/* The block of a pass's rows each workgroup of a fast product takes (mvfast.comp's TT; the
 * product's pipeline into *pipe; its x staged: normed (bits' MV_NORM), else as it is where its
 * rows fit MVT_RAW's): the larger of 4 and 2 whose workgroups, `groups` a block
 * (r->fill_groups where products run side by side), still give each compute unit MVT_FILL
 * (where the device does not say its units, MVT_FILL_ANY in all), whose pipeline was made
 * (make_pipelines: within MVT_SHARED of shared memory), and that a smaller block would not
 * hold whole; else 1 (SPREAD: a row a workgroup). A block stages its rows once and unpacks
 * each unit's weights once for all of them, where a row a workgroup made Gemma 3's 2,048-row
 * gated product 4,096 workgroups of 8 sessions (session 30: 722 us profiled of a 3.75 ms pass,
 * against 182 for one row). On the H100 (session 31, 8 sessions): SmolLM2's gated product 679 -> 502 us profiled in blocks of 8,
 * Gemma 3's 722 -> 614 in blocks of 4 (its blocks of 8 with the deferred post-norm's o staged,
 * 41 KiB of shared memory, 641). Products of x not normed (O, down) take blocks too since
 * session 35, their x staged as it is (MVT_RAW; read from the caches instead, session 31 found
 * SmolLM2's O and down 8-12 % slower in blocks): on the H100 (8 sessions, plain pass) Gemma 3
 * 1.653-1.656 -> 1.481 ms, SmolLM2 1.647-1.654 -> 1.420-1.422, in blocks of 2 (what MVT_FILL
 * and MVT_SHARED give both); blocks of 4 where they fit 48 KiB (one workgroup a compute unit)
 * gave 1.470-1.471 and 1.449-1.462.
 * Blocks of 8 are no longer made (session 33, H200, 8 sessions, plain GPU ms a pass): with
 * mvt_groups' loop they hold 96 registers a lane (77 before it; 64 in blocks of 4), two
 * workgroups an SM, and SmolLM2's pass took 1.81 ms in blocks of 8 against 1.65-1.66 in blocks
 * of 4 (main's blocks of 8 without groups: 1.73). */
#define MVT_FILL 2u
#define MVT_FILL_ANY 16u
static uint32_t mvt_block(const rec *r, int t, bool pend, uint32_t bits, uint32_t n_in,
                          uint32_t groups, uint32_t n_tok, int *pipe) {
    const uint32_t units = r->c->compute_units;
    const bool raw = !(bits & MV_NORM); /* MVT_RAW: its x staged as it is */
    const uint64_t fill = units ? (uint64_t)MVT_FILL * units : MVT_FILL_ANY;
    if (raw && n_in > r->fw->xn_raw) return 1;
    const int v = raw ? MVT_RAW : pend ? MVT_PEND : MVT_PLAIN;
    if (r->fill_groups > groups) groups = r->fill_groups;
    for (int m = MVT_MODES - 1; m > 1; m--) {
        const uint32_t tt = 1u << (m - 1);
        if (2 * n_tok <= tt || !r->fw->pipe[pipe_mvt(t, v, m)] ||
            (uint64_t)groups * ((n_tok + tt - 1) / tt) < fill)
            continue;
        *pipe = pipe_mvt(t, v, m);
        return tt;
    }
    return 1;
}
/* The groups of outputs (MVF_ROWS each, gated: half) a block's workgroup takes one after
 * another (mvfast.comp's p.groups), its block copied and normalized once for all of them: the
 * most of MVT_GROUPS, halving, whose workgroups still give each compute unit MVT_GROUPS_FILL
 * halves (where the device does not say its units, MVT_FILL_ANY in all). On the H100 (session
 * 32, 8 sessions, profiled): Gemma 3's gated product in blocks of 4 at 1 / 2 / 4 groups a
 * workgroup 546 / 481 / 415 us (1,024 / 512 / 256 workgroups); SmolLM2's blocks of 8 (384
 * workgroups) at 2 or 4 groups, fewer workgroups than 2 an SM, got slower (541 / 668 us
 * against 503). Session 33 (H200, plain 8-session pass, with Q, K and V's fill_groups and
 * blocks of at most 4): Gemma 3 2.005 -> 1.772 ms, SmolLM2 1.733 -> 1.650-1.661. */
#define MVT_GROUPS 4u
#define MVT_GROUPS_FILL 3u
static uint32_t mvt_groups(const rec *r, uint32_t groups, uint32_t blocks) {
    const uint32_t units = r->c->compute_units;
    const uint64_t fill = units ? (uint64_t)MVT_GROUPS_FILL * units : 2u * MVT_FILL_ANY;
    for (uint32_t g = MVT_GROUPS; g > 1; g /= 2)
        if (2u * (uint64_t)((groups + g - 1) / g) * blocks >= fill) return g;
    return 1;
}
static void rec_mvfast(rec *r, const wref *w, VkBuffer x, VkBuffer y, uint32_t n_tok,
                       uint32_t bits, uint32_t norm_at, uint32_t hd, uint32_t n_rot,
                       uint32_t up_off) {
    uint32_t acc = bits;
    if (bits & MV_ROPE) acc |= hd << 8 | n_rot << 20;
    const bool gated = (bits & MV_GATED) != 0;
    const uint32_t type = w->type | ((bits & MV_NORM) ? norm_at << 8 : 0u);
    /* a deferred post-norm (rec_residual's defer) taken into this product's norm of x */
    const bool pend = r->pend != NO_NORM && (bits & MV_NORM) && x == r->res;
    const bool write = pend && r->pend_write;
    uint32_t pc[12] = {w->off, type, w->n_in, w->row_bytes,
                       gated ? 2 * w->n_out : w->n_out, n_tok, gated ? w->n_out : w->ldy, acc,
                       gated ? up_off : w->row0, pend ? r->pend : NO_NORM, write, 1u};
    const VkBuffer b[N_BIND] = {w->buf, 0, x, y, (bits & MV_NORM) ? r->fw->norms.buf : 0,
                                (bits & MV_ROPE) ? r->fw->in.buf : 0, pend ? r->fw->o.buf : 0,
                                write ? res_other(r) : 0};
    const uint32_t rows = gated ? MVF_ROWS / 2 : MVF_ROWS; /* outputs a workgroup */
    const uint32_t groups = (w->n_out + rows - 1) / rows;
    int pipe = pend ? P_MVFAST_PEND : P_MVFAST;
    uint32_t tt = 1;
    const int v = pend ? MVT_PEND : MVT_PLAIN;
    for (int t = 0; t < 6; t++) /* the pipeline made for its weights' type, where there is one */
        if (k_mvt_types[t] == w->type && r->fw->pipe[pipe_mvt(t, v, n_tok > 1)]) {
            pipe = pipe_mvt(t, v, n_tok > 1);
            tt = mvt_block(r, t, pend, bits, w->n_in, groups, n_tok, &pipe);
        }
    const uint32_t blocks = (n_tok + tt - 1) / tt;
    if (tt > 1) pc[11] = mvt_groups(r, groups, blocks);
    dispatch(r, pipe, b, pc, sizeof pc, (groups + pc[11] - 1) / pc[11] * blocks);
    if (write) r->pend_write = false;
}

/* A quantized product with its 8-bit rows made inside (selfq_fits) and these steps there:
 * MV_ROPE: the output pairs (2i, 2i + 1) of heads of hd values rotated as rope.comp does (the
 * pass inputs' cos/sin bound at 5); MV_NORM: x is the residual stream, normalized as
 * rmsnorm.comp does with the norm vector at float norm_at of fw->norms (bound at 4; below
 * 2^24: gt_vk_fwd_init checks). */
static void rec_mv_fused(rec *r, const wref *w, VkBuffer x, VkBuffer y, uint32_t n_tok,
                         uint32_t bits, uint32_t norm_at, uint32_t hd, uint32_t n_rot) {
    if (fast_fits(r, w, x, n_tok)) {
        rec_mvfast(r, w, x, y, n_tok, bits, norm_at, hd, n_rot, 0);
        return;
    }
    uint32_t acc = bits | MV_SELFQ;
    if (bits & MV_ROPE) acc |= hd << 8 | n_rot << 20;
    const uint32_t type = w->type | ((bits & MV_NORM) ? norm_at << 8 : 0u);
    const uint32_t pc[9] = {w->off, type, w->n_in, w->row_bytes, w->n_out, n_tok, w->ldy, acc,
                            w->row0};
    const VkBuffer b[N_BIND] = {w->buf, 0, x, y,
                                (bits & MV_NORM) ? r->fw->norms.buf : r->fw->aq.buf,
                                (bits & MV_ROPE) ? r->fw->in.buf : r->fw->ad.buf, 0, 0};
    dispatch_mv8(r, w, b, pc, n_tok);
}

/* The gated FFN's first half as one product (MV_GATED; MV_GELU: GELU, else SiLU), its norm
 * (MV_NORM, norm_at) and 8-bit rows inside: y = act(gate x) * (up x), nff values a row, 8 lanes a
 * row, a workgroup's 4 gate rows and their 4 up rows (gate and up in one buffer, anywhere) */
static void rec_mv_gated(rec *r, const wref *gate, const wref *up, VkBuffer x, VkBuffer y,
                         uint32_t n_tok, uint32_t bits, uint32_t norm_at) {
    if (fast_fits(r, gate, x, n_tok)) {
        rec_mvfast(r, gate, x, y, n_tok, bits | MV_GATED, norm_at, 0, 0, up->off);
        return;
    }
    const uint32_t acc = bits | MV_SELFQ | MV_GATED;
    const uint32_t type = gate->type | ((bits & MV_NORM) ? norm_at << 8 : 0u);
    const uint32_t pc[9] = {gate->off, type, gate->n_in, gate->row_bytes, 2 * gate->n_out, n_tok,
                            gate->n_out, acc, up->off};
    const VkBuffer b[N_BIND] = {gate->buf, 0, x, y,
                                (bits & MV_NORM) ? r->fw->norms.buf : r->fw->aq.buf,
                                r->fw->ad.buf, 0, 0};
    dispatch(r, P_MATVEC8, b, pc, sizeof pc, (gate->n_out + 3) / 4);
}

/* GEIST_DEVICE_FAST's Q8_0 product of more than SELFQ_MAX_ROWS rows (a tied output's logits) for
 * at most FAST_ROWS rows of x, in outfast.comp (docs/VULKAN.md "The output streamed"): 4
 * workgroups of 256 lanes a compute unit stream the rows, x's blocks made 16-bit integers once a
 * workgroup, in shared memory (P_OUTFAST one row of x, P_OUTFAST8 up to FAST_ROWS), a row's
 * blocks over a cluster of lanes (outfast_blocks); where the device does not say its units, a
 * workgroup per OUT_ROWS_WG rows. On the H100, Gemma 3's 262,144 rows
 * took 87 us profiled (with the output norm) against 187 for the 8-bit path; 8 sessions' pass
 * 2.178 -> 2.092 ms, where x's 8 rows in registers had made it 2.351 (session 30) */
#define OUT_ROWS_WG 64u
static bool outfast_fits(const rec *r, const wref *w, VkBuffer x, uint32_t n_tok, bool acc) {
    /* a part of the output, whose every part outfast_blocks found Q8_0 rows the kernel takes */
    const bool output = w >= r->fw->out && w < r->fw->out + r->fw->n_out && r->fw->out_xb;
    return r->fast && !acc && output && r->aq_src != x && w->n_out > SELFQ_MAX_ROWS &&
           n_tok >= 1 && n_tok <= FAST_ROWS &&
           r->fw->pipe[n_tok > 1 ? P_OUTFAST8 : P_OUTFAST] != VK_NULL_HANDLE;
}
static void rec_outfast(rec *r, const wref *w, VkBuffer x, VkBuffer y, uint32_t n_tok) {
    const uint32_t pc[7] = {w->off, w->n_in, w->row_bytes, w->n_out, n_tok, w->ldy, w->row0};
    const VkBuffer b[N_BIND] = {w->buf, 0, x, y, 0, 0, 0, 0};
    const uint32_t units = r->fw->wide ? r->c->compute_units : 0;
    uint32_t groups = (w->n_out + OUT_ROWS_WG - 1) / OUT_ROWS_WG;
    if (units && groups > 4 * units) groups = 4 * units;
    dispatch(r, n_tok > 1 ? P_OUTFAST8 : P_OUTFAST, b, pc, sizeof pc, groups);
}

static void rec_matvec(rec *r, const wref *w, VkBuffer x, VkBuffer y, uint32_t n_tok, bool acc) {
    if (fast_fits(r, w, x, n_tok)) {
        rec_mvfast(r, w, x, y, n_tok, acc ? MV_ACC : 0u, 0, 0, 0, 0);
        return;
    }
    if (outfast_fits(r, w, x, n_tok, acc)) {
        rec_outfast(r, w, x, y, n_tok);
        return;
    }
    const int fmt = act_fmt(w->type);
    /* the product makes x's 8-bit rows itself when they fit, unless the scratch holds them */
    const bool selfq = fmt >= 0 && selfq_fits(w->n_in, n_tok) && w->n_out <= SELFQ_MAX_ROWS &&
                       (r->aq_src != x || r->aq_fmt != fmt);
    if (fmt >= 0 && !selfq && (r->aq_src != x || r->aq_fmt != fmt))
        rec_quant(r, x, w->n_in, n_tok, fmt);
    const uint32_t pc[9] = {w->off, w->type, w->n_in, w->row_bytes, w->n_out, n_tok, w->ldy,
                            (uint32_t)acc | (selfq ? 2u : 0u), w->row0};
    const VkBuffer b[N_BIND] = {w->buf, 0, x, y, r->fw->aq.buf, r->fw->ad.buf, 0, 0};
    if (fmt >= 0 && !selfq && n_tok > MM_MIN_TOK && r->mm) { /* tiles of rows x tokens */
        const bool small = n_tok <= MM16_MAX_TOK;
        const uint32_t tm = small ? MM16_T : MM_TM, tn = small ? MM16_T : MM_TN;
        const uint32_t tiles = ((w->n_out + tm - 1) / tm) * ((n_tok + tn - 1) / tn);
        dispatch(r, small ? P_MATMUL16 : P_MATMUL, b, pc, sizeof pc, tiles);
    } else if (fmt >= 0) dispatch_mv8(r, w, b, pc, n_tok);
    else dispatch(r, P_MATVEC, b, pc, sizeof pc, w->n_out);
}

/* y = norm(x) * w for n_rows rows of d values (the norm vector at w_off of the norms buffer);
 * acc: y += that (a post-norm's residual); gather_at != 0: the rows asking for logits */
static void rec_norm(rec *r, VkBuffer x, VkBuffer y, uint32_t n_rows, uint32_t d, uint32_t w_off,
                     uint32_t gather_at, float eps, bool acc) {
    struct { uint32_t n, w_off, gather, gather_at; float eps; uint32_t acc; } pc = {
        d, w_off, gather_at != 0, gather_at, eps, acc};
    const VkBuffer b[N_BIND] = {0, r->fw->in.buf, x, y, 0, 0, 0, r->fw->norms.buf};
    /* GEIST_DEVICE_FAST's passes of decode rows (one row, or a row a session: r->fast_attn) in
     * normfast.comp where the device has it; a prompt's rows keep cpu_scalar's bits */
    const bool fast = (r->fast || r->fast_attn) && r->fw->pipe[P_NORM_FAST] != VK_NULL_HANDLE;
    dispatch(r, fast ? P_NORM_FAST : P_RMSNORM, b, &pc, sizeof pc, n_rows);
}

/* A deferred post-norm (rec_residual's defer) added into the residual as rec_residual does,
 * where no product takes it (the last layer's, or the next products off the fast path) */
static void settle(rec *r, uint32_t d, float eps) {
    if (r->pend == NO_NORM) return;
    rec_norm(r, r->fw->o.buf, r->res, r->n_rows, d, r->pend, 0, eps, true);
    r->pend = NO_NORM;
}

/* x += W y, or with a post-norm (Gemma 3) x += norm(W y) * post (session/forward.c's
 * add_residual). defer (a fast pass's, one row): the product into fw->o only, its post-norm
 * and the addition left to the next products that normalize the residual (r->pend): each of
 * their workgroups adds it before its own norm, the first writes the new residual into the
 * other buffer; a standalone norm's dispatch and barrier fewer, twice a Gemma 3 layer. */
static void rec_residual(rec *r, const wref *w, VkBuffer y, uint32_t n, uint32_t post,
                         float eps, bool defer) {
    gt_vk_fwd *fw = r->fw;
    if (post == NO_NORM) {
        rec_matvec(r, w, y, r->res, n, true);
        return;
    }
    rec_matvec(r, w, y, fw->o.buf, n, false);
    if (defer && r->fast && fw->pipe[P_MVFAST_PEND] != VK_NULL_HANDLE) {
        r->pend = post;
        r->pend_write = true;
        return;
    }
    rec_norm(r, fw->o.buf, r->res, n, w->n_out, post, 0, eps, true);
}

typedef struct grp {
    int32_t r0, n;
    gt_dev_kv *kv;
    const gt_dev_kv *prefix; /* the shared prefix's KV, or NULL */
    int32_t n_prefix;
} grp;

/* Whether a session's run of rows up to position `last` stages its K/V on a layer of `rows` rows
 * (kv.h's GT_KV_STAGED): a ring's slots are taken again only by storage positions at or past its
 * rows, so a run that stays below them writes its K/V first, as a non-ring layer does. */
static bool staged_on(const grp *G, int32_t last, int32_t rows) {
    return G->n > 1 && last - G->n_prefix >= rows;
}

/* The rows a pass may hold: PASS_ROWS, fewer where a kernel that numbers its workgroups along x
 * alone (act, rope, kvstore, rmsnorm, embed, attn: a row's share each) would pass MAX_GROUPS_X
 * (a model of many heads or a wide FFN), never fewer than NARROW_ROWS (the passes before). */
static int32_t pass_cap(const gt_config *cf) {
    const uint64_t kd = (uint64_t)cf->n_head_kv * (uint64_t)cf->head_dim_k;
    const uint64_t vd = (uint64_t)cf->n_head_kv * (uint64_t)cf->head_dim_v;
    const uint64_t heads = (uint64_t)cf->n_head + (uint64_t)cf->n_head_kv;
    const uint64_t per_row[] = {(uint64_t)cf->n_ff / 64 + 1, (uint64_t)cf->n_head,
                                heads * (uint64_t)cf->n_rot / 128 + 1, (kd + vd) / 128 + 1,
                                2 * (uint64_t)cf->n_head_kv};
    uint64_t cap = PASS_ROWS;
    for (size_t i = 0; i < sizeof per_row / sizeof per_row[0]; i++)
        if (per_row[i] > 0 && cap * per_row[i] >= MAX_GROUPS_X)
            cap = (MAX_GROUPS_X - 1) / per_row[i];
    return cap < NARROW_ROWS ? NARROW_ROWS : (int32_t)cap;
}

/* How many of rows[0, n) the next pass takes: at most cap (pass_cap), at most LOGIT_ROWS of them
 * wanting logits, and a session's run that takes per-row scratch sized for NARROW_ROWS ending
 * among the pass's first NARROW_ROWS rows: a run the attention may split (at most SPLIT_ROWS
 * rows), one attending past SPLIT_SH positions (the scores' scratch), one that stages (its
 * session's stage). A run is cut where a limit falls; its later rows go in the next pass. */
static int32_t pass_take(const gt_vk_ctx *c, const gt_dev_row *rows, int32_t n, int32_t cap) {
    int32_t t = 0, n_lg = 0;
    while (t < n && t < cap) {
        int32_t end = t + 1;
        while (end < n && rows[end].kv == rows[t].kv) end++;
        int32_t take = end - t < cap - t ? end - t : cap - t;
        for (int32_t i = t; i < t + take; i++)
            if ((rows[i].logits || rows[i].argmax) && n_lg++ == LOGIT_ROWS) take = i - t;
        if (take > 0) {
            const gt_dev_kv *kv = rows[t].kv;
            const grp G = {t, take, NULL, NULL, rows[t].n_prefix};
            const int32_t last = rows[t + take - 1].pos;
            const bool narrow = (c->attn_chunk > 0 && take <= (int32_t)SPLIT_ROWS) ||
                                last + 1 > (int32_t)SPLIT_SH || staged_on(&G, last, kv->ring_rows);
            if (narrow && t + take > NARROW_ROWS) take = NARROW_ROWS - t;
        }
        if (take <= 0) break;
        t += take;
        if (t < end) break; /* the run was cut */
    }
    return t;
}

/* K/V of a group's rows into its cache (stage: into its stage, slot = pass row) */
static void rec_kvstore(rec *r, const gt_config *cf, const grp *G, int32_t il, bool stage) {
    const gt_dev_kv *kv = G->kv;
    const uint32_t kd = kv->kd, vd = kv->vd;
    const uint32_t k_at = (uint32_t)(stage ? kv->stage_at : kv->at[il]);
    const uint32_t v_at = k_at + (uint32_t)((uint64_t)(stage ? NARROW_ROWS : kv->rows[il]) * kv->krow / 4);
    const uint32_t pc[13] = {(uint32_t)G->r0, (uint32_t)G->n, kd, vd, k_at, v_at,
                             (uint32_t)kv->mode, (uint32_t)cf->n_head_kv, (uint32_t)cf->head_dim_k,
                             (uint32_t)cf->head_dim_v, (uint32_t)G->n_prefix,
                             (uint32_t)kv->rows[il], stage};
    const VkBuffer b[N_BIND] = {0, r->fw->in.buf, r->fw->k.buf, r->fw->v.buf, 0, 0, kv->b.buf, 0};
    const uint32_t inv = kv->mode == GEIST_KV_INT8 ? (uint32_t)G->n * 2u * (uint32_t)cf->n_head_kv
                                                   : (uint32_t)G->n * (kd + vd) / 2;
    dispatch(r, P_KVSTORE, b, pc, sizeof pc, (inv + 63) / 64);
}

/* a group's rows attend over the positions each sees (attn.comp; sp.n > 1: attn_part.comp's
 * chunks into the partials, each row's last merging them): the prefix's rows, the own rows, with
 * stage_pos0 (else UINT32_MAX) the pass's rows from the stage */
/* A pass's attention with its rows' QK norm, rotary and KV store inside (ATTN_FRESH): bits of
 * attn_body.glsl's `fresh` (1 QK norm, 2 rotary, 4 NEOX pairs), the norm vectors, the rotary
 * table's first word in the inputs; on: passes of one row a session (run_pass's fresh_pass).
 * qout: the output also as the O product's 8-bit rows (1 + act_fmt; 0 none: qout_of), by the
 * exact kernels and attnfast.comp alike; none in a fast pass of one row (its O reads floats) */
typedef struct fresh {
    bool on;
    uint32_t bits, q_norm, k_norm, rope_at, qout;
} fresh;

/* attn_body.glsl's qout for an O product of weight type `type`: its activation format + 1 when
 * each head of hv values is whole blocks of it (a workgroup quantizes its own head), else 0 */
static uint32_t qout_of(uint32_t type, uint32_t hv) {
    const int f = act_fmt(type);
    return f >= 0 && hv <= 256 && hv % (f ? 256u : 32u) == 0 ? (uint32_t)f + 1u : 0u;
}

/* What a session's attention over n_ctx positions (its last row's, within the layer's window)
 * takes from n_ctx: the split (sp), the fast attention's chunks (fs), and whether the positions a
 * workgroup holds fit the grouped kernels' shared scores. Every n_ctx-dependent choice of
 * rec_attn comes from here, so that passes of equal shapes plan the same commands (run_pass's
 * plan key). */
typedef struct attn_shape {
    split sp, fs;
    bool fits_group;
} attn_shape;
/* The positions the fast attention's dispatch covers (fs): n_ctx rounded up to 8 chunks, then
 * to a power of two, at most n_max (the session's most in the layer) and the scratch's
 * positions (cap_ctx: its partials' chunks), so that the plan and its recording serve the
 * session's next positions too (attnfast.comp's workgroups of chunks past n_ctx return at once;
 * its merge counts the row's own chunks): SmolLM2's tg128 planned and recorded 4 of its 128
 * passes anew, at 0.45 ms each on the H100 (session 29). Never past MAX_SPLIT chunks of
 * attn_chunk unless n_ctx is (then n_ctx's own): the chunks stay n_ctx's own, so a row's sums do
 * not depend on its session's max_seq_len. */
static uint32_t fast_cover(const gt_vk_ctx *c, uint32_t n_ctx, uint32_t n_max, uint32_t cap) {
    if (c->attn_chunk <= 0) return n_ctx;
    const uint64_t most = (uint64_t)c->attn_chunk * MAX_SPLIT;
    uint64_t cover = 8u * (uint64_t)c->attn_chunk;
    while (cover < n_ctx) cover *= 2;
    if (cover > most) cover = most;
    if (cover > n_max) cover = n_max;
    if (cover > cap) cover = cap;
    return cover > n_ctx ? (uint32_t)cover : n_ctx;
}
static attn_shape attn_shape_of(const gt_vk_ctx *c, const gt_vk_fwd *fw, const gt_config *cf,
                                uint32_t n_rows, uint32_t n_ctx, uint32_t n_max) {
    attn_shape a = {split_of(c, n_rows, n_ctx, fw->cap_split),
                    fast_split_of(c, fast_cover(c, n_ctx, n_max, (uint32_t)fw->cap_ctx),
                                  fw->cap_split),
                    false};
    if ((uint64_t)n_rows * (uint64_t)cf->n_head * a.sp.n >= MAX_GROUPS_X) a.sp.n = 1;
    a.fits_group = fw->attn_group > 1 &&
                   (a.sp.n > 1 ? a.sp.ch : n_ctx) <= GROUP_SH / fw->attn_group;
    return a;
}

/* The attention's shape for a session's rows whose last is at position pos, in a layer of the
 * given window: the pass's plan and its key (plan_key) take it from here alike */
static attn_shape attn_shape_at(const gt_vk_ctx *c, const gt_vk_fwd *fw, const gt_config *cf,
                                uint32_t n_rows, int32_t pos, const gt_dev_kv *kv,
                                uint32_t window) {
    uint32_t n_ctx = (uint32_t)pos + 1, n_max = (uint32_t)kv->max_seq;
    if (window > 0 && n_ctx > window) n_ctx = window;
    if (window > 0 && n_max > window) n_max = window;
    return attn_shape_of(c, fw, cf, n_rows, n_ctx, n_max);
}

static void rec_attn(rec *r, const gt_config *cf, const grp *G, int32_t il, uint32_t window,
                     uint32_t stage_pos0, attn_shape shape, fresh fr) {
    const split sp = shape.sp;
    const gt_dev_kv *kv = G->kv, *pk = G->prefix;
    const uint32_t k_at = (uint32_t)kv->at[il];
    const uint32_t sk_at = (uint32_t)kv->stage_at;
    struct {
        uint32_t row0, n_head, n_head_kv, hk, hv, k_at, v_at, mode, s_stride;
        float scale;
        uint32_t window, n_prefix, rows, stage_pos0, stage_row0, sk_at, sv_at, pmode, pk_at,
            pv_at, prows;
        uint32_t n_split, ch, sp_stride; /* attn_part.comp's */
        uint32_t fresh, q_norm, k_norm;  /* ATTN_FRESH's */
        float eps;
        uint32_t n_rot, rope_at, qout;
    } pc = {(uint32_t)G->r0, (uint32_t)cf->n_head, (uint32_t)cf->n_head_kv,
            (uint32_t)cf->head_dim_k, (uint32_t)cf->head_dim_v, k_at,
            k_at + (uint32_t)((uint64_t)kv->rows[il] * kv->krow / 4), (uint32_t)kv->mode,
            (uint32_t)r->fw->cap_ctx, cf->attn_scale, window, (uint32_t)G->n_prefix,
            (uint32_t)kv->rows[il], stage_pos0, (uint32_t)G->r0, sk_at,
            sk_at + (uint32_t)((uint64_t)NARROW_ROWS * kv->krow / 4),
            pk ? (uint32_t)pk->mode : (uint32_t)kv->mode, pk ? (uint32_t)pk->at[il] : 0u,
            pk ? (uint32_t)(pk->at[il] + (uint64_t)pk->rows[il] * pk->krow / 4) : 0u,
            pk ? (uint32_t)pk->rows[il] : 1u, sp.n, sp.ch, r->fw->cap_split,
            fr.bits, fr.q_norm, fr.k_norm, cf->eps, (uint32_t)cf->n_rot, fr.rope_at, fr.qout};
    /* the grouped kernels (a workgroup per attn_group query heads: the same bits) where the
     * positions a workgroup holds fit their shared scores, on a GPU for a session's rows of a
     * prompt (more than SPLIT_ROWS: the H200's prefill 1.3x faster), not for its few rows of
     * decode or a reply, which are bound by a workgroup's latency, not by the tiles' loads
     * (grouped, the H200 decoded 15 % slower); a CPU device runs every workgroup's work, so
     * loading each tile once always pays there */
    const uint32_t gsz = r->fw->attn_group;
    const int pg = fr.on ? (sp.n > 1 ? P_ATTN_PART_FRESH_G : P_ATTN_FRESH_G)
                         : (sp.n > 1 ? P_ATTN_PART_G : P_ATTN_G);
    const bool grp_on = gsz > 1 && shape.fits_group &&
                        (!r->wide || G->n > (int32_t)SPLIT_ROWS) &&
                        r->fw->pipe[pg] != VK_NULL_HANDLE;
    const uint32_t heads = (uint32_t)G->n * (uint32_t)cf->n_head / (grp_on ? gsz : 1u);
    /* GEIST_DEVICE_FAST's attention of a fresh pass (run_pass's fast_attn) */
    if (fr.on && r->fast_attn) {
        const split fs = shape.fs;
        pc.n_split = fs.n;
        pc.ch = fs.ch;
        const VkBuffer b[N_BIND] = {pk ? pk->b.buf : kv->b.buf, r->fw->in.buf, r->fw->q.buf,
                                    r->fw->att.buf, fs.n > 1 ? r->fw->cnt.buf : 0,
                                    fs.n > 1 ? r->fw->ap.buf : 0, kv->b.buf,
                                    r->fw->norms.buf, r->fw->k.buf, r->fw->v.buf, kv->b.buf,
                                    fr.qout ? r->fw->aq.buf : 0, fr.qout ? r->fw->ad.buf : 0};
        dispatch(r, P_ATTN_FAST, b, &pc, sizeof pc, (uint32_t)cf->n_head * fs.n);
        return;
    }
    if (fr.on) {
        if (sp.n == 1) pc.ch = 0; /* unused by attn.comp (n_ctx varies by step: the plan would) */
        const VkBuffer b[N_BIND] = {pk ? pk->b.buf : kv->b.buf, r->fw->in.buf, r->fw->q.buf,
                                    r->fw->att.buf, sp.n > 1 ? r->fw->cnt.buf : 0,
                                    sp.n > 1 ? r->fw->ap.buf : r->fw->sc.buf, kv->b.buf,
                                    r->fw->norms.buf, r->fw->k.buf, r->fw->v.buf, kv->b.buf,
                                    fr.qout ? r->fw->aq.buf : 0, fr.qout ? r->fw->ad.buf : 0};
        dispatch(r, sp.n > 1 ? (grp_on ? P_ATTN_PART_FRESH_G : P_ATTN_PART_FRESH)
                             : (grp_on ? P_ATTN_FRESH_G : P_ATTN_FRESH),
                 b, &pc, sizeof pc, heads * sp.n);
        return;
    }
    if (sp.n > 1) {
        const VkBuffer b[N_BIND] = {pk ? pk->b.buf : kv->b.buf, r->fw->in.buf, r->fw->q.buf,
                                    r->fw->att.buf, r->fw->cnt.buf, r->fw->ap.buf, kv->b.buf, 0};
        dispatch(r, grp_on ? P_ATTN_PART_G : P_ATTN_PART, b, &pc, 24 * sizeof(uint32_t),
                 heads * sp.n); /* its fields */
        return;
    }
    const VkBuffer b[N_BIND] = {pk ? pk->b.buf : kv->b.buf, r->fw->in.buf, r->fw->q.buf,
                                r->fw->att.buf, 0, r->fw->sc.buf, kv->b.buf, 0};
    dispatch(r, grp_on ? P_ATTN_G : P_ATTN, b, &pc, 21 * sizeof(uint32_t), heads); /* attn.comp's fields */
}

/* The greedy id of each of the n_out rows of the output product (argmax.comp's two stages)
 * into fw->idh, for the rows that want only that: 4 bytes a row to read back, where the logits
 * are the vocabulary's floats (Gemma 3: 1 MB a row, its copy and the host's pass over it ~0.1 ms
 * each a row on the H200's host) */
static void rec_argmax(rec *r, uint32_t n_vocab, uint32_t n_out) {
    uint32_t chunk;
    const uint32_t parts = argmax_parts(n_vocab, &chunk);
    uint32_t pc[4] = {n_vocab, parts, chunk, 0};
    const VkBuffer b[N_BIND] = {0, 0, r->fw->lg.buf, r->fw->amx.buf, r->fw->idh.buf};
    dispatch(r, P_ARGMAX, b, pc, sizeof pc, n_out * parts);
    pc[3] = 1; /* stage 1 reads what stage 0 wrote */
    r->force = true;
    dispatch(r, P_ARGMAX, b, pc, sizeof pc, n_out);
}

/* one pass over rows [0, n) (n <= PASS_ROWS, as pass_take chose them) */
/* What run_pass plans a pass from besides the rows' tokens and positions (the pass inputs'
 * words: in): its rows, their sessions' groups and the pass's kind */
typedef struct pass {
    const gt_dev_row *rows;
    int32_t n, n_groups, n_lg, n_id;
    const grp *groups;
    const gt_config *cf;
    bool fresh; /* a row a session, F32 / F16 caches: each row's attention prologue inside */
    uint32_t gather_at, rope_at, rope_at_local; /* words of in */
} pass;

/* The pass's commands into r (fw->plan); returns the output rows whose logits go straight into
 * their session's (gt_vk_kv_logits) */
static uint64_t plan_pass(rec *r, const pass *P) {
    gt_vk_ctx *c = r->c;
    gt_vk_fwd *fw = r->fw;
    const gt_config *cf = P->cf;
    const gt_dev_row *rows = P->rows;
    const int32_t n = P->n, n_groups = P->n_groups, n_lg = P->n_lg, n_id = P->n_id;
    const grp *groups = P->groups;
    const bool fresh_pass = P->fresh;
    const uint32_t gather_at = P->gather_at, rope_at = P->rope_at, rope_at_local = P->rope_at_local;
    const int32_t half = cf->n_rot / 2;
    uint64_t direct = 0; /* the output rows whose logits go straight into their session's */
    const uint32_t N = (uint32_t)n, d = (uint32_t)cf->d_model, nff = (uint32_t)cf->n_ff;
    const uint32_t hk = (uint32_t)cf->head_dim_k, nrot = (uint32_t)cf->n_rot;
    const uint32_t kd = (uint32_t)(cf->n_head_kv * cf->head_dim_k);
    for (int32_t i = 0; i < fw->n_tok; i++) {
        const wref *tw = &fw->tok[i];
        struct { uint32_t w_off, type, n_in, row_bytes; float scale; uint32_t row_lo, row_hi; } pc = {
            tw->off, tw->type, tw->n_in, tw->row_bytes, cf->embed_scale, tw->row0,
            tw->row0 + tw->n_out};
        const VkBuffer b[N_BIND] = {tw->buf, fw->in.buf, 0, fw->x.buf, 0, 0, 0, 0};
        dispatch(r, P_EMBED, b, &pc, sizeof pc, N);
    }
    for (int32_t il = 0; il < cf->n_layer; il++) {
        const wref *w = &fw->lw[il * W_PER_LAYER];
        const layer_recipe *R = &fw->lr[il];
        /* decode-size steps (selfq_fits): the attention norm inside the Q, K, V products (each
         * repeats it) and, without a QK norm in between, the rotation of adjacent pairs inside
         * Q and K (the global table) */
        r->role = GEIST_ROLE_QKV;
        const bool qkv_q = act_fmt(w[W_Q].type) >= 0 && act_fmt(w[W_K].type) >= 0 &&
                           act_fmt(w[W_V].type) >= 0;
        const bool fuse_n1 = qkv_q && fused_fits(r, &w[W_Q], r->res, N) &&
                             fused_fits(r, &w[W_K], r->res, N) &&
                             fused_fits(r, &w[W_V], r->res, N) && fw->n_norm < (1u << 24);
        /* the previous layer's deferred post-norm (down's) in Q, K and V's fast products */
        if (!(fuse_n1 && fast_fits(r, &w[W_Q], r->res, N) && fast_fits(r, &w[W_K], r->res, N) &&
              fast_fits(r, &w[W_V], r->res, N)))
            settle(r, d, cf->eps);
        const bool took = r->pend != NO_NORM;
        const bool fuse_rope = fuse_n1 && R->q_norm == NO_NORM && R->rope_table == 0 &&
                               cf->rope_style == GT_ROPE_NORM && hk < 4096 && nrot < 4096 &&
                               w[W_Q].n_out == (uint32_t)cf->n_head * hk && w[W_K].n_out == kd;
        if (fuse_n1) {
            const uint32_t rb = MV_NORM | (fuse_rope ? MV_ROPE : 0u);
            /* the three run side by side (no barrier between them) and fill the device
             * together: their blocks chosen from all their outputs (mvt_block). Session 33
             * (H200, 8 sessions, plain GPU ms a pass): Gemma 3 2.005 -> 1.933, its K and V
             * (32 groups each) in blocks of 4, not a row a workgroup; SmolLM2 1.733 -> 1.728 */
            r->fill_groups = (w[W_Q].n_out + w[W_K].n_out + w[W_V].n_out + MVF_ROWS - 1) / MVF_ROWS;
            rec_mv_fused(r, &w[W_Q], r->res, fw->q.buf, N, rb, R->attn_norm, hk, nrot);
            rec_mv_fused(r, &w[W_K], r->res, fw->k.buf, N, rb, R->attn_norm, hk, nrot);
            rec_mv_fused(r, &w[W_V], r->res, fw->v.buf, N, MV_NORM, R->attn_norm, 0, 0);
            r->fill_groups = 0;
            if (took) { /* Q's product wrote the residual with it into the other buffer */
                r->res = res_other(r);
                r->pend = NO_NORM;
            }
        } else {
            const int qf = fused_fmt(r, d, &w[W_Q], &w[W_K], &w[W_V]);
            if (qf >= 0) /* the norm straight into Q, K and V's 8-bit rows */
                rec_quant_fused(r, r->res, 0, fw->xn.buf, d, N, qf, QF_NORM, R->attn_norm,
                                cf->eps, 0);
            else
                rec_norm(r, r->res, fw->xn.buf, N, d, R->attn_norm, 0, cf->eps, false);
            rec_matvec(r, &w[W_Q], fw->xn.buf, fw->q.buf, N, false);
            rec_matvec(r, &w[W_K], fw->xn.buf, fw->k.buf, N, false);
            rec_matvec(r, &w[W_V], fw->xn.buf, fw->v.buf, N, false);
        }
        r->role = GEIST_ROLE_QK_ROPE;
        const fresh fr = {fresh_pass,
                          (R->q_norm != NO_NORM ? 1u : 0u) |
                              (!fuse_rope ? 2u | (cf->rope_style == GT_ROPE_NEOX ? 4u : 0u) : 0u),
                          R->q_norm, R->k_norm, R->rope_table ? rope_at_local : rope_at,
                          fresh_pass && !r->fast
                              ? qout_of(w[W_O].type, (uint32_t)cf->head_dim_v)
                              : 0u};
        if (R->q_norm != NO_NORM && !fr.on) { /* per head, in place, before the rotary */
            rec_norm(r, fw->q.buf, fw->q.buf, N * (uint32_t)cf->n_head, hk, R->q_norm, 0, cf->eps,
                     false);
            rec_norm(r, fw->k.buf, fw->k.buf, N * (uint32_t)cf->n_head_kv, hk, R->k_norm, 0,
                     cf->eps, false);
        }
        if (!fuse_rope && !fr.on) {
            const uint32_t pc[7] = {N, (uint32_t)cf->n_head, (uint32_t)cf->n_head_kv, hk,
                                    (uint32_t)cf->n_rot, cf->rope_style == GT_ROPE_NEOX,
                                    R->rope_table ? rope_at_local : rope_at};
            const VkBuffer b[N_BIND] = {0, fw->in.buf, fw->q.buf, fw->k.buf, 0, 0, 0, 0};
            const uint32_t total = N * (uint32_t)(cf->n_head + cf->n_head_kv) * (uint32_t)half;
            dispatch(r, P_ROPE, b, pc, sizeof pc, (total + 63) / 64);
        }
        /* a ring layer's rows of several positions reaching its rows (staged_on): staged while
         * they attend, then stored (kv.h's GT_KV_STAGED: writing them first could overwrite
         * slots earlier rows see); kvstore makes the same bits both times */
        bool staged[PASS_ROWS];
        r->role = GEIST_ROLE_KV_STORE;
        for (int32_t g = 0; g < n_groups; g++) {
            const grp *G = &groups[g];
            staged[g] = staged_on(G, rows[G->r0 + G->n - 1].pos, G->kv->rows[il]);
            if (!fr.on) rec_kvstore(r, cf, G, il, staged[g]);
        }
        /* decode rows in chunks of positions (split_of), each row's last chunk merging them */
        r->role = GEIST_ROLE_ATTENTION;
        for (int32_t g = 0; g < n_groups; g++) {
            const grp *G = &groups[g];
            /* after the first: each session's own rows of att, scores, partials and counts */
            r->disjoint = g > 0;
            rec_attn(r, cf, G, il, R->window,
                     staged[g] ? (uint32_t)rows[G->r0].pos : UINT32_MAX,
                     attn_shape_at(c, fw, cf, (uint32_t)G->n, rows[G->r0 + G->n - 1].pos, G->kv,
                                   R->window),
                     fr);
        }
        r->disjoint = false;
        r->role = GEIST_ROLE_KV_STORE;
        for (int32_t g = 0; g < n_groups; g++)
            if (staged[g]) rec_kvstore(r, cf, &groups[g], il, false);
        if (fr.qout) { /* every row's heads as O's 8-bit rows (after the dispatches above) */
            r->aq_src = fw->att.buf;
            r->aq_fmt = (int)fr.qout - 1;
        }
        /* gate and up as one product when they lie back to back (GGUF's order), the FFN norm
         * and the activation inside it (MV_GATED: each workgroup holds 4 gate rows and their up
         * rows), into up's scratch, then down making its 8-bit rows of those (decode-size
         * steps; a post-norm after it as rec_residual's); else norm, gate, up, act.comp, down.
         * (The activation inside the down product instead would repeat all of them in every
         * workgroup.) */
        const wref *wg = &w[W_GATE], *wu = &w[W_UP], *wdn = &w[W_DOWN];
        const bool fuse_ffn = wg->buf == wu->buf && wg->type == wu->type && wg->n_in == wu->n_in &&
                              wg->n_out == wu->n_out && wg->n_out == nff && act_fmt(wg->type) >= 0 &&
                              act_fmt(wdn->type) >= 0 && wg->row0 == 0 && wu->row0 == 0 &&
                              fused_fits(r, wg, r->res, N) &&
                              fused_fits(r, wdn, fw->up.buf, N) &&
                              fw->n_norm < (1u << 24);
        /* O's post-norm deferred into the gated product's norm where that is a fast product;
         * the FFN's into the next layer's Q, K and V (or settled there) */
        r->role = GEIST_ROLE_ATTN_OUT;
        rec_residual(r, &w[W_O], fw->att.buf, N, R->post_attn, cf->eps,
                     fuse_ffn && fast_fits(r, wg, r->res, N));
        r->role = GEIST_ROLE_FFN_UP;
        if (fuse_ffn) {
            const bool took_o = r->pend != NO_NORM;
            rec_mv_gated(r, wg, wu, r->res, fw->up.buf, N,
                         MV_NORM | (cf->act == GT_ACT_GELU_TANH ? MV_GELU : 0), R->ffn_norm);
            if (took_o) {
                r->res = res_other(r);
                r->pend = NO_NORM;
            }
            r->role = GEIST_ROLE_FFN_DOWN;
            if (R->post_ffn == NO_NORM)
                rec_mv_fused(r, wdn, fw->up.buf, r->res, N, MV_ACC, 0, 0, 0); /* x += ffn */
            else
                rec_residual(r, wdn, fw->up.buf, N, R->post_ffn, cf->eps, r->fast);
            continue;
        }
        settle(r, d, cf->eps); /* (O defers only into the fused path's gated product) */
        const int gf = fused_fmt(r, d, &w[W_GATE], &w[W_UP], NULL);
        if (gf >= 0) /* the norm straight into gate and up's 8-bit rows */
            rec_quant_fused(r, r->res, 0, fw->xn.buf, d, N, gf, QF_NORM, R->ffn_norm, cf->eps,
                            0);
        else
            rec_norm(r, r->res, fw->xn.buf, N, d, R->ffn_norm, 0, cf->eps, false);
        rec_matvec(r, &w[W_GATE], fw->xn.buf, fw->gate.buf, N, false);
        rec_matvec(r, &w[W_UP], fw->xn.buf, fw->up.buf, N, false);
        r->role = GEIST_ROLE_FFN_ACT;
        const int df = fused_fmt(r, nff, &w[W_DOWN], NULL, NULL);
        if (df >= 0) { /* the activation straight into down's 8-bit rows */
            rec_quant_fused(r, fw->gate.buf, fw->up.buf, fw->gate.buf, nff, N, df, QF_ACT, 0, 0.0f,
                            cf->act == GT_ACT_GELU_TANH);
        } else {
            const uint32_t pc[3] = {N * nff, cf->act == GT_ACT_GELU_TANH, 0 /* pair */};
            const VkBuffer b[N_BIND] = {0, 0, fw->up.buf, fw->gate.buf, 0, 0, 0, 0};
            dispatch(r, P_ACT, b, pc, sizeof pc, (N * nff + 63) / 64);
        }
        r->role = GEIST_ROLE_FFN_DOWN;
        rec_residual(r, &w[W_DOWN], fw->gate.buf, N, R->post_ffn, cf->eps, false);
    }
    r->role = GEIST_ROLE_OUTPUT;
    settle(r, d, cf->eps);
    if (n_lg > 0) {
        rec_norm(r, r->res, fw->xn.buf, (uint32_t)n_lg, d, fw->out_norm, gather_at, cf->eps,
                 false);
        for (int32_t i = 0; i < fw->n_out; i++) /* the output's parts: rows row0.. of y */
            rec_matvec(r, &fw->out[i], fw->xn.buf, fw->lg.buf, (uint32_t)n_lg, false);
    }
    if (n_id > 0) {
        r->role = GEIST_ROLE_ARGMAX;
        rec_argmax(r, (uint32_t)cf->n_vocab, (uint32_t)n_lg);
    }
    if (n_lg > 0) { /* the logits rows wanted into host-cached memory; the ids made visible */
        cmd *e = plan_next(r);
        if (e) {
            uint64_t mask = 0; /* the output rows whose logits are copied into lgh */
            for (int32_t t = 0, k = 0; t < n; t++) {
                if (!rows[t].logits && !rows[t].argmax) continue;
                if (rows[t].logits && rows[t].kv && rows[t].logits == rows[t].kv->lgo.map &&
                    e->pc[3] < N_BIND) { /* into the session's own (gt_vk_kv_logits) */
                    direct |= 1ull << k;
                    e->bind[e->pc[3]] = rows[t].kv->lgo.buf;
                    e->pc[4 + e->pc[3]++] = (uint32_t)k;
                } else {
                    mask |= (uint64_t)(rows[t].logits != NULL) << k;
                }
                k++;
            }
            e->kind = CMD_COPY_LOGITS;
            e->role = GEIST_ROLE_LOGITS_COPY;
            e->pc[0] = (uint32_t)cf->n_vocab * (uint32_t)sizeof(float);
            e->pc[1] = (uint32_t)mask;
            e->pc[2] = (uint32_t)(mask >> 32);
        }
    }
    return direct;
}

/* The key of a decode pass's plan (a row a session) into fw->key (key_n words): everything
 * plan_pass reads but the rows' tokens and positions, which only the inputs' words hold, and of
 * the positions what the attention takes from them (attn_shape_at at each window the layers
 * have). Passes of equal keys plan the same commands (the recording's buffers too: freeing a
 * session's KV drops the recording, forget_buffer). False: no room for it (then plan). */
static bool plan_key(const rec *r, const gt_config *cf, const grp *groups, int32_t n_groups,
                     const gt_dev_row *rows, int32_t n_lg, int32_t n_id) {
    gt_vk_fwd *fw = r->fw;
    const uint32_t words = 4u + (uint32_t)n_groups * (4u + 3u * fw->n_wins);
    if (2u * words > fw->key_cap) {
        uint64_t *k = realloc(fw->key, 4u * words * sizeof *k);
        if (!k) return false;
        if (fw->key_len) /* the recorded plan's, into the new second half */
            memmove(k + 2u * words, k + fw->key_cap / 2, fw->key_len * sizeof *k);
        fw->key = k;
        fw->key_cap = 4u * words;
    }
    uint64_t *k = fw->key;
    uint32_t w = 0;
    k[w++] = (uint64_t)n_groups | (uint64_t)r->fast << 32 | (uint64_t)r->fast_attn << 33;
    k[w++] = (uint64_t)(uint32_t)n_lg | (uint64_t)(uint32_t)n_id << 32;
    k[w++] = (uint64_t)fw->cap_ctx | (uint64_t)fw->cap_split << 32;
    k[w++] = (uint64_t)fw->cap_rows;
    for (int32_t g = 0; g < n_groups; g++) {
        const gt_dev_row *rw = &rows[groups[g].r0];
        k[w++] = (uint64_t)(uintptr_t)rw->kv;
        k[w++] = (uint64_t)(uintptr_t)rw->prefix;
        k[w++] = (uint64_t)(uint32_t)rw->n_prefix;
        k[w++] = (uint64_t)(rw->logits != NULL) | (uint64_t)(rw->argmax != NULL) << 1 |
                 (uint64_t)(rw->logits && rw->logits == rw->kv->lgo.map) << 2;
        for (uint32_t i = 0; i < fw->n_wins; i++) {
            const attn_shape a = attn_shape_at(r->c, fw, cf, 1, rw->pos, rw->kv, fw->wins[i]);
            /* (the fast attention takes only fs: rec_attn) */
            const uint64_t sp = (uint64_t)a.sp.n | (uint64_t)(a.sp.n > 1 ? a.sp.ch : 0u) << 32;
            k[w++] = r->fast_attn ? 0u : sp;
            k[w++] = (uint64_t)a.fs.n | (uint64_t)a.fs.ch << 32;
            k[w++] = r->fast_attn ? 0u : a.fits_group;
        }
    }
    fw->key_n = w;
    return true;
}

/* A row's rotary cos/sin at pos (n_rot floats: cos of its half, then sin) for the global layers
 * (tab 0) or the local (sliding) ones, computed as session/forward.c's rope_angles */
static void rope_row(const geist_model *m, int32_t pos, int tab, float *cs) {
    const gt_config *cf = &m->cfg;
    const float *inv_freq = tab ? m->inv_freq_local : m->inv_freq_global;
    const float p = (float)pos * (tab ? cf->rope_scale_local : cf->rope_scale_global);
    const int32_t half = cf->n_rot / 2;
    for (int32_t i = 0; i < half; i++) {
        const double theta = (double)p * (double)inv_freq[i];
        cs[i] = (float)cos(theta);
        cs[half + i] = (float)sin(theta);
    }
}

/* The angles of the positions a decode pass's rows take next (each one on), made while the
 * device runs the pass, for the next pass's inputs (run_pass): Gemma 3's 256 angles a row, two
 * tables, were 25-50 us of an 8-session pass's host time on the H100's host (session 34) */
static void rope_ahead(gt_vk_fwd *fw, const geist_model *m, const gt_dev_row *rows, int32_t n) {
    const size_t nr = (size_t)m->cfg.n_rot;
    if (!fw->ahead) {
        fw->ahead = malloc(AHEAD_ROWS * 2 * nr * sizeof *fw->ahead);
        if (!fw->ahead) return;
    }
    int32_t k = 0;
    for (int32_t t = 0; t < n && k < AHEAD_ROWS; t++) {
        const int32_t pos = rows[t].pos + 1;
        bool have = false; /* (sessions at one position: made once) */
        for (int32_t j = 0; j < k && !have; j++) have = fw->ahead_pos[j] == pos;
        if (have) continue;
        for (int tab = 0; tab < 2; tab++)
            rope_row(m, pos, tab, fw->ahead + ((size_t)k * 2 + (size_t)tab) * nr);
        fw->ahead_pos[k++] = pos;
    }
    for (; k < AHEAD_ROWS; k++) fw->ahead_pos[k] = -1;
}

static geist_status run_pass(gt_vk_model *vm, const gt_dev_row *rows, int32_t n, gt_err *err) {
    gt_vk_ctx *c = vm->ctx;
    gt_vk_fwd *fw = vm->fwd;
    const geist_model *m = vm->model;
    const gt_config *cf = &m->cfg;
    /* n_lg: the rows of the output product (logits, greedy ids or both), n_id: of those, the
     * rows whose greedy id comes back (argmax.comp) */
    int32_t max_ctx = 1, n_groups = 0, n_lg = 0, n_id = 0;
    grp groups[PASS_ROWS];
    for (int32_t t = 0; t < n; t++) {
        const gt_dev_row *rw = &rows[t];
        if (rw->kv->vm != vm || rw->pos >= rw->kv->max_seq || rw->pos < rw->n_prefix ||
            rw->n_prefix != rw->kv->n_prefix ||
            (rw->prefix != NULL) != (rw->n_prefix > 0) ||
            (rw->prefix && (rw->prefix->vm != vm || rw->n_prefix > rw->prefix->max_seq)))
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "vulkan: a row's KV does not fit");
        if (rw->pos + 1 > max_ctx) max_ctx = rw->pos + 1;
        if (t == 0 || rw->kv != rows[t - 1].kv) {
            groups[n_groups++] = (grp){t, 0, rw->kv, rw->prefix, rw->n_prefix};
        } else if (rw->pos != rows[t - 1].pos + 1) {
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                           "vulkan: a session's rows of one step must be consecutive positions");
        }
        groups[n_groups - 1].n++;
        n_lg += rw->logits || rw->argmax;
        n_id += rw->argmax != NULL;
    }
    geist_status st = grow_scratch(vm, n > NARROW_ROWS ? PASS_ROWS : NARROW_ROWS, max_ctx, err);
    if (st) return st;
    /* one row a session (decode, batched or not), F32 / F16 caches, heads the attention's tiles
     * hold: each row's QK norm, rotary and KV store inside the attention (ATTN_FRESH) */
    bool fresh_pass = cf->head_dim_k <= 256 && cf->head_dim_v <= 256 && cf->head_dim_k % 2 == 0 &&
                      cf->head_dim_v % 2 == 0 && cf->n_rot <= cf->head_dim_k &&
                      cf->n_head % cf->n_head_kv == 0;
    for (int32_t g = 0; g < n_groups && fresh_pass; g++)
        fresh_pass = groups[g].n == 1 && (groups[g].kv->mode == GEIST_KV_F32 ||
                                          groups[g].kv->mode == GEIST_KV_F16);
    /* GEIST_DEVICE_FAST's attention (attnfast.comp) for every row of such a pass, one session's
     * or several sessions' decoding together, where a prefix's cache is F32 or F16 too */
    bool fast_attn = fresh_pass && fw->pipe[P_ATTN_FAST] != VK_NULL_HANDLE;
    for (int32_t g = 0; g < n_groups && fast_attn; g++)
        fast_attn = !groups[g].prefix || groups[g].prefix->mode == GEIST_KV_F32 ||
                    groups[g].prefix->mode == GEIST_KV_F16;

    /* the pass's inputs: per row token, pos; the rows wanting logits; the rotary cos/sin of
     * every row, computed as session/forward.c's rope_angles, for the global layers, then the
     * local (sliding) ones */
    const uint64_t t_plan = now_ns();
    uint32_t *in = fw->in.map;
    const uint32_t gather_at = 4u * (uint32_t)n, rope_at = gather_at + (uint32_t)n;
    const uint32_t rope_at_local = rope_at + (uint32_t)n * (uint32_t)cf->n_rot;
    for (int32_t t = 0, k = 0; t < n; t++) {
        in[4 * t] = (uint32_t)rows[t].token;
        in[4 * t + 1] = (uint32_t)rows[t].pos;
        in[4 * t + 2] = in[4 * t + 3] = 0;
        if (rows[t].logits || rows[t].argmax) in[gather_at + (uint32_t)k++] = (uint32_t)t;
        int32_t made = -1; /* the angles rope_ahead made for this position, if any */
        for (int32_t j = 0; fw->ahead && j < AHEAD_ROWS && made < 0; j++)
            if (fw->ahead_pos[j] == rows[t].pos) made = j;
        for (int tab = 0; tab < 2; tab++) {
            float *cs = (float *)(void *)(in + (tab ? rope_at_local : rope_at) +
                                          (size_t)t * (size_t)cf->n_rot);
            if (made >= 0)
                memcpy(cs, fw->ahead + ((size_t)made * 2 + (size_t)tab) * (size_t)cf->n_rot,
                       (size_t)cf->n_rot * sizeof *cs);
            else
                rope_row(m, rows[t].pos, tab, cs);
        }
    }

    rec r = {.c = c, .fw = fw, .aq_src = VK_NULL_HANDLE, .aq_fmt = -1, .mm = fw->mm, .wide = fw->wide,
             .spread_below = fw->spread_below,
             .fast = fw->pipe[P_MVFAST] != VK_NULL_HANDLE &&
                     (n == 1 || (fast_attn && (uint32_t)n <= FAST_ROWS)),
             .n_rows = (uint32_t)n, .fast_attn = fast_attn,
             .role = GEIST_ROLE_EMBED, .res = fw->x.buf, .pend = NO_NORM};
    /* a pass of a row a session (decode) whose plan key is the last pass's: its commands are
     * the recorded ones (only the inputs' words differ), planned and compared no more */
    const bool keyed = n_groups == n && plan_key(&r, cf, groups, n_groups, rows, n_lg, n_id);
    uint64_t direct = 0; /* the output rows whose logits go straight into their session's */
    const bool cached = keyed && fw->cb_valid && fw->key_len == fw->key_n &&
                        memcmp(fw->key, fw->key + fw->key_cap / 2,
                               fw->key_len * sizeof *fw->key) == 0;
    if (cached) {
        r.n = fw->n_last;
        direct = fw->last_direct;
    } else {
        const pass P = {rows, n, n_groups, n_lg, n_id, groups, cf, fresh_pass, gather_at, rope_at,
                        rope_at_local};
        fw->key_len = 0; /* fw->plan is this pass's from here */
        direct = plan_pass(&r, &P);
        fw->stats.planned++;
    }
    if (r.failed) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "vulkan: out of memory (a step's plan)");
    /* the recorded command buffer again when the plan is the last one's, else a new recording */
    const uint64_t t_rec = now_ns();
    const bool same = cached || (fw->cb_valid && fw->n_last == r.n &&
                                 memcmp(fw->last, fw->plan, r.n * sizeof *fw->plan) == 0);
    if (!cached && keyed) { /* the key of the plan (kept where it is recorded below) */
        fw->key_len = fw->key_n;
        memcpy(fw->key + fw->key_cap / 2, fw->key, fw->key_n * sizeof *fw->key);
        fw->last_direct = direct;
    }
    if (!same) {
        fw->cb_valid = false;
        if (fw->ds_used + r.n > fw->ds_cap) { /* room for every set of this pass */
            forget_recordings(vm);
            if (r.n > fw->ds_cap && (st = make_dpool(vm, 2 * r.n, err))) return st;
        }
        if (c->profile) ensure_queries(c, fw, r.n + 1);
        if (!record(c, fw, r.n))
            return gt_fail(err, GEIST_ERR_INTERNAL, "vulkan: recording the step failed");
        cmd *keep = realloc(fw->last, (r.n ? r.n : 1) * sizeof *keep);
        if (keep) {
            memcpy(keep, fw->plan, r.n * sizeof *keep);
            fw->last = keep;
            fw->n_last = r.n;
            fw->cb_valid = true;
        }
        fw->stats.recorded++;
    }
    if (!cached) { /* (a cached pass's plan is the recorded one: its counts kept) */
        fw->last_dispatches = fw->last_barriers = 0;
        for (uint32_t i = 0; i < r.n; i++) {
            fw->last_dispatches += fw->plan[i].kind == CMD_DISPATCH;
            fw->last_barriers += fw->plan[i].barrier;
        }
    }
    fw->stats.dispatches += fw->last_dispatches;
    fw->stats.barriers += fw->last_barriers;
    const uint64_t t_sub = now_ns();
    /* a pass of few rows (decode) is expected to take what the last of as many rows took */
    uint64_t *last_ns = n <= WAIT_ROWS ? &fw->wait_ns[n - 1] : NULL;
    VkResult vr = gt_vk_submit(c, fw->cb, fw->fence);
    if (vr == VK_SUCCESS) {
        /* the next positions' angles while the device runs this pass (decode: a row a session) */
        if (keyed && n <= AHEAD_ROWS) rope_ahead(fw, m, rows, n);
        vr = gt_vk_wait_until(c, fw->fence, last_ns && *last_ns ? t_sub + *last_ns : 0);
    }
    if (vr != VK_SUCCESS) {
        fw->cb_valid = false;
        return gt_fail(err, vr == VK_ERROR_DEVICE_LOST ? GEIST_ERR_INTERNAL : GEIST_ERR_OUT_OF_MEMORY,
                       "vulkan: the step failed on the device (%d)", (int)vr);
    }
#ifdef GEIST_VK_CLOCK
    bool decode = n <= NARROW_ROWS; /* the clock's table: decode passes, a row a session */
    for (int32_t i = 0; i < n && decode; i++)
        for (int32_t j = 0; j < i && decode; j++) decode = rows[i].kv != rows[j].kv;
    gt_vk_clock_collect(&fw->clk, decode);
#endif
    const uint64_t t_done = now_ns();
    const size_t nv = (size_t)cf->n_vocab;
    const float *lg = fw->lgh.map;
    const int32_t *ids = fw->idh.map;
    for (int32_t t = 0, k = 0; t < n; t++) {
        if (!rows[t].logits && !rows[t].argmax) continue;
        if (rows[t].logits && !(direct >> k & 1u))
            memcpy(rows[t].logits, lg + (size_t)k * nv, nv * sizeof(float));
        if (rows[t].argmax) *rows[t].argmax = ids[k];
        k++;
    }
    const uint64_t t_end = now_ns();
    gt_dev_stats *stt = &fw->stats;
    uint64_t pass_gpu = 0; /* the device's time for the pass, where the queue has timestamps */
    if (fw->qp && c->profile && fw->qp_cap >= r.n + 1 && fw->ts) { /* by role */
        const uint64_t *ts = fw->ts;
        if (c->f.GetQueryPoolResults(c->dev, fw->qp, 0, r.n + 1, (r.n + 1) * sizeof *ts, fw->ts,
                                     sizeof *ts, VK_QUERY_RESULT_64_BIT) == VK_SUCCESS) {
            for (uint32_t i = 0; i < r.n; i++) {
                const uint32_t role = fw->plan[i].role < GEIST_DEVICE_ROLES ? fw->plan[i].role : 0;
                stt->role_ns[role] += (uint64_t)((double)((ts[i + 1] - ts[i]) & fw->ts_mask) * fw->ts_ns);
                stt->role_calls[role]++;
            }
            pass_gpu = (uint64_t)((double)((ts[r.n] - ts[0]) & fw->ts_mask) * fw->ts_ns);
            stt->gpu_ns += pass_gpu;
            stt->gpu_timed++;
        }
    } else if (fw->qp) {
        uint64_t ts[2];
        if (c->f.GetQueryPoolResults(c->dev, fw->qp, 0, 2, sizeof ts, ts, sizeof ts[0],
                                     VK_QUERY_RESULT_64_BIT) == VK_SUCCESS) {
            pass_gpu = (uint64_t)((double)((ts[1] - ts[0]) & fw->ts_mask) * fw->ts_ns);
            stt->gpu_ns += pass_gpu;
            stt->gpu_timed++;
        }
    }
    /* the next pass of as many rows: expected to take the device's time of this one (else the
     * wait's, which includes the host's wake-up) */
    if (last_ns) *last_ns = pass_gpu ? pass_gpu : t_done - t_sub;
    stt->passes++;
    stt->rows += (uint64_t)n;
    stt->logit_rows += (uint64_t)(n_lg - n_id);
    stt->id_rows += (uint64_t)n_id;
    if (r.fast_attn) stt->fast_attn_rows += (uint64_t)n;
    if (r.fast) stt->fast_rows += (uint64_t)n;
    stt->plan_ns += t_rec - t_plan;
    stt->record_ns += t_sub - t_rec;
    stt->wait_ns += t_done - t_sub;
    stt->readback_ns += t_end - t_done;
    return GEIST_OK;
}

geist_status gt_vk_forward(gt_vk_model *vm, const gt_dev_row *rows, int32_t n, gt_err *err) {
    if (!vm->fwd) return gt_fail(err, GEIST_ERR_UNSUPPORTED, "%s", vm->refuse);
    pthread_mutex_lock(&vm->fwd->lock);
    geist_status st = GEIST_OK;
    for (int32_t done = 0, k; done < n && !st; done += k) {
        k = pass_take(vm->ctx, rows + done, n - done, pass_cap(&vm->model->cfg));
        st = run_pass(vm, rows + done, k, err);
    }
    pthread_mutex_unlock(&vm->fwd->lock);
    return st;
}

void gt_vk_stats(gt_vk_model *vm, gt_dev_stats *out) {
    memset(out, 0, sizeof *out);
    if (!vm->fwd) return;
    pthread_mutex_lock(&vm->fwd->lock);
    *out = vm->fwd->stats;
    pthread_mutex_unlock(&vm->fwd->lock);
}
