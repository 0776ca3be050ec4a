/* quant.comp (shaders/actq.glsl: the 8-bit activation blocks matvec.comp also makes in shared
 * memory) against act_quant.c's gt_quantize_act_row, bit for bit, on inputs chosen for the
 * cases the lanes' reduction must get right: the block of 256's value of largest magnitude the
 * first in index order when +m and -m tie (in one lane, in one group of 8 lanes, across groups),
 * all-zero and -0 blocks, products landing on .5 (round half away / to even), a partial last
 * workgroup of blocks of 32, and random values of wide range (the other 1,000 of the 1,024 blocks
 * of 256: the scale divisions, shaders/exact.glsl's fdiv_rn, over many mantissas).
 *
 * Run by tests/core/test_vulkan.py (which pins lavapipe): test_vk_actq run. Without arguments
 * (the suite's plain run of every test binary) it says so and exits 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* not in the in-kernel clock build (scons gpu_clock=1): its kernels also bind 13 */
#if defined(GEIST_HAVE_VULKAN) && !defined(GEIST_VK_CLOCK)
#include "backend/act_quant.h"
#include "backend/vulkan/vk.h"
#include "vk_hbuf.h"

#define NB256 1024 /* blocks of 256: past block 23 random, of wide range (divisions' mantissas) */
#define N (256 * NB256)
#define NB32 (8 * NB256 - 3) /* blocks of 32: the last workgroup has 5 of its 8 */

static int fail(const char *what) {
    printf("test_vk_actq: FAILED: %s\n", what);
    return 1;
}

static uint32_t rng = 12345u;
static float frand(void) { /* in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

/* random blocks of 256 (each 8 of 32) with the cases above in blocks 1..23 */
static void fill(float *x) {
    for (int i = 0; i < N; i++) x[i] = frand() * ldexpf(1.0f, (int)(frand() * 20.0f));
    float *b;
    b = x + 256 * 1; /* zeros, some negative */
    for (int i = 0; i < 256; i++) b[i] = (i & 1) ? -0.0f : 0.0f;
    static const int tie[][2] = {{0, 1}, {4, 7}, {3, 30}, {200, 5}, {17, 255}, {64, 128}, {250, 2}};
    for (int k = 0; k < (int)(sizeof tie / sizeof tie[0]); k++) { /* +m and -m, largest */
        b = x + 256 * (2 + 2 * k);
        for (int i = 0; i < 256; i++) b[i] = frand();
        b[tie[k][0]] = 3.5f, b[tie[k][1]] = -3.5f;
        b = x + 256 * (3 + 2 * k); /* the other sign first */
        for (int i = 0; i < 256; i++) b[i] = frand();
        b[tie[k][0]] = -3.5f, b[tie[k][1]] = 3.5f;
    }
    b = x + 256 * 20; /* amax 127: d = 1 (both formats), halves */
    for (int i = 0; i < 256; i++) b[i] = (float)(i % 64 - 32) + 0.5f;
    for (int j = 0; j < 8; j++) b[32 * j] = 127.0f;
    b = x + 256 * 21; /* equal magnitudes throughout, signs alternating */
    for (int i = 0; i < 256; i++) b[i] = (i % 3) ? 0.75f : -0.75f;
    b = x + 256 * 22; /* tiny values: f16 scale underflow for blocks of 32 */
    for (int i = 0; i < 256; i++) b[i] = frand() * 1e-9f;
    b = x + 256 * 23; /* one nonzero value in the block, last of the block of 256 */
    memset(b, 0, 256 * sizeof *b);
    b[255] = -1e-3f;
}

/* the device's bytes and scales against the CPU's row; the first difference, or 0 */
static int compare(const float *x, const hbuf *aq, const hbuf *ad, int fmt, int64_t n) {
    const gt_act_format f = fmt ? GT_ACTF_Q8_256 : GT_ACTF_Q8_32;
    const int64_t blk = fmt ? 256 : 32;
    uint8_t *row = malloc(gt_act_q_row_bytes(f, n));
    if (!row) return fail("memory");
    gt_quantize_act_row(f, x, n, row);
    const int8_t *q = (const int8_t *)aq->map;
    const float *ds = gt_act_q_scales(row, n), *dd = (const float *)ad->map;
    int rc = 0;
    for (int64_t i = 0; i < n && !rc; i++)
        if ((int8_t)row[i] != q[i]) {
            printf("test_vk_actq: fmt %d value %lld (block %lld): q %d, the CPU's %d\n", fmt,
                   (long long)i, (long long)(i / blk), q[i], (int8_t)row[i]);
            rc = 1;
        }
    for (int64_t b = 0; b < n / blk && !rc; b++)
        if (memcmp(&ds[b], &dd[b], 4) != 0) {
            printf("test_vk_actq: fmt %d block %lld: d %a, the CPU's %a\n", fmt, (long long)b,
                   (double)dd[b], (double)ds[b]);
            rc = 1;
        }
    free(row);
    return rc;
}

/* quant.comp with exact.glsl's FDIV_GUESS_OFF = off (0: the backend's pipeline) over fill()'s
 * rows in both formats */
static int run_with(gt_vk_ctx *c, uint32_t off, hbuf *xb, hbuf *aq, hbuf *ad) {
    const VkSpecializationMapEntry sme = {15, 0, 4};
    const VkSpecializationInfo spec = {1, &sme, sizeof off, &off};
    const uint32_t slot[3] = {2, 4, 5};
    const VkBuffer bufs[3] = {xb->b, aq->b, ad->b};
    gt_vk_kernel k = {0};
    gt_err e = {0};
    int rc = 0;
    if (gt_vk_kernel_make(c, "quant", 3, slot, bufs, 12, off ? &spec : NULL, &k, &e))
        rc = fail(e.msg);
    for (uint32_t fmt = 0; fmt < 2 && !rc; fmt++) {
        memset(aq->map, 0x5A, N); /* what the device does not write stays visibly wrong */
        memset(ad->map, 0x5A, N / 32 * 4);
        const uint32_t nb = fmt ? NB256 : NB32;
        /* quant.comp over x's first nb blocks of fmt, as vk_forward.c dispatches it */
        const uint32_t pc[3] = {256, nb, fmt}, groups = fmt ? nb : (nb + 7) / 8;
        const void *pcs[1] = {pc};
        if (gt_vk_kernel_run(&k, 1, pcs, &groups, &e)) rc = fail(e.msg);
        else
            rc = compare((const float *)xb->map, aq, ad, (int)fmt, (int64_t)nb * (fmt ? 256 : 32));
        if (!rc)
            printf("test_vk_actq: fmt %u, %u blocks, division guesses off %u: the CPU's bits\n",
                   fmt, nb, off);
    }
    gt_vk_kernel_free(&k);
    return rc;
}

static int run(void) {
    gt_err err = {0};
    const gt_dev_options vo = {0};
    gt_vk_ctx *c = NULL;
    if (gt_vk_ctx_create(&vo, &c, &err) != GEIST_OK) return fail(err.msg);
    hbuf xb, aq, ad;
    int rc = 0;
    if (hbuf_make(c, N * 4, &xb) || hbuf_make(c, N, &aq) || hbuf_make(c, N / 32 * 4, &ad)) {
        rc = fail("buffers");
    } else {
        fill((float *)xb.map);
        /* 1, 2: the division's corrections run on every division (lavapipe's guesses are exact) */
        for (uint32_t off = 0; off < 3 && !rc; off++) rc = run_with(c, off, &xb, &aq, &ad);
    }
    hbuf_free(c, &xb);
    hbuf_free(c, &aq);
    hbuf_free(c, &ad);
    gt_vk_ctx_free(c);
    if (!rc) printf("test_vk_actq: ok\n");
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "run") != 0) {
        printf("test_vk_actq: skipped (run by tests/core/test_vulkan.py, which pins lavapipe)\n");
        return 0;
    }
    return run();
}
#else
int main(void) {
    printf("test_vk_actq: skipped (built without Vulkan, or the clock build)\n");
    return 0;
}
#endif
