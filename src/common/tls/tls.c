/* TLS with mutual certificates over OpenSSL (tls.h). */
#include "common/tls/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"

struct cr__tls {
    SSL_CTX *srv, *cli;
    char *cert, *key, *ca;
};

struct cr__tls_conn {
    SSL *ssl;
    int fd;
    short want; /* POLLIN / POLLOUT after -EAGAIN */
    int done;   /* handshake completed */
};

static const char *pick(const char *v, const char *env)
{
    if (v && *v)
        return v;
    const char *e = getenv(env);
    return e && *e ? e : NULL;
}

static void log_ssl_errors(const char *what, const char *path)
{
    unsigned long e = ERR_get_error();
    char buf[256] = "unknown error";
    if (e)
        ERR_error_string_n(e, buf, sizeof buf);
    CR_LOG_ERROR("tls", "%s %s: %s", what, path ? path : "", buf);
    ERR_clear_error();
}

static SSL_CTX *ctx_new(const cr__tls_t *t, int server)
{
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx)
        return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_TICKET |
                                 SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (server) {
        SSL_CTX_set_num_tickets(ctx, 0);
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, t->cert) != 1) {
        log_ssl_errors("certificate", t->cert);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, t->key, SSL_FILETYPE_PEM) != 1) {
        log_ssl_errors("private key", t->key);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        log_ssl_errors("private key does not match the certificate", t->key);
        goto fail;
    }
    if (SSL_CTX_load_verify_locations(ctx, t->ca, NULL) != 1) {
        log_ssl_errors("CA bundle", t->ca);
        goto fail;
    }
    /* both directions: the peer must present a certificate of the CA */
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    SSL_CTX_set_verify_depth(ctx, 4);
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

void cr__tls_free(cr__tls_t *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->srv);
    SSL_CTX_free(t->cli);
    free(t->cert);
    free(t->key);
    free(t->ca);
    free(t);
}

int cr__tls_load(const char *cert, const char *key, const char *ca, cr__tls_t **out)
{
    if (!out)
        return -EINVAL;
    cert = pick(cert, CR__TLS_ENV_CERT);
    key = pick(key, CR__TLS_ENV_KEY);
    ca = pick(ca, CR__TLS_ENV_CA);
    if (!cert && !key && !ca) {
        *out = NULL;
        return 0;
    }
    if (!cert || !key || !ca) {
        CR_LOG_ERROR("tls", "TLS needs a certificate, its key and a CA bundle together "
                            "(--tls_cert/--tls_key/--tls_ca or $%s/$%s/$%s); missing %s",
                     CR__TLS_ENV_CERT, CR__TLS_ENV_KEY, CR__TLS_ENV_CA,
                     !cert ? "the certificate" : !key ? "the key" : "the CA bundle");
        return -EINVAL;
    }
    const char *files[3] = {cert, key, ca};
    for (int i = 0; i < 3; i++) {
        struct stat sb;
        if (stat(files[i], &sb)) {
            int e = errno;
            CR_LOG_ERROR("tls", "%s: %s", files[i], strerror(e));
            return e == ENOENT ? -ENOENT : -EINVAL;
        }
        if (i == 1 && (sb.st_mode & 077)) {
            CR_LOG_ERROR("tls", "TLS key %s is readable by group or others (mode %03o): "
                                "chmod 600 it",
                         key, (unsigned)(sb.st_mode & 0777));
            return -EPERM;
        }
    }
    cr__tls_t *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->cert = strdup(cert);
    t->key = strdup(key);
    t->ca = strdup(ca);
    if (!t->cert || !t->key || !t->ca) {
        cr__tls_free(t);
        return -ENOMEM;
    }
    if (!(t->srv = ctx_new(t, 1)) || !(t->cli = ctx_new(t, 0))) {
        cr__tls_free(t);
        return -EINVAL;
    }
    *out = t;
    return 0;
}

const char *cr__tls_cert_path(const cr__tls_t *t) { return t ? t->cert : NULL; }
const char *cr__tls_key_path(const cr__tls_t *t) { return t ? t->key : NULL; }
const char *cr__tls_ca_path(const cr__tls_t *t) { return t ? t->ca : NULL; }

int cr__tls_conn_new(const cr__tls_t *t, int fd, int server, cr__tls_conn_t **out)
{
    if (!t || fd < 0 || !out)
        return -EINVAL;
    cr__tls_conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->ssl = SSL_new(server ? t->srv : t->cli);
    if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1) {
        SSL_free(c->ssl);
        free(c);
        ERR_clear_error();
        return -EIO;
    }
    c->fd = fd;
    if (server)
        SSL_set_accept_state(c->ssl);
    else
        SSL_set_connect_state(c->ssl);
    *out = c;
    return 0;
}

void cr__tls_conn_free(cr__tls_conn_t *c)
{
    if (!c)
        return;
    if (c->done) {
        /* close_notify, best effort: never waits for the peer's */
        SSL_set_quiet_shutdown(c->ssl, 0);
        (void)SSL_shutdown(c->ssl);
    }
    SSL_free(c->ssl);
    ERR_clear_error();
    free(c);
}

/* Maps the outcome of an SSL call that returned r <= 0. */
static int map_err(cr__tls_conn_t *c, int r)
{
    int e = SSL_get_error(c->ssl, r);
    int saved = errno;
    switch (e) {
    case SSL_ERROR_WANT_READ:
        c->want = POLLIN;
        return -EAGAIN;
    case SSL_ERROR_WANT_WRITE:
        c->want = POLLOUT;
        return -EAGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        ERR_clear_error();
        if (saved == EAGAIN || saved == EWOULDBLOCK || saved == EINTR) {
            c->want = POLLIN;
            return -EAGAIN;
        }
        return -ECONNRESET;
    default:
        break;
    }
    unsigned long err = ERR_peek_last_error();
    int reason = ERR_GET_REASON(err);
    ERR_clear_error();
    switch (reason) {
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_HTTP_REQUEST:
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_RECORD_LENGTH_MISMATCH:
        return -EPROTO;
    default:
        break;
    }
    /* certificate missing/unknown/expired on either side, alerts from the
     * peer refusing us: all mean "not a member of this cluster's PKI" */
    return -EACCES;
}

int cr__tls_conn_step(cr__tls_conn_t *c)
{
    if (c->done)
        return 0;
    ERR_clear_error();
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        c->done = 1;
        return 0;
    }
    int rc = map_err(c, r);
    if (rc == -EAGAIN)
        return c->want == POLLIN ? CR__TLS_WANT_READ : CR__TLS_WANT_WRITE;
    return rc == 0 ? -ECONNRESET : rc;
}

static int wait_for(int fd, short ev, uint64_t deadline)
{
    for (;;) {
        int ms = -1;
        if (deadline != UINT64_MAX) {
            uint64_t now = cr__now_ms();
            if (now >= deadline)
                return -ETIMEDOUT;
            ms = deadline - now > INT_MAX ? INT_MAX : (int)(deadline - now);
        }
        struct pollfd p = {.fd = fd, .events = ev};
        int pr = poll(&p, 1, ms);
        if (pr > 0)
            return 0;
        if (pr == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return CR__ERRNO();
    }
}

/* The bounded helpers below run the fd non-blocking (a blocking recv inside
 * OpenSSL would ignore the deadline) and restore its mode afterwards. */
static int nb_enter(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK))
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    return fl;
}

static void nb_leave(int fd, int fl)
{
    if (fl >= 0 && !(fl & O_NONBLOCK))
        fcntl(fd, F_SETFL, fl);
}

int cr__tls_conn_handshake(cr__tls_conn_t *c, int timeout_ms)
{
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : cr__now_ms() + (uint64_t)timeout_ms;
    int fl = nb_enter(c->fd);
    int rc;
    for (;;) {
        rc = cr__tls_conn_step(c);
        if (rc <= 0)
            break;
        if ((rc = wait_for(c->fd, rc == CR__TLS_WANT_READ ? POLLIN : POLLOUT, deadline)))
            break;
    }
    nb_leave(c->fd, fl);
    return rc;
}

ssize_t cr__tls_conn_read(cr__tls_conn_t *c, void *buf, size_t len)
{
    if (len > INT_MAX)
        len = INT_MAX;
    ERR_clear_error();
    int r = SSL_read(c->ssl, buf, (int)len);
    if (r > 0)
        return r;
    return map_err(c, r);
}

ssize_t cr__tls_conn_write(cr__tls_conn_t *c, const void *buf, size_t len)
{
    if (len > INT_MAX)
        len = INT_MAX;
    if (len == 0)
        return 0;
    ERR_clear_error();
    int r = SSL_write(c->ssl, buf, (int)len);
    if (r > 0)
        return r;
    int rc = map_err(c, r);
    return rc == 0 ? -ECONNRESET : rc;
}

short cr__tls_conn_want(const cr__tls_conn_t *c) { return c->want ? c->want : POLLIN; }

size_t cr__tls_conn_pending(const cr__tls_conn_t *c)
{
    int n = SSL_pending(c->ssl);
    return n > 0 ? (size_t)n : 0;
}

/* Moves exactly len bytes in one direction (writing = 1: out), poll()ing
 * with timeout_ms between partial transfers. */
static int full_nb(cr__tls_conn_t *c, uint8_t *p, size_t len, int timeout_ms, int writing)
{
    while (len) {
        ssize_t k = writing ? cr__tls_conn_write(c, p, len) : cr__tls_conn_read(c, p, len);
        if (k > 0) {
            p += k;
            len -= (size_t)k;
            continue;
        }
        if (k == 0)
            return -ECONNRESET;
        if (k != -EAGAIN)
            return (int)k;
        uint64_t dl = timeout_ms < 0 ? UINT64_MAX : cr__now_ms() + (uint64_t)timeout_ms;
        int w = wait_for(c->fd, cr__tls_conn_want(c), dl);
        if (w)
            return w;
    }
    return 0;
}

int cr__tls_conn_read_full(cr__tls_conn_t *c, void *buf, size_t len, int timeout_ms)
{
    int fl = nb_enter(c->fd);
    int rc = full_nb(c, buf, len, timeout_ms, 0);
    nb_leave(c->fd, fl);
    return rc;
}

int cr__tls_conn_write_full(cr__tls_conn_t *c, const void *buf, size_t len, int timeout_ms)
{
    int fl = nb_enter(c->fd);
    int rc = full_nb(c, (uint8_t *)(uintptr_t)buf, len, timeout_ms, 1);
    nb_leave(c->fd, fl);
    return rc;
}

void cr__tls_conn_peer(const cr__tls_conn_t *c, char *buf, size_t len)
{
    if (!len)
        return;
    buf[0] = 0;
    X509 *x = SSL_get1_peer_certificate(c->ssl);
    if (!x)
        return;
    X509_NAME_oneline(X509_get_subject_name(x), buf, (int)(len > INT_MAX ? INT_MAX : len));
    X509_free(x);
}
