/* Which backends exist and which one "auto" means. */
#include <string.h>

#include "backend.h"

const gt_backend *gt_backend_find(const char *name) {
    const gt_backend *all[] = {gt_backend_cpu_scalar()};
    if (name == NULL || strcmp(name, "auto") == 0) {
        /* Best first: later backends are listed before cpu_scalar once they exist. */
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (all[i]->available()) return all[i];
        return NULL;
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0) return all[i];
    return NULL;
}

const char *gt_backend_names(void) { return "cpu_scalar"; }
