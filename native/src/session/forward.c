/* The transformer forward pass for every supported architecture, one general mechanism driven by
 * gt_config flags (QK norm, post-norms, activation, rope style, sliding layers). It runs a batch
 * of rows from one or more sessions (forward.h): matrix products go through the backend once for
 * all rows; attention runs per session over its own KV. A single session's call is a batch of
 * its own rows, in chunks so scratch stays bounded. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"

#include "../backend/act_quant.h"
#include "kv.h"
#include "session.h"
#include "../util/platform.h"
#include "../util/pool.h"
#include "../util/util.h"
#include "../util/vmath.h"

static void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    /* four double lanes in a fixed order (the compiler may vectorize them) */
    double l[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t i0 = 0;
    for (; i0 + 4 <= n; i0 += 4)
        for (int k = 0; k < 4; k++) l[k] += (double)x[i0 + k] * (double)x[i0 + k];
    for (; i0 < n; i0++) l[0] += (double)x[i0] * (double)x[i0];
    const double ss = (l[0] + l[1]) + (l[2] + l[3]);
    const float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

/* cos and sin of every rotary angle of one position (n_rot / 2 each), shared by all its heads */
static void rope_angles(int32_t n_rot, const float *inv_freq, float pos, float *cs, float *sn) {
    for (int32_t i = 0; i < n_rot / 2; i++) {
        const double theta = (double)pos * (double)inv_freq[i];
        cs[i] = (float)cos(theta);
        sn[i] = (float)sin(theta);
    }
}

static void rope(float *v, int32_t n_rot, gt_rope_style style, const float *cs, const float *sn) {
    const int32_t half = n_rot / 2;
    for (int32_t i = 0; i < half; i++) {
        const float c = cs[i], s = sn[i];
        const int32_t a = style == GT_ROPE_NORM ? 2 * i : i;
        const int32_t b = style == GT_ROPE_NORM ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

/* Matrix products go through the engine's worker pool in tasks of MM_ROWS output rows. The task
 * boundaries do not depend on the thread count and every backend computes a row the same way
 * whichever rows it is given, so results are bit-identical for any n_threads and any batch. */
#define MM_ROWS 64

/* Row steps cheaper than a pool hand-off (norms, rotary, K/V stores, activation, quantizing the
 * activations: a few us per row) run on the calling thread for fewer rows than this; attention
 * always goes to the pool. */
#define POOL_MIN_ROWS 8

/* Up to three products of the same activations (q, k, v; gate, up) run as one pool job: one
 * wake-up and one barrier instead of three, and the activations are quantized once per format. */
#define MM_PARTS 3

typedef struct mm_part {
    const gt_weight *w;
    float *y;
    int64_t ldy;
    const void *xq;    /* activations quantized for w (backend.h), or NULL: float path */
    int64_t rows;      /* output rows per task */
    int64_t task0;     /* the job's first task of this part */
} mm_part;

typedef struct mm_job {
    const gt_backend *be;
    const float *x;
    int64_t n;
    int32_t n_parts;
    mm_part p[MM_PARTS];
} mm_job;

static void mm_task(void *ctx, int64_t task, float *tmp) {
    const mm_job *j = ctx;
    int32_t k = 0;
    while (k + 1 < j->n_parts && task >= j->p[k + 1].task0) k++;
    const mm_part *p = &j->p[k];
    const int64_t r0 = (task - p->task0) * p->rows;
    const int64_t r1 = r0 + p->rows < p->w->n_out ? r0 + p->rows : p->w->n_out;
    if (p->xq != NULL) j->be->matmul_q(p->w, p->xq, j->n, p->y, p->ldy, r0, r1);
    else j->be->matmul(p->w, j->x, j->n, p->y, p->ldy, r0, r1, tmp);
}

/* Work on each token's row before a product: its prologue (the row step that makes x, given
 * no scratch), then its activations quantized once per format the parts need. */
typedef struct quant_job {
    const gt_backend *be;
    const float *x;
    int64_t n;
    int32_t n_bufs;
    gt_pool_fn pre;
    void *pre_ctx;
    struct { uint32_t type; int64_t n_in; uint8_t *xq; size_t rb; } b[MM_PARTS];
} quant_job;

/* Pool task: token `task` */
static void quant_task(void *ctx, int64_t task, float *unused) {
    (void)unused;
    const quant_job *j = ctx;
    if (j->pre) j->pre(j->pre_ctx, task, NULL);
    for (int32_t k = 0; k < j->n_bufs; k++)
        j->be->quantize_acts(j->b[k].type, j->x + task * j->b[k].n_in, 1, j->b[k].n_in,
                             j->b[k].xq + task * j->b[k].rb);
}

/* y_k[t * ldy_k + r] = dot(W_k[r], x[t]) for the n_parts products (all of x's width), after
 * pre(pre_ctx, t, NULL) made row t of x (pre may be NULL): the row steps between two products
 * ride on the job that quantizes the rows, one pool hand-off fewer (a batched step of 8 sessions
 * had ~450 jobs). tmp: n_in floats for the calling thread. */
static void pool_matmuls(gt_pool *pool, const gt_backend *be, int32_t n_parts,
                         const gt_weight *const *w, const float *x, int32_t n, float *const *y,
                         const int64_t *ldy, float *tmp, gt_pool_fn pre, void *pre_ctx) {
    mm_job j = {be, x, n, n_parts, {{0}}};
    quant_job qj = {be, x, n, 0, pre, pre_ctx, {{0}}};
    _Alignas(64) uint8_t small[16384]; /* decode's activations fit here */
    size_t small_used = 0;
    void *heap[MM_PARTS] = {NULL};
    int64_t tasks = 0;
    size_t float_scratch = 0;
    for (int32_t k = 0; k < n_parts; k++) {
        mm_part *p = &j.p[k];
        p->w = w[k];
        p->y = y[k];
        p->ldy = ldy[k];
        /* tasks of 16 rows balance the threads (576 rows are 9 tasks of 64: 5 against 4); a
         * large matrix (the output) has plenty of tasks of 64, which claim less often */
        p->rows = w[k]->n_out > 4096 ? MM_ROWS : MM_ROWS / 4;
        p->task0 = tasks;
        tasks += (w[k]->n_out + p->rows - 1) / p->rows;
        const size_t rb = be->act_row_bytes != NULL ? be->act_row_bytes(w[k]->type, w[k]->n_in) : 0;
        if (rb > 0 && n > 0) {
            /* the same format as an earlier part's: share its rows */
            for (int32_t e = 0; e < k && p->xq == NULL; e++)
                if (j.p[e].xq != NULL && w[e]->n_in == w[k]->n_in &&
                    gt_act_format_for(w[e]->type) == gt_act_format_for(w[k]->type))
                    p->xq = j.p[e].xq;
            if (p->xq == NULL) {
                const size_t need = rb * (size_t)n;
                uint8_t *buf = NULL;
                if (small_used + need <= sizeof small) {
                    buf = small + small_used;
                    small_used += (need + 63) & ~(size_t)63;
                } else {
                    buf = heap[k] = gt_aligned_alloc(64, (need + 63) & ~(size_t)63);
                }
                if (buf != NULL) {
                    qj.b[qj.n_bufs].type = w[k]->type;
                    qj.b[qj.n_bufs].n_in = w[k]->n_in;
                    qj.b[qj.n_bufs].xq = buf;
                    qj.b[qj.n_bufs].rb = rb;
                    qj.n_bufs++;
                    p->xq = buf;
                }
            }
        }
        if (p->xq == NULL && (size_t)w[k]->n_in > float_scratch) float_scratch = (size_t)w[k]->n_in;
    }
    if (qj.n_bufs > 0 || pre != NULL)
        gt_pool_run(n < POOL_MIN_ROWS ? NULL : pool, n, 0, quant_task, &qj, tmp);
    gt_pool_run(pool, tasks, float_scratch, mm_task, &j, tmp);
    for (int32_t k = 0; k < n_parts; k++) gt_aligned_free(heap[k]);
}

static void pool_matmul(gt_pool *pool, const gt_backend *be, const gt_weight *w, const float *x,
                        int32_t n, float *y, int64_t ldy, float *tmp) {
    pool_matmuls(pool, be, 1, &w, x, n, &y, &ldy, tmp, NULL, NULL);
}

/* A product whose output rows are packed (ldy = n_out), on the engine's pool, after the prologue
 * pre (may be NULL; see pool_matmuls). */
static void matmul(gt_pool *pool, const gt_backend *be, const gt_weight *w, const float *x,
                   int32_t n, float *y, float *tmp, gt_pool_fn pre, void *pre_ctx) {
    const int64_t ldy = w->n_out;
    pool_matmuls(pool, be, 1, &w, x, n, &y, &ldy, tmp, pre, pre_ctx);
}

/* A group: the contiguous rows of one session. Per layer its rows either attend as separate
 * tasks, after all their K/V rows were written (GT_KV_DIRECT) or staged (GT_KV_STAGED, rings), or
 * one after the other, each writing its K/V row and attending (GT_KV_IN_ORDER). All three give
 * the same numbers (kv.h). */
typedef struct group {
    int32_t r0, n;
    gt_kv_batching mode; /* this layer */
    gt_kv_stage stage;   /* GT_KV_STAGED: the rows' K/V, in the fwd scratch */
    gt_attn_scratch attn;
    int32_t attn_ctx; /* max_ctx the attn scratch was made for (0: none) */
} group;

struct gt_fwd_scratch {
    int32_t cap_rows, cap_groups;
    float *x, *xn, *q, *k, *v, *att, *o, *gate, *up, *tmp, *lg;
    int32_t *row_group; /* group index of each row */
    uint8_t *stage;     /* staged K/V rows, stage_stride bytes per row of the batch */
    size_t stage_stride;
    float *ctmp;        /* the calling thread's scratch for row tasks (ctmp_floats) */
    size_t ctmp_floats;
    int32_t cap_lg; /* logits rows lg holds */
    group *groups;
    uint64_t bytes;
    gt_config cfg; /* the geometry every buffer was sized for (one runtime serves many models) */
    bool has_cfg;
};

gt_fwd_scratch *gt_fwd_scratch_create(void) { return calloc(1, sizeof(gt_fwd_scratch)); }

static void free_rows(gt_fwd_scratch *sc) {
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
    free(sc->row_group);
    free(sc->stage);
    sc->stage = NULL;
    sc->x = sc->xn = sc->q = sc->k = sc->v = sc->att = sc->o = sc->gate = sc->up = sc->tmp = NULL;
    sc->row_group = NULL;
    sc->cap_rows = 0;
}

void gt_fwd_scratch_free(gt_fwd_scratch *sc) {
    if (!sc) return;
    free_rows(sc);
    free(sc->lg);
    free(sc->ctmp);
    for (int32_t g = 0; g < sc->cap_groups; g++)
        if (sc->groups[g].attn_ctx) gt_attn_scratch_free(&sc->groups[g].attn);
    free(sc->groups);
    free(sc);
}

uint64_t gt_fwd_scratch_bytes(const gt_fwd_scratch *sc) { return sc ? sc->bytes : 0; }

/* A scratch made for one model's geometry is dropped before another model's step uses it: the
 * buffers grow by rows and contexts, and their widths come from the config. */
static void fit_geometry(gt_fwd_scratch *sc, const gt_config *c) {
    if (sc->has_cfg && memcmp(&sc->cfg, c, sizeof *c) == 0) return;
    free_rows(sc);
    free(sc->lg);
    sc->lg = NULL;
    sc->cap_lg = 0;
    free(sc->ctmp);
    sc->ctmp = NULL;
    sc->ctmp_floats = 0;
    for (int32_t g = 0; g < sc->cap_groups; g++) {
        if (sc->groups[g].attn_ctx) gt_attn_scratch_free(&sc->groups[g].attn);
        sc->groups[g].attn_ctx = 0;
    }
    sc->bytes = 0;
    sc->cfg = *c;
    sc->has_cfg = true;
}

static bool grow_rows(gt_fwd_scratch *sc, const gt_config *c, int32_t rows) {
    if (rows <= sc->cap_rows) return true;
    free_rows(sc);
    const size_t n = (size_t)rows;
    const size_t qd = (size_t)c->n_head * (size_t)c->head_dim_k;
    const size_t kd = (size_t)c->n_head_kv * (size_t)c->head_dim_k;
    const size_t vd = (size_t)c->n_head_kv * (size_t)c->head_dim_v;
    const size_t od = (size_t)c->n_head * (size_t)c->head_dim_v;
    size_t widest = (size_t)c->d_model;
    if ((size_t)c->n_ff > widest) widest = (size_t)c->n_ff;
    if (od > widest) widest = od;
    const size_t per_row = 3 * (size_t)c->d_model + qd + kd + vd + od + 2 * (size_t)c->n_ff;
    sc->x = gt_malloc_array(n, (size_t)c->d_model * sizeof(float));
    sc->xn = gt_malloc_array(n, (size_t)c->d_model * sizeof(float));
    sc->q = gt_malloc_array(n, qd * sizeof(float));
    sc->k = gt_malloc_array(n, kd * sizeof(float));
    sc->v = gt_malloc_array(n, vd * sizeof(float));
    sc->att = gt_malloc_array(n, od * sizeof(float));
    sc->o = gt_malloc_array(n, (size_t)c->d_model * sizeof(float));
    sc->gate = gt_malloc_array(n, (size_t)c->n_ff * sizeof(float));
    sc->up = gt_malloc_array(n, (size_t)c->n_ff * sizeof(float));
    sc->tmp = malloc(widest * sizeof(float));
    sc->row_group = gt_malloc_array(n, sizeof(int32_t));
    /* the widest row format (F32) of any session's KV: gt_kv_stage_row_bytes' bound */
    sc->stage_stride = (kd + vd) * sizeof(float);
    sc->stage = gt_malloc_array(n, sc->stage_stride);
    if (!sc->x || !sc->xn || !sc->q || !sc->k || !sc->v || !sc->att || !sc->o || !sc->gate ||
        !sc->up || !sc->tmp || !sc->row_group || !sc->stage) {
        free_rows(sc);
        return false;
    }
    sc->cap_rows = rows;
    sc->bytes = (n * per_row + widest) * sizeof(float) + n * (sizeof(int32_t) + sc->stage_stride);
    return true;
}

/* Floats of per-thread scratch a row task needs: attention (kv.h) or rotary angles (n_rot). */
static size_t row_task_floats(const gt_config *c, int32_t max_ctx) {
    const size_t attn = gt_attn_scratch_floats(c, max_ctx);
    return attn > (size_t)c->n_rot ? attn : (size_t)c->n_rot;
}

static bool grow_groups(gt_fwd_scratch *sc, const gt_config *c, int32_t n_groups,
                        int32_t max_ctx) {
    if (n_groups > sc->cap_groups) {
        group *g = realloc(sc->groups, (size_t)n_groups * sizeof *g);
        if (!g) return false;
        memset(g + sc->cap_groups, 0, (size_t)(n_groups - sc->cap_groups) * sizeof *g);
        sc->groups = g;
        sc->cap_groups = n_groups;
    }
    for (int32_t i = 0; i < n_groups; i++) {
        group *g = &sc->groups[i];
        if (g->attn_ctx >= max_ctx) continue;
        if (g->attn_ctx) gt_attn_scratch_free(&g->attn);
        g->attn_ctx = 0;
        if (!gt_attn_scratch_init(&g->attn, c, max_ctx)) return false;
        g->attn_ctx = max_ctx;
    }
    const size_t need = row_task_floats(c, max_ctx);
    if (need > sc->ctmp_floats) {
        float *t = malloc(need * sizeof(float));
        if (!t) return false;
        free(sc->ctmp);
        sc->ctmp = t;
        sc->ctmp_floats = need;
    }
    return true;
}

static bool grow_logits(gt_fwd_scratch *sc, const gt_config *c, int32_t rows) {
    if (rows <= sc->cap_lg) return true;
    float *lg = gt_malloc_array((size_t)rows, (size_t)c->n_vocab * sizeof(float));
    if (!lg) return false;
    free(sc->lg);
    sc->lg = lg;
    sc->cap_lg = rows;
    return true;
}

/* ---- the per-layer work around the matrix products, as pool tasks --------------------------
 * Each step is a job of independent tasks (one per row, or one per group for the K/V writes), so
 * it runs on every thread and its results do not depend on which thread ran what. */

typedef enum row_step {
    STEP_ATTN_NORM, /* the previous layer's x += post_norm(o), then xn = norm(x) */
    STEP_QK,        /* QK norm and rotary embedding of q and k; rows of direct and staged
                     * groups then store their K/V */
    STEP_ATTEND,    /* rows of direct and staged groups attend, in slices of their heads */
    STEP_GROUP,     /* per group: in order, store K/V and attend row after row; staged: store */
    STEP_POST_ATTN, /* x += post_norm(o); xn = ffn_norm(x) */
    STEP_ACT        /* gate = act(gate) * up */
} row_step;

typedef struct layer_job {
    const geist_model *m;
    const gt_batch_row *rows;
    gt_fwd_scratch *sc;
    int32_t il;
    row_step step;
    int32_t n_slices; /* STEP_ATTEND: query-head slices per row (one per KV head, or halves) */
} layer_job;

/* x += o, o normed first on architectures with post-norms (Gemma 3) */
static void add_residual(const gt_config *c, float *x, float *o, const float *post_norm) {
    if (c->post_norms) rmsnorm(o, o, post_norm, c->d_model, c->eps);
    for (int64_t i = 0; i < c->d_model; i++) x[i] += o[i];
}

static void add_bias(float *y, const gt_vec *b) {
    if (b->data)
        for (int64_t i = 0; i < b->n; i++) y[i] += b->data[i];
}

/* cap * tanh(x / cap) over n values (Gemma 2's final logits); tanh in double rounded to float,
 * the same bits on every platform (kv.c's softcap_scores says why) */
static void softcap(float *x, int64_t n, float cap) {
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) x[i] = cap * (float)tanh((double)(x[i] * inv));
}

static void layer_task(void *ctx, int64_t task, float *tmp) {
    const layer_job *j = ctx;
    const geist_model *m = j->m;
    const gt_config *c = &m->cfg;
    const gt_layer *L = &m->layers[j->il];
    gt_fwd_scratch *sc = j->sc;
    const int64_t d = c->d_model;
    const int64_t qd = (int64_t)c->n_head * c->head_dim_k;
    const int64_t kd = (int64_t)c->n_head_kv * c->head_dim_k;
    const int64_t vd = (int64_t)c->n_head_kv * c->head_dim_v;
    const int64_t od = (int64_t)c->n_head * c->head_dim_v;
    const int64_t t = task;
    switch (j->step) {
    case STEP_ATTN_NORM:
        if (j->il > 0) add_residual(c, sc->x + t * d, sc->o + t * d, m->layers[j->il - 1].post_ffn_norm.data);
        rmsnorm(sc->xn + t * d, sc->x + t * d, L->attn_norm.data, d, c->eps);
        break;
    case STEP_QK: {
        const gt_batch_row *r = &j->rows[t];
        const float *inv_freq = L->sliding ? m->inv_freq_local : m->inv_freq_global;
        const float pscale = L->sliding ? c->rope_scale_local : c->rope_scale_global;
        float *cs = tmp, *sn = tmp + c->n_rot / 2;
        rope_angles(c->n_rot, inv_freq, (float)r->pos * pscale, cs, sn);
        float *qt = sc->q + t * qd, *kt = sc->k + t * kd;
        add_bias(qt, &L->bq);
        add_bias(kt, &L->bk);
        add_bias(sc->v + t * vd, &L->bv);
        for (int32_t h = 0; h < c->n_head; h++) {
            float *qh = qt + (int64_t)h * c->head_dim_k;
            if (c->qk_norm) rmsnorm(qh, qh, L->q_norm.data, c->head_dim_k, c->eps);
            rope(qh, c->n_rot, c->rope_style, cs, sn);
        }
        for (int32_t h = 0; h < c->n_head_kv; h++) {
            float *kh = kt + (int64_t)h * c->head_dim_k;
            if (c->qk_norm) rmsnorm(kh, kh, L->k_norm.data, c->head_dim_k, c->eps);
            rope(kh, c->n_rot, c->rope_style, cs, sn);
        }
        const group *g = &sc->groups[sc->row_group[t]];
        if (g->mode == GT_KV_DIRECT)
            gt_kv_write(r->s, j->il, r->pos, sc->k + t * kd, sc->v + t * vd);
        else if (g->mode == GT_KV_STAGED)
            gt_kv_stage_write(r->s, &g->stage, (int32_t)t - g->r0, sc->k + t * kd, sc->v + t * vd);
        break;
    }
    case STEP_ATTEND: { /* task: (row, slice of the query heads) */
        const int64_t row = t / j->n_slices, k = t % j->n_slices;
        const group *g = &sc->groups[sc->row_group[row]];
        if (g->mode == GT_KV_IN_ORDER) break;
        const gt_batch_row *r = &j->rows[row];
        gt_attn_scratch a;
        gt_attn_scratch_view(&a, c, r->s->max_seq_len, tmp);
        gt_kv_attend(r->s, j->il, sc->q + row * qd, r->pos, sc->att + row * od, &a,
                     g->mode == GT_KV_STAGED ? &g->stage : NULL,
                     (int32_t)(k * c->n_head / j->n_slices), (int32_t)((k + 1) * c->n_head / j->n_slices));
        break;
    }
    case STEP_GROUP: { /* in order: write and attend; staged: the rows into the cache */
        group *g = &sc->groups[t];
        if (g->mode == GT_KV_DIRECT) break;
        for (int32_t i = g->r0; i < g->r0 + g->n; i++) {
            const gt_batch_row *r = &j->rows[i];
            if (g->mode == GT_KV_STAGED) {
                gt_kv_stage_commit(r->s, j->il, &g->stage, i - g->r0);
                continue;
            }
            gt_kv_write(r->s, j->il, r->pos, sc->k + i * kd, sc->v + i * vd);
            gt_kv_attend(r->s, j->il, sc->q + i * qd, r->pos, sc->att + i * od, &g->attn, NULL, 0,
                         c->n_head);
        }
        break;
    }
    case STEP_POST_ATTN:
        add_bias(sc->o + t * d, &L->bo);
        add_residual(c, sc->x + t * d, sc->o + t * d, L->post_attn_norm.data);
        rmsnorm(sc->xn + t * d, sc->x + t * d, L->ffn_norm.data, d, c->eps);
        break;
    case STEP_ACT: {
        float *gt = sc->gate + t * c->n_ff;
        const float *ut = sc->up + t * c->n_ff;
        if (c->act == GT_ACT_SILU) gt_silu_mul(gt, ut, c->n_ff, m->backend->simd);
        else gt_gelu_tanh_mul(gt, ut, c->n_ff, m->backend->simd);
        break;
    }
    }
}

static void layer_step(gt_pool *pool, layer_job *j, row_step step, int64_t n_tasks) {
    j->step = step;
    if (step != STEP_ATTEND && step != STEP_GROUP && n_tasks < POOL_MIN_ROWS) pool = NULL;
    gt_pool_run(pool, n_tasks, j->sc->ctmp_floats, layer_task, j, j->sc->ctmp);
}

/* Rows [0, n) through every layer; leaves the final hidden states (after the output norm) in
 * sc->xn. */
static void run_layers(const geist_model *m, const gt_batch_row *rows, int32_t n,
                       int32_t n_groups, gt_fwd_scratch *sc) {
    const gt_config *c = &m->cfg;
    const gt_backend *be = m->backend;
    gt_pool *pool = m->engine->pool;
    const int64_t d = c->d_model;

    for (int32_t t = 0; t < n; t++) {
        float *xt = sc->x + t * d;
        be->get_row(&m->tok_embd, rows[t].id, xt);
        if (c->embed_scale != 1.0f)
            for (int64_t i = 0; i < d; i++) xt[i] *= c->embed_scale;
    }
    for (int32_t il = 0; il < c->n_layer; il++) {
        const gt_layer *L = &m->layers[il];
        layer_job j = {m, rows, sc, il, STEP_ATTN_NORM,
                       c->n_head_kv > 1 ? c->n_head_kv : (c->n_head > 1 ? 2 : 1)};
        { /* prologue: STEP_ATTN_NORM */
            const gt_weight *ws[3] = {&L->wq, &L->wk, &L->wv};
            float *ys[3] = {sc->q, sc->k, sc->v};
            const int64_t ld[3] = {L->wq.n_out, L->wk.n_out, L->wv.n_out};
            pool_matmuls(pool, be, 3, ws, sc->xn, n, ys, ld, sc->tmp, layer_task, &j);
        }
        int32_t n_split = 0, n_direct = 0; /* groups whose rows attend apart; of them direct */
        for (int32_t g = 0; g < n_groups; g++) {
            group *gr = &sc->groups[g];
            const geist_session *s = rows[gr->r0].s;
            gr->mode = gt_kv_batching_for(s, il, gr->n);
            if (gr->mode == GT_KV_STAGED) {
                uint8_t *base = sc->stage + (size_t)gr->r0 * sc->stage_stride;
                gr->stage = (gt_kv_stage){base, base + (size_t)gr->n * s->geom.krow, rows[gr->r0].pos,
                                          gr->n};
            }
            n_split += gr->mode != GT_KV_IN_ORDER;
            n_direct += gr->mode == GT_KV_DIRECT;
        }
        layer_step(pool, &j, STEP_QK, n);
        if (n_split > 0) layer_step(pool, &j, STEP_ATTEND, (int64_t)n * j.n_slices);
        if (n_direct < n_groups) layer_step(pool, &j, STEP_GROUP, n_groups);
        matmul(pool, be, &L->wo, sc->att, n, sc->o, sc->tmp, NULL, NULL);
        { /* prologue: STEP_POST_ATTN */
            const gt_weight *ws[2] = {&L->w_gate, &L->w_up};
            float *ys[2] = {sc->gate, sc->up};
            const int64_t ld[2] = {L->w_gate.n_out, L->w_up.n_out};
            j.step = STEP_POST_ATTN;
            pool_matmuls(pool, be, 2, ws, sc->xn, n, ys, ld, sc->tmp, layer_task, &j);
        }
        j.step = STEP_ACT;
        matmul(pool, be, &L->w_down, sc->gate, n, sc->o, sc->tmp, layer_task, &j);
        /* the residual of the FFN output: the next layer's STEP_ATTN_NORM, or below */
    }
    const gt_layer *last = &m->layers[c->n_layer - 1];
    for (int32_t t = 0; t < n; t++) {
        add_residual(c, sc->x + t * d, sc->o + t * d, last->post_ffn_norm.data);
        rmsnorm(sc->xn + t * d, sc->x + t * d, m->output_norm.data, d, c->eps);
    }
}

/* A device backend's step (backend.h): its rows, its forward; the sessions advance as below. */
static geist_status device_forward(const geist_model *m, const gt_batch_row *rows, int32_t n,
                                   gt_err *err) {
    gt_dev_row *dr = gt_malloc_array((size_t)n, sizeof *dr);
    if (!dr) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory for the batch");
    for (int32_t t = 0; t < n; t++) {
        const geist_session *s = rows[t].s;
        dr[t] = (gt_dev_row){rows[t].id, rows[t].pos, s->dev_kv,
                             s->prefix ? s->prefix->s->dev_kv : NULL, s->n_prefix, rows[t].logits,
                             rows[t].argmax};
    }
    geist_status st = m->backend->device->forward(m->dev, dr, n, err);
    free(dr);
    if (st) return st;
    for (int32_t t = 0; t < n; t++)
        if (t + 1 == n || rows[t + 1].s != rows[t].s) {
            geist_session *s = rows[t].s;
            s->n_past = rows[t].pos + 1;
            s->has_logits = rows[t].logits == s->logits; /* else they were an earlier position's */
            s->logits_on_device = !s->has_logits && rows[t].argmax;
        }
    return GEIST_OK;
}

geist_status gt_forward_batch(const geist_model *m, const gt_batch_row *rows, int32_t n,
                              gt_fwd_scratch *sc, gt_err *err) {
    if (n <= 0) return GEIST_OK;
    if (m->backend->device) return device_forward(m, rows, n, err);
    const gt_config *c = &m->cfg;
    const int64_t d = c->d_model;
    int32_t n_groups = 0, max_ctx = 1, n_lg = 0;
    for (int32_t t = 0; t < n; t++) {
        if (t == 0 || rows[t].s != rows[t - 1].s) n_groups++;
        if (rows[t].s->max_seq_len > max_ctx) max_ctx = rows[t].s->max_seq_len;
        if (rows[t].logits) n_lg++;
    }
    fit_geometry(sc, c);
    if (!grow_rows(sc, c, n) || !grow_groups(sc, c, n_groups, max_ctx))
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory for activations");
    int32_t gi = -1;
    for (int32_t t = 0; t < n; t++) {
        if (t == 0 || rows[t].s != rows[t - 1].s) {
            sc->groups[++gi].r0 = t;
            sc->groups[gi].n = 0;
        }
        sc->groups[gi].n++;
        sc->row_group[t] = gi;
    }
    run_layers(m, rows, n, n_groups, sc);

    /* Output rows: straight into the destination when the rows asking for logits are all rows
     * and their buffers are consecutive (teacher forcing), else through scratch. */
    const size_t nv = (size_t)c->n_vocab;
    bool direct = n_lg == n;
    for (int32_t t = 1; direct && t < n; t++) direct = rows[t].logits == rows[0].logits + t * nv;
    if (direct) {
        pool_matmul(m->engine->pool, m->backend, &m->output, sc->xn, n, rows[0].logits,
                    c->n_vocab, sc->tmp);
    } else if (n_lg > 0) {
        if (!grow_logits(sc, c, n_lg))
            return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory for logits");
        /* gather the rows that want logits to the front of xn (rows only move forward) */
        int32_t k = 0;
        for (int32_t t = 0; t < n; t++)
            if (rows[t].logits) {
                if (k != t) memcpy(sc->xn + k * d, sc->xn + t * d, (size_t)d * sizeof(float));
                k++;
            }
        pool_matmul(m->engine->pool, m->backend, &m->output, sc->xn, n_lg, sc->lg, c->n_vocab,
                    sc->tmp);
        k = 0;
        for (int32_t t = 0; t < n; t++)
            if (rows[t].logits) memcpy(rows[t].logits, sc->lg + (size_t)k++ * nv, nv * sizeof(float));
    }
    if (c->final_softcap > 0.0f)
        for (int32_t t = 0; t < n; t++)
            if (rows[t].logits) softcap(rows[t].logits, c->n_vocab, c->final_softcap);
    for (int32_t g = 0; g < n_groups; g++) {
        const gt_batch_row *last = &rows[sc->groups[g].r0 + sc->groups[g].n - 1];
        geist_session *s = last->s;
        s->n_past = last->pos + 1;
        s->has_logits = last->logits == s->logits; /* else they were an earlier position's */
        s->logits_on_device = false;
    }
    return GEIST_OK;
}

#define GT_CHUNK 64 /* tokens per step of one session's prefill on the host: bounds scratch */

geist_status gt_forward(geist_session *s, const int32_t *ids, int32_t n, float *all_logits,
                        gt_err *err) {
    const geist_model *m = s->model;
    const size_t nv = (size_t)m->cfg.n_vocab;
    /* a device takes its own rows per pass at once (a prompt in one command buffer) */
    const gt_device_ops *dev = m->backend->device;
    const int32_t chunk = dev && dev->step_rows > GT_CHUNK ? dev->step_rows : GT_CHUNK;
    gt_fwd_scratch *sc = gt_fwd_scratch_create();
    gt_batch_row host_rows[GT_CHUNK]; /* a device's longer chunk on the heap */
    gt_batch_row *rows =
        chunk > GT_CHUNK ? gt_malloc_array((size_t)chunk, sizeof *rows) : host_rows;
    if (!sc || !rows) {
        gt_fwd_scratch_free(sc);
        if (rows != host_rows) free(rows);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory for activations");
    }
    geist_status st = GEIST_OK;
    for (int32_t done = 0; done < n && st == GEIST_OK; done += chunk) {
        const int32_t cn = n - done < chunk ? n - done : chunk;
        for (int32_t t = 0; t < cn; t++) {
            rows[t].s = s;
            rows[t].id = ids[done + t];
            rows[t].pos = s->n_past + t;
            rows[t].logits = all_logits ? all_logits + (size_t)(done + t) * nv : NULL;
            rows[t].argmax = NULL;
        }
        if (!all_logits && done + cn == n) rows[cn - 1].logits = s->logits;
        st = gt_forward_batch(m, rows, cn, sc, err);
    }
    if (st == GEIST_OK && all_logits) {
        memcpy(s->logits, all_logits + (size_t)(n - 1) * nv, nv * sizeof(float));
        s->has_logits = true;
    }
    if (rows != host_rows) free(rows);
    gt_fwd_scratch_free(sc);
    return st;
}
