/* Store client side of replica tasks (store.h "replica tasks") and of the
 * per-replica clear. The master decides and allocates (store/master/
 * rtask.c); this client moves the bytes: source replica -> staging buffer
 * -> every new target replica, in chunks, with its Transfer Engine. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "store/client/client.h"

#define COPY_CHUNK (4ull << 20)

static void id_to_msg(cr__rpc_msg_t *m, cr_store_task_id_t id)
{
    m->base = id.hi;
    m->count = id.lo;
}

int cr_store_task_create(cr_store_t *s, int type, const char *key, const char *source,
                         const char *const *targets, size_t n, cr_store_task_id_t *id)
{
    if (!s || !id || (!targets && n) || (type != CR_STORE_TASK_COPY && type != CR_STORE_TASK_MOVE))
        return CR_E_INVALID_PARAMS;
    int rc = cr__sc_check_key(key);
    if (rc)
        return rc;
    if (n < 1 || n > CR_STORE_TASK_TARGETS_MAX || (type == CR_STORE_TASK_MOVE && n != 1))
        return CR_E_INVALID_PARAMS;
    if (type == CR_STORE_TASK_MOVE && (!source || !*source || strlen(source) >= CR_XFER_NAME_MAX))
        return CR_E_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++)
        if (!targets[i] || !*targets[i] || strlen(targets[i]) > CR__RPC_KEY_MAX)
            return CR_E_INVALID_PARAMS;
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_RTASK_CREATE;
    req.client_id = s->id;
    req.flags = (uint32_t)type;
    req.segment = type == CR_STORE_TASK_MOVE ? source : "";
    req.n_items = (uint32_t)n + 1;
    req.items = cr__rpc_msg_alloc(&req, req.n_items * sizeof *req.items);
    if (!req.items)
        return -ENOMEM;
    req.items[0].key = key;
    req.items[0].key_len = (uint32_t)strlen(key);
    for (size_t i = 0; i < n; i++) {
        req.items[i + 1].key = targets[i];
        req.items[i + 1].key_len = (uint32_t)strlen(targets[i]);
    }
    rc = cr__sc_call(s, &req, &rep);
    cr__rpc_msg_free(&req);
    if (rc)
        return rc;
    rc = rep.status;
    if (!rc)
        *id = (cr_store_task_id_t){.hi = rep.base, .lo = rep.count};
    cr__rpc_msg_free(&rep);
    return rc;
}

/* Copies the source replica of it[0] to the replicas of it[1..n). */
static int copy_bytes(cr_store_t *s, const cr__rpc_item_t *it, uint32_t n)
{
    const cr__rpc_item_t *src = &it[0];
    if (src->n_replicas != 1)
        return CR_E_INVALID_REPLICA;
    for (uint32_t i = 1; i < n; i++)
        if (it[i].n_replicas != 1 || it[i].replicas[0].n_shards != 1 ||
            it[i].replicas[0].shards[0].len != src->size)
            return CR_E_INVALID_REPLICA;
    uint64_t chunk = s->lbuf_size < COPY_CHUNK ? s->lbuf_size : COPY_CHUNK;
    if (chunk == 0 || !s->lbuf)
        return CR_E_INVALID_PARAMS; /* no staging buffer (local_buffer_size 0) */
    uint8_t *stg = cr__staging_alloc(&s->staging, chunk, (int)s->xfer_timeout_ms);
    if (!stg)
        return CR_E_UNAVAILABLE_IN_CURRENT_STATUS;
    int rc = 0;
    for (uint64_t off = 0; off < src->size && !rc; off += chunk) {
        uint64_t c = src->size - off < chunk ? src->size - off : chunk;
        rc = cr__sc_replica_io(s, &src->replicas[0], off, c, stg, 0);
        for (uint32_t i = 1; i < n && !rc; i++)
            rc = cr__sc_replica_io(s, &it[i].replicas[0], off, c, stg, 1);
    }
    cr__staging_free(&s->staging, stg, chunk);
    return rc;
}

int cr_store_task_run(cr_store_t *s, cr_store_task_id_t id)
{
    if (!s)
        return CR_E_INVALID_PARAMS;
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_RTASK_START;
    req.client_id = s->id;
    req.segment = "";
    id_to_msg(&req, id);
    int rc = cr__sc_call(s, &req, &rep);
    if (rc)
        return rc;
    rc = rep.status;
    int result = rc ? rc : (rep.n_items < 1 ? CR_E_INVALID_REPLICA : copy_bytes(s, rep.items, rep.n_items));
    cr__rpc_msg_free(&rep);
    if (rc) /* START refused: the master already failed the task (or never had it) */
        return rc;
    req.type = CR__RPC_RTASK_END;
    req.flags = (uint32_t)result;
    rc = cr__sc_call(s, &req, &rep);
    if (rc)
        return rc;
    rc = rep.status;
    cr__rpc_msg_free(&rep);
    if (rc)
        return rc;
    if (result)
        return result;
    /* the master may still fail it (object replaced meanwhile): ask */
    cr_store_task_info_t info;
    rc = cr_store_task_query(s, id, &info);
    return rc ? rc : info.error;
}

int cr_store_task_query(cr_store_t *s, cr_store_task_id_t id, cr_store_task_info_t *out)
{
    if (!s || !out)
        return CR_E_INVALID_PARAMS;
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_RTASK_QUERY;
    req.client_id = s->id;
    req.segment = "";
    id_to_msg(&req, id);
    int rc = cr__sc_call(s, &req, &rep);
    if (rc)
        return rc;
    rc = rep.status;
    if (!rc) {
        memset(out, 0, sizeof *out);
        out->status = (int)rep.flags;
        out->type = (int)rep.size;
        out->created_unix_ms = rep.base;
        out->updated_unix_ms = rep.count;
        snprintf(out->executor, sizeof out->executor, "%s", rep.segment ? rep.segment : "");
        if (rep.n_items >= 1) {
            out->error = rep.items[0].status;
            snprintf(out->message, sizeof out->message, "%.*s", (int)rep.items[0].key_len,
                     rep.items[0].key ? rep.items[0].key : "");
        }
    }
    cr__rpc_msg_free(&rep);
    return rc;
}

int cr_store_replica_clear(cr_store_t *s, const char *const *keys, size_t n, const char *segment,
                           int *results)
{
    if (!s || (n && (!keys || !results)) || n > CR__RPC_BATCH_MAX ||
        (segment && strlen(segment) >= CR_XFER_NAME_MAX))
        return CR_E_INVALID_PARAMS;
    if (n == 0)
        return 0;
    cr__rpc_msg_t req = {0}, rep = {0};
    req.type = CR__RPC_REPLICA_CLEAR;
    req.client_id = s->id;
    req.segment = segment ? segment : "";
    req.n_items = (uint32_t)n;
    req.items = cr__rpc_msg_alloc(&req, n * sizeof *req.items);
    if (!req.items)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!keys[i] || strlen(keys[i]) > CR__RPC_KEY_MAX) {
            cr__rpc_msg_free(&req);
            return CR_E_INVALID_PARAMS;
        }
        req.items[i].key = keys[i];
        req.items[i].key_len = (uint32_t)strlen(keys[i]);
    }
    int rc = cr__sc_call(s, &req, &rep);
    cr__rpc_msg_free(&req);
    if (rc)
        return rc;
    rc = rep.status;
    if (!rc && rep.n_items != n)
        rc = CR_E_RPC_FAIL;
    for (size_t i = 0; !rc && i < n; i++)
        results[i] = rep.items[i].status;
    cr__rpc_msg_free(&rep);
    return rc;
}
