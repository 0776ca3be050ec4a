/* gd_engine.c — the GeistEngine singleton: the one geist_engine and runtime, the per-frame event
 * drain on the main thread (signals of sessions and NPCs), and the extension entry point. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_classes.h"

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

int engine_ensure(char *err, size_t cap) {
    if (ENG->e)
        return 1;
    if (ENG->threads <= 0)
        ENG->threads = setting_int("geist/runtime/threads", 1);
    if (!ENG->backend[0])
        setting_str("geist/runtime/backend", "auto", ENG->backend, sizeof ENG->backend);
    if (!ENG->device_loaded) {
        setting_str("geist/runtime/device", "auto", ENG->device, sizeof ENG->device);
        ENG->device_fast = setting_int("geist/runtime/device_fast", 0) != 0;
        ENG->device_loaded = 1;
    }
    geist_engine_options o;
    geist_engine_options_default(&o);
    o.n_threads = ENG->threads > 0 ? ENG->threads : 1;
    o.backend = ENG->backend;
    o.device = ENG->device[0] ? ENG->device : NULL;
    o.device_flags = ENG->device_fast ? GEIST_DEVICE_FAST : 0u;
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

void engine_drain(void);

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
void engine_tick_connect(void) {
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

void engine_late_reply(GDExtensionObjectPtr npc, const gvar *reply, const char *msg) {
    if (!ENG)
        return; /* the extension is shutting down: nobody is left to resume */
    if (ENG->n_late == ENG->cap_late) {
        size_t nc = ENG->cap_late ? 2 * ENG->cap_late : 16;
        glate *nl = realloc(ENG->late, nc * sizeof *nl);
        if (!nl)
            return;
        ENG->late = nl;
        ENG->cap_late = nc;
    }
    glate *l = &ENG->late[ENG->n_late++];
    l->npc = npc ? GD.object_get_instance_id(npc) : 0;
    if (reply)
        GD.variant_new_copy(&l->reply, reply);
    else
        gv_nil(&l->reply);
    l->msg = sdup(msg);
    engine_tick_connect();
}


/* ---------------------------------------------------------------------------------------------- */
/* Event drain (main thread)                                                                      */

void emit1(GDExtensionObjectPtr obj, const char *sig, const char *text, size_t len) {
    gvar v;
    gv_strn(&v, text, len);
    gd_emit(obj, sig, &v, 1);
    gv_free(&v);
}

GDExtensionObjectPtr npc_obj_of(GDObjectInstanceID id) {
    return id ? GD.object_get_instance_from_id(id) : NULL;
}

void handle_event(const gr_event *ev) {
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
    } else if (ev->type == GEIST_EVENT_ACTION) {
        /* the call {"name": ..., "arguments": {...}}: acted(name, args) with typed arguments
         * (ints stay ints); FINISHED follows */
        free(s->last_action);
        s->last_action = sdup(text);
        gvar call, name, args;
        GDExtensionObjectPtr npc = npc_obj_of(s->npc_id);
        if (npc && json_to_variant(text, &call) && gv_type(&call) == T_DICT) {
            if (gv_dict_get(&call, "name", &name)) {
                char *nm = gv_to_utf8(&name, NULL);
                gv_free(&name);
                gv_sname(&name, nm ? nm : "");
                free(nm);
                if (!gv_dict_get(&call, "arguments", &args))
                    gv_dict(&args);
                gvar both[2] = {name, args};
                gd_emit(npc, "acted", both, 2);
                gv_free(&args);
                gv_free(&name);
            }
            gv_free(&call);
        } else if (npc) {
            gv_free(&call);
        }
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
            if (ok && ev->finish_reason != GEIST_FINISH_CANCELLED && s->last_action) {
                /* the reply as the model wrote it, call line included: the next turn sees what
                 * the NPC did and reuses the KV to its end */
                size_t lt = strlen(text), la = strlen(s->last_action);
                char *full = malloc(lt + la + 8);
                if (full) {
                    snprintf(full, lt + la + 8, "%s%s<call>%s", text, lt ? "\n" : "",
                             s->last_action);
                    transcript_add(s, "assistant", full);
                    free(full);
                } else {
                    transcript_add(s, "assistant", text);
                }
            } else if (ok && ev->finish_reason != GEIST_FINISH_CANCELLED)
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
            gnpc *p = inst_of(npc_obj_of(s->npc_id), TAG_NPC);
            if (p)
                npc_reply_ended(p, ok ? text : "", ok ? ev->finish_reason : -1, ok ? "" : text);
        }
    }
    gv_free(&hold);
}

/* GeistEngine.all_replied(): completes a waiter once none of its NPCs has a reply running or
 * queued (freed NPCs count as done, with an empty reply). */
static int grow_waiters(void);

static int engine_check_waiters(void) {
    int done = 0;
    for (size_t w = 0; w < ENG->n_waiters;) {
        gwaiter *wt = &ENG->waiters[w];
        int idle = 1;
        for (size_t i = 0; i < wt->n && idle; i++) {
            gnpc *p = inst_of(npc_obj_of(wt->npcs[i]), TAG_NPC);
            idle = !p || npc_is_idle(p);
        }
        if (!idle) {
            w++;
            continue;
        }
        gwaiter taken = *wt;
        ENG->waiters[w] = ENG->waiters[--ENG->n_waiters];
        gvar arr;
        gv_array(&arr);
        for (size_t i = 0; i < taken.n; i++) {
            gnpc *p = inst_of(npc_obj_of(taken.npcs[i]), TAG_NPC);
            gvar v;
            gv_str(&v, p ? p->last_reply : "");
            gv_array_push(&arr, &v);
        }
        reply_complete_value(&taken.reply, &arr);
        gv_free(&arr);
        gv_free(&taken.reply);
        free(taken.npcs);
        done++;
    }
    return done;
}

static void me_all_replied(void *self, const GDExtensionConstVariantPtr *a, int64_t n,
                           gvar *ret) {
    (void)self;
    gvar reply;
    reply_new(&reply);
    gopq sig[1], sn = gd_sn("completed");
    GDExtensionObjectPtr ro = gv_to_obj(&reply);
    memset(sig, 0, sizeof sig);
    GDExtensionConstTypePtr args[2] = {&ro, &sn};
    GD.variant_get_ptr_constructor(T_SIGNAL, 2)(sig, args);
    gv_from_builtin(ret, T_SIGNAL, sig);
    GD.variant_get_ptr_destructor(T_SIGNAL)(sig);
    gd_sn_free(&sn);
    int64_t cnt = n > 0 ? gv_size(a[0]) : 0;
    GDObjectInstanceID *ids = calloc((size_t)(cnt > 0 ? cnt : 1), sizeof *ids);
    size_t k = 0;
    for (int64_t i = 0; ids && i < cnt; i++) {
        gvar v;
        if (!gv_index(a[0], i, &v))
            continue;
        GDExtensionObjectPtr o = gv_to_obj(&v);
        gv_free(&v);
        if (inst_of(o, TAG_NPC))
            ids[k++] = GD.object_get_instance_id(o);
        else
            gd_error("geist: all_replied() takes an Array of GeistNPC; other items are ignored");
    }
    if (!ids || (ENG->n_waiters == ENG->cap_waiters && !grow_waiters())) {
        free(ids);
        engine_late_reply(NULL, &reply, "out of memory");
        gv_free(&reply);
        return;
    }
    ENG->waiters[ENG->n_waiters++] = (gwaiter){reply, ids, k}; /* reply moved */
    engine_tick_connect();
}

static int grow_waiters(void) {
    size_t nc = ENG->cap_waiters ? 2 * ENG->cap_waiters : 8;
    gwaiter *nw = realloc(ENG->waiters, nc * sizeof *nw);
    if (!nw)
        return 0;
    ENG->waiters = nw;
    ENG->cap_waiters = nc;
    return 1;
}

int engine_drain_count(void) {
    int total = 0;
    /* late failures: taken out first, as their handlers may add more */
    size_t n_late = ENG->n_late;
    glate *late = ENG->late;
    ENG->late = NULL;
    ENG->n_late = ENG->cap_late = 0;
    for (size_t i = 0; i < n_late; i++) {
        GDExtensionObjectPtr o = npc_obj_of(late[i].npc);
        if (o) {
            emit1(o, "failed", late[i].msg, strlen(late[i].msg));
            o = npc_obj_of(late[i].npc);
            if (o)
                emit1(o, "replied", "", 0);
        }
        reply_complete(&late[i].reply, "", -1, late[i].msg);
        gv_free(&late[i].reply);
        free(late[i].msg);
        total++;
    }
    free(late);
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
    total += engine_check_waiters();
    return total;
}

void engine_drain(void) {
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
    char backend[64], device[128];
    snprintf(backend, sizeof backend, "%s", ENG->backend);
    snprintf(device, sizeof device, "%s", ENG->device);
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
    if (n > 0 && gv_dict_get(a[0], "device", &v)) {
        char *dv = gv_to_utf8(&v, NULL);
        snprintf(device, sizeof device, "%s", dv ? dv : "auto");
        free(dv);
        gv_free(&v);
    }
    int device_fast = ENG->device_fast;
    if (n > 0 && gv_dict_get(a[0], "device_fast", &v)) {
        device_fast = gv_to_int(&v, 0) != 0;
        gv_free(&v);
    }
    /* threads, backend and device make a new engine: only while nothing uses the old one */
    int remake = !ENG->e || threads != ENG->threads || strcmp(backend, ENG->backend) != 0 ||
                 strcmp(device, ENG->device) != 0 || device_fast != ENG->device_fast;
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
        snprintf(ENG->device, sizeof ENG->device, "%s", device);
        ENG->device_fast = device_fast;
        ENG->device_loaded = 1;
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
    gv_dict_set_str(ret, "device", ENG->e ? geist_engine_device_name(ENG->e) : "");
    /* in effect only where a device backend runs (the CPU backends ignore the flag) */
    gv_dict_set_int(ret, "device_fast",
                    ENG->device_fast && ENG->e && geist_engine_device_name(ENG->e)[0] != '\0');
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
    {"poll", me_poll, T_INT, NULL, 0, {{0}}, NULL, 0},
    {"configure", me_configure, T_INT, NULL, 1, {{"options", T_DICT, NULL}}, NULL, 0},
    {"stats", me_stats, T_DICT, NULL, 0, {{0}}, NULL, 0},
    {"all_replied", me_all_replied, T_SIGNAL, NULL, 1, {{"npcs", T_ARRAY, NULL}}, NULL, 0},
};


/* ---------------------------------------------------------------------------------------------- */
/* Registration                                                                                   */



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
    bind_init();

    reply_sampler_register(); /* GeistReply and GeistSampler first: the others name them */
    model_register();
    session_register();
    npc_register();
    reg_class("GeistEngineSingleton", "Object", engine_create_inst, engine_free_inst, 1);
    reg_methods("GeistEngineSingleton", ENGINE_METHODS, COUNT(ENGINE_METHODS));

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
    for (size_t i = 0; i < ENG->n_late; i++) {
        gv_free(&ENG->late[i].reply);
        free(ENG->late[i].msg);
    }
    free(ENG->late);
    for (size_t i = 0; i < ENG->n_waiters; i++) {
        gv_free(&ENG->waiters[i].reply);
        free(ENG->waiters[i].npcs);
    }
    free(ENG->waiters);
    model_unregister();
    if (ENG->live_sessions == 0) {
        gr_free(ENG->rt);
        ENG->rt = NULL;
    }
    if (ENG->live_models == 0 && ENG->live_sessions == 0 && ENG->e)
        geist_engine_free(ENG->e);
    GD.object_destroy(ENG->obj);
    free(ENG);
    ENG = NULL;
    bind_free_all();
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

