/* The backend interface: every compute kernel the forward pass needs, behind one vtable, so that
 * cpu_x86, cpu_neon, vulkan and metal plug in beside cpu_scalar (the reference). A backend that
 * lacks an op leaves it to cpu_scalar's (gt_backend_fill_defaults). */
#ifndef GEIST_BACKEND_H
#define GEIST_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A weight matrix as a view into the model's span: n_out rows of n_in values of `type`. */
typedef struct gt_weight {
    const uint8_t *data; /* NULL: absent (optional tensors) */
    uint32_t type;
    int64_t n_in;
    int64_t n_out;
    size_t row_bytes;
} gt_weight;

typedef struct gt_backend {
    const char *name;
    /* Is this backend usable on the running machine? (CPU features, a device.) */
    bool (*available)(void);
    /* Y[t * ldy + r] = dot(W[r], X[t]) for r in [r0, r1), t in [0, n_tok). X is n_tok rows of
     * w->n_in floats. tmp: w->n_in floats of scratch owned by the caller. */
    void (*matmul)(const gt_weight *w, const float *x, int64_t n_tok, float *y, int64_t ldy,
                   int64_t r0, int64_t r1, float *tmp);
    /* Dequantizes row r of w into dst (w->n_in floats): embedding lookups. */
    void (*get_row)(const gt_weight *w, int64_t r, float *dst);
    float (*vec_dot)(uint32_t type, const void *row, const float *x, int64_t n);
} gt_backend;

const gt_backend *gt_backend_cpu_scalar(void);
/* cpu_scalar with exact float activations (GEIST_ACTIVATIONS_F32); see act_quant.h. */
const gt_backend *gt_backend_cpu_scalar_exact(void);
/* NULL if no backend of that name is compiled in. "auto" picks the best available. */
const gt_backend *gt_backend_find(const char *name);
/* Comma-separated names of the compiled-in backends. */
const char *gt_backend_names(void);

#endif
