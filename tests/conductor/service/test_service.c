/* Service core through its HTTP handler (no sockets): events feed the index,
 * /query and /query_by_hash answer per instance / tier / DP rank, /schedule
 * picks the longest prefix or answers 429, bad bodies get 400 naming the
 * field, /metrics counts bad batches. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conductor/service/service.h"
#include "evpack.h"

typedef struct fx {
    cr__csvc_t *s;
    int p1, p2;
} fx_t;

static json_t *call(cr__csvc_t *s, const char *method, const char *path, const char *body,
                    int want_status)
{
    cr__http_req_t req = {.method = method, .path = path, .body = body ? body : "",
                          .body_len = body ? strlen(body) : 0};
    cr__http_resp_t resp = {.status = 200, .content_type = "text/plain"};
    cr__csvc_handle(s, &req, &resp);
    if (resp.status != want_status)
        fail_msg("%s %s %s: expected HTTP %d, got %d: %.*s", method, path, body ? body : "",
                 want_status, resp.status, (int)resp.body_len, resp.body ? resp.body : "");
    json_t *j = NULL;
    if (resp.content_type && !strcmp(resp.content_type, "application/json")) {
        json_error_t je;
        j = json_loadb(resp.body, resp.body_len, 0, &je);
        if (!j)
            fail_msg("response is not JSON: %.*s", (int)resp.body_len, resp.body);
    } else {
        j = json_stringn(resp.body, resp.body_len);
    }
    free(resp.body);
    return j;
}

static long long jint(json_t *root, const char *path)
{
    /* path "a/b/c" through objects */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = root;
    for (char *save = NULL, *tok = strtok_r(buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save))
        cur = json_object_get(cur, tok);
    if (!json_is_integer(cur)) {
        char *d = json_dumps(root, 0);
        fail_msg("no integer at %s in %s", path, d);
    }
    return json_integer_value(cur);
}

static void reg(fx_t *f, int *slot, const char *inst, uint32_t dp, int role)
{
    cr__creq_register_t r;
    memset(&r, 0, sizeof r);
    strcpy(r.id.model, "m");
    strcpy(r.id.tenant_id, "default");
    strcpy(r.id.instance_id, inst);
    r.id.block_size = 4;
    r.id.dp_rank = dp;
    strcpy(r.endpoint, "inproc://none");
    r.role = role;
    *slot = cr__csvc_register_local(f->s, &r);
    assert_true(*slot >= 0);
}

static int setup(void **st)
{
    fx_t *f = calloc(1, sizeof *f);
    cr__csvc_config_t cfg;
    char err[256];
    char *argv[] = {"t", "--block_size=4", "--port=0"};
    assert_int_equal(cr__cfg_parse(cr__csvc_cfg_table, cr__csvc_cfg_table_len, &cfg, 3, argv, 1,
                                   NULL, NULL, 0, NULL, err, sizeof err),
                     0);
    assert_int_equal(cr__csvc_create(&cfg, &f->s, err, sizeof err), 0);
    reg(f, &f->p1, "p1", 0, CR__ROLE_BOTH);
    reg(f, &f->p2, "p2", 0, CR__ROLE_BOTH);
    *st = f;
    return 0;
}

static int teardown(void **st)
{
    fx_t *f = *st;
    cr__csvc_destroy(f->s);
    free(f);
    return 0;
}

static const uint32_t T[16] = {11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34, 41, 42, 43, 44};
#define TOKENS "[11,12,13,14,21,22,23,24,31,32,33,34,41,42,43,44]"

/* p1: engine blocks 100..103 (GPU). p2: 200,201 (GPU) then 202 (CPU, parent 201). */
static void feed(fx_t *f)
{
    evpack_t e;
    ep_init(&e);
    uint64_t h1[4] = {100, 101, 102, 103};
    ep_batch(&e, 1, 1, 1);
    ep_stored(&e, h1, 4, NULL, T, 16, 4, "GPU");
    ep_dp(&e, 0);
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p1, e.sb.data, e.sb.size), 0);
    ep_free(&e);

    ep_init(&e);
    uint64_t h2[2] = {200, 201}, h3[1] = {202}, parent = 201;
    ep_batch(&e, 2, 2, 0);
    ep_stored(&e, h2, 2, NULL, T, 8, 4, NULL); /* nil medium = GPU */
    ep_stored(&e, h3, 1, &parent, T + 8, 4, 4, "cpu");
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p2, e.sb.data, e.sb.size), 0);
    ep_free(&e);
}

static void test_query_tiers_and_dp(void **st)
{
    fx_t *f = *st;
    feed(f);
    json_t *j = call(f->s, "POST", "/query",
                     "{\"model\":\"m\",\"token_ids\":" TOKENS ",\"block_size\":4}", 200);
    assert_int_equal(jint(j, "default/p1/longest_matched"), 16);
    assert_int_equal(jint(j, "default/p1/GPU"), 16);
    assert_int_equal(jint(j, "default/p1/CPU"), 0);
    assert_int_equal(jint(j, "default/p1/DP/0"), 16);
    assert_int_equal(jint(j, "default/p2/longest_matched"), 12);
    assert_int_equal(jint(j, "default/p2/GPU"), 8);
    assert_int_equal(jint(j, "default/p2/CPU"), 4);
    assert_int_equal(jint(j, "default/p2/DISK"), 0);
    json_decref(j);

    /* a prompt sharing two blocks, then diverging */
    j = call(f->s, "POST", "/query",
             "{\"model\":\"m\",\"token_ids\":[11,12,13,14,21,22,23,24,9,9,9,9]}", 200);
    assert_int_equal(jint(j, "default/p1/longest_matched"), 8);
    assert_int_equal(jint(j, "default/p2/longest_matched"), 8);
    json_decref(j);

    /* same answer by rolling hash (computed with the conductor's hashing) */
    uint64_t seq[4];
    size_t n = 0;
    assert_int_equal(cr_cond_hash_tokens(T, 16, 4, seq, 4, &n), 0);
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"instance_id\":\"p2\",\"seq_hashes\":[\"%llu\",\"%llu\",\"%llu\","
             "\"%llu\"]}",
             (unsigned long long)seq[0], (unsigned long long)seq[1], (unsigned long long)seq[2],
             (unsigned long long)seq[3]);
    j = call(f->s, "POST", "/query_by_hash", body, 200);
    assert_int_equal(jint(j, "default/p2/longest_matched"), 12);
    assert_int_equal(jint(j, "default/p2/CPU"), 4);
    assert_null(json_object_get(json_object_get(j, "default"), "p1")); /* instance filter */
    json_decref(j);

    /* other model / tenant: nothing */
    j = call(f->s, "POST", "/query", "{\"model\":\"other\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(json_object_size(j), 0);
    json_decref(j);
}

static void test_removed_cleared_orphan(void **st)
{
    fx_t *f = *st;
    feed(f);
    evpack_t e;
    ep_init(&e);
    uint64_t rm[2] = {102, 999}; /* 999 was never stored: ignored */
    ep_batch(&e, 3, 1, 0);
    ep_removed(&e, rm, 2, "GPU");
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p1, e.sb.data, e.sb.size), 0);
    ep_free(&e);
    json_t *j = call(f->s, "POST", "/query", "{\"model\":\"m\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(jint(j, "default/p1/longest_matched"), 8);
    json_decref(j);

    /* removing from CPU a block that p2 holds on CPU; then on GPU is a no-op */
    ep_init(&e);
    uint64_t rm2[1] = {202};
    ep_batch(&e, 4, 2, 0);
    ep_removed(&e, rm2, 1, "GPU");
    ep_removed(&e, rm2, 1, "CPU");
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p2, e.sb.data, e.sb.size), 0);
    ep_free(&e);
    j = call(f->s, "POST", "/query", "{\"model\":\"m\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(jint(j, "default/p2/longest_matched"), 8);
    assert_int_equal(jint(j, "default/p2/CPU"), 0);
    json_decref(j);

    /* a block whose parent was never seen is not indexed */
    ep_init(&e);
    uint64_t orphan[1] = {300}, parent = 12345;
    ep_batch(&e, 5, 1, 0);
    ep_stored(&e, orphan, 1, &parent, T + 8, 4, 4, "GPU");
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p2, e.sb.data, e.sb.size), 0);
    ep_free(&e);

    ep_init(&e);
    ep_batch(&e, 6, 1, 0);
    ep_cleared(&e);
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p1, e.sb.data, e.sb.size), 0);
    ep_free(&e);
    j = call(f->s, "POST", "/query", "{\"model\":\"m\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(jint(j, "default/p1/longest_matched"), 0);
    assert_int_equal(jint(j, "default/p2/longest_matched"), 8);
    json_decref(j);

    /* bad batches are refused whole and counted */
    const unsigned char junk[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p1, junk, sizeof junk), -EINVAL);
    ep_init(&e);
    uint64_t h[1] = {1};
    uint32_t tok[4] = {1, 2, 3, 4};
    ep_batch(&e, 7, 1, 0);
    ep_stored(&e, h, 1, NULL, tok, 4, 8, "GPU"); /* 4 tokens for one block of 8 */
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p1, e.sb.data, e.sb.size), -EINVAL);
    ep_free(&e);
    /* block size other than registered: event skipped */
    ep_init(&e);
    uint32_t tok8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ep_batch(&e, 8, 1, 0);
    ep_stored(&e, h, 1, NULL, tok8, 8, 8, "GPU");
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p1, e.sb.data, e.sb.size), 0);
    ep_free(&e);

    /* an event for LoRA adapter id 3 (deprecated lora_id, no lora_name) on a
     * base-model registration: skipped */
    ep_init(&e);
    ep_batch(&e, 9, 1, 0);
    msgpack_pack_array(&e.pk, 7);
    ep_str(&e, "BlockStored");
    msgpack_pack_array(&e.pk, 1);
    msgpack_pack_uint64(&e.pk, 77);
    msgpack_pack_nil(&e.pk);
    msgpack_pack_array(&e.pk, 4);
    for (int i = 0; i < 4; i++)
        msgpack_pack_uint32(&e.pk, T[i]);
    msgpack_pack_uint32(&e.pk, 4);
    msgpack_pack_int(&e.pk, 3);
    ep_str(&e, "GPU");
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p1, e.sb.data, e.sb.size), 0);
    ep_free(&e);
    j = call(f->s, "POST", "/query", "{\"model\":\"m\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(jint(j, "default/p1/longest_matched"), 0);
    json_decref(j);

    json_t *m = call(f->s, "GET", "/metrics", NULL, 200);
    const char *txt = json_string_value(m);
    assert_non_null(strstr(txt, "crescent_conductor_bad_batches_msgpack_total 1\n"));
    assert_non_null(strstr(txt, "crescent_conductor_bad_batches_field_total 1\n"));
    assert_non_null(strstr(txt, "crescent_conductor_orphan_blocks_total 1\n"));
    assert_non_null(strstr(txt, "crescent_conductor_skipped_events_total 2\n"));
    assert_non_null(strstr(txt, "crescent_conductor_all_blocks_cleared_total 1\n"));
    assert_non_null(strstr(txt, "crescent_conductor_instances 2\n"));
    json_decref(m);
}

static void test_schedule(void **st)
{
    fx_t *f = *st;
    feed(f);
    /* p1 holds 4 blocks, p2 3: both idle, p1 wins */
    json_t *j = call(f->s, "POST", "/schedule",
                     "{\"model\":\"m\",\"token_ids\":" TOKENS ",\"dry_run\":true}", 200);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "prefill"),
                                                          "instance_id")),
                        "p1");
    assert_int_equal(jint(j, "local_prefix_tokens"), 16);
    assert_int_equal(jint(j, "reused_tokens"), 15); /* the last token is always computed */
    json_decref(j);

    /* p1 loses two blocks: p2 (3 blocks) wins now */
    evpack_t e;
    ep_init(&e);
    uint64_t rm[2] = {102, 103};
    ep_batch(&e, 3, 1, 0);
    ep_removed(&e, rm, 2, "GPU");
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p1, e.sb.data, e.sb.size), 0);
    ep_free(&e);
    j = call(f->s, "POST", "/schedule", "{\"model\":\"m\",\"token_ids\":" TOKENS "}", 200);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "prefill"),
                                                          "instance_id")),
                        "p2");
    assert_int_equal(jint(j, "local_prefix_tokens"), 12);
    json_decref(j);

    /* an impossible SLO: 429 with the estimate */
    j = call(f->s, "POST", "/schedule",
             "{\"model\":\"m\",\"token_ids\":" TOKENS ",\"ttft_slo_ms\":0.000001}", 429);
    assert_string_equal(json_string_value(json_object_get(j, "field")), "ttft_slo_ms");
    assert_true(json_is_true(json_object_get(j, "rejected")));
    json_decref(j);

    /* a heavily loaded p2 (reported by /load) pushes the choice to p1 */
    json_decref(call(f->s, "POST", "/load",
                     "{\"instance_id\":\"p2\",\"prefill_queue_ms\":60000}", 200));
    j = call(f->s, "POST", "/schedule",
             "{\"model\":\"m\",\"token_ids\":" TOKENS ",\"dry_run\":true}", 200);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "prefill"),
                                                          "instance_id")),
                        "p1");
    json_decref(j);

    j = call(f->s, "POST", "/schedule", "{\"model\":\"nope\",\"token_ids\":[1]}", 503);
    json_decref(j);
    json_decref(call(f->s, "POST", "/load", "{\"instance_id\":\"zz\",\"prefill_queue_ms\":1}",
                     404));
}

/* Regression for cross-model fetches: an instance of another model (same
 * tokenizer, same prompt) holding the whole prefix is neither a candidate
 * nor a fetch source for this model's /schedule, and /query_by_hash with
 * the standard hashes only sees the asked model. */
static void test_schedule_other_model_not_a_source(void **st)
{
    fx_t *f = *st;
    feed(f); /* model m: p1 holds 4 blocks, p2 3 */
    evpack_t e;
    ep_init(&e);
    uint64_t rm[3] = {101, 102, 103};
    ep_batch(&e, 3, 1, 0);
    ep_removed(&e, rm, 3, "GPU"); /* p1 keeps 1 block, p2 3 */
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p1, e.sb.data, e.sb.size), 0);
    ep_free(&e);

    cr__creq_register_t r;
    memset(&r, 0, sizeof r);
    strcpy(r.id.model, "other");
    strcpy(r.id.tenant_id, "default");
    strcpy(r.id.instance_id, "o1");
    r.id.block_size = 4;
    strcpy(r.endpoint, "inproc://none");
    r.role = CR__ROLE_BOTH;
    int o1 = cr__csvc_register_local(f->s, &r);
    assert_true(o1 >= 0);
    ep_init(&e);
    uint64_t h[4] = {900, 901, 902, 903};
    ep_batch(&e, 1, 1, 0);
    ep_stored(&e, h, 4, NULL, T, 16, 4, "GPU");
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)o1, e.sb.data, e.sb.size), 0);
    ep_free(&e);

    /* p2 (3 blocks) must win with no fetch: o1's 4 blocks are another model's */
    json_t *j = call(f->s, "POST", "/schedule",
                     "{\"model\":\"m\",\"token_ids\":" TOKENS ",\"dry_run\":true}", 200);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "prefill"),
                                                          "instance_id")),
                        "p2");
    if (!json_is_null(json_object_get(j, "fetch_from")))
        fail_msg("fetch_from should be null, got %s",
                 json_string_value(json_object_get(json_object_get(j, "fetch_from"),
                                                   "instance_id")));
    assert_int_equal(jint(j, "reused_tokens"), 12);
    json_decref(j);
    j = call(f->s, "POST", "/schedule",
             "{\"model\":\"other\",\"token_ids\":" TOKENS ",\"dry_run\":true}", 200);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "prefill"),
                                                          "instance_id")),
                        "o1");
    json_decref(j);

    uint64_t seq[4];
    size_t n = 0;
    assert_int_equal(cr_cond_hash_tokens(T, 16, 4, seq, 4, &n), 0);
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"other\",\"seq_hashes\":[\"%llu\",\"%llu\",\"%llu\",\"%llu\"]}",
             (unsigned long long)seq[0], (unsigned long long)seq[1], (unsigned long long)seq[2],
             (unsigned long long)seq[3]);
    j = call(f->s, "POST", "/query_by_hash", body, 200);
    assert_int_equal(jint(j, "default/o1/longest_matched"), 16);
    assert_null(json_object_get(json_object_get(j, "default"), "p1"));
    json_decref(j);
}

/* cost_fetch with pipelining on: a long prompt on an idle cluster is split
 * over several instances of its own model (never the idle other-model one). */
static void test_schedule_pipeline(void **st)
{
    (void)st;
    cr__csvc_config_t cfg;
    char err[256];
    /* pipelining pays off only across chunks (chunked pipeline parallelism) */
    char *argv[] = {"t", "--block_size=4", "--policy=cost_fetch", "--pipeline_min_prefill_ms=1",
                    "--pipeline_idle_ms=1000", "--pipeline_max_stages=4", "--chunk_tokens=2048"};
    assert_int_equal(cr__cfg_parse(cr__csvc_cfg_table, cr__csvc_cfg_table_len, &cfg, 7, argv, 1,
                                   NULL, NULL, 0, NULL, err, sizeof err),
                     0);
    cr__csvc_t *s;
    assert_int_equal(cr__csvc_create(&cfg, &s, err, sizeof err), 0);
    const char *names[] = {"a", "b", "c", "x"};
    for (int i = 0; i < 4; i++) {
        cr__creq_register_t r;
        memset(&r, 0, sizeof r);
        strcpy(r.id.model, i < 3 ? "m" : "other");
        strcpy(r.id.tenant_id, "default");
        strcpy(r.id.instance_id, names[i]);
        r.id.block_size = 4;
        strcpy(r.endpoint, "inproc://none");
        r.role = CR__ROLE_BOTH;
        assert_true(cr__csvc_register_local(s, &r) >= 0);
    }
    size_t n = 32768, cap = n * 7 + 64;
    char *body = malloc(cap);
    size_t l = (size_t)snprintf(body, cap, "{\"model\":\"m\",\"dry_run\":true,\"token_ids\":[");
    for (size_t i = 0; i < n; i++)
        l += (size_t)snprintf(body + l, cap - l, "%zu%s", i + 1, i + 1 < n ? "," : "]}");
    json_t *j = call(s, "POST", "/schedule", body, 200);
    free(body);
    json_t *pl = json_object_get(j, "pipeline");
    if (!json_is_array(pl) || json_array_size(pl) < 2)
        fail_msg("expected a pipelined prefill, got %s", json_dumps(j, JSON_COMPACT));
    for (size_t i = 0; i < json_array_size(pl); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(pl, i), "instance_id"));
        if (!id || strcmp(id, "x") == 0 || strlen(id) != 1)
            fail_msg("pipeline stage %zu is '%s' (another model's instance?)", i, id);
    }
    json_decref(j);
    cr__csvc_destroy(s);
}

/* Endpoints outside --endpoint_prefixes are refused before any connect (the
 * refused ones are ipc paths, so even a broken check sends no traffic). */
static void test_endpoint_prefixes(void **st)
{
    (void)st;
    cr__csvc_config_t cfg;
    char err[256];
    char *argv[] = {"t", "--endpoint_prefixes=tcp://127.0.0.1:,ipc:///tmp/"};
    assert_int_equal(cr__cfg_parse(cr__csvc_cfg_table, cr__csvc_cfg_table_len, &cfg, 2, argv, 1,
                                   NULL, NULL, 0, NULL, err, sizeof err),
                     0);
    cr__csvc_t *s;
    assert_int_equal(cr__csvc_create(&cfg, &s, err, sizeof err), 0);
    json_t *j = call(s, "POST", "/register",
                     "{\"endpoint\":\"ipc:///nonexistent/cr-a\",\"modelname\":\"m\","
                     "\"instance_id\":\"i\",\"block_size\":4}",
                     403);
    assert_string_equal(json_string_value(json_object_get(j, "field")), "endpoint");
    json_decref(j);
    j = call(s, "POST", "/register",
             "{\"endpoint\":\"tcp://127.0.0.1:1\",\"replay_endpoint\":\"ipc:///nonexistent/cr-b\","
             "\"modelname\":\"m\",\"instance_id\":\"i\",\"block_size\":4}",
             403);
    assert_string_equal(json_string_value(json_object_get(j, "field")), "replay_endpoint");
    json_decref(j);
    json_decref(call(s, "POST", "/register",
                     "{\"endpoint\":\"tcp://127.0.0.1:1\",\"modelname\":\"m\","
                     "\"instance_id\":\"i\",\"block_size\":4}",
                     200));
    json_decref(call(s, "POST", "/register",
                     "{\"endpoint\":\"ipc:///tmp/cr-none\",\"modelname\":\"m\","
                     "\"instance_id\":\"k\",\"block_size\":4}",
                     200));
    /* a publisher whose events carry no medium, registered as a CPU tier */
    j = call(s, "POST", "/register",
             "{\"endpoint\":\"tcp://127.0.0.1:1\",\"modelname\":\"m\",\"instance_id\":\"h\","
             "\"block_size\":4,\"medium\":\"tape\"}",
             400);
    assert_string_equal(json_string_value(json_object_get(j, "field")), "medium");
    json_decref(j);
    json_decref(call(s, "POST", "/register",
                     "{\"endpoint\":\"tcp://127.0.0.1:1\",\"modelname\":\"m\","
                     "\"instance_id\":\"h\",\"block_size\":4,\"medium\":\"cpu\"}",
                     200));
    /* "h" got the third slot: "i" and "k" hold the first two (refused
     * registrations take none) */
    int slot = 2;
    evpack_t e;
    ep_init(&e);
    uint64_t h[1] = {5};
    ep_batch(&e, 1, 1, 0);
    ep_stored(&e, h, 1, NULL, T, 4, 4, NULL);
    assert_int_equal(cr__csvc_ingest(s, (uint32_t)slot, e.sb.data, e.sb.size), 0);
    ep_free(&e);
    j = call(s, "POST", "/query",
             "{\"model\":\"m\",\"instance_id\":\"h\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(jint(j, "default/h/CPU"), 4);
    assert_int_equal(jint(j, "default/h/GPU"), 0);
    json_decref(j);
    cr__csvc_destroy(s);
}

static void test_http_errors(void **st)
{
    fx_t *f = *st;
    struct {
        const char *method, *path, *body;
        int status;
        const char *field;
    } cases[] = {
        {"POST", "/query", "{\"model\":\"m\",\"token_ids\":[1,-2]}", 400, "token_ids[1]"},
        {"POST", "/query", "{\"model\":\"m\",\"token_ids\":[1],\"x\":1}", 400, "x"},
        {"POST", "/query", "not json", 400, "body"},
        {"POST", "/query_by_hash", "{\"model\":\"m\",\"seq_hashes\":[[1]]}", 400, "seq_hashes[0]"},
        {"POST", "/register", "{\"modelname\":\"m\"}", 400, "endpoint"},
        {"POST", "/register",
         "{\"endpoint\":\"tcp://127.0.0.1:1\",\"modelname\":\"m\",\"instance_id\":\"p1\","
         "\"block_size\":8}",
         409, "instance_id"},
        {"POST", "/unregister", "{\"instance_id\":\"nobody\"}", 404, "instance_id"},
        {"GET", "/query", NULL, 405, "method"},
        {"POST", "/health", "{}", 405, "method"},
        {"GET", "/nope", NULL, 404, "path"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = call(f->s, cases[i].method, cases[i].path, cases[i].body, cases[i].status);
        const char *fld = json_string_value(json_object_get(j, "field"));
        if (!fld || strcmp(fld, cases[i].field))
            fail_msg("%s %s: expected field '%s', got '%s' (%s)", cases[i].method, cases[i].path,
                     cases[i].field, fld ? fld : "(none)",
                     json_string_value(json_object_get(j, "error")));
        json_decref(j);
    }
    /* huge token list: 413, bounded by max_tokens (1 << 20 by default) */
    size_t n = (1u << 20) + 1, cap = n * 2 + 64;
    char *body = malloc(cap);
    size_t l = (size_t)snprintf(body, cap, "{\"model\":\"m\",\"token_ids\":[");
    for (size_t i = 0; i < n; i++) {
        body[l++] = '1';
        body[l++] = i + 1 < n ? ',' : ']';
    }
    body[l++] = '}';
    body[l] = 0;
    json_t *j = call(f->s, "POST", "/query", body, 413);
    assert_string_equal(json_string_value(json_object_get(j, "field")), "token_ids");
    json_decref(j);
    free(body);

    j = call(f->s, "GET", "/health", NULL, 200);
    assert_int_equal(jint(j, "instances"), 2);
    json_decref(j);
    j = call(f->s, "POST", "/unregister", "{\"instance_id\":\"p2\"}", 200);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "removed_instances"), 0)),
                        "p2|default|0");
    json_decref(j);
    j = call(f->s, "GET", "/instances", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(j, "instances")), 1);
    json_decref(j);

    /* regression: a slot freed by /unregister and registered again indexes
     * events (its hash map bound was lost on reset) */
    int again;
    reg(f, &again, "p2", 0, CR__ROLE_BOTH);
    assert_int_equal(again, f->p2);
    evpack_t e;
    ep_init(&e);
    uint64_t h[2] = {7, 8};
    ep_batch(&e, 1, 1, 0);
    ep_stored(&e, h, 2, NULL, T, 8, 4, "GPU");
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)again, e.sb.data, e.sb.size), 0);
    ep_free(&e);
    j = call(f->s, "POST", "/query", "{\"model\":\"m\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(jint(j, "default/p2/longest_matched"), 8);
    json_decref(j);
}

/* Instances with different block sizes: each hashes the prompt with its own
 * block size unless the query names one. */
static void test_mixed_block_sizes(void **st)
{
    fx_t *f = *st;
    feed(f);
    cr__creq_register_t r;
    memset(&r, 0, sizeof r);
    strcpy(r.id.model, "m");
    strcpy(r.id.tenant_id, "default");
    strcpy(r.id.instance_id, "p3");
    r.id.block_size = 2;
    strcpy(r.endpoint, "inproc://none");
    r.role = CR__ROLE_BOTH;
    int p3 = cr__csvc_register_local(f->s, &r);
    assert_true(p3 >= 0);
    evpack_t e;
    ep_init(&e);
    uint64_t h[3] = {1, 2, 3};
    ep_batch(&e, 1, 1, 0);
    ep_stored(&e, h, 3, NULL, T, 6, 2, "DISK");
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)p3, e.sb.data, e.sb.size), 0);
    ep_free(&e);
    json_t *j = call(f->s, "POST", "/query", "{\"model\":\"m\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(jint(j, "default/p1/longest_matched"), 16);
    assert_int_equal(jint(j, "default/p3/longest_matched"), 6);
    assert_int_equal(jint(j, "default/p3/DISK"), 6);
    assert_int_equal(jint(j, "default/p2/longest_matched"), 12);
    json_decref(j);
    j = call(f->s, "POST", "/query",
             "{\"model\":\"m\",\"block_size\":2,\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(json_object_size(json_object_get(j, "default")), 1);
    assert_int_equal(jint(j, "default/p3/longest_matched"), 6);
    json_decref(j);
}

static void mc_store(evpack_t *e, const char *key, const char *const *types, int nt,
                     const char *hash, const char *parent, const uint32_t *tok, int ntok)
{
    msgpack_pack_array(&e->pk, 8);
    ep_str(e, "BlockStoreEvent");
    ep_str(e, key);
    msgpack_pack_array(&e->pk, (size_t)nt);
    for (int i = 0; i < nt; i++) {
        msgpack_pack_array(&e->pk, 2);
        ep_str(e, types[i]);
        ep_str(e, "tcp://127.0.0.1:1");
    }
    ep_str(e, "m");
    msgpack_pack_uint32(&e->pk, 4);
    ep_str(e, hash);
    ep_str(e, parent);
    msgpack_pack_array(&e->pk, (size_t)ntok);
    for (int i = 0; i < ntok; i++)
        msgpack_pack_uint32(&e->pk, tok[i]);
}

static void mc_update(evpack_t *e, const char *key, const char *const *types, int nt)
{
    msgpack_pack_array(&e->pk, 3);
    ep_str(e, "BlockUpdateEvent");
    ep_str(e, key);
    msgpack_pack_array(&e->pk, (size_t)nt);
    for (int i = 0; i < nt; i++) {
        msgpack_pack_array(&e->pk, 2);
        ep_str(e, types[i]);
        ep_str(e, "/data/x");
    }
}

/* A Mooncake Store publisher: blocks on the host (memory) and disk tiers,
 * moved by BlockUpdateEvent, dropped by RemoveAllEvent. */
static void test_mooncake_store_events(void **st)
{
    fx_t *f = *st;
    static const char *const mem_disk[] = {"memory", "disk"}, *const disk[] = {"local_disk"};
    evpack_t e;
    ep_init(&e);
    ep_batch(&e, 1, 2, 0);
    mc_store(&e, "k0", mem_disk, 2, "0xa0", "", T, 4);
    mc_store(&e, "k1", mem_disk, 1, "0xa1", "0xa0", T, 8); /* whole prefix given */
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p2, e.sb.data, e.sb.size), 0);
    ep_free(&e);
    json_t *j = call(f->s, "POST", "/query",
                     "{\"model\":\"m\",\"instance_id\":\"p2\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(jint(j, "default/p2/longest_matched"), 8);
    assert_int_equal(jint(j, "default/p2/CPU"), 8);
    assert_int_equal(jint(j, "default/p2/DISK"), 4);
    assert_int_equal(jint(j, "default/p2/GPU"), 0);
    json_decref(j);

    ep_init(&e);
    ep_batch(&e, 2, 1, 0);
    mc_update(&e, "k1", disk, 1); /* k1 moved from memory to disk */
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p2, e.sb.data, e.sb.size), 0);
    ep_free(&e);
    j = call(f->s, "POST", "/query",
             "{\"model\":\"m\",\"instance_id\":\"p2\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(jint(j, "default/p2/longest_matched"), 8);
    assert_int_equal(jint(j, "default/p2/CPU"), 4);
    assert_int_equal(jint(j, "default/p2/DISK"), 8);
    json_decref(j);

    ep_init(&e);
    ep_batch(&e, 3, 1, 0);
    mc_update(&e, "k0", disk, 0); /* k0 has no replica left */
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p2, e.sb.data, e.sb.size), 0);
    ep_free(&e);
    j = call(f->s, "POST", "/query",
             "{\"model\":\"m\",\"instance_id\":\"p2\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(jint(j, "default/p2/longest_matched"), 0);
    json_decref(j);

    ep_init(&e);
    ep_batch(&e, 4, 2, 0);
    mc_store(&e, "k0", mem_disk, 1, "0xa0", "", T, 4);
    msgpack_pack_array(&e.pk, 1);
    ep_str(&e, "RemoveAllEvent");
    assert_int_equal(cr__csvc_ingest(f->s, (uint32_t)f->p2, e.sb.data, e.sb.size), 0);
    ep_free(&e);
    j = call(f->s, "POST", "/query",
             "{\"model\":\"m\",\"instance_id\":\"p2\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(jint(j, "default/p2/longest_matched"), 0);
    json_decref(j);
    j = call(f->s, "GET", "/instances", NULL, 200);
    json_t *arr = json_object_get(j, "instances");
    for (size_t i = 0; i < json_array_size(arr); i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(arr, i), "instance_id")),
                    "p2"))
            assert_int_equal(json_integer_value(json_object_get(json_array_get(arr, i),
                                                                "mapped_blocks")),
                             0);
    json_decref(j);
}

/* Events applied on one thread while another queries and schedules: the
 * answers stay consistent (a prompt's hit is one of the states the events
 * pass through) and nothing races (run under ASan/UBSan in CI). */
typedef struct churn {
    cr__csvc_t *s;
    int slot, rounds;
} churn_t;

static void *churn_main(void *arg)
{
    churn_t *c = arg;
    uint64_t h[4] = {500, 501, 502, 503};
    for (int r = 0; r < c->rounds; r++) {
        evpack_t e;
        ep_init(&e);
        ep_batch(&e, r, 2, 0);
        ep_stored(&e, h, 4, NULL, T, 16, 4, "GPU");
        ep_removed(&e, h + 2, 2, "GPU");
        if (cr__csvc_ingest(c->s, (uint32_t)c->slot, e.sb.data, e.sb.size))
            abort();
        ep_free(&e);
    }
    return NULL;
}

static void test_concurrent_events_and_queries(void **st)
{
    fx_t *f = *st;
    int rounds = getenv("CRESCENT_SANITIZED") ? 300 : 2000;
    churn_t c = {.s = f->s, .slot = f->p1, .rounds = rounds};
    pthread_t thr;
    assert_int_equal(pthread_create(&thr, NULL, churn_main, &c), 0);
    for (int i = 0; i < rounds / 2; i++) {
        json_t *j = call(f->s, "POST", "/query", "{\"model\":\"m\",\"token_ids\":" TOKENS "}", 200);
        json_t *p1 = json_object_get(json_object_get(j, "default"), "p1");
        if (p1) {
            long long l = jint(p1, "longest_matched");
            /* a batch (store 4, remove 2) is applied atomically: a query sees
             * 0 blocks (before the first batch) or 2, never the 4 in between */
            if (l != 0 && l != 8)
                fail_msg("inconsistent longest_matched %lld", l);
        }
        json_decref(j);
        json_decref(call(f->s, "POST", "/schedule",
                         "{\"model\":\"m\",\"token_ids\":" TOKENS ",\"dry_run\":true}", 200));
    }
    pthread_join(thr, NULL);
    json_t *j = call(f->s, "POST", "/query", "{\"model\":\"m\",\"token_ids\":" TOKENS "}", 200);
    assert_int_equal(jint(j, "default/p1/longest_matched"), 8);
    json_decref(j);
}

/* /register and /unregister racing from several threads (real ZMQ
 * subscriptions to a port nobody listens on): every call answers a defined
 * status and the registry ends where it started. */
typedef struct regrace {
    cr__csvc_t *s;
    int id, rounds;
} regrace_t;

static void *regrace_main(void *arg)
{
    regrace_t *r = arg;
    char reg[256], unreg[128];
    for (int i = 0; i < r->rounds; i++) {
        /* two threads share each instance id, so calls collide */
        snprintf(reg, sizeof reg,
                 "{\"endpoint\":\"tcp://127.0.0.1:1\",\"modelname\":\"m\","
                 "\"instance_id\":\"race%d\",\"block_size\":4}",
                 r->id / 2);
        snprintf(unreg, sizeof unreg, "{\"instance_id\":\"race%d\"}", r->id / 2);
        cr__http_req_t q1 = {.method = "POST", .path = "/register", .body = reg,
                             .body_len = strlen(reg)};
        cr__http_resp_t a = {.status = 200};
        cr__csvc_handle(r->s, &q1, &a);
        if (a.status != 200 && a.status != 409)
            abort();
        free(a.body);
        cr__http_req_t q2 = {.method = "POST", .path = "/unregister", .body = unreg,
                             .body_len = strlen(unreg)};
        cr__http_resp_t b = {.status = 200};
        cr__csvc_handle(r->s, &q2, &b);
        if (b.status != 200 && b.status != 404)
            abort();
        free(b.body);
    }
    return NULL;
}

static void test_register_unregister_race(void **st)
{
    fx_t *f = *st;
    int rounds = getenv("CRESCENT_SANITIZED") ? 40 : 150;
    pthread_t t[4];
    regrace_t r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (regrace_t){.s = f->s, .id = i, .rounds = rounds};
        assert_int_equal(pthread_create(&t[i], NULL, regrace_main, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    json_t *j = call(f->s, "GET", "/health", NULL, 200);
    assert_int_equal(jint(j, "instances"), 2); /* p1 and p2 of the fixture */
    json_decref(j);
    /* the slots are reusable */
    j = call(f->s, "POST", "/register",
             "{\"endpoint\":\"tcp://127.0.0.1:1\",\"modelname\":\"m\",\"instance_id\":\"z\","
             "\"block_size\":4}",
             200);
    json_decref(j);
}

/* POST /report: instances report actual prefill times; the predictor behind
 * /schedule learns them and the next estimate doubles. /schedule says which
 * policy decided and why. */
static void test_report_corrects_schedule(void **st)
{
    fx_t *f = *st;
    feed(f);
    const char *q = "{\"model\":\"m\",\"token_ids\":" TOKENS ",\"dry_run\":true}";
    json_t *j = call(f->s, "POST", "/schedule", q, 200);
    double before = json_number_value(json_object_get(j, "est_prefill_ms"));
    assert_non_null(json_object_get(j, "decided_by"));
    const char *why = json_string_value(json_object_get(j, "reason"));
    assert_non_null(why);
    assert_non_null(strstr(why, "lowest expected TTFT"));
    assert_non_null(strstr(why, "prompt tokens reused"));
    assert_int_equal(jint(j, "matched_prefix_tokens"), 15);
    assert_int_equal(jint(j, "predictor/prefill_samples"), 0);
    json_decref(j);
    /* p1 reports 16 prefills of 20 tokens (4 reused) at twice the model */
    cr_cond_model_t m;
    cr_cond_model_default(&m);
    char body[2048];
    int n = snprintf(body, sizeof body, "{\"instance_id\":\"p1\",\"prefill\":[");
    for (int i = 0; i < 16; i++)
        n += snprintf(body + n, sizeof body - (size_t)n,
                      "%s{\"input_tokens\":20,\"reused_tokens\":4,\"seconds\":%.9f}", i ? "," : "",
                      2 * cr_cond_cost_prefill(&m, 20, 4));
    snprintf(body + n, sizeof body - (size_t)n, ",{\"input_tokens\":20,\"seconds\":0}]}");
    j = call(f->s, "POST", "/report", body, 200);
    assert_int_equal(jint(j, "accepted"), 16);
    assert_int_equal(json_array_size(json_object_get(j, "refused")), 1);
    assert_int_equal(jint(j, "predictor/prefill_samples"), 16);
    json_decref(j);
    j = call(f->s, "POST", "/schedule", q, 200);
    double after = json_number_value(json_object_get(j, "est_prefill_ms"));
    if (!(after > 1.9 * before && after < 2.1 * before))
        fail_msg("est_prefill_ms %.4f after the reports, %.4f before: want 2x", after, before);
    json_decref(j);
    /* strangers and bad bodies change nothing */
    json_decref(call(f->s, "POST", "/report",
                     "{\"instance_id\":\"zz\",\"prefill\":[{\"input_tokens\":9,\"seconds\":1}]}",
                     404));
    json_decref(call(f->s, "POST", "/report", "{\"instance_id\":\"p1\",\"prefill\":7}", 400));
    json_decref(call(f->s, "GET", "/report", NULL, 405));
    json_t *mt = call(f->s, "GET", "/metrics", NULL, 200);
    assert_non_null(strstr(json_string_value(mt), "crescent_conductor_reports_total 16\n"));
    json_decref(mt);
    j = call(f->s, "POST", "/schedule", q, 200);
    assert_int_equal(jint(j, "predictor/prefill_samples"), 16);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_concurrent_events_and_queries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mixed_block_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mooncake_store_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schedule_other_model_not_a_source, setup, teardown),
        cmocka_unit_test(test_schedule_pipeline),
        cmocka_unit_test(test_endpoint_prefixes),
        cmocka_unit_test_setup_teardown(test_register_unregister_race, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_tiers_and_dp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_removed_cleared_orphan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schedule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_report_corrects_schedule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_http_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
