/* The location cache (loccache.h). */
#include "store/client/loccache.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* XXH3 (as the master's key index), never 0 (0 marks an empty entry). Two
 * keys with one hash only cost a read the master's answer then refuses. */
static uint64_t hash_of(const char *s)
{
    uint64_t h = XXH3_64bits(s, strlen(s));
    return h ? h : 1;
}

static cr__lc_entry_t *set_of(cr__lc_t *lc, uint64_t h)
{
    return &lc->slots[((h ^ (h >> 29)) & (CR__LC_SETS - 1)) * CR__LC_WAYS];
}

/* Starts loading the sets of hashes h[i, i + 8) (a batch walks a table
 * larger than the L2 cache in random order: its misses then overlap).
 * Caller holds mu and slots is set. */
static void prefetch_sets(cr__lc_t *lc, const uint64_t *h, size_t i, size_t n)
{
    for (size_t j = i; j < n && j < i + 8; j++) {
        const char *set = (const char *)set_of(lc, h[j]);
        for (size_t b = 0; b < CR__LC_WAYS * sizeof(cr__lc_entry_t); b += 64)
            __builtin_prefetch(set + b);
    }
}

/* key's entry in its set, or NULL. Caller holds mu and slots is set. */
static cr__lc_entry_t *lookup_locked(cr__lc_t *lc, uint64_t h)
{
    cr__lc_entry_t *set = set_of(lc, h);
    for (int w = 0; w < CR__LC_WAYS; w++)
        if (set[w].key_hash == h)
            return &set[w];
    return NULL;
}

/* The index of seg in names (added if new), or -1 when the table is full.
 * Caller holds mu and names is set. */
static int name_index_locked(cr__lc_t *lc, const char *seg, size_t len)
{
    uint64_t h = hash_of(seg);
    for (int k = 0; k < CR__LC_NAMES; k++) {
        int i = (int)((h + (uint64_t)k) & (CR__LC_NAMES - 1));
        if (!lc->names[i][0]) {
            memcpy(lc->names[i], seg, len + 1);
            return i;
        }
        if (!strcmp(lc->names[i], seg))
            return i;
    }
    return -1;
}

void cr__lc_init(cr__lc_t *lc, int on)
{
    pthread_mutex_init(&lc->mu, NULL);
    lc->slots = NULL;
    lc->names = NULL;
    lc->clock = 0;
    lc->on = on;
}

void cr__lc_fini(cr__lc_t *lc)
{
    free(lc->slots);
    free(lc->names);
    lc->slots = NULL;
    lc->names = NULL;
    pthread_mutex_destroy(&lc->mu);
}

/* The tables, allocated at the first entry. Caller holds mu. Returns 0 or
 * -1 without memory. */
static int tables_locked(cr__lc_t *lc)
{
    if (lc->slots)
        return 0;
    lc->slots = calloc((size_t)CR__LC_SETS * CR__LC_WAYS, sizeof *lc->slots);
    lc->names = calloc(CR__LC_NAMES, sizeof *lc->names);
    if (!lc->slots || !lc->names) {
        free(lc->slots);
        free(lc->names);
        lc->slots = NULL;
        lc->names = NULL;
        return -1;
    }
    return 0;
}

/* Key hash h's entry, segment name index ni. Caller holds mu. */
static void set_locked(cr__lc_t *lc, uint64_t h, uint64_t version, uint64_t replica_id, int ni,
                       uint64_t addr, uint64_t size)
{
    cr__lc_entry_t *e = lookup_locked(lc, h);
    if (!e) { /* an empty way, else the least recently used */
        cr__lc_entry_t *set = set_of(lc, h);
        e = &set[0];
        for (int w = 0; w < CR__LC_WAYS && e->key_hash; w++)
            if (!set[w].key_hash || lc->clock - set[w].stamp > lc->clock - e->stamp)
                e = &set[w];
    }
    *e = (cr__lc_entry_t){.key_hash = h,
                          .version = version,
                          .replica_id = replica_id,
                          .addr = addr,
                          .size = size,
                          .stamp = ++lc->clock,
                          .seg = (uint16_t)ni};
}

void cr__lc_set_many(cr__lc_t *lc, const cr__lc_put_t *v, size_t n)
{
    if (!lc->on || !n)
        return;
    uint64_t stack_h[64], *h = n <= 64 ? stack_h : malloc(n * sizeof *h);
    if (!h)
        return;
    for (size_t i = 0; i < n; i++) /* outside the lock */
        h[i] = hash_of(v[i].key);
    pthread_mutex_lock(&lc->mu);
    const char *last = NULL;
    int ni = -1;
    if (!tables_locked(lc))
        prefetch_sets(lc, h, 0, n);
    for (size_t i = 0; lc->slots && i < n; i++) {
        if (i % 8 == 0)
            prefetch_sets(lc, h, i + 8, n);
        if (v[i].seg != last && (!last || strcmp(v[i].seg, last))) {
            size_t sl = strlen(v[i].seg);
            ni = sl && sl < CR__LC_SEG_MAX ? name_index_locked(lc, v[i].seg, sl) : -1;
            last = v[i].seg;
        }
        if (ni >= 0)
            set_locked(lc, h[i], v[i].version, v[i].replica_id, ni, v[i].addr, v[i].size);
    }
    pthread_mutex_unlock(&lc->mu);
    if (h != stack_h)
        free(h);
}

size_t cr__lc_find_many(cr__lc_t *lc, const char *const *keys, size_t n, cr__lc_hit_t *out)
{
    uint64_t stack_h[64], *h = !lc->on ? NULL : n <= 64 ? stack_h : malloc(n * sizeof *h);
    if (!h) { /* off (or no memory): no entry */
        for (size_t i = 0; i < n; i++)
            out[i].size = 0;
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = hash_of(keys[i]);
    size_t found = 0;
    pthread_mutex_lock(&lc->mu);
    if (lc->slots)
        prefetch_sets(lc, h, 0, n);
    for (size_t i = 0; i < n; i++) {
        if (lc->slots && i % 8 == 0)
            prefetch_sets(lc, h, i + 8, n);
        cr__lc_entry_t *e = lc->slots ? lookup_locked(lc, h[i]) : NULL;
        if (!e) {
            out[i].size = 0;
            continue;
        }
        e->stamp = ++lc->clock;
        out[i].version = e->version;
        out[i].replica_id = e->replica_id;
        out[i].addr = e->addr;
        out[i].size = e->size;
        memcpy(out[i].seg, lc->names[e->seg], CR__LC_SEG_MAX);
        found++;
    }
    pthread_mutex_unlock(&lc->mu);
    if (h != stack_h)
        free(h);
    return found;
}

void cr__lc_drop(cr__lc_t *lc, const char *key)
{
    if (!lc->on)
        return;
    uint64_t h = hash_of(key);
    pthread_mutex_lock(&lc->mu);
    cr__lc_entry_t *e = lc->slots ? lookup_locked(lc, h) : NULL;
    if (e)
        e->key_hash = 0;
    pthread_mutex_unlock(&lc->mu);
}

void cr__lc_set(cr__lc_t *lc, const char *key, uint64_t version, uint64_t replica_id,
                const char *seg, uint64_t addr, uint64_t size)
{
    cr__lc_put_t v = {key, seg, version, replica_id, addr, size};
    cr__lc_set_many(lc, &v, 1);
}

int cr__lc_find(cr__lc_t *lc, const char *key, cr__lc_hit_t *out)
{
    return cr__lc_find_many(lc, &key, 1, out) == 1;
}
