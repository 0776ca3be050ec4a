/* GGUF parsing and validation over a caller's read-only byte span (see gguf.h).
 *
 * Every read goes through a bounds-checked cursor and memcpy (the span may be unaligned), every
 * count is checked against the bytes left before anything is allocated, and all size arithmetic
 * is overflow-checked. Nothing here writes to the span or keeps global state. */
#include "gguf.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/ggml_types.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
/* Smallest encodings, used to bound counts by the bytes left before allocating. */
#define GGUF_MIN_KV_BYTES 13u     /* u64 key length + 1 key byte + u32 type + 1 value byte */
/* u64 name length + u32 n_dims + one u64 dimension + u32 type + u64 offset */
#define GGUF_MIN_TENSOR_BYTES 32u
#define GGUF_SHOW_MAX 80u         /* longest name quoted in an error message */

bool gt_str_eq(gt_str s, const char *cstr) {
    if (!cstr) return false;
    size_t n = strlen(cstr);
    if (s.len != n) return false;
    return n == 0 || memcmp(s.ptr, cstr, n) == 0;
}

size_t gt_gguf_vtype_size(uint32_t type) {
    switch (type) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

const char *gt_gguf_vtype_name(uint32_t type) {
    static const char *const names[GGUF_VT_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64",
    };
    return type < GGUF_VT_COUNT ? names[type] : "unknown";
}

static bool vt_is_unsigned(uint32_t t) {
    return t == GGUF_VT_UINT8 || t == GGUF_VT_UINT16 || t == GGUF_VT_UINT32 || t == GGUF_VT_UINT64;
}

static bool vt_is_signed(uint32_t t) {
    return t == GGUF_VT_INT8 || t == GGUF_VT_INT16 || t == GGUF_VT_INT32 || t == GGUF_VT_INT64;
}

static bool vt_is_float(uint32_t t) { return t == GGUF_VT_FLOAT32 || t == GGUF_VT_FLOAT64; }

/* Little-endian loads from possibly unaligned bytes. */
static uint16_t ld_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t ld_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t ld_u64(const uint8_t *p) {
    return (uint64_t)ld_u32(p) | ((uint64_t)ld_u32(p + 4) << 32);
}
static float ld_f32(const uint8_t *p) {
    uint32_t b = ld_u32(p);
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
static double ld_f64(const uint8_t *p) {
    uint64_t b = ld_u64(p);
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}
/* Two's complement reinterpretation without implementation-defined conversions. */
static int64_t sx(uint64_t v, unsigned bits) {
    uint64_t sign = (uint64_t)1 << (bits - 1);
    uint64_t mask = bits == 64 ? ~(uint64_t)0 : (((uint64_t)1 << bits) - 1);
    v &= mask;
    if (v & sign) {
        /* -(2^bits - v), computed in the non-negative range first */
        uint64_t mag = (mask - v) + 1;
        if (mag == ((uint64_t)1 << 63)) return INT64_MIN;
        return -(int64_t)mag;
    }
    return (int64_t)v;
}

/* Copies a name into buf for an error message: printable ASCII kept, the rest shown as '?',
 * long names cut with "...". */
static const char *show(char *buf, size_t cap, gt_str s) {
    size_t n = 0;
    uint64_t lim = s.len < GGUF_SHOW_MAX ? s.len : GGUF_SHOW_MAX;
    for (uint64_t i = 0; i < lim && n + 4 < cap; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        buf[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (s.len > lim && n + 4 < cap) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

typedef struct rd {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    gt_err *err;
} rd;

static uint64_t rd_left(const rd *r) { return r->size - r->pos; }

/* Fails with a truncation message if fewer than n bytes are left; ctx/what name the field. */
static geist_status rd_need(rd *r, uint64_t n, const char *ctx, const char *what) {
    if (n > rd_left(r)) {
        return gt_fail(r->err, GEIST_ERR_BAD_FORMAT,
                       "%s: truncated reading %s at offset %llu (need %llu bytes, %llu left)", ctx,
                       what, (unsigned long long)r->pos, (unsigned long long)n,
                       (unsigned long long)rd_left(r));
    }
    return GEIST_OK;
}

static geist_status rd_u32(rd *r, uint32_t *out, const char *ctx, const char *what) {
    geist_status st = rd_need(r, 4, ctx, what);
    if (st != GEIST_OK) return st;
    *out = ld_u32(r->base + r->pos);
    r->pos += 4;
    return GEIST_OK;
}

static geist_status rd_u64(rd *r, uint64_t *out, const char *ctx, const char *what) {
    geist_status st = rd_need(r, 8, ctx, what);
    if (st != GEIST_OK) return st;
    *out = ld_u64(r->base + r->pos);
    r->pos += 8;
    return GEIST_OK;
}

static geist_status rd_str(rd *r, gt_str *out, const char *ctx, const char *what) {
    uint64_t len;
    geist_status st = rd_u64(r, &len, ctx, what);
    if (st != GEIST_OK) return st;
    if (len > rd_left(r)) {
        return gt_fail(r->err, GEIST_ERR_BAD_FORMAT,
                       "%s: %s length %llu exceeds remaining %llu bytes (at offset %llu)", ctx,
                       what, (unsigned long long)len, (unsigned long long)rd_left(r),
                       (unsigned long long)(r->pos - 8));
    }
    out->ptr = (const char *)(r->base + r->pos);
    out->len = len;
    r->pos += len;
    return GEIST_OK;
}

/* Reads one scalar of type t (not STRING/ARRAY) into kv->v. */
static geist_status rd_scalar(rd *r, uint32_t t, gguf_kv *kv, const char *ctx) {
    size_t sz = gt_gguf_vtype_size(t);
    geist_status st = rd_need(r, sz, ctx, gt_gguf_vtype_name(t));
    if (st != GEIST_OK) return st;
    const uint8_t *p = r->base + r->pos;
    switch (t) {
    case GGUF_VT_UINT8: kv->v.u = p[0]; break;
    case GGUF_VT_UINT16: kv->v.u = ld_u16(p); break;
    case GGUF_VT_UINT32: kv->v.u = ld_u32(p); break;
    case GGUF_VT_UINT64: kv->v.u = ld_u64(p); break;
    case GGUF_VT_INT8: kv->v.i = sx(p[0], 8); break;
    case GGUF_VT_INT16: kv->v.i = sx(ld_u16(p), 16); break;
    case GGUF_VT_INT32: kv->v.i = sx(ld_u32(p), 32); break;
    case GGUF_VT_INT64: kv->v.i = sx(ld_u64(p), 64); break;
    case GGUF_VT_FLOAT32: kv->v.f = (double)ld_f32(p); break;
    case GGUF_VT_FLOAT64: kv->v.f = ld_f64(p); break;
    case GGUF_VT_BOOL:
        if (p[0] > 1) {
            return gt_fail(r->err, GEIST_ERR_BAD_FORMAT, "%s: invalid bool value %u at offset %llu",
                           ctx, (unsigned)p[0], (unsigned long long)r->pos);
        }
        kv->v.b = p[0] != 0;
        break;
    default:
        return gt_fail(r->err, GEIST_ERR_INTERNAL, "%s: rd_scalar on type %u", ctx, (unsigned)t);
    }
    r->pos += sz;
    return GEIST_OK;
}

static geist_status rd_array(rd *r, gguf_kv *kv, const char *ctx) {
    uint32_t et;
    uint64_t n;
    geist_status st = rd_u32(r, &et, ctx, "array element type");
    if (st != GEIST_OK) return st;
    if (et == GGUF_VT_ARRAY) {
        return gt_fail(r->err, GEIST_ERR_UNSUPPORTED, "%s: arrays of arrays are not supported",
                       ctx);
    }
    if (et >= GGUF_VT_COUNT) {
        return gt_fail(r->err, GEIST_ERR_BAD_FORMAT, "%s: unknown array element type %u", ctx,
                       (unsigned)et);
    }
    st = rd_u64(r, &n, ctx, "array length");
    if (st != GEIST_OK) return st;
    uint64_t start = r->pos;
    if (et == GGUF_VT_STRING) {
        /* Each element takes at least its 8-byte length. */
        if (n > rd_left(r) / 8) {
            return gt_fail(r->err, GEIST_ERR_BAD_FORMAT,
                           "%s: array length %llu of strings exceeds remaining %llu bytes", ctx,
                           (unsigned long long)n, (unsigned long long)rd_left(r));
        }
        for (uint64_t i = 0; i < n; i++) {
            uint64_t elem_pos = r->pos;
            uint64_t len;
            st = rd_u64(r, &len, ctx, "array string length");
            if (st != GEIST_OK) return st;
            if (len > rd_left(r)) {
                return gt_fail(r->err, GEIST_ERR_BAD_FORMAT,
                               "%s: element %llu: string length %llu exceeds remaining %llu bytes "
                               "(at offset %llu)",
                               ctx, (unsigned long long)i, (unsigned long long)len,
                               (unsigned long long)rd_left(r), (unsigned long long)elem_pos);
            }
            r->pos += len;
        }
    } else {
        uint64_t esz = gt_gguf_vtype_size(et);
        if (n > rd_left(r) / esz) {
            return gt_fail(r->err, GEIST_ERR_BAD_FORMAT,
                           "%s: array length %llu of %s exceeds remaining %llu bytes", ctx,
                           (unsigned long long)n, gt_gguf_vtype_name(et),
                           (unsigned long long)rd_left(r));
        }
        uint64_t bytes = n * esz; /* cannot overflow: n * esz <= bytes left */
        if (et == GGUF_VT_BOOL) {
            for (uint64_t i = 0; i < n; i++) {
                if (r->base[r->pos + i] > 1) {
                    return gt_fail(r->err, GEIST_ERR_BAD_FORMAT,
                                   "%s: element %llu: invalid bool value %u", ctx,
                                   (unsigned long long)i, (unsigned)r->base[r->pos + i]);
                }
            }
        }
        r->pos += bytes;
    }
    kv->arr_type = et;
    kv->arr_len = n;
    kv->arr_data = r->base + start;
    kv->arr_bytes = r->pos - start;
    return GEIST_OK;
}

/* Sorting helpers for duplicate and overlap detection (O(n log n), not O(n^2), so a file with
 * very many entries cannot stall the loader). */
typedef struct name_ref {
    gt_str s;
    uint64_t idx;
} name_ref;

static int cmp_name(const void *a, const void *b) {
    const name_ref *x = a, *y = b;
    uint64_t n = x->s.len < y->s.len ? x->s.len : y->s.len;
    int c = n ? memcmp(x->s.ptr, y->s.ptr, (size_t)n) : 0;
    if (c != 0) return c;
    if (x->s.len != y->s.len) return x->s.len < y->s.len ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx ? 1 : 0);
}

typedef struct range_ref {
    uint64_t off;
    uint64_t end;
    uint64_t idx;
} range_ref;

static int cmp_range(const void *a, const void *b) {
    const range_ref *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx ? 1 : 0);
}

/* Finds a duplicate among the n gt_str fields at `field` bytes into each `stride`-byte record of
 * `recs`; sets *found and the two record indices if one exists. */
static geist_status find_dup(const void *recs, size_t stride, size_t field, uint64_t n,
                             bool *found, uint64_t *first, uint64_t *second, gt_err *err) {
    *found = false;
    if (n < 2) return GEIST_OK;
    name_ref *refs = gt_malloc_array((size_t)n, sizeof *refs);
    if (!refs) {
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory sorting %llu names",
                       (unsigned long long)n);
    }
    for (uint64_t i = 0; i < n; i++) {
        memcpy(&refs[i].s, (const char *)recs + i * stride + field, sizeof(gt_str));
        refs[i].idx = i;
    }
    qsort(refs, (size_t)n, sizeof *refs, cmp_name);
    for (uint64_t i = 1; i < n; i++) {
        const gt_str a = refs[i - 1].s, b = refs[i].s;
        if (a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, (size_t)a.len) == 0)) {
            *found = true;
            *first = refs[i - 1].idx;
            *second = refs[i].idx;
            break;
        }
    }
    free(refs);
    return GEIST_OK;
}

static geist_status parse_kvs(rd *r, gguf_file *f) {
    char ctx[160], nm[GGUF_SHOW_MAX + 8];
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        snprintf(ctx, sizeof ctx, "metadata key #%llu", (unsigned long long)i);
        geist_status st = rd_str(r, &kv->key, ctx, "key string");
        if (st != GEIST_OK) return st;
        if (kv->key.len == 0) {
            return gt_fail(r->err, GEIST_ERR_BAD_FORMAT, "%s: empty key (at offset %llu)", ctx,
                           (unsigned long long)(r->pos - 8));
        }
        snprintf(ctx, sizeof ctx, "metadata key #%llu '%s'", (unsigned long long)i,
                 show(nm, sizeof nm, kv->key));
        st = rd_u32(r, &kv->type, ctx, "value type");
        if (st != GEIST_OK) return st;
        if (kv->type >= GGUF_VT_COUNT) {
            return gt_fail(r->err, GEIST_ERR_BAD_FORMAT,
                           "%s: unknown value type %u (at offset %llu)", ctx, (unsigned)kv->type,
                           (unsigned long long)(r->pos - 4));
        }
        if (kv->type == GGUF_VT_STRING) {
            st = rd_str(r, &kv->v.s, ctx, "string");
        } else if (kv->type == GGUF_VT_ARRAY) {
            st = rd_array(r, kv, ctx);
        } else {
            st = rd_scalar(r, kv->type, kv, ctx);
        }
        if (st != GEIST_OK) return st;
    }
    bool dup;
    uint64_t a = 0, b = 0;
    geist_status st =
        find_dup(f->kv, sizeof(gguf_kv), offsetof(gguf_kv, key), f->n_kv, &dup, &a, &b, r->err);
    if (st != GEIST_OK) return st;
    if (dup) {
        return gt_fail(r->err, GEIST_ERR_BAD_FORMAT,
                       "duplicate metadata key '%s' (entries #%llu and #%llu)",
                       show(nm, sizeof nm, f->kv[a].key), (unsigned long long)(a < b ? a : b),
                       (unsigned long long)(a < b ? b : a));
    }
    return GEIST_OK;
}

static geist_status read_alignment(gguf_file *f, gt_err *err) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gt_gguf_find_kv(f, "general.alignment");
    if (!kv) return GEIST_OK;
    if (!vt_is_unsigned(kv->type)) {
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "general.alignment has type %s; expected an unsigned integer",
                       gt_gguf_vtype_name(kv->type));
    }
    uint64_t a = kv->v.u;
    if (a == 0 || (a & (a - 1)) != 0) {
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "general.alignment %llu is not a non-zero power of two",
                       (unsigned long long)a);
    }
    f->alignment = a;
    return GEIST_OK;
}

static geist_status parse_tensor_info(rd *r, gguf_tensor *t, uint64_t i) {
    char ctx[160], nm[GGUF_SHOW_MAX + 8];
    snprintf(ctx, sizeof ctx, "tensor #%llu", (unsigned long long)i);
    geist_status st = rd_str(r, &t->name, ctx, "name string");
    if (st != GEIST_OK) return st;
    snprintf(ctx, sizeof ctx, "tensor '%s'", show(nm, sizeof nm, t->name));
    st = rd_u32(r, &t->n_dims, ctx, "n_dims");
    if (st != GEIST_OK) return st;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
        return gt_fail(r->err, GEIST_ERR_BAD_FORMAT, "%s: %u dimensions (must be 1..%d)", ctx,
                       (unsigned)t->n_dims, GGUF_MAX_DIMS);
    }
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        st = rd_u64(r, &t->ne[d], ctx, "dimension");
        if (st != GEIST_OK) return st;
    }
    st = rd_u32(r, &t->type, ctx, "type");
    if (st != GEIST_OK) return st;
    st = rd_u64(r, &t->offset, ctx, "data offset");
    if (st != GEIST_OK) return st;

    const gt_type_info *ti = gt_type_get(t->type);
    if (!ti) {
        return gt_fail(r->err, GEIST_ERR_UNSUPPORTED, "%s: unknown tensor type id %u", ctx,
                       (unsigned)t->type);
    }
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (t->ne[d] == 0) {
            return gt_fail(r->err, GEIST_ERR_BAD_FORMAT, "%s: dimension %u is 0", ctx,
                           (unsigned)d);
        }
        if (!gt_mul_u64(n, t->ne[d], &n) || n > (uint64_t)INT64_MAX) {
            return gt_fail(r->err, GEIST_ERR_BAD_FORMAT,
                           "%s: element count overflows (dimension %u is %llu)", ctx, (unsigned)d,
                           (unsigned long long)t->ne[d]);
        }
    }
    if (t->ne[0] % ti->block != 0) {
        return gt_fail(r->err, GEIST_ERR_BAD_FORMAT,
                       "%s: row length %llu is not a multiple of the %s block size %u", ctx,
                       (unsigned long long)t->ne[0], ti->name, (unsigned)ti->block);
    }
    t->nelements = n;
    /* n is a multiple of the block size because ne[0] is. */
    if (!gt_mul_u64(n / ti->block, ti->bytes, &t->nbytes)) {
        return gt_fail(r->err, GEIST_ERR_BAD_FORMAT,
                       "%s: byte size overflows (%llu elements of %s)", ctx,
                       (unsigned long long)n, ti->name);
    }
    return GEIST_OK;
}

/* Offsets, bounds and overlaps of the tensor data, once the data section start is known. */
static geist_status check_tensor_data(gguf_file *f, gt_err *err) {
    char nm[GGUF_SHOW_MAX + 8], nm2[GGUF_SHOW_MAX + 8];
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment != 0) {
            return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                           "tensor '%s': data offset %llu is not aligned to %llu",
                           show(nm, sizeof nm, t->name), (unsigned long long)t->offset,
                           (unsigned long long)f->alignment);
        }
        uint64_t start, end;
        if (!gt_add_u64(f->data_offset, t->offset, &start) ||
            !gt_add_u64(start, t->nbytes, &end)) {
            return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                           "tensor '%s': data range (data section %llu + offset %llu, %llu bytes) "
                           "overflows, past end of file (size %llu)",
                           show(nm, sizeof nm, t->name), (unsigned long long)f->data_offset,
                           (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                           (unsigned long long)f->size);
        }
        if (end > f->size) {
            return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                           "tensor '%s': data range [%llu, %llu) past end of file (size %llu)",
                           show(nm, sizeof nm, t->name), (unsigned long long)start,
                           (unsigned long long)end, (unsigned long long)f->size);
        }
        t->data = f->base + start;
    }
    if (f->n_tensors < 2) return GEIST_OK;
    range_ref *rr = gt_malloc_array((size_t)f->n_tensors, sizeof *rr);
    if (!rr) {
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory sorting %llu tensor ranges",
                       (unsigned long long)f->n_tensors);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        rr[i].off = f->tensors[i].offset;
        rr[i].end = f->tensors[i].offset + f->tensors[i].nbytes; /* checked above */
        rr[i].idx = i;
    }
    qsort(rr, (size_t)f->n_tensors, sizeof *rr, cmp_range);
    geist_status st = GEIST_OK;
    for (uint64_t i = 1; i < f->n_tensors; i++) {
        if (rr[i].off < rr[i - 1].end) {
            const gguf_tensor *a = &f->tensors[rr[i - 1].idx], *b = &f->tensors[rr[i].idx];
            st = gt_fail(err, GEIST_ERR_BAD_FORMAT,
                         "tensors '%s' and '%s' overlap: data [%llu, %llu) and [%llu, %llu)",
                         show(nm, sizeof nm, a->name), show(nm2, sizeof nm2, b->name),
                         (unsigned long long)(f->data_offset + rr[i - 1].off),
                         (unsigned long long)(f->data_offset + rr[i - 1].end),
                         (unsigned long long)(f->data_offset + rr[i].off),
                         (unsigned long long)(f->data_offset + rr[i].end));
            break;
        }
    }
    free(rr);
    return st;
}

static geist_status parse_all(gguf_file *f, gt_err *err) {
    rd r = {f->base, (uint64_t)f->size, 0, err};
    const char *ctx = "GGUF header";
    geist_status st = rd_need(&r, 4, ctx, "magic");
    if (st != GEIST_OK) return st;
    if (memcmp(r.base, GGUF_MAGIC, 4) != 0) {
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "bad magic %02x %02x %02x %02x (expected \"GGUF\"): not a GGUF file",
                       r.base[0], r.base[1], r.base[2], r.base[3]);
    }
    r.pos = 4;
    st = rd_u32(&r, &f->version, ctx, "version");
    if (st != GEIST_OK) return st;
    if (f->version == 1) {
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "GGUF version 1 is not supported (versions 2 and 3 are)");
    }
    if (f->version < 2 || f->version > 3) {
        uint32_t v = f->version;
        uint32_t swapped = (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
        return gt_fail(err, GEIST_ERR_UNSUPPORTED,
                       "GGUF version %u is not supported (versions 2 and 3 are)%s", (unsigned)v,
                       (swapped >= 1 && swapped <= 3) ? "; the file looks big-endian" : "");
    }
    st = rd_u64(&r, &f->n_tensors, ctx, "tensor count");
    if (st != GEIST_OK) return st;
    st = rd_u64(&r, &f->n_kv, ctx, "metadata key count");
    if (st != GEIST_OK) return st;

    /* Counts cannot exceed what the rest of the file could encode: a check that also keeps a
     * hostile count from turning into a huge allocation. */
    if (f->n_tensors > rd_left(&r) / GGUF_MIN_TENSOR_BYTES) {
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "tensor count %llu exceeds what the remaining %llu bytes can hold",
                       (unsigned long long)f->n_tensors, (unsigned long long)rd_left(&r));
    }
    if (f->n_kv > rd_left(&r) / GGUF_MIN_KV_BYTES) {
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "metadata key count %llu exceeds what the remaining %llu bytes can hold",
                       (unsigned long long)f->n_kv, (unsigned long long)rd_left(&r));
    }
    if (f->n_kv > SIZE_MAX / sizeof(gguf_kv) || f->n_tensors > SIZE_MAX / sizeof(gguf_tensor)) {
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "index tables too large for this platform");
    }
    f->kv = gt_calloc((size_t)f->n_kv, sizeof(gguf_kv));
    f->tensors = gt_calloc((size_t)f->n_tensors, sizeof(gguf_tensor));
    if (!f->kv || !f->tensors) {
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY,
                       "out of memory for %llu metadata entries and %llu tensors",
                       (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors);
    }

    st = parse_kvs(&r, f);
    if (st != GEIST_OK) return st;
    st = read_alignment(f, err);
    if (st != GEIST_OK) return st;

    for (uint64_t i = 0; i < f->n_tensors; i++) {
        st = parse_tensor_info(&r, &f->tensors[i], i);
        if (st != GEIST_OK) return st;
    }
    bool dup;
    uint64_t a = 0, b = 0;
    st = find_dup(f->tensors, sizeof(gguf_tensor), offsetof(gguf_tensor, name), f->n_tensors,
                  &dup, &a, &b, err);
    if (st != GEIST_OK) return st;
    if (dup) {
        char nm[GGUF_SHOW_MAX + 8];
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "duplicate tensor name '%s' (tensors #%llu and #%llu)",
                       show(nm, sizeof nm, f->tensors[a].name), (unsigned long long)(a < b ? a : b),
                       (unsigned long long)(a < b ? b : a));
    }

    /* The data section starts at the next multiple of the alignment. */
    uint64_t pad = (f->alignment - r.pos % f->alignment) % f->alignment;
    if (!gt_add_u64(r.pos, pad, &f->data_offset) || f->data_offset > f->size) {
        if (f->n_tensors > 0) {
            return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                           "truncated: data section would start at offset %llu + %llu padding, "
                           "past end of file (size %llu)",
                           (unsigned long long)r.pos, (unsigned long long)pad,
                           (unsigned long long)f->size);
        }
        f->data_offset = f->size; /* no tensors: a missing trailing pad is harmless */
    }
    return check_tensor_data(f, err);
}

geist_status gt_gguf_parse(const uint8_t *base, size_t size, gguf_file *out, gt_err *err) {
    if (!out) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "gguf_parse: out is NULL");
    memset(out, 0, sizeof *out);
    if (!base && size > 0) {
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "gguf_parse: NULL data with size %llu",
                       (unsigned long long)size);
    }
    if (!base) base = (const uint8_t *)""; /* empty span: fails below as truncated */
    gguf_file f;
    memset(&f, 0, sizeof f);
    f.base = base;
    f.size = size;
    geist_status st = parse_all(&f, err);
    if (st != GEIST_OK) {
        gt_gguf_free(&f);
        return st;
    }
    *out = f;
    return GEIST_OK;
}

void gt_gguf_free(gguf_file *f) {
    if (!f) return;
    free(f->kv);
    free(f->tensors);
    memset(f, 0, sizeof *f);
}

uint64_t gt_gguf_owned_bytes(const gguf_file *f) {
    if (!f || (!f->kv && !f->tensors)) return 0;
    /* gt_calloc allocates one byte for an empty table. */
    uint64_t kv = f->n_kv ? f->n_kv * sizeof(gguf_kv) : 1;
    uint64_t t = f->n_tensors ? f->n_tensors * sizeof(gguf_tensor) : 1;
    return kv + t;
}

const gguf_kv *gt_gguf_find_kv(const gguf_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (gt_str_eq(f->kv[i].key, key)) return &f->kv[i];
    }
    return NULL;
}

const gguf_tensor *gt_gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name) return NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        if (gt_str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    }
    return NULL;
}

/* An integer-typed value as a sign + magnitude pair so range checks need no casts. */
static bool kv_int(const gguf_kv *kv, bool *neg, uint64_t *mag) {
    if (vt_is_unsigned(kv->type)) {
        *neg = false;
        *mag = kv->v.u;
        return true;
    }
    if (vt_is_signed(kv->type)) {
        int64_t i = kv->v.i;
        *neg = i < 0;
        *mag = i < 0 ? (uint64_t)(-(i + 1)) + 1 : (uint64_t)i;
        return true;
    }
    return false;
}

bool gt_gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_kv *kv = gt_gguf_find_kv(f, key);
    bool neg;
    uint64_t m;
    if (!kv || !kv_int(kv, &neg, &m) || neg || m > UINT32_MAX) return false;
    if (out) *out = (uint32_t)m;
    return true;
}

bool gt_gguf_get_i32(const gguf_file *f, const char *key, int32_t *out) {
    const gguf_kv *kv = gt_gguf_find_kv(f, key);
    bool neg;
    uint64_t m;
    if (!kv || !kv_int(kv, &neg, &m)) return false;
    if (neg ? m > (uint64_t)INT32_MAX + 1 : m > (uint64_t)INT32_MAX) return false;
    if (out) *out = neg ? (int32_t)(-(int64_t)m) : (int32_t)m;
    return true;
}

bool gt_gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) {
    const gguf_kv *kv = gt_gguf_find_kv(f, key);
    bool neg;
    uint64_t m;
    if (!kv || !kv_int(kv, &neg, &m) || neg) return false;
    if (out) *out = m;
    return true;
}

bool gt_gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gt_gguf_find_kv(f, key);
    if (!kv || !vt_is_float(kv->type)) return false;
    if (out) *out = (float)kv->v.f;
    return true;
}

bool gt_gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = gt_gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_VT_BOOL) return false;
    if (out) *out = kv->v.b;
    return true;
}

bool gt_gguf_get_str(const gguf_file *f, const char *key, gt_str *out) {
    const gguf_kv *kv = gt_gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_VT_STRING) return false;
    if (out) *out = kv->v.s;
    return true;
}

bool gt_gguf_str_array_next(const gguf_kv *kv, uint64_t *cursor, gt_str *out) {
    if (!kv || !cursor || kv->type != GGUF_VT_ARRAY || kv->arr_type != GGUF_VT_STRING) return false;
    /* The cursor is a byte offset into the array payload; re-check it so a stray cursor value
     * cannot read outside the (validated) payload. */
    uint64_t c = *cursor;
    if (c >= kv->arr_bytes || kv->arr_bytes - c < 8) return false;
    uint64_t len = ld_u64(kv->arr_data + c);
    if (len > kv->arr_bytes - c - 8) return false;
    if (out) {
        out->ptr = (const char *)(kv->arr_data + c + 8);
        out->len = len;
    }
    *cursor = c + 8 + len;
    return true;
}

/* Element i of a numeric array; false if out of range or not numeric. */
static bool arr_elem(const gguf_kv *kv, uint64_t i, gguf_kv *val) {
    if (!kv || kv->type != GGUF_VT_ARRAY || i >= kv->arr_len) return false;
    size_t esz = gt_gguf_vtype_size(kv->arr_type);
    if (esz == 0) return false;
    rd r = {kv->arr_data + i * esz, esz, 0, NULL};
    memset(val, 0, sizeof *val);
    val->type = kv->arr_type;
    return rd_scalar(&r, kv->arr_type, val, "array element") == GEIST_OK;
}

double gt_gguf_array_f64(const gguf_kv *kv, uint64_t i) {
    gguf_kv v;
    if (!arr_elem(kv, i, &v)) return 0.0;
    if (vt_is_unsigned(v.type)) return (double)v.v.u;
    if (vt_is_signed(v.type)) return (double)v.v.i;
    if (vt_is_float(v.type)) return v.v.f;
    return v.v.b ? 1.0 : 0.0;
}

int64_t gt_gguf_array_i64(const gguf_kv *kv, uint64_t i) {
    gguf_kv v;
    if (!arr_elem(kv, i, &v)) return 0;
    if (vt_is_unsigned(v.type)) return v.v.u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v.v.u;
    if (vt_is_signed(v.type)) return v.v.i;
    if (vt_is_float(v.type)) {
        double d = v.v.f;
        if (!(d == d)) return 0;
        if (d >= 9223372036854775807.0) return INT64_MAX;
        if (d <= -9223372036854775808.0) return INT64_MIN;
        return (int64_t)d;
    }
    return v.v.b ? 1 : 0;
}
