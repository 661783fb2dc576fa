/* Offset allocator: exact fits, splitting, coalescing, exhaustion, bad
 * frees, a randomized run against a shadow bitmap (no overlap, accounting
 * exact, everything coalesces back), and a fragmentation measurement. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/allocator/offset_alloc.h"

static int sanitized(void) { return getenv("CRESCENT_SANITIZED") != NULL; }

static void test_create_bounds(void **s)
{
    (void)s;
    cr__oalloc_t *a = NULL;
    assert_int_equal(cr__oalloc_create(63, 6, &a), -EINVAL); /* under one granule */
    assert_int_equal(cr__oalloc_create(1 << 20, 5, &a), -EINVAL);
    assert_int_equal(cr__oalloc_create(1 << 20, 31, &a), -EINVAL);
    assert_int_equal(cr__oalloc_create(1000, 6, &a), 0); /* rounded down to 960 */
    assert_int_equal(cr__oalloc_capacity(a), 960);
    cr__oalloc_destroy(a);
    /* a 1 TiB segment needs a bigger granule to fit 2^32 granules */
    assert_int_equal(cr__oalloc_create(1ull << 40, 6, &a), 0);
    cr__oalloc_stats_t st;
    cr__oalloc_stats(a, &st);
    assert_true(st.granule >= 256);
    assert_int_equal(st.capacity, 1ull << 40);
    uint64_t off;
    uint32_t b = cr__oalloc_alloc(a, 1ull << 39, &off);
    assert_int_not_equal(b, CR__OALLOC_NONE);
    assert_int_equal(off, 0);
    cr__oalloc_destroy(a);
    cr__oalloc_destroy(NULL);
}

static void test_basic_split_coalesce(void **s)
{
    (void)s;
    cr__oalloc_t *a;
    assert_int_equal(cr__oalloc_create(64 * 1024, 6, &a), 0);
    uint64_t o1, o2, o3;
    uint32_t b1 = cr__oalloc_alloc(a, 100, &o1); /* 2 granules */
    uint32_t b2 = cr__oalloc_alloc(a, 64, &o2);
    uint32_t b3 = cr__oalloc_alloc(a, 4096, &o3);
    assert_int_not_equal(b1, CR__OALLOC_NONE);
    assert_int_not_equal(b2, CR__OALLOC_NONE);
    assert_int_not_equal(b3, CR__OALLOC_NONE);
    assert_int_equal(cr__oalloc_block_size(a, b1), 128);
    assert_int_equal(cr__oalloc_block_offset(a, b1), o1);
    /* disjoint */
    assert_true(o1 + 128 <= o2 || o2 + 64 <= o1);
    assert_true(o2 + 64 <= o3 || o3 + 4096 <= o2);
    assert_int_equal(cr__oalloc_used(a), 128 + 64 + 4096);
    assert_int_equal(cr__oalloc_alloc(a, 0, &o1), CR__OALLOC_NONE);
    assert_int_equal(cr__oalloc_free(a, b2), 0);
    assert_int_equal(cr__oalloc_free(a, b2), -EINVAL); /* double free detected */
    assert_int_equal(cr__oalloc_free(a, 12345), -EINVAL);
    assert_int_equal(cr__oalloc_free(a, b1), 0);
    assert_int_equal(cr__oalloc_free(a, b3), 0);
    cr__oalloc_stats_t st;
    cr__oalloc_stats(a, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.n_free_blocks, 1); /* fully coalesced */
    assert_int_equal(st.largest_free, 64 * 1024);
    /* the whole segment is allocatable again in one block */
    uint32_t all = cr__oalloc_alloc(a, 64 * 1024, &o1);
    assert_int_not_equal(all, CR__OALLOC_NONE);
    assert_int_equal(o1, 0);
    assert_int_equal(cr__oalloc_alloc(a, 64, &o2), CR__OALLOC_NONE); /* full */
    assert_int_equal(cr__oalloc_max_alloc(a), 0);
    cr__oalloc_destroy(a);
}

static void test_exhaust_and_max_alloc(void **s)
{
    (void)s;
    cr__oalloc_t *a;
    assert_int_equal(cr__oalloc_create(1 << 20, 6, &a), 0);
    uint32_t blocks[20000];
    size_t n = 0;
    uint64_t off;
    uint32_t b;
    while ((b = cr__oalloc_alloc(a, 1000, &off)) != CR__OALLOC_NONE)
        blocks[n++] = b;
    /* 1000 bytes -> 1024 (16 granules): exactly 1024 blocks fit */
    assert_int_equal(n, 1024);
    assert_int_equal(cr__oalloc_used(a), 1 << 20);
    /* free every other block: 512 holes of 1024 bytes, none adjacent */
    for (size_t i = 0; i < n; i += 2)
        assert_int_equal(cr__oalloc_free(a, blocks[i]), 0);
    cr__oalloc_stats_t st;
    cr__oalloc_stats(a, &st);
    assert_int_equal(st.n_free_blocks, 512);
    assert_int_equal(st.largest_free, 1024);
    assert_int_equal(cr__oalloc_max_alloc(a), 1024);
    assert_int_equal(cr__oalloc_alloc(a, 1025, &off), CR__OALLOC_NONE);
    assert_int_not_equal(cr__oalloc_alloc(a, 1024, &off), CR__OALLOC_NONE);
    cr__oalloc_destroy(a);
}

/* Randomized against a shadow bitmap of granules. */
static void test_random_vs_shadow(void **s)
{
    (void)s;
    const uint64_t cap = 8u << 20; /* 8 MiB = 131072 granules */
    cr__oalloc_t *a;
    assert_int_equal(cr__oalloc_create(cap, 6, &a), 0);
    uint8_t *shadow = calloc(cap / 64, 1);
    enum { MAXB = 4096 };
    uint32_t *h = calloc(MAXB, sizeof *h);
    uint64_t *offs = calloc(MAXB, sizeof *offs), *sizes = calloc(MAXB, sizeof *sizes);
    size_t live = 0;
    uint64_t used = 0;
    srand(12345);
    int iters = sanitized() ? 20000 : 200000;
    for (int it = 0; it < iters; it++) {
        if (live < MAXB && (live == 0 || rand() % 100 < 55)) {
            uint64_t len = (rand() % 3 == 0) ? (uint64_t)(rand() % 65536 + 1)
                                              : (uint64_t)(rand() % 2048 + 1);
            uint64_t off;
            uint32_t b = cr__oalloc_alloc(a, len, &off);
            if (b == CR__OALLOC_NONE)
                continue;
            uint64_t bs = cr__oalloc_block_size(a, b);
            assert_true(bs >= len && bs < len + 64);
            assert_true(off + bs <= cap);
            for (uint64_t g = off / 64; g < (off + bs) / 64; g++) {
                if (shadow[g]) {
                    fail_msg("overlap at granule %llu (block off %llu len %llu)",
                             (unsigned long long)g, (unsigned long long)off,
                             (unsigned long long)bs);
                }
                shadow[g] = 1;
            }
            h[live] = b;
            offs[live] = off;
            sizes[live] = bs;
            live++;
            used += bs;
        } else {
            size_t i = (size_t)rand() % live;
            assert_int_equal(cr__oalloc_block_offset(a, h[i]), offs[i]);
            assert_int_equal(cr__oalloc_free(a, h[i]), 0);
            for (uint64_t g = offs[i] / 64; g < (offs[i] + sizes[i]) / 64; g++)
                shadow[g] = 0;
            used -= sizes[i];
            live--;
            h[i] = h[live];
            offs[i] = offs[live];
            sizes[i] = sizes[live];
        }
        if (cr__oalloc_used(a) != used)
            fail_msg("used accounting: expected %llu got %llu", (unsigned long long)used,
                     (unsigned long long)cr__oalloc_used(a));
    }
    for (size_t i = 0; i < live; i++)
        assert_int_equal(cr__oalloc_free(a, h[i]), 0);
    cr__oalloc_stats_t st;
    cr__oalloc_stats(a, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.n_free_blocks, 1);
    assert_int_equal(st.largest_free, cap);
    free(shadow);
    free(h);
    free(offs);
    free(sizes);
    cr__oalloc_destroy(a);
}

/* Fragmentation: fill with mixed KV-cache-like sizes to the first failure,
 * then churn (free random 30%, refill) and measure the fill ratio reached
 * at each first failure and the free-space fragmentation
 * 1 - largest_free/free. Prints the numbers (docs/architecture/store-master.md)
 * and asserts the allocator keeps using most of the segment. */
static void test_fragmentation(void **s)
{
    (void)s;
    const uint64_t cap = 256u << 20;
    cr__oalloc_t *a;
    assert_int_equal(cr__oalloc_create(cap, 6, &a), 0);
    enum { MAXB = 1 << 16 };
    uint32_t *h = calloc(MAXB, sizeof *h);
    size_t live = 0;
    srand(777);
    static const uint64_t sizes[] = {4096, 16384, 65536, 256 << 10, 1 << 20, 2 << 20, 100000, 12345};
    double min_fill = 1.0, sum_fill = 0, max_frag = 0;
    int rounds = sanitized() ? 5 : 30;
    for (int r = 0; r < rounds; r++) {
        uint64_t off;
        for (;;) {
            uint64_t len = sizes[rand() % (int)(sizeof sizes / sizeof sizes[0])];
            if (live == MAXB)
                break;
            uint32_t b = cr__oalloc_alloc(a, len, &off);
            if (b == CR__OALLOC_NONE)
                break;
            h[live++] = b;
        }
        cr__oalloc_stats_t st;
        cr__oalloc_stats(a, &st);
        double fill = (double)st.used / (double)st.capacity;
        double frag = st.free ? 1.0 - (double)st.largest_free / (double)st.free : 0;
        if (fill < min_fill)
            min_fill = fill;
        if (frag > max_frag)
            max_frag = frag;
        sum_fill += fill;
        /* churn: free a random 30% */
        size_t nfree = live * 3 / 10;
        for (size_t k = 0; k < nfree; k++) {
            size_t i = (size_t)rand() % live;
            assert_int_equal(cr__oalloc_free(a, h[i]), 0);
            h[i] = h[--live];
        }
    }
    cr__oalloc_stats_t st;
    cr__oalloc_stats(a, &st);
    printf("fragmentation: rounds=%d fill_at_first_failure min=%.3f avg=%.3f "
           "max_free_fragmentation=%.3f meta_bytes=%llu blocks=%llu\n",
           rounds, min_fill, sum_fill / rounds, max_frag, (unsigned long long)st.meta_bytes,
           (unsigned long long)st.n_used_blocks);
    /* with values up to 2 MiB in 256 MiB, a first failure below 90% fill
     * would mean real fragmentation trouble */
    if (min_fill < 0.90)
        fail_msg("fill at first failure %.3f < 0.90", min_fill);
    free(h);
    cr__oalloc_destroy(a);
}

/* Restore: an allocator built with blocks in place has them at those
 * offsets, refuses overlapping/misaligned/out-of-range ones, never hands
 * out their space again, and coalesces back to one block when all are
 * freed. */
static void test_create_used(void **s)
{
    (void)s;
    enum { N = 2000 };
    static uint64_t offs[N], lens[N];
    static uint32_t blk[N];
    uint64_t size = 64ull << 20, off = 0;
    srand(7);
    size_t n = 0;
    while (n < N - 3) {
        off += (uint64_t)(rand() % 4) * 64; /* a gap or none */
        uint64_t len = 64 + (uint64_t)(rand() % 3000);
        if (off + len > size)
            break;
        offs[n] = off;
        lens[n++] = len;
        off += (len + 63) & ~63ull;
    }
    offs[n] = offs[n - 1]; /* overlaps the one before */
    lens[n++] = 64;
    offs[n] = off + 3; /* misaligned */
    lens[n++] = 64;
    offs[n] = size - 64; /* passes the end */
    lens[n++] = 128;
    cr__oalloc_t *a;
    assert_int_equal(cr__oalloc_create_used(size, 6, offs, lens, n, blk, &a), 0);
    uint64_t used = 0;
    for (size_t k = 0; k + 3 < n; k++) {
        assert_int_not_equal(blk[k], CR__OALLOC_NONE);
        assert_int_equal(cr__oalloc_block_offset(a, blk[k]), offs[k]);
        assert_int_equal(cr__oalloc_block_size(a, blk[k]), (lens[k] + 63) & ~63ull);
        used += (lens[k] + 63) & ~63ull;
    }
    for (size_t k = n - 3; k < n; k++)
        assert_int_equal(blk[k], CR__OALLOC_NONE);
    assert_int_equal(cr__oalloc_used(a), used);
    /* new blocks never overlap restored ones */
    for (int i = 0; i < 200; i++) {
        uint64_t o2;
        uint32_t b = cr__oalloc_alloc(a, 4096, &o2);
        if (b == CR__OALLOC_NONE)
            break;
        for (size_t k = 0; k + 3 < n; k++)
            assert_true(o2 + 4096 <= offs[k] || o2 >= offs[k] + lens[k]);
        cr__oalloc_free(a, b);
    }
    for (size_t k = 0; k + 3 < n; k++)
        assert_int_equal(cr__oalloc_free(a, blk[k]), 0);
    cr__oalloc_stats_t st;
    cr__oalloc_stats(a, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.n_free_blocks, 1);
    assert_int_equal(st.largest_free, size);
    cr__oalloc_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_bounds),
        cmocka_unit_test(test_basic_split_coalesce),
        cmocka_unit_test(test_exhaust_and_max_alloc),
        cmocka_unit_test(test_random_vs_shadow),
        cmocka_unit_test(test_fragmentation),
        cmocka_unit_test(test_create_used),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
