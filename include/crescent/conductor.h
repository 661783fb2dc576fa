/* crescent Conductor: KV-cache-aware global scheduler (Mooncake FAST'25,
 * Algorithm 1).  Prefix: cr_cond_.
 *
 * Pieces, each usable on its own:
 *   - prefix block hashing (XXH3-64 rolling hash over u32 token ids);
 *   - a global prefix index: which instance holds which block on which tier,
 *     longest-prefix match, per-(instance, tier) capacity with LRU eviction;
 *   - cost models (prefill, queueing, KV transfer, decode step);
 *   - a scheduler: policies random / load-balancing / local cache-aware /
 *     global cache-aware (Algorithm 1) / our own, SLO-based rejection.
 *
 * Status convention: 0 success, negative errno on error (see common.h).
 * Threads: no object is internally locked. A caller that shares an index or
 * a scheduler between threads serialises all calls on it (one mutex); the
 * free functions (hashing, cost models) are thread-safe.
 * Ownership: objects are created by *_create and released by *_destroy;
 * input arrays are read during the call only and never retained.
 */
#ifndef CRESCENT_CONDUCTOR_H
#define CRESCENT_CONDUCTOR_H

#include <stddef.h>
#include <stdint.h>

#include "crescent/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CR_COND_DEFAULT_BLOCK_TOKENS 512 /* tokens per block of the traces */
#define CR_COND_MAX_BLOCK_TOKENS 65536
#define CR_COND_MAX_INSTANCES 64         /* instances one index tracks (ids 0..63) */

/* ---- prefix block hashing --------------------------------------------- */
/* Convention (as Mooncake's conductor indexer):
 *   H(x)          = XXH3_64bits(x) with seed 0;
 *   block_i bytes = the block's token ids, each as 4 little-endian bytes;
 *   seq[0]        = H(block_0 bytes);
 *   seq[i]        = H(seq[i-1] as 8 LE bytes || H(block_i bytes) as 8 LE bytes).
 * Only full blocks are hashed: a trailing partial block has no hash (its KV
 * cannot be shared as a whole block). */

/* Returns H(tokens as LE u32 bytes). n may be 0 (hash of the empty input). */
CR_API uint64_t cr_cond_hash_block(const uint32_t *tokens, size_t n);

/* Returns seq[i] from seq[i-1] (prev) and H(block_i) (block_hash). */
CR_API uint64_t cr_cond_hash_chain(uint64_t prev, uint64_t block_hash);

/* Computes the rolling hashes of the n_tokens / block_tokens full blocks of
 * tokens into out[0..]. block_tokens in 1..CR_COND_MAX_BLOCK_TOKENS. Returns
 * 0 and sets *n_out, -EINVAL on bad arguments, -ENOSPC if out_cap is too
 * small (nothing written to *n_out then). */
CR_API int cr_cond_hash_tokens(const uint32_t *tokens, size_t n_tokens, uint32_t block_tokens,
                               uint64_t *out, size_t out_cap, size_t *n_out);

/* ---- global prefix index ---------------------------------------------- */

typedef enum cr_cond_tier {
    CR_COND_TIER_GPU = 0,
    CR_COND_TIER_DRAM = 1,
    CR_COND_TIER_DISK = 2,
    CR_COND_TIER_COUNT = 3
} cr_cond_tier_t;

typedef struct cr_cond_index cr_cond_index_t;

enum cr_cond_index_param_field {
    CR_COND_INDEX_PARAM_MAX_INSTANCES = 1u << 0,
    CR_COND_INDEX_PARAM_EXPECTED_BLOCKS = 1u << 1,
    CR_COND_INDEX_PARAM_MAX_ENTRIES = 1u << 2,
    CR_COND_INDEX_PARAM_DEFAULT_CAPACITY = 1u << 3,
};

typedef struct cr_cond_index_params {
    uint64_t field_mask;
    /* Instance ids are 0..max_instances-1; 1..CR_COND_MAX_INSTANCES. Default 64. */
    uint32_t max_instances;
    /* Distinct blocks expected (pre-sizes the table). Default 65536. */
    uint64_t expected_blocks;
    /* Hard bound on (block, instance, tier) entries; inserts beyond it fail
     * with -ENOSPC after evicting nothing. Default 1 << 30. */
    uint64_t max_entries;
    /* Capacity in blocks of every (instance, tier) until set otherwise;
     * 0 = unlimited. Default 0 for every tier. */
    uint64_t default_capacity[CR_COND_TIER_COUNT];
} cr_cond_index_params_t;

/* Creates an empty index. params may be NULL (all defaults). Returns 0 and
 * sets *out, -EINVAL, or -ENOMEM. Release with cr_cond_index_destroy(). */
CR_API int cr_cond_index_create(const cr_cond_index_params_t *params, cr_cond_index_t **out);
/* Frees the index and everything in it. NULL is ignored. */
CR_API void cr_cond_index_destroy(cr_cond_index_t *idx);

/* Sets the capacity in blocks of (instance, tier); 0 = unlimited. Shrinking
 * evicts least-recently-used blocks at once. Returns 0 or -EINVAL. */
CR_API int cr_cond_index_set_capacity(cr_cond_index_t *idx, uint32_t instance,
                                      cr_cond_tier_t tier, uint64_t blocks);

/* Records that instance holds blocks hashes[0..n) on tier, in that order,
 * and marks them most recently used (a block already there is only touched).
 * When the (instance, tier) is full its LRU blocks are evicted first; blocks
 * of this same call are never evicted by it (if n exceeds the capacity only
 * the last `capacity` blocks stay). *n_evicted (may be NULL) gets the number
 * evicted. Returns 0, -EINVAL, -ENOSPC (max_entries reached; blocks before
 * the failing one stay inserted), or -ENOMEM. */
CR_API int cr_cond_index_insert(cr_cond_index_t *idx, uint32_t instance, cr_cond_tier_t tier,
                                const uint64_t *hashes, size_t n, uint64_t *n_evicted);

/* Forgets blocks hashes[0..n) of instance on tier (absent ones are ignored).
 * Returns 0 or -EINVAL. */
CR_API int cr_cond_index_remove(cr_cond_index_t *idx, uint32_t instance, cr_cond_tier_t tier,
                                const uint64_t *hashes, size_t n);

/* Forgets everything instance holds on every tier (instance left the
 * cluster). Returns 0 or -EINVAL. */
CR_API int cr_cond_index_remove_instance(cr_cond_index_t *idx, uint32_t instance);

/* Marks hashes[0..n) that instance holds on any tier as most recently used
 * (a cache hit). Absent blocks are ignored. Returns 0 or -EINVAL. */
CR_API int cr_cond_index_touch(cr_cond_index_t *idx, uint32_t instance, const uint64_t *hashes,
                               size_t n);

/* Result of a longest-prefix match on one instance. */
typedef struct cr_cond_match {
    uint32_t blocks;                          /* longest prefix held, any tier */
    uint32_t tier_blocks[CR_COND_TIER_COUNT]; /* of those, how many on each tier
                                                 (a block on several tiers
                                                 counts on the fastest) */
} cr_cond_match_t;

/* Longest prefix of hashes[0..n) that instance holds (each block on any
 * tier). Returns 0 and fills *out, or -EINVAL. Does not touch LRU state. */
CR_API int cr_cond_index_match(const cr_cond_index_t *idx, uint32_t instance,
                               const uint64_t *hashes, size_t n, cr_cond_match_t *out);

/* Longest prefix length (blocks, any tier) for every instance 0..n_out-1 in
 * one pass over hashes (cost O(matched blocks), not O(n x instances)).
 * n_out <= max_instances. Returns 0 or -EINVAL. */
CR_API int cr_cond_index_match_all(const cr_cond_index_t *idx, const uint64_t *hashes, size_t n,
                                   uint32_t *prefix_out, uint32_t n_out);

/* Bitmask of tiers (1 << tier) on which instance holds hash; 0 if none. */
CR_API unsigned cr_cond_index_lookup(const cr_cond_index_t *idx, uint32_t instance,
                                     uint64_t hash);

typedef struct cr_cond_index_stats {
    uint64_t blocks;      /* distinct block hashes present */
    uint64_t entries;     /* (block, instance, tier) entries */
    uint64_t evictions;   /* total LRU evictions since create */
    uint64_t bytes;       /* heap bytes held by the index */
} cr_cond_index_stats_t;

/* Fills *out. Returns 0 or -EINVAL. */
CR_API int cr_cond_index_stats(const cr_cond_index_t *idx, cr_cond_index_stats_t *out);

/* Blocks instance holds on tier. */
CR_API uint64_t cr_cond_index_count(const cr_cond_index_t *idx, uint32_t instance,
                                    cr_cond_tier_t tier);

/* ---- cost models ------------------------------------------------------- */

/* Model + hardware description. cr_cond_model_default() fills LLaMA3-70B on
 * one 8 x A800 node, as in the paper. All times in seconds, sizes in bytes. */
typedef struct cr_cond_model {
    double flops_per_token;       /* dense FLOPs per token (2 x params): 1.4e11 */
    double attn_flops_per_pair;   /* attention FLOPs per (query, key) pair:
                                     4 x layers x hidden = 4*80*8192 */
    double gpu_flops;             /* peak FLOP/s of the instance: 8 x 312e12 */
    double prefill_mfu;           /* achieved fraction of peak in prefill: 0.5 */
    double prefill_overhead_s;    /* fixed per prefill (launch, scheduling): 0.02 */
    double kv_bytes_per_token;    /* 320 KiB (80 layers x 8 KV heads x 128 x 2 x 2B) */
    double net_bandwidth;         /* bytes/s between instances for KV: 100e9/8*8 */
    double transfer_overhead_s;   /* fixed per KV transfer: 0.001 */
    double weight_bytes;          /* bytes of weights read per decode step: 140e9 */
    double hbm_bandwidth;         /* bytes/s of the instance: 8 x 2.039e12 */
    double decode_mbu;            /* achieved fraction of HBM bandwidth: 0.6 */
    double decode_overhead_s;     /* fixed per decode step: 0.005 */
} cr_cond_model_t;

/* Fills *m with the defaults above. */
CR_API void cr_cond_model_default(cr_cond_model_t *m);

/* Seconds to prefill input_len tokens when the first reused_len are already
 * cached (0 <= reused_len <= input_len; clamped). Linear + quadratic term. */
CR_API double cr_cond_cost_prefill(const cr_cond_model_t *m, uint64_t input_len,
                                   uint64_t reused_len);
/* Seconds to prefill as chunks of chunk_tokens tokens (0 = one chunk), each
 * charged cr_cond_cost_prefill() with the tokens before it as prefix. With
 * stages > 1 the layers are split over `stages` instances that pipeline the
 * chunks (Mooncake's chunked pipeline parallelism): sum / stages plus the
 * pipeline fill, (stages - 1) / stages of the LARGEST chunk (a
 * proportionate flow shop drains at its slowest chunk; the last chunk is
 * often a short remainder), plus one transfer_overhead_s per extra stage for
 * the activations hand-off. */
CR_API double cr_cond_cost_prefill_chunked(const cr_cond_model_t *m, uint64_t input_len,
                                           uint64_t reused_len, uint32_t chunk_tokens,
                                           uint32_t stages);
/* Seconds to move the KV cache of tokens tokens between instances. 0 for 0. */
CR_API double cr_cond_cost_transfer(const cr_cond_model_t *m, uint64_t tokens);
/* Seconds of one decode step with batch requests holding context_tokens
 * tokens in total. */
CR_API double cr_cond_cost_decode_step(const cr_cond_model_t *m, uint32_t batch,
                                       uint64_t context_tokens);
/* Queueing time of a new prefill arriving at now on an instance busy until
 * busy_until (seconds, same clock): max(0, busy_until - now). */
CR_API double cr_cond_cost_queue(double now, double busy_until);

/* ---- predictor --------------------------------------------------------- */
/* What the scheduler believes. The cost model above is only a prior: real
 * prefill and decode times differ from it per request (noise) and
 * systematically (a wrong MFU, a slower engine). A predictor multiplies the
 * model by a correction factor learned online from reported actual times:
 * an exponentially weighted mean of log(actual / model), kept per bucket of
 * computed tokens (log2) for prefill and once for decode steps, with the
 * spread (standard deviation of the log ratio) that gives confidence bounds.
 * A bucket with fewer than min_samples observations uses the all-bucket
 * correction. One report counts as at most 20x (or 1/20) the model, so a wild
 * or hostile report cannot make every estimate absurd. Nothing here reads
 * the simulator's ground truth. */

typedef struct cr_cond_pred cr_cond_pred_t;

enum cr_cond_pred_param_field {
    CR_COND_PRED_PARAM_MODEL = 1u << 0,
    CR_COND_PRED_PARAM_CHUNK_TOKENS = 1u << 1,
    CR_COND_PRED_PARAM_LEARN_RATE = 1u << 2,
    CR_COND_PRED_PARAM_MIN_SAMPLES = 1u << 3,
};

typedef struct cr_cond_pred_params {
    uint64_t field_mask;
    cr_cond_model_t model;   /* the prior; default cr_cond_model_default() */
    uint32_t chunk_tokens;   /* chunked-prefill chunk size; default 0 (one chunk) */
    /* weight of a new observation once a bucket has 1 / learn_rate of them
     * (before that, a plain mean); in (0, 1], default 0.05 */
    double learn_rate;
    uint32_t min_samples;    /* per-bucket samples before it is trusted; default 8 */
} cr_cond_pred_params_t;

#define CR_COND_PRED_BUCKETS 24 /* log2 of computed tokens, 0..23 (16M) */

/* Creates a predictor that knows nothing yet (corrections 1, spread 0).
 * params may be NULL. Returns 0, -EINVAL, -ENOMEM. Release with
 * cr_cond_pred_destroy(). */
CR_API int cr_cond_pred_create(const cr_cond_pred_params_t *params, cr_cond_pred_t **out);
CR_API void cr_cond_pred_destroy(cr_cond_pred_t *p);

/* Predicted seconds of a prefill of input_len tokens reusing reused_len,
 * over `stages` pipeline stages (1 = one instance): the chunked cost model
 * times the learned correction. */
CR_API double cr_cond_pred_prefill(const cr_cond_pred_t *p, uint64_t input_len,
                                   uint64_t reused_len, uint32_t stages);
/* The same, at z standard deviations of the learned log-spread: the
 * estimate times exp(z * sigma). z = 0 is cr_cond_pred_prefill(). */
CR_API double cr_cond_pred_prefill_bound(const cr_cond_pred_t *p, uint64_t input_len,
                                         uint64_t reused_len, uint32_t stages, double z);
/* Predicted seconds of one decode step (batch requests, context_tokens). */
CR_API double cr_cond_pred_decode_step(const cr_cond_pred_t *p, uint32_t batch,
                                       uint64_t context_tokens);
/* Reports an observed prefill (same arguments as the prediction, plus the
 * actual seconds it took to compute, queueing excluded) / decode step.
 * Returns 0, or -EINVAL (actual_s not finite and > 0, stages 0, or
 * reused_len >= input_len for a prefill); a rejected report changes
 * nothing. */
CR_API int cr_cond_pred_observe_prefill(cr_cond_pred_t *p, uint64_t input_len,
                                        uint64_t reused_len, uint32_t stages, double actual_s);
CR_API int cr_cond_pred_observe_decode_step(cr_cond_pred_t *p, uint32_t batch,
                                            uint64_t context_tokens, double actual_s);

typedef struct cr_cond_pred_stats {
    uint64_t prefill_samples, decode_samples;
    double prefill_factor, prefill_sigma; /* all buckets: exp(mean log ratio), spread */
    double decode_factor, decode_sigma;
} cr_cond_pred_stats_t;

/* Fills *out. Returns 0 or -EINVAL. */
CR_API int cr_cond_pred_stats(const cr_cond_pred_t *p, cr_cond_pred_stats_t *out);

/* ---- scheduler --------------------------------------------------------- */

typedef enum cr_cond_policy {
    CR_COND_POLICY_RANDOM = 0,
    CR_COND_POLICY_LOAD_BALANCE = 1,
    CR_COND_POLICY_LOCAL_CACHE = 2,   /* local cache-aware */
    CR_COND_POLICY_GLOBAL_CACHE = 3,  /* Algorithm 1 */
    CR_COND_POLICY_COST_FETCH = 4,    /* cost-based fetch (superseded; docs/scheduling.md) */
    CR_COND_POLICY_LATE = 5,          /* ours: cache-aware late binding, see below */
    CR_COND_POLICY_COUNT = 6
} cr_cond_policy_t;

/* "random", "load_balance", "local_cache", "global_cache", "cost_fetch",
 * "late". */
CR_API const char *cr_cond_policy_name(cr_cond_policy_t p);
/* Parses a name above (also "lb", "local", "global"). Returns 0 or -EINVAL. */
CR_API int cr_cond_policy_parse(const char *name, cr_cond_policy_t *out);

typedef struct cr_cond_sched cr_cond_sched_t;

enum cr_cond_sched_param_field {
    CR_COND_SCHED_PARAM_POLICY = 1u << 0,
    CR_COND_SCHED_PARAM_MODEL = 1u << 1,
    CR_COND_SCHED_PARAM_BLOCK_TOKENS = 1u << 2,
    CR_COND_SCHED_PARAM_BALANCE_THRESHOLD = 1u << 3,
    CR_COND_SCHED_PARAM_TTFT_SLO = 1u << 4,
    CR_COND_SCHED_PARAM_TBT_SLO = 1u << 5,
    CR_COND_SCHED_PARAM_SEED = 1u << 6,
    CR_COND_SCHED_PARAM_FETCH_MIN_GAIN = 1u << 7,
    CR_COND_SCHED_PARAM_CHUNK_TOKENS = 1u << 8,
    CR_COND_SCHED_PARAM_PIPELINE = 1u << 9,
    CR_COND_SCHED_PARAM_LATE = 1u << 10,
    CR_COND_SCHED_PARAM_PRED_LEARN_RATE = 1u << 11,
    CR_COND_SCHED_PARAM_LATE_SHED = 1u << 12,
};

/* late_aging at or above this: FIFO by arrival sequence (see below) */
#define CR_COND_LATE_AGING_FIFO 1000.0

typedef struct cr_cond_sched_params {
    uint64_t field_mask;
    cr_cond_policy_t policy;      /* default GLOBAL_CACHE */
    cr_cond_model_t model;        /* default cr_cond_model_default() */
    uint32_t block_tokens;        /* tokens per block; default 512 */
    /* Algorithm 1 kvcache_balancing_threshold: fetch the best remote prefix
     * when best_len / local_len exceeds it (local_len 0 => ratio infinite).
     * Default 1.25. */
    double balance_threshold;
    double ttft_slo_s;            /* reject if estimated TTFT exceeds; 0 = none (default) */
    double tbt_slo_s;             /* reject if estimated TBT exceeds; 0 = none (default) */
    uint64_t seed;                /* for POLICY_RANDOM; default 1 */
    /* COST_FETCH: fetch a remote prefix only if it lowers the estimated TTFT
     * by more than this many seconds. Default 0. */
    double fetch_min_gain_s;
    /* Chunked-prefill chunk size the instances use; estimates charge each
     * chunk (cr_cond_cost_prefill_chunked). Default 0 = unchunked. */
    uint32_t chunk_tokens;
    /* COST_FETCH pipelining of long prefills over idle instances: a request
     * whose estimated prefill exceeds pipeline_min_prefill_s may be split
     * over up to pipeline_max_stages instances, using only instances whose
     * queue is at most pipeline_idle_s, when that lowers its estimated TTFT.
     * pipeline_min_prefill_s 0 = off (default); max stages default 4
     * (<= 64); idle default 0. */
    double pipeline_min_prefill_s;
    uint32_t pipeline_max_stages;
    double pipeline_idle_s;
    /* ... and only while at least this many other idle instances stay free
     * for the requests that follow (load adaptivity). Default 0. */
    uint32_t pipeline_reserve;
    /* POLICY_LATE: a waiting request's score is its predicted prefill on
     * the freed instance minus late_aging x its wait (s per s; 0 = shortest
     * predicted first). late_aging >= CR_COND_LATE_AGING_FIFO is exact FIFO:
     * the oldest goes first and requests that arrived at the same time go
     * in queue order (arrival sequence), whatever their predictions. Only
     * the late_window oldest waiting requests are scored (bounded work per
     * pick). Defaults 0.5 and 64. */
    double late_aging;
    uint32_t late_window;
    /* POLICY_LATE with a TTFT SLO: shed a waiting request that can no
     * longer meet it (1, default) or keep serving it (0). */
    int late_shed;
    /* learn rate of the scheduler's predictor (cr_cond_pred_params_t). */
    double pred_learn_rate;
} cr_cond_sched_params_t;

/* Creates a scheduler for n_prefill prefill instances (index instance ids
 * 0..n_prefill-1) and n_decode decode instances (ids 0..n_decode-1 of their
 * own). idx is borrowed (must outlive the scheduler; may be NULL: no cache
 * knowledge). params may be NULL. Returns 0, -ENOMEM, or -EINVAL (bad
 * parameter, or idx tracks fewer than n_prefill instances). */
CR_API int cr_cond_sched_create(const cr_cond_sched_params_t *params, cr_cond_index_t *idx,
                                uint32_t n_prefill, uint32_t n_decode, cr_cond_sched_t **out);
CR_API void cr_cond_sched_destroy(cr_cond_sched_t *s);

/* Load reports (the service calls these on heartbeats; the simulator on
 * every state change). busy_until: time (seconds, caller's clock) at which
 * the instance will have finished all prefill work queued on it.
 * Returns 0 or -EINVAL (bad instance). */
CR_API int cr_cond_sched_set_prefill_load(cr_cond_sched_t *s, uint32_t instance,
                                          double busy_until);
/* batch: running requests; context_tokens: their total context (tokens);
 * max_batch: admission limit (0 = unlimited). */
CR_API int cr_cond_sched_set_decode_load(cr_cond_sched_t *s, uint32_t instance, uint32_t batch,
                                         uint64_t context_tokens, uint32_t max_batch);

typedef struct cr_cond_request {
    const uint64_t *block_hashes; /* rolling hashes of the prompt's blocks */
    size_t n_blocks;
    uint64_t input_len;           /* prompt tokens */
    uint64_t output_len;          /* expected output tokens (0 if unknown) */
    double now;                   /* arrival time, same clock as the loads */
} cr_cond_request_t;

typedef struct cr_cond_decision {
    int rejected;                 /* 1: rejected by SLO (answer like HTTP 429) */
    uint32_t prefill;             /* chosen prefill instance */
    uint32_t decode;              /* chosen decode instance */
    uint32_t local_prefix_blocks; /* prefix blocks already on `prefill` */
    uint32_t reused_blocks;       /* prefix blocks the prefill will reuse
                                     (local + fetched) */
    int32_t fetch_from;           /* instance to copy the extra prefix from
                                     (reused - local blocks), -1 if none */
    uint64_t reused_tokens;       /* tokens of input reused */
    double est_queue_s, est_prefill_s, est_transfer_s;
    double est_ttft_s;            /* queue + transfer + prefill */
    double est_tbt_s;             /* decode step time with this request added */
    /* Instances running the prefill together (bit i = prefill instance i);
     * one bit (the `prefill` one) unless the prefill is pipelined, in which
     * case `prefill` is the first stage and receives the KV cache. */
    uint64_t pipeline_mask;
    uint32_t pipeline_stages;     /* popcount of pipeline_mask */
} cr_cond_decision_t;

/* Chooses the prefill and decode instances for req (Algorithm 1 or the
 * configured policy). Does not change loads or the index: the caller
 * applies the decision (moves KV, reports new loads). A rejected decision
 * still names the best candidates and estimates. Returns 0 and fills *out,
 * or -EINVAL. */
CR_API int cr_cond_sched_schedule(cr_cond_sched_t *s, const cr_cond_request_t *req,
                                  cr_cond_decision_t *out);

/* The scheduler's predictor (owned by s, valid until cr_cond_sched_destroy):
 * every estimate above goes through it. Report actual prefill and decode
 * times to it (cr_cond_pred_observe_*) and the estimates correct
 * themselves. */
CR_API cr_cond_pred_t *cr_cond_sched_predictor(cr_cond_sched_t *s);

/* POLICY_LATE (ours): cache-aware late binding. Requests are not bound to
 * an instance's queue at arrival; they wait in the conductor, and when
 * instances are observed idle (idle_mask, bit i = prefill instance i has
 * nothing queued or running) this picks which waiting request runs and
 * where. queue[0..n) holds the waiting requests oldest first, each with
 * .now = its arrival time. For each of the late_window oldest, the best
 * idle instance is the one with the lowest predicted fetch + prefill (cost-
 * based fetch of the best prefix anywhere); the request with the lowest
 * score (that time minus late_aging x its wait) is picked. If it is the
 * only one waiting, its predicted prefill exceeds pipeline_min_prefill_s
 * and more idle instances than pipeline_reserve remain, it is pipelined
 * over idle instances when that lowers its predicted TTFT. With a TTFT SLO
 * set (and late_shed, the default), a waiting request that can no longer
 * meet it (wait + predicted prefill > SLO) is returned first, with
 * rejected = 1, for the caller to shed. Equal scores, and with
 * late_aging >= CR_COND_LATE_AGING_FIFO equal arrival times, go in queue
 * order: pass the requests in arrival sequence. Sets *which (index into queue) and *out. Returns 0, -ENOENT (n 0
 * or no idle instance), -EINVAL. */
CR_API int cr_cond_sched_pick(cr_cond_sched_t *s, const cr_cond_request_t *queue, size_t n,
                              double now, uint64_t idle_mask, size_t *which,
                              cr_cond_decision_t *out);

#ifdef __cplusplus
}
#endif
#endif
