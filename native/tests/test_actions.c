/* NPC actions through geist.h (geist.h "Actions"): a chat request with two actions on a real
 * model ends with one ACTION event right before FINISHED whose JSON names a declared action; the
 * TOKEN pieces equal the FINISHED text and never hold the call line; a call cut short by
 * max_tokens is no event; bad action lists are refused at submit with a message; cancelling and
 * freeing sessions with action requests running is clean. Run under ASan with leak detection.
 *
 * usage: test_actions MODEL.gguf   (no model: skipped, exit 0) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geist.h"

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

static const geist_action ACTIONS[2] = {
    {"give_item", "Hand the player an item from your stock.",
     "{\"type\":\"object\",\"properties\":{\"item\":{\"type\":\"string\",\"enum\":[\"sword\","
     "\"shield\"]},\"count\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":3}},"
     "\"required\":[\"item\",\"count\"],\"additionalProperties\":false}"},
    {"open_gate", "Open the village gate.", NULL},
};

static const geist_chat_message TALK[2] = {
    {"system", "You are Brom, the village blacksmith. Answer in one short sentence."},
    {"user", "I need a sword, please give me one."},
};

typedef struct outcome {
    char text[4096], streamed[4096], action[1024];
    int n_action, n_end, finish, action_before_end, failed;
} outcome;

static void run(geist_engine *e, geist_session *s, int32_t choice, int32_t max_tokens,
                outcome *o) {
    memset(o, 0, sizeof *o);
    geist_request r;
    geist_request_default(&r);
    r.messages = TALK;
    r.n_messages = 2;
    r.sampler.temperature = 0.0f;
    r.max_tokens = max_tokens;
    r.actions = ACTIONS;
    r.n_actions = 2;
    r.action_choice = choice;
    uint64_t id = 0;
    geist_status st = geist_submit(e, s, &r, &id);
    CHECK(st == GEIST_OK, "submit: %d", st);
    if (st != GEIST_OK) return;
    geist_event ev[64];
    while (!o->n_end) {
        size_t n = geist_poll(e, ev, 64, 1000);
        for (size_t i = 0; i < n; i++) {
            if (ev[i].request_id != id) continue;
            if (ev[i].type == GEIST_EVENT_TOKEN) {
                strncat(o->streamed, ev[i].text, sizeof o->streamed - strlen(o->streamed) - 1);
            } else if (ev[i].type == GEIST_EVENT_ACTION) {
                o->n_action++;
                snprintf(o->action, sizeof o->action, "%.*s", (int)ev[i].text_len, ev[i].text);
            } else {
                o->n_end++;
                o->failed = ev[i].type == GEIST_EVENT_FAILED;
                o->finish = ev[i].finish_reason;
                o->action_before_end = o->n_action;
                snprintf(o->text, sizeof o->text, "%.*s", (int)ev[i].text_len, ev[i].text);
            }
        }
    }
}

static void expect_refused(geist_engine *e, geist_session *s, const geist_action *a, size_t n,
                           const char *grammar, const char *word) {
    geist_request r;
    geist_request_default(&r);
    r.messages = TALK;
    r.n_messages = 2;
    r.actions = a;
    r.n_actions = n;
    if (grammar) {
        r.grammar = grammar;
        r.grammar_kind = GEIST_GRAMMAR_GBNF;
    }
    uint64_t id = 0;
    geist_status st = geist_submit(e, s, &r, &id);
    char msg[512];
    geist_last_error(msg, sizeof msg);
    CHECK(st == GEIST_ERR_INVALID_ARGUMENT, "refused (%s): status %d", word, st);
    CHECK(strstr(msg, word) != NULL, "message names '%s': %s", word, msg);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("test_actions: no model given, skipped\n");
        return 0;
    }
    geist_engine *e = NULL;
    geist_model *m = NULL;
    if (geist_engine_create(NULL, &e) != GEIST_OK ||
        geist_model_load_file(e, argv[1], NULL, &m) != GEIST_OK) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    geist_session_options so;
    geist_session_options_default(&so);
    so.max_seq_len = 512;
    geist_session *s = NULL;
    CHECK(geist_session_create(m, &so, &s) == GEIST_OK, "session");

    /* a required call: exactly one ACTION, before FINISHED, naming a declared action */
    outcome o;
    run(e, s, GEIST_ACTION_REQUIRED, 64, &o);
    printf("speech: %s\naction: %s\n", o.text, o.action);
    CHECK(!o.failed && o.finish == GEIST_FINISH_STOP, "finished with STOP (%d)", o.finish);
    CHECK(o.n_action == 1 && o.action_before_end == 1, "one ACTION before FINISHED (%d)",
          o.n_action);
    CHECK(strncmp(o.action, "{\"name\":\"give_item\",\"arguments\":{", 33) == 0 ||
              strcmp(o.action, "{\"name\":\"open_gate\",\"arguments\":{}}") == 0,
          "the call is JSON of a declared action: %s", o.action);
    CHECK(strcmp(o.text, o.streamed) == 0, "FINISHED text == TOKEN pieces");
    CHECK(strstr(o.text, "<call>") == NULL && strchr(o.text, '\n') == NULL,
          "the speech is one line without the call: %s", o.text);

    /* cut short: no ACTION */
    geist_session_reset(s);
    run(e, s, GEIST_ACTION_REQUIRED, 3, &o);
    CHECK(o.n_action == 0, "a call cut short is no ACTION");
    CHECK(strstr(o.text, "<call>") == NULL, "no call line in the text");

    /* auto: any call is well formed, at most one */
    geist_session_reset(s);
    run(e, s, GEIST_ACTION_AUTO, 32, &o);
    CHECK(o.n_action <= 1 && !o.failed, "auto: at most one ACTION");

    /* refused at submit, nothing queued */
    const geist_action bad_name[1] = {{"give item", NULL, NULL}};
    const geist_action dup[2] = {{"a", NULL, NULL}, {"a", NULL, NULL}};
    const geist_action not_obj[1] = {{"a", NULL, "{\"type\":\"string\"}"}};
    const geist_action bad_json[1] = {{"a", NULL, "{\"type\":"}};
    const geist_action bad_kw[1] = {{"a", NULL, "{\"type\":\"object\",\"wat\":1}"}};
    expect_refused(e, s, bad_name, 1, NULL, "name");
    expect_refused(e, s, dup, 2, NULL, "both named");
    expect_refused(e, s, not_obj, 1, NULL, "object");
    expect_refused(e, s, bad_json, 1, NULL, "not JSON");
    expect_refused(e, s, bad_kw, 1, NULL, "action 'a'");
    expect_refused(e, s, ACTIONS, 0, NULL, "actions");
    expect_refused(e, s, ACTIONS, 2, "root ::= \"x\"", "exclusive");
    {
        geist_request r;
        geist_request_default(&r);
        r.messages = TALK;
        r.n_messages = 2;
        r.actions = ACTIONS;
        r.n_actions = 2;
        r.action_choice = 7;
        uint64_t id;
        CHECK(geist_submit(e, s, &r, &id) == GEIST_ERR_INVALID_ARGUMENT, "bad action_choice");
    }

    /* cancel and free while an action request runs: clean (ASan) */
    geist_session *s2 = NULL;
    CHECK(geist_session_create(m, &so, &s2) == GEIST_OK, "session 2");
    geist_request r;
    geist_request_default(&r);
    r.messages = TALK;
    r.n_messages = 2;
    r.actions = ACTIONS;
    r.n_actions = 2;
    r.max_tokens = 32;
    uint64_t id1 = 0, id2 = 0;
    CHECK(geist_submit(e, s, &r, &id1) == GEIST_OK, "submit 1");
    CHECK(geist_submit(e, s2, &r, &id2) == GEIST_OK, "submit 2");
    geist_event ev[64];
    geist_poll(e, ev, 64, 50);
    geist_cancel(e, id1);
    geist_session_free(s2);
    int ended = 0;
    for (int k = 0; k < 200 && !ended; k++) {
        size_t n = geist_poll(e, ev, 64, 100);
        for (size_t i = 0; i < n; i++)
            ended |= ev[i].request_id == id1 && (ev[i].type == GEIST_EVENT_FINISHED ||
                                                 ev[i].type == GEIST_EVENT_FAILED);
    }
    CHECK(ended, "the cancelled request ended");
    geist_session_free(s);
    geist_model_free(m);
    geist_engine_free(e);
    printf("%s: %d failures\n", fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}
