/* NPC actions in the generation loop (geist.h, "Actions"): the checks of a request's action list,
 * the GBNF grammar of the reply format composed from the actions' parameter schemas (the grammar
 * room's JSON-Schema-to-GBNF), and the parse of the call line when the reply ends. */
#ifndef GEIST_GEN_ACTIONS_H
#define GEIST_GEN_ACTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"

/* Checks a[0..n) and choice as geist.h says (names, uniqueness, count, each schema an object
 * schema the grammar engine compiles) and composes the reply grammar: *gbnf is malloc'd GBNF text
 * (NUL-terminated). Errors: GEIST_ERR_INVALID_ARGUMENT naming the action, OUT_OF_MEMORY. */
geist_status gt_actions_grammar(const geist_action *a, size_t n, int32_t choice, char **gbnf,
                                gt_err *err);

/* The call of a finished reply: text[0..len) is what follows the marker. True when it is one
 * complete JSON object {"name": <one of a[].name>, "arguments": {...}} (surrounding whitespace
 * allowed); *json and *json_len then span the object within text. Never fails otherwise: a
 * malformed or truncated call is simply no call. */
bool gt_actions_parse_call(const char *text, size_t len, const geist_action *a, size_t n,
                           const char **json, size_t *json_len);

#endif
