/* The location cache (loccache.h). */
#include "store/client/loccache.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define LC_AHEAD 8 /* keys whose tag lines load ahead of the one looked at */

/* XXH3, as the master's key index. */
static uint64_t hash_of(const char *s)
{
    return XXH3_64bits(s, strlen(s));
}

/* h's set (its low bits) and tag in it (its high half, never 0). Two keys
 * with one set and tag only cost a read the master's answer then refuses. */
static size_t set_of(uint64_t h)
{
    return (size_t)(h & (CR__LC_SETS - 1));
}

static uint32_t tag_of(uint64_t h)
{
    uint32_t t = (uint32_t)(h >> 32);
    return t ? t : 1;
}

/* Starts loading the tag lines of hashes h[i, i + LC_AHEAD) (a batch walks a
 * table larger than the L2 cache in random order). On the 2-vCPU guest
 * the distance (8, 32, 128 or all) made no measurable difference: the
 * misses barely overlap there, so cr__lc_warm takes them while the caller
 * waits anyway. Caller holds mu and the tables are set. */
static void prefetch_tags(cr__lc_t *lc, const uint64_t *h, size_t i, size_t n)
{
    for (size_t j = i; j < n && j < i + LC_AHEAD; j++)
        __builtin_prefetch(&lc->tags[set_of(h[j])], 1);
}

/* The way of h in its set, or -1. Caller holds mu and the tables are set. */
static int way_locked(const cr__lc_t *lc, uint64_t h)
{
    const cr__lc_tags_t *t = &lc->tags[set_of(h)];
    uint32_t tag = tag_of(h);
    for (int w = 0; w < CR__LC_WAYS; w++)
        if (t->tag[w] == tag)
            return w;
    return -1;
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
    lc->tags = NULL;
    lc->slots = NULL;
    lc->names = NULL;
    lc->clock = 0;
    lc->on = on;
}

void cr__lc_fini(cr__lc_t *lc)
{
    free(lc->tags);
    free(lc->slots);
    free(lc->names);
    lc->tags = NULL;
    lc->slots = NULL;
    lc->names = NULL;
    pthread_mutex_destroy(&lc->mu);
}

/* The tables, allocated at the first entry. Caller holds mu. Returns 0 or
 * -1 without memory. */
static int tables_locked(cr__lc_t *lc)
{
    if (lc->tags)
        return 0;
    lc->tags = aligned_alloc(64, CR__LC_SETS * sizeof *lc->tags);
    lc->slots = aligned_alloc(64, (size_t)CR__LC_SETS * CR__LC_WAYS * sizeof *lc->slots);
    lc->names = calloc(CR__LC_NAMES, sizeof *lc->names);
    if (!lc->tags || !lc->slots || !lc->names) {
        free(lc->tags);
        free(lc->slots);
        free(lc->names);
        lc->tags = NULL;
        lc->slots = NULL;
        lc->names = NULL;
        return -1;
    }
    memset(lc->tags, 0, CR__LC_SETS * sizeof *lc->tags);
    return 0;
}

/* The way hash h has in its set, else an empty way, else the least
 * recently used. Caller holds mu. */
static int victim_locked(const cr__lc_t *lc, uint64_t h)
{
    const cr__lc_tags_t *t = &lc->tags[set_of(h)];
    int w = way_locked(lc, h);
    if (w >= 0)
        return w;
    w = 0;
    for (int x = 0; x < CR__LC_WAYS && t->tag[w]; x++)
        if (!t->tag[x] || lc->clock - t->stamp[x] > lc->clock - t->stamp[w])
            w = x;
    return w;
}

static void hash_many(const cr__lc_put_t *v, size_t n, uint64_t *h)
{
    for (size_t i = 0; i < n; i++)
        h[i] = v[i].key ? hash_of(v[i].key) : 0;
}

void cr__lc_warm(cr__lc_t *lc, const cr__lc_put_t *v, size_t n, uint64_t *h)
{
    if (!lc->on || !n)
        return;
    hash_many(v, n, h);
    pthread_mutex_lock(&lc->mu);
    if (!tables_locked(lc)) {
        prefetch_tags(lc, h, 0, n);
        for (size_t i = 0; i < n; i++) {
            if (i % LC_AHEAD == 0)
                prefetch_tags(lc, h, i + LC_AHEAD, n);
            size_t slot = set_of(h[i]) * CR__LC_WAYS + (size_t)victim_locked(lc, h[i]);
            __builtin_prefetch(&lc->slots[slot], 1);
        }
    }
    pthread_mutex_unlock(&lc->mu);
}

/* Batches run in two passes under the lock: the tag lines (prefetched 8
 * keys ahead), then the entries, whose lines the first pass prefetched. */
void cr__lc_set_hashed(cr__lc_t *lc, const cr__lc_put_t *v, uint64_t *h, size_t n)
{
    if (!lc->on || !n)
        return;
    pthread_mutex_lock(&lc->mu);
    const char *last = NULL;
    int ni = -1;
    int ok = !tables_locked(lc);
    if (ok)
        prefetch_tags(lc, h, 0, n);
    for (size_t i = 0; ok && i < n; i++) { /* h[i]: 0, or its slot + 1 and name << 32 */
        if (i % LC_AHEAD == 0)
            prefetch_tags(lc, h, i + LC_AHEAD, n);
        if (!v[i].key) {
            h[i] = 0;
            continue;
        }
        if (v[i].seg != last && (!last || strcmp(v[i].seg, last))) {
            size_t sl = strlen(v[i].seg);
            ni = sl && sl < CR__LC_SEG_MAX ? name_index_locked(lc, v[i].seg, sl) : -1;
            last = v[i].seg;
        }
        if (ni < 0 || v[i].size >> 56) {
            h[i] = 0;
            continue;
        }
        cr__lc_tags_t *t = &lc->tags[set_of(h[i])];
        int w = victim_locked(lc, h[i]);
        t->tag[w] = tag_of(h[i]);
        t->stamp[w] = ++lc->clock;
        size_t slot = set_of(h[i]) * CR__LC_WAYS + (size_t)w;
        __builtin_prefetch(&lc->slots[slot], 1);
        h[i] = (slot + 1) | (uint64_t)ni << 32;
    }
    for (size_t i = 0; ok && i < n; i++)
        if (h[i])
            lc->slots[(uint32_t)h[i] - 1] = (cr__lc_entry_t){
                .version = v[i].version,
                .replica_id = v[i].replica_id,
                .addr = v[i].addr,
                .size_seg = v[i].size | (h[i] >> 32) << 56,
            };
    pthread_mutex_unlock(&lc->mu);
}

void cr__lc_set_many(cr__lc_t *lc, const cr__lc_put_t *v, size_t n)
{
    if (!lc->on || !n)
        return;
    uint64_t stack_h[64], *h = n <= 64 ? stack_h : malloc(n * sizeof *h);
    if (!h)
        return;
    hash_many(v, n, h); /* outside the lock */
    cr__lc_set_hashed(lc, v, h, n);
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
    if (lc->tags)
        prefetch_tags(lc, h, 0, n);
    for (size_t i = 0; i < n; i++) { /* h[i]: 0, or its slot + 1 */
        if (lc->tags && i % LC_AHEAD == 0)
            prefetch_tags(lc, h, i + LC_AHEAD, n);
        int w = lc->tags ? way_locked(lc, h[i]) : -1;
        if (w < 0) {
            h[i] = 0;
            continue;
        }
        size_t si = set_of(h[i]);
        lc->tags[si].stamp[w] = ++lc->clock;
        h[i] = si * CR__LC_WAYS + (size_t)w + 1;
        __builtin_prefetch(&lc->slots[h[i] - 1]);
    }
    for (size_t i = 0; i < n; i++) {
        if (!h[i]) {
            out[i].size = 0;
            continue;
        }
        const cr__lc_entry_t *e = &lc->slots[h[i] - 1];
        out[i].version = e->version;
        out[i].replica_id = e->replica_id;
        out[i].addr = e->addr;
        out[i].size = e->size_seg & ((1ull << 56) - 1);
        memcpy(out[i].seg, lc->names[e->size_seg >> 56], CR__LC_SEG_MAX);
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
    int w = lc->tags ? way_locked(lc, h) : -1;
    if (w >= 0)
        lc->tags[set_of(h)].tag[w] = 0;
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
