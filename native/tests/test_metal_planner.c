/* The Metal buffer planner (backend/metal/planner.c), portable C run on every platform: NoCopy
 * views over the weight span (page-aligned down, lengths rounded up to the page, overlapping views
 * when the span exceeds maxBufferLength with the overlap sized by the largest tensor), each
 * tensor's (view, offset), copies counted for what cannot be wrapped, and clear errors for hostile
 * input (sizes and addresses near UINT64_MAX, pages that are not powers of two, tensors outside
 * the span or larger than maxBufferLength). The planner never touches the span's memory, so the
 * synthetic spans here are addresses only (up to 4.64 GiB, none allocated); two real fixture
 * files (tests/fuzz/corpus/gguf/, paths relative to the repository root, or argv[1], argv[2])
 * are planned as metal.m plans them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/metal/planner.h"
#include "gguf/gguf.h"
#include "util/platform.h"

#include "check.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) { /* xorshift64*: deterministic tensor tables */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* Every invariant a plan must keep; returns the number of failed checks. */
static int check_plan(const gt_mtl_plan_in *in, const gt_mtl_plan *p) {
    const int before = fails;
    const uint64_t L = in->max_buffer & ~(in->page - 1);
    for (int32_t k = 0; k < p->n_views; k++) {
        const gt_mtl_view *v = &p->views[k];
        CHECK(v->addr % in->page == 0);
        CHECK(v->length > 0 && v->length % in->page == 0 && v->length <= in->max_buffer);
        /* inside the span's pages: [align_down(base), align_up(base + span)) */
        CHECK(v->addr >= (in->base & ~(in->page - 1)));
        CHECK(v->addr + v->length - in->base <= ((in->span + (in->base % in->page) + in->page - 1) &
                                                 ~(in->page - 1)));
        if (k > 0) CHECK(v->addr >= p->views[k - 1].addr);
        if (p->mode == GT_MTL_STRIDED) {
            CHECK(v->addr == p->views[0].addr + (uint64_t)k * p->stride);
            if (k + 1 < p->n_views) CHECK(v->length == L);
        }
    }
    uint64_t copy_sum = 0, copied_n = 0;
    for (int32_t c = 0; c < p->n_copies; c++) {
        CHECK(p->copy_len[c] > 0 && p->copy_len[c] <= in->max_buffer);
        copy_sum += p->copy_len[c];
    }
    CHECK(copy_sum == p->copied);
    for (size_t i = 0; i < in->n_tensors; i++) {
        const gt_mtl_tensor *t = &in->tensors[i];
        const gt_mtl_place *q = &p->place[i];
        if (q->where == GT_MTL_IN_VIEW) {
            CHECK(q->index >= 0 && q->index < p->n_views);
            if (q->index < 0 || q->index >= p->n_views) continue;
            const gt_mtl_view *v = &p->views[q->index];
            /* wholly inside its view, at the tensor's own address */
            CHECK(q->offset + t->size <= v->length);
            if (t->size > 0) CHECK(v->addr + q->offset == in->base + t->offset);
        } else if (q->where == GT_MTL_IN_COPY) {
            CHECK(q->index >= 0 && q->index < p->n_copies);
            if (q->index < 0 || q->index >= p->n_copies) continue;
            CHECK(q->offset % GT_MTL_COPY_ALIGN == 0);
            CHECK(q->offset + t->size <= p->copy_len[q->index]);
            if (t->size > 0) copied_n++;
        } else {
            CHECK(q->where == GT_MTL_EMPTY && t->size == 0);
        }
    }
    CHECK(copied_n == p->copied_tensors);
    /* tensors sharing a copy buffer never overlap there */
    for (size_t i = 0; i < in->n_tensors && p->n_copies; i++)
        for (size_t j = i + 1; j < in->n_tensors; j++) {
            const gt_mtl_place *a = &p->place[i], *b = &p->place[j];
            if (a->where != GT_MTL_IN_COPY || b->where != GT_MTL_IN_COPY || a->index != b->index ||
                in->tensors[i].size == 0 || in->tensors[j].size == 0)
                continue;
            CHECK(a->offset + in->tensors[i].size <= b->offset ||
                  b->offset + in->tensors[j].size <= a->offset);
        }
    return fails - before;
}

/* A GGUF-like table filling `span` bytes: a header, a big token embedding, then tensors of
 * 32-byte-aligned sizes up to `big`, packed at 32-byte alignment. */
static size_t make_table(gt_mtl_tensor *t, size_t cap, uint64_t span, uint64_t big) {
    uint64_t at = 6 * MiB + 96; /* the metadata */
    size_t n = 0;
    t[n++] = (gt_mtl_tensor){at, big};
    at += big;
    while (n < cap) {
        uint64_t sz = (rng() % (64 * MiB)) / 32 * 32 + 4 * KiB;
        if (rng() % 8 == 0) sz = 4 * KiB + 32; /* norm vectors */
        at = (at + 31) / 32 * 32;
        if (at + sz > span) break;
        t[n++] = (gt_mtl_tensor){at, sz};
        at += sz;
    }
    return n;
}

static void test_hostile(void) {
    gt_err err = {0};
    gt_mtl_plan p;
    const gt_mtl_tensor one = {0, 100};
    gt_mtl_plan_in in = {.base = 1 << 20, .span = 4096, .page = 4096, .max_buffer = 1 << 20,
                         .tensors = &one, .n_tensors = 1};
    CHECK(gt_mtl_plan_make(&in, &p, &err) == GEIST_OK && p.n_views == 1 && p.copied == 0);
    gt_mtl_plan_free(&p);

    const uint64_t bad_pages[] = {0, 3, 4097, 16383, UINT64_MAX};
    for (size_t i = 0; i < sizeof bad_pages / sizeof *bad_pages; i++) {
        gt_mtl_plan_in b = in;
        b.page = bad_pages[i];
        CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_ERR_INVALID_ARGUMENT &&
              strstr(err.msg, "not a power of two") && p.views == NULL && p.place == NULL);
    }
    gt_mtl_plan_in b = in;
    b.page = (uint64_t)1 << 63; /* a power of two larger than maxBufferLength */
    CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_ERR_INVALID_ARGUMENT &&
          strstr(err.msg, "smaller than one page"));
    b = in;
    b.max_buffer = 0;
    CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_ERR_INVALID_ARGUMENT);
    /* spans that wrap the address space, directly or when the end is rounded up to the page */
    b = in;
    b.base = UINT64_MAX - 10;
    CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_ERR_INVALID_ARGUMENT &&
          strstr(err.msg, "wraps the address space"));
    b.base = UINT64_MAX - 4096 - 200;
    b.span = 4096 + 100; /* ends below UINT64_MAX, but its last page does not */
    CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_ERR_INVALID_ARGUMENT &&
          strstr(err.msg, "wraps the address space"));
    b = in;
    b.span = UINT64_MAX;
    CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_ERR_INVALID_ARGUMENT);
    /* tensors outside the span, or whose end overflows */
    const gt_mtl_tensor outside[][2] = {
        {{0, 10}, {UINT64_MAX - 5, 10}}, {{0, 10}, {4000, 97}}, {{0, 10}, {4097, 0}},
        {{0, 10}, {1, UINT64_MAX}},      {{0, 10}, {(uint64_t)1 << 63, (uint64_t)1 << 63}},
    };
    for (size_t i = 0; i < sizeof outside / sizeof *outside; i++) {
        b = in;
        b.tensors = outside[i];
        b.n_tensors = 2;
        CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_ERR_INVALID_ARGUMENT &&
              strstr(err.msg, "tensor 1 ") && strstr(err.msg, "outside the span") &&
              p.bad_tensor == 1 && p.place == NULL);
    }
    /* a tensor table that cannot be allocated, or is missing */
    b = in;
    b.n_tensors = SIZE_MAX;
    CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_ERR_OUT_OF_MEMORY);
    b.tensors = NULL;
    b.n_tensors = 3;
    CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_ERR_INVALID_ARGUMENT);
    CHECK(gt_mtl_plan_make(NULL, &p, &err) == GEIST_ERR_INVALID_ARGUMENT);
    /* maxBufferLength of UINT64_MAX: no rounding may overflow */
    b = in;
    b.max_buffer = UINT64_MAX;
    CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_OK && p.n_views == 1 && !check_plan(&b, &p));
    gt_mtl_plan_free(&p);
    b.writable = true; /* copies packed into buffers of up to UINT64_MAX bytes */
    CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_OK && p.n_copies == 1 && p.copied == 100 &&
          !check_plan(&b, &p));
    gt_mtl_plan_free(&p);
    /* more views than the planner makes: a clear refusal */
    const gt_mtl_tensor small = {0, 64};
    b = (gt_mtl_plan_in){.base = 0, .span = (uint64_t)1 << 40, .page = 4096,
                         .max_buffer = 2 * 4096, .tensors = &small, .n_tensors = 1};
    CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_ERR_UNSUPPORTED && strstr(err.msg, "views") &&
          p.views == NULL);
    /* an empty span; zero-sized tensors */
    const gt_mtl_tensor zeros[] = {{0, 0}, {0, 0}};
    b = (gt_mtl_plan_in){.base = 4096, .span = 0, .page = 4096, .max_buffer = 8192,
                         .tensors = zeros, .n_tensors = 2};
    CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_OK && p.n_views == 0 && p.copied == 0 &&
          p.place[0].where == GT_MTL_EMPTY && !check_plan(&b, &p));
    gt_mtl_plan_free(&p);
    b = (gt_mtl_plan_in){.base = 0, .span = 0, .page = 4096, .max_buffer = 8192};
    CHECK(gt_mtl_plan_make(&b, &p, &err) == GEIST_OK && p.n_views == 0);
    gt_mtl_plan_free(&p);
    gt_mtl_plan_free(NULL);
}

/* A span that is not page-aligned (bytes of a malloc'd buffer): views start at the page below. */
static void test_unaligned(void) {
    gt_err err = {0};
    gt_mtl_plan p;
    const gt_mtl_tensor t[] = {{0, 1000}, {1024, 20000}, {21024, 1}, {21025, 0}};
    const gt_mtl_plan_in in = {.base = 0x10000123, .span = 21025 + 7, .page = 16 * KiB,
                               .max_buffer = 256 * MiB, .tensors = t, .n_tensors = 4};
    CHECK(gt_mtl_plan_make(&in, &p, &err) == GEIST_OK);
    CHECK(p.mode == GT_MTL_SINGLE && p.n_views == 1 && p.views[0].addr == 0x10000000 &&
          p.views[0].length == 32 * KiB && p.wrapped == 32 * KiB && p.copied == 0);
    CHECK(p.place[1].offset == 0x123 + 1024 && !check_plan(&in, &p));
    gt_mtl_plan_free(&p);
}

/* The seed bug's size: a 4.64 GiB span on Apple silicon (16 KiB pages) and an Intel Mac (4 KiB)
 * with maxBufferLength 1, 2 and 32 GiB. */
static void test_big_span(void) {
    enum { CAP = 4096 };
    gt_mtl_tensor *t = malloc(CAP * sizeof *t);
    if (!t) {
        CHECK(!"out of memory");
        return;
    }
    const uint64_t span = 4982162063ull; /* 4.64 GiB */
    const uint64_t big = 500 * MiB + 96; /* the token embedding, the largest tensor */
    const size_t n = make_table(t, CAP, span, big);
    CHECK(n > 100);
    const uint64_t pages[] = {16 * KiB, 4 * KiB};
    const uint64_t maxes[] = {1 * GiB, 2 * GiB, 32 * GiB};
    for (size_t pi = 0; pi < 2; pi++)
        for (size_t mi = 0; mi < 3; mi++) {
            gt_err err = {0};
            gt_mtl_plan p;
            const uint64_t page = pages[pi], maxb = maxes[mi];
            const gt_mtl_plan_in in = {.base = (uint64_t)0x300000000, .span = span, .page = page,
                                       .max_buffer = maxb, .tensors = t, .n_tensors = n};
            if (gt_mtl_plan_make(&in, &p, &err) != GEIST_OK) {
                CHECK(!"plan failed");
                printf("  %s\n", err.msg);
                continue;
            }
            const uint64_t A = (span + page - 1) / page * page;
            const uint64_t O = (big + page - 1) / page * page;
            CHECK(check_plan(&in, &p) == 0);
            CHECK(p.copied == 0 && p.copied_tensors == 0 && p.n_copies == 0);
            CHECK(p.wrapped == A); /* the views cover the span's pages, each once */
            if (maxb >= A) {
                CHECK(p.mode == GT_MTL_SINGLE && p.n_views == 1 && p.view_bytes == A);
            } else {
                const uint64_t S = maxb - O;
                const uint64_t nv = 1 + (A - maxb + S - 1) / S;
                CHECK(p.mode == GT_MTL_STRIDED && p.overlap == O && p.stride == S);
                CHECK((uint64_t)p.n_views == nv);
                /* 1 GiB: 5 views without overlap; 9 with the 500 MiB overlap; 2 GiB: 3 */
                if (maxb == 1 * GiB) CHECK(p.n_views == 9);
                if (maxb == 2 * GiB) CHECK(p.n_views == 3);
                /* any range no longer than the largest tensor lies in one view */
                for (int r = 0; r < 2000; r++) {
                    const uint64_t len = 1 + rng() % big, lo = rng() % (span - len + 1);
                    const uint64_t addr = in.base + lo;
                    int hit = 0;
                    for (int32_t k = 0; k < p.n_views && !hit; k++)
                        hit = addr >= p.views[k].addr &&
                              addr + len <= p.views[k].addr + p.views[k].length;
                    CHECK(hit);
                }
            }
            gt_mtl_plan_free(&p);
        }
    free(t);
}

/* The largest tensor near maxBufferLength: when no stride is left the views grow tensor by
 * tensor; a tensor whose bytes fit but whose pages do not is copied (counted); one larger than
 * maxBufferLength is refused, naming it. */
static void test_largest_tensor(void) {
    gt_err err = {0};
    gt_mtl_plan p;
    const uint64_t page = 16 * KiB, maxb = 64 * MiB;
    /* [0]: exactly maxBufferLength, but starting mid-page: its pages exceed a view -> copied;
     * [1]: maxBufferLength - 2 pages, page-aligned: wrapped in a view of its own;
     * [2..]: small ones */
    gt_mtl_tensor t[] = {{4096, maxb}, {0, maxb - 2 * page}, {0, 5000}, {0, 300}, {0, 0}};
    t[1].offset = (4096 + maxb + page - 1) / page * page;
    t[2].offset = t[1].offset + t[1].size + 2 * page + 32; /* past view 0 */
    t[3].offset = t[2].offset + 5000 + 64;
    t[4].offset = t[3].offset;
    const gt_mtl_plan_in in = {.base = 0x200000000, .span = t[3].offset + 300 + 11, .page = page,
                               .max_buffer = maxb, .tensors = t, .n_tensors = 5};
    CHECK(gt_mtl_plan_make(&in, &p, &err) == GEIST_OK);
    CHECK(p.mode == GT_MTL_GREEDY && !check_plan(&in, &p));
    CHECK(p.place[0].where == GT_MTL_IN_COPY && p.copied == maxb && p.copied_tensors == 1);
    CHECK(p.place[1].where == GT_MTL_IN_VIEW && p.place[2].where == GT_MTL_IN_VIEW &&
          p.place[3].where == GT_MTL_IN_VIEW);
    CHECK(p.n_views == 2);
    gt_mtl_plan_free(&p);

    /* the largest tensor one page below maxBufferLength: strided with a one-page stride */
    const uint64_t L = 1 * MiB;
    gt_mtl_tensor u[] = {{0, L - page}, {L - page, 1000}, {L - page + 1000, 3 * page}};
    const gt_mtl_plan_in in2 = {.base = 0x10000, .span = L + 3 * page, .page = page,
                                .max_buffer = L + 5, .tensors = u, .n_tensors = 3};
    CHECK(gt_mtl_plan_make(&in2, &p, &err) == GEIST_OK && p.mode == GT_MTL_STRIDED &&
          p.stride == page && !check_plan(&in2, &p) && p.copied == 0);
    gt_mtl_plan_free(&p);

    /* larger than maxBufferLength: a clear error naming it, nothing allocated */
    gt_mtl_tensor w[] = {{0, 1000}, {1024, maxb + 1}};
    const gt_mtl_plan_in in3 = {.base = 0x10000, .span = 1024 + maxb + 1, .page = page,
                                .max_buffer = maxb, .tensors = w, .n_tensors = 2};
    CHECK(gt_mtl_plan_make(&in3, &p, &err) == GEIST_ERR_UNSUPPORTED && p.bad_tensor == 1 &&
          strstr(err.msg, "tensor 1 (67108865 bytes) is larger than the device's maxBufferLength "
                          "(67108864 bytes)") &&
          p.views == NULL && p.place == NULL);
}

/* Writable caller memory: wrapped only when the caller allowed aliasing; else every tensor is
 * copied into buffers of at most maxBufferLength, and counted. Read-only page-aligned bytes
 * (load_from_memory of a read-only mapping) own 0 weight bytes. */
static void test_writable(void) {
    gt_err err = {0};
    gt_mtl_plan p;
    gt_mtl_tensor t[64];
    uint64_t at = 4096, sum = 0;
    for (int i = 0; i < 64; i++) {
        const uint64_t sz = 1000 + (rng() % (3 * MiB));
        t[i] = (gt_mtl_tensor){at, sz};
        at += (sz + 31) / 32 * 32;
        sum += sz;
    }
    gt_mtl_plan_in in = {.base = 0x40000000, .span = at, .page = 16 * KiB, .max_buffer = 8 * MiB,
                         .tensors = t, .n_tensors = 64};
    CHECK(gt_mtl_plan_make(&in, &p, &err) == GEIST_OK && !check_plan(&in, &p));
    CHECK(p.copied == 0 && p.n_views > 1); /* read-only: 0 owned weight bytes */
    gt_mtl_plan_free(&p);
    in.writable = true;
    in.allow_alias = true;
    CHECK(gt_mtl_plan_make(&in, &p, &err) == GEIST_OK && !check_plan(&in, &p) && p.copied == 0);
    gt_mtl_plan_free(&p);
    in.allow_alias = false;
    CHECK(gt_mtl_plan_make(&in, &p, &err) == GEIST_OK && !check_plan(&in, &p));
    CHECK(p.mode == GT_MTL_NONE && p.n_views == 0 && p.wrapped == 0 && p.copied_tensors == 64);
    CHECK(p.copied >= sum && p.copied < sum + 64 * GT_MTL_COPY_ALIGN && p.n_copies > 1);
    gt_mtl_plan_free(&p);
}

/* The KV buffer's layout (F32/F16/INT8 rows of session/kv.c): sizes, refusals, overflow. */
static void test_kv(void) {
    gt_err err = {0};
    gt_mtl_kv_layout k;
    /* SmolLM2-135M: 30 layers, 3 KV heads of 64, cap 256, F16 (docs/MEMORY.md: 5,898,240) */
    CHECK(gt_mtl_kv_plan(GEIST_KV_F16, 256, 30, 3, 64, 64, 1 * GiB, &k, &err) == GEIST_OK);
    CHECK(k.mode == GEIST_KV_F16 && k.k_row == 192 * 2 && k.k_bytes == 256 * 192 * 2 &&
          k.layer_bytes == 2 * k.k_bytes && k.total == 30 * k.layer_bytes && k.total == 5898240);
    CHECK(gt_mtl_kv_plan(GEIST_KV_F32, 7, 2, 1, 3, 5, 1 * GiB, &k, &err) == GEIST_OK &&
          k.k_bytes == 84 && k.layer_bytes == 84 + 140 && k.total == 448);
    /* INT8: per position and KV head an f32 scale + 64 codes (session/kv.c's rows) */
    CHECK(gt_mtl_kv_plan(GEIST_KV_INT8, 256, 30, 3, 64, 64, 1 * GiB, &k, &err) == GEIST_OK);
    CHECK(k.mode == GEIST_KV_INT8 && k.k_row == 3 * 68 && k.v_row == 3 * 68 &&
          k.k_bytes == 256 * 204 && k.total == 30ull * 2 * 256 * 204);
    CHECK(gt_mtl_kv_plan(GEIST_KV_INT8, 256, 30, 3, 62, 64, 1 * GiB, &k, &err) ==
              GEIST_ERR_UNSUPPORTED && strstr(err.msg, "supported: 0 = F32, 1 = F16, 2 = INT8"));
    CHECK(gt_mtl_kv_plan(GEIST_KV_INT4, 256, 30, 3, 64, 64, 1 * GiB, &k, &err) ==
              GEIST_ERR_UNSUPPORTED && strstr(err.msg, "supported: 0 = F32, 1 = F16, 2 = INT8"));
    CHECK(gt_mtl_kv_plan(GEIST_KV_F16, 0, 30, 3, 64, 64, 1 * GiB, &k, &err) ==
          GEIST_ERR_INVALID_ARGUMENT);
    CHECK(gt_mtl_kv_plan(GEIST_KV_F16, 256, -1, 3, 64, 64, 1 * GiB, &k, &err) ==
          GEIST_ERR_INVALID_ARGUMENT);
    CHECK(gt_mtl_kv_plan(GEIST_KV_F32, INT32_MAX, INT32_MAX, 1, UINT64_MAX / 2, 1, UINT64_MAX, &k,
                         &err) == GEIST_ERR_INVALID_ARGUMENT && strstr(err.msg, "overflows"));
    CHECK(gt_mtl_kv_plan(GEIST_KV_F16, 32768, 30, 3, 64, 64, 256 * MiB, &k, &err) ==
              GEIST_ERR_UNSUPPORTED && strstr(err.msg, "maxBufferLength") && k.total == 0);
}

/* What metal.m plans for a real model file (gt_mtl_plan_gguf over a read-only, page-aligned
 * file mapping: load(path), or load_from_memory of such bytes): owned weight bytes 0, every
 * tensor bound at its own bytes; with tiny maxBufferLengths, overlapping views; writable bytes
 * without permission to alias: every tensor copied and counted. */
static void test_real_file(const char *path) {
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
    uint64_t largest = 0, tensor_bytes = 0;
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        if (g.tensors[i].nbytes > largest) largest = g.tensors[i].nbytes;
        tensor_bytes += g.tensors[i].nbytes;
    }
    CHECK(g.n_tensors > 10 && (uintptr_t)map % 4096 == 0);
    const uint64_t page = 4096, A = (size + page - 1) / page * page;
    const uint64_t maxes[] = {1 * GiB, (largest + page - 1) / page * page + 2 * page,
                              (largest + page - 1) / page * page + page + 100};
    for (size_t k = 0; k < 3; k++) {
        gt_mtl_plan p;
        CHECK(gt_mtl_plan_gguf(&g, page, maxes[k], false, false, &p, &err) == GEIST_OK);
        CHECK(p.copied == 0 && p.copied_tensors == 0 && p.wrapped == A);
        CHECK(k == 0 ? p.n_views == 1 : p.n_views > 1);
        for (uint64_t i = 0; i < g.n_tensors && p.place; i++) {
            const gt_mtl_place *q = &p.place[i];
            CHECK(q->where == GT_MTL_IN_VIEW);
            if (q->where != GT_MTL_IN_VIEW) continue;
            const gt_mtl_view *v = &p.views[q->index];
            CHECK(v->addr + q->offset == (uint64_t)(uintptr_t)g.tensors[i].data);
            CHECK(q->offset + g.tensors[i].nbytes <= v->length);
        }
        gt_mtl_plan_free(&p);
    }
    gt_mtl_plan p;
    CHECK(gt_mtl_plan_gguf(&g, 16 * KiB, 1 * GiB, true, false, &p, &err) == GEIST_OK);
    CHECK(p.n_views == 0 && p.wrapped == 0 && p.copied_tensors == g.n_tensors &&
          p.copied >= tensor_bytes && p.n_copies == 1);
    gt_mtl_plan_free(&p);
    /* a maxBufferLength below the largest tensor: refused, naming it */
    CHECK(gt_mtl_plan_gguf(&g, page, largest - 1, false, false, &p, &err) ==
              GEIST_ERR_UNSUPPORTED &&
          strstr(err.msg, "maxBufferLength") && strstr(err.msg, "('") && p.views == NULL);
    gt_gguf_free(&g);
    gt_unmap_file(map, size);
}

int main(int argc, char **argv) {
    test_real_file(argc > 1 ? argv[1] : "tests/fuzz/corpus/gguf/llama_q8.gguf");
    test_real_file(argc > 2 ? argv[2] : "tests/fuzz/corpus/gguf/gemma3_q8.gguf");
    test_kv();
    test_hostile();
    test_unaligned();
    test_big_span();
    test_largest_tensor();
    test_writable();
    printf("test_metal_planner: %s\n", fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
}
