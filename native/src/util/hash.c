#include "hash.h"

#include <string.h>

uint64_t gt_hash64(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    const uint64_t prime = 0x100000001b3ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * prime;
    }
    for (; i < n; i++) h = (h ^ p[i]) * prime;
    return h;
}
