/* Tokenizer and detokenizer against the real tokenizers (--model=PATH: SmolLM2's byte-level
 * BPE, --model2=PATH: Gemma 3's SentencePiece). Input byte 0: bit 0 picks the model, bit 1
 * GEIST_TOKENIZE_PARSE_SPECIAL, bit 2 GEIST_TOKENIZE_ADD_SPECIAL, bit 3 ids mode (the rest is
 * little-endian int32 ids for geist_detokenize and the streaming detokenizer; bit 4 folds them
 * into range, else out-of-range and negative ids stay), bit 5 GEIST_DETOKENIZE_RENDER_SPECIAL.
 * Text mode: the rest is the text; its ids must be in range, and detokenizing them works. */
#include "fuzz_common.h"

static geist_model *g_models[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    geist_engine *e = fz_engine();
    g_models[0] = fz_load(e, fz_path(argc, argv, "model"), "model");
    g_models[1] = fz_load(e, fz_path(argc, argv, "model2"), "model2");
    geist_engine_free(e);
    return 0;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static bool utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const uint8_t c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) { k = 1; cp = c & 0x1f; }
        else if (c >= 0xe0 && c <= 0xef) { k = 2; cp = c & 0x0f; }
        else if (c >= 0xf0 && c <= 0xf4) { k = 3; cp = c & 0x07; }
        else return false;
        if (n - i <= k) return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (k == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return false;
        i += k + 1;
    }
    return true;
}

/* geist_detokenize and the streaming detokenizer agree (the header's promise: byte for byte
 * when the text is valid UTF-8; the stream always yields valid UTF-8, bytes that never complete
 * a character coming out as U+FFFD). */
static void detok_both(const geist_model *m, const int32_t *ids, size_t n, uint32_t dflags) {
    size_t len = 0;
    geist_status st = geist_detokenize(m, ids, n, dflags, NULL, 0, &len);
    if (st != GEIST_OK && st != GEIST_ERR_BUFFER_TOO_SMALL) {
        /* some id is out of range: the streaming detokenizer must refuse it too */
        geist_detokenizer *d = NULL;
        FZ_CHECK(geist_detokenizer_create(m, dflags, &d) == GEIST_OK);
        char piece[256];
        size_t pl;
        bool refused = false;
        for (size_t i = 0; i < n; i++)
            if (geist_detokenizer_push(d, ids[i], piece, sizeof piece, &pl) ==
                GEIST_ERR_INVALID_ARGUMENT)
                refused = true;
        FZ_CHECK(refused);
        geist_detokenizer_free(d);
        return;
    }
    char *whole = malloc(len + 1);
    FZ_CHECK(whole);
    FZ_CHECK(geist_detokenize(m, ids, n, dflags, whole, len + 1, &len) == GEIST_OK);
    const size_t scap = 3 * len + 64; /* U+FFFD is 3 bytes where 1 byte was */
    char *stream = malloc(scap);
    FZ_CHECK(stream);
    size_t at = 0;
    geist_detokenizer *d = NULL;
    FZ_CHECK(geist_detokenizer_create(m, dflags, &d) == GEIST_OK);
    for (size_t i = 0; i < n; i++) {
        size_t pl = 0;
        st = geist_detokenizer_push(d, ids[i], stream + at, scap - at, &pl);
        FZ_CHECK(st == GEIST_OK);
        at += pl;
        FZ_CHECK(at <= scap);
    }
    size_t pl = 0;
    FZ_CHECK(geist_detokenizer_flush(d, stream + at, scap - at, &pl) == GEIST_OK);
    at += pl;
    geist_detokenizer_free(d);
    FZ_CHECK(utf8_valid((const uint8_t *)stream, at));
    if (utf8_valid((const uint8_t *)whole, len)) FZ_CHECK(at == len && memcmp(whole, stream, len) == 0);
    free(whole);
    free(stream);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t f = data[0];
    const geist_model *m = g_models[f & 1];
    const int32_t n_vocab = geist_model_n_vocab(m);
    const uint32_t dflags = (f & 32) ? GEIST_DETOKENIZE_RENDER_SPECIAL : 0;
    if (f & 8) {
        size_t n = (size - 1) / 4;
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        FZ_CHECK(ids);
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, data + 1 + 4 * i, 4);
            ids[i] = (f & 16) ? (int32_t)(u % (uint32_t)n_vocab) : (int32_t)u;
        }
        detok_both(m, ids, n, dflags);
        char piece[64];
        size_t pl;
        if (n) (void)geist_token_piece(m, ids[0], dflags, piece, sizeof piece, &pl);
        if (n) (void)geist_token_is_end(m, ids[0]);
        free(ids);
        return 0;
    }
    uint32_t flags = 0;
    if (f & 2) flags |= GEIST_TOKENIZE_PARSE_SPECIAL;
    if (f & 4) flags |= GEIST_TOKENIZE_ADD_SPECIAL;
    const char *text = (const char *)data + 1;
    size_t n_ids = 0;
    geist_status st = geist_tokenize(m, text, size - 1, flags, NULL, 0, &n_ids);
    if (st == GEIST_OK) FZ_CHECK(n_ids == 0);
    else FZ_CHECK(st == GEIST_ERR_BUFFER_TOO_SMALL);
    int32_t *ids = malloc((n_ids ? n_ids : 1) * sizeof *ids);
    FZ_CHECK(ids);
    size_t n2 = 0;
    FZ_CHECK(geist_tokenize(m, text, size - 1, flags, ids, n_ids, &n2) == GEIST_OK);
    FZ_CHECK(n2 == n_ids);
    for (size_t i = 0; i < n2; i++) FZ_CHECK(ids[i] >= 0 && ids[i] < n_vocab);
    /* Without PARSE_SPECIAL no control token may come out of player text (only BOS/EOS that
     * ADD_SPECIAL added at the ends). */
    detok_both(m, ids, n2, dflags);
    free(ids);
    return 0;
}
