/* POST /report bodies: entries applied to the predictor, a wrong entry
 * refused alone, a wrong body refused whole (nothing applied). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "conductor/service/report.h"

static cr_cond_pred_t *mk(void)
{
    cr_cond_pred_t *p;
    assert_int_equal(cr_cond_pred_create(NULL, &p), 0);
    return p;
}

static int apply(cr_cond_pred_t *p, const char *body, size_t *ok, json_t **ref, char *err)
{
    return cr__csvc_report_apply(p, body, strlen(body), ok, ref, err, 256);
}

static void test_reports_correct_the_estimate(void **st)
{
    (void)st;
    cr_cond_pred_t *p = mk();
    cr_cond_model_t m;
    cr_cond_model_default(&m);
    double model = cr_cond_cost_prefill(&m, 8000, 0);
    char body[4096];
    int n = snprintf(body, sizeof body, "{\"instance_id\": \"p0\", \"prefill\": [");
    for (int i = 0; i < 20; i++)
        n += snprintf(body + n, sizeof body - (size_t)n,
                      "%s{\"input_tokens\": 8000, \"reused_tokens\": 0, \"seconds\": %.6f}",
                      i ? "," : "", 2 * model);
    snprintf(body + n, sizeof body - (size_t)n,
             "], \"decode_steps\": [{\"batch\": 4, \"context_tokens\": 40000, \"seconds\": 0.05}]}");
    size_t ok = 0;
    json_t *ref = NULL;
    char err[256];
    assert_int_equal(apply(p, body, &ok, &ref, err), 0);
    assert_int_equal(ok, 21);
    assert_int_equal(json_array_size(ref), 0);
    json_decref(ref);
    assert_float_equal(cr_cond_pred_prefill(p, 8000, 0, 1), 2 * model, 1e-5);
    assert_float_equal(cr_cond_pred_decode_step(p, 4, 40000), 0.05, 1e-9);
    json_t *j = cr__csvc_pred_json(p);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "prefill_samples")), 20);
    assert_float_equal(json_real_value(json_object_get(j, "prefill_factor")), 2.0, 1e-5);
    json_decref(j);
    cr_cond_pred_destroy(p);
}

static void test_bad_entry_refused_alone(void **st)
{
    (void)st;
    cr_cond_pred_t *p = mk();
    size_t ok = 0;
    json_t *ref = NULL;
    char err[256];
    assert_int_equal(apply(p,
                           "{\"instance_id\": \"p0\", \"prefill\": ["
                           "{\"input_tokens\": 1000, \"seconds\": 0.2},"
                           "{\"input_tokens\": 1000, \"seconds\": -1},"
                           "{\"input_tokens\": 1000, \"reused_tokens\": 1000, \"seconds\": 1},"
                           "{\"input_tokens\": 1000, \"seconds\": 0.2, \"color\": 1},"
                           "{\"input_tokens\": 1000, \"stages\": 0, \"seconds\": 0.2},"
                           "7],"
                           "\"decode_steps\": [{\"batch\": 0, \"context_tokens\": 1, "
                           "\"seconds\": 0.02}]}",
                           &ok, &ref, err),
                     0);
    assert_int_equal(ok, 1);
    assert_int_equal(json_array_size(ref), 6);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ref, 0), "field")),
                        "prefill[1]");
    assert_string_equal(json_string_value(json_object_get(json_array_get(ref, 5), "field")),
                        "decode_steps[0]");
    json_decref(ref);
    cr_cond_pred_stats_t s;
    cr_cond_pred_stats(p, &s);
    assert_int_equal(s.prefill_samples, 1);
    assert_int_equal(s.decode_samples, 0);
    cr_cond_pred_destroy(p);
}

static void test_bad_body_applies_nothing(void **st)
{
    (void)st;
    cr_cond_pred_t *p = mk();
    size_t ok = 77;
    json_t *ref = NULL;
    char err[256];
    static const struct {
        const char *body, *msg;
        int rc;
    } bad[] = {
        {"not json", "body", -EINVAL},
        {"[1]", "body: expected a JSON object", -EINVAL},
        {"{\"prefill\": []}", "instance_id", -EINVAL},
        {"{\"instance_id\": \"p\"}", "give prefill", -EINVAL},
        {"{\"instance_id\": \"p\", \"prefill\": 3}", "prefill: expected an array", -EINVAL},
        {"{\"instance_id\": \"p\", \"prefill\": [], \"x\": 1}", "x: unknown field", -EINVAL},
        {"{\"instance_id\": \"p\", \"instance_id\": \"q\", \"prefill\": []}", "body", -EINVAL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        int rc = apply(p, bad[i].body, &ok, &ref, err);
        if (rc != bad[i].rc || !strstr(err, bad[i].msg))
            fail_msg("body %s: rc %d err '%s', want %d and '%s'", bad[i].body, rc, err,
                     bad[i].rc, bad[i].msg);
    }
    /* too many entries: -E2BIG, nothing applied */
    static char big[80000];
    int n = snprintf(big, sizeof big, "{\"instance_id\": \"p\", \"prefill\": [");
    for (int i = 0; i <= CR__CREPORT_MAX_ITEMS; i++)
        n += snprintf(big + n, sizeof big - (size_t)n,
                      "%s{\"input_tokens\": 9, \"seconds\": 1}", i ? "," : "");
    snprintf(big + n, sizeof big - (size_t)n, "]}");
    assert_int_equal(apply(p, big, &ok, &ref, err), -E2BIG);
    assert_int_equal(ok, 77);
    cr_cond_pred_stats_t s;
    cr_cond_pred_stats(p, &s);
    assert_int_equal(s.prefill_samples, 0);
    cr_cond_pred_destroy(p);
}

static void test_reason_names_the_parts(void **st)
{
    (void)st;
    cr_cond_decision_t d;
    memset(&d, 0, sizeof d);
    d.est_ttft_s = 1.234;
    d.est_queue_s = 0.2;
    d.est_transfer_s = 0.004;
    d.est_prefill_s = 1.03;
    d.reused_tokens = 8192;
    d.local_prefix_blocks = 256;
    d.fetch_from = 3;
    d.pipeline_stages = 2;
    char buf[512];
    cr__csvc_decision_reason(&d, "global_cache", 12000, 16, buf, sizeof buf);
    assert_non_null(strstr(buf, "global_cache: lowest expected TTFT 1234 ms"));
    assert_non_null(strstr(buf, "queue 200 ms"));
    assert_non_null(strstr(buf, "8192 of 12000 prompt tokens reused (4096 already"));
    assert_non_null(strstr(buf, "the rest fetched"));
    assert_non_null(strstr(buf, "pipelined over 2 instances"));
    char small[8];
    cr__csvc_decision_reason(&d, "global_cache", 12000, 16, small, sizeof small);
    assert_int_equal(strlen(small), 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reports_correct_the_estimate),
        cmocka_unit_test(test_bad_entry_refused_alone),
        cmocka_unit_test(test_bad_body_applies_nothing),
        cmocka_unit_test(test_reason_names_the_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
