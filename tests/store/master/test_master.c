/* Master state machine, driven with an explicit clock: put lifecycle,
 * immutability, leases vs remove/force, distinct-segment replicas,
 * striping, client ttl expiry, put timeout reclaim, quarantine (stale
 * reads), eviction at the watermark / on allocation failure skipping
 * leased, hard-pinned and incomplete objects with soft-pinned last, bad
 * input, rpc dispatch, metrics and admin JSON. */
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
#include "store/master/master_priv.h" /* held_ranges_max (the fallback test) */

#define KiB 1024ull
#define MiB (1024ull * 1024)

static const cr__rpc_client_id_t CA = {1, 1}, CB = {2, 2}, CC = {3, 3};

static cr__master_t *mk(void (*tweak)(cr__master_cfg_t *))
{
    cr__master_cfg_t c;
    cr__master_cfg_default(&c);
    c.lease_ttl_ms = 5000;
    c.client_ttl_ms = 10000;
    c.put_timeout_ms = 30000;
    c.min_stripe = 64 * KiB;
    if (tweak)
        tweak(&c);
    cr__master_t *m;
    assert_int_equal(cr__master_create(&c, &m), 0);
    return m;
}

/* put_start (+ put_end when end) with cfg; returns status; *ver gets the
 * version, *addr the address of its first replica's first shard */
static int put_cfg(cr__master_t *m, const char *key, uint64_t size, const cr__rpc_repl_cfg_t *cfg,
                   uint64_t now, int end, uint64_t *ver, uint64_t *addr)
{
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    int rc = cr__master_put_start(m, key, strlen(key), size, cfg, now, &msg, &it);
    if (rc == 0) {
        if (ver)
            *ver = it.version;
        if (addr)
            *addr = it.replicas[0].shards[0].addr;
        if (end)
            rc = cr__master_put_end(m, key, strlen(key), it.version, now);
    }
    cr__rpc_msg_free(&msg);
    return rc;
}

/* put_start + put_end; returns status; *ver gets the version */
static int put(cr__master_t *m, const char *key, uint64_t size, uint32_t nrep, uint32_t flags,
               uint64_t now, uint64_t *ver, int end)
{
    cr__rpc_repl_cfg_t cfg = {.replica_num = nrep, .flags = flags};
    return put_cfg(m, key, size, &cfg, now, end, ver, NULL);
}

/* tick with every test client alive */
static void tick_alive(cr__master_t *m, uint64_t now)
{
    uint32_t f;
    cr__master_ping(m, CA, now, &f);
    cr__master_ping(m, CB, now, &f);
    cr__master_ping(m, CC, now, &f);
    cr__master_tick(m, now);
}

static int exist(cr__master_t *m, const char *key, uint64_t now)
{
    return cr__master_exist(m, key, strlen(key), now);
}

/* get replicas; copies replica 0 shard 0 address and the version */
static int get(cr__master_t *m, const char *key, uint64_t now, uint64_t *addr, uint64_t *ver,
               uint32_t *nrep)
{
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    int rc = cr__master_get_replicas(m, key, strlen(key), now, &msg, &it);
    if (rc == 0) {
        if (addr)
            *addr = it.replicas[0].shards[0].addr;
        if (ver)
            *ver = it.version;
        if (nrep)
            *nrep = it.n_replicas;
    }
    cr__rpc_msg_free(&msg);
    return rc;
}

static void cap_tweak(cr__master_cfg_t *c)
{
    c->max_objects = 3;
    c->max_key_bytes = 10;
}

/* issue 11, attack 5: master metadata cannot grow without bound; the
 * refusal is a clear error and removing objects gives the room back */
static void test_metadata_cap(void **s)
{
    (void)s;
    cr__master_t *m = mk(cap_tweak);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x100000, 4 * MiB, 0), 0);
    assert_int_equal(put(m, "aaaa", 100, 1, 0, 1, NULL, 1), 0);
    assert_int_equal(put(m, "bbbb", 100, 1, 0, 1, NULL, 1), 0);
    /* 8 key bytes used: a 3-byte key would pass 10 */
    assert_int_equal(put(m, "ccc", 100, 1, 0, 1, NULL, 1), CR_E_KEYS_ULTRA_LIMIT);
    assert_int_equal(put(m, "c", 100, 1, 0, 1, NULL, 1), 0);
    /* 3 objects: a fourth is refused whatever its key */
    assert_int_equal(put(m, "d", 100, 1, 0, 1, NULL, 1), CR_E_KEYS_ULTRA_LIMIT);
    assert_int_equal(cr__master_remove(m, "aaaa", 4, 0, 2), 0);
    assert_int_equal(put(m, "d", 100, 1, 0, 2, NULL, 1), 0);
    cr__master_destroy(m);
}

static void test_put_lifecycle(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x100000, 4 * MiB, 0), 0);
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1};
    assert_int_equal(cr__master_put_start(m, "k", 1, 1000, &cfg, 10, &msg, &it), 0);
    assert_int_equal(it.n_replicas, 1);
    assert_int_equal(it.replicas[0].n_shards, 1);
    assert_string_equal(it.replicas[0].shards[0].segment, "segA");
    uint64_t addr = it.replicas[0].shards[0].addr;
    assert_true(addr >= 0x100000 && addr + 1000 <= 0x100000 + 4 * MiB);
    assert_int_equal(it.replicas[0].shards[0].len, 1000);
    assert_int_equal(it.lease_ms, 30000); /* put deadline */
    uint64_t ver = it.version;
    cr__rpc_msg_free(&msg);
    /* pending: invisible */
    assert_int_equal(exist(m, "k", 11), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(get(m, "k", 11, NULL, NULL, NULL), CR_E_OBJECT_NOT_FOUND);
    uint64_t size;
    assert_int_equal(cr__master_get_size(m, "k", 1, 11, &size), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(cr__master_remove(m, "k", 1, 1, 11), CR_E_OBJECT_NOT_FOUND);
    /* wrong version cannot end it */
    assert_int_equal(cr__master_put_end(m, "k", 1, ver + 1, 12), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(cr__master_put_end(m, "k", 1, ver, 12), 0);
    assert_int_equal(cr__master_put_end(m, "k", 1, ver, 12), 0); /* idempotent */
    assert_int_equal(exist(m, "k", 13), 0);
    assert_int_equal(cr__master_get_size(m, "k", 1, 13, &size), 0);
    assert_int_equal(size, 1000);
    uint64_t gaddr, gver;
    assert_int_equal(get(m, "k", 13, &gaddr, &gver, NULL), 0);
    assert_int_equal(gaddr, addr);
    assert_int_equal(gver, ver);
    /* revoke of a complete object is refused */
    assert_int_equal(cr__master_put_revoke(m, "k", 1, ver, 14), CR_E_INVALID_PARAMS);
    /* revoke of a pending one drops it */
    uint64_t v2 = 0; /* written by put() on success (gcc -O2 cannot see it) */
    assert_int_equal(put(m, "r", 5000, 1, 0, 20, &v2, 0), 0);
    assert_int_equal(cr__master_put_revoke(m, "r", 1, v2 + 7, 21), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(cr__master_put_revoke(m, "r", 1, v2, 21), 0);
    assert_int_equal(cr__master_put_end(m, "r", 1, v2, 22), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(put(m, "r", 5000, 1, 0, 23, NULL, 1), 0); /* key reusable */
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.keys, 2);
    assert_int_equal(st.pending_puts, 0);
    assert_int_equal(st.capacity_bytes, 4 * MiB);
    /* granule-rounded; the revoked put's space stays quarantined for a put
     * timeout (a write the client gave up on may still be landing there) */
    assert_int_equal(st.allocated_bytes, 1024 + 5056 + 5056);
    tick_alive(m, 21 + 30000 + 1);
    cr__master_stats(m, &st);
    assert_int_equal(st.allocated_bytes, 1024 + 5056);
    cr__master_destroy(m);
}

static void test_immutable(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0, 4 * MiB, 0), 0);
    assert_int_equal(put(m, "k", 100, 1, 0, 1, NULL, 1), 0);
    assert_int_equal(put(m, "k", 100, 1, 0, 2, NULL, 1), CR_E_OBJECT_ALREADY_EXISTS);
    assert_int_equal(put(m, "p", 100, 1, 0, 3, NULL, 0), 0); /* pending */
    assert_int_equal(put(m, "p", 100, 1, 0, 4, NULL, 0), CR_E_OBJECT_ALREADY_EXISTS);
    cr__master_destroy(m);
}

static void test_lease_vs_remove(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0, 4 * MiB, 0), 0);
    assert_int_equal(put(m, "k", 100, 1, 0, 0, NULL, 1), 0);
    assert_int_equal(get(m, "k", 1000, NULL, NULL, NULL), 0); /* lease until 6000 */
    assert_int_equal(cr__master_remove(m, "k", 1, 0, 2000), CR_E_OBJECT_HAS_LEASE);
    assert_int_equal(cr__master_remove(m, "k", 1, 0, 5999), CR_E_OBJECT_HAS_LEASE);
    assert_int_equal(exist(m, "k", 5999), 0);
    assert_int_equal(cr__master_remove(m, "k", 1, 0, 6000), 0); /* expired */
    assert_int_equal(exist(m, "k", 6001), CR_E_OBJECT_NOT_FOUND);
    /* force removes a leased object */
    assert_int_equal(put(m, "f", 100, 1, 0, 7000, NULL, 1), 0);
    assert_int_equal(get(m, "f", 7000, NULL, NULL, NULL), 0);
    assert_int_equal(cr__master_remove(m, "f", 1, 0, 7001), CR_E_OBJECT_HAS_LEASE);
    assert_int_equal(cr__master_remove(m, "f", 1, 1, 7001), 0);
    assert_int_equal(cr__master_remove(m, "f", 1, 1, 7001), CR_E_OBJECT_NOT_FOUND);
    /* remove_all skips leased objects unless forced */
    assert_int_equal(put(m, "a", 100, 1, 0, 8000, NULL, 1), 0);
    assert_int_equal(put(m, "b", 100, 1, 0, 8000, NULL, 1), 0);
    assert_int_equal(put(m, "c", 100, 1, 0, 8000, NULL, 0), 0); /* pending: not touched */
    assert_int_equal(get(m, "a", 8000, NULL, NULL, NULL), 0);
    uint64_t n;
    assert_int_equal(cr__master_remove_all(m, 0, 8001, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(exist(m, "a", 8001), 0);
    assert_int_equal(exist(m, "b", 8001), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(cr__master_remove_all(m, 1, 8002, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(exist(m, "a", 8002), CR_E_OBJECT_NOT_FOUND);
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.pending_puts, 1);
    cr__master_destroy(m);
}

static void test_replicas_distinct_and_preferred(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 4 * MiB, 0), 0);
    assert_int_equal(cr__master_mount(m, CB, "segB", 0x20000000, 4 * MiB, 0), 0);
    assert_int_equal(cr__master_mount(m, CC, "segC", 0x30000000, 4 * MiB, 0), 0);
    for (int k = 0; k < 20; k++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", k);
        cr__rpc_msg_t msg = {0};
        cr__rpc_item_t it = {0};
        cr__rpc_repl_cfg_t cfg = {.replica_num = 3};
        assert_int_equal(cr__master_put_start(m, key, strlen(key), 1000, &cfg, 1, &msg, &it), 0);
        assert_int_equal(it.n_replicas, 3);
        for (int a = 0; a < 3; a++)
            for (int b = a + 1; b < 3; b++)
                assert_string_not_equal(it.replicas[a].shards[0].segment,
                                        it.replicas[b].shards[0].segment);
        assert_int_not_equal(it.replicas[0].replica_id, it.replicas[1].replica_id);
        cr__rpc_msg_free(&msg);
    }
    /* 4 replicas on 3 segments: impossible */
    assert_int_equal(put(m, "four", 1000, 4, 0, 2, NULL, 1), CR_E_NO_AVAILABLE_HANDLE);
    assert_int_equal(put(m, "nine", 1000, 9, 0, 2, NULL, 1), CR_E_INVALID_PARAMS);
    /* preferred segment first; an unknown preferred name is skipped */
    const char *pref[] = {"nosuch", "segC"};
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1, .n_preferred = 2, .preferred = pref};
    for (int k = 0; k < 5; k++) {
        char key[16];
        snprintf(key, sizeof key, "p%d", k);
        cr__rpc_msg_t msg = {0};
        cr__rpc_item_t it = {0};
        assert_int_equal(cr__master_put_start(m, key, strlen(key), 1000, &cfg, 3, &msg, &it), 0);
        assert_string_equal(it.replicas[0].shards[0].segment, "segC");
        cr__rpc_msg_free(&msg);
    }
    cr__master_destroy(m);
}

static void test_striping(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 1 * MiB, 0), 0);
    assert_int_equal(cr__master_mount(m, CB, "segB", 0x20000000, 1 * MiB, 0), 0);
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1};
    uint64_t size = 1536 * KiB;
    assert_int_equal(cr__master_put_start(m, "big", 3, size, &cfg, 0, &msg, &it), 0);
    assert_int_equal(it.n_replicas, 1);
    assert_int_equal(it.replicas[0].n_shards, 2);
    uint64_t sum = 0;
    for (uint32_t k = 0; k < 2; k++)
        sum += it.replicas[0].shards[k].len;
    assert_int_equal(sum, size);
    assert_string_not_equal(it.replicas[0].shards[0].segment, it.replicas[0].shards[1].segment);
    assert_int_equal(cr__master_put_end(m, "big", 3, it.version, 1), 0);
    cr__rpc_msg_free(&msg);
    /* get returns the same striped layout */
    memset(&it, 0, sizeof it);
    assert_int_equal(cr__master_get_replicas(m, "big", 3, 2, &msg, &it), 0);
    assert_int_equal(it.replicas[0].n_shards, 2);
    assert_int_equal(it.replicas[0].shards[0].len + it.replicas[0].shards[1].len, size);
    cr__rpc_msg_free(&msg);
    /* more than the whole pool: no space */
    assert_int_equal(put(m, "huge", 3 * MiB, 1, 0, 3, NULL, 1), CR_E_NO_AVAILABLE_HANDLE);
    cr__master_destroy(m);
}

/* Regression (issue 10): a master stopped for 3x the client ttl expired
 * every client in the same millisecond on resume. Time in which the master
 * did not run is not counted against heartbeats; a client that stays
 * silent once the master runs again still expires. */
static void test_master_stall_expires_nobody(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    uint32_t f;
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 4 * MiB, 0), 0);
    assert_int_equal(cr__master_mount(m, CB, "segB", 0x20000000, 4 * MiB, 0), 0);
    assert_int_equal(put(m, "onA", 1000, 1, 0, 1, NULL, 1), 0);
    for (uint64_t t = 100; t <= 900; t += 100)
        tick_alive(m, t);
    /* the master stops for 30 s (3 ttls); its ticker runs first on resume */
    cr__master_tick(m, 30900);
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.segments, 2);
    assert_int_equal(st.counters[CR__MM_clients_expired_total], 0);
    assert_int_equal(st.counters[CR__MM_stalls_total], 1);
    /* heartbeats queued during the stop arrive: both are alive */
    assert_int_equal(cr__master_ping(m, CA, 30901, &f), 0);
    assert_int_equal(f, 0);
    /* B never pings again: it expires after the ttl of running time */
    uint64_t t = 30900;
    while (st.segments == 2 && t < 30900 + 20000) {
        t += 100;
        cr__master_ping(m, CA, t, &f);
        cr__master_tick(m, t);
        cr__master_stats(m, &st);
    }
    assert_int_equal(st.segments, 1);
    assert_true(t - 30900 >= 9000 && t - 30900 <= 11000);
    cr__master_destroy(m);
}

static void test_client_ttl_expiry(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    uint32_t flags;
    assert_int_equal(cr__master_ping(m, CA, 0, &flags), 0);
    assert_int_equal(flags, CR__RPC_F_NEED_REMOUNT); /* first contact */
    assert_int_equal(cr__master_ping(m, CA, 1, &flags), 0);
    assert_int_equal(flags, 0);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 4 * MiB, 1), 0);
    assert_int_equal(cr__master_mount(m, CB, "segB", 0x20000000, 4 * MiB, 1), 0);
    /* "two" has replicas on A and B; "onA" only on A */
    assert_int_equal(put(m, "two", 1000, 2, 0, 2, NULL, 1), 0);
    const char *pa[] = {"segA"};
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1, .n_preferred = 1, .preferred = pa};
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    assert_int_equal(cr__master_put_start(m, "onA", 3, 1000, &cfg, 2, &msg, &it), 0);
    assert_int_equal(cr__master_put_end(m, "onA", 3, it.version, 2), 0);
    cr__rpc_msg_free(&msg);
    /* find the replica id of "two" that lives on segA */
    memset(&it, 0, sizeof it);
    assert_int_equal(cr__master_get_replicas(m, "two", 3, 3, &msg, &it), 0);
    uint64_t ver = it.version, rid_a = 0, rid_b = 0;
    for (uint32_t r = 0; r < it.n_replicas; r++) {
        if (!strcmp(it.replicas[r].shards[0].segment, "segA"))
            rid_a = it.replicas[r].replica_id;
        else
            rid_b = it.replicas[r].replica_id;
    }
    cr__rpc_msg_free(&msg);
    assert_int_equal(cr__master_validate(m, "two", 3, ver, rid_a, 4), 0);
    /* B keeps pinging, A goes silent */
    for (uint64_t t = 100; t <= 10000; t += 100) {
        if (t % 1000 == 0)
            assert_int_equal(cr__master_ping(m, CB, t, &flags), 0);
        cr__master_tick(m, t);
    }
    assert_int_equal(exist(m, "onA", 10001), 0); /* silent for exactly the ttl: kept */
    assert_int_equal(cr__master_ping(m, CB, 11000, &flags), 0);
    cr__master_tick(m, 11002);
    assert_int_equal(exist(m, "onA", 12002), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(exist(m, "two", 12002), 0);
    uint32_t nrep;
    assert_int_equal(get(m, "two", 12002, NULL, NULL, &nrep), 0);
    assert_int_equal(nrep, 1);
    /* the dropped replica no longer validates; the other still does */
    assert_int_equal(cr__master_validate(m, "two", 3, ver, rid_a, 12003), CR_E_REPLICA_IS_GONE);
    assert_int_equal(cr__master_validate(m, "two", 3, ver, rid_b, 12003), 0);
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.counters[CR__MM_clients_expired_total], 1);
    assert_int_equal(st.counters[CR__MM_objects_lost_total], 1);
    /* A comes back: told to remount, remounts, works again */
    assert_int_equal(cr__master_ping(m, CA, 13000, &flags), 0);
    assert_int_equal(flags, CR__RPC_F_NEED_REMOUNT);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 4 * MiB, 13000), 0);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 4 * MiB, 13001), 0); /* again */
    assert_int_equal(cr__master_mount(m, CB, "segA", 0x10000000, 4 * MiB, 13001),
                     CR_E_SEGMENT_ALREADY_EXISTS);
    assert_int_equal(put(m, "onA", 1000, 2, 0, 13002, NULL, 1), 0);
    /* explicit unmount drops replicas the same way */
    assert_int_equal(cr__master_unmount(m, CB, "segA", 13003), CR_E_SEGMENT_NOT_FOUND);
    assert_int_equal(cr__master_unmount(m, CA, "segA", 13003), 0);
    assert_int_equal(cr__master_unmount(m, CA, "segA", 13003), CR_E_SEGMENT_NOT_FOUND);
    assert_int_equal(exist(m, "onA", 13004), 0); /* still on B */
    cr__master_destroy(m);
}

static void test_put_timeout_reclaim(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0, 64 * KiB, 0), 0);
    uint64_t ver = 0;
    assert_int_equal(put(m, "dead", 48 * KiB, 1, 0, 0, &ver, 0), 0); /* writer dies */
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.allocated_bytes, 48 * KiB);
    tick_alive(m, 29999);
    assert_int_equal(put(m, "dead", 100, 1, 0, 29999, NULL, 0), CR_E_OBJECT_ALREADY_EXISTS);
    tick_alive(m, 30000); /* deadline: reclaimed into quarantine */
    assert_int_equal(cr__master_put_end(m, "dead", 4, ver, 30001), CR_E_OBJECT_NOT_FOUND);
    cr__master_stats(m, &st);
    assert_int_equal(st.pending_puts, 0);
    assert_int_equal(st.counters[CR__MM_puts_timed_out_total], 1);
    assert_int_equal(st.quarantine_bytes, 48 * KiB);
    /* the late writer may still write until deadline + put timeout: the
     * space is not reused before */
    assert_int_equal(put(m, "new", 48 * KiB, 1, 0, 59999, NULL, 1), CR_E_NO_AVAILABLE_HANDLE);
    tick_alive(m, 60000);
    cr__master_stats(m, &st);
    assert_int_equal(st.quarantine_bytes, 0);
    assert_int_equal(st.allocated_bytes, 0);
    assert_int_equal(put(m, "new", 48 * KiB, 1, 0, 60001, NULL, 1), 0);
    /* a PutStart of a key whose put passed its deadline reclaims it inline */
    assert_int_equal(put(m, "slow", 1000, 1, 0, 60002, NULL, 0), 0);
    assert_int_equal(put(m, "slow", 1000, 1, 0, 90003, NULL, 1), 0);
    cr__master_destroy(m);
}

/* Quarantine entries are freed when each one is due, whatever the order
 * they came in: a lapsed put's space (held until deadline + put timeout)
 * quarantined first does not keep a leased object's space, due much
 * earlier, out of reuse. (In arrival order the first entry blocked the
 * rest: the pool looked full and the master evicted live objects.) */
static void test_quarantine_frees_due_entries_out_of_order(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0, 64 * KiB, 0), 0);
    assert_int_equal(put(m, "dead", 16 * KiB, 1, 0, 0, NULL, 0), 0); /* writer dies */
    tick_alive(m, 30000); /* reclaimed: quarantined until 60000 */
    assert_int_equal(put(m, "k", 32 * KiB, 1, 0, 30001, NULL, 1), 0);
    assert_int_equal(get(m, "k", 30002, NULL, NULL, NULL), 0); /* lease to 35002 */
    assert_int_equal(cr__master_remove(m, "k", 1, 1, 30003), 0); /* quarantined to 35002 */
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.quarantine_bytes, 48 * KiB);
    assert_int_equal(put(m, "y", 32 * KiB, 1, 0, 35001, NULL, 1), CR_E_NO_AVAILABLE_HANDLE);
    /* due: freed by a placement that needs it, before the earlier entry */
    assert_int_equal(put(m, "y", 32 * KiB, 1, 0, 35003, NULL, 1), 0);
    cr__master_stats(m, &st);
    assert_int_equal(st.quarantine_bytes, 16 * KiB);
    assert_int_equal(st.counters[CR__MM_evictions_total], 0);
    /* and by the tick: entries due in an order unlike their arrival */
    assert_int_equal(cr__master_remove(m, "y", 1, 1, 35004), 0); /* no lease: freed now */
    static const int order[12] = {7, 2, 10, 0, 5, 11, 3, 8, 1, 9, 4, 6};
    char key[12][8];
    for (int i = 0; i < 12; i++) {
        snprintf(key[i], sizeof key[i], "q%d", i);
        assert_int_equal(put(m, key[i], 2 * KiB, 1, 0, 35010 + (uint64_t)i, NULL, 1), 0);
    }
    for (int j = 0; j < 12; j++) /* q<order[j]>'s lease ends at 40100 + 300 j */
        assert_int_equal(get(m, key[order[j]], 35100 + 300 * (uint64_t)j, NULL, NULL, NULL), 0);
    for (int i = 0; i < 12; i++) /* quarantined in key order */
        assert_int_equal(cr__master_remove(m, key[i], strlen(key[i]), 1, 39000), 0);
    tick_alive(m, 41000); /* due: the leases of order[0..3] */
    cr__master_stats(m, &st);
    assert_int_equal(st.quarantine_bytes, 16 * KiB + 8 * 2 * KiB);
    tick_alive(m, 46000); /* every lease has ended; "dead" is still held */
    cr__master_stats(m, &st);
    assert_int_equal(st.quarantine_bytes, 16 * KiB);
    tick_alive(m, 60000);
    cr__master_stats(m, &st);
    assert_int_equal(st.quarantine_bytes, 0);
    assert_int_equal(st.allocated_bytes, 0);
    cr__master_destroy(m);
}

/* The stale-read defence at the master: space of a force-removed leased
 * object is not reused until the lease expires, and the old version never
 * validates again. */
static void test_quarantine_and_validate(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x1000000, 64 * KiB, 0), 0);
    uint64_t a1, v1;
    assert_int_equal(put(m, "k", 32 * KiB, 1, 0, 0, NULL, 1), 0);
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    assert_int_equal(cr__master_get_replicas(m, "k", 1, 100, &msg, &it), 0); /* lease to 5100 */
    a1 = it.replicas[0].shards[0].addr;
    v1 = it.version;
    uint64_t rid = it.replicas[0].replica_id;
    cr__rpc_msg_free(&msg);
    assert_int_equal(cr__master_remove(m, "k", 1, 1, 200), 0);
    assert_int_equal(cr__master_validate(m, "k", 1, v1, rid, 201), CR_E_OBJECT_NOT_FOUND);
    /* the new put of the same key cannot land on the quarantined range */
    uint64_t a2, v2;
    memset(&it, 0, sizeof it);
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1};
    assert_int_equal(cr__master_put_start(m, "k", 1, 32 * KiB, &cfg, 300, &msg, &it), 0);
    a2 = it.replicas[0].shards[0].addr;
    v2 = it.version;
    cr__rpc_msg_free(&msg);
    assert_true(a2 + 32 * KiB <= a1 || a1 + 32 * KiB <= a2);
    assert_int_not_equal(v1, v2);
    assert_int_equal(cr__master_put_end(m, "k", 1, v2, 301), 0);
    /* pool is full now (32K quarantined + 32K new, leased so eviction skips it) */
    assert_int_equal(get(m, "k", 301, NULL, NULL, NULL), 0);
    assert_int_equal(put(m, "x", 32 * KiB, 1, 0, 302, NULL, 1), CR_E_NO_AVAILABLE_HANDLE);
    tick_alive(m, 5100); /* lease expired: quarantine released */
    assert_int_equal(put(m, "x", 32 * KiB, 1, 0, 5101, NULL, 1), 0);
    uint64_t ax;
    assert_int_equal(get(m, "x", 5102, &ax, NULL, NULL), 0);
    assert_int_equal(ax, a1); /* reused only now */
    /* the stale reader's validation still fails: its version is gone */
    assert_int_equal(cr__master_validate(m, "k", 1, v1, rid, 5103), CR_E_OBJECT_NOT_FOUND);
    cr__master_destroy(m);
}

/* PutStart (+ PutEnd when end), hard-pinned (never evicted to make room);
 * *addr: its replica's address. */
static int put_at(cr__master_t *m, const char *key, uint64_t size, uint64_t now, int end,
                  uint64_t *addr)
{
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1, .flags = CR__RPC_CFG_HARD_PIN};
    return put_cfg(m, key, size, &cfg, now, end, NULL, addr);
}

/* Puts size-byte hard-pinned objects tag0, tag1, ... until the pool is
 * full; none may overlap [lo[i], lo[i] + len) for i < n_lo. Returns how
 * many fit; *first: the address of the first. */
static int fill_avoiding(cr__master_t *m, const char *tag, uint64_t size, uint64_t now,
                         const uint64_t *lo, int n_lo, uint64_t len, uint64_t *first)
{
    for (int i = 0; i < 4096; i++) {
        char k[32];
        uint64_t a = 0;
        snprintf(k, sizeof k, "%s%d", tag, i);
        int rc = put_at(m, k, size, now, 1, &a);
        if (rc) {
            assert_int_equal(rc, CR_E_NO_AVAILABLE_HANDLE);
            return i;
        }
        if (i == 0 && first)
            *first = a;
        for (int j = 0; j < n_lo; j++)
            if (a + size > lo[j] && a < lo[j] + len)
                fail_msg("%s at %#llx overlaps a held range [%#llx, +%llu)", k,
                         (unsigned long long)a, (unsigned long long)lo[j],
                         (unsigned long long)len);
    }
    fail_msg("%s: the pool never filled", tag);
    return -1;
}

/* A segment dropped while a reader held a lease on one of its replicas,
 * then mounted again under the same name (same memory: a partitioned
 * client that comes back): the leased block is not reused before the lease
 * expires, the rest of the segment is usable at once. */
static void test_remount_hold(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    uint64_t ak = 0, ax = 0;
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000, 1 * MiB, 0), 0);
    assert_int_equal(put_at(m, "k", 1000, 0, 1, &ak), 0);
    assert_int_equal(get(m, "k", 100, NULL, NULL, NULL), 0); /* lease until 5100 */
    assert_int_equal(cr__master_unmount(m, CA, "segA", 200), 0);
    assert_int_equal(exist(m, "k", 201), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000, 1 * MiB, 300), 0);
    assert_int_equal(fill_avoiding(m, "a", 1024, 400, &ak, 1, 1024, NULL), 1023);
    tick_alive(m, 5100);
    assert_int_equal(put_at(m, "x", 1000, 5100, 1, &ax), 0);
    assert_int_equal(ax, ak); /* the lease is over: its block is free again */
    /* no lease at drop time: nothing held */
    assert_int_equal(cr__master_unmount(m, CA, "segA", 6000), 0);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000, 1 * MiB, 6001), 0);
    assert_int_equal(fill_avoiding(m, "b", 1024, 6002, NULL, 0, 0, NULL), 1024);
    cr__master_destroy(m);
}

/* The held ranges of a dropped segment keep only the same memory waiting:
 * another client whose segment merely got the same name (its Transfer
 * Engine reused the host:port) and lies elsewhere allocates anywhere at
 * once; one whose range overlaps the dropped one gets everything but the
 * held block, at its address in the new range. */
static void test_remount_hold_other_client(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    uint64_t ak = 0, ay = 0;
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x100000, 1 * MiB, 0), 0);
    assert_int_equal(put_at(m, "k", 1000, 0, 1, &ak), 0);
    assert_int_equal(get(m, "k", 100, NULL, NULL, NULL), 0); /* lease until 5100 */
    assert_int_equal(cr__master_unmount(m, CA, "segA", 200), 0);
    /* another client, disjoint memory: all of it usable at once */
    assert_int_equal(cr__master_mount(m, CB, "segA", 0x40000000, 1 * MiB, 300), 0);
    assert_int_equal(fill_avoiding(m, "b", 64 * KiB, 400, NULL, 0, 0, NULL), 16);
    assert_int_equal(cr__master_unmount(m, CB, "segA", 500), 0); /* nothing leased */
    /* another client over a range that holds the leased block in its middle */
    assert_int_equal(cr__master_mount(m, CC, "segA", 0x100000 - 512 * KiB, 1 * MiB, 600), 0);
    assert_int_equal(fill_avoiding(m, "c", 1024, 700, &ak, 1, 1024, NULL), 1023);
    tick_alive(m, 5100);
    assert_int_equal(put_at(m, "y", 1000, 5100, 1, &ay), 0);
    assert_int_equal(ay, ak);
    cr__master_destroy(m);
}

/* An outside drill: a node silent past the client ttl (a 15 s network
 * cut) comes back with the same memory. Before, its remounted segment
 * took no allocation for up to two put timeouts (every put of a one-node
 * cluster got NO_AVAILABLE_HANDLE); now only the blocks a stale reader (a
 * lease) or writer (a pending put) may still touch wait, each until its
 * own time. */
static void test_expired_node_remount_allocates_at_once(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    uint32_t f;
    uint64_t al = 0, ap = 0, first = 0;
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000, 1 * MiB, 0), 0);
    assert_int_equal(put_at(m, "L", 256 * KiB, 0, 1, &al), 0);
    assert_int_equal(put_at(m, "P", 256 * KiB, 0, 0, &ap), 0); /* writer until 30000 (+30000) */
    for (uint64_t t = 100; t <= 10100; t += 100) { /* CA silent */
        if (t == 9000)
            assert_int_equal(get(m, "L", t, NULL, NULL, NULL), 0); /* lease until 14000 */
        cr__master_tick(m, t);
    }
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.counters[CR__MM_clients_expired_total], 1);
    assert_int_equal(st.segments, 0);
    assert_int_equal(exist(m, "L", 10101), CR_E_OBJECT_NOT_FOUND);
    /* back at once with the same memory */
    assert_int_equal(cr__master_ping(m, CA, 10200, &f), 0);
    assert_int_equal(f, CR__RPC_F_NEED_REMOUNT);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000, 1 * MiB, 10200), 0);
    const uint64_t held[2] = {al, ap};
    assert_int_equal(fill_avoiding(m, "n", 64 * KiB, 10300, held, 2, 256 * KiB, &first), 8);
    /* the lease is over: L's block is allocatable again, P's is not */
    tick_alive(m, 14000);
    assert_int_equal(fill_avoiding(m, "o", 64 * KiB, 14000, &ap, 1, 256 * KiB, &first), 4);
    assert_int_equal(first, al);
    /* the pending put's writer can no longer write: all of it is back */
    tick_alive(m, 59999);
    assert_int_equal(fill_avoiding(m, "p", 64 * KiB, 59999, NULL, 0, 0, NULL), 0);
    tick_alive(m, 60000);
    assert_int_equal(fill_avoiding(m, "q", 64 * KiB, 60000, NULL, 0, 0, &first), 4);
    assert_int_equal(first, ap);
    cr__master_destroy(m);
}

/* When the held ranges cannot be kept (more than the bound), the whole
 * segment waits for the latest of them, as before ranges were kept. */
static void test_remount_hold_whole_fallback(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    m->held_ranges_max = 1;
    uint64_t a = 0;
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000, 1 * MiB, 0), 0);
    assert_int_equal(put_at(m, "L", 1000, 0, 1, &a), 0);
    assert_int_equal(get(m, "L", 100, NULL, NULL, NULL), 0); /* lease until 5100 */
    assert_int_equal(put_at(m, "P", 1000, 100, 0, &a), 0);   /* writer until 30100 (+30000) */
    assert_int_equal(cr__master_unmount(m, CA, "segA", 200), 0);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000, 1 * MiB, 300), 0);
    assert_int_equal(put_at(m, "x", 1000, 400, 1, &a), CR_E_NO_AVAILABLE_HANDLE);
    tick_alive(m, 60099);
    assert_int_equal(put_at(m, "x", 1000, 60099, 1, &a), CR_E_NO_AVAILABLE_HANDLE);
    tick_alive(m, 60100);
    assert_int_equal(put_at(m, "x", 1000, 60100, 1, &a), 0);
    cr__master_destroy(m);
}

static void wm_tweak(cr__master_cfg_t *c)
{
    c->high_watermark = 0.90;
    c->eviction_ratio = 0.05;
}

static void test_eviction_watermark(void **s)
{
    (void)s;
    cr__master_t *m = mk(wm_tweak);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0, 1 * MiB, 0), 0);
    /* 28 x 32 KiB = 87.5%: under the watermark */
    for (int i = 0; i < 28; i++) {
        char key[16];
        snprintf(key, sizeof key, "o%02d", i);
        assert_int_equal(put(m, key, 32 * KiB, 1, 0, (uint64_t)i, NULL, 1), 0);
    }
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.counters[CR__MM_evictions_total], 0);
    /* the 29th passes 90%: one step frees >= 5% (2 objects), oldest first */
    assert_int_equal(put(m, "o28", 32 * KiB, 1, 0, 100, NULL, 1), 0);
    cr__master_stats(m, &st);
    assert_int_equal(st.counters[CR__MM_evictions_total], 2);
    assert_int_equal(exist(m, "o00", 101), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(exist(m, "o01", 101), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(exist(m, "o02", 101), 0);
    assert_int_equal(exist(m, "o28", 101), 0); /* a pending put is never evicted */
    assert_true(st.allocated_bytes <= (uint64_t)(0.9 * MiB));
    /* a get makes an object recent: o02 survives the next step, o03 goes */
    assert_int_equal(get(m, "o02", 200, NULL, NULL, NULL), 0);
    assert_int_equal(cr__master_evict(m, 1, 10000), 2);
    assert_int_equal(exist(m, "o02", 10001), 0);
    assert_int_equal(exist(m, "o03", 10001), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(exist(m, "o04", 10001), CR_E_OBJECT_NOT_FOUND);
    cr__master_destroy(m);
}

static void test_eviction_skips(void **s)
{
    (void)s;
    cr__master_t *m = mk(wm_tweak);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0, 1 * MiB, 0), 0);
    /* LRU order (oldest first): L(leased) H(hard) S(soft) N1 N2; P pending */
    assert_int_equal(put(m, "L", 32 * KiB, 1, 0, 0, NULL, 1), 0);
    assert_int_equal(get(m, "L", 0, NULL, NULL, NULL), 0); /* lease until 5000 */
    assert_int_equal(put(m, "H", 32 * KiB, 1, CR__RPC_CFG_HARD_PIN, 1, NULL, 1), 0);
    assert_int_equal(put(m, "S", 32 * KiB, 1, CR__RPC_CFG_SOFT_PIN, 2, NULL, 1), 0);
    assert_int_equal(put(m, "N1", 32 * KiB, 1, 0, 3, NULL, 1), 0);
    assert_int_equal(put(m, "N2", 32 * KiB, 1, 0, 4, NULL, 1), 0);
    uint64_t pv = 0;
    assert_int_equal(put(m, "P", 32 * KiB, 1, 0, 5, &pv, 0), 0);
    /* LRU: N2 N1 S H L (L was touched first, then everything else put after) */
    /* a 5% step (52 KiB = 2 objects): takes N1, N2 before the older soft-pinned S */
    assert_int_equal(cr__master_evict(m, 1, 100), 2);
    assert_int_equal(exist(m, "N1", 101), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(exist(m, "N2", 101), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(exist(m, "S", 101), 0);
    /* a step that wants everything: S goes (soft pin last), L (leased), H
     * (hard pin) and P (pending) stay */
    assert_int_equal(cr__master_evict(m, 1 * MiB, 200), 1);
    assert_int_equal(exist(m, "S", 201), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(exist(m, "L", 201), 0);
    assert_int_equal(exist(m, "H", 201), 0);
    assert_int_equal(cr__master_put_end(m, "P", 1, pv, 202), 0);
    /* once the lease is over L can go; H never */
    assert_int_equal(cr__master_evict(m, 1 * MiB, 6000), 2); /* L and P */
    assert_int_equal(exist(m, "L", 6001), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(exist(m, "H", 6001), 0);
    assert_int_equal(cr__master_remove(m, "H", 1, 0, 6002), 0); /* remove frees it */
    cr__master_destroy(m);
}

static void nosoft_tweak(cr__master_cfg_t *c) { c->evict_soft_pinned = 0; }

/* --allow_evict_soft_pinned_objects=false: soft-pinned objects are skipped
 * like hard-pinned ones while their pin lasts, and evictable after. */
static void test_eviction_soft_pin_protected(void **s)
{
    (void)s;
    cr__master_t *m = mk(nosoft_tweak);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0, 1 * MiB, 0), 0);
    assert_int_equal(put(m, "S", 32 * KiB, 1, CR__RPC_CFG_SOFT_PIN, 0, NULL, 1), 0);
    assert_int_equal(put(m, "N", 32 * KiB, 1, 0, 1, NULL, 1), 0);
    assert_int_equal(cr__master_evict(m, 1 * MiB, 10), 1);
    assert_int_equal(exist(m, "S", 11), 0);
    assert_int_equal(exist(m, "N", 11), CR_E_OBJECT_NOT_FOUND);
    /* the soft pin expires after default_kv_soft_pin_ttl (30 min) */
    assert_int_equal(cr__master_evict(m, 1 * MiB, 31 * 60 * 1000), 1);
    assert_int_equal(exist(m, "S", 31 * 60 * 1000 + 1), CR_E_OBJECT_NOT_FOUND);
    cr__master_destroy(m);
}

static void full_tweak(cr__master_cfg_t *c) { c->high_watermark = 1.0; }

/* A put no empty cluster could hold (bigger than every segment together,
 * or more replicas than segments) is refused without evicting anything; a
 * put that fits once space is freed still evicts. */
static void test_impossible_put_evicts_nothing(void **s)
{
    (void)s;
    cr__master_t *m = mk(full_tweak);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 1 * MiB, 0), 0);
    assert_int_equal(cr__master_mount(m, CB, "segB", 0x20000000, 1 * MiB, 0), 0);
    for (int i = 0; i < 64; i++) {
        char key[16];
        snprintf(key, sizeof key, "o%02d", i);
        assert_int_equal(put(m, key, 32 * KiB, 1, 0, (uint64_t)i, NULL, 1), 0);
    }
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    uint64_t ev0 = st.counters[CR__MM_evictions_total];
    assert_int_equal(put(m, "huge", 2 * MiB + 1, 1, 0, 100, NULL, 1), CR_E_NO_AVAILABLE_HANDLE);
    assert_int_equal(put(m, "three", 1000, 3, 0, 100, NULL, 1), CR_E_NO_AVAILABLE_HANDLE);
    /* two replicas of more than one segment: 2 x 1.5 MiB > 2 MiB */
    assert_int_equal(put(m, "pair", 1536 * KiB, 2, 0, 100, NULL, 1), CR_E_NO_AVAILABLE_HANDLE);
    cr__master_stats(m, &st);
    assert_int_equal(st.counters[CR__MM_evictions_total], ev0);
    for (int i = 0; i < 64; i++) {
        char key[16];
        snprintf(key, sizeof key, "o%02d", i);
        assert_int_equal(exist(m, key, 101), 0);
    }
    /* possible: the whole pool in one striped object evicts what it needs */
    assert_int_equal(put(m, "all", 2 * MiB, 1, 0, 102, NULL, 1), 0);
    cr__master_stats(m, &st);
    assert_true(st.counters[CR__MM_evictions_total] > ev0);
    cr__master_destroy(m);
}

static void test_eviction_on_alloc_failure(void **s)
{
    (void)s;
    cr__master_t *m = mk(full_tweak);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0, 1 * MiB, 0), 0);
    for (int i = 0; i < 32; i++) {
        char key[16];
        snprintf(key, sizeof key, "o%02d", i);
        assert_int_equal(put(m, key, 32 * KiB, 1, 0, (uint64_t)i, NULL, 1), 0);
    }
    /* full: the next put evicts the oldest and succeeds */
    assert_int_equal(put(m, "new", 32 * KiB, 1, 0, 100, NULL, 1), 0);
    assert_int_equal(exist(m, "o00", 101), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(exist(m, "new", 101), 0);
    /* everything hard-pinned: a put fails with NO_AVAILABLE_HANDLE */
    cr__master_t *m2 = mk(full_tweak);
    assert_int_equal(cr__master_mount(m2, CA, "segA", 0, 1 * MiB, 0), 0);
    for (int i = 0; i < 32; i++) {
        char key[16];
        snprintf(key, sizeof key, "h%02d", i);
        assert_int_equal(put(m2, key, 32 * KiB, 1, CR__RPC_CFG_HARD_PIN, 0, NULL, 1), 0);
    }
    assert_int_equal(put(m2, "x", 32 * KiB, 1, 0, 1, NULL, 1), CR_E_NO_AVAILABLE_HANDLE);
    cr__master_stats_t st;
    cr__master_stats(m2, &st);
    assert_int_equal(st.counters[CR__MM_alloc_failures_total], 1);
    uint64_t steps = st.counters[CR__MM_eviction_steps_total];
    /* a batch of failing puts in the same ms walks the LRU once, not per key */
    cr__rpc_item_t in[64];
    char keys[64][8];
    for (int i = 0; i < 64; i++) {
        snprintf(keys[i], sizeof keys[i], "b%d", i);
        in[i] = (cr__rpc_item_t){.key = keys[i], .key_len = (uint32_t)strlen(keys[i]),
                                 .size = 32 * KiB, .cfg = {.replica_num = 1}};
    }
    cr__rpc_msg_t req = {.type = CR__RPC_BATCH_PUT_START, .n_items = 64, .items = in}, rep = {0};
    cr__master_handle(m2, &req, &rep, 1);
    for (int i = 0; i < 64; i++)
        assert_int_equal(rep.items[i].status, CR_E_NO_AVAILABLE_HANDLE);
    cr__rpc_msg_free(&rep);
    cr__master_stats(m2, &st);
    assert_int_equal(st.counters[CR__MM_alloc_failures_total], 65);
    assert_int_equal(st.counters[CR__MM_eviction_steps_total], steps); /* memo: no new walk */
    /* after a change (a remove frees space) eviction is tried again */
    assert_int_equal(cr__master_remove(m2, "h00", 3, 0, 2), 0);
    assert_int_equal(put(m2, "y", 32 * KiB, 1, 0, 2, NULL, 1), 0);
    cr__master_destroy(m2);
    cr__master_destroy(m);
}

/* PutStart of one key of size bytes through the dispatch with an exclusion
 * list; returns its status, *seg gets its first replica's segment. */
static int put_excluding(cr__master_t *m, const char *key, uint64_t size, uint32_t nrep,
                         const char **ex, uint32_t n_ex, uint64_t now, char *seg, size_t seg_cap)
{
    cr__rpc_item_t in = {.key = key, .key_len = (uint32_t)strlen(key), .size = size,
                         .cfg = {.replica_num = nrep}};
    cr__rpc_msg_t req = {.type = CR__RPC_PUT_START, .n_items = 1, .items = &in,
                         .n_exclude = n_ex, .exclude = ex};
    cr__rpc_msg_t rep = {.type = CR__RPC_PUT_START | CR__RPC_REPLY};
    cr__master_handle(m, &req, &rep, now);
    int rc = rep.status;
    if (!rc) {
        snprintf(seg, seg_cap, "%s", rep.items[0].replicas[0].shards[0].segment);
        rc = cr__master_put_end(m, key, strlen(key), rep.items[0].version, now);
    }
    cr__rpc_msg_free(&rep);
    return rc;
}

/* A client's suspect segments (a frozen node) sent with PutStart: the
 * master places on the others, evicting there when they are full, rather
 * than on the suspect one that has free space (the outside drill of
 * 2026-12-03: every attempt of a put landed on the frozen node, and the
 * put failed with TRANSFER_FAIL). Only when nothing fits elsewhere even
 * after eviction is a suspect segment used (a soft exclusion). */
/* Counter `name` of m now, through a cr__master_stats_t st in scope. */
#define COUNTER(m, name) (cr__master_stats((m), &st), st.counters[CR__MM_##name])

static void test_put_start_exclusion_list(void **s)
{
    (void)s;
    const char *exB[] = {"segB"}, *exBoth[] = {"gone", "segB", "segA"}, *exA[] = {"segA"};
    char seg[64];
    cr__master_stats_t st; /* COUNTER's */
    for (int pinned = 0; pinned < 2; pinned++) {
        cr__master_t *m = mk(full_tweak);
        assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 1 * MiB, 0), 0);
        /* segA full of objects (hard-pinned ones: nothing to evict there) */
        for (int i = 0; i < 32; i++) {
            char key[16];
            snprintf(key, sizeof key, "a%02d", i);
            assert_int_equal(put(m, key, 32 * KiB, 1, pinned ? CR__RPC_CFG_HARD_PIN : 0,
                                 (uint64_t)i, NULL, 1),
                             0);
        }
        assert_int_equal(cr__master_mount(m, CB, "segB", 0x20000000, 1 * MiB, 0), 0);
        uint64_t ev0 = COUNTER(m, evictions_total);
        assert_int_equal(put_excluding(m, "new", 32 * KiB, 1, exB, 1, 100, seg, sizeof seg), 0);
        if (!pinned) {
            /* segB, empty, is suspect: room is made on segA */
            if (strcmp(seg, "segA"))
                fail_msg("excluded segB, segA full of evictable objects: placed on %s, want segA",
                         seg);
            assert_int_equal(exist(m, "a00", 101), CR_E_OBJECT_NOT_FOUND); /* the oldest */
            assert_int_equal(COUNTER(m, puts_placed_excluded_total), 0);
        } else {
            /* nothing to evict elsewhere: the suspect segment takes it */
            assert_string_equal(seg, "segB");
            assert_int_equal(COUNTER(m, evictions_total), ev0);
            assert_int_equal(COUNTER(m, puts_placed_excluded_total), 1);
        }
        assert_int_equal(COUNTER(m, puts_excluding_total), 1);
        /* every segment excluded (an unknown name is skipped): placed as
         * without a list */
        uint64_t x0 = COUNTER(m, puts_placed_excluded_total);
        assert_int_equal(put_excluding(m, "all", 8 * KiB, 1, exBoth, 3, 300, seg, sizeof seg), 0);
        assert_int_equal(COUNTER(m, puts_placed_excluded_total), x0 + 1);
        if (!pinned) {
            /* two replicas, one segment outside the list: it cannot hold
             * both, so nothing is evicted for nothing; both segments used */
            ev0 = COUNTER(m, evictions_total);
            assert_int_equal(put_excluding(m, "two", 16 * KiB, 2, exB, 1, 400, seg, sizeof seg),
                             0);
            assert_int_equal(COUNTER(m, evictions_total), ev0);
        }
        cr__master_destroy(m);
    }
    /* a lone segment that is suspect still takes puts */
    cr__master_t *m = mk(NULL);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 1 * MiB, 0), 0);
    assert_int_equal(put_excluding(m, "lone", 32 * KiB, 1, exA, 1, 1, seg, sizeof seg), 0);
    assert_string_equal(seg, "segA");
    assert_int_equal(COUNTER(m, puts_placed_excluded_total), 1);
    cr__master_destroy(m);
}
#undef COUNTER

static void test_bad_input(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    /* no segment at all */
    assert_int_equal(put(m, "k", 100, 1, 0, 0, NULL, 1), CR_E_NO_AVAILABLE_HANDLE);
    assert_int_equal(cr__master_mount(m, CA, "", 0, MiB, 0), CR_E_INVALID_PARAMS);
    assert_int_equal(cr__master_mount(m, CA, NULL, 0, MiB, 0), CR_E_INVALID_PARAMS);
    assert_int_equal(cr__master_mount(m, CA, "s", 0, 10, 0), CR_E_INVALID_PARAMS);
    assert_int_equal(cr__master_mount(m, CA, "s", UINT64_MAX - 5, MiB, 0), CR_E_INVALID_PARAMS);
    assert_int_equal(cr__master_mount(m, CA, "s", 0, MiB, 0), 0);
    assert_int_equal(cr__master_mount(m, CA, "s", 4096, MiB, 0), CR_E_SEGMENT_ALREADY_EXISTS);
    assert_int_equal(cr__master_unmount(m, CA, "nosuch", 0), CR_E_SEGMENT_NOT_FOUND);
    /* keys */
    static char big[CR__RPC_KEY_MAX + 2];
    memset(big, 'x', CR__RPC_KEY_MAX + 1);
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1};
    assert_int_equal(cr__master_put_start(m, "", 0, 10, &cfg, 0, &msg, &it), CR_E_INVALID_KEY);
    assert_int_equal(cr__master_put_start(m, "a\0b", 3, 10, &cfg, 0, &msg, &it),
                     CR_E_INVALID_KEY);
    assert_int_equal(cr__master_put_start(m, big, CR__RPC_KEY_MAX + 1, 10, &cfg, 0, &msg, &it),
                     CR_E_INVALID_KEY);
    assert_int_equal(cr__master_put_start(m, big, CR__RPC_KEY_MAX, 10, &cfg, 0, &msg, &it), 0);
    assert_int_equal(cr__master_put_end(m, big, CR__RPC_KEY_MAX, it.version, 0), 0);
    assert_int_equal(cr__master_exist(m, big, CR__RPC_KEY_MAX, 0), 0);
    assert_int_equal(cr__master_exist(m, "", 0, 0), CR_E_INVALID_KEY);
    assert_int_equal(cr__master_remove(m, "", 0, 0, 0), CR_E_INVALID_KEY);
    assert_int_equal(cr__master_validate(m, "", 0, 1, 1, 0), CR_E_INVALID_KEY);
    /* sizes */
    assert_int_equal(put(m, "z", 0, 1, 0, 0, NULL, 1), CR_E_INVALID_PARAMS);
    assert_int_equal(put(m, "z", CR__RPC_VALUE_MAX + 1, 1, 0, 0, NULL, 1), CR_E_INVALID_PARAMS);
    assert_int_equal(put(m, "z", CR__RPC_VALUE_MAX, 1, 0, 0, NULL, 1), CR_E_NO_AVAILABLE_HANDLE);
    /* validate with a forged replica id */
    uint64_t ver = 0;
    assert_int_equal(put(m, "v", 10, 1, 0, 0, &ver, 1), 0);
    assert_int_equal(cr__master_validate(m, "v", 1, ver, (ver << 3) | 0, 1), 0);
    assert_int_equal(cr__master_validate(m, "v", 1, ver, (ver << 3) | 5, 1), CR_E_REPLICA_IS_GONE);
    assert_int_equal(cr__master_validate(m, "v", 1, ver, ((ver + 1) << 3), 1),
                     CR_E_OBJECT_NOT_FOUND);
    cr__rpc_msg_free(&msg);
    cr__master_destroy(m);
}

static void small_limits(cr__master_cfg_t *c)
{
    c->max_clients = 3;
    c->max_segments = 2;
}

/* Clients and segments are bounded: a flood of random client ids or
 * mounts is refused instead of growing the tables (and the linear scans)
 * without end; expiry gives the slots back. */
static void test_limits(void **s)
{
    (void)s;
    cr__master_t *m = mk(small_limits);
    uint32_t f;
    for (uint64_t i = 0; i < 3; i++)
        assert_int_equal(cr__master_ping(m, (cr__rpc_client_id_t){100, i}, 0, &f), 0);
    assert_int_equal(cr__master_ping(m, (cr__rpc_client_id_t){100, 9}, 0, &f),
                     CR_E_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(cr__master_ping(m, (cr__rpc_client_id_t){100, 1}, 0, &f), 0); /* known */
    assert_int_equal(cr__master_mount(m, (cr__rpc_client_id_t){100, 0}, "s1", 0, MiB, 0), 0);
    assert_int_equal(cr__master_mount(m, (cr__rpc_client_id_t){100, 0}, "s2", 0, MiB, 0), 0);
    assert_int_equal(cr__master_mount(m, (cr__rpc_client_id_t){100, 0}, "s3", 0, MiB, 0),
                     CR_E_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(cr__master_unmount(m, (cr__rpc_client_id_t){100, 0}, "s2", 1), 0);
    assert_int_equal(cr__master_mount(m, (cr__rpc_client_id_t){100, 0}, "s3", 0, MiB, 1), 0);
    /* silent clients expire and free their slots (ticks every 100 ms: a
     * master that did not run in between would not count that time) */
    for (uint64_t t = 100; t <= 20000; t += 100)
        cr__master_tick(m, t);
    assert_int_equal(cr__master_ping(m, (cr__rpc_client_id_t){100, 9}, 20001, &f), 0);
    assert_int_equal(f, CR__RPC_F_NEED_REMOUNT);
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.clients, 1);
    assert_int_equal(st.segments, 0);
    cr__master_destroy(m);
}

/* Mounts client CA's 4 MiB segment "segA" through the RPC dispatch. */
static void dispatch_mount_a(cr__master_t *m)
{
    cr__rpc_msg_t req = {.type = CR__RPC_MOUNT_SEGMENT, .client_id = CA, .segment = "segA",
                         .base = 0x1000, .size = 4 * MiB};
    cr__rpc_msg_t rep = {.type = CR__RPC_MOUNT_SEGMENT | CR__RPC_REPLY};
    cr__master_handle(m, &req, &rep, 0);
    assert_int_equal(rep.status, 0);
    cr__rpc_msg_free(&rep);
}

static void test_dispatch_batch(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    dispatch_mount_a(m);
    cr__rpc_msg_t req, rep;
    /* batch put start: 3 keys, the middle one invalid */
    cr__rpc_item_t in[3] = {{.key = "a", .key_len = 1, .size = 100, .cfg = {.replica_num = 1}},
                            {.key = "", .key_len = 0, .size = 100},
                            {.key = "c", .key_len = 1, .size = 200}};
    req = (cr__rpc_msg_t){.type = CR__RPC_BATCH_PUT_START, .n_items = 3, .items = in};
    rep = (cr__rpc_msg_t){.type = CR__RPC_BATCH_PUT_START | CR__RPC_REPLY};
    cr__master_handle(m, &req, &rep, 1);
    assert_int_equal(rep.status, 0);
    assert_int_equal(rep.n_items, 3);
    assert_int_equal(rep.items[0].status, 0);
    assert_int_equal(rep.items[1].status, CR_E_INVALID_KEY);
    assert_int_equal(rep.items[1].n_replicas, 0);
    assert_int_equal(rep.items[2].status, 0);
    assert_int_equal(rep.items[2].replicas[0].shards[0].len, 200);
    /* the reply encodes */
    cr__rpc_buf_t b;
    cr__rpc_buf_init(&b);
    assert_int_equal(cr__rpc_encode(&rep, &b), 0);
    cr__rpc_buf_free(&b);
    cr__rpc_item_t ends[2] = {{.key = "a", .key_len = 1, .version = rep.items[0].version},
                              {.key = "c", .key_len = 1, .version = rep.items[2].version}};
    cr__rpc_msg_free(&rep);
    req = (cr__rpc_msg_t){.type = CR__RPC_BATCH_PUT_END, .n_items = 2, .items = ends};
    rep = (cr__rpc_msg_t){.type = CR__RPC_BATCH_PUT_END | CR__RPC_REPLY};
    cr__master_handle(m, &req, &rep, 2);
    assert_int_equal(rep.items[0].status, 0);
    assert_int_equal(rep.items[1].status, 0);
    cr__rpc_msg_free(&rep);
    /* batch exist + get size, single exist header status */
    cr__rpc_item_t q[3] = {{.key = "a", .key_len = 1}, {.key = "b", .key_len = 1},
                           {.key = "c", .key_len = 1}};
    cr__master_stats_t st0, st1;
    cr__master_stats(m, &st0);
    req = (cr__rpc_msg_t){.type = CR__RPC_BATCH_GET_SIZE, .n_items = 3, .items = q};
    rep = (cr__rpc_msg_t){0};
    cr__master_handle(m, &req, &rep, 3);
    assert_int_equal(rep.items[0].size, 100);
    assert_int_equal(rep.items[1].status, CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(rep.items[2].size, 200);
    cr__rpc_msg_free(&rep);
    req = (cr__rpc_msg_t){.type = CR__RPC_EXIST, .n_items = 1, .items = &q[1]};
    cr__master_handle(m, &req, &rep, 4);
    assert_int_equal(rep.status, CR_E_OBJECT_NOT_FOUND);
    cr__rpc_msg_free(&rep);
    /* GetSize's not-found is a read's miss (a client's get() asks it first);
     * neither it nor Exist's is counted as an error */
    cr__master_stats(m, &st1);
    assert_int_equal(st1.counters[CR__MM_misses_total] - st0.counters[CR__MM_misses_total], 1);
    assert_int_equal(st1.counters[CR__MM_rpc_errors_total], st0.counters[CR__MM_rpc_errors_total]);
    /* ping */
    req = (cr__rpc_msg_t){.type = CR__RPC_PING, .client_id = CA};
    cr__master_handle(m, &req, &rep, 5);
    assert_int_equal(rep.status, 0);
    assert_int_equal(rep.flags, CR__RPC_F_EXCLUDE); /* PutStart's exclusion list is read */
    assert_int_equal(rep.master_id, cr__master_id(m));
    assert_int_equal(rep.count, 10000);
    cr__rpc_msg_free(&rep);
    /* metrics text and admin JSON */
    char *txt;
    size_t len;
    assert_int_equal(cr__master_metrics_text(m, &txt, &len), 0);
    assert_non_null(strstr(txt, "crescent_master_rpc_put_start_total 3\n"));
    assert_non_null(strstr(txt, "crescent_master_keys 2\n"));
    assert_non_null(strstr(txt, "# TYPE crescent_master_evictions_total counter"));
    free(txt);
    assert_int_equal(cr__master_query_key_json(m, "a", 1, 6, &txt, &len), 0);
    assert_non_null(strstr(txt, "\"state\":\"complete\""));
    assert_non_null(strstr(txt, "\"segment\":\"segA\""));
    free(txt);
    assert_int_equal(cr__master_query_key_json(m, "zz", 2, 6, &txt, &len), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(cr__master_segments_json(m, &txt, &len), 0);
    assert_non_null(strstr(txt, "\"name\":\"segA\""));
    free(txt);
    cr__master_destroy(m);
}

/* A batch longer than the key index's prefetch window (objmap.c), with
 * invalid keys among valid ones: every item gets its own result. */
static void test_dispatch_batch_many(void **s)
{
    (void)s;
    enum { N = 150 };
    cr__master_t *m = mk(NULL);
    dispatch_mount_a(m);
    cr__rpc_msg_t req, rep;
    static char names[N][16];
    cr__rpc_item_t in[N], q[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "key-%d", i);
        in[i] = (cr__rpc_item_t){.key = names[i], .key_len = strlen(names[i]),
                                 .size = 64 + (uint64_t)i, .cfg = {.replica_num = 1}};
    }
    in[7].key_len = 0;                    /* empty */
    in[70].key = NULL;                    /* no key at all */
    in[130].key_len = CR__RPC_KEY_MAX + 1; /* too long (the bytes past it are never read) */
    req = (cr__rpc_msg_t){.type = CR__RPC_BATCH_PUT_START, .n_items = N, .items = in};
    rep = (cr__rpc_msg_t){.type = CR__RPC_BATCH_PUT_START | CR__RPC_REPLY};
    cr__master_handle(m, &req, &rep, 1);
    assert_int_equal(rep.n_items, N);
    cr__rpc_item_t ends[N];
    uint32_t ne = 0;
    for (int i = 0; i < N; i++) {
        int bad = i == 7 || i == 70 || i == 130;
        assert_int_equal(rep.items[i].status, bad ? CR_E_INVALID_KEY : 0);
        if (!bad)
            ends[ne++] = (cr__rpc_item_t){.key = names[i], .key_len = strlen(names[i]),
                                          .version = rep.items[i].version};
    }
    cr__rpc_msg_free(&rep);
    req = (cr__rpc_msg_t){.type = CR__RPC_BATCH_PUT_END, .n_items = ne, .items = ends};
    rep = (cr__rpc_msg_t){.type = CR__RPC_BATCH_PUT_END | CR__RPC_REPLY};
    cr__master_handle(m, &req, &rep, 2);
    for (uint32_t i = 0; i < ne; i++)
        assert_int_equal(rep.items[i].status, 0);
    cr__rpc_msg_free(&rep);
    /* sizes in reverse order: every key finds its own object */
    for (int i = 0; i < N; i++)
        q[i] = (cr__rpc_item_t){.key = names[N - 1 - i], .key_len = strlen(names[N - 1 - i])};
    req = (cr__rpc_msg_t){.type = CR__RPC_BATCH_GET_SIZE, .n_items = N, .items = q};
    rep = (cr__rpc_msg_t){0};
    cr__master_handle(m, &req, &rep, 3);
    for (int i = 0; i < N; i++) {
        int k = N - 1 - i, bad = k == 7 || k == 70 || k == 130;
        assert_int_equal(rep.items[i].status, bad ? CR_E_OBJECT_NOT_FOUND : 0);
        if (!bad)
            assert_int_equal(rep.items[i].size, 64 + (uint64_t)k);
    }
    cr__rpc_msg_free(&rep);
    cr__master_destroy(m);
}

/* ---- journal records and restore (ha/) ------------------------------------ */

static void collect(void *u, const uint8_t *frame, size_t len) { cr__ha_buf_append(u, frame, len); }

static cr__master_t *restored(const cr__ha_buf_t *b, uint64_t now, uint64_t *n)
{
    cr__ha_shadow_t *sh;
    assert_int_equal(cr__ha_shadow_create(&sh), 0);
    assert_int_equal(cr__ha_shadow_load(sh, b->p, b->len), (long)b->len);
    cr__master_t *m2 = mk(NULL);
    assert_int_equal(cr__master_restore(m2, sh, now, n), 0);
    cr__ha_shadow_destroy(sh);
    return m2;
}

/* A master restored from its records (HA takeover, journal) evicts in put
 * order: the shadow hands objects over in hash-bucket order, and the LRU
 * built in that order evicted recent objects before old ones. */
static void test_restore_evicts_oldest_first(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    cr__ha_buf_t jb = {0};
    cr__master_set_journal(m, collect, &jb);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 1 * MiB, 0), 0);
    for (int i = 0; i < 48; i++) {
        char key[16];
        snprintf(key, sizeof key, "o%02d", i);
        assert_int_equal(put(m, key, 16 * KiB, 1, 0, (uint64_t)i, NULL, 1), 0);
    }
    uint64_t n = 0;
    cr__master_t *m2 = restored(&jb, 100, &n);
    assert_int_equal(n, 48);
    assert_int_equal(cr__master_mount(m2, CA, "segA", 0x10000000, 1 * MiB, 101), 0);
    uint64_t late = 31 * 60 * 1000;
    uint64_t ev = cr__master_evict(m2, 16 * 16 * KiB, late);
    assert_true(ev >= 16 && ev < 48);
    for (int i = 0; i < 48; i++) {
        char key[16];
        snprintf(key, sizeof key, "o%02d", i);
        /* the ev oldest are gone, every newer one is there */
        assert_int_equal(exist(m2, key, late + 1), i < (int)ev ? CR_E_OBJECT_NOT_FOUND : 0);
    }
    cr__master_destroy(m2);
    cr__master_destroy(m);
    cr__ha_buf_free(&jb);
}

/* A restored segment whose owner did not come back within its grace is
 * dropped; the same owner coming back later gets a segment that takes
 * allocations (the restored segment's "no allocation until its owner is
 * back" was taken for a hold until forever: the name never took another
 * allocation, and a fresh-name client was refused for good). */
static void test_dropped_restored_segment_not_held_forever(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    cr__ha_buf_t jb = {0};
    cr__master_set_journal(m, collect, &jb);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 1 * MiB, 0), 0);
    assert_int_equal(put(m, "old", 16 * KiB, 1, 0, 1, NULL, 1), 0);
    uint64_t n = 0;
    cr__master_t *m2 = restored(&jb, 100, &n);
    uint64_t t = 100;
    for (; t < 100 + 3 * 10000; t += 100) /* past two client ttls on the awake clock */
        cr__master_tick(m2, t);
    assert_int_equal(exist(m2, "old", t), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(cr__master_mount(m2, CA, "segA", 0x10000000, 1 * MiB, t), 0);
    assert_int_equal(put(m2, "new", 16 * KiB, 1, 0, t + 1, NULL, 1), 0);
    cr__master_destroy(m2);
    cr__master_destroy(m);
    cr__ha_buf_free(&jb);
}

/* Mounts name [base, base+size) for client id through the RPC dispatch, as
 * a client asking for a fresh name does: the reply's count, the ms the name
 * is still held (whole or in part; such a client takes another port). */
static uint64_t mount_held_ms(cr__master_t *m, cr__rpc_client_id_t id, const char *name,
                              uint64_t base, uint64_t size, uint64_t now)
{
    cr__rpc_msg_t req = {.type = CR__RPC_MOUNT_SEGMENT, .client_id = id, .segment = (char *)name,
                         .base = base, .size = size};
    cr__rpc_msg_t rep = {.type = CR__RPC_MOUNT_SEGMENT | CR__RPC_REPLY};
    cr__master_handle(m, &req, &rep, now);
    assert_int_equal(rep.status, 0);
    uint64_t held = rep.count;
    cr__rpc_msg_free(&rep);
    return held;
}

/* The 1 MiB segment just mounted again takes 1 KiB objects everywhere
 * but the held block at a until end, and hands that block out at end. */
static void assert_held_until(cr__master_t *m, uint64_t a, uint64_t now, uint64_t end)
{
    uint64_t got = 0;
    assert_int_equal(fill_avoiding(m, "h", 1024, now, &a, 1, 1024, NULL), 1023);
    tick_alive(m, end - 1);
    assert_int_equal(put_at(m, "late", 1000, end - 1, 1, &got), CR_E_NO_AVAILABLE_HANDLE);
    tick_alive(m, end);
    assert_int_equal(put_at(m, "late", 1000, end, 1, &got), 0);
    assert_int_equal(got, a); /* the hold is over: the block is free again */
}

/* segA (CA, 1 MiB at 0x10000) with object "k" leased until 5100 and
 * dropped at 200: its block (*ak) is held, the rest of the memory not. */
static cr__master_t *held_after_drop(cr__ha_buf_t *jb, uint64_t *ak)
{
    cr__master_t *m = mk(NULL);
    if (jb)
        cr__master_set_journal(m, collect, jb);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000, 1 * MiB, 0), 0);
    assert_int_equal(put_at(m, "k", 1000, 0, 1, ak), 0);
    assert_int_equal(get(m, "k", 100, NULL, NULL, NULL), 0); /* lease until 5100 */
    assert_int_equal(cr__master_unmount(m, CA, "segA", 200), 0);
    return m;
}

/* A segment dropped while a reader held a lease on a replica, then a new
 * leader (the records a standby got) or a master restarted on its journal
 * (the records, or the snapshot it rewrote): the same memory mounted again
 * gets everything but the leased block until the hold ends, counted from
 * the restore (4900 ms were left at the drop), and a client asking for a
 * fresh name is still told the name is held. Before, held names were not
 * journaled: the new master handed the block to a new put while the stale
 * reader could still read it. */
static void test_held_range_survives_takeover_and_restart(void **s)
{
    (void)s;
    cr__ha_buf_t jb = {0}, snap = {0};
    uint64_t ak = 0;
    cr__master_t *m = held_after_drop(&jb, &ak);
    assert_int_equal(cr__master_dump(m, &snap, NULL, NULL), 0);
    const cr__ha_buf_t *srcs[2] = {&jb, &snap};
    for (int i = 0; i < 2; i++) {
        cr__master_t *m2 = restored(srcs[i], 1000, NULL); /* the hold ends at 5900 */
        /* a fresh-name client over the same memory is refused */
        uint64_t held = mount_held_ms(m2, CC, "segA", 0x10000, 1 * MiB, 1000);
        if (held != 4900)
            fail_msg("source %d: a fresh mount of the held name: held %llu ms, want 4900", i,
                     (unsigned long long)held);
        assert_int_equal(cr__master_unmount(m2, CC, "segA", 1000), 0);
        /* the owner back with the same memory: all but the leased block */
        assert_int_equal(cr__master_mount(m2, CA, "segA", 0x10000, 1 * MiB, 1100), 0);
        assert_held_until(m2, ak, 1200, 5900);
        cr__master_destroy(m2);
    }
    /* its end is journaled too: a master restored after it holds nothing */
    tick_alive(m, 5100);
    cr__master_t *m3 = restored(&jb, 6000, NULL);
    assert_int_equal(mount_held_ms(m3, CC, "segA", 0x10000, 1 * MiB, 6000), 0);
    cr__master_destroy(m3);
    cr__master_destroy(m);
    cr__ha_buf_free(&snap);
    cr__ha_buf_free(&jb);
}

/* The same, but the memory was mounted again before the takeover (its
 * held block in the old leader's quarantine, which is not journaled): the
 * restored segment keeps the block held once its owner attaches it. */
static void test_held_range_of_remounted_segment_survives_takeover(void **s)
{
    (void)s;
    cr__ha_buf_t jb = {0};
    uint64_t ak = 0;
    cr__master_t *m = held_after_drop(&jb, &ak);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000, 1 * MiB, 300), 0);
    cr__master_t *m2 = restored(&jb, 1000, NULL);
    assert_int_equal(cr__master_mount(m2, CA, "segA", 0x10000, 1 * MiB, 1100), 0); /* attach */
    assert_held_until(m2, ak, 1200, 5900);
    cr__master_destroy(m2);
    cr__master_destroy(m);
    cr__ha_buf_free(&jb);
}

/* Held entries of name, live at now. */
static int held_entries(const cr__master_t *m, const char *name, uint64_t now)
{
    int n = 0;
    for (int h = 0; h < HELD_MAX; h++)
        n += m->held[h].until > now && !strcmp(m->held[h].name, name);
    return n;
}

/* A client asking for a fresh name mounts a held name, is told so, and
 * unmounts (its create fails, it retries on another port; Python clients
 * retry up to 24 times). Each such drop gave the held ranges (in its
 * quarantine) back as a new held entry under the refused client's id: 64
 * refusals filled the table and ended other names' holds early ("segment
 * names held: the hold of ... ends early"), here segB's, whose leased
 * block then went to a new put. Now the drop adds nothing another entry
 * already holds; the owner dropping the same memory twice keeps one range. */
static void test_fresh_name_retry_adds_no_held_entry(void **s)
{
    (void)s;
    uint64_t ak = 0, ab = 0;
    cr__master_t *m = mk(NULL);
    assert_int_equal(cr__master_mount(m, CB, "segB", 0x40000000, 64 * KiB, 0), 0);
    assert_int_equal(put_at(m, "b", 1000, 0, 1, &ab), 0);
    assert_int_equal(get(m, "b", 0, NULL, NULL, NULL), 0); /* lease until 5000 */
    assert_int_equal(cr__master_unmount(m, CB, "segB", 10), 0);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000, 1 * MiB, 20), 0);
    assert_int_equal(put_at(m, "k", 1000, 20, 1, &ak), 0);
    assert_int_equal(get(m, "k", 100, NULL, NULL, NULL), 0); /* lease until 5100 */
    assert_int_equal(cr__master_unmount(m, CA, "segA", 200), 0);
    for (uint64_t i = 0; i < 2 * HELD_MAX; i++) {
        cr__rpc_client_id_t id = {100 + i, 7};
        assert_int_equal(mount_held_ms(m, id, "segA", 0x10000, 1 * MiB, 300 + i), 5100 - 300 - i);
        assert_int_equal(cr__master_unmount(m, id, "segA", 300 + i), 0);
    }
    assert_int_equal(held_entries(m, "segA", 500), 1);
    assert_int_equal(held_entries(m, "segB", 500), 1);
    /* segB's owner back: its leased block is still held */
    assert_int_equal(cr__master_mount(m, CB, "segB", 0x40000000, 64 * KiB, 500), 0);
    assert_int_equal(fill_avoiding(m, "b", 1024, 600, &ab, 1, 1024, NULL), 63);
    assert_int_equal(cr__master_unmount(m, CB, "segB", 650), 0);
    /* the owner of segA partitioned twice: still one range */
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000, 1 * MiB, 700), 0);
    assert_int_equal(cr__master_unmount(m, CA, "segA", 800), 0);
    assert_int_equal(held_entries(m, "segA", 800), 1);
    for (int h = 0; h < HELD_MAX; h++)
        if (m->held[h].until > 800 && !strcmp(m->held[h].name, "segA"))
            assert_int_equal(m->held[h].rg.n, 1);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000, 1 * MiB, 900), 0);
    assert_held_until(m, ak, 1000, 5100);
    cr__master_destroy(m);
}

/* HELD records: a list longer than one record goes over several (MORE) and
 * comes back whole in the shadow; bounds are refused when written (nothing
 * is written) and when read (a hostile stream). */
static void test_held_record_bounds(void **s)
{
    (void)s;
    cr__ha_rec_t *r = calloc(1, sizeof *r);
    assert_non_null(r);
    cr__ha_buf_t b = {0};
    r->type = CR__HA_HELD;
    snprintf(r->name, sizeof r->name, "segA");
    r->client = CA;
    r->base = 0x10000;
    r->seg_size = 1 * MiB;
    r->hold_ms = 5000;
    r->n_hrg = CR__HA_HELD_RG_MAX;
    for (uint32_t i = 0; i < r->n_hrg; i++)
        r->hrg[i] = (cr__ha_held_rg_t){.off = i * 1024ull, .len = 1024, .ms = 100 + i};
    assert_int_equal(cr__ha_rec_put(&b, r), 0);
    r->flags = CR__HA_HELD_MORE;
    r->n_hrg = 2;
    assert_int_equal(cr__ha_rec_put(&b, r), 0);
    size_t good = b.len;
    cr__ha_shadow_t *sh;
    assert_int_equal(cr__ha_shadow_create(&sh), 0);
    assert_int_equal(cr__ha_shadow_load(sh, b.p, b.len), (long)b.len);
    assert_int_equal(cr__ha_shadow_n_held(sh), 1);
    const cr__ha_held_t *h = cr__ha_shadow_held(sh, 0);
    assert_int_equal(h->n_rg, CR__HA_HELD_RG_MAX + 2);
    assert_int_equal(h->rg[CR__HA_HELD_RG_MAX - 1].ms, 100 + CR__HA_HELD_RG_MAX - 1);
    assert_int_equal(h->hold_ms, 5000);
    /* refused when written: nothing appended */
    r->flags = 0;
    r->hrg[1].off = 1 * MiB - 512; /* past the memory */
    assert_int_equal(cr__ha_rec_put(&b, r), -EINVAL);
    r->hrg[1] = (cr__ha_held_rg_t){.off = 0, .len = 1024, .ms = 5001}; /* past the hold */
    assert_int_equal(cr__ha_rec_put(&b, r), -EINVAL);
    r->hrg[1].ms = 1;
    r->hold_ms = CR__HA_HELD_MS_MAX + 1;
    assert_int_equal(cr__ha_rec_put(&b, r), -EINVAL);
    r->hold_ms = 5000;
    r->n_hrg = CR__HA_HELD_RG_MAX + 1;
    assert_int_equal(cr__ha_rec_put(&b, r), -EINVAL);
    r->n_hrg = 1;
    r->flags = CR__HA_HELD_WHOLE; /* whole, with ranges */
    assert_int_equal(cr__ha_rec_put(&b, r), -EINVAL);
    assert_int_equal(b.len, good);
    /* refused when read: a range past the memory, its check recomputed */
    r->flags = 0;
    assert_int_equal(cr__ha_rec_put(&b, r), 0);
    uint8_t *body = b.p + good + CR__HA_FRAME_HDR;
    size_t blen = b.len - good - CR__HA_FRAME_HDR;
    body[blen - 24 + 15] = 0xff; /* the last range's len: past the memory */
    uint32_t ck = (uint32_t)XXH3_64bits(body, blen);
    memcpy(b.p + good + 4, &ck, 4);
    assert_int_equal(cr__ha_rec_get(b.p + good, b.len - good, r), -EBADMSG);
    /* HELDEND ends it */
    b.len = good;
    r->type = CR__HA_HELDEND;
    assert_int_equal(cr__ha_rec_put(&b, r), 0);
    cr__ha_shadow_reset(sh);
    assert_int_equal(cr__ha_shadow_load(sh, b.p, b.len), (long)b.len);
    assert_int_equal(cr__ha_shadow_n_held(sh), 0);
    cr__ha_shadow_destroy(sh);
    cr__ha_buf_free(&b);
    free(r);
}

/* Exist through the dispatch: with the header's LEASE flag an object found
 * is read-leased (Mooncake's ExistKey), without it not. */
static void test_exist_lease_flag(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 1 * MiB, 0), 0);
    assert_int_equal(put(m, "a", 1000, 1, 0, 1, NULL, 1), 0);
    assert_int_equal(put(m, "b", 1000, 1, 0, 1, NULL, 1), 0);
    cr__rpc_item_t it[2] = {{.key = "a", .key_len = 1}, {.key = "zz", .key_len = 2}};
    cr__rpc_msg_t req = {.type = CR__RPC_BATCH_EXIST, .n_items = 2, .items = it,
                         .hflags = CR__RPC_HF_LEASE};
    cr__rpc_msg_t rep = {0};
    cr__master_handle(m, &req, &rep, 2);
    assert_int_equal(rep.items[0].status, 0);
    assert_int_equal(rep.items[1].status, CR_E_OBJECT_NOT_FOUND);
    cr__rpc_msg_free(&rep);
    it[0].key = "b";
    req = (cr__rpc_msg_t){.type = CR__RPC_EXIST, .n_items = 1, .items = it};
    cr__master_handle(m, &req, &rep, 2);
    assert_int_equal(rep.status, 0);
    cr__rpc_msg_free(&rep);
    assert_int_equal(cr__master_remove(m, "a", 1, 0, 3), CR_E_OBJECT_HAS_LEASE);
    assert_int_equal(cr__master_remove(m, "b", 1, 0, 3), 0);
    /* the header flag round-trips through the codec */
    req.hflags = CR__RPC_HF_LEASE;
    cr__rpc_buf_t b;
    cr__rpc_buf_init(&b);
    assert_int_equal(cr__rpc_encode(&req, &b), 0);
    cr__rpc_hdr_t h;
    assert_int_equal(cr__rpc_decode_hdr(b.data, &h), 0);
    assert_int_equal(h.flags, CR__RPC_HF_LEASE);
    cr__rpc_buf_free(&b);
    cr__master_destroy(m);
}

/* PutStart through the dispatch, n keys of 64 KiB: the reply's status. */
static int dispatch_put_start(cr__master_t *m, uint32_t n, uint64_t now, int *item0)
{
    cr__rpc_item_t in[2] = {{.key = "p0", .key_len = 2, .size = 64 * KiB, .cfg = {.replica_num = 1}},
                            {.key = "p1", .key_len = 2, .size = 64 * KiB, .cfg = {.replica_num = 1}}};
    cr__rpc_msg_t req = {.type = n > 1 ? CR__RPC_BATCH_PUT_START : CR__RPC_PUT_START,
                         .n_items = n, .items = in};
    cr__rpc_msg_t rep = {0};
    cr__master_handle(m, &req, &rep, now);
    int st = rep.status;
    *item0 = rep.items[0].status;
    cr__rpc_msg_free(&rep);
    return st;
}

/* A master restored from its records before any node is back has nowhere
 * to place and may evict nothing: it refuses PutStart as a whole (nothing
 * applied) with the status clients retry on, not NO_AVAILABLE_HANDLE; once
 * a segment takes allocations again (its owner back, or another node's),
 * puts go through. */
static void test_restored_refuses_puts_until_a_node_is_back(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    cr__ha_buf_t jb = {0};
    cr__master_set_journal(m, collect, &jb);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 1 * MiB, 0), 0);
    assert_int_equal(put(m, "old", 16 * KiB, 1, 0, 1, NULL, 1), 0);
    uint64_t n = 0;
    cr__master_t *m2 = restored(&jb, 100, &n);
    assert_int_equal(n, 1);
    int it0 = 0;
    cr__master_stats_t st0, st1;
    cr__master_stats(m2, &st0);
    assert_int_equal(dispatch_put_start(m2, 1, 101, &it0), CR_E_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(dispatch_put_start(m2, 2, 102, &it0), CR_E_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(it0, CR_E_UNAVAILABLE_IN_CURRENT_STATUS);
    cr__master_stats(m2, &st1);
    assert_int_equal(st1.counters[CR__MM_puts_refused_restoring_total] -
                         st0.counters[CR__MM_puts_refused_restoring_total],
                     2);
    assert_int_equal(exist(m2, "p0", 103), CR_E_OBJECT_NOT_FOUND); /* nothing applied */
    assert_int_equal(get(m2, "old", 103, NULL, NULL, NULL), 0);    /* nothing evicted */
    /* another node's fresh segment: placed there, no refusal; a put it
     * cannot take (two replicas) is "not now" while segA may come back,
     * not NO_AVAILABLE_HANDLE, and evicts nothing */
    cr__master_t *m3 = restored(&jb, 100, &n);
    assert_int_equal(cr__master_mount(m3, CB, "segB", 0x20000000, 1 * MiB, 101), 0);
    assert_int_equal(dispatch_put_start(m3, 1, 102, &it0), 0);
    assert_int_equal(put(m3, "two", 1000, 2, 0, 103, NULL, 1), CR_E_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(put(m3, "big", 1 * MiB, 1, 0, 103, NULL, 1),
                     CR_E_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(get(m3, "old", 104, NULL, NULL, NULL), 0);
    cr__master_destroy(m3);
    /* the owner back: puts go through */
    assert_int_equal(cr__master_mount(m2, CA, "segA", 0x10000000, 1 * MiB, 104), 0);
    assert_int_equal(dispatch_put_start(m2, 2, 105, &it0), 0);
    assert_int_equal(it0, 0);
    assert_int_equal(exist(m2, "old", 106), 0);
    cr__master_destroy(m2);
    cr__master_destroy(m);
    cr__ha_buf_free(&jb);
}

/* A master journaling into jb, with CA's 1 MiB segA mounted. */
static cr__master_t *journaled(cr__ha_buf_t *jb)
{
    cr__master_t *m = mk(NULL);
    cr__master_set_journal(m, collect, jb);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 1 * MiB, 0), 0);
    return m;
}

/* PutStart (one replica, seg preferred) + PutEnd; *addr: where it went. */
static int put_on(cr__master_t *m, const char *key, uint64_t size, const char *seg, uint64_t now,
                  uint64_t *addr)
{
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1, .n_preferred = 1, .preferred = &seg};
    return put_cfg(m, key, size, &cfg, now, 1, NULL, addr);
}

/* PutStart + PutEnd of keys[0..n) (64 KiB each) in one batch through the
 * dispatch: 0 or the first failing status (request or item). */
static int batch_put(cr__master_t *m, const char *const *keys, uint32_t n, uint64_t now)
{
    cr__rpc_item_t in[4] = {{0}};
    for (uint32_t i = 0; i < n; i++)
        in[i] = (cr__rpc_item_t){.key = keys[i], .key_len = (uint32_t)strlen(keys[i]),
                                 .size = 64 * KiB, .cfg = {.replica_num = 1}};
    cr__rpc_msg_t req = {.type = CR__RPC_BATCH_PUT_START, .n_items = n, .items = in};
    cr__rpc_msg_t rep = {0};
    cr__master_handle(m, &req, &rep, now);
    int rc = rep.status;
    for (uint32_t i = 0; i < n && !rc; i++) {
        rc = rep.items[i].status;
        in[i].version = rep.items[i].version;
    }
    cr__rpc_msg_free(&rep);
    if (rc)
        return rc;
    req.type = CR__RPC_BATCH_PUT_END;
    cr__master_handle(m, &req, &rep, now);
    rc = rep.status;
    for (uint32_t i = 0; i < n && !rc; i++)
        rc = rep.items[i].status;
    cr__rpc_msg_free(&rep);
    return rc;
}

/* Regression: a master restarted on its journal without the nodes that held
 * some keys answered a put of those keys "exists" (the client's 0), though
 * no reader could reach their bytes: a later get missed and the new bytes
 * were never stored. A put (single, batch, upsert) of a key whose every
 * replica waits on a segment not mounted again now replaces it; Exist says
 * what a put goes by (not found); a key with a reachable replica still
 * exists; and the old node coming back with the old memory does not bring
 * the old version back, nor does a restart from the new records. */
static void test_reput_after_restart_replaces_unreachable(void **s)
{
    (void)s;
    cr__ha_buf_t jb = {0};
    cr__master_t *m = journaled(&jb);
    const char *keys[] = {"k0", "k1", "b0", "b1", "up"};
    uint64_t vold[5];
    for (int i = 0; i < 5; i++)
        assert_int_equal(put(m, keys[i], 16 * KiB, 1, 0, 1, &vold[i], 1), 0);
    /* one key kept by a node that comes back (segC) */
    assert_int_equal(cr__master_mount(m, CC, "segC", 0x30000000, 1 * MiB, 1), 0);
    assert_int_equal(put_on(m, "onC", 1000, "segC", 2, NULL), 0);
    uint64_t aold = 0;
    assert_int_equal(get(m, "k0", 3, &aold, NULL, NULL), 0);

    /* restart on the records: segA's node never comes back for now, a new
     * node (segB) takes the puts, segC's node is back */
    uint64_t n = 0;
    cr__master_t *m2 = restored(&jb, 100, &n);
    assert_int_equal(n, 6);
    /* its journal: a snapshot of the restored state, then its records */
    cr__ha_buf_t jb2 = {0};
    assert_int_equal(cr__master_dump(m2, &jb2, NULL, NULL), 0);
    cr__master_set_journal(m2, collect, &jb2);
    assert_int_equal(cr__master_mount(m2, CB, "segB", 0x20000000, 1 * MiB, 101), 0);
    assert_int_equal(cr__master_mount(m2, CC, "segC", 0x30000000, 1 * MiB, 101), 0);
    assert_int_equal(exist(m2, "k0", 102), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(exist(m2, "onC", 102), 0);
    uint64_t v = 0, a = 0, gv = 0;
    assert_int_equal(put(m2, "k0", 20 * KiB, 1, 0, 103, &v, 1), 0);
    assert_int_equal(put(m2, "k1", 20 * KiB, 1, 0, 103, NULL, 1), 0);
    const char *batch[] = {"b0", "b1"};
    assert_int_equal(batch_put(m2, batch, 2, 104), 0);
    assert_int_equal(put(m2, "up", 20 * KiB, 1, CR__RPC_CFG_UPSERT, 104, NULL, 1), 0);
    uint64_t vnew[5], anew[5];
    for (int i = 0; i < 5; i++) {
        /* the new bytes, on a node that is there (segB or segC) */
        assert_int_equal(get(m2, keys[i], 105, &a, &vnew[i], NULL), 0);
        assert_true(vnew[i] > vold[i]);
        anew[i] = a;
        assert_true(a >= 0x20000000);
        assert_int_equal(exist(m2, keys[i], 105), 0);
    }
    assert_int_equal(vnew[0], v);
    /* reachable: today's answer, nothing changed */
    assert_int_equal(put(m2, "onC", 1000, 1, 0, 105, NULL, 1), CR_E_OBJECT_ALREADY_EXISTS);
    cr__master_stats_t st;
    cr__master_stats(m2, &st);
    assert_int_equal(st.counters[CR__MM_puts_replaced_unreachable_total], 5);
    assert_int_equal(st.keys, 6);

    /* segA's node comes back with the old memory: the key keeps the new
     * version, and the old blocks are free space once their lease is over */
    assert_int_equal(cr__master_mount(m2, CA, "segA", 0x10000000, 1 * MiB, 106), 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(get(m2, keys[i], 107, &a, &gv, NULL), 0);
        assert_int_equal(gv, vnew[i]);
        assert_int_equal(a, anew[i]);
    }
    uint32_t f;
    cr__master_ping(m2, CA, 6000, &f);
    cr__master_tick(m2, 6000); /* past the restored objects' lease */
    assert_int_equal(put_on(m2, "onA", 16 * KiB, "segA", 6001, &a), 0);
    assert_int_equal(a, aold); /* the old k0 space, reused */

    /* a restart on the restarted master's journal: the new versions */
    cr__master_t *m3 = restored(&jb2, 7000, &n);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(get(m3, keys[i], 7001, NULL, &gv, NULL), 0);
        assert_int_equal(gv, vnew[i]);
    }
    cr__master_destroy(m3);
    cr__master_destroy(m2);
    cr__master_destroy(m);
    cr__ha_buf_free(&jb2);
    cr__ha_buf_free(&jb);
}

/* A put that cannot be placed leaves the unreachable object as it was (its
 * node may still come back): a failed call has no side effects. */
static void test_reput_not_placed_keeps_the_old_object(void **s)
{
    (void)s;
    cr__ha_buf_t jb = {0};
    cr__master_t *m = journaled(&jb);
    uint64_t vold = 0, gv = 0;
    assert_int_equal(put(m, "k", 16 * KiB, 1, 0, 1, &vold, 1), 0);
    uint64_t n = 0;
    cr__master_t *m2 = restored(&jb, 100, &n);
    assert_int_equal(cr__master_mount(m2, CB, "segB", 0x20000000, 1 * MiB, 101), 0);
    /* two replicas: one node takes allocations, so "not now" */
    assert_int_equal(put(m2, "k", 16 * KiB, 2, 0, 102, NULL, 1), CR_E_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(cr__master_mount(m2, CA, "segA", 0x10000000, 1 * MiB, 103), 0);
    assert_int_equal(get(m2, "k", 104, NULL, &gv, NULL), 0);
    assert_int_equal(gv, vold);
    assert_int_equal(put(m2, "k", 16 * KiB, 1, 0, 104, NULL, 1), CR_E_OBJECT_ALREADY_EXISTS);
    cr__master_destroy(m2);
    cr__master_destroy(m);
    cr__ha_buf_free(&jb);
}

static int count_win(void *u, const cr__ha_win_t *w)
{
    (void)w;
    (*(int *)u)++;
    return 0;
}

/* HA allocation windows (store-ha.md, "One wait per put"): a PutStart
 * carved from a window its standbys know needs no wait; a master restored
 * from records that never heard of such a PutStart keeps the window's free
 * space quarantined for two put timeouts, so the lost put's writer cannot
 * overwrite a new object there. */
static void test_window_put_start_unwaited(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    cr__ha_buf_t jb = {0};
    cr__master_set_journal(m, collect, &jb);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 4 * MiB, 0), 0);
    cr__master_windows(m, 1);
    uint64_t va = 0, vb = 0, aa = 0, ab = 0;
    /* the first small PutStart opens the window (WIN): it must wait */
    cr__master_wait_reset();
    assert_int_equal(put(m, "a", 4000, 1, 0, 1, &va, 0), 0);
    assert_int_equal(cr__master_wait_needed(), 1);
    cr__master_win_confirm(m, cr__master_win_gen(m)); /* its wait covered WIN */
    cr__master_wait_reset();
    assert_int_equal(cr__master_put_end(m, "a", 1, va, 1), 0);
    assert_int_equal(cr__master_wait_needed(), 1); /* a PutEnd always waits */
    assert_int_equal(cr__master_wait_prior(), 0);
    /* regression: a PutEnd retried after its reply was lost found the object
     * complete and answered at once, with no record to wait for: possibly
     * before the standbys had the first one's END. It waits for all so far. */
    cr__master_wait_reset();
    assert_int_equal(cr__master_put_end(m, "a", 1, va, 1), 0);
    assert_int_equal(cr__master_wait_needed(), 1);
    assert_int_equal(cr__master_wait_prior(), 1);
    size_t cut = jb.len; /* a standby that lacks what follows */
    cr__master_wait_reset();
    assert_int_equal(put(m, "b", 4000, 1, 0, 2, &vb, 0), 0);
    assert_int_equal(cr__master_wait_needed(), 0); /* carved from a known window */
    assert_int_equal(get(m, "a", 3, &aa, NULL, NULL), 0);
    cr__master_wait_reset();
    assert_int_equal(cr__master_put_end(m, "b", 1, vb, 3), 0);
    assert_int_equal(get(m, "b", 3, &ab, NULL, NULL), 0);
    assert_int_equal(ab, aa + 4032); /* bump allocation (64-byte granules) */
    /* a replica over a quarter of the window: allocated normally, waits */
    cr__master_wait_reset();
    assert_int_equal(put(m, "big", 200 * KiB, 1, 0, 4, NULL, 1), 0);
    assert_int_equal(cr__master_wait_needed(), 1);
    /* the window (256 KiB: 1/16 of the segment) is accounted as allocated */
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    assert_int_equal(st.allocated_bytes, 256 * KiB + 200 * KiB);

    /* the new leader's standby lacked b's PutStart (cut): b's writer may
     * still write at ab, so nothing new lands in the window's free part */
    cr__ha_buf_t pre = {.p = jb.p, .len = cut};
    uint64_t n = 0;
    cr__master_t *m2 = restored(&pre, 100, &n);
    assert_int_equal(n, 1); /* a only */
    assert_int_equal(cr__master_mount(m2, CA, "segA", 0x10000000, 4 * MiB, 101), 0);
    cr__master_stats(m2, &st);
    assert_int_equal(st.quarantine_bytes, 256 * KiB - 4032);
    for (int i = 0; i < 40; i++) {
        char k[16];
        uint64_t a = 0;
        snprintf(k, sizeof k, "n%d", i);
        assert_int_equal(put(m2, k, 4000, 1, 0, 102, NULL, 1), 0);
        assert_int_equal(get(m2, k, 102, &a, NULL, NULL), 0);
        assert_true(a + 4000 <= aa || a >= aa + 256 * KiB);
    }
    /* two put timeouts later the space is free again */
    tick_alive(m2, 100 + 2 * 30000);
    cr__master_stats(m2, &st);
    assert_int_equal(st.quarantine_bytes, 0);
    /* a snapshot carries the open window too */
    cr__ha_buf_t snap = {0};
    assert_int_equal(cr__master_dump(m, &snap, NULL, NULL), 0);
    cr__ha_shadow_t *sh;
    assert_int_equal(cr__ha_shadow_create(&sh), 0);
    assert_int_equal(cr__ha_shadow_load(sh, snap.p, snap.len), (long)snap.len);
    int wins = 0;
    assert_int_equal(cr__ha_shadow_foreach_win(sh, count_win, &wins), 0);
    assert_int_equal(wins, 1);
    cr__ha_shadow_destroy(sh);
    cr__ha_buf_free(&snap);
    /* windows off: the rest is given back and the window closed (WINEND) */
    cr__master_windows(m, 0);
    cr__master_stats(m, &st);
    assert_int_equal(st.allocated_bytes, 2 * 4032 + 200 * KiB);
    cr__master_destroy(m2);
    cr__master_destroy(m);
    cr__ha_buf_free(&jb);
}

/* PutEnd's end-to-end checksum (checksum.c) is journaled (ENDC, and OBJ
 * with CR__HA_OBJ_CRC in snapshots): a restarted master or a promoted
 * standby returns it with the replica list, so restored objects are
 * verified by readers like the others; a put ended without one restores
 * without one. */
static int get_crc(cr__master_t *m, const char *key, uint64_t now, uint32_t *crc)
{
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    int rc = cr__master_get_replicas(m, key, strlen(key), now, &msg, &it);
    if (rc == 0)
        rc = (it.flags & CR__RPC_F_CRC) ? 0 : -ENOENT;
    if (rc == 0)
        *crc = it.crc;
    cr__rpc_msg_free(&msg);
    return rc;
}

static void test_crc_journaled(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    cr__ha_buf_t jb = {0};
    cr__master_set_journal(m, collect, &jb);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 4 * MiB, 0), 0);
    uint64_t vc = 0, vn = 0;
    assert_int_equal(put(m, "withcrc", 5000, 1, 0, 1, &vc, 0), 0);
    assert_int_equal(put(m, "nocrc", 5000, 1, 0, 1, &vn, 0), 0);
    cr__rpc_item_t ends[2] = {
        {.key = "withcrc", .key_len = 7, .version = vc, .flags = CR__RPC_F_CRC, .crc = 0xdeadbeefu},
        {.key = "nocrc", .key_len = 5, .version = vn}};
    cr__rpc_msg_t req = {.type = CR__RPC_BATCH_PUT_END, .n_items = 2, .items = ends};
    cr__rpc_msg_t rep = {.type = CR__RPC_BATCH_PUT_END | CR__RPC_REPLY};
    cr__master_handle(m, &req, &rep, 2);
    assert_int_equal(rep.items[0].status, 0);
    assert_int_equal(rep.items[1].status, 0);
    cr__rpc_msg_free(&rep);
    uint32_t crc = 0;
    assert_int_equal(get_crc(m, "withcrc", 3, &crc), 0);
    assert_int_equal(crc, 0xdeadbeefu);
    /* the stream (journal) and the snapshot both carry it */
    cr__ha_buf_t snap = {0};
    assert_int_equal(cr__master_dump(m, &snap, NULL, NULL), 0);
    const cr__ha_buf_t *srcs[2] = {&jb, &snap};
    for (int i = 0; i < 2; i++) {
        uint64_t n = 0;
        cr__master_t *m2 = restored(srcs[i], 100, &n);
        assert_int_equal(n, 2);
        crc = 0;
        assert_int_equal(get_crc(m2, "withcrc", 101, &crc), 0);
        assert_int_equal(crc, 0xdeadbeefu);
        assert_int_equal(get_crc(m2, "nocrc", 101, &crc), -ENOENT);
        cr__master_destroy(m2);
    }
    /* the record round trip: ENDC decodes to the same fields */
    cr__ha_rec_t *rec = malloc(sizeof *rec);
    assert_non_null(rec);
    size_t off = 0;
    int endc = 0;
    while (off < jb.len) {
        long k = cr__ha_rec_get(jb.p + off, jb.len - off, rec);
        assert_true(k > 0);
        if (rec->type == CR__HA_ENDC) {
            endc++;
            assert_int_equal(rec->crc, 0xdeadbeefu);
            assert_int_equal(rec->version, vc);
            assert_memory_equal(rec->key, "withcrc", 7);
        }
        off += (size_t)k;
    }
    assert_int_equal(endc, 1);
    free(rec);
    cr__ha_buf_free(&snap);
    cr__ha_buf_free(&jb);
    cr__master_destroy(m);
}

/* A master rebuilt from another's op records serves the same objects at
 * the same addresses; puts in flight can still end; restored segments take
 * no new allocation until their owner mounts them again, and are dropped
 * if it does not come back within the client ttl. */
static void test_restore_from_journal(void **s)
{
    (void)s;
    cr__master_t *m = mk(NULL);
    cr__ha_buf_t jb = {0};
    cr__master_set_journal(m, collect, &jb);
    assert_int_equal(cr__master_mount(m, CA, "segA", 0x10000000, 4 * MiB, 0), 0);
    assert_int_equal(cr__master_mount(m, CB, "segB", 0x20000000, 4 * MiB, 0), 0);
    uint64_t vx = 0, vy = 0, ax = 0, ver = 0;
    assert_int_equal(put(m, "x", 300 * KiB, 2, 0, 1, &vx, 1), 0);
    assert_int_equal(put(m, "y", 5000, 1, 0, 1, &vy, 0), 0); /* in flight */
    assert_int_equal(put(m, "z", 5000, 1, 0, 1, NULL, 1), 0);
    assert_int_equal(cr__master_remove(m, "z", 1, 1, 2), 0);
    const char *pb[] = {"segB"};
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1, .n_preferred = 1, .preferred = pb};
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    assert_int_equal(cr__master_put_start(m, "onB", 3, 1000, &cfg, 2, &msg, &it), 0);
    assert_int_equal(cr__master_put_end(m, "onB", 3, it.version, 2), 0);
    cr__rpc_msg_free(&msg);
    for (int i = 0; i < 100; i++) { /* churn: reuse and eviction-free frees */
        char k[16];
        snprintf(k, sizeof k, "c%d", i);
        assert_int_equal(put(m, k, 1000 + (uint64_t)i * 97, 1, 0, 3, NULL, 1), 0);
        if (i % 3)
            assert_int_equal(cr__master_remove(m, k, strlen(k), 1, 3), 0);
    }
    assert_int_equal(get(m, "x", 4, &ax, &ver, NULL), 0);
    assert_int_equal(ver, vx);
    /* a record with a flipped byte is refused */
    cr__ha_rec_t rec;
    assert_true(cr__ha_rec_get(jb.p, jb.len, &rec) > 0);
    jb.p[CR__HA_FRAME_HDR + 3] ^= 1;
    assert_int_equal(cr__ha_rec_get(jb.p, jb.len, &rec), -EBADMSG);
    jb.p[CR__HA_FRAME_HDR + 3] ^= 1;
    /* a torn tail is left over */
    cr__ha_shadow_t *sh;
    assert_int_equal(cr__ha_shadow_create(&sh), 0);
    long used = cr__ha_shadow_load(sh, jb.p, jb.len - 3);
    assert_true(used > 0 && (size_t)used < jb.len - 3);
    cr__ha_shadow_destroy(sh);

    uint64_t n = 0;
    cr__master_t *m2 = restored(&jb, 100, &n);
    assert_int_equal(n, 3 + 34); /* x, y (pending), onB, 34 survivors of the churn */
    uint64_t a2, v2;
    uint32_t nrep;
    assert_int_equal(get(m2, "x", 101, &a2, &v2, &nrep), 0);
    assert_int_equal(a2, ax);
    assert_int_equal(v2, vx);
    assert_int_equal(nrep, 2);
    assert_int_equal(exist(m2, "z", 101), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(exist(m2, "c1", 101), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(get(m2, "c3", 101, NULL, NULL, NULL), 0);
    /* its node not back yet: not reachable, so not there for Exist (a put
     * of it would replace it) */
    assert_int_equal(exist(m2, "c3", 101), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(cr__master_put_end(m2, "y", 1, vy, 102), 0); /* the put in flight ends */
    /* the same as a dump: the snapshot path gives the same state */
    cr__ha_buf_t snap = {0};
    assert_int_equal(cr__master_dump(m, &snap, NULL, NULL), 0);
    uint64_t n3 = 0;
    cr__master_t *m3 = restored(&snap, 100, &n3);
    assert_int_equal(n3, n);
    cr__master_destroy(m3);
    cr__ha_buf_free(&snap);
    /* detached: no new allocation; a stranger cannot take the names */
    assert_int_equal(put(m2, "new", 1000, 1, 0, 103, NULL, 1), CR_E_UNAVAILABLE_IN_CURRENT_STATUS);
    assert_int_equal(cr__master_mount(m2, CC, "segA", 0x10000000, 4 * MiB, 103),
                     CR_E_SEGMENT_ALREADY_EXISTS);
    assert_int_equal(cr__master_mount(m2, CA, "segA", 0x10000000, 2 * MiB, 103),
                     CR_E_SEGMENT_ALREADY_EXISTS);
    /* the owner is back: new puts never overlap restored objects */
    assert_int_equal(cr__master_mount(m2, CA, "segA", 0x10000000, 4 * MiB, 104), 0);
    for (int i = 0; i < 20; i++) {
        char k[16];
        uint64_t a = 0, vv = 0;
        snprintf(k, sizeof k, "n%d", i);
        assert_int_equal(put(m2, k, 64 * KiB, 1, 0, 105, NULL, 1), 0);
        assert_int_equal(get(m2, k, 105, &a, &vv, NULL), 0);
        assert_true(vv > vx); /* versions never repeat */
        assert_true(a + 64 * KiB <= ax || a >= ax + 300 * KiB);
    }
    /* segB's owner never comes back: dropped after two ttls, onB lost, x
     * keeps its segA replica */
    uint32_t f;
    for (uint64_t t = 200; t <= 22000; t += 100) { /* two ttls of grace */
        cr__master_ping(m2, CA, t, &f);
        cr__master_tick(m2, t);
    }
    assert_int_equal(exist(m2, "onB", 22001), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(get(m2, "x", 22001, NULL, NULL, &nrep), 0);
    assert_int_equal(nrep, 1);
    cr__master_destroy(m2);
    cr__master_destroy(m);
    cr__ha_buf_free(&jb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_lifecycle),
        cmocka_unit_test(test_metadata_cap),
        cmocka_unit_test(test_immutable),
        cmocka_unit_test(test_lease_vs_remove),
        cmocka_unit_test(test_replicas_distinct_and_preferred),
        cmocka_unit_test(test_striping),
        cmocka_unit_test(test_client_ttl_expiry),
        cmocka_unit_test(test_master_stall_expires_nobody),
        cmocka_unit_test(test_restore_from_journal),
        cmocka_unit_test(test_crc_journaled),
        cmocka_unit_test(test_restore_evicts_oldest_first),
        cmocka_unit_test(test_restored_refuses_puts_until_a_node_is_back),
        cmocka_unit_test(test_reput_after_restart_replaces_unreachable),
        cmocka_unit_test(test_reput_not_placed_keeps_the_old_object),
        cmocka_unit_test(test_exist_lease_flag),
        cmocka_unit_test(test_dropped_restored_segment_not_held_forever),
        cmocka_unit_test(test_held_range_survives_takeover_and_restart),
        cmocka_unit_test(test_held_range_of_remounted_segment_survives_takeover),
        cmocka_unit_test(test_fresh_name_retry_adds_no_held_entry),
        cmocka_unit_test(test_held_record_bounds),
        cmocka_unit_test(test_window_put_start_unwaited),
        cmocka_unit_test(test_put_timeout_reclaim),
        cmocka_unit_test(test_quarantine_and_validate),
        cmocka_unit_test(test_quarantine_frees_due_entries_out_of_order),
        cmocka_unit_test(test_remount_hold),
        cmocka_unit_test(test_remount_hold_other_client),
        cmocka_unit_test(test_expired_node_remount_allocates_at_once),
        cmocka_unit_test(test_remount_hold_whole_fallback),
        cmocka_unit_test(test_eviction_watermark),
        cmocka_unit_test(test_eviction_skips),
        cmocka_unit_test(test_impossible_put_evicts_nothing),
        cmocka_unit_test(test_eviction_on_alloc_failure),
        cmocka_unit_test(test_eviction_soft_pin_protected),
        cmocka_unit_test(test_put_start_exclusion_list),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_dispatch_batch),
        cmocka_unit_test(test_dispatch_batch_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
