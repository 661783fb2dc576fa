/* Scheduler: chooses prefill + decode instances for a request (Mooncake
 * Algorithm 1 and the baseline policies), with SLO-based rejection. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/conductor.h"

typedef struct dload {
    uint32_t batch, max_batch;
    uint64_t ctx;
} dload_t;

struct cr_cond_sched {
    cr_cond_policy_t policy;
    cr_cond_model_t model;
    uint32_t block_tokens;
    double threshold, ttft_slo, tbt_slo, min_gain;
    uint32_t chunk;
    double pipe_min, pipe_idle;
    uint32_t pipe_max, pipe_reserve;
    double late_aging;
    uint32_t late_window;
    int late_shed;
    cr_cond_pred_t *pred;  /* owned: every estimate goes through it */
    uint64_t rng;
    uint32_t rr;
    cr_cond_index_t *idx;
    uint32_t np, nd;
    double *busy;          /* [np] prefill busy-until */
    dload_t *dl;           /* [nd] */
    uint32_t prefix[CR_COND_MAX_INSTANCES];
};

static const char *const names[CR_COND_POLICY_COUNT] = {"random", "load_balance", "local_cache",
                                                        "global_cache", "cost_fetch",
                                                        "late"};

const char *cr_cond_policy_name(cr_cond_policy_t p)
{
    return (unsigned)p < CR_COND_POLICY_COUNT ? names[p] : "unknown";
}

int cr_cond_policy_parse(const char *name, cr_cond_policy_t *out)
{
    static const struct {
        const char *n;
        cr_cond_policy_t p;
    } alias[] = {{"lb", CR_COND_POLICY_LOAD_BALANCE},
                 {"local", CR_COND_POLICY_LOCAL_CACHE},
                 {"global", CR_COND_POLICY_GLOBAL_CACHE},
                 {"ours", CR_COND_POLICY_COST_FETCH}};
    if (!name || !out)
        return -EINVAL;
    for (int i = 0; i < CR_COND_POLICY_COUNT; i++)
        if (!strcmp(name, names[i])) {
            *out = (cr_cond_policy_t)i;
            return 0;
        }
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(name, alias[i].n)) {
            *out = alias[i].p;
            return 0;
        }
    return -EINVAL;
}

int cr_cond_sched_create(const cr_cond_sched_params_t *p, cr_cond_index_t *idx,
                         uint32_t n_prefill, uint32_t n_decode, cr_cond_sched_t **out)
{
    if (!out || n_prefill == 0 || n_prefill > CR_COND_MAX_INSTANCES || n_decode == 0 ||
        n_decode > (1u << 20))
        return -EINVAL;
    cr_cond_sched_t s;
    memset(&s, 0, sizeof s);
    s.policy = CR_COND_POLICY_GLOBAL_CACHE;
    cr_cond_model_default(&s.model);
    s.block_tokens = CR_COND_DEFAULT_BLOCK_TOKENS;
    s.threshold = 1.25;
    s.rng = 1;
    s.pipe_max = 4;
    s.late_aging = 0.5;
    s.late_window = 64;
    s.late_shed = 1;
    double learn = 0.05;
    if (p) {
        uint64_t f = p->field_mask;
        if (f & CR_COND_SCHED_PARAM_POLICY)
            s.policy = p->policy;
        if (f & CR_COND_SCHED_PARAM_MODEL)
            s.model = p->model;
        if (f & CR_COND_SCHED_PARAM_BLOCK_TOKENS)
            s.block_tokens = p->block_tokens;
        if (f & CR_COND_SCHED_PARAM_BALANCE_THRESHOLD)
            s.threshold = p->balance_threshold;
        if (f & CR_COND_SCHED_PARAM_TTFT_SLO)
            s.ttft_slo = p->ttft_slo_s;
        if (f & CR_COND_SCHED_PARAM_TBT_SLO)
            s.tbt_slo = p->tbt_slo_s;
        if (f & CR_COND_SCHED_PARAM_SEED)
            s.rng = p->seed ? p->seed : 1;
        if (f & CR_COND_SCHED_PARAM_FETCH_MIN_GAIN)
            s.min_gain = p->fetch_min_gain_s;
        if (f & CR_COND_SCHED_PARAM_CHUNK_TOKENS)
            s.chunk = p->chunk_tokens;
        if (f & CR_COND_SCHED_PARAM_PIPELINE) {
            s.pipe_min = p->pipeline_min_prefill_s;
            s.pipe_max = p->pipeline_max_stages;
            s.pipe_idle = p->pipeline_idle_s;
            s.pipe_reserve = p->pipeline_reserve;
        }
        if (f & CR_COND_SCHED_PARAM_LATE) {
            s.late_aging = p->late_aging;
            s.late_window = p->late_window;
        }
        if (f & CR_COND_SCHED_PARAM_LATE_SHED)
            s.late_shed = p->late_shed != 0;
        if (f & CR_COND_SCHED_PARAM_PRED_LEARN_RATE)
            learn = p->pred_learn_rate;
    }
    if ((unsigned)s.policy >= CR_COND_POLICY_COUNT || s.block_tokens == 0 ||
        s.block_tokens > CR_COND_MAX_BLOCK_TOKENS || !(s.threshold >= 0) ||
        !(s.ttft_slo >= 0) || !(s.tbt_slo >= 0) || !isfinite(s.min_gain) || !(s.pipe_min >= 0) ||
        !isfinite(s.pipe_min) || !(s.pipe_idle >= 0) || !isfinite(s.pipe_idle) ||
        s.pipe_max == 0 || s.pipe_max > CR_COND_MAX_INSTANCES || !(s.late_aging >= 0) ||
        !isfinite(s.late_aging) || s.late_window == 0)
        return -EINVAL;
    cr_cond_pred_params_t pp = {.field_mask = CR_COND_PRED_PARAM_MODEL |
                                              CR_COND_PRED_PARAM_CHUNK_TOKENS |
                                              CR_COND_PRED_PARAM_LEARN_RATE,
                                .model = s.model,
                                .chunk_tokens = s.chunk,
                                .learn_rate = learn};
    /* the index must know every prefill instance id */
    uint32_t probe[CR_COND_MAX_INSTANCES];
    if (idx && cr_cond_index_match_all(idx, NULL, 0, probe, n_prefill) != 0)
        return -EINVAL;
    s.idx = idx;
    s.np = n_prefill;
    s.nd = n_decode;
    int rc = cr_cond_pred_create(&pp, &s.pred);
    if (rc)
        return rc;
    cr_cond_sched_t *r = malloc(sizeof *r);
    double *busy = calloc(n_prefill, sizeof *busy);
    dload_t *dl = calloc(n_decode, sizeof *dl);
    if (!r || !busy || !dl) {
        free(r);
        free(busy);
        free(dl);
        cr_cond_pred_destroy(s.pred);
        return -ENOMEM;
    }
    *r = s;
    r->busy = busy;
    r->dl = dl;
    *out = r;
    return 0;
}

void cr_cond_sched_destroy(cr_cond_sched_t *s)
{
    if (!s)
        return;
    free(s->busy);
    free(s->dl);
    cr_cond_pred_destroy(s->pred);
    free(s);
}

cr_cond_pred_t *cr_cond_sched_predictor(cr_cond_sched_t *s)
{
    return s ? s->pred : NULL;
}

int cr_cond_sched_set_prefill_load(cr_cond_sched_t *s, uint32_t inst, double busy_until)
{
    if (!s || inst >= s->np || !isfinite(busy_until))
        return -EINVAL;
    s->busy[inst] = busy_until;
    return 0;
}

int cr_cond_sched_set_decode_load(cr_cond_sched_t *s, uint32_t inst, uint32_t batch,
                                  uint64_t ctx, uint32_t max_batch)
{
    if (!s || inst >= s->nd)
        return -EINVAL;
    s->dl[inst].batch = batch;
    s->dl[inst].ctx = ctx;
    s->dl[inst].max_batch = max_batch;
    return 0;
}

static uint64_t rnd(cr_cond_sched_t *s)
{
    uint64_t x = s->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Reusable tokens for `blocks` prefix blocks: at least one token is always
 * computed (the last one, whose logits give the first output token). */
static uint64_t reuse_tokens(const cr_cond_sched_t *s, uint64_t blocks, uint64_t input_len)
{
    uint64_t t = blocks * s->block_tokens;
    if (input_len == 0)
        return 0;
    return t >= input_len ? input_len - 1 : t;
}

static double est_tbt(const cr_cond_sched_t *s, const dload_t *d, uint64_t input_len)
{
    return cr_cond_pred_decode_step(s->pred, d->batch + 1, d->ctx + input_len);
}

static double est_prefill(const cr_cond_sched_t *s, uint64_t n, uint64_t reused, uint32_t stages)
{
    return cr_cond_pred_prefill(s->pred, n, reused, stages);
}

/* Seconds for one pipeline stage (of `stages`) to copy its share of the
 * layers of `tokens` tokens of prefix KV: a stage holds 1/stages of the
 * layers, so it copies that share only. */
static double share_transfer(const cr_cond_sched_t *s, uint64_t tokens, uint32_t stages)
{
    if (!tokens)
        return 0;
    cr_cond_model_t m = s->model;
    m.kv_bytes_per_token /= stages ? stages : 1;
    return cr_cond_cost_transfer(&m, tokens);
}

/* TTFT as the policy estimates it: Algorithm 1 (and local cache-aware) add
 * the prefix transfer to the queue; cost_fetch and late overlap them. */
static double combine(const cr_cond_sched_t *s, double q, double tx, double pf)
{
    if (s->policy == CR_COND_POLICY_COST_FETCH || s->policy == CR_COND_POLICY_LATE)
        return (tx > q ? tx : q) + pf;
    return q + tx + pf;
}

/* Chunked pipeline parallelism (a Mooncake mechanism, available to every
 * cache-aware policy): can splitting the prefill over idle instances beat
 * d? Every stage needs its layer share of the reused prefix: a stage that
 * does not hold the prefix copies its share (in parallel with the others).
 * avail: instances allowed (bit i); q[i] are their queues. */
static void try_pipeline(cr_cond_sched_t *s, const cr_cond_request_t *req, uint32_t best_len,
                         uint32_t best_inst, uint64_t avail, cr_cond_decision_t *d)
{
    uint32_t idle[CR_COND_MAX_INSTANCES], ni = 0;
    double q[CR_COND_MAX_INSTANCES];
    for (uint32_t i = 0; i < s->np; i++) {
        if (!(avail >> i & 1))
            continue;
        double qi = cr_cond_cost_queue(req->now, s->busy[i]);
        if (qi > s->pipe_idle)
            continue;
        /* insertion sort by queue, then by longer local prefix */
        uint32_t k = ni++;
        while (k && (q[k - 1] > qi || (q[k - 1] == qi && s->prefix[idle[k - 1]] < s->prefix[i]))) {
            idle[k] = idle[k - 1];
            q[k] = q[k - 1];
            k--;
        }
        idle[k] = i;
        q[k] = qi;
    }
    uint64_t n = req->input_len;
    uint64_t rt = reuse_tokens(s, best_len, n);
    for (uint32_t k = 2; k + s->pipe_reserve <= ni && k <= s->pipe_max; k++) {
        /* first stage (receives the KV for decode): the member with the
         * longest local prefix */
        uint32_t first = idle[0];
        uint64_t mask = 0;
        double tx = 0;
        for (uint32_t j = 0; j < k; j++) {
            mask |= 1ull << idle[j];
            if (s->prefix[idle[j]] > s->prefix[first])
                first = idle[j];
            uint64_t lj = reuse_tokens(s, s->prefix[idle[j]], n);
            double t = share_transfer(s, rt > lj ? rt - lj : 0, k);
            if (t > tx)
                tx = t;
        }
        double pf = est_prefill(s, n, rt, k);
        double qq = q[k - 1];
        double ttft = combine(s, qq, tx, pf);
        if (ttft + s->min_gain < d->est_ttft_s) {
            uint64_t lrt = reuse_tokens(s, s->prefix[first], n);
            d->prefill = first;
            d->local_prefix_blocks = s->prefix[first];
            d->reused_blocks = best_len;
            d->reused_tokens = rt;
            d->fetch_from = tx > 0 ? (int32_t)best_inst : -1;
            d->est_queue_s = qq;
            d->est_transfer_s = tx;
            d->est_prefill_s = pf;
            d->est_ttft_s = ttft;
            d->pipeline_mask = mask;
            d->pipeline_stages = k;
            (void)lrt;
        }
    }
}

/* Decode instance: lowest predicted TBT with this request added, among
 * those with room (all, if none has room); random for the random policy.
 * Returns whether any had room. */
static int pick_decode(cr_cond_sched_t *s, uint64_t input_len, uint32_t start,
                       cr_cond_decision_t *d)
{
    double btbt = INFINITY;
    int have_room = 0;
    for (uint32_t i = 0; i < s->nd; i++)
        if (!s->dl[i].max_batch || s->dl[i].batch < s->dl[i].max_batch)
            have_room = 1;
    if (s->policy == CR_COND_POLICY_RANDOM) {
        d->decode = (uint32_t)(rnd(s) % s->nd);
        btbt = est_tbt(s, &s->dl[d->decode], input_len);
    } else {
        uint32_t ds = start % s->nd;
        for (uint32_t k = 0; k < s->nd; k++) {
            uint32_t i = (ds + k) % s->nd;
            const dload_t *dl = &s->dl[i];
            if (have_room && dl->max_batch && dl->batch >= dl->max_batch)
                continue;
            double t = est_tbt(s, dl, input_len);
            if (t < btbt) {
                btbt = t;
                d->decode = i;
            }
        }
    }
    d->est_tbt_s = btbt;
    return have_room;
}

int cr_cond_sched_schedule(cr_cond_sched_t *s, const cr_cond_request_t *req,
                           cr_cond_decision_t *out)
{
    if (!s || !req || !out || (req->n_blocks && !req->block_hashes) || !isfinite(req->now))
        return -EINVAL;
    const cr_cond_model_t *m = &s->model;
    uint32_t np = s->np;
    uint32_t *prefix = s->prefix;
    if (s->idx && req->n_blocks) {
        int rc = cr_cond_index_match_all(s->idx, req->block_hashes, req->n_blocks, prefix, np);
        if (rc)
            return rc;
    } else {
        memset(prefix, 0, np * sizeof *prefix);
    }
    uint32_t best_len = 0, best_inst = 0;
    for (uint32_t i = 0; i < np; i++)
        if (prefix[i] > best_len) {
            best_len = prefix[i];
            best_inst = i;
        }
    uint64_t n = req->input_len;
    uint32_t start = s->rr++ % np; /* rotate the scan so ties spread out */

    cr_cond_decision_t d;
    memset(&d, 0, sizeof d);
    d.fetch_from = -1;
    double best = INFINITY;
    switch (s->policy) {
    case CR_COND_POLICY_RANDOM:
    case CR_COND_POLICY_LOAD_BALANCE: {
        uint32_t p = 0;
        if (s->policy == CR_COND_POLICY_RANDOM) {
            p = (uint32_t)(rnd(s) % np);
        } else {
            for (uint32_t k = 0; k < np; k++) {
                uint32_t i = (start + k) % np;
                double q = cr_cond_cost_queue(req->now, s->busy[i]);
                if (q < best) {
                    best = q;
                    p = i;
                }
            }
        }
        /* the chosen engine still reuses whatever prefix it holds */
        d.prefill = p;
        d.local_prefix_blocks = d.reused_blocks = prefix[p];
        d.est_queue_s = cr_cond_cost_queue(req->now, s->busy[p]);
        d.reused_tokens = reuse_tokens(s, prefix[p], n);
        d.est_prefill_s = est_prefill(s, n, d.reused_tokens, 1);
        break;
    }
    case CR_COND_POLICY_LOCAL_CACHE:
    case CR_COND_POLICY_GLOBAL_CACHE:
    case CR_COND_POLICY_COST_FETCH:
    case CR_COND_POLICY_LATE: {
        /* LATE called at arrival (the service, which must answer at once)
         * binds early like cost_fetch; the simulator uses cr_cond_sched_pick */
        /* the best prefix's reuse and prefill time are the same for every
         * instance: compute them once; same for "no local prefix" */
        uint64_t brt = reuse_tokens(s, best_len, n);
        double bpf = est_prefill(s, n, brt, 1);
        double zpf = est_prefill(s, n, 0, 1);
        for (uint32_t k = 0; k < np; k++) {
            uint32_t i = (start + k) % np;
            double q = cr_cond_cost_queue(req->now, s->busy[i]);
            uint32_t reuse = prefix[i];
            double tx = 0, ttft;
            uint64_t rt = reuse_tokens(s, reuse, n);
            double pf = reuse == 0 ? zpf : reuse == best_len ? bpf : est_prefill(s, n, rt, 1);
            ttft = q + pf;
            if (s->policy == CR_COND_POLICY_GLOBAL_CACHE && best_len > prefix[i] &&
                (prefix[i] == 0 || (double)best_len / prefix[i] > s->threshold)) {
                /* Algorithm 1: fetch the best prefix; transfer + queue + prefill */
                reuse = best_len;
                tx = cr_cond_cost_transfer(m, brt - rt);
                rt = brt;
                pf = bpf;
                ttft = tx + q + pf;
            } else if ((s->policy == CR_COND_POLICY_COST_FETCH ||
                        s->policy == CR_COND_POLICY_LATE) &&
                       best_len > prefix[i]) {
                /* ours: fetch only if it pays off; the fetch overlaps queueing */
                uint64_t frt = brt;
                double ftx = cr_cond_cost_transfer(m, frt - rt);
                double fpf = bpf;
                double fttft = (ftx > q ? ftx : q) + fpf;
                if (fttft + s->min_gain < ttft) {
                    reuse = best_len;
                    rt = frt;
                    tx = ftx;
                    pf = fpf;
                    ttft = fttft;
                }
            }
            if (ttft < best) {
                best = ttft;
                d.prefill = i;
                d.local_prefix_blocks = prefix[i];
                d.reused_blocks = reuse;
                d.reused_tokens = rt;
                d.est_queue_s = q;
                d.est_prefill_s = pf;
                d.est_transfer_s = tx;
            }
        }
        if (d.reused_blocks > d.local_prefix_blocks)
            d.fetch_from = (int32_t)best_inst;
        break;
    }
    default:
        return -EINVAL;
    }
    d.est_ttft_s = combine(s, d.est_queue_s, d.est_transfer_s, d.est_prefill_s);
    d.pipeline_mask = 1ull << d.prefill;
    d.pipeline_stages = 1;
    if (s->policy >= CR_COND_POLICY_GLOBAL_CACHE && s->pipe_min > 0 &&
        d.est_prefill_s > s->pipe_min)
        try_pipeline(s, req, best_len, best_inst, ~0ull, &d);
    int have_room = pick_decode(s, n, start, &d);
    int slo = s->ttft_slo > 0 || s->tbt_slo > 0;
    if (slo && ((s->ttft_slo > 0 && d.est_ttft_s > s->ttft_slo) ||
                (s->tbt_slo > 0 && d.est_tbt_s > s->tbt_slo) || !have_room))
        d.rejected = 1;
    *out = d;
    return 0;
}

/* Best idle instance for r (cost-based fetch of the best prefix, no
 * queue): fills the placement fields of *d; returns predicted fetch +
 * prefill. prefix[] must hold r's match. */
static double place_idle(cr_cond_sched_t *s, const cr_cond_request_t *r, uint64_t idle,
                         uint32_t best_len, cr_cond_decision_t *d)
{
    uint64_t n = r->input_len;
    uint64_t brt = reuse_tokens(s, best_len, n);
    double bpf = est_prefill(s, n, brt, 1);
    double best = INFINITY;
    for (uint64_t m = idle; m; m &= m - 1) {
        uint32_t i = (uint32_t)__builtin_ctzll(m);
        uint64_t rt = reuse_tokens(s, s->prefix[i], n);
        double pf = s->prefix[i] == best_len ? bpf : est_prefill(s, n, rt, 1);
        double tx = 0, t = pf;
        uint32_t reuse = s->prefix[i];
        if (best_len > s->prefix[i]) {
            double ftx = cr_cond_cost_transfer(&s->model, brt - rt);
            if (ftx + bpf + s->min_gain < pf) {
                tx = ftx;
                t = ftx + bpf;
                pf = bpf;
                rt = brt;
                reuse = best_len;
            }
        }
        if (t < best) {
            best = t;
            d->prefill = i;
            d->local_prefix_blocks = s->prefix[i];
            d->reused_blocks = reuse;
            d->reused_tokens = rt;
            d->est_transfer_s = tx;
            d->est_prefill_s = pf;
        }
    }
    return best;
}

static uint32_t match_best(cr_cond_sched_t *s, const cr_cond_request_t *r, uint32_t *best_inst)
{
    uint32_t best_len = 0;
    *best_inst = 0;
    if (s->idx && r->n_blocks &&
        cr_cond_index_match_all(s->idx, r->block_hashes, r->n_blocks, s->prefix, s->np) == 0) {
        for (uint32_t i = 0; i < s->np; i++)
            if (s->prefix[i] > best_len) {
                best_len = s->prefix[i];
                *best_inst = i;
            }
    } else {
        memset(s->prefix, 0, s->np * sizeof *s->prefix);
    }
    return best_len;
}

int cr_cond_sched_pick(cr_cond_sched_t *s, const cr_cond_request_t *queue, size_t n, double now,
                       uint64_t idle_mask, size_t *which, cr_cond_decision_t *out)
{
    if (!s || (n && !queue) || !which || !out || !isfinite(now))
        return -EINVAL;
    if (s->np < 64)
        idle_mask &= (1ull << s->np) - 1;
    if (!n || !idle_mask)
        return -ENOENT;
    size_t w = n < s->late_window ? n : s->late_window;
    size_t pick = 0;
    double pick_score = INFINITY;
    cr_cond_decision_t d, best_d;
    memset(&best_d, 0, sizeof best_d);
    for (size_t j = 0; j < w; j++) {
        const cr_cond_request_t *r = &queue[j];
        if ((r->n_blocks && !r->block_hashes) || !isfinite(r->now))
            return -EINVAL;
        uint32_t bi;
        uint32_t bl = match_best(s, r, &bi);
        memset(&d, 0, sizeof d);
        d.fetch_from = -1;
        double t = place_idle(s, r, idle_mask, bl, &d);
        double wait = now > r->now ? now - r->now : 0;
        if (s->late_shed && s->ttft_slo > 0 && wait + t > s->ttft_slo) {
            /* cannot meet its SLO any more: shed it first */
            d.rejected = 1;
            d.est_queue_s = wait;
            d.est_ttft_s = wait + t;
            d.pipeline_mask = 1ull << d.prefill;
            d.pipeline_stages = 1;
            pick_decode(s, r->input_len, 0, &d);
            *which = j;
            *out = d;
            return 0;
        }
        /* FIFO: the longest wait first, equal waits (trace timestamps are
         * coarse) in queue order; never by prediction */
        double score = s->late_aging >= CR_COND_LATE_AGING_FIFO ? -wait
                                                                : t - s->late_aging * wait;
        if (score < pick_score) {
            pick_score = score;
            pick = j;
            d.fetch_from = d.reused_blocks > d.local_prefix_blocks ? (int32_t)bi : -1;
            d.est_queue_s = wait;
            d.est_ttft_s = wait + t;
            best_d = d;
        }
    }
    d = best_d;
    const cr_cond_request_t *r = &queue[pick];
    d.pipeline_mask = 1ull << d.prefill;
    d.pipeline_stages = 1;
    if (n == 1 && s->pipe_min > 0 && d.est_prefill_s > s->pipe_min) {
        /* the only waiting request, and a long one: pipeline it over idle
         * instances (observed idle, not predicted) */
        uint32_t bi;
        uint32_t bl = match_best(s, r, &bi);
        for (uint32_t i = 0; i < s->np; i++)
            s->busy[i] = (idle_mask >> i & 1) ? now : now + 1e9;
        cr_cond_request_t rr = *r;
        rr.now = now;
        d.est_ttft_s -= d.est_queue_s; /* compare from now on */
        double wait = d.est_queue_s;
        d.est_queue_s = 0;
        try_pipeline(s, &rr, bl, bi, idle_mask, &d);
        d.est_queue_s = wait;
        d.est_ttft_s += wait;
    }
    pick_decode(s, r->input_len, s->rr++, &d);
    *which = pick;
    *out = d;
    return 0;
}
