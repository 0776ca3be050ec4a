/* gd_reply.c — two small classes: GeistReply (RefCounted), the one reply of one say() (or of one
 * GeistEngine.all_replied() call), which completes exactly once; and GeistSampler (Resource),
 * the sampling settings and stop strings that several NPCs may share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_classes.h"

#define USAGE_READONLY (4u | 268435456u)

/* ---------------------------------------------------------------------------------------------- */
/* GeistReply                                                                                     */

static GDExtensionObjectPtr reply_create(void *ud, GDExtensionBool notify) {
    (void)ud;
    (void)notify;
    greply *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->text = sdup("");
    r->error = sdup("");
    r->finish_reason = -1;
    r->obj = make_object("RefCounted", "GeistReply", r);
    return r->obj;
}

static void reply_free(void *ud, GDExtensionClassInstancePtr inst) {
    (void)ud;
    greply *r = inst;
    free(r->text);
    free(r->error);
    free(r);
}

void reply_new(gvar *out) {
    gv_obj(out, reply_create(NULL, 0));
}

void reply_complete(const gvar *reply, const char *text, int32_t finish_reason,
                    const char *error) {
    reply_complete_with(reply, text, finish_reason, error, NULL);
}

void reply_complete_with(const gvar *reply, const char *text, int32_t finish_reason,
                         const char *error, gvar *value) {
    greply *r = inst_of(gv_to_obj(reply), TAG_REPLY);
    if (!r || r->done)
        return;
    free(r->text);
    free(r->error);
    r->text = sdup(text);
    r->error = sdup(error);
    r->finish_reason = finish_reason;
    r->done = 1;
    gvar hold, v;
    gv_obj(&hold, r->obj); /* a handler may drop the last reference */
    if (value) {
        gd_emit(r->obj, "completed", value, 1);
    } else {
        gv_str(&v, text);
        gd_emit(r->obj, "completed", &v, 1);
        gv_free(&v);
    }
    gv_free(&hold);
}

void reply_complete_value(const gvar *reply, gvar *value) {
    greply *r = inst_of(gv_to_obj(reply), TAG_REPLY);
    if (!r || r->done)
        return;
    r->done = 1;
    r->finish_reason = GEIST_FINISH_STOP;
    gvar hold;
    gv_obj(&hold, r->obj);
    gd_emit(r->obj, "completed", value, 1);
    gv_free(&hold);
}

static const pdef REPLY_PROPS[] = {
    {"text", T_STRING, 0, NULL, offsetof(greply, text), PK_STR, 0, "", 1, 0, NULL, NULL,
     USAGE_READONLY},
    {"done", T_BOOL, 0, NULL, offsetof(greply, done), PK_BOOL, 0, NULL, 1, 0, NULL, NULL,
     USAGE_READONLY},
    {"finish_reason", T_INT, 0, NULL, offsetof(greply, finish_reason), PK_I32, -1, NULL, 1, 0,
     NULL, NULL, USAGE_READONLY},
    {"error", T_STRING, 0, NULL, offsetof(greply, error), PK_STR, 0, "", 1, 0, NULL, NULL,
     USAGE_READONLY},
};

/* ---------------------------------------------------------------------------------------------- */
/* GeistSampler                                                                                   */

static const pdef SAMPLER_PROPS[] = {
    {"temperature", T_FLOAT, HINT_RANGE, "0,2,0.05", offsetof(gsampler, temperature), PK_F64, 0.7,
     NULL, 0, 100, NULL, NULL, 0},
    {"top_k", T_INT, HINT_RANGE, "0,200,1", offsetof(gsampler, top_k), PK_I32, 40, NULL, 0, 1e9,
     NULL, NULL, 0},
    {"top_p", T_FLOAT, HINT_RANGE, "0,1,0.01", offsetof(gsampler, top_p), PK_F64, 0.95, NULL, 0, 1,
     NULL, NULL, 0},
    {"min_p", T_FLOAT, HINT_RANGE, "0,1,0.01", offsetof(gsampler, min_p), PK_F64, 0.05, NULL, 0, 1,
     NULL, NULL, 0},
    {"repeat_penalty", T_FLOAT, HINT_RANGE, "1,2,0.01", offsetof(gsampler, repeat_penalty), PK_F64,
     1.1, NULL, 0, 100, NULL, NULL, 0},
    {"frequency_penalty", T_FLOAT, HINT_RANGE, "0,2,0.01", offsetof(gsampler, frequency_penalty),
     PK_F64, 0, NULL, -100, 100, NULL, NULL, 0},
    {"presence_penalty", T_FLOAT, HINT_RANGE, "0,2,0.01", offsetof(gsampler, presence_penalty),
     PK_F64, 0, NULL, -100, 100, NULL, NULL, 0},
    {"penalty_last_n", T_INT, HINT_RANGE, "0,512,1", offsetof(gsampler, penalty_last_n), PK_I32,
     64, NULL, 0, 1e9, NULL, NULL, 0},
    {"seed", T_INT, HINT_NONE, NULL, offsetof(gsampler, seed), PK_I64, 0, NULL, 1, 0, NULL, NULL,
     0},
    {"stop", GDEXTENSION_VARIANT_TYPE_PACKED_STRING_ARRAY, HINT_NONE, NULL,
     offsetof(gsampler, stop), PK_STRS, 0, NULL, 1, 0, NULL, NULL, 0},
};

static GDExtensionObjectPtr sampler_create(void *ud, GDExtensionBool notify) {
    (void)ud;
    (void)notify;
    gsampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    props_init(s, SAMPLER_PROPS, COUNT(SAMPLER_PROPS));
    s->obj = make_object("Resource", "GeistSampler", s);
    return s->obj;
}

static void sampler_free(void *ud, GDExtensionClassInstancePtr inst) {
    (void)ud;
    props_free(inst, SAMPLER_PROPS, COUNT(SAMPLER_PROPS));
    free(inst);
}

/* Presets: {name, temperature, top_k, top_p, min_p, repeat_penalty} */
static const struct {
    const char *name;
    double t;
    int32_t k;
    double p, mp, rep;
} PRESETS[] = {
    {"greedy", 0.0, 0, 1.0, 0.0, 1.0},
    {"balanced", 0.7, 40, 0.95, 0.05, 1.1},
    {"creative", 1.0, 80, 0.98, 0.02, 1.05},
};

static void msp_apply_preset(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                             gvar *ret) {
    gsampler *s = self;
    char *name = a_str(a, n, 0, NULL);
    int rc = E_INVALID_PARAM;
    for (size_t i = 0; name && i < COUNT(PRESETS); i++) {
        if (strcmp(name, PRESETS[i].name) == 0) {
            s->temperature = PRESETS[i].t;
            s->top_k = PRESETS[i].k;
            s->top_p = PRESETS[i].p;
            s->min_p = PRESETS[i].mp;
            s->repeat_penalty = PRESETS[i].rep;
            rc = E_OK;
        }
    }
    if (rc != E_OK) {
        char err[256];
        snprintf(err, sizeof err, "geist: unknown sampler preset '%s' (greedy, balanced, creative)",
                 name ? name : "");
        gd_error(err);
    }
    free(name);
    gv_int(ret, rc);
}

static void msp_presets(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)self;
    (void)a;
    (void)n;
    gv_array(ret);
    for (size_t i = 0; i < COUNT(PRESETS); i++) {
        gvar v;
        gv_str(&v, PRESETS[i].name);
        gv_array_push(ret, &v);
    }
}

static const mdef SAMPLER_METHODS[] = {
    {"apply_preset", msp_apply_preset, T_INT, NULL, 1, {{"preset", T_STRING, NULL}}, NULL, 0},
    {"get_presets", msp_presets, T_ARRAY, NULL, 0, {{0}}, NULL, 0},
};

/* Strings of a PackedStringArray Variant, malloc'd (free with strs_free). */
char **strs_of(const gvar *arr, size_t *n) {
    int64_t cnt = gv_size(arr);
    *n = 0;
    if (cnt <= 0)
        return NULL;
    char **out = calloc((size_t)cnt, sizeof *out);
    for (int64_t i = 0; out && i < cnt; i++) {
        gvar v;
        if (!gv_index(arr, i, &v))
            continue;
        char *s = gv_to_utf8(&v, NULL);
        gv_free(&v);
        if (s && s[0])
            out[(*n)++] = s;
        else
            free(s);
    }
    return out;
}

void strs_free(char **s, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

int sampler_read(GDExtensionObjectPtr obj, geist_sampler_options *o, gvar *stop) {
    gsampler *s = inst_of(obj, TAG_SAMPLER);
    if (!s)
        return 0;
    o->temperature = (float)s->temperature;
    o->top_k = s->top_k;
    o->top_p = (float)s->top_p;
    o->min_p = (float)s->min_p;
    o->repeat_penalty = (float)s->repeat_penalty;
    o->frequency_penalty = (float)s->frequency_penalty;
    o->presence_penalty = (float)s->presence_penalty;
    o->penalty_last_n = s->penalty_last_n;
    o->seed = (uint64_t)s->seed;
    if (stop) {
        gv_free(stop);
        GD.variant_new_copy(stop, &s->stop);
    }
    return 1;
}

void reply_sampler_register(void) {
    reg_class("GeistReply", "RefCounted", reply_create, reply_free, 0);
    reg_props("GeistReply", REPLY_PROPS, COUNT(REPLY_PROPS));
    reg_signal_typed("GeistReply", "completed", "result", T_NIL);
    reg_class("GeistSampler", "Resource", sampler_create, sampler_free, 0);
    reg_methods("GeistSampler", SAMPLER_METHODS, COUNT(SAMPLER_METHODS));
    reg_props("GeistSampler", SAMPLER_PROPS, COUNT(SAMPLER_PROPS));
    TAG_REPLY = class_tag("GeistReply");
    TAG_SAMPLER = class_tag("GeistSampler");
}
