/* crescent-conductor: the conductor's HTTP service (Mooncake conductor
 * indexer API + /schedule) fed by vLLM/SGLang KV events over ZMQ.
 * Prints "crescent-conductor listening on HOST:PORT" to stdout once ready
 * (and writes PORT to --port_file if given); stops on SIGINT/SIGTERM. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/file.h"
#include "common/net.h"
#include "conductor/service/service.h"
#include "crescent/common.h"

int main(int argc, char **argv)
{
    cr__csvc_config_t cfg;
    char err[512];
    int rc = cr__cfg_parse(cr__csvc_cfg_table, cr__csvc_cfg_table_len, &cfg, argc, argv, 1,
                           "CRESCENT_CONDUCTOR_", NULL, 0, NULL, err, sizeof err);
    if (rc == 1) {
        cr__cfg_usage(stdout, "crescent-conductor",
                      "KV-cache-aware conductor: Mooncake indexer API (/register, /unregister,\n"
                      "/query, /query_by_hash), /schedule, /load, /health, /metrics, /instances;\n"
                      "KV events from vLLM/SGLang publishers over ZMQ (msgpack).\n"
                      "Environment: CRESCENT_CONDUCTOR_<OPTION>; CRESCENT_LOG=info for logs.",
                      cr__csvc_cfg_table, cr__csvc_cfg_table_len);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "crescent-conductor: %s\n", err);
        return 2;
    }
    cr__net_raise_nofile("crescent-conductor");
    /* block the signals before any thread starts so sigwait() gets them */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    cr__csvc_t *svc;
    if ((rc = cr__csvc_create(&cfg, &svc, err, sizeof err))) {
        fprintf(stderr, "crescent-conductor: %s\n", err);
        return 2;
    }
    if ((rc = cr__csvc_listen(svc))) {
        fprintf(stderr, "crescent-conductor: cannot listen on %s:%lld: %s\n", cfg.host,
                (long long)cfg.port, cr_strerror(rc));
        cr__csvc_destroy(svc);
        return 1;
    }
    unsigned port = cr__csvc_port(svc);
    char pline[16];
    int pn = snprintf(pline, sizeof pline, "%u\n", port);
    if (cfg.port_file[0] && (rc = cr__file_write_atomic(cfg.port_file, pline, (size_t)pn, 0, 0644))) {
        fprintf(stderr, "crescent-conductor: cannot write %s: %s\n", cfg.port_file,
                cr_strerror(rc));
        cr__csvc_destroy(svc);
        return 1;
    }
    fprintf(stderr, "crescent-conductor: %s\n", cr__csvc_security(svc));
    printf("crescent-conductor listening on %s:%u\n", cfg.host, port);
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "crescent-conductor: signal %d, stopping\n", sig);
    cr__csvc_destroy(svc);
    return 0;
}
