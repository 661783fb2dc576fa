/* crescent-node: a standalone storage daemon that only contributes memory to
 * the store. It mounts global_segment_size bytes at the master, heartbeats
 * (the client library's background thread; it remounts after a master
 * restart) and unmounts on SIGTERM/SIGINT before exiting 0.
 *
 * Prints one line "crescent-node: ready segment=<name>" to stdout once the
 * segment is mounted (scripts and tests wait for it). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/auth/auth_opts.h"
#include "common/config.h"
#include "common/file.h"
#include "common/net.h"
#include "crescent/store.h"
#include "store/client/client.h"
#include "store/tier/ssd/node.h"

typedef struct node_cfg {
    char master_server_address[CR__CFG_STR_MAX];
    uint64_t global_segment_size;
    char metadata_server[CR__CFG_STR_MAX];
    char local_hostname[CR__CFG_STR_MAX];
    char protocol[CR__CFG_STR_MAX];
    char device_name[CR__CFG_STR_MAX];
    int64_t te_port;
    int64_t heartbeat_ms;
    int64_t rpc_timeout_ms;
    double start_timeout_s;
    char ready_file[CR__CFG_STR_MAX];
    char ssd_path[CR__CFG_STR_MAX];
    uint64_t ssd_capacity;
    int64_t ssd_queue_depth;
    int64_t ssd_port;
    CR__AUTH_CFG_FIELDS;
} node_cfg_t;

#define OPT(n, d, h, t) {#n, d, h, t, offsetof(node_cfg_t, n)}
static const cr__cfg_opt_t opts[] = {
    OPT(master_server_address, "127.0.0.1:50051", "master address host:port", CR__CFG_STR),
    OPT(global_segment_size, "256MB", "memory contributed to the pool", CR__CFG_SIZE),
    OPT(metadata_server, "p2p",
        "TE metadata: http://host:port/metadata, etcd://host:port or p2p", CR__CFG_STR),
    OPT(local_hostname, "127.0.0.1", "this node's address (TE NIC and segment name)",
        CR__CFG_STR),
    OPT(protocol, "tcp", "TE transports: tcp or tcp,shm", CR__CFG_STR),
    OPT(device_name, "", "comma-separated NIC addresses (default: local_hostname)",
        CR__CFG_STR),
    OPT(te_port, "0", "TE listening port (0 = ephemeral)", CR__CFG_INT),
    OPT(heartbeat_ms, "1000", "heartbeat period in ms", CR__CFG_INT),
    OPT(rpc_timeout_ms, "5000", "bound on one master RPC in ms", CR__CFG_INT),
    OPT(start_timeout_s, "30",
        "keep retrying while the master or metadata service is unreachable or the master "
        "still holds this segment name (a previous instance that crashed) for this long",
        CR__CFG_DOUBLE),
    OPT(ready_file, "", "write the segment name to this file once mounted", CR__CFG_STR),
    OPT(ssd_path, "",
        "directory of this node's disk tier (DRAM eviction offloads objects there; they "
        "survive a restart with the same directory); empty = DRAM only",
        CR__CFG_STR),
    OPT(ssd_capacity, "1GB", "bytes of the disk tier (preallocated in --ssd_path)", CR__CFG_SIZE),
    OPT(ssd_queue_depth, "32", "io_uring queue depth of each disk tier thread", CR__CFG_INT),
    OPT(ssd_port, "0", "port of the disk tier read server (0 = ephemeral)", CR__CFG_INT),
    CR__AUTH_CFG_OPTS(node_cfg_t),
};

int main(int argc, char **argv)
{
    node_cfg_t cfg;
    char err[256] = "";
    int rc = cr__cfg_parse(opts, sizeof opts / sizeof opts[0], &cfg, argc, argv, 1,
                           "CRESCENT_NODE_", NULL, 0, NULL, err, sizeof err);
    if (rc == 1) {
        cr__cfg_usage(stdout, "crescent-node",
                      "storage daemon: contributes memory to the crescent store", opts,
                      sizeof opts / sizeof opts[0]);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "crescent-node: %s\n", err);
        return 2;
    }
    cr__net_raise_nofile("crescent-node");
    if (cfg.global_segment_size == 0) {
        fprintf(stderr, "crescent-node: --global_segment_size must be > 0\n");
        return 2;
    }
    if (cfg.te_port < 0 || cfg.te_port > 65535 || cfg.heartbeat_ms <= 0 ||
        cfg.rpc_timeout_ms <= 0) {
        fprintf(stderr, "crescent-node: bad --te_port/--heartbeat_ms/--rpc_timeout_ms\n");
        return 2;
    }

    /* Block the stop signals before any thread starts so that only sigwait
     * below receives them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    cr_store_params_t p = {0};
    p.field_mask = CR_STORE_PARAM_LOCAL_HOSTNAME | CR_STORE_PARAM_METADATA_URI |
                   CR_STORE_PARAM_MASTER_ADDR | CR_STORE_PARAM_GLOBAL_SEGMENT_SIZE |
                   CR_STORE_PARAM_PROTOCOL | CR_STORE_PARAM_TE_PORT |
                   CR_STORE_PARAM_HEARTBEAT_MS | CR_STORE_PARAM_RPC_TIMEOUT_MS |
                   CR_STORE_PARAM_LOCAL_BUFFER_SIZE;
    p.local_hostname = cfg.local_hostname;
    p.metadata_uri = cfg.metadata_server;
    p.master_addr = cfg.master_server_address;
    p.global_segment_size = cfg.global_segment_size;
    p.local_buffer_size = 64 * 1024; /* serves no requests of its own */
    p.protocol = cfg.protocol;
    p.te_port = (uint16_t)cfg.te_port;
    p.heartbeat_ms = (unsigned)cfg.heartbeat_ms;
    p.rpc_timeout_ms = (unsigned)cfg.rpc_timeout_ms;
    if (cfg.device_name[0]) {
        p.field_mask |= CR_STORE_PARAM_DEVICE_NAMES;
        p.device_names = cfg.device_name;
    }
    if (cfg.tls_cert[0] || cfg.tls_key[0] || cfg.tls_ca[0]) {
        p.field_mask |= CR_STORE_PARAM_TLS;
        p.tls_cert = cfg.tls_cert;
        p.tls_key = cfg.tls_key;
        p.tls_ca = cfg.tls_ca;
    }
    if (cfg.cluster_key_file[0]) {
        p.field_mask |= CR_STORE_PARAM_CLUSTER_KEY_FILE;
        p.cluster_key_file = cfg.cluster_key_file;
    }
    cr_store_t *st = NULL;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        rc = cr_store_create(&p, &st);
        /* master (or the metadata service it embeds) not up yet, or our
         * name still held by a crashed predecessor: worth waiting for */
        if (rc != CR_E_RPC_FAIL && rc != CR_E_SEGMENT_ALREADY_EXISTS && rc != -EHOSTUNREACH &&
            rc != -ECONNREFUSED && rc != -ETIMEDOUT)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double waited = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
        if (waited >= cfg.start_timeout_s)
            break;
        fprintf(stderr, "crescent-node: %s; retrying\n", cr_strerror(rc));
        /* a stop signal while waiting ends the retries */
        struct timespec one = {1, 0};
        int sig = sigtimedwait(&set, NULL, &one);
        if (sig > 0) {
            fprintf(stderr, "crescent-node: signal %d while starting\n", sig);
            return 1;
        }
    }
    if (rc) {
        fprintf(stderr, "crescent-node: cannot start: %s (%d)\n", cr_strerror(rc), rc);
        return 1;
    }
    fprintf(stderr, "crescent-node: %s\n", cr__auth_mode_line(st->auth != NULL, st->tls != NULL));
    cr__tier_node_t *tier = NULL;
    /* Mooncake's client takes the same two settings from its environment */
    /* (used only when --ssd_path is not given) */
    const char *mp = getenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH");
    const char *ml = getenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES");
    int from_env = !cfg.ssd_path[0] && mp && mp[0];
    if (from_env)
        snprintf(cfg.ssd_path, sizeof cfg.ssd_path, "%s", mp);
    if (from_env && ml && ml[0]) {
        char *end;
        unsigned long long v = strtoull(ml, &end, 10);
        if (*end || v == 0) {
            fprintf(stderr, "crescent-node: MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES=%s is not a "
                            "byte count\n", ml);
            cr_store_destroy(st);
            return 2;
        }
        cfg.ssd_capacity = v;
    }
    if (cfg.ssd_path[0]) {
        if (cfg.ssd_queue_depth < 1 || cfg.ssd_queue_depth > 256 || cfg.ssd_port < 0 ||
            cfg.ssd_port > 65535) {
            fprintf(stderr, "crescent-node: --ssd_queue_depth must be 1..256, --ssd_port 0..65535\n");
            cr_store_destroy(st);
            return 2;
        }
        cr__tier_node_cfg_t tc = {.dir = cfg.ssd_path,
                                  .capacity = cfg.ssd_capacity,
                                  .qd = (unsigned)cfg.ssd_queue_depth,
                                  .master = cfg.master_server_address,
                                  .host = cfg.local_hostname,
                                  .port = (uint16_t)cfg.ssd_port,
                                  .id = st->id,
                                  .dram_base = st->seg_base,
                                  .dram_size = st->seg_size,
                                  .rpc_timeout_ms = (unsigned)cfg.rpc_timeout_ms,
                                  .auth = st->auth,
                                  .tls = st->tls};
        char terr[512] = "";
        rc = cr__tier_node_start(&tc, &tier, terr, sizeof terr);
        if (rc) {
            fprintf(stderr, "crescent-node: disk tier: %s\n", terr);
            cr_store_destroy(st);
            return 1;
        }
        fprintf(stderr, "crescent-node: disk tier %s at %s (%llu bytes)\n",
                cr__tier_node_segment(tier), cfg.ssd_path, (unsigned long long)cfg.ssd_capacity);
    }
    const char *name = cr_store_segment_name(st);
    if (cfg.ready_file[0]) {
        char line[CR__CFG_STR_MAX + 2];
        int n = snprintf(line, sizeof line, "%s\n", name);
        int wrc = cr__file_write_atomic(cfg.ready_file, line, (size_t)n, 0, 0644);
        if (wrc)
            fprintf(stderr, "crescent-node: cannot write --ready_file %s: %s\n", cfg.ready_file,
                    cr_strerror(wrc));
    }
    printf("crescent-node: ready segment=%s size=%llu master=%s\n", name,
           (unsigned long long)cfg.global_segment_size, cfg.master_server_address);
    fflush(stdout);

    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    fprintf(stderr, "crescent-node: signal %d, unmounting\n", sig);
    cr__tier_node_stop(tier);
    cr_store_destroy(st);
    return 0;
}
