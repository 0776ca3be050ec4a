/* gd_snapshot.c — the save format of GeistSession.snapshot() / GeistNPC.save_memory(): the
 * transcript and system prompt (which the core's image does not hold) around the core's session
 * image (geist_session_snapshot: KV, token ids, logits, seed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_classes.h"

/* Snapshot bytes: magic (with version), vocab size, max_seq_len, token ids, transcript, system
 * prompt, then the core's session image (geist_session_snapshot: KV, logits, seed). Restoring
 * uses the image; if the core refuses it (another KV mode, ...) the token ids are run again. */
#define SNAP_MAGIC "GEISTSN2"
typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} wbuf;
static void wb_put(wbuf *b, const void *d, size_t n) {
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t nc = (b->n + n) * 2 + 256;
        uint8_t *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void wb_u32(wbuf *b, uint32_t v) { wb_put(b, &v, 4); }
static void wb_str(wbuf *b, const char *s) {
    uint32_t n = (uint32_t)strlen(s ? s : "");
    wb_u32(b, n);
    wb_put(b, s ? s : "", n);
}

void ms_snapshot(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    (void)a;
    (void)n;
    gsession *s = self;
    gopq pba;
    memset(&pba, 0, sizeof pba);
    GD.variant_get_ptr_constructor(T_BYTES, 0)(&pba, NULL);
    if (!s->rs || s->busy) {
        sess_set_error(s, E_BUSY, "snapshot(): the session is busy or has no model");
        gv_from_builtin(ret, T_BYTES, &pba);
        GD.variant_get_ptr_destructor(T_BYTES)(&pba);
        return;
    }
    geist_session *gs = gr_sess_session(s->rs);
    size_t nh = (size_t)geist_session_n_past(gs);
    int32_t *h = malloc((nh ? nh : 1) * sizeof *h);
    if (!h || geist_session_tokens(gs, h, nh, &nh) != GEIST_OK)
        nh = 0;
    wbuf b = {0};
    wb_put(&b, SNAP_MAGIC, 8);
    wb_u32(&b, (uint32_t)geist_model_n_vocab(s->model->m));
    wb_u32(&b, (uint32_t)s->max_seq_len);
    wb_u32(&b, (uint32_t)nh);
    wb_put(&b, h, nh * sizeof *h);
    free(h);
    wb_u32(&b, (uint32_t)s->n_msgs);
    for (size_t i = 0; i < s->n_msgs; i++) {
        wb_str(&b, s->msgs[i].role);
        wb_str(&b, s->msgs[i].content);
    }
    wb_str(&b, s->system);
    size_t img_n = 0;
    uint8_t *img = NULL;
    if (geist_session_snapshot(gs, NULL, 0, &img_n) == GEIST_ERR_BUFFER_TOO_SMALL &&
        (img = malloc(img_n)) != NULL &&
        geist_session_snapshot(gs, img, img_n, &img_n) == GEIST_OK) {
        uint64_t n64 = img_n;
        wb_put(&b, &n64, 8);
        wb_put(&b, img, img_n);
    } else {
        uint64_t zero = 0;
        wb_put(&b, &zero, 8);
    }
    free(img);
    gv_from_builtin(ret, T_BYTES, &pba);
    GD.variant_get_ptr_destructor(T_BYTES)(&pba);
    if (!b.oom) {
        /* resize the PackedByteArray through its Variant, then fill it in place */
        gopq m = gd_sn("resize");
        gvar arg, r;
        gv_int(&arg, (int64_t)b.n);
        const GDExtensionConstVariantPtr args[1] = {&arg};
        GDExtensionCallError ce;
        GD.variant_call(ret, &m, args, 1, &r, &ce);
        gd_sn_free(&m);
        gv_free(&arg);
        if (ce.error == GDEXTENSION_CALL_OK) {
            gv_free(&r);
            gopq out;
            memset(&out, 0, sizeof out);
            GD.get_variant_to_type_constructor(T_BYTES)(&out, ret);
            uint8_t *dst = GD.packed_byte_array_operator_index(&out, 0);
            if (dst)
                memcpy(dst, b.p, b.n);
            gv_free(ret);
            gv_from_builtin(ret, T_BYTES, &out);
            GD.variant_get_ptr_destructor(T_BYTES)(&out);
        }
    }
    free(b.p);
}

typedef struct rbuf {
    const uint8_t *p;
    size_t n, off;
    int bad;
} rbuf;
static uint32_t rb_u32(rbuf *b) {
    uint32_t v = 0;
    if (b->off + 4 > b->n) {
        b->bad = 1;
        return 0;
    }
    memcpy(&v, b->p + b->off, 4);
    b->off += 4;
    return v;
}
char *rb_str(rbuf *b) {
    uint32_t n = rb_u32(b);
    if (b->bad || n > b->n - b->off) {
        b->bad = 1;
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (!s) {
        b->bad = 1;
        return NULL;
    }
    memcpy(s, b->p + b->off, n);
    s[n] = 0;
    b->off += n;
    return s;
}

int session_restore_bytes(gsession *s, const gvar *v, const char *expect_system) {
    if (!s->rs) {
        sess_set_error(s, E_UNCONFIGURED, "restore(): the session has no model");
        return E_UNCONFIGURED;
    }
    if (s->busy) {
        sess_set_error(s, E_BUSY, "restore(): a request is running");
        return E_BUSY;
    }
    if (gv_type(v) != T_BYTES) {
        sess_set_error(s, E_INVALID_PARAM, "restore() needs a PackedByteArray");
        return E_INVALID_PARAM;
    }
    gopq pba;
    memset(&pba, 0, sizeof pba);
    GD.get_variant_to_type_constructor(T_BYTES)(&pba, (GDExtensionVariantPtr)v);
    int64_t size = gv_size(v);
    rbuf b = {size > 0 ? GD.packed_byte_array_operator_index_const(&pba, 0) : NULL,
              size > 0 ? (size_t)size : 0, 0, 0};
    int rc = E_OK;
    const char *why = NULL;
    int32_t *ids = NULL;
    uint32_t nh = 0;
    const uint8_t *img = NULL;
    size_t img_n = 0;
    if (b.n < 8 || memcmp(b.p, SNAP_MAGIC, 8) != 0) {
        why = "restore(): not a geist session snapshot";
    } else {
        b.off = 8;
        uint32_t nv = rb_u32(&b);
        rb_u32(&b); /* max_seq_len of the saving session (informative) */
        nh = rb_u32(&b);
        if (b.bad || nv != (uint32_t)geist_model_n_vocab(s->model->m))
            why = "restore(): the snapshot was made with another model";
        else if ((int64_t)nh > s->max_seq_len)
            why = "restore(): the snapshot holds more tokens than this session's max_seq_len";
        else if ((size_t)nh * 4 > b.n - b.off)
            why = "restore(): the snapshot is truncated";
        if (!why) {
            ids = malloc(((size_t)nh + 1) * sizeof *ids);
            if (!ids)
                why = "restore(): out of memory";
            else {
                memcpy(ids, b.p + b.off, (size_t)nh * 4);
                b.off += (size_t)nh * 4;
            }
        }
    }
    gsession tmp; /* parse the transcript before touching the session */
    memset(&tmp, 0, sizeof tmp);
    if (!why) {
        uint32_t nm = rb_u32(&b);
        for (uint32_t i = 0; i < nm && !b.bad; i++) {
            char *r = rb_str(&b), *c = rb_str(&b);
            if (r && c)
                transcript_add(&tmp, r, c);
            free(r);
            free(c);
        }
        tmp.system = rb_str(&b);
        if (!b.bad && b.off + 8 <= b.n) {
            uint64_t n64 = 0;
            memcpy(&n64, b.p + b.off, 8);
            b.off += 8;
            if (n64 > b.n - b.off)
                b.bad = 1;
            else if (n64 > 0) {
                img = b.p + b.off;
                img_n = (size_t)n64;
            }
        }
        if (b.bad)
            why = "restore(): the snapshot is truncated or corrupt";
        else if (expect_system && strcmp(expect_system, tmp.system ? tmp.system : "") != 0)
            why = "load_memory(): the save was made for another persona (set the NPC's persona "
                  "to the saved one, or reset() to start anew)";
    }
    if (why) {
        GD.variant_get_ptr_destructor(T_BYTES)(&pba);
        transcript_clear(&tmp);
        free(tmp.msgs);
        free(tmp.system);
        free(ids);
        sess_set_error(s, E_INVALID_DATA, why);
        return E_INVALID_DATA;
    }
    free(ids); /* informative: the image holds them; without one the conversation is run again */
    /* the core's image restores the KV as it was; if it is refused the session starts empty and
     * the next turn runs the whole restored conversation */
    geist_status st = gr_sess_restore(ENG->rt, s->rs, img, img_n, &s->restored_image);
    GD.variant_get_ptr_destructor(T_BYTES)(&pba);
    if (st != GEIST_OK) {
        transcript_clear(&tmp);
        free(tmp.msgs);
        free(tmp.system);
        sess_set_error(s, err_of(st), "restore(): a request is running");
        return err_of(st);
    }
    transcript_clear(s);
    free(s->msgs);
    free(s->system);
    sess_set_error(s, E_OK, "");
    s->msgs = tmp.msgs;
    s->n_msgs = tmp.n_msgs;
    s->cap_msgs = tmp.cap_msgs;
    s->system = tmp.system;
    return rc;
}

void ms_restore(void *self, const GDExtensionConstVariantPtr *a, int64_t n, gvar *ret) {
    gsession *s = self;
    if (n < 1) {
        gv_int(ret, E_INVALID_PARAM);
        return;
    }
    gv_int(ret, session_restore_bytes(s, a[0], NULL));
}
