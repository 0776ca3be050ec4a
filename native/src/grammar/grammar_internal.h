/* The grammar room's shared internals: the rule builder, the compiled byte-level rules and the
 * matcher's tables. */
#ifndef GEIST_GRAMMAR_INTERNAL_H
#define GEIST_GRAMMAR_INTERNAL_H

#include <pthread.h>

#include "grammar.h"

enum { GE_END = 0, GE_BYTES = 1, GE_RULE = 2 };
#define GT_MIN_INF 0x3FFFFFFFu

/* ---- builder (gbnf.c) ---- */
typedef struct gt_gel {
    uint8_t k;
    uint32_t v;
} gt_gel;
typedef struct gt_galt {
    gt_gel *e;
    uint32_t n, cap;
} gt_galt;
typedef struct gt_grule {
    char *name;
    gt_galt *alts;
    uint32_t n, cap;
    bool defined;
    int line; /* where first referenced or defined */
} gt_grule;
typedef struct gt_gbuild {
    gt_grule *rules;
    uint32_t n_rules, cap_rules;
    uint32_t (*sets)[8];
    uint32_t n_sets, cap_sets;
    uint64_t n_elements;
    uint32_t *hmap; /* user rule names: open addressing, rule index + 1 */
    uint32_t hcap, hn;
    gt_err *err;
} gt_gbuild;

/* ---- compiled rules ---- */
typedef struct gt_rules {
    uint32_t n_pos;       /* positions: elements and END markers */
    uint8_t *ek;          /* kind per position */
    uint32_t *ev;         /* set index (BYTES) or rule id (RULE) */
    uint32_t *pos_rule;   /* the rule whose alternative holds the position */
    uint32_t *suffix_min; /* fewest bytes from the position to its sequence's END */
    uint32_t n_rules;
    uint32_t *alt_off;    /* rule r's alternatives: alt_start[alt_off[r] .. alt_off[r+1]) */
    uint32_t *alt_start;
    uint32_t n_alts;
    uint32_t (*sets)[8];  /* byte sets */
    uint32_t n_sets;
    uint32_t (*follow)[8]; /* bytes that may follow each rule (over-approximation) */
    uint32_t *rule_min;
    uint32_t root;
} gt_rules;

/* Parses GBNF text and compiles it; *out owned by the caller (gt_rules_free). */
geist_status gt_gbnf_compile(const char *text, size_t len, gt_rules **out, gt_err *err);
void gt_rules_free(gt_rules *r);

static inline bool gt_set_has(const uint32_t *set, uint8_t b) { return (set[b >> 5] >> (b & 31)) & 1u; }

/* ---- the vocabulary (matcher.c) ---- */
typedef struct gt_vocab {
    int32_t n_vocab;
    int32_t n_tok;      /* tokens the grammar may produce (non-empty text tokens) */
    int32_t *ids;       /* sorted by bytes */
    uint32_t *off, *len; /* into bytes */
    uint16_t *lcp;      /* common prefix with the previous sorted token (capped at 65535) */
    uint8_t *bytes;
    int32_t *sorted_of; /* id -> sorted index, -1 where the grammar never allows the token */
    int32_t *eog;       /* end-of-generation ids */
    int32_t n_eog;
    uint32_t max_len;
    /* the sorted tokens as a trie in preorder (node i's subtree is nodes i .. tskip[i] - 1; its
     * tokens are sorted indices ttok[i] .. ttok[tskip[i]] - 1, those ending at node i first,
     * tend[i] of them) */
    uint32_t n_nodes;
    uint8_t *tbyte;
    uint16_t *tdepth; /* 1 for the root's children */
    uint32_t *tskip;
    uint32_t *ttok;   /* n_nodes + 1 entries */
    uint32_t *tend;
} gt_vocab;

#endif
