/* gd_api.h — the slice of Godot's GDExtension C interface the geist extension uses, loaded once
 * at entry, plus small helpers for Variants, Strings and engine method calls. Plain C, no
 * godot-cpp. gdextension_interface.h is generated from the Godot binary at build time. */
#ifndef GD_API_H
#define GD_API_H

#include <stddef.h>
#include <stdint.h>

#include "gdextension_interface.h"

/* Opaque storage for Godot builtins (Variant is 24 bytes, the largest builtin we hold 16). */
typedef struct gvar {
    _Alignas(8) uint8_t b[24];
} gvar;
typedef struct gopq {
    _Alignas(8) uint8_t b[16];
} gopq;

typedef struct gd_api {
    GDExtensionClassLibraryPtr library;
    GDExtensionInterfaceMemAlloc2 mem_alloc2;
    GDExtensionInterfaceMemFree2 mem_free2;
    GDExtensionInterfacePrintErrorWithMessage print_error_with_message;
    GDExtensionInterfaceVariantNewCopy variant_new_copy;
    GDExtensionInterfaceVariantNewNil variant_new_nil;
    GDExtensionInterfaceVariantDestroy variant_destroy;
    GDExtensionInterfaceVariantGetType variant_get_type;
    GDExtensionInterfaceVariantCall variant_call;
    GDExtensionInterfaceVariantSetKeyed variant_set_keyed;
    GDExtensionInterfaceVariantGetIndexed variant_get_indexed;
    GDExtensionInterfaceVariantGetKeyed variant_get_keyed;
    GDExtensionInterfaceVariantStringify variant_stringify;
    GDExtensionInterfaceGetVariantFromTypeConstructor get_variant_from_type_constructor;
    GDExtensionInterfaceGetVariantToTypeConstructor get_variant_to_type_constructor;
    GDExtensionInterfaceVariantGetPtrConstructor variant_get_ptr_constructor;
    GDExtensionInterfaceVariantGetPtrDestructor variant_get_ptr_destructor;
    GDExtensionInterfaceStringNewWithUtf8CharsAndLen2 string_new_with_utf8_chars_and_len2;
    GDExtensionInterfaceStringToUtf8Chars string_to_utf8_chars;
    GDExtensionInterfaceStringNameNewWithUtf8Chars string_name_new_with_utf8_chars;
    GDExtensionInterfacePackedByteArrayOperatorIndex packed_byte_array_operator_index;
    GDExtensionInterfacePackedByteArrayOperatorIndexConst packed_byte_array_operator_index_const;
    GDExtensionInterfaceObjectMethodBindCall object_method_bind_call;
    GDExtensionInterfaceObjectDestroy object_destroy;
    GDExtensionInterfaceGlobalGetSingleton global_get_singleton;
    GDExtensionInterfaceObjectGetInstanceBinding object_get_instance_binding;
    GDExtensionInterfaceObjectSetInstanceBinding object_set_instance_binding;
    GDExtensionInterfaceObjectSetInstance object_set_instance;
    GDExtensionInterfaceObjectCastTo object_cast_to;
    GDExtensionInterfaceObjectGetInstanceFromId object_get_instance_from_id;
    GDExtensionInterfaceObjectGetInstanceId object_get_instance_id;
    GDExtensionInterfaceRefSetObject ref_set_object;
    GDExtensionInterfaceCallableCustomCreate2 callable_custom_create2;
    GDExtensionInterfaceClassdbConstructObject2 classdb_construct_object2;
    GDExtensionInterfaceClassdbGetMethodBind classdb_get_method_bind;
    GDExtensionInterfaceClassdbGetClassTag classdb_get_class_tag;
    GDExtensionInterfaceClassdbRegisterExtensionClass5 classdb_register_extension_class5;
    GDExtensionInterfaceClassdbRegisterExtensionClassMethod classdb_register_extension_class_method;
    GDExtensionInterfaceClassdbRegisterExtensionClassProperty classdb_register_extension_class_property;
    GDExtensionInterfaceClassdbRegisterExtensionClassSignal classdb_register_extension_class_signal;
    GDExtensionInterfaceClassdbRegisterExtensionClassIntegerConstant classdb_register_extension_class_integer_constant;
    GDExtensionInterfaceClassdbUnregisterExtensionClass classdb_unregister_extension_class;
    GDExtensionsInterfaceEditorHelpLoadXmlFromUtf8CharsAndLen editor_help_load_xml_from_utf8_chars_and_len;
    GDExtensionInterfaceRegisterMainLoopCallbacks register_main_loop_callbacks; /* 4.5+ */
} gd_api;

extern gd_api GD;

int gd_api_load(GDExtensionInterfaceGetProcAddress gpa, GDExtensionClassLibraryPtr lib);

/* StringName / String values (destroy with gd_sn_free / gd_str_free). */
gopq gd_sn(const char *s);
void gd_sn_free(gopq *sn);
gopq gd_str(const char *s, size_t len);
void gd_str_free(gopq *s);

/* Variants. */
void gv_nil(gvar *v);
void gv_free(gvar *v);
void gv_str(gvar *v, const char *s);
void gv_strn(gvar *v, const char *s, size_t len);
void gv_sname(gvar *v, const char *s);
void gv_int(gvar *v, int64_t i);
void gv_float(gvar *v, double d);
void gv_bool(gvar *v, int b);
void gv_obj(gvar *v, GDExtensionObjectPtr o); /* takes a reference for RefCounted objects */
void gv_dict(gvar *v);
void gv_array(gvar *v);
void gv_from_builtin(gvar *v, GDExtensionVariantType t, const void *builtin);
int gv_type(const gvar *v);
int64_t gv_to_int(const gvar *v, int64_t def);
double gv_to_float(const gvar *v, double def);
GDExtensionObjectPtr gv_to_obj(const gvar *v);
char *gv_to_utf8(const gvar *v, size_t *len); /* malloc'd; any type is stringified */
void gv_dict_set(gvar *dict, const char *key, gvar *value); /* consumes value */
void gv_dict_set_int(gvar *dict, const char *key, int64_t i);
void gv_dict_set_float(gvar *dict, const char *key, double d);
void gv_dict_set_str(gvar *dict, const char *key, const char *s);
int gv_dict_get(const gvar *dict, const char *key, gvar *out); /* 1 if found */
void gv_array_push(gvar *arr, gvar *value);                  /* consumes value */
int64_t gv_size(const gvar *v);                              /* Array/Dictionary/Packed* */
int gv_index(const gvar *v, int64_t i, gvar *out);

/* Engine calls through method binds (hashes from extension_api.json; stable across 4.x). */
GDExtensionMethodBindPtr gd_mb(const char *cls, const char *method, int64_t hash);
/* Calls with Variant arguments; ret (may be NULL) is written, initialized. 1 on success. */
int gd_call(GDExtensionMethodBindPtr mb, GDExtensionObjectPtr obj, const gvar *args, int n,
            gvar *ret);
/* obj.emit_signal(name, args...) */
void gd_emit(GDExtensionObjectPtr obj, const char *signal, gvar *args, int n);
GDExtensionObjectPtr gd_singleton(const char *name);
void gd_error(const char *msg);

#endif
