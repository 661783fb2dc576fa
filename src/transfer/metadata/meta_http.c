/* HTTP metadata backend: Mooncake's contract on one base URL.
 *   GET    <base>?key=K  -> 200 + value, 404 if missing
 *   PUT    <base>?key=K  with the value as body -> 200
 *   DELETE <base>?key=K  -> 200 (404 if missing: reported as success)
 * Keys are URL-encoded. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "transfer/metadata/meta_internal.h"

/* Builds "<base>?key=<escaped>" into url. Returns 0 or -ENOMEM/-EINVAL. */
static int key_url(cr__meta_t *m, const char *key, char *url, size_t cap)
{
    char *esc = curl_easy_escape(m->curl, key, (int)strlen(key));
    if (!esc)
        return -ENOMEM;
    int n = snprintf(url, cap, "%s?key=%s", m->ep[0], esc);
    curl_free(esc);
    return n > 0 && (size_t)n < cap ? 0 : -EINVAL;
}

/* Maps a non-2xx HTTP status to an errno. */
static int status_errno(int st)
{
    if (st == 404)
        return -ENOENT;
    if (st == 413 || st == 400 || st == 414)
        return -EINVAL;
    if (st == 507)
        return -ENOSPC;
    if (st == 401 || st == 403)
        return -EACCES; /* security: not a member, or a value not signed for its key */
    return -EIO;
}

#define URL_CAP (CR__META_URL_MAX + 3 * CR__META_KEY_MAX + 16)

static int http_get(cr__meta_t *m, const char *key, char **val, size_t *len)
{
    char url[URL_CAP];
    int rc = key_url(m, key, url, sizeof url);
    if (rc)
        return rc;
    char *body = NULL;
    size_t blen = 0;
    rc = cr__meta_http_exchange(m, "GET", url, NULL, 0, NULL, CR__META_VALUE_MAX, &body, &blen);
    if (rc < 0)
        return rc == -EMSGSIZE ? -EINVAL : rc;
    if (rc != 200) {
        free(body);
        return status_errno(rc);
    }
    *val = body;
    if (len)
        *len = blen;
    return 0;
}

static int http_put(cr__meta_t *m, const char *key, const void *val, size_t len)
{
    char url[URL_CAP];
    int rc = key_url(m, key, url, sizeof url);
    if (rc)
        return rc;
    rc = cr__meta_http_exchange(m, "PUT", url, val, len, "application/octet-stream", 0, NULL,
                                NULL);
    if (rc < 0)
        return rc;
    return rc >= 200 && rc < 300 ? 0 : status_errno(rc);
}

static int http_del(cr__meta_t *m, const char *key)
{
    char url[URL_CAP];
    int rc = key_url(m, key, url, sizeof url);
    if (rc)
        return rc;
    rc = cr__meta_http_exchange(m, "DELETE", url, NULL, 0, NULL, 0, NULL, NULL);
    if (rc < 0)
        return rc;
    if ((rc >= 200 && rc < 300) || rc == 404)
        return 0;
    return status_errno(rc);
}

const struct cr__meta_ops cr__meta_http_ops = {
    .name = "http",
    .get = http_get,
    .put = http_put,
    .del = http_del,
};
