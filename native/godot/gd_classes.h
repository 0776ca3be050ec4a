/* gd_classes.h — the Godot 4 classes of geist: GeistModel (Resource), GeistSession (RefCounted),
 * GeistNPC (Node) and the GeistEngine singleton, a thin layer over geist.h through the runtime
 * interface of gd_runtime.h. Every signal is emitted on the main thread: GeistEngine drains the
 * runtime's events from SceneTree.process_frame (or from GeistEngine.poll()). */
#ifndef GD_CLASSES_H
#define GD_CLASSES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gd_api.h"
#include "gd_runtime.h"
#include "geist.h"

#define GEIST_N_KV_MODES 5

/* Godot Error codes used as return codes. */
enum { E_OK = 0, E_FAILED = 1, E_UNAVAILABLE = 2, E_UNCONFIGURED = 3, E_RANGE = 5, E_OOM = 6,
       E_CANT_OPEN = 12, E_CORRUPT = 16, E_INVALID_DATA = 30, E_INVALID_PARAM = 31, E_BUSY = 44,
       E_BUG = 47 };


#define T_NIL GDEXTENSION_VARIANT_TYPE_NIL
#define T_BOOL GDEXTENSION_VARIANT_TYPE_BOOL
#define T_INT GDEXTENSION_VARIANT_TYPE_INT
#define T_FLOAT GDEXTENSION_VARIANT_TYPE_FLOAT
#define T_STRING GDEXTENSION_VARIANT_TYPE_STRING
#define T_OBJECT GDEXTENSION_VARIANT_TYPE_OBJECT
#define T_DICT GDEXTENSION_VARIANT_TYPE_DICTIONARY
#define T_ARRAY GDEXTENSION_VARIANT_TYPE_ARRAY
#define T_BYTES GDEXTENSION_VARIANT_TYPE_PACKED_BYTE_ARRAY
#define T_SIGNAL GDEXTENSION_VARIANT_TYPE_SIGNAL

enum { HINT_NONE = 0, HINT_RANGE = 1, HINT_ENUM = 2, HINT_FILE = 13, HINT_RES = 17, HINT_ML = 18 };
#define USAGE_DEFAULT 6u
#define USAGE_READONLY_EDITOR (4u | 268435456u)

/* ---------------------------------------------------------------------------------------------- */
/* Instances                                                                                      */

typedef struct gengine gengine;

typedef struct gmodel {
    GDExtensionObjectPtr obj;
    geist_model *m;
    gopq bytes; /* the PackedByteArray the model aliases (shared copy-on-write buffer) */
    int has_bytes;
    const char *source; /* how the bytes are held */
    char *path;
    uint64_t size;
    double load_ms;
    int err_code;
    char err[512];
    int n_sessions;
} gmodel;

typedef struct gmsg {
    char *role, *content;
} gmsg;

typedef struct gsession {
    GDExtensionObjectPtr obj;
    gvar model_ref; /* keeps the GeistModel alive while the session exists */
    gmodel *model;
    gr_sess *rs;
    int32_t max_seq_len, kv_mode;
    uint64_t seed;
    geist_sampler_options sampler;
    int32_t max_tokens, priority;
    geist_context_policy ctx;
    gvar stop; /* PackedStringArray: extra stop strings */
    char *system;
    gmsg *msgs; /* transcript */
    size_t n_msgs, cap_msgs;
    uint64_t request_id;
    int busy;
    int pending_user; /* the transcript's last message awaits the reply */
    GDObjectInstanceID npc_id;
    int err_code;
    char err[512];
    /* last finished request */
    int32_t last_prompt, last_reused, last_tokens;
    double last_prefill_ms, last_decode_ms, last_start_ms, last_first_token_ms, last_end_ms;
    int last_finish;
    int restored_image; /* the last restore() used the core's KV image */
    /* constrained output of the next request (GeistNPC.actions / ask_json) */
    gvar actions;          /* Array of {name, description, parameters} Dictionaries */
    int32_t action_choice; /* GEIST_ACTION_AUTO / REQUIRED */
    char *json_schema;     /* ask_json(): the reply's JSON schema (used once), or NULL */
    char *last_action;     /* the running request's call (ACTION event JSON), or NULL */
} gsession;

typedef struct gqueued {
    char *line;
    gvar reply;   /* its GeistReply */
    char *schema; /* ask_json(): the JSON schema text, else NULL */
} gqueued;

typedef struct gnpc {
    GDExtensionObjectPtr obj;
    /* table properties (NPC_PROPS in gd_npc.c) */
    gvar model_var;
    char *persona;
    int32_t max_seq_len, kv_mode;
    gvar sampler_var; /* a GeistSampler, or nil: the loose sampler properties below */
    double temperature, top_p, min_p, repeat_penalty;
    int32_t top_k, max_tokens, priority;
    int64_t seed;
    int32_t trim, keep_first, keep_last, reply_reserve;
    gvar actions_var; /* Array of {name, description, parameters} Dictionaries */
    int32_t action_choice;
    /* state */
    int current_json; /* the running reply is an ask_json() */
    gvar session_var;
    gsession *sess;
    gmsg *carry; /* the conversation kept while the session is remade (max_seq_len, ...) */
    size_t n_carry;
    gvar current; /* the GeistReply of the running request, or nil */
    gqueued *queue; /* say() while busy: lines waiting, oldest first */
    size_t n_queue, cap_queue;
    char *last_reply;
} gnpc;

typedef struct greply {
    GDExtensionObjectPtr obj;
    char *text;
    int32_t done, finish_reason; /* finish_reason -1: failed */
    char *error;
} greply;

typedef struct gsampler {
    GDExtensionObjectPtr obj;
    double temperature, top_p, min_p, repeat_penalty, frequency_penalty, presence_penalty;
    int32_t top_k, penalty_last_n;
    int64_t seed;
    gvar stop; /* PackedStringArray */
} gsampler;

typedef struct glate {
    GDObjectInstanceID npc; /* 0: none */
    gvar reply;             /* nil: none */
    char *msg;
} glate;

typedef struct gwaiter {
    gvar reply; /* the GeistReply all_replied() returned */
    GDObjectInstanceID *npcs;
    size_t n;
} gwaiter;

struct gengine {
    GDExtensionObjectPtr obj;
    geist_engine *e;
    gr *rt;
    int32_t threads;
    char backend[64];
    char device[128]; /* vulkan device: "auto", an index or part of a name (geist.h) */
    int device_loaded;
    int device_fast; /* GEIST_DEVICE_FAST (geist/runtime/device_fast, configure's device_fast) */
    geist_runtime_options ropts; /* scheduling knobs (Project Settings, then configure()) */
    int ropts_loaded;
    int ticking;
    int live_models;
    int live_sessions;
    double drain_max_ms, drain_total_ms; /* main-thread time spent draining events */
    int64_t drains;
    /* the last 4096 drains that delivered events (ms), for median and p99 in stats() */
    float drain_ring[4096];
    int64_t drain_busy;
    /* failures to report on the next drain (say() on an NPC without a model, ...) */
    glate *late;
    size_t n_late, cap_late;
    /* GeistEngine.all_replied() calls waiting for their NPCs */
    gwaiter *waiters;
    size_t n_waiters, cap_waiters;
};


/* Process-wide by GDExtension's design: one extension instance per process (gd_bind.c). */
extern gengine *ENG;
extern void *TAG_MODEL, *TAG_SESSION, *TAG_NPC, *TAG_REPLY, *TAG_SAMPLER;
extern GDExtensionInstanceBindingCallbacks BIND_CB;

typedef void (*mfn)(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);

typedef struct argdef {
    const char *name;
    int type;
    const char *cls;
} argdef;

typedef struct mdef {
    const char *name;
    mfn fn;
    int ret_type; /* -1: no return value; T_NIL: returns a Variant */
    const char *ret_cls;
    int nargs;
    argdef args[3];
    const struct pdef *prop; /* set: the generated accessor of a table property */
    int set;                 /* 1: its setter, 0: its getter */
} mdef;

/* Properties from a table: one entry per property drives its registration (the property and its
 * set_<name>/get_<name> methods), its default, its validation and its Variant marshalling.
 * The value lives at `off` in the instance struct, stored as `kind` says. */
enum { PK_I32, PK_I64, PK_F64, PK_BOOL, PK_STR, PK_OBJ, PK_STRS, PK_ARR };
typedef struct pdef {
    const char *name;
    int type; /* Variant type of the property */
    uint32_t hint;
    const char *hint_str; /* PK_OBJ: the class name */
    size_t off;
    int kind;
    double def;          /* numbers: the default */
    const char *def_str; /* PK_STR: the default */
    double lo, hi;       /* numbers outside [lo, hi] are refused with an error; lo > hi: any */
    /* optional: refuses a value (message in err) before it is written; 1 = accept */
    int (*check)(void *self, const struct pdef *p, const gvar *v, char *err, size_t cap);
    void (*changed)(void *self, const struct pdef *p); /* optional, after a write */
    uint32_t usage; /* 0 = USAGE_DEFAULT */
} pdef;

void props_init(void *self, const pdef *t, size_t n);
void props_free(void *self, const pdef *t, size_t n);
void reg_props(const char *cls, const pdef *t, size_t n);
/* Frees what registration allocated (at deinitialize). */
void bind_free_all(void);
void bind_init(void);
/* PackedStringArray from an Array Variant: into a typed slot (constructed), or as a Variant. */
void psa_from_array(GDExtensionTypePtr psa, const gvar *array);
void gv_psa(gvar *out, const gvar *array);
/* Sets a table property from a Variant with the same checks as its setter; 0 (and an error
 * printed) if refused. */
int prop_set(void *self, const pdef *p, const gvar *v);
void prop_get(void *self, const pdef *p, gvar *ret);
const pdef *prop_find(const pdef *t, size_t n, const char *name);
#define COUNT(a) (sizeof(a) / sizeof *(a))

/* shared helpers and class internals (one definition each, in the file named) */

/* gd_bind.c */
int err_of(geist_status st);
double now_ms(void);
char *sdup(const char *s);
void *inst_of(GDExtensionObjectPtr o, void *tag);
GDExtensionObjectPtr make_object(const char *parent, const char *cls, void *self);
void m_call(void *ud, GDExtensionClassInstancePtr inst, const GDExtensionConstVariantPtr *a,
                   GDExtensionInt n, GDExtensionVariantPtr r_ret, GDExtensionCallError *err);
void m_ptrcall(void *ud, GDExtensionClassInstancePtr inst, const GDExtensionConstTypePtr *a,
                      GDExtensionTypePtr r_ret);
void pinfo_free(gopq *store);
void reg_methods(const char *cls, const mdef *defs, size_t n);
void reg_property(const char *cls, const char *name, int type, uint32_t hint,
                         const char *hint_str, const char *setter, const char *getter,
                         uint32_t usage);
void reg_signal(const char *cls, const char *name, const char *arg);
void reg_signal_typed(const char *cls, const char *name, const char *arg, int type);
/* A signal of two typed arguments. */
void reg_signal2(const char *cls, const char *name, const char *arg0, int type0, const char *arg1,
                 int type1);
/* Virtual methods a class overrides (called with ptrcall arguments). */
typedef struct vdef {
    const char *name;
    void (*fn)(GDExtensionClassInstancePtr inst, const GDExtensionConstTypePtr *args,
               GDExtensionTypePtr ret);
} vdef;
void reg_class_v(const char *name, const char *parent, GDExtensionClassCreateInstance2 create,
                 GDExtensionClassFreeInstance free_fn, int abstract, const vdef *virtuals,
                 size_t n_virtuals);
void reg_class(const char *name, const char *parent, GDExtensionClassCreateInstance2 create,
               GDExtensionClassFreeInstance free_fn, int abstract);
void *class_tag(const char *name);

/* gd_reply.c */
void reply_new(gvar *out);
/* Completes a GeistReply once (later calls do nothing): sets its fields, emits completed(text). */
void reply_complete(const gvar *reply, const char *text, int32_t finish_reason,
                    const char *error);
void reply_complete_value(const gvar *reply, gvar *value);
/* reply_complete with another result than the text (ask_json: the parsed value). */
void reply_complete_with(const gvar *reply, const char *text, int32_t finish_reason,
                         const char *error, gvar *value);
char **strs_of(const gvar *arr, size_t *n);
void strs_free(char **s, size_t n);
/* Reads a GeistSampler's options (and its stop strings into *stop); 0 if obj is not one. */
int sampler_read(GDExtensionObjectPtr obj, geist_sampler_options *o, gvar *stop);
void reply_sampler_register(void);
void reg_const(const char *cls, const char *en, const char *name, int64_t v);
int64_t a_int(const GDExtensionConstVariantPtr *a, int64_t n, int i, int64_t def);
double a_float(const GDExtensionConstVariantPtr *a, int64_t n, int i, double def);
char *a_str(const GDExtensionConstVariantPtr *a, int64_t n, int i, size_t *len);

/* gd_engine.c */
int engine_ensure(char *err, size_t cap);
void engine_tick_connect(void);
/* On the next drain: npc (may be NULL) emits failed(msg) and replied(""), reply (may be NULL)
 * completes with "" and the message. */
void engine_late_reply(GDExtensionObjectPtr npc, const gvar *reply, const char *msg);
GDExtensionObjectPtr npc_obj_of(GDObjectInstanceID id);
void emit1(GDExtensionObjectPtr obj, const char *sig, const char *text, size_t len);
GDExtensionObjectPtr npc_obj_of(GDObjectInstanceID id);
void handle_event(const gr_event *ev);
int engine_drain_count(void);
void engine_drain(void);

/* gd_model.c */
void model_set_error(gmodel *m, int code, const char *msg);
void model_unload(gmodel *m);
GDExtensionObjectPtr model_create(void *ud, GDExtensionBool notify);
void model_free(void *ud, GDExtensionClassInstancePtr inst);
int model_load_bytes_var(gmodel *m, const gvar *v, const char *source);
void mm_load_from_buffer(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                                gvar *ret);
int model_load_path(gmodel *m, const char *path);
void mm_load_file(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void mm_set_path(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void mm_get_path(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void mm_is_loaded(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void mm_get_error(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void mm_get_error_code(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                              gvar *ret);
void mm_info(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void mem_dict(gvar *ret, const geist_memory_report *r);
void mm_memory(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void mm_session_cost(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                            gvar *ret);
void mm_create_session(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                              gvar *ret);
void mm_n_ctx_train(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);

/* gd_session.c */
void sess_set_error(gsession *s, int code, const char *msg);
void transcript_clear(gsession *s);
int transcript_add(gsession *s, const char *role, const char *content);
GDExtensionObjectPtr session_alloc(void);
GDExtensionObjectPtr session_create_inst(void *ud, GDExtensionBool notify);
void session_free_inst(void *ud, GDExtensionClassInstancePtr inst);
GDExtensionObjectPtr session_new(gmodel *m, int32_t max_seq_len, const gvar *opts);
int session_submit(gsession *s, const gr_request *base);
int session_chat_transcript(gsession *s, int trim);
void ms_say(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_chat(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_cancel(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_reset(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_snapshot(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
/* expect_system: when not NULL, a snapshot saved with another system prompt is refused */
int session_restore_bytes(gsession *s, const gvar *v, const char *expect_system);
void ms_restore(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_tokens_used(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_max_seq_len(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_memory(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_is_busy(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_get_error(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_set_system(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_get_system(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_transcript(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);
void ms_last_stats(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);

/* gd_npc.c */
GDExtensionObjectPtr npc_create(void *ud, GDExtensionBool notify);
void npc_drop_session(gnpc *p);
void npc_free(void *ud, GDExtensionClassInstancePtr inst);
void npc_sync_options(gnpc *p);
gsession *npc_session(gnpc *p, char *err, size_t cap);
void mn_say(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret);

int json_to_variant(const char *text, gvar *out);
/* A Variant (Dictionary, Array, String, numbers, bools, null) as compact JSON text, malloc'd;
 * NULL for what JSON cannot hold (NaN, nesting deeper than 32) or out of memory. */
char *variant_to_json(const gvar *v);
/* per-class registration */
void model_register(void);
void model_unregister(void);
void session_register(void);
void npc_register(void);
/* gd_npc.c, for the drain */
void npc_reply_ended(gnpc *p, const char *text, int32_t finish, const char *error);
int npc_is_idle(const gnpc *p);
int64_t model_count_tokens(gmodel *m, const char *text);
#endif
