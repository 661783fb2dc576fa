/* Master placement: candidate segments (preferred, then a rotating
 * cursor), one replica per distinct segment, contiguous or striped; and the
 * replica list of an object as sent to clients (master_priv.h). */
#include "store/master/master_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int seg_used(const placing_t *p, uint32_t s)
{
    for (uint32_t i = 0; i < p->n_used; i++)
        if (p->used_segs[i] == s)
            return 1;
    return 0;
}

void cr__m_placing_rollback(cr__master_t *m, placing_t *p)
{
    for (uint32_t i = 0; i < p->n_sh; i++)
        cr__m_block_unalloc(m, p->sh[i].seg, p->sh[i].blk);
    p->n_sh = 0;
    p->n_rep = 0;
    p->n_used = 0;
}

void cr__m_excl_resolve(cr__master_t *m, const char *const *names, uint32_t n, excl_t *ex)
{
    ex->n = 0;
    for (uint32_t i = 0; names && i < n && ex->n < CR__RPC_EXCLUDE_MAX; i++) {
        uint32_t s = names[i] ? cr__m_seg_find(m, names[i]) : NONE32;
        if (s != NONE32 && !excl_has(ex, s))
            ex->seg[ex->n++] = s;
    }
}

/* Candidate order into m->order: preferred (mounted) names, then every
 * live segment from a rotating cursor; none of ex. Returns the count. */
static uint32_t candidates(cr__master_t *m, const cr__rpc_repl_cfg_t *cfg, const excl_t *ex,
                           uint64_t now)
{
    uint32_t need = m->n_segs + CR__RPC_PREFERRED_MAX;
    if (need > m->cap_order) {
        uint32_t *o = realloc(m->order, need * sizeof *o);
        if (!o)
            return 0;
        m->order = o;
        m->cap_order = need;
    }
    uint32_t *order = m->order, n = 0, n_pref;
    for (uint32_t i = 0; cfg && cfg->preferred && i < cfg->n_preferred && i < CR__RPC_PREFERRED_MAX;
         i++) {
        uint32_t s = cfg->preferred[i] ? cr__m_seg_find(m, cfg->preferred[i]) : NONE32;
        if (s != NONE32 && (m->segs[s].alloc_after_ms > now || m->segs[s].tier || excl_has(ex, s)))
            continue;
        int dup = 0;
        for (uint32_t k = 0; k < n; k++)
            dup |= order[k] == s;
        if (s != NONE32 && !dup)
            order[n++] = s;
    }
    n_pref = n;
    uint32_t start = m->n_segs ? m->seg_cursor++ % m->n_segs : 0;
    for (uint32_t k = 0; k < m->n_segs; k++) {
        uint32_t s = (start + k) % m->n_segs;
        if (!m->segs[s].live || m->segs[s].tier || m->segs[s].alloc_after_ms > now ||
            excl_has(ex, s))
            continue;
        int dup = 0;
        for (uint32_t j = 0; j < n_pref; j++)
            dup |= order[j] == s;
        if (!dup)
            order[n++] = s;
    }
    return n;
}

/* Places one replica of size bytes, contiguous if any candidate fits, else
 * striped over several unused candidates (shards >= min_stripe except the
 * last). Returns 0 or -1 (nothing changed). */
static int place_replica(cr__master_t *m, placing_t *p, uint64_t size, uint32_t n_cand)
{
    const uint32_t *order = m->order;
    for (uint32_t k = 0; k < n_cand; k++) {
        uint32_t s = order[k];
        if (seg_used(p, s))
            continue;
        uint64_t off;
        int confirmed = 0;
        /* an HA leader carves small replicas from a window (window.c) */
        uint32_t b = cr__m_win_alloc(m, s, size, &confirmed);
        if (b == NONE32) {
            b = cr__oalloc_alloc(m->segs[s].alloc, size, &off);
            if (b == CR__OALLOC_NONE)
                continue;
            m->allocated += cr__oalloc_block_size(m->segs[s].alloc, b);
        }
        p->n_lazy += confirmed;
        p->sh[p->n_sh] = (shard_t){.seg = s, .blk = b};
        p->len[p->n_sh++] = size;
        p->used_segs[p->n_used++] = s;
        p->nsh[p->n_rep++] = 1;
        return 0;
    }
    /* striping */
    uint32_t first = p->n_sh, used0 = p->n_used;
    uint64_t left = size;
    for (uint32_t k = 0; k < n_cand && left && p->n_sh - first < CR__RPC_SHARD_MAX; k++) {
        uint32_t s = order[k];
        if (seg_used(p, s))
            continue;
        cr__oalloc_t *a = m->segs[s].alloc;
        uint64_t chunk = cr__oalloc_max_alloc(a);
        if (chunk >= left)
            chunk = left;
        else if (chunk < m->cfg.min_stripe)
            continue;
        uint64_t off;
        uint32_t b = cr__oalloc_alloc(a, chunk, &off);
        if (b == CR__OALLOC_NONE)
            continue;
        m->allocated += cr__oalloc_block_size(a, b);
        p->sh[p->n_sh] = (shard_t){.seg = s, .blk = b};
        p->len[p->n_sh++] = chunk;
        p->used_segs[p->n_used++] = s;
        left -= chunk;
    }
    if (left) {
        for (uint32_t i = first; i < p->n_sh; i++)
            cr__m_block_unalloc(m, p->sh[i].seg, p->sh[i].blk);
        p->n_sh = first;
        p->n_used = used0;
        return -1;
    }
    p->nsh[p->n_rep++] = (uint8_t)(p->n_sh - first);
    return 0;
}

int cr__m_place_all(cr__master_t *m, placing_t *p, uint64_t size, uint32_t n_rep,
                    const cr__rpc_repl_cfg_t *cfg, const excl_t *ex, uint64_t now)
{
    memset(p, 0, offsetof(placing_t, sh));
    p->n_sh = p->n_used = 0;
    uint32_t n_cand = candidates(m, cfg, ex, now);
    if (n_cand < n_rep)
        return -1;
    for (uint32_t r = 0; r < n_rep; r++)
        if (place_replica(m, p, size, n_cand)) {
            cr__m_placing_rollback(m, p);
            return -1;
        }
    return 0;
}

int cr__m_place_possible(const cr__master_t *m, uint64_t size, uint32_t n_rep, const excl_t *ex)
{
    /* every live DRAM segment counts, also one not allocatable yet (a name
     * held after a drop, one restored after a failover that waits for its
     * owner): its space comes back. Every replica on segments of its own:
     * n_rep segments and size * n_rep bytes of their whole capacity. */
    uint32_t n = 0;
    uint64_t cap = 0;
    for (uint32_t s = 0; s < m->n_segs; s++) {
        if (!m->segs[s].live || m->segs[s].tier || excl_has(ex, s))
            continue;
        uint64_t c = cr__oalloc_capacity(m->segs[s].alloc);
        cap = cap > UINT64_MAX - c ? UINT64_MAX : cap + c;
        n++;
    }
    return n >= n_rep && size <= cap / n_rep;
}

/* Fills it->replicas with the live replicas of o (names copied into the
 * arena of msg). Returns 0 or -ENOMEM. */
int cr__m_fill_replicas(cr__master_t *m, obj_t *o, cr__rpc_msg_t *msg, cr__rpc_item_t *it)
{
    uint8_t *nsh = obj_nsh(o);
    uint32_t live = 0;
    for (uint32_t r = 0; r < o->n_rep; r++)
        live += !(nsh[r] & REP_DEAD);
    if ((o->flags & OF_FS) && live < CR__RPC_REPLICA_MAX)
        live++; /* its shared-FS file, listed last (fs.c) */
    it->n_replicas = 0;
    it->replicas = live ? cr__rpc_msg_alloc(msg, live * sizeof *it->replicas) : NULL;
    if (live && !it->replicas)
        return -ENOMEM;
    /* DRAM replicas first, disk-tier replicas after (readers try in order) */
    for (int pass = 0; pass < 2; pass++) {
    shard_t *sh = obj_shards(o);
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD) && (m->segs[sh[0].seg].tier != 0) == (pass == 1)) {
            cr__rpc_replica_t *rp = &it->replicas[it->n_replicas++];
            rp->replica_id = REPLICA_ID(o->version, r);
            rp->n_shards = n;
            rp->shards = cr__rpc_msg_alloc(msg, n * sizeof *rp->shards);
            if (!rp->shards)
                return -ENOMEM;
            uint64_t left = o->size;
            for (uint32_t k = 0; k < n; k++) {
                seg_t *sg = &m->segs[sh[k].seg];
                uint64_t bs = cr__oalloc_block_size(sg->alloc, sh[k].blk);
                uint64_t len = k + 1 == n ? left : (bs < left ? bs : left);
                rp->shards[k].segment = cr__rpc_msg_strdup(msg, sg->name, strlen(sg->name));
                if (!rp->shards[k].segment)
                    return -ENOMEM;
                rp->shards[k].addr = sg->base + cr__oalloc_block_offset(sg->alloc, sh[k].blk);
                rp->shards[k].len = len;
                left -= len;
            }
        }
        sh += n;
    }
    }
    return cr__m_fs_fill(m, o, msg, it);
}
