/* The Metal backend's buffer planner (planner.h): NoCopy views over the weight span, each tensor's
 * (view, offset), and copies for what cannot be wrapped. Portable C, no Metal: tested everywhere. */
#include "planner.h"

#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }
static uint64_t down(uint64_t v, uint64_t p) { return v & ~(p - 1); }
static bool up(uint64_t v, uint64_t p, uint64_t *r) {
    if (v > UINT64_MAX - (p - 1)) return false;
    *r = (v + p - 1) & ~(p - 1);
    return true;
}

void gt_mtl_plan_free(gt_mtl_plan *p) {
    if (!p) return;
    free(p->views);
    free(p->copy_len);
    free(p->place);
    const int64_t bad = p->bad_tensor;
    memset(p, 0, sizeof *p);
    p->bad_tensor = bad;
}

static geist_status fail_plan(gt_mtl_plan *p, geist_status st) {
    gt_mtl_plan_free(p);
    return st;
}

typedef struct {
    uint64_t lo; /* absolute address of the tensor's first byte */
    size_t i;
} by_addr;

static int cmp_addr(const void *a, const void *b) {
    const by_addr *x = a, *y = b;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Packs tensor i into the copy buffers (each <= max_buffer; the tensor's size was checked). */
static void add_copy(gt_mtl_plan *p, size_t i, uint64_t size, uint64_t max_buffer) {
    uint64_t at = 0;
    if (p->n_copies > 0) {
        const uint64_t cur = p->copy_len[p->n_copies - 1];
        /* cur <= max_buffer; aligning it up past UINT64_MAX means it cannot take more */
        if (up(cur, GT_MTL_COPY_ALIGN, &at) && at <= max_buffer && size <= max_buffer - at) {
            p->copy_len[p->n_copies - 1] = at + size;
            p->place[i] = (gt_mtl_place){GT_MTL_IN_COPY, p->n_copies - 1, at};
            p->copied_tensors++;
            return;
        }
    }
    p->copy_len[p->n_copies] = size;
    p->place[i] = (gt_mtl_place){GT_MTL_IN_COPY, p->n_copies, 0};
    p->n_copies++;
    p->copied_tensors++;
}

geist_status gt_mtl_plan_make(const gt_mtl_plan_in *in, gt_mtl_plan *out, gt_err *err) {
    memset(out, 0, sizeof *out);
    out->bad_tensor = -1;
    if (in == NULL || (in->tensors == NULL && in->n_tensors > 0))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "metal plan: no tensor table");
    const uint64_t page = in->page, maxb = in->max_buffer;
    if (!is_pow2(page))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "metal plan: the page size %llu is not a power of two",
                       (unsigned long long)page);
    if (maxb < page)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "metal plan: maxBufferLength (%llu bytes) is smaller than one page (%llu)",
                       (unsigned long long)maxb, (unsigned long long)page);
    uint64_t end = 0, a1 = 0;
    if (!gt_add_u64(in->base, in->span, &end) || !up(end, page, &a1))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "metal plan: a span of %llu bytes at 0x%llx wraps the address space",
                       (unsigned long long)in->span, (unsigned long long)in->base);
    const uint64_t a0 = down(in->base, page);
    const uint64_t L = down(maxb, page); /* the longest view */
    const size_t n = in->n_tensors;

    out->place = gt_malloc_array(n ? n : 1, sizeof *out->place);
    out->copy_len = gt_malloc_array(n ? n : 1, sizeof *out->copy_len);
    if (!out->place || !out->copy_len) {
        gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (metal plan of %zu tensors)", n);
        return fail_plan(out, GEIST_ERR_OUT_OF_MEMORY);
    }
    uint64_t smax = 0;
    for (size_t i = 0; i < n; i++) {
        const gt_mtl_tensor *t = &in->tensors[i];
        uint64_t hi = 0;
        if (!gt_add_u64(t->offset, t->size, &hi) || hi > in->span) {
            out->bad_tensor = (int64_t)i;
            gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                    "metal plan: tensor %zu (offset %llu, %llu bytes) lies outside the span of "
                    "%llu bytes", i, (unsigned long long)t->offset, (unsigned long long)t->size,
                    (unsigned long long)in->span);
            return fail_plan(out, GEIST_ERR_INVALID_ARGUMENT);
        }
        if (t->size > maxb) {
            out->bad_tensor = (int64_t)i;
            gt_fail(err, GEIST_ERR_UNSUPPORTED,
                    "metal: tensor %zu (%llu bytes) is larger than the device's maxBufferLength "
                    "(%llu bytes): no Metal buffer can hold it", i, (unsigned long long)t->size,
                    (unsigned long long)maxb);
            return fail_plan(out, GEIST_ERR_UNSUPPORTED);
        }
        if (t->size > smax) smax = t->size;
    }

    const bool copy_all = in->writable && !in->allow_alias;
    const uint64_t A = a1 - a0; /* the span's pages */
    uint64_t overlap = 0;
    if (copy_all || in->span == 0) {
        out->mode = GT_MTL_NONE;
    } else if (A <= L) {
        out->mode = GT_MTL_SINGLE;
    } else if (up(smax, page, &overlap) && overlap <= L - page) {
        out->mode = GT_MTL_STRIDED;
    } else {
        out->mode = GT_MTL_GREEDY;
    }

    if (out->mode == GT_MTL_SINGLE || out->mode == GT_MTL_STRIDED) {
        uint64_t nv = 1, S = L;
        if (out->mode == GT_MTL_STRIDED) {
            S = L - overlap; /* >= one page */
            nv = 1 + (A - L) / S + ((A - L) % S != 0);
            out->stride = S;
            out->overlap = overlap;
        }
        if (nv > GT_MTL_MAX_VIEWS) {
            gt_fail(err, GEIST_ERR_UNSUPPORTED,
                    "metal: the weights (%llu bytes) would need %llu views of maxBufferLength "
                    "(%llu bytes) overlapping by %llu bytes; at most %d are made",
                    (unsigned long long)in->span, (unsigned long long)nv, (unsigned long long)L,
                    (unsigned long long)overlap, GT_MTL_MAX_VIEWS);
            return fail_plan(out, GEIST_ERR_UNSUPPORTED);
        }
        out->views = malloc((size_t)nv * sizeof *out->views);
        if (!out->views) {
            gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (metal plan views)");
            return fail_plan(out, GEIST_ERR_OUT_OF_MEMORY);
        }
        for (uint64_t k = 0; k < nv; k++) {
            const uint64_t at = k * S; /* < A */
            out->views[k] = (gt_mtl_view){a0 + at, A - at < L ? A - at : L};
        }
        out->n_views = (int32_t)nv;
        for (size_t i = 0; i < n; i++) {
            if (in->tensors[i].size == 0) continue; /* below */
            const uint64_t lo = in->base + in->tensors[i].offset;
            uint64_t k = (lo - a0) / S;
            if (k >= nv) k = nv - 1;
            const gt_mtl_view *v = &out->views[k];
            if (lo + in->tensors[i].size > v->addr + v->length) { /* cannot happen: see planner.h */
                out->bad_tensor = (int64_t)i;
                gt_fail(err, GEIST_ERR_INTERNAL, "metal plan: tensor %zu does not fit view %llu",
                        i, (unsigned long long)k);
                return fail_plan(out, GEIST_ERR_INTERNAL);
            }
            out->place[i] = (gt_mtl_place){GT_MTL_IN_VIEW, (int32_t)k, lo - v->addr};
        }
    } else if (out->mode == GT_MTL_GREEDY) {
        by_addr *order = gt_malloc_array(n ? n : 1, sizeof *order);
        out->views = gt_malloc_array(n ? n : 1, sizeof *out->views);
        if (!order || !out->views) {
            free(order);
            gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (metal plan views)");
            return fail_plan(out, GEIST_ERR_OUT_OF_MEMORY);
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (in->tensors[i].size > 0) order[m++] = (by_addr){in->base + in->tensors[i].offset, i};
        qsort(order, m, sizeof *order, cmp_addr);
        for (size_t j = 0; j < m; j++) {
            const size_t i = order[j].i;
            const uint64_t lo = order[j].lo, hi = lo + in->tensors[i].size;
            const uint64_t t0 = down(lo, page);
            uint64_t t1 = 0;
            up(hi, page, &t1); /* hi <= end, and end rounds up without overflow (checked) */
            if (t1 - t0 > L) { /* its bytes fit maxBufferLength, its pages do not: copy it */
                add_copy(out, i, in->tensors[i].size, maxb);
                continue;
            }
            gt_mtl_view *cur = out->n_views ? &out->views[out->n_views - 1] : NULL;
            if (cur == NULL || t1 - cur->addr > L) {
                if (out->n_views == GT_MTL_MAX_VIEWS) {
                    free(order);
                    gt_fail(err, GEIST_ERR_UNSUPPORTED,
                            "metal: the weights would need more than %d views of "
                            "maxBufferLength (%llu bytes)", GT_MTL_MAX_VIEWS, (unsigned long long)L);
                    return fail_plan(out, GEIST_ERR_UNSUPPORTED);
                }
                cur = &out->views[out->n_views++];
                *cur = (gt_mtl_view){t0, t1 - t0};
            } else if (t1 - cur->addr > cur->length) {
                cur->length = t1 - cur->addr;
            }
            out->place[i] = (gt_mtl_place){GT_MTL_IN_VIEW, out->n_views - 1, lo - cur->addr};
        }
        free(order);
    }
    if (copy_all)
        for (size_t i = 0; i < n; i++)
            if (in->tensors[i].size > 0) add_copy(out, i, in->tensors[i].size, maxb);
    for (size_t i = 0; i < n; i++) /* zero-sized tensors: nothing is read; any binding will do */
        if (in->tensors[i].size == 0)
            out->place[i] = out->n_views ? (gt_mtl_place){GT_MTL_IN_VIEW, 0, 0}
                            : out->n_copies ? (gt_mtl_place){GT_MTL_IN_COPY, 0, 0}
                                            : (gt_mtl_place){GT_MTL_EMPTY, -1, 0};
    /* the report: the views' union (they ascend by addr) and the copies */
    uint64_t covered_to = 0;
    for (int32_t k = 0; k < out->n_views; k++) {
        const gt_mtl_view *v = &out->views[k];
        const uint64_t e = v->addr + v->length, s = v->addr > covered_to ? v->addr : covered_to;
        if (e > s) out->wrapped += e - s;
        if (e > covered_to) covered_to = e;
        out->view_bytes += v->length;
    }
    for (int32_t c = 0; c < out->n_copies; c++) out->copied += out->copy_len[c];
    return GEIST_OK;
}

geist_status gt_mtl_kv_plan(int32_t kv_mode, int32_t max_seq, int32_t n_layer, uint64_t n_head_kv,
                            uint64_t head_dim_k, uint64_t head_dim_v, uint64_t max_buffer,
                            gt_mtl_kv_layout *out, gt_err *err) {
    memset(out, 0, sizeof *out);
    if (kv_mode != GEIST_KV_F32 && kv_mode != GEIST_KV_F16 &&
        (kv_mode != GEIST_KV_INT8 || head_dim_k % 4 || head_dim_v % 4))
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "metal: KV mode %d is not supported on the device (supported: 0 = F32, "
                       "1 = F16, 2 = INT8)", (int)kv_mode);
    if (max_seq <= 0 || n_layer <= 0 || n_head_kv == 0 || head_dim_k == 0 || head_dim_v == 0)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "metal: KV of %d positions, %d layers, %llu KV heads of %llu/%llu values",
                       (int)max_seq, (int)n_layer, (unsigned long long)n_head_kv,
                       (unsigned long long)head_dim_k, (unsigned long long)head_dim_v);
    /* bytes per position: values of 4 or 2 bytes, or per KV head an f32 scale + int8 codes */
    const uint64_t elem = kv_mode == GEIST_KV_F16 ? 2 : 4;
    const uint64_t hdr = kv_mode == GEIST_KV_INT8 ? 4 : 0;
    const uint64_t per = kv_mode == GEIST_KV_INT8 ? 1 : elem;
    uint64_t kr = 0, vr = 0, kb = 0, vb = 0, lb = 0, total = 0;
    if (!gt_mul_u64(head_dim_k, per, &kr) || !gt_add_u64(kr, hdr, &kr) ||
        !gt_mul_u64(kr, n_head_kv, &kr) || !gt_mul_u64(head_dim_v, per, &vr) ||
        !gt_add_u64(vr, hdr, &vr) || !gt_mul_u64(vr, n_head_kv, &vr) ||
        !gt_mul_u64((uint64_t)max_seq, kr, &kb) || !gt_mul_u64((uint64_t)max_seq, vr, &vb) ||
        !gt_add_u64(kb, vb, &lb) || !gt_mul_u64(lb, (uint64_t)n_layer, &total))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "metal: the KV size overflows");
    if (total > max_buffer)
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "metal: the KV of %d positions needs %llu bytes, more than the device's "
                       "maxBufferLength (%llu bytes): lower max_seq_len",
                       (int)max_seq, (unsigned long long)total, (unsigned long long)max_buffer);
    *out = (gt_mtl_kv_layout){(uint32_t)kv_mode, kr, vr, kb, lb, total};
    return GEIST_OK;
}

geist_status gt_mtl_plan_gguf(const gguf_file *g, uint64_t page, uint64_t max_buffer,
                              bool writable, bool allow_alias, gt_mtl_plan *out, gt_err *err) {
    const size_t n = (size_t)g->n_tensors;
    gt_mtl_tensor *t = gt_malloc_array(n ? n : 1, sizeof *t);
    if (!t) {
        memset(out, 0, sizeof *out);
        out->bad_tensor = -1;
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (metal weight plan)");
    }
    for (size_t i = 0; i < n; i++)
        t[i] = (gt_mtl_tensor){g->data_offset + g->tensors[i].offset, g->tensors[i].nbytes};
    const gt_mtl_plan_in in = {.base = (uint64_t)(uintptr_t)g->base, .span = g->size,
                               .page = page, .max_buffer = max_buffer, .writable = writable,
                               .allow_alias = allow_alias, .tensors = t, .n_tensors = n};
    gt_err e = {0};
    const geist_status st = gt_mtl_plan_make(&in, out, &e);
    free(t);
    if (st && out->bad_tensor >= 0) {
        const gguf_tensor *bt = &g->tensors[out->bad_tensor];
        return gt_fail(err, st, "%s ('%.*s')", e.msg, (int)bt->name.len, bt->name.ptr);
    }
    return st ? gt_fail(err, st, "%s", e.msg) : GEIST_OK;
}
