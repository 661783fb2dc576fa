/* The predictor: a cost-model prior corrected online from reported times. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "conductor/internal.h"
#include "crescent/conductor.h"

static cr_cond_pred_t *mk(double rate)
{
    cr_cond_pred_params_t p = {.field_mask = CR_COND_PRED_PARAM_CHUNK_TOKENS |
                                             CR_COND_PRED_PARAM_LEARN_RATE,
                               .chunk_tokens = 8192,
                               .learn_rate = rate};
    cr_cond_pred_t *pr = NULL;
    assert_int_equal(cr_cond_pred_create(&p, &pr), 0);
    return pr;
}

static void test_prior_is_the_cost_model(void **st)
{
    (void)st;
    cr_cond_pred_t *p = mk(0.05);
    cr_cond_model_t m;
    cr_cond_model_default(&m);
    assert_float_equal(cr_cond_pred_prefill(p, 20000, 4000, 2),
                       cr_cond_cost_prefill_chunked(&m, 20000, 4000, 8192, 2), 1e-12);
    assert_float_equal(cr_cond_pred_decode_step(p, 8, 80000),
                       cr_cond_cost_decode_step(&m, 8, 80000), 1e-12);
    /* no spread learned yet: every bound is the estimate */
    assert_float_equal(cr_cond_pred_prefill_bound(p, 20000, 4000, 2, 2.0),
                       cr_cond_pred_prefill(p, 20000, 4000, 2), 1e-12);
    cr_cond_pred_destroy(p);
}

/* lognormal per-request error with a systematic bias: the predictor learns
 * the bias (median factor) and the spread, not the per-request draw */
static void test_learns_bias_and_spread(void **st)
{
    (void)st;
    cr_cond_pred_t *p = mk(0.02);
    cr_cond_model_t m;
    cr_cond_model_default(&m);
    for (uint64_t k = 0; k < 2000; k++) {
        uint64_t n = 2000 + (k * 7919) % 30000;
        double truth = cr_cond_cost_prefill_chunked(&m, n, 0, 8192, 1) * 1.4 *
                       exp(0.3 * cr__cond_normal(11, k));
        assert_int_equal(cr_cond_pred_observe_prefill(p, n, 0, 1, truth), 0);
    }
    cr_cond_pred_stats_t s;
    assert_int_equal(cr_cond_pred_stats(p, &s), 0);
    assert_int_equal(s.prefill_samples, 2000);
    if (fabs(s.prefill_factor / 1.4 - 1) > 0.1 || fabs(s.prefill_sigma - 0.3) > 0.06)
        fail_msg("learned factor %.3f sigma %.3f, want 1.4 and 0.3", s.prefill_factor,
                 s.prefill_sigma);
    double base = cr_cond_cost_prefill_chunked(&m, 12000, 0, 8192, 1);
    double est = cr_cond_pred_prefill(p, 12000, 0, 1);
    if (fabs(est / base / 1.4 - 1) > 0.12)
        fail_msg("estimate %.3f s, model %.3f s: factor %.3f, want ~1.4", est, base, est / base);
    /* a 2-sigma bound lies about exp(0.6) above the estimate */
    double hi = cr_cond_pred_prefill_bound(p, 12000, 0, 1, 2.0);
    if (!(hi / est > 1.6 && hi / est < 2.0))
        fail_msg("2-sigma bound / estimate = %.3f, want ~1.82", hi / est);
    cr_cond_pred_destroy(p);
}

/* buckets by computed tokens: short prefills can run at another factor
 * than long ones; a bucket with few samples falls back to all buckets */
static void test_buckets_and_fallback(void **st)
{
    (void)st;
    cr_cond_pred_t *p = mk(0.05);
    cr_cond_model_t m;
    cr_cond_model_default(&m);
    for (int k = 0; k < 100; k++) {
        assert_int_equal(cr_cond_pred_observe_prefill(
                             p, 1000, 0, 1, 2.0 * cr_cond_cost_prefill(&m, 1000, 0)),
                         0);
        assert_int_equal(cr_cond_pred_observe_prefill(
                             p, 40000, 0, 1,
                             0.8 * cr_cond_cost_prefill_chunked(&m, 40000, 0, 8192, 1)),
                         0);
    }
    double r1 = cr_cond_pred_prefill(p, 1000, 0, 1) / cr_cond_cost_prefill(&m, 1000, 0);
    double r2 = cr_cond_pred_prefill(p, 40000, 0, 1) /
                cr_cond_cost_prefill_chunked(&m, 40000, 0, 8192, 1);
    assert_float_equal(r1, 2.0, 1e-6);
    assert_float_equal(r2, 0.8, 1e-6);
    /* 5000 tokens: a bucket never observed -> the all-bucket correction */
    cr_cond_pred_stats_t s;
    cr_cond_pred_stats(p, &s);
    double r3 = cr_cond_pred_prefill(p, 5000, 0, 1) /
                cr_cond_cost_prefill_chunked(&m, 5000, 0, 8192, 1);
    assert_float_equal(r3, s.prefill_factor, 1e-9);
    assert_true(r3 > 0.8 && r3 < 2.0);
    cr_cond_pred_destroy(p);
}

/* the engine changes (bias 1.5 -> 1.0): recent reports win */
static void test_follows_a_change(void **st)
{
    (void)st;
    cr_cond_pred_t *p = mk(0.05);
    cr_cond_model_t m;
    cr_cond_model_default(&m);
    double step = cr_cond_cost_decode_step(&m, 16, 200000);
    for (int k = 0; k < 400; k++)
        assert_int_equal(cr_cond_pred_observe_decode_step(p, 16, 200000, 1.5 * step), 0);
    assert_float_equal(cr_cond_pred_decode_step(p, 16, 200000), 1.5 * step, 1e-9);
    for (int k = 0; k < 200; k++)
        assert_int_equal(cr_cond_pred_observe_decode_step(p, 16, 200000, step), 0);
    double f = cr_cond_pred_decode_step(p, 16, 200000) / step;
    if (!(f < 1.01))
        fail_msg("after 200 reports at 1.0x the factor is still %.3f", f);
    cr_cond_pred_destroy(p);
}

/* a bad report is refused and changes nothing */
static void test_bad_reports(void **st)
{
    (void)st;
    cr_cond_pred_t *p = mk(0.05);
    double before = cr_cond_pred_prefill(p, 10000, 0, 1);
    assert_int_equal(cr_cond_pred_observe_prefill(p, 10000, 0, 1, 0), -EINVAL);
    assert_int_equal(cr_cond_pred_observe_prefill(p, 10000, 0, 1, -1), -EINVAL);
    assert_int_equal(cr_cond_pred_observe_prefill(p, 10000, 0, 1, NAN), -EINVAL);
    assert_int_equal(cr_cond_pred_observe_prefill(p, 10000, 0, 1, INFINITY), -EINVAL);
    assert_int_equal(cr_cond_pred_observe_prefill(p, 10000, 10000, 1, 1.0), -EINVAL);
    assert_int_equal(cr_cond_pred_observe_prefill(p, 10000, 0, 0, 1.0), -EINVAL);
    assert_int_equal(cr_cond_pred_observe_decode_step(p, 1, 1, 0), -EINVAL);
    assert_int_equal(cr_cond_pred_observe_prefill(NULL, 10000, 0, 1, 1.0), -EINVAL);
    cr_cond_pred_stats_t s;
    assert_int_equal(cr_cond_pred_stats(p, &s), 0);
    assert_int_equal(s.prefill_samples, 0);
    assert_int_equal(s.decode_samples, 0);
    assert_float_equal(cr_cond_pred_prefill(p, 10000, 0, 1), before, 0);
    assert_int_equal(cr_cond_pred_stats(p, NULL), -EINVAL);
    cr_cond_pred_params_t bad = {.field_mask = CR_COND_PRED_PARAM_LEARN_RATE, .learn_rate = 0};
    cr_cond_pred_t *q = NULL;
    assert_int_equal(cr_cond_pred_create(&bad, &q), -EINVAL);
    bad.learn_rate = NAN;
    assert_int_equal(cr_cond_pred_create(&bad, &q), -EINVAL);
    assert_null(q);
    cr_cond_pred_destroy(p);
}

/* a wild report (10^4 x the model) counts as 20x at most */
static void test_wild_report_is_bounded(void **st)
{
    (void)st;
    cr_cond_pred_t *p = mk(0.05);
    double base = cr_cond_pred_prefill(p, 10000, 0, 1);
    assert_int_equal(cr_cond_pred_observe_prefill(p, 10000, 0, 1, 1e4 * base), 0);
    double f = cr_cond_pred_prefill(p, 10000, 0, 1) / base;
    if (!(f <= 20.0001 && f > 19.9))
        fail_msg("one 10^4x report moved the estimate by %.1fx, want 20x at most", f);
    cr_cond_pred_destroy(p);
}

/* the error model's draws: standard normal, deterministic per (seed, k) */
static void test_normal_draws(void **st)
{
    (void)st;
    double s = 0, s2 = 0;
    int n = 20000, over = 0;
    for (int k = 0; k < n; k++) {
        double z = cr__cond_normal(3, (uint64_t)k);
        assert_float_equal(z, cr__cond_normal(3, (uint64_t)k), 0);
        s += z;
        s2 += z * z;
        over += z > 1.6449;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    if (fabs(mean) > 0.03 || fabs(var - 1) > 0.05 || fabs(over / (double)n - 0.05) > 0.01)
        fail_msg("mean %.4f var %.4f P(z>1.645) %.4f", mean, var, over / (double)n);
    assert_true(cr__cond_normal(3, 1) != cr__cond_normal(4, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prior_is_the_cost_model),
        cmocka_unit_test(test_learns_bias_and_spread),
        cmocka_unit_test(test_buckets_and_fallback),
        cmocka_unit_test(test_follows_a_change),
        cmocka_unit_test(test_bad_reports),
        cmocka_unit_test(test_normal_draws),
        cmocka_unit_test(test_wild_report_is_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
