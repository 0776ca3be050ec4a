/* gd_runtime.c — asynchronous generation for the Godot extension over the core's runtime (see
 * gd_runtime.h).
 *
 * Nothing heavier than a queue operation runs here: a chat request goes to geist_submit with the
 * whole conversation as messages, and the core renders it, reuses the session's KV, trims and
 * generates on the engine's scheduler thread, batched across sessions. What runs on the caller's
 * (main) thread is copying the request and draining events in gr_poll. A session has no request
 * in the core while it is not busy, so touching it here (reset, restore) never races the
 * scheduler: the core publishes a request's end event only after it let go of the session.
 *
 * One lock guards the table of active requests. */
#include "gd_runtime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GR_POLL_CHUNK 64

struct gr_sess {
    geist_session *sess;
    geist_model *model;
    int busy; /* guarded by gr.mu */
};

typedef struct gr_active {
    uint64_t id;
    gr_sess *s;
    double t_submit, t_first;
} gr_active;

struct gr {
    geist_engine *engine;
    pthread_mutex_t mu;
    gr_active *act;
    size_t n_act, cap_act;
    geist_event buf[GR_POLL_CHUNK];
};

const char *gr_path(void) {
    return "geist runtime (geist_submit/geist_poll: batched decode on the engine's thread)";
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *copy_text(const char *t, size_t n) {
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    if (n)
        memcpy(d, t, n);
    d[n] = 0;
    return d;
}

gr *gr_create(geist_engine *engine) {
    gr *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->engine = engine;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void gr_free(gr *r) {
    if (!r)
        return;
    free(r->act);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

geist_status gr_configure(gr *r, const geist_runtime_options *o, char *err, size_t err_cap) {
    geist_status st = geist_runtime_configure(r->engine, o);
    if (st != GEIST_OK)
        geist_last_error(err, err_cap);
    return st;
}

geist_status gr_sess_create(gr *r, geist_model *model, const geist_session_options *opts,
                            gr_sess **out, char *err, size_t err_cap) {
    (void)r;
    gr_sess *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_cap, "out of memory");
        return GEIST_ERR_OUT_OF_MEMORY;
    }
    s->model = model;
    geist_status st = geist_session_create(model, opts, &s->sess);
    if (st != GEIST_OK) {
        geist_last_error(err, err_cap);
        free(s);
        return st;
    }
    *out = s;
    return GEIST_OK;
}

void gr_sess_free(gr *r, gr_sess *s) {
    if (!s)
        return;
    if (r) {
        pthread_mutex_lock(&r->mu);
        /* its events that are still to come are dropped: their ids leave the table */
        size_t k = 0;
        for (size_t i = 0; i < r->n_act; i++)
            if (r->act[i].s != s)
                r->act[k++] = r->act[i];
        r->n_act = k;
        pthread_mutex_unlock(&r->mu);
    }
    geist_session_free(s->sess); /* the core cancels its request and waits for a running step */
    free(s);
}

geist_session *gr_sess_session(gr_sess *s) { return s ? s->sess : NULL; }

int32_t gr_sess_busy(gr *r, gr_sess *s) {
    pthread_mutex_lock(&r->mu);
    int32_t b = s->busy;
    pthread_mutex_unlock(&r->mu);
    return b;
}

geist_status gr_sess_reset(gr *r, gr_sess *s) {
    if (gr_sess_busy(r, s))
        return GEIST_ERR_STATE;
    geist_session_reset(s->sess);
    return GEIST_OK;
}

geist_status gr_sess_restore(gr *r, gr_sess *s, const void *img, size_t n, int *used_image) {
    *used_image = 0;
    if (gr_sess_busy(r, s))
        return GEIST_ERR_STATE;
    if (img && n > 0 && geist_session_restore(s->sess, img, n) == GEIST_OK) {
        *used_image = 1;
        return GEIST_OK;
    }
    geist_session_reset(s->sess); /* the next request runs the whole conversation */
    return GEIST_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Requests */

geist_status gr_submit(gr *r, gr_sess *s, const gr_request *req, uint64_t *request_id) {
    if (!r || !s || !req || (!req->messages && req->n_messages > 0))
        return GEIST_ERR_INVALID_ARGUMENT;
    if (gr_sess_busy(r, s))
        return GEIST_ERR_STATE;
    const double t0 = now_ms();
    geist_chat_message *cm = malloc((req->n_messages ? req->n_messages : 1) * sizeof *cm);
    if (!cm)
        return GEIST_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < req->n_messages; i++) {
        cm[i].role = req->messages[i].role ? req->messages[i].role : "user";
        cm[i].content = req->messages[i].content ? req->messages[i].content : "";
    }
    /* the conversation policy (template, KV reuse, trimming, the template's stop strings, the
     * seed that follows the conversation) is the core's: it runs on the scheduler thread */
    geist_request gq;
    geist_request_default(&gq);
    gq.messages = cm;
    gq.n_messages = req->n_messages;
    gq.context = req->context;
    gq.stop = req->stop;
    gq.n_stop = req->n_stop;
    gq.sampler = req->sampler;
    gq.max_tokens = req->max_tokens;
    gq.priority = req->priority;
    gq.user_data = req->user_data;
    gq.grammar = req->grammar;
    gq.grammar_kind = req->grammar ? req->grammar_kind : GEIST_GRAMMAR_NONE;
    gq.actions = req->actions;
    gq.n_actions = req->n_actions;
    gq.action_choice = req->action_choice;

    pthread_mutex_lock(&r->mu);
    geist_status st = GEIST_OK;
    if (r->n_act == r->cap_act) {
        size_t nc = r->cap_act ? 2 * r->cap_act : 16;
        gr_active *na = realloc(r->act, nc * sizeof *na);
        if (!na)
            st = GEIST_ERR_OUT_OF_MEMORY;
        else {
            r->act = na;
            r->cap_act = nc;
        }
    }
    uint64_t id = 0;
    /* under the lock, so a poll on another thread cannot see the id before it is in the table;
     * geist_submit copies the messages */
    if (st == GEIST_OK)
        st = geist_submit(r->engine, s->sess, &gq, &id);
    if (st == GEIST_OK) {
        r->act[r->n_act++] = (gr_active){id, s, t0, 0.0};
        s->busy = 1;
        *request_id = id;
    }
    pthread_mutex_unlock(&r->mu);
    free(cm);
    return st;
}

geist_status gr_cancel(gr *r, uint64_t request_id) {
    return geist_cancel(r->engine, request_id);
}

/* ---------------------------------------------------------------------------------------------- */
/* Events */

size_t gr_poll(gr *r, gr_event *events, size_t max) {
    size_t n = 0;
    pthread_mutex_lock(&r->mu);
    while (n < max) {
        size_t want = max - n < GR_POLL_CHUNK ? max - n : GR_POLL_CHUNK;
        size_t got = geist_poll(r->engine, r->buf, want, 0);
        if (got == 0)
            break;
        const double t = now_ms();
        for (size_t i = 0; i < got; i++) {
            const geist_event *ce = &r->buf[i];
            size_t a = 0;
            while (a < r->n_act && r->act[a].id != ce->request_id)
                a++;
            if (a == r->n_act)
                continue; /* its session was freed */
            gr_active *ac = &r->act[a];
            gr_event *e = &events[n++];
            memset(e, 0, sizeof *e);
            e->type = ce->type;
            e->request_id = ce->request_id;
            e->user_data = ce->user_data;
            e->token = ce->token;
            e->finish_reason = ce->finish_reason;
            e->status = ce->status;
            e->n_tokens = ce->n_tokens;
            e->text = copy_text(ce->text ? ce->text : "", ce->text ? ce->text_len : 0);
            e->text_len = e->text && ce->text ? ce->text_len : 0;
            if (ce->type == GEIST_EVENT_TOKEN) {
                if (ac->t_first == 0.0)
                    ac->t_first = t;
                continue;
            }
            if (ce->type == GEIST_EVENT_ACTION)
                continue; /* not an end: FINISHED follows */
            const double first = ac->t_first != 0.0 ? ac->t_first : t;
            e->prefill_ms = first - ac->t_submit;
            e->decode_ms = t - first;
            e->n_prompt = ce->n_prompt;
            e->n_reused = ce->n_reused;
            e->n_dropped = ce->n_dropped;
            ac->s->busy = 0;
            r->act[a] = r->act[--r->n_act];
        }
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

void gr_event_clear(gr_event *e) {
    free(e->text);
    e->text = NULL;
    e->text_len = 0;
}
