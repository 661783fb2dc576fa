/* Held names of dropped segments (master_priv.h, held_t).
 *
 * A segment dropped while its space may still be touched (a reader's
 * lease, a pending put's writer, a reservation's holder, a copy task's
 * copier, space in quarantine) remembers, under its name, owner and range,
 * the byte ranges that may be touched and until when. When the same memory
 * is mounted again (a client that was only partitioned comes back), those
 * ranges are reserved in the new allocator and quarantined until their
 * time: everything else of the segment takes allocations at once, and no
 * new object is placed where a stale reader or writer may still land.
 * Ranges are kept by absolute address: a remount over a different but
 * overlapping range gets the part that falls inside it.
 *
 * When the list cannot be kept (more than m->held_ranges_max ranges, no
 * memory, a disk segment) the whole segment waits for the latest time, as
 * it did before ranges were kept. Every entry is journaled (HELD when it
 * changes, HELDEND when it is over: durable.c, ha/record.h) with its
 * times as milliseconds remaining, so a new leader or a restarted master
 * holds the same ranges at least as long (cr__m_held_restore).
 * Caller holds m->mu. */
#include "store/master/master_priv.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

static void set_clear(held_set_t *hs)
{
    free(hs->v);
    hs->v = NULL;
    hs->n = hs->cap = 0;
    hs->whole = 0;
}

static void set_whole(held_set_t *hs)
{
    set_clear(hs);
    hs->whole = 1;
}

void cr__m_held_add(cr__master_t *m, held_set_t *hs, uint64_t off, uint64_t len,
                    uint64_t until, uint64_t now)
{
    if (until <= now || hs->whole || !len)
        return;
    if (hs->n == hs->cap) {
        if (hs->n >= m->held_ranges_max) {
            set_whole(hs);
            return;
        }
        uint32_t nc = hs->cap ? hs->cap * 2 : 16;
        if (nc > m->held_ranges_max)
            nc = m->held_ranges_max;
        held_range_t *v = realloc(hs->v, nc * sizeof *v);
        if (!v) {
            set_whole(hs);
            return;
        }
        hs->v = v;
        hs->cap = nc;
    }
    hs->v[hs->n++] = (held_range_t){.off = off, .len = len, .until = until};
}

static int id_eq(cr__rpc_client_id_t a, cr__rpc_client_id_t b)
{
    return a.hi == b.hi && a.lo == b.lo;
}

/* Drops the ranges of hs that are over. */
static void set_compact(held_set_t *hs, uint64_t now)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < hs->n; i++)
        if (hs->v[i].until > now)
            hs->v[k++] = hs->v[i];
    hs->n = k;
}

/* The slot of the entry of that name, owner and memory: the same entry,
 * else one whose hold is over, else the one that ends first (its hold
 * ends early). An entry it replaces ends in the journal too. */
static held_t *slot_for(cr__master_t *m, const char *name, cr__rpc_client_id_t owner,
                        uint64_t base, uint64_t size, uint64_t now)
{
    int slot = -1, victim = 0;
    for (int h = 0; h < HELD_MAX; h++) {
        const held_t *hd = &m->held[h];
        if (!strcmp(hd->name, name) && id_eq(hd->owner, owner) && hd->base == base &&
            hd->size == size)
            return &m->held[h]; /* the same memory dropped again */
    }
    for (int h = 0; h < HELD_MAX && slot < 0; h++) {
        if (m->held[h].until <= now)
            slot = h;
        else if (m->held[h].until < m->held[victim].until)
            victim = h;
    }
    if (slot < 0) {
        slot = victim;
        CR_LOG_WARN("master", "%d segment names held: the hold of %s ends early", HELD_MAX,
                    m->held[slot].name);
    }
    held_t *hd = &m->held[slot];
    if (hd->name[0])
        cr__m_jr_heldend(m, hd);
    hd->name[0] = 0;
    hd->until = 0;
    return hd;
}

/* Puts the ranges of hs (taken over) and the hold into the entry of that
 * name, owner and memory. */
static held_t *held_put(cr__master_t *m, const char *name, cr__rpc_client_id_t owner,
                        uint64_t base, uint64_t size, held_set_t *hs, uint64_t hold,
                        uint64_t now)
{
    held_t *hd = slot_for(m, name, owner, base, size, now);
    if (hd->until <= now) { /* a new entry, or one whose hold is over */
        hd->until = 0;
        set_clear(&hd->rg);
    }
    set_compact(&hd->rg, now);
    if (hs->whole) {
        set_whole(&hd->rg);
    } else if (!hd->rg.n && !hd->rg.whole) {
        hd->rg = *hs; /* taken over */
        hs->v = NULL;
    } else {
        for (uint32_t i = 0; i < hs->n; i++)
            cr__m_held_add(m, &hd->rg, hs->v[i].off, hs->v[i].len, hs->v[i].until, now);
    }
    set_clear(hs);
    snprintf(hd->name, sizeof hd->name, "%s", name);
    if (hold > hd->until)
        hd->until = hold;
    hd->owner = owner;
    hd->base = base;
    hd->size = size;
    return hd;
}

/* An absolute byte range held until `until`. */
typedef struct abs_rg {
    uint64_t a, e, until;
} abs_rg_t;

static int abs_cmp(const void *x, const void *y)
{
    const abs_rg_t *p = x, *q = y;
    return p->a < q->a ? -1 : p->a > q->a;
}

/* Is [a, e) inside one of the n disjoint ascending ranges v, held at
 * least until `until`? */
static int covered(const abs_rg_t *v, size_t n, uint64_t a, uint64_t e, uint64_t until)
{
    size_t lo = 0, hi = n; /* the last range starting at or before a */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].a <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo && v[lo - 1].e >= e && v[lo - 1].until >= until;
}

/* Drops from hs (the ranges of dropped segment sg; whole: all of it until
 * hold) what the live entries of its name already hold, by absolute
 * address, at least as long. Memory mounted over held ranges and dropped
 * again before they were free (a refused fresh-name mount; a client
 * partitioned twice) gives them back in hs as quarantine: without this,
 * each such drop added them once more (an entry per refused client, 64 at
 * most, evicting real holds). Overlapping held ranges count with the
 * earlier time (only ever keeps too much). On ENOMEM hs stays as it is. */
static void set_drop_covered(cr__master_t *m, const seg_t *sg, held_set_t *hs, uint64_t hold,
                             uint64_t now)
{
    size_t n = 0;
    for (int h = 0; h < HELD_MAX; h++)
        if (m->held[h].until > now && !strcmp(m->held[h].name, sg->name))
            n += m->held[h].rg.whole ? 1 : m->held[h].rg.n;
    abs_rg_t *v = n ? malloc(n * sizeof *v) : NULL;
    if (!v)
        return;
    n = 0;
    for (int h = 0; h < HELD_MAX; h++) {
        const held_t *hd = &m->held[h];
        if (hd->until <= now || strcmp(hd->name, sg->name))
            continue;
        if (hd->rg.whole)
            v[n++] = (abs_rg_t){hd->base, hd->base + hd->size, hd->until};
        for (uint32_t i = 0; !hd->rg.whole && i < hd->rg.n; i++)
            if (hd->rg.v[i].until > now)
                v[n++] = (abs_rg_t){hd->base + hd->rg.v[i].off,
                                    hd->base + hd->rg.v[i].off + hd->rg.v[i].len,
                                    hd->rg.v[i].until};
    }
    qsort(v, n, sizeof *v, abs_cmp);
    size_t k = 0; /* disjoint: touching or overlapping ranges merged */
    for (size_t i = 0; i < n; i++) {
        if (k && v[i].a <= v[k - 1].e) {
            if (v[i].e > v[k - 1].e)
                v[k - 1].e = v[i].e;
            if (v[i].until < v[k - 1].until)
                v[k - 1].until = v[i].until;
        } else {
            v[k++] = v[i];
        }
    }
    if (hs->whole) {
        if (covered(v, k, sg->base, sg->base + sg->size, hold))
            set_clear(hs);
    } else {
        uint32_t j = 0;
        for (uint32_t i = 0; i < hs->n; i++)
            if (!covered(v, k, sg->base + hs->v[i].off, sg->base + hs->v[i].off + hs->v[i].len,
                         hs->v[i].until))
                hs->v[j++] = hs->v[i];
        hs->n = j;
    }
    free(v);
}

void cr__m_held_remember(cr__master_t *m, const seg_t *sg, held_set_t *hs, uint64_t hold,
                         uint64_t now)
{
    if (hold > now)
        set_drop_covered(m, sg, hs, hold, now);
    if (hold <= now || (!hs->whole && !hs->n)) { /* nothing (more) to hold */
        set_clear(hs);
        return;
    }
    /* one entry per name, owner and range: another client's memory that
     * later gets the same name does not wait (cr__m_held_apply) */
    cr__rpc_client_id_t owner = sg->client != NONE32 ? m->clients[sg->client].id : sg->owner;
    held_t *hd = held_put(m, sg->name, owner, sg->base, sg->size, hs, hold, now);
    cr__m_jr_held(m, hd, now);
}

void cr__m_held_restore(cr__master_t *m, const cr__ha_held_t *h, uint64_t now)
{
    if (!h->hold_ms)
        return;
    held_set_t hs = {0};
    hs.whole = h->whole;
    for (uint32_t i = 0; i < h->n_rg && !hs.whole; i++)
        cr__m_held_add(m, &hs, h->rg[i].off, h->rg[i].len, now + h->rg[i].ms, now);
    if (!hs.whole && !hs.n)
        return;
    held_put(m, h->name, h->client, h->base, h->size, &hs, now + h->hold_ms, now);
}

static int rg_cmp(const void *a, const void *b)
{
    const held_range_t *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

uint64_t cr__m_held_ranges(cr__master_t *m, uint32_t s, cr__rpc_client_id_t id, uint64_t now,
                           held_range_t **out, size_t *n_out, int *whole_out)
{
    const seg_t *sg = &m->segs[s];
    uint64_t g = cr__oalloc_granule(sg->alloc), cap = cr__oalloc_capacity(sg->alloc);
    uint64_t whole_until = 0;
    held_range_t *t = NULL;
    size_t n = 0, tcap = 0;
    int whole = 0;
    for (int h = 0; h < HELD_MAX; h++) {
        const held_t *hd = &m->held[h];
        if (hd->until <= now || strcmp(hd->name, sg->name) ||
            !(id_eq(hd->owner, id) ||
              (sg->base < hd->base + hd->size && hd->base < sg->base + sg->size)))
            continue;
        if (hd->until > whole_until)
            whole_until = hd->until;
        if (hd->rg.whole || sg->tier) {
            whole = 1;
            continue;
        }
        for (uint32_t i = 0; i < hd->rg.n && !whole; i++) {
            const held_range_t *r = &hd->rg.v[i];
            if (r->until <= now)
                continue;
            /* by absolute address: the part inside the new memory */
            uint64_t a = hd->base + r->off, e = a + r->len;
            if (a < sg->base)
                a = sg->base;
            if (e > sg->base + sg->size)
                e = sg->base + sg->size;
            if (e <= a)
                continue;
            uint64_t o = (a - sg->base) / g * g, oe = (e - sg->base + g - 1) / g * g;
            if (oe > cap)
                oe = cap;
            if (oe <= o)
                continue;
            if (n == tcap) {
                size_t nc = tcap ? tcap * 2 : 16;
                held_range_t *v = realloc(t, nc * sizeof *v);
                if (!v) {
                    whole = 1;
                    break;
                }
                t = v;
                tcap = nc;
            }
            t[n++] = (held_range_t){.off = o, .len = oe - o, .until = r->until};
        }
    }
    if (n) /* ascending, overlaps merged (the later time holds) */
        qsort(t, n, sizeof *t, rg_cmp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k && t[i].off < t[k - 1].off + t[k - 1].len) {
            held_range_t *p = &t[k - 1];
            if (t[i].off + t[i].len > p->off + p->len)
                p->len = t[i].off + t[i].len - p->off;
            if (t[i].until > p->until)
                p->until = t[i].until;
        } else {
            t[k++] = t[i];
        }
    }
    *out = t;
    *n_out = k;
    *whole_out = whole;
    return whole_until;
}

uint64_t cr__m_held_apply(cr__master_t *m, uint32_t s, cr__rpc_client_id_t id, uint64_t now)
{
    seg_t *sg = &m->segs[s];
    held_range_t *t;
    size_t k;
    int whole;
    uint64_t whole_until = cr__m_held_ranges(m, s, id, now, &t, &k, &whole);
    sg->held_until = whole || k ? whole_until : 0;
    if (whole || !k) {
        free(t);
        return whole ? whole_until : 0;
    }
    uint64_t after = 0, bytes = 0;
    for (size_t i = 0; i < k; i++) {
        uint32_t b = cr__oalloc_reserve(sg->alloc, t[i].off, t[i].len);
        if (b == CR__OALLOC_NONE) { /* cannot happen: a fresh allocator */
            after = whole_until;
            continue;
        }
        uint64_t bs = cr__oalloc_block_size(sg->alloc, b);
        m->allocated += bs;
        bytes += bs;
        cr__m_block_release(m, s, b, t[i].until, now);
    }
    free(t);
    if (k)
        CR_LOG_INFO("master",
                    "segment %s: %zu ranges (%" PRIu64 " bytes) of its dropped memory held "
                    "until their readers and writers are done; the rest is usable now",
                    sg->name, k, bytes);
    return after;
}

void cr__m_held_expire(cr__master_t *m, uint64_t now)
{
    for (int h = 0; h < HELD_MAX; h++) {
        held_t *hd = &m->held[h];
        if (hd->until > now)
            continue;
        if (hd->name[0])
            cr__m_jr_heldend(m, hd);
        hd->name[0] = 0;
        if (hd->rg.v || hd->rg.whole)
            set_clear(&hd->rg);
    }
}

void cr__m_held_free(cr__master_t *m)
{
    for (int h = 0; h < HELD_MAX; h++)
        set_clear(&m->held[h].rg);
}
