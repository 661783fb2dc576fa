/* Little-endian integers in wire buffers (header-only): every crescent wire
 * format (store RPC, HA journal records, capabilities, handshakes, shm
 * proofs) stores its integers little-endian, byte by byte, so no alignment
 * or host byte order is assumed. n is 1..8 bytes. On a little-endian host
 * the 2-, 4- and 8-byte forms are one unaligned load or store (memcpy of
 * the host value) instead of a loop over the bytes: the RPC codec reads
 * and writes a few dozen of them per key of a batch. */
#ifndef CR_COMMON_BYTES_H
#define CR_COMMON_BYTES_H
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define CR__BYTES_LE_HOST 1
#else
#define CR__BYTES_LE_HOST 0
#endif

static inline void cr__put_le(uint8_t *p, uint64_t v, int n)
{
    if (CR__BYTES_LE_HOST) {
        switch (n) {
        case 8:
            memcpy(p, &v, 8);
            return;
        case 4: {
            uint32_t x = (uint32_t)v;
            memcpy(p, &x, 4);
            return;
        }
        case 2: {
            uint16_t x = (uint16_t)v;
            memcpy(p, &x, 2);
            return;
        }
        default:
            break;
        }
    }
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t cr__get_le(const uint8_t *p, int n)
{
    if (CR__BYTES_LE_HOST) {
        switch (n) {
        case 8: {
            uint64_t x;
            memcpy(&x, p, 8);
            return x;
        }
        case 4: {
            uint32_t x;
            memcpy(&x, p, 4);
            return x;
        }
        case 2: {
            uint16_t x;
            memcpy(&x, p, 2);
            return x;
        }
        default:
            break;
        }
    }
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
#endif
