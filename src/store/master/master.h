/* Store master state: mounted segments (one offset allocator each),
 * clients and their heartbeats, objects (two-phase put, replicas, leases,
 * pins), eviction, quarantine of freed space. Metadata only: the master
 * never touches the memory it allocates.
 *
 * Every function takes the current time now_ms (a monotonic clock in ms,
 * cr__now_ms() in the service) so that tests drive time explicitly.
 * Thread-safe: one mutex guards the whole state; a batch is handled under
 * one acquisition. The implementation is split by job over the files of
 * this folder; master_priv.h lists them and holds the shared internals.
 *
 * Object lifecycle:
 *   PutStart -> PENDING (invisible: Exist/Get/Remove see OBJECT_NOT_FOUND,
 *               a second PutStart sees OBJECT_ALREADY_EXISTS)
 *   PutEnd(version) -> COMPLETE (visible, on the LRU list)
 *   PutRevoke(version) or put deadline passed -> gone, space freed
 *   Remove / eviction / last replica's segment gone -> gone
 *   COMPLETE but unreachable (every replica on a segment restored from a
 *   journal or a takeover that its node has not mounted again) -> Exist
 *   sees OBJECT_NOT_FOUND and a PutStart/PutCommit of the key replaces it
 *   (a Get still lists the replicas: the node may be back any moment)
 * Freed space whose object may still be read (live lease) or written (a
 * put reclaimed at its deadline) is quarantined, not reused, until the
 * lease expires / for another put timeout.
 */
#ifndef CR_STORE_MASTER_MASTER_H
#define CR_STORE_MASTER_MASTER_H

#include <stddef.h>
#include <stdint.h>

#include "store/master/ha/shadow.h"
#include "store/rpc/protocol.h"

typedef struct cr__master cr__master_t;

/* Defaults (cr__master_cfg_default) and the bounds create applies when a
 * field is 0. */
#define CR__MASTER_DEFAULT_LEASE_TTL_MS 5000
#define CR__MASTER_DEFAULT_SOFT_PIN_TTL_MS (30 * 60 * 1000)
#define CR__MASTER_DEFAULT_CLIENT_TTL_MS 10000
#define CR__MASTER_DEFAULT_PUT_TIMEOUT_MS 30000
#define CR__MASTER_DEFAULT_EVICT_MAX_VISIT 65536
#define CR__MASTER_DEFAULT_GRANULE_SHIFT 6
#define CR__MASTER_DEFAULT_MIN_STRIPE (1u << 20)
#define CR__MASTER_DEFAULT_MAX_CLIENTS 65536
#define CR__MASTER_DEFAULT_MAX_SEGMENTS 65536
/* Work bounds of one cr__master_tick: quarantine entries released, pending
 * puts reclaimed at their deadline. */
#define CR__MASTER_TICK_RELEASE_MAX 100000
#define CR__MASTER_TICK_RECLAIM_MAX 100000

typedef struct cr__master_cfg {
    uint64_t lease_ttl_ms;        /* --default_kv_lease_ttl (5000) */
    uint64_t soft_pin_ttl_ms;     /* --default_kv_soft_pin_ttl (1800000) */
    uint64_t client_ttl_ms;       /* --client_ttl seconds * 1000 (10 s) */
    uint64_t put_timeout_ms;      /* --put_start_timeout seconds * 1000 (30 s) */
    double high_watermark;        /* --eviction_high_watermark_ratio (0.90) */
    double eviction_ratio;        /* --eviction_ratio (0.05) */
    uint32_t evict_max_visit;     /* objects visited per eviction pass (65536) */
    unsigned granule_shift;       /* allocator granule, 1 << shift bytes (6) */
    uint64_t min_stripe;          /* smallest shard when striping (1 MiB) */
    int evict_soft_pinned;        /* --allow_evict_soft_pinned_objects (1) */
    double offload_watermark;     /* --tier_offload_watermark (0.70): DRAM usage above which
                                     cold objects are copied to a disk tier ahead of eviction;
                                     0 = write-through (every completed object) */
    double ssd_high_watermark;    /* --tier_ssd_high_watermark (0.95): disk-tier eviction */
    int tier_no_promote;          /* --tier_promote=false: disk hits never promote (0) */
    uint32_t max_clients;         /* live clients bound (65536) */
    uint32_t max_segments;        /* mounted segments bound (65536) */
    /* Bounds on object metadata (0 = none): PutStart of a new key past them
     * gets CR_E_KEYS_ULTRA_LIMIT, so no caller can grow the master's memory
     * without limit (--max_objects 16 M, --max_key_bytes 2 GiB). */
    uint64_t max_objects;
    uint64_t max_key_bytes;
} cr__master_cfg_t;

/* Fills c with the defaults above. */
void cr__master_cfg_default(cr__master_cfg_t *c);

/* Creates an empty master. master_id (also the first object version) is
 * the realtime clock in ms << 16, so versions never repeat across restarts
 * (unless a master made more than 65536 puts per ms of its uptime). Returns 0 and *out, -EINVAL or -ENOMEM. */
int cr__master_create(const cr__master_cfg_t *cfg, cr__master_t **out);
void cr__master_destroy(cr__master_t *m);

uint64_t cr__master_id(const cr__master_t *m);

/* ---- clients and segments ----------------------------------------------- */

/* Heartbeat. Registers an unknown client and then returns
 * CR__RPC_F_NEED_REMOUNT in *flags (it was never seen, or it expired and
 * its segments were dropped); 0 otherwise. Returns 0, or
 * CR_E_UNAVAILABLE_IN_CURRENT_STATUS when max_clients are registered. */
int cr__master_ping(cr__master_t *m, cr__rpc_client_id_t id, uint64_t now_ms, uint32_t *flags);

/* Mounts [base, base+size) of TE segment name for client id (refreshes the
 * client's heartbeat). Returns 0 (also for an identical remount),
 * CR_E_SEGMENT_ALREADY_EXISTS (name mounted by another client or with a
 * different range), CR_E_INVALID_PARAMS (empty/oversized name, size under
 * one granule, base+size overflow), CR_E_UNAVAILABLE_IN_CURRENT_STATUS
 * (max_segments mounted / max_clients registered), -ENOMEM. */
int cr__master_mount(cr__master_t *m, cr__rpc_client_id_t id, const char *name, uint64_t base,
                     uint64_t size, uint64_t now_ms);

/* Unmounts: every replica with a shard there is dropped (objects left with
 * no replica vanish). Returns 0, CR_E_SEGMENT_NOT_FOUND (no such name, or
 * mounted by another client). */
int cr__master_unmount(cr__master_t *m, cr__rpc_client_id_t id, const char *name,
                       uint64_t now_ms);

/* ---- objects --------------------------------------------------------------
 * Single-key operations; keys are key_len bytes (1..CR__RPC_KEY_MAX, no
 * NUL byte, else CR_E_INVALID_KEY). Results that carry replicas are written
 * into *it (an rpc item: version, size, lease_ms, replicas) with arrays
 * allocated in msg's arena (cr__rpc_msg_alloc). */

/* Returns 0 (it: version, lease_ms = put deadline, replicas; also when it
 * replaces an unreachable complete object of the key),
 * CR_E_OBJECT_ALREADY_EXISTS, CR_E_INVALID_KEY, CR_E_INVALID_PARAMS (size 0
 * or > CR__RPC_VALUE_MAX, replica_num > CR__RPC_REPLICA_MAX),
 * CR_E_NO_AVAILABLE_HANDLE (not enough space / distinct segments even after
 * eviction), -ENOMEM. */
int cr__master_put_start(cr__master_t *m, const char *key, size_t key_len, uint64_t size,
                         const cr__rpc_repl_cfg_t *cfg, uint64_t now_ms, cr__rpc_msg_t *msg,
                         cr__rpc_item_t *it);
/* Returns 0 (also if already complete with this version),
 * CR_E_OBJECT_NOT_FOUND (no pending put of that version), CR_E_INVALID_KEY. */
int cr__master_put_end(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                       uint64_t now_ms);
/* Returns 0, CR_E_OBJECT_NOT_FOUND, CR_E_INVALID_PARAMS (already complete),
 * CR_E_INVALID_KEY. */
int cr__master_put_revoke(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                          uint64_t now_ms);
/* Grants/extends a read lease. Returns 0 (it: version, size, lease_ms,
 * live replicas), CR_E_OBJECT_NOT_FOUND (absent or incomplete),
 * CR_E_INVALID_KEY, -ENOMEM. */
int cr__master_get_replicas(cr__master_t *m, const char *key, size_t key_len, uint64_t now_ms,
                            cr__rpc_msg_t *msg, cr__rpc_item_t *it);
/* 0 if complete and reachable (see the lifecycle above), else
 * CR_E_OBJECT_NOT_FOUND / CR_E_INVALID_KEY. */
int cr__master_exist(cr__master_t *m, const char *key, size_t key_len, uint64_t now_ms);
int cr__master_get_size(cr__master_t *m, const char *key, size_t key_len, uint64_t now_ms,
                        uint64_t *size);
/* Returns 0, CR_E_OBJECT_NOT_FOUND, CR_E_OBJECT_HAS_LEASE (lease live and
 * !force), CR_E_INVALID_KEY. */
int cr__master_remove(cr__master_t *m, const char *key, size_t key_len, int force,
                      uint64_t now_ms);
/* Removes every complete object (without a live lease unless force).
 * *count gets how many. Returns 0. */
int cr__master_remove_all(cr__master_t *m, int force, uint64_t now_ms, uint64_t *count);

/* Removes every complete object whose key matches the POSIX extended
 * regular expression pattern (unanchored, like Mooncake's regex search
 * of keys): like RemoveAll, objects under a live read lease are skipped
 * unless force. *count gets the number removed. Returns 0,
 * CR_E_INVALID_PARAMS (NULL/empty/over-long pattern, or one regcomp()
 * refuses). The scan holds the master lock: O(objects). */
int cr__master_remove_by_regex(cr__master_t *m, const char *pattern, int force, uint64_t now,
                               uint64_t *count);
/* Stale-read check (protocol.h): 0 if the object of this version is
 * complete and replica_id is still attached; CR_E_OBJECT_NOT_FOUND (gone or
 * another version), CR_E_REPLICA_IS_GONE (that replica was dropped). */
int cr__master_validate(cr__master_t *m, const char *key, size_t key_len, uint64_t version,
                        uint64_t replica_id, uint64_t now_ms);

/* Periodic work, call every ~100 ms: expires silent clients, reclaims puts
 * past their deadline, releases due quarantine, evicts above the high
 * watermark. Bounded work per call except client expiry (a scan). */
void cr__master_tick(cr__master_t *m, uint64_t now_ms);

/* Runs one eviction step now (as on the watermark); returns objects evicted. */
uint64_t cr__master_evict(cr__master_t *m, uint64_t need_bytes, uint64_t now_ms);

/* ---- durability (ha/) ------------------------------------------------------
 * Every durable change (segment mounted/dropped, put started/ended, object
 * gone, replicas dropped) is described by an op record (ha/record.h)
 * handed to the journal function, under the state lock, in state order.
 * Leases, clients and quarantine are not durable. */
typedef void (*cr__master_journal_fn)(void *user, const uint8_t *frame, size_t len);

/* Sets (or clears, fn NULL) the journal function. */
void cr__master_set_journal(cr__master_t *m, cr__master_journal_fn fn, void *user);

/* Frames the whole durable state (SEG, OBJ, VERSION records) into b: a
 * snapshot; at(user) is called under the state lock once it is taken, so
 * the snapshot matches the journal position at that moment. Returns 0 or
 * -ENOMEM. */
int cr__master_dump(cr__master_t *m, cr__ha_buf_t *b, void (*at)(void *), void *user);

/* HA: allocation windows (store-ha.md, "One wait per put"). A leader
 * turns them on; a PutStart whose replicas are all carved from windows
 * its standbys know needs no wait. cr__master_wait_reset() before serving a
 * request and cr__master_wait_needed() after tell whether this thread
 * emitted any record that must be on the standbys before the reply. After
 * a wait that covered everything recorded before gen = cr__master_win_gen()
 * was read, cr__master_win_confirm(m, gen) marks those windows known. */
void cr__master_windows(cr__master_t *m, int on);
/* Client space reservations (RESERVE / PUT_COMMIT, reserve.c): served
 * while on (the default); off closes every open one (quarantined). */
void cr__master_reservations(cr__master_t *m, int on, uint64_t now);
void cr__master_wait_reset(void);
int cr__master_wait_needed(void);
int cr__master_changed(void); /* this thread emitted any record since the reset */
/* The reply confirms a change an earlier request made (a retried PutEnd or
 * PUT_COMMIT whose first reply was lost): wait for every record produced so
 * far, not only for this request's (store-ha.md, "Retries wait too"). */
int cr__master_wait_prior(void);
uint64_t cr__master_win_gen(cr__master_t *m);
void cr__master_win_confirm(cr__master_t *m, uint64_t gen);

/* Adds the state of a shadow index (a journal or a leader's stream) to
 * this master: its segments are mounted detached (no allocation on them;
 * the owner — same client id, base and size — attaches by mounting again
 * within --client_ttl, else they are dropped), its objects indexed with
 * their blocks in place, complete ones leased for one lease ttl (a reader
 * of the previous master may be mid-transfer), pending ones given a whole
 * put timeout. The free space of its open allocation windows is quarantined
 * for two put timeouts (a writer of a PutStart the index never heard of
 * may still write there). *n_objects gets how many objects were indexed.
 * Returns 0 or -ENOMEM (the master must then be discarded). */
int cr__master_restore(cr__master_t *m, const cr__ha_shadow_t *sh, uint64_t now,
                       uint64_t *n_objects);

/* ---- per-object capabilities (caps.c) ---------------------------------- */

/* Turns capabilities on (crescent-master with a cluster key): MountSegment
 * replies carry the segment's capability key, replica lists carry grants.
 * Returns 0, -ENOMEM or -EIO (no randomness). */
int cr__master_caps_enable(cr__master_t *m);

/* Shared-file-system tier (--root_fs_dir; store/master/fs.c). Opens (and
 * creates) the tier's directory <root>/<cluster_id> and its tmp/: root
 * must be an existing, writable directory. Returns 0, or a negative errno
 * with a one-line reason in err. Call before serving. */
int cr__master_fs_open(cr__master_t *m, const char *root, const char *cluster_id, char *err,
                       size_t errlen);
/* Adopts every well-formed object file of the tier (a cold restart: files
 * survive the whole cluster): a key the index lacks gets a record whose
 * only copy is the file; a key at the same version gets its fs replica; a
 * file of another version than the index's is stale and deleted. Files of
 * writers that never attached (tmp/) are deleted. Returns files adopted or
 * a negative errno; *bad = files that failed their header check (kept,
 * never served: a miss). */
long cr__master_fs_scan(cr__master_t *m, uint64_t now, uint64_t *bad);
/* The leader epoch minted into capabilities from now on (HA). */
void cr__master_caps_epoch(cr__master_t *m, uint32_t epoch);

/* ---- rpc dispatch ------------------------------------------------------ */

/* Serves one decoded request (any type): fills reply (type/req_id already
 * set) and counts it in the metrics. Batch items are handled under one
 * lock; per-key failures are per item. */
void cr__master_handle(cr__master_t *m, const cr__rpc_msg_t *req, cr__rpc_msg_t *reply,
                       uint64_t now_ms);

/* ---- metrics and admin ------------------------------------------------- */

/* The one metrics list: X(name, type, help). Counters end in _total;
 * gauges are filled from the state when a snapshot is taken. It generates
 * the enum below, cr__master_stats_t.counters[] and the Prometheus text. */
#define CR__MASTER_METRICS(X)                                                                  \
    X(rpc_ping_total, counter, "Ping requests")                                                \
    X(rpc_mount_segment_total, counter, "MountSegment requests")                               \
    X(rpc_unmount_segment_total, counter, "UnmountSegment requests")                           \
    X(rpc_remove_all_total, counter, "RemoveAll requests")                                     \
    X(rpc_put_start_total, counter, "PutStart keys (single and batch)")                        \
    X(rpc_put_end_total, counter, "PutEnd keys")                                               \
    X(rpc_put_revoke_total, counter, "PutRevoke keys")                                         \
    X(rpc_get_replica_list_total, counter, "GetReplicaList keys")                              \
    X(rpc_exist_total, counter, "Exist keys")                                                  \
    X(rpc_get_size_total, counter, "GetSize keys")                                             \
    X(rpc_remove_total, counter, "Remove keys")                                                \
    X(rpc_validate_total, counter, "Validate keys")                                            \
    X(rpc_batch_requests_total, counter, "Batch requests (any batch type)")                    \
    X(rpc_errors_total, counter, "Keys or requests failed (a lookup's not-found is none)")     \
    X(puts_refused_restoring_total, counter,                                                   \
      "PutStart requests refused while restored segments wait for their nodes")               \
    X(hits_total, counter, "GetReplicaList that found a complete object")                      \
    X(misses_total, counter, "GetReplicaList or GetSize that found nothing")                   \
    X(validate_failures_total, counter, "Validate that reported stale bytes")                  \
    X(puts_completed_total, counter, "Objects made visible by PutEnd")                         \
    X(puts_revoked_total, counter, "Puts revoked by the writer")                               \
    X(puts_timed_out_total, counter, "Puts reclaimed at their deadline")                       \
    X(alloc_failures_total, counter, "PutStart that found no space even after eviction")       \
    X(evictions_total, counter, "Objects evicted")                                             \
    X(evicted_bytes_total, counter, "Bytes of replica space freed by eviction")                \
    X(eviction_steps_total, counter, "Eviction steps run")                                     \
    X(removed_objects_total, counter, "Objects removed by Remove/RemoveAll")                   \
    X(replicas_dropped_total, counter, "Replicas dropped because their segment went away")     \
    X(objects_lost_total, counter, "Objects that vanished with their last replica")            \
    X(clients_expired_total, counter, "Clients whose heartbeat lapsed (segments unmounted)")   \
    X(quarantined_bytes_total, counter, "Bytes put in quarantine before reuse")                \
    X(keys, gauge, "Complete objects")                                                         \
    X(pending_puts, gauge, "Puts started and not ended")                                       \
    X(segments, gauge, "Mounted segments")                                                     \
    X(clients, gauge, "Clients with a live heartbeat")                                         \
    X(capacity_bytes, gauge, "Bytes of mounted segment memory")                                \
    X(allocated_bytes, gauge, "Bytes allocated (objects, pending puts, quarantine)")          \
    X(quarantine_bytes, gauge, "Freed bytes waiting for leases to expire before reuse")      \
    X(stalls_total, counter, "Times the master found it had not run for over 500 ms")         \
    X(stalled_ms_total, counter, "Milliseconds of stalls not counted against heartbeats")     \
    X(tier_ssd_hits_total, counter, "GetReplicaList served from the disk tier only")          \
    X(tier_ssd_offloads_total, counter, "Objects copied from DRAM to a node's disk tier")     \
    X(tier_ssd_offload_bytes_total, counter, "Value bytes copied to the disk tier")           \
    X(tier_ssd_offload_failures_total, counter, "Offload tasks that failed or timed out")     \
    X(tier_ssd_demotions_total, counter, "DRAM replicas dropped because the disk holds a copy") \
    X(tier_ssd_evictions_total, counter, "Objects evicted from the disk tier")               \
    X(tier_ssd_evicted_bytes_total, counter, "Disk bytes freed by disk-tier eviction")        \
    X(tier_ssd_corrupt_total, counter, "Disk copies that failed their checksum/header check") \
    X(tier_ssd_adopted_total, counter, "Disk objects re-reported by a restarted node")        \
    X(tier_ssd_erases_total, counter, "Disk extents handed to their node for erasure")        \
    X(tier_ssd_promotions_total, counter, "Disk-only objects copied back to DRAM (second hit)") \
    X(tier_ssd_promotion_failures_total, counter, "Promotions that failed or were dropped")  \
    X(tier_dram_dropped_total, counter, "DRAM evictions the disk tier could not take")        \
    X(tier_ssd_segments, gauge, "Mounted disk-tier segments")                                \
    X(tier_ssd_capacity_bytes, gauge, "Bytes of mounted disk-tier capacity")                  \
    X(tier_ssd_used_bytes, gauge, "Disk-tier bytes allocated (objects, offloads in flight)")  \
    X(tier_ssd_only_objects, gauge, "Complete objects held on disk only")                     \
    X(tier_tasks_queued, gauge, "Tier tasks waiting for their node")                          \
    X(tier_tasks_running, gauge, "Tier tasks handed to a node and not completed")             \
    X(upserts_total, counter, "Objects replaced by an upsert's PutEnd")                          \
    X(rpc_remove_by_regex_total, counter, "RemoveByRegex requests")                          \
    X(puts_refused_metadata_full_total, counter,                                               \
      "PutStart refused because --max_objects or --max_key_bytes was reached")                  \
    X(rtask_created_total, counter, "Replica copy/move tasks created")                         \
    X(rtask_done_total, counter, "Replica copy/move tasks finished (success or failure)")      \
    X(rtask_failed_total, counter, "Replica copy/move tasks that failed or timed out")        \
    X(tier_fs_hits_total, counter, "GetReplicaList served from the shared-FS tier only")       \
    X(tier_fs_attached_total, counter, "Objects recorded with a file on the shared-FS tier")   \
    X(tier_fs_attach_failures_total, counter, "Shared-FS files refused (stale, bad, rename)") \
    X(tier_fs_adopted_total, counter, "Shared-FS files adopted by a scan at start")          \
    X(tier_fs_corrupt_total, counter, "Shared-FS files found bad (readers, scan): a miss")   \
    X(tier_fs_removed_total, counter, "Shared-FS files deleted (object removed or replaced)") \
    X(tier_fs_demotions_total, counter, "DRAM replicas dropped because a shared-FS file holds the object") \
    X(tier_fs_objects, gauge, "Objects with a file on the shared-FS tier")                     \
    X(tier_fs_only_objects, gauge, "Complete objects held on the shared-FS tier only")                       \
    X(rpc_reserve_total, counter, "Reserve requests")                                          \
    X(rpc_put_commit_total, counter, "PutCommit keys")                                         \
    X(reservations_granted_total, counter, "Space reservations handed to clients")             \
    X(reservations_expired_total, counter, "Reservations closed at their expiry")              \
    X(reservations_reclaimed_total, counter,                                                    \
      "Reservations closed early (client gone, memory pressure, per-client bound)")            \
    X(reservations_refused_total, counter, "Reserve requests refused (bounds, no space)")      \
    X(put_commits_total, counter, "Objects made visible by PutCommit (one-round-trip put)")    \
    X(put_commits_refused_total, counter, "PutCommit refused: not in a live reservation")      \
    X(reservation_tail_bytes_returned_total, counter,                                           \
      "Uncarved reservation tails handed back by their clients (bytes)")                       \
    X(reservations_returned_total, counter,                                                     \
      "Reservations given back by their client (done, or idle for a heartbeat)")               \
    X(reservations, gauge, "Client reservations open or waiting out their quarantine")         \
    X(reserved_bytes, gauge, "Bytes held free in open client reservations")                    \
    X(puts_replaced_unreachable_total, counter,                                                 \
      "Puts that replaced an object no reader could reach (restored, its node not back)")     \
    X(puts_excluding_total, counter, "PutStart keys that named segments to avoid (suspect)")   \
    X(puts_placed_excluded_total, counter,                                                      \
      "PutStart keys placed on a segment they asked to avoid: nothing else fit after eviction")

#define CR__MASTER_METRIC_ENUM(name, type, help) CR__MM_##name,
enum { CR__MASTER_METRICS(CR__MASTER_METRIC_ENUM) CR__MM_COUNT };

typedef struct cr__master_stats {
    uint64_t counters[CR__MM_COUNT]; /* every metric of the list, gauges included */
    uint64_t keys;            /* complete objects */
    uint64_t pending_puts;    /* incomplete objects */
    uint64_t segments, clients;
    uint64_t capacity_bytes;  /* sum of mounted segment capacities */
    uint64_t allocated_bytes; /* allocated (objects + pending + quarantine) */
    uint64_t quarantine_bytes;
} cr__master_stats_t;

void cr__master_stats(cr__master_t *m, cr__master_stats_t *st);

/* Prometheus text exposition of the stats (malloc'd NUL-terminated string
 * in *out, caller frees). Returns 0 or -ENOMEM. */
int cr__master_metrics_text(cr__master_t *m, char **out, size_t *len);

/* JSON description of one key (state, version, size, lease, pins,
 * replicas) in *out (malloc'd). Returns 0, CR_E_OBJECT_NOT_FOUND, -ENOMEM. */
int cr__master_query_key_json(cr__master_t *m, const char *key, size_t key_len,
                              uint64_t now_ms, char **out, size_t *len);

/* JSON array of mounted segments (name, base, size, used, client). */
int cr__master_segments_json(cr__master_t *m, char **out, size_t *len);

#endif
