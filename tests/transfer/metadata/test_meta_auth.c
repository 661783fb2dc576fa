/* Metadata integrity (issue 11, attack 2): with the cluster key, values are
 * stored signed and every reader verifies them, whatever the server does —
 * an unsigned descriptor (a non-member, or a server without security such
 * as an open etcd) or one moved to another segment's key reads as -EACCES;
 * a secure server refuses unsigned requests and unsigned values. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/auth/auth.h"
#include "transfer/metadata/metadata.h"

static const char K1[] = "0123456789abcdef0123456789abcdef-one";
static const char K2[] = "0123456789abcdef0123456789abcdef-two";

static cr__meta_t *open_client(cr__meta_server_t *srv, cr__auth_t *a)
{
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/metadata", cr__meta_server_port(srv));
    cr__meta_t *m;
    assert_int_equal(cr__meta_open(uri, 5000, &m), 0);
    cr__meta_set_auth(m, a);
    return m;
}

static void test_reader_rejects_unsigned_and_moved_values(void **st)
{
    (void)st;
    cr__auth_t *a;
    assert_int_equal(cr__auth_from_secret(K1, strlen(K1), &a), 0);
    cr__meta_server_t *srv; /* an open server: integrity rests on the readers */
    assert_int_equal(cr__meta_server_start("127.0.0.1", 0, "/metadata", 1u << 20, &srv), 0);
    cr__meta_t *member = open_client(srv, a), *stranger = open_client(srv, NULL);
    char *v = NULL;
    size_t n = 0;
    /* a member's value round-trips */
    assert_int_equal(cr__meta_put(member, "seg/A", "{\"a\":1}", 7), 0);
    assert_int_equal(cr__meta_get(member, "seg/A", &v, &n), 0);
    assert_int_equal(n, 7);
    assert_memory_equal(v, "{\"a\":1}", 7);
    free(v);
    /* a stranger overwrites it: members ignore the result */
    assert_int_equal(cr__meta_put(stranger, "seg/A", "{\"evil\":1}", 10), 0);
    assert_int_equal(cr__meta_get(member, "seg/A", &v, &n), -EACCES);
    /* a valid signed value copied under another key does not verify */
    assert_int_equal(cr__meta_put(member, "seg/B", "{\"b\":2}", 7), 0);
    assert_int_equal(cr__meta_get(stranger, "seg/B", &v, &n), 0); /* the raw envelope */
    assert_int_equal(cr__meta_put(stranger, "seg/A", v, n), 0);
    free(v);
    assert_int_equal(cr__meta_get(member, "seg/A", &v, &n), -EACCES);
    assert_int_equal(cr__meta_get(member, "seg/B", &v, &n), 0);
    free(v);
    cr__meta_close(member);
    cr__meta_close(stranger);
    cr__meta_server_stop(srv);
    cr__auth_free(a);
}

static void test_secure_server_refuses_strangers(void **st)
{
    (void)st;
    cr__auth_t *a, *b;
    assert_int_equal(cr__auth_from_secret(K1, strlen(K1), &a), 0);
    assert_int_equal(cr__auth_from_secret(K2, strlen(K2), &b), 0);
    cr__meta_server_t *srv;
    assert_int_equal(cr__meta_server_start_auth("127.0.0.1", 0, "/metadata", 1u << 20, 0, a, &srv),
                     0);
    cr__meta_t *member = open_client(srv, a), *stranger = open_client(srv, NULL),
               *other = open_client(srv, b);
    char *v = NULL;
    size_t n = 0;
    assert_int_equal(cr__meta_put(member, "seg/A", "x", 1), 0);
    assert_int_equal(cr__meta_put(stranger, "seg/A", "y", 1), -EACCES);
    assert_int_equal(cr__meta_put(other, "seg/A", "y", 1), -EACCES);
    assert_int_equal(cr__meta_get(stranger, "seg/A", &v, &n), -EACCES);
    assert_int_equal(cr__meta_del(stranger, "seg/A"), -EACCES);
    assert_int_equal(cr__meta_get(member, "seg/A", &v, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(v[0], 'x');
    free(v);
    assert_int_equal(cr__meta_del(member, "seg/A"), 0);
    cr__meta_close(member);
    cr__meta_close(stranger);
    cr__meta_close(other);
    cr__meta_server_stop(srv);
    cr__auth_free(a);
    cr__auth_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader_rejects_unsigned_and_moved_values),
        cmocka_unit_test(test_secure_server_refuses_strangers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
