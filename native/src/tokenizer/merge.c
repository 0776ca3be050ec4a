/* The merge loops: byte-level BPE over one pre-tokenized word (lowest merge rank first) and
 * SentencePiece over one text fragment (highest-scoring vocabulary bigram first). Both keep the
 * symbols in a linked list and candidate pairs in a binary heap, so a word of n symbols costs
 * O(n log n), and both break ties by the leftmost pair, as llama.cpp's priority queues do. A
 * queued pair is stale when either side changed since; that shows in the summed length. */
#include "tokenizer_internal.h"
#include "unicode.h"

typedef struct sym {
    uint32_t start, len; /* bytes in the word; len 0 once merged into its left neighbour */
    int32_t prev, next;
} sym;

typedef struct pair {
    float key;    /* SentencePiece: the merged token's score */
    int32_t rank; /* BPE: the merge's rank */
    int32_t left, right;
    uint32_t size;
} pair;

/* BPE: a before b when its rank is lower, then when it is further left. */
static inline bool bpe_before(const pair *a, const pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

/* SentencePiece: a before b when its score is higher, then when it is further left. */
static inline bool spm_before(const pair *a, const pair *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

typedef bool (*before_fn)(const pair *, const pair *);

/* The heap lives in w->heap and grows on demand (stale pairs stay queued until popped, so its
 * size is not known up front; at most n - 1 plus two per merge). */
static bool heap_push(gt_buf *buf, size_t *n, pair v, before_fn before) {
    if (!gt_buf_reserve(buf, (*n + 1) * sizeof(pair))) return false;
    pair *h = buf->p;
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&v, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
    return true;
}

static pair heap_pop(pair *h, size_t *n, before_fn before) {
    pair top = h[0];
    pair last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m) break;
        size_t c = (l + 1 < m && before(&h[l + 1], &h[l])) ? l + 1 : l;
        if (!before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m > 0) h[i] = last;
    return top;
}

/* Splits w[0..len) into UTF-8 characters. llama.cpp takes the length from the lead byte alone,
 * so a broken sequence swallows the bytes after it (a following space's U+2581, say) into one
 * byte-fallback run; geist makes each invalid byte a symbol of its own, so invalid input keeps
 * its bytes and its neighbours. Valid UTF-8 splits the same either way. */
static size_t split_symbols(const uint8_t *w, size_t len, sym *s) {
    size_t n = 0;
    for (size_t off = 0; off < len;) {
        uint32_t cp;
        size_t l = gt_utf8_decode_lenient(w + off, len - off, &cp);
        s[n].start = (uint32_t)off;
        s[n].len = (uint32_t)l;
        s[n].prev = (int32_t)n - 1;
        off += l;
        s[n].next = off == len ? -1 : (int32_t)n + 1;
        n++;
    }
    return n;
}

static bool reserve_symbols(gt_work *w, size_t len) {
    return gt_buf_reserve(&w->sym, (len + 1) * sizeof(sym)); /* one per byte at most */
}

static bool bpe_try_pair(const gt_tokenizer *t, const uint8_t *w, const sym *s, int32_t l,
                         int32_t r, gt_buf *heap, size_t *nh) {
    if (l < 0 || r < 0) return true;
    int32_t rank = gt_merge_rank(t, w + s[l].start, s[l].len, w + s[r].start, s[r].len);
    if (rank < 0) return true;
    pair p = {0.0f, rank, l, r, s[l].len + s[r].len};
    return heap_push(heap, nh, p, bpe_before);
}

bool gt_bpe_encode_word(const gt_tokenizer *t, const uint8_t *word, size_t len, gt_work *w,
                        gt_ids *out) {
    if (len == 0) return true;
    if (t->ignore_merges) {
        int32_t id = gt_tok_lookup(t, word, len);
        if (id >= 0) return gt_ids_push(out, id);
    }
    if (!reserve_symbols(w, len)) return false;
    sym *s = w->sym.p;
    size_t n = split_symbols(word, len, s), nh = 0;
    bool ok = true;
    for (size_t i = 1; ok && i < n; i++)
        ok = bpe_try_pair(t, word, s, (int32_t)i - 1, (int32_t)i, &w->heap, &nh);
    while (ok && nh > 0) {
        pair p = heap_pop(w->heap.p, &nh, bpe_before);
        sym *l = &s[p.left], *r = &s[p.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != p.size) continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = p.left;
        ok = bpe_try_pair(t, word, s, l->prev, p.left, &w->heap, &nh) &&
             bpe_try_pair(t, word, s, p.left, l->next, &w->heap, &nh);
    }
    if (!ok) return false;
    for (int32_t i = 0; i != -1; i = s[i].next) {
        if (s[i].len == 0) continue;
        int32_t id = gt_tok_lookup(t, word + s[i].start, s[i].len);
        if (id >= 0) {
            if (!gt_ids_push(out, id)) return false;
            continue;
        }
        /* not in the vocabulary: each byte that is a token on its own (llama.cpp) */
        for (uint32_t k = 0; k < s[i].len; k++) {
            int32_t bid = gt_tok_lookup(t, word + s[i].start + k, 1);
            if (bid >= 0 && !gt_ids_push(out, bid)) return false;
        }
    }
    return true;
}

static bool spm_try_pair(const gt_tokenizer *t, const uint8_t *w, const sym *s, int32_t l,
                         int32_t r, gt_buf *heap, size_t *nh) {
    if (l < 0 || r < 0) return true;
    uint32_t size = s[l].len + s[r].len; /* the two are adjacent: one contiguous text */
    int32_t id = gt_tok_lookup(t, w + s[l].start, size);
    if (id < 0) return true;
    pair p = {gt_tok_score(t, (uint32_t)id), 0, l, r, size};
    return heap_push(heap, nh, p, spm_before);
}

bool gt_spm_encode_fragment(const gt_tokenizer *t, const uint8_t *text, size_t len,
                            bool prefix_space, gt_work *w, gt_ids *out) {
    /* spaces become U+2581 (3 bytes), with one more in front when asked */
    size_t cap = 3 * len + 3;
    if (!gt_buf_reserve(&w->text, cap)) return false;
    uint8_t *e = w->text.p;
    size_t n_e = 0;
    static const uint8_t lower_block[3] = {0xE2, 0x96, 0x81};
    if (prefix_space) {
        memcpy(e, lower_block, 3);
        n_e = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(e + n_e, lower_block, 3);
            n_e += 3;
        } else {
            e[n_e++] = text[i];
        }
    }
    if (n_e == 0) return true;
    if (!reserve_symbols(w, n_e)) return false;
    e = w->text.p;
    sym *s = w->sym.p;
    size_t n = split_symbols(e, n_e, s), nh = 0;
    bool ok = true;
    for (size_t i = 1; ok && i < n; i++)
        ok = spm_try_pair(t, e, s, (int32_t)i - 1, (int32_t)i, &w->heap, &nh);
    while (ok && nh > 0) {
        pair p = heap_pop(w->heap.p, &nh, spm_before);
        sym *l = &s[p.left], *r = &s[p.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != p.size) continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = p.left;
        ok = spm_try_pair(t, e, s, l->prev, p.left, &w->heap, &nh) &&
             spm_try_pair(t, e, s, p.left, l->next, &w->heap, &nh);
    }
    if (!ok) return false;
    for (int32_t i = 0; i != -1; i = s[i].next) {
        if (s[i].len == 0) continue;
        int32_t id = gt_tok_lookup(t, e + s[i].start, s[i].len);
        if (id >= 0) {
            if (!gt_ids_push(out, id)) return false;
            continue;
        }
        /* merged symbols are always tokens, so this is one unknown character: byte fallback
         * (<0xNN>); a vocabulary without it falls back to <unk> where llama.cpp would throw */
        for (uint32_t k = 0; k < s[i].len; k++) {
            int32_t bid = t->byte_token[e[s[i].start + k]];
            if (bid < 0) bid = t->unk;
            if (bid >= 0 && !gt_ids_push(out, bid)) return false;
        }
    }
    return true;
}
