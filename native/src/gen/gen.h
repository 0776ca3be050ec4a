/* The one generation loop's per-request state, for every front end (the runtime drives it; the
 * Python and Godot front ends only submit requests): the prompt (text tokenized, ids as given, or
 * a conversation fitted to the session), the sampler, the streaming detokenizer, stop strings
 * with hold-back, and the finish reasons. Runs on the runtime's thread. */
#ifndef GEIST_GEN_H
#define GEIST_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../grammar/grammar.h"
#include "../sample/sampler.h"
#include "../session/session.h"
#include "../tokenizer/detok.h"

/* A request's inputs (the runtime's owned copies; exactly one of text, ids, messages). */
typedef struct gt_gen_input {
    const char *text;
    const int32_t *ids;
    size_t n_ids;
    const geist_chat_message *messages;
    size_t n_messages;
    geist_context_policy context;
    const char *const *stop;
    size_t n_stop;
    geist_sampler_options sampler;
    int32_t max_tokens;
    /* NPC actions (gen/actions.h): rendered into the prompt, the call parsed at the end; the
     * grammar that constrains the reply comes with the request's grammar */
    const geist_action *actions;
    size_t n_actions;
    int32_t action_choice;
    gt_grammar *grammar; /* constrained output (borrowed; gen holds its own matcher), or NULL */
} gt_gen_input;

typedef struct gt_gen {
    const geist_model *model;
    geist_session *session;
    int32_t *prompt; /* ids to run after the session's kept tokens */
    int32_t n_prompt, n_reused, n_dropped;
    char **stop; /* the request's stop strings, then the template's (messages) */
    size_t n_stop;
    geist_sampler *sampler;
    gt_detok *detok;
    char *out; /* the reply so far; out[0..emitted) has been streamed */
    size_t out_len, out_cap, emitted;
    int32_t n_gen, max_tokens;
    /* actions: the reply is speech, then maybe the call; out[call_at..) is the marker and the
     * call (SIZE_MAX: none yet), never streamed */
    const geist_action *actions;
    size_t n_actions;
    size_t call_at;
    /* GEIST_ACTION_REQUIRED: the end-of-turn ids whose probability goes to the newline id that
     * starts the call line, while the call has not begun (nl_id -1: off) */
    int32_t nl_id, n_end_ids, end_ids[8];
    int32_t call_reserve; /* tokens kept for the call line (see gt_gen_end_to_call) */
    gt_matcher *matcher; /* constrained output, else NULL */
    uint32_t *mask;      /* (n_vocab + 31) / 32 words */
    float *masked;       /* n_vocab: the logits row with the mask applied */
    int32_t grammar_end; /* the finish reason when gt_gen_sample gives -1 */
    gt_err grammar_err;  /* why the grammar ended a request, when it did on an error */
} gt_gen;

/* Checks an ids prompt against the session's room before it is queued (GEIST_ERR_CAPACITY). */
geist_status gt_gen_check_ids(const geist_session *s, size_t n_ids, gt_err *err);

/* Builds the prompt, the sampler and the detokenizer; for a conversation, rewinds the session to
 * the prefix it shares with the rendering (the last step, after everything that can fail). On
 * error nothing is left allocated in g (gt_gen_free is still safe) and the session is unchanged. */
geist_status gt_gen_prepare(gt_gen *g, geist_session *s, const gt_gen_input *in, gt_err *err);
void gt_gen_free(gt_gen *g);

/* What a sampled token does. */
typedef enum gt_gen_step {
    GT_GEN_CONTINUE = 0, /* appended: run it, stream *piece; *finish_after >= 0 ends after it */
    GT_GEN_END = 1,      /* not appended: finish with *finish_after (an end token, no room) */
    GT_GEN_FAILED = 2    /* err says why (out of memory) */
} gt_gen_step;

/* Samples the next token from the logits row: with a grammar, the mask is applied to a copy of
 * the row first (disallowed tokens -inf; end tokens only where the grammar may end), then the
 * sampler chain runs. *out_id = -1 when the grammar ends the request instead: nothing but the end
 * can follow (g->grammar_end = STOP), or no token is allowed / the grammar cannot be completed in
 * the tokens left (GEIST_FINISH_GRAMMAR); gt_gen_token(-1) then finishes it. Thread: any, one
 * request at a time (the runtime samples requests in parallel on its pool). */
geist_status gt_gen_sample(gt_gen *g, const float *logits, int32_t *out_id, gt_err *err);

/* True when the next token is the logits' plain argmax (a greedy sampler with no penalty, bias or
 * hook, no grammar): a device may pick it (backend.h's gt_dev_row.argmax, the sampler's greedy
 * rule) and gt_gen_take_greedy take it in place of gt_gen_sample. */
bool gt_gen_plain_greedy(const gt_gen *g);
geist_status gt_gen_take_greedy(gt_gen *g, int32_t id, int32_t *out_id, gt_err *err);

gt_gen_step gt_gen_token(gt_gen *g, int32_t id, const char **piece, size_t *piece_len,
                         int32_t *finish_after, gt_err *err);

/* The reply as streamed: the concatenation of every piece gt_gen_token returned (with actions:
 * the speech only). */
const char *gt_gen_reply(const gt_gen *g, size_t *len);

/* GEIST_ACTION_REQUIRED before the call, on the masked row (where the grammar allows the newline
 * that starts the call line): adds the end-of-turn tokens' probability (from the raw logits row)
 * to the newline, so where the model would stop talking it starts the call; and once the n_left
 * tokens left come down to what the longest action's call needs (g->call_reserve, and at least
 * call_bytes / 2 + 8 for call_bytes = the fewest bytes that complete the grammar from here),
 * only the newline stays. */
void gt_gen_end_to_call(const gt_gen *g, const float *logits, float *masked, int32_t n_left,
                        uint32_t call_bytes);

/* The reply's action call as JSON (geist.h "Actions"), or NULL when the request has no actions
 * or the reply holds no complete call. Points into the reply's buffer. */
const char *gt_gen_action(const gt_gen *g, size_t *len);

#endif
