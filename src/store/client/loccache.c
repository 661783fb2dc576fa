/* The location cache (loccache.h). */
#include "store/client/loccache.h"

#include <stdlib.h>
#include <string.h>

/* 64-bit FNV-1a of the key, never 0 (0 marks an empty slot). Two keys with
 * one hash only cost a read the master's answer then refuses. */
static uint64_t key_hash(const char *key)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return h ? h : 1;
}

static size_t slot_of(uint64_t h)
{
    return (size_t)((h ^ (h >> 29)) & (CR__LC_SLOTS - 1));
}

void cr__lc_init(cr__lc_t *lc, int on)
{
    pthread_mutex_init(&lc->mu, NULL);
    lc->slots = NULL;
    lc->on = on;
}

void cr__lc_fini(cr__lc_t *lc)
{
    free(lc->slots);
    lc->slots = NULL;
    pthread_mutex_destroy(&lc->mu);
}

void cr__lc_set(cr__lc_t *lc, const char *key, uint64_t version, uint64_t replica_id,
                const char *seg, uint64_t addr, uint64_t size)
{
    size_t sl = strlen(seg);
    if (!lc->on || sl >= CR__LC_SEG_MAX)
        return;
    uint64_t h = key_hash(key);
    pthread_mutex_lock(&lc->mu);
    if (!lc->slots)
        lc->slots = calloc(CR__LC_SLOTS, sizeof *lc->slots);
    if (lc->slots) {
        cr__lc_entry_t *e = &lc->slots[slot_of(h)];
        e->key_hash = h;
        e->version = version;
        e->replica_id = replica_id;
        e->addr = addr;
        e->size = size;
        memcpy(e->seg, seg, sl + 1);
    }
    pthread_mutex_unlock(&lc->mu);
}

int cr__lc_find(cr__lc_t *lc, const char *key, cr__lc_entry_t *out)
{
    if (!lc->on)
        return 0;
    uint64_t h = key_hash(key);
    int found = 0;
    pthread_mutex_lock(&lc->mu);
    if (lc->slots && lc->slots[slot_of(h)].key_hash == h) {
        *out = lc->slots[slot_of(h)];
        found = 1;
    }
    pthread_mutex_unlock(&lc->mu);
    return found;
}

void cr__lc_drop_many(cr__lc_t *lc, const char *const *keys, size_t n)
{
    if (!lc->on)
        return;
    pthread_mutex_lock(&lc->mu);
    for (size_t i = 0; lc->slots && i < n; i++) {
        uint64_t h = key_hash(keys[i]);
        if (lc->slots[slot_of(h)].key_hash == h)
            lc->slots[slot_of(h)].key_hash = 0;
    }
    pthread_mutex_unlock(&lc->mu);
}

void cr__lc_drop(cr__lc_t *lc, const char *key)
{
    cr__lc_drop_many(lc, &key, 1);
}
