/* Internals shared by the template parser (template.c) and evaluator (template_eval.c). */
#ifndef GEIST_TEMPLATE_INTERNAL_H
#define GEIST_TEMPLATE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "template.h"

/* ---- arena: everything one render allocates, freed at once ------------------------------- */
typedef struct tp_block tp_block;
typedef struct tp_arena {
    tp_block *head;
    size_t used;      /* bytes handed out */
    size_t limit;     /* 0 = none */
    bool hit_limit;   /* the last failure was the limit, not malloc */
} tp_arena;

void *gt_tp_alloc(tp_arena *a, size_t n); /* zeroed, 16-aligned; NULL on failure */
void gt_tp_arena_free(tp_arena *a);

typedef struct tp_str {
    const char *p;
    size_t n;
} tp_str;

/* ---- values ------------------------------------------------------------------------------ */
enum tp_vt { TV_UNDEF, TV_NONE, TV_BOOL, TV_INT, TV_STR, TV_LIST, TV_DICT, TV_NS, TV_FUNC,
             TV_LOOP };
enum tp_fn { FN_RAISE = 1, FN_NAMESPACE, FN_DICT, FN_RANGE };

typedef struct tp_val tp_val;
typedef struct tp_list {
    size_t n;
    tp_val *v;
    bool tuple; /* printed as (a, b) */
} tp_list;
typedef struct tp_dict { /* string keys, insertion order; namespaces are mutable dicts */
    size_t n, cap;
    tp_str *k;
    tp_val *v;
} tp_dict;
typedef struct tp_loop {
    int64_t index0, length;
    const tp_list *items;
} tp_loop;

struct tp_val {
    int t; /* enum tp_vt */
    union {
        bool b;
        int64_t i;
        tp_str s;
        tp_list *l;
        tp_dict *d;
        int fn;
        tp_loop *loop;
    } u;
};

/* ---- syntax tree ------------------------------------------------------------------------- */
enum tp_kind {
    /* statements */
    S_BODY, S_TEXT, S_OUT, S_IF, S_FOR, S_SET,
    /* expressions */
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_BIN, E_CMP, E_AND, E_OR,
    E_NOT, E_NEG, E_POS, E_COND, E_LIST, E_DICT
};

/* binary / comparison operators */
enum tp_op { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT, OP_EQ,
             OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN };

typedef struct tp_node tp_node;
struct tp_node {
    int kind;
    uint32_t pos; /* byte offset in the template, for messages */
    int op;       /* E_BIN op; E_TEST: 1 = negated; E_LIST: 1 = tuple */
    int height;
    tp_str name;  /* E_NAME, E_ATTR, E_FILTER, E_TEST, S_FOR target, S_SET target */
    tp_str name2; /* S_FOR second target, S_SET attribute (ns.attr) */
    tp_val lit;   /* E_LIT, S_TEXT */
    tp_node *a, *b, *c, *d;
    tp_node **list; /* args, items, statements, if conditions, E_CMP operands after the first */
    tp_node **list2; /* if bodies, dict values */
    int *ops;        /* E_CMP operators */
    size_t n;
    tp_str *kwn; /* keyword arguments */
    tp_node **kwv;
    size_t nkw;
};

/* Evaluates the parsed template into a malloc'd string (template_eval.c). */
geist_status gt_tp_render_tree(const tp_node *root, const gt_tmpl_ctx *ctx, tp_arena *ar,
                            char **out, size_t *out_len, gt_err *err);

/* Python's str.isspace() for the code point at s (returns its byte length, 0 if not space). */
size_t gt_tp_space_len(const char *s, size_t n);
/* Length of the whitespace run that ends at s+n (scanning backwards). */
size_t gt_tp_space_len_back(const char *s, size_t n);

#endif
