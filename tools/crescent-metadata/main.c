/* crescent-metadata: the HTTP metadata service (Mooncake's
 * mooncake_http_metadata_server contract): GET/PUT/DELETE <path>?key=K.
 *
 *   crescent-metadata --port 8080 [--host 127.0.0.1] [--path /metadata]
 *
 * Prints "crescent-metadata: serving http://<host>:<port><path>" on stdout
 * once listening (scripts wait for that line) and runs until SIGINT/SIGTERM,
 * then exits 0. Values are kept in memory only. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth/auth_opts.h"
#include "common/config.h"
#include "common/net.h"
#include "crescent/common.h"
#include "transfer/metadata/metadata.h"

typedef struct meta_cfg {
    int64_t port;
    char host[CR__CFG_STR_MAX];
    char path[CR__CFG_STR_MAX];
    uint64_t max_bytes;
    uint64_t writer_quota;
    CR__AUTH_CFG_FIELDS;
} meta_cfg_t;

#define OPT(n, d, h, t) {#n, d, h, t, offsetof(meta_cfg_t, n)}
static const cr__cfg_opt_t opts[] = {
    OPT(port, "8080", "TCP port to listen on (0 = ephemeral)", CR__CFG_INT),
    OPT(host, "127.0.0.1", "address to bind (0.0.0.0 = all)", CR__CFG_STR),
    OPT(path, "/metadata", "URL path of the key/value endpoint", CR__CFG_STR),
    OPT(max_bytes, "1GB", "bound on the total size of stored keys and values", CR__CFG_SIZE),
    OPT(writer_quota, "256MB", "bound on the bytes one source address may store (0 = none)",
        CR__CFG_SIZE),
    CR__AUTH_CFG_OPTS(meta_cfg_t),
};
#define N_OPTS (sizeof opts / sizeof opts[0])

int main(int argc, char **argv)
{
    meta_cfg_t cfg;
    char err[256] = "";
    int rc = cr__cfg_parse(opts, N_OPTS, &cfg, argc, argv, 1, "CRESCENT_METADATA_", NULL, 0,
                           NULL, err, sizeof err);
    if (rc == 1) {
        cr__cfg_usage(stdout, "crescent-metadata",
                      "HTTP metadata service (GET/PUT/DELETE <path>?key=K)", opts, N_OPTS);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "crescent-metadata: %s\n", err);
        cr__cfg_usage(stderr, "crescent-metadata",
                      "HTTP metadata service (GET/PUT/DELETE <path>?key=K)", opts, N_OPTS);
        return 2;
    }
    cr__net_raise_nofile("crescent-metadata");
    if (cfg.port < 0 || cfg.port > 65535 || cfg.path[0] != '/' || cfg.max_bytes == 0) {
        fprintf(stderr, "crescent-metadata: need 0 <= --port <= 65535, --path starting with '/', "
                        "--max_bytes > 0\n");
        return 2;
    }
    /* block the stop signals before any thread starts; wait for them below */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    cr__auth_t *auth = NULL;
    if ((rc = cr__auth_load(&CR__AUTH_CFG_OF(cfg), &auth))) {
        fprintf(stderr, "crescent-metadata: security configuration unusable: %s\n",
                cr_strerror(rc));
        return 2;
    }
    cr__tls_t *tls = NULL;
    if ((rc = CR__TLS_LOAD_OF(cfg, &tls))) {
        fprintf(stderr, "crescent-metadata: TLS configuration unusable: %s\n", cr_strerror(rc));
        cr__auth_free(auth);
        return 2;
    }
    cr__meta_server_t *srv;
    rc = cr__meta_server_start_tls(cfg.host, (uint16_t)cfg.port, cfg.path, cfg.max_bytes,
                                   cfg.writer_quota, auth, tls, &srv);
    if (rc) {
        cr__auth_free(auth);
        cr__tls_free(tls);
        fprintf(stderr, "crescent-metadata: cannot listen on %s:%lld: %s\n", cfg.host,
                (long long)cfg.port, cr_strerror(rc));
        return 1;
    }
    fprintf(stderr, "crescent-metadata: %s\n", cr__auth_mode_line(auth != NULL, tls != NULL));
    int v6 = strchr(cfg.host, ':') != NULL;
    printf("crescent-metadata: serving %s://%s%s%s:%u%s\n", tls ? "https" : "http", v6 ? "[" : "", cfg.host,
           v6 ? "]" : "", cr__meta_server_port(srv), cfg.path);
    fflush(stdout);
    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    fprintf(stderr, "crescent-metadata: signal %d, stopping\n", sig);
    cr__meta_server_stop(srv);
    cr__auth_free(auth);
    cr__tls_free(tls);
    return 0;
}
