/* Which backends exist and which one "auto" means. */
#include <string.h>

#include "backend.h"
#include "cpu_x86/backend_x86.h"

const gt_backend *gt_backend_find(const char *name) {
    /* best first: "auto" takes the first available one */
    const gt_backend *all[] = {gt_backend_cpu_x86(), gt_backend_cpu_scalar()};
    if (name == NULL || strcmp(name, "auto") == 0) {
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (all[i]->available()) return all[i];
        return NULL;
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0) return all[i];
    /* forced cpu_x86 variants (tests compare them); findable, not listed */
    if (strcmp(name, "cpu_x86_avx2") == 0) return gt_backend_cpu_x86_avx2();
    if (strcmp(name, "cpu_x86_avx512") == 0) return gt_backend_cpu_x86_avx512();
    return NULL;
}

const char *gt_backend_names(void) { return "cpu_x86,cpu_scalar"; }
