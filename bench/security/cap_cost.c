/* The CPU cost of one per-object capability (docs/security.md), next to a
 * reference measured in the same run: copying the 4 KiB and 1 MiB values a
 * grant accompanies. The master mints one grant per shard of each replica
 * list it returns; a node verifies one HMAC per grant per connection (then
 * a cache hit: an 80-byte compare). Not built by CMake (a benchmark, not a
 * test); build and run:
 *
 *   gcc -O2 -Iinclude -Isrc bench/security/cap_cost.c build/libcrescent.a -lcrypto \
 *       -o /tmp/cap_cost && /tmp/cap_cost
 *
 * Prints ns per operation (median of 5 rounds). Never fails on timing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/auth/cap.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define ROUNDS 5
static volatile uint64_t sink;

int main(void)
{
    static const uint8_t key[CR__CAP_KEY_LEN] = "cap-cost-benchmark-key-32-bytes";
    uint8_t cap[CR__CAP_LEN];
    size_t big = 1u << 20;
    uint8_t *src = malloc(big), *dst = malloc(big);
    if (!src || !dst)
        return 1;
    memset(src, 1, big);
    memset(dst, 2, big);
    double r[4][ROUNDS];
    for (int k = 0; k < ROUNDS; k++) {
        int n = 100000;
        uint64_t t = now_ns();
        for (int i = 0; i < n; i++)
            sink += (uint64_t)cr__cap_mint(key, CR__CAP_READ, 7, 1, 4096u * (uint64_t)i, 4096,
                                           1700000000000ull, cap);
        r[0][k] = (double)(now_ns() - t) / n;
        cr__cap_t c;
        t = now_ns();
        for (int i = 0; i < n; i++)
            sink += (uint64_t)cr__cap_verify(key, 7, cap, sizeof cap, 1699999999000ull, &c);
        r[1][k] = (double)(now_ns() - t) / n;
        t = now_ns();
        for (int i = 0; i < n; i++) {
            memcpy(dst + (size_t)(i % 256) * 4096, src + (size_t)(i % 255) * 4096, 4096);
            sink += dst[(size_t)(i % 256) * 4096];
        }
        r[2][k] = (double)(now_ns() - t) / n;
        int m = 2000;
        t = now_ns();
        for (int i = 0; i < m; i++) {
            memcpy(dst, src, big);
            sink += dst[(size_t)i % big];
        }
        r[3][k] = (double)(now_ns() - t) / m;
    }
    const char *names[4] = {"mint (master, per shard)", "verify (node, per grant+connection)",
                            "memcpy 4 KiB (reference)", "memcpy 1 MiB (reference)"};
    for (int j = 0; j < 4; j++) {
        qsort(r[j], ROUNDS, sizeof r[j][0], cmp);
        printf("%-40s %10.0f ns\n", names[j], r[j][ROUNDS / 2]);
    }
    free(src);
    free(dst);
    return 0;
}
