/* Prefix block hashing: golden vectors computed independently with Debian's
 * python3-xxhash (xxhash.xxh3_64_intdigest over struct.pack('<I'/'<Q')). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "crescent/conductor.h"

static void test_block_and_chain_vectors(void **st)
{
    (void)st;
    uint32_t t[3] = {1, 2, 3};
    assert_int_equal(cr_cond_hash_block(NULL, 0), 0x2d06800538d394c2ull);
    assert_int_equal(cr_cond_hash_block(t, 3), 0x6bbf7429332bea48ull);
    assert_int_equal(cr_cond_hash_chain(1, 2), 0x7ee86c281446befull);
}

static void test_rolling_block16(void **st)
{
    (void)st;
    uint32_t tok[40];
    for (uint32_t i = 0; i < 40; i++)
        tok[i] = (i * 7919 + 13) % 128256;
    uint64_t out[4];
    size_t n = 99;
    assert_int_equal(cr_cond_hash_tokens(tok, 40, 16, out, 4, &n), 0);
    assert_int_equal(n, 2); /* 8 trailing tokens: partial block, not hashed */
    assert_int_equal(out[0], 0xf87dc9d4a451b631ull);
    assert_int_equal(out[1], 0x3b1f94afc00c5855ull);
}

static void test_rolling_block512(void **st)
{
    (void)st;
    static uint32_t tok[1536];
    for (uint32_t i = 0; i < 1536; i++)
        tok[i] = i;
    uint64_t out[3];
    size_t n = 0;
    assert_int_equal(cr_cond_hash_tokens(tok, 1536, 512, out, 3, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(out[0], 0xed23844e189677f1ull);
    assert_int_equal(out[1], 0x7629bc6b90b4419cull);
    assert_int_equal(out[2], 0x9bc9ba12db697200ull);
    /* prefix property: the same first block gives the same first hash, a
     * different first block changes every later hash */
    tok[0] = 7;
    uint64_t out2[3];
    assert_int_equal(cr_cond_hash_tokens(tok, 1536, 512, out2, 3, &n), 0);
    for (int i = 0; i < 3; i++)
        assert_int_not_equal(out[i], out2[i]);
    tok[0] = 0;
    tok[1535] = 9;
    assert_int_equal(cr_cond_hash_tokens(tok, 1536, 512, out2, 3, &n), 0);
    assert_int_equal(out2[0], out[0]);
    assert_int_equal(out2[1], out[1]);
    assert_int_not_equal(out2[2], out[2]);
}

static void test_bad_arguments(void **st)
{
    (void)st;
    uint32_t tok[32] = {0};
    uint64_t out[1];
    size_t n = 1234;
    assert_int_equal(cr_cond_hash_tokens(tok, 32, 0, out, 1, &n), -EINVAL);
    assert_int_equal(cr_cond_hash_tokens(tok, 32, CR_COND_MAX_BLOCK_TOKENS + 1, out, 1, &n),
                     -EINVAL);
    assert_int_equal(cr_cond_hash_tokens(NULL, 32, 16, out, 1, &n), -EINVAL);
    assert_int_equal(cr_cond_hash_tokens(tok, 32, 16, out, 1, NULL), -EINVAL);
    assert_int_equal(cr_cond_hash_tokens(tok, 32, 16, out, 1, &n), -ENOSPC);
    assert_int_equal(n, 1234); /* untouched on failure */
    assert_int_equal(cr_cond_hash_tokens(tok, 15, 16, NULL, 0, &n), 0);
    assert_int_equal(n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_and_chain_vectors),
        cmocka_unit_test(test_rolling_block16),
        cmocka_unit_test(test_rolling_block512),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
