/* The security options every daemon and tool takes, declared once: put
 * CR__AUTH_CFG_FIELDS in the tool's config struct and
 * CR__AUTH_CFG_OPTS(struct type) in its option table (common/config.h);
 * then cr__auth_load(&CR__AUTH_CFG_OF(cfg), &auth) and
 * CR__TLS_LOAD_OF(cfg, &tls). */
#ifndef CR_COMMON_AUTH_OPTS_H
#define CR_COMMON_AUTH_OPTS_H

#include <stddef.h>

#include "common/auth/auth.h"
#include "common/config.h"
#include "common/tls/tls.h"

#define CR__AUTH_CFG_FIELDS                                                              \
    char cluster_key_file[CR__CFG_STR_MAX];                                             \
    char tls_cert[CR__CFG_STR_MAX];                                                     \
    char tls_key[CR__CFG_STR_MAX];                                                      \
    char tls_ca[CR__CFG_STR_MAX]

#define CR__AUTH_CFG_OPTS(T)                                                             \
    {"cluster_key_file", "",                                                             \
     "security on: file with the cluster key (chmod 600; e.g. openssl rand -hex 32); "  \
     "default $" CR__AUTH_ENV_KEY_FILE " (docs/security.md)",                          \
     CR__CFG_STR, offsetof(T, cluster_key_file)},                                        \
        {"tls_cert", "",                                                                 \
         "TLS on (with --tls_key, --tls_ca): this member's certificate (PEM); "          \
         "default $" CR__TLS_ENV_CERT,                                                   \
         CR__CFG_STR, offsetof(T, tls_cert)},                                            \
        {"tls_key", "", "TLS private key (PEM, chmod 600); default $" CR__TLS_ENV_KEY,   \
         CR__CFG_STR, offsetof(T, tls_key)},                                             \
        {"tls_ca", "",                                                                   \
         "TLS: CA bundle that signs every member's certificate; default $" CR__TLS_ENV_CA, \
         CR__CFG_STR, offsetof(T, tls_ca)}

#define CR__AUTH_CFG_OF(c)                                                               \
    ((cr__auth_cfg_t){.cluster_key_file = (c).cluster_key_file,                          \
                      .tls_cert = (c).tls_cert,                                          \
                      .tls_key = (c).tls_key,                                            \
                      .tls_ca = (c).tls_ca})

#define CR__TLS_LOAD_OF(c, out) cr__tls_load((c).tls_cert, (c).tls_key, (c).tls_ca, (out))

#endif
