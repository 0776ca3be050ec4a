/* The Metal forward pass's dispatch plan (step.h): the vulkan backend's step, kernel by kernel,
 * as data for metal.m to encode. */
#include "step.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../gguf/gguf.h"
#include "../../util/ggml_types.h"

#define B(n) (1u << (n))

/* bindings and push-constant blocks as the shaders' GLSL declares them (vulkan/shaders) */
const gt_mtl_kernel_info gt_mtl_kernels[GT_MTL_K_COUNT] = {
    [GT_MTL_K_EMBED] = {"embed", B(0) | B(1) | B(3), 7 * 4, 64},
    [GT_MTL_K_QUANT] = {"quant", B(2) | B(4) | B(5), 3 * 4, 64},
    [GT_MTL_K_MATVEC] = {"matvec", B(0) | B(2) | B(3) | B(4) | B(5), 9 * 4, 64},
    [GT_MTL_K_RMSNORM] = {"rmsnorm", B(1) | B(2) | B(3) | B(7), 6 * 4, 64},
    [GT_MTL_K_ROPE] = {"rope", B(1) | B(2) | B(3), 7 * 4, 64},
    [GT_MTL_K_KVSTORE] = {"kvstore", B(1) | B(2) | B(3) | B(6), 13 * 4, 64},
    [GT_MTL_K_ATTN] = {"attn", B(0) | B(1) | B(2) | B(3) | B(5) | B(6), 21 * 4, 64},
    [GT_MTL_K_ACT] = {"act", B(2) | B(3), 3 * 4, 64},
    [GT_MTL_K_ATTN_PART] = {"attn_part", B(0) | B(1) | B(2) | B(3) | B(4) | B(5) | B(6), 24 * 4, 64},
    [GT_MTL_K_ATTN_MERGE] = {"attn_merge", B(1) | B(3) | B(5), 6 * 4, 64},
    [GT_MTL_K_MATMUL] = {"matmul", B(0) | B(3) | B(4) | B(5), 9 * 4, 128},
    [GT_MTL_K_ARGMAX] = {"argmax", B(2) | B(3) | B(4), 4 * 4, 128},
    [GT_MTL_K_FMAPROBE] = {"fmaprobe", B(0), 1 * 4, 64},
};

/* ---- what the device runs (vk_forward.c's check_model, "metal:") ------------------------- */

static const char *type_name(uint32_t t) {
    switch (t) {
    case GT_TYPE_F32: return "F32";
    case GT_TYPE_F16: return "F16";
    case GT_TYPE_BF16: return "BF16";
    case GT_TYPE_Q4_0: return "Q4_0";
    case GT_TYPE_Q4_1: return "Q4_1";
    case GT_TYPE_Q5_0: return "Q5_0";
    case GT_TYPE_Q5_1: return "Q5_1";
    case GT_TYPE_Q8_0: return "Q8_0";
    case GT_TYPE_Q4_K: return "Q4_K";
    case GT_TYPE_Q5_K: return "Q5_K";
    case GT_TYPE_Q6_K: return "Q6_K";
    default: return "another type";
    }
}

static bool type_ok(uint32_t t) {
    return t == GT_TYPE_F32 || t == GT_TYPE_F16 || t == GT_TYPE_Q8_0 || t == GT_TYPE_Q4_0 ||
           t == GT_TYPE_Q4_1 || t == GT_TYPE_Q5_0 || t == GT_TYPE_Q4_K || t == GT_TYPE_Q6_K;
}

static bool too_big(const gt_weight *w) {
    return (uint64_t)w->row_bytes * (uint64_t)w->n_out > UINT32_MAX || w->n_in > UINT32_MAX ||
           w->n_out > UINT32_MAX;
}

void gt_mtl_check_model(const geist_model *m, char *buf, size_t cap) {
    const gt_config *c = &m->cfg;
    buf[0] = '\0';
    if (c->arch != GT_ARCH_LLAMA) {
        snprintf(buf, cap, "metal: the device forward pass runs the llama architecture only; "
                 "this model is %s (use a CPU backend)", c->arch_name);
        return;
    }
    if (c->qk_norm || c->post_norms || c->act != GT_ACT_SILU || c->embed_scale != 1.0f) {
        snprintf(buf, cap, "metal: this model's layer recipe (QK norm, post-norms, GELU or an "
                 "embedding scale) is not on the device yet (use a CPU backend)");
        return;
    }
    if (c->attn_softcap > 0.0f || c->final_softcap > 0.0f) {
        snprintf(buf, cap, "metal: logit soft-capping is not on the device yet (use a CPU "
                 "backend)");
        return;
    }
    for (int32_t il = 0; il < c->n_layer; il++) {
        const gt_layer *L = &m->layers[il];
        if (L->bq.data || L->bk.data || L->bv.data || L->bo.data) {
            snprintf(buf, cap, "metal: attention biases (blk.%d) are not on the device yet (use "
                     "a CPU backend)", (int)il);
            return;
        }
    }
    for (int32_t il = 0; il < c->n_layer; il++)
        if (m->layers[il].sliding) {
            snprintf(buf, cap, "metal: sliding-window layers are not on the device yet (use a "
                     "CPU backend)");
            return;
        }
    if (c->n_rot % 2 || c->n_rot > c->head_dim_k || (c->n_head_kv * c->head_dim_k) % 2 ||
        (c->n_head_kv * c->head_dim_v) % 2 || c->n_head_kv <= 0 || c->n_head % c->n_head_kv) {
        snprintf(buf, cap, "metal: this model's head geometry is not supported on the device");
        return;
    }
    static const char *const roles[GT_MTL_W_PER_LAYER] = {
        "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    const gt_weight *tw[2] = {&m->tok_embd, &m->output};
    static const char *const tnames[2] = {"token_embd", "output"};
    for (int i = 0; i < 2; i++) {
        if (!type_ok(tw[i]->type)) {
            snprintf(buf, cap, "metal: tensor %s is %s; the device forward pass supports F32, "
                     "F16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K and Q6_K weights (use a CPU backend)",
                     tnames[i], type_name(tw[i]->type));
            return;
        }
        if (too_big(tw[i])) {
            snprintf(buf, cap, "metal: tensor %s exceeds 4 GiB, more than the kernels address "
                     "(use a CPU backend)", tnames[i]);
            return;
        }
    }
    for (int32_t il = 0; il < c->n_layer; il++) {
        const gt_layer *L = &m->layers[il];
        const gt_weight *ws[GT_MTL_W_PER_LAYER] = {&L->wq, &L->wk, &L->wv, &L->wo,
                                                   &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < GT_MTL_W_PER_LAYER; i++) {
            if (!type_ok(ws[i]->type) || ws[i]->data == NULL) {
                snprintf(buf, cap, "metal: tensor blk.%d.%s is %s; the device forward pass "
                         "supports F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K and Q6_K weights (use a "
                         "CPU backend)",
                         (int)il, roles[i], type_name(ws[i]->type));
                return;
            }
            if (too_big(ws[i])) {
                snprintf(buf, cap, "metal: tensor blk.%d.%s exceeds 4 GiB, more than the "
                         "kernels address (use a CPU backend)", (int)il, roles[i]);
                return;
            }
        }
    }
}

bool gt_mtl_wref_of(const gguf_file *g, const gt_mtl_plan *p, const gt_weight *w,
                    gt_mtl_wref *out) {
    if (w->data == NULL || p->place == NULL) return false;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (t->data != w->data) continue;
        const gt_mtl_place *q = &p->place[i];
        if (q->where == GT_MTL_EMPTY || q->index < 0) return false;
        const uint32_t buf = (uint32_t)q->index +
                             (q->where == GT_MTL_IN_COPY ? (uint32_t)p->n_views : 0u);
        *out = (gt_mtl_wref){buf, q->offset, w->type, (uint32_t)w->n_in, (uint32_t)w->n_out,
                             (uint32_t)w->row_bytes};
        return true;
    }
    return false;
}

void gt_mtl_scratch_bytes(const gt_config *c, int32_t rows, int32_t ctx,
                          uint64_t out[GT_MTL_S_COUNT]) {
    const uint64_t R = (uint64_t)rows, F = sizeof(float);
    const uint64_t d = (uint64_t)c->d_model, nff = (uint64_t)c->n_ff;
    const uint64_t qd = (uint64_t)c->n_head * (uint64_t)c->head_dim_k;
    const uint64_t kd = (uint64_t)c->n_head_kv * (uint64_t)c->head_dim_k;
    const uint64_t vd = (uint64_t)c->n_head_kv * (uint64_t)c->head_dim_v;
    const uint64_t od = (uint64_t)c->n_head * (uint64_t)c->head_dim_v;
    uint64_t wide = d > nff ? d : nff;
    if (od > wide) wide = od;
    out[GT_MTL_S_X] = R * d * F;
    out[GT_MTL_S_XN] = R * d * F;
    out[GT_MTL_S_Q] = R * qd * F;
    out[GT_MTL_S_K] = R * kd * F;
    out[GT_MTL_S_V] = R * vd * F;
    out[GT_MTL_S_ATT] = R * od * F;
    out[GT_MTL_S_GATE] = R * nff * F;
    out[GT_MTL_S_UP] = R * nff * F;
    out[GT_MTL_S_AQ] = R * wide;
    out[GT_MTL_S_AD] = R * (wide / 32 + 1) * F;
    out[GT_MTL_S_SC] = R * (uint64_t)c->n_head * (uint64_t)ctx * F;
    out[GT_MTL_S_IN] = (R * 5 + R * (uint64_t)c->n_rot) * 4;
    out[GT_MTL_S_LG] = R * (uint64_t)c->n_vocab * F;
    out[GT_MTL_S_NORMS] = (2 * (uint64_t)c->n_layer + 1) * d * F;
}

int32_t gt_mtl_step_inputs(const gt_config *c, const float *inv_freq, const gt_mtl_row *rows,
                           int32_t n, uint32_t *in, uint32_t *gather_at, uint32_t *rope_at) {
    *gather_at = 4u * (uint32_t)n;
    *rope_at = *gather_at + (uint32_t)n;
    const int32_t half = c->n_rot / 2;
    int32_t k = 0;
    for (int32_t t = 0; t < n; t++) {
        in[4 * t] = (uint32_t)rows[t].token;
        in[4 * t + 1] = (uint32_t)rows[t].pos;
        in[4 * t + 2] = in[4 * t + 3] = 0;
        if (rows[t].logits) in[*gather_at + (uint32_t)k++] = (uint32_t)t;
        uint32_t *cs = in + *rope_at + (size_t)t * (size_t)c->n_rot;
        const float pos = (float)rows[t].pos * c->rope_scale_global;
        for (int32_t i = 0; i < half; i++) { /* as session/forward.c's rope_angles */
            const double theta = (double)pos * (double)inv_freq[i];
            const float cv = (float)cos(theta), sv = (float)sin(theta);
            memcpy(&cs[i], &cv, 4);
            memcpy(&cs[half + i], &sv, 4);
        }
    }
    for (int32_t j = k; j < n; j++) in[*gather_at + (uint32_t)j] = 0;
    return k;
}

size_t gt_mtl_step_max_dispatches(int32_t n_layer, int32_t n_groups) {
    /* per layer: 2 norms, up to 7 quants (one per product when their activation formats
     * alternate), 7 products, rope, act, and a kvstore and an attn per group; then embed and the
     * output's norm, quant and product */
    return (size_t)n_layer * (18u + 2u * (size_t)n_groups) + 4u;
}

/* ---- recording ------------------------------------------------------------------------------ */

typedef struct rec {
    gt_mtl_dispatch *out;
    size_t cap, n;
    bool failed;
    int aq_src; /* the scratch whose 8-bit rows AQ/AD hold (format aq_fmt); -1: none */
    int aq_fmt;
} rec;

static gt_mtl_bind scratch(gt_mtl_scratch s) { return (gt_mtl_bind){GT_MTL_BUF_SCRATCH, s, 0}; }

static gt_mtl_dispatch *add(rec *r, gt_mtl_kernel k, uint32_t groups) {
    if (r->failed || groups == 0) return NULL;
    if (r->n >= r->cap) {
        r->failed = true;
        return NULL;
    }
    if (k != GT_MTL_K_MATVEC && k != GT_MTL_K_QUANT) r->aq_src = -1; /* may rewrite the source */
    gt_mtl_dispatch *d = &r->out[r->n++];
    memset(d, 0, sizeof *d);
    d->kernel = k;
    d->pc_bytes = gt_mtl_kernels[k].pc_bytes;
    d->groups_x = groups < GT_MTL_MAX_GROUPS_X ? groups : GT_MTL_MAX_GROUPS_X;
    d->groups_y = (groups + d->groups_x - 1) / d->groups_x;
    return d;
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* the 8-bit activation format a weight type's product takes (act_quant.h; vk_forward.c's
 * act_fmt): 0 blocks of 32, 1 blocks of 256 (Q4_K, Q6_K), -1 float activations */
static int act_fmt(uint32_t t) {
    if (t == GT_TYPE_F32 || t == GT_TYPE_F16) return -1;
    return t == GT_TYPE_Q4_K || t == GT_TYPE_Q6_K ? 1 : 0;
}

/* a weight's binding: its buffer at the offset rounded down; returns the remainder (w_off) */
static uint32_t bind_weight(gt_mtl_bind *b, const gt_mtl_wref *w) {
    const uint64_t base = w->offset & ~(uint64_t)(GT_MTL_BIND_ALIGN - 1);
    *b = (gt_mtl_bind){GT_MTL_BUF_WEIGHT, w->buf, base};
    return (uint32_t)(w->offset - base);
}

static void rec_quant(rec *r, gt_mtl_scratch src, uint32_t n_in, uint32_t n_tok, int fmt) {
    const uint32_t n_blocks = n_tok * n_in / (fmt ? 256u : 32u);
    gt_mtl_dispatch *d = add(r, GT_MTL_K_QUANT, fmt ? n_blocks : (n_blocks + 7) / 8); /* 64 words */
    if (!d) return;
    r->aq_src = (int)src;
    r->aq_fmt = fmt;
    d->pc[0] = n_in;
    d->pc[1] = n_blocks;
    d->pc[2] = (uint32_t)fmt;
    d->bind[2] = scratch(src);
    d->bind[4] = scratch(GT_MTL_S_AQ);
    d->bind[5] = scratch(GT_MTL_S_AD);
}

/* y (+)= W x for n_tok rows; x's 8-bit rows are made first when a quantized W needs a format
 * the scratch does not hold for x yet (as vk_forward.c's rec_matvec) */
static void rec_matvec(rec *r, const gt_mtl_wref *w, gt_mtl_scratch x, gt_mtl_scratch y,
                       uint32_t n_tok, bool acc) {
    const int fmt = act_fmt(w->type);
    if (fmt >= 0 && (r->aq_src != (int)x || r->aq_fmt != fmt)) rec_quant(r, x, w->n_in, n_tok, fmt);
    gt_mtl_dispatch *d = add(r, GT_MTL_K_MATVEC, w->n_out);
    if (!d) return;
    const uint32_t w_off = bind_weight(&d->bind[0], w);
    const uint32_t pc[9] = {w_off, w->type, w->n_in, w->row_bytes, w->n_out, n_tok, w->n_out, acc,
                            0 /* y_off */};
    memcpy(d->pc, pc, sizeof pc);
    d->bind[2] = scratch(x);
    d->bind[3] = scratch(y);
    d->bind[4] = scratch(GT_MTL_S_AQ);
    d->bind[5] = scratch(GT_MTL_S_AD);
}

static void rec_norm(rec *r, gt_mtl_scratch x, gt_mtl_scratch y, uint32_t n_rows, uint32_t dm,
                     uint32_t w_off, uint32_t gather_at, float eps) {
    gt_mtl_dispatch *d = add(r, GT_MTL_K_RMSNORM, n_rows);
    if (!d) return;
    const uint32_t pc[6] = {dm, w_off, gather_at != 0, gather_at, fbits(eps), 0 /* acc */};
    memcpy(d->pc, pc, sizeof pc);
    d->bind[1] = scratch(GT_MTL_S_IN);
    d->bind[2] = scratch(x);
    d->bind[3] = scratch(y);
    d->bind[7] = scratch(GT_MTL_S_NORMS);
}

size_t gt_mtl_step_plan(const gt_mtl_step_in *in, gt_mtl_dispatch *out, size_t cap, gt_err *err) {
    const gt_config *cf = in->cfg;
    if (in->n_rows <= 0 || in->n_rows > GT_MTL_MAX_ROWS || in->n_groups <= 0 ||
        in->n_logits < 0 || in->n_logits > in->n_rows) {
        gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "metal: a pass of %d rows in %d groups",
                (int)in->n_rows, (int)in->n_groups);
        return 0;
    }
    for (int32_t g = 0; g < in->n_groups; g++)
        if (in->groups[g].layer_bytes / 4 > UINT32_MAX || in->groups[g].k_bytes % 4) {
            gt_fail(err, GEIST_ERR_UNSUPPORTED,
                    "metal: a KV layer of %.1f MiB is more than the kernels address in 32-bit "
                    "words; use a smaller max_seq_len", in->groups[g].layer_bytes / 1048576.0);
            return 0;
        }
    rec r = {out, cap, 0, false, -1, -1};
    const uint32_t N = (uint32_t)in->n_rows, d = (uint32_t)cf->d_model, nff = (uint32_t)cf->n_ff;
    const uint32_t kd = (uint32_t)(cf->n_head_kv * cf->head_dim_k);
    const uint32_t vd = (uint32_t)(cf->n_head_kv * cf->head_dim_v);
    const uint32_t half = (uint32_t)cf->n_rot / 2;
    gt_mtl_dispatch *dp = add(&r, GT_MTL_K_EMBED, N);
    if (dp) {
        const uint32_t w_off = bind_weight(&dp->bind[0], in->tok);
        const uint32_t pc[7] = {w_off, in->tok->type, in->tok->n_in, in->tok->row_bytes,
                                fbits(cf->embed_scale), 0, UINT32_MAX /* every row */};
        memcpy(dp->pc, pc, sizeof pc);
        dp->bind[1] = scratch(GT_MTL_S_IN);
        dp->bind[3] = scratch(GT_MTL_S_X);
    }
    for (int32_t il = 0; il < cf->n_layer; il++) {
        const gt_mtl_wref *w = &in->lw[il * GT_MTL_W_PER_LAYER];
        rec_norm(&r, GT_MTL_S_X, GT_MTL_S_XN, N, d, 2u * (uint32_t)il * d, 0, cf->eps);
        rec_matvec(&r, &w[GT_MTL_W_Q], GT_MTL_S_XN, GT_MTL_S_Q, N, false);
        rec_matvec(&r, &w[GT_MTL_W_K], GT_MTL_S_XN, GT_MTL_S_K, N, false);
        rec_matvec(&r, &w[GT_MTL_W_V], GT_MTL_S_XN, GT_MTL_S_V, N, false);
        const uint32_t total = N * (uint32_t)(cf->n_head + cf->n_head_kv) * half;
        if ((dp = add(&r, GT_MTL_K_ROPE, (total + 63) / 64))) {
            const uint32_t pc[7] = {N, (uint32_t)cf->n_head, (uint32_t)cf->n_head_kv,
                                    (uint32_t)cf->head_dim_k, (uint32_t)cf->n_rot,
                                    cf->rope_style == GT_ROPE_NEOX, in->rope_at};
            memcpy(dp->pc, pc, sizeof pc);
            dp->bind[1] = scratch(GT_MTL_S_IN);
            dp->bind[2] = scratch(GT_MTL_S_Q);
            dp->bind[3] = scratch(GT_MTL_S_K);
        }
        for (int32_t g = 0; g < in->n_groups; g++) {
            const gt_mtl_group *G = &in->groups[g];
            const uint32_t gn = (uint32_t)G->n;
            /* INT8: one invocation per row, K or V, and KV head; else one per pair of values */
            const uint32_t inv = G->mode == GEIST_KV_INT8 ? gn * 2u * (uint32_t)cf->n_head_kv
                                                          : gn * (kd + vd) / 2;
            if (!(dp = add(&r, GT_MTL_K_KVSTORE, (inv + 63) / 64))) continue;
            /* no prefix, no ring (slot = position), no stage: vk_forward.c's other cases */
            const uint32_t pc[13] = {(uint32_t)G->r0, gn, kd, vd, 0, (uint32_t)(G->k_bytes / 4),
                                     G->mode, (uint32_t)cf->n_head_kv, (uint32_t)cf->head_dim_k,
                                     (uint32_t)cf->head_dim_v, 0, UINT32_MAX, 0};
            memcpy(dp->pc, pc, sizeof pc);
            dp->bind[1] = scratch(GT_MTL_S_IN);
            dp->bind[2] = scratch(GT_MTL_S_K);
            dp->bind[3] = scratch(GT_MTL_S_V);
            dp->bind[6] = (gt_mtl_bind){GT_MTL_BUF_KV, (uint32_t)g, (uint64_t)il * G->layer_bytes};
        }
        for (int32_t g = 0; g < in->n_groups; g++) {
            const gt_mtl_group *G = &in->groups[g];
            if (!(dp = add(&r, GT_MTL_K_ATTN, (uint32_t)G->n * (uint32_t)cf->n_head))) continue;
            /* no window, no prefix (binding 0: the cache again), no ring, no stage */
            const uint32_t pc[21] = {(uint32_t)G->r0, (uint32_t)cf->n_head,
                                     (uint32_t)cf->n_head_kv, (uint32_t)cf->head_dim_k,
                                     (uint32_t)cf->head_dim_v, 0, (uint32_t)(G->k_bytes / 4),
                                     G->mode, (uint32_t)in->cap_ctx, fbits(cf->attn_scale),
                                     0, 0, UINT32_MAX, UINT32_MAX, 0, 0, 0, G->mode, 0, 0, 1};
            memcpy(dp->pc, pc, sizeof pc);
            dp->bind[1] = scratch(GT_MTL_S_IN);
            dp->bind[2] = scratch(GT_MTL_S_Q);
            dp->bind[3] = scratch(GT_MTL_S_ATT);
            dp->bind[5] = scratch(GT_MTL_S_SC);
            dp->bind[6] = (gt_mtl_bind){GT_MTL_BUF_KV, (uint32_t)g, (uint64_t)il * G->layer_bytes};
            dp->bind[0] = dp->bind[6];
        }
        rec_matvec(&r, &w[GT_MTL_W_O], GT_MTL_S_ATT, GT_MTL_S_X, N, true); /* x += o */
        rec_norm(&r, GT_MTL_S_X, GT_MTL_S_XN, N, d, (2u * (uint32_t)il + 1u) * d, 0, cf->eps);
        rec_matvec(&r, &w[GT_MTL_W_GATE], GT_MTL_S_XN, GT_MTL_S_GATE, N, false);
        rec_matvec(&r, &w[GT_MTL_W_UP], GT_MTL_S_XN, GT_MTL_S_UP, N, false);
        if ((dp = add(&r, GT_MTL_K_ACT, (N * nff + 63) / 64))) {
            dp->pc[0] = N * nff;
            dp->pc[1] = 0; /* SiLU */
            dp->pc[2] = 0; /* gate and up in their own scratch */
            dp->bind[2] = scratch(GT_MTL_S_UP);
            dp->bind[3] = scratch(GT_MTL_S_GATE);
        }
        rec_matvec(&r, &w[GT_MTL_W_DOWN], GT_MTL_S_GATE, GT_MTL_S_X, N, true); /* x += ffn */
    }
    if (in->n_logits > 0) {
        const uint32_t nl = (uint32_t)in->n_logits;
        rec_norm(&r, GT_MTL_S_X, GT_MTL_S_XN, nl, d, 2u * (uint32_t)cf->n_layer * d,
                 in->gather_at, cf->eps);
        rec_matvec(&r, in->out, GT_MTL_S_XN, GT_MTL_S_LG, nl, false);
    }
    if (r.failed) {
        gt_fail(err, GEIST_ERR_INTERNAL, "metal: the pass needs more than %zu dispatches", cap);
        return 0;
    }
    return r.n;
}
