/* Chat template engine: arena, lexer, parser and the render entry point. Evaluation lives in
 * template_eval.c. See template.h for the supported Jinja subset. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template_internal.h"

/* ---- arena ------------------------------------------------------------------------------- */

struct tp_block {
    tp_block *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

#define TP_BLOCK_MIN (64u * 1024u)

void *gt_tp_alloc(tp_arena *a, size_t n) {
    size_t need = (n + 15u) & ~(size_t)15u;
    if (need < n) return NULL;
    a->hit_limit = false;
    if (a->limit && (need > a->limit || a->used > a->limit - need)) {
        a->hit_limit = true;
        return NULL;
    }
    tp_block *b = a->head;
    if (!b || b->cap - b->used < need) {
        size_t cap = need > TP_BLOCK_MIN ? need : TP_BLOCK_MIN;
        if (cap > SIZE_MAX - sizeof(tp_block)) return NULL;
        b = malloc(sizeof(tp_block) + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += need;
    a->used += need;
    memset(p, 0, n);
    return p;
}

void gt_tp_arena_free(tp_arena *a) {
    tp_block *b = a->head;
    while (b) {
        tp_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- whitespace (Python str.isspace) ----------------------------------------------------- */

static bool ascii_space(unsigned char c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20);
}

size_t gt_tp_space_len(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    if (n == 0) return 0;
    if (ascii_space(u[0])) return 1;
    if (n >= 2 && u[0] == 0xc2 && (u[1] == 0x85 || u[1] == 0xa0)) return 2;
    if (n >= 3) {
        if (u[0] == 0xe1 && u[1] == 0x9a && u[2] == 0x80) return 3; /* U+1680 */
        if (u[0] == 0xe2 && u[1] == 0x80 &&
            ((u[2] >= 0x80 && u[2] <= 0x8a) || u[2] == 0xa8 || u[2] == 0xa9 || u[2] == 0xaf))
            return 3; /* U+2000..200A, 2028, 2029, 202F */
        if (u[0] == 0xe2 && u[1] == 0x81 && u[2] == 0x9f) return 3; /* U+205F */
        if (u[0] == 0xe3 && u[1] == 0x80 && u[2] == 0x80) return 3; /* U+3000 */
    }
    return 0;
}

size_t gt_tp_space_len_back(const char *s, size_t n) {
    size_t total = 0;
    while (total < n) {
        size_t rem = n - total;
        size_t k = 0;
        if (ascii_space((unsigned char)s[rem - 1])) {
            k = 1;
        } else if (rem >= 2 && gt_tp_space_len(s + rem - 2, 2) == 2) {
            k = 2;
        } else if (rem >= 3 && gt_tp_space_len(s + rem - 3, 3) == 3) {
            k = 3;
        }
        if (!k) break;
        total += k;
    }
    return total;
}

static size_t space_run(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = gt_tp_space_len(s + i, n - i);
        if (!k) break;
        i += k;
    }
    return i;
}

/* ---- lexer ------------------------------------------------------------------------------- */

enum { T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT,
       T_OP, T_EOF };

typedef struct tp_tok {
    int type;
    uint32_t pos;
    tp_str s; /* name, operator text, decoded string or text */
    int64_t i;
} tp_tok;

typedef struct tp_parser {
    const char *src;
    size_t n;
    const gt_tmpl_opts *opts;
    tp_arena *ar;
    gt_err *err;
    geist_status status; /* GEIST_OK until the first failure */
    tp_tok *toks;
    size_t ntok, captok;
    size_t cur;
    int depth;
} tp_parser;

static bool fail(tp_parser *P, size_t pos, const char *fmt, ...) GT_PRINTF(3, 4);
static bool fail(tp_parser *P, size_t pos, const char *fmt, ...) {
    if (P->status != GEIST_OK) return false;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    P->status = gt_fail(P->err, GEIST_ERR_BAD_FORMAT, "chat template syntax error at byte %zu: %s",
                        pos, msg);
    return false;
}

static bool oom(tp_parser *P) {
    if (P->status != GEIST_OK) return false;
    if (P->ar->hit_limit) {
        P->status = gt_fail(P->err, GEIST_ERR_BAD_FORMAT,
                            "chat template too large: parsing passed the memory limit");
    } else {
        P->status = gt_fail(P->err, GEIST_ERR_OUT_OF_MEMORY, "out of memory parsing chat template");
    }
    return false;
}

static tp_tok *push_tok(tp_parser *P, int type, size_t pos) {
    if (P->ntok == P->captok) {
        size_t cap = P->captok ? P->captok * 2 : 256;
        tp_tok *t = gt_tp_alloc(P->ar, cap * sizeof *t);
        if (!t) {
            oom(P);
            return NULL;
        }
        if (P->ntok) memcpy(t, P->toks, P->ntok * sizeof *t);
        P->toks = t;
        P->captok = cap;
    }
    tp_tok *t = &P->toks[P->ntok++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->pos = (uint32_t)pos;
    return t;
}

/* Text with "\r\n" and "\r" turned into "\n", as jinja2 normalises newlines. */
static bool push_text(tp_parser *P, size_t from, size_t to) {
    if (to <= from) return true;
    tp_tok *t = push_tok(P, T_TEXT, from);
    if (!t) return false;
    const char *s = P->src + from;
    size_t n = to - from;
    if (!memchr(s, '\r', n)) {
        t->s.p = s;
        t->s.n = n;
        return true;
    }
    char *d = gt_tp_alloc(P->ar, n);
    if (!d) return oom(P);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r') {
            d[k++] = '\n';
            if (i + 1 < n && s[i + 1] == '\n') i++;
        } else {
            d[k++] = s[i];
        }
    }
    t->s.p = d;
    t->s.n = k;
    return true;
}

static size_t put_utf8(char *d, uint32_t cp) {
    if (cp < 0x80) {
        d[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (char)(0xc0 | (cp >> 6));
        d[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (char)(0xe0 | (cp >> 12));
        d[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        d[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    d[0] = (char)(0xf0 | (cp >> 18));
    d[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    d[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A quoted string at src[i] (the quote). Decodes Python escapes; an unknown escape is kept as
 * written (what Python's unicode-escape codec does). */
static bool lex_string(tp_parser *P, size_t *ip) {
    size_t i = *ip, start = i;
    char q = P->src[i++];
    size_t j = i;
    while (j < P->n && P->src[j] != q) {
        if (P->src[j] == '\\') j++;
        j++;
    }
    if (j >= P->n) return fail(P, start, "unterminated string literal");
    /* decoded text is never longer than the source text */
    char *d = gt_tp_alloc(P->ar, j - i + 1);
    if (!d) return oom(P);
    size_t k = 0;
    const char *s = P->src;
    while (i < j) {
        char c = s[i];
        if (c == '\r') { /* newline normalisation happens before escapes in jinja2 */
            d[k++] = '\n';
            i += (i + 1 < j && s[i + 1] == '\n') ? 2 : 1;
            continue;
        }
        if (c != '\\') {
            d[k++] = c;
            i++;
            continue;
        }
        char e = s[i + 1];
        size_t used = 2;
        switch (e) {
        case 'n': d[k++] = '\n'; break;
        case 't': d[k++] = '\t'; break;
        case 'r': d[k++] = '\r'; break;
        case '\\': d[k++] = '\\'; break;
        case '\'': d[k++] = '\''; break;
        case '"': d[k++] = '"'; break;
        case 'a': d[k++] = '\a'; break;
        case 'b': d[k++] = '\b'; break;
        case 'f': d[k++] = '\f'; break;
        case 'v': d[k++] = '\v'; break;
        case '\n': break; /* line continuation */
        case 'x': case 'u': case 'U': {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int h = 0; h < digits; h++) {
                size_t at = i + 2 + (size_t)h;
                int v = at < j ? hexval(s[at]) : -1;
                if (v < 0) return fail(P, i, "bad \\%c escape in string literal", e);
                cp = cp * 16 + (uint32_t)v;
            }
            if (cp > 0x10ffff) return fail(P, i, "escape out of Unicode range");
            if (cp >= 0xd800 && cp <= 0xdfff) return fail(P, i, "surrogate escape in string literal");
            used = 2 + (size_t)digits;
            k += put_utf8(d + k, cp); /* <= 4 bytes from >= 4 source bytes */
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = 0;
                size_t m = 0;
                while (m < 3 && i + 1 + m < j && s[i + 1 + m] >= '0' && s[i + 1 + m] <= '7') {
                    cp = cp * 8 + (uint32_t)(s[i + 1 + m] - '0');
                    m++;
                }
                used = 1 + m;
                /* up to 0777 = 511: at most 2 UTF-8 bytes from >= 2 source bytes */
                k += put_utf8(d + k, cp);
            } else {
                d[k++] = '\\';
                d[k++] = e;
            }
        }
        i += used;
    }
    tp_tok *t = push_tok(P, T_STRING, start);
    if (!t) return false;
    t->s.p = d;
    t->s.n = k;
    *ip = j + 1;
    return true;
}

static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

/* Tokens inside one {{ }} or {% %} tag, up to and including its end. */
static bool lex_tag(tp_parser *P, size_t *ip, bool is_block, size_t tag_pos, bool *strip_after) {
    const char *s = P->src;
    size_t n = P->n, i = *ip;
    char closer = is_block ? '%' : '}';
    int depth = 0; /* open brackets: an end marker inside them is not the end of the tag */
    for (;;) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
        if (i >= n) return fail(P, tag_pos, "unterminated %s tag", is_block ? "{%" : "{{");
        if (depth == 0) {
            bool minus = s[i] == '-' && i + 2 < n && s[i + 1] == closer && s[i + 2] == '}';
            bool plain = s[i] == closer && i + 1 < n && s[i + 1] == '}';
            if (minus || plain) {
                if (!push_tok(P, is_block ? T_BLOCK_END : T_VAR_END, i)) return false;
                *strip_after = minus;
                *ip = i + (minus ? 3 : 2);
                return true;
            }
        }
        char c = s[i];
        if (c == '\'' || c == '"') {
            if (!lex_string(P, &i)) return false;
            continue;
        }
        if (c >= '0' && c <= '9') {
            size_t st = i;
            int64_t v = 0;
            while (i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '_')) {
                if (s[i] != '_') {
                    int d = s[i] - '0';
                    if (v > (INT64_MAX - d) / 10) return fail(P, st, "integer literal too large");
                    v = v * 10 + d;
                }
                i++;
            }
            if (i < n && (s[i] == '.' || s[i] == 'e' || s[i] == 'E') && i + 1 < n &&
                s[i + 1] >= '0' && s[i + 1] <= '9')
                return fail(P, st, "float literals are not supported");
            tp_tok *t = push_tok(P, T_INT, st);
            if (!t) return false;
            t->i = v;
            continue;
        }
        if (is_name_start(c)) {
            size_t st = i;
            while (i < n && is_name_char(s[i])) i++;
            tp_tok *t = push_tok(P, T_NAME, st);
            if (!t) return false;
            t->s.p = s + st;
            t->s.n = i - st;
            continue;
        }
        static const char *const two[] = {"==", "!=", "<=", ">=", "//", "**"};
        size_t len = 0;
        for (size_t k = 0; k < sizeof two / sizeof two[0]; k++) {
            if (i + 1 < n && s[i] == two[k][0] && s[i + 1] == two[k][1]) {
                len = 2;
                break;
            }
        }
        if (!len) {
            if (!strchr("+-*/%~<>()[]{}.,:|=", c) || c == '\0')
                return fail(P, i, "unexpected character '%c'", c >= 0x20 && c < 0x7f ? c : '?');
            len = 1;
            if (c == '(' || c == '[' || c == '{') {
                depth++;
            } else if (c == ')' || c == ']' || c == '}') {
                if (depth == 0) return fail(P, i, "unbalanced '%c'", c);
                depth--;
            }
        }
        tp_tok *t = push_tok(P, T_OP, i);
        if (!t) return false;
        t->s.p = s + i;
        t->s.n = len;
        i += len;
    }
}

static size_t find_tag(const char *s, size_t n, size_t from) {
    for (size_t i = from; i + 1 < n; i++) {
        if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) return i;
    }
    return n;
}

/* Is there "<ws>name<ws>[-]%}" at s[i]? *end = past "%}", *minus = the '-' was there. */
static bool raw_tag(const char *s, size_t n, size_t i, const char *name, size_t *end,
                    bool *minus) {
    size_t len = strlen(name);
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    if (i + len > n || memcmp(s + i, name, len) != 0) return false;
    i += len;
    if (i < n && is_name_char(s[i])) return false;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    bool m = i < n && s[i] == '-';
    if (m) i++;
    if (i + 1 >= n || s[i] != '%' || s[i + 1] != '}') return false;
    *end = i + 2;
    if (minus) *minus = m;
    return true;
}

/* {% raw %}...{% endraw %}: the text between is output as written. */
static bool lex_raw(tp_parser *P, size_t tag, size_t content, size_t *ip, bool *lstrip_next) {
    const char *s = P->src;
    size_t n = P->n;
    bool strip_start = s[content - 3] == '-';
    for (size_t k = content; k + 1 < n; k++) {
        if (s[k] != '{' || s[k + 1] != '%') continue;
        size_t body = k + 2;
        char mod = body < n ? s[body] : 0;
        if (mod == '-' || mod == '+') body++;
        size_t end;
        bool minus = false;
        if (!raw_tag(s, n, body, "endraw", &end, &minus)) continue;
        size_t ts = content, te = k;
        if (strip_start) ts += space_run(s + ts, te - ts);
        if (mod == '-') te -= gt_tp_space_len_back(s + ts, te - ts);
        if (ts < te && !push_text(P, ts, te)) return false;
        *lstrip_next = minus;
        *ip = end;
        return true;
    }
    return fail(P, tag, "'raw' without 'endraw'");
}

static bool lex_all(tp_parser *P) {
    const char *s = P->src;
    size_t n = P->n, i = 0;
    bool lstrip_next = false, trim_nl_next = false;
    for (;;) {
        size_t j = find_tag(s, n, i);
        size_t ts = i, te = j;
        char kind = 0, mod = 0;
        if (j < n) {
            kind = s[j + 1];
            mod = j + 2 < n ? s[j + 2] : 0;
            if (mod == '-') {
                te -= gt_tp_space_len_back(s + ts, te - ts);
            } else if (P->opts->lstrip_blocks && kind != '{' && mod != '+') {
                /* only spaces/tabs between the line start and the tag */
                size_t k = te;
                while (k > ts && (s[k - 1] == ' ' || s[k - 1] == '\t')) k--;
                if (k == 0 || s[k - 1] == '\n' || s[k - 1] == '\r') te = k;
            }
        }
        if (lstrip_next) {
            ts += space_run(s + ts, te - ts);
        } else if (trim_nl_next && ts < te) {
            if (s[ts] == '\n') ts++;
            else if (s[ts] == '\r') ts += (ts + 1 < te && s[ts + 1] == '\n') ? 2 : 1;
        }
        if (ts < te && !push_text(P, ts, te)) return false;
        lstrip_next = trim_nl_next = false;
        if (j >= n) break;
        size_t body = j + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
        if (kind == '#') {
            size_t e = body;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= n) return fail(P, j, "unterminated comment");
            if (e > body && s[e - 1] == '-') lstrip_next = true;
            else trim_nl_next = P->opts->trim_blocks;
            i = e + 2;
            continue;
        }
        bool is_block = kind == '%';
        size_t raw_end;
        if (is_block && raw_tag(s, n, body, "raw", &raw_end, NULL)) {
            if (!lex_raw(P, j, raw_end, &i, &lstrip_next)) return false;
            continue;
        }
        if (!push_tok(P, is_block ? T_BLOCK_BEGIN : T_VAR_BEGIN, j)) return false;
        bool strip_after = false;
        i = body;
        if (!lex_tag(P, &i, is_block, j, &strip_after)) return false;
        if (strip_after) lstrip_next = true;
        else if (is_block) trim_nl_next = P->opts->trim_blocks;
    }
    return push_tok(P, T_EOF, n) != NULL;
}

/* ---- parser ------------------------------------------------------------------------------ */

static const tp_tok *peek(const tp_parser *P) { return &P->toks[P->cur]; }
static const tp_tok *peek2(const tp_parser *P) {
    return &P->toks[P->cur + 1 < P->ntok ? P->cur + 1 : P->cur];
}
static const tp_tok *advance(tp_parser *P) {
    const tp_tok *t = &P->toks[P->cur];
    if (t->type != T_EOF) P->cur++;
    return t;
}

static bool str_is(tp_str s, const char *c) { return strlen(c) == s.n && memcmp(s.p, c, s.n) == 0; }
static bool tok_op(const tp_tok *t, const char *op) { return t->type == T_OP && str_is(t->s, op); }
static bool tok_name(const tp_tok *t, const char *nm) {
    return t->type == T_NAME && str_is(t->s, nm);
}

static const char *tok_desc(const tp_tok *t) {
    switch (t->type) {
    case T_TEXT: return "template text";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_NAME: return "a name";
    case T_STRING: return "a string";
    case T_INT: return "an integer";
    case T_OP: return "an operator";
    default: return "the end of the template";
    }
}

static bool expect_op(tp_parser *P, const char *op) {
    const tp_tok *t = peek(P);
    if (!tok_op(t, op)) return fail(P, t->pos, "expected '%s', found %s", op, tok_desc(t));
    advance(P);
    return true;
}

static bool expect_type(tp_parser *P, int type, const char *what) {
    const tp_tok *t = peek(P);
    if (t->type != type) return fail(P, t->pos, "expected %s, found %s", what, tok_desc(t));
    advance(P);
    return true;
}

static tp_node *node(tp_parser *P, int kind, size_t pos) {
    tp_node *x = gt_tp_alloc(P->ar, sizeof *x);
    if (!x) {
        oom(P);
        return NULL;
    }
    x->kind = kind;
    x->pos = (uint32_t)pos;
    x->height = 1;
    return x;
}

/* Records child heights; refuses trees so tall that evaluating them could exhaust the stack. */
static bool grow(tp_parser *P, tp_node *x, const tp_node *child) {
    if (child && child->height + 1 > x->height) x->height = child->height + 1;
    if (x->height > GT_TMPL_LIMIT_HEIGHT)
        return fail(P, x->pos, "expression nested too deeply (limit %d)", GT_TMPL_LIMIT_HEIGHT);
    return true;
}

/* A growable array of node pointers, copied into the arena when finished. */
typedef struct nvec {
    tp_node **v;
    size_t n, cap;
} nvec;

static bool nvec_push(tp_parser *P, nvec *a, tp_node *x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        tp_node **v = gt_tp_alloc(P->ar, cap * sizeof *v);
        if (!v) return oom(P);
        if (a->n) memcpy(v, a->v, a->n * sizeof *v);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return true;
}

static bool enter(tp_parser *P, size_t pos) {
    if (++P->depth > GT_TMPL_LIMIT_NESTING)
        return fail(P, pos, "nesting too deep (limit %d)", GT_TMPL_LIMIT_NESTING);
    return true;
}
static void leave(tp_parser *P) { P->depth--; }

static tp_node *parse_expr(tp_parser *P);
static tp_node *parse_or(tp_parser *P);
static tp_node *parse_unary(tp_parser *P, bool with_filter);
static tp_node *parse_primary(tp_parser *P);
static tp_node *parse_postfix(tp_parser *P, tp_node *x);

/* Call arguments after '(' up to ')': positional then keyword (name=value). */
static bool parse_args(tp_parser *P, tp_node *x) {
    nvec args = {0}, kwv = {0};
    tp_str *kwn = NULL;
    size_t kwcap = 0;
    if (!expect_op(P, "(")) return false;
    while (!tok_op(peek(P), ")")) {
        if (args.n + kwv.n > 0 && !expect_op(P, ",")) return false;
        if (tok_op(peek(P), ")")) break; /* trailing comma */
        const tp_tok *t = peek(P);
        if (t->type == T_NAME && tok_op(peek2(P), "=")) {
            advance(P);
            advance(P);
            tp_node *v = parse_expr(P);
            if (!v) return false;
            if (kwv.n == kwcap) {
                size_t cap = kwcap ? kwcap * 2 : 4;
                tp_str *nk = gt_tp_alloc(P->ar, cap * sizeof *nk);
                if (!nk) return oom(P);
                if (kwv.n) memcpy(nk, kwn, kwv.n * sizeof *nk);
                kwn = nk;
                kwcap = cap;
            }
            kwn[kwv.n] = t->s;
            if (!nvec_push(P, &kwv, v) || !grow(P, x, v)) return false;
        } else {
            if (kwv.n) return fail(P, t->pos, "positional argument after keyword argument");
            tp_node *v = parse_expr(P);
            if (!v || !nvec_push(P, &args, v) || !grow(P, x, v)) return false;
        }
    }
    advance(P);
    x->list = args.v;
    x->n = args.n;
    x->kwn = kwn;
    x->kwv = kwv.v;
    x->nkw = kwv.n;
    return true;
}

static tp_node *parse_subscript(tp_parser *P, tp_node *obj) {
    size_t pos = peek(P)->pos;
    advance(P); /* '[' */
    tp_node *parts[3] = {NULL, NULL, NULL};
    int colons = 0;
    for (;;) {
        const tp_tok *t = peek(P);
        if (tok_op(t, "]")) break;
        if (tok_op(t, ":")) {
            if (++colons > 2) {
                fail(P, t->pos, "too many ':' in slice");
                return NULL;
            }
            advance(P);
            continue;
        }
        if (parts[colons]) {
            fail(P, t->pos, "expected ']' or ':', found %s", tok_desc(t));
            return NULL;
        }
        parts[colons] = parse_expr(P);
        if (!parts[colons]) return NULL;
    }
    advance(P);
    tp_node *x = node(P, colons ? E_SLICE : E_ITEM, pos);
    if (!x) return NULL;
    x->a = obj;
    if (!grow(P, x, obj)) return NULL;
    if (colons) {
        x->b = parts[0];
        x->c = parts[1];
        x->d = parts[2];
        for (int k = 0; k < 3; k++)
            if (!grow(P, x, parts[k])) return NULL;
    } else {
        if (!parts[0]) {
            fail(P, pos, "empty subscript");
            return NULL;
        }
        x->b = parts[0];
        if (!grow(P, x, parts[0])) return NULL;
    }
    return x;
}

static tp_node *parse_postfix(tp_parser *P, tp_node *x) {
    for (;;) {
        const tp_tok *t = peek(P);
        if (tok_op(t, ".")) {
            advance(P);
            const tp_tok *nm = peek(P);
            if (nm->type == T_NAME) {
                advance(P);
                tp_node *y = node(P, E_ATTR, nm->pos);
                if (!y) return NULL;
                y->a = x;
                y->name = nm->s;
                if (!grow(P, y, x)) return NULL;
                x = y;
            } else if (nm->type == T_INT) {
                advance(P);
                tp_node *idx = node(P, E_LIT, nm->pos);
                tp_node *y = node(P, E_ITEM, nm->pos);
                if (!idx || !y) return NULL;
                idx->lit.t = TV_INT;
                idx->lit.u.i = nm->i;
                y->a = x;
                y->b = idx;
                if (!grow(P, y, x)) return NULL;
                x = y;
            } else {
                fail(P, nm->pos, "expected an attribute name after '.'");
                return NULL;
            }
        } else if (tok_op(t, "[")) {
            if (!enter(P, t->pos)) return NULL;
            x = parse_subscript(P, x);
            leave(P);
            if (!x) return NULL;
        } else if (tok_op(t, "(")) {
            if (!enter(P, t->pos)) return NULL;
            tp_node *y = node(P, E_CALL, t->pos);
            if (!y) return NULL;
            y->a = x;
            if (!grow(P, y, x) || !parse_args(P, y)) return NULL;
            leave(P);
            x = y;
        } else {
            return x;
        }
    }
}

/* A filter or test name; jinja2 allows dots in them ("a.b"), which then simply name nothing. */
static bool parse_dotted_name(tp_parser *P, const char *what, tp_str *out) {
    const tp_tok *first = peek(P);
    if (!expect_type(P, T_NAME, what)) return false;
    *out = first->s;
    while (tok_op(peek(P), ".") && peek2(P)->type == T_NAME) {
        advance(P);
        const tp_tok *part = advance(P);
        out->n = (size_t)(part->s.p + part->s.n - out->p); /* the source span covers the dots */
    }
    return true;
}

static tp_node *parse_filters(tp_parser *P, tp_node *x) {
    for (;;) {
        const tp_tok *t = peek(P);
        if (tok_op(t, "|")) {
            advance(P);
            const tp_tok *nm = peek(P);
            tp_str name;
            if (!parse_dotted_name(P, "a filter name", &name)) return NULL;
            tp_node *y = node(P, E_FILTER, nm->pos);
            if (!y) return NULL;
            y->a = x;
            y->name = name;
            if (!grow(P, y, x)) return NULL;
            if (tok_op(peek(P), "(")) {
                if (!enter(P, peek(P)->pos)) return NULL;
                if (!parse_args(P, y)) return NULL;
                leave(P);
            }
            x = y;
        } else if (tok_name(t, "is")) {
            advance(P);
            bool neg = false;
            if (tok_name(peek(P), "not")) {
                advance(P);
                neg = true;
            }
            const tp_tok *nm = peek(P);
            tp_str name;
            if (!parse_dotted_name(P, "a test name", &name)) return NULL;
            tp_node *y = node(P, E_TEST, nm->pos);
            if (!y) return NULL;
            y->a = x;
            y->name = name;
            y->op = neg;
            if (!grow(P, y, x)) return NULL;
            const tp_tok *nx = peek(P);
            if (tok_op(nx, "(")) {
                if (!enter(P, nx->pos)) return NULL;
                if (!parse_args(P, y)) return NULL;
                leave(P);
            } else if ((nx->type == T_NAME || nx->type == T_STRING || nx->type == T_INT ||
                        tok_op(nx, "[") || tok_op(nx, "{")) &&
                       !tok_name(nx, "else") && !tok_name(nx, "or") && !tok_name(nx, "and")) {
                /* jinja2: a test takes one argument without parentheses (`is divisibleby 3`) */
                if (!enter(P, nx->pos)) return NULL;
                tp_node *arg = parse_primary(P);
                if (arg) arg = parse_postfix(P, arg);
                leave(P);
                if (!arg) return NULL;
                y->list = gt_tp_alloc(P->ar, sizeof *y->list);
                if (!y->list) {
                    oom(P);
                    return NULL;
                }
                y->list[0] = arg;
                y->n = 1;
                if (!grow(P, y, arg)) return NULL;
            }
            x = y;
        } else if (tok_op(t, "(")) {
            if (!enter(P, t->pos)) return NULL;
            tp_node *y = node(P, E_CALL, t->pos);
            if (!y) return NULL;
            y->a = x;
            if (!grow(P, y, x) || !parse_args(P, y)) return NULL;
            leave(P);
            x = y;
        } else {
            return x;
        }
    }
}

/* Items of a list/tuple up to the closing bracket (already past the opener). */
static bool parse_items(tp_parser *P, const char *close, nvec *items, bool *saw_comma) {
    *saw_comma = false;
    while (!tok_op(peek(P), close)) {
        if (items->n > 0) {
            if (!expect_op(P, ",")) return false;
            *saw_comma = true;
            if (tok_op(peek(P), close)) break;
        }
        tp_node *v = parse_expr(P);
        if (!v || !nvec_push(P, items, v)) return false;
    }
    advance(P);
    return true;
}

static tp_node *parse_primary(tp_parser *P) {
    const tp_tok *t = peek(P);
    tp_node *x = NULL;
    switch (t->type) {
    case T_NAME: {
        advance(P);
        x = node(P, E_LIT, t->pos);
        if (!x) return NULL;
        if (str_is(t->s, "true") || str_is(t->s, "True")) {
            x->lit.t = TV_BOOL;
            x->lit.u.b = true;
        } else if (str_is(t->s, "false") || str_is(t->s, "False")) {
            x->lit.t = TV_BOOL;
            x->lit.u.b = false;
        } else if (str_is(t->s, "none") || str_is(t->s, "None")) {
            x->lit.t = TV_NONE;
        } else {
            x->kind = E_NAME;
            x->name = t->s;
        }
        return x;
    }
    case T_STRING: {
        advance(P);
        x = node(P, E_LIT, t->pos);
        if (!x) return NULL;
        tp_str s = t->s;
        if (peek(P)->type == T_STRING) { /* adjacent literals concatenate */
            size_t total = s.n;
            for (size_t q = P->cur; P->toks[q].type == T_STRING; q++) total += P->toks[q].s.n;
            char *d = gt_tp_alloc(P->ar, total + 1);
            if (!d) {
                oom(P);
                return NULL;
            }
            memcpy(d, s.p, s.n);
            size_t off = s.n;
            while (peek(P)->type == T_STRING) {
                const tp_tok *u = advance(P);
                memcpy(d + off, u->s.p, u->s.n);
                off += u->s.n;
            }
            s.p = d;
            s.n = off;
        }
        x->lit.t = TV_STR;
        x->lit.u.s = s;
        return x;
    }
    case T_INT:
        advance(P);
        x = node(P, E_LIT, t->pos);
        if (!x) return NULL;
        x->lit.t = TV_INT;
        x->lit.u.i = t->i;
        return x;
    case T_OP:
        if (tok_op(t, "(") || tok_op(t, "[")) {
            bool paren = tok_op(t, "(");
            if (!enter(P, t->pos)) return NULL;
            advance(P);
            nvec items = {0};
            bool comma = false;
            if (!parse_items(P, paren ? ")" : "]", &items, &comma)) return NULL;
            leave(P);
            if (paren && items.n == 1 && !comma) return items.v[0];
            /* tuples and lists are both lists here; "()" is an empty tuple */
            x = node(P, E_LIST, t->pos);
            if (!x) return NULL;
            x->op = paren;
            x->list = items.v;
            x->n = items.n;
            for (size_t k = 0; k < items.n; k++)
                if (!grow(P, x, items.v[k])) return NULL;
            return x;
        }
        if (tok_op(t, "{")) {
            if (!enter(P, t->pos)) return NULL;
            advance(P);
            nvec keys = {0}, vals = {0};
            while (!tok_op(peek(P), "}")) {
                if (keys.n > 0) {
                    if (!expect_op(P, ",")) return NULL;
                    if (tok_op(peek(P), "}")) break;
                }
                tp_node *k = parse_expr(P);
                if (!k || !expect_op(P, ":")) return NULL;
                tp_node *v = parse_expr(P);
                if (!v || !nvec_push(P, &keys, k) || !nvec_push(P, &vals, v)) return NULL;
            }
            advance(P);
            leave(P);
            x = node(P, E_DICT, t->pos);
            if (!x) return NULL;
            x->list = keys.v;
            x->list2 = vals.v;
            x->n = keys.n;
            for (size_t k = 0; k < keys.n; k++)
                if (!grow(P, x, keys.v[k]) || !grow(P, x, vals.v[k])) return NULL;
            return x;
        }
        break;
    default:
        break;
    }
    fail(P, t->pos, "expected an expression, found %s", tok_desc(t));
    return NULL;
}

static tp_node *parse_unary(tp_parser *P, bool with_filter) {
    const tp_tok *t = peek(P);
    tp_node *x;
    if (tok_op(t, "-") || tok_op(t, "+")) {
        if (!enter(P, t->pos)) return NULL;
        advance(P);
        tp_node *inner = parse_unary(P, false);
        leave(P);
        if (!inner) return NULL;
        x = node(P, tok_op(t, "-") ? E_NEG : E_POS, t->pos);
        if (!x) return NULL;
        x->a = inner;
        if (!grow(P, x, inner)) return NULL;
    } else {
        x = parse_primary(P);
        if (!x) return NULL;
    }
    x = parse_postfix(P, x);
    if (x && with_filter) x = parse_filters(P, x);
    return x;
}

static tp_node *binary(tp_parser *P, int kind, int op, size_t pos, tp_node *l, tp_node *r) {
    tp_node *x = node(P, kind, pos);
    if (!x) return NULL;
    x->op = op;
    x->a = l;
    x->b = r;
    if (!grow(P, x, l) || !grow(P, x, r)) return NULL;
    return x;
}

static tp_node *parse_pow(tp_parser *P) {
    tp_node *l = parse_unary(P, true);
    while (l && tok_op(peek(P), "**")) {
        size_t pos = advance(P)->pos;
        tp_node *r = parse_unary(P, true);
        if (!r) return NULL;
        l = binary(P, E_BIN, OP_POW, pos, l, r);
    }
    return l;
}

static tp_node *parse_math2(tp_parser *P) {
    tp_node *l = parse_pow(P);
    for (;;) {
        if (!l) return NULL;
        const tp_tok *t = peek(P);
        int op = tok_op(t, "*") ? OP_MUL : tok_op(t, "/") ? OP_DIV
               : tok_op(t, "//") ? OP_FLOORDIV : tok_op(t, "%") ? OP_MOD : 0;
        if (!op) return l;
        advance(P);
        tp_node *r = parse_pow(P);
        if (!r) return NULL;
        l = binary(P, E_BIN, op, t->pos, l, r);
    }
}

static tp_node *parse_concat(tp_parser *P) {
    tp_node *l = parse_math2(P);
    while (l && tok_op(peek(P), "~")) {
        size_t pos = advance(P)->pos;
        tp_node *r = parse_math2(P);
        if (!r) return NULL;
        l = binary(P, E_BIN, OP_CONCAT, pos, l, r);
    }
    return l;
}

static tp_node *parse_math1(tp_parser *P) {
    tp_node *l = parse_concat(P);
    for (;;) {
        if (!l) return NULL;
        const tp_tok *t = peek(P);
        int op = tok_op(t, "+") ? OP_ADD : tok_op(t, "-") ? OP_SUB : 0;
        if (!op) return l;
        advance(P);
        tp_node *r = parse_concat(P);
        if (!r) return NULL;
        l = binary(P, E_BIN, op, t->pos, l, r);
    }
}

static int cmp_op(tp_parser *P) {
    const tp_tok *t = peek(P);
    if (t->type == T_OP) {
        static const struct { const char *s; int op; } ops[] = {
            {"==", OP_EQ}, {"!=", OP_NE}, {"<", OP_LT}, {">", OP_GT}, {"<=", OP_LE}, {">=", OP_GE}};
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
            if (str_is(t->s, ops[k].s)) return ops[k].op;
        return 0;
    }
    if (tok_name(t, "in")) return OP_IN;
    if (tok_name(t, "not") && tok_name(peek2(P), "in")) return OP_NOTIN;
    return 0;
}

static tp_node *parse_compare(tp_parser *P) {
    tp_node *first = parse_math1(P);
    if (!first) return NULL;
    int op = cmp_op(P);
    if (!op) return first;
    tp_node *x = node(P, E_CMP, peek(P)->pos);
    if (!x) return NULL;
    x->a = first;
    if (!grow(P, x, first)) return NULL;
    nvec rhs = {0};
    int *ops = NULL;
    size_t opcap = 0;
    while ((op = cmp_op(P)) != 0) {
        advance(P);
        if (op == OP_NOTIN) advance(P);
        tp_node *r = parse_math1(P);
        if (!r) return NULL;
        if (rhs.n == opcap) {
            size_t cap = opcap ? opcap * 2 : 4;
            int *no = gt_tp_alloc(P->ar, cap * sizeof *no);
            if (!no) {
                oom(P);
                return NULL;
            }
            if (rhs.n) memcpy(no, ops, rhs.n * sizeof *no);
            ops = no;
            opcap = cap;
        }
        ops[rhs.n] = op;
        if (!nvec_push(P, &rhs, r) || !grow(P, x, r)) return NULL;
    }
    x->list = rhs.v;
    x->ops = ops;
    x->n = rhs.n;
    return x;
}

static tp_node *parse_not(tp_parser *P) {
    const tp_tok *t = peek(P);
    if (tok_name(t, "not") && !tok_name(peek2(P), "in")) {
        if (!enter(P, t->pos)) return NULL;
        advance(P);
        tp_node *inner = parse_not(P);
        leave(P);
        if (!inner) return NULL;
        tp_node *x = node(P, E_NOT, t->pos);
        if (!x) return NULL;
        x->a = inner;
        return grow(P, x, inner) ? x : NULL;
    }
    return parse_compare(P);
}

static tp_node *parse_and(tp_parser *P) {
    tp_node *l = parse_not(P);
    while (l && tok_name(peek(P), "and")) {
        size_t pos = advance(P)->pos;
        tp_node *r = parse_not(P);
        if (!r) return NULL;
        l = binary(P, E_AND, 0, pos, l, r);
    }
    return l;
}

static tp_node *parse_or(tp_parser *P) {
    tp_node *l = parse_and(P);
    while (l && tok_name(peek(P), "or")) {
        size_t pos = advance(P)->pos;
        tp_node *r = parse_and(P);
        if (!r) return NULL;
        l = binary(P, E_OR, 0, pos, l, r);
    }
    return l;
}

/* condexpr: or ['if' or ['else' condexpr]] */
static tp_node *parse_cond(tp_parser *P) {
    tp_node *x = parse_or(P);
    while (x && tok_name(peek(P), "if")) {
        size_t pos = advance(P)->pos;
        tp_node *c = parse_or(P);
        if (!c) return NULL;
        tp_node *e = NULL;
        if (tok_name(peek(P), "else")) {
            advance(P);
            if (!enter(P, pos)) return NULL;
            e = parse_cond(P);
            leave(P);
            if (!e) return NULL;
        }
        tp_node *y = node(P, E_COND, pos);
        if (!y) return NULL;
        y->a = c;
        y->b = x;
        y->c = e;
        if (!grow(P, y, c) || !grow(P, y, x) || !grow(P, y, e)) return NULL;
        x = y;
    }
    return x;
}

static tp_node *parse_expr(tp_parser *P) {
    if (!enter(P, peek(P)->pos)) return NULL;
    tp_node *x = parse_cond(P);
    leave(P);
    return x;
}

/* ---- statements -------------------------------------------------------------------------- */

static tp_node *parse_body(tp_parser *P, const char *const *ends, size_t n_ends);

static bool expect_block_end(tp_parser *P) { return expect_type(P, T_BLOCK_END, "'%}'"); }

/* At "{% name": true if name is one of ends (nothing consumed). */
static bool at_end_tag(const tp_parser *P, const char *const *ends, size_t n_ends) {
    if (peek(P)->type != T_BLOCK_BEGIN) return false;
    const tp_tok *nm = peek2(P);
    for (size_t k = 0; k < n_ends; k++)
        if (tok_name(nm, ends[k])) return true;
    return false;
}

/* The condition of if/elif: jinja2 parses it without a trailing inline `x if c else y`. */
static tp_node *parse_test_expr(tp_parser *P) {
    if (!enter(P, peek(P)->pos)) return NULL;
    tp_node *x = parse_or(P);
    leave(P);
    return x;
}

static tp_node *parse_if(tp_parser *P, size_t pos) {
    static const char *const ends[] = {"elif", "else", "endif"};
    static const char *const end_only[] = {"endif"};
    tp_node *x = node(P, S_IF, pos);
    if (!x) return NULL;
    nvec conds = {0}, bodies = {0};
    tp_node *cond = parse_test_expr(P);
    if (!cond || !expect_block_end(P)) return NULL;
    for (;;) {
        tp_node *body = parse_body(P, ends, 3);
        if (!body || !nvec_push(P, &conds, cond) || !nvec_push(P, &bodies, body)) return NULL;
        if (!at_end_tag(P, ends, 3)) {
            fail(P, pos, "'if' without 'endif'");
            return NULL;
        }
        advance(P); /* {% */
        const tp_tok *nm = advance(P);
        if (tok_name(nm, "elif")) {
            cond = parse_test_expr(P);
            if (!cond || !expect_block_end(P)) return NULL;
            continue;
        }
        if (tok_name(nm, "else")) {
            if (!expect_block_end(P)) return NULL;
            x->c = parse_body(P, end_only, 1);
            if (!x->c) return NULL;
            if (!at_end_tag(P, end_only, 1)) {
                fail(P, pos, "'if' without 'endif'");
                return NULL;
            }
            advance(P);
            advance(P);
        }
        if (!expect_block_end(P)) return NULL;
        break;
    }
    x->list = conds.v;
    x->list2 = bodies.v;
    x->n = conds.n;
    return x;
}

static tp_node *parse_for(tp_parser *P, size_t pos) {
    static const char *const ends[] = {"else", "endfor"};
    static const char *const end_only[] = {"endfor"};
    tp_node *x = node(P, S_FOR, pos);
    if (!x) return NULL;
    const tp_tok *t = peek(P);
    if (!expect_type(P, T_NAME, "a loop variable")) return NULL;
    x->name = t->s;
    if (tok_op(peek(P), ",")) {
        advance(P);
        t = peek(P);
        if (!expect_type(P, T_NAME, "a loop variable")) return NULL;
        x->name2 = t->s;
        if (tok_op(peek(P), ",")) {
            fail(P, peek(P)->pos, "at most two loop variables are supported");
            return NULL;
        }
    }
    if (!tok_name(peek(P), "in")) {
        fail(P, peek(P)->pos, "expected 'in' in for loop");
        return NULL;
    }
    advance(P);
    if (!enter(P, pos)) return NULL;
    x->a = parse_or(P); /* no conditional expression: a trailing 'if' filters the loop */
    leave(P);
    if (!x->a) return NULL;
    if (tok_name(peek(P), "if")) {
        advance(P);
        x->b = parse_expr(P);
        if (!x->b) return NULL;
    }
    if (tok_name(peek(P), "recursive")) {
        fail(P, peek(P)->pos, "recursive loops are not supported");
        return NULL;
    }
    if (!expect_block_end(P)) return NULL;
    x->c = parse_body(P, ends, 2);
    if (!x->c) return NULL;
    if (!at_end_tag(P, ends, 2)) {
        fail(P, pos, "'for' without 'endfor'");
        return NULL;
    }
    advance(P);
    if (tok_name(advance(P), "else")) {
        if (!expect_block_end(P)) return NULL;
        x->d = parse_body(P, end_only, 1);
        if (!x->d) return NULL;
        if (!at_end_tag(P, end_only, 1)) {
            fail(P, pos, "'for' without 'endfor'");
            return NULL;
        }
        advance(P);
        advance(P);
    }
    if (!expect_block_end(P)) return NULL;
    return x;
}

static tp_node *parse_set(tp_parser *P, size_t pos) {
    static const char *const ends[] = {"endset"};
    tp_node *x = node(P, S_SET, pos);
    if (!x) return NULL;
    const tp_tok *t = peek(P);
    if (!expect_type(P, T_NAME, "a variable name")) return NULL;
    x->name = t->s;
    if (tok_op(peek(P), ".")) {
        advance(P);
        t = peek(P);
        if (!expect_type(P, T_NAME, "an attribute name")) return NULL;
        x->name2 = t->s;
    }
    if (tok_op(peek(P), "=")) {
        advance(P);
        x->a = parse_expr(P);
        if (!x->a) return NULL;
        if (tok_op(peek(P), ",")) {
            fail(P, peek(P)->pos, "tuple assignment is not supported");
            return NULL;
        }
        return expect_block_end(P) ? x : NULL;
    }
    if (!expect_block_end(P)) return NULL;
    x->c = parse_body(P, ends, 1);
    if (!x->c) return NULL;
    if (!at_end_tag(P, ends, 1)) {
        fail(P, pos, "'set' block without 'endset'");
        return NULL;
    }
    advance(P);
    advance(P);
    return expect_block_end(P) ? x : NULL;
}

static tp_node *parse_statement(tp_parser *P) {
    const tp_tok *t = peek(P);
    if (t->type == T_TEXT) {
        advance(P);
        tp_node *x = node(P, S_TEXT, t->pos);
        if (!x) return NULL;
        x->lit.t = TV_STR;
        x->lit.u.s = t->s;
        return x;
    }
    if (t->type == T_VAR_BEGIN) {
        advance(P);
        tp_node *x = node(P, S_OUT, t->pos);
        if (!x) return NULL;
        x->a = parse_expr(P);
        if (!x->a || !expect_type(P, T_VAR_END, "'}}'")) return NULL;
        return x;
    }
    if (t->type != T_BLOCK_BEGIN) {
        fail(P, t->pos, "unexpected %s", tok_desc(t));
        return NULL;
    }
    advance(P);
    const tp_tok *nm = peek(P);
    if (nm->type != T_NAME) {
        fail(P, nm->pos, "expected a tag name after '{%%'");
        return NULL;
    }
    advance(P);
    if (!enter(P, t->pos)) return NULL;
    tp_node *x = NULL;
    if (str_is(nm->s, "if")) x = parse_if(P, t->pos);
    else if (str_is(nm->s, "for")) x = parse_for(P, t->pos);
    else if (str_is(nm->s, "set")) x = parse_set(P, t->pos);
    else if (str_is(nm->s, "endif") || str_is(nm->s, "endfor") || str_is(nm->s, "else") ||
             str_is(nm->s, "elif") || str_is(nm->s, "endset"))
        fail(P, nm->pos, "unexpected '%.*s'", (int)nm->s.n, nm->s.p);
    else
        fail(P, nm->pos, "unknown or unsupported tag '%.*s'", (int)(nm->s.n > 40 ? 40 : nm->s.n),
             nm->s.p);
    leave(P);
    return x;
}

static tp_node *parse_body(tp_parser *P, const char *const *ends, size_t n_ends) {
    tp_node *body = node(P, S_BODY, peek(P)->pos);
    if (!body) return NULL;
    nvec st = {0};
    while (peek(P)->type != T_EOF && !at_end_tag(P, ends, n_ends)) {
        tp_node *s = parse_statement(P);
        if (!s || !nvec_push(P, &st, s)) return NULL;
    }
    body->list = st.v;
    body->n = st.n;
    return body;
}

/* ---- entry points ------------------------------------------------------------------------ */

/* Parses tmpl[0..len) into *root (in ar); P's status on failure. */
static geist_status parse_template(const char *tmpl, size_t len, const gt_tmpl_opts *opts,
                                   tp_arena *ar, tp_node **root, gt_err *err) {
    static const gt_tmpl_opts defaults = {true, true};
    *root = NULL;
    if (len > GT_TMPL_LIMIT_SOURCE)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "chat template too long (%zu bytes, limit %u)",
                       len, (unsigned)GT_TMPL_LIMIT_SOURCE);
    /* keep_trailing_newline=False: one trailing newline of the source is dropped */
    if (len >= 2 && tmpl[len - 2] == '\r' && tmpl[len - 1] == '\n') len -= 2;
    else if (len >= 1 && (tmpl[len - 1] == '\n' || tmpl[len - 1] == '\r')) len -= 1;
    tp_parser P = {0};
    P.src = tmpl;
    P.n = len;
    P.opts = opts ? opts : &defaults;
    P.ar = ar;
    P.err = err;
    P.status = GEIST_OK;
    if (!lex_all(&P)) return P.status;
    *root = parse_body(&P, NULL, 0);
    if (!*root && P.status == GEIST_OK)
        return gt_fail(err, GEIST_ERR_INTERNAL, "chat template: parse failed without a message");
    return P.status;
}

geist_status gt_template_render(const char *tmpl, size_t len, const gt_tmpl_ctx *ctx,
                                const gt_tmpl_opts *opts, char **out, size_t *out_len,
                                gt_err *err) {
    if (!tmpl || !ctx || !out || !out_len)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "chat template: NULL argument");
    tp_arena ar = {0};
    ar.limit = GT_TMPL_LIMIT_MEMORY;
    tp_node *root = NULL;
    geist_status st = parse_template(tmpl, len, opts, &ar, &root, err);
    if (st == GEIST_OK) st = gt_tp_render_tree(root, ctx, &ar, out, out_len, err);
    gt_tp_arena_free(&ar);
    return st;
}

/* Whether the subtree at x holds the name (E_NAME) `name`; the tree's height is bounded by the
 * parser's nesting and expression limits. */
static bool tree_uses(const tp_node *x, const char *name, size_t nlen) {
    if (!x) return false;
    if (x->kind == E_NAME && x->name.n == nlen && memcmp(x->name.p, name, nlen) == 0) return true;
    if (tree_uses(x->a, name, nlen) || tree_uses(x->b, name, nlen) ||
        tree_uses(x->c, name, nlen) || tree_uses(x->d, name, nlen))
        return true;
    for (size_t i = 0; i < x->n; i++)
        if ((x->list && tree_uses(x->list[i], name, nlen)) ||
            (x->list2 && tree_uses(x->list2[i], name, nlen)))
            return true;
    for (size_t i = 0; x->kwv && i < x->nkw; i++)
        if (tree_uses(x->kwv[i], name, nlen)) return true;
    return false;
}

geist_status gt_template_uses(const char *tmpl, size_t len, const char *name, bool *uses,
                              gt_err *err) {
    *uses = false;
    if (!tmpl || !name)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "chat template: NULL argument");
    tp_arena ar = {0};
    ar.limit = GT_TMPL_LIMIT_MEMORY;
    tp_node *root = NULL;
    geist_status st = parse_template(tmpl, len, NULL, &ar, &root, err);
    if (st == GEIST_OK) *uses = tree_uses(root, name, strlen(name));
    gt_tp_arena_free(&ar);
    return st;
}

const char *gt_template_chatml(void) {
    return "{%- for message in messages -%}"
           "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
           "{%- endfor -%}"
           "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";
}

static bool contains(const char *s, size_t n, const char *needle) {
    size_t m = strlen(needle);
    if (m > n) return false;
    for (size_t i = 0; i + m <= n; i++)
        if (s[i] == needle[0] && memcmp(s + i, needle, m) == 0) return true;
    return false;
}

int gt_template_family_n(const char *tmpl, size_t len) {
    if (!tmpl) return GT_TMPL_FAMILY_UNKNOWN;
    if (contains(tmpl, len, "<|im_start|>")) return GT_TMPL_FAMILY_CHATML;
    if (contains(tmpl, len, "<|start_header_id|>")) return GT_TMPL_FAMILY_LLAMA3;
    if (contains(tmpl, len, "<start_of_turn>")) return GT_TMPL_FAMILY_GEMMA;
    if (contains(tmpl, len, "[INST]")) return GT_TMPL_FAMILY_MISTRAL;
    return GT_TMPL_FAMILY_UNKNOWN;
}

int gt_template_family(const char *tmpl) {
    return tmpl ? gt_template_family_n(tmpl, strlen(tmpl)) : GT_TMPL_FAMILY_UNKNOWN;
}

const char *gt_template_family_end(int family) {
    switch (family) {
    case GT_TMPL_FAMILY_CHATML: return "<|im_end|>";
    case GT_TMPL_FAMILY_LLAMA3: return "<|eot_id|>";
    case GT_TMPL_FAMILY_GEMMA: return "<end_of_turn>";
    case GT_TMPL_FAMILY_MISTRAL: return "</s>";
    default: return NULL;
    }
}
