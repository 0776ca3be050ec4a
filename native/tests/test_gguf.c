/* Tests of the GGUF parser: builds GGUF images in memory, parses valid ones and checks every
 * field and getter, then checks that each kind of corruption fails with the right status and a
 * message that names the problem. Every parse runs on an exact-size heap copy so that a read past
 * the end is caught by AddressSanitizer. Prints one line per failure; returns 0 when all pass. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "util/ggml_types.h"

static int g_failures;
static int g_checks;
static bool g_verbose; /* -v: print every expected error message */

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                 \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------------------------------ */
/* A tiny GGUF writer                                                                         */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            printf("FAIL: test out of memory\n");
            exit(2);
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_le(buf *b, uint64_t v, int bytes) {
    uint8_t tmp[8];
    for (int i = 0; i < bytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    put(b, tmp, (size_t)bytes);
}
static void put_u8(buf *b, uint8_t v) { put_le(b, v, 1); }
static void put_u32(buf *b, uint32_t v) { put_le(b, v, 4); }
static void put_u64(buf *b, uint64_t v) { put_le(b, v, 8); }
static void put_f32(buf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(b, u);
}
static void put_f64(buf *b, double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    put_u64(b, u);
}
static void put_str(buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void patch_u32(buf *b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; i++) b->p[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}
static void patch_u64(buf *b, size_t at, uint64_t v) {
    for (int i = 0; i < 8; i++) b->p[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

/* Starts a key; returns the position of its value-type field. */
static size_t key(buf *b, const char *k, uint32_t vtype) {
    put_str(b, k);
    size_t at = b->n;
    put_u32(b, vtype);
    return at;
}

typedef struct tspec {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[5];
    uint32_t type;
    uint64_t offset;
} tspec;

typedef struct spec {
    char magic[4];
    uint32_t version;
    bool write_align;
    uint32_t align_vtype;
    uint64_t align;
    bool dup_key, empty_key, nested_array;
    size_t n_tensors;
    tspec tensors[4];
    int64_t data_delta; /* added to the data section length the tensors need */
} spec;

/* Positions of fields in the built image, for byte patches. */
typedef struct marks {
    size_t tensor_count, kv_count, arch_len, vtype_u8, bool_val, arr_len, str_arr_len,
        str_elem_len, t0_name, t0_offset, data_start, data_end;
} marks;

static const char *const k_strs[] = {"a", "", "h\xc3\xa9llo", "<|im_start|>"};
static const float k_f32s[] = {0.5f, -2.25f, 3.0f};
static const int32_t k_i32s[] = {1, -2, 3};

static void default_spec(spec *s) {
    memset(s, 0, sizeof *s);
    memcpy(s->magic, "GGUF", 4);
    s->version = 3;
    s->write_align = true;
    s->align_vtype = GGUF_VT_UINT32;
    s->align = 32;
    s->n_tensors = 3;
    s->tensors[0] = (tspec){"token_embd.weight", 2, {4, 3}, GT_TYPE_F32, 0};
    s->tensors[1] = (tspec){"blk.0.attn_q.weight", 2, {64, 2}, GT_TYPE_Q4_0, 64};
    s->tensors[2] = (tspec){"blk.0.attn_norm.weight", 1, {8}, GT_TYPE_F16, 160};
}

/* Bytes a tensor spec needs, from the format's block geometry (0 if unknown/invalid). */
static uint64_t spec_nbytes(const tspec *t) {
    const gt_type_info *ti = gt_type_get(t->type);
    if (!ti || t->n_dims < 1 || t->n_dims > 4) return 0;
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (__builtin_mul_overflow(n, t->ne[d], &n)) return 0;
    }
    return n / ti->block * ti->bytes;
}

static uint32_t g_rng = 12345u;
static uint32_t rnd(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return g_rng >> 8;
}

static void build(const spec *s, buf *b, marks *m) {
    memset(b, 0, sizeof *b);
    memset(m, 0, sizeof *m);
    put(b, s->magic, 4);
    put_u32(b, s->version);
    m->tensor_count = b->n;
    put_u64(b, s->n_tensors);
    m->kv_count = b->n;
    put_u64(b, 0); /* patched below */
    uint64_t n_kv = 0;

    key(b, "general.architecture", GGUF_VT_STRING);
    m->arch_len = b->n;
    put_str(b, "llama");
    n_kv++;
    if (s->write_align) {
        key(b, "general.alignment", s->align_vtype);
        switch (s->align_vtype) {
        case GGUF_VT_UINT8: put_u8(b, (uint8_t)s->align); break;
        case GGUF_VT_UINT16: put_le(b, s->align, 2); break;
        case GGUF_VT_UINT64: put_u64(b, s->align); break;
        case GGUF_VT_STRING: put_str(b, "32"); break;
        default: put_u32(b, (uint32_t)s->align); break;
        }
        n_kv++;
    }
    m->vtype_u8 = key(b, "t.u8", GGUF_VT_UINT8);
    put_u8(b, 200);
    key(b, "t.i8", GGUF_VT_INT8);
    put_u8(b, (uint8_t)(int8_t)-100);
    key(b, "t.u16", GGUF_VT_UINT16);
    put_le(b, 60000, 2);
    key(b, "t.i16", GGUF_VT_INT16);
    put_le(b, (uint16_t)(int16_t)-30000, 2);
    key(b, "t.u32", GGUF_VT_UINT32);
    put_u32(b, 4000000000u);
    key(b, "t.i32", GGUF_VT_INT32);
    put_u32(b, (uint32_t)(int32_t)-2000000000);
    key(b, "t.f32", GGUF_VT_FLOAT32);
    put_f32(b, 1.5f);
    key(b, "t.bool", GGUF_VT_BOOL);
    m->bool_val = b->n;
    put_u8(b, 1);
    key(b, "t.u64", GGUF_VT_UINT64);
    put_u64(b, ((uint64_t)1 << 40) + 3);
    key(b, "t.i64", GGUF_VT_INT64);
    put_u64(b, (uint64_t)(-((int64_t)1 << 40)));
    key(b, "t.f64", GGUF_VT_FLOAT64);
    put_f64(b, 0.1);
    n_kv += 11;

    key(b, "t.strs", GGUF_VT_ARRAY);
    put_u32(b, GGUF_VT_STRING);
    m->str_arr_len = b->n;
    put_u64(b, 4);
    for (int i = 0; i < 4; i++) {
        if (i == 2) m->str_elem_len = b->n;
        put_str(b, k_strs[i]);
    }
    key(b, "t.f32s", GGUF_VT_ARRAY);
    put_u32(b, GGUF_VT_FLOAT32);
    m->arr_len = b->n;
    put_u64(b, 3);
    for (int i = 0; i < 3; i++) put_f32(b, k_f32s[i]);
    key(b, "t.i32s", GGUF_VT_ARRAY);
    put_u32(b, GGUF_VT_INT32);
    put_u64(b, 3);
    for (int i = 0; i < 3; i++) put_u32(b, (uint32_t)k_i32s[i]);
    key(b, "t.empty", GGUF_VT_ARRAY);
    put_u32(b, GGUF_VT_UINT8);
    put_u64(b, 0);
    key(b, "t.bools", GGUF_VT_ARRAY);
    put_u32(b, GGUF_VT_BOOL);
    put_u64(b, 3);
    put_u8(b, 1);
    put_u8(b, 0);
    put_u8(b, 1);
    n_kv += 5;
    if (s->nested_array) {
        key(b, "t.nested", GGUF_VT_ARRAY);
        put_u32(b, GGUF_VT_ARRAY);
        put_u64(b, 1);
        put_u32(b, GGUF_VT_UINT8);
        put_u64(b, 1);
        put_u8(b, 7);
        n_kv++;
    }
    if (s->dup_key) {
        key(b, "t.u16", GGUF_VT_UINT8);
        put_u8(b, 1);
        n_kv++;
    }
    if (s->empty_key) {
        key(b, "", GGUF_VT_UINT8);
        put_u8(b, 1);
        n_kv++;
    }
    patch_u64(b, m->kv_count, n_kv);

    uint64_t need = 0;
    for (size_t i = 0; i < s->n_tensors; i++) {
        const tspec *t = &s->tensors[i];
        if (i == 0) m->t0_name = b->n;
        put_str(b, t->name);
        put_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && d < 5; d++) put_u64(b, t->ne[d]);
        put_u32(b, t->type);
        if (i == 0) m->t0_offset = b->n;
        put_u64(b, t->offset);
        uint64_t end = t->offset + spec_nbytes(t);
        if (end > need && end < ((uint64_t)1 << 20)) need = end;
    }
    uint64_t align = (s->write_align && s->align && s->align < 4096) ? s->align : 32;
    while (b->n % align) put_u8(b, 0);
    m->data_start = b->n;
    int64_t len = (int64_t)need + s->data_delta;
    for (int64_t i = 0; i < len; i++) put_u8(b, (uint8_t)(rnd() | 1u)); /* never all-zero data */
    m->data_end = b->n;
}

/* ------------------------------------------------------------------------------------------ */
/* Parsing helpers                                                                            */

/* A heap copy of exactly n bytes (plus `shift` leading bytes to misalign it). */
typedef struct copy {
    uint8_t *alloc;
    const uint8_t *data;
} copy;

static copy make_copy(const uint8_t *src, size_t n, size_t shift) {
    copy c;
    c.alloc = malloc(n + shift ? n + shift : 1);
    if (!c.alloc) {
        printf("FAIL: test out of memory\n");
        exit(2);
    }
    if (n) memcpy(c.alloc + shift, src, n);
    c.data = c.alloc + shift;
    return c;
}

static bool all_zero(const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        if (b[i]) return false;
    }
    return true;
}

/* Parses the first n bytes of b; expects `want` and a message containing `word`. */
static void expect_fail_n(const buf *b, size_t n, geist_status want, const char *word,
                          const char *label) {
    copy c = make_copy(b->p, n, 0);
    gguf_file f;
    memset(&f, 0xab, sizeof f);
    gt_err err;
    memset(&err, 0, sizeof err);
    geist_status st = gt_gguf_parse(c.data, n, &f, &err);
    g_checks++;
    if (st != want || err.status != want || !strstr(err.msg, word) || !all_zero(&f, sizeof f)) {
        printf("FAIL %s: status %d (want %d), message \"%s\" (want \"%s\")%s\n", label, (int)st,
               (int)want, err.msg, word, all_zero(&f, sizeof f) ? "" : ", out not zeroed");
        g_failures++;
    }
    if (g_verbose) printf("  %-28s -> %s\n", label, err.msg);
    if (st == GEIST_OK) gt_gguf_free(&f);
    free(c.alloc);
}

static void expect_fail(const buf *b, geist_status want, const char *word, const char *label) {
    expect_fail_n(b, b->n, want, word, label);
}

static void expect_spec_fail(const spec *s, geist_status want, const char *word,
                             const char *label) {
    buf b;
    marks m;
    build(s, &b, &m);
    expect_fail(&b, want, word, label);
    free(b.p);
}

static bool str_is(gt_str s, const char *want, size_t want_len) {
    return s.len == want_len && (want_len == 0 || memcmp(s.ptr, want, want_len) == 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Tests                                                                                      */

static void test_valid(size_t shift) {
    spec s;
    default_spec(&s);
    buf b;
    marks m;
    build(&s, &b, &m);
    copy c = make_copy(b.p, b.n, shift);
    gguf_file f;
    gt_err err = {0};
    geist_status st = gt_gguf_parse(c.data, b.n, &f, &err);
    CHECK(st == GEIST_OK);
    if (st != GEIST_OK) {
        printf("  valid file failed: %s\n", err.msg);
        free(c.alloc);
        free(b.p);
        return;
    }
    CHECK(f.base == c.data && f.size == b.n);
    CHECK(f.version == 3);
    CHECK(f.alignment == 32);
    CHECK(f.n_kv == 18);
    CHECK(f.n_tensors == 3);
    CHECK(f.data_offset == m.data_start);
    CHECK(gt_gguf_owned_bytes(&f) == 18 * sizeof(gguf_kv) + 3 * sizeof(gguf_tensor));

    gt_str sv;
    CHECK(gt_gguf_get_str(&f, "general.architecture", &sv) && gt_str_eq(sv, "llama"));
    CHECK(!gt_str_eq(sv, "llam") && !gt_str_eq(sv, "llamas") && !gt_str_eq(sv, NULL));
    CHECK(!gt_gguf_get_str(&f, "t.u8", &sv));
    CHECK(!gt_gguf_get_str(&f, "no.such.key", &sv));
    CHECK(gt_gguf_find_kv(&f, "no.such.key") == NULL);
    CHECK(gt_gguf_find_kv(&f, "t") == NULL);

    uint32_t u32 = 0;
    int32_t i32 = 0;
    uint64_t u64 = 0;
    float f32 = 0;
    bool bv = false;
    CHECK(gt_gguf_get_u32(&f, "t.u8", &u32) && u32 == 200);
    CHECK(gt_gguf_get_u32(&f, "t.u16", &u32) && u32 == 60000);
    CHECK(gt_gguf_get_u32(&f, "t.u32", &u32) && u32 == 4000000000u);
    CHECK(!gt_gguf_get_u32(&f, "t.i8", &u32));  /* negative */
    CHECK(!gt_gguf_get_u32(&f, "t.u64", &u32)); /* out of range */
    CHECK(!gt_gguf_get_u32(&f, "t.f32", &u32)); /* not an integer type */
    CHECK(!gt_gguf_get_u32(&f, "t.bool", &u32));
    CHECK(gt_gguf_get_u32(&f, "general.alignment", &u32) && u32 == 32);
    CHECK(gt_gguf_get_i32(&f, "t.i8", &i32) && i32 == -100);
    CHECK(gt_gguf_get_i32(&f, "t.i16", &i32) && i32 == -30000);
    CHECK(gt_gguf_get_i32(&f, "t.i32", &i32) && i32 == -2000000000);
    CHECK(gt_gguf_get_i32(&f, "t.u16", &i32) && i32 == 60000);
    CHECK(!gt_gguf_get_i32(&f, "t.u32", &i32)); /* 4e9 > INT32_MAX */
    CHECK(!gt_gguf_get_i32(&f, "t.i64", &i32)); /* -2^40 */
    CHECK(gt_gguf_get_u64(&f, "t.u64", &u64) && u64 == ((uint64_t)1 << 40) + 3);
    CHECK(gt_gguf_get_u64(&f, "t.u8", &u64) && u64 == 200);
    CHECK(!gt_gguf_get_u64(&f, "t.i64", &u64));
    CHECK(gt_gguf_get_f32(&f, "t.f32", &f32) && f32 == 1.5f);
    CHECK(gt_gguf_get_f32(&f, "t.f64", &f32) && f32 == (float)0.1);
    CHECK(!gt_gguf_get_f32(&f, "t.u32", &f32));
    CHECK(gt_gguf_get_bool(&f, "t.bool", &bv) && bv);
    CHECK(!gt_gguf_get_bool(&f, "t.u8", &bv));
    const gguf_kv *kv = gt_gguf_find_kv(&f, "t.f64");
    CHECK(kv && kv->type == GGUF_VT_FLOAT64 && kv->v.f == 0.1);
    kv = gt_gguf_find_kv(&f, "t.i64");
    CHECK(kv && kv->type == GGUF_VT_INT64 && kv->v.i == -((int64_t)1 << 40));

    kv = gt_gguf_find_kv(&f, "t.strs");
    CHECK(kv && kv->type == GGUF_VT_ARRAY && kv->arr_type == GGUF_VT_STRING && kv->arr_len == 4);
    if (kv) {
        uint64_t cur = 0;
        int n = 0;
        gt_str e;
        while (gt_gguf_str_array_next(kv, &cur, &e)) {
            if (n < 4) CHECK(str_is(e, k_strs[n], strlen(k_strs[n])));
            n++;
        }
        CHECK(n == 4);
        CHECK(cur == kv->arr_bytes);
        CHECK(!gt_gguf_str_array_next(kv, &cur, &e)); /* stays at the end */
        uint64_t bad = kv->arr_bytes + 100;
        CHECK(!gt_gguf_str_array_next(kv, &bad, &e)); /* stray cursor refused */
    }
    kv = gt_gguf_find_kv(&f, "t.f32s");
    CHECK(kv && kv->arr_type == GGUF_VT_FLOAT32 && kv->arr_len == 3 && kv->arr_bytes == 12);
    if (kv) {
        for (uint64_t i = 0; i < 3; i++) CHECK(gt_gguf_array_f64(kv, i) == (double)k_f32s[i]);
        CHECK(gt_gguf_array_i64(kv, 1) == -2);
        CHECK(gt_gguf_array_f64(kv, 3) == 0.0); /* out of range */
        uint64_t cur = 0;
        gt_str e;
        CHECK(!gt_gguf_str_array_next(kv, &cur, &e)); /* not a string array */
    }
    kv = gt_gguf_find_kv(&f, "t.i32s");
    CHECK(kv && kv->arr_type == GGUF_VT_INT32 && kv->arr_len == 3);
    if (kv) {
        for (uint64_t i = 0; i < 3; i++) {
            CHECK(gt_gguf_array_i64(kv, i) == k_i32s[i]);
            CHECK(gt_gguf_array_f64(kv, i) == (double)k_i32s[i]);
        }
    }
    kv = gt_gguf_find_kv(&f, "t.empty");
    CHECK(kv && kv->arr_type == GGUF_VT_UINT8 && kv->arr_len == 0 && kv->arr_bytes == 0);
    kv = gt_gguf_find_kv(&f, "t.bools");
    CHECK(kv && kv->arr_type == GGUF_VT_BOOL && kv->arr_len == 3);
    if (kv) {
        CHECK(gt_gguf_array_i64(kv, 0) == 1 && gt_gguf_array_i64(kv, 1) == 0);
        CHECK(gt_gguf_array_f64(kv, 2) == 1.0);
    }

    static const uint64_t want_bytes[3] = {48, 72, 16};
    static const uint64_t want_elems[3] = {12, 128, 8};
    for (size_t i = 0; i < 3; i++) {
        const tspec *ts = &s.tensors[i];
        const gguf_tensor *t = gt_gguf_find_tensor(&f, ts->name);
        CHECK(t == &f.tensors[i]);
        if (!t) continue;
        CHECK(gt_str_eq(t->name, ts->name));
        CHECK(t->n_dims == ts->n_dims && t->type == ts->type && t->offset == ts->offset);
        for (uint32_t d = 0; d < 4; d++) CHECK(t->ne[d] == (d < ts->n_dims ? ts->ne[d] : 1));
        CHECK(t->nbytes == want_bytes[i] && t->nelements == want_elems[i]);
        CHECK(t->data == c.data + m.data_start + ts->offset);
        CHECK(memcmp(t->data, b.p + m.data_start + ts->offset, t->nbytes) == 0);
    }
    CHECK(gt_gguf_find_tensor(&f, "missing") == NULL);
    gt_gguf_free(&f);
    CHECK(f.kv == NULL && f.tensors == NULL && f.n_kv == 0);
    gt_gguf_free(&f); /* twice is harmless */
    gt_gguf_free(NULL);
    free(c.alloc);
    free(b.p);
}

static void test_misc_api(void) {
    CHECK(gt_gguf_vtype_size(GGUF_VT_UINT8) == 1 && gt_gguf_vtype_size(GGUF_VT_BOOL) == 1);
    CHECK(gt_gguf_vtype_size(GGUF_VT_INT16) == 2 && gt_gguf_vtype_size(GGUF_VT_FLOAT32) == 4);
    CHECK(gt_gguf_vtype_size(GGUF_VT_FLOAT64) == 8 && gt_gguf_vtype_size(GGUF_VT_INT64) == 8);
    CHECK(gt_gguf_vtype_size(GGUF_VT_STRING) == 0 && gt_gguf_vtype_size(GGUF_VT_ARRAY) == 0);
    CHECK(gt_gguf_vtype_size(99) == 0);
    CHECK(strcmp(gt_gguf_vtype_name(GGUF_VT_STRING), "string") == 0);
    CHECK(strcmp(gt_gguf_vtype_name(GGUF_VT_FLOAT64), "float64") == 0);
    CHECK(strcmp(gt_gguf_vtype_name(1000), "unknown") == 0);
    gt_str e = {"", 0};
    CHECK(gt_str_eq(e, "") && !gt_str_eq(e, "x"));
    CHECK(gt_gguf_owned_bytes(NULL) == 0);
    CHECK(gt_gguf_find_kv(NULL, "x") == NULL && gt_gguf_find_tensor(NULL, "x") == NULL);

    gt_err err = {0};
    gguf_file f;
    CHECK(gt_gguf_parse((const uint8_t *)"GGUF", 4, NULL, &err) == GEIST_ERR_INVALID_ARGUMENT);
    CHECK(gt_gguf_parse(NULL, 10, &f, &err) == GEIST_ERR_INVALID_ARGUMENT && all_zero(&f, sizeof f));
    CHECK(gt_gguf_parse(NULL, 0, &f, &err) == GEIST_ERR_BAD_FORMAT);
    CHECK(gt_gguf_parse(NULL, 0, &f, NULL) == GEIST_ERR_BAD_FORMAT); /* err is optional */

    /* The smallest valid file: no metadata, no tensors. */
    buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 2);
    put_u64(&b, 0);
    put_u64(&b, 0);
    copy c = make_copy(b.p, b.n, 0);
    CHECK(gt_gguf_parse(c.data, b.n, &f, &err) == GEIST_OK);
    CHECK(f.n_kv == 0 && f.n_tensors == 0 && f.version == 2 && f.alignment == 32);
    CHECK(gt_gguf_find_kv(&f, "general.architecture") == NULL);
    gt_gguf_free(&f);
    free(c.alloc);
    free(b.p);
}

static void test_truncations(void) {
    spec s;
    default_spec(&s);
    buf b;
    marks m;
    build(&s, &b, &m);
    for (size_t cut = 0; cut < b.n; cut++) {
        copy c = make_copy(b.p, cut, 0);
        gguf_file f;
        gt_err err = {0};
        geist_status st = gt_gguf_parse(cut ? c.data : NULL, cut, &f, &err);
        g_checks++;
        bool telling = strstr(err.msg, "truncated") || strstr(err.msg, "exceeds") ||
                       strstr(err.msg, "past end");
        if (st != GEIST_ERR_BAD_FORMAT || !telling || !all_zero(&f, sizeof f)) {
            printf("FAIL truncated at %zu of %zu: status %d, message \"%s\"\n", cut, b.n, (int)st,
                   err.msg);
            g_failures++;
        }
        if (st == GEIST_OK) gt_gguf_free(&f);
        free(c.alloc);
    }
    free(b.p);
}

static void test_header_errors(void) {
    spec s;
    buf b;
    marks m;

    default_spec(&s);
    memcpy(s.magic, "GGUG", 4);
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "magic", "wrong magic");
    default_spec(&s);
    s.version = 1;
    expect_spec_fail(&s, GEIST_ERR_UNSUPPORTED, "version 1", "version 1");
    s.version = 4;
    expect_spec_fail(&s, GEIST_ERR_UNSUPPORTED, "version 4", "version 4");
    s.version = 0x03000000u;
    expect_spec_fail(&s, GEIST_ERR_UNSUPPORTED, "big-endian", "big-endian version");

    default_spec(&s);
    build(&s, &b, &m);
    patch_u64(&b, m.tensor_count, (uint64_t)1 << 63);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "tensor count 9223372036854775808", "tensor count 2^63");
    patch_u64(&b, m.tensor_count, UINT64_MAX);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "tensor count", "tensor count 2^64-1");
    patch_u64(&b, m.tensor_count, 4); /* one more than there is: runs into the data section */
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "tensor #3", "tensor count off by one");
    patch_u64(&b, m.tensor_count, 3);
    patch_u64(&b, m.kv_count, (uint64_t)1 << 63);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "key count 9223372036854775808", "kv count 2^63");
    free(b.p);
}

static void test_metadata_errors(void) {
    spec s;
    buf b;
    marks m;
    default_spec(&s);
    build(&s, &b, &m);
    buf orig = b;
    orig.p = malloc(b.n);
    memcpy(orig.p, b.p, b.n);
#define RESET() memcpy(b.p, orig.p, b.n)

    patch_u64(&b, m.arch_len, (uint64_t)1 << 63);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "string length 9223372036854775808 exceeds",
                "string length 2^63");
    RESET();
    patch_u64(&b, m.arch_len, UINT64_MAX);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "exceeds", "string length 2^64-1");
    RESET();
    patch_u64(&b, m.arr_len, (uint64_t)1 << 63);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "array length 9223372036854775808",
                "array length 2^63");
    RESET();
    patch_u64(&b, m.arr_len, (uint64_t)1 << 62); /* * 4 bytes would wrap to 0 */
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "array length", "array length 2^62 (wraps)");
    RESET();
    patch_u32(&b, m.arr_len - 4, 13); /* the array's element type */
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "unknown array element type 13", "array element type");
    RESET();
    patch_u64(&b, m.str_arr_len, (uint64_t)1 << 63);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "array length", "string array length 2^63");
    RESET();
    patch_u64(&b, m.str_elem_len, (uint64_t)1 << 63);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "element 2: string length", "string element 2^63");
    RESET();
    patch_u32(&b, m.vtype_u8, 13);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "unknown value type 13", "value type 13");
    RESET();
    patch_u32(&b, m.vtype_u8, 0xffffffffu);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "'t.u8': unknown value type", "value type 2^32-1");
    RESET();
    b.p[m.bool_val] = 2;
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "bool", "bool value 2");
    RESET();
#undef RESET
    free(orig.p);
    free(b.p);

    default_spec(&s);
    s.dup_key = true;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "duplicate metadata key 't.u16'", "duplicate key");
    default_spec(&s);
    s.empty_key = true;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "empty key", "empty key");
    default_spec(&s);
    s.nested_array = true;
    expect_spec_fail(&s, GEIST_ERR_UNSUPPORTED, "arrays of arrays", "array of arrays");

    default_spec(&s);
    s.align = 0;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "alignment 0", "alignment 0");
    s.align = 3;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "alignment 3", "alignment 3");
    s.align = 48;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "power of two", "alignment 48");
    s.align_vtype = GGUF_VT_STRING;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "general.alignment has type string",
                     "alignment as a string");
}

static void test_alignment_variants(void) {
    static const struct {
        uint32_t vtype;
        uint64_t align;
        bool write;
    } cases[] = {{GGUF_VT_UINT8, 16, true},
                 {GGUF_VT_UINT16, 64, true},
                 {GGUF_VT_UINT64, 256, true},
                 {GGUF_VT_UINT32, 32, false}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        spec s;
        default_spec(&s);
        s.write_align = cases[k].write;
        s.align_vtype = cases[k].vtype;
        s.align = cases[k].align;
        s.tensors[1].offset = 256;
        s.tensors[2].offset = 512;
        buf b;
        marks m;
        build(&s, &b, &m);
        copy c = make_copy(b.p, b.n, 3);
        gguf_file f;
        gt_err err = {0};
        geist_status st = gt_gguf_parse(c.data, b.n, &f, &err);
        CHECK(st == GEIST_OK);
        if (st == GEIST_OK) {
            CHECK(f.alignment == cases[k].align);
            CHECK(f.data_offset % cases[k].align == 0 && f.data_offset == m.data_start);
            CHECK(f.tensors[2].data == c.data + m.data_start + 512);
            gt_gguf_free(&f);
        } else {
            printf("  alignment case %zu: %s\n", k, err.msg);
        }
        free(c.alloc);
        free(b.p);
    }
}

static void test_tensor_errors(void) {
    spec s;
    default_spec(&s);
    s.tensors[1].type = 200;
    expect_spec_fail(&s, GEIST_ERR_UNSUPPORTED,
                     "tensor 'blk.0.attn_q.weight': unknown tensor type id 200", "tensor type 200");
    default_spec(&s);
    s.tensors[1].type = 4; /* a retired id (Q4_2) */
    expect_spec_fail(&s, GEIST_ERR_UNSUPPORTED, "type id 4", "tensor type 4");

    default_spec(&s);
    s.tensors[0].n_dims = 0;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "0 dimensions", "n_dims 0");
    default_spec(&s);
    s.tensors[0] = (tspec){"token_embd.weight", 5, {4, 3, 1, 1, 1}, GT_TYPE_F32, 0};
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "5 dimensions", "n_dims 5");
    default_spec(&s);
    s.tensors[0].ne[1] = 0;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "dimension 1 is 0", "dim 0");
    default_spec(&s);
    s.tensors[0].ne[0] = (uint64_t)1 << 32;
    s.tensors[0].ne[1] = (uint64_t)1 << 32;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "element count overflows", "product overflow");
    s.tensors[0].ne[1] = (uint64_t)1 << 31; /* 2^63 elements: past int64 */
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "element count overflows", "product 2^63");
    default_spec(&s);
    s.tensors[0].ne[0] = (uint64_t)1 << 61; /* 2^61 F32 elements = 2^63 bytes: fits, past end */
    s.tensors[0].ne[1] = 1;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "past end", "2^63 bytes");
    default_spec(&s);
    s.tensors[0] = (tspec){"token_embd.weight", 4, {1u << 16, 1u << 16, 1u << 16, 1u << 15},
                           GT_TYPE_F32, 0};
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "overflow", "4-d product 2^63");
    default_spec(&s);
    s.tensors[1].ne[0] = 33;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "not a multiple of the Q4_0 block size 32",
                     "ne[0] not a block multiple");

    default_spec(&s);
    s.tensors[1].offset = 65;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "offset 65 is not aligned", "unaligned offset");
    default_spec(&s);
    s.data_delta = -1;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "'blk.0.attn_norm.weight': data range",
                     "data one byte short");
    default_spec(&s);
    s.tensors[0].offset = UINT64_MAX - 31; /* aligned; start wraps */
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "past end of file", "offset near 2^64");
    default_spec(&s);
    s.tensors[0].offset = (uint64_t)1 << 40;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "past end of file", "offset 2^40");
    default_spec(&s);
    s.tensors[1].offset = 32; /* tensor 0 is [0, 48) */
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "overlap", "overlapping tensors");
    default_spec(&s);
    s.tensors[2].offset = 64; /* same start as tensor 1 */
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "overlap", "tensors at the same offset");
    default_spec(&s);
    s.tensors[2].name = "token_embd.weight";
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "duplicate tensor name 'token_embd.weight'",
                     "duplicate tensor name");

    /* A type geist cannot compute with still parses; the model layer rejects it later. */
    default_spec(&s);
    s.tensors[1] = (tspec){"blk.0.ffn.weight", 2, {256, 2}, GT_TYPE_Q2_K, 64};
    s.tensors[2].offset = 256;
    buf b;
    marks m;
    build(&s, &b, &m);
    copy c = make_copy(b.p, b.n, 0);
    gguf_file f;
    gt_err err = {0};
    CHECK(gt_gguf_parse(c.data, b.n, &f, &err) == GEIST_OK);
    if (f.tensors) {
        CHECK(f.tensors[1].type == GT_TYPE_Q2_K && f.tensors[1].nbytes == 2 * 84);
    }
    gt_gguf_free(&f);
    free(c.alloc);
    free(b.p);
}

/* The classes of llama.cpp's public GGUF loader bug history that the tests above do not already
 * hold, one case each, with the error each must give (issue 20, item 4): counts and lengths just
 * past 2^32 (what a 32-bit truncation would turn back into a valid value), "negative" lengths
 * (2^64 - 1), huge alignments and the padding they ask for, tensor byte sizes that wrap past 2^64,
 * n_dims far past 4, a zero first dimension, tensor names of hostile lengths, a known key of the
 * wrong type. */
static void test_bug_history(void) {
    spec s;
    buf b;
    marks m;
    default_spec(&s);
    build(&s, &b, &m);
    buf orig = b;
    orig.p = malloc(b.n);
    if (!orig.p) exit(2);
    memcpy(orig.p, b.p, b.n);
#define RESET() memcpy(b.p, orig.p, b.n)
    const uint64_t p32 = (uint64_t)1 << 32;
    /* counts near 2^32: 2^32 + 3 tensors would truncate to the 3 there are */
    patch_u64(&b, m.tensor_count, p32 + 3);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "tensor count 4294967299", "tensor count 2^32+3");
    RESET();
    patch_u64(&b, m.tensor_count, p32);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "tensor count 4294967296", "tensor count 2^32");
    RESET();
    patch_u64(&b, m.kv_count, p32 + 18); /* 18 keys here */
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "key count 4294967314", "kv count 2^32+18");
    RESET();
    patch_u64(&b, m.kv_count, UINT64_MAX);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "key count", "kv count 2^64-1");
    RESET();
    /* string lengths: 2^32 + 5 truncates to "llama"'s 5; 2^64 - 1 is -1 as a signed length */
    patch_u64(&b, m.arch_len, p32 + 5);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "string length 4294967301 exceeds", "string 2^32+5");
    RESET();
    patch_u64(&b, m.arch_len, p32 - 1);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "string length 4294967295 exceeds", "string 2^32-1");
    RESET();
    patch_u64(&b, m.str_elem_len, UINT64_MAX); /* a token-like string element of length -1 */
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "element 2: string length", "string element -1");
    RESET();
    patch_u64(&b, m.str_elem_len, p32 + 6); /* "h\xc3\xa9llo" is 6 bytes */
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "element 2: string length 4294967302",
                "string element 2^32+6");
    RESET();
    /* array lengths: 2^32 + 3 floats; 2^32 + 4 strings; 2^63 + 3 (x 4 bytes wraps to 12) */
    patch_u64(&b, m.arr_len, p32 + 3);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "array length 4294967299", "array length 2^32+3");
    RESET();
    patch_u64(&b, m.str_arr_len, p32 + 4);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "array length 4294967300", "string array 2^32+4");
    RESET();
    patch_u64(&b, m.arr_len, ((uint64_t)1 << 62) + 3); /* * 4 bytes = 2^64 + 12: wraps to 12 */
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "array length", "array bytes wrap to 12");
    RESET();
    /* tensor names of hostile lengths */
    patch_u64(&b, m.t0_name, (uint64_t)1 << 63);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "string length 9223372036854775808",
                "tensor name 2^63");
    RESET();
    patch_u64(&b, m.t0_name, p32 + 17); /* "token_embd.weight" is 17 bytes */
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "string length 4294967313", "tensor name 2^32+17");
    RESET();
    patch_u64(&b, m.t0_name, UINT64_MAX);
    expect_fail(&b, GEIST_ERR_BAD_FORMAT, "exceeds", "tensor name -1");
#undef RESET
    free(orig.p);
    free(b.p);

    /* huge alignments: powers of two, so only the padding they ask for can refuse them */
    default_spec(&s);
    s.align_vtype = GGUF_VT_UINT64;
    s.align = (uint64_t)1 << 63;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "past end of file", "alignment 2^63");
    s.align = p32;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "past end of file", "alignment 2^32");
    s.align = UINT64_MAX;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "not a non-zero power of two", "alignment 2^64-1");
    s.align = ((uint64_t)1 << 63) + 32;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "not a non-zero power of two", "alignment 2^63+32");
    default_spec(&s);
    s.align = (uint64_t)1 << 31; /* uint32 */
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "past end of file", "alignment 2^31");
    /* general.alignment of a signed or float type (a known key of the wrong type) */
    static const uint32_t wrong[] = {GGUF_VT_INT32, GGUF_VT_FLOAT32}; /* 4 bytes: build() */
    for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++) {
        default_spec(&s);
        s.align_vtype = wrong[i];
        s.align = 32;
        expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "expected an unsigned integer",
                         "alignment of a signed/float type");
    }

    /* tensor byte sizes past 2^64: 2^62 F32 elements are 2^64 bytes (wraps to 0); 2^62 + 8 of
     * them wrap to 32, a size that would fit the file */
    default_spec(&s);
    s.tensors[0] = (tspec){"token_embd.weight", 1, {(uint64_t)1 << 62}, GT_TYPE_F32, 0};
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "byte size overflows", "F32 bytes wrap to 0");
    s.tensors[0].ne[0] = ((uint64_t)1 << 62) + 8;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "byte size overflows", "F32 bytes wrap to 32");
    s.tensors[0] = (tspec){"token_embd.weight", 2, {2, ((uint64_t)1 << 61) + 4}, GT_TYPE_F32, 0};
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "byte size overflows", "2-d F32 bytes wrap");
    /* n_dims far past 4 (only 5 dims are written: the count alone must refuse it) */
    default_spec(&s);
    s.tensors[0].n_dims = UINT32_MAX;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "4294967295 dimensions", "n_dims 2^32-1");
    s.tensors[0].n_dims = 0x80000000u; /* negative as an int32 */
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "2147483648 dimensions", "n_dims 2^31");
    /* a zero first dimension (the row length) */
    default_spec(&s);
    s.tensors[2].ne[0] = 0;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "dimension 0 is 0", "ne[0] 0");
    /* the last dimension of 4 is 0 */
    default_spec(&s);
    s.tensors[0] = (tspec){"token_embd.weight", 4, {4, 3, 1, 0}, GT_TYPE_F32, 0};
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "dimension 3 is 0", "ne[3] 0");
    /* a tensor past the end by its size only: offset fine, the bytes run past the data */
    default_spec(&s);
    s.tensors[2].ne[0] = 8 + 16; /* 48 bytes instead of 16 at offset 160 */
    s.data_delta = -32;
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "past end of file", "tensor bytes past the end");
    /* duplicate names among more tensors */
    default_spec(&s);
    s.tensors[1].name = "blk.0.attn_norm.weight";
    expect_spec_fail(&s, GEIST_ERR_BAD_FORMAT, "duplicate tensor name 'blk.0.attn_norm.weight'",
                     "duplicate tensor name (1, 2)");
}

/* Random byte corruption of a valid file: every outcome is fine except a crash, a sanitizer
 * report, or a success whose tensors are not inside the span. */
static void test_random_corruption(void) {
    spec s;
    default_spec(&s);
    buf b;
    marks m;
    build(&s, &b, &m);
    size_t header_end = m.data_start; /* corrupting tensor data only is uninteresting */
    int ok = 0;
    for (int iter = 0; iter < 20000; iter++) {
        copy c = make_copy(b.p, b.n, (size_t)(iter & 1));
        int flips = 1 + (int)(rnd() % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = rnd() % header_end;
            uint32_t r = rnd();
            /* Mostly small values and 0xff runs: they hit counts, lengths and types. */
            c.alloc[(size_t)(iter & 1) + at] = (r & 3) == 0 ? 0xff : (uint8_t)(r >> 8);
        }
        size_t n = (rnd() % 8 == 0) ? rnd() % b.n : b.n;
        gguf_file f;
        gt_err err = {0};
        geist_status st = gt_gguf_parse(c.data, n, &f, &err);
        if (st == GEIST_OK) {
            ok++;
            for (uint64_t i = 0; i < f.n_tensors; i++) {
                const gguf_tensor *t = &f.tensors[i];
                CHECK(t->data >= c.data && t->data + t->nbytes <= c.data + n);
            }
            gt_gguf_free(&f);
        } else {
            CHECK(err.msg[0] != '\0' && all_zero(&f, sizeof f));
        }
        free(c.alloc);
    }
    if (g_verbose) printf("  random corruption: %d of 20000 still parsed\n", ok);
    free(b.p);
}

int main(int argc, char **argv) {
    g_verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    test_misc_api();
    test_valid(0);
    test_valid(1); /* misaligned span: all reads must go through memcpy */
    test_valid(7);
    test_truncations();
    test_header_errors();
    test_metadata_errors();
    test_alignment_variants();
    test_tensor_errors();
    test_bug_history();
    test_random_corruption();
    if (g_failures) {
        printf("test_gguf: %d of %d checks failed\n", g_failures, g_checks);
        return 1;
    }
    printf("test_gguf: all %d checks passed\n", g_checks);
    return 0;
}
