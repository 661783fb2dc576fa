/* Master clients and segments: heartbeats, mount, unmount, dropping a
 * segment's replicas, expiring silent clients (master_priv.h). */
#include "store/master/master_priv.h"
#include "store/tier/tier.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* The longest gap between two observations of the clock (ticks every
 * ~100 ms, heartbeats) that is believed to be time the master was running. */
#define STALL_CREDIT_MS 500

uint64_t cr__m_awake_locked(cr__master_t *m, uint64_t now)
{
    if (!m->clock_started) {
        m->clock_started = 1;
        m->seen_ms = now;
        m->awake_ms = now;
        return now;
    }
    if (now > m->seen_ms) {
        uint64_t gap = now - m->seen_ms;
        if (gap > STALL_CREDIT_MS) {
            CNT(m, stalls_total)++;
            CNT(m, stalled_ms_total) += gap - STALL_CREDIT_MS;
            CR_LOG_WARN("master", "did not run for %" PRIu64 " ms (stopped or starved): "
                        "that time does not count against client heartbeats", gap);
            gap = STALL_CREDIT_MS;
        }
        m->awake_ms += gap;
        m->seen_ms = now;
    }
    return m->awake_ms;
}

static int id_eq(cr__rpc_client_id_t a, cr__rpc_client_id_t b)
{
    return a.hi == b.hi && a.lo == b.lo;
}

uint32_t cr__m_client_find(cr__master_t *m, cr__rpc_client_id_t id)
{
    for (uint32_t i = 0; i < m->n_clients; i++)
        if (m->clients[i].live && id_eq(m->clients[i].id, id))
            return i;
    return NONE32;
}

#define CLIENTS_FULL (NONE32 - 1)

/* Returns the new index, NONE32 (ENOMEM) or CLIENTS_FULL. */
static uint32_t client_add(cr__master_t *m, cr__rpc_client_id_t id, uint64_t now)
{
    uint32_t i;
    if (m->live_clients >= m->cfg.max_clients)
        return CLIENTS_FULL;
    for (i = 0; i < m->n_clients; i++)
        if (!m->clients[i].live)
            break;
    if (i == m->n_clients) {
        if (m->n_clients == m->cap_clients) {
            uint32_t nc = m->cap_clients ? m->cap_clients * 2 : 16;
            client_t *n = realloc(m->clients, nc * sizeof *n);
            if (!n)
                return NONE32;
            m->clients = n;
            m->cap_clients = nc;
        }
        m->n_clients++;
    }
    m->clients[i] = (client_t){.id = id, .last_ms = cr__m_awake_locked(m, now), .live = 1};
    m->live_clients++;
    return i;
}

uint32_t cr__m_seg_find(cr__master_t *m, const char *name)
{
    for (uint32_t i = 0; i < m->n_segs; i++)
        if (m->segs[i].live && !strcmp(m->segs[i].name, name))
            return i;
    return NONE32;
}

int cr__m_ping_locked(cr__master_t *m, cr__rpc_client_id_t id, uint64_t now, uint32_t *flags)
{
    uint32_t c = cr__m_client_find(m, id);
    *flags = 0;
    if (c == NONE32) {
        c = client_add(m, id, now);
        if (c == CLIENTS_FULL)
            return CR_E_UNAVAILABLE_IN_CURRENT_STATUS;
        if (c == NONE32)
            return -ENOMEM;
        *flags = CR__RPC_F_NEED_REMOUNT;
    } else {
        m->clients[c].last_ms = cr__m_awake_locked(m, now);
    }
    return 0;
}

int cr__master_ping(cr__master_t *m, cr__rpc_client_id_t id, uint64_t now, uint32_t *flags)
{
    pthread_mutex_lock(&m->mu);
    int rc = cr__m_ping_locked(m, id, now, flags);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int cr__m_mount_locked(cr__master_t *m, cr__rpc_client_id_t id, const char *name, uint64_t base,
                       uint64_t size, uint64_t now)
{
    if (!name || !*name || strnlen(name, CR__RPC_SEGMENT_NAME_MAX) >= CR__RPC_SEGMENT_NAME_MAX ||
        base + size < base || size < (1ull << m->cfg.granule_shift))
        return CR_E_INVALID_PARAMS;
    uint32_t c = cr__m_client_find(m, id);
    uint32_t s = cr__m_seg_find(m, name);
    if (s != NONE32) {
        seg_t *sg = &m->segs[s];
        if (c != NONE32 && sg->client == c && sg->base == base && sg->size == size) {
            m->clients[c].last_ms = cr__m_awake_locked(m, now);
            return 0;
        }
        if (sg->client == NONE32 && sg->owner.hi == id.hi && sg->owner.lo == id.lo &&
            sg->base == base && sg->size == size) {
            /* a restored segment's owner is back with the same memory */
            if (c == NONE32) {
                c = client_add(m, id, now);
                if (c == CLIENTS_FULL)
                    return CR_E_UNAVAILABLE_IN_CURRENT_STATUS;
                if (c == NONE32)
                    return -ENOMEM;
            }
            m->clients[c].last_ms = cr__m_awake_locked(m, now);
            sg->client = c;
            sg->alloc_after_ms = 0;
            sg->held_until = 0;
            CR_LOG_INFO("master", "restored segment %s attached to its owner again", name);
            return 0;
        }
        return CR_E_SEGMENT_ALREADY_EXISTS;
    }
    if (m->live_segs >= m->cfg.max_segments)
        return CR_E_UNAVAILABLE_IN_CURRENT_STATUS;
    if (c == NONE32) {
        c = client_add(m, id, now);
        if (c == CLIENTS_FULL)
            return CR_E_UNAVAILABLE_IN_CURRENT_STATUS;
        if (c == NONE32)
            return -ENOMEM;
    }
    m->clients[c].last_ms = cr__m_awake_locked(m, now);
    for (s = 0; s < m->n_segs; s++)
        if (!m->segs[s].live)
            break;
    if (s == m->n_segs) {
        if (m->n_segs == m->cap_segs) {
            uint32_t nc = m->cap_segs ? m->cap_segs * 2 : 16;
            seg_t *n = realloc(m->segs, nc * sizeof *n);
            if (!n)
                return -ENOMEM;
            m->segs = n;
            m->cap_segs = nc;
        }
        memset(&m->segs[s], 0, sizeof m->segs[s]);
        m->n_segs++;
    }
    seg_t *sg = &m->segs[s];
    cr__oalloc_t *a;
    int rc = cr__oalloc_create(size, m->cfg.granule_shift, &a);
    if (rc)
        return rc == -ENOMEM ? -ENOMEM : CR_E_INVALID_PARAMS;
    snprintf(sg->name, sizeof sg->name, "%s", name);
    sg->base = base;
    sg->size = size;
    sg->alloc = a;
    sg->win_end = 0; /* no allocation window (a reused slot may hold an old one) */
    sg->client = c;
    sg->live = 1;
    m->live_segs++;
    sg->alloc_after_ms = 0;
    sg->tier = cr__tier_is_ssd(name) ? 1 : 0;
    if (!sg->tier)
        m->capacity += cr__oalloc_capacity(a);
    /* the same memory dropped while it could still be touched: those
     * ranges stay quarantined (held.c) */
    sg->alloc_after_ms = cr__m_held_apply(m, s, id, now);
    cr__m_jr_seg(m, CR__HA_SEG, sg);
    CR_LOG_INFO("master", "mounted segment %s base 0x%" PRIx64 " size %" PRIu64, name, base, size);
    return 0;
}

int cr__master_mount(cr__master_t *m, cr__rpc_client_id_t id, const char *name, uint64_t base,
                     uint64_t size, uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    int rc = cr__m_mount_locked(m, id, name, base, size, now);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Drops every replica with a shard on segment s, deletes objects left
 * without replicas, and frees the segment. O(objects). */
static void seg_drop_locked(cr__master_t *m, uint32_t s, uint64_t now)
{
    seg_t *sg = &m->segs[s];
    obj_t **dead = NULL;
    size_t n_dead = 0, cap_dead = 0;
    /* a restored segment whose owner never came back took no allocation
     * (alloc_after_ms UINT64_MAX): not a hold, its objects' ranges say
     * what may still be touched */
    uint64_t hold = sg->alloc_after_ms == UINT64_MAX ? 0 : sg->alloc_after_ms;
    /* the ranges that may still be touched, and until when (held.c); a
     * segment that was itself held whole does not know its ranges */
    held_set_t hs = {0};
    hs.whole = sg->tier || hold > now;
    for (uint64_t i = 0; i < m->cap; i++) {
        obj_t *o = m->slots[i];
        if (!o)
            continue;
        uint8_t *nsh = obj_nsh(o);
        shard_t *sh = obj_shards(o);
        int live = 0, hit = 0;
        for (uint32_t r = 0; r < o->n_rep; r++) {
            uint32_t n = nsh[r] & 0x7f;
            if (!(nsh[r] & REP_DEAD)) {
                int on = 0;
                for (uint32_t k = 0; k < n; k++)
                    on |= sh[k].seg == s;
                if (on) {
                    hit = 1;
                    uint64_t rel = cr__m_obj_release_ms(m, o, now);
                    if (rel > hold)
                        hold = rel;
                    for (uint32_t k = 0; k < n; k++)
                        if (sh[k].seg != s)
                            cr__m_block_release(m, sh[k].seg, sh[k].blk, rel, now);
                        else
                            cr__m_held_add(m, &hs, cr__oalloc_block_offset(sg->alloc, sh[k].blk),
                                           cr__oalloc_block_size(sg->alloc, sh[k].blk), rel, now);
                    nsh[r] |= REP_DEAD;
                    CNT(m, replicas_dropped_total)++;
                } else {
                    live++;
                }
            }
            sh += n;
        }
        if (hit && !live && (o->flags & OF_COMPLETE) && (o->flags & OF_FS)) {
            live = 1; /* its shared-FS file keeps it (fs.c) */
            list_unlink(o);
            list_push_front(cr__m_obj_list(m, o), o);
        }
        if (hit && live && (o->flags & OF_COMPLETE))
            cr__m_jr_obj(m, o); /* still readable, with fewer replicas */
        /* a pending put that lost a replica cannot complete: drop it all */
        if (hit && (!live || !(o->flags & OF_COMPLETE))) {
            if (n_dead == cap_dead) {
                size_t nc = cap_dead ? cap_dead * 2 : 64;
                obj_t **nd = realloc(dead, nc * sizeof *nd);
                if (!nd) {
                    /* keep the record (no live replica is harmless: it is
                     * reported as a miss by every reader); retry later */
                    continue;
                }
                dead = nd;
                cap_dead = nc;
            }
            dead[n_dead++] = o;
        }
    }
    for (size_t i = 0; i < n_dead; i++) {
        obj_t *o = dead[i];
        if (o->flags & OF_COMPLETE)
            CNT(m, objects_lost_total)++;
        cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
    }
    free(dead);
    /* reservations on it end; their holders may write until their hold */
    uint64_t rh = cr__m_resv_seg_dropped(m, s, now, &hs);
    if (rh > hold)
        hold = rh;
    /* copy tasks' target blocks on it: their copiers may write until then */
    rh = cr__m_rtask_seg_dropped(m, s, now, &hs);
    if (rh > hold)
        hold = rh;
    /* disk-tier promotions into it: their nodes may write until then */
    rh = sg->tier ? 0 : cr__m_tier_dram_seg_dropped(m, s, now, &hs);
    if (rh > hold)
        hold = rh;
    /* quarantine entries of this segment die with it */
    for (size_t i = 0; i < m->q_len; i++) {
        qent_t *e = &m->q[i];
        if (e->seg == s && e->gen == sg->gen) {
            if (e->release_ms > hold)
                hold = e->release_ms;
            cr__m_held_add(m, &hs, cr__oalloc_block_offset(sg->alloc, e->blk), e->bytes,
                           e->release_ms, now);
            if (!sg->tier)
                m->quarantine_bytes -= e->bytes;
            e->seg = NONE32;
        }
    }
    /* remember the name: the same memory may come back (a client that was
     * only partitioned remounts), and the ranges a reader or writer of the
     * dropped replicas may still touch must not be reused before then */
    cr__m_held_remember(m, sg, &hs, hold, now);
    cr__m_jr_seg(m, CR__HA_SEGDROP, sg);
    if (sg->tier) {
        cr__m_tier_seg_dropped(m, s, now);
    } else {
        m->capacity -= cr__oalloc_capacity(sg->alloc);
        m->allocated -= cr__oalloc_used(sg->alloc);
    }
    cr__oalloc_destroy(sg->alloc);
    sg->alloc = NULL;
    sg->live = 0;
    m->live_segs--;
    sg->gen++;
    CR_LOG_INFO("master", "unmounted segment %s (%zu objects lost)", sg->name, n_dead);
}

int cr__m_unmount_locked(cr__master_t *m, cr__rpc_client_id_t id, const char *name, uint64_t now)
{
    uint32_t c = cr__m_client_find(m, id);
    uint32_t s = name ? cr__m_seg_find(m, name) : NONE32;
    if (s == NONE32 || c == NONE32 || m->segs[s].client != c)
        return CR_E_SEGMENT_NOT_FOUND;
    m->clients[c].last_ms = cr__m_awake_locked(m, now);
    seg_drop_locked(m, s, now);
    return 0;
}

int cr__master_unmount(cr__master_t *m, cr__rpc_client_id_t id, const char *name, uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    int rc = cr__m_unmount_locked(m, id, name, now);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

/* Expires clients silent for client_ttl on the awake clock: only time
 * in which the master could have read their heartbeats counts. */
void cr__m_expire_clients_locked(cr__master_t *m, uint64_t now)
{
    uint64_t awake = cr__m_awake_locked(m, now);
    for (uint32_t c = 0; c < m->n_clients; c++) {
        client_t *cl = &m->clients[c];
        if (!cl->live || awake - cl->last_ms <= m->cfg.client_ttl_ms || awake < cl->last_ms)
            continue;
        for (uint32_t s = 0; s < m->n_segs; s++)
            if (m->segs[s].live && m->segs[s].client == c) {
                CR_LOG_WARN("master", "client silent for %" PRIu64 " ms: unmounting %s",
                            awake - cl->last_ms, m->segs[s].name);
                seg_drop_locked(m, s, now);
            }
        cr__m_resv_client_gone(m, cl->id, now);
        cl->live = 0;
        m->live_clients--;
        CNT(m, clients_expired_total)++;
    }
    cr__m_held_expire(m, now); /* 64 entries */
    /* restored segments whose owner did not come back */
    for (uint32_t s = 0; s < m->n_segs; s++) {
        seg_t *sg = &m->segs[s];
        /* two ttls: its owner may first have to notice that the old master
         * is gone (a call to a stopped one times out) */
        if (sg->live && sg->client == NONE32 &&
            awake - sg->orphan_awake > 2 * m->cfg.client_ttl_ms) {
            CR_LOG_WARN("master", "restored segment %s: its owner did not mount it again",
                        sg->name);
            seg_drop_locked(m, s, now);
        }
    }
}
