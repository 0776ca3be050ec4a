/* Chat template evaluation: values, variables, operators, filters, tests and methods, with the
 * semantics of Python jinja2 (see template.h). Every allocation of a render goes to its arena
 * (freed at once); output and temporary strings use bounded growable buffers. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/json.h"
#include "template_internal.h"

typedef struct tp_var {
    tp_str name;
    tp_val v;
} tp_var;

typedef struct sb { /* growable byte buffer, bounded by GT_TMPL_LIMIT_OUTPUT */
    char *p;
    size_t n, cap;
} sb;

typedef struct ev {
    tp_arena *ar;
    gt_err *err;
    geist_status status;
    tp_var *vars;
    size_t nvars, capvars;
    size_t frame; /* first variable of the innermost loop body */
    sb out;
    uint64_t ticks;
} ev;

/* ---- errors ------------------------------------------------------------------------------ */

static bool rt(ev *E, const tp_node *at, const char *fmt, ...) GT_PRINTF(3, 4);
static bool rt(ev *E, const tp_node *at, const char *fmt, ...) {
    if (E->status != GEIST_OK) return false;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at)
        E->status = gt_fail(E->err, GEIST_ERR_BAD_FORMAT, "chat template error at byte %u: %s",
                            (unsigned)at->pos, msg);
    else
        E->status = gt_fail(E->err, GEIST_ERR_BAD_FORMAT, "chat template error: %s", msg);
    return false;
}

static bool eoom(ev *E) {
    if (E->status != GEIST_OK) return false;
    if (E->ar->hit_limit)
        E->status = gt_fail(E->err, GEIST_ERR_BAD_FORMAT,
                            "chat template passed its memory limit (%u bytes)",
                            (unsigned)GT_TMPL_LIMIT_MEMORY);
    else
        E->status = gt_fail(E->err, GEIST_ERR_OUT_OF_MEMORY, "out of memory rendering chat template");
    return false;
}

static bool tick(ev *E, const tp_node *at, uint64_t n) {
    if (n > GT_TMPL_LIMIT_ITERATIONS || E->ticks + n > GT_TMPL_LIMIT_ITERATIONS)
        return rt(E, at, "iteration limit reached (%u loop iterations and elements)",
                  (unsigned)GT_TMPL_LIMIT_ITERATIONS);
    E->ticks += n;
    return true;
}

static void *alloc(ev *E, size_t n) {
    void *p = gt_tp_alloc(E->ar, n);
    if (!p) eoom(E);
    return p;
}

static void *alloc_array(ev *E, size_t n, size_t size) {
    size_t total;
    if (!gt_mul_size(n, size, &total)) {
        E->ar->hit_limit = true;
        eoom(E);
        return NULL;
    }
    return alloc(E, total ? total : 1);
}

/* ---- buffers ----------------------------------------------------------------------------- */

static bool sb_put(ev *E, sb *b, const char *s, size_t n) {
    if (n == 0) return true;
    if (n > GT_TMPL_LIMIT_OUTPUT || b->n > GT_TMPL_LIMIT_OUTPUT - n)
        return rt(E, NULL, "output passed the size limit (%u bytes)", (unsigned)GT_TMPL_LIMIT_OUTPUT);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            E->ar->hit_limit = false;
            return eoom(E);
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

static bool sb_puts(ev *E, sb *b, const char *s) { return sb_put(E, b, s, strlen(s)); }

/* Moves a temporary buffer's text into the arena as a string value. */
static bool sb_take(ev *E, sb *b, tp_str *out) {
    char *d = alloc(E, b->n + 1);
    if (!d) {
        free(b->p);
        return false;
    }
    if (b->n) memcpy(d, b->p, b->n);
    out->p = d;
    out->n = b->n;
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
    return true;
}

/* ---- small value helpers ----------------------------------------------------------------- */

static tp_val v_undef(tp_str hint) {
    tp_val v;
    v.t = TV_UNDEF;
    v.u.s = hint;
    return v;
}
static tp_val v_none(void) {
    tp_val v;
    memset(&v, 0, sizeof v);
    v.t = TV_NONE;
    return v;
}
static tp_val v_bool(bool b) {
    tp_val v;
    v.t = TV_BOOL;
    v.u.b = b;
    return v;
}
static tp_val v_int(int64_t i) {
    tp_val v;
    v.t = TV_INT;
    v.u.i = i;
    return v;
}
static tp_val v_str(const char *p, size_t n) {
    tp_val v;
    v.t = TV_STR;
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}
static tp_val v_strs(tp_str s) { return v_str(s.p, s.n); }

static tp_str cstr(const char *s) {
    tp_str r = {s, strlen(s)};
    return r;
}
static bool seq(tp_str a, tp_str b) { return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0); }
static bool sis(tp_str a, const char *c) { return seq(a, cstr(c)); }

static tp_list *new_list(ev *E, size_t n) {
    tp_list *l = alloc(E, sizeof *l);
    if (!l) return NULL;
    l->v = alloc_array(E, n, sizeof(tp_val));
    if (!l->v) return NULL;
    l->n = n;
    return l;
}

static tp_val v_list(tp_list *l) {
    tp_val v;
    v.t = TV_LIST;
    v.u.l = l;
    return v;
}

static tp_dict *new_dict(ev *E, size_t cap) {
    tp_dict *d = alloc(E, sizeof *d);
    if (!d) return NULL;
    if (cap < 4) cap = 4;
    d->k = alloc_array(E, cap, sizeof(tp_str));
    d->v = alloc_array(E, cap, sizeof(tp_val));
    if (!d->k || !d->v) return NULL;
    d->cap = cap;
    return d;
}

static tp_val *dict_find(const tp_dict *d, tp_str k) {
    for (size_t i = 0; i < d->n; i++)
        if (seq(d->k[i], k)) return &d->v[i];
    return NULL;
}

static bool dict_set(ev *E, tp_dict *d, tp_str k, tp_val v) {
    tp_val *slot = dict_find(d, k);
    if (slot) {
        *slot = v;
        return true;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap * 2;
        tp_str *nk = alloc_array(E, cap, sizeof *nk);
        tp_val *nv = alloc_array(E, cap, sizeof *nv);
        if (!nk || !nv) return false;
        memcpy(nk, d->k, d->n * sizeof *nk);
        memcpy(nv, d->v, d->n * sizeof *nv);
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return true;
}

static const char *type_name(const tp_val *v) {
    switch (v->t) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_STR: return "str";
    case TV_LIST: return "list";
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_FUNC: return "function";
    default: return "LoopContext";
    }
}

static bool truthy(const tp_val *v) {
    switch (v->t) {
    case TV_UNDEF:
    case TV_NONE: return false;
    case TV_BOOL: return v->u.b;
    case TV_INT: return v->u.i != 0;
    case TV_STR: return v->u.s.n != 0;
    case TV_LIST: return v->u.l->n != 0;
    case TV_DICT: return v->u.d->n != 0;
    default: return true;
    }
}

static bool is_num(const tp_val *v) { return v->t == TV_INT || v->t == TV_BOOL; }
static int64_t num(const tp_val *v) { return v->t == TV_BOOL ? (int64_t)v->u.b : v->u.i; }

/* ---- UTF-8 code points ------------------------------------------------------------------- */

/* Length of the code point at s (1 for an invalid byte). */
static size_t cp_len(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t need = u[0] < 0x80 ? 1 : (u[0] >> 5) == 6 ? 2 : (u[0] >> 4) == 14 ? 3
                : (u[0] >> 3) == 30 ? 4 : 0;
    if (need <= 1 || need > n) return 1;
    for (size_t k = 1; k < need; k++)
        if ((u[k] & 0xc0) != 0x80) return 1;
    return need;
}

static size_t cp_count(tp_str s) {
    size_t c = 0;
    for (size_t i = 0; i < s.n; i += cp_len(s.p + i, s.n - i)) c++;
    return c;
}

/* Byte offsets of every code point start plus the end (count+1 entries). */
static size_t *cp_offsets(ev *E, tp_str s, size_t *count) {
    size_t c = cp_count(s);
    size_t *o = alloc_array(E, c + 1, sizeof *o);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < s.n; i += cp_len(s.p + i, s.n - i)) o[k++] = i;
    o[k] = s.n;
    *count = c;
    return o;
}

/* ---- printing ---------------------------------------------------------------------------- */

static bool write_val(ev *E, sb *b, const tp_val *v, bool repr, int depth);

static bool write_repr_str(ev *E, sb *b, tp_str s) {
    bool has_sq = memchr(s.p, '\'', s.n) != NULL, has_dq = memchr(s.p, '"', s.n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    if (!sb_put(E, b, &q, 1)) return false;
    size_t run = 0;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        const char *esc = NULL;
        char hex[8];
        if (c == '\\') esc = "\\\\";
        else if (c == (unsigned char)q) esc = q == '\'' ? "\\'" : "\\\"";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c < 0x20 || c == 0x7f) {
            snprintf(hex, sizeof hex, "\\x%02x", c);
            esc = hex;
        }
        if (esc) {
            if (!sb_put(E, b, s.p + i - run, run) || !sb_puts(E, b, esc)) return false;
            run = 0;
        } else {
            run++;
        }
    }
    return sb_put(E, b, s.p + s.n - run, run) && sb_put(E, b, &q, 1);
}

static bool write_dict(ev *E, sb *b, const tp_dict *d, int depth) {
    if (!sb_puts(E, b, "{")) return false;
    for (size_t i = 0; i < d->n; i++) {
        if (i && !sb_puts(E, b, ", ")) return false;
        if (!write_repr_str(E, b, d->k[i]) || !sb_puts(E, b, ": ") ||
            !write_val(E, b, &d->v[i], true, depth + 1))
            return false;
    }
    return sb_puts(E, b, "}");
}

static bool write_val(ev *E, sb *b, const tp_val *v, bool repr, int depth) {
    if (depth > GT_TMPL_LIMIT_VALUE_DEPTH) return rt(E, NULL, "value nested too deeply to print");
    char tmp[64];
    switch (v->t) {
    case TV_UNDEF: return repr ? sb_puts(E, b, "Undefined") : true;
    case TV_NONE: return sb_puts(E, b, "None");
    case TV_BOOL: return sb_puts(E, b, v->u.b ? "True" : "False");
    case TV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v->u.i);
        return sb_puts(E, b, tmp);
    case TV_STR: return repr ? write_repr_str(E, b, v->u.s) : sb_put(E, b, v->u.s.p, v->u.s.n);
    case TV_LIST: {
        bool tup = v->u.l->tuple;
        if (!sb_puts(E, b, tup ? "(" : "[")) return false;
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i && !sb_puts(E, b, ", ")) return false;
            if (!write_val(E, b, &v->u.l->v[i], true, depth + 1)) return false;
        }
        if (tup && v->u.l->n == 1 && !sb_puts(E, b, ",")) return false;
        return sb_puts(E, b, tup ? ")" : "]");
    }
    case TV_DICT: return write_dict(E, b, v->u.d, depth);
    case TV_NS:
        return sb_puts(E, b, "<Namespace ") && write_dict(E, b, v->u.d, depth) &&
               sb_puts(E, b, ">");
    case TV_FUNC: return sb_puts(E, b, "<function>");
    default:
        snprintf(tmp, sizeof tmp, "<LoopContext %lld/%lld>", (long long)(v->u.loop->index0 + 1),
                 (long long)v->u.loop->length);
        return sb_puts(E, b, tmp);
    }
}

/* str(v) as jinja2 prints it (undefined prints as nothing). */
static bool to_str(ev *E, const tp_val *v, tp_str *out) {
    if (v->t == TV_STR) {
        *out = v->u.s;
        return true;
    }
    if (v->t == TV_UNDEF) {
        out->p = "";
        out->n = 0;
        return true;
    }
    sb b = {0};
    if (!write_val(E, &b, v, false, 0)) {
        free(b.p);
        return false;
    }
    return sb_take(E, &b, out);
}

/* ---- equality and ordering --------------------------------------------------------------- */

static bool veq(const tp_val *a, const tp_val *b, int depth) {
    if (depth > GT_TMPL_LIMIT_VALUE_DEPTH) return false;
    if (is_num(a) && is_num(b)) return num(a) == num(b);
    if (a->t != b->t) return false;
    switch (a->t) {
    case TV_UNDEF:
    case TV_NONE: return true;
    case TV_STR: return seq(a->u.s, b->u.s);
    case TV_LIST:
        if (a->u.l->n != b->u.l->n) return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!veq(&a->u.l->v[i], &b->u.l->v[i], depth + 1)) return false;
        return true;
    case TV_DICT:
        if (a->u.d->n != b->u.d->n) return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            const tp_val *o = dict_find(b->u.d, a->u.d->k[i]);
            if (!o || !veq(&a->u.d->v[i], o, depth + 1)) return false;
        }
        return true;
    case TV_NS: return a->u.d == b->u.d;
    case TV_FUNC: return a->u.fn == b->u.fn;
    default: return a->u.loop == b->u.loop;
    }
}

static int str_cmp(tp_str a, tp_str b) { /* UTF-8 byte order = code point order */
    size_t m = a.n < b.n ? a.n : b.n;
    int c = m ? memcmp(a.p, b.p, m) : 0;
    if (c) return c < 0 ? -1 : 1;
    return a.n < b.n ? -1 : a.n > b.n ? 1 : 0;
}

static bool vorder(ev *E, const tp_node *at, int op, const tp_val *a, const tp_val *b, bool *res) {
    int c;
    if (is_num(a) && is_num(b)) c = num(a) < num(b) ? -1 : num(a) > num(b) ? 1 : 0;
    else if (a->t == TV_STR && b->t == TV_STR) c = str_cmp(a->u.s, b->u.s);
    else
        return rt(E, at, "'%s' not supported between instances of '%s' and '%s'",
                  op == OP_LT ? "<" : op == OP_GT ? ">" : op == OP_LE ? "<=" : ">=",
                  type_name(a), type_name(b));
    *res = op == OP_LT ? c < 0 : op == OP_GT ? c > 0 : op == OP_LE ? c <= 0 : c >= 0;
    return true;
}

static bool str_find(tp_str hay, tp_str needle, size_t from, size_t *at) {
    if (needle.n == 0) {
        *at = from;
        return from <= hay.n;
    }
    for (size_t i = from; i + needle.n <= hay.n; i++) {
        if (hay.p[i] == needle.p[0] && memcmp(hay.p + i, needle.p, needle.n) == 0) {
            *at = i;
            return true;
        }
    }
    return false;
}

static bool vin(ev *E, const tp_node *at, const tp_val *item, const tp_val *cont, bool *res) {
    switch (cont->t) {
    case TV_STR: {
        if (item->t != TV_STR)
            return rt(E, at, "'in <string>' requires string as left operand, not %s",
                      type_name(item));
        size_t pos;
        *res = str_find(cont->u.s, item->u.s, 0, &pos);
        return true;
    }
    case TV_LIST:
        *res = false;
        for (size_t i = 0; i < cont->u.l->n && !*res; i++) *res = veq(item, &cont->u.l->v[i], 0);
        return true;
    case TV_DICT:
        *res = item->t == TV_STR && dict_find(cont->u.d, item->u.s) != NULL;
        return true;
    case TV_UNDEF:
        *res = false;
        return true;
    default:
        return rt(E, at, "argument of type '%s' is not iterable", type_name(cont));
    }
}

/* ---- variables --------------------------------------------------------------------------- */

static const tp_val *lookup(const ev *E, tp_str name) {
    for (size_t i = E->nvars; i-- > 0;)
        if (seq(E->vars[i].name, name)) return &E->vars[i].v;
    return NULL;
}

static bool set_var(ev *E, tp_str name, tp_val v) {
    for (size_t i = E->frame; i < E->nvars; i++) {
        if (seq(E->vars[i].name, name)) {
            E->vars[i].v = v;
            return true;
        }
    }
    if (E->nvars == E->capvars) {
        size_t cap = E->capvars ? E->capvars * 2 : 32;
        tp_var *nv = alloc_array(E, cap, sizeof *nv);
        if (!nv) return false;
        if (E->nvars) memcpy(nv, E->vars, E->nvars * sizeof *nv);
        E->vars = nv;
        E->capvars = cap;
    }
    E->vars[E->nvars].name = name;
    E->vars[E->nvars].v = v;
    E->nvars++;
    return true;
}

/* ---- attribute and item access ----------------------------------------------------------- */

static bool undefined_error(ev *E, const tp_node *at, const tp_val *v) {
    if (v->u.s.n)
        return rt(E, at, "'%.*s' is undefined", (int)(v->u.s.n > 80 ? 80 : v->u.s.n), v->u.s.p);
    return rt(E, at, "use of an undefined value");
}

static bool loop_attr(ev *E, const tp_loop *L, tp_str name, tp_val *out) {
    (void)E;
    if (sis(name, "index")) *out = v_int(L->index0 + 1);
    else if (sis(name, "index0")) *out = v_int(L->index0);
    else if (sis(name, "revindex")) *out = v_int(L->length - L->index0);
    else if (sis(name, "revindex0")) *out = v_int(L->length - L->index0 - 1);
    else if (sis(name, "first")) *out = v_bool(L->index0 == 0);
    else if (sis(name, "last")) *out = v_bool(L->index0 == L->length - 1);
    else if (sis(name, "length")) *out = v_int(L->length);
    else if (sis(name, "depth")) *out = v_int(1);
    else if (sis(name, "depth0")) *out = v_int(0);
    else if (sis(name, "previtem"))
        *out = L->index0 > 0 ? L->items->v[L->index0 - 1] : v_undef(cstr("there is no previous item"));
    else if (sis(name, "nextitem"))
        *out = L->index0 + 1 < L->length ? L->items->v[L->index0 + 1]
                                         : v_undef(cstr("there is no next item"));
    else *out = v_undef(name);
    return true;
}

static bool get_attr(ev *E, const tp_node *at, const tp_val *obj, tp_str name, tp_val *out) {
    switch (obj->t) {
    case TV_UNDEF: return undefined_error(E, at, obj);
    case TV_DICT:
    case TV_NS: {
        const tp_val *f = dict_find(obj->u.d, name);
        *out = f ? *f : v_undef(name);
        return true;
    }
    case TV_LOOP: return loop_attr(E, obj->u.loop, name, out);
    default: *out = v_undef(name); return true;
    }
}

static bool get_item(ev *E, const tp_node *at, const tp_val *obj, const tp_val *key, tp_val *out) {
    static const tp_str no_elem = {"no such element", 15};
    switch (obj->t) {
    case TV_UNDEF: return undefined_error(E, at, obj);
    case TV_LIST:
        if (is_num(key)) {
            int64_t i = num(key), n = (int64_t)obj->u.l->n;
            if (i < 0) i += n;
            *out = (i >= 0 && i < n) ? obj->u.l->v[i] : v_undef(no_elem);
            return true;
        }
        break;
    case TV_STR:
        if (is_num(key)) {
            size_t count;
            size_t *o = cp_offsets(E, obj->u.s, &count);
            if (!o) return false;
            int64_t i = num(key), n = (int64_t)count;
            if (i < 0) i += n;
            *out = (i >= 0 && i < n) ? v_str(obj->u.s.p + o[i], o[i + 1] - o[i]) : v_undef(no_elem);
            return true;
        }
        break;
    case TV_DICT:
    case TV_NS:
    case TV_LOOP:
        if (key->t == TV_STR) return get_attr(E, at, obj, key->u.s, out);
        break;
    default: break;
    }
    *out = v_undef(no_elem);
    return true;
}

/* Python slice.indices(): normalised start/stop/step and the element count. */
static bool slice_indices(ev *E, const tp_node *at, const tp_val *a, const tp_val *b,
                          const tp_val *c, int64_t n, int64_t *start, int64_t *step,
                          int64_t *count) {
    int64_t st = 1;
    if (c && c->t != TV_NONE && c->t != TV_UNDEF) {
        if (!is_num(c)) return rt(E, at, "slice indices must be integers");
        st = num(c);
        if (st == 0) return rt(E, at, "slice step cannot be zero");
        if (st == INT64_MIN) st = -INT64_MAX;
    }
    int64_t lo, hi;
    bool neg = st < 0;
    int64_t def_lo = neg ? n - 1 : 0, def_hi = neg ? -1 : n;
    int64_t lower = neg ? -1 : 0, upper = neg ? n - 1 : n;
    const tp_val *bounds[2] = {a, b};
    int64_t out[2] = {def_lo, def_hi};
    for (int k = 0; k < 2; k++) {
        const tp_val *x = bounds[k];
        if (!x || x->t == TV_NONE || x->t == TV_UNDEF) continue;
        if (!is_num(x)) return rt(E, at, "slice indices must be integers");
        int64_t v = num(x);
        if (v < 0) {
            v = v < -n ? lower : v + n;
            if (v < lower) v = lower;
        } else if (v > upper) {
            v = upper;
        }
        out[k] = v;
    }
    lo = out[0];
    hi = out[1];
    int64_t cnt = 0;
    if (st > 0 && lo < hi) cnt = (hi - lo - 1) / st + 1;
    else if (st < 0 && lo > hi) cnt = (lo - hi - 1) / (-st) + 1;
    *start = lo;
    *step = st;
    *count = cnt;
    return true;
}

static bool do_slice(ev *E, const tp_node *at, const tp_val *obj, const tp_val *a, const tp_val *b,
                     const tp_val *c, tp_val *out) {
    int64_t start, step, cnt;
    if (obj->t == TV_LIST) {
        if (!slice_indices(E, at, a, b, c, (int64_t)obj->u.l->n, &start, &step, &cnt)) return false;
        tp_list *l = new_list(E, (size_t)cnt);
        if (!l) return false;
        l->tuple = obj->u.l->tuple;
        for (int64_t k = 0; k < cnt; k++) l->v[k] = obj->u.l->v[start + k * step];
        *out = v_list(l);
        return true;
    }
    if (obj->t == TV_STR) {
        size_t count;
        size_t *o = cp_offsets(E, obj->u.s, &count);
        if (!o || !slice_indices(E, at, a, b, c, (int64_t)count, &start, &step, &cnt)) return false;
        if (step == 1) {
            size_t from = cnt ? o[start] : 0, to = cnt ? o[start + cnt] : 0;
            *out = v_str(obj->u.s.p + from, to - from);
            return true;
        }
        char *d = alloc(E, obj->u.s.n + 1);
        if (!d) return false;
        size_t k = 0;
        for (int64_t q = 0; q < cnt; q++) {
            int64_t i = start + q * step;
            size_t len = o[i + 1] - o[i];
            memcpy(d + k, obj->u.s.p + o[i], len);
            k += len;
        }
        *out = v_str(d, k);
        return true;
    }
    if (obj->t == TV_UNDEF) return undefined_error(E, at, obj);
    *out = v_undef(cstr("slice of a value that cannot be sliced"));
    return true;
}

/* ---- iteration --------------------------------------------------------------------------- */

/* The items a for loop or filter walks: lists as they are, strings by code point, dicts by key,
 * undefined as empty. */
static bool iter_items(ev *E, const tp_node *at, const tp_val *v, const tp_list **out) {
    static const tp_list empty = {0, NULL, false};
    switch (v->t) {
    case TV_LIST: *out = v->u.l; return true;
    case TV_UNDEF: *out = &empty; return true;
    case TV_STR: {
        size_t count;
        size_t *o = cp_offsets(E, v->u.s, &count);
        if (!o) return false;
        tp_list *l = new_list(E, count);
        if (!l) return false;
        for (size_t i = 0; i < count; i++) l->v[i] = v_str(v->u.s.p + o[i], o[i + 1] - o[i]);
        *out = l;
        return true;
    }
    case TV_DICT: {
        tp_list *l = new_list(E, v->u.d->n);
        if (!l) return false;
        for (size_t i = 0; i < v->u.d->n; i++) l->v[i] = v_strs(v->u.d->k[i]);
        *out = l;
        return true;
    }
    default: return rt(E, at, "'%s' object is not iterable", type_name(v));
    }
}

/* ---- string helpers ---------------------------------------------------------------------- */

static bool cp_in_set(const char *c, size_t clen, tp_str set) {
    for (size_t i = 0; i < set.n;) {
        size_t l = cp_len(set.p + i, set.n - i);
        if (l == clen && memcmp(set.p + i, c, l) == 0) return true;
        i += l;
    }
    return false;
}

/* strip with chars == NULL: whitespace (str.isspace); else the code points of *chars. */
static tp_str strip(tp_str s, const tp_str *chars, bool left, bool right) {
    if (left) {
        while (s.n) {
            size_t k = chars ? (cp_in_set(s.p, cp_len(s.p, s.n), *chars) ? cp_len(s.p, s.n) : 0)
                             : gt_tp_space_len(s.p, s.n);
            if (!k) break;
            s.p += k;
            s.n -= k;
        }
    }
    if (right) {
        while (s.n) {
            size_t k;
            if (!chars) {
                k = gt_tp_space_len_back(s.p, s.n);
                s.n -= k;
                break;
            }
            size_t st = s.n - 1; /* back up to the start of the last code point */
            while (st > 0 && s.n - st < 4 && (((unsigned char)s.p[st]) & 0xc0) == 0x80) st--;
            if (cp_len(s.p + st, s.n - st) != s.n - st) st = s.n - 1;
            k = cp_in_set(s.p + st, s.n - st, *chars) ? s.n - st : 0;
            if (!k) break;
            s.n -= k;
        }
    }
    return s;
}

enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE };

static bool change_case(ev *E, tp_str s, int mode, tp_str *out) {
    char *d = alloc(E, s.n + 1);
    if (!d) return false;
    bool prev_cased = false;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
        bool up;
        switch (mode) {
        case CASE_UPPER: up = true; break;
        case CASE_LOWER: up = false; break;
        case CASE_CAPITALIZE: up = i == 0; break;
        default: up = !prev_cased; break;
        }
        if (up && lower) c = (unsigned char)(c - 32);
        else if (!up && upper) c = (unsigned char)(c + 32);
        d[i] = (char)c;
        prev_cased = lower || upper || c >= 0x80; /* non-ASCII bytes count as letters */
    }
    out->p = d;
    out->n = s.n;
    return true;
}

static bool str_replace(ev *E, const tp_node *at, tp_str s, tp_str old, tp_str rep, int64_t count,
                        tp_str *out) {
    sb b = {0};
    size_t i = 0;
    int64_t done = 0;
    bool ok = true;
    if (old.n == 0) { /* Python inserts rep before every code point and at the end */
        while (ok && (count < 0 || done < count)) {
            ok = sb_put(E, &b, rep.p, rep.n);
            done++;
            if (i >= s.n) break;
            size_t l = cp_len(s.p + i, s.n - i);
            ok = ok && sb_put(E, &b, s.p + i, l);
            i += l;
            if (ok) ok = tick(E, at, 1);
        }
        ok = ok && sb_put(E, &b, s.p + i, s.n - i);
    } else {
        size_t pos;
        while (ok && (count < 0 || done < count) && str_find(s, old, i, &pos)) {
            ok = sb_put(E, &b, s.p + i, pos - i) && sb_put(E, &b, rep.p, rep.n);
            i = pos + old.n;
            done++;
        }
        ok = ok && sb_put(E, &b, s.p + i, s.n - i);
    }
    if (!ok) {
        free(b.p);
        return false;
    }
    return sb_take(E, &b, out);
}

/* str.split(sep=None, maxsplit=-1) */
static bool str_split(ev *E, const tp_node *at, tp_str s, const tp_str *sep, int64_t maxsplit,
                      tp_val *out) {
    size_t cap = 8, n = 0;
    tp_val *items = alloc_array(E, cap, sizeof *items);
    if (!items) return false;
    size_t i = 0;
    for (;;) {
        tp_str piece;
        bool last = false;
        if (!sep) {
            while (i < s.n) {
                size_t k = gt_tp_space_len(s.p + i, s.n - i);
                if (!k) break;
                i += k;
            }
            if (i >= s.n) break;
            if (maxsplit >= 0 && (int64_t)n >= maxsplit) {
                piece = strip((tp_str){s.p + i, s.n - i}, NULL, false, true);
                last = true;
            } else {
                size_t j = i;
                while (j < s.n && !gt_tp_space_len(s.p + j, s.n - j)) j += cp_len(s.p + j, s.n - j);
                piece.p = s.p + i;
                piece.n = j - i;
                i = j;
                last = i >= s.n;
            }
        } else {
            size_t pos;
            if ((maxsplit < 0 || (int64_t)n < maxsplit) && str_find(s, *sep, i, &pos)) {
                piece.p = s.p + i;
                piece.n = pos - i;
                i = pos + sep->n;
            } else {
                piece.p = s.p + i;
                piece.n = s.n - i;
                last = true;
            }
        }
        if (!tick(E, at, 1)) return false;
        if (n == cap) {
            tp_val *ni = alloc_array(E, cap * 2, sizeof *ni);
            if (!ni) return false;
            memcpy(ni, items, n * sizeof *ni);
            items = ni;
            cap *= 2;
        }
        items[n++] = v_strs(piece);
        if (last) break;
    }
    tp_list *l = alloc(E, sizeof *l);
    if (!l) return false;
    l->v = items;
    l->n = n;
    *out = v_list(l);
    return true;
}

/* ---- JSON (Hugging Face transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False); transformers replaces jinja2's own filter, which sorts keys
 * and escapes HTML characters, with this one for every chat template) ---------------------- */

static uint32_t cp_decode(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    if (len == 1) return u[0];
    if (len == 2) return ((uint32_t)(u[0] & 0x1f) << 6) | (u[1] & 0x3f);
    if (len == 3) return ((uint32_t)(u[0] & 0x0f) << 12) | ((uint32_t)(u[1] & 0x3f) << 6) | (u[2] & 0x3f);
    return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3f) << 12) |
           ((uint32_t)(u[2] & 0x3f) << 6) | (u[3] & 0x3f);
}

typedef struct json_opts {
    bool ascii;           /* ensure_ascii */
    bool sort;            /* sort_keys */
    bool indented;        /* indent is not None */
    tp_str indent;        /* the unit, when it is a string */
    int64_t indent_n;     /* the unit's spaces, when it is an integer (negative: none) */
    tp_str item, key;     /* separators */
} json_opts;

/* Python's encoder: '"', '\\' and the control characters always escaped (\n \r \t \b \f by
 * name, the rest \u00XX); with ensure_ascii also everything outside ' '..'~' (surrogate pairs
 * above U+FFFF). */
static bool json_str(ev *E, sb *b, tp_str s, bool ascii) {
    if (!sb_puts(E, b, "\"")) return false;
    for (size_t i = 0; i < s.n;) {
        size_t l = cp_len(s.p + i, s.n - i);
        uint32_t c = cp_decode(s.p + i, l);
        char tmp[16];
        const char *esc = NULL;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20 || (ascii && c > 0x7e)) {
            if (c >= 0x10000) {
                uint32_t v = c - 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            } else {
                snprintf(tmp, sizeof tmp, "\\u%04x", c);
            }
            esc = tmp;
        }
        if (esc ? !sb_puts(E, b, esc) : !sb_put(E, b, s.p + i, l)) return false;
        i += l;
    }
    return sb_puts(E, b, "\"");
}

/* A newline and `level` indentation units (indent given). */
static bool json_newline(ev *E, sb *b, const json_opts *o, int level) {
    if (!sb_puts(E, b, "\n")) return false;
    for (int k = 0; k < level; k++) {
        if (o->indent_n < 0) {
            if (!sb_put(E, b, o->indent.p, o->indent.n)) return false;
            continue;
        }
        static const char spaces[] = "                                "; /* 32 */
        for (int64_t left = o->indent_n; left > 0;) {
            const size_t n = left > 32 ? 32 : (size_t)left;
            if (!sb_put(E, b, spaces, n)) return false;
            left -= (int64_t)n;
        }
    }
    return true;
}

static bool json_val(ev *E, const tp_node *at, sb *b, const tp_val *v, const json_opts *o, int depth) {
    if (depth > GT_TMPL_LIMIT_VALUE_DEPTH) return rt(E, at, "value nested too deeply for tojson");
    char tmp[32];
    switch (v->t) {
    case TV_NONE: return sb_puts(E, b, "null");
    case TV_BOOL: return sb_puts(E, b, v->u.b ? "true" : "false");
    case TV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v->u.i);
        return sb_puts(E, b, tmp);
    case TV_STR: return json_str(E, b, v->u.s, o->ascii);
    case TV_LIST: {
        const tp_list *l = v->u.l;
        if (l->n == 0) return sb_puts(E, b, "[]");
        if (!sb_puts(E, b, "[") || (o->indented && !json_newline(E, b, o, depth + 1))) return false;
        for (size_t i = 0; i < l->n; i++) {
            if (i && (!sb_put(E, b, o->item.p, o->item.n) ||
                      (o->indented && !json_newline(E, b, o, depth + 1))))
                return false;
            if (!json_val(E, at, b, &l->v[i], o, depth + 1)) return false;
        }
        return (!o->indented || json_newline(E, b, o, depth)) && sb_puts(E, b, "]");
    }
    case TV_DICT: {
        const tp_dict *d = v->u.d;
        if (d->n == 0) return sb_puts(E, b, "{}");
        size_t *order = alloc_array(E, d->n, sizeof *order);
        if (!order) return false;
        for (size_t i = 0; i < d->n; i++) { /* insertion sort by key: dicts here are small */
            size_t j = i;
            while (o->sort && j > 0 && str_cmp(d->k[order[j - 1]], d->k[i]) > 0) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = i;
        }
        if (!sb_puts(E, b, "{") || (o->indented && !json_newline(E, b, o, depth + 1))) return false;
        for (size_t i = 0; i < d->n; i++) {
            if (i && (!sb_put(E, b, o->item.p, o->item.n) ||
                      (o->indented && !json_newline(E, b, o, depth + 1))))
                return false;
            if (!json_str(E, b, d->k[order[i]], o->ascii) || !sb_put(E, b, o->key.p, o->key.n) ||
                !json_val(E, at, b, &d->v[order[i]], o, depth + 1))
                return false;
        }
        return (!o->indented || json_newline(E, b, o, depth)) && sb_puts(E, b, "}");
    }
    default: break;
    }
    return rt(E, at, "Object of type %s is not JSON serializable", type_name(v));
}

/* ---- calls: arguments -------------------------------------------------------------------- */

typedef struct args {
    tp_val *v;
    size_t n;
    tp_str *kwn;
    tp_val *kwv;
    size_t nkw;
} args;

static bool eval(ev *E, const tp_node *x, tp_val *out);

static bool eval_args(ev *E, const tp_node *x, args *A) {
    memset(A, 0, sizeof *A);
    if (x->n) {
        A->v = alloc_array(E, x->n, sizeof *A->v);
        if (!A->v) return false;
        for (size_t i = 0; i < x->n; i++)
            if (!eval(E, x->list[i], &A->v[i])) return false;
        A->n = x->n;
    }
    if (x->nkw) {
        A->kwv = alloc_array(E, x->nkw, sizeof *A->kwv);
        if (!A->kwv) return false;
        for (size_t i = 0; i < x->nkw; i++)
            if (!eval(E, x->kwv[i], &A->kwv[i])) return false;
        A->kwn = x->kwn;
        A->nkw = x->nkw;
    }
    return true;
}

/* Argument i by position, or by keyword name; NULL if not given. */
static const tp_val *arg(const args *A, size_t i, const char *kw) {
    if (i < A->n) return &A->v[i];
    for (size_t k = 0; kw && k < A->nkw; k++)
        if (sis(A->kwn[k], kw)) return &A->kwv[k];
    return NULL;
}

static bool check_arity(ev *E, const tp_node *at, const args *A, size_t max_pos,
                        const char *const *kws, const char *what) {
    if (A->n > max_pos) return rt(E, at, "%s takes at most %zu positional arguments", what, max_pos);
    for (size_t k = 0; k < A->nkw; k++) {
        bool ok = false;
        for (size_t q = 0; kws && kws[q]; q++) ok = ok || sis(A->kwn[k], kws[q]);
        if (!ok)
            return rt(E, at, "%s got an unexpected keyword argument '%.*s'", what,
                      (int)(A->kwn[k].n > 40 ? 40 : A->kwn[k].n), A->kwn[k].p);
    }
    return true;
}

static bool want_str(ev *E, const tp_node *at, const tp_val *v, const char *what, tp_str *out) {
    if (!v || v->t != TV_STR) return rt(E, at, "%s must be a string", what);
    *out = v->u.s;
    return true;
}

static bool want_int(ev *E, const tp_node *at, const tp_val *v, const char *what, int64_t *out) {
    if (!v || !is_num(v)) return rt(E, at, "%s must be an integer", what);
    *out = num(v);
    return true;
}

/* tojson's arguments, in transformers' order: ensure_ascii, indent, separators, sort_keys. */
static bool json_opts_from(ev *E, const tp_node *at, const args *A, json_opts *o) {
    static const char *const kws[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (!check_arity(E, at, A, 4, kws, "tojson")) return false;
    memset(o, 0, sizeof *o);
    o->indent_n = -1;
    const tp_val *asc = arg(A, 0, "ensure_ascii"), *ind = arg(A, 1, "indent");
    const tp_val *sep = arg(A, 2, "separators"), *srt = arg(A, 3, "sort_keys");
    o->ascii = asc && truthy(asc);
    o->sort = srt && truthy(srt);
    if (ind && ind->t != TV_NONE) {
        o->indented = true;
        if (ind->t == TV_STR) {
            o->indent = ind->u.s;
        } else if (is_num(ind)) {
            const int64_t n = num(ind);
            o->indent_n = n < 0 ? 0 : n; /* Python: ' ' * n */
            if (o->indent_n > (int64_t)GT_TMPL_LIMIT_OUTPUT)
                return rt(E, at, "output passed the size limit (%u bytes)", (unsigned)GT_TMPL_LIMIT_OUTPUT);
        } else {
            return rt(E, at, "tojson indent must be an integer, a string or none");
        }
    }
    o->item = cstr(o->indented ? "," : ", ");
    o->key = cstr(": ");
    if (sep && sep->t != TV_NONE) {
        if (sep->t != TV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].t != TV_STR ||
            sep->u.l->v[1].t != TV_STR)
            return rt(E, at, "tojson separators must be two strings (item, key)");
        o->item = sep->u.l->v[0].u.s;
        o->key = sep->u.l->v[1].u.s;
    }
    return true;
}

/* ---- tests (`x is name`) ----------------------------------------------------------------- */

static bool apply_test(ev *E, const tp_node *at, tp_str name, const tp_val *v, const args *A,
                       bool *res) {
    const tp_val *a0 = arg(A, 0, NULL);
    if (sis(name, "defined")) *res = v->t != TV_UNDEF;
    else if (sis(name, "undefined")) *res = v->t == TV_UNDEF;
    else if (sis(name, "none")) *res = v->t == TV_NONE;
    else if (sis(name, "string")) *res = v->t == TV_STR;
    else if (sis(name, "number")) *res = is_num(v);
    else if (sis(name, "integer")) *res = v->t == TV_INT;
    else if (sis(name, "boolean")) *res = v->t == TV_BOOL;
    else if (sis(name, "true")) *res = v->t == TV_BOOL && v->u.b;
    else if (sis(name, "false")) *res = v->t == TV_BOOL && !v->u.b;
    else if (sis(name, "mapping")) *res = v->t == TV_DICT;
    else if (sis(name, "iterable"))
        *res = v->t == TV_STR || v->t == TV_LIST || v->t == TV_DICT || v->t == TV_UNDEF;
    else if (sis(name, "sequence"))
        *res = v->t == TV_STR || v->t == TV_LIST || v->t == TV_DICT || v->t == TV_UNDEF;
    else if (sis(name, "callable")) *res = v->t == TV_FUNC;
    else if (sis(name, "even") || sis(name, "odd")) {
        if (!is_num(v)) return rt(E, at, "test '%.*s' needs an integer", (int)name.n, name.p);
        bool even = (num(v) % 2) == 0;
        *res = sis(name, "even") ? even : !even;
    } else if (sis(name, "divisibleby")) {
        int64_t d;
        if (!is_num(v) || !want_int(E, at, a0, "divisibleby argument", &d)) {
            return E->status == GEIST_OK ? rt(E, at, "divisibleby needs integers") : false;
        }
        if (d == 0) return rt(E, at, "integer division or modulo by zero");
        *res = d == -1 ? true : num(v) % d == 0;
    } else if (sis(name, "eq") || sis(name, "equalto") || sis(name, "==") || sis(name, "ne") ||
               sis(name, "!=")) {
        if (!a0) return rt(E, at, "test '%.*s' needs an argument", (int)name.n, name.p);
        bool eq = veq(v, a0, 0);
        *res = (sis(name, "ne") || sis(name, "!=")) ? !eq : eq;
    } else if (sis(name, "lt") || sis(name, "lessthan") || sis(name, "gt") ||
               sis(name, "greaterthan") || sis(name, "le") || sis(name, "ge")) {
        if (!a0) return rt(E, at, "test '%.*s' needs an argument", (int)name.n, name.p);
        int op = (sis(name, "lt") || sis(name, "lessthan")) ? OP_LT
               : (sis(name, "gt") || sis(name, "greaterthan")) ? OP_GT
               : sis(name, "le") ? OP_LE : OP_GE;
        return vorder(E, at, op, v, a0, res);
    } else if (sis(name, "in")) {
        if (!a0) return rt(E, at, "test 'in' needs an argument");
        return vin(E, at, v, a0, res);
    } else {
        return rt(E, at, "no test named '%.*s'", (int)(name.n > 40 ? 40 : name.n), name.p);
    }
    return true;
}

/* ---- filters ----------------------------------------------------------------------------- */

static bool apply_filter(ev *E, const tp_node *at, tp_str name, const tp_val *v, const args *A,
                         tp_val *out);

/* Attribute lookup as selectattr/map do it: "a.b" walks nested attributes. */
static bool attr_path(ev *E, const tp_node *at, const tp_val *v, tp_str path, tp_val *out) {
    tp_val cur = *v;
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < path.n && path.p[j] != '.') j++;
        tp_str part = {path.p + i, j - i};
        tp_val key = v_strs(part), next;
        bool digits = part.n > 0;
        for (size_t q = 0; q < part.n; q++) digits = digits && part.p[q] >= '0' && part.p[q] <= '9';
        if (digits && part.n < 18) {
            int64_t idx = 0;
            for (size_t q = 0; q < part.n; q++) idx = idx * 10 + (part.p[q] - '0');
            key = v_int(idx);
        }
        if (!get_item(E, at, &cur, &key, &next)) return false;
        cur = next;
        if (j >= path.n) break;
        i = j + 1;
    }
    *out = cur;
    return true;
}

/* select/reject/selectattr/rejectattr */
static bool filter_select(ev *E, const tp_node *at, const tp_val *v, const args *A, bool by_attr,
                          bool keep_if, tp_val *out) {
    const tp_list *items;
    if (!iter_items(E, at, v, &items) || !tick(E, at, items->n)) return false;
    size_t first = 0;
    tp_str attr = {NULL, 0};
    if (by_attr) {
        if (!want_str(E, at, arg(A, 0, NULL), "selectattr attribute", &attr)) return false;
        first = 1;
    }
    tp_str test = {NULL, 0};
    args targs = {0};
    if (A->n > first) {
        if (!want_str(E, at, &A->v[first], "test name", &test)) return false;
        targs.v = A->v + first + 1;
        targs.n = A->n - first - 1;
    }
    tp_list *l = new_list(E, items->n);
    if (!l) return false;
    size_t k = 0;
    for (size_t i = 0; i < items->n; i++) {
        tp_val x = items->v[i];
        if (by_attr && !attr_path(E, at, &items->v[i], attr, &x)) return false;
        bool r;
        if (test.p) {
            if (!apply_test(E, at, test, &x, &targs, &r)) return false;
        } else {
            r = truthy(&x);
        }
        if (r == keep_if) l->v[k++] = items->v[i];
    }
    l->n = k;
    *out = v_list(l);
    return true;
}

static bool filter_map(ev *E, const tp_node *at, const tp_val *v, const args *A, tp_val *out) {
    const tp_list *items;
    if (!iter_items(E, at, v, &items) || !tick(E, at, items->n)) return false;
    const tp_val *attr = arg(A, 99, "attribute"), *def = arg(A, 99, "default");
    tp_list *l = new_list(E, items->n);
    if (!l) return false;
    if (attr) {
        if (attr->t != TV_STR) return rt(E, at, "map attribute must be a string");
        for (size_t i = 0; i < items->n; i++) {
            if (!attr_path(E, at, &items->v[i], attr->u.s, &l->v[i])) return false;
            if (l->v[i].t == TV_UNDEF && def) l->v[i] = *def;
        }
    } else {
        tp_str fname;
        if (!want_str(E, at, arg(A, 0, NULL), "map filter name", &fname)) return false;
        args fargs = {A->v + 1, A->n - 1, NULL, NULL, 0};
        for (size_t i = 0; i < items->n; i++)
            if (!apply_filter(E, at, fname, &items->v[i], &fargs, &l->v[i])) return false;
    }
    *out = v_list(l);
    return true;
}

static bool parse_int_str(tp_str s, int64_t *out) {
    s = strip(s, NULL, true, true);
    size_t i = 0;
    bool neg = false;
    if (i < s.n && (s.p[i] == '+' || s.p[i] == '-')) neg = s.p[i++] == '-';
    if (i >= s.n) return false;
    int64_t v = 0;
    bool prev_digit = false;
    for (; i < s.n; i++) {
        char c = s.p[i];
        if (c == '_' && prev_digit && i + 1 < s.n && s.p[i + 1] >= '0' && s.p[i + 1] <= '9') {
            prev_digit = false;
            continue;
        }
        if (c < '0' || c > '9') return false;
        if (v > (INT64_MAX - (c - '0')) / 10) return false;
        v = v * 10 + (c - '0');
        prev_digit = true;
    }
    *out = neg ? -v : v;
    return true;
}

static bool apply_filter(ev *E, const tp_node *at, tp_str name, const tp_val *v, const args *A,
                         tp_val *out) {
    const tp_val *a0 = arg(A, 0, NULL);
    tp_str s;
    if (sis(name, "trim")) {
        static const char *const kws[] = {"chars", NULL};
        const tp_val *chars = arg(A, 0, "chars");
        if (!check_arity(E, at, A, 1, kws, "trim") || !to_str(E, v, &s)) return false;
        tp_str set;
        if (chars && chars->t != TV_NONE && !want_str(E, at, chars, "trim chars", &set)) return false;
        *out = v_strs(strip(s, (chars && chars->t != TV_NONE) ? &set : NULL, true, true));
        return true;
    }
    if (sis(name, "length") || sis(name, "count")) {
        switch (v->t) {
        case TV_STR: *out = v_int((int64_t)cp_count(v->u.s)); return true;
        case TV_LIST: *out = v_int((int64_t)v->u.l->n); return true;
        case TV_DICT: *out = v_int((int64_t)v->u.d->n); return true;
        case TV_UNDEF: *out = v_int(0); return true;
        default: return rt(E, at, "object of type '%s' has no len()", type_name(v));
        }
    }
    if (sis(name, "upper") || sis(name, "lower") || sis(name, "capitalize") || sis(name, "title")) {
        int mode = sis(name, "upper") ? CASE_UPPER : sis(name, "lower") ? CASE_LOWER
                 : sis(name, "capitalize") ? CASE_CAPITALIZE : CASE_TITLE;
        if (!to_str(E, v, &s) || !change_case(E, s, mode, &s)) return false;
        *out = v_strs(s);
        return true;
    }
    if (sis(name, "first") || sis(name, "last")) {
        const tp_list *items;
        if (!iter_items(E, at, v, &items)) return false;
        if (!items->n) *out = v_undef(cstr("no first/last item of an empty sequence"));
        else *out = items->v[sis(name, "first") ? 0 : items->n - 1];
        return true;
    }
    if (sis(name, "join")) {
        const tp_val *sep = arg(A, 0, "d"), *attr = arg(A, 1, "attribute");
        tp_str sp = {"", 0};
        if (sep && !to_str(E, sep, &sp)) return false;
        const tp_list *items;
        if (!iter_items(E, at, v, &items) || !tick(E, at, items->n)) return false;
        sb b = {0};
        for (size_t i = 0; i < items->n; i++) {
            tp_val x = items->v[i];
            tp_str xs;
            bool ok = (!attr || (attr->t == TV_STR && attr_path(E, at, &items->v[i], attr->u.s, &x))) &&
                      to_str(E, &x, &xs) && (i == 0 || sb_put(E, &b, sp.p, sp.n)) &&
                      sb_put(E, &b, xs.p, xs.n);
            if (!ok) {
                free(b.p);
                return E->status == GEIST_OK ? rt(E, at, "join attribute must be a string") : false;
            }
        }
        if (!sb_take(E, &b, &s)) return false;
        *out = v_strs(s);
        return true;
    }
    if (sis(name, "default") || sis(name, "d")) {
        const tp_val *def = arg(A, 0, "default_value"), *boolean = arg(A, 1, "boolean");
        bool use = v->t == TV_UNDEF || (boolean && truthy(boolean) && !truthy(v));
        if (use) *out = def ? *def : v_str("", 0);
        else *out = *v;
        return true;
    }
    if (sis(name, "replace")) {
        tp_str old, rep;
        const tp_val *a1 = arg(A, 1, "new"), *a2 = arg(A, 2, "count");
        int64_t count = -1;
        if (!to_str(E, v, &s) || !to_str(E, a0 ? a0 : &(tp_val){0}, &old)) return false;
        if (!a0 || !a1) return rt(E, at, "replace needs two arguments");
        if (!to_str(E, a1, &rep)) return false;
        if (a2 && a2->t != TV_NONE && !want_int(E, at, a2, "replace count", &count)) return false;
        if (!str_replace(E, at, s, old, rep, count, &s)) return false;
        *out = v_strs(s);
        return true;
    }
    if (sis(name, "list")) {
        const tp_list *items;
        if (!iter_items(E, at, v, &items)) return false;
        tp_list *l = new_list(E, items->n);
        if (!l) return false;
        if (items->n) memcpy(l->v, items->v, items->n * sizeof *l->v);
        *out = v_list(l);
        return true;
    }
    if (sis(name, "string")) {
        if (!to_str(E, v, &s)) return false;
        *out = v_strs(s);
        return true;
    }
    if (sis(name, "safe")) {
        *out = *v;
        return true;
    }
    if (sis(name, "int")) {
        const tp_val *def = arg(A, 0, "default");
        int64_t r;
        if (is_num(v)) *out = v_int(num(v));
        else if (v->t == TV_STR && parse_int_str(v->u.s, &r)) *out = v_int(r);
        else *out = def ? *def : v_int(0);
        return true;
    }
    if (sis(name, "abs")) {
        if (!is_num(v)) return rt(E, at, "bad operand type for abs(): '%s'", type_name(v));
        int64_t x = num(v);
        if (x == INT64_MIN) return rt(E, at, "integer overflow");
        *out = v_int(x < 0 ? -x : x);
        return true;
    }
    if (sis(name, "reverse")) {
        if (v->t == TV_STR) {
            tp_val step = v_int(-1);
            return do_slice(E, at, v, NULL, NULL, &step, out);
        }
        const tp_list *items;
        if (!iter_items(E, at, v, &items)) return false;
        tp_list *l = new_list(E, items->n);
        if (!l) return false;
        for (size_t i = 0; i < items->n; i++) l->v[i] = items->v[items->n - 1 - i];
        *out = v_list(l);
        return true;
    }
    if (sis(name, "items")) {
        if (v->t == TV_UNDEF) {
            tp_list *l = new_list(E, 0);
            if (!l) return false;
            *out = v_list(l);
            return true;
        }
        if (v->t != TV_DICT) return rt(E, at, "can only get item pairs from a mapping");
        tp_list *l = new_list(E, v->u.d->n);
        if (!l) return false;
        for (size_t i = 0; i < v->u.d->n; i++) {
            tp_list *pair = new_list(E, 2);
            if (!pair) return false;
            pair->tuple = true;
            pair->v[0] = v_strs(v->u.d->k[i]);
            pair->v[1] = v->u.d->v[i];
            l->v[i] = v_list(pair);
        }
        *out = v_list(l);
        return true;
    }
    if (sis(name, "tojson")) {
        json_opts o;
        if (!json_opts_from(E, at, A, &o)) return false;
        sb b = {0};
        if (!json_val(E, at, &b, v, &o, 0) || !sb_take(E, &b, &s)) {
            free(b.p);
            return false;
        }
        *out = v_strs(s);
        return true;
    }
    if (sis(name, "selectattr")) return filter_select(E, at, v, A, true, true, out);
    if (sis(name, "rejectattr")) return filter_select(E, at, v, A, true, false, out);
    if (sis(name, "select")) return filter_select(E, at, v, A, false, true, out);
    if (sis(name, "reject")) return filter_select(E, at, v, A, false, false, out);
    if (sis(name, "map")) return filter_map(E, at, v, A, out);
    return rt(E, at, "no filter named '%.*s'", (int)(name.n > 40 ? 40 : name.n), name.p);
}

/* ---- functions and methods --------------------------------------------------------------- */

static bool call_func(ev *E, const tp_node *at, int fn, const args *A, tp_val *out) {
    switch (fn) {
    case FN_RAISE: {
        tp_str msg = {"", 0};
        if (A->n && !to_str(E, &A->v[0], &msg)) return false;
        if (E->status == GEIST_OK) {
            E->status = GEIST_ERR_INVALID_ARGUMENT;
            if (E->err) {
                E->err->status = GEIST_ERR_INVALID_ARGUMENT;
                size_t n = msg.n < sizeof E->err->msg - 1 ? msg.n : sizeof E->err->msg - 1;
                memcpy(E->err->msg, msg.p, n);
                E->err->msg[n] = '\0';
                if (E->err->msg[0] == '\0') /* every error says why, an empty message too */
                    snprintf(E->err->msg, sizeof E->err->msg,
                             "chat template: raise_exception() without a message");
            }
        }
        return false;
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        tp_dict *d = new_dict(E, A->nkw);
        if (!d) return false;
        if (A->n) {
            if (A->n > 1 || A->v[0].t != TV_DICT)
                return rt(E, at, "%s() takes keyword arguments or one mapping",
                          fn == FN_DICT ? "dict" : "namespace");
            for (size_t i = 0; i < A->v[0].u.d->n; i++)
                if (!dict_set(E, d, A->v[0].u.d->k[i], A->v[0].u.d->v[i])) return false;
        }
        for (size_t i = 0; i < A->nkw; i++)
            if (!dict_set(E, d, A->kwn[i], A->kwv[i])) return false;
        out->t = fn == FN_DICT ? TV_DICT : TV_NS;
        out->u.d = d;
        return true;
    }
    case FN_RANGE: {
        int64_t a = 0, b, c = 1;
        if (A->n < 1 || A->n > 3 || A->nkw) return rt(E, at, "range() takes 1 to 3 integers");
        for (size_t i = 0; i < A->n; i++)
            if (!is_num(&A->v[i])) return rt(E, at, "range() arguments must be integers");
        if (A->n == 1) b = num(&A->v[0]);
        else {
            a = num(&A->v[0]);
            b = num(&A->v[1]);
            if (A->n == 3) c = num(&A->v[2]);
        }
        if (c == 0) return rt(E, at, "range() arg 3 must not be zero");
        /* the count is computed in double first so huge ranges fail the limit, not overflow */
        double span = c > 0 ? (double)b - (double)a : (double)a - (double)b;
        double cntd = span <= 0 ? 0 : (span - 1) / (c > 0 ? (double)c : -(double)c) + 1;
        if (cntd > (double)GT_TMPL_LIMIT_ITERATIONS) return tick(E, at, GT_TMPL_LIMIT_ITERATIONS + 1ull);
        size_t cnt = (size_t)cntd;
        if (!tick(E, at, cnt)) return false;
        tp_list *l = new_list(E, cnt);
        if (!l) return false;
        for (size_t i = 0; i < cnt; i++) l->v[i] = v_int(a + (int64_t)i * c);
        *out = v_list(l);
        return true;
    }
    default: return rt(E, at, "not callable");
    }
}

static bool starts_or_ends(ev *E, const tp_node *at, tp_str s, const tp_val *x, bool ends,
                           bool *res) {
    if (!x) return rt(E, at, "startswith/endswith needs an argument");
    if (x->t == TV_LIST && x->u.l->n) {
        /* a tuple literal is a list here; jinja2 would reject a real list */
        for (size_t i = 0; i < x->u.l->n; i++) {
            if (!starts_or_ends(E, at, s, &x->u.l->v[i], ends, res)) return false;
            if (*res) return true;
        }
        return true;
    }
    if (x->t != TV_STR) return rt(E, at, "startswith/endswith argument must be a string");
    tp_str p = x->u.s;
    *res = p.n <= s.n && (p.n == 0 || memcmp(ends ? s.p + s.n - p.n : s.p, p.p, p.n) == 0);
    return true;
}

/* obj.name(args). *handled = false if obj has no such method (then it is an attribute call). */
static bool call_method(ev *E, const tp_node *at, const tp_val *obj, tp_str name, const args *A,
                        tp_val *out, bool *handled) {
    *handled = true;
    const tp_val *a0 = arg(A, 0, NULL), *a1 = arg(A, 1, NULL);
    if (obj->t == TV_STR) {
        tp_str s = obj->u.s;
        if (sis(name, "strip") || sis(name, "lstrip") || sis(name, "rstrip")) {
            tp_str set;
            bool have = a0 && a0->t != TV_NONE;
            if (have && !want_str(E, at, a0, "strip chars", &set)) return false;
            bool l = !sis(name, "rstrip"), r = !sis(name, "lstrip");
            *out = v_strs(strip(s, have ? &set : NULL, l, r));
            return true;
        }
        if (sis(name, "startswith") || sis(name, "endswith")) {
            bool r = false;
            if (!starts_or_ends(E, at, s, a0, sis(name, "endswith"), &r)) return false;
            *out = v_bool(r);
            return true;
        }
        if (sis(name, "upper") || sis(name, "lower") || sis(name, "title") ||
            sis(name, "capitalize")) {
            int mode = sis(name, "upper") ? CASE_UPPER : sis(name, "lower") ? CASE_LOWER
                     : sis(name, "capitalize") ? CASE_CAPITALIZE : CASE_TITLE;
            if (!change_case(E, s, mode, &s)) return false;
            *out = v_strs(s);
            return true;
        }
        if (sis(name, "replace")) {
            tp_str old, rep;
            int64_t count = -1;
            const tp_val *a2 = arg(A, 2, NULL);
            if (!want_str(E, at, a0, "replace old", &old) || !want_str(E, at, a1, "replace new", &rep))
                return false;
            if (a2 && !want_int(E, at, a2, "replace count", &count)) return false;
            if (!str_replace(E, at, s, old, rep, count, &s)) return false;
            *out = v_strs(s);
            return true;
        }
        if (sis(name, "split")) {
            const tp_val *sep = arg(A, 0, "sep"), *mx = arg(A, 1, "maxsplit");
            int64_t maxsplit = -1;
            tp_str sp;
            bool have = sep && sep->t != TV_NONE;
            if (have && !want_str(E, at, sep, "split separator", &sp)) return false;
            if (have && sp.n == 0) return rt(E, at, "empty separator");
            if (mx && !want_int(E, at, mx, "maxsplit", &maxsplit)) return false;
            return str_split(E, at, s, have ? &sp : NULL, maxsplit, out);
        }
        if (sis(name, "join")) {
            const tp_list *items;
            if (!a0 || !iter_items(E, at, a0, &items) || !tick(E, at, items->n))
                return E->status == GEIST_OK ? rt(E, at, "join needs an iterable") : false;
            sb b = {0};
            for (size_t i = 0; i < items->n; i++) {
                if (items->v[i].t != TV_STR) {
                    free(b.p);
                    return rt(E, at, "sequence item %zu: expected str instance, %s found", i,
                              type_name(&items->v[i]));
                }
                if ((i && !sb_put(E, &b, s.p, s.n)) ||
                    !sb_put(E, &b, items->v[i].u.s.p, items->v[i].u.s.n)) {
                    free(b.p);
                    return false;
                }
            }
            tp_str r;
            if (!sb_take(E, &b, &r)) return false;
            *out = v_strs(r);
            return true;
        }
        if (sis(name, "find") || sis(name, "count")) {
            tp_str sub;
            if (!want_str(E, at, a0, "argument", &sub)) return false;
            if (sis(name, "find")) {
                size_t pos;
                if (!str_find(s, sub, 0, &pos)) *out = v_int(-1);
                else *out = v_int((int64_t)cp_count((tp_str){s.p, pos}));
                return true;
            }
            int64_t c = 0;
            if (sub.n == 0) {
                c = (int64_t)cp_count(s) + 1;
            } else {
                size_t pos, i = 0;
                while (str_find(s, sub, i, &pos)) {
                    c++;
                    i = pos + sub.n;
                }
            }
            *out = v_int(c);
            return true;
        }
    } else if (obj->t == TV_DICT) {
        const tp_dict *d = obj->u.d;
        if (sis(name, "items") || sis(name, "keys") || sis(name, "values")) {
            tp_list *l = new_list(E, d->n);
            if (!l) return false;
            for (size_t i = 0; i < d->n; i++) {
                if (sis(name, "keys")) {
                    l->v[i] = v_strs(d->k[i]);
                } else if (sis(name, "values")) {
                    l->v[i] = d->v[i];
                } else {
                    tp_list *pair = new_list(E, 2);
                    if (!pair) return false;
                    pair->tuple = true;
                    pair->v[0] = v_strs(d->k[i]);
                    pair->v[1] = d->v[i];
                    l->v[i] = v_list(pair);
                }
            }
            *out = v_list(l);
            return true;
        }
        if (sis(name, "get")) {
            if (!a0) return rt(E, at, "get expected at least 1 argument");
            const tp_val *f = a0->t == TV_STR ? dict_find(d, a0->u.s) : NULL;
            *out = f ? *f : a1 ? *a1 : v_none();
            return true;
        }
    } else if (obj->t == TV_LOOP && sis(name, "cycle")) {
        if (!A->n) return rt(E, at, "no items for cycling given");
        *out = A->v[obj->u.loop->index0 % (int64_t)A->n];
        return true;
    }
    *handled = false;
    return true;
}

/* ---- expressions ------------------------------------------------------------------------- */

static bool arith(ev *E, const tp_node *x, const tp_val *a, const tp_val *b, tp_val *out) {
    int op = x->op;
    if (op == OP_CONCAT) {
        tp_str sa, sbs;
        if (!to_str(E, a, &sa) || !to_str(E, b, &sbs)) return false;
        char *d = alloc(E, sa.n + sbs.n + 1);
        if (!d) return false;
        memcpy(d, sa.p, sa.n);
        memcpy(d + sa.n, sbs.p, sbs.n);
        *out = v_str(d, sa.n + sbs.n);
        return true;
    }
    if (op == OP_ADD && a->t == TV_STR && b->t == TV_STR) {
        if (a->u.s.n == 0) { *out = *b; return true; }
        if (b->u.s.n == 0) { *out = *a; return true; }
        char *d = alloc(E, a->u.s.n + b->u.s.n + 1);
        if (!d) return false;
        memcpy(d, a->u.s.p, a->u.s.n);
        memcpy(d + a->u.s.n, b->u.s.p, b->u.s.n);
        *out = v_str(d, a->u.s.n + b->u.s.n);
        return true;
    }
    if (op == OP_ADD && a->t == TV_LIST && b->t == TV_LIST) {
        if (a->u.l->tuple != b->u.l->tuple)
            return rt(E, x, "can only concatenate %s to %s", a->u.l->tuple ? "tuple" : "list",
                      a->u.l->tuple ? "tuple" : "list");
        tp_list *l = new_list(E, a->u.l->n + b->u.l->n);
        if (!l) return false;
        l->tuple = a->u.l->tuple;
        if (a->u.l->n) memcpy(l->v, a->u.l->v, a->u.l->n * sizeof *l->v);
        if (b->u.l->n) memcpy(l->v + a->u.l->n, b->u.l->v, b->u.l->n * sizeof *l->v);
        *out = v_list(l);
        return true;
    }
    if (op == OP_MUL && ((a->t == TV_STR && is_num(b)) || (is_num(a) && b->t == TV_STR))) {
        tp_str s = a->t == TV_STR ? a->u.s : b->u.s;
        int64_t k = a->t == TV_STR ? num(b) : num(a);
        if (k <= 0 || s.n == 0) {
            *out = v_str("", 0);
            return true;
        }
        if ((uint64_t)k > GT_TMPL_LIMIT_OUTPUT / s.n)
            return rt(E, x, "string repetition passes the size limit");
        size_t total = s.n * (size_t)k;
        char *d = alloc(E, total + 1);
        if (!d) return false;
        for (int64_t i = 0; i < k; i++) memcpy(d + (size_t)i * s.n, s.p, s.n);
        *out = v_str(d, total);
        return true;
    }
    if (op == OP_MUL && ((a->t == TV_LIST && is_num(b)) || (is_num(a) && b->t == TV_LIST))) {
        const tp_list *src = a->t == TV_LIST ? a->u.l : b->u.l;
        int64_t k = a->t == TV_LIST ? num(b) : num(a);
        if (k < 0 || src->n == 0) k = 0;
        if (k > 0 && (uint64_t)k > GT_TMPL_LIMIT_ITERATIONS / src->n)
            return tick(E, x, GT_TMPL_LIMIT_ITERATIONS + 1ull);
        size_t total = src->n * (size_t)k;
        if (!tick(E, x, total)) return false;
        tp_list *l = new_list(E, total);
        if (!l) return false;
        l->tuple = src->tuple;
        for (size_t i = 0; i < total; i++) l->v[i] = src->v[i % src->n];
        *out = v_list(l);
        return true;
    }
    if (is_num(a) && is_num(b)) {
        int64_t p = num(a), q = num(b), r = 0;
        bool ok = true;
        switch (op) {
        case OP_ADD: ok = !__builtin_add_overflow(p, q, &r); break;
        case OP_SUB: ok = !__builtin_sub_overflow(p, q, &r); break;
        case OP_MUL: ok = !__builtin_mul_overflow(p, q, &r); break;
        case OP_FLOORDIV:
        case OP_MOD:
            if (q == 0) return rt(E, x, "integer division or modulo by zero");
            if (p == INT64_MIN && q == -1) {
                ok = false;
                break;
            }
            r = op == OP_FLOORDIV ? p / q : p % q;
            if (op == OP_FLOORDIV && (p % q != 0) && ((p < 0) != (q < 0))) r -= 1;
            if (op == OP_MOD && r != 0 && ((r < 0) != (q < 0))) r += q; /* Python sign rule */
            break;
        case OP_POW:
            if (q < 0) return rt(E, x, "negative exponents give floats, which are not supported");
            r = 1;
            for (int64_t i = 0; i < q && ok; i++) {
                ok = !__builtin_mul_overflow(r, p, &r);
                if (r == 0 || r == 1) break;
                if (r == -1) {
                    r = ((q - i - 1) % 2 == 0) ? -1 : 1;
                    break;
                }
            }
            break;
        case OP_DIV: return rt(E, x, "'/' gives a float; floats are not supported (use '//')");
        default: return rt(E, x, "bad operator");
        }
        if (!ok) return rt(E, x, "integer overflow");
        *out = v_int(r);
        return true;
    }
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**", "~"};
    if (a->t == TV_UNDEF) return undefined_error(E, x, a);
    if (b->t == TV_UNDEF) return undefined_error(E, x, b);
    return rt(E, x, "unsupported operand type(s) for %s: '%s' and '%s'",
              op >= 1 && op <= 8 ? names[op] : "?", type_name(a), type_name(b));
}

static bool eval(ev *E, const tp_node *x, tp_val *out) {
    switch (x->kind) {
    case E_LIT: *out = x->lit; return true;
    case E_NAME: {
        const tp_val *v = lookup(E, x->name);
        *out = v ? *v : v_undef(x->name);
        return true;
    }
    case E_ATTR: {
        tp_val o;
        return eval(E, x->a, &o) && get_attr(E, x, &o, x->name, out);
    }
    case E_ITEM: {
        tp_val o, k;
        return eval(E, x->a, &o) && eval(E, x->b, &k) && get_item(E, x, &o, &k, out);
    }
    case E_SLICE: {
        tp_val o, parts[3];
        const tp_node *pn[3] = {x->b, x->c, x->d};
        if (!eval(E, x->a, &o)) return false;
        for (int k = 0; k < 3; k++) {
            if (pn[k] && !eval(E, pn[k], &parts[k])) return false;
        }
        return do_slice(E, x, &o, x->b ? &parts[0] : NULL, x->c ? &parts[1] : NULL,
                        x->d ? &parts[2] : NULL, out);
    }
    case E_CALL: {
        args A;
        if (x->a->kind == E_ATTR) {
            tp_val obj;
            bool handled;
            if (!eval(E, x->a->a, &obj)) return false;
            if (obj.t == TV_UNDEF) return undefined_error(E, x, &obj);
            if (!eval_args(E, x, &A) || !call_method(E, x, &obj, x->a->name, &A, out, &handled))
                return false;
            if (handled) return true;
            tp_val f;
            if (!get_attr(E, x, &obj, x->a->name, &f)) return false;
            if (f.t != TV_FUNC)
                return rt(E, x, "'%s' object has no method '%.*s'", type_name(&obj),
                          (int)(x->a->name.n > 40 ? 40 : x->a->name.n), x->a->name.p);
            return call_func(E, x, f.u.fn, &A, out);
        }
        tp_val f;
        if (!eval(E, x->a, &f)) return false;
        if (f.t == TV_UNDEF) return undefined_error(E, x, &f);
        if (f.t != TV_FUNC) return rt(E, x, "'%s' object is not callable", type_name(&f));
        return eval_args(E, x, &A) && call_func(E, x, f.u.fn, &A, out);
    }
    case E_FILTER: {
        tp_val v;
        args A;
        return eval(E, x->a, &v) && eval_args(E, x, &A) && apply_filter(E, x, x->name, &v, &A, out);
    }
    case E_TEST: {
        tp_val v;
        args A;
        bool r;
        if (!eval(E, x->a, &v) || !eval_args(E, x, &A) || !apply_test(E, x, x->name, &v, &A, &r))
            return false;
        *out = v_bool(x->op ? !r : r);
        return true;
    }
    case E_BIN: {
        tp_val a, b;
        return eval(E, x->a, &a) && eval(E, x->b, &b) && arith(E, x, &a, &b, out);
    }
    case E_CMP: {
        tp_val l, r;
        if (!eval(E, x->a, &l)) return false;
        for (size_t i = 0; i < x->n; i++) {
            bool res;
            if (!eval(E, x->list[i], &r)) return false;
            int op = x->ops[i];
            if (op == OP_EQ || op == OP_NE) res = veq(&l, &r, 0) == (op == OP_EQ);
            else if (op == OP_IN || op == OP_NOTIN) {
                if (!vin(E, x, &l, &r, &res)) return false;
                if (op == OP_NOTIN) res = !res;
            } else if (!vorder(E, x, op, &l, &r, &res)) {
                return false;
            }
            if (!res) {
                *out = v_bool(false);
                return true;
            }
            l = r;
        }
        *out = v_bool(true);
        return true;
    }
    case E_AND:
        if (!eval(E, x->a, out)) return false;
        return truthy(out) ? eval(E, x->b, out) : true;
    case E_OR:
        if (!eval(E, x->a, out)) return false;
        return truthy(out) ? true : eval(E, x->b, out);
    case E_NOT: {
        tp_val v;
        if (!eval(E, x->a, &v)) return false;
        *out = v_bool(!truthy(&v));
        return true;
    }
    case E_NEG:
    case E_POS: {
        tp_val v;
        if (!eval(E, x->a, &v)) return false;
        if (!is_num(&v))
            return v.t == TV_UNDEF ? undefined_error(E, x, &v)
                                   : rt(E, x, "bad operand type for unary %c: '%s'",
                                        x->kind == E_NEG ? '-' : '+', type_name(&v));
        if (x->kind == E_NEG && num(&v) == INT64_MIN) return rt(E, x, "integer overflow");
        *out = v_int(x->kind == E_NEG ? -num(&v) : num(&v));
        return true;
    }
    case E_COND: {
        tp_val c;
        if (!eval(E, x->a, &c)) return false;
        if (truthy(&c)) return eval(E, x->b, out);
        if (x->c) return eval(E, x->c, out);
        *out = v_undef(cstr("the inline if expression's else branch"));
        return true;
    }
    case E_LIST: {
        tp_list *l = new_list(E, x->n);
        if (!l) return false;
        l->tuple = x->op == 1;
        for (size_t i = 0; i < x->n; i++)
            if (!eval(E, x->list[i], &l->v[i])) return false;
        *out = v_list(l);
        return true;
    }
    case E_DICT: {
        tp_dict *d = new_dict(E, x->n);
        if (!d) return false;
        for (size_t i = 0; i < x->n; i++) {
            tp_val k, v;
            if (!eval(E, x->list[i], &k) || !eval(E, x->list2[i], &v)) return false;
            if (k.t != TV_STR) return rt(E, x->list[i], "dict keys must be strings here");
            if (!dict_set(E, d, k.u.s, v)) return false;
        }
        out->t = TV_DICT;
        out->u.d = d;
        return true;
    }
    default: return rt(E, x, "internal: bad expression node %d", x->kind);
    }
}

/* ---- statements -------------------------------------------------------------------------- */

static bool exec(ev *E, const tp_node *x);

static bool exec_body(ev *E, const tp_node *body) {
    for (size_t i = 0; i < body->n; i++)
        if (!exec(E, body->list[i])) return false;
    return true;
}

static bool bind_targets(ev *E, const tp_node *x, const tp_val *item) {
    if (!x->name2.n) return set_var(E, x->name, *item);
    const tp_list *parts;
    if (item->t == TV_LIST) {
        parts = item->u.l;
    } else if (!iter_items(E, x, item, &parts)) {
        return false;
    }
    if (parts->n != 2)
        return rt(E, x, "cannot unpack %zu values into 2 loop variables", parts->n);
    return set_var(E, x->name, parts->v[0]) && set_var(E, x->name2, parts->v[1]);
}

static bool exec_for(ev *E, const tp_node *x) {
    tp_val seqv;
    const tp_list *items;
    if (!eval(E, x->a, &seqv) || !iter_items(E, x->a, &seqv, &items)) return false;
    size_t saved_frame = E->frame, saved_n = E->nvars;
    E->frame = E->nvars;
    bool ok = true;
    if (x->b) { /* `for x in seq if cond`: filter first, so loop.* counts kept items only */
        tp_list *kept = new_list(E, items->n);
        ok = kept != NULL && tick(E, x, items->n);
        size_t k = 0;
        for (size_t i = 0; ok && i < items->n; i++) {
            tp_val c;
            E->nvars = E->frame;
            ok = bind_targets(E, x, &items->v[i]) && eval(E, x->b, &c);
            if (ok && truthy(&c)) kept->v[k++] = items->v[i];
        }
        if (ok) {
            kept->n = k;
            items = kept;
        }
    }
    tp_loop *L = ok ? alloc(E, sizeof *L) : NULL;
    if (ok && L) {
        L->items = items;
        L->length = (int64_t)items->n;
        for (size_t i = 0; ok && i < items->n; i++) {
            ok = tick(E, x, 1);
            E->nvars = E->frame;
            L->index0 = (int64_t)i;
            tp_val lv;
            lv.t = TV_LOOP;
            lv.u.loop = L;
            ok = ok && set_var(E, cstr("loop"), lv) && bind_targets(E, x, &items->v[i]) &&
                 exec_body(E, x->c);
        }
        if (ok && items->n == 0 && x->d) {
            E->nvars = E->frame;
            ok = exec_body(E, x->d);
        }
    } else {
        ok = false;
    }
    E->nvars = saved_n;
    E->frame = saved_frame;
    return ok;
}

static bool exec(ev *E, const tp_node *x) {
    switch (x->kind) {
    case S_TEXT: return sb_put(E, &E->out, x->lit.u.s.p, x->lit.u.s.n);
    case S_OUT: {
        tp_val v;
        if (!eval(E, x->a, &v)) return false;
        if (v.t == TV_STR) return sb_put(E, &E->out, v.u.s.p, v.u.s.n);
        return write_val(E, &E->out, &v, false, 0);
    }
    case S_IF:
        for (size_t i = 0; i < x->n; i++) {
            tp_val c;
            if (!eval(E, x->list[i], &c)) return false;
            if (truthy(&c)) return exec_body(E, x->list2[i]);
        }
        return x->c ? exec_body(E, x->c) : true;
    case S_FOR: return exec_for(E, x);
    case S_SET: {
        tp_val v;
        if (x->a) {
            if (!eval(E, x->a, &v)) return false;
        } else { /* block set: render the body into a string */
            size_t mark = E->out.n;
            if (!exec_body(E, x->c)) return false;
            char *d = alloc(E, E->out.n - mark + 1);
            if (!d) return false;
            memcpy(d, E->out.p ? E->out.p + mark : "", E->out.n - mark);
            v = v_str(d, E->out.n - mark);
            E->out.n = mark;
            if (E->out.p) E->out.p[mark] = '\0';
        }
        if (x->name2.n) {
            const tp_val *ns = lookup(E, x->name);
            if (!ns || ns->t != TV_NS)
                return rt(E, x, "cannot assign attribute on non-namespace object");
            return dict_set(E, ns->u.d, x->name2, v);
        }
        return set_var(E, x->name, v);
    }
    case S_BODY: return exec_body(E, x);
    default: return rt(E, x, "internal: bad statement node %d", x->kind);
    }
}

/* ---- entry ------------------------------------------------------------------------------- */

static bool add_global_fn(ev *E, const char *name, int fn) {
    tp_val v;
    v.t = TV_FUNC;
    v.u.fn = fn;
    return set_var(E, cstr(name), v);
}

/* A JSON value of the context (the `tools` list) as a template value over the tree's strings. The
 * engine has integers only: a number with a fraction or an exponent, or beyond 64 bits, is an
 * error (chat/ checks before it passes tools, and renders the plain format then). */
static bool json_to_val(ev *E, const gt_json *j, tp_val *out) {
    switch (j->type) {
    case GT_JSON_NULL: *out = v_none(); return true;
    case GT_JSON_BOOL: *out = v_bool(j->b); return true;
    case GT_JSON_NUMBER: {
        char *end = NULL;
        errno = 0;
        const long long x = j->is_int ? strtoll(j->num_text, &end, 10) : 0;
        if (!j->is_int || errno || !end || *end)
            return rt(E, NULL, "tools: the number %.40s is not a 64-bit integer (the template "
                      "engine has integers only)", j->num_text);
        *out = v_int((int64_t)x);
        return true;
    }
    case GT_JSON_STRING: *out = v_str(j->str, j->len); return true;
    case GT_JSON_ARRAY: {
        tp_list *l = new_list(E, j->len);
        if (!l) return false;
        size_t i = 0;
        for (const gt_json *c = j->child; c && i < l->n; c = c->next, i++)
            if (!json_to_val(E, c, &l->v[i])) return false;
        *out = v_list(l);
        return true;
    }
    case GT_JSON_OBJECT: {
        tp_dict *d = new_dict(E, j->len);
        if (!d) return false;
        for (const gt_json *c = j->child; c; c = c->next) {
            tp_val v;
            if (!json_to_val(E, c, &v) || !dict_set(E, d, (tp_str){c->key, c->key_len}, v))
                return false;
        }
        out->t = TV_DICT;
        out->u.d = d;
        return true;
    }
    }
    return rt(E, NULL, "tools: bad JSON value");
}

geist_status gt_tp_render_tree(const tp_node *root, const gt_tmpl_ctx *ctx, tp_arena *ar,
                            char **out, size_t *out_len, gt_err *err) {
    ev E;
    memset(&E, 0, sizeof E);
    E.ar = ar;
    E.err = err;
    E.status = GEIST_OK;
    bool ok = true;
    /* messages: a list of {role, content} dicts over the caller's strings */
    ar->limit = 0; /* the context itself is not counted against the template's budget */
    tp_list *msgs = new_list(&E, ctx->n_messages);
    for (size_t i = 0; ok && msgs && i < ctx->n_messages; i++) {
        tp_dict *d = new_dict(&E, 2);
        const gt_tmpl_msg *m = &ctx->messages[i];
        ok = d && dict_set(&E, d, cstr("role"), v_str(m->role ? m->role : "", m->role_len)) &&
             dict_set(&E, d, cstr("content"), v_str(m->content ? m->content : "", m->content_len));
        if (ok) {
            msgs->v[i].t = TV_DICT;
            msgs->v[i].u.d = d;
        }
    }
    tp_val tools;
    ok = ok && (!ctx->tools || json_to_val(&E, ctx->tools, &tools));
    ok = ok && (!ctx->tools || set_var(&E, cstr("tools"), tools));
    ok = ok && msgs && set_var(&E, cstr("messages"), v_list(msgs)) &&
         set_var(&E, cstr("add_generation_prompt"), v_bool(ctx->add_generation_prompt)) &&
         (!ctx->bos_token || set_var(&E, cstr("bos_token"), v_str(ctx->bos_token, ctx->bos_len))) &&
         (!ctx->eos_token || set_var(&E, cstr("eos_token"), v_str(ctx->eos_token, ctx->eos_len))) &&
         add_global_fn(&E, "raise_exception", FN_RAISE) &&
         add_global_fn(&E, "namespace", FN_NAMESPACE) && add_global_fn(&E, "dict", FN_DICT) &&
         add_global_fn(&E, "range", FN_RANGE);
    ar->limit = ar->used + GT_TMPL_LIMIT_MEMORY;
    ok = ok && exec_body(&E, root);
    if (!ok) {
        free(E.out.p);
        if (E.status == GEIST_OK)
            E.status = gt_fail(err, GEIST_ERR_INTERNAL, "chat template failed without a message");
        return E.status;
    }
    if (!E.out.p) {
        E.out.p = malloc(1);
        if (!E.out.p) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory");
        E.out.p[0] = '\0';
    }
    *out = E.out.p;
    *out_len = E.out.n;
    return GEIST_OK;
}
