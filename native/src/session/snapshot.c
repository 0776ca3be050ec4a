/* Session snapshots (save / restore), fork and truncate.
 *
 * Image layout (version 1, host byte order = little-endian on every supported target):
 *   header   "GEISTSES", u32 version, u32 header bytes, u64 image bytes, u64 model identity,
 *            u64 prefix identity (0: none), i32 kv_mode, n_past, n_prefix, n_layer, n_vocab,
 *            n_head_kv, head_dim_k, head_dim_v, has_logits, reserved, u64 seed
 *   layers   per layer i32 lo, count, n_resid (which rows follow; see layer_range)
 *   ids      (n_past - n_prefix) i32: the session's own tokens
 *   KV       per layer: row modes: count K records then count V records (positions lo..);
 *            KIVI: count K blocks, their count * G V records, then n_resid F16 K rows and
 *            n_resid F16 V rows of the residual
 *   logits   n_vocab f32 when has_logits
 *   checksum u64 gt_hash64 over everything before it
 * Only the rows a continuation can still read are stored: all own positions on global layers,
 * the last `window` on sliding-window layers. */
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "prefix.h"
#include "../util/hash.h"

#define SNAP_MAGIC "GEISTSES"
#define SNAP_VERSION 1u
#define G GT_KIVI_GROUP

typedef struct snap_header {
    char magic[8];
    uint32_t version, header_bytes;
    uint64_t image_bytes, model_id, prefix_id;
    int32_t kv_mode, n_past, n_prefix, n_layer, n_vocab, n_head_kv, head_dim_k, head_dim_v;
    int32_t has_logits, reserved;
    uint64_t seed;
} snap_header;

typedef struct lrange {
    int32_t lo, count, n_resid;
} lrange;

/* Which rows of a layer a continuation may still read, for a session at n_past. */
static lrange layer_range(const gt_config *c, bool sliding, int32_t mode, int32_t n_past,
                          int32_t n_prefix) {
    const int32_t n_own = n_past - n_prefix;
    int32_t q_lo = 0;
    if (sliding) {
        q_lo = n_past - c->sliding_window + 1 - n_prefix;
        if (q_lo < 0) q_lo = 0;
        if (q_lo > n_own) q_lo = n_own;
    }
    if (mode != GEIST_KV_KIVI2) return (lrange){q_lo, n_own - q_lo, 0};
    const int32_t bound = gt_kivi_boundary(n_own), nq = bound / G;
    int32_t b_lo = q_lo / G;
    if (b_lo > nq) b_lo = nq;
    return (lrange){b_lo, nq - b_lo, n_own - bound};
}

static uint64_t range_bytes(const gt_kv_geom *g, lrange r) {
    if (g->mode != GEIST_KV_KIVI2) return (uint64_t)r.count * (g->krow + g->vrow);
    return (uint64_t)r.count * (g->kblock + (uint64_t)G * g->vrow) +
           (uint64_t)r.n_resid * (g->resid_row_k + g->resid_row_v);
}

static uint64_t image_bytes(const geist_session *s) {
    const gt_config *c = &s->model->cfg;
    uint64_t n = sizeof(snap_header) + (uint64_t)c->n_layer * 3 * sizeof(int32_t) +
                 (uint64_t)(s->n_past - s->n_prefix) * sizeof(int32_t);
    for (int32_t il = 0; il < c->n_layer; il++)
        n += range_bytes(&s->geom, layer_range(c, s->model->layers[il].sliding, s->kv_mode,
                                               s->n_past, s->n_prefix));
    if (s->has_logits) n += (uint64_t)c->n_vocab * sizeof(float);
    return n + sizeof(uint64_t);
}

static inline int32_t row_slot(const gt_kv_layer *kv, int32_t q) { return kv->ring ? q % kv->rows : q; }
static inline int32_t blk_slot(const gt_kv_layer *kv, int32_t b) {
    return kv->ring ? b % (kv->rows / G) : b;
}

/* Copies a layer's live rows to (out = true) or from the image cursor *p. */
static void move_layer(const gt_kv_layer *kv, const gt_kv_geom *g, lrange r, uint8_t **p,
                       bool out) {
#define MOVE(mem, n)                                         \
    do {                                                     \
        if (out) memcpy(*p, (mem), (n));                     \
        else memcpy((void *)(mem), *p, (n));                 \
        *p += (n);                                           \
    } while (0)
    if (g->mode != GEIST_KV_KIVI2) {
        for (int32_t q = r.lo; q < r.lo + r.count; q++)
            MOVE((uint8_t *)kv->k + (size_t)row_slot(kv, q) * g->krow, g->krow);
        for (int32_t q = r.lo; q < r.lo + r.count; q++)
            MOVE((uint8_t *)kv->v + (size_t)row_slot(kv, q) * g->vrow, g->vrow);
        return;
    }
    for (int32_t b = r.lo; b < r.lo + r.count; b++)
        MOVE((uint8_t *)kv->k + (size_t)blk_slot(kv, b) * g->kblock, g->kblock);
    for (int32_t b = r.lo; b < r.lo + r.count; b++)
        MOVE((uint8_t *)kv->v + (size_t)blk_slot(kv, b) * G * g->vrow, G * g->vrow);
    /* residual rows: storage position bound + i lives in residual slot i (bound % G == 0) */
    MOVE((uint8_t *)kv->rk, (size_t)r.n_resid * g->resid_row_k);
    MOVE((uint8_t *)kv->rv, (size_t)r.n_resid * g->resid_row_v);
#undef MOVE
}

static void fill_header(const geist_session *s, snap_header *h, uint64_t total) {
    const gt_config *c = &s->model->cfg;
    memset(h, 0, sizeof *h);
    memcpy(h->magic, SNAP_MAGIC, 8);
    h->version = SNAP_VERSION;
    h->header_bytes = sizeof *h;
    h->image_bytes = total;
    h->model_id = s->model->identity;
    h->prefix_id = s->prefix ? s->prefix->identity : 0;
    h->kv_mode = s->kv_mode;
    h->n_past = s->n_past;
    h->n_prefix = s->n_prefix;
    h->n_layer = c->n_layer;
    h->n_vocab = c->n_vocab;
    h->n_head_kv = c->n_head_kv;
    h->head_dim_k = c->head_dim_k;
    h->head_dim_v = c->head_dim_v;
    h->has_logits = s->has_logits;
    h->seed = s->seed;
}

/* A device session's KV lives on the device (backend.h): its host layers, in the same row
 * format and layout, serve as the image buffer; these move the rows of its own positions
 * [0, n_own) between the two (a ring's slots: at most its rows). */
static geist_status dev_sync(geist_session *s, int32_t n_own, bool to_device, gt_err *err) {
    if (!s->dev_kv) return GEIST_OK;
    const gt_device_ops *d = s->model->backend->device;
    for (int32_t il = 0; il < s->model->cfg.n_layer; il++) {
        const int32_t n = n_own < s->kv[il].rows ? n_own : s->kv[il].rows;
        const geist_status st =
            to_device ? d->kv_write(s->dev_kv, il, 0, n, s->kv[il].k, s->kv[il].v, err)
                      : d->kv_read(s->dev_kv, il, 0, n, s->kv[il].k, s->kv[il].v, err);
        if (st) return st;
    }
    return GEIST_OK;
}

geist_status gt_session_snapshot(geist_session *s, void *buf, size_t cap, size_t *needed,
                                 gt_err *err) {
    geist_status st0 = gt_session_bring_logits(s, err);
    if (st0) return st0;
    const uint64_t total = image_bytes(s);
    *needed = (size_t)total;
    if (cap < total) {
        return gt_fail(err, GEIST_ERR_BUFFER_TOO_SMALL,
                       "snapshot needs %llu bytes (buffer has %zu)", (unsigned long long)total,
                       cap);
    }
    const gt_config *c = &s->model->cfg;
    const geist_status dst = dev_sync(s, s->n_past - s->n_prefix, false, err);
    if (dst) return dst;
    uint8_t *p = buf;
    snap_header h;
    fill_header(s, &h, total);
    memcpy(p, &h, sizeof h);
    p += sizeof h;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const lrange r = layer_range(c, s->model->layers[il].sliding, s->kv_mode, s->n_past,
                                     s->n_prefix);
        memcpy(p, &r, sizeof r);
        p += sizeof r;
    }
    const size_t n_ids = (size_t)(s->n_past - s->n_prefix) * sizeof(int32_t);
    memcpy(p, s->ids, n_ids);
    p += n_ids;
    for (int32_t il = 0; il < c->n_layer; il++)
        move_layer(&s->kv[il], &s->geom,
                   layer_range(c, s->model->layers[il].sliding, s->kv_mode, s->n_past, s->n_prefix),
                   &p, true);
    if (s->has_logits) {
        memcpy(p, s->logits, (size_t)c->n_vocab * sizeof(float));
        p += (size_t)c->n_vocab * sizeof(float);
    }
    const uint64_t sum = gt_hash64(GT_HASH64_INIT, buf, (size_t)(p - (uint8_t *)buf));
    memcpy(p, &sum, sizeof sum);
    return GEIST_OK;
}

geist_status gt_session_restore(geist_session *s, const void *image, size_t size, gt_err *err) {
    const gt_config *c = &s->model->cfg;
    snap_header h;
    if (size < sizeof h + sizeof(uint64_t) || memcmp(image, SNAP_MAGIC, 8) != 0) {
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "not a geist session snapshot (%zu bytes)", size);
    }
    memcpy(&h, image, sizeof h);
    if (h.version != SNAP_VERSION) {
        return gt_fail(err, h.version > SNAP_VERSION ? GEIST_ERR_UNSUPPORTED : GEIST_ERR_BAD_FORMAT,
                       "snapshot version %u is not supported (this library reads version %u)",
                       h.version, SNAP_VERSION);
    }
    if (h.header_bytes != sizeof h || h.image_bytes != size) {
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "snapshot is truncated or padded: it says %llu bytes, %zu were given",
                       (unsigned long long)h.image_bytes, size);
    }
    uint64_t sum;
    memcpy(&sum, (const uint8_t *)image + size - sizeof sum, sizeof sum);
    if (gt_hash64(GT_HASH64_INIT, image, size - sizeof sum) != sum) {
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "snapshot checksum mismatch: the image is corrupt");
    }
    if (h.model_id != s->model->identity || h.n_layer != c->n_layer || h.n_vocab != c->n_vocab ||
        h.n_head_kv != c->n_head_kv || h.head_dim_k != c->head_dim_k ||
        h.head_dim_v != c->head_dim_v) {
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "snapshot was taken with another model (identity %016llx, this model %016llx)",
                       (unsigned long long)h.model_id, (unsigned long long)s->model->identity);
    }
    if (h.kv_mode != s->kv_mode) {
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "snapshot KV mode %s does not match this session's %s",
                       gt_kv_mode_name(h.kv_mode), gt_kv_mode_name(s->kv_mode));
    }
    const uint64_t my_prefix = s->prefix ? s->prefix->identity : 0;
    if (h.prefix_id != my_prefix || h.n_prefix != s->n_prefix) {
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "snapshot was taken on %s shared prefix than this session's",
                       h.prefix_id ? "another" : "no");
    }
    if (h.n_past < h.n_prefix || (h.has_logits != 0 && h.has_logits != 1)) {
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "snapshot header is inconsistent");
    }
    if (h.reserved != 0) {
        /* written as 0: a set value is corruption (or a later format this one would misread) */
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "snapshot header: reserved field is %d, not 0",
                       h.reserved);
    }
    if (h.n_past > s->max_seq_len) {
        return gt_fail(err, GEIST_ERR_CAPACITY,
                       "snapshot holds %d tokens, more than this session's max_seq_len %d",
                       h.n_past, s->max_seq_len);
    }
    /* every layer's rows must be what this session expects and fit its storage */
    const uint8_t *p = (const uint8_t *)image + sizeof h;
    uint64_t total = sizeof h + (uint64_t)c->n_layer * sizeof(lrange) +
                     (uint64_t)(h.n_past - h.n_prefix) * sizeof(int32_t);
    for (int32_t il = 0; il < c->n_layer; il++) {
        lrange r;
        memcpy(&r, p + (size_t)il * sizeof r, sizeof r);
        const lrange want =
            layer_range(c, s->model->layers[il].sliding, s->kv_mode, h.n_past, h.n_prefix);
        const gt_kv_layer *kv = &s->kv[il];
        const int32_t cap_units = s->kv_mode == GEIST_KV_KIVI2 ? kv->rows / G : kv->rows;
        if (memcmp(&r, &want, sizeof r) != 0 || r.count > cap_units) {
            return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                           "snapshot layer %d rows are inconsistent", il);
        }
        total += range_bytes(&s->geom, r);
    }
    if (h.has_logits) total += (uint64_t)c->n_vocab * sizeof(float);
    total += sizeof(uint64_t);
    if (total != size) {
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "snapshot sizes are inconsistent (%llu vs %zu bytes)",
                       (unsigned long long)total, size);
    }
    p += (size_t)c->n_layer * sizeof(lrange);
    const int32_t n_own = h.n_past - h.n_prefix;
    for (int32_t i = 0; i < n_own; i++) {
        int32_t id;
        memcpy(&id, p + (size_t)i * 4, 4);
        if (id < 0 || id >= c->n_vocab) {
            return gt_fail(err, GEIST_ERR_BAD_FORMAT, "snapshot token %d is out of range", i);
        }
    }
    /* a device that cannot take the rows says so before anything changes (0 rows: a probe) */
    if (s->dev_kv) {
        const geist_status dst = dev_sync(s, 0, true, err);
        if (dst) return dst;
    }
    /* validated: apply (nothing below can fail) */
    memcpy(s->ids, p, (size_t)n_own * sizeof(int32_t));
    p += (size_t)n_own * sizeof(int32_t);
    uint8_t *cur = (uint8_t *)(uintptr_t)p;
    int32_t floor_pos = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const lrange r =
            layer_range(c, s->model->layers[il].sliding, s->kv_mode, h.n_past, h.n_prefix);
        move_layer(&s->kv[il], &s->geom, r, &cur, false);
        const int32_t lo = s->kv_mode == GEIST_KV_KIVI2 ? r.lo * G : r.lo;
        if (lo > floor_pos) floor_pos = lo;
    }
    if (h.has_logits) memcpy(s->logits, cur, (size_t)c->n_vocab * sizeof(float));
    (void)dev_sync(s, n_own, true, err); /* probed above: cannot fail */
    s->has_logits = h.has_logits;
    s->logits_on_device = false;
    s->n_past = h.n_past;
    s->n_floor = floor_pos;
    s->seed = h.seed;
    return GEIST_OK;
}

geist_status gt_session_fork(geist_session *s, geist_session **out, gt_err *err) {
    geist_session *f = NULL;
    geist_status st = gt_session_bring_logits(s, err);
    if (st) return st;
    st = gt_session_new(s->model, s->max_seq_len, s->kv_mode, s->seed, s->prefix, &f, err);
    if (st) return st;
    const int32_t n_own = s->n_past - s->n_prefix;
    if ((st = dev_sync(s, n_own, false, err))) {
        gt_session_destroy(f);
        return st;
    }
    for (int32_t il = 0; il < s->model->cfg.n_layer; il++)
        gt_kv_layer_copy(&f->kv[il], &s->kv[il], &s->geom);
    if ((st = dev_sync(f, n_own, true, err))) {
        gt_session_destroy(f);
        return st;
    }
    memcpy(f->ids, s->ids, (size_t)(s->n_past - s->n_prefix) * sizeof(int32_t));
    memcpy(f->logits, s->logits, (size_t)s->model->cfg.n_vocab * sizeof(float));
    f->has_logits = s->has_logits;
    f->n_past = s->n_past;
    f->n_floor = s->n_floor;
    *out = f;
    return GEIST_OK;
}

geist_status gt_session_truncate(geist_session *s, int32_t n, gt_err *err) {
    if (n < s->n_prefix || n > s->n_past) {
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "cannot truncate to %d tokens: the session holds %d (shared prefix %d)", n,
                       s->n_past, s->n_prefix);
    }
    if (n == s->n_past) return GEIST_OK;
    const gt_config *c = &s->model->cfg;
    const int32_t n_own = s->n_past - s->n_prefix, new_own = n - s->n_prefix;
    /* sliding layers: the next token reads own positions from need_lo; are they still held? */
    int32_t need_lo = n - c->sliding_window + 1 - s->n_prefix;
    if (need_lo < 0) need_lo = 0;
    for (int32_t il = 0; il < c->n_layer && need_lo < new_own; il++) {
        const gt_kv_layer *kv = &s->kv[il];
        if (!s->model->layers[il].sliding) continue;
        int32_t held_lo = s->n_floor;
        if (kv->ring) {
            int32_t lo;
            if (s->kv_mode == GEIST_KV_KIVI2) {
                const int32_t nq = gt_kivi_boundary(n_own) / G, nb = kv->rows / G;
                lo = nq > nb ? (nq - nb) * G : 0;
            } else {
                lo = n_own > kv->rows ? n_own - kv->rows : 0;
            }
            if (lo > held_lo) held_lo = lo;
        }
        if (need_lo < held_lo) {
            return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                           "cannot truncate to %d tokens: the sliding-window ring of layer %d "
                           "no longer holds position %d", n, il, need_lo + s->n_prefix);
        }
    }
    if (s->kv_mode == GEIST_KV_KIVI2 && gt_kivi_boundary(new_own) < gt_kivi_boundary(n_own) &&
        new_own % G != 0) {
        for (int32_t il = 0; il < c->n_layer; il++)
            if (s->kv[il].rows > 0) gt_kivi_unquantize(&s->kv[il], &s->geom, c, new_own);
    }
    s->n_past = n;
    if (s->n_floor > new_own) s->n_floor = new_own;
    s->has_logits = false;
    s->logits_on_device = false;
    if (n == s->n_prefix && s->prefix) {
        memcpy(s->logits, s->prefix->s->logits, (size_t)c->n_vocab * sizeof(float));
        s->has_logits = true;
    }
    return GEIST_OK;
}
