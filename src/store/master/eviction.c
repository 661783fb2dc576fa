/* Master eviction glue: walks the LRU with the verdicts and step sizes of
 * store/eviction/policy.h (master_priv.h). */
#include "store/master/master_priv.h"

#include <inttypes.h>

#include "common/log.h"

static cr__evict_verdict_t verdict(cr__master_t *m, obj_t *o, uint64_t now)
{
    cr__evict_view_t v = {
        .complete = (o->flags & OF_COMPLETE) != 0,
        .hard_pinned = (o->flags & OF_HARD_PIN) != 0,
        .soft_pinned = (o->flags & OF_SOFT_PIN) && (uint64_t)o->pin_until_s * 1000 > now,
        /* a live WRITE grant holds the space like a lease (space.c) */
        .lease_until_ms = o->until_ms > obj_wcap_ms(o, now) ? o->until_ms : obj_wcap_ms(o, now),
    };
    (void)m;
    if (o->fs_until_s && (uint64_t)o->fs_until_s * 1000 > now)
        return CR__EVICT_SKIP; /* its shared-FS file is being written (fs.c) */
    return cr__evict_classify(&v, now);
}

/* Evicts o: its DRAM copies dropped (a shared-FS file or the disk tier
 * keeps it) or the object deleted. Returns 1 if done, with *bytes the DRAM
 * bytes freed; 0 if o is skipped for now (being offloaded). */
static int evict_one(cr__master_t *m, obj_t *o, uint64_t now, uint64_t *bytes)
{
    *bytes = 0;
    if (o->flags & OF_FS) {
        /* its shared-FS file keeps it: drop the DRAM copies only (fs.c) */
        *bytes = cr__m_fs_drop(m, o, NONE32, now);
        CNT(m, evicted_bytes_total) += *bytes;
        return 1;
    }
    if (m->tier) {
        /* a disk tier: demote objects it holds, skip the ones being
         * offloaded (puts wait for it), evict the rest */
        int t = cr__m_tier_evict_candidate(m, o, now, bytes);
        if (t)
            return t == 1;
    }
    *bytes = cr__m_obj_bytes(m, o);
    cr__m_obj_delete(m, o, 0, now);
    CNT(m, evicted_bytes_total) += *bytes;
    return 1;
}

/* A step that evicted nothing for room outside ex stays futile like one
 * without (struct cr__master), for the same segments only. */
static uint64_t excl_key(const excl_t *ex)
{
    return XXH3_64bits(ex->seg, ex->n * sizeof ex->seg[0]);
}

uint64_t cr__m_evict_locked(cr__master_t *m, uint64_t need, const excl_t *ex, uint64_t now)
{
    if (ex && !ex->n)
        ex = NULL;
    uint64_t target = cr__evict_target(&m->ev, m->allocated - m->resv_free, m->capacity, need);
    if (!target)
        return 0;
    if (m->futile && m->futile_now == now && m->futile_seq == m->state_seq)
        return 0;
    uint64_t xkey = ex ? excl_key(ex) : 0;
    if (ex && m->futile_x && m->futile_x_now == now && m->futile_x_seq == m->state_seq &&
        m->futile_x_key == xkey)
        return 0;
    CNT(m, eviction_steps_total)++;
    uint64_t freed = 0, n = 0;
    int passes = m->cfg.evict_soft_pinned ? 2 : 1;
    for (int pass = 0; pass < passes && freed < target; pass++) {
        cr__evict_verdict_t want = pass == 0 ? CR__EVICT_NOW : CR__EVICT_LAST;
        uint32_t visited = 0;
        obj_t *o = m->lru.prev;
        while (o != &m->lru && freed < target && visited++ < m->ev.max_visit) {
            obj_t *prev = o->prev;
            /* with ex: the room o would make outside it (none: skipped) */
            uint64_t room = 0, b;
            if (verdict(m, o, now) == want && (!ex || (room = cr__m_obj_bytes_outside(m, o, ex))) &&
                evict_one(m, o, now, &b)) {
                freed += ex ? room : b;
                n++;
            }
            o = prev;
        }
    }
    CNT(m, evictions_total) += n;
    if (ex) {
        m->futile_x = n == 0;
        m->futile_x_now = now;
        m->futile_x_seq = m->state_seq;
        m->futile_x_key = xkey;
    } else {
        m->futile = n == 0;
        m->futile_now = now;
        m->futile_seq = m->state_seq;
    }
    if (n)
        CR_LOG_INFO("master", "evicted %" PRIu64 " objects, %" PRIu64 " bytes (target %" PRIu64
                    "%s)", n, freed, target, ex ? ", outside suspect segments" : "");
    return n;
}

uint64_t cr__master_evict(cr__master_t *m, uint64_t need, uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    uint64_t n = cr__m_evict_locked(m, need, NULL, now);
    pthread_mutex_unlock(&m->mu);
    return n;
}
