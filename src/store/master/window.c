/* Allocation windows of an HA leader (store-ha.md, "One wait per put").
 *
 * A put's PutStart hands out space; if the leader dies before a standby
 * learnt of it, the new leader could give that space to another object
 * while the first writer is still writing: so every PutStart used to wait
 * for the standbys. Instead, small replicas are carved (bump pointer) out
 * of a per-segment window: a block reserved in the allocator whose opening
 * is recorded (WIN) and waited for like any change. Once the WIN record is
 * on every in-sync standby (confirmed), a PutStart carved from it needs no
 * wait: a new leader restoring a window it knows keeps the window's free
 * space quarantined for two put timeouts (what a pending put it knew about
 * would get), so a writer of a PutStart it never heard of cannot overwrite
 * a new object. The PutEnd still waits, and the stream is ordered, so a
 * completed object's PutStart record is always on the standbys.
 *
 * Every carved replica gets its own allocator block (the object lifecycle
 * is unchanged): the window block is freed and the object's range and the
 * rest re-reserved at fixed offsets (cr__oalloc_reserve, O(1) ascending).
 * Caller holds m->mu. */
#include "store/master/master_priv.h"

#include <string.h>

#define WIN_LEN_MAX (16ull << 20)
#define WIN_SEG_FRACTION 16 /* a window is at most 1/16 of its segment */
#define WIN_OBJ_FRACTION 4  /* replicas up to 1/4 of a window are carved */

void cr__m_jr_range(cr__master_t *m, uint8_t type, const seg_t *sg, uint64_t off, uint64_t len)
{
    if (!m->jfn)
        return;
    memset(&m->jrec, 0, offsetof(cr__ha_rec_t, segs));
    m->jrec.type = type;
    memcpy(m->jrec.name, sg->name, sizeof m->jrec.name);
    m->jrec.base = off;
    m->jrec.seg_size = len;
    cr__m_jr_emit(m);
}

static void jr_win(cr__master_t *m, uint8_t type, seg_t *sg)
{
    cr__m_jr_range(m, type, sg, sg->win_start, sg->win_end - sg->win_start);
}

static uint64_t win_len(const seg_t *sg)
{
    uint64_t l = cr__oalloc_capacity(sg->alloc) / WIN_SEG_FRACTION;
    return l < WIN_LEN_MAX ? l : WIN_LEN_MAX;
}

void cr__m_win_close(cr__master_t *m, uint32_t s)
{
    seg_t *sg = &m->segs[s];
    if (!sg->win_end)
        return;
    if (sg->win_cur < sg->win_end)
        cr__m_block_unalloc(m, s, sg->win_blk);
    jr_win(m, CR__HA_WINEND, sg);
    sg->win_end = 0;
}

static int win_open(cr__master_t *m, uint32_t s)
{
    seg_t *sg = &m->segs[s];
    uint64_t off;
    uint32_t b = cr__oalloc_alloc(sg->alloc, win_len(sg), &off);
    if (b == CR__OALLOC_NONE)
        return -1;
    uint64_t len = cr__oalloc_block_size(sg->alloc, b);
    m->allocated += len;
    sg->win_blk = b;
    sg->win_start = sg->win_cur = off;
    sg->win_end = off + len;
    sg->win_gen = ++m->win_gen;
    jr_win(m, CR__HA_WIN, sg);
    return 0;
}

uint32_t cr__m_win_alloc(cr__master_t *m, uint32_t s, uint64_t size, int *confirmed)
{
    seg_t *sg = &m->segs[s];
    *confirmed = 0;
    if (!m->win_on || sg->tier || !sg->alloc)
        return NONE32;
    uint64_t g = cr__oalloc_granule(sg->alloc);
    uint64_t rl = (size + g - 1) / g * g;
    if (size == 0 || rl > win_len(sg) / WIN_OBJ_FRACTION)
        return NONE32;
    if (sg->win_end && sg->win_end - sg->win_cur < rl)
        cr__m_win_close(m, s);
    if (!sg->win_end && win_open(m, s))
        return NONE32;
    /* carve [win_cur, win_cur + rl): the window block is freed and both
     * parts reserved again at once (nothing else runs under the lock) */
    cr__oalloc_t *a = sg->alloc;
    cr__oalloc_free(a, sg->win_blk);
    uint32_t ob = cr__oalloc_reserve(a, sg->win_cur, rl);
    if (ob == CR__OALLOC_NONE) { /* cannot happen: give the window up */
        m->allocated -= sg->win_end - sg->win_cur;
        sg->win_cur = sg->win_end;
        cr__m_win_close(m, s);
        return NONE32;
    }
    sg->win_cur += rl;
    if (sg->win_cur < sg->win_end) {
        sg->win_blk = cr__oalloc_reserve(a, sg->win_cur, sg->win_end - sg->win_cur);
        if (sg->win_blk == CR__OALLOC_NONE) {
            m->allocated -= sg->win_end - sg->win_cur;
            sg->win_cur = sg->win_end;
        }
    }
    *confirmed = sg->win_gen <= m->win_confirmed;
    if (sg->win_cur >= sg->win_end)
        cr__m_win_close(m, s); /* used up */
    return ob;
}

void cr__m_jr_wins(cr__master_t *m)
{
    for (uint32_t s = 0; s < m->n_segs; s++)
        if (m->segs[s].live && m->segs[s].win_end)
            jr_win(m, CR__HA_WIN, &m->segs[s]);
    cr__m_rtask_jr_holds(m); /* copy targets handed out, same record */
    cr__m_resv_jr_all(m);    /* client reservations, same record */
}

void cr__master_windows(cr__master_t *m, int on)
{
    pthread_mutex_lock(&m->mu);
    m->win_on = on;
    if (!on)
        for (uint32_t s = 0; s < m->n_segs; s++)
            if (m->segs[s].live)
                cr__m_win_close(m, s);
    pthread_mutex_unlock(&m->mu);
}

uint64_t cr__master_win_gen(cr__master_t *m)
{
    pthread_mutex_lock(&m->mu);
    uint64_t g = m->win_gen;
    pthread_mutex_unlock(&m->mu);
    return g;
}

void cr__master_win_confirm(cr__master_t *m, uint64_t gen)
{
    pthread_mutex_lock(&m->mu);
    if (gen > m->win_confirmed)
        m->win_confirmed = gen;
    pthread_mutex_unlock(&m->mu);
}
