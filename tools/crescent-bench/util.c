/* crescent-bench helpers: latency reservoir, data pattern, pre-faulted buffers. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"
#include "crescent/transfer.h"

void cr_bench_xfer_security(struct cr_xfer_params *p, const char *cluster_key_file,
                            const char *tls_cert, const char *tls_key, const char *tls_ca)
{
    if (cluster_key_file[0]) {
        p->field_mask |= CR_XFER_PARAM_CLUSTER_KEY_FILE;
        p->cluster_key_file = cluster_key_file;
    }
    if (tls_cert[0] || tls_key[0] || tls_ca[0]) {
        p->field_mask |= CR_XFER_PARAM_TLS;
        p->tls_cert = tls_cert;
        p->tls_key = tls_key;
        p->tls_ca = tls_ca;
    }
}

int cr_bench_lat_init(cr_bench_lat_t *l, uint64_t seed)
{
    memset(l, 0, sizeof *l);
    l->samples_ns = malloc(CR_BENCH_RESERVOIR * sizeof *l->samples_ns);
    l->rng = seed | 1;
    return l->samples_ns ? 0 : -1;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

void cr_bench_lat_add(cr_bench_lat_t *l, uint64_t ns)
{
    if (l->n_seen < CR_BENCH_RESERVOIR) {
        l->samples_ns[l->n_seen++] = ns;
        return;
    }
    l->n_seen++;
    uint64_t j = xorshift(&l->rng) % l->n_seen;
    if (j < CR_BENCH_RESERVOIR)
        l->samples_ns[j] = ns;
}

void cr_bench_lat_merge(cr_bench_lat_t *dst, const cr_bench_lat_t *src)
{
    uint64_t n = src->n_seen < CR_BENCH_RESERVOIR ? src->n_seen : CR_BENCH_RESERVOIR;
    for (uint64_t i = 0; i < n; i++)
        cr_bench_lat_add(dst, src->samples_ns[i]);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double cr_bench_lat_pct_us(cr_bench_lat_t *l, double p)
{
    uint64_t n = l->n_seen < CR_BENCH_RESERVOIR ? l->n_seen : CR_BENCH_RESERVOIR;
    if (n == 0)
        return 0;
    qsort(l->samples_ns, n, sizeof *l->samples_ns, cmp_u64);
    uint64_t idx = (uint64_t)(p / 100.0 * (double)(n - 1) + 0.5);
    if (idx >= n)
        idx = n - 1;
    return (double)l->samples_ns[idx] / 1000.0;
}

void cr_bench_lat_free(cr_bench_lat_t *l)
{
    free(l->samples_ns);
    l->samples_ns = NULL;
}

/* The pattern is a stream of 64-bit words w(k) = mix(seed, k); byte off is
 * byte (off % 8) of w(off / 8), little-endian. Cheap enough to verify at
 * several GB/s, and a misplaced block never matches. */
static inline uint64_t word(uint64_t seed, uint64_t k)
{
    uint64_t z = (k + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    return z ^ (z >> 27);
}

void cr_bench_pattern_fill(void *buf, uint64_t off, size_t len, uint64_t seed)
{
    unsigned char *p = buf;
    while (len && (off & 7)) {
        *p++ = (unsigned char)(word(seed, off >> 3) >> ((off & 7) * 8));
        off++;
        len--;
    }
    uint64_t k = off >> 3;
    for (; len >= 8; len -= 8, p += 8, off += 8) {
        uint64_t w = word(seed, k++);
        memcpy(p, &w, 8);
    }
    for (; len; len--, off++)
        *p++ = (unsigned char)(word(seed, off >> 3) >> ((off & 7) * 8));
}

size_t cr_bench_pattern_check(const void *buf, uint64_t off, size_t len, uint64_t seed)
{
    const unsigned char *p = buf;
    size_t i = 0;
    for (; i < len && ((off + i) & 7); i++)
        if (p[i] != (unsigned char)(word(seed, (off + i) >> 3) >> (((off + i) & 7) * 8)))
            return i;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = word(seed, (off + i) >> 3), got;
        memcpy(&got, p + i, 8);
        if (got != w)
            break; /* locate the byte below */
    }
    for (; i < len; i++)
        if (p[i] != (unsigned char)(word(seed, (off + i) >> 3) >> (((off + i) & 7) * 8)))
            return i;
    return (size_t)-1;
}

void *cr_bench_alloc_prefaulted(size_t len)
{
    /* 2 MiB-aligned and advised before the first touch, so the kernel can
     * back it with transparent huge pages as the store client's segments
     * are (MAP_POPULATE before madvise faulted it in as 4 KiB pages, which
     * a cold streaming transfer pays for in TLB misses and, over shm, in
     * pinning every page) */
    size_t huge = 2u << 20, over = len + huge;
    uint8_t *raw = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    if (raw + over > p + len)
        munmap(p + len, (size_t)(raw + over - (p + len)));
    madvise(p, len, MADV_HUGEPAGE); /* best effort */
    for (size_t off = 0; off < len; off += 4096) /* pre-fault every page */
        ((volatile char *)p)[off] = 0;
    return p;
}

void cr_bench_free(void *p, size_t len)
{
    if (p)
        munmap(p, len);
}
