/* The backend interface: every compute kernel the forward pass needs, behind one vtable, so that
 * cpu_x86, cpu_neon, vulkan and metal plug in beside cpu_scalar (the reference). Ops marked
 * optional may be NULL; the rest are required. Elementwise steps (norms, rotary, activations:
 * session/forward.c, util/vmath.c) and attention (session/kv.c) are not backend ops: the CPU runs
 * them for every backend, with the SIMD that the backend's `simd` permits (and the CPU has,
 * util/cpu.h), in the same arithmetic either way (one exception below), so CPU backends agree:
 *   cpu_scalar (and its exact variant): GT_SIMD_NONE, plain C loops only: attention through
 *     kv.c's portable vector helpers and plain softmaxes, activations through vmath.c's
 *     gated_plain (e^x by gt_vexp1, util/vexp_x86.h), KV rows converted to F16 one by one.
 *   cpu_x86_avx2: GT_SIMD_AVX2: the AVX2/F16C/FMA attention and activations.
 *   cpu_x86 (the default on x86): GT_SIMD_AVX2 for these steps on every CPU (its products use
 *     AVX-512 VNNI where present: integer sums, the same bits), so it matches cpu_scalar bit for
 *     bit everywhere.
 *   cpu_x86_avx512 (asked for by name): GT_SIMD_AVX512: as cpu_x86, and F16 attention by the
 *     AVX-512 kernels where the CPU has AVX-512F and the head dims are multiples of 16. Those
 *     kernels accumulate by fused multiply-adds (their own order, not the canonical one), so
 *     there the logits differ from cpu_scalar's by rounding, which quantized activations can
 *     turn into parting greedy ids (tests/core/test_cpu_x86.py says what is checked there).
 * A backend that sets no `simd` (0) gets the plain loops. The sampler of a runtime request on a
 * host backend follows the same permission (gen/gen.c); on a device backend, and as a standalone
 * geist_sampler, it uses the CPU's best (the same ids). */
#ifndef GEIST_BACKEND_H
#define GEIST_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "geist.h"
#include "util/cpu.h"
#include "util/util.h"

struct geist_model;

/* A weight matrix as a view into the model's span: n_out rows of n_in values of `type`. */
typedef struct gt_weight {
    const uint8_t *data; /* NULL: absent (optional tensors) */
    uint32_t type;
    int64_t n_in;
    int64_t n_out;
    size_t row_bytes;
} gt_weight;

/* ---- The device interface (DESIGN.md, "Backends are devices") -------------------------------
 * A backend with `device` == NULL is a host backend (cpu_scalar, cpu_x86): its weights are views
 * into the caller's span (aliased, zero owned bytes), each session's KV lives in host memory in
 * the formats of session/kv.c, and its forward pass is the host layer recipe (session/forward.c:
 * norms, rotary, attention, activations on the CPU at the backend's `simd`, products through the
 * kernels below). A device backend (vulkan) implements every entry of gt_device_ops: it holds its
 * own copy (or import) of the weights, every session's KV, and runs a whole batched step itself;
 * the kernels below then serve only host-side helpers (norm vectors at load, geist_vec_dot). */

/* One engine's view of its device, from probe. */
typedef struct gt_dev_probe {
    char name[128];          /* the device's own name ("llvmpipe (LLVM 15.0.6, 256 bits)") */
    int32_t index;           /* its index among the devices the loader lists */
    bool unified_memory;     /* device-local memory is host-visible (integrated, CPU) */
    bool host_import;        /* VK_EXT_external_memory_host (or the like) is enabled */
    uint64_t import_align;   /* alignment of an imported host range (0: no import) */
    uint64_t max_buffer;     /* the largest storage buffer range one binding may see */
    uint64_t max_alloc;      /* the largest single allocation */
    uint64_t device_local;   /* bytes of the device-local heaps */
} gt_dev_probe;

/* Bytes a device model holds, by category (geist_memory_report's device fields). */
typedef struct gt_dev_memory {
    uint64_t host_owned;   /* host memory the backend allocated (tables, copies) */
    uint64_t device_local; /* device memory it allocated (weights uploaded, KV, scratch) */
    uint64_t imported;     /* caller pages used in place through host-pointer import */
    uint64_t staging;      /* host-visible staging buffers it still holds */
} gt_dev_memory;

/* A session's KV on the device: the backend's own object. */
typedef struct gt_dev_kv gt_dev_kv;

typedef struct gt_dev_kv_desc {
    int32_t kv_mode;     /* a geist_kv_mode */
    int32_t max_seq_len; /* positions the session may hold */
    int32_t n_layer;
    const int32_t *rows; /* n_layer: rows per layer for the session's own positions
                          * (max_seq_len - n_prefix; a ring of min(window, that) on sliding
                          * layers: session/kv.c's gt_kv_layer_rows), storage position q in row
                          * q % rows */
    int32_t n_prefix;    /* positions of the shared prefix the session starts on (0: none) */
} gt_dev_kv_desc;

/* One row of a batched step. */
typedef struct gt_dev_row {
    int32_t token, pos;      /* the token at its position (the caller checked both) */
    gt_dev_kv *kv;           /* the session's own KV (positions n_prefix..) */
    const gt_dev_kv *prefix; /* a shared prefix's KV, or NULL */
    int32_t n_prefix;
    float *logits;           /* NULL, or n_vocab floats to receive this row's logits */
    int32_t *argmax;         /* NULL, or where the row's greedy id lands (a device with
                              * gt_device_ops.argmax): the first id of its largest logit, NaN
                              * never, +inf as FLT_MAX (sampler.h's greedy rule), -1 when every
                              * logit is NaN or -inf; without logits, the logits stay on the device */
} gt_dev_row;

/* The engine options a device backend reads (geist_engine_options' device fields). */
typedef struct gt_dev_options {
    const char *device;    /* NULL or "auto", an index, or a substring of a device name */
    const char *loader;    /* the loader library to open; NULL: the system's names */
    uint64_t memory_limit; /* most device bytes the backend may allocate; 0: the device's */
    bool no_import;        /* never import host pointers (copy instead) */
    int32_t attn_chunk;    /* geist_engine_options.device_attn_chunk (checked: -1..4096) */
    bool profile;          /* GEIST_DEVICE_PROFILE: a timestamp after every dispatch */
    int32_t int_dot;       /* integer dot products: 1 GEIST_DEVICE_INT_DOT, -1 GEIST_DEVICE_NO_INT_DOT,
                              0 the device's choice */
    bool attn_per_head;    /* GEIST_DEVICE_ATTN_PER_HEAD: no grouped attention (vk_forward.c) */
    bool fast; /* GEIST_DEVICE_FAST: decode's products on float activations, its attention fast */
} gt_dev_options;

/* A device's forward-pass counters since the model's load (geist_model_device_stats): passes
 * (command buffers submitted: a step of more than the device's rows per pass takes several),
 * rows, rows whose logits came back, dispatches and barriers inside them, passes whose commands
 * were recorded anew (the others resubmitted the last recording), and where the host's time went:
 * planning the pass (inputs, the command list), recording, submit until the fence signalled,
 * copying the logits out; gpu_ns: the device's own time between timestamps around the pass (over
 * gpu_timed passes; 0 where the queue has no timestamps). */
typedef struct gt_dev_stats {
    uint64_t passes, rows, logit_rows, dispatches, barriers, recorded;
    uint64_t plan_ns, record_ns, wait_ns, readback_ns, gpu_ns, gpu_timed;
    uint64_t role_ns[GEIST_DEVICE_ROLES], role_calls[GEIST_DEVICE_ROLES]; /* profiling */
    uint64_t id_rows; /* rows whose greedy id came back (gt_dev_row.argmax) without logits */
    uint64_t fused_fma; /* 1: the kernels take the device's once-rounded fma (vulkan's probe) */
    uint64_t fast_attn_rows; /* rows that attended in GEIST_DEVICE_FAST's attention */
    uint64_t fast_rows;      /* rows of passes of GEIST_DEVICE_FAST's products */
    uint64_t planned;        /* passes planned (the others reused the last one's plan) */
} gt_dev_stats;

typedef struct gt_device_ops {
    /* Opens the device the options name; fails cleanly (no loader, no device) with err naming
     * why. */
    geist_status (*engine_init)(const gt_dev_options *o, void **ctx, gt_err *err);
    void (*engine_free)(void *ctx);
    void (*probe)(const void *ctx, gt_dev_probe *out);
    /* Takes the model's weight views (imports, uploads); on failure nothing stays allocated.
     * load_file: the span is a file mapping the model owns (it may be unmapped afterwards; the
     * backend sets *drop_span when it no longer reads it). */
    geist_status (*model_init)(void *ctx, struct geist_model *m, bool load_file, void **dm,
                               bool *drop_span, gt_err *err);
    void (*model_free)(void *dm);
    void (*memory)(const void *dm, gt_dev_memory *out);
    /* Refuses modes it does not run, naming the supported ones. */
    geist_status (*kv_alloc)(void *dm, const gt_dev_kv_desc *d, gt_dev_kv **out, gt_err *err);
    void (*kv_free)(gt_dev_kv *kv);
    /* Host images of rows [row0, row0 + n) of one layer, in session/kv.c's row format. */
    geist_status (*kv_read)(gt_dev_kv *kv, int32_t layer, int32_t row0, int32_t n, void *k,
                            void *v, gt_err *err);
    geist_status (*kv_write)(gt_dev_kv *kv, int32_t layer, int32_t row0, int32_t n,
                             const void *k, const void *v, gt_err *err);
    uint64_t (*kv_bytes)(const gt_dev_kv *kv);
    /* Optional (NULL: none): n_vocab floats of host memory, owned by kv (valid until kv_free),
     * that the device writes a row's logits into when gt_dev_row.logits points there, so the
     * host copies nothing (a session keeps its logits there); NULL when kv has none. */
    float *(*kv_logits)(gt_dev_kv *kv);
    /* One step: every layer for rows of one or more sessions (a session's rows contiguous). */
    geist_status (*forward)(void *dm, const gt_dev_row *rows, int32_t n, gt_err *err);
    /* Optional (NULL: no counters): the forward pass's counters since the model's load. */
    void (*stats)(void *dm, gt_dev_stats *out);
    /* The rows one forward call takes to best effect (its rows per pass): a prompt's chunk in
     * session/forward.c's gt_forward; 0: the host's chunk. */
    int32_t step_rows;
    /* forward fills gt_dev_row.argmax (else the caller asks for logits and picks on the host) */
    bool argmax;
} gt_device_ops;

typedef struct gt_backend {
    const char *name;
    /* Is this backend usable on the running machine? (CPU features, a device.) */
    bool (*available)(void);
    /* Y[t * ldy + r] = dot(W[r], X[t]) for r in [r0, r1), t in [0, n_tok). X is n_tok rows of
     * w->n_in floats. tmp: w->n_in floats of scratch owned by the caller. */
    void (*matmul)(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                   int64_t r0, int64_t r1, float *tmp);
    /* Dequantizes row r of w into dst (w->n_in floats): embedding lookups. */
    void (*get_row)(const gt_weight *w, int64_t r, float *dst);
    float (*vec_dot)(uint32_t type, const void *row, const float *x, int64_t n);
    /* Optional (NULL: matmul only). Quantized activations, prepared once per product and shared
     * by all the row tasks (act_quant.h). act_row_bytes: bytes per token row for a weight of
     * `type` and n_in inputs, 0 when the type takes float activations (then use matmul).
     * quantize_acts: n_tok rows of x into xq (n_tok * act_row_bytes bytes, 64-byte aligned).
     * matmul_q: as matmul, from those rows; the same numbers as matmul. */
    size_t (*act_row_bytes)(uint32_t type, int64_t n_in);
    void (*quantize_acts)(uint32_t type, const float *x, int64_t n_tok, int64_t n_in, void *xq);
    void (*matmul_q)(const gt_weight *w, const void *xq, int64_t n_tok, float *y, int64_t ldy,
                     int64_t r0, int64_t r1);
    /* The widest SIMD the CPU-side steps may use for this backend (see the top); 0 = plain C. */
    gt_simd simd;
    /* The device interface above; NULL: a host backend. */
    const gt_device_ops *device;
} gt_backend;

/* matmul for backends with matmul_q: quantizes x (a heap buffer) and calls matmul_q; returns
 * false, y untouched, when the type takes float activations or memory is short. */
bool gt_backend_matmul_via_q(const gt_backend *be, const gt_weight *w, const float *x,
                             int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1);

const gt_backend *gt_backend_cpu_scalar(void);
/* cpu_scalar with exact float activations (GEIST_ACTIVATIONS_F32); see act_quant.h. */
const gt_backend *gt_backend_cpu_scalar_exact(void);
/* The Vulkan backend (vulkan/); NULL when the library was built without Vulkan headers. */
const gt_backend *gt_backend_vulkan(void);
/* The Metal backend (metal/metal.m, Darwin only); NULL elsewhere. */
const gt_backend *gt_backend_metal(void);
/* NULL if no backend of that name is compiled in. "auto" picks the best available. */
const gt_backend *gt_backend_find(const char *name);
/* Comma-separated names of the compiled-in backends. */
const char *gt_backend_names(void);

#endif
