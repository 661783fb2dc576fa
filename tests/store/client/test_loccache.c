/* Location cache: hits, replacement of the least recently used way, drops,
 * off, long and too many segment names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "store/client/loccache.h"

static void test_set_find_drop(void **state)
{
    (void)state;
    cr__lc_t lc;
    cr__lc_init(&lc, 1);
    cr__lc_hit_t h;
    assert_int_equal(cr__lc_find(&lc, "a", &h), 0); /* nothing yet, nothing allocated */
    cr__lc_set(&lc, "a", 7, 56, "node-1:1234", 4096, 100);
    assert_int_equal(cr__lc_find(&lc, "a", &h), 1);
    assert_int_equal(h.version, 7);
    assert_int_equal(h.replica_id, 56);
    assert_int_equal(h.addr, 4096);
    assert_int_equal(h.size, 100);
    assert_string_equal(h.seg, "node-1:1234");
    assert_int_equal(cr__lc_find(&lc, "b", &h), 0);
    cr__lc_set(&lc, "a", 9, 0, "node-2:1", 8192, 50); /* replaced in place */
    assert_int_equal(cr__lc_find(&lc, "a", &h), 1);
    assert_int_equal(h.version, 9);
    assert_string_equal(h.seg, "node-2:1");
    cr__lc_drop(&lc, "b"); /* no entry: nothing happens */
    assert_int_equal(cr__lc_find(&lc, "a", &h), 1);
    cr__lc_drop(&lc, "a");
    assert_int_equal(cr__lc_find(&lc, "a", &h), 0);
    cr__lc_fini(&lc);
}

static void test_off_and_long_names(void **state)
{
    (void)state;
    cr__lc_t lc;
    cr__lc_init(&lc, 0);
    cr__lc_hit_t h;
    cr__lc_set(&lc, "a", 1, 0, "s", 0, 1);
    assert_int_equal(cr__lc_find(&lc, "a", &h), 0);
    cr__lc_fini(&lc);
    cr__lc_init(&lc, 1);
    char longname[CR__LC_SEG_MAX + 1];
    for (size_t i = 0; i < CR__LC_SEG_MAX; i++)
        longname[i] = 'x';
    longname[CR__LC_SEG_MAX] = 0;
    cr__lc_set(&lc, "a", 1, 0, longname, 0, 1);
    assert_int_equal(cr__lc_find(&lc, "a", &h), 0);
    cr__lc_set(&lc, "a", 1, 0, "", 0, 1);
    assert_int_equal(cr__lc_find(&lc, "a", &h), 0);
    cr__lc_fini(&lc);
}

/* More keys than entries: the most recent ones stay (each set keeps its
 * CR__LC_WAYS latest), a key used again survives newer ones. */
static void test_replacement(void **state)
{
    (void)state;
    cr__lc_t lc;
    cr__lc_init(&lc, 1);
    cr__lc_hit_t h;
    const int total = CR__LC_SETS * CR__LC_WAYS;
    char k[32];
    for (int i = 0; i < total; i++) {
        snprintf(k, sizeof k, "key-%d", i);
        cr__lc_set(&lc, k, (uint64_t)i + 1, 0, "seg", (uint64_t)i, 1);
    }
    int kept = 0;
    for (int i = 0; i < total; i++) {
        snprintf(k, sizeof k, "key-%d", i);
        if (cr__lc_find(&lc, k, &h)) {
            assert_int_equal(h.version, (uint64_t)i + 1);
            kept++;
        }
    }
    /* hashing into 4-way sets keeps most of a full load (a direct-mapped
     * table of the same size would keep ~63%) */
    assert_true(kept > total * 8 / 10);
    /* a second pass of as many new keys takes the place of the old ones:
     * only sets that got fewer than CR__LC_WAYS new keys keep old ones
     * (Poisson(4) per set: ~20% of the old keys expected) */
    for (int i = 0; i < total; i++) {
        snprintf(k, sizeof k, "new-%d", i);
        cr__lc_set(&lc, k, 1, 0, "seg", 0, 1);
    }
    int old = 0;
    for (int i = 0; i < total; i++) {
        snprintf(k, sizeof k, "key-%d", i);
        old += cr__lc_find(&lc, k, &h);
    }
    assert_true(old < total * 3 / 10);
    cr__lc_fini(&lc);
}

/* Beyond CR__LC_NAMES distinct segments, new ones are not kept. */
static void test_names_full(void **state)
{
    (void)state;
    cr__lc_t lc;
    cr__lc_init(&lc, 1);
    cr__lc_hit_t h;
    char k[32], seg[32];
    for (int i = 0; i < CR__LC_NAMES; i++) {
        snprintf(k, sizeof k, "k%d", i);
        snprintf(seg, sizeof seg, "seg-%d", i);
        cr__lc_set(&lc, k, 1, 0, seg, 0, 1);
        assert_int_equal(cr__lc_find(&lc, k, &h), 1);
        assert_string_equal(h.seg, seg);
    }
    cr__lc_set(&lc, "one-more", 1, 0, "seg-new", 0, 1);
    assert_int_equal(cr__lc_find(&lc, "one-more", &h), 0);
    cr__lc_set(&lc, "one-more", 1, 0, "seg-7", 0, 1); /* a known name still is */
    assert_int_equal(cr__lc_find(&lc, "one-more", &h), 1);
    cr__lc_fini(&lc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_find_drop),
        cmocka_unit_test(test_off_and_long_names),
        cmocka_unit_test(test_replacement),
        cmocka_unit_test(test_names_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
