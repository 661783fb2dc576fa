/* Clock helpers (header-only): monotonic for durations, wall clock for
 * expiry times that cross processes (capabilities, task deadlines). */
#ifndef CR_COMMON_CLOCK_H
#define CR_COMMON_CLOCK_H
#include <stdint.h>
#include <time.h>

static inline uint64_t cr__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static inline uint64_t cr__now_ms(void) { return cr__now_ns() / 1000000ull; }
/* milliseconds since the Unix epoch (CLOCK_REALTIME) */
static inline uint64_t cr__unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}
#endif
