/* netns_driver: one side of the multi-host tests (netns_test.sh runs it
 * with `ip netns exec` in the namespaces that model two hosts).
 *
 *   netns_driver target    --nics A,B --port P --size BYTES
 *       serves a registered buffer filled with pattern seed 1; prints
 *       "READY <segment name>"; runs until SIGTERM/SIGINT.
 *   netns_driver check     --nics ... --target NAME --expect tcp|shm
 *       the transport chosen for NAME must be --expect; READ and WRITE of
 *       1 byte .. 16 MiB at unaligned offsets plus a batch of 256 small
 *       requests, every byte compared.
 *   netns_driver aggregate --nics ... --target NAME --link IF1 --link2 IF2
 *       a 256 MiB transfer must use both NICs (each carries at least one
 *       4 MiB request's worth). Paths pull slices as fast as they move them,
 *       so the split follows each path's speed, which a loaded CI machine
 *       skews (5 %/95 % seen): the aggregate bandwidth is bench/te's job.
 *   netns_driver failover  --nics ... --target NAME --link IF [--total BYTES]
 *       submits --total bytes (default 1 GiB) as 4 MiB READs and WRITEs, prints
 *       "started"; the test script then takes IF down. Every request must
 *       complete with correct data. Then it waits for IF to come back up and
 *       repeats reads until IF carries traffic again (re-probe), verifying
 *       the written half on the way.
 *   netns_driver outage    --nics ... --target NAME [--link IF1 --link2 IF2 | --expect-dead]
 *                          [--timeout_ms MS]
 *       1 GiB of WRITEs; prints "started"; the script then takes both links
 *       down (partition) or SIGKILLs the target (--expect-dead). Every request
 *       must end (no hang), some must fail, the process must survive; then
 *       after the links return a transfer succeeds, or to the dead peer fails.
 * Exit: 0 pass, 1 fail (reason on stderr), 2 setup error.
 * Only the public API (crescent/transfer.h) is used.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "crescent/transfer.h"

#define MiB (1ull << 20)

static struct {
    const char *mode, *nics, *target, *expect, *link, *link2, *transports;
    unsigned port, timeout_ms;
    int expect_dead;
    uint64_t size, total;
} o = {.nics = "127.0.0.1", .transports = "tcp,shm", .size = 160 * MiB, .total = 1024 * MiB};

static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "netns_driver %s: FAIL: ", o.mode);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- pattern: byte at offset x is byte (x & 7) of mix(x >> 3, seed) ---- */

static uint64_t mix(uint64_t w, uint64_t seed)
{
    uint64_t z = w + seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill(uint8_t *p, uint64_t len, uint64_t base, uint64_t seed)
{
    uint64_t i = 0;
    while (i < len && ((base + i) & 7)) {
        p[i] = (uint8_t)(mix((base + i) >> 3, seed) >> (8 * ((base + i) & 7)));
        i++;
    }
    for (; i + 8 <= len; i += 8) {
        uint64_t v = mix((base + i) >> 3, seed);
        memcpy(p + i, &v, 8);
    }
    for (; i < len; i++)
        p[i] = (uint8_t)(mix((base + i) >> 3, seed) >> (8 * ((base + i) & 7)));
}

/* Offset of the first byte that differs from the pattern, or -1. */
static int64_t check(const uint8_t *p, uint64_t len, uint64_t base, uint64_t seed)
{
    static uint8_t exp[1 << 20];
    for (uint64_t off = 0; off < len; off += sizeof exp) {
        uint64_t n = len - off < sizeof exp ? len - off : sizeof exp;
        fill(exp, n, base + off, seed);
        if (memcmp(p + off, exp, n))
            for (uint64_t i = 0; i < n; i++)
                if (p[off + i] != exp[i])
                    return (int64_t)(off + i);
    }
    return -1;
}

/* ---- engine helpers ---------------------------------------------------- */

static cr_xfer_engine_t *engine_up(void)
{
    cr_xfer_params_t p = {
        .field_mask = CR_XFER_PARAM_METADATA_URI | CR_XFER_PARAM_NICS | CR_XFER_PARAM_PORT |
                      CR_XFER_PARAM_TRANSPORTS | (o.timeout_ms ? CR_XFER_PARAM_TIMEOUT_MS : 0),
        .timeout_ms = o.timeout_ms,
        .metadata_uri = "p2p",
        .nics = o.nics,
        .port = (uint16_t)o.port,
        .transports = o.transports,
    };
    cr_xfer_engine_t *e = NULL;
    int rc = cr_xfer_engine_create(&p, &e);
    if (rc) {
        fprintf(stderr, "netns_driver: engine_create(nics %s): %s\n", o.nics, cr_strerror(rc));
        return NULL;
    }
    return e;
}

static uint8_t *region(cr_xfer_engine_t *e, uint64_t len)
{
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                      -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    int rc = cr_xfer_mem_register(e, p, len, "cpu:0");
    if (rc) {
        fprintf(stderr, "netns_driver: mem_register: %s\n", cr_strerror(rc));
        munmap(p, len);
        return NULL;
    }
    return p;
}

typedef struct peer {
    cr_xfer_segment_t seg;
    uint64_t addr, len;
} peer_t;

static int peer_open(cr_xfer_engine_t *e, peer_t *pr)
{
    int rc = -1;
    /* the target may still be starting: retry for a few seconds */
    for (int i = 0; i < 50; i++) {
        if ((rc = cr_xfer_segment_open(e, o.target, &pr->seg)) == 0)
            break;
        usleep(100000);
    }
    if (rc)
        return fail("segment_open(%s): %s", o.target, cr_strerror(rc)), -1;
    cr_xfer_buffer_info_t b;
    size_t n = 0;
    rc = cr_xfer_segment_buffers(e, pr->seg, &b, 1, &n);
    if (rc || n < 1)
        return fail("segment_buffers: rc %d, %zu buffers", rc, n), -1;
    pr->addr = b.addr;
    pr->len = b.len;
    return 0;
}

static int xfer(cr_xfer_engine_t *e, const peer_t *pr, cr_xfer_opcode_t op, void *local,
                uint64_t roff, uint64_t len)
{
    cr_xfer_request_t r = {.opcode = op, .local_addr = local, .target = pr->seg,
                           .target_addr = pr->addr + roff, .length = len};
    int res = 0;
    int rc = cr_xfer_transfer_sync(e, &r, 1, &res);
    return rc ? rc : res;
}

/* Interface byte counters (this namespace's sysfs). */
static uint64_t if_bytes(const char *ifname)
{
    uint64_t sum = 0;
    const char *which[] = {"rx_bytes", "tx_bytes"};
    for (int i = 0; i < 2; i++) {
        char path[256];
        snprintf(path, sizeof path, "/sys/class/net/%s/statistics/%s", ifname, which[i]);
        FILE *f = fopen(path, "r");
        unsigned long long v = 0;
        if (f) {
            if (fscanf(f, "%llu", &v) != 1)
                v = 0;
            fclose(f);
        }
        sum += v;
    }
    return sum;
}

/* 1 if the interface is administratively and operationally up. */
static int if_up(const char *ifname)
{
    char path[256], buf[32] = "";
    snprintf(path, sizeof path, "/sys/class/net/%s/operstate", ifname);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (!fgets(buf, sizeof buf, f))
        buf[0] = 0;
    fclose(f);
    return !strncmp(buf, "up", 2);
}

/* ---- modes --------------------------------------------------------------- */

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig, g_stop = 1; }

static int mode_target(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    cr_xfer_engine_t *e = engine_up();
    if (!e)
        return 2;
    uint8_t *buf = region(e, o.size);
    if (!buf)
        return cr_xfer_engine_destroy(e), 2;
    fill(buf, o.size, 0, 1);
    say("READY %s\n", cr_xfer_engine_name(e));
    while (!g_stop)
        pause();
    cr_xfer_mem_unregister(e, buf);
    cr_xfer_engine_destroy(e);
    munmap(buf, o.size);
    return 0;
}

static int mode_check(void)
{
    cr_xfer_engine_t *e = engine_up();
    if (!e)
        return 2;
    uint64_t llen = 40 * MiB;
    uint8_t *local = region(e, llen);
    peer_t pr;
    int ret = 0;
    if (!local || peer_open(e, &pr))
        return cr_xfer_engine_destroy(e), 2;
    const char *tp = cr_xfer_segment_transport(e, pr.seg);
    say("transport %s\n", tp ? tp : "(null)");
    if (o.expect && (!tp || strcmp(tp, o.expect))) {
        ret = fail("transport for %s: expected %s, got %s", o.target, o.expect, tp ? tp : "NULL");
        goto out;
    }
    if (pr.len < 2 * (16 * MiB + 8192))
        return fail("target buffer too small (%" PRIu64 ")", pr.len), 2;
    uint64_t half = pr.len / 2;
    uint64_t sizes[] = {1, 3, 4095, 4097, 65537, MiB + 7, 4 * MiB + 1, 16 * MiB + 3};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint64_t len = sizes[k], roff = 1 + 331 * k, loff = 5 + 77 * k;
        memset(local + loff, 0, len);
        int rc = xfer(e, &pr, CR_XFER_READ, local + loff, roff, len);
        int64_t bad = rc ? -2 : check(local + loff, len, roff, 1);
        if (rc || bad >= 0) {
            ret = fail("READ %" PRIu64 " bytes: rc %s, first bad byte %" PRId64, len,
                       cr_strerror(rc), bad);
            goto out;
        }
        /* WRITE into the upper half with a new seed, read back elsewhere */
        uint64_t seed = 10 + k, woff = half + 3 + 129 * k;
        fill(local + loff, len, woff, seed);
        rc = xfer(e, &pr, CR_XFER_WRITE, local + loff, woff, len);
        uint8_t *back = local + 20 * MiB + 11;
        if (!rc)
            rc = xfer(e, &pr, CR_XFER_READ, back, woff, len);
        bad = rc ? -2 : check(back, len, woff, seed);
        if (rc || bad >= 0) {
            ret = fail("WRITE+READ back %" PRIu64 " bytes: rc %s, first bad byte %" PRId64, len,
                       cr_strerror(rc), bad);
            goto out;
        }
    }
    /* 256 small reads in one batch, reversed order, unaligned */
    enum { N = 256, SZ = 4097 };
    cr_xfer_request_t reqs[N];
    int res[N];
    for (int i = 0; i < N; i++)
        reqs[i] = (cr_xfer_request_t){.opcode = CR_XFER_READ, .local_addr = local + 7 + (size_t)i * 8192,
                                      .target = pr.seg,
                                      .target_addr = pr.addr + 13 + (uint64_t)(N - 1 - i) * 8192,
                                      .length = SZ};
    int rc = cr_xfer_transfer_sync(e, reqs, N, res);
    for (int i = 0; i < N && !ret; i++) {
        int64_t bad = res[i] ? -2 : check(local + 7 + (size_t)i * 8192, SZ, 13 + (uint64_t)(N - 1 - i) * 8192, 1);
        if (res[i] || bad >= 0)
            ret = fail("batch request %d: %s, first bad byte %" PRId64 " (batch rc %d)", i,
                       cr_strerror(res[i]), bad, rc);
    }
    /* out of range target: an error, not a crash */
    if (!ret) {
        rc = xfer(e, &pr, CR_XFER_READ, local, pr.len - 10, 100);
        if (rc == 0)
            ret = fail("out-of-range READ succeeded");
    }
    if (!ret)
        say("check ok (%s)\n", tp);
out:
    cr_xfer_segment_close(e, pr.seg);
    cr_xfer_engine_destroy(e);
    return ret;
}

static int mode_aggregate(void)
{
    if (!o.link || !o.link2)
        return fail("--link and --link2 needed"), 2;
    cr_xfer_engine_t *e = engine_up();
    if (!e)
        return 2;
    uint64_t total = 256 * MiB, blk = 4 * MiB;
    uint8_t *local = region(e, 64 * MiB);
    peer_t pr;
    if (!local || peer_open(e, &pr))
        return cr_xfer_engine_destroy(e), 2;
    if (pr.len < 64 * MiB)
        return fail("target buffer too small"), 2;
    uint64_t b1 = if_bytes(o.link), b2 = if_bytes(o.link2);
    enum { N = 64 };
    cr_xfer_request_t reqs[N];
    int res[N];
    for (int i = 0; i < N; i++)
        reqs[i] = (cr_xfer_request_t){.opcode = CR_XFER_READ, .local_addr = local + (i % 16) * blk,
                                      .target = pr.seg, .target_addr = pr.addr + (i % 16) * blk,
                                      .length = blk};
    int rc = cr_xfer_transfer_sync(e, reqs, N, res);
    uint64_t d1 = if_bytes(o.link) - b1, d2 = if_bytes(o.link2) - b2;
    say("aggregate: %s carried %" PRIu64 " MiB, %s %" PRIu64 " MiB of %" PRIu64 " MiB\n", o.link,
        d1 >> 20, o.link2, d2 >> 20, total >> 20);
    int ret = 0;
    if (rc)
        ret = fail("transfer: %s", cr_strerror(rc));
    else if (check(local, 16 * blk, 0, 1) >= 0)
        ret = fail("data mismatch");
    else if (d1 < blk || d2 < blk)
        ret = fail("expected both NICs to carry >= %" PRIu64 " of %" PRIu64 " bytes; got %s=%" PRIu64
                   " %s=%" PRIu64, blk, total, o.link, d1, o.link2, d2);
    cr_xfer_segment_close(e, pr.seg);
    cr_xfer_engine_destroy(e);
    return ret;
}

static int mode_failover(void)
{
    if (!o.link)
        return fail("--link needed"), 2;
    cr_xfer_engine_t *e = engine_up();
    if (!e)
        return 2;
    const uint64_t blk = 4 * MiB;
    uint64_t total = o.total / (2 * blk) * (2 * blk), half = total / 2;
    size_t n = (size_t)(total / blk);
    uint8_t *local = region(e, total);
    peer_t pr;
    if (!local || peer_open(e, &pr))
        return cr_xfer_engine_destroy(e), 2;
    if (pr.len < total)
        return fail("target buffer %" PRIu64 " < %" PRIu64, pr.len, total), 2;
    say("transport %s\n", cr_xfer_segment_transport(e, pr.seg));
    /* reads of the target's lower half (seed 1) into local's lower half;
     * writes of local's upper half (seed 2) into the target's upper half */
    fill(local + half, half, half, 2);
    memset(local, 0, half);
    cr_xfer_request_t *reqs = calloc(n, sizeof *reqs);
    cr_xfer_batch_t *b = NULL;
    if (!reqs || cr_xfer_batch_alloc(e, n, &b))
        return fail("batch alloc"), 2;
    for (size_t i = 0; i < n; i++) {
        uint64_t off = (i / 2) * blk + (i % 2 ? half : 0);
        reqs[i] = (cr_xfer_request_t){.opcode = i % 2 ? CR_XFER_WRITE : CR_XFER_READ,
                                      .local_addr = local + off, .target = pr.seg,
                                      .target_addr = pr.addr + off, .length = blk};
    }
    uint64_t l0 = if_bytes(o.link), l2_0 = o.link2 ? if_bytes(o.link2) : 0;
    double t0 = now_s();
    int rc = cr_xfer_batch_submit(b, reqs, n);
    if (rc)
        return fail("batch_submit: %s", cr_strerror(rc)), 1;
    say("started %zu requests, %" PRIu64 " MiB\n", n, total >> 20);

    /* the script takes the link down now; note how far the transfer was */
    cr_xfer_status_t s = {0};
    int saw_down = 0;
    for (int i = 0; i < 6000 && !saw_down; i++) {
        if (!if_up(o.link)) {
            cr_xfer_batch_status_all(b, &s);
            saw_down = 1;
            break;
        }
        usleep(5000);
    }
    int ret = 0;
    if (!saw_down) {
        ret = fail("%s never went down", o.link);
        goto out;
    }
    say("link-down after %.2fs at %" PRIu64 " of %" PRIu64 " MiB (state %d)\n", now_s() - t0,
        s.bytes_transferred >> 20, total >> 20, (int)s.state);
    if (s.state != CR_XFER_STATE_WAITING) {
        ret = fail("the transfer had finished before %s went down: the failover was not exercised",
                   o.link);
        goto out;
    }
    rc = cr_xfer_batch_wait(b, 180000);
    double t1 = now_s();
    size_t nfail = 0;
    for (size_t i = 0; i < n; i++) {
        cr_xfer_status_t rs;
        cr_xfer_batch_status(b, i, &rs);
        if (rs.state != CR_XFER_STATE_COMPLETED) {
            if (nfail++ < 5)
                fprintf(stderr, "request %zu (%s @%zu MiB): state %d error %s\n", i,
                        i % 2 ? "WRITE" : "READ", (size_t)((i / 2) * 4), (int)rs.state,
                        cr_strerror(rs.error));
        }
    }
    say("phase1: batch_wait %s after %.2fs, %zu of %zu requests failed; %s carried %" PRIu64
        " MiB\n", cr_strerror(rc), t1 - t0, nfail, n, o.link, (if_bytes(o.link) - l0) >> 20);
    if (o.link2)
        say("phase1: %s carried %" PRIu64 " MiB\n", o.link2, (if_bytes(o.link2) - l2_0) >> 20);
    if (rc || nfail) {
        ret = fail("%zu requests failed while %s was down (wait rc %s)", nfail, o.link,
                   cr_strerror(rc));
        goto out;
    }
    int64_t bad = check(local, half, 0, 1);
    if (bad >= 0) {
        ret = fail("READ data wrong at local offset %" PRId64, bad);
        goto out;
    }
    say("phase1-ok\n");

    /* phase 2: the script brings the link back; it must carry data again */
    for (int i = 0; i < 600 && !if_up(o.link); i++)
        usleep(50000);
    if (!if_up(o.link)) {
        ret = fail("%s did not come back up", o.link);
        goto out;
    }
    say("link-up\n");
    cr_xfer_batch_free(b);
    b = NULL;
    double t2 = now_s();
    int reused = 0;
    for (int round = 0; round < 60 && !reused; round++) {
        uint64_t before = if_bytes(o.link);
        size_t m = (size_t)(half / blk);
        if (m > 64)
            m = 64; /* 256 MiB per round */
        int *res = calloc(m, sizeof *res);
        for (size_t i = 0; i < m; i++)
            reqs[i] = (cr_xfer_request_t){.opcode = CR_XFER_READ, .local_addr = local + i * blk,
                                          .target = pr.seg, .target_addr = pr.addr + half + i * blk,
                                          .length = blk};
        memset(local, 0, m * blk);
        rc = cr_xfer_transfer_sync(e, reqs, m, res);
        free(res);
        if (rc) {
            ret = fail("phase2 read back: %s", cr_strerror(rc));
            goto out;
        }
        bad = check(local, m * blk, half, 2);
        if (bad >= 0) {
            ret = fail("WRITE data (read back) wrong at offset %" PRId64, bad);
            goto out;
        }
        uint64_t d = if_bytes(o.link) - before;
        say("phase2 round %d: %s carried %" PRIu64 " MiB of %" PRIu64 " MiB\n", round, o.link,
            d >> 20, (uint64_t)(m * blk) >> 20);
        if (d >= m * blk / 8)
            reused = 1;
        else
            sleep(1);
    }
    if (!reused) {
        ret = fail("%s carried no data again within %.0fs after coming back up", o.link,
                   now_s() - t2);
        goto out;
    }
    say("link-reused after %.2fs\n", now_s() - t2);
out:
    if (b && cr_xfer_batch_wait(b, 60000) != -ETIMEDOUT)
        cr_xfer_batch_free(b);
    free(reqs);
    cr_xfer_segment_close(e, pr.seg);
    cr_xfer_engine_destroy(e);
    return ret;
}

/* outage: 1 GiB of WRITEs in flight when the script cuts the peer off
 * (both links down: --link/--link2 given) or kills it (--expect-dead).
 * Every request must end within the engine's timeout (no hang), at least one
 * must fail, and the process must survive. Then: links back up => a new
 * transfer succeeds again (recovery); peer dead => a new transfer fails. */
static int mode_outage(void)
{
    cr_xfer_engine_t *e = engine_up();
    if (!e)
        return 2;
    /* 1 GiB, so the outage lands while requests are in flight even on a fast machine */
    const uint64_t blk = 4 * MiB, total = 1024 * MiB;
    size_t n = (size_t)(total / blk);
    uint8_t *local = region(e, total);
    peer_t pr;
    if (!local || peer_open(e, &pr))
        return cr_xfer_engine_destroy(e), 2;
    if (pr.len < total)
        return fail("target buffer too small"), 2;
    say("transport %s\n", cr_xfer_segment_transport(e, pr.seg));
    fill(local, total, 0, 5);
    cr_xfer_request_t *reqs = calloc(n, sizeof *reqs);
    cr_xfer_batch_t *b = NULL;
    if (!reqs || cr_xfer_batch_alloc(e, n, &b))
        return fail("batch alloc"), 2;
    for (size_t i = 0; i < n; i++)
        reqs[i] = (cr_xfer_request_t){.opcode = CR_XFER_WRITE, .local_addr = local + i * blk,
                                      .target = pr.seg, .target_addr = pr.addr + i * blk,
                                      .length = blk};
    double t0 = now_s();
    int ret = 0, rc = cr_xfer_batch_submit(b, reqs, n);
    if (rc) {
        ret = fail("batch_submit: %s", cr_strerror(rc));
        goto out;
    }
    say("started\n");
    /* bounded by the engine's own request timeout; this wait only catches a hang */
    unsigned tmo = o.timeout_ms ? o.timeout_ms : 30000;
    rc = cr_xfer_batch_wait(b, (int)(3 * tmo + 30000));
    double t1 = now_s();
    size_t nfail = 0, nwait = 0;
    int first_err = 0;
    for (size_t i = 0; i < n; i++) {
        cr_xfer_status_t rs;
        cr_xfer_batch_status(b, i, &rs);
        nwait += rs.state == CR_XFER_STATE_WAITING;
        if (rs.state == CR_XFER_STATE_FAILED && !nfail++)
            first_err = rs.error;
    }
    say("phase1: batch_wait %s after %.2fs: %zu failed (first: %s), %zu still waiting\n",
        cr_strerror(rc), t1 - t0, nfail, cr_strerror(first_err), nwait);
    if (nwait) {
        ret = fail("%zu requests still in flight %.0fs after the outage (timeout %u ms): hang",
                   nwait, t1 - t0, tmo);
        goto out;
    }
    if (!nfail) {
        ret = fail("every request completed: the outage came too late to be tested");
        goto out;
    }
    if (o.expect_dead) {
        double t2 = now_s();
        rc = xfer(e, &pr, CR_XFER_WRITE, local, 0, 4096);
        say("after the peer died: new request %s after %.2fs\n", cr_strerror(rc), now_s() - t2);
        if (rc == 0)
            ret = fail("a request to the dead peer succeeded");
        else
            say("dead-peer-ok\n");
        goto out;
    }
    say("phase1-ok\n");
    for (int i = 0; i < 600 && !(if_up(o.link) && (!o.link2 || if_up(o.link2))); i++)
        usleep(50000);
    say("links-up\n");
    double t2 = now_s();
    for (int round = 0; round < 60; round++) {
        memset(local + blk, 0, blk);
        rc = xfer(e, &pr, CR_XFER_WRITE, local, 0, blk);
        if (!rc)
            rc = xfer(e, &pr, CR_XFER_READ, local + blk, 0, blk);
        if (!rc) {
            int64_t bad = check(local + blk, blk, 0, 5);
            if (bad >= 0)
                ret = fail("data wrong after recovery at %" PRId64, bad);
            else
                say("recovered after %.2fs\n", now_s() - t2);
            goto out;
        }
        say("round %d: %s\n", round, cr_strerror(rc));
        sleep(1);
    }
    ret = fail("no successful transfer within 60 rounds after the links came back");
out:
    if (b && cr_xfer_batch_wait(b, 60000) != -ETIMEDOUT)
        cr_xfer_batch_free(b);
    free(reqs);
    cr_xfer_segment_close(e, pr.seg);
    cr_xfer_engine_destroy(e);
    return ret;
}

static uint64_t parse_size(const char *s)
{
    char *end;
    uint64_t v = strtoull(s, &end, 0);
    if (*end == 'K' || *end == 'k')
        v <<= 10;
    else if (*end == 'M' || *end == 'm')
        v <<= 20;
    else if (*end == 'G' || *end == 'g')
        v <<= 30;
    return v;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"nics", 1, 0, 'n'},   {"port", 1, 0, 'p'},   {"size", 1, 0, 's'},
        {"target", 1, 0, 't'}, {"expect", 1, 0, 'e'}, {"link", 1, 0, 'l'},
        {"link2", 1, 0, 'L'},  {"total", 1, 0, 'T'},  {"transports", 1, 0, 'x'},
        {"timeout_ms", 1, 0, 'm'}, {"expect-dead", 0, 0, 'D'}, {0, 0, 0, 0}};
    if (argc < 2) {
        fprintf(stderr, "usage: %s target|check|aggregate|failover [options]\n", argv[0]);
        return 2;
    }
    o.mode = argv[1];
    /* SIGPIPE keeps its default action: the library must never raise it
     * (a cut connection or a dead peer is an error code, not a signal), and
     * the peerdeath/partition/failover cases check exactly that.
     * NETNS_DRIVER_IGNORE_SIGPIPE=1 is for diagnosing other failures. */
    if (getenv("NETNS_DRIVER_IGNORE_SIGPIPE"))
        signal(SIGPIPE, SIG_IGN);
    optind = 2;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'n': o.nics = optarg; break;
        case 'p': o.port = (unsigned)atoi(optarg); break;
        case 's': o.size = parse_size(optarg); break;
        case 't': o.target = optarg; break;
        case 'e': o.expect = optarg; break;
        case 'l': o.link = optarg; break;
        case 'L': o.link2 = optarg; break;
        case 'T': o.total = parse_size(optarg); break;
        case 'x': o.transports = optarg; break;
        case 'm': o.timeout_ms = (unsigned)atoi(optarg); break;
        case 'D': o.expect_dead = 1; break;
        default: return 2;
        }
    }
    if (!strcmp(o.mode, "target"))
        return mode_target();
    if (!o.target) {
        fprintf(stderr, "--target needed\n");
        return 2;
    }
    if (!strcmp(o.mode, "check"))
        return mode_check();
    if (!strcmp(o.mode, "aggregate"))
        return mode_aggregate();
    if (!strcmp(o.mode, "failover"))
        return mode_failover();
    if (!strcmp(o.mode, "outage"))
        return mode_outage();
    fprintf(stderr, "unknown mode %s\n", o.mode);
    return 2;
}
