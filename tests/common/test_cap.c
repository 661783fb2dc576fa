/* Per-object capabilities (src/common/auth/cap.h): a capability verifies
 * only under its key, for its segment, before its expiry, and covers
 * exactly its range and operations; tampered or malformed bytes are
 * refused; the per-connection table stays bounded. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/auth/cap.h"

static const uint8_t K1[CR__CAP_KEY_LEN] = "key-one-key-one-key-one-key-one";
static const uint8_t K2[CR__CAP_KEY_LEN] = "key-two-key-two-key-two-key-two";
#define NOW 1700000000000ull

static void test_verify(void **st)
{
    (void)st;
    uint8_t b[CR__CAP_LEN];
    cr__cap_t c;
    assert_int_equal(cr__cap_mint(K1, CR__CAP_READ, 7, 0, 4096, 1000, NOW + 5000, b), 0);
    assert_int_equal(cr__cap_verify(K1, 7, b, sizeof b, NOW, &c), 0);
    assert_int_equal(c.addr, 4096);
    assert_int_equal(c.len, 1000);
    assert_int_equal(c.epoch, 0);
    uint8_t e[CR__CAP_LEN]; /* the epoch travels signed */
    assert_int_equal(cr__cap_mint(K1, CR__CAP_READ, 7, 42, 4096, 1000, NOW + 5000, e), 0);
    assert_int_equal(cr__cap_verify(K1, 7, e, sizeof e, NOW, &c), 0);
    assert_int_equal(c.epoch, 42);
    e[40] = 43;
    assert_int_equal(cr__cap_verify(K1, 7, e, sizeof e, NOW, &c), -EACCES);
    assert_int_equal(cr__cap_verify(K2, 7, b, sizeof b, NOW, &c), -EACCES);     /* another key */
    assert_int_equal(cr__cap_verify(K1, 8, b, sizeof b, NOW, &c), -EACCES);     /* another segment */
    assert_int_equal(cr__cap_verify(K1, 7, b, sizeof b, NOW + 5000, &c), -EACCES); /* expired */
    assert_int_equal(cr__cap_verify(K1, 7, b, sizeof b, NOW - CR__CAP_TTL_MAX_MS, &c), -EACCES);
    for (size_t i = 0; i < sizeof b; i++) { /* any flipped bit is refused */
        uint8_t t[CR__CAP_LEN];
        memcpy(t, b, sizeof t);
        t[i] ^= 0x10;
        assert_int_not_equal(cr__cap_verify(K1, 7, t, sizeof t, NOW, &c), 0);
    }
    assert_int_equal(cr__cap_verify(K1, 7, b, sizeof b - 1, NOW, &c), -EBADMSG);
    assert_int_equal(cr__cap_mint(K1, 0, 7, 0, 0, 1, NOW, b), -EINVAL);
    assert_int_equal(cr__cap_mint(K1, CR__CAP_READ, 7, 0, 0, 0, NOW, b), -EINVAL);
    assert_int_equal(cr__cap_mint(K1, CR__CAP_READ, 7, 0, UINT64_MAX - 1, 4, NOW, b), -EINVAL);
    assert_int_equal(cr__cap_mint(K1, 4, 7, 0, 0, 1, NOW, b), -EINVAL);
}

static void test_covers(void **st)
{
    (void)st;
    uint8_t b[CR__CAP_LEN];
    cr__cap_t c;
    assert_int_equal(cr__cap_mint(K1, CR__CAP_WRITE, 1, 0, 4096, 1000, NOW + 5000, b), 0);
    assert_int_equal(cr__cap_verify(K1, 1, b, sizeof b, NOW, &c), 0);
    assert_true(cr__cap_covers(&c, CR__CAP_WRITE, 4096, 1000, NOW));
    assert_true(cr__cap_covers(&c, CR__CAP_WRITE, 4500, 10, NOW));
    assert_false(cr__cap_covers(&c, CR__CAP_READ, 4096, 10, NOW));   /* write-only */
    assert_false(cr__cap_covers(&c, CR__CAP_WRITE, 4095, 10, NOW));  /* starts before */
    assert_false(cr__cap_covers(&c, CR__CAP_WRITE, 5000, 100, NOW)); /* ends after */
    assert_false(cr__cap_covers(&c, CR__CAP_WRITE, 4096, 10, NOW + 5000));
    assert_false(cr__cap_covers(&c, CR__CAP_WRITE, UINT64_MAX, 2, NOW)); /* wraps */
}

static void test_table(void **st)
{
    (void)st;
    cr__cap_table_t t;
    memset(&t, 0, sizeof t);
    for (uint64_t i = 0; i < 3 * CR__CAP_TABLE_SLOTS; i++) {
        cr__cap_t c = {.ops = CR__CAP_READ, .addr = i * 100, .len = 100,
                       .expiry_ms = NOW + 1000 + i};
        cr__cap_table_add(&t, &c);
    }
    assert_int_equal(t.n, CR__CAP_TABLE_SLOTS);
    /* the newest (longest-lived) grants stay, the soonest-expiring went */
    uint64_t last = 3 * CR__CAP_TABLE_SLOTS - 1;
    assert_true(cr__cap_table_allows(&t, CR__CAP_READ, last * 100, 100, NOW));
    assert_false(cr__cap_table_allows(&t, CR__CAP_READ, 0, 100, NOW));
    assert_false(cr__cap_table_allows(&t, CR__CAP_WRITE, last * 100, 100, NOW));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify),
        cmocka_unit_test(test_covers),
        cmocka_unit_test(test_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
