/* Helpers shared by the transfer-core tests (header-only). */
#ifndef CR_TESTS_XFER_TEST_UTIL_H
#define CR_TESTS_XFER_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "crescent/transfer.h"

static inline int xt_sanitized(void)
{
    const char *s = getenv("CRESCENT_SANITIZED");
    return s && *s && strcmp(s, "0");
}

/* deterministic byte pattern: depends on the position and a seed */
static inline uint8_t xt_byte(uint64_t i, uint32_t seed)
{
    uint64_t x = (i + seed) * 0x9E3779B97F4A7C15ull;
    return (uint8_t)((x >> 29) ^ (i >> 12) ^ seed);
}

static inline void xt_fill(void *buf, size_t len, uint64_t base, uint32_t seed)
{
    uint8_t *p = buf;
    for (size_t i = 0; i < len; i++)
        p[i] = xt_byte(base + i, seed);
}

/* Returns -1 if equal, else the first differing offset (and prints it). */
static inline long xt_check(const void *buf, size_t len, uint64_t base, uint32_t seed,
                            const char *what)
{
    const uint8_t *p = buf;
    for (size_t i = 0; i < len; i++)
        if (p[i] != xt_byte(base + i, seed)) {
            fprintf(stderr, "%s: byte %zu of %zu: expected 0x%02x got 0x%02x\n", what, i, len,
                    xt_byte(base + i, seed), p[i]);
            return (long)i;
        }
    return -1;
}

/* page-aligned, pre-faulted zeroed memory */
static inline void *xt_alloc(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static inline void xt_free(void *p, size_t len)
{
    if (p)
        munmap(p, len);
}

static inline uint64_t xt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* An engine on loopback with p2p metadata and tcp only (unless transports). */
static inline int xt_engine(cr_xfer_engine_t **e, const char *nics, const char *transports,
                            unsigned timeout_ms)
{
    cr_xfer_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = CR_XFER_PARAM_TRANSPORTS | CR_XFER_PARAM_NICS | CR_XFER_PARAM_TIMEOUT_MS;
    p.transports = transports ? transports : "tcp";
    p.nics = nics ? nics : "127.0.0.1";
    p.timeout_ms = timeout_ms ? timeout_ms : 10000;
    return cr_xfer_engine_create(&p, e);
}

#endif
