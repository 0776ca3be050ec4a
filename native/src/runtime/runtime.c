/* The runtime (runtime.h): requests, the scheduler thread and its batched steps, events.
 *
 * Locking: one mutex guards the request list, the event queue and the options. The scheduler
 * thread takes it only between steps; the forward pass, sampling and detokenizing run unlocked
 * on requests marked in_step, which nobody else frees or changes meanwhile (cancel and session
 * free only set flags and wait). Every event is made on the scheduler thread, so the events of a
 * request are in order and each request ends exactly once. */
#include "runtime.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../chat/conversation.h"
#include "../gen/actions.h"
#include "../gen/gen.h"
#include "../session/forward.h"
#include "../util/pool.h"

enum { R_NEW, R_PREFILL, R_SAMPLE, R_DECODE };

typedef struct gt_req {
    struct gt_req *next;
    uint64_t id, user_data, seq, last_step;
    geist_session *session;
    const geist_model *model;
    int32_t priority;
    /* inputs, owned copies */
    char *text;
    int32_t *ids;
    size_t n_ids;
    geist_chat_message *msgs; /* roles and contents owned */
    size_t n_messages;
    char **stop;
    size_t n_stop;
    geist_sampler_options sopts;
    geist_context_policy context;
    int32_t max_tokens;
    geist_action *actions; /* names, descriptions and parameters owned */
    size_t n_actions;
    int32_t action_choice;
    char *action_grammar; /* the reply grammar composed from the actions (GBNF) */
    gt_grammar *grammar; /* compiled at submit (the model's cache), or NULL */
    /* state */
    int state;
    atomic_bool cancel; /* set under the lock, read unlocked in a step */
    bool in_step;
    gt_gen gen; /* the generation loop's state (gen/gen.h): prompt, sampler, text, stops */
    int32_t n_prompt_done, step_rows;
    int32_t pending;        /* R_DECODE: the sampled token to run */
    int32_t sampled;        /* the step's sample (sample_task), with its status and error */
    int32_t device_id;      /* the greedy id the device picked in the step, when dev_picked */
    bool dev_picked;        /* this step's row asked the device for its greedy id, not logits */
    geist_status sample_st;
    gt_err sample_err;
    int32_t finish_after;   /* reason to finish with once `pending` ran, or -1 */
} gt_req;

typedef struct ev_item {
    geist_event ev;
    char *text; /* owned */
} ev_item;

typedef struct ev_vec {
    ev_item *v;
    size_t n, cap;
} ev_vec;

struct gt_runtime {
    geist_engine *engine;
    pthread_mutex_t lock;
    pthread_cond_t work;      /* scheduler: something to do */
    pthread_cond_t ev_ready;  /* poll: events queued */
    pthread_cond_t step_done; /* session free: a step ended */
    pthread_t thread;
    bool started, stop;
    gt_req *reqs;
    uint64_t next_id, next_seq, step_no;
    ev_vec queue;     /* events waiting for poll */
    size_t queue_head;
    ev_vec delivered; /* handed out by the last poll; texts freed on the next */
    geist_runtime_options opts;
    double credit_ms, last_refill_ms;
    gt_fwd_scratch *scratch; /* the scheduler thread's */
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static char *dup_str(const char *s) {
    const size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---------------------------------------------------------------------------------------------- */
/* Requests */

static void req_free(gt_req *r) {
    if (!r) return;
    free(r->text);
    free(r->ids);
    if (r->msgs)
        for (size_t i = 0; i < r->n_messages; i++) {
            free((char *)r->msgs[i].role);
            free((char *)r->msgs[i].content);
        }
    free(r->msgs);
    if (r->stop)
        for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    if (r->actions)
        for (size_t i = 0; i < r->n_actions; i++) {
            free((char *)r->actions[i].name);
            free((char *)r->actions[i].description);
            free((char *)r->actions[i].parameters);
        }
    free(r->actions);
    free(r->action_grammar);
    gt_gen_free(&r->gen);
    gt_grammar_release(r->grammar);
    free(r);
}

void gt_runtime_options_default(geist_runtime_options *o) {
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->budget_ms = 0.0f;
    o->period_ms = 16.0f;
    o->prefill_chunk = 64;
    o->max_batch = 64;
}

void gt_request_default(geist_request *r) {
    memset(r, 0, sizeof *r);
    r->struct_size = sizeof *r;
    gt_sampler_options_default(&r->sampler);
    r->max_tokens = 128;
    r->context = (geist_context_policy){.trim = 1, .keep_first = -1, .keep_last = 1,
                                        .reply_reserve = -1};
}

gt_runtime *gt_runtime_create(geist_engine *engine) {
    gt_runtime *rt = calloc(1, sizeof *rt);
    if (!rt) return NULL;
    rt->scratch = gt_fwd_scratch_create();
    if (!rt->scratch) {
        free(rt);
        return NULL;
    }
    rt->engine = engine;
    pthread_mutex_init(&rt->lock, NULL);
    pthread_cond_init(&rt->work, NULL);
    pthread_cond_init(&rt->ev_ready, NULL);
    pthread_cond_init(&rt->step_done, NULL);
    gt_runtime_options_default(&rt->opts);
    rt->next_id = 1;
    return rt;
}

static void ev_vec_clear(ev_vec *q, size_t from) {
    for (size_t i = from; i < q->n; i++) free(q->v[i].text);
    q->n = 0;
}

void gt_runtime_free(gt_runtime *rt) {
    if (!rt) return;
    pthread_mutex_lock(&rt->lock);
    rt->stop = true;
    for (gt_req *r = rt->reqs; r; r = r->next) atomic_store(&r->cancel, true);
    pthread_cond_broadcast(&rt->work);
    const bool started = rt->started;
    pthread_mutex_unlock(&rt->lock);
    if (started) pthread_join(rt->thread, NULL);
    while (rt->reqs) {
        gt_req *r = rt->reqs;
        rt->reqs = r->next;
        req_free(r);
    }
    ev_vec_clear(&rt->queue, rt->queue_head);
    ev_vec_clear(&rt->delivered, 0);
    free(rt->queue.v);
    free(rt->delivered.v);
    gt_fwd_scratch_free(rt->scratch);
    pthread_cond_destroy(&rt->work);
    pthread_cond_destroy(&rt->ev_ready);
    pthread_cond_destroy(&rt->step_done);
    pthread_mutex_destroy(&rt->lock);
    free(rt);
}

/* ---------------------------------------------------------------------------------------------- */
/* Events (scheduler thread). Each step collects its events in a local vector, then publishes them
 * under the lock (or hands them to the callback, unlocked). */

static bool ev_push(ev_vec *q, const geist_event *ev, const char *text, size_t len) {
    if (q->n == q->cap) {
        const size_t cap = q->cap ? 2 * q->cap : 64;
        ev_item *v = realloc(q->v, cap * sizeof *v);
        if (!v) return false;
        q->v = v;
        q->cap = cap;
    }
    char *t = malloc(len + 1);
    if (!t) return false;
    if (len) memcpy(t, text, len);
    t[len] = '\0';
    ev_item *it = &q->v[q->n++];
    it->ev = *ev;
    it->ev.text = t;
    it->ev.text_len = len;
    it->text = t;
    return true;
}

static geist_event ev_base(const gt_req *r, int32_t type) {
    geist_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = type;
    ev.request_id = r->id;
    ev.user_data = r->user_data;
    ev.session = r->session;
    ev.token = -1;
    ev.n_tokens = r->gen.n_gen;
    ev.n_prompt = r->gen.n_prompt;
    ev.n_reused = r->gen.n_reused;
    ev.n_dropped = r->gen.n_dropped;
    return ev;
}

/* An event that cannot be stored (out of memory) would break "exactly one end per request": the
 * end events get a static empty text instead of being lost. */
static void emit(ev_vec *q, const geist_event *ev, const char *text, size_t len) {
    if (ev_push(q, ev, text, len)) return;
    if (ev->type == GEIST_EVENT_TOKEN) return;
    if (q->n < q->cap) {
        ev_item *it = &q->v[q->n++];
        it->ev = *ev;
        it->ev.text = "";
        it->ev.text_len = 0;
        it->text = NULL;
    }
}

/* The reply is what was streamed (gen.h): the finished text equals the TOKEN pieces. A complete
 * action call comes first, as its own event. */
static void emit_finished(ev_vec *q, gt_req *r, int32_t reason) {
    size_t call_len = 0;
    const char *call = reason != GEIST_FINISH_CANCELLED ? gt_gen_action(&r->gen, &call_len) : NULL;
    if (call) {
        geist_event act = ev_base(r, GEIST_EVENT_ACTION);
        act.finish_reason = reason;
        (void)ev_push(q, &act, call, call_len); /* out of memory: no ACTION event, no crash */
    }
    geist_event ev = ev_base(r, GEIST_EVENT_FINISHED);
    ev.finish_reason = reason;
    size_t len = 0;
    const char *text = gt_gen_reply(&r->gen, &len);
    emit(q, &ev, text, len);
}

static void emit_failed(ev_vec *q, gt_req *r, const gt_err *err) {
    geist_event ev = ev_base(r, GEIST_EVENT_FAILED);
    ev.status = err->status;
    emit(q, &ev, err->msg, strlen(err->msg));
}

/* ---------------------------------------------------------------------------------------------- */
/* Submit, cancel, configure, poll (any thread) */

static gt_req *find_id(gt_runtime *rt, uint64_t id) {
    for (gt_req *r = rt->reqs; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

static gt_req *find_session(gt_runtime *rt, const geist_session *s) {
    for (gt_req *r = rt->reqs; r; r = r->next)
        if (r->session == s) return r;
    return NULL;
}

static void *scheduler_main(void *arg);

static geist_status copy_inputs(gt_req *q, const geist_request *r, gt_err *err) {
    const int kinds = (r->text != NULL) + (r->ids != NULL || r->n_ids > 0) +
                      (r->messages != NULL || r->n_messages > 0);
    if (kinds != 1)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "request: give exactly one of text, ids or messages (got %d)", kinds);
    if (r->max_tokens < 0)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "request: max_tokens must be >= 0");
    if (r->n_stop > 0 && !r->stop)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "request: stop is NULL but n_stop > 0");
    geist_status st = gt_sampler_check_options(&r->sampler, err);
    if (st != GEIST_OK) return st;
    if (r->text && !(q->text = dup_str(r->text))) goto oom;
    if (r->ids || r->n_ids) {
        if (!r->ids)
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "request: ids is NULL but n_ids > 0");
        if (r->n_ids > (size_t)INT32_MAX)
            return gt_fail(err, GEIST_ERR_CAPACITY, "request: %zu ids are too many", r->n_ids);
        const int32_t n_vocab = q->model->cfg.n_vocab;
        for (size_t i = 0; i < r->n_ids; i++)
            if (r->ids[i] < 0 || r->ids[i] >= n_vocab)
                return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                               "request: token id %d at index %zu is outside [0, %d)", r->ids[i],
                               i, n_vocab);
        q->ids = gt_malloc_array(r->n_ids ? r->n_ids : 1, sizeof(int32_t));
        if (!q->ids) goto oom;
        if (r->n_ids) memcpy(q->ids, r->ids, r->n_ids * sizeof(int32_t));
        q->n_ids = r->n_ids;
    }
    if (r->messages || r->n_messages) {
        if (!r->messages || r->n_messages == 0)
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                           "request: messages needs a non-NULL array and n_messages > 0");
        q->msgs = gt_calloc(r->n_messages, sizeof *q->msgs);
        if (!q->msgs) goto oom;
        q->n_messages = r->n_messages;
        for (size_t i = 0; i < r->n_messages; i++) {
            if (!r->messages[i].role || !r->messages[i].content)
                return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                               "request: message %zu has a NULL role or content", i);
            if (!(q->msgs[i].role = dup_str(r->messages[i].role))) goto oom;
            if (!(q->msgs[i].content = dup_str(r->messages[i].content))) goto oom;
        }
        geist_context_policy pol;
        st = gt_context_policy_check(&r->context, &pol, err);
        if (st != GEIST_OK) return st;
        q->context = pol;
    }
    if (r->n_stop) {
        q->stop = gt_calloc(r->n_stop, sizeof(char *));
        if (!q->stop) goto oom;
        q->n_stop = r->n_stop;
        for (size_t i = 0; i < r->n_stop; i++) {
            if (!r->stop[i])
                return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "request: stop[%zu] is NULL", i);
            if (!(q->stop[i] = dup_str(r->stop[i]))) goto oom;
        }
    }
    if (r->n_actions || r->actions) {
        if (!r->actions || r->n_actions == 0)
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                           "request: actions needs a non-NULL array and n_actions > 0");
        if (r->grammar && r->grammar_kind != GEIST_GRAMMAR_NONE)
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                           "request: actions and grammar are exclusive (the actions make the "
                           "reply's grammar)");
        st = gt_actions_grammar(r->actions, r->n_actions, r->action_choice, &q->action_grammar,
                                err);
        if (st != GEIST_OK) return st;
        q->actions = gt_calloc(r->n_actions, sizeof *q->actions);
        if (!q->actions) goto oom;
        q->n_actions = r->n_actions;
        for (size_t i = 0; i < r->n_actions; i++) {
            const geist_action *a = &r->actions[i];
            if (!(q->actions[i].name = dup_str(a->name))) goto oom;
            if (a->description && !(q->actions[i].description = dup_str(a->description)))
                goto oom;
            if (a->parameters && !(q->actions[i].parameters = dup_str(a->parameters))) goto oom;
        }
        q->action_choice = r->action_choice;
    }
    /* the request's grammar, or the one composed from its actions (GBNF) */
    const char *gtext = q->action_grammar ? q->action_grammar : r->grammar;
    const int32_t gkind = q->action_grammar ? GEIST_GRAMMAR_GBNF : r->grammar_kind;
    if (gtext && gkind != GEIST_GRAMMAR_NONE) {
        if (!q->model->grammar_cache)
            return gt_fail(err, GEIST_ERR_STATE, "request: a grammar needs a model with a tokenizer");
        /* compiled on the caller's thread: errors come back from geist_submit */
        st = gt_grammar_get(q->model->grammar_cache, gtext, strlen(gtext), gkind, &q->grammar, err);
        if (st != GEIST_OK) return st;
    }
    q->sopts = r->sampler;
    q->max_tokens = r->max_tokens;
    q->priority = r->priority;
    q->user_data = r->user_data;
    return GEIST_OK;
oom:
    return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "request: out of memory copying the inputs");
}

geist_status gt_runtime_submit(gt_runtime *rt, geist_session *s, const geist_request *r,
                               uint64_t *id, gt_err *err) {
    if (!r || !s) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "session and request must not be NULL");
    if (r->struct_size < sizeof *r)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "request: struct_size %u is too small (expected %zu)", r->struct_size,
                       sizeof *r);
    if (s->model->engine->runtime != rt)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "the session belongs to a model of another engine");
    gt_req *q = calloc(1, sizeof *q);
    if (!q) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "request: out of memory");
    q->session = s;
    q->model = s->model;
    q->finish_after = -1;
    atomic_init(&q->cancel, false);
    geist_status st = copy_inputs(q, r, err);
    if (st != GEIST_OK) {
        req_free(q);
        return st;
    }
    pthread_mutex_lock(&rt->lock);
    if (rt->stop) {
        st = gt_fail(err, GEIST_ERR_STATE, "the engine is being freed");
    } else if (find_session(rt, s)) {
        st = gt_fail(err, GEIST_ERR_STATE,
                     "the session already has an active request (one at a time: wait for its "
                     "FINISHED/FAILED event or cancel it)");
    } else if (q->ids && (st = gt_gen_check_ids(s, q->n_ids, err)) != GEIST_OK) {
        /* an ids prompt that cannot fit fails now (no request of the session runs, so its
         * n_past is stable) */
    } else if (!rt->started) {
        if (pthread_create(&rt->thread, NULL, scheduler_main, rt) != 0)
            st = gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "cannot start the runtime thread");
        else
            rt->started = true;
    }
    if (st != GEIST_OK) {
        pthread_mutex_unlock(&rt->lock);
        req_free(q);
        return st;
    }
    q->id = rt->next_id++;
    q->seq = rt->next_seq++;
    q->last_step = 0;
    q->next = rt->reqs;
    rt->reqs = q;
    if (id) *id = q->id;
    pthread_cond_signal(&rt->work);
    pthread_mutex_unlock(&rt->lock);
    return GEIST_OK;
}

geist_status gt_runtime_cancel(gt_runtime *rt, uint64_t id, gt_err *err) {
    pthread_mutex_lock(&rt->lock);
    gt_req *r = find_id(rt, id);
    if (r && !atomic_load(&r->cancel)) {
        atomic_store(&r->cancel, true);
        pthread_cond_signal(&rt->work);
    }
    pthread_mutex_unlock(&rt->lock);
    if (!r)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "request %llu is unknown or already ended", (unsigned long long)id);
    return GEIST_OK;
}

static void finish_locked(gt_runtime *rt, gt_req *r, ev_vec *evs);

void gt_runtime_session_freed(gt_runtime *rt, geist_session *s) {
    if (!rt || !s) return;
    pthread_mutex_lock(&rt->lock);
    const bool on_scheduler = rt->started && pthread_equal(pthread_self(), rt->thread);
    gt_req *r;
    while ((r = find_session(rt, s)) != NULL) {
        atomic_store(&r->cancel, true);
        if (!r->in_step && (on_scheduler || rt->stop)) {
            /* freed from the event callback (the scheduler is between steps), or the scheduler
             * is stopping: end it here */
            ev_vec evs = {0};
            finish_locked(rt, r, &evs);
            ev_vec_clear(&evs, 0);
            free(evs.v);
            continue;
        }
        pthread_cond_signal(&rt->work);
        pthread_cond_wait(&rt->step_done, &rt->lock);
    }
    pthread_mutex_unlock(&rt->lock);
}

geist_status gt_runtime_configure(gt_runtime *rt, const geist_runtime_options *o, gt_err *err) {
    geist_runtime_options v;
    gt_runtime_options_default(&v);
    if (o) {
        if (o->struct_size < sizeof v)
            return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                           "runtime options: struct_size %u is too small (expected %zu)",
                           o->struct_size, sizeof v);
        v = *o;
    }
    if (!(v.budget_ms >= 0.0f) || !(v.period_ms > 0.0f) || v.budget_ms > 1e9f || v.period_ms > 1e9f)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "runtime options: budget_ms must be >= 0 and period_ms > 0");
    if (v.prefill_chunk < 1 || v.max_batch < 1 || v.max_batch > 4096)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT,
                       "runtime options: prefill_chunk must be >= 1 and max_batch 1..4096");
    pthread_mutex_lock(&rt->lock);
    rt->opts = v;
    rt->credit_ms = v.budget_ms;
    rt->last_refill_ms = now_ms();
    pthread_cond_signal(&rt->work);
    pthread_mutex_unlock(&rt->lock);
    return GEIST_OK;
}

size_t gt_runtime_poll(gt_runtime *rt, geist_event *events, size_t max_events,
                       int32_t timeout_ms) {
    pthread_mutex_lock(&rt->lock);
    ev_vec_clear(&rt->delivered, 0); /* texts of the previous poll */
    if (rt->queue_head == rt->queue.n && timeout_ms > 0 && max_events > 0) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        while (rt->queue_head == rt->queue.n && !rt->stop)
            if (pthread_cond_timedwait(&rt->ev_ready, &rt->lock, &dl) == ETIMEDOUT) break;
    }
    size_t n = rt->queue.n - rt->queue_head;
    if (n > max_events) n = max_events;
    if (n > 0 && rt->delivered.cap < n) {
        ev_item *v = realloc(rt->delivered.v, n * sizeof *v);
        if (v) {
            rt->delivered.v = v;
            rt->delivered.cap = n;
        } else {
            n = rt->delivered.cap;
        }
    }
    for (size_t i = 0; i < n; i++) {
        ev_item *it = &rt->queue.v[rt->queue_head + i];
        events[i] = it->ev;
        rt->delivered.v[i] = *it;
    }
    rt->delivered.n = n;
    rt->queue_head += n;
    if (rt->queue_head == rt->queue.n) rt->queue_head = rt->queue.n = 0;
    pthread_mutex_unlock(&rt->lock);
    return n;
}

/* ---------------------------------------------------------------------------------------------- */
/* The scheduler */

static void unlink_req(gt_runtime *rt, gt_req *r) {
    for (gt_req **p = &rt->reqs; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            return;
        }
}

/* Ends a cancelled request (under the lock, not in a step). */
static void finish_locked(gt_runtime *rt, gt_req *r, ev_vec *evs) {
    emit_finished(evs, r, GEIST_FINISH_CANCELLED);
    unlink_req(rt, r);
    req_free(r);
}

/* Builds the request's generation state (scheduler thread, unlocked): tokenizing, the
 * conversation policy, the sampler. */
static geist_status prepare(gt_req *r, gt_err *err) {
    const gt_gen_input in = {
        .text = r->text,
        .ids = r->ids,
        .n_ids = r->n_ids,
        .messages = r->msgs,
        .n_messages = r->n_messages,
        .context = r->context,
        .stop = (const char *const *)r->stop,
        .n_stop = r->n_stop,
        .sampler = r->sopts,
        .max_tokens = r->max_tokens,
        .actions = r->actions,
        .n_actions = r->n_actions,
        .action_choice = r->action_choice,
        .grammar = r->grammar,
    };
    geist_status st = gt_gen_prepare(&r->gen, r->session, &in, err);
    if (st != GEIST_OK) return st;
    r->state = r->gen.n_prompt > 0 ? R_PREFILL : R_SAMPLE;
    return GEIST_OK;
}

/* After the request's rows ran (or with no rows for R_SAMPLE), advancing it takes three steps:
 * advance_begin (ends it or says whether it samples), the sampling of all requests of the step at
 * once on the pool (each reads its whole vocabulary of logits: ~40 us for SmolLM2's 49,152, paid
 * one request after the other before), and advance_end with the token. Scheduler thread,
 * unlocked; the request is in_step. */
enum { ADV_ENDED, ADV_WAIT, ADV_SAMPLE };

static int advance_begin(gt_req *r, ev_vec *evs) {
    if (atomic_load(&r->cancel)) {
        emit_finished(evs, r, GEIST_FINISH_CANCELLED);
        return ADV_ENDED;
    }
    if (r->state == R_PREFILL) {
        r->n_prompt_done += r->step_rows;
        if (r->n_prompt_done < r->gen.n_prompt) return ADV_WAIT;
    } else if (r->state == R_DECODE && r->finish_after >= 0) {
        emit_finished(evs, r, r->finish_after);
        return ADV_ENDED;
    }
    if (r->gen.n_gen >= r->max_tokens) {
        emit_finished(evs, r, GEIST_FINISH_LENGTH);
        return ADV_ENDED;
    }
    return ADV_SAMPLE;
}

typedef struct pick {
    gt_req *r;
    int32_t rows;
    int adv; /* ADV_* after the step's rows ran */
} pick;

/* pool task: sample pick i of the step if it samples (only its own sampler and session are
 * touched) */
static void sample_task(void *ctx, int64_t i, float *scratch) {
    (void)scratch;
    const pick *pk = (const pick *)ctx + i;
    if (pk->adv != ADV_SAMPLE) return;
    gt_req *r = pk->r;
    r->sample_err = (gt_err){0};
    r->sample_st = r->dev_picked
                       ? gt_gen_take_greedy(&r->gen, r->device_id, &r->sampled, &r->sample_err)
                       : gt_gen_sample(&r->gen, r->session->logits, &r->sampled, &r->sample_err);
}

/* Returns true when the request ended (events written). */
static bool advance_end(gt_req *r, ev_vec *evs) {
    gt_err err = {0};
    if (r->sample_st != GEIST_OK) {
        emit_failed(evs, r, &r->sample_err);
        return true;
    }
    const int32_t id = r->sampled;
    const char *piece = NULL;
    size_t len = 0;
    int32_t finish = -1;
    switch (gt_gen_token(&r->gen, id, &piece, &len, &finish, &err)) {
    case GT_GEN_END:
        emit_finished(evs, r, finish);
        return true;
    case GT_GEN_FAILED:
        emit_failed(evs, r, &err);
        return true;
    case GT_GEN_CONTINUE:
        break;
    }
    r->pending = id;
    r->state = R_DECODE;
    r->finish_after = finish;
    geist_event ev = ev_base(r, GEIST_EVENT_TOKEN);
    ev.token = id;
    emit(evs, &ev, piece, len);
    return false;
}

static int pick_order(const void *a, const void *b) {
    const gt_req *x = ((const pick *)a)->r, *y = ((const pick *)b)->r;
    if (x->priority != y->priority) return x->priority > y->priority ? -1 : 1;
    if (x->last_step != y->last_step) return x->last_step < y->last_step ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq ? 1 : 0);
}

/* Credit accrues at budget_ms per period_ms; `spent` (a step's time) is charged against it. The
 * cap (one budget of saved credit) applies after charging: time that passes during a step earns
 * credit like any other, else steps longer than the budget would lose what they earned and the
 * runtime would get less than its share. */
static void refill_credit(gt_runtime *rt, double spent) {
    const double t = now_ms();
    if (rt->opts.budget_ms <= 0.0f) return;
    rt->credit_ms += (t - rt->last_refill_ms) * (double)rt->opts.budget_ms / (double)rt->opts.period_ms;
    rt->credit_ms -= spent;
    if (rt->credit_ms > (double)rt->opts.budget_ms) rt->credit_ms = (double)rt->opts.budget_ms;
    rt->last_refill_ms = t;
}

static void publish(gt_runtime *rt, ev_vec *evs) {
    /* under the lock */
    if (evs->n == 0) return;
    for (size_t i = 0; i < evs->n; i++) {
        ev_item *it = &evs->v[i];
        if (rt->queue.n == rt->queue.cap) {
            const size_t cap = rt->queue.cap ? 2 * rt->queue.cap : 256;
            ev_item *v = realloc(rt->queue.v, cap * sizeof *v);
            if (!v) {
                if (it->ev.type == GEIST_EVENT_TOKEN) {
                    free(it->text);
                    continue;
                }
                /* keep end events: drop the oldest queued token event's slot instead */
                size_t j = rt->queue_head;
                while (j < rt->queue.n && rt->queue.v[j].ev.type != GEIST_EVENT_TOKEN) j++;
                if (j == rt->queue.n) {
                    free(it->text);
                    continue;
                }
                free(rt->queue.v[j].text);
                memmove(&rt->queue.v[j], &rt->queue.v[j + 1],
                        (rt->queue.n - j - 1) * sizeof *v);
                rt->queue.n--;
            } else {
                rt->queue.v = v;
                rt->queue.cap = cap;
            }
        }
        rt->queue.v[rt->queue.n++] = *it;
    }
    evs->n = 0;
    pthread_cond_broadcast(&rt->ev_ready);
}

static void deliver_callback(gt_runtime *rt, geist_event_callback cb, void *user, ev_vec *evs) {
    (void)rt;
    for (size_t i = 0; i < evs->n; i++) cb(user, &evs->v[i].ev);
    ev_vec_clear(evs, 0);
}

/* Hands events to the callback (outside the lock) or to the poll queue. Called with the lock held;
 * returns with it held. */
static void emit_locked(gt_runtime *rt, ev_vec *evs) {
    if (rt->opts.on_event) {
        geist_event_callback cb = rt->opts.on_event;
        void *user = rt->opts.on_event_user;
        pthread_mutex_unlock(&rt->lock);
        deliver_callback(rt, cb, user, evs);
        pthread_mutex_lock(&rt->lock);
    } else {
        publish(rt, evs);
    }
}

static void *scheduler_main(void *arg) {
    gt_runtime *rt = arg;
    ev_vec evs = {0};
    pick *picks = NULL;
    size_t picks_cap = 0;
    gt_batch_row *rows = NULL;
    size_t rows_cap = 0;
    pthread_mutex_lock(&rt->lock);
    rt->last_refill_ms = now_ms();
    rt->credit_ms = rt->opts.budget_ms;
    while (!rt->stop) {
        /* cancelled requests outside a step end now */
        for (gt_req *r = rt->reqs, *nx; r; r = nx) {
            nx = r->next;
            if (atomic_load(&r->cancel) && !r->in_step) finish_locked(rt, r, &evs);
        }
        if (evs.n) {
            pthread_cond_broadcast(&rt->step_done);
            emit_locked(rt, &evs);
            continue;
        }
        if (!rt->reqs) {
            pthread_cond_wait(&rt->work, &rt->lock);
            continue;
        }
        /* prepare new requests (tokenizing) unlocked, before they take part in a step */
        size_t n_new = 0;
        for (gt_req *r = rt->reqs; r; r = r->next) n_new += r->state == R_NEW;
        if (n_new) {
            if (picks_cap < n_new) {
                pick *p = realloc(picks, n_new * sizeof *p);
                if (!p) { /* try again later: nothing changed */
                    pthread_mutex_unlock(&rt->lock);
                    nanosleep(&(struct timespec){0, 1000000}, NULL);
                    pthread_mutex_lock(&rt->lock);
                    continue;
                }
                picks = p;
                picks_cap = n_new;
            }
            size_t k = 0;
            for (gt_req *r = rt->reqs; r; r = r->next)
                if (r->state == R_NEW) {
                    r->in_step = true;
                    picks[k++].r = r;
                }
            pthread_mutex_unlock(&rt->lock);
            for (size_t i = 0; i < k; i++) {
                gt_err err = {0};
                gt_req *r = picks[i].r;
                picks[i].rows = 0;
                if (prepare(r, &err) != GEIST_OK) {
                    emit_failed(&evs, r, &err);
                    picks[i].rows = -1; /* ended */
                }
            }
            pthread_mutex_lock(&rt->lock);
            for (size_t i = 0; i < k; i++) {
                gt_req *r = picks[i].r;
                r->in_step = false;
                if (picks[i].rows < 0) {
                    unlink_req(rt, r);
                    req_free(r);
                } else if (r->state == R_NEW) {
                    r->state = R_SAMPLE; /* unreachable: prepare sets the state */
                }
            }
            pthread_cond_broadcast(&rt->step_done);
            continue; /* publishes failures, reaps cancels, then steps */
        }
        /* the budget: wait while the credit is spent */
        if (rt->opts.budget_ms > 0.0f) {
            refill_credit(rt, 0.0);
            if (rt->credit_ms <= 0.0) {
                const double wait = -rt->credit_ms * (double)rt->opts.period_ms /
                                        (double)rt->opts.budget_ms + 0.05;
                struct timespec dl;
                clock_gettime(CLOCK_REALTIME, &dl);
                const long long ns = (long long)(wait * 1e6);
                dl.tv_sec += (time_t)(ns / 1000000000LL);
                dl.tv_nsec += (long)(ns % 1000000000LL);
                if (dl.tv_nsec >= 1000000000L) {
                    dl.tv_sec++;
                    dl.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&rt->work, &rt->lock, &dl);
                continue;
            }
        }
        /* pick the rows of this step: the model of the first request in priority order, then
         * its requests in that order while rows last */
        size_t n_req = 0;
        for (gt_req *r = rt->reqs; r; r = r->next) n_req++;
        if (picks_cap < n_req) {
            pick *p = realloc(picks, n_req * sizeof *p);
            if (!p) {
                pthread_mutex_unlock(&rt->lock);
                nanosleep(&(struct timespec){0, 1000000}, NULL);
                pthread_mutex_lock(&rt->lock);
                continue;
            }
            picks = p;
            picks_cap = n_req;
        }
        size_t k = 0;
        for (gt_req *r = rt->reqs; r; r = r->next) picks[k++] = (pick){r, 0, ADV_WAIT};
        qsort(picks, k, sizeof *picks, pick_order);
        const geist_model *model = picks[0].r->model;
        int32_t rows_left = rt->opts.max_batch, prefill_left = rt->opts.prefill_chunk;
        size_t n_sel = 0;
        int32_t n_rows = 0;
        for (size_t i = 0; i < k && rows_left > 0; i++) {
            gt_req *r = picks[i].r;
            if (r->model != model) continue;
            int32_t want = 0;
            if (r->state == R_DECODE) {
                want = 1;
            } else if (r->state == R_PREFILL) {
                want = r->gen.n_prompt - r->n_prompt_done;
                if (want > prefill_left) want = prefill_left;
                if (want > rows_left) want = rows_left;
                if (want == 0) continue; /* prefill budget of this step is spent */
                prefill_left -= want;
            }
            rows_left -= want;
            n_rows += want;
            r->in_step = true;
            r->dev_picked = false;
            r->step_rows = want;
            r->last_step = ++rt->step_no;
            picks[n_sel++] = (pick){r, want, ADV_WAIT};
        }
        pthread_mutex_unlock(&rt->lock);

        /* the step, unlocked */
        const double t0 = now_ms();
        geist_status st = GEIST_OK;
        gt_err err = {0};
        if ((size_t)n_rows > rows_cap) {
            gt_batch_row *nr = realloc(rows, (size_t)n_rows * sizeof *nr);
            if (nr) {
                rows = nr;
                rows_cap = (size_t)n_rows;
            } else {
                st = gt_fail(&err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (batch)");
            }
        }
        if (st == GEIST_OK && n_rows > 0) {
            const bool dev_argmax = model->backend->device && model->backend->device->argmax;
            int32_t t = 0;
            for (size_t i = 0; i < n_sel; i++) {
                gt_req *r = picks[i].r;
                geist_session *s = r->session;
                for (int32_t j = 0; j < picks[i].rows; j++, t++) {
                    rows[t].s = s;
                    rows[t].pos = s->n_past + j;
                    rows[t].id = r->state == R_DECODE ? r->pending
                                                       : r->gen.prompt[r->n_prompt_done + j];
                    rows[t].logits = NULL;
                    rows[t].argmax = NULL;
                }
                if (picks[i].rows > 0) {
                    /* the ids of the positions it appends (positions n_past..) */
                    int32_t *ids =
                        r->state == R_DECODE ? &r->pending : r->gen.prompt + r->n_prompt_done;
                    gt_session_note_tokens(s, ids, picks[i].rows);
                }
                const bool last_prompt = r->state == R_PREFILL &&
                                         r->n_prompt_done + picks[i].rows == r->gen.n_prompt;
                /* the row whose logits the request samples next, or that ends it: a device
                 * picks a plain greedy token of a decode row itself (only its id comes back,
                 * the logits stay there: the session then has none, gt_session_bring_logits
                 * runs the row again, alone as it ran); the last row of a request brings the
                 * session's logits back, for a request that continues from them. A prompt's
                 * last row keeps its logits: its step may hold more of the session's rows,
                 * and a GPU attends a lone row in chunks (vk_forward.c's split), another sum
                 * order, so a re-run could differ */
                r->dev_picked = dev_argmax && r->state == R_DECODE && r->finish_after < 0 &&
                                r->gen.n_gen < r->max_tokens && gt_gen_plain_greedy(&r->gen);
                if (r->dev_picked) rows[t - 1].argmax = &r->device_id;
                else if (r->state == R_DECODE || last_prompt) rows[t - 1].logits = s->logits;
            }
            st = gt_forward_batch(model, rows, n_rows, rt->scratch, &err);
        }
        size_t n_sample = 0;
        for (size_t i = 0; i < n_sel; i++) {
            gt_req *r = picks[i].r;
            if (st != GEIST_OK && picks[i].rows > 0) {
                emit_failed(&evs, r, &err);
                picks[i].adv = ADV_ENDED;
            } else {
                picks[i].adv = advance_begin(r, &evs);
            }
            /* a device's greedy id is only taken (gt_gen_take_greedy): no work for a worker */
            n_sample += picks[i].adv == ADV_SAMPLE && !picks[i].r->dev_picked;
        }
        /* the pool's workers sleep through a device's pass: waking them for less than two
         * samplings of logits costs more than it saves */
        gt_pool_run(n_sample >= 2 ? model->engine->pool : NULL, (int64_t)n_sel, 0, sample_task,
                    picks, NULL);
        for (size_t i = 0; i < n_sel; i++) {
            const int a = picks[i].adv;
            const bool ended = a == ADV_ENDED || (a == ADV_SAMPLE && advance_end(picks[i].r, &evs));
            picks[i].rows = ended ? -1 : 0;
        }
        const double spent = now_ms() - t0;

        pthread_mutex_lock(&rt->lock);
        if (rt->opts.budget_ms > 0.0f) refill_credit(rt, spent);
        for (size_t i = 0; i < n_sel; i++) {
            gt_req *r = picks[i].r;
            r->in_step = false;
            if (picks[i].rows < 0) {
                unlink_req(rt, r);
                req_free(r);
            }
        }
        pthread_cond_broadcast(&rt->step_done);
        emit_locked(rt, &evs);
    }
    pthread_mutex_unlock(&rt->lock);
    ev_vec_clear(&evs, 0);
    free(evs.v);
    free(picks);
    free(rows);
    return NULL;
}
