/* NPC actions in the prompt (actions.h). */
#include "actions.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    size_t need;
    if (!gt_add_size(b->n, n + 1, &need)) {
        b->oom = true;
        return;
    }
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* The schema text with every run of whitespace outside string literals folded to one space
 * (the prompt stays one line per action), trimmed. */
static void sb_schema(sbuf *b, const char *s) {
    bool in_str = false, esc = false, space = false;
    size_t start = b->n;
    for (; *s; s++) {
        const char c = *s;
        if (in_str) {
            sb_put(b, s, 1);
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            space = true;
            continue;
        }
        if (space && b->n > start) sb_put(b, " ", 1);
        space = false;
        sb_put(b, s, 1);
        if (c == '"') in_str = true;
    }
}

/* A description on one line: newlines become spaces. */
static void sb_line(sbuf *b, const char *s) {
    for (; *s; s++) sb_put(b, (*s == '\n' || *s == '\r') ? " " : s, 1);
}

/* The reply-format line: "Reply in character ... <call>{"name":"<first>","arguments":{...}}". */
static void sb_format(sbuf *b, const geist_action *a, int32_t choice) {
    sb_str(b, choice == GEIST_ACTION_REQUIRED
                  ? "Reply in character in one short line, then act on a second line: "
                  : "Reply in character in one short line. To act, add a second line: ");
    sb_str(b, GT_ACTION_MARKER "{\"name\":\"");
    sb_str(b, a[0].name);
    sb_str(b, "\",\"arguments\":{...}}");
}

static geist_status sb_finish(sbuf *b, char **out, size_t *len, gt_err *err) {
    if (b->oom || !b->p) {
        free(b->p);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (the actions' prompt)");
    }
    *out = b->p;
    *len = b->n;
    return GEIST_OK;
}

geist_status gt_chat_actions_section(const geist_action *a, size_t n, int32_t choice, char **out,
                                     size_t *len, gt_err *err) {
    *out = NULL;
    *len = 0;
    sbuf b = {0};
    sb_str(&b, "\n\nThe game lets you act. Your actions:\n");
    for (size_t i = 0; i < n; i++) {
        sb_str(&b, "- ");
        sb_str(&b, a[i].name);
        sb_str(&b, ":");
        if (a[i].description && a[i].description[0]) {
            sb_str(&b, " ");
            sb_line(&b, a[i].description);
        }
        if (a[i].parameters && a[i].parameters[strspn(a[i].parameters, " \t\r\n")]) {
            sb_str(&b, " Arguments: ");
            sb_schema(&b, a[i].parameters);
        } else {
            sb_str(&b, " No arguments.");
        }
        sb_str(&b, "\n");
    }
    sb_format(&b, a, choice);
    return sb_finish(&b, out, len, err);
}

geist_status gt_chat_actions_format(const geist_action *a, size_t n, int32_t choice, char **out,
                                    size_t *len, gt_err *err) {
    *out = NULL;
    *len = 0;
    (void)n;
    sbuf b = {0};
    sb_str(&b, "\n\n");
    sb_format(&b, a, choice);
    return sb_finish(&b, out, len, err);
}

/* s as a JSON string literal. */
static void sb_json_str(sbuf *b, const char *s) {
    sb_str(b, "\"");
    for (; s && *s; s++) {
        const unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            sb_str(b, esc);
        } else {
            sb_put(b, s, 1);
        }
    }
    sb_str(b, "\"");
}

/* Every number of v is an integer the template engine can hold (64 bits). */
static bool ints_only(const gt_json *v) {
    if (v->type == GT_JSON_NUMBER) {
        if (!v->is_int) return false;
        errno = 0;
        char *end = NULL;
        (void)strtoll(v->num_text, &end, 10);
        return errno == 0 && end && *end == '\0';
    }
    for (const gt_json *c = v->child; c; c = c->next)
        if (!ints_only(c)) return false;
    return true;
}

geist_status gt_chat_actions_tools(const geist_action *a, size_t n, gt_json **out, gt_err *err) {
    *out = NULL;
    sbuf b = {0};
    sb_str(&b, "[");
    for (size_t i = 0; i < n; i++) {
        sb_str(&b, i ? ", " : "");
        sb_str(&b, "{\"type\": \"function\", \"function\": {\"name\": ");
        sb_json_str(&b, a[i].name);
        sb_str(&b, ", \"description\": ");
        sb_json_str(&b, a[i].description ? a[i].description : "");
        sb_str(&b, ", \"parameters\": ");
        const char *p = a[i].parameters;
        if (p && p[strspn(p, " \t\r\n")]) sb_str(&b, p);
        else sb_str(&b, "{\"type\": \"object\", \"properties\": {}}");
        sb_str(&b, "}}");
    }
    sb_str(&b, "]");
    if (b.oom || !b.p) {
        free(b.p);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (the actions' tools)");
    }
    gt_json *j = NULL;
    geist_status st = gt_json_parse(b.p, b.n, &j, err);
    free(b.p);
    if (st != GEIST_OK) return st;
    if (!ints_only(j)) {
        gt_json_free(j);
        return GEIST_OK;
    }
    *out = j;
    return GEIST_OK;
}

geist_status gt_chat_messages_with_actions(const geist_chat_message *msgs, size_t n,
                                           const char *section, geist_chat_message **view,
                                           size_t *n_view, char **owned, int *inserted,
                                           gt_err *err) {
    *view = NULL;
    *owned = NULL;
    *n_view = 0;
    *inserted = 0;
    size_t sys = n;
    for (size_t i = 0; i < n && sys == n; i++)
        if (strcmp(msgs[i].role, "system") == 0) sys = i;
    const bool add = sys == n;
    geist_chat_message *v = gt_malloc_array(n + 1, sizeof *v);
    const char *base = add ? "" : msgs[sys].content;
    /* a new system message holds the section without its leading blank line */
    const char *sec = add ? section + strspn(section, "\n") : section;
    const size_t lb = strlen(base), ls = strlen(sec);
    char *c = malloc(lb + ls + 1);
    if (!v || !c) {
        free(v);
        free(c);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (the actions' prompt)");
    }
    memcpy(c, base, lb);
    memcpy(c + lb, sec, ls + 1);
    size_t k = 0;
    if (add) v[k++] = (geist_chat_message){"system", c};
    for (size_t i = 0; i < n; i++) {
        v[k] = msgs[i];
        if (!add && i == sys) v[k].content = c;
        k++;
    }
    *view = v;
    *n_view = k;
    *owned = c;
    *inserted = add;
    return GEIST_OK;
}
