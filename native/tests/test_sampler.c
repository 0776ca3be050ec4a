/* The sampler's draws (sample/sampler.c) against an oracle written here from sampler.h's
 * semantics alone: every candidate listed and sorted by the total order (qsort), then top-k,
 * softmax, top-p, min-p and the draw as the header spells them, on the same random generator.
 * The sampler selects top_k <= GT_SAMPLER_TOPK_PASS in one pass over the logits and lists every
 * candidate otherwise; both, with AVX2 and with plain loops, must give the oracle's tokens, draw
 * after draw. Logits are drawn from a few values (ties at the top-k boundary) or spread out, with
 * NaN, +-inf and FLT_MAX sprinkled in, in random order and in rising order (which makes the
 * one-pass selection give up and list every candidate). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sampler.h"

#include "check.h"

/* ---- the oracle ------------------------------------------------------------------------------ */

typedef struct orng {
    uint64_t s[4];
} orng;

static uint64_t osplit(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void oseed(orng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = osplit(&seed);
}

static uint64_t orotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static double ouniform(orng *r) { /* xoshiro256**, 53 bits */
    uint64_t *s = r->s;
    const uint64_t out = orotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = orotl(s[3], 45);
    return (double)(out >> 11) * 0x1.0p-53;
}

typedef struct ocand {
    double s, w;
    int32_t id;
} ocand;

static int by_total_order(const void *a, const void *b) { /* higher s first, then lower id */
    const ocand *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* one draw of sampler.h's steps 1 and 5-12 (no penalties, bias or hook); -1: no candidate */
static int32_t oracle_draw(const float *logits, int32_t n, const geist_sampler_options *o,
                           orng *r, ocand *c) {
    int32_t nc = 0, best = -1;
    float bv = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        float x = logits[i];
        if (isnan(x) || x == -INFINITY) continue;
        if (x == INFINITY) x = FLT_MAX;
        if (x > bv) {
            bv = x;
            best = i;
        }
        c[nc].s = o->temperature > 0.0f ? (double)x * (1.0 / (double)o->temperature) : 0.0;
        c[nc].id = i;
        nc++;
    }
    if (nc == 0) return -1;
    if (o->temperature <= 0.0f) return best;
    bool sorted = false;
    if (o->top_k > 0 && o->top_k < nc) {
        qsort(c, (size_t)nc, sizeof *c, by_total_order);
        nc = o->top_k;
        sorted = true;
    }
    if (o->top_p < 1.0f && nc > 1 && !sorted) {
        qsort(c, (size_t)nc, sizeof *c, by_total_order);
        sorted = true;
    }
    double smax = c[0].s, total = 0.0;
    for (int32_t i = 1; i < nc; i++) smax = c[i].s > smax ? c[i].s : smax;
    for (int32_t i = 0; i < nc; i++) {
        c[i].w = exp(c[i].s - smax);
        total += c[i].w;
    }
    if (o->top_p < 1.0f && nc > 1) {
        const double target = (double)o->top_p * total;
        double cum = 0.0;
        for (int32_t i = 0; i < nc; i++) {
            cum += c[i].w;
            if (cum >= target) {
                nc = i + 1;
                break;
            }
        }
    }
    if (o->min_p > 0.0f && nc > 1) {
        int32_t k = 0;
        for (int32_t i = 0; i < nc; i++)
            if (c[i].w >= (double)o->min_p) c[k++] = c[i];
        nc = k;
    }
    double kept = 0.0;
    for (int32_t i = 0; i < nc; i++) kept += c[i].w;
    const double u = ouniform(r) * kept;
    double acc = 0.0;
    for (int32_t i = 0; i < nc; i++) {
        acc += c[i].w;
        if (acc > u) return c[i].id;
    }
    return c[nc - 1].id;
}

/* ---- the cases -------------------------------------------------------------------------------- */

static uint64_t rs = 12345;
static uint32_t rnd(void) { return (uint32_t)(osplit(&rs) >> 32); }
static float frnd(void) { return (float)(rnd() >> 8) * 0x1.0p-24f; } /* [0, 1) */

/* a row of n logits: style 0 spread out, 1 from 5 values (ties), 2 rising by id; odd bits mixed
 * in: NaN, -inf, +inf, FLT_MAX */
static void fill(float *l, int32_t n, int style, bool odd) {
    for (int32_t i = 0; i < n; i++) {
        if (style == 0) l[i] = (frnd() - 0.5f) * 24.0f;
        else if (style == 1) l[i] = (float)(rnd() % 5) * 1.5f;
        else l[i] = (float)i * 0.001f + frnd() * 0.0005f;
    }
    if (!odd) return;
    const float odd_values[4] = {NAN, -INFINITY, INFINITY, FLT_MAX};
    for (int32_t j = 0; j < 1 + n / 50; j++) l[rnd() % (uint32_t)n] = odd_values[rnd() % 4];
}

static int32_t draws = 0;

static void compare(const float *l, int32_t n, const geist_sampler_options *o, ocand *oc) {
    geist_sampler *s[2] = {NULL, NULL};
    gt_err err = {0};
    for (int k = 0; k < 2; k++) {
        CHECK(gt_sampler_create(n, o, &s[k], &err) == GEIST_OK);
        if (!s[k]) return;
        gt_sampler_set_simd(s[k], k ? GT_SIMD_AVX2 : GT_SIMD_NONE);
    }
    orng r;
    oseed(&r, o->seed);
    for (int d = 0; d < (n >= 49152 ? 3 : 6); d++) {
        const int32_t want = oracle_draw(l, n, o, &r, oc);
        for (int k = 0; k < 2; k++) {
            int32_t got = -2;
            const geist_status st = gt_sampler_sample(s[k], l, &got, &err);
            if (want < 0) {
                CHECK(st == GEIST_ERR_INVALID_ARGUMENT);
            } else if (st != GEIST_OK || got != want) {
                printf("  n %d T %g top_k %d top_p %g min_p %g simd %d draw %d: %d, oracle %d\n", n,
                       (double)o->temperature, o->top_k, (double)o->top_p, (double)o->min_p, k, d,
                       got, want);
                CHECK(st == GEIST_OK && got == want);
            }
        }
        draws++;
        if (want < 0) break;
    }
    gt_sampler_free(s[0]);
    gt_sampler_free(s[1]);
}

int main(void) {
    const int32_t sizes[] = {1, 7, 64, 1000, 49152, 262144};
    const float temps[] = {0.0f, 0.35f, 0.8f, 1.7f};
    const float top_ps[] = {1.0f, 0.95f, 0.5f, 0.0f};
    const float min_ps[] = {0.0f, 0.05f, 0.4f};
    float *l = malloc(262144 * sizeof *l);
    ocand *oc = malloc(262144 * sizeof *oc);
    if (!l || !oc) return 1;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const int32_t n = sizes[si];
        const int32_t ks[] = {1, 2, 5, 40, 100, GT_SAMPLER_TOPK_PASS, GT_SAMPLER_TOPK_PASS + 1,
                              n - 1, n, n + 3, 0};
        const int cases = n >= 49152 ? 12 : 160;
        for (int cs = 0; cs < cases; cs++) {
            const int style = cs % 3;
            fill(l, n, style, (cs / 3) % 2 == 1);
            if (cs % 40 == 39) /* nothing but NaN and -inf, or one candidate left */
                for (int32_t i = 0; i < n; i++) l[i] = i == n / 2 && cs % 80 == 79 ? 2.0f : -INFINITY;
            geist_sampler_options o;
            gt_sampler_options_default(&o);
            o.temperature = temps[rnd() % 4];
            o.top_k = ks[rnd() % (sizeof ks / sizeof *ks)];
            if (o.top_k < 0) o.top_k = 0;
            o.top_p = top_ps[rnd() % 4];
            o.min_p = min_ps[rnd() % 3];
            o.seed = rnd();
            compare(l, n, &o, oc);
        }
    }
    printf("test_sampler: %d draws compared, %d failures\n", draws, fails);
    free(l);
    free(oc);
    return fails != 0;
}
