/* Metadata backends against the embedded HTTP metadata server, URI parsing,
 * base64, and failure modes (server down, server silent, store full). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/net.h"
#include "transfer/metadata/meta_internal.h"
#include "transfer/metadata/metadata.h"

static cr__meta_server_t *srv;
static cr__meta_t *cli;

static int setup(void **state)
{
    (void)state;
    int rc = cr__meta_server_start("127.0.0.1", 0, "/metadata", 64u << 20, &srv);
    if (rc) {
        fprintf(stderr, "server start: %d\n", rc);
        return -1;
    }
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/metadata", cr__meta_server_port(srv));
    rc = cr__meta_open(uri, 5000, &cli);
    if (rc) {
        fprintf(stderr, "open %s: %d\n", uri, rc);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cr__meta_close(cli);
    cr__meta_server_stop(srv);
    cli = NULL;
    srv = NULL;
    return 0;
}

static void check_value(cr__meta_t *m, const char *key, const void *want, size_t wlen)
{
    char *v = NULL;
    size_t len = 0;
    int rc = cr__meta_get(m, key, &v, &len);
    if (rc != 0)
        fail_msg("get %s: expected 0, got %d", key, rc);
    if (len != wlen)
        fail_msg("get %s: expected %zu bytes, got %zu", key, wlen, len);
    assert_memory_equal(v, want, wlen);
    assert_int_equal(v[len], '\0');
    free(v);
}

static void test_base64(void **state)
{
    (void)state;
    static const char *vec[][2] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                   {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                   {"foobar", "Zm9vYmFy"}};
    for (size_t i = 0; i < 7; i++) {
        char *e = cr__b64_encode(vec[i][0], strlen(vec[i][0]));
        assert_string_equal(e, vec[i][1]);
        char *d;
        size_t dl;
        assert_int_equal(cr__b64_decode(e, strlen(e), &d, &dl), 0);
        assert_int_equal(dl, strlen(vec[i][0]));
        assert_memory_equal(d, vec[i][0], dl);
        free(d);
        free(e);
    }
    unsigned char bin[256];
    for (int i = 0; i < 256; i++)
        bin[i] = (unsigned char)(255 - i);
    for (size_t n = 0; n <= 256; n += 17) {
        char *e = cr__b64_encode(bin, n), *d;
        size_t dl;
        assert_int_equal(cr__b64_decode(e, strlen(e), &d, &dl), 0);
        assert_int_equal(dl, n);
        assert_memory_equal(d, bin, n);
        free(d);
        free(e);
    }
    char *d;
    assert_int_equal(cr__b64_decode("Zm9v!", 5, &d, NULL), -EINVAL);
    assert_int_equal(cr__b64_decode("Z", 1, &d, NULL), -EINVAL);
}

static void test_open_rejects_bad_uris(void **state)
{
    (void)state;
    static const char *bad[] = {"p2p",
                                "P2PHANDSHAKE",
                                "",
                                "ftp://127.0.0.1:1/x",
                                "http://",
                                "http:///metadata",
                                "http://:80/metadata",
                                "http://127.0.0.1:0/metadata",
                                "http://127.0.0.1:99999/metadata",
                                "http://127.0.0.1:80/m?key=x",
                                "http://user@127.0.0.1:80/m",
                                "etcd://",
                                "etcd://127.0.0.1",
                                "etcd://127.0.0.1:0",
                                "etcd://127.0.0.1:2379,",
                                "etcd://,127.0.0.1:2379",
                                "127.0.0.1",
                                "redis://127.0.0.1:6379",
                                "etcd://127.0.0.1:70000",
                                /* one string, on two lines (parenthesized: clang's
                                 * -Wstring-concatenation) */
                                ("etcd://a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9,j:10,k:11,l:12,m:13,n:14,"
                                 "o:15,p:16,q:17")};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr__meta_t *m = (cr__meta_t *)0x1;
        int rc = cr__meta_open(bad[i], 1000, &m);
        if (rc != -EINVAL)
            fail_msg("uri '%s': expected -EINVAL, got %d", bad[i], rc);
        assert_ptr_equal(m, (cr__meta_t *)0x1); /* untouched */
    }
    static const char *good[] = {"http://127.0.0.1:8080/metadata", "http://localhost/metadata",
                                 "http://[::1]:8080/metadata", "etcd://127.0.0.1:2379",
                                 "etcd://127.0.0.1:2379,127.0.0.2:2379/prefix",
                                 "etcd://[::1]:2379", "127.0.0.1:2379",
                                 "127.0.0.1:2379,127.0.0.2:2379"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        cr__meta_t *m = NULL;
        int rc = cr__meta_open(good[i], 1000, &m);
        if (rc != 0)
            fail_msg("uri '%s': expected 0, got %d", good[i], rc);
        cr__meta_close(m);
    }
    cr__meta_close(NULL);
}

static void test_put_get_del(void **state)
{
    (void)state;
    char *v = (char *)0x1;
    assert_int_equal(cr__meta_get(cli, "crescent/segment/a", &v, NULL), -ENOENT);
    assert_ptr_equal(v, (char *)0x1);
    assert_int_equal(cr__meta_put(cli, "crescent/segment/a", "{\"x\":1}", 7), 0);
    check_value(cli, "crescent/segment/a", "{\"x\":1}", 7);
    /* overwrite */
    assert_int_equal(cr__meta_put(cli, "crescent/segment/a", "second", 6), 0);
    check_value(cli, "crescent/segment/a", "second", 6);
    assert_int_equal(cr__meta_del(cli, "crescent/segment/a"), 0);
    assert_int_equal(cr__meta_get(cli, "crescent/segment/a", &v, NULL), -ENOENT);
    /* deleting a missing key is success */
    assert_int_equal(cr__meta_del(cli, "crescent/segment/a"), 0);
    /* empty value */
    assert_int_equal(cr__meta_put(cli, "empty", "", 0), 0);
    check_value(cli, "empty", "", 0);
}

static void test_keys_are_url_encoded(void **state)
{
    (void)state;
    static const char *keys[] = {"a b", "a&key=b", "x=y", "100%", "p/q?r#s", "plus+sign",
                                 "\xc3\xa9t\xc3\xa9", "tab\there"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char val[64];
        int n = snprintf(val, sizeof val, "value-%zu", i);
        assert_int_equal(cr__meta_put(cli, keys[i], val, (size_t)n), 0);
    }
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char val[64];
        int n = snprintf(val, sizeof val, "value-%zu", i);
        check_value(cli, keys[i], val, (size_t)n);
    }
    /* "a" was never written although "a&key=b" contains it */
    char *v;
    assert_int_equal(cr__meta_get(cli, "a", &v, NULL), -ENOENT);
}

static void test_binary_and_large_values(void **state)
{
    (void)state;
    size_t n = getenv("CRESCENT_SANITIZED") ? (1u << 20) : (8u << 20);
    unsigned char *big = malloc(n);
    for (size_t i = 0; i < n; i++)
        big[i] = (unsigned char)((i * 2654435761u) >> 13); /* includes NULs */
    assert_int_equal(cr__meta_put(cli, "big", big, n), 0);
    check_value(cli, "big", big, n);
    free(big);
    /* client-side bounds */
    assert_int_equal(cr__meta_put(cli, "toolarge", "x", (size_t)CR__META_VALUE_MAX + 1), -EINVAL);
    char key[CR__META_KEY_MAX + 1];
    memset(key, 'k', sizeof key - 1);
    key[CR__META_KEY_MAX] = '\0';
    assert_int_equal(cr__meta_put(cli, key, "x", 1), -EINVAL);
    key[CR__META_KEY_MAX - 1] = '\0'; /* longest valid key */
    assert_int_equal(cr__meta_put(cli, key, "x", 1), 0);
    check_value(cli, key, "x", 1);
    assert_int_equal(cr__meta_put(cli, "", "x", 1), -EINVAL);
    assert_int_equal(cr__meta_put(cli, NULL, "x", 1), -EINVAL);
}

static void test_server_capacity_bound(void **state)
{
    (void)state;
    cr__meta_server_t *small;
    assert_int_equal(cr__meta_server_start("127.0.0.1", 0, "/m", 1000, &small), 0);
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/m", cr__meta_server_port(small));
    cr__meta_t *m;
    assert_int_equal(cr__meta_open(uri, 5000, &m), 0);
    char val[600];
    memset(val, 'v', sizeof val);
    assert_int_equal(cr__meta_put(m, "k1", val, sizeof val), 0);
    assert_int_equal(cr__meta_put(m, "k2", val, sizeof val), -ENOSPC);
    /* overwriting in place with a smaller value fits */
    assert_int_equal(cr__meta_put(m, "k1", val, 100), 0);
    assert_int_equal(cr__meta_put(m, "k2", val, 500), 0);
    assert_int_equal(cr__meta_del(m, "k1"), 0);
    /* charged bytes: key + value + 64 per entry; k2 = 566, k3 = 366 -> 932 */
    assert_int_equal(cr__meta_put(m, "k3", val, 300), 0);
    assert_int_equal(cr__meta_put(m, "k4", val, 100), -ENOSPC);
    check_value(m, "k2", val, 500);
    /* a wrong path is a 404 -> -ENOENT */
    cr__meta_t *wrong;
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/other", cr__meta_server_port(small));
    assert_int_equal(cr__meta_open(uri, 5000, &wrong), 0);
    char *v;
    assert_int_equal(cr__meta_get(wrong, "k2", &v, NULL), -ENOENT);
    cr__meta_close(wrong);
    cr__meta_close(m);
    cr__meta_server_stop(small);
}

static void test_service_down_and_silent(void **state)
{
    (void)state;
    /* nothing listens: grab an ephemeral port and close it */
    uint16_t port;
    int fd = cr__net_listen("127.0.0.1", 0, 1, &port);
    assert_true(fd >= 0);
    close(fd);
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/metadata", port);
    cr__meta_t *m;
    assert_int_equal(cr__meta_open(uri, 2000, &m), 0);
    char *v;
    assert_int_equal(cr__meta_get(m, "k", &v, NULL), -EHOSTUNREACH);
    assert_int_equal(cr__meta_put(m, "k", "v", 1), -EHOSTUNREACH);
    cr__meta_close(m);

    /* listening but never answering: the call is bounded by the timeout */
    fd = cr__net_listen("127.0.0.1", 0, 4, &port);
    assert_true(fd >= 0);
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/metadata", port);
    assert_int_equal(cr__meta_open(uri, 300, &m), 0);
    assert_int_equal(cr__meta_get(m, "k", &v, NULL), -ETIMEDOUT);
    cr__meta_close(m);
    close(fd);
}

/* cr__meta_set_timeout bounds the requests after it (the engine's unpublish
 * at destroy: a stopped metadata service must not hold it for the full
 * timeout). The alarm turns a call that waits the open's 60 s into a
 * failure, not a slow pass. */
static void test_set_timeout_bounds_later_calls(void **state)
{
    (void)state;
    uint16_t port;
    int fd = cr__net_listen("127.0.0.1", 0, 4, &port); /* listening, never answering */
    assert_true(fd >= 0);
    char uri[128];
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/metadata", port);
    cr__meta_t *m;
    assert_int_equal(cr__meta_open(uri, 60000, &m), 0);
    cr__meta_set_timeout(m, 300);
    alarm(20);
    assert_int_equal(cr__meta_del(m, "k"), -ETIMEDOUT);
    alarm(0);
    cr__meta_close(m);
    close(fd);
    cr__meta_set_timeout(NULL, 300); /* a no-op */
}

static void expect_why(cr__meta_t *m, const char *want)
{
    char why[CR__META_WHY_TEXT];
    cr__meta_last_error(m, why, sizeof why);
    if (!strstr(why, want))
        fail_msg("last error \"%s\" does not say \"%s\"", why, want);
}

/* A failed call says what happened, for the engine's log line: a setup
 * against a wrong metadata URL used to log only "No route to host". */
static void test_last_error_says_what_happened(void **state)
{
    (void)state;
    char uri[128], want[192];
    cr__meta_t *m;
    /* nothing listens */
    uint16_t port;
    int fd = cr__net_listen("127.0.0.1", 0, 1, &port);
    assert_true(fd >= 0);
    close(fd);
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/metadata", port);
    assert_int_equal(cr__meta_open(uri, 2000, &m), 0);
    assert_int_equal(cr__meta_put(m, "k", "v", 1), -EHOSTUNREACH); /* the code stays */
    snprintf(want, sizeof want, "connection refused at %s (nothing listens there)", uri);
    expect_why(m, want);
    cr__meta_close(m);

    /* listening, never answering */
    fd = cr__net_listen("127.0.0.1", 0, 4, &port);
    assert_true(fd >= 0);
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/metadata", port);
    assert_int_equal(cr__meta_open(uri, 300, &m), 0);
    assert_int_equal(cr__meta_del(m, "k"), -ETIMEDOUT);
    snprintf(want, sizeof want, "no answer from %s within 300 ms", uri);
    expect_why(m, want);
    cr__meta_close(m);
    close(fd);

    /* a metadata server, the wrong path: 404 to a PUT; then a success
     * clears what the failure said */
    cr__meta_server_t *ms;
    assert_int_equal(cr__meta_server_start("127.0.0.1", 0, "/metadata", 1u << 20, &ms), 0);
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/wrong", cr__meta_server_port(ms));
    assert_int_equal(cr__meta_open(uri, 2000, &m), 0);
    assert_true(cr__meta_put(m, "k", "v", 1) < 0);
    snprintf(want, sizeof want, "HTTP 404 from %s (not a metadata service, or not its path)",
             uri);
    expect_why(m, want);
    cr__meta_close(m);
    snprintf(uri, sizeof uri, "http://127.0.0.1:%u/metadata", cr__meta_server_port(ms));
    assert_int_equal(cr__meta_open(uri, 2000, &m), 0);
    assert_int_equal(cr__meta_put(m, "k", "v", 1), 0);
    char why[CR__META_WHY_TEXT] = "x";
    cr__meta_last_error(m, why, sizeof why);
    assert_string_equal(why, "");
    cr__meta_close(m);
    cr__meta_server_stop(ms);
    cr__meta_last_error(NULL, why, sizeof why); /* NULL: "" */
    assert_string_equal(why, "");

    /* a host name that does not resolve, where the resolver says so */
    struct addrinfo *res = NULL;
    int gai = getaddrinfo("no-such-host.invalid", NULL, NULL, &res);
    if (res)
        freeaddrinfo(res);
    if (gai != EAI_NONAME) {
        print_message("the resolver answers %d for no-such-host.invalid: that case skipped\n", gai);
        return;
    }
    assert_int_equal(cr__meta_open("http://no-such-host.invalid:8080/metadata", 2000, &m), 0);
    assert_int_equal(cr__meta_put(m, "k", "v", 1), -EHOSTUNREACH);
    expect_why(m, "host name of http://no-such-host.invalid:8080/metadata does not resolve");
    cr__meta_close(m);
}

static void test_many_keys_rehash(void **state)
{
    (void)state;
    /* 600 keys: the server's table doubles 64 -> 1024 buckets on the way */
    for (int i = 0; i < 600; i++) {
        char key[32], val[32];
        snprintf(key, sizeof key, "many/%d", i);
        int n = snprintf(val, sizeof val, "v%d", i * 7);
        assert_int_equal(cr__meta_put(cli, key, val, (size_t)n), 0);
    }
    for (int i = 0; i < 600; i += 2) {
        char key[32];
        snprintf(key, sizeof key, "many/%d", i);
        assert_int_equal(cr__meta_del(cli, key), 0);
    }
    for (int i = 0; i < 600; i++) {
        char key[32], val[32];
        snprintf(key, sizeof key, "many/%d", i);
        int n = snprintf(val, sizeof val, "v%d", i * 7);
        if (i % 2) {
            check_value(cli, key, val, (size_t)n);
        } else {
            char *v;
            assert_int_equal(cr__meta_get(cli, key, &v, NULL), -ENOENT);
        }
    }
}

struct worker {
    int id, ok;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < 25; i++) {
        char key[64], val[64];
        int n = snprintf(val, sizeof val, "v-%d-%d", w->id, i);
        snprintf(key, sizeof key, "w%d/k%d", w->id, i);
        if (cr__meta_put(cli, key, val, (size_t)n) != 0)
            return NULL;
        char *got = NULL;
        size_t len;
        if (cr__meta_get(cli, key, &got, &len) != 0 || len != (size_t)n || memcmp(got, val, len)) {
            fprintf(stderr, "worker %d: key %s mismatch\n", w->id, key);
            free(got);
            return NULL;
        }
        free(got);
    }
    w->ok = 1;
    return NULL;
}

static void test_shared_client_threads(void **state)
{
    (void)state;
    pthread_t th[4];
    struct worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){i, 0};
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(w[i].ok);
    }
}

static void test_ipv6_loopback(void **state)
{
    (void)state;
    cr__meta_server_t *s6;
    int rc = cr__meta_server_start("::1", 0, "/metadata", 1u << 20, &s6);
    if (rc) { /* no IPv6 in this environment: nothing to test */
        fprintf(stderr, "note: ::1 unavailable (%d), IPv6 case skipped\n", rc);
        return;
    }
    char uri[128];
    snprintf(uri, sizeof uri, "http://[::1]:%u/metadata", cr__meta_server_port(s6));
    cr__meta_t *m;
    assert_int_equal(cr__meta_open(uri, 5000, &m), 0);
    assert_int_equal(cr__meta_put(m, "v6", "six", 3), 0);
    check_value(m, "v6", "six", 3);
    cr__meta_close(m);
    cr__meta_server_stop(s6);
}

static void test_server_bad_args(void **state)
{
    (void)state;
    cr__meta_server_t *s = NULL;
    assert_int_equal(cr__meta_server_start("127.0.0.1", 0, "nopath", 100, &s), -EINVAL);
    assert_int_equal(cr__meta_server_start("127.0.0.1", 0, "/m", 0, &s), -EINVAL);
    assert_int_equal(cr__meta_server_start("127.0.0.1", cr__meta_server_port(srv), "/m", 100, &s),
                     -EADDRINUSE);
    assert_null(s);
    cr__meta_server_stop(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_open_rejects_bad_uris),
        cmocka_unit_test_setup_teardown(test_put_get_del, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keys_are_url_encoded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_binary_and_large_values, setup, teardown),
        cmocka_unit_test(test_server_capacity_bound),
        cmocka_unit_test(test_service_down_and_silent),
        cmocka_unit_test(test_set_timeout_bounds_later_calls),
        cmocka_unit_test(test_last_error_says_what_happened),
        cmocka_unit_test_setup_teardown(test_many_keys_rehash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_client_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_bad_args, setup, teardown),
        cmocka_unit_test(test_ipv6_loopback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
