/* Per-object capabilities on the Transfer Engine (transfer/capability.c):
 * one engine serves its memory with a capability key installed, another
 * reads and writes it over tcp with and without grants. Protects: a
 * request without a grant, with a forged or foreign-segment grant, outside
 * its range, in the wrong mode, expired, of an older master epoch (also
 * after the epoch floor rose, with the grant already cached), or of a
 * replaced key is refused; genuine grants are served on the caller-run and
 * the queued paths; an engine with no key checks nothing (security off). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <time.h>

#include "transfer/capability.h"
#include "xfer_test_util.h"

#define LEN (256u << 10)

static const uint8_t K1[CR__CAP_KEY_LEN] = "capability-key-one-32-bytes!!!!";
static const uint8_t K2[CR__CAP_KEY_LEN] = "capability-key-two-32-bytes!!!!";

typedef struct fx {
    cr_xfer_engine_t *srv, *cli;
    uint8_t *smem, *cmem;
    cr_xfer_segment_t seg;
} fx_t;

static uint64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int setup(void **st)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(xt_engine(&f->srv, NULL, NULL, 0), 0);
    assert_int_equal(xt_engine(&f->cli, NULL, NULL, 0), 0);
    f->smem = xt_alloc(LEN);
    f->cmem = xt_alloc(LEN);
    assert_int_equal(cr_xfer_mem_register(f->srv, f->smem, LEN, "cpu:0"), 0);
    assert_int_equal(cr_xfer_mem_register(f->cli, f->cmem, LEN, "cpu:0"), 0);
    xt_fill(f->smem, LEN, 0, 11);
    assert_int_equal(cr_xfer_segment_open(f->cli, cr_xfer_engine_name(f->srv), &f->seg), 0);
    *st = f;
    return 0;
}

static int teardown(void **st)
{
    fx_t *f = *st;
    cr_xfer_engine_destroy(f->cli);
    cr_xfer_engine_destroy(f->srv);
    xt_free(f->smem, LEN);
    xt_free(f->cmem, LEN);
    free(f);
    return 0;
}

/* n requests (1: the caller-run path; 2: the queued path) over [off, off +
 * len) of the served memory, each with cap; returns the first error. */
static int io(fx_t *f, int write, uint64_t off, uint64_t len, const uint8_t *cap, int n)
{
    cr_xfer_request_t r[2];
    const uint8_t *caps[2] = {cap, cap};
    uint64_t half = n == 2 ? len / 2 : len;
    for (int i = 0; i < n; i++)
        r[i] = (cr_xfer_request_t){.opcode = write ? CR_XFER_WRITE : CR_XFER_READ,
                                   .local_addr = f->cmem + off + (uint64_t)i * half,
                                   .target = f->seg,
                                   .target_addr = (uint64_t)(uintptr_t)f->smem + off +
                                                  (uint64_t)i * half,
                                   .length = i == n - 1 ? len - (uint64_t)i * half : half};
    int st[2] = {0, 0};
    int rc = cr__xfer_transfer_sync_caps(f->cli, r, caps, (size_t)n, st);
    return rc ? rc : st[0] ? st[0] : st[1];
}

static void mint(const uint8_t *key, uint8_t ops, uint64_t seg, uint32_t epoch, fx_t *f,
                 uint64_t off, uint64_t len, int64_t ttl_ms, uint8_t out[CR__CAP_LEN])
{
    assert_int_equal(cr__cap_mint(key, ops, seg, epoch, (uint64_t)(uintptr_t)f->smem + off, len,
                                  (uint64_t)((int64_t)unix_ms() + ttl_ms), out),
                     0);
}

static void test_off_is_unchecked(void **st)
{
    fx_t *f = *st;
    assert_int_equal(io(f, 0, 0, LEN, NULL, 1), 0);
    assert_int_equal(xt_check(f->cmem, LEN, 0, 11, "unchecked read"), -1);
}

static void test_grants(void **st)
{
    fx_t *f = *st;
    cr__xfer_cap_key_set(f->srv, K1, 7, 3);
    uint8_t rd[CR__CAP_LEN], rw[CR__CAP_LEN], c[CR__CAP_LEN];
    mint(K1, CR__CAP_READ, 7, 3, f, 0, LEN, 60000, rd);
    mint(K1, CR__CAP_READ | CR__CAP_WRITE, 7, 3, f, 0, LEN, 60000, rw);
    for (int n = 1; n <= 2; n++) {
        assert_int_equal(io(f, 0, 0, LEN, NULL, n), -EACCES);     /* no grant */
        assert_int_equal(io(f, 1, 0, LEN, NULL, n), -EACCES);
        memset(f->cmem, 0, LEN);
        assert_int_equal(io(f, 0, 0, LEN, rd, n), 0);             /* genuine READ */
        assert_int_equal(xt_check(f->cmem, LEN, 0, 11, "granted read"), -1);
        assert_int_equal(io(f, 1, 0, LEN, rd, n), -EACCES);       /* READ grant, WRITE */
        assert_int_equal(io(f, 0, 4096, 8192, rd, n), 0);         /* inside the grant */
        mint(K1, CR__CAP_READ, 7, 3, f, 0, LEN / 2, 60000, c);    /* half the range */
        assert_int_equal(io(f, 0, 0, LEN, c, n), -EACCES);
        mint(K2, CR__CAP_READ, 7, 3, f, 0, LEN, 60000, c);        /* another key: forged */
        assert_int_equal(io(f, 0, 0, LEN, c, n), -EACCES);
        mint(K1, CR__CAP_READ, 8, 3, f, 0, LEN, 60000, c);        /* another segment */
        assert_int_equal(io(f, 0, 0, LEN, c, n), -EACCES);
        mint(K1, CR__CAP_READ, 7, 3, f, 0, LEN, -1, c);           /* expired */
        assert_int_equal(io(f, 0, 0, LEN, c, n), -EACCES);
        mint(K1, CR__CAP_READ, 7, 2, f, 0, LEN, 60000, c);        /* older epoch */
        assert_int_equal(io(f, 0, 0, LEN, c, n), -EACCES);
        xt_fill(f->cmem, LEN, 0, 12);                             /* genuine WRITE */
        assert_int_equal(io(f, 1, 0, LEN, rw, n), 0);
        assert_int_equal(xt_check(f->smem, LEN, 0, 12, "granted write"), -1);
        xt_fill(f->smem, LEN, 0, 11);
    }
    assert_true(cr__xfer_cap_refused(f->srv) >= 2 * 9);
}

static void test_fencing_and_rekey(void **st)
{
    fx_t *f = *st;
    cr__xfer_cap_key_set(f->srv, K1, 7, 3);
    uint8_t e3[CR__CAP_LEN], e4[CR__CAP_LEN], k2[CR__CAP_LEN];
    mint(K1, CR__CAP_READ, 7, 3, f, 0, LEN, 60000, e3);
    mint(K1, CR__CAP_READ, 7, 4, f, 0, LEN, 60000, e4);
    assert_int_equal(io(f, 0, 0, LEN, e3, 1), 0); /* verified and cached */
    /* a newer master epoch is seen: the cached epoch-3 grant is fenced */
    cr__xfer_cap_epoch_seen(f->srv, 4);
    assert_int_equal(io(f, 0, 0, LEN, e3, 1), -EACCES);
    assert_int_equal(io(f, 0, 0, LEN, e4, 1), 0);
    cr__xfer_cap_epoch_seen(f->srv, 2); /* never lowers */
    assert_int_equal(io(f, 0, 0, LEN, e3, 1), -EACCES);
    /* a new key (the node remounted with another master): old grants die */
    cr__xfer_cap_key_set(f->srv, K2, 9, 4);
    mint(K2, CR__CAP_READ, 9, 4, f, 0, LEN, 60000, k2);
    assert_int_equal(io(f, 0, 0, LEN, e4, 1), -EACCES);
    assert_int_equal(io(f, 0, 0, LEN, k2, 1), 0);
    /* deny-all: nobody holds the key */
    assert_int_equal(cr__xfer_cap_deny_all(f->srv), 0);
    assert_int_equal(io(f, 0, 0, LEN, k2, 1), -EACCES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_off_is_unchecked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fencing_and_rekey, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
