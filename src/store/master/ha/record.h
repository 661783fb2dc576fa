/* Master op records: the ordered description of every change to the
 * master's durable state (segments and objects; not leases, not clients).
 * One format for the local journal file (cold restart), the stream a
 * leader sends its standbys, and the snapshot that starts either.
 *
 * Frame (little-endian): u32 body_len, u32 check (low 32 bits of XXH3 of
 * the body), body. Body: u8 type, then by type:
 *   OBJ      u64 version, u64 size, u8 flags (CR__HA_OBJ_*), [u32 crc: flags has
 *            CR__HA_OBJ_CRC], u16 key_len, key,
 *            u8 n_rep, per replica: u8 n_shards (CR__HA_REP_DEAD: dropped, no shards), per shard:
 *            u16 seg_len, segment name, u64 offset (from the segment base), u64 len
 *            (an upsert: the object as it is now, its live replicas only)
 *   END      u64 version, u16 key_len, key           (PutEnd: now complete)
 *   DEL      u64 version, u16 key_len, key           (gone: revoke, remove, evict, ...)
 *   SEG      u64 base, u64 size, u64 client_hi, u64 client_lo, u16 name_len, name
 *   SEGDROP  u16 name_len, name
 *   VERSION  u64 next_version (versions below it are used)
 *   WIN      u16 name_len, name, u64 offset, u64 len: an allocation window opened
 *            on that segment (the leader hands out small replicas from it
 *            without waiting for its standbys; store-ha.md)
 *   WINEND   same layout: that window (its opening range) closed
 *   ENDC     u64 version, u32 crc, u16 key_len, key: END with the writer's
 *            end-to-end crc32c of the value (checksum.c), kept across failover
 *            and restart so restored objects are verified like the others
 *   HELD     u16 name_len, name, u64 client_hi, u64 client_lo, u64 base, u64 size,
 *            u64 hold_ms, u8 flags (CR__HA_HELD_*), u16 n (<= CR__HA_HELD_RG_MAX),
 *            n x (u64 off, u64 len, u64 ms): the name of a dropped segment held
 *            with its owner and memory (store/master/held.c), and the byte ranges
 *            (off from base, within size) stale readers and writers may still
 *            touch. Times are milliseconds *remaining* when the record was made
 *            (ms <= hold_ms <= CR__HA_HELD_MS_MAX), never a clock reading: a
 *            master restoring it counts them from its own now. Without
 *            CR__HA_HELD_MORE it replaces the entry of that name, owner and
 *            memory; with it, it adds ranges to that entry (a list longer than
 *            one record)
 *   HELDEND  u16 name_len, name, u64 client_hi, u64 client_lo, u64 base, u64 size:
 *            that hold is over
 * A journal written before a type existed simply has none of it; a reader
 * that predates a type takes it for corruption (store-ha.md, "Held names").
 * Bounds are the RPC ones (key, replicas, shards, segment names); a record
 * over CR__HA_REC_MAX bytes does not exist. */
#ifndef CR_STORE_MASTER_HA_RECORD_H
#define CR_STORE_MASTER_HA_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "store/rpc/protocol.h"

enum cr__ha_rec_type {
    CR__HA_OBJ = 1,
    CR__HA_END = 2,
    CR__HA_DEL = 3,
    CR__HA_SEG = 4,
    CR__HA_SEGDROP = 5,
    CR__HA_VERSION = 6,
    CR__HA_WIN = 7,
    CR__HA_WINEND = 8,
    CR__HA_ENDC = 9,
    CR__HA_HELD = 10,
    CR__HA_HELDEND = 11,
};

#define CR__HA_OBJ_COMPLETE 0x1
#define CR__HA_OBJ_HARD_PIN 0x2
#define CR__HA_OBJ_SOFT_PIN 0x4
#define CR__HA_OBJ_FS 0x8 /* a shared-FS file holds it (store/master/fs.c): kept with no replica */
#define CR__HA_OBJ_CRC 0x10 /* crc holds the value's end-to-end crc32c */
#define CR__HA_REP_DEAD 0x80 /* n_shards of a dropped replica (no shards follow) */
#define CR__HA_HELD_WHOLE 0x1 /* the whole memory is held (no ranges follow) */
#define CR__HA_HELD_MORE 0x2  /* more ranges of the entry the previous HELD made */
#define CR__HA_HELD_RG_MAX 1024u /* ranges in one HELD record */
#define CR__HA_HELD_MS_MAX (1ull << 40) /* a longer hold is a corrupt record */

#define CR__HA_FRAME_HDR 8
#define CR__HA_REC_MAX                                                                         \
    (64 + CR__RPC_KEY_MAX +                                                                    \
     CR__RPC_REPLICA_MAX * (1 + CR__RPC_SHARD_MAX * (2 + CR__RPC_SEGMENT_NAME_MAX + 16)))

typedef struct cr__ha_shard {
    const char *seg; /* NUL-terminated */
    uint64_t off, len;
} cr__ha_shard_t;

/* A held byte range of a HELD record: ms remaining from the record. */
typedef struct cr__ha_held_rg {
    uint64_t off, len, ms;
} cr__ha_held_rg_t;

/* A decoded record; strings point into the decoded buffer. */
typedef struct cr__ha_rec {
    uint8_t type;
    uint64_t version, size; /* OBJ/END/DEL; VERSION: version = next version */
    uint8_t flags;
    uint32_t crc; /* OBJ with CR__HA_OBJ_CRC; ENDC */
    const char *key; /* not NUL-terminated: key_len bytes */
    uint16_t key_len;
    uint8_t n_rep;
    uint8_t n_sh[CR__RPC_REPLICA_MAX];
    cr__ha_shard_t sh[CR__RPC_REPLICA_MAX * CR__RPC_SHARD_MAX]; /* replicas' shards in order */
    char segs[CR__RPC_REPLICA_MAX * CR__RPC_SHARD_MAX][CR__RPC_SEGMENT_NAME_MAX];
    uint64_t base, seg_size; /* SEG, HELD; WIN/WINEND: base = offset, seg_size = len */
    cr__rpc_client_id_t client; /* SEG, HELD, HELDEND */
    uint64_t hold_ms;           /* HELD (flags: CR__HA_HELD_*) */
    uint16_t n_hrg;
    char name[CR__RPC_SEGMENT_NAME_MAX]; /* SEG / SEGDROP / WIN / WINEND / HELD / HELDEND */
    cr__ha_held_rg_t hrg[CR__HA_HELD_RG_MAX]; /* HELD: n_hrg ranges */
} cr__ha_rec_t;

/* Growable byte buffer records are framed into. */
typedef struct cr__ha_buf {
    uint8_t *p;
    size_t len, cap;
    int err; /* sticky -ENOMEM */
} cr__ha_buf_t;

void cr__ha_buf_free(cr__ha_buf_t *b);
/* Appends n bytes; returns 0 or -ENOMEM (sticky in b->err). */
int cr__ha_buf_append(cr__ha_buf_t *b, const void *p, size_t n);

/* Frames one record of r (fields by type as above) at the end of b.
 * Returns 0, -EINVAL (a bound exceeded) or -ENOMEM (also sticky in b->err). */
int cr__ha_rec_put(cr__ha_buf_t *b, const cr__ha_rec_t *r);

/* Decodes the frame at p (avail bytes). Returns the frame length (> 0) and
 * *r, 0 if the frame is incomplete (need more bytes), or -EBADMSG (bad
 * check, length over CR__HA_REC_MAX, malformed body): the stream is
 * corrupt from here on. */
long cr__ha_rec_get(const uint8_t *p, size_t avail, cr__ha_rec_t *r);

#endif
