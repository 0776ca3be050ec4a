/* The Metal forward pass's dispatch plan (backend/metal/step.c), portable C run on every
 * platform: the vulkan backend's op sequence (vk_forward.c) for a batched pass over rows of
 * several sessions, each dispatch binding exactly the bindings its kernel declares, weights bound
 * at 256-aligned offsets with the remainder in w_off, each session's KV bound at the layer's
 * offset, push constants as the GLSL blocks lay them out, group counts split past 65535, the
 * logits gathered only for the rows that want them; the host inputs (rotary cos/sin against a
 * double-precision reference); mixed weight types (each product's 8-bit activation format, made
 * when needed, as vulkan's) and an INT8 KV; the model refusals (the vulkan backend's); weight
 * references of a real fixture file's plan (tests/fuzz/corpus/gguf/llama_q8.gguf, or argv[1]). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/metal/step.h"
#include "gguf/gguf.h"
#include "util/ggml_types.h"
#include "util/platform.h"

#include "check.h"

static gt_config toy_config(void) {
    gt_config c;
    memset(&c, 0, sizeof c);
    c.arch = GT_ARCH_LLAMA;
    snprintf(c.arch_name, sizeof c.arch_name, "llama");
    c.n_layer = 3;
    c.d_model = 96;
    c.n_head = 6;
    c.n_head_kv = 2;
    c.head_dim_k = c.head_dim_v = 16;
    c.n_ff = 160;
    c.n_vocab = 70001; /* past 65535 rows: the output product's groups split over y */
    c.n_rot = 16;
    c.eps = 1e-5f;
    c.rope_scale_global = 1.0f;
    c.attn_scale = 0.25f;
    c.embed_scale = 1.0f;
    c.rope_style = GT_ROPE_NEOX;
    c.act = GT_ACT_SILU;
    return c;
}

static float fval(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t mask_of(const gt_mtl_dispatch *d) {
    uint32_t m = 0;
    for (int b = 0; b < GT_MTL_N_BIND; b++)
        if (d->bind[b].kind != GT_MTL_BUF_NONE) m |= 1u << b;
    return m;
}

/* weights: Q8_0 everywhere except attn_v (F16) and ffn_up (F32), at offsets that are not
 * multiples of 256, in buffers 0..2 */
static void toy_weights(const gt_config *c, gt_mtl_wref *tok, gt_mtl_wref *out, gt_mtl_wref *lw) {
    const uint32_t d = (uint32_t)c->d_model, ff = (uint32_t)c->n_ff;
    const uint32_t qd = (uint32_t)(c->n_head * c->head_dim_k);
    const uint32_t kd = (uint32_t)(c->n_head_kv * c->head_dim_k);
    *tok = (gt_mtl_wref){0, 1000032, GT_TYPE_Q8_0, d, (uint32_t)c->n_vocab, d / 32 * 34};
    *out = (gt_mtl_wref){2, 32, GT_TYPE_Q8_0, d, (uint32_t)c->n_vocab, d / 32 * 34};
    for (int32_t il = 0; il < c->n_layer; il++) {
        gt_mtl_wref *w = &lw[il * GT_MTL_W_PER_LAYER];
        const uint64_t at = 5000000ull * (uint64_t)(il + 1) + 96;
        w[GT_MTL_W_Q] = (gt_mtl_wref){1, at, GT_TYPE_Q8_0, d, qd, d / 32 * 34};
        w[GT_MTL_W_K] = (gt_mtl_wref){1, at + 100000, GT_TYPE_Q8_0, d, kd, d / 32 * 34};
        w[GT_MTL_W_V] = (gt_mtl_wref){1, at + 200000, GT_TYPE_F16, d, kd, d * 2};
        w[GT_MTL_W_O] = (gt_mtl_wref){1, at + 300000, GT_TYPE_Q8_0, qd, d, qd / 32 * 34};
        w[GT_MTL_W_GATE] = (gt_mtl_wref){1, at + 400000, GT_TYPE_Q8_0, d, ff, d / 32 * 34};
        w[GT_MTL_W_UP] = (gt_mtl_wref){1, at + 500000, GT_TYPE_F32, d, ff, d * 4};
        w[GT_MTL_W_DOWN] = (gt_mtl_wref){1, at + 600000, GT_TYPE_Q8_0, ff, d, ff / 32 * 34};
    }
}

static void test_plan(void) {
    const gt_config c = toy_config();
    gt_mtl_wref tok, out, lw[3 * GT_MTL_W_PER_LAYER];
    toy_weights(&c, &tok, &out, lw);
    /* 5 rows: session A prefill of 3 (only the last wants logits), session B decode of 2 */
    const gt_mtl_row rows[5] = {{11, 0, false}, {12, 1, false}, {13, 2, true},
                                {21, 40, true}, {22, 41, true}};
    float inv_freq[8];
    for (int i = 0; i < 8; i++) inv_freq[i] = powf(10000.0f, -(float)(2 * i) / 16.0f);
    uint32_t inb[5 * 5 + 5 * 16];
    uint32_t gather_at = 0, rope_at = 0;
    const int32_t n_lg = gt_mtl_step_inputs(&c, inv_freq, rows, 5, inb, &gather_at, &rope_at);
    CHECK(n_lg == 3 && gather_at == 20 && rope_at == 25);
    CHECK(inb[0] == 11 && inb[1] == 0 && inb[4 * 3] == 21 && inb[4 * 3 + 1] == 40);
    CHECK(inb[gather_at] == 2 && inb[gather_at + 1] == 3 && inb[gather_at + 2] == 4);
    for (int t = 0; t < 5; t++)
        for (int i = 0; i < 8; i++) {
            const double th = (double)rows[t].pos * (double)inv_freq[i];
            CHECK(fabs(fval(inb[rope_at + 16 * t + i]) - cos(th)) < 1e-6);
            CHECK(fabs(fval(inb[rope_at + 16 * t + 8 + i]) - sin(th)) < 1e-6);
        }
    const gt_mtl_kv_layout la = {GEIST_KV_F16, 32 * 2, 32 * 2, 64 * 32 * 2, 2 * 64 * 32 * 2,
                                 3 * 2 * 64 * 32 * 2};
    const gt_mtl_kv_layout lb = {GEIST_KV_F32, 32 * 4, 32 * 4, 128 * 32 * 4, 2 * 128 * 32 * 4,
                                 3 * 2 * 128 * 32 * 4};
    const gt_mtl_group groups[2] = {{0, 3, 1, la.layer_bytes, la.k_bytes},
                                    {3, 2, 0, lb.layer_bytes, lb.k_bytes}};
    const gt_mtl_step_in in = {&c, &tok, &out, lw, groups, 2, 5, n_lg, gather_at, rope_at, 64};
    const size_t cap = gt_mtl_step_max_dispatches(c.n_layer, 2);
    gt_mtl_dispatch *ds = calloc(cap, sizeof *ds);
    gt_err err = {0};
    const size_t n = gt_mtl_step_plan(&in, ds, cap, &err);
    /* embed; per layer (19): norm, quant (q/k quantized), q, k, v, rope, 2 kvstore, 2 attn, quant,
     * o, norm, quant, gate, up, act, quant, down; then norm, quant, output */
    CHECK(n == 1 + 3 * 19 + 3);
    CHECK(n <= cap);
    static const gt_mtl_kernel layer_seq[19] = {
        GT_MTL_K_RMSNORM, GT_MTL_K_QUANT, GT_MTL_K_MATVEC, GT_MTL_K_MATVEC, GT_MTL_K_MATVEC,
        GT_MTL_K_ROPE, GT_MTL_K_KVSTORE, GT_MTL_K_KVSTORE, GT_MTL_K_ATTN, GT_MTL_K_ATTN,
        GT_MTL_K_QUANT, GT_MTL_K_MATVEC, GT_MTL_K_RMSNORM, GT_MTL_K_QUANT, GT_MTL_K_MATVEC,
        GT_MTL_K_MATVEC, GT_MTL_K_ACT, GT_MTL_K_QUANT, GT_MTL_K_MATVEC};
    CHECK(ds[0].kernel == GT_MTL_K_EMBED && ds[0].groups_x == 5 && ds[0].groups_y == 1);
    /* the token table: bound at 1000032 rounded down to 256, w_off the remainder */
    CHECK(ds[0].bind[0].kind == GT_MTL_BUF_WEIGHT && ds[0].bind[0].index == 0 &&
          ds[0].bind[0].offset == 1000032 / 256 * 256 && ds[0].pc[0] == 1000032 % 256);
    for (int32_t il = 0; il < 3 && n == 61; il++) {
        const gt_mtl_dispatch *L = &ds[1 + 19 * il];
        for (int k = 0; k < 19; k++) CHECK(L[k].kernel == (uint32_t)layer_seq[k]);
        /* norms: the layer's attn_norm then ffn_norm in the norm buffer, eps by its bits */
        CHECK(L[0].pc[0] == 96 && L[0].pc[1] == 2u * 96 * (uint32_t)il && L[0].pc[2] == 0 &&
              fval(L[0].pc[4]) == 1e-5f && L[0].groups_x == 5);
        CHECK(L[12].pc[1] == (2u * (uint32_t)il + 1) * 96);
        /* q: a weight at its offset; 5 tokens; ldy = n_out; not accumulating */
        const gt_mtl_wref *wq = &lw[il * GT_MTL_W_PER_LAYER];
        CHECK(L[2].bind[0].offset + L[2].pc[0] == wq->offset && L[2].bind[0].offset % 256 == 0);
        CHECK(L[2].pc[1] == GT_TYPE_Q8_0 && L[2].pc[4] == 96 && L[2].pc[5] == 5 &&
              L[2].pc[6] == 96 && L[2].pc[7] == 0 && L[2].groups_x == 96);
        CHECK(L[4].pc[1] == GT_TYPE_F16 && L[4].bind[3].index == GT_MTL_S_V);
        /* o and down accumulate into x */
        CHECK(L[11].pc[7] == 1 && L[11].bind[3].index == GT_MTL_S_X && L[18].pc[7] == 1);
        /* rope: 5 rows x (6 + 2) heads x 8 pairs = 320 threads: 5 groups of 64 */
        CHECK(L[5].groups_x == 5 && L[5].pc[5] == 1 && L[5].pc[6] == rope_at);
        /* KV: per group, bound at the layer's offset, V after the K part (in words) */
        for (int g = 0; g < 2; g++) {
            const gt_mtl_dispatch *ks = &L[6 + g], *at = &L[8 + g];
            CHECK(ks->bind[6].kind == GT_MTL_BUF_KV && ks->bind[6].index == (uint32_t)g);
            CHECK(ks->bind[6].offset == (uint64_t)il * groups[g].layer_bytes);
            CHECK(ks->pc[0] == (uint32_t)groups[g].r0 && ks->pc[1] == (uint32_t)groups[g].n &&
                  ks->pc[4] == 0 && ks->pc[5] == groups[g].k_bytes / 4 && ks->pc[6] == groups[g].mode &&
                  ks->pc[7] == 2 && ks->pc[8] == 16 && ks->pc[9] == 16 &&
                  ks->groups_x == ((uint32_t)groups[g].n * (32 + 32) / 2 + 63) / 64);
            CHECK(at->bind[6].offset == ks->bind[6].offset && at->pc[6] == ks->pc[5] &&
                  at->pc[7] == groups[g].mode &&
                  at->pc[8] == 64 && fval(at->pc[9]) == 0.25f &&
                  at->groups_x == (uint32_t)groups[g].n * 6);
        }
        /* the F32 up product takes float activations: no quant between gate and up */
        CHECK(L[15].pc[1] == GT_TYPE_F32 && L[16].pc[0] == 5 * 160);
    }
    /* the output: only the 3 rows that want logits, gathered by the final norm */
    const gt_mtl_dispatch *fn = &ds[58], *fo = &ds[60];
    CHECK(fn->kernel == GT_MTL_K_RMSNORM && fn->groups_x == 3 && fn->pc[2] == 1 &&
          fn->pc[3] == gather_at && fn->pc[1] == 2u * 3 * 96);
    CHECK(ds[59].kernel == GT_MTL_K_QUANT && ds[59].pc[1] == 3 * 96 / 32 && ds[59].pc[2] == 0);
    CHECK(fo->kernel == GT_MTL_K_MATVEC && fo->pc[5] == 3 && fo->bind[3].index == GT_MTL_S_LG);
    CHECK(fo->groups_x == 65535 && fo->groups_y == 2); /* 70001 rows */
    /* every dispatch binds exactly what its kernel declares, at 256-aligned offsets, with the
     * kernel's push-constant size */
    for (size_t i = 0; i < n; i++) {
        CHECK(mask_of(&ds[i]) == gt_mtl_kernels[ds[i].kernel].bindings);
        CHECK(ds[i].pc_bytes == gt_mtl_kernels[ds[i].kernel].pc_bytes);
        CHECK(ds[i].pc_bytes <= GT_MTL_PC_WORDS * 4);
        for (int b = 0; b < GT_MTL_N_BIND; b++) CHECK(ds[i].bind[b].offset % 256 == 0);
        CHECK(ds[i].groups_x >= 1 && ds[i].groups_y >= 1);
    }
    /* no row wants logits: no output dispatches */
    gt_mtl_step_in none = in;
    none.n_logits = 0;
    CHECK(gt_mtl_step_plan(&none, ds, cap, &err) == 1 + 3 * 19);
    /* too small an array, or a bad pass: 0 and an error */
    CHECK(gt_mtl_step_plan(&in, ds, 10, &err) == 0 && strstr(err.msg, "dispatches"));
    gt_mtl_step_in bad = in;
    bad.n_rows = GT_MTL_MAX_ROWS + 1;
    CHECK(gt_mtl_step_plan(&bad, ds, cap, &err) == 0 && err.status == GEIST_ERR_INVALID_ARGUMENT);
    /* a KV layer past 2^32 words: refused with a clear error */
    gt_mtl_group huge[2] = {groups[0], groups[1]};
    huge[1].layer_bytes = 5ull << 32;
    bad = in;
    bad.groups = huge;
    CHECK(gt_mtl_step_plan(&bad, ds, cap, &err) == 0 && err.status == GEIST_ERR_UNSUPPORTED &&
          strstr(err.msg, "max_seq_len"));
    free(ds);
    /* scratch: as vulkan's (the widest of d, n_ff, heads x head_dim_v for the 8-bit rows) */
    uint64_t sb[GT_MTL_S_COUNT];
    gt_mtl_scratch_bytes(&c, 64, 100, sb);
    CHECK(sb[GT_MTL_S_X] == 64 * 96 * 4 && sb[GT_MTL_S_AQ] == 64 * 160 &&
          sb[GT_MTL_S_SC] == 64ull * 6 * 100 * 4 && sb[GT_MTL_S_LG] == 64ull * 70001 * 4 &&
          sb[GT_MTL_S_IN] == (64 * 5 + 64 * 16) * 4 && sb[GT_MTL_S_NORMS] == 7 * 96 * 4);
}

/* Mixed weight types, as vk_forward.c records them: each quantized product's 8-bit activations
 * made when the scratch does not hold its source in its format (fmt 0: blocks of 32 for
 * Q8_0/Q4_0/Q4_1/Q5_0; fmt 1: blocks of 256 for Q4_K/Q6_K), float products in between leaving
 * them; one session with an INT8 KV (one kvstore invocation per row, K or V, and KV head). */
static void test_mixed_types_and_int8(void) {
    gt_config c = toy_config();
    c.n_layer = 1;
    c.d_model = 256;
    c.n_ff = 512;
    c.n_vocab = 300;
    const uint32_t d = 256, ff = 512, qd = 96, kd = 32;
    const gt_mtl_wref tok = {0, 0, GT_TYPE_Q6_K, d, 300, d / 256 * 210};
    const gt_mtl_wref out = {0, 1 << 20, GT_TYPE_Q6_K, d, 300, d / 256 * 210};
    gt_mtl_wref lw[GT_MTL_W_PER_LAYER] = {
        [GT_MTL_W_Q] = {0, 2 << 20, GT_TYPE_Q4_K, d, qd, d / 256 * 144},
        [GT_MTL_W_K] = {0, 3 << 20, GT_TYPE_Q8_0, d, kd, d / 32 * 34},
        [GT_MTL_W_V] = {0, 4 << 20, GT_TYPE_Q6_K, d, kd, d / 256 * 210},
        [GT_MTL_W_O] = {0, 5 << 20, GT_TYPE_Q5_0, qd, d, qd / 32 * 22},
        [GT_MTL_W_GATE] = {0, 6 << 20, GT_TYPE_Q6_K, d, ff, d / 256 * 210},
        [GT_MTL_W_UP] = {0, 7 << 20, GT_TYPE_Q4_K, d, ff, d / 256 * 144},
        [GT_MTL_W_DOWN] = {0, 8 << 20, GT_TYPE_F16, ff, d, ff * 2}};
    const gt_mtl_row rows[3] = {{1, 0, false}, {2, 1, false}, {3, 2, true}};
    float inv_freq[8];
    for (int i = 0; i < 8; i++) inv_freq[i] = powf(10000.0f, -(float)(2 * i) / 16.0f);
    uint32_t inb[3 * 5 + 3 * 16];
    uint32_t gather_at = 0, rope_at = 0;
    const int32_t n_lg = gt_mtl_step_inputs(&c, inv_freq, rows, 3, inb, &gather_at, &rope_at);
    gt_mtl_kv_layout lay;
    gt_err err = {0};
    CHECK(gt_mtl_kv_plan(GEIST_KV_INT8, 40, 1, 2, 16, 16, UINT64_MAX, &lay, &err) == GEIST_OK);
    CHECK(lay.mode == GEIST_KV_INT8 && lay.k_row == 2 * (4 + 16) && lay.k_bytes == 40 * 40);
    const gt_mtl_group g = {0, 3, lay.mode, lay.layer_bytes, lay.k_bytes};
    const gt_mtl_step_in in = {&c, &tok, &out, lw, &g, 1, 3, n_lg, gather_at, rope_at, 40};
    const size_t cap = gt_mtl_step_max_dispatches(1, 1);
    gt_mtl_dispatch *ds = calloc(cap, sizeof *ds);
    const size_t n = gt_mtl_step_plan(&in, ds, cap, &err);
    /* embed; norm, quant 1, q, quant 0, k, quant 1, v, rope, kvstore, attn, quant 0, o, norm,
     * quant 1, gate, up (the same format: no quant), act, down (F16: none); norm, quant 1, out */
    static const gt_mtl_kernel seq[22] = {
        GT_MTL_K_EMBED, GT_MTL_K_RMSNORM, GT_MTL_K_QUANT, GT_MTL_K_MATVEC, GT_MTL_K_QUANT,
        GT_MTL_K_MATVEC, GT_MTL_K_QUANT, GT_MTL_K_MATVEC, GT_MTL_K_ROPE, GT_MTL_K_KVSTORE,
        GT_MTL_K_ATTN, GT_MTL_K_QUANT, GT_MTL_K_MATVEC, GT_MTL_K_RMSNORM, GT_MTL_K_QUANT,
        GT_MTL_K_MATVEC, GT_MTL_K_MATVEC, GT_MTL_K_ACT, GT_MTL_K_MATVEC, GT_MTL_K_RMSNORM,
        GT_MTL_K_QUANT, GT_MTL_K_MATVEC};
    CHECK(n == 22 && n <= cap);
    for (size_t i = 0; i < n && n == 22; i++) {
        CHECK(ds[i].kernel == (uint32_t)seq[i]);
        CHECK(mask_of(&ds[i]) == gt_mtl_kernels[ds[i].kernel].bindings);
        CHECK(ds[i].pc_bytes == gt_mtl_kernels[ds[i].kernel].pc_bytes);
    }
    if (n == 22) {
        /* quant: n_in, blocks (3 rows), fmt; the source it reads */
        CHECK(ds[2].pc[0] == d && ds[2].pc[1] == 3 * d / 256 && ds[2].pc[2] == 1 &&
              ds[2].bind[2].index == GT_MTL_S_XN);
        /* a workgroup per 64 words of 8-bit rows: 8 blocks of 32 (one block of 256: ds[2]) */
        CHECK(ds[4].pc[1] == 3 * d / 32 && ds[4].pc[2] == 0 && ds[4].groups_x == (3 * d / 32 + 7) / 8);
        CHECK(ds[2].groups_x == 3 * d / 256);
        CHECK(ds[6].pc[2] == 1 && ds[7].pc[1] == GT_TYPE_Q6_K);
        CHECK(ds[11].pc[0] == qd && ds[11].pc[1] == 3 * qd / 32 && ds[11].pc[2] == 0 &&
              ds[11].bind[2].index == GT_MTL_S_ATT && ds[12].pc[1] == GT_TYPE_Q5_0);
        CHECK(ds[14].pc[2] == 1 && ds[16].pc[1] == GT_TYPE_Q4_K && ds[18].pc[1] == GT_TYPE_F16);
        CHECK(ds[20].pc[1] == 1 && ds[20].pc[2] == 1 && ds[21].groups_x == 300);
        /* INT8 KV: 3 rows x (K, V) x 2 KV heads = 12 invocations; mode 2; head dims */
        const gt_mtl_dispatch *ks = &ds[9], *at = &ds[10];
        CHECK(ks->groups_x == 1 && ks->pc[5] == lay.k_bytes / 4 && ks->pc[6] == GEIST_KV_INT8 &&
              ks->pc[7] == 2 && ks->pc[8] == 16 && ks->pc[9] == 16);
        CHECK(at->pc[6] == lay.k_bytes / 4 && at->pc[7] == GEIST_KV_INT8 && at->pc[8] == 40 &&
              at->groups_x == 3 * 6);
    }
    free(ds);
}

static void test_refusals(void) {
    geist_model m;
    memset(&m, 0, sizeof m);
    m.cfg = toy_config();
    gt_layer layers[3];
    memset(layers, 0, sizeof layers);
    m.layers = layers;
    static const uint8_t dummy[64];
    m.tok_embd = (gt_weight){dummy, GT_TYPE_Q8_0, 96, 70001, 102};
    m.output = m.tok_embd;
    for (int il = 0; il < 3; il++) {
        gt_weight *ws[7] = {&layers[il].wq, &layers[il].wk, &layers[il].wv, &layers[il].wo,
                            &layers[il].w_gate, &layers[il].w_up, &layers[il].w_down};
        for (int i = 0; i < 7; i++) *ws[i] = (gt_weight){dummy, GT_TYPE_Q4_0, 96, 96, 54};
    }
    char why[256];
    gt_mtl_check_model(&m, why, sizeof why);
    CHECK(why[0] == '\0');
    layers[1].w_down.type = GT_TYPE_Q4_K; /* the K-quants vulkan runs: accepted */
    layers[2].wq.type = GT_TYPE_Q6_K;
    layers[0].wk.type = GT_TYPE_Q5_0;
    gt_mtl_check_model(&m, why, sizeof why);
    CHECK(why[0] == '\0');
    layers[1].w_down.type = GT_TYPE_Q5_1;
    gt_mtl_check_model(&m, why, sizeof why);
    CHECK(strstr(why, "metal: tensor blk.1.ffn_down is Q5_1") && strstr(why, "Q4_K and Q6_K"));
    layers[1].w_down.type = GT_TYPE_Q4_1;
    m.cfg.final_softcap = 30.0f;
    gt_mtl_check_model(&m, why, sizeof why);
    CHECK(strstr(why, "metal: logit soft-capping"));
    m.cfg.final_softcap = 0.0f;
    static const float bias[16];
    layers[2].bk.data = bias;
    gt_mtl_check_model(&m, why, sizeof why);
    CHECK(strstr(why, "metal: attention biases (blk.2)"));
    layers[2].bk.data = NULL;
    layers[2].wq.n_out = 1 << 20;
    layers[2].wq.row_bytes = 1 << 13; /* 8 GiB */
    gt_mtl_check_model(&m, why, sizeof why);
    CHECK(strstr(why, "blk.2.attn_q exceeds 4 GiB"));
    layers[2].wq.n_out = 96;
    layers[2].wq.row_bytes = 54;
    layers[0].sliding = true;
    gt_mtl_check_model(&m, why, sizeof why);
    CHECK(strstr(why, "metal: sliding-window layers"));
    layers[0].sliding = false;
    m.cfg.n_rot = 15;
    gt_mtl_check_model(&m, why, sizeof why);
    CHECK(strstr(why, "head geometry"));
    m.cfg.n_rot = 16;
    m.cfg.qk_norm = true;
    gt_mtl_check_model(&m, why, sizeof why);
    CHECK(strstr(why, "layer recipe"));
    m.cfg.qk_norm = false;
    m.cfg.arch = GT_ARCH_GEMMA3;
    snprintf(m.cfg.arch_name, sizeof m.cfg.arch_name, "gemma3");
    gt_mtl_check_model(&m, why, sizeof why);
    CHECK(strstr(why, "llama architecture only; this model is gemma3"));
}

/* every tensor of a real file's plan, as a weight view: its buffer and offset */
static void test_wrefs(const char *path) {
    void *map = NULL;
    size_t size = 0;
    char why[256];
    if (gt_map_file(path, &map, &size, why, sizeof why) != GT_MAP_OK) {
        printf("FAIL: cannot map %s (run from the repository root): %s\n", path, why);
        fails++;
        return;
    }
    gguf_file g;
    gt_err err = {0};
    if (gt_gguf_parse(map, size, &g, &err) != GEIST_OK) {
        printf("FAIL: %s: %s\n", path, err.msg);
        fails++;
        gt_unmap_file(map, size);
        return;
    }
    for (int how = 0; how < 2; how++) { /* 0: wrapped (one view), 1: copied */
        gt_mtl_plan p;
        CHECK(gt_mtl_plan_gguf(&g, 16384, 1ull << 30, how == 1, false, &p, &err) == GEIST_OK);
        int found = 0;
        for (uint64_t i = 0; i < g.n_tensors; i++) {
            const gguf_tensor *t = &g.tensors[i];
            if (t->nbytes == 0) continue;
            const gt_weight w = {t->data, t->type, (int64_t)t->ne[0], 1, (size_t)t->nbytes};
            gt_mtl_wref r;
            CHECK(gt_mtl_wref_of(&g, &p, &w, &r));
            if (how == 0)
                CHECK(r.buf == 0 && p.views[0].addr + r.offset == (uint64_t)(uintptr_t)t->data);
            else
                CHECK(r.buf == (uint32_t)p.n_views + (uint32_t)p.place[i].index &&
                      r.offset == p.place[i].offset && r.offset % GT_MTL_COPY_ALIGN == 0);
            found++;
        }
        CHECK(found > 10);
        const gt_weight stranger = {(const uint8_t *)map + 1, GT_TYPE_F32, 1, 1, 4};
        gt_mtl_wref r;
        CHECK(!gt_mtl_wref_of(&g, &p, &stranger, &r));
        gt_mtl_plan_free(&p);
    }
    gt_gguf_free(&g);
    gt_unmap_file(map, size);
}

int main(int argc, char **argv) {
    test_plan();
    test_mixed_types_and_int8();
    test_refusals();
    test_wrefs(argc > 1 ? argv[1] : "tests/fuzz/corpus/gguf/llama_q8.gguf");
    printf("test_metal_step: %s\n", fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
