/* Master metadata footprint: inserts N small objects (64-byte values, keys
 * like "kvcache-0000000042", 1 replica) into the master state through
 * PutStart/PutEnd and reads the process RSS before and after. Prints bytes
 * per object and the projection to 10 million objects; fails if that
 * projection reaches 2 GiB (not checked under sanitizers, whose shadow
 * memory dominates RSS). Also checks every object is found afterwards.
 * Usage: test_store_master_memory [N]  (default 1000000; 200000 sanitized) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "store/master/master.h"

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv)
{
    int sanitized = getenv("CRESCENT_SANITIZED") != NULL;
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : (sanitized ? 200000 : 1000000);
    if (n == 0)
        n = 1;
    cr__master_cfg_t cfg;
    cr__master_cfg_default(&cfg);
    cr__master_t *m;
    if (cr__master_create(&cfg, &m)) {
        fprintf(stderr, "create failed\n");
        return 1;
    }
    /* one big segment: 64-byte values need n granules; keep under the
     * eviction watermark */
    uint64_t seg = (n * 64) * 2 + (1u << 20);
    if (cr__master_mount(m, (cr__rpc_client_id_t){1, 1}, "mem-node", 0x100000000ull, seg, 0)) {
        fprintf(stderr, "mount failed\n");
        return 1;
    }
    uint64_t rss0 = rss_bytes();
    uint64_t t0 = cr__now_ms();
    cr__rpc_repl_cfg_t rc1 = {.replica_num = 1};
    char key[64];
    for (uint64_t i = 0; i < n; i++) {
        int kl = snprintf(key, sizeof key, "kvcache-%010llu", (unsigned long long)i);
        cr__rpc_msg_t msg = {0};
        cr__rpc_item_t it = {0};
        int rc = cr__master_put_start(m, key, (size_t)kl, 64, &rc1, 1, &msg, &it);
        if (rc == 0)
            rc = cr__master_put_end(m, key, (size_t)kl, it.version, 1);
        cr__rpc_msg_free(&msg);
        if (rc) {
            fprintf(stderr, "put %llu failed: %d\n", (unsigned long long)i, rc);
            return 1;
        }
    }
    uint64_t t1 = cr__now_ms();
    uint64_t rss1 = rss_bytes();
    /* every key is there with its size */
    uint64_t missing = 0;
    for (uint64_t i = 0; i < n; i += (n / 100000) + 1) {
        int kl = snprintf(key, sizeof key, "kvcache-%010llu", (unsigned long long)i);
        uint64_t sz = 0;
        if (cr__master_get_size(m, key, (size_t)kl, 2, &sz) || sz != 64)
            missing++;
    }
    cr__master_stats_t st;
    cr__master_stats(m, &st);
    double per = (double)(rss1 - rss0) / (double)n;
    double proj = per * 10e6 + (double)rss0;
    printf("RESULT master_memory objects=%llu rss_before=%llu rss_after=%llu bytes_per_object=%.1f "
           "projected_10M_rss_mib=%.0f insert_rate_per_s=%.0f keys=%llu\n",
           (unsigned long long)n, (unsigned long long)rss0, (unsigned long long)rss1, per,
           proj / 1048576.0, (double)n * 1000.0 / (double)(t1 - t0 + 1),
           (unsigned long long)st.keys);
    int fail = 0;
    if (missing || st.keys != n) {
        fprintf(stderr, "FAIL: %llu sampled keys missing, keys gauge %llu (expected %llu)\n",
                (unsigned long long)missing, (unsigned long long)st.keys,
                (unsigned long long)n);
        fail = 1;
    }
    if (!sanitized && proj >= 2.0 * 1024 * 1024 * 1024) {
        fprintf(stderr, "FAIL: projected RSS for 10M objects %.0f MiB >= 2048 MiB\n",
                proj / 1048576.0);
        fail = 1;
    }
    cr__master_destroy(m);
    return fail;
}
