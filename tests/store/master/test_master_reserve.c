/* Client space reservations (store/master/reserve.c), driven with an
 * explicit clock through the rpc dispatch: RESERVE grants a range of one
 * segment; PUT_COMMIT makes a complete object of a range inside the
 * caller's live reservation and refuses (CR_E_INVALID_WRITE, nothing
 * visible) a range out of it, overlapping a committed one, of another
 * client, or of an expired / reclaimed reservation; an existing key gets
 * OBJECT_ALREADY_EXISTS as from PutStart (unless no reader can reach it
 * after a restart: replaced). Space a reservation held and no
 * object took is not reused before expiry + put timeout, whatever ended it
 * (expiry, client expiry, memory pressure, per-client bound); a journal /
 * new leader restores it quarantined; the per-client bounds hold. */
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
#include "store/master/master_priv.h"

#define KiB 1024ull
#define MiB (1024ull * 1024)
#define SEG_BASE 0x10000000ull
#define PUT_TIMEOUT 30000ull
#define LEASE 10000ull /* a reservation's lease: min(10 s, put timeout) */

static const cr__rpc_client_id_t CA = {1, 1}, CB = {2, 2};

static cr__master_t *mk(uint64_t client_ttl_ms)
{
    cr__master_cfg_t c;
    cr__master_cfg_default(&c);
    c.lease_ttl_ms = 5000;
    c.client_ttl_ms = client_ttl_ms;
    c.put_timeout_ms = PUT_TIMEOUT;
    cr__master_t *m;
    assert_int_equal(cr__master_create(&c, &m), 0);
    return m;
}

static void ping(cr__master_t *m, cr__rpc_client_id_t id, uint64_t now)
{
    uint32_t f;
    assert_int_equal(cr__master_ping(m, id, now, &f), 0);
}

typedef struct resv {
    uint64_t id, addr, len, granule, lease;
    char seg[64];
    int has_cap;
} resv_t;

/* Sends msg through the wire codec and the dispatch, decodes the reply. */
static void roundtrip(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *out, uint64_t now)
{
    cr__rpc_buf_t b;
    cr__rpc_buf_init(&b);
    assert_int_equal(cr__rpc_encode(req, &b), 0);
    cr__rpc_hdr_t h;
    assert_int_equal(cr__rpc_decode_hdr(b.data, &h), 0);
    cr__rpc_msg_t dreq;
    assert_int_equal(cr__rpc_decode(&h, b.data + CR__RPC_HDR_SIZE, h.payload_len, &dreq), 0);
    cr__rpc_msg_t rep = {0};
    rep.type = (uint16_t)(req->type | CR__RPC_REPLY);
    cr__master_handle(m, &dreq, &rep, now);
    cr__rpc_msg_free(&dreq);
    assert_int_equal(cr__rpc_encode(&rep, &b), 0);
    assert_int_equal(cr__rpc_decode_hdr(b.data, &h), 0);
    assert_int_equal(cr__rpc_decode(&h, b.data + CR__RPC_HDR_SIZE, h.payload_len, out), 0);
    cr__rpc_msg_free(&rep);
    cr__rpc_buf_free(&b);
}

/* RESERVE, handing back reservation back_id's tail at back_cur (0: none),
 * avoiding the segments avoid[0..n_avoid) (items[].key). */
static int reserve_avoiding(cr__master_t *m, cr__rpc_client_id_t id, uint64_t want, uint64_t now,
                            uint64_t back_id, uint64_t back_cur, const char **avoid,
                            uint32_t n_avoid, resv_t *r)
{
    cr__rpc_msg_t req = {0}, rep;
    cr__rpc_item_t items[4] = {{0}};
    assert_true(n_avoid <= 4);
    for (uint32_t i = 0; i < n_avoid; i++)
        items[i] = (cr__rpc_item_t){.key = avoid[i], .key_len = (uint32_t)strlen(avoid[i])};
    req.type = CR__RPC_RESERVE;
    req.client_id = id;
    req.size = want;
    req.count = back_id;
    req.base = back_cur;
    req.n_items = n_avoid;
    req.items = n_avoid ? items : NULL;
    roundtrip(m, &req, &rep, now);
    int rc = rep.status;
    if (rc == 0 && want == 0)
        assert_int_equal(rep.n_items, 0); /* a release */
    else if (rc == 0) {
        assert_int_equal(rep.n_items, 1);
        const cr__rpc_item_t *it = &rep.items[0];
        assert_int_equal(it->n_replicas, 1);
        assert_int_equal(it->replicas[0].n_shards, 1);
        r->id = it->version;
        r->addr = it->replicas[0].shards[0].addr;
        r->len = it->replicas[0].shards[0].len;
        assert_int_equal(r->len, it->size);
        r->granule = it->replica_id;
        r->lease = rep.count;
        r->has_cap = it->replicas[0].shards[0].cap != NULL;
        snprintf(r->seg, sizeof r->seg, "%s", it->replicas[0].shards[0].segment);
    }
    cr__rpc_msg_free(&rep);
    return rc;
}

static int reserve_back(cr__master_t *m, cr__rpc_client_id_t id, uint64_t want, uint64_t now,
                        uint64_t back_id, uint64_t back_cur, resv_t *r)
{
    return reserve_avoiding(m, id, want, now, back_id, back_cur, NULL, 0, r);
}

static int reserve(cr__master_t *m, cr__rpc_client_id_t id, uint64_t want, uint64_t now,
                   resv_t *r)
{
    return reserve_back(m, id, want, now, 0, 0, r);
}

/* One PUT_COMMIT item (crc 0x1234 + the key's first byte). */
static int commit(cr__master_t *m, cr__rpc_client_id_t id, const char *key, uint64_t resv_id,
                  const char *seg, uint64_t addr, uint64_t size, uint64_t now, uint64_t *ver)
{
    cr__rpc_msg_t req = {0}, rep;
    cr__rpc_shard_t sh = {.segment = seg, .addr = addr, .len = size};
    cr__rpc_replica_t rp = {.n_shards = 1, .shards = &sh};
    cr__rpc_item_t it = {.key = key,
                         .key_len = (uint32_t)strlen(key),
                         .size = size,
                         .version = resv_id,
                         .flags = CR__RPC_F_CRC,
                         .replica_id = 0x1234u + (uint8_t)key[0],
                         .n_replicas = 1,
                         .replicas = &rp};
    req.type = CR__RPC_PUT_COMMIT;
    req.client_id = id;
    req.n_items = 1;
    req.items = &it;
    roundtrip(m, &req, &rep, now);
    assert_int_equal(rep.status, 0);
    assert_int_equal(rep.n_items, 1);
    int rc = rep.items[0].status;
    if (rc == 0 && ver)
        *ver = rep.items[0].version;
    cr__rpc_msg_free(&rep);
    return rc;
}

/* GetReplicaList: version, address of replica 0, crc. */
static int get(cr__master_t *m, const char *key, uint64_t now, uint64_t *ver, uint64_t *addr,
               uint32_t *crc)
{
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    int rc = cr__master_get_replicas(m, key, strlen(key), now, &msg, &it);
    if (rc == 0) {
        if (ver)
            *ver = it.version;
        if (addr)
            *addr = it.replicas[0].shards[0].addr;
        if (crc)
            *crc = (it.flags & CR__RPC_F_CRC) ? it.crc : 0;
    }
    cr__rpc_msg_free(&msg);
    return rc;
}

/* PutStart + PutEnd; *addr of its replica. */
static int put2(cr__master_t *m, const char *key, uint64_t size, uint64_t now, uint64_t *addr)
{
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    cr__rpc_repl_cfg_t cfg = {.replica_num = 1};
    int rc = cr__master_put_start(m, key, strlen(key), size, &cfg, now, &msg, &it);
    if (rc == 0) {
        if (addr)
            *addr = it.replicas[0].shards[0].addr;
        rc = cr__master_put_end(m, key, strlen(key), it.version, now);
    }
    cr__rpc_msg_free(&msg);
    return rc;
}

static uint64_t counter(cr__master_t *m, int idx)
{
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    return st.counters[idx];
}

static cr__master_stats_t stats(cr__master_t *m)
{
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    return st;
}

static int exist(cr__master_t *m, const char *key, uint64_t now)
{
    return cr__master_exist(m, key, strlen(key), now);
}

/* A 16 MiB segment: reservations are 1 MiB (1/16 of it). */
static cr__master_t *mk_mounted(uint64_t client_ttl_ms)
{
    cr__master_t *m = mk(client_ttl_ms);
    ping(m, CA, 0);
    ping(m, CB, 0);
    assert_int_equal(cr__master_mount(m, CA, "segA", SEG_BASE, 16 * MiB, 0), 0);
    return m;
}

static void test_commit_makes_complete_object(void **s)
{
    (void)s;
    cr__master_t *m = mk_mounted(1000000);
    resv_t r;
    assert_int_equal(reserve(m, CA, 64 * MiB, 1, &r), 0);
    assert_string_equal(r.seg, "segA");
    assert_int_equal(r.len, 1 * MiB); /* bounded: 1/16 of the segment */
    assert_int_equal(r.lease, LEASE);
    assert_int_equal(r.granule, 64);
    assert_true(r.addr >= SEG_BASE && r.addr + r.len <= SEG_BASE + 16 * MiB);
    assert_int_equal(stats(m).allocated_bytes, 1 * MiB);
    /* nothing visible before the commit */
    assert_int_equal(exist(m, "k1", 2), CR_E_OBJECT_NOT_FOUND);
    uint64_t v1 = 0, v2 = 0, gv = 0, ga = 0;
    uint32_t crc = 0;
    assert_int_equal(commit(m, CA, "k1", r.id, r.seg, r.addr, 4096, 2, &v1), 0);
    assert_int_equal(get(m, "k1", 3, &gv, &ga, &crc), 0);
    assert_int_equal(gv, v1);
    assert_int_equal(ga, r.addr);
    assert_int_equal(crc, 0x1234u + 'k');
    uint64_t size = 0;
    assert_int_equal(cr__master_get_size(m, "k1", 2, 3, &size), 0);
    assert_int_equal(size, 4096);
    /* the next value further on (a gap of one granule skipped) */
    assert_int_equal(commit(m, CA, "k2", r.id, r.seg, r.addr + 4096 + 64, 100, 4, &v2), 0);
    assert_true(v2 > v1);
    /* a retried commit that landed answers the same object */
    uint64_t v2b = 0;
    assert_int_equal(commit(m, CA, "k2", r.id, r.seg, r.addr + 4096 + 64, 100, 5, &v2b), 0);
    assert_int_equal(v2b, v2);
    /* an existing key: PutStart's answer, nothing changes */
    assert_int_equal(commit(m, CA, "k1", r.id, r.seg, r.addr + 8192, 4096, 5, NULL),
                     CR_E_OBJECT_ALREADY_EXISTS);
    assert_int_equal(get(m, "k1", 5, &gv, &ga, NULL), 0);
    assert_int_equal(gv, v1);
    assert_int_equal(ga, r.addr);
    /* ... and the range it named is still free to commit */
    assert_int_equal(commit(m, CA, "k3", r.id, r.seg, r.addr + 8192, 4096, 5, NULL), 0);
    /* all of it accounted once: still the reservation's megabyte */
    assert_int_equal(stats(m).allocated_bytes, 1 * MiB);
    /* objects made by a commit live like others: removed, their space freed */
    assert_int_equal(cr__master_remove(m, "k3", 2, 1, 6), 0);
    assert_int_equal(exist(m, "k3", 6), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(stats(m).allocated_bytes, 1 * MiB - 4096);
    assert_int_equal(counter(m, CR__MM_put_commits_total), 3);
    assert_int_equal(counter(m, CR__MM_reservations_granted_total), 1);
    cr__master_destroy(m);
}

/* A RESERVE names the client's suspect segments (items[].key): no
 * reservation there (the client would not carve from it), and none at
 * all when only those have room (its puts go two-phase, where the master
 * may evict elsewhere). */
static void test_reserve_avoids_suspect_segments(void **s)
{
    (void)s;
    cr__master_t *m = mk_mounted(1000000);
    assert_int_equal(cr__master_mount(m, CB, "segB", SEG_BASE + 64 * MiB, 16 * MiB, 0), 0);
    const char *avoid[] = {"segA", "no-such-segment", "segB"};
    resv_t r;
    for (int i = 0; i < 4; i++) { /* the rotating cursor would alternate */
        assert_int_equal(reserve_avoiding(m, CA, 1 * MiB, 1, 0, 0, avoid, 2, &r), 0);
        assert_string_equal(r.seg, "segB");
    }
    assert_int_equal(reserve_avoiding(m, CA, 1 * MiB, 1, 0, 0, avoid, 3, &r),
                     CR_E_NO_AVAILABLE_HANDLE);
    assert_int_equal(reserve_avoiding(m, CA, 1 * MiB, 1, 0, 0, avoid + 2, 1, &r), 0);
    assert_string_equal(r.seg, "segA");
    cr__master_destroy(m);
}

static void test_commit_refused_leaves_nothing(void **s)
{
    (void)s;
    cr__master_t *m = mk_mounted(1000000);
    resv_t r;
    assert_int_equal(reserve(m, CA, 1 * MiB, 1, &r), 0);
    assert_int_equal(commit(m, CA, "a", r.id, r.seg, r.addr + 64 * KiB, 4096, 2, NULL), 0);
    struct {
        const char *why;
        cr__rpc_client_id_t id;
        uint64_t resv, addr, size;
        const char *seg;
    } bad[] = {
        {"before the reservation", CA, r.id, r.addr - 4096, 4096, r.seg},
        {"past its end", CA, r.id, r.addr + r.len, 4096, r.seg},
        {"crossing its end", CA, r.id, r.addr + r.len - 4096, 8192, r.seg},
        {"overlapping a committed value", CA, r.id, r.addr + 64 * KiB, 4096, r.seg},
        {"below the commit cursor", CA, r.id, r.addr, 4096, r.seg},
        {"not granule-aligned", CA, r.id, r.addr + 128 * KiB + 8, 4096, r.seg},
        {"another client's reservation", CB, r.id, r.addr + 128 * KiB, 4096, r.seg},
        {"another segment name", CA, r.id, r.addr + 128 * KiB, 4096, "segB"},
        {"an unknown reservation", CA, r.id + 99, r.addr + 128 * KiB, 4096, r.seg},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = commit(m, bad[i].id, "x", bad[i].resv, bad[i].seg, bad[i].addr, bad[i].size, 3,
                        NULL);
        if (rc != CR_E_INVALID_WRITE)
            fail_msg("commit %s: got %d, want %d", bad[i].why, rc, CR_E_INVALID_WRITE);
        assert_int_equal(exist(m, "x", 3), CR_E_OBJECT_NOT_FOUND);
    }
    /* expired: refused from its expiry on, even before the tick */
    assert_int_equal(commit(m, CA, "late", r.id, r.seg, r.addr + 256 * KiB, 4096, 1 + LEASE, NULL),
                     CR_E_INVALID_WRITE);
    assert_int_equal(exist(m, "late", 1 + LEASE), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(counter(m, CR__MM_put_commits_refused_total), 10);
    /* a client the master does not know gets no reservation */
    const cr__rpc_client_id_t stranger = {9, 9};
    resv_t r2;
    assert_int_equal(reserve(m, stranger, 1 * MiB, 2, &r2), CR_E_CLIENT_NOT_FOUND);
    cr__master_destroy(m);
}

/* Every address a later two-phase put of 64 KiB gets lies outside [lo, hi). */
static void fill_outside(cr__master_t *m, const char *tag, int n, uint64_t now, uint64_t lo,
                         uint64_t hi)
{
    for (int i = 0; i < n; i++) {
        char k[32];
        uint64_t a = 0;
        snprintf(k, sizeof k, "%s%d", tag, i);
        int rc = put2(m, k, 64 * KiB, now, &a);
        if (rc)
            break; /* the pool is full: fine, nothing landed inside */
        if (a + 64 * KiB > lo && a < hi)
            fail_msg("%s landed at %#llx inside the quarantined reservation [%#llx, %#llx)", k,
                     (unsigned long long)a, (unsigned long long)lo, (unsigned long long)hi);
    }
}

static void test_quarantine_after_expiry(void **s)
{
    (void)s;
    cr__master_t *m = mk_mounted(1000000);
    resv_t r;
    assert_int_equal(reserve(m, CA, 1 * MiB, 0, &r), 0);
    assert_int_equal(commit(m, CA, "a", r.id, r.seg, r.addr, 4096, 1, NULL), 0);
    cr__master_tick(m, LEASE); /* expired: closed, its rest quarantined */
    assert_int_equal(counter(m, CR__MM_reservations_expired_total), 1);
    assert_int_equal(stats(m).quarantine_bytes, 1 * MiB - 4096);
    /* until expiry + put timeout, no other object lands there */
    fill_outside(m, "f", 200, LEASE + 1, r.addr + 4096, r.addr + r.len);
    ping(m, CA, LEASE + PUT_TIMEOUT - 1);
    cr__master_tick(m, LEASE + PUT_TIMEOUT - 1);
    assert_int_equal(stats(m).quarantine_bytes, 1 * MiB - 4096);
    ping(m, CA, LEASE + PUT_TIMEOUT);
    cr__master_tick(m, LEASE + PUT_TIMEOUT);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    assert_int_equal(exist(m, "a", LEASE + PUT_TIMEOUT), 0); /* the committed value stays */
    cr__master_destroy(m);
}

static void test_quarantine_after_client_expiry(void **s)
{
    (void)s;
    cr__master_t *m = mk(1000);
    ping(m, CA, 0);
    ping(m, CB, 0);
    assert_int_equal(cr__master_mount(m, CA, "segA", SEG_BASE, 16 * MiB, 0), 0);
    resv_t r;
    assert_int_equal(reserve(m, CB, 1 * MiB, 0, &r), 0); /* B holds part of A's segment */
    /* B goes silent (A keeps pinging): its reservation is reclaimed... */
    for (uint64_t t = 500; t <= 2000; t += 500) {
        ping(m, CA, t);
        cr__master_tick(m, t);
    }
    assert_int_equal(counter(m, CR__MM_reservations_reclaimed_total), 1);
    /* ...but its space stays quarantined until expiry + put timeout */
    assert_int_equal(stats(m).quarantine_bytes, 1 * MiB);
    fill_outside(m, "g", 200, 2001, r.addr, r.addr + r.len);
    ping(m, CA, LEASE + PUT_TIMEOUT);
    cr__master_tick(m, LEASE + PUT_TIMEOUT);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    cr__master_destroy(m);
}

static void test_pool_full_reclaims_reservations(void **s)
{
    (void)s;
    cr__master_t *m = mk_mounted(1000000);
    resv_t r1, r2;
    assert_int_equal(reserve(m, CA, 1 * MiB, 0, &r1), 0);
    assert_int_equal(reserve(m, CB, 1 * MiB, 0, &r2), 0);
    /* fill the rest with hard-pinned objects (eviction cannot free them) */
    int n = 0;
    for (;; n++) {
        char k[32];
        snprintf(k, sizeof k, "pin%d", n);
        cr__rpc_msg_t msg = {0};
        cr__rpc_item_t it = {0};
        cr__rpc_repl_cfg_t cfg = {.replica_num = 1, .flags = CR__RPC_CFG_HARD_PIN};
        int rc = cr__master_put_start(m, k, strlen(k), 512 * KiB, &cfg, 1, &msg, &it);
        cr__rpc_msg_free(&msg);
        if (rc)
            break;
        assert_int_equal(cr__master_put_end(m, k, strlen(k), it.version, 1), 0);
    }
    assert_int_equal(n, 28); /* 16 MiB - 2 reservations */
    /* that failed placement closed both reservations */
    assert_int_equal(counter(m, CR__MM_reservations_reclaimed_total), 2);
    assert_int_equal(commit(m, CA, "c", r1.id, r1.seg, r1.addr, 4096, 2, NULL),
                     CR_E_INVALID_WRITE);
    assert_int_equal(stats(m).quarantine_bytes, 2 * MiB);
    /* the space comes back after expiry + put timeout, and puts work */
    uint64_t t = LEASE + PUT_TIMEOUT;
    ping(m, CA, t);
    ping(m, CB, t);
    cr__master_tick(m, t);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    assert_int_equal(put2(m, "after", 512 * KiB, t, NULL), 0);
    resv_t r3;
    assert_int_equal(reserve(m, CA, 1 * MiB, t, &r3), 0);
    assert_int_equal(commit(m, CA, "c", r3.id, r3.seg, r3.addr, 4096, t, NULL), 0);
    cr__master_destroy(m);
}

static void test_bounds_per_client(void **s)
{
    (void)s;
    cr__master_t *m = mk(1000000);
    ping(m, CA, 0);
    ping(m, CB, 0);
    /* 8 GiB: reservations of 64 MiB (the cap), room for the bound */
    assert_int_equal(cr__master_mount(m, CA, "segA", SEG_BASE, 8192 * MiB, 0), 0);
    resv_t r[3];
    assert_int_equal(reserve(m, CA, 256 * MiB, 0, &r[0]), 0);
    assert_int_equal(r[0].len, 64 * MiB);
    assert_int_equal(reserve(m, CA, 256 * MiB, 1, &r[1]), 0);
    /* a third one closes the oldest (two open per client) */
    assert_int_equal(reserve(m, CA, 256 * MiB, 2, &r[2]), 0);
    assert_int_equal(commit(m, CA, "o", r[0].id, r[0].seg, r[0].addr, 64, 3, NULL),
                     CR_E_INVALID_WRITE);
    assert_int_equal(commit(m, CA, "o", r[1].id, r[1].seg, r[1].addr, 64, 3, NULL), 0);
    assert_int_equal(commit(m, CA, "p", r[2].id, r[2].seg, r[2].addr, 64, 3, NULL), 0);
    /* closed ones wait out their quarantine and count: a client churning
     * reservations is refused (64 closing) before it fills the table */
    int granted = 3, refused = 0;
    for (int i = 0; i < 100 && !refused; i++) {
        resv_t x;
        int rc = reserve(m, CA, 256 * MiB, 4, &x);
        if (rc == CR_E_UNAVAILABLE_IN_CURRENT_STATUS)
            refused = 1;
        else
            assert_int_equal(rc, 0);
        granted += rc == 0;
    }
    assert_true(refused);
    assert_int_equal(granted, 2 + 64); /* 2 open + 64 closing */
    assert_true(counter(m, CR__MM_reservations_refused_total) >= 1);
    /* another client is not affected by A's bound */
    resv_t b;
    assert_int_equal(reserve(m, CB, 64 * MiB, 5, &b), 0);
    /* once the quarantines are over, A gets reservations again */
    uint64_t t = 4 + LEASE + PUT_TIMEOUT;
    ping(m, CA, t);
    ping(m, CB, t);
    cr__master_tick(m, t);
    assert_int_equal(reserve(m, CA, 64 * MiB, t, &b), 0);
    cr__master_destroy(m);
}

/* RESERVE of 0 bytes: the client is done (cr_store_destroy, nothing in
 * flight): its rest is free at once, or (capabilities on) once the WRITE
 * grant over it has expired; a reservation never evicts an object. */
static void test_release_when_done(void **s)
{
    (void)s;
    cr__master_t *m = mk_mounted(1000000);
    resv_t r;
    assert_int_equal(reserve(m, CA, 1 * MiB, 0, &r), 0);
    assert_int_equal(commit(m, CA, "d", r.id, r.seg, r.addr, 4096, 1, NULL), 0);
    assert_int_equal(stats(m).counters[CR__MM_reserved_bytes], 1 * MiB - 4096);
    assert_int_equal(reserve(m, CA, 0, 2, &r), 0);
    assert_int_equal(stats(m).allocated_bytes, 4096);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    assert_int_equal(stats(m).counters[CR__MM_reservations], 0);
    assert_int_equal(exist(m, "d", 2), 0);
    /* with capabilities on, the grant keeps the space out of use */
    assert_int_equal(cr__master_caps_enable(m), 0);
    assert_int_equal(reserve(m, CA, 1 * MiB, 3, &r), 0);
    assert_int_equal(reserve(m, CA, 0, 4, &r), 0);
    assert_int_equal(stats(m).quarantine_bytes, 1 * MiB);
    ping(m, CA, 3 + LEASE);
    cr__master_tick(m, 3 + LEASE);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    assert_int_equal(stats(m).counters[CR__MM_reservations], 0);
    /* a pool full of objects: a reservation is refused, nothing evicted */
    for (int n = 0; n < 64; n++) { /* hard-pinned: eviction cannot make room */
        char k[32];
        snprintf(k, sizeof k, "full%d", n);
        cr__rpc_msg_t msg = {0};
        cr__rpc_item_t it = {0};
        cr__rpc_repl_cfg_t cfg = {.replica_num = 1, .flags = CR__RPC_CFG_HARD_PIN};
        int rc = cr__master_put_start(m, k, strlen(k), 1 * MiB - 4096, &cfg, 5 + LEASE, &msg, &it);
        cr__rpc_msg_free(&msg);
        if (rc)
            break;
        assert_int_equal(cr__master_put_end(m, k, strlen(k), it.version, 5 + LEASE), 0);
    }
    /* and one object eviction could take */
    assert_int_equal(put2(m, "evictable", 4096, 5 + LEASE, NULL), 0);
    uint64_t keys = stats(m).keys;
    cr__master_stats_t st = stats(m);
    assert_int_equal(reserve(m, CB, 1 * MiB, 6 + LEASE, &r), CR_E_NO_AVAILABLE_HANDLE);
    assert_int_equal(stats(m).keys, keys);
    assert_int_equal(stats(m).counters[CR__MM_evictions_total], st.counters[CR__MM_evictions_total]);
    cr__master_destroy(m);
}

static void test_unmount_holds_name(void **s)
{
    (void)s;
    cr__master_t *m = mk_mounted(1000000);
    resv_t r;
    uint64_t a = 0;
    assert_int_equal(reserve(m, CB, 1 * MiB, 0, &r), 0);
    assert_int_equal(cr__master_unmount(m, CA, "segA", 1), 0);
    assert_int_equal(commit(m, CB, "u", r.id, r.seg, r.addr, 64, 2, NULL), CR_E_INVALID_WRITE);
    /* the same memory mounted again: the rest of it takes puts at once,
     * the reservation's range nothing before its holder can no longer
     * write (expiry + put timeout) */
    assert_int_equal(cr__master_mount(m, CA, "segA", SEG_BASE, 16 * MiB, 2), 0);
    assert_int_equal(put2(m, "early", 4096, 3, &a), 0);
    assert_false(a + 4096 > r.addr && a < r.addr + r.len);
    fill_outside(m, "f", 256, 4, r.addr, r.addr + r.len);
    assert_int_equal(stats(m).quarantine_bytes, r.len);
    ping(m, CA, LEASE + PUT_TIMEOUT - 1);
    ping(m, CB, LEASE + PUT_TIMEOUT - 1);
    cr__master_tick(m, LEASE + PUT_TIMEOUT - 1);
    assert_int_equal(stats(m).quarantine_bytes, r.len);
    fill_outside(m, "g", 256, LEASE + PUT_TIMEOUT - 1, r.addr, r.addr + r.len);
    ping(m, CA, LEASE + PUT_TIMEOUT);
    ping(m, CB, LEASE + PUT_TIMEOUT);
    cr__master_tick(m, LEASE + PUT_TIMEOUT);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    assert_int_equal(put2(m, "later", 1 * MiB, LEASE + PUT_TIMEOUT, &a), 0);
    cr__master_destroy(m);
}

static void collect(void *u, const uint8_t *frame, size_t len) { cr__ha_buf_append(u, frame, len); }

static cr__master_t *restored(const cr__ha_buf_t *b, uint64_t now, uint64_t *n)
{
    cr__ha_shadow_t *sh;
    assert_int_equal(cr__ha_shadow_create(&sh), 0);
    assert_int_equal(cr__ha_shadow_load(sh, b->p, b->len), (long)b->len);
    cr__master_t *m2 = mk(1000000);
    assert_int_equal(cr__master_restore(m2, sh, now, n), 0);
    cr__ha_shadow_destroy(sh);
    return m2;
}

/* A master journaling into jb, with CA's 16 MiB segA mounted. */
static cr__master_t *journaled(cr__ha_buf_t *jb)
{
    cr__master_t *m = mk(1000000);
    cr__master_set_journal(m, collect, jb);
    ping(m, CA, 0);
    assert_int_equal(cr__master_mount(m, CA, "segA", SEG_BASE, 16 * MiB, 0), 0);
    return m;
}

static int count_win(void *u, const cr__ha_win_t *w)
{
    (void)w;
    (*(int *)u)++;
    return 0;
}

static void test_ha_journal_and_restore(void **s)
{
    (void)s;
    cr__ha_buf_t jb = {0};
    cr__master_t *m = journaled(&jb);
    resv_t r;
    /* the reservation is a change the standbys must have before the reply */
    cr__master_wait_reset();
    assert_int_equal(reserve(m, CA, 1 * MiB, 1, &r), 0);
    assert_int_equal(cr__master_wait_needed(), 1);
    cr__master_wait_reset();
    uint64_t v = 0;
    assert_int_equal(commit(m, CA, "j", r.id, r.seg, r.addr + 4096, 4096, 2, &v), 0);
    assert_int_equal(cr__master_wait_needed(), 1); /* like a PutEnd */
    assert_int_equal(cr__master_wait_prior(), 0);  /* its own record suffices */
    /* regression: the same commit retried (its reply lost while the first
     * one still waited for a slow standby) answered "done" at once, with no
     * record of its own to wait for: acknowledged before the standbys had
     * it. It now waits for every record so far. */
    size_t len = jb.len;
    uint64_t vr = 0;
    cr__master_wait_reset();
    assert_int_equal(commit(m, CA, "j", r.id, r.seg, r.addr + 4096, 4096, 2, &vr), 0);
    assert_int_equal(vr, v);
    assert_int_equal(jb.len, len); /* no record of its own */
    assert_int_equal(cr__master_wait_needed(), 1);
    assert_int_equal(cr__master_wait_prior(), 1);
    /* a refused commit confirms nothing: no such wait */
    cr__master_wait_reset();
    assert_int_equal(commit(m, CA, "j", r.id, r.seg, r.addr + 8192, 4096, 2, NULL),
                     CR_E_OBJECT_ALREADY_EXISTS);
    assert_int_equal(cr__master_wait_prior(), 0);
    /* a snapshot carries the open reservation */
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
    /* a new leader: the object with its checksum, the rest quarantined */
    uint64_t n = 0;
    cr__master_t *m2 = restored(&jb, 100, &n);
    assert_int_equal(n, 1);
    ping(m2, CA, 101);
    assert_int_equal(cr__master_mount(m2, CA, "segA", SEG_BASE, 16 * MiB, 101), 0);
    uint64_t gv = 0, ga = 0;
    uint32_t crc = 0;
    assert_int_equal(get(m2, "j", 102, &gv, &ga, &crc), 0);
    assert_int_equal(gv, v);
    assert_int_equal(ga, r.addr + 4096);
    assert_int_equal(crc, 0x1234u + 'j');
    assert_int_equal(stats(m2).quarantine_bytes, 1 * MiB - 4096);
    fill_outside(m2, "h", 200, 103, r.addr, r.addr + r.len);
    /* it does not know the reservation: the holder's commits are refused */
    assert_int_equal(commit(m2, CA, "j2", r.id, r.seg, r.addr + 8192, 4096, 104, NULL),
                     CR_E_INVALID_WRITE);
    /* a closed reservation ends (WINEND) once its quarantine is over: a
     * later restore knows nothing of it */
    cr__master_tick(m, 1 + LEASE);
    ping(m, CA, 1 + LEASE + PUT_TIMEOUT);
    cr__master_tick(m, 1 + LEASE + PUT_TIMEOUT);
    cr__master_t *m3 = restored(&jb, 1 + LEASE + PUT_TIMEOUT, &n);
    ping(m3, CA, 2 + LEASE + PUT_TIMEOUT);
    assert_int_equal(cr__master_mount(m3, CA, "segA", SEG_BASE, 16 * MiB, 2 + LEASE + PUT_TIMEOUT),
                     0);
    assert_int_equal(stats(m3).quarantine_bytes, 0);
    cr__master_destroy(m3);
    cr__master_destroy(m2);
    cr__master_destroy(m);
    cr__ha_buf_free(&jb);
}

/* Regression: after a restart on the journal, a PUT_COMMIT of a key whose
 * only replica waits on a segment its node has not mounted again was
 * answered OBJECT_ALREADY_EXISTS (the client's 0) and the new bytes were
 * never stored; it now replaces the object, as a PutStart does
 * (test_store_master's test_reput_after_restart_replaces_unreachable). */
static void test_commit_replaces_unreachable_after_restart(void **s)
{
    (void)s;
    cr__ha_buf_t jb = {0};
    cr__master_t *m = journaled(&jb);
    uint64_t vold = 0, v = 0, gv = 0, ga = 0;
    assert_int_equal(put2(m, "k", 4096, 1, NULL), 0);
    assert_int_equal(get(m, "k", 2, &vold, NULL, NULL), 0);
    uint64_t n = 0;
    cr__master_t *m2 = restored(&jb, 100, &n);
    assert_int_equal(n, 1);
    ping(m2, CB, 101);
    assert_int_equal(cr__master_mount(m2, CB, "segB", 2 * SEG_BASE, 16 * MiB, 101), 0);
    resv_t r;
    assert_int_equal(reserve(m2, CB, 1 * MiB, 102, &r), 0);
    assert_string_equal(r.seg, "segB");
    assert_int_equal(commit(m2, CB, "k", r.id, r.seg, r.addr, 4096, 103, &v), 0);
    assert_true(v > vold);
    assert_int_equal(get(m2, "k", 104, &gv, &ga, NULL), 0);
    assert_int_equal(gv, v);
    assert_int_equal(ga, r.addr);
    assert_int_equal(counter(m2, CR__MM_puts_replaced_unreachable_total), 1);
    /* segA's node back: the key keeps the committed version */
    ping(m2, CA, 105);
    assert_int_equal(cr__master_mount(m2, CA, "segA", SEG_BASE, 16 * MiB, 105), 0);
    assert_int_equal(get(m2, "k", 106, &gv, &ga, NULL), 0);
    assert_int_equal(gv, v);
    assert_int_equal(ga, r.addr);
    /* reachable now: a second commit of it is refused as before */
    assert_int_equal(commit(m2, CB, "k", r.id, r.seg, r.addr + 8192, 4096, 107, NULL),
                     CR_E_OBJECT_ALREADY_EXISTS);
    cr__master_destroy(m2);
    cr__master_destroy(m);
    cr__ha_buf_free(&jb);
}

/* A client leaving a reservation hands back its tail above its carve
 * cursor with the next RESERVE: free at once (capabilities on: once the
 * grant over it expires), nothing above the cursor commits any more, a
 * value carved below it (in flight) still does; a hand-back of another
 * client's reservation changes nothing. */
static void test_hand_back_tail(void **s)
{
    (void)s;
    cr__master_t *m = mk_mounted(1000000);
    resv_t r, r2, x;
    assert_int_equal(reserve(m, CA, 1 * MiB, 0, &r), 0);
    assert_int_equal(commit(m, CA, "t1", r.id, r.seg, r.addr, 4096, 1, NULL), 0);
    /* [4096, 8192) carved, its write in flight: the cursor is at 8192 */
    assert_int_equal(reserve_back(m, CB, 1 * MiB, 2, r.id, r.addr + 4096, &x), 0);
    assert_int_equal(counter(m, CR__MM_reservation_tail_bytes_returned_total), 0);
    assert_int_equal(reserve_back(m, CA, 1 * MiB, 3, r.id, r.addr + 8192, &r2), 0);
    assert_int_equal(counter(m, CR__MM_reservation_tail_bytes_returned_total), 1 * MiB - 8192);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    /* the object, the carved value and the two open reservations */
    assert_int_equal(stats(m).allocated_bytes, 4096 + 4096 + 1 * MiB + 1 * MiB);
    assert_int_equal(commit(m, CA, "t3", r.id, r.seg, r.addr + 8192, 4096, 4, NULL),
                     CR_E_INVALID_WRITE);
    assert_int_equal(commit(m, CA, "t2", r.id, r.seg, r.addr + 4096, 4096, 4, NULL), 0);
    /* used up: gone without a quarantine */
    assert_int_equal(stats(m).counters[CR__MM_reservations], 2); /* r2 and B's x */
    assert_int_equal(stats(m).allocated_bytes, 8192 + 2 * MiB);
    assert_int_equal(reserve(m, CB, 0, 5, &x), 0);
    /* a tail handed back with nothing carved: the whole reservation goes */
    assert_int_equal(reserve_back(m, CA, 1 * MiB, 6, r2.id, r2.addr, &r), 0);
    assert_int_equal(stats(m).allocated_bytes, 8192 + 1 * MiB);
    assert_int_equal(stats(m).counters[CR__MM_reservations], 1);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    assert_int_equal(reserve(m, CA, 0, 6, &r), 0); /* done: it does not expire below */
    /* capabilities on: the grant over the tail keeps it out of use */
    assert_int_equal(cr__master_caps_enable(m), 0);
    assert_int_equal(reserve(m, CB, 1 * MiB, 7, &x), 0);
    assert_int_equal(reserve_back(m, CB, 1 * MiB, 8, x.id, x.addr + 4096, &r2), 0);
    assert_int_equal(stats(m).quarantine_bytes, 1 * MiB - 4096);
    assert_int_equal(commit(m, CB, "t4", x.id, x.seg, x.addr, 4096, 9, NULL), 0);
    ping(m, CA, 7 + LEASE);
    ping(m, CB, 7 + LEASE);
    cr__master_tick(m, 7 + LEASE);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    cr__master_destroy(m);
}

static void test_caps_grant_covers_reservation(void **s)
{
    (void)s;
    cr__master_t *m = mk_mounted(1000000);
    assert_int_equal(cr__master_caps_enable(m), 0);
    resv_t r;
    assert_int_equal(reserve(m, CA, 1 * MiB, 1, &r), 0);
    assert_true(r.has_cap);
    cr__master_reservations(m, 0, 2);
    assert_int_equal(reserve(m, CA, 1 * MiB, 2, &r), CR_E_UNAVAILABLE_IN_CURRENT_MODE);
    cr__master_destroy(m);
}

/* A WRITE grant cannot be recalled: with capabilities on, an object's
 * space is not reused, nor the object evicted, before the grant over it
 * (PutStart's, its reservation's) expires, even once the object is
 * removed; with capabilities off the space is reused at once. */
static void test_caps_grant_outlives_object(void **s)
{
    (void)s;
    const uint64_t T = 1000000; /* a PutStart grant lives max(10 s, put timeout) = 30 s */
    uint64_t a1, a2;
    /* capabilities off: removed space is reused at once (what the test
     * below would catch) */
    cr__master_t *m = mk_mounted(10000000);
    assert_int_equal(put2(m, "w1", 1 * MiB, T, &a1), 0);
    assert_int_equal(cr__master_remove(m, "w1", 2, 0, T + 1), 0);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    assert_int_equal(put2(m, "w2", 1 * MiB, T + 2, &a2), 0);
    assert_int_equal(a2, a1);
    cr__master_destroy(m);

    m = mk_mounted(10000000);
    assert_int_equal(cr__master_caps_enable(m), 0);
    assert_int_equal(put2(m, "w1", 1 * MiB, T, &a1), 0);
    assert_int_equal(cr__master_remove(m, "w1", 2, 0, T + 1), 0);
    assert_int_equal(exist(m, "w1", T + 1), CR_E_OBJECT_NOT_FOUND); /* gone for readers */
    assert_int_equal(stats(m).quarantine_bytes, 1 * MiB);
    assert_int_equal(put2(m, "w2", 1 * MiB, T + 2, &a2), 0);
    assert_true(a2 != a1);
    cr__master_tick(m, T + PUT_TIMEOUT - 1000);
    assert_int_equal(stats(m).quarantine_bytes, 1 * MiB);
    cr__master_tick(m, T + PUT_TIMEOUT + 1000);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    /* a value committed into a reservation: held for the reservation's
     * grant (its lease, 10 s), not for a PutStart's */
    resv_t r;
    uint64_t t = T + PUT_TIMEOUT + 2000;
    ping(m, CA, t);
    assert_int_equal(reserve(m, CA, 1 * MiB, t, &r), 0);
    assert_int_equal(commit(m, CA, "c", r.id, r.seg, r.addr, 4096, t + 1, NULL), 0);
    assert_int_equal(cr__master_remove(m, "c", 1, 0, t + 2), 0);
    assert_int_equal(stats(m).quarantine_bytes, 4096);
    assert_int_equal(reserve(m, CA, 0, t + 3, &r), 0); /* done: its rest waits for the grant */
    ping(m, CA, t + LEASE + 1000);
    cr__master_tick(m, t + LEASE + 1000);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    cr__master_destroy(m);

    /* eviction leaves objects under a live grant alone, as under a lease */
    m = mk_mounted(10000000);
    assert_int_equal(cr__master_caps_enable(m), 0);
    int n = 0;
    for (; n < 64; n++) {
        char k[32];
        snprintf(k, sizeof k, "e%d", n);
        if (put2(m, k, 1 * MiB, T, NULL))
            break;
    }
    assert_true(n >= 8);
    uint64_t ev = counter(m, CR__MM_evictions_total);
    assert_int_equal(put2(m, "x", 2 * MiB, T + 1, NULL), CR_E_NO_AVAILABLE_HANDLE);
    assert_int_equal(counter(m, CR__MM_evictions_total), ev);
    assert_int_equal(exist(m, "e0", T + 1), 0);
    assert_int_equal(put2(m, "x", 2 * MiB, T + PUT_TIMEOUT + 1000, NULL), 0);
    assert_true(counter(m, CR__MM_evictions_total) > ev);
    assert_int_equal(stats(m).quarantine_bytes, 0);
    cr__master_destroy(m);
}

/* The object's 24-bit grant stamp (seconds modulo WCAP_MOD) across the
 * wrap of its clock and at today's clock: live until the grant's expiry
 * (rounded up to a second past it), never shorter; the later of two
 * stamps is kept. */
static void test_grant_stamp_wraps(void **s)
{
    (void)s;
    const uint64_t bases[] = {1000, (uint64_t)WCAP_MOD * 1000 - 5500, (uint64_t)WCAP_MOD * 1000,
                              (uint64_t)WCAP_MOD * 1000 * 3 - 1, 1796000000123ull};
    for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
        uint64_t now = bases[i];
        obj_t o;
        memset(&o, 0, sizeof o);
        o.size = CR__RPC_VALUE_MAX;
        assert_int_equal(obj_wcap_ms(&o, now), 0);
        obj_wcap_until(&o, now, now + 30000);
        assert_int_equal(o.size, CR__RPC_VALUE_MAX); /* the neighbouring bits */
        uint64_t until = obj_wcap_ms(&o, now);
        assert_true(until > now + 30000 && until <= now + 31000);
        assert_int_equal(obj_wcap_ms(&o, now + 29999), until);
        assert_int_equal(obj_wcap_ms(&o, until - 1), until);
        assert_int_equal(obj_wcap_ms(&o, until), 0);
        assert_int_equal(obj_wcap_ms(&o, until + 3600000), 0);
        /* an earlier stamp does not shorten it; a later one extends it */
        obj_wcap_until(&o, now + 1000, now + 11000);
        assert_int_equal(obj_wcap_ms(&o, now + 1000), until);
        obj_wcap_until(&o, now + 1000, now + 61000);
        assert_true(obj_wcap_ms(&o, now + 1000) > now + 61000);
        /* a grant a second past is none; one just past, at most a second */
        memset(&o, 0, sizeof o);
        obj_wcap_until(&o, now, now - 1000);
        assert_int_equal(obj_wcap_ms(&o, now), 0);
        obj_wcap_until(&o, now, now - 1);
        assert_true(obj_wcap_ms(&o, now) <= now + 1000);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_makes_complete_object),
        cmocka_unit_test(test_reserve_avoids_suspect_segments),
        cmocka_unit_test(test_commit_refused_leaves_nothing),
        cmocka_unit_test(test_quarantine_after_expiry),
        cmocka_unit_test(test_quarantine_after_client_expiry),
        cmocka_unit_test(test_pool_full_reclaims_reservations),
        cmocka_unit_test(test_bounds_per_client),
        cmocka_unit_test(test_unmount_holds_name),
        cmocka_unit_test(test_release_when_done),
        cmocka_unit_test(test_ha_journal_and_restore),
        cmocka_unit_test(test_commit_replaces_unreachable_after_restart),
        cmocka_unit_test(test_hand_back_tail),
        cmocka_unit_test(test_caps_grant_covers_reservation),
        cmocka_unit_test(test_caps_grant_outlives_object),
        cmocka_unit_test(test_grant_stamp_wraps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
