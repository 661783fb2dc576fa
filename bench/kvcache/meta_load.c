/* A paced metadata-only load on a crescent master: every PERIOD_US
 * microseconds one cr_store_batch_is_exist of NKEYS keys (all misses), for
 * SECS seconds. Run beside the raw TE benchmark to see what a store's
 * message rate to its master costs the copies on the same host
 * (docs/benchmarks.md, issue 16, session of 2026-11-30 22:09 UTC: 190 us
 * and 128 keys is two messages per 256 x 16 KiB batch, as a save sends).
 *
 *   cc -O2 -Iinclude -o /tmp/meta_load bench/kvcache/meta_load.c -Lbuild -lcrescent \
 *       -Wl,-rpath,$PWD/build && /tmp/meta_load 127.0.0.1:PORT 190 128 2.5
 *
 * Prints the calls made, the failed ones and the achieved rate. */
#define _GNU_SOURCE
#include <crescent/store.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long period = argc == 5 ? atol(argv[2]) : 0;
    int n = argc == 5 ? atoi(argv[3]) : 0;
    double secs = argc == 5 ? atof(argv[4]) : 0;
    if (period < 1 || n < 1 || n > 1024 || !(secs > 0)) {
        fprintf(stderr, "usage: meta_load MASTER PERIOD_US NKEYS(1..1024) SECS\n");
        return 2;
    }
    cr_store_params_t p = {0};
    p.field_mask = CR_STORE_PARAM_MASTER_ADDR | CR_STORE_PARAM_PROTOCOL;
    p.master_addr = argv[1];
    p.protocol = "tcp,shm";
    cr_store_t *s;
    int rc = cr_store_create(&p, &s);
    if (rc) {
        fprintf(stderr, "meta_load: cr_store_create: %d\n", rc);
        return 1;
    }
    static char names[1024][48];
    const char *keys[1024];
    int res[1024];
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "meta-load-%08d-absent-key", i);
        keys[i] = names[i];
    }
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    double t0 = now_s();
    long calls = 0, errs = 0;
    while (now_s() - t0 < secs) {
        if (cr_store_batch_is_exist(s, keys, (size_t)n, res))
            errs++;
        calls++;
        next.tv_nsec += period * 1000;
        while (next.tv_nsec >= 1000000000) {
            next.tv_nsec -= 1000000000;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    printf("calls=%ld errors=%ld rate=%.0f/s\n", calls, errs, (double)calls / (now_s() - t0));
    cr_store_destroy(s);
    return errs ? 1 : 0;
}
