/* NPC actions in the prompt: the action list rendered as a documented plain section of the system
 * message (geist.h, "Actions"). Neither SmolLM2's nor Gemma 3's chat template has a tool section,
 * so every model gets this format. Pure functions; run on the runtime's thread. */
#ifndef GEIST_CHAT_ACTIONS_H
#define GEIST_CHAT_ACTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"

/* The marker that starts the call line of a reply. */
#define GT_ACTION_MARKER "<call>"
#define GT_ACTION_MARKER_LEN 6

/* The section that describes actions a[0..n) (n >= 1): "\n\nYou can act in the game. ..." as in
 * geist.h. *out is malloc'd, NUL-terminated, *len bytes. */
geist_status gt_chat_actions_section(const geist_action *a, size_t n, int32_t choice, char **out,
                                     size_t *len, gt_err *err);

/* The conversation the template renders for a request with actions: msgs with the section
 * appended to the first system message, or with a system message holding it put first when
 * msgs has none (*inserted = 1 then). *view (n_view messages) points into msgs except for the
 * one changed message, whose content is *owned (free both with free()). */
geist_status gt_chat_messages_with_actions(const geist_chat_message *msgs, size_t n,
                                           const char *section, geist_chat_message **view,
                                           size_t *n_view, char **owned, int *inserted,
                                           gt_err *err);

#endif
