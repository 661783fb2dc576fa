/* Per-object capabilities (cap.h). */
#include "common/auth/cap.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <string.h>

#include "common/bytes.h"

#define SIGNED_LEN 48
#define LABEL "crescent cap v1"

_Static_assert(CR__CAP_LEN == SIGNED_LEN + 32, "capability is 48 signed bytes + a 32-byte MAC");

/* OpenSSL 3's one-shot HMAC() fetches the algorithm and builds a context
 * per call (~10 us here); a capability is minted per shard on the master
 * and verified per grant on a node, so each thread keeps one HMAC context
 * (freed when the thread exits) and only re-keys it: ~5x cheaper
 * (bench/security/cap_cost.c). */
static pthread_once_t mac_once = PTHREAD_ONCE_INIT;
static EVP_MAC *mac_alg;
static pthread_key_t mac_tls;
static int mac_ready;

static void mac_ctx_free(void *c) { EVP_MAC_CTX_free(c); }

static void mac_init(void)
{
    mac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
    mac_ready = mac_alg && !pthread_key_create(&mac_tls, mac_ctx_free);
}

static EVP_MAC_CTX *mac_ctx(void)
{
    pthread_once(&mac_once, mac_init);
    if (!mac_ready)
        return NULL;
    EVP_MAC_CTX *c = pthread_getspecific(mac_tls);
    if (!c && (c = EVP_MAC_CTX_new(mac_alg)) != NULL && pthread_setspecific(mac_tls, c)) {
        EVP_MAC_CTX_free(c);
        c = NULL;
    }
    return c;
}

static int cap_mac(const uint8_t key[CR__CAP_KEY_LEN], const uint8_t *signed_bytes,
                   uint8_t out[32])
{
    uint8_t buf[sizeof LABEL + SIGNED_LEN];
    memcpy(buf, LABEL, sizeof LABEL); /* with its NUL */
    memcpy(buf + sizeof LABEL, signed_bytes, SIGNED_LEN);
    EVP_MAC_CTX *c = mac_ctx();
    if (c) {
        OSSL_PARAM p[2] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                           OSSL_PARAM_construct_end()};
        size_t ol = 0;
        return EVP_MAC_init(c, key, CR__CAP_KEY_LEN, p) == 1 &&
                       EVP_MAC_update(c, buf, sizeof buf) == 1 &&
                       EVP_MAC_final(c, out, &ol, 32) == 1 && ol == 32
                   ? 0
                   : -EIO;
    }
    unsigned olen = 0; /* no per-thread context: the one-shot call */
    return HMAC(EVP_sha256(), key, CR__CAP_KEY_LEN, buf, sizeof buf, out, &olen) && olen == 32
               ? 0
               : -EIO;
}

static int range_ok(uint64_t addr, uint64_t len) { return len && addr + len > addr; }

int cr__cap_mint(const uint8_t key[CR__CAP_KEY_LEN], uint8_t ops, uint64_t seg_id,
                 uint32_t epoch, uint64_t addr, uint64_t len, uint64_t expiry_ms,
                 uint8_t out[CR__CAP_LEN])
{
    if (!ops || (ops & ~(CR__CAP_READ | CR__CAP_WRITE)) || !range_ok(addr, len))
        return -EINVAL;
    memset(out, 0, CR__CAP_LEN);
    cr__put_le(out, CR__CAP_MAGIC, 4);
    out[4] = CR__CAP_VERSION;
    out[5] = ops;
    cr__put_le(out + 8, seg_id, 8);
    cr__put_le(out + 16, addr, 8);
    cr__put_le(out + 24, len, 8);
    cr__put_le(out + 32, expiry_ms, 8);
    cr__put_le(out + 40, epoch, 4);
    return cap_mac(key, out, out + SIGNED_LEN);
}

int cr__cap_parse(const uint8_t *buf, size_t len, cr__cap_t *out)
{
    if (!buf || len != CR__CAP_LEN || cr__get_le(buf, 4) != CR__CAP_MAGIC ||
        buf[4] != CR__CAP_VERSION || !buf[5] || (buf[5] & ~(CR__CAP_READ | CR__CAP_WRITE)) ||
        cr__get_le(buf + 6, 2) || cr__get_le(buf + 44, 4))
        return -EBADMSG;
    cr__cap_t c = {
        .ops = buf[5],
        .seg_id = cr__get_le(buf + 8, 8),
        .epoch = (uint32_t)cr__get_le(buf + 40, 4),
        .addr = cr__get_le(buf + 16, 8),
        .len = cr__get_le(buf + 24, 8),
        .expiry_ms = cr__get_le(buf + 32, 8),
    };
    if (!range_ok(c.addr, c.len))
        return -EBADMSG;
    memcpy(c.mac, buf + SIGNED_LEN, 32);
    *out = c;
    return 0;
}

int cr__cap_verify(const uint8_t key[CR__CAP_KEY_LEN], uint64_t seg_id, const uint8_t *buf,
                   size_t len, uint64_t now_ms, cr__cap_t *out)
{
    cr__cap_t c;
    if (cr__cap_parse(buf, len, &c))
        return -EBADMSG;
    uint8_t mac[32];
    if (cap_mac(key, buf, mac) || CRYPTO_memcmp(mac, c.mac, 32))
        return -EACCES;
    if (c.seg_id != seg_id || c.expiry_ms <= now_ms ||
        c.expiry_ms - now_ms > CR__CAP_TTL_MAX_MS)
        return -EACCES;
    *out = c;
    return 0;
}

int cr__cap_covers(const cr__cap_t *c, uint8_t op, uint64_t addr, uint64_t len, uint64_t now_ms)
{
    return (c->ops & op) == op && op && c->expiry_ms > now_ms && range_ok(addr, len) &&
           addr >= c->addr && addr + len <= c->addr + c->len;
}

void cr__cap_table_add(cr__cap_table_t *t, const cr__cap_t *c)
{
    if (t->n < CR__CAP_TABLE_SLOTS) {
        t->g[t->n++] = *c;
        return;
    }
    unsigned victim = 0;
    for (unsigned i = 1; i < t->n; i++)
        if (t->g[i].expiry_ms < t->g[victim].expiry_ms)
            victim = i;
    t->g[victim] = *c;
}

int cr__cap_table_allows(const cr__cap_table_t *t, uint8_t op, uint64_t addr, uint64_t len,
                         uint64_t now_ms)
{
    for (unsigned i = 0; i < t->n; i++)
        if (cr__cap_covers(&t->g[i], op, addr, len, now_ms))
            return 1;
    return 0;
}
