/* FNV-1a style 64-bit hash over 8-byte words: the model identity of session snapshots (over the
 * GGUF header, metadata and tensor table), shared prefixes' identity and snapshot checksums. */
#ifndef GEIST_HASH_H
#define GEIST_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t gt_hash64(uint64_t h, const void *data, size_t n);
#define GT_HASH64_INIT 0xcbf29ce484222325ull

#endif
