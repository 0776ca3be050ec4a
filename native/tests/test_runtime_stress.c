/* Stress test of the async runtime: 32 sessions, 4 submitting threads, random cancels, a poller
 * draining events with a short timeout; every request must end with exactly one FINISHED or
 * FAILED event, poll must never block past its timeout, and freeing sessions with requests
 * running must be safe. Run under the tsan and asan variants.
 *
 * usage: test_runtime_stress MODEL.gguf [total_tokens]   (no model: skipped, exit 0) */
#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "geist.h"

#define N_SESSIONS 32
#define N_THREADS 4
#define MAX_REQ 100000

typedef struct shared {
    geist_engine *engine;
    geist_model *model;
    geist_session *sessions[N_SESSIONS];
    atomic_int ends[MAX_REQ]; /* end events per request id */
    atomic_int submitted, ended_token_events;
    atomic_long tokens;
    long target_tokens;
    atomic_bool done_submitting;
    atomic_int busy[N_SESSIONS]; /* 1 while a request of ours runs on the session */
    uint64_t req_session[MAX_REQ];
} shared;

/* a small LCG (rand_r is POSIX only): the same sequence on every platform */
static int next_rand(unsigned *seed) {
    *seed = *seed * 1103515245u + 12345u;
    return (int)((*seed >> 16) & 0x7fff);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int fails = 0;
#define CHECK(c, ...)                                                                           \
    do {                                                                                        \
        if (!(c)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fprintf(stderr, "\n");                                                              \
            fails++;                                                                            \
        }                                                                                       \
    } while (0)

typedef struct targ {
    shared *sh;
    int idx;
} targ;

static void *submitter(void *arg) {
    targ *ta = arg;
    shared *sh = ta->sh;
    unsigned seed = 1234u + (unsigned)ta->idx;
    static const char *texts[] = {"hello there", "the quick brown fox", "a b c d", "once upon"};
    const char *stops[] = {"xyz", "q"};
    while (atomic_load(&sh->tokens) < sh->target_tokens) {
        /* each thread owns sessions idx, idx + 4, ... */
        const int si = ta->idx + N_THREADS * (next_rand(&seed) % (N_SESSIONS / N_THREADS));
        if (atomic_load(&sh->busy[si]) != 0) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
            continue;
        }
        geist_session *s = sh->sessions[si];
        if (geist_session_n_past(s) > 48) geist_session_reset(s); /* not busy: ours to touch */
        geist_request r;
        geist_request_default(&r);
        int32_t ids[6];
        const int kind = next_rand(&seed) % 3;
        geist_chat_message msgs[1] = {{"user", "hi"}};
        if (kind == 0) {
            r.text = texts[next_rand(&seed) % 4];
        } else if (kind == 1) {
            for (int i = 0; i < 6; i++) ids[i] = 1 + next_rand(&seed) % 200;
            r.ids = ids;
            r.n_ids = 1 + (size_t)(next_rand(&seed) % 6);
        } else {
            r.messages = msgs;
            r.n_messages = 1;
        }
        r.max_tokens = 1 + next_rand(&seed) % 12;
        r.sampler.temperature = (next_rand(&seed) % 2) ? 0.0f : 0.9f;
        r.sampler.seed = (uint64_t)next_rand(&seed);
        r.priority = next_rand(&seed) % 3;
        r.stop = stops;
        r.n_stop = (size_t)(next_rand(&seed) % 3);
        uint64_t id = 0;
        atomic_fetch_add(&sh->busy[si], 1);
        geist_status st = geist_submit(sh->engine, s, &r, &id);
        if (st != GEIST_OK) {
            atomic_fetch_sub(&sh->busy[si], 1);
            CHECK(0, "submit failed: %s", geist_status_name(st));
            continue;
        }
        CHECK(id < MAX_REQ, "request id %llu too large", (unsigned long long)id);
        if (id >= MAX_REQ) break;
        sh->req_session[id] = (uint64_t)si; /* read by the poller after the end event */
        atomic_fetch_add(&sh->submitted, 1);
        /* a second request on a busy session is refused */
        uint64_t id2;
        atomic_fetch_add(&sh->busy[si], 1);
        geist_status st2 = geist_submit(sh->engine, s, &r, &id2);
        if (st2 != GEIST_OK) atomic_fetch_sub(&sh->busy[si], 1);
        CHECK(st2 == GEIST_ERR_STATE || st2 == GEIST_OK, "second submit: %s",
              geist_status_name(st2));
        if (st2 == GEIST_OK) { /* the first one ended already; count this one too */
            CHECK(id2 < MAX_REQ, "id");
            sh->req_session[id2] = (uint64_t)si;
            atomic_fetch_add(&sh->submitted, 1);
        }
        if (next_rand(&seed) % 4 == 0) {
            struct timespec ts = {0, (long)(next_rand(&seed) % 3000) * 1000L};
            nanosleep(&ts, NULL);
            geist_cancel(sh->engine, id); /* may have ended: INVALID_ARGUMENT is fine */
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("test_runtime_stress: no model given, skipped\n");
        return 0;
    }
    shared *sh = calloc(1, sizeof *sh);
    sh->target_tokens = argc > 2 ? atol(argv[2]) : 2000;
    geist_engine_options eo;
    geist_engine_options_default(&eo);
    eo.n_threads = 2;
    if (geist_engine_create(&eo, &sh->engine) != GEIST_OK) return 1;
    if (geist_model_load_file(sh->engine, argv[1], NULL, &sh->model) != GEIST_OK) {
        char msg[512];
        geist_last_error(msg, sizeof msg);
        fprintf(stderr, "load: %s\n", msg);
        return 1;
    }
    geist_runtime_options ro;
    geist_runtime_options_default(&ro);
    ro.prefill_chunk = 8;
    ro.max_batch = 24;
    CHECK(geist_runtime_configure(sh->engine, &ro) == GEIST_OK, "configure");
    geist_session_options so;
    geist_session_options_default(&so);
    so.max_seq_len = 64;
    for (int i = 0; i < N_SESSIONS; i++)
        if (geist_session_create(sh->model, &so, &sh->sessions[i]) != GEIST_OK) return 1;

    pthread_t th[N_THREADS];
    targ ta[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        ta[i] = (targ){sh, i};
        pthread_create(&th[i], NULL, submitter, &ta[i]);
    }
    geist_event ev[16];
    int ended = 0;
    double worst_over = 0.0;
    bool joined = false;
    for (;;) {
        const int32_t timeout = 5;
        const double t0 = now_ms();
        size_t n = geist_poll(sh->engine, ev, 16, timeout);
        const double over = now_ms() - t0 - timeout;
        if (over > worst_over) worst_over = over;
        for (size_t i = 0; i < n; i++) {
            const uint64_t id = ev[i].request_id;
            CHECK(id < MAX_REQ, "event for id %llu", (unsigned long long)id);
            if (id >= MAX_REQ) continue;
            CHECK(atomic_load(&sh->ends[id]) == 0, "event after the end of request %llu (type %d)",
                  (unsigned long long)id, ev[i].type);
            CHECK(ev[i].text != NULL, "event text");
            if (ev[i].type == GEIST_EVENT_TOKEN) {
                atomic_fetch_add(&sh->tokens, 1);
            } else {
                CHECK(ev[i].type == GEIST_EVENT_FINISHED || ev[i].type == GEIST_EVENT_FAILED,
                      "event type %d", ev[i].type);
                atomic_fetch_add(&sh->ends[id], 1);
                ended++;
                atomic_fetch_sub(&sh->busy[sh->req_session[id]], 1);
            }
        }
        if (!joined && atomic_load(&sh->tokens) >= sh->target_tokens) {
            for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
            joined = true;
            /* free a few sessions while their requests may still run: they end as cancelled */
            for (int i = 0; i < 4; i++) {
                geist_session_free(sh->sessions[i]);
                sh->sessions[i] = NULL;
            }
        }
        if (joined && ended == atomic_load(&sh->submitted)) break;
    }
    for (int id = 1; id <= atomic_load(&sh->submitted); id++)
        CHECK(atomic_load(&sh->ends[id]) == 1, "request %d ended %d times", id,
              atomic_load(&sh->ends[id]));
    /* a session is usable after all that */
    geist_session *s = sh->sessions[5];
    geist_session_reset(s);
    int32_t one = 1;
    CHECK(geist_session_prefill(s, &one, 1) == GEIST_OK, "session usable");
    printf("requests %d, token events %ld, poll overshoot worst %.2f ms\n",
           atomic_load(&sh->submitted), (long)atomic_load(&sh->tokens), worst_over);
    CHECK(worst_over < 250.0, "poll blocked %.1f ms past its timeout", worst_over);
    /* engine freed with requests queued and running: they end, nothing leaks */
    for (int i = 4; i < 12; i++) {
        geist_request r;
        geist_request_default(&r);
        r.text = "hello";
        r.max_tokens = 100;
        geist_session_reset(sh->sessions[i]);
        geist_submit(sh->engine, sh->sessions[i], &r, NULL);
    }
    for (int i = 12; i < N_SESSIONS; i++) geist_session_free(sh->sessions[i]);
    for (int i = 4; i < 12; i++) geist_session_free(sh->sessions[i]);
    geist_model_free(sh->model);
    geist_engine_free(sh->engine);
    free(sh);
    printf(fails ? "FAILED (%d)\n" : "ok\n", fails);
    return fails ? 1 : 0;
}
