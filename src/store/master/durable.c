/* Master side of durability (ha/): the op record of each durable change,
 * rebuilding the state from a shadow index, and the snapshot dump. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "store/master/master_priv.h"
#include "store/tier/tier.h"

/* ---- journal ------------------------------------------------------------ */

/* Did this thread emit a record that must be replicated before its request
 * is acknowledged (every record but a PutStart carved from a confirmed
 * allocation window, window.c)? */
static _Thread_local int tl_must_wait, tl_changed, tl_wait_prior;

void cr__master_wait_reset(void) { tl_must_wait = tl_changed = tl_wait_prior = 0; }
int cr__master_wait_needed(void) { return tl_must_wait; }
int cr__master_changed(void) { return tl_changed; }
int cr__master_wait_prior(void) { return tl_wait_prior; }
void cr__m_jr_wait_prior(void) { tl_wait_prior = tl_must_wait = 1; }

void cr__m_jr_emit(cr__master_t *m)
{
    tl_changed = 1;
    if (!m->jr_lazy)
        tl_must_wait = 1;
    m->jbuf.len = 0;
    int rc = cr__ha_rec_put(&m->jbuf, &m->jrec);
    if (rc) {
        m->jbuf.err = 0;
        CR_LOG_ERROR("master", "journal record type %u not written: %d", m->jrec.type, rc);
        return;
    }
    m->jfn(m->juser, m->jbuf.p, m->jbuf.len);
}

static void jr_clear(cr__master_t *m, uint8_t type)
{
    memset(&m->jrec, 0, offsetof(cr__ha_rec_t, segs));
    m->jrec.type = type;
}

/* OBJ: the object as it is now, dead replicas included (replica ids are
 * positional) with no shards; shards as allocator blocks. */
void cr__m_jr_obj(cr__master_t *m, obj_t *o)
{
    /* an upsert's pending new version (upsert.c: its shadow name holds a
     * NUL) is not journaled: a restarted master keeps the old version */
    if (!m->jfn || memchr(obj_key(o), 0, o->key_len))
        return;
    cr__ha_rec_t *r = &m->jrec;
    jr_clear(m, CR__HA_OBJ);
    r->version = o->version;
    r->size = o->size;
    r->flags = (uint8_t)(((o->flags & OF_COMPLETE) ? CR__HA_OBJ_COMPLETE : 0) |
                         ((o->flags & OF_HARD_PIN) ? CR__HA_OBJ_HARD_PIN : 0) |
                         ((o->flags & OF_SOFT_PIN) ? CR__HA_OBJ_SOFT_PIN : 0) |
                         ((o->flags & OF_CRC) ? CR__HA_OBJ_CRC : 0) |
                         ((o->flags & OF_FS) ? CR__HA_OBJ_FS : 0));
    r->crc = o->crc;
    r->key = obj_key(o);
    r->key_len = o->key_len;
    r->n_rep = o->n_rep;
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    uint32_t k = 0;
    for (uint32_t i = 0; i < o->n_rep; i++) {
        uint32_t n = nsh[i] & 0x7f;
        if (nsh[i] & REP_DEAD) {
            r->n_sh[i] = CR__HA_REP_DEAD;
        } else {
            r->n_sh[i] = (uint8_t)n;
            for (uint32_t j = 0; j < n; j++, k++) {
                seg_t *sg = &m->segs[sh[j].seg];
                r->sh[k].seg = sg->name;
                r->sh[k].off = cr__oalloc_block_offset(sg->alloc, sh[j].blk);
                r->sh[k].len = cr__oalloc_block_size(sg->alloc, sh[j].blk);
            }
        }
        sh += n;
    }
    cr__m_jr_emit(m);
}

void cr__m_jr_key(cr__master_t *m, uint8_t type, obj_t *o)
{
    if (!m->jfn || memchr(obj_key(o), 0, o->key_len)) /* see cr__m_jr_obj */
        return;
    if (type == CR__HA_END && (o->flags & OF_CRC))
        type = CR__HA_ENDC; /* the writer's checksum goes along */
    jr_clear(m, type);
    if (type == CR__HA_ENDC)
        m->jrec.crc = o->crc;
    m->jrec.version = o->version;
    m->jrec.key = obj_key(o);
    m->jrec.key_len = o->key_len;
    cr__m_jr_emit(m);
}

void cr__m_jr_seg(cr__master_t *m, uint8_t type, seg_t *sg)
{
    if (!m->jfn)
        return;
    jr_clear(m, type);
    snprintf(m->jrec.name, sizeof m->jrec.name, "%s", sg->name);
    m->jrec.base = sg->base;
    m->jrec.seg_size = sg->size;
    m->jrec.client = sg->client == NONE32 ? sg->owner : m->clients[sg->client].id;
    cr__m_jr_emit(m);
}

/* The name, owner and memory of hd, in a record of that type. */
static void jr_held_id(cr__master_t *m, uint8_t type, const held_t *hd)
{
    jr_clear(m, type);
    snprintf(m->jrec.name, sizeof m->jrec.name, "%s", hd->name);
    m->jrec.client = hd->owner;
    m->jrec.base = hd->base;
    m->jrec.seg_size = hd->size;
}

void cr__m_jr_held(cr__master_t *m, const held_t *hd, uint64_t now)
{
    if (!m->jfn || hd->until <= now)
        return;
    cr__ha_rec_t *r = &m->jrec;
    jr_held_id(m, CR__HA_HELD, hd);
    uint64_t until = hd->until;
    for (uint32_t i = 0; i < hd->rg.n; i++)
        if (hd->rg.v[i].until > until)
            until = hd->rg.v[i].until;
    r->hold_ms = until - now;
    r->flags = hd->rg.whole ? CR__HA_HELD_WHOLE : 0;
    uint32_t i = 0;
    do { /* one record at least; CR__HA_HELD_RG_MAX ranges each */
        r->n_hrg = 0;
        for (; i < hd->rg.n && r->n_hrg < CR__HA_HELD_RG_MAX; i++) {
            const held_range_t *g = &hd->rg.v[i];
            if (g->until > now)
                r->hrg[r->n_hrg++] = (cr__ha_held_rg_t){g->off, g->len, g->until - now};
        }
        cr__m_jr_emit(m);
        r->flags |= CR__HA_HELD_MORE;
    } while (i < hd->rg.n);
}

void cr__m_jr_heldend(cr__master_t *m, const held_t *hd)
{
    if (!m->jfn)
        return;
    jr_held_id(m, CR__HA_HELDEND, hd);
    cr__m_jr_emit(m);
}

void cr__master_set_journal(cr__master_t *m, cr__master_journal_fn fn, void *user)
{
    pthread_mutex_lock(&m->mu);
    m->jfn = fn;
    m->juser = user;
    pthread_mutex_unlock(&m->mu);
}

/* ---- restore and dump (ha/) ---------------------------------------------- */

typedef struct rs_range {
    uint64_t off, len;
    obj_t *o;
    uint32_t slot; /* index into obj_shards(o) */
} rs_range_t;

typedef struct rs_ctx {
    cr__master_t *m;
    uint64_t now, awake;
    uint32_t seg0;       /* first segment index created by this restore */
    rs_range_t **rg;     /* per segment (index - seg0) */
    size_t *n_rg, *cap_rg;
    uint32_t n_new;
    int err;
    const cr__ha_win_t **wins; /* the shadow's open allocation windows */
    size_t n_wins, cap_wins;
} rs_ctx_t;

static int rs_win(void *u, const cr__ha_win_t *w)
{
    rs_ctx_t *x = u;
    if (x->n_wins == x->cap_wins) {
        size_t nc = x->cap_wins ? x->cap_wins * 2 : 16;
        const cr__ha_win_t **n = realloc(x->wins, nc * sizeof *n);
        if (!n)
            return -ENOMEM;
        x->wins = n;
        x->cap_wins = nc;
    }
    x->wins[x->n_wins++] = w;
    return 0;
}

/* Quarantines until `until` the free part of [off, off+len) on restored
 * segment s (rg: that segment's object ranges, sorted). */
static void rs_hold(rs_ctx_t *x, uint32_t s, const rs_range_t *rg, size_t n, uint64_t off,
                    uint64_t len, uint64_t until)
{
    cr__master_t *m = x->m;
    seg_t *sg = &m->segs[s];
    uint64_t cur = off, end = off + len;
    if (end < cur)
        return;
    for (size_t k = 0; k <= n && cur < end; k++) {
        uint64_t o = k < n ? rg[k].off : end, e = k < n ? rg[k].off + rg[k].len : end;
        if (e <= cur)
            continue;
        if (o > end)
            o = end;
        if (o > cur) {
            uint32_t b = cr__oalloc_reserve(sg->alloc, cur, o - cur);
            if (b != CR__OALLOC_NONE) {
                if (!sg->tier)
                    m->allocated += cr__oalloc_block_size(sg->alloc, b);
                cr__m_block_release(m, s, b, until, x->now);
            }
        }
        if (e > cur)
            cur = e;
    }
}

/* The free part of window w on restored segment s: a writer of a PutStart
 * carved from it that the index never heard of may write there until its
 * deadline, and late transfers one more put timeout. */
static void rs_win_hold(rs_ctx_t *x, uint32_t s, const rs_range_t *rg, size_t n,
                        const cr__ha_win_t *w)
{
    uint64_t hold = 2 * x->m->cfg.put_timeout_ms;
    if (hold < CR__M_RTASK_TIMEOUT_MS) /* a copy task's target block (rtask.c) */
        hold = CR__M_RTASK_TIMEOUT_MS;
    rs_hold(x, s, rg, n, w->off, w->len, x->now + hold);
}

/* The held ranges of restored segment s's memory (held.c: it was mounted
 * again over a dropped segment's memory before the records were made):
 * their free part waits as it did, the whole free space for a whole hold. */
static void rs_held_hold(rs_ctx_t *x, uint32_t s, const rs_range_t *rg, size_t n)
{
    held_range_t *t;
    size_t k;
    int whole;
    uint64_t until = cr__m_held_ranges(x->m, s, x->m->segs[s].owner, x->now, &t, &k, &whole);
    if (whole)
        rs_hold(x, s, rg, n, 0, cr__oalloc_capacity(x->m->segs[s].alloc), until);
    for (size_t i = 0; !whole && i < k; i++)
        rs_hold(x, s, rg, n, t[i].off, t[i].len, t[i].until);
    free(t);
}

static int rs_seg(void *u, const cr__ha_seg_t *g)
{
    rs_ctx_t *x = u;
    cr__master_t *m = x->m;
    if (cr__m_seg_find(m, g->name) != NONE32 || m->live_segs >= m->cfg.max_segments)
        return 0;
    if (m->n_segs == m->cap_segs) {
        uint32_t nc = m->cap_segs ? m->cap_segs * 2 : 16;
        seg_t *n = realloc(m->segs, nc * sizeof *n);
        if (!n)
            return -ENOMEM;
        m->segs = n;
        m->cap_segs = nc;
    }
    seg_t *sg = &m->segs[m->n_segs++];
    memset(sg, 0, sizeof *sg);
    snprintf(sg->name, sizeof sg->name, "%s", g->name);
    sg->base = g->base;
    sg->size = g->size;
    sg->client = NONE32;
    sg->owner = g->client;
    sg->orphan_awake = x->awake;
    sg->alloc_after_ms = UINT64_MAX; /* nothing new until its owner is back */
    sg->tier = cr__tier_is_ssd(sg->name) ? 1 : 0; /* a node's disk tier (tier.c) */
    sg->live = 1;
    m->live_segs++;
    return 0;
}

static int rs_push(rs_ctx_t *x, uint32_t seg, uint64_t off, uint64_t len, obj_t *o, uint32_t slot)
{
    uint32_t i = seg - x->seg0;
    if (x->n_rg[i] == x->cap_rg[i]) {
        size_t nc = x->cap_rg[i] ? x->cap_rg[i] * 2 : 256;
        rs_range_t *n = realloc(x->rg[i], nc * sizeof *n);
        if (!n)
            return -ENOMEM;
        x->rg[i] = n;
        x->cap_rg[i] = nc;
    }
    x->rg[i][x->n_rg[i]++] = (rs_range_t){.off = off, .len = len, .o = o, .slot = slot};
    return 0;
}

static uint32_t rs_seg_of(rs_ctx_t *x, const char *name)
{
    uint32_t s = cr__m_seg_find(x->m, name);
    return s != NONE32 && s >= x->seg0 ? s : NONE32;
}

static int rs_obj(void *u, const cr__ha_rec_t *r)
{
    rs_ctx_t *x = u;
    cr__master_t *m = x->m;
    int complete = (r->flags & CR__HA_OBJ_COMPLETE) != 0;
    uint8_t nsh[CR__RPC_REPLICA_MAX];
    uint32_t total = 0, live = 0, k = 0;
    for (uint32_t i = 0; i < r->n_rep; i++) {
        if (r->n_sh[i] == CR__HA_REP_DEAD) {
            nsh[i] = REP_DEAD;
            continue;
        }
        int ok = 1;
        for (uint32_t j = 0; j < r->n_sh[i]; j++)
            ok &= rs_seg_of(x, r->sh[k + j].seg) != NONE32;
        nsh[i] = ok ? r->n_sh[i] : REP_DEAD;
        total += ok ? r->n_sh[i] : 0;
        live += ok;
        k += r->n_sh[i];
    }
    if (r->version + 1 > m->next_version)
        m->next_version = r->version + 1;
    /* with a shared-FS file (fs.c; only while this master has the tier) a
     * complete object needs no other replica */
    int fs = complete && (r->flags & CR__HA_OBJ_FS) && m->fs;
    /* a complete object with no replica left, or a put that lost one */
    if ((!live && !fs) || (!complete && live < r->n_rep) || cr__m_lookup(m, r->key, r->key_len))
        return 0;
    size_t nsh_bytes = (r->n_rep + 3u) & ~3u;
    obj_t *o = malloc(sizeof *o + nsh_bytes + total * sizeof(shard_t) + r->key_len);
    if (!o)
        return -ENOMEM;
    memset(o, 0, sizeof *o);
    o->version = r->version;
    o->size = r->size;
    o->key_len = r->key_len;
    o->n_rep = r->n_rep;
    o->flags = (uint8_t)((complete ? OF_COMPLETE : 0) |
                         ((r->flags & CR__HA_OBJ_HARD_PIN) ? OF_HARD_PIN : 0) |
                         ((r->flags & CR__HA_OBJ_SOFT_PIN) ? OF_SOFT_PIN : 0) |
                         ((r->flags & CR__HA_OBJ_CRC) ? OF_CRC : 0) |
                         (fs ? OF_FS : 0));
    o->crc = r->crc; /* the writer's checksum: restored objects are verified too */
    /* readers of the old master may be mid-transfer: a lease's worth of
     * protection; writers get a whole put timeout */
    o->until_ms = x->now + (complete ? m->cfg.lease_ttl_ms : m->cfg.put_timeout_ms);
    if (o->flags & OF_SOFT_PIN)
        o->pin_until_s = (uint32_t)((x->now + m->cfg.soft_pin_ttl_ms + 999) / 1000);
    memcpy(obj_nsh(o), nsh, r->n_rep);
    shard_t *sh = obj_shards(o);
    uint32_t slot = 0;
    k = 0;
    int rc = 0;
    for (uint32_t i = 0; i < r->n_rep; i++) {
        if (r->n_sh[i] == CR__HA_REP_DEAD)
            continue;
        for (uint32_t j = 0; j < r->n_sh[i]; j++, k++) {
            if (nsh[i] & REP_DEAD)
                continue;
            uint32_t sg = rs_seg_of(x, r->sh[k].seg);
            sh[slot] = (shard_t){.seg = sg, .blk = NONE32};
            if (!rc)
                rc = rs_push(x, sg, r->sh[k].off, r->sh[k].len, o, slot);
            slot++;
        }
    }
    memcpy(obj_key(o), r->key, r->key_len);
    if (rc || cr__m_map_insert(m, o, key_hash(r->key, r->key_len))) {
        free(o); /* the restore fails as a whole: its ranges are never built */
        return -ENOMEM;
    }
    if (fs)
        cr__m_fs_restored(m);
    if (complete) {
        list_push_front(live ? &m->lru : &m->fs_lru, o);
        m->n_complete++;
    } else {
        list_push_back(&m->pending, o);
        m->n_pending++;
    }
    return 0;
}

static int rs_cmp(const void *a, const void *b)
{
    const rs_range_t *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Builds each restored segment's allocator with its objects' blocks in
 * place; an object whose block could not be placed (overlap: a corrupt
 * journal) loses that replica. */
static int rs_build(rs_ctx_t *x)
{
    cr__master_t *m = x->m;
    int rc = 0;
    for (uint32_t i = 0; i < x->n_new && !rc; i++) {
        seg_t *sg = &m->segs[x->seg0 + i];
        size_t n = x->n_rg[i];
        rs_range_t *rg = x->rg[i];
        if (n) /* rg is NULL for a segment without objects */
            qsort(rg, n, sizeof *rg, rs_cmp);
        uint64_t *offs = malloc((n + 1) * sizeof *offs), *lens = malloc((n + 1) * sizeof *lens);
        uint32_t *blk = malloc((n + 1) * sizeof *blk);
        if (!offs || !lens || !blk) {
            rc = -ENOMEM;
        } else {
            for (size_t k = 0; k < n; k++) {
                offs[k] = rg[k].off;
                lens[k] = rg[k].len;
            }
            rc = cr__oalloc_create_used(sg->size, m->cfg.granule_shift, offs, lens, n, blk,
                                        &sg->alloc);
            for (size_t k = 0; !rc && k < n; k++)
                obj_shards(rg[k].o)[rg[k].slot].blk = blk[k];
        }
        free(offs);
        free(lens);
        free(blk);
        if (!rc && !sg->tier) {
            m->capacity += cr__oalloc_capacity(sg->alloc);
            m->allocated += cr__oalloc_used(sg->alloc);
        }
        for (size_t w = 0; !rc && w < x->n_wins; w++)
            if (rs_seg_of(x, x->wins[w]->name) == x->seg0 + i)
                rs_win_hold(x, x->seg0 + i, rg, n, x->wins[w]);
        if (!rc)
            rs_held_hold(x, x->seg0 + i, rg, n);
    }
    return rc;
}

/* Drops replicas with an unplaced block (and objects left with none). */
static void rs_fixup(cr__master_t *m, uint64_t now)
{
    for (uint64_t i = 0; i < m->cap; i++) {
        obj_t *o = m->slots[i];
        if (!o)
            continue;
        uint8_t *nsh = obj_nsh(o);
        shard_t *sh = obj_shards(o);
        uint32_t live = 0, bad = 0;
        for (uint32_t r = 0; r < o->n_rep; r++) {
            uint32_t n = nsh[r] & 0x7f;
            int miss = 0;
            for (uint32_t k = 0; k < n && !(nsh[r] & REP_DEAD); k++)
                miss |= sh[k].blk == NONE32;
            if (miss) {
                for (uint32_t k = 0; k < n; k++)
                    if (sh[k].blk != NONE32)
                        cr__m_block_unalloc(m, sh[k].seg, sh[k].blk);
                nsh[r] |= REP_DEAD;
                bad++;
            } else if (!(nsh[r] & REP_DEAD)) {
                live++;
            }
            sh += n;
        }
        if (bad) {
            CR_LOG_ERROR("master", "restore: '%.*s' had %u replica(s) overlapping others: dropped",
                         o->key_len > 64 ? 64 : (int)o->key_len, obj_key(o), bad);
            if ((!live && !(o->flags & OF_FS)) || !(o->flags & OF_COMPLETE)) {
                cr__m_obj_delete(m, o, 0, now);
                i--; /* backward-shift deletion may have moved another record here */
            }
        }
    }
}

static int ver_cmp(const void *a, const void *b)
{
    uint64_t x = (*(obj_t *const *)a)->version, y = (*(obj_t *const *)b)->version;
    return x < y ? -1 : x > y;
}

/* A restore inserts objects in the order of the shadow's hash buckets, and
 * eviction would then take them in that order: recent objects before old
 * ones. The list is rebuilt in put order instead (versions grow with every
 * PutStart): the oldest evicted first, as the leader before would have,
 * except for its reads (not journaled). Only an order: on ENOMEM it stays. */
static void lru_by_version(obj_t *head)
{
    size_t n = 0;
    for (obj_t *o = head->next; o != head; o = o->next)
        n++;
    obj_t **v = n > 1 ? malloc(n * sizeof *v) : NULL;
    if (!v)
        return;
    size_t i = 0;
    for (obj_t *o = head->next; o != head; o = o->next)
        v[i++] = o;
    qsort(v, n, sizeof *v, ver_cmp);
    list_init(head);
    for (i = 0; i < n; i++)
        list_push_front(head, v[i]); /* the newest ends at the front */
    free(v);
}

int cr__master_restore(cr__master_t *m, const cr__ha_shadow_t *sh, uint64_t now,
                       uint64_t *n_objects)
{
    pthread_mutex_lock(&m->mu);
    rs_ctx_t x = {.m = m, .now = now, .awake = cr__m_awake_locked(m, now), .seg0 = m->n_segs};
    int rc = cr__ha_shadow_foreach_seg(sh, rs_seg, &x);
    for (uint32_t i = 0; !rc && i < cr__ha_shadow_n_held(sh); i++)
        cr__m_held_restore(m, cr__ha_shadow_held(sh, i), now);
    x.n_new = m->n_segs - x.seg0;
    x.rg = calloc(x.n_new + 1, sizeof *x.rg);
    x.n_rg = calloc(x.n_new + 1, sizeof *x.n_rg);
    x.cap_rg = calloc(x.n_new + 1, sizeof *x.cap_rg);
    if (!rc && (!x.rg || !x.n_rg || !x.cap_rg))
        rc = -ENOMEM;
    uint64_t before = m->n_complete + m->n_pending;
    if (!rc)
        rc = cr__ha_shadow_foreach_obj(sh, rs_obj, &x);
    if (!rc)
        rc = cr__ha_shadow_foreach_win(sh, rs_win, &x);
    if (!rc)
        rc = rs_build(&x);
    free(x.wins);
    for (uint32_t i = 0; x.rg && i < x.n_new; i++)
        free(x.rg[i]);
    free(x.rg);
    free(x.n_rg);
    free(x.cap_rg);
    if (!rc) {
        rs_fixup(m, now);
        lru_by_version(&m->lru);
        lru_by_version(&m->fs_lru);
        if (cr__ha_shadow_next_version(sh) > m->next_version)
            m->next_version = cr__ha_shadow_next_version(sh);
        if (n_objects)
            *n_objects = m->n_complete + m->n_pending - before;
        m->state_seq++;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static void dump_append(void *u, const uint8_t *frame, size_t len)
{
    cr__ha_buf_append(u, frame, len);
}

int cr__master_dump(cr__master_t *m, cr__ha_buf_t *b, void (*at)(void *), void *user)
{
    pthread_mutex_lock(&m->mu);
    cr__master_journal_fn fn = m->jfn;
    void *ju = m->juser;
    m->jfn = dump_append;
    m->juser = b;
    for (uint32_t s = 0; s < m->n_segs; s++)
        if (m->segs[s].live)
            cr__m_jr_seg(m, CR__HA_SEG, &m->segs[s]);
    cr__m_jr_wins(m);
    for (int h = 0; h < HELD_MAX; h++) /* remaining times: from the last clock reading */
        cr__m_jr_held(m, &m->held[h], m->seen_ms);
    for (uint64_t i = 0; i < m->cap; i++)
        if (m->slots[i])
            cr__m_jr_obj(m, m->slots[i]);
    jr_clear(m, CR__HA_VERSION);
    m->jrec.version = m->next_version;
    cr__m_jr_emit(m);
    m->jfn = fn;
    m->juser = ju;
    if (at)
        at(user);
    pthread_mutex_unlock(&m->mu);
    return b->err;
}

int cr__m_any_detached(const cr__master_t *m)
{
    for (uint32_t i = 0; i < m->n_segs; i++)
        if (m->segs[i].live && m->segs[i].client == NONE32)
            return 1;
    return 0;
}

int cr__m_restoring_locked(const cr__master_t *m, uint64_t now)
{
    int detached = 0;
    for (uint32_t i = 0; i < m->n_segs; i++) {
        const seg_t *sg = &m->segs[i];
        if (!sg->live || sg->tier)
            continue;
        if (sg->alloc_after_ms <= now)
            return 0; /* somewhere to place: the usual rules apply */
        detached |= sg->client == NONE32;
    }
    return detached;
}
