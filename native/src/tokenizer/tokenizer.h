/* Tokenizers built from GGUF metadata: byte-level BPE ("gpt2") and SentencePiece ("llama"). */
#ifndef GEIST_TOKENIZER_H
#define GEIST_TOKENIZER_H

#include "../gguf/gguf.h"

struct gt_tokenizer;
typedef struct gt_tokenizer gt_tokenizer;

/* Builds the tokenizer from GGUF metadata only. A model without tokenizer metadata gets
 * *out = NULL and GEIST_OK (it can still run on token ids). */
geist_status gt_tokenizer_create(const gguf_file *f, gt_tokenizer **out, gt_err *err);
void gt_tokenizer_free(gt_tokenizer *t);
uint64_t gt_tokenizer_owned_bytes(const gt_tokenizer *t);

#endif
