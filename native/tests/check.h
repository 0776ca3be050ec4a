/* The C unit tests' check: a failed condition prints its place and text and counts in `fails`
 * (the test's main returns nonzero when any failed). */
#ifndef GEIST_TESTS_CHECK_H
#define GEIST_TESTS_CHECK_H
#include <stdio.h>

static int fails = 0;
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);                                    \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

#endif
