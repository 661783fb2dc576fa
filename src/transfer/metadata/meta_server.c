/* Embedded HTTP metadata server (Mooncake's http metadata contract):
 *   GET    <path>?key=K -> 200 + value | 404
 *   PUT    <path>?key=K, body = value -> 200 | 400 (bad key) | 507 (full)
 *   DELETE <path>?key=K -> 200 | 404
 *   GET    /health -> 200 "OK" (liveness)
 * Other paths are 404, other methods 405. Values live in a chained hash
 * table guarded by one mutex; total bytes (keys + values + per-entry
 * overhead) are bounded by max_bytes, and the bytes written by one source
 * address by writer_quota when set (507 past it), so one writer cannot fill
 * the store and lock every other node out.
 *
 * Security on (auth): every request must be signed (httpd, 401 otherwise)
 * and a PUT's value must be a descriptor signed for its key
 * (cr__meta_verify, 403 otherwise): a stranger can neither read, write nor
 * delete, and a member cannot store something other members would reject. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth/auth.h"
#include "common/httpd.h"
#include "common/log.h"
#include "transfer/metadata/meta_internal.h"

#define ENTRY_OVERHEAD 64 /* bytes charged per entry besides key and value */
#define MIN_BUCKETS 64
#define WRITER_SLOTS 256   /* sources tracked; past it new sources share one slot */

struct entry {
    struct entry *next;
    uint64_t hash;
    size_t klen, vlen;
    char *key;
    char *val;
    int writer; /* slot in writers[] charged for this entry */
};

struct writer {
    char addr[64]; /* "" = free */
    size_t bytes;
};

struct cr__meta_server {
    cr__httpd_t *httpd;
    char path[CR__META_URL_MAX];
    size_t max_bytes;
    pthread_mutex_t mu;     /* guards everything below */
    struct entry **buckets; /* n_buckets, a power of two */
    size_t n_buckets, n_entries, bytes;
    struct writer writers[WRITER_SLOTS];
    struct cr__auth *auth; /* NULL = security off */
    size_t writer_quota;   /* 0 = none */
};

/* Slot of the writer with this address (caller holds mu); the last slot
 * is shared by everyone once the table is full. */
static int writer_slot_locked(struct cr__meta_server *s, const char *addr)
{
    int free_slot = -1;
    for (int i = 0; i < WRITER_SLOTS - 1; i++) {
        if (strcmp(s->writers[i].addr, addr) == 0)
            return i;
        if (free_slot < 0 && !s->writers[i].addr[0] && !s->writers[i].bytes)
            free_slot = i;
    }
    if (free_slot < 0)
        return WRITER_SLOTS - 1;
    snprintf(s->writers[free_slot].addr, sizeof s->writers[free_slot].addr, "%s", addr);
    return free_slot;
}

static void writer_release_locked(struct cr__meta_server *s, int w, size_t bytes)
{
    s->writers[w].bytes -= bytes;
    if (!s->writers[w].bytes && w != WRITER_SLOTS - 1)
        s->writers[w].addr[0] = '\0';
}

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static size_t entry_cost(size_t klen, size_t vlen) { return klen + vlen + ENTRY_OVERHEAD; }

static struct entry **find_locked(struct cr__meta_server *s, const char *key, size_t klen,
                                  uint64_t h)
{
    struct entry **pp = &s->buckets[h & (s->n_buckets - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->klen == klen && memcmp((*pp)->key, key, klen) == 0)
            return pp;
    return pp;
}

static void grow_locked(struct cr__meta_server *s)
{
    if (s->n_entries < s->n_buckets)
        return;
    size_t nb = s->n_buckets * 2;
    struct entry **b = calloc(nb, sizeof *b);
    if (!b)
        return; /* keep the longer chains; still correct */
    for (size_t i = 0; i < s->n_buckets; i++) {
        struct entry *e = s->buckets[i];
        while (e) {
            struct entry *next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = next;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->n_buckets = nb;
}

static void do_get(struct cr__meta_server *s, const char *key, size_t klen, cr__http_resp_t *resp)
{
    uint64_t h = fnv1a(key, klen);
    pthread_mutex_lock(&s->mu);
    struct entry *e = *find_locked(s, key, klen, h);
    int rc = e ? cr__http_resp_set(resp, 200, "application/octet-stream", e->val, e->vlen) : 1;
    pthread_mutex_unlock(&s->mu);
    if (rc == 1)
        cr__http_resp_printf(resp, 404, "metadata not found\n");
    else if (rc)
        resp->status = 500;
}

static void do_put(struct cr__meta_server *s, const char *key, size_t klen, const char *val,
                   size_t vlen, const char *writer, cr__http_resp_t *resp)
{
    uint64_t h = fnv1a(key, klen);
    char *v = malloc(vlen ? vlen : 1);
    if (!v) {
        resp->status = 500;
        return;
    }
    memcpy(v, val, vlen);
    pthread_mutex_lock(&s->mu);
    struct entry **pp = find_locked(s, key, klen, h);
    struct entry *e = *pp;
    size_t old = e ? entry_cost(e->klen, e->vlen) : 0;
    size_t add = entry_cost(klen, vlen);
    if (s->bytes - old + add > s->max_bytes) {
        pthread_mutex_unlock(&s->mu);
        free(v);
        cr__http_resp_printf(resp, 507, "metadata store full\n");
        return;
    }
    int w = writer_slot_locked(s, writer);
    size_t w_old = e && e->writer == w ? old : 0;
    if (s->writer_quota && s->writers[w].bytes - w_old + add > s->writer_quota) {
        if (!s->writers[w].bytes && w != WRITER_SLOTS - 1)
            s->writers[w].addr[0] = '\0';
        pthread_mutex_unlock(&s->mu);
        free(v);
        CR_LOG_RL(CR__LOG_WARN, "meta", "writer %s over its quota (%zu bytes): refused", writer,
                  s->writer_quota);
        cr__http_resp_printf(resp, 507, "metadata quota of this writer exhausted\n");
        return;
    }
    if (e) {
        writer_release_locked(s, e->writer, old);
        free(e->val);
    } else {
        e = calloc(1, sizeof *e);
        char *k = malloc(klen);
        if (!e || !k) {
            pthread_mutex_unlock(&s->mu);
            free(e);
            free(k);
            free(v);
            resp->status = 500;
            return;
        }
        memcpy(k, key, klen);
        e->key = k;
        e->klen = klen;
        e->hash = h;
        *pp = e;
        s->n_entries++;
    }
    e->val = v;
    e->vlen = vlen;
    e->writer = w;
    s->writers[w].bytes += add;
    s->bytes = s->bytes - old + add;
    grow_locked(s);
    pthread_mutex_unlock(&s->mu);
    cr__http_resp_printf(resp, 200, "metadata updated\n");
}

static void do_del(struct cr__meta_server *s, const char *key, size_t klen, cr__http_resp_t *resp)
{
    uint64_t h = fnv1a(key, klen);
    pthread_mutex_lock(&s->mu);
    struct entry **pp = find_locked(s, key, klen, h);
    struct entry *e = *pp;
    if (e) {
        *pp = e->next;
        s->n_entries--;
        s->bytes -= entry_cost(e->klen, e->vlen);
        writer_release_locked(s, e->writer, entry_cost(e->klen, e->vlen));
    }
    pthread_mutex_unlock(&s->mu);
    if (!e) {
        cr__http_resp_printf(resp, 404, "metadata not found\n");
        return;
    }
    free(e->key);
    free(e->val);
    free(e);
    cr__http_resp_printf(resp, 200, "metadata deleted\n");
}

static void handle(void *user, const cr__http_req_t *req, cr__http_resp_t *resp)
{
    struct cr__meta_server *s = user;
    if (!strcmp(req->path, "/health") && strcmp(s->path, "/health") != 0) {
        /* liveness probe, as Mooncake's metadata server answers it */
        cr__http_resp_printf(resp, 200, "OK\n");
        return;
    }
    if (strcmp(req->path, s->path) != 0) {
        cr__http_resp_printf(resp, 404, "no such path\n");
        return;
    }
    const char *key = cr__http_req_arg(req, "key");
    if (!key || cr__meta_check_key(key)) {
        cr__http_resp_printf(resp, 400, "missing or invalid key\n");
        return;
    }
    size_t klen = strlen(key);
    if (strcmp(req->method, "GET") == 0)
        do_get(s, key, klen, resp);
    else if (strcmp(req->method, "PUT") == 0 || strcmp(req->method, "POST") == 0) {
        const char *v;
        size_t vl;
        if (s->auth && cr__meta_verify(s->auth, key, req->body, req->body_len, &v, &vl)) {
            cr__http_resp_printf(resp, 403, "value is not signed with the cluster key\n");
            return;
        }
        char writer[64];
        cr__http_req_peer(req, writer, sizeof writer);
        do_put(s, key, klen, req->body, req->body_len, writer, resp);
    }
    else if (strcmp(req->method, "DELETE") == 0)
        do_del(s, key, klen, resp);
    else
        cr__http_resp_printf(resp, 405, "method not allowed\n");
}

int cr__meta_server_start(const char *host, uint16_t port, const char *path, size_t max_bytes,
                          cr__meta_server_t **out)
{
    return cr__meta_server_start_auth(host, port, path, max_bytes, 0, NULL, out);
}

int cr__meta_server_start_auth(const char *host, uint16_t port, const char *path,
                               size_t max_bytes, size_t writer_quota, struct cr__auth *auth,
                               cr__meta_server_t **out)
{
    return cr__meta_server_start_tls(host, port, path, max_bytes, writer_quota, auth, NULL, out);
}

int cr__meta_server_start_tls(const char *host, uint16_t port, const char *path,
                              size_t max_bytes, size_t writer_quota, struct cr__auth *auth,
                              const struct cr__tls *tls, cr__meta_server_t **out)
{
    if (!out || !path || path[0] != '/' || strlen(path) >= CR__META_URL_MAX || max_bytes == 0)
        return -EINVAL;
    struct cr__meta_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    strcpy(s->path, path);
    s->max_bytes = max_bytes;
    s->n_buckets = MIN_BUCKETS;
    s->buckets = calloc(s->n_buckets, sizeof *s->buckets);
    if (!s->buckets) {
        free(s);
        return -ENOMEM;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->auth = auth;
    s->writer_quota = writer_quota;
    cr__httpd_params_t hp = {.host = host,
                             .port = port,
                             /* + room for the signature envelope */
                             .max_body = auth ? CR__META_VALUE_MAX + 256 : CR__META_VALUE_MAX,
                             .fn = handle,
                             .user = s,
                             .auth = auth,
                             .tls = tls,
                             .name = "HTTP metadata server"};
    int rc = cr__httpd_start_ex(&hp, &s->httpd);
    if (rc) {
        pthread_mutex_destroy(&s->mu);
        free(s->buckets);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

uint16_t cr__meta_server_port(const cr__meta_server_t *s) { return s ? cr__httpd_port(s->httpd) : 0; }

void cr__meta_server_stop(cr__meta_server_t *s)
{
    if (!s)
        return;
    cr__httpd_stop(s->httpd); /* no handler runs after this */
    for (size_t i = 0; i < s->n_buckets; i++) {
        struct entry *e = s->buckets[i];
        while (e) {
            struct entry *next = e->next;
            free(e->key);
            free(e->val);
            free(e);
            e = next;
        }
    }
    free(s->buckets);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
