/* HTTP server wrapper over libmicrohttpd (see httpd.h).
 *
 * Threads: MHD's internal polling threads (a small pool); the handler runs
 * on them; the reaper thread closes connections past their deadline. Each
 * connection carries a struct conn_state (allocated on the first callback
 * of a request, freed by MHD's request-completed callback)
 * that accumulates the body up to max_body. A body announced larger than
 * max_body (Content-Length) is refused with 413 before it is read; a body
 * that turns out larger (chunked upload) is drained and answered with 413;
 * in neither case is the handler called. The bodies being collected at
 * once are bounded server-wide (body_budget); past it requests get 503.
 *
 * Connection slots (docs/security.md, "Connection floods"): a connection
 * must send a request within HTTPD_FIRST_REQUEST_S (MHD's default timeout);
 * its first request that is not refused outright raises its idle timeout
 * to HTTPD_CONN_TIMEOUT_S. Plain HTTP: MHD accepts up to HTTPD_CONN_LIMIT +
 * HTTPD_CONN_SLACK and the table `conns` (filled by MHD's connection
 * notifications) keeps HTTPD_CONN_LIMIT of them live: a connection beyond
 * that takes the place of the busiest source's longest-idle one
 * (cr__net_fair_victim), closed by shutdown() through our dup of its
 * socket, or is itself closed. TLS on: the TLS front does the same before
 * the handshake (httpd_tls.c).
 *
 * Deadlines (docs/security.md, "Request deadlines"): MHD's timeouts are idle
 * timeouts that every byte resets, so each connection also has an absolute
 * deadline (conn_rec_t.deadline_ms, plain and TLS-fed alike), and the
 * reaper thread closes a connection past it the way the fair share does:
 * a request's line and headers must be in HTTPD_HEADERS_S after the
 * connection may send one (its MHD idle timeout plus HTTPD_HEADERS_S from
 * the accept or the end of the previous response, so an idle keep-alive
 * connection is closed by MHD first), its body HTTPD_BODY_S after the
 * headers plus 1 s per HTTPD_BODY_RATE bytes received; a request being
 * handled or answered has none. */
#include "common/httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/auth/auth.h"
#include "common/clock.h"
#include "common/httpd_tls.h"
#include "common/log.h"
#include "common/net.h"

#define HTTPD_THREADS 2
#define HTTPD_CONN_LIMIT 256     /* concurrent connections */
#define HTTPD_CONN_TIMEOUT_S 30  /* idle timeout once a request was taken */
#define HTTPD_FIRST_REQUEST_S 5  /* a new connection's time to send a request */
#define HTTPD_CONN_SLACK 64      /* MHD's own limit above ours: room for the closing */
#define HTTPD_INITIAL_BODY 4096
#define HTTPD_MIN_BODY_BUDGET (64u << 20) /* bytes of bodies buffered at once, server-wide */
#define HTTPD_PER_SOURCE 64      /* default connections per source address */
#define HTTPD_TARGET_MAX 4096    /* security on: longest request target (414 beyond) */
#define HTTPD_HEADERS_S 10       /* a request's line and headers, once it may be sent */
#define HTTPD_BODY_S 10          /* a body: this, plus 1 s per HTTPD_BODY_RATE bytes in */
#define HTTPD_BODY_RATE (64u << 10)
#define HTTPD_REAP_MS 500        /* how often deadlines are checked */

/* One MHD connection: its deadline and, plain HTTP, its part in the fair share. */
typedef struct conn_rec {
    int dup; /* our dup of its socket (shutdown() evicts it); -1 = free record */
    int evicted;                 /* closing: not counted */
    struct sockaddr_storage src;
    _Atomic uint64_t idle_ms;    /* idle since (ms), CR__NET_BUSY during a request */
    _Atomic uint64_t deadline_ms; /* closed at this time (ms) by the reaper, 0 = none */
} conn_rec_t;

#define HTTPD_RECS (HTTPD_CONN_LIMIT + HTTPD_CONN_SLACK)
#define HTTPD_TLS_RECS (2 * HTTPD_CONN_LIMIT) /* MHD's limit when the TLS front feeds it */

struct cr__httpd {
    struct MHD_Daemon *mhd;
    uint16_t port;
    size_t max_body;
    size_t body_budget;            /* bound on body_inflight */
    _Atomic size_t body_inflight;  /* capacity of all request bodies being collected */
    cr__http_handler_fn fn;
    void *user;
    struct cr__auth *auth; /* NULL = security off */
    _Atomic uint64_t auth_refused;
    cr__httpd_tls_t *tls_front; /* TLS on: terminates TLS, feeds MHD */
    pthread_mutex_t conns_mu;
    conn_rec_t *conns; /* nrecs records (one per MHD connection); guarded by conns_mu */
    int nrecs;         /* MHD's connection limit; immutable */
    int fair;          /* plain HTTP: on_connection shares the slots out; immutable */
    _Atomic uint64_t evicted; /* connections closed for a newcomer (or newcomers refused) */
    pthread_t reaper;
    pthread_cond_t reaper_cv; /* wakes the reaper to stop */
    int reaper_on;            /* the reaper thread was started */
    int stopping;             /* guarded by conns_mu */
    _Atomic uint64_t overdue; /* connections closed past their deadline */
};

struct conn_state {
    cr__httpd_t *srv;
    char *body; /* NUL-terminated when the handler sees it */
    size_t len, cap; /* cap is charged to srv->body_inflight */
    int too_big;
    int overloaded; /* the server-wide body budget was exhausted */
    char *target;   /* security on: the request target as received (path?query) */
    int target_too_long; /* security on: the target passed HTTPD_TARGET_MAX */
    uint64_t headers_ms; /* when the headers were in (the body's deadline counts from it) */
    uint64_t body_in;    /* body bytes received, kept or not */
};

/* The connection's record, or NULL. */
static conn_rec_t *conn_rec_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Sets the connection's absolute deadline (ms, 0 = none). */
static void conn_deadline(struct MHD_Connection *conn, uint64_t at_ms)
{
    conn_rec_t *rec = conn_rec_of(conn);
    if (rec)
        atomic_store(&rec->deadline_ms, at_ms);
}

/* The reaper: closes connections past their deadline (shutdown() through
 * our dup; MHD then notices and closes them, and a TLS front's relay with
 * them), every HTTPD_REAP_MS until the server stops. */
static void *reaper_main(void *arg)
{
    cr__httpd_t *srv = arg;
    pthread_mutex_lock(&srv->conns_mu);
    while (!srv->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)HTTPD_REAP_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&srv->reaper_cv, &srv->conns_mu, &ts);
        uint64_t now = cr__now_ms();
        unsigned closed = 0;
        for (int i = 0; i < srv->nrecs; i++) {
            conn_rec_t *r = &srv->conns[i];
            uint64_t d = atomic_load(&r->deadline_ms);
            if (r->dup < 0 || r->evicted || !d || now < d)
                continue;
            r->evicted = 1; /* closing: not counted by the fair share */
            shutdown(r->dup, SHUT_RDWR);
            closed++;
        }
        if (closed) {
            atomic_fetch_add(&srv->overdue, closed);
            CR_LOG_RL(CR__LOG_WARN, "httpd", "closed %u connection(s) whose request was not in "
                      "by its deadline (a trickled request?)", closed);
        }
    }
    pthread_mutex_unlock(&srv->conns_mu);
    return NULL;
}

/* MHD's connection notifications: records each connection with its first
 * deadline and, plain HTTP, past HTTPD_CONN_LIMIT live ones closes the
 * busiest source's longest-idle connection or the newcomer
 * (cr__net_fair_victim). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **sctx,
                          enum MHD_ConnectionNotificationCode code)
{
    cr__httpd_t *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_rec_t *r = *sctx;
        if (r) {
            pthread_mutex_lock(&srv->conns_mu);
            close(r->dup);
            r->dup = -1;
            pthread_mutex_unlock(&srv->conns_mu);
            *sctx = NULL;
        }
        return;
    }
    if (code != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!fi || !ai || !ai->client_addr)
        return;
    int fd = fi->connect_fd;
    struct sockaddr_storage src = {0};
    memcpy(&src, ai->client_addr,
           ai->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                  : sizeof(struct sockaddr_in));
    cr__net_peer_t peers[HTTPD_RECS];
    int idx[HTTPD_RECS], n = 0;
    conn_rec_t *mine = NULL;
    int refuse = 0;
    pthread_mutex_lock(&srv->conns_mu);
    for (int i = 0; i < srv->nrecs; i++) {
        conn_rec_t *r = &srv->conns[i];
        if (r->dup < 0) {
            if (!mine)
                mine = r;
        } else if (srv->fair && !r->evicted) { /* TLS on: the front shares the slots out */
            peers[n] = (cr__net_peer_t){&r->src, atomic_load(&r->idle_ms)};
            idx[n++] = i;
        }
    }
    if (mine)
        mine->dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (!mine || mine->dup < 0) {
        refuse = 1; /* (cannot happen: MHD admits at most nrecs) */
        mine = NULL;
    } else {
        mine->src = src;
        mine->evicted = 0;
        uint64_t now = cr__now_ms();
        atomic_store(&mine->idle_ms, now);
        atomic_store(&mine->deadline_ms, now + (HTTPD_FIRST_REQUEST_S + HTTPD_HEADERS_S) * 1000ull);
        if (n >= HTTPD_CONN_LIMIT) {
            int v = cr__net_fair_victim(peers, n, &src);
            conn_rec_t *victim = v >= 0 ? &srv->conns[idx[v]] : mine;
            victim->evicted = 1; /* the newcomer too when refused: it is closing */
            shutdown(victim->dup, SHUT_RDWR);
            atomic_fetch_add(&srv->evicted, 1);
            refuse = v < 0;
        }
    }
    pthread_mutex_unlock(&srv->conns_mu);
    *sctx = mine;
    if (refuse) {
        if (!mine)
            shutdown(fd, SHUT_RDWR);
        CR_LOG_RL(CR__LOG_WARN, "httpd", "connection limit (%u) reached and this source is "
                  "among the busiest: refusing", (unsigned)HTTPD_CONN_LIMIT);
    } else if (n >= HTTPD_CONN_LIMIT) {
        CR_LOG_RL(CR__LOG_WARN, "httpd", "connection limit (%u) reached: closed the longest-idle "
                  "connection of the busiest source for a new one", (unsigned)HTTPD_CONN_LIMIT);
    }
}

static enum MHD_Result queue_static(struct MHD_Connection *c, unsigned status, const char *text)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Appends data to the body, growing geometrically up to max_body (+1 for
 * the NUL). Growth is charged to the server-wide budget; when that is
 * exhausted the rest of the body is discarded and the request gets 503. */
static int body_append(struct conn_state *st, const char *data, size_t n, size_t max_body)
{
    if (st->too_big || st->overloaded)
        return 0;
    if (n > max_body - st->len) {
        st->too_big = 1;
        return 0;
    }
    if (st->len + n + 1 > st->cap) {
        size_t cap = st->cap ? st->cap : HTTPD_INITIAL_BODY;
        while (cap < st->len + n + 1)
            cap = cap > (SIZE_MAX / 2) ? SIZE_MAX : cap * 2;
        if (cap > max_body + 1)
            cap = max_body + 1;
        size_t delta = cap - st->cap;
        size_t prev = atomic_fetch_add(&st->srv->body_inflight, delta);
        if (prev + delta > st->srv->body_budget) {
            atomic_fetch_sub(&st->srv->body_inflight, delta);
            st->overloaded = 1;
            return 0;
        }
        char *nb = realloc(st->body, cap);
        if (!nb) {
            atomic_fetch_sub(&st->srv->body_inflight, delta);
            return -ENOMEM;
        }
        st->body = nb;
        st->cap = cap;
    }
    memcpy(st->body + st->len, data, n);
    st->len += n;
    return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    cr__httpd_t *srv = cls;
    struct conn_state *st = *con_cls;

    if (!st || !st->srv) { /* first call for this request: headers only */
        if (!st)
            st = calloc(1, sizeof *st);
        if (!st)
            return MHD_NO;
        st->srv = srv;
        *con_cls = st;
        /* the headers are in: a body (or a refusal's answer) has its own time */
        st->headers_ms = cr__now_ms();
        conn_deadline(conn, st->headers_ms + HTTPD_BODY_S * 1000ull);
        /* the signature covers the whole target: without all of it kept
         * (longer than we keep, or no memory) nothing can be verified, and
         * checking a part would authorize whatever follows it */
        if (srv->auth && !st->target) {
            atomic_fetch_add(&srv->auth_refused, 1);
            st->too_big = 1; /* discard any body */
            if (st->target_too_long)
                return queue_static(conn, MHD_HTTP_URI_TOO_LONG, "request target too long\n");
            return queue_static(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
        }
        if (srv->auth && !MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                      CR__AUTH_HTTP_HEADER)) {
            atomic_fetch_add(&srv->auth_refused, 1);
            st->too_big = 1; /* discard any body */
            return queue_static(conn, MHD_HTTP_UNAUTHORIZED,
                                "credentials required: X-Crescent-Auth (docs/security.md)\n");
        }
        /* a request taken (not refused outright): the connection is a
         * client's, kept for HTTPD_CONN_TIMEOUT_S of keep-alive from now on */
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                  (unsigned)HTTPD_CONN_TIMEOUT_S);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                      MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            if (errno || end == cl || v > srv->max_body) {
                st->too_big = 1;
                return queue_static(conn, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large\n");
            }
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        st->body_in += *upload_data_size;
        conn_deadline(conn, st->headers_ms + HTTPD_BODY_S * 1000ull +
                                st->body_in * 1000 / HTTPD_BODY_RATE);
        if (body_append(st, upload_data, *upload_data_size, srv->max_body))
            return MHD_NO; /* out of memory: drop the connection */
        *upload_data_size = 0;
        return MHD_YES;
    }
    conn_deadline(conn, 0); /* the request is in: handling and answering it are not bounded */
    if (st->too_big)
        return queue_static(conn, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large\n");
    if (st->overloaded)
        return queue_static(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "server busy, retry\n");
    if (srv->auth) {
        const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, CR__AUTH_HTTP_HEADER);
        int arc = cr__auth_http_verify(srv->auth, h, method, st->target,
                                       st->body ? st->body : "", st->len, (uint64_t)time(NULL));
        if (arc == -EBUSY) /* genuine, but no room to remember its nonce */
            return queue_static(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "server busy, retry\n");
        if (arc) {
            atomic_fetch_add(&srv->auth_refused, 1);
            CR_LOG_RL(CR__LOG_WARN, "httpd", "refused %s %s: bad or replayed signature", method,
                      url);
            return queue_static(conn, MHD_HTTP_UNAUTHORIZED, "bad credentials\n");
        }
    }

    cr__http_req_t req = {
        .method = method,
        .path = url,
        .body = st->body ? st->body : "",
        .body_len = st->len,
        .impl = conn,
    };
    if (st->body)
        st->body[st->len] = '\0';
    cr__http_resp_t resp = {.status = 200, .content_type = "text/plain"};
    srv->fn(srv->user, &req, &resp);

    struct MHD_Response *r;
    if (resp.body)
        r = MHD_create_response_from_buffer(resp.body_len, resp.body, MHD_RESPMEM_MUST_FREE);
    else
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(resp.body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp.content_type ? resp.content_type : "text/plain");
    int status = resp.status >= 100 && resp.status <= 599 ? resp.status : 500;
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)toe;
    conn_rec_t *rec = conn_rec_of(conn);
    if (rec) { /* the request is over: idle from now; the next one may start until MHD's
                * idle timeout (at most HTTPD_CONN_TIMEOUT_S) closes the connection */
        uint64_t now = cr__now_ms();
        atomic_store(&rec->idle_ms, now);
        atomic_store(&rec->deadline_ms, now + (HTTPD_CONN_TIMEOUT_S + HTTPD_HEADERS_S) * 1000ull);
    }
    struct conn_state *st = *con_cls;
    if (st) {
        if (st->srv)
            atomic_fetch_sub(&st->srv->body_inflight, st->cap);
        free(st->body);
        free(st->target);
        free(st);
        *con_cls = NULL;
    }
}

/* MHD's URI log callback: runs first for each request with the request
 * target as received; security on keeps it for the signature check (the
 * handler's url has the query string stripped). A target longer than
 * HTTPD_TARGET_MAX is not kept but flagged (414); without st or target
 * on_request refuses the request. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    cr__httpd_t *srv = cls;
    conn_rec_t *rec = conn_rec_of(conn);
    if (rec)
        atomic_store(&rec->idle_ms, CR__NET_BUSY); /* a request in progress */
    if (!srv->auth)
        return NULL;
    struct conn_state *st = calloc(1, sizeof *st);
    if (!st || !uri)
        return st;
    if (strnlen(uri, HTTPD_TARGET_MAX + 1) > HTTPD_TARGET_MAX)
        st->target_too_long = 1;
    else
        st->target = strdup(uri);
    return st; /* st->srv stays NULL until on_request's first call */
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    if (n && buf[n - 1] == '\n')
        buf[n - 1] = '\0';
    CR_LOG_INFO("httpd", "%s", buf);
}

const char *cr__http_req_arg(const cr__http_req_t *req, const char *name)
{
    if (!req || !req->impl || !name)
        return NULL;
    const char *v = NULL;
    size_t len = 0;
    if (MHD_lookup_connection_value_n((struct MHD_Connection *)req->impl, MHD_GET_ARGUMENT_KIND,
                                      name, strlen(name), &v, &len) != MHD_YES ||
        !v || memchr(v, 0, len))
        return NULL;
    return v;
}

void cr__http_req_peer(const cr__http_req_t *req, char *buf, size_t len)
{
    snprintf(buf, len, "?");
    if (!req || !req->impl)
        return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        (struct MHD_Connection *)req->impl, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)len);
}

int cr__http_resp_set(cr__http_resp_t *resp, int status, const char *content_type,
                      const void *body, size_t len)
{
    char *copy = malloc(len ? len : 1);
    if (!copy)
        return -ENOMEM;
    if (len)
        memcpy(copy, body, len);
    free(resp->body);
    resp->body = copy;
    resp->body_len = len;
    resp->status = status;
    if (content_type)
        resp->content_type = content_type;
    return 0;
}

int cr__http_resp_printf(cr__http_resp_t *resp, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -ENOMEM;
    free(resp->body);
    resp->body = s;
    resp->body_len = (size_t)n;
    resp->status = status;
    resp->content_type = "text/plain";
    return 0;
}

int cr__httpd_start(const char *host, uint16_t port, size_t max_body, cr__http_handler_fn fn,
                    void *user, cr__httpd_t **out)
{
    cr__httpd_params_t p = {
        .host = host, .port = port, .max_body = max_body, .fn = fn, .user = user};
    return cr__httpd_start_ex(&p, out);
}

int cr__httpd_start_ex(const cr__httpd_params_t *p, cr__httpd_t **out)
{
    if (!p || !p->fn || !out || p->max_body >= SIZE_MAX / 2)
        return -EINVAL;
    const char *host = p->host;
    uint16_t port = p->port;
    size_t max_body = p->max_body;
    cr__http_handler_fn fn = p->fn;
    void *user = p->user;
    cr__httpd_t *srv = calloc(1, sizeof *srv);
    if (!srv)
        return -ENOMEM;
    srv->max_body = max_body;
    /* room for several maximal bodies at once, and never less than 64 MiB */
    srv->body_budget = max_body < HTTPD_MIN_BODY_BUDGET / 4 ? HTTPD_MIN_BODY_BUDGET
                       : max_body > SIZE_MAX / 8        ? SIZE_MAX / 2
                                                        : 4 * max_body;
    srv->fn = fn;
    srv->user = user;
    srv->auth = p->auth;
    unsigned per_source = p->max_conns_per_source ? p->max_conns_per_source : HTTPD_PER_SOURCE;
    srv->fair = !p->tls;
    srv->nrecs = p->tls ? HTTPD_TLS_RECS : HTTPD_RECS;
    srv->conns = calloc((size_t)srv->nrecs, sizeof *srv->conns);
    if (!srv->conns) {
        free(srv);
        return -ENOMEM;
    }
    for (int i = 0; i < srv->nrecs; i++)
        srv->conns[i].dup = -1;
    pthread_mutex_init(&srv->conns_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->reaper_cv, &ca);
    pthread_condattr_destroy(&ca);
    /* Bind ourselves: gives a precise errno (-EADDRINUSE), host selection
     * and the ephemeral port without relying on MHD's address handling. */
    int fd = cr__net_listen(host, port, 128, &srv->port);
    if (fd < 0) {
        pthread_cond_destroy(&srv->reaper_cv);
        pthread_mutex_destroy(&srv->conns_mu);
        free(srv->conns);
        free(srv);
        return fd;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    /* TLS on: MHD gets no listening socket; the TLS front accepts and
     * hands it decrypted connections (httpd_tls.h) */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    if (p->tls)
        flags |= MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    srv->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTPD_THREADS,
        /* MHD's limits sit above ours: plain, on_connection keeps
         * HTTPD_CONN_LIMIT live and needs room for the ones closing; TLS
         * on, the front keeps them and its evicted connections may linger
         * in MHD until their relay notices */
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)srv->nrecs,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTPD_FIRST_REQUEST_S,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, p->tls ? 2 * per_source : per_source,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        /* last: TLS on ends the list here (MHD refuses a listening socket
         * together with MHD_USE_NO_LISTEN_SOCKET) */
        p->tls ? MHD_OPTION_END : MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_END);
    if (!srv->mhd) {
        CR_LOG_ERROR("httpd", "MHD_start_daemon failed on port %u", srv->port);
        close(fd);
        pthread_cond_destroy(&srv->reaper_cv);
        pthread_mutex_destroy(&srv->conns_mu);
        free(srv->conns);
        free(srv);
        return -ENOMEM;
    }
    int rc = -pthread_create(&srv->reaper, NULL, reaper_main, srv);
    srv->reaper_on = !rc;
    if (p->tls && rc) /* (plain HTTP: MHD owns fd) */
        close(fd);
    else if (p->tls) /* closes fd on failure */
        rc = cr__httpd_tls_start(p->tls, fd, srv->mhd, HTTPD_CONN_LIMIT, per_source,
                                 &srv->tls_front);
    if (rc) {
        cr__httpd_stop(srv);
        return rc;
    }
    if (p->name && !p->tls)
        cr__auth_warn_open(p->auth, p->name, host);
    *out = srv;
    return 0;
}

void cr__httpd_set_body_budget(cr__httpd_t *srv, size_t bytes)
{
    if (srv)
        srv->body_budget = bytes;
}

uint16_t cr__httpd_port(const cr__httpd_t *srv) { return srv ? srv->port : 0; }

void cr__httpd_stop(cr__httpd_t *srv)
{
    if (!srv)
        return;
    if (srv->reaper_on) {
        pthread_mutex_lock(&srv->conns_mu);
        srv->stopping = 1;
        pthread_cond_signal(&srv->reaper_cv);
        pthread_mutex_unlock(&srv->conns_mu);
        pthread_join(srv->reaper, NULL);
    }
    cr__httpd_tls_stop(srv->tls_front); /* before MHD: its threads use the daemon */
    MHD_stop_daemon(srv->mhd); /* joins the threads and closes the listen socket */
    for (int i = 0; i < srv->nrecs; i++) /* MHD notified every close: all records are free */
        if (srv->conns[i].dup >= 0)
            close(srv->conns[i].dup);
    pthread_cond_destroy(&srv->reaper_cv);
    pthread_mutex_destroy(&srv->conns_mu);
    free(srv->conns);
    free(srv);
}
