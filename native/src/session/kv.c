/* KV cache rows: storing and attending in the session's KV mode.
 *
 * Formats (per position and KV head unless said otherwise; docs/MEMORY.md has the byte formulas):
 *  F32, F16  plain rows.
 *  INT8      f32 scale + head_dim int8 codes, symmetric (scale = max|x| / 127).
 *  INT4      per group of 32 channels: f16 scale + 16 bytes of 4-bit codes, x = (code - 8) * d
 *            with d = (the value of largest magnitude) / -8 (the Q4_0 rule). When head_dim is a
 *            power of two (<= 512), each head's K and V are first rotated by the normalized
 *            Walsh-Hadamard transform H (orthonormal, H = H^T = H^-1), which spreads outlier
 *            channels over the group: q.k = (Hq).(Hk), so the query is rotated once per head,
 *            and sum w (Hv) = H (sum w v), so the output is rotated back once per head.
 *  KIVI2     K per channel over blocks of GT_KIVI_GROUP tokens (f16 min, f16 step, 2-bit codes per
 *            channel), V per token in groups of 32 channels (f16 min, f16 step, 2-bit codes); the
 *            newest tokens of an incomplete block stay in an F16 residual and are quantized when
 *            their block completes.
 * Attention reads every format in place (no dequantized copy of the cache). Dot products use 8
 * partial sums in a fixed order, so the F16C path and the portable path give identical bits.
 *
 * SIMD follows the engine's backend (its `simd`, backend/backend.h), then the CPU (util/cpu.h):
 * with cpu_scalar every step here is plain C (the portable helpers; the F16 softmax by
 * softmax_f16_plain, softmax_f16path's arithmetic with gt_vexp1), with the same bits as the AVX2
 * kernels. */
#include "kv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/cpu.h"
#include "../util/util.h"
#include "../util/vexp_x86.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define KV_HAVE_X86 1
#define KV_TARGET __attribute__((target("avx2,f16c")))
#endif

#define G GT_KIVI_GROUP
#define QG GT_QGROUP
#define Q4_GROUP_BYTES (2 + QG / 2)  /* f16 scale + 32 nibbles */
#define Q2_GROUP_BYTES (4 + QG / 4)  /* f16 min + f16 step + 32 2-bit codes */
#define KIVI_CHAN_BYTES (4 + G / 4)  /* per channel of a K block: f16 min, f16 step, codes */

static int32_t n_groups(int32_t hd) { return (hd + QG - 1) / QG; }

#define HADAMARD_MAX 512
static bool use_hadamard(int32_t mode, int32_t hd) {
    return mode == GEIST_KV_INT4 && hd >= 2 && hd <= HADAMARD_MAX && (hd & (hd - 1)) == 0;
}

/* In-place normalized fast Walsh-Hadamard transform of n (a power of two) values. */
static void fwht(float *x, int32_t n) {
    for (int32_t len = 1; len < n; len <<= 1)
        for (int32_t i = 0; i < n; i += len << 1)
            for (int32_t j = i; j < i + len; j++) {
                const float a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
    const float sc = 1.0f / sqrtf((float)n);
    for (int32_t i = 0; i < n; i++) x[i] *= sc;
}

bool gt_kv_mode_valid(int32_t mode) { return mode >= GEIST_KV_F32 && mode <= GEIST_KV_KIVI2; }

const char *gt_kv_mode_name(int32_t mode) {
    switch (mode) {
    case GEIST_KV_F32: return "f32";
    case GEIST_KV_F16: return "f16";
    case GEIST_KV_INT8: return "int8";
    case GEIST_KV_INT4: return "int4";
    case GEIST_KV_KIVI2: return "kivi2";
    default: return "unknown";
    }
}

static size_t head_bytes(int32_t mode, int32_t hd) {
    switch (mode) {
    case GEIST_KV_F32: return (size_t)hd * 4;
    case GEIST_KV_F16: return (size_t)hd * 2;
    case GEIST_KV_INT8: return 4 + (size_t)hd;
    case GEIST_KV_INT4: return (size_t)n_groups(hd) * Q4_GROUP_BYTES;
    case GEIST_KV_KIVI2: return (size_t)n_groups(hd) * Q2_GROUP_BYTES; /* V records */
    default: return 0;
    }
}

void gt_kv_geom_init(gt_kv_geom *g, const gt_config *c, int32_t mode) {
    memset(g, 0, sizeof *g);
    g->mode = mode;
    const size_t nkv = (size_t)c->n_head_kv;
    g->vrow = nkv * head_bytes(mode, c->head_dim_v);
    if (mode == GEIST_KV_KIVI2) {
        g->kblock = nkv * (size_t)c->head_dim_k * KIVI_CHAN_BYTES;
        g->resid_row_k = nkv * (size_t)c->head_dim_k * 2;
        g->resid_row_v = nkv * (size_t)c->head_dim_v * 2;
    } else {
        g->krow = nkv * head_bytes(mode, c->head_dim_k);
    }
}

int32_t gt_kv_layer_rows(const gt_kv_geom *g, bool sliding, int32_t window, int32_t cap,
                         bool *ring) {
    if (g->mode == GEIST_KV_KIVI2) {
        /* whole blocks only; a ring keeps ceil(window / G) blocks, enough for every position a
         * query sees (a block is overwritten only once all its tokens left the window) */
        const int64_t wr = ((int64_t)window + G - 1) / G * G;
        *ring = sliding && wr < cap;
        return *ring ? (int32_t)wr : cap / G * G;
    }
    *ring = sliding && window < cap;
    return *ring ? window : cap;
}

uint64_t gt_kv_layer_bytes(const gt_kv_geom *g, int32_t rows) {
    uint64_t b = (uint64_t)rows * (g->krow + g->vrow);
    if (g->mode == GEIST_KV_KIVI2)
        b += (uint64_t)(rows / G) * g->kblock + (uint64_t)G * (g->resid_row_k + g->resid_row_v);
    return b;
}

static void *alloc_commit(size_t n, size_t size, bool *ok) {
    if (n == 0 || size == 0) return NULL;
    void *p = gt_malloc_array(n, size);
    if (!p) {
        *ok = false;
        return NULL;
    }
    /* Committed now (written once), so the game pays the whole cost at creation and never takes
     * page faults mid-conversation; the bytes counted are the bytes resident. */
    gt_commit_zero(p, n * size);
    return p;
}

bool gt_kv_layer_alloc(gt_kv_layer *kv, const gt_kv_geom *g, int32_t rows, bool ring) {
    memset(kv, 0, sizeof *kv);
    kv->rows = rows;
    kv->ring = ring;
    bool ok = true;
    if (g->mode == GEIST_KV_KIVI2) {
        kv->k = alloc_commit((size_t)(rows / G), g->kblock, &ok);
        kv->rk = alloc_commit(G, g->resid_row_k, &ok);
        kv->rv = alloc_commit(G, g->resid_row_v, &ok);
    } else {
        kv->k = alloc_commit((size_t)rows, g->krow, &ok);
    }
    kv->v = alloc_commit((size_t)rows, g->vrow, &ok);
    if (!ok) gt_kv_layer_free(kv);
    return ok;
}

void gt_kv_layer_free(gt_kv_layer *kv) {
    free(kv->k);
    free(kv->v);
    free(kv->rk);
    free(kv->rv);
    kv->k = kv->v = NULL;
    kv->rk = kv->rv = NULL;
}

void gt_kv_layer_copy(gt_kv_layer *dst, const gt_kv_layer *src, const gt_kv_geom *g) {
    const size_t rows = (size_t)src->rows;
    if (g->mode == GEIST_KV_KIVI2) {
        if (src->k) memcpy(dst->k, src->k, rows / G * g->kblock);
        memcpy(dst->rk, src->rk, G * g->resid_row_k);
        memcpy(dst->rv, src->rv, G * g->resid_row_v);
    } else if (src->k) {
        memcpy(dst->k, src->k, rows * g->krow);
    }
    if (src->v) memcpy(dst->v, src->v, rows * g->vrow);
}

size_t gt_attn_scratch_floats(const gt_config *c, int32_t max_ctx) {
    const size_t group = (size_t)(c->n_head / c->n_head_kv);
    return group * (size_t)max_ctx + (size_t)c->head_dim_k + (size_t)c->head_dim_v;
}

void gt_attn_scratch_view(gt_attn_scratch *a, const gt_config *c, int32_t max_ctx, float *buf) {
    a->scores = buf;
    a->row_k = buf + (size_t)(c->n_head / c->n_head_kv) * (size_t)max_ctx;
    a->row_v = a->row_k + c->head_dim_k;
}

bool gt_attn_scratch_init(gt_attn_scratch *a, const gt_config *c, int32_t max_ctx) {
    /* scores: one row per query head of a KV group (the grouped F16 path) */
    a->scores = malloc((size_t)(c->n_head / c->n_head_kv) * (size_t)max_ctx * sizeof(float));
    a->row_k = malloc((size_t)c->head_dim_k * sizeof(float));
    a->row_v = malloc((size_t)c->head_dim_v * sizeof(float));
    if (!a->scores || !a->row_k || !a->row_v) {
        gt_attn_scratch_free(a);
        return false;
    }
    return true;
}

void gt_attn_scratch_free(gt_attn_scratch *a) {
    free(a->scores);
    free(a->row_k);
    free(a->row_v);
    a->scores = a->row_k = a->row_v = NULL;
}

/* ---- vector helpers: 8 partial sums, reduced in one fixed order ----------------------------- */

static float reduce8(const float l[8]) {
    const float t0 = l[0] + l[4], t1 = l[1] + l[5], t2 = l[2] + l[6], t3 = l[3] + l[7];
    return (t0 + t2) + (t1 + t3);
}

static float dot_f32_port(const float *a, const float *b, int32_t n) {
    float l[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int32_t j = 0; j < 8; j++) l[j] += a[i + j] * b[i + j];
    float s = reduce8(l);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static float dot_f16_port(const float *a, const uint16_t *h, int32_t n) {
    float l[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int32_t j = 0; j < 8; j++) l[j] += a[i + j] * gt_f16_to_f32(h[i + j]);
    float s = reduce8(l);
    for (; i < n; i++) s += a[i] * gt_f16_to_f32(h[i]);
    return s;
}

static void axpy_f16_port(float *o, float w, const uint16_t *h, int32_t n) {
    for (int32_t i = 0; i < n; i++) o[i] += w * gt_f16_to_f32(h[i]);
}

#ifdef KV_HAVE_X86
static KV_TARGET float dot_f32_avx(const float *a, const float *b, int32_t n) {
    __m256 acc = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    float l[8];
    _mm256_storeu_ps(l, acc);
    float s = reduce8(l);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static KV_TARGET float dot_f16_avx(const float *a, const uint16_t *h, int32_t n) {
    __m256 acc = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 k = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i)));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), k));
    }
    float l[8];
    _mm256_storeu_ps(l, acc);
    float s = reduce8(l);
    for (; i < n; i++) s += a[i] * gt_f16_to_f32(h[i]);
    return s;
}

static KV_TARGET void axpy_f16_avx(float *o, float w, const uint16_t *h, int32_t n) {
    const __m256 vw = _mm256_set1_ps(w);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i)));
        _mm256_storeu_ps(o + i, _mm256_add_ps(_mm256_loadu_ps(o + i), _mm256_mul_ps(vw, v)));
    }
    for (; i < n; i++) o[i] += w * gt_f16_to_f32(h[i]);
}

#endif

/* The kernels a session's KV steps may use: its engine's backend's permission, as far as the CPU
 * has the features (the AVX2 kernels need F16C, softmax_f16path FMA too; AVX-512: F). */
typedef enum kv_simd { KV_PLAIN, KV_AVX2, KV_AVX512 } kv_simd;

static kv_simd kv_simd_of(const geist_session *s) {
#ifdef KV_HAVE_X86
    const gt_simd p = s->model->backend->simd;
    if (p < GT_SIMD_AVX2 || !gt_cpu_has(GT_CPU_AVX2 | GT_CPU_F16C | GT_CPU_FMA)) return KV_PLAIN;
    return p >= GT_SIMD_AVX512 && gt_cpu_has(GT_CPU_AVX512F) ? KV_AVX512 : KV_AVX2;
#else
    (void)s;
    return KV_PLAIN;
#endif
}

typedef struct vec_ops {
    float (*dot_f32)(const float *, const float *, int32_t);
    float (*dot_f16)(const float *, const uint16_t *, int32_t);
    void (*axpy_f16)(float *, float, const uint16_t *, int32_t);
} vec_ops;

static vec_ops pick_ops(kv_simd simd) {
#ifdef KV_HAVE_X86
    if (simd != KV_PLAIN) return (vec_ops){dot_f32_avx, dot_f16_avx, axpy_f16_avx};
#endif
    (void)simd;
    return (vec_ops){dot_f32_port, dot_f16_port, axpy_f16_port};
}

static void axpy_f32(float *o, float w, const float *x, int32_t n) {
    for (int32_t i = 0; i < n; i++) o[i] += w * x[i];
}

static float rd_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

static float rd_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return gt_f16_to_f32(h);
}

static void wr_f16(uint8_t *p, float f) {
    const uint16_t h = gt_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* ---- quantizers (one head of hd values) ----------------------------------------------------- */

/* r clamped to [lo, hi]; NaN (a model file with NaN or infinite weights) becomes `nan_to`, so the
 * float -> integer conversion below is always defined. */
static inline float clamp_code(float r, float lo, float hi, float nan_to) {
    if (r != r) return nan_to;
    return r > hi ? hi : r < lo ? lo : r;
}

static void quant_int8(uint8_t *dst, const float *x, int32_t hd) {
    float amax = 0.0f;
    for (int32_t i = 0; i < hd; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    memcpy(dst, &d, 4);
    int8_t *q = (int8_t *)(dst + 4);
    for (int32_t i = 0; i < hd; i++) {
        float r = roundf(x[i] * id);
        q[i] = (int8_t)clamp_code(r, -127.0f, 127.0f, 0.0f);
    }
}

static void quant_int4(uint8_t *dst, const float *x, int32_t hd) {
    for (int32_t g0 = 0; g0 < hd; g0 += QG, dst += Q4_GROUP_BYTES) {
        const int32_t n = hd - g0 < QG ? hd - g0 : QG;
        float m = 0.0f;
        for (int32_t i = 0; i < n; i++)
            if (fabsf(x[g0 + i]) > fabsf(m)) m = x[g0 + i];
        wr_f16(dst, m / -8.0f);
        const float d = rd_f16(dst); /* quantize with the step as stored */
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t *q = dst + 2;
        memset(q, 0x88, QG / 2); /* code 8 = 0 for the unused tail */
        for (int32_t i = 0; i < n; i++) {
            float r = roundf(x[g0 + i] * id) + 8.0f;
            const uint8_t c = (uint8_t)clamp_code(r, 0.0f, 15.0f, 8.0f);
            q[i / 2] = (uint8_t)(i % 2 ? (q[i / 2] & 0x0f) | (c << 4) : (q[i / 2] & 0xf0) | c);
        }
    }
}

/* Asymmetric 2-bit over n F16 values at stride `stride` (KIVI reads its F16 residual): writes
 * f16 min, f16 step and n codes (4 per byte, zeroed first) to dst. */
static void quant_q2(uint8_t *dst, const uint16_t *x, int32_t n, int64_t stride, uint8_t *codes) {
    float mn = INFINITY, mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        const float f = gt_f16_to_f32(x[i * stride]);
        mn = fminf(mn, f);
        mx = fmaxf(mx, f);
    }
    wr_f16(dst, mn);
    wr_f16(dst + 2, (mx - mn) / 3.0f);
    const float m = rd_f16(dst), d = rd_f16(dst + 2);
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    memset(codes, 0, (size_t)(n + 3) / 4);
    for (int32_t i = 0; i < n; i++) {
        float r = roundf((gt_f16_to_f32(x[i * stride]) - m) * id);
        const uint8_t c = (uint8_t)clamp_code(r, 0.0f, 3.0f, 0.0f);
        codes[i / 4] = (uint8_t)(codes[i / 4] | (c << (2 * (i % 4))));
    }
}

/* One KIVI V record (per token): groups of QG channels, from F16 values. */
static void quant_v2(uint8_t *dst, const uint16_t *x, int32_t nkv, int32_t hd) {
    for (int32_t h = 0; h < nkv; h++, x += hd) {
        for (int32_t g0 = 0; g0 < hd; g0 += QG, dst += Q2_GROUP_BYTES) {
            const int32_t n = hd - g0 < QG ? hd - g0 : QG;
            memset(dst + 4, 0, QG / 4);
            quant_q2(dst, x + g0, n, 1, dst + 4);
        }
    }
}

#ifdef KV_HAVE_X86
static KV_TARGET void f16_row_avx(uint8_t *dst, const float *x, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) /* round to nearest even, as gt_f32_to_f16 (NaN payloads aside) */
        _mm_storeu_si128((__m128i *)(void *)(dst + 2 * i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) wr_f16(dst + 2 * i, x[i]);
}
#endif

/* n floats -> n f16 at dst */
static void f16_row(uint8_t *dst, const float *x, int32_t n, kv_simd simd) {
#ifdef KV_HAVE_X86
    if (simd != KV_PLAIN) {
        f16_row_avx(dst, x, n);
        return;
    }
#endif
    (void)simd;
    for (int32_t i = 0; i < n; i++) wr_f16(dst + 2 * i, x[i]);
}

static void quant_row(uint8_t *dst, int32_t mode, const float *x, int32_t nkv, int32_t hd,
                      kv_simd simd) {
    const size_t hb = head_bytes(mode, hd);
    for (int32_t h = 0; h < nkv; h++, dst += hb, x += hd) {
        switch (mode) {
        case GEIST_KV_F32: memcpy(dst, x, (size_t)hd * 4); break;
        case GEIST_KV_F16: f16_row(dst, x, hd, simd); break;
        case GEIST_KV_INT8: quant_int8(dst, x, hd); break;
        default:
            if (use_hadamard(mode, hd)) {
                float rot[HADAMARD_MAX];
                memcpy(rot, x, (size_t)hd * sizeof(float));
                fwht(rot, hd);
                quant_int4(dst, rot, hd);
            } else {
                quant_int4(dst, x, hd);
            }
            break;
        }
    }
}

static inline int32_t slot_of(const gt_kv_layer *kv, int32_t q) { return kv->ring ? q % kv->rows : q; }

static inline int32_t block_slot(const gt_kv_layer *kv, int32_t b) {
    return kv->ring ? b % (kv->rows / G) : b;
}

/* KIVI: quantizes the complete residual block b (K per channel, V per token). */
static void kivi_close_block(const gt_kv_layer *kv, const gt_kv_geom *g, const gt_config *c,
                             int32_t b) {
    const int32_t hk = c->head_dim_k, hv = c->head_dim_v, nkv = c->n_head_kv;
    const int64_t kd = (int64_t)nkv * hk, vd = (int64_t)nkv * hv;
    const int32_t sb = block_slot(kv, b);
    uint8_t *blk = (uint8_t *)kv->k + (size_t)sb * g->kblock;
    for (int32_t h = 0; h < nkv; h++) {
        uint8_t *hb = blk + (size_t)h * (size_t)hk * KIVI_CHAN_BYTES;
        for (int32_t ch = 0; ch < hk; ch++) {
            uint8_t *cb = hb + (size_t)ch * KIVI_CHAN_BYTES;
            quant_q2(cb, kv->rk + (int64_t)h * hk + ch, G, kd, cb + 4);
        }
    }
    for (int32_t t = 0; t < G; t++)
        quant_v2((uint8_t *)kv->v + (size_t)(sb * G + t) * g->vrow, kv->rv + t * vd, nkv, hv);
}

void gt_kivi_unquantize(const gt_kv_layer *kv, const gt_kv_geom *g, const gt_config *c,
                        int32_t n) {
    const int32_t hk = c->head_dim_k, hv = c->head_dim_v, nkv = c->n_head_kv;
    const int64_t kd = (int64_t)nkv * hk, vd = (int64_t)nkv * hv;
    const int32_t b = n / G, sb = block_slot(kv, b);
    const uint8_t *blk = (const uint8_t *)kv->k + (size_t)sb * g->kblock;
    for (int32_t t = 0; t < n % G; t++) {
        for (int32_t h = 0; h < nkv; h++) {
            const uint8_t *hb = blk + (size_t)h * (size_t)hk * KIVI_CHAN_BYTES;
            for (int32_t ch = 0; ch < hk; ch++) {
                const uint8_t *cb = hb + (size_t)ch * KIVI_CHAN_BYTES;
                const int code = (cb[4 + t / 4] >> (2 * (t % 4))) & 3;
                kv->rk[t * kd + (int64_t)h * hk + ch] =
                    gt_f32_to_f16(rd_f16(cb) + (float)code * rd_f16(cb + 2));
            }
            const uint8_t *vr = (const uint8_t *)kv->v + (size_t)(sb * G + t) * g->vrow +
                                (size_t)h * head_bytes(GEIST_KV_KIVI2, hv);
            for (int32_t i = 0; i < hv; i++) {
                const uint8_t *gb = vr + (size_t)(i / QG) * Q2_GROUP_BYTES;
                const int32_t j = i % QG;
                const int code = (gb[4 + j / 4] >> (2 * (j % 4))) & 3;
                kv->rv[t * vd + (int64_t)h * hv + i] =
                    gt_f32_to_f16(rd_f16(gb) + (float)code * rd_f16(gb + 2));
            }
        }
    }
}

void gt_kv_write(geist_session *s, int32_t layer, int32_t pos, const float *k, const float *v) {
    const gt_config *c = &s->model->cfg;
    const gt_kv_layer *kv = &s->kv[layer];
    const gt_kv_geom *g = &s->geom;
    const int32_t q = pos - s->n_prefix;
    if (g->mode == GEIST_KV_KIVI2) {
        const int64_t kd = (int64_t)c->n_head_kv * c->head_dim_k;
        const int64_t vd = (int64_t)c->n_head_kv * c->head_dim_v;
        const int32_t r = q % G;
        for (int64_t i = 0; i < kd; i++) kv->rk[r * kd + i] = gt_f32_to_f16(k[i]);
        for (int64_t i = 0; i < vd; i++) kv->rv[r * vd + i] = gt_f32_to_f16(v[i]);
        if (r == G - 1 && kv->rows > 0) kivi_close_block(kv, g, c, q / G);
        return;
    }
    const size_t row = (size_t)slot_of(kv, q);
    const kv_simd simd = kv_simd_of(s);
    quant_row((uint8_t *)kv->k + row * g->krow, g->mode, k, c->n_head_kv, c->head_dim_k, simd);
    quant_row((uint8_t *)kv->v + row * g->vrow, g->mode, v, c->n_head_kv, c->head_dim_v, simd);
}

gt_kv_batching gt_kv_batching_for(const geist_session *s, int32_t layer, int32_t n) {
    if (n <= 1) return GT_KV_DIRECT; /* one row: write, then attend, is the order itself */
    if (s->geom.mode == GEIST_KV_KIVI2) return GT_KV_IN_ORDER;
    return s->kv[layer].ring ? GT_KV_STAGED : GT_KV_DIRECT;
}

size_t gt_kv_stage_row_bytes(const geist_session *s) {
    return s->geom.mode == GEIST_KV_KIVI2 ? 0 : s->geom.krow + s->geom.vrow;
}

void gt_kv_stage_commit(geist_session *s, int32_t layer, const gt_kv_stage *st, int32_t i) {
    const gt_kv_layer *kv = &s->kv[layer];
    const gt_kv_geom *g = &s->geom;
    const size_t row = (size_t)slot_of(kv, st->pos0 + i - s->n_prefix);
    memcpy((uint8_t *)kv->k + row * g->krow, st->k + (size_t)i * g->krow, g->krow);
    memcpy((uint8_t *)kv->v + row * g->vrow, st->v + (size_t)i * g->vrow, g->vrow);
}

void gt_kv_stage_write(const geist_session *s, const gt_kv_stage *st, int32_t i, const float *k,
                       const float *v) {
    const gt_config *c = &s->model->cfg;
    const gt_kv_geom *g = &s->geom;
    const kv_simd simd = kv_simd_of(s);
    quant_row(st->k + (size_t)i * g->krow, g->mode, k, c->n_head_kv, c->head_dim_k, simd);
    quant_row(st->v + (size_t)i * g->vrow, g->mode, v, c->n_head_kv, c->head_dim_v, simd);
}

/* One storage (the session's own, the shared prefix's, or a stage) seen by a query. */
typedef struct kv_seg {
    const gt_kv_layer *kv;
    const gt_kv_geom *g;
    int32_t written; /* storage positions written so far */
    bool joins_prev; /* continues the previous segment's storage (a stage after its ring) */
} kv_seg;

/* scores[j] = q . K[a + j] for storage positions a..b of KV head h. */
static void seg_scores(const kv_seg *sg, const gt_config *c, const vec_ops *ops, int32_t h,
                       const float *qh, int32_t a, int32_t b, float *scores, float *tmp) {
    const gt_kv_layer *kv = sg->kv;
    const gt_kv_geom *g = sg->g;
    const int32_t hk = c->head_dim_k;
    if (g->mode != GEIST_KV_KIVI2) {
        const size_t hb = head_bytes(g->mode, hk);
        for (int32_t p = a; p <= b; p++) {
            const uint8_t *r = (const uint8_t *)kv->k + (size_t)slot_of(kv, p) * g->krow +
                               (size_t)h * hb;
            float dot = 0.0f;
            switch (g->mode) {
            case GEIST_KV_F32: dot = ops->dot_f32(qh, (const float *)(const void *)r, hk); break;
            case GEIST_KV_F16: dot = ops->dot_f16(qh, (const uint16_t *)(const void *)r, hk); break;
            case GEIST_KV_INT8: {
                const int8_t *cd = (const int8_t *)(r + 4);
                float acc = 0.0f;
                for (int32_t i = 0; i < hk; i++) acc += qh[i] * (float)cd[i];
                dot = acc * rd_f32(r);
                break;
            }
            default: { /* INT4 */
                for (int32_t g0 = 0; g0 < hk; g0 += QG, r += Q4_GROUP_BYTES) {
                    const int32_t n = hk - g0 < QG ? hk - g0 : QG;
                    float acc = 0.0f;
                    for (int32_t i = 0; i < n; i++) {
                        const int code = (r[2 + i / 2] >> (4 * (i % 2))) & 15;
                        acc += qh[g0 + i] * (float)(code - 8);
                    }
                    dot += acc * rd_f16(r);
                }
            }
            }
            scores[p - a] = dot;
        }
        return;
    }
    /* KIVI: quantized blocks below the boundary, the F16 residual above it */
    const int32_t bound = gt_kivi_boundary(sg->written);
    const int64_t kd = (int64_t)c->n_head_kv * hk;
    for (int32_t p = a; p <= b;) {
        if (p >= bound) {
            scores[p - a] = ops->dot_f16(qh, kv->rk + (p % G) * kd + (int64_t)h * hk, hk);
            p++;
            continue;
        }
        const int32_t blk = p / G;
        const int32_t t0 = p - blk * G;
        const int32_t last = b < bound - 1 ? b : bound - 1;
        const int32_t t1 = last < blk * G + G - 1 ? last - blk * G : G - 1;
        const uint8_t *hb = (const uint8_t *)kv->k + (size_t)block_slot(kv, blk) * g->kblock +
                            (size_t)h * (size_t)hk * KIVI_CHAN_BYTES;
        float acc[G] = {0};
        float base = 0.0f;
        for (int32_t ch = 0; ch < hk; ch++) {
            const uint8_t *cb = hb + (size_t)ch * KIVI_CHAN_BYTES;
            base += qh[ch] * rd_f16(cb);
            tmp[ch] = qh[ch] * rd_f16(cb + 2);
        }
        for (int32_t ch = 0; ch < hk; ch++) {
            const uint8_t *codes = hb + (size_t)ch * KIVI_CHAN_BYTES + 4;
            const float w = tmp[ch];
            for (int32_t t = t0; t <= t1; t++) acc[t] += w * (float)((codes[t >> 2] >> (2 * (t & 3))) & 3);
        }
        for (int32_t t = t0; t <= t1; t++) scores[blk * G + t - a] = base + acc[t];
        p = blk * G + t1 + 1;
    }
}

/* oh += sum_j w[j] V[a + j] for storage positions a..b of KV head h. */
static void seg_values(const kv_seg *sg, const gt_config *c, const vec_ops *ops, int32_t h,
                       const float *w, int32_t a, int32_t b, float *oh) {
    const gt_kv_layer *kv = sg->kv;
    const gt_kv_geom *g = sg->g;
    const int32_t hv = c->head_dim_v;
    const size_t hb = head_bytes(g->mode, hv);
    const int32_t bound = g->mode == GEIST_KV_KIVI2 ? gt_kivi_boundary(sg->written) : 0;
    const int64_t vd = (int64_t)c->n_head_kv * hv;
    for (int32_t p = a; p <= b; p++) {
        const float wt = w[p - a];
        if (g->mode == GEIST_KV_KIVI2 && p >= bound) {
            ops->axpy_f16(oh, wt, kv->rv + (p % G) * vd + (int64_t)h * hv, hv);
            continue;
        }
        int32_t row;
        if (g->mode == GEIST_KV_KIVI2) row = block_slot(kv, p / G) * G + p % G;
        else row = slot_of(kv, p);
        const uint8_t *r = (const uint8_t *)kv->v + (size_t)row * g->vrow + (size_t)h * hb;
        switch (g->mode) {
        case GEIST_KV_F32: axpy_f32(oh, wt, (const float *)(const void *)r, hv); break;
        case GEIST_KV_F16: ops->axpy_f16(oh, wt, (const uint16_t *)(const void *)r, hv); break;
        case GEIST_KV_INT8: {
            const int8_t *cd = (const int8_t *)(r + 4);
            const float ws = wt * rd_f32(r);
            for (int32_t i = 0; i < hv; i++) oh[i] += ws * (float)cd[i];
            break;
        }
        case GEIST_KV_INT4:
            for (int32_t g0 = 0; g0 < hv; g0 += QG, r += Q4_GROUP_BYTES) {
                const int32_t n = hv - g0 < QG ? hv - g0 : QG;
                const float ws = wt * rd_f16(r);
                for (int32_t i = 0; i < n; i++)
                    oh[g0 + i] += ws * (float)(((r[2 + i / 2] >> (4 * (i % 2))) & 15) - 8);
            }
            break;
        default: /* KIVI V record */
            for (int32_t g0 = 0; g0 < hv; g0 += QG, r += Q2_GROUP_BYTES) {
                const int32_t n = hv - g0 < QG ? hv - g0 : QG;
                const float wm = wt * rd_f16(r), ws = wt * rd_f16(r + 2);
                for (int32_t i = 0; i < n; i++)
                    oh[g0 + i] += wm + ws * (float)((r[4 + i / 4] >> (2 * (i % 4))) & 3);
            }
        }
    }
}

/* scores = softmax(scores * scale), in place */
/* Soft-capping of attention scores (Gemma 2): the scale applied here, then cap * tanh(s / cap);
 * the softmax that follows then scales by 1. Plain C on every path, so every backend and
 * batching gives the same bits; tanh in double rounded to float (as rope_angles' cos and sin:
 * the C libraries' tanhf differ between x86-64 and arm64, their double results rounded to float
 * do not). Returns the scale the softmax must still apply. */
static float softcap_scores(float *scores, int32_t n, const gt_config *c) {
    if (!(c->attn_softcap > 0.0f)) return c->attn_scale;
    const float cap = c->attn_softcap, inv = 1.0f / cap, scale = c->attn_scale;
    for (int32_t t = 0; t < n; t++) scores[t] = cap * (float)tanh((double)(scores[t] * scale * inv));
    return 1.0f;
}

static void softmax_row(float *scores, int32_t n, float scale) {
    float maxv = -INFINITY;
    for (int32_t t = 0; t < n; t++) {
        scores[t] *= scale;
        if (scores[t] > maxv) maxv = scores[t];
    }
    double sum = 0.0;
    for (int32_t t = 0; t < n; t++) {
        scores[t] = expf(scores[t] - maxv);
        sum += scores[t];
    }
    const float inv = (float)(1.0 / sum);
    for (int32_t t = 0; t < n; t++) scores[t] *= inv;
}

/* softmax_f16path's arithmetic in plain C, for F16 caches on the plain path, with the same bits:
 * the scaled maximum in 8 lanes (as vmaxps: the second operand on NaN), e^x by gt_vexp1, the sum
 * in 8 lanes (position u in lane u % 8) reduced in softmax_f16path's order */
static void softmax_f16_plain(float *scores, int32_t n, float scale) {
    float mx[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int32_t t = 0;
    for (; t + 8 <= n; t += 8)
        for (int k = 0; k < 8; k++) {
            const float v = scores[t + k] * scale;
            scores[t + k] = v;
            mx[k] = mx[k] > v ? mx[k] : v;
        }
    float m = -INFINITY;
    for (int k = 0; k < 8; k++) m = mx[k] > m ? mx[k] : m;
    for (int32_t u = t; u < n; u++) {
        scores[u] *= scale;
        m = scores[u] > m ? scores[u] : m;
    }
    float l[8] = {0};
    for (int32_t u = 0; u < n; u++) {
        const float e = gt_vexp1(scores[u] - m);
        scores[u] = e;
        l[u % 8] += e;
    }
    const float invs = 1.0f / (((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])));
    for (int32_t u = 0; u < n; u++) scores[u] *= invs;
}

#ifdef KV_HAVE_X86
#define KV_FMA __attribute__((target("avx2,f16c,fma")))
/* softmax_row for the F16 paths below, 8 positions at a time with util/vexp_x86.h's e^x (expf per
 * position was ~4 % of a batched step of 8 sessions) */
static KV_FMA void softmax_f16path(float *scores, int32_t n, float scale) {
    const __m256 sv = _mm256_set1_ps(scale);
    __m256 mx = _mm256_set1_ps(-INFINITY);
    int32_t t = 0;
    for (; t + 8 <= n; t += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(scores + t), sv);
        _mm256_storeu_ps(scores + t, v);
        mx = _mm256_max_ps(mx, v);
    }
    float l[8], m = -INFINITY;
    _mm256_storeu_ps(l, mx);
    for (int k = 0; k < 8; k++) m = l[k] > m ? l[k] : m;
    for (int32_t u = t; u < n; u++) {
        scores[u] *= scale;
        m = scores[u] > m ? scores[u] : m;
    }
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    for (int32_t u = 0; u < t; u += 8) {
        const __m256 e = gt_vexp8(_mm256_sub_ps(_mm256_loadu_ps(scores + u), mv));
        _mm256_storeu_ps(scores + u, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (t < n) { /* the tail through the same e^x; the lanes past it masked out of the sum */
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - t),
                                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256 e = _mm256_and_ps(gt_vexp8(_mm256_sub_ps(_mm256_maskload_ps(scores + t, mask), mv)),
                                       _mm256_castsi256_ps(mask));
        _mm256_maskstore_ps(scores + t, mask, e);
        sum = _mm256_add_ps(sum, e);
    }
    _mm256_storeu_ps(l, sum);
    const float invs = 1.0f / (((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])));
    const __m256 inv = _mm256_set1_ps(invs);
    for (int32_t u = 0; u < t; u += 8) _mm256_storeu_ps(scores + u, _mm256_mul_ps(_mm256_loadu_ps(scores + u), inv));
    for (int32_t u = t; u < n; u++) scores[u] *= invs;
}
#endif

#ifdef KV_HAVE_X86
/* F16 caches with AVX2: the query heads of one KV head together, so each K and V row is read once
 * for all of them and no call goes through a pointer per position. Per (head, position) the
 * products are the generic path's exactly (dot_f16_avx's, axpy_f16_avx's); the softmax is
 * softmax_f16path. A session's attention always takes the same path, alone or batched. */
/* q_e . h for up to 4 query heads e < ne (q_e at q + e * qs): dot_f16_avx's arithmetic for each,
 * the K row converted once and the heads' chains interleaved */
static KV_TARGET inline void dots_f16(const float *q, int64_t qs, int32_t ne, const uint16_t *h,
                                      int32_t n, float *res) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 k = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i)));
#pragma GCC unroll 4
        for (int32_t e = 0; e < 4; e++)
            if (e < ne) acc[e] = _mm256_add_ps(acc[e], _mm256_mul_ps(_mm256_loadu_ps(q + e * qs + i), k));
    }
    for (int32_t e = 0; e < ne; e++) {
        float l[8];
        _mm256_storeu_ps(l, acc[e]);
        float sum = reduce8(l);
        for (int32_t t = i; t < n; t++) sum += q[e * qs + t] * gt_f16_to_f32(h[t]);
        res[e] = sum;
    }
}

/* o_e += w[e] * h for up to 4 heads (o_e at o + e * os): axpy_f16_avx's arithmetic for each */
static KV_TARGET inline void axpys_f16(float *o, int64_t os, int32_t ne, const float *w,
                                       const uint16_t *h, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i)));
#pragma GCC unroll 4
        for (int32_t e = 0; e < 4; e++)
            if (e < ne) {
                float *oe = o + e * os + i;
                _mm256_storeu_ps(oe, _mm256_add_ps(_mm256_loadu_ps(oe), _mm256_mul_ps(_mm256_set1_ps(w[e]), v)));
            }
    }
    for (int32_t e = 0; e < ne; e++)
        for (int32_t t = i; t < n; t++) o[e * os + t] += w[e] * gt_f16_to_f32(h[t]);
}

/* F16 row of position p in a layer's K or V storage (base = kv->k or kv->v), at element off */
static inline const uint16_t *f16_at(const void *base, const gt_kv_layer *kv, size_t row_bytes,
                                     int32_t p, int64_t off) {
    return (const uint16_t *)(const void *)((const uint8_t *)base + (size_t)slot_of(kv, p) * row_bytes) + off;
}

/* The query heads of [h0, h1) that KV head g serves: the first, relative to g's group (*ea), and
 * how many (returned). */
static inline int32_t heads_of(int32_t h0, int32_t h1, int32_t g, int32_t gsize, int32_t *ea) {
    *ea = h0 > g * gsize ? h0 - g * gsize : 0;
    return (h1 < (g + 1) * gsize ? h1 - g * gsize : gsize) - *ea;
}

/* The positions of the attention's segments in order, for the F16 paths: segment i, position p
 * in its storage; j counts the positions from 0 (the column of the scores). */
typedef struct pos_walk {
    const kv_seg *segs;
    const int32_t *lo, *hi;
    int32_t n_seg, i, p, j;
} pos_walk;

static inline void walk_settle(pos_walk *w) { /* past a segment's end: the next non-empty one */
    while (w->i < w->n_seg && w->p > w->hi[w->i])
        if (++w->i < w->n_seg) w->p = w->lo[w->i];
}

static inline pos_walk walk_start(const kv_seg *segs, const int32_t *lo, const int32_t *hi,
                                  int32_t n_seg) {
    pos_walk w = {segs, lo, hi, n_seg, 0, n_seg > 0 ? lo[0] : 0, 0};
    walk_settle(&w);
    return w;
}

static inline bool walk_more(const pos_walk *w) { return w->i < w->n_seg; }

static inline void walk_next(pos_walk *w) {
    w->p++;
    w->j++;
    walk_settle(w);
}

/* The F16 K row (v false) or V row of the walk's position, from element off. Also fetches the
 * same part of the row KV_AHEAD positions on (n elements): a head's 128 bytes at a stride of the
 * whole row are more than the hardware prefetchers follow. */
#define KV_AHEAD 6
static inline __attribute__((always_inline)) const uint16_t *walk_row(const pos_walk *w, bool v,
                                                                       int64_t off, int32_t n) {
    const kv_seg *s = &w->segs[w->i];
    const void *base = v ? s->kv->v : s->kv->k;
    const size_t rb = v ? s->g->vrow : s->g->krow;
    if (w->p + KV_AHEAD <= w->hi[w->i]) {
        const char *r = (const char *)f16_at(base, s->kv, rb, w->p + KV_AHEAD, off);
        for (int32_t b = 0; b < 2 * n; b += 64) _mm_prefetch(r + b, _MM_HINT_T0);
    }
    return f16_at(base, s->kv, rb, w->p, off);
}

/* One KV head's part of the F16 attention: the `group` query heads of the task that KV head g
 * serves (the first one's q at qg, its output at og) and their scores (group rows of n_ctx). */
typedef struct f16_head {
    const kv_seg *segs;
    const int32_t *lo, *hi;
    int32_t n_seg, g, group, hk, hv, n_ctx;
    const float *qg; /* the first query head's q */
    float *og;       /* its output */
    float *scores;
} f16_head;

static inline pos_walk head_walk(const f16_head *h) {
    return walk_start(h->segs, h->lo, h->hi, h->n_seg);
}

static KV_TARGET void scores_avx2(const f16_head *h) {
    for (pos_walk w = head_walk(h); walk_more(&w); walk_next(&w)) {
        const uint16_t *kr = walk_row(&w, false, (int64_t)h->g * h->hk, h->hk);
        for (int32_t e0 = 0; e0 < h->group; e0 += 4) {
            const int32_t ne = h->group - e0 < 4 ? h->group - e0 : 4;
            float res[4];
            dots_f16(h->qg + (int64_t)e0 * h->hk, h->hk, ne, kr, h->hk, res);
            for (int32_t e = 0; e < ne; e++) h->scores[(int64_t)(e0 + e) * h->n_ctx + w.j] = res[e];
        }
    }
}

static KV_TARGET void values_avx2(const f16_head *h) {
    memset(h->og, 0, (size_t)h->group * (size_t)h->hv * sizeof(float));
    for (pos_walk w = head_walk(h); walk_more(&w); walk_next(&w)) {
        const uint16_t *vr = walk_row(&w, true, (int64_t)h->g * h->hv, h->hv);
        for (int32_t e0 = 0; e0 < h->group; e0 += 4) {
            const int32_t ne = h->group - e0 < 4 ? h->group - e0 : 4;
            float wt[4];
            for (int32_t e = 0; e < ne; e++) wt[e] = h->scores[(int64_t)(e0 + e) * h->n_ctx + w.j];
            axpys_f16(h->og + (int64_t)e0 * h->hv, h->hv, ne, wt, vr, h->hv);
        }
    }
}

/* F16 caches with AVX-512 (head dims multiples of 16): scores by one fused-multiply-add chain per
 * (position, head) and one lane reduction; the weighted sum of V rows kept in registers across all
 * positions (up to 4 query heads x 64 dims at a time), not read and written back per position.
 * Its own arithmetic, not the AVX2 path's: every session's attention runs through the same kernels
 * alone or batched, so greedy ids and logits stay equal either way. */
#define KV512 __attribute__((target("avx2,f16c,fma,avx512f")))

static KV512 void scores_512(const f16_head *h) {
    for (pos_walk w = head_walk(h); walk_more(&w); walk_next(&w)) {
        const uint16_t *kr = walk_row(&w, false, (int64_t)h->g * h->hk, h->hk);
        for (int32_t e = 0; e < h->group; e++) {
            const float *qe = h->qg + (int64_t)e * h->hk;
            __m512 acc = _mm512_setzero_ps();
            for (int32_t d = 0; d < h->hk; d += 16)
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(qe + d),
                                      _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(kr + d))), acc);
            h->scores[(int64_t)e * h->n_ctx + w.j] = _mm512_reduce_add_ps(acc);
        }
    }
}

static KV512 void values_512(const f16_head *h) {
    const int32_t hv = h->hv;
    for (int32_t e0 = 0; e0 < h->group; e0 += 4) {
        const int32_t ne = h->group - e0 < 4 ? h->group - e0 : 4;
        for (int32_t d0 = 0; d0 < hv; d0 += 64) {
            const int32_t nz = (hv - d0) / 16 < 4 ? (hv - d0) / 16 : 4;
            __m512 acc[4][4];
            for (int32_t e = 0; e < 4; e++)
                for (int32_t z = 0; z < 4; z++) acc[e][z] = _mm512_setzero_ps();
            for (pos_walk w = head_walk(h); walk_more(&w); walk_next(&w)) {
                const uint16_t *vr = walk_row(&w, true, (int64_t)h->g * hv + d0, 16 * nz);
                __m512 v[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                               _mm512_setzero_ps()};
#pragma GCC unroll 4
                for (int32_t z = 0; z < 4; z++)
                    if (z < nz) v[z] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(vr + 16 * z)));
#pragma GCC unroll 4
                for (int32_t e = 0; e < 4; e++) {
                    if (e >= ne) break;
                    const __m512 wt = _mm512_set1_ps(h->scores[(int64_t)(e0 + e) * h->n_ctx + w.j]);
#pragma GCC unroll 4
                    for (int32_t z = 0; z < 4; z++)
                        if (z < nz) acc[e][z] = _mm512_fmadd_ps(wt, v[z], acc[e][z]);
                }
            }
            for (int32_t e = 0; e < ne; e++)
                for (int32_t z = 0; z < nz; z++)
                    _mm512_storeu_ps(h->og + (int64_t)(e0 + e) * hv + d0 + 16 * z, acc[e][z]);
        }
    }
}

/* Query heads [h0, h1) over F16 caches, per KV head: the scores of its query heads, their
 * softmax, the weighted V sums; with the AVX-512 kernels when wide. */
static void attend_f16(const kv_seg *segs, const int32_t *lo, const int32_t *hi, int32_t n_seg,
                       const gt_config *c, const float *q, int32_t n_ctx, float *out,
                       float *scores, int32_t h0, int32_t h1, bool wide) {
    const int32_t hk = c->head_dim_k, hv = c->head_dim_v, gsize = c->n_head / c->n_head_kv;
    for (int32_t g = h0 / gsize; g * gsize < h1; g++) {
        int32_t ea;
        const int32_t group = heads_of(h0, h1, g, gsize, &ea);
        const f16_head h = {segs, lo, hi, n_seg, g, group, hk, hv, n_ctx,
                            q + (int64_t)(g * gsize + ea) * hk, out + (int64_t)(g * gsize + ea) * hv,
                            scores};
        if (wide) scores_512(&h);
        else scores_avx2(&h);
        for (int32_t e = 0; e < group; e++) {
            float *se = scores + (int64_t)e * n_ctx;
            softmax_f16path(se, n_ctx, softcap_scores(se, n_ctx, c));
        }
        if (wide) values_512(&h);
        else values_avx2(&h);
    }
}
#endif

/* Attention of one token at position pos over the layer's cache (its own K/V already stored). */
void gt_kv_attend(const geist_session *s, int32_t layer, const float *q, int32_t pos, float *out,
                  gt_attn_scratch *sc, const gt_kv_stage *stage, int32_t h0, int32_t h1) {
    const gt_config *c = &s->model->cfg;
    const int32_t hk = c->head_dim_k, hv = c->head_dim_v;
    const bool sliding = s->model->layers[layer].sliding;
    const int32_t first = sliding && pos - c->sliding_window + 1 > 0 ? pos - c->sliding_window + 1 : 0;
    const int32_t n_ctx = pos - first + 1;
    const int32_t group = c->n_head / c->n_head_kv;
    const kv_simd simd = kv_simd_of(s);
    const vec_ops ops = pick_ops(simd);
    /* segments: [first, np) from the shared prefix, [max(first, np), pos] from our own rows */
    const int32_t np = s->n_prefix;
    kv_seg segs[3];
    int32_t lo[3], hi[3], n_seg = 0;
    if (s->prefix && first < np) {
        const geist_session *ps = s->prefix->s;
        segs[n_seg] = (kv_seg){&ps->kv[layer], &ps->geom, np, false};
        lo[n_seg] = first;
        hi[n_seg] = pos < np - 1 ? pos : np - 1;
        n_seg++;
    }
    /* own rows up to `last` from the cache; the staged ones after it */
    const int32_t last = stage ? stage->pos0 - 1 : pos;
    const int32_t own_lo = first > np ? first : np;
    if (last >= own_lo) {
        segs[n_seg] = (kv_seg){&s->kv[layer], &s->geom, last - np + 1, false};
        lo[n_seg] = own_lo - np;
        hi[n_seg] = last - np;
        n_seg++;
    }
    gt_kv_layer staged;
    if (stage) {
        staged = (gt_kv_layer){stage->k, stage->v, NULL, NULL, stage->n, false};
        const int32_t from = first > stage->pos0 ? first : stage->pos0;
        segs[n_seg] = (kv_seg){&staged, &s->geom, pos - stage->pos0 + 1, n_seg > 0 && last >= own_lo};
        lo[n_seg] = from - stage->pos0;
        hi[n_seg] = pos - stage->pos0;
        n_seg++;
    }
    bool all_f16 = true; /* F16 caches: softmax_f16path's arithmetic, on every path */
    for (int32_t i = 0; i < n_seg; i++) all_f16 = all_f16 && segs[i].g->mode == GEIST_KV_F16;
#ifdef KV_HAVE_X86
    if (all_f16 && simd != KV_PLAIN) {
        attend_f16(segs, lo, hi, n_seg, c, q, n_ctx, out, sc->scores, h0, h1,
                   simd == KV_AVX512 && hk % 16 == 0 && hv % 16 == 0);
        return;
    }
#endif
    for (int32_t h = h0; h < h1; h++) {
        const int32_t g = h / group;
        const float *qh = q + (int64_t)h * hk;
        int32_t j = 0;
        for (int32_t i = 0; i < n_seg; i++) {
            const float *qs = qh;
            float qrot[HADAMARD_MAX];
            if (use_hadamard(segs[i].g->mode, hk)) {
                memcpy(qrot, qh, (size_t)hk * sizeof(float));
                fwht(qrot, hk);
                qs = qrot;
            }
            seg_scores(&segs[i], c, &ops, g, qs, lo[i], hi[i], sc->scores + j, sc->row_k);
            j += hi[i] - lo[i] + 1;
        }
        const float scale = softcap_scores(sc->scores, n_ctx, c);
        if (all_f16) softmax_f16_plain(sc->scores, n_ctx, scale);
        else softmax_row(sc->scores, n_ctx, scale);
        float *oh = out + (int64_t)h * hv;
        memset(oh, 0, (size_t)hv * sizeof(float));
        j = 0;
        for (int32_t i = 0; i < n_seg; i++) {
            if (use_hadamard(segs[i].g->mode, hv)) {
                /* one rotation per storage: a stage continues its cache's sum */
                if (!segs[i].joins_prev) memset(sc->row_v, 0, (size_t)hv * sizeof(float));
                seg_values(&segs[i], c, &ops, g, sc->scores + j, lo[i], hi[i], sc->row_v);
                if (i + 1 == n_seg || !segs[i + 1].joins_prev) {
                    fwht(sc->row_v, hv);
                    for (int32_t t = 0; t < hv; t++) oh[t] += sc->row_v[t];
                }
            } else {
                seg_values(&segs[i], c, &ops, g, sc->scores + j, lo[i], hi[i], oh);
            }
            j += hi[i] - lo[i] + 1;
        }
    }
}
