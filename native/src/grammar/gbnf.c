/* GBNF (llama.cpp's grammar syntax) parsed into byte-level rules, then checked and analysed:
 * left recursion, empty language, minimal lengths, follow sets (grammar_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

/* ---- builder ---- */

static geist_status oom(gt_gbuild *b) {
    return gt_fail(b->err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar)");
}

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t elem) {
    if (need <= *cap) return true;
    uint32_t c = *cap ? *cap : 4;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static void build_free(gt_gbuild *b) {
    for (uint32_t i = 0; i < b->n_rules; i++) {
        for (uint32_t a = 0; a < b->rules[i].n; a++) free(b->rules[i].alts[a].e);
        free(b->rules[i].alts);
        free(b->rules[i].name);
    }
    free(b->rules);
    free(b->sets);
    free(b->hmap);
}

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static bool hmap_put(gt_gbuild *b, uint32_t rule) {
    if ((b->hn + 1) * 2 > b->hcap) {
        const uint32_t cap = b->hcap ? b->hcap * 2 : 64;
        uint32_t *m = calloc(cap, sizeof *m);
        if (!m) return false;
        for (uint32_t i = 0; i < b->hcap; i++) {
            if (!b->hmap[i]) continue;
            const char *nm = b->rules[b->hmap[i] - 1].name;
            uint32_t h = name_hash(nm, strlen(nm)) & (cap - 1);
            while (m[h]) h = (h + 1) & (cap - 1);
            m[h] = b->hmap[i];
        }
        free(b->hmap);
        b->hmap = m;
        b->hcap = cap;
    }
    const char *nm = b->rules[rule].name;
    uint32_t h = name_hash(nm, strlen(nm)) & (b->hcap - 1);
    while (b->hmap[h]) h = (h + 1) & (b->hcap - 1);
    b->hmap[h] = rule + 1;
    b->hn++;
    return true;
}

static int64_t rule_new(gt_gbuild *b, const char *name, size_t n, int line) {
    if (b->n_rules >= GT_GRAMMAR_MAX_RULES) {
        gt_fail(b->err, GEIST_ERR_INVALID_ARGUMENT, "grammar: more than %d rules (after expanding "
                "repetitions and character classes)", GT_GRAMMAR_MAX_RULES);
        return -1;
    }
    if (!grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules)) return oom(b), -1;
    gt_grule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(n + 1);
    if (!r->name) return oom(b), -1;
    memcpy(r->name, name, n);
    r->name[n] = '\0';
    r->line = line;
    return b->n_rules++;
}

static int64_t rule_find(const gt_gbuild *b, const char *name, size_t n) {
    if (!b->hcap) return -1;
    for (uint32_t h = name_hash(name, n) & (b->hcap - 1); b->hmap[h]; h = (h + 1) & (b->hcap - 1)) {
        const char *nm = b->rules[b->hmap[h] - 1].name;
        if (strlen(nm) == n && memcmp(nm, name, n) == 0) return b->hmap[h] - 1;
    }
    return -1;
}

/* A generated rule named after its parent. */
static int64_t rule_gen(gt_gbuild *b, uint32_t parent, const char *what) {
    char nm[96];
    const int l = snprintf(nm, sizeof nm, "%.60s~%s%u", b->rules[parent].name, what, b->n_rules);
    const int64_t r = rule_new(b, nm, (size_t)(l < (int)sizeof nm ? l : (int)sizeof nm - 1), b->rules[parent].line);
    if (r >= 0) b->rules[r].defined = true;
    return r;
}

static gt_galt *alt_new(gt_gbuild *b, uint32_t rule) {
    gt_grule *r = &b->rules[rule];
    if (!grow((void **)&r->alts, &r->cap, r->n + 1, sizeof *r->alts)) return oom(b), NULL;
    gt_galt *a = &r->alts[r->n++];
    memset(a, 0, sizeof *a);
    return a;
}

static bool alt_push(gt_gbuild *b, gt_galt *a, uint8_t k, uint32_t v) {
    if (++b->n_elements > GT_GRAMMAR_MAX_ELEMENTS) {
        gt_fail(b->err, GEIST_ERR_INVALID_ARGUMENT, "grammar: more than %d elements (after "
                "expanding repetitions and character classes)", GT_GRAMMAR_MAX_ELEMENTS);
        return false;
    }
    if (!grow((void **)&a->e, &a->cap, a->n + 1, sizeof *a->e)) return oom(b), false;
    a->e[a->n++] = (gt_gel){k, v};
    return true;
}

static int64_t set_new(gt_gbuild *b, const uint32_t set[8]) {
    for (uint32_t i = b->n_sets; i-- > 0 && i + 64 > b->n_sets;) /* recent duplicates */
        if (memcmp(b->sets[i], set, 32) == 0) return i;
    if (b->n_sets >= GT_GRAMMAR_MAX_ELEMENTS) {
        gt_fail(b->err, GEIST_ERR_INVALID_ARGUMENT, "grammar: too many byte sets");
        return -1;
    }
    if (!grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets)) return oom(b), -1;
    memcpy(b->sets[b->n_sets], set, 32);
    return b->n_sets++;
}

static bool push_byte_range(gt_gbuild *b, gt_galt *a, uint8_t lo, uint8_t hi) {
    uint32_t s[8] = {0};
    for (unsigned c = lo; c <= hi; c++) s[c >> 5] |= 1u << (c & 31);
    const int64_t id = set_new(b, s);
    return id >= 0 && alt_push(b, a, GE_BYTES, (uint32_t)id);
}

/* ---- code point classes to UTF-8 byte sequences ---- */

typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

static size_t enc(uint32_t cp, uint8_t *d) {
    if (cp < 0x80) { d[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { d[0] = (uint8_t)(0xC0 | (cp >> 6)); d[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        d[0] = (uint8_t)(0xE0 | (cp >> 12)); d[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (uint8_t)(0xF0 | (cp >> 18)); d[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    d[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); d[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

typedef struct cls_ctx {
    gt_gbuild *b;
    uint32_t rule;
    uint32_t ascii[8];
    bool ok;
} cls_ctx;

/* Emits [lo, hi] (same encoded length, no surrogates) as alternatives of byte ranges. */
static void split_utf8(cls_ctx *c, uint32_t lo, uint32_t hi) {
    if (!c->ok) return;
    if (hi < 0x80) {
        for (uint32_t x = lo; x <= hi; x++) c->ascii[x >> 5] |= 1u << (x & 31);
        return;
    }
    uint8_t a[4], z[4];
    const size_t n = enc(lo, a);
    enc(hi, z);
    for (size_t i = 1; i < n; i++) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                split_utf8(c, lo, lo | m);
                split_utf8(c, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                split_utf8(c, lo, (hi & ~m) - 1);
                split_utf8(c, hi & ~m, hi);
                return;
            }
        }
    }
    gt_galt *alt = alt_new(c->b, c->rule);
    if (!alt) { c->ok = false; return; }
    for (size_t i = 0; i < n && c->ok; i++) c->ok = push_byte_range(c->b, alt, a[i], z[i]);
}

static void split_range(cls_ctx *c, uint32_t lo, uint32_t hi) {
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    if (lo <= 0xDFFF && hi >= 0xD800) { /* no surrogates */
        if (lo < 0xD800) split_range(c, lo, 0xD7FF);
        if (hi > 0xDFFF) split_range(c, 0xE000, hi);
        return;
    }
    for (int i = 0; i < 4; i++) {
        const uint32_t start = i ? bounds[i - 1] + 1 : 0;
        if (hi < start || lo > bounds[i]) continue;
        split_utf8(c, lo > start ? lo : start, hi < bounds[i] ? hi : bounds[i]);
    }
}

static int cmp_range(const void *x, const void *y) {
    const cp_range *a = x, *b = y;
    return a->lo < b->lo ? -1 : (a->lo > b->lo ? 1 : 0);
}

/* Appends to alt an element matching one character of the class (ranges sorted in place). */
static bool emit_class(gt_gbuild *b, uint32_t parent, gt_galt **alt_io, uint32_t alt_rule,
                       uint32_t alt_index, cp_range *rg, size_t n, bool negate) {
    if (n) qsort(rg, n, sizeof *rg, cmp_range);
    size_t m = 0; /* merge */
    for (size_t i = 0; i < n; i++) {
        if (m && rg[i].lo <= rg[m - 1].hi + 1) {
            if (rg[i].hi > rg[m - 1].hi) rg[m - 1].hi = rg[i].hi;
        } else {
            rg[m++] = rg[i];
        }
    }
    n = m;
    const int64_t r = rule_gen(b, parent, "c");
    if (r < 0) return false;
    *alt_io = &b->rules[alt_rule].alts[alt_index]; /* rules may have moved */
    cls_ctx c = {.b = b, .rule = (uint32_t)r, .ok = true};
    if (negate) {
        uint32_t next = 0;
        for (size_t i = 0; i < n && c.ok; i++) {
            if (rg[i].lo > next) split_range(&c, next, rg[i].lo - 1);
            next = rg[i].hi + 1;
        }
        if (next <= 0x10FFFF && c.ok) split_range(&c, next, 0x10FFFF);
    } else {
        for (size_t i = 0; i < n && c.ok; i++) split_range(&c, rg[i].lo, rg[i].hi);
    }
    if (!c.ok) return false;
    bool any_ascii = false;
    for (int i = 0; i < 8; i++) any_ascii |= c.ascii[i] != 0;
    *alt_io = &b->rules[alt_rule].alts[alt_index];
    if (b->rules[r].n == 0) {
        /* ASCII only: one byte set in place (the generated rule stays empty and unused: drop) */
        b->rules[r].n = 0;
        if (!any_ascii) {
            /* an empty class: the rule has no alternative (an unproductive element) */
            return alt_push(b, *alt_io, GE_RULE, (uint32_t)r);
        }
        const int64_t s = set_new(b, c.ascii);
        return s >= 0 && alt_push(b, *alt_io, GE_BYTES, (uint32_t)s);
    }
    if (any_ascii) {
        gt_galt *a = alt_new(b, (uint32_t)r);
        const int64_t s = a ? set_new(b, c.ascii) : -1;
        if (s < 0 || !alt_push(b, a, GE_BYTES, (uint32_t)s)) return false;
        *alt_io = &b->rules[alt_rule].alts[alt_index];
    }
    return alt_push(b, *alt_io, GE_RULE, (uint32_t)r);
}

/* ---- the parser ---- */

typedef struct gp {
    const char *s;
    size_t n, i;
    int line;
    size_t line_start;
    int depth;
    gt_gbuild *b;
    gt_err *err;
} gp;

static geist_status perr(gp *p, const char *what) {
    return gt_fail(p->err, GEIST_ERR_INVALID_ARGUMENT, "grammar: %s at line %d, column %zu", what,
                   p->line, p->i - p->line_start + 1);
}

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static void newline(gp *p) {
    p->line++;
    p->line_start = p->i;
}

static void space(gp *p, bool nl_ok) {
    while (p->i < p->n) {
        const char c = p->s[p->i];
        if (c == ' ' || c == '\t') {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n' && p->s[p->i] != '\r') p->i++;
        } else if (nl_ok && (c == '\n' || c == '\r')) {
            p->i++;
            if (c == '\r' && p->i < p->n && p->s[p->i] == '\n') p->i++;
            newline(p);
        } else {
            break;
        }
    }
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One (possibly escaped) character of a literal or class: its code point, or -1 (error set). */
static int64_t parse_char(gp *p) {
    if (p->i >= p->n) return perr(p, "unexpected end of text"), -1;
    const unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\\') {
        if (p->i + 1 >= p->n) return perr(p, "unterminated escape"), -1;
        const char e = p->s[p->i + 1];
        int digits = 0;
        switch (e) {
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 't': p->i += 2; return '\t';
        case 'n': p->i += 2; return '\n';
        case 'r': p->i += 2; return '\r';
        case '\\': case '"': case '[': case ']': case '-': case '^': p->i += 2; return (unsigned char)e;
        default: return perr(p, "unknown escape (use \\x, \\u, \\U, \\t, \\n, \\r, \\\\, \\\", \\[, \\])"), -1;
        }
        p->i += 2;
        uint32_t v = 0;
        for (int k = 0; k < digits; k++) {
            const int h = p->i < p->n ? hexv(p->s[p->i]) : -1;
            if (h < 0) return perr(p, "expected hex digits in the escape"), -1;
            v = v * 16 + (uint32_t)h;
            p->i++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return perr(p, "escape is not a Unicode scalar value"), -1;
        return v;
    }
    /* a UTF-8 character of the grammar text */
    size_t l;
    uint32_t cp;
    if (c < 0x80) { l = 1; cp = c; }
    else if (c >= 0xC2 && c <= 0xDF) { l = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { l = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { l = 4; cp = c & 0x07; }
    else return perr(p, "invalid UTF-8 in the grammar text"), -1;
    if (p->i + l > p->n) return perr(p, "invalid UTF-8 in the grammar text"), -1;
    for (size_t k = 1; k < l; k++) {
        const unsigned char d = (unsigned char)p->s[p->i + k];
        if ((d & 0xC0) != 0x80) return perr(p, "invalid UTF-8 in the grammar text"), -1;
        cp = (cp << 6) | (d & 0x3F);
    }
    if ((l == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (l == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return perr(p, "invalid UTF-8 in the grammar text"), -1;
    p->i += l;
    return cp;
}

static geist_status parse_alternates(gp *p, uint32_t rule, bool nested);

/* Resolves or forward-declares a rule name. */
static int64_t rule_ref(gp *p, const char *name, size_t n) {
    int64_t r = rule_find(p->b, name, n);
    if (r < 0) {
        r = rule_new(p->b, name, n, p->line);
        if (r >= 0 && !hmap_put(p->b, (uint32_t)r)) return oom(p->b), -1;
    }
    return r;
}

static bool parse_uint(gp *p, uint32_t *v) {
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return false;
    uint64_t x = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        x = x * 10 + (uint64_t)(p->s[p->i] - '0');
        if (x > 100000000) x = 100000000; /* saturate; checked against the limit below */
        p->i++;
    }
    *v = (uint32_t)x;
    return true;
}

/* Repeats the last element of alt (index `at`) min..max times (max UINT32_MAX: unbounded). */
static geist_status repeat(gp *p, uint32_t rule, uint32_t alt_index, uint32_t min, uint32_t max) {
    gt_gbuild *b = p->b;
    if (min > GT_GRAMMAR_MAX_REPEAT || (max != UINT32_MAX && max > GT_GRAMMAR_MAX_REPEAT))
        return perr(p, "repetition count over 1000");
    if (max < min) return perr(p, "repetition {m,n} with n < m");
    gt_galt *a = &b->rules[rule].alts[alt_index];
    const gt_gel x = a->e[--a->n];
    b->n_elements--;
    for (uint32_t k = 0; k < min; k++) {
        a = &b->rules[rule].alts[alt_index];
        if (!alt_push(b, a, x.k, x.v)) return b->err->status;
    }
    if (max == min) return GEIST_OK;
    int64_t tail = -1;
    if (max == UINT32_MAX) {
        const int64_t r = rule_gen(b, rule, "star");
        if (r < 0) return b->err->status;
        gt_galt *r1 = alt_new(b, (uint32_t)r);
        if (!r1 || !alt_push(b, r1, x.k, x.v) || !alt_push(b, r1, GE_RULE, (uint32_t)r) ||
            !alt_new(b, (uint32_t)r))
            return b->err->status;
        tail = r;
    } else {
        for (uint32_t k = 0; k < max - min; k++) { /* R_k ::= x R_{k-1} | "" */
            const int64_t r = rule_gen(b, rule, "opt");
            if (r < 0) return b->err->status;
            gt_galt *r1 = alt_new(b, (uint32_t)r);
            if (!r1 || !alt_push(b, r1, x.k, x.v)) return b->err->status;
            if (tail >= 0 && !alt_push(b, &b->rules[r].alts[0], GE_RULE, (uint32_t)tail))
                return b->err->status;
            if (!alt_new(b, (uint32_t)r)) return b->err->status;
            tail = r;
        }
    }
    a = &b->rules[rule].alts[alt_index];
    return alt_push(b, a, GE_RULE, (uint32_t)tail) ? GEIST_OK : b->err->status;
}

static geist_status parse_sequence(gp *p, uint32_t rule, bool nested) {
    gt_gbuild *b = p->b;
    gt_galt *a = alt_new(b, rule);
    if (!a) return b->err->status;
    const uint32_t ai = b->rules[rule].n - 1;
    while (p->i < p->n) {
        const char c = p->s[p->i];
        const uint32_t before = b->rules[rule].alts[ai].n;
        if (c == '"') {
            p->i++;
            while (true) {
                if (p->i >= p->n || p->s[p->i] == '\n' || p->s[p->i] == '\r')
                    return perr(p, "unterminated string literal");
                if (p->s[p->i] == '"') { p->i++; break; }
                const int64_t cp = parse_char(p);
                if (cp < 0) return p->err->status;
                uint8_t u[4];
                const size_t l = enc((uint32_t)cp, u);
                for (size_t k = 0; k < l; k++)
                    if (!push_byte_range(b, &b->rules[rule].alts[ai], u[k], u[k])) return b->err->status;
            }
        } else if (c == '[' || c == '.') {
            cp_range *rg = NULL;
            size_t n = 0, cap = 0;
            bool neg = false;
            if (c == '.') {
                p->i++;
                rg = malloc(sizeof *rg);
                if (!rg) return oom(b);
                rg[n++] = (cp_range){0, 0x10FFFF};
            } else {
                p->i++;
                if (p->i < p->n && p->s[p->i] == '^') { neg = true; p->i++; }
                while (true) {
                    if (p->i >= p->n) { free(rg); return perr(p, "unterminated character class"); }
                    if (p->s[p->i] == ']') { p->i++; break; }
                    const int64_t lo = parse_char(p);
                    if (lo < 0) { free(rg); return p->err->status; }
                    int64_t hi = lo;
                    if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
                        p->i++;
                        hi = parse_char(p);
                        if (hi < 0) { free(rg); return p->err->status; }
                        if (hi < lo) { free(rg); return perr(p, "character range with end before start"); }
                    }
                    if (n == cap) {
                        cap = cap ? cap * 2 : 8;
                        if (cap > GT_GRAMMAR_MAX_TEXT) { free(rg); return perr(p, "character class too large"); }
                        cp_range *q = realloc(rg, cap * sizeof *rg);
                        if (!q) { free(rg); return oom(b); }
                        rg = q;
                    }
                    rg[n++] = (cp_range){(uint32_t)lo, (uint32_t)hi};
                }
            }
            gt_galt *cur = &b->rules[rule].alts[ai];
            const bool ok = emit_class(b, rule, &cur, rule, ai, rg, n, neg);
            free(rg);
            if (!ok) return b->err->status;
        } else if (c == '(') {
            if (++p->depth > GT_GRAMMAR_MAX_NESTING) return perr(p, "parentheses nested deeper than 100");
            p->i++;
            space(p, true);
            const int64_t r = rule_gen(b, rule, "g");
            if (r < 0) return b->err->status;
            geist_status st = parse_alternates(p, (uint32_t)r, true);
            if (st != GEIST_OK) return st;
            if (p->i >= p->n || p->s[p->i] != ')') return perr(p, "expected ')'");
            p->i++;
            p->depth--;
            if (!alt_push(b, &b->rules[rule].alts[ai], GE_RULE, (uint32_t)r)) return b->err->status;
        } else if (is_word(c)) {
            const size_t s0 = p->i;
            while (p->i < p->n && is_word(p->s[p->i])) p->i++;
            const int64_t r = rule_ref(p, p->s + s0, p->i - s0);
            if (r < 0) return b->err->status;
            if (!alt_push(b, &b->rules[rule].alts[ai], GE_RULE, (uint32_t)r)) return b->err->status;
        } else if (c == '<') {
            return perr(p, "token references (<...>) are not supported");
        } else {
            break;
        }
        space(p, nested);
        /* postfix operators apply to the element(s) just parsed */
        while (p->i < p->n && (p->s[p->i] == '*' || p->s[p->i] == '+' || p->s[p->i] == '?' || p->s[p->i] == '{')) {
            gt_galt *cur = &b->rules[rule].alts[ai];
            if (cur->n == before) return perr(p, "repetition of nothing");
            if (cur->n - before > 1) { /* wrap a multi-byte literal into one rule */
                const int64_t r = rule_gen(b, rule, "w");
                if (r < 0) return b->err->status;
                gt_galt *w = alt_new(b, (uint32_t)r);
                if (!w) return b->err->status;
                cur = &b->rules[rule].alts[ai];
                for (uint32_t k = before; k < cur->n; k++)
                    if (!alt_push(b, w, cur->e[k].k, cur->e[k].v)) return b->err->status;
                b->n_elements -= cur->n - before;
                cur->n = before;
                if (!alt_push(b, cur, GE_RULE, (uint32_t)r)) return b->err->status;
            }
            const char op = p->s[p->i++];
            uint32_t mn = 0, mx = UINT32_MAX;
            if (op == '+') mn = 1;
            else if (op == '?') mx = 1;
            else if (op == '{') {
                space(p, nested);
                if (!parse_uint(p, &mn)) return perr(p, "expected a number after '{'");
                space(p, nested);
                if (p->i < p->n && p->s[p->i] == ',') {
                    p->i++;
                    space(p, nested);
                    if (p->i < p->n && p->s[p->i] == '}') mx = UINT32_MAX;
                    else if (!parse_uint(p, &mx)) return perr(p, "expected a number or '}'");
                } else {
                    mx = mn;
                }
                space(p, nested);
                if (p->i >= p->n || p->s[p->i] != '}') return perr(p, "expected '}'");
                p->i++;
            }
            geist_status st = repeat(p, rule, ai, mn, mx);
            if (st != GEIST_OK) return st;
            space(p, nested);
        }
    }
    return GEIST_OK;
}

static geist_status parse_alternates(gp *p, uint32_t rule, bool nested) {
    geist_status st = parse_sequence(p, rule, nested);
    if (st != GEIST_OK) return st;
    while (p->i < p->n && p->s[p->i] == '|') {
        p->i++;
        space(p, true);
        st = parse_sequence(p, rule, nested);
        if (st != GEIST_OK) return st;
    }
    return GEIST_OK;
}

static geist_status parse_all(gp *p) {
    space(p, true);
    while (p->i < p->n) {
        const size_t s0 = p->i;
        while (p->i < p->n && is_word(p->s[p->i])) p->i++;
        if (p->i == s0) return perr(p, "expected a rule name");
        const int64_t r = rule_ref(p, p->s + s0, p->i - s0);
        if (r < 0) return p->b->err->status;
        if (p->b->rules[r].defined) {
            char msg[160];
            snprintf(msg, sizeof msg, "rule '%.60s' defined twice", p->b->rules[r].name);
            return perr(p, msg);
        }
        p->b->rules[r].defined = true;
        p->b->rules[r].line = p->line;
        space(p, false);
        if (p->n - p->i < 3 || memcmp(p->s + p->i, "::=", 3) != 0) return perr(p, "expected '::='");
        p->i += 3;
        space(p, true);
        geist_status st = parse_alternates(p, (uint32_t)r, false);
        if (st != GEIST_OK) return st;
        if (p->i < p->n) {
            if (p->s[p->i] == '\r' || p->s[p->i] == '\n') {
                space(p, true);
            } else {
                return perr(p, p->s[p->i] == ')' ? "unbalanced ')'" : "unexpected character");
            }
        }
    }
    return GEIST_OK;
}

/* ---- flatten and analyse ---- */

void gt_rules_free(gt_rules *r) {
    if (!r) return;
    free(r->ek);
    free(r->ev);
    free(r->pos_rule);
    free(r->suffix_min);
    free(r->alt_off);
    free(r->alt_start);
    free(r->sets);
    free(r->follow);
    free(r->rule_min);
    free(r);
}

static uint32_t sat_add(uint32_t a, uint32_t b) { return a + b >= GT_MIN_INF ? GT_MIN_INF : a + b; }

/* Work bound of the fixpoint analyses (a hostile grammar gets an error, not a long compile). */
#define GT_ANALYSIS_WORK 200000000ull

static geist_status analyse(gt_gbuild *b, gt_err *err, uint32_t root) {
    const uint32_t nr = b->n_rules;
    uint32_t *mn = malloc((size_t)nr * sizeof *mn);
    if (!mn) return oom(b);
    for (uint32_t i = 0; i < nr; i++) mn[i] = GT_MIN_INF;
    uint64_t work = 0;
    bool changed = true;
    while (changed) {
        changed = false;
        for (uint32_t r = nr; r-- > 0;) {
            const gt_grule *R = &b->rules[r];
            for (uint32_t a = 0; a < R->n; a++) {
                uint32_t s = 0;
                for (uint32_t k = 0; k < R->alts[a].n && s < GT_MIN_INF; k++) {
                    const gt_gel e = R->alts[a].e[k];
                    s = sat_add(s, e.k == GE_BYTES ? 1 : mn[e.v]);
                }
                work += R->alts[a].n + 1;
                if (s < mn[r]) { mn[r] = s; changed = true; }
            }
        }
        if (work > GT_ANALYSIS_WORK) {
            free(mn);
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: too complex to analyse");
        }
    }
    if (mn[root] >= GT_MIN_INF) {
        free(mn);
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "grammar: the language is empty (rule 'root' can never complete)");
    }
    /* drop alternatives that can never complete */
    for (uint32_t r = 0; r < nr; r++) {
        gt_grule *R = &b->rules[r];
        uint32_t m = 0;
        for (uint32_t a = 0; a < R->n; a++) {
            bool ok = true;
            for (uint32_t k = 0; k < R->alts[a].n && ok; k++)
                ok = R->alts[a].e[k].k == GE_BYTES || mn[R->alts[a].e[k].v] < GT_MIN_INF;
            if (ok) R->alts[m++] = R->alts[a];
            else free(R->alts[a].e);
        }
        R->n = m;
    }
    /* left recursion: a rule reachable from itself through nullable prefixes */
    uint8_t *color = calloc(nr, 1);
    uint32_t *stk = malloc((size_t)nr * 3 * sizeof *stk); /* rule, alt, elem */
    if (!color || !stk) { free(mn); free(color); free(stk); return oom(b); }
    geist_status st = GEIST_OK;
    for (uint32_t s0 = 0; s0 < nr && st == GEIST_OK; s0++) {
        if (color[s0]) continue;
        size_t sp = 0;
        stk[0] = s0; stk[1] = 0; stk[2] = 0;
        sp = 1;
        color[s0] = 1;
        while (sp && st == GEIST_OK) {
            uint32_t *f = &stk[(sp - 1) * 3];
            const gt_grule *R = &b->rules[f[0]];
            if (f[1] >= R->n) { color[f[0]] = 2; sp--; continue; }
            const gt_galt *A = &R->alts[f[1]];
            if (f[2] >= A->n) { f[1]++; f[2] = 0; continue; }
            const gt_gel e = A->e[f[2]];
            if (e.k == GE_BYTES) { f[1]++; f[2] = 0; continue; }
            const bool nullable = mn[e.v] == 0;
            if (nullable) f[2]++; else { f[1]++; f[2] = 0; }
            if (color[e.v] == 1) {
                st = gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                             "grammar: rule '%.80s' is left-recursive (it can reach itself without "
                             "consuming text; a repetition of something that can be empty does too)",
                             b->rules[e.v].name);
            } else if (color[e.v] == 0) {
                color[e.v] = 1;
                stk[sp * 3] = e.v; stk[sp * 3 + 1] = 0; stk[sp * 3 + 2] = 0;
                sp++;
            }
        }
    }
    free(color);
    free(stk);
    free(mn);
    return st;
}

static geist_status flatten(gt_gbuild *b, uint32_t root, gt_rules **out, gt_err *err) {
    gt_rules *g = calloc(1, sizeof *g);
    if (!g) return oom(b);
    const uint32_t nr = b->n_rules;
    uint64_t np = 0, na = 0;
    for (uint32_t r = 0; r < nr; r++) {
        na += b->rules[r].n;
        for (uint32_t a = 0; a < b->rules[r].n; a++) np += b->rules[r].alts[a].n + 1;
    }
    np += 1; /* position 0: an END sentinel (never a stack entry) */
    g->n_pos = (uint32_t)np;
    g->n_rules = nr;
    g->n_alts = (uint32_t)na;
    g->root = root;
    g->ek = calloc(np, 1);
    g->ev = calloc(np, sizeof *g->ev);
    g->pos_rule = calloc(np, sizeof *g->pos_rule);
    g->suffix_min = calloc(np, sizeof *g->suffix_min);
    g->alt_off = calloc((size_t)nr + 1, sizeof *g->alt_off);
    g->alt_start = calloc(na ? na : 1, sizeof *g->alt_start);
    g->rule_min = calloc(nr, sizeof *g->rule_min);
    g->follow = calloc(nr, sizeof *g->follow);
    g->sets = malloc((size_t)(b->n_sets ? b->n_sets : 1) * sizeof *g->sets);
    uint32_t(*first)[8] = calloc(nr, sizeof *first);
    if (!g->ek || !g->ev || !g->pos_rule || !g->suffix_min || !g->alt_off || !g->alt_start ||
        !g->rule_min || !g->follow || !g->sets || !first) {
        free(first);
        gt_rules_free(g);
        return oom(b);
    }
    if (b->n_sets) memcpy(g->sets, b->sets, (size_t)b->n_sets * sizeof *g->sets);
    g->n_sets = b->n_sets;
    uint32_t p = 1, ai = 0;
    for (uint32_t r = 0; r < nr; r++) {
        g->alt_off[r] = ai;
        for (uint32_t a = 0; a < b->rules[r].n; a++) {
            g->alt_start[ai++] = p;
            const gt_galt *A = &b->rules[r].alts[a];
            for (uint32_t k = 0; k < A->n; k++, p++) {
                g->ek[p] = A->e[k].k;
                g->ev[p] = A->e[k].v;
                g->pos_rule[p] = r;
            }
            g->ek[p] = GE_END;
            g->pos_rule[p] = r;
            p++;
        }
    }
    g->alt_off[nr] = ai;
    /* minimal lengths (the analysis already proved convergence within the work bound) */
    for (uint32_t r = 0; r < nr; r++) g->rule_min[r] = GT_MIN_INF;
    bool changed = true;
    while (changed) {
        changed = false;
        for (uint32_t r = nr; r-- > 0;)
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
                uint32_t s = 0;
                for (uint32_t q = g->alt_start[a]; g->ek[q] != GE_END; q++)
                    s = sat_add(s, g->ek[q] == GE_BYTES ? 1 : g->rule_min[g->ev[q]]);
                if (s < g->rule_min[r]) { g->rule_min[r] = s; changed = true; }
            }
    }
    for (uint32_t q = np; q-- > 1;) {
        if (g->ek[q] == GE_END) { g->suffix_min[q] = 0; continue; }
        const uint32_t m = g->ek[q] == GE_BYTES ? 1 : g->rule_min[g->ev[q]];
        g->suffix_min[q] = sat_add(m, g->suffix_min[q + 1]);
    }
    /* FIRST and FOLLOW byte sets (fixpoint, bounded work) */
    uint64_t work = 0;
    changed = true;
    while (changed && work <= GT_ANALYSIS_WORK) {
        changed = false;
        for (uint32_t a = 0; a < na; a++) {
            uint32_t q = g->alt_start[a];
            const uint32_t r = g->pos_rule[q];
            for (; g->ek[q] != GE_END; q++) {
                const uint32_t *src = g->ek[q] == GE_BYTES ? g->sets[g->ev[q]] : first[g->ev[q]];
                for (int w = 0; w < 8; w++)
                    if (src[w] & ~first[r][w]) { first[r][w] |= src[w]; changed = true; }
                if (g->ek[q] == GE_BYTES || g->rule_min[g->ev[q]] != 0) break;
            }
            work += 8;
        }
        for (uint32_t q = 1; q < np; q++) {
            if (g->ek[q] != GE_RULE) continue;
            const uint32_t x = g->ev[q];
            uint32_t t = q + 1;
            for (; g->ek[t] != GE_END; t++) {
                const uint32_t *src = g->ek[t] == GE_BYTES ? g->sets[g->ev[t]] : first[g->ev[t]];
                for (int w = 0; w < 8; w++)
                    if (src[w] & ~g->follow[x][w]) { g->follow[x][w] |= src[w]; changed = true; }
                if (g->ek[t] == GE_BYTES || g->rule_min[g->ev[t]] != 0) break;
            }
            if (g->ek[t] == GE_END) {
                const uint32_t r = g->pos_rule[q];
                for (int w = 0; w < 8; w++)
                    if (g->follow[r][w] & ~g->follow[x][w]) { g->follow[x][w] |= g->follow[r][w]; changed = true; }
            }
            work += 8;
        }
    }
    free(first);
    if (work > GT_ANALYSIS_WORK) {
        gt_rules_free(g);
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: too complex to analyse");
    }
    *out = g;
    return GEIST_OK;
}

geist_status gt_gbnf_compile(const char *text, size_t len, gt_rules **out, gt_err *err) {
    *out = NULL;
    if (!text) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: text is NULL");
    if (len > GT_GRAMMAR_MAX_TEXT)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: text of %zu bytes (over 1 MiB)", len);
    if (memchr(text, '\0', len))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: NUL byte in the text");
    gt_gbuild b = {.err = err};
    gp p = {.s = text, .n = len, .line = 1, .b = &b, .err = err};
    geist_status st = parse_all(&p);
    int64_t root = -1;
    if (st == GEIST_OK) {
        for (uint32_t r = 0; r < b.n_rules && st == GEIST_OK; r++)
            if (!b.rules[r].defined)
                st = gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: undefined rule '%.80s' (line %d)",
                             b.rules[r].name, b.rules[r].line);
    }
    if (st == GEIST_OK) {
        root = rule_find(&b, "root", 4);
        if (root < 0) st = gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: no rule named 'root'");
    }
    if (st == GEIST_OK) st = analyse(&b, err, (uint32_t)root);
    if (st == GEIST_OK) st = flatten(&b, (uint32_t)root, out, err);
    build_free(&b);
    return st;
}
