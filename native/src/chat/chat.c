/* The model's chat template and stop strings (chat.h). */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "../gguf/gguf.h"
#include "template.h"

/* Text of token `id` from tokenizer.ggml.tokens (a string in the GGUF span). */
static bool token_text(const gguf_file *f, uint32_t id, gt_str *out) {
    const gguf_kv *kv = gt_gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (!kv || kv->type != GGUF_VT_ARRAY || kv->arr_type != GGUF_VT_STRING || id >= kv->arr_len)
        return false;
    uint64_t cursor = 0;
    gt_str s;
    for (uint64_t i = 0; i <= id; i++)
        if (!gt_gguf_str_array_next(kv, &cursor, &s)) return false;
    *out = s;
    return true;
}

static bool special_text(const gguf_file *f, const char *key, gt_str *out) {
    uint32_t id;
    return gt_gguf_get_u32(f, key, &id) && token_text(f, id, out);
}

/* The model's template (tokenizer.chat_template), else the built-in ChatML. */
static void model_template(const geist_model *m, const char **src, size_t *len) {
    gt_str s;
    if (gt_gguf_get_str(gt_model_gguf(m), "tokenizer.chat_template", &s) && s.len > 0) {
        *src = s.ptr;
        *len = (size_t)s.len;
    } else {
        *src = gt_template_chatml();
        *len = strlen(*src);
    }
}

bool gt_chat_template_uses_tools(const geist_model *m) {
    const char *src = NULL;
    size_t len = 0;
    model_template(m, &src, &len);
    bool uses = false;
    gt_err ignored = {0};
    return gt_template_uses(src, len, "tools", &uses, &ignored) == GEIST_OK && uses;
}

geist_status gt_chat_render(const geist_model *m, const char *tmpl, const geist_chat_message *msgs,
                            size_t n, bool add_generation_prompt, char **out, size_t *len,
                            gt_err *err) {
    return gt_chat_render_tools(m, tmpl, msgs, n, NULL, add_generation_prompt, out, len, err);
}

geist_status gt_chat_render_tools(const geist_model *m, const char *tmpl,
                                  const geist_chat_message *msgs, size_t n,
                                  const struct gt_json *tools, bool add_generation_prompt,
                                  char **out, size_t *len, gt_err *err) {
    *out = NULL;
    *len = 0;
    if (n > 0 && !msgs)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "messages must not be NULL when n > 0");
    const gguf_file *f = gt_model_gguf(m);
    const char *src = tmpl;
    size_t src_len = tmpl ? strlen(tmpl) : 0;
    if (!tmpl) model_template(m, &src, &src_len);
    gt_tmpl_msg *tm = NULL;
    if (n > 0) {
        tm = gt_malloc_array(n, sizeof *tm);
        if (!tm) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (%zu chat messages)", n);
    }
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            free(tm);
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "message %zu has a NULL role or content",
                           i);
        }
        tm[i].role = msgs[i].role;
        tm[i].role_len = strlen(msgs[i].role);
        tm[i].content = msgs[i].content;
        tm[i].content_len = strlen(msgs[i].content);
    }
    gt_tmpl_ctx ctx = {0};
    ctx.tools = tools;
    ctx.messages = tm;
    ctx.n_messages = n;
    ctx.add_generation_prompt = add_generation_prompt;
    gt_str bos, eos;
    if (special_text(f, "tokenizer.ggml.bos_token_id", &bos)) {
        ctx.bos_token = bos.ptr;
        ctx.bos_len = (size_t)bos.len;
    }
    if (special_text(f, "tokenizer.ggml.eos_token_id", &eos)) {
        ctx.eos_token = eos.ptr;
        ctx.eos_len = (size_t)eos.len;
    }
    geist_status st = gt_template_render(src, src_len, &ctx, NULL, out, len, err);
    free(tm);
    return st;
}

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

geist_status gt_chat_stop_strings(const geist_model *m, const char **out, size_t cap, size_t *n) {
    const gguf_file *f = gt_model_gguf(m);
    const char *found[4];
    size_t count = 0;
    gt_str tmpl;
    int family = gt_gguf_get_str(f, "tokenizer.chat_template", &tmpl) && tmpl.len > 0
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
    if (cap < count) return GEIST_ERR_BUFFER_TOO_SMALL;
    for (size_t i = 0; i < count; i++) out[i] = found[i];
    return GEIST_OK;
}
