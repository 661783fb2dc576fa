/* Store client against an in-process master (the master library behind the
 * real RPC server) and several clients, each with its own transfer engine
 * on loopback: correctness of put/get (copying and zero-copy) and batches,
 * replica placement, leases, the stalled reader, eviction, master restart
 * (remount), and bad input. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/clock.h"
#include "crescent/store.h"
#include "store/client/test_hooks.h"
#include "store/master/master.h"
#include "store/rpc/server.h"

#define N_NODES 3
#define SEG_SIZE (24u << 20)
#define LEASE_MS 1000


/* Test hooks (store/client/test_hooks.h): a client that stalls for ms
 * between the master's answer and the data transfer. */
static void stall_get_hook(void *user) { usleep((useconds_t)(uintptr_t)user * 1000u); }
static void stall_put_hook(void *user, int status)
{
    (void)status;
    usleep((useconds_t)(uintptr_t)user * 1000u);
}
static void stall_gets(cr_store_t *c, unsigned ms)
{
    cr__store_test_hooks_t h = {.after_get_replicas = stall_get_hook,
                                .user = (void *)(uintptr_t)ms};
    cr__store_set_test_hooks(c, &h);
}
static void stall_puts(cr_store_t *c, unsigned ms)
{
    cr__store_test_hooks_t h = {.after_put_start = stall_put_hook,
                                .user = (void *)(uintptr_t)ms};
    cr__store_set_test_hooks(c, &h);
}
static cr__master_t *g_master;
static cr__rpc_server_t *g_server;
static uint16_t g_port;
static char g_addr[64];
static pthread_t g_tick;
static atomic_int g_tick_stop; /* read by the tick thread */
static cr_store_t *g_nodes[N_NODES];
static cr_store_t *g_cli; /* pure client */
static uint8_t *g_reg;    /* registered with g_cli */
#define REG_SIZE (40u << 20)

static void handler(void *u, const cr__rpc_msg_t *req, cr__rpc_msg_t *rep)
{
    cr__master_handle(*(cr__master_t *volatile *)u, req, rep, cr__now_ms());
}

static void *tick_main(void *a)
{
    (void)a;
    while (!g_tick_stop) {
        cr__master_tick(g_master, cr__now_ms());
        usleep(20000);
    }
    return NULL;
}

static int start_master(uint16_t port)
{
    cr__master_cfg_t c;
    cr__master_cfg_default(&c);
    c.lease_ttl_ms = LEASE_MS;
    c.client_ttl_ms = 2000;
    c.put_timeout_ms = 1000;
    c.high_watermark = 0.90;
    if (cr__master_create(&c, &g_master))
        return -1;
    cr__rpc_server_params_t p = {0};
    p.host = "127.0.0.1";
    p.port = port;
    p.n_threads = 2;
    p.fn = handler;
    p.user = &g_master;
    if (cr__rpc_server_start(&p, &g_server))
        return -1;
    g_port = cr__rpc_server_port(g_server);
    snprintf(g_addr, sizeof g_addr, "127.0.0.1:%u", g_port);
    g_tick_stop = 0;
    pthread_create(&g_tick, NULL, tick_main, NULL);
    return 0;
}

static void stop_master(void)
{
    g_tick_stop = 1;
    pthread_join(g_tick, NULL);
    cr__rpc_server_stop(g_server);
    cr__master_destroy(g_master);
    g_server = NULL;
    g_master = NULL;
}

static int make_client(uint64_t seg, uint64_t lbuf, cr_store_t **out)
{
    cr_store_params_t p = {0};
    p.field_mask = CR_STORE_PARAM_MASTER_ADDR | CR_STORE_PARAM_GLOBAL_SEGMENT_SIZE |
                   CR_STORE_PARAM_LOCAL_BUFFER_SIZE | CR_STORE_PARAM_HEARTBEAT_MS |
                   CR_STORE_PARAM_PROTOCOL;
    p.master_addr = g_addr;
    p.global_segment_size = seg;
    p.local_buffer_size = lbuf;
    p.heartbeat_ms = 100;
    p.protocol = "tcp";
    return cr_store_create(&p, out);
}

static void fill(uint8_t *b, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[i] = (uint8_t)x;
    }
}

static int check(const uint8_t *b, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (b[i] != (uint8_t)x) {
            fprintf(stderr, "byte %zu: expected %02x got %02x\n", i, (uint8_t)x, b[i]);
            return 0;
        }
    }
    return 1;
}

static int setup(void **state)
{
    (void)state;
    if (start_master(0))
        return -1;
    for (int i = 0; i < N_NODES; i++)
        if (make_client(SEG_SIZE, 1 << 20, &g_nodes[i]))
            return -1;
    if (make_client(0, 4u << 20, &g_cli))
        return -1;
    g_reg = mmap(NULL, REG_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g_reg == MAP_FAILED)
        return -1;
    return cr_store_register_buffer(g_cli, g_reg, REG_SIZE);
}

static int teardown(void **state)
{
    (void)state;
    cr_store_unregister_buffer(g_cli, g_reg);
    cr_store_destroy(g_cli);
    for (int i = 0; i < N_NODES; i++)
        cr_store_destroy(g_nodes[i]);
    munmap(g_reg, REG_SIZE);
    stop_master();
    return 0;
}

/* ---- tests ----------------------------------------------------------------- */

static void test_put_get_sizes(void **state)
{
    (void)state;
    static const size_t sizes[] = {4096, 65536, 1 << 20, 4u << 20, 9u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        char key[64];
        uint8_t *v = malloc(n), *o = malloc(n);
        assert_non_null(v);
        assert_non_null(o);
        /* copying put from unregistered memory, copying get */
        snprintf(key, sizeof key, "copy-%zu", n);
        fill(v, n, n);
        assert_int_equal(cr_store_put(g_cli, key, v, n, NULL), 0);
        assert_int_equal(cr_store_exist(g_cli, key), 1);
        uint64_t sz = 0;
        assert_int_equal(cr_store_get_size(g_cli, key, &sz), 0);
        assert_int_equal(sz, n);
        size_t got = 0;
        memset(o, 0, n);
        assert_int_equal(cr_store_get(g_cli, key, o, n, &got), 0);
        assert_int_equal(got, n);
        assert_true(check(o, n, n));
        /* zero-copy put_from / get_into through registered memory */
        snprintf(key, sizeof key, "zc-%zu", n);
        fill(g_reg, n, n + 7);
        assert_int_equal(cr_store_put_from(g_cli, key, g_reg, n, NULL), 0);
        memset(g_reg + (20u << 20), 0, n);
        assert_int_equal(cr_store_get_into(g_cli, key, g_reg + (20u << 20), n, &got), 0);
        assert_int_equal(got, n);
        assert_true(check(g_reg + (20u << 20), n, n + 7));
        /* a storage node reading: replica may be its own (memcpy path) */
        for (int k = 0; k < N_NODES; k++) {
            memset(o, 0, n);
            assert_int_equal(cr_store_get(g_nodes[k], key, o, n, &got), 0);
            assert_true(check(o, n, n + 7));
        }
        void *a = NULL;
        assert_int_equal(cr_store_get_alloc(g_cli, key, &a, &got), 0);
        assert_int_equal(got, n);
        assert_true(check(a, n, n + 7));
        free(a);
        assert_int_equal(cr_store_remove(g_cli, key, 1), 0);
        snprintf(key, sizeof key, "copy-%zu", n);
        assert_int_equal(cr_store_remove(g_cli, key, 1), 0);
        assert_int_equal(cr_store_exist(g_cli, key), 0);
        free(v);
        free(o);
    }
}

static void test_miss_and_exists(void **state)
{
    (void)state;
    uint8_t b[4096];
    size_t got;
    assert_int_equal(cr_store_get(g_cli, "no-such-key", b, sizeof b, &got), CR_E_OBJECT_NOT_FOUND);
    fill(b, sizeof b, 1);
    assert_int_equal(cr_store_put(g_cli, "dup", b, sizeof b, NULL), 0);
    assert_int_equal(cr_store_put(g_cli, "dup", b, sizeof b, NULL), CR_E_OBJECT_ALREADY_EXISTS);
    uint8_t small[100];
    got = 12345;
    assert_int_equal(cr_store_get(g_cli, "dup", small, sizeof small, &got), CR_E_BUFFER_OVERFLOW);
    assert_int_equal(got, 12345); /* untouched on failure */
    /* the failed get still took a read lease: remove without force waits */
    assert_int_equal(cr_store_remove(g_cli, "dup", 0), CR_E_OBJECT_HAS_LEASE);
    usleep((LEASE_MS + 100) * 1000);
    assert_int_equal(cr_store_remove(g_cli, "dup", 0), 0);
    assert_int_equal(cr_store_remove(g_cli, "dup", 0), CR_E_OBJECT_NOT_FOUND);
}

/* Segment names of the replicas of key, from the master's state. */
static int replica_segments(const char *key, char names[][256], int cap)
{
    cr__rpc_msg_t msg = {0};
    cr__rpc_item_t it = {0};
    int rc = cr__master_get_replicas(g_master, key, strlen(key), cr__now_ms(), &msg, &it);
    if (rc) {
        cr__rpc_msg_free(&msg);
        return rc;
    }
    int n = 0;
    for (uint32_t r = 0; r < it.n_replicas && n < cap; r++)
        snprintf(names[n++], 256, "%s", it.replicas[r].shards[0].segment);
    cr__rpc_msg_free(&msg);
    return n;
}

static void test_replicas_distinct(void **state)
{
    (void)state;
    size_t n = 1 << 20;
    fill(g_reg, n, 99);
    cr_store_replicate_config_t cfg = {.replica_num = 3};
    assert_int_equal(cr_store_put_from(g_cli, "rep3", g_reg, n, &cfg), 0);
    char names[8][256];
    int k = replica_segments("rep3", names, 8);
    assert_int_equal(k, 3);
    for (int i = 0; i < k; i++)
        for (int j = i + 1; j < k; j++)
            assert_string_not_equal(names[i], names[j]);
    /* more replicas than segments: no space on distinct segments */
    cfg.replica_num = 4;
    assert_int_equal(cr_store_put_from(g_cli, "rep4", g_reg, n, &cfg), CR_E_NO_AVAILABLE_HANDLE);
    assert_int_equal(cr_store_exist(g_cli, "rep4"), 0);
    /* preferred segment */
    const char *pref[] = {cr_store_segment_name(g_nodes[1])};
    cr_store_replicate_config_t pc = {.replica_num = 1, .preferred_segments = pref, .n_preferred = 1};
    assert_int_equal(cr_store_put_from(g_cli, "pref", g_reg, n, &pc), 0);
    assert_int_equal(replica_segments("pref", names, 8), 1);
    assert_string_equal(names[0], pref[0]);
    size_t got;
    assert_int_equal(cr_store_get_into(g_cli, "rep3", g_reg + (20u << 20), n, &got), 0);
    assert_true(check(g_reg + (20u << 20), n, 99));
    /* a storage node putting onto its own segment writes by memcpy; another
     * client reads it over the network */
    const char *own[] = {cr_store_segment_name(g_nodes[2])};
    cr_store_replicate_config_t oc = {.replica_num = 1, .preferred_segments = own, .n_preferred = 1};
    uint8_t *v = malloc(n);
    fill(v, n, 1234);
    assert_int_equal(cr_store_put(g_nodes[2], "own-seg", v, n, &oc), 0);
    assert_int_equal(replica_segments("own-seg", names, 8), 1);
    assert_string_equal(names[0], own[0]);
    memset(g_reg + (20u << 20), 0, n);
    assert_int_equal(cr_store_get_into(g_cli, "own-seg", g_reg + (20u << 20), n, &got), 0);
    assert_true(check(g_reg + (20u << 20), n, 1234));
    free(v);
    cr_store_remove(g_cli, "own-seg", 1);
    cr_store_remove(g_cli, "rep3", 1);
    cr_store_remove(g_cli, "pref", 1);
}

/* cr_store_replicate_config_t.field_mask: a field whose bit is clear is not
 * read (here an out-of-range replica_num is ignored), mask 0 reads the
 * original fields, and a bit the library does not know is refused. */
static void test_replicate_config_field_mask(void **state)
{
    (void)state;
    size_t n = 64 * 1024;
    char names[8][256];
    fill(g_reg, n, 7);
    cr_store_replicate_config_t c = {.field_mask = CR_STORE_REPL_HARD_PIN,
                                     .replica_num = CR_STORE_REPLICA_MAX + 1};
    assert_int_equal(cr_store_put_from(g_cli, "mask-1", g_reg, n, &c), 0);
    assert_int_equal(replica_segments("mask-1", names, 8), 1);
    c.field_mask = CR_STORE_REPL_REPLICA_NUM;
    c.replica_num = 2;
    assert_int_equal(cr_store_put_from(g_cli, "mask-2", g_reg, n, &c), 0);
    assert_int_equal(replica_segments("mask-2", names, 8), 2);
    c.field_mask = 0; /* CR_STORE_REPL_V1: replica_num is read */
    c.replica_num = CR_STORE_REPLICA_MAX + 1;
    assert_int_equal(cr_store_put_from(g_cli, "mask-3", g_reg, n, &c), CR_E_INVALID_PARAMS);
    c.field_mask = 1ull << 40;
    c.replica_num = 1;
    assert_int_equal(cr_store_put_from(g_cli, "mask-4", g_reg, n, &c), CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_exist(g_cli, "mask-4"), 0);
    cr_store_remove(g_cli, "mask-1", 1);
    cr_store_remove(g_cli, "mask-2", 1);
}

static void test_batch(void **state)
{
    (void)state;
    enum { N = 16 };
    const size_t sz = 64 * 1024;
    char names[N][32];
    const char *keys[N];
    const void *bufs[N];
    void *outs[N];
    size_t lens[N], caps[N], got[N];
    int res[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "batch-%d", i);
        keys[i] = names[i];
        fill(g_reg + (size_t)i * sz, sz, 1000 + i);
        bufs[i] = g_reg + (size_t)i * sz;
        lens[i] = sz;
        outs[i] = g_reg + (20u << 20) + (size_t)i * sz;
        caps[i] = sz;
    }
    keys[5] = ""; /* bad key: only that one fails */
    bufs[9] = (const void *)0x1000; /* unregistered: only that one fails */
    int rc = cr_store_batch_put_from(g_cli, keys, bufs, lens, N, NULL, res);
    assert_int_not_equal(rc, 0);
    for (int i = 0; i < N; i++) {
        int want = i == 5 ? CR_E_INVALID_KEY : i == 9 ? CR_E_INVALID_PARAMS : 0;
        if (res[i] != want)
            fprintf(stderr, "key %d: expected %d got %d\n", i, want, res[i]);
        assert_int_equal(res[i], want);
    }
    keys[5] = names[5];
    int ex[N];
    assert_int_equal(cr_store_batch_is_exist(g_cli, keys, N, ex), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(ex[i], (i == 5 || i == 9) ? 0 : 1);
    caps[3] = 100; /* too small: only that one fails */
    memset(g_reg + (20u << 20), 0, N * sz);
    rc = cr_store_batch_get_into(g_cli, keys, outs, caps, N, got, res);
    assert_int_not_equal(rc, 0);
    for (int i = 0; i < N; i++) {
        int want = i == 3 ? CR_E_BUFFER_OVERFLOW : (i == 5 || i == 9) ? CR_E_OBJECT_NOT_FOUND : 0;
        assert_int_equal(res[i], want);
        if (!want) {
            assert_int_equal(got[i], sz);
            assert_true(check(outs[i], sz, 1000 + i));
        }
    }
    uint64_t removed = 0;
    usleep((LEASE_MS + 100) * 1000); /* the gets' leases */
    assert_int_equal(cr_store_remove_all(g_cli, &removed), 0);
    assert_true(removed >= N - 2);
    assert_int_equal(cr_store_batch_is_exist(g_cli, keys, N, ex), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(ex[i], 0);
}

/* A batch big enough to run as pipelined chunks (ops.c pipe_chunks: the
 * master calls of one chunk overlap another's data): two replicas per key
 * (several TE requests per key), values of different sizes, and per-key
 * failures in different chunks (an existing key in the middle and at the
 * end for the put; a miss and a too-small buffer for the get) that fail
 * only their own key, with every other key's bytes right. */
static void test_batch_pipelined(void **state)
{
    (void)state;
    enum { N = 1040 }; /* 8 put and 4 get chunks: both chunk slots are reused */
    static char names[N][32];
    static const char *keys[N];
    static const void *bufs[N];
    static void *outs[N];
    static size_t lens[N], caps[N], got[N];
    static int res[N];
    size_t off = 0;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "pipe-%d", i);
        keys[i] = names[i];
        lens[i] = 1000 + (size_t)(i % 520) * 37;
        caps[i] = lens[i];
        bufs[i] = g_reg + off;
        outs[i] = g_reg + (20u << 20) + off;
        fill(g_reg + off, lens[i], 5000 + (uint64_t)i);
        off += lens[i];
    }
    assert_true(off < (20u << 20));
    /* already there: PutStart refuses them, in the middle and at the end */
    assert_int_equal(cr_store_put_from(g_cli, keys[150], bufs[0], lens[0], NULL), 0);
    assert_int_equal(cr_store_put_from(g_cli, keys[N - 1], bufs[0], lens[0], NULL), 0);
    cr_store_replicate_config_t cfg = {.field_mask = CR_STORE_REPL_REPLICA_NUM, .replica_num = 2};
    int rc = cr_store_batch_put_from(g_cli, keys, bufs, lens, N, &cfg, res);
    assert_int_equal(rc, CR_E_OBJECT_ALREADY_EXISTS);
    for (int i = 0; i < N; i++) {
        int want = (i == 150 || i == N - 1) ? CR_E_OBJECT_ALREADY_EXISTS : 0;
        if (res[i] != want)
            fprintf(stderr, "put key %d: expected %d got %d\n", i, want, res[i]);
        assert_int_equal(res[i], want);
    }
    keys[40] = "pipe-never-put"; /* a miss in the first chunks */
    caps[400] = 10;              /* too small, in a later chunk */
    memset(g_reg + (20u << 20), 0, off);
    rc = cr_store_batch_get_into(g_cli, keys, outs, caps, N, got, res);
    assert_int_equal(rc, CR_E_OBJECT_NOT_FOUND);
    for (int i = 0; i < N; i++) {
        int want = i == 40 ? CR_E_OBJECT_NOT_FOUND : i == 400 ? CR_E_BUFFER_OVERFLOW : 0;
        if (res[i] != want)
            fprintf(stderr, "get key %d: expected %d got %d\n", i, want, res[i]);
        assert_int_equal(res[i], want);
        if (want)
            continue;
        /* keys 150 and N-1 hold what the single puts wrote (key 0's value) */
        int single = i == 150 || i == N - 1;
        assert_int_equal(got[i], single ? lens[0] : lens[i]);
        assert_true(check(outs[i], got[i], single ? 5000 : 5000 + (uint64_t)i));
    }
    keys[40] = names[40];
    for (int i = 0; i < N; i++)
        assert_int_equal(cr_store_remove(g_cli, keys[i], 1), 0);
}

static void test_lease_blocks_remove(void **state)
{
    (void)state;
    uint8_t b[8192], o[8192];
    size_t got;
    fill(b, sizeof b, 5);
    assert_int_equal(cr_store_put(g_cli, "leased", b, sizeof b, NULL), 0);
    assert_int_equal(cr_store_get(g_cli, "leased", o, sizeof o, &got), 0);
    /* the get's lease is live for LEASE_MS */
    assert_int_equal(cr_store_remove(g_cli, "leased", 0), CR_E_OBJECT_HAS_LEASE);
    assert_int_equal(cr_store_exist(g_cli, "leased"), 1);
    usleep((LEASE_MS + 100) * 1000);
    assert_int_equal(cr_store_remove(g_cli, "leased", 0), 0);
    /* force ignores the lease */
    assert_int_equal(cr_store_put(g_cli, "leased2", b, sizeof b, NULL), 0);
    assert_int_equal(cr_store_get(g_cli, "leased2", o, sizeof o, &got), 0);
    assert_int_equal(cr_store_remove(g_cli, "leased2", 1), 0);
    assert_int_equal(cr_store_exist(g_cli, "leased2"), 0);
}

/* One batch remove: each key's status on its own (removed, missing, under
 * a lease, invalid), none poisoning the others, and force past the lease. */
static void test_batch_remove(void **state)
{
    (void)state;
    uint8_t b[4096], o[4096];
    size_t got;
    fill(b, sizeof b, 9);
    const char *keys[5] = {"brm-a", "brm-missing", "brm-leased", "", "brm-b"};
    assert_int_equal(cr_store_put(g_cli, "brm-a", b, sizeof b, NULL), 0);
    assert_int_equal(cr_store_put(g_cli, "brm-leased", b, sizeof b, NULL), 0);
    assert_int_equal(cr_store_put(g_cli, "brm-b", b, sizeof b, NULL), 0);
    assert_int_equal(cr_store_get(g_cli, "brm-leased", o, sizeof o, &got), 0);
    int res[5];
    assert_int_equal(cr_store_batch_remove(g_cli, keys, 5, 0, res), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(res[2], CR_E_OBJECT_HAS_LEASE);
    assert_int_equal(res[3], CR_E_INVALID_KEY);
    assert_int_equal(res[4], 0);
    assert_int_equal(cr_store_exist(g_cli, "brm-a"), 0);
    assert_int_equal(cr_store_exist(g_cli, "brm-b"), 0);
    assert_int_equal(cr_store_exist(g_cli, "brm-leased"), 1);
    /* a miss after a cached location: the removed key is not read */
    assert_int_equal(cr_store_get(g_cli, "brm-a", o, sizeof o, &got), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(cr_store_batch_remove(g_cli, keys + 2, 1, 1, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(cr_store_exist(g_cli, "brm-leased"), 0);
    assert_int_equal(cr_store_batch_remove(g_cli, keys, 0, 0, res), CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_batch_remove(g_cli, keys, CR_STORE_BATCH_MAX + 1, 0, res),
                     CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_batch_remove(g_cli, NULL, 1, 0, res), CR_E_INVALID_PARAMS);
}

struct stall_arg {
    cr_store_t *reader;
    uint8_t *buf;
    size_t n;
    int rc;
};

static void *stalled_get(void *a)
{
    struct stall_arg *s = a;
    size_t got = 0;
    s->rc = cr_store_get(s->reader, "stale", s->buf, s->n, &got);
    return NULL;
}

/* A reader stalls after GetReplicaList past its lease while the key is
 * removed and re-put with other bytes: it must get an error or the old
 * bytes, never the new ones. */
static void test_stalled_reader(void **state)
{
    (void)state;
    const size_t n = 256 * 1024;
    cr_store_t *reader = NULL;
    int rc = make_client(0, 1 << 20, &reader);
    assert_int_equal(rc, 0);
    stall_gets(reader, 2500);
    uint8_t *v = malloc(n), *o = calloc(1, n);
    fill(v, n, 111);
    assert_int_equal(cr_store_put(g_cli, "stale", v, n, NULL), 0);
    struct stall_arg a = {reader, o, n, 0};
    pthread_t t;
    pthread_create(&t, NULL, stalled_get, &a);
    usleep((LEASE_MS + 150) * 1000); /* reader holds replicas, lease expired */
    assert_int_equal(cr_store_remove(g_cli, "stale", 0), 0);
    /* re-put with other bytes; fill the pool's free space with more of them
     * so the old space is very likely reused */
    fill(v, n, 222);
    assert_int_equal(cr_store_put(g_cli, "stale", v, n, NULL), 0);
    for (int i = 0; i < 8; i++) {
        char k[32];
        snprintf(k, sizeof k, "stale-filler-%d", i);
        cr_store_put(g_cli, k, v, n, NULL);
    }
    pthread_join(t, NULL);
    if (a.rc == 0) {
        /* allowed only if the bytes are the old value */
        assert_true(check(o, n, 111));
    } else {
        fprintf(stderr, "stalled reader got %d (%s) as expected\n", a.rc, cr_strerror(a.rc));
        assert_true(a.rc == CR_E_LEASE_EXPIRED || a.rc == CR_E_OBJECT_NOT_FOUND);
    }
    /* a non-stalled reader gets the new bytes */
    size_t got;
    assert_int_equal(cr_store_get(g_cli, "stale", o, n, &got), 0);
    assert_true(check(o, n, 222));
    cr_store_destroy(reader);
    cr_store_remove_all(g_cli, NULL);
    free(v);
    free(o);
}

/* A reader stalled past its lease while nothing changed: validation
 * proves the bytes good, so the get succeeds (regression: Validate was sent
 * without the key and every slow read failed). */
static void test_slow_reader_validated(void **state)
{
    (void)state;
    const size_t n = 64 * 1024;
    cr_store_t *reader = NULL;
    int rc = make_client(0, 1 << 20, &reader);
    assert_int_equal(rc, 0);
    stall_gets(reader, 1200);
    uint8_t *v = malloc(n), *o = calloc(1, n);
    fill(v, n, 333);
    assert_int_equal(cr_store_put(g_cli, "slow", v, n, NULL), 0);
    size_t got = 0;
    rc = cr_store_get(reader, "slow", o, n, &got);
    if (rc)
        fprintf(stderr, "slow reader: expected success, got %d (%s)\n", rc, cr_strerror(rc));
    assert_int_equal(rc, 0);
    assert_int_equal(got, n);
    assert_true(check(o, n, 333));
    /* batch form too */
    uint8_t *reg = g_reg + (30u << 20);
    const char *keys[1] = {"slow"};
    void *outs[1] = {reg};
    size_t caps[1] = {n}, lens[1];
    int res[1];
    cr_store_t *breader = NULL;
    rc = make_client(0, 1 << 20, &breader);
    assert_int_equal(rc, 0);
    stall_gets(breader, 1200);
    uint8_t *bbuf = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_int_equal(cr_store_register_buffer(breader, bbuf, n), 0);
    outs[0] = bbuf;
    assert_int_equal(cr_store_batch_get_into(breader, keys, outs, caps, 1, lens, res), 0);
    assert_int_equal(res[0], 0);
    assert_true(check(bbuf, n, 333));
    (void)reg;
    cr_store_unregister_buffer(breader, bbuf);
    munmap(bbuf, n);
    cr_store_destroy(breader);
    cr_store_destroy(reader);
    cr_store_remove(g_cli, "slow", 1);
    free(v);
    free(o);
}

/* A writer that stalls past the master's put deadline (1 s here) must not
 * write into space the master may have reclaimed: the put fails with
 * LEASE_EXPIRED and the key never becomes visible. */
static void test_put_past_deadline(void **state)
{
    (void)state;
    cr_store_t *w = NULL;
    int rc = make_client(0, 1 << 20, &w);
    assert_int_equal(rc, 0);
    stall_puts(w, 1500);
    uint8_t v[8192];
    fill(v, sizeof v, 12);
    rc = cr_store_put(w, "late-put", v, sizeof v, NULL);
    if (rc != CR_E_LEASE_EXPIRED)
        fprintf(stderr, "late put: expected %d got %d (%s)\n", CR_E_LEASE_EXPIRED, rc,
                cr_strerror(rc));
    assert_int_equal(rc, CR_E_LEASE_EXPIRED);
    assert_int_equal(cr_store_exist(g_cli, "late-put"), 0);
    /* zero-copy path (and replicas on the writer's own segment: none here,
     * the writer contributes nothing) */
    uint8_t *zb = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_int_equal(cr_store_register_buffer(w, zb, 8192), 0);
    memcpy(zb, v, sizeof v);
    assert_int_equal(cr_store_put_from(w, "late-put-zc", zb, 8192, NULL), CR_E_LEASE_EXPIRED);
    assert_int_equal(cr_store_exist(g_cli, "late-put-zc"), 0);
    cr_store_unregister_buffer(w, zb);
    munmap(zb, 8192);
    cr_store_destroy(w);
    /* and the key is free for a normal put */
    assert_int_equal(cr_store_put(g_cli, "late-put", v, sizeof v, NULL), 0);
    assert_int_equal(cr_store_remove(g_cli, "late-put", 1), 0);
}

/* A stream of puts much bigger than the pool: eviction keeps it going; old
 * keys become misses, survivors return the right bytes. */
static void test_eviction_stream(void **state)
{
    (void)state;
    const size_t n = 1 << 20;
    const int total = (int)((3ull * N_NODES * SEG_SIZE) / n); /* 3x the pool */
    int failed = 0;
    /* a hard-pinned key is never evicted (only remove frees it) */
    cr_store_replicate_config_t pin = {.replica_num = 1, .hard_pin = 1};
    fill(g_reg, n, 4242);
    assert_int_equal(cr_store_put_from(g_cli, "pinned", g_reg, n, &pin), 0);
    for (int i = 0; i < total; i++) {
        char k[32];
        snprintf(k, sizeof k, "ev-%d", i);
        fill(g_reg, n, 5000 + i);
        int rc = cr_store_put_from(g_cli, k, g_reg, n, NULL);
        if (rc) {
            failed++;
            fprintf(stderr, "put %s: %s\n", k, cr_strerror(rc));
        }
    }
    assert_true(failed <= total / 20); /* eviction makes room */
    int hits = 0, misses = 0;
    for (int i = 0; i < total; i++) {
        char k[32];
        size_t got;
        snprintf(k, sizeof k, "ev-%d", i);
        int rc = cr_store_get_into(g_cli, k, g_reg, n, &got);
        if (rc == 0) {
            hits++;
            assert_true(check(g_reg, n, 5000 + i));
        } else {
            assert_int_equal(rc, CR_E_OBJECT_NOT_FOUND);
            misses++;
        }
    }
    fprintf(stderr, "eviction: %d puts, %d hits, %d misses\n", total, hits, misses);
    assert_true(misses >= total / 2);
    assert_true(hits > 0);
    assert_true(cr_store_get_into(g_cli, "ev-0", g_reg, n, &(size_t){0}) == CR_E_OBJECT_NOT_FOUND);
    size_t pgot = 0;
    int prc = cr_store_get_into(g_cli, "pinned", g_reg, n, &pgot);
    if (prc)
        fprintf(stderr, "hard-pinned key after the stream: %s\n", cr_strerror(prc));
    assert_int_equal(prc, 0);
    assert_true(check(g_reg, n, 4242));
    usleep((LEASE_MS + 100) * 1000);
    assert_int_equal(cr_store_remove(g_cli, "pinned", 0), 0);
    cr_store_remove_all(g_cli, NULL);
}

/* The master restarts (empty): nodes remount on their next heartbeat and
 * new puts land on them again. */
static void test_master_restart_remount(void **state)
{
    (void)state;
    stop_master();
    assert_int_equal(start_master(g_port), 0);
    /* puts fail until the nodes have remounted: wait for it */
    uint8_t b[4096], o[4096];
    fill(b, sizeof b, 77);
    int rc = -1;
    for (int i = 0; i < 100 && rc; i++) {
        rc = cr_store_put(g_cli, "after-restart", b, sizeof b, NULL);
        if (rc)
            usleep(100000);
    }
    assert_int_equal(rc, 0);
    size_t got;
    assert_int_equal(cr_store_get(g_cli, "after-restart", o, sizeof o, &got), 0);
    assert_true(check(o, sizeof o, 77));
    /* all three nodes come back (replica_num 3 needs them all) */
    cr_store_replicate_config_t cfg = {.replica_num = 3};
    rc = -1;
    for (int i = 0; i < 50 && rc; i++) {
        rc = cr_store_put(g_cli, "after-restart-3", b, sizeof b, &cfg);
        if (rc)
            usleep(100000);
    }
    assert_int_equal(rc, 0);
    cr_store_remove_all(g_cli, NULL);
}

static void test_bad_input(void **state)
{
    (void)state;
    uint8_t b[64] = {0};
    size_t got;
    char longkey[CR_STORE_KEY_MAX + 2];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    assert_int_equal(cr_store_put(g_cli, NULL, b, 1, NULL), CR_E_INVALID_KEY);
    assert_int_equal(cr_store_put(g_cli, "", b, 1, NULL), CR_E_INVALID_KEY);
    assert_int_equal(cr_store_put(g_cli, longkey, b, 1, NULL), CR_E_INVALID_KEY);
    assert_int_equal(cr_store_put(g_cli, "k", NULL, 1, NULL), CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_put(g_cli, "k", b, 0, NULL), CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_put(NULL, "k", b, 1, NULL), CR_E_INVALID_PARAMS);
    cr_store_replicate_config_t cfg = {.replica_num = CR_STORE_REPLICA_MAX + 1};
    assert_int_equal(cr_store_put(g_cli, "k", b, 1, &cfg), CR_E_INVALID_PARAMS);
    cr_store_replicate_config_t cfg2 = {.replica_num = 1, .n_preferred = 2};
    assert_int_equal(cr_store_put(g_cli, "k", b, 1, &cfg2), CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_put_from(g_cli, "k", b, sizeof b, NULL), CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_get_into(g_cli, "k", b, sizeof b, &got), CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_get(g_cli, "k", NULL, 10, &got), CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_get(g_cli, "k", b, 10, NULL), CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_get(g_cli, longkey, b, 10, &got), CR_E_INVALID_KEY);
    assert_int_equal(cr_store_exist(g_cli, ""), CR_E_INVALID_KEY);
    assert_int_equal(cr_store_remove(g_cli, NULL, 0), CR_E_INVALID_KEY);
    assert_int_equal(cr_store_get_size(g_cli, "k", NULL), CR_E_INVALID_PARAMS);
    const char *keys[1] = {"k"};
    int res[1];
    assert_int_equal(cr_store_batch_is_exist(g_cli, keys, 0, res), CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_batch_is_exist(g_cli, keys, CR_STORE_BATCH_MAX + 1, res),
                     CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_batch_put_from(g_cli, NULL, NULL, NULL, 1, NULL, res),
                     CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_register_buffer(g_cli, NULL, 10), CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_register_buffer(g_cli, g_reg + 4096, 4096), CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_unregister_buffer(g_cli, b), CR_E_INVALID_PARAMS);

    /* create: bad parameters and an unreachable master */
    cr_store_t *s = (cr_store_t *)0x1;
    cr_store_params_t p = {0};
    assert_int_equal(cr_store_create(NULL, &s), CR_E_INVALID_PARAMS);
    p.field_mask = CR_STORE_PARAM_PROTOCOL | CR_STORE_PARAM_MASTER_ADDR;
    p.protocol = "rdma";
    p.master_addr = g_addr;
    assert_int_equal(cr_store_create(&p, &s), CR_E_INVALID_PARAMS);
    p.protocol = "tcp";
    p.master_addr = "no-port";
    assert_int_equal(cr_store_create(&p, &s), CR_E_INVALID_PARAMS);
    p.master_addr = "127.0.0.1:1"; /* nothing listens there */
    p.field_mask |= CR_STORE_PARAM_RPC_TIMEOUT_MS;
    p.rpc_timeout_ms = 500;
    assert_int_equal(cr_store_create(&p, &s), CR_E_RPC_FAIL);
    assert_ptr_equal(s, (cr_store_t *)0x1); /* untouched on failure */
    p.field_mask = CR_STORE_PARAM_LOCAL_BUFFER_SIZE | CR_STORE_PARAM_MASTER_ADDR;
    p.master_addr = g_addr;
    p.local_buffer_size = 100;
    assert_int_equal(cr_store_create(&p, &s), CR_E_INVALID_PARAMS);
    cr_store_destroy(NULL);
}

/* cr_store_segment_mount/unmount (Mooncake's mount_segment): the pure
 * client contributes caller memory as an extra segment; objects placed
 * there are read by another client through the owner's TE segment; the
 * unmount drops them (a miss, never other bytes). */
static void test_extra_segment(void **state)
{
    (void)state;
    size_t len = 4u << 20, n = 300000;
    uint8_t *mem = mmap(NULL, len + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    assert_true(mem != MAP_FAILED);
    char name[CR_STORE_SEGMENT_NAME_MAX], small[8];
    /* bad arguments, nothing mounted by them */
    assert_int_equal(cr_store_segment_mount(NULL, mem, len, name, sizeof name),
                     CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_segment_mount(g_cli, NULL, len, name, sizeof name),
                     CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_segment_mount(g_cli, mem + 1, len, name, sizeof name),
                     CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_segment_mount(g_cli, mem, 1000, name, sizeof name),
                     CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_segment_mount(g_cli, mem, len, small, sizeof small),
                     CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_segment_mount(g_cli, g_reg, 1u << 20, name, sizeof name),
                     CR_E_INVALID_PARAMS); /* registered for zero-copy already */
    assert_int_equal(cr_store_segment_unmount(g_cli, "no-such", 0), CR_E_SEGMENT_NOT_FOUND);
    assert_int_equal(cr_store_segment_unmount(g_cli, NULL, 0), CR_E_INVALID_PARAMS);

    assert_int_equal(cr_store_segment_mount(g_cli, mem, len, name, sizeof name), 0);
    assert_non_null(strchr(name, '#'));
    /* the same memory again overlaps */
    char again[CR_STORE_SEGMENT_NAME_MAX];
    assert_int_equal(cr_store_segment_mount(g_cli, mem + 4096, 4096, again, sizeof again),
                     CR_E_INVALID_PARAMS);
    fill(g_reg, n, 4242);
    const char *pref[] = {name};
    cr_store_replicate_config_t pc = {.replica_num = 1, .preferred_segments = pref,
                                      .n_preferred = 1};
    assert_int_equal(cr_store_put_from(g_cli, "extra-seg", g_reg, n, &pc), 0);
    char names[8][256];
    assert_int_equal(replica_segments("extra-seg", names, 8), 1);
    assert_string_equal(names[0], name);
    uint8_t *v = malloc(n);
    assert_non_null(v);
    size_t got = 0;
    assert_int_equal(cr_store_get(g_nodes[0], "extra-seg", v, n, &got), 0);
    assert_int_equal(got, n);
    assert_true(check(v, n, 4242));
    assert_int_equal(cr_store_segment_unmount(g_cli, name, CR_STORE_EXTRA_GRACE_MAX_MS + 1),
                     CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_segment_unmount(g_cli, name, 0), 0);
    assert_int_equal(cr_store_get(g_nodes[0], "extra-seg", v, n, &got), CR_E_OBJECT_NOT_FOUND);
    assert_int_equal(cr_store_segment_unmount(g_cli, name, 0), CR_E_SEGMENT_NOT_FOUND);
    free(v);
    munmap(mem, len + 4096); /* unregistered: the client no longer touches it */
}

static void test_concurrent_clients(void **state);

/* A client with the smallest staging buffer (64 KiB: 16 KiB chunks) moves
 * big values through it, from several threads at once. */
struct tiny_arg {
    cr_store_t *c;
    int id, errors;
};

static void *tiny_main(void *a)
{
    struct tiny_arg *t = a;
    size_t n = (3u << 20) + 12345; /* not a multiple of the chunk */
    uint8_t *v = malloc(n), *o = malloc(n);
    for (int i = 0; i < 2; i++) {
        char k[32];
        size_t got = 0;
        snprintf(k, sizeof k, "tiny-%d-%d", t->id, i);
        fill(v, n, 9000 + (uint64_t)t->id * 10 + (uint64_t)i);
        memset(o, 0, n);
        int rc = cr_store_put(t->c, k, v, n, NULL);
        if (!rc)
            rc = cr_store_get(t->c, k, o, n, &got);
        if (rc || got != n || !check(o, n, 9000 + (uint64_t)t->id * 10 + (uint64_t)i)) {
            fprintf(stderr, "tiny %s: %s\n", k, cr_strerror(rc));
            t->errors++;
        }
        cr_store_remove(t->c, k, 1);
    }
    free(v);
    free(o);
    return NULL;
}

static void test_tiny_staging(void **state)
{
    (void)state;
    cr_store_t *c = NULL;
    assert_int_equal(make_client(0, 64 * 1024, &c), 0);
    enum { T = 3 };
    pthread_t th[T];
    struct tiny_arg a[T];
    for (int i = 0; i < T; i++) {
        a[i].c = c;
        a[i].id = i;
        a[i].errors = 0;
        pthread_create(&th[i], NULL, tiny_main, &a[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(a[i].errors, 0);
    }
    cr_store_destroy(c);
}

/* Duplicates inside one batch: a put batch stores the first and reports
 * OBJECT_ALREADY_EXISTS for the second; a get batch may name a key twice. */
static void test_batch_duplicates(void **state)
{
    (void)state;
    const size_t sz = 32 * 1024;
    fill(g_reg, sz, 61);
    fill(g_reg + sz, sz, 62);
    const char *keys[3] = {"dupb", "dupb", "dupc"};
    const void *bufs[3] = {g_reg, g_reg + sz, g_reg + sz};
    size_t lens[3] = {sz, sz, sz};
    int res[3];
    assert_int_not_equal(cr_store_batch_put_from(g_cli, keys, bufs, lens, 3, NULL, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], CR_E_OBJECT_ALREADY_EXISTS);
    assert_int_equal(res[2], 0);
    void *outs[3] = {g_reg + (20u << 20), g_reg + (20u << 20) + sz, g_reg + (20u << 20) + 2 * sz};
    size_t caps[3] = {sz, sz, sz}, got[3];
    const char *gkeys[3] = {"dupb", "dupb", "dupc"};
    memset(outs[0], 0, 3 * sz);
    assert_int_equal(cr_store_batch_get_into(g_cli, gkeys, outs, caps, 3, got, res), 0);
    assert_true(check(outs[0], sz, 61));
    assert_true(check(outs[1], sz, 61));
    assert_true(check(outs[2], sz, 62));
    cr_store_remove(g_cli, "dupb", 1);
    cr_store_remove(g_cli, "dupc", 1);
}

/* cr_store_batch_get_alloc: a status per key in order (a miss, a bad key,
 * a duplicate, a value over max_len failing alone), values packed into
 * several staging extents (g_cli's local buffer is 4 MiB: 1 MiB extents)
 * and one bigger than an extent read in chunks, every byte right. */
static void test_batch_get_alloc(void **state)
{
    (void)state;
    enum { N = 48 };
    char names[N][32];
    const char *keys[N];
    size_t sz[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "galloc-%d", i);
        keys[i] = names[i];
        sz[i] = i == 7 ? (3u << 20) / 2 : 1 + (size_t)i * 1531 % (64 * 1024);
        if (i == 11 || i == 20 || i == 21)
            continue; /* 11: a miss; 20 a bad key, 21 a duplicate of 3 (below) */
        fill(g_reg, sz[i], 2000 + i);
        assert_int_equal(cr_store_put(g_cli, keys[i], g_reg, sz[i], NULL), 0);
    }
    keys[20] = "";
    keys[21] = names[3];
    sz[21] = sz[3];
    void *outs[N];
    size_t lens[N];
    int res[N];
    for (int i = 0; i < N; i++) {
        outs[i] = (void *)0x1; /* untouched where the key fails */
        lens[i] = 7;
    }
    assert_int_equal(cr_store_batch_get_alloc(g_cli, keys, N, 0, outs, lens, res),
                     CR_E_OBJECT_NOT_FOUND);
    for (int i = 0; i < N; i++) {
        int want = i == 11 ? CR_E_OBJECT_NOT_FOUND : i == 20 ? CR_E_INVALID_KEY : 0;
        if (res[i] != want)
            fprintf(stderr, "key %d: expected %d got %d\n", i, want, res[i]);
        assert_int_equal(res[i], want);
        if (want) {
            assert_ptr_equal(outs[i], (void *)0x1);
            assert_int_equal(lens[i], 7);
            continue;
        }
        assert_int_equal(lens[i], sz[i]);
        assert_true(check(outs[i], sz[i], 2000 + (i == 21 ? 3 : i)));
        free(outs[i]);
    }
    /* a bound: the bigger value fails alone, unread */
    const char *two[2] = {names[7], names[8]};
    assert_int_equal(cr_store_batch_get_alloc(g_cli, two, 2, 1u << 20, outs, lens, res),
                     CR_E_BUFFER_OVERFLOW);
    assert_int_equal(res[0], CR_E_BUFFER_OVERFLOW);
    assert_int_equal(res[1], 0);
    assert_true(lens[1] == sz[8] && check(outs[1], sz[8], 2008));
    free(outs[1]);
    assert_int_equal(cr_store_batch_get_alloc(g_cli, keys, 0, 0, outs, lens, res),
                     CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_batch_get_alloc(g_cli, keys, CR_STORE_BATCH_MAX + 1, 0, outs, lens,
                                              res),
                     CR_E_INVALID_PARAMS);
    assert_int_equal(cr_store_batch_get_alloc(g_cli, keys, 1, 0, NULL, lens, res),
                     CR_E_INVALID_PARAMS);
    for (int i = 0; i < N; i++)
        cr_store_remove(g_cli, names[i], 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_sizes),
        cmocka_unit_test(test_miss_and_exists),
        cmocka_unit_test(test_replicas_distinct),
        cmocka_unit_test(test_replicate_config_field_mask),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_batch_remove),
        cmocka_unit_test(test_batch_pipelined),
        cmocka_unit_test(test_lease_blocks_remove),
        cmocka_unit_test(test_stalled_reader),
        cmocka_unit_test(test_slow_reader_validated),
        cmocka_unit_test(test_put_past_deadline),
        cmocka_unit_test(test_concurrent_clients),
        cmocka_unit_test(test_tiny_staging),
        cmocka_unit_test(test_batch_duplicates),
        cmocka_unit_test(test_batch_get_alloc),
        cmocka_unit_test(test_eviction_stream),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_extra_segment),
        cmocka_unit_test(test_master_restart_remount),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* Several threads share one client: every get returns its own key's bytes. */
struct conc_arg {
    int id, errors;
};

static void *conc_main(void *a)
{
    struct conc_arg *c = a;
    size_t n = 128 * 1024;
    uint8_t *v = malloc(n), *o = malloc(n);
    for (int i = 0; i < 20; i++) {
        char k[32];
        size_t got;
        snprintf(k, sizeof k, "conc-%d-%d", c->id, i);
        fill(v, n, (uint64_t)c->id * 1000 + i);
        if (cr_store_put(g_cli, k, v, n, NULL))
            c->errors++;
        else if (cr_store_get(g_cli, k, o, n, &got) || got != n ||
                 !check(o, n, (uint64_t)c->id * 1000 + i))
            c->errors++;
        cr_store_remove(g_cli, k, 1);
    }
    free(v);
    free(o);
    return NULL;
}

static void test_concurrent_clients(void **state)
{
    (void)state;
    enum { T = 4 };
    pthread_t t[T];
    struct conc_arg a[T];
    for (int i = 0; i < T; i++) {
        a[i].id = i;
        a[i].errors = 0;
        pthread_create(&t[i], NULL, conc_main, &a[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].errors, 0);
    }
}
