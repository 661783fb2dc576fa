/* Driver of netns_test.sh (runs inside the client namespace): master here,
 * one crescent-node per node namespace, the test as the client. Scenarios:
 *   - put/get across namespaces (tcp; shm is enabled but must not be used
 *     across namespaces), 2 replicas on distinct nodes;
 *   - a node partitioned (its bridge port down): a batch get of every key
 *     still returns every value with the right bytes (failover to the other
 *     replica), the master then expires the node and gets stay correct;
 *   - healed: the node remounts (NEED_REMOUNT) and takes replicas again;
 *   - a node SIGKILLed under load: 0 wrong bytes.
 * usage: test_store_netns <crescent-master> <crescent-node> <hub ns> <ns1> <ns2> <ns3> <tag> */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster_util.h"
#include "common/clock.h"
#include "crescent/store.h"
#include "test_check.h"

#define N_NODES 3
#define KEYS 24
#define VSIZE (512u << 10)
#define CLIENT_TTL_S 3

static char g_dir[64], g_addr[64];
static const char *g_hub, *g_tag, *g_ns[N_NODES], *g_node_bin;
static pid_t g_master = -1, g_nodes[N_NODES];
static cr_store_t *g_cli;
static uint8_t *g_reg;


static void fill(uint8_t *b, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(b + i, &x, n - i < 8 ? n - i : 8);
    }
}

static int same(const uint8_t *b, size_t n, uint64_t seed)
{
    uint8_t *t = malloc(n);
    fill(t, n, seed);
    int r = !memcmp(t, b, n);
    free(t);
    return r;
}

static int link_set(int node, const char *state)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ip -n %s link set h%d-%s %s", g_hub, node + 1, g_tag, state);
    return system(cmd);
}

static int start_node(int i)
{
    char rf[128], log[128], host[32], buf[300];
    snprintf(rf, sizeof rf, "%s/node%d.ready", g_dir, i);
    snprintf(log, sizeof log, "%s/node%d.log", g_dir, i);
    snprintf(host, sizeof host, "10.203.0.%d", i + 2);
    unlink(rf);
    char *nargv[] = {"/usr/bin/ip", "netns", "exec", (char *)g_ns[i], (char *)g_node_bin,
                     "--master_server_address", g_addr, "--global_segment_size", "32MB",
                     "--heartbeat_ms", "200", "--local_hostname", host, "--protocol", "tcp,shm",
                     "--ready_file", rf, NULL};
    g_nodes[i] = cu_spawn(nargv, log, NULL);
    return g_nodes[i] < 0 || cu_wait_file(rf, 20000, buf, sizeof buf) ? -1 : 0;
}

static void put_keys(void)
{
    cr_store_replicate_config_t cfg = {.replica_num = 2};
    for (int k = 0; k < KEYS; k++) {
        char key[32];
        snprintf(key, sizeof key, "nk-%d", k);
        fill(g_reg + (size_t)k * VSIZE, VSIZE, 900 + (uint64_t)k);
        int rc = cr_store_put_from(g_cli, key, g_reg + (size_t)k * VSIZE, VSIZE, &cfg);
        CHECK(rc == 0, "put %s: %s", key, cr_strerror(rc));
    }
}

/* One batch get of every key into the second half of the registered area;
 * returns the number of keys with correct bytes (all others counted in
 * *bad when they returned success with wrong bytes). */
static int batch_get_all(int *bad, int *errors)
{
    char names[KEYS][32];
    const char *keys[KEYS];
    void *outs[KEYS];
    size_t caps[KEYS], lens[KEYS];
    int res[KEYS], good = 0;
    uint8_t *base = g_reg + (size_t)KEYS * VSIZE;
    memset(base, 0, (size_t)KEYS * VSIZE);
    for (int k = 0; k < KEYS; k++) {
        snprintf(names[k], sizeof names[k], "nk-%d", k);
        keys[k] = names[k];
        outs[k] = base + (size_t)k * VSIZE;
        caps[k] = VSIZE;
    }
    cr_store_batch_get_into(g_cli, keys, outs, caps, KEYS, lens, res);
    *bad = *errors = 0;
    for (int k = 0; k < KEYS; k++) {
        if (res[k]) {
            (*errors)++;
            fprintf(stderr, "  %s: %s\n", keys[k], cr_strerror(res[k]));
        } else if (lens[k] != VSIZE || !same(outs[k], VSIZE, 900 + (uint64_t)k)) {
            (*bad)++;
        } else {
            good++;
        }
    }
    return good;
}

#define BIG (12u << 20)

static void test_basic(void)
{
    /* a big value read later by the copying get, in staging chunks */
    uint8_t *big = malloc(BIG);
    fill(big, BIG, 777);
    cr_store_replicate_config_t cfg = {.replica_num = 2};
    int brc = cr_store_put(g_cli, "big", big, BIG, &cfg);
    free(big);
    CHECK(brc == 0, "put big: %s", cr_strerror(brc));
    put_keys();
    int bad, errors;
    int good = batch_get_all(&bad, &errors);
    CHECK(good == KEYS, "good %d bad %d errors %d", good, bad, errors);
    fprintf(stderr, "ok: %d keys x 2 replicas across namespaces\n", KEYS);
}

static void test_partition(void)
{
    CHECK(link_set(0, "down") == 0, "link down");
    uint64_t t0 = cr__now_ms();
    int bad, errors;
    int good = batch_get_all(&bad, &errors);
    fprintf(stderr, "partitioned node 1: batch get %d good, %d wrong, %d errors in %llu ms\n", good,
            bad, errors, (unsigned long long)(cr__now_ms() - t0));
    CHECK(bad == 0, "%d wrong values", bad);
    CHECK(good == KEYS, "failover to the other replica: %d of %d", good, KEYS);
    /* the copying get of a big value: every staging chunk from a live replica */
    uint8_t *big = malloc(BIG);
    size_t got = 0;
    int brc = cr_store_get(g_cli, "big", big, BIG, &got);
    int bok = brc == 0 && got == BIG && same(big, BIG, 777);
    free(big);
    CHECK(bok, "copying get of 'big' while partitioned: %s", cr_strerror(brc));
    usleep((CLIENT_TTL_S * 1000 + 1000) * 1000); /* master expires node 1 */
    t0 = cr__now_ms();
    good = batch_get_all(&bad, &errors);
    CHECK(bad == 0 && good == KEYS, "after expiry: good %d bad %d errors %d", good, bad, errors);
    fprintf(stderr, "ok: partition: every key served by its other replica (%llu ms after expiry)\n",
            (unsigned long long)(cr__now_ms() - t0));
    CHECK(link_set(0, "up") == 0, "link up");
    /* healed: the node's heartbeat gets NEED_REMOUNT and it mounts again; a
     * 3-replica put needs all three nodes */
    cr_store_replicate_config_t cfg = {.replica_num = 3};
    fill(g_reg, VSIZE, 5);
    int rc = -1;
    for (int i = 0; i < 100 && rc; i++) {
        rc = cr_store_put_from(g_cli, "healed", g_reg, VSIZE, &cfg);
        if (rc)
            usleep(100000);
    }
    CHECK(rc == 0, "3-replica put after healing: %s", cr_strerror(rc));
    fprintf(stderr, "ok: healed node remounted\n");
}

static atomic_int g_stop, g_wrong, g_hits, g_miss, g_err;

static void *reader(void *a)
{
    long id = (long)a;
    uint8_t *o = malloc(VSIZE);
    for (unsigned i = 0; !atomic_load(&g_stop); i++) {
        int k = (int)((i * 5 + (unsigned)id * 11) % KEYS);
        char key[32];
        size_t got;
        snprintf(key, sizeof key, "nk-%d", k);
        int rc = cr_store_get(g_cli, key, o, VSIZE, &got);
        if (rc == 0)
            atomic_fetch_add(same(o, VSIZE, 900 + (uint64_t)k) ? &g_hits : &g_wrong, 1);
        else if (rc == CR_E_OBJECT_NOT_FOUND)
            atomic_fetch_add(&g_miss, 1);
        else
            atomic_fetch_add(&g_err, 1);
    }
    free(o);
    return NULL;
}

static void test_kill_under_load(void)
{
    pthread_t t[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, reader, (void *)i);
    usleep(500000);
    kill(g_nodes[1], SIGKILL);
    int st;
    waitpid(g_nodes[1], &st, 0);
    g_nodes[1] = -1;
    usleep((CLIENT_TTL_S * 1000 + 1500) * 1000);
    atomic_store(&g_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    fprintf(stderr, "kill under load: hits %d misses %d errors %d wrong %d\n", g_hits, g_miss,
            g_err, g_wrong);
    CHECK(g_wrong == 0, "%d wrong values", g_wrong);
    CHECK(g_hits > 0, "no hits");
    fprintf(stderr, "ok: node SIGKILLed under load across namespaces, 0 wrong bytes\n");
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: %s <master> <node> <hub> <ns1> <ns2> <ns3> <tag>\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    const char *master_bin = argv[1];
    g_node_bin = argv[2];
    g_hub = argv[3];
    for (int i = 0; i < N_NODES; i++)
        g_ns[i] = argv[4 + i];
    g_tag = argv[7];
    snprintf(g_dir, sizeof g_dir, "/tmp/crescent-store-netns-XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
    char pf[128], log[128], buf[256];
    snprintf(pf, sizeof pf, "%s/master.port", g_dir);
    snprintf(log, sizeof log, "%s/master.log", g_dir);
    char *margv[] = {(char *)master_bin, "--rpc_address", "10.203.0.1", "--rpc_port", "0",
                     "--metrics_port", "-1", "--client_ttl", "3", "--default_kv_lease_ttl", "1000",
                     "--port_file", pf, NULL};
    int rc = 1;
    g_master = cu_spawn(margv, log, NULL);
    unsigned port = 0;
    if (g_master < 0 || cu_wait_file(pf, 10000, buf, sizeof buf) ||
        sscanf(buf, "listening rpc=%u", &port) != 1) {
        fprintf(stderr, "master did not start\n");
        goto out;
    }
    snprintf(g_addr, sizeof g_addr, "10.203.0.1:%u", port);
    for (int i = 0; i < N_NODES; i++)
        if (start_node(i)) {
            fprintf(stderr, "node %d did not start (logs in %s)\n", i, g_dir);
            goto out;
        }
    cr_store_params_t p = {0};
    p.field_mask = CR_STORE_PARAM_MASTER_ADDR | CR_STORE_PARAM_LOCAL_HOSTNAME |
                   CR_STORE_PARAM_TRANSFER_TIMEOUT_MS | CR_STORE_PARAM_RPC_TIMEOUT_MS |
                   CR_STORE_PARAM_PROTOCOL;
    p.master_addr = g_addr;
    p.local_hostname = "10.203.0.1";
    p.transfer_timeout_ms = 3000;
    p.rpc_timeout_ms = 3000;
    p.protocol = "tcp,shm";
    if (cr_store_create(&p, &g_cli))
        goto out;
    size_t regsz = (size_t)2 * KEYS * VSIZE;
    g_reg = mmap(NULL, regsz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g_reg == MAP_FAILED || cr_store_register_buffer(g_cli, g_reg, regsz))
        goto out;
    test_basic();
    if (!test_failures)
        test_partition();
    if (!test_failures)
        test_kill_under_load();
    rc = test_failures ? 1 : 0;
out:
    if (g_cli)
        cr_store_destroy(g_cli);
    for (int i = 0; i < N_NODES; i++)
        if (g_nodes[i] > 0)
            cu_stop(g_nodes[i], SIGTERM, 5000);
    if (g_master > 0)
        cu_stop(g_master, SIGTERM, 5000);
    fprintf(stderr, "%s (logs in %s)\n", rc ? "FAILED" : "PASSED", g_dir);
    if (!rc) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", g_dir);
    }
    return rc;
}
