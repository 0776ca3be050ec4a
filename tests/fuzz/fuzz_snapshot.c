/* Session restore from hostile save files (NPC memories players edit). Real images are taken
 * at start-up from sessions of the --model=PATH model in every KV mode (KIVI with a quantized
 * block and a residual), one on a shared prefix and one without pending logits. Input byte 0:
 * bits 0-2 pick the image (7 = none: the rest is a raw image), bit 3 restores into a session of
 * another KV mode, bit 4 keeps the checksum as it is (else it is recomputed after the edits, so
 * the checks behind it are reached), bit 5 cuts the image by byte 1. The rest: edits of 4 bytes
 * each (a 24-bit offset into the image, then a byte XORed there).
 * Checks: a failed restore leaves the session as it was (same snapshot bytes); a successful one
 * snapshots back to exactly the bytes restored. */
#include "fuzz_common.h"

#include "util/hash.h" /* the image checksum (test code may use the core's helpers) */

#define N_IMG 7
static geist_model *g_model;
static geist_session *g_sess[N_IMG];
static uint8_t *g_img[N_IMG];
static size_t g_img_n[N_IMG];
static uint8_t *g_scratch;
static size_t g_scratch_cap;

static uint8_t *snap(geist_session *s, size_t *n) {
    size_t need = 0;
    FZ_CHECK(geist_session_snapshot(s, NULL, 0, &need) == GEIST_ERR_BUFFER_TOO_SMALL);
    uint8_t *b = malloc(need);
    FZ_CHECK(b && geist_session_snapshot(s, b, need, n) == GEIST_OK && *n == need);
    return b;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    geist_engine *e = fz_engine();
    g_model = fz_load(e, fz_path(argc, argv, "model"), "model");
    const int32_t n_vocab = geist_model_n_vocab(g_model);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (int32_t)((7 + 13 * i) % n_vocab);
    static geist_prefix *prefix;
    FZ_CHECK(geist_prefix_create(g_model, ids, 3, GEIST_KV_F16, &prefix) == GEIST_OK);
    for (int k = 0; k < N_IMG; k++) {
        geist_session_options so;
        geist_session_options_default(&so);
        so.max_seq_len = 48;
        so.kv_mode = k < 5 ? k : GEIST_KV_F16;
        so.seed = 99;
        geist_session *s = NULL;
        if (k == 5) {
            FZ_CHECK(geist_session_create_with_prefix(g_model, prefix, &so, &s) == GEIST_OK);
            FZ_CHECK(geist_session_prefill(s, ids + 3, 5) == GEIST_OK);
        } else {
            FZ_CHECK(geist_session_create(g_model, &so, &s) == GEIST_OK);
            /* KIVI: 37 tokens = one quantized block of 32 and a residual */
            const size_t n = k == GEIST_KV_KIVI2 ? 37 : k == 6 ? 6 : (size_t)(9 + k);
            FZ_CHECK(geist_session_prefill(s, ids, n) == GEIST_OK);
            /* no pending logits (a window-4 ring still holds what 5 tokens need) */
            if (k == 6) FZ_CHECK(geist_session_truncate(s, 5) == GEIST_OK);
        }
        g_sess[k] = s;
        g_img[k] = snap(s, &g_img_n[k]);
    }
    geist_prefix_free(prefix);
    geist_engine_free(e);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    fz_in in = {data + 1, size - 1};
    const uint8_t f = data[0];
    const int pick = f & 7;
    const uint8_t *image;
    size_t n;
    int target;
    if (pick == 7) {
        image = in.p;
        n = in.n;
        target = (f >> 3) % N_IMG;
    } else {
        n = g_img_n[pick];
        if (f & 32) {
            const size_t cut = fz_u8(&in);
            n = cut < n ? n - cut : 0;
        }
        if (g_scratch_cap < g_img_n[pick]) {
            free(g_scratch);
            g_scratch = malloc(g_img_n[pick]);
            FZ_CHECK(g_scratch);
            g_scratch_cap = g_img_n[pick];
        }
        memcpy(g_scratch, g_img[pick], n);
        while (in.n >= 4 && n > 0) {
            uint32_t off = (uint32_t)fz_u8(&in) | ((uint32_t)fz_u8(&in) << 8) |
                           ((uint32_t)fz_u8(&in) << 16);
            g_scratch[off % n] ^= fz_u8(&in);
        }
        if (!(f & 16) && n >= 8) {
            const uint64_t sum = gt_hash64(GT_HASH64_INIT, g_scratch, n - 8);
            memcpy(g_scratch + n - 8, &sum, 8);
        }
        image = g_scratch;
        target = (f & 8) ? (pick + 1) % N_IMG : pick;
    }
    geist_session *s = g_sess[target];
    size_t before_n;
    uint8_t *before = snap(s, &before_n);
    geist_status st = geist_session_restore(s, image, n);
    size_t after_n;
    uint8_t *after = snap(s, &after_n);
    if (st == GEIST_OK) {
        FZ_CHECK(geist_session_n_past(s) <= geist_session_max_seq_len(s));
        FZ_CHECK(after_n == n && memcmp(after, image, n) == 0);
    } else {
        char msg[600];
        FZ_CHECK(geist_last_error(msg, sizeof msg) > 0);
        FZ_CHECK(st == GEIST_ERR_BAD_FORMAT || st == GEIST_ERR_INVALID_ARGUMENT ||
                 st == GEIST_ERR_CAPACITY || st == GEIST_ERR_UNSUPPORTED);
        FZ_CHECK(after_n == before_n && memcmp(after, before, before_n) == 0);
    }
    free(before);
    free(after);
    /* back to the original image so every input starts from the same state */
    FZ_CHECK(geist_session_restore(g_sess[target], g_img[target], g_img_n[target]) == GEIST_OK);
    return 0;
}
