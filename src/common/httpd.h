/* Thin wrapper over libmicrohttpd: one handler callback per server, request
 * bodies collected up to a bound, responses built by the handler.
 * Used by crescent-metadata (the HTTP metadata service), the master's admin
 * endpoints (/metrics, /health, ...) and crescent-conductor.
 *
 * Threads: MHD runs its own threads; the handler may be called concurrently
 * from several threads and must be thread-safe. */
#ifndef CR_COMMON_HTTPD_H
#define CR_COMMON_HTTPD_H

#include <stddef.h>
#include <stdint.h>

typedef struct cr__httpd cr__httpd_t;

typedef struct cr__http_req {
    const char *method; /* "GET", "PUT", "POST", "DELETE", ... */
    const char *path;   /* URL path without the query string, e.g. "/metadata" */
    const char *body;   /* NUL-terminated copy of the body (NULL-safe: "" if none) */
    size_t body_len;
    void *impl; /* private: used by cr__http_req_arg() */
} cr__http_req_t;

typedef struct cr__http_resp {
    int status;               /* HTTP status; default 200 */
    const char *content_type; /* static string; default "text/plain" */
    char *body;               /* malloc'd; freed by the server after sending */
    size_t body_len;
} cr__http_resp_t;

typedef void (*cr__http_handler_fn)(void *user, const cr__http_req_t *req, cr__http_resp_t *resp);

/* Value of query argument `name` (URL-decoded), or NULL: also when the
 * decoded value holds a NUL byte ("%00"), which a C string would silently
 * cut short (k%00x must not alias the key k). Valid during the handler. */
const char *cr__http_req_arg(const cr__http_req_t *req, const char *name);

/* The caller's address as text ("127.0.0.1", "::1"; "?" if unknown) into
 * buf (NUL-terminated). */
void cr__http_req_peer(const cr__http_req_t *req, char *buf, size_t len);

/* Sets the response: copies len bytes of body. Returns 0 or -ENOMEM. */
int cr__http_resp_set(cr__http_resp_t *resp, int status, const char *content_type,
                      const void *body, size_t len);
/* Sets a formatted text response. Returns 0 or -ENOMEM. */
int cr__http_resp_printf(cr__http_resp_t *resp, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Starts a server on host:port (host NULL/"" = all addresses, port 0 =
 * ephemeral). Bodies larger than max_body get 413 without calling the
 * handler. Returns 0 and *out, or -EADDRINUSE / -EINVAL / -ENOMEM. */
int cr__httpd_start(const char *host, uint16_t port, size_t max_body, cr__http_handler_fn fn,
                    void *user, cr__httpd_t **out);
/* Extensible form of cr__httpd_start (CONVENTIONS: a parameter struct).
 * auth != NULL turns security on: every request must carry a valid
 * X-Crescent-Auth signature (common/auth/auth.h) over its method, request
 * target and body; others get 401 without calling the handler (a request
 * without the header is refused before its body is read); a genuine request
 * whose nonce the replay cache has no room for gets 503 (busy, retry). A
 * request target longer than 4096 bytes gets 414 before any of that (the
 * signature covers the whole target, and no more of it is kept). auth must
 * outlive the server. One source address may hold at most
 * max_conns_per_source connections (default 64) of 256; when all 256 are
 * taken, a newcomer from an address holding fewer than the busiest one
 * replaces that address's longest-idle connection (docs/security.md, fair
 * share). A connection must send a request within 5 s; once one was taken
 * it is closed after 30 s idle. Those are idle timeouts; a request also has
 * absolute deadlines: its line and headers 10 s after it may start (15 s
 * from the accept, 40 s from the end of the previous response), its body
 * 10 s after them plus 1 s per 64 KiB; past them the connection is closed. */
typedef struct cr__httpd_params {
    const char *host;
    uint16_t port;
    size_t max_body;
    cr__http_handler_fn fn;
    void *user;
    struct cr__auth *auth;       /* NULL = security off */
    const char *name;            /* for the open-listener warning, e.g. "master admin HTTP" */
    unsigned max_conns_per_source; /* 0 = default 64 */
    /* TLS on (common/tls/tls.h): every connection must complete a TLS
     * handshake with a certificate of the CA before its request is read;
     * combines with auth. Must outlive the server. NULL = plain HTTP. */
    const struct cr__tls *tls;
} cr__httpd_params_t;
int cr__httpd_start_ex(const cr__httpd_params_t *p, cr__httpd_t **out);

/* Bodies being collected at once, summed over all connections, are bounded
 * (default: 4 x max_body, at least 64 MiB); a request that would exceed the
 * bound gets 503 without calling the handler. Changes the bound (e.g. for
 * tests); call right after start. */
void cr__httpd_set_body_budget(cr__httpd_t *srv, size_t bytes);
/* The bound port. */
uint16_t cr__httpd_port(const cr__httpd_t *srv);
/* Stops the server (waits for handlers to return) and frees it. NULL is a no-op. */
void cr__httpd_stop(cr__httpd_t *srv);

#endif
