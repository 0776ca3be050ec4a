/* Shared prefixes: reference counting used by sessions (prefix.c). */
#ifndef GEIST_PREFIX_H
#define GEIST_PREFIX_H

#include "session.h"

void gt_prefix_retain(struct geist_prefix *p);
/* Drops one reference; frees the prefix when it was the last. */
void gt_prefix_release(struct geist_prefix *p);

#endif
