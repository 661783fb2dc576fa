/* Staging allocator: carves the client's registered local buffer into
 * extents for the copying put/get. Bounded: at most CR__STAGING_MAX_EXTENTS
 * free extents (an allocation that would need more waits like a full
 * buffer). Thread-safe (one mutex, one condvar). */
#ifndef CR_STORE_CLIENT_STAGING_H
#define CR_STORE_CLIENT_STAGING_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define CR__STAGING_MAX_EXTENTS 1024
#define CR__STAGING_ALIGN 4096

typedef struct cr__staging_extent {
    size_t off, len;
} cr__staging_extent_t;

typedef struct cr__staging {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint8_t *base; /* not owned */
    size_t size;   /* multiple of CR__STAGING_ALIGN */
    /* guarded by mu: free extents sorted by offset, coalesced */
    size_t n_free;
    cr__staging_extent_t free_list[CR__STAGING_MAX_EXTENTS];
    size_t in_use; /* bytes allocated */
} cr__staging_t;

/* Initializes over [base, base+size) (size rounded down to the alignment).
 * Returns 0 or -EINVAL (size smaller than one alignment unit). */
int cr__staging_init(cr__staging_t *s, void *base, size_t size);
void cr__staging_fini(cr__staging_t *s);

/* Allocates len (> 0, <= s->size) bytes, waiting up to timeout_ms for space.
 * Returns the address, or NULL (timeout, or len out of range). */
void *cr__staging_alloc(cr__staging_t *s, size_t len, int timeout_ms);

/* Frees an allocation of len bytes at p (the len given to alloc). */
void cr__staging_free(cr__staging_t *s, void *p, size_t len);

#endif
