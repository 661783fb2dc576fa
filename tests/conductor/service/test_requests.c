/* Request body parsing: accepted shapes (Mooncake indexer API) and bad input
 * with errors that name the field. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conductor/service/requests.h"

#define B(s) (s), strlen(s)

static void check_err(int rc, int want_rc, const char *err, const char *needle)
{
    if (rc != want_rc || !strstr(err, needle))
        fail_msg("expected rc %d and an error containing '%s'; got rc %d, error '%s'", want_rc,
                 needle, rc, err);
}

static void test_register_ok(void **st)
{
    (void)st;
    cr__creq_register_t r;
    char err[256];
    const char *body = "{\"endpoint\":\"tcp://127.0.0.1:5557\",\"replay_endpoint\":"
                       "\"tcp://127.0.0.1:5558\",\"type\":\"vLLM\",\"modelname\":\"deepseek\","
                       "\"lora_name\":\"sql\",\"tenant_id\":\"t1\",\"instance_id\":\"p1\","
                       "\"block_size\":128,\"dp_rank\":2,\"additionalsalt\":\"w8a8\","
                       "\"role\":\"prefill\"}";
    assert_int_equal(cr__creq_parse_register(B(body), NULL, &r, err, sizeof err), 0);
    assert_string_equal(r.endpoint, "tcp://127.0.0.1:5557");
    assert_string_equal(r.replay_endpoint, "tcp://127.0.0.1:5558");
    assert_string_equal(r.type, "vLLM");
    assert_string_equal(r.id.model, "deepseek");
    assert_string_equal(r.id.lora_name, "sql");
    assert_string_equal(r.id.tenant_id, "t1");
    assert_string_equal(r.id.instance_id, "p1");
    assert_string_equal(r.id.salt, "w8a8");
    assert_int_equal(r.id.block_size, 128);
    assert_int_equal(r.id.dp_rank, 2);
    assert_int_equal(r.role, CR__ROLE_PREFILL);

    const char *minimal = "{\"endpoint\":\"tcp://127.0.0.1:1\",\"modelname\":\"m\","
                          "\"instance_id\":\"i\",\"block_size\":16}";
    assert_int_equal(cr__creq_parse_register(B(minimal), NULL, &r, err, sizeof err), 0);
    assert_string_equal(r.id.tenant_id, "default");
    assert_string_equal(r.type, "vLLM");
    assert_int_equal(r.role, CR__ROLE_BOTH);
    assert_int_equal(r.id.dp_rank, 0);
}

static void test_register_bad(void **st)
{
    (void)st;
    cr__creq_register_t r;
    memset(&r, 0x5a, sizeof r);
    char err[256];
    struct {
        const char *body, *needle;
    } cases[] = {
        {"", "body: empty"},
        {"[1,2]", "body: expected a JSON object, got array"},
        {"{\"endpoint\":", "body: invalid JSON"},
        {"{\"endpoint\":\"tcp://a:1\",\"endpoint\":\"tcp://b:1\"}", "body: invalid JSON"},
        {"{\"modelname\":\"m\",\"instance_id\":\"i\",\"block_size\":16}", "endpoint: required"},
        {"{\"endpoint\":\"http://x:1\",\"modelname\":\"m\",\"instance_id\":\"i\",\"block_size\":16}",
         "endpoint: expected tcp://"},
        {"{\"endpoint\":\"tcp://x:1\",\"instance_id\":\"i\",\"block_size\":16}",
         "modelname: required"},
        {"{\"endpoint\":\"tcp://x:1\",\"modelname\":\"m\",\"instance_id\":\"i\",\"block_size\":0}",
         "block_size: must be at least 1"},
        {"{\"endpoint\":\"tcp://x:1\",\"modelname\":\"m\",\"instance_id\":\"i\",\"block_size\":-4}",
         "block_size: -4 out of range"},
        {"{\"endpoint\":\"tcp://x:1\",\"modelname\":\"m\",\"instance_id\":\"i\",\"block_size\":\"16\"}",
         "block_size: expected an integer, got string"},
        {"{\"endpoint\":\"tcp://x:1\",\"modelname\":\"m\",\"instance_id\":\"i\",\"block_size\":16,"
         "\"dp_rank\":70000}",
         "dp_rank: 70000 out of range"},
        {"{\"endpoint\":\"tcp://x:1\",\"modelname\":\"m\",\"instance_id\":\"i\",\"block_size\":16,"
         "\"colour\":1}",
         "colour: unknown field"},
        {"{\"endpoint\":\"tcp://x:1\",\"modelname\":\"m\",\"instance_id\":\"\",\"block_size\":16}",
         "instance_id: must not be empty"},
        {"{\"endpoint\":\"tcp://x:1\",\"modelname\":\"m\",\"instance_id\":\"a\\u0001\","
         "\"block_size\":16}",
         "instance_id: control character"},
        {"{\"endpoint\":\"tcp://x:1\",\"modelname\":\"m\",\"instance_id\":\"i\",\"block_size\":16,"
         "\"role\":\"boss\"}",
         "role: expected"},
        {"{\"endpoint\":\"tcp://x:1\",\"modelname\":\"m\",\"model\":\"n\",\"instance_id\":\"i\","
         "\"block_size\":16}",
         "model: give either"},
    };
    cr__creq_register_t before = r;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = cr__creq_parse_register(B(cases[i].body), NULL, &r, err, sizeof err);
        check_err(rc, -EINVAL, err, cases[i].needle);
        assert_memory_equal(&r, &before, sizeof r); /* no output on failure */
    }
    /* a name longer than the bound */
    char body[600];
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    snprintf(body, sizeof body,
             "{\"endpoint\":\"tcp://x:1\",\"modelname\":\"%s\",\"instance_id\":\"i\","
             "\"block_size\":16}",
             longname);
    check_err(cr__creq_parse_register(B(body), NULL, &r, err, sizeof err), -EINVAL, err,
              "modelname: longer than 127 bytes");
}

static void test_query_tokens(void **st)
{
    (void)st;
    cr__creq_query_t q;
    char err[256];
    const char *body = "{\"model\":\"deepseek\",\"lora_name\":\"a\",\"token_ids\":[101,15,100,55,"
                       "4294967295],\"tenant_id\":\"default\",\"instance_id\":\"p1\","
                       "\"block_size\":2,\"cache_salt\":\"s\"}";
    assert_int_equal(cr__creq_parse_query(B(body), NULL, 0, &q, err, sizeof err), 0);
    assert_int_equal(q.by_hash, 0);
    assert_int_equal(q.n_tokens, 5);
    assert_int_equal(q.tokens[0], 101);
    assert_int_equal(q.tokens[4], 4294967295u);
    assert_string_equal(q.id.model, "deepseek");
    assert_string_equal(q.id.salt, "s");
    assert_int_equal(q.id.block_size, 2);
    cr__creq_query_free(&q);

    /* lora_id (deprecated) maps to a name; -1 = base model */
    const char *lid = "{\"model\":\"m\",\"lora_id\":12,\"token_ids\":[]}";
    assert_int_equal(cr__creq_parse_query(B(lid), NULL, 0, &q, err, sizeof err), 0);
    assert_string_equal(q.id.lora_name, "lora_id:12");
    assert_int_equal(q.n_tokens, 0);
    cr__creq_query_free(&q);
}

static void test_query_bad(void **st)
{
    (void)st;
    cr__creq_query_t q;
    char err[256];
    struct {
        const char *body, *needle;
        int rc;
    } cases[] = {
        {"{\"token_ids\":[1]}", "model: required", -EINVAL},
        {"{\"model\":\"m\"}", "token_ids: required", -EINVAL},
        {"{\"model\":\"m\",\"token_ids\":[1,2,-3]}", "token_ids[2]: expected an integer in 0..4294967295",
         -EINVAL},
        {"{\"model\":\"m\",\"token_ids\":[1,4294967296]}", "token_ids[1]", -EINVAL},
        {"{\"model\":\"m\",\"token_ids\":[1,\"2\"]}", "token_ids[1]: expected an integer in 0..4294967295, got string", -EINVAL},
        {"{\"model\":\"m\",\"token_ids\":{}}", "token_ids: expected an array", -EINVAL},
        {"{\"model\":\"m\",\"token_ids\":[1],\"seq_hashes\":[1]}", "seq_hashes: unknown field", -EINVAL},
        {"{\"model\":\"m\",\"token_ids\":[1,2,3,4,5]}", "token_ids: 5 tokens > limit 4", -E2BIG},
        {"{\"model\":\"m\",\"lora_name\":\"a\",\"lora_id\":3,\"token_ids\":[]}",
         "lora_id: cannot be used together with lora_name", -EINVAL},
        {"{\"model\":\"m\",\"token_ids\":[],\"block_size\":1e3}", "block_size: expected an integer, got number", -EINVAL},
    };
    cr__creq_limits_t lim = {.max_tokens = 4};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_err(cr__creq_parse_query(B(cases[i].body), &lim, 0, &q, err, sizeof err),
                  cases[i].rc, err, cases[i].needle);
}

static void test_query_by_hash(void **st)
{
    (void)st;
    cr__creq_query_t q;
    char err[256];
    const char *body = "{\"model\":\"m\",\"seq_hashes\":[1234567890,-1,\"18446744073709551615\","
                       "\"0xff\"]}";
    assert_int_equal(cr__creq_parse_query(B(body), NULL, 1, &q, err, sizeof err), 0);
    assert_int_equal(q.by_hash, 1);
    assert_int_equal(q.n_hashes, 4);
    assert_true(q.hashes[0] == 1234567890ull);
    assert_true(q.hashes[1] == UINT64_MAX);
    assert_true(q.hashes[2] == UINT64_MAX);
    assert_true(q.hashes[3] == 255);
    cr__creq_query_free(&q);
    /* earlier drafts: block_hash */
    const char *old = "{\"model\":\"m\",\"block_hash\":[7]}";
    assert_int_equal(cr__creq_parse_query(B(old), NULL, 1, &q, err, sizeof err), 0);
    assert_int_equal(q.n_hashes, 1);
    cr__creq_query_free(&q);

    const char *big = "{\"model\":\"m\",\"seq_hashes\":[18446744073709551615]}";
    check_err(cr__creq_parse_query(B(big), NULL, 1, &q, err, sizeof err), -EINVAL, err,
              "send hashes above 2^63-1 as strings");
    const char *badstr = "{\"model\":\"m\",\"seq_hashes\":[\"12x\"]}";
    check_err(cr__creq_parse_query(B(badstr), NULL, 1, &q, err, sizeof err), -EINVAL, err,
              "seq_hashes[0]: expected an integer or a decimal/0x-hex string");
    const char *both = "{\"model\":\"m\",\"seq_hashes\":[1],\"block_hash\":[1]}";
    check_err(cr__creq_parse_query(B(both), NULL, 1, &q, err, sizeof err), -EINVAL, err,
              "give only one of");
    const char *tok = "{\"model\":\"m\",\"token_ids\":[1]}";
    check_err(cr__creq_parse_query(B(tok), NULL, 1, &q, err, sizeof err), -EINVAL, err,
              "token_ids: unknown field");
    cr__creq_limits_t lim = {.max_hashes = 2};
    const char *many = "{\"model\":\"m\",\"seq_hashes\":[1,2,3]}";
    check_err(cr__creq_parse_query(B(many), &lim, 1, &q, err, sizeof err), -E2BIG, err,
              "seq_hashes: 3 hashes > limit 2");

    uint64_t h;
    assert_int_equal(cr__creq_parse_hash_text("0x", &h), -EINVAL);
    assert_int_equal(cr__creq_parse_hash_text("", &h), -EINVAL);
    assert_int_equal(cr__creq_parse_hash_text(" 1", &h), -EINVAL);
    assert_int_equal(cr__creq_parse_hash_text("18446744073709551616", &h), -EINVAL);
}

static void test_schedule_and_load(void **st)
{
    (void)st;
    cr__creq_schedule_t s;
    char err[256];
    const char *body = "{\"model\":\"m\",\"token_ids\":[1,2,3],\"output_len\":10,"
                       "\"ttft_slo_ms\":2.5,\"dry_run\":true}";
    assert_int_equal(cr__creq_parse_schedule(B(body), NULL, &s, err, sizeof err), 0);
    assert_int_equal(s.input_len, 3);
    assert_int_equal(s.output_len, 10);
    assert_true(s.ttft_slo_ms == 2.5);
    assert_int_equal(s.dry_run, 1);
    assert_int_equal(s.q.n_tokens, 3);
    cr__creq_query_free(&s.q);
    check_err(cr__creq_parse_schedule(B("{\"token_ids\":[1,2],\"input_len\":1}"), NULL, &s, err,
                                      sizeof err),
              -EINVAL, err, "input_len: 1 is less than the 2 token_ids");
    check_err(cr__creq_parse_schedule(B("{\"token_ids\":[1],\"ttft_slo_ms\":-1}"), NULL, &s, err,
                                      sizeof err),
              -EINVAL, err, "ttft_slo_ms: -1 out of range");
    check_err(cr__creq_parse_schedule(B("{\"token_ids\":[1],\"dry_run\":1}"), NULL, &s, err,
                                      sizeof err),
              -EINVAL, err, "dry_run: expected true or false");
    check_err(cr__creq_parse_schedule(B("{\"model\":\"m\"}"), NULL, &s, err, sizeof err), -EINVAL,
              err, "token_ids or seq_hashes: required");
    check_err(cr__creq_parse_schedule(B("{\"token_ids\":[1]}"), NULL, &s, err, sizeof err),
              -EINVAL, err, "model: required");

    cr__creq_load_t l;
    assert_int_equal(cr__creq_parse_load(B("{\"instance_id\":\"p\",\"prefill_queue_ms\":12,"
                                           "\"decode_batch\":3}"),
                                         NULL, &l, err, sizeof err),
                     0);
    assert_int_equal(l.has_prefill, 1);
    assert_int_equal(l.has_decode, 1);
    assert_int_equal(l.decode_batch, 3);
    check_err(cr__creq_parse_load(B("{\"instance_id\":\"p\"}"), NULL, &l, err, sizeof err),
              -EINVAL, err, "prefill_queue_ms: give it or");
    check_err(cr__creq_parse_load(B("{\"prefill_queue_ms\":1}"), NULL, &l, err, sizeof err),
              -EINVAL, err, "instance_id: required");

    cr__creq_ident_t id;
    assert_int_equal(cr__creq_parse_unregister(B("{\"instance_id\":\"p\",\"type\":\"vLLM\","
                                                 "\"modelname\":\"m\",\"block_size\":16}"),
                                               NULL, &id, err, sizeof err),
                     0);
    assert_int_equal(id.has_dp_rank, 0);
    check_err(cr__creq_parse_unregister(B("{\"model\":\"m\"}"), NULL, &id, err, sizeof err),
              -EINVAL, err, "instance_id: required");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_ok),   cmocka_unit_test(test_register_bad),
        cmocka_unit_test(test_query_tokens),  cmocka_unit_test(test_query_bad),
        cmocka_unit_test(test_query_by_hash), cmocka_unit_test(test_schedule_and_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
