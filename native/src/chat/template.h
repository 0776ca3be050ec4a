/* Chat templates: a small Jinja2 subset, enough for the chat templates GGUF files carry.
 *
 * Semantics follow Python jinja2 with Environment(trim_blocks=True, lstrip_blocks=True,
 * keep_trailing_newline=False), as Hugging Face transformers renders chat templates (the text a
 * model was trained on), and Undefined as the undefined type:
 *  - {{ expr }}, {% if/elif/else/endif %}, {% for a[, b] in expr [if cond] %}...{% else %}
 *    ...{% endfor %} (loop.index, index0, revindex, revindex0, first, last, length, previtem,
 *    nextitem, cycle()), {% set x = e %}, {% set ns.attr = e %}, {% set x %}...{% endset %},
 *    {% raw %}...{% endraw %}, {# comments #}, whitespace control with '-' on either side of
 *    every tag ('+' accepted).
 *  - Expressions: string literals ('..', ".." with Python escapes), integers, true/false/none
 *    (any capitalisation jinja2 accepts), lists [..], dicts {..}, tuples (..), variables,
 *    attribute/subscript access, slices [a:b:c], calls; operators with jinja2's precedence:
 *    `x if c else y`, or, and, not, == != < > <= >= in, not in, + -, ~, * // %, **, unary -.
 *    Integers are 64-bit; float literals and '/' (true division) are rejected.
 *  - Filters: trim, length/count, upper, lower, capitalize, title, first, last, join, default/d,
 *    replace, list, string, int, abs, reverse, items, tojson (transformers' own, which replaces
 *    jinja2's for chat templates: json.dumps(x, ensure_ascii=False, indent=None,
 *    separators=None, sort_keys=False), keys in insertion order, no HTML escapes; those four
 *    arguments by position or keyword), select/reject, selectattr/rejectattr,
 *    map(attribute=..|filter name), safe.
 *  - Tests (`is [not]`): defined, undefined, none, string, number, integer, boolean, true,
 *    false, mapping, iterable, sequence, callable, even, odd, divisibleby, eq/equalto/==, ne/!=,
 *    lt/<, gt/>, le/<=, ge/>=, in.
 *  - Methods: str.strip/lstrip/rstrip/startswith/endswith/upper/lower/title/capitalize/replace/
 *    split/join/find/count; dict.items/keys/values/get; loop.cycle.
 *  - Functions: raise_exception(msg), namespace(k=v, ..), dict(k=v, ..), range(..).
 *  - upper/lower/title/capitalize change ASCII letters only; length, slicing and indexing of
 *    strings count Unicode code points (an invalid UTF-8 byte counts as one).
 *
 * Hostile templates get errors, never crashes: nesting depth, expression height, loop
 * iterations, output size and working memory are all limited (GT_TMPL_LIMIT_*). Parsing and
 * evaluation recurse only along nesting and expression height, which keeps the stack a render
 * can use under about 128 KiB (measured frames at -O2), so it is safe on worker threads.
 *
 * Not supported (a GEIST_ERR_BAD_FORMAT naming them): macros/call blocks, include/extends,
 * float literals and '/', the str % formatting operator, filters beyond the list above.
 */
#ifndef GEIST_TEMPLATE_H
#define GEIST_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"
#include "geist.h"

struct gt_json;

/* Limits of one render (exceeding one is a GEIST_ERR_BAD_FORMAT error naming the limit). */
#define GT_TMPL_LIMIT_SOURCE (4u << 20)    /* template source bytes */
#define GT_TMPL_LIMIT_NESTING 64           /* nested tags / parentheses while parsing */
#define GT_TMPL_LIMIT_HEIGHT 128           /* height of one expression tree */
#define GT_TMPL_LIMIT_ITERATIONS 1000000u  /* loop iterations + filter/range elements */
#define GT_TMPL_LIMIT_OUTPUT (16u << 20)   /* rendered bytes */
#define GT_TMPL_LIMIT_MEMORY (64u << 20)   /* working memory beyond the input context */
#define GT_TMPL_LIMIT_VALUE_DEPTH 64       /* nesting of lists/dicts when printed or compared */

/* One message: role and content with explicit lengths (need not be NUL-terminated). */
typedef struct gt_tmpl_msg {
    const char *role;
    size_t role_len;
    const char *content;
    size_t content_len;
} gt_tmpl_msg;

typedef struct gt_tmpl_opts {
    bool trim_blocks;   /* jinja2 trim_blocks (HF transformers sets it); default true */
    bool lstrip_blocks; /* jinja2 lstrip_blocks (likewise); default true */
} gt_tmpl_opts;

typedef struct gt_tmpl_ctx {
    const gt_tmpl_msg *messages;
    size_t n_messages;
    bool add_generation_prompt;
    const char *bos_token; /* may be NULL (then the variable is undefined) */
    size_t bos_len;
    const char *eos_token;
    size_t eos_len;
    /* `tools` (transformers' apply_chat_template(tools=...)): a JSON array, as lists, dicts,
     * strings, integers, booleans and none (a non-integer number is an error); NULL: the
     * variable is undefined. */
    const struct gt_json *tools;
} gt_tmpl_ctx;

/* Renders tmpl[0..len) with ctx. On success *out is a malloc'd NUL-terminated string of
 * *out_len bytes (caller frees). Errors: GEIST_ERR_BAD_FORMAT (syntax or runtime error of the
 * template, with its byte offset; or a limit), GEIST_ERR_INVALID_ARGUMENT (raise_exception: the
 * message is the template's text), GEIST_ERR_OUT_OF_MEMORY. opts may be NULL (defaults). */
geist_status gt_template_render(const char *tmpl, size_t len, const gt_tmpl_ctx *ctx,
                                const gt_tmpl_opts *opts, char **out, size_t *out_len,
                                gt_err *err);

/* Whether tmpl[0..len) reads the variable `name` anywhere (parsed, not rendered: a name in its
 * expressions, not a word in its text). Errors: the template's syntax errors, as render. */
geist_status gt_template_uses(const char *tmpl, size_t len, const char *name, bool *uses,
                              gt_err *err);

/* The ChatML template used when a model has none. Static. */
const char *gt_template_chatml(void);

/* Template families, recognised by the control tokens the template writes. */
enum gt_tmpl_family {
    GT_TMPL_FAMILY_UNKNOWN = 0,
    GT_TMPL_FAMILY_CHATML = 1,  /* <|im_start|> ... <|im_end|> */
    GT_TMPL_FAMILY_LLAMA3 = 2,  /* <|start_header_id|> ... <|eot_id|> */
    GT_TMPL_FAMILY_GEMMA = 3,   /* <start_of_turn> ... <end_of_turn> */
    GT_TMPL_FAMILY_MISTRAL = 4  /* [INST] ... [/INST] ... </s> */
};

/* Family of a NUL-terminated template (GT_TMPL_FAMILY_UNKNOWN for NULL). */
int gt_template_family(const char *tmpl);
/* Same for a template of len bytes (not necessarily NUL-terminated). */
int gt_template_family_n(const char *tmpl, size_t len);
/* The string that ends an assistant turn in that family ("<|im_end|>", ...); NULL if unknown. */
const char *gt_template_family_end(int family);

/* Stop strings of a reply for this model (implemented in api_chat.c): the turn end of the
 * model's template family (its own template, or the built-in ChatML one) followed by the text of
 * the EOS and EOT tokens when they are well-known control tokens; duplicates are dropped. The
 * strings are static. Writes up to cap pointers and sets *n to the full count;
 * GEIST_ERR_BUFFER_TOO_SMALL (nothing written) if cap < *n. Token-level stopping should use
 * geist_token_is_end(); these strings are for stopping on text. */
geist_status gt_chat_stop_strings(const geist_model *model, const char **out, size_t cap,
                                  size_t *n);

#endif
