/* TLS with mutual certificates (OpenSSL) for the control plane: master RPC,
 * admin / metadata / conductor HTTP and their clients (docs/security.md,
 * "TLS").
 *
 * TLS is ON when a certificate, its key and a CA bundle are configured:
 * --tls_cert/--tls_key/--tls_ca on a daemon or tool, the tls_* fields of
 * the library's params, or the environment variables CRESCENT_TLS_CERT,
 * CRESCENT_TLS_KEY, CRESCENT_TLS_CA (library users, the Python package).
 * All three or none: a partial configuration is an error, never a silent
 * downgrade. Both sides present a certificate and both must be signed by
 * the CA; a peer without one is refused during the handshake, before any
 * request is read. TLS 1.3 only. Identity is "holds a certificate of the
 * cluster CA" (no host name check: members reach each other by address).
 * TLS combines with the cluster key (common/auth): the HMAC handshake then
 * runs inside the TLS channel.
 *
 * Threads: a cr__tls_t is immutable after cr__tls_load(); share it freely.
 * A cr__tls_conn_t belongs to one thread at a time.
 * Ownership: cr__tls_load() allocates, cr__tls_free() releases;
 * cr__tls_conn_new() allocates, cr__tls_conn_free() releases (never closes
 * the fd: the caller owns it).
 */
#ifndef CR_COMMON_TLS_H
#define CR_COMMON_TLS_H

#include <stddef.h>
#include <sys/types.h>

#define CR__TLS_ENV_CERT "CRESCENT_TLS_CERT"
#define CR__TLS_ENV_KEY "CRESCENT_TLS_KEY"
#define CR__TLS_ENV_CA "CRESCENT_TLS_CA"
#define CR__TLS_HANDSHAKE_MS 5000 /* default bound on a whole handshake */

typedef struct cr__tls cr__tls_t;
typedef struct cr__tls_conn cr__tls_conn_t;

/* Loads certificate, key and CA (NULL/"" each = its environment variable).
 * None configured: returns 0 with *out = NULL (TLS off). Returns 0 and
 * *out, or -EINVAL (only some of the three given; unreadable or mismatched
 * certificate/key; bad CA), -EPERM (key file readable by group/others),
 * -ENOENT, -ENOMEM; the reason is logged once. */
int cr__tls_load(const char *cert, const char *key, const char *ca, cr__tls_t **out);
/* NULL is a no-op. */
void cr__tls_free(cr__tls_t *t);

/* The configured paths (for libcurl's CURLOPT_SSLCERT/SSLKEY/CAINFO). */
const char *cr__tls_cert_path(const cr__tls_t *t);
const char *cr__tls_key_path(const cr__tls_t *t);
const char *cr__tls_ca_path(const cr__tls_t *t);

/* Wraps a connected TCP fd (server = 1: the accepting side). No I/O yet.
 * Returns 0 and *out, -ENOMEM or -EIO. */
int cr__tls_conn_new(const cr__tls_t *t, int fd, int server, cr__tls_conn_t **out);
/* Frees (sends close_notify if the handshake completed, without waiting).
 * NULL is a no-op. */
void cr__tls_conn_free(cr__tls_conn_t *c);

/* One non-blocking handshake step. Returns 0 (done: the peer presented a
 * certificate of the CA), CR__TLS_WANT_READ / CR__TLS_WANT_WRITE (wait for
 * the fd, call again), -EACCES (the peer's certificate is missing or not
 * signed by the CA, or the peer refused ours), -EPROTO (not TLS, e.g. a
 * plain-text client), -ECONNRESET (peer closed). */
#define CR__TLS_WANT_READ 1
#define CR__TLS_WANT_WRITE 2
int cr__tls_conn_step(cr__tls_conn_t *c);
/* Whole handshake on a blocking or non-blocking fd, bounded by timeout_ms
 * in total (a peer that stalls mid-handshake gets -ETIMEDOUT). Returns 0 or
 * the errors of cr__tls_conn_step, -ETIMEDOUT. */
int cr__tls_conn_handshake(cr__tls_conn_t *c, int timeout_ms);

/* Reads up to len bytes. Returns the count, 0 on EOF, -EAGAIN (would block:
 * cr__tls_conn_want() says for what; also a blocking fd's SO_RCVTIMEO),
 * -ECONNRESET, -EACCES (the peer refused our certificate) or -EPROTO. */
ssize_t cr__tls_conn_read(cr__tls_conn_t *c, void *buf, size_t len);
/* Writes up to len bytes (partial writes allowed). Returns the count,
 * -EAGAIN, -ECONNRESET or -EPROTO. After -EAGAIN retry with the same
 * bytes. */
ssize_t cr__tls_conn_write(cr__tls_conn_t *c, const void *buf, size_t len);
/* POLLIN or POLLOUT: what the last -EAGAIN waits for. */
short cr__tls_conn_want(const cr__tls_conn_t *c);
/* Decrypted bytes buffered inside the connection (readable without the
 * fd becoming readable). */
size_t cr__tls_conn_pending(const cr__tls_conn_t *c);
/* Exactly len bytes, poll()ing with timeout_ms between partial transfers
 * (timeout_ms < 0: no timeout). Return 0, -ECONNRESET (EOF), -ETIMEDOUT or
 * the errors above. */
int cr__tls_conn_read_full(cr__tls_conn_t *c, void *buf, size_t len, int timeout_ms);
int cr__tls_conn_write_full(cr__tls_conn_t *c, const void *buf, size_t len, int timeout_ms);

/* The peer certificate's subject (one line) into buf, "" if none. */
void cr__tls_conn_peer(const cr__tls_conn_t *c, char *buf, size_t len);

#endif
