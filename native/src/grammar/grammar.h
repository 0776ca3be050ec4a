/* Constrained output: GBNF grammars and JSON Schema compiled to byte-level rules, and matchers
 * that turn a grammar state into a token mask over the model's vocabulary.
 *
 * Why our own engine: llguidance is Rust (a game may have no Rust toolchain) and XGrammar is C++
 * with heavy dependencies; the C core must build from plain C on every platform the addon ships.
 * See docs/GRAMMAR.md for the syntax subset, the limits and the design.
 *
 * Design (in the spirit of XGrammar's adaptive token cache and llguidance's token trie):
 *  - every character class is compiled to UTF-8 byte sequences, so the grammar is byte-level and
 *    tokens that split a character (byte-fallback tokens, BPE fragments) need no special case;
 *  - a pushdown matcher keeps a set of stacks of grammar positions (llama.cpp's model: the top
 *    is always a byte-set element, the entries below are return positions);
 *  - the vocabulary is sorted by bytes once per model and kept as a preorder trie (shared
 *    prefixes walked once, a dead prefix's subtree skipped in one step);
 *  - per context (the top 4 positions of a stack, or the whole stack) the tokens are classified
 *    once (cached in the grammar): accepted without leaving the context (whatever lies below),
 *    rejected, or uncertain (the deepest entry's rule can end inside the token and the next byte
 *    may follow it): only uncertain tokens are checked against the whole stack;
 *  - contexts that differ only in a counted repetition's count (x{0,n}) share one walk that
 *    keeps the repetitions each accepted token needs;
 *  - the contexts reachable from the start are built when the grammar is compiled (bounded), the
 *    rest on first use;
 *  - stacks and stack sets are interned and byte transitions memoized (bounded tables, cleared
 *    when full; a matcher keeps its own copy of its state).
 * Hard limits (GT_GRAMMAR_MAX_*) bound text size, rules, nesting, repetition counts, stack depth
 * and stack-set width: a hostile grammar gets a clear error, never unbounded time or memory.
 *
 * Thread-safety: a gt_grammar is shared (reference counted) by every request that uses the same
 * text and kind on a model; its caches are behind its own mutex, so matchers of one grammar may
 * run on different threads. A matcher is used by one thread at a time. */
#ifndef GEIST_GRAMMAR_H
#define GEIST_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"
#include "geist.h"

struct gt_tokenizer;

/* Limits (exceeding one is GEIST_ERR_INVALID_ARGUMENT with a message naming it). */
#define GT_GRAMMAR_MAX_TEXT (1u << 20)      /* bytes of grammar or schema text */
#define GT_GRAMMAR_MAX_RULES 20000          /* rules after expansion (repetitions, classes) */
#define GT_GRAMMAR_MAX_ELEMENTS 400000      /* grammar positions after expansion */
#define GT_GRAMMAR_MAX_NESTING 100          /* parentheses / JSON nesting depth */
#define GT_GRAMMAR_MAX_REPEAT 1000          /* m and n of {m,n}; maxLength, maxItems */
#define GT_GRAMMAR_MAX_STACK 1000           /* matcher stack depth (positions) */
#define GT_GRAMMAR_MAX_STACKS 512           /* stacks alive at once in one matcher state */
#define GT_GRAMMAR_MAX_TOKEN 4096           /* longer tokens are never allowed */
#define GT_GRAMMAR_CACHE_BYTES (64u << 20)  /* per grammar: token classes cached per position */
#define GT_GRAMMAR_CACHE_GRAMMARS 64        /* compiled grammars kept per model */

typedef struct gt_grammar gt_grammar;
typedef struct gt_grammar_cache gt_grammar_cache;
typedef struct gt_matcher gt_matcher;

/* Compiles text to byte-level rules without a vocabulary (syntax, limits, left recursion, empty
 * language): what geist_grammar_check reports. kind: GEIST_GRAMMAR_GBNF or
 * GEIST_GRAMMAR_JSON_SCHEMA. Errors: GEIST_ERR_INVALID_ARGUMENT with a message. */
geist_status gt_grammar_check(const char *text, size_t len, int32_t kind, gt_err *err);

/* A model's cache of compiled grammars and its sorted vocabulary (built on first use). The model
 * owns it (api/ creates it at load, geist_model frees it). Thread-safe. */
geist_status gt_grammar_cache_create(const struct gt_tokenizer *tok, int32_t n_vocab,
                                     gt_grammar_cache **out, gt_err *err);
void gt_grammar_cache_free(gt_grammar_cache *c);

/* The compiled grammar for (text, kind) on this cache's vocabulary: the same object for the same
 * text and kind (a new reference each call; release it). Errors as gt_grammar_check, plus
 * GEIST_ERR_OUT_OF_MEMORY. */
geist_status gt_grammar_get(gt_grammar_cache *c, const char *text, size_t len, int32_t kind,
                            gt_grammar **out, gt_err *err);
void gt_grammar_retain(gt_grammar *g);
void gt_grammar_release(gt_grammar *g);
int32_t gt_grammar_n_vocab(const gt_grammar *g);

/* A per-request matcher at the grammar's start. */
/* Precomputes the grammar's token classes now (once; otherwise its first matcher does, on the
 * thread that runs it: the runtime's scheduler for requests). Failures only leave more for the
 * first masks. */
void gt_grammar_prepare(gt_grammar *g);
geist_status gt_matcher_create(gt_grammar *g, gt_matcher **out, gt_err *err);
void gt_matcher_free(gt_matcher *m);
/* Writes the allowed tokens as a bitmask: bit (id % 32) of bits[id / 32], (n_vocab + 31) / 32
 * words. Special/control tokens are never allowed, except end-of-generation tokens where the
 * grammar may end. Errors (the state outgrew a limit): GEIST_ERR_CAPACITY with a message. */
geist_status gt_matcher_fill_mask(gt_matcher *m, uint32_t *bits, gt_err *err);
/* Advances by one token. A token the mask does not allow: GEIST_ERR_INVALID_ARGUMENT and the
 * state is unchanged. An end-of-generation token is accepted where the grammar may end. */
geist_status gt_matcher_accept(gt_matcher *m, int32_t token, gt_err *err);
/* The grammar may end here (end-of-generation tokens allowed). */
bool gt_matcher_can_end(const gt_matcher *m);
/* Only ending is possible (no byte can follow). */
bool gt_matcher_is_done(const gt_matcher *m);
/* No continuation and no end: the request cannot be completed. */
bool gt_matcher_is_dead(const gt_matcher *m);
/* Fewest bytes that still complete the grammar from here (0 when it may end). */
uint32_t gt_matcher_min_bytes(const gt_matcher *m);
/* The longest token's byte length (a lower bound on tokens: min_bytes / this). */
uint32_t gt_grammar_max_token_bytes(const gt_grammar *g);
/* The same for a matcher's grammar. */
uint32_t gt_grammar_max_token_bytes_of(const gt_matcher *m);

#endif
