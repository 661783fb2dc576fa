/* Master replica tasks and per-replica clear (store/master/rtask.c), driven
 * through cr__master_handle with an explicit clock: a copy adds replicas
 * only at RTASK_END, a move drops the source there, a failed or timed-out
 * task releases its target space and leaves the object as it was, the
 * source keeps a lease while the copy runs, Mooncake's error cases, and
 * REPLICA_CLEAR per segment. Also the wire form of the new messages. */
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

#define MiB (1024ull * 1024)

static const cr__rpc_client_id_t CA = {1, 1}, CB = {2, 2}, CC = {3, 3};

static cr__master_t *mk(void)
{
    cr__master_cfg_t c;
    cr__master_cfg_default(&c);
    c.lease_ttl_ms = 5000;
    c.client_ttl_ms = 100000000;
    c.put_timeout_ms = 30000;
    cr__master_t *m;
    assert_int_equal(cr__master_create(&c, &m), 0);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 4 * MiB, 0), 0);
    assert_int_equal(cr__master_mount(m, CB, "segB", 0x20000000, 4 * MiB, 0), 0);
    assert_int_equal(cr__master_mount(m, CC, "segC", 0x30000000, 4 * MiB, 0), 0);
    return m;
}

/* a complete object of size bytes on segment pref */
static void put(cr__master_t *m, const char *key, uint64_t size, const char *pref, uint64_t now)
{
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    const char *p[1] = {pref};
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1, .n_preferred = 1, .preferred = p};
    assert_int_equal(cr__master_put_start(m, key, strlen(key), size, &cfg, now, &msg, &it), 0);
    assert_string_equal(it.replicas[0].shards[0].segment, pref);
    assert_int_equal(cr__master_put_end(m, key, strlen(key), it.version, now), 0);
    cr__rpc_msg_free(&msg);
}

/* the segments of key's replicas, sorted, joined by ',' ("" if missing) */
static const char *where(cr__master_t *m, const char *key, uint64_t now)
{
    static char out[256];
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    out[0] = 0;
    if (cr__master_get_replicas(m, key, strlen(key), now, &msg, &it) == 0) {
        const char *names[8];
        uint32_t n = it.n_replicas;
        for (uint32_t i = 0; i < n; i++)
            names[i] = it.replicas[i].shards[0].segment;
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = i + 1; j < n; j++)
                if (strcmp(names[j], names[i]) < 0) {
                    const char *t = names[i];
                    names[i] = names[j];
                    names[j] = t;
                }
        for (uint32_t i = 0; i < n; i++)
            snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? "," : "", names[i]);
    }
    cr__rpc_msg_free(&msg);
    return out;
}

static int create(cr__master_t *m, cr__rpc_client_id_t who, int type, const char *key,
                  const char *src, const char *const *tg, uint32_t n, uint64_t now, uint64_t *hi,
                  uint64_t *lo)
{
    cr__rpc_msg_t req = {0}, rep = {0};
    *hi = *lo = 0; /* outputs set on every path (gcc -O3 maybe-uninitialized) */
    req.type = CR__RPC_RTASK_CREATE;
    req.client_id = who;
    req.flags = (uint32_t)type;
    req.segment = src;
    req.n_items = n + 1;
    req.items = cr__rpc_msg_alloc(&req, (n + 1) * sizeof *req.items);
    req.items[0].key = key;
    req.items[0].key_len = (uint32_t)strlen(key);
    for (uint32_t i = 0; i < n; i++) {
        req.items[i + 1].key = tg[i];
        req.items[i + 1].key_len = (uint32_t)strlen(tg[i]);
    }
    cr__master_handle(m, &req, &rep, now);
    int rc = rep.status;
    if (!rc) {
        *hi = rep.base;
        *lo = rep.count;
    }
    cr__rpc_msg_free(&req);
    cr__rpc_msg_free(&rep);
    return rc;
}

/* RTASK_START; *n_new = new target replicas handed out */
static int start(cr__master_t *m, cr__rpc_client_id_t who, uint64_t hi, uint64_t lo, uint64_t now,
                 uint32_t *n_new)
{
    cr__rpc_msg_t req = {.type = CR__RPC_RTASK_START, .client_id = who, .base = hi, .count = lo};
    cr__rpc_msg_t rep = {0};
    *n_new = 0;
    cr__master_handle(m, &req, &rep, now);
    int rc = rep.status;
    if (!rc) {
        assert_true(rep.n_items >= 1);
        assert_int_equal(rep.items[0].n_replicas, 1);
        for (uint32_t i = 1; i < rep.n_items; i++)
            assert_int_equal(rep.items[i].replicas[0].shards[0].len, rep.items[0].size);
        *n_new = rep.n_items - 1;
    }
    cr__rpc_msg_free(&rep);
    return rc;
}

static int end(cr__master_t *m, cr__rpc_client_id_t who, uint64_t hi, uint64_t lo, int result,
               uint64_t now)
{
    cr__rpc_msg_t req = {.type = CR__RPC_RTASK_END, .client_id = who, .base = hi, .count = lo,
                         .flags = (uint32_t)result};
    cr__rpc_msg_t rep = {0};
    cr__master_handle(m, &req, &rep, now);
    int rc = rep.status;
    cr__rpc_msg_free(&rep);
    return rc;
}

/* task status (0..3) and error, or the query's error */
static int query(cr__master_t *m, uint64_t hi, uint64_t lo, uint64_t now, int *err)
{
    cr__rpc_msg_t req = {.type = CR__RPC_RTASK_QUERY, .base = hi, .count = lo};
    cr__rpc_msg_t rep = {0};
    if (err)
        *err = 0;
    cr__master_handle(m, &req, &rep, now);
    int rc = rep.status ? rep.status : (int)rep.flags;
    if (!rep.status && err)
        *err = rep.items[0].status;
    cr__rpc_msg_free(&rep);
    return rc;
}

static uint64_t allocated(cr__master_t *m)
{
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    return st.allocated_bytes;
}

static void collect(void *u, const uint8_t *frame, size_t len) { cr__ha_buf_append(u, frame, len); }

static int count_win(void *u, const cr__ha_win_t *w)
{
    (void)w;
    (*(int *)u)++;
    return 0;
}

/* open WIN holds in the records of b */
static int holds_in(const cr__ha_buf_t *b)
{
    cr__ha_shadow_t *sh;
    assert_int_equal(cr__ha_shadow_create(&sh), 0);
    assert_int_equal(cr__ha_shadow_load(sh, b->p, b->len), (long)b->len);
    int n = 0;
    assert_int_equal(cr__ha_shadow_foreach_win(sh, count_win, &n), 0);
    cr__ha_shadow_destroy(sh);
    return n;
}

/* HA: a copy's target block is recorded as held from START until END
 * adopts it (or its quarantine after a failure ends), so a master restored
 * from those records (a new leader) keeps it quarantined while the copier
 * may still write there instead of giving it to a new object. */
static void test_copy_target_held_across_failover(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    cr__ha_buf_t jb = {0};
    assert_int_equal(cr__master_dump(m, &jb, NULL, NULL), 0); /* the mounts, then the log */
    cr__master_set_journal(m, collect, &jb);
    put(m, "k", 1 * MiB, "segA", 1);
    put(m, "k2", 1 * MiB, "segA", 1);
    const char *tb[] = {"segB"};
    uint64_t hi, lo, hi2, lo2;
    uint32_t n_new;
    assert_int_equal(create(m, CA, 0, "k", NULL, tb, 1, 2, &hi, &lo), 0);
    cr__master_wait_reset();
    assert_int_equal(start(m, CA, hi, lo, 3, &n_new), 0);
    assert_int_equal(n_new, 1);
    assert_int_equal(cr__master_wait_needed(), 1); /* START waits for the standbys */
    assert_int_equal(holds_in(&jb), 1);
    /* a new leader with these records: the target block is quarantined */
    cr__ha_shadow_t *sh;
    assert_int_equal(cr__ha_shadow_create(&sh), 0);
    assert_int_equal(cr__ha_shadow_load(sh, jb.p, jb.len), (long)jb.len);
    cr__master_cfg_t c;
    cr__master_cfg_default(&c);
    c.put_timeout_ms = 30000;
    cr__master_t *m2;
    assert_int_equal(cr__master_create(&c, &m2), 0);
    assert_int_equal(cr__master_restore(m2, sh, 10, NULL), 0);
    cr__ha_shadow_destroy(sh);
    cr__master_stats_t st;
    cr__master_stats(m2, &st);
    assert_int_equal(st.quarantine_bytes, 1 * MiB);
    cr__master_destroy(m2);
    /* END adopts the block: the hold ends with the object's record */
    assert_int_equal(end(m, CA, hi, lo, 0, 4), 0);
    assert_int_equal(holds_in(&jb), 0);
    /* a failed copy: held until its quarantine ends */
    const char *tc[] = {"segC"};
    assert_int_equal(create(m, CA, 0, "k2", NULL, tc, 1, 5, &hi2, &lo2), 0);
    assert_int_equal(start(m, CA, hi2, lo2, 6, &n_new), 0);
    assert_int_equal(end(m, CA, hi2, lo2, -1, 7), 0);
    assert_int_equal(holds_in(&jb), 1);
    cr__master_tick(m, 7 + 60000);
    assert_int_equal(holds_in(&jb), 0);
    cr__master_destroy(m);
    cr__ha_buf_free(&jb);
}

/* A copy's target segment dropped while the copier may still write the
 * target block, and the same memory mounted again at once: that block is
 * quarantined until the copier can no longer write (the task's deadline +
 * its timeout), not handed to a new object; END then fails. */
static void test_copy_target_held_when_segment_drops(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    put(m, "k", 1 * MiB, "segA", 1);
    const char *tb[] = {"segB"};
    uint64_t hi, lo;
    uint32_t n_new;
    assert_int_equal(create(m, CA, 0, "k", NULL, tb, 1, 2, &hi, &lo), 0);
    assert_int_equal(start(m, CA, hi, lo, 3, &n_new), 0); /* deadline 60003 */
    assert_int_equal(n_new, 1);
    assert_int_equal(cr__master_unmount(m, CB, "segB", 4), 0);
    assert_int_equal(cr__master_mount(m, CB, "segB", 0x20000000, 4 * MiB, 5), 0);
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.quarantine_bytes, 1 * MiB);
    put(m, "n", 1 * MiB, "segB", 6); /* the rest of segB is usable */
    assert_int_equal(end(m, CA, hi, lo, 0, 7), 0);
    int err;
    assert_int_equal(query(m, hi, lo, 8, &err), 3); /* failed: the target is gone */
    assert_string_equal(where(m, "k", 9), "segA");
    cr__master_tick(m, 3 + 2 * 60000 - 1);
    cr__master_stats(m, &st);
    assert_int_equal(st.quarantine_bytes, 1 * MiB);
    cr__master_tick(m, 3 + 2 * 60000);
    cr__master_stats(m, &st);
    assert_int_equal(st.quarantine_bytes, 0);
    cr__master_destroy(m);
}

static void test_copy_adds_replicas_at_end_only(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    put(m, "k", 100000, "segA", 1);
    uint64_t base = allocated(m), hi, lo;
    const char *tg[] = {"segB", "segC", "segB"};
    assert_int_equal(create(m, CA, 0, "k", "", tg, 3, 2, &hi, &lo), 0);
    assert_int_equal(query(m, hi, lo, 2, NULL), 0); /* PENDING */
    uint32_t n = 0;
    assert_int_equal(start(m, CB, hi, lo, 3, &n), CR_E_INVALID_PARAMS); /* not its creator */
    assert_int_equal(start(m, CA, hi, lo, 3, &n), 0);
    assert_int_equal(n, 2); /* segB once */
    assert_true(allocated(m) >= base + 200000);
    assert_int_equal(query(m, hi, lo, 3, NULL), 1); /* PROCESSING */
    assert_string_equal(where(m, "k", 4), "segA"); /* readers do not see the copies yet */
    /* the source is leased while the copy runs: a remove must wait */
    assert_int_equal(cr__master_remove(m, "k", 1, 0, 6000), CR_E_OBJECT_HAS_LEASE);
    assert_int_equal(start(m, CA, hi, lo, 5, &n), CR_E_INVALID_PARAMS); /* started already */
    assert_int_equal(end(m, CA, hi, lo, 0, 7000), 0);
    assert_int_equal(query(m, hi, lo, 7000, NULL), 2); /* SUCCESS */
    assert_string_equal(where(m, "k", 7001), "segA,segB,segC");
    assert_int_equal(end(m, CA, hi, lo, 0, 7002), CR_E_INVALID_PARAMS); /* ended already */
    /* a copy to segments that hold replicas already: nothing to allocate */
    const char *tg2[] = {"segB"};
    assert_int_equal(create(m, CA, 0, "k", "", tg2, 1, 7003, &hi, &lo), 0);
    assert_int_equal(start(m, CA, hi, lo, 7004, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(end(m, CA, hi, lo, 0, 7005), 0);
    assert_string_equal(where(m, "k", 7006), "segA,segB,segC");
    cr__master_destroy(m);
}

static void test_move_drops_the_source(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    put(m, "k", 5000, "segA", 1);
    uint64_t hi, lo;
    uint32_t n;
    const char *tg[] = {"segC"};
    assert_int_equal(create(m, CA, 1, "k", "segA", tg, 1, 2, &hi, &lo), 0);
    assert_int_equal(start(m, CA, hi, lo, 3, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(end(m, CA, hi, lo, 0, 4), 0);
    assert_string_equal(where(m, "k", 5), "segC");
    cr__master_destroy(m);
}

static void test_failed_and_timed_out_tasks_change_nothing(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    put(m, "k", 100000, "segA", 1);
    uint64_t base = allocated(m), hi, lo;
    uint32_t n;
    int err = 0;
    const char *tg[] = {"segB"};
    /* the copier reports a failure */
    assert_int_equal(create(m, CA, 0, "k", "", tg, 1, 2, &hi, &lo), 0);
    assert_int_equal(start(m, CA, hi, lo, 3, &n), 0);
    assert_int_equal(end(m, CA, hi, lo, CR_E_TRANSFER_FAIL, 4), 0);
    assert_int_equal(query(m, hi, lo, 4, &err), 3); /* FAILED */
    assert_int_equal(err, CR_E_TRANSFER_FAIL);
    assert_string_equal(where(m, "k", 5), "segA");
    /* the copier vanishes: the tick fails the task at its deadline */
    assert_int_equal(create(m, CA, 0, "k", "", tg, 1, 10, &hi, &lo), 0);
    assert_int_equal(start(m, CA, hi, lo, 11, &n), 0);
    cr__master_tick(m, 11 + 59000);
    assert_int_equal(query(m, hi, lo, 11 + 59000, NULL), 1);
    cr__master_tick(m, 11 + 61000);
    assert_int_equal(query(m, hi, lo, 11 + 61000, &err), 3);
    assert_string_equal(where(m, "k", 11 + 61001), "segA");
    assert_int_equal(end(m, CA, hi, lo, 0, 11 + 61002), CR_E_INVALID_PARAMS); /* too late */
    /* every target block comes back once its quarantine ends */
    cr__master_tick(m, 1000000);
    assert_int_equal(allocated(m), base);
    /* the object replaced or removed between create and end */
    assert_int_equal(create(m, CA, 0, "k", "", tg, 1, 1000001, &hi, &lo), 0);
    assert_int_equal(start(m, CA, hi, lo, 1000002, &n), 0);
    assert_int_equal(cr__master_remove(m, "k", 1, 1, 1000003), 0);
    assert_int_equal(end(m, CA, hi, lo, 0, 1000004), 0);
    assert_int_equal(query(m, hi, lo, 1000004, &err), 3);
    assert_int_equal(err, CR_E_OBJECT_NOT_FOUND);
    cr__master_tick(m, 3000000);
    assert_int_equal(allocated(m), 0);
    cr__master_destroy(m);
}

static uint64_t quarantined(cr__master_t *m)
{
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    return st.quarantine_bytes;
}

/* With capabilities on, the copier's WRITE grant over a new replica lives
 * until the task's deadline (START + 60 s): removing the object soon after
 * its copy holds that space until then; without capabilities, not at all. */
static void test_copy_grant_holds_new_replica(void **s)
{
    (void)s;
    const uint64_t T = 1000000;
    for (int caps = 0; caps < 2; caps++) {
        cr__master_t *m = mk();
        if (caps)
            assert_int_equal(cr__master_caps_enable(m), 0);
        put(m, "k", 100000, "segA", 1);
        uint64_t hi, lo;
        uint32_t n;
        const char *tg[] = {"segB"};
        assert_int_equal(create(m, CA, 0, "k", "", tg, 1, T, &hi, &lo), 0);
        assert_int_equal(start(m, CA, hi, lo, T, &n), 0);
        assert_int_equal(n, 1);
        assert_int_equal(end(m, CA, hi, lo, 0, T + 1), 0);
        assert_string_equal(where(m, "k", T + 2), "segA,segB");
        assert_int_equal(cr__master_remove(m, "k", 1, 0, T + 6000), 0); /* the lease ended */
        if (!caps) {
            assert_int_equal(quarantined(m), 0);
        } else {
            assert_true(quarantined(m) >= 200000); /* both replicas */
            cr__master_tick(m, T + 59000);
            assert_true(quarantined(m) >= 200000);
            cr__master_tick(m, T + 62000);
            assert_int_equal(quarantined(m), 0);
        }
        assert_int_equal(allocated(m), 0);
        cr__master_destroy(m);
    }
}

static void test_mooncake_error_cases(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    put(m, "k", 2048, "segA", 1);
    uint64_t hi, lo;
    const char *unk[] = {"unknown_segment_1", "unknown_segment_2"}, *b[] = {"segB"},
               *a[] = {"segA"};
    assert_int_equal(create(m, CA, 0, "none", "", b, 1, 2, &hi, &lo), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(create(m, CA, 1, "none", "segA", b, 1, 2, &hi, &lo), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(create(m, CA, 0, "k", "", unk, 2, 2, &hi, &lo), CR_E_INVALID_PARAMS);
    assert_int_equal(create(m, CA, 0, "k", "", b, 0, 2, &hi, &lo), CR_E_INVALID_PARAMS);
    assert_int_equal(create(m, CA, 1, "k", "unknown_source", b, 1, 2, &hi, &lo),
                     CR_E_INVALID_PARAMS);
    assert_int_equal(create(m, CA, 1, "k", "segA", unk, 1, 2, &hi, &lo), CR_E_INVALID_PARAMS);
    assert_int_equal(create(m, CA, 1, "k", "segA", a, 1, 2, &hi, &lo), CR_E_INVALID_PARAMS);
    assert_int_equal(create(m, CA, 1, "k", "segB", a, 1, 2, &hi, &lo), CR_E_INVALID_PARAMS);
    assert_int_equal(create(m, CA, 2, "k", "", b, 1, 2, &hi, &lo), CR_E_INVALID_PARAMS);
    cr__rpc_client_id_t stranger = {9, 9};
    assert_int_equal(create(m, stranger, 0, "k", "", b, 1, 2, &hi, &lo), CR_E_CLIENT_NOT_FOUND);
    assert_int_equal(query(m, 12345, 678, 2, NULL), CR_E_TASK_NOT_FOUND);
    uint32_t n;
    assert_int_equal(start(m, CA, 12345, 678, 2, &n), CR_E_TASK_NOT_FOUND);
    assert_int_equal(end(m, CA, 12345, 678, 0, 2), CR_E_TASK_NOT_FOUND);
    cr__master_destroy(m);
}

static int clear(cr__master_t *m, const char *key, const char *seg, uint64_t now)
{
    cr__rpc_msg_t req = {.type = CR__RPC_REPLICA_CLEAR, .segment = seg}, rep = {0};
    req.n_items = 1;
    req.items = cr__rpc_msg_alloc(&req, sizeof *req.items);
    req.items[0].key = key;
    req.items[0].key_len = (uint32_t)strlen(key);
    cr__master_handle(m, &req, &rep, now);
    int rc = rep.status ? rep.status : rep.items[0].status;
    cr__rpc_msg_free(&req);
    cr__rpc_msg_free(&rep);
    return rc;
}

static void test_replica_clear_per_segment(void **s)
{
    (void)s;
    cr__master_t *m = mk();
    put(m, "k", 4096, "segA", 1);
    uint64_t hi, lo;
    uint32_t n;
    const char *tg[] = {"segB"};
    assert_int_equal(create(m, CA, 0, "k", "", tg, 1, 2, &hi, &lo), 0);
    assert_int_equal(start(m, CA, hi, lo, 3, &n), 0);
    assert_int_equal(end(m, CA, hi, lo, 0, 4), 0);
    assert_string_equal(where(m, "k", 5), "segA,segB"); /* lease until 5005 */
    assert_int_equal(clear(m, "k", "segA", 100), CR_E_OBJECT_HAS_LEASE);
    assert_int_equal(clear(m, "k", "segC", 6000), CR_E_OBJECT_NOT_FOUND); /* no replica there */
    assert_int_equal(clear(m, "k", "nosuch:1", 6000), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(clear(m, "k", "segA", 6000), 0);
    assert_string_equal(where(m, "k", 6001), "segB");
    assert_int_equal(clear(m, "k", "segB", 20000), 0); /* the last replica: the object goes */
    assert_int_equal(cr__master_exist(m, "k", 1, 20001), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(clear(m, "k", "", 20002), CR_E_OBJECT_NOT_FOUND);
    put(m, "k2", 10, "segC", 30000);
    assert_int_equal(clear(m, "k2", "", 40000), 0);
    assert_int_equal(cr__master_exist(m, "k2", 2, 40001), CR_E_OBJECT_NOT_FOUND);
    cr__master_destroy(m);
}

static void test_wire_roundtrip(void **s)
{
    (void)s;
    cr__rpc_msg_t m = {.type = CR__RPC_RTASK_CREATE, .req_id = 7, .flags = 1, .segment = "src"};
    m.n_items = 2;
    m.items = cr__rpc_msg_alloc(&m, 2 * sizeof *m.items);
    m.items[0].key = "key";
    m.items[0].key_len = 3;
    m.items[1].key = "dst";
    m.items[1].key_len = 3;
    cr__rpc_buf_t b;
    cr__rpc_buf_init(&b);
    assert_int_equal(cr__rpc_encode(&m, &b), 0);
    cr__rpc_hdr_t h;
    assert_int_equal(cr__rpc_decode_hdr(b.data, &h), 0);
    cr__rpc_msg_t d;
    assert_int_equal(cr__rpc_decode(&h, b.data + CR__RPC_HDR_SIZE, b.len - CR__RPC_HDR_SIZE, &d), 0);
    assert_int_equal(d.type, CR__RPC_RTASK_CREATE);
    assert_int_equal(d.flags, 1);
    assert_string_equal(d.segment, "src");
    assert_int_equal(d.n_items, 2);
    assert_string_equal(d.items[1].key, "dst");
    /* truncated: refused */
    assert_int_equal(cr__rpc_decode(&h, b.data + CR__RPC_HDR_SIZE, b.len - CR__RPC_HDR_SIZE - 1, &d),
                     -EBADMSG);
    assert_string_equal(cr__rpc_type_name(CR__RPC_REPLICA_CLEAR | CR__RPC_REPLY), "replica_clear");
    cr__rpc_msg_free(&d);
    cr__rpc_msg_free(&m);
    cr__rpc_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_adds_replicas_at_end_only),
        cmocka_unit_test(test_copy_target_held_across_failover),
        cmocka_unit_test(test_copy_target_held_when_segment_drops),
        cmocka_unit_test(test_move_drops_the_source),
        cmocka_unit_test(test_failed_and_timed_out_tasks_change_nothing),
        cmocka_unit_test(test_copy_grant_holds_new_replica),
        cmocka_unit_test(test_mooncake_error_cases),
        cmocka_unit_test(test_replica_clear_per_segment),
        cmocka_unit_test(test_wire_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
