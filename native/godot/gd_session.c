/* gd_session.c — GeistSession (RefCounted): one conversation on the core's runtime, its
 * transcript, and its save format (snapshot/restore). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_classes.h"

/* ---------------------------------------------------------------------------------------------- */
/* GeistSession                                                                                   */

void sess_set_error(gsession *s, int code, const char *msg) {
    s->err_code = code;
    snprintf(s->err, sizeof s->err, "%.500s", msg);
}

void transcript_clear(gsession *s) {
    for (size_t i = 0; i < s->n_msgs; i++) {
        free(s->msgs[i].role);
        free(s->msgs[i].content);
    }
    s->n_msgs = 0;
}

int transcript_add(gsession *s, const char *role, const char *content) {
    if (s->n_msgs == s->cap_msgs) {
        size_t nc = s->cap_msgs ? s->cap_msgs * 2 : 8;
        gmsg *nm = realloc(s->msgs, nc * sizeof *nm);
        if (!nm)
            return 0;
        s->msgs = nm;
        s->cap_msgs = nc;
    }
    s->msgs[s->n_msgs].role = sdup(role);
    s->msgs[s->n_msgs].content = sdup(content);
    s->n_msgs++;
    return 1;
}

GDExtensionObjectPtr session_alloc(void) {
    gsession *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    gv_nil(&s->model_ref);
    gv_nil(&s->stop);
    gv_nil(&s->actions);
    s->ctx = (geist_context_policy){1, -1, 1, -1};
    s->max_tokens = 64;
    geist_sampler_options_default(&s->sampler);
    s->obj = make_object("RefCounted", "GeistSession", s);
    return s->obj;
}

GDExtensionObjectPtr session_create_inst(void *ud, GDExtensionBool notify) {
    (void)ud;
    (void)notify;
    return session_alloc();
}

void session_free_inst(void *ud, GDExtensionClassInstancePtr inst) {
    (void)ud;
    gsession *s = inst;
    if (s->rs) {
        gr_sess_free(ENG ? ENG->rt : NULL, s->rs); /* cancels and waits for the step to end */
        s->rs = NULL;
        if (ENG)
            ENG->live_sessions--;
    }
    if (s->model)
        s->model->n_sessions--;
    transcript_clear(s);
    free(s->msgs);
    free(s->system);
    free(s->json_schema);
    free(s->last_action);
    gv_free(&s->actions);
    gv_free(&s->stop);
    gv_free(&s->model_ref); /* may free the model now */
    free(s);
}

/* create_session() / configure() options: one entry per key (kind as in pdef; "kv_mode" and
 * "seed" also size the session at creation). */
typedef struct optdef {
    const char *key;
    int kind;
    size_t off;
} optdef;
#define SO(f) offsetof(gsession, f)
static const optdef SESSION_OPTS[] = {
    {"temperature", PK_F64, SO(sampler.temperature)},
    {"top_k", PK_I32, SO(sampler.top_k)},
    {"top_p", PK_F64, SO(sampler.top_p)},
    {"min_p", PK_F64, SO(sampler.min_p)},
    {"repeat_penalty", PK_F64, SO(sampler.repeat_penalty)},
    {"frequency_penalty", PK_F64, SO(sampler.frequency_penalty)},
    {"presence_penalty", PK_F64, SO(sampler.presence_penalty)},
    {"penalty_last_n", PK_I32, SO(sampler.penalty_last_n)},
    {"max_tokens", PK_I32, SO(max_tokens)},
    {"priority", PK_I32, SO(priority)},
    {"seed", PK_I64, SO(seed)},
    {"kv_mode", PK_I32, SO(kv_mode)},
    {"system", PK_STR, SO(system)},
    {"stop", PK_STRS, SO(stop)},
    {"trim", PK_BOOL, SO(ctx.trim)},
    {"keep_first", PK_I32, SO(ctx.keep_first)},
    {"keep_last", PK_I32, SO(ctx.keep_last)},
    {"reply_reserve", PK_I32, SO(ctx.reply_reserve)},
};
#undef SO

static int opt_type_ok(int kind, int t) {
    switch (kind) {
    case PK_F64: return t == T_FLOAT || t == T_INT;
    case PK_I32:
    case PK_I64: return t == T_INT;
    case PK_BOOL: return t == T_BOOL || t == T_INT;
    case PK_STR: return t == T_STRING || t == GDEXTENSION_VARIANT_TYPE_STRING_NAME;
    default: return t == GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY || t == T_ARRAY;
    }
}

/* Checks every key and type of opts (s == NULL), or applies them to s. 1 if all are valid;
 * else 0 with the first problem in err. */
int session_options(gsession *s, const gvar *opts, char *err, size_t cap) {
    if (!opts || gv_type(opts) == T_NIL)
        return 1;
    if (gv_type(opts) != T_DICT) {
        snprintf(err, cap, "options must be a Dictionary");
        return 0;
    }
    gopq m = gd_sn("keys");
    gvar keys;
    GDExtensionCallError ce;
    GD.variant_call((GDExtensionVariantPtr)opts, &m, NULL, 0, &keys, &ce);
    gd_sn_free(&m);
    int ok = 1;
    int64_t n = gv_size(&keys);
    for (int64_t i = 0; i < n && ok; i++) {
        gvar k, v;
        if (!gv_index(&keys, i, &k))
            continue;
        char *key = gv_to_utf8(&k, NULL);
        const optdef *d = NULL;
        for (size_t j = 0; key && j < COUNT(SESSION_OPTS) && !d; j++)
            if (strcmp(SESSION_OPTS[j].key, key) == 0)
                d = &SESSION_OPTS[j];
        if (!d) {
            snprintf(err, cap, "unknown option '%s' (known: temperature, top_k, top_p, min_p, "
                     "repeat_penalty, frequency_penalty, presence_penalty, penalty_last_n, "
                     "max_tokens, priority, seed, kv_mode, system, stop, trim, keep_first, "
                     "keep_last, reply_reserve)", key ? key : "?");
            ok = 0;
        } else if (GD.variant_get_keyed(opts, &k, &v, &(GDExtensionBool){0}), 1) {
            if (!opt_type_ok(d->kind, gv_type(&v))) {
                snprintf(err, cap, "option '%s' has the wrong type", key);
                ok = 0;
            } else if (s) {
                char *base = (char *)s + d->off;
                switch (d->kind) {
                case PK_F64: *(float *)base = (float)gv_to_float(&v, 0); break;
                case PK_I32: *(int32_t *)base = (int32_t)gv_to_int(&v, 0); break;
                case PK_BOOL: *(int32_t *)base = gv_to_int(&v, 0) != 0; break;
                case PK_I64: *(uint64_t *)base = (uint64_t)gv_to_int(&v, 0); break;
                case PK_STR:
                    free(*(char **)base);
                    *(char **)base = gv_to_utf8(&v, NULL);
                    break;
                default:
                    gv_free((gvar *)base);
                    GD.variant_new_copy((gvar *)base, &v);
                    break;
                }
            }
            gv_free(&v);
        }
        free(key);
        gv_free(&k);
    }
    gv_free(&keys);
    if (s)
        s->sampler.seed = s->seed;
    return ok;
}

GDExtensionObjectPtr session_new(gmodel *m, int32_t max_seq_len, const gvar *opts) {
    char err[512];
    if (!m->m) {
        model_set_error(m, E_UNCONFIGURED, "create_session(): the model is not loaded");
        return NULL;
    }
    if (!session_options(NULL, opts, err, sizeof err)) {
        char msg[600];
        snprintf(msg, sizeof msg, "create_session(): %s", err);
        model_set_error(m, E_INVALID_PARAM, msg);
        gd_error(msg);
        return NULL;
    }
    geist_session_options so;
    geist_session_options_default(&so);
    so.max_seq_len = max_seq_len;
    gvar v;
    if (opts && gv_type(opts) == T_DICT && gv_dict_get(opts, "kv_mode", &v)) {
        so.kv_mode = (int32_t)gv_to_int(&v, so.kv_mode);
        gv_free(&v);
    }
    if (opts && gv_type(opts) == T_DICT && gv_dict_get(opts, "seed", &v)) {
        so.seed = (uint64_t)gv_to_int(&v, 0);
        gv_free(&v);
    }
    gr_sess *rs = NULL;
    geist_status st = gr_sess_create(ENG->rt, m->m, &so, &rs, err, sizeof err);
    if (st != GEIST_OK) {
        model_set_error(m, err_of(st), err);
        return NULL;
    }
    GDExtensionObjectPtr o = session_alloc();
    gsession *s = inst_of(o, TAG_SESSION);
    s->rs = rs;
    s->model = m;
    s->max_seq_len = max_seq_len;
    s->kv_mode = so.kv_mode;
    s->seed = so.seed;
    s->sampler.seed = so.seed;
    gv_obj(&s->model_ref, m->obj);
    m->n_sessions++;
    ENG->live_sessions++;
    session_options(s, opts, err, sizeof err);
    m->err_code = 0;
    m->err[0] = 0;
    return o;
}

/* GeistNPC.actions (an Array of {name, description, parameters} Dictionaries; parameters a
 * Dictionary schema or its JSON text) as geist_actions; the strings are malloc'd into strs. The
 * core checks names and schemas at submit. */
typedef struct gacts {
    geist_action *v;
    size_t n;
    char **strs;
    size_t n_strs;
} gacts;

static void acts_free(gacts *a) {
    for (size_t i = 0; i < a->n_strs; i++)
        free(a->strs[i]);
    free(a->strs);
    free(a->v);
    memset(a, 0, sizeof *a);
}

static char *acts_keep(gacts *a, char *str) {
    if (str)
        a->strs[a->n_strs++] = str;
    return str;
}

static char *dict_text(const gvar *d, const char *key, int json) {
    gvar v;
    if (!gv_dict_get(d, key, &v))
        return NULL;
    char *out = NULL;
    if (gv_type(&v) == T_NIL)
        out = NULL;
    else if (json && gv_type(&v) == T_DICT)
        out = variant_to_json(&v);
    else
        out = gv_to_utf8(&v, NULL);
    gv_free(&v);
    return out;
}

static int acts_build(const gvar *arr, gacts *a, char *err, size_t cap) {
    memset(a, 0, sizeof *a);
    int64_t n = gv_type(arr) == T_ARRAY ? gv_size(arr) : 0;
    if (n <= 0)
        return 1;
    a->v = calloc((size_t)n, sizeof *a->v);
    a->strs = calloc((size_t)n * 3, sizeof *a->strs);
    if (!a->v || !a->strs) {
        acts_free(a);
        snprintf(err, cap, "out of memory");
        return 0;
    }
    for (int64_t i = 0; i < n; i++) {
        gvar d;
        if (!gv_index(arr, i, &d) || gv_type(&d) != T_DICT) {
            if (gv_type(&d) != T_NIL)
                gv_free(&d);
            snprintf(err, cap,
                     "GeistNPC.actions[%lld] must be a Dictionary {name, description, "
                     "parameters}",
                     (long long)i);
            acts_free(a);
            return 0;
        }
        geist_action *ac = &a->v[a->n++];
        ac->name = acts_keep(a, dict_text(&d, "name", 0));
        ac->description = acts_keep(a, dict_text(&d, "description", 0));
        ac->parameters = acts_keep(a, dict_text(&d, "parameters", 1));
        gv_free(&d);
        if (!ac->name) {
            snprintf(err, cap, "GeistNPC.actions[%lld] has no name", (long long)i);
            acts_free(a);
            return 0;
        }
    }
    return 1;
}

int session_submit(gsession *s, const gr_request *base) {
    if (!s->rs) {
        sess_set_error(s, E_UNCONFIGURED, "the session has no model (use model.create_session)");
        return E_UNCONFIGURED;
    }
    if (s->busy) {
        sess_set_error(s, E_BUSY, "a request is already running on this session");
        return E_BUSY;
    }
    gr_request r = *base;
    r.sampler = s->sampler;
    size_t n_stop = 0;
    char **stop = strs_of(&s->stop, &n_stop);
    r.stop = (const char *const *)stop;
    r.n_stop = n_stop;
    r.max_tokens = base->max_tokens ? base->max_tokens : s->max_tokens;
    r.priority = s->priority;
    r.user_data = GD.object_get_instance_id(s->obj);
    /* constrained output: ask_json()'s schema (this request only), else the NPC's actions */
    char *schema = s->json_schema;
    s->json_schema = NULL;
    gacts acts;
    char aerr[256];
    if (!schema && !acts_build(&s->actions, &acts, aerr, sizeof aerr)) {
        strs_free(stop, n_stop);
        sess_set_error(s, E_INVALID_PARAM, aerr);
        return E_INVALID_PARAM;
    }
    if (schema) {
        memset(&acts, 0, sizeof acts);
        r.grammar = schema;
        r.grammar_kind = GEIST_GRAMMAR_JSON_SCHEMA;
    } else if (acts.n) {
        r.actions = acts.v;
        r.n_actions = acts.n;
        r.action_choice = s->action_choice;
    }
    free(s->last_action);
    s->last_action = NULL;
    uint64_t id = 0;
    geist_status st = gr_submit(ENG->rt, s->rs, &r, &id);
    char cerr[512] = "";
    if (st != GEIST_OK && st != GEIST_ERR_STATE)
        geist_last_error(cerr, sizeof cerr); /* the core's reason (a bad schema, ...) */
    strs_free(stop, n_stop);
    acts_free(&acts);
    free(schema);
    if (st != GEIST_OK) {
        sess_set_error(s, err_of(st), st == GEIST_ERR_STATE ? "a request is already running"
                                      : cerr[0]             ? cerr
                                                            : "cannot queue the request");
        return err_of(st);
    }
    s->request_id = id;
    s->busy = 1;
    s->last_start_ms = now_ms();
    s->last_first_token_ms = 0;
    engine_tick_connect();
    return E_OK;
}

/* Runs the whole transcript (system prompt first) through the chat template. */
int session_chat_transcript(gsession *s, int trim) {
    size_t n = s->n_msgs + (s->system && s->system[0] ? 1 : 0);
    gr_msg *msgs = malloc((n ? n : 1) * sizeof *msgs);
    if (!msgs)
        return E_OOM;
    size_t k = 0;
    if (s->system && s->system[0])
        msgs[k++] = (gr_msg){"system", s->system};
    for (size_t i = 0; i < s->n_msgs; i++)
        msgs[k++] = (gr_msg){s->msgs[i].role, s->msgs[i].content};
    gr_request r;
    memset(&r, 0, sizeof r);
    r.messages = msgs;
    r.n_messages = k;
    r.context = s->ctx;
    if (!trim)
        r.context.trim = 0;
    int rc = session_submit(s, &r);
    free(msgs);
    return rc;
}

void ms_say(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gsession *s = self;
    if (s->busy) {
        sess_set_error(s, E_BUSY, "a request is already running on this session");
        gv_int(ret, E_BUSY);
        return;
    }
    char *text = a_str(a, n, 0, NULL);
    if (text && !text[0]) {
        free(text);
        sess_set_error(s, E_INVALID_PARAM, "say(): the line is empty");
        gv_int(ret, E_INVALID_PARAM);
        return;
    }
    sess_set_error(s, E_OK, "");
    if (!text || !transcript_add(s, "user", text)) {
        free(text);
        gv_int(ret, E_OOM);
        return;
    }
    free(text);
    int rc = session_chat_transcript(s, 1);
    if (rc != E_OK) {
        s->n_msgs--;
        free(s->msgs[s->n_msgs].role);
        free(s->msgs[s->n_msgs].content);
    } else {
        s->pending_user = 1;
    }
    gv_int(ret, rc);
}

void ms_chat(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gsession *s = self;
    if (s->busy) {
        sess_set_error(s, E_BUSY, "a request is already running on this session");
        gv_int(ret, E_BUSY);
        return;
    }
    if (n < 1 || gv_type(a[0]) != T_ARRAY) {
        sess_set_error(s, E_INVALID_PARAM, "chat() needs an Array of {role, content}");
        gv_int(ret, E_INVALID_PARAM);
        return;
    }
    /* every message is checked before the transcript is replaced */
    gsession tmp;
    memset(&tmp, 0, sizeof tmp);
    int64_t cnt = gv_size(a[0]);
    char why[256] = "";
    if (cnt <= 0)
        snprintf(why, sizeof why, "chat(): the Array of messages is empty");
    for (int64_t i = 0; i < cnt && !why[0]; i++) {
        gvar item, role, content;
        if (!gv_index(a[0], i, &item))
            continue;
        char *r = NULL, *c = NULL;
        if (gv_type(&item) != T_DICT)
            snprintf(why, sizeof why, "chat(): message %lld is not a Dictionary", (long long)i);
        else if (!gv_dict_get(&item, "role", &role))
            snprintf(why, sizeof why, "chat(): message %lld has no role", (long long)i);
        else {
            if (gv_type(&role) == T_STRING)
                r = gv_to_utf8(&role, NULL);
            gv_free(&role);
            if (!r || (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")))
                snprintf(why, sizeof why,
                         "chat(): message %lld: role must be \"system\", \"user\" or "
                         "\"assistant\"", (long long)i);
            else if (!gv_dict_get(&item, "content", &content))
                snprintf(why, sizeof why, "chat(): message %lld has no content", (long long)i);
            else {
                if (gv_type(&content) == T_STRING)
                    c = gv_to_utf8(&content, NULL);
                else
                    snprintf(why, sizeof why, "chat(): message %lld: content must be a String",
                             (long long)i);
                gv_free(&content);
            }
        }
        if (!why[0])
            transcript_add(&tmp, r, c);
        free(r);
        free(c);
        gv_free(&item);
    }
    if (why[0]) {
        transcript_clear(&tmp);
        free(tmp.msgs);
        sess_set_error(s, E_INVALID_PARAM, why);
        gd_error(why);
        gv_int(ret, E_INVALID_PARAM);
        return;
    }
    transcript_clear(s);
    free(s->msgs);
    s->msgs = tmp.msgs;
    s->n_msgs = tmp.n_msgs;
    s->cap_msgs = tmp.cap_msgs;
    sess_set_error(s, E_OK, "");
    /* chat() gives the whole conversation itself: no separate system prompt, no trimming */
    char *sys = s->system;
    s->system = NULL;
    int rc = session_chat_transcript(s, 0);
    s->system = sys;
    s->pending_user = rc == E_OK;
    gv_int(ret, rc);
}

void ms_cancel(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gsession *s = self;
    int rc = E_OK;
    if (s->busy)
        rc = err_of(gr_cancel(ENG->rt, s->request_id));
    gv_int(ret, rc);
}

void ms_reset(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gsession *s = self;
    if (s->busy || !s->rs) {
        sess_set_error(s, E_BUSY, "reset(): a request is running (cancel() it first)");
        gv_int(ret, s->rs ? E_BUSY : E_UNCONFIGURED);
        return;
    }
    transcript_clear(s);
    gv_int(ret, err_of(gr_sess_reset(ENG->rt, s->rs)));
}

void ms_tokens_used(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gsession *s = self;
    gv_int(ret, s->rs ? geist_session_n_past(gr_sess_session(s->rs)) : 0);
}

void ms_max_seq_len(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_int(ret, ((gsession *)self)->max_seq_len);
}

void ms_memory(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gsession *s = self;
    geist_memory_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    if (s->rs)
        geist_session_memory(gr_sess_session(s->rs), &r);
    mem_dict(ret, &r);
    gv_dict_set_int(ret, "max_seq_len", s->max_seq_len);
    gv_dict_set_int(ret, "kv_mode", s->kv_mode);
    gv_dict_set_int(ret, "total", (int64_t)(r.kv_cache + r.scratch + r.other));
}

void ms_is_busy(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_bool(ret, ((gsession *)self)->busy);
}

void ms_get_error(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_str(ret, ((gsession *)self)->err);
}

static void ms_configure(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                         gvar *ret) {
    gsession *s = self;
    char err[512];
    /* all or nothing: checked first, then applied */
    if (n < 1 || !session_options(NULL, a[0], err, sizeof err)) {
        char msg[600];
        snprintf(msg, sizeof msg, "configure(): %s", n < 1 ? "needs a Dictionary" : err);
        sess_set_error(s, E_INVALID_PARAM, msg);
        gd_error(msg);
        gv_int(ret, E_INVALID_PARAM);
        return;
    }
    session_options(s, a[0], err, sizeof err);
    sess_set_error(s, E_OK, "");
    gv_int(ret, E_OK);
}

void ms_set_system(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)ret;
    gsession *s = self;
    free(s->system);
    s->system = a_str(a, n, 0, NULL);
}

void ms_get_system(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gsession *s = self;
    gv_str(ret, s->system ? s->system : "");
}

void ms_transcript(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gsession *s = self;
    gv_array(ret);
    for (size_t i = 0; i < s->n_msgs; i++) {
        gvar d;
        gv_dict(&d);
        gv_dict_set_str(&d, "role", s->msgs[i].role);
        gv_dict_set_str(&d, "content", s->msgs[i].content);
        gv_array_push(ret, &d);
    }
}

void ms_last_stats(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gsession *s = self;
    gv_dict(ret);
    gv_dict_set_int(ret, "prompt_tokens", s->last_prompt);
    gv_dict_set_int(ret, "reused_tokens", s->last_reused);
    gv_dict_set_int(ret, "generated_tokens", s->last_tokens);
    gv_dict_set_float(ret, "prefill_ms", s->last_prefill_ms);
    gv_dict_set_float(ret, "decode_ms", s->last_decode_ms);
    gv_dict_set_float(ret, "wall_ms", s->last_end_ms - s->last_start_ms);
    gv_dict_set_float(ret, "first_token_ms",
                      s->last_first_token_ms > 0 ? s->last_first_token_ms - s->last_start_ms : 0);
    gv_dict_set_int(ret, "finish_reason", s->last_finish);
    gv_dict_set_int(ret, "restored_from_image", s->restored_image);
}

static const mdef SESSION_METHODS[] = {
    {"say", ms_say, T_INT, NULL, 1, {{"text", T_STRING, NULL}}, NULL, 0},
    {"chat", ms_chat, T_INT, NULL, 1, {{"messages", T_ARRAY, NULL}}, NULL, 0},
    {"cancel", ms_cancel, T_INT, NULL, 0, {{0}}, NULL, 0},
    {"reset", ms_reset, T_INT, NULL, 0, {{0}}, NULL, 0},
    {"snapshot", ms_snapshot, T_BYTES, NULL, 0, {{0}}, NULL, 0},
    {"restore", ms_restore, T_INT, NULL, 1, {{"snapshot", T_BYTES, NULL}}, NULL, 0},
    {"get_tokens_used", ms_tokens_used, T_INT, NULL, 0, {{0}}, NULL, 0},
    {"get_max_seq_len", ms_max_seq_len, T_INT, NULL, 0, {{0}}, NULL, 0},
    {"memory", ms_memory, T_DICT, NULL, 0, {{0}}, NULL, 0},
    {"is_busy", ms_is_busy, T_BOOL, NULL, 0, {{0}}, NULL, 0},
    {"get_error", ms_get_error, T_STRING, NULL, 0, {{0}}, NULL, 0},
    {"configure", ms_configure, T_INT, NULL, 1, {{"options", T_DICT, NULL}}, NULL, 0},
    {"set_system_prompt", ms_set_system, -1, NULL, 1, {{"text", T_STRING, NULL}}, NULL, 0},
    {"get_system_prompt", ms_get_system, T_STRING, NULL, 0, {{0}}, NULL, 0},
    {"get_transcript", ms_transcript, T_ARRAY, NULL, 0, {{0}}, NULL, 0},
    {"last_stats", ms_last_stats, T_DICT, NULL, 0, {{0}}, NULL, 0},
};


void session_register(void) {
    reg_class("GeistSession", "RefCounted", session_create_inst, session_free_inst, 0);
    reg_methods("GeistSession", SESSION_METHODS, COUNT(SESSION_METHODS));
    reg_property("GeistSession", "tokens_used", T_INT, HINT_NONE, NULL, NULL, "get_tokens_used",
                 USAGE_READONLY_EDITOR);
    reg_property("GeistSession", "system_prompt", T_STRING, HINT_ML, NULL, "set_system_prompt",
                 "get_system_prompt", USAGE_DEFAULT);
    reg_signal("GeistSession", "token", "piece");
    reg_signal("GeistSession", "finished", "text");
    reg_signal("GeistSession", "failed", "message");
    static const char *const kv[] = {"KV_F32", "KV_F16", "KV_INT8", "KV_INT4", "KV_KIVI2"};
    for (int i = 0; i < GEIST_N_KV_MODES; i++)
        reg_const("GeistSession", "KVMode", kv[i], i);
    static const char *const fin[] = {"FINISH_STOP", "FINISH_LENGTH", "FINISH_CAPACITY",
                                      "FINISH_CANCELLED", "FINISH_GRAMMAR"};
    for (int i = 0; i < (int)COUNT(fin); i++)
        reg_const("GeistSession", "FinishReason", fin[i], i);
    reg_const("GeistSession", "FinishReason", "FINISH_FAILED", -1);
    TAG_SESSION = class_tag("GeistSession");
}
