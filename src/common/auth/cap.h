/* Per-object capabilities (issue 11 item 2, docs/security.md
 * "Capabilities"): a short-lived, MAC'd grant to READ and/or WRITE exactly
 * one byte range of one segment, minted by whoever holds the segment's
 * capability key (the master and the segment's owner) and checked by the
 * node serving that segment.
 *
 * Wire form (80 bytes, little-endian, _Static_assert'ed in cap.c):
 *   0  magic "CRCP" (u32)      4 version 1 (u8)   5 ops (u8: READ 1, WRITE 2)
 *   6  reserved 0 (u16)        8 segment id (u64: which mount of which segment)
 *   16 addr (u64)              24 len (u64)       32 expiry (u64, unix ms)
 *   40 epoch (u32: the master epoch that minted it; the node refuses an epoch
 *      older than the newest it has seen — a fencing token for HA)
 *   44 reserved 0 (u32)        48 mac[32] = HMAC-SHA256(key, "crescent cap v1\0" bytes 0..47)
 *
 * The master mints them (store/master/caps.c) into the replica lists of its
 * replies; the Transfer Engine carries them with each request and the
 * serving engine checks them (transfer/capability.c).
 *
 * Threads: all functions are pure except the table, which belongs to one
 * thread (one per connection).
 */
#ifndef CR_COMMON_AUTH_CAP_H
#define CR_COMMON_AUTH_CAP_H

#include <stddef.h>
#include <stdint.h>

#define CR__CAP_MAGIC 0x50435243u /* "CRCP" */
#define CR__CAP_VERSION 1
#define CR__CAP_LEN 80
#define CR__CAP_KEY_LEN 32
#define CR__CAP_READ 1u
#define CR__CAP_WRITE 2u
#define CR__CAP_TTL_MAX_MS (10u * 60u * 1000u) /* a verifier refuses longer-lived grants */

typedef struct cr__cap {
    uint8_t ops;
    uint64_t seg_id;
    uint32_t epoch;
    uint64_t addr, len;
    uint64_t expiry_ms;
    uint8_t mac[32];
} cr__cap_t;

/* Fills out[CR__CAP_LEN] with a capability for [addr, addr + len) of
 * segment seg_id, ops (READ|WRITE), minted under master epoch `epoch`, valid
 * until expiry_ms (unix ms). Returns 0, -EINVAL (no ops, len 0, addr + len
 * overflows) or -EIO. */
int cr__cap_mint(const uint8_t key[CR__CAP_KEY_LEN], uint8_t ops, uint64_t seg_id,
                 uint32_t epoch, uint64_t addr, uint64_t len, uint64_t expiry_ms,
                 uint8_t out[CR__CAP_LEN]);

/* Parses exactly CR__CAP_LEN bytes (no MAC check). Returns 0 or -EBADMSG
 * (length, magic, version, unknown op bits, reserved bytes, len 0, range
 * overflow). Fuzzed. */
int cr__cap_parse(const uint8_t *buf, size_t len, cr__cap_t *out);

/* Parses and checks the MAC of a capability for segment seg_id at time
 * now_ms. Returns 0 and *out, -EBADMSG (malformed), -EACCES (bad MAC,
 * another segment, expired, or an expiry further than CR__CAP_TTL_MAX_MS
 * ahead). */
int cr__cap_verify(const uint8_t key[CR__CAP_KEY_LEN], uint64_t seg_id, const uint8_t *buf,
                   size_t len, uint64_t now_ms, cr__cap_t *out);

/* 1 if c grants op on [addr, addr + len) at now_ms, else 0. */
int cr__cap_covers(const cr__cap_t *c, uint8_t op, uint64_t addr, uint64_t len, uint64_t now_ms);

/* A connection's verified grants: bounded; adding to a full table replaces
 * the grant that expires first (expired ones go first). The caller's
 * memory; zero it to initialise. */
#define CR__CAP_TABLE_SLOTS 64
typedef struct cr__cap_table {
    cr__cap_t g[CR__CAP_TABLE_SLOTS];
    unsigned n;
} cr__cap_table_t;

void cr__cap_table_add(cr__cap_table_t *t, const cr__cap_t *c);
/* 1 if some grant of t covers op on [addr, addr + len) at now_ms. */
int cr__cap_table_allows(const cr__cap_table_t *t, uint8_t op, uint64_t addr, uint64_t len,
                         uint64_t now_ms);

#endif
