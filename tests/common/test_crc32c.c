/* CRC-32C against RFC 3720 (iSCSI) B.4 vectors and "123456789"; the hardware
 * and table paths agree on every length and alignment, and extending a crc
 * piecewise equals one pass. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/crc32c.h"

static void test_known_vectors(void **s)
{
    (void)s;
    unsigned char buf[32];
    assert_int_equal(cr__crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(cr__crc32c_portable(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(cr__crc32c(0, "", 0), 0);
    memset(buf, 0, sizeof buf);
    assert_int_equal(cr__crc32c(0, buf, 32), 0x8A9136AAu);
    assert_int_equal(cr__crc32c_portable(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, sizeof buf);
    assert_int_equal(cr__crc32c(0, buf, 32), 0x62A8AB43u);
    assert_int_equal(cr__crc32c_portable(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)i;
    assert_int_equal(cr__crc32c(0, buf, 32), 0x46DD794Eu);
    assert_int_equal(cr__crc32c_portable(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)(31 - i);
    assert_int_equal(cr__crc32c(0, buf, 32), 0x113FDB5Cu);
    assert_int_equal(cr__crc32c_portable(0, buf, 32), 0x113FDB5Cu);
}

static void test_paths_agree_and_extend(void **s)
{
    (void)s;
    enum { N = 2 * 3 * 4096 + 64 }; /* past two rounds of the 3-lane hardware path */
    static unsigned char buf[N];
    uint32_t x = 12345;
    for (size_t i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (unsigned char)(x >> 16);
    }
    for (size_t off = 0; off < 9; off++) {
        for (size_t len = 0; len + off <= N; len += (len < 64 ? 1 : len < 4096 ? 61 : 509)) {
            uint32_t a = cr__crc32c(0, buf + off, len);
            uint32_t b = cr__crc32c_portable(0, buf + off, len);
            if (a != b)
                fail_msg("off %zu len %zu: hw %08x table %08x", off, len, a, b);
            /* each hardware implementation, whichever cr__crc32c picked */
            for (int impl = 1; impl <= 4; impl++) {
                if (!cr__crc32c_impl_available(impl))
                    continue;
                uint32_t h = cr__crc32c_impl(impl, 0x1234u, buf + off, len);
                uint32_t t = cr__crc32c_portable(0x1234u, buf + off, len);
                if (h != t)
                    fail_msg("off %zu len %zu: implementation %d %08x table %08x", off, len, impl,
                             h, t);
            }
            size_t cut = len / 3;
            uint32_t c = cr__crc32c(cr__crc32c(0, buf + off, cut), buf + off + cut, len - cut);
            if (a != c)
                fail_msg("off %zu len %zu: one pass %08x extended %08x", off, len, a, c);
        }
    }
    /* one flipped bit changes the checksum */
    uint32_t before = cr__crc32c(0, buf, N);
    buf[N / 2] ^= 1;
    assert_int_not_equal(before, cr__crc32c(0, buf, N));
}

/* The folding path is the one this machine's hardware offers; say so
 * instead of passing without having run it. */
static void test_pclmul_path_runs(void **s)
{
    (void)s;
    if (!cr__crc32c_impl_available(2))
        skip();
    assert_int_equal(cr__crc32c_impl(2, 0, "123456789", 9), 0xE3069283u);
    static unsigned char z[4096];
    assert_int_equal(cr__crc32c_impl(2, 0, z, 32), 0x8A9136AAu);
    assert_int_equal(cr__crc32c_impl(2, 0, z, sizeof z), cr__crc32c_portable(0, z, sizeof z));
}

/* The same for VPCLMULQDQ on AVX-512 (impl 3) and on AVX2 registers
 * (impl 4), each skipped, and said so, on a CPU without them; lengths
 * around their 256- and 128-byte blocks and their 64-byte tail steps. */
static void vpclmul_path_runs(int impl)
{
    if (!cr__crc32c_impl_available(impl))
        skip();
    assert_int_equal(cr__crc32c_impl(impl, 0, "123456789", 9), 0xE3069283u);
    static unsigned char b[3 * 4096 + 77];
    uint32_t x = 777;
    for (size_t i = 0; i < sizeof b; i++) {
        x = x * 1103515245u + 12345u;
        b[i] = (unsigned char)(x >> 16);
    }
    for (size_t len = 0; len <= sizeof b; len += (len < 1100 ? 1 : 97))
        for (size_t off = 0; off < 3 && off + len <= sizeof b; off++)
            if (cr__crc32c_impl(impl, 0xabcdu, b + off, len) !=
                cr__crc32c_portable(0xabcdu, b + off, len))
                fail_msg("len %zu off %zu: VPCLMULQDQ (impl %d) %08x table %08x", len, off,
                         impl, cr__crc32c_impl(impl, 0xabcdu, b + off, len),
                         cr__crc32c_portable(0xabcdu, b + off, len));
}

static void test_vpclmul_path_runs(void **s)
{
    (void)s;
    vpclmul_path_runs(3);
}

static void test_vpclmul256_path_runs(void **s)
{
    (void)s;
    vpclmul_path_runs(4);
}

/* Pieces hashed apart (raw register from 0), shifted by the bytes after
 * them and XORed in any order give the whole buffer's crc; combine joins
 * two crcs; a shift by 0 is the identity; a flipped byte is seen. */
static void test_pieces_in_any_order_and_combine(void **s)
{
    (void)s;
    enum { N = 300000 };
    static unsigned char buf[N];
    uint32_t x = 12345;
    for (size_t i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (unsigned char)(x >> 16);
    }
    uint32_t whole = cr__crc32c(0, buf, N);
    assert_int_equal(cr__crc32c_raw(0xFFFFFFFFu, buf, N), ~whole);
    assert_int_equal(cr__crc32c_shift(0x12345678u, 0), 0x12345678u);
    /* cut points, last to first */
    static const size_t cuts[] = {0, 1, 7, 64, 4096, 65536, 65537, 200000, 299999, N};
    size_t nc = sizeof cuts / sizeof *cuts;
    uint32_t acc = 0;
    for (size_t k = nc - 1; k > 0; k--) {
        size_t a = cuts[k - 1], b = cuts[k];
        acc ^= cr__crc32c_shift(cr__crc32c_raw(0, buf + a, b - a), N - b);
    }
    assert_int_equal(~(acc ^ cr__crc32c_shift(0xFFFFFFFFu, N)), whole);
    /* combine, pairwise */
    uint32_t c = cr__crc32c(0, buf, 0);
    for (size_t k = 1; k < nc; k++) {
        size_t a = cuts[k - 1], b = cuts[k];
        c = cr__crc32c_combine(c, cr__crc32c(0, buf + a, b - a), b - a);
    }
    assert_int_equal(c, whole);
    assert_int_equal(cr__crc32c_combine(cr__crc32c(0, "12345", 5), cr__crc32c(0, "6789", 4), 4),
                     0xE3069283u);
    /* long shifts (beyond 2^32 bytes) agree with shifting in two steps */
    uint64_t big = (5ull << 32) + 12345;
    assert_int_equal(cr__crc32c_shift(0xDEADBEEFu, big),
                     cr__crc32c_shift(cr__crc32c_shift(0xDEADBEEFu, 5ull << 32), 12345));
    /* a changed byte changes the combination */
    buf[150000] ^= 1;
    uint32_t acc2 = 0;
    for (size_t k = nc - 1; k > 0; k--) {
        size_t a = cuts[k - 1], b = cuts[k];
        acc2 ^= cr__crc32c_shift(cr__crc32c_raw(0, buf + a, b - a), N - b);
    }
    assert_int_not_equal(~(acc2 ^ cr__crc32c_shift(0xFFFFFFFFu, N)), whole);
}

/* The fused copy gives the bytes and the register that a copy and a hash
 * give, for every short length, lengths around the streaming threshold and
 * the 64-byte fold, every alignment of both buffers, continuing a register,
 * and never writes outside dst. */
static void test_copy_raw_equals_copy_then_hash(void **s)
{
    (void)s;
    enum { MAXLEN = 3 * 4096 + 200, PAD = 64 };
    static unsigned char src[MAXLEN + 32], dst[MAXLEN + 32 + 2 * PAD];
    uint32_t x = 777;
    for (size_t i = 0; i < sizeof src; i++) {
        x = x * 1103515245u + 12345u;
        src[i] = (unsigned char)(x >> 16);
    }
    static const size_t lens[] = {0,    1,    15,   16,   63,   64,   65,   127,  128,
                                  4095, 4096, 4097, 4160, 4175, 8191, 8192, 12288, MAXLEN};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (unsigned sa = 0; sa < 16; sa += 3)
            for (unsigned da = 0; da < 64; da += (da < 16 ? 1 : 7)) { /* 64-byte stores too */
                size_t len = lens[li];
                memset(dst, 0xA5, sizeof dst);
                unsigned char *d = dst + PAD + da;
                uint32_t got = cr__crc32c_copy_raw(0x1234567u, d, src + sa, len);
                assert_int_equal(got, cr__crc32c_raw(0x1234567u, src + sa, len));
                assert_memory_equal(d, src + sa, len);
                for (size_t i = 0; i < PAD + da; i++)
                    assert_int_equal(dst[i], 0xA5);
                for (size_t i = PAD + da + len; i < sizeof dst; i++)
                    assert_int_equal(dst[i], 0xA5);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_vectors),
        cmocka_unit_test(test_paths_agree_and_extend),
        cmocka_unit_test(test_pclmul_path_runs),
        cmocka_unit_test(test_vpclmul_path_runs),
        cmocka_unit_test(test_vpclmul256_path_runs),
        cmocka_unit_test(test_pieces_in_any_order_and_combine),
        cmocka_unit_test(test_copy_raw_equals_copy_then_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
