/* The compiled grammar's matcher: interned stacks and stack sets with memoized byte transitions,
 * the per-position token classes over the sorted vocabulary, masks, and the per-model cache
 * (grammar.h describes the design). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../tokenizer/tokenizer.h"
#include "grammar_internal.h"
#include "json_schema.h"

#define DEAD (-1)
#define FAIL (-2)
#define UNKNOWN (-3)

/* Table sizes: cleared (at the start of an operation) past the soft caps; an operation that
 * grows them past the hard caps fails (GEIST_ERR_CAPACITY). */
#define NODES_SOFT (1u << 20)
#define NODES_HARD (1u << 21)
#define SETS_SOFT (1u << 14)
#define SETS_HARD (1u << 15)

typedef struct gnode {
    uint32_t pos, parent, depth;
} gnode;

typedef struct gsset {
    uint32_t off, n;
    int32_t *trans; /* 256 entries, lazily */
    bool accepting; /* holds the empty stack */
} gsset;

typedef struct gt_tables {
    gnode *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *nh; /* node hash: id + 1 */
    uint32_t nh_cap;
    gsset *sets;
    uint32_t n_sets, cap_sets;
    uint32_t *pool;
    size_t n_pool, cap_pool;
    uint32_t *sh; /* set hash: id + 1 */
    uint32_t sh_cap;
    uint32_t *mark; /* cap_nodes entries: generation stamps */
    uint32_t gen;
    uint32_t *work, *out;
    size_t cap_work, n_work, cap_out, n_out;
    const char *fail_msg;
} gt_tables;

#define GT_CTX_DEPTH 4

typedef struct pcache {
    bool ready;
    bool stored;
    uint32_t *acc_bits; /* n_words, or NULL: then acc_ids */
    int32_t *acc_ids;
    uint32_t n_acc;
    int32_t *unc;
    uint32_t n_unc;
    /* a counted-repetition context (see chains_build): the accepted tokens by the repetitions
     * they need, nids[noff[k] .. noff[k + 1]) needing k (1 <= k <= M); acc_* unused */
    bool chain;
    uint32_t M;
    int32_t *nids;
    uint32_t *noff;  /* M + 2 entries */
    uint32_t **nbits; /* M + 1 entries: lazily, tokens needing <= r */
} pcache;

typedef struct pentry {
    uint32_t key[GT_CTX_DEPTH]; /* top first */
    uint8_t klen;               /* 0: empty slot */
    bool whole;                 /* key is the whole stack (nothing below can follow) */
    bool chain;                 /* a counted-repetition context (key[ci] is the chain's top) */
    pcache c;
} pentry;

struct gt_grammar {
    atomic_int refs;
    char *text;
    size_t len;
    int32_t kind;
    uint64_t hash;
    gt_rules *R;
    const gt_vocab *V;
    pthread_mutex_t lock;
    gt_tables T;
    /* token classes per context key: the top GT_CTX_DEPTH positions of a stack (or the whole
     * stack, when shorter); open addressing, entries never removed */
    struct pentry *pe;
    uint32_t pe_cap, pe_n;
    size_t pc_bytes;
    uint32_t *scratch_bits; /* n_words */
    int32_t *scratch_states; /* walk states per depth */
    uint8_t *scratch_unc;
    /* counted repetitions (x{0,n} compiled to R_n ::= x R_{n-1} | ""): per position, the chain
     * index m of a chain entry (0: none) and the same slot's position in the chain's top rule */
    uint32_t *ch_m, *ch_top;
    int32_t *memo_v; /* per set id during a chain walk (memo_s == memo_gen): chain_need */
    uint32_t *memo_s;
    uint32_t memo_cap, memo_gen;
    uint64_t walk_work; /* trie nodes visited by token-class walks */
    bool prepared;      /* precompute() ran (under lock) */
    gt_grammar *next; /* in the cache's list */
};

struct gt_grammar_cache {
    pthread_mutex_t lock;
    const gt_tokenizer *tok;
    int32_t n_vocab;
    gt_vocab *V; /* built on first use */
    gt_grammar *list;
    uint32_t n;
};

struct gt_matcher {
    gt_grammar *g;
    uint32_t *stk; /* stacks: depth, then positions bottom..top, one after the other */
    size_t n_stk, cap_stk;
    uint32_t n_stacks;
    bool can_end, ended;
    uint32_t min_bytes;
};

/* ---------------------------------------------------------------------------------------------- */
/* Tables */

static void tables_free(gt_tables *T) {
    for (uint32_t i = 0; i < T->n_sets; i++) free(T->sets[i].trans);
    free(T->nodes);
    free(T->nh);
    free(T->sets);
    free(T->pool);
    free(T->sh);
    free(T->mark);
    free(T->work);
    free(T->out);
    memset(T, 0, sizeof *T);
}

static bool tables_init(gt_tables *T) {
    memset(T, 0, sizeof *T);
    T->cap_nodes = 1024;
    T->nodes = malloc(T->cap_nodes * sizeof *T->nodes);
    T->mark = calloc(T->cap_nodes, sizeof *T->mark);
    T->nh_cap = 2048;
    T->nh = calloc(T->nh_cap, sizeof *T->nh);
    T->cap_sets = 256;
    T->sets = malloc(T->cap_sets * sizeof *T->sets);
    T->sh_cap = 512;
    T->sh = calloc(T->sh_cap, sizeof *T->sh);
    if (!T->nodes || !T->mark || !T->nh || !T->sets || !T->sh) return false;
    T->nodes[0] = (gnode){0, 0, 0}; /* the empty stack */
    T->n_nodes = 1;
    return true;
}

/* Drops every interned stack and set (no id survives an operation). */
static bool tables_reset(gt_tables *T) {
    tables_free(T);
    return tables_init(T);
}

static uint32_t hash2(uint32_t a, uint32_t b) {
    uint64_t x = ((uint64_t)a << 32 | b) * UINT64_C(0x9E3779B97F4A7C15);
    return (uint32_t)(x >> 32) ^ (uint32_t)x;
}

static bool rehash_nodes(gt_tables *T) {
    const uint32_t cap = T->nh_cap * 2;
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h) return false;
    for (uint32_t i = 1; i < T->n_nodes; i++) {
        uint32_t k = hash2(T->nodes[i].pos, T->nodes[i].parent) & (cap - 1);
        while (h[k]) k = (k + 1) & (cap - 1);
        h[k] = i + 1;
    }
    free(T->nh);
    T->nh = h;
    T->nh_cap = cap;
    return true;
}

/* The stack `parent` with pos pushed: its id, or -1 (T->fail_msg). */
static int64_t node_get(gt_tables *T, uint32_t pos, uint32_t parent) {
    uint32_t k = hash2(pos, parent) & (T->nh_cap - 1);
    for (; T->nh[k]; k = (k + 1) & (T->nh_cap - 1)) {
        const gnode *n = &T->nodes[T->nh[k] - 1];
        if (n->pos == pos && n->parent == parent) return T->nh[k] - 1;
    }
    const uint32_t depth = T->nodes[parent].depth + 1;
    if (depth > GT_GRAMMAR_MAX_STACK) {
        T->fail_msg = "grammar: the parser stack grew deeper than 1000 (nesting too deep)";
        return -1;
    }
    if (T->n_nodes >= NODES_HARD) {
        T->fail_msg = "grammar: too many parser states";
        return -1;
    }
    if (T->n_nodes == T->cap_nodes) {
        const uint32_t cap = T->cap_nodes * 2;
        gnode *nn = realloc(T->nodes, cap * sizeof *nn);
        if (!nn) goto oom;
        T->nodes = nn;
        uint32_t *mk = realloc(T->mark, cap * sizeof *mk);
        if (!mk) goto oom;
        memset(mk + T->cap_nodes, 0, (cap - T->cap_nodes) * sizeof *mk);
        T->mark = mk;
        T->cap_nodes = cap;
    }
    const uint32_t id = T->n_nodes++;
    T->nodes[id] = (gnode){pos, parent, depth};
    T->nh[k] = id + 1;
    if (T->n_nodes * 2 > T->nh_cap && !rehash_nodes(T)) goto oom;
    return id;
oom:
    T->fail_msg = "out of memory (grammar states)";
    return -1;
}

static bool push_u32(uint32_t **v, size_t *n, size_t *cap, uint32_t x) {
    if (*n == *cap) {
        const size_t c = *cap ? *cap * 2 : 64;
        uint32_t *q = realloc(*v, c * sizeof *q);
        if (!q) return false;
        *v = q;
        *cap = c;
    }
    (*v)[(*n)++] = x;
    return true;
}

static uint32_t set_hash(const uint32_t *ids, uint32_t n) {
    uint32_t h = 0x811C9DC5u ^ n;
    for (uint32_t i = 0; i < n; i++) h = hash2(h, ids[i]);
    return h;
}

static bool rehash_sets(gt_tables *T) {
    const uint32_t cap = T->sh_cap * 2;
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h) return false;
    for (uint32_t i = 0; i < T->n_sets; i++) {
        uint32_t k = set_hash(T->pool + T->sets[i].off, T->sets[i].n) & (cap - 1);
        while (h[k]) k = (k + 1) & (cap - 1);
        h[k] = i + 1;
    }
    free(T->sh);
    T->sh = h;
    T->sh_cap = cap;
    return true;
}

static int cmp_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : (x > y ? 1 : 0);
}

/* Interns the sorted, unique ids[0..n) as a set: its id, DEAD (n == 0) or FAIL. */
static int32_t set_get(gt_tables *T, const uint32_t *ids, uint32_t n) {
    if (n == 0) return DEAD;
    if (n > GT_GRAMMAR_MAX_STACKS) {
        T->fail_msg = "grammar: more than 512 parses alive at once (the grammar is too ambiguous)";
        return FAIL;
    }
    uint32_t k = set_hash(ids, n) & (T->sh_cap - 1);
    for (; T->sh[k]; k = (k + 1) & (T->sh_cap - 1)) {
        const gsset *s = &T->sets[T->sh[k] - 1];
        if (s->n == n && memcmp(T->pool + s->off, ids, n * sizeof *ids) == 0) return (int32_t)T->sh[k] - 1;
    }
    if (T->n_sets >= SETS_HARD) {
        T->fail_msg = "grammar: too many parser states";
        return FAIL;
    }
    if (T->n_sets == T->cap_sets) {
        gsset *q = realloc(T->sets, T->cap_sets * 2 * sizeof *q);
        if (!q) goto oom;
        T->sets = q;
        T->cap_sets *= 2;
    }
    if (T->n_pool + n > T->cap_pool) {
        size_t c = T->cap_pool ? T->cap_pool : 1024;
        while (c < T->n_pool + n) c *= 2;
        uint32_t *q = realloc(T->pool, c * sizeof *q);
        if (!q) goto oom;
        T->pool = q;
        T->cap_pool = c;
    }
    memcpy(T->pool + T->n_pool, ids, n * sizeof *ids);
    const uint32_t id = T->n_sets++;
    T->sets[id] = (gsset){.off = (uint32_t)T->n_pool, .n = n, .trans = NULL, .accepting = ids[0] == 0};
    T->n_pool += n;
    T->sh[k] = id + 1;
    if (T->n_sets * 2 > T->sh_cap && !rehash_sets(T)) goto oom;
    return (int32_t)id;
oom:
    T->fail_msg = "out of memory (grammar states)";
    return FAIL;
}

/* Expands the stack `start` until every top is a byte set (or the stack is empty), adding the
 * results to T->out (deduplicated by the current generation's marks). */
static bool expand(gt_tables *T, const gt_rules *R, uint32_t start) {
    T->n_work = 0;
    if (!push_u32(&T->work, &T->n_work, &T->cap_work, start)) goto oom;
    while (T->n_work) {
        const uint32_t n = T->work[--T->n_work];
        if (T->mark[n] == T->gen) continue;
        T->mark[n] = T->gen;
        if (n == 0 || R->ek[T->nodes[n].pos] == GE_BYTES) {
            if (!push_u32(&T->out, &T->n_out, &T->cap_out, n)) goto oom;
            continue;
        }
        const uint32_t p = T->nodes[n].pos, parent = T->nodes[n].parent, r = R->ev[p];
        uint32_t cont = parent;
        if (R->ek[p + 1] != GE_END) {
            const int64_t c = node_get(T, p + 1, parent);
            if (c < 0) return false;
            cont = (uint32_t)c;
        }
        for (uint32_t a = R->alt_off[r]; a < R->alt_off[r + 1]; a++) {
            const uint32_t s = R->alt_start[a];
            uint32_t x = cont;
            if (R->ek[s] != GE_END) {
                const int64_t c = node_get(T, s, cont);
                if (c < 0) return false;
                x = (uint32_t)c;
            }
            if (!push_u32(&T->work, &T->n_work, &T->cap_work, x)) goto oom;
        }
    }
    return true;
oom:
    T->fail_msg = "out of memory (grammar states)";
    return false;
}

static void next_gen(gt_tables *T) {
    if (++T->gen == 0) {
        memset(T->mark, 0, T->cap_nodes * sizeof *T->mark);
        T->gen = 1;
    }
    T->n_out = 0;
}

static int32_t finish_set(gt_tables *T) {
    if (T->n_out > 1) qsort(T->out, T->n_out, sizeof *T->out, cmp_u32);
    return set_get(T, T->out, (uint32_t)T->n_out);
}

/* The set after consuming byte b from set s: an id, DEAD or FAIL. */
static int32_t advance(gt_tables *T, const gt_rules *R, int32_t s, uint8_t b) {
    gsset *S = &T->sets[s];
    if (S->trans && S->trans[b] != UNKNOWN) return S->trans[b];
    next_gen(T);
    for (uint32_t i = 0; i < T->sets[s].n; i++) {
        const uint32_t n = T->pool[T->sets[s].off + i];
        if (n == 0) continue;
        const uint32_t p = T->nodes[n].pos;
        if (!gt_set_has(R->sets[R->ev[p]], b)) continue;
        uint32_t nx = T->nodes[n].parent;
        if (R->ek[p + 1] != GE_END) {
            const int64_t c = node_get(T, p + 1, nx);
            if (c < 0) return FAIL;
            nx = (uint32_t)c;
        }
        if (!expand(T, R, nx)) return FAIL;
    }
    const int32_t r = finish_set(T);
    if (r == FAIL) return FAIL;
    S = &T->sets[s];
    if (!S->trans) {
        S->trans = malloc(256 * sizeof *S->trans);
        if (!S->trans) return r; /* uncached, still right */
        for (int i = 0; i < 256; i++) S->trans[i] = UNKNOWN;
    }
    S->trans[b] = r;
    return r;
}

/* ---------------------------------------------------------------------------------------------- */
/* The vocabulary */

typedef struct vtok {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} vtok;

static int cmp_vtok(const void *a, const void *b) {
    const vtok *x = a, *y = b;
    const uint32_t l = x->len < y->len ? x->len : y->len;
    const int c = memcmp(x->p, y->p, l);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id ? 1 : 0);
}

static void vocab_free(gt_vocab *v) {
    if (!v) return;
    free(v->ids);
    free(v->off);
    free(v->len);
    free(v->lcp);
    free(v->bytes);
    free(v->sorted_of);
    free(v->eog);
    free(v->tbyte);
    free(v->tdepth);
    free(v->tskip);
    free(v->ttok);
    free(v->tend);
    free(v);
}

static geist_status vocab_build(const gt_tokenizer *t, int32_t n_vocab, gt_vocab **out, gt_err *err) {
    gt_vocab *v = calloc(1, sizeof *v);
    const int32_t nt = gt_tokenizer_n_vocab(t) < n_vocab ? gt_tokenizer_n_vocab(t) : n_vocab;
    if (!v) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar vocabulary)");
    v->n_vocab = n_vocab;
    size_t total = 0;
    for (int32_t id = 0; id < nt; id++) {
        const size_t l = gt_tokenizer_piece(t, id, false, false, NULL, 0);
        if (l <= GT_GRAMMAR_MAX_TOKEN) total += l;
    }
    v->bytes = malloc(total ? total : 1);
    v->ids = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *v->ids);
    v->off = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *v->off);
    v->len = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *v->len);
    v->lcp = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *v->lcp);
    v->sorted_of = malloc((size_t)(n_vocab > 0 ? n_vocab : 1) * sizeof *v->sorted_of);
    v->eog = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *v->eog);
    vtok *tk = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *tk);
    if (!v->bytes || !v->ids || !v->off || !v->len || !v->lcp || !v->sorted_of || !v->eog || !tk) {
        free(tk);
        vocab_free(v);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar vocabulary)");
    }
    size_t at = 0;
    int32_t n = 0;
    for (int32_t id = 0; id < n_vocab; id++) v->sorted_of[id] = -1;
    for (int32_t id = 0; id < nt; id++) {
        if (gt_tokenizer_is_eog(t, id)) {
            v->eog[v->n_eog++] = id;
            continue;
        }
        const uint32_t attr = gt_tokenizer_attr(t, id);
        if (!(attr & (GT_ATTR_NORMAL | GT_ATTR_BYTE | GT_ATTR_USER_DEFINED))) continue;
        const size_t l = gt_tokenizer_piece(t, id, false, false, NULL, 0);
        if (l == 0 || l > GT_GRAMMAR_MAX_TOKEN) continue;
        gt_tokenizer_piece(t, id, false, false, v->bytes + at, l);
        tk[n++] = (vtok){v->bytes + at, (uint32_t)l, id};
        at += l;
    }
    qsort(tk, (size_t)n, sizeof *tk, cmp_vtok);
    for (int32_t i = 0; i < n; i++) {
        v->ids[i] = tk[i].id;
        v->off[i] = (uint32_t)(tk[i].p - v->bytes);
        v->len[i] = tk[i].len;
        if (tk[i].len > v->max_len) v->max_len = tk[i].len;
        uint32_t c = 0;
        if (i > 0) {
            const uint32_t l = tk[i].len < tk[i - 1].len ? tk[i].len : tk[i - 1].len;
            while (c < l && tk[i].p[c] == tk[i - 1].p[c]) c++;
        }
        v->lcp[i] = (uint16_t)c;
        v->sorted_of[tk[i].id] = i;
    }
    v->n_tok = n;
    free(tk);
    /* the trie in preorder: token i adds the nodes for its bytes past the common prefix */
    size_t nn = 0;
    for (int32_t i = 0; i < n; i++) nn += v->len[i] - (i > 0 ? v->lcp[i] : 0);
    v->n_nodes = (uint32_t)nn;
    v->tbyte = malloc(nn + 1);
    v->tdepth = malloc((nn + 1) * sizeof *v->tdepth);
    v->tskip = malloc((nn + 1) * sizeof *v->tskip);
    v->ttok = malloc((nn + 1) * sizeof *v->ttok);
    v->tend = calloc(nn + 1, sizeof *v->tend);
    uint32_t *path = malloc(((size_t)v->max_len + 1) * sizeof *path);
    if (!v->tbyte || !v->tdepth || !v->tskip || !v->ttok || !v->tend || !path) {
        free(path);
        vocab_free(v);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar vocabulary)");
    }
    uint32_t at_n = 0, open = 0; /* path[1..open]: the nodes of the previous token */
    for (int32_t i = 0; i < n; i++) {
        const uint32_t c = i > 0 ? v->lcp[i] : 0, l = v->len[i];
        for (; open > c; open--) v->tskip[path[open]] = at_n;
        const uint8_t *tb = v->bytes + v->off[i];
        for (uint32_t d = c + 1; d <= l; d++) {
            v->tbyte[at_n] = tb[d - 1];
            v->tdepth[at_n] = (uint16_t)d;
            v->ttok[at_n] = (uint32_t)i;
            path[d] = at_n++;
        }
        open = l;
        v->tend[path[l]]++;
    }
    for (; open > 0; open--) v->tskip[path[open]] = at_n;
    v->ttok[at_n] = (uint32_t)n;
    free(path);
    *out = v;
    return GEIST_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Per-position token classes */

static void pcache_clear(pcache *c) {
    free(c->acc_bits);
    free(c->acc_ids);
    free(c->unc);
    free(c->nids);
    free(c->noff);
    if (c->nbits)
        for (uint32_t r = 0; r <= c->M; r++) free(c->nbits[r]);
    free(c->nbits);
    memset(c, 0, sizeof *c);
}

static geist_status fail_tables(gt_grammar *g, gt_err *err) {
    return gt_fail(err, GEIST_ERR_CAPACITY, "%s", g->T.fail_msg ? g->T.fail_msg : "grammar: state error");
}

static const uint32_t no_follow[8] = {0};

/* A chain context's walk: what the stacks of set s say about a token ending there, given the
 * chain entry at depth L0 (from the bottom of the key stack) above node P: the repetitions the
 * token needs (1..M), or 0 when only the whole stack can tell (uncertain). A stack still in the
 * chain at depth L0 needs M - m + 1 (the repetitions begun); one inside the last repetition (x
 * called on P itself) needs M; the stack P itself (the chain left after the token's last byte)
 * needs one less than the stacks beside it that start the next repetition, or M when there are
 * none (the last repetition ended). x is prefix-free (chains_build), so every stack of a set has
 * begun the same number of repetitions. */
static int32_t chain_need(gt_grammar *g, int32_t s, uint32_t L0, uint32_t P, uint32_t top, uint32_t M) {
    gt_tables *T = &g->T;
    if ((uint32_t)s < g->memo_cap && g->memo_s[s] == g->memo_gen) return g->memo_v[s];
    int32_t need = 0;
    bool popped = false, bad = false;
    uint32_t lo = UINT32_MAX, hi = 0;
    for (uint32_t i = 0; i < T->sets[s].n && !bad; i++) {
        uint32_t x = T->pool[T->sets[s].off + i];
        if (T->nodes[x].depth < L0) {
            if (x == P) popped = true;
            else bad = true;
            continue;
        }
        while (T->nodes[x].depth > L0) x = T->nodes[x].parent;
        if (T->nodes[x].parent != P) {
            bad = true;
            continue;
        }
        const uint32_t pos = T->nodes[x].pos;
        uint32_t nd = M;
        if (g->ch_m[pos]) {
            if (g->ch_top[pos] != top) {
                bad = true;
                continue;
            }
            nd = M - g->ch_m[pos] + 1;
        }
        if (nd < lo) lo = nd;
        if (nd > hi) hi = nd;
    }
    if (!bad) {
        if (!popped) need = lo == UINT32_MAX ? 0 : (int32_t)lo;
        else if (lo == UINT32_MAX) need = (int32_t)M;
        else if (lo == hi && lo >= 2) need = (int32_t)lo - 1;
    }
    if ((uint32_t)s >= g->memo_cap) {
        uint32_t cap = g->memo_cap ? g->memo_cap : 1024;
        while (cap <= (uint32_t)s) cap *= 2;
        int32_t *v = realloc(g->memo_v, cap * sizeof *v);
        if (v) g->memo_v = v;
        uint32_t *st = v ? realloc(g->memo_s, cap * sizeof *st) : NULL;
        if (!st) return need; /* uncached, still right */
        memset(st + g->memo_cap, 0, (cap - g->memo_cap) * sizeof *st);
        g->memo_s = st;
        g->memo_cap = cap;
    }
    g->memo_s[s] = g->memo_gen;
    g->memo_v[s] = need;
    return need;
}

/* Classifies every token for the stack whose top positions are key[0..klen) (top first), walking
 * the vocabulary's trie (a dead prefix skips its subtree): accepted without popping the deepest
 * key entry, or uncertain (that entry may be popped inside the token and the next byte may follow
 * its rule); whole: the key is the whole stack (popping it ends the grammar, so nothing is
 * uncertain). ci >= 0: key[ci] is the top of a counted-repetition chain (a chain context): the
 * accepted tokens are kept by the repetitions they need (chain_need), every other token that may
 * survive is uncertain. */
static geist_status pcache_compute(gt_grammar *g, const uint32_t *key, uint32_t klen, bool whole,
                                   int32_t ci, pcache *c, gt_err *err) {
    const gt_rules *R = g->R;
    const gt_vocab *V = g->V;
    gt_tables *T = &g->T;
    const uint32_t nw = (uint32_t)((V->n_vocab + 31) / 32);
    memset(c, 0, sizeof *c);
    uint32_t one = 0, P = 0;
    for (uint32_t k = klen; k-- > 0;) {
        if ((int32_t)k == ci) P = one;
        const int64_t nd = node_get(T, key[k], one);
        if (nd < 0) return fail_tables(g, err);
        one = (uint32_t)nd;
    }
    const int32_t s0 = set_get(T, &one, 1);
    if (s0 < 0) return fail_tables(g, err);
    const bool chain = ci >= 0;
    const uint32_t L0 = chain ? klen - (uint32_t)ci : 0, top = chain ? key[ci] : 0;
    const uint32_t M = chain ? g->ch_m[top] : 0;
    if (chain && ++g->memo_gen == 0) {
        if (g->memo_s) memset(g->memo_s, 0, g->memo_cap * sizeof *g->memo_s);
        g->memo_gen = 1;
    }
    const uint32_t *follow = whole ? no_follow : R->follow[R->pos_rule[key[klen - 1]]];
    uint32_t *bits = g->scratch_bits;
    if (!chain) memset(bits, 0, nw * sizeof *bits);
    int32_t *st = g->scratch_states;
    uint8_t *unc = g->scratch_unc;
    size_t n_unc = 0, cap_unc = 0, n_nid = 0, cap_nid = 0;
    uint32_t *nid = NULL; /* chain: pairs (need, id) */
    uint32_t n_acc = 0;
    geist_status res = GEIST_OK;
    st[0] = s0;
    unc[0] = 0;
    for (uint32_t n = 0; n < V->n_nodes;) {
        const uint32_t d = V->tdepth[n];
        const uint8_t b = V->tbyte[n];
        const int32_t cur = st[d - 1];
        unc[d] = unc[d - 1] || (T->sets[cur].accepting && gt_set_has(follow, b));
        const int32_t nx = advance(T, R, cur, b);
        if (nx == FAIL) {
            res = fail_tables(g, err);
            goto out;
        }
        if (nx == DEAD) {
            if (unc[d]) /* every token under this prefix dies the same way */
                for (uint32_t k = V->ttok[n]; k < V->ttok[V->tskip[n]]; k++)
                    if (!push_u32((uint32_t **)&c->unc, &n_unc, &cap_unc, (uint32_t)V->ids[k])) goto oom;
            n = V->tskip[n];
            continue;
        }
        st[d] = nx;
        g->walk_work++;
        for (uint32_t k = V->ttok[n]; k < V->ttok[n] + V->tend[n]; k++) {
            const int32_t id = V->ids[k];
            if (!chain) {
                bits[id >> 5] |= 1u << (id & 31);
                n_acc++;
                continue;
            }
            const int32_t need = unc[d] ? 0 : chain_need(g, nx, L0, P, top, M);
            if (need == 0) {
                if (!push_u32((uint32_t **)&c->unc, &n_unc, &cap_unc, (uint32_t)id)) goto oom;
            } else if (!push_u32(&nid, &n_nid, &cap_nid, (uint32_t)need) ||
                       !push_u32(&nid, &n_nid, &cap_nid, (uint32_t)id)) {
                goto oom;
            }
        }
        n++;
    }
    c->n_unc = (uint32_t)n_unc;
    if (chain) {
        const uint32_t na = (uint32_t)(n_nid / 2);
        c->chain = true;
        c->M = M;
        c->n_acc = na;
        c->noff = calloc(M + 2, sizeof *c->noff);
        c->nids = malloc((na ? na : 1) * sizeof *c->nids);
        c->nbits = calloc(M + 1, sizeof *c->nbits);
        if (!c->noff || !c->nids || !c->nbits) goto oom;
        for (uint32_t k = 0; k < na; k++) c->noff[nid[2 * k] + 1]++;
        for (uint32_t k = 1; k <= M + 1; k++) c->noff[k] += c->noff[k - 1];
        uint32_t *fill = malloc((M + 1) * sizeof *fill);
        if (!fill) goto oom;
        memcpy(fill, c->noff, (M + 1) * sizeof *fill);
        for (uint32_t k = 0; k < na; k++) c->nids[fill[nid[2 * k]]++] = (int32_t)nid[2 * k + 1];
        free(fill);
        free(nid);
        c->ready = true;
        return GEIST_OK;
    }
    c->n_acc = n_acc;
    if ((uint64_t)n_acc * 32 > (uint64_t)V->n_vocab) {
        c->acc_bits = malloc(nw * sizeof *bits);
        if (c->acc_bits) memcpy(c->acc_bits, bits, nw * sizeof *bits);
    } else {
        c->acc_ids = malloc((n_acc ? n_acc : 1) * sizeof *c->acc_ids);
        if (c->acc_ids) {
            uint32_t k = 0;
            for (uint32_t w = 0; w < nw; w++)
                for (uint32_t x = bits[w]; x; x &= x - 1) c->acc_ids[k++] = (int32_t)(w * 32 + (uint32_t)__builtin_ctz(x));
        }
    }
    if (!c->acc_bits && !c->acc_ids) goto oom;
    c->ready = true;
    return GEIST_OK;
oom:
    res = gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar cache)");
out:
    free(nid);
    pcache_clear(c);
    return res;
}

static size_t pcache_bytes(const pcache *c, uint32_t nw) {
    if (c->chain) return c->n_acc * 4u + (c->M + 2u) * 4u + (c->M + 1u) * sizeof(void *) + c->n_unc * 4u + sizeof *c;
    return (c->acc_bits ? nw * 4u : c->n_acc * 4u) + c->n_unc * 4u + sizeof *c;
}

/* The first bytes of element (k, v) into f (rules: through their alternatives' first elements;
 * rules are never nullable here, prefix_free checks that). */
static void first_bytes(const gt_rules *R, uint8_t k, uint32_t v, uint32_t *f, uint32_t depth, uint32_t *work) {
    if (k == GE_BYTES) {
        for (int w = 0; w < 8; w++) f[w] |= R->sets[v][w];
        return;
    }
    if (depth > 16 || *work == 0) {
        memset(f, 0xFF, 8 * sizeof *f);
        return;
    }
    for (uint32_t a = R->alt_off[v]; a < R->alt_off[v + 1] && *work; a++, (*work)--) {
        const uint32_t p = R->alt_start[a];
        if (R->ek[p] != GE_END) first_bytes(R, R->ek[p], R->ev[p], f, depth + 1, work);
    }
}

/* A sufficient test that element (k, v)'s language is prefix-free (no word a proper prefix of
 * another, each word parsed one way): a byte set, or a rule (not recursive within 16 levels)
 * whose alternatives are non-empty sequences of such elements with pairwise disjoint first
 * bytes (work bounds the search: false when it runs out). Then a byte string splits into repetitions of it in at most one way. */
static bool prefix_free(const gt_rules *R, uint8_t k, uint32_t v, uint32_t depth, uint32_t *work) {
    if (k == GE_BYTES) return true;
    if (depth > 16 || *work == 0) return false;
    uint32_t seen[8] = {0};
    for (uint32_t a = R->alt_off[v]; a < R->alt_off[v + 1]; a++) {
        uint32_t p = R->alt_start[a];
        if (R->ek[p] == GE_END) return false;
        uint32_t f[8] = {0};
        if (--*work == 0) return false;
        first_bytes(R, R->ek[p], R->ev[p], f, depth + 1, work);
        for (int w = 0; w < 8; w++) {
            if (seen[w] & f[w]) return false;
            seen[w] |= f[w];
        }
        for (; R->ek[p] != GE_END; p++)
            if (!prefix_free(R, R->ek[p], R->ev[p], depth + 1, work)) return false;
    }
    return *work > 0;
}

/* Counted repetitions: rules R with two alternatives, the empty one and [x R'] or [x] (the chain's
 * end, m = 1), where R' has the same shape and the same x: m(R) = m(R') + 1. The chain entry of
 * a stack inside R's repetition is the position after x (x a rule) or x itself (x a byte set);
 * contexts that differ only in it share one walk from the chain's top (pcache_compute). */
static bool chains_build(gt_grammar *g) {
    const gt_rules *R = g->R;
    const uint32_t nr = R->n_rules, NONE = UINT32_MAX;
    g->ch_m = calloc(R->n_pos, sizeof *g->ch_m);
    g->ch_top = calloc(R->n_pos, sizeof *g->ch_top);
    uint32_t *xp = malloc((size_t)nr * sizeof *xp), *nxt = malloc((size_t)nr * sizeof *nxt);
    uint32_t *m = calloc(nr, sizeof *m), *pred = malloc((size_t)nr * sizeof *pred);
    uint32_t *topr = malloc((size_t)nr * sizeof *topr);
    bool ok = g->ch_m && g->ch_top && xp && nxt && m && pred && topr;
    uint32_t work = 1u << 20; /* bounds prefix_free over all rules (a hostile grammar: no chains) */
    for (uint32_t r = 0; ok && r < nr; r++) {
        xp[r] = NONE;
        nxt[r] = NONE;
        pred[r] = NONE;
        if (R->alt_off[r + 1] - R->alt_off[r] != 2) continue;
        uint32_t a0 = R->alt_start[R->alt_off[r]], a1 = R->alt_start[R->alt_off[r] + 1];
        if (R->ek[a0] == GE_END) { const uint32_t t = a0; a0 = a1; a1 = t; }
        if (R->ek[a1] != GE_END || R->ek[a0] == GE_END) continue;
        if (!prefix_free(R, R->ek[a0], R->ev[a0], 0, &work)) continue;
        if (R->ek[a0 + 1] == GE_END) { xp[r] = a0; continue; } /* [x]: a chain's end */
        if (R->ek[a0 + 1] != GE_RULE || R->ek[a0 + 2] != GE_END) continue;
        xp[r] = a0;
        nxt[r] = R->ev[a0 + 1];
    }
    /* m along nxt (chains are acyclic: a cycle is a star, not counted) */
    for (uint32_t r = 0; ok && r < nr; r++) {
        if (xp[r] == NONE || m[r]) continue;
        uint32_t x = r, len = 0;
        while (len <= GT_GRAMMAR_MAX_REPEAT + 1 && xp[x] != NONE && nxt[x] != NONE && m[x] == 0) {
            const uint32_t y = nxt[x];
            if (y >= nr || xp[y] == NONE || R->ek[xp[y]] != R->ek[xp[x]] || R->ev[xp[y]] != R->ev[xp[x]]) break;
            x = y;
            len++;
        }
        uint32_t base;
        if (m[x]) base = m[x];
        else if (xp[x] != NONE && nxt[x] == NONE) base = 1;
        else continue; /* not a chain */
        m[x] = base;
        for (uint32_t y = r, k = len; y != x; y = nxt[y], k--) m[y] = base + k;
    }
    /* a link's only reference must be its predecessor's tail (then every link has the same
     * follow set, which the shared walk's uncertain tokens depend on); the top may be used
     * anywhere */
    uint32_t *refs = ok ? calloc(nr, sizeof *refs) : NULL;
    ok = ok && refs;
    for (uint32_t p = 0; ok && p < R->n_pos; p++)
        if (R->ek[p] == GE_RULE && R->ev[p] < nr) refs[R->ev[p]]++;
    for (uint32_t r = 0; ok && r < nr; r++)
        if (m[r] > 1) {
            const uint32_t y = nxt[r];
            pred[y] = pred[y] == NONE && refs[y] == 1 ? r : NONE - 1; /* NONE - 1: no single one */
        }
    free(refs);
    for (uint32_t r = 0; ok && r < nr; r++) {
        if (!m[r]) continue;
        uint32_t t = r;
        for (uint32_t k = 0; k <= GT_GRAMMAR_MAX_REPEAT + 1 && pred[t] < NONE - 1; k++) t = pred[t];
        topr[r] = t;
    }
    for (uint32_t r = 0; ok && r < nr; r++) {
        if (!m[r]) continue;
        const bool xrule = R->ek[xp[r]] == GE_RULE;
        if (xrule && m[r] < 2) continue;
        const uint32_t slot = xrule ? 1 : 0;
        g->ch_m[xp[r] + slot] = m[r];
        g->ch_top[xp[r] + slot] = xp[topr[r]] + slot;
    }
    free(xp);
    free(nxt);
    free(m);
    free(pred);
    free(topr);
    return ok;
}

/* ---------------------------------------------------------------------------------------------- */
/* Grammar objects */

static void grammar_free(gt_grammar *g) {
    if (!g) return;
    if (g->pe)
        for (uint32_t i = 0; i < g->pe_cap; i++) pcache_clear(&g->pe[i].c);
    free(g->pe);
    tables_free(&g->T);
    gt_rules_free(g->R);
    free(g->text);
    free(g->scratch_bits);
    free(g->scratch_states);
    free(g->scratch_unc);
    free(g->ch_m);
    free(g->ch_top);
    free(g->memo_v);
    free(g->memo_s);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

void gt_grammar_retain(gt_grammar *g) { atomic_fetch_add(&g->refs, 1); }
void gt_grammar_release(gt_grammar *g) {
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) grammar_free(g);
}
int32_t gt_grammar_n_vocab(const gt_grammar *g) { return g->V->n_vocab; }
uint32_t gt_grammar_max_token_bytes(const gt_grammar *g) { return g->V->max_len ? g->V->max_len : 1; }

/* Compiles text of the given kind to rules (no vocabulary). */
static geist_status compile_rules(const char *text, size_t len, int32_t kind, gt_rules **out, gt_err *err) {
    if (!text) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: text is NULL");
    if (kind == GEIST_GRAMMAR_GBNF) return gt_gbnf_compile(text, len, out, err);
    if (kind == GEIST_GRAMMAR_JSON_SCHEMA) {
        gt_text t = {0};
        geist_status st = gt_json_schema_to_gbnf(text, len, "root", &t, err);
        if (st == GEIST_OK) st = gt_gbnf_compile(t.p ? t.p : "", t.n, out, err);
        gt_text_free(&t);
        return st;
    }
    return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                   "grammar: unknown kind %d (1 = GBNF, 2 = JSON Schema)", kind);
}

geist_status gt_grammar_check(const char *text, size_t len, int32_t kind, gt_err *err) {
    gt_rules *r = NULL;
    geist_status st = compile_rules(text, len, kind, &r, err);
    gt_rules_free(r);
    return st;
}

static uint64_t text_hash(const char *s, size_t n, int32_t kind) {
    uint64_t h = UINT64_C(1469598103934665603) ^ (uint64_t)kind;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * UINT64_C(1099511628211);
    return h;
}

geist_status gt_grammar_cache_create(const gt_tokenizer *tok, int32_t n_vocab, gt_grammar_cache **out,
                                     gt_err *err) {
    *out = NULL;
    gt_grammar_cache *c = calloc(1, sizeof *c);
    if (!c) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar cache)");
    pthread_mutex_init(&c->lock, NULL);
    c->tok = tok;
    c->n_vocab = n_vocab;
    *out = c;
    return GEIST_OK;
}

void gt_grammar_cache_free(gt_grammar_cache *c) {
    if (!c) return;
    for (gt_grammar *g = c->list, *nx; g; g = nx) {
        nx = g->next;
        gt_grammar_release(g);
    }
    vocab_free(c->V);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Builds the token classes of the contexts reachable from the start at compile time, breadth
 * first over the stacks the grammar's bytes lead to (a stack's successor does not depend on which
 * byte of its top set is read), so that masks rarely walk the vocabulary: bounded by
 * GT_PRECOMPUTE_STACKS stacks and GT_PRECOMPUTE_WALKS vocabulary walks' worth of trie nodes (a
 * recursive grammar has unboundedly many contexts); the rest are built on first use. A failure
 * here only leaves more for first use. */
static void stack_key(const gt_grammar *g, uint32_t node, uint32_t *key, uint32_t *klen, bool *whole,
                      int32_t *ci, uint32_t *m);
static geist_status ensure_pcache(gt_grammar *g, const uint32_t *key, uint32_t klen, bool whole,
                                  int32_t ci, pcache **out, pcache *tmp, gt_err *err);
#define GT_PRECOMPUTE_STACKS 4096
#define GT_PRECOMPUTE_WALKS 6
static void precompute(gt_grammar *g) {
    gt_tables *T = &g->T;
    const gt_rules *R = g->R;
    uint32_t *q = NULL, *tmp = NULL;
    size_t nq = 0, cq = 0, nt = 0, ct = 0;
    uint8_t *seen = NULL;
    uint32_t n_seen = 0;
    next_gen(T);
    for (uint32_t a = R->alt_off[R->root]; a < R->alt_off[R->root + 1]; a++) {
        const uint32_t s = R->alt_start[a];
        uint32_t x = 0;
        if (R->ek[s] != GE_END) {
            const int64_t c = node_get(T, s, 0);
            if (c < 0) goto done;
            x = (uint32_t)c;
        }
        if (!expand(T, R, x)) goto done;
    }
    for (size_t k = 0; k < T->n_out; k++)
        if (!push_u32(&tmp, &nt, &ct, T->out[k])) goto done;
    for (size_t head = 0;; head++) {
        for (size_t k = 0; k < nt; k++) { /* enqueue the new stacks */
            const uint32_t x = tmp[k];
            if (x == 0) continue;
            if (x >= n_seen) {
                const uint32_t cap = T->cap_nodes;
                uint8_t *ns = realloc(seen, cap);
                if (!ns) goto done;
                memset(ns + n_seen, 0, cap - n_seen);
                seen = ns;
                n_seen = cap;
            }
            if (seen[x] || nq >= GT_PRECOMPUTE_STACKS) continue;
            seen[x] = 1;
            if (!push_u32(&q, &nq, &cq, x)) goto done;
        }
        nt = 0;
        if (head >= nq) break;
        const uint32_t n = q[head], p = T->nodes[n].pos;
        uint32_t nx = T->nodes[n].parent;
        if (R->ek[p + 1] != GE_END) {
            const int64_t c = node_get(T, p + 1, nx);
            if (c < 0) goto done;
            nx = (uint32_t)c;
        }
        next_gen(T);
        if (!expand(T, R, nx)) goto done;
        for (size_t k = 0; k < T->n_out; k++)
            if (!push_u32(&tmp, &nt, &ct, T->out[k])) goto done;
    }
    const uint64_t budget = (uint64_t)GT_PRECOMPUTE_WALKS * g->V->n_nodes;
    for (size_t k = 0; k < nq && g->walk_work < budget; k++) {
        uint32_t key[GT_CTX_DEPTH], klen = 0, cm = 0;
        bool whole = false;
        int32_t ci = -1;
        stack_key(g, q[k], key, &klen, &whole, &ci, &cm);
        pcache t = {0}, *c = NULL;
        gt_err e = {0};
        if (ensure_pcache(g, key, klen, whole, ci, &c, &t, &e) != GEIST_OK) break;
        if (!c->stored) {
            pcache_clear(&t);
            break;
        }
    }
done:
    free(q);
    free(tmp);
    free(seen);
}

static geist_status grammar_new(gt_grammar_cache *c, const char *text, size_t len, int32_t kind,
                                uint64_t h, gt_grammar **out, gt_err *err) {
    gt_rules *R = NULL;
    geist_status st = compile_rules(text, len, kind, &R, err);
    if (st != GEIST_OK) return st;
    gt_grammar *g = calloc(1, sizeof *g);
    if (!g) {
        gt_rules_free(R);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar)");
    }
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->lock, NULL);
    g->R = R;
    g->V = c->V;
    g->kind = kind;
    g->hash = h;
    g->len = len;
    g->text = malloc(len + 1);
    g->pe_cap = 64;
    g->pe = calloc(g->pe_cap, sizeof *g->pe);
    g->scratch_bits = malloc((size_t)((c->V->n_vocab + 31) / 32 + 1) * sizeof(uint32_t));
    g->scratch_states = malloc(((size_t)c->V->max_len + 2) * sizeof(int32_t));
    g->scratch_unc = malloc((size_t)c->V->max_len + 2);
    if (!g->text || !g->pe || !g->scratch_bits || !g->scratch_states || !g->scratch_unc ||
        !tables_init(&g->T) || !chains_build(g)) {
        grammar_free(g);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar)");
    }
    memcpy(g->text, text, len);
    g->text[len] = '\0';
    *out = g; /* its token classes: at the first matcher (the runtime's thread), or prepare */
    return GEIST_OK;
}

/* precompute() once, under the grammar's lock (held) */
static void prepare_locked(gt_grammar *g) {
    if (g->prepared) return;
    g->prepared = true;
    precompute(g);
}

void gt_grammar_prepare(gt_grammar *g) {
    if (!g) return;
    pthread_mutex_lock(&g->lock);
    prepare_locked(g);
    pthread_mutex_unlock(&g->lock);
}

geist_status gt_grammar_get(gt_grammar_cache *c, const char *text, size_t len, int32_t kind,
                            gt_grammar **out, gt_err *err) {
    *out = NULL;
    if (!c || !c->tok)
        return gt_fail(err, GEIST_ERR_STATE, "grammar: the model has no tokenizer");
    if (!text) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: text is NULL");
    const uint64_t h = text_hash(text, len, kind);
    pthread_mutex_lock(&c->lock);
    geist_status st = GEIST_OK;
    if (!c->V) st = vocab_build(c->tok, c->n_vocab, &c->V, err);
    if (st != GEIST_OK) {
        pthread_mutex_unlock(&c->lock);
        return st;
    }
    for (gt_grammar *g = c->list; g; g = g->next)
        if (g->hash == h && g->kind == kind && g->len == len && memcmp(g->text, text, len) == 0) {
            gt_grammar_retain(g);
            *out = g;
            pthread_mutex_unlock(&c->lock);
            return GEIST_OK;
        }
    gt_grammar *g = NULL;
    st = grammar_new(c, text, len, kind, h, &g, err);
    if (st == GEIST_OK) {
        if (c->n >= GT_GRAMMAR_CACHE_GRAMMARS) { /* forget the oldest grammar (requests keep theirs) */
            gt_grammar **pp = &c->list;
            while ((*pp)->next) pp = &(*pp)->next;
            gt_grammar_release(*pp);
            *pp = NULL;
            c->n--;
        }
        g->next = c->list;
        c->list = g;
        c->n++;
        gt_grammar_retain(g);
        *out = g;
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* ---------------------------------------------------------------------------------------------- */
/* Matchers */

/* Interns the matcher's stacks into the grammar's tables (under its lock). */
static int32_t import_state(gt_matcher *m, gt_err *err) {
    gt_grammar *g = m->g;
    gt_tables *T = &g->T;
    if ((T->n_nodes > NODES_SOFT || T->n_sets > SETS_SOFT) && !tables_reset(T))
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar states)"), FAIL;
    next_gen(T);
    size_t at = 0;
    for (uint32_t s = 0; s < m->n_stacks; s++) {
        const uint32_t depth = m->stk[at++];
        uint32_t n = 0;
        for (uint32_t k = 0; k < depth; k++) {
            const int64_t x = node_get(T, m->stk[at++], n);
            if (x < 0) return fail_tables(g, err), FAIL;
            n = (uint32_t)x;
        }
        if (!push_u32(&T->out, &T->n_out, &T->cap_out, n))
            return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar states)"), FAIL;
    }
    const int32_t s = finish_set(T);
    if (s == FAIL) return fail_tables(g, err), FAIL;
    return s;
}

static geist_status export_state(gt_matcher *m, int32_t s, gt_err *err) {
    gt_tables *T = &m->g->T;
    const gt_rules *R = m->g->R;
    m->n_stk = 0;
    m->n_stacks = 0;
    m->can_end = false;
    m->min_bytes = GT_MIN_INF;
    if (s < 0) return GEIST_OK;
    for (uint32_t i = 0; i < T->sets[s].n; i++) {
        const uint32_t n = T->pool[T->sets[s].off + i];
        if (n == 0) {
            m->can_end = true;
            m->min_bytes = 0;
            continue;
        }
        const uint32_t depth = T->nodes[n].depth;
        const size_t need = m->n_stk + depth + 1;
        if (need > m->cap_stk) {
            size_t c = m->cap_stk ? m->cap_stk : 64;
            while (c < need) c *= 2;
            uint32_t *q = realloc(m->stk, c * sizeof *q);
            if (!q) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar matcher)");
            m->stk = q;
            m->cap_stk = c;
        }
        m->stk[m->n_stk] = depth;
        uint32_t mb = 0;
        uint32_t x = n;
        for (uint32_t k = depth; k > 0; k--) { /* top first, written from the end */
            m->stk[m->n_stk + k] = T->nodes[x].pos;
            mb = mb + R->suffix_min[T->nodes[x].pos] >= GT_MIN_INF ? GT_MIN_INF : mb + R->suffix_min[T->nodes[x].pos];
            x = T->nodes[x].parent;
        }
        if (mb < m->min_bytes) m->min_bytes = mb;
        m->n_stk = need;
        m->n_stacks++;
    }
    return GEIST_OK;
}

geist_status gt_matcher_create(gt_grammar *g, gt_matcher **out, gt_err *err) {
    *out = NULL;
    gt_matcher *m = calloc(1, sizeof *m);
    if (!m) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar matcher)");
    gt_grammar_retain(g);
    m->g = g;
    const gt_rules *R = g->R;
    pthread_mutex_lock(&g->lock);
    prepare_locked(g);
    gt_tables *T = &g->T;
    geist_status st = GEIST_OK;
    if ((T->n_nodes > NODES_SOFT || T->n_sets > SETS_SOFT) && !tables_reset(T))
        st = gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar states)");
    if (st == GEIST_OK) {
        next_gen(T);
        for (uint32_t a = R->alt_off[R->root]; a < R->alt_off[R->root + 1] && st == GEIST_OK; a++) {
            const uint32_t s = R->alt_start[a];
            uint32_t x = 0;
            if (R->ek[s] != GE_END) {
                const int64_t c = node_get(T, s, 0);
                if (c < 0) { st = fail_tables(g, err); break; }
                x = (uint32_t)c;
            }
            if (!expand(T, R, x)) st = fail_tables(g, err);
        }
    }
    if (st == GEIST_OK) {
        const int32_t s = finish_set(T);
        st = s == FAIL ? fail_tables(g, err) : export_state(m, s, err);
    }
    pthread_mutex_unlock(&g->lock);
    if (st != GEIST_OK) {
        gt_matcher_free(m);
        return st;
    }
    *out = m;
    return GEIST_OK;
}

void gt_matcher_free(gt_matcher *m) {
    if (!m) return;
    gt_grammar_release(m->g);
    free(m->stk);
    free(m);
}

bool gt_matcher_can_end(const gt_matcher *m) { return !m->ended && m->can_end; }
bool gt_matcher_is_done(const gt_matcher *m) { return m->ended || m->n_stacks == 0; }
bool gt_matcher_is_dead(const gt_matcher *m) { return !m->ended && m->n_stacks == 0 && !m->can_end; }
uint32_t gt_grammar_max_token_bytes_of(const gt_matcher *m) { return gt_grammar_max_token_bytes(m->g); }
uint32_t gt_matcher_min_bytes(const gt_matcher *m) { return m->ended ? 0 : m->min_bytes; }

static uint32_t key_hash(const uint32_t *key, uint32_t klen, bool whole, bool chain) {
    uint32_t h = klen * 4u + whole * 2u + chain;
    for (uint32_t i = 0; i < klen; i++) h = hash2(h, key[i]);
    return h;
}

static pentry *pe_find(gt_grammar *g, const uint32_t *key, uint32_t klen, bool whole, bool chain) {
    for (uint32_t i = key_hash(key, klen, whole, chain) & (g->pe_cap - 1);; i = (i + 1) & (g->pe_cap - 1)) {
        pentry *e = &g->pe[i];
        if (e->klen == 0) return e;
        if (e->klen == klen && e->whole == whole && e->chain == chain &&
            memcmp(e->key, key, klen * sizeof *key) == 0)
            return e;
    }
}

static bool pe_grow(gt_grammar *g) {
    const uint32_t cap = g->pe_cap * 2;
    pentry *ne = calloc(cap, sizeof *ne);
    if (!ne) return false;
    pentry *old = g->pe;
    const uint32_t ocap = g->pe_cap;
    g->pe = ne;
    g->pe_cap = cap;
    for (uint32_t i = 0; i < ocap; i++)
        if (old[i].klen) *pe_find(g, old[i].key, old[i].klen, old[i].whole, old[i].chain) = old[i];
    free(old);
    return true;
}

/* A stack's context: its top positions (top first), whether they are the whole stack, and for a
 * counted repetition (its topmost chain entry at *ci, else -1) the stack's own chain index in *m
 * and every chain entry replaced by its chain's top. */
static void stack_key(const gt_grammar *g, uint32_t node, uint32_t *key, uint32_t *klen, bool *whole,
                      int32_t *ci, uint32_t *m) {
    const gt_tables *T = &g->T;
    uint32_t n = 0;
    for (uint32_t x = node; x != 0 && n < GT_CTX_DEPTH; x = T->nodes[x].parent) key[n++] = T->nodes[x].pos;
    *klen = n;
    *whole = T->nodes[node].depth <= GT_CTX_DEPTH;
    *ci = -1;
    *m = 0;
    for (uint32_t k = 0; k < n; k++)
        if (g->ch_m[key[k]]) {
            if (*ci < 0) {
                *ci = (int32_t)k;
                *m = g->ch_m[key[k]];
            }
            /* a deeper chain entry only matters to tokens that leave the topmost chain's frame:
             * those are uncertain (checked against the whole stack), and a longer chain below
             * accepts more, so a token dead with the top is dead with any count */
            key[k] = g->ch_top[key[k]];
        }
}

/* The token classes for a context key: cached in the grammar while the budget lasts, else
 * computed into tmp (the caller clears it). */
static geist_status ensure_pcache(gt_grammar *g, const uint32_t *key, uint32_t klen, bool whole,
                                  int32_t ci, pcache **out, pcache *tmp, gt_err *err) {
    const bool chain = ci >= 0;
    pentry *e = pe_find(g, key, klen, whole, chain);
    if (e->klen) {
        *out = &e->c;
        return GEIST_OK;
    }
    const uint32_t nw = (uint32_t)((g->V->n_vocab + 31) / 32);
    bool store = g->pc_bytes < GT_GRAMMAR_CACHE_BYTES;
    if (store && (g->pe_n + 1) * 2 > g->pe_cap) {
        if (pe_grow(g)) e = pe_find(g, key, klen, whole, chain);
        else store = false;
    }
    pcache *dst = store ? &e->c : tmp;
    geist_status st = pcache_compute(g, key, klen, whole, ci, dst, err);
    if (st != GEIST_OK) return st;
    if (store) {
        memcpy(e->key, key, klen * sizeof *key);
        e->klen = (uint8_t)klen;
        e->whole = whole;
        e->chain = chain;
        g->pe_n++;
        g->pc_bytes += pcache_bytes(dst, nw);
    }
    dst->stored = store;
    *out = dst;
    return GEIST_OK;
}

/* ORs a chain context's accepted tokens for chain index r into bits (a cached bitset per r while
 * the budget lasts; few tokens are ORed one by one). */
static void chain_or(gt_grammar *g, pcache *c, uint32_t r, uint32_t *bits, uint32_t nw) {
    if (r > c->M) r = c->M;
    const uint32_t n = c->noff[r + 1];
    if (!c->nbits[r] && c->stored && (uint64_t)n * 32 > (uint64_t)g->V->n_vocab &&
        g->pc_bytes < GT_GRAMMAR_CACHE_BYTES) {
        uint32_t lo = r;
        while (lo > 0 && !c->nbits[lo]) lo--;
        uint32_t *b = malloc(nw * sizeof *b);
        if (b) {
            if (c->nbits[lo]) memcpy(b, c->nbits[lo], nw * sizeof *b);
            else memset(b, 0, nw * sizeof *b);
            for (uint32_t k = c->nbits[lo] ? c->noff[lo + 1] : 0; k < n; k++)
                b[c->nids[k] >> 5] |= 1u << (c->nids[k] & 31);
            c->nbits[r] = b;
            g->pc_bytes += nw * sizeof *b;
        }
    }
    if (c->nbits[r]) {
        for (uint32_t w = 0; w < nw; w++) bits[w] |= c->nbits[r][w];
    } else {
        for (uint32_t k = 0; k < n; k++) bits[c->nids[k] >> 5] |= 1u << (c->nids[k] & 31);
    }
}

static inline bool bit(const uint32_t *bits, int32_t id) { return (bits[id >> 5] >> (id & 31)) & 1u; }

/* Runs token t's bytes from set s: true when some parse survives. */
static int token_ok(gt_grammar *g, int32_t s, int32_t id) {
    const gt_vocab *V = g->V;
    const int32_t si = V->sorted_of[id];
    if (si < 0) return 0;
    const uint8_t *b = V->bytes + V->off[si];
    for (uint32_t k = 0; k < V->len[si] && s >= 0; k++) s = advance(&g->T, g->R, s, b[k]);
    return s == FAIL ? -1 : s >= 0;
}

geist_status gt_matcher_fill_mask(gt_matcher *m, uint32_t *bits, gt_err *err) {
    gt_grammar *g = m->g;
    const gt_vocab *V = g->V;
    const uint32_t nw = (uint32_t)((V->n_vocab + 31) / 32);
    memset(bits, 0, nw * sizeof *bits);
    if (m->ended) return GEIST_OK;
    if (m->can_end)
        for (int32_t k = 0; k < V->n_eog; k++) bits[V->eog[k] >> 5] |= 1u << (V->eog[k] & 31);
    if (m->n_stacks == 0) return GEIST_OK;
    pthread_mutex_lock(&g->lock);
    geist_status st = GEIST_OK;
    const int32_t S = import_state(m, err);
    if (S == FAIL) st = err->status;
    gt_tables *T = &g->T;
    for (uint32_t i = 0; st == GEIST_OK && i < T->sets[S].n; i++) {
        const uint32_t node = T->pool[T->sets[S].off + i];
        if (node == 0) continue;
        uint32_t key[GT_CTX_DEPTH], klen = 0, cm = 0;
        bool whole = false;
        int32_t ci = -1;
        stack_key(g, node, key, &klen, &whole, &ci, &cm);
        pcache tmp = {0}, *c = NULL;
        st = ensure_pcache(g, key, klen, whole, ci, &c, &tmp, err);
        if (st != GEIST_OK) break;
        if (c->chain) {
            chain_or(g, c, cm, bits, nw);
        } else if (c->acc_bits) {
            for (uint32_t w = 0; w < nw; w++) bits[w] |= c->acc_bits[w];
        } else {
            for (uint32_t k = 0; k < c->n_acc; k++) bits[c->acc_ids[k] >> 5] |= 1u << (c->acc_ids[k] & 31);
        }
        if (c->n_unc) {
            /* the node's own stack; interning it never invalidates S (tables only grow here) */
            const int32_t one = set_get(T, &node, 1);
            if (one == FAIL) {
                st = fail_tables(g, err);
            } else {
                for (uint32_t k = 0; k < c->n_unc && st == GEIST_OK; k++) {
                    const int32_t id = c->unc[k];
                    if (bit(bits, id)) continue;
                    const int ok = token_ok(g, one, id);
                    if (ok < 0) st = fail_tables(g, err);
                    else if (ok) bits[id >> 5] |= 1u << (id & 31);
                }
            }
        }
        if (!c->stored) pcache_clear(&tmp);
    }
    pthread_mutex_unlock(&g->lock);
    return st;
}

geist_status gt_matcher_accept(gt_matcher *m, int32_t token, gt_err *err) {
    gt_grammar *g = m->g;
    const gt_vocab *V = g->V;
    if (token < 0 || token >= V->n_vocab)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: token %d out of range", token);
    if (m->ended) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: the output already ended");
    for (int32_t k = 0; k < V->n_eog; k++)
        if (V->eog[k] == token) {
            if (!m->can_end)
                return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: the output cannot end here");
            m->ended = true;
            m->n_stacks = 0;
            m->n_stk = 0;
            m->can_end = false;
            return GEIST_OK;
        }
    if (V->sorted_of[token] < 0)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: token %d is never allowed", token);
    if (m->n_stacks == 0)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: token %d is not allowed here", token);
    pthread_mutex_lock(&g->lock);
    geist_status st = GEIST_OK;
    int32_t s = import_state(m, err);
    if (s == FAIL) st = err->status;
    if (st == GEIST_OK) {
        const int32_t si = V->sorted_of[token];
        const uint8_t *b = V->bytes + V->off[si];
        for (uint32_t k = 0; k < V->len[si] && s >= 0; k++) s = advance(&g->T, g->R, s, b[k]);
        if (s == FAIL) st = fail_tables(g, err);
        else if (s == DEAD)
            st = gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "grammar: token %d is not allowed here", token);
        else st = export_state(m, s, err);
    }
    pthread_mutex_unlock(&g->lock);
    return st;
}
