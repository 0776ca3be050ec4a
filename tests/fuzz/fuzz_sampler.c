/* Sampler options and logit biases from raw bytes (NaN, infinities, negative counts, ids out of
 * range). Input: n_vocab (see below), two option sets, a bias list and a logits row, all raw. A sampler
 * that is created must only ever return ids in [0, n_vocab). */
#include "fuzz_common.h"

static void read_opts(fz_in *in, geist_sampler_options *o) {
    geist_sampler_options_default(o);
    const uint8_t mask = fz_u8(in);
    if (mask & 1) o->temperature = fz_f32(in);
    if (mask & 2) o->top_k = (int32_t)fz_u32(in);
    if (mask & 4) o->top_p = fz_f32(in);
    if (mask & 8) o->min_p = fz_f32(in);
    if (mask & 16) o->repeat_penalty = fz_f32(in);
    if (mask & 32) o->frequency_penalty = fz_f32(in);
    if (mask & 64) o->presence_penalty = fz_f32(in);
    if (mask & 128) o->penalty_last_n = (int32_t)fz_u32(in);
    o->seed = fz_u32(in);
}

static void on_logits(void *user, float *logits, int32_t n) {
    const uint8_t k = *(const uint8_t *)user;
    for (int32_t i = k % 3; i < n; i += 3) logits[i] = -__builtin_inff();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    /* Vocabulary sizes up to 2039 in most inputs, up to 65527 behind a marker byte: a 32k-entry
     * row costs ~100x a small one under ASan (the first campaigns ran at ~90 executions/s),
     * while the large sizes stay reachable (the quickselect tail found at 32k is a regression) */
    const uint8_t sel = fz_u8(&in);
    const int32_t n_vocab = sel == 0xff ? (int32_t)(fz_u8(&in) | (fz_u8(&in) << 8)) - 8
                                        : (int32_t)sel * 8 + (int32_t)(fz_u8(&in) % 8u) - 8;
    /* negatives and zero too */
    geist_sampler_options o1, o2;
    read_opts(&in, &o1);
    read_opts(&in, &o2);
    geist_sampler *s = NULL;
    geist_status st = geist_sampler_create(n_vocab, &o1, &s);
    if (st != GEIST_OK) {
        FZ_CHECK(s == NULL && st == GEIST_ERR_INVALID_ARGUMENT);
        return 0;
    }
    FZ_CHECK(n_vocab > 0);
    size_t n_bias = fz_u8(&in) % 17;
    int32_t ids[16];
    float bias[16];
    for (size_t i = 0; i < n_bias && i < 16; i++) {
        const uint8_t how = fz_u8(&in);
        ids[i] = (how & 1) ? (int32_t)fz_u32(&in) : (int32_t)(fz_u8(&in) % (unsigned)n_vocab);
        bias[i] = (how & 2) ? fz_f32(&in) : (float)(int8_t)fz_u8(&in);
    }
    (void)geist_sampler_set_logit_bias(s, ids, bias, n_bias > 16 ? 16 : n_bias);
    uint8_t hook_k = fz_u8(&in);
    if (hook_k & 0x80) FZ_CHECK(geist_sampler_set_hook(s, on_logits, &hook_k) == GEIST_OK);
    float *logits = malloc((size_t)n_vocab * sizeof(float));
    FZ_CHECK(logits);
    for (int32_t i = 0; i < n_vocab; i++) {
        const uint8_t b = fz_u8(&in);
        logits[i] = (b == 0xff) ? fz_f32(&in) : (float)(int)(b ^ (uint8_t)i) * 0.25f - 16.0f;
    }
    for (int round = 0; round < 4; round++) {
        int32_t id = -1;
        st = geist_sampler_sample(s, logits, &id);
        if (st == GEIST_OK) FZ_CHECK(id >= 0 && id < n_vocab);
        geist_sampler_accept(s, (int32_t)fz_u32(&in)); /* any id: must be ignored or kept safe */
        if (round == 1) (void)geist_sampler_set_options(s, &o2);
        if (round == 2) geist_sampler_reset(s);
    }
    free(logits);
    geist_sampler_free(s);
    return 0;
}
