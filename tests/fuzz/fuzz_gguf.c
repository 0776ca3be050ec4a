/* GGUF bytes -> geist_model_load_memory; when the file loads: info, memory report, metadata,
 * tokenize / detokenize, the model's own chat template, and one tiny session step (prefill,
 * logits, snapshot, restore). The model file is hostile input a modder replaces. */
#include "fuzz_common.h"

static geist_engine *g_engine;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_engine = fz_engine();
    return 0;
}

static void exercise(geist_model *m, uint8_t knob) {
    size_t need = 0;
    char small[8];
    geist_status st = geist_model_info_json(m, small, sizeof small, &need);
    FZ_CHECK(st == GEIST_OK || st == GEIST_ERR_BUFFER_TOO_SMALL);
    char *info = malloc(need);
    FZ_CHECK(info && geist_model_info_json(m, info, need, &need) == GEIST_OK);
    FZ_CHECK(strlen(info) + 1 == need);
    free(info);
    geist_memory_report rep = {.struct_size = sizeof rep};
    FZ_CHECK(geist_model_memory(m, &rep) == GEIST_OK);
    char meta[64];
    (void)geist_model_meta(m, "general.architecture", meta, sizeof meta, &need);
    (void)geist_model_meta(m, "tokenizer.ggml.tokens", meta, sizeof meta, &need);
    const int32_t n_vocab = geist_model_n_vocab(m);
    FZ_CHECK(n_vocab > 0);
    geist_special_tokens sp = {.struct_size = sizeof sp};
    st = geist_model_special_tokens(m, &sp);
    FZ_CHECK(st == GEIST_OK || st == GEIST_ERR_STATE); /* STATE: a model without a tokenizer */

    static const char text[] = "Hello <|im_start|>world \xe2\x82\xac\xff!";
    int32_t ids[64];
    size_t n_ids = 0;
    st = geist_tokenize(m, text, sizeof text - 1, knob & 3u, ids, 64, &n_ids);
    if (st == GEIST_OK) {
        for (size_t i = 0; i < n_ids; i++) FZ_CHECK(ids[i] >= 0 && ids[i] < n_vocab);
        char out[512];
        size_t len;
        (void)geist_detokenize(m, ids, n_ids, GEIST_DETOKENIZE_RENDER_SPECIAL, out, sizeof out,
                               &len);
    }
    geist_chat_message msgs[2] = {{"system", "You are a guard."}, {"user", "Open the gate!"}};
    char *chat = malloc(4096);
    FZ_CHECK(chat);
    (void)geist_chat_apply_template(m, NULL, msgs, 2, 1, chat, 4096, &need);
    free(chat);
    const char *stops[16];
    size_t n_stops;
    (void)geist_chat_stop_strings(m, stops, 16, &n_stops);

    if (st != GEIST_OK || n_ids == 0) return;
    geist_session_options so;
    geist_session_options_default(&so);
    so.max_seq_len = geist_model_n_ctx_train(m) < 8 ? geist_model_n_ctx_train(m) : 8;
    so.kv_mode = (knob >> 2) % 5;
    geist_session *s = NULL;
    if (geist_session_create(m, &so, &s) != GEIST_OK) return;
    size_t n = n_ids < 3 ? n_ids : 3;
    if ((int32_t)n > so.max_seq_len) n = (size_t)so.max_seq_len;
    if (geist_session_prefill(s, ids, n) == GEIST_OK) {
        const float *logits;
        FZ_CHECK(geist_session_logits(s, &logits) == GEIST_OK);
        size_t img = 0;
        FZ_CHECK(geist_session_snapshot(s, NULL, 0, &img) == GEIST_ERR_BUFFER_TOO_SMALL);
        void *buf = malloc(img);
        FZ_CHECK(buf && geist_session_snapshot(s, buf, img, &img) == GEIST_OK);
        FZ_CHECK(geist_session_restore(s, buf, img) == GEIST_OK);
        free(buf);
    }
    geist_session_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    geist_model *m = NULL;
    geist_status st = geist_model_load_memory(g_engine, data, size, NULL, &m);
    if (st != GEIST_OK) {
        char msg[600];
        FZ_CHECK(m == NULL);
        FZ_CHECK(geist_last_error(msg, sizeof msg) > 0); /* every failure says why */
        FZ_CHECK(st == GEIST_ERR_BAD_FORMAT || st == GEIST_ERR_UNSUPPORTED ||
                 st == GEIST_ERR_OUT_OF_MEMORY);
        return 0;
    }
    exercise(m, size ? data[size / 2] : 0);
    geist_model_free(m);
    return 0;
}
