/* JSON Schema (the documented subset) to GBNF text (json_schema.h). Output JSON is compact: no
 * whitespace between tokens, properties in the schema's order. */
#include "json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "../util/json.h"

bool gt_text_append(gt_text *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        if (c > ((size_t)GT_GRAMMAR_MAX_TEXT) * 16) return false;
        char *p = realloc(b->p, c);
        if (!p) return false;
        b->p = p;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

bool gt_text_appendf(gt_text *b, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if ((size_t)n < sizeof buf) return gt_text_append(b, buf, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return false;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    const bool ok = gt_text_append(b, big, (size_t)n);
    free(big);
    return ok;
}

void gt_text_free(gt_text *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

typedef struct sc {
    gt_text *out;
    const char *root;
    uint32_t counter;
    bool need_char, need_value, need_number, need_int;
    gt_err *err;
    char path[256];
} sc;

static geist_status sfail(sc *c, const char *fmt, const char *arg) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg);
    return gt_fail(c->err, GEIST_ERR_INVALID_ARGUMENT, "JSON schema: %s (at %s)", msg,
                   c->path[0] ? c->path : "the top");
}

static geist_status soom(sc *c) { return gt_fail(c->err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (JSON schema)"); }

#define OUT(...) do { if (!gt_text_appendf(b, __VA_ARGS__)) return soom(c); } while (0)

/* Appends bytes as the inside of a GBNF string literal. */
static bool lit_bytes(gt_text *o, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == '"' || ch == '\\') { e[0] = '\\'; e[1] = (char)ch; if (!gt_text_append(o, e, 2)) return false; }
        else if (ch < 0x20 || ch == 0x7F) { snprintf(e, sizeof e, "\\x%02X", ch); if (!gt_text_append(o, e, 4)) return false; }
        else if (!gt_text_append(o, (const char *)&ch, 1)) return false;
    }
    return true;
}

/* Appends the compact JSON encoding of a string value (without quotes) to t. */
static bool json_escape(gt_text *t, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)s[i];
        char e[8];
        switch (ch) {
        case '"': if (!gt_text_append(t, "\\\"", 2)) return false; break;
        case '\\': if (!gt_text_append(t, "\\\\", 2)) return false; break;
        case '\n': if (!gt_text_append(t, "\\n", 2)) return false; break;
        case '\r': if (!gt_text_append(t, "\\r", 2)) return false; break;
        case '\t': if (!gt_text_append(t, "\\t", 2)) return false; break;
        case '\b': if (!gt_text_append(t, "\\b", 2)) return false; break;
        case '\f': if (!gt_text_append(t, "\\f", 2)) return false; break;
        default:
            if (ch < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", ch);
                if (!gt_text_append(t, e, 6)) return false;
            } else if (!gt_text_append(t, (const char *)&ch, 1)) {
                return false;
            }
        }
    }
    return true;
}

/* Compact JSON of a value (for enum/const). */
static bool json_dump(gt_text *t, const gt_json *v) {
    switch (v->type) {
    case GT_JSON_NULL: return gt_text_append(t, "null", 4);
    case GT_JSON_BOOL: return v->b ? gt_text_append(t, "true", 4) : gt_text_append(t, "false", 5);
    case GT_JSON_NUMBER: return gt_text_append(t, v->num_text, strlen(v->num_text));
    case GT_JSON_STRING: return gt_text_append(t, "\"", 1) && json_escape(t, v->str, v->len) && gt_text_append(t, "\"", 1);
    case GT_JSON_ARRAY:
    case GT_JSON_OBJECT: {
        const bool obj = v->type == GT_JSON_OBJECT;
        if (!gt_text_append(t, obj ? "{" : "[", 1)) return false;
        for (const gt_json *k = v->child; k; k = k->next) {
            if (k != v->child && !gt_text_append(t, ",", 1)) return false;
            if (obj && !(gt_text_append(t, "\"", 1) && json_escape(t, k->key, k->key_len) && gt_text_append(t, "\":", 2)))
                return false;
            if (!json_dump(t, k)) return false;
        }
        return gt_text_append(t, obj ? "}" : "]", 1);
    }
    }
    return false;
}

/* Emits a GBNF literal for the compact JSON of v. */
static geist_status emit_value_lit(sc *c, gt_text *b, const gt_json *v) {
    gt_text t = {0};
    if (!json_dump(&t, v)) { gt_text_free(&t); return soom(c); }
    OUT("\"");
    const bool ok = lit_bytes(b, t.p ? t.p : "", t.n);
    gt_text_free(&t);
    if (!ok) return soom(c);
    OUT("\"");
    return GEIST_OK;
}

/* ---- integer ranges as digit patterns ---- */

static int ndigits(uint64_t x) { int n = 1; while (x >= 10) { x /= 10; n++; } return n; }

/* Same-length digit strings lo..hi (leading zeros allowed inside): one GBNF expression. */
static geist_status same_len(sc *c, gt_text *b, const char *lo, const char *hi, int n) {
    if (n == 0) return GEIST_OK;
    if (lo[0] == hi[0]) {
        OUT("\"%c\" ", lo[0]);
        return same_len(c, b, lo + 1, hi + 1, n - 1);
    }
    bool lo_zero = true, hi_nine = true;
    for (int i = 1; i < n; i++) { lo_zero &= lo[i] == '0'; hi_nine &= hi[i] == '9'; }
    if (lo_zero && hi_nine) {
        OUT("[%c-%c]", lo[0], hi[0]);
        if (n > 1) OUT(" [0-9]{%d}", n - 1);
        OUT(" ");
        return GEIST_OK;
    }
    OUT("( ");
    char z[24], nine[24];
    memset(z, '0', (size_t)n - 1); z[n - 1] = '\0';
    memset(nine, '9', (size_t)n - 1); nine[n - 1] = '\0';
    char first_d = lo[0];
    bool first = true;
    if (!lo_zero) {
        OUT("\"%c\" ", lo[0]);
        geist_status st = same_len(c, b, lo + 1, nine, n - 1);
        if (st != GEIST_OK) return st;
        first_d++;
        first = false;
    }
    const char top = hi_nine ? hi[0] : (char)(hi[0] - 1);
    if (first_d <= top) {
        if (!first) OUT("| ");
        OUT("[%c-%c]", first_d, top);
        if (n > 1) OUT(" [0-9]{%d}", n - 1);
        OUT(" ");
        first = false;
    }
    if (!hi_nine) {
        if (!first) OUT("| ");
        OUT("\"%c\" ", hi[0]);
        geist_status st = same_len(c, b, z, hi + 1, n - 1);
        if (st != GEIST_OK) return st;
    }
    OUT(") ");
    return GEIST_OK;
}

/* Non-negative integers lo..hi (hi == UINT64_MAX: unbounded), canonical (no leading zeros). */
static geist_status uint_range(sc *c, gt_text *b, uint64_t lo, uint64_t hi) {
    OUT("( ");
    const int dl = ndigits(lo), dh = hi == UINT64_MAX ? 19 : ndigits(hi);
    bool first = true;
    for (int d = dl; d <= dh; d++) {
        uint64_t a = 1;
        for (int k = 1; k < d; k++) a *= 10;
        if (d == 1) a = 0;
        if (d == dl) a = lo;
        uint64_t z = 9;
        for (int k = 1; k < d; k++) z = z * 10 + 9;
        if (hi != UINT64_MAX && z > hi) z = hi;
        if (a > z) continue;
        char as[24], zs[24];
        snprintf(as, sizeof as, "%0*llu", d, (unsigned long long)a);
        snprintf(zs, sizeof zs, "%0*llu", d, (unsigned long long)z);
        if (!first) OUT("| ");
        first = false;
        geist_status st = same_len(c, b, as, zs, d);
        if (st != GEIST_OK) return st;
    }
    if (hi == UINT64_MAX) { /* 20 digits and more */
        if (!first) OUT("| ");
        OUT("[1-9] [0-9]{19} [0-9]* ");
    }
    OUT(") ");
    return GEIST_OK;
}

static geist_status emit_integer(sc *c, gt_text *b, const gt_json *s) {
    const gt_json *mn = gt_json_get(s, "minimum"), *mx = gt_json_get(s, "maximum");
    const gt_json *emn = gt_json_get(s, "exclusiveMinimum"), *emx = gt_json_get(s, "exclusiveMaximum");
    const gt_json *all[4] = {mn, mx, emn, emx};
    for (int i = 0; i < 4; i++)
        if (all[i] && (all[i]->type != GT_JSON_NUMBER || !(fabs(all[i]->num) < 9e18)))
            return sfail(c, "%s must be numbers below 9e18", "minimum/maximum");
    bool has_lo = false, has_hi = false;
    int64_t lo = 0, hi = 0;
    if (mn) { has_lo = true; lo = (int64_t)ceil(mn->num); }
    if (emn) { const int64_t x = (int64_t)floor(emn->num) + 1; if (!has_lo || x > lo) lo = x; has_lo = true; }
    if (mx) { has_hi = true; hi = (int64_t)floor(mx->num); }
    if (emx) { const int64_t x = (int64_t)ceil(emx->num) - 1; if (!has_hi || x < hi) hi = x; has_hi = true; }
    if (has_lo && has_hi && lo > hi) return sfail(c, "%s", "no integer lies within the bounds");
    if (!has_lo && !has_hi) {
        OUT("\"-\"? ( \"0\" | [1-9] [0-9]* ) ");
        return GEIST_OK;
    }
    OUT("( ");
    bool first = true;
    if (!has_lo || lo < 0) { /* negative part */
        const uint64_t nlo = has_hi && hi < 0 ? (uint64_t)(-hi) : 1;
        const uint64_t nhi = has_lo ? (uint64_t)(-lo) : UINT64_MAX;
        OUT("\"-\" ");
        geist_status st = uint_range(c, b, nlo, nhi);
        if (st != GEIST_OK) return st;
        first = false;
    }
    if (!has_hi || hi >= 0) {
        const uint64_t plo = has_lo && lo > 0 ? (uint64_t)lo : 0;
        const uint64_t phi = has_hi ? (uint64_t)hi : UINT64_MAX;
        if (!first) OUT("| ");
        geist_status st = uint_range(c, b, plo, phi);
        if (st != GEIST_OK) return st;
    }
    OUT(") ");
    return GEIST_OK;
}

static geist_status emit_number(sc *c, gt_text *b, const gt_json *s) {
    const gt_json *mn = gt_json_get(s, "minimum"), *mx = gt_json_get(s, "maximum");
    if (gt_json_get(s, "exclusiveMinimum") || gt_json_get(s, "exclusiveMaximum"))
        return sfail(c, "%s on a number is not supported (use integer, or minimum/maximum)",
                     "exclusiveMinimum/exclusiveMaximum");
    if (!mn && !mx) {
        OUT("\"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )? ");
        return GEIST_OK;
    }
    /* bounded numbers: whole, non-negative bounds; written without exponent */
    if ((mn && (mn->type != GT_JSON_NUMBER || mn->num != floor(mn->num) || !(mn->num >= 0 && mn->num < 1e15))) ||
        (mx && (mx->type != GT_JSON_NUMBER || mx->num != floor(mx->num) || !(mx->num >= 0 && mx->num < 1e15))))
        return sfail(c, "%s of a number must be whole numbers in [0, 1e15) (or use integer)", "minimum/maximum");
    const uint64_t lo = mn ? (uint64_t)mn->num : 0;
    if (!mx) {
        OUT("( ");
        geist_status st = uint_range(c, b, lo, UINT64_MAX);
        if (st != GEIST_OK) return st;
        OUT(") ( \".\" [0-9]+ )? ");
        return GEIST_OK;
    }
    const uint64_t hi = (uint64_t)mx->num;
    if (lo > hi) return sfail(c, "%s", "minimum > maximum");
    OUT("( ");
    if (hi > lo) {
        geist_status st = uint_range(c, b, lo, hi - 1);
        if (st != GEIST_OK) return st;
        OUT("( \".\" [0-9]+ )? | ");
    }
    OUT("\"%llu\" ( \".\" \"0\"+ )? ) ", (unsigned long long)hi);
    return GEIST_OK;
}

/* ---- schemas ---- */

static const char *const ignored_kw[] = {"title", "description", "$schema", "$id", "default",
                                         "examples", "$comment", "deprecated", "readOnly",
                                         "writeOnly"};

static bool is_ignored(const char *k) {
    for (size_t i = 0; i < sizeof ignored_kw / sizeof *ignored_kw; i++)
        if (strcmp(k, ignored_kw[i]) == 0) return true;
    return false;
}

static bool kw_in(const char *k, const char *const *list) {
    for (; *list; list++)
        if (strcmp(k, *list) == 0) return true;
    return false;
}

static geist_status gen(sc *c, const gt_json *s, const char *name, int depth);

/* Generates a sub-schema as a new rule; its name in nm. */
static geist_status sub(sc *c, const gt_json *s, char *nm, size_t cap, const char *seg, int depth) {
    snprintf(nm, cap, "%s-%u", c->root, ++c->counter);
    const size_t pl = strlen(c->path);
    snprintf(c->path + pl, sizeof c->path - pl, "/%.40s", seg);
    geist_status st = gen(c, s, nm, depth + 1);
    c->path[pl] = '\0';
    return st;
}

static geist_status emit_string(sc *c, gt_text *b, const gt_json *s) {
    const gt_json *mn = gt_json_get(s, "minLength"), *mx = gt_json_get(s, "maxLength");
    if ((mn && (mn->type != GT_JSON_NUMBER || !mn->is_int || mn->num < 0)) ||
        (mx && (mx->type != GT_JSON_NUMBER || !mx->is_int || mx->num < 0)))
        return sfail(c, "%s must be non-negative integers", "minLength/maxLength");
    if ((mn && mn->num > GT_GRAMMAR_MAX_REPEAT) || (mx && mx->num > GT_GRAMMAR_MAX_REPEAT))
        return sfail(c, "%s over 1000", "minLength/maxLength");
    const unsigned lo = mn ? (unsigned)mn->num : 0;
    if (mx && mx->num < lo) return sfail(c, "%s", "maxLength < minLength");
    c->need_char = true;
    if (!mx && lo == 0) OUT("\"\\\"\" %s-char* \"\\\"\" ", c->root);
    else if (!mx) OUT("\"\\\"\" %s-char{%u,} \"\\\"\" ", c->root, lo);
    else OUT("\"\\\"\" %s-char{%u,%u} \"\\\"\" ", c->root, lo, (unsigned)mx->num);
    return GEIST_OK;
}

static geist_status emit_array(sc *c, gt_text *b, const gt_json *s, int depth) {
    const gt_json *items = gt_json_get(s, "items");
    const gt_json *mn = gt_json_get(s, "minItems"), *mx = gt_json_get(s, "maxItems");
    if ((mn && (mn->type != GT_JSON_NUMBER || !mn->is_int || mn->num < 0)) ||
        (mx && (mx->type != GT_JSON_NUMBER || !mx->is_int || mx->num < 0)))
        return sfail(c, "%s must be non-negative integers", "minItems/maxItems");
    if ((mn && mn->num > GT_GRAMMAR_MAX_REPEAT) || (mx && mx->num > GT_GRAMMAR_MAX_REPEAT))
        return sfail(c, "%s over 1000", "minItems/maxItems");
    const unsigned lo = mn ? (unsigned)mn->num : 0;
    if (mx && mx->num < lo) return sfail(c, "%s", "maxItems < minItems");
    if (items && items->type == GT_JSON_BOOL && items->b) items = NULL;
    if (items && items->type != GT_JSON_OBJECT) return sfail(c, "%s must be a schema object", "items");
    char it[96];
    if (items) {
        geist_status st = sub(c, items, it, sizeof it, "items", depth);
        if (st != GEIST_OK) return st;
    } else {
        c->need_value = true;
        snprintf(it, sizeof it, "%s-value", c->root);
    }
    if (mx && mx->num == 0) { OUT("\"[\" \"]\" "); return GEIST_OK; }
    const char *more = "*";
    char rep[48];
    if (mx) { snprintf(rep, sizeof rep, "{%u,%u}", lo ? lo - 1 : 0, (unsigned)mx->num - 1); more = rep; }
    else if (lo > 1) { snprintf(rep, sizeof rep, "{%u,}", lo - 1); more = rep; }
    if (lo == 0) OUT("\"[\" ( %s ( \",\" %s )%s )? \"]\" ", it, it, more);
    else OUT("\"[\" %s ( \",\" %s )%s \"]\" ", it, it, more);
    return GEIST_OK;
}

static geist_status emit_object(sc *c, gt_text *b, const gt_json *s, const char *name, int depth) {
    const gt_json *props = gt_json_get(s, "properties"), *req = gt_json_get(s, "required");
    const gt_json *ap = gt_json_get(s, "additionalProperties");
    if (props && props->type != GT_JSON_OBJECT) return sfail(c, "%s must be an object", "properties");
    if (req && req->type != GT_JSON_ARRAY) return sfail(c, "%s must be an array", "required");
    if (ap && !(ap->type == GT_JSON_BOOL && !ap->b))
        return sfail(c, "%s: only false is supported (extra properties are never generated)",
                     "additionalProperties");
    for (const gt_json *r = req ? req->child : NULL; r; r = r->next) {
        if (r->type != GT_JSON_STRING) return sfail(c, "%s must hold strings", "required");
        if (!props || !gt_json_get(props, r->str))
            return sfail(c, "required property '%.60s' is not in properties", r->str);
    }
    const size_t n = props ? props->len : 0;
    if (n == 0) { OUT("\"{\" \"}\" "); return GEIST_OK; }
    if (n > 1000) return sfail(c, "%s", "more than 1000 properties");
    /* property value rules, then the chain R(i, first) over properties i..n */
    char (*vn)[96] = calloc(n, sizeof *vn);
    bool *must = calloc(n, sizeof *must);
    if (!vn || !must) { free(vn); free(must); return soom(c); }
    geist_status st = GEIST_OK;
    size_t i = 0;
    for (const gt_json *p = props->child; p && st == GEIST_OK; p = p->next, i++) {
        for (const gt_json *q = props->child; q != p; q = q->next)
            if (q->key_len == p->key_len && memcmp(q->key, p->key, p->key_len) == 0)
                st = sfail(c, "property '%.60s' given twice", p->key);
        if (st != GEIST_OK) break;
        if (p->type != GT_JSON_OBJECT && !(p->type == GT_JSON_BOOL && p->b)) {
            st = sfail(c, "property '%.60s' must be a schema object", p->key);
            break;
        }
        for (const gt_json *r = req ? req->child : NULL; r; r = r->next)
            if (r->len == p->key_len && memcmp(r->str, p->key, r->len) == 0) must[i] = true;
        if (p->type == GT_JSON_BOOL) {
            c->need_value = true;
            snprintf(vn[i], sizeof vn[i], "%s-value", c->root);
        } else {
            st = sub(c, p, vn[i], sizeof vn[i], p->key, depth);
        }
    }
    /* kv rules with the key literal */
    gt_text chain = {0};
    bool all_req = true;
    for (i = 0; i < n; i++) all_req &= must[i];
    i = 0;
    if (st == GEIST_OK && all_req) {
        OUT("\"{\" ");
        for (const gt_json *p = props->child; p; p = p->next, i++) {
            gt_text key = {0};
            bool ok = gt_text_append(&key, i ? ",\"" : "\"", i ? 2 : 1) && json_escape(&key, p->key, p->key_len) &&
                      gt_text_append(&key, "\":", 2);
            ok = ok && gt_text_append(b, "\"", 1) && lit_bytes(b, key.p, key.n) && gt_text_append(b, "\" ", 2);
            gt_text_free(&key);
            if (!ok) { st = soom(c); break; }
            OUT("%s ", vn[i]);
        }
        if (st == GEIST_OK) OUT("\"}\" ");
    } else if (st == GEIST_OK) {
        /* name-o<i>f ("first": no comma before) and name-o<i>m ("more") for i = n-1 .. 0 */
        const gt_json **pv = calloc(n, sizeof *pv);
        if (!pv) st = soom(c);
        i = 0;
        for (const gt_json *p = props ? props->child : NULL; p && pv; p = p->next) pv[i++] = p;
        for (size_t k = n; k-- > 0 && st == GEIST_OK;) {
            for (int first = 0; first < 2 && st == GEIST_OK; first++) {
                gt_text key = {0};
                bool ok = gt_text_append(&key, first ? "\"" : ",\"", first ? 1 : 2) &&
                          json_escape(&key, pv[k]->key, pv[k]->key_len) && gt_text_append(&key, "\":", 2);
                ok = ok && gt_text_appendf(&chain, "%s-o%zu%c ::= \"", name, k, first ? 'f' : 'm') &&
                     lit_bytes(&chain, key.p, key.n) && gt_text_appendf(&chain, "\" %s", vn[k]);
                gt_text_free(&key);
                if (ok && k + 1 < n) ok = gt_text_appendf(&chain, " %s-o%zum", name, k + 1);
                if (ok && !must[k]) {
                    ok = gt_text_appendf(&chain, " | ");
                    if (ok && k + 1 < n) ok = gt_text_appendf(&chain, "%s-o%zu%c", name, k + 1, first ? 'f' : 'm');
                    else if (ok) ok = gt_text_appendf(&chain, "\"\"");
                }
                if (ok) ok = gt_text_append(&chain, "\n", 1);
                if (!ok) st = soom(c);
            }
        }
        free(pv);
        if (st == GEIST_OK) OUT("\"{\" %s-o0f \"}\" ", name);
        if (st == GEIST_OK && !gt_text_append(c->out, chain.p ? chain.p : "", chain.n)) st = soom(c);
    }
    gt_text_free(&chain);
    free(vn);
    free(must);
    return st;
}

static geist_status gen(sc *c, const gt_json *s, const char *name, int depth) {
    if (depth > GT_GRAMMAR_MAX_NESTING) return sfail(c, "%s", "schemas nested deeper than 100");
    if (s->type == GT_JSON_BOOL && s->b) {
        c->need_value = true;
        return gt_text_appendf(c->out, "%s ::= %s-value\n", name, c->root) ? GEIST_OK : soom(c);
    }
    if (s->type != GT_JSON_OBJECT) return sfail(c, "%s", "a schema must be an object (or true)");
    static const char *const handled[] = {"type", "properties", "required", "additionalProperties",
                                          "enum", "const", "minLength", "maxLength", "minimum",
                                          "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                          "items", "minItems", "maxItems", "anyOf", "oneOf", NULL};
    for (const gt_json *k = s->child; k; k = k->next)
        if (!is_ignored(k->key) && !kw_in(k->key, handled))
            return sfail(c, "unsupported keyword '%.60s'", k->key);
    gt_text body = {0};
    gt_text *b = &body;
    geist_status st = GEIST_OK;
    const gt_json *en = gt_json_get(s, "enum"), *cn = gt_json_get(s, "const");
    const gt_json *any = gt_json_get(s, "anyOf");
    if (!any) any = gt_json_get(s, "oneOf");
    const gt_json *ty = gt_json_get(s, "type");
    if (cn) {
        st = emit_value_lit(c, b, cn);
    } else if (en) {
        if (en->type != GT_JSON_ARRAY || en->len == 0) st = sfail(c, "%s must be a non-empty array", "enum");
        for (const gt_json *v = en->child; v && st == GEIST_OK; v = v->next) {
            if (v != en->child && !gt_text_append(b, "| ", 2)) st = soom(c);
            if (st == GEIST_OK) st = emit_value_lit(c, b, v);
            if (st == GEIST_OK && !gt_text_append(b, " ", 1)) st = soom(c);
        }
    } else if (any) {
        if (any->type != GT_JSON_ARRAY || any->len == 0) st = sfail(c, "%s must be a non-empty array", "anyOf");
        if (ty && st == GEIST_OK) st = sfail(c, "%s", "anyOf together with type is not supported");
        unsigned k = 0;
        for (const gt_json *v = any->child; v && st == GEIST_OK; v = v->next, k++) {
            char nm[96], seg[24];
            snprintf(seg, sizeof seg, "anyOf/%u", k);
            st = sub(c, v, nm, sizeof nm, seg, depth);
            if (st == GEIST_OK && !gt_text_appendf(b, "%s%s ", k ? "| " : "", nm)) st = soom(c);
        }
    } else if (!ty) {
        c->need_value = true;
        if (!gt_text_appendf(b, "%s-value ", c->root)) st = soom(c);
    } else {
        const gt_json *tlist = ty->type == GT_JSON_ARRAY ? ty->child : ty;
        if (ty->type == GT_JSON_ARRAY && !ty->child) st = sfail(c, "%s must not be empty", "type");
        bool firstt = true;
        for (const gt_json *t = tlist; t && st == GEIST_OK; t = ty->type == GT_JSON_ARRAY ? t->next : NULL) {
            if (t->type != GT_JSON_STRING) { st = sfail(c, "%s must be a string or strings", "type"); break; }
            if (!firstt && !gt_text_append(b, "| ", 2)) { st = soom(c); break; }
            firstt = false;
            const char *tn = t->str;
            if (strcmp(tn, "string") == 0) st = emit_string(c, b, s);
            else if (strcmp(tn, "integer") == 0) st = emit_integer(c, b, s);
            else if (strcmp(tn, "number") == 0) st = emit_number(c, b, s);
            else if (strcmp(tn, "boolean") == 0) st = gt_text_appendf(b, "( \"true\" | \"false\" ) ") ? GEIST_OK : soom(c);
            else if (strcmp(tn, "null") == 0) st = gt_text_appendf(b, "\"null\" ") ? GEIST_OK : soom(c);
            else if (strcmp(tn, "array") == 0) st = emit_array(c, b, s, depth);
            else if (strcmp(tn, "object") == 0) st = emit_object(c, b, s, name, depth);
            else st = sfail(c, "unknown type '%.40s'", tn);
        }
    }
    if (st == GEIST_OK && !gt_text_appendf(c->out, "%s ::= %s\n", name, body.p ? body.p : "\"\"")) st = soom(c);
    gt_text_free(&body);
    return st;
}

geist_status gt_json_schema_to_gbnf(const char *schema, size_t len, const char *root_name, gt_text *out,
                                    gt_err *err) {
    if (!schema || !root_name || !out)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "JSON schema: NULL argument");
    const size_t rl = strlen(root_name);
    if (rl == 0 || rl > 60) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "JSON schema: bad root rule name");
    for (size_t i = 0; i < rl; i++) {
        const char ch = root_name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-'))
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "JSON schema: bad root rule name '%s'", root_name);
    }
    if (len > GT_GRAMMAR_MAX_TEXT)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "JSON schema: text of %zu bytes (over 1 MiB)", len);
    gt_json *root = NULL;
    geist_status st = gt_json_parse(schema, len, &root, err);
    if (st != GEIST_OK) {
        char msg[GT_ERR_CAP];
        memcpy(msg, err->msg, sizeof msg);
        msg[GT_ERR_CAP - 20] = '\0';
        return gt_fail(err, st, "JSON schema: %s", msg);
    }
    const size_t n0 = out->n;
    sc c = {.out = out, .root = root_name, .err = err};
    st = gen(&c, root, root_name, 0);
    if (st == GEIST_OK && c.need_value) {
        c.need_char = true;
        c.need_number = true;
        /* the generic JSON value rules, each name prefixed; one rule per call, no positional
         * printf arguments (msvcrt, on Windows, has none) */
        const char *r = root_name;
        bool ok = gt_text_appendf(out, "%s-value ::= %s-object | %s-array | %s-string | %s-number | "
                                  "\"true\" | \"false\" | \"null\"\n", r, r, r, r, r) &&
                  gt_text_appendf(out, "%s-object ::= \"{\" ( %s-string \":\" %s-value ( \",\" "
                                  "%s-string \":\" %s-value )* )? \"}\"\n", r, r, r, r, r) &&
                  gt_text_appendf(out, "%s-array ::= \"[\" ( %s-value ( \",\" %s-value )* )? "
                                  "\"]\"\n", r, r, r) &&
                  gt_text_appendf(out, "%s-string ::= \"\\\"\" %s-char* \"\\\"\"\n", r, r) &&
                  gt_text_appendf(out, "%s-number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" "
                                  "[0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n", r);
        if (!ok)
            st = soom(&c);
    }
    if (st == GEIST_OK && c.need_char &&
        !gt_text_appendf(out, "%s-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n",
                         root_name))
        st = soom(&c);
    gt_json_free(root);
    if (st != GEIST_OK) {
        out->n = n0;
        if (out->p) out->p[n0] = '\0';
    }
    return st;
}
