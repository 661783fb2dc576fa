/* Socket helpers: host:port parsing, listen/connect, full reads/writes, timeouts. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/net.h"

static void test_split(void **s)
{
    (void)s;
    char h[CR__HOST_MAX];
    uint16_t p;
    assert_int_equal(cr__net_split_hostport("127.0.0.1:80", h, &p, 0), 0);
    assert_string_equal(h, "127.0.0.1");
    assert_int_equal(p, 80);
    assert_int_equal(cr__net_split_hostport("[::1]:9", h, &p, 0), 0);
    assert_string_equal(h, "::1");
    assert_int_equal(cr__net_split_hostport("host:0", h, &p, 0), -EINVAL);
    assert_int_equal(cr__net_split_hostport("host:0", h, &p, 1), 0);
    assert_int_equal(cr__net_split_hostport("host", h, &p, 0), -EINVAL);
    assert_int_equal(cr__net_split_hostport(":80", h, &p, 0), -EINVAL);
    assert_int_equal(cr__net_split_hostport("h:65536", h, &p, 0), -EINVAL);
    assert_int_equal(cr__net_split_hostport("h:12a", h, &p, 0), -EINVAL);
}

static void test_roundtrip_and_timeout(void **s)
{
    (void)s;
    uint16_t port;
    int lfd = cr__net_listen("127.0.0.1", 0, 4, &port);
    assert_true(lfd >= 0);
    assert_true(port > 0);
    int c = cr__net_connect("127.0.0.1", port, NULL, 1000);
    assert_true(c >= 0);
    int a = accept(lfd, NULL, NULL);
    assert_true(a >= 0);
    char buf[100000], out[100000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (char)(i * 7);
    assert_int_equal(cr__net_write_full(c, buf, sizeof buf, 1000), 0);
    assert_int_equal(cr__net_read_full(a, out, sizeof out, 1000), 0);
    assert_memory_equal(buf, out, sizeof buf);
    /* nothing more to read: times out instead of hanging */
    assert_int_equal(cr__net_read_full(a, out, 1, 50), -ETIMEDOUT);
    close(c);
    assert_int_equal(cr__net_read_full(a, out, 1, 1000), -ECONNRESET);
    close(a);
    close(lfd);
}

static void test_connect_refused(void **s)
{
    (void)s;
    uint16_t port;
    int lfd = cr__net_listen("127.0.0.1", 0, 1, &port);
    close(lfd); /* nobody listens there now */
    int c = cr__net_connect("127.0.0.1", port, NULL, 1000);
    assert_int_equal(c, -ECONNREFUSED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_roundtrip_and_timeout),
        cmocka_unit_test(test_connect_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
