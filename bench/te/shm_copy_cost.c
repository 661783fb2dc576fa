/* What one 64 KiB block costs the shm transport's two copy paths, out of
 * cache (a 512 MiB working set walked block by block, one thread), next to
 * each other in the same run:
 *
 *   process_vm    process_vm_readv / _writev against a child process's
 *                 anonymous memory (the process_vm path), without and with
 *                 the store's crc32c of the local bytes afterwards/before;
 *   mapped        the child's memory is a shared memfd mapped here: the
 *                 streamed copy (cr__copy_stream) and the copy that folds
 *                 the crc32c into the same pass (cr__crc32c_copy_raw).
 *
 * Not built by CMake (a benchmark, not a test); build and run:
 *
 *   gcc -O2 -Iinclude -Isrc bench/te/shm_copy_cost.c src/common/crc32c.c \
 *       src/common/copy.c -lpthread -o /tmp/shm_copy_cost && /tmp/shm_copy_cost
 *
 * An argument sets the block size in KiB (default 64). Prints us per block
 * (median of 5 passes, min-max). Never fails on timing. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/copy.h"
#include "common/crc32c.h"

#define TOTAL (512ul << 20)
#define PASSES 5

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { PVM_R, PVM_R_CRC, PVM_W, PVM_W_CRC, MAP_R, MAP_R_CRC, MAP_W, MAP_W_CRC, N_MODES };
static const char *names[N_MODES] = {
    "process_vm READ",         "process_vm READ + crc32c",         "process_vm WRITE",
    "crc32c + process_vm WRITE", "mapped READ (streamed copy)",    "mapped READ + crc32c (one pass)",
    "mapped WRITE (streamed copy)", "mapped WRITE + crc32c (one pass)"};

int main(int argc, char **argv)
{
    size_t BLOCK = (argc > 1 ? strtoul(argv[1], NULL, 0) : 64) << 10;
    if (!BLOCK || TOTAL % BLOCK)
        return fprintf(stderr, "usage: shm_copy_cost [block KiB, a power of two]\n"), 2;
    unsigned char *anon = mmap(NULL, TOTAL, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int fd = memfd_create("shm-copy-cost", 0);
    if (anon == MAP_FAILED || fd < 0 || ftruncate(fd, (off_t)TOTAL) != 0)
        return perror("setup"), 1;
    unsigned char *shared = mmap(NULL, TOTAL, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (shared == MAP_FAILED)
        return perror("mmap"), 1;
    madvise(anon, TOTAL, MADV_HUGEPAGE); /* as registered memory gets */
    for (size_t i = 0; i < TOTAL; i += 8) {
        *(uint64_t *)(anon + i) = i * 0x9e3779b97f4a7c15ull;
        *(uint64_t *)(shared + i) = i * 0x9e3779b97f4a7c15ull;
    }
    pid_t child = fork(); /* owns anon (its copy) for process_vm */
    if (child == 0) {
        pause();
        _exit(0);
    }
    /* the peer's shared memory as an initiator maps it: a second mapping */
    unsigned char *peer = mmap(NULL, TOTAL, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                               fd, 0);
    unsigned char *local = mmap(NULL, TOTAL, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (peer == MAP_FAILED || local == MAP_FAILED)
        return perror("mmap"), 1;
    madvise(local, TOTAL, MADV_HUGEPAGE);
    memset(local, 1, TOTAL);
    size_t n = TOTAL / BLOCK;
    volatile uint32_t sink = 0;
    double t[N_MODES][PASSES];
    for (int p = 0; p < PASSES; p++)
        for (int m = 0; m < N_MODES; m++) { /* interleaved: every mode once per pass */
            double t0 = now();
            for (size_t i = 0; i < n; i++) {
                unsigned char *l = local + i * BLOCK, *r = peer + i * BLOCK;
                struct iovec li = {l, BLOCK}, ri = {anon + i * BLOCK, BLOCK};
                switch (m) {
                case PVM_R_CRC:
                case PVM_R:
                    if (process_vm_readv(child, &li, 1, &ri, 1, 0) != (ssize_t)BLOCK)
                        return perror("process_vm_readv"), 1;
                    if (m == PVM_R_CRC)
                        sink ^= cr__crc32c_raw(0, l, BLOCK);
                    break;
                case PVM_W_CRC:
                case PVM_W:
                    if (m == PVM_W_CRC)
                        sink ^= cr__crc32c_raw(0, l, BLOCK);
                    if (process_vm_writev(child, &li, 1, &ri, 1, 0) != (ssize_t)BLOCK)
                        return perror("process_vm_writev"), 1;
                    break;
                case MAP_R: cr__copy_stream(l, r, BLOCK); break;
                case MAP_R_CRC: sink ^= cr__crc32c_copy_raw(0, l, r, BLOCK); break;
                case MAP_W: cr__copy_stream(r, l, BLOCK); break;
                case MAP_W_CRC: sink ^= cr__crc32c_copy_raw(0, r, l, BLOCK); break;
                }
            }
            t[m][p] = (now() - t0) / (double)n * 1e6;
        }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    printf("| path, %zu KiB blocks over 512 MiB | us/block median (min-max) | GB/s |\n|---|---|---|\n", BLOCK >> 10);
    for (int m = 0; m < N_MODES; m++) {
        qsort(t[m], PASSES, sizeof(double), cmp);
        printf("| %s | %.2f (%.2f-%.2f) | %.2f |\n", names[m], t[m][PASSES / 2], t[m][0],
               t[m][PASSES - 1], (double)BLOCK / t[m][PASSES / 2] / 1e3);
    }
    return (int)(sink & 0); /* keeps the hashes */
}
