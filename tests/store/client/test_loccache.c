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
    /* hashing into CR__LC_WAYS-way sets keeps most of a full load (a
     * direct-mapped table of the same size would keep ~63%) */
    assert_true(kept > total * 8 / 10);
    /* a second pass of as many new keys takes the place of the old ones:
     * only sets that got fewer than CR__LC_WAYS new keys keep old ones
     * (Poisson(CR__LC_WAYS) per set: 8 ways keep ~14% of the old keys) */
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

/* The batch forms: one call sets or finds many keys (more than the
 * functions' on-stack hashes: 64), on runs of segment names. */
static void test_many(void **state)
{
    (void)state;
    enum { N = 200 };
    cr__lc_t lc;
    cr__lc_init(&lc, 1);
    static char keys[N][16];
    const char *kp[N];
    cr__lc_put_t v[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "m-%d", i);
        kp[i] = keys[i];
        v[i] = (cr__lc_put_t){keys[i], i < N / 2 ? "node-a:1" : "node-b:2", (uint64_t)i + 1,
                              (uint64_t)i % 3, 4096 * (uint64_t)i, 100 + (uint64_t)i};
    }
    static cr__lc_hit_t hits[2 * N];
    assert_int_equal(cr__lc_find_many(&lc, kp, N, hits), 0); /* nothing allocated yet */
    cr__lc_set_many(&lc, v, N / 2); /* the even half of the second run is set alone */
    for (int i = N / 2; i < N; i += 2)
        cr__lc_set_many(&lc, &v[i], 1);
    assert_int_equal(cr__lc_find_many(&lc, kp, N, hits), N / 2 + N / 4);
    for (int i = 0; i < N; i++) {
        if (i >= N / 2 && i % 2) {
            assert_int_equal(hits[i].size, 0);
            continue;
        }
        assert_int_equal(hits[i].version, (uint64_t)i + 1);
        assert_int_equal(hits[i].replica_id, (uint64_t)i % 3);
        assert_int_equal(hits[i].addr, 4096 * (uint64_t)i);
        assert_int_equal(hits[i].size, 100 + (uint64_t)i);
        assert_string_equal(hits[i].seg, i < N / 2 ? "node-a:1" : "node-b:2");
    }
    cr__lc_hit_t one;
    assert_int_equal(cr__lc_find(&lc, "m-7", &one), 1); /* the single form agrees */
    assert_int_equal(one.version, 8);
    cr__lc_drop(&lc, "m-7");
    assert_int_equal(cr__lc_find_many(&lc, kp, 8, hits), 7);
    assert_int_equal(hits[7].size, 0);
    cr__lc_fini(&lc);
    cr__lc_init(&lc, 0); /* off: nothing kept, nothing found */
    cr__lc_set_many(&lc, v, N);
    hits[0].size = 1;
    assert_int_equal(cr__lc_find_many(&lc, kp, N, hits), 0);
    assert_int_equal(hits[0].size, 0);
    cr__lc_fini(&lc);
}

/* cr__lc_warm before the versions are known, then cr__lc_set_hashed: the
 * same entries as cr__lc_set_many; an entry with key NULL (a key the
 * master refused) is skipped and leaves an older entry of it alone; a
 * value of 2^56 bytes or more is not kept. */
static void test_warm_then_set(void **state)
{
    (void)state;
    enum { N = 100 };
    cr__lc_t lc;
    cr__lc_init(&lc, 1);
    static char keys[N][16];
    const char *kp[N];
    cr__lc_put_t v[N];
    uint64_t h[N];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "w-%d", i);
        kp[i] = keys[i];
        v[i] = (cr__lc_put_t){keys[i], "node-w:9", 0, 0, 8192 * (uint64_t)i, 64 + (uint64_t)i};
    }
    cr__lc_set(&lc, "w-3", 77, 5, "node-old:1", 12, 34); /* an older entry of a refused key */
    cr__lc_warm(&lc, v, N, h); /* nothing recorded yet */
    static cr__lc_hit_t hits[N];
    assert_int_equal(cr__lc_find_many(&lc, kp, N, hits), 1);
    for (int i = 0; i < N; i++)
        v[i].version = 1000 + (uint64_t)i; /* the answer's versions */
    v[3].key = NULL;                    /* refused */
    v[4].size = 1ull << 56;             /* too big to keep */
    cr__lc_set_hashed(&lc, v, h, N);
    assert_int_equal(cr__lc_find_many(&lc, kp, N, hits), N - 1);
    for (int i = 0; i < N; i++) {
        if (i == 4) {
            assert_int_equal(hits[i].size, 0);
            continue;
        }
        if (i == 3) { /* untouched */
            assert_int_equal(hits[i].version, 77);
            assert_string_equal(hits[i].seg, "node-old:1");
            continue;
        }
        assert_int_equal(hits[i].version, 1000 + (uint64_t)i);
        assert_int_equal(hits[i].addr, 8192 * (uint64_t)i);
        assert_int_equal(hits[i].size, 64 + (uint64_t)i);
        assert_string_equal(hits[i].seg, "node-w:9");
    }
    cr__lc_fini(&lc);
    cr__lc_init(&lc, 0); /* off: warm and set do nothing */
    v[3].key = keys[3];
    cr__lc_warm(&lc, v, N, h);
    cr__lc_set_hashed(&lc, v, h, N);
    assert_int_equal(cr__lc_find_many(&lc, kp, N, hits), 0);
    cr__lc_fini(&lc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_find_drop),
        cmocka_unit_test(test_off_and_long_names),
        cmocka_unit_test(test_replacement),
        cmocka_unit_test(test_names_full),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_warm_then_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
