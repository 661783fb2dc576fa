/* crescent-sim: replays a Mooncake trace through the conductor's policies on
 * a simulated cluster of P prefill and D decode instances.
 *
 *   crescent-sim --trace=T [--mode=run|capacity|hitrate|all] [--out_dir=D] [--plot]
 *
 * run:      every policy in --policies at --rate_scale; prints a table,
 *           writes summary.csv and ttft_cdf.csv.
 * capacity: for every TBT SLO in --tbt_list, the largest arrival-rate scale
 *           at which at least --slo_target of the requests meet both SLOs
 *           (SLO-based rejection on; rejected requests count as misses);
 *           writes capacity.csv.
 * hitrate:  cache hit rate vs per-instance cache capacity (--cap_list) for
 *           local_cache and global_cache; writes hitrate.csv.
 * --plot draws PNGs (gnuplot, pngcairo) next to the CSVs.
 * Progress goes to stderr, results to stdout.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/config.h"
#include "conductor/internal.h"
#include "crescent/conductor.h"

typedef struct opts {
    char trace[CR__CFG_STR_MAX];
    char mode[CR__CFG_STR_MAX];
    char policies[CR__CFG_STR_MAX];
    char out_dir[CR__CFG_STR_MAX];
    char tbt_list[CR__CFG_STR_MAX];
    char cap_list[CR__CFG_STR_MAX];
    char loads[CR__CFG_STR_MAX];
    char errs[CR__CFG_STR_MAX];
    char base[CR__CFG_STR_MAX];
    char ours[CR__CFG_STR_MAX];
    char baseline_queue[CR__CFG_STR_MAX];
    int64_t pipe_max, pipe_reserve, n_prefill, n_decode, block_tokens, chunk_tokens, max_batch, first, count, seed;
    int64_t cache_blocks; /* parsed as an int: checked >= 0 */
    double rate_scale, threshold, min_gain, pipe_min_s, pipe_idle_s, ttft_slo, tbt_slo, slo_target;
    double net_gbps, prefill_mfu;
    double err_sigma, err_bias, err_decode_bias, late_aging;
    int64_t err_seed, late_window, late_pipe_max, late_pipe_reserve;
    double late_pipe_min_s;
    int reject, plot, progress, learn, late_shed, baseline_shed;
} opts_t;

#define O(f) offsetof(opts_t, f)
static const cr__cfg_opt_t table[] = {
    {"trace", "data/traces/conversation_trace.jsonl", "JSONL trace (repository root relative)", CR__CFG_STR, O(trace)},
    {"mode", "run", "run | capacity | hitrate | all | margin", CR__CFG_STR, O(mode)},
    {"loads", "1,1.25,1.5,1.75,2", "margin: rate scales", CR__CFG_STR, O(loads)},
    {"errs", "0,0.3", "margin: estimation errors (err_sigma)", CR__CFG_STR, O(errs)},
    {"base", "global_cache", "margin: the baseline policy", CR__CFG_STR, O(base)},
    {"ours", "late", "margin: the policy compared with it", CR__CFG_STR, O(ours)},
    {"policies", "random,load_balance,local_cache,global_cache,late",
     "comma-separated policies", CR__CFG_STR, O(policies)},
    {"out_dir", "", "directory for CSV/plots (none: no files)", CR__CFG_STR, O(out_dir)},
    {"n_prefill", "8", "prefill instances (1..64)", CR__CFG_INT, O(n_prefill)},
    {"n_decode", "8", "decode instances", CR__CFG_INT, O(n_decode)},
    {"block_tokens", "512", "tokens per trace hash id", CR__CFG_INT, O(block_tokens)},
    {"chunk_tokens", "8192", "chunked-prefill chunk size (tokens)", CR__CFG_INT, O(chunk_tokens)},
    {"max_batch", "128", "decode continuous-batching limit", CR__CFG_INT, O(max_batch)},
    {"cache_blocks", "6000",
     "DRAM cache blocks per prefill instance (0 = unlimited; 6000 x 160 MiB = 0.94 TiB)",
     CR__CFG_INT, O(cache_blocks)},
    {"rate_scale", "1", "arrival-rate multiplier", CR__CFG_DOUBLE, O(rate_scale)},
    {"threshold", "1.25", "Algorithm 1 kvcache balancing threshold", CR__CFG_DOUBLE, O(threshold)},
    {"min_gain", "0", "cost_fetch: min TTFT gain (s) to fetch", CR__CFG_DOUBLE, O(min_gain)},
    {"pipe_min_s", "5", "chunked pipeline parallelism (global, cost_fetch): pipeline prefills "
     "longer than this (s) over idle instances; 0 = off", CR__CFG_DOUBLE, O(pipe_min_s)},
    {"pipe_max", "2", "pipelining: max stages", CR__CFG_INT, O(pipe_max)},
    {"pipe_reserve", "3", "pipelining: idle instances that must stay free",
     CR__CFG_INT, O(pipe_reserve)},
    {"pipe_idle_s", "0.5", "pipelining: queue (s) under which an instance counts as idle",
     CR__CFG_DOUBLE, O(pipe_idle_s)},
    {"ttft_slo", "30", "TTFT SLO (s) for attainment/capacity", CR__CFG_DOUBLE, O(ttft_slo)},
    {"tbt_slo", "0.1", "TBT SLO (s) for attainment/capacity", CR__CFG_DOUBLE, O(tbt_slo)},
    {"slo_target", "0.9", "capacity: fraction of requests that must meet the SLOs",
     CR__CFG_DOUBLE, O(slo_target)},
    {"reject", "false", "run mode: reject by the SLOs (HTTP 429)", CR__CFG_BOOL, O(reject)},
    {"tbt_list", "0.05,0.075,0.1,0.15,0.2,0.3", "capacity: TBT SLOs (s)", CR__CFG_STR,
     O(tbt_list)},
    {"cap_list", "500,1000,2000,4000,8000,16000,32000", "hitrate: cache blocks per instance",
     CR__CFG_STR, O(cap_list)},
    {"first", "0", "first request to replay", CR__CFG_INT, O(first)},
    {"count", "0", "requests to replay (0 = all)", CR__CFG_INT, O(count)},
    {"seed", "1", "random policy seed", CR__CFG_INT, O(seed)},
    {"net_gbps", "800", "KV transfer bandwidth between instances (Gbit/s)", CR__CFG_DOUBLE,
     O(net_gbps)},
    {"prefill_mfu", "0.5", "achieved fraction of peak FLOP/s in prefill", CR__CFG_DOUBLE,
     O(prefill_mfu)},
    {"err_sigma", "0", "estimation error: actual prefill = model x bias x exp(sigma x N(0,1)) "
     "per request (and per decode step); 0.3 = the issue's 30 %", CR__CFG_DOUBLE, O(err_sigma)},
    {"err_bias", "1", "estimation error: systematic factor on actual prefill times",
     CR__CFG_DOUBLE, O(err_bias)},
    {"err_decode_bias", "1", "estimation error: systematic factor on actual decode steps",
     CR__CFG_DOUBLE, O(err_decode_bias)},
    {"err_seed", "7", "estimation error: seed of the per-request draws", CR__CFG_INT,
     O(err_seed)},
    {"learn", "true", "the predictor learns from reported completions", CR__CFG_BOOL, O(learn)},
    {"late_aging", "0.1", "late and spf engines: score = predicted prefill - late_aging x wait (>= 1000: FIFO by arrival sequence)", CR__CFG_DOUBLE,
     O(late_aging)},
    {"late_window", "64", "late: oldest waiting requests scored per pick", CR__CFG_INT,
     O(late_window)},
    {"late_shed", "true",
     "late: shed a waiting request once wait + predicted prefill > TTFT SLO (with rejection on)",
     CR__CFG_BOOL, O(late_shed)},
    {"baseline_queue", "spf",
     "other policies: each prefill engine's queue order, fifo | spf (shortest predicted "
     "fetch + prefill first, minus late_aging x wait, as late; ties in arrival order)",
     CR__CFG_STR, O(baseline_queue)},
    {"baseline_shed", "false",
     "other policies: an engine drops a queued request at its start once wait + predicted "
     "fetch + prefill > TTFT SLO (with rejection on; counted as rejected, as late's sheds)",
     CR__CFG_BOOL, O(baseline_shed)},
    {"late_pipe_min_s", "5", "late: pipe_min_s of its own (-1 = --pipe_min_s)", CR__CFG_DOUBLE,
     O(late_pipe_min_s)},
    {"late_pipe_max", "2", "late: pipe_max of its own (-1 = --pipe_max)", CR__CFG_INT,
     O(late_pipe_max)},
    {"late_pipe_reserve", "1", "late: pipe_reserve of its own (-1 = --pipe_reserve)",
     CR__CFG_INT, O(late_pipe_reserve)},
    {"plot", "false", "draw PNG plots with gnuplot", CR__CFG_BOOL, O(plot)},
    {"progress", "true", "progress on stderr", CR__CFG_BOOL, O(progress)},
};
#define NOPT (sizeof table / sizeof table[0])

static int parse_list(const char *s, double *v, int cap)
{
    int n = 0;
    char buf[CR__CFG_STR_MAX];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        double x = strtod(t, &end);
        if (end == t || *end || !isfinite(x) || x < 0 || n == cap)
            return -1;
        v[n++] = x;
    }
    return n;
}

static int parse_policies(const char *s, cr_cond_policy_t *p, int cap)
{
    int n = 0;
    char buf[CR__CFG_STR_MAX];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == cap || cr_cond_policy_parse(t, &p[n]) != 0) {
            fprintf(stderr, "crescent-sim: unknown policy \"%s\"\n", t);
            return -1;
        }
        n++;
    }
    if (n == 0)
        fprintf(stderr, "crescent-sim: --policies \"%s\" names no policy\n", s);
    return n;
}

/* The simulator's progress callback: one line on stderr. */
static void print_progress(void *user, cr_cond_policy_t policy, size_t done, size_t total,
                           double sim_s, double wall_s)
{
    (void)user;
    fprintf(stderr, "crescent-sim: %s: %zu/%zu requests, sim %.0f s, wall %.1f s\n",
            cr_cond_policy_name(policy), done, total, sim_s, wall_s);
}

static void base_cfg(const opts_t *o, cr__cond_sim_cfg_t *c)
{
    cr__cond_sim_cfg_default(c);
    c->n_prefill = (uint32_t)o->n_prefill;
    c->n_decode = (uint32_t)o->n_decode;
    c->block_tokens = (uint32_t)o->block_tokens;
    c->chunk_tokens = (uint32_t)o->chunk_tokens;
    c->max_batch = (uint32_t)o->max_batch;
    c->cache_blocks = (uint64_t)o->cache_blocks;
    c->rate_scale = o->rate_scale;
    c->threshold = o->threshold;
    c->min_gain = o->min_gain;
    c->pipe_min_s = o->pipe_min_s;
    c->pipe_max = (uint32_t)o->pipe_max;
    c->pipe_idle_s = o->pipe_idle_s;
    c->pipe_reserve = (uint32_t)o->pipe_reserve;
    c->slo_ttft = o->ttft_slo;
    c->slo_tbt = o->tbt_slo;
    c->seed = (uint64_t)o->seed;
    c->first = (size_t)o->first;
    c->count = (size_t)o->count;
    c->progress = o->progress ? print_progress : NULL;
    c->model.net_bandwidth = o->net_gbps * 1e9 / 8;
    c->model.prefill_mfu = o->prefill_mfu;
    c->err_sigma = o->err_sigma;
    c->err_bias = o->err_bias;
    c->err_decode_bias = o->err_decode_bias;
    c->err_seed = (uint64_t)o->err_seed;
    c->learn = o->learn;
    c->late_aging = o->late_aging;
    c->late_window = (uint32_t)o->late_window;
    c->late_shed = o->late_shed;
    c->baseline_shed = o->baseline_shed;
    c->baseline_queue = strcmp(o->baseline_queue, "fifo") ? CR__COND_QUEUE_SPF : CR__COND_QUEUE_FIFO;
    if (o->reject) {
        c->reject_ttft = o->ttft_slo;
        c->reject_tbt = o->tbt_slo;
    }
}

/* per-policy parameters: late may have its own pipelining knobs */
static void policy_cfg(const opts_t *o, cr__cond_sim_cfg_t *c, cr_cond_policy_t p)
{
    c->policy = p;
    c->pipe_min_s = o->pipe_min_s;
    c->pipe_max = (uint32_t)o->pipe_max;
    c->pipe_reserve = (uint32_t)o->pipe_reserve;
    if (p != CR_COND_POLICY_LATE)
        return;
    if (o->late_pipe_min_s >= 0)
        c->pipe_min_s = o->late_pipe_min_s;
    if (o->late_pipe_max >= 1)
        c->pipe_max = (uint32_t)o->late_pipe_max;
    if (o->late_pipe_reserve >= 0)
        c->pipe_reserve = (uint32_t)o->late_pipe_reserve;
}

static FILE *out_file(const opts_t *o, const char *name)
{
    if (!o->out_dir[0])
        return NULL;
    char p[CR__CFG_STR_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", o->out_dir, name);
    FILE *f = fopen(p, "w");
    if (!f)
        fprintf(stderr, "crescent-sim: cannot write %s: %s\n", p, strerror(errno));
    return f;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double base_rate(const cr__cond_trace_t *t, const cr__cond_sim_cfg_t *c)
{
    size_t n = t->n - c->first;
    if (c->count && c->count < n)
        n = c->count;
    if (n < 2)
        return 0;
    double span = (t->reqs[c->first + n - 1].ts_ms - t->reqs[c->first].ts_ms) / 1000.0;
    return span > 0 ? (double)n / span : 0;
}

static int mode_run(const opts_t *o, const cr__cond_trace_t *t, const cr_cond_policy_t *pol,
                    int np)
{
    cr__cond_sim_cfg_t c;
    base_cfg(o, &c);
    size_t n = t->n - c.first;
    if (c.count && c.count < n)
        n = c.count;
    double **ttft = calloc((size_t)np, sizeof *ttft);
    FILE *fs = out_file(o, "summary.csv");
    if (fs)
        fprintf(fs, "policy,n_prefill,n_decode,rate_scale,requests,completed,rejected,"
                    "ttft_mean,ttft_p50,ttft_p90,ttft_p99,tbt_mean,tbt_p50,tbt_p90,tbt_p99,"
                    "slo_attainment,hit_local,hit_remote,prefill_gpu_s,fetch_s,pipelined,wall_s,"
                    "handoff_p50,handoff_p99,share_fetch_s,pred_factor,pred_sigma,err_sigma,"
                    "ttft_lt8k,ttft_8k_32k,ttft_ge32k,n_lt8k,n_8k_32k,n_ge32k\n");
    printf("%-13s %9s %7s %7s %7s %7s %8s %8s %6s %6s %6s %9s %6s\n", "policy", "ttft_mean",
           "p50", "p90", "p99", "tbt_mean", "tbt_p90", "tbt_p99", "slo%", "hitL%", "hitR%",
           "gpu_s", "rej");
    int rc = 0;
    for (int i = 0; i < np && !rc; i++) {
        policy_cfg(o, &c, pol[i]);
        ttft[i] = malloc((n ? n : 1) * sizeof(double));
        if (!ttft[i]) {
            rc = -ENOMEM;
            break;
        }
        cr__cond_sim_result_t r;
        uint64_t w0 = cr__now_ns();
        rc = cr__cond_sim_run(t, &c, &r, ttft[i]);
        double wall = (double)(cr__now_ns() - w0) / 1e9;
        if (rc) {
            fprintf(stderr, "crescent-sim: simulation failed: %s\n", cr_strerror(rc));
            break;
        }
        printf("%-13s %9.3f %7.3f %7.3f %7.3f %7.4f %8.4f %8.4f %6.1f %6.1f %6.1f %9.0f %6zu\n",
               cr_cond_policy_name(pol[i]), r.ttft.mean, r.ttft.p50, r.ttft.p90, r.ttft.p99,
               r.tbt.mean, r.tbt.p90, r.tbt.p99, 100 * r.slo_attainment, 100 * r.hit_local,
               100 * r.hit_remote, r.prefill_gpu_s, r.rejected);
        fprintf(stderr, "crescent-sim: %s replayed %zu requests in %.2f s wall\n",
                cr_cond_policy_name(pol[i]), r.n, wall);
        /* avg TTFT by prompt length: where a policy gains and where it loses */
        double cls_sum[3] = {0, 0, 0};
        size_t cls_n[3] = {0, 0, 0};
        for (size_t j = 0; j < n; j++) {
            if (ttft[i][j] < 0)
                continue;
            uint32_t in = t->reqs[c.first + j].input_len;
            int k = in < 8192 ? 0 : in < 32768 ? 1 : 2;
            cls_sum[k] += ttft[i][j];
            cls_n[k]++;
        }
        if (fs)
            fprintf(fs, "%s,%u,%u,%g,%zu,%zu,%zu,%.4f,%.4f,%.4f,%.4f,%.5f,%.5f,%.5f,%.5f,%.4f,"
                        "%.4f,%.4f,%.1f,%.1f,%zu,%.3f,%.5f,%.5f,%.2f,%.4f,%.4f,%.3f,%.4f,%.4f,"
                        "%.4f,%zu,%zu,%zu\n",
                    cr_cond_policy_name(pol[i]), c.n_prefill, c.n_decode, c.rate_scale, r.n,
                    r.completed, r.rejected, r.ttft.mean, r.ttft.p50, r.ttft.p90, r.ttft.p99,
                    r.tbt.mean, r.tbt.p50, r.tbt.p90, r.tbt.p99, r.slo_attainment, r.hit_local,
                    r.hit_remote, r.prefill_gpu_s, r.transfer_s, r.pipelined, wall, r.handoff.p50,
                    r.handoff.p99, r.share_fetch_s, r.pred.prefill_factor, r.pred.prefill_sigma,
                    o->err_sigma, cls_n[0] ? cls_sum[0] / (double)cls_n[0] : 0,
                    cls_n[1] ? cls_sum[1] / (double)cls_n[1] : 0,
                    cls_n[2] ? cls_sum[2] / (double)cls_n[2] : 0, cls_n[0], cls_n[1], cls_n[2]);
        /* keep only admitted TTFTs, sorted, for the CDF */
        size_t k = 0;
        for (size_t j = 0; j < n; j++)
            if (ttft[i][j] >= 0)
                ttft[i][k++] = ttft[i][j];
        qsort(ttft[i], k, sizeof(double), cmp_d);
        ttft[i][n ? n - 1 : 0] = ttft[i][n ? n - 1 : 0]; /* silence analyzers */
        if (k < n)
            ttft[i][k] = -1; /* terminator when some were rejected */
    }
    if (fs)
        fclose(fs);
    FILE *fc = rc ? NULL : out_file(o, "ttft_cdf.csv");
    if (fc) {
        fprintf(fc, "fraction");
        for (int i = 0; i < np; i++)
            fprintf(fc, ",%s", cr_cond_policy_name(pol[i]));
        fprintf(fc, "\n");
        for (int q = 1; q <= 200; q++) {
            double fr = q / 200.0;
            fprintf(fc, "%.3f", fr);
            for (int i = 0; i < np; i++) {
                size_t k = 0;
                while (k < n && ttft[i][k] >= 0)
                    k++;
                size_t idx = k ? (size_t)(fr * (double)(k - 1) + 0.5) : 0;
                fprintf(fc, ",%.4f", k ? ttft[i][idx] : 0.0);
            }
            fprintf(fc, "\n");
        }
        fclose(fc);
    }
    for (int i = 0; i < np; i++)
        free(ttft[i]);
    free(ttft);
    return rc;
}

/* Largest rate scale with attainment >= target: doubling then bisection.
 * *out = -1 ("unreachable") if even a rate with no queueing (1/64 of the
 * trace's, one request at a time in practice) misses the target: the SLO
 * is then broken by the requests themselves, not by load. */
static int capacity(const cr__cond_trace_t *t, cr__cond_sim_cfg_t *c, double target,
                    double *out)
{
    cr__cond_sim_result_t r;
    double lo = 0, hi = 0.25;
    int rc;
    c->rate_scale = 1.0 / 64;
    if ((rc = cr__cond_sim_run(t, c, &r, NULL)))
        return rc;
    if (r.slo_attainment < target) {
        *out = -1;
        return 0;
    }
    for (int i = 0; i < 12; i++) {
        c->rate_scale = hi;
        if ((rc = cr__cond_sim_run(t, c, &r, NULL)))
            return rc;
        if (r.slo_attainment < target)
            break;
        lo = hi;
        hi *= 2;
    }
    if (lo == 0) { /* 0.25x fails: bisect between 1/64 and 0.25 */
        lo = 1.0 / 64;
        hi = 0.25;
    }
    for (int i = 0; i < 8; i++) {
        double mid = (lo + hi) / 2;
        c->rate_scale = mid;
        if ((rc = cr__cond_sim_run(t, c, &r, NULL)))
            return rc;
        if (r.slo_attainment >= target)
            lo = mid;
        else
            hi = mid;
    }
    *out = lo;
    return 0;
}

static int mode_capacity(const opts_t *o, const cr__cond_trace_t *t, const cr_cond_policy_t *pol,
                         int np)
{
    double tbt[16];
    int nt = parse_list(o->tbt_list, tbt, 16);
    if (nt <= 0) {
        fprintf(stderr, "crescent-sim: bad --tbt_list \"%s\"\n", o->tbt_list);
        return -EINVAL;
    }
    cr__cond_sim_cfg_t c;
    base_cfg(o, &c);
    c.progress = NULL;
    double rate = base_rate(t, &c);
    FILE *f = out_file(o, "capacity.csv");
    if (f)
        fprintf(f, "tbt_slo");
    for (int i = 0; i < np; i++) {
        if (f)
            fprintf(f, ",%s", cr_cond_policy_name(pol[i]));
    }
    if (f)
        fprintf(f, "\n");
    printf("capacity (req/s) with TTFT SLO %.1f s, >= %.0f%% of requests meeting both SLOs "
           "(trace rate x1 = %.3f req/s)\n",
           o->ttft_slo, 100 * o->slo_target, rate);
    printf("%-8s", "tbt_slo");
    for (int i = 0; i < np; i++)
        printf(" %13s", cr_cond_policy_name(pol[i]));
    printf("\n");
    int rc = 0;
    for (int k = 0; k < nt && !rc; k++) {
        printf("%-8.3f", tbt[k]);
        if (f)
            fprintf(f, "%.3f", tbt[k]);
        for (int i = 0; i < np; i++) {
            policy_cfg(o, &c, pol[i]);
            c.slo_tbt = c.reject_tbt = tbt[k];
            c.slo_ttft = c.reject_ttft = o->ttft_slo;
            double s = 0;
            if ((rc = capacity(t, &c, o->slo_target, &s)))
                break;
            if (s < 0) {
                printf(" %13s", "unreachable");
                if (f)
                    fprintf(f, ",");
            } else {
                printf(" %13.3f", s * rate);
                if (f)
                    fprintf(f, ",%.4f", s * rate);
            }
            fflush(stdout);
            if (o->progress)
                fprintf(stderr, "crescent-sim: capacity %s tbt %.3f: %s%.3f req/s\n",
                        cr_cond_policy_name(pol[i]), tbt[k], s < 0 ? "unreachable, " : "",
                        s < 0 ? 0 : s * rate);
        }
        printf("\n");
        if (f)
            fprintf(f, "\n");
    }
    if (f)
        fclose(f);
    return rc;
}

static int mode_hitrate(const opts_t *o, const cr__cond_trace_t *t)
{
    double caps[32];
    int nc = parse_list(o->cap_list, caps, 32);
    if (nc <= 0) {
        fprintf(stderr, "crescent-sim: bad --cap_list \"%s\"\n", o->cap_list);
        return -EINVAL;
    }
    cr__cond_sim_cfg_t c;
    base_cfg(o, &c);
    c.progress = NULL;
    FILE *f = out_file(o, "hitrate.csv");
    if (f)
        fprintf(f, "cache_blocks,load_balance,local_cache,global_cache,global_remote_part\n");
    printf("hit rate (reused / input tokens) vs cache blocks per prefill instance\n");
    printf("%-12s %12s %12s %12s %10s %9s %9s\n", "cache_blocks", "load_balance", "local_cache",
           "global_cache", "(remote)", "glob/lb", "glob/loc");
    static const cr_cond_policy_t pols[3] = {CR_COND_POLICY_LOAD_BALANCE,
                                             CR_COND_POLICY_LOCAL_CACHE,
                                             CR_COND_POLICY_GLOBAL_CACHE};
    for (int k = 0; k < nc; k++) {
        cr__cond_sim_result_t r[3];
        c.cache_blocks = (uint64_t)caps[k];
        for (int i = 0; i < 3; i++) {
            c.policy = pols[i];
            int rc = cr__cond_sim_run(t, &c, &r[i], NULL);
            if (rc)
                return rc;
        }
        double h[3];
        for (int i = 0; i < 3; i++)
            h[i] = r[i].hit_local + r[i].hit_remote;
        printf("%-12.0f %12.4f %12.4f %12.4f %10.4f %9.2f %9.2f\n", caps[k], h[0], h[1], h[2],
               r[2].hit_remote, h[0] > 0 ? h[2] / h[0] : 0, h[1] > 0 ? h[2] / h[1] : 0);
        if (f)
            fprintf(f, "%.0f,%.5f,%.5f,%.5f,%.5f\n", caps[k], h[0], h[1], h[2], r[2].hit_remote);
        if (o->progress)
            fprintf(stderr, "crescent-sim: hitrate cap %.0f done\n", caps[k]);
    }
    if (f)
        fclose(f);
    return 0;
}

/* margin: ours against base over loads x errors; writes margin.csv.
 * margin = ours / base - 1 of the average TTFT (negative = ours better). */
static int mode_margin(const opts_t *o, const cr__cond_trace_t *t)
{
    double loads[32], errs[32];
    int nl = parse_list(o->loads, loads, 32), ne = parse_list(o->errs, errs, 32);
    cr_cond_policy_t pb, po;
    if (nl <= 0 || ne <= 0 || cr_cond_policy_parse(o->base, &pb) ||
        cr_cond_policy_parse(o->ours, &po)) {
        fprintf(stderr, "crescent-sim: bad --loads, --errs, --base or --ours\n");
        return -EINVAL;
    }
    cr__cond_sim_cfg_t c;
    base_cfg(o, &c);
    c.progress = 0;
    FILE *f = out_file(o, "margin.csv");
    const char *hdr = "err_sigma,load,base_avg,ours_avg,margin_pct,base_p50,ours_p50,base_p99,"
                      "ours_p99,base_rejected,ours_rejected,ours_pipelined,pred_factor";
    if (f)
        fprintf(f, "%s\n", hdr);
    printf("margin of %s against %s (avg TTFT; negative = %s lower)\n", o->ours, o->base, o->ours);
    printf("%-6s %-6s %9s %9s %8s %8s %8s %8s %8s\n", "err", "load", "base_avg", "ours_avg",
           "margin%", "base_p50", "ours_p50", "base_p99", "ours_p99");
    for (int e = 0; e < ne; e++)
        for (int l = 0; l < nl; l++) {
            cr__cond_sim_result_t rb, ro;
            c.err_sigma = errs[e];
            c.rate_scale = loads[l];
            policy_cfg(o, &c, pb);
            int rc = cr__cond_sim_run(t, &c, &rb, NULL);
            if (!rc) {
                policy_cfg(o, &c, po);
                rc = cr__cond_sim_run(t, &c, &ro, NULL);
            }
            if (rc) {
                fprintf(stderr, "crescent-sim: simulation failed: %s\n", cr_strerror(rc));
                if (f)
                    fclose(f);
                return rc;
            }
            double m = 100 * (ro.ttft.mean / rb.ttft.mean - 1);
            printf("%-6.2f %-6.2f %9.3f %9.3f %+8.1f %8.3f %8.3f %8.3f %8.3f\n", errs[e], loads[l],
                   rb.ttft.mean, ro.ttft.mean, m, rb.ttft.p50, ro.ttft.p50, rb.ttft.p99,
                   ro.ttft.p99);
            fflush(stdout);
            if (f)
                fprintf(f, "%.3f,%.3f,%.4f,%.4f,%.2f,%.4f,%.4f,%.4f,%.4f,%zu,%zu,%zu,%.4f\n", errs[e],
                        loads[l], rb.ttft.mean, ro.ttft.mean, m, rb.ttft.p50, ro.ttft.p50,
                        rb.ttft.p99, ro.ttft.p99, rb.rejected, ro.rejected, ro.pipelined,
                        ro.pred.prefill_factor);
        }
    if (f)
        fclose(f);
    return 0;
}

static void plot(const opts_t *o, const cr_cond_policy_t *pol, int np, int ran_run, int ran_cap,
                 int ran_hit)
{
    FILE *g = out_file(o, "plots.gp");
    if (!g)
        return;
    fprintf(g, "set terminal pngcairo size 900,600 noenhanced\nset datafile separator ','\nset key "
               "bottom right\nset grid\n");
    if (ran_run) {
        fprintf(g, "set output '%s/ttft_cdf.png'\nset title 'TTFT CDF per policy'\n"
                   "set xlabel 'TTFT (s)'\nset ylabel 'fraction of requests'\nset logscale x\n"
                   "plot ",
                o->out_dir);
        for (int i = 0; i < np; i++)
            fprintf(g, "%s'%s/ttft_cdf.csv' using %d:1 with lines lw 2 title '%s'", i ? ", " : "",
                    o->out_dir, i + 2, cr_cond_policy_name(pol[i]));
        fprintf(g, "\nunset logscale x\n");
    }
    if (ran_cap) {
        fprintf(g, "set output '%s/capacity.png'\nset title 'Effective capacity vs TBT SLO'\n"
                   "set xlabel 'TBT SLO (s)'\nset ylabel 'requests/s'\nset key bottom right\nplot ",
                o->out_dir);
        for (int i = 0; i < np; i++)
            fprintf(g, "%s'%s/capacity.csv' using 1:%d with linespoints lw 2 title '%s'",
                    i ? ", " : "", o->out_dir, i + 2, cr_cond_policy_name(pol[i]));
        fprintf(g, "\n");
    }
    if (ran_hit)
        fprintf(g, "set output '%s/hitrate.png'\nset title 'Cache hit rate vs cache capacity'\n"
                   "set xlabel 'cache blocks per prefill instance'\nset ylabel 'hit rate'\n"
                   "set logscale x\nset key top left\n"
                   "plot '%s/hitrate.csv' using 1:2 skip 1 with linespoints lw 2 title "
                   "'per-node caches, load-balanced routing', '%s/hitrate.csv' using 1:3 skip 1 "
                   "with linespoints lw 2 title 'per-node caches, cache-aware routing', "
                   "'%s/hitrate.csv' using 1:4 skip 1 with linespoints lw 2 title 'global pool "
                   "(global cache-aware)'\n",
                o->out_dir, o->out_dir, o->out_dir, o->out_dir);
    fclose(g);
    char cmd[CR__CFG_STR_MAX + 64];
    snprintf(cmd, sizeof cmd, "gnuplot '%s/plots.gp'", o->out_dir);
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "crescent-sim: gnuplot failed (%d); CSVs are still written\n", rc);
}

int main(int argc, char **argv)
{
    opts_t o;
    memset(&o, 0, sizeof o);
    char err[512];
    int rc = cr__cfg_parse(table, NOPT, &o, argc, argv, 1, "CRESCENT_SIM_", NULL, 0, NULL, err,
                           sizeof err);
    if (rc == 1) {
        cr__cfg_usage(stdout, "crescent-sim",
                      "replays a Mooncake trace (JSONL) through the conductor's policies on a\n"
                      "simulated cluster; modes: run (a table per policy), capacity, hitrate,\n"
                      "all, margin. Progress goes to stderr, results to stdout.\n"
                      "Environment: CRESCENT_SIM_<OPTION>.",
                      table, NOPT);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "crescent-sim: %s\n", err);
        return 2;
    }
    if (o.n_prefill < 1 || o.n_prefill > CR_COND_MAX_INSTANCES || o.n_decode < 1 ||
        o.n_decode > 4096 || o.block_tokens < 1 || o.block_tokens > CR_COND_MAX_BLOCK_TOKENS ||
        o.chunk_tokens < 0 || o.cache_blocks < 0 || o.max_batch < 1 || o.first < 0 || o.count < 0 ||
        !(o.rate_scale > 0) || o.pipe_max < 1 || o.pipe_max > 64 || o.pipe_reserve < 0 || o.pipe_reserve > 64 || !(o.net_gbps > 0) || !(o.prefill_mfu > 0 && o.prefill_mfu <= 1) ||
        !(o.err_sigma >= 0 && o.err_sigma <= 3) || !(o.err_bias > 0) || !(o.err_decode_bias > 0) ||
        !(o.late_aging >= 0) || o.late_window < 1 || o.late_window > 100000 || o.late_pipe_max > 64 ||
        o.late_pipe_reserve > 64) {
        fprintf(stderr, "crescent-sim: parameter out of range (n_prefill 1..64, n_decode "
                        "1..4096, cache_blocks >= 0, rate_scale > 0, ...)\n");
        return 2;
    }
    if (strcmp(o.baseline_queue, "fifo") && strcmp(o.baseline_queue, "spf")) {
        fprintf(stderr, "crescent-sim: --baseline_queue is fifo or spf, not \"%s\"\n",
                o.baseline_queue);
        return 2;
    }
    cr_cond_policy_t pol[16];
    int np = parse_policies(o.policies, pol, 16);
    if (np <= 0)
        return 2;
    int m_run = !strcmp(o.mode, "run") || !strcmp(o.mode, "all");
    int m_cap = !strcmp(o.mode, "capacity") || !strcmp(o.mode, "all");
    int m_hit = !strcmp(o.mode, "hitrate") || !strcmp(o.mode, "all");
    int m_margin = !strcmp(o.mode, "margin");
    if (!m_run && !m_cap && !m_hit && !m_margin) {
        fprintf(stderr, "crescent-sim: unknown --mode \"%s\"\n", o.mode);
        return 2;
    }
    if (o.out_dir[0] && mkdir(o.out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "crescent-sim: cannot create %s: %s\n", o.out_dir, strerror(errno));
        return 1;
    }
    cr__cond_trace_t t;
    uint64_t w0 = cr__now_ns();
    rc = cr__cond_trace_load(o.trace, (uint32_t)o.block_tokens, &t, err, sizeof err);
    if (rc) {
        fprintf(stderr, "crescent-sim: %s: %s\n", o.trace, err);
        return 1;
    }
    if ((size_t)o.first >= t.n) {
        fprintf(stderr, "crescent-sim: --first %lld beyond the %zu requests of the trace\n",
                (long long)o.first, t.n);
        cr__cond_trace_free(&t);
        return 2;
    }
    if (o.progress)
        fprintf(stderr, "crescent-sim: loaded %zu requests (%zu block ids) in %.2f s\n", t.n,
                t.n_hashes, (double)(cr__now_ns() - w0) / 1e9);
    printf("# trace %s, %lld prefill + %lld decode instances, cache %llu blocks/instance%s\n",
           o.trace, (long long)o.n_prefill, (long long)o.n_decode,
           (unsigned long long)o.cache_blocks, o.cache_blocks ? "" : " (unlimited)");
    printf("# requests %lld..%lld; estimation error: sigma %.2f, prefill bias %.2f, decode bias "
           "%.2f, predictor %s\n",
           (long long)o.first,
           (long long)(o.count ? o.first + o.count : (int64_t)t.n) - 1, o.err_sigma, o.err_bias,
           o.err_decode_bias, o.learn ? "learning" : "frozen (prior only)");
    if (m_run) {
        printf("# run: rate_scale %g, TTFT SLO %.2f s, TBT SLO %.3f s%s\n", o.rate_scale,
               o.ttft_slo, o.tbt_slo, o.reject ? ", SLO rejection on" : "");
        rc = mode_run(&o, &t, pol, np);
    }
    if (!rc && m_cap)
        rc = mode_capacity(&o, &t, pol, np);
    if (!rc && m_hit)
        rc = mode_hitrate(&o, &t);
    if (!rc && m_margin)
        rc = mode_margin(&o, &t);
    if (!rc && o.plot) {
        if (!o.out_dir[0])
            fprintf(stderr, "crescent-sim: --plot needs --out_dir\n");
        else
            plot(&o, pol, np, m_run, m_cap, m_hit);
    }
    cr__cond_trace_free(&t);
    return rc ? 1 : 0;
}
