/* Unicode facts for the pre-tokenizers: a flag byte per code point (category class + White_Space)
 * from the generated table in unicode_tables.c, and a lenient UTF-8 decoder that mirrors the one
 * llama.cpp splits text with. */
#ifndef GEIST_TOKENIZER_UNICODE_H
#define GEIST_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Flag bits (gen_unicode_tables.py writes the same values). Every code point below 0x110000 has
 * exactly one category bit; WS may be added to it. */
#define GT_U_NUMBER 0x01u    /* \p{N} */
#define GT_U_LETTER 0x02u    /* \p{L} */
#define GT_U_WS 0x04u        /* White_Space property (regex \s) */
#define GT_U_PUNCT 0x08u     /* \p{P} */
#define GT_U_SYMBOL 0x10u    /* \p{S} */
#define GT_U_MARK 0x20u      /* \p{M} */
#define GT_U_SEPARATOR 0x40u /* \p{Z} */
#define GT_U_OTHER 0x80u     /* \p{C}, and code points past U+10FFFF */

extern const uint32_t gt_unicode_ranges[];
extern const uint32_t gt_unicode_n_ranges;
extern const uint8_t gt_unicode_ascii[128];

static inline uint8_t gt_unicode_flags(uint32_t cp) {
    if (cp < 128) return gt_unicode_ascii[cp];
    if (cp >= 0x110000u) return GT_U_OTHER;
    /* last entry whose start <= cp */
    uint32_t lo = 0, hi = gt_unicode_n_ranges;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if ((gt_unicode_ranges[mid] >> 8) <= cp) lo = mid;
        else hi = mid;
    }
    return (uint8_t)(gt_unicode_ranges[lo] & 0xFFu);
}

/* Decodes one code point at s[0..n) (n >= 1) the way llama.cpp does: the lead byte fixes the
 * length, continuation bytes must be 10xxxxxx and must be present; overlong forms and surrogates
 * are accepted. Returns the byte length (>= 1); *cp = 0xFFFD and 1 for an invalid byte. */
static inline size_t gt_utf8_decode_lenient(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t len;
    uint32_t v;
    if (!(b & 0x40)) {
        len = 0;
        v = 0;
    } else if (!(b & 0x20)) {
        len = 2;
        v = b & 0x1Fu;
    } else if (!(b & 0x10)) {
        len = 3;
        v = b & 0x0Fu;
    } else if (!(b & 0x08)) {
        len = 4;
        v = b & 0x07u;
    } else {
        len = 0;
        v = 0;
    }
    if (len == 0 || len > n) {
        *cp = 0xFFFDu;
        return 1;
    }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0u) != 0x80u) {
            *cp = 0xFFFDu;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    *cp = v;
    return len;
}

/* Encodes cp (<= 0x10FFFF) as UTF-8 into out (4 bytes room); returns the length. */
static inline size_t gt_utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

#endif
