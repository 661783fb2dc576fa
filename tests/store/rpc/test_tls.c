/* TLS with mutual certificates (src/common/tls) on the master RPC and the
 * HTTP server: a member is served; a peer without a certificate, with a
 * certificate of another CA, or speaking plain TCP is refused during the
 * handshake; a peer that stalls mid-handshake gets -ETIMEDOUT instead of
 * holding the server; partial or unsafe configurations are refused.
 * Certificates are made with the openssl CLI in a temp dir (skipped when it
 * is absent). In C so that the suite's ASan and TSan runs cover it. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/httpd.h"
#include "common/net.h"
#include "common/tls/tls.h"
#include "store/rpc/client.h"
#include "store/rpc/server.h"

static char g_dir[64];
static int g_have_pki;
#define NEED_PKI()                                                                       \
    do {                                                                                 \
        if (!g_have_pki)                                                                 \
            skip();                                                                      \
    } while (0)
static char g_path[8][128];
enum { CA, CERT, KEY, RCA, RCERT, RKEY };

static const char *path(int i) { return g_path[i]; }

static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* CA "ca" + "member", CA "rogue-ca" + "rogue". */
static int make_pki(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/crescent-tls-XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    const char *ec = "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256";
    for (int k = 0; k < 2; k++) {
        const char *ca = k ? "rogue-ca" : "ca", *m = k ? "rogue" : "member";
        if (sh("cd %s && %s -out %s.key 2>/dev/null && openssl req -x509 -new -key %s.key "
               "-subj /CN=%s -days 2 -out %s.pem -addext basicConstraints=critical,CA:TRUE "
               "-addext keyUsage=critical,keyCertSign 2>/dev/null",
               g_dir, ec, ca, ca, ca, ca) ||
            sh("cd %s && %s -out %s.key 2>/dev/null && chmod 600 %s.key && openssl req -new "
               "-key %s.key -subj /CN=%s -out %s.csr 2>/dev/null && printf "
               "'basicConstraints=CA:FALSE\\n' > %s.ext && openssl x509 -req -in %s.csr -CA "
               "%s.pem -CAkey %s.key -CAcreateserial -days 2 -out %s.pem -extfile %s.ext "
               "2>/dev/null",
               g_dir, ec, m, m, m, m, m, m, m, ca, ca, m, m))
            return -1;
        snprintf(g_path[k ? RCA : CA], sizeof g_path[0], "%s/%s.pem", g_dir, ca);
        snprintf(g_path[k ? RCERT : CERT], sizeof g_path[0], "%s/%s.pem", g_dir, m);
        snprintf(g_path[k ? RKEY : KEY], sizeof g_path[0], "%s/%s.key", g_dir, m);
    }
    return 0;
}

static int setup(void **st)
{
    (void)st;
    unsetenv(CR__TLS_ENV_CERT);
    unsetenv(CR__TLS_ENV_KEY);
    unsetenv(CR__TLS_ENV_CA);
    if (system("openssl version >/dev/null 2>&1") != 0) {
        fprintf(stderr, "openssl CLI not installed (scripts/install-deps.sh): skipping\n");
        return 0;
    }
    g_have_pki = make_pki() == 0;
    return g_have_pki ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    if (g_dir[0])
        sh("rm -rf %s", g_dir);
    return 0;
}

static cr__tls_t *load(int cert, int key, int ca)
{
    cr__tls_t *t = NULL;
    assert_int_equal(cr__tls_load(path(cert), path(key), path(ca), &t), 0);
    assert_non_null(t);
    return t;
}

static void test_config(void **st)
{
    (void)st;
    NEED_PKI();
    cr__tls_t *t = (cr__tls_t *)1;
    assert_int_equal(cr__tls_load(NULL, "", NULL, &t), 0); /* none: TLS off */
    assert_null(t);
    assert_int_equal(cr__tls_load(path(CERT), path(KEY), NULL, &t), -EINVAL); /* partial */
    assert_int_equal(cr__tls_load(path(CERT), "/nonexistent.key", path(CA), &t), -ENOENT);
    assert_int_equal(cr__tls_load(path(CERT), path(RKEY), path(CA), &t), -EINVAL); /* mismatch */
    chmod(path(KEY), 0644);
    assert_int_equal(cr__tls_load(path(CERT), path(KEY), path(CA), &t), -EPERM);
    chmod(path(KEY), 0600);
    /* the environment, as library users give it */
    setenv(CR__TLS_ENV_CERT, path(CERT), 1);
    setenv(CR__TLS_ENV_KEY, path(KEY), 1);
    setenv(CR__TLS_ENV_CA, path(CA), 1);
    assert_int_equal(cr__tls_load(NULL, NULL, NULL, &t), 0);
    assert_non_null(t);
    assert_string_equal(cr__tls_cert_path(t), path(CERT));
    cr__tls_free(t);
    unsetenv(CR__TLS_ENV_CERT);
    unsetenv(CR__TLS_ENV_KEY);
    unsetenv(CR__TLS_ENV_CA);
}

typedef struct hs_arg {
    const cr__tls_t *t;
    int fd, timeout_ms, rc;
    char peer[256];
} hs_arg_t;

static void *server_main(void *p)
{
    hs_arg_t *a = p;
    cr__tls_conn_t *c = NULL;
    a->rc = cr__tls_conn_new(a->t, a->fd, 1, &c);
    if (!a->rc)
        a->rc = cr__tls_conn_handshake(c, a->timeout_ms);
    if (!a->rc) {
        cr__tls_conn_peer(c, a->peer, sizeof a->peer);
        char buf[5];
        a->rc = cr__tls_conn_read_full(c, buf, 5, 5000);
        if (!a->rc)
            a->rc = memcmp(buf, "hello", 5) ? -EBADMSG
                                            : cr__tls_conn_write_full(c, "world", 5, 5000);
    }
    cr__tls_conn_free(c);
    return NULL;
}

/* Client with credentials tc (NULL: plain bytes) against a member server.
 * Returns the server's result; *crc the client's. */
static int pair_run(const cr__tls_t *ts, const cr__tls_t *tc, int send_nothing, int *crc)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    hs_arg_t a = {.t = ts, .fd = sv[0], .timeout_ms = send_nothing ? 300 : 5000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, server_main, &a), 0);
    *crc = 0;
    if (tc) {
        cr__tls_conn_t *c = NULL;
        *crc = cr__tls_conn_new(tc, sv[1], 0, &c);
        if (!*crc)
            *crc = cr__tls_conn_handshake(c, 5000);
        char buf[5];
        if (!*crc)
            *crc = cr__tls_conn_write_full(c, "hello", 5, 5000);
        if (!*crc)
            *crc = cr__tls_conn_read_full(c, buf, 5, 5000);
        if (!*crc && memcmp(buf, "world", 5))
            *crc = -EBADMSG;
        cr__tls_conn_free(c);
    } else if (!send_nothing) {
        const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        *crc = cr__net_write_full(sv[1], junk, sizeof junk - 1, 5000);
    }
    if (!send_nothing)
        shutdown(sv[1], SHUT_WR);
    pthread_join(th, NULL);
    close(sv[0]);
    close(sv[1]);
    return a.rc;
}

static void test_handshake(void **st)
{
    (void)st;
    NEED_PKI();
    cr__tls_t *member = load(CERT, KEY, CA);
    cr__tls_t *rogue = load(RCERT, RKEY, CA);   /* trusts our CA, holds a rogue cert */
    cr__tls_t *blind = load(RCERT, RKEY, RCA);  /* trusts only the rogue CA */
    int crc;
    assert_int_equal(pair_run(member, member, 0, &crc), 0);
    assert_int_equal(crc, 0);
    assert_int_equal(pair_run(member, rogue, 0, &crc), -EACCES);
    assert_int_not_equal(crc, 0);
    /* mutual: a client that does not trust the server's CA refuses it */
    assert_int_not_equal(pair_run(member, blind, 0, &crc), 0);
    assert_int_equal(crc, -EACCES);
    assert_int_equal(pair_run(member, NULL, 0, &crc), -EPROTO); /* plain HTTP */
    assert_int_equal(pair_run(member, NULL, 1, &crc), -ETIMEDOUT); /* a silent peer */
    cr__tls_free(member);
    cr__tls_free(rogue);
    cr__tls_free(blind);
}

static void rpc_handler(void *user, const cr__rpc_msg_t *req, cr__rpc_msg_t *rep)
{
    (void)user;
    rep->master_id = req->client_id.hi + 1;
}

static int ping(cr__rpc_server_t *s, const cr__tls_t *tls)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", cr__rpc_server_port(s));
    cr__rpc_client_t *c;
    assert_int_equal(cr__rpc_client_create(addr, 2000, 3000, &c), 0);
    cr__rpc_client_set_tls(c, tls);
    cr__rpc_msg_t m = {.type = CR__RPC_PING, .client_id = {41, 7}}, r;
    int rc = cr__rpc_client_call(c, &m, &r);
    if (rc == 0) {
        assert_int_equal(r.master_id, 42);
        cr__rpc_msg_free(&r);
    }
    cr__rpc_client_destroy(c);
    return rc;
}

static void test_rpc(void **st)
{
    (void)st;
    NEED_PKI();
    cr__tls_t *member = load(CERT, KEY, CA), *rogue = load(RCERT, RKEY, CA);
    cr__rpc_server_params_t p = {.host = "127.0.0.1", .n_threads = 2, .tls = member,
                                 .fn = rpc_handler};
    cr__rpc_server_t *s = NULL;
    assert_int_equal(cr__rpc_server_start(&p, &s), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ping(s, member), 0);
    assert_int_not_equal(ping(s, rogue), 0);
    assert_int_not_equal(ping(s, NULL), 0); /* plain TCP */
    /* the server counts a refusal after sending its alert, which the
     * client may read first: wait for the count (bounded, not timed) */
    cr__rpc_server_stats_t stt;
    for (int i = 0; i < 500; i++) {
        cr__rpc_server_stats(s, &stt);
        if (stt.auth_refused >= 2)
            break;
        usleep(10000);
    }
    assert_true(stt.auth_refused >= 2);
    cr__rpc_server_stop(s);
    cr__tls_free(member);
    cr__tls_free(rogue);
}

static void http_handler(void *user, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    (void)user;
    cr__http_resp_printf(resp, 200, "hi %s\n", req->path);
}

/* One GET over TLS with tc; returns the first bytes of the answer in buf
 * ("" if refused). */
static void http_get(uint16_t port, const cr__tls_t *tc, char *buf, size_t cap)
{
    buf[0] = 0;
    int fd = cr__net_connect("127.0.0.1", port, NULL, 2000);
    assert_true(fd >= 0);
    cr__tls_conn_t *c = NULL;
    assert_int_equal(cr__tls_conn_new(tc, fd, 0, &c), 0);
    const char req[] = "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if (!cr__tls_conn_handshake(c, 5000) &&
        !cr__tls_conn_write_full(c, req, sizeof req - 1, 5000)) {
        size_t got = 0;
        while (got + 1 < cap) {
            ssize_t k = cr__tls_conn_read(c, buf + got, cap - 1 - got);
            if (k == -EAGAIN) {
                struct timeval tv = {5, 0};
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
                continue;
            }
            if (k <= 0)
                break;
            got += (size_t)k;
        }
        buf[got] = 0;
    }
    cr__tls_conn_free(c);
    close(fd);
}

static void test_httpd(void **st)
{
    (void)st;
    NEED_PKI();
    cr__tls_t *member = load(CERT, KEY, CA), *rogue = load(RCERT, RKEY, CA);
    cr__httpd_params_t p = {.host = "127.0.0.1", .max_body = 4096, .fn = http_handler,
                            .tls = member};
    cr__httpd_t *h = NULL;
    assert_int_equal(cr__httpd_start_ex(&p, &h), 0);
    char buf[512];
    http_get(cr__httpd_port(h), member, buf, sizeof buf);
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    assert_non_null(strstr(buf, "hi /x"));
    http_get(cr__httpd_port(h), rogue, buf, sizeof buf);
    assert_null(strstr(buf, "HTTP/1.1"));
    /* plain HTTP gets no HTTP answer */
    int fd = cr__net_connect("127.0.0.1", cr__httpd_port(h), NULL, 2000);
    assert_true(fd >= 0);
    const char req[] = "GET /x HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(cr__net_write_full(fd, req, sizeof req - 1, 2000), 0);
    ssize_t k = recv(fd, buf, sizeof buf - 1, 0);
    buf[k > 0 ? k : 0] = 0;
    assert_null(strstr(buf, "HTTP/1.1"));
    close(fd);
    /* a connection stalled mid-handshake does not stop the server from stopping */
    fd = cr__net_connect("127.0.0.1", cr__httpd_port(h), NULL, 2000);
    assert_true(fd >= 0);
    cr__httpd_stop(h);
    close(fd);
    cr__tls_free(member);
    cr__tls_free(rogue);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_handshake),
        cmocka_unit_test(test_rpc),
        cmocka_unit_test(test_httpd),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
