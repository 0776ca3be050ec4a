/* KV cache rows: storing and attending in the session's KV mode. */
#include "kv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

bool gt_attn_scratch_init(gt_attn_scratch *a, const gt_config *c, int32_t max_ctx) {
    a->scores = malloc((size_t)max_ctx * sizeof(float));
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

static void kv_store(void *dst, int32_t mode, const float *src, int64_t n) {
    if (mode == GEIST_KV_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = gt_f32_to_f16(src[i]);
    }
}

static const float *kv_load(const void *src, int32_t mode, int64_t n, float *buf) {
    if (mode == GEIST_KV_F32) return src;
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) buf[i] = gt_f16_to_f32(h[i]);
    return buf;
}

/* Attention of one token at position pos over the layer's cache (its own K/V already stored). */
void gt_kv_attend(const geist_session *s, int32_t layer, const float *q, int32_t pos, float *out,
                  gt_attn_scratch *sc) {
    const gt_kv_layer *kv = &s->kv[layer];
    const gt_config *c = &s->model->cfg;
    const int32_t hk = c->head_dim_k, hv = c->head_dim_v;
    const int64_t kdim = (int64_t)c->n_head_kv * hk, vdim = (int64_t)c->n_head_kv * hv;
    const size_t es = gt_kv_elem_size(s->kv_mode);
    const int32_t first = kv->ring ? (pos - kv->rows + 1 > 0 ? pos - kv->rows + 1 : 0) : 0;
    const int32_t n_ctx = pos - first + 1;
    const int32_t group = c->n_head / c->n_head_kv;
    for (int32_t h = 0; h < c->n_head; h++) {
        const int32_t g = h / group;
        const float *qh = q + (int64_t)h * hk;
        float maxv = -INFINITY;
        for (int32_t j = 0; j < n_ctx; j++) {
            const int32_t p = first + j;
            const int32_t row = kv->ring ? p % kv->rows : p;
            const uint8_t *kr = (const uint8_t *)kv->k + ((size_t)row * (size_t)kdim + (size_t)g * (size_t)hk) * es;
            const float *kf = kv_load(kr, s->kv_mode, hk, sc->row_k);
            float dot = 0.0f;
            for (int32_t i = 0; i < hk; i++) dot += qh[i] * kf[i];
            dot *= c->attn_scale;
            sc->scores[j] = dot;
            if (dot > maxv) maxv = dot;
        }
        double sum = 0.0;
        for (int32_t j = 0; j < n_ctx; j++) {
            sc->scores[j] = expf(sc->scores[j] - maxv);
            sum += sc->scores[j];
        }
        const float inv = (float)(1.0 / sum);
        float *oh = out + (int64_t)h * hv;
        memset(oh, 0, (size_t)hv * sizeof(float));
        for (int32_t j = 0; j < n_ctx; j++) {
            const int32_t p = first + j;
            const int32_t row = kv->ring ? p % kv->rows : p;
            const uint8_t *vr = (const uint8_t *)kv->v + ((size_t)row * (size_t)vdim + (size_t)g * (size_t)hv) * es;
            const float *vf = kv_load(vr, s->kv_mode, hv, sc->row_v);
            const float w = sc->scores[j] * inv;
            for (int32_t i = 0; i < hv; i++) oh[i] += w * vf[i];
        }
    }
}


void gt_kv_write(geist_session *s, int32_t layer, int32_t pos, const float *k, const float *v) {
    const gt_config *c = &s->model->cfg;
    const gt_kv_layer *kv = &s->kv[layer];
    const size_t kd = (size_t)c->n_head_kv * (size_t)c->head_dim_k;
    const size_t vd = (size_t)c->n_head_kv * (size_t)c->head_dim_v;
    const size_t es = gt_kv_elem_size(s->kv_mode);
    const size_t row = (size_t)(kv->ring ? pos % kv->rows : pos);
    kv_store((uint8_t *)kv->k + row * kd * es, s->kv_mode, k, (int64_t)kd);
    kv_store((uint8_t *)kv->v + row * vd * es, s->kv_mode, v, (int64_t)vd);
}
