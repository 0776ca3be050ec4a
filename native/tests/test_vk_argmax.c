/* argmax.comp (the greedy id of a logits row on the device, vk_forward.c's rec_argmax) against
 * the sampler's greedy rule on the CPU (sampler.h: the first id of the largest logit, NaN never,
 * -inf never, +inf as FLT_MAX; -1 when none is left), on rows built for what the two stages'
 * reductions must get right: the maximum tied within a lane, across lanes of a workgroup and
 * across parts (the lowest id wins), at the first and the last id, +inf beside FLT_MAX (a tie),
 * NaN and -inf everywhere but one id, nothing but NaN and -inf, -0 beside +0 as the maximum,
 * denormals as the maximum, a
 * vocabulary not a multiple of the part (the last part short), and random rows, for
 * SmolLM2's and Gemma 3's vocabulary sizes and a small one.
 *
 * Run by tests/core/test_vulkan.py (which pins lavapipe): test_vk_argmax run. Without arguments
 * (the suite's plain run of every test binary) it says so and exits 0. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* not in the in-kernel clock build (scons gpu_clock=1): its kernels also bind 13 */
#if defined(GEIST_HAVE_VULKAN) && !defined(GEIST_VK_CLOCK)
#include "backend/vulkan/vk.h"
#include "vk_hbuf.h"

#define ROWS 13

static uint32_t rng = 2024u;
static float frand(void) { /* in [-8, 8) */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 524288.0f - 8.0f;
}
static uint32_t irand(uint32_t n) {
    rng = rng * 1664525u + 1013904223u;
    return (rng >> 8) % n;
}

/* the CPU's rule, written from sampler.h */
static int32_t cpu_argmax(const float *l, uint32_t n) {
    int32_t best = -1;
    float bv = 0.0f;
    for (uint32_t i = 0; i < n; i++) {
        float x = l[i];
        if (isnan(x) || x == -INFINITY) continue;
        if (x == INFINITY) x = FLT_MAX;
        if (best < 0 || x > bv) {
            best = (int32_t)i;
            bv = x;
        }
    }
    return best;
}

/* row r of the n-id vocabulary: case r, then random values */
static void fill(float *l, uint32_t n, int r) {
    for (uint32_t i = 0; i < n; i++) l[i] = frand();
    const float top = 100.0f;
    switch (r) {
    case 0: /* one lane's ids (a stride of 128 apart) tie */
        l[n / 3] = l[n / 3 + 128] = top;
        break;
    case 1: /* neighbouring lanes tie, the later id written first */
        l[n / 2 + 1] = top;
        l[n / 2] = top;
        break;
    case 2: /* the first and the last id */
        l[0] = l[n - 1] = top;
        break;
    case 3: /* across parts: the last part's one loses to the first part's */
        l[n - 5] = top;
        l[7] = top;
        break;
    case 4: /* +inf beside FLT_MAX: a tie, the lower id */
        l[n / 2] = INFINITY;
        l[n / 4] = FLT_MAX;
        break;
    case 5: /* one candidate among NaN and -inf */
        for (uint32_t i = 0; i < n; i++) l[i] = (i & 1) ? NAN : -INFINITY;
        l[n - 2] = -1e30f;
        break;
    case 6: /* none */
        for (uint32_t i = 0; i < n; i++) l[i] = (i % 3) ? -INFINITY : NAN;
        break;
    case 7: /* -0 then +0 the largest */
        for (uint32_t i = 0; i < n; i++) l[i] = -1.0f - (float)irand(1000);
        l[n / 5] = -0.0f;
        l[n / 5 + 3] = 0.0f;
        break;
    case 8: /* a NaN in every lane, the maximum after one */
        for (uint32_t i = 0; i < n; i += 97) l[i] = NAN;
        l[98] = top;
        break;
    case 9: /* denormals the largest (a flushing compare would tie them with 0 and each other) */
        for (uint32_t i = 0; i < n; i++) l[i] = -1.0f - (float)irand(1000);
        l[n / 7] = 0.0f;
        l[n / 6] = 0x1p-149f;
        l[n / 3] = 0x1p-148f;
        l[n / 2] = -0x1p-140f;
        break;
    default: /* random, with a few ties at random places */
        for (int k = 0; k < 3; k++) l[irand(n)] = 9.0f;
        break;
    }
}

static int check_vocab(gt_vk_ctx *c, uint32_t n) {
    /* vk_forward.c's argmax_parts */
    uint32_t chunk = 4096u;
    if ((n + chunk - 1) / chunk > 128u) chunk = (n + 127u) / 128u;
    const uint32_t parts = (n + chunk - 1) / chunk;
    hbuf lg, part, ids;
    gt_vk_kernel k = {0};
    gt_err err = {0};
    int rc = 0;
    if (hbuf_make(c, (uint64_t)ROWS * n * 4, &lg) || hbuf_make(c, ROWS * parts * 8, &part) ||
        hbuf_make(c, ROWS * 4, &ids)) {
        rc = 1;
        printf("test_vk_argmax: buffers\n");
    } else {
        const uint32_t slot[3] = {2, 3, 4};
        const VkBuffer bufs[3] = {lg.b, part.b, ids.b};
        if (gt_vk_kernel_make(c, "argmax", 3, slot, bufs, 16, NULL, &k, &err)) {
            rc = 1;
            printf("test_vk_argmax: %s\n", err.msg);
        }
    }
    float *l = lg.map;
    for (int r = 0; r < ROWS && !rc; r++) fill(l + (size_t)r * n, n, r);
    memset(ids.map, 0x5A, ROWS * 4); /* what the device does not write stays visibly wrong */
    const uint32_t pc0[4] = {n, parts, chunk, 0}, pc1[4] = {n, parts, chunk, 1};
    const void *pcs[2] = {pc0, pc1};
    const uint32_t groups[2] = {ROWS * parts, ROWS};
    if (!rc && gt_vk_kernel_run(&k, 2, pcs, groups, &err)) {
        rc = 1;
        printf("test_vk_argmax: %s\n", err.msg);
    }
    for (int r = 0; r < ROWS && !rc; r++) {
        const int32_t want = cpu_argmax(l + (size_t)r * n, n), got = ((const int32_t *)ids.map)[r];
        if (got != want) {
            printf("test_vk_argmax: n_vocab %u row %d: id %d, the CPU's %d\n", n, r, got, want);
            rc = 1;
        }
    }
    if (!rc) printf("test_vk_argmax: n_vocab %u (%u parts): the CPU's ids\n", n, parts);
    gt_vk_kernel_free(&k);
    hbuf_free(c, &lg);
    hbuf_free(c, &part);
    hbuf_free(c, &ids);
    return rc;
}

static int run(void) {
    gt_err err = {0};
    const gt_dev_options vo = {0};
    gt_vk_ctx *c = NULL;
    if (gt_vk_ctx_create(&vo, &c, &err) != GEIST_OK) {
        printf("test_vk_argmax: FAILED: %s\n", err.msg);
        return 1;
    }
    const uint32_t sizes[] = {1000, 49152, 262144, 600001};
    int rc = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes && !rc; i++) rc = check_vocab(c, sizes[i]);
    gt_vk_ctx_free(c);
    if (!rc) printf("test_vk_argmax: ok\n");
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "run") != 0) {
        printf("test_vk_argmax: skipped (run by tests/core/test_vulkan.py, which pins lavapipe)\n");
        return 0;
    }
    return run();
}
#else
int main(void) {
    printf("test_vk_argmax: skipped (built without Vulkan, or the clock build)\n");
    return 0;
}
#endif
