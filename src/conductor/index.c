/* Global prefix index: block hash -> which instances hold it on which tier.
 *
 * Layout (memory per distinct block held once: ~24 B slot / 0.7 load + 24 B
 * entry, i.e. ~60 B; 10 M blocks fit in ~0.6 GiB):
 *   - an open-addressing hash table (linear probing, backward-shift delete)
 *     of slots {hash, instance bitmask (any tier), head of entry list};
 *   - a pool of entries, one per (block, instance, tier), each on two
 *     intrusive lists: the block's entry list (singly linked, short: at most
 *     instances x tiers) and the LRU list of its (instance, tier) (doubly
 *     linked), addressed by 32-bit indices instead of pointers.
 * Entries refer to their block by hash (not slot index) so slots may move.
 * Every operation does O(1) work per block plus a walk of that block's entry
 * list; eviction is O(1) per evicted block.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conductor/internal.h"
#include "crescent/conductor.h"

#define NIL UINT32_MAX
#define MAX_POOL ((uint64_t)UINT32_MAX - 1)

typedef struct slot {
    uint64_t hash;
    uint64_t mask; /* bit i: instance i holds the block on some tier */
    uint32_t head; /* first entry of the block; NIL = empty slot */
    uint32_t pad;
} slot_t;

typedef struct entry {
    uint64_t hash;
    uint32_t prev, next; /* LRU list of (inst, tier); next = free-list link */
    uint32_t bnext;      /* next entry of the same block */
    uint8_t inst, tier;
    uint16_t pad;
} entry_t;

typedef struct lru {
    uint32_t mru, lru;
    uint64_t count, cap; /* cap 0 = unlimited */
} lru_t;

struct cr_cond_index {
    slot_t *slots;
    uint64_t nslots; /* power of two */
    uint64_t nblocks;
    entry_t *pool;
    uint64_t pool_cap, pool_used; /* pool_used: high-water mark */
    uint32_t free_head;
    uint64_t nentries, max_entries, evictions;
    uint32_t max_inst;
    lru_t lru[CR_COND_MAX_INSTANCES][CR_COND_TIER_COUNT];
};

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static slot_t *find_slot(const cr_cond_index_t *ix, uint64_t h)
{
    uint64_t m = ix->nslots - 1;
    for (uint64_t i = mix64(h) & m;; i = (i + 1) & m) {
        slot_t *s = &ix->slots[i];
        if (s->head == NIL)
            return NULL;
        if (s->hash == h)
            return s;
    }
}

static uint64_t round_pow2(uint64_t v)
{
    uint64_t p = 16;
    while (p < v)
        p <<= 1;
    return p;
}

static slot_t *alloc_slots(uint64_t n)
{
    slot_t *s = malloc(n * sizeof *s);
    if (!s)
        return NULL;
    for (uint64_t i = 0; i < n; i++)
        s[i].head = NIL;
    return s;
}

static int grow_table(cr_cond_index_t *ix)
{
    uint64_t n = ix->nslots * 2;
    slot_t *ns = alloc_slots(n);
    if (!ns)
        return -ENOMEM;
    for (uint64_t i = 0; i < ix->nslots; i++) {
        slot_t *o = &ix->slots[i];
        if (o->head == NIL)
            continue;
        uint64_t j = mix64(o->hash) & (n - 1);
        while (ns[j].head != NIL)
            j = (j + 1) & (n - 1);
        ns[j] = *o;
    }
    free(ix->slots);
    ix->slots = ns;
    ix->nslots = n;
    return 0;
}

/* Inserts an empty block (caller fills head/mask). Table must have room. */
static slot_t *insert_slot(cr_cond_index_t *ix, uint64_t h)
{
    uint64_t m = ix->nslots - 1;
    uint64_t i = mix64(h) & m;
    while (ix->slots[i].head != NIL)
        i = (i + 1) & m;
    ix->slots[i].hash = h;
    ix->slots[i].mask = 0;
    ix->nblocks++;
    return &ix->slots[i];
}

static void delete_slot(cr_cond_index_t *ix, slot_t *s)
{
    uint64_t m = ix->nslots - 1;
    uint64_t i = (uint64_t)(s - ix->slots);
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & m;
        if (ix->slots[j].head == NIL)
            break;
        uint64_t k = mix64(ix->slots[j].hash) & m;
        /* move j into hole i unless k lies cyclically in (i, j] */
        int stay = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
        if (!stay) {
            ix->slots[i] = ix->slots[j];
            i = j;
        }
    }
    ix->slots[i].head = NIL;
    ix->nblocks--;
}

static int alloc_entry(cr_cond_index_t *ix, uint32_t *out)
{
    if (ix->free_head != NIL) {
        *out = ix->free_head;
        ix->free_head = ix->pool[*out].next;
        return 0;
    }
    if (ix->pool_used == ix->pool_cap) {
        if (ix->pool_cap >= MAX_POOL)
            return -ENOSPC;
        uint64_t nc = ix->pool_cap + ix->pool_cap / 2 + 64;
        if (nc > MAX_POOL)
            nc = MAX_POOL;
        entry_t *np = realloc(ix->pool, nc * sizeof *np);
        if (!np)
            return -ENOMEM;
        ix->pool = np;
        ix->pool_cap = nc;
    }
    *out = (uint32_t)ix->pool_used++;
    return 0;
}

static void lru_unlink(cr_cond_index_t *ix, lru_t *l, uint32_t e)
{
    entry_t *x = &ix->pool[e];
    if (x->prev != NIL)
        ix->pool[x->prev].next = x->next;
    else
        l->mru = x->next;
    if (x->next != NIL)
        ix->pool[x->next].prev = x->prev;
    else
        l->lru = x->prev;
}

static void lru_push_mru(cr_cond_index_t *ix, lru_t *l, uint32_t e)
{
    entry_t *x = &ix->pool[e];
    x->prev = NIL;
    x->next = l->mru;
    if (l->mru != NIL)
        ix->pool[l->mru].prev = e;
    else
        l->lru = e;
    l->mru = e;
}

/* Removes entry e from everything and frees it. */
static void drop_entry(cr_cond_index_t *ix, uint32_t e)
{
    entry_t *x = &ix->pool[e];
    lru_t *l = &ix->lru[x->inst][x->tier];
    lru_unlink(ix, l, e);
    l->count--;
    slot_t *s = find_slot(ix, x->hash);
    if (s) {
        uint32_t *pp = &s->head;
        int other_tier = 0;
        while (*pp != NIL) {
            if (*pp == e) {
                *pp = x->bnext;
                continue;
            }
            if (ix->pool[*pp].inst == x->inst)
                other_tier = 1;
            pp = &ix->pool[*pp].bnext;
        }
        if (!other_tier)
            s->mask &= ~(1ull << x->inst);
        if (s->head == NIL) {
            s->head = e; /* keep occupied while shifting */
            delete_slot(ix, s);
        }
    }
    x->next = ix->free_head;
    ix->free_head = e;
    ix->nentries--;
}

static void evict_to(cr_cond_index_t *ix, lru_t *l, uint64_t keep, uint64_t *nev)
{
    while (l->count > keep && l->lru != NIL) {
        drop_entry(ix, l->lru);
        ix->evictions++;
        if (nev)
            (*nev)++;
    }
}

int cr_cond_index_create(const cr_cond_index_params_t *p, cr_cond_index_t **out)
{
    if (!out)
        return -EINVAL;
    uint32_t max_inst = CR_COND_MAX_INSTANCES;
    uint64_t expected = 65536, max_entries = 1ull << 30;
    uint64_t defcap[CR_COND_TIER_COUNT] = {0, 0, 0};
    if (p) {
        if (p->field_mask & CR_COND_INDEX_PARAM_MAX_INSTANCES)
            max_inst = p->max_instances;
        if (p->field_mask & CR_COND_INDEX_PARAM_EXPECTED_BLOCKS)
            expected = p->expected_blocks;
        if (p->field_mask & CR_COND_INDEX_PARAM_MAX_ENTRIES)
            max_entries = p->max_entries;
        if (p->field_mask & CR_COND_INDEX_PARAM_DEFAULT_CAPACITY)
            memcpy(defcap, p->default_capacity, sizeof defcap);
    }
    if (max_inst == 0 || max_inst > CR_COND_MAX_INSTANCES || expected > (1ull << 32) ||
        max_entries == 0 || max_entries > MAX_POOL)
        return -EINVAL;
    cr_cond_index_t *ix = calloc(1, sizeof *ix);
    if (!ix)
        return -ENOMEM;
    ix->nslots = round_pow2(expected + expected / 2);
    ix->slots = alloc_slots(ix->nslots);
    ix->pool_cap = expected < 64 ? 64 : expected;
    ix->pool = malloc(ix->pool_cap * sizeof *ix->pool);
    if (!ix->slots || !ix->pool) {
        free(ix->slots);
        free(ix->pool);
        free(ix);
        return -ENOMEM;
    }
    ix->free_head = NIL;
    ix->max_entries = max_entries;
    ix->max_inst = max_inst;
    for (uint32_t i = 0; i < CR_COND_MAX_INSTANCES; i++)
        for (int t = 0; t < CR_COND_TIER_COUNT; t++) {
            ix->lru[i][t].mru = ix->lru[i][t].lru = NIL;
            ix->lru[i][t].cap = defcap[t];
        }
    *out = ix;
    return 0;
}

void cr_cond_index_destroy(cr_cond_index_t *ix)
{
    if (!ix)
        return;
    free(ix->slots);
    free(ix->pool);
    free(ix);
}

static int valid(const cr_cond_index_t *ix, uint32_t inst, int tier)
{
    return ix && inst < ix->max_inst && tier >= 0 && tier < CR_COND_TIER_COUNT;
}

int cr_cond_index_set_capacity(cr_cond_index_t *ix, uint32_t inst, cr_cond_tier_t tier,
                               uint64_t blocks)
{
    if (!valid(ix, inst, (int)tier))
        return -EINVAL;
    lru_t *l = &ix->lru[inst][tier];
    l->cap = blocks;
    if (blocks)
        evict_to(ix, l, blocks, NULL);
    return 0;
}

static uint32_t find_entry(const cr_cond_index_t *ix, const slot_t *s, uint32_t inst, int tier)
{
    for (uint32_t e = s->head; e != NIL; e = ix->pool[e].bnext)
        if (ix->pool[e].inst == inst && (tier < 0 || ix->pool[e].tier == tier))
            return e;
    return NIL;
}

int cr_cond_index_insert(cr_cond_index_t *ix, uint32_t inst, cr_cond_tier_t tier,
                         const uint64_t *hashes, size_t n, uint64_t *n_evicted)
{
    if (!valid(ix, inst, (int)tier) || (n && !hashes))
        return -EINVAL;
    lru_t *l = &ix->lru[inst][tier];
    uint64_t nev = 0;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = hashes[i];
        slot_t *s = find_slot(ix, h);
        if (s && (s->mask & (1ull << inst))) {
            uint32_t e = find_entry(ix, s, inst, (int)tier);
            if (e != NIL) {
                lru_unlink(ix, l, e);
                lru_push_mru(ix, l, e);
                continue;
            }
        }
        /* full index: fail before evicting anything, unless this (instance,
         * tier) is itself full and its own eviction makes the room */
        if (ix->nentries >= ix->max_entries && !(l->cap && l->count >= l->cap)) {
            rc = -ENOSPC;
            break;
        }
        if (l->cap)
            evict_to(ix, l, l->cap - 1, &nev); /* may move slots: look up again */
        uint32_t e;
        if ((rc = alloc_entry(ix, &e)) != 0)
            break;
        s = find_slot(ix, h);
        if (!s) {
            if ((ix->nblocks + 1) * 10 > ix->nslots * 7 && (rc = grow_table(ix)) != 0) {
                ix->pool[e].next = ix->free_head; /* give the entry back */
                ix->free_head = e;
                break;
            }
            s = insert_slot(ix, h);
            s->head = NIL;
        }
        entry_t *x = &ix->pool[e];
        x->hash = h;
        x->inst = (uint8_t)inst;
        x->tier = (uint8_t)tier;
        x->pad = 0;
        x->bnext = s->head;
        s->head = e;
        s->mask |= 1ull << inst;
        lru_push_mru(ix, l, e);
        l->count++;
        ix->nentries++;
    }
    if (n_evicted)
        *n_evicted = nev;
    return rc;
}

int cr_cond_index_remove(cr_cond_index_t *ix, uint32_t inst, cr_cond_tier_t tier,
                         const uint64_t *hashes, size_t n)
{
    if (!valid(ix, inst, (int)tier) || (n && !hashes))
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        slot_t *s = find_slot(ix, hashes[i]);
        if (!s || !(s->mask & (1ull << inst)))
            continue;
        uint32_t e = find_entry(ix, s, inst, (int)tier);
        if (e != NIL)
            drop_entry(ix, e);
    }
    return 0;
}

int cr_cond_index_remove_instance(cr_cond_index_t *ix, uint32_t inst)
{
    if (!valid(ix, inst, 0))
        return -EINVAL;
    for (int t = 0; t < CR_COND_TIER_COUNT; t++)
        evict_to(ix, &ix->lru[inst][t], 0, NULL);
    return 0;
}

int cr_cond_index_touch(cr_cond_index_t *ix, uint32_t inst, const uint64_t *hashes, size_t n)
{
    if (!valid(ix, inst, 0) || (n && !hashes))
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        slot_t *s = find_slot(ix, hashes[i]);
        if (!s || !(s->mask & (1ull << inst)))
            continue;
        for (uint32_t e = s->head; e != NIL; e = ix->pool[e].bnext) {
            entry_t *x = &ix->pool[e];
            if (x->inst != inst)
                continue;
            lru_t *l = &ix->lru[inst][x->tier];
            lru_unlink(ix, l, e);
            lru_push_mru(ix, l, e);
        }
    }
    return 0;
}

int cr_cond_index_match(const cr_cond_index_t *ix, uint32_t inst, const uint64_t *hashes,
                        size_t n, cr_cond_match_t *out)
{
    if (!valid(ix, inst, 0) || (n && !hashes) || !out)
        return -EINVAL;
    cr_cond_match_t m;
    memset(&m, 0, sizeof m);
    for (size_t i = 0; i < n && i < UINT32_MAX; i++) {
        const slot_t *s = find_slot(ix, hashes[i]);
        if (!s || !(s->mask & (1ull << inst)))
            break;
        int best = CR_COND_TIER_COUNT;
        for (uint32_t e = s->head; e != NIL; e = ix->pool[e].bnext)
            if (ix->pool[e].inst == inst && ix->pool[e].tier < best)
                best = ix->pool[e].tier;
        m.tier_blocks[best]++;
        m.blocks++;
    }
    *out = m;
    return 0;
}

int cr_cond_index_match_all(const cr_cond_index_t *ix, const uint64_t *hashes, size_t n,
                            uint32_t *prefix_out, uint32_t n_out)
{
    if (!ix || (n && !hashes) || (n_out && !prefix_out) || n_out > ix->max_inst)
        return -EINVAL;
    if (n > UINT32_MAX)
        n = UINT32_MAX;
    uint64_t alive = n_out == 64 ? ~0ull : ((1ull << n_out) - 1);
    size_t i = 0;
    /* the lookups are cache misses on a big table: prefetch a few blocks
     * ahead so they overlap (a prefix is usually matched far) */
    enum { AHEAD = 8 };
    uint64_t msk = ix->nslots - 1;
    for (size_t k = 0; k < AHEAD && k < n; k++)
        __builtin_prefetch(&ix->slots[mix64(hashes[k]) & msk]);
    for (; i < n && alive; i++) {
        if (i + AHEAD < n)
            __builtin_prefetch(&ix->slots[mix64(hashes[i + AHEAD]) & msk]);
        const slot_t *s = find_slot(ix, hashes[i]);
        uint64_t m = s ? s->mask : 0;
        uint64_t dropped = alive & ~m;
        while (dropped) {
            int b = __builtin_ctzll(dropped);
            prefix_out[b] = (uint32_t)i;
            dropped &= dropped - 1;
        }
        alive &= m;
    }
    while (alive) {
        int b = __builtin_ctzll(alive);
        prefix_out[b] = (uint32_t)i;
        alive &= alive - 1;
    }
    return 0;
}

unsigned cr_cond_index_lookup(const cr_cond_index_t *ix, uint32_t inst, uint64_t hash)
{
    if (!valid(ix, inst, 0))
        return 0;
    const slot_t *s = find_slot(ix, hash);
    if (!s || !(s->mask & (1ull << inst)))
        return 0;
    unsigned tiers = 0;
    for (uint32_t e = s->head; e != NIL; e = ix->pool[e].bnext)
        if (ix->pool[e].inst == inst)
            tiers |= 1u << ix->pool[e].tier;
    return tiers;
}

int cr_cond_index_stats(const cr_cond_index_t *ix, cr_cond_index_stats_t *out)
{
    if (!ix || !out)
        return -EINVAL;
    out->blocks = ix->nblocks;
    out->entries = ix->nentries;
    out->evictions = ix->evictions;
    out->bytes = sizeof *ix + ix->nslots * sizeof(slot_t) + ix->pool_cap * sizeof(entry_t);
    return 0;
}

uint64_t cr_cond_index_count(const cr_cond_index_t *ix, uint32_t inst, cr_cond_tier_t tier)
{
    if (!valid(ix, inst, (int)tier))
        return 0;
    return ix->lru[inst][tier].count;
}
