/* crescent-demo: the README's main demo. Starts a real local store cluster
 * on loopback and stops it again; nothing to start by hand.
 *
 *   1. crescent-master (child process) with its embedded HTTP metadata
 *      server, everything on 127.0.0.1 and ephemeral ports;
 *   2. --nodes crescent-node storage daemons (child processes), each
 *      contributing --segment_size bytes, publishing their segments through
 *      the master's metadata server;
 *   3. a client in this process: puts --count values of --value_size bytes
 *      (2 replicas on distinct nodes), gets every one back and verifies
 *      every byte, does the same with one batch call, shows a miss and a
 *      lease-protected remove; prints throughput;
 *   4. SIGTERM to the nodes (they unmount and exit 0) and the master.
 *
 * The binaries are looked up next to this one (build tree:
 * ../crescent-master/, ../crescent-node/; installed: same directory) or in
 * --bin_dir. `crescent-demo te ...` runs the Transfer Engine demo instead.
 * Exit status 0 only if every step succeeded and every byte matched. */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../crescent-bench/bench.h"
#include "common/auth/auth.h"
#include "common/clock.h"
#include "common/config.h"
#include "crescent/store.h"

int cr_demo_te_main(int argc, char **argv);

typedef struct sd_cfg {
    int64_t nodes;
    uint64_t segment_size;
    uint64_t value_size;
    int64_t count;
    int64_t replica_num;
    char bin_dir[CR__CFG_STR_MAX];
    char protocol[CR__CFG_STR_MAX];
    int security;
} sd_cfg_t;

#define OPT(n, d, h, t) {#n, d, h, t, offsetof(sd_cfg_t, n)}
static const cr__cfg_opt_t sd_opts[] = {
    OPT(nodes, "2", "storage nodes (crescent-node processes) to start", CR__CFG_INT),
    OPT(segment_size, "512MiB", "memory each node contributes", CR__CFG_SIZE),
    OPT(value_size, "4MiB", "bytes per value", CR__CFG_SIZE),
    OPT(count, "64", "values to put and get", CR__CFG_INT),
    OPT(replica_num, "2", "replicas per value (each on a distinct node)", CR__CFG_INT),
    OPT(protocol, "tcp", "transfer protocol: tcp or tcp,shm", CR__CFG_STR),
    OPT(bin_dir, "", "directory holding crescent-master and crescent-node", CR__CFG_STR),
    OPT(security, "true",
        "security on: generate a cluster key for this demo cluster (docs/security.md); every "
        "process gets it through CRESCENT_CLUSTER_KEY_FILE",
        CR__CFG_BOOL),
};
#define SD_N (sizeof sd_opts / sizeof sd_opts[0])
#define MAX_NODES 8

static char g_tmp[64];

static int find_bin(const char *bin_dir, const char *name, char *out, size_t cap)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = 0;
    char *dir = dirname(self);
    char cand[3][PATH_MAX + 64];
    int k = 0;
    if (bin_dir && bin_dir[0])
        snprintf(cand[k++], sizeof cand[0], "%.*s/%s", PATH_MAX - 1, bin_dir, name);
    snprintf(cand[k++], sizeof cand[0], "%.*s/../%s/%s", PATH_MAX - 80, dir, name, name);
    snprintf(cand[k++], sizeof cand[0], "%.*s/%s", PATH_MAX - 40, dir, name);
    for (int i = 0; i < k; i++) {
        size_t l = strlen(cand[i]);
        if (l < cap && access(cand[i], X_OK) == 0) {
            memcpy(out, cand[i], l + 1);
            return 0;
        }
    }
    fprintf(stderr, "crescent-demo: cannot find %s (tried %s", name, cand[0]);
    for (int i = 1; i < k; i++)
        fprintf(stderr, ", %s", cand[i]);
    fprintf(stderr, "); build it or pass --bin_dir\n");
    return -1;
}

static pid_t spawn(char *const argv[], const char *log)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    FILE *f = fopen(log, "w");
    if (f) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
    }
    execv(argv[0], argv);
    _exit(127);
}

static int wait_line(const char *path, char *buf, size_t cap, pid_t pid, int timeout_ms)
{
    for (int t = 0; t < timeout_ms; t += 20) {
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, cap - 1, f);
            fclose(f);
            buf[n] = 0;
            if (n && strchr(buf, '\n')) {
                buf[strcspn(buf, "\n")] = 0;
                return 0;
            }
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return -1;
        usleep(20000);
    }
    return -1;
}

static int stop_proc(pid_t pid)
{
    int st = 0;
    if (pid <= 0)
        return 0;
    kill(pid, SIGTERM);
    for (int t = 0; t < 10000; t += 10) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return 137;
}

static void dump_log(const char *name)
{
    char p[128], line[512];
    snprintf(p, sizeof p, "%s/%s", g_tmp, name);
    FILE *f = fopen(p, "r");
    if (!f)
        return;
    fprintf(stderr, "---- %s ----\n", p);
    while (fgets(line, sizeof line, f))
        fputs(line, stderr);
    fclose(f);
}

static double gbps(uint64_t bytes, uint64_t ns) { return ns ? (double)bytes / (double)ns : 0; }

static int run_client(const sd_cfg_t *c, const char *master, const char *meta)
{
    cr_store_params_t p = {0};
    p.field_mask = CR_STORE_PARAM_MASTER_ADDR | CR_STORE_PARAM_METADATA_URI |
                   CR_STORE_PARAM_LOCAL_HOSTNAME | CR_STORE_PARAM_PROTOCOL;
    p.master_addr = master;
    p.metadata_uri = meta;
    p.local_hostname = "127.0.0.1";
    p.protocol = c->protocol;
    cr_store_t *st;
    int rc = cr_store_create(&p, &st);
    if (rc) {
        fprintf(stderr, "crescent-demo: client: %s\n", cr_strerror(rc));
        return 1;
    }
    size_t vs = c->value_size, n = (size_t)c->count, total = vs * n;
    uint8_t *buf = cr_bench_alloc_prefaulted(total);
    uint8_t *out = cr_bench_alloc_prefaulted(total);
    int ok = 1;
    if (!buf || !out || cr_store_register_buffer(st, buf, total) ||
        cr_store_register_buffer(st, out, total)) {
        fprintf(stderr, "crescent-demo: cannot allocate/register %zu MiB\n", total >> 20);
        ok = 0;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        cr_bench_pattern_fill(buf + i * vs, 0, vs, 1000 + i);
    cr_store_replicate_config_t cfg = {.replica_num = (uint32_t)c->replica_num};

    /* single-key puts and gets */
    uint64_t t0 = cr__now_ns();
    for (size_t i = 0; i < n && ok; i++) {
        char key[64];
        snprintf(key, sizeof key, "demo/%zu", i);
        rc = cr_store_put_from(st, key, buf + i * vs, vs, &cfg);
        if (rc) {
            fprintf(stderr, "crescent-demo: put %s: %s\n", key, cr_strerror(rc));
            ok = 0;
        }
    }
    uint64_t t1 = cr__now_ns();
    memset(out, 0, total);
    uint64_t t2 = cr__now_ns();
    for (size_t i = 0; i < n && ok; i++) {
        char key[64];
        size_t got = 0;
        snprintf(key, sizeof key, "demo/%zu", i);
        rc = cr_store_get_into(st, key, out + i * vs, vs, &got);
        if (rc || got != vs) {
            fprintf(stderr, "crescent-demo: get %s: %s\n", key, cr_strerror(rc));
            ok = 0;
        }
    }
    uint64_t t3 = cr__now_ns();
    size_t bad = 0;
    for (size_t i = 0; i < n && ok; i++)
        bad += cr_bench_pattern_check(out + i * vs, 0, vs, 1000 + i) != (size_t)-1;
    if (ok)
        printf("crescent-demo: put %zu x %zu KiB (%d replicas): %.2f GB/s; get: %.2f GB/s; "
               "verified %zu values: %s\n",
               n, vs >> 10, (int)c->replica_num, gbps(total * (size_t)c->replica_num, t1 - t0),
               gbps(total, t3 - t2), n, bad ? "MISMATCH" : "all bytes match");
    if (bad)
        ok = 0;

    /* one batch call for all keys */
    if (ok) {
        const char **keys = calloc(n, sizeof *keys);
        char (*names)[64] = calloc(n, 64);
        void **outs = calloc(n, sizeof *outs);
        size_t *caps = calloc(n, sizeof *caps), *lens = calloc(n, sizeof *lens);
        int *res = calloc(n, sizeof *res);
        if (!keys || !names || !outs || !caps || !lens || !res) {
            ok = 0;
        } else {
            for (size_t i = 0; i < n; i++) {
                snprintf(names[i], 64, "demo/%zu", i);
                keys[i] = names[i];
                outs[i] = out + i * vs;
                caps[i] = vs;
            }
            memset(out, 0, total);
            uint64_t b0 = cr__now_ns();
            rc = cr_store_batch_get_into(st, keys, outs, caps, n, lens, res);
            uint64_t b1 = cr__now_ns();
            bad = 0;
            for (size_t i = 0; i < n; i++)
                bad += res[i] || cr_bench_pattern_check(outs[i], 0, vs, 1000 + i) != (size_t)-1;
            int ex[1];
            const char *missing[1] = {"demo/not-there"};
            cr_store_batch_is_exist(st, missing, 1, ex);
            printf("crescent-demo: batch_get_into of %zu keys in one call: %.2f GB/s, %s; "
                   "is_exist(demo/not-there) = %d\n",
                   n, gbps(total, b1 - b0), bad ? "MISMATCH" : "all bytes match", ex[0]);
            if (rc || bad)
                ok = 0;
        }
        free(keys);
        free(names);
        free(outs);
        free(caps);
        free(lens);
        free(res);
    }
    if (ok) {
        size_t got;
        rc = cr_store_remove(st, "demo/0", 0);
        printf("crescent-demo: remove(demo/0) right after reading it: %s (readers hold a lease)\n",
               cr_strerror(rc));
        rc = cr_store_remove(st, "demo/0", 1);
        int miss = cr_store_get_into(st, "demo/0", out, vs, &got);
        printf("crescent-demo: forced remove: %s; get(demo/0) now: %s\n", cr_strerror(rc),
               cr_strerror(miss));
        if (rc || miss != CR_E_OBJECT_NOT_FOUND)
            ok = 0;
        uint64_t removed = 0;
        usleep(100000);
        cr_store_remove_all(st, &removed);
    }
out:
    if (buf) {
        cr_store_unregister_buffer(st, buf);
        cr_bench_free(buf, total);
    }
    if (out) {
        cr_store_unregister_buffer(st, out);
        cr_bench_free(out, total);
    }
    cr_store_destroy(st);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "te"))
        return cr_demo_te_main(argc - 1, argv + 1);
    int first = (argc >= 2 && !strcmp(argv[1], "store")) ? 2 : 1;
    sd_cfg_t c;
    char err[256] = "";
    int rc = cr__cfg_parse(sd_opts, SD_N, &c, argc, argv, first, "CRESCENT_DEMO_", NULL, 0, NULL,
                           err, sizeof err);
    if (rc == 1) {
        cr__cfg_usage(stdout, "crescent-demo [store]",
                      "store cluster demo on loopback (`crescent-demo te --help`: the Transfer "
                      "Engine demo)",
                      sd_opts, SD_N);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "crescent-demo: %s\n", err);
        return 2;
    }
    if (c.nodes < 1 || c.nodes > MAX_NODES || c.count < 1 || c.count > 4096 ||
        c.value_size == 0 || c.value_size * (uint64_t)c.count > (4ull << 30) ||
        c.replica_num < 1 || c.replica_num > c.nodes) {
        fprintf(stderr, "crescent-demo: need 1 <= nodes <= %d, 1 <= replica_num <= nodes, "
                        "1 <= count <= 4096, value_size * count <= 4 GiB\n", MAX_NODES);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    char master_bin[PATH_MAX + 128], node_bin[PATH_MAX + 128];
    if (find_bin(c.bin_dir, "crescent-master", master_bin, sizeof master_bin) ||
        find_bin(c.bin_dir, "crescent-node", node_bin, sizeof node_bin))
        return 1;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/crescent-demo-XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("crescent-demo: mkdtemp");
        return 1;
    }
    char pf[128], log[128], line[512];
    if (c.security) {
        /* one fresh key for this cluster; children and our own client read
         * it from the environment like any library user */
        char kf[128];
        snprintf(kf, sizeof kf, "%s/cluster.key", g_tmp);
        if (cr__auth_keygen(kf) || setenv(CR__AUTH_ENV_KEY_FILE, kf, 1)) {
            fprintf(stderr, "crescent-demo: cannot create a cluster key in %s\n", g_tmp);
            return 1;
        }
        printf("crescent-demo: security on: cluster key %s (every RPC, HTTP and TE peer "
               "authenticates)\n",
               kf);
    } else {
        unsetenv(CR__AUTH_ENV_KEY_FILE);
        printf("crescent-demo: security off (--security=false)\n");
    }
    snprintf(pf, sizeof pf, "%s/master.port", g_tmp);
    snprintf(log, sizeof log, "%s/master.log", g_tmp);
    char *margv[] = {master_bin, "--rpc_address", "127.0.0.1", "--rpc_port", "0",
                     "--metrics_address", "127.0.0.1", "--metrics_port", "0",
                     "--enable_http_metadata_server", "--http_metadata_server_host", "127.0.0.1",
                     "--http_metadata_server_port", "0", "--port_file", pf, NULL};
    pid_t master = spawn(margv, log);
    pid_t nodes[MAX_NODES] = {0};
    int ok = 1;
    unsigned rpc = 0, met = 0, meta = 0;
    if (master < 0 || wait_line(pf, line, sizeof line, master, 10000) ||
        sscanf(line, "listening rpc=%u metrics=%u http_metadata=%u", &rpc, &met, &meta) != 3 ||
        !meta) {
        fprintf(stderr, "crescent-demo: master did not start\n");
        dump_log("master.log");
        ok = 0;
        goto stop;
    }
    char maddr[64], muri[128];
    snprintf(maddr, sizeof maddr, "127.0.0.1:%u", rpc);
    snprintf(muri, sizeof muri, "http://127.0.0.1:%u/metadata", meta);
    printf("crescent-demo: master at %s, embedded metadata server %s, metrics "
           "http://127.0.0.1:%u/metrics\n",
           maddr, muri, met);
    char segsz[32];
    snprintf(segsz, sizeof segsz, "%" PRIu64, c.segment_size);
    for (int i = 0; i < c.nodes && ok; i++) {
        char rf[128], nlog[128], nname[32];
        snprintf(rf, sizeof rf, "%s/node%d.ready", g_tmp, i);
        snprintf(nname, sizeof nname, "node%d.log", i);
        snprintf(nlog, sizeof nlog, "%s/%s", g_tmp, nname);
        char *nargv[] = {node_bin, "--master_server_address", maddr, "--metadata_server", muri,
                         "--global_segment_size", segsz, "--local_hostname", "127.0.0.1",
                         "--protocol", c.protocol, "--ready_file", rf, NULL};
        nodes[i] = spawn(nargv, nlog);
        if (nodes[i] < 0 || wait_line(rf, line, sizeof line, nodes[i], 60000)) {
            fprintf(stderr, "crescent-demo: node %d did not start\n", i);
            dump_log(nname);
            ok = 0;
            break;
        }
        printf("crescent-demo: storage node %d (pid %d) contributes %" PRIu64
               " MiB as segment %s\n",
               i, (int)nodes[i], c.segment_size >> 20, line);
    }
    fflush(stdout);
    if (ok && run_client(&c, maddr, muri))
        ok = 0;
stop:
    for (int i = 0; i < c.nodes; i++) {
        if (nodes[i] > 0) {
            int st = stop_proc(nodes[i]);
            printf("crescent-demo: node %d stopped (exit %d)\n", i, st);
            if (st)
                ok = 0;
        }
    }
    if (master > 0)
        stop_proc(master);
    if (ok) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "crescent-demo: could not remove %s\n", g_tmp);
    } else {
        fprintf(stderr, "crescent-demo: logs kept in %s\n", g_tmp);
    }
    printf("crescent-demo: %s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
