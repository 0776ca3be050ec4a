/* A session: one conversation's KV cache and position, sized from its own max_seq_len. */
#ifndef GEIST_SESSION_H
#define GEIST_SESSION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "../model/model.h"

/* KIVI: tokens per quantized block (K is quantized per channel over these tokens). */
#define GT_KIVI_GROUP 32
/* INT4 / KIVI-V: channels per scale group. */
#define GT_QGROUP 32

/* Storage of one layer's K and V. Positions are counted from the start of this storage (a
 * session on a shared prefix stores positions n_prefix.. at storage position 0..).
 *
 * Row modes (F32, F16, INT8, INT4): k and v hold `rows` records of krow / vrow bytes; storage
 * position p lives in record p (or p % rows on a ring).
 * KIVI: k holds rows / GT_KIVI_GROUP blocks of kblock bytes (per KV head: per channel a min, a
 * scale and GT_KIVI_GROUP 2-bit codes); v holds `rows` per-token records of vrow bytes; rk / rv
 * hold the newest GT_KIVI_GROUP tokens as F16 (the residual) until their block is complete. */
typedef struct gt_kv_layer {
    void *k, *v;
    uint16_t *rk, *rv; /* KIVI residual, GT_KIVI_GROUP rows each, else NULL */
    int32_t rows;      /* positions held: max rows, or the ring size (KIVI: a multiple of G) */
    bool ring;         /* storage position p lives in row p % rows */
} gt_kv_layer;

/* Byte geometry of one mode for one model (kv.c). */
typedef struct gt_kv_geom {
    int32_t mode;
    size_t krow, vrow; /* bytes per position (KIVI: vrow only; K is in blocks) */
    size_t kblock;     /* KIVI: bytes of one K block of GT_KIVI_GROUP tokens, else 0 */
    size_t resid_row_k, resid_row_v; /* KIVI: residual bytes per position, else 0 */
} gt_kv_geom;

struct geist_prefix {
    geist_model *model;
    atomic_int refs;         /* the creator's reference + one per session on it */
    struct geist_session *s; /* the frozen session holding the prefix KV (never written again) */
    uint64_t identity;       /* hash of model identity, kv mode and the prefix ids */
};

struct geist_session {
    geist_model *model;
    int32_t max_seq_len;
    int32_t kv_mode;
    uint64_t seed;
    int32_t n_past;  /* positions held, the prefix's included */
    int32_t *ids;    /* max_seq_len: the token at each own position (index pos - n_prefix) */
    gt_kv_layer *kv; /* own storage: positions n_prefix.. */
    gt_kv_geom geom;
    uint64_t kv_bytes;
    struct geist_prefix *prefix; /* shared read-only prefix, or NULL */
    int32_t n_prefix;            /* tokens of the prefix (0 without one) */
    int32_t n_floor; /* own positions below this may be missing on sliding layers (restore) */
    float *logits;               /* n_vocab: logits after the last token */
    gt_dev_kv *dev_kv;           /* a device backend's KV of this session (backend.h), else NULL */
    bool has_logits;
    /* the last row's logits stayed on the device, its greedy id came back instead (a runtime
     * request's pick: forward.c); gt_session_bring_logits recomputes them when asked for */
    bool logits_on_device;
    bool logits_on_kv; /* logits is the device KV's (gt_device_ops.kv_logits), not malloc'd */
    pthread_mutex_t err_lock;
    gt_err last_err;
};

/* Runs n tokens through the model at positions n_past.. (the caller checked ids and capacity).
 * all_logits: NULL, or n * n_vocab floats for every position. Always updates s->logits. */
geist_status gt_forward(geist_session *s, const int32_t *ids, int32_t n, float *all_logits,
                        gt_err *err);

/* Bytes of one F32/F16 KV element (other modes: see gt_kv_geom). */
size_t gt_kv_elem_size(int32_t kv_mode);

/* Records ids as the tokens of positions n_past.. (call before advancing n_past; snapshots and
 * geist_session_tokens read them). Every path that appends tokens must call it. */
void gt_session_note_tokens(geist_session *s, const int32_t *ids, int32_t n);

/* Records err as the session's last error and this thread's; returns err->status. */
geist_status gt_session_fail(geist_session *s, const gt_err *err);

/* Allocates a session's storage (kv.c / session.c internals shared with snapshot.c, prefix.c). */
geist_status gt_session_new(geist_model *model, int32_t max_seq_len, int32_t kv_mode,
                            uint64_t seed, struct geist_prefix *prefix, geist_session **out,
                            gt_err *err);

/* Frees the session and drops its model reference. The API tells the runtime first (a session
 * with a handle may have a request); the runtime sits above session/, so this does not. */
void gt_session_destroy(geist_session *s);

/* Runs ids[0..n) at n_past.. after checking them (n >= 1, ids not NULL, room, ids in the
 * vocabulary). all_logits as gt_forward. */
geist_status gt_session_run(geist_session *s, const int32_t *ids, size_t n, float *all_logits,
                            gt_err *err);
/* Back to the prefix (or empty), its logits restored. */
void gt_session_reset(geist_session *s);
/* When the last row's logits stayed on the device (logits_on_device: a decode row, one row of
 * its session in its step), runs that row's token again at its position, alone as it ran, so
 * that s->logits hold them (the same bits: a row's result does not depend on the other
 * sessions' rows in its step); else nothing. Every reader of s->logits calls it first; on a
 * failure the session is as it was. */
geist_status gt_session_bring_logits(geist_session *s, gt_err *err);
/* Writes the n_past ids (the prefix's, then the own) to ids. */
void gt_session_copy_tokens(const geist_session *s, int32_t *ids);
void gt_session_memory(const geist_session *s, geist_memory_report *out);

/* Snapshots, fork and truncate (snapshot.c); errors through err only (the API records them on
 * the session). snapshot sets *needed before failing with GEIST_ERR_BUFFER_TOO_SMALL. */
geist_status gt_session_snapshot(geist_session *s, void *buf, size_t cap, size_t *needed,
                                 gt_err *err);
geist_status gt_session_restore(geist_session *s, const void *image, size_t size, gt_err *err);
geist_status gt_session_fork(geist_session *s, geist_session **out, gt_err *err);
geist_status gt_session_truncate(geist_session *s, int32_t n, gt_err *err);

#endif
