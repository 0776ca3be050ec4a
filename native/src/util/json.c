/* A small JSON reader (json.h). */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jp {
    const char *s;
    size_t n, i;
    gt_err *err;
    int depth;
} jp;

static geist_status jfail(jp *p, const char *what) {
    return gt_fail(p->err, GEIST_ERR_INVALID_ARGUMENT, "JSON: %s at byte %zu", what, p->i);
}

static void skip_ws(jp *p) {
    while (p->i < p->n) {
        const char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->i++;
    }
}

static gt_json *new_node(void) { return calloc(1, sizeof(gt_json)); }

void gt_json_free(gt_json *v) {
    while (v) {
        gt_json *next = v->next;
        gt_json_free(v->child);
        free((void *)v->str);
        free((void *)v->key);
        free((void *)v->num_text);
        free(v);
        v = next;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *d, uint32_t cp) {
    if (cp < 0x80) { d[0] = (char)cp; return 1; }
    if (cp < 0x800) { d[0] = (char)(0xC0 | (cp >> 6)); d[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        d[0] = (char)(0xE0 | (cp >> 12)); d[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (char)(0xF0 | (cp >> 18)); d[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); d[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of a valid UTF-8 sequence at s[0..n), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    const unsigned c = s[0];
    size_t l;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { l = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { l = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { l = 4; cp = c & 0x07; }
    else return 0;
    if (l > n) return 0;
    for (size_t k = 1; k < l; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    if ((l == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (l == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return l;
}

static geist_status parse_string(jp *p, const char **out, size_t *out_len) {
    p->i++; /* the quote */
    size_t end = p->i; /* the unescaped text is never longer than the escaped */
    while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end > p->n) end = p->n;
    char *d = malloc(end - p->i + 1);
    if (!d) return gt_fail(p->err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (JSON)");
    size_t k = 0;
    while (true) {
        if (p->i >= p->n) { free(d); return jfail(p, "unterminated string"); }
        const unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') { p->i++; break; }
        if (c < 0x20) { free(d); return jfail(p, "control character in string"); }
        if (c == '\\') {
            if (p->i + 1 >= p->n) { free(d); return jfail(p, "unterminated escape"); }
            const char e = p->s[p->i + 1];
            p->i += 2;
            switch (e) {
            case '"': d[k++] = '"'; break;
            case '\\': d[k++] = '\\'; break;
            case '/': d[k++] = '/'; break;
            case 'b': d[k++] = '\b'; break;
            case 'f': d[k++] = '\f'; break;
            case 'n': d[k++] = '\n'; break;
            case 'r': d[k++] = '\r'; break;
            case 't': d[k++] = '\t'; break;
            case 'u': {
                uint32_t cp = 0;
                for (int j = 0; j < 4; j++) {
                    const int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
                    if (h < 0) { free(d); return jfail(p, "bad \\u escape"); }
                    cp = cp * 16 + (uint32_t)h;
                    p->i++;
                }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo = 0;
                    if (p->i + 6 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u') {
                        free(d);
                        return jfail(p, "unpaired surrogate");
                    }
                    p->i += 2;
                    for (int j = 0; j < 4; j++) {
                        const int h = hexval(p->s[p->i]);
                        if (h < 0) { free(d); return jfail(p, "bad \\u escape"); }
                        lo = lo * 16 + (uint32_t)h;
                        p->i++;
                    }
                    if (lo < 0xDC00 || lo > 0xDFFF) { free(d); return jfail(p, "unpaired surrogate"); }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    free(d);
                    return jfail(p, "unpaired surrogate");
                }
                k += put_utf8(d + k, cp); /* 6 escape bytes produce at most 4 */
                break;
            }
            default: free(d); return jfail(p, "unknown escape");
            }
            continue;
        }
        const size_t l = utf8_len((const unsigned char *)p->s + p->i, p->n - p->i);
        if (l == 0) { free(d); return jfail(p, "invalid UTF-8"); }
        memcpy(d + k, p->s + p->i, l);
        k += l;
        p->i += l;
    }
    d[k] = '\0';
    *out = d;
    *out_len = k;
    return GEIST_OK;
}

static geist_status parse_value(jp *p, gt_json *v);

static geist_status parse_number(jp *p, gt_json *v) {
    const size_t start = p->i;
    bool is_int = true;
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    if (p->i >= p->n) return jfail(p, "bad number");
    if (p->s[p->i] == '0') p->i++;
    else if (p->s[p->i] >= '1' && p->s[p->i] <= '9')
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    else return jfail(p, "bad number");
    if (p->i < p->n && p->s[p->i] == '.') {
        is_int = false;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jfail(p, "bad number");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        is_int = false;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jfail(p, "bad number");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    const size_t len = p->i - start;
    char *t = malloc(len + 1);
    if (!t) return gt_fail(p->err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (JSON)");
    memcpy(t, p->s + start, len);
    t[len] = '\0';
    v->type = GT_JSON_NUMBER;
    v->num_text = t;
    v->num = strtod(t, NULL);
    v->is_int = is_int;
    return GEIST_OK;
}

static geist_status parse_list(jp *p, gt_json *v, bool object) {
    if (++p->depth > GT_JSON_MAX_DEPTH) return jfail(p, "nesting deeper than 100");
    const char close = object ? '}' : ']';
    v->type = object ? GT_JSON_OBJECT : GT_JSON_ARRAY;
    p->i++;
    skip_ws(p);
    gt_json **tail = &v->child;
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        p->depth--;
        return GEIST_OK;
    }
    while (true) {
        gt_json *c = new_node();
        if (!c) return gt_fail(p->err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (JSON)");
        *tail = c;
        tail = &c->next;
        v->len++;
        geist_status st;
        if (object) {
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != '"') return jfail(p, "expected a member name");
            st = parse_string(p, &c->key, &c->key_len);
            if (st != GEIST_OK) return st;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') return jfail(p, "expected ':'");
            p->i++;
        }
        st = parse_value(p, c);
        if (st != GEIST_OK) return st;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
        if (p->i < p->n && p->s[p->i] == close) { p->i++; break; }
        return jfail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    p->depth--;
    return GEIST_OK;
}

static bool lit(jp *p, const char *w) {
    const size_t l = strlen(w);
    if (p->n - p->i < l || memcmp(p->s + p->i, w, l) != 0) return false;
    p->i += l;
    return true;
}

static geist_status parse_value(jp *p, gt_json *v) {
    skip_ws(p);
    if (p->i >= p->n) return jfail(p, "expected a value");
    const char c = p->s[p->i];
    if (c == '{') return parse_list(p, v, true);
    if (c == '[') return parse_list(p, v, false);
    if (c == '"') {
        v->type = GT_JSON_STRING;
        return parse_string(p, &v->str, &v->len);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
    if (lit(p, "true")) { v->type = GT_JSON_BOOL; v->b = true; return GEIST_OK; }
    if (lit(p, "false")) { v->type = GT_JSON_BOOL; return GEIST_OK; }
    if (lit(p, "null")) { v->type = GT_JSON_NULL; return GEIST_OK; }
    return jfail(p, "unexpected character");
}

geist_status gt_json_parse(const char *text, size_t len, gt_json **out, gt_err *err) {
    *out = NULL;
    if (!text && len) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "JSON: text is NULL");
    jp p = {.s = text, .n = len, .i = 0, .err = err, .depth = 0};
    gt_json *root = new_node();
    if (!root) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (JSON)");
    geist_status st = parse_value(&p, root);
    if (st == GEIST_OK) {
        skip_ws(&p);
        if (p.i != p.n) st = jfail(&p, "text after the value");
    }
    if (st != GEIST_OK) {
        gt_json_free(root);
        return st;
    }
    *out = root;
    return GEIST_OK;
}

const gt_json *gt_json_get(const gt_json *obj, const char *key) {
    if (!obj || obj->type != GT_JSON_OBJECT) return NULL;
    const gt_json *found = NULL;
    const size_t kl = strlen(key);
    for (const gt_json *c = obj->child; c; c = c->next)
        if (c->key_len == kl && memcmp(c->key, key, kl) == 0) found = c;
    return found;
}
