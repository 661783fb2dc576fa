/* Upsert: replacing a complete object with a new version in one step.
 *
 * PutStart(key, CR__RPC_CFG_UPSERT) of a key that has a complete object
 * places the new version as a pending object under a shadow name — the key
 * followed by "\0u", which no user key can be (keys hold no NUL). Readers
 * keep getting the old version meanwhile. PutEnd(key, new version) then,
 * under the master lock:
 *   - drops the old object with its space quarantined until its read lease
 *     ends (a reader holding it keeps reading intact bytes, exactly as
 *     after a Remove), and
 *   - renames the shadow to the key and completes it (journal: DEL shadow,
 *     OBJ key, END key — a restarted master sees the same outcome).
 * A reader therefore sees the old version or the new one, never neither and
 * never a mix. PutRevoke or the put deadline drops the shadow and leaves the
 * old version. Two concurrent upserts of one key: the second PutStart gets
 * OBJECT_ALREADY_EXISTS while the first is pending (the caller retries). If
 * the old object vanished meanwhile (removed, evicted), PutEnd still
 * publishes the new version; if a plain put re-created the key and is still
 * pending, the upsert loses (OBJECT_ALREADY_EXISTS, shadow dropped). */
#include "store/master/master_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SHADOW_SUFFIX "\0u"
#define SHADOW_SUFFIX_LEN 2

/* The shadow name of key in buf (key_len + 2 bytes). */
static size_t shadow_name(char *buf, const char *key, size_t key_len)
{
    memcpy(buf, key, key_len);
    memcpy(buf + key_len, SHADOW_SUFFIX, SHADOW_SUFFIX_LEN);
    return key_len + SHADOW_SUFFIX_LEN;
}

int cr__m_upsert_start_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t size,
                              const cr__rpc_repl_cfg_t *cfg, const excl_t *ex, uint64_t now,
                              cr__rpc_msg_t *msg, cr__rpc_item_t *it)
{
    char sh[CR__RPC_KEY_MAX + SHADOW_SUFFIX_LEN];
    size_t sl = shadow_name(sh, key, key_len);
    uint64_t h = key_hash(sh, sl);
    int64_t i = cr__m_map_find(m, sh, sl, h);
    if (i >= 0) {
        obj_t *o = m->slots[i];
        if (o->until_ms > now)
            return CR_E_OBJECT_ALREADY_EXISTS; /* another upsert of key in flight */
        CNT(m, puts_timed_out_total)++;
        cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
    }
    return cr__m_pending_create_locked(m, sh, sl, h, size, cfg, 0, ex, now, msg, it);
}

obj_t *cr__m_upsert_shadow_find(cr__master_t *m, const char *key, size_t key_len,
                                uint64_t version)
{
    if (!key_ok(key, key_len))
        return NULL;
    char sh[CR__RPC_KEY_MAX + SHADOW_SUFFIX_LEN];
    size_t sl = shadow_name(sh, key, key_len);
    obj_t *o = cr__m_lookup(m, sh, sl);
    return o && o->version == version && !(o->flags & OF_COMPLETE) ? o : NULL;
}

int cr__m_upsert_end_locked(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                            uint64_t now)
{
    obj_t *o = cr__m_upsert_shadow_find(m, key, key_len, version);
    if (!o)
        return CR_E_OBJECT_NOT_FOUND;
    if (o->until_ms <= now) { /* past its deadline: reclaim, refuse */
        CNT(m, puts_timed_out_total)++;
        cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
        return CR_E_OBJECT_NOT_FOUND;
    }
    uint64_t h = key_hash(key, key_len);
    obj_t *old = cr__m_lookup(m, key, key_len);
    if (old && !(old->flags & OF_COMPLETE) && old->until_ms > now) {
        /* a plain put re-created the key after the old version went away
         * and is still writing: it wins */
        cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
        return CR_E_OBJECT_ALREADY_EXISTS;
    }
    if (old) {
        /* readers holding a lease on the old version keep its bytes: the
         * space stays quarantined until that lease ends */
        cr__m_obj_delete(m, old, cr__m_obj_release_ms(m, old, now), now);
        CNT(m, removed_objects_total)++;
    }
    /* rename the shadow to the key (the name is stored last in the object:
     * shortening key_len drops the suffix) */
    cr__m_jr_key(m, CR__HA_DEL, o);
    int64_t si = cr__m_map_find(m, obj_key(o), o->key_len, key_hash(obj_key(o), o->key_len));
    if (si >= 0)
        cr__m_map_erase(m, (uint64_t)si);
    o->key_len = (uint16_t)key_len;
    /* two entries left the index above, so this insert never grows it */
    if (cr__m_map_insert(m, o, h)) {
        cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
        return -ENOMEM;
    }
    cr__m_jr_obj(m, o);
    int rc = cr__m_put_end_locked(m, key, key_len, version, now);
    if (!rc)
        CNT(m, upserts_total)++;
    return rc;
}

int cr__m_upsert_revoke_locked(cr__master_t *m, const char *key, size_t key_len,
                               uint64_t version, uint64_t now)
{
    obj_t *o = cr__m_upsert_shadow_find(m, key, key_len, version);
    if (!o)
        return CR_E_OBJECT_NOT_FOUND;
    /* like a revoked put: the space waits out writes still in flight */
    cr__m_obj_delete(m, o, now + m->cfg.put_timeout_ms, now);
    CNT(m, puts_revoked_total)++;
    return 0;
}
