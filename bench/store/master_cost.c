/* What the master's own code costs per key, without sockets, threads or a
 * second process: a master state (store/master) driven in this process
 * through the wire codec and the dispatch (cr__master_handle), as
 * crescent-master's RPC loop drives it, with the request shapes of the
 * KV-cache benchmark (bench/kvcache): per pass 8,192 keys of 16 KiB, put as
 * reserved puts (one RESERVE of 16 MiB per 256 keys, PUT_COMMITs of --batch
 * keys) and located with GET_REPLICA_LIST batches of --batch keys, then
 * removed. The reference, measured in the same run, is a bare hash-map
 * insert and lookup of the same keys (XXH3 + open addressing, as the
 * master's key index): what any metadata service pays at least per key.
 *
 * Compare with the master's CPU per key in a live run (bench/store/run.sh
 * case d reports it per operation): the difference is what sockets,
 * wakeups and sharing cores with the data path add.
 *
 * Not built by CMake (a benchmark, not a test); build and run with
 *
 *   bench/store/master_cost.sh [--batch 128] [--passes 40]
 *
 * Prints one markdown table (median of the passes after 5 warm-up passes).
 * Never fails on timing; exits 1 only if the master refuses a request. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "common/clock.h"
#include "store/master/master.h"
#include "store/master/master_priv.h"

#define KEYS 8192
#define VALUE (16u << 10)
#define RESV_KEYS 256 /* keys per RESERVE: 16 MiB of 16 KiB values */
#define WARM 5

static const cr__rpc_client_id_t ME = {1, 1};

typedef struct acc {
    uint64_t handle_ns, codec_ns, keys;
} acc_t;

/* req through encode, decode, cr__master_handle, encode, decode (as the
 * server and the client do); *out holds the decoded reply. */
static void roundtrip(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *out,
                      uint64_t now, acc_t *a)
{
    uint64_t t0 = cr__now_ns();
    cr__rpc_buf_t b;
    cr__rpc_buf_init(&b);
    cr__rpc_msg_t dreq, rep = {0};
    cr__rpc_hdr_t h;
    if (cr__rpc_encode(req, &b) || cr__rpc_decode_hdr(b.data, &h) ||
        cr__rpc_decode(&h, b.data + CR__RPC_HDR_SIZE, h.payload_len, &dreq)) {
        fprintf(stderr, "master_cost: request does not encode\n");
        exit(1);
    }
    rep.type = (uint16_t)(req->type | CR__RPC_REPLY);
    uint64_t t1 = cr__now_ns();
    cr__master_handle(m, &dreq, &rep, now);
    uint64_t t2 = cr__now_ns();
    cr__rpc_msg_free(&dreq);
    if (cr__rpc_encode(&rep, &b) || cr__rpc_decode_hdr(b.data, &h) ||
        cr__rpc_decode(&h, b.data + CR__RPC_HDR_SIZE, h.payload_len, out)) {
        fprintf(stderr, "master_cost: reply does not encode\n");
        exit(1);
    }
    cr__rpc_msg_free(&rep);
    cr__rpc_buf_free(&b);
    if (a) {
        a->handle_ns += t2 - t1;
        a->codec_ns += cr__now_ns() - t0 - (t2 - t1);
        a->keys += req->n_items;
    }
}

static void key_of(char *k, int pass, int i)
{
    snprintf(k, 64, "bench-12345-0-%d-%d", pass, i); /* crescent-bench's key shape */
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double med(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The reference: insert then look up the pass's keys in a bare
 * open-addressing table of (hash, key) (cleared each pass). ns per key
 * for insert + lookup. */
static double bare_map(int pass)
{
    enum { CAP = 4 * KEYS };
    static uint64_t tag[CAP];
    static char keys[CAP][64], in[KEYS][64];
    memset(tag, 0, sizeof tag);
    for (int i = 0; i < KEYS; i++) /* named before the clock starts, as the master's are */
        key_of(in[i], pass, i);
    uint64_t t0 = cr__now_ns(), found = 0;
    for (int i = 0; i < KEYS; i++) {
        size_t l = strlen(in[i]);
        uint64_t h = XXH3_64bits(in[i], l) | 1;
        uint64_t j = h & (CAP - 1);
        while (tag[j])
            j = (j + 1) & (CAP - 1);
        tag[j] = h;
        memcpy(keys[j], in[i], l + 1);
    }
    for (int i = 0; i < KEYS; i++) {
        size_t l = strlen(in[i]);
        uint64_t h = XXH3_64bits(in[i], l) | 1;
        for (uint64_t j = h & (CAP - 1); tag[j]; j = (j + 1) & (CAP - 1))
            if (tag[j] == h && !memcmp(keys[j], in[i], l + 1)) {
                found++;
                break;
            }
    }
    double ns = (double)(cr__now_ns() - t0) / KEYS;
    return found == KEYS ? ns : -1;
}

int main(int argc, char **argv)
{
    int batch = 128, passes = 40;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batch"))
            batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--passes"))
            passes = atoi(argv[i + 1]);
    }
    if (batch < 1 || batch > RESV_KEYS || RESV_KEYS % batch || passes <= WARM || passes > 1000) {
        fprintf(stderr, "usage: master_cost [--batch 1..256, dividing 256] [--passes 6..1000]\n");
        return 2;
    }
    setenv("CRESCENT_LOG", "error", 0); /* the clock below jumps: no "did not run" warnings */
    cr__master_cfg_t cfg;
    cr__master_cfg_default(&cfg);
    cfg.client_ttl_ms = 1000000000;
    cr__master_t *m;
    uint32_t f;
    if (cr__master_create(&cfg, &m) || cr__master_ping(m, ME, 0, &f) ||
        cr__master_mount(m, ME, "127.0.0.1:12345", 0x10000000ull, 4096ull << 20, 0)) {
        fprintf(stderr, "master_cost: cannot set up a master\n");
        return 1;
    }
    char (*keys)[64] = malloc((size_t)RESV_KEYS * sizeof *keys);
    cr__rpc_item_t *it = calloc(RESV_KEYS, sizeof *it);
    cr__rpc_shard_t *sh = calloc(RESV_KEYS, sizeof *sh);
    cr__rpc_replica_t *rp = calloc(RESV_KEYS, sizeof *rp);
    double *put_h = calloc((size_t)passes, sizeof(double)), *put_c = calloc((size_t)passes, sizeof(double));
    double *get_h = calloc((size_t)passes, sizeof(double)), *get_c = calloc((size_t)passes, sizeof(double));
    double *bare = calloc((size_t)passes, sizeof(double));
    if (!keys || !it || !sh || !rp || !put_h || !put_c || !get_h || !get_c || !bare)
        return 1;
    uint64_t now = 1;
    int n = 0;
    for (int pass = 0; pass < passes; pass++) {
        acc_t put = {0}, get = {0};
        for (int call = 0; call < KEYS / RESV_KEYS; call++) {
            cr__rpc_msg_t req = {0}, rep;
            req.type = CR__RPC_RESERVE;
            req.client_id = ME;
            req.size = (uint64_t)RESV_KEYS * VALUE;
            roundtrip(m, &req, &rep, now, NULL);
            if (rep.status || rep.n_items != 1) {
                fprintf(stderr, "master_cost: RESERVE refused (%d)\n", rep.status);
                return 1;
            }
            uint64_t rid = rep.items[0].version, addr = rep.items[0].replicas[0].shards[0].addr;
            char seg[64];
            snprintf(seg, sizeof seg, "%s", rep.items[0].replicas[0].shards[0].segment);
            cr__rpc_msg_free(&rep);
            for (int i = 0; i < RESV_KEYS; i++) {
                key_of(keys[i], pass, call * RESV_KEYS + i);
                sh[i] = (cr__rpc_shard_t){.segment = seg, .addr = addr + (uint64_t)i * VALUE,
                                          .len = VALUE};
                rp[i] = (cr__rpc_replica_t){.n_shards = 1, .shards = &sh[i]};
                it[i] = (cr__rpc_item_t){.key = keys[i], .key_len = (uint32_t)strlen(keys[i]),
                                         .size = VALUE, .version = rid, .flags = CR__RPC_F_CRC,
                                         .replica_id = 0x1234, .n_replicas = 1,
                                         .replicas = &rp[i]};
            }
            for (int k0 = 0; k0 < RESV_KEYS; k0 += batch) {
                cr__rpc_msg_t q = {0}, r;
                q.type = CR__RPC_PUT_COMMIT;
                q.client_id = ME;
                q.n_items = (uint32_t)batch;
                q.items = it + k0;
                roundtrip(m, &q, &r, now, &put);
                for (uint32_t i = 0; i < r.n_items; i++)
                    if (r.items[i].status) {
                        fprintf(stderr, "master_cost: PUT_COMMIT refused (%d)\n", r.items[i].status);
                        return 1;
                    }
                cr__rpc_msg_free(&r);
            }
            /* the clock moves on: used-up reservations close and go */
            now += 1000;
            cr__master_tick(m, now);
            cr__master_ping(m, ME, now, &f);
        }
        for (int k0 = 0; k0 < KEYS; k0 += batch) {
            cr__rpc_item_t g[RESV_KEYS];
            char gk[RESV_KEYS][64];
            memset(g, 0, sizeof g);
            for (int i = 0; i < batch; i++) {
                key_of(gk[i], pass, k0 + i);
                g[i].key = gk[i];
                g[i].key_len = (uint32_t)strlen(gk[i]);
            }
            cr__rpc_msg_t q = {0}, r;
            q.type = batch > 1 ? CR__RPC_BATCH_GET_REPLICA_LIST : CR__RPC_GET_REPLICA_LIST;
            q.client_id = ME;
            q.n_items = (uint32_t)batch;
            q.items = g;
            roundtrip(m, &q, &r, now, &get);
            for (uint32_t i = 0; i < r.n_items; i++)
                if (r.items[i].status) {
                    fprintf(stderr, "master_cost: GET_REPLICA_LIST failed (%d)\n", r.items[i].status);
                    return 1;
                }
            cr__rpc_msg_free(&r);
        }
        uint64_t removed;
        cr__master_remove_all(m, 1, now, &removed);
        double b = bare_map(pass);
        if (pass < WARM)
            continue;
        put_h[n] = (double)put.handle_ns / (double)put.keys;
        put_c[n] = (double)put.codec_ns / (double)put.keys;
        get_h[n] = (double)get.handle_ns / (double)get.keys;
        get_c[n] = (double)get.codec_ns / (double)get.keys;
        bare[n++] = b;
    }
    double ref = med(bare, n);
    printf("master_cost: %d keys of %u KiB per pass, %d keys per request, median of %d passes\n\n",
           KEYS, VALUE >> 10, batch, n);
    printf("| request | master dispatch, ns/key | wire codec (both ways), ns/key | "
           "reference: bare map insert + lookup, ns/key | dispatch / reference |\n");
    printf("|---|---|---|---|---|\n");
    double ph = med(put_h, n), pc = med(put_c, n), gh = med(get_h, n), gc = med(get_c, n);
    printf("| PUT_COMMIT | %.0f | %.0f | %.0f | %.1fx |\n", ph, pc, ref, ph / ref);
    printf("| GET_REPLICA_LIST | %.0f | %.0f | %.0f | %.1fx |\n", gh, gc, ref, gh / ref);
    cr__master_destroy(m);
    return 0;
}
