/* Grammar or schema text -> geist_grammar_check, and when it compiles, a matcher on the real
 * vocabulary (--model=PATH: SmolLM2) for a few steps: mask, accept an allowed token, the
 * end where allowed. Input byte 0: bit 0 picks JSON Schema (else GBNF), bits 1-3 the step count,
 * bits 4-7 which allowed token to take; the rest is the text. Grammars are player- and
 * modder-written input: every text must give GEIST_OK or INVALID_ARGUMENT with a message, and the
 * matcher must stay in bounds. */
#include "fuzz_common.h"

static geist_model *g_model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    geist_engine *e = fz_engine();
    g_model = fz_load(e, fz_path(argc, argv, "model"), "model");
    geist_engine_free(e);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    const uint8_t knob = data[0];
    const int32_t kind = (knob & 1u) ? GEIST_GRAMMAR_JSON_SCHEMA : GEIST_GRAMMAR_GBNF;
    char *text = malloc(size);
    FZ_CHECK(text != NULL);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    geist_status st = geist_grammar_check(NULL, text, kind);
    FZ_CHECK(st == GEIST_OK || st == GEIST_ERR_INVALID_ARGUMENT);
    if (st == GEIST_OK) {
        geist_matcher *m = NULL;
        st = geist_matcher_create(g_model, text, kind, &m);
        FZ_CHECK(st == GEIST_OK || st == GEIST_ERR_CAPACITY);
        const int32_t n_vocab = geist_model_n_vocab(g_model);
        const size_t words = ((size_t)n_vocab + 31) / 32;
        uint32_t *bits = malloc(words * sizeof *bits);
        FZ_CHECK(bits != NULL);
        const int steps = 1 + ((knob >> 1) & 7);
        for (int s = 0; m && s < steps; s++) {
            if (geist_matcher_mask(m, bits, words) != GEIST_OK) break;
            int32_t pick = -1, seen = 0;
            for (int32_t id = 0; id < n_vocab; id++)
                if ((bits[id >> 5] >> (id & 31)) & 1u) {
                    pick = id;
                    if (seen++ == (knob >> 4)) break;
                }
            if (pick < 0) {
                FZ_CHECK(!geist_matcher_can_end(m));
                break;
            }
            /* The mask checks each parse alone; together they may pass the bound on live parses
             * (an ambiguous grammar such as ("{"+)+): that is a clear CAPACITY error, and a
             * request then fails with it. */
            st = geist_matcher_accept(m, pick);
            FZ_CHECK(st == GEIST_OK || st == GEIST_ERR_CAPACITY);
            if (st != GEIST_OK) break;
            if (geist_matcher_is_done(m)) break;
        }
        free(bits);
        geist_matcher_free(m);
    }
    free(text);
    return 0;
}
