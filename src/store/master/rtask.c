/* Replica tasks (Mooncake's create_copy_task / create_move_task /
 * query_task) and per-replica clear (batch_replica_clear).
 *
 * A task copies a complete object's bytes to more segments (COPY) or from
 * one segment to another (MOVE). The master owns the task: it validates the
 * request, allocates the target space, and changes the object's replica
 * list in one step when the copy is done. The bytes move through the
 * Transfer Engine of a client: the client that created the task drives it
 * (RTASK_START hands it the source replica and the new target blocks;
 * RTASK_END reports the result). A task not driven to its end within
 * RTASK_TIMEOUT_MS fails and its target space is released.
 *
 * Readers never see a target replica before RTASK_END adds it; the source
 * stays readable for the whole task (its lease is extended while the copy
 * runs, so neither a remove nor an eviction frees it under the copier).
 * Runs under m->mu like every cr__m_* function (master_priv.h). */
#include "store/master/master_priv.h"
#include "common/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"

#define RTASK_LIVE_MAX 1024       /* tasks pending or processing */
#define RTASK_DONE_MAX 4096       /* finished tasks kept for query_task */
#define RTASK_TIMEOUT_MS CR__M_RTASK_TIMEOUT_MS /* start-to-end (and create-to-start) bound */
#define RTASK_TARGETS_MAX (CR__RPC_REPLICA_MAX - 1)
#define RTASK_MSG 96

enum { T_PENDING = 0, T_PROCESSING = 1, T_SUCCESS = 2, T_FAILED = 3 }; /* Mooncake's TaskStatus */
enum { T_COPY = 0, T_MOVE = 1 };                                        /* Mooncake's TaskType */

typedef struct rtask {
    uint64_t hi, lo;
    uint8_t type, status, n_tgt;
    uint32_t src;                     /* MOVE: source segment */
    uint32_t tgt[RTASK_TARGETS_MAX];  /* target segments */
    uint32_t gen[RTASK_TARGETS_MAX];  /* their generation when allocated */
    uint32_t blk[RTASK_TARGETS_MAX];  /* allocated target blocks (NONE32: none) */
    uint64_t version;                 /* the object's version at create */
    uint64_t prev_until;              /* the object's lease before START extended it */
    uint64_t deadline;                /* monotonic ms: START (pending) or END (processing) */
    uint64_t created_unix, updated_unix;
    cr__rpc_client_id_t client;       /* creator = executor */
    int32_t err;
    char msg[RTASK_MSG];
    uint16_t key_len;
    char *key;
    /* HA: target blocks handed out at START are recorded as held (WIN,
     * store-ha.md) until adopted at END or their quarantine ends, so a new
     * leader never gives them to another object while a copier writes */
    uint8_t holds;                       /* bit i: target i's WIN not ended */
    uint64_t hold_off[RTASK_TARGETS_MAX], hold_len[RTASK_TARGETS_MAX];
    uint64_t hold_until;                 /* released targets: WINEND from then */
} rtask_t;

struct cr__mrtask {
    rtask_t *t; /* live tasks first? no: one array, finished ones are pruned oldest first */
    size_t n, cap;
    size_t live;
    uint64_t seq;
};

void cr__m_rtask_destroy(cr__master_t *m)
{
    if (!m->rtask)
        return;
    for (size_t i = 0; i < m->rtask->n; i++)
        free(m->rtask->t[i].key);
    free(m->rtask->t);
    free(m->rtask);
    m->rtask = NULL;
}

static rtask_t *task_find(cr__master_t *m, uint64_t hi, uint64_t lo)
{
    struct cr__mrtask *T = m->rtask;
    for (size_t i = 0; T && i < T->n; i++)
        if (T->t[i].hi == hi && T->t[i].lo == lo)
            return &T->t[i];
    return NULL;
}

/* WINEND for the holds of t whose segment is still the one they were on
 * (a dropped segment's records went with its SEGDROP). */
static void holds_end(cr__master_t *m, rtask_t *t)
{
    for (uint32_t i = 0; t->holds && i < t->n_tgt; i++) {
        if (!(t->holds & (1u << i)))
            continue;
        seg_t *sg = &m->segs[t->tgt[i]];
        if (sg->live && sg->gen == t->gen[i])
            cr__m_jr_range(m, CR__HA_WINEND, sg, t->hold_off[i], t->hold_len[i]);
        t->holds &= (uint8_t)~(1u << i);
    }
}

void cr__m_rtask_jr_holds(cr__master_t *m)
{
    struct cr__mrtask *T = m->rtask;
    for (size_t k = 0; T && k < T->n; k++) {
        rtask_t *t = &T->t[k];
        for (uint32_t i = 0; t->holds && i < t->n_tgt; i++) {
            seg_t *sg = &m->segs[t->tgt[i]];
            if ((t->holds & (1u << i)) && sg->live && sg->gen == t->gen[i])
                cr__m_jr_range(m, CR__HA_WIN, sg, t->hold_off[i], t->hold_len[i]);
        }
    }
}

uint64_t cr__m_rtask_seg_dropped(cr__master_t *m, uint32_t s, uint64_t now, held_set_t *hs)
{
    struct cr__mrtask *T = m->rtask;
    seg_t *sg = &m->segs[s];
    uint64_t hold = 0;
    for (size_t k = 0; T && k < T->n; k++) {
        rtask_t *t = &T->t[k];
        for (uint32_t i = 0; i < t->n_tgt; i++) {
            if (t->tgt[i] != s || t->gen[i] != sg->gen || t->blk[i] == NONE32)
                continue;
            /* its copier may write until the deadline, and a late transfer
             * one timeout more (release_targets); the block stays named in
             * the task, so that its END fails (the segment is gone) */
            uint64_t until = (t->deadline > now ? t->deadline : now) + RTASK_TIMEOUT_MS;
            cr__m_held_add(m, hs, cr__oalloc_block_offset(sg->alloc, t->blk[i]),
                           cr__oalloc_block_size(sg->alloc, t->blk[i]), until, now);
            if (until > hold)
                hold = until;
        }
    }
    return hold;
}

/* Drops the oldest finished tasks beyond RTASK_DONE_MAX. */
static void prune_done(cr__master_t *m, struct cr__mrtask *T)
{
    size_t done = T->n - T->live;
    for (size_t i = 0; i < T->n && done > RTASK_DONE_MAX;) {
        if (T->t[i].status >= T_SUCCESS) {
            holds_end(m, &T->t[i]);
            free(T->t[i].key);
            memmove(&T->t[i], &T->t[i + 1], (T->n - i - 1) * sizeof *T->t);
            T->n--;
            done--;
        } else {
            i++;
        }
    }
}

/* Releases the target blocks a task still holds (never seen by a reader,
 * but a copier that gave up may still be writing: quarantined). */
static void release_targets(cr__master_t *m, rtask_t *t, uint64_t now)
{
    for (uint32_t i = 0; i < t->n_tgt; i++) {
        if (t->blk[i] == NONE32)
            continue;
        seg_t *sg = &m->segs[t->tgt[i]];
        if (sg->live && sg->gen == t->gen[i])
            cr__m_block_release(m, t->tgt[i], t->blk[i], now + RTASK_TIMEOUT_MS, now);
        t->blk[i] = NONE32;
    }
    t->hold_until = now + RTASK_TIMEOUT_MS; /* a copier may write until then */
}

static void finish(cr__master_t *m, rtask_t *t, int err, const char *why, uint64_t now)
{
    if (t->status >= T_SUCCESS)
        return;
    release_targets(m, t, now);
    t->status = err ? T_FAILED : T_SUCCESS;
    t->err = err;
    snprintf(t->msg, sizeof t->msg, "%s", why ? why : "");
    t->updated_unix = cr__unix_ms();
    m->rtask->live--;
    CNT(m, rtask_done_total)++;
    if (err)
        CNT(m, rtask_failed_total)++;
}

/* Index of the replica of o with a shard on segment s, or -1. */
static int replica_on(cr__master_t *m, obj_t *o, uint32_t s)
{
    (void)m;
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD))
            for (uint32_t k = 0; k < n; k++)
                if (sh[k].seg == s)
                    return (int)r;
        sh += n;
    }
    return -1;
}

/* Drops replica r of o: its space is released after o's lease. */
static void drop_replica(cr__master_t *m, obj_t *o, uint32_t r, uint64_t now)
{
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    for (uint32_t i = 0; i < r; i++)
        sh += nsh[i] & 0x7f;
    uint64_t rel = cr__m_obj_release_ms(m, o, now);
    for (uint32_t k = 0; k < (nsh[r] & 0x7fu); k++)
        cr__m_block_release(m, sh[k].seg, sh[k].blk, rel, now);
    nsh[r] |= REP_DEAD;
    m->state_seq++;
}

static int live_replicas(obj_t *o)
{
    int n = 0;
    for (uint32_t r = 0; r < o->n_rep; r++)
        n += !(obj_nsh(o)[r] & REP_DEAD);
    return n;
}

/* A segment a task may write to: mounted DRAM, open for allocation. */
static uint32_t target_seg(cr__master_t *m, const char *name, uint64_t now)
{
    uint32_t s = name && *name ? cr__m_seg_find(m, name) : NONE32;
    if (s == NONE32 || !m->segs[s].live || m->segs[s].tier || m->segs[s].alloc_after_ms > now)
        return NONE32;
    return s;
}

static int create_locked(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                         uint64_t now)
{
    if (req->n_items < 1 || req->flags > T_MOVE)
        return CR_E_INVALID_PARAMS;
    const cr__rpc_item_t *k = &req->items[0];
    if (!key_ok(k->key, k->key_len))
        return CR_E_INVALID_KEY;
    uint32_t client = cr__m_client_find(m, req->client_id);
    if (client == NONE32)
        return CR_E_CLIENT_NOT_FOUND;
    obj_t *o = cr__m_lookup_complete(m, k->key, k->key_len);
    if (!o)
        return CR_E_OBJECT_NOT_FOUND;
    rtask_t t = {.type = (uint8_t)req->flags, .src = NONE32, .version = o->version};
    if (t.type == T_COPY) {
        if (req->n_items < 2 || req->n_items - 1 > RTASK_TARGETS_MAX)
            return CR_E_INVALID_PARAMS;
        for (uint32_t i = 1; i < req->n_items; i++) {
            uint32_t s = target_seg(m, req->items[i].key, now);
            if (s == NONE32)
                return CR_E_INVALID_PARAMS;
            int dup = 0;
            for (uint32_t j = 0; j < t.n_tgt; j++)
                dup |= t.tgt[j] == s;
            if (!dup)
                t.tgt[t.n_tgt++] = s;
        }
    } else {
        if (req->n_items != 2)
            return CR_E_INVALID_PARAMS;
        t.src = req->segment && *req->segment ? cr__m_seg_find(m, req->segment) : NONE32;
        uint32_t d = target_seg(m, req->items[1].key, now);
        if (t.src == NONE32 || d == NONE32 || d == t.src || replica_on(m, o, t.src) < 0)
            return CR_E_INVALID_PARAMS;
        t.tgt[t.n_tgt++] = d;
    }
    if (!cr__m_obj_in_dram(m, o))
        return CR_E_INVALID_PARAMS; /* nothing in memory to copy from */
    if (!m->rtask && !(m->rtask = calloc(1, sizeof *m->rtask)))
        return -ENOMEM;
    struct cr__mrtask *T = m->rtask;
    if (T->live >= RTASK_LIVE_MAX)
        return CR_E_TASK_PENDING_LIMIT_EXCEEDED;
    if (T->n == T->cap) {
        size_t nc = T->cap ? T->cap * 2 : 64;
        rtask_t *n = realloc(T->t, nc * sizeof *n);
        if (!n)
            return -ENOMEM;
        T->t = n;
        T->cap = nc;
    }
    t.key = malloc(k->key_len);
    if (!t.key)
        return -ENOMEM;
    memcpy(t.key, k->key, k->key_len);
    t.key_len = (uint16_t)k->key_len;
    for (uint32_t i = 0; i < RTASK_TARGETS_MAX; i++)
        t.blk[i] = NONE32;
    t.hi = m->master_id;
    t.lo = ++T->seq;
    t.client = req->client_id;
    t.deadline = now + RTASK_TIMEOUT_MS;
    t.created_unix = t.updated_unix = cr__unix_ms();
    T->t[T->n++] = t;
    T->live++;
    CNT(m, rtask_created_total)++;
    prune_done(m, T);
    reply->base = t.hi;
    reply->count = t.lo;
    return 0;
}

static int query_locked(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply)
{
    rtask_t *t = task_find(m, req->base, req->count);
    if (!t)
        return CR_E_TASK_NOT_FOUND;
    reply->flags = t->status;
    reply->size = t->type;
    reply->base = t->created_unix;
    reply->count = t->updated_unix;
    char who[40];
    snprintf(who, sizeof who, "%016llx%016llx", (unsigned long long)t->client.hi,
             (unsigned long long)t->client.lo);
    reply->segment = cr__rpc_msg_strdup(reply, who, strlen(who));
    reply->items = cr__rpc_msg_alloc(reply, sizeof *reply->items);
    if (!reply->segment || !reply->items)
        return -ENOMEM;
    reply->n_items = 1;
    reply->items[0].key = cr__rpc_msg_strdup(reply, t->msg, strlen(t->msg));
    reply->items[0].key_len = (uint32_t)strlen(t->msg);
    reply->items[0].status = t->err;
    return reply->items[0].key ? 0 : -ENOMEM;
}

/* One single-shard replica [segment s, block b) of size bytes into it. */
static int put_block(cr__master_t *m, cr__rpc_msg_t *msg, cr__rpc_item_t *it, uint32_t s,
                     uint32_t b, uint64_t size)
{
    seg_t *sg = &m->segs[s];
    it->replicas = cr__rpc_msg_alloc(msg, sizeof *it->replicas);
    if (!it->replicas)
        return -ENOMEM;
    cr__rpc_replica_t *rp = it->replicas;
    it->n_replicas = 1;
    rp->n_shards = 1;
    rp->shards = cr__rpc_msg_alloc(msg, sizeof *rp->shards);
    if (!rp->shards)
        return -ENOMEM;
    rp->shards[0].segment = cr__rpc_msg_strdup(msg, sg->name, strlen(sg->name));
    rp->shards[0].addr = sg->base + cr__oalloc_block_offset(sg->alloc, b);
    rp->shards[0].len = size;
    return rp->shards[0].segment ? 0 : -ENOMEM;
}

static int start_locked(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                        uint64_t now)
{
    rtask_t *t = task_find(m, req->base, req->count);
    if (!t)
        return CR_E_TASK_NOT_FOUND;
    if (t->status != T_PENDING || t->client.hi != req->client_id.hi ||
        t->client.lo != req->client_id.lo)
        return CR_E_INVALID_PARAMS;
    obj_t *o = cr__m_lookup_complete(m, t->key, t->key_len);
    if (!o || o->version != t->version) {
        finish(m, t, CR_E_OBJECT_NOT_FOUND, "object removed or replaced", now);
        return CR_E_OBJECT_NOT_FOUND;
    }
    /* the replica copied from: MOVE's source, else a DRAM replica */
    int src = -1;
    if (t->type == T_MOVE) {
        src = replica_on(m, o, t->src);
    } else {
        uint8_t *nsh = obj_nsh(o);
        shard_t *sh = obj_shards(o);
        for (uint32_t r = 0; r < o->n_rep && src < 0; r++) {
            if (!(nsh[r] & REP_DEAD) && !m->segs[sh[0].seg].tier)
                src = (int)r;
            sh += nsh[r] & 0x7f;
        }
    }
    if (src < 0) {
        finish(m, t, CR_E_REPLICA_NOT_FOUND, "source replica gone", now);
        return CR_E_REPLICA_NOT_FOUND;
    }
    /* targets already holding a replica need nothing */
    uint32_t n_new = 0;
    for (uint32_t i = 0; i < t->n_tgt; i++) {
        seg_t *sg = &m->segs[t->tgt[i]];
        if (!sg->live || replica_on(m, o, t->tgt[i]) >= 0)
            continue;
        if (live_replicas(o) + n_new >= CR__RPC_REPLICA_MAX || o->n_rep + n_new >= CR__RPC_REPLICA_MAX) {
            release_targets(m, t, now);
            finish(m, t, CR_E_INVALID_PARAMS, "too many replicas", now);
            return CR_E_INVALID_PARAMS;
        }
        uint64_t off;
        uint32_t b = cr__oalloc_alloc(sg->alloc, o->size, &off);
        if (b == CR__OALLOC_NONE) {
            finish(m, t, CR_E_NO_AVAILABLE_HANDLE, "no space on a target segment", now);
            return CR_E_NO_AVAILABLE_HANDLE;
        }
        m->allocated += cr__oalloc_block_size(sg->alloc, b);
        t->blk[i] = b;
        t->gen[i] = sg->gen;
        t->hold_off[i] = cr__oalloc_block_offset(sg->alloc, b);
        t->hold_len[i] = cr__oalloc_block_size(sg->alloc, b);
        t->holds |= (uint8_t)(1u << i);
        cr__m_jr_range(m, CR__HA_WIN, sg, t->hold_off[i], t->hold_len[i]);
        n_new++;
    }
    reply->items = cr__rpc_msg_alloc(reply, (1 + n_new) * sizeof *reply->items);
    if (!reply->items)
        return -ENOMEM;
    reply->n_items = 1 + n_new;
    cr__rpc_item_t *it = &reply->items[0];
    it->key = cr__rpc_msg_strdup(reply, t->key, t->key_len);
    it->key_len = t->key_len;
    it->version = o->version;
    it->size = o->size;
    it->replicas = cr__rpc_msg_alloc(reply, sizeof *it->replicas);
    if (!it->key || !it->replicas)
        return -ENOMEM;
    {
        uint8_t *nsh = obj_nsh(o);
        shard_t *sh = obj_shards(o);
        for (int r = 0; r < src; r++)
            sh += nsh[r] & 0x7f;
        uint32_t n = nsh[src] & 0x7f;
        cr__rpc_replica_t *rp = it->replicas;
        it->n_replicas = 1;
        rp->replica_id = REPLICA_ID(o->version, (uint32_t)src);
        rp->n_shards = n;
        rp->shards = cr__rpc_msg_alloc(reply, n * sizeof *rp->shards);
        if (!rp->shards)
            return -ENOMEM;
        uint64_t left = o->size;
        for (uint32_t k = 0; k < n; k++) {
            seg_t *sg = &m->segs[sh[k].seg];
            uint64_t bs = cr__oalloc_block_size(sg->alloc, sh[k].blk);
            uint64_t len = k + 1 == n ? left : (bs < left ? bs : left);
            rp->shards[k].segment = cr__rpc_msg_strdup(reply, sg->name, strlen(sg->name));
            if (!rp->shards[k].segment)
                return -ENOMEM;
            rp->shards[k].addr = sg->base + cr__oalloc_block_offset(sg->alloc, sh[k].blk);
            rp->shards[k].len = len;
            left -= len;
        }
    }
    uint32_t j = 1;
    for (uint32_t i = 0; i < t->n_tgt; i++) {
        if (t->blk[i] == NONE32)
            continue;
        int rc = put_block(m, reply, &reply->items[j++], t->tgt[i], t->blk[i], o->size);
        if (rc)
            return rc;
    }
    /* the source stays readable until END (or the timeout) */
    t->prev_until = o->until_ms;
    if (o->until_ms < now + RTASK_TIMEOUT_MS)
        o->until_ms = now + RTASK_TIMEOUT_MS;
    t->status = T_PROCESSING;
    t->deadline = now + RTASK_TIMEOUT_MS;
    t->updated_unix = cr__unix_ms();
    return 0;
}

static int end_locked(cr__master_t *m, const cr__rpc_msg_t *req, uint64_t now)
{
    rtask_t *t = task_find(m, req->base, req->count);
    if (!t)
        return CR_E_TASK_NOT_FOUND;
    if (t->status != T_PROCESSING || t->client.hi != req->client_id.hi ||
        t->client.lo != req->client_id.lo)
        return CR_E_INVALID_PARAMS;
    int32_t result = (int32_t)req->flags;
    obj_t *o = cr__m_lookup_complete(m, t->key, t->key_len);
    if (o && o->version == t->version) {
        /* give back the lease START took; readers since hold at most lease_ttl */
        uint64_t u = now + m->cfg.lease_ttl_ms;
        o->until_ms = t->prev_until > u ? t->prev_until : u;
    }
    if (result) {
        finish(m, t, result, "copy failed", now);
        return 0;
    }
    if (!o || o->version != t->version) {
        finish(m, t, CR_E_OBJECT_NOT_FOUND, "object removed or replaced", now);
        return 0;
    }
    for (uint32_t i = 0; i < t->n_tgt; i++) {
        seg_t *sg = &m->segs[t->tgt[i]];
        if (t->blk[i] != NONE32 && (!sg->live || sg->gen != t->gen[i])) {
            finish(m, t, CR_E_SEGMENT_NOT_FOUND, "target segment unmounted", now);
            return 0;
        }
    }
    for (uint32_t i = 0; i < t->n_tgt; i++) {
        if (t->blk[i] == NONE32)
            continue;
        obj_t *n = cr__m_obj_add_replica(m, o, t->tgt[i], t->blk[i]);
        if (n && m->caps) /* the copier's WRITE grant (caps.c) verifies until the deadline */
            obj_wcap_until(n, now, t->deadline);
        if (!n) {
            finish(m, t, CR_E_INTERNAL_ERROR, "cannot add the replica", now);
            cr__m_jr_obj(m, o);
            return 0;
        }
        o = n;
        t->blk[i] = NONE32; /* the object owns it now */
    }
    if (t->type == T_MOVE) {
        int r = replica_on(m, o, t->src);
        if (r >= 0 && live_replicas(o) > 1)
            drop_replica(m, o, (uint32_t)r, now);
    }
    m->state_seq++;
    cr__m_jr_obj(m, o);
    finish(m, t, 0, "", now);
    holds_end(m, t); /* the OBJ record above describes the adopted blocks */
    return 0;
}

static int clear_locked(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                        uint64_t now)
{
    uint32_t s = NONE32;
    if (req->segment && *req->segment) {
        s = cr__m_seg_find(m, req->segment);
        if (s == NONE32) { /* no replica can be there */
            reply->items = req->n_items ? cr__rpc_msg_alloc(reply, req->n_items * sizeof *reply->items) : NULL;
            if (req->n_items && !reply->items)
                return -ENOMEM;
            reply->n_items = req->n_items;
            for (uint32_t i = 0; i < req->n_items; i++)
                reply->items[i].status = CR_E_OBJECT_NOT_FOUND;
            return 0;
        }
    }
    reply->items = req->n_items ? cr__rpc_msg_alloc(reply, req->n_items * sizeof *reply->items) : NULL;
    if (req->n_items && !reply->items)
        return -ENOMEM;
    reply->n_items = req->n_items;
    for (uint32_t i = 0; i < req->n_items; i++) {
        const cr__rpc_item_t *in = &req->items[i];
        int rc = 0;
        obj_t *o = key_ok(in->key, in->key_len) ? cr__m_lookup_complete(m, in->key, in->key_len)
                                                 : NULL;
        int r = o && s != NONE32 ? replica_on(m, o, s) : 0;
        if (!o || r < 0) {
            rc = CR_E_OBJECT_NOT_FOUND;
        } else if (o->until_ms > now) {
            rc = CR_E_OBJECT_HAS_LEASE;
        } else if (s == NONE32 || live_replicas(o) <= 1) {
            cr__m_obj_delete(m, o, cr__m_obj_release_ms(m, o, now), now);
            CNT(m, removed_objects_total)++;
        } else {
            drop_replica(m, o, (uint32_t)r, now);
            obj_t *l = cr__m_obj_list(m, o);
            list_unlink(o);
            list_push_front(l, o);
            cr__m_jr_obj(m, o);
        }
        reply->items[i].status = rc;
    }
    return 0;
}

int cr__m_rtask_handle_locked(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                              uint64_t now)
{
    switch (req->type & (uint16_t)~CR__RPC_REPLY) {
    case CR__RPC_RTASK_CREATE:
        return create_locked(m, req, reply, now);
    case CR__RPC_RTASK_QUERY:
        return query_locked(m, req, reply);
    case CR__RPC_RTASK_START:
        return start_locked(m, req, reply, now);
    case CR__RPC_RTASK_END:
        return end_locked(m, req, now);
    case CR__RPC_REPLICA_CLEAR:
        return clear_locked(m, req, reply, now);
    default:
        return CR_E_INVALID_PARAMS;
    }
}

void cr__m_rtask_tick(cr__master_t *m, uint64_t now)
{
    struct cr__mrtask *T = m->rtask;
    for (size_t i = 0; T && T->live && i < T->n; i++) {
        rtask_t *t = &T->t[i];
        if (t->status < T_SUCCESS && t->deadline <= now) {
            CR_LOG_INFO("master", "replica task %llu of '%.*s' timed out",
                        (unsigned long long)t->lo, t->key_len > 64 ? 64 : (int)t->key_len, t->key);
            finish(m, t, CR_E_RPC_FAIL, "timed out", now);
        }
    }
    for (size_t i = 0; T && i < T->n; i++) /* released targets past their quarantine */
        if (T->t[i].holds && T->t[i].status >= T_SUCCESS && T->t[i].hold_until <= now)
            holds_end(m, &T->t[i]);
}
