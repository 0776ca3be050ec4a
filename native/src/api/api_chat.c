/* Public chat template call and the stop-string helper: argument checks and error recording over
 * chat/chat.h. */
#include <stdlib.h>
#include <string.h>

#include "../chat/chat.h"

geist_status geist_chat_apply_template(const geist_model *model, const char *tmpl,
                                       const geist_chat_message *messages, size_t n,
                                       int32_t add_generation_prompt, char *buf, size_t cap,
                                       size_t *needed) {
    gt_err err = {0};
    if (!model) {
        gt_set_thread_error("geist_chat_apply_template: model must not be NULL");
        return GEIST_ERR_INVALID_ARGUMENT;
    }
    if (n > 0 && !messages) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "messages must not be NULL when n > 0");
        return gt_model_record_error(model, &err);
    }
    if (cap > 0 && !buf) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "buf must not be NULL when cap > 0");
        return gt_model_record_error(model, &err);
    }
    char *text = NULL;
    size_t len = 0;
    if (gt_chat_render(model, tmpl, messages, n, add_generation_prompt != 0, &text, &len, &err))
        return gt_model_record_error(model, &err);
    if (needed) *needed = len + 1;
    if (cap > 0) {
        size_t k = len < cap ? len : cap - 1;
        memcpy(buf, text, k);
        buf[k] = '\0';
    }
    free(text);
    if (len + 1 > cap) {
        gt_fail(&err, GEIST_ERR_BUFFER_TOO_SMALL,
                "chat template: buffer of %zu bytes is too small (%zu needed)", cap, len + 1);
        return gt_model_record_error(model, &err);
    }
    return GEIST_OK;
}

geist_status geist_chat_stop_strings(const geist_model *model, const char **out, size_t cap,
                                     size_t *n) {
    if (!model || !n || (cap > 0 && !out)) {
        gt_set_thread_error("gt_chat_stop_strings: NULL argument");
        return GEIST_ERR_INVALID_ARGUMENT;
    }
    if (gt_chat_stop_strings(model, out, cap, n) == GEIST_ERR_BUFFER_TOO_SMALL) {
        gt_err err = {0};
        gt_fail(&err, GEIST_ERR_BUFFER_TOO_SMALL, "stop strings: room for %zu, %zu needed", cap,
                *n);
        return gt_model_record_error(model, &err);
    }
    return GEIST_OK;
}
