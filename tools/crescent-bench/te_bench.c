/* crescent-bench te: Transfer Engine throughput and latency, on the public
 * API only (include/crescent/transfer.h).
 *
 *   target:    crescent-bench --mode target [--protocol tcp|shm|auto] [--port P]
 *              [--metadata URI] [--buffer_size 1GiB]
 *   initiator: crescent-bench --mode initiator --segment NAME --operation read|write
 *              --block_size 4MiB --batch_size 8 --threads 2 --duration 10 [--check]
 *              [--objects N [--passes P]]
 *
 * The target registers one buffer of buffer_size bytes, pre-faulted and
 * filled with a known pattern, prints
 *   "crescent-bench: target ready segment=<name> port=<port>"
 * and serves until SIGINT/SIGTERM (or --target_seconds). The initiator splits
 * the target buffer into one region per thread; each thread submits batches
 * of batch_size requests of block_size bytes at consecutive offsets of its
 * region (wrapping), from its own registered local slots (with --objects N:
 * exactly N blocks per thread, each batch from its own distinct local blocks,
 * as a KV-cache save or load moves N distinct pages; --passes P moves them P
 * times over in one timed run). With --check every
 * byte read is compared with the target's pattern, and every write (of
 * content unique to its batch) is read back and compared, then the target's
 * pattern is restored. A write run WITHOUT --check leaves the initiator's
 * bytes in the target, so a later --check read of that target fails.
 *
 * Output: one machine-readable line
 *   RESULT op=read protocol=tcp transport=tcp block=... batch=... threads=...
 *          seconds=... bytes=... requests=... batches=... gbps=... gibps=...
 *          req_per_s=... batch_p50_us=... batch_p99_us=... p50_us=... p99_us=...
 *          cpu_s=... vcsw=... errors=0 check=ok|off|FAILED
 * cpu_s is the initiator's user+sys CPU seconds (all threads) in the measured
 * window, vcsw its voluntary context switches (all threads: sleeps and
 * wakeups, which load on the machine barely changes).
 * gbps is 1e9 bytes/s (as Mooncake's transfer_engine_bench reports), gibps
 * 2^30. Request latency is from the batch's submit to the moment the poller
 * saw that request complete (--wait poll, polling every --poll_us); with
 * --wait block the batch is waited on as a whole and only batch latency is
 * meaningful. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "common/clock.h"
#include "common/auth/auth_opts.h"
#include "common/config.h"
#include "common/file.h"
#include "crescent/transfer.h"

#define TARGET_SEED 0x7461726765740001ull /* "target" */
#define LOCAL_SEED 0x6c6f63616c000002ull  /* "local" */

typedef struct te_cfg {
    char mode[CR__CFG_STR_MAX];
    char operation[CR__CFG_STR_MAX];
    char protocol[CR__CFG_STR_MAX];
    char metadata[CR__CFG_STR_MAX];
    char segment[CR__CFG_STR_MAX];
    char local_name[CR__CFG_STR_MAX];
    char nics[CR__CFG_STR_MAX];
    char wait[CR__CFG_STR_MAX];
    char ready_file[CR__CFG_STR_MAX];
    char target_memory[CR__CFG_STR_MAX];
    uint64_t block_size;
    uint64_t buffer_size;
    uint64_t slice_size;
    int64_t batch_size;
    int64_t threads;
    double duration;
    double target_seconds;
    int64_t port;
    int64_t io_threads;
    int64_t conns_per_path;
    int64_t timeout_ms;
    int64_t poll_us;
    uint64_t pattern_seed;
    int64_t objects;
    int64_t passes;
    double open_seconds;
    int check;
    CR__AUTH_CFG_FIELDS;
} te_cfg_t;

#define OPT(n, d, h, t) {#n, d, h, t, offsetof(te_cfg_t, n)}
static const cr__cfg_opt_t opts[] = {
    OPT(mode, "initiator", "target (serves memory) or initiator (drives transfers)",
        CR__CFG_STR),
    OPT(operation, "read", "read or write (initiator)", CR__CFG_STR),
    OPT(protocol, "tcp", "tcp, shm or auto (tcp,shm: shm for same-host peers)", CR__CFG_STR),
    OPT(metadata, "p2p", "metadata URI: p2p, http://host:port/metadata, etcd://host:port",
        CR__CFG_STR),
    OPT(segment, "", "target segment name (initiator; printed by the target)", CR__CFG_STR),
    OPT(local_name, "", "this engine's segment name (default host:port)", CR__CFG_STR),
    OPT(nics, "127.0.0.1", "comma-separated local NIC addresses", CR__CFG_STR),
    OPT(port, "0", "TCP port of this engine (0 = ephemeral)", CR__CFG_INT),
    OPT(block_size, "64KiB", "bytes per request", CR__CFG_SIZE),
    OPT(batch_size, "128", "requests per batch", CR__CFG_INT),
    OPT(threads, "2", "initiator threads, each with its own batches and target region",
        CR__CFG_INT),
    OPT(duration, "10", "seconds to run (initiator)", CR__CFG_DOUBLE),
    OPT(target_seconds, "0", "target exits after this many seconds (0 = until SIGINT/SIGTERM)",
        CR__CFG_DOUBLE),
    OPT(buffer_size, "256MiB", "target buffer size (registered, pre-faulted, patterned)",
        CR__CFG_SIZE),
    OPT(target_memory, "auto",
        "target buffer: shared (cr_xfer_mem_alloc_shared, as the store's segments: same-host "
        "peers map it), anon (2 MiB huge pages, best for tcp) or auto (anon for --protocol "
        "tcp, else shared)",
        CR__CFG_STR),
    OPT(slice_size, "0", "tcp slice size in bytes (0 = engine default)", CR__CFG_SIZE),
    OPT(io_threads, "0", "engine I/O threads (0 = engine default)", CR__CFG_INT),
    OPT(conns_per_path, "0", "TCP connections per path (0 = engine default)", CR__CFG_INT),
    OPT(timeout_ms, "0", "per-request timeout in ms (0 = engine default)", CR__CFG_INT),
    OPT(check, "false", "verify every byte (read: against the target pattern; write: read back)",
        CR__CFG_BOOL),
    OPT(wait, "poll",
        "poll (per-request latency), block (cr_xfer_batch_wait) or sync (cr_xfer_transfer_sync; "
        "a lone request may run in the calling thread)",
        CR__CFG_STR),
    OPT(poll_us, "20", "sleep between status polls in us (0 = yield)", CR__CFG_INT),
    OPT(ready_file, "", "target: write the segment name to this file when ready", CR__CFG_STR),
    OPT(objects, "0", "initiator: move exactly this many blocks per thread (a multiple of "
        "--batch_size), each batch from its own part of a local buffer of that many distinct "
        "blocks, then stop (--duration is only an upper bound); 0 = run for --duration reusing "
        "one batch of local slots", CR__CFG_INT),
    OPT(passes, "1", "initiator with --objects: move the objects this many times in one timed "
        "run, each pass from the same local blocks (a longer measurement of the same shape)",
        CR__CFG_INT),
    OPT(open_seconds, "15", "initiator: keep retrying to open the segment this long (target "
        "may still be starting)", CR__CFG_DOUBLE),
    OPT(pattern_seed, "0", "seed of the target's data pattern (0 = built-in; tests use a "
        "different seed on one side to prove --check detects corruption)", CR__CFG_SIZE),
    CR__AUTH_CFG_OPTS(te_cfg_t),
};
#define N_OPTS (sizeof opts / sizeof opts[0])

static atomic_int stop_flag;
static uint64_t target_seed = TARGET_SEED;

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_flag, 1);
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static int make_engine(const te_cfg_t *c, cr_xfer_engine_t **out)
{
    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    const char *transports = !strcmp(c->protocol, "tcp") ? "tcp" : "tcp,shm";
    p.field_mask = CR_XFER_PARAM_METADATA_URI | CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_NICS |
                   CR_XFER_PARAM_PORT;
    p.metadata_uri = c->metadata;
    p.transports = transports;
    p.nics = c->nics;
    p.port = (uint16_t)c->port;
    if (c->local_name[0]) {
        p.field_mask |= CR_XFER_PARAM_LOCAL_NAME;
        p.local_name = c->local_name;
    }
    if (c->slice_size) {
        p.field_mask |= CR_XFER_PARAM_SLICE_SIZE;
        p.slice_size = c->slice_size;
    }
    if (c->io_threads) {
        p.field_mask |= CR_XFER_PARAM_IO_THREADS;
        p.io_threads = (unsigned)c->io_threads;
    }
    if (c->conns_per_path) {
        p.field_mask |= CR_XFER_PARAM_CONNS_PER_PATH;
        p.conns_per_path = (unsigned)c->conns_per_path;
    }
    if (c->timeout_ms) {
        p.field_mask |= CR_XFER_PARAM_TIMEOUT_MS;
        p.timeout_ms = (unsigned)c->timeout_ms;
    }
    cr_bench_xfer_security(&p, c->cluster_key_file, c->tls_cert, c->tls_key, c->tls_ca);
    int rc = cr_xfer_engine_create(&p, out);
    if (rc)
        fprintf(stderr, "crescent-bench: engine create failed: %s (%d)\n", cr_strerror(rc), rc);
    return rc;
}

/* ---- target ------------------------------------------------------------- */

static int run_target(const te_cfg_t *c)
{
    cr_xfer_engine_t *e;
    if (make_engine(c, &e))
        return 1;
    size_t len = c->buffer_size;
    int shared = !strcmp(c->target_memory, "shared") ||
                 (!strcmp(c->target_memory, "auto") && strcmp(c->protocol, "tcp") != 0);
    void *buf = shared ? cr_xfer_mem_alloc_shared(len) : cr_bench_alloc_prefaulted(len);
    if (!buf) {
        fprintf(stderr, "crescent-bench: cannot allocate %zu bytes\n", len);
        cr_xfer_engine_destroy(e);
        return 1;
    }
    cr_bench_pattern_fill(buf, 0, len, target_seed);
    int rc = cr_xfer_mem_register(e, buf, len, "cpu:0");
    if (rc) {
        fprintf(stderr, "crescent-bench: register failed: %s\n", cr_strerror(rc));
        if (shared)
            cr_xfer_mem_free_shared(buf);
        else
            cr_bench_free(buf, len);
        cr_xfer_engine_destroy(e);
        return 1;
    }
    printf("crescent-bench: target ready segment=%s port=%u buffer=%zu\n",
           cr_xfer_engine_name(e), cr_xfer_engine_port(e), len);
    fflush(stdout);
    if (c->ready_file[0]) {
        char line[CR__CFG_STR_MAX + 2];
        int n = snprintf(line, sizeof line, "%s\n", cr_xfer_engine_name(e));
        if (cr__file_write_atomic(c->ready_file, line, (size_t)n, 0, 0644))
            fprintf(stderr, "crescent-bench: cannot write %s\n", c->ready_file);
    }
    uint64_t end = c->target_seconds > 0 ? cr__now_ns() + (uint64_t)(c->target_seconds * 1e9) : 0;
    while (!atomic_load(&stop_flag) && (!end || cr__now_ns() < end))
        sleep_us(50000);
    cr_xfer_mem_unregister(e, buf);
    cr_xfer_engine_destroy(e);
    if (shared)
        cr_xfer_mem_free_shared(buf);
    else
        cr_bench_free(buf, len);
    fprintf(stderr, "crescent-bench: target stopped\n");
    return 0;
}

/* ---- initiator ---------------------------------------------------------- */

typedef struct worker {
    const te_cfg_t *c;
    cr_xfer_engine_t *e;
    cr_xfer_segment_t seg;
    int id;
    cr_xfer_opcode_t op;
    char *slots;  /* batch_size * block_size (--objects: objects * block_size), registered */
    char *verify; /* same size, registered; write --check only */
    uint64_t target_base, region_off, region_blocks, cursor;
    uint64_t target_buf_addr; /* start of the target buffer (pattern offset 0) */
    /* results */
    uint64_t bytes, requests, batches, errors, check_failures;
    uint64_t t_end_ns;
    int first_error;
    cr_bench_lat_t req_lat, batch_lat;
} worker_t;

static uint64_t t_start_ns;
static atomic_int ready_count, go_flag; /* start line: workers warm up, then wait for go */
static atomic_int done_count;           /* workers that left their loop (error or stop) */

/* Runs one batch of n requests; records latencies when record. Returns 0 or
 * the first request error. */
static int run_batch(worker_t *w, cr_xfer_opcode_t op, char *slots, const uint64_t *taddr,
                     size_t n, int record)
{
    const te_cfg_t *c = w->c;
    cr_xfer_request_t reqs[n];
    for (size_t i = 0; i < n; i++)
        reqs[i] = (cr_xfer_request_t){op, slots + i * c->block_size, w->seg, taddr[i],
                                      c->block_size};
    if (!strcmp(c->wait, "sync")) { /* cr_xfer_transfer_sync: what the store client calls */
        int st[n];
        uint64_t t0 = cr__now_ns();
        int rc = cr_xfer_transfer_sync(w->e, reqs, n, st);
        uint64_t dt = cr__now_ns() - t0;
        for (size_t i = 0; i < n && !rc; i++)
            rc = st[i];
        if (record && !rc) {
            for (size_t i = 0; i < n; i++)
                cr_bench_lat_add(&w->req_lat, dt);
            cr_bench_lat_add(&w->batch_lat, dt);
        }
        return rc;
    }
    cr_xfer_batch_t *b;
    int rc = cr_xfer_batch_alloc(w->e, n, &b);
    if (rc)
        return rc;
    uint64_t t0 = cr__now_ns();
    rc = cr_xfer_batch_submit(b, reqs, n);
    if (rc) {
        cr_xfer_batch_free(b);
        return rc;
    }
    int first_err = 0;
    if (!strcmp(c->wait, "block")) {
        rc = cr_xfer_batch_wait(b, -1);
        uint64_t dt = cr__now_ns() - t0;
        for (size_t i = 0; i < n; i++) {
            cr_xfer_status_t st;
            cr_xfer_batch_status(b, i, &st);
            if (st.state != CR_XFER_STATE_COMPLETED && !first_err)
                first_err = st.error ? st.error : -EIO;
            if (record && st.state == CR_XFER_STATE_COMPLETED)
                cr_bench_lat_add(&w->req_lat, dt);
        }
        if (rc && !first_err)
            first_err = rc;
        if (record)
            cr_bench_lat_add(&w->batch_lat, dt);
    } else {
        unsigned char done[n];
        memset(done, 0, n);
        size_t pending = n, lo = 0;
        while (pending) {
            int progressed = 0;
            for (size_t i = lo; i < n; i++) {
                if (done[i])
                    continue;
                cr_xfer_status_t st;
                if (cr_xfer_batch_status(b, i, &st) || st.state == CR_XFER_STATE_WAITING)
                    continue;
                done[i] = 1;
                pending--;
                progressed = 1;
                if (st.state == CR_XFER_STATE_FAILED && !first_err)
                    first_err = st.error ? st.error : -EIO;
                if (record && st.state == CR_XFER_STATE_COMPLETED)
                    cr_bench_lat_add(&w->req_lat, cr__now_ns() - t0);
            }
            while (lo < n && done[lo])
                lo++;
            if (pending && !progressed) {
                if (c->poll_us > 0)
                    sleep_us((long)c->poll_us);
                else
                    sched_yield();
            }
        }
        if (record)
            cr_bench_lat_add(&w->batch_lat, cr__now_ns() - t0);
    }
    while (cr_xfer_batch_free(b) == -EBUSY) /* cannot happen once all finished */
        sleep_us(100);
    return first_err;
}

static void next_offsets(worker_t *w, uint64_t *taddr, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t blk = w->cursor++ % w->region_blocks;
        taddr[i] = w->target_base + w->region_off + blk * w->c->block_size;
    }
}

/* Compares each block (READ: the local slot; WRITE: the read-back copy) with
 * the pattern of seed at its target offset. */
static int verify_batch(worker_t *w, const char *slots, const uint64_t *taddr, size_t n,
                        uint64_t seed)
{
    const te_cfg_t *c = w->c;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const char *got = (w->op == CR_XFER_READ ? slots : w->verify) + i * c->block_size;
        size_t idx = cr_bench_pattern_check(got, taddr[i] - w->target_buf_addr, c->block_size,
                                            seed);
        if (idx != (size_t)-1) {
            if (w->check_failures < 5)
                fprintf(stderr,
                        "crescent-bench: CHECK FAILED thread %d target 0x%" PRIx64
                        " byte %zu of %" PRIu64 "\n",
                        w->id, taddr[i], idx, c->block_size);
            w->check_failures++;
            bad = 1;
        }
    }
    return bad;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    const te_cfg_t *c = w->c;
    size_t n = (size_t)c->batch_size;
    uint64_t *taddr = malloc(n * sizeof *taddr);
    if (!taddr) {
        w->first_error = -ENOMEM;
        atomic_fetch_add(&ready_count, 1);
        atomic_fetch_add(&done_count, 1);
        return NULL;
    }
    /* warm-up batch (connections, caches), not counted; a READ so that it
     * never modifies the target */
    next_offsets(w, taddr, n);
    int rc = run_batch(w, CR_XFER_READ, w->slots, taddr, n, 0);
    if (rc)
        w->first_error = rc;
    atomic_fetch_add(&ready_count, 1);
    while (!atomic_load(&go_flag) && !atomic_load(&stop_flag))
        sleep_us(100);
    /* at least one measured batch, even if the window closed before this
     * thread was scheduled (a loaded machine): results are never empty */
    uint64_t per_pass = c->objects ? (uint64_t)c->objects / n : 0;
    uint64_t max_batches = c->objects ? per_pass * (uint64_t)c->passes : UINT64_MAX;
    for (int first = 1; !w->first_error && w->batches < max_batches &&
                        (first || !atomic_load(&stop_flag));
         first = 0) {
        next_offsets(w, taddr, n);
        /* --objects: every batch from its own distinct local blocks */
        char *slots = w->slots + (c->objects ? (w->batches % per_pass) * n * c->block_size : 0);
        uint64_t wseed = target_seed ^ 0x5752495445000000ull ^ (w->batches + 1) ^
                         ((uint64_t)w->id << 40);
        if (c->check && w->op == CR_XFER_READ)
            memset(slots, 0, n * c->block_size); /* a read that lands nowhere is caught */
        if (c->check && w->op == CR_XFER_WRITE) /* content unique to this batch */
            for (size_t i = 0; i < n; i++)
                cr_bench_pattern_fill(slots + i * c->block_size, taddr[i] - w->target_buf_addr,
                                      c->block_size, wseed);
        rc = run_batch(w, w->op, slots, taddr, n, 1);
        if (rc) {
            w->errors++;
            w->first_error = rc;
            break;
        }
        w->bytes += n * c->block_size;
        w->requests += n;
        w->batches++;
        if (c->check) {
            if (w->op == CR_XFER_WRITE) {
                /* read back and compare, then restore the target's pattern
                 * so later --check reads of this target still hold */
                memset(w->verify, 0, n * c->block_size);
                rc = run_batch(w, CR_XFER_READ, w->verify, taddr, n, 0);
                if (!rc) {
                    verify_batch(w, slots, taddr, n, wseed);
                    for (size_t i = 0; i < n; i++)
                        cr_bench_pattern_fill(slots + i * c->block_size,
                                              taddr[i] - w->target_buf_addr, c->block_size,
                                              target_seed);
                    rc = run_batch(w, CR_XFER_WRITE, slots, taddr, n, 0);
                }
                if (rc) {
                    w->errors++;
                    w->first_error = rc;
                    break;
                }
            } else {
                verify_batch(w, slots, taddr, n, target_seed);
            }
        }
    }
    w->t_end_ns = cr__now_ns();
    free(taddr);
    atomic_fetch_add(&done_count, 1);
    return NULL;
}

static int open_segment(cr_xfer_engine_t *e, const char *name, double secs,
                        cr_xfer_segment_t *seg)
{
    uint64_t deadline = cr__now_ms() + (uint64_t)(secs > 0 ? secs * 1000 : 0);
    int rc;
    for (;;) {
        rc = cr_xfer_segment_open(e, name, seg);
        if (rc == 0 || cr__now_ms() > deadline || atomic_load(&stop_flag))
            break;
        if (rc != -ENOENT && rc != -EHOSTUNREACH && rc != -ECONNREFUSED && rc != -ETIMEDOUT &&
            rc != -ECONNRESET)
            break;
        sleep_us(100000);
    }
    if (rc)
        fprintf(stderr, "crescent-bench: cannot open segment '%s': %s (%d)\n", name,
                cr_strerror(rc), rc);
    return rc;
}

static int run_initiator(const te_cfg_t *c)
{
    if (!c->segment[0]) {
        fprintf(stderr, "crescent-bench: --segment is required for the initiator\n");
        return 2;
    }
    cr_xfer_opcode_t op;
    if (!strcmp(c->operation, "read"))
        op = CR_XFER_READ;
    else if (!strcmp(c->operation, "write"))
        op = CR_XFER_WRITE;
    else {
        fprintf(stderr, "crescent-bench: --operation must be read or write\n");
        return 2;
    }
    size_t nthreads = (size_t)c->threads, n = (size_t)c->batch_size;
    size_t per_thread = (c->objects ? (size_t)c->objects : n) * c->block_size;
    size_t local_len =
        nthreads * per_thread + (c->check && op == CR_XFER_WRITE ? nthreads * n * c->block_size : 0);

    int ret = 1;
    cr_xfer_engine_t *e = NULL;
    char *local = NULL;
    worker_t *ws = NULL;
    pthread_t *th = NULL;
    cr_xfer_segment_t seg = -1;
    int registered = 0;
    if (make_engine(c, &e))
        goto out;
    local = cr_bench_alloc_prefaulted(local_len);
    if (!local) {
        fprintf(stderr, "crescent-bench: cannot allocate %zu local bytes\n", local_len);
        goto out;
    }
    cr_bench_pattern_fill(local, 0, local_len, LOCAL_SEED);
    int rc = cr_xfer_mem_register(e, local, local_len, "cpu:0");
    if (rc) {
        fprintf(stderr, "crescent-bench: register failed: %s\n", cr_strerror(rc));
        goto out;
    }
    registered = 1;
    if (open_segment(e, c->segment, c->open_seconds, &seg))
        goto out;
    const char *transport = cr_xfer_segment_transport(e, seg);
    if (!transport)
        transport = "?";
    if (strcmp(c->protocol, "auto") != 0 && strcmp(c->protocol, transport) != 0) {
        fprintf(stderr, "crescent-bench: asked for %s but the engine uses %s for '%s'\n",
                c->protocol, transport, c->segment);
        goto out;
    }
    /* the target's largest registered buffer */
    cr_xfer_buffer_info_t bi[64];
    size_t nb = 0;
    rc = cr_xfer_segment_buffers(e, seg, bi, 64, &nb);
    if (rc || nb == 0) {
        fprintf(stderr, "crescent-bench: target '%s' has no registered buffer\n", c->segment);
        goto out;
    }
    size_t best = 0;
    for (size_t i = 1; i < nb && i < 64; i++)
        if (bi[i].len > bi[best].len)
            best = i;
    uint64_t region = bi[best].len / nthreads / c->block_size;
    if (region == 0) {
        fprintf(stderr,
                "crescent-bench: target buffer (%" PRIu64 " bytes) too small for %zu threads "
                "x %" PRIu64 "-byte blocks\n",
                bi[best].len, nthreads, c->block_size);
        goto out;
    }
    ws = calloc(nthreads, sizeof *ws);
    th = calloc(nthreads, sizeof *th);
    if (!ws || !th)
        goto out;
    size_t started = 0;
    for (size_t t = 0; t < nthreads; t++) {
        worker_t *w = &ws[t];
        *w = (worker_t){.c = c, .e = e, .seg = seg, .id = (int)t, .op = op,
                        .slots = local + t * per_thread,
                        .verify = c->check && op == CR_XFER_WRITE
                                      ? local + nthreads * per_thread + t * n * c->block_size
                                      : NULL,
                        .target_base = bi[best].addr, .target_buf_addr = bi[best].addr,
                        .region_off = t * region * c->block_size, .region_blocks = region};
        if (cr_bench_lat_init(&w->req_lat, 0x1234 + t) ||
            cr_bench_lat_init(&w->batch_lat, 0x5678 + t)) {
            fprintf(stderr, "crescent-bench: out of memory\n");
            atomic_store(&stop_flag, 1);
            break;
        }
        if (pthread_create(&th[t], NULL, worker_main, w) != 0) {
            atomic_store(&stop_flag, 1);
            break;
        }
        started++;
    }
    if (started < nthreads) {
        fprintf(stderr, "crescent-bench: could not start %zu threads\n", nthreads);
        for (size_t t = 0; t < started; t++)
            pthread_join(th[t], NULL);
        goto out;
    }
    while ((size_t)atomic_load(&ready_count) < nthreads)
        sleep_us(100);
    struct timespec cpu0, cpu1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0); /* all threads: user + sys */
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    t_start_ns = cr__now_ns();
    atomic_store(&go_flag, 1);
    uint64_t end = t_start_ns + (uint64_t)(c->duration * 1e9);
    /* until the duration ends, a signal, or every worker has stopped on an error */
    while (!atomic_load(&stop_flag) && cr__now_ns() < end &&
           (size_t)atomic_load(&done_count) < nthreads)
        sleep_us(10000);
    atomic_store(&stop_flag, 1);
    cr_bench_lat_t req, bat;
    int lat_ok = cr_bench_lat_init(&req, 1) == 0 && cr_bench_lat_init(&bat, 2) == 0;
    uint64_t bytes = 0, requests = 0, batches = 0, errors = 0, check_fail = 0, t_end = 0;
    int first_error = 0;
    for (size_t t = 0; t < nthreads; t++) {
        pthread_join(th[t], NULL);
        worker_t *w = &ws[t];
        bytes += w->bytes;
        requests += w->requests;
        batches += w->batches;
        errors += w->errors + (w->first_error && !w->errors ? 1 : 0);
        check_fail += w->check_failures;
        if (w->first_error && !first_error)
            first_error = w->first_error;
        if (w->t_end_ns > t_end)
            t_end = w->t_end_ns;
        if (lat_ok) {
            cr_bench_lat_merge(&req, &w->req_lat);
            cr_bench_lat_merge(&bat, &w->batch_lat);
        }
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
    getrusage(RUSAGE_SELF, &ru1);
    double cpu_s = (double)(cpu1.tv_sec - cpu0.tv_sec) + (double)(cpu1.tv_nsec - cpu0.tv_nsec) / 1e9;
    double secs = (double)(t_end - t_start_ns) / 1e9;
    if (secs <= 0)
        secs = 1e-9;
    double gbps = (double)bytes / secs / 1e9;
    if (first_error)
        fprintf(stderr, "crescent-bench: transfer failed: %s (%d)\n", cr_strerror(first_error),
                first_error);
    printf("RESULT op=%s protocol=%s transport=%s block=%" PRIu64 " batch=%zu threads=%zu "
           "seconds=%.3f bytes=%" PRIu64 " requests=%" PRIu64 " batches=%" PRIu64
           " gbps=%.3f gibps=%.3f req_per_s=%.0f batch_p50_us=%.1f batch_p99_us=%.1f "
           "p50_us=%.1f p99_us=%.1f cpu_s=%.3f vcsw=%ld errors=%" PRIu64 " check=%s\n",
           c->operation, c->protocol, transport, c->block_size, n, nthreads, secs, bytes,
           requests, batches, gbps, (double)bytes / secs / (double)(1u << 30),
           (double)requests / secs, lat_ok ? cr_bench_lat_pct_us(&bat, 50) : 0,
           lat_ok ? cr_bench_lat_pct_us(&bat, 99) : 0, lat_ok ? cr_bench_lat_pct_us(&req, 50) : 0,
           lat_ok ? cr_bench_lat_pct_us(&req, 99) : 0, cpu_s, ru1.ru_nvcsw - ru0.ru_nvcsw, errors,
           !c->check ? "off" : (check_fail ? "FAILED" : "ok"));
    fflush(stdout);
    cr_bench_lat_free(&req);
    cr_bench_lat_free(&bat);
    ret = (errors || check_fail || requests == 0) ? 1 : 0;
    if (requests == 0 && !errors)
        fprintf(stderr, "crescent-bench: no request completed in the measured window\n");
out:
    if (ws)
        for (size_t t = 0; t < nthreads; t++) {
            cr_bench_lat_free(&ws[t].req_lat);
            cr_bench_lat_free(&ws[t].batch_lat);
        }
    free(ws);
    free(th);
    if (seg >= 0)
        cr_xfer_segment_close(e, seg);
    if (registered)
        cr_xfer_mem_unregister(e, local);
    cr_xfer_engine_destroy(e);
    cr_bench_free(local, local_len);
    return ret;
}

int cr_bench_te_main(int argc, char **argv)
{
    te_cfg_t c;
    char err[256] = "";
    int rc = cr__cfg_parse(opts, N_OPTS, &c, argc, argv, 1, "CRESCENT_BENCH_", NULL, 0, NULL, err,
                           sizeof err);
    if (rc == 1) {
        cr__cfg_usage(stdout, "crescent-bench [te]",
                      "Transfer Engine benchmark (run a target, then an initiator)", opts,
                      N_OPTS);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "crescent-bench: %s\n", err);
        return 2;
    }
    if (strcmp(c.protocol, "tcp") && strcmp(c.protocol, "shm") && strcmp(c.protocol, "auto")) {
        fprintf(stderr, "crescent-bench: --protocol must be tcp, shm or auto\n");
        return 2;
    }
    if (strcmp(c.target_memory, "shared") && strcmp(c.target_memory, "anon") &&
        strcmp(c.target_memory, "auto")) {
        fprintf(stderr, "crescent-bench: --target_memory must be shared, anon or auto\n");
        return 2;
    }
    if (strcmp(c.wait, "poll") && strcmp(c.wait, "block") && strcmp(c.wait, "sync")) {
        fprintf(stderr, "crescent-bench: --wait must be poll, block or sync\n");
        return 2;
    }
    if (c.block_size == 0 || c.block_size > (1ull << 30) || c.batch_size < 1 ||
        c.batch_size > 4096 || c.threads < 1 || c.threads > 64 || c.duration <= 0 ||
        c.port < 0 || c.port > 65535 || c.buffer_size == 0 || c.poll_us < 0 ||
        c.io_threads < 0 || c.conns_per_path < 0 || c.timeout_ms < 0 ||
        c.objects < 0 || (c.objects && c.objects % c.batch_size) || c.passes < 1 ||
        c.passes > 1000 || (c.passes > 1 && !c.objects) ||
        (uint64_t)(c.objects ? c.objects : c.batch_size) * c.block_size * (uint64_t)c.threads >
            (64ull << 30)) {
        fprintf(stderr, "crescent-bench: parameter out of range (block_size 1..1GiB, "
                        "batch_size 1..4096, threads 1..64, duration > 0, objects a multiple "
                        "of batch_size, passes 1..1000 (above 1 only with objects), local "
                        "memory threads*batch*block <= 64GiB)\n");
        return 2;
    }
    if (c.pattern_seed)
        target_seed = c.pattern_seed;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_TIMERSLACK, 1000UL); /* 1 us: poll sleeps stay short */
    if (!strcmp(c.mode, "target"))
        return run_target(&c);
    if (!strcmp(c.mode, "initiator"))
        return run_initiator(&c);
    fprintf(stderr, "crescent-bench: --mode must be target or initiator\n");
    return 2;
}
