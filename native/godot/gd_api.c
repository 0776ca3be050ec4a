/* gd_api.c — loads the GDExtension interface and wraps the Variant plumbing (see gd_api.h). */
#include "gd_api.h"

#include <stdlib.h>
#include <string.h>

/* The interface table is process-wide by GDExtension's design: Godot hands it over once at entry. */
gd_api GD;

static GDExtensionVariantFromTypeConstructorFunc from_type[GDEXTENSION_VARIANT_TYPE_VARIANT_MAX];
static GDExtensionTypeFromVariantConstructorFunc to_type[GDEXTENSION_VARIANT_TYPE_VARIANT_MAX];
static GDExtensionPtrDestructor destroy_string, destroy_sname;

#define LOAD(name, type)                                                                         \
    do {                                                                                         \
        GD.name = (type)(void (*)(void))gpa(#name);                                                           \
        if (!GD.name)                                                                            \
            return 0;                                                                            \
    } while (0)

int gd_api_load(GDExtensionInterfaceGetProcAddress gpa, GDExtensionClassLibraryPtr lib) {
    GD.library = lib;
    LOAD(mem_alloc2, GDExtensionInterfaceMemAlloc2);
    LOAD(mem_free2, GDExtensionInterfaceMemFree2);
    LOAD(print_error_with_message, GDExtensionInterfacePrintErrorWithMessage);
    LOAD(variant_new_copy, GDExtensionInterfaceVariantNewCopy);
    LOAD(variant_new_nil, GDExtensionInterfaceVariantNewNil);
    LOAD(variant_destroy, GDExtensionInterfaceVariantDestroy);
    LOAD(variant_get_type, GDExtensionInterfaceVariantGetType);
    LOAD(variant_call, GDExtensionInterfaceVariantCall);
    LOAD(variant_set_keyed, GDExtensionInterfaceVariantSetKeyed);
    LOAD(variant_get_indexed, GDExtensionInterfaceVariantGetIndexed);
    LOAD(variant_get_keyed, GDExtensionInterfaceVariantGetKeyed);
    LOAD(variant_stringify, GDExtensionInterfaceVariantStringify);
    LOAD(get_variant_from_type_constructor, GDExtensionInterfaceGetVariantFromTypeConstructor);
    LOAD(get_variant_to_type_constructor, GDExtensionInterfaceGetVariantToTypeConstructor);
    LOAD(variant_get_ptr_constructor, GDExtensionInterfaceVariantGetPtrConstructor);
    LOAD(variant_get_ptr_destructor, GDExtensionInterfaceVariantGetPtrDestructor);
    LOAD(string_new_with_utf8_chars_and_len2, GDExtensionInterfaceStringNewWithUtf8CharsAndLen2);
    LOAD(string_to_utf8_chars, GDExtensionInterfaceStringToUtf8Chars);
    LOAD(string_name_new_with_utf8_chars, GDExtensionInterfaceStringNameNewWithUtf8Chars);
    LOAD(packed_byte_array_operator_index, GDExtensionInterfacePackedByteArrayOperatorIndex);
    LOAD(packed_byte_array_operator_index_const,
         GDExtensionInterfacePackedByteArrayOperatorIndexConst);
    LOAD(object_method_bind_call, GDExtensionInterfaceObjectMethodBindCall);
    LOAD(object_destroy, GDExtensionInterfaceObjectDestroy);
    LOAD(global_get_singleton, GDExtensionInterfaceGlobalGetSingleton);
    LOAD(object_get_instance_binding, GDExtensionInterfaceObjectGetInstanceBinding);
    LOAD(object_set_instance_binding, GDExtensionInterfaceObjectSetInstanceBinding);
    LOAD(object_set_instance, GDExtensionInterfaceObjectSetInstance);
    LOAD(object_cast_to, GDExtensionInterfaceObjectCastTo);
    LOAD(object_get_instance_from_id, GDExtensionInterfaceObjectGetInstanceFromId);
    LOAD(object_get_instance_id, GDExtensionInterfaceObjectGetInstanceId);
    LOAD(ref_set_object, GDExtensionInterfaceRefSetObject);
    LOAD(callable_custom_create2, GDExtensionInterfaceCallableCustomCreate2);
    LOAD(classdb_construct_object2, GDExtensionInterfaceClassdbConstructObject2);
    LOAD(classdb_get_method_bind, GDExtensionInterfaceClassdbGetMethodBind);
    LOAD(classdb_get_class_tag, GDExtensionInterfaceClassdbGetClassTag);
    LOAD(classdb_register_extension_class5, GDExtensionInterfaceClassdbRegisterExtensionClass5);
    LOAD(classdb_register_extension_class_method,
         GDExtensionInterfaceClassdbRegisterExtensionClassMethod);
    LOAD(classdb_register_extension_class_property,
         GDExtensionInterfaceClassdbRegisterExtensionClassProperty);
    LOAD(classdb_register_extension_class_signal,
         GDExtensionInterfaceClassdbRegisterExtensionClassSignal);
    LOAD(classdb_register_extension_class_integer_constant,
         GDExtensionInterfaceClassdbRegisterExtensionClassIntegerConstant);
    LOAD(classdb_unregister_extension_class, GDExtensionInterfaceClassdbUnregisterExtensionClass);
    /* editor-only; absent in export templates */
    GD.editor_help_load_xml_from_utf8_chars_and_len =
        (GDExtensionsInterfaceEditorHelpLoadXmlFromUtf8CharsAndLen)(void (*)(void))gpa(
            "editor_help_load_xml_from_utf8_chars_and_len");
    GD.register_main_loop_callbacks = (GDExtensionInterfaceRegisterMainLoopCallbacks)(void (*)(
        void))gpa("register_main_loop_callbacks");
    for (int t = 1; t < GDEXTENSION_VARIANT_TYPE_VARIANT_MAX; t++) {
        from_type[t] = GD.get_variant_from_type_constructor((GDExtensionVariantType)t);
        to_type[t] = GD.get_variant_to_type_constructor((GDExtensionVariantType)t);
    }
    destroy_string = GD.variant_get_ptr_destructor(GDEXTENSION_VARIANT_TYPE_STRING);
    destroy_sname = GD.variant_get_ptr_destructor(GDEXTENSION_VARIANT_TYPE_STRING_NAME);
    return 1;
}

gopq gd_sn(const char *s) {
    gopq r;
    memset(&r, 0, sizeof r);
    GD.string_name_new_with_utf8_chars(&r, s);
    return r;
}
void gd_sn_free(gopq *sn) { destroy_sname(sn); }

gopq gd_str(const char *s, size_t len) {
    gopq r;
    memset(&r, 0, sizeof r);
    GD.string_new_with_utf8_chars_and_len2(&r, s, (GDExtensionInt)len);
    return r;
}
void gd_str_free(gopq *s) { destroy_string(s); }

void gv_nil(gvar *v) { GD.variant_new_nil(v); }
void gv_free(gvar *v) { GD.variant_destroy(v); }

void gv_strn(gvar *v, const char *s, size_t len) {
    gopq str = gd_str(s ? s : "", s ? len : 0);
    from_type[GDEXTENSION_VARIANT_TYPE_STRING](v, &str);
    gd_str_free(&str);
}
void gv_str(gvar *v, const char *s) { gv_strn(v, s, s ? strlen(s) : 0); }
void gv_sname(gvar *v, const char *s) {
    gopq sn = gd_sn(s);
    from_type[GDEXTENSION_VARIANT_TYPE_STRING_NAME](v, &sn);
    gd_sn_free(&sn);
}
void gv_int(gvar *v, int64_t i) { from_type[GDEXTENSION_VARIANT_TYPE_INT](v, &i); }
void gv_float(gvar *v, double d) { from_type[GDEXTENSION_VARIANT_TYPE_FLOAT](v, &d); }
void gv_bool(gvar *v, int b) {
    GDExtensionBool x = b ? 1 : 0;
    from_type[GDEXTENSION_VARIANT_TYPE_BOOL](v, &x);
}
void gv_obj(gvar *v, GDExtensionObjectPtr o) {
    if (!o) {
        gv_nil(v);
        return;
    }
    from_type[GDEXTENSION_VARIANT_TYPE_OBJECT](v, &o);
}
void gv_from_builtin(gvar *v, GDExtensionVariantType t, const void *builtin) {
    from_type[t](v, (GDExtensionTypePtr)builtin);
}
static void gv_empty_builtin(gvar *v, GDExtensionVariantType t) {
    gopq b;
    memset(&b, 0, sizeof b);
    GD.variant_get_ptr_constructor(t, 0)(&b, NULL);
    from_type[t](v, &b);
    GD.variant_get_ptr_destructor(t)(&b);
}
void gv_dict(gvar *v) { gv_empty_builtin(v, GDEXTENSION_VARIANT_TYPE_DICTIONARY); }
void gv_array(gvar *v) { gv_empty_builtin(v, GDEXTENSION_VARIANT_TYPE_ARRAY); }

int gv_type(const gvar *v) { return (int)GD.variant_get_type(v); }

int64_t gv_to_int(const gvar *v, int64_t def) {
    int t = gv_type(v);
    if (t == GDEXTENSION_VARIANT_TYPE_INT) {
        int64_t i = 0;
        to_type[t](&i, (GDExtensionVariantPtr)v);
        return i;
    }
    if (t == GDEXTENSION_VARIANT_TYPE_FLOAT) {
        double d = 0;
        to_type[t](&d, (GDExtensionVariantPtr)v);
        return (int64_t)d;
    }
    if (t == GDEXTENSION_VARIANT_TYPE_BOOL) {
        GDExtensionBool b = 0;
        to_type[t](&b, (GDExtensionVariantPtr)v);
        return b;
    }
    return def;
}

double gv_to_float(const gvar *v, double def) {
    int t = gv_type(v);
    if (t == GDEXTENSION_VARIANT_TYPE_FLOAT) {
        double d = 0;
        to_type[t](&d, (GDExtensionVariantPtr)v);
        return d;
    }
    if (t == GDEXTENSION_VARIANT_TYPE_INT)
        return (double)gv_to_int(v, 0);
    return def;
}

GDExtensionObjectPtr gv_to_obj(const gvar *v) {
    if (gv_type(v) != GDEXTENSION_VARIANT_TYPE_OBJECT)
        return NULL;
    GDExtensionObjectPtr o = NULL;
    to_type[GDEXTENSION_VARIANT_TYPE_OBJECT](&o, (GDExtensionVariantPtr)v);
    return o;
}

char *gv_to_utf8(const gvar *v, size_t *len) {
    gopq s;
    memset(&s, 0, sizeof s);
    if (gv_type(v) == GDEXTENSION_VARIANT_TYPE_STRING)
        to_type[GDEXTENSION_VARIANT_TYPE_STRING](&s, (GDExtensionVariantPtr)v);
    else
        GD.variant_stringify(v, &s);
    GDExtensionInt n = GD.string_to_utf8_chars(&s, NULL, 0);
    char *out = malloc((size_t)n + 1);
    if (out) {
        GD.string_to_utf8_chars(&s, out, n);
        out[n] = 0;
        if (len)
            *len = (size_t)n;
    }
    gd_str_free(&s);
    return out;
}

void gv_dict_set(gvar *dict, const char *key, gvar *value) {
    gvar k;
    gv_str(&k, key);
    GDExtensionBool valid = 0;
    GD.variant_set_keyed(dict, &k, value, &valid);
    gv_free(&k);
    gv_free(value);
}
void gv_dict_set_int(gvar *dict, const char *key, int64_t i) {
    gvar v;
    gv_int(&v, i);
    gv_dict_set(dict, key, &v);
}
void gv_dict_set_float(gvar *dict, const char *key, double d) {
    gvar v;
    gv_float(&v, d);
    gv_dict_set(dict, key, &v);
}
void gv_dict_set_str(gvar *dict, const char *key, const char *s) {
    gvar v;
    gv_str(&v, s);
    gv_dict_set(dict, key, &v);
}

int gv_dict_get(const gvar *dict, const char *key, gvar *out) {
    if (gv_type(dict) != GDEXTENSION_VARIANT_TYPE_DICTIONARY)
        return 0;
    gvar k;
    gv_str(&k, key);
    GDExtensionBool valid = 0;
    /* has() first: get_keyed on a missing key is an error print */
    gvar has, *argp = &k;
    gopq m = gd_sn("has");
    GDExtensionCallError ce;
    GD.variant_call((GDExtensionVariantPtr)dict, &m, (const GDExtensionConstVariantPtr *)&argp, 1,
                    &has, &ce);
    gd_sn_free(&m);
    int found = ce.error == GDEXTENSION_CALL_OK && gv_to_int(&has, 0);
    gv_free(&has);
    if (found) {
        GD.variant_get_keyed(dict, &k, out, &valid);
        found = valid;
        if (!valid)
            gv_free(out);
    }
    gv_free(&k);
    return found;
}

void gv_array_push(gvar *arr, gvar *value) {
    gopq m = gd_sn("push_back");
    gvar r;
    GDExtensionCallError ce;
    const GDExtensionConstVariantPtr args[1] = {value};
    GD.variant_call(arr, &m, args, 1, &r, &ce);
    if (ce.error == GDEXTENSION_CALL_OK)
        gv_free(&r);
    gd_sn_free(&m);
    gv_free(value);
}

int64_t gv_size(const gvar *v) {
    gopq m = gd_sn("size");
    gvar r;
    GDExtensionCallError ce;
    GD.variant_call((GDExtensionVariantPtr)v, &m, NULL, 0, &r, &ce);
    gd_sn_free(&m);
    if (ce.error != GDEXTENSION_CALL_OK)
        return -1;
    int64_t n = gv_to_int(&r, -1);
    gv_free(&r);
    return n;
}

int gv_index(const gvar *v, int64_t i, gvar *out) {
    GDExtensionBool valid = 0, oob = 0;
    GD.variant_get_indexed(v, i, out, &valid, &oob);
    if (!valid || oob) {
        gv_free(out);
        return 0;
    }
    return 1;
}

GDExtensionMethodBindPtr gd_mb(const char *cls, const char *method, int64_t hash) {
    gopq c = gd_sn(cls), m = gd_sn(method);
    GDExtensionMethodBindPtr mb = GD.classdb_get_method_bind(&c, &m, hash);
    gd_sn_free(&c);
    gd_sn_free(&m);
    return mb;
}

int gd_call(GDExtensionMethodBindPtr mb, GDExtensionObjectPtr obj, const gvar *args, int n,
            gvar *ret) {
    GDExtensionConstVariantPtr ptrs[8];
    if (!mb || n > 8) {
        if (ret)
            gv_nil(ret);
        return 0;
    }
    for (int i = 0; i < n; i++)
        ptrs[i] = &args[i];
    gvar tmp;
    GDExtensionCallError ce;
    GD.object_method_bind_call(mb, obj, ptrs, n, &tmp, &ce);
    if (ret)
        *ret = tmp;
    else
        gv_free(&tmp);
    return ce.error == GDEXTENSION_CALL_OK;
}

void gd_emit(GDExtensionObjectPtr obj, const char *signal, gvar *args, int n) {
    static GDExtensionMethodBindPtr emit_mb; /* method binds never change once looked up */
    if (!emit_mb)
        emit_mb = gd_mb("Object", "emit_signal", 4047867050);
    gvar all[8];
    if (n > 7)
        n = 7;
    gv_sname(&all[0], signal);
    for (int i = 0; i < n; i++)
        all[i + 1] = args[i];
    gd_call(emit_mb, obj, all, n + 1, NULL);
    gv_free(&all[0]);
}

GDExtensionObjectPtr gd_singleton(const char *name) {
    gopq sn = gd_sn(name);
    GDExtensionObjectPtr o = GD.global_get_singleton(&sn);
    gd_sn_free(&sn);
    return o;
}

void gd_error(const char *msg) {
    GD.print_error_with_message("geist", msg, "geist", "geist_godot", 0, 0);
}
