/* Public chat template call and the stop-string helper, over the template engine
 * (tokenizer/template.h) and the model's GGUF metadata. */
#include <stdlib.h>
#include <string.h>

#include "../gguf/gguf.h"
#include "../model/model.h"
#include "../tokenizer/template.h"

/* Text of token `id` from tokenizer.ggml.tokens (a string in the GGUF span). */
static bool token_text(const gguf_file *f, uint32_t id, gt_str *out) {
    const gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (!kv || kv->type != GGUF_VT_ARRAY || kv->arr_type != GGUF_VT_STRING || id >= kv->arr_len)
        return false;
    uint64_t cursor = 0;
    gt_str s;
    for (uint64_t i = 0; i <= id; i++)
        if (!gguf_str_array_next(kv, &cursor, &s)) return false;
    *out = s;
    return true;
}

static bool special_text(const gguf_file *f, const char *key, gt_str *out) {
    uint32_t id;
    return gguf_get_u32(f, key, &id) && token_text(f, id, out);
}

static geist_status record(const geist_model *model, const gt_err *err) {
    return gt_model_record_error(model, err);
}

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
        return record(model, &err);
    }
    if (cap > 0 && !buf) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "buf must not be NULL when cap > 0");
        return record(model, &err);
    }
    const gguf_file *f = gt_model_gguf(model);
    const char *src = tmpl;
    size_t src_len = tmpl ? strlen(tmpl) : 0;
    if (!tmpl) {
        gt_str s;
        if (gguf_get_str(f, "tokenizer.chat_template", &s) && s.len > 0) {
            src = s.ptr;
            src_len = (size_t)s.len;
        } else {
            src = gt_template_chatml();
            src_len = strlen(src);
        }
    }
    gt_tmpl_msg *msgs = NULL;
    if (n > 0) {
        msgs = gt_malloc_array(n, sizeof *msgs);
        if (!msgs) {
            gt_fail(&err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (%zu chat messages)", n);
            return record(model, &err);
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!messages[i].role || !messages[i].content) {
            free(msgs);
            gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "message %zu has a NULL role or content", i);
            return record(model, &err);
        }
        msgs[i].role = messages[i].role;
        msgs[i].role_len = strlen(messages[i].role);
        msgs[i].content = messages[i].content;
        msgs[i].content_len = strlen(messages[i].content);
    }
    gt_tmpl_ctx ctx = {0};
    ctx.messages = msgs;
    ctx.n_messages = n;
    ctx.add_generation_prompt = add_generation_prompt != 0;
    gt_str bos, eos;
    if (special_text(f, "tokenizer.ggml.bos_token_id", &bos)) {
        ctx.bos_token = bos.ptr;
        ctx.bos_len = (size_t)bos.len;
    }
    if (special_text(f, "tokenizer.ggml.eos_token_id", &eos)) {
        ctx.eos_token = eos.ptr;
        ctx.eos_len = (size_t)eos.len;
    }
    char *text = NULL;
    size_t len = 0;
    geist_status st = gt_template_render(src, src_len, &ctx, NULL, &text, &len, &err);
    free(msgs);
    if (st != GEIST_OK) return record(model, &err);

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
        return record(model, &err);
    }
    return GEIST_OK;
}

/* ---- stop strings ------------------------------------------------------------------------ */

/* Control tokens known to end a turn or a text; a model's EOS/EOT text is reported only when it
 * is one of these, so the strings can be static. */
static const char *const k_end_texts[] = {
    "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "<end_of_turn>", "<eos>",
    "</s>", "<|endoftext|>", "<|end|>",
};

static const char *known_end(gt_str s) {
    for (size_t i = 0; i < sizeof k_end_texts / sizeof k_end_texts[0]; i++)
        if (gt_str_eq(s, k_end_texts[i])) return k_end_texts[i];
    return NULL;
}

geist_status gt_chat_stop_strings(const geist_model *model, const char **out, size_t cap,
                                  size_t *n) {
    gt_err err = {0};
    if (!model || !n || (cap > 0 && !out)) {
        gt_set_thread_error("gt_chat_stop_strings: NULL argument");
        return GEIST_ERR_INVALID_ARGUMENT;
    }
    const gguf_file *f = gt_model_gguf(model);
    const char *found[4];
    size_t count = 0;
    gt_str tmpl;
    int family = gguf_get_str(f, "tokenizer.chat_template", &tmpl) && tmpl.len > 0
                     ? gt_template_family_n(tmpl.ptr, (size_t)tmpl.len)
                     : gt_template_family(gt_template_chatml());
    const char *end = gt_template_family_end(family);
    if (end) found[count++] = end;
    static const char *const keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                       "tokenizer.ggml.eom_token_id"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        gt_str s;
        const char *known = special_text(f, keys[k], &s) ? known_end(s) : NULL;
        bool dup = false;
        for (size_t i = 0; known && i < count; i++) dup = dup || strcmp(found[i], known) == 0;
        if (known && !dup) found[count++] = known;
    }
    *n = count;
    if (cap < count) {
        gt_fail(&err, GEIST_ERR_BUFFER_TOO_SMALL, "stop strings: room for %zu, %zu needed", cap,
                count);
        return record(model, &err);
    }
    for (size_t i = 0; i < count; i++) out[i] = found[i];
    return GEIST_OK;
}

geist_status geist_chat_stop_strings(const geist_model *model, const char **out, size_t cap,
                                     size_t *n) {
    return gt_chat_stop_strings(model, out, cap, n);
}
