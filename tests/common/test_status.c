/* The status contract of include/crescent/common.h: one list generates the
 * store codes, cr_strerror and cr_err_name; no errno the library returns
 * (every one goes through cr__status_from_errno) means a store code. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/status.h"
#include "crescent/common.h"

#define ROW(name, value, text) {value, #name},
static const struct {
    int code;
    const char *name;
} rows[] = {CR_STORE_ERRC_MAP(ROW)};
#undef ROW
#define N_ROWS (sizeof rows / sizeof rows[0])

static int is_store_code(int st)
{
    for (size_t i = 0; i < N_ROWS; i++)
        if (rows[i].code == st)
            return 1;
    return 0;
}

/* Each code has one name and one number; names and texts come from the
 * list (a hand-kept table could drift). */
static void test_list_generates_names_and_texts(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS; i++) {
        assert_true(rows[i].code < 0);
        for (size_t j = i + 1; j < N_ROWS; j++) {
            if (rows[i].code == rows[j].code || !strcmp(rows[i].name, rows[j].name))
                fail_msg("%s and %s share a number or a name", rows[i].name, rows[j].name);
        }
        assert_string_equal(cr_err_name(rows[i].code), rows[i].name);
        const char *t = cr_strerror(rows[i].code);
        size_t l = strlen(rows[i].name);
        if (strncmp(t, rows[i].name, l) || strncmp(t + l, ": ", 2) || !t[l + 2])
            fail_msg("cr_strerror(%d) = \"%s\", want \"%s: <meaning>\"", rows[i].code, t,
                     rows[i].name);
    }
    assert_int_equal(CR_E_OBJECT_NOT_FOUND, -704);
    assert_int_equal(CR_E_CLIENT_NOT_FOUND, -103);
    assert_string_equal(cr_err_name(0), "OK");
    assert_string_equal(cr_strerror(0), "OK");
    assert_string_equal(cr_err_name(-EINVAL), "EINVAL");
    assert_string_equal(cr_err_name(-ETIMEDOUT), "ETIMEDOUT");
    assert_string_equal(cr_err_name(-5000), "UNKNOWN");
    assert_string_equal(cr_err_name(7), "UNKNOWN");
    assert_string_equal(cr_strerror(-5000), "unknown status");
}

/* The six errno values that collide with Mooncake's table (-1, -10,
 * -100..-103) are remapped, and no errno at all comes out as a store code
 * (regression: -ECONNABORTED came out as -103 = CLIENT_NOT_FOUND). */
static void test_no_errno_collides_with_a_store_code(void **state)
{
    (void)state;
    static const struct {
        int err, want;
    } remap[] = {{EPERM, -EACCES},          {ECHILD, -EIO},
                 {ENETDOWN, -EHOSTUNREACH}, {ENETUNREACH, -EHOSTUNREACH},
                 {ENETRESET, -ECONNRESET},  {ECONNABORTED, -ECONNRESET}};
    for (size_t i = 0; i < sizeof remap / sizeof remap[0]; i++) {
        assert_int_equal(cr__status_from_errno(remap[i].err), remap[i].want);
        assert_int_equal(cr__status_from_errno(-remap[i].err), remap[i].want);
    }
    int collisions = 0;
    for (int e = 1; e <= EHWPOISON; e++) { /* every Linux errno (1..133) */
        int st = cr__status_from_errno(e);
        if (st >= 0 || is_store_code(st)) {
            fprintf(stderr, "errno %d (%s) -> %d (%s)\n", e, cr_err_name(-e), st, cr_err_name(st));
            collisions++;
        }
    }
    assert_int_equal(collisions, 0);
    assert_int_equal(cr__status_from_errno(0), 0);
    errno = ECONNABORTED;
    assert_int_equal(CR__ERRNO(), -ECONNRESET);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_generates_names_and_texts),
        cmocka_unit_test(test_no_errno_collides_with_a_store_code),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
