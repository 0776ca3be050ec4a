/* Public geist_sampler_* calls: argument checks and error reporting over sample/sampler.c. */
#include <string.h>

#include "../sample/sampler.h"

static geist_status fail_thread(const gt_err *err) {
    gt_set_thread_error(err->msg);
    return err->status;
}

void geist_sampler_options_default(geist_sampler_options *o) {
    if (o) gt_sampler_options_default(o);
}

/* Copies caller options (NULL = defaults) after checking struct_size. */
static bool read_options(const geist_sampler_options *in, geist_sampler_options *out, gt_err *err) {
    geist_sampler_options_default(out);
    if (!in) return true;
    if (in->struct_size < sizeof *out) {
        gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                "sampler options: struct_size %u is too small (expected %zu)", in->struct_size,
                sizeof *out);
        return false;
    }
    *out = *in;
    out->struct_size = sizeof *out;
    return true;
}

geist_status geist_sampler_create(int32_t n_vocab, const geist_sampler_options *opts,
                                  geist_sampler **out) {
    gt_err err = {0};
    geist_sampler_options o;
    if (!out) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "geist_sampler_create: out must not be NULL");
        return fail_thread(&err);
    }
    if (!read_options(opts, &o, &err)) return fail_thread(&err);
    geist_sampler *s = NULL;
    if (gt_sampler_create(n_vocab, &o, &s, &err) != GEIST_OK) return fail_thread(&err);
    *out = s;
    return GEIST_OK;
}

void geist_sampler_free(geist_sampler *s) { gt_sampler_free(s); }

geist_status geist_sampler_set_options(geist_sampler *s, const geist_sampler_options *opts) {
    gt_err err = {0};
    geist_sampler_options o;
    if (!s) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "geist_sampler_set_options: sampler is NULL");
        return fail_thread(&err);
    }
    if (!read_options(opts, &o, &err)) return fail_thread(&err);
    if (gt_sampler_set_options(s, &o, &err) != GEIST_OK) return fail_thread(&err);
    return GEIST_OK;
}

geist_status geist_sampler_set_logit_bias(geist_sampler *s, const int32_t *ids, const float *bias,
                                          size_t n) {
    gt_err err = {0};
    if (!s) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "geist_sampler_set_logit_bias: sampler is NULL");
        return fail_thread(&err);
    }
    if (gt_sampler_set_logit_bias(s, ids, bias, n, &err) != GEIST_OK) return fail_thread(&err);
    return GEIST_OK;
}

geist_status geist_sampler_set_hook(geist_sampler *s, geist_logits_hook hook, void *user) {
    if (!s) {
        gt_set_thread_error("geist_sampler_set_hook: sampler is NULL");
        return GEIST_ERR_INVALID_ARGUMENT;
    }
    gt_sampler_set_hook(s, hook, user);
    return GEIST_OK;
}

geist_status geist_sampler_sample(geist_sampler *s, const float *logits, int32_t *out_id) {
    gt_err err = {0};
    if (!s || !logits || !out_id) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT,
                "geist_sampler_sample: sampler, logits and out_id must not be NULL");
        return fail_thread(&err);
    }
    if (gt_sampler_sample(s, logits, out_id, &err) != GEIST_OK) return fail_thread(&err);
    return GEIST_OK;
}

void geist_sampler_accept(geist_sampler *s, int32_t id) { gt_sampler_accept(s, id); }

void geist_sampler_reset(geist_sampler *s) { gt_sampler_reset(s); }
