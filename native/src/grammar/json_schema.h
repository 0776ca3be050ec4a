/* JSON Schema (the subset of docs/GRAMMAR.md) compiled to GBNF text, so a bigger GBNF grammar
 * (the NPC action format) can embed schemas. */
#ifndef GEIST_GRAMMAR_JSON_SCHEMA_H
#define GEIST_GRAMMAR_JSON_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include "../util/util.h"

/* A growable NUL-terminated text buffer (p may be NULL while n == 0). */
typedef struct gt_text {
    char *p;
    size_t n, cap;
} gt_text;
bool gt_text_append(gt_text *b, const char *s, size_t n); /* false: out of memory / too big */
bool gt_text_appendf(gt_text *b, const char *fmt, ...) GT_PRINTF(2, 3);
void gt_text_free(gt_text *b);

/* Appends GBNF rules for schema[0..len) to out. The schema's top rule is named root_name (a GBNF
 * rule name: [A-Za-z0-9-]+); every other rule it emits is named "<root_name>-<something>", so two
 * schemas with different root names can share one grammar. The rules accept compact JSON (no
 * whitespace between tokens; strings with JSON escapes). On error out is restored and err says
 * why: GEIST_ERR_INVALID_ARGUMENT (bad JSON, unknown or unsupported keyword, limits),
 * GEIST_ERR_OUT_OF_MEMORY. */
geist_status gt_json_schema_to_gbnf(const char *schema, size_t len, const char *root_name,
                                    gt_text *out, gt_err *err);

#endif
