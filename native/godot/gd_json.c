/* gd_json.c — the core's JSON (geist_model_info_json) as Variants. Godot's JSON class reads every
 * number as a float; here a number written without a fraction or exponent is an int. */
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
