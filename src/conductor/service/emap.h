/* Engine block hash -> conductor sequence hash map of one publisher
 * (internal). Open addressing with linear probing and backward-shift
 * deletion (no tombstones), bounded by max_entries. Each entry also keeps a
 * bitmask of the tiers the block is stored on, so a block removed from one
 * tier keeps its mapping while another tier still holds it.
 * Not locked: the service serialises calls. */
#ifndef CR_CONDUCTOR_SERVICE_EMAP_H
#define CR_CONDUCTOR_SERVICE_EMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct cr__emap_ent {
    uint64_t key;  /* engine hash */
    uint64_t seq;  /* conductor rolling hash */
    uint64_t aux;  /* caller's extra value (Mooncake key entries: the block hash) */
    uint32_t mask; /* tiers holding it; 0 = empty slot */
} cr__emap_ent_t;

typedef struct cr__emap {
    cr__emap_ent_t *t;
    size_t cap;  /* power of two, or 0 */
    size_t n;
    size_t max_entries;
} cr__emap_t;

/* Initialises an empty map holding at most max_entries (>= 1). */
void cr__emap_init(cr__emap_t *m, size_t max_entries);
/* Frees the table; the map is empty and usable again. */
void cr__emap_clear(cr__emap_t *m);
/* Returns the entry for key, or NULL. Valid until the next put/del. */
const cr__emap_ent_t *cr__emap_get(const cr__emap_t *m, uint64_t key);
/* Maps key -> seq and ORs tier_bit into its mask. Returns 0, -ENOSPC (at
 * max_entries) or -ENOMEM. */
int cr__emap_put(cr__emap_t *m, uint64_t key, uint64_t seq, uint32_t tier_bit);
/* Sets key -> (seq, mask, aux) exactly; mask 0 deletes the entry. Returns
 * 0, -ENOSPC or -ENOMEM. */
int cr__emap_set(cr__emap_t *m, uint64_t key, uint64_t seq, uint32_t mask, uint64_t aux);
/* Clears tier_bit of key; deletes the entry when no tier is left. Returns 1
 * and *seq if key was mapped (with that bit), else 0. */
int cr__emap_drop(cr__emap_t *m, uint64_t key, uint32_t tier_bit, uint64_t *seq);

#endif
