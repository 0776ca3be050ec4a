/* NPC actions in the generation loop (actions.h). */
#include "actions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../chat/actions.h"
#include "../util/json.h"
#include "../grammar/json_schema.h"

static bool name_ok(const char *s) {
    if (!s || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_')) return false;
    size_t i = 1;
    for (; s[i]; i++) {
        const char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
        if (i >= 64) return false;
    }
    return true;
}

/* The schema must describe an object: a JSON object whose "type", when given, is "object". */
static geist_status schema_is_object(const geist_action *a, gt_err *err) {
    gt_json *root = NULL;
    gt_err jerr = {0};
    if (gt_json_parse(a->parameters, strlen(a->parameters), &root, &jerr) != GEIST_OK)
        return gt_fail(err, jerr.status == GEIST_ERR_OUT_OF_MEMORY ? GEIST_ERR_OUT_OF_MEMORY
                                                                   : GEIST_ERR_INVALID_ARGUMENT,
                       "action '%s': parameters is not JSON: %s", a->name, jerr.msg);
    const gt_json *t = root->type == GT_JSON_OBJECT ? gt_json_get(root, "type") : NULL;
    const bool ok = root->type == GT_JSON_OBJECT &&
                    (!t || (t->type == GT_JSON_STRING && strcmp(t->str, "object") == 0));
    gt_json_free(root);
    if (!ok)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "action '%s': parameters must be a JSON Schema of an object "
                       "({\"type\": \"object\", \"properties\": {...}})",
                       a->name);
    return GEIST_OK;
}

static bool has_params(const geist_action *a) {
    return a->parameters && a->parameters[strspn(a->parameters, " \t\r\n")] != '\0';
}

geist_status gt_actions_grammar(const geist_action *a, size_t n, int32_t choice, char **gbnf,
                                gt_err *err) {
    *gbnf = NULL;
    if (n == 0 || n > GEIST_MAX_ACTIONS || !a)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "actions: give 1..%d actions (got %zu)", GEIST_MAX_ACTIONS, n);
    if (choice != GEIST_ACTION_AUTO && choice != GEIST_ACTION_REQUIRED)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "actions: action_choice must be GEIST_ACTION_AUTO or "
                       "GEIST_ACTION_REQUIRED (got %d)",
                       choice);
    for (size_t i = 0; i < n; i++) {
        if (!name_ok(a[i].name))
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                           "action %zu: the name must match [A-Za-z_][A-Za-z0-9_]{0,63} (got "
                           "'%.80s')",
                           i, a[i].name ? a[i].name : "(null)");
        for (size_t j = 0; j < i; j++)
            if (strcmp(a[i].name, a[j].name) == 0)
                return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                               "actions %zu and %zu are both named '%s'", j, i, a[i].name);
        if (has_params(a + i)) {
            geist_status st = schema_is_object(a + i, err);
            if (st != GEIST_OK) return st;
        }
    }
    gt_text g = {0};
    bool ok = gt_text_appendf(
        &g, "%s\nspeech ::= [^<\\n]*\ncall ::= \"%s\" (",
        choice == GEIST_ACTION_REQUIRED ? "root ::= (speech \"\\n\")? call"
                                        : "root ::= speech (\"\\n\" call)? | call",
        GT_ACTION_MARKER);
    for (size_t i = 0; i < n && ok; i++) ok = gt_text_appendf(&g, "%sact%zu", i ? " | " : "", i);
    ok = ok && gt_text_appendf(&g, ")\n");
    for (size_t i = 0; i < n && ok; i++) {
        /* names are [A-Za-z0-9_]: no escaping inside the literal */
        ok = gt_text_appendf(&g, "act%zu ::= \"{\\\"name\\\":\\\"%s\\\",\\\"arguments\\\":\" ",
                             i, a[i].name);
        if (!ok) break;
        if (!has_params(a + i)) {
            ok = gt_text_appendf(&g, "\"{}\" \"}\"\n");
            continue;
        }
        char root[32];
        snprintf(root, sizeof root, "act%zu-args", i);
        ok = gt_text_appendf(&g, "%s \"}\"\n", root);
        gt_err serr = {0};
        if (ok && gt_json_schema_to_gbnf(a[i].parameters, strlen(a[i].parameters), root, &g,
                                         &serr) != GEIST_OK) {
            gt_text_free(&g);
            return gt_fail(err, serr.status, "action '%s': parameters: %s", a[i].name, serr.msg);
        }
        ok = ok && gt_text_appendf(&g, "\n");
    }
    if (!ok || !g.p) {
        gt_text_free(&g);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (the actions' grammar)");
    }
    *gbnf = g.p; /* moved */
    return GEIST_OK;
}

bool gt_actions_parse_call(const char *text, size_t len, const geist_action *a, size_t n,
                           const char **json, size_t *json_len) {
    size_t b = 0, e = len;
    while (b < e && strchr(" \t\r\n", text[b])) b++;
    while (e > b && strchr(" \t\r\n", text[e - 1])) e--;
    if (b == e || text[b] != '{') return false;
    gt_json *root = NULL;
    gt_err ignored = {0};
    if (gt_json_parse(text + b, e - b, &root, &ignored) != GEIST_OK) return false;
    bool ok = root->type == GT_JSON_OBJECT && root->len == 2;
    const gt_json *name = ok ? gt_json_get(root, "name") : NULL;
    const gt_json *args = ok ? gt_json_get(root, "arguments") : NULL;
    ok = name && args && name->type == GT_JSON_STRING && args->type == GT_JSON_OBJECT;
    bool known = false;
    for (size_t i = 0; ok && i < n && !known; i++)
        known = strlen(a[i].name) == name->len && memcmp(a[i].name, name->str, name->len) == 0;
    gt_json_free(root);
    if (!ok || !known) return false;
    *json = text + b;
    *json_len = e - b;
    return true;
}
