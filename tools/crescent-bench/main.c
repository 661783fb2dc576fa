/* crescent-bench: benchmarks for crescent's components (the counterpart of
 * Mooncake's transfer_engine_bench).
 *
 *   crescent-bench [te] --mode target|initiator ...   Transfer Engine
 *   crescent-bench store ...                          Store (when built in)
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

struct subcmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

int main(int argc, char **argv)
{
    const struct subcmd cmds[] = {
        {"te", cr_bench_te_main, "Transfer Engine throughput/latency (default)"},
        {"store", cr_bench_store_main, "Store put/get throughput/latency"},
        {"tier", cr_bench_tier_main, "Store disk tier: gets served from disk, offload rate"},
    };
    const size_t n = sizeof cmds / sizeof cmds[0];
    if (argc >= 2 && argv[1][0] != '-') {
        for (size_t i = 0; i < n; i++) {
            if (strcmp(argv[1], cmds[i].name) != 0)
                continue;
            if (!cmds[i].fn) {
                fprintf(stderr, "crescent-bench: subcommand '%s' is not built in\n", argv[1]);
                return 2;
            }
            return cmds[i].fn(argc - 1, argv + 1);
        }
        fprintf(stderr, "crescent-bench: unknown subcommand '%s'; available:\n", argv[1]);
        for (size_t i = 0; i < n; i++)
            if (cmds[i].fn)
                fprintf(stderr, "  %-6s %s\n", cmds[i].name, cmds[i].help);
        return 2;
    }
    /* no subcommand: the TE benchmark, argv[0] stays the program name */
    return cr_bench_te_main(argc, argv);
}
