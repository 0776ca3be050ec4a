/* NPC actions in the prompt (geist.h, "Actions"; docs/ACTIONS.md, "The prompt"). Two paths:
 *  - the model's chat template reads `tools` (chat.h gt_chat_template_uses_tools): the actions
 *    go to the template as transformers' tool list (gt_chat_actions_tools) and the system
 *    message gets only the reply-format line (gt_chat_actions_format);
 *  - otherwise (SmolLM2's and Gemma 3's templates, a text prompt) the documented plain section
 *    of the system message (gt_chat_actions_section).
 * Either way the reply is held to the engine's action format by its grammar (gen/actions.h).
 * Pure functions; run on the runtime's thread. */
#ifndef GEIST_CHAT_ACTIONS_H
#define GEIST_CHAT_ACTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "../util/json.h"
#include "../util/util.h"

/* The marker that starts the call line of a reply. */
#define GT_ACTION_MARKER "<call>"
#define GT_ACTION_MARKER_LEN 6

/* The plain section that describes actions a[0..n) (n >= 1): "\n\nThe game lets you act. ..." as
 * in geist.h. *out is malloc'd, NUL-terminated, *len bytes. */
geist_status gt_chat_actions_section(const geist_action *a, size_t n, int32_t choice, char **out,
                                     size_t *len, gt_err *err);

/* The reply-format line alone ("\n\nReply in character in one short line. To act, add a second
 * line: <call>..."), for the tools path. *out as above. */
geist_status gt_chat_actions_format(const geist_action *a, size_t n, int32_t choice, char **out,
                                    size_t *len, gt_err *err);

/* The actions as a template's `tools`: [{"type": "function", "function": {"name", "description"
 * ("" when none), "parameters" (the caller's schema; {"type": "object", "properties": {}} when
 * none)}}, ...] in declaration order, parsed (free with gt_json_free). *out is NULL (GEIST_OK)
 * when a schema holds a number the template engine cannot (a fraction, an exponent, beyond 64
 * bits): the plain section is used then. */
geist_status gt_chat_actions_tools(const geist_action *a, size_t n, gt_json **out, gt_err *err);

/* The conversation the template renders for a request with actions: msgs with the section
 * appended to the first system message, or with a system message holding it put first when
 * msgs has none (*inserted = 1 then). *view (n_view messages) points into msgs except for the
 * one changed message, whose content is *owned (free both with free()). */
geist_status gt_chat_messages_with_actions(const geist_chat_message *msgs, size_t n,
                                           const char *section, geist_chat_message **view,
                                           size_t *n_view, char **owned, int *inserted,
                                           gt_err *err);

#endif
