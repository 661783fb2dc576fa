/* Store client metadata calls for Mooncake's API: replica descriptors of an
 * object (get_replica_desc), the forced form of remove_all, and
 * remove_by_regex. Each is one master round trip; no data moves. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "store/client/client.h"

_Static_assert(CR_STORE_SHARD_MAX == CR__RPC_SHARD_MAX, "shard bounds agree");
_Static_assert(CR_STORE_SEGMENT_NAME_MAX == CR__RPC_SEGMENT_NAME_MAX, "name bounds agree");

int cr_store_get_replica_desc(cr_store_t *s, const char *key, cr_store_replica_desc_t *out,
                              size_t cap, size_t *n, uint64_t *size)
{
    if (!s || !n || (!out && cap))
        return CR_E_INVALID_PARAMS;
    int rc = cr__sc_check_key(key);
    if (rc)
        return rc;
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_GET_REPLICA_LIST;
    req.n_items = 1;
    req.items = cr__rpc_msg_alloc(&req, sizeof *req.items);
    if (!req.items)
        return -ENOMEM;
    req.items[0].key = key;
    req.items[0].key_len = (uint32_t)strlen(key);
    rc = cr__sc_call(s, &req, &rep);
    cr__rpc_msg_free(&req);
    if (rc)
        return rc;
    if (rep.n_items != 1) {
        rc = rep.status ? rep.status : CR_E_RPC_FAIL;
        goto out;
    }
    const cr__rpc_item_t *it = &rep.items[0];
    rc = it->status;
    if (rc)
        goto out;
    for (uint32_t r = 0; r < it->n_replicas && r < cap; r++) {
        const cr__rpc_replica_t *rp = &it->replicas[r];
        cr_store_replica_desc_t *d = &out[r];
        memset(d, 0, sizeof *d);
        d->replica_id = rp->replica_id;
        d->n_shards = rp->n_shards < CR_STORE_SHARD_MAX ? rp->n_shards : CR_STORE_SHARD_MAX;
        for (uint32_t k = 0; k < d->n_shards; k++) {
            snprintf(d->shards[k].segment, sizeof d->shards[k].segment, "%s",
                     rp->shards[k].segment ? rp->shards[k].segment : "");
            d->shards[k].addr = rp->shards[k].addr;
            d->shards[k].len = rp->shards[k].len;
        }
    }
    *n = it->n_replicas;
    if (size)
        *size = it->size;
out:
    cr__rpc_msg_free(&rep);
    return rc;
}

int cr_store_remove_all_force(cr_store_t *s, int force, uint64_t *removed)
{
    if (!s)
        return CR_E_INVALID_PARAMS;
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_REMOVE_ALL;
    req.flags = force ? CR__RPC_F_FORCE : 0;
    int rc = cr__sc_call(s, &req, &rep);
    if (rc)
        return rc;
    rc = rep.status;
    if (!rc && removed)
        *removed = rep.count;
    cr__rpc_msg_free(&rep);
    return rc;
}

int cr_store_remove_by_regex(cr_store_t *s, const char *pattern, int force, uint64_t *removed)
{
    if (!s || !pattern || !*pattern || strlen(pattern) > CR_STORE_KEY_MAX)
        return CR_E_INVALID_PARAMS;
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_REMOVE_BY_REGEX;
    req.flags = force ? CR__RPC_F_FORCE : 0;
    req.pattern = pattern;
    int rc = cr__sc_call(s, &req, &rep);
    if (rc)
        return rc;
    rc = rep.status;
    if (!rc && removed)
        *removed = rep.count;
    cr__rpc_msg_free(&rep);
    return rc;
}
