/* Sampler chain: penalties -> bias/hook -> temperature -> top-k -> top-p -> min-p -> draw.
 * Semantics are spelled out in sampler.h. No allocation per sample. */
#include "sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers: xoshiro256** seeded through splitmix64 ------------------------------ */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(uint64_t st[4], uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) st[i] = splitmix64(&x);
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t st[4]) {
    uint64_t result = rotl64(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl64(st[3], 45);
    return result;
}

/* uniform in [0, 1) with 53 random bits */
static double rng_uniform(uint64_t st[4]) { return (double)(rng_next(st) >> 11) * 0x1.0p-53; }

/* ---- options ----------------------------------------------------------------------------- */

void gt_sampler_options_default(geist_sampler_options *o) {
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->temperature = 0.8f;
    o->top_k = 40;
    o->top_p = 0.95f;
    o->min_p = 0.05f;
    o->repeat_penalty = 1.0f;
    o->frequency_penalty = 0.0f;
    o->presence_penalty = 0.0f;
    o->penalty_last_n = 64;
    o->seed = 0;
}

geist_status gt_sampler_check_options(const geist_sampler_options *o, gt_err *err) {
    if (!(isfinite(o->temperature) && o->temperature >= 0.0f))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "sampler: temperature must be >= 0 (got %g)",
                       (double)o->temperature);
    if (o->top_k < 0)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "sampler: top_k must be >= 0 (got %d)",
                       o->top_k);
    if (!(o->top_p >= 0.0f && o->top_p <= 1.0f))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "sampler: top_p must be in [0, 1] (got %g)",
                       (double)o->top_p);
    if (!(o->min_p >= 0.0f && o->min_p <= 1.0f))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "sampler: min_p must be in [0, 1] (got %g)",
                       (double)o->min_p);
    if (!(isfinite(o->repeat_penalty) && o->repeat_penalty > 0.0f))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "sampler: repeat_penalty must be > 0 (got %g)", (double)o->repeat_penalty);
    if (!isfinite(o->frequency_penalty) || !isfinite(o->presence_penalty))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "sampler: frequency and presence penalties must be finite");
    if (o->penalty_last_n < 0 || o->penalty_last_n > GT_SAMPLER_MAX_PENALTY_WINDOW)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "sampler: penalty_last_n must be in [0, %d] (got %d)",
                       GT_SAMPLER_MAX_PENALTY_WINDOW, o->penalty_last_n);
    return GEIST_OK;
}

/* ---- lifetime ---------------------------------------------------------------------------- */

geist_status gt_sampler_create(int32_t n_vocab, const geist_sampler_options *o,
                               geist_sampler **out, gt_err *err) {
    if (n_vocab <= 0)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "sampler: n_vocab must be > 0 (got %d)",
                       n_vocab);
    geist_status st = gt_sampler_check_options(o, err);
    if (st != GEIST_OK) return st;
    geist_sampler *s = calloc(1, sizeof *s);
    if (!s) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "sampler: out of memory");
    size_t n = (size_t)n_vocab;
    s->n_vocab = n_vocab;
    s->opts = *o;
    s->work = gt_malloc_array(n, sizeof *s->work);
    s->cand = gt_malloc_array(n, sizeof *s->cand);
    s->count = gt_calloc(n, sizeof *s->count);
    s->hist_cap = o->penalty_last_n;
    s->hist = s->hist_cap ? gt_malloc_array((size_t)s->hist_cap, sizeof *s->hist) : NULL;
    if (!s->work || !s->cand || !s->count || (s->hist_cap && !s->hist)) {
        gt_sampler_free(s);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "sampler: out of memory (n_vocab %d)", n_vocab);
    }
    rng_seed(s->rng, o->seed);
    s->simd = GT_SIMD_AVX2;
    *out = s;
    return GEIST_OK;
}

void gt_sampler_free(geist_sampler *s) {
    if (!s) return;
    free(s->work);
    free(s->cand);
    free(s->count);
    free(s->hist);
    free(s->bias_id);
    free(s->bias_val);
    free(s);
}

geist_status gt_sampler_set_options(geist_sampler *s, const geist_sampler_options *o,
                                    gt_err *err) {
    geist_status st = gt_sampler_check_options(o, err);
    if (st != GEIST_OK) return st;
    if (o->penalty_last_n > s->hist_cap) {
        /* grow the ring, keeping the most recent tokens in order */
        int32_t cap = o->penalty_last_n;
        int32_t *h = gt_malloc_array((size_t)cap, sizeof *h);
        if (!h) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "sampler: out of memory (history)");
        int32_t keep = s->hist_len;
        for (int32_t k = 0; k < keep; k++) {
            int32_t src = (s->hist_head - keep + k + s->hist_cap) % s->hist_cap;
            h[k] = s->hist[src];
        }
        free(s->hist);
        s->hist = h;
        s->hist_cap = cap;
        s->hist_len = keep;
        s->hist_head = keep % cap;
    }
    bool reseed = o->seed != s->opts.seed;
    s->opts = *o;
    if (reseed) rng_seed(s->rng, o->seed);
    return GEIST_OK;
}

geist_status gt_sampler_set_logit_bias(geist_sampler *s, const int32_t *ids, const float *bias,
                                       size_t n, gt_err *err) {
    if (n > 0 && (!ids || !bias))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "sampler: ids and bias must not be NULL");
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                           "sampler: logit bias id %d outside [0, %d)", ids[i], s->n_vocab);
        if (isnan(bias[i]) || bias[i] == INFINITY)
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                           "sampler: logit bias for id %d must be finite or -INFINITY", ids[i]);
    }
    int32_t *nid = NULL;
    float *nval = NULL;
    if (n > 0) {
        nid = gt_malloc_array(n, sizeof *nid);
        nval = gt_malloc_array(n, sizeof *nval);
        if (!nid || !nval) {
            free(nid);
            free(nval);
            return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "sampler: out of memory (logit bias)");
        }
        memcpy(nid, ids, n * sizeof *nid);
        memcpy(nval, bias, n * sizeof *nval);
    }
    free(s->bias_id);
    free(s->bias_val);
    s->bias_id = nid;
    s->bias_val = nval;
    s->n_bias = n;
    return GEIST_OK;
}

void gt_sampler_set_hook(geist_sampler *s, geist_logits_hook hook, void *user) {
    s->hook = hook;
    s->hook_user = hook ? user : NULL;
}

void gt_sampler_accept(geist_sampler *s, int32_t id) {
    if (!s || id < 0 || id >= s->n_vocab || s->hist_cap == 0) return;
    s->hist[s->hist_head] = id;
    s->hist_head = (s->hist_head + 1) % s->hist_cap;
    if (s->hist_len < s->hist_cap) s->hist_len++;
}

void gt_sampler_reset(geist_sampler *s) {
    if (!s) return;
    s->hist_len = 0;
    s->hist_head = 0;
    rng_seed(s->rng, s->opts.seed);
}

/* ---- ordering helpers: "better" is higher s, then lower id (a strict total order) -------- */

static inline bool better(const gt_cand *a, const gt_cand *b) {
    return a->s > b->s || (a->s == b->s && a->id < b->id);
}

/* Candidates move field by field: a struct assignment compiles to a memcpy call under ASan, and
 * the sanitized builds (the fuzz target, the ASan tests) spent half their sampling time there;
 * the release code is the same either way. */
static inline void copy_cand(gt_cand *dst, const gt_cand *src) {
    dst->s = src->s;
    dst->w = src->w;
    dst->id = src->id;
}

static inline void swap_cand(gt_cand *a, gt_cand *b) {
    gt_cand t;
    copy_cand(&t, a);
    copy_cand(a, b);
    copy_cand(b, &t);
}

static void insertion_sort(gt_cand *c, size_t lo, size_t hi) {
    for (size_t i = lo + 1; i < hi; i++) {
        gt_cand key;
        copy_cand(&key, &c[i]);
        size_t j = i;
        while (j > lo && better(&key, &c[j - 1])) {
            copy_cand(&c[j], &c[j - 1]);
            j--;
        }
        copy_cand(&c[j], &key);
    }
}

static void sift_down(gt_cand *c, size_t root, size_t n) {
    /* heap of "worse on top": the parent is never better than its children */
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n) return;
        if (child + 1 < n && better(&c[child], &c[child + 1])) child++;
        if (!better(&c[root], &c[child])) return;
        swap_cand(&c[root], &c[child]);
        root = child;
    }
}

/* Sorts c[0..n) best first in O(n log n) without recursion or allocation. */
static void heap_sort(gt_cand *c, size_t n) {
    if (n < 2) return;
    for (size_t i = n / 2; i-- > 0;) sift_down(c, i, n);
    for (size_t end = n - 1; end > 0; end--) {
        swap_cand(&c[0], &c[end]); /* the worst goes to the back */
        sift_down(c, 0, end);
    }
}

/* Partitions c[lo..hi) (hi - lo >= 3) around a median-of-three pivot: returns its index p, c[lo..p)
 * better than it, c[p + 1..hi) worse ("better" is a strict total order: no equal keys). */
static size_t partition_best(gt_cand *c, size_t lo, size_t hi) {
    size_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (better(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
    if (better(&c[last], &c[lo])) swap_cand(&c[last], &c[lo]);
    if (better(&c[last], &c[mid])) swap_cand(&c[last], &c[mid]);
    /* c[lo] best, c[mid] median, c[last] worst: the median pivots */
    swap_cand(&c[mid], &c[last]);
    gt_cand pivot;
    copy_cand(&pivot, &c[last]);
    size_t store = lo;
    for (size_t j = lo; j < last; j++)
        if (better(&c[j], &pivot)) swap_cand(&c[store++], &c[j]);
    swap_cand(&c[store], &c[last]);
    return store;
}

/* Reorders c[lo..hi) so that c[lo..kth) are the (kth - lo) best of the range (unordered).
 * Quickselect with median-of-three pivots; falls back to a heap sort if it degenerates. */
static void select_best(gt_cand *c, size_t lo, size_t hi, size_t kth) {
    int budget = 2 * 64;
    while (hi - lo > 16 && kth > lo && kth < hi) {
        if (--budget == 0) {
            heap_sort(c + lo, hi - lo);
            return;
        }
        size_t store = partition_best(c, lo, hi);
        if (store == kth) return;
        if (kth < store) hi = store;
        else lo = store + 1;
    }
    /* only a short range that still straddles kth needs ordering; once kth is at an edge the
     * selection is done (sorting the rest there was quadratic: found by the fuzz campaign) */
    if (kth > lo && kth < hi && hi - lo > 1) insertion_sort(c, lo, hi);
}

/* Sorts c[lo..hi) best first: quicksort (the smaller side first, so the stack stays O(log n)),
 * short ranges by insertion, a heap sort where the partitions degenerate (depth past 2 log2 n).
 * On a top-p nucleus of 10^4-10^5 candidates it took a third of the heap sort's time. */
static void sort_best(gt_cand *c, size_t lo, size_t hi, int depth) {
    while (hi - lo > 16) {
        if (depth-- == 0) {
            heap_sort(c + lo, hi - lo);
            return;
        }
        size_t p = partition_best(c, lo, hi);
        if (p - lo < hi - p - 1) {
            sort_best(c, lo, p, depth);
            lo = p + 1;
        } else {
            sort_best(c, p + 1, hi, depth);
            hi = p;
        }
    }
    insertion_sort(c, lo, hi);
}

/* Makes c[0..m) the m best of c[0..n), sorted; c[0..*sorted) already is. */
static void ensure_sorted(gt_cand *c, size_t n, size_t m, size_t *sorted) {
    if (m > n) m = n;
    if (m <= *sorted) return;
    select_best(c, *sorted, n, m);
    size_t len = m - *sorted;
    int depth = 0;
    for (size_t l = len; l > 1; l >>= 1) depth += 2;
    sort_best(c, *sorted, m, depth);
    *sorted = m;
}

/* ---- the chain --------------------------------------------------------------------------- */

static void apply_penalties(geist_sampler *s) {
    const geist_sampler_options *o = &s->opts;
    int32_t window = o->penalty_last_n < s->hist_len ? o->penalty_last_n : s->hist_len;
    if (window <= 0) return;
    if (o->repeat_penalty == 1.0f && o->frequency_penalty == 0.0f && o->presence_penalty == 0.0f)
        return;
    for (int32_t k = 0; k < window; k++) {
        int32_t t = s->hist[(s->hist_head - 1 - k + s->hist_cap) % s->hist_cap];
        s->count[t]++;
    }
    for (int32_t k = 0; k < window; k++) {
        int32_t t = s->hist[(s->hist_head - 1 - k + s->hist_cap) % s->hist_cap];
        int32_t c = s->count[t];
        if (c == 0) continue; /* already applied */
        s->count[t] = 0;
        float l = s->work[t];
        if (l == -INFINITY) continue;
        if (o->repeat_penalty != 1.0f) l = l > 0.0f ? l / o->repeat_penalty : l * o->repeat_penalty;
        l -= (float)c * o->frequency_penalty + o->presence_penalty;
        s->work[t] = l;
    }
}

static void record(geist_sampler *s, int32_t id) { gt_sampler_accept(s, id); }

/* ---- the passes over all logits (49,152 for SmolLM2, per token per session) --------------- */

/* w = logits with NaN as -inf and +inf as FLT_MAX (so +inf ties stay ordered by id) */
static void sanitize_scalar(float *w, const float *logits, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = logits[i];
        w[i] = isnan(x) ? -INFINITY : x == INFINITY ? FLT_MAX : x;
    }
}

/* the first id of the largest value that is neither NaN nor -inf; -1 if there is none */
static int32_t argmax_scalar(const float *w, size_t n) {
    int32_t best = -1;
    float bv = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (w[i] > bv) { /* false for NaN and for -inf against the start */
            best = (int32_t)i;
            bv = w[i];
        }
    return best;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
/* The same results, 8 at a time (the scalar loops were ~4 % of a batched step of 8 sessions) */
#define SAMPLE_AVX2 __attribute__((target("avx2")))

static SAMPLE_AVX2 void sanitize_avx2(float *w, const float *logits, size_t n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), big = _mm256_set1_ps(FLT_MAX);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(logits + i);
        const __m256 y = _mm256_blendv_ps(x, ninf, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        _mm256_storeu_ps(w + i, _mm256_min_ps(y, big));
    }
    sanitize_scalar(w + i, logits + i, n - i);
}

static SAMPLE_AVX2 int32_t argmax_avx2(const float *w, size_t n) {
    /* four running maxima (one would wait on max's latency every 8 values) */
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) { /* NaN: keeps m */
        m0 = _mm256_max_ps(_mm256_loadu_ps(w + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(w + i + 8), m1);
        m2 = _mm256_max_ps(_mm256_loadu_ps(w + i + 16), m2);
        m3 = _mm256_max_ps(_mm256_loadu_ps(w + i + 24), m3);
    }
    const __m256 m = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
    float l[8], bv = -INFINITY;
    _mm256_storeu_ps(l, m);
    for (int k = 0; k < 8; k++) bv = l[k] > bv ? l[k] : bv;
    for (; i < n; i++) bv = w[i] > bv ? w[i] : bv;
    if (bv == -INFINITY) return -1;
    const __m256 b = _mm256_set1_ps(bv); /* its first id, 8 at a time */
    for (i = 0; i + 8 <= n; i += 8) {
        const unsigned eq = (unsigned)_mm256_movemask_ps(
            _mm256_cmp_ps(_mm256_loadu_ps(w + i), b, _CMP_EQ_OQ));
        if (eq) return (int32_t)(i + (size_t)__builtin_ctz(eq));
    }
    for (; i < n; i++)
        if (w[i] == bv) return (int32_t)i;
    return -1;
}

static bool has_avx2(gt_simd simd) { return simd >= GT_SIMD_AVX2 && gt_cpu_has(GT_CPU_AVX2); }
#else
static bool has_avx2(gt_simd simd) {
    (void)simd;
    return false;
}
static void sanitize_avx2(float *w, const float *logits, size_t n) { sanitize_scalar(w, logits, n); }
static int32_t argmax_avx2(const float *w, size_t n) { return argmax_scalar(w, n); }
#endif

static void sanitize(float *w, const float *logits, size_t n, gt_simd simd) {
    if (has_avx2(simd)) sanitize_avx2(w, logits, n);
    else sanitize_scalar(w, logits, n);
}

static int32_t argmax(const float *w, size_t n, gt_simd simd) {
    return has_avx2(simd) ? argmax_avx2(w, n) : argmax_scalar(w, n);
}

/* ---- top-k in one pass over the logits (the default chain: top_k 40 of 262,144 for Gemma 3) --
 * The k best candidates in the total order, without listing every candidate first (that list
 * and its selection were ~1 ms a draw over 262,144 logits): a heap of the k best so far, worst
 * on top (sift_down's order), and one pass in which an id enters only when its value beats the
 * heap's worst. Ids arrive in increasing order, so an equal value is worse and never enters: the
 * comparison is a plain float >, which SIMD makes 8 at a time (NaN and -inf never pass it).
 * While the heap fills, its worst is -inf. The candidates' scaled logits s = x / T keep the
 * floats' order strictly (distinct floats stay distinct doubles), so the set, and after
 * heap_sort its order, is exactly what select_best gives on the full list. c[i].w holds the
 * float value meanwhile (softmax overwrites it). Returns the number of candidates (ids neither
 * NaN nor -inf); c[0..k) is the result only when k < that number. Values in rising order would
 * enter one after another (n log k): past TOPK_ENTRIES the pass gives up (SIZE_MAX) and the
 * full list takes over; logits in no such order enter about k (1 + ln(n / k)) times. */
#define TOPK_ENTRIES(n, k) ((k) + (n) / 16)
static inline void topk_offer(gt_cand *c, size_t k, size_t *filled, float *thr, float x,
                              int32_t id, double inv_t) {
    if (x == INFINITY) x = FLT_MAX;
    if (!(x > *thr)) return; /* +inf mapped onto an FLT_MAX already kept */
    ++*filled;
    if (*filled <= k) {
        const size_t at = *filled - 1;
        c[at].s = (double)x * inv_t;
        c[at].w = (double)x;
        c[at].id = id;
        if (*filled == k) {
            for (size_t i = k / 2; i-- > 0;) sift_down(c, i, k);
            *thr = (float)c[0].w;
        }
        return;
    }
    c[0].s = (double)x * inv_t;
    c[0].w = (double)x;
    c[0].id = id;
    sift_down(c, 0, k);
    *thr = (float)c[0].w;
}

static size_t topk_scalar(const float *w, size_t n, gt_cand *c, size_t k, double inv_t) {
    size_t filled = 0, nc = 0;
    const size_t limit = TOPK_ENTRIES(n, k);
    float thr = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        const float x = w[i];
        nc += x == x && x != -INFINITY;
        if (x > thr) {
            topk_offer(c, k, &filled, &thr, x, (int32_t)i, inv_t);
            if (filled > limit) return SIZE_MAX;
        }
    }
    return nc;
}

#if defined(__x86_64__) || defined(__i386__)
static SAMPLE_AVX2 size_t topk_avx2(const float *w, size_t n, gt_cand *c, size_t k,
                                    double inv_t) {
    size_t filled = 0, nc = 0, i = 0;
    const size_t limit = TOPK_ENTRIES(n, k);
    float thr = -INFINITY;
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(w + i);
        nc += (size_t)__builtin_popcount((unsigned)_mm256_movemask_ps(
            _mm256_cmp_ps(x, ninf, _CMP_NEQ_OQ))); /* false for NaN and -inf */
        unsigned m = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_set1_ps(thr), _CMP_GT_OQ));
        while (m) { /* in id order; thr rises as they enter */
            const unsigned b = (unsigned)__builtin_ctz(m);
            m &= m - 1;
            if (w[i + b] > thr) topk_offer(c, k, &filled, &thr, w[i + b], (int32_t)(i + b), inv_t);
        }
        if (filled > limit) return SIZE_MAX;
    }
    for (; i < n; i++) {
        const float x = w[i];
        nc += x == x && x != -INFINITY;
        if (x > thr) topk_offer(c, k, &filled, &thr, x, (int32_t)i, inv_t);
    }
    return nc;
}
#else
static size_t topk_avx2(const float *w, size_t n, gt_cand *c, size_t k, double inv_t) {
    return topk_scalar(w, n, c, k, inv_t);
}
#endif

/* ---- top-p without ordering every candidate ---------------------------------------------- */

enum { TOPP_BUCKETS = 1024 };

/* top-p's cut (then min-p's candidates are a prefix of what it keeps), s_lo the least s of a
 * weight >= min_p: orders c[0..keep) best first and returns keep, the first count whose weights,
 * summed in that order, reach top_p * total (all of them if none does). Ordering all of Gemma
 * 3's 262,144 candidates cost 5-45 ms a draw, so only a prefix of the order that surely holds
 * the cut is ordered:
 * - min-p keeps no candidate of s below s_lo, the least s of a weight >= min_p (no trust in exp()
 *   rising with s needed): past those, top-p's cut changes nothing (keep is then at most them);
 * - without min-p, the weights' sums by buckets of s (each bucket's s above the next's): the
 *   buckets up to where they reach target by a margin past any summation order's rounding
 *   (n 2^-50 of the total: each order is within (n - 1) 2^-53 of the exact sum) hold the cut.
 * Should that margin ever fail, the rest is taken in, so the result is always the full order's. */
static size_t top_p_keep(gt_cand *c, size_t nc, size_t *sorted, double smax, double s_lo,
                         double total, const geist_sampler_options *o) {
    const double target = (double)o->top_p * total;
    size_t lim = nc;
    if (*sorted >= nc) { /* already ordered (top-k): the first lim */
        for (lim = 0; lim < nc && c[lim].s >= s_lo;) lim++;
    } else if (o->min_p > 0.0f) { /* they go to the front, the order picks from them */
        lim = *sorted;
        for (size_t j = *sorted; j < nc; j++)
            if (c[j].s >= s_lo) swap_cand(&c[lim++], &c[j]);
    } else {
        const double smin = s_lo; /* (every weight is >= min_p 0) */
        double hist[TOPP_BUCKETS] = {0};
        if (smax > smin) {
            const double scale = (double)(TOPP_BUCKETS - 1) / (smax - smin);
            for (size_t j = 0; j < nc; j++) hist[(size_t)((smax - c[j].s) * scale)] += c[j].w;
            const double need = target + total * (double)nc * 0x1p-50;
            double acc = 0.0;
            size_t cut = TOPP_BUCKETS;
            for (size_t b = 0; b < TOPP_BUCKETS && cut == TOPP_BUCKETS; b++)
                if ((acc += hist[b]) >= need) cut = b;
            if (cut < TOPP_BUCKETS) {
                lim = *sorted;
                for (size_t j = *sorted; j < nc; j++)
                    if ((size_t)((smax - c[j].s) * scale) <= cut) swap_cand(&c[lim++], &c[j]);
            }
        }
    }
    double cum = 0.0;
    size_t i = 0, m = 64;
    for (;;) {
        const size_t upto = m < lim ? m : lim;
        ensure_sorted(c, lim, upto, sorted);
        for (; i < upto; i++) {
            cum += c[i].w;
            if (cum >= target) return i + 1;
        }
        if (upto == lim) {
            if (o->min_p > 0.0f || lim == nc) return lim;
            lim = nc; /* the margin failed: the rest, all below the ordered ones, joins */
        }
        m = m > lim / 4 ? lim : m * 4;
    }
}

void gt_sampler_set_simd(geist_sampler *s, gt_simd simd) { s->simd = simd; }

bool gt_sampler_plain_greedy(const geist_sampler *s) {
    const geist_sampler_options *o = &s->opts;
    const bool neutral = o->penalty_last_n <= 0 || (o->repeat_penalty == 1.0f &&
                                                    o->frequency_penalty == 0.0f &&
                                                    o->presence_penalty == 0.0f);
    return o->temperature <= 0.0f && neutral && s->n_bias == 0 && !s->hook;
}

geist_status gt_sampler_take_greedy(geist_sampler *s, int32_t id, int32_t *out_id, gt_err *err) {
    if (id < 0 || id >= s->n_vocab)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "sampler: no candidate token (every logit is -inf after penalties, bias "
                       "and hook)");
    record(s, id);
    *out_id = id;
    return GEIST_OK;
}

geist_status gt_sampler_sample(geist_sampler *s, const float *logits, int32_t *out_id,
                               gt_err *err) {
    const geist_sampler_options *o = &s->opts;
    size_t n = (size_t)s->n_vocab;
    float *w = s->work;
    sanitize(w, logits, n, s->simd);
    apply_penalties(s);
    for (size_t i = 0; i < s->n_bias; i++) w[s->bias_id[i]] += s->bias_val[i];
    if (s->hook) s->hook(s->hook_user, w, s->n_vocab);

    if (o->temperature <= 0.0f) return gt_sampler_take_greedy(s, argmax(w, n, s->simd), out_id, err);

    gt_cand *c = s->cand;
    size_t nc = 0, sorted = 0;
    double inv_t = 1.0 / (double)o->temperature;
    if (o->top_k > 0 && (size_t)o->top_k <= GT_SAMPLER_TOPK_PASS) {
        const size_t k = (size_t)o->top_k;
        nc = has_avx2(s->simd) ? topk_avx2(w, n, c, k, inv_t) : topk_scalar(w, n, c, k, inv_t);
        if (nc != SIZE_MAX && k < nc) {
            heap_sort(c, k);
            nc = sorted = k;
        } else {
            nc = 0; /* k keeps every candidate: the full list below */
        }
    }
    for (size_t i = 0; i < n && !sorted; i++) {
        float x = w[i];
        if (isnan(x) || x == -INFINITY) continue;
        if (x == INFINITY) x = FLT_MAX;
        c[nc].s = (double)x * inv_t;
        c[nc].w = 0.0;
        c[nc].id = (int32_t)i;
        nc++;
    }
    if (nc == 0)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "sampler: no candidate token (every logit is -inf after penalties, bias "
                       "and hook)");

    if (!sorted && o->top_k > 0 && (size_t)o->top_k < nc) {
        ensure_sorted(c, nc, (size_t)o->top_k, &sorted);
        nc = (size_t)o->top_k;
    }

    double smax = c[0].s;
    if (!sorted)
        for (size_t i = 1; i < nc; i++) smax = c[i].s > smax ? c[i].s : smax;
    double total = 0.0, s_lo = INFINITY; /* s_lo: the least s of a weight >= min_p */
    for (size_t i = 0; i < nc; i++) {
        c[i].w = exp(c[i].s - smax);
        total += c[i].w;
        if (c[i].w >= (double)o->min_p && c[i].s < s_lo) s_lo = c[i].s;
    }

    if (o->top_p < 1.0f && nc > 1) nc = top_p_keep(c, nc, &sorted, smax, s_lo, total, o);

    if (o->min_p > 0.0f && nc > 1) {
        /* w = exp(s - s_max) = p / p_max; s_max's candidate has w == 1 and always stays */
        double thr = (double)o->min_p;
        size_t k = 0;
        for (size_t i = 0; i < nc; i++)
            if (c[i].w >= thr) copy_cand(&c[k++], &c[i]);
        nc = k;
    }

    double kept = 0.0;
    for (size_t i = 0; i < nc; i++) kept += c[i].w;
    double u = rng_uniform(s->rng) * kept;
    double acc = 0.0;
    int32_t id = c[nc - 1].id;
    for (size_t i = 0; i < nc; i++) {
        acc += c[i].w;
        if (acc > u) {
            id = c[i].id;
            break;
        }
    }
    record(s, id);
    *out_id = id;
    return GEIST_OK;
}
