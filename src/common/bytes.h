/* Little-endian integers in wire buffers (header-only): every crescent wire
 * format (store RPC, HA journal records, capabilities, handshakes, shm
 * proofs) stores its integers little-endian, byte by byte, so no alignment
 * or host byte order is assumed. n is 1..8 bytes. */
#ifndef CR_COMMON_BYTES_H
#define CR_COMMON_BYTES_H
#include <stdint.h>

static inline void cr__put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t cr__get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
#endif
