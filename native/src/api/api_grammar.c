/* geist_grammar_check (geist.h): constrained-output grammars compiled early for front ends. */
#include <stdlib.h>
#include <string.h>

#include "../grammar/grammar.h"
#include "../grammar/json_schema.h"
#include "../model/model.h"

geist_status geist_grammar_check(geist_model *model, const char *text, int32_t kind) {
    gt_err err = {0};
    geist_status st;
    if (!text) {
        st = gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "grammar: text is NULL");
    } else if (model && model->grammar_cache) {
        gt_grammar *g = NULL;
        st = gt_grammar_get(model->grammar_cache, text, strlen(text), kind, &g, &err);
        gt_grammar_prepare(g); /* a front end's early compile pays the token classes too */
        gt_grammar_release(g);
    } else {
        st = gt_grammar_check(text, strlen(text), kind, &err);
    }
    if (st != GEIST_OK) {
        if (model) return gt_model_record_error(model, &err);
        gt_set_thread_error(err.msg);
        return st;
    }
    gt_clear_thread_error();
    return GEIST_OK;
}

struct geist_matcher {
    gt_matcher *m;
    int32_t n_vocab;
};

geist_status geist_matcher_create(geist_model *model, const char *text, int32_t kind,
                                  geist_matcher **out) {
    gt_err err = {0};
    if (!out) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "matcher: out is NULL");
    *out = NULL;
    if (!model || !text) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "matcher: model and text must not be NULL");
    if (!model->grammar_cache)
        return gt_thread_fail(GEIST_ERR_STATE, "matcher: the model has no tokenizer");
    gt_grammar *g = NULL;
    geist_status st = gt_grammar_get(model->grammar_cache, text, strlen(text), kind, &g, &err);
    geist_matcher *h = NULL;
    if (st == GEIST_OK) {
        h = calloc(1, sizeof *h);
        if (!h) st = gt_fail(&err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (matcher)");
    }
    if (st == GEIST_OK) {
        h->n_vocab = gt_grammar_n_vocab(g);
        st = gt_matcher_create(g, &h->m, &err);
    }
    gt_grammar_release(g);
    if (st != GEIST_OK) {
        free(h);
        gt_set_thread_error(err.msg);
        return st;
    }
    *out = h;
    gt_clear_thread_error();
    return GEIST_OK;
}

void geist_matcher_free(geist_matcher *m) {
    if (!m) return;
    gt_matcher_free(m->m);
    free(m);
}

geist_status geist_matcher_mask(geist_matcher *m, uint32_t *bits, size_t n_words) {
    gt_err err = {0};
    if (!m || !bits) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "matcher: NULL argument");
    if (n_words < (size_t)(m->n_vocab + 31) / 32)
        return gt_thread_fail(GEIST_ERR_BUFFER_TOO_SMALL, "matcher: %zu words, need %d", n_words,
                              (m->n_vocab + 31) / 32);
    geist_status st = gt_matcher_fill_mask(m->m, bits, &err);
    if (st != GEIST_OK) gt_set_thread_error(err.msg);
    return st;
}

geist_status geist_matcher_accept(geist_matcher *m, int32_t token) {
    gt_err err = {0};
    if (!m) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "matcher: NULL argument");
    geist_status st = gt_matcher_accept(m->m, token, &err);
    if (st != GEIST_OK) gt_set_thread_error(err.msg);
    return st;
}

int32_t geist_matcher_can_end(const geist_matcher *m) { return m && gt_matcher_can_end(m->m); }
int32_t geist_matcher_is_done(const geist_matcher *m) { return m && gt_matcher_is_done(m->m); }

geist_status geist_json_schema_to_gbnf(const char *schema, char *buf, size_t cap, size_t *len) {
    gt_err err = {0};
    if (!schema || !len || (!buf && cap))
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "json_schema_to_gbnf: NULL argument");
    gt_text t = {0};
    geist_status st = gt_json_schema_to_gbnf(schema, strlen(schema), "root", &t, &err);
    if (st != GEIST_OK) {
        gt_text_free(&t);
        gt_set_thread_error(err.msg);
        return st;
    }
    *len = t.n;
    if (cap) gt_copy_message(t.p ? t.p : "", buf, cap);
    gt_text_free(&t);
    if (cap <= *len)
        return gt_thread_fail(GEIST_ERR_BUFFER_TOO_SMALL, "json_schema_to_gbnf: %zu bytes needed", *len + 1);
    gt_clear_thread_error();
    return GEIST_OK;
}
