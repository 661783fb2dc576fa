/* crescent-master's high-availability mode (--enable_ha): the glue between
 * the RPC handler, the election (store/master/ha/elect.h) and replication
 * (ha/repl.h). Design: docs/architecture/store-ha.md. */
#ifndef CR_TOOLS_MASTER_HA_H
#define CR_TOOLS_MASTER_HA_H

#include "common/httpd.h"
#include "store/master/ha/journal.h"
#include "store/master/master.h"
#include "store/rpc/protocol.h"

typedef struct master_ha_cfg {
    const char *endpoints;  /* --etcd_endpoints */
    const char *cluster_id; /* --cluster_id */
    const char *rpc_addr;   /* advertised host:port of this master's RPC */
    const char *admin_addr; /* advertised host:port of its HTTP admin, or "" */
    unsigned lease_ttl_s;
    int sync_timeout_ms;
    cr__ha_journal_t *journal; /* local journal or NULL */
    const char *id_dir;        /* --journal_dir (keeps this master's id) or "" */
    cr__ha_shadow_t *loaded;   /* its content (ownership passes), or NULL */
    const struct cr__auth *auth; /* cluster key for the op stream to standbys, or NULL */
    const struct cr__tls *tls;   /* TLS to standbys and etcd, or NULL */
} master_ha_cfg_t;

/* Starts the election and the role manager for master m (empty: the
 * state comes from the journal or a leader's stream). Returns 0 or a
 * negative errno (bad endpoints/cluster id: -EINVAL). */
int master_ha_start(const master_ha_cfg_t *cfg, cr__master_t *m);

/* Serves one request in HA mode (the RPC handler calls it instead of
 * cr__master_handle). */
void master_ha_handle(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply);

/* 1 once this master was deposed: main stops and re-executes itself as a
 * standby (a fresh state, its journal not trusted). */
int master_ha_deposed(void);
/* 1 while this master serves as the leader. */
int master_ha_leading(void);

/* /role, /leader, /ha_status; returns 1 if it answered. */
int master_ha_admin(const cr__http_req_t *req, cr__http_resp_t *resp);

/* Prometheus lines of the HA metrics (malloc'd) or NULL. */
char *master_ha_metrics(void);

/* Stopping: every request is refused from now on and leadership is
 * resigned. Call before stopping the RPC and admin servers; master_ha_stop()
 * (which frees what their handlers use) only after they stopped. */
void master_ha_quiesce(void);

void master_ha_stop(void);

#endif
