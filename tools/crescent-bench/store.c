/* crescent-bench store: Store put/get/batch throughput and latency.
 *
 *   crescent-bench store --master_server_address 127.0.0.1:50051
 *       --op put|get|putget|batch_put|batch_get|batch_putget|exist
 *       --value_size 1MB --threads 4 [--processes 2] --ops 200 [--batch 32]
 *       [--replica_num 1]
 *       [--metadata_server p2p] [--local_hostname 127.0.0.1] [--verify]
 *
 * One client object shared by --threads threads (the client is
 * thread-safe), each with its own registered buffer, using the zero-copy
 * calls (put_from / get_into / batch_*), as Mooncake's store benchmark does.
 * put:  each thread puts --ops fresh keys. get: each thread first puts
 * --keys keys (untimed), then does --ops gets over them round-robin.
 * putget / batch_putget: the put phase (timed) then the get phase over the
 * keys just put. exist: batch_is_exist of --batch keys per call, half of
 * them present. Keys are removed at the end unless --keep.
 * With --ab_env VAR=VALUE a second client is made with that variable set
 * (e.g. CRESCENT_PUT_PIPE=0) and every thread's calls alternate between
 * the two clients in blocks of --ab_block calls; an AB line gives the mean
 * call time of each: an A/B of a client switch that drifts of the machine
 * cannot bias (both halves see the same moments).
 * With --te_ref SEGMENT (a crescent-bench target) the raw Transfer Engine
 * is the reference in the same process and the same moments: blocks of
 * --ab_block store calls alternate with as many TE batches of the same
 * shape from the same buffers to the target (WRITE for batch_put, READ for
 * batch_get); a TEREF line gives the mean call time of each and their
 * ratio (store_over_te: the store's throughput over the TE's). The RESULT
 * line then times the store calls only and reports no CPU figures.
 * With --processes P > 1, P child processes each run the same with their
 * own client; the parent starts every timed phase in all of them at once
 * (pipes), collects their counters and latency samples and prints one
 * RESULT line over all of them (threads = P x --threads).
 *
 * Output: one line per timed phase
 *   RESULT bench=store op=put value_size=... threads=... processes=... batch=... ops=...
 *          seconds=... gbps=... ops_per_s=... p50_us=... p99_us=... p999_us=...
 *          errors=... verify=ok|off|FAILED
 * gbps is 1e9 bytes/s; latency is per call (a batch call for batch ops).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "common/clock.h"
#include "common/auth/auth_opts.h"
#include "common/config.h"
#include "common/crc32c.h"
#include "transfer/checksum.h"
#include "crescent/store.h"
#include "crescent/transfer.h"

typedef struct sb_cfg {
    char master_server_address[CR__CFG_STR_MAX];
    char metadata_server[CR__CFG_STR_MAX];
    char local_hostname[CR__CFG_STR_MAX];
    char protocol[CR__CFG_STR_MAX];
    char op[CR__CFG_STR_MAX];
    char key_prefix[CR__CFG_STR_MAX];
    uint64_t value_size;
    uint64_t global_segment_size;
    int64_t threads;
    int64_t processes;
    int64_t ops;
    int64_t keys;
    int64_t batch;
    int64_t replica_num;
    int64_t slots;
    int verify;
    int keep;
    char ab_env[CR__CFG_STR_MAX];
    char te_ref[CR__CFG_STR_MAX];
    char te_ref_protocol[CR__CFG_STR_MAX];
    int64_t te_ref_rpc;
    int te_ref_crc;
    int64_t ab_block;
    int64_t warmup;
    CR__AUTH_CFG_FIELDS;
} sb_cfg_t;

#define OPT(n, d, h, t) {#n, d, h, t, offsetof(sb_cfg_t, n)}
static const cr__cfg_opt_t sb_opts[] = {
    OPT(master_server_address, "127.0.0.1:50051", "master host:port", CR__CFG_STR),
    OPT(metadata_server, "p2p", "TE metadata URI", CR__CFG_STR),
    OPT(local_hostname, "127.0.0.1", "this client's address", CR__CFG_STR),
    OPT(protocol, "tcp", "TE transports: tcp or tcp,shm", CR__CFG_STR),
    OPT(op, "putget", "put|get|putget|batch_put|batch_get|batch_putget|exist", CR__CFG_STR),
    OPT(key_prefix, "", "key prefix (default: bench-<pid>)", CR__CFG_STR),
    OPT(value_size, "1MB", "bytes per value (4KB..16MB typical)", CR__CFG_SIZE),
    OPT(global_segment_size, "0", "memory this bench client contributes (0 = none)",
        CR__CFG_SIZE),
    OPT(threads, "4", "client threads (per process)", CR__CFG_INT),
    OPT(processes, "1", "client processes, each with its own client and --threads threads",
        CR__CFG_INT),
    OPT(ops, "100", "timed calls per thread (get/put ops; batch calls for batch ops)",
        CR__CFG_INT),
    OPT(keys, "16", "keys per thread for get (prefilled, read round-robin)", CR__CFG_INT),
    OPT(batch, "32", "keys per batch call", CR__CFG_INT),
    OPT(replica_num, "1", "replicas per put", CR__CFG_INT),
    OPT(slots, "0",
        "value buffers per thread, reused round-robin (0 = one per key, at most 1 GiB; "
        "redis-benchmark reuses one buffer; batch ops: the batch size, or --slots if larger)",
        CR__CFG_INT),
    OPT(verify, "false", "check every byte read against the written pattern", CR__CFG_BOOL),
    OPT(keep, "false", "do not remove the keys at the end", CR__CFG_BOOL),
    OPT(ab_env, "",
        "A/B in one process: a second client made with this VAR=VALUE in its environment; "
        "each thread's calls alternate between the two in blocks of --ab_block, and an AB line "
        "gives both mean call times (one process)",
        CR__CFG_STR),
    OPT(ab_block, "4", "calls per block of --ab_env or --te_ref", CR__CFG_INT),
    OPT(te_ref, "",
        "batch ops, one thread: the raw Transfer Engine as the reference, in the same process "
        "and moments: blocks of --ab_block store calls alternate with as many TE batches of the "
        "same shape (--batch blocks of --value_size from the same buffers; WRITE in batch_put, "
        "READ in batch_get) to this crescent-bench target segment, waited for as the store "
        "waits; a TEREF line gives both mean call times",
        CR__CFG_STR),
    OPT(te_ref_protocol, "", "--te_ref's transport: tcp or shm (default: tcp for --protocol tcp, "
        "else shm)", CR__CFG_STR),
    OPT(te_ref_rpc, "0",
        "with --te_ref: a third arm, the same TE batch followed by one master call "
        "(batch_is_exist of this many of the call's keys, 1..--batch), timed with it: the raw "
        "TE plus one metadata round trip after its last byte, the least a store's save must add "
        "(0 = off); a TERPC line gives its mean time",
        CR__CFG_INT),
    OPT(te_ref_crc, "false",
        "with --te_ref_rpc: that arm's batches also hash every byte they move (crc32c) as the "
        "store's end-to-end check does: in the transport where it hashes the opcode, else in "
        "this thread while the batch runs",
        CR__CFG_BOOL),
    OPT(warmup, "0",
        "batch ops: untimed batch_put + batch_get calls of --batch warm-up keys per thread "
        "first (each client's node connections, segment mappings, first reservation), as the "
        "raw TE benchmark warms up before its clock starts",
        CR__CFG_INT),
    CR__AUTH_CFG_OPTS(sb_cfg_t),
};

typedef struct sb_thread {
    pthread_t tid;
    int idx;
    const sb_cfg_t *cfg;
    cr_store_t *st;
    uint8_t *buf; /* registered: slots of value_size bytes */
    size_t slots;
    cr_bench_lat_t lat;
    uint64_t calls, keys_done, errors, verify_fail;
    uint64_t n_put; /* keys this thread has put (0..n_put-1) */
    char (*ktab)[96]; /* names of keys 0..nk-1, made before a batch phase (key_of) */
    uint64_t nk;
    cr_store_t *ab_st[2]; /* --ab_env: the two clients (ab_st[1] NULL without) */
    uint64_t ab_ns[3], ab_calls[3]; /* [2]: --te_ref_rpc */
    /* --te_ref: the raw TE's engine, the target segment and the range of
     * its buffer the reference batches use (wrapping), the next offset */
    cr_xfer_engine_t *te;
    cr_xfer_segment_t te_seg;
    uint64_t te_base, te_len, te_off;
    uint64_t te_errors;
    uint64_t last_ns; /* the store call one_call made last, timed as its latency */
} sb_thread_t;

static pthread_barrier_t g_bar;
static volatile uint32_t g_crc_sink; /* --te_ref_crc: keeps the hashing */
static const char *g_phase;

static void key_name(char *k, size_t cap, const sb_cfg_t *c, int t, uint64_t i)
{
    snprintf(k, cap, "%.40s-%d-%" PRIu64, c->key_prefix, t, i);
}

/* A batch phase's key names are made before its clock starts, so that its
 * figures are the store's calls and not snprintf (~0.4 us per key here:
 * an application names its keys whatever store it uses, and the raw TE
 * run it is compared with names none). Up to KTAB_MAX keys per thread;
 * beyond, names are made in the call's loop as before. */
#define KTAB_MAX (256u << 10)

static void ktab_fill(sb_thread_t *th, uint64_t upto)
{
    if (upto > KTAB_MAX)
        upto = KTAB_MAX;
    if (upto <= th->nk)
        return;
    char(*t)[96] = realloc(th->ktab, (size_t)upto * sizeof *t);
    if (!t)
        return;
    th->ktab = t;
    for (uint64_t i = th->nk; i < upto; i++)
        key_name(t[i], sizeof t[i], th->cfg, th->idx, i);
    th->nk = upto;
}

/* Key i's name: from the table, or made into buf. */
static const char *key_of(sb_thread_t *th, uint64_t i, char *buf)
{
    if (i < th->nk)
        return th->ktab[i];
    key_name(buf, 96, th->cfg, th->idx, i);
    return buf;
}

static uint64_t seed_of(int t, uint64_t i) { return ((uint64_t)t << 40) ^ (i * 2654435761u) ^ 0x5bd1e995u; }

/* One call of the phase; returns the number of keys it handled. */
static uint64_t one_call(sb_thread_t *th, uint64_t call)
{
    const sb_cfg_t *c = th->cfg;
    size_t vs = c->value_size;
    char kbuf[CR_STORE_BATCH_MAX][96];
    const char *keys[CR_STORE_BATCH_MAX];
    const void *cbufs[CR_STORE_BATCH_MAX];
    void *bufs[CR_STORE_BATCH_MAX];
    size_t lens[CR_STORE_BATCH_MAX], caps[CR_STORE_BATCH_MAX];
    int res[CR_STORE_BATCH_MAX];
    int batch = (int)c->batch;
    uint64_t t0;
    int rc;

    if (!strcmp(g_phase, "put")) {
        uint64_t i = th->n_put;
        key_name(kbuf[0], 96, c, th->idx, i);
        uint8_t *slot = th->buf + (i % th->slots) * vs;
        if (c->verify)
            cr_bench_pattern_fill(slot, 0, vs, seed_of(th->idx, i));
        cr_store_replicate_config_t rc_ = {.replica_num = (uint32_t)c->replica_num};
        t0 = cr__now_ns();
        rc = cr_store_put_from(th->st, kbuf[0], slot, vs, &rc_);
        cr_bench_lat_add(&th->lat, cr__now_ns() - t0);
        if (rc) {
            th->errors++;
            if (th->errors < 5)
                fprintf(stderr, "put %s: %s\n", kbuf[0], cr_strerror(rc));
        }
        th->n_put++;
        return 1;
    }
    if (!strcmp(g_phase, "get")) {
        uint64_t i = th->n_put ? call % th->n_put : 0;
        key_name(kbuf[0], 96, c, th->idx, i);
        uint8_t *slot = th->buf;
        size_t got = 0;
        t0 = cr__now_ns();
        rc = cr_store_get_into(th->st, kbuf[0], slot, vs, &got);
        cr_bench_lat_add(&th->lat, cr__now_ns() - t0);
        if (rc) {
            th->errors++;
            if (th->errors < 5)
                fprintf(stderr, "get %s: %s\n", kbuf[0], cr_strerror(rc));
        } else if (c->verify && (got != vs ||
                                 cr_bench_pattern_check(slot, 0, vs, seed_of(th->idx, i)) !=
                                     (size_t)-1)) {
            th->verify_fail++;
        }
        return 1;
    }
    if (!strcmp(g_phase, "batch_put")) {
        cr_store_replicate_config_t rc_ = {.replica_num = (uint32_t)c->replica_num};
        for (int b = 0; b < batch; b++) {
            uint64_t i = th->n_put + (uint64_t)b;
            keys[b] = key_of(th, i, kbuf[b]);
            uint8_t *slot = th->buf + (i % th->slots) * vs;
            if (c->verify)
                cr_bench_pattern_fill(slot, 0, vs, seed_of(th->idx, i));
            cbufs[b] = slot;
            lens[b] = vs;
        }
        t0 = cr__now_ns();
        cr_store_batch_put_from(th->st, keys, cbufs, lens, (size_t)batch, &rc_, res);
        th->last_ns = cr__now_ns() - t0;
        cr_bench_lat_add(&th->lat, th->last_ns);
        for (int b = 0; b < batch; b++)
            if (res[b]) {
                th->errors++;
                if (th->errors < 5)
                    fprintf(stderr, "batch_put %s: %s\n", keys[b], cr_strerror(res[b]));
            }
        th->n_put += (uint64_t)batch;
        return (uint64_t)batch;
    }
    if (!strcmp(g_phase, "batch_get")) {
        uint64_t base = th->n_put ? (call * (uint64_t)batch) % th->n_put : 0;
        int nb = batch < (int)th->slots ? batch : (int)th->slots;
        for (int b = 0; b < nb; b++) {
            uint64_t i = th->n_put ? (base + (uint64_t)b) % th->n_put : 0;
            keys[b] = key_of(th, i, kbuf[b]);
            /* --slots > --batch: key i lands in its own buffer */
            uint64_t slot = th->slots > (size_t)batch ? i % th->slots : (uint64_t)b;
            bufs[b] = th->buf + (size_t)slot * vs;
            caps[b] = vs;
        }
        t0 = cr__now_ns();
        cr_store_batch_get_into(th->st, keys, bufs, caps, (size_t)nb, lens, res);
        th->last_ns = cr__now_ns() - t0;
        cr_bench_lat_add(&th->lat, th->last_ns);
        for (int b = 0; b < nb; b++) {
            uint64_t i = th->n_put ? (base + (uint64_t)b) % th->n_put : 0;
            if (res[b]) {
                th->errors++;
                if (th->errors < 5)
                    fprintf(stderr, "batch_get %s: %s\n", keys[b], cr_strerror(res[b]));
            } else if (c->verify && (lens[b] != vs ||
                                     cr_bench_pattern_check(bufs[b], 0, vs, seed_of(th->idx, i)) !=
                                         (size_t)-1)) {
                th->verify_fail++;
            }
        }
        return (uint64_t)nb;
    }
    /* exist: half present (keys put in the prefill), half absent */
    for (int b = 0; b < batch; b++) {
        uint64_t i = (call * (uint64_t)batch + (uint64_t)b);
        if (b & 1)
            snprintf(kbuf[b], 96, "%.32s-absent-%d-%" PRIu64, c->key_prefix, th->idx, i);
        else
            key_name(kbuf[b], 96, c, th->idx, th->n_put ? i % th->n_put : 0);
        keys[b] = kbuf[b];
    }
    t0 = cr__now_ns();
    rc = cr_store_batch_is_exist(th->st, keys, (size_t)batch, res);
    cr_bench_lat_add(&th->lat, cr__now_ns() - t0);
    if (rc)
        th->errors += (uint64_t)batch;
    else
        for (int b = 0; b < batch; b++)
            if (res[b] != ((b & 1) ? 0 : 1))
                th->verify_fail++;
    return (uint64_t)batch;
}

/* Warm-up key b of call w of thread t's client v in phase ph (0 put, 1 get). */
#define WARM_KEY_MAX 128
static void warm_key(char *k, size_t cap, const sb_cfg_t *c, int t, int ph, int v, int64_t w,
                     int64_t b)
{
    snprintf(k, cap, "%.40s-warm-%d-%d-%d-%" PRId64 "-%" PRId64, c->key_prefix, t, ph, v, w, b);
}

/* The keys a run removes at its end, CR_STORE_BATCH_MAX at a time. */
typedef struct rm_batch {
    char keys[CR_STORE_BATCH_MAX][WARM_KEY_MAX];
    size_t n;
} rm_batch_t;

static void rm_flush(cr_store_t *st, rm_batch_t *rb)
{
    const char *k[CR_STORE_BATCH_MAX];
    int res[CR_STORE_BATCH_MAX];
    for (size_t i = 0; i < rb->n; i++)
        k[i] = rb->keys[i];
    if (rb->n)
        cr_store_batch_remove(st, k, rb->n, 1, res); /* a miss is fine: evicted */
    rb->n = 0;
}

/* The next key's buffer (WARM_KEY_MAX bytes), the batch removed when full. */
static char *rm_slot(cr_store_t *st, rm_batch_t *rb)
{
    if (rb->n == CR_STORE_BATCH_MAX)
        rm_flush(st, rb);
    return rb->keys[rb->n++];
}

/* --warmup, in the phase's own thread before its clock starts (a thread's
 * first master call opens its own connection): --warmup batch_put +
 * batch_get calls of --batch keys of its own through each client, so the
 * timed calls find the node connections and segment mappings, the
 * reservations and the thread's master connection made. Untimed, not
 * counted; failures are reported. */
static void warm_thread(sb_thread_t *th)
{
    const sb_cfg_t *c = th->cfg;
    size_t nb = (size_t)c->batch, vs = c->value_size;
    int ph = !strcmp(g_phase, "batch_get");
    char(*names)[WARM_KEY_MAX] = calloc(nb, sizeof *names);
    const char **keys = calloc(nb, sizeof *keys);
    const void **cb = calloc(nb, sizeof *cb);
    void **bufs = calloc(nb, sizeof *bufs);
    size_t *lens = calloc(nb, sizeof *lens), *caps = calloc(nb, sizeof *caps);
    int *res = calloc(nb, sizeof *res);
    for (int v = 0; names && keys && cb && bufs && lens && caps && res && v < 2; v++)
        for (int64_t w = 0; th->ab_st[v] && w < c->warmup; w++) {
            for (size_t b = 0; b < nb; b++) {
                warm_key(names[b], sizeof names[b], c, th->idx, ph, v, w, (int64_t)b);
                keys[b] = names[b];
                cb[b] = bufs[b] = th->buf + (b % th->slots) * vs;
                lens[b] = caps[b] = vs;
            }
            int rc = cr_store_batch_put_from(th->ab_st[v], keys, cb, lens, nb, NULL, res);
            if (!rc)
                rc = cr_store_batch_get_into(th->ab_st[v], keys, bufs, caps, nb, lens, res);
            if (rc)
                fprintf(stderr, "crescent-bench store: warm-up: %s\n", cr_strerror(rc));
        }
    free(names);
    free(keys);
    free(cb);
    free(bufs);
    free(lens);
    free(caps);
    free(res);
}

/* --te_ref: one raw TE batch of the store call's shape (the n blocks of
 * value_size from the buffers the store's call k uses) to the target, as
 * the store waits for its own: submit, then cr_xfer_batch_wait (*ns: from
 * submit to the end of the wait, as crescent-bench --wait block times a
 * batch). Returns 0 or the first error. */
static int te_ref_batch(sb_thread_t *th, uint64_t k, int rpc, uint64_t *ns)
{
    const sb_cfg_t *c = th->cfg;
    size_t vs = c->value_size, n = (size_t)c->batch;
    int put = !strcmp(g_phase, "batch_put");
    if (!put && n > th->slots)
        n = th->slots;
    cr_xfer_request_t reqs[CR_STORE_BATCH_MAX];
    for (size_t b = 0; b < n; b++) {
        uint64_t i = k * (uint64_t)c->batch + b; /* the store's key index of this slot */
        if (th->te_off + vs > th->te_len)
            th->te_off = 0;
        reqs[b] = (cr_xfer_request_t){put ? CR_XFER_WRITE : CR_XFER_READ,
                                      th->buf + (i % th->slots) * vs, th->te_seg,
                                      th->te_base + th->te_off, vs};
        th->te_off += vs;
    }
    /* --te_ref_rpc: the names of the call's first keys, made before the clock */
    size_t nr = rpc ? (size_t)c->te_ref_rpc : 0;
    if (nr > n)
        nr = n;
    char kbuf[CR_STORE_BATCH_MAX][96];
    const char *keys[CR_STORE_BATCH_MAX];
    int res[CR_STORE_BATCH_MAX];
    for (size_t b = 0; b < nr; b++)
        keys[b] = key_of(th, k * (uint64_t)c->batch + b, kbuf[b]);
    cr_xfer_batch_t *bt;
    int rc = cr_xfer_batch_alloc(th->te, n, &bt);
    if (rc)
        return rc;
    int crc = rpc && c->te_ref_crc;
    if (crc)
        cr__xfer_batch_want_crc(bt);
    uint64_t t0 = cr__now_ns();
    rc = cr_xfer_batch_submit(bt, reqs, n);
    if (!rc && crc) {
        /* what the transport does not hash, this thread does while the
         * batch runs, as the store's put does with its values */
        uint32_t h = 0;
        for (size_t b = 0; b < n; b++)
            if (!cr__xfer_batch_crc_wanted(bt, b))
                h ^= cr__crc32c(0, reqs[b].local_addr, (size_t)reqs[b].length);
        g_crc_sink ^= h;
    }
    if (!rc)
        rc = cr_xfer_batch_wait(bt, -1);
    for (size_t b = 0; b < n && !rc && crc; b++) {
        uint32_t x;
        if (cr__xfer_batch_crc_wanted(bt, b) && cr__xfer_batch_crc(bt, b, &x))
            rc = -EIO; /* the transport promised a crc and gave none */
    }
    if (!rc && nr)
        rc = cr_store_batch_is_exist(th->st, keys, nr, res);
    *ns = cr__now_ns() - t0;
    for (size_t b = 0; b < n && !rc; b++) {
        cr_xfer_status_t x;
        rc = cr_xfer_batch_status(bt, b, &x);
        if (!rc && x.state != CR_XFER_STATE_COMPLETED)
            rc = x.error ? x.error : -EIO;
    }
    cr_xfer_batch_free(bt);
    return rc;
}

/* The phase with --te_ref: blocks of --ab_block store calls (ab_ns[0]:
 * each call's own time, as its latency, without the key names and --verify
 * patterns made around it) alternate with as many TE batches (ab_ns[1],
 * submit to completion) and, with --te_ref_rpc, as many TE batches each
 * followed by one master call (ab_ns[2]), until --ops of each ran. */
static void te_ref_loop(sb_thread_t *th)
{
    const sb_cfg_t *c = th->cfg;
    int arms = c->te_ref_rpc > 0 ? 3 : 2;
    uint64_t ops = (uint64_t)c->ops, blk = (uint64_t)c->ab_block, done[3] = {0, 0, 0};
    for (uint64_t j = 0; done[0] < ops || done[1] < ops || (arms == 3 && done[2] < ops); j++) {
        int v = (int)((j / blk) % (uint64_t)arms);
        while (done[v] >= ops)
            v = (v + 1) % arms;
        if (v == 0) {
            th->calls++;
            th->keys_done += one_call(th, done[0]);
            th->ab_ns[0] += th->last_ns;
        } else {
            uint64_t ns = 0;
            if (te_ref_batch(th, done[v], v == 2, &ns))
                th->te_errors++;
            th->ab_ns[v] += ns;
        }
        th->ab_calls[v]++;
        done[v]++;
    }
}

/* --te_ref: the reference engine of thread th (its transport: tcp, or
 * tcp,shm for shm), th->buf registered, the target segment open and the
 * largest of its buffers chosen. Returns 0 or prints why and returns -1. */
static int te_ref_open(sb_thread_t *th, const sb_cfg_t *c, size_t buf_len)
{
    const char *proto = c->te_ref_protocol[0] ? c->te_ref_protocol
                                              : !strcmp(c->protocol, "tcp") ? "tcp" : "shm";
    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_XFER_PARAM_METADATA_URI | CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_NICS;
    p.metadata_uri = "p2p";
    p.transports = !strcmp(proto, "tcp") ? "tcp" : "tcp,shm";
    p.nics = c->local_hostname;
    cr_bench_xfer_security(&p, c->cluster_key_file, c->tls_cert, c->tls_key, c->tls_ca);
    int rc = cr_xfer_engine_create(&p, &th->te);
    if (!rc)
        rc = cr_xfer_mem_register(th->te, th->buf, buf_len, "cpu:0");
    if (!rc)
        rc = cr_xfer_segment_open(th->te, c->te_ref, &th->te_seg);
    const char *tr = rc ? NULL : cr_xfer_segment_transport(th->te, th->te_seg);
    if (!rc && (!tr || strcmp(tr, proto))) {
        fprintf(stderr, "crescent-bench store: --te_ref: the engine uses %s, not %s, for '%s'\n",
                tr ? tr : "?", proto, c->te_ref);
        return -1;
    }
    cr_xfer_buffer_info_t bi[64];
    size_t nb = 0;
    if (!rc)
        rc = cr_xfer_segment_buffers(th->te, th->te_seg, bi, 64, &nb);
    if (rc || !nb) {
        fprintf(stderr, "crescent-bench store: --te_ref '%s': %s\n", c->te_ref,
                rc ? cr_strerror(rc) : "no registered buffer");
        return -1;
    }
    size_t best = 0;
    for (size_t i = 1; i < nb && i < 64; i++)
        if (bi[i].len > bi[best].len)
            best = i;
    th->te_base = bi[best].addr;
    th->te_len = bi[best].len;
    if (th->te_len < (uint64_t)c->batch * c->value_size) {
        fprintf(stderr, "crescent-bench store: --te_ref: target buffer too small for a batch\n");
        return -1;
    }
    return 0;
}

static void *thread_main(void *a)
{
    sb_thread_t *th = a;
    if (th->cfg->warmup > 0 && !strncmp(g_phase, "batch_", 6))
        warm_thread(th);
    pthread_barrier_wait(&g_bar); /* warmed up: the CPU counters are read */
    pthread_barrier_wait(&g_bar); /* phase start */
    if (th->te) {
        te_ref_loop(th);
        pthread_barrier_wait(&g_bar); /* phase end */
        return NULL;
    }
    for (uint64_t call = 0; call < (uint64_t)th->cfg->ops; call++) {
        /* --ab_env: blocks of calls alternate between the clients, so both
         * see the same moments of the machine */
        int v = th->ab_st[1] ? (int)((call / (uint64_t)th->cfg->ab_block) & 1) : 0;
        if (th->ab_st[1])
            th->st = th->ab_st[v];
        uint64_t t = cr__now_ns();
        th->calls++;
        th->keys_done += one_call(th, call);
        th->ab_ns[v] += cr__now_ns() - t;
        th->ab_calls[v]++;
    }
    pthread_barrier_wait(&g_bar); /* phase end */
    return NULL;
}

/* --processes: set in a child; the parent starts each phase and gets its
 * results through these pipes */
static int g_ready_wr = -1, g_go_rd = -1, g_res_wr = -1;

typedef struct sb_record {
    uint32_t magic;
    char phase[16];
    uint64_t calls, keys, errors, vfail, t0, t1, n_samples;
} sb_record_t;
#define SB_MAGIC 0x53425243u

static int write_all(int fd, const void *b, size_t n)
{
    const char *p = b;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *b, size_t n)
{
    char *p = b;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Busy CPU time of the whole host so far, in seconds (/proc/stat: every
 * column but idle and iowait), or -1. Sampled around a phase it tells what
 * the phase cost in CPU on all processes (master, nodes, this client): on a
 * machine with nothing else running a steadier figure than throughput. */
static double host_busy_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    unsigned long long v[10] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
    fclose(f);
    if (n < 8)
        return -1;
    /* guest time is already counted in user time */
    unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    long hz = sysconf(_SC_CLK_TCK);
    return (double)busy / (double)(hz > 0 ? hz : 100);
}

static double g_host_cpu_s = -1; /* busy host CPU seconds of the phase being printed */
/* user+sys CPU seconds of this process (client library, its TE threads) in
 * the phase: unlike host_cpu_s, other load on the machine barely moves it
 * (-1 when --processes: the children's are not collected) */
static double g_self_cpu_s = -1;

static double self_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru))
        return -1;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* speculative gets kept / dropped in the phase (cr_store_location_cache_stats) */
static uint64_t g_spec_kept, g_spec_dropped;

static void spec_stats(const sb_thread_t *th, int n, uint64_t *kept, uint64_t *dropped)
{
    *kept = *dropped = 0;
    for (int i = 0; i < n; i++) {
        uint64_t k, d;
        cr_store_location_cache_stats(th[i].st, &k, &d);
        *kept += k;
        *dropped += d;
    }
}

static int print_result(const char *phase, int nthreads, const sb_cfg_t *c, uint64_t calls,
                        uint64_t keys, uint64_t errors, uint64_t vfail, uint64_t ns,
                        cr_bench_lat_t *all)
{
    double secs = (double)ns / 1e9;
    if (secs <= 0)
        secs = 1e-9;
    int is_exist = !strcmp(phase, "exist");
    uint64_t bytes = is_exist ? 0 : (keys - (errors < keys ? errors : keys)) * c->value_size;
    printf("RESULT bench=store op=%s value_size=%" PRIu64 " threads=%d processes=%d batch=%d "
           "replica_num=%d calls=%" PRIu64 " keys=%" PRIu64 " seconds=%.3f gbps=%.3f "
           "keys_per_s=%.0f calls_per_s=%.0f p50_us=%.1f p99_us=%.1f p999_us=%.1f "
           "errors=%" PRIu64 " verify=%s host_cpu_s=%.2f cpu_us_per_key=%.1f "
           "client_cpu_us_per_key=%.2f spec_kept=%" PRIu64 " spec_dropped=%" PRIu64 "\n",
           phase, c->value_size, nthreads, (int)c->processes,
           (!strncmp(phase, "batch", 5) || is_exist) ? (int)c->batch : 1, (int)c->replica_num,
           calls, keys, secs, (double)bytes / secs / 1e9, (double)keys / secs,
           (double)calls / secs, cr_bench_lat_pct_us(all, 50), cr_bench_lat_pct_us(all, 99),
           cr_bench_lat_pct_us(all, 99.9), errors,
           (c->verify || is_exist) ? (vfail ? "FAILED" : "ok") : "off", g_host_cpu_s,
           g_host_cpu_s >= 0 && keys ? g_host_cpu_s * 1e6 / (double)keys : -1.0,
           g_self_cpu_s >= 0 && keys ? g_self_cpu_s * 1e6 / (double)keys : -1.0, g_spec_kept,
           g_spec_dropped);
    fflush(stdout);
    return (int)(errors + vfail ? 1 : 0);
}

static int run_phase(const char *phase, sb_thread_t *th, int n, const sb_cfg_t *c)
{
    g_phase = phase;
    for (int i = 0; i < n; i++) {
        th[i].calls = th[i].keys_done = th[i].errors = th[i].verify_fail = 0;
        memset(th[i].ab_ns, 0, sizeof th[i].ab_ns);
        memset(th[i].ab_calls, 0, sizeof th[i].ab_calls);
        th[i].te_errors = 0;
        th[i].lat.n_seen = 0;
        if (!strcmp(phase, "batch_put"))
            ktab_fill(&th[i], th[i].n_put + (uint64_t)c->ops * (uint64_t)c->batch);
        else if (!strcmp(phase, "batch_get"))
            ktab_fill(&th[i], th[i].n_put);
    }
    pthread_barrier_init(&g_bar, NULL, (unsigned)n + 1);
    for (int i = 0; i < n; i++)
        pthread_create(&th[i].tid, NULL, thread_main, &th[i]);
    pthread_barrier_wait(&g_bar); /* every thread warmed up (--warmup) */
    if (g_ready_wr >= 0) { /* child: wait for the parent's start signal */
        char ch = 'R';
        if (write_all(g_ready_wr, &ch, 1) || read_all(g_go_rd, &ch, 1))
            _exit(3);
    }
    double b0 = host_busy_s(), s0 = self_cpu_s();
    uint64_t k0 = 0, d0 = 0;
    spec_stats(th, n, &k0, &d0);
    pthread_barrier_wait(&g_bar);
    uint64_t t0 = cr__now_ns();
    pthread_barrier_wait(&g_bar);
    uint64_t t1 = cr__now_ns();
    double b1 = host_busy_s(), s1 = self_cpu_s();
    g_host_cpu_s = b0 >= 0 && b1 >= b0 ? b1 - b0 : -1;
    g_self_cpu_s = s0 >= 0 && s1 >= s0 ? s1 - s0 : -1;
    for (int i = 0; i < n; i++)
        pthread_join(th[i].tid, NULL);
    pthread_barrier_destroy(&g_bar);
    spec_stats(th, n, &g_spec_kept, &g_spec_dropped);
    g_spec_kept -= k0;
    g_spec_dropped -= d0;

    cr_bench_lat_t all;
    if (cr_bench_lat_init(&all, 7))
        return -ENOMEM;
    uint64_t calls = 0, keys = 0, errors = 0, vfail = 0;
    for (int i = 0; i < n; i++) {
        calls += th[i].calls;
        keys += th[i].keys_done;
        errors += th[i].errors;
        vfail += th[i].verify_fail;
        cr_bench_lat_merge(&all, &th[i].lat);
    }
    int rc;
    if (g_res_wr >= 0) { /* child: the parent prints */
        sb_record_t r = {.magic = SB_MAGIC, .calls = calls, .keys = keys, .errors = errors,
                         .vfail = vfail, .t0 = t0, .t1 = t1};
        snprintf(r.phase, sizeof r.phase, "%s", phase);
        r.n_samples = all.n_seen < CR_BENCH_RESERVOIR ? all.n_seen : CR_BENCH_RESERVOIR;
        if (write_all(g_res_wr, &r, sizeof r) ||
            write_all(g_res_wr, all.samples_ns, r.n_samples * sizeof *all.samples_ns))
            _exit(3);
        rc = (int)(errors + vfail ? 1 : 0);
    } else {
        if (th[0].te) {
            /* the store's own time, not the TE batches between its calls;
             * the CPU figures would count both: not reported */
            g_host_cpu_s = g_self_cpu_s = -1;
            rc = print_result(phase, n, c, calls, keys, errors, vfail, th[0].ab_ns[0], &all);
            double a = th[0].ab_calls[0] ? (double)th[0].ab_ns[0] / 1e3 / (double)th[0].ab_calls[0]
                                         : -1;
            double b = th[0].ab_calls[1] ? (double)th[0].ab_ns[1] / 1e3 / (double)th[0].ab_calls[1]
                                         : -1;
            printf("TEREF op=%s block=%d store_calls=%" PRIu64 " te_calls=%" PRIu64
                   " te_errors=%" PRIu64 " store_us_per_call=%.1f te_us_per_call=%.1f"
                   " store_over_te=%.3f\n",
                   phase, (int)c->ab_block, th[0].ab_calls[0], th[0].ab_calls[1],
                   th[0].te_errors, a, b, a > 0 ? b / a : -1.0);
            if (c->te_ref_rpc > 0) {
                double r = th[0].ab_calls[2]
                               ? (double)th[0].ab_ns[2] / 1e3 / (double)th[0].ab_calls[2]
                               : -1;
                printf("TERPC op=%s keys=%d crc=%d calls=%" PRIu64 " te_rpc_us_per_call=%.1f"
                       " te_rpc_over_te=%.3f store_over_te_rpc=%.3f\n",
                       phase, (int)c->te_ref_rpc, c->te_ref_crc, th[0].ab_calls[2], r,
                       r > 0 ? b / r : -1.0,
                       a > 0 ? r / a : -1.0);
            }
            fflush(stdout);
            if (th[0].te_errors)
                rc = 1;
        } else {
            rc = print_result(phase, n, c, calls, keys, errors, vfail, t1 - t0, &all);
        }
        if (th[0].ab_st[1]) {
            uint64_t ns[2] = {0, 0}, nc[2] = {0, 0};
            for (int i = 0; i < n; i++)
                for (int v = 0; v < 2; v++) {
                    ns[v] += th[i].ab_ns[v];
                    nc[v] += th[i].ab_calls[v];
                }
            double a = nc[0] ? (double)ns[0] / 1e3 / (double)nc[0] : -1;
            double b = nc[1] ? (double)ns[1] / 1e3 / (double)nc[1] : -1;
            printf("AB op=%s env_b=%s block=%d a_calls=%" PRIu64 " b_calls=%" PRIu64
                   " a_us_per_call=%.1f b_us_per_call=%.1f b_over_a=%.3f\n",
                   phase, c->ab_env, (int)c->ab_block, nc[0], nc[1], a, b, a > 0 ? b / a : -1.0);
            fflush(stdout);
        }
    }
    cr_bench_lat_free(&all);
    return rc;
}

static int store_run(sb_cfg_t *cp);

/* Parent of --processes children: starts every phase in all of them at
 * once, merges their records, prints one RESULT per phase. */
static int run_processes(sb_cfg_t *c)
{
    int P = (int)c->processes;
    int phases = (!strcmp(c->op, "putget") || !strcmp(c->op, "batch_putget")) ? 2 : 1;
    int ready[2], go[2];
    int *res = calloc((size_t)P, sizeof *res);
    pid_t *pids = calloc((size_t)P, sizeof *pids);
    if (!res || !pids || pipe(ready) || pipe(go)) {
        free(res);
        free(pids);
        return 1;
    }
    char base[CR__CFG_STR_MAX];
    snprintf(base, sizeof base, "%s", c->key_prefix);
    fflush(stdout);
    for (int i = 0; i < P; i++) {
        int rp[2];
        if (pipe(rp))
            return 1;
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0) {
            close(ready[0]);
            close(go[1]);
            close(rp[0]);
            for (int j = 0; j < i; j++)
                close(res[j]);
            g_ready_wr = ready[1];
            g_go_rd = go[0];
            g_res_wr = rp[1];
            snprintf(c->key_prefix, sizeof c->key_prefix, "%.40s-p%d", base, i);
            int rc = store_run(c);
            if (rc == 2 || rc == 3) { /* setup failed before the first phase */
                char ch = 'F';
                write_all(g_ready_wr, &ch, 1);
            }
            _exit(rc);
        }
        close(rp[1]);
        res[i] = rp[0];
        pids[i] = pid;
    }
    close(ready[1]);
    close(go[0]);
    int ret = 0;
    for (int ph = 0; ph < phases && !ret; ph++) {
        int failed = 0;
        for (int i = 0; i < P; i++) {
            char ch;
            if (read_all(ready[0], &ch, 1) || ch != 'R')
                failed = 1;
        }
        if (failed) {
            fprintf(stderr, "crescent-bench store: a child process failed to start\n");
            ret = 1;
            break;
        }
        char gos[256];
        memset(gos, 'G', sizeof gos);
        double b0 = host_busy_s();
        for (int left = P; left > 0; left -= 256)
            write_all(go[1], gos, (size_t)(left < 256 ? left : 256));
        cr_bench_lat_t all;
        if (cr_bench_lat_init(&all, 11)) {
            ret = 1;
            break;
        }
        uint64_t calls = 0, keys = 0, errors = 0, vfail = 0, t0 = UINT64_MAX, t1 = 0;
        char phase[16] = "";
        for (int i = 0; i < P && !ret; i++) {
            sb_record_t r;
            if (read_all(res[i], &r, sizeof r) || r.magic != SB_MAGIC ||
                r.n_samples > CR_BENCH_RESERVOIR) {
                fprintf(stderr, "crescent-bench store: child %d sent no result\n", i);
                ret = 1;
                break;
            }
            uint64_t *smp = malloc(r.n_samples * sizeof *smp + 1);
            if (!smp || read_all(res[i], smp, r.n_samples * sizeof *smp)) {
                free(smp);
                ret = 1;
                break;
            }
            for (uint64_t k = 0; k < r.n_samples; k++)
                cr_bench_lat_add(&all, smp[k]);
            free(smp);
            calls += r.calls;
            keys += r.keys;
            errors += r.errors;
            vfail += r.vfail;
            t0 = r.t0 < t0 ? r.t0 : t0;
            t1 = r.t1 > t1 ? r.t1 : t1;
            memcpy(phase, r.phase, sizeof phase);
            phase[sizeof phase - 1] = 0;
        }
        double b1 = host_busy_s();
        g_host_cpu_s = b0 >= 0 && b1 >= b0 ? b1 - b0 : -1;
        if (!ret)
            ret |= print_result(phase, P * (int)c->threads, c, calls, keys, errors, vfail,
                                t1 - t0, &all);
        cr_bench_lat_free(&all);
    }
    close(go[1]); /* children blocked on a start signal see EOF */
    for (int i = 0; i < P; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            ret = 1;
        close(res[i]);
    }
    close(ready[0]);
    free(res);
    free(pids);
    return ret;
}

int cr_bench_store_main(int argc, char **argv)
{
    static sb_cfg_t c; /* big (strings); children of --processes use it too */
    char err[256] = "";
    int rc = cr__cfg_parse(sb_opts, sizeof sb_opts / sizeof sb_opts[0], &c, argc, argv, 1,
                           "CRESCENT_BENCH_", NULL, 0, NULL, err, sizeof err);
    if (rc == 1) {
        cr__cfg_usage(stdout, "crescent-bench store", "store put/get throughput and latency",
                      sb_opts, sizeof sb_opts / sizeof sb_opts[0]);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "crescent-bench store: %s\n", err);
        return 2;
    }
    const char *ops[] = {"put", "get", "putget", "batch_put", "batch_get", "batch_putget", "exist"};
    int op_ok = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        op_ok |= !strcmp(c.op, ops[i]);
    if (!op_ok || c.value_size == 0 || c.value_size > (1ull << 32) || c.threads < 1 ||
        c.threads > 256 || c.processes < 1 || c.processes > 64 || c.ops < 1 || c.keys < 1 || c.batch < 1 ||
        c.batch > CR_STORE_BATCH_MAX || c.replica_num < 1 || c.replica_num > CR_STORE_REPLICA_MAX) {
        fprintf(stderr, "crescent-bench store: bad --op/--value_size/--threads/--processes/"
                        "--ops/--keys/--batch/--replica_num (see --help)\n");
        return 2;
    }
    if (c.warmup < 0 || c.warmup > 1000) {
        fprintf(stderr, "crescent-bench store: --warmup wants 0..1000\n");
        return 2;
    }
    if (c.ab_env[0] && (!strchr(c.ab_env, '=') || c.ab_env[0] == '=' || c.processes > 1 ||
                        c.ab_block < 1)) {
        fprintf(stderr, "crescent-bench store: --ab_env wants VAR=VALUE, one process and "
                        "--ab_block >= 1\n");
        return 2;
    }
    if (c.te_ref[0] && (strncmp(c.op, "batch_", 6) || c.threads != 1 || c.processes != 1 ||
                        c.ab_env[0] || c.ab_block < 1 ||
                        (c.te_ref_protocol[0] && strcmp(c.te_ref_protocol, "tcp") &&
                         strcmp(c.te_ref_protocol, "shm")))) {
        fprintf(stderr, "crescent-bench store: --te_ref wants a batch op, one thread, one "
                        "process, no --ab_env, --ab_block >= 1 and --te_ref_protocol tcp or shm\n");
        return 2;
    }
    if (c.te_ref_crc && !c.te_ref_rpc) {
        fprintf(stderr, "crescent-bench store: --te_ref_crc wants --te_ref_rpc\n");
        return 2;
    }
    if (c.te_ref_rpc && (!c.te_ref[0] || c.te_ref_rpc < 0 || c.te_ref_rpc > c.batch ||
                         c.te_ref_rpc > CR_STORE_BATCH_MAX)) {
        fprintf(stderr, "crescent-bench store: --te_ref_rpc wants --te_ref and 0..--batch keys\n");
        return 2;
    }
    if (!c.key_prefix[0])
        snprintf(c.key_prefix, sizeof c.key_prefix, "bench-%d", (int)getpid());
    if (c.processes > 1)
        return run_processes(&c);
    return store_run(&c);
}

/* One process: its client, its threads, the phases. Returns 0, 1 (errors
 * in a phase) or 2/3 (setup failed). */
static int store_run(sb_cfg_t *cp)
{
    sb_cfg_t c = *cp;
    int rc;
    int batched = !strncmp(c.op, "batch", 5);
    /* slots per thread: one value per key for get phases (bounded to 1 GiB
     * per thread), the batch size for batch ops */
    uint64_t keys_needed = (uint64_t)c.keys;
    if (!strcmp(c.op, "putget") || !strcmp(c.op, "put"))
        keys_needed = (uint64_t)c.ops;
    if (batched) /* --slots > --batch: every key its own buffer (a KV-cache save/load) */
        keys_needed = c.slots > c.batch ? (uint64_t)c.slots : (uint64_t)c.batch;
    uint64_t slots = keys_needed;
    if (slots * c.value_size > (1ull << 30))
        slots = (1ull << 30) / c.value_size;
    if (slots < 1)
        slots = 1;
    if (c.slots > 0 && (uint64_t)c.slots < slots)
        slots = (uint64_t)c.slots;
    if (batched && slots < (uint64_t)c.batch) {
        fprintf(stderr, "crescent-bench store: --batch x --value_size over 1 GiB per thread\n");
        return 2;
    }

    cr_store_params_t p = {0};
    p.field_mask = CR_STORE_PARAM_LOCAL_HOSTNAME | CR_STORE_PARAM_METADATA_URI |
                   CR_STORE_PARAM_MASTER_ADDR | CR_STORE_PARAM_GLOBAL_SEGMENT_SIZE |
                   CR_STORE_PARAM_PROTOCOL;
    p.local_hostname = c.local_hostname;
    p.metadata_uri = c.metadata_server;
    p.master_addr = c.master_server_address;
    p.global_segment_size = c.global_segment_size;
    p.protocol = c.protocol;
    if (c.cluster_key_file[0]) {
        p.field_mask |= CR_STORE_PARAM_CLUSTER_KEY_FILE;
        p.cluster_key_file = c.cluster_key_file;
    }
    if (c.tls_cert[0] || c.tls_key[0] || c.tls_ca[0]) {
        p.field_mask |= CR_STORE_PARAM_TLS;
        p.tls_cert = c.tls_cert;
        p.tls_key = c.tls_key;
        p.tls_ca = c.tls_ca;
    }
    cr_store_t *st = NULL, *st_b = NULL;
    rc = cr_store_create(&p, &st);
    if (rc) {
        fprintf(stderr, "crescent-bench store: client: %s (%d)\n", cr_strerror(rc), rc);
        return 3;
    }
    if (c.ab_env[0]) { /* the B client: made with VAR=VALUE set, then the old value back */
        char var[CR__CFG_STR_MAX];
        snprintf(var, sizeof var, "%s", c.ab_env);
        char *eq = strchr(var, '=');
        *eq = 0;
        const char *old = getenv(var);
        char *saved = old ? strdup(old) : NULL;
        setenv(var, eq + 1, 1);
        rc = cr_store_create(&p, &st_b);
        if (saved)
            setenv(var, saved, 1);
        else
            unsetenv(var);
        free(saved);
        if (rc) {
            fprintf(stderr, "crescent-bench store: B client: %s (%d)\n", cr_strerror(rc), rc);
            cr_store_destroy(st);
            return 3;
        }
    }
    int n = (int)c.threads;
    sb_thread_t *th = calloc((size_t)n, sizeof *th);
    int ret = 3;
    if (!th)
        goto out;
    for (int i = 0; i < n; i++) {
        th[i].idx = i;
        th[i].cfg = &c;
        th[i].st = st;
        th[i].ab_st[0] = st;
        th[i].ab_st[1] = st_b;
        th[i].slots = (size_t)slots;
        th[i].te_seg = -1;
        th[i].buf = cr_bench_alloc_prefaulted((size_t)(slots * c.value_size));
        if (!th[i].buf || cr_bench_lat_init(&th[i].lat, (uint64_t)i + 1) ||
            cr_store_register_buffer(st, th[i].buf, (size_t)(slots * c.value_size)) ||
            (st_b && cr_store_register_buffer(st_b, th[i].buf, (size_t)(slots * c.value_size)))) {
            fprintf(stderr, "crescent-bench store: cannot allocate/register buffers\n");
            goto out;
        }
        if (!c.verify)
            memset(th[i].buf, 0x5a, (size_t)(slots * c.value_size));
        if (c.te_ref[0] && te_ref_open(&th[i], &c, (size_t)(slots * c.value_size)))
            goto out;
    }

    ret = 0;
    if (!strcmp(c.op, "put") || !strcmp(c.op, "putget") || !strcmp(c.op, "batch_put") ||
        !strcmp(c.op, "batch_putget")) {
        ret |= run_phase(batched ? "batch_put" : "put", th, n, &c);
    } else {
        /* prefill (untimed, not reported) */
        sb_cfg_t pc = c;
        pc.ops = c.keys;
        pc.verify = 1;
        for (int i = 0; i < n; i++)
            th[i].cfg = &pc;
        g_phase = "put";
        for (int i = 0; i < n; i++)
            for (int64_t k = 0; k < c.keys; k++)
                one_call(&th[i], (uint64_t)k);
        for (int i = 0; i < n; i++) {
            th[i].cfg = &c;
            if (th[i].errors)
                fprintf(stderr, "crescent-bench store: %" PRIu64 " prefill puts failed\n",
                        th[i].errors);
        }
        if (!strcmp(c.op, "get") || !strcmp(c.op, "batch_get"))
            ret |= run_phase(batched ? "batch_get" : "get", th, n, &c);
        else
            ret |= run_phase("exist", th, n, &c);
    }
    if (!strcmp(c.op, "putget") || !strcmp(c.op, "batch_putget")) {
        /* gets over the keys just put; for put phases each slot was rewritten
         * per key, so only the last `slots` keys match their slot: verify
         * reads against the pattern of their own key instead */
        ret |= run_phase(batched ? "batch_get" : "get", th, n, &c);
    }
    if (!c.keep) {
        /* batches of removes, one master round trip each */
        rm_batch_t *rb = calloc(1, sizeof *rb);
        for (int i = 0; rb && i < n; i++)
            for (uint64_t k = 0; k < th[i].n_put; k++)
                key_name(rm_slot(st, rb), WARM_KEY_MAX, &c, i, k);
        for (int i = 0; rb && batched && i < n; i++)
            for (int ph = 0; ph < 2; ph++)
                for (int v = 0; v < (st_b ? 2 : 1); v++)
                    for (int64_t w = 0; w < c.warmup; w++)
                        for (int64_t b = 0; b < c.batch; b++)
                            warm_key(rm_slot(st, rb), WARM_KEY_MAX, &c, i, ph, v, w, b);
        if (rb)
            rm_flush(st, rb);
        free(rb);
    }
out:
    if (th) {
        for (int i = 0; i < n; i++) {
            if (th[i].te) {
                if (th[i].te_seg >= 0)
                    cr_xfer_segment_close(th[i].te, th[i].te_seg);
                cr_xfer_engine_destroy(th[i].te); /* its registrations go with it */
            }
            if (th[i].buf) {
                cr_store_unregister_buffer(st, th[i].buf);
                if (st_b)
                    cr_store_unregister_buffer(st_b, th[i].buf);
                cr_bench_free(th[i].buf, (size_t)(slots * c.value_size));
            }
            cr_bench_lat_free(&th[i].lat);
            free(th[i].ktab);
        }
        free(th);
    }
    cr_store_destroy(st_b);
    cr_store_destroy(st);
    return ret;
}
