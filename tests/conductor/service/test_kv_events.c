/* KV event decoder: vLLM array layout, map layout, hashes as int/bytes,
 * and bad input (malformed, oversized, wrong types) with field-named errors. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conductor/service/kv_events.h"
#include "evpack.h"

static int decode(const void *p, size_t n, cr__kvev_batch_t **b, cr__kvev_err_t *kind, char *err)
{
    return cr__kvev_decode(p, n, NULL, b, kind, err, 256);
}

/* Expects decoding to fail with rc, kind, and an error containing `needle`. */
static void expect_fail(const void *p, size_t n, const cr__kvev_limits_t *lim, int rc,
                        cr__kvev_err_t kind, const char *needle)
{
    cr__kvev_batch_t *b = (cr__kvev_batch_t *)(uintptr_t)0x1; /* must stay untouched */
    cr__kvev_err_t k = CR__KVEV_OK;
    char err[256];
    int got = cr__kvev_decode(p, n, lim, &b, &k, err, sizeof err);
    if (got != rc || k != kind || !strstr(err, needle))
        fail_msg("expected rc %d kind %s error containing '%s'; got rc %d kind %s error '%s'", rc,
                 cr__kvev_err_name(kind), needle, got, cr__kvev_err_name(k), err);
    assert_ptr_equal(b, (void *)(uintptr_t)0x1);
}

static void test_vllm_array_layout(void **st)
{
    (void)st;
    evpack_t e;
    ep_init(&e);
    uint64_t h[2] = {111, 0xfedcba9876543210ull}, parent = 77, rm[1] = {111};
    uint32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 4000000000u};
    ep_batch(&e, 1700000000.5, 3, 1);
    ep_stored(&e, h, 2, &parent, tok, 8, 4, "CPU");
    ep_removed(&e, rm, 1, NULL);
    ep_cleared(&e);
    ep_dp(&e, 3);
    cr__kvev_batch_t *b = NULL;
    char err[256];
    cr__kvev_err_t kind;
    assert_int_equal(decode(e.sb.data, e.sb.size, &b, &kind, err), 0);
    assert_true(b->ts > 1700000000.4 && b->ts < 1700000000.6);
    assert_int_equal(b->has_dp_rank, 1);
    assert_int_equal(b->dp_rank, 3);
    assert_int_equal(b->n_events, 3);
    assert_int_equal(b->n_unknown, 0);
    const cr__kvev_t *s = &b->events[0];
    assert_int_equal(s->type, CR__KVEV_STORED);
    assert_int_equal(s->n_hashes, 2);
    assert_true(s->hashes[0] == 111 && s->hashes[1] == 0xfedcba9876543210ull);
    assert_int_equal(s->has_parent, 1);
    assert_int_equal(s->parent, 77);
    assert_int_equal(s->n_tokens, 8);
    assert_int_equal(s->tokens[7], 4000000000u);
    assert_int_equal(s->block_size, 4);
    assert_int_equal(s->has_lora_id, 0);
    assert_string_equal(s->medium, "CPU");
    assert_string_equal(s->lora_name, "");
    assert_int_equal(b->events[1].type, CR__KVEV_REMOVED);
    assert_int_equal(b->events[1].n_hashes, 1);
    assert_int_equal(b->events[1].hashes[0], 111);
    assert_string_equal(b->events[1].medium, "");
    assert_int_equal(b->events[2].type, CR__KVEV_CLEARED);
    cr__kvev_batch_free(b);
    ep_free(&e);
}

/* Older vLLM: BlockStored without lora_id/medium; batch without dp rank;
 * hashes as negative ints and as bytes (ExternalBlockHash = bytes | int). */
static void test_old_layout_bytes_and_negative_hashes(void **st)
{
    (void)st;
    evpack_t e;
    ep_init(&e);
    ep_batch(&e, 5, 1, 0);
    msgpack_pack_array(&e.pk, 5);
    ep_str(&e, "BlockStored");
    msgpack_pack_array(&e.pk, 2);
    msgpack_pack_int64(&e.pk, -2);
    unsigned char sha[32];
    for (int i = 0; i < 32; i++)
        sha[i] = (unsigned char)i;
    msgpack_pack_bin(&e.pk, 32);
    msgpack_pack_bin_body(&e.pk, sha, 32);
    msgpack_pack_bin(&e.pk, 3);
    msgpack_pack_bin_body(&e.pk, "abc", 3); /* parent as bytes */
    msgpack_pack_array(&e.pk, 0);           /* no tokens */
    msgpack_pack_uint8(&e.pk, 16);
    cr__kvev_batch_t *b = NULL;
    char err[256];
    cr__kvev_err_t kind;
    assert_int_equal(decode(e.sb.data, e.sb.size, &b, &kind, err), 0);
    assert_int_equal(b->has_dp_rank, 0);
    assert_true(b->ts == 5.0);
    const cr__kvev_t *s = &b->events[0];
    assert_int_equal(s->n_hashes, 2);
    assert_true(s->hashes[0] == UINT64_MAX - 1);
    assert_true(s->hashes[1] == cr__kvev_fold_bytes(sha, 32));
    assert_true(s->parent == cr__kvev_fold_bytes("abc", 3));
    assert_int_equal(s->n_tokens, 0);
    assert_ptr_equal(s->tokens, NULL);
    assert_string_equal(s->medium, "");
    cr__kvev_batch_free(b);
    ep_free(&e);
}

/* Newer msgspec without array_like: structs as maps, tag under "type". */
static void test_map_layout(void **st)
{
    (void)st;
    evpack_t e;
    ep_init(&e);
    msgpack_pack_map(&e.pk, 3);
    ep_str(&e, "ts");
    msgpack_pack_double(&e.pk, 1.0);
    ep_str(&e, "events");
    msgpack_pack_array(&e.pk, 2);
    msgpack_pack_map(&e.pk, 7);
    ep_str(&e, "type");
    ep_str(&e, "BlockStored");
    ep_str(&e, "block_hashes");
    msgpack_pack_array(&e.pk, 1);
    msgpack_pack_uint64(&e.pk, 9);
    ep_str(&e, "parent_block_hash");
    msgpack_pack_nil(&e.pk);
    ep_str(&e, "token_ids");
    msgpack_pack_array(&e.pk, 2);
    msgpack_pack_uint32(&e.pk, 10);
    msgpack_pack_uint32(&e.pk, 11);
    ep_str(&e, "block_size");
    msgpack_pack_uint32(&e.pk, 2);
    ep_str(&e, "lora_name");
    ep_str(&e, "sql");
    ep_str(&e, "group_idx"); /* ignored */
    msgpack_pack_uint32(&e.pk, 0);
    msgpack_pack_map(&e.pk, 1);
    ep_str(&e, "type");
    ep_str(&e, "SomethingNew");
    ep_str(&e, "data_parallel_rank");
    msgpack_pack_uint32(&e.pk, 1);
    cr__kvev_batch_t *b = NULL;
    char err[256];
    cr__kvev_err_t kind;
    assert_int_equal(decode(e.sb.data, e.sb.size, &b, &kind, err), 0);
    assert_int_equal(b->n_events, 1);
    assert_int_equal(b->n_unknown, 1);
    assert_int_equal(b->dp_rank, 1);
    assert_int_equal(b->events[0].n_tokens, 2);
    assert_string_equal(b->events[0].lora_name, "sql");
    cr__kvev_batch_free(b);
    ep_free(&e);
}

static void test_unknown_tag_skipped(void **st)
{
    (void)st;
    evpack_t e;
    ep_init(&e);
    ep_batch(&e, 1, 2, 0);
    msgpack_pack_array(&e.pk, 2);
    ep_str(&e, "BlockPinned");
    msgpack_pack_array(&e.pk, 0);
    ep_cleared(&e);
    cr__kvev_batch_t *b = NULL;
    char err[256];
    cr__kvev_err_t kind;
    assert_int_equal(decode(e.sb.data, e.sb.size, &b, &kind, err), 0);
    assert_int_equal(b->n_events, 1);
    assert_int_equal(b->n_unknown, 1);
    assert_int_equal(b->events[0].type, CR__KVEV_CLEARED);
    cr__kvev_batch_free(b);
    ep_free(&e);
}

static void test_malformed_msgpack(void **st)
{
    (void)st;
    expect_fail("", 0, NULL, -EINVAL, CR__KVEV_ERR_MSGPACK, "empty");
    /* array32 declaring 4 billion elements in a 5-byte payload: refused
     * before msgpack-c could allocate 4G x 24 bytes */
    const unsigned char huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    expect_fail(huge, sizeof huge, NULL, -EINVAL, CR__KVEV_ERR_MSGPACK, "exceeds the input");
    const unsigned char hugemap[] = {0xdf, 0x7f, 0xff, 0xff, 0xff, 0x01};
    expect_fail(hugemap, sizeof hugemap, NULL, -EINVAL, CR__KVEV_ERR_MSGPACK, "exceeds");
    const unsigned char str32[] = {0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdb, 0xff, 0xff, 0xff, 0xff};
    expect_fail(str32, sizeof str32, NULL, -EINVAL, CR__KVEV_ERR_MSGPACK, "truncated");
    const unsigned char c1[] = {0x92, 0xc1, 0x90};
    expect_fail(c1, sizeof c1, NULL, -EINVAL, CR__KVEV_ERR_MSGPACK, "invalid msgpack type byte");
    const unsigned char trailing[] = {0x92, 0x01, 0x90, 0x00};
    expect_fail(trailing, sizeof trailing, NULL, -EINVAL, CR__KVEV_ERR_MSGPACK, "1 trailing");
    /* nesting: 100 nested fixarrays of one element */
    unsigned char deep[101];
    memset(deep, 0x91, 100);
    deep[100] = 0x01;
    expect_fail(deep, sizeof deep, NULL, -E2BIG, CR__KVEV_ERR_LIMIT, "nesting too deep");
}

static void test_bad_shapes_and_fields(void **st)
{
    (void)st;
    const unsigned char notbatch[] = {0x05};
    expect_fail(notbatch, 1, NULL, -EINVAL, CR__KVEV_ERR_SHAPE, "batch: expected array or map");
    const unsigned char short_arr[] = {0x91, 0x01};
    expect_fail(short_arr, 2, NULL, -EINVAL, CR__KVEV_ERR_SHAPE, "[ts, events, dp_rank?]");
    const unsigned char events_int[] = {0x92, 0x01, 0x05};
    expect_fail(events_int, 3, NULL, -EINVAL, CR__KVEV_ERR_SHAPE, "batch.events: expected array");
    const unsigned char ts_str[] = {0x92, 0xa1, 'x', 0x90};
    expect_fail(ts_str, 4, NULL, -EINVAL, CR__KVEV_ERR_FIELD, "batch.ts");
    const unsigned char dp_neg[] = {0x93, 0x01, 0x90, 0xff};
    expect_fail(dp_neg, 4, NULL, -EINVAL, CR__KVEV_ERR_FIELD, "batch.data_parallel_rank");

    evpack_t e;
    /* token id negative */
    ep_init(&e);
    ep_batch(&e, 1, 1, 0);
    msgpack_pack_array(&e.pk, 5);
    ep_str(&e, "BlockStored");
    msgpack_pack_array(&e.pk, 1);
    msgpack_pack_uint64(&e.pk, 1);
    msgpack_pack_nil(&e.pk);
    msgpack_pack_array(&e.pk, 2);
    msgpack_pack_int(&e.pk, 5);
    msgpack_pack_int(&e.pk, -5);
    msgpack_pack_int(&e.pk, 2);
    expect_fail(e.sb.data, e.sb.size, NULL, -EINVAL, CR__KVEV_ERR_FIELD, "events[0].token_ids[1]");
    ep_free(&e);

    /* negative block size */
    ep_init(&e);
    ep_batch(&e, 1, 1, 0);
    msgpack_pack_array(&e.pk, 5);
    ep_str(&e, "BlockStored");
    msgpack_pack_array(&e.pk, 0);
    msgpack_pack_nil(&e.pk);
    msgpack_pack_array(&e.pk, 0);
    msgpack_pack_int(&e.pk, -16);
    expect_fail(e.sb.data, e.sb.size, NULL, -EINVAL, CR__KVEV_ERR_FIELD,
                "events[0].block_size: expected an int in 1..65536, got int (negative)");
    ep_free(&e);

    /* tokens not filling the blocks */
    ep_init(&e);
    uint64_t h[2] = {1, 2};
    uint32_t tok[3] = {1, 2, 3};
    ep_batch(&e, 1, 1, 0);
    ep_stored(&e, h, 2, NULL, tok, 3, 2, NULL);
    expect_fail(e.sb.data, e.sb.size, NULL, -EINVAL, CR__KVEV_ERR_FIELD,
                "events[0].token_ids: 3 tokens do not fill 2 blocks of 2");
    ep_free(&e);

    /* hash of a wrong type, in the second event */
    ep_init(&e);
    ep_batch(&e, 1, 2, 0);
    ep_cleared(&e);
    msgpack_pack_array(&e.pk, 2);
    ep_str(&e, "BlockRemoved");
    msgpack_pack_array(&e.pk, 2);
    msgpack_pack_uint64(&e.pk, 1);
    msgpack_pack_double(&e.pk, 1.5);
    expect_fail(e.sb.data, e.sb.size, NULL, -EINVAL, CR__KVEV_ERR_FIELD,
                "events[1].block_hashes[1]: expected int or bytes, got float");
    ep_free(&e);

    /* medium of a wrong type; event that is not an array */
    ep_init(&e);
    ep_batch(&e, 1, 1, 0);
    ep_removed(&e, h, 1, NULL);
    ep_free(&e);
    ep_init(&e);
    ep_batch(&e, 1, 1, 0);
    msgpack_pack_array(&e.pk, 3);
    ep_str(&e, "BlockRemoved");
    msgpack_pack_array(&e.pk, 0);
    msgpack_pack_int(&e.pk, 7);
    expect_fail(e.sb.data, e.sb.size, NULL, -EINVAL, CR__KVEV_ERR_FIELD,
                "events[0].medium: expected str or nil, got int");
    ep_free(&e);
    const unsigned char ev_int[] = {0x92, 0x01, 0x91, 0x07};
    expect_fail(ev_int, 4, NULL, -EINVAL, CR__KVEV_ERR_SHAPE, "events[0]: expected array or map");
    const unsigned char ev_short[] = {0x92, 0x01, 0x91, 0x92, 0xab, 'B', 'l', 'o', 'c', 'k',
                                      'S', 't', 'o', 'r', 'e', 'd', 0x90};
    expect_fail(ev_short, sizeof ev_short, NULL, -EINVAL, CR__KVEV_ERR_SHAPE,
                "BlockStored needs at least 5 elements");
}

static void test_limits(void **st)
{
    (void)st;
    evpack_t e;
    ep_init(&e);
    uint64_t h[10] = {0};
    ep_batch(&e, 1, 1, 0);
    ep_removed(&e, h, 10, "GPU");
    cr__kvev_limits_t lim = {.max_hashes = 9};
    expect_fail(e.sb.data, e.sb.size, &lim, -E2BIG, CR__KVEV_ERR_LIMIT,
                "events[0].block_hashes: 10 hashes > limit 9");
    lim = (cr__kvev_limits_t){.max_bytes = 8};
    expect_fail(e.sb.data, e.sb.size, &lim, -E2BIG, CR__KVEV_ERR_LIMIT, "> limit 8");
    lim = (cr__kvev_limits_t){.max_objects = 10};
    expect_fail(e.sb.data, e.sb.size, &lim, -E2BIG, CR__KVEV_ERR_LIMIT, "too many msgpack objects");
    ep_free(&e);

    ep_init(&e);
    ep_batch(&e, 1, 3, 0);
    ep_cleared(&e);
    ep_cleared(&e);
    ep_cleared(&e);
    lim = (cr__kvev_limits_t){.max_events = 2};
    expect_fail(e.sb.data, e.sb.size, &lim, -E2BIG, CR__KVEV_ERR_LIMIT, "3 events > limit 2");
    ep_free(&e);

    ep_init(&e);
    uint32_t tok[8] = {0};
    ep_batch(&e, 1, 1, 0);
    ep_stored(&e, h, 2, NULL, tok, 8, 4, NULL);
    lim = (cr__kvev_limits_t){.max_tokens = 7};
    expect_fail(e.sb.data, e.sb.size, &lim, -E2BIG, CR__KVEV_ERR_LIMIT, "8 tokens > limit 7");
    ep_free(&e);

    /* a long medium string is refused, not truncated */
    ep_init(&e);
    ep_batch(&e, 1, 1, 0);
    ep_removed(&e, h, 1, "GPUGPUGPUGPUGPUGPUGPUGPUGPUGPUGPUGPU");
    expect_fail(e.sb.data, e.sb.size, NULL, -E2BIG, CR__KVEV_ERR_LIMIT, "events[0].medium: longer");
    ep_free(&e);
}

/* Every truncation and single-byte corruption of a valid batch decodes or
 * fails cleanly (ASan/UBSan catch the rest). */
static void test_truncations_and_corruptions(void **st)
{
    (void)st;
    evpack_t e;
    ep_init(&e);
    uint64_t h[3] = {1, 2, 3}, parent = 9;
    uint32_t tok[6] = {1, 2, 3, 4, 5, 6};
    ep_batch(&e, 1, 3, 1);
    ep_stored(&e, h, 3, &parent, tok, 6, 2, "GPU");
    ep_removed(&e, h, 2, "CPU");
    ep_cleared(&e);
    ep_dp(&e, 0);
    unsigned char *buf = malloc(e.sb.size);
    int ok = 0, bad = 0;
    for (size_t cut = 0; cut < e.sb.size; cut++) {
        cr__kvev_batch_t *b = NULL;
        char err[256];
        cr__kvev_err_t k;
        int rc = cr__kvev_decode(e.sb.data, cut, NULL, &b, &k, err, sizeof err);
        assert_int_not_equal(rc, 0); /* every strict prefix is incomplete */
    }
    unsigned seed = 12345;
    for (size_t pos = 0; pos < e.sb.size; pos++)
        for (int v = 0; v < 8; v++) {
            memcpy(buf, e.sb.data, e.sb.size);
            seed = seed * 1103515245u + 12345u;
            buf[pos] = (unsigned char)(seed >> 16);
            cr__kvev_batch_t *b = NULL;
            char err[256];
            cr__kvev_err_t k;
            int rc = cr__kvev_decode(buf, e.sb.size, NULL, &b, &k, err, sizeof err);
            if (rc == 0) {
                ok++;
                cr__kvev_batch_free(b);
            } else {
                assert_true(err[0] != 0);
                bad++;
            }
        }
    assert_true(ok > 0 && bad > 0);
    free(buf);
    ep_free(&e);
}

static void mc_replicas(evpack_t *e, const char *const *types, int n)
{
    msgpack_pack_array(&e->pk, (size_t)n);
    for (int i = 0; i < n; i++) {
        msgpack_pack_array(&e->pk, 2);
        ep_str(e, types[i]);
        ep_str(e, "tcp://127.0.0.1:1");
    }
}

/* Mooncake Store events (Mooncake's kv-event subscriber guide layout). */
static void test_mooncake_events(void **st)
{
    (void)st;
    evpack_t e;
    ep_init(&e);
    ep_batch(&e, 1, 4, 0);
    static const char *const both[] = {"memory", "LOCAL_DISK", "tape"};
    msgpack_pack_array(&e.pk, 8);
    ep_str(&e, "BlockStoreEvent");
    ep_str(&e, "key_1");
    mc_replicas(&e, both, 3);
    ep_str(&e, "llama");
    msgpack_pack_uint32(&e.pk, 2);
    ep_str(&e, "0x41234125");
    ep_str(&e, "12345");
    msgpack_pack_array(&e.pk, 4); /* the whole prefix: the block is the last 2 */
    for (int i = 1; i <= 4; i++)
        msgpack_pack_uint32(&e.pk, (uint32_t)i);
    msgpack_pack_array(&e.pk, 3);
    ep_str(&e, "BlockUpdateEvent");
    ep_str(&e, "key_1");
    mc_replicas(&e, both + 1, 1);
    msgpack_pack_array(&e.pk, 8); /* no block hash: nothing to index */
    ep_str(&e, "BlockStoreEvent");
    ep_str(&e, "key_2");
    mc_replicas(&e, both, 1);
    ep_str(&e, "");
    msgpack_pack_uint32(&e.pk, 2);
    ep_str(&e, "");
    ep_str(&e, "");
    msgpack_pack_array(&e.pk, 0);
    msgpack_pack_array(&e.pk, 1);
    ep_str(&e, "RemoveAllEvent");
    cr__kvev_batch_t *b = NULL;
    char err[256];
    cr__kvev_err_t kind;
    if (decode(e.sb.data, e.sb.size, &b, &kind, err))
        fail_msg("decode failed: %s", err);
    assert_int_equal(b->n_events, 4);
    const cr__kvev_t *x = &b->events[0];
    assert_int_equal(x->type, CR__KVEV_MC_STORE);
    assert_true(x->key == cr__kvev_fold_bytes("key_1", 5));
    assert_int_equal(x->replicas, CR__KVEV_REPLICA_MEMORY | CR__KVEV_REPLICA_DISK);
    assert_string_equal(x->model, "llama");
    assert_int_equal(x->n_hashes, 1);
    assert_true(x->hashes[0] == 0x41234125ull);
    assert_true(x->has_parent && x->parent == 12345);
    assert_int_equal(x->n_tokens, 2);
    assert_true(x->tokens[0] == 3 && x->tokens[1] == 4);
    assert_int_equal(b->events[1].type, CR__KVEV_MC_UPDATE);
    assert_int_equal(b->events[1].replicas, CR__KVEV_REPLICA_DISK);
    assert_int_equal(b->events[2].n_hashes, 0);
    assert_int_equal(b->events[2].has_parent, 0);
    assert_int_equal(b->events[3].type, CR__KVEV_CLEARED);
    cr__kvev_batch_free(b);
    ep_free(&e);

    /* bad: replicas entry not a [type, location] pair; tokens not whole blocks */
    ep_init(&e);
    ep_batch(&e, 1, 1, 0);
    msgpack_pack_array(&e.pk, 3);
    ep_str(&e, "BlockUpdateEvent");
    ep_str(&e, "k");
    msgpack_pack_array(&e.pk, 1);
    msgpack_pack_int(&e.pk, 1);
    expect_fail(e.sb.data, e.sb.size, NULL, -EINVAL, CR__KVEV_ERR_FIELD,
                "events[0].replicas[0]: expected [type: str, location]");
    ep_free(&e);
    ep_init(&e);
    ep_batch(&e, 1, 1, 0);
    msgpack_pack_array(&e.pk, 8);
    ep_str(&e, "BlockStoreEvent");
    ep_str(&e, "k");
    mc_replicas(&e, both, 1);
    ep_str(&e, "m");
    msgpack_pack_uint32(&e.pk, 4);
    ep_str(&e, "0x1");
    msgpack_pack_nil(&e.pk);
    msgpack_pack_array(&e.pk, 3);
    for (int i = 0; i < 3; i++)
        msgpack_pack_uint32(&e.pk, 1);
    expect_fail(e.sb.data, e.sb.size, NULL, -EINVAL, CR__KVEV_ERR_FIELD,
                "events[0].token_ids: 3 tokens are not whole blocks of 4");
    ep_free(&e);
    const unsigned char short_mc[] = {0x92, 0x01, 0x91, 0x92, 0xb0, 'B', 'l', 'o', 'c', 'k', 'U',
                                      'p', 'd', 'a', 't', 'e', 'E', 'v', 'e', 'n', 't', 0x01};
    expect_fail(short_mc, sizeof short_mc, NULL, -EINVAL, CR__KVEV_ERR_SHAPE,
                "BlockUpdateEvent needs 3 elements");
}

/* Regression: a map-encoded AllBlocksCleared carrying fields of other events
 * (wrong-typed block_hashes, an over-long medium) must not be read. */
static void test_cleared_map_ignores_other_fields(void **st)
{
    (void)st;
    evpack_t e;
    ep_init(&e);
    ep_batch(&e, 1, 1, 0);
    msgpack_pack_map(&e.pk, 3);
    ep_str(&e, "type");
    ep_str(&e, "AllBlocksCleared");
    ep_str(&e, "block_hashes");
    msgpack_pack_int(&e.pk, 5);
    ep_str(&e, "medium");
    ep_str(&e, "a-medium-name-far-longer-than-thirty-two-bytes-xxxxxxxxxxxxxxxx");
    cr__kvev_batch_t *b = NULL;
    char err[256];
    cr__kvev_err_t kind;
    assert_int_equal(decode(e.sb.data, e.sb.size, &b, &kind, err), 0);
    assert_int_equal(b->n_events, 1);
    assert_int_equal(b->events[0].type, CR__KVEV_CLEARED);
    assert_int_equal(b->events[0].n_hashes, 0);
    assert_string_equal(b->events[0].medium, "");
    cr__kvev_batch_free(b);
    ep_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vllm_array_layout),
        cmocka_unit_test(test_old_layout_bytes_and_negative_hashes),
        cmocka_unit_test(test_map_layout),
        cmocka_unit_test(test_unknown_tag_skipped),
        cmocka_unit_test(test_malformed_msgpack),
        cmocka_unit_test(test_bad_shapes_and_fields),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_truncations_and_corruptions),
        cmocka_unit_test(test_mooncake_events),
        cmocka_unit_test(test_cleared_map_ignores_other_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
