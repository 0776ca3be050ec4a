/* The engine and model calls of geist.h: loading (memory or file), info, accounting, errors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/model.h"
#include "../util/pool.h"
#include "../runtime/runtime.h"
#include "../grammar/grammar.h"
#include "../tokenizer/tokenizer.h"
#include "../util/ggml_types.h"
#include "../util/platform.h"

#define GEIST_VERSION_STRING "0.1.0"

const char *geist_version(void) { return GEIST_VERSION_STRING; }

const char *geist_status_name(geist_status st) {
    switch (st) {
    case GEIST_OK: return "GEIST_OK";
    case GEIST_ERR_INVALID_ARGUMENT: return "GEIST_ERR_INVALID_ARGUMENT";
    case GEIST_ERR_OUT_OF_MEMORY: return "GEIST_ERR_OUT_OF_MEMORY";
    case GEIST_ERR_IO: return "GEIST_ERR_IO";
    case GEIST_ERR_BAD_FORMAT: return "GEIST_ERR_BAD_FORMAT";
    case GEIST_ERR_UNSUPPORTED: return "GEIST_ERR_UNSUPPORTED";
    case GEIST_ERR_CAPACITY: return "GEIST_ERR_CAPACITY";
    case GEIST_ERR_STATE: return "GEIST_ERR_STATE";
    case GEIST_ERR_BUFFER_TOO_SMALL: return "GEIST_ERR_BUFFER_TOO_SMALL";
    case GEIST_ERR_INTERNAL: return "GEIST_ERR_INTERNAL";
    }
    return "GEIST_ERR_UNKNOWN";
}

size_t geist_last_error(char *buf, size_t cap) { return gt_copy_message(gt_thread_error(), buf, cap); }

/* ------------------------------------------------------------------------------------------- */
/* Engine */

void geist_engine_options_default(geist_engine_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

geist_status geist_engine_create(const geist_engine_options *opts, geist_engine **out) {
    if (!out) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "out must not be NULL");
    geist_engine_options o;
    geist_engine_options_default(&o);
    if (opts) {
        if (opts->struct_size < sizeof o)
            return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "engine options: struct_size too small");
        o = *opts;
    }
    const gt_backend *be = gt_backend_find(o.backend);
    if (!be)
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "unknown backend '%s' (available: %s)",
                           o.backend ? o.backend : "auto", gt_backend_names());
    if (!be->available())
        return gt_thread_fail(GEIST_ERR_UNSUPPORTED, "backend '%s' is not usable on this machine",
                           be->name);
    if (o.n_threads < 0)
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "n_threads must be >= 0 (0 = default)");
    if (o.activations == GEIST_ACTIVATIONS_F32) {
        if (strcmp(be->name, "cpu_scalar") != 0)
            return gt_thread_fail(GEIST_ERR_UNSUPPORTED,
                               "exact float activations are offered by cpu_scalar only, not '%s'",
                               be->name);
        be = gt_backend_cpu_scalar_exact();
    } else if (o.activations != GEIST_ACTIVATIONS_Q8) {
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "unknown activations mode %d", o.activations);
    }
    if (o.device_flags & ~(uint32_t)(GEIST_DEVICE_NO_IMPORT | GEIST_DEVICE_PROFILE |
                                     GEIST_DEVICE_INT_DOT | GEIST_DEVICE_NO_INT_DOT |
                                     GEIST_DEVICE_ATTN_PER_HEAD | GEIST_DEVICE_FAST))
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "unknown device_flags 0x%x", o.device_flags);
    if ((o.device_flags & GEIST_DEVICE_INT_DOT) && (o.device_flags & GEIST_DEVICE_NO_INT_DOT))
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT,
                              "device_flags: GEIST_DEVICE_INT_DOT and GEIST_DEVICE_NO_INT_DOT "
                              "contradict each other");
    if (o.device_attn_chunk < GEIST_DEVICE_ATTN_EXACT ||
        o.device_attn_chunk > GEIST_DEVICE_ATTN_CHUNK_MAX)
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT,
                              "device_attn_chunk must be 0 (the device's choice), -1 (never split: "
                              "cpu_scalar's order) or 1..%d (positions per chunk)",
                              GEIST_DEVICE_ATTN_CHUNK_MAX);
    void *dev_ctx = NULL;
    if (be->device) {
        const gt_dev_options dopt = {o.device, o.vulkan_loader, o.device_memory_limit,
                                     (o.device_flags & GEIST_DEVICE_NO_IMPORT) != 0,
                                     o.device_attn_chunk,
                                     (o.device_flags & GEIST_DEVICE_PROFILE) != 0,
                                     (o.device_flags & GEIST_DEVICE_INT_DOT)      ? 1
                                     : (o.device_flags & GEIST_DEVICE_NO_INT_DOT) ? -1
                                                                                  : 0,
                                     (o.device_flags & GEIST_DEVICE_ATTN_PER_HEAD) != 0,
                                     (o.device_flags & GEIST_DEVICE_FAST) != 0};
        gt_err err = {0};
        if (be->device->engine_init(&dopt, &dev_ctx, &err) != GEIST_OK) {
            gt_set_thread_error(err.msg);
            return err.status;
        }
    }
    geist_engine *e = calloc(1, sizeof *e);
    if (!e) {
        if (dev_ctx) be->device->engine_free(dev_ctx);
        return gt_thread_fail(GEIST_ERR_OUT_OF_MEMORY, "out of memory (engine)");
    }
    atomic_init(&e->refs, 1);
    e->backend = be;
    e->dev_ctx = dev_ctx;
    if (dev_ctx) {
        gt_dev_probe p;
        be->device->probe(dev_ctx, &p);
        memcpy(e->device_name, p.name, sizeof e->device_name);
        e->device_name[sizeof e->device_name - 1] = '\0';
    }
    if (o.n_threads == 0) {
        const int32_t n = gt_cpu_count();
        o.n_threads = n > 1 ? n - 1 : 1;
    }
    e->n_threads = o.n_threads;
    e->pool = gt_pool_create(e->n_threads);
    e->runtime = e->pool ? gt_runtime_create(e) : NULL;
    if (!e->runtime) {
        gt_pool_free(e->pool);
        if (dev_ctx) be->device->engine_free(dev_ctx);
        free(e);
        return gt_thread_fail(GEIST_ERR_OUT_OF_MEMORY, "cannot start %d worker threads", (int)o.n_threads);
    }
    *out = e;
    gt_clear_thread_error();
    return GEIST_OK;
}

void geist_engine_free(geist_engine *e) {
    if (!e) return;
    /* the runtime stops now (its thread uses the pool; running requests end); the pool and the
     * struct live on while models of this engine do */
    gt_runtime *rt = e->runtime;
    e->runtime = NULL;
    gt_runtime_free(rt);
    gt_engine_release(e);
}

const char *geist_engine_backend_name(const geist_engine *e) { return e ? e->backend->name : ""; }

const char *geist_engine_device_name(const geist_engine *e) {
    return e ? e->device_name : "";
}

const char *geist_backends_available(void) { return gt_backend_names(); }

/* ------------------------------------------------------------------------------------------- */
/* Model */

size_t geist_model_error(geist_model *m, char *buf, size_t cap) {
    if (!m) return 0;
    pthread_mutex_lock(&m->err_lock);
    size_t len = gt_copy_message(m->last_err.msg, buf, cap);
    pthread_mutex_unlock(&m->err_lock);
    return len;
}

void geist_load_options_default(geist_load_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

/* The device holds its own copy of a mapped file's tensors: the host's pages of them go (the
 * mapping stays for the metadata, which is read in place). */
static void drop_tensor_pages(geist_model *m) {
    if (!m->map || m->gguf.data_offset >= m->map_size) return;
    gt_release_mapped_pages((uint8_t *)m->map + m->gguf.data_offset,
                            m->map_size - (size_t)m->gguf.data_offset);
}

static geist_status load_span(geist_engine *engine, const void *data, size_t size, void *map,
                              const geist_load_options *opts, geist_model **out) {
    gt_err err = {0};
    if (opts && opts->struct_size < sizeof(geist_load_options))
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "load options: struct_size too small");
    if (opts && opts->flags != 0)
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "load options: unknown flags 0x%x", opts->flags);
    geist_model *m = NULL;
    geist_status st = gt_model_create(engine, data, size, map, &m, &err);
    if (!st) {
        m->tokenizer_free = gt_tokenizer_free; /* the model frees what it was given */
        st = gt_tokenizer_create(&m->gguf, &m->tokenizer, &err);
        /* every id the tokenizer can give must have an embedding row (and a logit) */
        if (!st && m->tokenizer && gt_tokenizer_n_vocab(m->tokenizer) > m->cfg.n_vocab)
            st = gt_fail(&err, GEIST_ERR_BAD_FORMAT,
                         "tokenizer.ggml.tokens has %d tokens but token_embd.weight has %d rows",
                         (int)gt_tokenizer_n_vocab(m->tokenizer), (int)m->cfg.n_vocab);
        if (!st && m->tokenizer) {
            m->grammar_cache_free = gt_grammar_cache_free;
            st = gt_grammar_cache_create(m->tokenizer, m->cfg.n_vocab, &m->grammar_cache, &err);
        }
        if (!st && m->backend->device) {
            bool drop = false;
            st = m->backend->device->model_init(engine->dev_ctx, m, map != NULL, &m->dev, &drop,
                                                &err);
            if (!st && drop) drop_tensor_pages(m);
        }
        if (st) {
            m->map = NULL; /* the caller unmaps on failure */
            gt_model_release(m);
        }
    }
    if (st) {
        gt_set_thread_error(err.msg);
        return st;
    }
    *out = m;
    gt_clear_thread_error();
    return GEIST_OK;
}

geist_status geist_model_load_memory(geist_engine *engine, const void *data, size_t size,
                                     const geist_load_options *opts, geist_model **out) {
    if (!engine || !out) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "engine and out must not be NULL");
    if (!data && size > 0) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "data is NULL");
    return load_span(engine, data, size, NULL, opts, out);
}

geist_status geist_model_load_file(geist_engine *engine, const char *path,
                                   const geist_load_options *opts, geist_model **out) {
    if (!engine || !out || !path)
        return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "engine, path and out must not be NULL");
    void *map = NULL;
    size_t size = 0;
    char why[GT_ERR_CAP];
    const gt_map_result mr = gt_map_file(path, &map, &size, why, sizeof why);
    if (mr != GT_MAP_OK)
        return gt_thread_fail(mr == GT_MAP_EMPTY ? GEIST_ERR_BAD_FORMAT : GEIST_ERR_IO, "%s", why);
    geist_status st = load_span(engine, map, size, map, opts, out);
    if (st) gt_unmap_file(map, size);
    return st;
}

void geist_model_free(geist_model *m) {
    if (m) gt_model_release(m); /* destroyed now, or when its last session goes */
}

int32_t geist_model_n_vocab(const geist_model *m) { return m ? m->cfg.n_vocab : 0; }
int32_t geist_model_n_ctx_train(const geist_model *m) { return m ? m->cfg.n_ctx_train : 0; }

geist_status geist_model_memory(const geist_model *m, geist_memory_report *out) {
    if (!m || !out) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "model and out must not be NULL");
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->weights_aliased = m->weight_bytes;
    out->weights_owned = m->owned_weight_bytes;
    out->metadata = gt_gguf_owned_bytes(&m->gguf);
    out->tokenizer = gt_tokenizer_owned_bytes(m->tokenizer);
    out->rope_tables = 2 * (uint64_t)(m->cfg.n_rot / 2) * sizeof(float);
    out->other = sizeof *m + (uint64_t)m->cfg.n_layer * sizeof(gt_layer);
    out->mapped_file = m->map_size;
    if (m->dev && m->backend->device) {
        gt_dev_memory d;
        m->backend->device->memory(m->dev, &d);
        out->weights_aliased = d.imported ? m->weight_bytes : 0;
        out->weights_owned = 0;
        out->other += d.host_owned;
        out->device_local = d.device_local;
        out->imported = d.imported;
        out->staging = d.staging;
    }
    return GEIST_OK;
}

_Static_assert(GEIST_DEVICE_ROLES <= sizeof ((geist_device_stats *)0)->role_ns / sizeof(uint64_t),
               "geist_device_stats holds every role");

geist_status geist_model_device_stats(const geist_model *m, geist_device_stats *out) {
    if (!m || !out) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "model and out must not be NULL");
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    if (m->dev && m->backend->device && m->backend->device->stats) {
        gt_dev_stats d;
        m->backend->device->stats(m->dev, &d);
        out->passes = d.passes;
        out->rows = d.rows;
        out->logit_rows = d.logit_rows;
        out->dispatches = d.dispatches;
        out->barriers = d.barriers;
        out->recorded = d.recorded;
        out->plan_ns = d.plan_ns;
        out->record_ns = d.record_ns;
        out->wait_ns = d.wait_ns;
        out->readback_ns = d.readback_ns;
        out->gpu_ns = d.gpu_ns;
        out->gpu_timed = d.gpu_timed;
        out->id_rows = d.id_rows;
        out->fused_fma = d.fused_fma;
        out->fast_attn_rows = d.fast_attn_rows;
        out->fast_rows = d.fast_rows;
        out->planned = d.planned;
        for (int r = 0; r < GEIST_DEVICE_ROLES; r++) {
            out->role_ns[r] = d.role_ns[r];
            out->role_calls[r] = d.role_calls[r];
        }
    }
    return GEIST_OK;
}

/* A tiny appender for JSON text that tracks the needed length even past the buffer. */
typedef struct sbuf {
    char *buf;
    size_t cap, len;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) GT_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->len < b->cap ? b->cap - b->len : 0;
    int n = vsnprintf(room ? b->buf + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

/* Appends s as a JSON string literal (escaping quotes, backslashes and control bytes). */
static void sb_json_str(sbuf *b, const char *s, size_t n) {
    sb_printf(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') sb_printf(b, "\\%c", ch);
        else if (ch < 0x20) sb_printf(b, "\\u%04x", ch);
        else sb_printf(b, "%c", ch);
    }
    sb_printf(b, "\"");
}

static geist_status finish_buffer(sbuf *b, size_t *needed) {
    if (needed) *needed = b->len + 1;
    if (b->cap > 0 && b->buf) b->buf[b->len < b->cap ? b->len : b->cap - 1] = '\0';
    if (b->len + 1 > b->cap)
        return gt_thread_fail(GEIST_ERR_BUFFER_TOO_SMALL, "buffer of %zu bytes is too small (%zu needed)",
                           b->cap, b->len + 1);
    return GEIST_OK;
}

geist_status geist_model_info_json(const geist_model *m, char *buf, size_t cap, size_t *needed) {
    if (!m) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "model must not be NULL");
    const gt_config *c = &m->cfg;
    sbuf b = {buf, buf ? cap : 0, 0};
    gt_str name = {"", 0};
    gt_gguf_get_str(&m->gguf, "general.name", &name);
    sb_printf(&b, "{\"architecture\": \"%s\", \"name\": ", c->arch_name);
    sb_json_str(&b, name.ptr, (size_t)name.len);
    sb_printf(&b,
              ", \"backend\": \"%s\", \"gguf_version\": %u, \"n_tensors\": %llu, \"n_kv\": %llu"
              ", \"n_vocab\": %d, \"n_ctx_train\": %d, \"n_layer\": %d, \"d_model\": %d"
              ", \"n_head\": %d, \"n_head_kv\": %d, \"head_dim_k\": %d, \"head_dim_v\": %d"
              ", \"n_ff\": %d, \"n_rot\": %d, \"rope_base\": %.9g, \"rope_base_local\": %.9g"
              ", \"sliding_window\": %d, \"rms_eps\": %.9g, \"file_bytes\": %zu"
              ", \"weight_bytes\": %llu",
              m->backend->name, m->gguf.version, (unsigned long long)m->gguf.n_tensors,
              (unsigned long long)m->gguf.n_kv, c->n_vocab, c->n_ctx_train, c->n_layer,
              c->d_model, c->n_head, c->n_head_kv, c->head_dim_k, c->head_dim_v, c->n_ff,
              c->n_rot, (double)c->rope_base, (double)c->rope_base_local, c->sliding_window,
              (double)c->eps, m->gguf.size, (unsigned long long)m->weight_bytes);
    /* the recipe's particulars (issue 21's architectures) */
    bool biases = false;
    for (int32_t il = 0; il < c->n_layer && !biases; il++)
        biases = m->layers[il].bq.data || m->layers[il].bo.data;
    sb_printf(&b,
              ", \"rope_neox\": %s, \"rope_scale\": %.9g, \"rope_freq_factors\": %s"
              ", \"qk_norm\": %s, \"post_norms\": %s, \"attn_biases\": %s"
              ", \"attn_softcap\": %.9g, \"final_softcap\": %.9g, \"attn_scale\": %.9g"
              ", \"tied_output\": %s",
              c->rope_style == GT_ROPE_NEOX ? "true" : "false",
              (double)(c->rope_scale_global > 0.0f ? 1.0f / c->rope_scale_global : 1.0f),
              c->rope_freq_factors ? "true" : "false", c->qk_norm ? "true" : "false",
              c->post_norms ? "true" : "false", biases ? "true" : "false",
              (double)c->attn_softcap, (double)c->final_softcap, (double)c->attn_scale,
              m->output.data == m->tok_embd.data ? "true" : "false");
    sb_printf(&b, ", \"sliding_layers\": [");
    bool first = true;
    for (int32_t il = 0; il < c->n_layer; il++) {
        if (m->layers[il].sliding) {
            sb_printf(&b, "%s%d", first ? "" : ", ", il);
            first = false;
        }
    }
    sb_printf(&b, "], \"tensor_types\": {");
    first = true;
    for (uint32_t t = 0; t < GT_TYPE_COUNT; t++) {
        uint64_t count = 0;
        for (uint64_t i = 0; i < m->gguf.n_tensors; i++) count += m->gguf.tensors[i].type == t;
        if (count) {
            sb_printf(&b, "%s\"%s\": %llu", first ? "" : ", ", gt_type_get(t)->name,
                      (unsigned long long)count);
            first = false;
        }
    }
    sb_printf(&b, "}, \"has_tokenizer\": %s}", m->tokenizer ? "true" : "false");
    return finish_buffer(&b, needed);
}

geist_status geist_model_meta(const geist_model *m, const char *key, char *buf, size_t cap,
                              size_t *needed) {
    if (!m || !key) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "model and key must not be NULL");
    const gguf_kv *kv = gt_gguf_find_kv(&m->gguf, key);
    if (!kv) return gt_thread_fail(GEIST_ERR_INVALID_ARGUMENT, "metadata key '%s' not found", key);
    sbuf b = {buf, buf ? cap : 0, 0};
    switch (kv->type) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        sb_printf(&b, "%llu", (unsigned long long)kv->v.u);
        break;
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64:
        sb_printf(&b, "%lld", (long long)kv->v.i);
        break;
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64:
        sb_printf(&b, "%.9g", kv->v.f);
        break;
    case GGUF_VT_BOOL:
        sb_printf(&b, "%s", kv->v.b ? "true" : "false");
        break;
    case GGUF_VT_STRING:
        sb_printf(&b, "%.*s", (int)kv->v.s.len, kv->v.s.ptr);
        break;
    default:
        sb_printf(&b, "[array of %llu %s]", (unsigned long long)kv->arr_len,
                  gt_gguf_vtype_name(kv->arr_type));
    }
    return finish_buffer(&b, needed);
}
