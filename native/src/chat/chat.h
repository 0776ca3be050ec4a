/* The model's chat template and stop strings, over the template engine (template.h) and the
 * model's GGUF metadata. Internal calls: they report through gt_err (or a status) only and never
 * touch the model's error slot or the thread's last error, so the runtime's scheduler thread may
 * use them. api/api_chat.c wraps them for geist.h. */
#ifndef GEIST_CHAT_H
#define GEIST_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "../model/model.h"

/* Renders msgs[0..n) with tmpl (NULL: the model's tokenizer.chat_template, else ChatML).
 * *out is malloc'd and NUL-terminated (free()); *len is its length without the NUL. */
geist_status gt_chat_render(const geist_model *m, const char *tmpl, const geist_chat_message *msgs,
                            size_t n, bool add_generation_prompt, char **out, size_t *len,
                            gt_err *err);

/* The same with the template's `tools` variable set to tools (a JSON array of
 * {"type": "function", "function": {name, description, parameters}}, as transformers passes
 * apply_chat_template(tools=...)); NULL: undefined. */
struct gt_json;
geist_status gt_chat_render_tools(const geist_model *m, const char *tmpl,
                                  const geist_chat_message *msgs, size_t n,
                                  const struct gt_json *tools, bool add_generation_prompt,
                                  char **out, size_t *len, gt_err *err);

/* Whether the model's template (its own, else the built-in ChatML) reads `tools`: then NPC
 * actions are rendered through it (chat/actions.h). False for a template that does not parse. */
bool gt_chat_template_uses_tools(const geist_model *m);

/* The strings that end a turn for this model: its template family's end marker plus its
 * EOS/EOT/EOM texts when they are known terminators (static strings). *n is set to the count;
 * GEIST_ERR_BUFFER_TOO_SMALL when cap < *n (out untouched then). */
geist_status gt_chat_stop_strings(const geist_model *m, const char **out, size_t cap, size_t *n);

#endif
