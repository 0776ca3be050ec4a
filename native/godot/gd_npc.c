/* gd_npc.c — GeistNPC (Node): a persona, a model, a sampler (a shared GeistSampler or its own
 * properties), the context policy and a session created on first use.
 *
 * say() returns the `completed` signal of a GeistReply of its own: every line gets its own
 * reply. say() while the NPC is busy queues the line (oldest first); cancel() ends the running
 * reply and every queued one. Changing model, max_seq_len or kv_mode makes a new session on the
 * next line and keeps the conversation (the next reply runs it again from the start). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_classes.h"

static int npc_check_idle(void *self, const pdef *p, const gvar *v, char *err, size_t cap);
static int npc_check_model(void *self, const pdef *p, const gvar *v, char *err, size_t cap);
static int npc_check_sampler(void *self, const pdef *p, const gvar *v, char *err, size_t cap);
static void npc_remake(void *self, const pdef *p);
static void npc_changed(void *self, const pdef *p);

#define KV_HINT "F32,F16,INT8,INT4,KIVI2"
#define O(f) offsetof(gnpc, f)
static const pdef NPC_PROPS[] = {
    {"model", T_OBJECT, HINT_RES, "GeistModel", O(model_var), PK_OBJ, 0, NULL, 1, 0,
     npc_check_model, npc_remake, 0},
    {"persona", T_STRING, HINT_ML, NULL, O(persona), PK_STR, 0,
     "You are a friendly villager. Answer in one or two short sentences.", 1, 0, NULL,
     npc_changed, 0},
    {"max_seq_len", T_INT, HINT_RANGE, "16,4096,16,or_greater", O(max_seq_len), PK_I32, 256, NULL,
     1, 1 << 20, npc_check_idle, npc_remake, 0},
    {"kv_mode", T_INT, HINT_ENUM, KV_HINT, O(kv_mode), PK_I32, GEIST_KV_F16, NULL, 0,
     GEIST_N_KV_MODES - 1, npc_check_idle, npc_remake, 0},
    {"sampler", T_OBJECT, HINT_RES, "GeistSampler", O(sampler_var), PK_OBJ, 0, NULL, 1, 0,
     npc_check_sampler, npc_changed, 0},
    {"temperature", T_FLOAT, HINT_RANGE, "0,2,0.05", O(temperature), PK_F64, 0.7, NULL, 0, 100,
     NULL, npc_changed, 0},
    {"top_k", T_INT, HINT_RANGE, "0,200,1", O(top_k), PK_I32, 40, NULL, 0, 1e9, NULL, npc_changed,
     0},
    {"top_p", T_FLOAT, HINT_RANGE, "0,1,0.01", O(top_p), PK_F64, 0.95, NULL, 0, 1, NULL,
     npc_changed, 0},
    {"min_p", T_FLOAT, HINT_RANGE, "0,1,0.01", O(min_p), PK_F64, 0.05, NULL, 0, 1, NULL,
     npc_changed, 0},
    {"repeat_penalty", T_FLOAT, HINT_RANGE, "1,2,0.01", O(repeat_penalty), PK_F64, 1.1, NULL, 0,
     100, NULL, npc_changed, 0},
    {"max_tokens", T_INT, HINT_RANGE, "1,1024,1", O(max_tokens), PK_I32, 48, NULL, 1, 1 << 20,
     NULL, npc_changed, 0},
    {"seed", T_INT, HINT_NONE, NULL, O(seed), PK_I64, 0, NULL, 1, 0, NULL, npc_changed, 0},
    {"priority", T_INT, HINT_RANGE, "-10,10,1", O(priority), PK_I32, 0, NULL, 1, 0, NULL,
     npc_changed, 0},
    {"trim", T_BOOL, HINT_NONE, NULL, O(trim), PK_BOOL, 1, NULL, 1, 0, NULL, npc_changed, 0},
    {"keep_first", T_INT, HINT_RANGE, "-1,64,1", O(keep_first), PK_I32, -1, NULL, -1, 1 << 20,
     NULL, npc_changed, 0},
    {"keep_last", T_INT, HINT_RANGE, "0,64,1", O(keep_last), PK_I32, 1, NULL, 0, 1 << 20, NULL,
     npc_changed, 0},
    {"reply_reserve", T_INT, HINT_RANGE, "-1,1024,1", O(reply_reserve), PK_I32, -1, NULL, -1,
     1 << 20, NULL, npc_changed, 0},
    {"actions", T_ARRAY, HINT_NONE, NULL, O(actions_var), PK_ARR, 0, NULL, 1, 0, NULL,
     npc_changed, 0},
    {"action_choice", T_INT, HINT_ENUM, "Auto,Required", O(action_choice), PK_I32,
     GEIST_ACTION_AUTO, NULL, 0, 1, NULL, npc_changed, 0},
};
#undef O

GDExtensionObjectPtr npc_create(void *ud, GDExtensionBool notify) {
    (void)ud;
    (void)notify;
    gnpc *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    props_init(p, NPC_PROPS, COUNT(NPC_PROPS));
    gv_nil(&p->session_var);
    gv_nil(&p->current);
    p->last_reply = sdup("");
    p->obj = make_object("Node", "GeistNPC", p);
    return p->obj;
}

static void carry_free(gnpc *p) {
    for (size_t i = 0; i < p->n_carry; i++) {
        free(p->carry[i].role);
        free(p->carry[i].content);
    }
    free(p->carry);
    p->carry = NULL;
    p->n_carry = 0;
}

/* Forgets the session; keep: its conversation goes to the next one. */
static void npc_drop_session_keep(gnpc *p, int keep) {
    if (p->sess) {
        p->sess->npc_id = 0;
        if (keep && p->sess->n_msgs > 0) {
            carry_free(p);
            p->carry = p->sess->msgs; /* moved */
            p->n_carry = p->sess->n_msgs;
            p->sess->msgs = NULL;
            p->sess->n_msgs = p->sess->cap_msgs = 0;
        }
    }
    p->sess = NULL;
    gv_free(&p->session_var);
    gv_nil(&p->session_var);
}

void npc_drop_session(gnpc *p) {
    npc_drop_session_keep(p, 0);
}

/* Every reply still owed completes (empty) on the next drain. */
static void npc_fail_pending(gnpc *p, const char *why, int with_current) {
    if (with_current && gv_type(&p->current) != T_NIL) {
        engine_late_reply(0, &p->current, why);
        gv_free(&p->current);
        gv_nil(&p->current);
    }
    for (size_t i = 0; i < p->n_queue; i++) {
        engine_late_reply(0, &p->queue[i].reply, why);
        gv_free(&p->queue[i].reply);
        free(p->queue[i].line);
        free(p->queue[i].schema);
    }
    p->n_queue = 0;
}

void npc_free(void *ud, GDExtensionClassInstancePtr inst) {
    (void)ud;
    gnpc *p = inst;
    npc_fail_pending(p, "the GeistNPC was freed", 1);
    free(p->queue);
    npc_drop_session(p);
    carry_free(p);
    props_free(p, NPC_PROPS, COUNT(NPC_PROPS));
    free(p->last_reply);
    free(p);
}

static int npc_check_idle(void *self, const pdef *p, const gvar *v, char *err, size_t cap) {
    (void)v;
    gnpc *n = self;
    if (n->sess && n->sess->busy) {
        snprintf(err, cap, "geist: cannot change %s while the GeistNPC is replying", p->name);
        return 0;
    }
    return 1;
}

static int npc_check_model(void *self, const pdef *p, const gvar *v, char *err, size_t cap) {
    GDExtensionObjectPtr o = gv_to_obj(v);
    if (o && !inst_of(o, TAG_MODEL)) {
        snprintf(err, cap, "geist: GeistNPC.model must be a GeistModel");
        return 0;
    }
    return npc_check_idle(self, p, v, err, cap);
}

static int npc_check_sampler(void *self, const pdef *p, const gvar *v, char *err, size_t cap) {
    (void)self;
    (void)p;
    GDExtensionObjectPtr o = gv_to_obj(v);
    if (o && !inst_of(o, TAG_SAMPLER)) {
        snprintf(err, cap, "geist: GeistNPC.sampler must be a GeistSampler");
        return 0;
    }
    return 1;
}

static void npc_update_warnings(gnpc *p) {
    static GDExtensionMethodBindPtr mb;
    if (!mb)
        mb = gd_mb("Node", "update_configuration_warnings", 3218959716);
    if (mb)
        gd_call(mb, p->obj, NULL, 0, NULL);
}

static void npc_remake(void *self, const pdef *p) {
    (void)p;
    npc_drop_session_keep(self, 1);
    npc_update_warnings(self);
}

static void npc_changed(void *self, const pdef *p) {
    (void)p;
    npc_update_warnings(self);
}

/* The session's request settings from the NPC (at every line). */
void npc_sync_options(gnpc *p) {
    if (!p->sess)
        return;
    gsession *s = p->sess;
    if (!sampler_read(gv_to_obj(&p->sampler_var), &s->sampler, &s->stop)) {
        geist_sampler_options_default(&s->sampler);
        s->sampler.temperature = (float)p->temperature;
        s->sampler.top_k = p->top_k;
        s->sampler.top_p = (float)p->top_p;
        s->sampler.min_p = (float)p->min_p;
        s->sampler.repeat_penalty = (float)p->repeat_penalty;
        s->sampler.seed = (uint64_t)p->seed;
        gv_free(&s->stop);
        gv_nil(&s->stop);
    }
    s->max_tokens = p->max_tokens;
    s->priority = p->priority;
    s->ctx.trim = p->trim;
    s->ctx.keep_first = p->keep_first;
    s->ctx.keep_last = p->keep_last;
    s->ctx.reply_reserve = p->reply_reserve;
    free(s->system);
    s->system = sdup(p->persona);
    gv_free(&s->actions);
    GD.variant_new_copy(&s->actions, &p->actions_var);
    s->action_choice = p->action_choice;
}

/* The NPC's session, created on first use from its properties. */
gsession *npc_session(gnpc *p, char *err, size_t cap) {
    if (p->sess)
        return p->sess;
    gmodel *m = inst_of(gv_to_obj(&p->model_var), TAG_MODEL);
    if (!m || !m->m) {
        snprintf(err, cap, "GeistNPC %s", m ? "model is not loaded" : "has no model");
        if (m && m->err[0])
            snprintf(err, cap, "GeistNPC model is not loaded: %.400s", m->err);
        return NULL;
    }
    gvar opts;
    gv_dict(&opts);
    gv_dict_set_int(&opts, "kv_mode", p->kv_mode);
    gv_dict_set_int(&opts, "seed", p->seed);
    GDExtensionObjectPtr so = session_new(m, p->max_seq_len, &opts);
    gv_free(&opts);
    if (!so) {
        snprintf(err, cap, "%s", m->err);
        return NULL;
    }
    gv_obj(&p->session_var, so);
    p->sess = inst_of(so, TAG_SESSION);
    p->sess->npc_id = GD.object_get_instance_id(p->obj);
    for (size_t i = 0; i < p->n_carry; i++)
        transcript_add(p->sess, p->carry[i].role, p->carry[i].content);
    carry_free(p);
    npc_sync_options(p);
    return p->sess;
}

static void make_signal(gvar *ret, GDExtensionObjectPtr obj, const char *name) {
    gopq sig[1], sn = gd_sn(name);
    memset(sig, 0, sizeof sig);
    GDExtensionConstTypePtr args[2] = {&obj, &sn};
    GD.variant_get_ptr_constructor(T_SIGNAL, 2)(sig, args);
    gv_from_builtin(ret, T_SIGNAL, sig);
    GD.variant_get_ptr_destructor(T_SIGNAL)(sig);
    gd_sn_free(&sn);
}

/* Submits a line now (schema: ask_json()'s JSON schema, or NULL); on failure its reply
 * completes (empty) on the next drain. */
static void npc_start(gnpc *p, const char *line, gvar *reply, const char *schema) {
    char err[512];
    gsession *s = npc_session(p, err, sizeof err);
    if (!s) {
        engine_late_reply(p->obj, reply, err);
        gv_free(reply);
        return;
    }
    npc_sync_options(p);
    free(s->json_schema);
    s->json_schema = schema ? sdup(schema) : NULL;
    p->current_json = schema != NULL;
    gvar arg, rc;
    gv_str(&arg, line);
    GDExtensionConstVariantPtr args[1] = {&arg};
    ms_say(s, args, 1, &rc);
    gv_free(&arg);
    if (gv_to_int(&rc, 1) != E_OK) {
        engine_late_reply(p->obj, reply, s->err);
        gv_free(reply);
    } else {
        gv_free(&p->current);
        p->current = *reply; /* moved */
    }
    gv_free(&rc);
}

/* say(line) and ask_json(line, schema): schema is the JSON text or NULL. */
static void npc_say(gnpc *p, char *line, char *schema, const char *what, gvar *ret) {
    gvar reply;
    reply_new(&reply);
    make_signal(ret, gv_to_obj(&reply), "completed");
    if (!line || !line[0]) {
        char msg[64];
        snprintf(msg, sizeof msg, "%s(): the line is empty", what);
        engine_late_reply(p->obj, &reply, msg);
        gv_free(&reply);
    } else if ((p->sess && p->sess->busy) || p->n_queue > 0) {
        if (p->n_queue == p->cap_queue) {
            size_t nc = p->cap_queue ? 2 * p->cap_queue : 4;
            gqueued *nq = realloc(p->queue, nc * sizeof *nq);
            if (!nq) {
                engine_late_reply(p->obj, &reply, "out of memory");
                gv_free(&reply);
                free(line);
                free(schema);
                return;
            }
            p->queue = nq;
            p->cap_queue = nc;
        }
        p->queue[p->n_queue++] = (gqueued){line, reply, schema};
        return;
    } else {
        npc_start(p, line, &reply, schema);
    }
    free(line);
    free(schema);
}

void mn_say(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    npc_say(self, a_str(a, n, 0, NULL), NULL, "say", ret);
}

/* ask_json(line, schema: Dictionary): the reply is JSON matching the schema (the grammar
 * engine's JSON Schema subset); awaiting gives the parsed value (ints as int). */
static void mn_ask_json(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gnpc *p = self;
    char *schema = n >= 2 && gv_type(a[1]) == T_DICT ? variant_to_json(a[1]) : NULL;
    if (!schema) {
        gvar reply;
        reply_new(&reply);
        make_signal(ret, gv_to_obj(&reply), "completed");
        engine_late_reply(p->obj, &reply,
                          "ask_json(): the schema must be a Dictionary that JSON can hold");
        gv_free(&reply);
        return;
    }
    npc_say(p, a_str(a, n, 0, NULL), schema, "ask_json", ret);
}

/* After a reply ended (gd_engine.c): completes its GeistReply, starts the next queued line. */
void npc_reply_ended(gnpc *p, const char *text, int32_t finish, const char *error) {
    free(p->last_reply);
    p->last_reply = sdup(text);
    gvar cur = p->current;
    gv_nil(&p->current);
    GDObjectInstanceID id = GD.object_get_instance_id(p->obj);
    if (p->current_json) { /* ask_json(): the parsed value (null when it does not parse) */
        p->current_json = 0;
        gvar val;
        if (!(error && error[0]) && json_to_variant(text, &val)) {
            reply_complete_with(&cur, text, finish, error, &val);
        } else {
            if (!(error && error[0]))
                gv_free(&val);
            gv_nil(&val);
            reply_complete_with(&cur, text, finish, error, &val);
        }
        gv_free(&val);
    } else {
        reply_complete(&cur, text, finish, error); /* handlers may free the NPC */
    }
    gv_free(&cur);
    if (!inst_of(GD.object_get_instance_from_id(id), TAG_NPC))
        return;
    if (p->n_queue > 0 && !(p->sess && p->sess->busy) && gv_type(&p->current) == T_NIL) {
        gqueued q = p->queue[0];
        memmove(p->queue, p->queue + 1, (p->n_queue - 1) * sizeof *p->queue);
        p->n_queue--;
        npc_start(p, q.line, &q.reply, q.schema);
        free(q.line);
        free(q.schema);
    }
}

int npc_is_idle(const gnpc *p) {
    return !(p->sess && p->sess->busy) && p->n_queue == 0 && gv_type(&p->current) == T_NIL;
}

static void mn_cancel(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gnpc *p = self;
    npc_fail_pending(p, "cancelled", 0); /* queued lines never start */
    if (p->sess)
        ms_cancel(p->sess, a, n, ret);
    else
        gv_int(ret, E_OK);
}

static void mn_reset(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gnpc *p = self;
    carry_free(p);
    if (p->sess)
        ms_reset(p->sess, a, n, ret);
    else
        gv_int(ret, E_OK);
}

static void mn_save_memory(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                           gvar *ret) {
    gnpc *p = self;
    char err[512];
    gsession *s = npc_session(p, err, sizeof err);
    if (s) {
        npc_sync_options(p);
        ms_snapshot(s, a, n, ret);
    } else {
        gd_error(err);
        gopq pba;
        memset(&pba, 0, sizeof pba);
        GD.variant_get_ptr_constructor(T_BYTES, 0)(&pba, NULL);
        gv_from_builtin(ret, T_BYTES, &pba);
        GD.variant_get_ptr_destructor(T_BYTES)(&pba);
    }
}

static void mn_load_memory(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                           gvar *ret) {
    gnpc *p = self;
    char err[512];
    gsession *s = npc_session(p, err, sizeof err);
    if (!s || n < 1) {
        gd_error(s ? "load_memory() needs a PackedByteArray" : err);
        gv_int(ret, s ? E_INVALID_PARAM : E_UNCONFIGURED);
        return;
    }
    /* a save made under another persona is refused: the conversation would not fit it */
    int rc = session_restore_bytes(s, a[0], p->persona);
    if (rc != E_OK)
        gd_error(s->err);
    npc_sync_options(p);
    gv_int(ret, rc);
}

static void mn_get_session(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                           gvar *ret) {
    (void)a;
    (void)n;
    gnpc *p = self;
    char err[512];
    gsession *s = npc_session(p, err, sizeof err);
    gv_obj(ret, s ? s->obj : NULL);
}

static void mn_memory(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gnpc *p = self;
    if (p->sess)
        ms_memory(p->sess, a, n, ret);
    else
        gv_dict(ret);
}

static void mn_is_busy(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_bool(ret, !npc_is_idle(self));
}

static void mn_last_reply(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                          gvar *ret) {
    (void)a;
    (void)n;
    gv_str(ret, ((gnpc *)self)->last_reply);
}

static void mn_queued(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_int(ret, (int64_t)((gnpc *)self)->n_queue);
}

/* The editor's warnings: no model, a model that fails to load, a cap below the persona. */
static void npc_warnings(gnpc *p, gvar *out) {
    gv_array(out);
    char msg[640];
    gvar v;
    gmodel *m = inst_of(gv_to_obj(&p->model_var), TAG_MODEL);
    if (!m) {
        gv_str(&v, "No model: drag a .gguf file onto the model property.");
        gv_array_push(out, &v);
        return;
    }
    if (!m->m) {
        snprintf(msg, sizeof msg, "The model does not load: %.500s",
                 m->err[0] ? m->err : "no file given");
        gv_str(&v, msg);
        gv_array_push(out, &v);
        return;
    }
    int64_t n_persona = model_count_tokens(m, p->persona);
    if (n_persona >= p->max_seq_len) {
        snprintf(msg, sizeof msg,
                 "max_seq_len (%d) is below the persona's length (%lld tokens): raise it.",
                 (int)p->max_seq_len, (long long)n_persona);
        gv_str(&v, msg);
        gv_array_push(out, &v);
    }
}

static void mn_warnings(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gvar arr;
    npc_warnings(self, &arr);
    /* as a PackedStringArray, the type Node._get_configuration_warnings returns */
    gv_psa(ret, &arr);
    gv_free(&arr);
}

/* virtual Node._get_configuration_warnings() -> PackedStringArray */
static void npc_v_warnings(GDExtensionClassInstancePtr inst, const GDExtensionConstTypePtr *args,
                           GDExtensionTypePtr r_ret) {
    (void)args;
    gvar w;
    mn_warnings(inst, NULL, 0, &w);
    GD.variant_get_ptr_destructor(GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY)(r_ret);
    GD.get_variant_to_type_constructor(GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY)(r_ret, &w);
    gv_free(&w);
}

static const vdef NPC_VIRTUALS[] = {{"_get_configuration_warnings", npc_v_warnings}};

static const mdef NPC_METHODS[] = {
    {"say", mn_say, T_SIGNAL, NULL, 1, {{"line", T_STRING, NULL}}, NULL, 0},
    {"ask_json", mn_ask_json, T_SIGNAL, NULL, 2,
     {{"line", T_STRING, NULL}, {"schema", T_DICT, NULL}}, NULL, 0},
    {"cancel", mn_cancel, T_INT, NULL, 0, {{0}}, NULL, 0},
    {"reset", mn_reset, T_INT, NULL, 0, {{0}}, NULL, 0},
    {"save_memory", mn_save_memory, T_BYTES, NULL, 0, {{0}}, NULL, 0},
    {"load_memory", mn_load_memory, T_INT, NULL, 1, {{"memory", T_BYTES, NULL}}, NULL, 0},
    {"get_session", mn_get_session, T_OBJECT, "GeistSession", 0, {{0}}, NULL, 0},
    {"memory", mn_memory, T_DICT, NULL, 0, {{0}}, NULL, 0},
    {"is_busy", mn_is_busy, T_BOOL, NULL, 0, {{0}}, NULL, 0},
    {"get_last_reply", mn_last_reply, T_STRING, NULL, 0, {{0}}, NULL, 0},
    {"get_queued_lines", mn_queued, T_INT, NULL, 0, {{0}}, NULL, 0},
    {"get_warnings", mn_warnings, GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY, NULL, 0, {{0}},
     NULL, 0},
};

void npc_register(void) {
    reg_class_v("GeistNPC", "Node", npc_create, npc_free, 0, NPC_VIRTUALS, COUNT(NPC_VIRTUALS));
    reg_methods("GeistNPC", NPC_METHODS, COUNT(NPC_METHODS));
    reg_props("GeistNPC", NPC_PROPS, COUNT(NPC_PROPS));
    reg_signal("GeistNPC", "token", "piece");
    reg_signal("GeistNPC", "finished", "text");
    reg_signal("GeistNPC", "failed", "message");
    reg_signal("GeistNPC", "replied", "text");
    reg_const("GeistNPC", "ActionChoice", "ACTION_AUTO", GEIST_ACTION_AUTO);
    reg_const("GeistNPC", "ActionChoice", "ACTION_REQUIRED", GEIST_ACTION_REQUIRED);
    reg_signal2("GeistNPC", "acted", "name", GDEXTENSION_VARIANT_TYPE_STRING_NAME, "args", T_DICT);
    TAG_NPC = class_tag("GeistNPC");
}
