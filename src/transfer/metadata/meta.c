/* cr__meta_*: URI parsing, dispatch to the backend, and the libcurl helper
 * shared by the http and etcd backends. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/auth/auth.h"
#include "common/log.h"
#include "common/net.h"
#include "common/tls/tls.h"
#include "transfer/metadata/meta_internal.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

int cr__meta_check_key(const char *key)
{
    if (!key)
        return -EINVAL;
    size_t n = strnlen(key, CR__META_KEY_MAX);
    return n == 0 || n >= CR__META_KEY_MAX ? -EINVAL : 0;
}

/* "http://host[:port][/path]" — kept verbatim as the base URL. */
static int parse_http(const char *uri, cr__meta_t *m)
{
    const char *rest = strchr(uri, ':') + 3; /* after "http://" or "https://" */
    size_t n = strlen(uri);
    if (n >= CR__META_URL_MAX - 8 || !*rest || *rest == '/' || *rest == ':' ||
        strpbrk(uri, " \t\r\n?#"))
        return -EINVAL;
    /* authority must be host[:port] with a valid port if present */
    char auth[CR__HOST_MAX + 8];
    size_t alen = strcspn(rest, "/");
    if (alen >= sizeof auth)
        return -EINVAL;
    memcpy(auth, rest, alen);
    auth[alen] = '\0';
    if (strchr(auth, '@'))
        return -EINVAL;
    const char *colon = strrchr(auth, ':');
    if (colon && (auth[0] != '[' || strchr(auth, ']') < colon)) {
        char host[CR__HOST_MAX];
        uint16_t port;
        if (cr__net_split_hostport(auth, host, &port, 0))
            return -EINVAL;
    }
    memcpy(m->ep[0], uri, n + 1);
    m->n_ep = 1;
    return 0;
}

/* "etcd://h1:2379[,h2:2379...][/ignored]" -> "http://h1:2379", ...
 * (p points after the scheme) */
static int parse_etcd(const char *p, cr__meta_t *m)
{
    size_t list_len = strcspn(p, "/");
    if (list_len == 0)
        return -EINVAL;
    m->n_ep = 0;
    while (list_len > 0) {
        size_t item = strcspn(p, ",/");
        if (item > list_len)
            item = list_len;
        char hp[CR__HOST_MAX + 8], host[CR__HOST_MAX];
        uint16_t port;
        if (item == 0 || item >= sizeof hp || m->n_ep >= CR__META_MAX_ENDPOINTS)
            return -EINVAL;
        memcpy(hp, p, item);
        hp[item] = '\0';
        if (cr__net_split_hostport(hp, host, &port, 0))
            return -EINVAL;
        int is_v6 = strchr(host, ':') != NULL;
        snprintf(m->ep[m->n_ep++], CR__META_URL_MAX, "http://%s%s%s:%u", is_v6 ? "[" : "", host,
                 is_v6 ? "]" : "", port);
        p += item;
        list_len -= item;
        if (list_len > 0) { /* skip the comma */
            p++;
            list_len--;
            if (list_len == 0)
                return -EINVAL; /* trailing comma */
        }
    }
    return 0;
}

int cr__meta_open(const char *uri, int timeout_ms, cr__meta_t **out)
{
    if (!uri || !out)
        return -EINVAL;
    pthread_once(&curl_once, curl_init_once);
    cr__meta_t *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->timeout_ms = timeout_ms > 0 ? timeout_ms : CR__META_DEFAULT_TIMEOUT_MS;
    int rc;
    if (strncmp(uri, "http://", 7) == 0 || strncmp(uri, "https://", 8) == 0) {
        m->ops = &cr__meta_http_ops;
        rc = parse_http(uri, m);
    } else if (strncmp(uri, "etcd://", 7) == 0) {
        m->ops = &cr__meta_etcd_ops;
        rc = parse_etcd(uri + 7, m);
    } else if (!strstr(uri, "://") && strcasecmp(uri, "p2p") && strcasecmp(uri, "P2PHANDSHAKE")) {
        /* Mooncake treats a bare "host:port[,host:port]" as etcd */
        m->ops = &cr__meta_etcd_ops;
        rc = parse_etcd(uri, m);
    } else {
        rc = -EINVAL; /* includes "p2p": handled by the caller */
    }
    if (rc) {
        free(m);
        return rc;
    }
    m->curl = curl_easy_init();
    if (!m->curl) {
        free(m);
        return -ENOMEM;
    }
    pthread_mutex_init(&m->mu, NULL);
    *out = m;
    return 0;
}

void cr__meta_close(cr__meta_t *m)
{
    if (!m)
        return;
    curl_easy_cleanup(m->curl);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void cr__meta_last_error(cr__meta_t *m, char *buf, size_t cap)
{
    if (!cap)
        return;
    buf[0] = '\0';
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    snprintf(buf, cap, "%s", m->why);
    pthread_mutex_unlock(&m->mu);
}

void cr__meta_set_timeout(cr__meta_t *m, int timeout_ms)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->timeout_ms = timeout_ms > 0 ? timeout_ms : CR__META_DEFAULT_TIMEOUT_MS;
    pthread_mutex_unlock(&m->mu);
}

void cr__meta_set_auth(cr__meta_t *m, struct cr__auth *auth)
{
    if (m)
        m->auth = auth;
}

void cr__meta_set_tls(cr__meta_t *m, const struct cr__tls *tls)
{
    if (m)
        m->tls = tls;
}

#define SIG_PREFIX "CRSIG1 "
#define SIG_HDR (sizeof SIG_PREFIX - 1 + 2 * CR__AUTH_MAC_LEN + 1)

static int meta_mac(struct cr__auth *a, const char *key, const void *val, size_t len,
                    uint8_t mac[CR__AUTH_MAC_LEN])
{
    const void *parts[] = {key, val};
    size_t lens[] = {strlen(key) + 1, len};
    return cr__auth_mac(a, "crescent meta v1", parts, lens, 2, mac);
}

int cr__meta_sign(struct cr__auth *a, const char *key, const void *val, size_t len, char **out,
                  size_t *out_len)
{
    uint8_t mac[CR__AUTH_MAC_LEN];
    if (meta_mac(a, key, val, len, mac))
        return -EIO;
    char *b = malloc(SIG_HDR + len + 1);
    if (!b)
        return -ENOMEM;
    memcpy(b, SIG_PREFIX, sizeof SIG_PREFIX - 1);
    cr__auth_hex(mac, CR__AUTH_MAC_LEN, b + sizeof SIG_PREFIX - 1);
    b[SIG_HDR - 1] = '\n';
    if (len)
        memcpy(b + SIG_HDR, val, len);
    b[SIG_HDR + len] = '\0';
    *out = b;
    *out_len = SIG_HDR + len;
    return 0;
}

int cr__meta_verify(struct cr__auth *a, const char *key, const char *buf, size_t buf_len,
                    const char **val, size_t *len)
{
    uint8_t got[CR__AUTH_MAC_LEN], want[CR__AUTH_MAC_LEN];
    if (buf_len < SIG_HDR || memcmp(buf, SIG_PREFIX, sizeof SIG_PREFIX - 1) != 0 ||
        buf[SIG_HDR - 1] != '\n' ||
        cr__auth_unhex(buf + sizeof SIG_PREFIX - 1, 2 * CR__AUTH_MAC_LEN, got))
        return -EACCES;
    if (meta_mac(a, key, buf + SIG_HDR, buf_len - SIG_HDR, want) ||
        !cr__auth_mac_eq(got, want, CR__AUTH_MAC_LEN))
        return -EACCES;
    *val = buf + SIG_HDR;
    *len = buf_len - SIG_HDR;
    return 0;
}

int cr__meta_get(cr__meta_t *m, const char *key, char **val, size_t *len)
{
    if (!m || !val || cr__meta_check_key(key))
        return -EINVAL;
    pthread_mutex_lock(&m->mu);
    char *raw = NULL;
    size_t rlen = 0;
    m->why[0] = '\0';
    int rc = m->ops->get(m, key, &raw, &rlen);
    pthread_mutex_unlock(&m->mu);
    if (rc || !m->auth) {
        if (!rc) {
            *val = raw;
            if (len)
                *len = rlen;
        }
        return rc;
    }
    const char *v;
    size_t vlen;
    if (cr__meta_verify(m->auth, key, raw, rlen, &v, &vlen)) {
        CR_LOG_RL(CR__LOG_WARN, "meta", "metadata %s is not signed with the cluster key: "
                  "ignored (written by a non-member or a node without security)", key);
        free(raw);
        return -EACCES;
    }
    memmove(raw, v, vlen);
    raw[vlen] = '\0';
    *val = raw;
    if (len)
        *len = vlen;
    return 0;
}

int cr__meta_put(cr__meta_t *m, const char *key, const void *val, size_t len)
{
    if (!m || (!val && len) || len > CR__META_VALUE_MAX || cr__meta_check_key(key))
        return -EINVAL;
    char *signed_val = NULL;
    if (m->auth) {
        int rc = cr__meta_sign(m->auth, key, val ? val : "", len, &signed_val, &len);
        if (rc)
            return rc;
        val = signed_val;
    }
    pthread_mutex_lock(&m->mu);
    m->why[0] = '\0';
    int rc = m->ops->put(m, key, val ? val : "", len);
    pthread_mutex_unlock(&m->mu);
    free(signed_val);
    return rc;
}

int cr__meta_del(cr__meta_t *m, const char *key)
{
    if (!m || cr__meta_check_key(key))
        return -EINVAL;
    pthread_mutex_lock(&m->mu);
    m->why[0] = '\0';
    int rc = m->ops->del(m, key);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* ---- libcurl helper ---------------------------------------------------- */

struct sink {
    char *p;
    size_t len, cap, max;
    int overflow;
};

static size_t sink_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct sink *s = ud;
    size_t n = size * nmemb;
    if (n > s->max - s->len) {
        s->overflow = 1;
        return 0; /* aborts the transfer */
    }
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 1024;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *np = realloc(s->p, cap);
        if (!np)
            return 0;
        s->p = np;
        s->cap = cap;
    }
    memcpy(s->p + s->len, ptr, n);
    s->len += n;
    s->p[s->len] = '\0';
    return n;
}

static size_t sink_discard(char *ptr, size_t size, size_t nmemb, void *ud)
{
    (void)ptr, (void)ud;
    return size * nmemb;
}

/* Fills m->why with what an exchange with url saw: cc, else the HTTP
 * status. The URL is named without its query (the key, URL-encoded). */
static void describe(cr__meta_t *m, const char *method, const char *url, CURLcode cc,
                     long status, int rc, size_t resp_max)
{
    int ul = (int)strcspn(url, "?");
    long os_err = 0;
    switch (cc) {
    case CURLE_OK:
        /* GET 404 is a missing key; to a PUT or DELETE, 404, 405 and 501
         * mean the URL is not a metadata service's */
        snprintf(m->why, sizeof m->why, "HTTP %ld from %.*s%s", status, ul, url,
                 strcmp(method, "GET") && (status == 404 || status == 405 || status == 501)
                     ? " (not a metadata service, or not its path)"
                     : "");
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
        snprintf(m->why, sizeof m->why, "host name of %.*s does not resolve", ul, url);
        break;
    case CURLE_COULDNT_CONNECT:
        curl_easy_getinfo(m->curl, CURLINFO_OS_ERRNO, &os_err);
        if (os_err == ECONNREFUSED)
            snprintf(m->why, sizeof m->why, "connection refused at %.*s (nothing listens there)",
                     ul, url);
        else
            snprintf(m->why, sizeof m->why, "cannot connect to %.*s: %s", ul, url,
                     os_err > 0 ? strerror((int)os_err) : curl_easy_strerror(cc));
        break;
    case CURLE_OPERATION_TIMEDOUT:
        snprintf(m->why, sizeof m->why, "no answer from %.*s within %d ms", ul, url,
                 m->timeout_ms);
        break;
    case CURLE_GOT_NOTHING:
        snprintf(m->why, sizeof m->why, "%.*s closed the connection without an answer", ul,
                 url);
        break;
    case CURLE_WRITE_ERROR:
        if (rc == -EMSGSIZE)
            snprintf(m->why, sizeof m->why, "answer from %.*s larger than %zu bytes", ul, url,
                     resp_max);
        else
            snprintf(m->why, sizeof m->why, "no memory for the answer from %.*s", ul, url);
        break;
    default:
        snprintf(m->why, sizeof m->why, "%.*s: %s", ul, url, curl_easy_strerror(cc));
        break;
    }
}

int cr__meta_http_exchange(cr__meta_t *m, const char *method, const char *url,
                           const void *body, size_t body_len, const char *content_type,
                           size_t resp_max, char **resp, size_t *resp_len)
{
    CURL *c = m->curl;
    curl_easy_reset(c); /* keeps the connection cache */
    struct sink s = {.max = resp_max};
    struct curl_slist *hdrs = curl_slist_append(NULL, "Expect:");
    if (content_type && hdrs) {
        char h[128];
        snprintf(h, sizeof h, "Content-Type: %s", content_type);
        struct curl_slist *h2 = curl_slist_append(hdrs, h);
        if (h2)
            hdrs = h2;
    }
    if (m->auth && m->ops == &cr__meta_http_ops && hdrs) {
        /* request signature for the embedded/crescent-metadata server */
        char h[sizeof CR__AUTH_HTTP_HEADER + CR__AUTH_HTTP_MAX + 4];
        char v[CR__AUTH_HTTP_MAX];
        if (cr__auth_http_sign(m->auth, method, url, body, body ? body_len : 0, v) == 0) {
            snprintf(h, sizeof h, "%s: %s", CR__AUTH_HTTP_HEADER, v);
            struct curl_slist *h2 = curl_slist_append(hdrs, h);
            if (h2)
                hdrs = h2;
        }
    }
    char tls_url[CR__META_URL_MAX + 3 * CR__META_KEY_MAX + 64];
    if (m->tls) {
        /* TLS on: https with our certificate, the peer's checked against
         * our CA (no host name check: members are reached by address, see
         * common/tls/tls.h); a plain http:// URL is upgraded */
        if (strncmp(url, "http://", 7) == 0 &&
            (size_t)snprintf(tls_url, sizeof tls_url, "https://%s", url + 7) < sizeof tls_url)
            url = tls_url;
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https");
        curl_easy_setopt(c, CURLOPT_SSLCERT, cr__tls_cert_path(m->tls));
        curl_easy_setopt(c, CURLOPT_SSLKEY, cr__tls_key_path(m->tls));
        curl_easy_setopt(c, CURLOPT_CAINFO, cr__tls_ca_path(m->tls));
        curl_easy_setopt(c, CURLOPT_CAPATH, NULL);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
        curl_easy_setopt(c, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
    } else {
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)m->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)m->timeout_ms);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*"); /* never route metadata via a proxy */
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    } else {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
        if (body || strcmp(method, "PUT") == 0 || strcmp(method, "POST") == 0) {
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body ? (const char *)body : "");
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        }
    }
    if (resp) {
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    } else {
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_discard);
    }
    CURLcode cc = curl_easy_perform(c);
    curl_slist_free_all(hdrs);
    int rc;
    long status = 0;
    switch (cc) {
    case CURLE_OK:
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        rc = status > 0 ? (int)status : -EHOSTUNREACH;
        break;
    case CURLE_OPERATION_TIMEDOUT:
        rc = -ETIMEDOUT;
        break;
    case CURLE_WRITE_ERROR:
        rc = s.overflow ? -EMSGSIZE : -ENOMEM;
        break;
    case CURLE_OUT_OF_MEMORY:
        rc = -ENOMEM;
        break;
    default: /* could not resolve/connect, connection reset, empty reply, ... */
        rc = -EHOSTUNREACH;
        break;
    }
    if (cc != CURLE_OK || status >= 300) {
        describe(m, method, url, cc, status, rc, resp_max);
        CR_LOG_DEBUG("meta", "%s: %s", method, m->why);
    }
    if (rc > 0 && resp) {
        if (!s.p && !(s.p = calloc(1, 1)))
            return -ENOMEM;
        *resp = s.p;
        if (resp_len)
            *resp_len = s.len;
    } else {
        free(s.p);
    }
    return rc;
}
