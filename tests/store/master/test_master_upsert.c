/* Master upsert (store/master/upsert.c), driven with an explicit clock: a
 * PutStart with CR__RPC_CFG_UPSERT of a complete key leaves the old version
 * readable until PutEnd swaps in the new one in one step; revoke and the
 * put deadline drop only the new version; concurrent upserts; the old
 * version's space stays quarantined while a reader holds its lease; a
 * master restored from the journal sees the new version. Also
 * RemoveByRegex (regex.c), the other Mooncake-API master operation, and
 * its wire encoding. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/master/master.h"

#define KiB 1024ull
#define MiB (1024ull * 1024)

static const cr__rpc_client_id_t CA = {1, 1};

static cr__master_t *mk(void)
{
    cr__master_cfg_t c;
    cr__master_cfg_default(&c);
    c.lease_ttl_ms = 5000;
    c.client_ttl_ms = 1000000;
    c.put_timeout_ms = 30000;
    cr__master_t *m;
    assert_int_equal(cr__master_create(&c, &m), 0);
    return m;
}

/* PutStart (upsert or not); *ver and *addr of replica 0 */
static int start(cr__master_t *m, const char *key, uint64_t size, int upsert, uint64_t now,
                 uint64_t *ver, uint64_t *addr)
{
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1, .flags = upsert ? CR__RPC_CFG_UPSERT : 0};
    int rc = cr__master_put_start(m, key, strlen(key), size, &cfg, now, &msg, &it);
    *ver = rc == 0 ? it.version : 0;
    if (addr)
        *addr = rc == 0 ? it.replicas[0].shards[0].addr : 0;
    cr__rpc_msg_free(&msg);
    return rc;
}

static int end(cr__master_t *m, const char *key, uint64_t ver, uint64_t now)
{
    return cr__master_put_end(m, key, strlen(key), ver, now);
}

/* GetReplicaList: version, size and replica-0 address; takes a lease */
static int get(cr__master_t *m, const char *key, uint64_t now, uint64_t *ver, uint64_t *size,
               uint64_t *addr, uint64_t *rid)
{
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    int rc = cr__master_get_replicas(m, key, strlen(key), now, &msg, &it);
    if (rc == 0) {
        *ver = it.version;
        if (size)
            *size = it.size;
        if (addr)
            *addr = it.replicas[0].shards[0].addr;
        if (rid)
            *rid = it.replicas[0].replica_id;
    }
    cr__rpc_msg_free(&msg);
    return rc;
}

static void test_upsert_swaps_in_one_step(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x1000000, 4 * MiB, 0), 0);
    uint64_t v1 = 0, v2 = 0, a1 = 0, a2 = 0, gv = 0, gs = 0, ga = 0, rid = 0;
    /* upsert of a missing key is a plain put */
    assert_int_equal(start(m, "k", 1000, 1, 1, &v1, &a1), 0);
    assert_int_equal(end(m, "k", v1, 1), 0);
    /* upsert of the complete key: the old version stays visible meanwhile */
    assert_int_equal(get(m, "k", 2, &gv, &gs, &ga, &rid), 0); /* reader's lease to 5002 */
    assert_int_equal(start(m, "k", 3000, 1, 3, &v2, &a2), 0);
    assert_true(v2 != v1 && (a2 >= a1 + 1000 || a2 + 3000 <= a1));
    assert_int_equal(cr__master_exist(m, "k", 1, 4), 0);
    assert_int_equal(get(m, "k", 4, &gv, &gs, NULL, NULL), 0);
    assert_int_equal(gv, v1);
    assert_int_equal(gs, 1000);
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.keys, 1);
    assert_int_equal(st.pending_puts, 1);
    /* PutEnd of the new version: swapped */
    assert_int_equal(end(m, "k", v2, 5), 0);
    assert_int_equal(get(m, "k", 6, &gv, &gs, &ga, NULL), 0);
    assert_int_equal(gv, v2);
    assert_int_equal(gs, 3000);
    assert_int_equal(ga, a2);
    cr__master_stats(m, &st);
    assert_int_equal(st.keys, 1);
    assert_int_equal(st.pending_puts, 0);
    /* the old version's reader: its validation fails (never other bytes) */
    assert_int_equal(cr__master_validate(m, "k", 1, v1, rid, 7), CR_E_OBJECT_NOT_FOUND);
    /* a second PutEnd of the same version is idempotent */
    assert_int_equal(end(m, "k", v2, 8), 0);
    /* a plain put still never replaces */
    assert_int_equal(start(m, "k", 10, 0, 9, &v1, NULL), CR_E_OBJECT_ALREADY_EXISTS);
    cr__master_destroy(m);
}

static void test_old_space_quarantined_while_leased(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    /* room for exactly two 32 KiB objects */
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x1000000, 64 * KiB, 0), 0);
    uint64_t v1 = 0, v2 = 0, v3 = 0, a1 = 0, a2 = 0, a3 = 0, gv = 0;
    assert_int_equal(start(m, "k", 32 * KiB, 1, 0, &v1, &a1), 0);
    assert_int_equal(end(m, "k", v1, 0), 0);
    assert_int_equal(get(m, "k", 100, &gv, NULL, NULL, NULL), 0); /* lease to 5100 */
    assert_int_equal(start(m, "k", 32 * KiB, 1, 200, &v2, &a2), 0);
    assert_int_equal(end(m, "k", v2, 201), 0);
    assert_true(a2 != a1);
    /* the old range is still held for the reader: a third upsert finds no room */
    assert_int_equal(get(m, "k", 202, &gv, NULL, NULL, NULL), 0);
    assert_int_equal(start(m, "k", 32 * KiB, 1, 300, &v3, &a3), CR_E_NO_AVAILABLE_HANDLE);
    uint32_t f;
    cr__master_ping(m, CA, 5200, &f);
    cr__master_tick(m, 5200); /* the first reader's lease is over */
    assert_int_equal(start(m, "k", 32 * KiB, 1, 5201, &v3, &a3), 0);
    assert_int_equal(a3, a1); /* reused only now */
    assert_int_equal(end(m, "k", v3, 5202), 0);
    cr__master_destroy(m);
}

static void test_revoke_deadline_and_concurrency(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x1000000, 4 * MiB, 0), 0);
    uint64_t v1 = 0, v2 = 0, v3 = 0, gv = 0;
    assert_int_equal(start(m, "k", 100, 0, 0, &v1, NULL), 0);
    assert_int_equal(end(m, "k", v1, 0), 0);
    /* revoke drops the new version only */
    assert_int_equal(start(m, "k", 200, 1, 1, &v2, NULL), 0);
    assert_int_equal(cr__master_put_revoke(m, "k", 1, v2, 2), 0);
    assert_int_equal(end(m, "k", v2, 3), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(get(m, "k", 3, &gv, NULL, NULL, NULL), 0);
    assert_int_equal(gv, v1);
    /* a second upsert while one is pending is refused until it ends */
    assert_int_equal(start(m, "k", 200, 1, 10, &v2, NULL), 0);
    assert_int_equal(start(m, "k", 300, 1, 11, &v3, NULL), CR_E_OBJECT_ALREADY_EXISTS);
    assert_int_equal(end(m, "k", v2, 12), 0);
    assert_int_equal(start(m, "k", 300, 1, 13, &v3, NULL), 0);
    /* past the put deadline the pending upsert is reclaimed; the key keeps v2 */
    assert_int_equal(end(m, "k", v3, 13 + 30000), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(get(m, "k", 13 + 30001, &gv, NULL, NULL, NULL), 0);
    assert_int_equal(gv, v2);
    /* an expired pending upsert does not block the next one */
    assert_int_equal(start(m, "k", 300, 1, 40000, &v3, NULL), 0);
    assert_int_equal(start(m, "k", 300, 1, 40000 + 30001, &v1, NULL), 0);
    assert_int_equal(end(m, "k", v1, 40000 + 30002), 0);
    cr__master_destroy(m);
}

static void test_old_version_gone_meanwhile(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x1000000, 4 * MiB, 0), 0);
    uint64_t v1 = 0, v2 = 0, v3 = 0, gv = 0;
    assert_int_equal(start(m, "a", 100, 0, 0, &v1, NULL), 0);
    assert_int_equal(end(m, "a", v1, 0), 0);
    assert_int_equal(start(m, "a", 200, 1, 1, &v2, NULL), 0);
    assert_int_equal(cr__master_remove(m, "a", 1, 1, 2), 0); /* removed under the upsert */
    assert_int_equal(end(m, "a", v2, 3), 0);                /* still published */
    assert_int_equal(get(m, "a", 4, &gv, NULL, NULL, NULL), 0);
    assert_int_equal(gv, v2);
    /* removed, then re-created by a plain put still writing: the upsert loses */
    assert_int_equal(start(m, "a", 200, 1, 10, &v2, NULL), 0);
    assert_int_equal(cr__master_remove(m, "a", 1, 1, 11), 0);
    assert_int_equal(start(m, "a", 50, 0, 12, &v3, NULL), 0);
    assert_int_equal(end(m, "a", v2, 13), CR_E_OBJECT_ALREADY_EXISTS);
    assert_int_equal(end(m, "a", v3, 14), 0);
    assert_int_equal(get(m, "a", 15, &gv, NULL, NULL, NULL), 0);
    assert_int_equal(gv, v3);
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.pending_puts, 0);
    cr__master_destroy(m);
}

static void collect(void *u, const uint8_t *frame, size_t len) { cr__ha_buf_append(u, frame, len); }

static void test_journal_sees_the_new_version(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    cr__ha_buf_t jb = {0};
    cr__master_set_journal(m, collect, &jb);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x1000000, 4 * MiB, 0), 0);
    uint64_t v1 = 0, v2 = 0, v3 = 0, a2 = 0, gv = 0, ga = 0, gs = 0;
    assert_int_equal(start(m, "k", 100, 0, 1, &v1, NULL), 0);
    assert_int_equal(end(m, "k", v1, 1), 0);
    assert_int_equal(start(m, "k", 4000, 1, 2, &v2, &a2), 0);
    assert_int_equal(end(m, "k", v2, 2), 0);
    assert_int_equal(start(m, "k", 5000, 1, 3, &v3, NULL), 0); /* pending at the crash */
    cr__ha_shadow_t *sh;
    assert_int_equal(cr__ha_shadow_create(&sh), 0);
    assert_int_equal(cr__ha_shadow_load(sh, jb.p, jb.len), (long)jb.len);
    cr__master_t *m2 = mk();
    uint64_t n = 0;
    assert_int_equal(cr__master_restore(m2, sh, 100, &n), 0);
    cr__ha_shadow_destroy(sh);
    assert_int_equal(get(m2, "k", 101, &gv, &gs, &ga, NULL), 0);
    assert_int_equal(gv, v2);
    assert_int_equal(gs, 4000);
    assert_int_equal(ga, a2);
    cr__master_destroy(m2);
    cr__master_destroy(m);
    cr__ha_buf_free(&jb);
}

static void test_remove_by_regex(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x1000000, 4 * MiB, 0), 0);
    const char *keys[] = {"user_session_1", "user_session_2", "user_x", "other", "pend"};
    uint64_t v = 0, gv = 0, n = 0;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(start(m, keys[i], 100, 0, 1, &v, NULL), 0);
        assert_int_equal(end(m, keys[i], v, 1), 0);
    }
    assert_int_equal(start(m, "user_session_p", 100, 0, 1, &v, NULL), 0); /* pending */
    assert_int_equal(get(m, "user_session_2", 2, &gv, NULL, NULL, NULL), 0); /* leased */
    assert_int_equal(cr__master_remove_by_regex(m, "^user_session_", 0, 3, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(cr__master_exist(m, "user_session_1", 14, 4), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(cr__master_exist(m, "user_session_2", 14, 4), 0);
    assert_int_equal(cr__master_remove_by_regex(m, "session", 1, 4, &n), 0); /* unanchored */
    assert_int_equal(n, 1);
    assert_int_equal(end(m, "user_session_p", v, 5), 0); /* pending puts are not touched */
    assert_int_equal(cr__master_remove_by_regex(m, "(", 0, 6, &n), CR_E_INVALID_PARAMS);
    assert_int_equal(cr__master_remove_by_regex(m, "", 0, 6, &n), CR_E_INVALID_PARAMS);
    assert_int_equal(cr__master_remove_by_regex(m, "^(user_x|other)$", 0, 7, &n), 0);
    assert_int_equal(n, 2);
    /* the request over the wire, and a malformed one refused */
    cr__rpc_msg_t req = {.type = CR__RPC_REMOVE_BY_REGEX, .req_id = 7, .flags = CR__RPC_F_FORCE,
                         .pattern = "^user_session_p$"};
    cr__rpc_buf_t b;
    cr__rpc_buf_init(&b);
    assert_int_equal(cr__rpc_encode(&req, &b), 0);
    cr__rpc_hdr_t h;
    assert_int_equal(cr__rpc_decode_hdr(b.data, &h), 0);
    cr__rpc_msg_t dec;
    assert_int_equal(cr__rpc_decode(&h, b.data + CR__RPC_HDR_SIZE, b.len - CR__RPC_HDR_SIZE, &dec),
                     0);
    assert_string_equal(dec.pattern, "^user_session_p$");
    assert_int_equal(dec.flags, CR__RPC_F_FORCE);
    cr__rpc_msg_t rep = {0};
    cr__master_handle(m, &dec, &rep, 8);
    assert_int_equal(rep.status, 0);
    assert_int_equal(rep.count, 1);
    cr__rpc_msg_free(&dec);
    b.data[b.len - 1] = 0; /* a NUL inside the pattern */
    assert_int_equal(cr__rpc_decode(&h, b.data + CR__RPC_HDR_SIZE, b.len - CR__RPC_HDR_SIZE, &dec),
                     -EBADMSG);
    cr__rpc_buf_free(&b);
    req.pattern = "";
    cr__rpc_buf_init(&b);
    assert_int_equal(cr__rpc_encode(&req, &b), -EINVAL);
    cr__rpc_buf_free(&b);
    cr__master_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upsert_swaps_in_one_step),
        cmocka_unit_test(test_old_space_quarantined_while_leased),
        cmocka_unit_test(test_revoke_deadline_and_concurrency),
        cmocka_unit_test(test_old_version_gone_meanwhile),
        cmocka_unit_test(test_journal_sees_the_new_version),
        cmocka_unit_test(test_remove_by_regex),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
