/* Byte-level BPE pre-tokenization: splits text into words with the rules llama.cpp applies per
 * `tokenizer.ggml.pre`, maps each word's bytes to the GPT-2 printable code points and hands it to
 * the merges. The rules are hand-written matchers equal to llama.cpp's regex list (its own custom
 * matchers for the GPT-2 and LLaMA-3 regexes; the std::regex ones for the others, which use
 * leftmost-first alternation and keep unmatched text as pieces too).
 *
 * Positions are code point indexes within one piece [fs, fe) of the previous step; a position
 * outside the piece reads as "no character" (flags 0), as in llama.cpp. */
#include "tokenizer_internal.h"
#include "unicode.h"

typedef struct split_ctx {
    const uint8_t *text;
    const uint32_t *off;  /* byte offset of each code point (n + 1 entries) */
    const uint8_t *flags; /* GT_U_* of each code point */
    uint32_t *out;        /* piece ends */
    size_t n_out;
} split_ctx;

#define NOT_ASCII 0x100u

/* The code point at i if it is ASCII, else NOT_ASCII (invalid bytes are U+FFFD there). */
static inline uint32_t ascii_at(const split_ctx *c, size_t i, size_t fe) {
    if (i >= fe) return NOT_ASCII + 1;
    uint8_t b = c->text[c->off[i]];
    return b < 0x80 ? b : NOT_ASCII;
}

static inline uint8_t flags_at(const split_ctx *c, size_t i, size_t fe) {
    return i < fe ? c->flags[i] : 0;
}

static inline void add_end(split_ctx *c, size_t *prev, size_t end) {
    if (end > *prev) c->out[c->n_out++] = (uint32_t)end;
    *prev = end;
}

/* [^\s\p{L}\p{N}] for a character that exists */
static inline bool is_other(uint8_t f) {
    return f != 0 && !(f & (GT_U_WS | GT_U_LETTER | GT_U_NUMBER));
}

static inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d (case-insensitive when fold): returns the match length or 0. */
static size_t contraction(const split_ctx *c, size_t pos, size_t fe, bool fold) {
    if (ascii_at(c, pos, fe) != '\'' || pos + 1 >= fe) return 0;
    uint32_t n1 = ascii_at(c, pos + 1, fe);
    if (fold) n1 = ascii_lower(n1);
    if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') return 2;
    if (pos + 2 >= fe) return 0;
    uint32_t n2 = ascii_at(c, pos + 2, fe);
    if (fold) n2 = ascii_lower(n2);
    if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) return 3;
    return 0;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) (unmatched: single) */
static void split_gpt2(split_ctx *c, size_t fs, size_t fe) {
    size_t prev = fs;
    for (size_t pos = fs; pos < fe;) {
        size_t cl = contraction(c, pos, fe, false);
        if (cl) {
            pos += cl;
            add_end(c, &prev, pos);
            continue;
        }
        bool space = ascii_at(c, pos, fe) == ' ';
        uint8_t f2 = space ? flags_at(c, pos + 1, fe) : flags_at(c, pos, fe);
        if (f2 & GT_U_LETTER) {
            size_t p = pos + space;
            while (flags_at(c, p, fe) & GT_U_LETTER) p++;
            pos = p;
            add_end(c, &prev, pos);
            continue;
        }
        if (f2 & GT_U_NUMBER) {
            size_t p = pos + space;
            while (flags_at(c, p, fe) & GT_U_NUMBER) p++;
            pos = p;
            add_end(c, &prev, pos);
            continue;
        }
        if (is_other(f2)) {
            size_t p = pos + space;
            while (is_other(flags_at(c, p, fe))) p++;
            pos = p;
            add_end(c, &prev, pos);
            continue;
        }
        size_t nw = 0;
        while (flags_at(c, pos + nw, fe) & GT_U_WS) nw++;
        if (nw > 1 && pos + nw < fe) { /* \s+(?!\S): leave the last one to the next word */
            pos += nw - 1;
        } else if (nw > 0) {
            pos += nw;
        } else {
            pos += 1;
        }
        add_end(c, &prev, pos);
    }
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}
 * | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static void split_llama3(split_ctx *c, size_t fs, size_t fe, size_t max_digits) {
    size_t prev = fs;
    for (size_t pos = fs; pos < fe;) {
        size_t cl = contraction(c, pos, fe, true);
        if (cl) {
            pos += cl;
            add_end(c, &prev, pos);
            continue;
        }
        uint32_t ch = ascii_at(c, pos, fe);
        uint8_t f = flags_at(c, pos, fe);
        if (!(ch == '\r' || ch == '\n' || (f & GT_U_NUMBER)) &&
            ((f & GT_U_LETTER) || (flags_at(c, pos + 1, fe) & GT_U_LETTER))) {
            size_t p = pos + 1;
            while (flags_at(c, p, fe) & GT_U_LETTER) p++;
            pos = p;
            add_end(c, &prev, pos);
            continue;
        }
        if (f & GT_U_NUMBER) {
            size_t ini = pos;
            while (flags_at(c, pos, fe) & GT_U_NUMBER) {
                pos++;
                if (pos - ini >= max_digits) {
                    add_end(c, &prev, pos);
                    ini = pos;
                }
            }
            add_end(c, &prev, pos);
            continue;
        }
        bool space = ch == ' ';
        uint8_t f2 = space ? flags_at(c, pos + 1, fe) : f;
        if (!(f2 & (GT_U_WS | GT_U_LETTER | GT_U_NUMBER)) && f != 0) {
            size_t p = pos + space;
            while (is_other(flags_at(c, p, fe))) p++;
            while (ascii_at(c, p, fe) == '\r' || ascii_at(c, p, fe) == '\n') p++;
            pos = p;
            add_end(c, &prev, pos);
            continue;
        }
        size_t nw = 0, last_rn = 0;
        while (flags_at(c, pos + nw, fe) & GT_U_WS) {
            uint32_t c2 = ascii_at(c, pos + nw, fe);
            if (c2 == '\r' || c2 == '\n') last_rn = pos + nw + 1;
            nw++;
        }
        if (last_rn > 0) { /* \s*[\r\n]+ */
            pos = last_rn;
        } else if (nw > 1 && pos + nw < fe) {
            pos += nw - 1;
        } else if (nw > 0) {
            pos += nw;
        } else {
            pos += 1;
        }
        add_end(c, &prev, pos);
    }
}

/* Pieces of the characters in `set` (runs, or one each), with the text between kept as pieces. */
static void split_class(split_ctx *c, size_t fs, size_t fe, uint8_t set, bool runs) {
    size_t prev = fs;
    for (size_t pos = fs; pos < fe;) {
        if (!(c->flags[pos] & set)) {
            pos++;
            continue;
        }
        add_end(c, &prev, pos);
        pos++;
        if (runs)
            while (pos < fe && (c->flags[pos] & set)) pos++;
        add_end(c, &prev, pos);
    }
    add_end(c, &prev, fe);
}

/* [\p{P}\$\+<=>\^~\|]+ : ASCII punctuation and symbols except '`', and non-ASCII \p{P} */
static bool punct_like(const split_ctx *c, size_t i) {
    uint8_t b = c->text[c->off[i]];
    if (b < 0x80)
        return b > 0x20 && b < 0x7F && b != '`' && !(c->flags[i] & (GT_U_LETTER | GT_U_NUMBER));
    return c->flags[i] == GT_U_PUNCT; /* whitespace collapses before the category in llama.cpp */
}

static void split_punct_runs(split_ctx *c, size_t fs, size_t fe) {
    size_t prev = fs;
    for (size_t pos = fs; pos < fe;) {
        if (!punct_like(c, pos)) {
            pos++;
            continue;
        }
        add_end(c, &prev, pos);
        while (pos < fe && punct_like(c, pos)) pos++;
        add_end(c, &prev, pos);
    }
    add_end(c, &prev, fe);
}

/* [0-9][0-9][0-9]: leftmost non-overlapping triples of ASCII digits */
static void split_ascii_digit3(split_ctx *c, size_t fs, size_t fe) {
    size_t prev = fs;
    for (size_t pos = fs; pos < fe;) {
        bool triple = pos + 3 <= fe;
        for (size_t k = 0; triple && k < 3; k++) {
            uint32_t ch = ascii_at(c, pos + k, fe);
            triple = ch >= '0' && ch <= '9';
        }
        if (!triple) {
            pos++;
            continue;
        }
        add_end(c, &prev, pos);
        pos += 3;
        add_end(c, &prev, pos);
    }
    add_end(c, &prev, fe);
}

static void apply_step(split_ctx *c, gt_split_step step, size_t fs, size_t fe) {
    switch (step) {
    case GT_SPLIT_GPT2: split_gpt2(c, fs, fe); break;
    case GT_SPLIT_LLAMA3: split_llama3(c, fs, fe, 3); break;
    case GT_SPLIT_QWEN2: split_llama3(c, fs, fe, 1); break;
    case GT_SPLIT_EACH_NUMBER: split_class(c, fs, fe, GT_U_NUMBER, false); break;
    case GT_SPLIT_NUMBER_RUNS: split_class(c, fs, fe, GT_U_NUMBER, true); break;
    case GT_SPLIT_PUNCT_RUNS: split_punct_runs(c, fs, fe); break;
    case GT_SPLIT_ASCII_DIGIT3: split_ascii_digit3(c, fs, fe); break;
    }
}

bool gt_bpe_encode_fragment(const gt_tokenizer *t, const uint8_t *text, size_t len, gt_work *w,
                            gt_ids *out) {
    if (len == 0) return true;
    /* code points: at most one per byte */
    if (!gt_buf_reserve(&w->cp_off, (len + 1) * sizeof(uint32_t)) ||
        !gt_buf_reserve(&w->cp_flags, len + 1) ||
        !gt_buf_reserve(&w->bounds_a, (len + 1) * sizeof(uint32_t)) ||
        !gt_buf_reserve(&w->bounds_b, (len + 1) * sizeof(uint32_t)))
        return false;
    uint32_t *off = w->cp_off.p;
    uint8_t *fl = w->cp_flags.p;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t l = gt_utf8_decode_lenient(text + i, len - i, &cp);
        off[n] = (uint32_t)i;
        fl[n] = gt_unicode_flags(cp);
        n++;
        i += l;
    }
    off[n] = (uint32_t)len;

    uint32_t *cur = w->bounds_a.p, *nxt = w->bounds_b.p;
    size_t n_cur = 1;
    cur[0] = (uint32_t)n;
    for (uint32_t s = 0; s < t->n_steps; s++) {
        split_ctx c = {text, off, fl, nxt, 0};
        size_t start = 0;
        for (size_t k = 0; k < n_cur; k++) {
            apply_step(&c, t->steps[s], start, cur[k]);
            start = cur[k];
        }
        uint32_t *tmp = cur;
        cur = nxt;
        nxt = tmp;
        n_cur = c.n_out;
    }

    /* each word: bytes -> GPT-2 code points (1 or 2 UTF-8 bytes each) -> merges */
    size_t start = 0;
    for (size_t k = 0; k < n_cur; k++) {
        size_t b0 = off[start], b1 = off[cur[k]];
        start = cur[k];
        if (!gt_buf_reserve(&w->word, 2 * (b1 - b0))) return false;
        uint8_t *wd = w->word.p;
        size_t wl = 0;
        for (size_t i = b0; i < b1; i++) {
            uint8_t b = text[i];
            wd[wl++] = t->byte_enc[b][0];
            if (t->byte_enc_len[b] == 2) wd[wl++] = t->byte_enc[b][1];
        }
        if (!gt_bpe_encode_word(t, wd, wl, w, out)) return false;
    }
    return true;
}
