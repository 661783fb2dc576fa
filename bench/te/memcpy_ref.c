/* Reference for the shm benchmark: a plain single-thread memcpy of --block
 * bytes at a time, cycling over --span bytes of pre-faulted source and
 * destination (so, like the benchmark, it is not served from cache).
 *
 *   memcpy_ref [--block BYTES] [--span BYTES] [--seconds S]
 * Prints: "RESULT ref=memcpy block=... gbps=..." (1e9 bytes/s). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *alloc(size_t n)
{
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    madvise(p, n, MADV_HUGEPAGE);
    for (size_t i = 0; i < n; i += 4096)
        p[i] = (char)i; /* touch every page */
    return p;
}

int main(int argc, char **argv)
{
    size_t block = 16u << 20, span = 512u << 20;
    double secs = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--block"))
            block = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--span"))
            span = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--seconds"))
            secs = atof(argv[i + 1]);
    }
    if (block == 0 || span < block) {
        fprintf(stderr, "memcpy_ref: need 0 < block <= span\n");
        return 2;
    }
    char *src = alloc(span), *dst = alloc(span);
    if (!src || !dst) {
        fprintf(stderr, "memcpy_ref: out of memory\n");
        return 1;
    }
    memset(src, 0x5a, span);
    size_t nblocks = span / block, k = 0;
    uint64_t bytes = 0;
    double t0 = now(), t = t0;
    while (t - t0 < secs) {
        for (int r = 0; r < 8; r++, k++) {
            size_t off = (k % nblocks) * block;
            memcpy(dst + off, src + off, block);
            bytes += block;
        }
        __asm__ volatile("" ::: "memory");
        t = now();
    }
    printf("RESULT ref=memcpy block=%zu seconds=%.3f bytes=%llu gbps=%.3f\n", block, t - t0,
           (unsigned long long)bytes, (double)bytes / (t - t0) / 1e9);
    return dst[block / 2] == 0x5a ? 0 : 1;
}
