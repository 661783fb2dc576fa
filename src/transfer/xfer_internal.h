/* Transfer engine core: internal state shared by engine.c, memreg.c,
 * peer.c, batch.c, notify.c, topology.c and the control channel
 * (control/). Not seen by transports: they use transport/transport.h only.
 *
 * Locks (never taken in the reverse order):
 *   engine->peer_lock    peers[], every peer's desc   (mutex)
 *   engine->mem_lock     regs[]                       (rwlock)
 *   engine->publish_lock serializes descriptor publication (mutex)
 *   batch->lock          notify records, waiters      (mutex)
 *   engine->nq_lock      received notifications       (mutex)
 *   engine->out_lock     outgoing batch notifications (mutex)
 */
#ifndef CR_TRANSFER_XFER_INTERNAL_H
#define CR_TRANSFER_XFER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "crescent/transfer.h"
#include "transfer/control/control.h"
#include "transfer/metadata/metadata.h"
#include "transfer/segment_desc.h"
#include "transfer/transport/transport.h"

#define CR__XFER_MAX_PEERS 4096     /* segments one engine may have open */
#define CR__XFER_NOTIFY_QUEUE 256   /* received notifications kept */
#define CR__XFER_OUT_NOTIFY_MAX 1024 /* batch notifications waiting to be sent */
#define CR__XFER_DEFAULT_SLICE (512u << 10)
#define CR__XFER_MIN_SLICE 4096
#define CR__XFER_MAX_SLICE (16u << 20)
#define CR__XFER_DEFAULT_IO_THREADS 2
#define CR__XFER_MAX_IO_THREADS 64
#define CR__XFER_DEFAULT_CONNS_PER_PATH 2
#define CR__XFER_MAX_CONNS_PER_PATH 16
#define CR__XFER_DEFAULT_TIMEOUT_MS 30000
#define CR__XFER_DEFAULT_STALL_MS 1000 /* no-progress abort (fault isolation) */
#define CR__XFER_MIN_STALL_MS 50
#define CR__XFER_MAX_TIMEOUT_MS (24u * 3600 * 1000) /* a day */
/* a descriptor refetch runs inside submit: a hung peer must not stall it longer */
#define CR__XFER_REFRESH_TIMEOUT_MS 1000
/* the unpublish at destroy, per metadata request: a hung metadata service
 * (e.g. the master that embeds it, stopped) must not hold close() and
 * atexit for the engine's full timeout; a descriptor left behind only
 * sends peers to an engine that is gone, which they handle */
#define CR__XFER_UNPUBLISH_TIMEOUT_MS 2000
#define CR__XFER_INITIAL_REGS 16 /* registration slots allocated up front (the array doubles) */

/* One registration of local memory. Allocated once and freed only after
 * unregistration found no pins left, so a pin token stays valid. */
typedef struct cr__memreg {
    uint64_t addr, len;
    char location[CR_XFER_LOCATION_MAX];
    uint32_t nic_pref_mask, nic_sec_mask;
    atomic_int pins;
} cr__memreg_t;

/* Topology: location tag -> preferred / secondary local NIC masks. */
typedef struct cr__topo_entry {
    char location[CR_XFER_LOCATION_MAX];
    uint32_t pref_mask, sec_mask;
} cr__topo_entry_t;

typedef struct cr__topology {
    size_t n;
    cr__topo_entry_t *entries;
} cr__topology_t;

/* A batch notification to send once its writes landed. */
typedef struct cr__xfer_bnotify {
    struct cr__xfer_bnotify *next;
    cr__xfer_peer_t *peer;
    unsigned remaining; /* counted writes still running (guarded by batch->lock) */
    uint32_t upto;      /* tasks [0, upto) existed at registration */
    uint8_t *counted;   /* bitmap of the task indices this record waits for */
    int failed;
    size_t len;
    char msg[];
} cr__xfer_bnotify_t;

/* An outgoing notification waiting for the notifier thread. */
typedef struct cr__xfer_outmsg {
    struct cr__xfer_outmsg *next;
    cr__xfer_peer_t *peer;
    size_t len;
    char msg[];
} cr__xfer_outmsg_t;

struct cr_xfer_batch {
    cr_xfer_engine_t *engine;
    struct cr_xfer_batch *prev, *next; /* engine->batches, guarded by batch_list_lock */
    size_t capacity;
    size_t n;                 /* submitted requests; written by submitters only */
    atomic_size_t running;    /* requests not finished */
    atomic_int has_notify;
    int want_crc;             /* tasks hash their local bytes (checksum.h) */
    int caller_waits;         /* set by cr_xfer_transfer_sync for a lone request: the
                               * submitter blocks on it anyway (task->caller_waits) */
    pthread_mutex_t lock;
    pthread_cond_t done_cv;   /* signalled when running drops to 0 */
    int waiters;              /* guarded by lock */
    cr__xfer_bnotify_t *notifies; /* guarded by lock */
    cr__xfer_task_t *tasks;   /* capacity entries */
};

struct cr_xfer_engine {
    cr__xfer_config_t cfg;
    cr__meta_t *meta; /* NULL in p2p mode */
    struct cr__auth *auth; /* cluster key (common/auth); NULL = security off */
    struct cr__tls *tls;   /* TLS to the metadata service (common/tls); NULL = off */
    /* per-object capabilities (capability.c): once a key is installed every
     * remote READ/WRITE of this engine's memory needs a capability */
    pthread_mutex_t cap_mu;  /* guards cap_key, cap_seg */
    uint8_t cap_key[32];
    uint64_t cap_seg;
    atomic_uint cap_gen;     /* bumped at each key change (verified-cap caches) */
    atomic_uint cap_floor;   /* newest master epoch seen: older capabilities are refused */
    atomic_int cap_on;
    atomic_uint_fast64_t cap_refused; /* requests refused for want of a capability */
    atomic_uint_fast64_t timeouts_waited; /* cr__xfer_timeouts_waited (engine_info.h) */
    cr__topology_t topo;
    atomic_int destroying;

    /* local segment */
    pthread_rwlock_t mem_lock;
    cr__memreg_t **regs; /* sorted by addr, guarded by mem_lock */
    size_t n_regs, cap_regs;
    pthread_mutex_t publish_lock;
    cr__seg_desc_t local; /* name, host id, pid, nics (buffers filled on publish) */
    atomic_uint_fast64_t version;

    /* the transports created at setup, in registry order (set before the
     * engine is shared, read-only after; states are NULLed at teardown) */
    cr__xfer_transport_t transports[CR__XFER_MAX_TRANSPORTS];
    size_t n_transports;
    cr__xfer_ctl_t *ctl; /* the control channel */

    /* remote segments */
    pthread_mutex_t peer_lock;
    cr__xfer_peer_t *peers[CR__XFER_MAX_PEERS]; /* by handle; guarded by peer_lock */
    size_t n_peers;

    /* batches */
    pthread_mutex_t batch_list_lock;
    struct cr_xfer_batch *batches;

    /* received notifications: a ring */
    pthread_mutex_t nq_lock;
    cr_xfer_notify_t *nq;
    size_t nq_head, nq_count;
    uint64_t nq_dropped;

    /* outgoing batch notifications: a queue served by the notifier thread */
    pthread_mutex_t out_lock;
    pthread_cond_t out_cv;
    cr__xfer_outmsg_t *out_head, *out_tail;
    size_t out_count;
    int out_stop;
    int notifier_started;
    pthread_t notifier;
};

/* memreg.c */
int cr__xfer_mem_init(cr_xfer_engine_t *e);
void cr__xfer_mem_fini(cr_xfer_engine_t *e);
/* Finds the registration containing [addr, addr+len) (caller holds mem_lock
 * for reading). Returns NULL if none. */
cr__memreg_t *cr__xfer_mem_find_locked(cr_xfer_engine_t *e, uint64_t addr, uint64_t len);
/* Bumps the local descriptor's version and publishes it (metadata mode).
 * Returns 0 or -errno from the metadata service. */
int cr__xfer_publish(cr_xfer_engine_t *e);
/* The local descriptor as JSON (malloc'd, caller frees): what p2p serves.
 * Returns 0 or -ENOMEM. */
int cr__xfer_local_desc_json(cr_xfer_engine_t *e, char **json, size_t *len);

/* engine.c */
/* Test hook: the state of the engine's transport called name, or NULL if it
 * is not running in this engine. */
void *cr__xfer_transport_state(cr_xfer_engine_t *e, const char *name);

/* topology.c */
int cr__xfer_topology_load(const char *path, const cr__xfer_config_t *cfg, cr__topology_t *t);
/* Parses the topology JSON (bounded by len). Returns 0 or -EINVAL/-ENOMEM;
 * t is empty on failure. */
int cr__xfer_topology_parse(const char *json, size_t len, const cr__xfer_config_t *cfg,
                            cr__topology_t *t);
void cr__xfer_topology_free(cr__topology_t *t);
void cr__xfer_topology_masks(const cr__topology_t *t, const cr__xfer_config_t *cfg,
                             const char *location, uint32_t *pref, uint32_t *sec);

/* peer.c */
cr__xfer_peer_t *cr__xfer_peer_get(cr_xfer_engine_t *e, cr_xfer_segment_t h);
int cr__xfer_peer_refresh(cr_xfer_engine_t *e, cr__xfer_peer_t *p);
void cr__xfer_peers_fini(cr_xfer_engine_t *e);
const struct cr_xfer_transport_ops *cr__xfer_transport_of(cr_xfer_engine_t *e, void **state,
                                                          cr__xfer_peer_t *p);

/* batch.c */
void cr__xfer_batches_fini(cr_xfer_engine_t *e);

/* notify.c */
int cr__xfer_notify_init(cr_xfer_engine_t *e);
void cr__xfer_notify_fini(cr_xfer_engine_t *e);
/* Queues a batch notification for the notifier thread (takes ownership of m). */
void cr__xfer_notify_enqueue(cr_xfer_engine_t *e, cr__xfer_outmsg_t *m);
/* Sends msg to peer now: through its transport's own notify if it has one,
 * else on the control channel. */
int cr__xfer_notify_send_peer(cr_xfer_engine_t *e, cr__xfer_peer_t *p, const void *msg,
                              size_t len);
/* Serving side: decodes the engine's notification payload
 * ([u16 from_len][from][msg]) and queues it. Returns 0 or -EINVAL. */
int cr__xfer_notify_payload_deliver(cr_xfer_engine_t *e, const void *payload, size_t len);

#endif
