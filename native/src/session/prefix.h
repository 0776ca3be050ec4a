/* Shared prefixes (prefix.c): creation, reference counting used by sessions, accounting. */
#ifndef GEIST_PREFIX_H
#define GEIST_PREFIX_H

#include "session.h"

/* A frozen session holding ids[0..n) (the caller checked model, ids and out). */
geist_status gt_prefix_create(geist_model *model, const int32_t *ids, size_t n, int32_t kv_mode,
                              geist_prefix **out, gt_err *err);
void gt_prefix_retain(struct geist_prefix *p);
/* Drops one reference; frees the prefix when it was the last. */
void gt_prefix_release(struct geist_prefix *p);
void gt_prefix_memory(const geist_prefix *p, geist_memory_report *out);

#endif
