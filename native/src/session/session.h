/* A session: one conversation's KV cache and position, sized from its own max_seq_len. */
#ifndef GEIST_SESSION_H
#define GEIST_SESSION_H

#include <pthread.h>
#include <stdbool.h>

#include "../model/model.h"

typedef struct gt_kv_layer {
    void *k, *v;   /* rows x (n_head_kv * head_dim) elements of the session's KV type */
    int32_t rows;  /* max_seq_len, or min(window, max_seq_len) for sliding-window layers */
    bool ring;     /* position p lives in row p % rows */
} gt_kv_layer;

struct geist_session {
    geist_model *model;
    int32_t max_seq_len;
    int32_t kv_mode;
    uint64_t seed;
    int32_t n_past;
    gt_kv_layer *kv;
    uint64_t kv_bytes;
    float *logits; /* n_vocab: logits after the last token */
    bool has_logits;
    pthread_mutex_t err_lock;
    gt_err last_err;
};

/* Runs n tokens through the model at positions n_past.. (the caller checked ids and capacity).
 * all_logits: NULL, or n * n_vocab floats for every position. Always updates s->logits. */
geist_status gt_forward(geist_session *s, const int32_t *ids, int32_t n, float *all_logits,
                        gt_err *err);

/* Bytes of one KV element in a mode. */
size_t gt_kv_elem_size(int32_t kv_mode);

#endif
