/* gd_runtime.h — the extension's one interface to asynchronous generation.
 *
 * The Godot classes only talk to this interface: submit a chat request on a session, cancel it,
 * free a session that may be generating, and poll events on the main thread. Behind it is the
 * core's runtime (geist_submit / geist_poll / geist_cancel): the engine's scheduler thread runs
 * the requests of all sessions together (batched decode, priorities, budget) and applies the
 * core's conversation policy (template, KV reuse across turns, trimming, stop strings). This
 * layer adds only the busy flag per session and per-request timings measured on the polling
 * thread (see gr_event). */
#ifndef GD_RUNTIME_H
#define GD_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "geist.h"

typedef struct gr gr;
typedef struct gr_sess gr_sess;

typedef struct gr_msg {
    const char *role;
    const char *content;
} gr_msg;

typedef struct gr_request {
    const gr_msg *messages; /* the whole conversation; rendered with the model's chat template */
    size_t n_messages;
    geist_context_policy context; /* the core's context policy (trim, keep_first/last, reserve) */
    const char *const *stop; /* extra stop strings (the template's own are added by the core) */
    size_t n_stop;
    geist_sampler_options sampler;
    int32_t max_tokens;
    int32_t priority;
    uint64_t user_data;
    const char *grammar; /* constrained output (geist_request.grammar), or NULL */
    int32_t grammar_kind;
    const geist_action *actions; /* NPC actions (geist.h "Actions"), or NULL */
    size_t n_actions;
    int32_t action_choice;
} gr_request;

/* Timings are taken on the thread that calls gr_poll (the main thread, once per frame), so they
 * are wall-clock figures with the resolution of one drain (one frame):
 *  - prefill_ms: from gr_submit until the poll that saw the request's first TOKEN event (or its
 *    end, if it ended without a token): queueing, the prompt's prefill steps (shared with the
 *    other sessions' steps) and the first sample;
 *  - decode_ms: from that first TOKEN event until the poll that saw FINISHED: the decode steps
 *    of the n_tokens generated tokens (each runs once through the model), batched with the
 *    other active sessions. */
typedef struct gr_event {
    int32_t type; /* GEIST_EVENT_TOKEN / ACTION / FINISHED / FAILED */
    uint64_t request_id;
    uint64_t user_data;
    int32_t token;
    int32_t finish_reason;
    int32_t status;
    int32_t n_prompt;  /* end events: prompt ids run (the part not reused from the KV) */
    int32_t n_reused;  /* end events: ids of the conversation reused from the session's KV */
    int32_t n_dropped; /* end events: messages the context policy dropped */
    int32_t n_tokens;  /* end events: tokens generated */
    double prefill_ms; /* end events: see above */
    double decode_ms;
    char *text; /* owned by the event; free with gr_event_clear */
    size_t text_len;
} gr_event;

/* Which implementation is compiled in (for GeistEngine.stats()). */
const char *gr_path(void);

gr *gr_create(geist_engine *engine);
/* Every session must be freed first (the engine is freed by the caller afterwards). */
void gr_free(gr *r);
geist_status gr_configure(gr *r, const geist_runtime_options *o, char *err, size_t err_cap);

geist_status gr_sess_create(gr *r, geist_model *model, const geist_session_options *opts,
                            gr_sess **out, char *err, size_t err_cap);
/* Cancels its request and frees it (the core waits for a running step); its queued events are
 * dropped. Safe while it generates. */
void gr_sess_free(gr *r, gr_sess *s);
geist_session *gr_sess_session(gr_sess *s);
int32_t gr_sess_busy(gr *r, gr_sess *s);
/* Forgets all tokens (GEIST_ERR_STATE while a request runs). */
geist_status gr_sess_reset(gr *r, gr_sess *s);
/* Restores a geist_session_snapshot image; when the core refuses it (or img is NULL) the session
 * is reset instead and the next request runs the whole conversation. GEIST_ERR_STATE while a
 * request runs. *used_image says which happened. */
geist_status gr_sess_restore(gr *r, gr_sess *s, const void *img, size_t n, int *used_image);

/* Queues the conversation on the core's runtime (a copy; nothing else runs on the calling
 * thread). GEIST_ERR_STATE if the session has a request. Problems of the prompt (over the cap,
 * template errors) arrive as a FAILED event. */
geist_status gr_submit(gr *r, gr_sess *s, const gr_request *req, uint64_t *request_id);
geist_status gr_cancel(gr *r, uint64_t request_id);
/* Moves up to max events (oldest first), never waiting; the caller clears each with
 * gr_event_clear. Events of freed sessions are dropped. Reentrant (events are copies). */
size_t gr_poll(gr *r, gr_event *events, size_t max);
void gr_event_clear(gr_event *e);

#endif
