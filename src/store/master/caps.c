/* Per-object capabilities, the master's side (docs/security.md,
 * "Capabilities"): a capability key per mounted segment, handed to its
 * owner in the MountSegment reply, and a capability minted per shard of
 * every replica list the master hands out — WRITE for a put's fresh space
 * (PutStart), READ for a get (GetReplicaList), READ on the source and
 * WRITE on the new replicas of a copy/move task (RTASK_START). The node
 * serving the segment checks them (transfer/capability.c).
 *
 * Keys: one per client (its TE engine serves every segment it mounts:
 * the contributed one and extra ones), key = HMAC-SHA256(secret, "crescent
 * cap key v1\0" client_id), with a secret of 32 random bytes drawn when
 * capabilities are turned on (never leaves this process); the grant's
 * seg_id field carries client_id.lo (which key). Grants name absolute
 * addresses of that client's process, so one key for all its segments
 * confines as tightly as one per segment. A restarted master or
 * a new leader has another secret: its nodes remount on seeing another
 * master_id and get the new key; capabilities of the old master no longer
 * verify, and those of an older epoch are refused in any case.
 *
 * Off (no cluster key) the master mints nothing and nodes check nothing. */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "common/auth/cap.h"
#include "common/clock.h"
#include "store/master/master_priv.h"

#define KEY_LABEL "crescent cap key v1"
#define CAP_MIN_TTL_MS 10000u       /* clock skew and slow transfers: a grant lives this long at least */
/* copy/move tasks move whole objects; a task not ended by its deadline
 * (START + this) fails and its targets are held that long again (rtask.c),
 * an ended one's object is stamped with it (obj_wcap_until) */
#define CAP_TASK_TTL_MS CR__M_RTASK_TIMEOUT_MS
/* an object's grant stamp (master_priv.h) covers any grant a node accepts */
_Static_assert((uint64_t)WCAP_WINDOW_S * 1000 > CR__CAP_TTL_MAX_MS + 1000, "grant stamp window");
_Static_assert(CR__RPC_CAP_LEN == CR__CAP_LEN, "the wire carries exactly one capability");

typedef struct capkey {
    cr__rpc_client_id_t owner; /* whose key (cache tag) */
    int valid;
    uint64_t seg_id;           /* the key's id in grants: owner.lo */
    uint8_t key[CR__CAP_KEY_LEN];
} capkey_t;

struct cr__mcaps {
    uint8_t secret[32];
    _Atomic uint32_t epoch; /* the leader epoch minted into capabilities (0: no HA) */
    capkey_t *keys;         /* by segment index, guarded by m->mu */
    uint32_t n_keys;
};

int cr__master_caps_enable(cr__master_t *m)
{
    struct cr__mcaps *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    if (RAND_bytes(c->secret, sizeof c->secret) != 1) {
        free(c);
        return -EIO;
    }
    pthread_mutex_lock(&m->mu);
    if (m->caps) { /* already on */
        pthread_mutex_unlock(&m->mu);
        OPENSSL_cleanse(c->secret, sizeof c->secret);
        free(c);
        return 0;
    }
    m->caps = c;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

void cr__master_caps_epoch(cr__master_t *m, uint32_t epoch)
{
    pthread_mutex_lock(&m->mu);
    if (m->caps)
        atomic_store(&m->caps->epoch, epoch);
    pthread_mutex_unlock(&m->mu);
}

void cr__m_caps_free(cr__master_t *m)
{
    if (!m->caps)
        return;
    OPENSSL_cleanse(m->caps->secret, sizeof m->caps->secret);
    if (m->caps->keys)
        OPENSSL_cleanse(m->caps->keys, m->caps->n_keys * sizeof *m->caps->keys);
    free(m->caps->keys);
    free(m->caps);
    m->caps = NULL;
}

/* The key of live segment s (derived once per mount). NULL on -ENOMEM. */
static const capkey_t *key_of_locked(cr__master_t *m, uint32_t s)
{
    struct cr__mcaps *c = m->caps;
    if (s >= c->n_keys) {
        uint32_t n = m->cap_segs > s ? m->cap_segs : s + 1;
        capkey_t *k = realloc(c->keys, n * sizeof *k);
        if (!k)
            return NULL;
        memset(k + c->n_keys, 0, (n - c->n_keys) * sizeof *k);
        c->keys = k;
        c->n_keys = n;
    }
    seg_t *sg = &m->segs[s];
    /* the owner: the mounting client, or a restored segment's recorded owner */
    cr__rpc_client_id_t owner = sg->client != NONE32 ? m->clients[sg->client].id : sg->owner;
    capkey_t *k = &c->keys[s];
    if (!k->valid || k->owner.hi != owner.hi || k->owner.lo != owner.lo) {
        uint8_t msg[sizeof KEY_LABEL + 16];
        memcpy(msg, KEY_LABEL, sizeof KEY_LABEL); /* with its NUL */
        for (int i = 0; i < 8; i++) {
            msg[sizeof KEY_LABEL + i] = (uint8_t)(owner.hi >> (8 * i));
            msg[sizeof KEY_LABEL + 8 + i] = (uint8_t)(owner.lo >> (8 * i));
        }
        unsigned ol = 0;
        k->valid = 0;
        if (!HMAC(EVP_sha256(), c->secret, sizeof c->secret, msg, sizeof msg, k->key, &ol) ||
            ol != CR__CAP_KEY_LEN)
            return NULL;
        k->owner = owner;
        k->seg_id = owner.lo;
        k->valid = 1;
    }
    return k;
}

int cr__m_caps_mount_reply_locked(cr__master_t *m, const char *name, cr__rpc_msg_t *reply)
{
    if (!m->caps)
        return 0;
    uint32_t s = cr__m_seg_find(m, name);
    if (s == NONE32)
        return CR_E_SEGMENT_NOT_FOUND;
    const capkey_t *k = key_of_locked(m, s);
    uint8_t *b = cr__rpc_msg_alloc(reply, 8 + CR__CAP_KEY_LEN + 8);
    if (!k || !b)
        return -ENOMEM;
    for (int i = 0; i < 8; i++) {
        b[i] = (uint8_t)(k->seg_id >> (8 * i));
        b[8 + CR__CAP_KEY_LEN + i] = (uint8_t)(m->master_id >> (8 * i));
    }
    memcpy(b + 8, k->key, CR__CAP_KEY_LEN);
    reply->blob = b;
    reply->blob_len = 8 + CR__CAP_KEY_LEN + 8;
    reply->epoch = atomic_load(&m->caps->epoch);
    return 0;
}

/* Mints a capability for every shard of it's replicas on a DRAM segment. */
static int mint_item_locked(cr__master_t *m, cr__rpc_msg_t *reply, cr__rpc_item_t *it,
                            uint8_t ops, uint32_t ttl_ms, uint64_t now)
{
    uint32_t epoch = atomic_load(&m->caps->epoch);
    for (uint32_t r = 0; r < it->n_replicas; r++)
        for (uint32_t k = 0; k < it->replicas[r].n_shards; k++) {
            cr__rpc_shard_t *sh = &it->replicas[r].shards[k];
            uint32_t s = sh->segment ? cr__m_seg_find(m, sh->segment) : NONE32;
            if (s == NONE32 || m->segs[s].tier || sh->len == 0)
                continue; /* disk-tier replicas are read through the tier server */
            const capkey_t *key = key_of_locked(m, s);
            uint8_t *cap = cr__rpc_msg_alloc(reply, CR__CAP_LEN);
            if (!key || !cap ||
                cr__cap_mint(key->key, ops, key->seg_id, epoch, sh->addr, sh->len, now + ttl_ms,
                             cap))
                return -ENOMEM;
            sh->cap = cap;
        }
    return 0;
}

static uint32_t ttl_of(uint32_t lease_ms)
{
    uint32_t t = lease_ms < CAP_MIN_TTL_MS ? CAP_MIN_TTL_MS : lease_ms;
    return t > CR__CAP_TTL_MAX_MS / 2 ? CR__CAP_TTL_MAX_MS / 2 : t;
}

uint64_t cr__m_caps_ttl_ms(const cr__master_t *m, uint32_t lease_ms)
{
    return m->caps ? ttl_of(lease_ms) : 0;
}

int cr__m_caps_mint_locked(cr__master_t *m, uint16_t type, cr__rpc_msg_t *reply)
{
    if (!m->caps || reply->status)
        return 0;
    uint16_t bt = type & (uint16_t)~CR__RPC_REPLY;
    if (bt >= CR__RPC_BATCH_PUT_START && bt <= CR__RPC_BATCH_VALIDATE)
        bt = (uint16_t)(bt - CR__RPC_BATCH_OFFSET);
    uint64_t now = cr__unix_ms();
    int rc = 0;
    for (uint32_t i = 0; i < reply->n_items && !rc; i++) {
        cr__rpc_item_t *it = &reply->items[i];
        if (it->status || !it->n_replicas)
            continue;
        switch (bt) {
        case CR__RPC_PUT_START:
            rc = mint_item_locked(m, reply, it, CR__CAP_WRITE, ttl_of(it->lease_ms), now);
            break;
        case CR__RPC_GET_REPLICA_LIST:
            rc = mint_item_locked(m, reply, it, CR__CAP_READ, ttl_of(it->lease_ms), now);
            break;
        case CR__RPC_RESERVE: /* the whole range, for the reservation's lease */
            rc = mint_item_locked(m, reply, it, CR__CAP_WRITE, ttl_of((uint32_t)reply->count),
                                  now);
            break;
        case CR__RPC_RTASK_START: /* items[0]: the source; then the new replicas */
            rc = mint_item_locked(m, reply, it, i == 0 ? CR__CAP_READ : CR__CAP_WRITE,
                                  CAP_TASK_TTL_MS, now);
            break;
        default:
            return 0;
        }
    }
    return rc;
}
