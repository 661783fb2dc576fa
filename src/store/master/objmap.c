/* Master key index: open addressing with linear probing and backward-shift
 * deletion over record pointers, with a parallel array of 32-bit hash tags
 * so that probes rarely touch a record (master_priv.h). */
#include "store/master/master_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAP_INITIAL_SLOTS 1024 /* power of two; doubles past load 0.7 */

int64_t cr__m_map_find(cr__master_t *m, const char *k, size_t l, uint64_t h)
{
    uint64_t mask = m->cap - 1, i = h & mask;
    uint32_t tag = (uint32_t)h;
    for (;;) {
        obj_t *o = m->slots[i];
        if (!o)
            return -1;
        if (m->tags[i] == tag && o->key_len == l && !memcmp(obj_key(o), k, l))
            return (int64_t)i;
        i = (i + 1) & mask;
    }
}

void cr__m_map_prefetch(const cr__master_t *m, const cr__rpc_item_t *items, uint32_t n)
{
    if (!m->cap || n < 2) /* a lone lookup has nothing to overlap with */
        return;
    uint64_t mask = m->cap - 1;
    enum { WIN = 64 }; /* slots remembered between the passes */
    uint64_t at[WIN];
    for (uint32_t b = 0; b < n; b += WIN) {
        uint32_t e = n - b < WIN ? n - b : WIN;
        /* first the slots and tags of every key (independent misses), ... */
        for (uint32_t j = 0; j < e; j++) {
            const cr__rpc_item_t *it = &items[b + j];
            at[j] = key_ok(it->key, it->key_len) ? key_hash(it->key, it->key_len) & mask
                                                 : UINT64_MAX;
            if (at[j] != UINT64_MAX) {
                __builtin_prefetch(&m->slots[at[j]]);
                __builtin_prefetch(&m->tags[at[j]]);
            }
        }
        /* ... then the record each home slot holds (a hit's first probe) */
        for (uint32_t j = 0; j < e; j++)
            if (at[j] != UINT64_MAX && m->slots[at[j]])
                __builtin_prefetch(m->slots[at[j]]);
    }
}

int cr__m_map_grow(cr__master_t *m)
{
    uint64_t ncap = m->cap ? m->cap * 2 : MAP_INITIAL_SLOTS;
    obj_t **ns = calloc(ncap, sizeof *ns);
    uint32_t *nt = malloc(ncap * sizeof *nt);
    if (!ns || !nt) {
        free(ns);
        free(nt);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < m->cap; i++) {
        if (!m->slots[i])
            continue;
        /* tags hold only 32 bits: rehash from the key when the table is
         * larger than 2^32 slots (never in practice) */
        uint64_t h = ncap > (1ull << 32) ? key_hash(obj_key(m->slots[i]), m->slots[i]->key_len)
                                         : m->tags[i];
        uint64_t j = h & (ncap - 1);
        while (ns[j])
            j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
        nt[j] = m->tags[i];
    }
    free(m->slots);
    free(m->tags);
    m->slots = ns;
    m->tags = nt;
    m->cap = ncap;
    return 0;
}

int cr__m_map_insert(cr__master_t *m, obj_t *o, uint64_t h)
{
    if ((m->count + 1) * 10 > m->cap * 7 && cr__m_map_grow(m))
        return -ENOMEM;
    uint64_t mask = m->cap - 1, i = h & mask;
    while (m->slots[i])
        i = (i + 1) & mask;
    m->slots[i] = o;
    m->tags[i] = (uint32_t)h;
    m->count++;
    m->key_bytes += o->key_len;
    return 0;
}

void cr__m_map_erase(cr__master_t *m, uint64_t i)
{
    uint64_t mask = m->cap - 1, j = i;
    m->key_bytes -= m->slots[i]->key_len;
    m->slots[i] = NULL;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->slots[j])
            break;
        uint64_t k = m->tags[j] & mask; /* home slot */
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays)
            continue;
        m->slots[i] = m->slots[j];
        m->tags[i] = m->tags[j];
        m->slots[j] = NULL;
        i = j;
    }
    m->count--;
}

obj_t *cr__m_lookup(cr__master_t *m, const char *key, size_t len)
{
    int64_t i = cr__m_map_find(m, key, len, key_hash(key, len));
    return i < 0 ? NULL : m->slots[i];
}

obj_t *cr__m_lookup_complete(cr__master_t *m, const char *key, size_t key_len)
{
    obj_t *o = cr__m_lookup(m, key, key_len);
    return o && (o->flags & OF_COMPLETE) ? o : NULL;
}
