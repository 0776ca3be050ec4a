/* gd_bind.c — shared helpers of the geist classes: Godot error codes, instance bindings and the
 * table-driven registration and marshalling of methods, properties, signals and constants. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gd_classes.h"

static void *bind_keep(void *p);


int err_of(geist_status st) {
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

double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

char *sdup(const char *s) {
    size_t n = strlen(s ? s : "");
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s ? s : "", n + 1);
    return d;
}


/* Process-wide by GDExtension's design: one extension instance per process. */
gengine *ENG;
void *TAG_MODEL, *TAG_SESSION, *TAG_NPC, *TAG_REPLY, *TAG_SAMPLER;
GDExtensionInstanceBindingCallbacks BIND_CB;

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

void bind_init(void) {
    BIND_CB.create_callback = binding_create;
    BIND_CB.free_callback = binding_free;
    BIND_CB.reference_callback = binding_ref;
}

void *inst_of(GDExtensionObjectPtr o, void *tag) {
    if (!o || !GD.object_cast_to(o, tag))
        return NULL;
    return GD.object_get_instance_binding(o, GD.library, &BIND_CB);
}

GDExtensionObjectPtr make_object(const char *parent, const char *cls, void *self) {
    gopq p = gd_sn(parent), c = gd_sn(cls);
    GDExtensionObjectPtr o = GD.classdb_construct_object2(&p);
    GD.object_set_instance(o, &c, self);
    GD.object_set_instance_binding(o, GD.library, self, &BIND_CB);
    gd_sn_free(&p);
    gd_sn_free(&c);
    return o;
}

/* ---------------------------------------------------------------------------------------------- */
/* Method registration: one table entry per method; call and ptrcall share the implementation.   */


static void m_invoke(const mdef *d, void *inst, const GDExtensionConstVariantPtr *a, int64_t n,
                     gvar *ret) {
    if (!d->prop) {
        d->fn(inst, a, n, ret);
    } else if (d->set) {
        gvar nil;
        gv_nil(&nil);
        prop_set(inst, d->prop, n > 0 ? (const gvar *)a[0] : &nil);
    } else {
        prop_get(inst, d->prop, ret);
    }
}

void m_call(void *ud, GDExtensionClassInstancePtr inst, const GDExtensionConstVariantPtr *a,
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
    m_invoke(d, inst, a, n, &ret);
    if (d->ret_type >= 0)
        memcpy(r_ret, &ret, sizeof ret); /* r_ret is a nil Variant: move into it */
    else
        gv_free(&ret);
}

void m_ptrcall(void *ud, GDExtensionClassInstancePtr inst, const GDExtensionConstTypePtr *a,
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
    m_invoke(d, inst, ptrs, d->nargs, &ret);
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

GDExtensionPropertyInfo pinfo(int type, const char *name, const char *cls, uint32_t hint,
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
void pinfo_free(gopq *store) {
    gd_sn_free(&store[0]);
    gd_sn_free(&store[1]);
    gd_str_free(&store[2]);
}

void reg_methods(const char *cls, const mdef *defs, size_t n) {
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

void reg_property(const char *cls, const char *name, int type, uint32_t hint,
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

void reg_signal(const char *cls, const char *name, const char *arg) {
    reg_signal_typed(cls, name, arg, T_STRING);
}

void reg_signal_typed(const char *cls, const char *name, const char *arg, int type) {
    gopq c = gd_sn(cls), n = gd_sn(name), store[3];
    GDExtensionPropertyInfo p = pinfo(type, arg, NULL, 0, NULL,
                                      type == T_NIL ? 131072u /* NIL_IS_VARIANT */ : USAGE_DEFAULT,
                                      store);
    GD.classdb_register_extension_class_signal(GD.library, &c, &n, &p, 1);
    pinfo_free(store);
    gd_sn_free(&c);
    gd_sn_free(&n);
}

void reg_signal2(const char *cls, const char *name, const char *arg0, int type0, const char *arg1,
                 int type1) {
    gopq c = gd_sn(cls), n = gd_sn(name), s0[3], s1[3];
    GDExtensionPropertyInfo p[2] = {pinfo(type0, arg0, NULL, 0, NULL, USAGE_DEFAULT, s0),
                                    pinfo(type1, arg1, NULL, 0, NULL, USAGE_DEFAULT, s1)};
    GD.classdb_register_extension_class_signal(GD.library, &c, &n, p, 2);
    pinfo_free(s0);
    pinfo_free(s1);
    gd_sn_free(&c);
    gd_sn_free(&n);
}

void reg_const(const char *cls, const char *en, const char *name, int64_t v) {
    gopq c = gd_sn(cls), e = gd_sn(en), n = gd_sn(name);
    GD.classdb_register_extension_class_integer_constant(GD.library, &c, &e, &n, v, 0);
    gd_sn_free(&c);
    gd_sn_free(&e);
    gd_sn_free(&n);
}

/* argument helpers: missing or mistyped arguments take the default */
int64_t a_int(const GDExtensionConstVariantPtr *a, int64_t n, int i, int64_t def) {
    return i < n ? gv_to_int(a[i], def) : def;
}
double a_float(const GDExtensionConstVariantPtr *a, int64_t n, int i, double def) {
    return i < n ? gv_to_float(a[i], def) : def;
}
char *a_str(const GDExtensionConstVariantPtr *a, int64_t n, int i, size_t *len) {
    if (i >= n || gv_type(a[i]) == T_NIL) {
        if (len)
            *len = 0;
        return sdup("");
    }
    return gv_to_utf8(a[i], len);
}


/* ---------------------------------------------------------------------------------------------- */
/* Table properties                                                                               */

/* What registration allocates (accessor tables, their names) lives until deinitialize. */
static void *BIND_ALLOCS[64];
static int N_BIND_ALLOCS;

static void *bind_keep(void *p) {
    if (p && N_BIND_ALLOCS < (int)COUNT(BIND_ALLOCS))
        BIND_ALLOCS[N_BIND_ALLOCS++] = p;
    return p;
}

void bind_free_all(void) {
    for (int i = 0; i < N_BIND_ALLOCS; i++)
        free(BIND_ALLOCS[i]);
    N_BIND_ALLOCS = 0;
}

#define FIELD(self, p, T) ((T *)((char *)(self) + (p)->off))

void props_init(void *self, const pdef *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const pdef *p = &t[i];
        switch (p->kind) {
        case PK_I32: *FIELD(self, p, int32_t) = (int32_t)p->def; break;
        case PK_I64: *FIELD(self, p, int64_t) = (int64_t)p->def; break;
        case PK_F64: *FIELD(self, p, double) = p->def; break;
        case PK_BOOL: *FIELD(self, p, int32_t) = p->def != 0; break;
        case PK_STR: *FIELD(self, p, char *) = sdup(p->def_str); break;
        case PK_OBJ: gv_nil(FIELD(self, p, gvar)); break;
        case PK_ARR: gv_array(FIELD(self, p, gvar)); break;
        case PK_STRS: {
            gopq arr;
            memset(&arr, 0, sizeof arr);
            GD.variant_get_ptr_constructor(GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY, 0)(&arr,
                                                                                          NULL);
            gv_from_builtin(FIELD(self, p, gvar), GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY,
                            &arr);
            GD.variant_get_ptr_destructor(GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY)(&arr);
            break;
        }
        }
    }
}

void props_free(void *self, const pdef *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const pdef *p = &t[i];
        if (p->kind == PK_STR) {
            free(*FIELD(self, p, char *));
            *FIELD(self, p, char *) = NULL;
        } else if (p->kind == PK_OBJ || p->kind == PK_STRS || p->kind == PK_ARR) {
            gv_free(FIELD(self, p, gvar));
            gv_nil(FIELD(self, p, gvar));
        }
    }
}

const pdef *prop_find(const pdef *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

static const char *type_word(int kind) {
    static const char *const w[] = {"an int", "an int", "a float", "a bool", "a String",
                                    "an Object", "a PackedStringArray", "an Array"};
    return w[kind];
}

int prop_set(void *self, const pdef *p, const gvar *v) {
    char err[512];
    int t = gv_type(v);
    int ok;
    switch (p->kind) {
    case PK_I32:
    case PK_I64: ok = t == T_INT || t == T_BOOL; break;
    case PK_F64: ok = t == T_FLOAT || t == T_INT; break;
    case PK_BOOL: ok = t == T_BOOL || t == T_INT; break;
    case PK_STR: ok = t == T_STRING || t == GDEXTENSION_VARIANT_TYPE_STRING_NAME; break;
    case PK_OBJ: ok = t == T_OBJECT || t == T_NIL; break;
    case PK_ARR: ok = t == T_ARRAY; break;
    default: ok = t == GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY || t == T_ARRAY; break;
    }
    if (!ok) {
        snprintf(err, sizeof err, "geist: %s must be %s", p->name, type_word(p->kind));
        gd_error(err);
        return 0;
    }
    if (p->kind <= PK_F64 && p->lo <= p->hi) {
        double x = gv_to_float(v, 0);
        if (x < p->lo || x > p->hi) {
            snprintf(err, sizeof err, "geist: %s = %g is outside [%g, %g]", p->name, x, p->lo,
                     p->hi);
            gd_error(err);
            return 0;
        }
    }
    err[0] = 0;
    if (p->check && !p->check(self, p, v, err, sizeof err)) {
        gd_error(err);
        return 0;
    }
    switch (p->kind) {
    case PK_I32: *FIELD(self, p, int32_t) = (int32_t)gv_to_int(v, 0); break;
    case PK_I64: *FIELD(self, p, int64_t) = gv_to_int(v, 0); break;
    case PK_F64: *FIELD(self, p, double) = gv_to_float(v, 0); break;
    case PK_BOOL: *FIELD(self, p, int32_t) = gv_to_int(v, 0) != 0; break;
    case PK_STR: {
        char *s = gv_to_utf8(v, NULL);
        free(*FIELD(self, p, char *));
        *FIELD(self, p, char *) = s ? s : sdup("");
        break;
    }
    case PK_OBJ:
        gv_free(FIELD(self, p, gvar));
        gv_obj(FIELD(self, p, gvar), gv_to_obj(v));
        break;
    default: {
        gvar *dst = FIELD(self, p, gvar);
        gv_free(dst);
        if (t == T_ARRAY && p->kind == PK_STRS) { /* typed: a PackedStringArray */
            gv_psa(dst, v);
        } else {
            GD.variant_new_copy(dst, v);
        }
        break;
    }
    }
    if (p->changed)
        p->changed(self, p);
    return 1;
}

void prop_get(void *self, const pdef *p, gvar *ret) {
    switch (p->kind) {
    case PK_I32: gv_int(ret, *FIELD(self, p, int32_t)); break;
    case PK_I64: gv_int(ret, *FIELD(self, p, int64_t)); break;
    case PK_F64: gv_float(ret, *FIELD(self, p, double)); break;
    case PK_BOOL: gv_bool(ret, *FIELD(self, p, int32_t)); break;
    case PK_STR: gv_str(ret, *FIELD(self, p, char *) ? *FIELD(self, p, char *) : ""); break;
    default: GD.variant_new_copy(ret, FIELD(self, p, gvar)); break;
    }
}

void reg_props(const char *cls, const pdef *t, size_t n) {
    mdef *defs = bind_keep(calloc(2 * n, sizeof *defs));
    if (!defs)
        return;
    for (size_t i = 0; i < n; i++) {
        const pdef *p = &t[i];
        size_t len = strlen(p->name) + 5;
        char *names = bind_keep(malloc(2 * len));
        if (!names)
            return;
        snprintf(names, len, "set_%s", p->name);
        snprintf(names + len, len, "get_%s", p->name);
        const char *cls_name = p->kind == PK_OBJ ? p->hint_str : NULL;
        defs[2 * i] = (mdef){names, NULL, -1, NULL, 1, {{"value", p->type, cls_name}}, p, 1};
        defs[2 * i + 1] = (mdef){names + len, NULL, p->type, cls_name, 0, {{0}}, p, 0};
        int ro = (p->usage & 268435456u) != 0; /* read-only: no setter */
        reg_methods(cls, &defs[2 * i + ro], 2 - (size_t)ro);
        reg_property(cls, p->name, p->type, p->hint, p->hint_str, ro ? NULL : names, names + len,
                     p->usage ? p->usage : USAGE_DEFAULT);
    }
}

typedef struct vclass {
    const vdef *v;
    size_t n;
} vclass;

static void *virtual_data(void *ud, GDExtensionConstStringNamePtr name, uint32_t hash) {
    (void)hash;
    const vclass *vc = ud;
    if (!vc)
        return NULL;
    gvar v;
    gv_from_builtin(&v, GDEXTENSION_VARIANT_TYPE_STRING_NAME, name);
    char *s = gv_to_utf8(&v, NULL);
    gv_free(&v);
    const vdef *found = NULL;
    for (size_t i = 0; s && i < vc->n && !found; i++)
        if (strcmp(vc->v[i].name, s) == 0)
            found = &vc->v[i];
    free(s);
    return (void *)found;
}

static void virtual_call(GDExtensionClassInstancePtr inst, GDExtensionConstStringNamePtr name,
                         void *data, const GDExtensionConstTypePtr *args, GDExtensionTypePtr ret) {
    (void)name;
    ((const vdef *)data)->fn(inst, args, ret);
}

void reg_class(const char *name, const char *parent, GDExtensionClassCreateInstance2 create,
               GDExtensionClassFreeInstance free_fn, int abstract) {
    reg_class_v(name, parent, create, free_fn, abstract, NULL, 0);
}

void reg_class_v(const char *name, const char *parent, GDExtensionClassCreateInstance2 create,
                 GDExtensionClassFreeInstance free_fn, int abstract, const vdef *virtuals,
                 size_t n_virtuals) {
    gopq n = gd_sn(name), p = gd_sn(parent);
    GDExtensionClassCreationInfo5 ci;
    memset(&ci, 0, sizeof ci);
    ci.is_exposed = 1;
    ci.is_abstract = (GDExtensionBool)abstract;
    ci.create_instance_func = create;
    ci.free_instance_func = free_fn;
    if (n_virtuals) {
        vclass *vc = bind_keep(malloc(sizeof *vc));
        if (vc) {
            *vc = (vclass){virtuals, n_virtuals};
            ci.class_userdata = vc;
            ci.get_virtual_call_data_func = virtual_data;
            ci.call_virtual_with_data_func = virtual_call;
        }
    }
    GD.classdb_register_extension_class5(GD.library, &n, &p, &ci);
    gd_sn_free(&n);
    gd_sn_free(&p);
}

void *class_tag(const char *name) {
    gopq n = gd_sn(name);
    void *t = GD.classdb_get_class_tag(&n);
    gd_sn_free(&n);
    return t;
}

void psa_from_array(GDExtensionTypePtr psa, const gvar *array) {
    gopq arr;
    memset(&arr, 0, sizeof arr);
    GD.get_variant_to_type_constructor(T_ARRAY)(&arr, (GDExtensionVariantPtr)array);
    GDExtensionConstTypePtr args[1] = {&arr};
    GD.variant_get_ptr_constructor(GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY, 2)(psa, args);
    GD.variant_get_ptr_destructor(T_ARRAY)(&arr);
}

void gv_psa(gvar *out, const gvar *array) {
    gopq psa;
    memset(&psa, 0, sizeof psa);
    psa_from_array(&psa, array);
    gv_from_builtin(out, GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY, &psa);
    GD.variant_get_ptr_destructor(GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY)(&psa);
}
