/* Master object operations: two-phase put (start, end, revoke), get
 * (replica list + lease), exist, size, remove, validate; each a *_locked
 * operation plus its public locking wrapper (master.h). A put of a key
 * whose object no reader can reach (restored, its node not back) replaces
 * it (cr__m_obj_reachable). */
#include "common/log.h"
#include "store/master/master_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int cr__m_put_start_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t size,
                           const cr__rpc_repl_cfg_t *cfg, const excl_t *ex, uint64_t now,
                           cr__rpc_msg_t *msg, cr__rpc_item_t *it)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    uint32_t n_rep = cfg && cfg->replica_num ? cfg->replica_num : 1;
    if (size == 0 || size > CR__RPC_VALUE_MAX || n_rep > CR__RPC_REPLICA_MAX)
        return CR_E_INVALID_PARAMS;
    uint64_t h = key_hash(key, key_len);
    int64_t i = cr__m_map_find(m, key, key_len, h);
    int replace = 0;
    if (i >= 0) {
        obj_t *o = m->slots[i];
        /* an upsert of an object no reader can reach is a plain replace */
        if ((o->flags & OF_COMPLETE) && cfg && (cfg->flags & CR__RPC_CFG_UPSERT) &&
            cr__m_obj_reachable(m, o))
            return cr__m_upsert_start_locked(m, key, key_len, size, cfg, ex, now, msg, it);
        replace = cr__m_put_over_locked(m, o, now);
        if (replace < 0)
            return replace;
    }
    return cr__m_pending_create_locked(m, key, key_len, h, size, cfg, replace, ex, now, msg,
                                       it);
}

int cr__m_obj_reachable(const cr__master_t *m, obj_t *o)
{
    if (!(o->flags & OF_COMPLETE) || (o->flags & OF_FS))
        return 1; /* a pending put's writer, or its shared-FS file (fs.c) */
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        int attached = !(nsh[r] & REP_DEAD);
        for (uint32_t k = 0; k < n && attached; k++)
            attached = m->segs[sh[k].seg].client != NONE32;
        if (attached)
            return 1;
        sh += n;
    }
    return 0;
}

int cr__m_put_over_locked(cr__master_t *m, obj_t *o, uint64_t now)
{
    if (!(o->flags & OF_COMPLETE) && o->until_ms <= now) {
        /* a dead writer's put past its deadline: reclaim it now */
        CNT(m, puts_timed_out_total)++;
        cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
        return 0;
    }
    return cr__m_obj_reachable(m, o) ? CR_E_OBJECT_ALREADY_EXISTS : 1;
}

void cr__m_put_replace_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t h,
                              uint64_t now)
{
    int64_t i = cr__m_map_find(m, key, key_len, h);
    if (i < 0) /* evicted meanwhile (a record with no replica left at all) */
        return;
    obj_t *o = m->slots[i];
    /* as a Remove would: a reader of the old master may still be reading
     * it (restored lease), so its space waits out that lease; a node that
     * mounts that memory again later finds the old blocks freed and the
     * key naming the new version */
    CNT(m, puts_replaced_unreachable_total)++;
    CR_LOG_RL(CR__LOG_INFO, "master",
              "put of '%.*s' replaces an object whose replicas are all on segments not "
              "mounted again since the restart",
              o->key_len > 64 ? 64 : (int)o->key_len, obj_key(o));
    cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
}

int cr__m_meta_full_locked(cr__master_t *m, size_t key_len, const char *what)
{
    if ((m->cfg.max_objects && m->count >= m->cfg.max_objects) ||
        (m->cfg.max_key_bytes && m->key_bytes + key_len > m->cfg.max_key_bytes)) {
        CNT(m, puts_refused_metadata_full_total)++;
        CR_LOG_RL(CR__LOG_WARN, "master",
                  "metadata full: %llu objects, %llu key bytes (--max_objects %llu, "
                  "--max_key_bytes %llu): %s refused",
                  (unsigned long long)m->count, (unsigned long long)m->key_bytes,
                  (unsigned long long)m->cfg.max_objects,
                  (unsigned long long)m->cfg.max_key_bytes, what);
        return CR_E_KEYS_ULTRA_LIMIT;
    }
    return 0;
}

/* A placement failed: what can be freed at once is, client reservations'
 * rest (it comes back after their quarantine, reserve.c) and the due
 * quarantine, then one eviction step for need bytes (outside ex) unless
 * restored segments wait for their owners: the space is there, only not
 * usable yet. Returns 1 in that case (nothing evicted). */
static int make_room(cr__master_t *m, uint64_t need, const excl_t *ex, uint64_t now)
{
    cr__m_resv_reclaim_all(m, now);
    cr__m_quarantine_release(m, now, SIZE_MAX);
    int detached = cr__m_any_detached(m);
    if (!detached)
        cr__m_evict_locked(m, need, ex, now);
    return detached;
}

/* Places the replicas of a new object into p. With an exclusion list (a
 * client's suspect segments), on the other segments first, evicting there
 * as when nothing fits; only when they cannot take it even so, on any
 * segment as without one (a soft exclusion: a lone segment that is suspect
 * still takes puts, and a node that recovered serves again). Returns 0 or
 * the put's status (nothing allocated). */
static int place(cr__master_t *m, placing_t *p, uint64_t size, uint32_t n_rep,
                 const cr__rpc_repl_cfg_t *cfg, const excl_t *ex, uint64_t now)
{
    if (ex && ex->n) {
        CNT(m, puts_excluding_total)++;
        if (!cr__m_place_all(m, p, size, n_rep, cfg, ex, now))
            return 0;
        /* evicting is for nothing when the others could not hold it even empty */
        if (cr__m_place_possible(m, size, n_rep, ex)) {
            make_room(m, size * n_rep, ex, now);
            if (!cr__m_place_all(m, p, size, n_rep, cfg, ex, now))
                return 0;
        }
    }
    if (cr__m_place_all(m, p, size, n_rep, cfg, NULL, now)) {
        /* more than the cluster could ever hold (too few segments, too
         * little capacity): refused without evicting anything for it */
        if (!cr__m_place_possible(m, size, n_rep, NULL)) {
            CNT(m, alloc_failures_total)++;
            CR_LOG_RL(CR__LOG_WARN, "master",
                      "put of %llu bytes x %u replicas refused: more than all mounted "
                      "segments could hold even empty (nothing evicted)",
                      (unsigned long long)size, n_rep);
            return CR_E_NO_AVAILABLE_HANDLE;
        }
        int detached = make_room(m, size * n_rep, NULL, now);
        if (cr__m_place_all(m, p, size, n_rep, cfg, NULL, now)) {
            CNT(m, alloc_failures_total)++;
            /* "not now", which a client retries a single put on, while
             * restored segments may still come back (dispatch.c) */
            return detached ? CR_E_UNAVAILABLE_IN_CURRENT_STATUS : CR_E_NO_AVAILABLE_HANDLE;
        }
    }
    for (uint32_t i = 0; ex && i < p->n_used; i++)
        if (excl_has(ex, p->used_segs[i])) {
            CNT(m, puts_placed_excluded_total)++;
            break;
        }
    return 0;
}

int cr__m_pending_create_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t h,
                                uint64_t size, const cr__rpc_repl_cfg_t *cfg, int replace,
                                const excl_t *ex, uint64_t now, cr__rpc_msg_t *msg,
                                cr__rpc_item_t *it)
{
    /* a replacement takes its key's place: no new key */
    int full = replace ? 0 : cr__m_meta_full_locked(m, key_len, "PutStart");
    if (full)
        return full;
    uint32_t n_rep = cfg && cfg->replica_num ? cfg->replica_num : 1;
    placing_t p;
    int rc = place(m, &p, size, n_rep, cfg, ex, now);
    if (rc)
        return rc;
    size_t nsh_bytes = (n_rep + 3u) & ~3u;
    obj_t *o = malloc(sizeof *o + nsh_bytes + p.n_sh * sizeof(shard_t) + key_len);
    if (!o) {
        cr__m_placing_rollback(m, &p);
        return -ENOMEM;
    }
    memset(o, 0, sizeof *o);
    o->version = m->next_version++;
    o->size = size;
    o->until_ms = now + m->cfg.put_timeout_ms;
    /* the WRITE grant the reply carries (caps.c mints it for lease_ms below) */
    if (m->caps)
        obj_wcap_until(o, now,
                       now + cr__m_caps_ttl_ms(m, (uint32_t)(m->cfg.put_timeout_ms > UINT32_MAX
                                                                 ? UINT32_MAX
                                                                 : m->cfg.put_timeout_ms)));
    o->key_len = (uint16_t)key_len;
    o->n_rep = (uint8_t)n_rep;
    if (cfg && (cfg->flags & CR__RPC_CFG_HARD_PIN))
        o->flags |= OF_HARD_PIN;
    if (cfg && (cfg->flags & CR__RPC_CFG_SOFT_PIN))
        o->flags |= OF_SOFT_PIN;
    memcpy(obj_nsh(o), p.nsh, n_rep);
    memcpy(obj_shards(o), p.sh, p.n_sh * sizeof(shard_t));
    memcpy(obj_key(o), key, key_len);
    /* placed: only now does the unreachable object give way (a put that
     * fails leaves it, its node may still come back) */
    if (replace)
        cr__m_put_replace_locked(m, key, key_len, h, now);
    if (cr__m_map_insert(m, o, h)) {
        cr__m_placing_rollback(m, &p);
        free(o);
        return -ENOMEM;
    }
    list_push_back(&m->pending, o);
    m->n_pending++;
    /* every replica carved from a window the standbys know: this record
     * need not be on them before the reply (window.c) */
    m->jr_lazy = p.n_lazy == n_rep && p.n_sh == n_rep;
    cr__m_jr_obj(m, o);
    m->jr_lazy = 0;
    it->version = o->version;
    it->size = size;
    it->lease_ms = (uint32_t)(m->cfg.put_timeout_ms > UINT32_MAX ? UINT32_MAX
                                                                 : m->cfg.put_timeout_ms);
    rc = cr__m_fill_replicas(m, o, msg, it);
    if (rc) {
        cr__m_obj_delete(m, o, 0, now);
        return rc;
    }
    if (cr__evict_over_watermark(&m->ev, m_used(m), m->capacity))
        cr__m_evict_locked(m, 0, NULL, now);
    return 0;
}

int cr__master_put_start(cr__master_t *m, const char *key, size_t key_len, uint64_t size,
                         const cr__rpc_repl_cfg_t *cfg, uint64_t now, cr__rpc_msg_t *msg,
                         cr__rpc_item_t *it)
{
    pthread_mutex_lock(&m->mu);
    int rc = cr__m_put_start_locked(m, key, key_len, size, cfg, NULL, now, msg, it);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int cr__m_put_end_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                         uint64_t now)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = cr__m_lookup(m, key, key_len);
    if (!o || o->version != version)
        return cr__m_upsert_end_locked(m, key, key_len, version, now);
    if (o->flags & OF_COMPLETE) { /* a retry: its END may still be on its way to the standbys */
        cr__m_jr_wait_prior();
        return 0;
    }
    if (o->until_ms <= now) { /* past its deadline: reclaim, refuse */
        CNT(m, puts_timed_out_total)++;
        cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
        return CR_E_OBJECT_NOT_FOUND;
    }
    list_unlink(o);
    m->n_pending--;
    o->flags |= OF_COMPLETE;
    o->until_ms = 0; /* no lease yet */
    if (o->flags & OF_SOFT_PIN) {
        uint64_t until = (now + m->cfg.soft_pin_ttl_ms + 999) / 1000;
        o->pin_until_s = until > UINT32_MAX ? UINT32_MAX : (uint32_t)until;
    }
    list_push_front(&m->lru, o);
    m->n_complete++;
    m->state_seq++;
    CNT(m, puts_completed_total)++;
    cr__m_jr_key(m, CR__HA_END, o);
    if (m->tier)
        cr__m_tier_put_completed(m, o, now);
    if (m->fs) /* its writer persists it now: not evicted before that (fs.c) */
        o->fs_until_s = (uint32_t)((now + CR__M_FS_PERSIST_MS) / 1000);
    return 0;
}

int cr__master_put_end(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                       uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    int rc = cr__m_put_end_locked(m, key, key_len, version, now);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int cr__m_put_revoke_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                            uint64_t now)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = cr__m_lookup(m, key, key_len);
    if (!o || o->version != version)
        return cr__m_upsert_revoke_locked(m, key, key_len, version, now);
    if (o->flags & OF_COMPLETE)
        return CR_E_INVALID_PARAMS;
    /* The writer gave up, but a transfer it timed out on may still have
     * slices in flight toward this space (TE requests cannot be recalled):
     * quarantine it like a put that missed its deadline, so no new object's
     * bytes can be overwritten by the abandoned write. The client keeps its
     * transfer timeout below the put timeout, so that long is enough. */
    cr__m_obj_delete(m, o, now + m->cfg.put_timeout_ms, now);
    CNT(m, puts_revoked_total)++;
    return 0;
}

int cr__master_put_revoke(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                          uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    int rc = cr__m_put_revoke_locked(m, key, key_len, version, now);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int cr__m_get_replicas_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t now,
                              cr__rpc_msg_t *msg, cr__rpc_item_t *it)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = cr__m_lookup_complete(m, key, key_len);
    if (!o) {
        CNT(m, misses_total)++;
        return CR_E_OBJECT_NOT_FOUND;
    }
    int rc = cr__m_fill_replicas(m, o, msg, it);
    if (rc)
        return rc;
    uint64_t until = now + m->cfg.lease_ttl_ms;
    if (o->until_ms < until)
        o->until_ms = until;
    list_unlink(o);
    obj_t *list = cr__m_obj_list(m, o);
    list_push_front(list, o);
    m->state_seq++;
    it->version = o->version;
    it->size = o->size;
    if (o->flags & OF_CRC) { /* end-to-end checksum (checksum.c) */
        it->flags |= CR__RPC_F_CRC;
        it->crc = o->crc;
    }
    if (list == &m->fs_lru)
        CNT(m, tier_fs_hits_total)++;
    if (list == &m->ssd_lru) {
        CNT(m, tier_ssd_hits_total)++;
        cr__m_tier_disk_hit(m, o, now);
    }
    it->lease_ms = (uint32_t)(m->cfg.lease_ttl_ms > UINT32_MAX ? UINT32_MAX : m->cfg.lease_ttl_ms);
    CNT(m, hits_total)++;
    return 0;
}

int cr__master_get_replicas(cr__master_t *m, const char *key, size_t key_len, uint64_t now,
                            cr__rpc_msg_t *msg, cr__rpc_item_t *it)
{
    pthread_mutex_lock(&m->mu);
    int rc = cr__m_get_replicas_locked(m, key, key_len, now, msg, it);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int cr__m_exist_locked(cr__master_t *m, const char *key, size_t key_len, int lease, uint64_t now)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = cr__m_lookup_complete(m, key, key_len);
    /* no reader can reach it now (restored, its node not back): a miss,
     * which is also what a put of the key goes by (it replaces it) */
    if (!o || !cr__m_obj_reachable(m, o))
        return CR_E_OBJECT_NOT_FOUND;
    if (lease) {
        /* the caller will likely read it next: leased and most recent, as
         * by GetReplicaList (Mooncake's ExistKey grants the same lease) */
        uint64_t until = now + m->cfg.lease_ttl_ms;
        if (o->until_ms < until)
            o->until_ms = until;
        list_unlink(o);
        list_push_front(cr__m_obj_list(m, o), o);
        m->state_seq++;
    }
    return 0;
}

int cr__master_exist(cr__master_t *m, const char *key, size_t key_len, uint64_t now)
{
    (void)now;
    pthread_mutex_lock(&m->mu);
    int rc = cr__m_exist_locked(m, key, key_len, 0, now);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int cr__m_get_size_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t *size)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = cr__m_lookup_complete(m, key, key_len);
    if (!o)
        return CR_E_OBJECT_NOT_FOUND;
    *size = o->size;
    return 0;
}

int cr__master_get_size(cr__master_t *m, const char *key, size_t key_len, uint64_t now,
                        uint64_t *size)
{
    (void)now;
    pthread_mutex_lock(&m->mu);
    int rc = cr__m_get_size_locked(m, key, key_len, size);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int cr__m_remove_locked(cr__master_t *m, const char *key, size_t key_len, int force,
                        uint64_t now)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = cr__m_lookup_complete(m, key, key_len);
    if (!o)
        return CR_E_OBJECT_NOT_FOUND;
    if (o->until_ms > now && !force)
        return CR_E_OBJECT_HAS_LEASE;
    cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
    CNT(m, removed_objects_total)++;
    return 0;
}

int cr__master_remove(cr__master_t *m, const char *key, size_t key_len, int force, uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    int rc = cr__m_remove_locked(m, key, key_len, force, now);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int cr__m_remove_all_locked(cr__master_t *m, int force, uint64_t now, uint64_t *count)
{
    uint64_t n = 0;
    /* DRAM objects, then the disk-only ones, then the shared-FS-only ones */
    obj_t *lists[3] = {&m->lru, &m->ssd_lru, &m->fs_lru};
    for (int l = 0; l < 3; l++)
        for (obj_t *o = lists[l]->next; o != lists[l];) {
            obj_t *next = o->next;
            if (force || o->until_ms <= now) {
                cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
                n++;
            }
            o = next;
        }
    CNT(m, removed_objects_total) += n;
    *count = n;
    return 0;
}

int cr__master_remove_all(cr__master_t *m, int force, uint64_t now, uint64_t *count)
{
    pthread_mutex_lock(&m->mu);
    int rc = cr__m_remove_all_locked(m, force, now, count);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

int cr__m_validate_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                          uint64_t replica_id)
{
    if (!key_ok(key, key_len))
        return CR_E_INVALID_KEY;
    obj_t *o = cr__m_lookup_complete(m, key, key_len);
    int rc = 0;
    if (!o || o->version != version || (replica_id >> 3) != version)
        rc = CR_E_OBJECT_NOT_FOUND;
    else if ((replica_id & 7) == FS_REPLICA_IDX && o->n_rep <= FS_REPLICA_IDX)
        rc = (o->flags & OF_FS) ? 0 : CR_E_REPLICA_IS_GONE; /* its shared-FS file (fs.c) */
    else if ((replica_id & 7) >= o->n_rep || (obj_nsh(o)[replica_id & 7] & REP_DEAD))
        rc = CR_E_REPLICA_IS_GONE;
    if (rc)
        CNT(m, validate_failures_total)++;
    return rc;
}

int cr__master_validate(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                        uint64_t replica_id, uint64_t now)
{
    (void)now;
    pthread_mutex_lock(&m->mu);
    int rc = cr__m_validate_locked(m, key, key_len, version, replica_id);
    pthread_mutex_unlock(&m->mu);
    return rc;
}
