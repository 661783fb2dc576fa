/* Master rpc dispatch: one decoded request, single or batch, served under
 * one lock acquisition and counted in the metrics (master.h). */
#include "store/master/master_priv.h"
#include "common/log.h"
#include "store/tier/tier.h"

#include <errno.h>
#include <string.h>

static int item_locked(cr__master_t *m, uint16_t bt, uint32_t mflags, const excl_t *ex,
                       const cr__rpc_item_t *in, cr__rpc_item_t *out, cr__rpc_msg_t *reply,
                       uint64_t now)
{
    switch (bt) {
    case CR__RPC_PUT_START:
        CNT(m, rpc_put_start_total)++;
        return cr__m_put_start_locked(m, in->key, in->key_len, in->size, &in->cfg, ex, now, reply,
                                      out);
    case CR__RPC_PUT_END:
        CNT(m, rpc_put_end_total)++;
        cr__m_put_end_crc_locked(m, in);
        return cr__m_put_end_locked(m, in->key, in->key_len, in->version, now);
    case CR__RPC_PUT_REVOKE:
        CNT(m, rpc_put_revoke_total)++;
        return cr__m_put_revoke_locked(m, in->key, in->key_len, in->version, now);
    case CR__RPC_GET_REPLICA_LIST:
        CNT(m, rpc_get_replica_list_total)++;
        return cr__m_get_replicas_locked(m, in->key, in->key_len, now, reply, out);
    case CR__RPC_EXIST:
        CNT(m, rpc_exist_total)++;
        return cr__m_exist_locked(m, in->key, in->key_len, (mflags & CR__RPC_HF_LEASE) != 0, now);
    case CR__RPC_GET_SIZE: {
        CNT(m, rpc_get_size_total)++;
        /* a client's get() asks the size first: its not-found is the read's
         * miss (the GetReplicaList that would count it is never sent) */
        int rc = cr__m_get_size_locked(m, in->key, in->key_len, &out->size);
        if (rc == CR_E_OBJECT_NOT_FOUND)
            CNT(m, misses_total)++;
        return rc;
    }
    case CR__RPC_REMOVE:
        CNT(m, rpc_remove_total)++;
        return cr__m_remove_locked(m, in->key, in->key_len, (in->flags & CR__RPC_F_FORCE) != 0,
                                   now);
    case CR__RPC_VALIDATE:
        CNT(m, rpc_validate_total)++;
        return cr__m_validate_locked(m, in->key, in->key_len, in->version, in->replica_id);
    default:
        return CR_E_INVALID_PARAMS;
    }
}

void cr__master_handle(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                       uint64_t now)
{
    uint16_t type = req->type & (uint16_t)~CR__RPC_REPLY;
    reply->status = 0;
    if (type == CR__RPC_FS_INFO || type == CR__RPC_FS_SYNC) {
        /* the shared-FS tier: its file I/O runs outside the lock (fs.c) */
        int rc = cr__master_fs_handle(m, req, reply, now);
        reply->status = rc == -ENOMEM ? CR_E_INTERNAL_ERROR : rc;
        if (reply->status) {
            pthread_mutex_lock(&m->mu);
            CNT(m, rpc_errors_total)++;
            pthread_mutex_unlock(&m->mu);
        }
        return;
    }
    if (CR__RPC_IS_TIER(type) || CR__RPC_IS_RTASK(type) || CR__RPC_IS_RESV(type)) {
        pthread_mutex_lock(&m->mu);
        int rc = CR__RPC_IS_TIER(type)    ? cr__m_tier_handle_locked(m, req, reply, now)
                 : CR__RPC_IS_RESV(type) ? cr__m_resv_handle_locked(m, req, reply, now)
                                          : cr__m_rtask_handle_locked(m, req, reply, now);
        if (!rc)
            rc = cr__m_caps_mint_locked(m, type, reply);
        if (rc == -ENOMEM)
            rc = CR_E_INTERNAL_ERROR;
        if (rc)
            CNT(m, rpc_errors_total)++;
        pthread_mutex_unlock(&m->mu);
        reply->status = rc;
        return;
    }
    if (cr__rpc_type_has_items(type)) {
        uint16_t bt = type >= CR__RPC_BATCH_PUT_START ? (uint16_t)(type - CR__RPC_BATCH_OFFSET)
                                                      : type;
        reply->items = req->n_items ? cr__rpc_msg_alloc(reply, req->n_items * sizeof *reply->items)
                                    : NULL;
        if (req->n_items && !reply->items) {
            reply->status = CR_E_INTERNAL_ERROR;
            return;
        }
        reply->n_items = req->n_items;
        pthread_mutex_lock(&m->mu);
        if (type != bt)
            CNT(m, rpc_batch_requests_total)++;
        if (bt == CR__RPC_PUT_START && req->n_items && cr__m_restoring_locked(m, now)) {
            /* right after a takeover or a restart from the journal, before
             * any node is back: no DRAM segment takes allocations yet, and
             * nothing may be evicted for a put. The whole request is
             * refused, nothing applied, with the status a client retries
             * PutStart on (client.c) instead of answering NO_AVAILABLE_HANDLE */
            CNT(m, puts_refused_restoring_total)++;
            CR_LOG_RL(CR__LOG_INFO, "master",
                      "PutStart refused (retried by the client): restored segments wait for "
                      "their nodes to mount again");
            pthread_mutex_unlock(&m->mu);
            memset(reply->items, 0, req->n_items * sizeof *reply->items);
            for (uint32_t i = 0; i < req->n_items; i++)
                reply->items[i].status = CR_E_UNAVAILABLE_IN_CURRENT_STATUS;
            reply->status = CR_E_UNAVAILABLE_IN_CURRENT_STATUS;
            return;
        }
        cr__m_map_prefetch(m, req->items, req->n_items);
        /* PutStart's exclusion list: resolved once for every item */
        excl_t ex = {.n = 0};
        if (bt == CR__RPC_PUT_START && req->n_exclude)
            cr__m_excl_resolve(m, req->exclude, req->n_exclude, &ex);
        for (uint32_t i = 0; i < req->n_items; i++) {
            cr__rpc_item_t *out = &reply->items[i];
            int rc = item_locked(m, bt, req->hflags, &ex, &req->items[i], out, reply, now);
            if (rc == -ENOMEM)
                rc = CR_E_INTERNAL_ERROR;
            if (rc) {
                /* a failed item carries no data */
                memset(out, 0, sizeof *out);
                /* a lookup's not-found is an answer (misses_total), not an error */
                if (!(rc == CR_E_OBJECT_NOT_FOUND &&
                      (bt == CR__RPC_EXIST || bt == CR__RPC_GET_SIZE ||
                       bt == CR__RPC_GET_REPLICA_LIST)))
                    CNT(m, rpc_errors_total)++;
            }
            out->status = rc;
        }
        if (cr__m_caps_mint_locked(m, type, reply)) {
            for (uint32_t i = 0; i < reply->n_items; i++) /* no grant, no replica list */
                if (!reply->items[i].status && reply->items[i].n_replicas)
                    reply->items[i].status = CR_E_INTERNAL_ERROR;
        }
        pthread_mutex_unlock(&m->mu);
        if (type == bt && reply->n_items == 1)
            reply->status = reply->items[0].status;
        return;
    }
    if (type == CR__RPC_REMOVE_BY_REGEX) { /* compiles its pattern outside the lock */
        reply->status = cr__master_remove_by_regex(m, req->pattern,
                                                   (req->flags & CR__RPC_F_FORCE) != 0, now,
                                                   &reply->count);
        return;
    }
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    switch (type) {
    case CR__RPC_PING:
        CNT(m, rpc_ping_total)++;
        rc = cr__m_ping_locked(m, req->client_id, now, &reply->flags);
        /* a heartbeat naming the segment its sender believes mounted: if
         * the master dropped it (expiry, restart), the sender remounts */
        if (!rc && req->segment) {
            uint32_t s = cr__m_seg_find(m, req->segment);
            if (s == NONE32 || m->segs[s].client != cr__m_client_find(m, req->client_id))
                reply->flags |= CR__RPC_F_NEED_REMOUNT;
        }
        if (m->caps)
            reply->flags |= CR__RPC_F_CAPS;
        reply->flags |= CR__RPC_F_EXCLUDE; /* PutStart's exclusion list is read */
        reply->master_id = m->master_id;
        reply->count = m->cfg.client_ttl_ms;
        break;
    case CR__RPC_MOUNT_SEGMENT:
        CNT(m, rpc_mount_segment_total)++;
        /* disk segments mount through TIER_MOUNT only */
        rc = cr__tier_is_ssd(req->segment) ? CR_E_INVALID_PARAMS : 0;
        if (!rc)
            rc = cr__m_mount_locked(m, req->client_id, req->segment, req->base, req->size, now);
        if (!rc)
            rc = cr__m_caps_mount_reply_locked(m, req->segment, reply);
        if (!rc) { /* a name still held (whole or in part) for a dropped
                    * segment's readers and writers: a client that wants a
                    * fresh name takes another port (its peers may still
                    * know the old process under this name) */
            uint32_t s = cr__m_seg_find(m, req->segment);
            uint64_t after = s != NONE32 ? m->segs[s].alloc_after_ms : 0;
            if (s != NONE32 && m->segs[s].held_until > after)
                after = m->segs[s].held_until;
            reply->count = after > now ? after - now : 0;
        }
        break;
    case CR__RPC_UNMOUNT_SEGMENT:
        CNT(m, rpc_unmount_segment_total)++;
        rc = cr__m_unmount_locked(m, req->client_id, req->segment, now);
        break;
    case CR__RPC_REMOVE_ALL:
        CNT(m, rpc_remove_all_total)++;
        rc = cr__m_remove_all_locked(m, (req->flags & CR__RPC_F_FORCE) != 0, now, &reply->count);
        break;
    default:
        rc = CR_E_INVALID_PARAMS;
    }
    if (rc == -ENOMEM)
        rc = CR_E_INTERNAL_ERROR;
    if (rc)
        CNT(m, rpc_errors_total)++;
    pthread_mutex_unlock(&m->mu);
    reply->status = rc;
}
