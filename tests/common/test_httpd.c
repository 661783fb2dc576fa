/* HTTP server wrapper (src/common/httpd.c) driven by libcurl on 127.0.0.1;
 * with security on, request targets longer than what is signed-checked. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "common/auth/auth.h"
#include "common/httpd.h"

#define MAX_BODY 65536

static int handler_calls; /* guarded by calls_mu */
static int slow_started, slow_finished; /* atomics */
static pthread_mutex_t calls_mu = PTHREAD_MUTEX_INITIALIZER;

/* Echo handler:
 *   /echo   -> "<method> <path> x=<arg x or (null)> len=<body_len>\n<body>"
 *   /status -> status from ?code=N, body "custom", content type application/json
 *   /binary -> body echoed verbatim as application/octet-stream */
static void handler(void *user, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    (void)user;
    pthread_mutex_lock(&calls_mu);
    handler_calls++;
    pthread_mutex_unlock(&calls_mu);
    if (strcmp(req->path, "/status") == 0) {
        const char *code = cr__http_req_arg(req, "code");
        cr__http_resp_set(resp, code ? atoi(code) : 200, "application/json", "custom", 6);
        return;
    }
    if (strcmp(req->path, "/binary") == 0) {
        cr__http_resp_set(resp, 200, "application/octet-stream", req->body, req->body_len);
        return;
    }
    if (strcmp(req->path, "/empty") == 0)
        return; /* default: 200, no body */
    if (strcmp(req->path, "/slow") == 0) {
        __atomic_store_n(&slow_started, 1, __ATOMIC_SEQ_CST);
        usleep(300 * 1000);
        __atomic_store_n(&slow_finished, 1, __ATOMIC_SEQ_CST);
        return;
    }
    const char *x = cr__http_req_arg(req, "x");
    cr__http_resp_printf(resp, 200, "%s %s x=%s len=%zu\n%s", req->method, req->path,
                         x ? x : "(null)", req->body_len, req->body);
}

static int calls(void)
{
    pthread_mutex_lock(&calls_mu);
    int n = handler_calls;
    pthread_mutex_unlock(&calls_mu);
    return n;
}

struct buf {
    char *p;
    size_t len;
};

static size_t on_data(char *ptr, size_t size, size_t n, void *ud)
{
    struct buf *b = ud;
    size_t add = size * n;
    char *np = realloc(b->p, b->len + add + 1);
    if (!np)
        return 0;
    b->p = np;
    memcpy(b->p + b->len, ptr, add);
    b->len += add;
    b->p[b->len] = '\0';
    return add;
}

struct upload {
    const char *p;
    size_t len, off;
};

static size_t on_read(char *ptr, size_t size, size_t n, void *ud)
{
    struct upload *u = ud;
    size_t want = size * n, left = u->len - u->off;
    size_t k = want < left ? want : left;
    memcpy(ptr, u->p + u->off, k);
    u->off += k;
    return k;
}

/* Performs one request. chunked: send the body with Transfer-Encoding: chunked.
 * Returns the HTTP status (or -1 on transport error); *out gets the body. */
static long request(uint16_t port, const char *method, const char *path_query, const void *body,
                    size_t len, int chunked, struct buf *out, char *ctype, size_t ctype_cap)
{
    CURL *c = curl_easy_init();
    assert_non_null(c);
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path_query);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    struct curl_slist *hdrs = NULL;
    hdrs = curl_slist_append(hdrs, "Expect:");
    struct upload up = {body, len, 0};
    if (body && chunked) {
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(c, CURLOPT_READDATA, &up);
        hdrs = curl_slist_append(hdrs, "Transfer-Encoding: chunked");
    } else if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    CURLcode rc = curl_easy_perform(c);
    long status = -1;
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (ctype) {
            char *ct = NULL;
            curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
            snprintf(ctype, ctype_cap, "%s", ct ? ct : "");
        }
    } else {
        fprintf(stderr, "curl %s %s: %s\n", method, url, curl_easy_strerror(rc));
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return status;
}

static cr__httpd_t *srv;

static int setup(void **state)
{
    (void)state;
    handler_calls = 0;
    int rc = cr__httpd_start("127.0.0.1", 0, MAX_BODY, handler, NULL, &srv);
    if (rc) {
        fprintf(stderr, "cr__httpd_start: %d\n", rc);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cr__httpd_stop(srv);
    srv = NULL;
    return 0;
}

static void test_get_with_query(void **state)
{
    (void)state;
    uint16_t port = cr__httpd_port(srv);
    assert_true(port != 0);
    struct buf b = {0};
    long st = request(port, "GET", "/echo?x=a%20b%26c&y=2", NULL, 0, 0, &b, NULL, 0);
    assert_int_equal(st, 200);
    assert_string_equal(b.p, "GET /echo x=a b&c len=0\n");
    free(b.p);
    b = (struct buf){0};
    st = request(port, "GET", "/echo", NULL, 0, 0, &b, NULL, 0);
    assert_int_equal(st, 200);
    assert_string_equal(b.p, "GET /echo x=(null) len=0\n");
    free(b.p);
    /* a decoded NUL inside a value: no argument, not a shorter one */
    b = (struct buf){0};
    st = request(port, "GET", "/echo?x=k%00y", NULL, 0, 0, &b, NULL, 0);
    assert_int_equal(st, 200);
    assert_string_equal(b.p, "GET /echo x=(null) len=0\n");
    free(b.p);
}

static void test_put_body_and_status(void **state)
{
    (void)state;
    uint16_t port = cr__httpd_port(srv);
    struct buf b = {0};
    long st = request(port, "PUT", "/echo?x=k", "hello", 5, 0, &b, NULL, 0);
    assert_int_equal(st, 200);
    assert_string_equal(b.p, "PUT /echo x=k len=5\nhello");
    free(b.p);

    b = (struct buf){0};
    char ct[128];
    st = request(port, "DELETE", "/status?code=404", NULL, 0, 0, &b, ct, sizeof ct);
    assert_int_equal(st, 404);
    assert_string_equal(b.p, "custom");
    assert_string_equal(ct, "application/json");
    free(b.p);

    b = (struct buf){0};
    st = request(port, "POST", "/empty", "x", 1, 0, &b, NULL, 0);
    assert_int_equal(st, 200);
    assert_int_equal(b.len, 0);
    free(b.p);
}

static void test_binary_body_roundtrip(void **state)
{
    (void)state;
    uint16_t port = cr__httpd_port(srv);
    size_t n = MAX_BODY; /* exactly the bound: accepted */
    unsigned char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (unsigned char)(i * 131 + 7); /* includes NUL bytes */
    struct buf b = {0};
    long st = request(port, "PUT", "/binary", data, n, 0, &b, NULL, 0);
    assert_int_equal(st, 200);
    assert_int_equal(b.len, n);
    assert_memory_equal(b.p, data, n);
    free(b.p);
    /* same through a chunked upload */
    b = (struct buf){0};
    st = request(port, "PUT", "/binary", data, n, 1, &b, NULL, 0);
    assert_int_equal(st, 200);
    assert_int_equal(b.len, n);
    assert_memory_equal(b.p, data, n);
    free(b.p);
    free(data);
}

static void test_body_too_large_is_413(void **state)
{
    (void)state;
    uint16_t port = cr__httpd_port(srv);
    size_t n = MAX_BODY + 1;
    char *data = calloc(1, n);
    int before = calls();
    struct buf b = {0};
    long st = request(port, "PUT", "/binary", data, n, 0, &b, NULL, 0);
    assert_int_equal(st, 413);
    free(b.p);
    /* chunked: no Content-Length, discovered while reading */
    char *big = calloc(1, 4 * n);
    b = (struct buf){0};
    st = request(port, "PUT", "/binary", big, 4 * n, 1, &b, NULL, 0);
    assert_int_equal(st, 413);
    free(b.p);
    free(big);
    free(data);
    assert_int_equal(calls(), before); /* handler never saw them */
    /* and the server still works */
    b = (struct buf){0};
    st = request(port, "GET", "/echo?x=1", NULL, 0, 0, &b, NULL, 0);
    assert_int_equal(st, 200);
    free(b.p);
}

static void test_body_budget_is_503(void **state)
{
    (void)state;
    uint16_t port = cr__httpd_port(srv);
    cr__httpd_set_body_budget(srv, 8192);
    int before = calls();
    char *data = calloc(1, 20000);
    struct buf b = {0};
    long st = request(port, "PUT", "/binary", data, 20000, 0, &b, NULL, 0);
    assert_int_equal(st, 503);
    free(b.p);
    assert_int_equal(calls(), before);
    /* a small body still fits, and the budget was given back */
    for (int i = 0; i < 3; i++) {
        b = (struct buf){0};
        st = request(port, "PUT", "/binary", data, 100, 0, &b, NULL, 0);
        assert_int_equal(st, 200);
        assert_int_equal(b.len, 100);
        free(b.p);
    }
    free(data);
}

struct worker {
    uint16_t port;
    int id, ok;
};

static void *client_thread(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < 20; i++) {
        char q[64], body[64], want[160];
        snprintf(q, sizeof q, "/echo?x=%d-%d", w->id, i);
        int bl = snprintf(body, sizeof body, "body-%d-%d", w->id, i);
        snprintf(want, sizeof want, "PUT /echo x=%d-%d len=%d\n%s", w->id, i, bl, body);
        struct buf b = {0};
        long st = request(w->port, "PUT", q, body, (size_t)bl, 0, &b, NULL, 0);
        if (st != 200 || !b.p || strcmp(b.p, want) != 0) {
            fprintf(stderr, "worker %d req %d: expected 200 '%s', got %ld '%s'\n", w->id, i, want,
                    st, b.p ? b.p : "");
            free(b.p);
            return NULL;
        }
        free(b.p);
    }
    w->ok = 1;
    return NULL;
}

static void test_concurrent_clients(void **state)
{
    (void)state;
    pthread_t th[4];
    struct worker w[4];
    int before = calls();
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){cr__httpd_port(srv), i, 0};
        pthread_create(&th[i], NULL, client_thread, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(w[i].ok);
    }
    assert_int_equal(calls() - before, 80);
}

static void *slow_client(void *arg)
{
    struct buf b = {0};
    request(*(uint16_t *)arg, "GET", "/slow", NULL, 0, 0, &b, NULL, 0); /* may fail: server stops */
    free(b.p);
    return NULL;
}

static void test_stop_waits_for_running_handler(void **state)
{
    (void)state;
    uint16_t port = cr__httpd_port(srv);
    slow_started = slow_finished = 0;
    pthread_t th;
    pthread_create(&th, NULL, slow_client, &port);
    for (int i = 0; i < 2000 && !__atomic_load_n(&slow_started, __ATOMIC_SEQ_CST); i++)
        usleep(1000);
    assert_int_equal(__atomic_load_n(&slow_started, __ATOMIC_SEQ_CST), 1);
    cr__httpd_stop(srv); /* must not return while the handler runs */
    srv = NULL;
    assert_int_equal(__atomic_load_n(&slow_finished, __ATOMIC_SEQ_CST), 1);
    pthread_join(th, NULL);
}

static void test_port_in_use_and_bad_args(void **state)
{
    (void)state;
    cr__httpd_t *other = NULL;
    int rc = cr__httpd_start("127.0.0.1", cr__httpd_port(srv), 1024, handler, NULL, &other);
    assert_int_equal(rc, -EADDRINUSE);
    assert_null(other);
    assert_int_equal(cr__httpd_start("127.0.0.1", 0, 1024, NULL, NULL, &other), -EINVAL);
    cr__httpd_stop(NULL); /* no-op */
}

/* GET of target (any length) with header hdr (NULL = none); returns the
 * status, -1 on transport error. */
static long signed_get(uint16_t port, const char *target, const char *hdr)
{
    CURL *c = curl_easy_init();
    assert_non_null(c);
    size_t n = strlen(target) + 64;
    char *url = malloc(n);
    assert_non_null(url);
    snprintf(url, n, "http://127.0.0.1:%u%s", port, target);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    struct buf out = {0};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
    struct curl_slist *hdrs = NULL;
    char line[CR__AUTH_HTTP_MAX + 64];
    if (hdr) {
        snprintf(line, sizeof line, "%s: %s", CR__AUTH_HTTP_HEADER, hdr);
        hdrs = curl_slist_append(hdrs, line);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    long status = -1;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    free(out.p);
    free(url);
    return status;
}

/* Security on: the signature covers the whole request target, so a target
 * longer than the server keeps (4096 bytes) is refused with 414 before the
 * handler; it used to be verified on its first 4096 bytes only, and a
 * signature over those authorized any suffix. */
static void test_signed_long_target_is_414(void **state)
{
    (void)state;
    static const char secret[] = "0123456789abcdef0123456789abcdef";
    cr__auth_t *a;
    assert_int_equal(cr__auth_from_secret(secret, 32, &a), 0);
    cr__httpd_params_t p = {.host = "127.0.0.1", .max_body = MAX_BODY, .fn = handler, .auth = a};
    cr__httpd_t *s;
    assert_int_equal(cr__httpd_start_ex(&p, &s), 0);
    uint16_t port = cr__httpd_port(s);
    enum { MAX = 4096 };
    static char t[MAX + 200];
    char h[CR__AUTH_HTTP_MAX];
    /* exactly 4096 bytes, signed: served */
    memset(t, 'a', sizeof t);
    memcpy(t, "/echo?x=", 8);
    t[MAX] = '\0';
    assert_int_equal(cr__auth_http_sign(a, "GET", t, "", 0, h), 0);
    int before = calls();
    assert_int_equal(signed_get(port, t, h), 200);
    assert_int_equal(calls(), before + 1);
    /* signed over its first 4096 bytes, sent with a suffix: refused */
    assert_int_equal(cr__auth_http_sign(a, "GET", t, "", 0, h), 0);
    memcpy(t + MAX, "&evil=1", 8);
    long st = signed_get(port, t, h);
    if (st != 414)
        fail_msg("a %zu-byte target signed over its first %d bytes: HTTP %ld, want 414",
                 strlen(t), MAX, st);
    /* signed over all of it: refused all the same (the server keeps no more) */
    assert_int_equal(cr__auth_http_sign(a, "GET", t, "", 0, h), 0);
    assert_int_equal(signed_get(port, t, h), 414);
    /* unsigned and too long: 414 too, before the credentials check */
    assert_int_equal(signed_get(port, t, NULL), 414);
    assert_int_equal(calls(), before + 1);
    /* unsigned, short: 401 */
    assert_int_equal(signed_get(port, "/echo?x=1", NULL), 401);
    cr__httpd_stop(s);
    cr__auth_free(a);
}

/* A connection from src (a loopback address: 127.0.0.0/8 is all ours) to
 * the server, with recv/send bounded by timeout_s; -1 if it failed. */
static int raw_connect(const char *src, uint16_t port, int timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    struct sockaddr_in d = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &d.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) ||
        connect(fd, (struct sockaddr *)&d, sizeof d)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One keep-alive GET /empty on fd; returns the status, or -1 when the
 * server closed the connection or gave no answer within fd's timeout. */
static int raw_get(int fd)
{
    static const char req[] = "GET /empty HTTP/1.1\r\nHost: t\r\n\r\n";
    if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof req - 1))
        return -1;
    char buf[512];
    size_t got = 0;
    while (got < sizeof buf - 1) { /* a header of an empty body: up to its blank line */
        ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (k <= 0)
            return -1;
        got += (size_t)k;
        buf[got] = '\0';
        if (strstr(buf, "\r\n\r\n"))
            break;
    }
    int status = -1;
    return sscanf(buf, "HTTP/1.1 %d", &status) == 1 ? status : -1;
}

#define FLOOD_SOURCES 4
#define FLOOD_PER_SOURCE 64 /* HTTPD_PER_SOURCE: 4 x 64 = HTTPD_CONN_LIMIT */

/* Regression: four addresses holding 64 kept-alive idle connections each
 * (every slot of the server) locked out every other client until their
 * 30 s idle timeout, and a flooder that reconnects holds them for good.
 * A newcomer from another address now takes the place of the busiest
 * source's longest-idle connection; and a source already among the
 * busiest cannot push the newcomer out in turn. (A liveness bound, not a
 * speed one: the answer must come long before the flood's idle timeout.) */
static void test_idle_flood_from_several_sources_leaves_room(void **state)
{
    (void)state;
    uint16_t port = cr__httpd_port(srv);
    int fds[FLOOD_SOURCES * FLOOD_PER_SOURCE];
    int n = 0;
    for (int s = 0; s < FLOOD_SOURCES; s++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", 2 + s);
        for (int i = 0; i < FLOOD_PER_SOURCE; i++) {
            int fd = raw_connect(src, port, 20);
            assert_true(fd >= 0);
            /* a request made it a client's connection: kept alive 30 s */
            int st = raw_get(fd);
            if (st != 200)
                fprintf(stderr, "flood connection %d from %s: status %d\n", i, src, st);
            assert_int_equal(st, 200);
            fds[n++] = fd;
        }
    }
    /* the server is full: a client from another address is still served */
    int legit = raw_connect("127.0.0.6", port, 20);
    assert_true(legit >= 0);
    int st = raw_get(legit);
    if (st != 200)
        fprintf(stderr, "a new client during the flood: status %d (-1: closed or no answer "
                "within 20 s)\n", st);
    assert_int_equal(st, 200);
    /* the flooders reconnect: they churn among themselves, the newcomer
     * (not among the busiest sources) keeps its connection */
    for (int i = 0; i < 2 * FLOOD_SOURCES; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", 2 + i % FLOOD_SOURCES);
        int fd = raw_connect(src, port, 20);
        if (fd >= 0) {
            raw_get(fd); /* served or refused: either is fine */
            close(fd);
        }
    }
    st = raw_get(legit);
    if (st != 200)
        fprintf(stderr, "the newcomer's kept-alive connection after the flooders "
                "reconnected: status %d\n", st);
    assert_int_equal(st, 200);
    close(legit);
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

/* Regression: libmicrohttpd's timeouts are idle timeouts that every byte
 * resets, so a request whose headers (or body) came one byte a second
 * held its connection, never evictable, for as long as it trickled. The
 * absolute deadlines close both (the headers' 15 s after the accept, the
 * body's 10 s after the headers); neither reaches the handler. */
static void test_trickled_request_is_closed_at_its_deadline(void **state)
{
    (void)state;
    uint16_t port = cr__httpd_port(srv);
    static const char *const starts[] = {
        "GET /empty HTTP/1.1\r\nHost: t\r\nX-Slow: ",
        "PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n",
    };
    int fds[2], open_n = 2, before = calls();
    for (int i = 0; i < 2; i++) {
        fds[i] = raw_connect("127.0.0.2", port, 5);
        assert_true(fds[i] >= 0);
        assert_true(send(fds[i], starts[i], strlen(starts[i]), MSG_NOSIGNAL) > 0);
    }
    for (int t = 0; t < 60 && open_n; t++) { /* a bound against a hang, not a timing check */
        sleep(1);
        for (int i = 0; i < 2; i++) {
            char c;
            if (fds[i] < 0)
                continue;
            ssize_t k = recv(fds[i], &c, 1, MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
                send(fds[i], "a", 1, MSG_NOSIGNAL) != 1) {
                close(fds[i]);
                fds[i] = -1;
                open_n--;
            }
        }
    }
    if (open_n)
        fprintf(stderr, "%d trickled request(s) still open after 60 s (header: %s, body: %s)\n",
                open_n, fds[0] >= 0 ? "open" : "closed", fds[1] >= 0 ? "open" : "closed");
    assert_int_equal(open_n, 0);
    assert_int_equal(calls(), before);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_get_with_query, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_body_and_status, setup, teardown),
        cmocka_unit_test_setup_teardown(test_binary_body_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_too_large_is_413, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_budget_is_503, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_clients, setup, teardown),
        cmocka_unit_test_setup_teardown(test_port_in_use_and_bad_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_waits_for_running_handler, setup, teardown),
        cmocka_unit_test(test_signed_long_target_is_414),
        cmocka_unit_test_setup_teardown(test_idle_flood_from_several_sources_leaves_room, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_trickled_request_is_closed_at_its_deadline, setup,
                                        teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
