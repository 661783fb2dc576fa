/* Master replication: the leader streams its op records (record.h) to
 * every standby over crescent's own RPC (CR__RPC_REPL_APPEND), and a
 * change is acknowledged to its client only once every in-sync standby has
 * applied it (semi-synchronous, like Redis WAIT): a leader that dies loses
 * no completed object, because any standby it waited for has it.
 *
 * Leader side: records go to an in-memory log (seq-numbered). One pusher
 * thread per standby (standbys register under members/ in etcd, elect.h)
 * first sends a snapshot of the master (RESET), then the log from the
 * snapshot's position on. A standby is *in sync* once its snapshot is
 * acknowledged; cr__ha_repl_wait() waits for every in-sync standby to
 * acknowledge the current seq, at most sync_timeout_ms: one that misses it
 * drops out of sync (not waited for again until it has caught up through a
 * fresh snapshot) — a dead standby costs one timeout, not every write.
 * The log keeps what some in-sync standby still lacks, at most
 * CR__HA_LOG_MAX bytes (a standby further behind is resynced).
 *
 * The in-sync set (etcd key insync, elect.h) names the leader and every
 * standby that holds all acknowledged changes; only those may win the next
 * election. A standby joins it once in sync and caught up, and leaves it
 * (one etcd write) before any change it lacks is acknowledged.
 *
 * Standby side: cr__ha_repl_apply() applies a stream to a shadow index
 * (and the local journal, if any); it refuses an epoch older than one it
 * has seen (a deposed leader's stream) and a gap in seqs (the leader then
 * resynchronises it).
 *
 * Thread-safe. */
#ifndef CR_STORE_MASTER_HA_REPL_H
#define CR_STORE_MASTER_HA_REPL_H

#include <stddef.h>
#include <stdint.h>

#include "store/master/ha/journal.h"
#include "store/master/ha/shadow.h"
#include "store/master/master.h"
#include "transfer/metadata/metadata.h"

#define CR__HA_LOG_MAX (256u << 20)

typedef struct cr__ha_repl cr__ha_repl_t;

typedef struct cr__ha_repl_stats {
    uint64_t seq;            /* records produced (leader) / applied (standby) */
    uint32_t followers, in_sync; /* in_sync: waited for and listed in the in-sync set */
    uint64_t max_lag_records; /* in-sync standbys: seq - acked, worst */
    uint64_t snapshots_sent, records_sent, bytes_sent, sync_timeouts;
    uint64_t waits, wait_us_total; /* acknowledgements that waited, and how long in all */
    uint64_t appends_sent; /* log REPL_APPENDs acknowledged (records_sent / appends_sent:
                              records per round trip, i.e. the batching) */
    uint64_t resets_applied, appends_refused, insync_published;
    uint64_t insync_repaired; /* leader: garbage found over the in-sync set, rewritten */
    int deposed; /* leader: a standby has seen a newer epoch */
    int usable;  /* standby: its state is whole (a snapshot or a journal loaded) */
} cr__ha_repl_stats_t;

/* self_rpc: this master's host:port (skipped among the members). local:
 * the local journal (may be NULL), written by both roles. */
/* Security on: the leader's connections to standbys authenticate with a
 * (their RPC servers require it). Call right after create; a must outlive r. */
struct cr__auth;
void cr__ha_repl_set_auth(cr__ha_repl_t *r, const struct cr__auth *a);
/* TLS on: the leader's connections to standbys use TLS (common/tls) too.
 * Call right after create; tls must outlive r. */
struct cr__tls;
void cr__ha_repl_set_tls(cr__ha_repl_t *r, const struct cr__tls *tls);

int cr__ha_repl_create(const char *self_rpc, const char *self_id, cr__ha_journal_t *local,
                       int sync_timeout_ms, cr__ha_repl_t **out);
void cr__ha_repl_destroy(cr__ha_repl_t *r);

/* ---- leader ---- */

/* The master's journal function while leading (user = r). */
void cr__ha_repl_record(void *r, const uint8_t *frame, size_t len);

/* Starts leading m under epoch: members are listed from etcd (m_etcd,
 * cluster_id) every 500 ms and a pusher runs per standby. Returns 0 or
 * -ENOMEM. */
int cr__ha_repl_lead(cr__ha_repl_t *r, cr__master_t *m, uint32_t epoch, cr__meta_t *etcd,
                     const char *cluster_id);

/* Stops the pushers (joins them) and forgets the log. */
void cr__ha_repl_unlead(cr__ha_repl_t *r);

/* Unless nothing was recorded since mark: blocks until every in-sync
 * standby (and the local journal) has every record produced so far, and no standby that lacks one is still listed in
 * the in-sync set in etcd (elect.h). Returns 0, -EIO if the local journal
 * write failed or -ETIMEDOUT if a dropped standby could not be unlisted in
 * time (nothing may be acknowledged then). */
int cr__ha_repl_wait(cr__ha_repl_t *r, uint64_t mark);

/* The seq before a request runs: cr__ha_repl_wait(r, mark) returns at once
 * if no record was produced since (reads and heartbeats never wait). */
uint64_t cr__ha_repl_mark(cr__ha_repl_t *r);

/* ---- standby ---- */

/* Applies one REPL_APPEND. Returns 0 and *applied (records applied so far
 * in this stream), -ESTALE (epoch older than one seen: cr__ha_repl_floor()
 * names the newer one), -EBUSY (this master leads: not a standby now),
 * -EPROTO (a gap: first_seq != applied; or a corrupt blob), -ENOMEM. */
int cr__ha_repl_apply(cr__ha_repl_t *r, uint32_t epoch, uint32_t flags, uint64_t first_seq,
                      const uint8_t *blob, size_t len, uint64_t *applied);

/* Loads the local journal's content as the standby state (at start). */
void cr__ha_repl_adopt_shadow(cr__ha_repl_t *r, cr__ha_shadow_t *sh);

/* The standby state, for promotion (restore into a master); the caller
 * must have stopped appends (promotion raises the epoch floor first). */
cr__ha_shadow_t *cr__ha_repl_shadow(cr__ha_repl_t *r);

/* The newest epoch seen (the lowest one accepted from a stream). */
uint32_t cr__ha_repl_floor(cr__ha_repl_t *r);

/* Raises the lowest epoch accepted from a leader's stream. */
void cr__ha_repl_fence(cr__ha_repl_t *r, uint32_t epoch);

/* Forgets the standby state (a deposed leader becomes a standby). */
void cr__ha_repl_reset(cr__ha_repl_t *r);

void cr__ha_repl_stats(cr__ha_repl_t *r, cr__ha_repl_stats_t *st);

#endif
