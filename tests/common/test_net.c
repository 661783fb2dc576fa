/* Socket helpers: host:port parsing, listen/connect, full reads/writes,
 * timeouts, passing an fd. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <fcntl.h>

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

/* An fd passed with the bytes arrives (close-on-exec), a second one while
 * the caller already holds one is closed, and a message with more fds than
 * the receiver takes is refused rather than silently cut. */
static void test_pass_fd(void **s)
{
    (void)s;
    int sp[2], p[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
    assert_int_equal(pipe(p), 0);
    assert_int_equal(cr__net_send_fd(sp[0], "hello", 5, p[1]), 5);
    char b[16];
    int got = -1;
    assert_int_equal(cr__net_recv_fd(sp[1], b, 5, MSG_WAITALL, &got), 5);
    assert_memory_equal(b, "hello", 5);
    assert_true(got >= 0 && got != p[1]);
    assert_true(fcntl(got, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(write(got, "x", 1), 1); /* the pipe's write end */
    assert_int_equal(read(p[0], b, 1), 1);
    assert_int_equal(b[0], 'x');

    /* a second fd while one is held: closed, the held one kept */
    assert_int_equal(cr__net_send_fd(sp[0], "y", 1, p[1]), 1);
    int held = got;
    assert_int_equal(cr__net_recv_fd(sp[1], b, 1, 0, &got), 1);
    assert_int_equal(got, held);
    close(got);

    /* more fds than the receiver's room: -EPROTO, none leaked into *passed
     * beyond the first */
    int many[8];
    for (int i = 0; i < 8; i++)
        many[i] = p[1];
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof many)];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {.iov_base = "z", .iov_len = 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                       .msg_controllen = sizeof ctl.b};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof many);
    memcpy(CMSG_DATA(c), many, sizeof many);
    assert_int_equal(sendmsg(sp[0], &m, 0), 1);
    got = -1;
    assert_int_equal(cr__net_recv_fd(sp[1], b, 1, 0, &got), -EPROTO);
    if (got >= 0)
        close(got);

    /* EOF */
    close(sp[0]);
    got = -1;
    assert_int_equal(cr__net_recv_fd(sp[1], b, 1, 0, &got), 0);
    assert_int_equal(got, -1);
    close(sp[1]);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_roundtrip_and_timeout),
        cmocka_unit_test(test_connect_refused),
        cmocka_unit_test(test_pass_fd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
