/* Per-object capabilities: the engine's key, epoch floor and the serving
 * check (capability.h, transport.h). Transport-neutral: a transport's
 * serving side calls cr__xfer_cap_check before it touches memory. */
#include "transfer/capability.h"
#include "common/clock.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "transfer/xfer_internal.h"

#define LOGC "xfer-cap"

void cr__xfer_cap_epoch_seen(cr_xfer_engine_t *e, uint32_t epoch)
{
    unsigned cur = atomic_load(&e->cap_floor);
    while (epoch > cur && !atomic_compare_exchange_weak(&e->cap_floor, &cur, epoch))
        ;
}

void cr__xfer_cap_key_set(cr_xfer_engine_t *e, const uint8_t key[CR__CAP_KEY_LEN],
                          uint64_t seg_id, uint32_t epoch)
{
    pthread_mutex_lock(&e->cap_mu);
    memcpy(e->cap_key, key, CR__CAP_KEY_LEN);
    e->cap_seg = seg_id;
    atomic_fetch_add(&e->cap_gen, 1); /* cached verifications of the old key die */
    pthread_mutex_unlock(&e->cap_mu);
    cr__xfer_cap_epoch_seen(e, epoch);
    atomic_store(&e->cap_on, 1);
}

int cr__xfer_cap_deny_all(cr_xfer_engine_t *e)
{
    uint8_t k[CR__CAP_KEY_LEN];
    if (RAND_bytes(k, sizeof k) != 1)
        return -EIO;
    cr__xfer_cap_key_set(e, k, 0, 0);
    OPENSSL_cleanse(k, sizeof k);
    return 0;
}

int cr__xfer_cap_enforced(cr_xfer_engine_t *e) { return atomic_load(&e->cap_on); }

void cr__xfer_cap_disable(cr_xfer_engine_t *e) { atomic_store(&e->cap_on, 0); }

uint64_t cr__xfer_cap_refused(cr_xfer_engine_t *e) { return atomic_load(&e->cap_refused); }

static int refuse(cr_xfer_engine_t *e, const char *why, int write, uint64_t addr, uint64_t len)
{
    atomic_fetch_add(&e->cap_refused, 1);
    CR_LOG_RL(CR__LOG_WARN, LOGC, "refused %s 0x%llx+%llu: %s", write ? "WRITE" : "READ",
              (unsigned long long)addr, (unsigned long long)len, why);
    return -EACCES;
}

int cr__xfer_cap_check(cr_xfer_engine_t *e, cr__xfer_cap_cache_t *cc, const uint8_t *cap,
                       int write, uint64_t addr, uint64_t len)
{
    if (!atomic_load_explicit(&e->cap_on, memory_order_acquire))
        return 0; /* unchecked: documented (security off, or no store segment) */
    if (!cap)
        return refuse(e, "no capability", write, addr, len);
    uint64_t now = cr__unix_ms();
    unsigned gen = atomic_load(&e->cap_gen);
    const cr__cap_t *g = NULL;
    for (unsigned i = 0; i < CR__XFER_CAP_CACHE && !g; i++)
        if (cc->e[i].gen == gen && !memcmp(cc->e[i].raw, cap, CR__CAP_LEN))
            g = &cc->e[i].cap;
    if (!g) {
        uint8_t key[CR__CAP_KEY_LEN];
        pthread_mutex_lock(&e->cap_mu);
        memcpy(key, e->cap_key, sizeof key);
        uint64_t seg = e->cap_seg;
        gen = atomic_load(&e->cap_gen);
        pthread_mutex_unlock(&e->cap_mu);
        cr__cap_t c;
        int rc = cr__cap_verify(key, seg, cap, CR__CAP_LEN, now, &c);
        OPENSSL_cleanse(key, sizeof key);
        if (rc)
            return refuse(e, rc == -EBADMSG ? "malformed capability"
                                            : "capability not genuine, of another segment or expired",
                          write, addr, len);
        unsigned slot = cc->next++ % CR__XFER_CAP_CACHE;
        memcpy(cc->e[slot].raw, cap, CR__CAP_LEN);
        cc->e[slot].cap = c;
        cc->e[slot].gen = gen;
        g = &cc->e[slot].cap;
    }
    if (g->epoch < atomic_load(&e->cap_floor))
        return refuse(e, "capability of an older master epoch", write, addr, len);
    if (!cr__cap_covers(g, write ? CR__CAP_WRITE : CR__CAP_READ, addr, len, now))
        return refuse(e, "capability does not cover the access (range, mode or expiry)", write,
                      addr, len);
    return 0;
}
