/* Master space release: freeing blocks, the quarantine (a heap by release time) of space that
 * may still be read or written, deleting an object (master_priv.h). */
#include "store/master/master_priv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* The quarantine is a binary min-heap on release_ms (m->q[0] is due
 * first): entries come with different hold times (a reader's lease, a
 * pending put's deadline plus a put timeout, a reservation's expiry plus a
 * put timeout), and a queue in arrival order would keep every due entry
 * behind one that is not (measured: GBs of due space held while the master
 * evicted live objects for room, docs/benchmarks.md). */
static int q_before(const qent_t *a, const qent_t *b) { return a->release_ms < b->release_ms; }

static void q_push(cr__master_t *m, uint32_t seg, uint32_t blk, uint64_t bytes, uint64_t rel)
{
    if (m->q_len == m->q_cap) {
        size_t nc = m->q_cap ? m->q_cap * 2 : 256;
        qent_t *nq = realloc(m->q, nc * sizeof *nq);
        if (!nq) {
            /* cannot remember it: leak the block (never reuse) rather
             * than risk handing out space a reader may still read */
            CR_LOG_ERROR("master", "quarantine full (ENOMEM): %" PRIu64 " bytes leaked", bytes);
            return;
        }
        m->q = nq;
        m->q_cap = nc;
    }
    qent_t e = {.seg = seg, .gen = m->segs[seg].gen, .blk = blk, .bytes = bytes, .release_ms = rel};
    size_t i = m->q_len++;
    while (i > 0 && q_before(&e, &m->q[(i - 1) / 2])) { /* sift up */
        m->q[i] = m->q[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    m->q[i] = e;
    if (!m->segs[seg].tier) {
        m->quarantine_bytes += bytes;
        CNT(m, quarantined_bytes_total) += bytes;
    }
}

/* Removes the heap's first entry. */
static void q_pop(cr__master_t *m)
{
    qent_t last = m->q[--m->q_len];
    size_t i = 0, n = m->q_len;
    for (;;) { /* sift down */
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && q_before(&m->q[c + 1], &m->q[c]))
            c++;
        if (!q_before(&m->q[c], &last))
            break;
        m->q[i] = m->q[c];
        i = c;
    }
    if (n)
        m->q[i] = last;
}

/* Frees a block without marking the state changed (undoing a placement
 * that just allocated it). */
void cr__m_block_unalloc(cr__master_t *m, uint32_t seg, uint32_t blk)
{
    seg_t *s = &m->segs[seg];
    uint64_t b = cr__oalloc_block_size(s->alloc, blk);
    if (cr__oalloc_free(s->alloc, blk) == 0 && !s->tier)
        m->allocated -= b;
}

static void block_free(cr__master_t *m, uint32_t seg, uint32_t blk)
{
    if (m->segs[seg].tier)
        cr__m_tier_block_freed(m, seg, blk);
    cr__m_block_unalloc(m, seg, blk);
    m->state_seq++;
}

/* Frees a block now or, if it may still be accessed until release_ms, later. */
void cr__m_block_release(cr__master_t *m, uint32_t seg, uint32_t blk, uint64_t release_ms,
                         uint64_t now)
{
    if (release_ms > now)
        q_push(m, seg, blk, cr__oalloc_block_size(m->segs[seg].alloc, blk), release_ms);
    else
        block_free(m, seg, blk);
}

/* Releases due quarantine entries, earliest first; bounded by max entries. */
void cr__m_quarantine_release(cr__master_t *m, uint64_t now, size_t max)
{
    while (m->q_len && max--) {
        qent_t *e = &m->q[0];
        if (e->release_ms > now)
            break;
        if (e->seg != NONE32 && m->segs[e->seg].live && m->segs[e->seg].gen == e->gen) {
            if (!m->segs[e->seg].tier)
                m->quarantine_bytes -= e->bytes;
            block_free(m, e->seg, e->blk);
        }
        q_pop(m);
    }
}

/* When the space of o may be accessed until: readers up to the lease
 * expiry; for a pending put, its writer until the deadline plus another
 * put timeout; with capabilities on, never before a WRITE grant over it
 * expires (a grant cannot be recalled: its holder could still write
 * there, into whatever object the space went to next). */
uint64_t cr__m_obj_release_ms(cr__master_t *m, obj_t *o, uint64_t now)
{
    uint64_t rel = o->until_ms;
    if (!(o->flags & OF_COMPLETE))
        rel = (rel > now ? rel : now) + m->cfg.put_timeout_ms;
    uint64_t w = obj_wcap_ms(o, now);
    return w > rel ? w : rel;
}

/* Frees every live replica's blocks (skipping segment skip_seg, whose
 * allocator is going away) and marks the replicas dead. */
static void obj_release_space(cr__master_t *m, obj_t *o, uint64_t release_ms, uint64_t now,
                              uint32_t skip_seg)
{
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD))
            for (uint32_t s = 0; s < n; s++)
                if (sh[s].seg != skip_seg)
                    cr__m_block_release(m, sh[s].seg, sh[s].blk, release_ms, now);
        nsh[r] |= REP_DEAD;
        sh += n;
    }
}

uint64_t cr__m_obj_bytes(cr__master_t *m, obj_t *o) { return cr__m_obj_bytes_outside(m, o, NULL); }

uint64_t cr__m_obj_bytes_outside(cr__master_t *m, obj_t *o, const excl_t *ex)
{
    uint64_t b = 0;
    uint8_t *nsh = obj_nsh(o);
    shard_t *sh = obj_shards(o);
    for (uint32_t r = 0; r < o->n_rep; r++) {
        uint32_t n = nsh[r] & 0x7f;
        if (!(nsh[r] & REP_DEAD))
            for (uint32_t s = 0; s < n; s++)
                if (!m->segs[sh[s].seg].tier && !excl_has(ex, sh[s].seg)) /* DRAM bytes only */
                    b += cr__oalloc_block_size(m->segs[sh[s].seg].alloc, sh[s].blk);
        sh += n;
    }
    return b;
}

/* Removes o from lists and map and frees it. Its space must already be
 * released (or is released here with release_ms). */
void cr__m_obj_delete(cr__master_t *m, obj_t *o, uint64_t release_ms, uint64_t now)
{
    cr__m_jr_key(m, CR__HA_DEL, o);
    obj_release_space(m, o, release_ms, now, NONE32);
    int64_t i = cr__m_map_find(m, obj_key(o), o->key_len, key_hash(obj_key(o), o->key_len));
    if (i >= 0)
        cr__m_map_erase(m, (uint64_t)i);
    list_unlink(o);
    cr__m_fs_obj_gone(m, o); /* its shared-FS file (fs.c) */
    if (o->flags & OF_COMPLETE)
        m->n_complete--;
    else
        m->n_pending--;
    free(o);
}
