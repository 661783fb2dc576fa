/* Engine hash map: see emap.h. */
#include "conductor/service/emap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t slot_of(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

void cr__emap_init(cr__emap_t *m, size_t max_entries)
{
    memset(m, 0, sizeof *m);
    m->max_entries = max_entries ? max_entries : 1;
}

void cr__emap_clear(cr__emap_t *m)
{
    free(m->t);
    m->t = NULL;
    m->cap = m->n = 0;
}

static cr__emap_ent_t *find(const cr__emap_t *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        cr__emap_ent_t *e = &m->t[i];
        if (!e->mask)
            return NULL;
        if (e->key == key)
            return e;
    }
}

const cr__emap_ent_t *cr__emap_get(const cr__emap_t *m, uint64_t key) { return find(m, key); }

static void place(cr__emap_ent_t *t, size_t cap, const cr__emap_ent_t *e)
{
    size_t i = slot_of(e->key, cap);
    while (t[i].mask)
        i = (i + 1) & (cap - 1);
    t[i] = *e;
}

static int grow(cr__emap_t *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 64;
    cr__emap_ent_t *nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++)
        if (m->t[i].mask)
            place(nt, ncap, &m->t[i]);
    free(m->t);
    m->t = nt;
    m->cap = ncap;
    return 0;
}

int cr__emap_put(cr__emap_t *m, uint64_t key, uint64_t seq, uint32_t tier_bit)
{
    cr__emap_ent_t *e = find(m, key);
    if (e) {
        e->seq = seq;
        e->mask |= tier_bit;
        return 0;
    }
    if (m->n >= m->max_entries)
        return -ENOSPC;
    if ((m->n + 1) * 4 > m->cap * 3) { /* load factor <= 0.75 */
        int rc = grow(m);
        if (rc)
            return rc;
    }
    cr__emap_ent_t ne = {.key = key, .seq = seq, .mask = tier_bit};
    place(m->t, m->cap, &ne);
    m->n++;
    return 0;
}

static void delete_at(cr__emap_t *m, cr__emap_ent_t *e);

int cr__emap_set(cr__emap_t *m, uint64_t key, uint64_t seq, uint32_t mask, uint64_t aux)
{
    cr__emap_ent_t *e = find(m, key);
    if (!mask) {
        if (e)
            delete_at(m, e);
        return 0;
    }
    int rc = cr__emap_put(m, key, seq, mask);
    if (rc)
        return rc;
    e = find(m, key);
    e->mask = mask;
    e->aux = aux;
    return 0;
}

int cr__emap_drop(cr__emap_t *m, uint64_t key, uint32_t tier_bit, uint64_t *seq)
{
    cr__emap_ent_t *e = find(m, key);
    if (!e || !(e->mask & tier_bit))
        return 0;
    *seq = e->seq;
    e->mask &= ~tier_bit;
    if (e->mask)
        return 1;
    delete_at(m, e);
    return 1;
}

/* Backward-shift deletion keeps every probe chain unbroken. */
static void delete_at(cr__emap_t *m, cr__emap_ent_t *e)
{
    size_t cap = m->cap, i = (size_t)(e - m->t), j = i;
    for (;;) {
        j = (j + 1) & (cap - 1);
        if (!m->t[j].mask)
            break;
        size_t h = slot_of(m->t[j].key, cap);
        /* move t[j] into the hole at i unless its home lies cyclically in (i, j] */
        int in_range = i <= j ? (h > i && h <= j) : (h > i || h <= j);
        if (!in_range) {
            m->t[i] = m->t[j];
            i = j;
        }
    }
    m->t[i].mask = 0;
    m->n--;
}
