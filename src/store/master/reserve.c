/* Client space reservations: the master half of the one-round-trip put
 * (docs/architecture/store-master.md, "One round trip: reservations").
 *
 * RESERVE hands a client a range of one DRAM segment (a reservation: at
 * most 1/16 of the segment and 64 MiB) with an expiry, and a WRITE
 * capability over it. The client carves small values out of it itself,
 * writes them with the Transfer Engine, and sends one PUT_COMMIT per value
 * (or a batch of them): key, segment, address, size, crc32c. The commit
 * creates the complete object exactly as PutStart + PutEnd would have
 * (version, eviction list, tier / shared-FS hooks, an OBJ record) when the
 * range lies inside that client's live reservation at or after the
 * reservation's commit cursor (so it overlaps nothing committed); anything
 * else is refused with CR_E_INVALID_WRITE and leaves nothing visible (the
 * client falls back to PutStart/PutEnd).
 *
 * Space: the reservation is one allocator block [cur, end) (counted as
 * allocated). A commit of [a, b) frees it and reserves, at fixed offsets,
 * the skipped gap [cur, a) (quarantined: a write of the holder may still
 * land there), the object's block [a, b) and the rest [b, end). Commits of
 * one reservation therefore ascend; a value committed out of order is
 * refused (the client falls back).
 *
 * Safety rules:
 *  - Space a reservation held and no object took is never reused before
 *    expiry + put timeout (nor before the WRITE grant over it expires): the holder starts no write after expiry (minus a
 *    margin, client side) and its transfers time out within a put timeout,
 *    the same reasoning as a pending put's quarantine. This holds however
 *    the reservation ends: expiry, its client's heartbeat lapsing, memory
 *    pressure (a placement that failed closes every open reservation),
 *    a newer reservation of the same client past the per-client bound.
 *    A segment unmounted under a reservation holds its range with its name
 *    like a pending put does (held.c: quarantined if the same memory is
 *    mounted again) until then. Exception: a tail the holder handed back
 *    (resv_hand_back: it writes nothing above its carve cursor) is free at
 *    once, or, with capabilities on, once the WRITE
 *    grant over it expires (a grant cannot be recalled).
 *  - HA: a reservation is a WIN record over its range (waited for before
 *    the RESERVE reply, like a window), and its WINEND is emitted only when
 *    the quarantine of the space it held is over (or nothing of it is left
 *    uncommitted). A new leader restores an open WIN quarantined for two
 *    put timeouts minus the objects it knows in it (window.c, durable.c);
 *    the reservation lease is at most one put timeout, so every write of
 *    the holder lands inside that quarantine. The new leader does not know
 *    the reservation itself: commits to it are refused (the client falls
 *    back). A commit's OBJ record is waited for like a PutEnd's.
 *  - Bounds: RESV_PER_CLIENT open reservations per client (the oldest is
 *    closed to open another), RESV_MAX entries in all (open or waiting for
 *    their quarantine), RESV_CLIENT_CLOSING closing ones per client.
 * Caller holds m->mu everywhere. */
#include "store/master/master_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

#define RESV_LEN_MAX (64ull << 20)
#define RESV_SEG_FRACTION 16
#define RESV_LEASE_MS 10000ull /* capped at one put timeout (see above) */
#define RESV_MAX 1024
#define RESV_PER_CLIENT 2
#define RESV_CLIENT_CLOSING 64

typedef struct resv {
    uint64_t id;
    cr__rpc_client_id_t owner;
    uint32_t seg, gen;
    uint32_t blk;             /* the free rest [cur, end); NONE32: none left */
    uint64_t start, cur, end; /* offsets in the segment; end: lowered by a hand-back */
    uint64_t jend;            /* the end its WIN record names (never lowered) */
    uint64_t expire_ms;       /* its holder starts no write after this */
    uint64_t hold_ms;         /* its space is not reused before (see above) */
    uint64_t cap_until_ms;    /* its WRITE grant expires (capabilities on), else 0 */
    uint64_t release_ms;      /* closed: its WINEND and the entry's end */
    uint64_t tail_hold_ms;    /* a handed-back tail is quarantined until (caps on) */
    int open, gap;            /* gap: some of its space was quarantined */
} resv_t;

struct cr__mresv {
    resv_t *v;
    uint32_t n, cap;
    uint64_t next_id;
};

uint64_t cr__m_resv_lease_ms(const cr__master_t *m)
{
    return m->cfg.put_timeout_ms < RESV_LEASE_MS ? m->cfg.put_timeout_ms : RESV_LEASE_MS;
}

static uint64_t resv_hold_until(const cr__master_t *m, const resv_t *r)
{
    (void)m;
    return r->hold_ms;
}

/* Bytes of r not committed and still held as its block (m->resv_free). */
static uint64_t rest_of(const resv_t *r)
{
    return r->blk == NONE32 ? 0 : r->end - r->cur;
}

static void jr_resv(cr__master_t *m, uint8_t type, const resv_t *r)
{
    cr__m_jr_range(m, type, &m->segs[r->seg], r->start, r->jend - r->start);
}

static void resv_remove(struct cr__mresv *rv, uint32_t i)
{
    rv->v[i] = rv->v[--rv->n];
}

/* Closes open reservation i: its rest is not reused before hold (a
 * writer of the holder may still land there); the entry (and its WIN)
 * stays until nothing of it is held any more: the rest's hold and the
 * full hold of any gap a commit skipped. Returns 1 if the entry was
 * removed (index i reused). */
static int resv_close_at(cr__master_t *m, uint32_t i, uint64_t now, uint64_t hold)
{
    struct cr__mresv *rv = m->resv;
    resv_t *r = &rv->v[i];
    seg_t *sg = &m->segs[r->seg];
    int here = sg->live && sg->gen == r->gen;
    uint64_t until = r->gap ? resv_hold_until(m, r) : 0;
    if (r->tail_hold_ms > until)
        until = r->tail_hold_ms;
    r->open = 0;
    m->resv_free -= rest_of(r);
    if (r->blk != NONE32 && here) {
        cr__m_block_release(m, r->seg, r->blk, hold, now);
        if (hold > until)
            until = hold;
    }
    r->blk = NONE32;
    r->release_ms = until;
    if (until <= now || !here) {
        if (here)
            jr_resv(m, CR__HA_WINEND, r);
        resv_remove(rv, i);
        return 1;
    }
    return 0;
}

static int resv_close(cr__master_t *m, uint32_t i, uint64_t now)
{
    return resv_close_at(m, i, now, resv_hold_until(m, &m->resv->v[i]));
}

void cr__m_resv_tick(cr__master_t *m, uint64_t now)
{
    struct cr__mresv *rv = m->resv;
    if (!rv)
        return;
    for (uint32_t i = 0; i < rv->n;) {
        resv_t *r = &rv->v[i];
        if (r->open && r->expire_ms <= now) {
            CNT(m, reservations_expired_total)++;
            if (resv_close(m, i, now))
                continue;
        }
        if (!r->open && r->release_ms <= now) {
            seg_t *sg = &m->segs[r->seg];
            if (sg->live && sg->gen == r->gen)
                jr_resv(m, CR__HA_WINEND, r);
            resv_remove(rv, i);
            continue;
        }
        i++;
    }
}

void cr__m_resv_reclaim_all(cr__master_t *m, uint64_t now)
{
    struct cr__mresv *rv = m->resv;
    if (!rv)
        return;
    for (uint32_t i = 0; i < rv->n;) {
        if (rv->v[i].open) {
            CNT(m, reservations_reclaimed_total)++;
            if (resv_close(m, i, now))
                continue;
        }
        i++;
    }
}

void cr__m_resv_client_gone(cr__master_t *m, cr__rpc_client_id_t id, uint64_t now)
{
    struct cr__mresv *rv = m->resv;
    if (!rv)
        return;
    for (uint32_t i = 0; i < rv->n;) {
        resv_t *r = &rv->v[i];
        if (r->open && r->owner.hi == id.hi && r->owner.lo == id.lo) {
            CNT(m, reservations_reclaimed_total)++;
            if (resv_close(m, i, now))
                continue;
        }
        i++;
    }
}

uint64_t cr__m_resv_seg_dropped(cr__master_t *m, uint32_t s, uint64_t now, held_set_t *hs)
{
    struct cr__mresv *rv = m->resv;
    uint64_t hold = 0;
    if (!rv)
        return 0;
    for (uint32_t i = 0; i < rv->n;) {
        resv_t *r = &rv->v[i];
        if (r->seg == s && r->gen == m->segs[s].gen) {
            /* the allocator goes away with the segment: nothing to free;
             * the name is held until the holder can no longer write */
            uint64_t h = r->open ? resv_hold_until(m, r) : r->release_ms;
            m->resv_free -= rest_of(r);
            if (h > now && h > hold)
                hold = h;
            /* its whole range until h (objects committed in it come with
             * their replicas' own times too: overlaps keep the later) */
            cr__m_held_add(m, hs, r->start, r->jend - r->start, h, now);
            jr_resv(m, CR__HA_WINEND, r);
            resv_remove(rv, i);
            continue;
        }
        i++;
    }
    return hold;
}

void cr__m_resv_jr_all(cr__master_t *m)
{
    struct cr__mresv *rv = m->resv;
    for (uint32_t i = 0; rv && i < rv->n; i++)
        if (m->segs[rv->v[i].seg].live && m->segs[rv->v[i].seg].gen == rv->v[i].gen)
            jr_resv(m, CR__HA_WIN, &rv->v[i]);
}

void cr__m_resv_stats_locked(cr__master_t *m, uint64_t *counters)
{
    struct cr__mresv *rv = m->resv;
    uint64_t bytes = 0;
    for (uint32_t i = 0; rv && i < rv->n; i++)
        if (rv->v[i].open)
            bytes += rv->v[i].end - rv->v[i].cur;
    counters[CR__MM_reservations] = rv ? rv->n : 0;
    counters[CR__MM_reserved_bytes] = bytes;
}

void cr__m_resv_destroy(cr__master_t *m)
{
    if (!m->resv)
        return;
    free(m->resv->v);
    free(m->resv);
    m->resv = NULL;
}

static uint64_t resv_len(const seg_t *sg)
{
    uint64_t l = cr__oalloc_capacity(sg->alloc) / RESV_SEG_FRACTION;
    return l < RESV_LEN_MAX ? l : RESV_LEN_MAX;
}

/* A block of about want bytes on some DRAM segment not in ex (rotating
 * like placement). Returns the segment or NONE32. */
static uint32_t resv_alloc(cr__master_t *m, uint64_t want, const excl_t *ex, uint64_t now,
                           uint32_t *blk, uint64_t *off)
{
    for (uint32_t k = 0; k < m->n_segs; k++) {
        uint32_t s = (m->seg_cursor + k) % m->n_segs;
        seg_t *sg = &m->segs[s];
        if (!sg->live || sg->tier || !sg->alloc || sg->client == NONE32 ||
            sg->alloc_after_ms > now || excl_has(ex, s))
            continue;
        uint64_t len = want < resv_len(sg) ? want : resv_len(sg);
        if (len < cr__oalloc_granule(sg->alloc))
            continue;
        uint32_t b = cr__oalloc_alloc(sg->alloc, len, off);
        if (b == CR__OALLOC_NONE)
            continue;
        m->allocated += cr__oalloc_block_size(sg->alloc, b);
        m->seg_cursor = s + 1;
        *blk = b;
        return s;
    }
    return NONE32;
}

int cr__m_reserve_locked(cr__master_t *m, cr__rpc_client_id_t id, uint64_t want, const excl_t *ex,
                         uint64_t now, cr__rpc_msg_t *reply)
{
    if (!m->resv_on)
        return CR_E_UNAVAILABLE_IN_CURRENT_MODE;
    uint32_t c = cr__m_client_find(m, id);
    if (c == NONE32)
        return CR_E_CLIENT_NOT_FOUND;
    if (want == 0) {
        /* the client is done or idle (cr_store_destroy, its heartbeat
         * after an idle period: no write of it in flight):
         * its reservations' rest is free at once, or once the WRITE grant
         * over it has expired (a grant cannot be recalled) */
        struct cr__mresv *rv0 = m->resv;
        for (uint32_t i = 0; rv0 && i < rv0->n;) {
            resv_t *r = &rv0->v[i];
            if (r->open && r->owner.hi == id.hi && r->owner.lo == id.lo) {
                CNT(m, reservations_returned_total)++;
                if (resv_close_at(m, i, now, r->cap_until_ms > now ? r->cap_until_ms : now))
                    continue;
            }
            i++;
        }
        return 0;
    }
    if (!m->resv) {
        m->resv = calloc(1, sizeof *m->resv);
        if (!m->resv)
            return -ENOMEM;
    }
    struct cr__mresv *rv = m->resv;
    /* bounds: open ones per client (the oldest gives way), closing ones
     * per client and entries in all */
    uint32_t open = 0, closing = 0, oldest = NONE32;
    for (uint32_t i = 0; i < rv->n; i++) {
        resv_t *r = &rv->v[i];
        if (r->owner.hi != id.hi || r->owner.lo != id.lo)
            continue;
        if (r->open) {
            open++;
            if (oldest == NONE32 || r->expire_ms < rv->v[oldest].expire_ms)
                oldest = i;
        } else {
            closing++;
        }
    }
    if (closing >= RESV_CLIENT_CLOSING || rv->n >= RESV_MAX) {
        CNT(m, reservations_refused_total)++;
        return CR_E_UNAVAILABLE_IN_CURRENT_STATUS;
    }
    if (open >= RESV_PER_CLIENT) {
        CNT(m, reservations_reclaimed_total)++;
        resv_close(m, oldest, now);
    }
    if (rv->n == rv->cap) {
        uint32_t nc = rv->cap ? rv->cap * 2 : 16;
        resv_t *v = realloc(rv->v, nc * sizeof *v);
        if (!v)
            return -ENOMEM;
        rv->v = v;
        rv->cap = nc;
    }
    if (want > RESV_LEN_MAX)
        want = RESV_LEN_MAX;
    uint32_t blk;
    uint64_t off;
    /* never evicts objects for a reservation, nor places one on a segment
     * the client avoids (it would not carve there): puts go two-phase */
    uint32_t s = resv_alloc(m, want, ex, now, &blk, &off);
    if (s == NONE32) {
        cr__m_quarantine_release(m, now, SIZE_MAX);
        s = resv_alloc(m, want, ex, now, &blk, &off);
    }
    if (s == NONE32) {
        CNT(m, reservations_refused_total)++;
        return CR_E_NO_AVAILABLE_HANDLE;
    }
    seg_t *sg = &m->segs[s];
    uint64_t len = cr__oalloc_block_size(sg->alloc, blk);
    cr__rpc_item_t *it = cr__rpc_msg_alloc(reply, sizeof *it);
    cr__rpc_replica_t *rep = cr__rpc_msg_alloc(reply, sizeof *rep);
    cr__rpc_shard_t *sh = cr__rpc_msg_alloc(reply, sizeof *sh);
    char *name = cr__rpc_msg_strdup(reply, sg->name, strlen(sg->name));
    if (!it || !rep || !sh || !name) {
        cr__m_block_unalloc(m, s, blk);
        return -ENOMEM;
    }
    uint64_t lease = cr__m_resv_lease_ms(m);
    resv_t *r = &rv->v[rv->n++];
    *r = (resv_t){.id = m->master_id + ++rv->next_id,
                  .owner = id,
                  .seg = s,
                  .gen = sg->gen,
                  .blk = blk,
                  .start = off,
                  .cur = off,
                  .end = off + len,
                  .jend = off + len,
                  .expire_ms = now + lease,
                  .open = 1};
    /* expiry + put timeout, and not before the WRITE grant over the range
     * expires (a grant lives at least 10 s, caps.c) */
    r->hold_ms = r->expire_ms + m->cfg.put_timeout_ms;
    uint64_t cap_ttl = cr__m_caps_ttl_ms(m, (uint32_t)lease);
    r->cap_until_ms = cap_ttl ? now + cap_ttl : 0;
    if (r->cap_until_ms > r->hold_ms)
        r->hold_ms = r->cap_until_ms;
    m->resv_free += rest_of(r);
    jr_resv(m, CR__HA_WIN, r);
    sh->segment = name;
    sh->addr = sg->base + off;
    sh->len = len;
    rep->n_shards = 1;
    rep->shards = sh;
    it->status = 0;
    it->version = r->id;
    it->size = len;
    it->replica_id = cr__oalloc_granule(sg->alloc);
    it->n_replicas = 1;
    it->replicas = rep;
    reply->items = it;
    reply->n_items = 1;
    reply->count = lease;
    CNT(m, reservations_granted_total)++;
    return 0;
}

/* One PUT_COMMIT item. Returns the item's status; *out gets version and
 * size on success. */
static int commit_one(cr__master_t *m, cr__rpc_client_id_t id, const cr__rpc_item_t *in,
                      uint64_t now, cr__rpc_item_t *out)
{
    if (!key_ok(in->key, in->key_len))
        return CR_E_INVALID_KEY;
    uint64_t size = in->size;
    if (size == 0 || in->n_replicas != 1 || !in->replicas ||
        in->replicas[0].n_shards != 1 || !in->replicas[0].shards ||
        in->replicas[0].shards[0].len != size || !in->replicas[0].shards[0].segment)
        return CR_E_INVALID_PARAMS;
    const cr__rpc_shard_t *sh = &in->replicas[0].shards[0];
    /* one lookup of the key serves the checks: nothing below changes the
     * key index before they are done */
    uint64_t h = key_hash(in->key, in->key_len);
    int64_t k = cr__m_map_find(m, in->key, in->key_len, h);
    /* a commit retried after its reply was lost (HA: at the new leader):
     * the key's object is the one this commit made (same place, size) */
    obj_t *ex = k >= 0 && (m->slots[k]->flags & OF_COMPLETE) ? m->slots[k] : NULL;
    if (ex && ex->n_rep == 1 && obj_nsh(ex)[0] == 1 && ex->size == size) {
        const shard_t *xs = obj_shards(ex);
        const seg_t *xg = &m->segs[xs->seg];
        if (xg->live && !strcmp(xg->name, sh->segment) &&
            xg->base + cr__oalloc_block_offset(xg->alloc, xs->blk) == sh->addr) {
            out->version = ex->version;
            out->size = size;
            cr__m_jr_wait_prior(); /* its OBJ may still be on its way to the standbys */
            return 0;
        }
    }
    struct cr__mresv *rv = m->resv;
    uint32_t i = 0;
    while (rv && i < rv->n && rv->v[i].id != in->version)
        i++;
    if (!rv || i == rv->n)
        return CR_E_INVALID_WRITE; /* unknown, or gone (expired, reclaimed) */
    resv_t *r = &rv->v[i];
    seg_t *sg = &m->segs[r->seg];
    if (!r->open || r->owner.hi != id.hi || r->owner.lo != id.lo || !sg->live ||
        sg->gen != r->gen || r->expire_ms <= now || strcmp(sg->name, sh->segment))
        return CR_E_INVALID_WRITE;
    uint64_t g = cr__oalloc_granule(sg->alloc);
    uint64_t rl = (size + g - 1) / g * g;
    if (sh->addr < sg->base || rl < size)
        return CR_E_INVALID_WRITE;
    uint64_t a = sh->addr - sg->base;
    /* inside the uncommitted rest, granule-aligned: overlaps nothing
     * committed (every committed block lies below cur) */
    if (a % g || a < r->cur || a > r->end || rl > r->end - a || r->blk == NONE32)
        return CR_E_INVALID_WRITE;
    /* replace: the key's object no reader can reach (objects.c) */
    int replace = k >= 0 ? cr__m_put_over_locked(m, m->slots[k], now) : 0;
    if (replace < 0)
        return replace;
    int full = replace ? 0 : cr__m_meta_full_locked(m, in->key_len, "PutCommit");
    if (full)
        return full;
    /* everything that can fail before the space changes hands */
    if ((m->count + 1) * 10 > m->cap * 7 && cr__m_map_grow(m))
        return -ENOMEM;
    obj_t *o = malloc(sizeof *o + 4 + sizeof(shard_t) + in->key_len);
    if (!o)
        return -ENOMEM;
    if (replace)
        cr__m_put_replace_locked(m, in->key, in->key_len, h, now);
    cr__oalloc_t *al = sg->alloc;
    m->resv_free -= rest_of(r); /* back below once the rest is reserved again */
    cr__oalloc_free(al, r->blk);
    r->blk = NONE32;
    if (a > r->cur) { /* skipped: a failed or abandoned write of the holder */
        uint32_t gb = cr__oalloc_reserve(al, r->cur, a - r->cur);
        if (gb != CR__OALLOC_NONE) {
            cr__m_block_release(m, r->seg, gb, resv_hold_until(m, r), now);
            r->gap = 1;
        } else {
            m->allocated -= a - r->cur; /* cannot happen: given back */
        }
    }
    uint32_t ob = cr__oalloc_reserve(al, a, rl);
    r->cur = a + rl;
    if (r->cur < r->end) {
        r->blk = cr__oalloc_reserve(al, r->cur, r->end - r->cur);
        if (r->blk == CR__OALLOC_NONE) {
            r->blk = NONE32;
            m->allocated -= r->end - r->cur;
            r->cur = r->end;
        }
    }
    m->resv_free += rest_of(r);
    if (ob == CR__OALLOC_NONE) { /* cannot happen: the range was ours */
        m->allocated -= rl;
        free(o);
        return CR_E_INTERNAL_ERROR;
    }
    memset(o, 0, sizeof *o);
    o->version = m->next_version++;
    o->size = size;
    o->key_len = (uint16_t)in->key_len;
    o->n_rep = 1;
    o->flags = OF_COMPLETE;
    if (in->flags & CR__RPC_F_CRC) {
        o->flags |= OF_CRC;
        o->crc = (uint32_t)in->replica_id;
    }
    if (r->cap_until_ms) /* the reservation's WRITE grant covers this space */
        obj_wcap_until(o, now, r->cap_until_ms);
    obj_nsh(o)[0] = 1;
    obj_shards(o)[0] = (shard_t){.seg = r->seg, .blk = ob};
    memcpy(obj_key(o), in->key, in->key_len);
    cr__m_map_insert(m, o, h); /* cannot fail: grown above */
    list_push_front(&m->lru, o);
    m->n_complete++;
    m->state_seq++;
    CNT(m, puts_completed_total)++;
    CNT(m, put_commits_total)++;
    cr__m_jr_obj(m, o); /* complete, with its checksum: one record */
    if (m->tier)
        cr__m_tier_put_completed(m, o, now);
    if (m->fs) /* its writer persists it now: not evicted before that (fs.c) */
        o->fs_until_s = (uint32_t)((now + CR__M_FS_PERSIST_MS) / 1000);
    if (r->cur >= r->end) /* used up: done, once nothing of it is held (resv_close_at) */
        resv_close(m, i, now);
    out->version = o->version;
    out->size = size;
    return 0;
}

/* A RESERVE hands back the tail of the client's reservation rid: nothing
 * at or above cursor (an absolute address: its carve cursor) is written
 * by it any more. The tail above the commit cursor is free at once, or,
 * with capabilities on, once the WRITE grant over it has expired (a grant
 * cannot be recalled: the holder could still write there with it). What
 * lies between the commit cursor and the hand-back stays the
 * reservation's (values carved and not yet committed). An unknown, closed
 * or foreign reservation is ignored (it may have expired meanwhile). */
static void resv_hand_back(cr__master_t *m, cr__rpc_client_id_t id, uint64_t rid,
                           uint64_t cursor, uint64_t now)
{
    struct cr__mresv *rv = m->resv;
    uint32_t i = 0;
    while (rv && i < rv->n && rv->v[i].id != rid)
        i++;
    if (!rv || i == rv->n)
        return;
    resv_t *r = &rv->v[i];
    seg_t *sg = &m->segs[r->seg];
    if (!r->open || r->owner.hi != id.hi || r->owner.lo != id.lo || r->blk == NONE32 ||
        !sg->live || sg->gen != r->gen || cursor < sg->base || cursor - sg->base >= r->end)
        return;
    cr__oalloc_t *al = sg->alloc;
    uint64_t g = cr__oalloc_granule(al);
    uint64_t a = (cursor - sg->base + g - 1) / g * g; /* below end: no overflow */
    if (a < r->cur)
        a = r->cur;
    if (a >= r->end)
        return;
    uint64_t tail = r->end - a;
    m->resv_free -= rest_of(r);
    cr__oalloc_free(al, r->blk);
    r->blk = NONE32;
    uint32_t tb = r->cap_until_ms > now ? cr__oalloc_reserve(al, a, tail) : CR__OALLOC_NONE;
    if (tb != CR__OALLOC_NONE) {
        cr__m_block_release(m, r->seg, tb, r->cap_until_ms, now);
        r->tail_hold_ms = r->cap_until_ms;
    } else {
        m->allocated -= tail;
        m->state_seq++;
    }
    r->end = a;
    if (a > r->cur) {
        r->blk = cr__oalloc_reserve(al, r->cur, a - r->cur);
        if (r->blk == CR__OALLOC_NONE) { /* cannot happen: given back */
            r->blk = NONE32;
            m->allocated -= a - r->cur;
            r->cur = a;
        }
    }
    m->resv_free += rest_of(r);
    CNT(m, reservation_tail_bytes_returned_total) += tail;
    if (r->cur >= r->end) /* nothing carved is left to commit */
        resv_close(m, i, now);
}

int cr__m_resv_handle_locked(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                             uint64_t now)
{
    uint16_t type = req->type & (uint16_t)~CR__RPC_REPLY;
    if (type == CR__RPC_RESERVE) {
        CNT(m, rpc_reserve_total)++;
        if (req->count) /* first, so that the tail may serve this very RESERVE */
            resv_hand_back(m, req->client_id, req->count, req->base, now);
        /* items[].key: the segments the client avoids (its suspect ones;
         * an older master ignores a RESERVE's items) */
        const char *names[CR__RPC_EXCLUDE_MAX];
        uint32_t n = 0;
        for (uint32_t i = 0; i < req->n_items && n < CR__RPC_EXCLUDE_MAX; i++)
            names[n++] = req->items[i].key;
        excl_t ex;
        cr__m_excl_resolve(m, names, n, &ex);
        return cr__m_reserve_locked(m, req->client_id, req->size, &ex, now, reply);
    }
    if (type != CR__RPC_PUT_COMMIT || !req->n_items)
        return CR_E_INVALID_PARAMS;
    reply->items = cr__rpc_msg_alloc(reply, req->n_items * sizeof *reply->items);
    if (!reply->items)
        return -ENOMEM;
    reply->n_items = req->n_items;
    cr__m_map_prefetch(m, req->items, req->n_items);
    for (uint32_t i = 0; i < req->n_items; i++) {
        cr__rpc_item_t *out = &reply->items[i];
        CNT(m, rpc_put_commit_total)++;
        int rc = commit_one(m, req->client_id, &req->items[i], now, out);
        if (rc == -ENOMEM)
            rc = CR_E_INTERNAL_ERROR;
        if (rc) {
            memset(out, 0, sizeof *out);
            CNT(m, rpc_errors_total)++;
            if (rc == CR_E_INVALID_WRITE)
                CNT(m, put_commits_refused_total)++;
        }
        out->status = rc;
    }
    if (m->resv_on && cr__evict_over_watermark(&m->ev, m_used(m), m->capacity))
        cr__m_evict_locked(m, 0, NULL, now);
    return 0;
}

void cr__master_reservations(cr__master_t *m, int on, uint64_t now)
{
    pthread_mutex_lock(&m->mu);
    m->resv_on = on;
    if (!on)
        cr__m_resv_reclaim_all(m, now);
    pthread_mutex_unlock(&m->mu);
}
