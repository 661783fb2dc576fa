/* Store master: defaults, create/destroy and the periodic tick (master.h).
 * The state is split by job over the files listed in master_priv.h. */
#include "store/master/master_priv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"

void cr__master_cfg_default(cr__master_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    c->lease_ttl_ms = CR__MASTER_DEFAULT_LEASE_TTL_MS;
    c->soft_pin_ttl_ms = CR__MASTER_DEFAULT_SOFT_PIN_TTL_MS;
    c->client_ttl_ms = CR__MASTER_DEFAULT_CLIENT_TTL_MS;
    c->put_timeout_ms = CR__MASTER_DEFAULT_PUT_TIMEOUT_MS;
    c->high_watermark = 0.90;
    c->eviction_ratio = 0.05;
    c->evict_max_visit = CR__MASTER_DEFAULT_EVICT_MAX_VISIT;
    c->granule_shift = CR__MASTER_DEFAULT_GRANULE_SHIFT;
    c->min_stripe = CR__MASTER_DEFAULT_MIN_STRIPE;
    c->evict_soft_pinned = 1;
    c->offload_watermark = 0.70;
    c->ssd_high_watermark = 0.95;
    c->max_clients = CR__MASTER_DEFAULT_MAX_CLIENTS;
    c->max_segments = CR__MASTER_DEFAULT_MAX_SEGMENTS;
    c->max_objects = 16u << 20;
    c->max_key_bytes = 2ull << 30;
}

int cr__master_create(const cr__master_cfg_t *cfg, cr__master_t **out)
{
    if (!cfg || !out || cfg->granule_shift < 6 || cfg->granule_shift > 30 ||
        cfg->high_watermark <= 0 || cfg->high_watermark > 1 || cfg->eviction_ratio < 0 ||
        cfg->eviction_ratio > 1)
        return -EINVAL;
    cr__master_t *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    pthread_mutex_init(&m->mu, NULL);
    m->cfg = *cfg;
    if (!m->cfg.evict_max_visit)
        m->cfg.evict_max_visit = CR__MASTER_DEFAULT_EVICT_MAX_VISIT;
    if (!m->cfg.max_clients)
        m->cfg.max_clients = CR__MASTER_DEFAULT_MAX_CLIENTS;
    if (!m->cfg.max_segments)
        m->cfg.max_segments = CR__MASTER_DEFAULT_MAX_SEGMENTS;
    m->ev = (cr__evict_cfg_t){.high_watermark = cfg->high_watermark,
                              .ratio = cfg->eviction_ratio,
                              .max_visit = m->cfg.evict_max_visit};
    /* realtime ms << 16: 65536 versions per ms of uptime before a restarted
     * master could catch up with an old version (puts run at ~1 M/s), and
     * version << 3 fits in 64 bits until the year 2500 */
    m->master_id = cr__unix_ms() << 16;
    m->next_version = m->master_id;
    m->resv_on = 1;
    m->held_ranges_max = HELD_RANGES_MAX;
    list_init(&m->lru);
    list_init(&m->pending);
    list_init(&m->ssd_lru);
    list_init(&m->fs_lru);
    if (cr__m_map_grow(m)) {
        free(m);
        return -ENOMEM;
    }
    *out = m;
    return 0;
}

void cr__master_destroy(cr__master_t *m)
{
    if (!m)
        return;
    for (uint64_t i = 0; i < m->cap; i++)
        free(m->slots[i]);
    free(m->slots);
    free(m->tags);
    for (uint32_t i = 0; i < m->n_segs; i++)
        cr__oalloc_destroy(m->segs[i].alloc);
    free(m->segs);
    free(m->clients);
    free(m->q);
    cr__m_held_free(m);
    free(m->order);
    cr__ha_buf_free(&m->jbuf);
    cr__m_tier_destroy(m);
    cr__m_fs_destroy(m);
    cr__m_rtask_destroy(m);
    cr__m_resv_destroy(m);
    cr__m_caps_free(m);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

uint64_t cr__master_id(const cr__master_t *m) { return m->master_id; }

void cr__master_tick(cr__master_t *m, uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    cr__m_quarantine_release(m, now, CR__MASTER_TICK_RELEASE_MAX);
    cr__m_expire_clients_locked(m, now);
    for (int k = 0; k < CR__MASTER_TICK_RECLAIM_MAX && m->pending.next != &m->pending; k++) {
        obj_t *o = m->pending.next;
        if (o->until_ms > now)
            break;
        CNT(m, puts_timed_out_total)++;
        CR_LOG_INFO("master", "put of '%.*s' not ended by its deadline: reclaimed",
                    o->key_len > 64 ? 64 : (int)o->key_len, obj_key(o));
        cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
    }
    cr__m_tier_tick(m, now);
    cr__m_rtask_tick(m, now);
    cr__m_resv_tick(m, now);
    if (cr__evict_over_watermark(&m->ev, m_used(m), m->capacity))
        cr__m_evict_locked(m, 0, NULL, now);
    pthread_mutex_unlock(&m->mu);
}
