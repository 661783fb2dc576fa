/* crescent Transfer Engine (TE): batched, zero-copy movement of registered
 * memory between processes and hosts.  Prefix: cr_xfer_.
 *
 * Model
 *   - An engine owns one local *segment*: the set of memory ranges this
 *     process registered. Its descriptor (name, NIC addresses + ports, host
 *     id, registered buffers) is published through the metadata service
 *     chosen by URI; peers read it to reach the segment.
 *   - Only registered memory is accessible, locally (as a source/destination)
 *     and remotely (as a target). The serving side validates every
 *     (address, length) against its registered buffers.
 *   - Requests are grouped in batches: submit, poll, free. Each request has
 *     its own status; one failing request never fails the others.
 *
 * Status convention: 0 success, negative errno on error (see common.h).
 * Threads: every function is thread-safe unless noted.
 */
#ifndef CRESCENT_TRANSFER_H
#define CRESCENT_TRANSFER_H

#include <stddef.h>
#include <stdint.h>

#include "crescent/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cr_xfer_engine cr_xfer_engine_t;
typedef struct cr_xfer_batch cr_xfer_batch_t;
/* Handle of an opened remote segment, >= 0. Valid until closed or the engine is destroyed. */
typedef int64_t cr_xfer_segment_t;

#define CR_XFER_NAME_MAX 256     /* segment names, including the NUL */
#define CR_XFER_LOCATION_MAX 64  /* location tags ("cpu:0"), including the NUL */
#define CR_XFER_NOTIFY_MAX 4096  /* bytes in one notification message */
#define CR_XFER_MAX_NICS 8       /* addresses one segment may publish */
#define CR_XFER_BATCH_MAX 65536  /* requests in one batch */

/* ---- engine ----------------------------------------------------------- */

enum cr_xfer_param_field {
    CR_XFER_PARAM_LOCAL_NAME = 1u << 0,
    CR_XFER_PARAM_METADATA_URI = 1u << 1,
    CR_XFER_PARAM_TRANSPORTS = 1u << 2,
    CR_XFER_PARAM_NICS = 1u << 3,
    CR_XFER_PARAM_TOPOLOGY_FILE = 1u << 4,
    CR_XFER_PARAM_PORT = 1u << 5,
    CR_XFER_PARAM_SLICE_SIZE = 1u << 6,
    CR_XFER_PARAM_IO_THREADS = 1u << 7,
    CR_XFER_PARAM_CONNS_PER_PATH = 1u << 8,
    CR_XFER_PARAM_TIMEOUT_MS = 1u << 9,
    CR_XFER_PARAM_STALL_TIMEOUT_MS = 1u << 10,
    CR_XFER_PARAM_CLUSTER_KEY_FILE = 1u << 24,
    CR_XFER_PARAM_TLS = 1u << 25,
};

/* Parameters of cr_xfer_engine_create(). Only fields whose bit is set in
 * field_mask are read; the others take the documented default. Strings are
 * copied; the caller keeps ownership. */
typedef struct cr_xfer_params {
    uint64_t field_mask;
    /* Name of the local segment, unique in the metadata service.
     * Default: "<first NIC>:<port>" (the only form allowed with "p2p"). */
    const char *local_name;
    /* "http://host:port/metadata", "etcd://host:2379[,host2:2379]", or "p2p"
     * (also accepted: "P2PHANDSHAKE"). Default "p2p". */
    const char *metadata_uri;
    /* Comma-separated transports to enable: "tcp", "shm". Default: every
     * transport built in ("tcp,shm"): shm is used automatically for peers on
     * the same host. Descriptor fetches and notifications do not need any
     * (they use the engine's control port). */
    const char *transports;
    /* Comma-separated local IP addresses (NICs) to listen on and publish.
     * Default "127.0.0.1". */
    const char *nics;
    /* JSON topology matrix: {"cpu:0": [["10.0.0.1"], ["10.0.1.1"]], ...}
     * mapping a location tag to [preferred NICs, secondary NICs]. Optional;
     * without it all NICs are preferred for every location. */
    const char *topology_file;
    /* The engine's TCP port (its control port, same on every NIC; the port
     * of the p2p name). The tcp transport moves data on an ephemeral port of
     * its own, published in the descriptor. Default 0: ephemeral. */
    uint16_t port;
    /* Slice size for the tcp transport in bytes (4 KiB .. 16 MiB). Default
     * 512 KiB (docs/benchmarks/transfer-core.md). */
    size_t slice_size;
    /* I/O threads (1..64). Default 2. The shm transport sizes its worker
     * pool with it; the tcp transport runs one sender and one receiver
     * thread per connection instead (see conns_per_path). */
    unsigned io_threads;
    /* TCP connections per (peer, NIC pair) path (1..16). Default 2. */
    unsigned conns_per_path;
    /* Per-request timeout in ms (a request not completed in this time fails
     * with -ETIMEDOUT). Default 30000. */
    unsigned timeout_ms;
    /* Security (docs/security.md): a file holding the cluster key; the
     * descriptors this engine publishes are signed with it and those it
     * reads must verify. Default (bit unset or ""): $CRESCENT_CLUSTER_KEY_FILE;
     * security off when that is unset too. A bad key file is -EINVAL. */
    const char *cluster_key_file;
    /* TLS with mutual certificates (docs/security.md): this member's
     * certificate, its private key (chmod 600) and the CA bundle that signs
     * every member's certificate, PEM files; all three or none. With them
     * every control-plane connection (master RPC, metadata HTTP, etcd) is
     * TLS and the peer must present a certificate of the CA. Default (bit
     * unset or all ""): $CRESCENT_TLS_CERT, $CRESCENT_TLS_KEY,
     * $CRESCENT_TLS_CA; TLS off when those are unset too. An unusable or
     * partial set is -EINVAL. */
    const char *tls_cert;
    const char *tls_key;
    const char *tls_ca;
    /* Fault isolation: when a peer has requests in flight and completes
     * none of their bytes for this long (ms), they fail with -ETIMEDOUT
     * (progress-based: a large transfer that keeps moving is never cut,
     * unlike timeout_ms). A frozen peer then costs its callers this long,
     * not timeout_ms. Default 1000 ($CRESCENT_XFER_STALL_MS overrides the
     * default), capped at timeout_ms; range 50 .. timeout_ms. */
    unsigned stall_timeout_ms;
} cr_xfer_params_t;

/* Creates an engine, starts its listeners and publishes its (empty)
 * segment. Returns 0 and *out, or -EINVAL (bad parameter), -EADDRINUSE,
 * -EHOSTUNREACH (metadata service unreachable), -ENOMEM. The caller destroys
 * *out with cr_xfer_engine_destroy(). */
CR_API int cr_xfer_engine_create(const cr_xfer_params_t *params, cr_xfer_engine_t **out);

/* Unpublishes the segment, fails in-flight requests with -ECANCELED, stops
 * threads, frees everything. Batches not yet freed are freed. NULL is a no-op.
 * No other call on the engine may run concurrently, except threads blocked
 * in cr_xfer_batch_wait(), which return -ECANCELED (and must not touch the
 * batch afterwards). */
CR_API void cr_xfer_engine_destroy(cr_xfer_engine_t *engine);

/* The name this engine's segment is published under (static for the
 * engine's lifetime). */
CR_API const char *cr_xfer_engine_name(const cr_xfer_engine_t *engine);

/* The engine's TCP port (the "rpc port"): its control channel, which serves
 * the p2p descriptor and receives notifications. */
CR_API uint16_t cr_xfer_engine_port(const cr_xfer_engine_t *engine);

/* ---- local memory ------------------------------------------------------ */

/* Registers [addr, addr+len) with a location tag (e.g. "cpu:0"; NULL =
 * "cpu:0") and republishes the segment descriptor. The memory stays owned by
 * the caller and must stay valid until unregistered. Overlapping an existing
 * registration is -EEXIST; len 0 or NULL addr is -EINVAL. Returns 0 on
 * success. */
CR_API int cr_xfer_mem_register(cr_xfer_engine_t *engine, void *addr, size_t len,
                                const char *location);

/* Allocates len bytes (rounded up to 4 KiB, every page allocated now) of
 * memory that same-host peers move bytes to and from with user-space copies
 * instead of the kernel's cross-process copy: the shm transport maps it
 * (docs/architecture/shm.md), which moves large blocks ~1.5x faster and
 * hashes them for free. Register it with cr_xfer_mem_register like any
 * memory. It is a sealed memfd mapped shared; children forked later do not
 * inherit it. It is mapped at a 2 MiB boundary and made of 2 MiB pages
 * where the kernel can (Linux >= 6.1; CRESCENT_SHM_THP=0: 4 KiB pages).
 * A len larger than the host's MemAvailable plus SwapFree is refused
 * before any page is touched (NULL, errno ENOMEM, logged; the environment's
 * CRESCENT_MEM_CHECK=0 skips that check). Returns NULL with errno set on
 * failure. Thread-safe. */
CR_API void *cr_xfer_mem_alloc_shared(size_t len);

/* Frees memory from cr_xfer_mem_alloc_shared (unregister it first).
 * Returns 0, or -ENOENT if addr did not come from there (NULL is a no-op). */
CR_API int cr_xfer_mem_free_shared(void *addr);

/* Unregisters the range that starts at addr. Waits for in-flight remote
 * accesses to it to finish. Returns 0 or -ENOENT. */
CR_API int cr_xfer_mem_unregister(cr_xfer_engine_t *engine, void *addr);

/* ---- remote segments --------------------------------------------------- */

/* Opens a remote (or the local) segment by name, looking its descriptor up
 * in the metadata service (cached; refreshed when stale or on a failure).
 * Opening the same name twice returns the same handle (reference counted).
 * Returns 0 and *out, -ENOENT (unknown segment), -EHOSTUNREACH, -ETIMEDOUT. */
CR_API int cr_xfer_segment_open(cr_xfer_engine_t *engine, const char *name,
                                cr_xfer_segment_t *out);

/* Drops one reference. Returns 0 or -ENOENT. */
CR_API int cr_xfer_segment_close(cr_xfer_engine_t *engine, cr_xfer_segment_t segment);

typedef struct cr_xfer_buffer_info {
    uint64_t addr;
    uint64_t len;
    char location[CR_XFER_LOCATION_MAX];
} cr_xfer_buffer_info_t;

/* Copies up to cap descriptors of the segment's registered buffers (as last
 * fetched) into out and sets *n to the total count. Returns 0 or -ENOENT. */
CR_API int cr_xfer_segment_buffers(cr_xfer_engine_t *engine, cr_xfer_segment_t segment,
                                   cr_xfer_buffer_info_t *out, size_t cap, size_t *n);

/* The transport that requests to this segment use: "tcp" or "shm". Returns a
 * static string, or NULL for an invalid handle. */
CR_API const char *cr_xfer_segment_transport(cr_xfer_engine_t *engine, cr_xfer_segment_t segment);

/* ---- batches ------------------------------------------------------------ */

typedef enum cr_xfer_opcode {
    CR_XFER_READ = 0,  /* remote target -> local_addr */
    CR_XFER_WRITE = 1, /* local_addr -> remote target */
} cr_xfer_opcode_t;

/* A failed READ leaves its destination with unspecified content. */
typedef struct cr_xfer_request {
    cr_xfer_opcode_t opcode;
    void *local_addr;          /* must lie in memory registered with this engine */
    cr_xfer_segment_t target;  /* from cr_xfer_segment_open() */
    uint64_t target_addr;      /* address in the target's registered memory */
    uint64_t length;           /* > 0 */
} cr_xfer_request_t;

typedef enum cr_xfer_state {
    CR_XFER_STATE_WAITING = 0, /* submitted, not finished */
    CR_XFER_STATE_COMPLETED = 1,
    CR_XFER_STATE_FAILED = 2,
} cr_xfer_state_t;

typedef struct cr_xfer_status {
    cr_xfer_state_t state;
    int error;                  /* 0, or the negative errno of a failed request */
    uint64_t bytes_transferred; /* bytes confirmed so far */
} cr_xfer_status_t;

/* Allocates a batch that can hold up to capacity requests (1..CR_XFER_BATCH_MAX).
 * Returns 0 and *out, or -EINVAL, -ENOMEM. Free with cr_xfer_batch_free(). */
CR_API int cr_xfer_batch_alloc(cr_xfer_engine_t *engine, size_t capacity, cr_xfer_batch_t **out);

/* Appends n requests to the batch and starts them. Requests get indices in
 * submission order (the first submit's first request is 0). A request that
 * is invalid (unregistered local buffer, unknown segment, zero or oversized
 * length, out-of-range target) is marked FAILED with its own error; the
 * others run. Returns 0, or -EINVAL (n exceeds remaining capacity: nothing
 * submitted), -ENOMEM, -ECANCELED (engine being destroyed). Per-request
 * errors: -EINVAL (opcode, zero or > 2^40 length), -EFAULT (local range not
 * registered, target range not in the segment's buffers), -ENOENT (segment
 * handle not open); later, from the transfer: -EFAULT (refused by the
 * target), -ETIMEDOUT, -EHOSTUNREACH / -ECONNRESET (peer gone), -ECANCELED. */
CR_API int cr_xfer_batch_submit(cr_xfer_batch_t *batch, const cr_xfer_request_t *reqs, size_t n);

/* Status of request `index`. Returns 0 and *out, or -EINVAL for a bad index. */
CR_API int cr_xfer_batch_status(cr_xfer_batch_t *batch, size_t index, cr_xfer_status_t *out);

/* Whole-batch status: WAITING while any request runs; else COMPLETED if all
 * succeeded, FAILED (error = first failure) otherwise; bytes summed. */
CR_API int cr_xfer_batch_status_all(cr_xfer_batch_t *batch, cr_xfer_status_t *out);

/* Blocks until every submitted request finished or timeout_ms passed
 * (< 0: the engine's request timeout bounds it anyway). Returns 0 when all
 * completed, the first request error when some failed, -ETIMEDOUT. */
CR_API int cr_xfer_batch_wait(cr_xfer_batch_t *batch, int timeout_ms);

/* Sends msg (<= CR_XFER_NOTIFY_MAX bytes) to segment target once every WRITE
 * of this batch to that target has landed (call after the last submit; the
 * message is sent when the writes complete, and dropped if any of them
 * failed). Returns 0 or -EINVAL. */
CR_API int cr_xfer_batch_notify(cr_xfer_batch_t *batch, cr_xfer_segment_t target,
                                const void *msg, size_t len);

/* Frees the batch. Returns -EBUSY (and frees nothing) while requests are
 * still in flight; 0 otherwise. */
CR_API int cr_xfer_batch_free(cr_xfer_batch_t *batch);

/* Blocking convenience: submits n requests as one batch and waits. results
 * (optional, n entries) receives each request's status (0 or -errno).
 * Returns 0 if all succeeded, else the first error. */
CR_API int cr_xfer_transfer_sync(cr_xfer_engine_t *engine, const cr_xfer_request_t *reqs,
                                 size_t n, int *results);

/* ---- notifications ----------------------------------------------------- */

typedef struct cr_xfer_notify {
    char from[CR_XFER_NAME_MAX]; /* sender's segment name */
    size_t len;
    char msg[CR_XFER_NOTIFY_MAX];
} cr_xfer_notify_t;

/* Sends a notification now (no ordering with data). Returns 0 or -errno. */
CR_API int cr_xfer_notify_send(cr_xfer_engine_t *engine, cr_xfer_segment_t target,
                               const void *msg, size_t len);

/* Pops up to cap received notifications, oldest first, into out; *n gets the
 * count (0 if none). The receive queue is bounded (oldest dropped when full,
 * counted). Returns 0. */
CR_API int cr_xfer_notify_poll(cr_xfer_engine_t *engine, cr_xfer_notify_t *out, size_t cap,
                               size_t *n);

#ifdef __cplusplus
}
#endif
#endif
