/* geist_session_estimate: what geist_session_create would allocate, from the model's geometry
 * alone (the same formulas as session.c; nothing is allocated). */
#include <string.h>

#include "../session/kv.h"
#include "../session/session.h"

geist_status geist_session_estimate(const geist_model *model, const geist_session_options *opts,
                                    geist_memory_report *out) {
    if (!model || !out) {
        gt_set_thread_error("model and out must not be NULL");
        return GEIST_ERR_INVALID_ARGUMENT;
    }
    geist_session_options o;
    geist_session_options_default(&o);
    if (opts) {
        o.max_seq_len = opts->max_seq_len;
        o.kv_mode = opts->kv_mode;
    }
    const gt_config *c = &model->cfg;
    if (o.max_seq_len < 1 || o.max_seq_len > c->n_ctx_train || !gt_kv_mode_valid(o.kv_mode)) {
        gt_set_thread_error(o.max_seq_len < 1 || o.max_seq_len > c->n_ctx_train
                                ? "max_seq_len is out of range (1..the model's context length)"
                                : "unknown kv_mode (0 = F32, 1 = F16, 2 = INT8, 3 = INT4, 4 = KIVI2)");
        return GEIST_ERR_INVALID_ARGUMENT;
    }
    gt_kv_geom g;
    gt_kv_geom_init(&g, c, o.kv_mode);
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    for (int32_t il = 0; il < c->n_layer; il++) {
        bool ring = false;
        const int32_t rows =
            gt_kv_layer_rows(&g, model->layers[il].sliding, c->sliding_window, o.max_seq_len, &ring);
        out->kv_cache += gt_kv_layer_bytes(&g, rows);
    }
    out->scratch = (uint64_t)c->n_vocab * sizeof(float);
    out->other = sizeof(struct geist_session) + (uint64_t)c->n_layer * sizeof(gt_kv_layer) +
                 (uint64_t)o.max_seq_len * sizeof(int32_t);
    return GEIST_OK;
}
