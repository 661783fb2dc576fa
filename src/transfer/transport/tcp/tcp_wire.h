/* tcp transport wire format (docs/architecture/tcp-wire.md).
 *
 * Every message starts with one fixed 32-byte little-endian header:
 *
 *   off size field
 *   0   4    magic    0x45545243 ("CRTE" in memory order)
 *   4   1    version  1
 *   5   1    opcode   request: 1 WRITE, 2 READ (3, 4: retired, were
 *                     GET_DESC/NOTIFY before the engine's control channel
 *                     took them); response: request opcode | 0x80
 *   6   2    flags    requests: bit 0 (CR__TCP_F_CAP) = an 80-byte
 *                     capability (common/auth/cap.h) follows this header,
 *                     before any payload; bit 1 (CR__TCP_F_WAITS) = a
 *                     caller waits for this reply (the server may
 *                     busy-poll for the next request, a hint only); other
 *                     bits 0 (receivers ignore unknown bits); responses: 0
 *   8   4    status   responses: 0 or a negative errno; requests: 0
 *   12  4    seq      request sequence number on this connection, echoed
 *   16  8    addr     WRITE/READ: target address in the server's memory;
 *                     otherwise 0
 *   24  8    len      bytes of payload that follow this header
 *                     (READ request: bytes requested, no payload)
 *
 * Requests on one connection are answered in order.
 */
#ifndef CR_TRANSFER_TCP_WIRE_H
#define CR_TRANSFER_TCP_WIRE_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#define CR__TCP_MAGIC 0x45545243u
#define CR__TCP_VERSION 1
#define CR__TCP_MAX_SLICE (64ull << 20)   /* bound on one WRITE/READ payload */

#define CR__TCP_F_CAP 0x1u   /* request flag: a capability follows the header */
#define CR__TCP_F_WAITS 0x2u /* request flag: a caller waits for the reply (hint) */
#define CR__TCP_CAP_LEN 80 /* = CR__CAP_LEN */

enum cr__tcp_op {
    CR__TCP_WRITE = 1,
    CR__TCP_READ = 2,
    CR__TCP_RESP = 0x80,
};

typedef struct cr__tcp_hdr {
    uint32_t magic;
    uint8_t version;
    uint8_t opcode;
    uint16_t flags;
    int32_t status;
    uint32_t seq;
    uint64_t addr;
    uint64_t len;
} cr__tcp_hdr_t;

_Static_assert(sizeof(cr__tcp_hdr_t) == 32, "tcp wire header is 32 bytes");

/* host <-> wire (little-endian) */
static inline void cr__tcp_hdr_enc(cr__tcp_hdr_t *w, uint8_t op, int32_t status, uint32_t seq,
                                   uint64_t addr, uint64_t len)
{
    w->magic = htole32(CR__TCP_MAGIC);
    w->version = CR__TCP_VERSION;
    w->opcode = op;
    w->flags = 0;
    w->status = (int32_t)htole32((uint32_t)status);
    w->seq = htole32(seq);
    w->addr = htole64(addr);
    w->len = htole64(len);
}

/* Adds request flags (CR__TCP_F_*) to an encoded header. */
static inline void cr__tcp_hdr_add_flags(cr__tcp_hdr_t *w, uint16_t f)
{
    w->flags = htole16((uint16_t)(le16toh(w->flags) | f));
}

/* Marks an encoded request as followed by a capability. */
static inline void cr__tcp_hdr_set_cap(cr__tcp_hdr_t *w) { cr__tcp_hdr_add_flags(w, CR__TCP_F_CAP); }

/* Decodes in place; returns 0 if magic and version are right, else -EPROTO. */

static inline int cr__tcp_hdr_dec(cr__tcp_hdr_t *h)
{
    h->magic = le32toh(h->magic);
    h->status = (int32_t)le32toh((uint32_t)h->status);
    h->flags = le16toh(h->flags);
    h->seq = le32toh(h->seq);
    h->addr = le64toh(h->addr);
    h->len = le64toh(h->len);
    return h->magic == CR__TCP_MAGIC && h->version == CR__TCP_VERSION ? 0 : -71 /* EPROTO */;
}

#endif
