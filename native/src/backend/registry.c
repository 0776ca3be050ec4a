/* Which backends exist and which one "auto" means. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_neon/backend_neon.h"
#include "cpu_x86/backend_x86.h"
#include "util/platform.h"

const gt_backend *gt_backend_find(const char *name) {
    /* best first: "auto" takes the first available one */
    const gt_backend *all[] = {gt_backend_cpu_x86(), gt_backend_cpu_neon(), gt_backend_cpu_scalar()};
    if (name == NULL || strcmp(name, "auto") == 0) {
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (all[i]->available()) return all[i];
        return NULL;
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0) return all[i];
#ifdef GEIST_HAVE_VULKAN
    /* by name only: "auto" stays on the CPU (a GPU is the game's explicit choice) */
    if (strcmp(name, "vulkan") == 0) return gt_backend_vulkan();
#endif
#ifdef GEIST_HAVE_METAL
    if (strcmp(name, "metal") == 0) return gt_backend_metal(); /* by name only, as vulkan */
#endif
    /* forced cpu_x86 variants (tests compare them); findable, not listed */
    if (strcmp(name, "cpu_x86_avx2") == 0) return gt_backend_cpu_x86_avx2();
    if (strcmp(name, "cpu_x86_avx512") == 0) return gt_backend_cpu_x86_avx512();
    if (strcmp(name, "cpu_neon_plain") == 0) return gt_backend_cpu_neon_plain();
    if (strcmp(name, "cpu_neon_dotprod") == 0) return gt_backend_cpu_neon_dotprod();
    if (strcmp(name, "cpu_neon_i8mm") == 0) return gt_backend_cpu_neon_i8mm();
    return NULL;
}

#ifdef GEIST_HAVE_VULKAN
#define GT_VULKAN_NAME ",vulkan"
#else
#define GT_VULKAN_NAME ""
#endif
#ifdef GEIST_HAVE_METAL
#define GT_METAL_NAME ",metal"
#else
#define GT_METAL_NAME ""
#endif

const char *gt_backend_names(void) { return "cpu_x86,cpu_neon,cpu_scalar" GT_VULKAN_NAME GT_METAL_NAME; }

#ifndef GEIST_HAVE_VULKAN
const gt_backend *gt_backend_vulkan(void) { return NULL; }
#endif
#ifndef GEIST_HAVE_METAL
const gt_backend *gt_backend_metal(void) { return NULL; }
#endif

bool gt_backend_matmul_via_q(const gt_backend *be, const gt_weight *w, const float *x,
                             int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    if (be->act_row_bytes == NULL || n_tok <= 0) return false;
    const size_t rb = be->act_row_bytes(w->type, w->n_in);
    if (rb == 0) return false;
    void *xq = gt_aligned_alloc(64, rb * (size_t)n_tok);
    if (xq == NULL) return false;
    be->quantize_acts(w->type, x, n_tok, w->n_in, xq);
    be->matmul_q(w, xq, n_tok, y, ldy, r0, r1);
    gt_aligned_free(xq);
    return true;
}
