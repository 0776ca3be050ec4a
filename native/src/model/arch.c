/* Architecture configs (llama, qwen2, qwen3, phi3, gemma2, gemma3) from GGUF metadata, and weight
 * views with shape checks. Nothing here hard-codes a model size: every dimension comes from the
 * file. The recipes follow llama.cpp's reading of the same keys and tensors (its outputs on these
 * architectures' fixtures are the committed oracle, tests/data/llama_cpp/). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/ggml_types.h"
#include "model.h"

typedef struct arch_desc {
    const char *name;
    gt_arch arch;
} arch_desc;

static const arch_desc k_archs[] = {{"llama", GT_ARCH_LLAMA}, {"qwen2", GT_ARCH_QWEN2},
                                    {"qwen3", GT_ARCH_QWEN3}, {"phi3", GT_ARCH_PHI3},
                                    {"gemma2", GT_ARCH_GEMMA2}, {"gemma3", GT_ARCH_GEMMA3}};
#define SUPPORTED_ARCHS "llama, qwen2, qwen3, phi3, gemma2, gemma3"

static bool key_u32(const gguf_file *f, const char *arch, const char *suffix, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gt_gguf_get_u32(f, key, out);
}

static bool key_f32(const gguf_file *f, const char *arch, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gt_gguf_get_f32(f, key, out);
}

static geist_status need_u32(const gguf_file *f, const char *arch, const char *suffix,
                             int32_t *out, gt_err *err) {
    uint32_t v;
    if (!key_u32(f, arch, suffix, &v))
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "missing or invalid metadata key '%s.%s'", arch,
                       suffix);
    if (v == 0 || v > (1u << 24))
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "metadata '%s.%s' = %u is out of range", arch,
                       suffix, v);
    *out = (int32_t)v;
    return GEIST_OK;
}

/* Binds a 2-D weight named `name` that must have n_in x n_out (ne[0] = n_in). */
static geist_status bind_weight(geist_model *m, const char *name, int64_t n_in, int64_t n_out,
                                bool optional, gt_weight *w, gt_err *err) {
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gt_gguf_find_tensor(&m->gguf, name);
    if (!t) {
        if (optional) return GEIST_OK;
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "missing tensor '%s'", name);
    }
    if (t->ne[0] != (uint64_t)n_in || t->ne[1] != (uint64_t)n_out || t->ne[2] != 1 ||
        t->ne[3] != 1)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%lld, %lld]",
                       name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                       (long long)n_in, (long long)n_out);
    const gt_type_info *ti = gt_type_get(t->type);
    if (!ti || !ti->supported)
        return gt_fail(err, GEIST_ERR_UNSUPPORTED, "tensor '%s' has type %s (%u), which geist does not support yet",
                       name, ti ? ti->name : "unknown", t->type);
    w->data = t->data;
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = (size_t)(t->nbytes / (uint64_t)n_out);
    m->weight_bytes += t->nbytes;
    return GEIST_OK;
}

static void free_vec(gt_vec *v) { free(v->owned); }

/* Binds a 1-D vector of n floats; F32 is aliased, other supported types are widened (owned). */
static geist_status bind_vec(geist_model *m, const char *name, int64_t n, bool optional,
                             gt_vec *v, gt_err *err) {
    memset(v, 0, sizeof *v);
    const gguf_tensor *t = gt_gguf_find_tensor(&m->gguf, name);
    if (!t) {
        if (optional) return GEIST_OK;
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "missing tensor '%s'", name);
    }
    if (t->nelements != (uint64_t)n || t->ne[0] != (uint64_t)n)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "tensor '%s' has %llu elements, expected %lld",
                       name, (unsigned long long)t->nelements, (long long)n);
    m->weight_bytes += t->nbytes;
    if (t->type == GT_TYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        v->data = (const float *)(const void *)t->data; /* aliased in place */
        v->n = n;
        return GEIST_OK;
    }
    /* Not F32 or not float-aligned in the caller's span: widen into an owned, counted copy. */
    const gt_type_info *ti = gt_type_get(t->type);
    if (!ti || !ti->supported)
        return gt_fail(err, GEIST_ERR_UNSUPPORTED, "tensor '%s' has unsupported type %s", name,
                       ti ? ti->name : "unknown");
    v->owned = malloc((size_t)n * sizeof(float));
    if (!v->owned) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory widening '%s'", name);
    gt_weight w = {.data = t->data, .type = t->type, .n_in = n, .n_out = 1, .row_bytes = t->nbytes};
    m->backend->get_row(&w, 0, v->owned);
    v->data = v->owned;
    v->n = n;
    m->owned_weight_bytes += (uint64_t)n * sizeof(float);
    return GEIST_OK;
}

/* Rows [r0, r0 + n) of a bound weight, as a weight of its own (fused tensors: every row is whole
 * blocks, so a row offset is a byte offset) */
static gt_weight row_view(const gt_weight *w, int64_t r0, int64_t n) {
    gt_weight v = *w;
    v.data = w->data + (size_t)r0 * w->row_bytes;
    v.n_out = n;
    return v;
}

static geist_status read_config(geist_model *m, gt_err *err) {
    const gguf_file *f = &m->gguf;
    gt_config *c = &m->cfg;
    gt_str arch;
    if (!gt_gguf_get_str(f, "general.architecture", &arch))
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "missing metadata key 'general.architecture'");
    bool found = false;
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++) {
        if (gt_str_eq(arch, k_archs[i].name)) {
            c->arch = k_archs[i].arch;
            snprintf(c->arch_name, sizeof c->arch_name, "%s", k_archs[i].name);
            found = true;
        }
    }
    if (!found) {
        int len = arch.len > 64 ? 64 : (int)arch.len;
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "unknown architecture '%.*s' (supported: " SUPPORTED_ARCHS ")", len, arch.ptr);
    }
    const char *a = c->arch_name;
    geist_status st;
    if ((st = need_u32(f, a, "block_count", &c->n_layer, err))) return st;
    if ((st = need_u32(f, a, "embedding_length", &c->d_model, err))) return st;
    if ((st = need_u32(f, a, "attention.head_count", &c->n_head, err))) return st;
    if ((st = need_u32(f, a, "feed_forward_length", &c->n_ff, err))) return st;
    uint32_t u;
    c->n_head_kv = key_u32(f, a, "attention.head_count_kv", &u) ? (int32_t)u : c->n_head;
    if (c->n_head_kv <= 0 || c->n_head % c->n_head_kv != 0)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "attention.head_count %d is not a multiple of head_count_kv %d", c->n_head,
                       c->n_head_kv);
    c->head_dim_k = key_u32(f, a, "attention.key_length", &u) ? (int32_t)u : c->d_model / c->n_head;
    c->head_dim_v = key_u32(f, a, "attention.value_length", &u) ? (int32_t)u : c->head_dim_k;
    if (c->head_dim_k <= 0 || c->head_dim_v <= 0 || c->head_dim_k > 4096 || c->head_dim_v > 4096 ||
        (c->d_model % c->n_head != 0 && !key_u32(f, a, "attention.key_length", &u)))
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "invalid attention head size");
    c->n_ctx_train = key_u32(f, a, "context_length", &u) ? (int32_t)(u > (1u << 24) ? 1u << 24 : u) : 2048;
    if (c->n_ctx_train <= 0) c->n_ctx_train = 2048;
    c->n_rot = key_u32(f, a, "rope.dimension_count", &u) ? (int32_t)u : c->head_dim_k;
    if (c->n_rot <= 0 || c->n_rot > c->head_dim_k || c->n_rot % 2 != 0)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "invalid rope.dimension_count %d", c->n_rot);
    if (!key_f32(f, a, "attention.layer_norm_rms_epsilon", &c->eps))
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "missing metadata key '%s.attention.layer_norm_rms_epsilon'", a);
    if (!key_f32(f, a, "rope.freq_base", &c->rope_base)) c->rope_base = 10000.0f;
    c->rope_scale_global = 1.0f;
    float factor;
    char key[128];
    gt_str stype;
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    const bool has_type = gt_gguf_get_str(f, key, &stype);
    if (has_type && !gt_str_eq(stype, "none") && !gt_str_eq(stype, "linear"))
        /* yarn and longrope change the attention magnitude too; llama3's factors come as the
         * rope_freqs tensor (what llama.cpp reads), not as keys */
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "rope scaling type '%.*s' is not supported (supported: none, linear, and "
                       "Llama 3's rope_freqs tensor)",
                       (int)(stype.len > 32 ? 32 : stype.len), stype.ptr);
    if ((!has_type || gt_str_eq(stype, "linear")) && key_f32(f, a, "rope.scaling.factor", &factor) &&
        factor > 0.0f && factor != 1.0f)
        c->rope_scale_global = 1.0f / factor;
    if (gt_gguf_find_tensor(f, "rope_factors_long.weight") ||
        gt_gguf_find_tensor(f, "rope_factors_short.weight"))
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "LongRoPE (rope_factors_long/short: Phi-3 128k models) is not supported yet");
    c->rope_freq_factors = gt_gguf_find_tensor(f, "rope_freqs.weight") != NULL;
    c->sliding_window = 0;
    c->embed_scale = 1.0f;
    c->qk_norm = false;
    c->post_norms = false;
    c->act = GT_ACT_SILU;
    c->rope_style = GT_ROPE_NORM;
    c->rope_base_local = c->rope_base;
    c->rope_scale_local = c->rope_scale_global;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim_k);
    c->attn_softcap = 0.0f;
    c->final_softcap = 0.0f;
    float fv;
    switch (c->arch) {
    case GT_ARCH_LLAMA:
        /* Mistral: every layer attends over the last attention.sliding_window positions
         * (llama.cpp reads no window for llama and attends over everything: equal below it) */
        if (key_u32(f, a, "attention.sliding_window", &u) && u > 0)
            c->sliding_window = (int32_t)(u > (1u << 24) ? 1u << 24 : u);
        break;
    case GT_ARCH_QWEN2: /* NeoX rope; q/k/v biases (bound below when present) */
    case GT_ARCH_PHI3:  /* NeoX rope; fused attn_qkv and gate|up; its window is unused, as in
                         * llama.cpp, which disables Phi-3's sliding window */
        c->rope_style = GT_ROPE_NEOX;
        break;
    case GT_ARCH_QWEN3: /* NeoX rope, per-head RMSNorm of Q and K before it */
        c->rope_style = GT_ROPE_NEOX;
        c->qk_norm = true;
        break;
    case GT_ARCH_GEMMA2:
        /* Gemma 2: embeddings scaled by sqrt(d), post-sublayer norms, gated GELU(tanh), NeoX
         * rope, every other layer (even ones) sliding (window 4096 unless the file says), tanh
         * soft-capping of attention scores (default 50) and final logits (default 30), the
         * scale 1/sqrt(key_length) (llama.cpp: n_embd/n_head for the 46-layer 27B) */
        c->sliding_window = key_u32(f, a, "attention.sliding_window", &u) && u > 0
                                ? (int32_t)(u > (1u << 24) ? 1u << 24 : u)
                                : 4096;
        c->embed_scale = sqrtf((float)c->d_model);
        c->post_norms = true;
        c->act = GT_ACT_GELU_TANH;
        c->rope_style = GT_ROPE_NEOX;
        if (key_f32(f, a, "rope.freq_base_swa", &fv) && fv > 0.0f) c->rope_base_local = fv;
        c->attn_softcap = key_f32(f, a, "attn_logit_softcapping", &fv) ? fv : 50.0f;
        c->final_softcap = key_f32(f, a, "final_logit_softcapping", &fv) ? fv : 30.0f;
        if (!(c->attn_softcap >= 0.0f) || !(c->final_softcap >= 0.0f) ||
            !isfinite(c->attn_softcap) || !isfinite(c->final_softcap))
            return gt_fail(err, GEIST_ERR_BAD_FORMAT, "invalid soft-capping value");
        if (c->n_layer == 46) c->attn_scale = 1.0f / sqrtf((float)(c->d_model / c->n_head));
        break;
    case GT_ARCH_GEMMA3:
        /* Gemma 3: embeddings scaled by sqrt(d), per-head QK RMSNorm, post-sublayer norms,
         * gated GELU(tanh), NeoX rope, sliding-window local layers with rope base 10000. The
         * GGUF stores norm weights with the +1 already folded in. */
        if (key_u32(f, a, "attention.sliding_window", &u)) c->sliding_window = (int32_t)u;
        c->embed_scale = sqrtf((float)c->d_model);
        c->qk_norm = true;
        c->post_norms = true;
        c->act = GT_ACT_GELU_TANH;
        c->rope_style = GT_ROPE_NEOX;
        c->rope_base_local = 10000.0f;
        c->rope_scale_local = 1.0f;
        break;
    }
    if (key_f32(f, a, "attention.scale", &fv) && fv > 0.0f && isfinite(fv)) c->attn_scale = fv;
    return GEIST_OK;
}

static geist_status make_inv_freq(float **out, int32_t n_rot, float base, gt_err *err) {
    *out = malloc((size_t)(n_rot / 2) * sizeof(float));
    if (!*out) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (rope table)");
    for (int32_t i = 0; i < n_rot / 2; i++)
        (*out)[i] = (float)pow((double)base, -2.0 * (double)i / (double)n_rot);
    return GEIST_OK;
}

geist_status gt_arch_load(geist_model *m, gt_err *err) {
    geist_status st = read_config(m, err);
    if (st) return st;
    gt_config *c = &m->cfg;
    const gguf_tensor *emb = gt_gguf_find_tensor(&m->gguf, "token_embd.weight");
    if (!emb) return gt_fail(err, GEIST_ERR_BAD_FORMAT, "missing tensor 'token_embd.weight'");
    if (emb->ne[1] == 0 || emb->ne[1] > (1u << 24))
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "token_embd.weight has an invalid vocabulary size");
    c->n_vocab = (int32_t)emb->ne[1];
    uint32_t vs;
    char key[128];
    snprintf(key, sizeof key, "%s.vocab_size", c->arch_name);
    if (gt_gguf_get_u32(&m->gguf, key, &vs) && vs != (uint32_t)c->n_vocab)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "%s = %u disagrees with token_embd rows %d", key,
                       vs, c->n_vocab);
    const int64_t d = c->d_model, q_dim = (int64_t)c->n_head * c->head_dim_k,
                  kv_dim = (int64_t)c->n_head_kv * c->head_dim_k,
                  v_dim = (int64_t)c->n_head_kv * c->head_dim_v,
                  o_dim = (int64_t)c->n_head * c->head_dim_v;
    if ((st = bind_weight(m, "token_embd.weight", d, c->n_vocab, false, &m->tok_embd, err))) return st;
    if ((st = bind_weight(m, "output.weight", d, c->n_vocab, true, &m->output, err))) return st;
    if (!m->output.data) m->output = m->tok_embd; /* tied output embeddings */
    if ((st = bind_vec(m, "output_norm.weight", d, false, &m->output_norm, err))) return st;
    const bool post_norms = c->post_norms;
    const bool fused_qkv = gt_gguf_find_tensor(&m->gguf, "blk.0.attn_qkv.weight") != NULL;
    const bool fused_ffn = c->arch == GT_ARCH_PHI3;
    /* The layer table is sized from block_count: bound it by what the file holds before
     * allocating (every layer needs its own tensors), so a small file with a huge count fails
     * here instead of reserving gigabytes. token_embd and output_norm (both found above) are
     * the two tensors outside the layers. */
    const uint64_t per_layer = 3u + (fused_qkv ? 1u : 3u) + (fused_ffn ? 2u : 3u) +
                               (c->qk_norm ? 2u : 0u) + (post_norms ? 2u : 0u);
    if ((uint64_t)c->n_layer > (m->gguf.n_tensors - 2) / per_layer)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "metadata '%s.block_count' = %d needs at least %llu tensors (%llu per "
                       "layer + 2) but the file has %llu",
                       c->arch_name, c->n_layer,
                       (unsigned long long)((uint64_t)c->n_layer * per_layer + 2),
                       (unsigned long long)per_layer, (unsigned long long)m->gguf.n_tensors);
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (layers)");
    /* Sliding layers: Mistral (llama with a window) all of them; Gemma 2 the even ones
     * (llama.cpp's pattern 2); Gemma 3 five of every six. attention.sliding_window_pattern, when
     * a number, overrides the period (layer il slides when il % period < period - 1). */
    uint32_t period = c->arch == GT_ARCH_GEMMA2 ? 2u : c->arch == GT_ARCH_GEMMA3 ? 6u : 0u;
    uint32_t pu;
    if (period && key_u32(&m->gguf, c->arch_name, "attention.sliding_window_pattern", &pu))
        period = pu;
    for (int32_t il = 0; il < c->n_layer; il++) {
        gt_layer *L = &m->layers[il];
        char n[96];
#define W(field, suffix, nin, nout)                                                   \
    snprintf(n, sizeof n, "blk.%d." suffix ".weight", il);                            \
    if ((st = bind_weight(m, n, nin, nout, false, &L->field, err))) return st;
#define V(field, suffix, len, opt)                                                    \
    snprintf(n, sizeof n, "blk.%d." suffix ".weight", il);                            \
    if ((st = bind_vec(m, n, len, opt, &L->field, err))) return st;
#define B(field, suffix, len)                                                         \
    snprintf(n, sizeof n, "blk.%d." suffix ".bias", il);                              \
    if ((st = bind_vec(m, n, len, true, &L->field, err))) return st;
        V(attn_norm, "attn_norm", d, false);
        if (fused_qkv) {
            gt_weight qkv;
            W(wq, "attn_qkv", d, q_dim + kv_dim + v_dim);
            qkv = L->wq;
            L->wq = row_view(&qkv, 0, q_dim);
            L->wk = row_view(&qkv, q_dim, kv_dim);
            L->wv = row_view(&qkv, q_dim + kv_dim, v_dim);
            B(bq, "attn_qkv", q_dim + kv_dim + v_dim);
            if (L->bq.data) {
                const float *all = L->bq.data;
                L->bq.n = q_dim;
                L->bk = (gt_vec){all + q_dim, NULL, kv_dim};
                L->bv = (gt_vec){all + q_dim + kv_dim, NULL, v_dim};
            }
        } else {
            W(wq, "attn_q", d, q_dim);
            W(wk, "attn_k", d, kv_dim);
            W(wv, "attn_v", d, v_dim);
        }
        if (!L->bq.data) {
            B(bq, "attn_q", q_dim);
            B(bk, "attn_k", kv_dim);
            B(bv, "attn_v", v_dim);
        }
        W(wo, "attn_output", o_dim, d);
        B(bo, "attn_output", d);
        V(ffn_norm, "ffn_norm", d, false);
        if (fused_ffn) {
            /* ffn_up holds gate | up (llama.cpp's swiglu: silu of the first half) */
            gt_weight gu;
            W(w_up, "ffn_up", d, 2 * (int64_t)c->n_ff);
            gu = L->w_up;
            L->w_gate = row_view(&gu, 0, c->n_ff);
            L->w_up = row_view(&gu, c->n_ff, c->n_ff);
        } else {
            W(w_gate, "ffn_gate", d, c->n_ff);
            W(w_up, "ffn_up", d, c->n_ff);
        }
        W(w_down, "ffn_down", c->n_ff, d);
        if (c->qk_norm) {
            V(q_norm, "attn_q_norm", c->head_dim_k, false);
            V(k_norm, "attn_k_norm", c->head_dim_k, false);
        }
        if (post_norms) {
            V(post_attn_norm, "post_attention_norm", d, false);
            V(post_ffn_norm, "post_ffw_norm", d, false);
        }
        if (c->sliding_window > 0)
            L->sliding = period == 0 || period == 1 || (uint32_t)il % period < period - 1;
#undef W
#undef V
#undef B
    }
    if (c->arch == GT_ARCH_LLAMA && c->sliding_window > 0) {
        /* every layer of a Mistral file slides */
        for (int32_t il = 0; il < c->n_layer; il++) m->layers[il].sliding = true;
    }
    if ((st = make_inv_freq(&m->inv_freq_global, c->n_rot, c->rope_base, err))) return st;
    if ((st = make_inv_freq(&m->inv_freq_local, c->n_rot, c->rope_base_local, err))) return st;
    if (c->rope_freq_factors) {
        /* Llama 3.x: theta_i = pos * base^(-2i/n_rot) / rope_freqs[i] on every layer (as
         * ggml_rope_ext's freq_factors) */
        gt_vec ff;
        if ((st = bind_vec(m, "rope_freqs.weight", c->n_rot / 2, false, &ff, err))) return st;
        for (int32_t i = 0; i < c->n_rot / 2; i++) {
            if (!(ff.data[i] > 0.0f) || !isfinite(ff.data[i])) {
                if (ff.owned) m->owned_weight_bytes -= (uint64_t)ff.n * sizeof(float);
                free_vec(&ff);
                return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                               "rope_freqs.weight[%d] = %g is not a positive frequency factor",
                               (int)i, (double)ff.data[i]);
            }
            m->inv_freq_global[i] /= ff.data[i];
            m->inv_freq_local[i] /= ff.data[i];
        }
        if (ff.owned) m->owned_weight_bytes -= (uint64_t)ff.n * sizeof(float);
        free_vec(&ff);
    }
    return GEIST_OK;
}

void gt_arch_free(geist_model *m) {
    if (m->layers) {
        for (int32_t il = 0; il < m->cfg.n_layer; il++) {
            gt_layer *L = &m->layers[il];
            free_vec(&L->attn_norm);
            free_vec(&L->q_norm);
            free_vec(&L->k_norm);
            free_vec(&L->post_attn_norm);
            free_vec(&L->ffn_norm);
            free_vec(&L->post_ffn_norm);
            free_vec(&L->bq); /* a fused bias: bk and bv view it */
            free_vec(&L->bk);
            free_vec(&L->bv);
            free_vec(&L->bo);
        }
    }
    free(m->layers);
    free_vec(&m->output_norm);
    free(m->inv_freq_global);
    free(m->inv_freq_local);
    m->layers = NULL;
}
