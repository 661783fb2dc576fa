/* crescent-bench internals shared by its subcommands.
 *
 * Subcommands: main.c dispatches on argv[1]. "te" (also the default when
 * argv[1] is a flag) is the Transfer Engine benchmark in te_bench.c. Other
 * subcommands are weak symbols: a file that defines e.g.
 *     int cr_bench_store_main(int argc, char **argv)
 * (argv[0] = "store") enables "crescent-bench store ..." without touching
 * main.c beyond its table. */
#ifndef CR_TOOLS_BENCH_H
#define CR_TOOLS_BENCH_H

#include <stddef.h>
#include <stdint.h>

int cr_bench_te_main(int argc, char **argv);
int cr_bench_store_main(int argc, char **argv) __attribute__((weak));
int cr_bench_tier_main(int argc, char **argv) __attribute__((weak));

/* ---- latency samples: bounded reservoir, exact until it fills ---------- */

#define CR_BENCH_RESERVOIR (1u << 20)

typedef struct cr_bench_lat {
    uint64_t *samples_ns; /* CR_BENCH_RESERVOIR entries */
    uint64_t n_seen;      /* samples offered */
    uint64_t rng;         /* xorshift state for reservoir replacement */
} cr_bench_lat_t;

int cr_bench_lat_init(cr_bench_lat_t *l, uint64_t seed);
void cr_bench_lat_add(cr_bench_lat_t *l, uint64_t ns);
/* Merges src into dst (dst keeps at most CR_BENCH_RESERVOIR samples). */
void cr_bench_lat_merge(cr_bench_lat_t *dst, const cr_bench_lat_t *src);
/* Percentile p in [0,100] in microseconds (sorts in place); 0 when empty. */
double cr_bench_lat_pct_us(cr_bench_lat_t *l, double p);
void cr_bench_lat_free(cr_bench_lat_t *l);

/* ---- data pattern: a function of (seed, byte offset) ------------------- */

/* Fills len bytes as the pattern bytes [off, off+len) of seed. */
void cr_bench_pattern_fill(void *buf, uint64_t off, size_t len, uint64_t seed);
/* Returns the index of the first byte that differs from the pattern, or
 * (size_t)-1 when buf matches. */
size_t cr_bench_pattern_check(const void *buf, uint64_t off, size_t len, uint64_t seed);

/* Allocates len bytes (mmap, 2 MiB-aligned for THP where possible) and
 * touches every page so no fault happens while timing. NULL on failure. */
void *cr_bench_alloc_prefaulted(size_t len);
void cr_bench_free(void *p, size_t len);

/* The security options (--cluster_key_file, --tls_*) onto TE engine
 * parameters: the fields set when given, empty strings left off. */
struct cr_xfer_params;
void cr_bench_xfer_security(struct cr_xfer_params *p, const char *cluster_key_file,
                            const char *tls_cert, const char *tls_key, const char *tls_ca);

#endif
