/* CRC-32C: SSE4.2 instruction with a portable slicing-by-8 fallback. */
#include "common/crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u /* 0x1EDC6F41 reflected */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_have_hw;

/* The hardware path runs three independent crc32 streams over three
 * adjacent LANE-byte blocks (the instruction's latency is 3 cycles, its
 * throughput 1 per cycle) and joins them: the raw register of A||B is
 * shift_|B|(reg after A) ^ reg(B from 0), where shift_n appends n zero
 * bytes, a linear map on the 32 register bits, tabulated per input byte
 * (lane_shift, built at init). */
#define LANE 4096u
static uint32_t lane_shift[4][256];

/* GF(2) 32x32 matrix (column n = image of bit n) times vector. */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (int n = 0; vec; n++, vec >>= 1)
        if (vec & 1)
            sum ^= mat[n];
    return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        sq[n] = gf2_times(mat, mat[n]);
}

/* lane_shift = the operator appending LANE (a power of two) zero bytes */
static void lane_shift_init(void)
{
    uint32_t a[32], b[32];
    a[0] = CRC32C_POLY; /* one zero bit */
    for (int n = 1; n < 32; n++)
        a[n] = 1u << (n - 1);
    gf2_square(b, a); /* 2 bits */
    gf2_square(a, b); /* 4 bits */
    uint32_t *cur = a, *other = b;
    for (uint32_t bits = 4; bits < 8u * LANE; bits <<= 1) {
        gf2_square(other, cur);
        uint32_t *t = cur;
        cur = other;
        other = t;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 0; k < 4; k++)
            lane_shift[k][n] = gf2_times(cur, n << (8 * k));
}

static uint32_t lane_apply(uint32_t c)
{
    return lane_shift[0][c & 0xff] ^ lane_shift[1][(c >> 8) & 0xff] ^
           lane_shift[2][(c >> 16) & 0xff] ^ lane_shift[3][c >> 24];
}

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    lane_shift_init();
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    crc_have_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c; /* little-endian hosts only: the low 4 bytes meet the crc */
        c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
            crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
            crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
            crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p,
                                                          size_t len)
{
    uint64_t c64;
    while (len && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi(c, *p++);
        len--;
    }
    c64 = c;
    while (len >= 3 * LANE) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < LANE; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + LANE + i, 8);
            memcpy(&w2, p + 2 * LANE + i, 8);
            c64 = __builtin_ia32_crc32di(c64, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
        }
        c64 = lane_apply((uint32_t)c64) ^ (uint32_t)c1;
        c64 = lane_apply((uint32_t)c64) ^ (uint32_t)c2;
        p += 3 * LANE;
        len -= 3 * LANE;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
        p += 8;
        len -= 8;
    }
    c = (uint32_t)c64;
    while (len--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

uint32_t cr__crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    return ~crc_sw(~crc, buf, len);
}

uint32_t cr__crc32c(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
#if defined(__x86_64__)
    if (crc_have_hw)
        return ~crc_hw(~crc, buf, len);
#endif
    return ~crc_sw(~crc, buf, len);
}

int cr__crc32c_hw(void)
{
    pthread_once(&crc_once, crc_init);
    return crc_have_hw;
}
