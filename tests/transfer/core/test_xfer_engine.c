/* Transfer engine core over tcp, two engines in one process (p2p metadata):
 * parameters, registration, segments, data correctness from 1 byte to
 * 256 MiB (unaligned), batches of 1024, per-request errors, stale
 * descriptors, notifications, -EBUSY, timeouts, cancel on destroy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <unistd.h>

#include "fake_peer.h"
#include "transfer/transport/tcp/tcp_internal.h"
#include "transfer/xfer_internal.h"
#include "xfer_test_util.h"


typedef struct fix {
    cr_xfer_engine_t *a, *b; /* a initiates, b is the target */
    cr_xfer_segment_t seg;   /* b opened by a */
    size_t len;
    char *abuf, *bbuf;
} fix_t;

static int setup(void **state)
{
    fix_t *f = calloc(1, sizeof *f);
    f->len = 64u << 20;
    if (xt_engine(&f->a, NULL, "tcp", 10000) || xt_engine(&f->b, NULL, "tcp", 10000))
        return -1;
    f->abuf = xt_alloc(f->len);
    f->bbuf = xt_alloc(f->len);
    if (!f->abuf || !f->bbuf)
        return -1;
    if (cr_xfer_mem_register(f->a, f->abuf, f->len, "cpu:0") ||
        cr_xfer_mem_register(f->b, f->bbuf, f->len, "cpu:0"))
        return -1;
    if (cr_xfer_segment_open(f->a, cr_xfer_engine_name(f->b), &f->seg))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fix_t *f = *state;
    cr_xfer_engine_destroy(f->a);
    cr_xfer_engine_destroy(f->b);
    xt_free(f->abuf, f->len);
    xt_free(f->bbuf, f->len);
    free(f);
    return 0;
}

static cr_xfer_request_t req(cr_xfer_opcode_t op, void *local, cr_xfer_segment_t seg,
                             const void *remote, uint64_t len)
{
    cr_xfer_request_t r = {.opcode = op,
                           .local_addr = local,
                           .target = seg,
                           .target_addr = (uint64_t)(uintptr_t)remote,
                           .length = len};
    return r;
}

/* ---- parameters --------------------------------------------------------- */

static void test_params(void **state)
{
    (void)state;
    cr_xfer_engine_t *e = NULL;
    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    const struct {
        uint64_t mask;
        const char *what;
    } bad[] = {
        {CR_XFER_PARAM_SLICE_SIZE, "slice 100"},       {CR_XFER_PARAM_TRANSPORTS, "transports"},
        {CR_XFER_PARAM_NICS, "nics"},                   {CR_XFER_PARAM_CONNS_PER_PATH, "conns 0"},
        {CR_XFER_PARAM_TIMEOUT_MS, "timeout 0"},        {CR_XFER_PARAM_IO_THREADS, "io 0"},
        {CR_XFER_PARAM_LOCAL_NAME, "p2p name no port"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&p, 0, sizeof p);
        p.field_mask = bad[i].mask;
        p.slice_size = 100;
        p.transports = "udp";
        p.nics = "not-an-ip";
        p.local_name = "just-a-name";
        int rc = cr_xfer_engine_create(&p, &e);
        if (rc != -EINVAL)
            fprintf(stderr, "%s: expected -EINVAL got %d\n", bad[i].what, rc);
        assert_int_equal(rc, -EINVAL);
    }
    assert_int_equal(cr_xfer_engine_create(NULL, NULL), -EINVAL);
    /* a NIC address this host does not have (TEST-NET-1; nothing is sent) */
    memset(&p, 0, sizeof p);
    p.field_mask = CR_XFER_PARAM_NICS | CR_XFER_PARAM_TRANSPORTS;
    p.nics = "127.0.0.1,192.0.2.1";
    p.transports = "tcp";
    assert_int_equal(cr_xfer_engine_create(&p, &e), -EINVAL);
    p.nics = "127.0.0.1,127.0.0.1"; /* duplicate */
    assert_int_equal(cr_xfer_engine_create(&p, &e), -EINVAL);

    /* defaults: p2p, name "127.0.0.1:<port>" */
    memset(&p, 0, sizeof p);
    p.field_mask = CR_XFER_PARAM_TRANSPORTS;
    p.transports = "tcp";
    assert_int_equal(cr_xfer_engine_create(&p, &e), 0);
    uint16_t port = cr_xfer_engine_port(e);
    assert_true(port > 0);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%u", port);
    assert_string_equal(cr_xfer_engine_name(e), want);

    /* the same port again: -EADDRINUSE */
    cr_xfer_engine_t *e2 = NULL;
    p.field_mask |= CR_XFER_PARAM_PORT;
    p.port = port;
    assert_int_equal(cr_xfer_engine_create(&p, &e2), -EADDRINUSE);
    cr_xfer_engine_destroy(e);
    cr_xfer_engine_destroy(NULL);
}

/* ---- registration --------------------------------------------------------- */

static void test_register(void **state)
{
    fix_t *f = *state;
    char *x = f->abuf; /* already registered as a whole */
    assert_int_equal(cr_xfer_mem_register(f->a, x + 100, 10, NULL), -EEXIST);
    assert_int_equal(cr_xfer_mem_register(f->a, NULL, 10, NULL), -EINVAL);
    static char other[8192];
    assert_int_equal(cr_xfer_mem_register(f->a, other, 0, NULL), -EINVAL);
    assert_int_equal(cr_xfer_mem_register(f->a, other, 4096, "gpu:3"), 0);
    assert_int_equal(cr_xfer_mem_register(f->a, other + 4095, 2, NULL), -EEXIST);
    assert_int_equal(cr_xfer_mem_register(f->a, other + 4096, 4096, NULL), 0);
    assert_int_equal(cr_xfer_mem_unregister(f->a, other + 1), -ENOENT);
    assert_int_equal(cr_xfer_mem_unregister(f->a, other), 0);
    assert_int_equal(cr_xfer_mem_unregister(f->a, other), -ENOENT);
    assert_int_equal(cr_xfer_mem_unregister(f->a, other + 4096), 0);
}

/* ---- segments ------------------------------------------------------------- */

static void test_segments(void **state)
{
    fix_t *f = *state;
    cr_xfer_segment_t s2;
    assert_int_equal(cr_xfer_segment_open(f->a, cr_xfer_engine_name(f->b), &s2), 0);
    assert_int_equal(s2, f->seg); /* same name, same handle */
    assert_string_equal(cr_xfer_segment_transport(f->a, s2), "tcp");
    cr_xfer_buffer_info_t bi[4];
    size_t n = 0;
    assert_int_equal(cr_xfer_segment_buffers(f->a, s2, bi, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(bi[0].addr, (uint64_t)(uintptr_t)f->bbuf);
    assert_int_equal(bi[0].len, f->len);
    assert_string_equal(bi[0].location, "cpu:0");
    assert_int_equal(cr_xfer_segment_close(f->a, s2), 0); /* drops the extra reference */
    assert_null(cr_xfer_segment_transport(f->a, 12345));
    assert_int_equal(cr_xfer_segment_close(f->a, 12345), -ENOENT);

    cr_xfer_segment_t bad;
    assert_int_equal(cr_xfer_segment_open(f->a, "not-host-port", &bad), -ENOENT);
    /* nobody listens on port 1 */
    int rc = cr_xfer_segment_open(f->a, "127.0.0.1:1", &bad);
    assert_true(rc == -EHOSTUNREACH || rc == -ECONNREFUSED);

    /* the own segment can be opened too */
    cr_xfer_segment_t self;
    assert_int_equal(cr_xfer_segment_open(f->a, cr_xfer_engine_name(f->a), &self), 0);
    assert_int_equal(cr_xfer_segment_close(f->a, self), 0);
    assert_int_equal(cr_xfer_segment_close(f->a, self), -ENOENT);
}

/* ---- data ----------------------------------------------------------------- */

static void roundtrip(fix_t *f, char *abuf, char *bbuf, size_t len, size_t aoff, size_t boff,
                      uint32_t seed)
{
    /* WRITE a -> b */
    xt_fill(abuf + aoff, len, 0, seed);
    cr_xfer_request_t r = req(CR_XFER_WRITE, abuf + aoff, f->seg, bbuf + boff, len);
    int res = 1;
    int rc = cr_xfer_transfer_sync(f->a, &r, 1, &res);
    if (rc)
        fprintf(stderr, "WRITE len %zu: %s\n", len, cr_strerror(rc));
    assert_int_equal(rc, 0);
    assert_int_equal(res, 0);
    assert_int_equal(xt_check(bbuf + boff, len, 0, seed, "after WRITE"), -1);
    /* READ b -> a (different pattern so stale data would show) */
    xt_fill(bbuf + boff, len, 7, seed + 1);
    memset(abuf + aoff, 0, len);
    r = req(CR_XFER_READ, abuf + aoff, f->seg, bbuf + boff, len);
    rc = cr_xfer_transfer_sync(f->a, &r, 1, NULL);
    if (rc)
        fprintf(stderr, "READ len %zu: %s\n", len, cr_strerror(rc));
    assert_int_equal(rc, 0);
    assert_int_equal(xt_check(abuf + aoff, len, 7, seed + 1, "after READ"), -1);
}

static void test_sizes(void **state)
{
    fix_t *f = *state;
    const size_t sizes[] = {1, 2, 3, 7, 255, 4095, 4096, 4097, 65535, 65536 + 3,
                            (256u << 10) + 1, (1u << 20) - 1, (4u << 20) + 17, 16u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        roundtrip(f, f->abuf, f->bbuf, sizes[i], 1 + (i * 13) % 61, 3 + (i * 7) % 53,
                  (uint32_t)i + 1);
}

static void test_256mib(void **state)
{
    fix_t *f = *state;
    size_t len = xt_sanitized() ? (32u << 20) : (256u << 20);
    size_t cap = len + 8192;
    char *a = xt_alloc(cap), *b = xt_alloc(cap);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(cr_xfer_mem_register(f->a, a, cap, NULL), 0);
    assert_int_equal(cr_xfer_mem_register(f->b, b, cap, NULL), 0);
    roundtrip(f, a, b, len, 5, 4099, 99);
    assert_int_equal(cr_xfer_mem_unregister(f->a, a), 0);
    assert_int_equal(cr_xfer_mem_unregister(f->b, b), 0);
    xt_free(a, cap);
    xt_free(b, cap);
}

static void test_batch_1024(void **state)
{
    fix_t *f = *state;
    enum { N = 1024 };
    static cr_xfer_request_t r[N];
    static size_t off[N], lens[N];
    size_t pos = 0;
    for (int i = 0; i < N; i++) {
        lens[i] = 1 + (size_t)((i * 7919u) % 40000u);
        off[i] = pos + (size_t)(i % 5);
        pos = off[i] + lens[i];
    }
    assert_true(pos < f->len);
    /* even requests WRITE, odd ones READ; prepare both sides */
    for (int i = 0; i < N; i++) {
        if (i % 2 == 0) {
            xt_fill(f->abuf + off[i], lens[i], off[i], 1000 + (uint32_t)i);
            memset(f->bbuf + off[i], 0, lens[i]);
        } else {
            xt_fill(f->bbuf + off[i], lens[i], off[i], 2000 + (uint32_t)i);
            memset(f->abuf + off[i], 0, lens[i]);
        }
        r[i] = req(i % 2 ? CR_XFER_READ : CR_XFER_WRITE, f->abuf + off[i], f->seg,
                   f->bbuf + off[i], lens[i]);
    }
    cr_xfer_batch_t *b;
    assert_int_equal(cr_xfer_batch_alloc(f->a, N, &b), 0);
    /* submit in two parts: indices continue */
    assert_int_equal(cr_xfer_batch_submit(b, r, 600), 0);
    assert_int_equal(cr_xfer_batch_submit(b, r + 600, N - 600), 0);
    assert_int_equal(cr_xfer_batch_submit(b, r, 1), -EINVAL); /* over capacity */
    assert_int_equal(cr_xfer_batch_wait(b, 60000), 0);
    cr_xfer_status_t st;
    assert_int_equal(cr_xfer_batch_status_all(b, &st), 0);
    assert_int_equal(st.state, CR_XFER_STATE_COMPLETED);
    uint64_t total = 0;
    for (int i = 0; i < N; i++) {
        total += lens[i];
        assert_int_equal(cr_xfer_batch_status(b, (size_t)i, &st), 0);
        assert_int_equal(st.state, CR_XFER_STATE_COMPLETED);
        assert_int_equal(st.bytes_transferred, lens[i]);
        if (i % 2 == 0)
            assert_int_equal(xt_check(f->bbuf + off[i], lens[i], off[i], 1000 + (uint32_t)i, "batch W"), -1);
        else
            assert_int_equal(xt_check(f->abuf + off[i], lens[i], off[i], 2000 + (uint32_t)i, "batch R"), -1);
    }
    assert_int_equal(cr_xfer_batch_status_all(b, &st), 0);
    assert_int_equal(st.bytes_transferred, total);
    assert_int_equal(cr_xfer_batch_status(b, N, &st), -EINVAL);
    assert_int_equal(cr_xfer_batch_free(b), 0);
}

/* the largest batch: CR_XFER_BATCH_MAX tiny requests, READ and WRITE mixed */
static void test_batch_max(void **state)
{
    fix_t *f = *state;
    size_t n = CR_XFER_BATCH_MAX, len = 24;
    cr_xfer_request_t *r = calloc(n, sizeof *r);
    xt_fill(f->abuf, n * len, 0, 71);
    xt_fill(f->bbuf + (32u << 20), n * len, 0, 72);
    for (size_t i = 0; i < n; i++) {
        size_t off = i * len;
        if (i % 2 == 0)
            r[i] = req(CR_XFER_WRITE, f->abuf + off, f->seg, f->bbuf + off, len);
        else
            r[i] = req(CR_XFER_READ, f->abuf + off, f->seg, f->bbuf + (32u << 20) + off, len);
    }
    cr_xfer_batch_t *b;
    assert_int_equal(cr_xfer_batch_alloc(f->a, n, &b), 0);
    assert_int_equal(cr_xfer_batch_submit(b, r, n), 0);
    assert_int_equal(cr_xfer_batch_wait(b, 60000), 0);
    cr_xfer_status_t st;
    assert_int_equal(cr_xfer_batch_status_all(b, &st), 0);
    assert_int_equal(st.bytes_transferred, n * len);
    assert_int_equal(cr_xfer_batch_free(b), 0);
    for (size_t i = 0; i < n; i++) {
        size_t off = i * len;
        if (i % 2 == 0)
            assert_int_equal(xt_check(f->bbuf + off, len, off, 71, "max batch W"), -1);
        else
            assert_int_equal(xt_check(f->abuf + off, len, off, 72, "max batch R"), -1);
    }
    free(r);
}

/* ---- bad requests ------------------------------------------------------------ */

static void test_bad_requests(void **state)
{
    fix_t *f = *state;
    static char unreg[4096];
    char *bend = f->bbuf + f->len;
    xt_fill(f->abuf, 4096, 0, 5);
    cr_xfer_request_t r[] = {
        req(CR_XFER_WRITE, f->abuf, f->seg, f->bbuf, 4096),             /* ok */
        req(CR_XFER_WRITE, f->abuf, f->seg, bend - 10, 4096),          /* crosses the end */
        req(CR_XFER_READ, f->abuf, f->seg, (void *)(uintptr_t)16, 8),  /* not registered */
        req(CR_XFER_WRITE, unreg, f->seg, f->bbuf, 100),               /* local unregistered */
        req(CR_XFER_WRITE, f->abuf, 777, f->bbuf, 100),                /* unknown segment */
        req(CR_XFER_WRITE, f->abuf, f->seg, f->bbuf, 0),               /* zero length */
        req(CR_XFER_WRITE, f->abuf, f->seg, f->bbuf, 1ull << 41),      /* oversized */
        req(CR_XFER_READ, f->abuf + 8192, f->seg, f->bbuf, 4096),      /* ok */
    };
    const int want[] = {0, -EFAULT, -EFAULT, -EFAULT, -ENOENT, -EINVAL, -EINVAL, 0};
    enum { N = sizeof r / sizeof r[0] };
    r[4].opcode = CR_XFER_WRITE;
    cr_xfer_request_t bad_op = r[0];
    bad_op.opcode = (cr_xfer_opcode_t)9;
    int res[N];
    int rc = cr_xfer_transfer_sync(f->a, r, N, res);
    assert_int_equal(rc, -EFAULT); /* the first failure */
    for (int i = 0; i < N; i++) {
        if (res[i] != want[i])
            fprintf(stderr, "request %d: expected %d got %d\n", i, want[i], res[i]);
        assert_int_equal(res[i], want[i]);
    }
    assert_int_equal(xt_check(f->bbuf, 4096, 0, 5, "ok write among bad"), -1);
    assert_int_equal(cr_xfer_transfer_sync(f->a, &bad_op, 1, res), -EINVAL);

    cr_xfer_batch_t *b;
    assert_int_equal(cr_xfer_batch_alloc(f->a, 0, &b), -EINVAL);
    assert_int_equal(cr_xfer_batch_alloc(f->a, CR_XFER_BATCH_MAX + 1, &b), -EINVAL);
    assert_int_equal(cr_xfer_batch_alloc(f->a, 2, &b), 0);
    assert_int_equal(cr_xfer_batch_submit(b, r + 1, 1), 0);
    assert_int_equal(cr_xfer_batch_wait(b, 5000), -EFAULT);
    cr_xfer_status_t st;
    assert_int_equal(cr_xfer_batch_status_all(b, &st), 0);
    assert_int_equal(st.state, CR_XFER_STATE_FAILED);
    assert_int_equal(st.error, -EFAULT);
    assert_int_equal(cr_xfer_batch_free(b), 0);
}

/* The target unregisters a buffer the initiator still has in its cached
 * descriptor: the serving side must refuse, and not touch the memory. A
 * buffer registered after the open is found by a refetch. */
static void test_stale_descriptor(void **state)
{
    fix_t *f = *state;
    size_t len = 1u << 20;
    char *nb = xt_alloc(len);
    assert_int_equal(cr_xfer_mem_register(f->b, nb, len, "cpu:0"), 0);
    xt_fill(f->abuf, len, 0, 77);
    cr_xfer_request_t r = req(CR_XFER_WRITE, f->abuf, f->seg, nb, len);
    assert_int_equal(cr_xfer_transfer_sync(f->a, &r, 1, NULL), 0); /* refetch found it */
    assert_int_equal(xt_check(nb, len, 0, 77, "new buffer"), -1);

    assert_int_equal(cr_xfer_mem_unregister(f->b, nb), 0);
    memset(nb, 0x5a, len);
    xt_fill(f->abuf, len, 0, 78);
    int res = 0;
    /* the cached descriptor still lists nb: the target refuses, or the
     * refetch drops it; either way -EFAULT and nb untouched */
    assert_int_equal(cr_xfer_transfer_sync(f->a, &r, 1, &res), -EFAULT);
    r.opcode = CR_XFER_READ;
    assert_int_equal(cr_xfer_transfer_sync(f->a, &r, 1, &res), -EFAULT);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)nb[i] != 0x5a) {
            fprintf(stderr, "unregistered memory changed at %zu\n", i);
            fail();
        }

    /* refused slices in the middle of valid ones: the reply stream stays in
     * sync (refused READs are padded), the valid requests complete intact */
    enum { M = 9 };
    cr_xfer_request_t mix[M];
    size_t chunk = 256u << 10;
    for (int i = 0; i < M; i++) {
        size_t off = (size_t)i * chunk;
        if (i % 3 == 1) { /* refused by the target (still in the cached descriptor) */
            mix[i] = req(i % 2 ? CR_XFER_READ : CR_XFER_WRITE, f->abuf + (32u << 20) + off, f->seg,
                         nb + off % len, chunk);
        } else if (i % 2) {
            xt_fill(f->bbuf + off, chunk, off, 300 + (uint32_t)i);
            mix[i] = req(CR_XFER_READ, f->abuf + off, f->seg, f->bbuf + off, chunk);
        } else {
            xt_fill(f->abuf + off, chunk, off, 300 + (uint32_t)i);
            mix[i] = req(CR_XFER_WRITE, f->abuf + off, f->seg, f->bbuf + off, chunk);
        }
    }
    int mres[M];
    assert_int_equal(cr_xfer_transfer_sync(f->a, mix, M, mres), -EFAULT);
    for (int i = 0; i < M; i++) {
        size_t off = (size_t)i * chunk;
        if (i % 3 == 1) {
            assert_int_equal(mres[i], -EFAULT);
            continue;
        }
        assert_int_equal(mres[i], 0);
        const char *dst = i % 2 ? f->abuf : f->bbuf;
        assert_int_equal(xt_check(dst + off, chunk, off, 300 + (uint32_t)i, "mixed batch"), -1);
    }
    xt_free(nb, len);
}

/* ---- notifications --------------------------------------------------------- */

static size_t poll_until(cr_xfer_engine_t *e, cr_xfer_notify_t *out, size_t cap, size_t want,
                         int timeout_ms)
{
    size_t got = 0;
    uint64_t end = xt_now_ms() + (uint64_t)timeout_ms;
    while (got < want && xt_now_ms() < end) {
        size_t n = 0;
        assert_int_equal(cr_xfer_notify_poll(e, out + got, cap - got, &n), 0);
        got += n;
        if (got < want)
            usleep(2000);
    }
    return got;
}

static void test_notify(void **state)
{
    fix_t *f = *state;
    static cr_xfer_notify_t out[400];
    assert_int_equal(cr_xfer_notify_send(f->a, f->seg, "hello", 5), 0);
    assert_int_equal(poll_until(f->b, out, 400, 1, 5000), 1);
    assert_string_equal(out[0].from, cr_xfer_engine_name(f->a));
    assert_int_equal(out[0].len, 5);
    assert_memory_equal(out[0].msg, "hello", 5);
    char big[CR_XFER_NOTIFY_MAX + 1];
    memset(big, 'x', sizeof big);
    assert_int_equal(cr_xfer_notify_send(f->a, f->seg, big, sizeof big), -EINVAL);
    assert_int_equal(cr_xfer_notify_send(f->a, f->seg, big, CR_XFER_NOTIFY_MAX), 0);
    assert_int_equal(cr_xfer_notify_send(f->a, f->seg, NULL, 0), 0);
    assert_int_equal(poll_until(f->b, out, 400, 2, 5000), 2);
    assert_int_equal(out[0].len, CR_XFER_NOTIFY_MAX);
    assert_int_equal(out[1].len, 0);
    assert_int_equal(cr_xfer_notify_send(f->a, 4321, "x", 1), -ENOENT);

    /* bounded queue: 300 sent, the newest 256 kept, oldest first */
    for (int i = 0; i < 300; i++) {
        char m[16];
        int l = snprintf(m, sizeof m, "m%d", i);
        assert_int_equal(cr_xfer_notify_send(f->a, f->seg, m, (size_t)l), 0);
    }
    size_t n = 0;
    assert_int_equal(cr_xfer_notify_poll(f->b, out, 400, &n), 0);
    assert_int_equal(n, CR__XFER_NOTIFY_QUEUE);
    char m0[16];
    snprintf(m0, sizeof m0, "m%d", 300 - CR__XFER_NOTIFY_QUEUE);
    assert_int_equal(out[0].len, strlen(m0));
    assert_memory_equal(out[0].msg, m0, strlen(m0));
    assert_int_equal(cr_xfer_notify_poll(f->b, out, 400, &n), 0);
    assert_int_equal(n, 0);
}

static void test_batch_notify(void **state)
{
    fix_t *f = *state;
    static cr_xfer_notify_t out[4];
    size_t len = 8u << 20;
    xt_fill(f->abuf, len, 0, 31);
    memset(f->bbuf, 0, len);
    cr_xfer_request_t r[8];
    for (int i = 0; i < 8; i++)
        r[i] = req(CR_XFER_WRITE, f->abuf + (size_t)i * (len / 8), f->seg,
                   f->bbuf + (size_t)i * (len / 8), len / 8);
    cr_xfer_batch_t *b;
    assert_int_equal(cr_xfer_batch_alloc(f->a, 8, &b), 0);
    assert_int_equal(cr_xfer_batch_submit(b, r, 8), 0);
    assert_int_equal(cr_xfer_batch_notify(b, f->seg, "landed", 6), 0);
    /* the receiver sees the notification only after all 8 MiB landed */
    assert_int_equal(poll_until(f->b, out, 4, 1, 10000), 1);
    assert_int_equal(out[0].len, 6);
    assert_memory_equal(out[0].msg, "landed", 6);
    assert_int_equal(xt_check(f->bbuf, len, 0, 31, "data before notification"), -1);
    assert_int_equal(cr_xfer_batch_wait(b, 5000), 0);
    assert_int_equal(cr_xfer_batch_notify(b, 999, "x", 1), -EINVAL);
    assert_int_equal(cr_xfer_batch_free(b), 0);

    /* a failed write to the target drops the notification */
    assert_int_equal(cr_xfer_batch_alloc(f->a, 2, &b), 0);
    r[1] = req(CR_XFER_WRITE, f->abuf, f->seg, f->bbuf + f->len - 1, 2);
    assert_int_equal(cr_xfer_batch_submit(b, r, 2), 0);
    assert_int_equal(cr_xfer_batch_notify(b, f->seg, "never", 5), 0);
    assert_int_equal(cr_xfer_batch_wait(b, 5000), -EFAULT);
    assert_int_equal(cr_xfer_batch_free(b), 0);
    assert_int_equal(poll_until(f->b, out, 4, 1, 500), 0);

    /* more than 16 notifications released by one completing write are all
     * sent (regression: the 17th and later were dropped without a log
     * line) */
    static cr_xfer_notify_t many[32];
    enum { N_NOTIFY = 24 };
    r[0] = req(CR_XFER_WRITE, f->abuf, f->seg, f->bbuf, len);
    assert_int_equal(cr_xfer_batch_alloc(f->a, 1, &b), 0);
    assert_int_equal(cr_xfer_batch_submit(b, r, 1), 0);
    for (int i = 0; i < N_NOTIFY; i++) {
        char m[8];
        int ml = snprintf(m, sizeof m, "n%d", i);
        assert_int_equal(cr_xfer_batch_notify(b, f->seg, m, (size_t)ml), 0);
    }
    assert_int_equal(cr_xfer_batch_wait(b, 10000), 0);
    assert_int_equal(poll_until(f->b, many, 32, N_NOTIFY, 10000), N_NOTIFY);
    assert_int_equal(cr_xfer_batch_free(b), 0);
}

/* ---- a peer that never answers ------------------------------------------------ */

static void test_busy_and_timeout(void **state)
{
    (void)state;
    fake_peer_t fp;
    assert_int_equal(fake_peer_start(&fp), 0);
    cr_xfer_engine_t *e;
    assert_int_equal(xt_engine(&e, NULL, "tcp", 1500), 0);
    size_t len = 4u << 20;
    char *buf = xt_alloc(len);
    assert_int_equal(cr_xfer_mem_register(e, buf, len, NULL), 0);
    cr_xfer_segment_t s;
    assert_int_equal(cr_xfer_segment_open(e, fp.name, &s), 0);
    cr_xfer_request_t r[2] = {req(CR_XFER_READ, buf, s, (void *)(uintptr_t)FAKE_BUF_ADDR, len),
                              req(CR_XFER_WRITE, buf, s, (void *)(uintptr_t)FAKE_BUF_ADDR, len)};
    cr_xfer_batch_t *b;
    assert_int_equal(cr_xfer_batch_alloc(e, 2, &b), 0);
    uint64_t t0 = xt_now_ms();
    assert_int_equal(cr_xfer_batch_submit(b, r, 2), 0);
    assert_int_equal(cr_xfer_batch_free(b), -EBUSY);
    assert_int_equal(cr_xfer_batch_wait(b, 50), -ETIMEDOUT);
    cr_xfer_status_t st;
    assert_int_equal(cr_xfer_batch_status_all(b, &st), 0);
    assert_int_equal(st.state, CR_XFER_STATE_WAITING);
    assert_int_equal(cr_xfer_batch_wait(b, -1), -ETIMEDOUT); /* the requests' own error */
    uint64_t took = xt_now_ms() - t0;
    fprintf(stderr, "requests to a hung peer failed after %llu ms (timeout 1500)\n",
            (unsigned long long)took);
    assert_int_equal(cr_xfer_batch_status(b, 1, &st), 0);
    assert_int_equal(st.state, CR_XFER_STATE_FAILED);
    assert_int_equal(st.error, -ETIMEDOUT);
    assert_int_equal(cr_xfer_batch_free(b), 0);
    cr_xfer_engine_destroy(e);
    fake_peer_stop(&fp);
    xt_free(buf, len);
}

/* Regression (issue 11): a frozen storage node held every request to it
 * for the whole request timeout (30 s), in flight and queued. With a stall
 * time, requests to a peer that answers nothing fail with -ETIMEDOUT once
 * the peer made no progress for that long: here the request timeout is ten
 * minutes, so finishing at all (the test's own timeout is 300 s) shows the
 * no-progress abort fired, for the queued path (a batch) and for a lone
 * request the caller runs itself (sync path). */
static void test_frozen_peer_fails_without_timeout(void **state)
{
    (void)state;
    fake_peer_t fp;
    assert_int_equal(fake_peer_start(&fp), 0);
    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_TIMEOUT_MS |
                   CR_XFER_PARAM_STALL_TIMEOUT_MS;
    p.transports = "tcp";
    p.timeout_ms = 600000;
    p.stall_timeout_ms = 300;
    cr_xfer_engine_t *e;
    assert_int_equal(cr_xfer_engine_create(&p, &e), 0);
    size_t len = 4u << 20;
    char *buf = xt_alloc(len);
    assert_int_equal(cr_xfer_mem_register(e, buf, len, NULL), 0);
    cr_xfer_segment_t s;
    assert_int_equal(cr_xfer_segment_open(e, fp.name, &s), 0);
    cr_xfer_request_t r[2] = {req(CR_XFER_READ, buf, s, (void *)(uintptr_t)FAKE_BUF_ADDR, len),
                              req(CR_XFER_WRITE, buf, s, (void *)(uintptr_t)FAKE_BUF_ADDR, len)};
    cr_xfer_batch_t *b;
    assert_int_equal(cr_xfer_batch_alloc(e, 2, &b), 0);
    assert_int_equal(cr_xfer_batch_submit(b, r, 2), 0);
    cr_xfer_status_t st;
    do /* a wait is bounded: loop until the batch itself ended */
        cr_xfer_batch_wait(b, 1000);
    while (cr_xfer_batch_status_all(b, &st) == 0 && st.state == CR_XFER_STATE_WAITING);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(cr_xfer_batch_status(b, i, &st), 0);
        assert_int_equal(st.state, CR_XFER_STATE_FAILED);
        assert_int_equal(st.error, -ETIMEDOUT);
    }
    assert_int_equal(cr_xfer_batch_free(b), 0);
    void *tcp = cr__xfer_transport_state(e, "tcp");
    assert_non_null(tcp);
    assert_true(cr__xfer_tcp_debug_aborts(tcp) >= 1);
    /* a lone small request: run by this thread on a connection of its own */
    int res = 0;
    cr_xfer_request_t one = req(CR_XFER_READ, buf, s, (void *)(uintptr_t)FAKE_BUF_ADDR, 65536);
    assert_int_equal(cr_xfer_transfer_sync(e, &one, 1, &res), -ETIMEDOUT);
    assert_int_equal(res, -ETIMEDOUT);
    /* a stall time beyond the request timeout, or below the minimum, is refused */
    cr_xfer_engine_t *bad;
    p.stall_timeout_ms = 600001;
    assert_int_equal(cr_xfer_engine_create(&p, &bad), -EINVAL);
    p.stall_timeout_ms = 10;
    assert_int_equal(cr_xfer_engine_create(&p, &bad), -EINVAL);
    cr_xfer_engine_destroy(e);
    fake_peer_stop(&fp);
    xt_free(buf, len);
}

/* Connects from src (a loopback address) to 127.0.0.1:port. Returns the fd. */
static int raw_connect(const char *src, uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    a.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Regression (issue 11): with security off, 1,024 idle connections locked
 * everyone out of a node's TE port with no time limit. Now (both modes) a
 * connection that sends nothing is closed at the first-frame deadline, and
 * one address may hold at most half of a listener's connections, so a
 * client from another address is still served while one floods. */
static void test_listeners_bound_idle_and_per_source(void **state)
{
    (void)state;
    cr_xfer_engine_t *e, *client;
    assert_int_equal(xt_engine(&e, NULL, "tcp", 1000), 0); /* first-frame deadline 1 s */
    uint16_t ctl = cr_xfer_engine_port(e), data = e->local.nics[0].port;
    assert_true(ctl > 0 && data > 0 && ctl != data);
    /* an idle connection to either listener is closed by the server (EOF),
     * long before this recv's own 60 s limit */
    uint16_t ports[2] = {data, ctl};
    for (int i = 0; i < 2; i++) {
        int fd = raw_connect("127.0.0.1", ports[i]);
        struct timeval tv = {.tv_sec = 60};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char c;
        ssize_t n = recv(fd, &c, 1, 0);
        if (n != 0)
            fail_msg("idle connection to port %u: recv %zd (errno %d), want EOF", ports[i], n,
                     errno);
        close(fd);
    }
    cr_xfer_engine_destroy(e);

    /* per source: 127.0.0.2 fills the control listener with connections that
     * sent a first byte and then stall mid-header (held up to the 30 s
     * timeout); a client from 127.0.0.1 must still get the descriptor */
    assert_int_equal(xt_engine(&e, NULL, "tcp", 30000), 0);
    ctl = cr_xfer_engine_port(e);
    enum { FLOOD = CR__XFER_CTL_MAX_CONNS + 8 };
    int fds[FLOOD];
    for (int i = 0; i < FLOOD; i++) {
        fds[i] = raw_connect("127.0.0.2", ctl);
        assert_int_equal(send(fds[i], "C", 1, MSG_NOSIGNAL), 1);
    }
    /* the server refuses the surplus of 127.0.0.2 at once: wait until it
     * has closed at least the connections past its per-source share */
    int closed = 0;
    for (int i = 0; i < FLOOD; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        if (poll(&p, 1, i >= CR__XFER_CTL_MAX_CONNS / 2 ? 20000 : 0) == 1)
            closed++;
    }
    fprintf(stderr, "%d of %d flood connections refused\n", closed, FLOOD);
    assert_true(closed >= FLOOD - CR__XFER_CTL_MAX_CONNS / CR__XFER_PER_SOURCE_DIV);
    assert_int_equal(xt_engine(&client, NULL, "tcp", 30000), 0);
    cr_xfer_segment_t h;
    assert_int_equal(cr_xfer_segment_open(client, cr_xfer_engine_name(e), &h), 0);
    cr_xfer_engine_destroy(client);
    for (int i = 0; i < FLOOD; i++)
        close(fds[i]);
    cr_xfer_engine_destroy(e);
}

/* transports = "shm" only: a peer on another host (the fake peer's host id)
 * cannot be reached; the engine still serves its control port */
static void test_shm_only_remote_peer(void **state)
{
    (void)state;
    fake_peer_t fp;
    assert_int_equal(fake_peer_start(&fp), 0);
    cr_xfer_engine_t *e;
    assert_int_equal(xt_engine(&e, NULL, "shm", 2000), 0);
    assert_true(cr_xfer_engine_port(e) > 0);
    cr_xfer_segment_t s;
    assert_int_equal(cr_xfer_segment_open(e, fp.name, &s), -EHOSTUNREACH);
    cr_xfer_engine_destroy(e);
    fake_peer_stop(&fp);
}

typedef struct waiter {
    cr_xfer_batch_t *b;
    int rc;
} waiter_t;

static void *wait_thread(void *arg)
{
    waiter_t *w = arg;
    w->rc = cr_xfer_batch_wait(w->b, 20000);
    return NULL;
}

static void test_destroy_cancels(void **state)
{
    (void)state;
    fake_peer_t fp;
    assert_int_equal(fake_peer_start(&fp), 0);
    cr_xfer_engine_t *e;
    assert_int_equal(xt_engine(&e, NULL, "tcp", 20000), 0);
    size_t len = 1u << 20;
    char *buf = xt_alloc(len);
    assert_int_equal(cr_xfer_mem_register(e, buf, len, NULL), 0);
    cr_xfer_segment_t s;
    assert_int_equal(cr_xfer_segment_open(e, fp.name, &s), 0);
    cr_xfer_request_t r = req(CR_XFER_READ, buf, s, (void *)(uintptr_t)FAKE_BUF_ADDR, len);
    waiter_t w = {0};
    assert_int_equal(cr_xfer_batch_alloc(e, 1, &w.b), 0);
    assert_int_equal(cr_xfer_batch_submit(w.b, &r, 1), 0);
    pthread_t th;
    pthread_create(&th, NULL, wait_thread, &w);
    /* destroy only once the thread sits in cr_xfer_batch_wait() */
    for (int waiting = 0; !waiting;) {
        pthread_mutex_lock(&w.b->lock);
        waiting = w.b->waiters > 0;
        pthread_mutex_unlock(&w.b->lock);
        usleep(1000);
    }
    uint64_t t0 = xt_now_ms();
    cr_xfer_engine_destroy(e); /* frees the batch too */
    pthread_join(th, NULL);
    fprintf(stderr, "destroy with a request in flight took %llu ms\n",
            (unsigned long long)(xt_now_ms() - t0));
    assert_int_equal(w.rc, -ECANCELED);
    fake_peer_stop(&fp);
    xt_free(buf, len);
}

/* several threads submit batches to the same peer at once (each to its own
 * region), while another thread registers and unregisters unrelated memory
 * on both engines; every byte is checked */
typedef struct worker {
    fix_t *f;
    int id, rounds, failures;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    fix_t *f = w->f;
    size_t region = f->len / 4, base = (size_t)w->id * region;
    for (int r = 0; r < w->rounds; r++) {
        enum { N = 16 };
        cr_xfer_request_t q[N];
        size_t off = base, lens[N], offs[N];
        uint32_t seed = (uint32_t)(w->id * 1000 + r);
        for (int i = 0; i < N; i++) {
            lens[i] = 1 + ((size_t)(i + 1) * 7919u * (size_t)(r + 1)) % (region / N - 64);
            offs[i] = off + (size_t)(i % 3);
            off += region / N;
            int wr = (i + r) % 2 == 0;
            if (wr)
                xt_fill(f->abuf + offs[i], lens[i], offs[i], seed + (uint32_t)i);
            else
                xt_fill(f->bbuf + offs[i], lens[i], offs[i], seed + (uint32_t)i);
            q[i] = req(wr ? CR_XFER_WRITE : CR_XFER_READ, f->abuf + offs[i], f->seg,
                       f->bbuf + offs[i], lens[i]);
        }
        cr_xfer_batch_t *b;
        if (cr_xfer_batch_alloc(f->a, N, &b) || cr_xfer_batch_submit(b, q, N) ||
            cr_xfer_batch_wait(b, 30000) || cr_xfer_batch_free(b)) {
            w->failures++;
            continue;
        }
        for (int i = 0; i < N; i++) {
            const char *dst = q[i].opcode == CR_XFER_WRITE ? f->bbuf : f->abuf;
            if (xt_check(dst + offs[i], lens[i], offs[i], seed + (uint32_t)i, "concurrent") >= 0)
                w->failures++;
        }
    }
    return NULL;
}

static atomic_int churn_stop;

static void *churn_main(void *arg)
{
    fix_t *f = arg;
    static char m1[8192], m2[8192];
    while (!churn_stop) {
        if (cr_xfer_mem_register(f->a, m1, sizeof m1, "cpu:0") ||
            cr_xfer_mem_register(f->b, m2, sizeof m2, "cpu:0") ||
            cr_xfer_mem_unregister(f->a, m1) || cr_xfer_mem_unregister(f->b, m2))
            abort();
        usleep(500);
    }
    return NULL;
}

static void test_concurrent_submitters(void **state)
{
    fix_t *f = *state;
    worker_t w[4];
    pthread_t th[4], churn;
    churn_stop = 0;
    pthread_create(&churn, NULL, churn_main, f);
    for (int i = 0; i < 4; i++) {
        w[i] = (worker_t){.f = f, .id = i, .rounds = xt_sanitized() ? 10 : 40};
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    int failures = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        failures += w[i].failures;
    }
    churn_stop = 1;
    pthread_join(churn, NULL);
    assert_int_equal(failures, 0);
}

/* default transports ("tcp,shm"): a same-host peer uses shm when it is
 * built in; data and batch notifications (sent over tcp) still work */
static void test_default_transports(void **state)
{
    (void)state;
    cr_xfer_engine_t *a, *b;
    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    assert_int_equal(cr_xfer_engine_create(&p, &a), 0);
    assert_int_equal(cr_xfer_engine_create(&p, &b), 0);
    size_t len = 8u << 20;
    char *abuf = xt_alloc(len), *bbuf = xt_alloc(len);
    assert_int_equal(cr_xfer_mem_register(a, abuf, len, NULL), 0);
    assert_int_equal(cr_xfer_mem_register(b, bbuf, len, NULL), 0);
    cr_xfer_segment_t s;
    assert_int_equal(cr_xfer_segment_open(a, cr_xfer_engine_name(b), &s), 0);
    const char *t = cr_xfer_segment_transport(a, s);
    fprintf(stderr, "same-host peer uses %s\n", t);
    assert_string_equal(t, "shm");
    fix_t f = {.a = a, .b = b, .seg = s, .len = len, .abuf = abuf, .bbuf = bbuf};
    roundtrip(&f, abuf, bbuf, len - 100, 3, 5, 61);
    roundtrip(&f, abuf, bbuf, 1, 0, 0, 62);

    static cr_xfer_notify_t out[2];
    xt_fill(abuf, len, 0, 63);
    cr_xfer_request_t r = req(CR_XFER_WRITE, abuf, s, bbuf, len);
    cr_xfer_batch_t *bt;
    assert_int_equal(cr_xfer_batch_alloc(a, 1, &bt), 0);
    assert_int_equal(cr_xfer_batch_submit(bt, &r, 1), 0);
    assert_int_equal(cr_xfer_batch_notify(bt, s, "ok", 2), 0);
    assert_int_equal(poll_until(b, out, 2, 1, 10000), 1);
    assert_int_equal(xt_check(bbuf, len, 0, 63, "shm data before notification"), -1);
    assert_int_equal(cr_xfer_batch_wait(bt, 5000), 0);
    assert_int_equal(cr_xfer_batch_free(bt), 0);
    cr_xfer_engine_destroy(a);
    cr_xfer_engine_destroy(b);
    xt_free(abuf, len);
    xt_free(bbuf, len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test_setup_teardown(test_register, setup, teardown),
        cmocka_unit_test_setup_teardown(test_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_256mib, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_1024, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_max, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_descriptor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_notify, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_notify, setup, teardown),
        cmocka_unit_test(test_busy_and_timeout),
        cmocka_unit_test(test_frozen_peer_fails_without_timeout),
        cmocka_unit_test(test_listeners_bound_idle_and_per_source),
        cmocka_unit_test(test_destroy_cancels),
        cmocka_unit_test(test_shm_only_remote_peer),
        cmocka_unit_test(test_default_transports),
        cmocka_unit_test_setup_teardown(test_concurrent_submitters, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
