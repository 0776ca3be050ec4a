/* Tokenizers built from GGUF metadata: byte-level BPE ("gpt2") and SentencePiece ("llama").
 *
 * Behaviour follows llama.cpp's vocabulary code (llama-vocab.cpp / unicode.cpp, as vendored in
 * llama-cpp-python 0.3.36, which made the reference ids): the same special-token partition, the
 * split rules per `tokenizer.ggml.pre` (smollm, default, gpt-2/gpt2, llama3/llama-bpe, qwen2 and
 * their aliases; others give GEIST_ERR_UNSUPPORTED), BPE merge order and SentencePiece bigram
 * merging, and a Unicode table (unicode_tables.c, Unicode 15.1) that classifies every code point
 * as llama.cpp's does. Deliberate differences, all outside valid-UTF-8 tokenization:
 *  - invalid UTF-8 keeps its bytes (see gt_tokenizer_encode); llama.cpp substitutes U+FFFD (BPE)
 *    or lets a broken sequence swallow the bytes after it (SentencePiece);
 *  - detokenization never applies clean_up_tokenization_spaces (" ." -> "."), which llama.cpp's
 *    llama_detokenize does for BPE vocabularies whose pre-tokenizer keeps it (default, gpt-2,
 *    llama3, ...; not smollm, qwen2 or SentencePiece): pieces stay lossless and streaming equals
 *    whole-sequence detokenization;
 *  - where llama.cpp depends on hash-map or unstable-sort order (the EOT token found by its text
 *    when the metadata has none; special tokens of equal length overlapping in the text) geist
 *    takes list order / the lower id;
 *  - a vocabulary with empty or duplicate strings loads (an empty string never matches; the
 *    first id of a duplicate wins) where current llama.cpp renames or refuses them.
 * Bytes a byte-level vocabulary has no symbol for (SmolLM2 lacks 0x04, 0x06, ...) are dropped,
 * as in llama.cpp.
 *
 * A tokenizer is immutable after gt_tokenizer_create() and every call below is thread-safe: all
 * scratch memory belongs to the call. Token strings, merges and scores stay in the GGUF span; only
 * index tables (offsets, hash tables, attributes, the special-token list) are allocated. */
#ifndef GEIST_TOKENIZER_H
#define GEIST_TOKENIZER_H

#include <stdbool.h>

#include "../gguf/gguf.h"

struct gt_tokenizer;
typedef struct gt_tokenizer gt_tokenizer;

/* Token attributes: bit flags with llama.cpp's llama_token_attr values. The GGUF token_type
 * (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte) picks one; llama.cpp's load
 * rules may add CONTROL to end-of-generation tokens found by their text. */
enum {
    GT_ATTR_UNDEFINED = 0,
    GT_ATTR_UNKNOWN = 1 << 0,
    GT_ATTR_UNUSED = 1 << 1,
    GT_ATTR_NORMAL = 1 << 2,
    GT_ATTR_CONTROL = 1 << 3,
    GT_ATTR_USER_DEFINED = 1 << 4,
    GT_ATTR_BYTE = 1 << 5
};

/* Builds the tokenizer from GGUF metadata only (tokenizer.ggml.*). A model without tokenizer
 * metadata (no tokenizer.ggml.model, or "none"/"no_vocab") gets *out = NULL and GEIST_OK: it can
 * still run on token ids. Errors: GEIST_ERR_UNSUPPORTED (a tokenizer model or pre-tokenizer geist
 * does not implement), GEIST_ERR_BAD_FORMAT (missing or mistyped arrays, add_bos without a BOS
 * id, ...), GEIST_ERR_OUT_OF_MEMORY. */
geist_status gt_tokenizer_create(const gguf_file *f, gt_tokenizer **out, gt_err *err);
void gt_tokenizer_free(gt_tokenizer *t);
/* Bytes the tokenizer allocated (its tables), for memory accounting. */
uint64_t gt_tokenizer_owned_bytes(const gt_tokenizer *t);

int32_t gt_tokenizer_n_vocab(const gt_tokenizer *t);

/* A growable id vector (tokenize output). Free with gt_ids_free. */
typedef struct gt_ids {
    int32_t *v;
    size_t n, cap;
} gt_ids;
void gt_ids_free(gt_ids *ids);

/* Flags of gt_tokenizer_encode: the GEIST_TOKENIZE_* values of geist.h. */
#define GT_ENCODE_ADD_SPECIAL 1u   /* BOS/EOS where the metadata asks */
#define GT_ENCODE_PARSE_SPECIAL 2u /* match control/unknown tokens written in the text */

/* Tokenizes len bytes of text, appending to out. As llama.cpp: user-defined tokens (token_type 4,
 * e.g. Gemma's "\n\n" or "<table>") are always matched whole before the text is split; control
 * and unknown tokens only with GT_ENCODE_PARSE_SPECIAL; BOS/EOS with GT_ENCODE_ADD_SPECIAL when
 * add_bos_token / add_eos_token say so. SentencePiece puts U+2581 for each space, plus one in front
 * of each text stretch that follows a special token (or starts the text) when add_space_prefix.
 * Invalid UTF-8: the pre-tokenizer classifies each bad byte as U+FFFD (llama.cpp's split) but
 * keeps the byte, so it becomes its byte-level BPE symbol or a <0xNN> byte-fallback token.
 * On failure out->n is restored. */
geist_status gt_tokenizer_encode(const gt_tokenizer *t, const char *text, size_t len,
                                 uint32_t flags, gt_ids *out, gt_err *err);

/* Longest piece any token can produce (a bound for scratch buffers). */
size_t gt_tokenizer_max_piece(const gt_tokenizer *t);

/* The bytes of token id (0 <= id < n_vocab, checked by the caller): control and unknown tokens
 * give their text only with render_special (else nothing); user-defined tokens their text; byte
 * tokens <0xNN> their byte; normal tokens their text with SentencePiece's U+2581 turned into ' '
 * or, for byte-level BPE, the GPT-2 byte-to-unicode mapping undone; unused/undefined tokens give
 * nothing. strip_space drops one leading ' ' (SentencePiece's leading-space rule). Writes at most
 * cap bytes to dst (may be NULL when cap is 0) and returns the full length. */
size_t gt_tokenizer_piece(const gt_tokenizer *t, int32_t id, bool render_special,
                          bool strip_space, uint8_t *dst, size_t cap);

/* True when detokenizing a sequence drops one leading space from the first token's piece: the
 * metadata's add_space_prefix (llama.cpp's detokenize rule; false for both Gemma 3 and byte-level
 * BPE models). */
bool gt_tokenizer_strips_leading_space(const gt_tokenizer *t);

typedef struct gt_special_ids {
    int32_t bos, eos, eot, unk, pad; /* -1 where none */
    bool add_bos, add_eos;
} gt_special_ids;
void gt_tokenizer_special(const gt_tokenizer *t, gt_special_ids *out);

/* End-of-generation tokens, chosen as llama.cpp does: EOS, EOT, and tokens whose text is one of
 * the known turn/text terminators ("<|im_end|>", "<end_of_turn>", "<|endoftext|>", ...). */
bool gt_tokenizer_is_eog(const gt_tokenizer *t, int32_t id);

/* The token's text as stored in the vocabulary (in the GGUF span); empty for a bad id. */
gt_str gt_tokenizer_token_text(const gt_tokenizer *t, int32_t id);
/* The id whose vocabulary text is exactly s[0..n), or -1. */
int32_t gt_tokenizer_find(const gt_tokenizer *t, const char *s, size_t n);
/* The token's attribute bits (GT_ATTR_*), 0 for a bad id. */
uint32_t gt_tokenizer_attr(const gt_tokenizer *t, int32_t id);

/* ---- Model-level text calls (internal; they report through gt_err only and never touch the
 * model's error slot or the thread's last error, so the runtime's scheduler thread may call
 * them). api/api_text.c wraps them for geist.h. */

/* Tokenizes text[0..len) with the model's tokenizer (flags: GEIST_TOKENIZE_*). On success *ids
 * is malloc'd (free(); never NULL, even when *n is 0) and holds *n ids. Errors: GEIST_ERR_STATE
 * (the model has no tokenizer), GEIST_ERR_INVALID_ARGUMENT (text NULL with len > 0, unknown
 * flags), the encoder's errors. */
geist_status gt_tokenize_alloc(const geist_model *m, const char *text, size_t len, uint32_t flags,
                               int32_t **ids, size_t *n, gt_err *err);
/* True when id ends generation for this model (gt_tokenizer_is_eog; false without a tokenizer). */
bool gt_token_is_end(const geist_model *m, int32_t id);

#endif
