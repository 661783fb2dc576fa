/* Discrete-event simulator: P prefill + D decode instances replaying a
 * Mooncake trace under one scheduling policy.
 *
 * What happens and what the scheduler believes are kept apart:
 *   - Truth: request r's prefill takes the chunked cost model x its error
 *     factor (cfg err_*); decode steps likewise. Each prefill instance of
 *     a baseline policy has its own queue, served FIFO or shortest-
 *     predicted-first (cfg baseline_queue), optionally dropping a request
 *     whose TTFT SLO is predicted lost when it would start (baseline_shed).
 *     A prefix fetched from another instance overlaps the queueing:
 *     start = max(instance free, assignment + fetch time).
 *   - Belief: the scheduler only sees its predictor (the cost model times a
 *     correction learned from the completions reported to it) and the
 *     busy-until it derives from it: on assignment, the predicted prefill is
 *     added; on every completion the instance's belief is re-based to now +
 *     the predictions of what is still queued on it (an instance reports its
 *     queue; the scheduler converts it to time with its predictor).
 *   - Pipelined prefill over k stages (chunked pipeline parallelism): each
 *     stage runs 1/k of the layers, so each copies its share of the reused
 *     prefix it lacks, and afterwards each holds its share of every block.
 *     The index records the blocks on every stage; the simulator keeps the
 *     share apart (the scheduler's index does not know it): a later request
 *     reusing a block held as a 1/k share copies the missing layers first.
 *   - After its prefill an instance holds every block of the request in its
 *     DRAM cache (LRU, cache_blocks per instance); blocks it reused are
 *     touched when the request is scheduled.
 *   - The KV streams to the decode instance during the prefill (see
 *     internal.h for where that time is counted), joins its waiting queue,
 *     and is admitted at the next step boundary (continuous batching) if
 *     the batch and KV capacity allow. Every step emits one token per
 *     running request.
 *   - POLICY_LATE binds late: requests wait in the conductor and are placed
 *     (cr_cond_sched_pick) when instances are observed idle.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "conductor/internal.h"

enum { EV_PREFILL_DONE = 0, EV_DECODE_JOIN = 1, EV_STEP_DONE = 2 };

typedef struct ev {
    double t;
    uint64_t seq;
    uint32_t type, a;
} ev_t;

typedef struct heap {
    ev_t *v;
    size_t n, cap;
    uint64_t seq;
} heap_t;

static int ev_less(const ev_t *a, const ev_t *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int heap_push(heap_t *h, double t, uint32_t type, uint32_t a)
{
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 1024;
        ev_t *nv = realloc(h->v, nc * sizeof *nv);
        if (!nv)
            return -ENOMEM;
        h->v = nv;
        h->cap = nc;
    }
    ev_t e = {t, h->seq++, type, a};
    size_t i = h->n++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (!ev_less(&e, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = e;
    return 0;
}

static ev_t heap_pop(heap_t *h)
{
    ev_t top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && ev_less(&h->v[c + 1], &h->v[c]))
            c++;
        if (!ev_less(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

typedef struct rstate {
    double arrival, first_token, second_token, ttft, tbt, pred;
    double factor;       /* actual / model prefill time (error model) */
    uint64_t mask;       /* prefill stages */
    uint64_t reused;     /* reused tokens */
    uint32_t p, d, gen, stages;
    int rejected, done;
    /* baseline engines: set on assignment, used when the request starts */
    double ready;      /* truth: its prefix fetch done */
    double pred_ready; /* belief: the same, predicted */
    double exec, tx;   /* truth: prefill and fetch (s) */
    uint64_t local_first;
} rstate_t;

typedef struct dinst {
    uint32_t *run; /* running request ids */
    uint32_t nrun, caprun;
    uint32_t *wait; /* FIFO ring of waiting ids */
    uint32_t wcap, whead, wn;
    uint64_t ctx; /* context tokens of running requests */
    int stepping;
    double step_t0;        /* start of the running step (for the predictor) */
    uint32_t step_batch;
    uint64_t step_ctx, steps;
    uint32_t assigned;      /* running + waiting + in flight, for the scheduler */
    uint64_t assigned_ctx;
} dinst_t;

/* layer shares: (block, instance) -> k when the instance holds 1/k of the
 * block's layers (pipelined prefill); absent = all layers. Open addressing,
 * k 0 = empty slot, k 1 = tombstone (all layers again). */
typedef struct share_ent {
    uint64_t key;
    uint32_t k;
} share_ent_t;

typedef struct shares {
    share_ent_t *v;
    size_t cap, used;
} shares_t;

void cr__cond_sim_cfg_default(cr__cond_sim_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    c->policy = CR_COND_POLICY_GLOBAL_CACHE;
    c->n_prefill = 8;
    c->n_decode = 8;
    cr_cond_model_default(&c->model);
    c->block_tokens = CR_COND_DEFAULT_BLOCK_TOKENS;
    c->threshold = 1.25;
    c->seed = 1;
    /* chunked pipeline parallelism (every cache-aware policy): chosen on
     * the first half of the conversation trace (docs/scheduling.md) */
    c->pipe_min_s = 5;
    c->pipe_max = 2;
    c->pipe_idle_s = 0.5;
    c->pipe_reserve = 3;
    c->rate_scale = 1.0;
    c->cache_blocks = 0;
    c->chunk_tokens = 8192;
    c->max_batch = 128;
    /* 8 x 80 GB HBM - 140 GB weights - 20% activations: ~400 GB of KV */
    c->decode_kv_tokens = 400000000000ull / 327680;
    c->err_bias = 1;
    c->err_decode_bias = 1;
    c->err_seed = 7;
    c->learn = 1;
    c->late_aging = 0.1; /* chosen on the first half (docs/scheduling.md) */
    c->late_window = 64;
    c->late_shed = 1;
    c->baseline_queue = CR__COND_QUEUE_SPF; /* docs/scheduling.md: real engines reorder */
    c->baseline_shed = 0;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

double cr__cond_normal(uint64_t seed, uint64_t k)
{
    /* Box-Muller from two hashed uniforms in (0, 1) */
    uint64_t a = mix64(seed * 0x632BE59BD9B4E019ull ^ mix64(2 * k));
    uint64_t b = mix64(seed * 0x632BE59BD9B4E019ull ^ mix64(2 * k + 1));
    double u1 = ((double)(a >> 11) + 0.5) / 9007199254740992.0;
    double u2 = ((double)(b >> 11) + 0.5) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void cr__cond_dist(double *v, size_t n, cr__cond_dist_t *d)
{
    memset(d, 0, sizeof *d);
    if (!n)
        return;
    qsort(v, n, sizeof *v, cmp_double);
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i];
    d->mean = s / (double)n;
#define PCT(q) v[(size_t)((q) * (double)(n - 1) + 0.5)]
    d->p50 = PCT(0.50);
    d->p90 = PCT(0.90);
    d->p99 = PCT(0.99);
#undef PCT
    d->max = v[n - 1];
}

typedef struct sim {
    const cr__cond_trace_t *tr;
    const cr__cond_sim_cfg_t *c;
    size_t first, n;
    cr_cond_index_t *idx;
    cr_cond_sched_t *s;
    cr_cond_pred_t *pred; /* the scheduler's, borrowed */
    heap_t h;
    rstate_t *rs;
    double *busy;     /* truth: instance free at */
    double *belief;   /* what the scheduler is told: busy-until */
    double *qpred;    /* predicted prefill of what is assigned and not done */
    uint32_t *nq;     /* requests assigned and not done, per prefill instance */
    dinst_t *di;
    shares_t sh;
    /* POLICY_LATE: the conductor's waiting queue, oldest first */
    uint32_t *lq;
    size_t lqn;
    cr_cond_request_t *lreq;
    /* other policies: each prefill engine's own queue, in assignment
     * order, and what it runs (NONE = idle). A pipelined request sits in
     * the queue of every stage and starts when it heads all of them. */
    uint32_t **eq;
    size_t *eqn;
    uint32_t *cur;
    uint64_t idle;
    uint64_t dstep; /* decode steps, for their error draws */
    double now;
    double prefill_gpu, transfer, share_fetch, hit_local, hit_remote, in_tokens;
    size_t pipelined;
} sim_t;

static uint64_t skey(uint64_t h, uint32_t inst)
{
    return mix64(h ^ ((uint64_t)inst << 56 | (uint64_t)inst));
}

static share_ent_t *share_slot(const shares_t *t, uint64_t h, uint32_t inst, uint64_t key)
{
    (void)h;
    (void)inst;
    size_t m = t->cap - 1;
    for (size_t i = key & m;; i = (i + 1) & m)
        if (t->v[i].k == 0 || t->v[i].key == key)
            return &t->v[i];
}

static uint32_t share_get(const shares_t *t, uint64_t h, uint32_t inst)
{
    if (!t->cap)
        return 1;
    share_ent_t *e = share_slot(t, h, inst, skey(h, inst));
    return e->k ? e->k : 1;
}

static int share_set(shares_t *t, uint64_t h, uint32_t inst, uint32_t k)
{
    if (k <= 1 && share_get(t, h, inst) == 1)
        return 0; /* nothing to undo */
    if ((t->used + 1) * 2 > t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 4096;
        share_ent_t *nv = calloc(nc, sizeof *nv);
        if (!nv)
            return -ENOMEM;
        shares_t n2 = {nv, nc, 0};
        for (size_t i = 0; i < t->cap; i++)
            if (t->v[i].k > 1) {
                share_ent_t *e = share_slot(&n2, 0, 0, t->v[i].key);
                *e = t->v[i];
                n2.used++;
            }
        free(t->v);
        *t = n2;
    }
    uint64_t key = skey(h, inst);
    share_ent_t *e = share_slot(t, h, inst, key);
    if (!e->k)
        t->used++;
    e->key = key;
    e->k = k ? k : 1;
    return 0;
}

static void report_decode(sim_t *S, uint32_t d)
{
    dinst_t *x = &S->di[d];
    cr_cond_sched_set_decode_load(S->s, d, x->assigned, x->assigned_ctx, S->c->max_batch);
}

static int start_step(sim_t *S, uint32_t d)
{
    dinst_t *x = &S->di[d];
    while (x->wn) {
        uint32_t r = x->wait[x->whead];
        const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
        if (x->nrun && (x->nrun >= S->c->max_batch ||
                        x->ctx + q->input_len > S->c->decode_kv_tokens))
            break;
        x->whead = (x->whead + 1) % x->wcap;
        x->wn--;
        if (x->nrun == x->caprun) {
            uint32_t nc = x->caprun ? x->caprun * 2 : 64;
            uint32_t *nr = realloc(x->run, nc * sizeof *nr);
            if (!nr)
                return -ENOMEM;
            x->run = nr;
            x->caprun = nc;
        }
        x->run[x->nrun++] = r;
        x->ctx += q->input_len;
    }
    if (!x->nrun) {
        x->stepping = 0;
        return 0;
    }
    x->stepping = 1;
    double dt = cr_cond_cost_decode_step(&S->c->model, x->nrun, x->ctx);
    x->step_t0 = S->now;
    x->step_batch = x->nrun;
    x->step_ctx = x->ctx;
    double f = S->c->err_decode_bias;
    if (S->c->err_sigma > 0)
        f *= exp(S->c->err_sigma * cr__cond_normal(S->c->err_seed ^ 0xdec0de, S->dstep++));
    return heap_push(&S->h, S->now + dt * f, EV_STEP_DONE, d);
}

static void finish(sim_t *S, uint32_t r)
{
    rstate_t *st = &S->rs[r];
    const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
    dinst_t *x = &S->di[st->d];
    st->done = 1;
    /* TBT: mean gap between decode tokens 2..n (see internal.h) */
    st->tbt = q->output_len > 2 ? (S->now - st->second_token) / (q->output_len - 2) : -1;
    x->assigned--;
    x->assigned_ctx -= q->input_len + st->gen;
    report_decode(S, st->d);
}

static int on_step_done(sim_t *S, uint32_t d)
{
    dinst_t *x = &S->di[d];
    if (S->c->learn)
        cr_cond_pred_observe_decode_step(S->pred, x->step_batch, x->step_ctx,
                                         S->now - x->step_t0);
    x->ctx += x->nrun;
    x->assigned_ctx += x->nrun;
    uint32_t k = 0;
    for (uint32_t i = 0; i < x->nrun; i++) {
        uint32_t r = x->run[i];
        rstate_t *st = &S->rs[r];
        const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
        st->gen++;
        if (st->gen == 1)
            st->second_token = S->now;
        if (st->gen + 1 >= q->output_len) {
            x->ctx -= q->input_len + st->gen;
            finish(S, r);
        } else {
            x->run[k++] = r;
        }
    }
    x->nrun = k;
    report_decode(S, d);
    return start_step(S, d);
}

static int on_join(sim_t *S, uint32_t r)
{
    rstate_t *st = &S->rs[r];
    const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
    if (q->output_len <= 1) { /* the prefill produced the only token */
        finish(S, r);
        return 0;
    }
    dinst_t *x = &S->di[st->d];
    if (x->wn == x->wcap) {
        uint32_t nc = x->wcap ? x->wcap * 2 : 64;
        uint32_t *nw = malloc(nc * sizeof *nw);
        if (!nw)
            return -ENOMEM;
        for (uint32_t i = 0; i < x->wn; i++)
            nw[i] = x->wait[(x->whead + i) % x->wcap];
        free(x->wait);
        x->wait = nw;
        x->wcap = nc;
        x->whead = 0;
    }
    x->wait[(x->whead + x->wn) % x->wcap] = r;
    x->wn++;
    if (!x->stepping)
        return start_step(S, st->d);
    return 0;
}

static int late_dispatch(sim_t *S);
static int engine_next(sim_t *S, uint32_t i);

#define NONE UINT32_MAX

static int on_prefill_done(sim_t *S, uint32_t r)
{
    rstate_t *st = &S->rs[r];
    const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
    st->first_token = S->now;
    st->ttft = S->now - st->arrival;
    const uint64_t *hs = S->tr->hashes + q->off;
    double exec = cr_cond_cost_prefill_chunked(&S->c->model, q->input_len, st->reused,
                                               S->c->chunk_tokens, st->stages) *
                  st->factor;
    double start = S->now - exec;
    for (uint64_t m = st->mask; m; m &= m - 1) {
        uint32_t i = (uint32_t)__builtin_ctzll(m);
        /* every stage holds its layer share of every block */
        int rc = cr_cond_index_insert(S->idx, i, CR_COND_TIER_DRAM, hs, q->n_blocks, NULL);
        if (rc)
            return rc;
        for (uint32_t b = 0; b < q->n_blocks; b++)
            if ((rc = share_set(&S->sh, hs[b], i, st->stages)) != 0)
                return rc;
        /* the instance reports its queue; the scheduler re-bases its belief */
        S->qpred[i] -= st->pred;
        S->nq[i]--;
        if (S->nq[i] == 0 || S->qpred[i] < 0)
            S->qpred[i] = 0;
        S->belief[i] = S->now + S->qpred[i];
        if (S->c->policy == CR_COND_POLICY_LATE) {
            if (S->nq[i] == 0)
                S->idle |= 1ull << i;
        } else {
            cr_cond_sched_set_prefill_load(S->s, i, S->belief[i]);
        }
    }
    if (S->c->learn)
        cr_cond_pred_observe_prefill(S->pred, q->input_len, st->reused, st->stages, exec);
    if (S->eq) {
        for (uint64_t m = st->mask; m; m &= m - 1)
            S->cur[__builtin_ctzll(m)] = NONE;
        for (uint64_t m = st->mask; m; m &= m - 1) {
            int rc = engine_next(S, (uint32_t)__builtin_ctzll(m));
            if (rc)
                return rc;
        }
    }
    /* the KV streamed to decode while the prefill ran */
    double tx = cr_cond_cost_transfer(&S->c->model, q->input_len);
    double join = start + tx > S->now ? start + tx : S->now;
    int rc = heap_push(&S->h, join + S->c->model.transfer_overhead_s, EV_DECODE_JOIN, r);
    if (rc == 0 && S->c->policy == CR_COND_POLICY_LATE)
        rc = late_dispatch(S);
    return rc;
}

/* Seconds for instance i to get the KV of the first `reused` tokens of
 * request q for a stage running 1/stages of the layers: blocks it lacks, or
 * holds only a smaller layer share of, are copied (truth, share-aware). */
static double stage_fetch(sim_t *S, const cr__cond_trace_req_t *q, uint32_t i, uint64_t reused,
                          uint32_t stages, uint64_t *local_tok)
{
    const uint64_t *hs = S->tr->hashes + q->off;
    uint32_t bt = S->c->block_tokens;
    cr_cond_match_t m;
    uint32_t held = 0;
    if (q->n_blocks && cr_cond_index_match(S->idx, i, hs, q->n_blocks, &m) == 0)
        held = m.blocks;
    double need = 1.0 / stages, bytes_tok = 0; /* in token-equivalents of full KV */
    uint64_t lt = 0;
    for (uint32_t b = 0; b < held && (uint64_t)b * bt < reused; b++) {
        uint64_t tok = reused - (uint64_t)b * bt < bt ? reused - (uint64_t)b * bt : bt;
        double have = 1.0 / share_get(&S->sh, hs[b], i);
        if (have < need)
            bytes_tok += (need - have) * (double)tok;
        lt += tok;
    }
    if (reused > lt)
        bytes_tok += need * (double)(reused - lt);
    if (local_tok)
        *local_tok = lt;
    if (bytes_tok <= 0)
        return 0;
    return S->c->model.transfer_overhead_s +
           bytes_tok * S->c->model.kv_bytes_per_token / S->c->model.net_bandwidth;
}

/* Applies decision d for request r at S->now: truth execution, belief. */
static int assign(sim_t *S, uint32_t r, const cr_cond_decision_t *d)
{
    rstate_t *st = &S->rs[r];
    const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
    const uint64_t *hs = S->tr->hashes + q->off;
    st->p = d->prefill;
    st->d = d->decode;
    uint64_t mask = d->pipeline_mask ? d->pipeline_mask : 1ull << d->prefill;
    uint32_t stages = (uint32_t)__builtin_popcountll(mask);
    st->mask = mask;
    st->stages = stages;
    st->reused = d->reused_tokens;
    if (d->local_prefix_blocks)
        cr_cond_index_touch(S->idx, d->prefill, hs, d->local_prefix_blocks);
    double start = S->now, maxtx = 0;
    uint64_t local_first = 0;
    for (uint64_t m = mask; m; m &= m - 1) {
        uint32_t i = (uint32_t)__builtin_ctzll(m);
        if (i >= S->c->n_prefill)
            return -EINVAL;
        uint64_t lt;
        double tx = stage_fetch(S, q, i, d->reused_tokens, stages, &lt);
        if (i == d->prefill)
            local_first = lt;
        if (tx > maxtx)
            maxtx = tx;
        double si = S->busy[i] > S->now + tx ? S->busy[i] : S->now + tx;
        if (si > start)
            start = si;
    }
    if (local_first > d->reused_tokens)
        local_first = d->reused_tokens;
    S->hit_local += (double)local_first;
    S->hit_remote += (double)(d->reused_tokens - local_first);
    S->in_tokens += q->input_len;
    if (stages > 1)
        S->share_fetch += maxtx;
    else
        S->transfer += maxtx;
    double exec = cr_cond_cost_prefill_chunked(&S->c->model, q->input_len, d->reused_tokens,
                                               S->c->chunk_tokens, stages) *
                  st->factor;
    S->prefill_gpu += exec * stages;
    if (stages > 1)
        S->pipelined++;
    st->pred = d->est_prefill_s;
    st->ready = S->now + maxtx;
    st->pred_ready = S->now + d->est_transfer_s;
    st->exec = exec;
    st->tx = maxtx;
    st->local_first = local_first;
    for (uint64_t m = mask; m; m &= m - 1) {
        uint32_t i = (uint32_t)__builtin_ctzll(m);
        if (S->eq)
            S->eq[i][S->eqn[i]++] = r;
        else
            S->busy[i] = start + exec;
        /* belief: what the scheduler predicted, on top of what it believed */
        double b = S->belief[i] > S->now ? S->belief[i] : S->now;
        if (S->now + d->est_transfer_s > b)
            b = S->now + d->est_transfer_s;
        S->belief[i] = b + d->est_prefill_s;
        S->qpred[i] += d->est_prefill_s;
        S->nq[i]++;
        S->idle &= ~(1ull << i);
        if (S->c->policy != CR_COND_POLICY_LATE)
            cr_cond_sched_set_prefill_load(S->s, i, S->belief[i]);
    }
    dinst_t *x = &S->di[d->decode];
    x->assigned++;
    x->assigned_ctx += q->input_len;
    report_decode(S, d->decode);
    if (!S->eq)
        return heap_push(&S->h, start + exec, EV_PREFILL_DONE, r);
    for (uint64_t m = mask; m; m &= m - 1) {
        int rc = engine_next(S, (uint32_t)__builtin_ctzll(m));
        if (rc)
            return rc;
    }
    return 0;
}

/* Baseline engine: what it believes request r still needs from now on. */
static double engine_pred_left(const sim_t *S, const rstate_t *st)
{
    return (st->pred_ready > S->now ? st->pred_ready - S->now : 0) + st->pred;
}

static void engine_remove(sim_t *S, uint32_t i, size_t k)
{
    memmove(&S->eq[i][k], &S->eq[i][k + 1], (S->eqn[i] - k - 1) * sizeof **S->eq);
    S->eqn[i]--;
}

/* Baseline engine drops queued request r (baseline_shed): undone as if it
 * had been rejected at arrival; the scheduler hears of the shorter queue. */
static void engine_drop(sim_t *S, uint32_t r)
{
    rstate_t *st = &S->rs[r];
    const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
    st->rejected = 1;
    for (uint64_t m = st->mask; m; m &= m - 1) {
        uint32_t i = (uint32_t)__builtin_ctzll(m);
        S->qpred[i] -= st->pred;
        S->nq[i]--;
        if (S->nq[i] == 0 || S->qpred[i] < 0)
            S->qpred[i] = 0;
        S->belief[i] = S->now + S->qpred[i];
        cr_cond_sched_set_prefill_load(S->s, i, S->belief[i]);
    }
    S->prefill_gpu -= st->exec * st->stages;
    S->in_tokens -= q->input_len;
    S->hit_local -= (double)st->local_first;
    S->hit_remote -= (double)(st->reused - st->local_first);
    if (st->stages > 1) {
        S->pipelined--;
        S->share_fetch -= st->tx;
    } else {
        S->transfer -= st->tx;
    }
    dinst_t *x = &S->di[st->d];
    x->assigned--;
    x->assigned_ctx -= q->input_len;
    report_decode(S, st->d);
}

static int engine_shed(const sim_t *S, const rstate_t *st)
{
    return S->c->baseline_shed && S->c->reject_ttft > 0 &&
           S->now - st->arrival + engine_pred_left(S, st) > S->c->reject_ttft;
}

/* Baseline engine i, if idle, starts the next request of its queue: among
 * those ahead of the first pipelined one, the first (FIFO) or the lowest
 * predicted remaining time minus aging (SPF); a pipelined request at the
 * head starts once it heads every stage's queue and all are idle. */
static int engine_next(sim_t *S, uint32_t i)
{
    const cr__cond_sim_cfg_t *c = S->c;
    int fifo = c->baseline_queue == CR__COND_QUEUE_FIFO || c->late_aging >= CR_COND_LATE_AGING_FIFO;
    while (S->cur[i] == NONE && S->eqn[i]) {
        size_t nb = 0;
        while (nb < S->eqn[i] && S->rs[S->eq[i][nb]].stages == 1)
            nb++;
        if (nb) {
            size_t k = 0;
            if (!fifo) {
                double best = INFINITY;
                for (size_t j = 0; j < nb; j++) {
                    const rstate_t *o = &S->rs[S->eq[i][j]];
                    double sc = engine_pred_left(S, o) - c->late_aging * (S->now - o->arrival);
                    if (sc < best) {
                        best = sc;
                        k = j;
                    }
                }
            }
            uint32_t r = S->eq[i][k];
            engine_remove(S, i, k);
            rstate_t *st = &S->rs[r];
            if (engine_shed(S, st)) {
                engine_drop(S, r);
                continue;
            }
            S->cur[i] = r;
            double start = st->ready > S->now ? st->ready : S->now;
            return heap_push(&S->h, start + st->exec, EV_PREFILL_DONE, r);
        }
        /* a pipelined request heads this queue: gang start */
        uint32_t r = S->eq[i][0];
        rstate_t *st = &S->rs[r];
        for (uint64_t m = st->mask; m; m &= m - 1) {
            uint32_t k = (uint32_t)__builtin_ctzll(m);
            if (S->cur[k] != NONE || !S->eqn[k] || S->eq[k][0] != r)
                return 0; /* i idles until the other stages get to it */
        }
        for (uint64_t m = st->mask; m; m &= m - 1)
            engine_remove(S, (uint32_t)__builtin_ctzll(m), 0);
        if (engine_shed(S, st)) {
            engine_drop(S, r);
            for (uint64_t m = st->mask; m; m &= m - 1) {
                uint32_t k = (uint32_t)__builtin_ctzll(m);
                int rc = k == i ? 0 : engine_next(S, k);
                if (rc)
                    return rc;
            }
            continue;
        }
        for (uint64_t m = st->mask; m; m &= m - 1)
            S->cur[__builtin_ctzll(m)] = r;
        double start = st->ready > S->now ? st->ready : S->now;
        return heap_push(&S->h, start + st->exec, EV_PREFILL_DONE, r);
    }
    return 0;
}

static void set_req(sim_t *S, uint32_t r, cr_cond_request_t *req)
{
    const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
    req->block_hashes = S->tr->hashes + q->off;
    req->n_blocks = q->n_blocks;
    req->input_len = q->input_len;
    req->output_len = q->output_len;
    req->now = S->rs[r].arrival;
}

/* POLICY_LATE: place waiting requests while instances are observed idle. */
static int late_dispatch(sim_t *S)
{
    while (S->lqn && S->idle) {
        size_t w = S->lqn < S->c->late_window ? S->lqn : S->c->late_window;
        for (size_t j = 0; j < w; j++)
            set_req(S, S->lq[j], &S->lreq[j]);
        size_t which;
        cr_cond_decision_t d;
        int rc = cr_cond_sched_pick(S->s, S->lreq, w, S->now, S->idle, &which, &d);
        if (rc)
            return rc;
        uint32_t r = S->lq[which];
        memmove(&S->lq[which], &S->lq[which + 1], (S->lqn - which - 1) * sizeof *S->lq);
        S->lqn--;
        if (d.rejected || (S->c->reject_tbt > 0 && d.est_tbt_s > S->c->reject_tbt)) {
            S->rs[r].rejected = 1;
            continue;
        }
        if ((rc = assign(S, r, &d)) != 0)
            return rc;
    }
    return 0;
}

static int on_arrival(sim_t *S, uint32_t r)
{
    rstate_t *st = &S->rs[r];
    const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
    st->arrival = S->now;
    st->factor = S->c->err_bias;
    if (S->c->err_sigma > 0)
        st->factor *= exp(S->c->err_sigma * cr__cond_normal(S->c->err_seed, S->first + r));
    if (S->c->policy == CR_COND_POLICY_LATE) {
        S->lq[S->lqn++] = r;
        return late_dispatch(S);
    }
    cr_cond_request_t req = {.block_hashes = S->tr->hashes + q->off,
                             .n_blocks = q->n_blocks,
                             .input_len = q->input_len,
                             .output_len = q->output_len,
                             .now = S->now};
    cr_cond_decision_t d;
    int rc = cr_cond_sched_schedule(S->s, &req, &d);
    if (rc)
        return rc;
    if (d.rejected) {
        st->rejected = 1;
        return 0;
    }
    return assign(S, r, &d);
}

static int dispatch(sim_t *S, const ev_t *e)
{
    S->now = e->t;
    switch (e->type) {
    case EV_PREFILL_DONE:
        return on_prefill_done(S, e->a);
    case EV_DECODE_JOIN:
        return on_join(S, e->a);
    default:
        return on_step_done(S, e->a);
    }
}

int cr__cond_sim_run(const cr__cond_trace_t *tr, const cr__cond_sim_cfg_t *c,
                     cr__cond_sim_result_t *res, double *ttft_out)
{
    if (!tr || !c || !res || c->n_prefill == 0 || c->n_prefill > CR_COND_MAX_INSTANCES ||
        c->n_decode == 0 || c->n_decode > 4096 || !(c->rate_scale > 0) ||
        c->block_tokens == 0 || c->max_batch == 0 || c->first > tr->n ||
        !(c->err_sigma >= 0) || !(c->err_sigma <= 3) || !(c->err_bias > 0) ||
        !(c->err_decode_bias > 0) || !isfinite(c->err_bias) || !isfinite(c->err_decode_bias) ||
        c->late_window == 0 || (c->baseline_queue != CR__COND_QUEUE_FIFO &&
                                c->baseline_queue != CR__COND_QUEUE_SPF))
        return -EINVAL;
    sim_t S;
    memset(&S, 0, sizeof S);
    S.tr = tr;
    S.c = c;
    S.first = c->first;
    S.n = tr->n - c->first;
    if (c->count && c->count < S.n)
        S.n = c->count;
    int rc = -ENOMEM;
    cr_cond_index_params_t ip = {.field_mask = CR_COND_INDEX_PARAM_MAX_INSTANCES |
                                               CR_COND_INDEX_PARAM_EXPECTED_BLOCKS |
                                               CR_COND_INDEX_PARAM_DEFAULT_CAPACITY,
                                 .max_instances = c->n_prefill,
                                 .expected_blocks = 1u << 16,
                                 .default_capacity = {0, c->cache_blocks, 0}};
    if ((rc = cr_cond_index_create(&ip, &S.idx)) != 0)
        return rc;
    cr_cond_sched_params_t sp = {
        .field_mask = CR_COND_SCHED_PARAM_POLICY | CR_COND_SCHED_PARAM_MODEL |
                      CR_COND_SCHED_PARAM_BLOCK_TOKENS | CR_COND_SCHED_PARAM_BALANCE_THRESHOLD |
                      CR_COND_SCHED_PARAM_TTFT_SLO | CR_COND_SCHED_PARAM_TBT_SLO |
                      CR_COND_SCHED_PARAM_SEED | CR_COND_SCHED_PARAM_FETCH_MIN_GAIN |
                      CR_COND_SCHED_PARAM_CHUNK_TOKENS | CR_COND_SCHED_PARAM_PIPELINE |
                      CR_COND_SCHED_PARAM_LATE | CR_COND_SCHED_PARAM_LATE_SHED,
        .policy = c->policy,
        .model = c->model,
        .block_tokens = c->block_tokens,
        .balance_threshold = c->threshold,
        .ttft_slo_s = c->reject_ttft,
        .tbt_slo_s = c->reject_tbt,
        .seed = c->seed,
        .fetch_min_gain_s = c->min_gain,
        .chunk_tokens = c->chunk_tokens,
        .pipeline_min_prefill_s = c->pipe_min_s,
        .pipeline_max_stages = c->pipe_max ? c->pipe_max : 4,
        .pipeline_idle_s = c->pipe_idle_s,
        .pipeline_reserve = c->pipe_reserve,
        .late_aging = c->late_aging,
        .late_window = c->late_window,
        .late_shed = c->late_shed};
    if ((rc = cr_cond_sched_create(&sp, S.idx, c->n_prefill, c->n_decode, &S.s)) != 0)
        goto out;
    S.pred = cr_cond_sched_predictor(S.s);
    rc = -ENOMEM;
    S.rs = calloc(S.n ? S.n : 1, sizeof *S.rs);
    S.busy = calloc(c->n_prefill, sizeof *S.busy);
    S.belief = calloc(c->n_prefill, sizeof *S.belief);
    S.qpred = calloc(c->n_prefill, sizeof *S.qpred);
    S.nq = calloc(c->n_prefill, sizeof *S.nq);
    S.di = calloc(c->n_decode, sizeof *S.di);
    S.lq = calloc(S.n ? S.n : 1, sizeof *S.lq);
    S.lreq = calloc(c->late_window, sizeof *S.lreq);
    if (!S.rs || !S.busy || !S.belief || !S.qpred || !S.nq || !S.di || !S.lq || !S.lreq)
        goto out;
    if (c->policy != CR_COND_POLICY_LATE) {
        S.eq = calloc(c->n_prefill, sizeof *S.eq);
        S.eqn = calloc(c->n_prefill, sizeof *S.eqn);
        S.cur = malloc(c->n_prefill * sizeof *S.cur);
        if (!S.eq || !S.eqn || !S.cur)
            goto out;
        for (uint32_t i = 0; i < c->n_prefill; i++) {
            S.cur[i] = NONE;
            if (!(S.eq[i] = malloc((S.n ? S.n : 1) * sizeof **S.eq)))
                goto out;
        }
    }
    S.idle = c->n_prefill == 64 ? ~0ull : (1ull << c->n_prefill) - 1;
    for (uint32_t i = 0; i < c->n_decode; i++)
        report_decode(&S, i);

    double t0 = S.n ? tr->reqs[S.first].ts_ms : 0;
    size_t next = 0, step = S.n / 10 ? S.n / 10 : 1;
    uint64_t wall0 = cr__now_ns();
    rc = 0;
    while (!rc && (next < S.n || S.h.n)) {
        double ta = next < S.n ? (tr->reqs[S.first + next].ts_ms - t0) / 1000.0 / c->rate_scale
                               : INFINITY;
        if (S.h.n && S.h.v[0].t <= ta) {
            ev_t e = heap_pop(&S.h);
            rc = dispatch(&S, &e);
        } else {
            S.now = ta;
            rc = on_arrival(&S, (uint32_t)next);
            next++;
            if (c->progress && next % step == 0)
                c->progress(c->progress_user, c->policy, next, S.n, S.now,
                            (double)(cr__now_ns() - wall0) / 1e9);
        }
    }
    if (rc)
        goto out;

    /* results */
    memset(res, 0, sizeof *res);
    double *tt = malloc((S.n ? S.n : 1) * sizeof *tt);
    double *tb = malloc((S.n ? S.n : 1) * sizeof *tb);
    double *ho = malloc((S.n ? S.n : 1) * sizeof *ho);
    if (!tt || !tb || !ho) {
        free(tt);
        free(tb);
        free(ho);
        rc = -ENOMEM;
        goto out;
    }
    size_t ntt = 0, ntb = 0, nho = 0, ok = 0;
    for (size_t i = 0; i < S.n; i++) {
        rstate_t *st = &S.rs[i];
        if (ttft_out)
            ttft_out[i] = st->rejected ? -1 : st->ttft;
        if (st->rejected) {
            res->rejected++;
            continue;
        }
        res->completed++;
        tt[ntt++] = st->ttft;
        if (st->tbt >= 0)
            tb[ntb++] = st->tbt;
        if (tr->reqs[S.first + i].output_len >= 2)
            ho[nho++] = st->second_token - st->first_token;
        int good = (c->slo_ttft <= 0 || st->ttft <= c->slo_ttft) &&
                   (c->slo_tbt <= 0 || st->tbt < 0 || st->tbt <= c->slo_tbt);
        ok += good;
    }
    res->n = S.n;
    cr__cond_dist(tt, ntt, &res->ttft);
    cr__cond_dist(tb, ntb, &res->tbt);
    cr__cond_dist(ho, nho, &res->handoff);
    free(tt);
    free(tb);
    free(ho);
    res->slo_attainment = S.n ? (double)ok / (double)S.n : 0;
    res->hit_local = S.in_tokens > 0 ? S.hit_local / S.in_tokens : 0;
    res->hit_remote = S.in_tokens > 0 ? S.hit_remote / S.in_tokens : 0;
    res->prefill_gpu_s = S.prefill_gpu;
    res->transfer_s = S.transfer;
    res->share_fetch_s = S.share_fetch;
    res->sim_end_s = S.now;
    res->pipelined = S.pipelined;
    cr_cond_pred_stats(S.pred, &res->pred);
    cr_cond_index_stats_t is;
    cr_cond_index_stats(S.idx, &is);
    res->evictions = is.evictions;
out:
    if (S.di)
        for (uint32_t i = 0; i < c->n_decode; i++) {
            free(S.di[i].run);
            free(S.di[i].wait);
        }
    free(S.di);
    free(S.busy);
    free(S.belief);
    free(S.qpred);
    free(S.nq);
    free(S.lq);
    free(S.lreq);
    if (S.eq)
        for (uint32_t i = 0; i < c->n_prefill; i++)
            free(S.eq[i]);
    free(S.eq);
    free(S.eqn);
    free(S.cur);
    free(S.sh.v);
    free(S.rs);
    free(S.h.v);
    cr_cond_sched_destroy(S.s);
    cr_cond_index_destroy(S.idx);
    return rc;
}
