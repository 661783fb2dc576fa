/* Simulator on tiny synthetic traces. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conductor/internal.h"

/* Builds a trace of n requests: request i arrives at i * gap_ms, has
 * nblocks blocks of 512 tokens; the first `shared` blocks come from one of
 * `groups` shared prefixes (group i % groups), the rest are unique. */
static void synth(cr__cond_trace_t *t, size_t n, double gap_ms, uint32_t nblocks,
                  uint32_t shared, uint32_t groups, uint32_t out_len)
{
    memset(t, 0, sizeof *t);
    t->reqs = calloc(n, sizeof *t->reqs);
    t->hashes = calloc(n * nblocks, sizeof *t->hashes);
    assert_non_null(t->reqs);
    assert_non_null(t->hashes);
    uint64_t uniq = 1000000;
    for (size_t i = 0; i < n; i++) {
        cr__cond_trace_req_t *r = &t->reqs[i];
        r->ts_ms = (double)i * gap_ms;
        r->input_len = nblocks * 512;
        r->output_len = out_len;
        r->n_blocks = nblocks;
        r->off = t->n_hashes;
        for (uint32_t b = 0; b < nblocks; b++)
            t->hashes[t->n_hashes++] = b < shared ? (i % groups) * 1000 + b : uniq++;
    }
    t->n = n;
}

static void test_single_request_exact_ttft(void **st)
{
    (void)st;
    cr__cond_trace_t t;
    synth(&t, 1, 0, 8, 0, 1, 10);
    cr__cond_sim_cfg_t c;
    cr__cond_sim_cfg_default(&c);
    c.n_prefill = 1;
    c.n_decode = 1;
    c.chunk_tokens = 1024;
    cr__cond_sim_result_t r;
    double ttft[1];
    assert_int_equal(cr__cond_sim_run(&t, &c, &r, ttft), 0);
    double want = 0;
    for (uint64_t a = 0; a < 4096; a += 1024)
        want += cr_cond_cost_prefill(&c.model, a + 1024, a);
    assert_int_equal(r.completed, 1);
    assert_int_equal(r.rejected, 0);
    assert_float_equal(ttft[0], want, 1e-9);
    assert_float_equal(r.ttft.mean, want, 1e-9);
    assert_float_equal(r.prefill_gpu_s, want, 1e-9);
    /* TBT: the 8 gaps between decode tokens 2..10, one step of batch 1 each */
    double tb = 0;
    for (uint32_t g = 1; g < 9; g++)
        tb += cr_cond_cost_decode_step(&c.model, 1, 4096 + g);
    assert_float_equal(r.tbt.mean, tb / 8, 1e-9);
    /* the first -> second token gap: the KV streamed during the prefill
     * (arrives at max(end, start + transfer) + overhead), then one step */
    double tx = cr_cond_cost_transfer(&c.model, 4096);
    double join = (tx > want ? tx : want) + c.model.transfer_overhead_s;
    assert_float_equal(r.handoff.mean, join - want + cr_cond_cost_decode_step(&c.model, 1, 4096),
                       1e-6);
    cr__cond_trace_free(&t);
}

static void test_prefix_reuse_local(void **st)
{
    (void)st;
    cr__cond_trace_t t;
    /* 2 requests, same 6-block prefix, second arrives after the first is done */
    synth(&t, 2, 60000, 8, 6, 1, 2);
    cr__cond_sim_cfg_t c;
    cr__cond_sim_cfg_default(&c);
    c.n_prefill = 2;
    c.n_decode = 1;
    c.policy = CR_COND_POLICY_LOCAL_CACHE;
    cr__cond_sim_result_t r;
    double ttft[2];
    assert_int_equal(cr__cond_sim_run(&t, &c, &r, ttft), 0);
    /* second request reuses 6 of 16 blocks' worth of input tokens */
    assert_float_equal(r.hit_local, 6.0 * 512 / (2.0 * 8 * 512), 1e-9);
    assert_float_equal(r.hit_remote, 0, 1e-12);
    assert_true(ttft[1] < ttft[0]);
    cr__cond_trace_free(&t);
}

static double run_policy(const cr__cond_trace_t *t, cr_cond_policy_t p, cr__cond_sim_result_t *r)
{
    cr__cond_sim_cfg_t c;
    cr__cond_sim_cfg_default(&c);
    c.n_prefill = 4;
    c.n_decode = 2;
    c.policy = p;
    c.cache_blocks = 400;
    assert_int_equal(cr__cond_sim_run(t, &c, r, NULL), 0);
    assert_int_equal(r->completed + r->rejected, t->n);
    return r->ttft.mean;
}

static void test_policy_ordering_on_shared_prefixes(void **st)
{
    (void)st;
    cr__cond_trace_t t;
    /* 400 requests of 16 blocks, 12 shared among 8 groups, ~load 0.8 */
    synth(&t, 400, 450, 16, 12, 8, 20);
    cr__cond_sim_result_t rr, rl, rg, rc;
    double random = run_policy(&t, CR_COND_POLICY_RANDOM, &rr);
    double local = run_policy(&t, CR_COND_POLICY_LOCAL_CACHE, &rl);
    double global = run_policy(&t, CR_COND_POLICY_GLOBAL_CACHE, &rg);
    double ours = run_policy(&t, CR_COND_POLICY_COST_FETCH, &rc);
    print_message("avg TTFT random %.3f local %.3f global %.3f cost_fetch %.3f\n", random, local,
                  global, ours);
    print_message("hits: local-aware %.3f/%.3f global %.3f/%.3f\n", rl.hit_local, rl.hit_remote,
                  rg.hit_local, rg.hit_remote);
    if (!(random > local && local >= global))
        fail_msg("expected random > local >= global, got %.3f %.3f %.3f", random, local, global);
    /* cache-aware policies reuse about 12/16 of the tokens */
    assert_true(rg.hit_local + rg.hit_remote > 0.6);
    assert_true(rr.hit_local + rr.hit_remote < rg.hit_local + rg.hit_remote);
    cr__cond_trace_free(&t);
}

static void test_rejection_and_rate_scale(void **st)
{
    (void)st;
    cr__cond_trace_t t;
    synth(&t, 200, 100, 16, 0, 1, 10); /* overloaded: 10 req/s of ~1 s prefills */
    cr__cond_sim_cfg_t c;
    cr__cond_sim_cfg_default(&c);
    c.n_prefill = 2;
    c.n_decode = 1;
    cr__cond_sim_result_t r1, r2;
    assert_int_equal(cr__cond_sim_run(&t, &c, &r1, NULL), 0);
    assert_int_equal(r1.rejected, 0);
    c.reject_ttft = 5;
    c.slo_ttft = 5;
    assert_int_equal(cr__cond_sim_run(&t, &c, &r2, NULL), 0);
    assert_true(r2.rejected > 0);
    assert_int_equal(r2.completed + r2.rejected, 200);
    /* admitted requests meet the TTFT SLO (estimates are exact here) */
    if (!(r2.ttft.max <= 5 + 1e-6))
        fail_msg("max TTFT %.3f > 5 with rejection at 5", r2.ttft.max);
    assert_true(r1.ttft.max > 5);
    /* halving the arrival rate lowers TTFT */
    c.reject_ttft = 0;
    c.rate_scale = 0.5;
    cr__cond_sim_result_t r3;
    assert_int_equal(cr__cond_sim_run(&t, &c, &r3, NULL), 0);
    assert_true(r3.ttft.mean < r1.ttft.mean);
    /* a subset replay */
    c.first = 50;
    c.count = 20;
    assert_int_equal(cr__cond_sim_run(&t, &c, &r3, NULL), 0);
    assert_int_equal(r3.n, 20);
    c.first = 500;
    assert_int_equal(cr__cond_sim_run(&t, &c, &r3, NULL), -EINVAL);
    cr__cond_trace_free(&t);
}

static void test_hit_rate_grows_with_capacity(void **st)
{
    (void)st;
    cr__cond_trace_t t;
    synth(&t, 300, 2000, 8, 6, 40, 5);
    cr__cond_sim_cfg_t c;
    cr__cond_sim_cfg_default(&c);
    c.n_prefill = 4;
    c.n_decode = 1;
    c.policy = CR_COND_POLICY_GLOBAL_CACHE;
    double prev = -1;
    uint64_t caps[4] = {8, 32, 128, 0};
    for (int i = 0; i < 4; i++) {
        c.cache_blocks = caps[i];
        cr__cond_sim_result_t r;
        assert_int_equal(cr__cond_sim_run(&t, &c, &r, NULL), 0);
        double h = r.hit_local + r.hit_remote;
        if (!(h >= prev))
            fail_msg("hit rate %.3f at capacity %llu below %.3f at smaller capacity", h,
                     (unsigned long long)caps[i], prev);
        prev = h;
    }
    assert_true(prev > 0.6);
    cr__cond_trace_free(&t);
}

static void test_pipelines_when_idle(void **st)
{
    (void)st;
    cr__cond_trace_t t;
    /* sparse 64k-token requests (~8 s prefill each) on 8 idle instances:
     * chunked pipeline parallelism is a Mooncake mechanism, so the baseline
     * (global) pipelines exactly like cost_fetch and late */
    synth(&t, 20, 30000, 128, 0, 1, 5);
    cr__cond_sim_cfg_t c;
    cr__cond_sim_cfg_default(&c);
    c.n_prefill = 8;
    c.n_decode = 2;
    double one = cr_cond_cost_prefill_chunked(&c.model, 65536, 0, c.chunk_tokens, 1);
    double two = cr_cond_cost_prefill_chunked(&c.model, 65536, 0, c.chunk_tokens, 2);
    static const cr_cond_policy_t pol[3] = {CR_COND_POLICY_GLOBAL_CACHE,
                                            CR_COND_POLICY_COST_FETCH, CR_COND_POLICY_LATE};
    for (int i = 0; i < 3; i++) {
        cr__cond_sim_result_t r;
        c.policy = pol[i];
        c.pipe_min_s = 3;
        assert_int_equal(cr__cond_sim_run(&t, &c, &r, NULL), 0);
        assert_int_equal(r.pipelined, 20);
        assert_float_equal(r.ttft.mean, two, 1e-6);
        /* pipelining costs GPU time: 2 instances for `two` seconds each */
        assert_float_equal(r.prefill_gpu_s, 20 * 2 * two, 1e-3);
        /* switched off: one instance each */
        c.pipe_min_s = 0;
        assert_int_equal(cr__cond_sim_run(&t, &c, &r, NULL), 0);
        assert_int_equal(r.pipelined, 0);
        assert_float_equal(r.ttft.mean, one, 1e-6);
    }
    cr__cond_trace_free(&t);
}

static void test_pipelined_kv_placement(void **st)
{
    (void)st;
    cr__cond_trace_t t;
    /* the same 64k-token prompt twice, 60 s apart: the first is pipelined
     * over 2 stages, so each stage holds half of the layers of every block;
     * the second (a 1-token prefill, never pipelined) runs on one of them
     * and must first copy the half of the layers it lacks */
    synth(&t, 2, 60000, 128, 128, 1, 2);
    cr__cond_sim_cfg_t c;
    cr__cond_sim_cfg_default(&c);
    c.n_prefill = 8;
    c.n_decode = 1;
    c.policy = CR_COND_POLICY_GLOBAL_CACHE;
    double ttft[2];
    cr__cond_sim_result_t r;
    assert_int_equal(cr__cond_sim_run(&t, &c, &r, ttft), 0);
    assert_int_equal(r.pipelined, 1);
    double two = cr_cond_cost_prefill_chunked(&c.model, 65536, 0, c.chunk_tokens, 2);
    assert_float_equal(ttft[0], two, 1e-6);
    double half = c.model.transfer_overhead_s +
                  0.5 * 65535 * c.model.kv_bytes_per_token / c.model.net_bandwidth;
    double want = half + cr_cond_cost_prefill_chunked(&c.model, 65536, 65535, c.chunk_tokens, 1);
    assert_float_equal(ttft[1], want, 1e-6);
    /* unpipelined, the second request reuses everything in place */
    c.pipe_min_s = 0;
    assert_int_equal(cr__cond_sim_run(&t, &c, &r, ttft), 0);
    assert_float_equal(ttft[1], cr_cond_cost_prefill_chunked(&c.model, 65536, 65535,
                                                             c.chunk_tokens, 1),
                       1e-6);
    cr__cond_trace_free(&t);
}

static void test_error_model_is_paired_and_learned(void **st)
{
    (void)st;
    cr__cond_trace_t t;
    /* 400 sparse 8k-token requests on one instance: each prefill alone, so
     * TTFT = the actual prefill time = model x bias x exp(sigma Z_r) */
    synth(&t, 400, 20000, 16, 0, 1, 3);
    cr__cond_sim_cfg_t c;
    cr__cond_sim_cfg_default(&c);
    c.n_prefill = 1;
    c.n_decode = 1;
    c.err_sigma = 0.3;
    c.err_bias = 1.5;
    double *a = calloc(400, sizeof *a), *b = calloc(400, sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    cr__cond_sim_result_t r;
    c.policy = CR_COND_POLICY_GLOBAL_CACHE;
    assert_int_equal(cr__cond_sim_run(&t, &c, &r, a), 0);
    c.policy = CR_COND_POLICY_LOAD_BALANCE;
    assert_int_equal(cr__cond_sim_run(&t, &c, &r, b), 0);
    double base = cr_cond_cost_prefill_chunked(&c.model, 8192, 0, c.chunk_tokens, 1);
    double sl = 0, sl2 = 0;
    for (int i = 0; i < 400; i++) {
        /* the same request meets the same error under every policy */
        assert_float_equal(a[i], b[i], 1e-12);
        double x = log(a[i] / base);
        sl += x;
        sl2 += x * x;
    }
    double mean = sl / 400, sd = sqrt(sl2 / 400 - mean * mean);
    if (fabs(mean - log(1.5)) > 0.05 || fabs(sd - 0.3) > 0.05)
        fail_msg("log error mean %.3f sd %.3f, want %.3f and 0.3", mean, sd, log(1.5));
    /* the scheduler's predictor learned the bias and the spread */
    if (fabs(r.pred.prefill_factor / 1.5 - 1) > 0.2 || fabs(r.pred.prefill_sigma - 0.3) > 0.1)
        fail_msg("predictor factor %.3f sigma %.3f, want ~1.5 and ~0.3", r.pred.prefill_factor,
                 r.pred.prefill_sigma);
    assert_int_equal(r.pred.prefill_samples, 400);
    /* not reported to it: it keeps the prior */
    c.learn = 0;
    assert_int_equal(cr__cond_sim_run(&t, &c, &r, NULL), 0);
    assert_int_equal(r.pred.prefill_samples, 0);
    assert_float_equal(r.pred.prefill_factor, 1.0, 1e-12);
    free(a);
    free(b);
    cr__cond_trace_free(&t);
}

/* Trace of n requests, all arriving at t = 0 (coarse timestamps, as the
 * Mooncake trace's), request i with blocks[i] unique 512-token blocks. */
static void synth_tied(cr__cond_trace_t *t, size_t n, const uint32_t *blocks)
{
    memset(t, 0, sizeof *t);
    size_t nh = 0;
    for (size_t i = 0; i < n; i++)
        nh += blocks[i];
    t->reqs = calloc(n, sizeof *t->reqs);
    t->hashes = calloc(nh, sizeof *t->hashes);
    assert_non_null(t->reqs);
    assert_non_null(t->hashes);
    for (size_t i = 0; i < n; i++) {
        cr__cond_trace_req_t *r = &t->reqs[i];
        r->input_len = blocks[i] * 512;
        r->output_len = 10;
        r->n_blocks = blocks[i];
        r->off = t->n_hashes;
        for (uint32_t b = 0; b < blocks[i]; b++, t->n_hashes++)
            t->hashes[t->n_hashes] = 5000000 + t->n_hashes;
    }
    t->n = n;
}

/* One prefill instance; request 0 runs first, 1..3 (long, short, medium)
 * queue behind it with the same arrival time: FIFO serves them in arrival
 * sequence whatever their predicted lengths (baseline engines with
 * --baseline_queue=fifo, and late with aging >= CR_COND_LATE_AGING_FIFO);
 * SPF serves the short one first. */
static void test_fifo_ties_in_arrival_order(void **st)
{
    (void)st;
    static const uint32_t blocks[4] = {16, 24, 2, 8};
    cr__cond_trace_t t;
    synth_tied(&t, 4, blocks);
    cr__cond_sim_cfg_t c;
    cr__cond_sim_cfg_default(&c);
    c.n_prefill = 1;
    c.n_decode = 1;
    cr__cond_sim_result_t r;
    double tt[4];
    static const cr_cond_policy_t pols[2] = {CR_COND_POLICY_GLOBAL_CACHE, CR_COND_POLICY_LATE};
    for (int k = 0; k < 2; k++) {
        c.policy = pols[k];
        /* FIFO: baseline engines by option, late by aging */
        c.baseline_queue = CR__COND_QUEUE_FIFO;
        c.late_aging = k ? CR_COND_LATE_AGING_FIFO : 0.1;
        assert_int_equal(cr__cond_sim_run(&t, &c, &r, tt), 0);
        assert_int_equal(r.completed, 4);
        for (int i = 1; i < 4; i++)
            if (!(tt[i] > tt[i - 1]))
                fail_msg("%s FIFO: request %d done at %.3f s, not after request %d (%.3f s)",
                         cr_cond_policy_name(c.policy), i, tt[i], i - 1, tt[i - 1]);
        /* SPF (aging 0.1): the short one (2) overtakes the long one (1) */
        c.baseline_queue = CR__COND_QUEUE_SPF;
        c.late_aging = 0.1;
        assert_int_equal(cr__cond_sim_run(&t, &c, &r, tt), 0);
        if (!(tt[2] < tt[3] && tt[3] < tt[1]))
            fail_msg("%s SPF: TTFTs 1 %.3f 2 %.3f 3 %.3f, want 2 < 3 < 1",
                     cr_cond_policy_name(c.policy), tt[1], tt[2], tt[3]);
    }
    cr__cond_trace_free(&t);
}

/* One prefill instance; request 0 (32k tokens) runs twice as long as
 * predicted (err_bias 2, the predictor not learning), request 1 (1k
 * tokens) queues behind it. At arrival 1's predicted TTFT is under the SLO
 * (admitted); when it could start, wait + predicted prefill is over it. A
 * shedding baseline engine drops it (a rejection); one without shedding
 * serves it late. Late sheds it unless late_shed is off. */
static void test_shedding_drops_queued_past_slo(void **st)
{
    (void)st;
    static const uint32_t blocks[2] = {64, 2};
    cr__cond_trace_t t;
    synth_tied(&t, 2, blocks);
    cr__cond_sim_cfg_t c;
    cr__cond_sim_cfg_default(&c);
    c.n_prefill = 1;
    c.n_decode = 1;
    c.pipe_min_s = 0;
    c.err_bias = 2;
    c.learn = 0;
    double e0 = cr_cond_cost_prefill_chunked(&c.model, 64 * 512, 0, c.chunk_tokens, 1);
    double p1 = cr_cond_cost_prefill_chunked(&c.model, 2 * 512, 0, c.chunk_tokens, 1);
    c.reject_ttft = c.slo_ttft = e0 + p1 + 0.5 * e0; /* met at arrival, lost at 2 e0 */
    cr__cond_sim_result_t r;
    double tt[2];
    static const cr_cond_policy_t pols[2] = {CR_COND_POLICY_GLOBAL_CACHE, CR_COND_POLICY_LATE};
    for (int k = 0; k < 2; k++) {
        c.policy = pols[k];
        for (int q = 0; q < 2; q++) {
            c.baseline_queue = q ? CR__COND_QUEUE_SPF : CR__COND_QUEUE_FIFO;
            /* shedding on */
            c.baseline_shed = 1;
            c.late_shed = 1;
            assert_int_equal(cr__cond_sim_run(&t, &c, &r, tt), 0);
            if (r.rejected != 1 || tt[1] != -1)
                fail_msg("%s shedding: %zu rejected, request 1 TTFT %.3f; want it dropped",
                         cr_cond_policy_name(c.policy), r.rejected, tt[1]);
            assert_int_equal(r.completed, 1);
            assert_float_equal(tt[0], 2 * e0, 1e-9);
            /* a dropped request used no prefill GPU time */
            assert_float_equal(r.prefill_gpu_s, 2 * e0, 1e-9);
            /* shedding off: served, and late */
            c.baseline_shed = 0;
            c.late_shed = 0;
            assert_int_equal(cr__cond_sim_run(&t, &c, &r, tt), 0);
            if (r.rejected != 0 || !(tt[1] > c.reject_ttft))
                fail_msg("%s without shedding: %zu rejected, request 1 TTFT %.3f (SLO %.3f)",
                         cr_cond_policy_name(c.policy), r.rejected, tt[1], c.reject_ttft);
        }
    }
    cr__cond_trace_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_request_exact_ttft),
        cmocka_unit_test(test_prefix_reuse_local),
        cmocka_unit_test(test_policy_ordering_on_shared_prefixes),
        cmocka_unit_test(test_rejection_and_rate_scale),
        cmocka_unit_test(test_hit_rate_grows_with_capacity),
        cmocka_unit_test(test_pipelines_when_idle),
        cmocka_unit_test(test_pipelined_kv_placement),
        cmocka_unit_test(test_error_model_is_paired_and_learned),
        cmocka_unit_test(test_fifo_ties_in_arrival_order),
        cmocka_unit_test(test_shedding_drops_queued_past_slo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
