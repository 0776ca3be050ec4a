/* The loaded model: parsed GGUF, architecture config, weight views, tokenizer. Immutable after
 * load and shared by all sessions on any thread (only the error slot is mutable, under a lock). */
#ifndef GEIST_MODEL_H
#define GEIST_MODEL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "../backend/backend.h"
#include "../gguf/gguf.h"
#include "geist.h"

struct gt_tokenizer;
struct gt_grammar_cache;
struct gt_pool;
struct gt_runtime;

typedef enum gt_arch {
    GT_ARCH_LLAMA = 0,
    GT_ARCH_GEMMA3 = 1,
    GT_ARCH_QWEN2 = 2,
    GT_ARCH_QWEN3 = 3,
    GT_ARCH_PHI3 = 4,
    GT_ARCH_GEMMA2 = 5
} gt_arch;
typedef enum gt_rope_style {
    GT_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]) */
    GT_ROPE_NEOX = 1  /* rotate x[i] with x[i + n_rot/2] */
} gt_rope_style;
typedef enum gt_act { GT_ACT_SILU = 0, GT_ACT_GELU_TANH = 1 } gt_act;

/* Architecture facts, all read from metadata (arch.c says which key gives which field). */
typedef struct gt_config {
    gt_arch arch;
    char arch_name[32];
    int32_t n_layer, d_model, n_head, n_head_kv, head_dim_k, head_dim_v, n_ff, n_vocab;
    int32_t n_ctx_train, n_rot, sliding_window;
    float eps;
    float rope_base, rope_base_local; /* global layers / sliding-window layers */
    float rope_scale_global;          /* position multiplier (linear rope scaling), 1 = none */
    float rope_scale_local;           /* sliding-window layers' (Gemma 3: 1; else the global) */
    float attn_scale, embed_scale;
    /* tanh soft-capping (Gemma 2): scores = cap * tanh(scores / cap) after the attention scale,
     * logits likewise after the output product; 0 = none */
    float attn_softcap, final_softcap;
    bool rope_freq_factors; /* the file's rope_freqs (Llama 3.x) divide the rotary frequencies */
    gt_rope_style rope_style;
    gt_act act;
    bool qk_norm, post_norms;
} gt_config;

/* A 1-D vector (norm weights) as floats: aliased when stored as F32, else an owned copy. */
typedef struct gt_vec {
    const float *data;
    float *owned;
    int64_t n;
} gt_vec;

typedef struct gt_layer {
    gt_vec attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm, post_ffn_norm;
    /* fused files (Phi-3: attn_qkv, a 2 * n_ff ffn_up) are bound as row views of the fused
     * tensor, so every architecture runs the same products */
    gt_weight wq, wk, wv, wo, w_gate, w_up, w_down;
    /* optional biases (Qwen 2: q/k/v; any file: attn_output), n = 0 when absent; a fused
     * attn_qkv.bias is owned by bq and viewed by bk, bv */
    gt_vec bq, bk, bv, bo;
    bool sliding; /* sliding-window attention layer */
} gt_layer;

struct geist_model {
    /* 1 for the caller's handle + 1 per session (prefixes hold a session): geist_model_free only
     * drops the handle's, so freeing in the wrong order (a game's teardown, a garbage collector)
     * never leaves a session with a dangling model */
    atomic_int refs;
    geist_engine *engine;
    const gt_backend *backend;
    gguf_file gguf;
    void *map;        /* file mapping owned by the model (load_file), else NULL */
    size_t map_size;
    gt_config cfg;
    gt_weight tok_embd, output;
    gt_vec output_norm;
    gt_layer *layers;
    float *inv_freq_global, *inv_freq_local; /* n_rot/2 each */
    /* tokenizer/ sits above model/, so the loader (api) hands the model its tokenizer and the
     * function that frees it: the model's release never calls up. NULL, NULL without one. */
    struct gt_tokenizer *tokenizer;
    void (*tokenizer_free)(struct gt_tokenizer *t);
    /* grammar/ sits above model/ too: compiled grammars and the sorted vocabulary (thread-safe,
     * grammar.h), created by api/ at load with the function that frees it. NULL, NULL without. */
    struct gt_grammar_cache *grammar_cache;
    void (*grammar_cache_free)(struct gt_grammar_cache *c);
    void *dev;        /* the device backend's model (backend.h gt_device_ops), else NULL */
    uint64_t owned_weight_bytes;
    uint64_t weight_bytes;
    uint64_t identity; /* hash of the GGUF bytes before the tensor data (session snapshots) */
    pthread_mutex_t err_lock;
    gt_err last_err;
};

struct geist_engine {
    atomic_int refs; /* 1 for the caller's handle + 1 per model, as geist_model.refs */
    const gt_backend *backend;
    int32_t n_threads;
    struct gt_pool *pool; /* n_threads - 1 workers for the matmuls (util/pool.h) */
    struct gt_runtime *runtime; /* async requests (runtime/runtime.h) */
    void *dev_ctx; /* the device backend's engine context (backend.h gt_device_ops), else NULL */
    char device_name[128]; /* the device's name, "" for host backends */
};

/* Reference counts (see geist_model.refs): the last release destroys the model and releases its
 * engine. */
void gt_model_retain(geist_model *m);
void gt_model_release(geist_model *m);
/* Drops one engine reference (see geist_engine.refs); the last frees the pool and the struct.
 * The runtime is not touched: geist_engine_free stops and frees it before dropping the handle's
 * reference, so this never calls up into runtime/. */
void gt_engine_release(geist_engine *e);

/* The loading body: a model over data[0..size) (map: the file mapping it then owns, or NULL)
 * with the GGUF parsed and validated, its identity hashed and its architecture and weights bound;
 * holds one engine reference. No tokenizer yet (the caller attaches one). On failure nothing is
 * kept (a map stays the caller's to unmap) and err says why. */
geist_status gt_model_create(geist_engine *engine, const void *data, size_t size, void *map,
                             geist_model **out, gt_err *err);

/* Accessors used by the other rooms (tokenizer API glue, chat templates, sessions). */
const gguf_file *gt_model_gguf(const geist_model *m);
const struct gt_tokenizer *gt_model_tokenizer(const geist_model *m);
/* Records err as the model's last error (thread-safe) and as this thread's last error; returns
 * err->status. For API calls on the caller's thread only (the scheduler thread reports through
 * gt_err). */
geist_status gt_model_record_error(const geist_model *m, const gt_err *err);

/* Reads the architecture config and binds the weights (arch.c). */
geist_status gt_arch_load(geist_model *m, gt_err *err);
void gt_arch_free(geist_model *m);

#endif
