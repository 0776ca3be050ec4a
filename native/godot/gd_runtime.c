/* gd_runtime.c — asynchronous generation for the Godot extension over the core's runtime (see
 * gd_runtime.h).
 *
 * Nothing here runs a forward pass: requests go to geist_submit and every step runs on the
 * engine's scheduler thread, batched across sessions. What runs on the caller's (main) thread is
 * the prompt preparation in gr_submit (render, tokenize, compare with the KV, rewind) and the
 * draining in gr_poll. A session has no request in the core while it is not busy, so touching it
 * here (tokens, truncate, reset, snapshot) never races the scheduler: the core publishes a
 * request's end event only after it let go of the session.
 *
 * One lock guards the table of active requests and the queue of local events (failures found
 * while preparing, delivered by the next poll so that they arrive as signals like the core's). */
#include "gd_runtime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GR_MAX_STOP 16
#define GR_POLL_CHUNK 64
/* ids of failures made here; the core counts from 1, so the two never meet */
#define GR_LOCAL_ID_BASE (UINT64_C(1) << 63)

struct gr_sess {
    geist_session *sess;
    geist_model *model;
    const char *stop[GR_MAX_STOP]; /* static strings of the core */
    size_t n_stop;
    int busy; /* guarded by gr.mu */
};

typedef struct gr_active {
    uint64_t id;
    gr_sess *s;
    double t_submit, t_first;
    int32_t n_prompt, n_reused;
} gr_active;

typedef struct gr_local {
    gr_event ev;
    gr_sess *owner;
} gr_local;

struct gr {
    geist_engine *engine;
    pthread_mutex_t mu;
    gr_active *act;
    size_t n_act, cap_act;
    gr_local *loc;
    size_t n_loc, cap_loc;
    uint64_t next_local;
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
    r->next_local = GR_LOCAL_ID_BASE;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void gr_free(gr *r) {
    if (!r)
        return;
    for (size_t i = 0; i < r->n_loc; i++)
        free(r->loc[i].ev.text);
    free(r->loc);
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
    /* the turn markers of the model's template end a reply even when the model does not emit
     * them as its end token (a model that writes "<|im_end|>" as plain text) */
    if (geist_chat_stop_strings(model, s->stop, GR_MAX_STOP, &s->n_stop) != GEIST_OK)
        s->n_stop = 0;
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
        k = 0;
        for (size_t i = 0; i < r->n_loc; i++) {
            if (r->loc[i].owner == s)
                free(r->loc[i].ev.text);
            else
                r->loc[k++] = r->loc[i];
        }
        r->n_loc = k;
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
/* Prompt preparation (caller's thread, the session idle) */

static geist_status render(const geist_model *m, const gr_msg *msgs, size_t n, char **out) {
    geist_chat_message *cm = malloc((n ? n : 1) * sizeof *cm);
    if (!cm)
        return GEIST_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++) {
        cm[i].role = msgs[i].role ? msgs[i].role : "user";
        cm[i].content = msgs[i].content ? msgs[i].content : "";
    }
    size_t need = 0;
    geist_status st = geist_chat_apply_template(m, NULL, cm, n, 1, NULL, 0, &need);
    if (st == GEIST_ERR_BUFFER_TOO_SMALL) {
        char *buf = malloc(need);
        st = buf ? geist_chat_apply_template(m, NULL, cm, n, 1, buf, need, &need)
                 : GEIST_ERR_OUT_OF_MEMORY;
        if (st == GEIST_OK)
            *out = buf;
        else
            free(buf);
    } else if (st == GEIST_OK) {
        *out = copy_text("", 0);
        if (!*out)
            st = GEIST_ERR_OUT_OF_MEMORY;
    }
    free(cm);
    return st;
}

static geist_status tokenize_all(const geist_model *m, const char *text, uint32_t flags,
                                 int32_t **out, size_t *n) {
    size_t len = strlen(text), need = 0;
    size_t cap = len + 8;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return GEIST_ERR_OUT_OF_MEMORY;
    geist_status st = geist_tokenize(m, text, len, flags, ids, cap, &need);
    if (st == GEIST_ERR_BUFFER_TOO_SMALL) {
        free(ids);
        ids = malloc((need + 1) * sizeof *ids);
        if (!ids)
            return GEIST_ERR_OUT_OF_MEMORY;
        st = geist_tokenize(m, text, len, flags, ids, need + 1, &need);
    }
    if (st != GEIST_OK) {
        free(ids);
        return st;
    }
    *out = ids;
    *n = need;
    return GEIST_OK;
}

/* The conversation's ids, trimmed to leave room for one reply token; on failure a message. */
static geist_status conversation_ids(gr_sess *s, const gr_request *req, int32_t **out,
                                     size_t *n_out, char *msg, size_t msg_cap) {
    const size_t cap = (size_t)geist_session_max_seq_len(s->sess);
    const size_t n_msgs = req->n_messages;
    size_t first = 0; /* the first message that may be dropped: a leading system one stays */
    if (n_msgs > 0 && req->messages[0].role && strcmp(req->messages[0].role, "system") == 0)
        first = 1;
    gr_msg *view = malloc((n_msgs ? n_msgs : 1) * sizeof *view);
    if (!view) {
        snprintf(msg, msg_cap, "out of memory");
        return GEIST_ERR_OUT_OF_MEMORY;
    }
    char err[256];
    geist_status st = GEIST_OK;
    for (size_t drop = 0;; drop++) {
        size_t n = 0;
        for (size_t i = 0; i < n_msgs; i++)
            if (i < first || i >= first + drop)
                view[n++] = req->messages[i];
        char *text = NULL;
        st = render(s->model, view, n, &text);
        if (st != GEIST_OK) {
            geist_last_error(err, sizeof err);
            snprintf(msg, msg_cap, "chat template failed: %s", err);
            break;
        }
        int32_t *ids = NULL;
        size_t n_ids = 0;
        /* the rendered template's control tokens are parsed; the messages' own text went through
         * the template as text, so a player cannot inject them any more than the template lets */
        st = tokenize_all(s->model, text,
                          GEIST_TOKENIZE_ADD_SPECIAL | GEIST_TOKENIZE_PARSE_SPECIAL, &ids, &n_ids);
        free(text);
        if (st != GEIST_OK) {
            geist_last_error(err, sizeof err);
            snprintf(msg, msg_cap, "tokenizing failed: %s", err);
            break;
        }
        if (n_ids == 0) {
            free(ids);
            st = GEIST_ERR_INVALID_ARGUMENT;
            snprintf(msg, msg_cap, "empty prompt: the conversation renders to no tokens");
            break;
        }
        if (n_ids + 1 <= cap) {
            *out = ids;
            *n_out = n_ids;
            break;
        }
        free(ids);
        if (req->trim && n_msgs - drop > first + 1)
            continue;
        st = GEIST_ERR_CAPACITY;
        snprintf(msg, msg_cap,
                 "prompt too long: it needs %zu tokens but the session holds at most %zu "
                 "(max_seq_len); shorten the text or raise max_seq_len",
                 n_ids, cap);
        break;
    }
    free(view);
    return st;
}

/* Rewinds the session to the longest prefix of ids it already holds (always leaving at least
 * one id to run, since a rewind drops the logits) and returns that prefix's length. */
static size_t reuse_prefix(gr_sess *s, const int32_t *ids, size_t n_ids) {
    const size_t past = (size_t)geist_session_n_past(s->sess);
    if (past == 0)
        return 0;
    int32_t *held = malloc(past * sizeof *held);
    size_t n_held = 0;
    if (!held || geist_session_tokens(s->sess, held, past, &n_held) != GEIST_OK) {
        free(held);
        geist_session_reset(s->sess);
        return 0;
    }
    size_t common = 0;
    while (common < n_held && common < n_ids && held[common] == ids[common])
        common++;
    free(held);
    if (common == n_ids)
        common = n_ids - 1;
    if (common < n_held) {
        /* a sliding-window ring may refuse the rewind: start over then */
        if (common == 0 || geist_session_truncate(s->sess, (int32_t)common) != GEIST_OK) {
            geist_session_reset(s->sess);
            common = 0;
        }
    }
    return common;
}

/* Queues a failure found here for the next poll (caller holds the lock). */
static void push_local_locked(gr *r, gr_sess *s, const gr_request *req, geist_status st,
                              const char *msg, uint64_t *id) {
    *id = r->next_local++;
    s->busy = 1;
    if (r->n_loc == r->cap_loc) {
        size_t nc = r->cap_loc ? 2 * r->cap_loc : 8;
        gr_local *nl = realloc(r->loc, nc * sizeof *nl);
        if (!nl) {
            s->busy = 0; /* no event can be queued: the caller reports the status instead */
            return;
        }
        r->loc = nl;
        r->cap_loc = nc;
    }
    gr_local *l = &r->loc[r->n_loc++];
    memset(l, 0, sizeof *l);
    l->owner = s;
    l->ev.type = GEIST_EVENT_FAILED;
    l->ev.request_id = *id;
    l->ev.user_data = req->user_data;
    l->ev.token = -1;
    l->ev.status = (int32_t)st;
    l->ev.text = copy_text(msg, strlen(msg));
    l->ev.text_len = l->ev.text ? strlen(msg) : 0;
}

geist_status gr_submit(gr *r, gr_sess *s, const gr_request *req, uint64_t *request_id) {
    if (!r || !s || !req || (!req->messages && req->n_messages > 0))
        return GEIST_ERR_INVALID_ARGUMENT;
    if (gr_sess_busy(r, s))
        return GEIST_ERR_STATE;
    const double t0 = now_ms();
    char msg[512];
    int32_t *ids = NULL;
    size_t n_ids = 0;
    geist_status st = conversation_ids(s, req, &ids, &n_ids, msg, sizeof msg);
    if (st != GEIST_OK) {
        pthread_mutex_lock(&r->mu);
        push_local_locked(r, s, req, st, msg, request_id);
        const int queued = s->busy;
        pthread_mutex_unlock(&r->mu);
        return queued ? GEIST_OK : st;
    }
    const size_t reused = reuse_prefix(s, ids, n_ids);

    geist_request gq;
    geist_request_default(&gq);
    gq.ids = ids + reused;
    gq.n_ids = n_ids - reused;
    gq.sampler = req->sampler;
    /* a seed that follows the conversation: each turn draws differently, yet a restored session
     * draws exactly as the original did */
    gq.sampler.seed = req->sampler.seed + (uint64_t)n_ids * UINT64_C(0x9E3779B97F4A7C15);
    gq.max_tokens = req->max_tokens;
    gq.stop = s->n_stop ? s->stop : NULL;
    gq.n_stop = s->n_stop;
    gq.priority = req->priority;
    gq.user_data = req->user_data;

    pthread_mutex_lock(&r->mu);
    if (r->n_act == r->cap_act) {
        size_t nc = r->cap_act ? 2 * r->cap_act : 16;
        gr_active *na = realloc(r->act, nc * sizeof *na);
        if (!na) {
            pthread_mutex_unlock(&r->mu);
            free(ids);
            return GEIST_ERR_OUT_OF_MEMORY;
        }
        r->act = na;
        r->cap_act = nc;
    }
    uint64_t id = 0;
    /* under the lock, so a poll on another thread cannot see the id before it is in the table */
    st = geist_submit(r->engine, s->sess, &gq, &id);
    if (st == GEIST_OK) {
        r->act[r->n_act++] = (gr_active){id, s, t0, 0.0, (int32_t)(n_ids - reused),
                                         (int32_t)reused};
        s->busy = 1;
        *request_id = id;
    }
    pthread_mutex_unlock(&r->mu);
    free(ids);
    return st;
}

geist_status gr_cancel(gr *r, uint64_t request_id) {
    if (request_id >= GR_LOCAL_ID_BASE)
        return GEIST_OK; /* a local failure: it ends on the next poll anyway */
    return geist_cancel(r->engine, request_id);
}

/* ---------------------------------------------------------------------------------------------- */
/* Events */

size_t gr_poll(gr *r, gr_event *events, size_t max) {
    size_t n = 0;
    pthread_mutex_lock(&r->mu);
    size_t k = 0;
    for (; k < r->n_loc && n < max; k++) {
        r->loc[k].owner->busy = 0;
        events[n++] = r->loc[k].ev;
    }
    memmove(r->loc, r->loc + k, (r->n_loc - k) * sizeof *r->loc);
    r->n_loc -= k;
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
            const double first = ac->t_first != 0.0 ? ac->t_first : t;
            e->prefill_ms = first - ac->t_submit;
            e->decode_ms = t - first;
            e->n_prompt = ac->n_prompt;
            e->n_reused = ac->n_reused;
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
