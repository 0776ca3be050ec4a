/* gd_json.c — the core's JSON (geist_model_info_json) as Variants. Godot's JSON class reads every
 * number as a float; here a number written without a fraction or exponent is an int. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_classes.h"

typedef struct jp {
    const char *s;
    size_t i, n;
    int bad;
} jp;

static void ws(jp *p) {
    while (p->i < p->n && strchr(" \t\r\n", p->s[p->i]))
        p->i++;
}

static void value(jp *p, gvar *out, int depth);

static char *jstring(jp *p) {
    /* p->s[p->i] == '"' */
    size_t cap = 64, k = 0;
    char *o = malloc(cap);
    p->i++;
    while (o && p->i < p->n && p->s[p->i] != '"') {
        char c = p->s[p->i++];
        if (k + 8 >= cap) {
            char *no = realloc(o, cap *= 2);
            if (!no) {
                free(o);
                return NULL;
            }
            o = no;
        }
        if (c != '\\') {
            o[k++] = c;
            continue;
        }
        if (p->i >= p->n)
            break;
        c = p->s[p->i++];
        switch (c) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'u': {
            unsigned cp = 0;
            for (int j = 0; j < 4 && p->i < p->n; j++) {
                char h = p->s[p->i++];
                cp = cp * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 32) - 'a' + 10);
            }
            if (cp < 0x80) {
                o[k++] = (char)cp;
            } else if (cp < 0x800) {
                o[k++] = (char)(0xC0 | (cp >> 6));
                o[k++] = (char)(0x80 | (cp & 63));
            } else {
                o[k++] = (char)(0xE0 | (cp >> 12));
                o[k++] = (char)(0x80 | ((cp >> 6) & 63));
                o[k++] = (char)(0x80 | (cp & 63));
            }
            break;
        }
        default: o[k++] = c; break;
        }
    }
    if (p->i >= p->n)
        p->bad = 1;
    p->i++;
    if (o)
        o[k] = 0;
    return o;
}

static void value(jp *p, gvar *out, int depth) {
    ws(p);
    gv_nil(out);
    if (p->i >= p->n || depth > 32) {
        p->bad = 1;
        return;
    }
    char c = p->s[p->i];
    if (c == '{') {
        gv_dict(out);
        p->i++;
        ws(p);
        while (!p->bad && p->i < p->n && p->s[p->i] != '}') {
            ws(p);
            if (p->s[p->i] != '"') {
                p->bad = 1;
                break;
            }
            char *key = jstring(p);
            ws(p);
            if (p->i < p->n && p->s[p->i] == ':')
                p->i++;
            gvar v;
            value(p, &v, depth + 1);
            if (key)
                gv_dict_set(out, key, &v);
            else
                gv_free(&v);
            free(key);
            ws(p);
            if (p->i < p->n && p->s[p->i] == ',')
                p->i++;
            ws(p);
        }
        p->i++;
    } else if (c == '[') {
        gv_array(out);
        p->i++;
        ws(p);
        while (!p->bad && p->i < p->n && p->s[p->i] != ']') {
            gvar v;
            value(p, &v, depth + 1);
            gv_array_push(out, &v);
            ws(p);
            if (p->i < p->n && p->s[p->i] == ',')
                p->i++;
            ws(p);
        }
        p->i++;
    } else if (c == '"') {
        char *s = jstring(p);
        gv_str(out, s ? s : "");
        free(s);
    } else if (strncmp(p->s + p->i, "true", 4) == 0) {
        gv_bool(out, 1);
        p->i += 4;
    } else if (strncmp(p->s + p->i, "false", 5) == 0) {
        gv_bool(out, 0);
        p->i += 5;
    } else if (strncmp(p->s + p->i, "null", 4) == 0) {
        p->i += 4;
    } else {
        char *end = NULL;
        const char *start = p->s + p->i;
        size_t len = strspn(start, "+-0123456789.eE");
        if (len == 0) {
            p->bad = 1;
            return;
        }
        if (strcspn(start, ".eE") < len)
            gv_float(out, strtod(start, &end));
        else
            gv_int(out, strtoll(start, &end, 10));
        p->i += len;
    }
}

int json_to_variant(const char *text, gvar *out) {
    jp p = {text, 0, strlen(text), 0};
    value(&p, out, 0);
    return !p.bad;
}

/* ---------------------------------------------------------------------------------------------- */
/* Variants as JSON text (a Dictionary schema -> the core's JSON Schema text)                     */

typedef struct jw {
    char *p;
    size_t n, cap;
    int bad;
} jw;

static void jw_put(jw *w, const char *s, size_t n) {
    if (w->bad)
        return;
    if (w->n + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->n + n + 1)
            cap *= 2;
        char *q = realloc(w->p, cap);
        if (!q) {
            w->bad = 1;
            return;
        }
        w->p = q;
        w->cap = cap;
    }
    memcpy(w->p + w->n, s, n);
    w->n += n;
    w->p[w->n] = 0;
}

static void jw_string(jw *w, const char *s, size_t n) {
    jw_put(w, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            jw_put(w, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            jw_put(w, esc, 6);
        } else {
            jw_put(w, (const char *)&c, 1);
        }
    }
    jw_put(w, "\"", 1);
}

static void jw_value(jw *w, const gvar *v, int depth) {
    if (depth > 32) {
        w->bad = 1;
        return;
    }
    char num[64];
    int t = gv_type(v);
    switch (t) {
    case T_NIL: jw_put(w, "null", 4); return;
    case T_BOOL: gv_to_int(v, 0) ? jw_put(w, "true", 4) : jw_put(w, "false", 5); return;
    case T_INT:
        snprintf(num, sizeof num, "%lld", (long long)gv_to_int(v, 0));
        jw_put(w, num, strlen(num));
        return;
    case T_FLOAT: {
        double d = gv_to_float(v, 0);
        if (d != d || d - d != 0) { /* NaN and infinities are not JSON */
            w->bad = 1;
            return;
        }
        snprintf(num, sizeof num, "%.17g", d);
        jw_put(w, num, strlen(num));
        return;
    }
    case T_DICT: {
        gvar keys;
        gopq m = gd_sn("keys");
        GDExtensionCallError ce;
        GD.variant_call((GDExtensionVariantPtr)v, &m, NULL, 0, &keys, &ce);
        gd_sn_free(&m);
        if (ce.error != GDEXTENSION_CALL_OK) {
            w->bad = 1;
            return;
        }
        jw_put(w, "{", 1);
        int64_t n = gv_size(&keys);
        for (int64_t i = 0; i < n && !w->bad; i++) {
            gvar k, val;
            if (!gv_index(&keys, i, &k))
                continue;
            size_t kl = 0;
            char *ks = gv_to_utf8(&k, &kl);
            GDExtensionBool valid = 0;
            GD.variant_get_keyed(v, &k, &val, &valid);
            if (ks && valid) {
                if (i)
                    jw_put(w, ",", 1);
                jw_string(w, ks, kl);
                jw_put(w, ":", 1);
                jw_value(w, &val, depth + 1);
            } else {
                w->bad = 1;
            }
            if (valid)
                gv_free(&val);
            free(ks);
            gv_free(&k);
        }
        gv_free(&keys);
        jw_put(w, "}", 1);
        return;
    }
    default:
        break;
    }
    if (t == T_ARRAY || (t >= GDEXTENSION_VARIANT_TYPE_PACKED_BYTE_ARRAY &&
                         t <= GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY)) {
        jw_put(w, "[", 1);
        int64_t n = gv_size(v);
        for (int64_t i = 0; i < n && !w->bad; i++) {
            gvar e;
            if (!gv_index(v, i, &e)) {
                w->bad = 1;
                break;
            }
            if (i)
                jw_put(w, ",", 1);
            jw_value(w, &e, depth + 1);
            gv_free(&e);
        }
        jw_put(w, "]", 1);
        return;
    }
    /* String, StringName, NodePath and anything else: its text */
    size_t len = 0;
    char *s = gv_to_utf8(v, &len);
    if (!s) {
        w->bad = 1;
        return;
    }
    jw_string(w, s, len);
    free(s);
}

char *variant_to_json(const gvar *v) {
    jw w = {0};
    jw_value(&w, v, 0);
    if (w.bad) {
        free(w.p);
        return NULL;
    }
    return w.p;
}
