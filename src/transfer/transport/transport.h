/* Internal contract between the transfer engine core and its transports.
 *
 * A transport is one folder under src/transfer/transport/ that defines a
 * `const struct cr_xfer_transport_ops cr__xfer_<name>_ops` and one line in
 * transport/registry.c; nothing else in the engine names it. The engine
 * creates every enabled registered transport at setup and keeps
 * (ops, state) pairs (cr__xfer_transport_t).
 *
 * The engine validates each request (local buffer registered, segment open,
 * length 1..CR__XFER_MAX_REQUEST, target range inside the descriptor's
 * buffers) and then hands it to the transport chosen for the peer when the
 * segment was opened: the first transport, in registry order, whose
 * can_reach() accepts the peer's descriptor.
 *
 * Control messages (p2p descriptor fetch, notifications) are not a
 * transport's business: they travel on the engine's control channel
 * (src/transfer/control/). Every connection a transport accepts or makes
 * passes the engine's connection-setup hook first (cr__xfer_conn_accepted /
 * cr__xfer_conn_connected below: authentication).
 * A transport cuts a task into slices as it likes, moves the bytes, and
 * reports completion with cr__xfer_task_done() exactly once per task, also
 * on failure, on timeout and on destroy (-ECANCELED).
 *
 * The serving side of a transport must check every remote access with
 * cr__xfer_mem_pin() before touching local memory, and unpin after.
 */
#ifndef CR_TRANSFER_TRANSPORT_H
#define CR_TRANSFER_TRANSPORT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/auth/cap.h"
#include "crescent/transfer.h"
#include "transfer/segment_desc.h"

#define CR__XFER_MAX_REQUEST (1ull << 40) /* bytes in one request */

/* Engine configuration after defaults were applied (read-only for transports). */
typedef struct cr__xfer_config {
    char local_name[CR_XFER_NAME_MAX];
    char metadata_uri[512];
    int p2p; /* metadata_uri is "p2p"/"P2PHANDSHAKE" */
    uint32_t transports; /* bit i: registry entry i is enabled */
    uint32_t n_nics;
    char nics[CR_XFER_MAX_NICS][64];
    char topology_file[512];
    uint16_t port; /* requested; the bound port is in the local descriptor */
    size_t slice_size;
    unsigned io_threads;
    unsigned conns_per_path;
    unsigned timeout_ms;
    unsigned stall_ms; /* a peer with work in flight and no progress for this long fails it */
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
    /* engine-owned: the cached control-channel connection to this peer
     * (notifications), see control/control.h */
    pthread_mutex_t ctl_mu;
    int ctl_fd; /* -1: none; guarded by ctl_mu */
} cr__xfer_peer_t;

/* One request of a batch, as the transport sees it. */
typedef struct cr__xfer_task {
    cr_xfer_opcode_t opcode;
    char *local;          /* validated local address */
    uint64_t remote_addr; /* validated target address */
    uint64_t length;
    /* the capability granting this access (from the store's master), if
     * has_cap; copied at submit (a transport may still resend a piece after
     * the task completed, e.g. once the watchdog failed it); a transport
     * sends it with every piece of the task */
    int has_cap;
    uint8_t cap[CR__CAP_LEN];
    cr__xfer_peer_t *peer;
    uint64_t deadline_ns; /* monotonic; the transport fails the task with -ETIMEDOUT after it */
    /* 1: the submitter waits for this task right after submit returns and
     * nothing else is in its batch, so a transport may run it in the
     * submitting thread (submit then returns after the task completed)
     * instead of handing it to a worker and waking the waiter back. */
    int caller_waits;
    /* the submitter wants the crc32c of the local bytes (src/transfer/
     * checksum.h) and this task's transport hashes its opcode (crc_pieces):
     * it reports each piece moved with cr__xfer_task_crc_range while it is
     * in cache; the engine hashes the task if the pieces reported do not
     * cover it when it completes. Set by the engine before submit. */
    int want_crc;
    atomic_uint crc_acc;            /* engine-owned: XOR of the pieces' shifted raw crcs */
    atomic_uint_fast64_t crc_bytes; /* engine-owned: bytes reported */
    uint32_t crc;                   /* engine-owned: valid when crc_valid, set before state */
    int crc_valid;
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
    /* scratch for the transport that runs the task (e.g. a work queue link
     * and slice accounting) */
    struct cr__xfer_task *tp_next;
    uint64_t tp_carved;
    atomic_uint_fast64_t tp_settled;
    atomic_int tp_error;
} cr__xfer_task_t;

struct cr_xfer_transport_ops {
    const char *name; /* what CR_XFER_PARAM_TRANSPORTS lists and cr_xfer_segment_transport returns */
    /* Creates the transport's state for engine (listeners, threads). May fill
     * fields of the local descriptor (e.g. its port on each NIC). Returns 0 or -errno. */
    int (*create)(cr_xfer_engine_t *engine, const cr__xfer_config_t *cfg, cr__seg_desc_t *local,
                  void **state);
    /* Fails every outstanding task with -ECANCELED, stops threads, frees. */
    void (*destroy)(void *state);
    /* 1 if this transport can reach the peer described by d. */
    int (*can_reach)(void *state, const cr__seg_desc_t *d);
    /* Starts n tasks, all to the same peer. Never blocks for the data
     * movement itself, except that a transport may copy a lone small task
     * in the caller (e.g. one small task), finishing it before returning;
     * completion via cr__xfer_task_done(). Returns 0; a
     * negative return means none were started and the engine fails them. */
    int (*submit)(void *state, cr__xfer_peer_t *peer, cr__xfer_task_t **tasks, size_t n);
    /* Sends a notification to peer (engine payload, opaque to the transport).
     * Returns 0 once the peer acknowledged it, or -errno. May block up to the timeout.
     * Optional, for a transport with a path of its own for small messages;
     * NULL: the engine's control channel carries it. */
    int (*notify)(void *state, cr__xfer_peer_t *peer, const void *msg, size_t len);
    /* The peer is being closed/refreshed: drop per-peer state. Optional.
     * Tasks to the peer may still be running: they must keep what they use
     * alive on their own (e.g. a reference). */
    void (*peer_forget)(void *state, cr__xfer_peer_t *peer);
    /* Optional: the engine calls it for each transport that has it after
     * [addr, addr+len) was registered locally (before the descriptor is
     * republished), e.g. to advise huge pages. It must not fail the
     * registration. */
    void (*mem_registered)(void *state, void *addr, size_t len);
    /* Optional: the engine calls it for each transport that has it after
     * [addr, addr+len) was removed from the registrations (no new request
     * validates against it) and before cr_xfer_mem_unregister returns. A
     * transport whose initiators reach local memory without the serving
     * side's pins (its peers copy by themselves) revokes their access here
     * and returns once none of their copies is in flight in the range. */
    void (*mem_unregistered)(void *state, void *addr, size_t len);
    /* Optional: a thread is about to wait for batch b (cr_xfer_batch_wait).
     * A transport whose own threads copy may let it do queued work of b
     * here, in the waiting thread, and return when none of b's is left to
     * take (the waiter then sleeps until the rest completes). It must only
     * take work of b, and no more than a bounded piece at a time. */
    void (*help)(void *state, struct cr_xfer_batch *b);
    /* Opcodes (bit 1u << CR_XFER_READ / CR_XFER_WRITE) whose tasks this
     * transport hashes piece by piece (cr__xfer_task_crc_range) when the
     * submitter wants checksums (src/transfer/checksum.h); want_crc is set
     * only on those. 0: none; the submitter then hashes on its own, off the
     * transport's threads (for a transport whose few threads are the
     * critical path, e.g. one sender and receiver per connection, a hash
     * there slows every piece behind it). */
    unsigned crc_pieces;
};

/* A transport as the engine holds it: its ops and the state create() made. */
typedef struct cr__xfer_transport {
    const struct cr_xfer_transport_ops *ops;
    void *state;
} cr__xfer_transport_t;

/* The registry (transport/registry.c): every transport built in, in order of
 * preference. */
extern const struct cr_xfer_transport_ops *const cr__xfer_transport_registry[];
extern const size_t cr__xfer_transport_registry_len;
#define CR__XFER_MAX_TRANSPORTS 8 /* bound on the registry */

/* ---- services the engine core provides to transports ------------------- */

/* Reports a task's final outcome (err 0 or -errno) and the bytes moved.
 * Must be called exactly once per task; safe from any thread. */
void cr__xfer_task_done(cr__xfer_task_t *task, int err);

/* Adds confirmed bytes to a task's progress (optional, for status polls). */
void cr__xfer_task_progress(cr__xfer_task_t *task, uint64_t bytes);

/* For a task with want_crc: hashes the local bytes [off, off + len) of the
 * task, which were just moved successfully (for a READ they landed, for a
 * WRITE they were sent), while they are still in this core's cache. Call it
 * at most once per byte, before the cr__xfer_task_done that ends the task;
 * a task not wholly covered is hashed by the engine at done. No-op without
 * want_crc. */
void cr__xfer_task_crc_range(cr__xfer_task_t *task, uint64_t off, uint64_t len);
/* The same with the piece's raw register from 0 (cr__crc32c_raw(0, local +
 * off, len)) computed by the transport already, e.g. a WRITE's source
 * hashed just before its copy so that the copy reads it from cache. */
void cr__xfer_task_crc_add(cr__xfer_task_t *task, uint64_t off, uint64_t len, uint32_t raw);

/* Serving side: checks that [addr, addr+len) lies inside one registered
 * local buffer and pins it against unregistration. Returns 0 (then call
 * cr__xfer_mem_unpin with the same token) or -EFAULT. */
int cr__xfer_mem_pin(cr_xfer_engine_t *engine, uint64_t addr, uint64_t len, void **token);
void cr__xfer_mem_unpin(cr_xfer_engine_t *engine, void *token);

/* Serving side, per-object capabilities (transfer/capability.c,
 * docs/security.md "Capabilities"): before touching memory for a remote
 * READ (write = 0) or WRITE of [addr, addr + len), a transport calls
 * cr__xfer_cap_check with the capability the request carried (NULL if
 * none) and a cache owned by the connection (zero it to initialise; it
 * remembers a few verified capabilities so a run of slices under one grant
 * costs one HMAC). Returns 0 when the engine checks no capabilities (no key
 * installed: security off or not a store segment) or when cap is genuine,
 * of the engine's current key, not older than the newest master epoch seen,
 * unexpired and covers the access; else -EACCES. */
#define CR__XFER_CAP_CACHE 4
typedef struct cr__xfer_cap_cache {
    struct {
        uint8_t raw[CR__CAP_LEN];
        cr__cap_t cap;
        unsigned gen; /* 0: empty (the engine's generation starts at 1) */
    } e[CR__XFER_CAP_CACHE];
    unsigned next;
} cr__xfer_cap_cache_t;
int cr__xfer_cap_check(cr_xfer_engine_t *engine, cr__xfer_cap_cache_t *cache, const uint8_t *cap,
                       int write, uint64_t addr, uint64_t len);
/* 1 if engine checks capabilities. A transport that cannot check each
 * access on the serving side (one where the initiator copies by itself) must
 * not offer such an engine's memory: peers then use one that can. */
int cr__xfer_cap_enforced(cr_xfer_engine_t *engine);

/* Serving side: a notification arrived from segment `from`. */
void cr__xfer_notify_deliver(cr_xfer_engine_t *engine, const char *from, const void *msg,
                             size_t len);

/* Connection-setup hook (authentication), called on every connection of
 * the engine right after it is established and before any protocol byte:
 * by the accepting side with cr__xfer_conn_accepted (in the thread that
 * will serve the connection, not the acceptor), by the connecting side with
 * cr__xfer_conn_connected. timeout_ms bounds the whole exchange. Returns 0
 * to go on, or -errno: the caller then closes the fd and treats it like a
 * failed connect (client) or a rejected client (server). */
int cr__xfer_conn_accepted(cr_xfer_engine_t *engine, int fd, int timeout_ms);
int cr__xfer_conn_connected(cr_xfer_engine_t *engine, int fd, int timeout_ms);
/* The accepting side's first-frame deadline (ms, capped by timeout_ms): a
 * connection that proved nothing (security on) or sent nothing (off) by
 * then is closed. */
#define CR__XFER_FIRST_FRAME_MS 5000
/* Per-source connection caps: a listener serving at most max connections
 * refuses one more from an address that already holds max / 2 of them
 * (CR__XFER_PER_SOURCE_DIV), whatever the security mode. The servers keep
 * each connection's source and compare with cr__net_same_source
 * (common/net.h). */
#define CR__XFER_PER_SOURCE_DIV 2

/* The engine's cluster key (common/auth), NULL when security is off. */
struct cr__auth;
const struct cr__auth *cr__xfer_engine_auth(const cr_xfer_engine_t *engine);

/* Copies the peer's current NIC list (under the engine's peer lock; the
 * descriptor may be refreshed concurrently). Returns the number of NICs
 * copied (<= cap). */
uint32_t cr__xfer_peer_nics(cr__xfer_peer_t *peer, cr__seg_nic_t *out, uint32_t cap);

#endif
