/* The asynchronous runtime of an engine: request queue, one scheduler thread that runs batched
 * steps across sessions (session/forward.h) on the engine's worker pool, and the event queue that
 * geist_poll() drains. See geist.h "Runtime" for the contract. */
#ifndef GEIST_RUNTIME_H
#define GEIST_RUNTIME_H

#include "../model/model.h"

typedef struct gt_runtime gt_runtime;

/* Allocates the runtime (no thread yet: it starts on the first submit). NULL when out of memory. */
gt_runtime *gt_runtime_create(geist_engine *engine);
/* Stops the scheduler after its current step and frees everything; requests still queued end
 * (no events are delivered after this). */
void gt_runtime_free(gt_runtime *rt);
/* Called by geist_session_free before the session goes: its request (if any) ends as CANCELLED
 * and the call returns once the runtime no longer touches the session. */
void gt_runtime_session_freed(gt_runtime *rt, geist_session *s);

geist_status gt_runtime_submit(gt_runtime *rt, geist_session *s, const geist_request *r,
                               uint64_t *id, gt_err *err);
geist_status gt_runtime_cancel(gt_runtime *rt, uint64_t id, gt_err *err);
size_t gt_runtime_poll(gt_runtime *rt, geist_event *events, size_t max_events, int32_t timeout_ms);
/* geist.h's defaults (argument not NULL); the geist_*_default calls wrap them. */
void gt_runtime_options_default(geist_runtime_options *o);
void gt_request_default(geist_request *r);
geist_status gt_runtime_configure(gt_runtime *rt, const geist_runtime_options *o, gt_err *err);

#endif
