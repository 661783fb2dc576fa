/* Checksums of the bytes a Transfer Engine batch moved: the store's side.
 *
 * The store keeps a crc32c of every value end to end (docs/security.md):
 * a put hashes the bytes it sends, a get the bytes that landed. Hashing
 * them in a pass of their own after the batch reads every byte from
 * memory once more; a transport whose own threads do the copies instead
 * hashes each piece right after it moved it, while it is in the moving
 * core's cache (crc_pieces and cr__xfer_task_crc_range in
 * transport/transport.h). On this class of
 * machine that pass runs at ~10 GB/s from cache and ~7 GB/s from memory,
 * and it competes with the copies for memory bandwidth.
 */
#ifndef CR_TRANSFER_CHECKSUM_H
#define CR_TRANSFER_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "crescent/transfer.h"

/* Every request submitted to b after this call whose transport hashes what
 * it moves (cr__xfer_batch_crc_wanted) gets the crc32c (common/crc32c.h) of
 * its local bytes [local_addr, local_addr + length) as they were once
 * moved: for a READ after they landed, for a WRITE as sent. Call before the
 * submit; not thread-safe against a concurrent submit to the same batch. */
void cr__xfer_batch_want_crc(cr_xfer_batch_t *b);

/* 1 if request index of b (submitted by this thread) will get a crc32c:
 * its transport hashes the pieces of its opcode (crc_pieces in
 * transport/transport.h says which do).
 * For the others the caller hashes on its own, best while the data moves. */
int cr__xfer_batch_crc_wanted(const cr_xfer_batch_t *b, size_t index);

/* The crc32c of request index of b. Returns 0 and *crc for a request that
 * completed successfully in a batch that wanted crcs; -ENODATA for one
 * still running, failed, or submitted without; -EINVAL for a bad index. */
int cr__xfer_batch_crc(cr_xfer_batch_t *b, size_t index, uint32_t *crc);

#endif
