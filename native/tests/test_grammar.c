/* Tests of the grammar room's vocabulary-free parts (grammar/gbnf.c, json.c, json_schema.c):
 * valid grammars compile, hostile ones fail with a message (never a crash or a hang), seeded
 * random mutations of valid grammars and schemas never read out of bounds (run under ASan), and
 * the JSON schema compiler's output compiles. The matcher over real vocabularies is tested from
 * Python (tests/grammar, also with --native asan). Prints one line per failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_internal.h"
#include "util/json.h"
#include "grammar/json_schema.h"

static int g_failures, g_checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                 \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)

static const char *const GOOD_GBNF[] = {
    "root ::= \"a\" | \"b\"\n",
    "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= [0-9]+ | \"(\" expr \")\"\n",
    "root ::= [^\"\\\\] {2,5} \"x\"? # comment\n",
    "root ::= (\"a\" |\n  \"b\")+ .\n",
    "root ::= \"\\x41\\u00e9\\U0001F600\" [\\u0100-\\uFFFF]\n",
    "root ::= \"\"\n",
};

static const char *const BAD_GBNF[] = {
    "root ::= root \"a\"\n",          /* left recursion */
    "root ::= (\"a\"?)*\n",            /* repetition of the empty string */
    "root ::= \"a\" root\n",          /* empty language */
    "root ::= x\n",                   /* undefined */
    "other ::= \"a\"\n",              /* no root */
    "root ::= \"a\"{2000}\n",         /* repetition over the limit */
    "root ::= \"\xff\"\n",            /* invalid UTF-8 */
    "root ::= \"abc\n",               /* unterminated */
    "root ::= (\"a\"\n",              /* unbalanced */
    "root ::= [z-a]\n",               /* reversed range */
    "root ::= \"\\q\"\n",             /* unknown escape */
};

static const char *const GOOD_SCHEMA[] = {
    ("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":5},"
     "\"b\":{\"enum\":[1,\"x\",null]}},\"required\":[\"a\"],\"additionalProperties\":false}"),
    "{\"type\":\"integer\",\"minimum\":-15,\"maximum\":12345}",
    "{\"type\":\"array\",\"items\":{\"type\":\"number\",\"minimum\":0,\"maximum\":3},\"maxItems\":3}",
    "{\"anyOf\":[{\"type\":\"boolean\"},{\"const\":\"q\\\"\"}]}",
    "{}",
};

static const char *const BAD_SCHEMA[] = {
    "{\"type\":\"string\",\"pattern\":\"a\"}",
    "{\"type\":\"object\",\"additionalProperties\":true}",
    "{\"type\":\"integer\",\"minimum\":3,\"maximum\":2}",
    "{\"type\":\"array\",\"maxItems\":5000}",
    "{\"type\":",
    "[1,2]",
};

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void mutate_and_compile(const char *src, int32_t kind, int rounds) {
    const size_t n = strlen(src);
    char *buf = malloc(n + 8);
    static const char alphabet[] = "()[]{}|*+?\"\\-^.:= \n#ax0,9}";
    for (int r = 0; r < rounds; r++) {
        memcpy(buf, src, n + 1);
        size_t len = n;
        const int edits = 1 + (int)(next_u32() % 4);
        for (int e = 0; e < edits && len > 0; e++) {
            const size_t at = next_u32() % len;
            switch (next_u32() % 3) {
            case 0: buf[at] = alphabet[next_u32() % (sizeof alphabet - 1)]; break;
            case 1: memmove(buf + at, buf + at + 1, len - at); len--; break;
            default:
                if (len + 1 < n + 8) {
                    memmove(buf + at + 1, buf + at, len - at + 1);
                    buf[at] = (char)(next_u32() & 0xFF ? alphabet[next_u32() % (sizeof alphabet - 1)] : '\x80');
                    len++;
                }
            }
        }
        gt_err err = {0};
        const geist_status st = gt_grammar_check(buf, len, kind, &err);
        CHECK(st == GEIST_OK || (err.msg[0] != '\0' && st == GEIST_ERR_INVALID_ARGUMENT),
              "status %d, message '%s'", st, err.msg);
    }
    free(buf);
}

int main(void) {
    gt_err err;
    for (size_t i = 0; i < sizeof GOOD_GBNF / sizeof *GOOD_GBNF; i++) {
        err = (gt_err){0};
        const geist_status st = gt_grammar_check(GOOD_GBNF[i], strlen(GOOD_GBNF[i]), GEIST_GRAMMAR_GBNF, &err);
        CHECK(st == GEIST_OK, "good grammar %zu: %s", i, err.msg);
    }
    for (size_t i = 0; i < sizeof BAD_GBNF / sizeof *BAD_GBNF; i++) {
        err = (gt_err){0};
        const geist_status st = gt_grammar_check(BAD_GBNF[i], strlen(BAD_GBNF[i]), GEIST_GRAMMAR_GBNF, &err);
        CHECK(st == GEIST_ERR_INVALID_ARGUMENT && strncmp(err.msg, "grammar:", 8) == 0,
              "bad grammar %zu: status %d '%s'", i, st, err.msg);
    }
    for (size_t i = 0; i < sizeof GOOD_SCHEMA / sizeof *GOOD_SCHEMA; i++) {
        err = (gt_err){0};
        gt_text t = {0};
        geist_status st = gt_json_schema_to_gbnf(GOOD_SCHEMA[i], strlen(GOOD_SCHEMA[i]), "act-args", &t, &err);
        CHECK(st == GEIST_OK, "good schema %zu: %s", i, err.msg);
        if (st == GEIST_OK) {
            /* embeddable: every rule is act-args or act-args-...; wrap it in a bigger grammar */
            gt_text g = {0};
            gt_text_appendf(&g, "root ::= \"CALL \" act-args\n%s", t.p);
            st = gt_grammar_check(g.p, g.n, GEIST_GRAMMAR_GBNF, &err);
            CHECK(st == GEIST_OK, "embedded schema %zu: %s\n%s", i, err.msg, g.p);
            for (const char *line = t.p; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
                CHECK(strncmp(line, "act-args", 8) == 0, "rule without the prefix: %.40s", line);
            gt_text_free(&g);
        }
        gt_text_free(&t);
    }
    for (size_t i = 0; i < sizeof BAD_SCHEMA / sizeof *BAD_SCHEMA; i++) {
        err = (gt_err){0};
        gt_text t = {0};
        gt_text_append(&t, "keep", 4);
        const geist_status st = gt_json_schema_to_gbnf(BAD_SCHEMA[i], strlen(BAD_SCHEMA[i]), "r", &t, &err);
        CHECK(st == GEIST_ERR_INVALID_ARGUMENT && strstr(err.msg, "JSON"), "bad schema %zu: %d '%s'", i, st, err.msg);
        CHECK(t.n == 4 && strcmp(t.p, "keep") == 0, "output not restored after an error");
        gt_text_free(&t);
    }
    /* the JSON reader */
    gt_json *j = NULL;
    err = (gt_err){0};
    const char *doc = " {\"a\": [1, 2.5e3, \"x\\u00e9\\ud83d\\ude00\"], \"b\": {\"c\": null}, \"a\": true} ";
    CHECK(gt_json_parse(doc, strlen(doc), &j, &err) == GEIST_OK, "%s", err.msg);
    if (j) {
        const gt_json *a = gt_json_get(j, "a");
        CHECK(a && a->type == GT_JSON_BOOL && a->b, "last duplicate member wins");
        const gt_json *arr = j->child;
        CHECK(arr && arr->type == GT_JSON_ARRAY && arr->len == 3, "array");
        if (arr && arr->child && arr->child->next && arr->child->next->next) {
            CHECK(arr->child->is_int && !arr->child->next->is_int && arr->child->next->num == 2500.0, "numbers");
            CHECK(strcmp(arr->child->next->next->str, "x\xc3\xa9\xf0\x9f\x98\x80") == 0, "escapes");
        }
        gt_json_free(j);
    }
    char deep[400];
    memset(deep, '[', sizeof deep);
    CHECK(gt_json_parse(deep, sizeof deep, &j, &err) == GEIST_ERR_INVALID_ARGUMENT, "depth limit");
    /* hostile text never crashes (ASan) */
    for (size_t i = 0; i < sizeof GOOD_GBNF / sizeof *GOOD_GBNF; i++)
        mutate_and_compile(GOOD_GBNF[i], GEIST_GRAMMAR_GBNF, 400);
    for (size_t i = 0; i < sizeof GOOD_SCHEMA / sizeof *GOOD_SCHEMA; i++)
        mutate_and_compile(GOOD_SCHEMA[i], GEIST_GRAMMAR_JSON_SCHEMA, 400);
    printf("test_grammar: %d checks, %d failures\n", g_checks, g_failures);
    return g_failures != 0;
}
