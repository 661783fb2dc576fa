/* crescent-bench tier: gets served from a node's disk tier, and the
 * write-through offload rate (bench/tier/run.py drives it next to fio).
 *
 *   crescent-bench tier --master_server_address A --metadata_server M
 *       --value_size 1MB --keys 512 --qd 16 --rounds 2 [--phase get|offload]
 *
 * get: puts --keys values (untimed, retried while the pool pushes back),
 * then reads the oldest half of them (the ones the master moved to disk)
 * with cr_store_batch_get_into, --rounds times (each round in a fresh
 * random order, --order random: values put one after the other sit at
 * ascending disk offsets, and fio's randread reads random ones), from
 * --threads threads each
 * issuing batches of qd/threads keys (so at most --qd reads are outstanding,
 * like fio's iodepth; --batch N sends N keys per batch instead, so the
 * node's disk queue of --qd stays full across a batch and drains only at
 * its end). An untimed round first checks every byte of every value; the
 * timed rounds check samples of each. GB/s = bytes / wall time of the
 * timed rounds. Prints
 *   RESULT bench=tier phase=get value_size=.. qd=.. threads=.. batch=.. gets=.. errors=.. wrong=..
 *          gbps=.. batch_p50_us=.. batch_p99_us=.. get_p50_us=.. get_p99_us=..
 * (batch latency = one batch get; get_* = single gets at qd 1, run after
 * the batches, over the same keys). read: the same without the puts (keys
 * of an earlier get run).
 * offload: puts --keys values as fast as it can (the master runs
 * write-through) and prints the put rate; the driver reads the offload
 * completion time from the master's metrics. */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "common/config.h"
#include "crescent/store.h"

typedef struct tb_cfg {
    char master_server_address[CR__CFG_STR_MAX];
    char metadata_server[CR__CFG_STR_MAX];
    char local_hostname[CR__CFG_STR_MAX];
    char phase[CR__CFG_STR_MAX];
    char trace[CR__CFG_STR_MAX];
    char order[CR__CFG_STR_MAX];
    uint64_t value_size;
    int64_t keys, key_base, qd, batch, rounds, threads, requests, speedup;
} tb_cfg_t;

#define OPT(n, d, h, t) {#n, d, h, t, offsetof(tb_cfg_t, n)}
static const cr__cfg_opt_t opts[] = {
    OPT(master_server_address, "127.0.0.1:50051", "master host:port", CR__CFG_STR),
    OPT(metadata_server, "p2p", "TE metadata", CR__CFG_STR),
    OPT(local_hostname, "127.0.0.1", "this client's address", CR__CFG_STR),
    OPT(phase, "get",
        "get | offload | put (the puts of get only) | read (gets only: the keys of an earlier "
        "get or put run) | replay (--trace)",
        CR__CFG_STR),
    OPT(trace, "data/traces/conversation_trace.jsonl",
        "replay: a Mooncake trace (one JSON request per line with hash_ids); each block is a "
        "value of --value_size bytes", CR__CFG_STR),
    OPT(requests, "0", "replay: requests replayed (0 = all)", CR__CFG_INT),
    OPT(speedup, "40",
        "replay: requests start at their trace timestamp / speedup (0 = back to back)",
        CR__CFG_INT),
    OPT(value_size, "1MB", "bytes per value", CR__CFG_SIZE),
    OPT(keys, "512", "values put", CR__CFG_INT),
    OPT(key_base, "0",
        "put: the keys are tier-<key_base>.. (a put run with another base adds newer keys "
        "that push the older ones out of DRAM)", CR__CFG_INT),
    OPT(qd, "16", "keys per batch get (the node's disk queue depth)", CR__CFG_INT),
    OPT(batch, "0",
        "keys per batch get of each thread (0 = qd/threads; more than that keeps the node's "
        "disk queue full across a batch instead of draining it between batches)",
        CR__CFG_INT),
    OPT(rounds, "2", "passes over the disk-resident keys", CR__CFG_INT),
    OPT(threads, "1",
        "threads issuing batch gets of qd/threads keys each (at most qd reads outstanding)",
        CR__CFG_INT),
    OPT(order, "random",
        "read phase: random (a fresh permutation of the keys each round, like fio randread: "
        "keys put one after the other sit at ascending disk offsets) | put (put order)",
        CR__CFG_STR),
};

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Every byte in the untimed checking round; timed rounds check the first, a middle
 * and the last 4 KiB (the pattern depends on the key and the offset, so
 * another object's or a shifted value fails), so that checking does not
 * dominate the timed loop (fio checks nothing). */
static int tb_value_ok(const uint8_t *v, size_t vs, uint64_t seed, int full)
{
    if (full || vs <= 3 * 4096)
        return cr_bench_pattern_check(v, 0, vs, seed) == (size_t)-1;
    size_t offs[3] = {0, (vs / 2) & ~(size_t)4095, vs - 4096};
    for (int i = 0; i < 3; i++)
        if (cr_bench_pattern_check(v + offs[i], offs[i], 4096, seed) != (size_t)-1)
            return 0;
    return 1;
}

/* One get thread: batches of `per` keys, the keys at positions first,
 * first+stride, ... of each round's order (order[r * n_disk + pos]). */
typedef struct tb_worker {
    cr_store_t *st;
    uint8_t *buf;
    size_t vs, per;
    const int64_t *order;
    int64_t first, stride, n_disk, rounds;
    uint64_t t0, t1; /* the timed rounds (after the untimed checking round) */
    pthread_t th;
    int failed;
    uint64_t gets, errors, wrong, bytes;
    cr_bench_lat_t lat;
} tb_worker_t;

static void *tb_worker(void *arg)
{
    tb_worker_t *w = arg;
    cr_bench_lat_init(&w->lat, (uint64_t)w->first + 7);
    const char *keys[256];
    char kb[256][64];
    void *bufs[256];
    size_t caps[256], lens[256];
    int res[256];
    int64_t ids[256];
    for (size_t i = 0; i < w->per; i++) {
        keys[i] = kb[i];
        bufs[i] = w->buf + i * w->vs;
        caps[i] = w->vs;
    }
    /* round -1 (untimed, in round 0's order) checks every byte of every
     * value; the timed rounds check samples of each (tb_value_ok), so that
     * the benchmark's own checking is not timed (fio checks nothing) */
    for (int64_t r = -1; r < w->rounds; r++) {
        if (r == 0)
            w->t0 = now_ns();
        for (int64_t pos = w->first; pos < w->n_disk;) {
            size_t nb = 0;
            for (; nb < w->per && pos < w->n_disk; nb++, pos += w->stride) {
                int64_t k = w->order[(r < 0 ? 0 : r) * w->n_disk + pos];
                ids[nb] = k;
                snprintf(kb[nb], 64, "tier-%lld", (long long)k);
            }
            uint64_t a = now_ns();
            cr_store_batch_get_into(w->st, keys, bufs, caps, nb, lens, res);
            if (r >= 0)
                cr_bench_lat_add(&w->lat, now_ns() - a);
            for (size_t i = 0; i < nb; i++) {
                w->gets += r >= 0;
                if (res[i]) {
                    w->errors++;
                    continue;
                }
                w->bytes += r >= 0 ? lens[i] : 0;
                if (lens[i] != w->vs || !tb_value_ok(bufs[i], w->vs, (uint64_t)ids[i], r < 0))
                    w->wrong++;
            }
        }
    }
    w->t1 = now_ns();
    return NULL;
}

/* ---- replay: hit rate of a Mooncake trace through the real store --------
 * Each request's prefix blocks (hash_ids, 512 tokens each in the trace)
 * are looked up in order: batch_is_exist gives the prefix the store holds,
 * batch_get_into reads it (a block that fails to read ends the prefix);
 * the hits are the blocks of that prefix. The blocks after it are then
 * computed, i.e. put (a full pool pushes back while the disk tier catches
 * up: retried). Every block read is checked byte for byte (its value is a
 * function of its hash id). Requests are replayed back to back, in trace
 * order, each at its timestamp divided by --speedup (the disk tier copies
 * objects in the background: replayed back to back, the puts outrun it and
 * DRAM drops what it could not copy yet). Prints
 *   RESULT bench=tier phase=replay requests=.. blocks=.. hits=.. hit_rate=..
 *          put_failures=.. wrong=.. seconds=.. */
#define RP_MAX_BLOCKS 1024

static int rp_parse_ids(const char *line, int64_t *ids, size_t max, size_t *n)
{
    const char *p = strstr(line, "\"hash_ids\"");
    if (!p || !(p = strchr(p, '[')))
        return -1;
    p++;
    *n = 0;
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p == ']')
            return 0;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || *n >= max)
            return -1;
        ids[(*n)++] = v;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == ',')
            p++;
    }
}

static int tb_replay(cr_store_t *st, const tb_cfg_t *c)
{
    size_t vs = (size_t)c->value_size;
    FILE *f = fopen(c->trace, "r");
    if (!f) {
        fprintf(stderr, "crescent-bench tier: --trace %s: %s\n", c->trace, strerror(errno));
        return 2;
    }
    size_t blen = vs * RP_MAX_BLOCKS;
    uint8_t *buf = cr_bench_alloc_prefaulted(blen);
    if (!buf || cr_store_register_buffer(st, buf, blen)) {
        fprintf(stderr, "crescent-bench tier: buffer\n");
        fclose(f);
        return 3;
    }
    static char kb[RP_MAX_BLOCKS][32];
    static const char *keys[RP_MAX_BLOCKS];
    static void *bufs[RP_MAX_BLOCKS];
    static size_t caps[RP_MAX_BLOCKS], lens[RP_MAX_BLOCKS];
    static int res[RP_MAX_BLOCKS];
    static int64_t ids[RP_MAX_BLOCKS];
    uint64_t reqs = 0, blocks = 0, hits = 0, put_fail = 0, wrong = 0, bad_lines = 0;
    char *line = NULL;
    size_t lcap = 0;
    uint64_t t0 = now_ns();
    while (getline(&line, &lcap, f) > 0 && (c->requests <= 0 || (int64_t)reqs < c->requests)) {
        size_t n;
        if (rp_parse_ids(line, ids, RP_MAX_BLOCKS, &n)) {
            bad_lines++;
            continue;
        }
        const char *ts = strstr(line, "\"timestamp\"");
        if (c->speedup > 0 && ts && (ts = strchr(ts, ':'))) {
            uint64_t due = t0 + (uint64_t)(strtod(ts + 1, NULL) * 1e6 / (double)c->speedup);
            uint64_t now = now_ns();
            if (due > now)
                usleep((useconds_t)((due - now) / 1000));
        }
        reqs++;
        blocks += n;
        for (size_t i = 0; i < n; i++) {
            snprintf(kb[i], sizeof kb[i], "b%lld", (long long)ids[i]);
            keys[i] = kb[i];
            bufs[i] = buf + i * vs;
            caps[i] = vs;
        }
        size_t k = 0;
        if (n && cr_store_batch_is_exist(st, keys, n, res) == 0)
            while (k < n && res[k] == 1)
                k++;
        if (k) {
            cr_store_batch_get_into(st, keys, bufs, caps, k, lens, res);
            size_t got = 0;
            while (got < k && res[got] == 0) {
                if (lens[got] != vs ||
                    cr_bench_pattern_check(bufs[got], 0, vs, (uint64_t)ids[got]) != (size_t)-1)
                    wrong++;
                got++;
            }
            k = got;
        }
        hits += k;
        /* the rest is computed, then stored */
        for (size_t i = k; i < n; i++)
            cr_bench_pattern_fill(bufs[i], 0, vs, (uint64_t)ids[i]);
        for (size_t i = k; i < n; i++)
            lens[i] = vs;
        size_t left = n - k;
        for (int tries = 0; left && tries < 500; tries++) {
            cr_store_batch_put_from(st, keys + k, (const void *const *)(bufs + k), lens + k, n - k,
                                    NULL, res + k);
            left = 0;
            for (size_t i = k; i < n; i++)
                left += res[i] != 0 && res[i] != CR_E_OBJECT_ALREADY_EXISTS;
            if (left)
                usleep(10000); /* the pool pushes back while the disk tier catches up */
        }
        put_fail += left;
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    free(line);
    fclose(f);
    printf("RESULT bench=tier phase=replay requests=%llu blocks=%llu hits=%llu hit_rate=%.4f "
           "put_failures=%llu wrong=%llu bad_lines=%llu seconds=%.1f\n",
           (unsigned long long)reqs, (unsigned long long)blocks, (unsigned long long)hits,
           blocks ? (double)hits / (double)blocks : 0, (unsigned long long)put_fail,
           (unsigned long long)wrong, (unsigned long long)bad_lines, secs);
    cr_store_unregister_buffer(st, buf);
    cr_bench_free(buf, blen);
    return wrong ? 1 : 0;
}

int cr_bench_tier_main(int argc, char **argv)
{
    tb_cfg_t c;
    char err[256] = "";
    int rc = cr__cfg_parse(opts, sizeof opts / sizeof opts[0], &c, argc, argv, 1,
                           "CRESCENT_BENCH_", NULL, 0, NULL, err, sizeof err);
    if (rc == 1) {
        cr__cfg_usage(stdout, "crescent-bench tier", "disk tier get / offload benchmark", opts,
                      sizeof opts / sizeof opts[0]);
        return 0;
    }
    if (rc || c.keys < 2 || c.qd < 1 || c.qd > 256 || c.value_size == 0 || c.rounds < 1 ||
        c.threads < 1 || c.threads > c.qd || c.qd % c.threads || c.batch < 0 || c.batch > 256 ||
        (strcmp(c.order, "random") && strcmp(c.order, "put"))) {
        fprintf(stderr, "crescent-bench tier: %s\n", rc ? err : "bad --keys/--qd/--value_size/--threads (must divide --qd)/--batch (<= 256)/--order");
        return 2;
    }
    cr_store_params_t p = {0};
    p.field_mask = CR_STORE_PARAM_LOCAL_HOSTNAME | CR_STORE_PARAM_METADATA_URI |
                   CR_STORE_PARAM_MASTER_ADDR | CR_STORE_PARAM_GLOBAL_SEGMENT_SIZE |
                   CR_STORE_PARAM_PROTOCOL;
    p.local_hostname = c.local_hostname;
    p.metadata_uri = c.metadata_server;
    p.master_addr = c.master_server_address;
    p.global_segment_size = 0;
    p.protocol = "tcp";
    cr_store_t *st = NULL;
    if ((rc = cr_store_create(&p, &st)) != 0) {
        fprintf(stderr, "crescent-bench tier: client: %s\n", cr_strerror(rc));
        return 3;
    }
    if (!strcmp(c.phase, "replay")) {
        rc = tb_replay(st, &c);
        cr_store_destroy(st);
        return rc;
    }
    size_t vs = (size_t)c.value_size, qd = (size_t)c.qd;
    size_t nt = (size_t)c.threads, per = c.batch ? (size_t)c.batch : qd / nt;
    size_t blen = vs * (nt * per > qd ? nt * per : qd);
    uint8_t *buf = cr_bench_alloc_prefaulted(blen);
    if (!buf || cr_store_register_buffer(st, buf, blen)) {
        fprintf(stderr, "crescent-bench tier: buffer\n");
        return 3;
    }
    char key[64];
    /* puts */
    uint64_t t0 = now_ns(), put_err = 0;
    int64_t n_put = strcmp(c.phase, "read") ? c.keys : 0;
    int offload = !strcmp(c.phase, "offload");
    if (offload) /* one pattern for all: the puts go as fast as they can */
        cr_bench_pattern_fill(buf, 0, vs, 0);
    for (int64_t k = c.key_base; k < c.key_base + n_put; k++) {
        snprintf(key, sizeof key, "tier-%lld", (long long)k);
        if (!offload)
            cr_bench_pattern_fill(buf, 0, vs, (uint64_t)k);
        for (int tries = 0;; tries++) {
            rc = cr_store_put_from(st, key, buf, vs, NULL);
            if (rc == 0 || tries >= 2000)
                break;
            usleep(10000); /* the pool pushes back while the disk tier catches up */
        }
        put_err += rc != 0;
    }
    double put_s = (double)(now_ns() - t0) / 1e9;
    if (!strcmp(c.phase, "offload") || !strcmp(c.phase, "put")) {
        printf("RESULT bench=tier phase=%s value_size=%zu keys=%lld put_errors=%llu "
               "put_seconds=%.3f put_gbps=%.3f\n",
               c.phase, vs, (long long)c.keys, (unsigned long long)put_err, put_s,
               (double)vs * (double)c.keys / put_s / 1e9);
        fflush(stdout); /* the driver times the offload backlog from here */
        cr_store_unregister_buffer(st, buf);
        cr_store_destroy(st);
        cr_bench_free(buf, blen);
        return put_err ? 1 : 0;
    }
    /* timed batch gets over the oldest half: --threads workers, each
     * reading its share of every round in batches of `per` keys */
    int64_t n_disk = c.keys / 2;
    cr_bench_lat_t lb, l1;
    cr_bench_lat_init(&lb, 1);
    cr_bench_lat_init(&l1, 2);
    /* each round's key order: fixed seed, so runs are comparable */
    int64_t *order = malloc((size_t)(c.rounds * n_disk + 1) * sizeof *order);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int64_t r = 0; order && r < c.rounds; r++) {
        int64_t *o = order + r * n_disk;
        for (int64_t k = 0; k < n_disk; k++)
            o[k] = k;
        for (int64_t k = n_disk - 1; k > 0 && !strcmp(c.order, "random"); k--) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            int64_t j = (int64_t)(rng % (uint64_t)(k + 1)), t = o[k];
            o[k] = o[j];
            o[j] = t;
        }
    }
    tb_worker_t *w = order ? calloc(nt, sizeof *w) : NULL;
    if (!w) {
        fprintf(stderr, "crescent-bench tier: out of memory\n");
        free(order);
        return 3;
    }
    for (size_t i = 0; i < nt; i++)
        w[i] = (tb_worker_t){.st = st, .buf = buf + i * per * vs, .vs = vs, .per = per,
                             .order = order, .first = (int64_t)i, .stride = (int64_t)nt,
                             .n_disk = n_disk, .rounds = c.rounds};
    for (size_t i = 0; i < nt && w; i++)
        if (pthread_create(&w[i].th, NULL, tb_worker, &w[i]))
            w[i].failed = 1;
    uint64_t gets = 0, errors = 0, wrong = 0, bytes = 0, g0 = 0, g1 = 0;
    for (size_t i = 0; i < nt && w; i++) {
        if (!w[i].failed)
            pthread_join(w[i].th, NULL);
        gets += w[i].gets;
        errors += w[i].errors + (uint64_t)w[i].failed;
        wrong += w[i].wrong;
        bytes += w[i].bytes;
        if (!w[i].failed && (!g0 || w[i].t0 < g0))
            g0 = w[i].t0;
        if (!w[i].failed && w[i].t1 > g1)
            g1 = w[i].t1;
        cr_bench_lat_merge(&lb, &w[i].lat);
        cr_bench_lat_free(&w[i].lat);
    }
    /* from the first thread's first timed batch to the last one's end */
    uint64_t busy_ns = g1 > g0 ? g1 - g0 : 0;
    free(w);
    /* single gets at qd 1, in the first round's order */
    for (int64_t i = 0; i < n_disk; i++) {
        int64_t k = order[i];
        snprintf(key, sizeof key, "tier-%lld", (long long)k);
        size_t len;
        uint64_t a = now_ns();
        rc = cr_store_get_into(st, key, buf, vs, &len);
        cr_bench_lat_add(&l1, now_ns() - a);
        if (rc || cr_bench_pattern_check(buf, 0, vs, (uint64_t)k) != (size_t)-1)
            errors += rc != 0, wrong += rc == 0;
    }
    free(order);
    printf("RESULT bench=tier phase=%s value_size=%zu qd=%zu threads=%zu batch=%zu gets=%llu errors=%llu wrong=%llu "
           "gbps=%.3f batch_p50_us=%.0f batch_p99_us=%.0f get_p50_us=%.0f get_p99_us=%.0f "
           "put_errors=%llu\n",
           c.phase, vs, qd, nt, per, (unsigned long long)gets, (unsigned long long)errors,
           (unsigned long long)wrong, busy_ns ? (double)bytes / ((double)busy_ns / 1e9) / 1e9 : 0,
           cr_bench_lat_pct_us(&lb, 50), cr_bench_lat_pct_us(&lb, 99),
           cr_bench_lat_pct_us(&l1, 50), cr_bench_lat_pct_us(&l1, 99),
           (unsigned long long)put_err);
    cr_bench_lat_free(&lb);
    cr_bench_lat_free(&l1);
    cr_store_unregister_buffer(st, buf);
    cr_store_destroy(st);
    cr_bench_free(buf, blen);
    return wrong ? 1 : 0;
}
