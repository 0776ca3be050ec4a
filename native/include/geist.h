/*
 * geist.h — the C ABI of the geist inference core.
 *
 * This header is the only contract between the core and its front ends (the Python package, the
 * Godot extension, C/C++ games). Everything behind it may change; what is written here may not
 * change incompatibly without a version bump.
 *
 * Conventions (they hold for every call unless its comment says otherwise):
 *  - Every fallible call returns a geist_status. GEIST_OK is 0. On failure nothing is half-done:
 *    objects are left as they were and whatever the call allocated is freed.
 *  - A failed call records a human-readable message. geist_last_error() returns the message of the
 *    last failed call made on the calling thread (thread-local, so it is race-free). The handle the
 *    call acted on keeps a copy as well (geist_model_error(), geist_session_error(), ...), guarded
 *    by a lock, so another thread may read it.
 *  - Option structs start with `struct_size`; fill them with the matching *_default() call and then
 *    change fields. Passing NULL options means "all defaults".
 *  - Out-pointers are written only on success.
 *  - Handles are opaque. Freeing NULL is a no-op. Using a handle after freeing it is undefined.
 *  - Token ids are int32_t. Sizes and counts are size_t or int32_t as noted.
 *  - No call reads environment variables; all configuration is explicit.
 *
 * Threading (see docs and DESIGN.md): an engine and a loaded model are immutable after creation and
 * may be shared by any number of threads. A session may be used by one thread at a time; different
 * sessions of the same model may run on different threads at once. Calls that run the model on the
 * caller's thread (prefill, decode, eval, generate; on a device, logits, snapshot and fork too,
 * after a greedy request left the session's last logits there: they run its last token again)
 * use up to ~66 KiB of that thread's stack in
 * the cpu_x86 kernels (gcc -fstack-usage: vnni_matmul_q 7,216 + vnni_rows16 59,392 bytes with
 * AVX-512 VNNI; avx2_matmul_q 36,176 bytes on AVX2-only CPUs); the
 * async runtime (geist_submit) runs them on its own threads.
 */
#ifndef GEIST_H
#define GEIST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define GEIST_API __declspec(dllexport)
#else
#define GEIST_API __attribute__((visibility("default")))
#endif

#define GEIST_ABI_VERSION 2

/* ---------------------------------------------------------------------------------------------- */
/* Status and errors                                                                              */

typedef enum geist_status {
    GEIST_OK = 0,
    GEIST_ERR_INVALID_ARGUMENT = 1, /* a NULL handle, a bad option value, a token id out of range */
    GEIST_ERR_OUT_OF_MEMORY = 2,    /* an allocation failed */
    GEIST_ERR_IO = 3,               /* a file could not be opened or mapped */
    GEIST_ERR_BAD_FORMAT = 4,       /* the GGUF bytes are corrupt or truncated */
    GEIST_ERR_UNSUPPORTED = 5,      /* well-formed but not supported: version, arch, tensor type */
    GEIST_ERR_CAPACITY = 6,         /* a prompt or step would pass the session's max_seq_len */
    GEIST_ERR_STATE = 7,            /* the call does not fit the object's state (no logits yet) */
    GEIST_ERR_BUFFER_TOO_SMALL = 8, /* an output buffer is too small; *needed says how much */
    GEIST_ERR_INTERNAL = 9          /* a bug in geist; please report it with the message */
} geist_status;

/* Static name of a status ("GEIST_ERR_BAD_FORMAT"); never NULL. */
GEIST_API const char *geist_status_name(geist_status status);

/* Copies the message of the last failed call on this thread into buf (NUL-terminated, truncated
 * to cap). Returns the full message length (excluding NUL). An empty message if none failed yet. */
GEIST_API size_t geist_last_error(char *buf, size_t cap);

/* Library version string, e.g. "0.1.0"; static. */
GEIST_API const char *geist_version(void);

/* ---------------------------------------------------------------------------------------------- */
/* Engine: chooses the backend and owns what all models share.                                    */

typedef struct geist_engine geist_engine;

/* Arithmetic of products with quantized weights (geist_engine_options.activations). */
typedef enum geist_activations {
    /* Default: activations are rounded to 8-bit blocks before the product, as llama.cpp does;
     * every backend computes this same function (SIMD backends with integer dot products). */
    GEIST_ACTIVATIONS_Q8 = 0,
    /* Exact float activations: the plain mathematical model, for checking against float64
     * references. Only cpu_scalar offers it (others: GEIST_ERR_UNSUPPORTED). */
    GEIST_ACTIVATIONS_F32 = 1
} geist_activations;

typedef struct geist_engine_options {
    uint32_t struct_size;
    /* Backend name: "cpu_scalar" (the reference), "cpu_x86", "vulkan", or NULL / "auto" for the
     * best available CPU backend ("auto" never picks a GPU: ask for "vulkan" by name). */
    const char *backend;
    /* Worker threads for backends that use them; 0 = default (all cores minus one, at least 1). */
    int32_t n_threads;
    int32_t activations; /* a geist_activations; default GEIST_ACTIVATIONS_Q8 */
    /* Device backends (vulkan): which device. NULL or "auto": the first discrete GPU, else the
     * first integrated one, else any other (a CPU implementation such as lavapipe), in the
     * loader's order; a model too big for the chosen device's memory fails to load (nothing is
     * left allocated). A decimal index ("0", "1") picks that device in the loader's order; any
     * other text picks the first device whose name contains it ("llvmpipe", "NVIDIA"). Only a
     * device with Vulkan 1.2, a compute queue and 32 KiB of shared memory a workgroup is usable
     * (geist's kernels take up to that; phones' GPUs offer 32 KiB, desktop ones more): "auto"
     * passes over the others, and picking one by index or name fails saying why.
     * Host backends ignore it. */
    const char *device;
    /* Device backends: most bytes of device memory the engine may allocate (weights, KV,
     * scratch; a game's budget); 0 = what the device has. Past it a load or session fails with
     * GEIST_ERR_OUT_OF_MEMORY and nothing stays allocated. */
    uint64_t device_memory_limit;
    uint32_t device_flags; /* GEIST_DEVICE_* bits */
    /* Device backends: the Vulkan loader library to open (a game shipping its own); NULL = the
     * system's (libvulkan.so.1, vulkan-1.dll, libvulkan.1.dylib / libMoltenVK.dylib). */
    const char *vulkan_loader;
    /* Device backends (vulkan): how decode rows attend. 1..GEIST_DEVICE_ATTN_CHUNK_MAX (4096):
     * the split attention, for more of a GPU: a session's rows of a step, when at most 16
     * (decode, a reply's line), attend over their positions in chunks of this many, one
     * workgroup per (row, head, chunk), the last chunk of a row to finish merging them (at most
     * 64 chunks: on longer contexts a chunk takes a multiple of this); that sums in another order, so logits differ from cpu_scalar's by
     * float rounding and, through the next product's 8-bit activations, sometimes by more
     * (docs/VULKAN.md "Exactness"). Rows whose positions fit one chunk, and longer steps
     * (prefill), stay unsplit. GEIST_DEVICE_ATTN_EXACT (-1): every row's attention is one
     * workgroup per (row, head) summing in cpu_scalar's order (logits bit for bit with
     * cpu_scalar on quantized weights with F16 KV). 0 (the default): the device's choice,
     * GEIST_DEVICE_ATTN_CHUNK_GPU on a GPU (on the H200 decode 1.2x faster at 128 positions and
     * 3.6x at 2048 than the exact order), the exact order on a CPU device (lavapipe). Metal
     * always runs the unsplit attention. */
    int32_t device_attn_chunk;
} geist_engine_options;

#define GEIST_DEVICE_ATTN_CHUNK_MAX 4096
#define GEIST_DEVICE_ATTN_EXACT (-1)
#define GEIST_DEVICE_ATTN_CHUNK_GPU 32

/* geist_engine_options.device_flags */
enum {
    /* Never read the weights in place through host-pointer import: always copy them to the
     * device (the fallback a device that refuses the import gets anyway). */
    GEIST_DEVICE_NO_IMPORT = 1u << 0,
    /* Profile the device steps: a timestamp after every dispatch (the GPU then idles a little
     * between dispatches: a few percent slower), and geist_model_device_stats splits the GPU
     * time by what the dispatches do (role_ns, role_calls). Without it those stay 0. */
    GEIST_DEVICE_PROFILE = 1u << 1,
    /* Integer dot products (VK_KHR_shader_integer_dot_product) in the quantized products: by
     * default used where the device reports them accelerated for packed 8-bit values (the H200
     * does; lavapipe does not). INT_DOT: wherever the device has them at all (engine creation
     * fails with GEIST_ERR_UNSUPPORTED where it has none); NO_INT_DOT: never. The sums are
     * integers: every choice gives the same bits. Not both. */
    GEIST_DEVICE_INT_DOT = 1u << 2,
    GEIST_DEVICE_NO_INT_DOT = 1u << 3,
    /* The attention one workgroup per query head (each loading its KV head's tiles for itself),
     * as Metal runs it. By default (vulkan) a workgroup takes up to 4 query heads that share a KV
     * head (grouped-query models: SmolLM2's 3, Gemma 3's 4) and loads each K and V tile once for
     * them: on a GPU for a session's prompt rows (more than 16 in a step), on a CPU device for
     * every step, where the rows' positions fit its shared scores (docs/VULKAN.md "The grouped
     * attention"). The same bits either way: for comparison. */
    GEIST_DEVICE_ATTN_PER_HEAD = 1u << 4,
    /* Fast decode (vulkan), not cpu_scalar's bits: logits within a tolerance (docs/VULKAN.md
     * "Fast products", "The fast attention"), the same greedy ids on the tested fixtures;
     * faster on a GPU, where a decode kernel's time is its workgroups' chain of dependent steps.
     * - Passes of one row (one NPC's decode step) multiply float activations by the weights
     *   unpacked on the fly, with the device's own arithmetic and order, where the default makes
     *   cpu_scalar's 8-bit activations and exact integer block sums in every product.
     * - Passes of one row a session (one NPC's step, or several decoding together) attend with
     *   subgroup sums and an online softmax, on devices that promise full subgroups of 8
     *   lanes or more (one size, or a size required through VK_EXT_subgroup_size_control).
     * Prompts and a reply's line (several rows of one session) keep the default. */
    GEIST_DEVICE_FAST = 1u << 5
};

GEIST_API void geist_engine_options_default(geist_engine_options *opts);

/* Creates an engine. Errors: GEIST_ERR_INVALID_ARGUMENT (unknown backend name),
 * GEIST_ERR_UNSUPPORTED (backend known but not usable on this machine). */
GEIST_API geist_status geist_engine_create(const geist_engine_options *opts, geist_engine **out);

/* Frees the engine: its async runtime stops (running requests end), and the rest goes once the
 * last model created from it is freed. Using the engine handle afterwards is an error. */
GEIST_API void geist_engine_free(geist_engine *engine);

/* Name of the engine's backend ("cpu_scalar"); valid while the engine lives. */
GEIST_API const char *geist_engine_backend_name(const geist_engine *engine);

/* Name of the engine's device ("llvmpipe (LLVM 15.0.6, 256 bits)"); "" for host backends. */
GEIST_API const char *geist_engine_device_name(const geist_engine *engine);

/* Names of all backends compiled into this library, comma-separated; static. */
GEIST_API const char *geist_backends_available(void);

/* ---------------------------------------------------------------------------------------------- */
/* Models                                                                                         */

typedef struct geist_model geist_model;

typedef struct geist_load_options {
    uint32_t struct_size;
    /* Reserved for options of later backends (repacking opt-in); must be 0. */
    uint32_t flags;
} geist_load_options;

GEIST_API void geist_load_options_default(geist_load_options *opts);

/* Loads a GGUF model from a byte span the caller owns.
 *
 * Zero-copy: the model aliases `data` for its whole life: tensors are views into it and metadata
 * strings are read from it. geist never writes to, copies or frees these bytes; a read-only mapping
 * is fine. THE CALLER MUST KEEP [data, data+size) ALIVE AND UNCHANGED UNTIL geist_model_free()
 * RETURNS for this model. Tensor data must start at an address aligned as the file says (the GGUF
 * alignment, 32 by default) relative to `data`; any malloc/mmap buffer qualifies.
 *
 * Every offset, size, count and type in the file is validated before use.
 * Errors: GEIST_ERR_BAD_FORMAT (corrupt/truncated; the message names the field),
 *         GEIST_ERR_UNSUPPORTED (GGUF version, architecture or tensor type not supported),
 *         GEIST_ERR_OUT_OF_MEMORY. */
GEIST_API geist_status geist_model_load_memory(geist_engine *engine, const void *data, size_t size,
                                               const geist_load_options *opts, geist_model **out);

/* Maps the file at `path` read-only and loads it as geist_model_load_memory() does; the mapping is
 * owned by the model and released by geist_model_free(). Errors as above plus GEIST_ERR_IO. */
GEIST_API geist_status geist_model_load_file(geist_engine *engine, const char *path,
                                             const geist_load_options *opts, geist_model **out);

/* Frees a model. Sessions and prefixes still alive keep it (and its engine) until the last of
 * them is freed, so any teardown order is safe; the handle must not be used afterwards. */
GEIST_API void geist_model_free(geist_model *model);

/* Copies the message of the last failed call on this model (any thread). Returns its length. */
GEIST_API size_t geist_model_error(geist_model *model, char *buf, size_t cap);

/* Model facts as a JSON object (architecture, sizes, tensor type counts, context length, the
 * layer recipe: rope style and scaling, QK and post norms, biases, soft-caps, tied output, ...).
 * Writes at most cap bytes (NUL-terminated) and sets *needed to the full length + 1.
 * GEIST_ERR_BUFFER_TOO_SMALL if cap < *needed. */
GEIST_API geist_status geist_model_info_json(const geist_model *model, char *buf, size_t cap,
                                             size_t *needed);

GEIST_API int32_t geist_model_n_vocab(const geist_model *model);
GEIST_API int32_t geist_model_n_ctx_train(const geist_model *model);

/* Resident bytes by category. Sizes are exact byte counts of what geist holds. */
typedef struct geist_memory_report {
    uint32_t struct_size;
    uint64_t weights_aliased; /* tensor bytes used in place in the caller's span / file mapping */
    uint64_t weights_owned;   /* tensor bytes geist copied or repacked (0 on cpu_scalar) */
    uint64_t metadata;        /* parsed GGUF tables: tensor infos, key/value index */
    uint64_t tokenizer;       /* tokenizer tables */
    uint64_t rope_tables;     /* precomputed RoPE frequencies */
    uint64_t kv_cache;        /* session: KV rows for max_seq_len */
    uint64_t scratch;         /* session: logits row and activation buffers it holds */
    uint64_t other;           /* anything else owned (handle structs, error buffers) */
    uint64_t mapped_file;     /* size of the file mapping owned by the model (load_file), else 0 */
    /* geist_prefix_memory: the prefix's KV (resident once, however many sessions read it).
     * geist_session_memory: the KV bytes of the shared prefix this session reads (not owned by
     * the session: do not add it to the session's own bytes). */
    uint64_t shared_prefix;
    /* Device backends (vulkan; 0 on the CPU backends). Model: the device memory holding weights
     * uploaded to it; session: its KV and the device scratch. */
    uint64_t device_local;
    uint64_t imported; /* caller or file pages the device reads in place (host-pointer import);
                        * also counted in weights_aliased: one copy, not two */
    uint64_t staging;  /* host-visible staging buffers still held */
} geist_memory_report;

GEIST_API geist_status geist_model_memory(const geist_model *model, geist_memory_report *out);

/* A device backend's forward-pass counters since the model's load (geist bench --backend vulkan
 * prints them as the per-step time split); all 0 on the CPU backends and before the first device
 * step. passes: command buffers submitted (a step of more rows than one pass holds takes
 * several); rows: rows run; logit_rows: rows whose logits came back (id_rows: rows whose greedy
 * id alone did); dispatches and barriers:
 * inside those passes; recorded: passes whose commands were recorded anew (the others resubmitted
 * the previous pass's recording unchanged). Host time in nanoseconds: plan_ns (the pass's inputs
 * and command list), record_ns (recording a command buffer, when one was), wait_ns (submit until
 * the device finished), readback_ns (copying logits out to the caller). gpu_ns: the device's own
 * time between timestamps at the start and end of the pass, summed over gpu_timed passes (0
 * where the queue keeps no timestamps). */
/* With GEIST_DEVICE_PROFILE: role_ns[r] is the GPU time (nanoseconds, by the timestamps between
 * dispatches: a dispatch's time includes its wait at the barrier before it) of the dispatches of
 * role r (geist_device_role), role_calls[r] their count; role_ns sums to gpu_ns. */
typedef enum geist_device_role {
    GEIST_ROLE_EMBED = 0,   /* the token embeddings */
    GEIST_ROLE_QKV,         /* the attention norm and the Q, K, V products (rotary inside) */
    GEIST_ROLE_QK_ROPE,     /* QK norms and the rotary kernel where they are not inside */
    GEIST_ROLE_KV_STORE,    /* K and V rows into the sessions' caches */
    GEIST_ROLE_ATTENTION,   /* scores, softmax and the sum of V (each chunk's, when split) */
    GEIST_ROLE_ATTN_MERGE,  /* the split attention's merge (vulkan: inside attention, 0) */
    GEIST_ROLE_ATTN_OUT,    /* the output projection into the residual (post-norm included) */
    GEIST_ROLE_FFN_UP,      /* the FFN norm and the gate/up products */
    GEIST_ROLE_FFN_ACT,     /* the gated activation where it is not inside a product */
    GEIST_ROLE_FFN_DOWN,    /* the down product into the residual (post-norm included) */
    GEIST_ROLE_OUTPUT,      /* the output norm and the logits product */
    GEIST_ROLE_LOGITS_COPY, /* the logits into host-readable memory */
    GEIST_ROLE_ARGMAX,      /* greedy ids picked on the device (rows that want only those) */
    GEIST_DEVICE_ROLES
} geist_device_role;

typedef struct geist_device_stats {
    uint32_t struct_size;
    uint64_t passes, rows, logit_rows, dispatches, barriers, recorded;
    uint64_t plan_ns, record_ns, wait_ns, readback_ns, gpu_ns, gpu_timed;
    uint64_t role_ns[16], role_calls[16]; /* GEIST_DEVICE_ROLES of them used (profiling) */
    uint64_t id_rows; /* rows whose greedy token was picked on the device: only its id came back
                       * (the runtime's greedy requests; their logits stayed there) */
    uint64_t fused_fma; /* 1 where the device's fma() rounds once, found by a probe at the first
                         * session (the kernels take it); 0: they emulate it (the same values) */
    uint64_t fast_attn_rows; /* rows that attended in GEIST_DEVICE_FAST's own attention (a fast
                              * pass on a device with subgroup sums; docs/VULKAN.md) */
    uint64_t fast_rows; /* rows of passes whose products ran on float activations
                         * (GEIST_DEVICE_FAST's: one session's decode, or several sessions'
                         * decoding together; docs/VULKAN.md) */
    uint64_t planned; /* passes whose commands were planned (the others: decode passes of the
                       * last one's shape, resubmitted without planning; docs/VULKAN.md) */
} geist_device_stats;

GEIST_API geist_status geist_model_device_stats(const geist_model *model, geist_device_stats *out);

/* Reads a metadata value as text (numbers printed, arrays summarised as "[array of N T]").
 * Same buffer rules as geist_model_info_json. GEIST_ERR_INVALID_ARGUMENT if the key is absent. */
GEIST_API geist_status geist_model_meta(const geist_model *model, const char *key, char *buf,
                                        size_t cap, size_t *needed);

/* ---------------------------------------------------------------------------------------------- */
/* Sessions: one conversation (one NPC) with its own KV cache.                                   */

typedef struct geist_session geist_session;

/* KV cache formats (docs/MEMORY.md gives bytes per mode). Attention reads each in place. */
typedef enum geist_kv_mode {
    GEIST_KV_F32 = 0,
    GEIST_KV_F16 = 1,
    GEIST_KV_INT8 = 2, /* symmetric 8-bit, one f32 scale per token and KV head */
    GEIST_KV_INT4 = 3, /* symmetric 4-bit, one f16 scale per token, KV head and 32 channels */
    GEIST_KV_KIVI2 = 4 /* KIVI 2-bit: K per channel over blocks of 32 tokens, V per token (groups
                        * of 32 channels); the newest tokens of an incomplete block stay F16 */
} geist_kv_mode;

typedef struct geist_session_options {
    uint32_t struct_size;
    /* Most tokens this session will ever hold (prompt + generated). The KV cache is sized from
     * this, never from the model's training context. Default 512. Must be 1..n_ctx_train. */
    int32_t max_seq_len;
    int32_t kv_mode; /* a geist_kv_mode; default GEIST_KV_F16 */
    uint64_t seed;   /* seed of the session's random generator; default 0 */
} geist_session_options;

GEIST_API void geist_session_options_default(geist_session_options *opts);

/* Creates a session of `model`. Allocates the whole KV cache now (so a game sees the cost up
 * front). The model must outlive the session. Errors: GEIST_ERR_INVALID_ARGUMENT,
 * GEIST_ERR_OUT_OF_MEMORY. */
GEIST_API geist_status geist_session_create(geist_model *model, const geist_session_options *opts,
                                            geist_session **out);

/* Frees a session. If a request of the async runtime is queued or running on it, the request is
 * cancelled first (it ends with a CANCELLED event) and the call waits for the current step. */
GEIST_API void geist_session_free(geist_session *session);

/* Copies the message of the last failed call on this session. Returns its length. */
GEIST_API size_t geist_session_error(geist_session *session, char *buf, size_t cap);

/* Appends tokens and runs them through the model; afterwards geist_session_logits() gives the
 * logits after the last token. GEIST_ERR_CAPACITY if n_past + n > max_seq_len: nothing is appended
 * and the session stays usable. GEIST_ERR_INVALID_ARGUMENT for ids outside [0, n_vocab). */
GEIST_API geist_status geist_session_prefill(geist_session *session, const int32_t *ids, size_t n);

/* Like prefill, but writes the logits of every appended position to `logits` (n * n_vocab floats,
 * row-major; row i = logits after ids[i]). Teacher forcing in one call. */
GEIST_API geist_status geist_session_eval(geist_session *session, const int32_t *ids, size_t n,
                                          float *logits);

/* Appends one token (a decode step). Same as prefill of one token. */
GEIST_API geist_status geist_session_decode(geist_session *session, int32_t id);

/* Pointer to the logits after the last processed token (n_vocab floats), owned by the session and
 * valid until the next call that changes the session. GEIST_ERR_STATE if no token was run yet. */
GEIST_API geist_status geist_session_logits(geist_session *session, const float **logits);

/* Tokens held (prompt + decoded). */
GEIST_API int32_t geist_session_n_past(const geist_session *session);
GEIST_API int32_t geist_session_max_seq_len(const geist_session *session);

/* Forgets all tokens; keeps the allocation. */
GEIST_API void geist_session_reset(geist_session *session);

GEIST_API geist_status geist_session_memory(const geist_session *session,
                                            geist_memory_report *out);

/* What geist_session_create(model, opts) would hold, without allocating anything: kv_cache,
 * scratch and other as geist_session_memory reports them for a new session (no shared prefix).
 * opts may be NULL (the defaults). Errors: GEIST_ERR_INVALID_ARGUMENT (as geist_session_create). */
GEIST_API geist_status geist_session_estimate(const geist_model *model,
                                              const geist_session_options *opts,
                                              geist_memory_report *out);

/* The session's KV mode (a geist_kv_mode). */
GEIST_API int32_t geist_session_kv_mode(const geist_session *session);

/* The token ids the session holds (n_past of them, a shared prefix's included). Buffer rules as
 * geist_tokenize (*n = n_past; GEIST_ERR_BUFFER_TOO_SMALL if cap < n_past). */
GEIST_API geist_status geist_session_tokens(const geist_session *session, int32_t *ids,
                                            size_t cap, size_t *n);

/* Rewinds to the first n tokens (n_prefix <= n <= n_past); n = n_past changes nothing. The
 * logits are dropped (decode or prefill next). GEIST_ERR_UNSUPPORTED when a sliding-window ring
 * already overwrote a position the rewound session would need (the session is unchanged).
 * KIVI: rewinding into a quantized block turns that block's kept tokens back into the F16
 * residual from their 2-bit values (lossy). */
GEIST_API geist_status geist_session_truncate(geist_session *session, int32_t n);

/* Writes a self-describing image of the session's state: a versioned header, the model's
 * identity (a hash of the GGUF header, metadata and tensor table), the KV mode, the shared
 * prefix's identity, the token ids, the KV of the positions still in use (not the cap), the
 * pending logits and the seed, and a checksum over all of it. Buffer rules as
 * geist_model_info_json: *needed = the image size; GEIST_ERR_BUFFER_TOO_SMALL if cap < it
 * (buf may be NULL with cap 0 to ask for the size). */
GEIST_API geist_status geist_session_snapshot(geist_session *session, void *buf, size_t cap,
                                              size_t *needed);

/* Replaces the session's state with an image from geist_session_snapshot(). Everything is
 * validated before the session is touched: GEIST_ERR_BAD_FORMAT (not an image, truncated,
 * checksum mismatch, inconsistent sizes), GEIST_ERR_INVALID_ARGUMENT (another model, another KV
 * mode, another shared prefix), GEIST_ERR_CAPACITY (more tokens than this session's
 * max_seq_len), GEIST_ERR_UNSUPPORTED (a newer image version). On error the session is
 * exactly as it was. A restored session continues bit-identically to the one snapshotted. */
GEIST_API geist_status geist_session_restore(geist_session *session, const void *image,
                                             size_t size);

/* A new session with the same model, options, shared prefix and state (a deep copy of the KV;
 * it continues bit-identically). Errors: GEIST_ERR_OUT_OF_MEMORY. */
GEIST_API geist_status geist_session_fork(geist_session *session, geist_session **out);

/* ---------------------------------------------------------------------------------------------- */
/* Shared prefixes: a persona or world prefix computed once, read by many sessions.              */

typedef struct geist_prefix geist_prefix;

/* Runs ids (n >= 1) through the model once and keeps their KV (in kv_mode) and the logits after
 * the last one. Sessions created on it read this KV in place (never copied) and append their own
 * tokens after it. The prefix is freed when geist_prefix_free() was called and its last session
 * is freed (reference counted; thread-safe). The model must outlive it. */
GEIST_API geist_status geist_prefix_create(geist_model *model, const int32_t *ids, size_t n,
                                           int32_t kv_mode, geist_prefix **out);
GEIST_API void geist_prefix_free(geist_prefix *prefix);
GEIST_API int32_t geist_prefix_n_tokens(const geist_prefix *prefix);
/* shared_prefix = the prefix's KV bytes; scratch = its logits row; other = its structs;
 * device_local = its KV on the device (device backends: computed there once, read in place). */
GEIST_API geist_status geist_prefix_memory(const geist_prefix *prefix, geist_memory_report *out);

/* Like geist_session_create, on a shared prefix: the session starts holding the prefix's tokens
 * (n_past = its length, its logits ready) and max_seq_len counts them too (it must exceed the
 * prefix's length); the session's own KV holds only the positions after the prefix. The
 * session's kv_mode applies to its own positions. */
GEIST_API geist_status geist_session_create_with_prefix(geist_model *model, geist_prefix *prefix,
                                                        const geist_session_options *opts,
                                                        geist_session **out);

/* ---------------------------------------------------------------------------------------------- */
/* Text: tokenizer and detokenizer (configured from the model's GGUF metadata only).             */
/* All of these are thread-safe: one model's tokenizer serves every session at once.             */

/* Flags of geist_tokenize. */
#define GEIST_TOKENIZE_ADD_SPECIAL 1u   /* add BOS/EOS where the metadata asks (add_bos_token...) */
/* Match control tokens ("<|im_start|>") written in the text; without this flag they are
 * ordinary text, so player input can never inject them. */
#define GEIST_TOKENIZE_PARSE_SPECIAL 2u

/* Tokenizes len bytes of UTF-8 text. Writes up to cap ids and sets *n_ids to the number the full
 * result has; GEIST_ERR_BUFFER_TOO_SMALL (nothing else changed) if cap < *n_ids.
 * Invalid UTF-8 bytes are tokenized as bytes (byte-level BPE) or byte-fallback tokens. */
GEIST_API geist_status geist_tokenize(const geist_model *model, const char *text, size_t len,
                                      uint32_t flags, int32_t *ids, size_t cap, size_t *n_ids);

/* Flags of geist_detokenize / geist_token_piece / the streaming detokenizer. */
#define GEIST_DETOKENIZE_RENDER_SPECIAL 1u /* write control tokens' text (else they add nothing) */

/* The raw bytes of one token (may be part of a UTF-8 character). *len = full length. Buffer rules
 * as geist_tokenize (GEIST_ERR_BUFFER_TOO_SMALL). */
GEIST_API geist_status geist_token_piece(const geist_model *model, int32_t id, uint32_t flags,
                                         char *buf, size_t cap, size_t *len);

/* Text of a whole id sequence (bytes joined; SentencePiece's leading-space rule applied once at
 * the start as the metadata says). Output is not NUL-terminated unless room remains. */
GEIST_API geist_status geist_detokenize(const geist_model *model, const int32_t *ids, size_t n,
                                        uint32_t flags, char *buf, size_t cap, size_t *len);

/* Streaming detokenizer: push ids one at a time; each push yields only complete UTF-8 characters
 * (possibly nothing), so its output is always valid UTF-8; the concatenation of all pieces plus
 * flush() equals geist_detokenize() whenever that text is valid UTF-8. Bytes that cannot complete
 * a character (byte tokens of broken UTF-8) come out of the stream as U+FFFD, where
 * geist_detokenize() returns them raw. */
typedef struct geist_detokenizer geist_detokenizer;
GEIST_API geist_status geist_detokenizer_create(const geist_model *model, uint32_t flags,
                                                geist_detokenizer **out);
GEIST_API void geist_detokenizer_free(geist_detokenizer *d);
/* Appends id and writes the newly completed text to buf (*len bytes, not NUL-terminated). On
 * GEIST_ERR_BUFFER_TOO_SMALL nothing is consumed and *len says how many bytes are needed. */
GEIST_API geist_status geist_detokenizer_push(geist_detokenizer *d, int32_t id, char *buf,
                                              size_t cap, size_t *len);
/* Writes held bytes that never completed a character (as U+FFFD each) and resets. */
GEIST_API geist_status geist_detokenizer_flush(geist_detokenizer *d, char *buf, size_t cap,
                                               size_t *len);

/* Special tokens (-1 where the model has none). */
typedef struct geist_special_tokens {
    uint32_t struct_size;
    int32_t bos, eos, eot, unk, pad;
    int32_t add_bos; /* 1 if the metadata asks to add BOS, else 0 */
    int32_t add_eos;
} geist_special_tokens;
GEIST_API geist_status geist_model_special_tokens(const geist_model *model,
                                                  geist_special_tokens *out);

/* 1 if id ends a generation (EOS, EOT, or a control token the chat template ends turns with). */
GEIST_API int32_t geist_token_is_end(const geist_model *model, int32_t id);

/* ---------------------------------------------------------------------------------------------- */
/* Chat templates                                                                                 */

typedef struct geist_chat_message {
    const char *role;    /* "system", "user", "assistant", ... (NUL-terminated UTF-8) */
    const char *content; /* NUL-terminated UTF-8 */
} geist_chat_message;

/* Renders a chat template (Jinja subset used by GGUF chat templates) for n messages.
 * tmpl: template source, or NULL for the model's own `tokenizer.chat_template` (a model without
 * one gets a ChatML template).
 * Buffer rules as geist_model_info_json (NUL-terminated, *needed = length + 1).
 * Errors: GEIST_ERR_BAD_FORMAT (template syntax error, message with position),
 *         GEIST_ERR_INVALID_ARGUMENT (raise_exception() in the template; its message). */
GEIST_API geist_status geist_chat_apply_template(const geist_model *model, const char *tmpl,
                                                 const geist_chat_message *messages, size_t n,
                                                 int32_t add_generation_prompt, char *buf,
                                                 size_t cap, size_t *needed);

/* Strings that end an assistant turn for this model's template family (e.g. "<|im_end|>",
 * "<end_of_turn>") plus the text of its EOS/EOT tokens when they are such markers. The strings
 * are static. Writes up to cap pointers, sets *n to the count; GEIST_ERR_BUFFER_TOO_SMALL if
 * cap < *n. */
GEIST_API geist_status geist_chat_stop_strings(const geist_model *model, const char **out,
                                               size_t cap, size_t *n);

/* ---------------------------------------------------------------------------------------------- */
/* Sampler chain: penalties -> logit bias / mask -> temperature -> top-k -> top-p -> min-p ->     */
/* draw. Temperature 0 is greedy. Allocates only at creation.                                     */

typedef struct geist_sampler geist_sampler;

typedef struct geist_sampler_options {
    uint32_t struct_size;
    float temperature;       /* default 0.8; 0 = greedy (argmax, lowest id on ties) */
    int32_t top_k;           /* default 40; 0 = off. Up to 1,024 is picked in one pass over the
                              * logits (Gemma 3's 262,144: ~0.06 ms a draw); with 0 (or more),
                              * top_p < 1 weighs every candidate and orders the best of them up
                              * to top-p's cut (or min-p's): ~2 ms for Gemma 3's own logits */
    float top_p;             /* default 0.95; 1 = off */
    float min_p;             /* default 0.05; 0 = off */
    float repeat_penalty;    /* default 1.0 (off); >1 penalises tokens in the window */
    float frequency_penalty; /* default 0 */
    float presence_penalty;  /* default 0 */
    int32_t penalty_last_n;  /* window of recent tokens for penalties; default 64; 0 = off */
    uint64_t seed;           /* default 0 */
} geist_sampler_options;

GEIST_API void geist_sampler_options_default(geist_sampler_options *opts);
/* n_vocab: size of the logits rows it will see (geist_model_n_vocab()). */
GEIST_API geist_status geist_sampler_create(int32_t n_vocab, const geist_sampler_options *opts,
                                            geist_sampler **out);
GEIST_API void geist_sampler_free(geist_sampler *s);
/* Replaces the options (the history and RNG state are kept unless the seed changes). */
GEIST_API geist_status geist_sampler_set_options(geist_sampler *s,
                                                 const geist_sampler_options *opts);
/* Additive logit bias for n ids (n = 0 clears it). Copied. -INFINITY bans a token. */
GEIST_API geist_status geist_sampler_set_logit_bias(geist_sampler *s, const int32_t *ids,
                                                    const float *bias, size_t n);
/* Token mask hook: called before each draw with the candidate logits (n_vocab floats, writable);
 * the callback may set entries to -INFINITY (grammars). NULL removes it. */
typedef void (*geist_logits_hook)(void *user, float *logits, int32_t n_vocab);
GEIST_API geist_status geist_sampler_set_hook(geist_sampler *s, geist_logits_hook hook,
                                              void *user);
/* Draws a token from logits (n_vocab floats; not modified) and records it in the history. */
GEIST_API geist_status geist_sampler_sample(geist_sampler *s, const float *logits,
                                            int32_t *out_id);
/* Records a token in the penalty history without drawing (e.g. prompt tokens). */
GEIST_API void geist_sampler_accept(geist_sampler *s, int32_t id);
/* Clears the history and reseeds with the options' seed. */
GEIST_API void geist_sampler_reset(geist_sampler *s);

/* ---------------------------------------------------------------------------------------------- */
/* Runtime: asynchronous generation for games. The engine runs requests on its worker pool,     */
/* batching the decode steps of all active sessions; the game drains events on its own thread.  */

/* How a messages request fits its session (geist_request.context). The conversation is the
 * whole list of messages so far, every time: the core renders it with the model's chat template,
 * keeps the KV of the longest token prefix the session already holds (only the rest is
 * prefilled) and, when the conversation plus reply_reserve would not fit max_seq_len, drops the
 * oldest turns. A dropped turn changes every position after it, so a trim drops a quarter of the
 * cap more than needed: the turns that follow reuse the KV again until the next trim. */
typedef struct geist_context_policy {
    /* 1 (default): drop the oldest turns (a turn starts at a "user" message) between the kept
     * leading messages and the kept last ones; 0: never drop (a conversation that does not fit
     * with one token to spare fails with GEIST_ERR_CAPACITY). */
    int32_t trim;
    /* Leading messages never dropped: -1 (default) = the leading "system" messages (persona). */
    int32_t keep_first;
    /* Messages at the end never dropped; default 1 (the player's line). */
    int32_t keep_last;
    /* Tokens kept free for the reply when trimming: -1 (default) = max_tokens capped to half of
     * max_seq_len. A conversation that fits only without its reserve still runs (the reply may
     * then end with GEIST_FINISH_CAPACITY). */
    int32_t reply_reserve;
} geist_context_policy;

/* Constrained output (docs/GRAMMAR.md): a request may carry a grammar or a JSON schema. */
typedef enum geist_grammar_kind {
    GEIST_GRAMMAR_NONE = 0,
    GEIST_GRAMMAR_GBNF = 1,       /* llama.cpp's GBNF syntax (rules, | ( ) * + ? {m,n}, classes) */
    GEIST_GRAMMAR_JSON_SCHEMA = 2 /* a JSON Schema of the documented subset; compact JSON out */
} geist_grammar_kind;

/* Compiles a grammar or schema without generating, to report errors early (a front end's
 * validation). model may be NULL (syntax and limits only; a model also builds its vocabulary
 * cache and caches the compiled grammar for later requests). A check with a model also precomputes
 * the grammar's token classes (Gemma 3's 262k vocabulary: about 25 ms for an NPC's action
 * schema) on the calling thread; geist_submit only compiles the rules (the token classes follow
 * on the runtime's thread, before the request's first mask), so a game may call this at load to
 * have even that done before the first reply. Errors: GEIST_ERR_INVALID_ARGUMENT
 * with a message (geist_last_error) naming the line/column or schema path and the problem. */
GEIST_API geist_status geist_grammar_check(geist_model *model, const char *text, int32_t kind);

/* The GBNF grammar geist compiles a JSON schema to (what GEIST_GRAMMAR_JSON_SCHEMA runs): written
 * to buf (NUL-terminated, truncated to cap); *len = its full length. GEIST_ERR_BUFFER_TOO_SMALL
 * when cap <= *len. Errors as geist_grammar_check. */
GEIST_API geist_status geist_json_schema_to_gbnf(const char *schema, char *buf, size_t cap,
                                                 size_t *len);

/* A grammar matcher for front ends that run their own sampling loop (and for tests/benchmarks):
 * the same compiled grammar (per-model cache) and masks the runtime applies. Not thread-safe per
 * matcher; different matchers are independent. */
typedef struct geist_matcher geist_matcher;
GEIST_API geist_status geist_matcher_create(geist_model *model, const char *text, int32_t kind,
                                            geist_matcher **out);
GEIST_API void geist_matcher_free(geist_matcher *m);
/* Writes the allowed tokens: bit (id % 32) of bits[id / 32]; n_words >= (n_vocab + 31) / 32.
 * End-of-generation tokens are allowed where the grammar may end; other special tokens never. */
GEIST_API geist_status geist_matcher_mask(geist_matcher *m, uint32_t *bits, size_t n_words);
/* Advances by one allowed token (GEIST_ERR_INVALID_ARGUMENT for a token the mask forbids; the
 * state is unchanged then). GEIST_ERR_CAPACITY when an allowed token would leave more parses
 * alive together than the bound (the mask checks each parse alone; a very ambiguous grammar
 * such as ("a"+)+ gets there): the matcher is then unusable, and a request fails with it. */
GEIST_API geist_status geist_matcher_accept(geist_matcher *m, int32_t token);
/* 1 when the grammar may end here, else 0. */
GEIST_API int32_t geist_matcher_can_end(const geist_matcher *m);
/* 1 when nothing but the end can follow (or the end was accepted), else 0. */
GEIST_API int32_t geist_matcher_is_done(const geist_matcher *m);

typedef struct geist_request {
    uint32_t struct_size;
    /* The prompt: exactly one of text, ids or messages. Text is tokenized with the model's
     * tokenizer (BOS added only when the session is empty). Messages are the whole conversation:
     * rendered with the model's chat template and the generation prompt, fitted to the session
     * as `context` says (KV reuse, trimming), and the template's end-of-turn strings
     * (geist_chat_stop_strings) are added to `stop`; the sampler's seed is mixed with the
     * conversation's length, so each turn draws anew and a restored session draws as the
     * original did. All of this runs on the runtime's thread, never the caller's. An ids prompt
     * that cannot fit the session fails at once with GEIST_ERR_CAPACITY. */
    const char *text; /* UTF-8, NUL-terminated; player text is never parsed for control tokens */
    const int32_t *ids;
    size_t n_ids;
    const geist_chat_message *messages;
    size_t n_messages;
    geist_sampler_options sampler; /* temperature 0 = greedy */
    int32_t max_tokens;            /* default 128 */
    const char *const *stop;       /* stop strings (not included in the output), n_stop of them */
    size_t n_stop;
    int32_t priority;   /* higher runs first (on-screen NPCs); default 0 */
    uint64_t user_data; /* echoed in every event of the request */
    geist_context_policy context; /* messages requests only */
    /* Constrained output: NULL = none. The grammar's mask applies to the logits row before the
     * sampler (penalties, bias, top-k/top-p/min-p, temperature), so an allowed token always
     * survives; end-of-generation tokens are allowed only where the grammar may end; special and
     * control tokens never. Compiled grammars are cached per model (same text and kind, same
     * compiled object; thread-safe). A grammar that does not compile fails geist_submit with
     * GEIST_ERR_INVALID_ARGUMENT. When no token is allowed, or the grammar cannot be completed
     * within the tokens left of max_tokens, the request finishes with GEIST_FINISH_GRAMMAR.
     * When the grammar admits nothing but its end, the request finishes with STOP. Under a
     * grammar the chat template's end strings are not stop strings (the grammar decides the end;
     * "<|im_end|>" written as text is content); the request's own stop strings still end the
     * reply where they match (STOP: the text is then only a prefix of a sentence). */
    const char *grammar;  /* NUL-terminated GBNF or JSON Schema text */
    int32_t grammar_kind; /* geist_grammar_kind (NONE: grammar is ignored) */
    /* NPC actions (see "Actions" below): the reply is speech, then optionally one call of one
     * of these actions; n_actions = 0 (default) = plain text. Copied at submit. */
    const struct geist_action *actions;
    size_t n_actions;
    int32_t action_choice; /* geist_action_choice; default GEIST_ACTION_AUTO */
} geist_request;

/* Actions: functions of the game an NPC may call in its reply.
 *
 * The reply format (constrained by a GBNF grammar built from the actions, so it always holds):
 *     <speech: one line of plain text without '<'; may be empty>
 *     <call>{"name":"<action name>","arguments":{<the action's parameters>}}
 * The call line is optional (GEIST_ACTION_AUTO) or required (GEIST_ACTION_REQUIRED); it follows
 * the speech after a newline (or starts the reply when the speech is empty), begins with the
 * marker `<call>` and holds compact JSON with exactly the keys "name" (one of the actions' names)
 * and "arguments" (an object matching that action's `parameters` schema). The reply ends after
 * the call. With GEIST_ACTION_REQUIRED, where the model would end its turn (its end-of-turn
 * tokens' probability) it starts the call line instead, and once the tokens left come down to
 * what the longest action's call needs, the call starts. The speech holds no '<', so a model
 * cannot write a turn marker such as "<|im_end|>" as text. Stop strings (the request's and the
 * template's) apply to the speech only: never to the newline that starts the call line nor to
 * the call (a stop string "\n" or one inside a string argument cannot cut the call).
 *
 * Events: the TOKEN pieces and the FINISHED text are the speech only (the newline before the
 * marker, the marker and the call are never streamed: text that could begin the marker is held
 * back, like a stop string). When the reply ends with a complete call, one GEIST_EVENT_ACTION
 * (text = the call's JSON) comes right before FINISHED; a call cut short (max_tokens, capacity,
 * cancel) gives no ACTION event.
 *
 * The prompt, with messages: when the model's chat template reads the variable `tools` (a tool
 * section, as many templates have), the actions are rendered through it as transformers'
 * apply_chat_template(tools=...) list, [{"type": "function", "function": {"name",
 * "description", "parameters"}}, ...], and the first system message gets only the last line of
 * the plain format below, blank line first (a system message holding it is put first when there
 * is none); the reply is still the format above, whatever the template's own tool-call syntax
 * (the grammar holds it). A schema with a number that is not a 64-bit integer cannot go to the
 * template (its engine has integers only): the plain format then. Otherwise (neither SmolLM2's
 * nor Gemma 3's template has a tool section) the action list is appended to the first system
 * message (a system message is put first when there is none) in this plain format:
 *     (blank line)
 *     The game lets you act. Your actions:
 *     - <name>: <description> Arguments: <parameters schema, on one line>
 *     - <name>: <description> No arguments.
 *     Reply in character in one short line. To act, add a second line: <call>{"name":"<first
 *     action>","arguments":{...}}
 * (GEIST_ACTION_REQUIRED: "Reply in character in one short line, then act on a second line:
 * ..."). A text prompt gets the same section (without the blank line, then a blank line) before
 * the text, whatever the template; an ids prompt gets nothing (the caller renders it).
 *
 * Checked at submit (GEIST_ERR_INVALID_ARGUMENT, nothing queued): names match
 * [A-Za-z_][A-Za-z0-9_]{0,63} and are unique, 1..GEIST_MAX_ACTIONS actions, each parameters
 * schema compiles (the grammar engine's JSON Schema subset, an object), no `grammar` together
 * with actions, action_choice is one of geist_action_choice. */
#define GEIST_MAX_ACTIONS 64
typedef struct geist_action {
    const char *name;        /* NUL-terminated */
    const char *description; /* NULL or NUL-terminated: what the action does, for the prompt */
    const char *parameters;  /* a JSON Schema of the arguments object (the grammar engine's
                              * subset); NULL = no arguments ({}) */
} geist_action;

typedef enum geist_action_choice {
    GEIST_ACTION_AUTO = 0,    /* speech, optionally one call */
    GEIST_ACTION_REQUIRED = 1 /* speech (may be empty), then exactly one call */
} geist_action_choice;

GEIST_API void geist_request_default(geist_request *r);

/* Queues a request on a session. All inputs are copied; nothing runs on the caller's thread.
 * A session has at most one active request: GEIST_ERR_STATE if one is queued or running.
 * Errors found later (a prompt over the cap, ...) arrive as a FAILED event. */
GEIST_API geist_status geist_submit(geist_engine *engine, geist_session *session,
                                    const geist_request *request, uint64_t *request_id);

/* Cancels a request (queued or running); it ends within one step with a FINISHED event whose
 * finish reason is GEIST_FINISH_CANCELLED. Unknown or ended ids: GEIST_ERR_INVALID_ARGUMENT. */
GEIST_API geist_status geist_cancel(geist_engine *engine, uint64_t request_id);

typedef enum geist_event_type {
    GEIST_EVENT_TOKEN = 1,    /* a token was generated; text = its piece (complete UTF-8, may be
                               * empty while a character is incomplete) */
    GEIST_EVENT_FINISHED = 2, /* the request ended; text = the whole reply, always equal to
                               * the concatenation of its TOKEN pieces (text held back because it
                               * could begin a stop string, or an incomplete UTF-8 character, is
                               * dropped when the reply ends without completing it). Only
                               * when memory runs out can a TOKEN event be dropped; the
                               * FINISHED text still holds the whole reply then */
    GEIST_EVENT_FAILED = 3,   /* the request failed; status + text = the message */
    GEIST_EVENT_ACTION = 4    /* the reply called an action (request.actions): text = the call
                               * as JSON {"name": ..., "arguments": {...}}; comes right before
                               * the request's FINISHED event, at most once */
} geist_event_type;

typedef enum geist_finish_reason {
    GEIST_FINISH_STOP = 0,     /* an end token or a stop string */
    GEIST_FINISH_LENGTH = 1,   /* max_tokens reached */
    GEIST_FINISH_CAPACITY = 2, /* the session's max_seq_len reached */
    GEIST_FINISH_CANCELLED = 3, /* geist_cancel, or the session was freed */
    GEIST_FINISH_GRAMMAR = 4    /* the grammar allows no token, or cannot be completed within
                                 * max_tokens (the text so far is a prefix of a valid output) */
} geist_finish_reason;

typedef struct geist_event {
    int32_t type; /* geist_event_type */
    uint64_t request_id;
    uint64_t user_data;
    geist_session *session;
    int32_t token;         /* TOKEN: the id */
    int32_t finish_reason; /* FINISHED: a geist_finish_reason */
    int32_t status;        /* FAILED: a geist_status */
    int32_t n_tokens;      /* FINISHED: tokens generated */
    int32_t n_prompt;      /* FINISHED/FAILED: prompt tokens this request ran through the model */
    int32_t n_reused;      /* FINISHED/FAILED: tokens the session already held and kept (KV) */
    int32_t n_dropped;     /* FINISHED/FAILED: messages the context policy dropped */
    const char *text;      /* see geist_event_type; owned by the engine, valid until the next
                            * geist_poll() on this engine */
    size_t text_len;
} geist_event;

/* Moves up to max_events queued events into `events` (oldest first) and returns how many. Waits
 * at most timeout_ms for the first one (0 = never waits). Call it from one thread (the game's
 * main thread). Every request ends with exactly one FINISHED or FAILED event. */
GEIST_API size_t geist_poll(geist_engine *engine, geist_event *events, size_t max_events,
                            int32_t timeout_ms);

/* Optional event callback (geist_runtime_options.on_event): called on the runtime's thread
 * instead of queueing for geist_poll(); ev->text is valid during the call only. It must return
 * quickly and must not free sessions or the engine. */
typedef void (*geist_event_callback)(void *user, const geist_event *ev);

/* Scheduling knobs. Each step runs the pending tokens of the active sessions of one model
 * together: higher priority first; among equal priorities the least recently served first (fair
 * progress for background NPCs). */
typedef struct geist_runtime_options {
    uint32_t struct_size;
    /* Worker time budget: at most budget_ms of compute per period_ms (e.g. 4 of 16: a quarter
     * of one frame), averaged over periods (a step is never split). 0 = no budget. */
    float budget_ms;
    float period_ms; /* default 16 */
    /* Prompt tokens one step may take from pending prefills, so a long new prompt does not
     * stall the replies of other sessions. Default 64. */
    int32_t prefill_chunk;
    /* Most rows (decode tokens + prompt tokens) one step runs. Default 64. */
    int32_t max_batch;
    geist_event_callback on_event; /* NULL (default): events queue for geist_poll() */
    void *on_event_user;
} geist_runtime_options;

GEIST_API void geist_runtime_options_default(geist_runtime_options *o);
GEIST_API geist_status geist_runtime_configure(geist_engine *engine,
                                               const geist_runtime_options *o);

/* ---------------------------------------------------------------------------------------------- */
/* Tensor type utilities (used by tests and tools).                                               */

/* Dequantizes n values of GGML tensor type `type` (n a multiple of the type's block size) from
 * `src` (`src_size` bytes, checked) into dst with the cpu_scalar kernels.
 * GEIST_ERR_UNSUPPORTED for a type geist cannot compute with. */
GEIST_API geist_status geist_dequantize(int32_t type, const void *src, size_t src_size, float *dst,
                                        size_t n);

/* Dot product of n values of type `type` at `row` with the float vector x, as the matrix kernels
 * of the named backend compute it (NULL = cpu_scalar). */
GEIST_API geist_status geist_vec_dot(const char *backend, int32_t type, const void *row,
                                     size_t row_size, const float *x, size_t n, float *out);

#ifdef __cplusplus
}
#endif

#endif /* GEIST_H */
