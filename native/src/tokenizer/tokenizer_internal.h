/* Internals shared by the tokenizer sources (tokenizer.c, pretokenize.c, merge.c). */
#ifndef GEIST_TOKENIZER_INTERNAL_H
#define GEIST_TOKENIZER_INTERNAL_H

#include <string.h>

#include "tokenizer.h"

typedef enum gt_vocab_type { GT_VOCAB_BPE = 1, GT_VOCAB_SPM = 2 } gt_vocab_type;

/* Pre-tokenizer split steps; a pre-tokenizer is a list of them applied in order, each splitting
 * the pieces the previous one produced (llama.cpp's regex list per LLAMA_VOCAB_PRE_TYPE). */
typedef enum gt_split_step {
    /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
    GT_SPLIT_GPT2,
    /* (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
     * |\s*[\r\n]+|\s+(?!\S)|\s+ */
    GT_SPLIT_LLAMA3,
    GT_SPLIT_QWEN2,        /* as LLAMA3 with \p{N} (single digits) */
    GT_SPLIT_EACH_NUMBER,  /* \p{N} */
    GT_SPLIT_NUMBER_RUNS,  /* \p{N}+ */
    GT_SPLIT_PUNCT_RUNS,   /* [\p{P}\$\+<=>\^~\|]+ */
    GT_SPLIT_ASCII_DIGIT3  /* [0-9][0-9][0-9] */
} gt_split_step;

#define GT_MAX_SPLIT_STEPS 4

/* Special-token matcher entry: tokens matched whole before splitting (llama.cpp's
 * cache_special_tokens). Sorted by text bytes for the prefix walk. */
typedef struct gt_special_entry {
    uint32_t id;
    uint32_t prio;    /* rank in llama.cpp's order: longer text first, then lower id */
    uint32_t len;
    bool user_defined_only; /* matched even without PARSE_SPECIAL */
} gt_special_entry;

struct gt_tokenizer {
    gt_vocab_type type;
    gt_split_step steps[GT_MAX_SPLIT_STEPS];
    uint32_t n_steps;
    bool ignore_merges;    /* llama3: a word that is a whole token skips the merges */
    bool add_bos, add_eos, add_space_prefix;
    int32_t bos, eos, eot, eom, unk, pad;

    uint32_t n_vocab;
    const uint8_t *tok_arr; /* tokenizer.ggml.tokens payload: (u64 len, bytes) records */
    uint32_t *tok_off;      /* offset of each token's record in tok_arr */
    uint8_t *attr;          /* GT_ATTR_* per token */
    const uint8_t *scores;  /* tokenizer.ggml.scores payload (f32 or i32), or NULL */
    bool scores_int;
    uint32_t max_token_len;

    /* text -> id: open addressing at load <= 0.5 */
    uint32_t *tok_slots; /* (8-bit hash tag << 24) | (id + 1); 0 = empty */
    uint64_t tok_mask;

    /* BPE merges: rank = index in tokenizer.ggml.merges ("left right" strings) */
    const uint8_t *merge_arr;
    uint32_t n_merges;
    uint32_t *merge_off;
    uint32_t *merge_slots; /* (8-bit hash tag << 24) | (rank + 1); 0 = empty */
    uint64_t merge_mask;
    uint8_t byte_enc[256][2]; /* GPT-2 byte -> unicode mapping, as UTF-8 (1 or 2 bytes) */
    uint8_t byte_enc_len[256];
    int16_t byte_dec[324];    /* inverse: code point (< 324) -> byte, -1 if not a mapped one */

    int32_t byte_token[256]; /* SentencePiece byte fallback: <0xNN> token (else the 1-byte token) */

    gt_special_entry *special; /* sorted by text */
    uint32_t n_special;
    uint32_t n_user_defined;     /* entries matched without PARSE_SPECIAL */
    uint32_t *special_by_prio;   /* index into special[] by prio */
    uint32_t first_lo[256], first_hi[256]; /* special[] range whose text starts with a byte */
    uint8_t pair_ok[8192];       /* bit (b0 << 8 | b1): some special text starts with b0 b1 */
    uint8_t single_ok[32];       /* bit b0: some special text is the single byte b0 */

    int32_t *eog;  /* sorted end-of-generation ids */
    uint32_t n_eog;

    uint64_t owned;
};

static inline gt_str gt_tok_text(const gt_tokenizer *t, uint32_t id) {
    const uint8_t *rec = t->tok_arr + t->tok_off[id];
    uint64_t len;
    memcpy(&len, rec, sizeof len);
    gt_str s = {(const char *)rec + 8, len};
    return s;
}

static inline float gt_tok_score(const gt_tokenizer *t, uint32_t id) {
    if (!t->scores) return 0.0f;
    if (t->scores_int) {
        int32_t v;
        memcpy(&v, t->scores + 4 * (size_t)id, sizeof v);
        return (float)v;
    }
    float f;
    memcpy(&f, t->scores + 4 * (size_t)id, sizeof f);
    return f;
}

static inline uint64_t gt_hash_bytes(uint64_t h, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001B3ull; /* FNV-1a 64 */
    return h;
}
#define GT_HASH_SEED 0xCBF29CE484222325ull

static inline uint64_t gt_hash_finish(uint64_t h) {
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h;
}

/* id of the token whose text is s[0..n), or -1 */
int32_t gt_tok_lookup(const gt_tokenizer *t, const uint8_t *s, size_t n);
/* rank of the merge (left, right), or -1 */
int32_t gt_merge_rank(const gt_tokenizer *t, const uint8_t *l, size_t ln, const uint8_t *r,
                      size_t rn);

/* Scratch grown on demand by one call. */
typedef struct gt_buf {
    void *p;
    size_t cap; /* bytes */
} gt_buf;
bool gt_buf_reserve(gt_buf *b, size_t bytes);

bool gt_ids_push(gt_ids *ids, int32_t id);

/* Per-call scratch of the BPE/SPM tokenizers (freed by gt_work_free). */
typedef struct gt_work {
    gt_buf cp_off, cp_flags, bounds_a, bounds_b, word, sym, heap, text;
} gt_work;
void gt_work_free(gt_work *w);

/* pretokenize.c: splits text[0..len) into words and runs byte-level BPE on each. */
bool gt_bpe_encode_fragment(const gt_tokenizer *t, const uint8_t *text, size_t len, gt_work *w,
                            gt_ids *out);
/* merge.c: BPE merges of one word (already byte-mapped) and SentencePiece of one fragment. */
bool gt_bpe_encode_word(const gt_tokenizer *t, const uint8_t *word, size_t len, gt_work *w,
                        gt_ids *out);
bool gt_spm_encode_fragment(const gt_tokenizer *t, const uint8_t *text, size_t len,
                            bool prefix_space, gt_work *w, gt_ids *out);

#endif
