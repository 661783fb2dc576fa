/* etcd metadata backend over etcd's v3 JSON gateway (grpc-gateway):
 *   POST /v3/kv/range       {"key": b64(K)}               -> {"kvs":[{"value": b64(V)}]}
 *   POST /v3/kv/put         {"key": b64(K), "value": b64(V)}
 *   POST /v3/kv/deleterange {"key": b64(K)}
 * Endpoints are tried in turn starting with the one that answered last; a
 * transport failure (refused, reset, timeout) or a 5xx moves on to the next
 * one. Each attempt is bounded by the backend's timeout. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "transfer/metadata/meta_internal.h"

#define ETCD_RESP_MAX ((size_t)CR__META_VALUE_MAX / 3 * 4 + 65536)

/* POSTs a JSON body to <endpoint><api> with failover. On success returns the
 * HTTP status (2xx/4xx) and *resp (malloc'd). */
static int etcd_call(cr__meta_t *m, const char *api, const char *json, char **resp,
                     size_t *resp_len)
{
    int rc = -EHOSTUNREACH;
    for (unsigned i = 0; i < m->n_ep; i++) {
        unsigned ep = (m->cur_ep + i) % m->n_ep;
        char url[CR__META_URL_MAX + 32];
        snprintf(url, sizeof url, "%s%s", m->ep[ep], api);
        char *body = NULL;
        size_t blen = 0;
        rc = cr__meta_http_exchange(m, "POST", url, json, strlen(json), "application/json",
                                    ETCD_RESP_MAX, &body, &blen);
        if (rc == -EHOSTUNREACH || rc == -ETIMEDOUT || rc >= 500) {
            CR_LOG_RL(CR__LOG_WARN, "meta", "etcd endpoint %s failed: %s; trying the next",
                      m->ep[ep], m->why);
            free(body);
            if (rc >= 500)
                rc = -EHOSTUNREACH;
            continue;
        }
        if (rc < 0)
            return rc == -EMSGSIZE ? -EINVAL : rc;
        m->cur_ep = ep;
        *resp = body;
        if (resp_len)
            *resp_len = blen;
        return rc;
    }
    return rc;
}

/* Builds {"key": b64(key)[, "value": b64(val)]}. Returns malloc'd or NULL. */
static char *make_req(const char *key, const void *val, size_t len, int with_value)
{
    char *k = cr__b64_encode(key, strlen(key));
    char *v = with_value ? cr__b64_encode(val, len) : NULL;
    char *out = NULL;
    if (k && (!with_value || v)) {
        int n = with_value ? asprintf(&out, "{\"key\":\"%s\",\"value\":\"%s\"}", k, v)
                           : asprintf(&out, "{\"key\":\"%s\"}", k);
        if (n < 0)
            out = NULL;
    }
    free(k);
    free(v);
    return out;
}

static int etcd_error(int status, const char *body)
{
    CR_LOG_WARN("meta", "etcd returned HTTP %d: %.200s", status, body ? body : "");
    return status == 400 || status == 413 ? -EINVAL : -EIO;
}

static int etcd_get(cr__meta_t *m, const char *key, char **val, size_t *len)
{
    char *req = make_req(key, NULL, 0, 0);
    if (!req)
        return -ENOMEM;
    char *resp = NULL;
    size_t rlen = 0;
    int st = etcd_call(m, "/v3/kv/range", req, &resp, &rlen);
    free(req);
    if (st < 0)
        return st;
    int rc;
    if (st != 200) {
        rc = etcd_error(st, resp);
        free(resp);
        return rc;
    }
    rc = cr__meta_etcd_parse_range(resp, rlen, val, len);
    free(resp);
    return rc;
}

int cr__meta_etcd_parse_range(const char *resp, size_t rlen, char **val, size_t *len)
{
    json_error_t jerr;
    json_t *root = json_loadb(resp, rlen, 0, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        return -EIO;
    }
    json_t *kvs = json_object_get(root, "kvs");
    if (!kvs || (json_is_array(kvs) && json_array_size(kvs) == 0)) {
        json_decref(root);
        return -ENOENT;
    }
    json_t *kv = json_array_get(kvs, 0); /* NULL when kvs is not an array */
    json_t *jv = json_object_get(kv, "value"); /* absent when the value is empty */
    if (!json_is_object(kv) || (jv && !json_is_string(jv))) {
        json_decref(root);
        return -EIO;
    }
    char *out;
    size_t olen;
    int rc = cr__b64_decode(jv ? json_string_value(jv) : "", jv ? json_string_length(jv) : 0,
                            &out, &olen);
    json_decref(root);
    if (rc)
        return rc == -ENOMEM ? rc : -EIO;
    if (olen > CR__META_VALUE_MAX) {
        free(out);
        return -EIO;
    }
    *val = out;
    if (len)
        *len = olen;
    return 0;
}

static int etcd_put(cr__meta_t *m, const char *key, const void *val, size_t len)
{
    char *req = make_req(key, val, len, 1);
    if (!req)
        return -ENOMEM;
    char *resp = NULL;
    int st = etcd_call(m, "/v3/kv/put", req, &resp, NULL);
    free(req);
    if (st < 0)
        return st;
    int rc = st == 200 ? 0 : etcd_error(st, resp);
    free(resp);
    return rc;
}

static int etcd_del(cr__meta_t *m, const char *key)
{
    char *req = make_req(key, NULL, 0, 0);
    if (!req)
        return -ENOMEM;
    char *resp = NULL;
    int st = etcd_call(m, "/v3/kv/deleterange", req, &resp, NULL);
    free(req);
    if (st < 0)
        return st;
    int rc = st == 200 ? 0 : etcd_error(st, resp);
    free(resp);
    return rc;
}

int cr__meta_etcd_post(cr__meta_t *m, const char *api, const char *json, char **resp,
                       size_t *len)
{
    if (!m || m->ops != &cr__meta_etcd_ops || !api || !json || !resp)
        return -EINVAL;
    pthread_mutex_lock(&m->mu);
    m->why[0] = '\0';
    int rc = etcd_call(m, api, json, resp, len);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

const struct cr__meta_ops cr__meta_etcd_ops = {
    .name = "etcd",
    .get = etcd_get,
    .put = etcd_put,
    .del = etcd_del,
};
