/* Private to src/transfer/metadata/: the backend vtable behind cr__meta_t,
 * the shared libcurl request helper and base64. */
#ifndef CR_TRANSFER_META_INTERNAL_H
#define CR_TRANSFER_META_INTERNAL_H

#include <curl/curl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "transfer/metadata/metadata.h"

#define CR__META_MAX_ENDPOINTS 16
#define CR__META_URL_MAX 1024
#define CR__META_DEFAULT_TIMEOUT_MS 5000 /* per request, when the caller gives none */

struct cr__meta_ops {
    const char *name; /* "http", "etcd" */
    int (*get)(cr__meta_t *m, const char *key, char **val, size_t *len);
    int (*put)(cr__meta_t *m, const char *key, const void *val, size_t len);
    int (*del)(cr__meta_t *m, const char *key);
};

struct cr__meta {
    const struct cr__meta_ops *ops;
    int timeout_ms;     /* guarded by mu (cr__meta_set_timeout) */
    pthread_mutex_t mu; /* serializes calls: guards curl and cur_ep */
    CURL *curl;         /* one easy handle, reused for keep-alive */
    /* http: base URL ("http://h:p/path"); etcd: "http://h:p" per endpoint */
    unsigned n_ep;
    unsigned cur_ep; /* etcd: endpoint that answered last */
    char ep[CR__META_MAX_ENDPOINTS][CR__META_URL_MAX];
    /* what the last failed request saw ("connection refused at <url>",
     * "HTTP 404 from <url>"); "" when it failed without one. Guarded by mu:
     * cleared at the start of every get/put/del, written by the exchange */
    char why[CR__META_WHY_TEXT];
    struct cr__auth *auth; /* NULL = security off; set before use */
    const struct cr__tls *tls; /* NULL = plain http; set before use */
};

extern const struct cr__meta_ops cr__meta_http_ops;
extern const struct cr__meta_ops cr__meta_etcd_ops;

/* One HTTP exchange on m->curl (caller holds m->mu). method "GET", "PUT",
 * "POST", "DELETE"; body may be NULL. The response body is collected up to
 * resp_max bytes into *resp (malloc'd, NUL-terminated; may be NULL if
 * resp is NULL). Returns the HTTP status (> 0), or -EHOSTUNREACH (could not
 * resolve / connect, connection broken), -ETIMEDOUT, -EMSGSIZE (response
 * larger than resp_max), -ENOMEM. A failure, and a status of 300 or more,
 * is described in m->why (the URL without its query). */
int cr__meta_http_exchange(cr__meta_t *m, const char *method, const char *url,
                           const void *body, size_t body_len, const char *content_type,
                           size_t resp_max, char **resp, size_t *resp_len);

/* Validates a key: 1..CR__META_KEY_MAX-1 bytes, no NUL. Returns 0 or -EINVAL. */
int cr__meta_check_key(const char *key);

/* Parses an etcd /v3/kv/range JSON response: the first kv's value, base64
 * decoded, into *val (malloc'd, NUL-terminated). Returns 0, -ENOENT (no kvs),
 * -EIO (malformed), -ENOMEM. Fuzzed by fuzz_etcd_range.c. */
int cr__meta_etcd_parse_range(const char *resp, size_t len, char **val, size_t *out_len);

/* base64 (RFC 4648, padded). encode: returns malloc'd NUL-terminated string
 * or NULL. decode: returns 0 and a malloc'd NUL-terminated buffer, or
 * -EINVAL / -ENOMEM. */
char *cr__b64_encode(const void *data, size_t len);
int cr__b64_decode(const char *s, size_t slen, char **out, size_t *out_len);

#endif
