/* cr__copy_stream copies exactly like memcpy for every short length, the
 * lengths around its streaming threshold and every destination alignment,
 * and writes nothing outside dst. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/copy.h"

static void test_copy_stream_like_memcpy(void **s)
{
    (void)s;
    enum { MAXLEN = 2 * CR__COPY_STREAM_MIN + 200, PAD = 64 };
    static unsigned char src[MAXLEN + 32], dst[MAXLEN + 32 + 2 * PAD];
    uint32_t x = 99;
    for (size_t i = 0; i < sizeof src; i++) {
        x = x * 1103515245u + 12345u;
        src[i] = (unsigned char)(x >> 16);
    }
    static const size_t lens[] = {0, 1, 63, 64, 65, CR__COPY_STREAM_MIN - 1, CR__COPY_STREAM_MIN,
                                  CR__COPY_STREAM_MIN + 1, CR__COPY_STREAM_MIN + 63,
                                  CR__COPY_STREAM_MIN + 64, MAXLEN};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (unsigned sa = 0; sa < 16; sa += 5)
            for (unsigned da = 0; da < 16; da++) {
                size_t len = lens[li];
                memset(dst, 0x5A, sizeof dst);
                unsigned char *d = dst + PAD + da;
                cr__copy_stream(d, src + sa, len);
                assert_memory_equal(d, src + sa, len);
                for (size_t i = 0; i < PAD + da; i++)
                    assert_int_equal(dst[i], 0x5A);
                for (size_t i = PAD + da + len; i < sizeof dst; i++)
                    assert_int_equal(dst[i], 0x5A);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_stream_like_memcpy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
