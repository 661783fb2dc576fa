/* Bulk copies that store around the cache (copy.h). */
#include "common/copy.h"

#include <stdint.h>
#include <string.h>

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
        __m128i y[4];
        for (; len >= 64; d += 64, p += 64, len -= 64)
            cr__stream64(d, p, y);
        _mm_sfence();
    }
#endif
    memcpy(d, p, len);
}
