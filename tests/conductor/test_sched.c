/* Scheduling policies on small hand-made clusters where the right answer is
 * known. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "crescent/conductor.h"

#define NB 24 /* request: 24 blocks of 512 = 12288 tokens */

typedef struct {
    cr_cond_index_t *ix;
    cr_cond_sched_t *s;
    uint64_t h[NB];
} fx_t;

static void setup(fx_t *f, cr_cond_policy_t pol, const cr_cond_sched_params_t *extra)
{
    memset(f, 0, sizeof *f);
    cr_cond_index_params_t ip = {.field_mask = CR_COND_INDEX_PARAM_MAX_INSTANCES,
                                 .max_instances = 4};
    assert_int_equal(cr_cond_index_create(&ip, &f->ix), 0);
    cr_cond_sched_params_t p;
    if (extra)
        p = *extra;
    else
        memset(&p, 0, sizeof p);
    p.field_mask |= CR_COND_SCHED_PARAM_POLICY;
    p.policy = pol;
    assert_int_equal(cr_cond_sched_create(&p, f->ix, 4, 2, &f->s), 0);
    for (int i = 0; i < NB; i++)
        f->h[i] = 1000 + (uint64_t)i;
}

static void teardown(fx_t *f)
{
    cr_cond_sched_destroy(f->s);
    cr_cond_index_destroy(f->ix);
}

static cr_cond_decision_t run(fx_t *f, double now)
{
    cr_cond_request_t r = {.block_hashes = f->h,
                           .n_blocks = NB,
                           .input_len = NB * 512,
                           .output_len = 100,
                           .now = now};
    cr_cond_decision_t d;
    memset(&d, 0xab, sizeof d);
    assert_int_equal(cr_cond_sched_schedule(f->s, &r, &d), 0);
    return d;
}

static void test_load_balance_picks_least_queue(void **st)
{
    (void)st;
    fx_t f;
    setup(&f, CR_COND_POLICY_LOAD_BALANCE, NULL);
    double busy[4] = {15, 11, 13, 12};
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(cr_cond_sched_set_prefill_load(f.s, i, busy[i]), 0);
    /* instance 3 holds the whole prefix, but load balancing ignores caches */
    assert_int_equal(cr_cond_index_insert(f.ix, 3, CR_COND_TIER_DRAM, f.h, NB, NULL), 0);
    cr_cond_decision_t d = run(&f, 10);
    assert_int_equal(d.prefill, 1);
    assert_float_equal(d.est_queue_s, 1.0, 1e-9);
    assert_int_equal(d.fetch_from, -1);
    assert_int_equal(d.rejected, 0);
    teardown(&f);
}

static void test_local_cache_aware(void **st)
{
    (void)st;
    fx_t f;
    setup(&f, CR_COND_POLICY_LOCAL_CACHE, NULL);
    assert_int_equal(cr_cond_index_insert(f.ix, 2, CR_COND_TIER_DRAM, f.h, 20, NULL), 0);
    cr_cond_sched_set_prefill_load(f.s, 2, 10.1); /* slightly busy, big cache hit */
    cr_cond_decision_t d = run(&f, 10);
    assert_int_equal(d.prefill, 2);
    assert_int_equal(d.local_prefix_blocks, 20);
    assert_int_equal(d.reused_blocks, 20);
    assert_int_equal(d.reused_tokens, 20 * 512);
    assert_int_equal(d.fetch_from, -1);
    /* very busy: an idle instance without cache wins; local never fetches */
    cr_cond_sched_set_prefill_load(f.s, 2, 100);
    d = run(&f, 10);
    assert_int_not_equal(d.prefill, 2);
    assert_int_equal(d.reused_blocks, 0);
    assert_int_equal(d.fetch_from, -1);
    teardown(&f);
}

static void test_global_cache_aware_fetches(void **st)
{
    (void)st;
    fx_t f;
    setup(&f, CR_COND_POLICY_GLOBAL_CACHE, NULL);
    assert_int_equal(cr_cond_index_insert(f.ix, 0, CR_COND_TIER_DRAM, f.h, 20, NULL), 0);
    for (uint32_t i = 1; i < 4; i++)
        cr_cond_sched_set_prefill_load(f.s, i, 10.0 + i); /* 1 is least busy of the rest */
    cr_cond_sched_set_prefill_load(f.s, 0, 100);
    cr_cond_decision_t d = run(&f, 10);
    assert_int_equal(d.prefill, 1);
    assert_int_equal(d.local_prefix_blocks, 0);
    assert_int_equal(d.reused_blocks, 20);
    assert_int_equal(d.fetch_from, 0);
    assert_true(d.est_transfer_s > 0);
    assert_float_equal(d.est_ttft_s, d.est_transfer_s + d.est_queue_s + d.est_prefill_s, 1e-9);
    /* below the balancing threshold (20/18 < 1.25) the local prefix is used */
    assert_int_equal(cr_cond_index_insert(f.ix, 1, CR_COND_TIER_DRAM, f.h, 18, NULL), 0);
    d = run(&f, 10);
    assert_int_equal(d.prefill, 1);
    assert_int_equal(d.reused_blocks, 18);
    assert_int_equal(d.fetch_from, -1);
    assert_float_equal(d.est_transfer_s, 0.0, 1e-12);
    teardown(&f);
}

static void test_cost_fetch_skips_slow_network(void **st)
{
    (void)st;
    cr_cond_sched_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_COND_SCHED_PARAM_MODEL;
    cr_cond_model_default(&p.model);
    p.model.net_bandwidth = 1e8; /* 100 MB/s: 10k tokens take ~33 s to move */
    fx_t f;
    setup(&f, CR_COND_POLICY_COST_FETCH, &p);
    assert_int_equal(cr_cond_index_insert(f.ix, 0, CR_COND_TIER_DRAM, f.h, 20, NULL), 0);
    cr_cond_sched_set_prefill_load(f.s, 0, 100);
    cr_cond_decision_t d = run(&f, 10);
    assert_int_not_equal(d.prefill, 0);
    assert_int_equal(d.fetch_from, -1); /* recomputing is cheaper */
    teardown(&f);
    /* Algorithm 1 fetches anyway (threshold only) on the same cluster */
    p.field_mask |= CR_COND_SCHED_PARAM_POLICY;
    setup(&f, CR_COND_POLICY_GLOBAL_CACHE, &p);
    assert_int_equal(cr_cond_index_insert(f.ix, 0, CR_COND_TIER_DRAM, f.h, 20, NULL), 0);
    cr_cond_sched_set_prefill_load(f.s, 0, 100);
    d = run(&f, 10);
    /* the ratio test alone decides: it fetches for ~33 s instead of recomputing */
    assert_int_equal(d.fetch_from, 0);
    if (!(d.est_ttft_s > 30))
        fail_msg("global est_ttft %.2f s, expected > 30 (slow fetch)", d.est_ttft_s);
    teardown(&f);
    /* fast network: cost_fetch fetches and overlaps transfer with the queue */
    setup(&f, CR_COND_POLICY_COST_FETCH, NULL);
    assert_int_equal(cr_cond_index_insert(f.ix, 0, CR_COND_TIER_DRAM, f.h, 20, NULL), 0);
    cr_cond_sched_set_prefill_load(f.s, 0, 100);
    for (uint32_t i = 1; i < 4; i++)
        cr_cond_sched_set_prefill_load(f.s, i, 11);
    d = run(&f, 10);
    assert_int_not_equal(d.prefill, 0);
    assert_int_equal(d.fetch_from, 0);
    assert_int_equal(d.reused_blocks, 20);
    assert_float_equal(d.est_ttft_s, 1.0 + d.est_prefill_s, 1e-9); /* transfer hidden */
    teardown(&f);
}

static void test_cost_fetch_pipelines_long_prefill(void **st)
{
    (void)st;
    cr_cond_sched_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_COND_SCHED_PARAM_PIPELINE | CR_COND_SCHED_PARAM_CHUNK_TOKENS;
    p.pipeline_min_prefill_s = 0.5;
    p.pipeline_max_stages = 2;
    p.pipeline_idle_s = 0.1;
    p.chunk_tokens = 4096;
    fx_t f;
    setup(&f, CR_COND_POLICY_COST_FETCH, &p);
    /* instances 0 and 2 idle, 1 and 3 busy: a 12k-token prefill (~1.3 s)
     * goes to {0, 2} as a 2-stage pipeline */
    cr_cond_sched_set_prefill_load(f.s, 1, 50);
    cr_cond_sched_set_prefill_load(f.s, 3, 50);
    cr_cond_decision_t d = run(&f, 0);
    assert_int_equal(d.pipeline_stages, 2);
    assert_int_equal(d.pipeline_mask, (1u << 0) | (1u << 2));
    assert_true(d.prefill == 0 || d.prefill == 2);
    cr_cond_model_t m;
    cr_cond_model_default(&m);
    double single = cr_cond_cost_prefill_chunked(&m, NB * 512, 0, 4096, 1);
    assert_float_equal(d.est_prefill_s, cr_cond_cost_prefill_chunked(&m, NB * 512, 0, 4096, 2),
                       1e-9);
    assert_true(d.est_ttft_s < single);
    /* only one idle instance: no pipeline */
    cr_cond_sched_set_prefill_load(f.s, 2, 50);
    d = run(&f, 0);
    assert_int_equal(d.pipeline_stages, 1);
    assert_int_equal(d.pipeline_mask, 1u << 0);
    assert_int_equal(d.prefill, 0);
    /* a short request is never pipelined */
    cr_cond_sched_set_prefill_load(f.s, 2, 0);
    cr_cond_request_t r = {.block_hashes = f.h, .n_blocks = 2, .input_len = 1024, .now = 0};
    assert_int_equal(cr_cond_sched_schedule(f.s, &r, &d), 0);
    assert_int_equal(d.pipeline_stages, 1);
    teardown(&f);
    /* reserve 1: two idle instances are not enough to pipeline, three are */
    p.pipeline_reserve = 1;
    setup(&f, CR_COND_POLICY_COST_FETCH, &p);
    cr_cond_sched_set_prefill_load(f.s, 1, 50);
    cr_cond_sched_set_prefill_load(f.s, 3, 50);
    d = run(&f, 0);
    assert_int_equal(d.pipeline_stages, 1);
    cr_cond_sched_set_prefill_load(f.s, 3, 0);
    d = run(&f, 0);
    assert_int_equal(d.pipeline_stages, 2);
    teardown(&f);
}

static void test_random_spreads_and_is_seeded(void **st)
{
    (void)st;
    fx_t f;
    setup(&f, CR_COND_POLICY_RANDOM, NULL);
    int seen[4] = {0};
    uint32_t first[64];
    for (int i = 0; i < 64; i++) {
        cr_cond_decision_t d = run(&f, 0);
        assert_true(d.prefill < 4 && d.decode < 2);
        seen[d.prefill]++;
        first[i] = d.prefill;
    }
    for (int i = 0; i < 4; i++)
        assert_true(seen[i] > 0);
    teardown(&f);
    setup(&f, CR_COND_POLICY_RANDOM, NULL);
    for (int i = 0; i < 64; i++)
        assert_int_equal(run(&f, 0).prefill, first[i]);
    teardown(&f);
}

static void test_slo_rejection_and_decode_choice(void **st)
{
    (void)st;
    cr_cond_sched_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_COND_SCHED_PARAM_TTFT_SLO | CR_COND_SCHED_PARAM_TBT_SLO;
    p.ttft_slo_s = 5;
    p.tbt_slo_s = 0.1;
    fx_t f;
    setup(&f, CR_COND_POLICY_GLOBAL_CACHE, &p);
    cr_cond_decision_t d = run(&f, 0);
    assert_int_equal(d.rejected, 0);
    /* every prefill instance busy for 10 s: TTFT SLO violated => reject */
    for (uint32_t i = 0; i < 4; i++)
        cr_cond_sched_set_prefill_load(f.s, i, 10);
    d = run(&f, 0);
    assert_int_equal(d.rejected, 1);
    assert_true(d.est_ttft_s > 5);
    for (uint32_t i = 0; i < 4; i++)
        cr_cond_sched_set_prefill_load(f.s, i, 0);
    /* decode: instance 1 less loaded is chosen */
    cr_cond_sched_set_decode_load(f.s, 0, 40, 40 * 10000, 0);
    cr_cond_sched_set_decode_load(f.s, 1, 4, 4 * 10000, 0);
    d = run(&f, 0);
    assert_int_equal(d.decode, 1);
    assert_int_equal(d.rejected, 0);
    /* both heavily loaded: TBT above 100 ms => reject */
    cr_cond_sched_set_decode_load(f.s, 1, 100, 100 * 40000, 0);
    cr_cond_sched_set_decode_load(f.s, 0, 100, 100 * 40000, 0);
    d = run(&f, 0);
    assert_int_equal(d.rejected, 1);
    assert_true(d.est_tbt_s > 0.1);
    /* a full decode instance (max_batch) is skipped */
    cr_cond_sched_set_decode_load(f.s, 0, 8, 8 * 1000, 8);
    cr_cond_sched_set_decode_load(f.s, 1, 9, 9 * 1000, 16);
    d = run(&f, 0);
    assert_int_equal(d.decode, 1);
    teardown(&f);
}

static void test_bad_args_and_names(void **st)
{
    (void)st;
    cr_cond_sched_t *s = NULL;
    assert_int_equal(cr_cond_sched_create(NULL, NULL, 0, 1, &s), -EINVAL);
    assert_int_equal(cr_cond_sched_create(NULL, NULL, 65, 1, &s), -EINVAL);
    cr_cond_index_params_t ip = {.field_mask = CR_COND_INDEX_PARAM_MAX_INSTANCES,
                                 .max_instances = 2};
    cr_cond_index_t *ix;
    assert_int_equal(cr_cond_index_create(&ip, &ix), 0);
    assert_int_equal(cr_cond_sched_create(NULL, ix, 3, 1, &s), -EINVAL); /* index too small */
    assert_int_equal(cr_cond_sched_create(NULL, ix, 2, 1, &s), 0);
    cr_cond_sched_destroy(s);
    cr_cond_index_destroy(ix);
    assert_int_equal(cr_cond_sched_create(NULL, NULL, 2, 1, &s), 0);
    assert_int_equal(cr_cond_sched_set_prefill_load(s, 2, 0), -EINVAL);
    assert_int_equal(cr_cond_sched_set_decode_load(s, 1, 0, 0, 0), -EINVAL);
    cr_cond_request_t r = {.n_blocks = 3, .block_hashes = NULL, .input_len = 10};
    cr_cond_decision_t d;
    assert_int_equal(cr_cond_sched_schedule(s, &r, &d), -EINVAL);
    r.n_blocks = 0;
    assert_int_equal(cr_cond_sched_schedule(s, &r, &d), 0); /* no index: no cache */
    assert_int_equal(d.reused_blocks, 0);
    cr_cond_sched_destroy(s);
    for (int i = 0; i < CR_COND_POLICY_COUNT; i++) {
        cr_cond_policy_t p;
        assert_int_equal(cr_cond_policy_parse(cr_cond_policy_name((cr_cond_policy_t)i), &p), 0);
        assert_int_equal(p, i);
    }
    cr_cond_policy_t p;
    assert_int_equal(cr_cond_policy_parse("nope", &p), -EINVAL);
}

/* Chunked pipeline parallelism is a mechanism of the baseline too: global
 * cache-aware pipelines a long prefill over idle instances, and the stage
 * that lacks the prefix copies only its layer share of it. */
static void test_global_pipelines_with_layer_shares(void **st)
{
    (void)st;
    fx_t f;
    cr_cond_sched_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_COND_SCHED_PARAM_PIPELINE | CR_COND_SCHED_PARAM_CHUNK_TOKENS;
    p.pipeline_min_prefill_s = 0.5;
    p.pipeline_max_stages = 2;
    p.pipeline_idle_s = 0.1;
    p.chunk_tokens = 4096;
    setup(&f, CR_COND_POLICY_GLOBAL_CACHE, &p);
    assert_int_equal(cr_cond_index_insert(f.ix, 0, CR_COND_TIER_DRAM, f.h, 8, NULL), 0);
    cr_cond_sched_set_prefill_load(f.s, 0, 10);
    cr_cond_sched_set_prefill_load(f.s, 1, 10);
    cr_cond_sched_set_prefill_load(f.s, 2, 50);
    cr_cond_sched_set_prefill_load(f.s, 3, 50);
    cr_cond_decision_t d = run(&f, 10);
    assert_int_equal(d.pipeline_stages, 2);
    assert_int_equal(d.pipeline_mask, 3u);
    assert_int_equal(d.prefill, 0); /* the stage holding the prefix leads */
    assert_int_equal(d.reused_blocks, 8);
    cr_cond_model_t m;
    cr_cond_model_default(&m);
    m.kv_bytes_per_token /= 2; /* instance 1 copies half of the layers */
    assert_float_equal(d.est_transfer_s, cr_cond_cost_transfer(&m, 8 * 512), 1e-12);
    cr_cond_model_default(&m);
    assert_float_equal(d.est_prefill_s,
                       cr_cond_cost_prefill_chunked(&m, NB * 512, 8 * 512, 4096, 2), 1e-12);
    /* Algorithm 1 adds the transfer to the queue */
    assert_float_equal(d.est_ttft_s, d.est_queue_s + d.est_transfer_s + d.est_prefill_s, 1e-12);
    teardown(&f);
}

/* POLICY_LATE on a constructed state: three waiting requests, two idle
 * instances. */
static void test_late_pick(void **st)
{
    (void)st;
    fx_t f;
    cr_cond_sched_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_COND_SCHED_PARAM_LATE;
    p.late_aging = 0;
    p.late_window = 64;
    setup(&f, CR_COND_POLICY_LATE, &p);
    uint64_t hb[4] = {7001, 7002, 7003, 7004}, hc[4] = {8001, 8002, 8003, 8004};
    /* C's prefix (3 blocks) is cached on instance 2 */
    assert_int_equal(cr_cond_index_insert(f.ix, 2, CR_COND_TIER_DRAM, hc, 3, NULL), 0);
    cr_cond_request_t q[3] = {
        {.block_hashes = f.h, .n_blocks = NB, .input_len = NB * 512, .output_len = 10, .now = 0},
        {.block_hashes = hb, .n_blocks = 4, .input_len = 2048, .output_len = 10, .now = 5},
        {.block_hashes = hc, .n_blocks = 4, .input_len = 2048, .output_len = 10, .now = 6}};
    uint64_t idle = (1u << 1) | (1u << 2);
    size_t which = 99;
    cr_cond_decision_t d;
    /* shortest predicted first: C, on the idle instance holding its prefix */
    assert_int_equal(cr_cond_sched_pick(f.s, q, 3, 8, idle, &which, &d), 0);
    assert_int_equal(which, 2);
    assert_int_equal(d.prefill, 2);
    assert_int_equal(d.local_prefix_blocks, 3);
    assert_int_equal(d.rejected, 0);
    assert_float_equal(d.est_queue_s, 2.0, 1e-12); /* waited 8 - 6 s */
    assert_float_equal(d.est_ttft_s, 2.0 + d.est_prefill_s, 1e-12);
    /* the pick is never on a busy instance: only instance 1 idle */
    assert_int_equal(cr_cond_sched_pick(f.s, q, 3, 8, 1u << 1, &which, &d), 0);
    assert_int_equal(d.prefill, 1);
    /* B and C equally long on instance 1 (C's prefix is on 2; fetching it
     * costs ms and saves more): C still first; B next once C is gone */
    assert_int_equal(which, 2);
    assert_int_equal(cr_cond_sched_pick(f.s, q, 2, 8, 1u << 1, &which, &d), 0);
    assert_int_equal(which, 1);
    teardown(&f);

    /* with heavy aging, the oldest (A, long) goes first */
    p.late_aging = 1000;
    setup(&f, CR_COND_POLICY_LATE, &p);
    assert_int_equal(cr_cond_sched_pick(f.s, q, 3, 8, idle, &which, &d), 0);
    assert_int_equal(which, 0);
    teardown(&f);

    /* FIFO aging, ties: A (long) and C (short) arrived at the same time
     * (coarse trace timestamps): A, first in the queue, goes first; with
     * aging 0 the shorter C does */
    cr_cond_request_t tie[2] = {q[0], q[2]};
    tie[0].now = tie[1].now = 6;
    p.late_aging = CR_COND_LATE_AGING_FIFO;
    setup(&f, CR_COND_POLICY_LATE, &p);
    assert_int_equal(cr_cond_sched_pick(f.s, tie, 2, 8, idle, &which, &d), 0);
    assert_int_equal(which, 0);
    teardown(&f);
    p.late_aging = 0;
    setup(&f, CR_COND_POLICY_LATE, &p);
    assert_int_equal(cr_cond_sched_pick(f.s, tie, 2, 8, idle, &which, &d), 0);
    assert_int_equal(which, 1);
    teardown(&f);

    /* with a 10 s TTFT SLO, A (waiting 12 s) is shed first */
    p.late_aging = 0;
    p.field_mask |= CR_COND_SCHED_PARAM_TTFT_SLO;
    p.ttft_slo_s = 10;
    setup(&f, CR_COND_POLICY_LATE, &p);
    assert_int_equal(cr_cond_sched_pick(f.s, q, 3, 12, idle, &which, &d), 0);
    assert_int_equal(which, 0);
    assert_int_equal(d.rejected, 1);
    /* the others (waiting 6-7 s, sub-second prefills) can still make it */
    assert_int_equal(cr_cond_sched_pick(f.s, q + 1, 2, 12, idle, &which, &d), 0);
    assert_int_equal(d.rejected, 0);
    teardown(&f);

    /* late_shed off: A is not shed; the shortest predicted goes first (B,
     * as long as C, whose prefix this fresh index does not hold, and ahead
     * of it in the queue) */
    p.field_mask |= CR_COND_SCHED_PARAM_LATE_SHED;
    p.late_shed = 0;
    setup(&f, CR_COND_POLICY_LATE, &p);
    assert_int_equal(cr_cond_sched_pick(f.s, q, 3, 12, idle, &which, &d), 0);
    assert_int_equal(which, 1);
    assert_int_equal(d.rejected, 0);
    teardown(&f);

    /* the only waiting request, long, 4 idle instances, reserve 1: it is
     * pipelined over idle instances (observed idle, not predicted) */
    memset(&p, 0, sizeof p);
    p.field_mask = CR_COND_SCHED_PARAM_PIPELINE | CR_COND_SCHED_PARAM_CHUNK_TOKENS;
    p.chunk_tokens = 2048; /* one chunk would gain nothing from a pipeline */
    p.pipeline_min_prefill_s = 0.5;
    p.pipeline_max_stages = 3;
    p.pipeline_reserve = 1;
    setup(&f, CR_COND_POLICY_LATE, &p);
    assert_int_equal(cr_cond_sched_pick(f.s, q, 1, 0, 0xf, &which, &d), 0);
    assert_int_equal(which, 0);
    assert_int_equal(d.pipeline_stages, 3);
    assert_int_equal(d.pipeline_mask & ~0xfull, 0);
    /* two idle and reserve 1: not enough to pipeline */
    assert_int_equal(cr_cond_sched_pick(f.s, q, 1, 0, 0x3, &which, &d), 0);
    assert_int_equal(d.pipeline_stages, 1);
    /* nothing idle / nothing waiting */
    assert_int_equal(cr_cond_sched_pick(f.s, q, 1, 0, 0, &which, &d), -ENOENT);
    assert_int_equal(cr_cond_sched_pick(f.s, q, 0, 0, 0xf, &which, &d), -ENOENT);
    assert_int_equal(cr_cond_sched_pick(f.s, q, 1, 0, 0xf, NULL, &d), -EINVAL);
    teardown(&f);
}

/* Every estimate goes through the predictor: once it learned that prefills
 * take twice the model, the scheduler's estimate doubles. */
static void test_sched_uses_learned_predictor(void **st)
{
    (void)st;
    fx_t f;
    setup(&f, CR_COND_POLICY_GLOBAL_CACHE, NULL);
    cr_cond_decision_t d0 = run(&f, 10);
    cr_cond_model_t m0;
    cr_cond_model_default(&m0);
    cr_cond_pred_t *pr = cr_cond_sched_predictor(f.s);
    assert_non_null(pr);
    for (int i = 0; i < 50; i++)
        assert_int_equal(cr_cond_pred_observe_prefill(
                             pr, NB * 512, 0, 1, 2 * cr_cond_cost_prefill(&m0, NB * 512, 0)),
                         0);
    cr_cond_decision_t d1 = run(&f, 10);
    if (!(d1.est_prefill_s > 1.5 * d0.est_prefill_s))
        fail_msg("estimate %.3f s after learning, %.3f s before", d1.est_prefill_s,
                 d0.est_prefill_s);
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_balance_picks_least_queue),
        cmocka_unit_test(test_local_cache_aware),
        cmocka_unit_test(test_global_cache_aware_fetches),
        cmocka_unit_test(test_cost_fetch_skips_slow_network),
        cmocka_unit_test(test_cost_fetch_pipelines_long_prefill),
        cmocka_unit_test(test_random_spreads_and_is_seeded),
        cmocka_unit_test(test_slo_rejection_and_decode_choice),
        cmocka_unit_test(test_bad_args_and_names),
        cmocka_unit_test(test_global_pipelines_with_layer_shares),
        cmocka_unit_test(test_late_pick),
        cmocka_unit_test(test_sched_uses_learned_predictor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
