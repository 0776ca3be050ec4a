/* The chat template engine: arbitrary template text and messages through
 * geist_chat_apply_template with an explicit template (templates come inside model files).
 * Input: byte 0 = flags (bit 0 add_generation_prompt, bit 1 a tiny output buffer, bit 2 a
 * `tools` value), then NUL-separated parts: the template, with bit 2 a JSON text for `tools`
 * (NPC actions on a template with a tool section: gt_chat_render_tools, the core's own call),
 * then role, content, role, content, ...
 * The model (--model=PATH) supplies bos/eos tokens and the special-token text. */
#include "chat/chat.h"    /* gt_chat_render_tools (test code may use the core's internals) */
#include "fuzz_common.h"
#include "util/json.h" /* the tools text parsed as the core parses an action's schema */

static geist_model *g_model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    geist_engine *e = fz_engine();
    g_model = fz_load(e, fz_path(argc, argv, "model"), "model");
    geist_engine_free(e); /* the model keeps what it needs */
    return 0;
}

#define MAX_MSG 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t flags = data[0];
    /* One NUL-terminated copy; parts split at NUL bytes. */
    char *copy = malloc(size + 1);
    if (!copy) return 0;
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = '\0';
    copy[size] = '\0';
    const char *parts[2 * MAX_MSG + 1];
    size_t n_parts = 0;
    const char *end = copy + size - 1;
    for (const char *p = copy; p <= end && n_parts < 2 * MAX_MSG + 1; p += strlen(p) + 1)
        parts[n_parts++] = p;
    geist_chat_message msgs[MAX_MSG];
    size_t n_msgs = 0;
    const size_t first = (flags & 4) ? 2 : 1;
    for (size_t i = first; i + 1 < n_parts; i += 2) msgs[n_msgs++] = (geist_chat_message){parts[i], parts[i + 1]};
    if (flags & 4) {
        gt_json *tools = NULL;
        gt_err e = {0};
        if (n_parts >= 2 && gt_json_parse(parts[1], strlen(parts[1]), &tools, &e) == GEIST_OK) {
            char *text = NULL;
            size_t len = 0;
            e = (gt_err){0};
            geist_status st = gt_chat_render_tools(g_model, parts[0], msgs, n_msgs, tools,
                                                   flags & 1, &text, &len, &e);
            if (st == GEIST_OK) {
                FZ_CHECK(text && strlen(text) <= len && text[len] == '\0');
            } else {
                FZ_CHECK(!text && e.msg[0]);
                FZ_CHECK(st == GEIST_ERR_BAD_FORMAT || st == GEIST_ERR_INVALID_ARGUMENT ||
                         st == GEIST_ERR_OUT_OF_MEMORY || st == GEIST_ERR_CAPACITY ||
                         st == GEIST_ERR_UNSUPPORTED);
            }
            free(text);
            gt_json_free(tools);
        }
        free(copy);
        return 0;
    }
    const size_t cap = (flags & 2) ? 3 : 1 << 16;
    char *out = malloc(cap);
    size_t need = 0;
    geist_status st = geist_chat_apply_template(g_model, parts[0], msgs, n_msgs, flags & 1, out,
                                                cap, &need);
    if (st == GEIST_OK) {
        FZ_CHECK(need >= 1 && need <= cap && strlen(out) + 1 <= need);
    } else if (st == GEIST_ERR_BUFFER_TOO_SMALL) {
        FZ_CHECK(need > cap && strlen(out) < cap);
    } else {
        char msg[600];
        FZ_CHECK(geist_last_error(msg, sizeof msg) > 0);
        FZ_CHECK(st == GEIST_ERR_BAD_FORMAT || st == GEIST_ERR_INVALID_ARGUMENT ||
                 st == GEIST_ERR_OUT_OF_MEMORY || st == GEIST_ERR_CAPACITY ||
                 st == GEIST_ERR_UNSUPPORTED);
    }
    free(out);
    free(copy);
    return 0;
}
