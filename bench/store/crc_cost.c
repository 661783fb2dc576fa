/* The CPU cost of the store's end-to-end checksum (crc32c, common/crc32c.c)
 * per value, next to a reference measured in the same run: copying the same
 * bytes (memcpy), for the value sizes of the KV-cache benchmark. Both run
 * over a 64 MiB working set (one value after the other, as a batch of
 * values is checked), so the figures are not cache-resident flattery.
 * Not built by CMake (a benchmark, not a test); build and run:
 *
 *   gcc -O2 -Iinclude -Isrc bench/store/crc_cost.c src/common/crc32c.c \
 *       -lpthread -o /tmp/crc_cost && /tmp/crc_cost
 *
 * Prints ns per value and GB/s (median of 7 rounds), then GB/s of each
 * hardware implementation this CPU has (cr__crc32c_impl: 1 the crc32
 * instruction, 2 PCLMULQDQ folding, 3 VPCLMULQDQ folding on AVX-512, 4
 * VPCLMULQDQ folding on AVX2), so
 * the pick of cr__crc32c can be checked, then what one core pays to hash
 * and copy each value in either order. Never fails on timing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/clock.h"
#include "common/crc32c.h"

/* Sorts v[0..n) in place (n is tiny). */
static void sort_small(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
}

#define ROUNDS 7
#define SET (64u << 20)
static volatile uint32_t sink;

int main(void)
{
    uint8_t *src = malloc(SET), *dst = malloc(SET);
    if (!src || !dst)
        return 1;
    for (size_t i = 0; i < SET; i++)
        src[i] = (uint8_t)(i * 131 + (i >> 9));
    memset(dst, 0, SET);
    static const size_t sizes[] = {4096, 16384, 65536, 1 << 20};
    printf("| value | crc32c ns/value | crc32c GB/s | memcpy ns/value | memcpy GB/s | crc / memcpy |\n");
    printf("|---|---|---|---|---|---|\n");
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
        size_t sz = sizes[z], nv = SET / sz;
        double crc[ROUNDS], cpy[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) { /* interleaved: crc then memcpy each round */
            uint64_t t0 = cr__now_ns();
            uint32_t acc = 0;
            for (size_t v = 0; v < nv; v++)
                acc ^= cr__crc32c(0, src + v * sz, sz);
            uint64_t t1 = cr__now_ns();
            for (size_t v = 0; v < nv; v++)
                memcpy(dst + v * sz, src + v * sz, sz);
            uint64_t t2 = cr__now_ns();
            sink = acc ^ dst[(size_t)r * 4099 % SET];
            crc[r] = (double)(t1 - t0) / (double)nv;
            cpy[r] = (double)(t2 - t1) / (double)nv;
        }
        sort_small(crc, ROUNDS);
        sort_small(cpy, ROUNDS);
        double c = crc[ROUNDS / 2], m = cpy[ROUNDS / 2];
        printf("| %zu KiB | %.0f (%.0f-%.0f) | %.1f | %.0f (%.0f-%.0f) | %.1f | %.2f |\n", sz >> 10, c,
               crc[0], crc[ROUNDS - 1], (double)sz / c, m, cpy[0], cpy[ROUNDS - 1],
               (double)sz / m, c / m);
    }
    printf("\n| value | implementation | GB/s median (min-max) |\n|---|---|---|\n");
    static const char *const names[] = {"", "crc32 instruction", "PCLMULQDQ 128-bit",
                                        "VPCLMULQDQ 512-bit", "VPCLMULQDQ 256-bit"};
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
        for (int impl = 1; impl <= 4; impl++) {
            if (!cr__crc32c_impl_available(impl))
                continue;
            size_t sz = sizes[z], nv = SET / sz;
            double g[ROUNDS];
            for (int r = 0; r < ROUNDS; r++) {
                uint64_t t0 = cr__now_ns();
                uint32_t acc = 0;
                for (size_t v = 0; v < nv; v++)
                    acc ^= cr__crc32c_impl(impl, 0, src + v * sz, sz);
                sink = acc;
                g[r] = (double)SET / (double)(cr__now_ns() - t0);
            }
            sort_small(g, ROUNDS);
            printf("| %zu KiB | %d %s | %.1f (%.1f-%.1f) |\n", sz >> 10, impl, names[impl],
                   g[ROUNDS / 2], g[0], g[ROUNDS - 1]);
        }
    /* The order of hash and copy when one core does both, value by value
     * (as a transport's thread hashing each piece next to its copy would):
     * whichever runs first reads the value from memory, the second from
     * cache. */
    printf("\n| value | memcpy ns/value | crc32c then memcpy | memcpy then crc32c | "
           "(crc then memcpy) / memcpy |\n|---|---|---|---|---|\n");
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
        size_t sz = sizes[z], nv = SET / sz;
        double cp[ROUNDS], hc[ROUNDS], ch[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) {
            uint32_t acc = 0;
            uint64_t t0 = cr__now_ns();
            for (size_t v = 0; v < nv; v++)
                memcpy(dst + v * sz, src + v * sz, sz);
            uint64_t t1 = cr__now_ns();
            for (size_t v = 0; v < nv; v++) {
                acc ^= cr__crc32c(0, src + v * sz, sz);
                memcpy(dst + v * sz, src + v * sz, sz);
            }
            uint64_t t2 = cr__now_ns();
            for (size_t v = 0; v < nv; v++) {
                memcpy(dst + v * sz, src + v * sz, sz);
                acc ^= cr__crc32c(0, src + v * sz, sz);
            }
            uint64_t t3 = cr__now_ns();
            sink = acc ^ dst[(size_t)r * 4099 % SET];
            cp[r] = (double)(t1 - t0) / (double)nv;
            hc[r] = (double)(t2 - t1) / (double)nv;
            ch[r] = (double)(t3 - t2) / (double)nv;
        }
        sort_small(cp, ROUNDS);
        sort_small(hc, ROUNDS);
        sort_small(ch, ROUNDS);
        printf("| %zu KiB | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.2f |\n",
               sz >> 10, cp[ROUNDS / 2], cp[0], cp[ROUNDS - 1], hc[ROUNDS / 2], hc[0],
               hc[ROUNDS - 1], ch[ROUNDS / 2], ch[0], ch[ROUNDS - 1], hc[ROUNDS / 2] / cp[ROUNDS / 2]);
    }
    free(src);
    free(dst);
    return 0;
}
