/* Global prefix index: longest prefix, LRU eviction, tiers, capacity,
 * removal, match_all, and a randomized comparison with a naive model. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crescent/conductor.h"

static cr_cond_index_t *mk(uint32_t ninst, uint64_t expected)
{
    cr_cond_index_params_t p = {.field_mask = CR_COND_INDEX_PARAM_MAX_INSTANCES |
                                              CR_COND_INDEX_PARAM_EXPECTED_BLOCKS,
                                .max_instances = ninst,
                                .expected_blocks = expected};
    cr_cond_index_t *ix = NULL;
    assert_int_equal(cr_cond_index_create(&p, &ix), 0);
    return ix;
}

static void test_longest_prefix(void **st)
{
    (void)st;
    cr_cond_index_t *ix = mk(4, 16);
    uint64_t a[5] = {10, 11, 12, 13, 14};
    assert_int_equal(cr_cond_index_insert(ix, 0, CR_COND_TIER_DRAM, a, 3, NULL), 0);
    uint64_t b[2] = {10, 11};
    assert_int_equal(cr_cond_index_insert(ix, 1, CR_COND_TIER_GPU, b, 2, NULL), 0);
    /* instance 2 holds 11..14 but not 10: no prefix */
    assert_int_equal(cr_cond_index_insert(ix, 2, CR_COND_TIER_DRAM, a + 1, 4, NULL), 0);
    cr_cond_match_t m;
    assert_int_equal(cr_cond_index_match(ix, 0, a, 5, &m), 0);
    assert_int_equal(m.blocks, 3);
    assert_int_equal(m.tier_blocks[CR_COND_TIER_DRAM], 3);
    assert_int_equal(cr_cond_index_match(ix, 1, a, 5, &m), 0);
    assert_int_equal(m.blocks, 2);
    assert_int_equal(m.tier_blocks[CR_COND_TIER_GPU], 2);
    assert_int_equal(cr_cond_index_match(ix, 2, a, 5, &m), 0);
    assert_int_equal(m.blocks, 0);
    assert_int_equal(cr_cond_index_match(ix, 3, a, 5, &m), 0);
    assert_int_equal(m.blocks, 0);
    uint32_t pre[4] = {9, 9, 9, 9};
    assert_int_equal(cr_cond_index_match_all(ix, a, 5, pre, 4), 0);
    assert_int_equal(pre[0], 3);
    assert_int_equal(pre[1], 2);
    assert_int_equal(pre[2], 0);
    assert_int_equal(pre[3], 0);
    /* a gap in the middle stops the prefix */
    uint64_t gap[3] = {10, 99, 12};
    assert_int_equal(cr_cond_index_match_all(ix, gap, 3, pre, 4), 0);
    assert_int_equal(pre[0], 1);
    /* empty query */
    assert_int_equal(cr_cond_index_match_all(ix, NULL, 0, pre, 4), 0);
    assert_int_equal(pre[0], 0);
    assert_int_equal(cr_cond_index_match_all(ix, a, 5, pre, 5), -EINVAL);
    cr_cond_index_destroy(ix);
}

static void test_tiers(void **st)
{
    (void)st;
    cr_cond_index_t *ix = mk(2, 16);
    uint64_t a[3] = {1, 2, 3};
    assert_int_equal(cr_cond_index_insert(ix, 0, CR_COND_TIER_DISK, a, 3, NULL), 0);
    assert_int_equal(cr_cond_index_insert(ix, 0, CR_COND_TIER_GPU, a, 1, NULL), 0);
    assert_int_equal(cr_cond_index_insert(ix, 0, CR_COND_TIER_DRAM, a + 1, 1, NULL), 0);
    assert_int_equal(cr_cond_index_lookup(ix, 0, 1), (1u << CR_COND_TIER_GPU) | (1u << CR_COND_TIER_DISK));
    assert_int_equal(cr_cond_index_lookup(ix, 1, 1), 0);
    cr_cond_match_t m;
    assert_int_equal(cr_cond_index_match(ix, 0, a, 3, &m), 0);
    assert_int_equal(m.blocks, 3);
    assert_int_equal(m.tier_blocks[CR_COND_TIER_GPU], 1);
    assert_int_equal(m.tier_blocks[CR_COND_TIER_DRAM], 1);
    assert_int_equal(m.tier_blocks[CR_COND_TIER_DISK], 1);
    /* removing the disk copy of block 2 keeps it (DRAM), of block 3 breaks the prefix */
    assert_int_equal(cr_cond_index_remove(ix, 0, CR_COND_TIER_DISK, a + 1, 2), 0);
    assert_int_equal(cr_cond_index_match(ix, 0, a, 3, &m), 0);
    assert_int_equal(m.blocks, 2);
    cr_cond_index_stats_t s;
    assert_int_equal(cr_cond_index_stats(ix, &s), 0);
    assert_int_equal(s.blocks, 2);
    assert_int_equal(s.entries, 3);
    assert_int_equal(cr_cond_index_remove_instance(ix, 0), 0);
    assert_int_equal(cr_cond_index_stats(ix, &s), 0);
    assert_int_equal(s.blocks, 0);
    assert_int_equal(s.entries, 0);
    assert_int_equal(cr_cond_index_insert(ix, 0, (cr_cond_tier_t)3, a, 1, NULL), -EINVAL);
    assert_int_equal(cr_cond_index_insert(ix, 2, CR_COND_TIER_GPU, a, 1, NULL), -EINVAL);
    cr_cond_index_destroy(ix);
}

static void test_lru_eviction(void **st)
{
    (void)st;
    cr_cond_index_t *ix = mk(2, 4);
    assert_int_equal(cr_cond_index_set_capacity(ix, 0, CR_COND_TIER_DRAM, 3), 0);
    uint64_t a[3] = {1, 2, 3}, ev = 99;
    assert_int_equal(cr_cond_index_insert(ix, 0, CR_COND_TIER_DRAM, a, 3, &ev), 0);
    assert_int_equal(ev, 0);
    uint64_t one = 1;
    assert_int_equal(cr_cond_index_touch(ix, 0, &one, 1), 0); /* order now 2,3,1 (LRU first) */
    uint64_t four = 4;
    assert_int_equal(cr_cond_index_insert(ix, 0, CR_COND_TIER_DRAM, &four, 1, &ev), 0);
    assert_int_equal(ev, 1);
    assert_int_equal(cr_cond_index_lookup(ix, 0, 2), 0); /* the LRU one went */
    assert_int_not_equal(cr_cond_index_lookup(ix, 0, 1), 0);
    assert_int_not_equal(cr_cond_index_lookup(ix, 0, 3), 0);
    assert_int_not_equal(cr_cond_index_lookup(ix, 0, 4), 0);
    assert_int_equal(cr_cond_index_count(ix, 0, CR_COND_TIER_DRAM), 3);
    /* re-inserting an existing block only touches it */
    assert_int_equal(cr_cond_index_insert(ix, 0, CR_COND_TIER_DRAM, a + 2, 1, &ev), 0);
    assert_int_equal(ev, 0);
    /* an insert longer than the capacity keeps its last blocks */
    uint64_t big[5] = {20, 21, 22, 23, 24};
    assert_int_equal(cr_cond_index_insert(ix, 0, CR_COND_TIER_DRAM, big, 5, &ev), 0);
    assert_int_equal(ev, 5);
    assert_int_equal(cr_cond_index_count(ix, 0, CR_COND_TIER_DRAM), 3);
    assert_int_equal(cr_cond_index_lookup(ix, 0, 21), 0);
    assert_int_not_equal(cr_cond_index_lookup(ix, 0, 22), 0);
    assert_int_not_equal(cr_cond_index_lookup(ix, 0, 24), 0);
    /* capacity is per instance: instance 1 is unlimited */
    assert_int_equal(cr_cond_index_insert(ix, 1, CR_COND_TIER_DRAM, big, 5, &ev), 0);
    assert_int_equal(cr_cond_index_count(ix, 1, CR_COND_TIER_DRAM), 5);
    /* shrinking evicts at once */
    assert_int_equal(cr_cond_index_set_capacity(ix, 1, CR_COND_TIER_DRAM, 2), 0);
    assert_int_equal(cr_cond_index_count(ix, 1, CR_COND_TIER_DRAM), 2);
    assert_int_equal(cr_cond_index_lookup(ix, 1, 22), 0);
    assert_int_not_equal(cr_cond_index_lookup(ix, 1, 23), 0);
    /* the block survives on instance 0 after instance 1 evicted it */
    assert_int_not_equal(cr_cond_index_lookup(ix, 0, 22), 0);
    cr_cond_index_stats_t s;
    cr_cond_index_stats(ix, &s);
    assert_int_equal(s.evictions, 1 + 5 + 3);
    cr_cond_index_destroy(ix);
}

static void test_max_entries(void **st)
{
    (void)st;
    cr_cond_index_params_t p = {.field_mask = CR_COND_INDEX_PARAM_MAX_ENTRIES |
                                              CR_COND_INDEX_PARAM_MAX_INSTANCES,
                                .max_instances = 1,
                                .max_entries = 3};
    cr_cond_index_t *ix = NULL;
    assert_int_equal(cr_cond_index_create(&p, &ix), 0);
    uint64_t a[4] = {1, 2, 3, 4};
    assert_int_equal(cr_cond_index_insert(ix, 0, CR_COND_TIER_GPU, a, 4, NULL), -ENOSPC);
    assert_int_equal(cr_cond_index_count(ix, 0, CR_COND_TIER_GPU), 3);
    /* a full (instance, tier) still rotates through LRU at the entry cap */
    assert_int_equal(cr_cond_index_set_capacity(ix, 0, CR_COND_TIER_GPU, 3), 0);
    uint64_t ev = 0;
    assert_int_equal(cr_cond_index_insert(ix, 0, CR_COND_TIER_GPU, a + 3, 1, &ev), 0);
    assert_int_equal(ev, 1);
    assert_int_equal(cr_cond_index_lookup(ix, 0, 1), 0);
    assert_int_not_equal(cr_cond_index_lookup(ix, 0, 4), 0);
    /* but another tier cannot take an entry, and nothing is evicted for it */
    assert_int_equal(cr_cond_index_insert(ix, 0, CR_COND_TIER_DISK, a, 1, &ev), -ENOSPC);
    assert_int_equal(cr_cond_index_count(ix, 0, CR_COND_TIER_GPU), 3);
    cr_cond_index_destroy(ix);
    p.max_instances = 65;
    assert_int_equal(cr_cond_index_create(&p, &ix), -EINVAL);
    assert_int_equal(cr_cond_index_create(NULL, NULL), -EINVAL);
}

/* Naive reference: per (inst) an array of held hashes in LRU order. */
#define RI 4
#define RCAP 50
typedef struct {
    uint64_t h[RCAP];
    int n;
} ref_t;

static int ref_find(ref_t *r, uint64_t h)
{
    for (int i = 0; i < r->n; i++)
        if (r->h[i] == h)
            return i;
    return -1;
}

static void ref_touch(ref_t *r, int i)
{
    uint64_t h = r->h[i];
    memmove(&r->h[i], &r->h[i + 1], (size_t)(r->n - i - 1) * sizeof h);
    r->h[r->n - 1] = h;
}

static void test_random_vs_reference(void **st)
{
    (void)st;
    cr_cond_index_t *ix = mk(RI, 8); /* tiny: forces table growth */
    ref_t ref[RI];
    memset(ref, 0, sizeof ref);
    for (int i = 0; i < RI; i++)
        assert_int_equal(cr_cond_index_set_capacity(ix, (uint32_t)i, CR_COND_TIER_DRAM, RCAP), 0);
    uint64_t seed = 42;
    for (int it = 0; it < 20000; it++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t inst = (uint32_t)(seed >> 33) % RI;
        uint64_t h = (seed >> 40) % 200;
        int op = (int)((seed >> 20) % 10);
        ref_t *r = &ref[inst];
        if (op < 7) {
            assert_int_equal(cr_cond_index_insert(ix, inst, CR_COND_TIER_DRAM, &h, 1, NULL), 0);
            int i = ref_find(r, h);
            if (i >= 0) {
                ref_touch(r, i);
            } else {
                if (r->n == RCAP) {
                    memmove(&r->h[0], &r->h[1], (RCAP - 1) * sizeof h);
                    r->n--;
                }
                r->h[r->n++] = h;
            }
        } else if (op < 9) {
            assert_int_equal(cr_cond_index_touch(ix, inst, &h, 1), 0);
            int i = ref_find(r, h);
            if (i >= 0)
                ref_touch(r, i);
        } else {
            assert_int_equal(cr_cond_index_remove(ix, inst, CR_COND_TIER_DRAM, &h, 1), 0);
            int i = ref_find(r, h);
            if (i >= 0) {
                memmove(&r->h[i], &r->h[i + 1], (size_t)(r->n - i - 1) * sizeof h);
                r->n--;
            }
        }
        if (it % 97 == 0) {
            for (uint64_t q = 0; q < 200; q++)
                for (uint32_t k = 0; k < RI; k++) {
                    int want = ref_find(&ref[k], q) >= 0;
                    int got = cr_cond_index_lookup(ix, k, q) != 0;
                    if (want != got)
                        fail_msg("it %d inst %u hash %llu: expected %d got %d", it, k,
                                 (unsigned long long)q, want, got);
                }
            /* match_all agrees with per-instance match on a random query */
            uint64_t qv[6];
            for (int j = 0; j < 6; j++)
                qv[j] = (seed >> (j * 7)) % 200;
            uint32_t pre[RI];
            assert_int_equal(cr_cond_index_match_all(ix, qv, 6, pre, RI), 0);
            for (uint32_t k = 0; k < RI; k++) {
                cr_cond_match_t m;
                assert_int_equal(cr_cond_index_match(ix, k, qv, 6, &m), 0);
                assert_int_equal(pre[k], m.blocks);
            }
        }
    }
    cr_cond_index_stats_t s;
    cr_cond_index_stats(ix, &s);
    uint64_t total = 0;
    for (int i = 0; i < RI; i++)
        total += (uint64_t)ref[i].n;
    assert_int_equal(s.entries, total);
    cr_cond_index_destroy(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_longest_prefix),  cmocka_unit_test(test_tiers),
        cmocka_unit_test(test_lru_eviction),    cmocka_unit_test(test_max_entries),
        cmocka_unit_test(test_random_vs_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
