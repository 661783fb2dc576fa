/* crescent Store client: one object that issues requests to the distributed
 * KV-cache store and, with a non-zero global segment size, contributes
 * memory to the pool (Mooncake's client has both roles).  Prefix: cr_store_.
 *
 * Model
 *   - The master (crescent-master) keeps only metadata: which keys exist,
 *     where their replicas live, leases. Data moves client-to-client through
 *     the Transfer Engine (transfer.h): a put writes every replica straight
 *     into the memory other clients contributed, a get reads one replica.
 *   - A client with global_segment_size > 0 allocates that much memory,
 *     pre-faults it, registers it with its TE engine and mounts it at the
 *     master. A background thread heartbeats the master and remounts when the
 *     master no longer knows the client (e.g. after a master restart).
 *   - Zero-copy calls (put_from, get_into, batch_*) take memory the caller
 *     registered with cr_store_register_buffer(). Copying calls (put, get)
 *     take any memory and stage it through the client's own local buffer
 *     (local_buffer_size bytes, registered at create), in chunks if needed.
 *
 * Status convention: 0 success, negative error. Store errors are Mooncake's
 * ErrorCode values (common.h): CR_E_INVALID_PARAMS (-600),
 * CR_E_OBJECT_NOT_FOUND (-704), CR_E_OBJECT_ALREADY_EXISTS (-705),
 * CR_E_OBJECT_HAS_LEASE (-706), CR_E_NO_AVAILABLE_HANDLE (-200, pool full),
 * CR_E_TRANSFER_FAIL (-800), CR_E_RPC_FAIL (-900), CR_E_BUFFER_OVERFLOW (-10,
 * caller's buffer too small), CR_E_LEASE_EXPIRED (-707, a read outlived its
 * lease and was discarded), CR_E_INVALID_KEY (-400); -ENOMEM on allocation
 * failure. The full list is CR_STORE_ERRC_MAP in common.h; cr_strerror()
 * describes any status, cr_err_name() names it.
 *
 * Consistency (the stale-read contract): bytes returned by a get are always
 * bytes some completed put of that key wrote. A get that cannot prove this
 * (its lease expired before the data arrived, every replica failed) returns
 * an error and leaves the caller's buffer content unspecified, never a
 * success with other bytes.
 *
 * Threads: every function is thread-safe; one client may be shared by many
 * threads. Failures of one key in a batch never fail the other keys.
 */
#ifndef CRESCENT_STORE_H
#define CRESCENT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "crescent/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cr_store cr_store_t;

#define CR_STORE_KEY_MAX 4096        /* bytes in a key, excluding the NUL */
#define CR_STORE_BATCH_MAX 4096      /* keys in one batch call */
#define CR_STORE_REPLICA_MAX 8       /* replica_num upper bound */
#define CR_STORE_PREFERRED_MAX 8     /* preferred segments in one config */
#define CR_STORE_VALUE_MAX (1ull << 36) /* 64 GiB: bound on one object */

/* ---- client ----------------------------------------------------------- */

enum cr_store_param_field {
    CR_STORE_PARAM_LOCAL_HOSTNAME = 1u << 0,
    CR_STORE_PARAM_METADATA_URI = 1u << 1,
    CR_STORE_PARAM_MASTER_ADDR = 1u << 2,
    CR_STORE_PARAM_GLOBAL_SEGMENT_SIZE = 1u << 3,
    CR_STORE_PARAM_LOCAL_BUFFER_SIZE = 1u << 4,
    CR_STORE_PARAM_PROTOCOL = 1u << 5,
    CR_STORE_PARAM_DEVICE_NAMES = 1u << 6,
    CR_STORE_PARAM_RPC_TIMEOUT_MS = 1u << 7,
    CR_STORE_PARAM_TRANSFER_TIMEOUT_MS = 1u << 8,
    CR_STORE_PARAM_HEARTBEAT_MS = 1u << 9,
    CR_STORE_PARAM_TE_PORT = 1u << 10,
    CR_STORE_PARAM_FRESH_NAME = 1u << 11,
    CR_STORE_PARAM_CLUSTER_KEY_FILE = 1u << 24,
    CR_STORE_PARAM_TLS = 1u << 25,
};

/* Parameters of cr_store_create(). Only fields whose bit is set in
 * field_mask are read; the others take the documented default. Strings are
 * copied; the caller keeps ownership. */
typedef struct cr_store_params {
    uint64_t field_mask;
    /* This client's host address: the NIC its TE listens on unless
     * device_names is set. The TE segment is named "<first NIC>:<TE port>"
     * (unique per process; see cr_store_segment_name()). Default
     * "127.0.0.1". */
    const char *local_hostname;
    /* TE metadata service: "http://host:port/metadata", "etcd://...", or
     * "p2p". Default "p2p". */
    const char *metadata_uri;
    /* Master address "host:port". Default "127.0.0.1:50051". */
    const char *master_addr;
    /* Bytes of memory this client contributes to the pool (0 = pure
     * client). Rounded up to 4 KiB. Default 0. */
    uint64_t global_segment_size;
    /* Bytes of registered staging memory for the copying put/get.
     * Default 16 MiB, minimum 64 KiB. */
    uint64_t local_buffer_size;
    /* TE transports: "tcp" (default), "shm" or "tcp,shm" (shm is then used
     * for peers on the same host); anything else (e.g. "rdma") is
     * CR_E_INVALID_PARAMS. */
    const char *protocol;
    /* Comma-separated local IP addresses (NICs) for the TE. Default:
     * local_hostname. */
    const char *device_names;
    /* Bound on one master RPC in ms. Default 5000. */
    unsigned rpc_timeout_ms;
    /* Bound on one data transfer in ms. Default 30000. */
    unsigned transfer_timeout_ms;
    /* Heartbeat period in ms. Default 1000. */
    unsigned heartbeat_ms;
    /* TE listening port (0 = ephemeral). Default 0. */
    uint16_t te_port;
    /* Security (docs/security.md): a file holding the cluster key. With a
     * key, every master RPC connection and every TE peer proves membership
     * and the master/peers must prove it back; metadata is signed and
     * verified. Default (bit unset or ""): $CRESCENT_CLUSTER_KEY_FILE, and
     * security off when that is unset too. A bad key file is
     * CR_E_INVALID_PARAMS. */
    const char *cluster_key_file;
    /* TLS with mutual certificates (docs/security.md): this member's
     * certificate, its private key (chmod 600) and the CA bundle that signs
     * every member's certificate, PEM files; all three or none. With them
     * every control-plane connection (master RPC, metadata HTTP, etcd) is
     * TLS and the peer must present a certificate of the CA. Default (bit
     * unset or all ""): $CRESCENT_TLS_CERT, $CRESCENT_TLS_KEY,
     * $CRESCENT_TLS_CA; TLS off when those are unset too. An unusable or
     * partial set is CR_E_INVALID_PARAMS. */
    const char *tls_cert;
    const char *tls_key;
    const char *tls_ca;
    /* Nonzero: the segment name must be free. A name the master still
     * holds for the readers and writers of a dropped segment of the same
     * name (a recent client on the same host and port), whole or only the
     * blocks they may touch, then fails cr_store_create with -EADDRINUSE,
     * as a busy port does, so a caller that picks ports at random tries
     * another (peers may still know the old process under that name).
     * Default 0: the create succeeds and warns; the held blocks (usually
     * all that is held) or, when the master could not keep them apart, the
     * whole segment take no allocation until the hold ends. */
    int fresh_name;
} cr_store_params_t;

/* Creates a client: starts its TE engine, registers its local buffer,
 * connects to the master and, if global_segment_size > 0, allocates,
 * pre-faults, registers and mounts the contributed segment, then starts the
 * heartbeat thread. Returns 0 and *out, or CR_E_INVALID_PARAMS (bad
 * parameter), CR_E_RPC_FAIL (master unreachable), -ENOMEM (also, logged and
 * before any page is touched, when global_segment_size + local_buffer_size
 * exceed the host's MemAvailable plus SwapFree; CRESCENT_MEM_CHECK=0 in the
 * environment skips that check), or a TE error (-EADDRINUSE,
 * -EHOSTUNREACH). Destroy *out with cr_store_destroy(). */
CR_API int cr_store_create(const cr_store_params_t *params, cr_store_t **out);

/* Unmounts the contributed segment (its objects become misses), stops the
 * heartbeat thread and the TE engine and frees everything. Must not race
 * with other calls on the same client. NULL is a no-op. */
CR_API void cr_store_destroy(cr_store_t *store);

/* The TE segment name this client publishes (static for its lifetime). */
CR_API const char *cr_store_segment_name(const cr_store_t *store);

/* ---- registered memory ---------------------------------------------------- */

/* Registers [addr, addr+len) for the zero-copy calls. The memory stays
 * owned by the caller and must stay valid until unregistered. Returns 0,
 * CR_E_INVALID_PARAMS (NULL, 0 length, overlapping a registration) or a
 * TE error. */
CR_API int cr_store_register_buffer(cr_store_t *store, void *addr, size_t len);

/* Unregisters the range that starts at addr (waits for transfers using it).
 * Returns 0 or CR_E_INVALID_PARAMS if addr starts no registration. */
CR_API int cr_store_unregister_buffer(cr_store_t *store, void *addr);

/* ---- extra segments (Mooncake's mount_segment) ---------------------------- */

#define CR_STORE_EXTRA_SEGMENTS_MAX 64     /* extra segments one client mounts */
#define CR_STORE_EXTRA_GRACE_MAX_MS 3600000u /* bound on an unmount's grace period */

/* Mounts [addr, addr+len) -- memory the caller owns, e.g. a file mapping
 * or anonymous memory -- as one more segment of this client, besides the
 * global_segment_size one: the master places objects in it like in any
 * segment. addr and len must be 4 KiB aligned, len 4 KiB..1 TiB, and the
 * range must not overlap memory registered with this client. The memory
 * is registered with the client's TE and must stay valid until
 * cr_store_segment_unmount() returns. The segment's name
 * ("<segment name>#<n>", unique for the client's lifetime, shown in replica
 * descriptors) is written to name (cap >= CR_STORE_SEGMENT_NAME_MAX). The
 * heartbeat remounts it with the main segment after a master restart.
 * Returns 0, CR_E_INVALID_PARAMS, CR_E_UNAVAILABLE_IN_CURRENT_STATUS
 * (CR_STORE_EXTRA_SEGMENTS_MAX mounted), a master error (CR_E_RPC_FAIL,
 * CR_E_NO_AVAILABLE_HANDLE ...) or -ENOMEM. A failed call leaves nothing
 * mounted or registered. */
CR_API int cr_store_segment_mount(cr_store_t *store, void *addr, size_t len, char *name,
                                  size_t cap);

/* Unmounts a segment cr_store_segment_mount() mounted. The master drops
 * every replica on it at once: objects that keep another replica stay
 * readable, the others are removed (later gets miss). The memory then
 * stays registered for grace_ms (<= CR_STORE_EXTRA_GRACE_MAX_MS) so readers
 * that located a replica before the unmount finish reading intact bytes;
 * unregistering waits for remote accesses in flight and fails later ones
 * (a get then fails, it never returns other bytes). When this returns the
 * caller may free the memory. Returns 0, CR_E_SEGMENT_NOT_FOUND (not an
 * extra segment of this client), CR_E_INVALID_PARAMS or a master error
 * (the segment then stays mounted; retry). */
CR_API int cr_store_segment_unmount(cr_store_t *store, const char *name, unsigned grace_ms);

/* ---- replication ---------------------------------------------------------- */

/* How a put places its replicas. NULL config = the defaults. */
/* Bits of cr_store_replicate_config_t.field_mask: a field is read only when
 * its bit is set. A field_mask of 0 reads the four fields below that
 * existed before the mask (CR_STORE_REPL_V1), whose zero values are their
 * defaults, so zero-initialised configs keep their meaning; fields added
 * later are read only with their bit. */
#define CR_STORE_REPL_REPLICA_NUM (1ull << 0)
#define CR_STORE_REPL_PREFERRED_SEGMENTS (1ull << 1) /* preferred_segments + n_preferred */
#define CR_STORE_REPL_SOFT_PIN (1ull << 2)
#define CR_STORE_REPL_HARD_PIN (1ull << 3)
#define CR_STORE_REPL_V1                                                                           \
    (CR_STORE_REPL_REPLICA_NUM | CR_STORE_REPL_PREFERRED_SEGMENTS | CR_STORE_REPL_SOFT_PIN |       \
     CR_STORE_REPL_HARD_PIN)
#define CR_STORE_REPL_UPSERT (1ull << 4) /* upsert (not in V1: set it to read the field) */

typedef struct cr_store_replicate_config {
    uint64_t field_mask; /* CR_STORE_REPL_* bits; 0 = CR_STORE_REPL_V1 */
    /* Replicas, each on a distinct segment (1..CR_STORE_REPLICA_MAX).
     * 0 means 1. */
    uint32_t replica_num;
    /* Segment names to place replicas on first (may be NULL when
     * n_preferred is 0); at most CR_STORE_PREFERRED_MAX. */
    const char *const *preferred_segments;
    size_t n_preferred;
    /* Soft pin: evicted only after unpinned objects (and not before the
     * master's soft-pin TTL). */
    int soft_pin;
    /* Hard pin: never evicted; only remove frees it. */
    int hard_pin;
    /* Upsert (read with CR_STORE_REPL_UPSERT): a put of a key that exists
     * replaces its value instead of
     * keeping it. The new version is written beside the old one and
     * published in one master step at the end of the put: readers see the
     * old value or the new one, never neither, never a mix; a reader that
     * holds the old version keeps reading intact bytes until its lease
     * ends. A put returns CR_E_OBJECT_ALREADY_EXISTS when another upsert of
     * the key is still being written. */
    int upsert;
} cr_store_replicate_config_t;

/* ---- single-key operations ------------------------------------------------ */

/* Stores a copy of value[0..len) under key (1..CR_STORE_KEY_MAX bytes,
 * NUL-terminated). value may be any memory; it is staged through the local
 * buffer. The key becomes visible only when every replica is written; on
 * any failure the put is revoked and nothing is visible. Returns 0,
 * CR_E_OBJECT_ALREADY_EXISTS, CR_E_NO_AVAILABLE_HANDLE (pool full even
 * after eviction), CR_E_INVALID_KEY, CR_E_INVALID_PARAMS (len 0 or over
 * CR_STORE_VALUE_MAX, replica_num too large), CR_E_TRANSFER_FAIL,
 * CR_E_LEASE_EXPIRED (the put outlived the master's put deadline and was
 * reclaimed), CR_E_RPC_FAIL (for a lost PutEnd reply the key may be
 * visible anyway). */
CR_API int cr_store_put(cr_store_t *store, const char *key, const void *value, size_t len,
                        const cr_store_replicate_config_t *config);

/* Zero-copy put: like cr_store_put() but buf must lie in memory registered
 * with cr_store_register_buffer() (else CR_E_INVALID_PARAMS); no staging. */
CR_API int cr_store_put_from(cr_store_t *store, const char *key, const void *buf, size_t len,
                             const cr_store_replicate_config_t *config);

/* Copies the value of key into buf (any memory, cap bytes) and sets *len.
 * Returns 0, CR_E_OBJECT_NOT_FOUND, CR_E_BUFFER_OVERFLOW (cap smaller than
 * the value; *len untouched, use cr_store_get_size), CR_E_LEASE_EXPIRED,
 * CR_E_TRANSFER_FAIL (every replica failed), CR_E_RPC_FAIL, CR_E_INVALID_KEY. */
CR_API int cr_store_get(cr_store_t *store, const char *key, void *buf, size_t cap, size_t *len);

/* Like cr_store_get() but allocates the buffer: on success *out is a
 * malloc'd buffer of *len bytes that the caller frees with free(). */
CR_API int cr_store_get_alloc(cr_store_t *store, const char *key, void **out, size_t *len);

/* Zero-copy get: buf must lie in registered memory (cap bytes). Same
 * returns as cr_store_get(). */
CR_API int cr_store_get_into(cr_store_t *store, const char *key, void *buf, size_t cap,
                             size_t *len);

/* Size of the value of key in *size. Returns 0, CR_E_OBJECT_NOT_FOUND,
 * CR_E_INVALID_KEY, CR_E_RPC_FAIL. */
CR_API int cr_store_get_size(cr_store_t *store, const char *key, uint64_t *size);

/* 1 if key exists (completely written), 0 if not, or a negative error.
 * Like Mooncake's ExistKey, an object found gets a read lease (a get would
 * give it the same): it is neither evicted nor removed without force for
 * the lease time, so a read that follows the check finds it. A key a
 * restarted master restored (journal, takeover) with every replica on a
 * node that has not mounted again is 0, like Mooncake's inaccessible
 * object: a put of the key then stores the new value. */
CR_API int cr_store_exist(cr_store_t *store, const char *key);

/* Removes key. Without force, a key with a live read lease is not removed
 * (CR_E_OBJECT_HAS_LEASE); with force it is (readers holding a lease then
 * get an error, never other bytes). Returns 0, CR_E_OBJECT_NOT_FOUND,
 * CR_E_OBJECT_HAS_LEASE, CR_E_INVALID_KEY, CR_E_RPC_FAIL. */
CR_API int cr_store_remove(cr_store_t *store, const char *key, int force);

/* Removes n keys (1..CR_STORE_BATCH_MAX) in one master round trip, each as
 * cr_store_remove(key, force) would: results[i] gets that key's status
 * (an invalid key CR_E_INVALID_KEY, alone). Returns 0 if every key was
 * removed, else the first failing key's status (a call the master did not
 * answer: CR_E_RPC_FAIL in each sent key's result); CR_E_INVALID_PARAMS
 * (NULL arrays, n out of range) with results untouched. */
CR_API int cr_store_batch_remove(cr_store_t *store, const char *const *keys, size_t n,
                                 int force, int *results);

/* Removes every key without a live lease; *removed (optional) gets the
 * count. Returns 0 or CR_E_RPC_FAIL. */
CR_API int cr_store_remove_all(cr_store_t *store, uint64_t *removed);

/* ---- batches (one master round-trip per phase, one TE batch for all keys) ---- */

/* Zero-copy puts of n keys (1..CR_STORE_BATCH_MAX): keys[i] from
 * bufs[i][0..lens[i]) (registered memory). results[i] gets each key's
 * status (as cr_store_put_from). Returns 0 if every key succeeded, else the
 * first failing key's status; CR_E_INVALID_PARAMS (NULL arrays, n out of
 * range) with results untouched. */
CR_API int cr_store_batch_put_from(cr_store_t *store, const char *const *keys,
                                   const void *const *bufs, const size_t *lens, size_t n,
                                   const cr_store_replicate_config_t *config, int *results);

/* Zero-copy gets of n keys into bufs[i] (registered, caps[i] bytes).
 * lens[i] gets the value size of each successful key; results[i] each
 * key's status (as cr_store_get_into). Returns as cr_store_batch_put_from. */
CR_API int cr_store_batch_get_into(cr_store_t *store, const char *const *keys,
                                   void *const *bufs, const size_t *caps, size_t n,
                                   size_t *lens, int *results);

/* Copying gets of n keys (1..CR_STORE_BATCH_MAX) into buffers the call
 * allocates, as cr_store_get_alloc() for each key but with one master
 * round trip for the batch: each buffer is sized from the version the
 * master located, so a value replaced meanwhile by one of another size is
 * still read whole (that version's bytes, never a mix). The values are
 * read through the local buffer, packed into one transfer batch per
 * quarter of it; a bigger value is read in chunks. A value larger than
 * max_len (0 = no bound) is not read: CR_E_BUFFER_OVERFLOW (a caller that
 * copies the values again reads big ones into their final place itself).
 * results[i] gets each key's status (as cr_store_get_alloc; duplicate
 * keys are read once per occurrence); where it is 0, outs[i] is a
 * malloc'd buffer of lens[i] bytes that the caller frees with free(),
 * elsewhere outs[i] and lens[i] are untouched. Returns 0 if every key
 * succeeded, else the first failing key's status; CR_E_INVALID_PARAMS
 * (NULL arrays, n out of range) with results untouched. */
CR_API int cr_store_batch_get_alloc(cr_store_t *store, const char *const *keys, size_t n,
                                    size_t max_len, void **outs, size_t *lens, int *results);

/* Existence of n keys: results[i] = 1 (exists), 0 (not), or a negative
 * error for that key; every object found is leased (cr_store_exist).
 * Returns 0, or CR_E_INVALID_PARAMS / CR_E_INVALID_KEY / CR_E_RPC_FAIL
 * (results untouched). */
CR_API int cr_store_batch_is_exist(cr_store_t *store, const char *const *keys, size_t n,
                                   int *results);

/* cr_store_batch_is_exist without the lease: a point-in-time answer that
 * leaves eviction and removal free (Mooncake's probe_key). */
CR_API int cr_store_batch_probe(cr_store_t *store, const char *const *keys, size_t n,
                                int *results);

/* ---- introspection (Mooncake's replica descriptors) ----------------------- */

#define CR_STORE_SHARD_MAX 16          /* shards (stripes) of one replica */
#define CR_STORE_SEGMENT_NAME_MAX 256  /* segment name incl. NUL */

/* One contiguous piece of a replica: [addr, addr+len) in segment's memory. */
typedef struct cr_store_shard_desc {
    char segment[CR_STORE_SEGMENT_NAME_MAX];
    uint64_t addr;
    uint64_t len;
} cr_store_shard_desc_t;

/* One complete replica of an object, as the master placed it. */
typedef struct cr_store_replica_desc {
    uint64_t replica_id;
    uint32_t n_shards; /* 1..CR_STORE_SHARD_MAX */
    cr_store_shard_desc_t shards[CR_STORE_SHARD_MAX];
} cr_store_replica_desc_t;

/* Where the replicas of key live now: fills out[0..min(cap, replicas)),
 * sets *n to the number of replicas (may exceed cap) and *size (optional)
 * to the value size. Like a get, it takes a read lease on the object.
 * Returns 0, CR_E_OBJECT_NOT_FOUND, CR_E_INVALID_KEY, CR_E_INVALID_PARAMS
 * (NULL store/n, out NULL with cap > 0), CR_E_RPC_FAIL. */
CR_API int cr_store_get_replica_desc(cr_store_t *store, const char *key,
                                     cr_store_replica_desc_t *out, size_t cap, size_t *n,
                                     uint64_t *size);

/* End-to-end value integrity (docs/security.md): a put fixes the crc32c of
 * the value at PutEnd (the master keeps it with the object) and a get checks
 * the bytes it read against it; bytes that do not match are read again from
 * another replica, or the get fails with CR_E_OBJECT_NOT_FOUND (a miss),
 * never returned. On by default; CRESCENT_STORE_CHECKSUM=0 in the
 * environment at cr_store_create turns computing and checking off for that
 * client. Returns the number of replica reads whose bytes failed the check
 * since create (0 for NULL). */
CR_API uint64_t cr_store_checksum_errors(const cr_store_t *store);

/* Speculative gets: cr_store_get_into of a key this client read before
 * with a single get, or put with a single put, starts reading from where the key was while it asks the master where it
 * is now, so a key that has not moved costs one round trip's wait instead
 * of two. The bytes are kept only when the master's answer names the
 * same version at the same place and they match the value's checksum;
 * otherwise the get runs the usual way (a moved key costs one wasted
 * read). The client remembers up to 16,384 keys (~0.8 MB; the least
 * recently used gives way). Batch calls neither use nor fill it. Not with
 * capabilities on (security), on disk tiers or for striped values. On by default with checksums; CRESCENT_LOCATION_CACHE=0
 * in the environment at cr_store_create turns it off. Since create,
 * *kept (may be NULL) counts the speculative gets that needed no usual get
 * (they returned the bytes read, or the master's answer such as a miss),
 * *dropped (may be NULL) those whose read was dropped for the usual get. */
CR_API void cr_store_location_cache_stats(const cr_store_t *store, uint64_t *kept,
                                          uint64_t *dropped);

/* cr_store_remove_all() with force: also removes objects under a live read
 * lease (their readers then fail validation, never read other bytes).
 * Returns as cr_store_remove_all(). */
CR_API int cr_store_remove_all_force(cr_store_t *store, int force, uint64_t *removed);

/* Removes every key matching pattern, a POSIX extended regular expression
 * (unanchored search, like Mooncake's remove_by_regex; "^prefix_" for a
 * prefix). Keys under a live read lease are skipped unless force. *removed
 * (optional) gets the count. Returns 0, CR_E_INVALID_PARAMS (empty or
 * over-long pattern, or one the master cannot compile), CR_E_RPC_FAIL. */
CR_API int cr_store_remove_by_regex(cr_store_t *store, const char *pattern, int force,
                                    uint64_t *removed);

/* ---- replica tasks (Mooncake's copy/move tasks) ----------------------------
 * The master records the task and allocates the target space; this client
 * moves the bytes with its Transfer Engine (cr_store_task_run) and the
 * master then adds the new replicas (MOVE: and drops the source one) in one
 * step. Readers never see a partial copy. A task not run to its end within
 * 60 s fails on the master and its target space is released. */
typedef struct cr_store_task_id {
    uint64_t hi, lo;
} cr_store_task_id_t;

#define CR_STORE_TASK_COPY 0 /* Mooncake's TaskType */
#define CR_STORE_TASK_MOVE 1
#define CR_STORE_TASK_PENDING 0 /* Mooncake's TaskStatus */
#define CR_STORE_TASK_PROCESSING 1
#define CR_STORE_TASK_SUCCESS 2
#define CR_STORE_TASK_FAILED 3
#define CR_STORE_TASK_TARGETS_MAX 7

/* Creates a task copying key to the segments targets[0..n) (COPY; targets
 * already holding a replica are skipped) or moving its replica on segment
 * source to targets[0] (MOVE, n == 1). Returns 0 and *id,
 * CR_E_OBJECT_NOT_FOUND (no complete object), CR_E_INVALID_PARAMS (unknown
 * or unmounted segment, move to the same segment, source holding no
 * replica, n out of 1..CR_STORE_TASK_TARGETS_MAX), CR_E_INVALID_KEY,
 * CR_E_TASK_PENDING_LIMIT_EXCEEDED, CR_E_RPC_FAIL. */
CR_API int cr_store_task_create(cr_store_t *store, int type, const char *key, const char *source,
                                const char *const *targets, size_t n, cr_store_task_id_t *id);

/* Moves the bytes of task id (created by this client) and reports the
 * result to the master. Returns 0 (task SUCCESS) or the error the task
 * failed with (also recorded in the task). Blocks for the copy. */
CR_API int cr_store_task_run(cr_store_t *store, cr_store_task_id_t id);

typedef struct cr_store_task_info {
    int type, status;        /* CR_STORE_TASK_* */
    int error;               /* 0 or the CR_E_* the task failed with */
    uint64_t created_unix_ms, updated_unix_ms;
    char executor[40];       /* hex id of the client that runs it */
    char message[96];
} cr_store_task_info_t;

/* State of task id. Returns 0 and *out, CR_E_TASK_NOT_FOUND, CR_E_RPC_FAIL. */
CR_API int cr_store_task_query(cr_store_t *store, cr_store_task_id_t id,
                               cr_store_task_info_t *out);

/* Mooncake's batch_replica_clear: for each key whose read lease expired,
 * drops its replica on segment (NULL or "" = the whole object); the
 * object goes when its last replica does. results[i]: 0 cleared,
 * CR_E_OBJECT_NOT_FOUND (no such key or no replica there),
 * CR_E_OBJECT_HAS_LEASE (skipped). Returns 0 or the error of the call. */
CR_API int cr_store_replica_clear(cr_store_t *store, const char *const *keys, size_t n,
                                  const char *segment, int *results);

#ifdef __cplusplus
}
#endif
#endif
