/* Master side of the disk tier (docs/architecture/store-tiers.md): disk
 * segments live in the same segment table and key index as DRAM (one
 * index); this file moves objects between the tiers by handing tasks to
 * the nodes (TIER_SYNC), adopts what a restarted node finds on its disk
 * (TIER_REPORT), and evicts the disk tier. Runs under m->mu like every
 * cr__m_* function (master_priv.h). */
#include "store/master/master_priv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "store/tier/tier.h"

#define TASK_HAND_MAX 64                 /* tasks per TIER_SYNC reply */
#define TASK_HAND_BYTES (256ull << 20)   /* offload bytes per TIER_SYNC reply */
#define OFFLOAD_INFLIGHT_MAX 256         /* offloads queued or running per disk segment */
#define OFFLOAD_INFLIGHT_BYTES (512ull << 20)
#define TASK_TIMEOUT_MS 60000            /* a handed task not completed by then failed */
#define TASKS_MAX 65536                  /* bound on the whole queue */
#define SCHED_VISIT 4096                 /* LRU objects looked at per scheduling pass */

typedef struct task {
    uint8_t op;
    uint8_t handed;
    uint8_t src_rep; /* offload: index of the DRAM replica copied */
    uint32_t seg, blk; /* disk segment and its block (owned by the task until done) */
    uint32_t src_seg; /* offload: DRAM source; promote: DRAM destination (blk2) */
    uint32_t blk2, gen2; /* promote: DRAM block and its segment's generation */
    uint64_t off, len; /* disk extent */
    uint64_t version, size, src_addr;
    uint64_t handed_ms;
    uint16_t key_len;
    char *key;
} task_t;

struct cr__mtier {
    task_t *t;
    size_t n, cap;
};

static struct cr__mtier *tier_get(cr__master_t *m)
{
    if (!m->tier)
        m->tier = calloc(1, sizeof *m->tier);
    return m->tier;
}

void cr__m_tier_destroy(cr__master_t *m)
{
    if (!m->tier)
        return;
    for (size_t i = 0; i < m->tier->n; i++)
        free(m->tier->t[i].key);
    free(m->tier->t);
    free(m->tier);
    m->tier = NULL;
}

static int task_push(cr__master_t *m, const task_t *t)
{
    struct cr__mtier *T = tier_get(m);
    if (!T || T->n >= TASKS_MAX)
        return -ENOMEM;
    if (T->n == T->cap) {
        size_t nc = T->cap ? T->cap * 2 : 64;
        task_t *n = realloc(T->t, nc * sizeof *n);
        if (!n)
            return -ENOMEM;
        T->t = n;
        T->cap = nc;
    }
    T->t[T->n++] = *t;
    return 0;
}

/* ---- replica helpers ------------------------------------------------------ */

int cr__m_obj_on_disk(cr__master_t *m, obj_t *o)
{
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD) && m->segs[sh[0].seg].tier)
            return 1;
        sh += n;
    }
    return 0;
}

int cr__m_obj_in_dram(cr__master_t *m, obj_t *o)
{
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD) && !m->segs[sh[0].seg].tier)
            return 1;
        sh += n;
    }
    return 0;
}

obj_t *cr__m_obj_list(cr__master_t *m, obj_t *o)
{
    if (cr__m_obj_in_dram(m, o))
        return &m->lru;
    if (cr__m_obj_on_disk(m, o))
        return &m->ssd_lru;
    return (o->flags & OF_FS) ? &m->fs_lru : &m->lru; /* its shared-FS file only (fs.c) */
}

/* (master_priv.h) Replica ids are never reused, so dead replicas stay. */
obj_t *cr__m_obj_add_replica(cr__master_t *m, obj_t *o, uint32_t seg, uint32_t blk)
{
    /* the last replica index is the shared-FS file's (fs.c) */
    if (o->n_rep >= CR__RPC_REPLICA_MAX - ((o->flags & OF_FS) ? 1u : 0u))
        return NULL;
    uint32_t tot = obj_total_shards(o);
    uint32_t nr = o->n_rep + 1u;
    size_t nsh_bytes = (nr + 3u) & ~3u;
    obj_t *n = malloc(sizeof *n + nsh_bytes + (tot + 1) * sizeof(shard_t) + o->key_len);
    if (!n)
        return NULL;
    int64_t slot = cr__m_map_find(m, obj_key(o), o->key_len, key_hash(obj_key(o), o->key_len));
    if (slot < 0) {
        free(n);
        return NULL;
    }
    *n = *o;
    n->n_rep = (uint8_t)nr;
    memcpy(obj_nsh(n), obj_nsh(o), o->n_rep);
    obj_nsh(n)[o->n_rep] = 1;
    memcpy(obj_shards(n), obj_shards(o), tot * sizeof(shard_t));
    obj_shards(n)[tot] = (shard_t){.seg = seg, .blk = blk};
    memcpy(obj_key(n), obj_key(o), o->key_len);
    m->slots[slot] = n;
    if (o->prev) {
        n->prev->next = n;
        n->next->prev = n;
    }
    free(o);
    return n;
}

/* Drops every live DRAM replica of o (space released after its lease) and
 * moves it to the disk-only list. Returns DRAM bytes freed. */
static uint64_t demote(cr__master_t *m, obj_t *o, uint64_t now)
{
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    uint64_t b = 0, rel = cr__m_obj_release_ms(m, o, now);
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD) && !m->segs[sh[0].seg].tier) {
            for (uint32_t k = 0; k < n; k++) {
                b += cr__oalloc_block_size(m->segs[sh[k].seg].alloc, sh[k].blk);
                cr__m_block_release(m, sh[k].seg, sh[k].blk, rel, now);
            }
            nsh[r] |= REP_DEAD;
        }
        sh += n;
    }
    list_unlink(o);
    list_push_front(&m->ssd_lru, o);
    o->flags &= (uint8_t)~OF_HIT1; /* back in DRAM only after two more hits */
    CNT(m, tier_ssd_demotions_total)++;
    cr__m_jr_obj(m, o); /* HA/journal: its DRAM replica is gone */
    return b;
}

/* The live disk segment of client c, or NONE32. */
static uint32_t disk_seg_of(cr__master_t *m, uint32_t c)
{
    for (uint32_t s = 0; s < m->n_segs; s++)
        if (m->segs[s].live && m->segs[s].tier && m->segs[s].client == c)
            return s;
    return NONE32;
}

static void inflight(cr__master_t *m, uint32_t seg, uint64_t *n, uint64_t *bytes)
{
    *n = *bytes = 0;
    if (!m->tier)
        return;
    for (size_t i = 0; i < m->tier->n; i++)
        if (m->tier->t[i].seg == seg && m->tier->t[i].op == CR__TIER_OP_OFFLOAD) {
            (*n)++;
            *bytes += m->tier->t[i].size;
        }
}

/* Frees at least need bytes of disk segment seg by evicting its least
 * recently used unleased, unpinned objects. Returns bytes freed. */
static uint64_t ssd_evict(cr__master_t *m, uint32_t seg, uint64_t need, uint64_t now)
{
    uint64_t freed = 0, n = 0;
    uint32_t visited = 0;
    obj_t *o = m->ssd_lru.prev;
    while (o != &m->ssd_lru && freed < need && visited++ < m->ev.max_visit) {
        obj_t *prev = o->prev;
        if (!(o->flags & OF_HARD_PIN) && o->until_ms <= now &&
            obj_wcap_ms(o, now) <= now) {
            uint8_t *nsh = obj_nsh(o);
            shard_t *sh = obj_shards(o);
            uint64_t b = 0;
            for (uint32_t r = 0; r < o->n_rep; r++) {
                uint32_t k = nsh[r] & 0x7f;
                if (!(nsh[r] & REP_DEAD) && sh[0].seg == seg)
                    b += cr__oalloc_block_size(m->segs[seg].alloc, sh[0].blk);
                sh += k;
            }
            if (b) {
                if (o->flags & OF_FS) /* its shared-FS file keeps it (fs.c) */
                    cr__m_fs_drop(m, o, seg, now);
                else
                    cr__m_obj_delete(m, o, 0, now);
                freed += b;
                n++;
            }
        }
        o = prev;
    }
    CNT(m, tier_ssd_evictions_total) += n;
    CNT(m, tier_ssd_evicted_bytes_total) += freed;
    return freed;
}

/* Queues an OFFLOAD of o (complete, contiguous DRAM replica, its node has a
 * disk segment with room). Returns 0, -EAGAIN (not now: the disk segment
 * has its bound of offloads in flight, or the task queue is full) or -1
 * (cannot: no disk tier for it, hard-pinned, disk full of leased data). */
static int offload(cr__master_t *m, obj_t *o, uint64_t now)
{
    if ((o->flags & (OF_OFFLOADING | OF_HARD_PIN)) || !(o->flags & OF_COMPLETE))
        return -1;
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    uint32_t src = NONE32, rep = 0;
    for (uint32_t r = 0; r < o->n_rep && src == NONE32; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD) && n == 1 && !m->segs[sh[0].seg].tier) {
            src = sh[0].seg;
            rep = r;
        }
        if (src == NONE32)
            sh += n;
    }
    if (src == NONE32)
        return -1;
    uint32_t ds = disk_seg_of(m, m->segs[src].client);
    if (ds == NONE32)
        return -1;
    uint64_t q_n, q_b;
    inflight(m, ds, &q_n, &q_b);
    if (q_n >= OFFLOAD_INFLIGHT_MAX || q_b + o->size > OFFLOAD_INFLIGHT_BYTES)
        return -EAGAIN;
    uint64_t dl = cr__tier_disk_len(o->key_len, o->size);
    cr__oalloc_t *a = m->segs[ds].alloc;
    uint64_t off;
    uint32_t blk = cr__oalloc_alloc(a, dl, &off);
    if (blk == CR__OALLOC_NONE) {
        ssd_evict(m, ds, dl + cr__oalloc_capacity(a) / 20, now);
        blk = cr__oalloc_alloc(a, dl, &off);
        if (blk == CR__OALLOC_NONE)
            return -1;
    }
    task_t t = {.op = CR__TIER_OP_OFFLOAD,
                .src_rep = (uint8_t)rep,
                .seg = ds,
                .blk = blk,
                .src_seg = src,
                .off = off,
                .len = dl,
                .version = o->version,
                .size = o->size,
                .src_addr = m->segs[src].base + cr__oalloc_block_offset(m->segs[src].alloc, sh[0].blk),
                .key_len = o->key_len,
                .key = malloc(o->key_len)};
    if (!t.key || task_push(m, &t)) {
        free(t.key);
        cr__oalloc_free(a, blk);
        return -EAGAIN;
    }
    memcpy(t.key, obj_key(o), o->key_len);
    o->flags |= OF_OFFLOADING;
    return 0;
}

int cr__m_tier_evict_candidate(cr__master_t *m, obj_t *o, uint64_t now, uint64_t *freed)
{
    int disk = cr__m_obj_on_disk(m, o), dram = cr__m_obj_in_dram(m, o);
    if (disk && dram) {
        *freed += demote(m, o, now);
        return 1;
    }
    if (disk) { /* lost its DRAM replicas some other way: file it right */
        list_unlink(o);
        list_push_front(&m->ssd_lru, o);
        return 2;
    }
    /* its copy is under way or waits for the disk (a writer that outruns
     * the disk gets back pressure): skipped, never dropped for that */
    if ((o->flags & OF_OFFLOADING) || offload(m, o, now) != -1)
        return 2;
    CNT(m, tier_dram_dropped_total)++;
    return 0;
}

void cr__m_tier_disk_hit(cr__master_t *m, obj_t *o, uint64_t now)
{
    if (!(o->flags & OF_HIT1)) {
        o->flags |= OF_HIT1; /* a one-hit key stays on disk */
        return;
    }
    if ((o->flags & OF_PROMOTING) || m->cfg.tier_no_promote)
        return;
    /* only into free DRAM: a promotion must not push other objects out */
    double wm = m->cfg.offload_watermark > 0 ? m->cfg.offload_watermark : m->cfg.high_watermark;
    if ((double)(m_used(m) + o->size) > wm * (double)m->capacity)
        return;
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    uint32_t ds = NONE32, dblk = 0;
    for (uint32_t r = 0; r < o->n_rep && ds == NONE32; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD) && m->segs[sh[0].seg].tier) {
            ds = sh[0].seg;
            dblk = sh[0].blk;
        }
        sh += n;
    }
    if (ds == NONE32 || o->n_rep >= CR__RPC_REPLICA_MAX)
        return;
    uint32_t dram = NONE32;
    for (uint32_t s = 0; s < m->n_segs && dram == NONE32; s++)
        if (m->segs[s].live && !m->segs[s].tier && m->segs[s].client == m->segs[ds].client &&
            m->segs[s].alloc_after_ms <= now)
            dram = s;
    if (dram == NONE32)
        return;
    uint64_t off;
    uint32_t b = cr__oalloc_alloc(m->segs[dram].alloc, o->size, &off);
    if (b == CR__OALLOC_NONE)
        return;
    m->allocated += cr__oalloc_block_size(m->segs[dram].alloc, b);
    task_t t = {.op = CR__TIER_OP_PROMOTE,
                .seg = ds,
                .blk = dblk,
                .src_seg = dram,
                .blk2 = b,
                .gen2 = m->segs[dram].gen,
                .off = cr__oalloc_block_offset(m->segs[ds].alloc, dblk),
                .len = cr__tier_disk_len(o->key_len, o->size),
                .version = o->version,
                .size = o->size,
                .src_addr = m->segs[dram].base + off,
                .key_len = o->key_len,
                .key = malloc(o->key_len)};
    if (!t.key || task_push(m, &t)) {
        free(t.key);
        cr__m_block_unalloc(m, dram, b);
        return;
    }
    memcpy(t.key, obj_key(o), o->key_len);
    o->flags |= OF_PROMOTING;
}

/* A promotion that will not attach: its DRAM block (if that segment is
 * still the same mount) after release_ms, and the object's flag. */
static void promote_abandon(cr__master_t *m, task_t *t, uint64_t release_ms, uint64_t now, int fail)
{
    obj_t *o = cr__m_lookup(m, t->key, t->key_len);
    if (o && o->version == t->version)
        o->flags &= (uint8_t)~OF_PROMOTING;
    seg_t *sg = &m->segs[t->src_seg];
    if (sg->live && sg->gen == t->gen2)
        cr__m_block_release(m, t->src_seg, t->blk2, release_ms, now);
    if (fail)
        CNT(m, tier_ssd_promotion_failures_total)++;
}

void cr__m_tier_put_completed(cr__master_t *m, obj_t *o, uint64_t now)
{
    if (m->cfg.offload_watermark <= 0)
        offload(m, o, now);
}

void cr__m_tier_block_freed(cr__master_t *m, uint32_t seg, uint32_t blk)
{
    task_t t = {.op = CR__TIER_OP_ERASE,
                .seg = seg,
                .blk = NONE32,
                .off = cr__oalloc_block_offset(m->segs[seg].alloc, blk)};
    if (task_push(m, &t) == 0)
        CNT(m, tier_ssd_erases_total)++;
}

/* Removes task i (keeps the order: erases must reach the node before a
 * later write to the same place). */
static void task_remove(cr__master_t *m, size_t i)
{
    struct cr__mtier *T = m->tier;
    free(T->t[i].key);
    memmove(&T->t[i], &T->t[i + 1], (T->n - i - 1) * sizeof *T->t);
    T->n--;
}

/* An offload that will not complete: its block and the object's flag. */
static void offload_abandon(cr__master_t *m, task_t *t, uint64_t release_ms, uint64_t now)
{
    obj_t *o = cr__m_lookup(m, t->key, t->key_len);
    if (o && o->version == t->version)
        o->flags &= (uint8_t)~OF_OFFLOADING;
    if (m->segs[t->seg].live)
        cr__m_block_release(m, t->seg, t->blk, release_ms, now);
    CNT(m, tier_ssd_offload_failures_total)++;
}

uint64_t cr__m_tier_dram_seg_dropped(cr__master_t *m, uint32_t s, uint64_t now, held_set_t *hs)
{
    seg_t *sg = &m->segs[s];
    uint64_t hold = 0;
    for (size_t i = 0; m->tier && i < m->tier->n;) {
        task_t *t = &m->tier->t[i];
        if (t->op != CR__TIER_OP_PROMOTE || t->src_seg != s || t->gen2 != sg->gen) {
            i++;
            continue;
        }
        if (!t->handed) { /* never handed: nothing writes its DRAM block, nor ever will */
            promote_abandon(m, t, 0, now, 1);
            task_remove(m, i);
            continue;
        }
        /* its node may write the DRAM block until the task times out, and
         * a late write one timeout more (cr__m_tier_tick) */
        uint64_t until = t->handed_ms + 2 * TASK_TIMEOUT_MS + 1;
        cr__m_held_add(m, hs, cr__oalloc_block_offset(sg->alloc, t->blk2),
                       cr__oalloc_block_size(sg->alloc, t->blk2), until, now);
        if (until > hold)
            hold = until;
        i++;
    }
    return hold;
}

void cr__m_tier_seg_dropped(cr__master_t *m, uint32_t s, uint64_t now)
{
    if (!m->tier)
        return;
    for (size_t i = 0; i < m->tier->n;) {
        task_t *t = &m->tier->t[i];
        if (t->seg == s) {
            if (t->op == CR__TIER_OP_OFFLOAD) {
                obj_t *o = cr__m_lookup(m, t->key, t->key_len);
                if (o && o->version == t->version)
                    o->flags &= (uint8_t)~OF_OFFLOADING;
            } else if (t->op == CR__TIER_OP_PROMOTE) {
                /* a handed one's node may still write the DRAM block (it may
                 * only be partitioned) until the task times out, and a late
                 * write one timeout more (as cr__m_tier_dram_seg_dropped):
                 * quarantined until then; one never handed, freed now */
                promote_abandon(m, t, t->handed ? t->handed_ms + 2 * TASK_TIMEOUT_MS + 1 : 0,
                                now, 1);
            }
            task_remove(m, i);
        } else {
            i++;
        }
    }
}

/* Offloads ahead of eviction: above the offload watermark, the coldest
 * DRAM objects without a disk copy are queued. */
static void schedule(cr__master_t *m, uint64_t now)
{
    double wm = m->cfg.offload_watermark;
    if (m->capacity == 0)
        return;
    uint64_t used = m_used(m);
    if (wm > 0 && (double)used <= wm * (double)m->capacity)
        return;
    uint32_t visited = 0, fails = 0;
    obj_t *o = m->lru.prev;
    while (o != &m->lru && visited++ < SCHED_VISIT && fails < 64) {
        obj_t *prev = o->prev;
        if (!(o->flags & OF_OFFLOADING) && !cr__m_obj_on_disk(m, o) && offload(m, o, now))
            fails++;
        o = prev;
    }
}

void cr__m_tier_tick(cr__master_t *m, uint64_t now)
{
    if (!m->tier)
        return;
    for (size_t i = 0; i < m->tier->n;) {
        task_t *t = &m->tier->t[i];
        if (t->handed && now - t->handed_ms > TASK_TIMEOUT_MS) {
            if (t->op == CR__TIER_OP_OFFLOAD)
                offload_abandon(m, t, now + TASK_TIMEOUT_MS, now); /* a late write may land */
            else if (t->op == CR__TIER_OP_PROMOTE)
                promote_abandon(m, t, now + TASK_TIMEOUT_MS, now, 1);
            task_remove(m, i);
        } else {
            i++;
        }
    }
    for (uint32_t s = 0; s < m->n_segs; s++) {
        seg_t *sg = &m->segs[s];
        if (!sg->live || !sg->tier)
            continue;
        uint64_t cap = cr__oalloc_capacity(sg->alloc), used = cr__oalloc_used(sg->alloc);
        if ((double)used > m->cfg.ssd_high_watermark * (double)cap)
            ssd_evict(m, s, used - (uint64_t)((m->cfg.ssd_high_watermark - 0.05) * (double)cap),
                      now);
    }
    schedule(m, now);
}

void cr__m_tier_stats_locked(cr__master_t *m, uint64_t *c)
{
    uint64_t segs = 0, cap = 0, used = 0, only = 0, q = 0, run = 0;
    for (uint32_t s = 0; s < m->n_segs; s++)
        if (m->segs[s].live && m->segs[s].tier) {
            segs++;
            cap += cr__oalloc_capacity(m->segs[s].alloc);
            used += cr__oalloc_used(m->segs[s].alloc);
        }
    for (obj_t *o = m->ssd_lru.next; o != &m->ssd_lru; o = o->next)
        only++;
    if (m->tier)
        for (size_t i = 0; i < m->tier->n; i++)
            m->tier->t[i].handed ? run++ : q++;
    c[CR__MM_tier_ssd_segments] = segs;
    c[CR__MM_tier_ssd_capacity_bytes] = cap;
    c[CR__MM_tier_ssd_used_bytes] = used;
    c[CR__MM_tier_ssd_only_objects] = only;
    c[CR__MM_tier_tasks_queued] = q;
    c[CR__MM_tier_tasks_running] = run;
}

/* ---- rpcs ------------------------------------------------------------------ */

/* The disk segment named by req for its sender, or NONE32. */
static uint32_t req_seg(cr__master_t *m, const cr__rpc_msg_t *req)
{
    if (!req->segment || !cr__tier_is_ssd(req->segment))
        return NONE32;
    uint32_t s = cr__m_seg_find(m, req->segment);
    if (s == NONE32 || !m->segs[s].tier ||
        m->segs[s].client != cr__m_client_find(m, req->client_id))
        return NONE32;
    return s;
}

static void complete_offload(cr__master_t *m, uint32_t s, const cr__rpc_item_t *in, uint64_t now)
{
    struct cr__mtier *T = m->tier;
    size_t i;
    for (i = 0; i < T->n; i++) {
        task_t *t = &T->t[i];
        if (t->handed && t->op == CR__TIER_OP_OFFLOAD && t->seg == s && t->off == in->replica_id &&
            t->version == in->version && t->key_len == in->key_len &&
            !memcmp(t->key, in->key, in->key_len))
            break;
    }
    if (i == T->n)
        return; /* timed out meanwhile: its block is already released */
    task_t *t = &T->t[i];
    if (in->status) {
        offload_abandon(m, t, 0, now);
        task_remove(m, i);
        return;
    }
    obj_t *o = cr__m_lookup_complete(m, t->key, t->key_len);
    if (o && o->version == t->version)
        o->flags &= (uint8_t)~OF_OFFLOADING;
    /* the copy is good only if the DRAM replica it came from stayed
     * attached the whole time (attached space is never reused) */
    if (!o || o->version != t->version || t->src_rep >= o->n_rep ||
        (obj_nsh(o)[t->src_rep] & REP_DEAD)) {
        cr__m_block_release(m, t->seg, t->blk, 0, now);
        task_remove(m, i);
        return;
    }
    obj_t *n = cr__m_obj_add_replica(m, o, t->seg, t->blk);
    if (!n) {
        offload_abandon(m, t, 0, now);
        task_remove(m, i);
        return;
    }
    cr__m_jr_obj(m, n); /* HA/journal: the object with its disk replica */
    CNT(m, tier_ssd_offloads_total)++;
    CNT(m, tier_ssd_offload_bytes_total) += t->size;
    task_remove(m, i);
    m->state_seq++;
    /* under DRAM pressure the DRAM copy goes now (it was chosen as cold) */
    uint64_t used = m_used(m);
    if (m->cfg.offload_watermark > 0 &&
        (double)used > m->cfg.offload_watermark * (double)m->capacity && n->until_ms <= now &&
        !(n->flags & (OF_HARD_PIN | OF_SOFT_PIN)))
        demote(m, n, now);
}

static void complete_promote(cr__master_t *m, uint32_t s, const cr__rpc_item_t *in, uint64_t now)
{
    struct cr__mtier *T = m->tier;
    size_t i;
    for (i = 0; i < T->n; i++) {
        task_t *t = &T->t[i];
        if (t->handed && t->op == CR__TIER_OP_PROMOTE && t->seg == s && t->off == in->replica_id &&
            t->version == in->version && t->key_len == in->key_len &&
            !memcmp(t->key, in->key, in->key_len))
            break;
    }
    if (i == T->n)
        return;
    task_t *t = &T->t[i];
    obj_t *o = cr__m_lookup_complete(m, t->key, t->key_len);
    seg_t *sg = &m->segs[t->src_seg];
    /* the node checked key, version and crc of what it copied, so the DRAM
     * bytes are this object's whatever happened to its disk copy since */
    if (in->status || !o || o->version != t->version || !sg->live || sg->gen != t->gen2) {
        promote_abandon(m, t, 0, now, in->status != 0);
        task_remove(m, i);
        return;
    }
    o->flags &= (uint8_t)~OF_PROMOTING;
    obj_t *n = cr__m_obj_add_replica(m, o, t->src_seg, t->blk2);
    if (!n) {
        promote_abandon(m, t, 0, now, 1);
        task_remove(m, i);
        return;
    }
    list_unlink(n);
    list_push_front(&m->lru, n);
    m->state_seq++;
    CNT(m, tier_ssd_promotions_total)++;
    task_remove(m, i);
}

static void corrupt(cr__master_t *m, uint32_t s, const cr__rpc_item_t *in, uint64_t now)
{
    CNT(m, tier_ssd_corrupt_total)++;
    obj_t *o = cr__m_lookup_complete(m, in->key, in->key_len);
    if (!o || o->version != in->version)
        return;
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    uint64_t rel = cr__m_obj_release_ms(m, o, now);
    int live = 0;
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD)) {
            if (sh[0].seg == s &&
                cr__oalloc_block_offset(m->segs[s].alloc, sh[0].blk) == in->replica_id) {
                cr__m_block_release(m, s, sh[0].blk, rel, now);
                nsh[r] |= REP_DEAD;
                CNT(m, replicas_dropped_total)++;
            } else {
                live++;
            }
        }
        sh += n;
    }
    if (!live && (o->flags & OF_FS)) { /* its shared-FS file keeps it (fs.c) */
        list_unlink(o);
        list_push_front(cr__m_obj_list(m, o), o);
        cr__m_jr_obj(m, o);
    } else if (!live) {
        CNT(m, objects_lost_total)++;
        cr__m_obj_delete(m, o, rel, now);
    }
}

static int adopt(cr__master_t *m, uint32_t s, const cr__rpc_item_t *in, uint64_t now)
{
    if (!key_ok(in->key, in->key_len))
        return CR_E_INVALID_KEY;
    if (in->n_replicas != 1 || in->replicas[0].n_shards != 1 || in->size == 0 ||
        in->size > CR__RPC_VALUE_MAX)
        return CR_E_INVALID_PARAMS;
    const cr__rpc_shard_t *sh = &in->replicas[0].shards[0];
    if (strcmp(sh->segment, m->segs[s].name) || sh->len != cr__tier_disk_len(in->key_len, in->size))
        return CR_E_INVALID_PARAMS;
    obj_t *o = cr__m_lookup(m, in->key, in->key_len);
    if (o && (!(o->flags & OF_COMPLETE) || o->version != in->version))
        return CR_E_OBJECT_ALREADY_EXISTS;
    uint32_t blk = cr__oalloc_reserve(m->segs[s].alloc, sh->addr, sh->len);
    if (blk == CR__OALLOC_NONE)
        return CR_E_INVALID_PARAMS; /* overlaps, outside, misaligned */
    if (o) {
        obj_t *n = cr__m_obj_add_replica(m, o, s, blk);
        if (!n) {
            cr__oalloc_free(m->segs[s].alloc, blk);
            return CR_E_OBJECT_ALREADY_EXISTS;
        }
        cr__m_jr_obj(m, n);
        CNT(m, tier_ssd_adopted_total)++;
        return 0;
    }
    uint64_t h = key_hash(in->key, in->key_len);
    o = malloc(sizeof *o + 4 + sizeof(shard_t) + in->key_len);
    if (!o) {
        cr__oalloc_free(m->segs[s].alloc, blk);
        return -ENOMEM;
    }
    memset(o, 0, sizeof *o);
    o->version = in->version;
    o->size = in->size;
    o->key_len = (uint16_t)in->key_len;
    o->n_rep = 1;
    o->flags = OF_COMPLETE;
    obj_nsh(o)[0] = 1;
    obj_shards(o)[0] = (shard_t){.seg = s, .blk = blk};
    memcpy(obj_key(o), in->key, in->key_len);
    if (cr__m_map_insert(m, o, h)) {
        cr__oalloc_free(m->segs[s].alloc, blk);
        free(o);
        return -ENOMEM;
    }
    list_push_front(&m->ssd_lru, o);
    m->n_complete++;
    m->state_seq++;
    if (in->version >= m->next_version)
        m->next_version = in->version + 1;
    cr__m_jr_obj(m, o);
    CNT(m, tier_ssd_adopted_total)++;
    (void)now;
    return 0;
}

/* Builds the reply items: tasks of segment s not handed yet, in order. */
static int hand_tasks(cr__master_t *m, uint32_t s, cr__rpc_msg_t *reply, uint64_t now)
{
    struct cr__mtier *T = m->tier;
    if (!T)
        return 0;
    size_t n = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < T->n && n < TASK_HAND_MAX && bytes < TASK_HAND_BYTES; i++)
        if (T->t[i].seg == s && !T->t[i].handed) {
            n++;
            bytes += T->t[i].size;
        }
    if (!n)
        return 0;
    reply->items = cr__rpc_msg_alloc(reply, n * sizeof *reply->items);
    if (!reply->items)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < T->n && k < n; i++) {
        task_t *t = &T->t[i];
        if (t->seg != s || t->handed)
            continue;
        cr__rpc_item_t *it = &reply->items[k];
        it->flags = t->op;
        it->replica_id = t->off;
        if (t->op == CR__TIER_OP_OFFLOAD) {
            it->key = cr__rpc_msg_strdup(reply, t->key, t->key_len);
            it->key_len = t->key_len;
            it->version = t->version;
            it->size = t->size;
            it->n_replicas = 2;
            it->replicas = cr__rpc_msg_alloc(reply, 2 * sizeof *it->replicas);
            cr__rpc_shard_t *shs = cr__rpc_msg_alloc(reply, 2 * sizeof *shs);
            if (!it->key || !it->replicas || !shs)
                return -ENOMEM;
            shs[0] = (cr__rpc_shard_t){.segment = m->segs[t->src_seg].name,
                                       .addr = t->src_addr,
                                       .len = t->size};
            shs[1] = (cr__rpc_shard_t){.segment = m->segs[s].name, .addr = t->off, .len = t->len};
            it->replicas[0] = (cr__rpc_replica_t){.n_shards = 1, .shards = &shs[0]};
            it->replicas[1] = (cr__rpc_replica_t){.n_shards = 1, .shards = &shs[1]};
        } else if (t->op == CR__TIER_OP_PROMOTE) {
            it->key = cr__rpc_msg_strdup(reply, t->key, t->key_len);
            it->key_len = t->key_len;
            it->version = t->version;
            it->size = t->size;
            it->n_replicas = 2;
            it->replicas = cr__rpc_msg_alloc(reply, 2 * sizeof *it->replicas);
            cr__rpc_shard_t *shs = cr__rpc_msg_alloc(reply, 2 * sizeof *shs);
            if (!it->key || !it->replicas || !shs)
                return -ENOMEM;
            shs[0] = (cr__rpc_shard_t){.segment = m->segs[s].name, .addr = t->off, .len = t->len};
            shs[1] = (cr__rpc_shard_t){.segment = m->segs[t->src_seg].name,
                                       .addr = t->src_addr,
                                       .len = t->size};
            it->replicas[0] = (cr__rpc_replica_t){.n_shards = 1, .shards = &shs[0]};
            it->replicas[1] = (cr__rpc_replica_t){.n_shards = 1, .shards = &shs[1]};
        }
        t->handed = 1;
        t->handed_ms = now;
        k++;
    }
    reply->n_items = (uint32_t)k;
    return 0;
}

int cr__m_tier_handle_locked(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                             uint64_t now)
{
    uint16_t type = req->type & (uint16_t)~CR__RPC_REPLY;
    reply->segment = NULL;
    if (!tier_get(m))
        return -ENOMEM;
    if (type == CR__RPC_TIER_MOUNT) {
        if (!req->segment || !cr__tier_is_ssd(req->segment) || req->base != 0)
            return CR_E_INVALID_PARAMS;
        if (cr__m_client_find(m, req->client_id) == NONE32)
            return CR_E_SEGMENT_NOT_FOUND; /* mount the DRAM segment first */
        return cr__m_mount_locked(m, req->client_id, req->segment, 0, req->size, now);
    }
    uint32_t s = req_seg(m, req);
    if (s == NONE32)
        return CR_E_SEGMENT_NOT_FOUND;
    if (type == CR__RPC_TIER_REPORT) {
        reply->items = req->n_items ? cr__rpc_msg_alloc(reply, req->n_items * sizeof *reply->items)
                                    : NULL;
        if (req->n_items && !reply->items)
            return -ENOMEM;
        reply->n_items = req->n_items;
        for (uint32_t i = 0; i < req->n_items; i++) {
            int rc = adopt(m, s, &req->items[i], now);
            reply->items[i].status = rc == -ENOMEM ? CR_E_INTERNAL_ERROR : rc;
            reply->items[i].replica_id = req->items[i].replica_id;
        }
        return 0;
    }
    /* TIER_SYNC: completions, then new work */
    for (uint32_t i = 0; i < req->n_items; i++) {
        const cr__rpc_item_t *in = &req->items[i];
        if (in->flags == CR__TIER_OP_OFFLOAD)
            complete_offload(m, s, in, now);
        else if (in->flags == CR__TIER_OP_PROMOTE)
            complete_promote(m, s, in, now);
        else if (in->flags == CR__TIER_OP_CORRUPT)
            corrupt(m, s, in, now);
        else if (in->flags == CR__TIER_OP_ERASE) {
            struct cr__mtier *T = m->tier;
            for (size_t k = 0; k < T->n; k++)
                if (T->t[k].handed && T->t[k].op == CR__TIER_OP_ERASE && T->t[k].seg == s &&
                    T->t[k].off == in->replica_id) {
                    task_remove(m, k);
                    break;
                }
        }
    }
    schedule(m, now);
    reply->count = cr__oalloc_capacity(m->segs[s].alloc);
    return hand_tasks(m, s, reply, now);
}
