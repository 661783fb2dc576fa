/* Internal contract between the transfer engine core and its transports.
 *
 * The engine validates each request (local buffer registered, segment open,
 * length 1..CR__XFER_MAX_REQUEST, target range inside the descriptor's
 * buffers) and then hands it to the transport chosen for the peer when the
 * segment was opened (shm if enabled and peer on the same host, else tcp).
 * A transport cuts a task into slices as it likes, moves the bytes, and
 * reports completion with cr__xfer_task_done() exactly once per task, also
 * on failure, on timeout and on destroy (-ECANCELED).
 *
 * The serving side of a transport must check every remote access with
 * cr__xfer_mem_pin() before touching local memory, and unpin after.
 */
#ifndef CR_TRANSFER_TRANSPORT_H
#define CR_TRANSFER_TRANSPORT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "crescent/transfer.h"
#include "transfer/segment_desc.h"

#define CR__XFER_MAX_REQUEST (1ull << 40) /* bytes in one request */

/* Engine configuration after defaults were applied (read-only for transports). */
typedef struct cr__xfer_config {
    char local_name[CR_XFER_NAME_MAX];
    char metadata_uri[512];
    int p2p; /* metadata_uri is "p2p"/"P2PHANDSHAKE" */
    int enable_tcp, enable_shm;
    uint32_t n_nics;
    char nics[CR_XFER_MAX_NICS][64];
    char topology_file[512];
    uint16_t port; /* requested; the bound port is in the local descriptor */
    size_t slice_size;
    unsigned io_threads;
    unsigned conns_per_path;
    unsigned timeout_ms;
} cr__xfer_config_t;

/* A remote segment as the engine knows it (one per open name). */
typedef struct cr__xfer_peer {
    cr__seg_desc_t desc;                          /* guarded by the engine's peer lock */
    const struct cr_xfer_transport_ops *transport; /* chosen at open */
    void *transport_peer; /* transport's per-peer state, created lazily by the transport */
    int64_t handle;
    atomic_int refs;
    /* added by te-core (engine-owned): */
    char name[CR_XFER_NAME_MAX]; /* segment name as opened */
    atomic_int stale;            /* refetch the descriptor before the next use */
    cr_xfer_engine_t *engine;
    /* added by te-shm: the shm transport's per-peer state. shm does not use
     * transport_peer, because tcp also serves shm peers (notifications over
     * its control path) and keeps its own state in transport_peer. */
    void *shm_peer;
} cr__xfer_peer_t;

/* One request of a batch, as the transport sees it. */
typedef struct cr__xfer_task {
    cr_xfer_opcode_t opcode;
    char *local;          /* validated local address */
    uint64_t remote_addr; /* validated target address */
    uint64_t length;
    cr__xfer_peer_t *peer;
    uint64_t deadline_ns; /* monotonic; the transport fails the task with -ETIMEDOUT after it */
    void *transport_priv; /* free for the transport's use (e.g. slice counters) */
    /* 1: the submitter waits for this task right after submit returns and
     * nothing else is in its batch, so a transport may run it in the
     * submitting thread (submit then returns after the task completed)
     * instead of handing it to a worker and waking the waiter back. */
    int caller_waits;
    /* engine-owned: */
    struct cr_xfer_batch *batch;
    uint32_t index;
    atomic_int state;           /* cr_xfer_state_t */
    atomic_int error;
    atomic_uint_fast64_t bytes; /* confirmed bytes, for progress */
    /* added by te-core. Local NICs (bit i = cfg->nics[i]) the engine's
     * topology prefers for the local buffer's location, and the secondary
     * ones; a transport with several paths uses preferred NICs while any of
     * them works, then secondary, then any. */
    uint32_t nic_pref_mask, nic_sec_mask;
    /* scratch for the transport that runs the task (tcp uses them for its
     * work queue and slice accounting; another transport may use them too) */
    struct cr__xfer_task *tp_next;
    uint64_t tp_carved;
    atomic_uint_fast64_t tp_settled;
    atomic_int tp_error;
} cr__xfer_task_t;

struct cr_xfer_transport_ops {
    const char *name; /* "tcp", "shm" */
    /* Creates the transport's state for engine (listeners, threads). May fill
     * fields of the local descriptor (e.g. tcp fills NIC ports). Returns 0 or -errno. */
    int (*create)(cr_xfer_engine_t *engine, const cr__xfer_config_t *cfg, cr__seg_desc_t *local,
                  void **state);
    /* Fails every outstanding task with -ECANCELED, stops threads, frees. */
    void (*destroy)(void *state);
    /* 1 if this transport can reach the peer described by d. */
    int (*can_reach)(void *state, const cr__seg_desc_t *d);
    /* Starts n tasks, all to the same peer. Never blocks for the data
     * movement itself, except that a transport may copy a lone small task
     * in the caller (shm: one task <= 64 KiB), finishing it before returning;
     * completion via cr__xfer_task_done(). Returns 0; a
     * negative return means none were started and the engine fails them. */
    int (*submit)(void *state, cr__xfer_peer_t *peer, cr__xfer_task_t **tasks, size_t n);
    /* Sends a notification to peer (engine payload, opaque to the transport).
     * Returns 0 once the peer acknowledged it, or -errno. May block up to the timeout.
     * May be NULL (shm sets it NULL): the engine then sends the notification
     * through tcp to the same peer (its descriptor's NICs). */
    int (*notify)(void *state, cr__xfer_peer_t *peer, const void *msg, size_t len);
    /* The peer is being closed/refreshed: drop per-peer state. Optional.
     * (shm: in-flight tasks keep their own reference, so this is safe while
     * tasks to the peer are still running.) */
    void (*peer_forget)(void *state, cr__xfer_peer_t *peer);
    /* added by te-shm. Optional: the engine calls it for each transport that
     * has it after [addr, addr+len) was registered locally (before the
     * descriptor is republished). It must not fail the registration. shm
     * backs the region's 2 MiB-aligned interior with transparent huge pages
     * (MADV_HUGEPAGE + MADV_COLLAPSE): process_vm_readv/writev pin and copy
     * 4 KiB pages at about 0.4x memcpy, huge pages at about 0.9x. */
    void (*mem_registered)(void *state, void *addr, size_t len);
};

extern const struct cr_xfer_transport_ops cr__xfer_tcp_ops;
extern const struct cr_xfer_transport_ops cr__xfer_shm_ops;

/* ---- services the engine core provides to transports ------------------- */

/* Reports a task's final outcome (err 0 or -errno) and the bytes moved.
 * Must be called exactly once per task; safe from any thread. */
void cr__xfer_task_done(cr__xfer_task_t *task, int err);

/* Adds confirmed bytes to a task's progress (optional, for status polls). */
void cr__xfer_task_progress(cr__xfer_task_t *task, uint64_t bytes);

/* Serving side: checks that [addr, addr+len) lies inside one registered
 * local buffer and pins it against unregistration. Returns 0 (then call
 * cr__xfer_mem_unpin with the same token) or -EFAULT. */
int cr__xfer_mem_pin(cr_xfer_engine_t *engine, uint64_t addr, uint64_t len, void **token);
void cr__xfer_mem_unpin(cr_xfer_engine_t *engine, void *token);

/* Serving side: a notification arrived from segment `from`. */
void cr__xfer_notify_deliver(cr_xfer_engine_t *engine, const char *from, const void *msg,
                             size_t len);

/* The local descriptor as JSON (malloc'd, caller frees): what p2p serves. */
int cr__xfer_local_desc_json(cr_xfer_engine_t *engine, char **json, size_t *len);

/* The engine's configuration. */
const cr__xfer_config_t *cr__xfer_engine_config(const cr_xfer_engine_t *engine);

/* added by te-core: copies the peer's current NIC list (under the engine's
 * peer lock; the descriptor may be refreshed concurrently). Returns the
 * number of NICs copied (<= cap). */
uint32_t cr__xfer_peer_nics(cr__xfer_peer_t *peer, cr__seg_nic_t *out, uint32_t cap);

/* added by te-core: the tcp transport's client for the p2p GET_DESC control
 * message: fetches the descriptor JSON served by host:port (malloc'd, NUL
 * terminated, caller frees). Returns 0, -ECONNREFUSED/-ETIMEDOUT/-EPROTO... */
int cr__xfer_tcp_fetch_desc(const char *host, uint16_t port, int timeout_ms, char **json,
                            size_t *len);

/* added by te-core: sends a notification over tcp to a peer whatever its
 * data transport is (used when a transport's notify is NULL). */
int cr__xfer_tcp_notify_peer(void *tcp_state, cr__xfer_peer_t *peer, const void *msg,
                             size_t len);

#endif
