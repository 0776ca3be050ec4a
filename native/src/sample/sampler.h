/* The sampler chain behind geist_sampler_* (geist.h).
 *
 * Exact semantics of one geist_sampler_sample() call, in order (n = n_vocab):
 *  1. Copy the logits row (never modified). NaN counts as -inf (never drawn); +inf as FLT_MAX.
 *  2. Penalties over the last min(penalty_last_n, tokens recorded) history tokens (a ring
 *     allocated at create; sample() and accept() record into it). For each distinct token t with
 *     c occurrences in that window, unless its logit is -inf:
 *       repetition (llama.cpp): l = l > 0 ? l / repeat_penalty : l * repeat_penalty
 *       then frequency and presence: l -= c * frequency_penalty + presence_penalty
 *  3. Logit bias: l[id] += bias (float add; -INFINITY bans a token; repeated ids add up).
 *  4. The hook, if set, sees the n floats and may write -INFINITY (or anything) into them.
 *  5. Candidates: every id whose logit is not -inf and not NaN. None left: the call fails with
 *     GEIST_ERR_INVALID_ARGUMENT and records nothing.
 *  6. temperature <= 0: greedy. The argmax, lowest id among equal maxima; no further stage runs
 *     and the random generator is not advanced.
 *  7. Temperature: s = (double)l / (double)temperature. Everything after works in double.
 *  8. Top-k (0 < k < candidates): keep the k best in the total order "higher s first, lower id
 *     first on equal s", so ties at the boundary keep the lowest ids.
 *  9. Softmax over the remaining candidates: w = exp(s - s_max), p = w / sum(w).
 * 10. Top-p (top_p < 1): in the same total order, keep the shortest prefix whose cumulative p is
 *     >= top_p (at least one token; top_p <= 0 keeps only the best).
 * 11. Min-p (min_p > 0): keep candidates with p >= min_p * p_max, i.e. w >= min_p.
 * 12. Draw: u = uniform [0,1) from the generator (53 bits) times the kept total weight; walk the
 *     kept candidates in their current order (id order when no stage sorted them, else the
 *     total order) and take the first whose running weight sum exceeds u.
 * 13. Record the drawn token in the history.
 *
 * The generator is xoshiro256** seeded with splitmix64(seed); it lives in the sampler, so equal
 * seeds, options, histories and logits give equal tokens on any thread. Every buffer (work row,
 * candidates, penalty counts, history ring) is allocated by create; set_options allocates only
 * when penalty_last_n grows past the ring, set_logit_bias only for its copy. A sampler is used by
 * one thread at a time; different samplers are independent. */
#ifndef GEIST_SAMPLER_H
#define GEIST_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/cpu.h"
#include "../util/util.h"
#include "geist.h"

/* Largest top_k that sample() selects in one pass over the logits (sampler.c's top-k pass);
 * a larger one lists every candidate and selects from the list (the same tokens, slower). */
#define GT_SAMPLER_TOPK_PASS 1024

/* Largest penalty_last_n accepted (the ring is allocated up front). */
#define GT_SAMPLER_MAX_PENALTY_WINDOW (1 << 20)

typedef struct gt_cand {
    double s; /* scaled logit */
    double w; /* exp(s - s_max) once computed */
    int32_t id;
} gt_cand;

struct geist_sampler {
    int32_t n_vocab;
    geist_sampler_options opts;
    uint64_t rng[4];
    float *work;      /* n_vocab: the logits being transformed */
    gt_cand *cand;    /* n_vocab: candidate list */
    int32_t *count;   /* n_vocab: occurrence counts, all zero between calls */
    int32_t *hist;    /* ring of recent tokens, hist_cap entries */
    int32_t hist_cap, hist_len, hist_head;
    int32_t *bias_id; /* logit bias, n_bias entries */
    float *bias_val;
    size_t n_bias;
    geist_logits_hook hook;
    void *hook_user;
    gt_simd simd; /* AVX2 where the CPU has it (create's default), or plain loops (the same ids) */
};

/* Checks option values (struct_size is the API's business). */
/* geist.h's sampler defaults (o not NULL); geist_sampler_options_default wraps it. */
void gt_sampler_options_default(geist_sampler_options *o);
geist_status gt_sampler_check_options(const geist_sampler_options *o, gt_err *err);

geist_status gt_sampler_create(int32_t n_vocab, const geist_sampler_options *o,
                               geist_sampler **out, gt_err *err);
void gt_sampler_free(geist_sampler *s);
geist_status gt_sampler_set_options(geist_sampler *s, const geist_sampler_options *o,
                                    gt_err *err);
geist_status gt_sampler_set_logit_bias(geist_sampler *s, const int32_t *ids, const float *bias,
                                       size_t n, gt_err *err);
void gt_sampler_set_hook(geist_sampler *s, geist_logits_hook hook, void *user);
/* The SIMD sample() may use: create sets GT_SIMD_AVX2 (the CPU's best); a runtime request sets
 * its engine's backend's, so a cpu_scalar engine samples with plain loops. */
void gt_sampler_set_simd(geist_sampler *s, gt_simd simd);
geist_status gt_sampler_sample(geist_sampler *s, const float *logits, int32_t *out_id,
                               gt_err *err);
/* True when sample() is the plain argmax of the logits as given (step 6 alone): temperature <= 0,
 * no penalty that changes a logit, no bias, no hook. */
bool gt_sampler_plain_greedy(const geist_sampler *s);
/* A token picked by that rule elsewhere (a device: backend.h's gt_dev_row.argmax; -1 when every
 * logit was NaN or -inf) taken as sample() would: recorded, or sample()'s error. */
geist_status gt_sampler_take_greedy(geist_sampler *s, int32_t id, int32_t *out_id, gt_err *err);
/* Records id in the history; ids outside [0, n_vocab) are ignored. */
void gt_sampler_accept(geist_sampler *s, int32_t id);
void gt_sampler_reset(geist_sampler *s);

#endif
