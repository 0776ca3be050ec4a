/* The generation loop's per-request state (gen.h). */
#include "gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../chat/actions.h"
#include "../chat/chat.h"
#include "../chat/conversation.h"
#include "../tokenizer/tokenizer.h"
#include "actions.h"

static char *dup_str(const char *s) {
    const size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

geist_status gt_gen_check_ids(const geist_session *s, size_t n_ids, gt_err *err) {
    if (n_ids == 0 && !s->has_logits && !s->logits_on_device)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "empty prompt on a session without logits: nothing to continue from");
    const int32_t room = s->max_seq_len - s->n_past;
    if (n_ids > (size_t)room)
        return gt_fail(err, GEIST_ERR_CAPACITY,
                       "prompt of %zu tokens does not fit: the session holds %d of its max_seq_len "
                       "%d (room for %d)",
                       n_ids, s->n_past, s->max_seq_len, room);
    return GEIST_OK;
}

void gt_gen_free(gt_gen *g) {
    if (!g) return;
    free(g->prompt);
    if (g->stop)
        for (size_t i = 0; i < g->n_stop; i++) free(g->stop[i]);
    free(g->stop);
    gt_sampler_free(g->sampler);
    gt_detok_free(g->detok);
    gt_matcher_free(g->matcher);
    free(g->mask);
    free(g->masked);
    free(g->out);
    memset(g, 0, sizeof *g);
}

/* The request's stop strings, then (for a conversation) the template's end-of-turn strings,
 * except under a grammar: there the grammar decides where the reply may end (the end-of-turn
 * tokens are allowed exactly there), and a turn marker the model writes as text ("<|im_end|>"
 * inside a string the grammar allows) is content, not the end of a reply that would then stop
 * short of its grammar (Gemma 3 under the built-in ChatML template did). */
static geist_status copy_stops(gt_gen *g, const gt_gen_input *in, bool chat, gt_err *err) {
    const char *tmpl_stop[16];
    size_t n_tmpl = 0;
    if (chat && !in->grammar && gt_chat_stop_strings(g->model, tmpl_stop, 16, &n_tmpl) != GEIST_OK)
        n_tmpl = 0;
    g->stop = gt_calloc(in->n_stop + n_tmpl + 1, sizeof(char *));
    if (!g->stop) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (stop strings)");
    for (size_t i = 0; i < in->n_stop + n_tmpl; i++) {
        const char *src = i < in->n_stop ? in->stop[i] : tmpl_stop[i - in->n_stop];
        bool seen = false;
        for (size_t j = 0; j < g->n_stop && !seen; j++) seen = strcmp(g->stop[j], src) == 0;
        if (seen) continue;
        if (!(g->stop[g->n_stop] = dup_str(src)))
            return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (stop strings)");
        g->n_stop++;
    }
    return GEIST_OK;
}

/* The session's tokens (its shared prefix's first); *out malloc'd. */
static geist_status held_ids(const geist_session *s, int32_t **out, gt_err *err) {
    *out = gt_malloc_array(s->n_past > 0 ? (size_t)s->n_past : 1, sizeof(int32_t));
    if (!*out) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (session tokens)");
    if (s->n_prefix) memcpy(*out, s->prefix->s->ids, (size_t)s->n_prefix * sizeof(int32_t));
    if (s->n_past > s->n_prefix)
        memcpy(*out + s->n_prefix, s->ids, (size_t)(s->n_past - s->n_prefix) * sizeof(int32_t));
    return GEIST_OK;
}

/* The penalty window sees the conversation, not just this request: the session's own tokens
 * that stay (the first `kept` positions), then the prompt. */
static void seed_history(gt_gen *g, int32_t kept, int32_t last_n) {
    const geist_session *s = g->session;
    if (last_n <= 0) return;
    const int32_t n_held = kept - s->n_prefix;
    const int32_t from_prompt = g->n_prompt < last_n ? g->n_prompt : last_n;
    const int32_t from_held = last_n - from_prompt < n_held ? last_n - from_prompt : n_held;
    for (int32_t i = n_held - from_held; i < n_held; i++) gt_sampler_accept(g->sampler, s->ids[i]);
    for (int32_t i = g->n_prompt - from_prompt; i < g->n_prompt; i++)
        gt_sampler_accept(g->sampler, g->prompt[i]);
}

static geist_status set_prompt(gt_gen *g, const int32_t *ids, size_t n, gt_err *err) {
    if (n > (size_t)INT32_MAX) return gt_fail(err, GEIST_ERR_CAPACITY, "prompt too long");
    free(g->prompt);
    g->prompt = gt_malloc_array(n ? n : 1, sizeof(int32_t));
    if (!g->prompt) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (prompt)");
    if (n) memcpy(g->prompt, ids, n * sizeof(int32_t));
    g->n_prompt = (int32_t)n;
    return GEIST_OK;
}

/* GEIST_ACTION_REQUIRED: the newline token that starts the call line, the model's end-of-turn
 * tokens (at most 8 are used), and the tokens to keep for the call: the longest of the actions'
 * shortest calls, in bytes (a matcher fed each action's call prefix), at 2 bytes a token plus 8
 * (the canonical tokenization of a call runs at about 2.8 bytes a token on SmolLM2 and Gemma 3;
 * a sampled one may take shorter tokens). */
static geist_status end_to_call_prepare(gt_gen *g, gt_grammar *grammar, gt_err *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    geist_status st = gt_tokenize_alloc(g->model, "\n", 1, 0, &ids, &n, err);
    if (st != GEIST_OK) return st;
    g->nl_id = n == 1 ? ids[0] : -1;
    free(ids);
    const int32_t nv = g->model->cfg.n_vocab;
    for (int32_t id = 0; id < nv && g->n_end_ids < 8 && g->nl_id >= 0; id++)
        if (gt_token_is_end(g->model, id)) g->end_ids[g->n_end_ids++] = id;
    uint32_t longest = 0;
    for (size_t i = 0; i < g->n_actions && grammar && g->nl_id >= 0; i++) {
        char prefix[128];
        const int len = snprintf(prefix, sizeof prefix, GT_ACTION_MARKER "{\"name\":\"%s\","
                                 "\"arguments\":", g->actions[i].name);
        if (len <= 0 || (size_t)len >= sizeof prefix) continue;
        gt_matcher *m = NULL;
        gt_err ignored = {0};
        if (gt_matcher_create(grammar, &m, &ignored) != GEIST_OK) continue;
        bool ok = gt_tokenize_alloc(g->model, prefix, (size_t)len, 0, &ids, &n, &ignored) ==
                  GEIST_OK;
        for (size_t k = 0; ok && k < n; k++) ok = gt_matcher_accept(m, ids[k], &ignored) == GEIST_OK;
        if (ok) {
            const uint32_t bytes = 1 + (uint32_t)len + gt_matcher_min_bytes(m);
            if (bytes > longest) longest = bytes;
        }
        free(ids);
        ids = NULL;
        gt_matcher_free(m);
    }
    g->call_reserve = (int32_t)(longest / 2 + 8);
    return GEIST_OK;
}

void gt_gen_end_to_call(const gt_gen *g, const float *logits, float *masked, int32_t n_left,
                        uint32_t call_bytes) {
    if (g->nl_id < 0 || g->call_at != SIZE_MAX || !(masked[g->nl_id] > -INFINITY)) return;
    const int32_t nv = g->model->cfg.n_vocab;
    const int64_t reserve = g->call_reserve > (int64_t)(call_bytes / 2 + 8)
                                ? g->call_reserve
                                : (int64_t)(call_bytes / 2 + 8);
    if ((int64_t)n_left <= reserve) {
        /* the tokens left are about what the call needs: it starts now */
        const float keep = masked[g->nl_id];
        for (int32_t i = 0; i < nv; i++) masked[i] = -INFINITY;
        masked[g->nl_id] = keep;
        return;
    }
    float m = masked[g->nl_id];
    for (int32_t i = 0; i < g->n_end_ids; i++) {
        const float e = logits[g->end_ids[i]];
        if (!(e > -INFINITY) || e != e) continue;
        const float hi = m > e ? m : e, lo = m > e ? e : m;
        m = hi + log1pf(expf(lo - hi)); /* log(exp(m) + exp(e)) */
    }
    masked[g->nl_id] = m;
}

geist_status gt_gen_prepare(gt_gen *g, geist_session *s, const gt_gen_input *in, gt_err *err) {
    memset(g, 0, sizeof *g);
    g->model = s->model;
    g->session = s;
    g->max_tokens = in->max_tokens;
    g->actions = in->actions;
    g->n_actions = in->actions ? in->n_actions : 0;
    g->call_at = SIZE_MAX;
    g->nl_id = -1;
    const geist_model *m = s->model;
    const bool chat = in->messages != NULL;
    geist_sampler_options so = in->sampler;
    int32_t kept = s->n_past; /* positions of the session that stay */
    int32_t *conv = NULL;
    size_t n_conv = 0;
    /* actions (chat/actions.h): through the template's `tools` where it reads them (then the
     * system message gets only the reply-format line), else the plain section describing them,
     * in the system message or before a text prompt */
    gt_json *tools = NULL;
    char *section = NULL, *sys_owned = NULL, *text_owned = NULL;
    size_t section_len = 0;
    geist_chat_message *view = NULL;
    const geist_chat_message *msgs = in->messages;
    size_t n_msgs = in->n_messages;
    int inserted = 0;
    geist_status st = copy_stops(g, in, chat, err);
    if (st != GEIST_OK) goto fail;
    if (g->n_actions && chat && gt_chat_template_uses_tools(m)) {
        st = gt_chat_actions_tools(g->actions, g->n_actions, &tools, err);
        if (st != GEIST_OK) goto fail;
    }
    if (g->n_actions && (chat || in->text)) {
        st = tools ? gt_chat_actions_format(g->actions, g->n_actions, in->action_choice, &section,
                                            &section_len, err)
                   : gt_chat_actions_section(g->actions, g->n_actions, in->action_choice,
                                             &section, &section_len, err);
        if (st != GEIST_OK) goto fail;
    }
    if (chat && section) {
        st = gt_chat_messages_with_actions(in->messages, in->n_messages, section, &view, &n_msgs,
                                           &sys_owned, &inserted, err);
        if (st != GEIST_OK) goto fail;
        msgs = view;
    }
    if (chat) {
        geist_context_policy pol;
        st = gt_context_policy_check(&in->context, &pol, err);
        if (st != GEIST_OK) goto fail;
        if (inserted && pol.keep_first >= 0) pol.keep_first++; /* the added system message */
        const int32_t half = s->max_seq_len / 2;
        const int32_t reserve = pol.reply_reserve >= 0 ? pol.reply_reserve
                                                       : (in->max_tokens < half ? in->max_tokens : half);
        int32_t *held = NULL;
        st = held_ids(s, &held, err);
        if (st != GEIST_OK) goto fail;
        gt_conv_plan plan = {0};
        st = gt_conversation_plan(m, msgs, n_msgs, tools, &pol, s->max_seq_len, reserve, held,
                                  (size_t)s->n_past, &plan, err);
        free(held);
        if (st != GEIST_OK) goto fail;
        conv = plan.ids;
        n_conv = plan.n_ids;
        size_t common = plan.n_common < n_conv ? plan.n_common : n_conv - 1; /* one id to run */
        if (common < (size_t)s->n_prefix) {
            st = gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                         "the conversation does not begin with the session's shared prefix (%d "
                         "tokens): render the persona as the prefix's first messages",
                         s->n_prefix);
            goto fail;
        }
        kept = (int32_t)common;
        g->n_dropped = (int32_t)plan.n_dropped;
        /* each turn draws anew; a restored session draws as the original did */
        so.seed += (uint64_t)n_conv * UINT64_C(0x9E3779B97F4A7C15);
        st = set_prompt(g, conv + common, n_conv - common, err);
    } else if (in->text) {
        int32_t *ids = NULL;
        size_t n = 0;
        const uint32_t flags = s->n_past == 0 ? GEIST_TOKENIZE_ADD_SPECIAL : 0;
        const char *text = in->text;
        if (section) {
            const char *sec = section + strspn(section, "\n");
            const size_t ls = strlen(sec), lt = strlen(in->text);
            text_owned = malloc(ls + lt + 3);
            if (!text_owned) {
                st = gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (prompt)");
                goto fail;
            }
            memcpy(text_owned, sec, ls);
            memcpy(text_owned + ls, "\n\n", 2);
            memcpy(text_owned + ls + 2, in->text, lt + 1);
            text = text_owned;
        }
        st = gt_tokenize_alloc(m, text, strlen(text), flags, &ids, &n, err);
        if (st == GEIST_OK) {
            g->prompt = ids;
            g->n_prompt = (int32_t)n;
            if (n > (size_t)INT32_MAX) st = gt_fail(err, GEIST_ERR_CAPACITY, "prompt too long");
        }
    } else {
        st = set_prompt(g, in->ids, in->n_ids, err);
    }
    if (st != GEIST_OK) goto fail;
    if (g->n_prompt > s->max_seq_len - kept) {
        st = gt_fail(err, GEIST_ERR_CAPACITY,
                     "prompt of %d tokens does not fit: the session holds %d of its max_seq_len "
                     "%d (room for %d)",
                     g->n_prompt, kept, s->max_seq_len, s->max_seq_len - kept);
        goto fail;
    }
    if (g->n_prompt == 0 && (st = gt_session_bring_logits(s, err)) != GEIST_OK) goto fail;
    if (g->n_prompt == 0 && !s->has_logits) {
        st = gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                     "empty prompt on a session without logits: nothing to continue from");
        goto fail;
    }
    st = gt_sampler_create(m->cfg.n_vocab, &so, &g->sampler, err);
    if (st != GEIST_OK) goto fail;
    /* cpu_scalar samples in plain C too; a device backend's logits are sampled at the CPU's
     * best (create's default; the same ids either way: plain loops cost Gemma 3's 262,144
     * logits 0.4 ms a token against 0.05) */
    if (!m->backend->device) gt_sampler_set_simd(g->sampler, m->backend->simd);
    st = gt_detok_create(m, 0, &g->detok, err);
    if (st != GEIST_OK) goto fail;
    if (in->grammar) {
        st = gt_matcher_create(in->grammar, &g->matcher, err);
        if (st != GEIST_OK) goto fail;
        const size_t nv = (size_t)m->cfg.n_vocab;
        g->mask = gt_malloc_array((nv + 31) / 32 + 1, sizeof(uint32_t));
        g->masked = gt_malloc_array(nv ? nv : 1, sizeof(float));
        if (!g->mask || !g->masked) {
            st = gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (grammar mask)");
            goto fail;
        }
        g->grammar_end = GEIST_FINISH_GRAMMAR;
    }
    if (g->n_actions && in->action_choice == GEIST_ACTION_REQUIRED) {
        st = end_to_call_prepare(g, in->grammar, err);
        if (st != GEIST_OK) goto fail;
    }
    /* the rewind comes last: nothing above changed the session (but bring_logits, which runs
     * only for an empty prompt: no rewind then) */
    if (kept < s->n_past) {
        gt_err ignored = {0};
        if (gt_session_truncate(s, kept, &ignored) != GEIST_OK) {
            /* a sliding-window ring no longer holds what the shorter session needs: start over
             * from the shared prefix (or empty) */
            gt_session_reset(s);
            kept = s->n_past;
            st = set_prompt(g, conv + kept, n_conv - (size_t)kept, err);
            if (st != GEIST_OK) goto fail;
        }
    }
    g->n_reused = kept;
    seed_history(g, kept, so.penalty_last_n);
    gt_json_free(tools);
    free(conv);
    free(section);
    free(sys_owned);
    free(view);
    free(text_owned);
    return GEIST_OK;
fail:
    gt_json_free(tools);
    free(conv);
    free(section);
    free(sys_owned);
    free(view);
    free(text_owned);
    gt_gen_free(g);
    return st;
}

/* Where stop strings may match: the whole reply, or with actions only the speech. The speech is
 * one line (the grammar keeps newlines out of it), so the first newline is where the call line
 * starts: the call is the grammar's, and a stop string of the request (or a template end string
 * such as "<|im_end|>" inside a string argument) must not cut it, nor may a stop string that
 * holds or follows that newline (stop "\n" would otherwise end every reply before its call). */
static size_t stop_limit(const gt_gen *g) {
    if (!g->n_actions || !g->out) return g->out_len;
    const char *nl = memchr(g->out, '\n', g->out_len);
    return nl ? (size_t)(nl - g->out) : g->out_len;
}

/* Trailing bytes of out[from..len) that could still begin a stop string. */
static size_t held_back(const gt_gen *g, size_t from, size_t len) {
    size_t keep = 0;
    for (size_t i = 0; i < g->n_stop; i++) {
        const size_t sl = strlen(g->stop[i]);
        for (size_t k = sl > 0 ? sl - 1 : 0; k > keep; k--) {
            if (k > len - from) continue;
            if (memcmp(g->out + len - k, g->stop[i], k) == 0) {
                keep = k;
                break;
            }
        }
    }
    return keep;
}

/* First stop string occurrence in out that may involve bytes after `from` (SIZE_MAX: none). */
static size_t stop_hit(const gt_gen *g, size_t from) {
    size_t best = SIZE_MAX;
    const size_t lim = stop_limit(g);
    for (size_t i = 0; i < g->n_stop; i++) {
        const size_t sl = strlen(g->stop[i]);
        if (sl == 0 || sl > lim) continue;
        const size_t start = from + 1 > sl ? from + 1 - sl : 0;
        for (size_t p = start; p + sl <= lim && p < best; p++)
            if (memcmp(g->out + p, g->stop[i], sl) == 0) {
                best = p;
                break;
            }
    }
    return best;
}

/* Actions: the call starts with the marker at the start of a line; the grammar keeps speech
 * lines from starting with '<', so a '<' at a line start is the marker. Where it starts in out
 * (looking at bytes from `from` on), or SIZE_MAX. */
static size_t marker_hit(const gt_gen *g, size_t from) {
    for (size_t p = from; p < g->out_len; p++)
        if (g->out[p] == '<' && (p == 0 || g->out[p - 1] == '\n')) return p;
    return SIZE_MAX;
}

/* The streamed speech ends before the newline that precedes the marker. */
static size_t speech_end(const gt_gen *g) {
    return g->call_at > 0 ? g->call_at - 1 : 0;
}

/* Trailing bytes not yet streamed that may begin the call line: a final newline. */
static size_t marker_held(const gt_gen *g) {
    return g->out_len > g->emitted && g->out[g->out_len - 1] == '\n' ? 1 : 0;
}

static bool out_append(gt_gen *g, const char *p, size_t n) {
    if (g->out_len + n + 1 > g->out_cap) {
        size_t cap = g->out_cap ? g->out_cap : 256;
        while (cap < g->out_len + n + 1) cap *= 2;
        char *o = realloc(g->out, cap);
        if (!o) return false;
        g->out = o;
        g->out_cap = cap;
    }
    memcpy(g->out + g->out_len, p, n);
    g->out_len += n;
    g->out[g->out_len] = '\0';
    return true;
}

bool gt_gen_plain_greedy(const gt_gen *g) {
    return !g->matcher && gt_sampler_plain_greedy(g->sampler);
}

geist_status gt_gen_take_greedy(gt_gen *g, int32_t id, int32_t *out_id, gt_err *err) {
    return gt_sampler_take_greedy(g->sampler, id, out_id, err);
}

geist_status gt_gen_sample(gt_gen *g, const float *logits, int32_t *out_id, gt_err *err) {
    if (!g->matcher) return gt_sampler_sample(g->sampler, logits, out_id, err);
    *out_id = -1;
    gt_matcher *m = g->matcher;
    if (gt_matcher_is_done(m)) {
        g->grammar_end = GEIST_FINISH_STOP;
        return GEIST_OK;
    }
    g->grammar_end = GEIST_FINISH_GRAMMAR;
    /* every token is at most max_token_bytes long: fewer tokens left than that bound needs can
     * never complete the grammar */
    const uint64_t left = g->max_tokens > g->n_gen ? (uint64_t)(g->max_tokens - g->n_gen) : 0;
    if (!gt_matcher_can_end(m) &&
        (uint64_t)gt_matcher_min_bytes(m) > left * gt_grammar_max_token_bytes_of(m)) {
        gt_fail(&g->grammar_err, GEIST_ERR_CAPACITY,
                "grammar: cannot be completed within the %llu tokens left",
                (unsigned long long)left);
        return GEIST_OK;
    }
    if (gt_matcher_fill_mask(m, g->mask, &g->grammar_err) != GEIST_OK) return GEIST_OK;
    /* the masked row: a word of the mask at a time, whole words (none allowed: every token of a
     * structural context; all allowed: most of a string's) without looking at single bits */
    const int32_t n = g->model->cfg.n_vocab;
    uint32_t any = 0;
    for (int32_t w = 0; w * 32 < n; w++) {
        const uint32_t bits = g->mask[w];
        const int32_t at = w * 32, cnt = at + 32 < n ? 32 : n - at;
        float *dst = g->masked + at;
        any |= bits;
        if (bits == 0) {
            for (int32_t i = 0; i < cnt; i++) dst[i] = -INFINITY;
        } else if (bits == UINT32_MAX) {
            memcpy(dst, logits + at, (size_t)cnt * sizeof *dst);
        } else {
            for (int32_t i = 0; i < cnt; i++) dst[i] = (bits >> i) & 1u ? logits[at + i] : -INFINITY;
        }
    }
    gt_gen_end_to_call(g, logits, g->masked, (int32_t)left, gt_matcher_min_bytes(m));
    if (any == 0) {
        gt_fail(&g->grammar_err, GEIST_ERR_INVALID_ARGUMENT, "grammar: no token is allowed here");
        return GEIST_OK;
    }
    geist_status st = gt_sampler_sample(g->sampler, g->masked, out_id, err);
    if (st == GEIST_ERR_INVALID_ARGUMENT) { /* every allowed logit was NaN or -inf: no candidate */
        *out_id = -1;
        gt_fail(&g->grammar_err, st, "grammar: no allowed token has a finite logit");
        return GEIST_OK;
    }
    return st;
}

gt_gen_step gt_gen_token(gt_gen *g, int32_t id, const char **piece, size_t *piece_len,
                         int32_t *finish_after, gt_err *err) {
    const geist_session *s = g->session;
    *piece = "";
    *piece_len = 0;
    *finish_after = -1;
    if (id < 0) { /* the grammar ended the request (gt_gen_sample) */
        *finish_after = g->grammar_end;
        return GT_GEN_END;
    }
    if (g->matcher && gt_matcher_accept(g->matcher, id, err) != GEIST_OK) return GT_GEN_FAILED;
    if (gt_token_is_end(g->model, id)) {
        *finish_after = GEIST_FINISH_STOP;
        return GT_GEN_END;
    }
    if (s->n_past >= s->max_seq_len) {
        *finish_after = GEIST_FINISH_CAPACITY;
        return GT_GEN_END;
    }
    char buf[256];
    size_t len = 0;
    char *big = NULL;
    const char *text = buf;
    geist_status st = gt_detok_push(g->detok, id, buf, sizeof buf, &len, err);
    if (st == GEIST_ERR_BUFFER_TOO_SMALL) {
        big = malloc(len);
        st = big ? gt_detok_push(g->detok, id, big, len, &len, err)
                 : gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (reply text)");
        text = big;
    }
    const size_t before = g->out_len;
    const bool ok = st == GEIST_OK && out_append(g, text, len);
    free(big);
    if (!ok) {
        if (st == GEIST_OK) gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (reply text)");
        return GT_GEN_FAILED;
    }
    g->n_gen++;
    size_t upto;
    if (g->n_actions && g->call_at == SIZE_MAX) g->call_at = marker_hit(g, before);
    const size_t hit = stop_hit(g, before);
    if (hit != SIZE_MAX) {
        g->out_len = hit;
        g->out[hit] = '\0';
        upto = hit;
        *finish_after = GEIST_FINISH_STOP;
    } else {
        const size_t lim = stop_limit(g);
        size_t keep = lim == g->out_len ? held_back(g, g->emitted, g->out_len) : 0;
        const size_t mk = g->n_actions && g->call_at == SIZE_MAX ? marker_held(g) : 0;
        upto = g->out_len - (mk > keep ? mk : keep);
        if (g->matcher && gt_matcher_is_done(g->matcher)) *finish_after = GEIST_FINISH_STOP;
        else if (g->n_gen >= g->max_tokens)
            *finish_after = g->matcher && !gt_matcher_can_end(g->matcher) ? GEIST_FINISH_GRAMMAR
                                                                         : GEIST_FINISH_LENGTH;
    }
    if (g->call_at != SIZE_MAX) {
        if (g->call_at > g->out_len) g->call_at = SIZE_MAX; /* a stop string in the speech */
        else if (upto > speech_end(g)) upto = speech_end(g);
    }
    if (upto > g->emitted) {
        *piece = g->out + g->emitted;
        *piece_len = upto - g->emitted;
        g->emitted = upto;
    }
    return GT_GEN_CONTINUE;
}

const char *gt_gen_reply(const gt_gen *g, size_t *len) {
    *len = g->emitted;
    return g->out ? g->out : "";
}

const char *gt_gen_action(const gt_gen *g, size_t *len) {
    *len = 0;
    if (!g->n_actions || g->call_at == SIZE_MAX || !g->out) return NULL;
    const size_t from = g->call_at + GT_ACTION_MARKER_LEN;
    if (from > g->out_len || memcmp(g->out + g->call_at, GT_ACTION_MARKER, GT_ACTION_MARKER_LEN))
        return NULL;
    const char *json = NULL;
    if (!gt_actions_parse_call(g->out + from, g->out_len - from, g->actions, g->n_actions, &json,
                               len))
        return NULL;
    return json;
}
