/* Conductor benchmarks (not a test; never fails on timing).
 *
 *   cond_bench sched [--instances 64] [--prompt 131072] [--decisions N]
 *       scheduling decisions/s on one core: 64 prefill instances whose
 *       caches hold prefixes of 128k-token conversations, each decision
 *       matching a 256-block prompt (global cache-aware and cost_fetch).
 *       Reference in the same run: hashing the same 128k tokens (raw XXH3
 *       over the bytes, and the rolling block hash).
 *   cond_bench index [--blocks 10000000]
 *       inserts that many distinct blocks spread over 64 instances and
 *       reports RSS growth (from /proc/self/statm) and bytes per block.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "common/clock.h"
#include "crescent/conductor.h"

/* CPU time of this thread: on the shared machine, wall time counts the
 * other helpers' jobs too; CPU time counts only ours (cache contention
 * still shows). Both are printed. */
static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static long argl(int argc, char **argv, const char *name, long def)
{
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return atol(argv[i + 1]);
    return def;
}

static int bench_sched(int argc, char **argv)
{
    uint32_t ni = (uint32_t)argl(argc, argv, "--instances", 64);
    size_t prompt = (size_t)argl(argc, argv, "--prompt", 131072);
    long ndec = argl(argc, argv, "--decisions", 200000);
    if (ni < 1 || ni > 64 || prompt < 512 || prompt > (1u << 24) || ndec < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    const uint32_t bt = 512;
    size_t nb = prompt / bt;
    /* 512 conversations of prompt tokens; each one's blocks cached on 1-3
     * instances, up to a random depth (a partially cached conversation) */
    enum { NCONV = 512, NQ = 1024 };
    uint32_t *tok = malloc(prompt * sizeof *tok);
    uint64_t *conv = malloc((size_t)NCONV * nb * sizeof *conv);
    uint64_t *q = malloc((size_t)NQ * nb * sizeof *q);
    if (!tok || !conv || !q)
        return 1;
    cr_cond_index_params_t ip = {.field_mask = CR_COND_INDEX_PARAM_MAX_INSTANCES |
                                               CR_COND_INDEX_PARAM_EXPECTED_BLOCKS,
                                 .max_instances = ni,
                                 .expected_blocks = (uint64_t)NCONV * nb * 2};
    cr_cond_index_t *ix;
    if (cr_cond_index_create(&ip, &ix))
        return 1;
    double hash_s = 0, raw_s = 0;
    uint64_t sink = 0;
    for (int c = 0; c < NCONV; c++) {
        for (size_t i = 0; i < prompt; i++)
            tok[i] = (uint32_t)(rnd() % 128256);
        size_t n;
        uint64_t t0 = cpu_ns();
        cr_cond_hash_tokens(tok, prompt, bt, conv + (size_t)c * nb, nb, &n);
        uint64_t t1 = cpu_ns();
        sink ^= XXH3_64bits(tok, prompt * sizeof *tok);
        uint64_t t2 = cpu_ns();
        hash_s += (double)(t1 - t0) / 1e9;
        raw_s += (double)(t2 - t1) / 1e9;
        int copies = 1 + (int)(rnd() % 3);
        for (int k = 0; k < copies; k++) {
            size_t depth = 1 + rnd() % nb;
            cr_cond_index_insert(ix, (uint32_t)(rnd() % ni), CR_COND_TIER_DRAM,
                                 conv + (size_t)c * nb, depth, NULL);
        }
    }
    /* queries: a conversation's prefix (random depth) + new blocks */
    for (int j = 0; j < NQ; j++) {
        const uint64_t *src = conv + (size_t)(rnd() % NCONV) * nb;
        size_t keep = rnd() % (nb + 1);
        for (size_t b = 0; b < nb; b++)
            q[(size_t)j * nb + b] = b < keep ? src[b] : rnd();
    }
    double gb = (double)NCONV * (double)prompt * 4 / 1e9;
    printf("reference (CPU time): raw XXH3 over the tokens: %.2f GB/s; rolling block hash: %.2f GB/s = "
           "%.0f prompts of %zu tokens/s (%.3f of raw) [sink %llx]\n",
           gb / raw_s, gb / hash_s, NCONV / hash_s, prompt, raw_s / hash_s,
           (unsigned long long)(sink & 0xf));
    cr_cond_index_stats_t st;
    cr_cond_index_stats(ix, &st);
    printf("index: %llu blocks, %llu entries over %u instances\n",
           (unsigned long long)st.blocks, (unsigned long long)st.entries, ni);
    /* as the simulator runs them: 8192-token chunks, pipelining on, every
     * estimate through the predictor (which has learned a correction) */
    static const cr_cond_policy_t pols[3] = {CR_COND_POLICY_GLOBAL_CACHE,
                                             CR_COND_POLICY_COST_FETCH, CR_COND_POLICY_LATE};
    for (int pi = 0; pi < 4; pi++) {
        int pick = pi == 3; /* late binding's pick from 64 waiting requests */
        cr_cond_policy_t pol = pols[pi < 3 ? pi : 2];
        cr_cond_sched_params_t sp = {.field_mask = CR_COND_SCHED_PARAM_POLICY |
                                                   CR_COND_SCHED_PARAM_CHUNK_TOKENS |
                                                   CR_COND_SCHED_PARAM_PIPELINE,
                                     .policy = pol,
                                     .chunk_tokens = 8192,
                                     .pipeline_min_prefill_s = 3,
                                     .pipeline_max_stages = 2,
                                     .pipeline_idle_s = 2,
                                     .pipeline_reserve = 3};
        cr_cond_sched_t *s;
        if (cr_cond_sched_create(&sp, ix, ni, 64, &s))
            return 1;
        cr_cond_pred_t *pr = cr_cond_sched_predictor(s);
        cr_cond_model_t md;
        cr_cond_model_default(&md);
        for (int k = 0; k < 1000; k++) {
            uint64_t len = 1000 + (uint64_t)k * 131;
            cr_cond_pred_observe_prefill(
                pr, len, 0, 1, (1.1 + 0.2 * (k % 3)) * cr_cond_cost_prefill_chunked(&md, len, 0, 8192, 1));
        }
        for (uint32_t i = 0; i < ni; i++)
            cr_cond_sched_set_prefill_load(s, i, (double)(rnd() % 1000) / 100.0);
        for (uint32_t i = 0; i < 64; i++)
            cr_cond_sched_set_decode_load(s, i, (uint32_t)(rnd() % 64), rnd() % 1000000, 128);
        enum { NW = 64 };
        cr_cond_request_t wq[NW];
        for (int j = 0; j < NW; j++)
            wq[j] = (cr_cond_request_t){.block_hashes = q + (size_t)(j % NQ) * nb,
                                        .n_blocks = nb,
                                        .input_len = prompt,
                                        .output_len = 512,
                                        .now = 0.01 * j};
        uint64_t matched = 0;
        long n = pick ? ndec / NW : ndec;
        uint64_t t0 = cpu_ns(), w0 = cr__now_ns();
        for (long k = 0; k < n; k++) {
            cr_cond_decision_t d;
            if (pick) {
                size_t which;
                wq[k % NW].block_hashes = q + (size_t)((k * 7) % NQ) * nb;
                cr_cond_sched_pick(s, wq, NW, 1.0, 1ull << (k % ni), &which, &d);
            } else {
                cr_cond_request_t r = {.block_hashes = q + (size_t)(k % NQ) * nb,
                                       .n_blocks = nb,
                                       .input_len = prompt,
                                       .output_len = 512,
                                       .now = 1.0};
                cr_cond_sched_schedule(s, &r, &d);
            }
            matched += d.reused_blocks;
        }
        double el = (double)(cpu_ns() - t0) / 1e9;
        double wall = (double)(cr__now_ns() - w0) / 1e9;
        printf("[cpu %.3f s, wall %.3f s] ", el, wall);
        if (pick)
            printf("%-13s %ld picks among %d waiting in %.3f s = %.0f picks/s (%.2f us each; "
                   "%.0f requests scored/s)\n",
                   "late (pick)", n, NW, el, (double)n / el, el / (double)n * 1e6,
                   (double)n * NW / el);
        else
            printf("%-13s %ld decisions in %.3f s = %.0f decisions/s (%.2f us each; avg reused "
                   "prefix %.0f of %zu blocks)\n",
                   cr_cond_policy_name(pol), n, el, (double)n / el, el / (double)n * 1e6,
                   (double)matched / (double)n, nb);
        cr_cond_sched_destroy(s);
    }
    cr_cond_index_destroy(ix);
    free(tok);
    free(conv);
    free(q);
    return 0;
}

static int bench_index(int argc, char **argv)
{
    long nblocks = argl(argc, argv, "--blocks", 10000000);
    if (nblocks < 1 || nblocks > 400000000) {
        fprintf(stderr, "bad --blocks\n");
        return 2;
    }
    long r0 = rss_kib();
    cr_cond_index_params_t ip = {.field_mask = CR_COND_INDEX_PARAM_EXPECTED_BLOCKS,
                                 .expected_blocks = (uint64_t)nblocks};
    cr_cond_index_t *ix;
    if (cr_cond_index_create(&ip, &ix))
        return 1;
    enum { CHAIN = 256 };
    uint64_t h[CHAIN];
    uint64_t t0 = cr__now_ns();
    long done = 0;
    uint64_t prev = 0;
    while (done < nblocks) {
        size_t n = (size_t)(nblocks - done < CHAIN ? nblocks - done : CHAIN);
        for (size_t i = 0; i < n; i++) {
            prev = cr_cond_hash_chain(prev, (uint64_t)(done + (long)i));
            h[i] = prev;
        }
        int rc = cr_cond_index_insert(ix, (uint32_t)(rnd() % 64), CR_COND_TIER_DRAM, h, n, NULL);
        if (rc) {
            fprintf(stderr, "insert: %d\n", rc);
            return 1;
        }
        done += (long)n;
    }
    double el = (double)(cr__now_ns() - t0) / 1e9;
    long r1 = rss_kib();
    cr_cond_index_stats_t st;
    cr_cond_index_stats(ix, &st);
    /* a lookup pass over the last chain as a sanity check */
    uint32_t pre[64];
    cr_cond_index_match_all(ix, h, CHAIN, pre, 64);
    uint32_t mx = 0;
    for (int i = 0; i < 64; i++)
        mx = pre[i] > mx ? pre[i] : mx;
    printf("index: %llu blocks (%llu entries) inserted in %.2f s (%.2f M blocks/s)\n",
           (unsigned long long)st.blocks, (unsigned long long)st.entries, el,
           (double)nblocks / el / 1e6);
    printf("RSS growth %.1f MiB (%.1f B/block); index heap %.1f MiB (%.1f B/block); last chain "
           "matched %u blocks\n",
           (double)(r1 - r0) / 1024, (double)(r1 - r0) * 1024 / (double)nblocks,
           (double)st.bytes / 1048576, (double)st.bytes / (double)nblocks, mx);
    printf("RSS total %.1f MiB: %s 1 GiB\n", (double)r1 / 1024,
           r1 < 1024 * 1024 ? "under" : "OVER");
    cr_cond_index_destroy(ix);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "sched"))
        return bench_sched(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "index"))
        return bench_index(argc, argv);
    fprintf(stderr, "usage: %s sched|index [options]\n", argv[0]);
    return 2;
}
