/* tcp receivers' low-water mark (tcp_client.c, receiver_main): while a
 * connection's receiver expects at least twice st->rcvlowat bytes of
 * replies it sleeps until that many are queued (SO_RCVLOWAT). Checks that
 * streamed READs engage it and land the right bytes; that a refused READ in
 * the middle of a stream (answered with zeros) and a mix of READs and
 * WRITEs finish with the right results and bytes while it is engaged (a
 * receiver left waiting would fail them with -ETIMEDOUT); that a fixed
 * socket buffer caps the mark; and that 0 turns it off. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../core/xfer_test_util.h"
#include "transfer/transport/tcp/tcp_internal.h"
#include "transfer/xfer_internal.h"

#include "tcp_pair_fx.h"

#define BUF (64u << 20)
#define MIB (1u << 20)

typedef tcp_fx_t fx_t;

static tcp_state_t *tcp_of(cr_xfer_engine_t *e)
{
    return cr__xfer_transport_state(e, "tcp");
}

/* engines made with the environment as the test left it; b's memory holds
 * pattern 41 */
static int setup(void **state)
{
    fx_t *f = tcp_fx_open(BUF, 0, 20000);
    xt_fill(f->bbuf, BUF, 0, 41);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    tcp_fx_close(*state);
    unsetenv("CRESCENT_TCP_SOCKBUF");
    unsetenv("CRESCENT_TCP_RCVLOWAT");
    return 0;
}

static int setup_fixed_sockbuf(void **state)
{
    setenv("CRESCENT_TCP_SOCKBUF", "65536", 1);
    return setup(state);
}

static int setup_off(void **state)
{
    setenv("CRESCENT_TCP_RCVLOWAT", "0", 1);
    return setup(state);
}

/* READs of b's pattern into a, n requests of len bytes each (odd lengths
 * allowed), 3 rounds; every result 0 and every byte right */
static void stream_reads(fx_t *f, size_t n, size_t len)
{
    enum { MAXN = 16 };
    assert_true(n <= MAXN && n * len <= BUF);
    for (int round = 0; round < 3; round++) {
        cr_xfer_request_t r[MAXN];
        int res[MAXN];
        memset(f->abuf, 0, n * len);
        for (size_t i = 0; i < n; i++) {
            uint64_t off = (i * len + (size_t)round * 4096) % (BUF - len);
            r[i] = (cr_xfer_request_t){CR_XFER_READ, f->abuf + i * len, f->seg,
                                       (uint64_t)(uintptr_t)f->bbuf + off, len};
            res[i] = 1;
        }
        assert_int_equal(cr_xfer_transfer_sync(f->a, r, n, res), 0);
        for (size_t i = 0; i < n; i++) {
            if (res[i])
                fail_msg("READ %zu of %zu (%zu bytes): %s", i, n, len, cr_strerror(res[i]));
            uint64_t off = (i * len + (size_t)round * 4096) % (BUF - len);
            assert_int_equal(xt_check(f->abuf + i * len, len, off, 41, "streamed READ"), -1);
        }
    }
}

static void test_streamed_reads_raise_the_mark(void **state)
{
    fx_t *f = *state;
    tcp_state_t *st = tcp_of(f->a);
    assert_int_equal(st->rcvlowat, TCP_DEFAULT_RCVLOWAT);
    stream_reads(f, 8, 4 * MIB);
    stream_reads(f, 12, MIB + 3);
    if (atomic_load(&st->lowat_raised) == 0)
        fail_msg("32 MiB of READs in flight and no receiver raised SO_RCVLOWAT");
}

/* a READ the target refuses (memory it no longer registers) between big
 * READs: its reply is a header plus zeros, counted like data, so the
 * receiver waiting under the mark gets every byte it expects */
static void test_refused_read_amid_a_stream(void **state)
{
    fx_t *f = *state;
    assert_int_equal(cr_xfer_mem_unregister(f->b, f->bextra), 0);
    uint64_t b = (uint64_t)(uintptr_t)f->bbuf;
    enum { N = 7 };
    cr_xfer_request_t r[N];
    int res[N];
    for (int i = 0; i < N; i++) {
        r[i] = (cr_xfer_request_t){CR_XFER_READ, f->abuf + (size_t)i * 4 * MIB, f->seg,
                                   b + (uint64_t)i * 4 * MIB, 4 * MIB};
        res[i] = 1;
    }
    r[3].target_addr = (uint64_t)(uintptr_t)f->bextra; /* refused */
    r[3].length = MIB;
    int rc = cr_xfer_transfer_sync(f->a, r, N, res); /* the first error */
    assert_int_equal(rc, res[3]);
    for (int i = 0; i < N; i++) {
        if (i == 3) {
            if (res[i] == 0 || res[i] == -ETIMEDOUT)
                fail_msg("READ of unregistered memory: %s (expected a refusal)",
                         res[i] ? cr_strerror(res[i]) : "success");
            continue;
        }
        if (res[i])
            fail_msg("READ %d beside a refused one: %s", i, cr_strerror(res[i]));
        assert_int_equal(xt_check(f->abuf + (size_t)i * 4 * MIB, 4 * MIB, (uint64_t)i * 4 * MIB,
                                  41, "READ beside a refused one"),
                         -1);
    }
    stream_reads(f, 4, 4 * MIB); /* and the connections still serve */
}

/* WRITEs and READs in one batch: a WRITE's reply is a header only, so the
 * bytes due are mostly READ data; both directions land right */
static void test_reads_and_writes_mixed(void **state)
{
    fx_t *f = *state;
    uint64_t b = (uint64_t)(uintptr_t)f->bbuf;
    enum { N = 10 };
    cr_xfer_request_t r[N];
    int res[N];
    xt_fill(f->abuf + 32 * MIB, 20 * MIB, 0, 7);
    for (int i = 0; i < N; i++) {
        int w = i % 2;
        size_t off = (size_t)i * 2 * MIB + 5;
        r[i] = (cr_xfer_request_t){w ? CR_XFER_WRITE : CR_XFER_READ,
                                   f->abuf + (w ? 32 * MIB + off - 5 : off), f->seg,
                                   b + (w ? 40 * MIB : 0) + off, 2 * MIB - 5};
        res[i] = 1;
    }
    assert_int_equal(cr_xfer_transfer_sync(f->a, r, N, res), 0);
    for (int i = 0; i < N; i++) {
        size_t off = (size_t)i * 2 * MIB + 5;
        if (res[i])
            fail_msg("request %d of a mixed batch: %s", i, cr_strerror(res[i]));
        if (i % 2)
            assert_int_equal(xt_check(f->bbuf + 40 * MIB + off, 2 * MIB - 5, off - 5, 7,
                                      "mixed WRITE"),
                             -1);
        else
            assert_int_equal(xt_check(f->abuf + off, 2 * MIB - 5, off, 41, "mixed READ"), -1);
    }
}

/* a fixed receive buffer does not grow to hold the mark: capped at a
 * quarter of it, and a stream still completes */
static void test_fixed_socket_buffer_caps_the_mark(void **state)
{
    fx_t *f = *state;
    assert_int_equal(tcp_of(f->a)->rcvlowat, 65536 / 4);
    stream_reads(f, 4, 4 * MIB);
}

static void test_zero_turns_it_off(void **state)
{
    fx_t *f = *state;
    tcp_state_t *st = tcp_of(f->a);
    assert_int_equal(st->rcvlowat, 0);
    stream_reads(f, 8, 4 * MIB);
    assert_int_equal(atomic_load(&st->lowat_raised), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_streamed_reads_raise_the_mark, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_read_amid_a_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reads_and_writes_mixed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fixed_socket_buffer_caps_the_mark,
                                        setup_fixed_sockbuf, teardown),
        cmocka_unit_test_setup_teardown(test_zero_turns_it_off, setup_off, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
