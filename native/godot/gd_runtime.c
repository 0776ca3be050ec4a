/* gd_runtime.c — asynchronous generation for the Godot extension (see gd_runtime.h).
 *
 * Path in use: one scheduler thread owned by the extension drives geist's synchronous API. Every
 * step it picks the active request with the highest priority (round-robin among equals) and runs
 * one unit of work on it: a prefill chunk of at most PREFILL_CHUNK tokens, or one sampled and
 * decoded token. So several sessions talk at once and a long prompt never stalls the others for
 * long. Events go to a queue under the lock; the main thread drains it. The geist engine's own
 * worker pool (n_threads) parallelises each forward pass. */
#include "gd_runtime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PREFILL_CHUNK 64

typedef struct gr_job {
    uint64_t id;
    gr_sess *s;
    gr_msg *msgs;
    size_t n_msgs;
    int32_t trim;
    char *text;
    int32_t *ids;
    size_t n_ids;
    geist_sampler_options sopt;
    int32_t max_tokens;
    int32_t priority;
    uint64_t user_data;

    int32_t state; /* 0 prepare, 1 prefill, 2 decode */
    int32_t *prompt;
    size_t n_prompt, pos;
    geist_detokenizer *detok;
    char *reply;
    size_t reply_len, reply_cap;
    int32_t n_gen;
    int32_t cancel;
    int32_t busy;
    int32_t done;
    uint64_t last_step;
    double prefill_ms, decode_ms;
    struct gr_job *next;
} gr_job;

struct gr_sess {
    geist_session *sess;
    geist_sampler *sampler;
    geist_model *model;
    int32_t *hist;
    size_t n_hist, cap_hist;
    gr_job *job; /* guarded by gr.mu */
};

typedef struct gr_qev {
    gr_event ev;
    const gr_sess *owner;
} gr_qev;

struct gr {
    geist_engine *engine;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;      /* a job arrived or stop */
    pthread_cond_t step_done; /* a step ended (detach waits on it) */
    int32_t stop;
    gr_job *jobs;
    uint64_t next_id;
    uint64_t tick;
    gr_qev *q;
    size_t q_head, q_len, q_cap;
};

const char *gr_path(void) {
    return "extension worker thread over the synchronous geist API (geist_submit not used)";
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *dup_str(const char *s) {
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

/* Queues an event (caller holds the lock). Text is copied; on OOM the text is dropped but the
 * event still goes out, so every request still ends with exactly one final event. */
static void push_event_locked(gr *r, const gr_sess *owner, const gr_event *ev, const char *text,
                              size_t len) {
    if (r->q_len == r->q_cap) {
        size_t ncap = r->q_cap ? r->q_cap * 2 : 64;
        gr_qev *nq = malloc(ncap * sizeof *nq);
        if (!nq)
            return;
        for (size_t i = 0; i < r->q_len; i++)
            nq[i] = r->q[(r->q_head + i) % r->q_cap];
        free(r->q);
        r->q = nq;
        r->q_cap = ncap;
        r->q_head = 0;
    }
    gr_qev *slot = &r->q[(r->q_head + r->q_len) % r->q_cap];
    slot->ev = *ev;
    slot->owner = owner;
    slot->ev.text = malloc(len + 1);
    slot->ev.text_len = 0;
    if (slot->ev.text) {
        if (len)
            memcpy(slot->ev.text, text, len);
        slot->ev.text[len] = 0;
        slot->ev.text_len = len;
    }
    r->q_len++;
}

static void job_free(gr_job *j) {
    if (!j)
        return;
    for (size_t i = 0; i < j->n_msgs; i++) {
        free(j->msgs[i].role);
        free(j->msgs[i].content);
    }
    free(j->msgs);
    free(j->text);
    free(j->ids);
    free(j->prompt);
    free(j->reply);
    geist_detokenizer_free(j->detok);
    free(j);
}

static int reply_append(gr_job *j, const char *p, size_t n) {
    if (j->reply_len + n + 1 > j->reply_cap) {
        size_t nc = (j->reply_len + n + 1) * 2;
        char *nr = realloc(j->reply, nc);
        if (!nr)
            return 0;
        j->reply = nr;
        j->reply_cap = nc;
    }
    memcpy(j->reply + j->reply_len, p, n);
    j->reply_len += n;
    j->reply[j->reply_len] = 0;
    return 1;
}

static int hist_append(gr_sess *s, const int32_t *ids, size_t n) {
    if (s->n_hist + n > s->cap_hist) {
        size_t nc = (s->n_hist + n) * 2 + 64;
        int32_t *nh = realloc(s->hist, nc * sizeof *nh);
        if (!nh)
            return 0;
        s->hist = nh;
        s->cap_hist = nc;
    }
    memcpy(s->hist + s->n_hist, ids, n * sizeof *ids);
    s->n_hist += n;
    return 1;
}

/* Outcome of one step, reported to the scheduler (which queues the events under the lock). */
typedef struct step_out {
    int32_t finished; /* 0 running, 1 FINISHED, 2 FAILED */
    int32_t finish_reason;
    int32_t status;
    char msg[512];
    int32_t token; /* -1: no TOKEN event */
    char piece[256];
    size_t piece_len;
} step_out;

static void fail(step_out *o, geist_status st, const char *fmt, const char *detail, long a,
                 long b) {
    o->finished = 2;
    o->status = (int32_t)st;
    snprintf(o->msg, sizeof o->msg, fmt, detail ? detail : "", a, b);
}

/* Tokenizes a rendered or plain text into a fresh array. */
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

static geist_status render(const geist_model *m, const gr_msg *msgs, size_t n, char **out) {
    geist_chat_message *cm = malloc((n ? n : 1) * sizeof *cm);
    if (!cm)
        return GEIST_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++) {
        cm[i].role = msgs[i].role;
        cm[i].content = msgs[i].content;
    }
    size_t need = 0;
    char small[1];
    geist_status st = geist_chat_apply_template(m, NULL, cm, n, 1, small, sizeof small, &need);
    if (st == GEIST_ERR_BUFFER_TOO_SMALL) {
        char *buf = malloc(need);
        if (!buf) {
            free(cm);
            return GEIST_ERR_OUT_OF_MEMORY;
        }
        st = geist_chat_apply_template(m, NULL, cm, n, 1, buf, need, &need);
        if (st == GEIST_OK)
            *out = buf;
        else
            free(buf);
    } else if (st == GEIST_OK) {
        *out = dup_str("");
        if (!*out)
            st = GEIST_ERR_OUT_OF_MEMORY;
    }
    free(cm);
    return st;
}

static void prepare(gr_job *j, step_out *o) {
    gr_sess *s = j->s;
    const int32_t cap = geist_session_max_seq_len(s->sess);
    char err[256];
    if (j->msgs) {
        size_t first = 0; /* index of the first message that may be dropped */
        if (j->n_msgs > 0 && strcmp(j->msgs[0].role, "system") == 0)
            first = 1;
        size_t drop = 0;
        for (;;) {
            /* the conversation without the `drop` oldest droppable messages */
            size_t n = j->n_msgs - drop;
            gr_msg *view = malloc((n ? n : 1) * sizeof *view);
            if (!view) {
                fail(o, GEIST_ERR_OUT_OF_MEMORY, "out of memory%s", NULL, 0, 0);
                return;
            }
            for (size_t i = 0, k = 0; i < j->n_msgs; i++)
                if (i < first || i >= first + drop)
                    view[k++] = j->msgs[i];
            char *text = NULL;
            geist_status st = render(s->model, view, n, &text);
            free(view);
            if (st != GEIST_OK) {
                geist_last_error(err, sizeof err);
                fail(o, st, "chat template failed: %s", err, 0, 0);
                return;
            }
            int32_t *ids = NULL;
            size_t n_ids = 0;
            st = tokenize_all(s->model, text, GEIST_TOKENIZE_ADD_SPECIAL |
                                                  GEIST_TOKENIZE_PARSE_SPECIAL, &ids, &n_ids);
            free(text);
            if (st != GEIST_OK) {
                geist_last_error(err, sizeof err);
                fail(o, st, "tokenizing failed: %s", err, 0, 0);
                return;
            }
            /* room for the prompt and at least one reply token */
            if ((int64_t)n_ids + 1 > cap) {
                free(ids);
                if (j->trim && j->n_msgs - drop > first + 1) {
                    drop++;
                    continue;
                }
                fail(o, GEIST_ERR_CAPACITY,
                     "prompt too long%s: it needs %ld tokens but the session holds at most %ld "
                     "(max_seq_len); shorten the text or raise max_seq_len",
                     "", (long)n_ids, (long)cap);
                return;
            }
            /* reuse what the session already holds when its history is a prefix of the new
             * prompt; history past n_past (a restored snapshot) is run with the new tokens */
            size_t past = (size_t)geist_session_n_past(s->sess);
            size_t keep = 0;
            if (s->n_hist > 0 && s->n_hist <= n_ids &&
                memcmp(s->hist, ids, s->n_hist * sizeof *ids) == 0 && past < n_ids)
                keep = past;
            if (keep == 0 && past > 0)
                geist_session_reset(s->sess);
            s->n_hist = keep;
            j->n_prompt = n_ids - keep;
            j->prompt = malloc(j->n_prompt * sizeof *ids);
            if (!j->prompt) {
                free(ids);
                fail(o, GEIST_ERR_OUT_OF_MEMORY, "out of memory%s", NULL, 0, 0);
                return;
            }
            memcpy(j->prompt, ids + keep, j->n_prompt * sizeof *ids);
            free(ids);
            break;
        }
    } else {
        int32_t *fresh = NULL;
        size_t n_fresh = 0;
        if (j->text) {
            uint32_t flags = s->n_hist == 0 ? GEIST_TOKENIZE_ADD_SPECIAL : 0;
            geist_status st = tokenize_all(s->model, j->text, flags, &fresh, &n_fresh);
            if (st != GEIST_OK) {
                geist_last_error(err, sizeof err);
                fail(o, st, "tokenizing failed: %s", err, 0, 0);
                return;
            }
        } else {
            fresh = j->ids;
            n_fresh = j->n_ids;
            j->ids = NULL;
            j->n_ids = 0;
        }
        /* pending history (a restored snapshot) runs first */
        size_t past = (size_t)geist_session_n_past(s->sess);
        size_t pend = s->n_hist > past ? s->n_hist - past : 0;
        j->n_prompt = pend + n_fresh;
        j->prompt = malloc((j->n_prompt ? j->n_prompt : 1) * sizeof *fresh);
        if (!j->prompt) {
            free(fresh);
            fail(o, GEIST_ERR_OUT_OF_MEMORY, "out of memory%s", NULL, 0, 0);
            return;
        }
        if (pend)
            memcpy(j->prompt, s->hist + past, pend * sizeof *fresh);
        if (n_fresh)
            memcpy(j->prompt + pend, fresh, n_fresh * sizeof *fresh);
        free(fresh);
        s->n_hist = past;
    }
    int64_t past = geist_session_n_past(s->sess);
    if (past + (int64_t)j->n_prompt > cap) {
        fail(o, GEIST_ERR_CAPACITY,
             "prompt too long%s: the session holds %ld tokens and the prompt adds %ld",
             "", (long)past, (long)j->n_prompt);
        snprintf(o->msg + strlen(o->msg), sizeof o->msg - strlen(o->msg),
                 ", over its max_seq_len of %d; reset() it or raise max_seq_len", (int)cap);
        return;
    }
    if (j->n_prompt == 0 && past == 0) {
        fail(o, GEIST_ERR_INVALID_ARGUMENT, "empty prompt%s", NULL, 0, 0);
        return;
    }
    geist_status st = geist_detokenizer_create(s->model, 0, &j->detok);
    if (st == GEIST_OK)
        st = geist_sampler_set_options(s->sampler, &j->sopt);
    if (st != GEIST_OK) {
        geist_last_error(err, sizeof err);
        fail(o, st, "cannot start generation: %s", err, 0, 0);
        return;
    }
    j->state = 1;
}

static void step(gr_job *j, step_out *o) {
    gr_sess *s = j->s;
    char err[256];
    o->token = -1;
    if (j->cancel) {
        o->finished = 1;
        o->finish_reason = GEIST_FINISH_CANCELLED;
        return;
    }
    if (j->state == 0) {
        prepare(j, o);
        return;
    }
    if (j->state == 1) {
        double t0 = now_ms();
        size_t n = j->n_prompt - j->pos;
        if (n > PREFILL_CHUNK)
            n = PREFILL_CHUNK;
        if (n > 0) {
            geist_status st = geist_session_prefill(s->sess, j->prompt + j->pos, n);
            if (st != GEIST_OK) {
                geist_session_error(s->sess, err, sizeof err);
                fail(o, st, "prefill failed: %s", err, 0, 0);
                return;
            }
            if (!hist_append(s, j->prompt + j->pos, n)) {
                fail(o, GEIST_ERR_OUT_OF_MEMORY, "out of memory%s", NULL, 0, 0);
                return;
            }
            j->pos += n;
        }
        j->prefill_ms += now_ms() - t0;
        if (j->pos == j->n_prompt) {
            j->state = 2;
            if (j->max_tokens <= 0) {
                o->finished = 1;
                o->finish_reason = GEIST_FINISH_LENGTH;
            }
        }
        return;
    }
    double t0 = now_ms();
    const float *logits = NULL;
    int32_t id = -1;
    geist_status st = geist_session_logits(s->sess, &logits);
    if (st == GEIST_OK)
        st = geist_sampler_sample(s->sampler, logits, &id);
    if (st != GEIST_OK) {
        geist_session_error(s->sess, err, sizeof err);
        fail(o, st, "sampling failed: %s", err, 0, 0);
        return;
    }
    if (geist_token_is_end(s->model, id)) {
        size_t len = 0;
        geist_detokenizer_flush(j->detok, o->piece, sizeof o->piece, &len);
        if (len) {
            o->piece_len = len;
            o->token = id;
            reply_append(j, o->piece, len);
        }
        o->finished = 1;
        o->finish_reason = GEIST_FINISH_STOP;
        j->decode_ms += now_ms() - t0;
        return;
    }
    size_t len = 0;
    if (geist_detokenizer_push(j->detok, id, o->piece, sizeof o->piece, &len) != GEIST_OK)
        len = 0;
    o->token = id;
    o->piece_len = len;
    reply_append(j, o->piece, len);
    j->n_gen++;
    if (j->n_gen >= j->max_tokens) {
        o->finished = 1;
        o->finish_reason = GEIST_FINISH_LENGTH;
    } else if (geist_session_n_past(s->sess) + 1 > geist_session_max_seq_len(s->sess)) {
        o->finished = 1;
        o->finish_reason = GEIST_FINISH_CAPACITY;
    } else {
        st = geist_session_decode(s->sess, id);
        if (st != GEIST_OK) {
            geist_session_error(s->sess, err, sizeof err);
            fail(o, st, "decode failed: %s", err, 0, 0);
        } else if (!hist_append(s, &id, 1)) {
            fail(o, GEIST_ERR_OUT_OF_MEMORY, "out of memory%s", NULL, 0, 0);
        }
    }
    j->decode_ms += now_ms() - t0;
}

static gr_job *pick_locked(gr *r) {
    gr_job *best = NULL;
    for (gr_job *j = r->jobs; j; j = j->next) {
        if (j->done)
            continue;
        if (!best || j->priority > best->priority ||
            (j->priority == best->priority && j->last_step < best->last_step))
            best = j;
    }
    return best;
}

static void unlink_locked(gr *r, gr_job *j) {
    for (gr_job **pp = &r->jobs; *pp; pp = &(*pp)->next) {
        if (*pp == j) {
            *pp = j->next;
            break;
        }
    }
    if (j->s && j->s->job == j)
        j->s->job = NULL;
}

static void *scheduler(void *arg) {
    gr *r = arg;
    step_out o;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        gr_job *j = NULL;
        while (!r->stop && !(j = pick_locked(r)))
            pthread_cond_wait(&r->work, &r->mu);
        if (r->stop)
            break;
        j->busy = 1;
        j->last_step = ++r->tick;
        pthread_mutex_unlock(&r->mu);

        memset(&o, 0, sizeof o);
        step(j, &o);

        pthread_mutex_lock(&r->mu);
        j->busy = 0;
        gr_event ev;
        memset(&ev, 0, sizeof ev);
        ev.request_id = j->id;
        ev.user_data = j->user_data;
        if (o.token >= 0 && !j->cancel) {
            ev.type = GEIST_EVENT_TOKEN;
            ev.token = o.token;
            push_event_locked(r, j->s, &ev, o.piece, o.piece_len);
        }
        if (o.finished) {
            memset(&ev, 0, sizeof ev);
            ev.request_id = j->id;
            ev.user_data = j->user_data;
            ev.n_prompt = (int32_t)j->pos;
            ev.n_tokens = j->n_gen;
            ev.prefill_ms = j->prefill_ms;
            ev.decode_ms = j->decode_ms;
            if (o.finished == 1) {
                ev.type = GEIST_EVENT_FINISHED;
                ev.finish_reason = o.finish_reason;
                push_event_locked(r, j->s, &ev, j->reply ? j->reply : "", j->reply_len);
            } else {
                ev.type = GEIST_EVENT_FAILED;
                ev.status = o.status;
                push_event_locked(r, j->s, &ev, o.msg, strlen(o.msg));
            }
            unlink_locked(r, j);
            job_free(j);
        }
        pthread_cond_broadcast(&r->step_done);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

gr *gr_create(geist_engine *engine) {
    gr *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->engine = engine;
    r->next_id = 1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->work, NULL);
    pthread_cond_init(&r->step_done, NULL);
    if (pthread_create(&r->thread, NULL, scheduler, r) != 0) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->work);
        pthread_cond_destroy(&r->step_done);
        free(r);
        return NULL;
    }
    return r;
}

void gr_free(gr *r) {
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->work);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    while (r->jobs) {
        gr_job *j = r->jobs;
        unlink_locked(r, j);
        job_free(j);
    }
    for (size_t i = 0; i < r->q_len; i++)
        free(r->q[(r->q_head + i) % r->q_cap].ev.text);
    free(r->q);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->work);
    pthread_cond_destroy(&r->step_done);
    free(r);
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
    geist_sampler_options so;
    geist_sampler_options_default(&so);
    st = geist_sampler_create(geist_model_n_vocab(model), &so, &s->sampler);
    if (st != GEIST_OK) {
        geist_last_error(err, err_cap);
        geist_session_free(s->sess);
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
        /* the scheduler may end and free the job while we wait: look it up again each time */
        gr_job *j;
        while ((j = s->job) != NULL) {
            j->cancel = 1;
            if (j->busy) {
                pthread_cond_wait(&r->step_done, &r->mu);
                continue;
            }
            unlink_locked(r, j);
            job_free(j);
        }
        /* drop queued events of this session: nobody will read them */
        size_t kept = 0;
        for (size_t i = 0; i < r->q_len; i++) {
            gr_qev e = r->q[(r->q_head + i) % r->q_cap];
            if (e.owner == s)
                free(e.ev.text);
            else
                r->q[(r->q_head + kept++) % r->q_cap] = e;
        }
        r->q_len = kept;
        pthread_mutex_unlock(&r->mu);
    }
    geist_sampler_free(s->sampler);
    geist_session_free(s->sess);
    free(s->hist);
    free(s);
}

geist_session *gr_sess_session(gr_sess *s) { return s ? s->sess : NULL; }

int32_t gr_sess_busy(gr *r, gr_sess *s) {
    pthread_mutex_lock(&r->mu);
    int32_t b = s->job != NULL;
    pthread_mutex_unlock(&r->mu);
    return b;
}

geist_status gr_sess_reset(gr *r, gr_sess *s) {
    pthread_mutex_lock(&r->mu);
    geist_status st = GEIST_OK;
    if (s->job) {
        st = GEIST_ERR_STATE;
    } else {
        geist_session_reset(s->sess);
        geist_sampler_reset(s->sampler);
        s->n_hist = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return st;
}

geist_status gr_sess_set_history(gr *r, gr_sess *s, const int32_t *ids, size_t n) {
    geist_status st = gr_sess_reset(r, s);
    if (st == GEIST_OK && n > 0 && !hist_append(s, ids, n))
        st = GEIST_ERR_OUT_OF_MEMORY;
    return st;
}

const int32_t *gr_sess_history(gr_sess *s, size_t *n) {
    *n = s->n_hist;
    return s->hist;
}

geist_status gr_submit(gr *r, gr_sess *s, const gr_request *req, uint64_t *request_id) {
    int forms = (req->messages != NULL) + (req->text != NULL) + (req->ids != NULL);
    if (!r || !s || forms != 1)
        return GEIST_ERR_INVALID_ARGUMENT;
    gr_job *j = calloc(1, sizeof *j);
    if (!j)
        return GEIST_ERR_OUT_OF_MEMORY;
    j->s = s;
    j->trim = req->trim;
    j->sopt = req->sampler;
    j->max_tokens = req->max_tokens;
    j->priority = req->priority;
    j->user_data = req->user_data;
    int ok = 1;
    if (req->messages) {
        j->msgs = calloc(req->n_messages ? req->n_messages : 1, sizeof *j->msgs);
        ok = j->msgs != NULL;
        j->n_msgs = ok ? req->n_messages : 0;
        for (size_t i = 0; ok && i < req->n_messages; i++) {
            j->msgs[i].role = dup_str(req->messages[i].role ? req->messages[i].role : "user");
            j->msgs[i].content = dup_str(req->messages[i].content ? req->messages[i].content : "");
            ok = j->msgs[i].role && j->msgs[i].content;
        }
    } else if (req->text) {
        j->text = dup_str(req->text);
        ok = j->text != NULL;
    } else {
        j->ids = malloc((req->n_ids ? req->n_ids : 1) * sizeof *j->ids);
        ok = j->ids != NULL;
        if (ok && req->n_ids)
            memcpy(j->ids, req->ids, req->n_ids * sizeof *j->ids);
        j->n_ids = req->n_ids;
    }
    if (!ok) {
        job_free(j);
        return GEIST_ERR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&r->mu);
    if (s->job) {
        pthread_mutex_unlock(&r->mu);
        job_free(j);
        return GEIST_ERR_STATE;
    }
    j->id = r->next_id++;
    j->last_step = r->tick;
    j->next = r->jobs;
    r->jobs = j;
    s->job = j;
    *request_id = j->id;
    pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->mu);
    return GEIST_OK;
}

geist_status gr_cancel(gr *r, uint64_t request_id) {
    geist_status st = GEIST_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&r->mu);
    for (gr_job *j = r->jobs; j; j = j->next) {
        if (j->id == request_id) {
            j->cancel = 1;
            st = GEIST_OK;
            break;
        }
    }
    pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->mu);
    return st;
}

size_t gr_poll(gr *r, gr_event *events, size_t max) {
    size_t n = 0;
    pthread_mutex_lock(&r->mu);
    while (n < max && r->q_len > 0) {
        events[n++] = r->q[r->q_head].ev;
        r->q_head = (r->q_head + 1) % r->q_cap;
        r->q_len--;
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

void gr_event_clear(gr_event *e) {
    free(e->text);
    e->text = NULL;
    e->text_len = 0;
}
