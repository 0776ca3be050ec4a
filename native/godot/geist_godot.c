/* geist_godot.c — the Godot 4 classes of geist: GeistModel (Resource), GeistSession (RefCounted),
 * GeistNPC (Node) and the GeistEngine singleton, a thin layer over geist.h through the runtime
 * interface of gd_runtime.h. Every signal is emitted on the main thread: GeistEngine drains the
 * runtime's events from SceneTree.process_frame (or from GeistEngine.poll()). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gd_api.h"
#include "gd_runtime.h"
#include "geist.h"

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

/* Godot Error codes used as return codes. */
enum { E_OK = 0, E_FAILED = 1, E_UNAVAILABLE = 2, E_UNCONFIGURED = 3, E_RANGE = 5, E_OOM = 6,
       E_CANT_OPEN = 12, E_CORRUPT = 16, E_INVALID_DATA = 30, E_INVALID_PARAM = 31, E_BUSY = 44,
       E_BUG = 47 };

static int err_of(geist_status st) {
    switch (st) {
    case GEIST_OK: return E_OK;
    case GEIST_ERR_INVALID_ARGUMENT: return E_INVALID_PARAM;
    case GEIST_ERR_OUT_OF_MEMORY: return E_OOM;
    case GEIST_ERR_IO: return E_CANT_OPEN;
    case GEIST_ERR_BAD_FORMAT: return E_CORRUPT;
    case GEIST_ERR_UNSUPPORTED: return E_UNAVAILABLE;
    case GEIST_ERR_CAPACITY: return E_RANGE;
    case GEIST_ERR_STATE: return E_BUSY;
    case GEIST_ERR_BUFFER_TOO_SMALL: return E_FAILED;
    default: return E_BUG;
    }
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *sdup(const char *s) {
    size_t n = strlen(s ? s : "");
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s ? s : "", n + 1);
    return d;
}

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
} gsession;

typedef struct gnpc {
    GDExtensionObjectPtr obj;
    gvar model_var;
    gvar session_var;
    gsession *sess;
    char *persona;
    int32_t max_seq_len, kv_mode, top_k, max_tokens, priority;
    double temperature, top_p, min_p, repeat_penalty;
    int64_t seed;
} gnpc;

struct gengine {
    GDExtensionObjectPtr obj;
    geist_engine *e;
    gr *rt;
    int32_t threads;
    char backend[64];
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
    struct {
        GDObjectInstanceID id;
        char *msg;
    } late[16];
    int n_late;
};

/* Process-wide by GDExtension's design: one extension instance per process. */
static gengine *ENG;
static void *TAG_MODEL, *TAG_SESSION, *TAG_NPC;
static GDExtensionInstanceBindingCallbacks BIND_CB;

static void *binding_create(void *token, void *instance) {
    (void)token;
    (void)instance;
    return NULL;
}
static void binding_free(void *token, void *instance, void *binding) {
    (void)token;
    (void)instance;
    (void)binding;
}
static GDExtensionBool binding_ref(void *token, void *binding, GDExtensionBool ref) {
    (void)token;
    (void)binding;
    (void)ref;
    return 1;
}

static void *inst_of(GDExtensionObjectPtr o, void *tag) {
    if (!o || !GD.object_cast_to(o, tag))
        return NULL;
    return GD.object_get_instance_binding(o, GD.library, &BIND_CB);
}

static GDExtensionObjectPtr make_object(const char *parent, const char *cls, void *self) {
    gopq p = gd_sn(parent), c = gd_sn(cls);
    GDExtensionObjectPtr o = GD.classdb_construct_object2(&p);
    GD.object_set_instance(o, &c, self);
    GD.object_set_instance_binding(o, GD.library, self, &BIND_CB);
    gd_sn_free(&p);
    gd_sn_free(&c);
    return o;
}

/* ---------------------------------------------------------------------------------------------- */
/* Engine                                                                                         */

static int32_t setting_int(const char *name, int32_t def) {
    static GDExtensionMethodBindPtr mb;
    if (!mb)
        mb = gd_mb("ProjectSettings", "get_setting", 223050753);
    GDExtensionObjectPtr ps = gd_singleton("ProjectSettings");
    gvar a[2], r;
    gv_str(&a[0], name);
    gv_int(&a[1], def);
    int32_t out = def;
    if (ps && gd_call(mb, ps, a, 2, &r)) {
        out = (int32_t)gv_to_int(&r, def);
        gv_free(&r);
    }
    gv_free(&a[0]);
    gv_free(&a[1]);
    return out;
}

static double setting_float(const char *name, double def) {
    static GDExtensionMethodBindPtr mb;
    if (!mb)
        mb = gd_mb("ProjectSettings", "get_setting", 223050753);
    GDExtensionObjectPtr ps = gd_singleton("ProjectSettings");
    gvar a[2], r;
    gv_str(&a[0], name);
    gv_float(&a[1], def);
    double out = def;
    if (ps && gd_call(mb, ps, a, 2, &r)) {
        out = gv_to_float(&r, def);
        gv_free(&r);
    }
    gv_free(&a[0]);
    gv_free(&a[1]);
    return out;
}

static void setting_str(const char *name, const char *def, char *out, size_t cap) {
    static GDExtensionMethodBindPtr mb;
    if (!mb)
        mb = gd_mb("ProjectSettings", "get_setting", 223050753);
    GDExtensionObjectPtr ps = gd_singleton("ProjectSettings");
    gvar a[2], r;
    gv_str(&a[0], name);
    gv_str(&a[1], def);
    snprintf(out, cap, "%s", def);
    if (ps && gd_call(mb, ps, a, 2, &r)) {
        char *s = gv_to_utf8(&r, NULL);
        if (s && s[0])
            snprintf(out, cap, "%s", s);
        free(s);
        gv_free(&r);
    }
    gv_free(&a[0]);
    gv_free(&a[1]);
}

static int engine_ensure(char *err, size_t cap) {
    if (ENG->e)
        return 1;
    if (ENG->threads <= 0)
        ENG->threads = setting_int("geist/runtime/threads", 1);
    if (!ENG->backend[0])
        setting_str("geist/runtime/backend", "auto", ENG->backend, sizeof ENG->backend);
    geist_engine_options o;
    geist_engine_options_default(&o);
    o.n_threads = ENG->threads > 0 ? ENG->threads : 1;
    o.backend = ENG->backend;
    geist_status st = geist_engine_create(&o, &ENG->e);
    if (st != GEIST_OK) {
        geist_last_error(err, cap);
        return 0;
    }
    ENG->rt = gr_create(ENG->e);
    if (!ENG->rt) {
        geist_engine_free(ENG->e);
        ENG->e = NULL;
        snprintf(err, cap, "out of memory");
        return 0;
    }
    if (!ENG->ropts_loaded) {
        geist_runtime_options_default(&ENG->ropts);
        ENG->ropts.budget_ms = (float)setting_float("geist/runtime/budget_ms", 0.0);
        ENG->ropts.period_ms = (float)setting_float("geist/runtime/period_ms", 16.0);
        ENG->ropts.prefill_chunk = setting_int("geist/runtime/prefill_chunk", 64);
        ENG->ropts.max_batch = setting_int("geist/runtime/max_batch", 64);
        ENG->ropts_loaded = 1;
    }
    if (gr_configure(ENG->rt, &ENG->ropts, err, cap) != GEIST_OK) {
        /* bad settings: say so, run with the defaults */
        fprintf(stderr, "geist: runtime settings refused (%s); using the defaults\n", err);
        geist_runtime_options_default(&ENG->ropts);
        gr_configure(ENG->rt, &ENG->ropts, err, cap);
    }
    return 1;
}

static void engine_drain(void);

static void tick_call(void *ud, const GDExtensionConstVariantPtr *args, GDExtensionInt n,
                      GDExtensionVariantPtr r_ret, GDExtensionCallError *err) {
    (void)ud;
    (void)args;
    (void)n;
    (void)r_ret;
    err->error = GDEXTENSION_CALL_OK;
    engine_drain();
}

static void frame_cb(void) {
    if (ENG)
        engine_drain();
}

/* Drains events every frame on the main thread: through the main loop frame callback (4.5+), else
 * through a callable connected to SceneTree.process_frame once a scene tree exists. */
static void engine_tick_connect(void) {
    if (ENG->ticking)
        return;
    if (GD.register_main_loop_callbacks) {
        GDExtensionMainLoopCallbacks cb;
        memset(&cb, 0, sizeof cb);
        cb.frame_func = frame_cb;
        GD.register_main_loop_callbacks(GD.library, &cb);
        ENG->ticking = 1;
        return;
    }
    GDExtensionObjectPtr eng = gd_singleton("Engine");
    gvar loop;
    if (!eng || !gd_call(gd_mb("Engine", "get_main_loop", 1016888095), eng, NULL, 0, &loop))
        return;
    GDExtensionObjectPtr tree = gv_to_obj(&loop);
    gv_free(&loop);
    if (!tree)
        return;
    GDExtensionCallableCustomInfo2 info;
    memset(&info, 0, sizeof info);
    info.token = GD.library;
    info.call_func = tick_call;
    gopq callable[1];
    memset(callable, 0, sizeof callable);
    GD.callable_custom_create2(callable, &info);
    gvar a[2], r;
    gv_sname(&a[0], "process_frame");
    gv_from_builtin(&a[1], GDEXTENSION_VARIANT_TYPE_CALLABLE, callable);
    GD.variant_get_ptr_destructor(GDEXTENSION_VARIANT_TYPE_CALLABLE)(callable);
    if (gd_call(gd_mb("Object", "connect", 1518946055), tree, a, 2, &r)) {
        ENG->ticking = gv_to_int(&r, 1) == 0;
        gv_free(&r);
    }
    gv_free(&a[0]);
    gv_free(&a[1]);
}

static void engine_late_fail(GDExtensionObjectPtr obj, const char *msg) {
    if (ENG->n_late >= 16)
        return;
    ENG->late[ENG->n_late].id = GD.object_get_instance_id(obj);
    ENG->late[ENG->n_late].msg = sdup(msg);
    ENG->n_late++;
    engine_tick_connect();
}

/* ---------------------------------------------------------------------------------------------- */
/* Method registration: one table entry per method; call and ptrcall share the implementation.   */

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
} mdef;

static void m_call(void *ud, GDExtensionClassInstancePtr inst, const GDExtensionConstVariantPtr *a,
                   GDExtensionInt n, GDExtensionVariantPtr r_ret, GDExtensionCallError *err) {
    const mdef *d = ud;
    err->error = GDEXTENSION_CALL_OK;
    if (n > d->nargs) {
        err->error = GDEXTENSION_CALL_ERROR_TOO_MANY_ARGUMENTS;
        err->expected = d->nargs;
        return;
    }
    gvar ret;
    gv_nil(&ret);
    d->fn(inst, a, n, &ret);
    if (d->ret_type >= 0)
        memcpy(r_ret, &ret, sizeof ret); /* r_ret is a nil Variant: move into it */
    else
        gv_free(&ret);
}

static void m_ptrcall(void *ud, GDExtensionClassInstancePtr inst, const GDExtensionConstTypePtr *a,
                      GDExtensionTypePtr r_ret) {
    const mdef *d = ud;
    gvar args[3];
    GDExtensionConstVariantPtr ptrs[3];
    for (int i = 0; i < d->nargs; i++) {
        if (d->args[i].type == T_NIL)
            GD.variant_new_copy(&args[i], a[i]);
        else
            gv_from_builtin(&args[i], (GDExtensionVariantType)d->args[i].type, a[i]);
        ptrs[i] = &args[i];
    }
    gvar ret;
    gv_nil(&ret);
    d->fn(inst, ptrs, d->nargs, &ret);
    if (d->ret_type >= 0 && r_ret) {
        if (d->ret_type == T_NIL) {
            GD.variant_destroy(r_ret);
            GD.variant_new_copy(r_ret, &ret);
        } else if (d->ret_type == T_OBJECT) {
            /* the return slot is a Ref: ref_set_object takes the reference it must carry */
            GD.ref_set_object(r_ret, gv_to_obj(&ret));
        } else {
            GDExtensionVariantType t = (GDExtensionVariantType)d->ret_type;
            GDExtensionPtrDestructor dtor = GD.variant_get_ptr_destructor(t);
            if (dtor) /* int, float and bool have none */
                dtor(r_ret);
            if (gv_type(&ret) == d->ret_type) {
                GD.get_variant_to_type_constructor(t)(r_ret, &ret);
            } else {
                GD.variant_get_ptr_constructor(t, 0)(r_ret, NULL);
            }
        }
    }
    gv_free(&ret);
    for (int i = 0; i < d->nargs; i++)
        gv_free(&args[i]);
}

static GDExtensionPropertyInfo pinfo(int type, const char *name, const char *cls, uint32_t hint,
                                     const char *hint_str, uint32_t usage, gopq *store) {
    /* store: 3 slots owned by the caller (name, class name, hint string) */
    store[0] = gd_sn(name ? name : "");
    store[1] = gd_sn(cls ? cls : "");
    store[2] = gd_str(hint_str ? hint_str : "", strlen(hint_str ? hint_str : ""));
    GDExtensionPropertyInfo p;
    p.type = (GDExtensionVariantType)type;
    p.name = &store[0];
    p.class_name = &store[1];
    p.hint = hint;
    p.hint_string = &store[2];
    p.usage = usage;
    return p;
}
static void pinfo_free(gopq *store) {
    gd_sn_free(&store[0]);
    gd_sn_free(&store[1]);
    gd_str_free(&store[2]);
}

static void reg_methods(const char *cls, const mdef *defs, size_t n) {
    gopq cname = gd_sn(cls);
    for (size_t k = 0; k < n; k++) {
        const mdef *d = &defs[k];
        gopq store[4][3], rstore[3];
        GDExtensionPropertyInfo args[3], ret;
        GDExtensionClassMethodArgumentMetadata meta[3] = {0, 0, 0};
        for (int i = 0; i < d->nargs; i++)
            args[i] = pinfo(d->args[i].type, d->args[i].name, d->args[i].cls, 0, NULL,
                            USAGE_DEFAULT, store[i]);
        ret = pinfo(d->ret_type < 0 ? T_NIL : d->ret_type, "", d->ret_cls, 0, NULL,
                    d->ret_type == T_NIL ? 131072u /* NIL_IS_VARIANT */ : USAGE_DEFAULT, rstore);
        gopq mname = gd_sn(d->name);
        GDExtensionClassMethodInfo mi;
        memset(&mi, 0, sizeof mi);
        mi.name = &mname;
        mi.method_userdata = (void *)d;
        mi.call_func = m_call;
        mi.ptrcall_func = m_ptrcall;
        mi.method_flags = GDEXTENSION_METHOD_FLAGS_DEFAULT;
        mi.has_return_value = d->ret_type >= 0;
        mi.return_value_info = &ret;
        mi.return_value_metadata = GDEXTENSION_METHOD_ARGUMENT_METADATA_NONE;
        mi.argument_count = (uint32_t)d->nargs;
        mi.arguments_info = args;
        mi.arguments_metadata = meta;
        GD.classdb_register_extension_class_method(GD.library, &cname, &mi);
        gd_sn_free(&mname);
        for (int i = 0; i < d->nargs; i++)
            pinfo_free(store[i]);
        pinfo_free(rstore);
    }
    gd_sn_free(&cname);
}

static void reg_property(const char *cls, const char *name, int type, uint32_t hint,
                         const char *hint_str, const char *setter, const char *getter,
                         uint32_t usage) {
    gopq c = gd_sn(cls), store[3], s = gd_sn(setter ? setter : ""), g = gd_sn(getter);
    GDExtensionPropertyInfo p = pinfo(type, name, type == T_OBJECT ? hint_str : NULL, hint,
                                      hint_str, usage, store);
    GD.classdb_register_extension_class_property(GD.library, &c, &p, &s, &g);
    pinfo_free(store);
    gd_sn_free(&c);
    gd_sn_free(&s);
    gd_sn_free(&g);
}

static void reg_signal(const char *cls, const char *name, const char *arg) {
    gopq c = gd_sn(cls), n = gd_sn(name), store[3];
    GDExtensionPropertyInfo p = pinfo(T_STRING, arg, NULL, 0, NULL, USAGE_DEFAULT, store);
    GD.classdb_register_extension_class_signal(GD.library, &c, &n, &p, 1);
    pinfo_free(store);
    gd_sn_free(&c);
    gd_sn_free(&n);
}

static void reg_const(const char *cls, const char *en, const char *name, int64_t v) {
    gopq c = gd_sn(cls), e = gd_sn(en), n = gd_sn(name);
    GD.classdb_register_extension_class_integer_constant(GD.library, &c, &e, &n, v, 0);
    gd_sn_free(&c);
    gd_sn_free(&e);
    gd_sn_free(&n);
}

/* argument helpers: missing or mistyped arguments take the default */
static int64_t a_int(const GDExtensionConstVariantPtr *a, int64_t n, int i, int64_t def) {
    return i < n ? gv_to_int(a[i], def) : def;
}
static double a_float(const GDExtensionConstVariantPtr *a, int64_t n, int i, double def) {
    return i < n ? gv_to_float(a[i], def) : def;
}
static char *a_str(const GDExtensionConstVariantPtr *a, int64_t n, int i, size_t *len) {
    if (i >= n || gv_type(a[i]) == T_NIL) {
        if (len)
            *len = 0;
        return sdup("");
    }
    return gv_to_utf8(a[i], len);
}

/* ---------------------------------------------------------------------------------------------- */
/* GeistModel                                                                                     */

static void model_set_error(gmodel *m, int code, const char *msg) {
    m->err_code = code;
    snprintf(m->err, sizeof m->err, "%s", msg);
}

static void model_unload(gmodel *m) {
    if (m->m) {
        geist_model_free(m->m);
        m->m = NULL;
        ENG->live_models--;
    }
    if (m->has_bytes) {
        GD.variant_get_ptr_destructor(T_BYTES)(&m->bytes);
        m->has_bytes = 0;
    }
    m->source = "none";
    m->size = 0;
}

static GDExtensionObjectPtr model_create(void *ud, GDExtensionBool notify) {
    (void)ud;
    (void)notify;
    gmodel *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->source = "none";
    m->obj = make_object("Resource", "GeistModel", m);
    return m->obj;
}

static void model_free(void *ud, GDExtensionClassInstancePtr inst) {
    (void)ud;
    gmodel *m = inst;
    model_unload(m);
    free(m->path);
    free(m);
}

/* Loads from a Variant holding a PackedByteArray: aliases its buffer, keeps a shared copy. */
static int model_load_bytes_var(gmodel *m, const gvar *v, const char *source) {
    char err[512];
    if (gv_type(v) != T_BYTES) {
        model_set_error(m, E_INVALID_PARAM, "load_from_buffer() needs a PackedByteArray");
        return E_INVALID_PARAM;
    }
    if (m->n_sessions > 0) {
        model_set_error(m, E_BUSY, "cannot reload a model that still has sessions");
        return E_BUSY;
    }
    if (!engine_ensure(err, sizeof err)) {
        model_set_error(m, E_UNAVAILABLE, err);
        return E_UNAVAILABLE;
    }
    model_unload(m);
    gopq bytes;
    memset(&bytes, 0, sizeof bytes);
    GD.get_variant_to_type_constructor(T_BYTES)(&bytes, (GDExtensionVariantPtr)v);
    int64_t size = gv_size(v);
    if (size <= 0) {
        GD.variant_get_ptr_destructor(T_BYTES)(&bytes);
        model_set_error(m, E_CORRUPT, "the buffer is empty");
        return E_CORRUPT;
    }
    const uint8_t *data = GD.packed_byte_array_operator_index_const(&bytes, 0);
    double t0 = now_ms();
    geist_status st = geist_model_load_memory(ENG->e, data, (size_t)size, NULL, &m->m);
    if (st != GEIST_OK) {
        geist_last_error(err, sizeof err);
        GD.variant_get_ptr_destructor(T_BYTES)(&bytes);
        model_set_error(m, err_of(st), err);
        m->m = NULL;
        return err_of(st);
    }
    m->load_ms = now_ms() - t0;
    m->bytes = bytes;
    m->has_bytes = 1;
    m->size = (uint64_t)size;
    m->source = source;
    m->err_code = 0;
    m->err[0] = 0;
    ENG->live_models++;
    return E_OK;
}

static void mm_load_from_buffer(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                                gvar *ret) {
    gmodel *m = self;
    int rc;
    if (n < 1) {
        model_set_error(m, E_INVALID_PARAM, "load_from_buffer() needs a PackedByteArray");
        rc = E_INVALID_PARAM;
    } else {
        rc = model_load_bytes_var(m, a[0], "buffer (PackedByteArray, aliased in place)");
    }
    gv_int(ret, rc);
}

static int model_load_path(gmodel *m, const char *path) {
    char err[512];
    if (m->n_sessions > 0) {
        model_set_error(m, E_BUSY, "cannot reload a model that still has sessions");
        return E_BUSY;
    }
    if (!engine_ensure(err, sizeof err)) {
        model_set_error(m, E_UNAVAILABLE, err);
        return E_UNAVAILABLE;
    }
    free(m->path);
    m->path = sdup(path);
    /* res:// and user:// become real paths when they exist on disk (editor, unpacked game) */
    char *abs = NULL;
    if (strncmp(path, "res://", 6) == 0 || strncmp(path, "user://", 7) == 0) {
        GDExtensionObjectPtr ps = gd_singleton("ProjectSettings");
        gvar a, r;
        gv_str(&a, path);
        if (ps && gd_call(gd_mb("ProjectSettings", "globalize_path", 3135753539), ps, &a, 1, &r)) {
            abs = gv_to_utf8(&r, NULL);
            gv_free(&r);
        }
        gv_free(&a);
    } else {
        abs = sdup(path);
    }
    struct stat sb;
    if (abs && abs[0] && strncmp(abs, "res://", 6) != 0 && stat(abs, &sb) == 0 &&
        S_ISREG(sb.st_mode)) {
        model_unload(m);
        double t0 = now_ms();
        geist_status st = geist_model_load_file(ENG->e, abs, NULL, &m->m);
        free(abs);
        if (st != GEIST_OK) {
            geist_last_error(err, sizeof err);
            model_set_error(m, err_of(st), err);
            m->m = NULL;
            return err_of(st);
        }
        m->load_ms = now_ms() - t0;
        m->size = (uint64_t)sb.st_size;
        m->source = "mapped file (read-only mapping owned by the model)";
        m->err_code = 0;
        m->err[0] = 0;
        ENG->live_models++;
        return E_OK;
    }
    free(abs);
    /* inside an exported .pck: read it once into a buffer the model owns */
    gvar a, bytes;
    gv_str(&a, path);
    if (!gd_call(gd_mb("FileAccess", "get_file_as_bytes", 659035735), NULL, &a, 1, &bytes)) {
        gv_free(&a);
        model_set_error(m, E_CANT_OPEN, "cannot read the file");
        return E_CANT_OPEN;
    }
    gv_free(&a);
    if (gv_size(&bytes) <= 0) {
        gv_free(&bytes);
        snprintf(err, sizeof err, "cannot open %s", path);
        model_set_error(m, E_CANT_OPEN, err);
        return E_CANT_OPEN;
    }
    int rc = model_load_bytes_var(m, &bytes, "read into a buffer the model owns (file in a .pck)");
    gv_free(&bytes);
    return rc;
}

static void mm_load_file(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    char *path = a_str(a, n, 0, NULL);
    gv_int(ret, path ? model_load_path(self, path) : E_OOM);
    free(path);
}

static void mm_set_path(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)ret;
    gmodel *m = self;
    char *path = a_str(a, n, 0, NULL);
    if (path && path[0])
        model_load_path(m, path);
    else if (path) {
        free(m->path);
        m->path = sdup("");
    }
    free(path);
}

static void mm_get_path(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gmodel *m = self;
    gv_str(ret, m->path ? m->path : "");
}

static void mm_is_loaded(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_bool(ret, ((gmodel *)self)->m != NULL);
}

static void mm_get_error(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_str(ret, ((gmodel *)self)->err);
}

static void mm_get_error_code(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                              gvar *ret) {
    (void)a;
    (void)n;
    gv_int(ret, ((gmodel *)self)->err_code);
}

static void mm_info(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gmodel *m = self;
    if (!m->m) {
        gv_dict(ret);
        return;
    }
    size_t need = 0;
    char small[1];
    geist_model_info_json(m->m, small, sizeof small, &need);
    char *buf = malloc(need + 1);
    if (!buf || geist_model_info_json(m->m, buf, need + 1, &need) != GEIST_OK) {
        free(buf);
        gv_dict(ret);
        return;
    }
    gvar s;
    gv_str(&s, buf);
    free(buf);
    if (!gd_call(gd_mb("JSON", "parse_string", 309047738), NULL, &s, 1, ret) ||
        gv_type(ret) != T_DICT) {
        gv_dict(ret);
    }
    gv_free(&s);
    gv_dict_set_str(ret, "backend", geist_engine_backend_name(ENG->e));
    gv_dict_set_int(ret, "threads", ENG->threads);
    gv_dict_set_int(ret, "file_bytes", (int64_t)m->size);
    gv_dict_set_float(ret, "load_ms", m->load_ms);
    gv_dict_set_str(ret, "source", m->source);
    gv_dict_set_str(ret, "runtime", gr_path());
}

static void mem_dict(gvar *ret, const geist_memory_report *r) {
    gv_dict(ret);
    gv_dict_set_int(ret, "weights_aliased", (int64_t)r->weights_aliased);
    gv_dict_set_int(ret, "weights_owned", (int64_t)r->weights_owned);
    gv_dict_set_int(ret, "metadata", (int64_t)r->metadata);
    gv_dict_set_int(ret, "tokenizer", (int64_t)r->tokenizer);
    gv_dict_set_int(ret, "rope_tables", (int64_t)r->rope_tables);
    gv_dict_set_int(ret, "kv_cache", (int64_t)r->kv_cache);
    gv_dict_set_int(ret, "scratch", (int64_t)r->scratch);
    gv_dict_set_int(ret, "other", (int64_t)r->other);
    gv_dict_set_int(ret, "mapped_file", (int64_t)r->mapped_file);
}

static void mm_memory(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gmodel *m = self;
    geist_memory_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    if (m->m)
        geist_model_memory(m->m, &r);
    mem_dict(ret, &r);
    /* a .pck read is a buffer the game does not otherwise hold: count it as owned */
    int64_t read_copy = strstr(m->source, ".pck") ? (int64_t)m->size : 0;
    int64_t owned = (int64_t)(r.weights_owned + r.metadata + r.tokenizer + r.rope_tables +
                              r.other) + read_copy;
    gv_dict_set_int(ret, "owned_total", owned);
    gv_dict_set_int(ret, "read_buffer", read_copy);
    gv_dict_set_int(ret, "file_bytes", (int64_t)m->size);
    gv_dict_set_str(ret, "source", m->source);
}

static void mm_session_cost(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                            gvar *ret) {
    gmodel *m = self;
    gv_dict(ret);
    if (!m->m)
        return;
    geist_session_options o;
    geist_session_options_default(&o);
    o.max_seq_len = (int32_t)a_int(a, n, 0, 512);
    o.kv_mode = (int32_t)a_int(a, n, 1, GEIST_KV_F16);
    geist_session *s = NULL;
    if (geist_session_create(m->m, &o, &s) != GEIST_OK) {
        char err[256];
        geist_last_error(err, sizeof err);
        gv_dict_set_str(ret, "error", err);
        return;
    }
    geist_memory_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    geist_session_memory(s, &r);
    geist_session_free(s);
    gv_dict_set_int(ret, "kv_cache", (int64_t)r.kv_cache);
    gv_dict_set_int(ret, "scratch", (int64_t)r.scratch);
    gv_dict_set_int(ret, "other", (int64_t)r.other);
    gv_dict_set_int(ret, "total", (int64_t)(r.kv_cache + r.scratch + r.other));
}

static GDExtensionObjectPtr session_new(gmodel *m, int32_t max_seq_len, const gvar *opts);

static void mm_create_session(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                              gvar *ret) {
    gmodel *m = self;
    GDExtensionObjectPtr s = session_new(m, (int32_t)a_int(a, n, 0, 512),
                                         n > 1 ? (const gvar *)a[1] : NULL);
    gv_obj(ret, s);
}

static void mm_n_ctx_train(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gmodel *m = self;
    gv_int(ret, m->m ? geist_model_n_ctx_train(m->m) : 0);
}

static const mdef MODEL_METHODS[] = {
    {"load_from_buffer", mm_load_from_buffer, T_INT, NULL, 1, {{"bytes", T_BYTES, NULL}}},
    {"load_file", mm_load_file, T_INT, NULL, 1, {{"path", T_STRING, NULL}}},
    {"set_path", mm_set_path, -1, NULL, 1, {{"path", T_STRING, NULL}}},
    {"get_path_to_model", mm_get_path, T_STRING, NULL, 0, {{0}}},
    {"is_loaded", mm_is_loaded, T_BOOL, NULL, 0, {{0}}},
    {"get_error", mm_get_error, T_STRING, NULL, 0, {{0}}},
    {"get_error_code", mm_get_error_code, T_INT, NULL, 0, {{0}}},
    {"info", mm_info, T_DICT, NULL, 0, {{0}}},
    {"memory", mm_memory, T_DICT, NULL, 0, {{0}}},
    {"session_cost", mm_session_cost, T_DICT, NULL, 2,
     {{"max_seq_len", T_INT, NULL}, {"kv_mode", T_INT, NULL}}},
    {"create_session", mm_create_session, T_OBJECT, "GeistSession", 2,
     {{"max_seq_len", T_INT, NULL}, {"options", T_DICT, NULL}}},
    {"get_n_ctx_train", mm_n_ctx_train, T_INT, NULL, 0, {{0}}},
};

/* ---------------------------------------------------------------------------------------------- */
/* GeistSession                                                                                   */

static void sess_set_error(gsession *s, int code, const char *msg) {
    s->err_code = code;
    snprintf(s->err, sizeof s->err, "%s", msg);
}

static void transcript_clear(gsession *s) {
    for (size_t i = 0; i < s->n_msgs; i++) {
        free(s->msgs[i].role);
        free(s->msgs[i].content);
    }
    s->n_msgs = 0;
}

static int transcript_add(gsession *s, const char *role, const char *content) {
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

static GDExtensionObjectPtr session_alloc(void) {
    gsession *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    gv_nil(&s->model_ref);
    s->max_tokens = 64;
    geist_sampler_options_default(&s->sampler);
    s->obj = make_object("RefCounted", "GeistSession", s);
    return s->obj;
}

static GDExtensionObjectPtr session_create_inst(void *ud, GDExtensionBool notify) {
    (void)ud;
    (void)notify;
    return session_alloc();
}

static void session_free_inst(void *ud, GDExtensionClassInstancePtr inst) {
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
    gv_free(&s->model_ref); /* may free the model now */
    free(s);
}

static void session_apply_options(gsession *s, const gvar *opts) {
    if (!opts || gv_type(opts) != T_DICT)
        return;
    gvar v;
#define OPT_F(key, field)                                                                        \
    if (gv_dict_get(opts, key, &v)) {                                                            \
        field = (float)gv_to_float(&v, field);                                                   \
        gv_free(&v);                                                                             \
    }
#define OPT_I(key, field)                                                                        \
    if (gv_dict_get(opts, key, &v)) {                                                            \
        field = (int32_t)gv_to_int(&v, field);                                                   \
        gv_free(&v);                                                                             \
    }
    OPT_F("temperature", s->sampler.temperature);
    OPT_I("top_k", s->sampler.top_k);
    OPT_F("top_p", s->sampler.top_p);
    OPT_F("min_p", s->sampler.min_p);
    OPT_F("repeat_penalty", s->sampler.repeat_penalty);
    OPT_I("max_tokens", s->max_tokens);
    OPT_I("priority", s->priority);
    if (gv_dict_get(opts, "seed", &v)) {
        s->seed = (uint64_t)gv_to_int(&v, 0);
        s->sampler.seed = s->seed;
        gv_free(&v);
    }
    if (gv_dict_get(opts, "system", &v)) {
        free(s->system);
        s->system = gv_to_utf8(&v, NULL);
        gv_free(&v);
    }
#undef OPT_F
#undef OPT_I
}

static GDExtensionObjectPtr session_new(gmodel *m, int32_t max_seq_len, const gvar *opts) {
    char err[512];
    if (!m->m) {
        model_set_error(m, E_UNCONFIGURED, "create_session(): the model is not loaded");
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
    session_apply_options(s, opts);
    return o;
}

static int session_submit(gsession *s, const gr_request *base) {
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
    r.max_tokens = base->max_tokens ? base->max_tokens : s->max_tokens;
    r.priority = s->priority;
    r.user_data = GD.object_get_instance_id(s->obj);
    uint64_t id = 0;
    geist_status st = gr_submit(ENG->rt, s->rs, &r, &id);
    if (st != GEIST_OK) {
        sess_set_error(s, err_of(st), st == GEIST_ERR_STATE ? "a request is already running"
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
static int session_chat_transcript(gsession *s, int trim) {
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
    r.trim = trim;
    int rc = session_submit(s, &r);
    free(msgs);
    return rc;
}

static void ms_say(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gsession *s = self;
    if (s->busy) {
        sess_set_error(s, E_BUSY, "a request is already running on this session");
        gv_int(ret, E_BUSY);
        return;
    }
    char *text = a_str(a, n, 0, NULL);
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

static void ms_chat(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
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
    transcript_clear(s);
    int64_t cnt = gv_size(a[0]);
    for (int64_t i = 0; i < cnt; i++) {
        gvar item, role, content;
        if (!gv_index(a[0], i, &item))
            continue;
        char *r = NULL, *c = NULL;
        if (gv_dict_get(&item, "role", &role)) {
            r = gv_to_utf8(&role, NULL);
            gv_free(&role);
        }
        if (gv_dict_get(&item, "content", &content)) {
            c = gv_to_utf8(&content, NULL);
            gv_free(&content);
        }
        transcript_add(s, r ? r : "user", c ? c : "");
        free(r);
        free(c);
        gv_free(&item);
    }
    /* chat() gives the whole conversation itself: no separate system prompt, no trimming */
    char *sys = s->system;
    s->system = NULL;
    int rc = session_chat_transcript(s, 0);
    s->system = sys;
    s->pending_user = rc == E_OK;
    gv_int(ret, rc);
}

static void ms_cancel(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gsession *s = self;
    int rc = E_OK;
    if (s->busy)
        rc = err_of(gr_cancel(ENG->rt, s->request_id));
    gv_int(ret, rc);
}

static void ms_reset(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
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

/* Snapshot bytes: magic (with version), vocab size, max_seq_len, token ids, transcript, system
 * prompt, then the core's session image (geist_session_snapshot: KV, logits, seed). Restoring
 * uses the image; if the core refuses it (another KV mode, ...) the token ids are run again. */
#define SNAP_MAGIC "GEISTSN2"
typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} wbuf;
static void wb_put(wbuf *b, const void *d, size_t n) {
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t nc = (b->n + n) * 2 + 256;
        uint8_t *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void wb_u32(wbuf *b, uint32_t v) { wb_put(b, &v, 4); }
static void wb_str(wbuf *b, const char *s) {
    uint32_t n = (uint32_t)strlen(s ? s : "");
    wb_u32(b, n);
    wb_put(b, s ? s : "", n);
}

static void ms_snapshot(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gsession *s = self;
    gopq pba;
    memset(&pba, 0, sizeof pba);
    GD.variant_get_ptr_constructor(T_BYTES, 0)(&pba, NULL);
    if (!s->rs || s->busy) {
        sess_set_error(s, E_BUSY, "snapshot(): the session is busy or has no model");
        gv_from_builtin(ret, T_BYTES, &pba);
        GD.variant_get_ptr_destructor(T_BYTES)(&pba);
        return;
    }
    geist_session *gs = gr_sess_session(s->rs);
    size_t nh = (size_t)geist_session_n_past(gs);
    int32_t *h = malloc((nh ? nh : 1) * sizeof *h);
    if (!h || geist_session_tokens(gs, h, nh, &nh) != GEIST_OK)
        nh = 0;
    wbuf b = {0};
    wb_put(&b, SNAP_MAGIC, 8);
    wb_u32(&b, (uint32_t)geist_model_n_vocab(s->model->m));
    wb_u32(&b, (uint32_t)s->max_seq_len);
    wb_u32(&b, (uint32_t)nh);
    wb_put(&b, h, nh * sizeof *h);
    free(h);
    wb_u32(&b, (uint32_t)s->n_msgs);
    for (size_t i = 0; i < s->n_msgs; i++) {
        wb_str(&b, s->msgs[i].role);
        wb_str(&b, s->msgs[i].content);
    }
    wb_str(&b, s->system);
    size_t img_n = 0;
    uint8_t *img = NULL;
    if (geist_session_snapshot(gs, NULL, 0, &img_n) == GEIST_ERR_BUFFER_TOO_SMALL &&
        (img = malloc(img_n)) != NULL &&
        geist_session_snapshot(gs, img, img_n, &img_n) == GEIST_OK) {
        uint64_t n64 = img_n;
        wb_put(&b, &n64, 8);
        wb_put(&b, img, img_n);
    } else {
        uint64_t zero = 0;
        wb_put(&b, &zero, 8);
    }
    free(img);
    gv_from_builtin(ret, T_BYTES, &pba);
    GD.variant_get_ptr_destructor(T_BYTES)(&pba);
    if (!b.oom) {
        /* resize the PackedByteArray through its Variant, then fill it in place */
        gopq m = gd_sn("resize");
        gvar arg, r;
        gv_int(&arg, (int64_t)b.n);
        const GDExtensionConstVariantPtr args[1] = {&arg};
        GDExtensionCallError ce;
        GD.variant_call(ret, &m, args, 1, &r, &ce);
        gd_sn_free(&m);
        gv_free(&arg);
        if (ce.error == GDEXTENSION_CALL_OK) {
            gv_free(&r);
            gopq out;
            memset(&out, 0, sizeof out);
            GD.get_variant_to_type_constructor(T_BYTES)(&out, ret);
            uint8_t *dst = GD.packed_byte_array_operator_index(&out, 0);
            if (dst)
                memcpy(dst, b.p, b.n);
            gv_free(ret);
            gv_from_builtin(ret, T_BYTES, &out);
            GD.variant_get_ptr_destructor(T_BYTES)(&out);
        }
    }
    free(b.p);
}

typedef struct rbuf {
    const uint8_t *p;
    size_t n, off;
    int bad;
} rbuf;
static uint32_t rb_u32(rbuf *b) {
    uint32_t v = 0;
    if (b->off + 4 > b->n) {
        b->bad = 1;
        return 0;
    }
    memcpy(&v, b->p + b->off, 4);
    b->off += 4;
    return v;
}
static char *rb_str(rbuf *b) {
    uint32_t n = rb_u32(b);
    if (b->bad || n > b->n - b->off) {
        b->bad = 1;
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (!s) {
        b->bad = 1;
        return NULL;
    }
    memcpy(s, b->p + b->off, n);
    s[n] = 0;
    b->off += n;
    return s;
}

static int session_restore_bytes(gsession *s, const gvar *v) {
    if (!s->rs) {
        sess_set_error(s, E_UNCONFIGURED, "restore(): the session has no model");
        return E_UNCONFIGURED;
    }
    if (s->busy) {
        sess_set_error(s, E_BUSY, "restore(): a request is running");
        return E_BUSY;
    }
    if (gv_type(v) != T_BYTES) {
        sess_set_error(s, E_INVALID_PARAM, "restore() needs a PackedByteArray");
        return E_INVALID_PARAM;
    }
    gopq pba;
    memset(&pba, 0, sizeof pba);
    GD.get_variant_to_type_constructor(T_BYTES)(&pba, (GDExtensionVariantPtr)v);
    int64_t size = gv_size(v);
    rbuf b = {size > 0 ? GD.packed_byte_array_operator_index_const(&pba, 0) : NULL,
              size > 0 ? (size_t)size : 0, 0, 0};
    int rc = E_OK;
    const char *why = NULL;
    int32_t *ids = NULL;
    uint32_t nh = 0;
    const uint8_t *img = NULL;
    size_t img_n = 0;
    if (b.n < 8 || memcmp(b.p, SNAP_MAGIC, 8) != 0) {
        why = "restore(): not a geist session snapshot";
    } else {
        b.off = 8;
        uint32_t nv = rb_u32(&b);
        rb_u32(&b); /* max_seq_len of the saving session (informative) */
        nh = rb_u32(&b);
        if (b.bad || nv != (uint32_t)geist_model_n_vocab(s->model->m))
            why = "restore(): the snapshot was made with another model";
        else if ((int64_t)nh > s->max_seq_len)
            why = "restore(): the snapshot holds more tokens than this session's max_seq_len";
        else if ((size_t)nh * 4 > b.n - b.off)
            why = "restore(): the snapshot is truncated";
        if (!why) {
            ids = malloc(((size_t)nh + 1) * sizeof *ids);
            if (!ids)
                why = "restore(): out of memory";
            else {
                memcpy(ids, b.p + b.off, (size_t)nh * 4);
                b.off += (size_t)nh * 4;
            }
        }
    }
    gsession tmp; /* parse the transcript before touching the session */
    memset(&tmp, 0, sizeof tmp);
    if (!why) {
        uint32_t nm = rb_u32(&b);
        for (uint32_t i = 0; i < nm && !b.bad; i++) {
            char *r = rb_str(&b), *c = rb_str(&b);
            if (r && c)
                transcript_add(&tmp, r, c);
            free(r);
            free(c);
        }
        tmp.system = rb_str(&b);
        if (!b.bad && b.off + 8 <= b.n) {
            uint64_t n64 = 0;
            memcpy(&n64, b.p + b.off, 8);
            b.off += 8;
            if (n64 > b.n - b.off)
                b.bad = 1;
            else if (n64 > 0) {
                img = b.p + b.off;
                img_n = (size_t)n64;
            }
        }
        if (b.bad)
            why = "restore(): the snapshot is truncated or corrupt";
    }
    if (why) {
        GD.variant_get_ptr_destructor(T_BYTES)(&pba);
        transcript_clear(&tmp);
        free(tmp.msgs);
        free(tmp.system);
        free(ids);
        sess_set_error(s, E_INVALID_DATA, why);
        return E_INVALID_DATA;
    }
    free(ids); /* informative: the image holds them; without one the conversation is run again */
    /* the core's image restores the KV as it was; if it is refused the session starts empty and
     * the next turn runs the whole restored conversation */
    geist_status st = gr_sess_restore(ENG->rt, s->rs, img, img_n, &s->restored_image);
    GD.variant_get_ptr_destructor(T_BYTES)(&pba);
    if (st != GEIST_OK) {
        transcript_clear(&tmp);
        free(tmp.msgs);
        free(tmp.system);
        sess_set_error(s, err_of(st), "restore(): a request is running");
        return err_of(st);
    }
    transcript_clear(s);
    free(s->msgs);
    free(s->system);
    s->msgs = tmp.msgs;
    s->n_msgs = tmp.n_msgs;
    s->cap_msgs = tmp.cap_msgs;
    s->system = tmp.system;
    return rc;
}

static void ms_restore(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gsession *s = self;
    if (n < 1) {
        gv_int(ret, E_INVALID_PARAM);
        return;
    }
    gv_int(ret, session_restore_bytes(s, a[0]));
}

static void ms_tokens_used(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gsession *s = self;
    gv_int(ret, s->rs ? geist_session_n_past(gr_sess_session(s->rs)) : 0);
}

static void ms_max_seq_len(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_int(ret, ((gsession *)self)->max_seq_len);
}

static void ms_memory(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
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

static void ms_is_busy(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_bool(ret, ((gsession *)self)->busy);
}

static void ms_get_error(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_str(ret, ((gsession *)self)->err);
}

static void ms_configure(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)ret;
    if (n > 0)
        session_apply_options(self, a[0]);
}

static void ms_set_system(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)ret;
    gsession *s = self;
    free(s->system);
    s->system = a_str(a, n, 0, NULL);
}

static void ms_get_system(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gsession *s = self;
    gv_str(ret, s->system ? s->system : "");
}

static void ms_transcript(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
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

static void ms_last_stats(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
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
    {"say", ms_say, T_INT, NULL, 1, {{"text", T_STRING, NULL}}},
    {"chat", ms_chat, T_INT, NULL, 1, {{"messages", T_ARRAY, NULL}}},
    {"cancel", ms_cancel, T_INT, NULL, 0, {{0}}},
    {"reset", ms_reset, T_INT, NULL, 0, {{0}}},
    {"snapshot", ms_snapshot, T_BYTES, NULL, 0, {{0}}},
    {"restore", ms_restore, T_INT, NULL, 1, {{"snapshot", T_BYTES, NULL}}},
    {"get_tokens_used", ms_tokens_used, T_INT, NULL, 0, {{0}}},
    {"get_max_seq_len", ms_max_seq_len, T_INT, NULL, 0, {{0}}},
    {"memory", ms_memory, T_DICT, NULL, 0, {{0}}},
    {"is_busy", ms_is_busy, T_BOOL, NULL, 0, {{0}}},
    {"get_error", ms_get_error, T_STRING, NULL, 0, {{0}}},
    {"configure", ms_configure, -1, NULL, 1, {{"options", T_DICT, NULL}}},
    {"set_system_prompt", ms_set_system, -1, NULL, 1, {{"text", T_STRING, NULL}}},
    {"get_system_prompt", ms_get_system, T_STRING, NULL, 0, {{0}}},
    {"get_transcript", ms_transcript, T_ARRAY, NULL, 0, {{0}}},
    {"last_stats", ms_last_stats, T_DICT, NULL, 0, {{0}}},
};

/* ---------------------------------------------------------------------------------------------- */
/* GeistNPC                                                                                       */

static GDExtensionObjectPtr npc_create(void *ud, GDExtensionBool notify) {
    (void)ud;
    (void)notify;
    gnpc *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    gv_nil(&p->model_var);
    gv_nil(&p->session_var);
    p->persona = sdup("You are a friendly villager. Answer in one or two short sentences.");
    p->max_seq_len = 256;
    p->kv_mode = GEIST_KV_F16;
    p->temperature = 0.7;
    p->top_k = 40;
    p->top_p = 0.95;
    p->min_p = 0.05;
    p->repeat_penalty = 1.1;
    p->max_tokens = 48;
    p->obj = make_object("Node", "GeistNPC", p);
    return p->obj;
}

static void npc_drop_session(gnpc *p) {
    if (p->sess)
        p->sess->npc_id = 0;
    p->sess = NULL;
    gv_free(&p->session_var);
    gv_nil(&p->session_var);
}

static void npc_free(void *ud, GDExtensionClassInstancePtr inst) {
    (void)ud;
    gnpc *p = inst;
    npc_drop_session(p);
    gv_free(&p->model_var);
    free(p->persona);
    free(p);
}

static void npc_sync_options(gnpc *p) {
    if (!p->sess)
        return;
    gsession *s = p->sess;
    s->sampler.temperature = (float)p->temperature;
    s->sampler.top_k = p->top_k;
    s->sampler.top_p = (float)p->top_p;
    s->sampler.min_p = (float)p->min_p;
    s->sampler.repeat_penalty = (float)p->repeat_penalty;
    s->sampler.seed = (uint64_t)p->seed;
    s->max_tokens = p->max_tokens;
    s->priority = p->priority;
    free(s->system);
    s->system = sdup(p->persona);
}

/* The NPC's session, created on first use from the exported settings. */
static gsession *npc_session(gnpc *p, char *err, size_t cap) {
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

static void mn_say(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gnpc *p = self;
    char err[512];
    make_signal(ret, p->obj, "replied");
    gsession *s = npc_session(p, err, sizeof err);
    if (!s) {
        engine_late_fail(p->obj, err);
        return;
    }
    npc_sync_options(p);
    gvar rc;
    ms_say(s, a, n, &rc);
    if (gv_to_int(&rc, 1) != E_OK)
        engine_late_fail(p->obj, s->err);
    gv_free(&rc);
}

static void mn_cancel(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gnpc *p = self;
    if (p->sess)
        ms_cancel(p->sess, a, n, ret);
    else
        gv_int(ret, E_OK);
}

static void mn_reset(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gnpc *p = self;
    if (p->sess)
        ms_reset(p->sess, a, n, ret);
    else
        gv_int(ret, E_OK);
}

static void mn_save_memory(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gnpc *p = self;
    char err[512];
    gsession *s = npc_session(p, err, sizeof err);
    if (s) {
        ms_snapshot(s, a, n, ret);
    } else {
        gopq pba;
        memset(&pba, 0, sizeof pba);
        GD.variant_get_ptr_constructor(T_BYTES, 0)(&pba, NULL);
        gv_from_builtin(ret, T_BYTES, &pba);
        GD.variant_get_ptr_destructor(T_BYTES)(&pba);
    }
}

static void mn_load_memory(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gnpc *p = self;
    char err[512];
    gsession *s = npc_session(p, err, sizeof err);
    if (!s || n < 1) {
        gv_int(ret, s ? E_INVALID_PARAM : E_UNCONFIGURED);
        return;
    }
    int rc = session_restore_bytes(s, a[0]);
    npc_sync_options(p); /* the NPC's persona wins over the saved one */
    gv_int(ret, rc);
}

static void mn_get_session(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
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
    gnpc *p = self;
    gv_bool(ret, p->sess && p->sess->busy);
}

static void mn_set_model(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)ret;
    gnpc *p = self;
    GDExtensionObjectPtr o = n > 0 ? gv_to_obj(a[0]) : NULL;
    if (o && !inst_of(o, TAG_MODEL))
        return;
    if (p->sess && p->sess->busy)
        return;
    npc_drop_session(p);
    gv_free(&p->model_var);
    gv_obj(&p->model_var, o);
}

static void mn_get_model(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gnpc *p = self;
    GD.variant_new_copy(ret, &p->model_var);
}

#define NPC_PROP_INT(field, setter_name, getter_name, recreate)                                  \
    static void setter_name(void *self, const GDExtensionConstVariantPtr *a, int64_t n,        \
                            gvar *ret) {                                                         \
        (void)ret;                                                                               \
        gnpc *p = self;                                                                          \
        int32_t v = (int32_t)a_int(a, n, 0, p->field);                                           \
        if ((recreate) && v != p->field && p->sess && !p->sess->busy)                            \
            npc_drop_session(p);                                                                 \
        if (!(recreate) || !p->sess)                                                             \
            p->field = v;                                                                        \
        npc_sync_options(p);                                                                     \
    }                                                                                            \
    static void getter_name(void *self, const GDExtensionConstVariantPtr *a, int64_t n,        \
                            gvar *ret) {                                                         \
        (void)a;                                                                                 \
        (void)n;                                                                                 \
        gv_int(ret, ((gnpc *)self)->field);                                                      \
    }
#define NPC_PROP_FLOAT(field, setter_name, getter_name)                                          \
    static void setter_name(void *self, const GDExtensionConstVariantPtr *a, int64_t n,        \
                            gvar *ret) {                                                         \
        (void)ret;                                                                               \
        gnpc *p = self;                                                                          \
        p->field = a_float(a, n, 0, p->field);                                                   \
        npc_sync_options(p);                                                                     \
    }                                                                                            \
    static void getter_name(void *self, const GDExtensionConstVariantPtr *a, int64_t n,        \
                            gvar *ret) {                                                         \
        (void)a;                                                                                 \
        (void)n;                                                                                 \
        gv_float(ret, ((gnpc *)self)->field);                                                    \
    }

NPC_PROP_INT(max_seq_len, mn_set_max_seq_len, mn_get_max_seq_len, 1)
NPC_PROP_INT(kv_mode, mn_set_kv_mode, mn_get_kv_mode, 1)
NPC_PROP_INT(top_k, mn_set_top_k, mn_get_top_k, 0)
NPC_PROP_INT(max_tokens, mn_set_max_tokens, mn_get_max_tokens, 0)
NPC_PROP_INT(priority, mn_set_priority, mn_get_priority, 0)
NPC_PROP_FLOAT(temperature, mn_set_temperature, mn_get_temperature)
NPC_PROP_FLOAT(top_p, mn_set_top_p, mn_get_top_p)
NPC_PROP_FLOAT(min_p, mn_set_min_p, mn_get_min_p)
NPC_PROP_FLOAT(repeat_penalty, mn_set_repeat_penalty, mn_get_repeat_penalty)

static void mn_set_seed(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)ret;
    gnpc *p = self;
    p->seed = a_int(a, n, 0, p->seed);
    npc_sync_options(p);
}
static void mn_get_seed(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_int(ret, ((gnpc *)self)->seed);
}
static void mn_set_persona(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                           gvar *ret) {
    (void)ret;
    gnpc *p = self;
    free(p->persona);
    p->persona = a_str(a, n, 0, NULL);
    npc_sync_options(p);
}
static void mn_get_persona(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                           gvar *ret) {
    (void)a;
    (void)n;
    gv_str(ret, ((gnpc *)self)->persona);
}

static const mdef NPC_METHODS[] = {
    {"say", mn_say, T_SIGNAL, NULL, 1, {{"line", T_STRING, NULL}}},
    {"cancel", mn_cancel, T_INT, NULL, 0, {{0}}},
    {"reset", mn_reset, T_INT, NULL, 0, {{0}}},
    {"save_memory", mn_save_memory, T_BYTES, NULL, 0, {{0}}},
    {"load_memory", mn_load_memory, T_INT, NULL, 1, {{"memory", T_BYTES, NULL}}},
    {"get_session", mn_get_session, T_OBJECT, "GeistSession", 0, {{0}}},
    {"memory", mn_memory, T_DICT, NULL, 0, {{0}}},
    {"is_busy", mn_is_busy, T_BOOL, NULL, 0, {{0}}},
    {"set_model", mn_set_model, -1, NULL, 1, {{"model", T_OBJECT, "GeistModel"}}},
    {"get_model", mn_get_model, T_OBJECT, "GeistModel", 0, {{0}}},
    {"set_persona", mn_set_persona, -1, NULL, 1, {{"persona", T_STRING, NULL}}},
    {"get_persona", mn_get_persona, T_STRING, NULL, 0, {{0}}},
    {"set_max_seq_len", mn_set_max_seq_len, -1, NULL, 1, {{"value", T_INT, NULL}}},
    {"get_max_seq_len", mn_get_max_seq_len, T_INT, NULL, 0, {{0}}},
    {"set_kv_mode", mn_set_kv_mode, -1, NULL, 1, {{"value", T_INT, NULL}}},
    {"get_kv_mode", mn_get_kv_mode, T_INT, NULL, 0, {{0}}},
    {"set_temperature", mn_set_temperature, -1, NULL, 1, {{"value", T_FLOAT, NULL}}},
    {"get_temperature", mn_get_temperature, T_FLOAT, NULL, 0, {{0}}},
    {"set_top_k", mn_set_top_k, -1, NULL, 1, {{"value", T_INT, NULL}}},
    {"get_top_k", mn_get_top_k, T_INT, NULL, 0, {{0}}},
    {"set_top_p", mn_set_top_p, -1, NULL, 1, {{"value", T_FLOAT, NULL}}},
    {"get_top_p", mn_get_top_p, T_FLOAT, NULL, 0, {{0}}},
    {"set_min_p", mn_set_min_p, -1, NULL, 1, {{"value", T_FLOAT, NULL}}},
    {"get_min_p", mn_get_min_p, T_FLOAT, NULL, 0, {{0}}},
    {"set_repeat_penalty", mn_set_repeat_penalty, -1, NULL, 1, {{"value", T_FLOAT, NULL}}},
    {"get_repeat_penalty", mn_get_repeat_penalty, T_FLOAT, NULL, 0, {{0}}},
    {"set_max_tokens", mn_set_max_tokens, -1, NULL, 1, {{"value", T_INT, NULL}}},
    {"get_max_tokens", mn_get_max_tokens, T_INT, NULL, 0, {{0}}},
    {"set_seed", mn_set_seed, -1, NULL, 1, {{"value", T_INT, NULL}}},
    {"get_seed", mn_get_seed, T_INT, NULL, 0, {{0}}},
    {"set_priority", mn_set_priority, -1, NULL, 1, {{"value", T_INT, NULL}}},
    {"get_priority", mn_get_priority, T_INT, NULL, 0, {{0}}},
};

/* ---------------------------------------------------------------------------------------------- */
/* Event drain (main thread)                                                                      */

static void emit1(GDExtensionObjectPtr obj, const char *sig, const char *text, size_t len) {
    gvar v;
    gv_strn(&v, text, len);
    gd_emit(obj, sig, &v, 1);
    gv_free(&v);
}

static GDExtensionObjectPtr npc_obj_of(GDObjectInstanceID id) {
    return id ? GD.object_get_instance_from_id(id) : NULL;
}

static void handle_event(const gr_event *ev) {
    GDExtensionObjectPtr o = GD.object_get_instance_from_id(ev->user_data);
    gsession *s = inst_of(o, TAG_SESSION);
    if (!s)
        return; /* freed meanwhile */
    gvar hold; /* keep the session alive while its handlers run */
    gv_obj(&hold, o);
    const char *text = ev->text ? ev->text : "";
    if (ev->type == GEIST_EVENT_TOKEN) {
        if (s->last_first_token_ms == 0)
            s->last_first_token_ms = now_ms();
        emit1(o, "token", text, ev->text_len);
        GDExtensionObjectPtr npc = npc_obj_of(s->npc_id);
        if (npc)
            emit1(npc, "token", text, ev->text_len);
    } else {
        s->busy = 0;
        s->last_prompt = ev->n_prompt;
        s->last_reused = ev->n_reused;
        s->last_tokens = ev->n_tokens;
        s->last_prefill_ms = ev->prefill_ms;
        s->last_decode_ms = ev->decode_ms;
        s->last_end_ms = now_ms();
        s->last_finish = ev->type == GEIST_EVENT_FINISHED ? ev->finish_reason : -1;
        int ok = ev->type == GEIST_EVENT_FINISHED;
        if (s->pending_user) {
            s->pending_user = 0;
            if (ok && ev->finish_reason != GEIST_FINISH_CANCELLED)
                transcript_add(s, "assistant", text);
            else if (s->n_msgs > 0) { /* drop the unanswered line */
                s->n_msgs--;
                free(s->msgs[s->n_msgs].role);
                free(s->msgs[s->n_msgs].content);
            }
        }
        if (!ok)
            sess_set_error(s, err_of((geist_status)ev->status), text);
        emit1(o, ok ? "finished" : "failed", text, ev->text_len);
        GDExtensionObjectPtr npc = npc_obj_of(s->npc_id);
        if (npc) {
            emit1(npc, ok ? "finished" : "failed", text, ev->text_len);
            npc = npc_obj_of(s->npc_id);
            if (npc)
                emit1(npc, "replied", ok ? text : "", ok ? ev->text_len : 0);
        }
    }
    gv_free(&hold);
}

static int engine_drain_count(void) {
    int total = 0;
    for (int i = 0; i < ENG->n_late; i++) {
        GDExtensionObjectPtr o = GD.object_get_instance_from_id(ENG->late[i].id);
        if (o) {
            emit1(o, "failed", ENG->late[i].msg, strlen(ENG->late[i].msg));
            if (inst_of(o, TAG_NPC))
                emit1(o, "replied", "", 0);
        }
        free(ENG->late[i].msg);
        total++;
    }
    ENG->n_late = 0;
    if (!ENG->rt)
        return total;
    gr_event evs[32];
    size_t n;
    while ((n = gr_poll(ENG->rt, evs, 32)) > 0) {
        for (size_t i = 0; i < n; i++) {
            handle_event(&evs[i]);
            gr_event_clear(&evs[i]);
        }
        total += (int)n;
    }
    return total;
}

static void engine_drain(void) {
    double t0 = now_ms();
    int n = engine_drain_count();
    double dt = now_ms() - t0;
    if (n > 0)
        ENG->drain_ring[ENG->drain_busy++ % 4096] = (float)dt;
    ENG->drain_total_ms += dt;
    ENG->drains++;
    if (dt > ENG->drain_max_ms)
        ENG->drain_max_ms = dt;
}

/* ---------------------------------------------------------------------------------------------- */
/* GeistEngine singleton                                                                          */

static GDExtensionObjectPtr engine_create_inst(void *ud, GDExtensionBool notify) {
    (void)ud;
    (void)notify;
    return NULL; /* the one instance is made at initialization */
}
static void engine_free_inst(void *ud, GDExtensionClassInstancePtr inst) {
    (void)ud;
    (void)inst;
}

static void me_poll(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)self;
    (void)a;
    (void)n;
    gv_int(ret, engine_drain_count());
}

static void me_configure(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)self;
    gvar v;
    /* scheduling knobs apply at once, also while NPCs talk */
    if (!ENG->ropts_loaded) {
        char e0[256];
        engine_ensure(e0, sizeof e0); /* loads the Project Settings first */
    }
    geist_runtime_options ro = ENG->ropts;
    int knobs = 0;
#define KNOB(key, field, conv)                                                                   \
    if (n > 0 && gv_dict_get(a[0], key, &v)) {                                                   \
        ro.field = conv;                                                                         \
        gv_free(&v);                                                                             \
        knobs = 1;                                                                               \
    }
    KNOB("budget_ms", budget_ms, (float)gv_to_float(&v, ro.budget_ms))
    KNOB("period_ms", period_ms, (float)gv_to_float(&v, ro.period_ms))
    KNOB("prefill_chunk", prefill_chunk, (int32_t)gv_to_int(&v, ro.prefill_chunk))
    KNOB("max_batch", max_batch, (int32_t)gv_to_int(&v, ro.max_batch))
#undef KNOB
    int32_t threads = ENG->threads;
    char backend[64];
    snprintf(backend, sizeof backend, "%s", ENG->backend);
    if (n > 0 && gv_dict_get(a[0], "threads", &v)) {
        threads = (int32_t)gv_to_int(&v, 1);
        gv_free(&v);
    }
    if (n > 0 && gv_dict_get(a[0], "backend", &v)) {
        char *bk = gv_to_utf8(&v, NULL);
        snprintf(backend, sizeof backend, "%s", bk ? bk : "auto");
        free(bk);
        gv_free(&v);
    }
    /* threads and backend make a new engine: only while nothing uses the old one */
    int remake = !ENG->e || threads != ENG->threads || strcmp(backend, ENG->backend) != 0;
    if (remake && (ENG->live_models > 0 || ENG->live_sessions > 0)) {
        gv_int(ret, E_BUSY);
        return;
    }
    char err[256];
    if (knobs && ENG->rt && gr_configure(ENG->rt, &ro, err, sizeof err) != GEIST_OK) {
        gv_int(ret, E_INVALID_PARAM);
        return;
    }
    ENG->ropts = ro;
    if (remake) {
        gr_free(ENG->rt);
        ENG->rt = NULL;
        geist_engine_free(ENG->e);
        ENG->e = NULL;
        ENG->threads = threads;
        snprintf(ENG->backend, sizeof ENG->backend, "%s", backend);
    }
    gv_int(ret, engine_ensure(err, sizeof err) ? E_OK : E_UNAVAILABLE);
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static void me_stats(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)self;
    (void)a;
    (void)n;
    char err[256];
    engine_ensure(err, sizeof err);
    gv_dict(ret);
    gv_dict_set_str(ret, "backend", ENG->e ? geist_engine_backend_name(ENG->e) : "");
    gv_dict_set_str(ret, "backends_available", geist_backends_available());
    gv_dict_set_int(ret, "threads", ENG->threads);
    gv_dict_set_str(ret, "runtime", gr_path());
    gv_dict_set_float(ret, "budget_ms", ENG->ropts.budget_ms);
    gv_dict_set_float(ret, "period_ms", ENG->ropts.period_ms);
    gv_dict_set_int(ret, "prefill_chunk", ENG->ropts.prefill_chunk);
    gv_dict_set_int(ret, "max_batch", ENG->ropts.max_batch);
    gv_dict_set_str(ret, "version", geist_version());
    gv_dict_set_int(ret, "models", ENG->live_models);
    gv_dict_set_int(ret, "sessions", ENG->live_sessions);
    gv_dict_set_int(ret, "ticking", ENG->ticking);
    gv_dict_set_int(ret, "drains", ENG->drains);
    gv_dict_set_float(ret, "drain_max_ms", ENG->drain_max_ms);
    gv_dict_set_float(ret, "drain_mean_ms", ENG->drains ? ENG->drain_total_ms / ENG->drains : 0);
    {
        /* drains that delivered events: median and p99 of the last 4096 */
        const int64_t k = ENG->drain_busy < 4096 ? ENG->drain_busy : 4096;
        float *v = malloc((size_t)(k ? k : 1) * sizeof *v);
        if (v) {
            memcpy(v, ENG->drain_ring, (size_t)k * sizeof *v);
            qsort(v, (size_t)k, sizeof *v, cmp_float);
            gv_dict_set_int(ret, "drains_with_events", ENG->drain_busy);
            gv_dict_set_float(ret, "drain_busy_median_ms", k ? v[k / 2] : 0.0);
            gv_dict_set_float(ret, "drain_busy_p99_ms", k ? v[(k * 99 + 99) / 100 - 1] : 0.0);
            free(v);
        }
    }
}

static const mdef ENGINE_METHODS[] = {
    {"poll", me_poll, T_INT, NULL, 0, {{0}}},
    {"configure", me_configure, T_INT, NULL, 1, {{"options", T_DICT, NULL}}},
    {"stats", me_stats, T_DICT, NULL, 0, {{0}}},
};

/* ---------------------------------------------------------------------------------------------- */
/* Registration                                                                                   */

static void reg_class(const char *name, const char *parent, GDExtensionClassCreateInstance2 create,
                      GDExtensionClassFreeInstance free_fn, int abstract) {
    gopq n = gd_sn(name), p = gd_sn(parent);
    GDExtensionClassCreationInfo5 ci;
    memset(&ci, 0, sizeof ci);
    ci.is_exposed = 1;
    ci.is_abstract = (GDExtensionBool)abstract;
    ci.create_instance_func = create;
    ci.free_instance_func = free_fn;
    GD.classdb_register_extension_class5(GD.library, &n, &p, &ci);
    gd_sn_free(&n);
    gd_sn_free(&p);
}

static void *class_tag(const char *name) {
    gopq n = gd_sn(name);
    void *t = GD.classdb_get_class_tag(&n);
    gd_sn_free(&n);
    return t;
}

/* class reference XML (addons/geist/doc_classes), embedded at build time */
extern const char *const geist_godot_docs[];
extern const size_t geist_godot_docs_count;

static void initialize(void *ud, GDExtensionInitializationLevel level) {
    (void)ud;
    if (level == GDEXTENSION_INITIALIZATION_EDITOR) {
        for (size_t i = 0; GD.editor_help_load_xml_from_utf8_chars_and_len &&
                           i < geist_godot_docs_count; i++)
            GD.editor_help_load_xml_from_utf8_chars_and_len(
                geist_godot_docs[i], (GDExtensionInt)strlen(geist_godot_docs[i]));
        return;
    }
    if (level != GDEXTENSION_INITIALIZATION_SCENE)
        return;
    BIND_CB.create_callback = binding_create;
    BIND_CB.free_callback = binding_free;
    BIND_CB.reference_callback = binding_ref;

    reg_class("GeistModel", "Resource", model_create, model_free, 0);
    reg_methods("GeistModel", MODEL_METHODS, sizeof MODEL_METHODS / sizeof *MODEL_METHODS);
    reg_property("GeistModel", "path", T_STRING, HINT_FILE, "*.gguf", "set_path",
                 "get_path_to_model", USAGE_DEFAULT);

    reg_class("GeistSession", "RefCounted", session_create_inst, session_free_inst, 0);
    reg_methods("GeistSession", SESSION_METHODS,
                sizeof SESSION_METHODS / sizeof *SESSION_METHODS);
    reg_property("GeistSession", "tokens_used", T_INT, HINT_NONE, NULL, NULL, "get_tokens_used",
                 USAGE_READONLY_EDITOR);
    reg_property("GeistSession", "system_prompt", T_STRING, HINT_ML, NULL, "set_system_prompt",
                 "get_system_prompt", USAGE_DEFAULT);
    reg_signal("GeistSession", "token", "piece");
    reg_signal("GeistSession", "finished", "text");
    reg_signal("GeistSession", "failed", "message");
    reg_const("GeistSession", "KVMode", "KV_F32", GEIST_KV_F32);
    reg_const("GeistSession", "KVMode", "KV_F16", GEIST_KV_F16);

    reg_class("GeistNPC", "Node", npc_create, npc_free, 0);
    reg_methods("GeistNPC", NPC_METHODS, sizeof NPC_METHODS / sizeof *NPC_METHODS);
    reg_property("GeistNPC", "model", T_OBJECT, HINT_RES, "GeistModel", "set_model", "get_model",
                 USAGE_DEFAULT);
    reg_property("GeistNPC", "persona", T_STRING, HINT_ML, NULL, "set_persona", "get_persona",
                 USAGE_DEFAULT);
    reg_property("GeistNPC", "max_seq_len", T_INT, HINT_RANGE, "16,4096,16,or_greater",
                 "set_max_seq_len", "get_max_seq_len", USAGE_DEFAULT);
    reg_property("GeistNPC", "kv_mode", T_INT, HINT_ENUM, "F32,F16", "set_kv_mode", "get_kv_mode",
                 USAGE_DEFAULT);
    reg_property("GeistNPC", "temperature", T_FLOAT, HINT_RANGE, "0,2,0.05", "set_temperature",
                 "get_temperature", USAGE_DEFAULT);
    reg_property("GeistNPC", "top_k", T_INT, HINT_RANGE, "0,200,1", "set_top_k", "get_top_k",
                 USAGE_DEFAULT);
    reg_property("GeistNPC", "top_p", T_FLOAT, HINT_RANGE, "0,1,0.01", "set_top_p", "get_top_p",
                 USAGE_DEFAULT);
    reg_property("GeistNPC", "min_p", T_FLOAT, HINT_RANGE, "0,1,0.01", "set_min_p", "get_min_p",
                 USAGE_DEFAULT);
    reg_property("GeistNPC", "repeat_penalty", T_FLOAT, HINT_RANGE, "1,2,0.01",
                 "set_repeat_penalty", "get_repeat_penalty", USAGE_DEFAULT);
    reg_property("GeistNPC", "max_tokens", T_INT, HINT_RANGE, "1,1024,1", "set_max_tokens",
                 "get_max_tokens", USAGE_DEFAULT);
    reg_property("GeistNPC", "seed", T_INT, HINT_NONE, NULL, "set_seed", "get_seed",
                 USAGE_DEFAULT);
    reg_property("GeistNPC", "priority", T_INT, HINT_RANGE, "-10,10,1", "set_priority",
                 "get_priority", USAGE_DEFAULT);
    reg_signal("GeistNPC", "token", "piece");
    reg_signal("GeistNPC", "finished", "text");
    reg_signal("GeistNPC", "failed", "message");
    reg_signal("GeistNPC", "replied", "text");

    reg_class("GeistEngineSingleton", "Object", engine_create_inst, engine_free_inst, 1);
    reg_methods("GeistEngineSingleton", ENGINE_METHODS,
                sizeof ENGINE_METHODS / sizeof *ENGINE_METHODS);

    TAG_MODEL = class_tag("GeistModel");
    TAG_SESSION = class_tag("GeistSession");
    TAG_NPC = class_tag("GeistNPC");

    ENG = calloc(1, sizeof *ENG);
    if (!ENG)
        return;
    ENG->obj = make_object("Object", "GeistEngineSingleton", ENG);
    GDExtensionObjectPtr eng = gd_singleton("Engine");
    gvar a[2];
    gv_sname(&a[0], "GeistEngine");
    gv_obj(&a[1], ENG->obj);
    gd_call(gd_mb("Engine", "register_singleton", 965313290), eng, a, 2, NULL);
    gv_free(&a[0]);
    gv_free(&a[1]);
    engine_tick_connect();
}

static void deinitialize(void *ud, GDExtensionInitializationLevel level) {
    (void)ud;
    if (level != GDEXTENSION_INITIALIZATION_SCENE || !ENG)
        return;
    GDExtensionObjectPtr eng = gd_singleton("Engine");
    gvar a;
    gv_sname(&a, "GeistEngine");
    gd_call(gd_mb("Engine", "unregister_singleton", 3304788590), eng, &a, 1, NULL);
    gv_free(&a);
    for (int i = 0; i < ENG->n_late; i++)
        free(ENG->late[i].msg);
    if (ENG->live_sessions == 0) {
        gr_free(ENG->rt);
        ENG->rt = NULL;
    }
    if (ENG->live_models == 0 && ENG->live_sessions == 0 && ENG->e)
        geist_engine_free(ENG->e);
    GD.object_destroy(ENG->obj);
    free(ENG);
    ENG = NULL;
}

#if defined(_WIN32)
__declspec(dllexport) GDExtensionBool
#else
__attribute__((visibility("default"))) GDExtensionBool
#endif
geist_godot_init(GDExtensionInterfaceGetProcAddress gpa, GDExtensionClassLibraryPtr lib,
                 GDExtensionInitialization *init) {
    if (!gd_api_load(gpa, lib))
        return 0;
    init->minimum_initialization_level = GDEXTENSION_INITIALIZATION_SCENE;
    init->userdata = NULL;
    init->initialize = initialize;
    init->deinitialize = deinitialize;
    return 1;
}
