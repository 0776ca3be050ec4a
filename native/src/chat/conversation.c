/* The conversation policy (conversation.h). */
#include "conversation.h"

#include <stdlib.h>
#include <string.h>

#include "../tokenizer/tokenizer.h"
#include "chat.h"

geist_status gt_context_policy_check(const geist_context_policy *in, geist_context_policy *out,
                                     gt_err *err) {
    geist_context_policy p = *in;
    if (p.trim != 0 && p.trim != 1)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "context policy: trim must be 0 or 1");
    if (p.keep_first < -1 || p.keep_last < 0 || p.reply_reserve < -1)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "context policy: keep_first must be >= -1, keep_last >= 0 and "
                       "reply_reserve >= -1 (got %d, %d, %d)",
                       p.keep_first, p.keep_last, p.reply_reserve);
    *out = p;
    return GEIST_OK;
}

/* One candidate rendering: messages [0, keep_first) and [keep_first + drop, n). */
typedef struct candidate {
    int32_t *ids;
    size_t n_ids, n_common, drop;
} candidate;

static geist_status render_ids(const geist_model *m, const geist_chat_message *msgs, size_t n,
                               const struct gt_json *tools, size_t keep_first, size_t drop,
                               geist_chat_message *view, const int32_t *held, size_t n_held,
                               candidate *c, gt_err *err) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (i < keep_first || i >= keep_first + drop) view[k++] = msgs[i];
    char *text = NULL;
    size_t len = 0;
    geist_status st = gt_chat_render_tools(m, NULL, view, k, tools, true, &text, &len, err);
    if (st != GEIST_OK) return st;
    /* the template's own control tokens are parsed; the messages went through it as text */
    st = gt_tokenize_alloc(m, text, len, GEIST_TOKENIZE_ADD_SPECIAL | GEIST_TOKENIZE_PARSE_SPECIAL,
                           &c->ids, &c->n_ids, err);
    free(text);
    if (st != GEIST_OK) return st;
    if (c->n_ids == 0) {
        free(c->ids);
        c->ids = NULL;
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "the conversation renders to no tokens: nothing to reply to");
    }
    size_t common = 0;
    while (common < n_held && common < c->n_ids && held[common] == c->ids[common]) common++;
    c->n_common = common;
    c->drop = drop;
    return GEIST_OK;
}

/* A turn starts at a "user" message; dropping stops only there, so the kept part never opens
 * with an assistant line (templates such as Gemma's refuse that). */
static bool turn_start(const geist_chat_message *msgs, size_t i) {
    return strcmp(msgs[i].role, "user") == 0;
}

geist_status gt_conversation_plan(const geist_model *m, const geist_chat_message *msgs, size_t n,
                                  const struct gt_json *tools,
                                  const geist_context_policy *policy, int32_t max_seq_len,
                                  int32_t reserve, const int32_t *held, size_t n_held,
                                  gt_conv_plan *out, gt_err *err) {
    if (n == 0) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "the conversation has no messages");
    const size_t cap = (size_t)max_seq_len;
    size_t keep_first = 0;
    if (policy->keep_first < 0)
        while (keep_first < n && strcmp(msgs[keep_first].role, "system") == 0) keep_first++;
    else
        keep_first = (size_t)policy->keep_first < n ? (size_t)policy->keep_first : n;
    const size_t keep_last = (size_t)policy->keep_last < n ? (size_t)policy->keep_last : n;
    const size_t droppable = n - keep_last > keep_first ? n - keep_last - keep_first : 0;
    const size_t want = reserve > 0 ? (size_t)reserve : 1; /* tokens free after the prompt */

    geist_chat_message *view = gt_calloc(n, sizeof *view);
    if (!view) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (conversation)");
    candidate best = {0}, cur = {0};
    geist_status st = render_ids(m, msgs, n, tools, keep_first, 0, view, held, n_held, &best, err);
    if (st != GEIST_OK) goto done;
    const bool trim = policy->trim && droppable > 0 && best.n_ids + want > cap;
    if (trim) {
        /* Walk the turn starts from the oldest: among the renderings that fit with the reserve,
         * keep the one sharing the longest prefix with what the session holds (ties: the one
         * that drops more). Stop once a quarter of the cap stays free beyond the reserve, so a
         * fresh trim leaves room for the next turns to reuse the KV. */
        const size_t slack_target = cap - cap / 4;
        bool any_turn = false;
        for (size_t d = 1; d <= droppable; d++) any_turn |= turn_start(msgs, keep_first + d);
        candidate fit = {0};
        bool have_fit = false;
        for (size_t d = 1; d <= droppable; d++) {
            const size_t first_kept = keep_first + d;
            if (any_turn && first_kept < n && !turn_start(msgs, first_kept)) continue;
            st = render_ids(m, msgs, n, tools, keep_first, d, view, held, n_held, &cur, err);
            if (st != GEIST_OK) goto done;
            const bool fits = cur.n_ids + want <= cap;
            const bool roomy = cur.n_ids + want <= slack_target;
            if (fits && (!have_fit || cur.n_common >= fit.n_common)) {
                free(fit.ids);
                fit = cur;
                have_fit = true;
            } else if (!have_fit) {
                free(best.ids); /* the smallest rendering so far, for the error path */
                best = cur;
            } else {
                free(cur.ids);
            }
            cur = (candidate){0};
            if (roomy) break; /* later ones only drop more than a fresh trim needs */
        }
        if (have_fit) {
            free(best.ids);
            best = fit;
        }
    }
    if (best.n_ids + 1 > cap) {
        st = gt_fail(err, GEIST_ERR_CAPACITY,
                     "the conversation needs %zu tokens%s but the session holds at most %zu "
                     "(max_seq_len): shorten the persona or the messages, or raise max_seq_len",
                     best.n_ids,
                     policy->trim ? " even with its oldest turns dropped" : " (trimming is off)",
                     cap);
        goto done;
    }
    out->ids = best.ids;
    out->n_ids = best.n_ids;
    out->n_common = best.n_common;
    out->n_dropped = best.drop;
    best.ids = NULL;
done:
    free(best.ids);
    free(cur.ids);
    free(view);
    return st;
}
