/* Discrete-event simulator: P prefill + D decode instances replaying a
 * Mooncake trace under one scheduling policy.
 *
 * Events (binary heap, ties broken by insertion order): arrival (from the
 * trace, in order), prefill done, KV arrived at decode, decode step done.
 *   - Prefill instances serve requests FIFO. A request's prefill runs as
 *     chunks of chunk_tokens tokens; each chunk is charged the cost model
 *     with the tokens before it as reused prefix, so the quadratic attention
 *     term and the per-chunk overhead are exact. Chunks of one request run
 *     back to back (FIFO), so they need no event each. A prefix fetched from
 *     another instance overlaps the queueing: start = max(instance free,
 *     arrival + fetch time).
 *   - After its prefill an instance holds every block of the request in its
 *     DRAM cache (LRU, cache_blocks per instance); blocks it reused are
 *     touched when the request is scheduled.
 *   - The KV cache then moves to the decode instance chosen at arrival
 *     (cost_transfer of input_len tokens), joins its waiting queue, and is
 *     admitted at the next step boundary (continuous batching) if the batch
 *     and KV capacity allow. Every step emits one token per running request
 *     and lasts cost_decode_step(batch, context).
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
    double arrival, first_token, ttft, tbt;
    uint32_t p, d, gen;
    int rejected, done;
} rstate_t;

typedef struct dinst {
    uint32_t *run; /* running request ids */
    uint32_t nrun, caprun;
    uint32_t *wait; /* FIFO ring of waiting ids */
    uint32_t wcap, whead, wn;
    uint64_t ctx; /* context tokens of running requests */
    int stepping;
    uint32_t assigned;      /* running + waiting + in flight, for the scheduler */
    uint64_t assigned_ctx;
} dinst_t;

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
    /* cost_fetch pipelining, chosen on the first half of the conversation
     * trace (docs/scheduling.md) */
    c->pipe_min_s = 3;
    c->pipe_max = 2;
    c->pipe_idle_s = 2;
    c->pipe_reserve = 3;
    c->rate_scale = 1.0;
    c->cache_blocks = 0;
    c->chunk_tokens = 8192;
    c->max_batch = 128;
    /* 8 x 80 GB HBM - 140 GB weights - 20% activations: ~400 GB of KV */
    c->decode_kv_tokens = 400000000000ull / 327680;
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
    heap_t h;
    rstate_t *rs;
    double *busy;
    dinst_t *di;
    double now;
    double prefill_gpu, transfer, hit_local, hit_remote, in_tokens;
    size_t pipelined;
} sim_t;

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
    return heap_push(&S->h, S->now + dt, EV_STEP_DONE, d);
}

static void finish(sim_t *S, uint32_t r)
{
    rstate_t *st = &S->rs[r];
    const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
    dinst_t *x = &S->di[st->d];
    st->done = 1;
    st->tbt = q->output_len > 1 ? (S->now - st->first_token) / (q->output_len - 1) : -1;
    x->assigned--;
    x->assigned_ctx -= q->input_len + st->gen;
    report_decode(S, st->d);
}

static int on_step_done(sim_t *S, uint32_t d)
{
    dinst_t *x = &S->di[d];
    x->ctx += x->nrun;
    x->assigned_ctx += x->nrun;
    uint32_t k = 0;
    for (uint32_t i = 0; i < x->nrun; i++) {
        uint32_t r = x->run[i];
        rstate_t *st = &S->rs[r];
        const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
        st->gen++;
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

static int on_prefill_done(sim_t *S, uint32_t r)
{
    rstate_t *st = &S->rs[r];
    const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
    st->first_token = S->now;
    st->ttft = S->now - st->arrival;
    int rc = cr_cond_index_insert(S->idx, st->p, CR_COND_TIER_DRAM, S->tr->hashes + q->off,
                                  q->n_blocks, NULL);
    if (rc)
        return rc;
    double tx = cr_cond_cost_transfer(&S->c->model, q->input_len);
    return heap_push(&S->h, S->now + tx, EV_DECODE_JOIN, r);
}

static int on_arrival(sim_t *S, uint32_t r)
{
    rstate_t *st = &S->rs[r];
    const cr__cond_trace_req_t *q = &S->tr->reqs[S->first + r];
    st->arrival = S->now;
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
    st->p = d.prefill;
    st->d = d.decode;
    uint64_t local_tok = (uint64_t)d.local_prefix_blocks * S->c->block_tokens;
    if (local_tok > d.reused_tokens)
        local_tok = d.reused_tokens;
    S->hit_local += (double)local_tok;
    S->hit_remote += (double)(d.reused_tokens - local_tok);
    S->in_tokens += q->input_len;
    double tx = cr_cond_cost_transfer(&S->c->model, d.reused_tokens - local_tok);
    S->transfer += tx;
    if (d.local_prefix_blocks)
        cr_cond_index_touch(S->idx, d.prefill, req.block_hashes, d.local_prefix_blocks);
    uint64_t mask = d.pipeline_mask ? d.pipeline_mask : 1ull << d.prefill;
    uint32_t stages = (uint32_t)__builtin_popcountll(mask);
    double start = S->now + tx;
    for (uint64_t m = mask; m; m &= m - 1) {
        uint32_t i = (uint32_t)__builtin_ctzll(m);
        if (i >= S->c->n_prefill)
            return -EINVAL;
        if (S->busy[i] > start)
            start = S->busy[i];
    }
    double exec = cr_cond_cost_prefill_chunked(&S->c->model, q->input_len, d.reused_tokens,
                                               S->c->chunk_tokens, stages);
    S->prefill_gpu += exec * stages;
    if (stages > 1)
        S->pipelined++;
    for (uint64_t m = mask; m; m &= m - 1) {
        uint32_t i = (uint32_t)__builtin_ctzll(m);
        S->busy[i] = start + exec;
        cr_cond_sched_set_prefill_load(S->s, i, start + exec);
    }
    dinst_t *x = &S->di[d.decode];
    x->assigned++;
    x->assigned_ctx += q->input_len;
    report_decode(S, d.decode);
    return heap_push(&S->h, start + exec, EV_PREFILL_DONE, r);
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
        c->block_tokens == 0 || c->max_batch == 0 || c->first > tr->n)
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
                      CR_COND_SCHED_PARAM_CHUNK_TOKENS | CR_COND_SCHED_PARAM_PIPELINE,
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
        .pipeline_reserve = c->pipe_reserve};
    if ((rc = cr_cond_sched_create(&sp, S.idx, c->n_prefill, c->n_decode, &S.s)) != 0)
        goto out;
    rc = -ENOMEM;
    S.rs = calloc(S.n ? S.n : 1, sizeof *S.rs);
    S.busy = calloc(c->n_prefill, sizeof *S.busy);
    S.di = calloc(c->n_decode, sizeof *S.di);
    if (!S.rs || !S.busy || !S.di)
        goto out;
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
                fprintf(stderr, "crescent-sim: %s: %zu/%zu requests, sim %.0f s, wall %.1f s\n",
                        cr_cond_policy_name(c->policy), next, S.n, S.now,
                        (double)(cr__now_ns() - wall0) / 1e9);
        }
    }
    if (rc)
        goto out;

    /* results */
    memset(res, 0, sizeof *res);
    double *tt = malloc((S.n ? S.n : 1) * sizeof *tt);
    double *tb = malloc((S.n ? S.n : 1) * sizeof *tb);
    if (!tt || !tb) {
        free(tt);
        free(tb);
        rc = -ENOMEM;
        goto out;
    }
    size_t ntt = 0, ntb = 0, ok = 0;
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
        int good = (c->slo_ttft <= 0 || st->ttft <= c->slo_ttft) &&
                   (c->slo_tbt <= 0 || st->tbt < 0 || st->tbt <= c->slo_tbt);
        ok += good;
    }
    res->n = S.n;
    cr__cond_dist(tt, ntt, &res->ttft);
    cr__cond_dist(tb, ntb, &res->tbt);
    free(tt);
    free(tb);
    res->slo_attainment = S.n ? (double)ok / (double)S.n : 0;
    res->hit_local = S.in_tokens > 0 ? S.hit_local / S.in_tokens : 0;
    res->hit_remote = S.in_tokens > 0 ? S.hit_remote / S.in_tokens : 0;
    res->prefill_gpu_s = S.prefill_gpu;
    res->transfer_s = S.transfer;
    res->sim_end_s = S.now;
    res->pipelined = S.pipelined;
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
    free(S.rs);
    free(S.h.v);
    cr_cond_sched_destroy(S.s);
    cr_cond_index_destroy(S.idx);
    return rc;
}
