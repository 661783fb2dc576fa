/* A storage node's disk tier at run time: the read server clients ask for
 * disk-resident objects, and the sync thread that takes tasks (offload,
 * erase) from the master and reports what it did (store/tier/tier.h). */
#ifndef CR_STORE_TIER_SSD_NODE_H
#define CR_STORE_TIER_SSD_NODE_H

#include <stdint.h>

#include "store/rpc/protocol.h"

typedef struct cr__tier_node cr__tier_node_t;

typedef struct cr__tier_node_cfg {
    const char *dir;        /* --ssd_path */
    uint64_t capacity;      /* --ssd_capacity */
    unsigned qd;            /* io_uring queue depth per thread (--ssd_queue_depth) */
    const char *master;     /* host:port */
    const char *host;       /* address the read server listens on (and is named by) */
    uint16_t port;          /* 0 = ephemeral */
    cr__rpc_client_id_t id; /* the node's store client id (owner of its DRAM segment) */
    uint8_t *dram_base;     /* the node's DRAM segment (offload source) */
    uint64_t dram_size;
    unsigned rpc_timeout_ms;
    /* Security on (docs/security.md): the master RPC authenticates, and a
     * read-server connection must pass the cluster-key handshake (context
     * "tier") before any request is served. NULL = off; must outlive t. */
    const struct cr__auth *auth;
    const struct cr__tls *tls; /* TLS to the master RPC (common/tls); NULL = off */
} cr__tier_node_cfg_t;

/* Opens the disk tier (cr__ssd_open's checks), scans it, starts the read
 * server and the sync thread, mounts the disk segment at the master and
 * re-reports every object found on disk. Returns 0 and *out, or a negative
 * errno / CR_E_* with a one-line reason in err. */
int cr__tier_node_start(const cr__tier_node_cfg_t *c, cr__tier_node_t **out, char *err,
                        size_t errlen);
/* Stops the threads and closes the tier (objects stay on disk). */
void cr__tier_node_stop(cr__tier_node_t *t);
const char *cr__tier_node_segment(const cr__tier_node_t *t);

#endif
