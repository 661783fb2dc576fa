/* Bulk copies that store around the cache (copy.h). */
#include "common/copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

void cr__copy_stream(void *dst, const void *src, size_t len)
{
    unsigned char *d = dst;
    const unsigned char *p = src;
#if defined(__x86_64__)
    if (len >= CR__COPY_STREAM_MIN) {
        size_t head = (16 - ((uintptr_t)d & 15)) & 15;
        memcpy(d, p, head);
        d += head;
        p += head;
        len -= head;
        for (; len >= 64; d += 64, p += 64, len -= 64) {
            __m128i y0 = _mm_loadu_si128((const __m128i *)p);
            __m128i y1 = _mm_loadu_si128((const __m128i *)(p + 16));
            __m128i y2 = _mm_loadu_si128((const __m128i *)(p + 32));
            __m128i y3 = _mm_loadu_si128((const __m128i *)(p + 48));
            _mm_stream_si128((__m128i *)d, y0);
            _mm_stream_si128((__m128i *)(d + 16), y1);
            _mm_stream_si128((__m128i *)(d + 32), y2);
            _mm_stream_si128((__m128i *)(d + 48), y3);
        }
        _mm_sfence();
    }
#endif
    memcpy(d, p, len);
}
