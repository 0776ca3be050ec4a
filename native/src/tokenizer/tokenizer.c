/* Tokenizer construction from GGUF metadata, the special-token partition, the encode driver and
 * token pieces. The split rules live in pretokenize.c, the merge algorithms in merge.c. */
#include <stdio.h>
#include <stdlib.h>

#include "tokenizer_internal.h"
#include "unicode.h"

/* ------------------------------------------------------------------------------------------- */
/* Small helpers */

bool gt_buf_reserve(gt_buf *b, size_t bytes) {
    if (bytes <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < bytes) {
        if (cap > SIZE_MAX / 2) {
            cap = bytes;
            break;
        }
        cap *= 2;
    }
    void *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

void gt_work_free(gt_work *w) {
    gt_buf *all[] = {&w->cp_off, &w->cp_flags, &w->bounds_a, &w->bounds_b,
                     &w->word,   &w->sym,      &w->heap,     &w->text};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        free(all[i]->p);
        all[i]->p = NULL;
        all[i]->cap = 0;
    }
}

bool gt_ids_push(gt_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        if (cap > SIZE_MAX / sizeof(int32_t)) return false;
        int32_t *v = realloc(ids->v, cap * sizeof(int32_t));
        if (!v) return false;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return true;
}

void gt_ids_free(gt_ids *ids) {
    if (!ids) return;
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c *= 2;
    return c;
}

/* ------------------------------------------------------------------------------------------- */
/* Hash tables over strings in the span */

int32_t gt_tok_lookup(const gt_tokenizer *t, const uint8_t *s, size_t n) {
    uint64_t h = gt_hash_finish(gt_hash_bytes(GT_HASH_SEED, s, n));
    uint32_t tag = (uint32_t)(h >> 56);
    for (uint64_t i = h & t->tok_mask;; i = (i + 1) & t->tok_mask) {
        uint32_t v = t->tok_slots[i];
        if (!v) return -1;
        if ((v >> 24) != tag) continue;
        uint32_t id = (v & 0xFFFFFFu) - 1;
        gt_str txt = gt_tok_text(t, id);
        if (txt.len == n && memcmp(txt.ptr, s, n) == 0) return (int32_t)id;
    }
}

static gt_str merge_text(const gt_tokenizer *t, uint32_t rank) {
    const uint8_t *rec = t->merge_arr + t->merge_off[rank];
    uint64_t len;
    memcpy(&len, rec, sizeof len);
    gt_str s = {(const char *)rec + 8, len};
    return s;
}

/* The merge string "left right" is hashed as a whole, so a pair hashes the same streamed as
 * left, ' ', right. llama.cpp splits each merge at its first space after position 0; a pair
 * matches only that split. */
int32_t gt_merge_rank(const gt_tokenizer *t, const uint8_t *l, size_t ln, const uint8_t *r,
                      size_t rn) {
    if (!t->merge_slots) return -1;
    static const uint8_t space = ' ';
    uint64_t h = gt_hash_bytes(GT_HASH_SEED, l, ln);
    h = gt_hash_bytes(h, &space, 1);
    h = gt_hash_finish(gt_hash_bytes(h, r, rn));
    uint32_t tag = (uint32_t)(h >> 56);
    for (uint64_t i = h & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        uint32_t v = t->merge_slots[i];
        if (!v) return -1;
        if ((v >> 24) != tag) continue;
        uint32_t rank = (v & 0xFFFFFFu) - 1;
        gt_str m = merge_text(t, rank);
        if (m.len != ln + 1 + rn) continue;
        const uint8_t *mp = (const uint8_t *)m.ptr;
        if (memcmp(mp, l, ln) != 0 || mp[ln] != ' ' || memcmp(mp + ln + 1, r, rn) != 0) continue;
        if (ln > 1 && memchr(mp + 1, ' ', ln - 1)) continue; /* first space is elsewhere */
        return (int32_t)rank;
    }
}

/* ------------------------------------------------------------------------------------------- */
/* Creation */

/* Pre-tokenizer names llama.cpp accepts, grouped by split rules (llama-vocab.cpp). */
typedef struct pre_def {
    const char *names;
    uint32_t n_steps;
    gt_split_step steps[GT_MAX_SPLIT_STEPS];
    bool ignore_merges;
    bool add_bos;  /* default add_bos (metadata overrides) */
    bool no_bos;   /* default BOS id removed */
} pre_def;

static const pre_def k_pre_defs[] = {
    {"|default|", 4,
     {GT_SPLIT_PUNCT_RUNS, GT_SPLIT_GPT2, GT_SPLIT_NUMBER_RUNS, GT_SPLIT_ASCII_DIGIT3}, false,
     false, false},
    {"|llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano|", 1,
     {GT_SPLIT_LLAMA3}, true, true, false},
    {"|dbrx|smaug-bpe|", 1, {GT_SPLIT_LLAMA3}, false, false, false},
    {"|chatglm-bpe|", 1, {GT_SPLIT_LLAMA3}, false, false, true},
    {"|glm4|glm5|", 1, {GT_SPLIT_LLAMA3}, true, false, true},
    /* "gpt2" is not a llama.cpp name ("gpt-2" is); accepted as the same rules */
    {"|gpt-2|gpt2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|"
     "modern-bert|exaone4|mpt|olmo|jais|trillion|granite-docling|jina-v1-en|jina-v2-code|"
     "roberta-bpe|",
     1, {GT_SPLIT_GPT2}, false, false, false},
    {"|qwen2|deepseek-r1-qwen|kormo|f2llmv2|megrez|stablelm2|hunyuan|solar-open|", 1,
     {GT_SPLIT_QWEN2}, false, false, false},
    {"|smollm|starcoder|refact|command-r|codeshell|exaone|minerva-7b|mellum2|", 2,
     {GT_SPLIT_EACH_NUMBER, GT_SPLIT_GPT2}, false, false, false},
};

static const pre_def *find_pre(gt_str name) {
    if (name.len == 0 || name.len > 64) return NULL;
    char key[68];
    key[0] = '|';
    memcpy(key + 1, name.ptr, name.len);
    key[name.len + 1] = '|';
    key[name.len + 2] = '\0';
    if (memchr(name.ptr, '|', name.len) || memchr(name.ptr, '\0', name.len)) return NULL;
    for (size_t i = 0; i < sizeof k_pre_defs / sizeof k_pre_defs[0]; i++)
        if (strstr(k_pre_defs[i].names, key)) return &k_pre_defs[i];
    return NULL;
}

static int32_t find_cstr(const gt_tokenizer *t, const char *s) {
    return gt_tok_lookup(t, (const uint8_t *)s, strlen(s));
}

/* First token (in list order) whose text is in the NULL-terminated list, or -1. llama.cpp takes
 * the first in its hash map's order; list order makes the choice deterministic. */
static int32_t find_first(const gt_tokenizer *t, const char *const *list) {
    for (; *list; list++) {
        int32_t id = find_cstr(t, *list);
        if (id >= 0) return id;
    }
    return -1;
}

static void mark_control(gt_tokenizer *t, int32_t id) {
    if (id >= 0) t->attr[id] |= GT_ATTR_CONTROL;
}

static bool eog_has(const int32_t *eog, uint32_t n, int32_t id) {
    for (uint32_t i = 0; i < n; i++)
        if (eog[i] == id) return true;
    return false;
}

static void eog_add(int32_t *eog, uint32_t *n, int32_t id) {
    if (id >= 0 && !eog_has(eog, *n, id)) eog[(*n)++] = id;
}

static void eog_remove(int32_t *eog, uint32_t *n, int32_t id) {
    for (uint32_t i = 0; i < *n; i++)
        if (eog[i] == id) {
            eog[i] = eog[--*n];
            return;
        }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

#define FW_BAR "\xef\xbd\x9c" /* U+FF5C, in DeepSeek's special tokens */
#define LB "\xe2\x96\x81"     /* U+2581, SentencePiece's space */

/* Special ids and end-of-generation tokens: metadata ids, then llama.cpp's detection by text. */
static geist_status setup_special(gt_tokenizer *t, const gguf_file *f, gt_err *err) {
    static const char *const eot_names[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
        "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
        "<" FW_BAR "end" LB "of" LB "sentence" FW_BAR ">", "<end_of_utterance>", NULL};
    static const char *const eom_names[] = {"<|eom_id|>", NULL};
    static const char *const fim_pre_names[] = {
        "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<" FW_BAR "fim" LB "begin" FW_BAR ">",
        "<PRE>", LB "<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
    static const char *const fim_suf_names[] = {
        "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<" FW_BAR "fim" LB "hole" FW_BAR ">",
        "<SUF>", LB "<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
    static const char *const fim_mid_names[] = {
        "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<" FW_BAR "fim" LB "end" FW_BAR ">",
        "<MID>", LB "<MID>", "<|code_middle|>", "<|middle|>", NULL};
    static const char *const fim_pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                                "[PAD]", NULL};
    static const char *const fim_rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                "<REPO>", "<reponame>", NULL};
    static const char *const fim_sep_names[] = {"<|file_sep|>", NULL};
    static const char *const eog_names[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]",
        "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<" FW_BAR "end" LB "of" LB "sentence" FW_BAR ">", "[e~[", NULL};
    static const char *const user_defined_names[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                     "<|constrain|>", NULL};

    int32_t n = (int32_t)t->n_vocab;
    int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
    struct {
        const char *key;
        int32_t *id;
    } keys[] = {
        {"tokenizer.ggml.bos_token_id", &t->bos},
        {"tokenizer.ggml.eos_token_id", &t->eos},
        {"tokenizer.ggml.eot_token_id", &t->eot},
        {"tokenizer.ggml.eom_token_id", &t->eom},
        {"tokenizer.ggml.unknown_token_id", &t->unk},
        {"tokenizer.ggml.padding_token_id", &t->pad},
        {"tokenizer.ggml.fim_pre_token_id", &fim_pre},
        {"tokenizer.ggml.fim_suf_token_id", &fim_suf},
        {"tokenizer.ggml.fim_mid_token_id", &fim_mid},
        {"tokenizer.ggml.fim_pad_token_id", &fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &fim_rep},
        {"tokenizer.ggml.fim_sep_token_id", &fim_sep},
        {"tokenizer.ggml.prefix_token_id", &fim_pre},
        {"tokenizer.ggml.suffix_token_id", &fim_suf},
        {"tokenizer.ggml.middle_token_id", &fim_mid},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int32_t *id = keys[i].id;
        if (*id >= n) *id = -1; /* a default outside the vocabulary is dropped */
        uint32_t v;
        if (gt_gguf_get_u32(f, keys[i].key, &v) && v < (uint32_t)n) *id = (int32_t)v;
    }

    bool b;
    if (gt_gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b)) t->add_bos = b;
    if (gt_gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b)) t->add_eos = b;
    if (t->add_bos && t->bos < 0)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id "
                       "is not set");
    if (t->add_eos && t->eos < 0)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id "
                       "is not set");

    /* ids found by text become control tokens (llama.cpp does the same) */
    struct {
        int32_t *id;
        const char *const *names;
    } by_text[] = {{&t->eot, eot_names},     {&t->eom, eom_names},     {&fim_pre, fim_pre_names},
                   {&fim_suf, fim_suf_names}, {&fim_mid, fim_mid_names}, {&fim_pad, fim_pad_names},
                   {&fim_rep, fim_rep_names}, {&fim_sep, fim_sep_names}};
    for (size_t i = 0; i < sizeof by_text / sizeof by_text[0]; i++) {
        if (*by_text[i].id >= 0) continue;
        *by_text[i].id = find_first(t, by_text[i].names);
        mark_control(t, *by_text[i].id);
    }

    size_t n_names = sizeof eog_names / sizeof eog_names[0];
    int32_t *eog = malloc((n_names + 8) * sizeof(int32_t));
    if (!eog) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (tokenizer)");
    uint32_t n_eog = 0;
    eog_add(eog, &n_eog, fim_pad);
    eog_add(eog, &n_eog, fim_rep);
    eog_add(eog, &n_eog, fim_sep);
    for (const char *const *nm = eog_names; *nm; nm++) {
        int32_t id = find_cstr(t, *nm);
        if (id < 0) continue;
        eog_add(eog, &n_eog, id);
        mark_control(t, id);
    }
    for (const char *const *nm = user_defined_names; *nm; nm++) {
        int32_t id = find_cstr(t, *nm);
        if (id >= 0) t->attr[id] = GT_ATTR_USER_DEFINED; /* llama.cpp: always rendered */
    }
    eog_add(eog, &n_eog, t->eos);
    eog_add(eog, &n_eog, t->eot);
    eog_add(eog, &n_eog, t->eom);

    /* o200k_harmony / solar-open: "<|end|>" is not an end of generation there */
    int32_t ret = find_cstr(t, "<|return|>"), call = find_cstr(t, "<|call|>");
    int32_t calls = find_cstr(t, "<|calls|>"), flush = find_cstr(t, "<|flush|>");
    int32_t end = find_cstr(t, "<|end|>");
    bool has_call = eog_has(eog, n_eog, call) || eog_has(eog, n_eog, calls);
    bool has_end = end >= 0 && eog_has(eog, n_eog, end);
    if (has_end && ((eog_has(eog, n_eog, ret) && has_call) ||
                    (has_call && eog_has(eog, n_eog, flush)))) {
        eog_remove(eog, &n_eog, end);
        t->attr[end] = GT_ATTR_USER_DEFINED;
    }
    /* gemma4 / plamo: "</s>" is a normal token next to "<|tool_response>" / "<|plamo:eos|>" */
    int32_t tool = find_cstr(t, "<|tool_response>"), plamo = find_cstr(t, "<|plamo:eos|>");
    int32_t s_end = find_cstr(t, "</s>");
    if (s_end >= 0 && eog_has(eog, n_eog, s_end) &&
        ((tool >= 0 && eog_has(eog, n_eog, tool)) || (plamo >= 0 && eog_has(eog, n_eog, plamo)))) {
        eog_remove(eog, &n_eog, s_end);
        t->attr[s_end] = GT_ATTR_NORMAL;
    }
    qsort(eog, n_eog, sizeof(int32_t), cmp_i32);
    t->eog = eog;
    t->n_eog = n_eog;
    t->owned += (n_names + 8) * sizeof(int32_t);
    return GEIST_OK;
}
#undef FW_BAR
#undef LB

/* Order of llama.cpp's special-token cache: longer text first (ties: lower id). */
typedef struct prio_item {
    uint32_t id, len;
} prio_item;

static int cmp_prio(const void *a, const void *b) {
    const prio_item *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

typedef struct text_item {
    const uint8_t *p;
    uint32_t len;
    uint32_t idx; /* index into the prio order */
} text_item;

static int cmp_text(const void *a, const void *b) {
    const text_item *x = a, *y = b;
    uint32_t m = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, m);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static geist_status setup_partition(gt_tokenizer *t, gt_err *err) {
    uint32_t n = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++)
        if ((t->attr[id] & (GT_ATTR_CONTROL | GT_ATTR_USER_DEFINED | GT_ATTR_UNKNOWN)) &&
            gt_tok_text(t, id).len > 0)
            n++;
    for (int c = 0; c < 256; c++) t->first_lo[c] = t->first_hi[c] = 0;
    if (n == 0) return GEIST_OK;
    prio_item *pi = malloc(n * sizeof *pi);
    text_item *ti = malloc(n * sizeof *ti);
    t->special = malloc(n * sizeof *t->special);
    t->special_by_prio = malloc(n * sizeof(uint32_t));
    if (!pi || !ti || !t->special || !t->special_by_prio) {
        free(pi);
        free(ti);
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (tokenizer special tokens)");
    }
    t->owned += n * (sizeof *t->special + sizeof(uint32_t));
    uint32_t k = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        gt_str s = gt_tok_text(t, id);
        if ((t->attr[id] & (GT_ATTR_CONTROL | GT_ATTR_USER_DEFINED | GT_ATTR_UNKNOWN)) &&
            s.len > 0) {
            pi[k].id = id;
            pi[k].len = (uint32_t)s.len;
            k++;
        }
    }
    qsort(pi, n, sizeof *pi, cmp_prio);
    for (uint32_t i = 0; i < n; i++) {
        ti[i].p = (const uint8_t *)gt_tok_text(t, pi[i].id).ptr;
        ti[i].len = pi[i].len;
        ti[i].idx = i;
    }
    qsort(ti, n, sizeof *ti, cmp_text);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = pi[ti[i].idx].id;
        gt_special_entry *e = &t->special[i];
        e->id = id;
        e->prio = ti[i].idx;
        e->len = ti[i].len;
        e->user_defined_only = !(t->attr[id] & (GT_ATTR_CONTROL | GT_ATTR_UNKNOWN));
        t->n_user_defined += e->user_defined_only;
        t->special_by_prio[e->prio] = i;
        uint8_t c0 = ti[i].p[0];
        if (t->first_hi[c0] == 0) t->first_lo[c0] = i;
        t->first_hi[c0] = i + 1;
        if (e->len == 1) {
            t->single_ok[c0 >> 3] |= (uint8_t)(1u << (c0 & 7));
        } else {
            uint32_t pair = ((uint32_t)c0 << 8) | ti[i].p[1];
            t->pair_ok[pair >> 3] |= (uint8_t)(1u << (pair & 7));
        }
    }
    t->n_special = n;
    free(pi);
    free(ti);
    return GEIST_OK;
}

static void setup_byte_maps(gt_tokenizer *t) {
    /* GPT-2 byte-level BPE: printable bytes map to themselves, the others to 256, 257, ... */
    for (int i = 0; i < 324; i++) t->byte_dec[i] = -1;
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t cp = printable ? (uint32_t)b : next++;
        uint8_t tmp[4];
        size_t n = gt_utf8_encode(cp, tmp);
        t->byte_enc[b][0] = tmp[0];
        t->byte_enc[b][1] = n > 1 ? tmp[1] : 0;
        t->byte_enc_len[b] = (uint8_t)n;
        t->byte_dec[cp] = (int16_t)b;
    }
    /* SentencePiece byte fallback: "<0xNN>", else the byte as a 1-byte token */
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        uint8_t name[6] = {'<', '0', 'x', (uint8_t)hex[b >> 4], (uint8_t)hex[b & 15], '>'};
        int32_t id = gt_tok_lookup(t, name, 6);
        if (id < 0) {
            uint8_t one = (uint8_t)b;
            id = gt_tok_lookup(t, &one, 1);
        }
        t->byte_token[b] = id;
    }
}

/* Offsets of the records of a string array, checked to fit 32 bits. */
static geist_status string_offsets(const gguf_kv *kv, const char *what, uint32_t **out,
                                   gt_err *err) {
    if (kv->arr_bytes > 0xFFFFFFF0u)
        return gt_fail(err, GEIST_ERR_UNSUPPORTED, "%s: array of %llu bytes is too large", what,
                       (unsigned long long)kv->arr_bytes);
    uint32_t *off = malloc((size_t)kv->arr_len * sizeof(uint32_t));
    if (!off) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (%s)", what);
    uint64_t cursor = 0;
    gt_str s;
    for (uint64_t i = 0; i < kv->arr_len; i++) {
        if (!gt_gguf_str_array_next(kv, &cursor, &s)) {
            free(off);
            return gt_fail(err, GEIST_ERR_BAD_FORMAT, "%s: string array ends early", what);
        }
        /* each record is a u64 length followed by the bytes; s.ptr points at the bytes */
        off[i] = (uint32_t)((const uint8_t *)s.ptr - 8 - kv->arr_data);
    }
    *out = off;
    return GEIST_OK;
}

static geist_status setup_vocab(gt_tokenizer *t, const gguf_file *f, gt_err *err) {
    const gguf_kv *toks = gt_gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (!toks)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "tokenizer.ggml.tokens is missing");
    if (toks->type != GGUF_VT_ARRAY || toks->arr_type != GGUF_VT_STRING)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "tokenizer.ggml.tokens is not a string array");
    if (toks->arr_len == 0 || toks->arr_len > 0x7FFFFFF0u)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "tokenizer.ggml.tokens has %llu entries",
                       (unsigned long long)toks->arr_len);
    t->n_vocab = (uint32_t)toks->arr_len;
    t->tok_arr = toks->arr_data;
    geist_status st = string_offsets(toks, "tokenizer.ggml.tokens", &t->tok_off, err);
    if (st) return st;
    t->owned += (uint64_t)t->n_vocab * sizeof(uint32_t);

    const gguf_kv *sc = gt_gguf_find_kv(f, "tokenizer.ggml.scores");
    if (sc) {
        if (sc->type != GGUF_VT_ARRAY ||
            (sc->arr_type != GGUF_VT_FLOAT32 && sc->arr_type != GGUF_VT_INT32))
            return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                           "tokenizer.ggml.scores is not an f32 or i32 array");
        if (sc->arr_len < t->n_vocab)
            return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                           "tokenizer.ggml.scores has %llu entries for %u tokens",
                           (unsigned long long)sc->arr_len, t->n_vocab);
        t->scores = sc->arr_data;
        t->scores_int = sc->arr_type == GGUF_VT_INT32;
    }

    t->attr = malloc(t->n_vocab);
    if (!t->attr) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (tokenizer)");
    t->owned += t->n_vocab;
    const gguf_kv *tt = gt_gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (tt && (tt->type != GGUF_VT_ARRAY || tt->arr_type != GGUF_VT_INT32))
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "tokenizer.ggml.token_type is not an i32 array");
    if (tt && tt->arr_len < t->n_vocab)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT,
                       "tokenizer.ggml.token_type has %llu entries for %u tokens",
                       (unsigned long long)tt->arr_len, t->n_vocab);
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        uint8_t a = GT_ATTR_NORMAL;
        if (tt) {
            int32_t ty;
            memcpy(&ty, tt->arr_data + 4 * (size_t)i, sizeof ty);
            switch (ty) {
            case 1: a = GT_ATTR_NORMAL; break;
            case 2: a = GT_ATTR_UNKNOWN; break;
            case 3: a = GT_ATTR_CONTROL; break;
            case 4: a = GT_ATTR_USER_DEFINED; break;
            case 5: a = GT_ATTR_UNUSED; break;
            case 6: a = GT_ATTR_BYTE; break;
            default: a = GT_ATTR_UNDEFINED; break;
            }
        }
        t->attr[i] = a;
    }

    /* text -> id. Empty strings are never matched (llama.cpp renames them "[EMPTY_i]"); for a
     * text listed twice the first id wins (current llama.cpp refuses such a vocabulary). */
    /* 4-byte slots (8-bit tag, 24-bit id) at load <= 0.5 keep Gemma's 262k-token table at
     * 2 MiB: the tokenizer must stay a small fraction of the weights it sits beside. */
    if (t->n_vocab >= 0xFFFFFFu)
        return gt_fail(err, GEIST_ERR_UNSUPPORTED, "vocabulary of %u tokens is too large",
                       t->n_vocab);
    uint64_t cap = pow2_at_least((uint64_t)t->n_vocab * 2);
    t->tok_slots = calloc(cap, sizeof(uint32_t));
    if (!t->tok_slots) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (tokenizer)");
    t->tok_mask = cap - 1;
    t->owned += cap * sizeof(uint32_t);
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        gt_str s = gt_tok_text(t, id);
        if (s.len > t->max_token_len) t->max_token_len = (uint32_t)s.len;
        if (s.len == 0) continue;
        const uint8_t *p = (const uint8_t *)s.ptr;
        uint64_t h = gt_hash_finish(gt_hash_bytes(GT_HASH_SEED, p, s.len));
        uint32_t tag = (uint32_t)(h >> 56);
        uint64_t i = h & t->tok_mask;
        bool dup = false;
        for (;; i = (i + 1) & t->tok_mask) {
            uint32_t v = t->tok_slots[i];
            if (!v) break;
            if ((v >> 24) == tag) {
                gt_str o = gt_tok_text(t, (v & 0xFFFFFFu) - 1);
                if (o.len == s.len && memcmp(o.ptr, s.ptr, s.len) == 0) {
                    dup = true;
                    break;
                }
            }
        }
        if (!dup) t->tok_slots[i] = (tag << 24) | (id + 1);
    }
    return GEIST_OK;
}

static geist_status setup_merges(gt_tokenizer *t, const gguf_file *f, gt_err *err) {
    const gguf_kv *mk = gt_gguf_find_kv(f, "tokenizer.ggml.merges");
    if (!mk) return gt_fail(err, GEIST_ERR_BAD_FORMAT, "tokenizer.ggml.merges is missing");
    if (mk->type != GGUF_VT_ARRAY || mk->arr_type != GGUF_VT_STRING)
        return gt_fail(err, GEIST_ERR_BAD_FORMAT, "tokenizer.ggml.merges is not a string array");
    if (mk->arr_len >= 0xFFFFFFu) /* ranks live in 24 bits of a hash slot */
        return gt_fail(err, GEIST_ERR_UNSUPPORTED, "tokenizer.ggml.merges: too many entries");
    t->n_merges = (uint32_t)mk->arr_len;
    t->merge_arr = mk->arr_data;
    if (t->n_merges == 0) return GEIST_OK;
    geist_status st = string_offsets(mk, "tokenizer.ggml.merges", &t->merge_off, err);
    if (st) return st;
    t->owned += (uint64_t)t->n_merges * sizeof(uint32_t);
    uint64_t cap = pow2_at_least((uint64_t)t->n_merges * 2);
    t->merge_slots = calloc(cap, sizeof(uint32_t));
    if (!t->merge_slots) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (merges)");
    t->merge_mask = cap - 1;
    t->owned += cap * sizeof(uint32_t);
    for (uint32_t r = 0; r < t->n_merges; r++) {
        gt_str m = merge_text(t, r);
        const uint8_t *p = (const uint8_t *)m.ptr;
        /* llama.cpp: split at the first space after position 0; without one the pair is
         * ("", ""), which no symbol pair can match */
        const uint8_t *sp = m.len > 1 ? memchr(p + 1, ' ', m.len - 1) : NULL;
        if (!sp || (uint64_t)(sp - p) + 1 >= m.len) continue;
        size_t ln = (size_t)(sp - p);
        size_t rn = m.len - ln - 1;
        if (gt_merge_rank(t, p, ln, sp + 1, rn) >= 0) continue; /* first occurrence wins */
        uint64_t h = gt_hash_finish(gt_hash_bytes(GT_HASH_SEED, p, m.len));
        uint64_t i = h & t->merge_mask;
        while (t->merge_slots[i]) i = (i + 1) & t->merge_mask;
        t->merge_slots[i] = ((uint32_t)(h >> 56) << 24) | (r + 1);
    }
    return GEIST_OK;
}

void gt_tokenizer_free(gt_tokenizer *t) {
    if (!t) return;
    free(t->tok_off);
    free(t->attr);
    free(t->tok_slots);
    free(t->merge_off);
    free(t->merge_slots);
    free(t->special);
    free(t->special_by_prio);
    free(t->eog);
    free(t);
}

geist_status gt_tokenizer_create(const gguf_file *f, gt_tokenizer **out, gt_err *err) {
    if (!f || !out) return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "tokenizer: NULL argument");
    *out = NULL;
    gt_str model;
    if (!gt_gguf_get_str(f, "tokenizer.ggml.model", &model)) {
        if (gt_gguf_find_kv(f, "tokenizer.ggml.model"))
            return gt_fail(err, GEIST_ERR_BAD_FORMAT, "tokenizer.ggml.model is not a string");
        return GEIST_OK; /* no tokenizer: the model runs on ids */
    }
    if (gt_str_eq(model, "none") || gt_str_eq(model, "no_vocab")) return GEIST_OK;

    gt_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (tokenizer)");
    t->owned = sizeof *t;
    t->eot = t->eom = t->pad = -1;
    geist_status st = GEIST_OK;
    gt_str pre = {"", 0};
    bool has_pre = gt_gguf_get_str(f, "tokenizer.ggml.pre", &pre);
    if (gt_str_eq(model, "llama")) {
        t->type = GT_VOCAB_SPM;
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
        t->add_space_prefix = true;
        t->add_bos = true;
    } else if (gt_str_eq(model, "gpt2")) {
        t->type = GT_VOCAB_BPE;
        t->bos = 11; /* llama.cpp's defaults for "gpt2" when the metadata has no ids */
        t->eos = 11;
        t->unk = -1;
        const pre_def *pd = has_pre && pre.len > 0 ? find_pre(pre) : &k_pre_defs[0];
        if (!pd) {
            st = gt_fail(err, GEIST_ERR_UNSUPPORTED, "unsupported pre-tokenizer '%.*s'",
                         (int)(pre.len < 64 ? pre.len : 64), pre.ptr);
            goto fail;
        }
        t->n_steps = pd->n_steps;
        memcpy(t->steps, pd->steps, sizeof t->steps);
        t->ignore_merges = pd->ignore_merges;
        t->add_bos = pd->add_bos;
        if (pd->no_bos) t->bos = -1;
    } else {
        st = gt_fail(err, GEIST_ERR_UNSUPPORTED,
                     "unsupported tokenizer model '%.*s' (geist reads \"gpt2\" and \"llama\")",
                     (int)(model.len < 64 ? model.len : 64), model.ptr);
        goto fail;
    }
    bool b;
    if (gt_gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &b)) t->add_space_prefix = b;

    if ((st = setup_vocab(t, f, err))) goto fail;
    if (t->type == GT_VOCAB_BPE && (st = setup_merges(t, f, err))) goto fail;
    setup_byte_maps(t);
    if ((st = setup_special(t, f, err))) goto fail;
    if ((st = setup_partition(t, err))) goto fail;
    *out = t;
    return GEIST_OK;
fail:
    gt_tokenizer_free(t);
    return st;
}

uint64_t gt_tokenizer_owned_bytes(const gt_tokenizer *t) { return t ? t->owned : 0; }
int32_t gt_tokenizer_n_vocab(const gt_tokenizer *t) { return t ? (int32_t)t->n_vocab : 0; }

/* ------------------------------------------------------------------------------------------- */
/* Special-token partition (llama.cpp's tokenizer_st_partition, same result, faster search):
 * tokens are taken in priority order (longer text first); each claims its leftmost
 * non-overlapping occurrences in the text not yet claimed. Equivalently, for a stretch of text,
 * the highest-priority token occurring in it splits it, and the gaps are searched again with
 * only lower-priority tokens. */

typedef struct part_item {
    size_t a, b;   /* raw text range, or b == SIZE_MAX for a token */
    uint32_t kmin; /* lowest priority rank still allowed in the range; token id for a token */
} part_item;

static inline bool bit_set(const uint8_t *bits, uint32_t i) {
    return (bits[i >> 3] >> (i & 7)) & 1;
}

/* Lowest priority rank >= kmin of an eligible special text starting at s[p] and ending <= b. */
static uint32_t special_at(const gt_tokenizer *t, const uint8_t *s, size_t p, size_t b,
                           bool parse, uint32_t kmin, uint32_t best) {
    uint8_t c0 = s[p];
    uint32_t lo = t->first_lo[c0], hi = t->first_hi[c0];
    size_t d = 1; /* entries in [lo, hi) share the prefix s[p .. p+d) */
    while (lo < hi) {
        while (lo < hi && t->special[lo].len == d) {
            const gt_special_entry *e = &t->special[lo];
            if ((parse || e->user_defined_only) && e->prio >= kmin && e->prio < best)
                best = e->prio;
            lo++;
        }
        if (lo >= hi || p + d >= b) break;
        uint8_t c = s[p + d];
        /* narrow to entries whose byte d equals c (all remaining have len > d) */
        uint32_t l = lo, h = hi;
        while (l < h) {
            uint32_t m = l + (h - l) / 2;
            if ((uint8_t)gt_tok_text(t, t->special[m].id).ptr[d] < c) l = m + 1;
            else h = m;
        }
        uint32_t l2 = l, h2 = hi;
        while (l2 < h2) {
            uint32_t m = l2 + (h2 - l2) / 2;
            if ((uint8_t)gt_tok_text(t, t->special[m].id).ptr[d] <= c) l2 = m + 1;
            else h2 = m;
        }
        lo = l;
        hi = l2;
        d++;
    }
    return best;
}

static bool parts_push(gt_buf *stack, size_t *n, part_item it) {
    if (!gt_buf_reserve(stack, (*n + 1) * sizeof(part_item))) return false;
    ((part_item *)stack->p)[(*n)++] = it;
    return true;
}

typedef struct enc_state {
    const gt_tokenizer *t;
    const uint8_t *text;
    gt_work *w;
    gt_ids *out;
    bool prev_special; /* SentencePiece: previous fragment was a token (or none yet) */
} enc_state;

static bool emit_raw(enc_state *es, size_t a, size_t b) {
    const gt_tokenizer *t = es->t;
    if (t->type == GT_VOCAB_SPM) {
        bool prefix = t->add_space_prefix && es->prev_special;
        es->prev_special = false;
        return gt_spm_encode_fragment(t, es->text + a, b - a, prefix, es->w, es->out);
    }
    return gt_bpe_encode_fragment(t, es->text + a, b - a, es->w, es->out);
}

static bool emit_token(enc_state *es, int32_t id) {
    es->prev_special = true;
    return gt_ids_push(es->out, id);
}

geist_status gt_tokenizer_encode(const gt_tokenizer *t, const char *text, size_t len,
                                 uint32_t flags, gt_ids *out, gt_err *err) {
    if (!t || !out || (!text && len > 0))
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "tokenize: NULL argument");
    if (len >= 0xFFFFFFF0u / 4)
        return gt_fail(err, GEIST_ERR_INVALID_ARGUMENT, "tokenize: text of %zu bytes is too long",
                       len);
    const bool add_special = flags & GT_ENCODE_ADD_SPECIAL;
    const bool parse = flags & GT_ENCODE_PARSE_SPECIAL;
    const uint8_t *s = (const uint8_t *)text;
    size_t n0 = out->n;
    gt_work w;
    memset(&w, 0, sizeof w);
    gt_buf stack = {NULL, 0}, occ = {NULL, 0};
    enc_state es = {t, s, &w, out, true};
    bool ok = true;

    if (add_special && t->add_bos) ok = gt_ids_push(out, t->bos);

    bool any_special = parse ? t->n_special > 0 : t->n_user_defined > 0;
    size_t n_stack = 0;
    if (ok && len > 0) ok = parts_push(&stack, &n_stack, (part_item){0, len, 0});
    while (ok && n_stack > 0) {
        part_item it = ((part_item *)stack.p)[--n_stack];
        if (it.b == SIZE_MAX) {
            ok = emit_token(&es, (int32_t)it.kmin);
            continue;
        }
        uint32_t best = UINT32_MAX;
        if (any_special) {
            for (size_t p = it.a; p < it.b && best != it.kmin; p++) {
                uint8_t c0 = s[p];
                if (t->first_lo[c0] == t->first_hi[c0]) continue;
                if (!bit_set(t->single_ok, c0) &&
                    !(p + 1 < it.b && bit_set(t->pair_ok, ((uint32_t)c0 << 8) | s[p + 1])))
                    continue;
                best = special_at(t, s, p, it.b, parse, it.kmin, best);
            }
        }
        if (best == UINT32_MAX) {
            ok = emit_raw(&es, it.a, it.b);
            continue;
        }
        /* split the range at the leftmost non-overlapping occurrences of that token */
        const gt_special_entry *e = &t->special[t->special_by_prio[best]];
        const uint8_t *tx = (const uint8_t *)gt_tok_text(t, e->id).ptr;
        size_t tl = e->len, n_occ = 0;
        for (size_t q = it.a; q + tl <= it.b;) {
            const uint8_t *hit = memchr(s + q, tx[0], it.b - tl + 1 - q);
            if (!hit) break;
            size_t m = (size_t)(hit - s);
            if (memcmp(hit, tx, tl) != 0) {
                q = m + 1;
                continue;
            }
            if (!gt_buf_reserve(&occ, (n_occ + 1) * sizeof(size_t))) {
                ok = false;
                break;
            }
            ((size_t *)occ.p)[n_occ++] = m;
            q = m + tl;
        }
        /* push in reverse so the stack pops them in text order */
        size_t right = it.b;
        for (size_t k = n_occ; ok && k-- > 0;) {
            size_t m = ((size_t *)occ.p)[k];
            if (m + tl < right)
                ok = parts_push(&stack, &n_stack, (part_item){m + tl, right, best + 1});
            if (ok) ok = parts_push(&stack, &n_stack, (part_item){0, SIZE_MAX, e->id});
            right = m;
        }
        if (ok && it.a < right)
            ok = parts_push(&stack, &n_stack, (part_item){it.a, right, best + 1});
    }
    if (ok && add_special && t->add_eos) ok = gt_ids_push(out, t->eos);
    gt_work_free(&w);
    free(stack.p);
    free(occ.p);
    if (!ok) {
        out->n = n0;
        return gt_fail(err, GEIST_ERR_OUT_OF_MEMORY, "out of memory (tokenize)");
    }
    return GEIST_OK;
}

/* ------------------------------------------------------------------------------------------- */
/* Pieces */

size_t gt_tokenizer_max_piece(const gt_tokenizer *t) { return t ? t->max_token_len + 4 : 0; }

bool gt_tokenizer_strips_leading_space(const gt_tokenizer *t) {
    return t && t->add_space_prefix;
}

typedef struct piece_out {
    uint8_t *dst;
    size_t cap, n;
    bool strip; /* drop one leading ' ' still pending */
} piece_out;

static inline void put(piece_out *o, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (o->strip) {
            o->strip = false;
            if (p[i] == ' ') continue;
        }
        if (o->n < o->cap) o->dst[o->n] = p[i];
        o->n++;
    }
}

static int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

size_t gt_tokenizer_piece(const gt_tokenizer *t, int32_t id, bool render_special,
                          bool strip_space, uint8_t *dst, size_t cap) {
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab) return 0;
    piece_out o = {dst, dst ? cap : 0, 0, strip_space};
    uint8_t a = t->attr[id];
    if ((a & (GT_ATTR_UNKNOWN | GT_ATTR_CONTROL)) && !render_special) return 0;
    gt_str txt = gt_tok_text(t, (uint32_t)id);
    const uint8_t *p = (const uint8_t *)txt.ptr;
    size_t n = txt.len;
    if (a & (GT_ATTR_UNKNOWN | GT_ATTR_CONTROL | GT_ATTR_USER_DEFINED)) {
        put(&o, p, n);
    } else if (a & GT_ATTR_NORMAL) {
        if (t->type == GT_VOCAB_SPM) {
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && p[i] == 0xE2 && p[i + 1] == 0x96 && p[i + 2] == 0x81) {
                    put(&o, (const uint8_t *)" ", 1);
                    i += 3;
                } else {
                    put(&o, p + i, 1);
                    i++;
                }
            }
        } else {
            /* undo the byte-to-unicode mapping; a code point outside the mapping keeps its
             * bytes (llama.cpp writes an "[UNK_BYTE_0x..]" marker there) */
            for (size_t i = 0; i < n;) {
                uint32_t cp;
                size_t l = gt_utf8_decode_lenient(p + i, n - i, &cp);
                if (cp < 324 && t->byte_dec[cp] >= 0) {
                    uint8_t byte = (uint8_t)t->byte_dec[cp];
                    put(&o, &byte, 1);
                } else {
                    put(&o, p + i, l);
                }
                i += l;
            }
        }
    } else if (a & GT_ATTR_BYTE) {
        /* "<0xNN>": the hex digits at positions 3-4, read as strtol would */
        int v = 0;
        for (size_t i = 3; i < 5 && i < n; i++) {
            int h = hexval(p[i]);
            if (h < 0) break;
            v = v * 16 + h;
        }
        uint8_t byte = (uint8_t)v;
        put(&o, &byte, 1);
    }
    return o.n;
}

void gt_tokenizer_special(const gt_tokenizer *t, gt_special_ids *out) {
    out->bos = t->bos;
    out->eos = t->eos;
    out->eot = t->eot;
    out->unk = t->unk;
    out->pad = t->pad;
    out->add_bos = t->add_bos;
    out->add_eos = t->add_eos;
}

bool gt_tokenizer_is_eog(const gt_tokenizer *t, int32_t id) {
    if (!t || id < 0) return false;
    uint32_t lo = 0, hi = t->n_eog;
    while (lo < hi) {
        uint32_t m = lo + (hi - lo) / 2;
        if (t->eog[m] < id) lo = m + 1;
        else hi = m;
    }
    return lo < t->n_eog && t->eog[lo] == id;
}

gt_str gt_tokenizer_token_text(const gt_tokenizer *t, int32_t id) {
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab) {
        gt_str e = {"", 0};
        return e;
    }
    return gt_tok_text(t, (uint32_t)id);
}

int32_t gt_tokenizer_find(const gt_tokenizer *t, const char *s, size_t n) {
    if (!t || (!s && n)) return -1;
    if (n == 0) return -1;
    return gt_tok_lookup(t, (const uint8_t *)s, n);
}

uint32_t gt_tokenizer_attr(const gt_tokenizer *t, int32_t id) {
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab) return 0;
    return t->attr[id];
}
