/* End-to-end value checksums (issue 11, docs/security.md).
 *
 * The writer computes the crc32c of the value and sends it with PutEnd;
 * the master keeps it in the object (obj_t.crc, OF_CRC) and returns it with
 * every replica list, and readers verify the bytes they read against it, so
 * bytes corrupted or overwritten on a storage node are never returned. The
 * master never sees the bytes: it only carries the writer's number.
 *
 * Journaled (ha/record.h: ENDC, and OBJ with CR__HA_OBJ_CRC in
 * snapshots): an object restored by a restarted master or a promoted
 * standby keeps its checksum. */
#include "store/master/master_priv.h"

void cr__m_put_end_crc_locked(cr__master_t *m, const cr__rpc_item_t *item)
{
    if (!key_ok(item->key, item->key_len))
        return; /* PutEnd refuses it */
    obj_t *o = cr__m_lookup(m, item->key, item->key_len);
    if (!o || o->version != item->version)
        o = cr__m_upsert_shadow_find(m, item->key, item->key_len, item->version);
    if (!o || (o->flags & OF_COMPLETE))
        return; /* unknown, or a repeated PutEnd: the first one's crc stays */
    if (item->flags & CR__RPC_F_CRC) {
        o->crc = item->crc;
        o->flags |= OF_CRC;
    } else {
        o->flags &= (uint8_t)~OF_CRC;
    }
}
