/* The conversation policy: a chat's whole message list fitted to a session. Renders the messages
 * with the model's chat template, drops the oldest turns as the request's context policy says,
 * and picks, among the renderings that fit, the one that keeps the most of what the session
 * already holds (so its KV is reused). Pure: reads the held ids, changes nothing; the caller
 * (gen/) rewinds the session to the common prefix. Runs on the runtime's thread. */
#ifndef GEIST_CHAT_CONVERSATION_H
#define GEIST_CHAT_CONVERSATION_H

#include <stddef.h>
#include <stdint.h>

#include "../model/model.h"
#include "../util/util.h"

typedef struct gt_conv_plan {
    int32_t *ids;     /* the rendered conversation's ids (malloc'd; free()) */
    size_t n_ids;
    size_t n_common;  /* leading ids equal to the held ones */
    size_t n_dropped; /* messages the policy dropped */
} gt_conv_plan;

/* The policy with its defaults filled in (geist.h: -1 = default), or an error for values out of
 * range. */
geist_status gt_context_policy_check(const geist_context_policy *in, geist_context_policy *out,
                                     gt_err *err);

/* Fits msgs[0..n) to a session of max_seq_len tokens that holds held[0..n_held), keeping
 * `reserve` tokens free for the reply when the policy trims. tools: the template's `tools`
 * variable in every rendering (chat.h gt_chat_render_tools), or NULL. Errors:
 * GEIST_ERR_CAPACITY (does not fit even trimmed, the message gives the sizes), the template's
 * and tokenizer's errors, GEIST_ERR_OUT_OF_MEMORY. On success *out owns its ids. */
struct gt_json;
geist_status gt_conversation_plan(const geist_model *m, const geist_chat_message *msgs, size_t n,
                                  const struct gt_json *tools,
                                  const geist_context_policy *policy, int32_t max_seq_len,
                                  int32_t reserve, const int32_t *held, size_t n_held,
                                  gt_conv_plan *out, gt_err *err);

#endif
