/* The runtime calls of geist.h (submit, cancel, poll, configure) over runtime/runtime.h. */
#include "../runtime/runtime.h"
#include "../session/session.h"

static geist_status fail(const gt_err *err) {
    gt_set_thread_error(err->msg);
    return err->status;
}

void geist_runtime_options_default(geist_runtime_options *o) {
    if (o) gt_runtime_options_default(o);
}

void geist_request_default(geist_request *r) {
    if (r) gt_request_default(r);
}

geist_status geist_submit(geist_engine *engine, geist_session *session,
                          const geist_request *request, uint64_t *request_id) {
    gt_err err = {0};
    if (!engine || !session || !request) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "engine, session and request must not be NULL");
        return fail(&err);
    }
    geist_status st = gt_runtime_submit(engine->runtime, session, request, request_id, &err);
    if (st != GEIST_OK) {
        pthread_mutex_lock(&session->err_lock);
        session->last_err = err;
        pthread_mutex_unlock(&session->err_lock);
        return fail(&err);
    }
    gt_clear_thread_error();
    return GEIST_OK;
}

geist_status geist_cancel(geist_engine *engine, uint64_t request_id) {
    gt_err err = {0};
    if (!engine) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "engine must not be NULL");
        return fail(&err);
    }
    if (gt_runtime_cancel(engine->runtime, request_id, &err) != GEIST_OK) return fail(&err);
    return GEIST_OK;
}

size_t geist_poll(geist_engine *engine, geist_event *events, size_t max_events,
                  int32_t timeout_ms) {
    if (!engine || (!events && max_events > 0)) return 0;
    return gt_runtime_poll(engine->runtime, events, max_events, timeout_ms);
}

geist_status geist_runtime_configure(geist_engine *engine, const geist_runtime_options *o) {
    gt_err err = {0};
    if (!engine) {
        gt_fail(&err, GEIST_ERR_INVALID_ARGUMENT, "engine must not be NULL");
        return fail(&err);
    }
    if (gt_runtime_configure(engine->runtime, o, &err) != GEIST_OK) return fail(&err);
    return GEIST_OK;
}
