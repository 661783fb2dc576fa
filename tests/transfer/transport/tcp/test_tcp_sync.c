/* tcp sync path: a lone request submitted through cr_xfer_transfer_sync is
 * run by the calling thread on a connection of its own (tcp_client.c).
 * Checks which requests take it (counted by tcp_state.sync_done), that the
 * bytes are right both ways, that a status refused by the target is final
 * and leaves the connection usable, and that a cut connection hands the
 * request to the queue (which owns failover) instead of failing it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../core/xfer_test_util.h"
#include "common/crc32c.h"
#include "transfer/checksum.h"
#include "transfer/transport/tcp/tcp_internal.h"
#include "transfer/xfer_internal.h"

#include "tcp_pair_fx.h"

#define BUF (32u << 20)

typedef tcp_fx_t fx_t;

static uint64_t sync_done(cr_xfer_engine_t *e)
{
    return atomic_load(&((tcp_state_t *)cr__xfer_transport_state(e, "tcp"))->sync_done);
}

static int setup(void **state)
{
    *state = tcp_fx_open(BUF, 256u << 10 /* a 1 MiB request is 4 slices */, 10000);
    return 0;
}

static int teardown(void **state)
{
    tcp_fx_close(*state);
    return 0;
}

static int one(fx_t *f, cr_xfer_opcode_t op, size_t aoff, uint64_t raddr, size_t len)
{
    cr_xfer_request_t r = {op, f->abuf + aoff, f->seg, raddr, len};
    int res = 1;
    int rc = cr_xfer_transfer_sync(f->a, &r, 1, &res);
    return rc ? rc : res;
}

/* lone requests up to one in-flight window (1 MiB) run in the caller;
 * bytes right both ways */
static void test_lone_requests_take_sync_path(void **state)
{
    fx_t *f = *state;
    uint64_t b = (uint64_t)(uintptr_t)f->bbuf;
    size_t sizes[] = {1, 4096, 65536 + 3, 1u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t len = sizes[i];
        uint64_t before = sync_done(f->a);
        xt_fill(f->abuf, len, 0, (uint32_t)(10 + i));
        assert_int_equal(one(f, CR_XFER_WRITE, 0, b + 7, len), 0);
        assert_int_equal(xt_check(f->bbuf + 7, len, 0, (uint32_t)(10 + i), "sync write"), -1);
        memset(f->abuf + (8u << 20), 0, len);
        assert_int_equal(one(f, CR_XFER_READ, 8u << 20, b + 7, len), 0);
        assert_int_equal(xt_check(f->abuf + (8u << 20), len, 0, (uint32_t)(10 + i), "sync read"),
                         -1);
        if (sync_done(f->a) != before + 2)
            fail_msg("size %zu: expected 2 requests on the sync path, got %llu", len,
                     (unsigned long long)(sync_done(f->a) - before));
    }
}

/* larger lone requests and batches of several go through the queue */
static void test_big_and_batched_requests_are_queued(void **state)
{
    fx_t *f = *state;
    uint64_t b = (uint64_t)(uintptr_t)f->bbuf;
    uint64_t before = sync_done(f->a);
    size_t big = (1u << 20) + 4096;
    xt_fill(f->abuf, big, 0, 77);
    assert_int_equal(one(f, CR_XFER_WRITE, 0, b, big), 0);
    assert_int_equal(xt_check(f->bbuf, big, 0, 77, "queued big write"), -1);
    cr_xfer_request_t r[2] = {{CR_XFER_WRITE, f->abuf, f->seg, b + (16u << 20), 4096},
                              {CR_XFER_WRITE, f->abuf + 4096, f->seg, b + (16u << 20) + 4096, 4096}};
    int res[2] = {1, 1};
    assert_int_equal(cr_xfer_transfer_sync(f->a, r, 2, res), 0);
    assert_int_equal(res[0], 0);
    assert_int_equal(res[1], 0);
    assert_int_equal(xt_check(f->bbuf + (16u << 20), 8192, 0, 77, "queued batch"), -1);
    assert_int_equal(sync_done(f->a), before);
}

/* A batch that wants checksums (transfer/checksum.h) over tcp: the
 * receiver hashes each READ slice as it lands, so every READ is marked and
 * gets the crc32c of what landed (whole slices combined, a request split
 * over several); WRITEs are not hashed (the sender thread is the critical
 * path) and get none, nor does a refused READ; the bytes move as without.
 * (shm hashes both: test_shm_engine test_batch_checksums.) */
static void test_batch_checksums_reads_hashed(void **state)
{
    fx_t *f = *state;
    uint64_t b = (uint64_t)(uintptr_t)f->bbuf;
    size_t lens[] = {1, 4096, (1u << 20) + 3, (3u << 20) + 1};
    enum { N = 2 * sizeof lens / sizeof lens[0] };
    cr_xfer_request_t r[N + 1];
    size_t off = 0;
    for (int op = 0; op < 2; op++)
        for (size_t i = 0; i < N / 2; i++) {
            size_t k = (size_t)op * (N / 2) + i;
            r[k] = (cr_xfer_request_t){op ? CR_XFER_WRITE : CR_XFER_READ, f->abuf + off + 5,
                                       f->seg, b + off + 9, lens[i]};
            off += lens[i] + 4096;
        }
    xt_fill(f->abuf, off + 64, 0, 31);
    xt_fill(f->bbuf, off + 64, 0, 32);
    /* and one the target refuses: beyond its registered memory */
    r[N] = (cr_xfer_request_t){CR_XFER_READ, f->abuf, f->seg, b + BUF, 4096};
    cr_xfer_batch_t *bt;
    assert_int_equal(cr_xfer_batch_alloc(f->a, N + 1, &bt), 0);
    cr__xfer_batch_want_crc(bt);
    assert_int_equal(cr_xfer_batch_submit(bt, r, N + 1), 0);
    for (size_t k = 0; k < N; k++)
        assert_int_equal(cr__xfer_batch_crc_wanted(bt, k), r[k].opcode == CR_XFER_READ);
    assert_int_equal(cr__xfer_batch_crc_wanted(bt, N), 0); /* refused before any transport */
    assert_int_not_equal(cr_xfer_batch_wait(bt, 30000), -ETIMEDOUT); /* r[N]'s error */
    for (size_t k = 0; k < N; k++) {
        cr_xfer_status_t st;
        assert_int_equal(cr_xfer_batch_status(bt, k, &st), 0);
        assert_int_equal(st.error, 0);
        uint32_t c = 0;
        if (r[k].opcode == CR_XFER_READ) {
            assert_int_equal(cr__xfer_batch_crc(bt, k, &c), 0);
            assert_int_equal(c, cr__crc32c(0, r[k].local_addr, r[k].length));
        } else {
            assert_int_equal(cr__xfer_batch_crc(bt, k, &c), -ENODATA);
        }
    }
    /* both ends hold the same bytes (the READs' crcs are of what landed) */
    for (size_t k = 0; k < N; k++)
        assert_int_equal(memcmp(r[k].local_addr, f->bbuf + (r[k].target_addr - b), r[k].length), 0);
    cr_xfer_status_t bad;
    assert_int_equal(cr_xfer_batch_status(bt, N, &bad), 0);
    assert_int_not_equal(bad.error, 0);
    uint32_t c = 0;
    assert_int_equal(cr__xfer_batch_crc(bt, N, &c), -ENODATA);
    assert_int_equal(cr__xfer_batch_crc(bt, N + 1, &c), -EINVAL);
    cr_xfer_batch_free(bt);
    /* a batch without: none */
    assert_int_equal(cr_xfer_batch_alloc(f->a, 2, &bt), 0);
    assert_int_equal(cr_xfer_batch_submit(bt, r, 2), 0);
    assert_int_equal(cr_xfer_batch_wait(bt, 30000), 0);
    assert_int_equal(cr__xfer_batch_crc(bt, 0, &c), -ENODATA);
    cr_xfer_batch_free(bt);
}

/* the target refuses a range it no longer registers (a's descriptor still
 * lists it): the request fails with the target's status, and the same
 * connection serves the next request */
static void test_refused_status_is_final_and_connection_survives(void **state)
{
    fx_t *f = *state;
    uint64_t x = (uint64_t)(uintptr_t)f->bextra;
    assert_int_equal(one(f, CR_XFER_WRITE, 0, x, 4096), 0); /* descriptor cached, conn up */
    assert_int_equal(cr_xfer_mem_unregister(f->b, f->bextra), 0);
    uint64_t before = sync_done(f->a);
    int rc = one(f, CR_XFER_WRITE, 0, x, 65536);
    if (rc == 0)
        fail_msg("a WRITE into unregistered target memory succeeded");
    assert_int_equal(sync_done(f->a), before + 1); /* answered on the sync path */
    xt_fill(f->abuf, 65536, 0, 5);
    assert_int_equal(one(f, CR_XFER_WRITE, 0, (uint64_t)(uintptr_t)f->bbuf, 65536), 0);
    assert_int_equal(xt_check(f->bbuf, 65536, 0, 5, "after a refusal"), -1);
    assert_int_equal(sync_done(f->a), before + 2);
}

/* the target cuts every connection (its NIC goes down and comes back): the
 * caller's connection breaks, the request is handed to the queue and still
 * completes with the right bytes */
static void test_cut_connection_falls_back_to_queue(void **state)
{
    fx_t *f = *state;
    uint64_t b = (uint64_t)(uintptr_t)f->bbuf;
    xt_fill(f->abuf, 1u << 20, 0, 21);
    assert_int_equal(one(f, CR_XFER_WRITE, 0, b, 1u << 20), 0); /* sync conn cached */
    assert_int_equal(cr__xfer_tcp_debug_nic(cr__xfer_transport_state(f->b, "tcp"), 0, 1), 0);
    /* back up; the port may stay busy until the cut connections closed */
    int up = -1;
    for (int i = 0; i < 200 && up; i++) {
        up = cr__xfer_tcp_debug_nic(cr__xfer_transport_state(f->b, "tcp"), 0, 0);
        if (up)
            usleep(10000);
    }
    assert_int_equal(up, 0);
    xt_fill(f->abuf, 1u << 20, 0, 22);
    uint64_t before = sync_done(f->a);
    int rc = one(f, CR_XFER_WRITE, 0, b, 1u << 20);
    if (rc)
        fail_msg("WRITE after the target cut its connections: %s (expected the queue to "
                 "reconnect and finish it)", cr_strerror(rc));
    assert_int_equal(xt_check(f->bbuf, 1u << 20, 0, 22, "after a cut"), -1);
    assert_int_equal(sync_done(f->a), before); /* finished by the queue, not the dead conn */
    /* and the next lone request gets a fresh sync connection */
    assert_int_equal(one(f, CR_XFER_WRITE, 0, b, 4096), 0);
    assert_int_equal(sync_done(f->a), before + 1);
}

/* the target is gone before the first request: the caller's connect is
 * refused, the only path is set aside and the request fails as unreachable,
 * not with a timeout (a refused connect is also how the queue finds out; a
 * silent peer, where the sync path saves the queue's second connect timeout,
 * needs a black-holed address and is not covered here) */
static void test_unreachable_target_fails_fast(void **state)
{
    fx_t *f = *state;
    uint64_t b = (uint64_t)(uintptr_t)f->bbuf;
    cr_xfer_engine_destroy(f->b);
    f->b = NULL;
    int rc = one(f, CR_XFER_WRITE, 0, b, 4096);
    if (rc != -EHOSTUNREACH)
        fail_msg("WRITE to a target that is gone: %s (%d), expected -EHOSTUNREACH",
                 cr_strerror(rc), rc);
    rc = one(f, CR_XFER_READ, 0, b, 65536); /* path set aside: through the queue */
    if (rc == 0)
        fail_msg("READ from a target that is gone succeeded");
}

static uint64_t spin_hits(cr_xfer_engine_t *e)
{
    return atomic_load(&((tcp_state_t *)cr__xfer_transport_state(e, "tcp"))->spin_hits);
}

/* The target busy-polls for the next request only on connections whose
 * caller waits for each reply (the sync path marks its requests
 * CR__TCP_F_WAITS): queued batches never make it spin, back-to-back lone
 * requests do (a 10 ms budget, so any gap of a loaded machine fits), and
 * CRESCENT_TCP_SPIN_US=0 turns it off. Bytes stay right throughout. */
static void test_server_spins_only_for_waiting_callers(void **state)
{
    (void)state;
    for (int on = 1; on >= 0; on--) {
        setenv("CRESCENT_TCP_SPIN_US", on ? "10000" : "0", 1);
        fx_t *f;
        setup((void **)&f);
        unsetenv("CRESCENT_TCP_SPIN_US");
        uint64_t b = (uint64_t)(uintptr_t)f->bbuf;
        for (int i = 0; i < 50; i++) { /* queued: batches of two */
            cr_xfer_request_t r[2] = {{CR_XFER_WRITE, f->abuf, f->seg, b, 4096},
                                      {CR_XFER_WRITE, f->abuf + 4096, f->seg, b + 4096, 4096}};
            int res[2] = {1, 1};
            xt_fill(f->abuf, 8192, 0, (uint32_t)i);
            assert_int_equal(cr_xfer_transfer_sync(f->a, r, 2, res), 0);
            assert_int_equal(res[0] | res[1], 0);
            assert_int_equal(xt_check(f->bbuf, 8192, 0, (uint32_t)i, "queued"), -1);
        }
        assert_int_equal(spin_hits(f->b), 0);
        uint64_t before = sync_done(f->a);
        for (int i = 0; i < 100; i++) { /* lone requests, each waited for */
            xt_fill(f->abuf, 4096, 0, (uint32_t)(100 + i));
            assert_int_equal(one(f, CR_XFER_WRITE, 0, b + 4096u * (unsigned)i, 4096), 0);
            memset(f->abuf + (1u << 20), 0, 4096);
            assert_int_equal(one(f, CR_XFER_READ, 1u << 20, b + 4096u * (unsigned)i, 4096), 0);
            assert_int_equal(xt_check(f->abuf + (1u << 20), 4096, 0, (uint32_t)(100 + i), "lone"),
                             -1);
        }
        assert_int_equal(sync_done(f->a), before + 200);
        if (on && spin_hits(f->b) == 0)
            fail_msg("200 back-to-back lone requests: the target never found one by busy-polling");
        if (!on)
            assert_int_equal(spin_hits(f->b), 0);
        void *fs = f;
        teardown(&fs);
    }
}

/* congestion control: cubic by default; one the kernel refuses falls back
 * to reno and transfers still work */
static void test_congestion_control_choice(void **state)
{
    (void)state;
    unsetenv("CRESCENT_TCP_CC");
    cr_xfer_engine_t *e = tcp_fx_engine(256u << 10, 10000);
    assert_non_null(e);
    assert_string_equal(((tcp_state_t *)cr__xfer_transport_state(e, "tcp"))->cc, "cubic");
    cr_xfer_engine_destroy(e);

    setenv("CRESCENT_TCP_CC", "no-such-cc", 1);
    fx_t *f;
    setup((void **)&f);
    unsetenv("CRESCENT_TCP_CC");
    xt_fill(f->abuf, 1u << 20, 0, 31);
    assert_int_equal(one(f, CR_XFER_WRITE, 0, (uint64_t)(uintptr_t)f->bbuf, 1u << 20), 0);
    assert_int_equal(xt_check(f->bbuf, 1u << 20, 0, 31, "with a refused cc"), -1);
    tcp_state_t *st = cr__xfer_transport_state(f->a, "tcp");
    assert_int_equal(atomic_load(&st->cc_fallback), 1);
    void *fs = f;
    teardown(&fs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lone_requests_take_sync_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_big_and_batched_requests_are_queued, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_checksums_reads_hashed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_status_is_final_and_connection_survives,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_cut_connection_falls_back_to_queue, setup, teardown),
        cmocka_unit_test(test_server_spins_only_for_waiting_callers),
        cmocka_unit_test_setup_teardown(test_unreachable_target_fails_fast, setup, teardown),
        cmocka_unit_test(test_congestion_control_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
