/* Cluster authentication (auth.h): key loading, labelled HMACs, the
 * challenge-response handshake and HTTP request signatures. */
#include "common/auth/auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/log.h"
#include "common/status.h"
#include "common/net.h"

/* HTTP nonces remembered (power of two): 1.5 MiB of address space, paged in
 * only by a process that verifies signatures. A nonce is kept until its
 * request's time leaves the window; when the REPLAY_PROBE slots it may use
 * all hold live nonces, the request is refused as busy (never is a live
 * nonce forgotten: that would let its request be replayed). */
#define REPLAY_SLOTS 65536
#define REPLAY_PROBE 16

typedef struct replay_slot {
    uint8_t nonce[16];
    uint64_t ts; /* the request's signed time; 0 = free */
} replay_slot_t;

struct cr__auth {
    uint8_t key[CR__AUTH_KEY_MAX];
    size_t key_len;
    uint8_t key_id[CR__AUTH_KEYID_LEN];
    pthread_mutex_t replay_mu;
    replay_slot_t *replay; /* REPLAY_SLOTS, guarded by replay_mu */
};

int cr__auth_random(void *buf, size_t len)
{
    return RAND_bytes(buf, (int)len) == 1 ? 0 : -EIO;
}

int cr__auth_mac_eq(const uint8_t *x, const uint8_t *y, size_t len)
{
    return CRYPTO_memcmp(x, y, len) == 0;
}

/* HMAC(key, label || 0 || parts...). The label separates purposes: the
 * derived "purpose key" is implicit in the domain-separated input. */
int cr__auth_mac(const cr__auth_t *a, const char *label, const void *const *parts,
                 const size_t *lens, int n, uint8_t out[CR__AUTH_MAC_LEN])
{
    /* one-shot HMAC over a stack buffer for the common small inputs */
    uint8_t stackbuf[1024];
    size_t total = strlen(label) + 1;
    for (int i = 0; i < n; i++)
        total += lens[i];
    uint8_t *buf = total <= sizeof stackbuf ? stackbuf : malloc(total);
    if (!buf)
        return -EIO;
    size_t off = strlen(label) + 1;
    memcpy(buf, label, off);
    for (int i = 0; i < n; i++) {
        if (lens[i])
            memcpy(buf + off, parts[i], lens[i]);
        off += lens[i];
    }
    unsigned olen = 0;
    uint8_t *r = HMAC(EVP_sha256(), a->key, (int)a->key_len, buf, total, out, &olen);
    if (buf != stackbuf)
        free(buf);
    return r && olen == CR__AUTH_MAC_LEN ? 0 : -EIO;
}

static int auth_new(const void *secret, size_t len, cr__auth_t **out)
{
    if (len < CR__AUTH_KEY_MIN || len > CR__AUTH_KEY_MAX)
        return -EINVAL;
    cr__auth_t *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    a->replay = calloc(REPLAY_SLOTS, sizeof *a->replay);
    if (!a->replay) {
        free(a);
        return -ENOMEM;
    }
    memcpy(a->key, secret, len);
    a->key_len = len;
    pthread_mutex_init(&a->replay_mu, NULL);
    uint8_t mac[CR__AUTH_MAC_LEN];
    if (cr__auth_mac(a, "crescent key id", NULL, NULL, 0, mac)) {
        cr__auth_free(a);
        return -EIO;
    }
    memcpy(a->key_id, mac, CR__AUTH_KEYID_LEN);
    *out = a;
    return 0;
}

int cr__auth_from_secret(const void *secret, size_t len, cr__auth_t **out)
{
    if (!secret || !out)
        return -EINVAL;
    return auth_new(secret, len, out);
}

void cr__auth_free(cr__auth_t *a)
{
    if (!a)
        return;
    OPENSSL_cleanse(a->key, sizeof a->key);
    pthread_mutex_destroy(&a->replay_mu);
    free(a->replay);
    free(a);
}

int cr__auth_load_key_file(const char *path, cr__auth_t **out)
{
    if (!out)
        return -EINVAL;
    if (!path || !*path)
        path = getenv(CR__AUTH_ENV_KEY_FILE);
    if (!path || !*path) {
        *out = NULL;
        return 0;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        CR_LOG_ERROR("auth", "cluster key file %s: %s", path, strerror(e));
        return cr__status_from_errno(e);
    }
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        CR_LOG_ERROR("auth", "cluster key file %s: not a regular file", path);
        return -EINVAL;
    }
    if (sb.st_mode & 077) {
        close(fd);
        CR_LOG_ERROR("auth",
                     "cluster key file %s is readable by group or others (mode %03o): "
                     "chmod 600 it",
                     path, (unsigned)(sb.st_mode & 0777));
        return -EPERM;
    }
    uint8_t buf[CR__AUTH_KEY_MAX + 1];
    size_t n = 0;
    while (n < sizeof buf) {
        ssize_t k = read(fd, buf + n, sizeof buf - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
                 buf[n - 1] == '\t'))
        n--;
    if (n < CR__AUTH_KEY_MIN || n > CR__AUTH_KEY_MAX) {
        OPENSSL_cleanse(buf, sizeof buf);
        CR_LOG_ERROR("auth", "cluster key file %s: need %d..%d bytes of secret, found %zu", path,
                     CR__AUTH_KEY_MIN, CR__AUTH_KEY_MAX, n);
        return -EINVAL;
    }
    int rc = auth_new(buf, n, out);
    OPENSSL_cleanse(buf, sizeof buf);
    return rc;
}

int cr__auth_load(const cr__auth_cfg_t *cfg, cr__auth_t **out)
{
    if (!cfg || !out)
        return -EINVAL;
    /* the tls_* fields are common/tls's (cr__tls_load): TLS and the
     * cluster key are independent and may be combined */
    return cr__auth_load_key_file(cfg->cluster_key_file, out);
}

int cr__auth_keygen(const char *path)
{
    uint8_t r[32];
    if (cr__auth_random(r, sizeof r))
        return -EIO;
    char hex[65];
    cr__auth_hex(r, sizeof r, hex);
    OPENSSL_cleanse(r, sizeof r);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return CR__ERRNO();
    hex[64] = '\n';
    int rc = write(fd, hex, 65) == 65 ? 0 : -EIO; /* a fresh small file: one write */
    OPENSSL_cleanse(hex, sizeof hex);
    if (close(fd) && !rc)
        rc = CR__ERRNO();
    return rc;
}

void cr__auth_key_id(const cr__auth_t *a, uint8_t out[CR__AUTH_KEYID_LEN])
{
    memcpy(out, a->key_id, CR__AUTH_KEYID_LEN);
}

void cr__auth_hex(const uint8_t *in, size_t len, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = d[in[i] >> 4];
        out[2 * i + 1] = d[in[i] & 15];
    }
    out[2 * len] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int cr__auth_unhex(const char *in, size_t hexlen, uint8_t *out)
{
    if (hexlen % 2)
        return -EBADMSG;
    for (size_t i = 0; i < hexlen / 2; i++) {
        int hi = hexval(in[2 * i]), lo = hexval(in[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -EBADMSG;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

/* ---- handshake ---------------------------------------------------------- */

size_t cr__auth_msg_len(uint8_t type)
{
    switch (type) {
    case CR__AUTH_HELLO:
        return CR__AUTH_HELLO_LEN;
    case CR__AUTH_CHALLENGE:
        return CR__AUTH_CHALLENGE_LEN;
    case CR__AUTH_PROOF:
        return CR__AUTH_PROOF_LEN;
    case CR__AUTH_RESULT:
        return CR__AUTH_RESULT_LEN;
    default:
        return 0;
    }
}

static void msg_hdr(uint8_t *out, uint8_t type)
{
    cr__put_le(out, CR__AUTH_MAGIC, 4);
    out[4] = CR__AUTH_VERSION;
    out[5] = type;
    cr__put_le(out + 6, 0, 2);
}

int cr__auth_msg_parse(const uint8_t *buf, size_t len, cr__auth_msg_t *m)
{
    if (!buf || len < 8 || cr__get_le(buf, 4) != CR__AUTH_MAGIC || buf[4] != CR__AUTH_VERSION)
        return -EBADMSG;
    size_t want = cr__auth_msg_len(buf[5]);
    if (!want || len != want)
        return -EBADMSG;
    memset(m, 0, sizeof *m);
    m->type = buf[5];
    m->flags = (uint16_t)cr__get_le(buf + 6, 2);
    if (m->flags)
        return -EBADMSG; /* no flags defined in version 1 */
    const uint8_t *p = buf + 8;
    switch (m->type) {
    case CR__AUTH_HELLO:
        memcpy(m->key_id, p, CR__AUTH_KEYID_LEN);
        memcpy(m->nonce, p + 8, CR__AUTH_NONCE_LEN);
        break;
    case CR__AUTH_CHALLENGE:
        memcpy(m->key_id, p, CR__AUTH_KEYID_LEN);
        memcpy(m->nonce, p + 8, CR__AUTH_NONCE_LEN);
        memcpy(m->mac, p + 40, CR__AUTH_MAC_LEN);
        break;
    case CR__AUTH_PROOF:
        memcpy(m->mac, p, CR__AUTH_MAC_LEN);
        break;
    case CR__AUTH_RESULT:
        m->status = (int32_t)(uint32_t)cr__get_le(p, 4);
        if (cr__get_le(p + 4, 4) != 0)
            return -EBADMSG;
        break;
    }
    return 0;
}

static int hs_mac(const cr__auth_t *a, const cr__auth_hs_t *hs, const char *role,
                  uint8_t out[CR__AUTH_MAC_LEN])
{
    const void *parts[] = {role, hs->ctx, hs->nonce_c, hs->nonce_s};
    size_t lens[] = {1, strlen(hs->ctx) + 1, CR__AUTH_NONCE_LEN, CR__AUTH_NONCE_LEN};
    return cr__auth_mac(a, "crescent handshake v1", parts, lens, 4, out);
}

static int hs_set_ctx(cr__auth_hs_t *hs, const char *ctx)
{
    memset(hs, 0, sizeof *hs);
    if (!ctx || strlen(ctx) >= sizeof hs->ctx)
        return -EINVAL;
    strcpy(hs->ctx, ctx);
    return 0;
}

int cr__auth_hs_client_hello(const cr__auth_t *a, cr__auth_hs_t *hs, const char *ctx,
                             uint8_t *out)
{
    if (hs_set_ctx(hs, ctx) || cr__auth_random(hs->nonce_c, CR__AUTH_NONCE_LEN))
        return -EINVAL;
    msg_hdr(out, CR__AUTH_HELLO);
    memcpy(out + 8, a->key_id, CR__AUTH_KEYID_LEN);
    memcpy(out + 16, hs->nonce_c, CR__AUTH_NONCE_LEN);
    hs->step = 1;
    return 0;
}

int cr__auth_hs_server_challenge(const cr__auth_t *a, cr__auth_hs_t *hs, const char *ctx,
                                 const uint8_t *in, size_t len, uint8_t *out)
{
    cr__auth_msg_t m;
    if (hs_set_ctx(hs, ctx))
        return -EINVAL;
    if (cr__auth_msg_parse(in, len, &m) || m.type != CR__AUTH_HELLO)
        return -EBADMSG;
    if (!cr__auth_mac_eq(m.key_id, a->key_id, CR__AUTH_KEYID_LEN))
        return -EACCES;
    memcpy(hs->nonce_c, m.nonce, CR__AUTH_NONCE_LEN);
    if (cr__auth_random(hs->nonce_s, CR__AUTH_NONCE_LEN))
        return -EIO;
    msg_hdr(out, CR__AUTH_CHALLENGE);
    memcpy(out + 8, a->key_id, CR__AUTH_KEYID_LEN);
    memcpy(out + 16, hs->nonce_s, CR__AUTH_NONCE_LEN);
    if (hs_mac(a, hs, "S", out + 48))
        return -EIO;
    hs->step = 2;
    return 0;
}

int cr__auth_hs_client_proof(const cr__auth_t *a, cr__auth_hs_t *hs, const uint8_t *in,
                             size_t len, uint8_t *out)
{
    cr__auth_msg_t m;
    if (hs->step != 1)
        return -EINVAL;
    if (cr__auth_msg_parse(in, len, &m))
        return -EBADMSG;
    if (m.type == CR__AUTH_RESULT)
        return m.status ? -EACCES : -EBADMSG; /* refused before the challenge */
    if (m.type != CR__AUTH_CHALLENGE)
        return -EBADMSG;
    memcpy(hs->nonce_s, m.nonce, CR__AUTH_NONCE_LEN);
    uint8_t want[CR__AUTH_MAC_LEN];
    if (hs_mac(a, hs, "S", want))
        return -EIO;
    if (!cr__auth_mac_eq(want, m.mac, CR__AUTH_MAC_LEN))
        return -EACCES; /* the server does not hold our key */
    msg_hdr(out, CR__AUTH_PROOF);
    if (hs_mac(a, hs, "C", out + 8))
        return -EIO;
    hs->step = 3;
    return 0;
}

int cr__auth_hs_server_verify(const cr__auth_t *a, cr__auth_hs_t *hs, const uint8_t *in,
                              size_t len)
{
    cr__auth_msg_t m;
    if (hs->step != 2)
        return -EINVAL;
    if (cr__auth_msg_parse(in, len, &m) || m.type != CR__AUTH_PROOF)
        return -EBADMSG;
    uint8_t want[CR__AUTH_MAC_LEN];
    if (hs_mac(a, hs, "C", want))
        return -EIO;
    if (!cr__auth_mac_eq(want, m.mac, CR__AUTH_MAC_LEN))
        return -EACCES;
    hs->step = 4;
    return 0;
}

void cr__auth_hs_result(int32_t status, uint8_t *out)
{
    msg_hdr(out, CR__AUTH_RESULT);
    cr__put_le(out + 8, (uint32_t)status, 4);
    cr__put_le(out + 12, 0, 4);
}

/* Reads one message: the 8-byte header first (its type gives the length). */
static int read_msg(int fd, uint8_t *buf, size_t *len, int timeout_ms)
{
    int rc = cr__net_read_full(fd, buf, 8, timeout_ms);
    if (rc)
        return rc;
    if (cr__get_le(buf, 4) != CR__AUTH_MAGIC)
        return -EBADMSG;
    size_t want = cr__auth_msg_len(buf[5]);
    if (!want)
        return -EBADMSG;
    rc = cr__net_read_full(fd, buf + 8, want - 8, timeout_ms);
    if (rc)
        return rc;
    *len = want;
    return 0;
}

int cr__auth_client_fd(const cr__auth_t *a, int fd, const char *ctx, int timeout_ms)
{
    cr__auth_hs_t hs;
    uint8_t out[CR__AUTH_MSG_MAX], in[CR__AUTH_MSG_MAX];
    size_t n;
    int rc = cr__auth_hs_client_hello(a, &hs, ctx, out);
    if (rc || (rc = cr__net_write_full(fd, out, CR__AUTH_HELLO_LEN, timeout_ms)) ||
        (rc = read_msg(fd, in, &n, timeout_ms)) ||
        (rc = cr__auth_hs_client_proof(a, &hs, in, n, out)) ||
        (rc = cr__net_write_full(fd, out, CR__AUTH_PROOF_LEN, timeout_ms)) ||
        (rc = read_msg(fd, in, &n, timeout_ms)))
        return rc;
    cr__auth_msg_t m;
    if (cr__auth_msg_parse(in, n, &m) || m.type != CR__AUTH_RESULT)
        return -EBADMSG;
    return m.status ? -EACCES : 0;
}

int cr__auth_server_fd(const cr__auth_t *a, int fd, const char *ctx, int timeout_ms)
{
    cr__auth_hs_t hs;
    uint8_t out[CR__AUTH_MSG_MAX], in[CR__AUTH_MSG_MAX];
    size_t n;
    int rc = read_msg(fd, in, &n, timeout_ms);
    if (rc)
        return rc;
    rc = cr__auth_hs_server_challenge(a, &hs, ctx, in, n, out);
    if (rc) {
        cr__auth_hs_result(rc, out);
        cr__net_write_full(fd, out, CR__AUTH_RESULT_LEN, timeout_ms);
        return rc;
    }
    if ((rc = cr__net_write_full(fd, out, CR__AUTH_CHALLENGE_LEN, timeout_ms)) ||
        (rc = read_msg(fd, in, &n, timeout_ms)))
        return rc;
    rc = cr__auth_hs_server_verify(a, &hs, in, n);
    cr__auth_hs_result(rc, out);
    int wrc = cr__net_write_full(fd, out, CR__AUTH_RESULT_LEN, timeout_ms);
    return rc ? rc : wrc;
}

/* ---- HTTP --------------------------------------------------------------- */

static const char *http_target(const char *t)
{
    const char *s = strstr(t, "://");
    if (!s)
        return t;
    s = strchr(s + 3, '/');
    return s ? s : "/";
}

static int http_mac(const cr__auth_t *a, const char *method, const char *target,
                    const void *body, size_t len, uint64_t ts, const uint8_t nonce[16],
                    uint8_t out[CR__AUTH_MAC_LEN])
{
    uint8_t h[SHA256_DIGEST_LENGTH];
    if (!SHA256(body ? body : (const void *)"", len, h))
        return -EIO;
    uint8_t tsb[8];
    cr__put_le(tsb, ts, 8);
    const void *parts[] = {method, target, tsb, nonce, h};
    size_t lens[] = {strlen(method) + 1, strlen(target) + 1, 8, 16, sizeof h};
    return cr__auth_mac(a, "crescent http v1", parts, lens, 5, out);
}

int cr__auth_http_sign(const cr__auth_t *a, const char *method, const char *target,
                       const void *body, size_t len, char out[CR__AUTH_HTTP_MAX])
{
    uint8_t nonce[16];
    if (cr__auth_random(nonce, sizeof nonce))
        return -EIO;
    return cr__auth_http_sign_at(a, method, target, body, len, (uint64_t)time(NULL), nonce, out);
}

int cr__auth_http_sign_at(const cr__auth_t *a, const char *method, const char *target,
                          const void *body, size_t len, uint64_t ts, const uint8_t nonce[16],
                          char out[CR__AUTH_HTTP_MAX])
{
    if (!a || !method || !target)
        return -EINVAL;
    target = http_target(target);
    uint8_t mac[CR__AUTH_MAC_LEN];
    if (http_mac(a, method, target, body, len, ts, nonce, mac))
        return -EIO;
    char nh[33], mh[65];
    cr__auth_hex(nonce, 16, nh);
    cr__auth_hex(mac, CR__AUTH_MAC_LEN, mh);
    int n = snprintf(out, CR__AUTH_HTTP_MAX, "v1:%llu:%s:%s", (unsigned long long)ts, nh, mh);
    return n > 0 && n < CR__AUTH_HTTP_MAX ? 0 : -EINVAL;
}

int cr__auth_http_parse(const char *hdr, uint64_t *ts, uint8_t nonce[16],
                        uint8_t mac[CR__AUTH_MAC_LEN])
{
    if (!hdr || strncmp(hdr, "v1:", 3) != 0)
        return -EBADMSG;
    const char *p = hdr + 3;
    uint64_t v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (++digits > 12)
            return -EBADMSG;
        v = v * 10 + (uint64_t)(*p++ - '0');
    }
    if (!digits || *p++ != ':')
        return -EBADMSG;
    if (strnlen(p, 33) < 33 || p[32] != ':' || cr__auth_unhex(p, 32, nonce))
        return -EBADMSG;
    p += 33;
    if (strlen(p) != 2 * CR__AUTH_MAC_LEN || cr__auth_unhex(p, 2 * CR__AUTH_MAC_LEN, mac))
        return -EBADMSG;
    *ts = v;
    return 0;
}

/* Remembers the nonce of a request signed at ts (inside the window).
 * Returns 0 (new, remembered), 1 (seen inside the window: a replay) or
 * -EBUSY (no room to remember it: refused, the client may retry). A slot is
 * reused only once its request's time has left the window, when the window
 * check alone refuses a replay of it. */
static int replay_seen(cr__auth_t *a, const uint8_t nonce[16], uint64_t ts, uint64_t now_s)
{
    uint64_t h;
    memcpy(&h, nonce, sizeof h);
    size_t base = (size_t)h & (REPLAY_SLOTS - 1);
    replay_slot_t *free_slot = NULL;
    int rc = 0;
    pthread_mutex_lock(&a->replay_mu);
    for (size_t i = 0; i < REPLAY_PROBE; i++) {
        replay_slot_t *s = &a->replay[(base + i) & (REPLAY_SLOTS - 1)];
        if (s->ts && s->ts + CR__AUTH_HTTP_WINDOW_S < now_s)
            s->ts = 0; /* expired: its request is refused by the window now */
        if (s->ts && memcmp(s->nonce, nonce, 16) == 0) {
            rc = 1;
            goto out;
        }
        if (!s->ts && !free_slot)
            free_slot = s;
    }
    if (!free_slot) {
        rc = -EBUSY;
        goto out;
    }
    memcpy(free_slot->nonce, nonce, 16);
    free_slot->ts = ts ? ts : 1;
out:
    pthread_mutex_unlock(&a->replay_mu);
    return rc;
}

int cr__auth_http_verify(cr__auth_t *a, const char *hdr, const char *method, const char *target,
                         const void *body, size_t len, uint64_t now_s)
{
    if (!hdr)
        return -EACCES;
    uint64_t ts;
    uint8_t nonce[16], mac[CR__AUTH_MAC_LEN], want[CR__AUTH_MAC_LEN];
    if (cr__auth_http_parse(hdr, &ts, nonce, mac))
        return -EBADMSG;
    if (ts + CR__AUTH_HTTP_WINDOW_S < now_s || ts > now_s + CR__AUTH_HTTP_WINDOW_S)
        return -EACCES;
    if (http_mac(a, method, http_target(target), body, len, ts, nonce, want))
        return -EIO;
    if (!cr__auth_mac_eq(want, mac, CR__AUTH_MAC_LEN))
        return -EACCES;
    int seen = replay_seen(a, nonce, ts, now_s);
    if (seen < 0) {
        CR_LOG_RL(CR__LOG_WARN, "auth", "HTTP replay cache full: refusing a signed request "
                  "(busy, retry)");
        return seen;
    }
    return seen ? -EACCES : 0;
}

/* ---- listeners ---------------------------------------------------------- */

int cr__auth_warn_open(const cr__auth_t *a, const char *what, const char *host)
{
    if (a)
        return 0;
    int loopback = 0;
    if (host && *host) {
        struct in_addr v4;
        struct in6_addr v6;
        if (inet_pton(AF_INET, host, &v4) == 1)
            loopback = (ntohl(v4.s_addr) >> 24) == 127;
        else if (inet_pton(AF_INET6, host, &v6) == 1)
            loopback = IN6_IS_ADDR_LOOPBACK(&v6);
        else
            loopback = strcmp(host, "localhost") == 0;
    }
    if (loopback)
        return 0;
    CR_LOG_ERROR("security",
                 "WARNING: %s listens on %s WITHOUT CREDENTIALS: anyone who can reach it can "
                 "read, overwrite or remove cluster data. Set --cluster_key_file (or %s) on "
                 "every member, or bind to 127.0.0.1 (docs/security.md)",
                 what, host && *host ? host : "all addresses", CR__AUTH_ENV_KEY_FILE);
    return 1;
}

const char *cr__auth_mode_line(int key, int tls)
{
    if (tls)
        return key ? "security: TLS on (mutual certificates), cluster key on"
                   : "security: TLS on (mutual certificates), no cluster key";
    return key ? "security: cluster key on, no TLS" : "security: none (no cluster key, no TLS)";
}
