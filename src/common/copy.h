/* Bulk copies that store around the cache.
 *
 * A transfer's bytes are copied once and not read again by the copying
 * thread, so filling its cache with them only evicts what it will read
 * next, and on x86 an ordinary store first reads each destination line
 * from memory. Non-temporal stores skip both: out of cache a copy moves
 * ~1.5x the bytes per second of memcpy here (docs/benchmarks.md). */
#ifndef CR_COMMON_COPY_H
#define CR_COMMON_COPY_H

#include <stddef.h>

/* Copies shorter than this are plain memcpy: their bytes are likely read
 * soon, and the fence after streamed stores costs more than it saves. */
#define CR__COPY_STREAM_MIN 4096u

/* memcpy(dst, src, len) for non-overlapping buffers, with non-temporal
 * stores from CR__COPY_STREAM_MIN bytes on; the stores are fenced before it
 * returns, so the bytes are visible as after memcpy. */
void cr__copy_stream(void *dst, const void *src, size_t len);

#endif
