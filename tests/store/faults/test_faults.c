/* Fault isolation and value integrity (issue 11) on a real cluster.
 *
 * Scenario crc: a byte of a stored value is flipped in a storage node's
 * memory by a Transfer Engine WRITE from a peer (what a faulty node or an
 * attacker on an open data port does); gets never return the flipped
 * bytes: the other replica's intact bytes are read instead, and with both
 * replicas flipped the get is a miss. A client with checksums off
 * (CRESCENT_STORE_CHECKSUM=0) documents what happens without them.
 *
 * Scenarios off / on: one storage node frozen (SIGSTOP) under load
 * must not freeze the other clients.
 *
 * Regression: one SIGSTOPped node froze every client for 10-15 s, also
 * clients whose objects had a second replica, and in-flight transfers
 * waited out the 30 s transfer timeout. Later: a put placed on the frozen
 * node failed instead of being placed on the live ones.
 *
 * Cluster on loopback: crescent-master, three crescent-node processes,
 * clients in this process: N_READERS readers getting self-verifying values
 * (bytes derived from the key) written with two replicas, one writer
 * putting new ones. Node 0 is SIGSTOPped for FREEZE_S seconds (past the
 * master's client_ttl, so the master drops it meanwhile), then SIGCONT.
 *
 * Asserts (never on elapsed time): no get ever returns wrong bytes; gets
 * and puts keep completing while the node is frozen (every reader finishes
 * gets during the freeze; no put fails: one placed on the frozen node is
 * placed again elsewhere, ops.c do_put); every preloaded object (two replicas, one of
 * them on a live node) still reads back with its bytes afterwards.
 * Prints the readers' get latency (p50/p99/max) before and during the
 * freeze: bench/faults/run.sh records them (docs/benchmarks.md).
 *
 * Scenario lone: a get of a key whose only replica is on a frozen node
 * waits on that node once (scenario_lone).
 *
 * Scenario full: with the live nodes full and the frozen node the only one
 * with free space, puts succeed on the live nodes (scenario_full).
 *
 * usage: test_store_faults off|on|crc|lone|full <crescent-master> <crescent-node>
 *   on: the whole cluster runs with a cluster key (security on).
 * Environment (bench only): FROZEN_FREEZE_S (default 5), FROZEN_READERS.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../cluster/cluster_util.h"
#include "common/clock.h"
#include "crescent/store.h"
#include "crescent/transfer.h"
#include "store/client/test_hooks.h"

#define N_NODES 3
#define MAX_READERS 8
#define N_PRELOAD 200
#define MAX_KEYS 20000
#define CLIENT_TTL_S 3
#define VAL_MAX 20000
#define LAT_MAX 200000 /* latency samples kept per phase */

static const char *g_master_bin, *g_node_bin;
static char g_dir[256], g_key_file[300];
static int g_secure;
static pid_t g_master_pid = -1, g_node_pid[N_NODES];
static char g_addr[64], g_meta_uri[128];
static char g_node_name[N_NODES][300]; /* segment names (the nodes' ready files) */
static int g_failures;
static int g_client_ttl_s = CLIENT_TTL_S; /* the master's; longer in scenario lone */
static const char *g_lease_ms = "5000";    /* the master's read lease; shorter in scenario full */

#define FAIL(...)                                                                          \
    do {                                                                                   \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                              \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fprintf(stderr, "\n");                                                             \
        g_failures++;                                                                      \
    } while (0)

/* ---- self-verifying values ------------------------------------------------ */

static size_t value_len(uint64_t n) { return 512 + (size_t)(n * 2654435761u % 8192); }

static void fill(uint8_t *b, size_t len, uint64_t seed) { cu_fill(b, len, seed, 11); }

static void key_of(char *k, size_t cap, uint64_t n) { snprintf(k, cap, "fz-%llu", (unsigned long long)n); }

/* keys whose put returned 0: [0, N_PRELOAD) preloaded, then the writer's */
static uint64_t g_keys[MAX_KEYS];
static atomic_uint g_n_keys;

/* phases: 0 before the freeze, 1 during, 2 after */
static atomic_int g_phase, g_stop;
static atomic_ullong g_wrong, g_gets_ok[3], g_gets_err[3], g_puts_ok[3], g_puts_err[3];

typedef struct lat {
    pthread_mutex_t mu;
    uint32_t n;
    uint32_t us[LAT_MAX];
} lat_t;
static lat_t g_lat[3], g_plat[3]; /* gets (readers), puts (writer) */

static void lat_add_to(lat_t *l, uint64_t us)
{
    pthread_mutex_lock(&l->mu);
    if (l->n < LAT_MAX)
        l->us[l->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    pthread_mutex_unlock(&l->mu);
}

static void lat_add(int phase, uint64_t us) { lat_add_to(&g_lat[phase], us); }

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void lat_print_of(lat_t *l, const char *what, const char *ops)
{
    if (!l->n) {
        fprintf(stderr, "%s: no %s\n", what, ops);
        return;
    }
    qsort(l->us, l->n, sizeof l->us[0], cmp_u32);
    fprintf(stderr, "%s: %u %s, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", what, l->n, ops,
            l->us[l->n / 2] / 1000.0, l->us[(uint64_t)l->n * 99 / 100] / 1000.0,
            l->us[l->n - 1] / 1000.0);
    printf("%s_p50_ms=%.2f %s_p99_ms=%.2f %s_max_ms=%.2f %s_%s=%u\n", what,
           l->us[l->n / 2] / 1000.0, what, l->us[(uint64_t)l->n * 99 / 100] / 1000.0, what,
           l->us[l->n - 1] / 1000.0, what, ops, l->n);
}

static void lat_print(const char *what, int phase) { lat_print_of(&g_lat[phase], what, "gets"); }

/* ---- clients ---------------------------------------------------------------- */

static int make_client_meta(cr_store_t **out, const char *meta);

static int make_client(cr_store_t **out) { return make_client_meta(out, g_meta_uri); }

/* A client whose TE finds segments through meta (the metadata server's
 * URI, or P2PHANDSHAKE: from the peers themselves). */
static int make_client_meta(cr_store_t **out, const char *meta)
{
    cr_store_params_t p = {0};
    p.field_mask = CR_STORE_PARAM_MASTER_ADDR | CR_STORE_PARAM_LOCAL_BUFFER_SIZE |
                   CR_STORE_PARAM_HEARTBEAT_MS | CR_STORE_PARAM_METADATA_URI |
                   CR_STORE_PARAM_RPC_TIMEOUT_MS | CR_STORE_PARAM_PROTOCOL;
    p.master_addr = g_addr;
    p.metadata_uri = meta;
    p.protocol = "tcp"; /* shm would read a frozen process's memory without it running */
    p.local_buffer_size = 4u << 20;
    p.heartbeat_ms = 200;
    p.rpc_timeout_ms = 5000;
    if (g_secure) {
        p.field_mask |= CR_STORE_PARAM_CLUSTER_KEY_FILE;
        p.cluster_key_file = g_key_file;
    }
    return cr_store_create(&p, out);
}

typedef struct worker {
    int id;
    cr_store_t *st;
    pthread_t th;
    atomic_ullong during; /* gets (readers) / puts (writer) that succeeded while frozen */
} worker_t;

static void *reader_main(void *arg)
{
    worker_t *w = arg;
    uint8_t *buf = malloc(VAL_MAX), *want = malloc(VAL_MAX);
    uint64_t x = 0x1234567ull + (uint64_t)w->id;
    while (!atomic_load(&g_stop)) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned nk = atomic_load(&g_n_keys);
        uint64_t n = g_keys[x % nk];
        char key[64];
        key_of(key, sizeof key, n);
        int phase = atomic_load(&g_phase);
        size_t got = 0;
        uint64_t t0 = cr__now_ns();
        int rc = cr_store_get(w->st, key, buf, VAL_MAX, &got);
        uint64_t us = (cr__now_ns() - t0) / 1000;
        lat_add(phase, us);
        if (rc) { /* a miss or an error is allowed, wrong bytes never */
            if (atomic_fetch_add(&g_gets_err[phase], 1) < 3)
                fprintf(stderr, "get %s (phase %d): %s\n", key, phase, cr_strerror(rc));
            continue;
        }
        size_t len = value_len(n);
        fill(want, len, n);
        if (got != len || memcmp(buf, want, len)) {
            fprintf(stderr, "wrong bytes for %s (len %zu, want %zu)\n", key, got, len);
            atomic_fetch_add(&g_wrong, 1);
        }
        atomic_fetch_add(&g_gets_ok[phase], 1);
        if (phase == 1)
            atomic_fetch_add(&w->during, 1);
        usleep(500); /* load, not a CPU hog: the machine runs the nodes too */
    }
    free(buf);
    free(want);
    return NULL;
}

static void *writer_main(void *arg)
{
    worker_t *w = arg;
    uint8_t *buf = malloc(VAL_MAX);
    for (uint64_t n = N_PRELOAD; !atomic_load(&g_stop) && atomic_load(&g_n_keys) < MAX_KEYS; n++) {
        char key[64];
        key_of(key, sizeof key, n);
        size_t len = value_len(n);
        fill(buf, len, n);
        cr_store_replicate_config_t cfg = {.replica_num = 2};
        int phase = atomic_load(&g_phase);
        uint64_t t0 = cr__now_ns();
        int rc = cr_store_put(w->st, key, buf, len, &cfg);
        lat_add_to(&g_plat[phase], (cr__now_ns() - t0) / 1000);
        if (rc == 0) {
            g_keys[atomic_load(&g_n_keys)] = n;
            atomic_fetch_add(&g_n_keys, 1); /* one writer: publish after the slot is written */
            atomic_fetch_add(&g_puts_ok[phase], 1);
            if (phase == 1)
                atomic_fetch_add(&w->during, 1);
        } else {
            atomic_fetch_add(&g_puts_err[phase], 1);
        }
        usleep(5000); /* a steady load: the pool never fills */
    }
    free(buf);
    return NULL;
}

/* ---- processes -------------------------------------------------------------- */

static int start_master(void)
{
    char pf[300], log[300], ttl[16], buf[256], karg[320];
    snprintf(pf, sizeof pf, "%s/master.port", g_dir);
    snprintf(log, sizeof log, "%s/master.log", g_dir);
    snprintf(ttl, sizeof ttl, "%d", g_client_ttl_s);
    snprintf(karg, sizeof karg, "--cluster_key_file=%s", g_key_file);
    char *argv[] = {(char *)g_master_bin, "--rpc_address", "127.0.0.1", "--rpc_port", "0",
                    "--metrics_address", "127.0.0.1", "--metrics_port", "0",
                    "--enable_http_metadata_server", "--http_metadata_server_host", "127.0.0.1",
                    "--http_metadata_server_port", "0", "--client_ttl", ttl,
                    "--put_start_timeout", "5", "--default_kv_lease_ttl", (char *)g_lease_ms,
                    "--port_file", pf, g_secure ? karg : NULL, NULL};
    g_master_pid = cu_spawn(argv, log, NULL);
    if (g_master_pid < 0 || cu_wait_file(pf, 20000, buf, sizeof buf)) {
        fprintf(stderr, "master did not start (see %s)\n", log);
        return -1;
    }
    unsigned rpc = 0, met = 0, meta = 0;
    if (sscanf(buf, "listening rpc=%u metrics=%u http_metadata=%u", &rpc, &met, &meta) != 3)
        return -1;
    snprintf(g_addr, sizeof g_addr, "127.0.0.1:%u", rpc);
    snprintf(g_meta_uri, sizeof g_meta_uri, "http://127.0.0.1:%u/metadata", meta);
    return 0;
}

static int start_node(int i)
{
    char rf[300], log[300], buf[300], karg[320];
    snprintf(rf, sizeof rf, "%s/node%d.ready", g_dir, i);
    snprintf(log, sizeof log, "%s/node%d.log", g_dir, i);
    snprintf(karg, sizeof karg, "--cluster_key_file=%s", g_key_file);
    char *argv[] = {(char *)g_node_bin, "--master_server_address", g_addr, "--global_segment_size",
                    "64MB", "--heartbeat_ms", "200", "--local_hostname", "127.0.0.1",
                    "--metadata_server", g_meta_uri, "--ready_file", rf, g_secure ? karg : NULL,
                    NULL};
    g_node_pid[i] = cu_spawn(argv, log, NULL);
    if (g_node_pid[i] < 0 || cu_wait_file(rf, 20000, buf, sizeof buf)) {
        fprintf(stderr, "node %d did not start (see %s)\n", i, log);
        return -1;
    }
    buf[strcspn(buf, " \r\n")] = 0;
    snprintf(g_node_name[i], sizeof g_node_name[i], "%s", buf);
    return 0;
}

static int write_key_file(void)
{
    snprintf(g_key_file, sizeof g_key_file, "%s/cluster.key", g_dir);
    FILE *f = fopen(g_key_file, "w");
    if (!f)
        return -1;
    chmod(g_key_file, 0600);
    for (int i = 0; i < 32; i++)
        fprintf(f, "%02x", (unsigned)(rand() & 0xff) ^ (unsigned)(getpid() >> (i % 16)));
    fprintf(f, "\n");
    return fclose(f);
}

/* Preloads N_PRELOAD keys with two replicas. Returns 0 or -1. */
static int preload(cr_store_t *st)
{
    uint8_t *buf = malloc(VAL_MAX);
    for (uint64_t n = 0; n < N_PRELOAD; n++) {
        char key[64];
        key_of(key, sizeof key, n);
        size_t len = value_len(n);
        fill(buf, len, n);
        cr_store_replicate_config_t cfg = {.replica_num = 2};
        int rc = cr_store_put(st, key, buf, len, &cfg);
        if (rc) {
            fprintf(stderr, "preload put %s: %s\n", key, cr_strerror(rc));
            free(buf);
            return -1;
        }
        g_keys[n] = n;
    }
    atomic_store(&g_n_keys, N_PRELOAD);
    free(buf);
    return 0;
}

/* Every preloaded key must read back with its bytes (each has a replica on
 * a live node). Retries codes that a remount makes transient. */
static void verify_preloaded(cr_store_t *st)
{
    uint8_t *buf = malloc(VAL_MAX), *want = malloc(VAL_MAX);
    unsigned lost = 0, wrong = 0;
    for (uint64_t n = 0; n < N_PRELOAD; n++) {
        char key[64];
        key_of(key, sizeof key, n);
        size_t got = 0;
        int rc = -1;
        for (int t = 0; t < 20 && rc; t++) {
            rc = cr_store_get(st, key, buf, VAL_MAX, &got);
            if (rc && rc != CR_E_OBJECT_NOT_FOUND)
                usleep(100000);
            else
                break;
        }
        if (rc) {
            if (lost++ < 5)
                fprintf(stderr, "preloaded %s lost: %s\n", key, cr_strerror(rc));
            continue;
        }
        size_t len = value_len(n);
        fill(want, len, n);
        if (got != len || memcmp(buf, want, len))
            wrong++;
    }
    if (lost)
        FAIL("%u of %d preloaded objects (two replicas each) unreadable after the freeze", lost,
             N_PRELOAD);
    if (wrong)
        FAIL("%u preloaded objects read back with wrong bytes", wrong);
    free(buf);
    free(want);
}

/* ---- scenario crc ------------------------------------------------------------ */

/* Flips the byte at addr in segment seg by a TE WRITE from a peer of our
 * own (security off: any peer may). Returns 0 or -errno. */
static int flip_byte(cr_xfer_engine_t *te, uint8_t *scratch, const char *seg, uint64_t addr,
                     uint8_t now)
{
    cr_xfer_segment_t h;
    int rc = cr_xfer_segment_open(te, seg, &h);
    if (rc)
        return rc;
    scratch[0] = now ^ 0x5a;
    cr_xfer_request_t w = {.opcode = CR_XFER_WRITE, .local_addr = scratch, .target = h,
                           .target_addr = addr, .length = 1};
    int res = 0;
    rc = cr_xfer_transfer_sync(te, &w, 1, &res);
    return rc ? rc : res;
}

static void scenario_crc(void)
{
    cr_store_t *st, *plain, *nolc;
    if (make_client(&st)) {
        FAIL("client did not start");
        return;
    }
    setenv("CRESCENT_STORE_CHECKSUM", "0", 1);
    int prc = make_client(&plain);
    unsetenv("CRESCENT_STORE_CHECKSUM");
    /* a client that reads every key where the master says first (no
     * location cache: st remembers where it found a key, the good replica) */
    setenv("CRESCENT_LOCATION_CACHE", "0", 1);
    prc = prc ? prc : make_client(&nolc);
    unsetenv("CRESCENT_LOCATION_CACHE");
    if (prc) {
        FAIL("client did not start");
        cr_store_destroy(st);
        return;
    }
    cr_xfer_params_t xp;
    memset(&xp, 0, sizeof xp);
    xp.field_mask = CR_XFER_PARAM_METADATA_URI | CR_XFER_PARAM_TRANSPORTS;
    xp.metadata_uri = g_meta_uri;
    xp.transports = "tcp";
    cr_xfer_engine_t *te = NULL;
    static uint8_t scratch[4096] __attribute__((aligned(4096)));
    if (cr_xfer_engine_create(&xp, &te) || cr_xfer_mem_register(te, scratch, sizeof scratch, NULL)) {
        FAIL("attacker engine did not start");
        goto out;
    }
    enum { LEN = 100000 };
    uint8_t *val = malloc(LEN), *buf = malloc(LEN), *reg = malloc(LEN);
    fill(val, LEN, 4242);
    cr_store_replicate_config_t cfg = {.replica_num = 2};
    int rc = cr_store_put(st, "crc-key", val, LEN, &cfg);
    if (rc) {
        FAIL("put: %s", cr_strerror(rc));
        goto out2;
    }
    cr_store_replica_desc_t d[2];
    size_t nrep = 0;
    rc = cr_store_get_replica_desc(st, "crc-key", d, 2, &nrep, NULL);
    if (rc || nrep != 2) {
        FAIL("replica desc: %s, %zu replicas", cr_strerror(rc), nrep);
        goto out2;
    }
    const size_t at = 77777; /* a byte of the first shard of each replica */
    if (d[0].shards[0].len <= at || d[1].shards[0].len <= at) {
        FAIL("unexpected shard layout");
        goto out2;
    }
    /* the replica read first (the master's order) gets a flipped byte */
    rc = flip_byte(te, scratch, d[0].shards[0].segment, d[0].shards[0].addr + at, val[at]);
    if (rc) {
        FAIL("flip: %s", cr_strerror(rc));
        goto out2;
    }
    size_t got = 0;
    rc = cr_store_get(st, "crc-key", buf, LEN, &got);
    if (rc || got != LEN || memcmp(buf, val, LEN))
        FAIL("one replica flipped: get %s, %s bytes (want the other replica's)", cr_strerror(rc),
             rc ? "no" : memcmp(buf, val, LEN) ? "WRONG" : "right");
    if (cr_store_checksum_errors(st) != 1)
        FAIL("checksum errors %llu, want 1", (unsigned long long)cr_store_checksum_errors(st));
    /* the direct path (registered destination) too */
    if (cr_store_register_buffer(st, reg, LEN) == 0) {
        memset(reg, 0, LEN);
        rc = cr_store_get_into(st, "crc-key", reg, LEN, &got);
        if (rc || got != LEN || memcmp(reg, val, LEN))
            FAIL("direct get with one replica flipped: %s", cr_strerror(rc));
        cr_store_unregister_buffer(st, reg);
    } else {
        FAIL("register_buffer");
    }
    /* a batch: its parts are checked while the next parts still move
     * (store client "overlap"); the key with the flipped replica must still
     * be caught and read from the other one, the others must be right */
    enum { NB = 6 };
    uint8_t *breg = malloc((size_t)NB * LEN);
    if (breg && cr_store_register_buffer(st, breg, (size_t)NB * LEN) == 0) {
        const char *bkeys[NB] = {"crc-b0", "crc-b1", "crc-key", "crc-b3", "crc-b4", "crc-b5"};
        const void *src[NB];
        void *dst[NB];
        size_t lens[NB], caps[NB], gl[NB];
        int res[NB];
        for (int i = 0; i < NB; i++) {
            fill(breg + (size_t)i * LEN, LEN, 5000 + i);
            src[i] = dst[i] = breg + (size_t)i * LEN;
            lens[i] = caps[i] = LEN;
        }
        /* crc-key exists: its put fails alone, the others go in */
        cr_store_batch_put_from(st, bkeys, src, lens, NB, &cfg, res);
        for (int i = 0; i < NB; i++)
            if (i != 2 && res[i])
                FAIL("batch put %s: %s", bkeys[i], cr_strerror(res[i]));
        /* nolc reads the flipped replica first (the master's order, as
         * above); st reads crc-key speculatively where its direct get found
         * it (the good replica) and the others from the master's answer */
        if (cr_store_register_buffer(nolc, breg, (size_t)NB * LEN))
            FAIL("register_buffer (batch, no cache)");
        cr_store_t *who[2] = {nolc, st};
        for (int w = 0; w < 2; w++) {
            memset(breg, 0, (size_t)NB * LEN);
            uint64_t e0 = cr_store_checksum_errors(who[w]), k0, k1;
            cr_store_location_cache_stats(who[w], &k0, NULL);
            rc = cr_store_batch_get_into(who[w], bkeys, dst, caps, NB, gl, res);
            for (int i = 0; i < NB; i++) {
                uint8_t *want = i == 2 ? val : NULL;
                if (!want) {
                    want = buf;
                    fill(want, LEN, 5000 + i);
                }
                if (res[i] || gl[i] != LEN || memcmp(breg + (size_t)i * LEN, want, LEN))
                    FAIL("batch get %s (%s): %s, %s bytes", bkeys[i], w ? "cache" : "no cache",
                         cr_strerror(res[i]),
                         res[i] ? "no" : memcmp(breg + (size_t)i * LEN, want, LEN) ? "WRONG" : "right");
            }
            cr_store_location_cache_stats(who[w], &k1, NULL);
            if (cr_store_checksum_errors(who[w]) != e0 + (w ? 0 : 1) || k1 - k0 != (w ? 1u : 0u))
                FAIL("batch get (%s): checksum errors +%llu, speculative reads kept %llu "
                     "(want %d, %d)", w ? "cache" : "no cache",
                     (unsigned long long)(cr_store_checksum_errors(who[w]) - e0),
                     (unsigned long long)(k1 - k0), w ? 0 : 1, w ? 1 : 0);
        }
        cr_store_unregister_buffer(nolc, breg);
        cr_store_unregister_buffer(st, breg);
    } else {
        FAIL("register_buffer (batch)");
    }
    free(breg);
    /* without checksums the flipped bytes are returned: the exposure */
    int wrong_plain = 0;
    for (int t = 0; t < 2; t++) { /* whichever replica it reads first */
        if (cr_store_get(plain, "crc-key", buf, LEN, &got) == 0 && memcmp(buf, val, LEN))
            wrong_plain = 1;
    }
    fprintf(stderr, "checksums off: %s\n",
            wrong_plain ? "the flipped bytes were returned (exposure)" : "read the intact replica");
    /* both replicas flipped: a miss, never the bytes */
    rc = flip_byte(te, scratch, d[1].shards[0].segment, d[1].shards[0].addr + at, val[at]);
    if (rc) {
        FAIL("flip: %s", cr_strerror(rc));
        goto out2;
    }
    uint64_t e0 = cr_store_checksum_errors(st);
    memset(buf, 0, LEN);
    rc = cr_store_get(st, "crc-key", buf, LEN, &got);
    if (rc != CR_E_OBJECT_NOT_FOUND)
        FAIL("both replicas flipped: get returned %s (%d), want a miss", cr_strerror(rc), rc);
    if (cr_store_checksum_errors(st) < e0 + 2)
        FAIL("checksum errors %llu, want >= %llu",
             (unsigned long long)cr_store_checksum_errors(st), (unsigned long long)e0 + 2);
    fprintf(stderr, "checksum errors counted: %llu\n",
            (unsigned long long)cr_store_checksum_errors(st));
out2:
    free(val);
    free(buf);
    free(reg);
out:
    cr_xfer_engine_destroy(te);
    cr_store_destroy(plain);
    cr_store_destroy(nolc);
    cr_store_destroy(st);
}

/* ---- scenario lone ----------------------------------------------------------- */

/* Regression: a get of a key whose only replica is on a frozen node cost
 * two waits (2 s) every time, not one stall time: the first failed read
 * marked the peer stale, and each later get's submit refetched the peer's
 * descriptor from the frozen peer itself (p2p: 1 s timeout) and then, that
 * failing too, sent the read anyway and waited out the stall again.
 * Counted, not timed: the timeouts the client's TE waited out per get
 * (cr__store_test_timeouts_waited) must be one. */
static void scenario_lone(void)
{
    cr_store_t *st;
    if (make_client_meta(&st, "P2PHANDSHAKE")) {
        FAIL("p2p client did not start");
        return;
    }
    enum { LEN = 8192, GETS = 3 };
    uint8_t val[LEN], buf[LEN];
    fill(val, LEN, 777);
    const char *pref[1] = {g_node_name[0]};
    cr_store_replicate_config_t cfg = {.field_mask = CR_STORE_REPL_V1, .replica_num = 1,
                                       .preferred_segments = pref, .n_preferred = 1};
    int rc = cr_store_put(st, "lone-key", val, LEN, &cfg);
    cr_store_replica_desc_t d[1];
    size_t nrep = 0;
    if (!rc)
        rc = cr_store_get_replica_desc(st, "lone-key", d, 1, &nrep, NULL);
    if (rc || nrep != 1 || strcmp(d[0].shards[0].segment, g_node_name[0])) {
        FAIL("put on node 0 (%s): %s, %zu replicas on %s", g_node_name[0], cr_strerror(rc), nrep,
             rc || !nrep ? "-" : d[0].shards[0].segment);
        cr_store_destroy(st);
        return;
    }
    kill(g_node_pid[0], SIGSTOP);
    for (int i = 0; i < GETS; i++) {
        uint64_t w0 = cr__store_test_timeouts_waited(st);
        size_t got = 0;
        rc = cr_store_get(st, "lone-key", buf, LEN, &got);
        uint64_t w = cr__store_test_timeouts_waited(st) - w0;
        if (rc == 0)
            FAIL("get %d of a key only on the frozen node returned its bytes", i);
        if (w != 1)
            FAIL("get %d of a key only on the frozen node waited out %llu timeouts, want 1 "
                 "(%s)", i, (unsigned long long)w, cr_strerror(rc));
    }
    kill(g_node_pid[0], SIGCONT);
    cr_store_destroy(st);
}

/* ---- scenario full ------------------------------------------------------------ */

/* Regression (an outside drill, 2026-12-03): with the live nodes full and
 * the frozen node the only one with free space, the master placed every
 * attempt of a put on the frozen node (it evicts only when nothing fits),
 * the client revoked them unwritten while attempts remained, and the last
 * attempt failed with TRANSFER_FAIL after a stall. The client now names
 * its suspect segments with PutStart (and RESERVE): the master places on
 * the live nodes, evicting there. Counted, not timed: every put succeeds,
 * none lands on the frozen node, and the client's TE waits out one stall
 * in all (the write that found the node frozen). */
static void scenario_full(void)
{
    enum { LEN = 1 << 20, PUTS = 6, FILL_MAX = 100 };
    cr_store_t *st;
    if (make_client(&st)) {
        FAIL("client did not start");
        return;
    }
    uint8_t *val = malloc(LEN);
    char key[64];
    /* nodes 1 and 2 full of 1 MiB objects (until one goes elsewhere) */
    for (int i = 1; i < N_NODES; i++) {
        const char *pref[1] = {g_node_name[i]};
        cr_store_replicate_config_t cfg = {.field_mask = CR_STORE_REPL_V1, .replica_num = 1,
                                           .preferred_segments = pref, .n_preferred = 1};
        int k = 0, full = 0;
        for (; k < FILL_MAX && !full; k++) {
            snprintf(key, sizeof key, "fill-%d-%d", i, k);
            fill(val, LEN, (uint64_t)(i * 1000 + k));
            int rc = cr_store_put(st, key, val, LEN, &cfg);
            cr_store_replica_desc_t d[1];
            size_t nrep = 0;
            if (!rc)
                rc = cr_store_get_replica_desc(st, key, d, 1, &nrep, NULL);
            if (rc || nrep != 1) {
                FAIL("fill put %s: %s", key, cr_strerror(rc));
                goto out;
            }
            full = strcmp(d[0].shards[0].segment, g_node_name[i]) != 0;
            if (full)
                cr_store_remove(st, key, 1);
        }
        if (!full) {
            FAIL("node %d took %d objects of 1 MiB without filling", i, FILL_MAX);
            goto out;
        }
        fprintf(stderr, "node %d full after %d objects\n", i, k - 1);
    }
    /* stopped before the first put: a stop takes effect at the node's
     * next return to user space, which a loaded machine may delay */
    kill(g_node_pid[0], SIGSTOP);
    int wst = 0;
    if (waitpid(g_node_pid[0], &wst, WUNTRACED) != g_node_pid[0] || !WIFSTOPPED(wst)) {
        FAIL("node 0 did not stop");
        kill(g_node_pid[0], SIGCONT);
        goto out;
    }
    uint64_t w0 = cr__store_test_timeouts_waited(st);
    int failed = 0;
    for (int k = 0; k < PUTS; k++) {
        snprintf(key, sizeof key, "after-%d", k);
        fill(val, LEN, (uint64_t)(5000 + k));
        int rc = cr_store_put(st, key, val, LEN, NULL);
        cr_store_replica_desc_t d[1];
        size_t nrep = 0;
        if (!rc)
            rc = cr_store_get_replica_desc(st, key, d, 1, &nrep, NULL);
        if (rc || nrep != 1) {
            FAIL("put %s with node 0 frozen and the only one with free space: %s (%d)", key,
                 cr_strerror(rc), rc);
            failed++;
        } else if (!strcmp(d[0].shards[0].segment, g_node_name[0])) {
            FAIL("put %s placed on the frozen node", key);
        }
    }
    uint64_t waited = cr__store_test_timeouts_waited(st) - w0;
    fprintf(stderr, "%d puts with node 0 frozen: %d failed, %llu timeouts waited out\n", PUTS,
            failed, (unsigned long long)waited);
    if (waited > 1)
        FAIL("%d puts waited out %llu timeouts, want at most 1 (the write that found node 0 "
             "frozen)", PUTS, (unsigned long long)waited);
    kill(g_node_pid[0], SIGCONT);
    /* what was put reads back */
    uint8_t *buf = malloc(LEN);
    for (int k = 0; k < PUTS && buf; k++) {
        snprintf(key, sizeof key, "after-%d", k);
        fill(val, LEN, (uint64_t)(5000 + k));
        size_t got = 0, at = 0;
        int rc = cr_store_get(st, key, buf, LEN, &got);
        while (!rc && at < got && at < LEN && buf[at] == val[at])
            at++;
        if (!rc && (got != LEN || at != LEN))
            FAIL("%s read back %zu bytes (want %d), the first wrong at offset %zu", key, got,
                 LEN, at);
    }
    free(buf);
out:
    free(val);
    cr_store_destroy(st);
}

static int finish(void);

static int env_int(const char *name, int def, int lo, int hi)
{
    const char *v = getenv(name);
    int x = v && *v ? atoi(v) : def;
    return x < lo ? lo : x > hi ? hi : x;
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "on") && strcmp(argv[1], "off") && strcmp(argv[1], "crc") &&
                     strcmp(argv[1], "lone") && strcmp(argv[1], "full"))) {
        fprintf(stderr, "usage: %s off|on|crc|lone|full <crescent-master> <crescent-node>\n",
                argv[0]);
        return 2;
    }
    g_secure = !strcmp(argv[1], "on");
    g_master_bin = argv[2];
    g_node_bin = argv[3];
    int freeze_s = env_int("FROZEN_FREEZE_S", 5, 1, 600);
    /* the freeze outlasts the TE's stall time several times over (sanitizer
     * runs raise it with CRESCENT_XFER_STALL_MS), so every reader gets past
     * its one stall and is served by the other replica during the freeze */
    int stall_s = (env_int("CRESCENT_XFER_STALL_MS", 1000, 50, 600000) + 999) / 1000;
    if (freeze_s < 3 * stall_s + 2)
        freeze_s = 3 * stall_s + 2;
    int n_readers = env_int("FROZEN_READERS", 3, 1, MAX_READERS);
    signal(SIGPIPE, SIG_IGN);
    srand((unsigned)getpid() ^ (unsigned)cr__now_ns());
    for (int i = 0; i < 3; i++) {
        pthread_mutex_init(&g_lat[i].mu, NULL);
        pthread_mutex_init(&g_plat[i].mu, NULL);
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/crescent-frozen-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    if (g_secure && write_key_file())
        return 1;
    if (!strcmp(argv[1], "lone") || !strcmp(argv[1], "full"))
        g_client_ttl_s = 30; /* the frozen node stays mounted meanwhile */
    if (!strcmp(argv[1], "full"))
        g_lease_ms = "100"; /* the objects filling the live nodes (each looked up) are
                               evictable again at once, as in a pool written over */
    if (start_master())
        return 1;
    for (int i = 0; i < N_NODES; i++)
        if (start_node(i))
            return 1;
    if (!strcmp(argv[1], "crc")) {
        scenario_crc();
        return finish();
    }
    if (!strcmp(argv[1], "lone")) {
        scenario_lone();
        return finish();
    }
    if (!strcmp(argv[1], "full")) {
        scenario_full();
        return finish();
    }
    worker_t readers[MAX_READERS], writer;
    memset(readers, 0, sizeof readers);
    memset(&writer, 0, sizeof writer);
    cr_store_t *checker = NULL;
    if (make_client(&checker) || make_client(&writer.st)) {
        fprintf(stderr, "clients did not start\n");
        return 1;
    }
    for (int i = 0; i < n_readers; i++)
        if (make_client(&readers[i].st))
            return 1;
    if (preload(checker))
        return 1;

    for (int i = 0; i < n_readers; i++) {
        readers[i].id = i;
        pthread_create(&readers[i].th, NULL, reader_main, &readers[i]);
    }
    pthread_create(&writer.th, NULL, writer_main, &writer);
    sleep(2); /* phase 0: the reference latency */

    fprintf(stderr, "SIGSTOP node 0 (pid %d) for %d s with %u objects\n", (int)g_node_pid[0],
            freeze_s, atomic_load(&g_n_keys));
    atomic_store(&g_phase, 1);
    kill(g_node_pid[0], SIGSTOP);
    sleep((unsigned)freeze_s);
    atomic_store(&g_phase, 2);
    kill(g_node_pid[0], SIGCONT);
    sleep(1);
    atomic_store(&g_stop, 1);
    for (int i = 0; i < n_readers; i++)
        pthread_join(readers[i].th, NULL);
    pthread_join(writer.th, NULL);

    for (int p = 0; p < 3; p++)
        fprintf(stderr, "phase %d: gets ok %llu err %llu, puts ok %llu err %llu\n", p,
                atomic_load(&g_gets_ok[p]), atomic_load(&g_gets_err[p]),
                atomic_load(&g_puts_ok[p]), atomic_load(&g_puts_err[p]));
    lat_print("before", 0);
    lat_print("frozen", 1);
    lat_print_of(&g_plat[0], "put_before", "puts");
    lat_print_of(&g_plat[1], "put_frozen", "puts");

    if (atomic_load(&g_wrong))
        FAIL("%llu gets returned wrong bytes", atomic_load(&g_wrong));
    for (int i = 0; i < n_readers; i++)
        if (atomic_load(&readers[i].during) == 0)
            FAIL("reader %d completed no get while node 0 was frozen", i);
    if (atomic_load(&writer.during) == 0)
        FAIL("no put completed while node 0 was frozen");
    /* a put placed on the frozen node fails over: it is revoked and placed
     * on live nodes (two replicas, three nodes: there is always room) */
    if (atomic_load(&g_puts_err[1]))
        FAIL("%llu puts failed while node 0 was frozen (want: placed again on live nodes)",
             atomic_load(&g_puts_err[1]));
    verify_preloaded(checker);

    for (int i = 0; i < n_readers; i++)
        cr_store_destroy(readers[i].st);
    cr_store_destroy(writer.st);
    cr_store_destroy(checker);
    return finish();
}

/* Stops the daemons; the exit status. */
static int finish(void)
{
    for (int i = 0; i < N_NODES; i++)
        cu_stop(g_node_pid[i], SIGTERM, 10000);
    cu_stop(g_master_pid, SIGTERM, 10000);
    if (g_failures) {
        fprintf(stderr, "%d check(s) failed; logs in %s\n", g_failures, g_dir);
        return 1;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    return 0;
}
