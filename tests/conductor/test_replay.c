/* Replays the real conversation trace (path in argv[1]; skipped with exit
 * code 77 if absent) on the cluster of docs/scheduling.md and checks the
 * paper's ordering: average TTFT random > load balancing > local
 * cache-aware > global cache-aware, global 5..30% better than local, random
 * at least 3x global, with FIFO engines as the paper's; then, with 30 %
 * lognormal estimation error, our late binding below global cache-aware
 * with pipelining, whose engines serve shortest-predicted-first (the
 * simulator's default, the stronger baseline for average TTFT). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "conductor/internal.h"
#include "test_check.h"

int main(int argc, char **argv)
{
    if (argc < 2 || access(argv[1], R_OK) != 0) {
        printf("SKIP: trace %s not found (vendored at data/traces/ in the repository)\n",
               argc > 1 ? argv[1] : "(none)");
        return 77;
    }
    cr__cond_trace_t t;
    char err[512];
    int rc = cr__cond_trace_load(argv[1], 512, &t, err, sizeof err);
    if (rc) {
        fprintf(stderr, "FAIL: cannot load %s: %s\n", argv[1], err);
        return 1;
    }
    if (t.n != 12031)
        printf("note: trace has %zu requests (expected 12031)\n", t.n);
    static const cr_cond_policy_t pol[4] = {CR_COND_POLICY_RANDOM, CR_COND_POLICY_LOAD_BALANCE,
                                            CR_COND_POLICY_LOCAL_CACHE,
                                            CR_COND_POLICY_GLOBAL_CACHE};
    double ttft[4];
    for (int i = 0; i < 4; i++) {
        cr__cond_sim_cfg_t c;
        cr__cond_sim_cfg_default(&c);
        c.n_prefill = 8;
        c.n_decode = 8;
        c.cache_blocks = 6000;
        c.baseline_queue = CR__COND_QUEUE_FIFO; /* the paper's engines */
        c.policy = pol[i];
        cr__cond_sim_result_t r;
        if ((rc = cr__cond_sim_run(&t, &c, &r, NULL)) != 0) {
            fprintf(stderr, "FAIL: simulation of %s: %d\n", cr_cond_policy_name(pol[i]), rc);
            return 1;
        }
        if (r.completed != t.n) {
            fprintf(stderr, "FAIL: %s completed %zu of %zu\n", cr_cond_policy_name(pol[i]),
                    r.completed, t.n);
            return 1;
        }
        ttft[i] = r.ttft.mean;
        printf("%-13s avg TTFT %7.3f s  p99 %7.3f s  hit local %.3f remote %.3f\n",
               cr_cond_policy_name(pol[i]), r.ttft.mean, r.ttft.p99, r.hit_local, r.hit_remote);
    }
    EXPECT(ttft[0] > ttft[1] && ttft[1] > ttft[2] && ttft[2] > ttft[3],
           "expected random > lb > local > global, got %.3f %.3f %.3f %.3f", ttft[0], ttft[1],
           ttft[2], ttft[3]);
    double gain = 1 - ttft[3] / ttft[2];
    EXPECT(gain >= 0.05 && gain <= 0.30, "global vs local gain %.1f%%, expected 5..30%%",
           100 * gain);
    EXPECT(ttft[0] >= 3 * ttft[3], "random %.3f not >= 3x global %.3f", ttft[0], ttft[3]);
    double errt[2];
    for (int i = 0; i < 2; i++) {
        cr__cond_sim_cfg_t c;
        cr__cond_sim_cfg_default(&c);
        c.cache_blocks = 6000;
        c.err_sigma = 0.3;
        c.policy = i ? CR_COND_POLICY_LATE : CR_COND_POLICY_GLOBAL_CACHE;
        cr__cond_sim_result_t r;
        if ((rc = cr__cond_sim_run(&t, &c, &r, NULL)) != 0) {
            fprintf(stderr, "FAIL: simulation with error: %d\n", rc);
            return 1;
        }
        errt[i] = r.ttft.mean;
    }
    EXPECT(errt[1] < errt[0], "with 30%% error, late %.3f not below global %.3f", errt[1], errt[0]);
    cr__cond_trace_free(&t);
    printf("global vs local: %.1f%% lower; random / global = %.2fx; with 30%% error late vs "
           "global: %+.1f%%\n",
           100 * gain, ttft[0] / ttft[3], 100 * (errt[1] / errt[0] - 1));
    return test_failures ? 1 : 0;
}
