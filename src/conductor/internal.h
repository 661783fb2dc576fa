/* Conductor internals shared by the library, crescent-sim and the tests:
 * the trace parser (JSONL) and the discrete-event simulator. */
#ifndef CR_CONDUCTOR_INTERNAL_H
#define CR_CONDUCTOR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "crescent/conductor.h"

/* ---- trace ------------------------------------------------------------- */

#define CR__COND_TRACE_MAX_LINE (1u << 20)   /* bytes per JSONL line */
#define CR__COND_TRACE_MAX_BLOCKS 65536u     /* hash_ids per request */
#define CR__COND_TRACE_MAX_TOKENS (1u << 24) /* input/output_length bound */
#define CR__COND_TRACE_MAX_REQS 10000000u    /* requests per trace */

typedef struct cr__cond_trace_req {
    double ts_ms;       /* arrival, ms from trace start */
    uint32_t input_len; /* tokens, >= 1 */
    uint32_t output_len;/* tokens, >= 0 */
    uint32_t n_blocks;
    uint64_t off;       /* index of the first hash in trace->hashes */
} cr__cond_trace_req_t;

typedef struct cr__cond_trace {
    cr__cond_trace_req_t *reqs; /* owned */
    size_t n;
    uint64_t *hashes;           /* owned, all requests' hash_ids back to back */
    size_t n_hashes;
} cr__cond_trace_t;

/* Parses one JSONL line {"timestamp": ms, "input_length": n, "output_length":
 * n, "hash_ids": [ids]} (exactly these fields). hash_ids go to hash_buf
 * (cap entries); out->off is left 0. block_tokens bounds the hash count
 * (<= ceil(input_length / block_tokens)). Returns 0, or -EINVAL with a
 * message naming the line number and field in err. */
int cr__cond_trace_parse_line(const char *line, size_t len, size_t lineno, uint32_t block_tokens,
                              cr__cond_trace_req_t *out, uint64_t *hash_buf, size_t cap,
                              char *err, size_t errlen);

/* Loads a whole trace from f. Blank lines are skipped; timestamps must not
 * decrease. Returns 0, -EINVAL (message in err), -ENOMEM, -EIO.
 * Release with cr__cond_trace_free(). */
int cr__cond_trace_read(FILE *f, uint32_t block_tokens, cr__cond_trace_t *out, char *err,
                        size_t errlen);
int cr__cond_trace_load(const char *path, uint32_t block_tokens, cr__cond_trace_t *out,
                        char *err, size_t errlen);
void cr__cond_trace_free(cr__cond_trace_t *t);

/* ---- simulator --------------------------------------------------------- */

/* Baseline engine queue order. SPF: lowest predicted remaining fetch +
 * prefill - late_aging x wait first (late_aging >= CR_COND_LATE_AGING_FIFO
 * = FIFO); ties in assignment order, which is arrival order. */
enum { CR__COND_QUEUE_FIFO = 0, CR__COND_QUEUE_SPF = 1 };

typedef struct cr__cond_sim_cfg {
    cr_cond_policy_t policy;
    uint32_t n_prefill, n_decode;
    cr_cond_model_t model;
    uint32_t block_tokens;     /* tokens per hash_id (512 for the traces) */
    double threshold;          /* Algorithm 1 balancing threshold */
    double min_gain;           /* cost_fetch min gain (s) */
    double pipe_min_s, pipe_idle_s; /* cost_fetch pipelining (pipe_min_s 0 = off) */
    uint32_t pipe_max, pipe_reserve;
    double reject_ttft, reject_tbt; /* scheduler rejection thresholds, 0 = off */
    /* Error model (what happens vs what the scheduler believes): request r's
     * actual prefill takes the cost model x err_bias x exp(err_sigma x Z_r),
     * Z_r standard normal drawn from (err_seed, r) so every policy meets the
     * same errors; every actual decode step takes the model x
     * err_decode_bias x exp(err_sigma x Z) with Z fresh per step. The
     * scheduler sees only its predictor, which learns from the completions
     * the simulator reports to it (learn = 0: never reported). */
    double err_sigma, err_bias, err_decode_bias;
    uint64_t err_seed;
    int learn;
    double late_aging;         /* POLICY_LATE score weight of waiting */
    uint32_t late_window;
    int late_shed;             /* POLICY_LATE sheds a request past its TTFT SLO */
    /* Baseline engines (every policy but POLICY_LATE): each prefill
     * instance's queue is served in baseline_queue order; baseline_shed
     * drops a queued request when it would start, if its wait + predicted
     * remaining fetch + predicted prefill exceeds reject_ttft (predictions
     * only, never the truth); it counts as rejected, as late's sheds. */
    int baseline_queue;        /* CR__COND_QUEUE_FIFO or _SPF */
    int baseline_shed;
    double slo_ttft, slo_tbt;  /* SLOs for attainment (0 = ignore that one) */
    uint64_t seed;
    double rate_scale;         /* arrival rate multiplier (timestamps / scale) */
    uint64_t cache_blocks;     /* per prefill instance DRAM cache, 0 = unlimited */
    uint32_t chunk_tokens;     /* chunked-prefill chunk size */
    uint32_t max_batch;        /* decode continuous-batching limit */
    uint64_t decode_kv_tokens; /* decode KV capacity (tokens) */
    size_t first, count;       /* replay reqs [first, first+count); count 0 = all */
    /* progress report, called about every tenth of the requests (NULL =
     * none); the library prints nothing itself */
    void (*progress)(void *user, cr_cond_policy_t policy, size_t done, size_t total,
                     double sim_s, double wall_s);
    void *progress_user;
} cr__cond_sim_cfg_t;

void cr__cond_sim_cfg_default(cr__cond_sim_cfg_t *c);

typedef struct cr__cond_dist {
    double mean, p50, p90, p99, max;
} cr__cond_dist_t;

typedef struct cr__cond_sim_result {
    size_t n, completed, rejected;
    cr__cond_dist_t ttft, tbt;     /* seconds; over completed requests */
    double slo_attainment;         /* fraction of all n meeting both SLOs */
    double hit_local, hit_remote;  /* fraction of input tokens reused locally / fetched */
    double prefill_gpu_s;          /* sum of prefill GPU time (x stages if pipelined) */
    double transfer_s;             /* sum of prefix-fetch time */
    double sim_end_s;              /* simulated time of the last event */
    uint64_t evictions;
    size_t pipelined;              /* requests whose prefill was pipelined */
    cr__cond_dist_t handoff;       /* first -> second token gap (s), requests with >= 2 */
    double share_fetch_s;          /* sum of layer-share copies for pipelined stages */
    cr_cond_pred_stats_t pred;     /* the scheduler's predictor at the end */
} cr__cond_sim_result_t;

/* Standard normal draw number k of stream seed (deterministic). */
double cr__cond_normal(uint64_t seed, uint64_t k);

/* Replays trace under cfg.
 * TTFT: arrival -> first token, which the prefill produces (queue, prefix
 * fetch and prefill included). The KV moves to decode layer by layer while
 * the prefill runs (Mooncake streams it), so it reaches decode at
 * max(prefill end, prefill start + transfer) + transfer overhead; that
 * hand-off and the wait for admission to the decode batch make the first ->
 * second token gap, reported apart (`handoff`). TBT: a request's mean gap
 * between consecutive decode tokens (second .. last), for requests with
 * >= 3 output tokens. ttft_out (may be NULL) gets, per replayed
 * request, its TTFT in seconds or -1 if rejected. Returns 0, -EINVAL,
 * -ENOMEM. */
int cr__cond_sim_run(const cr__cond_trace_t *trace, const cr__cond_sim_cfg_t *cfg,
                     cr__cond_sim_result_t *res, double *ttft_out);

/* Fills *d from v[0..n) (sorted in place). All zero for n == 0. */
void cr__cond_dist(double *v, size_t n, cr__cond_dist_t *d);

#endif
