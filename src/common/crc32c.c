/* CRC-32C: SSE4.2 crc32 instruction, PCLMULQDQ folding or VPCLMULQDQ
 * folding on AVX-512 or AVX2 registers (whichever is fastest on this CPU),
 * with a portable slicing-by-8 fallback. */
#include "common/crc32c.h"
#include "common/copy.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define CRC32C_POLY 0x82F63B78u /* 0x1EDC6F41 reflected */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_have_hw;
static int crc_have_pcl; /* PCLMULQDQ too */
static int crc_have_vpcl; /* and VPCLMULQDQ on 512-bit registers (AVX-512) */
static int crc_have_vpcl256; /* and VPCLMULQDQ on 256-bit registers (AVX2) */
static int crc_use_pcl;  /* the impl (2, 3 or 4) that beat the crc32 instruction at init, or 0 */

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

/* x^n mod P, bit-reflected (bit 31 is x^0): the folding constants */
static uint32_t xnmodp(unsigned n)
{
    uint32_t acc = 0x80000000u;
    while (n--)
        acc = (acc & 1) ? (acc >> 1) ^ CRC32C_POLY : acc >> 1;
    return acc;
}
/* folding 64 bytes forward (4 lanes of 16), then 16 bytes (lanes into one):
 * the low half of a lane is multiplied by x^(8d+31), the high half by
 * x^(8d-33) (Intel's crc32c constants 0x740eef02 0x9e4addf8 0xf20c0dfe
 * 0x493c7d27) */
static uint64_t fold64[2], fold16[2], fold256[2], fold128[2];

static void crc_pick(void);

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
    fold64[0] = xnmodp(8 * 64 + 31);
    fold64[1] = xnmodp(8 * 64 - 33);
    fold16[0] = xnmodp(8 * 16 + 31);
    fold16[1] = xnmodp(8 * 16 - 33);
    fold256[0] = xnmodp(8 * 256 + 31);
    fold256[1] = xnmodp(8 * 256 - 33);
    fold128[0] = xnmodp(8 * 128 + 31);
    fold128[1] = xnmodp(8 * 128 - 33);
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    crc_have_hw = __builtin_cpu_supports("sse4.2");
#endif
#if defined(__x86_64__)
    crc_have_pcl = crc_have_hw && __builtin_cpu_supports("pclmul");
    crc_have_vpcl = crc_have_pcl && __builtin_cpu_supports("avx512f") &&
                    __builtin_cpu_supports("vpclmulqdq");
    crc_have_vpcl256 = crc_have_pcl && __builtin_cpu_supports("avx2") &&
                       __builtin_cpu_supports("vpclmulqdq");
#endif
    crc_pick();
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
/* The last < 3 lanes (or < 64 bytes) with the crc32 instruction: 8 bytes
 * at a time, then single bytes. Shared by both hardware paths. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw_tail(uint64_t c64,
                                                              const unsigned char *p,
                                                              size_t len)
{
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
        p += 8;
        len -= 8;
    }
    uint32_t c = (uint32_t)c64;
    while (len--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}

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
    return crc_hw_tail(c64, p, len);
}
#endif

#if defined(__x86_64__)
/* One folding step: x carried forward over the distance k encodes, then
 * the next 16 bytes y added. */
__attribute__((target("pclmul"))) static inline __m128i pcl_fold(__m128i x, __m128i k, __m128i y)
{
    return _mm_xor_si128(
        _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), y);
}

/* The end of both folding loops: the four lanes folded into one, its 16
 * bytes through the crc32 instruction, then the last len (< 64) bytes. */
__attribute__((target("sse4.2,pclmul"))) static uint32_t pcl_finish(__m128i x0, __m128i x1,
                                                                    __m128i x2, __m128i x3,
                                                                    const unsigned char *p,
                                                                    size_t len)
{
    __m128i k = _mm_set_epi64x((long long)fold16[1], (long long)fold16[0]);
    x0 = pcl_fold(pcl_fold(pcl_fold(x0, k, x1), k, x2), k, x3);
    uint64_t c64 = __builtin_ia32_crc32di(0, (uint64_t)_mm_cvtsi128_si64(x0));
    c64 = __builtin_ia32_crc32di(c64, (uint64_t)_mm_extract_epi64(x0, 1));
    return crc_hw_tail(c64, p, len);
}

/* The four lanes carried over the rest of the buffer 64 bytes at a time,
 * then pcl_finish: the end of crc_pcl and of crc_vpcl256. */
__attribute__((target("sse4.2,pclmul"))) static uint32_t pcl_rest(__m128i x0, __m128i x1,
                                                                  __m128i x2, __m128i x3,
                                                                  const unsigned char *p,
                                                                  size_t len)
{
    __m128i k = _mm_set_epi64x((long long)fold64[1], (long long)fold64[0]);
    while (len >= 64) {
        x0 = pcl_fold(x0, k, _mm_loadu_si128((const __m128i *)p));
        x1 = pcl_fold(x1, k, _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = pcl_fold(x2, k, _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = pcl_fold(x3, k, _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        len -= 64;
    }
    return pcl_finish(x0, x1, x2, x3, p, len);
}

/* PCLMULQDQ folding (the reflected-CRC scheme of Intel's "Fast CRC
 * Computation Using PCLMULQDQ"): four 16-byte lanes are carried forward 64
 * bytes at a time with two carry-less multiplies each, folded into one,
 * and the last 16 bytes go through the crc32 instruction. On AMD Zen 1
 * (this machine) it runs at ~1.6x the three crc32 streams above, whose
 * instruction is not pipelined there. len >= 64. */
__attribute__((target("sse4.2,pclmul"))) static uint32_t crc_pcl(uint32_t c,
                                                                 const unsigned char *p,
                                                                 size_t len)
{
    __m128i x0 = _mm_loadu_si128((const __m128i *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)c));
    p += 64;
    len -= 64;
    return pcl_rest(x0, x1, x2, x3, p, len);
}
#endif

#if defined(__x86_64__)
#define VPCL256_TARGET "sse4.2,pclmul,avx2,vpclmulqdq"
/* pcl_fold on each of the two 16-byte lanes of a 32-byte register */
__attribute__((target(VPCL256_TARGET))) static inline __m256i vpcl256_fold(__m256i x, __m256i k,
                                                                          __m256i y)
{
    return _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(x, k, 0x00),
                                             _mm256_clmulepi64_epi128(x, k, 0x11)),
                            y);
}

/* a folding constant pair in both lanes of a 32-byte register */
__attribute__((target(VPCL256_TARGET))) static inline __m256i vpcl256_k(const uint64_t f[2])
{
    return _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)f[1], (long long)f[0]));
}

/* Four 32-byte registers (128 consecutive bytes) folded pairwise by 64
 * bytes into the four 16-byte lanes of the last 64 (x[0..4)). */
__attribute__((target(VPCL256_TARGET))) static inline void vpcl256_lanes(const __m256i z[4],
                                                                         __m128i x[4])
{
    __m256i k = vpcl256_k(fold64);
    __m256i lo = vpcl256_fold(z[0], k, z[2]), hi = vpcl256_fold(z[1], k, z[3]);
    x[0] = _mm256_extracti128_si256(lo, 0);
    x[1] = _mm256_extracti128_si256(lo, 1);
    x[2] = _mm256_extracti128_si256(hi, 0);
    x[3] = _mm256_extracti128_si256(hi, 1);
}

/* The folding with VPCLMULQDQ on 256-bit registers (AVX2 without AVX-512,
 * e.g. AMD Zen 3, Intel Alder Lake): four 32-byte registers, each two
 * 16-byte lanes, carried forward 128 bytes at a time with two carry-less
 * multiplies per register, folded pairwise by 64 bytes into crc_pcl's four
 * lanes, which take the rest as crc_pcl does. Each multiply does two lanes'
 * work, so it runs at ~2x crc_pcl where the instruction's throughput is the
 * same for both widths (Zen 3: ~1.2-1.9x the three crc32 streams, 4-64 KiB
 * in cache). len >= 128. */
__attribute__((target(VPCL256_TARGET))) static uint32_t crc_vpcl256(uint32_t c,
                                                                    const unsigned char *p,
                                                                    size_t len)
{
    __m256i z[4];
    for (int i = 0; i < 4; i++)
        z[i] = _mm256_loadu_si256((const void *)(p + 32 * i));
    z[0] = _mm256_xor_si256(z[0], _mm256_castsi128_si256(_mm_cvtsi32_si128((int)c)));
    p += 128;
    len -= 128;
    __m256i k = vpcl256_k(fold128);
    while (len >= 128) {
        for (int i = 0; i < 4; i++)
            z[i] = vpcl256_fold(z[i], k, _mm256_loadu_si256((const void *)(p + 32 * i)));
        p += 128;
        len -= 128;
    }
    __m128i x[4];
    vpcl256_lanes(z, x);
    return pcl_rest(x[0], x[1], x[2], x[3], p, len);
}
#endif

#if defined(__x86_64__)
#define VPCL_TARGET "sse4.2,pclmul,avx512f,vpclmulqdq"
/* pcl_fold on each of the four 16-byte lanes of a 64-byte register */
__attribute__((target(VPCL_TARGET))) static inline __m512i vpcl_fold(__m512i x, __m512i k,
                                                                    __m512i y)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), y, 0x96);
}

/* The same folding with VPCLMULQDQ on 512-bit registers (AVX-512, e.g. AMD
 * Zen 4/5, Intel Ice Lake on): four 64-byte registers, each four 16-byte
 * lanes, carried forward 256 bytes at a time, folded into one register by
 * the 64-byte distance, whose four lanes finish as crc_pcl's do. len >= 256. */
__attribute__((target(VPCL_TARGET))) static uint32_t crc_vpcl(uint32_t c, const unsigned char *p,
                                                              size_t len)
{
    __m512i z0 = _mm512_loadu_si512((const void *)p);
    __m512i z1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i z2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i z3 = _mm512_loadu_si512((const void *)(p + 192));
    z0 = _mm512_xor_si512(z0, _mm512_castsi128_si512(_mm_cvtsi32_si128((int)c)));
    p += 256;
    len -= 256;
    __m512i k = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold256[1], (long long)fold256[0]));
    while (len >= 256) {
        z0 = vpcl_fold(z0, k, _mm512_loadu_si512((const void *)p));
        z1 = vpcl_fold(z1, k, _mm512_loadu_si512((const void *)(p + 64)));
        z2 = vpcl_fold(z2, k, _mm512_loadu_si512((const void *)(p + 128)));
        z3 = vpcl_fold(z3, k, _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        len -= 256;
    }
    k = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold64[1], (long long)fold64[0]));
    z0 = vpcl_fold(vpcl_fold(vpcl_fold(z0, k, z1), k, z2), k, z3);
    while (len >= 64) {
        z0 = vpcl_fold(z0, k, _mm512_loadu_si512((const void *)p));
        p += 64;
        len -= 64;
    }
    return pcl_finish(_mm512_extracti32x4_epi32(z0, 0), _mm512_extracti32x4_epi32(z0, 1),
                      _mm512_extracti32x4_epi32(z0, 2), _mm512_extracti32x4_epi32(z0, 3), p,
                      len);
}
#endif

/* The raw register over len bytes by implementation impl (1 crc32
 * instruction, 2 PCLMULQDQ for len >= 64, 3 512-bit VPCLMULQDQ for len >=
 * 256 and PCLMULQDQ from 64, 4 256-bit VPCLMULQDQ for len >= 128 and
 * PCLMULQDQ from 64, else the table). */
static uint32_t crc_by(int impl, uint32_t c, const unsigned char *p, size_t len)
{
#if defined(__x86_64__)
    if (impl == 4 && len >= 128)
        return crc_vpcl256(c, p, len);
    if (impl == 3 && len >= 256)
        return crc_vpcl(c, p, len);
    if (impl >= 2 && len >= 64)
        return crc_pcl(c, p, len);
    if (impl >= 1)
        return crc_hw(c, p, len);
#else
    (void)impl;
#endif
    return crc_sw(c, p, len);
}

/* VPCLMULQDQ (512- or 256-bit), PCLMULQDQ or the crc32 instruction:
 * whichever hashes fastest here, timed over 64 KiB as one buffer, as four
 * of 16 KiB and as sixteen of 4 KiB (the sizes of KV-cache pages and of
 * the transports' pieces; the implementations' order differs between
 * them), best of 5 each. All give the same checksums, only speed differs. */
static void crc_pick(void)
{
    if (!crc_have_pcl)
        return;
    static unsigned char buf[64 << 10];
    memset(buf, 0x5a, sizeof buf);
    uint64_t best[5] = {UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
    volatile uint32_t sink = 0;
    for (int r = 0; r < 5; r++)
        for (int impl = 1; impl <= 4; impl++) {
            if ((impl == 3 && !crc_have_vpcl) || (impl == 4 && !crc_have_vpcl256))
                continue;
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            for (size_t piece = sizeof buf; piece >= (4u << 10); piece /= 4)
                for (size_t off = 0; off < sizeof buf; off += piece)
                    sink ^= crc_by(impl, 0, buf + off, piece);
            clock_gettime(CLOCK_MONOTONIC, &b);
            uint64_t ns = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull +
                          (uint64_t)(b.tv_nsec - a.tv_nsec);
            if (ns < best[impl])
                best[impl] = ns;
        }
    (void)sink;
    int pick = 1;
    for (int impl = 2; impl <= 4; impl++)
        if (best[impl] < best[pick])
            pick = impl;
    crc_use_pcl = pick == 1 ? 0 : pick;
}

uint32_t cr__crc32c_impl(int impl, uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    if (!cr__crc32c_impl_available(impl))
        return 0;
    return ~crc_by(impl, ~crc, buf, len);
}

int cr__crc32c_impl_available(int impl)
{
    pthread_once(&crc_once, crc_init);
    return impl == 0 || (impl == 1 && crc_have_hw) || (impl == 2 && crc_have_pcl) ||
           (impl == 3 && crc_have_vpcl) || (impl == 4 && crc_have_vpcl256);
}

uint32_t cr__crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    return ~crc_sw(~crc, buf, len);
}

/* The raw register by the fastest implementation here. */
static uint32_t crc_fast(uint32_t reg, const unsigned char *p, size_t len)
{
#if defined(__x86_64__)
    if (crc_use_pcl)
        return crc_by(crc_use_pcl, reg, p, len);
    if (crc_have_hw)
        return crc_hw(reg, p, len);
#endif
    return crc_sw(reg, p, len);
}

uint32_t cr__crc32c(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    return ~crc_fast(~crc, buf, len);
}

uint32_t cr__crc32c_raw(uint32_t reg, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    return crc_fast(reg, buf, len);
}

/* The copy under cr__crc32c_copy_raw: the PCLMULQDQ folding of crc_pcl,
 * fed by the loads of the copy itself, whose stores bypass the cache
 * (16-byte aligned dst, len >= 64). Out of cache the copy waits on memory
 * and the folding fits in those waits, so hashing adds little to copying. */
#if defined(__x86_64__)
__attribute__((target("sse4.2,pclmul"))) static uint32_t crc_pcl_copy(uint32_t c,
                                                                      unsigned char *d,
                                                                      const unsigned char *p,
                                                                      size_t len)
{
    __m128i y[4];
    cr__stream64(d, p, y);
    __m128i x0 = _mm_xor_si128(y[0], _mm_cvtsi32_si128((int)c)), x1 = y[1], x2 = y[2], x3 = y[3];
    p += 64;
    d += 64;
    len -= 64;
    __m128i k = _mm_set_epi64x((long long)fold64[1], (long long)fold64[0]);
    while (len >= 64) {
        cr__stream64(d, p, y);
        x0 = pcl_fold(x0, k, y[0]);
        x1 = pcl_fold(x1, k, y[1]);
        x2 = pcl_fold(x2, k, y[2]);
        x3 = pcl_fold(x3, k, y[3]);
        p += 64;
        d += 64;
        len -= 64;
    }
    _mm_sfence(); /* the streamed stores are ordered before what follows */
    memcpy(d, p, len);
    return pcl_finish(x0, x1, x2, x3, p, len);
}
#endif

#if defined(__x86_64__)
/* crc_pcl_copy with crc_vpcl's folding: 64-byte aligned dst, len >= 256. */
__attribute__((target(VPCL_TARGET))) static uint32_t crc_vpcl_copy(uint32_t c, unsigned char *d,
                                                                   const unsigned char *p,
                                                                   size_t len)
{
    __m512i z0 = _mm512_loadu_si512((const void *)p);
    __m512i z1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i z2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i z3 = _mm512_loadu_si512((const void *)(p + 192));
    _mm512_stream_si512((void *)d, z0);
    _mm512_stream_si512((void *)(d + 64), z1);
    _mm512_stream_si512((void *)(d + 128), z2);
    _mm512_stream_si512((void *)(d + 192), z3);
    z0 = _mm512_xor_si512(z0, _mm512_castsi128_si512(_mm_cvtsi32_si128((int)c)));
    p += 256;
    d += 256;
    len -= 256;
    __m512i k = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold256[1], (long long)fold256[0]));
    while (len >= 256) {
        __m512i y0 = _mm512_loadu_si512((const void *)p);
        __m512i y1 = _mm512_loadu_si512((const void *)(p + 64));
        __m512i y2 = _mm512_loadu_si512((const void *)(p + 128));
        __m512i y3 = _mm512_loadu_si512((const void *)(p + 192));
        _mm512_stream_si512((void *)d, y0);
        _mm512_stream_si512((void *)(d + 64), y1);
        _mm512_stream_si512((void *)(d + 128), y2);
        _mm512_stream_si512((void *)(d + 192), y3);
        z0 = vpcl_fold(z0, k, y0);
        z1 = vpcl_fold(z1, k, y1);
        z2 = vpcl_fold(z2, k, y2);
        z3 = vpcl_fold(z3, k, y3);
        p += 256;
        d += 256;
        len -= 256;
    }
    k = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold64[1], (long long)fold64[0]));
    z0 = vpcl_fold(vpcl_fold(vpcl_fold(z0, k, z1), k, z2), k, z3);
    while (len >= 64) {
        __m512i y = _mm512_loadu_si512((const void *)p);
        _mm512_stream_si512((void *)d, y);
        z0 = vpcl_fold(z0, k, y);
        p += 64;
        d += 64;
        len -= 64;
    }
    _mm_sfence(); /* the streamed stores are ordered before what follows */
    memcpy(d, p, len);
    return pcl_finish(_mm512_extracti32x4_epi32(z0, 0), _mm512_extracti32x4_epi32(z0, 1),
                      _mm512_extracti32x4_epi32(z0, 2), _mm512_extracti32x4_epi32(z0, 3), p,
                      len);
}
#endif

#if defined(__x86_64__)
/* crc_pcl_copy with crc_vpcl256's folding: 32-byte aligned dst, len >= 128. */
__attribute__((target(VPCL256_TARGET))) static uint32_t crc_vpcl256_copy(uint32_t c,
                                                                         unsigned char *d,
                                                                         const unsigned char *p,
                                                                         size_t len)
{
    __m256i z[4];
    for (int i = 0; i < 4; i++) {
        z[i] = _mm256_loadu_si256((const void *)(p + 32 * i));
        _mm256_stream_si256((void *)(d + 32 * i), z[i]);
    }
    z[0] = _mm256_xor_si256(z[0], _mm256_castsi128_si256(_mm_cvtsi32_si128((int)c)));
    p += 128;
    d += 128;
    len -= 128;
    __m256i k = vpcl256_k(fold128);
    while (len >= 128) {
        for (int i = 0; i < 4; i++) {
            __m256i y = _mm256_loadu_si256((const void *)(p + 32 * i));
            _mm256_stream_si256((void *)(d + 32 * i), y);
            z[i] = vpcl256_fold(z[i], k, y);
        }
        p += 128;
        d += 128;
        len -= 128;
    }
    __m128i x[4], y[4];
    vpcl256_lanes(z, x);
    __m128i k4 = _mm_set_epi64x((long long)fold64[1], (long long)fold64[0]);
    while (len >= 64) {
        cr__stream64(d, p, y);
        for (int i = 0; i < 4; i++)
            x[i] = pcl_fold(x[i], k4, y[i]);
        p += 64;
        d += 64;
        len -= 64;
    }
    _mm_sfence(); /* the streamed stores are ordered before what follows */
    memcpy(d, p, len);
    return pcl_finish(x[0], x[1], x[2], x[3], p, len);
}
#endif

uint32_t cr__crc32c_copy_raw(uint32_t reg, void *dst, const void *src, size_t len)
{
    pthread_once(&crc_once, crc_init);
    unsigned char *d = dst;
    const unsigned char *p = src;
#if defined(__x86_64__)
    if (crc_use_pcl && len >= CR__COPY_STREAM_MIN) {
        /* the folded loop's streamed stores want an aligned dst: 64 bytes
         * for the 512-bit folding, 32 for the 256-bit one, 16 for the
         * 128-bit one */
        size_t a = crc_use_pcl == 3 ? 64 : crc_use_pcl == 4 ? 32 : 16,
               head = (a - ((uintptr_t)d & (a - 1))) & (a - 1);
        if (head) {
            memcpy(d, p, head);
            reg = crc_fast(reg, p, head);
            d += head;
            p += head;
            len -= head;
        }
        if (crc_use_pcl == 3)
            return crc_vpcl_copy(reg, d, p, len);
        if (crc_use_pcl == 4)
            return crc_vpcl256_copy(reg, d, p, len);
        return crc_pcl_copy(reg, d, p, len);
    }
#endif
    memcpy(d, p, len);
    return crc_fast(reg, p, len);
}

/* a * b mod P, both bit-reflected (bit 31 is x^0) */
static uint32_t gf_mulmod(uint32_t a, uint32_t b)
{
    uint32_t prod = 0;
    for (uint32_t m = 1u << 31; m; m >>= 1) {
        if (a & m)
            prod ^= b;
        b = (b & 1) ? (b >> 1) ^ CRC32C_POLY : b >> 1; /* b *= x */
    }
    return prod;
}

/* x^(2^k) mod P for k < 64 (x2k[k]), filled once by squaring: a shift by n
 * bytes multiplies by x^(8n), the product of x2k[k + 3] over n's set bits */
static uint32_t x2k[64];
static pthread_once_t x2k_once = PTHREAD_ONCE_INIT;

static void x2k_init(void)
{
    x2k[0] = 1u << 30; /* x */
    for (int k = 1; k < 64; k++)
        x2k[k] = gf_mulmod(x2k[k - 1], x2k[k - 1]);
}

uint32_t cr__crc32c_shift(uint32_t reg, uint64_t nbytes)
{
    pthread_once(&x2k_once, x2k_init);
    for (int k = 3; nbytes && k < 64; k++, nbytes >>= 1)
        if (nbytes & 1)
            reg = gf_mulmod(x2k[k], reg);
    return reg;
}

uint32_t cr__crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    return cr__crc32c_shift(crc_a, len_b) ^ crc_b;
}

int cr__crc32c_hw(void)
{
    pthread_once(&crc_once, crc_init);
    return crc_have_hw;
}
