/* gd_model.c — GeistModel (Resource): a GGUF loaded from a file (mapped), a PackedByteArray
 * (aliased in place) or a .pck (read once into a buffer it aliases). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "gd_classes.h"

/* ---------------------------------------------------------------------------------------------- */
/* GeistModel                                                                                     */

void model_set_error(gmodel *m, int code, const char *msg) {
    m->err_code = code;
    snprintf(m->err, sizeof m->err, "%s", msg);
}

void model_unload(gmodel *m) {
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

GDExtensionObjectPtr model_create(void *ud, GDExtensionBool notify) {
    (void)ud;
    (void)notify;
    gmodel *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->source = "none";
    m->obj = make_object("Resource", "GeistModel", m);
    return m->obj;
}

void model_free(void *ud, GDExtensionClassInstancePtr inst) {
    (void)ud;
    gmodel *m = inst;
    model_unload(m);
    free(m->path);
    free(m);
}

/* Loads from a Variant holding a PackedByteArray: aliases its buffer, keeps a shared copy. */
int model_load_bytes_var(gmodel *m, const gvar *v, const char *source) {
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

void mm_load_from_buffer(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
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

int model_load_path(gmodel *m, const char *path) {
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

void mm_load_file(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    char *path = a_str(a, n, 0, NULL);
    gv_int(ret, path ? model_load_path(self, path) : E_OOM);
    free(path);
}

void mm_set_path(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)ret;
    gmodel *m = self;
    char *path = a_str(a, n, 0, NULL);
    if (path && path[0] && model_load_path(m, path) != E_OK) {
        char msg[700];
        snprintf(msg, sizeof msg, "geist: GeistModel cannot load %.100s: %.500s", path, m->err);
        gd_error(msg); /* a scene with a broken model says so when it loads */
    } else if (path && !path[0]) {
        free(m->path);
        m->path = sdup("");
    }
    free(path);
}

void mm_get_path(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gmodel *m = self;
    gv_str(ret, m->path ? m->path : "");
}

void mm_is_loaded(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_bool(ret, ((gmodel *)self)->m != NULL);
}

void mm_get_error(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gv_str(ret, ((gmodel *)self)->err);
}

void mm_get_error_code(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                              gvar *ret) {
    (void)a;
    (void)n;
    gv_int(ret, ((gmodel *)self)->err_code);
}

void mm_info(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
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
    gv_nil(&s);
    gv_free(&s);
    if (!json_to_variant(buf, ret) || gv_type(ret) != T_DICT) {
        gv_free(ret);
        gv_dict(ret);
    }
    free(buf);
    gv_dict_set_str(ret, "backend", geist_engine_backend_name(ENG->e));
    gv_dict_set_int(ret, "threads", ENG->threads);
    gv_dict_set_int(ret, "file_bytes", (int64_t)m->size);
    gv_dict_set_float(ret, "load_ms", m->load_ms);
    gv_dict_set_str(ret, "source", m->source);
    gv_dict_set_str(ret, "runtime", gr_path());
}

void mem_dict(gvar *ret, const geist_memory_report *r) {
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

void mm_memory(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
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

void mm_session_cost(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                            gvar *ret) {
    gmodel *m = self;
    gv_dict(ret);
    if (!m->m)
        return;
    geist_session_options o;
    geist_session_options_default(&o);
    o.max_seq_len = (int32_t)a_int(a, n, 0, 512);
    o.kv_mode = (int32_t)a_int(a, n, 1, GEIST_KV_F16);
    /* the core's estimate: what a session would hold, nothing allocated */
    geist_memory_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    if (geist_session_estimate(m->m, &o, &r) != GEIST_OK) {
        char err[256];
        geist_last_error(err, sizeof err);
        gv_dict_set_str(ret, "error", err);
        return;
    }
    gv_dict_set_int(ret, "kv_cache", (int64_t)r.kv_cache);
    gv_dict_set_int(ret, "scratch", (int64_t)r.scratch);
    gv_dict_set_int(ret, "other", (int64_t)r.other);
    gv_dict_set_int(ret, "total", (int64_t)(r.kv_cache + r.scratch + r.other));
}

GDExtensionObjectPtr session_new(gmodel *m, int32_t max_seq_len, const gvar *opts);

void mm_create_session(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                              gvar *ret) {
    gmodel *m = self;
    GDExtensionObjectPtr s = session_new(m, (int32_t)a_int(a, n, 0, 512),
                                         n > 1 ? (const gvar *)a[1] : NULL);
    gv_obj(ret, s);
}

void mm_n_ctx_train(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gmodel *m = self;
    gv_int(ret, m->m ? geist_model_n_ctx_train(m->m) : 0);
}

static const mdef MODEL_METHODS[] = {
    {"load_from_buffer", mm_load_from_buffer, T_INT, NULL, 1, {{"bytes", T_BYTES, NULL}}, NULL, 0},
    {"load_file", mm_load_file, T_INT, NULL, 1, {{"path", T_STRING, NULL}}, NULL, 0},
    {"set_model_path", mm_set_path, -1, NULL, 1, {{"path", T_STRING, NULL}}, NULL, 0},
    {"get_model_path", mm_get_path, T_STRING, NULL, 0, {{0}}, NULL, 0},
    {"is_loaded", mm_is_loaded, T_BOOL, NULL, 0, {{0}}, NULL, 0},
    {"get_error", mm_get_error, T_STRING, NULL, 0, {{0}}, NULL, 0},
    {"get_error_code", mm_get_error_code, T_INT, NULL, 0, {{0}}, NULL, 0},
    {"info", mm_info, T_DICT, NULL, 0, {{0}}, NULL, 0},
    {"memory", mm_memory, T_DICT, NULL, 0, {{0}}, NULL, 0},
    {"session_cost", mm_session_cost, T_DICT, NULL, 2, {{"max_seq_len", T_INT, NULL}, {"kv_mode", T_INT, NULL}}, NULL, 0},
    {"create_session", mm_create_session, T_OBJECT, "GeistSession", 2, {{"max_seq_len", T_INT, NULL}, {"options", T_DICT, NULL}}, NULL, 0},
    {"get_n_ctx_train", mm_n_ctx_train, T_INT, NULL, 0, {{0}}, NULL, 0},
};


int64_t model_count_tokens(gmodel *m, const char *text) {
    size_t n = 0;
    if (!m->m || !text)
        return 0;
    geist_status st = geist_tokenize(m->m, text, strlen(text), 0, NULL, 0, &n);
    return st == GEIST_OK || st == GEIST_ERR_BUFFER_TOO_SMALL ? (int64_t)n : 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* GeistModelLoader: .gguf files are GeistModel resources (load(), preload(), the editor's      */
/* FileSystem dock and drag-and-drop). Registered with ResourceLoader for the process.           */

typedef struct gloader {
    GDExtensionObjectPtr obj;
} gloader;

/* the one loader registered with ResourceLoader (process-wide, like the engine) */
static gvar LOADER;

static char *str_arg(GDExtensionConstTypePtr p, GDExtensionVariantType t) {
    gvar v;
    gv_from_builtin(&v, t, p);
    char *s = gv_to_utf8(&v, NULL);
    gv_free(&v);
    return s;
}

static int is_gguf(const char *path) {
    size_t n = path ? strlen(path) : 0;
    return n >= 5 && strcasecmp(path + n - 5, ".gguf") == 0;
}

static void ldr_extensions(GDExtensionClassInstancePtr inst, const GDExtensionConstTypePtr *args,
                           GDExtensionTypePtr r_ret) {
    (void)inst;
    (void)args;
    gvar arr, v;
    gv_array(&arr);
    gv_str(&v, "gguf");
    gv_array_push(&arr, &v);
    GD.variant_get_ptr_destructor(GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY)(r_ret);
    psa_from_array(r_ret, &arr);
    gv_free(&arr);
}

static void ldr_handles(GDExtensionClassInstancePtr inst, const GDExtensionConstTypePtr *args,
                        GDExtensionTypePtr r_ret) {
    (void)inst;
    char *t = str_arg(args[0], GDEXTENSION_VARIANT_TYPE_STRING_NAME);
    *(GDExtensionBool *)r_ret = t && (strcmp(t, "GeistModel") == 0 || strcmp(t, "Resource") == 0);
    free(t);
}

static void ldr_type(GDExtensionClassInstancePtr inst, const GDExtensionConstTypePtr *args,
                     GDExtensionTypePtr r_ret) {
    (void)inst;
    char *path = str_arg(args[0], T_STRING);
    gvar v;
    gv_str(&v, is_gguf(path) ? "GeistModel" : "");
    free(path);
    GD.variant_get_ptr_destructor(T_STRING)(r_ret);
    GD.get_variant_to_type_constructor(T_STRING)(r_ret, &v);
    gv_free(&v);
}

static void ldr_load(GDExtensionClassInstancePtr inst, const GDExtensionConstTypePtr *args,
                     GDExtensionTypePtr r_ret) {
    (void)inst;
    char *path = str_arg(args[0], T_STRING);
    GDExtensionObjectPtr o = model_create(NULL, 0);
    gmodel *m = inst_of(o, TAG_MODEL);
    gvar res;
    gv_obj(&res, o);
    /* mapped when the file is on disk; read once through FileAccess into a buffer the model
     * aliases inside a .pck (exported games, Android) */
    int rc = path ? model_load_path(m, path) : E_OOM;
    if (rc != E_OK) {
        char msg[700];
        snprintf(msg, sizeof msg, "geist: cannot load %.100s: %.500s", path ? path : "?",
                 m->err);
        gd_error(msg);
        gv_free(&res);
        gv_int(&res, rc);
    }
    free(path);
    GD.variant_destroy(r_ret);
    GD.variant_new_copy(r_ret, &res);
    gv_free(&res);
}

static GDExtensionObjectPtr loader_create(void *ud, GDExtensionBool notify) {
    (void)ud;
    (void)notify;
    gloader *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->obj = make_object("ResourceFormatLoader", "GeistModelLoader", l);
    return l->obj;
}

static void loader_free(void *ud, GDExtensionClassInstancePtr inst) {
    (void)ud;
    free(inst);
}

static const vdef LOADER_VIRTUALS[] = {
    {"_get_recognized_extensions", ldr_extensions},
    {"_handles_type", ldr_handles},
    {"_get_resource_type", ldr_type},
    {"_load", ldr_load},
};

void model_register(void) {
    reg_class("GeistModel", "Resource", model_create, model_free, 0);
    reg_methods("GeistModel", MODEL_METHODS, COUNT(MODEL_METHODS));
    reg_property("GeistModel", "model_path", T_STRING, HINT_FILE, "*.gguf", "set_model_path",
                 "get_model_path", USAGE_DEFAULT);
    TAG_MODEL = class_tag("GeistModel");
    reg_class_v("GeistModelLoader", "ResourceFormatLoader", loader_create, loader_free, 0,
                LOADER_VIRTUALS, COUNT(LOADER_VIRTUALS));
    gv_obj(&LOADER, loader_create(NULL, 0));
    GDExtensionObjectPtr rl = gd_singleton("ResourceLoader");
    gvar a[2];
    GD.variant_new_copy(&a[0], &LOADER);
    gv_bool(&a[1], 1);
    gd_call(gd_mb("ResourceLoader", "add_resource_format_loader", 2896595483), rl, a, 2, NULL);
    gv_free(&a[0]);
    gv_free(&a[1]);
}

void model_unregister(void) {
    GDExtensionObjectPtr rl = gd_singleton("ResourceLoader");
    if (rl && gv_type(&LOADER) == T_OBJECT)
        gd_call(gd_mb("ResourceLoader", "remove_resource_format_loader", 405397102), rl, &LOADER,
                1, NULL);
    gv_free(&LOADER);
    gv_nil(&LOADER);
}
