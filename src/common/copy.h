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

#if defined(__x86_64__)
#include <immintrin.h>

/* Loads the 64 bytes at p into y[0..3] and streams them to d (16-byte
 * aligned); the caller fences (_mm_sfence) after its last. */
static inline void cr__stream64(unsigned char *d, const unsigned char *p, __m128i y[4])
{
    for (int i = 0; i < 4; i++)
        y[i] = _mm_loadu_si128((const __m128i *)(p + 16 * i));
    for (int i = 0; i < 4; i++)
        _mm_stream_si128((__m128i *)(d + 16 * i), y[i]);
}
#endif

/* memcpy(dst, src, len) for non-overlapping buffers, with non-temporal
 * stores from CR__COPY_STREAM_MIN bytes on; the stores are fenced before it
 * returns, so the bytes are visible as after memcpy. */
void cr__copy_stream(void *dst, const void *src, size_t len);

#endif
