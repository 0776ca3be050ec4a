/* The transformer forward pass for every supported architecture, one general mechanism driven by
 * gt_config flags (QK norm, post-norms, activation, rope style, sliding layers). Matrix products
 * go through the backend; tokens are processed in chunks so scratch stays bounded. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../session/kv.h"
#include "../session/session.h"
#include "../runtime/pool.h"
#include "../util/util.h"

#define GT_CHUNK 32 /* tokens per pass through the layers; bounds scratch to O(chunk * width) */

typedef struct scratch {
    float *x, *xn, *q, *k, *v, *att, *o, *gate, *up, *tmp;
    gt_attn_scratch attn;
} scratch;

static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

static void rope(float *v, int32_t n_rot, gt_rope_style style, const float *inv_freq, float pos) {
    const int32_t half = n_rot / 2;
    for (int32_t i = 0; i < half; i++) {
        const double theta = (double)pos * (double)inv_freq[i];
        const float c = (float)cos(theta), s = (float)sin(theta);
        const int32_t a = style == GT_ROPE_NORM ? 2 * i : i;
        const int32_t b = style == GT_ROPE_NORM ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

static float act(gt_act a, float x) {
    if (a == GT_ACT_SILU) return x / (1.0f + expf(-x));
    /* GELU, tanh approximation */
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

/* Matrix products go through the engine's worker pool in tasks of MM_ROWS output rows. The task
 * boundaries do not depend on the thread count and every backend computes a row the same way
 * whichever rows it is given, so results are bit-identical for any n_threads. */
#define MM_ROWS 64

typedef struct mm_job {
    const gt_backend *be;
    const gt_weight *w;
    const float *x;
    int64_t n, ldy;
    float *y;
} mm_job;

static void mm_task(void *ctx, int64_t task, float *tmp) {
    const mm_job *j = ctx;
    const int64_t r0 = task * MM_ROWS;
    const int64_t r1 = r0 + MM_ROWS < j->w->n_out ? r0 + MM_ROWS : j->w->n_out;
    j->be->matmul(j->w, j->x, j->n, j->y, j->ldy, r0, r1, tmp);
}

/* y[t * ldy + r] = dot(W[r], x[t]); tmp: w->n_in floats for the calling thread. */
static void pool_matmul(gt_pool *pool, const gt_backend *be, const gt_weight *w, const float *x,
                        int32_t n, float *y, int64_t ldy, float *tmp) {
    mm_job j = {be, w, x, n, ldy, y};
    gt_pool_run(pool, (w->n_out + MM_ROWS - 1) / MM_ROWS, (size_t)w->n_in, mm_task, &j, tmp);
}

/* A product whose output rows are packed (ldy = n_out), on the engine's pool. */
static void matmul(gt_pool *pool, const gt_backend *be, const gt_weight *w, const float *x,
                   int32_t n, float *y, float *tmp) {
    pool_matmul(pool, be, w, x, n, y, w->n_out, tmp);
}

static void free_scratch(scratch *sc) {
    free(sc->x);
    free(sc->xn);
    free(sc->q);
    free(sc->k);
    free(sc->v);
    free(sc->att);
    free(sc->o);
    free(sc->gate);
    free(sc->up);
    free(sc->tmp);
    gt_attn_scratch_free(&sc->attn);
}

static bool alloc_scratch(scratch *sc, const gt_config *c, int32_t chunk, int32_t max_ctx) {
    memset(sc, 0, sizeof *sc);
    const size_t n = (size_t)chunk;
    const size_t qd = (size_t)c->n_head * (size_t)c->head_dim_k;
    const size_t kd = (size_t)c->n_head_kv * (size_t)c->head_dim_k;
    const size_t vd = (size_t)c->n_head_kv * (size_t)c->head_dim_v;
    const size_t od = (size_t)c->n_head * (size_t)c->head_dim_v;
    size_t widest = (size_t)c->d_model;
    if ((size_t)c->n_ff > widest) widest = (size_t)c->n_ff;
    if (od > widest) widest = od;
    sc->x = malloc(n * (size_t)c->d_model * sizeof(float));
    sc->xn = malloc(n * (size_t)c->d_model * sizeof(float));
    sc->q = malloc(n * qd * sizeof(float));
    sc->k = malloc(n * kd * sizeof(float));
    sc->v = malloc(n * vd * sizeof(float));
    sc->att = malloc(n * od * sizeof(float));
    sc->o = malloc(n * (size_t)c->d_model * sizeof(float));
    sc->gate = malloc(n * (size_t)c->n_ff * sizeof(float));
    sc->up = malloc(n * (size_t)c->n_ff * sizeof(float));
    sc->tmp = malloc(widest * sizeof(float));
    const bool attn_ok = gt_attn_scratch_init(&sc->attn, c, max_ctx);
    if (!sc->x || !sc->xn || !sc->q || !sc->k || !sc->v || !sc->att || !sc->o || !sc->gate ||
        !sc->up || !sc->tmp || !attn_ok) {
        free_scratch(sc);
        return false;
    }
    return true;
}

/* One chunk of n tokens at positions pos0.. through every layer; leaves the final hidden states
 * (after the output norm) in sc->xn. */
static void run_layers(geist_session *s, const int32_t *ids, int32_t n, int32_t pos0, scratch *sc) {
    const geist_model *m = s->model;
    const gt_config *c = &m->cfg;
    const gt_backend *be = m->backend;
    gt_pool *pool = m->engine->pool;
    const int64_t d = c->d_model;
    const int64_t qd = (int64_t)c->n_head * c->head_dim_k;
    const int64_t kd = (int64_t)c->n_head_kv * c->head_dim_k;
    const int64_t vd = (int64_t)c->n_head_kv * c->head_dim_v;
    const int64_t od = (int64_t)c->n_head * c->head_dim_v;

    for (int32_t t = 0; t < n; t++) {
        float *xt = sc->x + t * d;
        be->get_row(&m->tok_embd, ids[t], xt);
        if (c->embed_scale != 1.0f)
            for (int64_t i = 0; i < d; i++) xt[i] *= c->embed_scale;
    }
    for (int32_t il = 0; il < c->n_layer; il++) {
        const gt_layer *L = &m->layers[il];
        for (int32_t t = 0; t < n; t++) rmsnorm(sc->xn + t * d, sc->x + t * d, L->attn_norm.data, d, c->eps);
        matmul(pool, be, &L->wq, sc->xn, n, sc->q, sc->tmp);
        matmul(pool, be, &L->wk, sc->xn, n, sc->k, sc->tmp);
        matmul(pool, be, &L->wv, sc->xn, n, sc->v, sc->tmp);
        const float *inv_freq = L->sliding ? m->inv_freq_local : m->inv_freq_global;
        const float pscale = L->sliding ? 1.0f : c->rope_scale_global;
        for (int32_t t = 0; t < n; t++) {
            const int32_t pos = pos0 + t;
            float *qt = sc->q + t * qd, *kt = sc->k + t * kd;
            for (int32_t h = 0; h < c->n_head; h++) {
                float *qh = qt + (int64_t)h * c->head_dim_k;
                if (c->qk_norm) rmsnorm(qh, qh, L->q_norm.data, c->head_dim_k, c->eps);
                rope(qh, c->n_rot, c->rope_style, inv_freq, (float)pos * pscale);
            }
            for (int32_t h = 0; h < c->n_head_kv; h++) {
                float *kh = kt + (int64_t)h * c->head_dim_k;
                if (c->qk_norm) rmsnorm(kh, kh, L->k_norm.data, c->head_dim_k, c->eps);
                rope(kh, c->n_rot, c->rope_style, inv_freq, (float)pos * pscale);
            }
            /* Store this token's K/V, then attend: in this order a ring never loses a row that
             * a later token of the same chunk still needs. */
            gt_kv_write(s, il, pos, kt, sc->v + t * vd);
            gt_kv_attend(s, il, qt, pos, sc->att + t * od, &sc->attn);
        }
        matmul(pool, be, &L->wo, sc->att, n, sc->o, sc->tmp);
        for (int32_t t = 0; t < n; t++) {
            float *ot = sc->o + t * d, *xt = sc->x + t * d;
            if (c->post_norms) rmsnorm(ot, ot, L->post_attn_norm.data, d, c->eps);
            for (int64_t i = 0; i < d; i++) xt[i] += ot[i];
            rmsnorm(sc->xn + t * d, xt, L->ffn_norm.data, d, c->eps);
        }
        matmul(pool, be, &L->w_gate, sc->xn, n, sc->gate, sc->tmp);
        matmul(pool, be, &L->w_up, sc->xn, n, sc->up, sc->tmp);
        const int64_t total = (int64_t)n * c->n_ff;
        for (int64_t i = 0; i < total; i++) sc->gate[i] = act(c->act, sc->gate[i]) * sc->up[i];
        matmul(pool, be, &L->w_down, sc->gate, n, sc->o, sc->tmp);
        for (int32_t t = 0; t < n; t++) {
            float *ot = sc->o + t * d, *xt = sc->x + t * d;
            if (c->post_norms) rmsnorm(ot, ot, L->post_ffn_norm.data, d, c->eps);
            for (int64_t i = 0; i < d; i++) xt[i] += ot[i];
        }
    }
    for (int32_t t = 0; t < n; t++) rmsnorm(sc->xn + t * d, sc->x + t * d, m->output_norm.data, d, c->eps);
}

geist_status gt_forward(geist_session *s, const int32_t *ids, int32_t n, float *all_logits,
                        gt_err *err) {
    const geist_model *m = s->model;
    const gt_config *c = &m->cfg;
    scratch sc;
    const int32_t chunk = n < GT_CHUNK ? n : GT_CHUNK;
    if (!alloc_scratch(&sc, c, chunk, s->max_seq_len))
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory for activations");
    const int64_t d = c->d_model;
    for (int32_t done = 0; done < n; done += chunk) {
        const int32_t cn = n - done < chunk ? n - done : chunk;
        run_layers(s, ids + done, cn, s->n_past, &sc);
        if (all_logits) {
            float *dst = all_logits + (size_t)done * (size_t)c->n_vocab;
            pool_matmul(m->engine->pool, m->backend, &m->output, sc.xn, cn, dst, c->n_vocab,
                        sc.tmp);
            if (done + cn == n)
                memcpy(s->logits, dst + (size_t)(cn - 1) * (size_t)c->n_vocab,
                       (size_t)c->n_vocab * sizeof(float));
        } else if (done + cn == n) {
            pool_matmul(m->engine->pool, m->backend, &m->output, sc.xn + (cn - 1) * d, 1,
                        s->logits, c->n_vocab, sc.tmp);
        }
        s->n_past += cn;
    }
    s->has_logits = true;
    free_scratch(&sc);
    return GEIST_OK;
}
