/* Store control-plane protocol: the messages between store clients
 * (src/store/client, crescent-node) and the master (crescent-master).
 * Full description with byte layouts: docs/protocol.md.
 *
 * Transport: TCP, one persistent connection per client RPC channel. Each
 * message is one frame = a fixed 32-byte header + a payload of
 * header.payload_len bytes. Everything is little-endian. Requests and
 * replies are matched by req_id; on one connection the master answers
 * requests in order, one reply per request.
 *
 * Frame errors: a frame whose magic or version is wrong, or whose
 * payload_len exceeds CR__RPC_PAYLOAD_MAX, closes the connection (the stream
 * cannot be resynchronised). A frame with a good header whose payload does
 * not decode (truncated field, a bound exceeded, unknown type) gets a reply
 * with type = request type | CR__RPC_REPLY, status = CR_E_INVALID_PARAMS and
 * an empty payload; the connection stays usable. A client reading such a
 * reply gets status != 0 and no items.
 *
 * Object operations are all batch-shaped on the wire: the payload is a
 * count followed by count items; the single-key message types require
 * count == 1, the CR__RPC_BATCH_* types accept 1..CR__RPC_BATCH_MAX. Every
 * reply item carries its own status (per-key results); the reply header
 * status is 0 when the request was processed (per-key errors live in the
 * items), except for single-key types where it repeats the item's status.
 *
 * Stale-read contract (client <-> master):
 *   1. GetReplicaList returns, per key, the object version, its size, the
 *      complete replicas (each with a replica_id) and lease_ms: a read lease
 *      valid for lease_ms from when the master answered. While the lease is
 *      live the object is not removed (Remove without force gets
 *      CR_E_OBJECT_HAS_LEASE) and not evicted, and when it is freed anyway
 *      (force remove, owner gone) its space is quarantined until the lease
 *      expires, so a reader that finishes within lease_ms reads good bytes.
 *      This also holds when the replica's segment is dropped (owner's
 *      heartbeat lapsed, unmount) and the same name is mounted again: the
 *      master allocates nothing on the remounted segment before the leases
 *      (and put deadlines) of the dropped replicas have expired.
 *   2. A reader that cannot prove it finished within the lease (measure
 *      from before sending GetReplicaList) MUST, after its transfer has
 *      completed, send Validate(key, version, replica_id) for the replica it
 *      read (BatchValidate for batches). Status 0 means that replica of
 *      that exact version was still attached at validation time, so the
 *      space could not have been reused in between (replica space is never
 *      reused while attached; versions are never reused, also across master
 *      restarts). Any other status (CR_E_OBJECT_NOT_FOUND, CR_E_REPLICA_IS_GONE)
 *      means the bytes may be stale: the get must fail (a miss), never
 *      return them. Validating every read is always allowed and cheap.
 *   3. Writers: PutStart's reply item carries lease_ms = the put deadline
 *      (ms from the reply). A writer must not start transfers into the
 *      replica space after that deadline; it sends PutRevoke (or nothing).
 *      The master reclaims a put not ended by the deadline, and quarantines
 *      its space for another deadline period before reuse. PutEnd after the
 *      deadline gets CR_E_OBJECT_NOT_FOUND (the put is gone).
 *
 * Ownership: cr__rpc_decode() allocates the decoded arrays and strings in
 * an arena owned by the message; release with cr__rpc_msg_free(). Encoding
 * reads the message and never keeps pointers to it.
 */
#ifndef CR_STORE_RPC_PROTOCOL_H
#define CR_STORE_RPC_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "crescent/common.h"

#define CR__RPC_MAGIC 0x4d535243u /* "CRSM" little-endian */
#define CR__RPC_VERSION 1
#define CR__RPC_HDR_SIZE 32

/* Bounds, checked by the decoder before anything is allocated. */
#define CR__RPC_PAYLOAD_MAX (64u << 20) /* bytes in one frame's payload */
#define CR__RPC_KEY_MAX 4096            /* bytes in a key (no NUL on the wire) */
#define CR__RPC_BATCH_MAX 4096          /* items in one message */
#define CR__RPC_REPLICA_MAX 8           /* replicas of one object */
#define CR__RPC_SHARD_MAX 16            /* shards (stripes) of one replica */
#define CR__RPC_PREFERRED_MAX 8         /* preferred segments in one config */
#define CR__RPC_EXCLUDE_MAX 16          /* segments in one PutStart's exclusion list */
#define CR__RPC_SEGMENT_NAME_MAX 256    /* segment name incl. NUL (= CR_XFER_NAME_MAX) */
#define CR__RPC_VALUE_MAX (1ull << 36)  /* bytes in one object (64 GiB) */

/* Message types. A reply has the request's type | CR__RPC_REPLY. */
enum cr__rpc_type {
    CR__RPC_PING = 1,            /* heartbeat: client_id -> flags, master_id */
    CR__RPC_MOUNT_SEGMENT = 2,   /* client_id, segment, base, size */
    CR__RPC_UNMOUNT_SEGMENT = 3, /* client_id, segment */
    CR__RPC_REMOVE_ALL = 4,      /* flags (FORCE) -> count */

    /* single-key object operations (count must be 1) */
    CR__RPC_PUT_START = 10,
    CR__RPC_PUT_END = 11,
    CR__RPC_PUT_REVOKE = 12,
    CR__RPC_GET_REPLICA_LIST = 13,
    CR__RPC_EXIST = 14,
    CR__RPC_GET_SIZE = 15,
    CR__RPC_REMOVE = 16,
    CR__RPC_VALIDATE = 17,

    /* batch forms: same item layout, 1..CR__RPC_BATCH_MAX items */
    CR__RPC_BATCH_PUT_START = 30,
    CR__RPC_BATCH_PUT_END = 31,
    CR__RPC_BATCH_PUT_REVOKE = 32,
    CR__RPC_BATCH_GET_REPLICA_LIST = 33,
    CR__RPC_BATCH_EXIST = 34,
    CR__RPC_BATCH_GET_SIZE = 35,
    CR__RPC_BATCH_REMOVE = 36,
    CR__RPC_BATCH_VALIDATE = 37,

    /* master high availability (0x40-0x4f) */
    CR__RPC_REPL_APPEND = 0x41, /* leader -> standby: flags (RESET), count = seq of the
                                   first record, blob = op records (store/master/ha);
                                   reply: count = records applied in total */

    /* tiered store (i12; docs/architecture/store-tiers.md): a node's disk
     * tier talks to the master with these. All three share one layout
     * (cr__rpc_tier_* below): header fields client_id, segment, base, size,
     * count, flags and 0..CR__RPC_BATCH_MAX items with every item field. */
    CR__RPC_TIER_MOUNT = 0x60,  /* mount a disk segment (segment, size = capacity) */
    CR__RPC_TIER_REPORT = 0x61, /* adopt objects found on disk (restart) */
    CR__RPC_TIER_SYNC = 0x62,   /* completions in, tasks out */
    /* shared-file-system tier (--root_fs_dir; store/master/fs.c), same layout */
    CR__RPC_FS_INFO = 0x63, /* -> items[0].key = the tier's directory (<root>/<cluster_id>);
                               no items: no such tier */
    CR__RPC_FS_SYNC = 0x64, /* items: key, version, size, crc, flags = op (CR__TIER_FS_OP_*)
                               -> items[].status */

    /* 0x70-0x7f: Mooncake API operations (issue 13) */
    CR__RPC_REMOVE_BY_REGEX = 0x70, /* flags (FORCE), pattern -> count */
    /* Replica tasks and per-replica clear (store/master/rtask.c). These
     * use the tier messages' layout (every header field, items with every
     * item field). A task id is (base, count) = (hi, lo). */
    CR__RPC_RTASK_CREATE = 0x71, /* flags = 0 copy / 1 move, items[0].key = key,
                                    segment = move source, items[1..].key = targets
                                    -> base, count = task id */
    CR__RPC_RTASK_QUERY = 0x72,  /* base, count = id -> flags = status, size = type,
                                    base/count = created/updated (unix ms), segment =
                                    executor, items[0]: key = message, status = error */
    CR__RPC_RTASK_START = 0x73,  /* base, count = id (sent by the executor) -> items[0]:
                                    key, version, size, replicas[0] = source;
                                    items[1..]: replicas[0] = a new target replica */
    CR__RPC_RTASK_END = 0x74,    /* base, count = id, flags = (int32) result of the
                                    copies -> status */
    CR__RPC_REPLICA_CLEAR = 0x75, /* segment ("" = every replica), items[].key ->
                                     items[].status: 0 cleared, -704, -706 */
    /* One-round-trip put (store/master/reserve.c), same layout as tier:
     * RESERVE: client_id, size = bytes wanted -> count = lease ms, items[0]:
     *   version = reservation id, size = length, replica_id = allocation
     *   granule, replicas[0] = one shard {segment, addr, len, cap (WRITE)}.
     * PUT_COMMIT: client_id, items[]: key, size, version = reservation id,
     *   flags (CRC), replica_id = crc32c when CRC, replicas[0] = one shard
     *   {segment, addr, len = size} -> items[].status, version, size;
     *   CR_E_INVALID_WRITE: not inside a live reservation of this client
     *   (nothing visible; the client puts it the two-phase way). */
    CR__RPC_RESERVE = 0x76,
    CR__RPC_PUT_COMMIT = 0x77,

    /* connection authentication (security on, docs/security.md): the
     * payload is one message of src/common/auth/auth.h. Handled by the
     * server loop before any decoding; not known to cr__rpc_encode/decode.
     * HELLO's reply carries the CHALLENGE; PROOF's reply has status 0 (the
     * connection is now a member's) or CR_E_ILLEGAL_CLIENT and the
     * connection is closed. */
    CR__RPC_AUTH_HELLO = 0x50,
    CR__RPC_AUTH_PROOF = 0x51,
};
/* 1 if type (without the reply bit) is one of the tier messages. */
#define CR__RPC_IS_TIER(t) (((t) & 0x7fffu) >= CR__RPC_TIER_MOUNT && ((t) & 0x7fffu) <= CR__RPC_FS_SYNC)
/* 1 if type is one of the replica-task messages (same layout as tier). */
#define CR__RPC_IS_RTASK(t) (((t) & 0x7fffu) >= CR__RPC_RTASK_CREATE && ((t) & 0x7fffu) <= CR__RPC_REPLICA_CLEAR)
/* 1 if type is RESERVE or PUT_COMMIT (same layout as tier). */
#define CR__RPC_IS_RESV(t) (((t) & 0x7fffu) == CR__RPC_RESERVE || ((t) & 0x7fffu) == CR__RPC_PUT_COMMIT)
#define CR__RPC_REPLY 0x8000u
#define CR__RPC_BATCH_OFFSET 20 /* CR__RPC_BATCH_X == CR__RPC_X + 20 */

/* flags */
#define CR__RPC_F_FORCE 0x1u          /* REMOVE / REMOVE_ALL item or msg flags */
#define CR__RPC_F_NEED_REMOUNT 0x1u   /* PING reply: the master does not know this
                                         client or dropped its segments: remount all */
#define CR__RPC_F_CAPS 0x2u          /* PING reply: this master grants per-object
                                         capabilities (store/master/caps.c) */
#define CR__RPC_F_EXCLUDE 0x4u       /* PING reply: this master reads PutStart's
                                         exclusion list (CR__RPC_HF_EXCLUDE); a client
                                         sends one only to a master that said so */
#define CR__RPC_F_REPL_RESET 0x1u     /* REPL_APPEND: a snapshot starts; forget the rest */
#define CR__RPC_F_CRC 0x2u            /* item: `crc` holds the value's crc32c (PUT_END
                                         request, GET_REPLICA_LIST reply) */
/* header flags (cr__rpc_hdr_t.flags, cr__rpc_msg_t.hflags) */
#define CR__RPC_HF_LEASE 0x1u         /* EXIST / BATCH_EXIST request: every object
                                         found gets a read lease, as from
                                         GET_REPLICA_LIST (Mooncake's ExistKey) */
#define CR__RPC_HF_EXCLUDE 0x2u       /* PUT_START / BATCH_PUT_START request: the
                                         payload ends with the exclusion list
                                         (cr__rpc_msg_t.exclude); set by the encoder */
#define CR__RPC_CFG_SOFT_PIN 0x1u     /* replicate config flags */
#define CR__RPC_CFG_HARD_PIN 0x2u
#define CR__RPC_CFG_UPSERT 0x4u       /* PutStart of an existing key: replace it at
                                         PutEnd (store/master/upsert.c) */

/* Fixed-width wire header (little-endian on the wire; this struct is the
 * decoded host form with the same field order and sizes). */
typedef struct cr__rpc_hdr {
    uint32_t magic;       /* CR__RPC_MAGIC */
    uint16_t version;     /* CR__RPC_VERSION */
    uint16_t type;        /* enum cr__rpc_type, | CR__RPC_REPLY for replies */
    uint64_t req_id;      /* chosen by the client, echoed in the reply */
    uint32_t payload_len; /* bytes after the header, <= CR__RPC_PAYLOAD_MAX */
    int32_t status;       /* replies: 0 or a CR_E_* code; requests: 0 */
    uint32_t flags;       /* CR__RPC_HF_* (request options; unknown bits ignored) */
    uint32_t epoch;       /* HA: replies carry the serving leader's epoch, requests the
                             highest the sender has seen; 0 = none (no HA) */
} cr__rpc_hdr_t;
_Static_assert(sizeof(cr__rpc_hdr_t) == CR__RPC_HDR_SIZE, "rpc header is 32 bytes");

typedef struct cr__rpc_client_id {
    uint64_t hi, lo; /* random 128-bit id chosen by the client at start */
} cr__rpc_client_id_t;

/* One contiguous piece of a replica: [addr, addr+len) in the memory of the
 * TE segment `segment` (an absolute virtual address in that segment's
 * owner, i.e. mount base + offset). */
typedef struct cr__rpc_shard {
    const char *segment; /* NUL-terminated, < CR__RPC_SEGMENT_NAME_MAX */
    uint64_t addr;
    uint64_t len;
    /* NULL, or the CR__RPC_CAP_LEN-byte capability the master granted for
     * exactly this shard (common/auth/cap.h; in the arena after decode).
     * Every replica list carries them in one trailing block (protocol.md). */
    const uint8_t *cap;
} cr__rpc_shard_t;
#define CR__RPC_CAP_LEN 80 /* = CR__CAP_LEN */

/* One replica = the value's bytes in order over its shards (the sum of
 * shard lens is the value size). Replicas of one object never share a
 * segment. */
typedef struct cr__rpc_replica {
    uint64_t replica_id; /* unique over all objects and master lifetimes */
    uint32_t n_shards;   /* 1..CR__RPC_SHARD_MAX */
    cr__rpc_shard_t *shards;
} cr__rpc_replica_t;

/* Replicate config of a PutStart item. */
typedef struct cr__rpc_repl_cfg {
    uint32_t replica_num;  /* 1..CR__RPC_REPLICA_MAX (0 = 1) */
    uint32_t flags;        /* CR__RPC_CFG_SOFT_PIN | CR__RPC_CFG_HARD_PIN | CR__RPC_CFG_UPSERT */
    uint32_t n_preferred;  /* 0..CR__RPC_PREFERRED_MAX */
    const char **preferred; /* segment names */
} cr__rpc_repl_cfg_t;

/* One item of an object operation. Which fields travel depends on the type
 * (see the table in docs/protocol.md); others are ignored by the encoder
 * and zero after decoding.
 *
 *                      request fields            reply fields
 *   PUT_START          key, size, cfg            status, version, lease_ms
 *                                                (= put deadline), replicas
 *   PUT_END            key, version, flags (CRC), status
 *                      crc
 *   PUT_REVOKE         key, version              status
 *   GET_REPLICA_LIST   key                       status, version, size,
 *                                                lease_ms, replicas (complete),
 *                                                flags (CRC), crc
 *   EXIST              key                       status (0 = exists,
 *                                                CR_E_OBJECT_NOT_FOUND = no)
 *   GET_SIZE           key                       status, size
 *   REMOVE             key, flags (FORCE)        status
 *   VALIDATE           key, version, replica_id  status (0 = bytes good)
 */
typedef struct cr__rpc_item {
    const char *key; /* NUL-terminated after decode; key_len bytes, 0..CR__RPC_KEY_MAX */
    uint32_t key_len;
    int32_t status;
    uint64_t size;
    uint64_t version;
    uint64_t replica_id;
    uint32_t flags;
    uint32_t lease_ms;
    cr__rpc_repl_cfg_t cfg;
    uint32_t n_replicas; /* 0..CR__RPC_REPLICA_MAX */
    cr__rpc_replica_t *replicas;
    uint32_t crc; /* end-to-end value checksum (crc32c) when flags has CR__RPC_F_CRC */
} cr__rpc_item_t;

/* A decoded or to-be-encoded message. Fields by type:
 *   PING req:        client_id [, segment: optional, the segment the sender
 *                    holds mounted; if the master does not have it mounted
 *                    for this client the reply says NEED_REMOUNT]
 *   PING reply:      status, flags (NEED_REMOUNT), master_id, count = client
 *                    ttl in ms (a client silent that long loses its segments)
 *   MOUNT req:       client_id, segment, base, size
 *                    reply: status (0, CR_E_SEGMENT_ALREADY_EXISTS when the
 *                    name is mounted by another client or with another
 *                    range; remounting the same range by the same client is 0)
 *                    [, blob: with capabilities on (store/master/caps.c), the
 *                    segment's capability key: seg_id u64 + key[32] + master_id
 *                    u64; the reply's epoch is the master's]
 *   UNMOUNT req:     client_id, segment; reply: status (0,
 *                    CR_E_SEGMENT_NOT_FOUND)
 *   REMOVE_ALL req:  flags (FORCE); reply: status, count (objects removed)
 *   object ops:      n_items, items
 */
typedef struct cr__rpc_msg {
    uint16_t type;
    uint64_t req_id;
    int32_t status;
    uint32_t flags;
    cr__rpc_client_id_t client_id;
    const char *segment; /* NUL-terminated, < CR__RPC_SEGMENT_NAME_MAX */
    uint64_t base;
    uint64_t size;
    uint64_t master_id;
    uint64_t count;
    uint32_t n_items;
    cr__rpc_item_t *items;
    uint32_t epoch;      /* header epoch (see cr__rpc_hdr_t) */
    uint32_t hflags;     /* header flags: CR__RPC_HF_* (0 from older senders) */
    const uint8_t *blob; /* REPL_APPEND request: blob_len bytes (in the arena after decode) */
    uint32_t blob_len;
    const char *pattern; /* REMOVE_BY_REGEX: NUL-terminated, 1..CR__RPC_KEY_MAX bytes */
    /* PUT_START / BATCH_PUT_START request: segments the master places on
     * only when nothing fits elsewhere even after eviction (the client's
     * suspect segments); 0..CR__RPC_EXCLUDE_MAX names, one list for every
     * item. On the wire only when n_exclude > 0: after the items, with
     * the header flag CR__RPC_HF_EXCLUDE (an older decoder refuses it). */
    uint32_t n_exclude;
    const char **exclude;
    void *arena; /* private: decode allocations */
} cr__rpc_msg_t;

/* Growable output buffer for encoding. */
typedef struct cr__rpc_buf {
    uint8_t *data;
    size_t len, cap;
    int err; /* sticky: -ENOMEM or -E2BIG (payload over CR__RPC_PAYLOAD_MAX) */
} cr__rpc_buf_t;

void cr__rpc_buf_init(cr__rpc_buf_t *b);
void cr__rpc_buf_free(cr__rpc_buf_t *b);

/* 1 if type (without the reply bit) is a known request type. */
int cr__rpc_type_valid(uint16_t type);
/* 1 if type (without the reply bit) is an object operation (has items). */
int cr__rpc_type_has_items(uint16_t type);
/* The single-key type for a batch type and vice versa is type -/+ 20. */
const char *cr__rpc_type_name(uint16_t type); /* static string, "?" if unknown */

/* Encodes header + payload of m into b (b->len reset to 0 first). A reply
 * is encoded when m->type has CR__RPC_REPLY. Returns 0, -EINVAL (unknown
 * type, item count or a field out of bounds — the encoder checks the same
 * bounds as the decoder), -E2BIG (payload too large) or -ENOMEM. */
int cr__rpc_encode(const cr__rpc_msg_t *m, cr__rpc_buf_t *b);

/* Decodes and validates a 32-byte header. Returns 0, or -EPROTO (bad magic
 * or version, payload_len > CR__RPC_PAYLOAD_MAX): the peer must be
 * disconnected. */
int cr__rpc_decode_hdr(const void *buf, cr__rpc_hdr_t *h);

/* Decodes a payload of exactly len bytes for header h into *m (m is
 * zeroed first). Every length and count is checked against the bounds and
 * against the bytes remaining before allocating. On success m owns an arena
 * (free with cr__rpc_msg_free). Returns 0, -EBADMSG (malformed, truncated,
 * trailing bytes, bound exceeded, unknown type) or -ENOMEM; on failure
 * nothing needs freeing. The payload buffer may be released after return. */
int cr__rpc_decode(const cr__rpc_hdr_t *h, const void *payload, size_t len, cr__rpc_msg_t *m);

/* Allocates n zeroed bytes (8-byte aligned) in m's arena, creating it if
 * needed: handy to build items/replicas/strings of a message to encode.
 * Freed by cr__rpc_msg_free(). Returns NULL on -ENOMEM. */
void *cr__rpc_msg_alloc(cr__rpc_msg_t *m, size_t n);
/* Copies len bytes of s + a NUL into m's arena. Returns NULL on -ENOMEM. */
char *cr__rpc_msg_strdup(cr__rpc_msg_t *m, const char *s, size_t len);

/* Frees the arena of a message (decoded or built with cr__rpc_msg_alloc)
 * and zeroes it. NULL-safe; safe on a zeroed message. */
void cr__rpc_msg_free(cr__rpc_msg_t *m);

#endif
