/* GGUF parsing and validation over a caller's read-only byte span.
 *
 * The parser never writes to the span and never reads outside it: every offset, size, count,
 * string length and type is checked with overflow-safe arithmetic before use. Strings and tensor
 * data stay in the span (gt_str and gguf_tensor.data point into it); only the index tables
 * (gguf_kv[], gguf_tensor[]) are allocated. */
#ifndef GEIST_GGUF_H
#define GEIST_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"

/* A string inside the span: not NUL-terminated. */
typedef struct gt_str {
    const char *ptr;
    uint64_t len;
} gt_str;

bool gt_str_eq(gt_str s, const char *cstr);

/* GGUF metadata value types (the spec's numbering). */
enum gguf_vtype {
    GGUF_VT_UINT8 = 0, GGUF_VT_INT8 = 1, GGUF_VT_UINT16 = 2, GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4, GGUF_VT_INT32 = 5, GGUF_VT_FLOAT32 = 6, GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8, GGUF_VT_ARRAY = 9, GGUF_VT_UINT64 = 10, GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12, GGUF_VT_COUNT = 13
};

typedef struct gguf_kv {
    gt_str key;
    uint32_t type; /* enum gguf_vtype */
    /* Scalar value (type != ARRAY), widened. */
    union {
        uint64_t u;
        int64_t i;
        double f;
        bool b;
        gt_str s;
    } v;
    /* Array value (type == ARRAY): element type, count, and the first element's bytes in the
     * span. Arrays of strings are validated element by element at parse time; walk them with
     * gt_gguf_str_array_next(). Arrays of arrays are rejected as unsupported. */
    uint32_t arr_type;
    uint64_t arr_len;
    const uint8_t *arr_data;
    uint64_t arr_bytes; /* size of the array payload in the span */
} gguf_kv;

#define GGUF_MAX_DIMS 4

typedef struct gguf_tensor {
    gt_str name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length (fastest varying); unused dims are 1 */
    uint32_t type;              /* GGML tensor type id */
    uint64_t offset;            /* relative to the data section */
    uint64_t nbytes;
    uint64_t nelements;
    const uint8_t *data; /* base + data_offset + offset, inside the span */
} gguf_tensor;

typedef struct gguf_file {
    const uint8_t *base;
    size_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset; /* start of the tensor data section, relative to base */
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
} gguf_file;

/* Parses and validates the whole header, metadata and tensor table. On failure returns a status
 * (GEIST_ERR_BAD_FORMAT / UNSUPPORTED / OUT_OF_MEMORY) with a message naming the problem and
 * leaves *out zeroed. Checks include: magic, version (2 and 3 read; 1 unsupported), counts vs. the
 * bytes left, string lengths, value types, duplicate keys and tensor names, general.alignment
 * (non-zero power of two), dims (1..4, each >= 1, element count without overflow, ne[0] a multiple
 * of the type's block size), known tensor type, each tensor's offset aligned and its data range
 * inside the span, no two tensors overlapping. */
geist_status gt_gguf_parse(const uint8_t *base, size_t size, gguf_file *out, gt_err *err);
void gt_gguf_free(gguf_file *f);

/* Bytes this parse allocated (index tables), for memory accounting. */
uint64_t gt_gguf_owned_bytes(const gguf_file *f);

const gguf_kv *gt_gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gt_gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters. Return false if the key is absent or its value does not convert exactly
 * (integers of any width are accepted when in range; floats from FLOAT32/FLOAT64). */
bool gt_gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gt_gguf_get_i32(const gguf_file *f, const char *key, int32_t *out);
bool gt_gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
bool gt_gguf_get_f32(const gguf_file *f, const char *key, float *out);
bool gt_gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gt_gguf_get_str(const gguf_file *f, const char *key, gt_str *out);

/* Walks an array of strings: *cursor starts at 0; each call writes the next element and advances.
 * Returns false at the end. The array was validated at parse time. */
bool gt_gguf_str_array_next(const gguf_kv *kv, uint64_t *cursor, gt_str *out);

/* Element i of a numeric array as double/int64 (i < arr_len, element type numeric). */
double gt_gguf_array_f64(const gguf_kv *kv, uint64_t i);
int64_t gt_gguf_array_i64(const gguf_kv *kv, uint64_t i);

/* Size in bytes of one value of a scalar type (0 for STRING/ARRAY/unknown). */
size_t gt_gguf_vtype_size(uint32_t type);
const char *gt_gguf_vtype_name(uint32_t type);

#endif
