/* Metadata backends: a small key/value interface over the central
 * metadata services (HTTP, etcd). "p2p" has no backend: descriptors are
 * fetched from the peer itself over its control channel (see control/). */
#ifndef CR_TRANSFER_METADATA_H
#define CR_TRANSFER_METADATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct cr__meta cr__meta_t;

#define CR__META_KEY_MAX 1024
#define CR__META_VALUE_MAX (16u << 20)

/* Opens a backend for uri: "http://host:port/path" or
 * "etcd://host:port[,host:port...]" (a bare "host:port[,...]" also means
 * etcd, as in Mooncake). timeout_ms bounds every call.
 * Returns 0 and *out; -EINVAL for a malformed or unsupported URI (including
 * "p2p", which callers handle themselves). */
int cr__meta_open(const char *uri, int timeout_ms, cr__meta_t **out);

/* Gets a value: *val is malloc'd (NUL-terminated, caller frees), *len its
 * length. Returns 0, -ENOENT (no such key), -EHOSTUNREACH/-ETIMEDOUT
 * (service down; for etcd every endpoint was tried), -EINVAL. */
int cr__meta_get(cr__meta_t *m, const char *key, char **val, size_t *len);

/* Puts a value (overwrites). Returns 0 or a negative errno as above. */
int cr__meta_put(cr__meta_t *m, const char *key, const void *val, size_t len);

/* Deletes a key. Deleting a missing key is 0. */
int cr__meta_del(cr__meta_t *m, const char *key);

/* What the last failed get/put/del on m saw, for the caller's log line:
 * "connection refused at http://h:p/path", "host name of <url> does not
 * resolve", "no answer from <url> within N ms", "HTTP 404 from <url> ...".
 * Copies it into buf (cap bytes, NUL-terminated); "" when the failure had
 * no such detail (a bad argument, a value not signed). With calls on m from
 * other threads in between it may be theirs. NULL m gives "". */
void cr__meta_last_error(cr__meta_t *m, char *buf, size_t cap);
#define CR__META_WHY_TEXT 320 /* a buffer that holds any of them */

/* Bounds every later request on m to timeout_ms (> 0; else the default)
 * instead of cr__meta_open's; an etcd backend spends it on each endpoint
 * it tries. NULL is a no-op. */
void cr__meta_set_timeout(cr__meta_t *m, int timeout_ms);

/* Closes; NULL is a no-op. */
void cr__meta_close(cr__meta_t *m);

/* etcd backends only: POSTs a JSON body to the v3 gateway path api (e.g.
 * "/v3/lease/grant", "/v3/kv/txn") with the same endpoint failover as get/put.
 * On success returns the HTTP status (2xx/4xx) and *resp (malloc'd,
 * NUL-terminated, at most 1 MiB); else -EHOSTUNREACH/-ETIMEDOUT (no endpoint
 * answered), -EINVAL (not an etcd backend), -ENOMEM. */
int cr__meta_etcd_post(cr__meta_t *m, const char *api, const char *json, char **resp,
                       size_t *len);

/* base64 (RFC 4648, padded), as etcd's JSON gateway wants keys and values.
 * encode: malloc'd NUL-terminated string or NULL. decode: 0 and a malloc'd
 * NUL-terminated buffer, or -EINVAL / -ENOMEM. */
char *cr__b64_encode(const void *data, size_t len);
int cr__b64_decode(const char *s, size_t slen, char **out, size_t *out_len);

/* Security on (docs/security.md): values are stored signed and verified on
 * read, and HTTP requests carry a request signature. Stored form:
 *   "CRSIG1 " <64 hex HMAC(K, "crescent meta v1", key, value)> "\n" value
 * so a value moved to another key, altered, or written by a non-member
 * (unsigned) is refused by cr__meta_get with -EACCES. auth must outlive m;
 * set it right after cr__meta_open, before other calls. NULL = off. */
struct cr__auth;
void cr__meta_set_auth(cr__meta_t *m, struct cr__auth *auth);

/* TLS on (common/tls/tls.h): requests go over https with this member's
 * certificate, and the server (metadata service or etcd) must present one
 * of the CA; http:// URLs and etcd endpoints are upgraded to https. tls
 * must outlive m; set it right after cr__meta_open. NULL = plain http. */
struct cr__tls;
void cr__meta_set_tls(cr__meta_t *m, const struct cr__tls *tls);

/* Wraps value (len bytes) under key into a freshly allocated signed
 * envelope (*out, *out_len). Returns 0, -ENOMEM, -EIO. */
int cr__meta_sign(struct cr__auth *a, const char *key, const void *val, size_t len, char **out,
                  size_t *out_len);
/* Checks an envelope in place: on success *val and *len give the value
 * inside buf. Returns 0 or -EACCES (unsigned, malformed or bad MAC).
 * Fuzzed by fuzz_meta_sig.c. */
int cr__meta_verify(struct cr__auth *a, const char *key, const char *buf, size_t buf_len,
                    const char **val, size_t *len);

/* Embedded HTTP metadata server (the Mooncake contract): GET/PUT/DELETE
 * <path>?key=K on host:port. GET of a missing key is 404. Values are kept in
 * memory, bounded by CR__META_KEY_MAX / CR__META_VALUE_MAX per entry and
 * max_bytes in total (507 when full). Used by crescent-metadata and inside
 * crescent-master. */
typedef struct cr__meta_server cr__meta_server_t;
int cr__meta_server_start(const char *host, uint16_t port, const char *path, size_t max_bytes,
                          cr__meta_server_t **out);
uint16_t cr__meta_server_port(const cr__meta_server_t *s);
void cr__meta_server_stop(cr__meta_server_t *s);
/* Same with limits and security: one source address may hold at most
 * writer_quota bytes (0 = no per-writer bound; 507 past it); with auth
 * (must outlive the server) requests must be signed and PUT values signed
 * for their key (docs/security.md). */
int cr__meta_server_start_auth(const char *host, uint16_t port, const char *path,
                               size_t max_bytes, size_t writer_quota, struct cr__auth *auth,
                               cr__meta_server_t **out);
/* Same over TLS with mutual certificates when tls != NULL (common/tls;
 * must outlive the server). */
struct cr__tls;
int cr__meta_server_start_tls(const char *host, uint16_t port, const char *path,
                              size_t max_bytes, size_t writer_quota, struct cr__auth *auth,
                              const struct cr__tls *tls, cr__meta_server_t **out);

#endif
