/* gd_runtime.h — the extension's one interface to asynchronous generation.
 *
 * The Godot classes only talk to this interface: submit a request on a session, cancel it,
 * detach a session that is being freed, and poll finished events on the main thread. Behind it
 * runs, for now, a scheduler thread owned by the extension that drives geist's synchronous API
 * (tokenize -> prefill -> sample -> decode -> detokenize), interleaving all active sessions one
 * step at a time, and hands events to the main thread through a locked queue. When the core's
 * runtime (geist_submit / geist_poll) links, only gd_runtime.c changes. */
#ifndef GD_RUNTIME_H
#define GD_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "geist.h"

typedef struct gr gr;
typedef struct gr_sess gr_sess;

/* A chat message owned by the request (copied at submit). */
typedef struct gr_msg {
    char *role;
    char *content;
} gr_msg;

typedef struct gr_request {
    /* Exactly one prompt form: messages (rendered with the model's chat template; the part of the
     * rendered conversation the session already holds is reused), text (appended as plain text,
     * control tokens not parsed) or ids (appended as is; max_tokens 0 = prefill only). */
    const gr_msg *messages;
    size_t n_messages;
    int32_t trim; /* messages: drop the oldest turns (not the first system one) until it fits */
    const char *text;
    const int32_t *ids;
    size_t n_ids;
    geist_sampler_options sampler;
    int32_t max_tokens;
    int32_t priority;
    uint64_t user_data;
} gr_request;

typedef struct gr_event {
    int32_t type; /* GEIST_EVENT_TOKEN / FINISHED / FAILED */
    uint64_t request_id;
    uint64_t user_data;
    int32_t token;
    int32_t finish_reason;
    int32_t status;
    int32_t n_prompt;   /* FINISHED: prompt tokens run by this request */
    int32_t n_tokens;   /* FINISHED: tokens generated */
    double prefill_ms;  /* FINISHED: time spent in prefill */
    double decode_ms;   /* FINISHED: time spent sampling + decoding */
    char *text;         /* owned by the event; free with gr_event_clear */
    size_t text_len;
} gr_event;

/* Which implementation is compiled in ("extension worker thread (synchronous geist API)"). */
const char *gr_path(void);

gr *gr_create(geist_engine *engine);
/* Stops the scheduler; every session must be detached first. */
void gr_free(gr *r);

/* A session as the runtime sees it (owns the geist_session, its sampler and token history). */
geist_status gr_sess_create(gr *r, geist_model *model, const geist_session_options *opts,
                            gr_sess **out, char *err, size_t err_cap);
/* Cancels its request, waits until the scheduler no longer touches it, drops its queued events
 * and frees it (geist_session included). Safe while it generates. */
void gr_sess_free(gr *r, gr_sess *s);
geist_session *gr_sess_session(gr_sess *s);
int32_t gr_sess_busy(gr *r, gr_sess *s);
/* Forgets all tokens (fails with GEIST_ERR_STATE while a request runs). */
geist_status gr_sess_reset(gr *r, gr_sess *s);
/* Replaces the history with ids without running them (a restored snapshot): the next request
 * runs them before its own tokens. GEIST_ERR_STATE while a request runs. */
geist_status gr_sess_set_history(gr *r, gr_sess *s, const int32_t *ids, size_t n);
/* Tokens the session holds, in order (valid until the next request); NULL if unknown. */
const int32_t *gr_sess_history(gr_sess *s, size_t *n);

/* Queues a request; everything is copied. GEIST_ERR_STATE if the session has one running. */
geist_status gr_submit(gr *r, gr_sess *s, const gr_request *req, uint64_t *request_id);
geist_status gr_cancel(gr *r, uint64_t request_id);
/* Moves up to max events (oldest first); the caller clears each with gr_event_clear. */
size_t gr_poll(gr *r, gr_event *events, size_t max);
void gr_event_clear(gr_event *e);

#endif
