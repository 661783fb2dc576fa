/* Offset allocator for one mounted segment: hands out [offset, offset+len)
 * ranges of a segment whose memory lives in another process (the master
 * never touches it), so all bookkeeping is out of band.
 *
 * Design: two-level segregated fit (TLSF-like, as Sebastian Aaltonen's
 * OffsetAllocator): sizes are counted in granules (a power of two >= 64
 * bytes, chosen so the segment fits in 2^32 granules); free blocks sit in
 * 256 bins indexed by a small float (5-bit exponent, 3-bit mantissa) with
 * a two-level bitmap, so alloc and free are O(1): alloc takes the first
 * non-empty bin whose every block is big enough (good fit, splits the
 * rest), free coalesces with both physical neighbours. Blocks are nodes in
 * one growable array addressed by 32-bit handles (28 bytes per block).
 * Worst-case internal waste per block is one granule + the bin rounding
 * (at most 1/8 of the block's size is skipped when choosing a bin, never
 * lost: the split returns the rest).
 *
 * Not thread-safe: the master's state lock guards it.
 */
#ifndef CR_STORE_ALLOCATOR_OFFSET_ALLOC_H
#define CR_STORE_ALLOCATOR_OFFSET_ALLOC_H

#include <stddef.h>
#include <stdint.h>

typedef struct cr__oalloc cr__oalloc_t;

#define CR__OALLOC_NONE UINT32_MAX /* no block */

/* Creates an allocator over [0, size) bytes. min_granule_shift (>= 6) sets
 * the smallest granule (1 << shift bytes); the allocator raises it for
 * segments over 2^32 granules. Sizes are rounded down to a granule.
 * Returns 0 and *out, -EINVAL (size smaller than one granule, shift out of
 * 6..30) or -ENOMEM. */
int cr__oalloc_create(uint64_t size, unsigned min_granule_shift, cr__oalloc_t **out);

/* Creates an allocator like cr__oalloc_create() with n blocks already
 * allocated at given byte ranges (restoring a master's state): offs[]
 * ascending, granule-aligned; lens[] rounded up to a granule. blk[k] gets
 * the handle of range k, or CR__OALLOC_NONE for a range that is misaligned,
 * overlaps the one before or passes the end (it is not allocated). O(n).
 * Returns 0 and *out, -EINVAL (as create) or -ENOMEM. */
int cr__oalloc_create_used(uint64_t size, unsigned min_granule_shift, const uint64_t *offs,
                           const uint64_t *lens, size_t n, uint32_t *blk, cr__oalloc_t **out);

/* Frees the allocator (outstanding blocks included). NULL is a no-op. */
void cr__oalloc_destroy(cr__oalloc_t *a);

/* Allocates len bytes (rounded up to a granule). Returns the block handle
 * and its byte offset in *offset, or CR__OALLOC_NONE (len 0, no free
 * block large enough, or out of memory for bookkeeping). */
uint32_t cr__oalloc_alloc(cr__oalloc_t *a, uint64_t len, uint64_t *offset);

/* Allocates exactly [offset, offset+len) (offset granule-aligned, len
 * rounded up to a granule) if that whole range is free: restoring blocks
 * whose place is fixed (a disk tier's objects after a restart). Returns the
 * handle, or CR__OALLOC_NONE (misaligned, out of range, not free, no
 * memory). Walks the physical block list from the previous reservation, so
 * ascending offsets cost O(1) each; otherwise O(blocks). */
uint32_t cr__oalloc_reserve(cr__oalloc_t *a, uint64_t offset, uint64_t len);

/* Frees a block returned by cr__oalloc_alloc. Freeing a handle twice or a
 * handle not in use is detected and ignored (returns -EINVAL); 0 on success. */
int cr__oalloc_free(cr__oalloc_t *a, uint32_t block);

/* Offset / size in bytes (granule-rounded) of a live block. */
uint64_t cr__oalloc_block_offset(const cr__oalloc_t *a, uint32_t block);
uint64_t cr__oalloc_block_size(const cr__oalloc_t *a, uint32_t block);

typedef struct cr__oalloc_stats {
    uint64_t capacity;      /* usable bytes (granule multiple) */
    uint64_t used;          /* bytes in allocated blocks (granule-rounded) */
    uint64_t free;          /* capacity - used */
    uint64_t largest_free;  /* largest free block in bytes */
    uint64_t n_used_blocks, n_free_blocks;
    uint64_t granule;       /* bytes */
    uint64_t meta_bytes;    /* bookkeeping memory held by the allocator */
} cr__oalloc_stats_t;

/* Fills *st. largest_free is exact (scans the top non-empty bin only). */
void cr__oalloc_stats(const cr__oalloc_t *a, cr__oalloc_stats_t *st);

/* The largest len that cr__oalloc_alloc() is sure to satisfy now, in O(1)
 * (the lower bound of the top non-empty bin: within 1/8 of the largest
 * free block); 0 when full. */
uint64_t cr__oalloc_max_alloc(const cr__oalloc_t *a);

/* The granule in bytes (sizes and offsets are multiples of it). */
uint64_t cr__oalloc_granule(const cr__oalloc_t *a);

/* Bytes used/capacity in O(1). */
uint64_t cr__oalloc_used(const cr__oalloc_t *a);
uint64_t cr__oalloc_capacity(const cr__oalloc_t *a);

#endif
