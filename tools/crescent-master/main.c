/* crescent-master: the store master service (metadata + allocation only;
 * data moves client-to-client through the Transfer Engine).
 *
 *   crescent-master [--rpc_port 50051] [--rpc_address 127.0.0.1]
 *                   [--enable_http_metadata_server] [--http_metadata_server_port 8080]
 *                   [--metrics_port 9003] [--port_file FILE] ...   (--help lists all)
 *
 * Once everything listens it prints one line on stdout
 *   listening rpc=PORT metrics=PORT http_metadata=PORT
 * (http_metadata=0 when the embedded metadata server is off; any port may be
 * 0 on the command line = ephemeral) and writes the same line to --port_file
 * if given. Runs until SIGINT/SIGTERM, then stops and exits 0. */
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
#include "common/clock.h"
#include "common/config.h"
#include "common/file.h"
#include "common/httpd.h"
#include "common/log.h"
#include "common/net.h"
#include "crescent/common.h"
#include "store/master/admin.h"
#include "ha.h"
#include "store/master/ha/journal.h"
#include "store/master/master.h"
#include "store/rpc/server.h"
#include "transfer/metadata/metadata.h"

#define TICK_INTERVAL_MS 100       /* cr__master_tick period */
#define ADMIN_MAX_BODY 4096        /* the admin endpoints take GETs only */
#define RPC_FRAME_TIMEOUT_MS 10000 /* a started frame must complete within */

typedef struct master_opts {
    char rpc_address[CR__CFG_STR_MAX];
    int64_t rpc_port;
    int64_t rpc_thread_num;
    int64_t rpc_spin_us;
    int64_t max_connections;
    double rpc_idle_timeout;
    int64_t default_kv_lease_ttl;
    int64_t default_kv_soft_pin_ttl;
    double eviction_high_watermark_ratio;
    double eviction_ratio;
    double client_ttl;
    double put_start_timeout;
    int enable_http_metadata_server;
    char http_metadata_server_host[CR__CFG_STR_MAX];
    int64_t http_metadata_server_port;
    char metrics_address[CR__CFG_STR_MAX];
    int64_t metrics_port;
    char port_file[CR__CFG_STR_MAX];
    /* Mooncake mooncake_master compatibility */
    int64_t port;
    int64_t max_threads;
    int allow_evict_soft_pinned_objects;
    double tier_offload_watermark;
    double tier_ssd_high_watermark;
    int tier_promote;
    int64_t rpc_conn_timeout_seconds;
    int rpc_enable_tcp_no_delay;
    int enable_gc;
    int enable_metric_reporting;
    int enable_ha;
    int capabilities;
    char etcd_endpoints[CR__CFG_STR_MAX];
    char cluster_id[CR__CFG_STR_MAX];
    char memory_allocator[CR__CFG_STR_MAX];
    char journal_dir[CR__CFG_STR_MAX];
    char root_fs_dir[CR__CFG_STR_MAX];
    int journal_fsync;
    int64_t ha_lease_ttl;
    int64_t ha_sync_timeout_ms;
    int64_t max_objects;
    uint64_t max_key_bytes;
    CR__AUTH_CFG_FIELDS; /* security (docs/security.md) */
} master_opts_t;

#define OPT(n, d, h, t) {#n, d, h, t, offsetof(master_opts_t, n)}
static const cr__cfg_opt_t opts[] = {
    OPT(rpc_address, "127.0.0.1",
        "address the RPC service binds (0.0.0.0 = all; say so together with --cluster_key_file)",
        CR__CFG_STR),
    OPT(rpc_port, "50051", "RPC port (0 = ephemeral)", CR__CFG_INT),
    OPT(rpc_thread_num, "2", "RPC event-loop threads", CR__CFG_INT),
    OPT(rpc_spin_us, "50",
        "microseconds an RPC loop busy-polls after serving a request before it sleeps (one loop "
        "at a time: up to one core while requests keep coming; cuts a small call's latency); "
        "0 = off",
        CR__CFG_INT),
    OPT(max_connections, "1024", "bound on open RPC connections", CR__CFG_INT),
    OPT(rpc_idle_timeout, "600", "seconds before an idle RPC connection is closed", CR__CFG_DOUBLE),
    OPT(default_kv_lease_ttl, "5000", "read lease granted by GetReplicaList, ms", CR__CFG_INT),
    OPT(default_kv_soft_pin_ttl, "1800000", "soft pin lifetime, ms", CR__CFG_INT),
    OPT(eviction_high_watermark_ratio, "0.90", "usage fraction that triggers eviction",
        CR__CFG_DOUBLE),
    OPT(eviction_ratio, "0.05", "fraction of capacity freed per eviction step", CR__CFG_DOUBLE),
    OPT(client_ttl, "10", "seconds without a heartbeat before a client's segments are unmounted",
        CR__CFG_DOUBLE),
    OPT(put_start_timeout, "30", "seconds a put may stay unfinished before it is reclaimed",
        CR__CFG_DOUBLE),
    OPT(enable_http_metadata_server, "false", "run the embedded HTTP metadata server",
        CR__CFG_BOOL),
    OPT(http_metadata_server_host, "127.0.0.1", "address of the embedded metadata server",
        CR__CFG_STR),
    OPT(http_metadata_server_port, "8080", "port of the embedded metadata server (0 = ephemeral)",
        CR__CFG_INT),
    OPT(metrics_address, "127.0.0.1", "address of the HTTP admin/metrics server", CR__CFG_STR),
    OPT(metrics_port, "9003",
        "HTTP admin port: /metrics /health /query_key /get_all_segments (0 = ephemeral, -1 = off)",
        CR__CFG_INT),
    OPT(port_file, "", "write the 'listening ...' line to this file too", CR__CFG_STR),
    /* accepted for mooncake_master command lines */
    OPT(port, "-1", "deprecated alias of --rpc_port (Mooncake); -1 = unset", CR__CFG_INT),
    OPT(max_threads, "0", "deprecated alias of --rpc_thread_num (Mooncake); 0 = unset",
        CR__CFG_INT),
    OPT(tier_offload_watermark, "0.70",
        "DRAM usage fraction above which cold objects are copied to their node's disk tier "
        "ahead of eviction (0 = write-through: every object as soon as it is complete)",
        CR__CFG_DOUBLE),
    OPT(tier_ssd_high_watermark, "0.95", "disk tier usage fraction that triggers its eviction",
        CR__CFG_DOUBLE),
    OPT(tier_promote, "true",
        "copy a disk-only object back to DRAM on its second hit (when DRAM has room); false "
        "keeps every disk object on disk (benchmarks of the disk path)", CR__CFG_BOOL),
    OPT(allow_evict_soft_pinned_objects, "true",
        "evict soft-pinned objects (last) when unpinned ones do not free enough", CR__CFG_BOOL),
    OPT(rpc_conn_timeout_seconds, "0",
        "Mooncake name: idle connection timeout in seconds (0 = use --rpc_idle_timeout)",
        CR__CFG_INT),
    OPT(rpc_enable_tcp_no_delay, "true", "accepted; TCP_NODELAY is always on", CR__CFG_BOOL),
    OPT(enable_gc, "false", "accepted; eviction is always on", CR__CFG_BOOL),
    OPT(enable_metric_reporting, "true", "accepted; metrics are served on --metrics_port",
        CR__CFG_BOOL),
    OPT(enable_ha, "false",
        "high availability: masters elect a leader in etcd (--etcd_endpoints), standbys follow "
        "its op stream; needs --rpc_address set to an address the others reach",
        CR__CFG_BOOL),
    OPT(capabilities, "true",
        "with --cluster_key_file: per-object capabilities (docs/security.md); false lets every "
        "member read and write any node's memory (measuring their cost, rolling upgrades)",
        CR__CFG_BOOL),
    OPT(etcd_endpoints, "", "HA: etcd endpoints host:port[;host:port...]", CR__CFG_STR),
    OPT(cluster_id, "crescent",
        "cluster name: HA keys under /crescent/<cluster_id>/master/, the shared-FS tier in "
        "<root_fs_dir>/<cluster_id>/",
        CR__CFG_STR),
    OPT(root_fs_dir, "",
        "shared-file-system tier: a directory every node and client sees at this path; clients "
        "persist each put there and any client reads it after eviction or a whole-cluster "
        "restart (empty = off)",
        CR__CFG_STR),
    OPT(memory_allocator, "offset", "segment allocator: offset (cachelib is not available)",
        CR__CFG_STR),
    OPT(journal_dir, "",
        "keep the object index in DIR/journal: a master restarted after a crash recovers every "
        "object still on its nodes (empty = off)",
        CR__CFG_STR),
    OPT(ha_lease_ttl, "3",
        "HA: seconds of the leader's etcd lease (failover takes about this long)", CR__CFG_INT),
    OPT(ha_sync_timeout_ms, "1000",
        "HA: how long a change waits for a standby before that standby drops out of sync",
        CR__CFG_INT),
    OPT(journal_fsync, "false",
        "fdatasync each journal write (survives a machine crash, not only a process crash)",
        CR__CFG_BOOL),
    OPT(max_objects, "16777216", "bound on objects (complete + pending); PutStart past it "
        "gets KEYS_ULTRA_LIMIT (0 = none)", CR__CFG_INT),
    OPT(max_key_bytes, "2GiB", "bound on the bytes of all keys together (0 = none)",
        CR__CFG_SIZE),
    CR__AUTH_CFG_OPTS(master_opts_t),
};
#define N_OPTS (sizeof opts / sizeof opts[0])
#define SUMMARY "crescent store master: segments, objects, leases, eviction (metadata only)"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static cr__ha_journal_t *g_journal;
static cr__master_t *g_master;
static int g_ha;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_stop;

static void *ticker(void *arg)
{
    cr__master_t *m = arg;
    pthread_mutex_lock(&g_mu);
    while (!g_stop) {
        pthread_mutex_unlock(&g_mu);
        /* HA: only the serving leader's state is live (a stopping or
         * deposed one must not expire the clients it refuses) */
        if (!g_ha || master_ha_leading())
            cr__master_tick(m, cr__now_ms());
        if (g_journal) {
            cr__ha_journal_sync(g_journal);
            /* a standby's journal is its leader's stream, not its (empty) master */
            if (!g_ha || master_ha_leading())
                cr__ha_journal_compact(g_journal, m, 0);
        }
        pthread_mutex_lock(&g_mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += TICK_INTERVAL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (!g_stop)
            pthread_cond_timedwait(&g_cv, &g_mu, &ts);
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

static void handle(void *user, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply)
{
    if (g_ha) {
        master_ha_handle(user, req, reply);
        return;
    }
    cr__master_handle(user, req, reply, cr__now_ms());
    /* a change is acknowledged only once its records are written */
    if (g_journal && cr__ha_journal_sync(g_journal)) {
        uint16_t type = reply->type;
        uint64_t id = reply->req_id;
        cr__rpc_msg_free(reply); /* zeroes it */
        reply->type = type;
        reply->req_id = id;
        reply->status = CR_E_INTERNAL_ERROR;
    }
}

/* The master's endpoints plus HA's /role, /leader, /ha_status and metrics. */
static void admin_handler(void *user, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    if (g_ha && master_ha_admin(req, resp))
        return;
    cr__master_admin_handler(user, req, resp);
    char *extra = g_ha && !strcmp(req->path, "/metrics") && resp->status == 200
                      ? master_ha_metrics()
                      : NULL;
    if (extra) {
        size_t a = resp->body_len, b = strlen(extra);
        char *nb = malloc(a + b + 1);
        if (nb) {
            memcpy(nb, resp->body, a);
            memcpy(nb + a, extra, b + 1);
            free(resp->body);
            resp->body = nb;
            resp->body_len = a + b;
        }
        free(extra);
    }
}

static int port_ok(int64_t p, int allow_off) { return (p >= 0 || (allow_off && p == -1)) && p <= 65535; }

int main(int argc, char **argv)
{
    master_opts_t o;
    char err[256] = "";
    int rc = cr__cfg_parse(opts, N_OPTS, &o, argc, argv, 1, "CRESCENT_MASTER_", NULL, 0, NULL,
                           err, sizeof err);
    if (rc == 1) {
        cr__cfg_usage(stdout, "crescent-master", SUMMARY, opts, N_OPTS);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "crescent-master: %s\n", err);
        return 2;
    }
    cr__net_raise_nofile("crescent-master");
    if (o.enable_ha && (!o.etcd_endpoints[0] || !o.rpc_address[0] ||
                        !strcmp(o.rpc_address, "0.0.0.0") || !strcmp(o.rpc_address, "::") ||
                        o.ha_lease_ttl < 1 || o.ha_lease_ttl > 60 || o.ha_sync_timeout_ms < 1)) {
        fprintf(stderr, "crescent-master: --enable_ha needs --etcd_endpoints, an --rpc_address "
                        "other masters and clients can reach (not 0.0.0.0), --ha_lease_ttl "
                        "1..60 and a positive --ha_sync_timeout_ms\n");
        return 2;
    }
    g_ha = o.enable_ha;
    if (strcmp(o.memory_allocator, "offset") != 0)
        fprintf(stderr, "crescent-master: --memory_allocator=%s not available, using offset\n",
                o.memory_allocator);
    if (o.port >= 0)
        o.rpc_port = o.port;
    if (o.max_threads > 0)
        o.rpc_thread_num = o.max_threads > 16 ? 16 : o.max_threads;
    if (o.rpc_conn_timeout_seconds > 0)
        o.rpc_idle_timeout = (double)o.rpc_conn_timeout_seconds;
    if (!port_ok(o.rpc_port, 0) || !port_ok(o.metrics_port, 1) ||
        !port_ok(o.http_metadata_server_port, 0) || o.default_kv_lease_ttl <= 0 ||
        o.default_kv_soft_pin_ttl < 0 || o.eviction_high_watermark_ratio <= 0 ||
        o.eviction_high_watermark_ratio > 1 || o.eviction_ratio < 0 || o.eviction_ratio > 1 ||
        o.client_ttl <= 0 || o.put_start_timeout <= 0 || o.rpc_idle_timeout <= 0 ||
        o.max_connections <= 0 || o.rpc_thread_num <= 0 || o.rpc_thread_num > 16 ||
        o.rpc_spin_us < 0 || o.rpc_spin_us > 10000) {
        fprintf(stderr, "crescent-master: invalid option value (see --help): ports 0..65535, "
                        "positive ttls/timeouts, ratios in (0,1], 1..16 rpc threads, "
                        "rpc_spin_us 0..10000\n");
        return 2;
    }

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1); /* HA: deposed, restart as a standby */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    cr__master_cfg_t mc;
    cr__master_cfg_default(&mc);
    mc.lease_ttl_ms = (uint64_t)o.default_kv_lease_ttl;
    mc.soft_pin_ttl_ms = (uint64_t)o.default_kv_soft_pin_ttl;
    mc.client_ttl_ms = (uint64_t)(o.client_ttl * 1000.0);
    mc.put_timeout_ms = (uint64_t)(o.put_start_timeout * 1000.0);
    mc.high_watermark = o.eviction_high_watermark_ratio;
    mc.eviction_ratio = o.eviction_ratio;
    mc.evict_soft_pinned = o.allow_evict_soft_pinned_objects;
    if (o.tier_offload_watermark < 0 || o.tier_offload_watermark > 1 ||
        o.tier_ssd_high_watermark <= 0.05 || o.tier_ssd_high_watermark > 1) {
        fprintf(stderr, "crescent-master: --tier_offload_watermark must be 0..1, "
                        "--tier_ssd_high_watermark 0.05..1\n");
        return 2;
    }
    mc.offload_watermark = o.tier_offload_watermark;
    mc.ssd_high_watermark = o.tier_ssd_high_watermark;
    mc.tier_no_promote = !o.tier_promote;
    mc.max_objects = o.max_objects > 0 ? (uint64_t)o.max_objects : 0;
    mc.max_key_bytes = o.max_key_bytes;
    cr__auth_cfg_t ac = CR__AUTH_CFG_OF(o);
    cr__auth_t *auth = NULL;
    if ((rc = cr__auth_load(&ac, &auth))) {
        fprintf(stderr, "crescent-master: security configuration unusable: %s\n",
                cr_strerror(rc));
        return 2;
    }
    cr__master_t *m = NULL;
    cr__rpc_server_t *rpc = NULL;
    cr__httpd_t *admin = NULL;
    cr__meta_server_t *meta = NULL;
    cr__tls_t *tls = NULL;
    pthread_t tick;
    int tick_started = 0, exit_code = 1, restart = 0;

    if ((rc = CR__TLS_LOAD_OF(o, &tls))) {
        fprintf(stderr, "crescent-master: TLS configuration unusable: %s\n", cr_strerror(rc));
        cr__auth_free(auth);
        return 2;
    }
    if ((rc = cr__master_create(&mc, &m))) {
        fprintf(stderr, "crescent-master: cannot create master state: %s\n", cr_strerror(rc));
        return 1;
    }
    g_master = m;
    /* with a cluster key, members get per-object capabilities (caps.c) */
    if (auth && o.capabilities && (rc = cr__master_caps_enable(m))) {
        fprintf(stderr, "crescent-master: cannot turn capabilities on: %s\n", cr_strerror(rc));
        return 1;
    }
    if (auth && !o.capabilities)
        fprintf(stderr, "crescent-master: WARNING: --capabilities=false: any member may read "
                        "and write any node's memory\n");
    /* the shared-FS tier before the journal: restored objects keep their files */
    if (o.root_fs_dir[0] &&
        (rc = cr__master_fs_open(m, o.root_fs_dir, o.cluster_id, err, sizeof err))) {
        fprintf(stderr, "crescent-master: %s\n", err);
        return 2;
    }
    cr__ha_shadow_t *ha_loaded = NULL;
    if (o.journal_dir[0] && g_ha) {
        /* HA: the journal is the standby state until this master leads */
        rc = cr__ha_journal_open(o.journal_dir, o.journal_fsync, &ha_loaded, &g_journal);
        if (rc) {
            fprintf(stderr, "crescent-master: cannot use --journal_dir %s: %s\n", o.journal_dir,
                    cr_strerror(rc));
            goto out;
        }
    } else if (o.journal_dir[0]) {
        cr__ha_shadow_t *loaded = NULL;
        uint64_t n = 0, t0 = cr__now_ms();
        rc = cr__ha_journal_open(o.journal_dir, o.journal_fsync, &loaded, &g_journal);
        if (!rc)
            rc = cr__master_restore(m, loaded, cr__now_ms(), &n);
        cr__ha_shadow_destroy(loaded);
        if (!rc) {
            cr__master_set_journal(m, cr__ha_journal_record, g_journal);
            rc = cr__ha_journal_compact(g_journal, m, 1);
        }
        if (rc) {
            fprintf(stderr, "crescent-master: cannot use --journal_dir %s: %s\n", o.journal_dir,
                    cr_strerror(rc));
            goto out;
        }
        CR_LOG_INFO("master", "journal %s: %llu objects restored in %llu ms", o.journal_dir,
                    (unsigned long long)n, (unsigned long long)(cr__now_ms() - t0));
    }
    if (o.root_fs_dir[0] && !g_ha) {
        /* a whole-cluster restart: the files are the objects (an HA
         * master learns them from its journal and its leader instead) */
        uint64_t bad = 0, t0 = cr__now_ms();
        long n = cr__master_fs_scan(m, cr__now_ms(), &bad);
        if (n < 0) {
            fprintf(stderr, "crescent-master: --root_fs_dir %s: scan failed: %s\n",
                    o.root_fs_dir, cr_strerror((int)n));
            goto out;
        }
        CR_LOG_INFO("master", "shared-FS tier %s/%s: %ld objects adopted, %llu bad files, %llu ms",
                    o.root_fs_dir, o.cluster_id, n, (unsigned long long)bad,
                    (unsigned long long)(cr__now_ms() - t0));
    }
    if (o.enable_http_metadata_server) {
        rc = cr__meta_server_start_tls(o.http_metadata_server_host,
                                       (uint16_t)o.http_metadata_server_port, "/metadata",
                                       (size_t)1 << 30, (size_t)1 << 28, auth, tls, &meta);
        if (rc) {
            fprintf(stderr, "crescent-master: cannot start HTTP metadata server on %s:%lld: %s\n",
                    o.http_metadata_server_host, (long long)o.http_metadata_server_port,
                    cr_strerror(rc));
            goto out;
        }
    }
    if (o.metrics_port >= 0) {
        cr__httpd_params_t hp = {.host = o.metrics_address,
                                 .port = (uint16_t)o.metrics_port,
                                 .max_body = ADMIN_MAX_BODY,
                                 .fn = admin_handler,
                                 .user = m,
                                 .auth = auth,
                                 .tls = tls,
                                 .name = "master admin HTTP"};
        rc = cr__httpd_start_ex(&hp, &admin);
        if (rc) {
            fprintf(stderr, "crescent-master: cannot start metrics server on %s:%lld: %s\n",
                    o.metrics_address, (long long)o.metrics_port, cr_strerror(rc));
            goto out;
        }
    }
    cr__rpc_server_params_t sp = {
        .host = o.rpc_address,
        .port = (uint16_t)o.rpc_port,
        .n_threads = (int)o.rpc_thread_num,
        .spin_us = (int)o.rpc_spin_us,
        .max_conns = (int)o.max_connections,
        .idle_timeout_ms = (int)(o.rpc_idle_timeout * 1000.0),
        .frame_timeout_ms = RPC_FRAME_TIMEOUT_MS,
        .auth = auth,
        .tls = tls,
        .fn = handle,
        .user = m,
    };
    if ((rc = cr__rpc_server_start(&sp, &rpc))) {
        fprintf(stderr, "crescent-master: cannot listen for RPC on %s:%lld: %s\n", o.rpc_address,
                (long long)o.rpc_port, cr_strerror(rc));
        goto out;
    }
    if ((rc = -pthread_create(&tick, NULL, ticker, m))) {
        fprintf(stderr, "crescent-master: cannot start ticker: %s\n", cr_strerror(rc));
        goto out;
    }
    tick_started = 1;
    if (g_ha) {
        char rpc_adv[300], admin_adv[300] = "";
        snprintf(rpc_adv, sizeof rpc_adv, "%s:%u", o.rpc_address, cr__rpc_server_port(rpc));
        if (admin)
            snprintf(admin_adv, sizeof admin_adv, "%s:%u",
                     strcmp(o.metrics_address, "0.0.0.0") ? o.metrics_address : o.rpc_address,
                     cr__httpd_port(admin));
        master_ha_cfg_t hc = {
            .endpoints = o.etcd_endpoints,
            .cluster_id = o.cluster_id,
            .rpc_addr = rpc_adv,
            .admin_addr = admin_adv,
            .lease_ttl_s = (unsigned)o.ha_lease_ttl,
            .sync_timeout_ms = (int)o.ha_sync_timeout_ms,
            .journal = g_journal,
            .id_dir = o.journal_dir,
            .loaded = ha_loaded,
            .auth = auth,
            .tls = tls,
        };
        ha_loaded = NULL;
        if ((rc = master_ha_start(&hc, m))) {
            fprintf(stderr, "crescent-master: cannot start HA (--etcd_endpoints %s, --cluster_id "
                            "%s): %s\n", o.etcd_endpoints, o.cluster_id, cr_strerror(rc));
            goto out;
        }
    }
    if (!tls)
        cr__auth_warn_open(auth, "master RPC", o.rpc_address);
    fprintf(stderr, "crescent-master: %s\n", cr__auth_mode_line(auth != NULL, tls != NULL));

    char line[128];
    snprintf(line, sizeof line, "listening rpc=%u metrics=%u http_metadata=%u\n",
             cr__rpc_server_port(rpc), admin ? cr__httpd_port(admin) : 0,
             meta ? cr__meta_server_port(meta) : 0);
    if (o.port_file[0] &&
        (rc = cr__file_write_atomic(o.port_file, line, strlen(line), 0, 0644))) {
        fprintf(stderr, "crescent-master: cannot write --port_file %s: %s\n", o.port_file,
                cr_strerror(rc));
        goto out;
    }
    fputs(line, stdout);
    fflush(stdout);
    CR_LOG_INFO("master", "id %llu, lease %lld ms, client ttl %.1f s, put timeout %.1f s",
                (unsigned long long)cr__master_id(m), (long long)o.default_kv_lease_ttl,
                o.client_ttl, o.put_start_timeout);

    int sig = 0;
    while (sigwait(&set, &sig) != 0 || (sig == SIGUSR1 && !master_ha_deposed()))
        ;
    restart = sig == SIGUSR1;
    if (!restart)
        fprintf(stderr, "crescent-master: signal %d, stopping\n", sig);
    exit_code = 0;
out:
    /* handlers use the HA state: no request is served, then no handler
     * runs (servers joined), and only then is that state freed */
    if (g_ha)
        master_ha_quiesce();
    cr__rpc_server_stop(rpc);
    cr__httpd_stop(admin);
    if (g_ha)
        master_ha_stop();
    cr__ha_shadow_destroy(ha_loaded);
    if (tick_started) {
        pthread_mutex_lock(&g_mu);
        g_stop = 1;
        pthread_cond_signal(&g_cv);
        pthread_mutex_unlock(&g_mu);
        pthread_join(tick, NULL);
    }
    cr__meta_server_stop(meta);
    if (m)
        cr__master_set_journal(m, NULL, NULL);
    cr__ha_journal_close(g_journal);
    cr__master_destroy(m);
    cr__auth_free(auth);
    cr__tls_free(tls);
    if (restart) {
        /* deposed: a fresh process on its journal; it leads again only if the
         * in-sync set still lists it, else it follows the new leader (ha.c) */
        fprintf(stderr, "crescent-master: deposed; restarting as a standby\n");
        setenv("CRESCENT_MASTER_HA_DEPOSED", "1", 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "crescent-master: cannot restart: %s\n", strerror(errno));
        return 1;
    }
    return exit_code;
}
