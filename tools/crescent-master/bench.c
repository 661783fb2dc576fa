/* crescent-master-bench: control-plane load generator for a running
 * crescent-master (no data plane: it mounts a fake segment and only
 * exercises metadata RPCs).
 *
 *   crescent-master-bench --master 127.0.0.1:50051 [--op put|get|exist|batch_exist|ping]
 *                         [--threads 4] [--seconds 3] [--batch 128]
 *
 * put: PutStart + PutEnd of a new 4 KiB key (2 RPCs per op);
 * get: GetReplicaList of keys put beforehand; exist / ping: one RPC;
 * batch_exist: one BatchExist of --batch keys per op (keys/s reported).
 * Prints one machine-readable line:
 *   RESULT master_bench op=.. threads=.. ops=.. ops_per_s=.. keys_per_s=.. p50_us=.. p99_us=..
 * Keys and the fake segment are removed/unmounted at the end.
 * Security: --cluster_key_file / --tls_* (or their environment variables)
 * like every tool; each connection then authenticates / runs TLS. */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/auth/auth_opts.h"
#include "common/clock.h"
#include "common/config.h"
#include "crescent/common.h"
#include "store/rpc/client.h"

typedef struct bench_opts {
    char master[CR__CFG_STR_MAX];
    char op[CR__CFG_STR_MAX];
    int64_t threads;
    double seconds;
    int64_t batch;
    CR__AUTH_CFG_FIELDS;
} bench_opts_t;

#define OPT(n, d, h, t) {#n, d, h, t, offsetof(bench_opts_t, n)}
static const cr__cfg_opt_t opts[] = {
    OPT(master, "127.0.0.1:50051", "master RPC address host:port", CR__CFG_STR),
    OPT(op, "exist", "put | get | exist | batch_exist | ping", CR__CFG_STR),
    OPT(threads, "4", "client threads (one connection each)", CR__CFG_INT),
    OPT(seconds, "3", "duration of the measured phase", CR__CFG_DOUBLE),
    OPT(batch, "128", "keys per batch_exist call", CR__CFG_INT),
    CR__AUTH_CFG_OPTS(bench_opts_t),
};
#define N_OPTS (sizeof opts / sizeof opts[0])

#define PRELOAD 4096
#define LAT_MAX (1u << 20)

static bench_opts_t g_o;
static cr__auth_t *g_auth; /* NULL = security off */
static cr__tls_t *g_tls;   /* NULL = plain TCP */

/* A client with this run's credentials. Returns 0 or -EINVAL. */
static int client_new(cr__rpc_client_t **c)
{
    if (cr__rpc_client_create(g_o.master, 2000, 10000, c))
        return -EINVAL;
    cr__rpc_client_set_auth(*c, g_auth);
    cr__rpc_client_set_tls(*c, g_tls);
    return 0;
}
static uint64_t g_deadline_ms;
static const cr__rpc_client_id_t g_id = {0xbe4c4, 0x1};

typedef struct worker {
    pthread_t t;
    int idx;
    uint64_t ops, errors;
    uint32_t *lat_us;
    size_t n_lat;
} worker_t;

static int call(cr__rpc_client_t *c, cr__rpc_msg_t *req, cr__rpc_msg_t *rep)
{
    int rc = cr__rpc_client_call(c, req, rep);
    if (rc)
        return rc;
    if (rep->status) {
        rc = rep->status;
        cr__rpc_msg_free(rep);
    }
    return rc;
}

static int put_one(cr__rpc_client_t *c, const char *key)
{
    cr__rpc_item_t it = {.key = key, .key_len = (uint32_t)strlen(key), .size = 4096,
                         .cfg = {.replica_num = 1}};
    cr__rpc_msg_t req = {.type = CR__RPC_PUT_START, .n_items = 1, .items = &it}, rep;
    int rc = call(c, &req, &rep);
    if (rc)
        return rc;
    it.version = rep.items[0].version;
    cr__rpc_msg_free(&rep);
    req.type = CR__RPC_PUT_END;
    rc = call(c, &req, &rep);
    if (!rc)
        cr__rpc_msg_free(&rep);
    return rc;
}

static void *run(void *arg)
{
    worker_t *w = arg;
    cr__rpc_client_t *c;
    if (client_new(&c))
        return NULL;
    w->lat_us = malloc(LAT_MAX * sizeof *w->lat_us);
    char key[64];
    cr__rpc_item_t *items = calloc((size_t)g_o.batch, sizeof *items);
    char (*bkeys)[32] = calloc((size_t)g_o.batch, 32);
    for (int64_t i = 0; i < g_o.batch; i++) {
        snprintf(bkeys[i], 32, "mb-pre-%lld", (long long)((i * 2) % PRELOAD)); /* half exist */
        if (i & 1)
            snprintf(bkeys[i], 32, "mb-absent-%lld", (long long)i);
        items[i].key = bkeys[i];
        items[i].key_len = (uint32_t)strlen(bkeys[i]);
    }
    uint64_t n = 0;
    while (cr__now_ms() < g_deadline_ms) {
        uint64_t t0 = cr__now_ns();
        int rc = 0;
        cr__rpc_msg_t rep;
        if (!strcmp(g_o.op, "put")) {
            snprintf(key, sizeof key, "mb-put-%d-%llu", w->idx, (unsigned long long)n);
            rc = put_one(c, key);
        } else if (!strcmp(g_o.op, "ping")) {
            cr__rpc_msg_t req = {.type = CR__RPC_PING, .client_id = g_id};
            if (!(rc = call(c, &req, &rep)))
                cr__rpc_msg_free(&rep);
        } else if (!strcmp(g_o.op, "batch_exist")) {
            cr__rpc_msg_t req = {.type = CR__RPC_BATCH_EXIST, .n_items = (uint32_t)g_o.batch,
                                 .items = items};
            if (!(rc = call(c, &req, &rep)))
                cr__rpc_msg_free(&rep);
        } else {
            snprintf(key, sizeof key, "mb-pre-%llu", (unsigned long long)((n * 7 + (uint64_t)w->idx) % PRELOAD));
            cr__rpc_item_t it = {.key = key, .key_len = (uint32_t)strlen(key)};
            cr__rpc_msg_t req = {.type = !strcmp(g_o.op, "get") ? CR__RPC_GET_REPLICA_LIST
                                                                 : CR__RPC_EXIST,
                                 .n_items = 1, .items = &it};
            if (!(rc = call(c, &req, &rep)))
                cr__rpc_msg_free(&rep);
        }
        uint64_t us = (cr__now_ns() - t0) / 1000;
        if (rc)
            w->errors++;
        else
            w->ops++;
        if (w->n_lat < LAT_MAX)
            w->lat_us[w->n_lat++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
        n++;
    }
    free(items);
    free(bkeys);
    cr__rpc_client_destroy(c);
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    char err[256] = "";
    int rc = cr__cfg_parse(opts, N_OPTS, &g_o, argc, argv, 1, "CRESCENT_MASTER_BENCH_", NULL, 0,
                           NULL, err, sizeof err);
    if (rc == 1) {
        cr__cfg_usage(stdout, "crescent-master-bench", "control-plane load on crescent-master",
                      opts, N_OPTS);
        return 0;
    }
    if (rc || g_o.threads < 1 || g_o.threads > 256 || g_o.seconds <= 0 || g_o.batch < 1 ||
        g_o.batch > CR__RPC_BATCH_MAX) {
        fprintf(stderr, "crescent-master-bench: %s\n", rc ? err : "bad option value");
        return 2;
    }
    if (cr__auth_load(&CR__AUTH_CFG_OF(g_o), &g_auth) || CR__TLS_LOAD_OF(g_o, &g_tls)) {
        fprintf(stderr, "crescent-master-bench: security configuration unusable\n");
        return 2;
    }
    cr__rpc_client_t *c;
    if (client_new(&c)) {
        fprintf(stderr, "crescent-master-bench: bad --master\n");
        return 2;
    }
    /* a fake 1 GiB segment (metadata only: nothing is ever transferred) */
    /* unique per run: a dropped name with leased replicas is held a while */
    char segname[64];
    snprintf(segname, sizeof segname, "master-bench-fake-%d", (int)getpid());
    cr__rpc_msg_t req = {.type = CR__RPC_MOUNT_SEGMENT, .client_id = g_id,
                         .segment = segname, .base = 1ull << 40,
                         .size = 1ull << 30},
                  rep;
    if ((rc = call(c, &req, &rep))) {
        fprintf(stderr, "crescent-master-bench: mount failed: %s\n", cr_strerror(rc));
        return 1;
    }
    cr__rpc_msg_free(&rep);
    for (int i = 0; i < PRELOAD; i++) {
        char key[64];
        snprintf(key, sizeof key, "mb-pre-%d", i);
        rc = put_one(c, key);
        if (rc && rc != CR_E_OBJECT_ALREADY_EXISTS) {
            fprintf(stderr, "crescent-master-bench: preload failed: %s\n", cr_strerror(rc));
            return 1;
        }
    }
    worker_t *w = calloc((size_t)g_o.threads, sizeof *w);
    uint64_t t0 = cr__now_ms();
    g_deadline_ms = t0 + (uint64_t)(g_o.seconds * 1000);
    for (int i = 0; i < g_o.threads; i++) {
        w[i].idx = i;
        pthread_create(&w[i].t, NULL, run, &w[i]);
    }
    uint64_t ops = 0, errors = 0;
    size_t n_lat = 0;
    for (int i = 0; i < g_o.threads; i++) {
        pthread_join(w[i].t, NULL);
        ops += w[i].ops;
        errors += w[i].errors;
        n_lat += w[i].n_lat;
    }
    double secs = (double)(cr__now_ms() - t0) / 1000.0;
    uint32_t *lat = malloc((n_lat + 1) * sizeof *lat);
    size_t k = 0;
    for (int i = 0; i < g_o.threads; i++) {
        if (w[i].lat_us)
            memcpy(lat + k, w[i].lat_us, w[i].n_lat * sizeof *lat);
        k += w[i].n_lat;
        free(w[i].lat_us);
    }
    qsort(lat, n_lat, sizeof *lat, cmp_u32);
    uint32_t p50 = n_lat ? lat[n_lat / 2] : 0, p99 = n_lat ? lat[n_lat * 99 / 100] : 0;
    double keys = (double)ops * (!strcmp(g_o.op, "batch_exist") ? (double)g_o.batch : 1.0);
    printf("RESULT master_bench op=%s threads=%lld ops=%llu errors=%llu ops_per_s=%.0f "
           "keys_per_s=%.0f p50_us=%u p99_us=%u\n",
           g_o.op, (long long)g_o.threads, (unsigned long long)ops, (unsigned long long)errors,
           (double)ops / secs, keys / secs, p50, p99);
    /* clean up: drop everything this run stored */
    req = (cr__rpc_msg_t){.type = CR__RPC_UNMOUNT_SEGMENT, .client_id = g_id,
                          .segment = segname};
    if (!call(c, &req, &rep))
        cr__rpc_msg_free(&rep);
    free(lat);
    free(w);
    cr__rpc_client_destroy(c);
    cr__auth_free(g_auth);
    cr__tls_free(g_tls);
    return errors ? 1 : 0;
}
