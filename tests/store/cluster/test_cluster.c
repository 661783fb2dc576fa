/* Multi-process store cluster on loopback: crescent-master, three
 * crescent-node storage daemons, and this process as the client.
 *
 * Covers: put/get correctness 4 KiB..16 MiB (1 and 2 replicas), replicas on
 * distinct nodes (checked in the master's /query_key), a lease blocking
 * remove, a writer killed mid-put (key never visible, its space reclaimed
 * after the put timeout), the stalled reader, eviction under a stream of
 * puts 3x the pool, a storage node SIGKILLed under load (its objects become
 * misses, every successful get has the right bytes), a master restart
 * (nodes remount and republish their segments to the master's embedded
 * metadata server, which every process here uses), a node started before
 * the master, SIGTERM of a node (clean exit 0, unmount), bad input.
 *
 * usage: test_store_cluster <crescent-master> <crescent-node>
 *        test_store_cluster --writer <master addr> <metadata uri> <key> <size>  (child)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster_util.h"
#include "common/clock.h"
#include "crescent/store.h"
#include "store/client/test_hooks.h"
#include "test_check.h"

#define N_NODES 3
#define NODE_SEG "32MB"
#define NODE_SEG_BYTES (32ull << 20)
#define LEASE_MS 1000
#define CLIENT_TTL_S 3
#define PUT_TIMEOUT_S 2
#define REG_SIZE (64ull << 20)

static const char *g_master_bin, *g_node_bin;
static char g_dir[256];
static pid_t g_master_pid = -1;
static uint16_t g_rpc_port, g_metrics_port, g_meta_port;
static char g_addr[64];
static char g_meta_uri[128]; /* the master's embedded HTTP metadata server */
static pid_t g_node_pid[N_NODES];
static char g_node_seg[N_NODES][320];
static cr_store_t *g_cli;
static uint8_t *g_reg;


static void fill(uint8_t *b, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t c = n - i < 8 ? n - i : 8;
        memcpy(b + i, &x, c);
    }
}

static int same(const uint8_t *b, size_t n, uint64_t seed)
{
    uint8_t *tmp = malloc(n);
    if (!tmp)
        return 0;
    fill(tmp, n, seed);
    int r = memcmp(tmp, b, n) == 0;
    free(tmp);
    return r;
}

/* ---- processes -------------------------------------------------------------- */

static int start_master(uint16_t port)
{
    char pf[300], log[300], portarg[16], metaarg[16], lease[16], ttl[16], pto[16], buf[256];
    snprintf(pf, sizeof pf, "%s/master.port", g_dir);
    snprintf(log, sizeof log, "%s/master.log", g_dir);
    unlink(pf);
    snprintf(portarg, sizeof portarg, "%u", port);
    snprintf(metaarg, sizeof metaarg, "%u", g_meta_port); /* 0 at first, then the same */
    snprintf(lease, sizeof lease, "%d", LEASE_MS);
    snprintf(ttl, sizeof ttl, "%d", CLIENT_TTL_S);
    snprintf(pto, sizeof pto, "%d", PUT_TIMEOUT_S);
    char *argv[] = {(char *)g_master_bin, "--rpc_address", "127.0.0.1", "--rpc_port", portarg,
                    "--metrics_address", "127.0.0.1", "--metrics_port", "0",
                    "--enable_http_metadata_server", "--http_metadata_server_host", "127.0.0.1",
                    "--http_metadata_server_port", metaarg,
                    "--default_kv_lease_ttl", lease, "--client_ttl", ttl,
                    "--put_start_timeout", pto, "--eviction_high_watermark_ratio", "0.9",
                    "--port_file", pf, NULL};
    g_master_pid = cu_spawn(argv, log, NULL);
    if (g_master_pid < 0 || cu_wait_file(pf, 10000, buf, sizeof buf)) {
        fprintf(stderr, "master did not start (see %s)\n", log);
        return -1;
    }
    unsigned rpc = 0, met = 0, meta = 0;
    if (sscanf(buf, "listening rpc=%u metrics=%u http_metadata=%u", &rpc, &met, &meta) != 3)
        return -1;
    g_rpc_port = (uint16_t)rpc;
    g_metrics_port = (uint16_t)met;
    g_meta_port = (uint16_t)meta;
    snprintf(g_addr, sizeof g_addr, "127.0.0.1:%u", rpc);
    snprintf(g_meta_uri, sizeof g_meta_uri, "http://127.0.0.1:%u/metadata", meta);
    return 0;
}

static int start_node(int i)
{
    char rf[300], log[300];
    snprintf(rf, sizeof rf, "%s/node%d.ready", g_dir, i);
    snprintf(log, sizeof log, "%s/node%d.log", g_dir, i);
    unlink(rf);
    char *argv[] = {(char *)g_node_bin, "--master_server_address", g_addr, "--global_segment_size",
                    NODE_SEG, "--heartbeat_ms", "200", "--local_hostname", "127.0.0.1",
                    "--metadata_server", g_meta_uri, "--ready_file", rf, NULL};
    g_node_pid[i] = cu_spawn(argv, log, NULL);
    char buf[300];
    if (g_node_pid[i] < 0 || cu_wait_file(rf, 15000, buf, sizeof buf)) {
        fprintf(stderr, "node %d did not start (see %s)\n", i, log);
        return -1;
    }
    buf[strcspn(buf, "\n")] = 0;
    snprintf(g_node_seg[i], sizeof g_node_seg[i], "%s", buf);
    return 0;
}

static int make_client(cr_store_t **out)
{
    cr_store_params_t p = {0};
    p.field_mask = CR_STORE_PARAM_MASTER_ADDR | CR_STORE_PARAM_LOCAL_BUFFER_SIZE |
                   CR_STORE_PARAM_HEARTBEAT_MS | CR_STORE_PARAM_METADATA_URI;
    p.master_addr = g_addr;
    p.metadata_uri = g_meta_uri;
    p.local_buffer_size = 16u << 20;
    p.heartbeat_ms = 200;
    return cr_store_create(&p, out);
}

/* ---- scenarios ---------------------------------------------------------------- */

/* A loopback TCP port free a moment ago (0 on error). */
static uint16_t free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    int ok = !bind(fd, (struct sockaddr *)&a, sizeof a) &&
             !getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ok ? ntohs(a.sin_port) : 0;
}

/* A client contributing 4 MiB on a fixed TE port (its segment name is
 * "127.0.0.1:<port>"); fresh: with CR_STORE_PARAM_FRESH_NAME. */
static int make_seg_client(uint16_t port, int fresh, cr_store_t **out)
{
    cr_store_params_t p = {0};
    p.field_mask = CR_STORE_PARAM_MASTER_ADDR | CR_STORE_PARAM_LOCAL_BUFFER_SIZE |
                   CR_STORE_PARAM_HEARTBEAT_MS | CR_STORE_PARAM_METADATA_URI |
                   CR_STORE_PARAM_GLOBAL_SEGMENT_SIZE | CR_STORE_PARAM_TE_PORT |
                   (fresh ? CR_STORE_PARAM_FRESH_NAME : 0);
    p.master_addr = g_addr;
    p.metadata_uri = g_meta_uri;
    p.local_buffer_size = 1u << 20;
    p.heartbeat_ms = 200;
    p.global_segment_size = 4u << 20;
    p.te_port = port;
    p.fresh_name = fresh;
    return cr_store_create(&p, out);
}

/* put of 4 KiB (value seed) preferring the client's own segment */
static int put_here(cr_store_t *c, const char *key, uint64_t seed)
{
    uint8_t v[4096];
    const char *seg = cr_store_segment_name(c);
    cr_store_replicate_config_t cfg = {.preferred_segments = &seg, .n_preferred = 1};
    fill(v, sizeof v, seed);
    return cr_store_put(c, key, v, sizeof v, &cfg);
}

/* A client that left while a reader held a lease on its segment: the
 * master holds the leased block with its name (held.c), not the whole
 * name. The next client on that host:port is refused with -EADDRINUSE
 * when it asks for a fresh name (the Python layer then picks another
 * port: readers may still know the old process under that name); without
 * it, it joins at once and its puts land before and after the lease ends
 * (the segment takes allocations outside the held block); the bytes read
 * back are its own. */
static void test_held_name(void)
{
    uint16_t port = free_port();
    CHECK(port != 0, "no free port");
    cr_store_t *a = NULL, *b = NULL, *c = NULL;
    uint8_t o[4096];
    size_t got;
    CHECK_RC(make_seg_client(port, 1, &a), 0);
    if (!a)
        return;
    CHECK_RC(put_here(a, "held-a", 71), 0);
    CHECK_RC(cr_store_get(g_cli, "held-a", o, sizeof o, &got), 0); /* a lease */
    cr_store_destroy(a);
    CHECK_RC(cr_store_exist(g_cli, "held-a"), 0); /* gone with its segment */
    CHECK_RC(make_seg_client(port, 1, &b), -EADDRINUSE);
    CHECK(b == NULL, "a refused create returned a client");
    CHECK_RC(make_seg_client(port, 0, &c), 0);
    if (!c)
        return;
    CHECK_RC(put_here(c, "held-early", 72), 0);
    usleep((LEASE_MS + 300) * 1000);
    CHECK_RC(put_here(c, "held-late", 73), 0);
    /* read back by c: another reader may still have the Transfer Engine
     * descriptor of the process that left cached for this name */
    CHECK_RC(cr_store_get(c, "held-early", o, sizeof o, &got), 0);
    CHECK(got == sizeof o && same(o, sizeof o, 72), "held-early: wrong bytes");
    CHECK_RC(cr_store_get(c, "held-late", o, sizeof o, &got), 0);
    CHECK(got == sizeof o && same(o, sizeof o, 73), "held-late: wrong bytes");
    cr_store_destroy(c);
    fprintf(stderr, "ok: a held segment name: refused when fresh, usable at once otherwise\n");
}

static void test_sizes(void)
{
    static const size_t sizes[] = {4096, 64 << 10, 1 << 20, 4 << 20, 16 << 20};
    for (int rep = 1; rep <= 2; rep++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t n = sizes[i];
            char key[64];
            size_t got = 0;
            cr_store_replicate_config_t cfg = {.replica_num = (uint32_t)rep};
            snprintf(key, sizeof key, "size-%zu-r%d", n, rep);
            fill(g_reg, n, n + (size_t)rep);
            CHECK_RC(cr_store_put_from(g_cli, key, g_reg, n, &cfg), 0);
            memset(g_reg + (32u << 20), 0, n);
            CHECK_RC(cr_store_get_into(g_cli, key, g_reg + (32u << 20), n, &got), 0);
            CHECK(got == n, "size %zu got %zu", n, got);
            CHECK(same(g_reg + (32u << 20), n, n + (size_t)rep), "bytes of %s differ", key);
            /* copying path, unregistered memory */
            uint8_t *o = malloc(n);
            CHECK_RC(cr_store_get(g_cli, key, o, n, &got), 0);
            CHECK(same(o, n, n + (size_t)rep), "copying get of %s differs", key);
            free(o);
            CHECK_RC(cr_store_remove(g_cli, key, 1), 0);
        }
    }
    fprintf(stderr, "ok: put/get 4 KiB..16 MiB, 1 and 2 replicas\n");
}

static void test_replicas_distinct(void)
{
    fill(g_reg, 1 << 20, 3);
    cr_store_replicate_config_t cfg = {.replica_num = 3};
    CHECK_RC(cr_store_put_from(g_cli, "three", g_reg, 1 << 20, &cfg), 0);
    char body[16384];
    int st = cu_http_get(g_metrics_port, "/query_key?key=three", body, sizeof body);
    CHECK(st == 200, "query_key status %d", st);
    int seen[N_NODES] = {0};
    for (int i = 0; i < N_NODES; i++) {
        char pat[400];
        snprintf(pat, sizeof pat, "\"segment\":\"%.300s\"", g_node_seg[i]);
        for (char *p = body; (p = strstr(p, pat)); p++)
            seen[i]++;
    }
    for (int i = 0; i < N_NODES; i++)
        CHECK(seen[i] >= 1, "node %d (%s) holds no replica of 'three': %s", i, g_node_seg[i], body);
    CHECK_RC(cr_store_remove(g_cli, "three", 1), 0);
    fprintf(stderr, "ok: 3 replicas on 3 distinct nodes\n");
}

static void test_lease_blocks_remove(void)
{
    uint8_t v[4096], o[4096];
    size_t got;
    fill(v, sizeof v, 9);
    CHECK_RC(cr_store_put(g_cli, "lease", v, sizeof v, NULL), 0);
    CHECK_RC(cr_store_get(g_cli, "lease", o, sizeof o, &got), 0);
    CHECK_RC(cr_store_remove(g_cli, "lease", 0), CR_E_OBJECT_HAS_LEASE);
    usleep((LEASE_MS + 200) * 1000);
    CHECK_RC(cr_store_remove(g_cli, "lease", 0), 0);
    fprintf(stderr, "ok: a live lease blocks remove\n");
}

/* The writer's test hook: says PutStart's status, then stalls (the
 * parent SIGKILLs it there). */
static void writer_stall(void *user, int status)
{
    (void)user;
    fprintf(stderr, "writer: stalls after PutStart (status %d)\n", status);
    fflush(stderr);
    sleep(60);
}

/* child role: put a big key with replicas on every node, stalled after
 * PutStart (the parent SIGKILLs it there) */
static int writer_main(const char *addr, const char *meta, const char *key, size_t n)
{
    snprintf(g_addr, sizeof g_addr, "%s", addr);
    snprintf(g_meta_uri, sizeof g_meta_uri, "%s", meta);
    cr_store_t *c;
    if (make_client(&c))
        return 3;
    cr__store_set_test_hooks(c, &(cr__store_test_hooks_t){.after_put_start = writer_stall});
    uint8_t *v = malloc(n);
    fill(v, n, 4242);
    cr_store_replicate_config_t cfg = {.replica_num = N_NODES};
    int rc = cr_store_put(c, key, v, n, &cfg);
    printf("writer finished: %d\n", rc);
    cr_store_destroy(c);
    return 0;
}

static void test_writer_killed(void)
{
    const size_t n = 24u << 20; /* x3 replicas: 72 of the 96 MiB pool */
    char self[512], log[300], sz[32];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(l > 0, "readlink");
    self[l] = 0;
    snprintf(log, sizeof log, "%s/writer.log", g_dir);
    snprintf(sz, sizeof sz, "%zu", n);
    char *argv[] = {self, "--writer", g_addr, g_meta_uri, "killed-writer", sz, NULL};
    pid_t w = cu_spawn(argv, log, NULL);
    CHECK(w > 0, "spawn writer");
    /* wait until the writer holds its allocation (its test hook logs the
     * PutStart status), then our put of the same shape cannot fit */
    char wlog[4096] = "";
    for (int i = 0; i < 300 && !strstr(wlog, "after PutStart"); i++) {
        usleep(50000);
        FILE *f = fopen(log, "r");
        if (f) {
            size_t k = fread(wlog, 1, sizeof wlog - 1, f);
            wlog[k] = 0;
            fclose(f);
        }
    }
    CHECK(strstr(wlog, "after PutStart (status 0)"), "writer's PutStart: %s", wlog);
    cr_store_replicate_config_t cfg = {.replica_num = N_NODES};
    fill(g_reg, n, 77);
    int rc = cr_store_put_from(g_cli, "after-writer", g_reg, n, &cfg);
    CHECK_RC(rc, CR_E_NO_AVAILABLE_HANDLE);
    CHECK_RC(cr_store_exist(g_cli, "killed-writer"), 0); /* invisible while pending */
    kill(w, SIGKILL);
    int st;
    waitpid(w, &st, 0);
    /* reclaimed after the put timeout (+ quarantine of one more period) */
    uint64_t t0 = cr__now_ms();
    rc = -1;
    while (cr__now_ms() - t0 < (uint64_t)(4 * PUT_TIMEOUT_S + 6) * 1000) {
        rc = cr_store_put_from(g_cli, "after-writer", g_reg, n, &cfg);
        if (rc == 0)
            break;
        usleep(200000);
    }
    CHECK_RC(rc, 0);
    fprintf(stderr, "ok: killed writer's space reclaimed after %llu ms\n",
            (unsigned long long)(cr__now_ms() - t0));
    CHECK_RC(cr_store_exist(g_cli, "killed-writer"), 0);
    size_t got;
    CHECK_RC(cr_store_get_into(g_cli, "after-writer", g_reg + (32u << 20), n, &got), 0);
    CHECK(same(g_reg + (32u << 20), n, 77), "after-writer bytes differ");
    CHECK_RC(cr_store_remove(g_cli, "after-writer", 1), 0);
}

struct stall_arg {
    cr_store_t *c;
    uint8_t *o;
    size_t n;
    int rc;
};

static void *stall_get(void *a)
{
    struct stall_arg *s = a;
    size_t got;
    s->rc = cr_store_get(s->c, "stale", s->o, s->n, &got);
    return NULL;
}

static void reader_stall(void *user)
{
    (void)user;
    usleep(2500 * 1000);
}

static void test_stalled_reader(void)
{
    const size_t n = 1 << 20;
    cr_store_t *reader;
    int rc = make_client(&reader);
    CHECK_RC(rc, 0);
    /* the reader stalls 2.5 s between GetReplicaList and its read */
    cr__store_test_hooks_t hooks = {.after_get_replicas = reader_stall};
    cr__store_set_test_hooks(reader, &hooks);
    fill(g_reg, n, 1);
    CHECK_RC(cr_store_put_from(g_cli, "stale", g_reg, n, NULL), 0);
    struct stall_arg a = {reader, calloc(1, n), n, 0};
    pthread_t t;
    pthread_create(&t, NULL, stall_get, &a);
    usleep((LEASE_MS + 200) * 1000);
    CHECK_RC(cr_store_remove(g_cli, "stale", 0), 0);
    fill(g_reg, n, 2);
    CHECK_RC(cr_store_put_from(g_cli, "stale", g_reg, n, NULL), 0);
    for (int i = 0; i < 16; i++) {
        char k[32];
        snprintf(k, sizeof k, "stale-fill-%d", i);
        cr_store_put_from(g_cli, k, g_reg, n, NULL);
    }
    pthread_join(t, NULL);
    CHECK(a.rc != 0 ? 1 : same(a.o, n, 1),
          "stalled reader returned success with bytes that are not the old value");
    CHECK(a.rc == 0 || a.rc == CR_E_LEASE_EXPIRED || a.rc == CR_E_OBJECT_NOT_FOUND,
          "stalled reader: unexpected %d", a.rc);
    free(a.o);
    cr_store_destroy(reader);
    uint64_t removed;
    usleep((LEASE_MS + 100) * 1000);
    cr_store_remove_all(g_cli, &removed);
    fprintf(stderr, "ok: stalled reader got %d (%s), never the new bytes\n", a.rc,
            cr_strerror(a.rc));
}

/* Speculative gets (cr_store_location_cache_stats): a client that found a
 * key, or put it, reads it from there while it asks the master; a key
 * replaced, removed or moved meanwhile is never returned stale. */

/* A thread that calls the store once (numbered onto a master connection
 * slot), then stays alive until released. */
typedef struct {
    cr_store_t *c;
    pthread_barrier_t *numbered, *release;
} sharer_t;

static void *sharer_main(void *arg)
{
    sharer_t *a = arg;
    cr_store_exist(a->c, "spec-small");
    pthread_barrier_wait(a->numbered);
    pthread_barrier_wait(a->release);
    return NULL;
}
static void spec_stats(cr_store_t *c, uint64_t *kept, uint64_t *dropped)
{
    cr_store_location_cache_stats(c, kept, dropped);
}

/* c's get_into of key into buf (registered, n bytes) returns the value of
 * seed, after which c's counters are kept / dropped. */
static void spec_get_check(cr_store_t *c, const char *key, uint8_t *buf, size_t n, uint64_t seed,
                           uint64_t kept, uint64_t dropped, const char *what)
{
    size_t got = 0;
    uint64_t k, d;
    memset(buf, 0, n);
    CHECK_RC(cr_store_get_into(c, key, buf, n, &got), 0);
    CHECK(got == n && same(buf, n, seed), "%s: wrong bytes", what);
    spec_stats(c, &k, &d);
    CHECK(k == kept && d == dropped, "%s: %llu kept, %llu dropped (want %llu, %llu)", what,
          (unsigned long long)k, (unsigned long long)d, (unsigned long long)kept,
          (unsigned long long)dropped);
}

/* c's batch_get_into of keys[0..m) into buf (registered, m * n bytes)
 * gets each key's value of seeds[i] (0: CR_E_OBJECT_NOT_FOUND), after
 * which c's counters moved by kept / dropped. */
static void spec_batch_check(cr_store_t *c, const char *const *keys, size_t m, uint8_t *buf,
                             size_t n, const uint64_t *seeds, uint64_t kept, uint64_t dropped,
                             const char *what)
{
    void *d[4];
    size_t caps[4], lens[4];
    int res[4];
    uint64_t k0, d0, k1, d1;
    for (size_t i = 0; i < m; i++) {
        d[i] = buf + i * n;
        caps[i] = n;
        lens[i] = 0;
    }
    memset(buf, 0, m * n);
    spec_stats(c, &k0, &d0);
    cr_store_batch_get_into(c, keys, d, caps, m, lens, res);
    spec_stats(c, &k1, &d1);
    for (size_t i = 0; i < m; i++) {
        if (!seeds[i]) {
            CHECK(res[i] == CR_E_OBJECT_NOT_FOUND, "%s: key %zu got %d, not a miss", what, i,
                  res[i]);
            continue;
        }
        CHECK(res[i] == 0 && lens[i] == n, "%s: key %zu got %d (%zu bytes)", what, i, res[i],
              lens[i]);
        CHECK(same(buf + i * n, n, seeds[i]), "%s: key %zu: wrong bytes", what, i);
    }
    CHECK(k1 - k0 == kept && d1 - d0 == dropped,
          "%s: %llu kept, %llu dropped (want %llu, %llu)", what, (unsigned long long)(k1 - k0),
          (unsigned long long)(d1 - d0), (unsigned long long)kept, (unsigned long long)dropped);
}

/* Batches (spec_batch_t in ops.c): the keys a client knows are read while
 * the master answers; an unknown key is read the usual way in the same
 * call; a replaced or removed key is never returned stale; a client's own
 * batch put is remembered. buf: 4 * n registered bytes of reader. */
static void spec_batch_checks(cr_store_t *reader, uint8_t *buf, size_t n)
{
    const char *known[2] = {"spec-small", "spec-small"};
    uint64_t s44[2] = {44, 44};
    spec_batch_check(reader, known, 2, buf, n, s44, 2, 0, "batch of known keys");

    fill(g_reg, n, 45);
    CHECK_RC(cr_store_put_from(g_cli, "spec-b-new", g_reg, n, NULL), 0);
    const char *mixed[3] = {"spec-small", "spec-b-new", "spec-b-absent"};
    uint64_t smixed[3] = {44, 45, 0};
    spec_batch_check(reader, mixed, 3, buf, n, smixed, 1, 0, "known, unknown and absent keys");

    /* replaced with a value of the same size, then removed: never stale */
    usleep((LEASE_MS + 200) * 1000);
    CHECK_RC(cr_store_remove(g_cli, "spec-small", 1), 0);
    fill(g_reg, n, 46);
    CHECK_RC(cr_store_put_from(g_cli, "spec-small", g_reg, n, NULL), 0);
    uint64_t s46[2] = {46, 46};
    spec_batch_check(reader, known, 2, buf, n, s46, 0, 2, "replaced key in a batch");
    /* a batch remembers what it read the usual way: the next is speculative */
    spec_batch_check(reader, known, 2, buf, n, s46, 2, 0, "replaced key's new place");
    CHECK_RC(cr_store_remove(g_cli, "spec-b-new", 1), 0);
    const char *gone[2] = {"spec-b-new", "spec-small"};
    uint64_t sgone[2] = {0, 46};
    spec_batch_check(reader, gone, 2, buf, n, sgone, 1, 1, "removed key in a batch");

    /* the writer's own batch put is remembered: its batch get reads at once */
    const char *own[2] = {"spec-b-own0", "spec-b-own1"};
    fill(g_reg, n, 47);
    fill(g_reg + n, n, 48);
    const void *src[2] = {g_reg, g_reg + n};
    size_t lens[2] = {n, n};
    int res[2];
    CHECK_RC(cr_store_batch_put_from(g_cli, own, src, lens, 2, NULL, res), 0);
    uint64_t sown[2] = {47, 48};
    spec_batch_check(g_cli, own, 2, g_reg + (32u << 20), n, sown, 2, 0, "own batch put's get");
    cr_store_remove(g_cli, "spec-b-own0", 1);
    cr_store_remove(g_cli, "spec-b-own1", 1);
}

static void test_spec_get(void)
{
    const size_t n = 64 << 10;
    cr_store_t *reader;
    CHECK_RC(make_client(&reader), 0);
    uint8_t *buf = malloc(4 * n);
    CHECK(buf && cr_store_register_buffer(reader, buf, 4 * n) == 0, "reader buffer");
    uint64_t k, d;
    size_t got = 0;
    fill(g_reg, n, 41);
    CHECK_RC(cr_store_put_from(g_cli, "spec", g_reg, n, NULL), 0);
    spec_get_check(reader, "spec", buf, n, 41, 0, 0, "first get (found, remembered)");
    spec_get_check(reader, "spec", buf, n, 41, 1, 0, "second get (speculative)");

    /* replaced by another writer with a value of the same size: the
     * remembered place is stale, the get must find the new version */
    usleep((LEASE_MS + 200) * 1000);
    CHECK_RC(cr_store_remove(g_cli, "spec", 0), 0);
    fill(g_reg, n, 42);
    CHECK_RC(cr_store_put_from(g_cli, "spec", g_reg, n, NULL), 0);
    spec_get_check(reader, "spec", buf, n, 42, 1, 1, "replaced key (never stale)");
    spec_get_check(reader, "spec", buf, n, 42, 2, 1, "replaced key's new place");

    /* removed (force: the reader holds a lease): a miss, not the old bytes */
    CHECK_RC(cr_store_remove(g_cli, "spec", 1), 0);
    memset(buf, 0, n);
    CHECK_RC(cr_store_get_into(reader, "spec", buf, n, &got), CR_E_OBJECT_NOT_FOUND);

    /* a buffer too small for the remembered value: refused, nothing read */
    fill(g_reg, n, 44);
    CHECK_RC(cr_store_put_from(g_cli, "spec-small", g_reg, n, NULL), 0);
    CHECK_RC(cr_store_get_into(reader, "spec-small", buf, n, &got), 0);
    CHECK_RC(cr_store_get_into(reader, "spec-small", buf, n / 2, &got), CR_E_BUFFER_OVERFLOW);


    /* a thread whose master connection another live thread shares does not
     * read speculatively (a frozen node would stall that thread's calls
     * too); once the sharers are gone it does again. Eight more threads
     * numbered one after the other cover every slot, this thread's too. */
    enum { SHARERS = 8 };
    pthread_barrier_t numbered, release;
    pthread_barrier_init(&numbered, NULL, SHARERS + 1);
    pthread_barrier_init(&release, NULL, SHARERS + 1);
    pthread_t sh[SHARERS];
    sharer_t sa = {reader, &numbered, &release};
    for (int i = 0; i < SHARERS; i++)
        CHECK(pthread_create(&sh[i], NULL, sharer_main, &sa) == 0, "sharer thread");
    pthread_barrier_wait(&numbered);
    spec_stats(reader, &k, &d);
    spec_get_check(reader, "spec-small", buf, n, 44, k, d, "a shared connection: not speculative");
    pthread_barrier_wait(&release);
    for (int i = 0; i < SHARERS; i++)
        pthread_join(sh[i], NULL);
    pthread_barrier_destroy(&numbered);
    pthread_barrier_destroy(&release);
    spec_get_check(reader, "spec-small", buf, n, 44, k + 1, d,
                   "the connection its own again: speculative");

    /* the writer's own put is remembered: its first get is speculative */
    spec_stats(g_cli, &k, &d);
    fill(g_reg, n, 43);
    CHECK_RC(cr_store_put_from(g_cli, "spec-own", g_reg, n, NULL), 0);
    spec_get_check(g_cli, "spec-own", g_reg + (32u << 20), n, 43, k + 1, d, "own put's first get");

    spec_batch_checks(reader, buf, n);

    cr_store_unregister_buffer(reader, buf);
    cr_store_destroy(reader);
    free(buf);
    cr_store_remove(g_cli, "spec-own", 1);
    cr_store_remove(g_cli, "spec-small", 1);
    fprintf(stderr, "ok: speculative gets keep a remembered place's bytes only while the "
                    "master names that version there\n");
}

static void test_eviction(void)
{
    const size_t n = 1 << 20;
    const int total = (int)(3 * N_NODES * NODE_SEG_BYTES / n);
    int fails = 0;
    for (int i = 0; i < total; i++) {
        char k[32];
        snprintf(k, sizeof k, "ev-%d", i);
        fill(g_reg, n, 100000 + (uint64_t)i);
        if (cr_store_put_from(g_cli, k, g_reg, n, NULL))
            fails++;
    }
    CHECK(fails <= total / 20, "%d of %d puts failed despite eviction", fails, total);
    int hits = 0, misses = 0;
    for (int i = 0; i < total; i++) {
        char k[32];
        size_t got;
        snprintf(k, sizeof k, "ev-%d", i);
        int rc = cr_store_get_into(g_cli, k, g_reg + (32u << 20), n, &got);
        if (rc == 0) {
            CHECK(same(g_reg + (32u << 20), n, 100000 + (uint64_t)i), "evicted-stream %s differs", k);
            hits++;
        } else {
            CHECK_RC(rc, CR_E_OBJECT_NOT_FOUND);
            misses++;
        }
    }
    CHECK(hits > 0 && misses >= total / 2, "hits %d misses %d", hits, misses);
    usleep((LEASE_MS + 100) * 1000);
    cr_store_remove_all(g_cli, NULL);
    fprintf(stderr, "ok: eviction: %d puts into a pool of %d MiB, %d hits, %d misses\n", total,
            (int)(N_NODES * NODE_SEG_BYTES >> 20), hits, misses);
}

/* ---- a node SIGKILLed under load ------------------------------------------- */

#define LOAD_KEYS 60
#define LOAD_SIZE (256u << 10)
static atomic_int g_load_stop;
static atomic_int g_wrong, g_hits, g_misses, g_other;

static void *load_reader(void *a)
{
    long id = (long)a;
    uint8_t *o = malloc(LOAD_SIZE);
    for (unsigned it = 0; !atomic_load(&g_load_stop); it++) {
        int k = (int)((it * 7 + (unsigned)id * 13) % LOAD_KEYS);
        char key[32];
        size_t got = 0;
        snprintf(key, sizeof key, "load-%d", k);
        int rc = cr_store_get(g_cli, key, o, LOAD_SIZE, &got);
        if (rc == 0) {
            if (got != LOAD_SIZE || !same(o, LOAD_SIZE, 7000 + (uint64_t)k))
                atomic_fetch_add(&g_wrong, 1);
            else
                atomic_fetch_add(&g_hits, 1);
        } else if (rc == CR_E_OBJECT_NOT_FOUND) {
            atomic_fetch_add(&g_misses, 1);
        } else {
            atomic_fetch_add(&g_other, 1); /* transfer failure while the node dies: fine */
        }
    }
    free(o);
    return NULL;
}

static void test_node_killed_under_load(void)
{
    uint8_t *v = malloc(LOAD_SIZE);
    for (int k = 0; k < LOAD_KEYS; k++) {
        char key[32];
        snprintf(key, sizeof key, "load-%d", k);
        fill(v, LOAD_SIZE, 7000 + (uint64_t)k);
        CHECK_RC(cr_store_put(g_cli, key, v, LOAD_SIZE, NULL), 0);
    }
    free(v);
    pthread_t t[3];
    atomic_store(&g_load_stop, 0);
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, load_reader, (void *)i);
    usleep(500000);
    int victim = N_NODES - 1;
    kill(g_node_pid[victim], SIGKILL);
    int st;
    waitpid(g_node_pid[victim], &st, 0);
    g_node_pid[victim] = -1;
    usleep((CLIENT_TTL_S * 1000 + 1500) * 1000); /* the master expires the node */
    atomic_store(&g_load_stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    fprintf(stderr, "load: hits %d misses %d other %d wrong %d\n", g_hits, g_misses, g_other,
            g_wrong);
    CHECK(g_wrong == 0, "%d gets returned wrong bytes", g_wrong);
    CHECK(g_hits > 0, "no hits under load");
    /* now: the dead node's keys are misses, the others are intact */
    int hits = 0, misses = 0;
    uint8_t *o = malloc(LOAD_SIZE);
    for (int k = 0; k < LOAD_KEYS; k++) {
        char key[32];
        size_t got;
        snprintf(key, sizeof key, "load-%d", k);
        int rc = cr_store_get(g_cli, key, o, LOAD_SIZE, &got);
        if (rc == 0) {
            CHECK(same(o, LOAD_SIZE, 7000 + (uint64_t)k), "%s differs after the kill", key);
            hits++;
        } else {
            CHECK_RC(rc, CR_E_OBJECT_NOT_FOUND);
            misses++;
        }
    }
    free(o);
    CHECK(misses > 0 && hits > 0, "after the kill: hits %d misses %d (expected some of each)",
          hits, misses);
    usleep((LEASE_MS + 100) * 1000);
    cr_store_remove_all(g_cli, NULL);
    fprintf(stderr, "ok: node SIGKILLed under load: %d keys lost (misses), %d intact, 0 wrong\n",
            misses, hits);
}

static void test_master_restart(void)
{
    int st;
    kill(g_master_pid, SIGKILL);
    waitpid(g_master_pid, &st, 0);
    CHECK(start_master(g_rpc_port) == 0, "master restart on port %u", g_rpc_port);
    uint8_t v[8192], o[8192];
    fill(v, sizeof v, 55);
    /* the surviving nodes remount on their next heartbeat; replicas on both
     * of them prove both came back */
    cr_store_replicate_config_t cfg = {.replica_num = 2};
    int rc = -1;
    for (int i = 0; i < 100 && rc; i++) {
        rc = cr_store_put(g_cli, "post-restart", v, sizeof v, &cfg);
        if (rc)
            usleep(100000);
    }
    CHECK_RC(rc, 0);
    size_t got;
    CHECK_RC(cr_store_get(g_cli, "post-restart", o, sizeof o, &got), 0);
    CHECK(same(o, sizeof o, 55), "post-restart bytes differ");
    for (int i = 0; i < N_NODES; i++)
        if (g_node_pid[i] > 0)
            CHECK(cu_alive(g_node_pid[i]), "node %d died across the master restart", i);
    /* a client created after the restart knows no segment descriptor: the
     * restarted metadata server must have them again (nodes republish on
     * remount) */
    cr_store_t *fresh = NULL;
    CHECK_RC(make_client(&fresh), 0);
    rc = cr_store_put(fresh, "post-restart-fresh", v, sizeof v, &cfg);
    int rc2 = rc ? rc : cr_store_get(fresh, "post-restart", o, sizeof o, &got);
    cr_store_destroy(fresh);
    CHECK_RC(rc, 0);
    CHECK_RC(rc2, 0);
    CHECK(same(o, sizeof o, 55), "fresh client read other bytes");
    fprintf(stderr, "ok: master restarted, nodes remounted and republished\n");
}

/* A node started while the master is down keeps retrying and mounts once
 * the master is back. */
static void test_node_before_master(void)
{
    int st;
    kill(g_master_pid, SIGKILL);
    waitpid(g_master_pid, &st, 0);
    g_master_pid = -1;
    int i = N_NODES - 1; /* killed in the load test: reuse its slot */
    CHECK(g_node_pid[i] <= 0, "slot %d busy", i);
    char rf[300], log[300];
    snprintf(rf, sizeof rf, "%s/node%d.ready", g_dir, i);
    snprintf(log, sizeof log, "%s/node%d-late.log", g_dir, i);
    unlink(rf);
    char *argv[] = {(char *)g_node_bin, "--master_server_address", g_addr, "--global_segment_size",
                    NODE_SEG, "--heartbeat_ms", "200", "--rpc_timeout_ms", "300",
                    "--metadata_server", g_meta_uri, "--start_timeout_s", "30",
                    "--ready_file", rf, NULL};
    g_node_pid[i] = cu_spawn(argv, log, NULL);
    usleep(1500000);
    CHECK(cu_alive(g_node_pid[i]), "node exited while the master was down");
    CHECK(start_master(g_rpc_port) == 0, "master restart");
    char buf[300];
    CHECK(cu_wait_file(rf, 20000, buf, sizeof buf) == 0, "late node never became ready");
    buf[strcspn(buf, "\n")] = 0;
    const char *pref[] = {buf};
    cr_store_replicate_config_t cfg = {.replica_num = 1, .preferred_segments = pref, .n_preferred = 1};
    uint8_t v[4096], o[4096];
    size_t got;
    fill(v, sizeof v, 31);
    int rc = -1;
    for (int k = 0; k < 50 && rc; k++) {
        rc = cr_store_put(g_cli, "late-node", v, sizeof v, &cfg);
        if (rc)
            usleep(100000);
    }
    CHECK_RC(rc, 0);
    CHECK_RC(cr_store_get(g_cli, "late-node", o, sizeof o, &got), 0);
    CHECK(same(o, sizeof o, 31), "late-node bytes differ");
    fprintf(stderr, "ok: a node started before its master mounts once the master is up\n");
}

static void test_node_sigterm(void)
{
    cr_store_replicate_config_t cfg = {.replica_num = 1};
    const char *pref[] = {g_node_seg[0]};
    cfg.preferred_segments = pref;
    cfg.n_preferred = 1;
    uint8_t v[4096];
    fill(v, sizeof v, 8);
    CHECK_RC(cr_store_put(g_cli, "on-node0", v, sizeof v, &cfg), 0);
    int st = cu_stop(g_node_pid[0], SIGTERM, 10000);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "node 0 SIGTERM exit status %d", st);
    g_node_pid[0] = -1;
    /* unmounted at once: its objects are gone */
    CHECK_RC(cr_store_exist(g_cli, "on-node0"), 0);
    fprintf(stderr, "ok: node SIGTERM: exit 0, segment unmounted\n");
}

static void test_bad_input(void)
{
    uint8_t b[16] = {0};
    size_t got;
    CHECK_RC(cr_store_put(g_cli, "", b, 1, NULL), CR_E_INVALID_KEY);
    CHECK_RC(cr_store_put(g_cli, "x", b, 0, NULL), CR_E_INVALID_PARAMS);
    CHECK_RC(cr_store_put_from(g_cli, "x", b, sizeof b, NULL), CR_E_INVALID_PARAMS);
    CHECK_RC(cr_store_get(g_cli, "x", b, sizeof b, &got), CR_E_OBJECT_NOT_FOUND);
    cr_store_replicate_config_t cfg = {.replica_num = 99};
    CHECK_RC(cr_store_put(g_cli, "x", b, 1, &cfg), CR_E_INVALID_PARAMS);
    fprintf(stderr, "ok: bad input rejected\n");
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "--writer"))
        return writer_main(argv[2], argv[3], argv[4], strtoull(argv[5], NULL, 10));
    if (argc != 3) {
        fprintf(stderr, "usage: %s <crescent-master> <crescent-node>\n", argv[0]);
        return 2;
    }
    g_master_bin = argv[1];
    g_node_bin = argv[2];
    signal(SIGPIPE, SIG_IGN);
    snprintf(g_dir, sizeof g_dir, "/tmp/crescent-store-cluster-XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    fprintf(stderr, "logs in %s\n", g_dir);
    int rc = 1;
    if (start_master(0))
        goto out;
    for (int i = 0; i < N_NODES; i++)
        if (start_node(i))
            goto out;
    if (make_client(&g_cli))
        goto out;
    g_reg = mmap(NULL, REG_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g_reg == MAP_FAILED || cr_store_register_buffer(g_cli, g_reg, REG_SIZE))
        goto out;

    test_bad_input();
    test_held_name();
    test_sizes();
    test_replicas_distinct();
    test_lease_blocks_remove();
    test_writer_killed();
    test_stalled_reader();
    test_spec_get();
    test_eviction();
    test_node_killed_under_load();
    test_master_restart();
    test_node_before_master();
    test_node_sigterm();
    rc = test_failures ? 1 : 0;
out:
    if (g_cli) {
        cr_store_unregister_buffer(g_cli, g_reg);
        cr_store_destroy(g_cli);
    }
    for (int i = 0; i < N_NODES; i++)
        if (g_node_pid[i] > 0)
            cu_stop(g_node_pid[i], SIGTERM, 5000);
    if (g_master_pid > 0)
        cu_stop(g_master_pid, SIGTERM, 5000);
    fprintf(stderr, "%s (%d failures)\n", rc ? "FAILED" : "PASSED", test_failures);
    if (!rc) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
        if (system(cmd))
            fprintf(stderr, "could not remove %s (left behind)\n", g_dir);
    }
    return rc;
}
