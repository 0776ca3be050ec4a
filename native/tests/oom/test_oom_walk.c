/* Allocation-failure walk. Linked with -Wl,--wrap=malloc,calloc,realloc,aligned_alloc,
 * posix_memalign (SConstruct, test builds only: the library is unchanged), so every allocation
 * the core makes passes through the wrappers below. For each entry point the walk makes the
 * N-th allocation fail, for N = 0, 1, 2, ... until the call makes fewer than N + 1 allocations,
 * and checks each failing run: the status is GEIST_ERR_OUT_OF_MEMORY, the out-pointer and the
 * objects are unchanged, nothing crashes, and (ASan's leak check at exit) nothing leaks.
 * The async runtime's thread allocates with the counter armed too: the walk over geist_submit
 * polls until the request's end event and checks that exactly one arrives.
 * It also checks issue 20's block_count file allocates little before failing.
 * Usage: test_oom_walk LLAMA_FIXTURE.gguf GEMMA3_FIXTURE.gguf SMOLLM2.gguf */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "geist.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t s);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);

/* Test-only global state (this program is single-purpose; the library keeps none). */
static atomic_bool g_armed;
static atomic_long g_count;
static atomic_long g_fail_at = -1;
static atomic_size_t g_bytes, g_max_one;
#define MAX_SITES 4096
static void *g_sites[MAX_SITES];
static atomic_int g_n_sites;

static bool should_fail(size_t n, void *site) {
    if (!atomic_load(&g_armed)) return false;
    const long i = atomic_fetch_add(&g_count, 1);
    atomic_fetch_add(&g_bytes, n);
    size_t m = atomic_load(&g_max_one);
    while (n > m && !atomic_compare_exchange_weak(&g_max_one, &m, n)) {}
    if (i != atomic_load(&g_fail_at)) return false;
    int k = atomic_load(&g_n_sites);
    for (int j = 0; j < k; j++)
        if (g_sites[j] == site) return true;
    if (k < MAX_SITES) g_sites[atomic_fetch_add(&g_n_sites, 1)] = site;
    return true;
}

void *__wrap_malloc(size_t n) {
    return should_fail(n, __builtin_return_address(0)) ? NULL : __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t s) {
    return should_fail(n * s, __builtin_return_address(0)) ? NULL : __real_calloc(n, s);
}
void *__wrap_realloc(void *p, size_t n) {
    return should_fail(n, __builtin_return_address(0)) ? NULL : __real_realloc(p, n);
}
void *__wrap_aligned_alloc(size_t a, size_t n) {
    return should_fail(n, __builtin_return_address(0)) ? NULL : __real_aligned_alloc(a, n);
}
int __wrap_posix_memalign(void **p, size_t a, size_t n) {
    return should_fail(n, __builtin_return_address(0)) ? 12 /* ENOMEM */ : __real_posix_memalign(p, a, n);
}

static int g_failures;
#define CHECK(c)                                                                               \
    do {                                                                                       \
        if (!(c)) {                                                                            \
            printf("FAIL %s:%d: %s (walk %s, N=%ld)\n", __FILE__, __LINE__, #c, g_walk, g_n);  \
            g_failures++;                                                                      \
        }                                                                                      \
    } while (0)
static const char *g_walk = "";
static long g_total;
static long g_n;

static void arm(long fail_at) {
    atomic_store(&g_count, 0);
    atomic_store(&g_bytes, 0);
    atomic_store(&g_max_one, 0);
    atomic_store(&g_fail_at, fail_at);
    atomic_store(&g_armed, true);
}
static long disarm(void) {
    atomic_store(&g_armed, false);
    return atomic_load(&g_count);
}

static void *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = aligned_alloc(64, (*n + 63) & ~(size_t)63);
    if (!p || fread(p, 1, *n, f) != *n) exit(2);
    fclose(f);
    return p;
}

/* One walk: body(N) runs the entry point with allocation N failing and returns the status;
 * the walk ends when a run made no more than N allocations (so nothing failed). */
typedef geist_status (*body_fn)(void *ctx, bool *ran_out);
/* absorbed = true: an allocation failure the call may absorb and still succeed (the runtime
 * drops a TOKEN event it cannot store, or delivers fewer events per poll); such runs must still
 * end with exactly one end event, and are counted. */
static void walk_ex(const char *name, body_fn body, void *ctx, bool absorbed) {
    g_walk = name;
    const int sites0 = atomic_load(&g_n_sites);
    long n = 0, n_absorbed = 0;
    for (;; n++) {
        g_n = n;
        bool dummy = false;
        arm(n);
        geist_status st = body(ctx, &dummy);
        const long count = disarm();
        if (count <= n) {
            CHECK(st == GEIST_OK);
            break;
        }
        if (st == GEIST_OK && absorbed) {
            n_absorbed++;
        } else if (st != GEIST_ERR_OUT_OF_MEMORY) {
            char msg[600];
            geist_last_error(msg, sizeof msg);
            printf("FAIL walk %s: allocation %ld of %ld failed but the status is %s (%s)\n",
                   name, n, count, geist_status_name(st), msg);
            g_failures++;
        }
    }
    printf("walk %-22s %5ld allocation indices, %3d new allocation sites", name, n,
           atomic_load(&g_n_sites) - sites0);
    if (absorbed) printf(", %ld absorbed (finished OK)", n_absorbed);
    printf("\n");
    g_total += n;
}
static void walk(const char *name, body_fn body, void *ctx) { walk_ex(name, body, ctx, false); }

/* ---- entry points ---------------------------------------------------------------------------- */

typedef struct ctx {
    geist_engine *engine;
    const void *data;
    size_t size;
    const char *path;
    geist_model *model;
    geist_session *session;
    geist_prefix *prefix;
    uint8_t *image;
    size_t image_n;
    const char *tmpl;
} ctx;

static geist_status do_load_memory(void *p, bool *x) {
    (void)x;
    ctx *c = p;
    geist_model *m = (geist_model *)(uintptr_t)1;
    geist_status st = geist_model_load_memory(c->engine, c->data, c->size, NULL, &m);
    if (st == GEIST_OK) geist_model_free(m);
    else CHECK(m == (geist_model *)(uintptr_t)1);
    return st;
}

static geist_status do_load_file(void *p, bool *x) {
    (void)x;
    ctx *c = p;
    geist_model *m = (geist_model *)(uintptr_t)1;
    geist_status st = geist_model_load_file(c->engine, c->path, NULL, &m);
    if (st == GEIST_OK) geist_model_free(m);
    else CHECK(m == (geist_model *)(uintptr_t)1);
    return st;
}

static geist_status do_session_create(void *p, bool *x) {
    (void)x;
    ctx *c = p;
    geist_session_options so;
    geist_session_options_default(&so);
    so.max_seq_len = 40;
    so.kv_mode = GEIST_KV_KIVI2;
    geist_session *s = (geist_session *)(uintptr_t)1;
    geist_status st = geist_session_create(c->model, &so, &s);
    if (st == GEIST_OK) geist_session_free(s);
    else CHECK(s == (geist_session *)(uintptr_t)1);
    return st;
}

static const int32_t k_ids[8] = {5, 17, 42, 99, 7, 250, 3, 64};

static geist_status do_prefix_create(void *p, bool *x) {
    (void)x;
    ctx *c = p;
    geist_prefix *pf = (geist_prefix *)(uintptr_t)1;
    geist_status st = geist_prefix_create(c->model, k_ids, 4, GEIST_KV_INT8, &pf);
    if (st == GEIST_OK) {
        geist_session_options so;
        geist_session_options_default(&so);
        so.max_seq_len = 16;
        geist_session *s = NULL;
        st = geist_session_create_with_prefix(c->model, pf, &so, &s);
        if (st == GEIST_OK) {
            st = geist_session_prefill(s, k_ids + 4, 2);
            geist_session_free(s);
        }
        geist_prefix_free(pf);
    } else {
        CHECK(pf == (geist_prefix *)(uintptr_t)1);
    }
    return st;
}

static uint8_t *snap_plain(geist_session *s, size_t *n) {
    size_t need = 0;
    geist_session_snapshot(s, NULL, 0, &need);
    uint8_t *b = malloc(need);
    if (!b || geist_session_snapshot(s, b, need, n) != GEIST_OK) exit(3);
    return b;
}

static geist_status do_snapshot_restore(void *p, bool *x) {
    (void)x;
    ctx *c = p;
    size_t need = 0;
    geist_status st = geist_session_snapshot(c->session, NULL, 0, &need);
    if (st != GEIST_ERR_BUFFER_TOO_SMALL) return st;
    uint8_t *img = malloc(need);
    if (!img) return GEIST_ERR_OUT_OF_MEMORY; /* the test's own buffer (counted too) */
    st = geist_session_snapshot(c->session, img, need, &need);
    if (st == GEIST_OK) st = geist_session_restore(c->session, c->image, c->image_n);
    if (st == GEIST_OK) {
        geist_session *f = (geist_session *)(uintptr_t)1;
        st = geist_session_fork(c->session, &f);
        if (st == GEIST_OK) geist_session_free(f);
        else CHECK(f == (geist_session *)(uintptr_t)1);
    }
    free(img);
    return st;
}

static geist_status do_tokenize(void *p, bool *x) {
    (void)x;
    ctx *c = p;
    static const char text[] = "<|im_start|>user\nGrüße, traveller! 世界 \xff <|im_end|>";
    int32_t ids[128];
    size_t n = 12345;
    geist_status st = geist_tokenize(c->model, text, sizeof text - 1,
                                     GEIST_TOKENIZE_PARSE_SPECIAL | GEIST_TOKENIZE_ADD_SPECIAL,
                                     ids, 128, &n);
    if (st != GEIST_OK) {
        CHECK(n == 12345);
        return st;
    }
    char out[512];
    size_t len;
    st = geist_detokenize(c->model, ids, n, GEIST_DETOKENIZE_RENDER_SPECIAL, out, sizeof out,
                          &len);
    if (st != GEIST_OK) return st;
    geist_detokenizer *d = (geist_detokenizer *)(uintptr_t)1;
    st = geist_detokenizer_create(c->model, 0, &d);
    if (st != GEIST_OK) {
        CHECK(d == (geist_detokenizer *)(uintptr_t)1);
        return st;
    }
    for (size_t i = 0; i < n && st == GEIST_OK; i++)
        st = geist_detokenizer_push(d, ids[i], out, sizeof out, &len);
    if (st == GEIST_OK) st = geist_detokenizer_flush(d, out, sizeof out, &len);
    geist_detokenizer_free(d);
    return st;
}

static geist_status do_template(void *p, bool *x) {
    (void)x;
    ctx *c = p;
    geist_chat_message msgs[3] = {{"system", "You are Mira."}, {"user", "Hello!"},
                                  {"assistant", "Welcome."}};
    char out[4096];
    size_t need = 777;
    geist_status st = geist_chat_apply_template(c->model, c->tmpl, msgs, 3, 1, out, sizeof out,
                                                &need);
    if (st != GEIST_OK) CHECK(need == 777);
    return st;
}

static geist_status do_submit(void *p, bool *x) {
    (void)x;
    ctx *c = p;
    geist_session_reset(c->session);
    geist_chat_message msgs[2] = {{"system", "You are Mira."}, {"user", "Hello!"}};
    geist_request r;
    geist_request_default(&r);
    r.messages = msgs;
    r.n_messages = 2;
    r.max_tokens = 3;
    r.sampler.temperature = 0.0f;
    static const char *const stop[] = {"zzz"};
    r.stop = stop;
    r.n_stop = 1;
    uint64_t id = 0;
    geist_status st = geist_submit(c->engine, c->session, &r, &id);
    if (st != GEIST_OK) return st;
    int ends = 0;
    geist_status end_status = GEIST_OK;
    for (int tries = 0; tries < 200 && ends == 0; tries++) {
        geist_event ev[16];
        size_t k = geist_poll(c->engine, ev, 16, 100);
        for (size_t i = 0; i < k; i++) {
            if (ev[i].request_id != id) continue;
            if (ev[i].type == GEIST_EVENT_FINISHED) ends++;
            if (ev[i].type == GEIST_EVENT_FAILED) {
                ends++;
                end_status = (geist_status)ev[i].status;
            }
        }
    }
    CHECK(ends == 1);
    if (ends == 0) return GEIST_ERR_INTERNAL;
    /* a short extra poll: no second end event */
    geist_event ev[16];
    size_t k = geist_poll(c->engine, ev, 16, 0);
    for (size_t i = 0; i < k; i++) CHECK(ev[i].type == GEIST_EVENT_TOKEN || ev[i].request_id != id);
    CHECK(geist_session_n_past(c->session) <= geist_session_max_seq_len(c->session));
    return end_status;
}

/* ---- main ------------------------------------------------------------------------------------ */

static void block_count_file(ctx *c) {
    /* issue 20: the fixture with llama.block_count = 13,172,737 */
    uint8_t *bad = malloc(c->size);
    memcpy(bad, c->data, c->size);
    static const char key[] = "llama.block_count";
    uint8_t *at = NULL;
    for (size_t i = 0; i + sizeof key + 12 < c->size; i++)
        if (memcmp(bad + i, key, sizeof key - 1) == 0) {
            at = bad + i + sizeof key - 1;
            break;
        }
    if (!at) exit(4);
    uint32_t vt, v = 13172737u;
    memcpy(&vt, at, 4);
    CHECK(vt == 4); /* uint32 */
    memcpy(at + 4, &v, 4);
    geist_model *m = NULL;
    arm(-1);
    geist_status st = geist_model_load_memory(c->engine, bad, c->size, NULL, &m);
    const long count = disarm();
    char msg[600];
    geist_last_error(msg, sizeof msg);
    g_walk = "block_count";
    CHECK(st == GEIST_ERR_BAD_FORMAT && strstr(msg, "block_count"));
    CHECK(atomic_load(&g_max_one) < (1u << 20) && atomic_load(&g_bytes) < (4u << 20));
    printf("block_count 13172737: %s in %ld allocations, %zu bytes (largest %zu): %s\n",
           geist_status_name(st), count, atomic_load(&g_bytes), atomic_load(&g_max_one), msg);
    free(bad);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        printf("usage: %s LLAMA_FIXTURE.gguf GEMMA3_FIXTURE.gguf SMOLLM2.gguf\n", argv[0]);
        return 2;
    }
    geist_engine_options eo;
    geist_engine_options_default(&eo);
    eo.backend = "cpu_scalar";
    eo.n_threads = 1;
    ctx c = {0};
    if (geist_engine_create(&eo, &c.engine)) return 3;

    for (int k = 1; k <= 2; k++) {
        void *data = read_file(argv[k], &c.size);
        c.data = data;
        c.path = argv[k];
        walk(k == 1 ? "load_memory(llama)" : "load_memory(gemma3)", do_load_memory, &c);
        walk(k == 1 ? "load_file(llama)" : "load_file(gemma3)", do_load_file, &c);
        if (k == 1) block_count_file(&c);
        if (geist_model_load_memory(c.engine, c.data, c.size, NULL, &c.model)) return 3;
        walk("session_create", do_session_create, &c);
        walk("prefix_create+prefill", do_prefix_create, &c);
        geist_session_options so;
        geist_session_options_default(&so);
        so.max_seq_len = 48;
        so.kv_mode = k == 1 ? GEIST_KV_INT4 : GEIST_KV_KIVI2;
        if (geist_session_create(c.model, &so, &c.session)) return 3;
        if (geist_session_prefill(c.session, k_ids, 8)) return 3;
        c.image = snap_plain(c.session, &c.image_n);
        walk("snapshot+restore+fork", do_snapshot_restore, &c);
        walk_ex("submit+poll", do_submit, &c, true);
        free(c.image);
        geist_session_free(c.session);
        geist_model_free(c.model);
        free(data);
    }
    /* the real SmolLM2 tokenizer and chat template */
    if (geist_model_load_file(c.engine, argv[3], NULL, &c.model)) return 3;
    walk("tokenize+detokenize", do_tokenize, &c);
    c.tmpl = NULL;
    walk("chat_template(model)", do_template, &c);
    geist_model_free(c.model);
    geist_engine_free(c.engine);
    printf("%ld allocation indices walked, %d distinct allocation call sites failed; %s\n",
           g_total, atomic_load(&g_n_sites),
           g_failures ? "FAILURES" : "all checks passed");
    return g_failures ? 1 : 0;
}
