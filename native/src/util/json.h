/* A small JSON reader (RFC 8259, UTF-8) for schemas, for parsing constrained replies and for the
 * tool lists chat templates render (so in util/, below grammar/ and chat/): a tree allocated in
 * one block, depth-limited (GT_JSON_MAX_DEPTH), every string NUL-terminated and unescaped. */
#ifndef GEIST_UTIL_JSON_H
#define GEIST_UTIL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define GT_JSON_MAX_DEPTH 100

typedef enum gt_json_type {
    GT_JSON_NULL = 0,
    GT_JSON_BOOL,
    GT_JSON_NUMBER,
    GT_JSON_STRING,
    GT_JSON_ARRAY,
    GT_JSON_OBJECT
} gt_json_type;

typedef struct gt_json gt_json;
struct gt_json {
    gt_json_type type;
    bool b;               /* BOOL */
    double num;           /* NUMBER */
    bool is_int;          /* NUMBER written without fraction or exponent */
    const char *str;      /* STRING: unescaped, NUL-terminated (may contain NUL: see len) */
    size_t len;           /* STRING: bytes; ARRAY/OBJECT: number of children */
    const char *num_text; /* NUMBER: the literal as written, NUL-terminated */
    gt_json *child;       /* ARRAY/OBJECT: first child */
    gt_json *next;        /* the next sibling */
    const char *key;      /* a member of an OBJECT: its name (unescaped, NUL-terminated) */
    size_t key_len;
};

/* Parses text[0..len) (one value, surrounding whitespace allowed). Free with gt_json_free. Errors:
 * GEIST_ERR_INVALID_ARGUMENT with the byte offset, GEIST_ERR_OUT_OF_MEMORY. */
geist_status gt_json_parse(const char *text, size_t len, gt_json **out, gt_err *err);
void gt_json_free(gt_json *root);
/* The member named key of an object (the last one when repeated), or NULL. */
const gt_json *gt_json_get(const gt_json *obj, const char *key);

#endif
