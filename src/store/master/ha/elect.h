/* Master leader election and fencing on etcd (v3 JSON gateway, through
 * cr__meta_etcd_post). Keys under /crescent/<cluster_id>/master/:
 *   leader          {"rpc":"host:port","admin":"host:port","epoch":N}, put with
 *                   the leader's lease by a txn that requires it absent
 *   epoch           the last epoch (decimal); the campaign txn increments it,
 *                   compared on its mod revision, so epochs are 1, 2, 3, ...
 *   members/<rpc>   {"rpc":...,"admin":...,"id":...} per running master (its own lease)
 *   insync          {"epoch":N,"members":["id",...]}: the masters holding every
 *                   change the leader of epoch N acknowledged (the leader and
 *                   its caught-up standbys; written by the replication side).
 *                   Only a listed master campaigns (none listed: a cluster
 *                   that never had a leader); the campaign txn requires the
 *                   set unchanged and replaces it with the winner alone.
 *
 * Fencing: the leader believes its lease valid until (time it sent the last
 * successful keepalive or grant) + TTL - margin, on its monotonic clock.
 * etcd cannot expire the lease before (its receipt of that request) + TTL,
 * so a leader that stalls, is partitioned from etcd or loses its key stops
 * serving (cr__ha_elect_epoch() returns 0) before another can be elected,
 * and never serves again under that epoch: a resumed leader sees its
 * validity passed on its first request. It also steps down when its key
 * no longer names it (checked at every keepalive).
 *
 * A key that holds garbage or was put without a lease (nobody's campaign)
 * is deleted (txn on its mod revision) and logged; a garbage key with a
 * lease blocks elections until that lease expires. An in-sync key that
 * does not parse is logged as an error; only the leader of the newest
 * epoch (led_epoch == the epoch key) may campaign then — it holds every
 * acknowledged change — and its campaign replaces the garbage; a running
 * leader rewrites it (cr__ha_insync_check).
 *
 * Thread-safe; one background thread per elector. */
#ifndef CR_STORE_MASTER_HA_ELECT_H
#define CR_STORE_MASTER_HA_ELECT_H

#include <stddef.h>
#include <stdint.h>

#include "transfer/metadata/metadata.h"

#define CR__HA_ADDR_MAX 256
#define CR__HA_ID_MAX 40 /* a master's identity (kept in its --journal_dir) */

typedef struct cr__ha_elect cr__ha_elect_t;

typedef struct cr__ha_elect_params {
    const char *endpoints;  /* "h1:2379;h2:2379" (',' too; etcd:// prefix optional) */
    const char *cluster_id; /* [A-Za-z0-9_.-]{1,64} */
    const char *rpc_address;   /* host:port this master serves RPC on */
    const char *admin_address; /* host:port of its HTTP admin, or "" */
    const char *id;            /* this master's identity (in-sync set), no quotes */
    unsigned lease_ttl_s;      /* 1..60 */
    int eligible;              /* may campaign from the start */
    uint32_t led_epoch;        /* the last epoch this master led, kept with its journal
                                  (0: none or unknown); see cr__ha_insync_check */
    const struct cr__tls *tls; /* etcd over https with this certificate; NULL = http */
} cr__ha_elect_params_t;

typedef struct cr__ha_elect_status {
    int leader;     /* 1 while this master holds a valid lease */
    uint32_t epoch; /* this master's epoch when leader, else the last seen */
    char leader_rpc[CR__HA_ADDR_MAX], leader_admin[CR__HA_ADDR_MAX]; /* "" if none */
    uint64_t elections_won, campaigns, leadership_lost, etcd_errors, garbage_keys;
    uint64_t not_in_sync_set; /* campaign rounds skipped: not in the in-sync set */
    uint64_t insync_garbage;  /* campaign rounds that found the in-sync key unparsable */
    uint64_t lease_left_ms; /* leader: validity left */
    int etcd_reachable;
} cr__ha_elect_status_t;

/* Validates, opens etcd and starts the thread; etcd need not be up yet
 * (it retries, logging once per outage). Returns 0 and *out, -EINVAL (bad
 * endpoints / cluster id / ttl) or -ENOMEM. */
int cr__ha_elect_start(const cr__ha_elect_params_t *p, cr__ha_elect_t **out);

/* Stops the thread; a leader revokes its lease (a standby takes over at
 * once instead of after the TTL). NULL is a no-op. */
void cr__ha_elect_stop(cr__ha_elect_t *e);

/* The epoch (> 0) while this master is the leader and its lease surely
 * valid at now_ms (monotonic ms), else 0. Lock-free: call per request. */
uint32_t cr__ha_elect_epoch(cr__ha_elect_t *e, uint64_t now_ms);

/* Gives up leadership now (revokes the lease), e.g. when the replication
 * side cannot continue. */
void cr__ha_elect_resign(cr__ha_elect_t *e);

/* May this master campaign (a standby that is not in sync must not). */
void cr__ha_elect_set_eligible(cr__ha_elect_t *e, int eligible);

void cr__ha_elect_status(cr__ha_elect_t *e, uint64_t now_ms, cr__ha_elect_status_t *st);

/* The etcd handle (for the replication side's own keys). */
cr__meta_t *cr__ha_elect_etcd(cr__ha_elect_t *e);

/* Key under the cluster: writes "/crescent/<cid>/master/<leaf>" into buf. */
void cr__ha_key(char *buf, size_t cap, const char *cluster_id, const char *leaf);

/* Client side: reads the leader key. endpoints/cluster_id as above (m is
 * an open etcd handle). Returns 0 with rpc ("host:port") and *epoch,
 * -ENOENT (no leader now), -EBADMSG (garbage in the key), or the etcd
 * error (-EHOSTUNREACH, -ETIMEDOUT). */
int cr__ha_leader_lookup(cr__meta_t *m, const char *cluster_id, char *rpc, size_t cap,
                         uint32_t *epoch);

/* Lists the rpc addresses of the running masters (members/ keys) into
 * addrs (at most max). Returns the count (>= 0) or a negative errno. */
int cr__ha_members(cr__meta_t *m, const char *cluster_id, char (*addrs)[CR__HA_ADDR_MAX],
                   char (*ids)[CR__HA_ID_MAX], int max);

/* Leader of epoch: writes the in-sync set (ids: the masters holding every
 * change acknowledged from now on, the leader first) — only while epoch is
 * the newest. Returns 0, -ESTALE (a newer epoch exists: deposed) or the
 * etcd error. */
int cr__ha_insync_publish(cr__meta_t *m, const char *cluster_id, uint32_t epoch,
                          const char *const *ids, int n);

/* Does the in-sync key parse? Returns 0, -ENOENT (absent), -EBADMSG
 * (garbage: the leader then rewrites it) or the etcd error. */
int cr__ha_insync_check(cr__meta_t *m, const char *cluster_id);

/* Parses "etcd://h1:2379;h2:2379[/cluster_id]" (or without etcd://):
 * writes an URI cr__meta_open accepts into uri and the cluster id (default
 * "crescent") into cid. Returns 0 or -EINVAL. */
int cr__ha_parse_master_uri(const char *s, char *uri, size_t uri_cap, char *cid, size_t cid_cap);

#endif
