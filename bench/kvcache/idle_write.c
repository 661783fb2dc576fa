/* What a first write into memory left idle for a while costs on this host,
 * against a write into memory written a moment ago (docs/benchmarks.md,
 * issue 16, session of 2026-11-30 05:14 UTC). The store's saves write into
 * node memory that may have been idle since the node started; the raw TE
 * reference of bench/kvcache rewrites one buffer every repetition.
 *
 *   cc -O2 -o /tmp/idle_write bench/kvcache/idle_write.c && /tmp/idle_write 40
 *
 * Maps 6 x 128 MiB of shared memory (a memfd, as the nodes' segments),
 * writes all of it (three regions one byte per page, three in full), sleeps
 * IDLE seconds, then times one memcpy of 128 MiB into each region, and
 * again into each (now just written). Prints GB/s (1e9 bytes/s). An
 * optional second argument 1 mlock()s the mapping first. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define REGION (128ull << 20)
#define NREG 6

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double write_gbps(char *dst, const char *src)
{
    double t = now_s();
    memcpy(dst, src, REGION);
    return (double)REGION / (now_s() - t) / 1e9;
}

int main(int argc, char **argv)
{
    int idle = argc > 1 ? atoi(argv[1]) : 40;
    int lock = argc > 2 && atoi(argv[2]) == 1;
    size_t len = NREG * REGION;
    int fd = memfd_create("idle_write", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        perror("memfd");
        return 1;
    }
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    char *src = malloc(REGION);
    if (p == MAP_FAILED || !src) {
        perror("mmap");
        return 1;
    }
    madvise(p, len, MADV_HUGEPAGE);
    if (lock && mlock(p, len) != 0)
        perror("mlock (continuing without)");
    for (size_t o = 0; o < 3 * REGION; o += 4096) /* touched, as a node's prefault does */
        p[o] = 0;
    for (size_t o = 3 * REGION; o < len; o += 8) /* written in full */
        *(uint64_t *)(p + o) = o * 0x9E3779B97F4A7C15ull;
    for (size_t o = 0; o < REGION; o++)
        src[o] = (char)(o * 7);
    printf("idle %d s%s\n", idle, lock ? ", mlocked" : "");
    fflush(stdout);
    sleep((unsigned)idle);
    for (int r = 0; r < NREG; r++)
        printf("first write after idle, region %d (%s): %.2f GB/s\n", r,
               r < 3 ? "touched per page" : "written in full", write_gbps(p + r * REGION, src));
    for (int r = 0; r < NREG; r++)
        printf("second write, region %d: %.2f GB/s\n", r, write_gbps(p + r * REGION, src));
    return 0;
}
