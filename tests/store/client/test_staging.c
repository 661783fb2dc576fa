/* Staging allocator: allocation, exhaustion with timeout, coalescing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "store/client/staging.h"

static uint8_t buf[1 << 20] __attribute__((aligned(4096)));

static void test_alloc_free_coalesce(void **state)
{
    (void)state;
    cr__staging_t s;
    assert_int_equal(cr__staging_init(&s, buf, sizeof buf), 0);
    void *a = cr__staging_alloc(&s, 1, 0);
    void *b = cr__staging_alloc(&s, 4096 * 3, 0);
    void *c = cr__staging_alloc(&s, 5000, 0);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_ptr_equal(a, buf);
    assert_ptr_equal(b, buf + 4096);
    assert_ptr_equal(c, buf + 4 * 4096);
    /* whole buffer is not available now */
    assert_null(cr__staging_alloc(&s, sizeof buf, 10));
    cr__staging_free(&s, b, 4096 * 3);
    cr__staging_free(&s, a, 1);
    cr__staging_free(&s, c, 5000);
    assert_int_equal(s.n_free, 1);
    assert_int_equal(s.in_use, 0);
    void *all = cr__staging_alloc(&s, sizeof buf, 0);
    assert_ptr_equal(all, buf);
    cr__staging_free(&s, all, sizeof buf);
    cr__staging_fini(&s);
}

static void test_bounds(void **state)
{
    (void)state;
    cr__staging_t s;
    assert_int_equal(cr__staging_init(&s, buf, 100), -22);
    assert_int_equal(cr__staging_init(&s, buf, sizeof buf), 0);
    assert_null(cr__staging_alloc(&s, 0, 0));
    assert_null(cr__staging_alloc(&s, sizeof buf + 1, 0));
    /* many small allocations, freed in a scattered order, coalesce back */
    void *p[256];
    for (int i = 0; i < 256; i++)
        assert_non_null(p[i] = cr__staging_alloc(&s, 4096, 0));
    assert_null(cr__staging_alloc(&s, 1, 0));
    for (int i = 0; i < 256; i += 2)
        cr__staging_free(&s, p[i], 4096);
    for (int i = 1; i < 256; i += 2)
        cr__staging_free(&s, p[i], 4096);
    assert_int_equal(s.n_free, 1);
    assert_int_equal(s.free_list[0].len, sizeof buf);
    cr__staging_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_free_coalesce),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
