/* Where this client last found each value (a location cache), so a get can
 * start reading before the master's answer arrives (ops.c, "speculative
 * get"). An entry is a hint, never an authority: the bytes read from it
 * are kept only when GetReplicaList, asked at the same time, names the same
 * version at the same place and the value's checksum matches them.
 *
 * Fixed size: CR__LC_SETS sets of CR__LC_WAYS entries (a key's set from a
 * hash of it; the least recently used entry of the set gives way), and up
 * to CR__LC_NAMES segment names (a key on a segment beyond them is not
 * kept). Allocated at the first entry (~1.3 MB), thread-safe. Only DRAM
 * replicas of one shard without a capability are kept: a disk tier's or a
 * striped value is read the usual way, and with capabilities on
 * (security) nothing is cached. */
#ifndef CRESCENT_STORE_CLIENT_LOCCACHE_H
#define CRESCENT_STORE_CLIENT_LOCCACHE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define CR__LC_SETS 4096  /* a power of two */
#define CR__LC_WAYS 8
#define CR__LC_NAMES 256  /* a power of two */
#define CR__LC_SEG_MAX 64 /* longer segment names are not kept */

/* A set's tags, one cache line: a lookup reads this line and, on a hit,
 * its entry's line (whole 48-byte entries with their hash took six lines
 * a set), so cr__lc_warm can start loading exactly the lines a set will
 * write (docs/benchmarks.md, issue 16, session of 2026-12-01 03:52 UTC). */
typedef struct cr__lc_tags {
    uint32_t tag[CR__LC_WAYS];   /* the key hash's high half; 0: empty way */
    uint32_t stamp[CR__LC_WAYS]; /* last use */
} __attribute__((aligned(64))) cr__lc_tags_t;

typedef struct cr__lc_entry {
    uint64_t version;
    uint64_t replica_id; /* 0: not known yet */
    uint64_t addr;
    uint64_t size_seg; /* size, and the index into names in the top 8 bits */
} cr__lc_entry_t;

/* What cr__lc_find returns. */
typedef struct cr__lc_hit {
    uint64_t version, replica_id, addr, size;
    char seg[CR__LC_SEG_MAX];
} cr__lc_hit_t;

typedef struct cr__lc {
    pthread_mutex_t mu;
    cr__lc_tags_t *tags;   /* CR__LC_SETS; NULL until the first entry */
    cr__lc_entry_t *slots; /* CR__LC_SETS * CR__LC_WAYS, way w of set i at i * WAYS + w */
    char (*names)[CR__LC_SEG_MAX]; /* CR__LC_NAMES, open addressing; "" = free */
    uint32_t clock;
    int on;
} cr__lc_t;

void cr__lc_init(cr__lc_t *lc, int on);
void cr__lc_fini(cr__lc_t *lc);
/* Records key's location (seg is NUL-terminated). No-op when off, when seg
 * is too long, the name table is full, size is 2^56 or more, or without
 * memory. */
void cr__lc_set(cr__lc_t *lc, const char *key, uint64_t version, uint64_t replica_id,
                const char *seg, uint64_t addr, uint64_t size);
/* 1 and *out when key has an entry, else 0. */
int cr__lc_find(cr__lc_t *lc, const char *key, cr__lc_hit_t *out);
/* cr__lc_find of keys[0..n) under one lock: out[i] for each, out[i].size
 * = 0 for a key without an entry (a value is never empty). Returns how
 * many have one. */
size_t cr__lc_find_many(cr__lc_t *lc, const char *const *keys, size_t n, cr__lc_hit_t *out);
/* One entry of cr__lc_set_many (replica id 0: not known yet). */
typedef struct cr__lc_put {
    const char *key, *seg;
    uint64_t version, replica_id, addr, size;
} cr__lc_put_t;
/* cr__lc_set of each of v[0..n) under one lock (a run of entries on one
 * segment names it once); an entry with key NULL is skipped. */
void cr__lc_set_many(cr__lc_t *lc, const cr__lc_put_t *v, size_t n);
/* Before a cr__lc_set_hashed of v (whose versions may still be unknown):
 * the hashes of v[0..n)'s keys into h[0..n), and the lines the set will
 * write start loading, so that a caller about to wait (for the answer that
 * tells the versions) waits for them at the same time. */
void cr__lc_warm(cr__lc_t *lc, const cr__lc_put_t *v, size_t n, uint64_t *h);
/* cr__lc_set_many of v with h from cr__lc_warm of the same keys (h is
 * overwritten). */
void cr__lc_set_hashed(cr__lc_t *lc, const cr__lc_put_t *v, uint64_t *h, size_t n);
/* Forgets key's entry (if it has one). */
void cr__lc_drop(cr__lc_t *lc, const char *key);

#endif
